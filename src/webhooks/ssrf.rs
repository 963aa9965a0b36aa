//! URL safety for webhook endpoints (server-side request forgery defence).
//!
//! Two checks guard every delivery:
//!
//! 1. [`check_url`] when an endpoint is registered (and again before each
//!    delivery): https only, no userinfo, a sane length, and an IP-literal
//!    host must not be private or reserved. Outside production, plain http or
//!    https to a loopback host is allowed so that developers can point
//!    webhooks at a local receiver.
//! 2. [`check_resolved`] after the host has been resolved: every address must
//!    be public, and the delivery then connects to exactly the returned socket
//!    addresses, so a DNS answer that changes between check and connect (DNS
//!    rebinding) cannot steer it elsewhere.
//!
//! [`is_forbidden_ip`] judges IPv6 addresses that embed an IPv4 address
//! (IPv4-mapped, IPv4-compatible, NAT64, 6to4, Teredo) by the embedded
//! address, so `::ffff:127.0.0.1` is as forbidden as `127.0.0.1`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use url::{Host, Url};

/// Longest accepted webhook URL, in bytes.
pub const MAX_URL_LEN: usize = 2048;

/// Which URLs are acceptable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UrlPolicy {
    /// https to public addresses only.
    Production,
    /// As production, plus http or https to a loopback host
    /// (`localhost`, `127.0.0.0/8`, `[::1]`).
    Development,
}

