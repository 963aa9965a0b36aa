//! SPF/DMARC probes and host lookups through a configurable resolver.
//!
//! [`Dns`] wraps a hickory [`TokioResolver`] that either queries an explicit
//! list of servers or the `nameserver` lines of `/etc/resolv.conf`. It keeps
//! no cache, so a changed record is seen by the very next lookup.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hickory_resolver::config::{
    LookupIpStrategy, NameServerConfig, ResolveHosts, ResolverConfig, ResolverOpts,
};
use hickory_resolver::name_server::TokioConnectionProvider;
use hickory_resolver::proto::ProtoErrorKind;
use hickory_resolver::proto::op::ResponseCode;
use hickory_resolver::proto::xfer::Protocol;
use hickory_resolver::{Name, ResolveError, TokioResolver};

/// Per-attempt timeout of one query.
const TIMEOUT: Duration = Duration::from_secs(2);
/// Attempts per query before giving up.
const ATTEMPTS: usize = 2;
/// Where the system resolver configuration lives.
const RESOLV_CONF: &str = "/etc/resolv.conf";

/// Errors from [`Dns`].
#[derive(Debug, thiserror::Error)]
pub enum DnsError {
    /// The resolver could not be configured (no servers, unreadable resolv.conf).
    #[error("DNS configuration: {0}")]
    Config(String),
    /// The name is not a valid domain name.
    #[error("invalid domain name {0:?}")]
    InvalidName(String),
    /// The host exists in neither A nor AAAA (or does not exist at all).
    #[error("no A/AAAA records for {0}")]
    NoRecords(String),
    /// The lookup itself failed: timeout, SERVFAIL, refused, network error.
    #[error("DNS lookup of {name} failed: {source}")]
    Lookup {
        name: String,
        #[source]
        source: ResolveError,
    },
}

/// A DNS client for the few lookups the service needs.
#[derive(Clone)]
pub struct Dns {
    resolver: TokioResolver,
}

impl std::fmt::Debug for Dns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dns")
            .field("servers", &self.resolver.config().name_servers())
            .finish()
    }
}

impl Dns {
    /// A resolver querying exactly `servers` (UDP, falling back to TCP), or,
    /// with `None`, the `nameserver` entries of `/etc/resolv.conf`.
    pub fn new(servers: Option<&[SocketAddr]>) -> Result<Dns, DnsError> {
        let (servers, hosts) = match servers {
            Some(list) => (list.to_vec(), ResolveHosts::Never),
            None => {
                let text = std::fs::read_to_string(RESOLV_CONF)
                    .map_err(|e| DnsError::Config(format!("reading {RESOLV_CONF}: {e}")))?;
                (parse_resolv_conf(&text), ResolveHosts::Auto)
            }
        };
        if servers.is_empty() {
            return Err(DnsError::Config("no DNS servers configured".into()));
        }

        let mut config = ResolverConfig::new();
        for addr in servers {
            config.add_name_server(NameServerConfig::new(addr, Protocol::Udp));
            config.add_name_server(NameServerConfig::new(addr, Protocol::Tcp));
        }

        let mut opts = ResolverOpts::default();
        opts.timeout = TIMEOUT;
        // hickory's `attempts` counts retries after the first try.
        opts.attempts = ATTEMPTS - 1;
        opts.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
        opts.use_hosts_file = hosts;
        opts.try_tcp_on_error = true;
        // No caching: with capacity 0 and every TTL clamped to zero, each
        // lookup goes to the server.
        opts.cache_size = 0;
        opts.positive_max_ttl = Some(Duration::ZERO);
        opts.negative_max_ttl = Some(Duration::ZERO);

        let resolver =
            TokioResolver::builder_with_config(config, TokioConnectionProvider::default())
                .with_options(opts)
                .build();
        Ok(Dns { resolver })
    }

    /// All TXT records at `name`, each record's character-strings
    /// concatenated (RFC 7208 §3.3). A missing name or no TXT records yields
    /// an empty list; timeouts and server failures are errors.
    pub async fn txt(&self, name: &str) -> Result<Vec<String>, DnsError> {
        let fqdn = to_fqdn(name)?;
        match self.resolver.txt_lookup(fqdn).await {
            Ok(lookup) => Ok(lookup
                .iter()
                .map(|txt| {
                    let bytes: Vec<u8> = txt
                        .txt_data()
                        .iter()
                        .flat_map(|s| s.iter().copied())
                        .collect();
                    String::from_utf8_lossy(&bytes).into_owned()
                })
                .collect()),
            Err(e) if is_no_data(&e) => Ok(Vec::new()),
            Err(source) => Err(DnsError::Lookup {
                name: name.to_owned(),
                source,
            }),
        }
    }

