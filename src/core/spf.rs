//! SPF (RFC 7208): whether the connecting IP may send mail for the MAIL FROM
//! domain (or, for the null sender, the HELO name).
//!
//! A compact evaluator over [`Dns`]: `all`, `include`, `a`, `mx`, `ip4`,
//! `ip6`, `exists`, `redirect`, macros, the limit of 10 DNS-querying terms
//! and of 2 void lookups. `ptr` (which RFC 7208 §5.5 says not to use) is
//! parsed and counted but never matches; `exp` is parsed and ignored, since
//! nothing is refused on SPF here. The whole check runs under one deadline;
//! running out is `temperror`.

use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::time::Duration;

use crate::dns::{Dns, DnsError, has_version};

/// DNS-querying terms (`include`, `a`, `mx`, `ptr`, `exists`, `redirect`)
/// one check may evaluate (§4.6.4).
const MAX_DNS_TERMS: usize = 10;
/// Lookups answered with no records at all before the check is a permerror.
const MAX_VOID_LOOKUPS: usize = 2;
/// MX records one `mx` term may look at (§4.6.4).
const MAX_MX_NAMES: usize = 10;
/// Longest domain a macro may expand to; longer ones lose leading labels (§7.3).
const MAX_DOMAIN_LEN: usize = 253;
/// Longest macro expansion (before that shortening) taken at all.
const MAX_EXPANSION: usize = 4096;

/// The outcome of a check (§2.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpfResult {
    Pass,
    Fail,
    SoftFail,
    Neutral,
    None,
    TempError,
    PermError,
}

impl SpfResult {
    /// The name used in `Authentication-Results` (RFC 8601 §2.7.2).
    pub fn as_str(self) -> &'static str {
        match self {
            SpfResult::Pass => "pass",
            SpfResult::Fail => "fail",
            SpfResult::SoftFail => "softfail",
            SpfResult::Neutral => "neutral",
            SpfResult::None => "none",
            SpfResult::TempError => "temperror",
            SpfResult::PermError => "permerror",
        }
    }
}

/// Which identity was checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// The MAIL FROM address.
    MailFrom(String),
    /// The HELO/EHLO name, for the null sender.
    Helo(String),
}

/// A check's result and the identity it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpfCheck {
    pub result: SpfResult,
    pub identity: Identity,
}

/// Checks `ip` against the SPF policy of the MAIL FROM domain, or of the
/// HELO name when MAIL FROM is the null sender, within `budget`.
pub async fn check(
    dns: &Dns,
    ip: IpAddr,
    helo: &str,
    mail_from: &str,
    budget: Duration,
) -> SpfCheck {
    let (identity, sender) = if mail_from.is_empty() {
        (
            Identity::Helo(helo.to_owned()),
            format!("postmaster@{helo}"),
        )
    } else {
        (
            Identity::MailFrom(mail_from.to_owned()),
            mail_from.to_owned(),
        )
    };
    let (local, domain) = match sender.rsplit_once('@') {
        Some((l, d)) if !l.is_empty() => (l.to_owned(), d.to_owned()),
        Some((_, d)) => ("postmaster".to_owned(), d.to_owned()),
        None => ("postmaster".to_owned(), sender.clone()),
    };
    let mut eval = Eval {
        dns,
        ip: ip.to_canonical(),
        helo: helo.to_owned(),
        sender: format!("{local}@{domain}"),
        local,
        sender_domain: domain.clone(),
        dns_terms: 0,
        voids: 0,
    };
    let result = match tokio::time::timeout(budget, eval.check_host(domain)).await {
        Ok(Ok(r)) => r,
        Ok(Err(Abort::Temp)) | Err(_) => SpfResult::TempError,
        Ok(Err(Abort::Perm)) => SpfResult::PermError,
    };
    SpfCheck { result, identity }
}

/// Why evaluation stopped early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Abort {
    Temp,
    Perm,
}

type Step<T> = Result<T, Abort>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Qualifier {
    Pass,
    Fail,
    SoftFail,
    Neutral,
}

impl Qualifier {
    fn result(self) -> SpfResult {
        match self {
            Qualifier::Pass => SpfResult::Pass,
            Qualifier::Fail => SpfResult::Fail,
            Qualifier::SoftFail => SpfResult::SoftFail,
            Qualifier::Neutral => SpfResult::Neutral,
        }
    }
}