/// Why a webhook URL was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("webhook URL is too long ({len} bytes; at most {MAX_URL_LEN} allowed)")]
    TooLong { len: usize },
    #[error("webhook URL is not a valid URL: {0}")]
    Invalid(#[from] url::ParseError),
    #[error("webhook URL must use https (got {scheme}:)")]
    HttpsRequired { scheme: String },
    #[error("webhook URL must not contain a username or password")]
    UserInfo,
    #[error("webhook URL must have a host")]
    MissingHost,
    #[error("webhook URL has an invalid port ({0})")]
    InvalidPort(u16),
    #[error("webhook URL must not point to localhost")]
    Localhost,
    #[error("webhook URL points to {kind} address ({ip})")]
    ForbiddenAddress { ip: IpAddr, kind: &'static str },
    #[error("webhook URL host {host} did not resolve to any address")]
    NoAddresses { host: String },
    #[error("webhook URL resolves to {kind} address ({ip})")]
    ResolvesToForbidden { ip: IpAddr, kind: &'static str },
    #[error("webhook URL host {host} is loopback but resolves to a non-loopback address ({ip})")]
    LoopbackMismatch { host: String, ip: IpAddr },
}

/// A webhook URL that passed [`check_url`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookTarget {
    /// The normalised URL (e.g. `http://2130706433/` becomes `http://127.0.0.1/`).
    pub url: Url,
    /// The host as written in the normalised URL: a lowercase domain name, a
    /// dotted IPv4 address, or a bracketed IPv6 address such as `[::1]`.
    pub host: String,
    /// The explicit port, or 443/80 for https/http.
    pub port: u16,
    /// True only under [`UrlPolicy::Development`] for a loopback host; then
    /// [`check_resolved`] accepts loopback addresses (and only those).
    pub loopback_allowed: bool,
}

impl WebhookTarget {
    /// The address when the host is an IP literal; such a target needs no DNS
    /// lookup (pass `&[ip]` to [`check_resolved`]).
    pub fn ip_literal(&self) -> Option<IpAddr> {
        match self.url.host()? {
            Host::Ipv4(ip) => Some(IpAddr::V4(ip)),
            Host::Ipv6(ip) => Some(IpAddr::V6(ip)),
            Host::Domain(_) => None,
        }
    }
}

/// Checks a webhook URL before it is stored or used.
pub fn check_url(raw: &str, policy: UrlPolicy) -> Result<WebhookTarget, UrlError> {
    if raw.len() > MAX_URL_LEN {
        return Err(UrlError::TooLong { len: raw.len() });
    }
    let url = Url::parse(raw)?;
    // Normalisation (percent-encoding) can lengthen the URL.
    if url.as_str().len() > MAX_URL_LEN {
        return Err(UrlError::TooLong {
            len: url.as_str().len(),
        });
    }
    let scheme = url.scheme();
    if scheme != "https" && scheme != "http" {
        return Err(UrlError::HttpsRequired {
            scheme: scheme.to_owned(),
        });
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(UrlError::UserInfo);
    }
    let host = url.host().ok_or(UrlError::MissingHost)?;
    let (is_loopback, ip) = match host {
        Host::Domain(name) => (is_localhost_name(name), None),
        Host::Ipv4(ip) => (ip.is_loopback(), Some(IpAddr::V4(ip))),
        Host::Ipv6(ip) => (ip == Ipv6Addr::LOCALHOST, Some(IpAddr::V6(ip))),
    };
    let loopback_allowed = is_loopback && policy == UrlPolicy::Development;
    if scheme != "https" && !loopback_allowed {
        return Err(UrlError::HttpsRequired {
            scheme: scheme.to_owned(),
        });
    }
    if !loopback_allowed {
        match ip {
            None if is_loopback => return Err(UrlError::Localhost),
            Some(ip) => {
                if let Some(kind) = forbidden_kind(ip) {
                    return Err(UrlError::ForbiddenAddress { ip, kind });
                }
            }
            None => {}
        }
    }
    // Always known for http and https.
    let port = url
        .port_or_known_default()
        .ok_or(UrlError::InvalidPort(0))?;
    if port == 0 {
        return Err(UrlError::InvalidPort(port));
    }
    let host = url.host_str().ok_or(UrlError::MissingHost)?.to_owned();
    Ok(WebhookTarget {
        url,
        host,
        port,
        loopback_allowed,
    })
}

/// Checks the addresses the target's host resolved to and returns the socket
/// addresses to connect to — and only those.
///
/// One forbidden address refuses the whole URL: a name that mixes public and
/// private answers is an attack, not something to filter around. For the
/// development loopback case every address must be a loopback address.
pub fn check_resolved(
    target: &WebhookTarget,
    addrs: &[IpAddr],
) -> Result<Vec<SocketAddr>, UrlError> {
    if addrs.is_empty() {
        return Err(UrlError::NoAddresses {
            host: target.host.clone(),
        });
    }
    let mut out: Vec<SocketAddr> = Vec::with_capacity(addrs.len());
    for &ip in addrs {
        if target.loopback_allowed {
            if !ip.to_canonical().is_loopback() {
                return Err(UrlError::LoopbackMismatch {
                    host: target.host.clone(),
                    ip,
                });
            }
        } else if let Some(kind) = forbidden_kind(ip) {
            return Err(UrlError::ResolvesToForbidden { ip, kind });
        }
        let sa = SocketAddr::new(ip, target.port);
        if !out.contains(&sa) {
            out.push(sa);
        }
    }
    Ok(out)
}

/// Whether a delivery must never connect to `ip`: anything that is not a
/// globally reachable unicast address (loopback, private, link-local, cloud
/// metadata, CGNAT, documentation, multicast, reserved, ...), including IPv6
/// addresses whose embedded IPv4 address is such an address.
pub fn is_forbidden_ip(ip: IpAddr) -> bool {
    forbidden_kind(ip).is_some()
}

/// `localhost` (with or without the root dot); `url` has lowercased it.
fn is_localhost_name(name: &str) -> bool {
    name == "localhost" || name == "localhost."
}

/// Why `ip` is forbidden, as "a/an <kind>" for error messages; `None` if allowed.
fn forbidden_kind(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => forbidden_kind_v4(v4),
        IpAddr::V6(v6) => forbidden_kind_v6(v6),
    }
}

