//! DMARC (RFC 7489): whether a passing SPF or DKIM result is aligned with the
//! domain of the From header, under the policy that domain publishes.
//!
//! Without a copy of the public suffix list, the policy and the
//! organizational domain are found by the DNS tree walk of DMARCbis
//! (draft-ietf-dmarc-dmarcbis §4.10): `_dmarc.` of the From domain, then of
//! each parent, at most [`MAX_WALK`] queries; the organizational domain is
//! the one whose record says `psd=n`, the one below a `psd=y` record, or
//! else the highest one with a record. Relaxed alignment means the
//! authenticated domain is the organizational domain or under it.

use std::time::Duration;

use mail_parser::MessageParser;

use crate::core::dkim::{DkimCheck, DkimResult};
use crate::core::spf::{Identity, SpfCheck, SpfResult};
use crate::dns::{Dns, DnsError, has_version};
use crate::mime::header_fields::Field;

/// `_dmarc` queries one message may make.
const MAX_WALK: usize = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DmarcResult {
    Pass,
    Fail,
    /// The From domain publishes no policy.
    None,
    TempError,
    /// No single From domain to check.
    PermError,
}

impl DmarcResult {
    pub fn as_str(self) -> &'static str {
        match self {
            DmarcResult::Pass => "pass",
            DmarcResult::Fail => "fail",
            DmarcResult::None => "none",
            DmarcResult::TempError => "temperror",
            DmarcResult::PermError => "permerror",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DmarcCheck {
    pub result: DmarcResult,
    /// The From domain (empty when there is none to check).
    pub from_domain: String,
    /// The policy that applies (`none`, `quarantine`, `reject`), when found.
    pub policy: Option<String>,
}

/// The policy found for a From domain by the tree walk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// `p`, or `sp` when the record is a parent's.
    pub disposition: String,
    pub organizational_domain: String,
    pub strict_spf: bool,
    pub strict_dkim: bool,
}

/// The From domain of a message's header: its one From field holding one
/// address; `None` otherwise.
pub fn from_domain<'a>(fields: impl IntoIterator<Item = Field<'a>>) -> Option<String> {
    let mut from = fields.into_iter().filter(|f| f.is("From"));
    let field = from.next()?;
    if from.next().is_some() {
        return None;
    }
    let text = [b"From:", field.value, b"\r\n"].concat();
    let parsed = MessageParser::new().parse_headers(&text)?;
    let mut addresses = parsed.from()?.iter();
    let address = addresses.next()?.address()?;
    if addresses.next().is_some() {
        return None;
    }
    let (_, domain) = address.rsplit_once('@')?;
    let domain = domain.trim_end_matches('.').to_ascii_lowercase();
    (domain.contains('.') && !domain.starts_with('.')).then_some(domain)
}

/// The DMARC policy of `domain`, `Ok(None)` when it has none, within `budget`.
pub async fn policy(
    dns: &Dns,
    domain: &str,
    budget: Duration,
) -> Result<Option<Policy>, DmarcResult> {
    tokio::time::timeout(budget, walk(dns, domain))
        .await
        .unwrap_or(Err(DmarcResult::TempError))
}

/// The DMARC result for a message whose From domain is `from_domain`.
pub fn evaluate(
    from_domain: &str,
    policy: Option<&Policy>,
    spf: &SpfCheck,
    dkim: &[DkimCheck],
) -> DmarcCheck {
    let Some(policy) = policy else {
        return DmarcCheck {
            result: DmarcResult::None,
            from_domain: from_domain.to_owned(),
            policy: None,
        };
    };
    let aligned = |domain: &str, strict: bool| {
        let domain = domain.trim_end_matches('.').to_ascii_lowercase();
        if strict {
            domain == from_domain
        } else {
            let org = &policy.organizational_domain;
            domain == *org || domain.ends_with(&format!(".{org}"))
        }
    };
    let spf_domain = match &spf.identity {
        Identity::MailFrom(address) => address.rsplit_once('@').map_or("", |(_, d)| d),
        Identity::Helo(name) => name,
    };
    let spf_ok = spf.result == SpfResult::Pass && aligned(spf_domain, policy.strict_spf);
    let dkim_ok = dkim
        .iter()
        .any(|d| d.result == DkimResult::Pass && aligned(&d.domain, policy.strict_dkim));
    DmarcCheck {
        result: if spf_ok || dkim_ok {
            DmarcResult::Pass
        } else {
            DmarcResult::Fail
        },
        from_domain: from_domain.to_owned(),
        policy: Some(policy.disposition.clone()),
    }
}

