//! Sender authentication of mail received over SMTP: SPF, DKIM and DMARC,
//! checked together under one deadline and written down as our
//! `Authentication-Results` field; fields that claim our name are removed
//! from the message first.

use std::net::IpAddr;
use std::time::Duration;

use crate::clock;
use crate::core::dmarc::{self, Policy};
use crate::core::spf::{self, SpfCheck, SpfResult};
use crate::core::{auth_results, dkim};
use crate::dns::Dns;
use crate::mime::header_fields;

/// What one SMTP session keeps between its messages: a client often sends
/// many with the same envelope sender and From domain.
#[derive(Debug, Default)]
pub struct SessionMemo {
    /// HELO, MAIL FROM and their SPF result (not a temperror).
    spf: Option<(String, String, SpfCheck)>,
    /// A From domain and its DMARC policy (as found, without error).
    dmarc: Option<(String, Option<Policy>)>,
}

/// The connection and envelope a message came with.
#[derive(Debug, Clone, Copy)]
pub struct Origin<'a> {
    pub ip: IpAddr,
    pub helo: &'a str,
    pub mail_from: &'a str,
}

/// Checks the sender of the message in `raw` after its first `skip` bytes
/// (the trace fields this hop put in front) within `budget` and returns our
/// `Authentication-Results` field (authserv-id `authserv_id`, with its
/// CRLF). Fields of the message that claim that authserv-id are removed.
pub async fn authenticate(
    dns: &Dns,
    memo: &mut SessionMemo,
    origin: Origin<'_>,
    raw: &mut Vec<u8>,
    skip: usize,
    authserv_id: &str,
    budget: Duration,
) -> String {
    let message = raw.get(skip..).unwrap_or_default();
    let known_spf = memo
        .spf
        .as_ref()
        .filter(|(helo, from, _)| helo == origin.helo && from == origin.mail_from)
        .map(|(_, _, check)| check.clone());
    let from_domain = dmarc::from_domain(header_fields::fields(message));
    let known_policy = memo
        .dmarc
        .as_ref()
        .filter(|(domain, _)| Some(domain) == from_domain.as_ref())
        .map(|(_, policy)| policy.clone());
    let now = u64::try_from(clock::now_micros() / 1_000_000).unwrap_or(0);
    let spf_check = async {
        match known_spf {
            Some(check) => check,
            None => spf::check(dns, origin.ip, origin.helo, origin.mail_from, budget).await,
        }
    };
    let policy = async {
        match (&from_domain, known_policy) {
            (None, _) => None,
            (Some(_), Some(known)) => Some(Ok(known)),
            (Some(domain), None) => Some(dmarc::policy(dns, domain, budget).await),
        }
    };
    // The message as it came, before any field of it is removed.
    let (spf, dkim, policy) =
        tokio::join!(spf_check, dkim::verify(dns, message, now, budget), policy);

    let dmarc = match (&from_domain, &policy) {
        (Some(domain), Some(Ok(policy))) => dmarc::evaluate(domain, policy.as_ref(), &spf, &dkim),
        (Some(domain), _) => dmarc::DmarcCheck {
            result: dmarc::DmarcResult::TempError,
            from_domain: domain.clone(),
            policy: None,
        },
        (None, _) => dmarc::DmarcCheck {
            result: dmarc::DmarcResult::PermError,
            from_domain: String::new(),
            policy: None,
        },
    };
    if spf.result != SpfResult::TempError {
        memo.spf = Some((
            origin.helo.to_owned(),
            origin.mail_from.to_owned(),
            spf.clone(),
        ));
    }
    if let (Some(domain), Some(Ok(policy))) = (from_domain, policy) {
        memo.dmarc = Some((domain, policy));
    }
    auth_results::strip_claimed(raw, skip, authserv_id);
    auth_results::header(authserv_id, &spf, &dkim, &dmarc)
}