fn forbidden_kind_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    let kind = match (a, b, c) {
        (0, _, _) => "an unspecified (0.0.0.0/8)",
        (127, _, _) => "a loopback",
        (10, _, _) | (192, 168, _) => "a private",
        (172, _, _) if b & 0xf0 == 16 => "a private",
        (100, _, _) if b & 0xc0 == 64 => "a shared (CGNAT)",
        (169, 254, _) => "a link-local",
        (192, 0, 0) => "a reserved (IETF protocol assignments)",
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => "a documentation",
        (198, _, _) if b & 0xfe == 18 => "a benchmarking",
        (224..=239, _, _) => "a multicast",
        _ if ip == Ipv4Addr::BROADCAST => "a broadcast",
        (240..=255, _, _) => "a reserved",
        _ => return None,
    };
    Some(kind)
}

/// The IPv4 address in bits `offset..offset + 32` of `bits`.
fn v4_at(bits: u128, offset: u32) -> Ipv4Addr {
    Ipv4Addr::from((bits >> (96 - offset)) as u32)
}

fn forbidden_kind_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let bits = u128::from(ip);
    let seg = ip.segments();

    if ip.is_unspecified() {
        return Some("an unspecified");
    }
    if ip == Ipv6Addr::LOCALHOST {
        return Some("a loopback");
    }

    // Forms that embed an IPv4 address are judged by that address.
    let top96 = bits >> 32;
    // ::ffff:a.b.c.d (IPv4-mapped), ::a.b.c.d (IPv4-compatible, deprecated),
    // ::ffff:0:a.b.c.d (IPv4-translated, RFC 2765),
    // 64:ff9b::a.b.c.d (NAT64 well-known prefix, RFC 6052).
    if top96 == 0xffff
        || top96 == 0
        || top96 == 0xffff_0000
        || top96 == 0x0064_ff9b_0000_0000_0000_0000
    {
        return forbidden_kind_v4(v4_at(bits, 96));
    }
    // 64:ff9b:1::/48 (NAT64 local-use prefix, RFC 8215). The operator may use
    // any RFC 6052 prefix length within it; only the /96 form with zeros in
    // bits 48..96 is unambiguous (every other reading of such an address
    // lands in 0.0.0.0/8), so anything else is refused outright.
    if bits >> 80 == 0x0064_ff9b_0001 {
        if top96 & 0xffff_ffff_ffff != 0 {
            return Some("an ambiguous NAT64 (local-use prefix)");
        }
        return forbidden_kind_v4(v4_at(bits, 96));
    }
    // 2002::/16 (6to4): the IPv4 address is in bits 16..48.
    if seg[0] == 0x2002 {
        return forbidden_kind_v4(v4_at(bits, 16));
    }
    // 2001::/32 (Teredo): server in bits 32..64, client (inverted) in 96..128.
    if seg[0] == 0x2001 && seg[1] == 0 {
        let server = v4_at(bits, 32);
        let client = Ipv4Addr::from(!(bits as u32));
        return forbidden_kind_v4(server).or_else(|| forbidden_kind_v4(client));
    }

    let kind = if seg[0] & 0xfe00 == 0xfc00 {
        // fc00::/7, including fd00:ec2::254 (AWS metadata over IPv6).
        "a unique-local (private)"
    } else if seg[0] & 0xffc0 == 0xfe80 {
        "a link-local"
    } else if seg[0] & 0xffc0 == 0xfec0 {
        "a site-local"
    } else if seg[0] & 0xff00 == 0xff00 {
        "a multicast"
    } else if (seg[0] == 0x2001 && seg[1] == 0x0db8) || (seg[0] == 0x3fff && seg[1] & 0xf000 == 0) {
        // 2001:db8::/32 and 3fff::/20.
        "a documentation"
    } else if seg[0] == 0x2001 && seg[1] == 0x0002 && seg[2] == 0 {
        // 2001:2::/48, the IPv6 counterpart of 198.18.0.0/15.
        "a benchmarking"
    } else if seg[0] == 0x0100 && seg[1] == 0 && seg[2] == 0 && seg[3] == 0 {
        // 100::/64.
        "a discard-only"
    } else {
        return None;
    };
    Some(kind)
}