/// The tree walk: the closest record sets the policy; the organizational
/// domain comes from all records found up to the top.
async fn walk(dns: &Dns, domain: &str) -> Result<Option<Policy>, DmarcResult> {
    let labels: Vec<&str> = domain.split('.').collect();
    // The domain itself, then parents; a very long name skips to 7 labels.
    let mut starts: Vec<usize> = vec![0];
    starts.extend((1..labels.len()).filter(|i| labels.len() - i < MAX_WALK));
    let mut found: Vec<(usize, Vec<(String, String)>)> = Vec::new();
    for start in starts.into_iter().take(MAX_WALK) {
        let name = labels[start..].join(".");
        let records = match dns.txt(&format!("_dmarc.{name}")).await {
            Ok(r) => r,
            Err(DnsError::InvalidName(_)) => return Ok(None),
            Err(_) => return Err(DmarcResult::TempError),
        };
        let mut dmarc = records.iter().filter(|r| has_version(r, "v=DMARC1"));
        if let (Some(record), None) = (dmarc.next(), dmarc.next())
            && let Some(tags) = tags(record)
        {
            found.push((start, tags));
        }
    }
    let Some((closest, tags)) = found.first() else {
        return Ok(None);
    };
    let get = |tags: &[(String, String)], name: &str| {
        tags.iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.to_ascii_lowercase())
    };
    let Some(p) = get(tags, "p").filter(|p| matches!(p.as_str(), "none" | "quarantine" | "reject"))
    else {
        return Ok(None);
    };
    let disposition = match get(tags, "sp") {
        Some(sp) if *closest > 0 && matches!(sp.as_str(), "none" | "quarantine" | "reject") => sp,
        _ => p,
    };
    let org_start = found
        .iter()
        .find_map(|(start, tags)| match get(tags, "psd").as_deref() {
            Some("n") => Some(*start),
            // One label below a public suffix's record.
            Some("y") => Some(start.saturating_sub(1)),
            _ => None,
        })
        .or_else(|| found.last().map(|(start, _)| *start))
        .unwrap_or(0);
    Ok(Some(Policy {
        disposition,
        organizational_domain: labels[org_start..].join("."),
        strict_spf: get(tags, "aspf").as_deref() == Some("s"),
        strict_dkim: get(tags, "adkim").as_deref() == Some("s"),
    }))
}