    /// The A and AAAA addresses of `host`. An IP literal is returned as is,
    /// without a query. A host with no addresses is [`DnsError::NoRecords`].
    pub async fn lookup_ips(&self, host: &str) -> Result<Vec<IpAddr>, DnsError> {
        let literal = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if let Ok(ip) = literal.parse::<IpAddr>() {
            return Ok(vec![ip]);
        }
        let fqdn = to_fqdn(host)?;
        match self.resolver.lookup_ip(fqdn).await {
            Ok(lookup) => {
                let ips: Vec<IpAddr> = lookup.iter().collect();
                if ips.is_empty() {
                    Err(DnsError::NoRecords(host.to_owned()))
                } else {
                    Ok(ips)
                }
            }
            Err(e) if is_no_data(&e) => Err(DnsError::NoRecords(host.to_owned())),
            Err(source) => Err(DnsError::Lookup {
                name: host.to_owned(),
                source,
            }),
        }
    }

    /// The IPv4 (A) or, with `v6`, the IPv6 (AAAA) addresses of `name`. A
    /// name without such records (or no name at all) yields an empty list;
    /// timeouts and server failures are errors.
    pub async fn addresses(&self, name: &str, v6: bool) -> Result<Vec<IpAddr>, DnsError> {
        let fqdn = to_fqdn(name)?;
        let found = if v6 {
            self.resolver
                .ipv6_lookup(fqdn)
                .await
                .map(|l| l.iter().map(|r| IpAddr::V6(r.0)).collect())
        } else {
            self.resolver
                .ipv4_lookup(fqdn)
                .await
                .map(|l| l.iter().map(|r| IpAddr::V4(r.0)).collect())
        };
        match found {
            Ok(ips) => Ok(ips),
            Err(e) if is_no_data(&e) => Ok(Vec::new()),
            Err(source) => Err(DnsError::Lookup {
                name: name.to_owned(),
                source,
            }),
        }
    }

    /// The exchanges of the MX records of `name`, most preferred first
    /// (without the trailing dot). None yields an empty list; timeouts and
    /// server failures are errors.
    pub async fn mx(&self, name: &str) -> Result<Vec<String>, DnsError> {
        let fqdn = to_fqdn(name)?;
        match self.resolver.mx_lookup(fqdn).await {
            Ok(lookup) => {
                let mut records: Vec<(u16, String)> = lookup
                    .iter()
                    .map(|mx| {
                        let host = mx.exchange().to_utf8();
                        let host = host.strip_suffix('.').unwrap_or(&host).to_owned();
                        (mx.preference(), host)
                    })
                    .collect();
                records.sort();
                Ok(records.into_iter().map(|(_, host)| host).collect())
            }
            Err(e) if is_no_data(&e) => Ok(Vec::new()),
            Err(source) => Err(DnsError::Lookup {
                name: name.to_owned(),
                source,
            }),
        }
    }

    /// Whether the SPF record at `name` has the pass-qualified mechanism
    /// `include:<include>` (e.g. `amazonses.com`). Per RFC 7208 §4.5 more
    /// than one `v=spf1` record is a permanent error, so that yields `false`.
    pub async fn spf_includes(&self, name: &str, include: &str) -> Result<bool, DnsError> {
        let records = self.txt(name).await?;
        let mut spf = records.iter().filter(|r| has_version(r, "v=spf1"));
        match (spf.next(), spf.next()) {
            (Some(record), None) => Ok(spf_record_includes(record, include)),
            _ => Ok(false),
        }
    }

    /// Whether `_dmarc.<domain>` holds exactly one `v=DMARC1` record
    /// (RFC 7489 §6.6.3: several such records mean no policy).
    pub async fn has_dmarc(&self, domain: &str) -> Result<bool, DnsError> {
        let domain = domain.trim_end_matches('.');
        let records = self.txt(&format!("_dmarc.{domain}")).await?;
        Ok(records
            .iter()
            .filter(|r| has_version(r, "v=DMARC1"))
            .count()
            == 1)
    }
}

/// Parse `name` as an absolute domain name, so no search list applies.
fn to_fqdn(name: &str) -> Result<Name, DnsError> {
    let trimmed = name.trim();
    if trimmed.is_empty() {
        return Err(DnsError::InvalidName(name.to_owned()));
    }
    let mut parsed =
        Name::from_utf8(trimmed).map_err(|_| DnsError::InvalidName(name.to_owned()))?;
    parsed.set_fqdn(true);
    Ok(parsed)
}