#[cfg(test)]
mod tests {
    use super::*;
    use UrlPolicy::{Development, Production};

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn forbidden(s: &str) -> bool {
        is_forbidden_ip(ip(s))
    }

    #[track_caller]
    fn assert_forbidden(list: &[&str]) {
        for s in list {
            assert!(forbidden(s), "{s} should be forbidden");
        }
    }

    #[track_caller]
    fn assert_allowed(list: &[&str]) {
        for s in list {
            assert!(!forbidden(s), "{s} should be allowed");
        }
    }

    /// A Teredo address with the given server and client IPv4 addresses.
    fn teredo(server: Ipv4Addr, client: Ipv4Addr) -> String {
        let bits: u128 = (0x2001_0000u128 << 96)
            | (u128::from(u32::from(server)) << 64)
            | (0x8000_f227u128 << 32) // flags and obfuscated port
            | u128::from(!u32::from(client));
        Ipv6Addr::from(bits).to_string()
    }

    // ----- IPv4 ranges -------------------------------------------------

    #[test]
    fn v4_unspecified_and_this_network() {
        assert_forbidden(&["0.0.0.0", "0.1.2.3", "0.255.255.255"]);
        assert_allowed(&["1.0.0.0", "1.1.1.1"]);
    }

    #[test]
    fn v4_loopback() {
        assert_forbidden(&["127.0.0.1", "127.0.0.0", "127.255.255.255", "127.1.2.3"]);
        assert_allowed(&["126.255.255.255", "128.0.0.0"]);
    }

    #[test]
    fn v4_private() {
        assert_forbidden(&[
            "10.0.0.0",
            "10.0.0.1",
            "10.255.255.255",
            "172.16.0.0",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.0.0",
            "192.168.1.1",
            "192.168.255.255",
        ]);
        assert_allowed(&[
            "9.255.255.255",
            "11.0.0.0",
            "172.15.255.255",
            "172.32.0.0",
            "192.167.255.255",
            "192.169.0.0",
        ]);
    }

    #[test]
    fn v4_cgnat() {
        assert_forbidden(&["100.64.0.0", "100.64.0.1", "100.127.255.255"]);
        assert_allowed(&["100.63.255.255", "100.128.0.0"]);
    }

    #[test]
    fn v4_link_local_and_metadata() {
        assert_forbidden(&[
            "169.254.0.0",
            "169.254.169.254",
            "169.254.170.2",
            "169.254.255.255",
        ]);
        assert_allowed(&["169.253.255.255", "169.255.0.0"]);
    }

    #[test]
    fn v4_ietf_protocol_assignments() {
        assert_forbidden(&["192.0.0.0", "192.0.0.8", "192.0.0.170", "192.0.0.255"]);
        assert_allowed(&["192.0.1.0", "191.255.255.255"]);
    }

    #[test]
    fn v4_documentation() {
        assert_forbidden(&[
            "192.0.2.0",
            "192.0.2.1",
            "192.0.2.255",
            "198.51.100.0",
            "198.51.100.7",
            "198.51.100.255",
            "203.0.113.0",
            "203.0.113.9",
            "203.0.113.255",
        ]);
        assert_allowed(&[
            "192.0.3.0",
            "198.51.99.255",
            "198.51.101.0",
            "203.0.112.255",
            "203.0.114.0",
        ]);
    }

    #[test]
    fn v4_benchmarking() {
        assert_forbidden(&["198.18.0.0", "198.18.0.1", "198.19.255.255"]);
        assert_allowed(&["198.17.255.255", "198.20.0.0"]);
    }

    #[test]
    fn v4_multicast_reserved_broadcast() {
        assert_forbidden(&[
            "224.0.0.0",
            "224.0.0.251",
            "239.255.255.255",
            "240.0.0.0",
            "250.1.2.3",
            "255.255.255.254",
            "255.255.255.255",
        ]);
        assert_allowed(&["223.255.255.255"]);
    }