/// Prefix lengths of `a` and `mx` (`/24//64`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct DualCidr {
    v4: u8,
    v6: u8,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Mechanism {
    All,
    Include(String),
    A(Option<String>, DualCidr),
    Mx(Option<String>, DualCidr),
    Ptr,
    Ip(IpAddr, u8),
    Exists(String),
}

/// A parsed record: its mechanisms in order and the `redirect` target.
#[derive(Debug, Default)]
struct Record {
    mechanisms: Vec<(Qualifier, Mechanism)>,
    redirect: Option<String>,
}

struct Eval<'a> {
    dns: &'a Dns,
    ip: IpAddr,
    helo: String,
    /// `local@domain` of the identity, for the `s` macro.
    sender: String,
    local: String,
    sender_domain: String,
    dns_terms: usize,
    voids: usize,
}

impl Eval<'_> {
    /// check_host() of §4 for `domain`.
    fn check_host(
        &mut self,
        domain: String,
    ) -> Pin<Box<dyn Future<Output = Step<SpfResult>> + Send + '_>> {
        Box::pin(async move {
            let domain = domain.trim_end_matches('.').to_owned();
            if !is_domain(&domain) {
                return Ok(SpfResult::None);
            }
            let records = match self.dns.txt(&domain).await {
                Ok(r) => r,
                Err(DnsError::InvalidName(_)) => return Ok(SpfResult::None),
                Err(_) => return Err(Abort::Temp),
            };
            let mut spf = records.iter().filter(|r| has_version(r, "v=spf1"));
            let text = match (spf.next(), spf.next()) {
                (None, _) => return Ok(SpfResult::None),
                (Some(one), None) => one.clone(),
                (Some(_), Some(_)) => return Err(Abort::Perm),
            };
            let record = parse_record(&text)?;
            for (qualifier, mechanism) in &record.mechanisms {
                if self.matches(mechanism, &domain).await? {
                    return Ok(qualifier.result());
                }
            }
            match record.redirect {
                Some(spec) => {
                    self.count_dns_term()?;
                    let target = self.expand_domain(&spec, &domain)?;
                    match self.check_host(target).await? {
                        SpfResult::None => Err(Abort::Perm),
                        other => Ok(other),
                    }
                }
                None => Ok(SpfResult::Neutral),
            }
        })
    }

    fn count_dns_term(&mut self) -> Step<()> {
        self.dns_terms += 1;
        if self.dns_terms > MAX_DNS_TERMS {
            return Err(Abort::Perm);
        }
        Ok(())
    }

    /// Notes a lookup that found nothing (§4.6.4).
    fn void_if(&mut self, empty: bool) -> Step<()> {
        if empty {
            self.voids += 1;
            if self.voids > MAX_VOID_LOOKUPS {
                return Err(Abort::Perm);
            }
        }
        Ok(())
    }

    /// The addresses of `name` in the client's family.
    async fn addresses(&mut self, name: &str) -> Step<Vec<IpAddr>> {
        match self.dns.addresses(name, self.ip.is_ipv6()).await {
            Ok(ips) => Ok(ips),
            Err(DnsError::InvalidName(_)) => Err(Abort::Perm),
            Err(_) => Err(Abort::Temp),
        }
    }

    async fn matches(&mut self, mechanism: &Mechanism, domain: &str) -> Step<bool> {
        match mechanism {
            Mechanism::All => Ok(true),
            Mechanism::Ip(net, prefix) => Ok(in_network(self.ip, *net, *prefix)),
            Mechanism::Include(spec) => {
                self.count_dns_term()?;
                let target = self.expand_domain(spec, domain)?;
                match self.check_host(target).await? {
                    SpfResult::Pass => Ok(true),
                    SpfResult::Fail | SpfResult::SoftFail | SpfResult::Neutral => Ok(false),
                    SpfResult::TempError => Err(Abort::Temp),
                    SpfResult::PermError | SpfResult::None => Err(Abort::Perm),
                }
            }
            Mechanism::A(spec, cidr) => {
                self.count_dns_term()?;
                let target = self.target(spec.as_deref(), domain)?;
                let ips = self.addresses(&target).await?;
                self.void_if(ips.is_empty())?;
                Ok(self.any_in(&ips, *cidr))
            }
            Mechanism::Mx(spec, cidr) => {
                self.count_dns_term()?;
                let target = self.target(spec.as_deref(), domain)?;
                let hosts = match self.dns.mx(&target).await {
                    Ok(h) => h,
                    Err(DnsError::InvalidName(_)) => return Err(Abort::Perm),
                    Err(_) => return Err(Abort::Temp),
                };
                self.void_if(hosts.is_empty())?;
                if hosts.len() > MAX_MX_NAMES {
                    return Err(Abort::Perm);
                }
                for host in hosts.iter().filter(|h| !h.is_empty()) {
                    let ips = self.addresses(host).await?;
                    if self.any_in(&ips, *cidr) {
                        return Ok(true);
                    }
                }
                Ok(false)
            }
            Mechanism::Ptr => {
                self.count_dns_term()?;
                Ok(false)
            }
            Mechanism::Exists(spec) => {
                self.count_dns_term()?;
                let target = self.expand_domain(spec, domain)?;
                // Always an A query, whatever the client's family (§5.7).
                let found = match self.dns.addresses(&target, false).await {
                    Ok(ips) => !ips.is_empty(),
                    Err(DnsError::InvalidName(_)) => return Err(Abort::Perm),
                    Err(_) => return Err(Abort::Temp),
                };
                self.void_if(!found)?;
                Ok(found)
            }
        }
    }

    fn target(&self, spec: Option<&str>, domain: &str) -> Step<String> {
        match spec {
            Some(spec) => self.expand_domain(spec, domain),
            None => Ok(domain.to_owned()),
        }
    }

    fn any_in(&self, ips: &[IpAddr], cidr: DualCidr) -> bool {
        let prefix = if self.ip.is_ipv4() { cidr.v4 } else { cidr.v6 };
        ips.iter().any(|net| in_network(self.ip, *net, prefix))
    }

    /// A domain-spec with its macros expanded (§7), shortened to
    /// [`MAX_DOMAIN_LEN`] by dropping leading labels.
    fn expand_domain(&self, spec: &str, domain: &str) -> Step<String> {
        let mut out = self.expand(spec, domain)?;
        if out.len() > MAX_DOMAIN_LEN {
            // Whole labels off the left, in one cut: the first label start
            // that leaves at most MAX_DOMAIN_LEN bytes.
            let earliest = out.len() - MAX_DOMAIN_LEN;
            let cut = out.as_bytes()[earliest - 1..]
                .iter()
                .position(|b| *b == b'.')
                .map(|i| earliest + i)
                .ok_or(Abort::Perm)?;
            out.drain(..cut);
        }
        let out = out.trim_end_matches('.').to_owned();
        if !is_expanded_domain(&out) {
            return Err(Abort::Perm);
        }
        Ok(out)
    }

    fn expand(&self, spec: &str, domain: &str) -> Step<String> {
        let mut out = String::new();
        let mut chars = spec.chars();
        while let Some(c) = chars.next() {
            if c != '%' {
                out.push(c);
                continue;
            }
            match chars.next() {
                Some('%') => out.push('%'),
                Some('_') => out.push(' '),
                Some('-') => out.push_str("%20"),
                Some('{') => {
                    let mut body = String::new();
                    loop {
                        match chars.next() {
                            Some('}') => break,
                            Some(ch) => body.push(ch),
                            None => return Err(Abort::Perm),
                        }
                    }
                    out.push_str(&self.macro_value(&body, domain)?);
                }
                _ => return Err(Abort::Perm),
            }
            // A record repeating a macro of a long sender could otherwise
            // make megabytes; nothing sane comes near this.
            if out.len() > MAX_EXPANSION {
                return Err(Abort::Perm);
            }
        }
        Ok(out)
    }

    /// One `%{…}`: letter, optional digits, optional `r`, delimiters.
    fn macro_value(&self, body: &str, domain: &str) -> Step<String> {
        let mut chars = body.chars();
        let letter = chars.next().ok_or(Abort::Perm)?;
        let value = match letter.to_ascii_lowercase() {
            's' => self.sender.clone(),
            'l' => self.local.clone(),
            'o' => self.sender_domain.clone(),
            'd' => domain.to_owned(),
            'i' => dotted_ip(self.ip),
            'p' => "unknown".to_owned(),
            'v' => if self.ip.is_ipv4() { "in-addr" } else { "ip6" }.to_owned(),
            'h' => self.helo.clone(),
            // c, r and t belong to explanations only (§7.2).
            _ => return Err(Abort::Perm),
        };
        let rest: String = chars.collect();
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let rest = &rest[digits.len()..];
        let (reverse, delimiters) = match rest.strip_prefix(['r', 'R']) {
            Some(d) => (true, d),
            None => (false, rest),
        };
        if !delimiters.chars().all(|c| ".-+,/_=".contains(c)) {
            return Err(Abort::Perm);
        }
        let delimiters = if delimiters.is_empty() {
            "."
        } else {
            delimiters
        };
        let mut parts: Vec<&str> = value.split(|c| delimiters.contains(c)).collect();
        if reverse {
            parts.reverse();
        }
        if !digits.is_empty() {
            let keep: usize = digits.parse().map_err(|_| Abort::Perm)?;
            if keep == 0 {
                return Err(Abort::Perm);
            }
            parts.drain(..parts.len().saturating_sub(keep));
        }
        let joined = parts.join(".");
        Ok(if letter.is_ascii_uppercase() {
            url_escape(&joined)
        } else {
            joined
        })
    }
}