/// NXDOMAIN or NOERROR-without-answers: the name simply has no such records.
/// SERVFAIL, REFUSED and friends are reported by hickory with the same kind
/// but a different response code, and stay errors.
fn is_no_data(e: &ResolveError) -> bool {
    matches!(
        e.proto().map(|p| p.kind()),
        Some(ProtoErrorKind::NoRecordsFound {
            response_code: ResponseCode::NXDomain | ResponseCode::NoError,
            ..
        })
    )
}

/// `record` starts with the version tag `version` (ASCII case-insensitive),
/// followed by the end, whitespace or `;`.
pub(crate) fn has_version(record: &str, version: &str) -> bool {
    let record = record.trim_start();
    let Some(head) = record.get(..version.len()) else {
        return false;
    };
    if !head.eq_ignore_ascii_case(version) {
        return false;
    }
    match record[version.len()..].chars().next() {
        None => true,
        Some(c) => c.is_ascii_whitespace() || c == ';',
    }
}

/// The SPF record has the term `include:<include>` or `+include:<include>`.
fn spf_record_includes(record: &str, include: &str) -> bool {
    let want = include.trim().trim_end_matches('.');
    if want.is_empty() {
        return false;
    }
    record.split_ascii_whitespace().skip(1).any(|term| {
        let term = term.strip_prefix('+').unwrap_or(term);
        match term.get(..8) {
            Some(mech) if mech.eq_ignore_ascii_case("include:") => {
                term[8..].trim_end_matches('.').eq_ignore_ascii_case(want)
            }
            _ => false,
        }
    })
}