    #[test]
    fn v4_public() {
        assert_allowed(&[
            "8.8.8.8",
            "1.1.1.1",
            "93.184.216.34",
            "142.250.0.1",
            "52.95.110.1",
        ]);
    }

    // ----- IPv6 ranges -------------------------------------------------

    #[test]
    fn v6_unspecified_and_loopback() {
        assert_forbidden(&["::", "::1"]);
    }

    #[test]
    fn v6_unique_local_and_aws_metadata() {
        assert_forbidden(&[
            "fc00::",
            "fc00::1",
            "fd00::1",
            "fd00:ec2::254",
            "fdff:ffff::1",
        ]);
        assert_allowed(&["fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"]);
    }

    #[test]
    fn v6_link_local_site_local_multicast() {
        assert_forbidden(&[
            "fe80::",
            "fe80::1",
            "febf:ffff::1",
            "fec0::1",
            "feff:ffff::1",
            "ff00::",
            "ff02::1",
            "ff0e::101",
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
        ]);
    }

    #[test]
    fn v6_documentation_and_discard() {
        assert_forbidden(&[
            "2001:db8::",
            "2001:db8::1",
            "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff",
            "3fff::",
            "3fff::1",
            "3fff:fff:ffff::1",
            "100::",
            "100::1",
            "100::ffff:ffff:ffff:ffff",
            "2001:2::1",
        ]);
        assert_allowed(&["2001:db9::1", "3fff:1000::1", "100:0:0:1::1", "2001:3::1"]);
    }

    #[test]
    fn v6_public() {
        assert_allowed(&[
            "2606:4700::1111",
            "2606:4700:4700::1111",
            "2001:4860:4860::8888",
            "2a00:1450:4001:800::200e",
        ]);
    }

    // ----- IPv6 forms embedding IPv4 -----------------------------------

    #[test]
    fn v4_mapped() {
        assert_forbidden(&[
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::ffff:169.254.169.254",
            "::ffff:192.168.1.1",
            "::ffff:0.0.0.0",
            "::ffff:7f00:1",
        ]);
        assert_allowed(&["::ffff:8.8.8.8"]);
    }

    #[test]
    fn v4_compatible_and_translated() {
        assert_forbidden(&[
            "::127.0.0.1",
            "::10.0.0.1",
            "::169.254.169.254",
            "::ffff:0:127.0.0.1",
        ]);
        assert_allowed(&["::8.8.8.8", "::ffff:0:8.8.8.8"]);
    }

    #[test]
    fn nat64() {
        assert_forbidden(&[
            "64:ff9b::a00:1",
            "64:ff9b::10.0.0.1",
            "64:ff9b::127.0.0.1",
            "64:ff9b::169.254.169.254",
            "64:ff9b:1::10.0.0.1",
            "64:ff9b:1::127.0.0.1",
            // Non-/96 layouts in the local-use prefix are refused.
            "64:ff9b:1:a00:1::",
            "64:ff9b:1:0:1::8.8.8.8",
        ]);
        assert_allowed(&["64:ff9b::8.8.8.8", "64:ff9b::808:808", "64:ff9b:1::8.8.8.8"]);
    }

    #[test]
    fn six_to_four() {
        assert_forbidden(&[
            "2002:0a00:0001::",
            "2002:a00:1::1",
            "2002:7f00:1::",
            "2002:a9fe:a9fe::1",
            "2002:c0a8:101:1::1",
        ]);
        assert_allowed(&["2002:808:808::1"]);
    }