/// `v=DMARC1; p=reject; …` as (name, value) pairs.
fn tags(record: &str) -> Option<Vec<(String, String)>> {
    record
        .split(';')
        .filter(|t| !t.trim().is_empty())
        .map(|t| {
            let (n, v) = t.split_once('=')?;
            Some((n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dns_test_server::TestDnsServer;
    use crate::mime::header_fields;

    const BUDGET: Duration = Duration::from_secs(5);

    fn from_of(header: &str) -> Option<String> {
        let raw = format!("{header}\r\nSubject: x\r\n\r\nbody\r\n");
        from_domain(header_fields::fields(raw.as_bytes()))
    }

    #[test]
    fn the_from_domain() {
        assert_eq!(
            from_of("From: Joe <Joe@Example.COM>").as_deref(),
            Some("example.com")
        );
        assert_eq!(
            from_of("from: joe@example.com.").as_deref(),
            Some("example.com")
        );
        assert_eq!(
            from_of("From: \"a@evil.test\" <joe@example.com>").as_deref(),
            Some("example.com")
        );
        assert_eq!(from_of("From: a@x.test, b@y.test"), None);
        assert_eq!(from_of("From: a@x.test\r\nFrom: b@y.test"), None);
        assert_eq!(from_of("From: nobody"), None);
        assert_eq!(from_of("Sender: a@x.test"), None);
        assert_eq!(from_of("From: a@localhost"), None);
    }

    async fn setup() -> (TestDnsServer, Dns) {
        let server = TestDnsServer::start().await.expect("test DNS server");
        let dns = Dns::new(Some(&[server.addr()])).expect("resolver");
        (server, dns)
    }

    #[tokio::test]
    async fn policy_by_tree_walk() {
        let (server, dns) = setup().await;
        server.set_txt(
            "_dmarc.example.com",
            &["v=DMARC1; p=reject; sp=quarantine; adkim=s"],
        );
        let p = policy(&dns, "example.com", BUDGET).await.unwrap().unwrap();
        assert_eq!(p.disposition, "reject");
        assert_eq!(p.organizational_domain, "example.com");
        assert!(p.strict_dkim && !p.strict_spf);
        // A subdomain without a record of its own: the parent's sp=.
        let p = policy(&dns, "a.b.example.com", BUDGET)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(p.disposition, "quarantine");
        assert_eq!(p.organizational_domain, "example.com");
        // Its own record wins; the organizational domain stays the highest.
        server.set_txt("_dmarc.b.example.com", &["v=DMARC1; p=none"]);
        let p = policy(&dns, "a.b.example.com", BUDGET)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (p.disposition.as_str(), p.organizational_domain.as_str()),
            ("none", "example.com")
        );
        // A public suffix's record (psd=y): the organization is one below.
        server.set_txt("_dmarc.suffix.test", &["v=DMARC1; p=reject; psd=y"]);
        let p = policy(&dns, "shop.victim.suffix.test", BUDGET)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(p.organizational_domain, "victim.suffix.test");
        // Nothing published; two DMARC records are none too.
        assert_eq!(policy(&dns, "nothing.test", BUDGET).await, Ok(None));
        server.set_txt(
            "_dmarc.two.test",
            &["v=DMARC1; p=none", "v=DMARC1; p=reject"],
        );
        assert_eq!(policy(&dns, "two.test", BUDGET).await, Ok(None));

        let silent = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let dead = Dns::new(Some(&[silent.local_addr().unwrap()])).unwrap();
        let started = std::time::Instant::now();
        assert_eq!(
            policy(&dead, "example.com", Duration::from_millis(300)).await,
            Err(DmarcResult::TempError)
        );
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    fn spf(result: SpfResult, from: &str) -> SpfCheck {
        SpfCheck {
            result,
            identity: Identity::MailFrom(from.into()),
        }
    }

    fn dkim(result: DkimResult, domain: &str) -> DkimCheck {
        DkimCheck {
            result,
            domain: domain.into(),
            selector: "s".into(),
            b: String::new(),
        }
    }

    #[test]
    fn alignment() {
        let relaxed = Policy {
            disposition: "reject".into(),
            organizational_domain: "example.com".into(),
            strict_spf: false,
            strict_dkim: false,
        };
        let strict = Policy {
            strict_spf: true,
            strict_dkim: true,
            ..relaxed.clone()
        };
        let from = "news.example.com";
        let result =
            |p: &Policy, s: SpfCheck, d: &[DkimCheck]| evaluate(from, Some(p), &s, d).result;
        let bounce = spf(SpfResult::Pass, "b@bounce.example.com");
        // A sibling under the same organization is aligned when relaxed.
        assert_eq!(result(&relaxed, bounce.clone(), &[]), DmarcResult::Pass);
        assert_eq!(result(&strict, bounce, &[]), DmarcResult::Fail);
        let exact = spf(SpfResult::Pass, "b@news.example.com");
        assert_eq!(result(&strict, exact, &[]), DmarcResult::Pass);
        // Passing for someone else's domain does not count.
        let elsewhere = spf(SpfResult::Pass, "b@example.com.evil.test");
        assert_eq!(result(&relaxed, elsewhere.clone(), &[]), DmarcResult::Fail);
        assert_eq!(
            result(
                &relaxed,
                elsewhere.clone(),
                &[dkim(DkimResult::Pass, "mailer.evil.test")]
            ),
            DmarcResult::Fail
        );
        // An aligned DKIM pass is enough; a failing one is not.
        assert_eq!(
            result(
                &relaxed,
                elsewhere.clone(),
                &[dkim(DkimResult::Pass, "Example.com")]
            ),
            DmarcResult::Pass
        );
        assert_eq!(
            result(
                &relaxed,
                spf(SpfResult::Fail, "b@news.example.com"),
                &[dkim(DkimResult::Fail, "example.com")]
            ),
            DmarcResult::Fail
        );
        let none = evaluate(from, None, &elsewhere, &[]);
        assert_eq!((none.result, none.policy), (DmarcResult::None, None));
    }
}