/// Parses the terms after `v=spf1`; any syntax error is a permerror (§4.6).
fn parse_record(text: &str) -> Step<Record> {
    let mut record = Record::default();
    let mut seen_exp = false;
    for term in text.split_ascii_whitespace().skip(1) {
        let name_len = term
            .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
            .unwrap_or(term.len());
        if term[name_len..].starts_with('=') && name_len > 0 {
            let (name, value) = (&term[..name_len], &term[name_len + 1..]);
            if !term.starts_with(|c: char| c.is_ascii_alphabetic()) {
                return Err(Abort::Perm);
            }
            if name.eq_ignore_ascii_case("redirect") {
                if record.redirect.is_some() || value.is_empty() {
                    return Err(Abort::Perm);
                }
                record.redirect = Some(value.to_owned());
            } else if name.eq_ignore_ascii_case("exp") {
                if seen_exp {
                    return Err(Abort::Perm);
                }
                seen_exp = true;
            }
            // Unknown modifiers are ignored (§6).
            continue;
        }
        let (qualifier, term) = match term.as_bytes().first() {
            Some(b'+') => (Qualifier::Pass, &term[1..]),
            Some(b'-') => (Qualifier::Fail, &term[1..]),
            Some(b'~') => (Qualifier::SoftFail, &term[1..]),
            Some(b'?') => (Qualifier::Neutral, &term[1..]),
            _ => (Qualifier::Pass, term),
        };
        record.mechanisms.push((qualifier, parse_mechanism(term)?));
    }
    Ok(record)
}