    #[test]
    fn teredo_client_and_server() {
        let public = Ipv4Addr::new(65, 54, 227, 120);
        let loopback = Ipv4Addr::new(127, 0, 0, 1);
        let private = Ipv4Addr::new(10, 0, 0, 1);
        let ok = teredo(public, Ipv4Addr::new(8, 8, 8, 8));
        let bad_client = teredo(public, loopback);
        let bad_client2 = teredo(public, private);
        let bad_server = teredo(private, Ipv4Addr::new(8, 8, 8, 8));
        assert_eq!(bad_client, "2001:0:4136:e378:8000:f227:80ff:fffe");
        assert_allowed(&[&ok]);
        assert_forbidden(&[&bad_client, &bad_client2, &bad_server]);
        // The RFC 4380 example: server 65.54.227.120, client 192.0.2.45 (documentation).
        assert_forbidden(&["2001:0:4136:e378:8000:63bf:3fff:fdd2"]);
    }

    #[test]
    fn error_names_the_kind() {
        assert_eq!(forbidden_kind(ip("10.0.0.5")), Some("a private"));
        assert_eq!(forbidden_kind(ip("::ffff:127.0.0.1")), Some("a loopback"));
        assert_eq!(forbidden_kind(ip("169.254.169.254")), Some("a link-local"));
        assert_eq!(forbidden_kind(ip("8.8.8.8")), None);
    }

    // ----- check_url ---------------------------------------------------

    #[test]
    fn https_public_allowed_in_both_policies() {
        for policy in [Production, Development] {
            let t = check_url("https://hooks.example.com/in?x=1", policy).unwrap();
            assert_eq!(t.host, "hooks.example.com");
            assert_eq!(t.port, 443);
            assert!(!t.loopback_allowed);
            assert_eq!(t.ip_literal(), None);

            let t = check_url("https://EXAMPLE.com:8443/x", policy).unwrap();
            assert_eq!(t.host, "example.com");
            assert_eq!(t.port, 8443);

            let t = check_url("https://8.8.8.8/x", policy).unwrap();
            assert_eq!(t.ip_literal(), Some(ip("8.8.8.8")));
            let t = check_url("https://[2606:4700::1111]/x", policy).unwrap();
            assert_eq!(t.host, "[2606:4700::1111]");
            assert_eq!(t.ip_literal(), Some(ip("2606:4700::1111")));
        }
    }

    #[test]
    fn http_refused_for_public_hosts_in_both_policies() {
        for policy in [Production, Development] {
            for u in [
                "http://example.com",
                "http://example.com/hook",
                "http://8.8.8.8/",
            ] {
                let err = check_url(u, policy).unwrap_err();
                assert!(
                    matches!(err, UrlError::HttpsRequired { .. }),
                    "{u}: {err:?}"
                );
                assert!(err.to_string().starts_with("webhook URL must use https"));
            }
        }
    }

    #[test]
    fn other_schemes_refused() {
        for policy in [Production, Development] {
            for u in [
                "ftp://example.com/",
                "file:///etc/passwd",
                "gopher://example.com/",
                "ws://localhost/",
                "javascript:alert(1)",
                "data:text/plain,hi",
            ] {
                assert!(
                    matches!(check_url(u, policy), Err(UrlError::HttpsRequired { .. })),
                    "{u}"
                );
            }
        }
    }

    #[test]
    fn localhost_allowed_only_in_development() {
        let t = check_url("http://localhost:8080/x", Development).unwrap();
        assert!(t.loopback_allowed);
        assert_eq!(t.host, "localhost");
        assert_eq!(t.port, 8080);
        assert_eq!(t.url.path(), "/x");

        assert!(
            check_url("https://localhost/x", Development)
                .unwrap()
                .loopback_allowed
        );
        assert!(
            check_url("http://LocalHost./", Development)
                .unwrap()
                .loopback_allowed
        );

        assert!(matches!(
            check_url("http://localhost:8080/x", Production),
            Err(UrlError::HttpsRequired { .. })
        ));
        assert_eq!(
            check_url("https://localhost:8080/x", Production),
            Err(UrlError::Localhost)
        );
    }