/// The `nameserver` addresses of a resolv.conf, on port 53. Unparsable
/// entries (and IPv6 zone ids, which `SocketAddr` cannot carry) are skipped.
fn parse_resolv_conf(text: &str) -> Vec<SocketAddr> {
    text.lines()
        .filter_map(|line| {
            let mut words = line.split_ascii_whitespace();
            if words.next() != Some("nameserver") {
                return None;
            }
            let ip: IpAddr = words.next()?.parse().ok()?;
            Some(SocketAddr::new(ip, 53))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dns_test_server::TestDnsServer;
    use std::net::{Ipv4Addr, Ipv6Addr};
    use std::time::Instant;

    async fn setup() -> (TestDnsServer, Dns) {
        let server = TestDnsServer::start().await.expect("start test DNS server");
        let dns = Dns::new(Some(&[server.addr()])).expect("build resolver");
        (server, dns)
    }

    #[tokio::test]
    async fn txt_joins_split_character_strings() {
        let (server, dns) = setup().await;
        server.set_txt_strings(
            "split.example.com",
            &[&["v=spf1 include:amazonses.com", " ~all"], &["other"]],
        );
        let mut got = dns.txt("split.example.com").await.unwrap();
        got.sort();
        assert_eq!(
            got,
            vec![
                "other".to_owned(),
                "v=spf1 include:amazonses.com ~all".to_owned()
            ]
        );

        // A value longer than 255 bytes goes out as several character-strings;
        // over 512 bytes the UDP answer is truncated and the query is retried
        // over TCP.
        let long = format!(
            "v=spf1 {} include:amazonses.com -all",
            "ip4:192.0.2.1 ".repeat(60)
        );
        assert!(long.len() > 512);
        server.set_txt("long.example.com", &[&long]);
        assert_eq!(dns.txt("long.example.com").await.unwrap(), vec![long]);
        assert!(
            dns.spf_includes("long.example.com", "amazonses.com")
                .await
                .unwrap()
        );
    }

    #[tokio::test]
    async fn nxdomain_and_nodata_are_empty() {
        let (server, dns) = setup().await;
        assert_eq!(
            dns.txt("missing.example.com").await.unwrap(),
            Vec::<String>::new()
        );
        server.set_a(
            "only-a.example.com",
            &[IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1))],
        );
        assert_eq!(
            dns.txt("only-a.example.com").await.unwrap(),
            Vec::<String>::new()
        );
        assert!(
            !dns.spf_includes("missing.example.com", "amazonses.com")
                .await
                .unwrap()
        );
        assert!(!dns.has_dmarc("missing.example.com").await.unwrap());
    }

    #[tokio::test]
    async fn spf_include_found_missing_or_wrong_mechanism() {
        let (server, dns) = setup().await;
        server.set_txt(
            "ok.example.com",
            &[
                "google-site-verification=abc",
                "V=SPF1 mx INCLUDE:AmazonSES.com ~all",
            ],
        );
        assert!(
            dns.spf_includes("ok.example.com", "amazonses.com")
                .await
                .unwrap()
        );
        assert!(
            dns.spf_includes("OK.Example.COM.", "amazonses.com.")
                .await
                .unwrap()
        );

        server.set_txt("plus.example.com", &["v=spf1 +include:amazonses.com -all"]);
        assert!(
            dns.spf_includes("plus.example.com", "amazonses.com")
                .await
                .unwrap()
        );

        server.set_txt(
            "missing.example.com",
            &["v=spf1 include:_spf.google.com ~all"],
        );
        assert!(
            !dns.spf_includes("missing.example.com", "amazonses.com")
                .await
                .unwrap()
        );

        for wrong in [
            "v=spf1 redirect=amazonses.com",
            "v=spf1 a:amazonses.com -all",
            "v=spf1 include:amazonses.com.evil.example -all",
            "v=spf1 include:mail.amazonses.com -all",
            "v=spf1 -include:amazonses.com -all",
            "v=spf10 include:amazonses.com -all",
            "include:amazonses.com",
            "spf2.0/pra include:amazonses.com",
        ] {
            server.set_txt("wrong.example.com", &[wrong]);
            assert!(
                !dns.spf_includes("wrong.example.com", "amazonses.com")
                    .await
                    .unwrap(),
                "{wrong}"
            );
        }

        // Two SPF records are a permerror (RFC 7208 §4.5).
        server.set_txt(
            "two.example.com",
            &["v=spf1 include:amazonses.com -all", "v=spf1 mx -all"],
        );
        assert!(
            !dns.spf_includes("two.example.com", "amazonses.com")
                .await
                .unwrap()
        );
    }

    #[tokio::test]
    async fn dmarc_present_absent_duplicated() {
        let (server, dns) = setup().await;
        server.set_txt(
            "_dmarc.example.com",
            &["v=DMARC1; p=none; rua=mailto:d@example.com"],
        );
        assert!(dns.has_dmarc("example.com").await.unwrap());
        assert!(dns.has_dmarc("Example.com.").await.unwrap());

        server.set_txt("_dmarc.lower.example", &["v=dmarc1;p=reject", "unrelated"]);
        assert!(dns.has_dmarc("lower.example").await.unwrap());

        assert!(!dns.has_dmarc("absent.example").await.unwrap());

        server.set_txt(
            "_dmarc.notdmarc.example",
            &["v=spf1 -all", "v=DMARC10; p=none"],
        );
        assert!(!dns.has_dmarc("notdmarc.example").await.unwrap());

        server.set_txt(
            "_dmarc.dup.example",
            &["v=DMARC1; p=none", "v=DMARC1; p=reject"],
        );
        assert!(!dns.has_dmarc("dup.example").await.unwrap());
    }

    #[tokio::test]
    async fn lookup_ips_a_aaaa_and_literals() {
        let (server, dns) = setup().await;
        let v4 = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 10));
        let v6 = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1));
        server.set_a("both.example.com", &[v4, v6]);
        let mut got = dns.lookup_ips("both.example.com").await.unwrap();
        got.sort();
        assert_eq!(got, vec![v4, v6]);

        server.set_a("v4.example.com", &[v4]);
        assert_eq!(dns.lookup_ips("v4.example.com").await.unwrap(), vec![v4]);
        server.set_a("v6.example.com", &[v6]);
        assert_eq!(dns.lookup_ips("v6.example.com").await.unwrap(), vec![v6]);

        assert!(matches!(
            dns.lookup_ips("nohost.example.com").await,
            Err(DnsError::NoRecords(_))
        ));
        server.set_txt("txtonly.example.com", &["hello"]);
        assert!(matches!(
            dns.lookup_ips("txtonly.example.com").await,
            Err(DnsError::NoRecords(_))
        ));

        // Literals need no server at all.
        let unreachable = Dns::new(Some(&["127.0.0.1:9".parse().unwrap()])).unwrap();
        assert_eq!(
            unreachable.lookup_ips("203.0.113.7").await.unwrap(),
            vec!["203.0.113.7".parse::<IpAddr>().unwrap()]
        );
        assert_eq!(
            unreachable.lookup_ips("::1").await.unwrap(),
            vec!["::1".parse::<IpAddr>().unwrap()]
        );
        assert_eq!(
            unreachable.lookup_ips("[2001:db8::1]").await.unwrap(),
            vec![v6]
        );
    }

    #[tokio::test]
    async fn addresses_by_family_and_mx_by_preference() {
        let (server, dns) = setup().await;
        let v4 = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 10));
        let v6 = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1));
        server.set_a("both.example.com", &[v4, v6]);
        assert_eq!(
            dns.addresses("both.example.com", false).await.unwrap(),
            vec![v4]
        );
        assert_eq!(
            dns.addresses("both.example.com", true).await.unwrap(),
            vec![v6]
        );
        server.set_a("v4.example.com", &[v4]);
        assert!(
            dns.addresses("v4.example.com", true)
                .await
                .unwrap()
                .is_empty()
        );
        assert!(
            dns.addresses("nohost.example.com", false)
                .await
                .unwrap()
                .is_empty()
        );

        server.set_mx(
            "example.com",
            &[(20, "backup.example.com"), (10, "mx1.example.com.")],
        );
        assert_eq!(
            dns.mx("example.com").await.unwrap(),
            vec![
                "mx1.example.com".to_owned(),
                "backup.example.com".to_owned()
            ]
        );
        assert!(dns.mx("v4.example.com").await.unwrap().is_empty());
        assert!(dns.mx("nohost.example.com").await.unwrap().is_empty());

        let silent = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let dead = Dns::new(Some(&[silent.local_addr().unwrap()])).unwrap();
        let lookups = async {
            (
                dead.addresses("example.com", false).await,
                dead.mx("example.com").await,
            )
        };
        let (a, mx) = tokio::time::timeout(Duration::from_secs(15), lookups)
            .await
            .expect("lookups give up on their own");
        assert!(matches!(a, Err(DnsError::Lookup { .. })), "{a:?}");
        assert!(matches!(mx, Err(DnsError::Lookup { .. })), "{mx:?}");
    }

    #[tokio::test]
    async fn changed_record_is_seen() {
        let (server, dns) = setup().await;
        server.set_txt("change.example.com", &["v=spf1 -all"]);
        assert!(
            !dns.spf_includes("change.example.com", "amazonses.com")
                .await
                .unwrap()
        );
        server.set_txt("change.example.com", &["v=spf1 include:amazonses.com -all"]);
        assert!(
            dns.spf_includes("change.example.com", "amazonses.com")
                .await
                .unwrap()
        );

        let a = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
        let b = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2));
        server.set_a("host.example.com", &[a]);
        assert_eq!(dns.lookup_ips("host.example.com").await.unwrap(), vec![a]);
        server.set_a("host.example.com", &[b]);
        assert_eq!(dns.lookup_ips("host.example.com").await.unwrap(), vec![b]);

        // Negative answers are not cached either.
        server.remove("host.example.com");
        assert!(matches!(
            dns.lookup_ips("host.example.com").await,
            Err(DnsError::NoRecords(_))
        ));
        server.set_a("host.example.com", &[a]);
        assert_eq!(dns.lookup_ips("host.example.com").await.unwrap(), vec![a]);
    }

    #[tokio::test]
    async fn silent_server_is_an_error_within_seconds() {
        // A bound UDP socket that never answers (and nothing listens on TCP).
        let silent = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let dns = Dns::new(Some(&[silent.local_addr().unwrap()])).unwrap();
        let start = Instant::now();
        let res = tokio::time::timeout(Duration::from_secs(15), dns.txt("example.com"))
            .await
            .expect("lookup must give up on its own");
        assert!(matches!(res, Err(DnsError::Lookup { .. })), "{res:?}");
        // Two attempts of two seconds each.
        assert!(
            start.elapsed() < Duration::from_secs(7),
            "{:?}",
            start.elapsed()
        );
        assert!(matches!(
            dns.lookup_ips("example.com").await,
            Err(DnsError::Lookup { .. })
        ));
        drop(silent);
    }

    #[tokio::test]
    async fn invalid_names_and_config() {
        assert!(matches!(Dns::new(Some(&[])), Err(DnsError::Config(_))));
        let (_server, dns) = setup().await;
        assert!(matches!(dns.txt("").await, Err(DnsError::InvalidName(_))));
        assert!(matches!(
            dns.txt("a..b").await,
            Err(DnsError::InvalidName(_))
        ));
    }

    #[test]
    fn resolv_conf_parsing() {
        let text = "# comment\nsearch example.com\nnameserver 10.0.0.2\nnameserver  ::1\n\
                    nameserver fe80::1%eth0\nnameserver bogus\noptions ndots:2\n";
        assert_eq!(
            parse_resolv_conf(text),
            vec![
                "10.0.0.2:53".parse::<SocketAddr>().unwrap(),
                "[::1]:53".parse::<SocketAddr>().unwrap(),
            ]
        );
    }
}