fn parse_mechanism(term: &str) -> Step<Mechanism> {
    let split = term.find([':', '/']).unwrap_or(term.len());
    let (name, rest) = term.split_at(split);
    let arg = rest.strip_prefix(':');
    let required = |arg: Option<&str>| match arg {
        Some(a) if !a.is_empty() => Ok(a.to_owned()),
        _ => Err(Abort::Perm),
    };
    match name.to_ascii_lowercase().as_str() {
        "all" if rest.is_empty() => Ok(Mechanism::All),
        "include" => Ok(Mechanism::Include(required(arg)?)),
        "exists" => Ok(Mechanism::Exists(required(arg)?)),
        "ptr" => {
            if arg.is_some_and(str::is_empty) || (arg.is_none() && !rest.is_empty()) {
                return Err(Abort::Perm);
            }
            Ok(Mechanism::Ptr)
        }
        "a" | "mx" => {
            let (spec, cidr) = match arg {
                Some(a) => {
                    let (spec, cidr) = split_dual_cidr(a)?;
                    if spec.is_empty() {
                        return Err(Abort::Perm);
                    }
                    (Some(spec.to_owned()), cidr)
                }
                None => split_dual_cidr(rest).and_then(|(spec, cidr)| {
                    if spec.is_empty() {
                        Ok((None, cidr))
                    } else {
                        Err(Abort::Perm)
                    }
                })?,
            };
            Ok(if name.eq_ignore_ascii_case("a") {
                Mechanism::A(spec, cidr)
            } else {
                Mechanism::Mx(spec, cidr)
            })
        }
        "ip4" | "ip6" => {
            let arg = required(arg)?;
            let (addr, prefix) = match arg.split_once('/') {
                Some((a, p)) => (a, Some(p)),
                None => (arg.as_str(), None),
            };
            let ip: IpAddr = addr.parse().map_err(|_| Abort::Perm)?;
            let max = if ip.is_ipv4() { 32 } else { 128 };
            if ip.is_ipv4() != name.eq_ignore_ascii_case("ip4") {
                return Err(Abort::Perm);
            }
            let prefix = match prefix {
                Some(p) => parse_prefix(p, max)?,
                None => max,
            };
            Ok(Mechanism::Ip(ip, prefix))
        }
        _ => Err(Abort::Perm),
    }
}