    #[test]
    fn loopback_ip_literals_only_in_development() {
        for u in [
            "http://127.0.0.1/",
            "http://127.0.0.1:3000/hook",
            "https://127.1.2.3/",
            "http://[::1]:8080/",
            "https://[::1]/",
        ] {
            let t = check_url(u, Development).unwrap();
            assert!(t.loopback_allowed, "{u}");
            let err = check_url(u, Production).unwrap_err();
            assert!(
                matches!(
                    err,
                    UrlError::HttpsRequired { .. } | UrlError::ForbiddenAddress { .. }
                ),
                "{u}: {err:?}"
            );
        }
        assert_eq!(
            check_url("https://127.0.0.1/", Production),
            Err(UrlError::ForbiddenAddress {
                ip: ip("127.0.0.1"),
                kind: "a loopback"
            })
        );
        assert_eq!(
            check_url("http://[::1]:8080/", Development).unwrap().host,
            "[::1]"
        );
    }

    #[test]
    fn numeric_ipv4_forms_are_normalised_and_caught() {
        for u in [
            "http://2130706433/",
            "http://0x7f000001/",
            "http://0x7f.0.0.1/",
            "http://0177.0.0.1/",
            "http://127.1/",
            "http://017700000001/",
            "https://2130706433/",
        ] {
            let t = check_url(u, Development).unwrap();
            assert!(t.loopback_allowed, "{u}");
            assert_eq!(t.host, "127.0.0.1", "{u}");
            assert_eq!(t.ip_literal(), Some(ip("127.0.0.1")), "{u}");
            assert!(check_url(u, Production).is_err(), "{u}");
        }
        let https_forms = ["https://2130706433/", "https://0x7f000001/"];
        for u in https_forms {
            assert!(matches!(
                check_url(u, Production),
                Err(UrlError::ForbiddenAddress { .. })
            ));
        }
        // Private addresses in numeric form: refused in both policies.
        for policy in [Production, Development] {
            for u in [
                "https://167772161/",
                "https://0xa000001/",
                "https://0xa9fea9fe/",
            ] {
                assert!(
                    matches!(check_url(u, policy), Err(UrlError::ForbiddenAddress { .. })),
                    "{u}"
                );
            }
        }
    }

    #[test]
    fn forbidden_ip_literals_refused_in_both_policies() {
        for policy in [Production, Development] {
            for u in [
                "https://169.254.169.254/",
                "https://169.254.169.254/latest/meta-data/",
                "https://10.0.0.1/",
                "https://192.168.1.1:8443/",
                "https://0.0.0.0/",
                "https://[fd00:ec2::254]/",
                "https://[::ffff:127.0.0.1]/",
                "https://[::ffff:10.0.0.1]/",
                "https://[64:ff9b::a00:1]/",
                "https://[fe80::1]/",
                "https://[::]/",
            ] {
                assert!(
                    matches!(check_url(u, policy), Err(UrlError::ForbiddenAddress { .. })),
                    "{u} under {policy:?}"
                );
            }
            // http to a non-loopback private address is refused too.
            assert!(check_url("http://169.254.169.254/", policy).is_err());
            assert!(check_url("http://[::ffff:127.0.0.1]/", policy).is_err());
        }
        assert_eq!(
            check_url("https://169.254.169.254/", Production)
                .unwrap_err()
                .to_string(),
            "webhook URL points to a link-local address (169.254.169.254)"
        );
    }

    #[test]
    fn userinfo_refused() {
        for policy in [Production, Development] {
            for u in [
                "https://user:pass@example.com/",
                "https://user@example.com/",
                "https://:pass@example.com/",
                "http://user:pass@localhost:8080/",
                "https://example.com@169.254.169.254/",
            ] {
                let err = check_url(u, policy).unwrap_err();
                assert_eq!(err, UrlError::UserInfo, "{u}");
            }
        }
    }