/// `domain/24//64`, `domain//64`, `/24` → the domain part and the prefixes,
/// taken from the end (a macro's delimiters may hold a `/`).
fn split_dual_cidr(s: &str) -> Step<(&str, DualCidr)> {
    let mut cidr = DualCidr { v4: 32, v6: 128 };
    let mut head = s;
    if let Some((h, v6)) = split_prefix(head, "//") {
        cidr.v6 = parse_prefix(v6, 128)?;
        head = h;
    }
    if let Some((h, v4)) = split_prefix(head, "/") {
        cidr.v4 = parse_prefix(v4, 32)?;
        head = h;
    }
    Ok((head, cidr))
}

/// `head` + `sep` + digits at the end of `s`.
fn split_prefix<'a>(s: &'a str, sep: &str) -> Option<(&'a str, &'a str)> {
    let digits = s.len() - s.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let (rest, number) = s.split_at(s.len() - digits);
    let head = rest.strip_suffix(sep)?;
    // `a//64` must not read as `a/` + `/64`.
    if sep == "/" && head.ends_with('/') {
        return None;
    }
    Some((head, number))
}

fn parse_prefix(s: &str, max: u8) -> Step<u8> {
    // No leading zeros (§5.6: "0" alone is fine).
    if s.is_empty() || s.len() > 3 || (s.len() > 1 && s.starts_with('0')) {
        return Err(Abort::Perm);
    }
    s.parse::<u8>()
        .ok()
        .filter(|p| *p <= max)
        .ok_or(Abort::Perm)
}

/// Whether `ip` lies in `net/prefix` (never across families).
fn in_network(ip: IpAddr, net: IpAddr, prefix: u8) -> bool {
    match (ip, net.to_canonical()) {
        (IpAddr::V4(ip), IpAddr::V4(net)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            u32::from(ip) & mask == u32::from(net) & mask
        }
        (IpAddr::V6(ip), IpAddr::V6(net)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            u128::from(ip) & mask == u128::from(net) & mask
        }
        _ => false,
    }
}

/// The `i` macro: dotted quad, or 32 dot-separated nibbles for IPv6.
fn dotted_ip(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => v6
            .octets()
            .iter()
            .flat_map(|b| [b >> 4, b & 0xf])
            .map(|n| format!("{n:x}"))
            .collect::<Vec<_>>()
            .join("."),
    }
}