    #[test]
    fn invalid_and_overlong_urls_refused() {
        assert!(matches!(
            check_url("", Production),
            Err(UrlError::Invalid(_))
        ));
        assert!(matches!(
            check_url("not a url", Production),
            Err(UrlError::Invalid(_))
        ));
        assert!(matches!(
            check_url("https://", Production),
            Err(UrlError::Invalid(_))
        ));
        assert!(matches!(
            check_url("https://exa mple.com/", Production),
            Err(UrlError::Invalid(_))
        ));
        assert_eq!(
            check_url("https://example.com:0/", Production),
            Err(UrlError::InvalidPort(0))
        );

        let base = "https://example.com/";
        let ok = format!("{base}{}", "a".repeat(MAX_URL_LEN - base.len()));
        assert_eq!(ok.len(), MAX_URL_LEN);
        assert!(check_url(&ok, Production).is_ok());
        let long = format!("{ok}a");
        assert_eq!(
            check_url(&long, Production),
            Err(UrlError::TooLong {
                len: MAX_URL_LEN + 1
            })
        );
        // Within the limit as typed, over it once percent-encoded.
        let spaces = format!("{base}{}x", " ".repeat(1000));
        assert!(matches!(
            check_url(&spaces, Production),
            Err(UrlError::TooLong { .. })
        ));
    }

    // ----- check_resolved ----------------------------------------------

    #[test]
    fn resolved_public_addresses_become_socket_addrs() {
        let t = check_url("https://hooks.example.com:8443/x", Production).unwrap();
        let got =
            check_resolved(&t, &[ip("8.8.8.8"), ip("2606:4700::1111"), ip("8.8.8.8")]).unwrap();
        assert_eq!(
            got,
            vec![
                "8.8.8.8:8443".parse::<SocketAddr>().unwrap(),
                "[2606:4700::1111]:8443".parse().unwrap(),
            ]
        );
    }

    #[test]
    fn resolved_private_address_refuses_everything() {
        let t = check_url("https://hooks.example.com/x", Production).unwrap();
        let err = check_resolved(&t, &[ip("8.8.8.8"), ip("10.0.0.5")]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "webhook URL resolves to a private address (10.0.0.5)"
        );
        for bad in [
            "127.0.0.1",
            "169.254.169.254",
            "::1",
            "fd00:ec2::254",
            "::ffff:127.0.0.1",
            "64:ff9b::a00:1",
            "2002:a00:1::",
            "2001:db8::1",
        ] {
            assert!(
                matches!(
                    check_resolved(&t, &[ip(bad), ip("8.8.8.8")]),
                    Err(UrlError::ResolvesToForbidden { .. })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn resolved_empty_is_an_error() {
        let t = check_url("https://hooks.example.com/x", Production).unwrap();
        assert_eq!(
            check_resolved(&t, &[]),
            Err(UrlError::NoAddresses {
                host: "hooks.example.com".into()
            })
        );
    }

    #[test]
    fn resolved_development_loopback() {
        let t = check_url("http://localhost:8080/x", Development).unwrap();
        let got = check_resolved(&t, &[ip("127.0.0.1"), ip("::1")]).unwrap();
        assert_eq!(
            got,
            vec![
                "127.0.0.1:8080".parse::<SocketAddr>().unwrap(),
                "[::1]:8080".parse().unwrap(),
            ]
        );
        // Loopback targets may reach loopback only.
        for bad in ["10.0.0.5", "8.8.8.8", "169.254.169.254"] {
            assert!(
                matches!(
                    check_resolved(&t, &[ip("127.0.0.1"), ip(bad)]),
                    Err(UrlError::LoopbackMismatch { .. })
                ),
                "{bad}"
            );
        }
        // A non-loopback development target gets the production rules.
        let t = check_url("https://hooks.example.com/x", Development).unwrap();
        assert!(check_resolved(&t, &[ip("127.0.0.1")]).is_err());
    }

    #[test]
    fn resolved_ip_literal_target() {
        let t = check_url("https://8.8.8.8/x", Production).unwrap();
        let lit = t.ip_literal().unwrap();
        assert_eq!(
            check_resolved(&t, &[lit]).unwrap(),
            vec!["8.8.8.8:443".parse::<SocketAddr>().unwrap()]
        );
    }
}