/// Upper-case macro letters are URL-escaped (§7.3).
fn url_escape(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A name check_host() can work with (§4.3): several labels of 1 to 63
/// letters, digits, `-` or `_`, at most 253 characters in all.
fn is_domain(name: &str) -> bool {
    is_name_like(name, |c| c.is_alphanumeric() || matches!(c, '-' | '_'))
}

/// What a macro may expand to: labels of any visible characters (a local
/// part may hold `+` or `=`).
fn is_expanded_domain(name: &str) -> bool {
    is_name_like(name, |c| !c.is_whitespace() && !c.is_control())
}

fn is_name_like(name: &str, allowed: impl Fn(char) -> bool) -> bool {
    name.len() <= MAX_DOMAIN_LEN
        && name.contains('.')
        && name
            .split('.')
            .all(|label| !label.is_empty() && label.len() <= 63 && label.chars().all(&allowed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dns_test_server::TestDnsServer;

    const BUDGET: Duration = Duration::from_secs(5);

    async fn setup() -> (TestDnsServer, Dns) {
        let server = TestDnsServer::start().await.expect("test DNS server");
        let dns = Dns::new(Some(&[server.addr()])).expect("resolver");
        (server, dns)
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    async fn result(dns: &Dns, client: &str, from: &str) -> SpfResult {
        check(dns, ip(client), "helo.test", from, BUDGET)
            .await
            .result
    }

    #[tokio::test]
    async fn qualifiers_and_address_mechanisms() {
        let (server, dns) = setup().await;
        server.set_txt(
            "s.test",
            &["v=spf1 ip4:192.0.2.0/24 ip6:2001:db8::/32 -ip4:198.51.100.1 ~ip4:198.51.100.2 ?ip4:198.51.100.3 -all"],
        );
        for (client, want) in [
            ("192.0.2.77", SpfResult::Pass),
            ("::ffff:192.0.2.77", SpfResult::Pass),
            ("2001:db8:5::1", SpfResult::Pass),
            ("198.51.100.1", SpfResult::Fail),
            ("198.51.100.2", SpfResult::SoftFail),
            ("198.51.100.3", SpfResult::Neutral),
            ("203.0.113.9", SpfResult::Fail),
            ("2001:db9::1", SpfResult::Fail),
        ] {
            assert_eq!(result(&dns, client, "a@s.test").await, want, "{client}");
        }
        // No `all`: neutral.
        server.set_txt("n.test", &["v=spf1 ip4:192.0.2.1"]);
        assert_eq!(
            result(&dns, "192.0.2.2", "a@n.test").await,
            SpfResult::Neutral
        );
    }

    #[tokio::test]
    async fn none_when_there_is_no_policy() {
        let (server, dns) = setup().await;
        assert_eq!(
            result(&dns, "192.0.2.1", "a@missing.test").await,
            SpfResult::None
        );
        server.set_txt(
            "other.test",
            &["google-site-verification=x", "v=spf10 -all"],
        );
        assert_eq!(
            result(&dns, "192.0.2.1", "a@other.test").await,
            SpfResult::None
        );
        // Not a usable domain at all.
        assert_eq!(
            result(&dns, "192.0.2.1", "a@localhost").await,
            SpfResult::None
        );
        assert_eq!(
            result(&dns, "192.0.2.1", "a@[192.0.2.1]").await,
            SpfResult::None
        );
    }

    #[tokio::test]
    async fn permerrors() {
        let (server, dns) = setup().await;
        for bad in [
            "v=spf1 ip4:192.0.2.300 -all",
            "v=spf1 ip4:192.0.2.0/33 -all",
            "v=spf1 ip6:192.0.2.1 -all",
            "v=spf1 frobnicate -all",
            "v=spf1 include -all",
            "v=spf1 redirect=a.test redirect=b.test",
            "v=spf1 a:%{z}.test -all",
            "v=spf1 a/024 -all",
        ] {
            server.set_txt("bad.test", &[bad]);
            assert_eq!(
                result(&dns, "192.0.2.1", "a@bad.test").await,
                SpfResult::PermError,
                "{bad}"
            );
        }
        server.set_txt("two.test", &["v=spf1 -all", "v=spf1 +all"]);
        assert_eq!(
            result(&dns, "192.0.2.1", "a@two.test").await,
            SpfResult::PermError
        );
        // Unknown modifiers are fine.
        server.set_txt("mod.test", &["v=spf1 foo=bar exp=explain.test +all"]);
        assert_eq!(
            result(&dns, "192.0.2.1", "a@mod.test").await,
            SpfResult::Pass
        );
    }

    #[tokio::test]
    async fn include_and_redirect() {
        let (server, dns) = setup().await;
        server.set_txt("_spf.provider.test", &["v=spf1 ip4:203.0.113.0/24 -all"]);
        server.set_txt("inc.test", &["v=spf1 include:_spf.provider.test ~all"]);
        assert_eq!(
            result(&dns, "203.0.113.5", "a@inc.test").await,
            SpfResult::Pass
        );
        // The include's own -all does not end the outer check.
        assert_eq!(
            result(&dns, "192.0.2.5", "a@inc.test").await,
            SpfResult::SoftFail
        );
        server.set_txt("noinc.test", &["v=spf1 include:nothing.test -all"]);
        assert_eq!(
            result(&dns, "192.0.2.5", "a@noinc.test").await,
            SpfResult::PermError
        );
        server.set_txt(
            "red.test",
            &["v=spf1 ip4:192.0.2.1 redirect=_spf.provider.test"],
        );
        assert_eq!(
            result(&dns, "192.0.2.1", "a@red.test").await,
            SpfResult::Pass
        );
        assert_eq!(
            result(&dns, "203.0.113.5", "a@red.test").await,
            SpfResult::Pass
        );
        assert_eq!(
            result(&dns, "198.51.100.1", "a@red.test").await,
            SpfResult::Fail
        );
        server.set_txt("redx.test", &["v=spf1 redirect=nothing.test"]);
        assert_eq!(
            result(&dns, "192.0.2.1", "a@redx.test").await,
            SpfResult::PermError
        );
        // A match before it means the redirect is never followed.
        server.set_txt("redall.test", &["v=spf1 -all redirect=_spf.provider.test"]);
        assert_eq!(
            result(&dns, "203.0.113.5", "a@redall.test").await,
            SpfResult::Fail
        );
    }

    #[tokio::test]
    async fn a_and_mx_with_prefixes() {
        let (server, dns) = setup().await;
        server.set_a("h.test", &[ip("192.0.2.10"), ip("2001:db8::10")]);
        server.set_a("mail.h.test", &[ip("198.51.100.20")]);
        server.set_mx("h.test", &[(10, "mail.h.test")]);
        server.set_txt("h.test", &["v=spf1 a mx/24 -all"]);
        assert_eq!(
            result(&dns, "192.0.2.10", "a@h.test").await,
            SpfResult::Pass
        );
        assert_eq!(
            result(&dns, "2001:db8::10", "a@h.test").await,
            SpfResult::Pass
        );
        assert_eq!(
            result(&dns, "198.51.100.99", "a@h.test").await,
            SpfResult::Pass
        );
        assert_eq!(
            result(&dns, "192.0.2.11", "a@h.test").await,
            SpfResult::Fail
        );
        server.set_txt("other.test", &["v=spf1 a:h.test/24//64 -all"]);
        assert_eq!(
            result(&dns, "192.0.2.99", "a@other.test").await,
            SpfResult::Pass
        );
        assert_eq!(
            result(&dns, "2001:db8::ffff", "a@other.test").await,
            SpfResult::Pass
        );
        assert_eq!(
            result(&dns, "2001:db8:1::1", "a@other.test").await,
            SpfResult::Fail
        );
    }

    #[tokio::test]
    async fn exists_with_macros() {
        let (server, dns) = setup().await;
        server.set_a("1.2.0.192.in-addr.allow.test", &[ip("127.0.0.2")]);
        server.set_txt("m.test", &["v=spf1 exists:%{ir}.%{v}.allow.test -all"]);
        assert_eq!(result(&dns, "192.0.2.1", "a@m.test").await, SpfResult::Pass);
        assert_eq!(result(&dns, "192.0.2.2", "a@m.test").await, SpfResult::Fail);
        server.set_a("bob.m2.test.users.test", &[ip("127.0.0.2")]);
        server.set_txt("m2.test", &["v=spf1 exists:%{l}.%{d}.users.test -all"]);
        assert_eq!(
            result(&dns, "192.0.2.1", "bob@m2.test").await,
            SpfResult::Pass
        );
        assert_eq!(
            result(&dns, "192.0.2.1", "eve@m2.test").await,
            SpfResult::Fail
        );
    }

    #[test]
    fn macro_expansion() {
        let dns = Dns::new(Some(&["127.0.0.1:9".parse().unwrap()])).unwrap();
        let eval = Eval {
            dns: &dns,
            ip: ip("192.0.2.3"),
            helo: "mx.example.org".into(),
            sender: "strong-bad@email.example.com".into(),
            local: "strong-bad".into(),
            sender_domain: "email.example.com".into(),
            dns_terms: 0,
            voids: 0,
        };
        let d = "email.example.com";
        // The examples of RFC 7208 §7.4.
        for (spec, want) in [
            ("%{s}", "strong-bad@email.example.com"),
            ("%{o}", "email.example.com"),
            ("%{d}", "email.example.com"),
            ("%{d4}", "email.example.com"),
            ("%{d3}", "email.example.com"),
            ("%{d2}", "example.com"),
            ("%{d1}", "com"),
            ("%{dr}", "com.example.email"),
            ("%{d2r}", "example.email"),
            ("%{l}", "strong-bad"),
            ("%{l-}", "strong.bad"),
            ("%{lr}", "strong-bad"),
            ("%{lr-}", "bad.strong"),
            ("%{l1r-}", "strong"),
            (
                "%{ir}.%{v}._spf.%{d2}",
                "3.2.0.192.in-addr._spf.example.com",
            ),
            ("%{lr-}.lp._spf.%{d2}", "bad.strong.lp._spf.example.com"),
            (
                "%{d2}.trusted-domains.example.net",
                "example.com.trusted-domains.example.net",
            ),
            ("%{h}%%%_%-", "mx.example.org% %20"),
            ("%{S}", "strong-bad%40email.example.com"),
        ] {
            assert_eq!(eval.expand(spec, d).unwrap(), want, "{spec}");
        }
        let v6 = Eval {
            ip: ip("2001:db8::cb01"),
            ..eval
        };
        assert_eq!(
            v6.expand("%{ir}.%{v}._spf.%{d2}", d).unwrap(),
            "1.0.b.c.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6._spf.example.com"
        );
        // Too long: whole labels go from the left.
        let long = Eval {
            local: format!("{}end", "abc.".repeat(100)),
            ..v6
        };
        let cut = long.expand_domain("%{l}.example.com", d).unwrap();
        assert!(cut.len() <= MAX_DOMAIN_LEN, "{}", cut.len());
        assert!(cut.len() > MAX_DOMAIN_LEN - 4, "{}", cut.len());
        assert!(
            cut.starts_with("abc.") && cut.ends_with(".end.example.com"),
            "{cut}"
        );
        let huge = Eval {
            local: format!("{}b", "a.".repeat(150)),
            ..long
        };
        let spec = format!("{}example.com", "%{l}.".repeat(14));
        assert_eq!(huge.expand_domain(&spec, d), Err(Abort::Perm));
        // Just under the cap, the same is cut to length.
        let spec = format!("{}example.com", "%{l}.".repeat(13));
        assert!(huge.expand_domain(&spec, d).is_ok());
        let v6 = huge;
        for bad in ["%{d0}", "%{x}", "%{c}", "%{d", "%a", "%{d2!}"] {
            assert_eq!(v6.expand(bad, d), Err(Abort::Perm), "{bad}");
        }
    }

    #[tokio::test]
    async fn lookup_limits() {
        let (server, dns) = setup().await;
        // A chain of 11 includes: the eleventh DNS term is a permerror.
        for i in 0..11 {
            server.set_txt(
                &format!("l{i}.test"),
                &[&format!("v=spf1 include:l{}.test -all", i + 1)],
            );
        }
        server.set_txt("l11.test", &["v=spf1 +all"]);
        assert_eq!(
            result(&dns, "192.0.2.1", "a@l0.test").await,
            SpfResult::PermError
        );
        assert_eq!(
            result(&dns, "192.0.2.1", "a@l2.test").await,
            SpfResult::Pass
        );
        // A loop ends the same way.
        server.set_txt("loop.test", &["v=spf1 include:loop.test -all"]);
        assert_eq!(
            result(&dns, "192.0.2.1", "a@loop.test").await,
            SpfResult::PermError
        );
        // Three lookups that find nothing.
        server.set_txt(
            "void.test",
            &["v=spf1 a:x1.void.test a:x2.void.test a:x3.void.test +all"],
        );
        assert_eq!(
            result(&dns, "192.0.2.1", "a@void.test").await,
            SpfResult::PermError
        );
        server.set_txt("void2.test", &["v=spf1 a:x1.void.test a:x2.void.test +all"]);
        assert_eq!(
            result(&dns, "192.0.2.1", "a@void2.test").await,
            SpfResult::Pass
        );
        // More than ten MX names.
        let many: Vec<(u16, String)> = (0..11).map(|i| (i, format!("mx{i}.test"))).collect();
        let many: Vec<(u16, &str)> = many.iter().map(|(p, h)| (*p, h.as_str())).collect();
        server.set_mx("mxs.test", &many);
        server.set_txt("mxs.test", &["v=spf1 mx +all"]);
        assert_eq!(
            result(&dns, "192.0.2.1", "a@mxs.test").await,
            SpfResult::PermError
        );
    }

    #[tokio::test]
    async fn helo_for_the_null_sender_and_postmaster_for_an_empty_local_part() {
        let (server, dns) = setup().await;
        server.set_txt("helo.test", &["v=spf1 ip4:192.0.2.1 -all"]);
        let c = check(&dns, ip("192.0.2.1"), "helo.test", "", BUDGET).await;
        assert_eq!(c.result, SpfResult::Pass);
        assert_eq!(c.identity, Identity::Helo("helo.test".into()));
        let c = check(&dns, ip("192.0.2.9"), "helo.test", "", BUDGET).await;
        assert_eq!(c.result, SpfResult::Fail);
        server.set_a("postmaster.pm.test", &[ip("127.0.0.2")]);
        server.set_txt("pm.test", &["v=spf1 exists:%{l}.%{o} -all"]);
        assert_eq!(result(&dns, "192.0.2.1", "@pm.test").await, SpfResult::Pass);
    }

    #[tokio::test]
    async fn a_dead_resolver_is_a_temperror_within_the_budget() {
        let silent = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let dns = Dns::new(Some(&[silent.local_addr().unwrap()])).unwrap();
        let started = std::time::Instant::now();
        let c = check(
            &dns,
            ip("192.0.2.1"),
            "h.test",
            "a@x.test",
            Duration::from_millis(300),
        )
        .await;
        assert_eq!(c.result, SpfResult::TempError);
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
    }
}
