//! DKIM (RFC 6376; Ed25519 from RFC 8463): verification of the signatures
//! an inbound message carries, for `Authentication-Results`.
//!
//! `rsa-sha256` (keys of 1024 bits and up, as deployed) and
//! `ed25519-sha256`; `rsa-sha1` is not accepted (RFC 8301). At most
//! [`MAX_SIGNATURES`] signatures are looked at, and every key lookup ends at
//! one deadline for the whole message.

use std::time::Duration;

use aws_lc_rs::signature::{self, UnparsedPublicKey};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use crate::dns::{Dns, DnsError};
use crate::mime::header_fields::{self, Field};

/// Signatures verified per message; further ones are ignored.
pub const MAX_SIGNATURES: usize = 5;
/// Header fields a signed message may have; with more, its signatures are
/// not verified (`neutral`), so that a hostile header cannot cost
/// signatures × fields × signed names.
pub const MAX_HEADER_FIELDS: usize = 1000;
/// Longest `DKIM-Signature` field verified (real ones are under 2 KiB).
const MAX_SIGNATURE_FIELD: usize = 8 * 1024;
/// Names one signature may list in `h=`.
const MAX_SIGNED_FIELDS: usize = 200;
/// Characters of `b=` quoted in the result, to tell signatures apart (RFC 6008).
const B_PREFIX: usize = 8;

/// One signature's outcome (RFC 8601 §2.7.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DkimResult {
    Pass,
    /// The signature or the body hash does not verify.
    Fail,
    /// The signature cannot be processed (syntax, missing tags).
    Neutral,
    /// Valid, but not acceptable: SHA-1, expired, From not signed, …
    Policy,
    /// The key could not be looked up now.
    TempError,
    /// The key is missing, revoked or unusable.
    PermError,
}

impl DkimResult {
    pub fn as_str(self) -> &'static str {
        match self {
            DkimResult::Pass => "pass",
            DkimResult::Fail => "fail",
            DkimResult::Neutral => "neutral",
            DkimResult::Policy => "policy",
            DkimResult::TempError => "temperror",
            DkimResult::PermError => "permerror",
        }
    }
}

/// The outcome of one `DKIM-Signature` field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DkimCheck {
    pub result: DkimResult,
    /// The signing domain (`d=`), when the field names one.
    pub domain: String,
    pub selector: String,
    /// The start of the signature (`b=`).
    pub b: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Canon {
    Simple,
    Relaxed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Algorithm {
    RsaSha256,
    Ed25519Sha256,
}

/// How a signature hashes the body: canonicalization and `l=`.
type BodyForm = (Canon, Option<usize>);

struct Signature {
    algorithm: Algorithm,
    header_canon: Canon,
    body_canon: Canon,
    domain: String,
    selector: String,
    headers: Vec<String>,
    body_hash: Vec<u8>,
    signature: Vec<u8>,
    length: Option<usize>,
}

/// Verifies the DKIM signatures of `raw` (CRLF line ends). An unsigned
/// message gives an empty list. `now` (Unix seconds) judges `x=`.
pub async fn verify(dns: &Dns, raw: &[u8], now: u64, budget: Duration) -> Vec<DkimCheck> {
    let deadline = Instant::now() + budget;
    let body = &raw[header_fields::body_start(raw)..];
    // One field more than the limit tells that the limit was passed.
    let fields: Vec<Field<'_>> = header_fields::fields(raw)
        .take(MAX_HEADER_FIELDS + 1)
        .collect();
    let too_many_fields = fields.len() > MAX_HEADER_FIELDS;
    // Body hashes by canonicalization and length, each computed once.
    let mut hashes: Vec<(BodyForm, Option<Vec<u8>>)> = Vec::new();
    let mut out = Vec::new();
    for (index, field) in fields
        .iter()
        .enumerate()
        .filter(|(_, f)| f.is("DKIM-Signature"))
        .take(MAX_SIGNATURES)
    {
        let tags = tag_list(
            field
                .value
                .get(..MAX_SIGNATURE_FIELD)
                .unwrap_or(field.value),
        );
        let tag = |name: &str| {
            tags.as_ref()
                .and_then(|t| t.iter().find(|(n, _)| n == name))
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        let mut check = DkimCheck {
            result: DkimResult::Neutral,
            domain: tag("d"),
            selector: tag("s"),
            b: tag("b").chars().take(B_PREFIX).collect(),
        };
        let unreasonable = too_many_fields || field.raw.len() > MAX_SIGNATURE_FIELD;
        check.result = match tags.as_deref().map(|t| parse_signature(t, now)) {
            _ if unreasonable => DkimResult::Neutral,
            None => DkimResult::Neutral,
            Some(Err(result)) => result,
            Some(Ok(sig)) => {
                let key = timeout_at(deadline, key_of(dns, &sig)).await;
                match key {
                    Err(result) => result,
                    Ok(key) => {
                        let wanted = (sig.body_canon, sig.length);
                        let hash = match hashes.iter().find(|(k, _)| *k == wanted) {
                            Some((_, h)) => h.clone(),
                            None => {
                                let h = body_hash(body, sig.body_canon, sig.length);
                                hashes.push((wanted, h.clone()));
                                h
                            }
                        };
                        check_one(&sig, &key, &fields, index, hash)
                    }
                }
            }
        };
        out.push(check);
    }
    out
}

async fn timeout_at<T>(
    deadline: Instant,
    f: impl Future<Output = Result<T, DkimResult>>,
) -> Result<T, DkimResult> {
    tokio::time::timeout_at(deadline, f)
        .await
        .unwrap_or(Err(DkimResult::TempError))
}

/// Body hash, then signature over the signed header fields.
fn check_one(
    sig: &Signature,
    key: &[u8],
    fields: &[Field<'_>],
    own: usize,
    body_hash: Option<Vec<u8>>,
) -> DkimResult {
    if body_hash.as_deref() != Some(sig.body_hash.as_slice()) {
        return DkimResult::Fail;
    }
    let data = signed_data(sig, fields, own);
    let verified = match sig.algorithm {
        Algorithm::RsaSha256 => UnparsedPublicKey::new(
            &signature::RSA_PKCS1_1024_8192_SHA256_FOR_LEGACY_USE_ONLY,
            key,
        )
        .verify(&data, &sig.signature),
        Algorithm::Ed25519Sha256 => UnparsedPublicKey::new(&signature::ED25519, key)
            .verify(&Sha256::digest(&data), &sig.signature),
    };
    match verified {
        Ok(()) => DkimResult::Pass,
        Err(_) => DkimResult::Fail,
    }
}

/// The header fields named in `h=` (each name taking the next instance from
/// the bottom), then the signature field itself with `b=` emptied.
fn signed_data(sig: &Signature, fields: &[Field<'_>], own: usize) -> Vec<u8> {
    let mut used = vec![false; fields.len()];
    let mut data = Vec::new();
    for name in &sig.headers {
        let found = (0..fields.len())
            .rev()
            .find(|i| !used[*i] && *i != own && fields[*i].is(name));
        if let Some(i) = found {
            used[i] = true;
            data.extend_from_slice(&canonical_field(
                fields[i].name,
                fields[i].value,
                fields[i].raw,
                sig.header_canon,
            ));
        }
    }
    let own = &fields[own];
    let value = without_b_value(own.value);
    let raw: Vec<u8> = [&own.raw[..own.raw.len() - own.value.len()], &value[..]].concat();
    let mut last = canonical_field(own.name, &value, &raw, sig.header_canon);
    if last.ends_with(b"\r\n") {
        last.truncate(last.len() - 2);
    }
    data.extend_from_slice(&last);
    data
}

/// A field value with the value of its `b=` tag removed, all else kept.
fn without_b_value(value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(value.len());
    let mut rest = value;
    loop {
        let end = rest.iter().position(|b| *b == b';').unwrap_or(rest.len());
        let tag = &rest[..end];
        match tag.iter().position(|b| *b == b'=') {
            Some(eq) if trim(&tag[..eq]) == b"b" => {
                out.extend_from_slice(&tag[..=eq]);
                // Keep the line break that ends the field.
                if end == rest.len() && tag.ends_with(b"\r\n") {
                    out.extend_from_slice(b"\r\n");
                }
            }
            _ => out.extend_from_slice(tag),
        }
        if end == rest.len() {
            return out;
        }
        out.push(b';');
        rest = &rest[end + 1..];
    }
}

fn canonical_field(name: &[u8], value: &[u8], raw: &[u8], canon: Canon) -> Vec<u8> {
    match canon {
        Canon::Simple => raw.to_vec(),
        Canon::Relaxed => {
            let mut out = name.to_ascii_lowercase();
            out.push(b':');
            let mut space = false;
            let mut text = Vec::new();
            for b in value.iter().filter(|b| !matches!(b, b'\r' | b'\n')) {
                if matches!(b, b' ' | b'\t') {
                    space = true;
                } else {
                    if space && !text.is_empty() {
                        text.push(b' ');
                    }
                    space = false;
                    text.push(*b);
                }
            }
            out.extend_from_slice(&text);
            out.extend_from_slice(b"\r\n");
            out
        }
    }
}

/// SHA-256 of the canonical body (RFC 6376 §3.4.3, §3.4.4), or of its
/// first `limit` bytes (`l=`); `None` when the body is shorter than that.
/// Computed line by line, without a canonical copy of the body.
fn body_hash(body: &[u8], canon: Canon, limit: Option<usize>) -> Option<Vec<u8>> {
    let mut out = LimitedHash {
        hasher: Sha256::new(),
        left: limit.unwrap_or(usize::MAX),
        written: 0,
    };
    let mut pieces = body.split(|b| *b == b'\n').peekable();
    let mut line = Vec::new();
    // Empty lines are written only once a line with text follows them.
    let mut pending_empty = 0usize;
    while let Some(piece) = pieces.next() {
        // The piece after the last LF is not a line unless it has text.
        if piece.is_empty() && pieces.peek().is_none() {
            break;
        }
        let piece = piece.strip_suffix(b"\r").unwrap_or(piece);
        line.clear();
        match canon {
            Canon::Simple => line.extend_from_slice(piece),
            Canon::Relaxed => {
                let mut space = false;
                for b in piece {
                    if matches!(b, b' ' | b'\t') {
                        space = true;
                    } else {
                        if space {
                            line.push(b' ');
                        }
                        space = false;
                        line.push(*b);
                    }
                }
            }
        }
        if line.is_empty() {
            pending_empty += 1;
            continue;
        }
        for _ in 0..pending_empty {
            out.write(b"\r\n");
        }
        pending_empty = 0;
        out.write(&line);
        out.write(b"\r\n");
    }
    if out.written == 0 && canon == Canon::Simple {
        out.write(b"\r\n");
    }
    if limit.is_some_and(|l| l > out.written) {
        return None;
    }
    Some(out.hasher.finalize().to_vec())
}

/// A hash that takes at most `left` more bytes.
struct LimitedHash {
    hasher: Sha256,
    left: usize,
    written: usize,
}

impl LimitedHash {
    fn write(&mut self, bytes: &[u8]) {
        let take = bytes.len().min(self.left);
        self.hasher.update(&bytes[..take]);
        self.left -= take;
        self.written += take;
    }
}

/// `name=value; …` with folding white space removed from around names and
/// values (and, as DKIM wants, from inside them too). `None` for a
/// malformed list or a repeated tag.
fn tag_list(value: &[u8]) -> Option<Vec<(String, String)>> {
    let text = std::str::from_utf8(value).ok()?;
    let mut tags: Vec<(String, String)> = Vec::new();
    for spec in text.split(';') {
        if spec.trim().is_empty() {
            continue;
        }
        let (name, value) = spec.split_once('=')?;
        let name = name.trim().to_owned();
        if name.is_empty() || tags.iter().any(|(n, _)| *n == name) {
            return None;
        }
        let value: String = value.chars().filter(|c| !c.is_whitespace()).collect();
        tags.push((name, value));
    }
    Some(tags)
}

fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t' | b'\r' | b'\n', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t' | b'\r' | b'\n'] = s {
        s = rest;
    }
    s
}

fn parse_signature(tags: &[(String, String)], now: u64) -> Result<Signature, DkimResult> {
    let get = |name: &str| {
        tags.iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    let required = |name: &str| {
        get(name)
            .filter(|v| !v.is_empty())
            .ok_or(DkimResult::Neutral)
    };
    if required("v")? != "1" {
        return Err(DkimResult::Neutral);
    }
    let algorithm = match required("a")?.to_ascii_lowercase().as_str() {
        "rsa-sha256" => Algorithm::RsaSha256,
        "ed25519-sha256" => Algorithm::Ed25519Sha256,
        "rsa-sha1" => return Err(DkimResult::Policy),
        _ => return Err(DkimResult::Neutral),
    };
    let base64 = |v: &str| STANDARD.decode(v).map_err(|_| DkimResult::Neutral);
    let signature = base64(required("b")?)?;
    let body_hash = base64(required("bh")?)?;
    let domain = required("d")?.trim_end_matches('.').to_ascii_lowercase();
    let selector = required("s")?.to_owned();
    let headers: Vec<String> = required("h")?
        .split(':')
        .map(|h| h.trim().to_owned())
        .collect();
    if headers.len() > MAX_SIGNED_FIELDS || headers.iter().any(String::is_empty) {
        return Err(DkimResult::Neutral);
    }
    if !headers.iter().any(|h| h.eq_ignore_ascii_case("from")) {
        return Err(DkimResult::Policy);
    }
    let (header_canon, body_canon) = match get("c").unwrap_or("simple/simple").split_once('/') {
        Some((h, b)) => (canon(h)?, canon(b)?),
        None => (canon(get("c").unwrap_or("simple"))?, Canon::Simple),
    };
    if get("q").is_some_and(|q| !q.split(':').any(|m| m.eq_ignore_ascii_case("dns/txt"))) {
        return Err(DkimResult::Neutral);
    }
    if let Some(auid) = get("i") {
        let auid_domain = auid
            .rsplit_once('@')
            .map(|(_, d)| d)
            .ok_or(DkimResult::Neutral)?;
        let auid_domain = auid_domain.trim_end_matches('.').to_ascii_lowercase();
        if auid_domain != domain && !auid_domain.ends_with(&format!(".{domain}")) {
            return Err(DkimResult::Policy);
        }
    }
    let length = match get("l") {
        Some(l) => Some(l.parse::<usize>().map_err(|_| DkimResult::Neutral)?),
        None => None,
    };
    if let Some(x) = get("x") {
        let expires: u64 = x.parse().map_err(|_| DkimResult::Neutral)?;
        if expires < now {
            return Err(DkimResult::Policy);
        }
    }
    Ok(Signature {
        algorithm,
        header_canon,
        body_canon,
        domain,
        selector,
        headers,
        body_hash,
        signature,
        length,
    })
}

fn canon(s: &str) -> Result<Canon, DkimResult> {
    match s.to_ascii_lowercase().as_str() {
        "simple" => Ok(Canon::Simple),
        "relaxed" => Ok(Canon::Relaxed),
        _ => Err(DkimResult::Neutral),
    }
}

/// The public key at `<s>._domainkey.<d>` for the signature's algorithm.
async fn key_of(dns: &Dns, sig: &Signature) -> Result<Vec<u8>, DkimResult> {
    let name = format!("{}._domainkey.{}", sig.selector, sig.domain);
    let records = match dns.txt(&name).await {
        Ok(r) => r,
        Err(DnsError::InvalidName(_)) => return Err(DkimResult::PermError),
        Err(_) => return Err(DkimResult::TempError),
    };
    let mut last = DkimResult::PermError;
    for record in &records {
        match usable_key(record, sig.algorithm) {
            Ok(key) => return Ok(key),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// The key of one key record (RFC 6376 §3.6.1), if it fits the signature.
fn usable_key(record: &str, algorithm: Algorithm) -> Result<Vec<u8>, DkimResult> {
    let tags = tag_list(record.as_bytes()).ok_or(DkimResult::PermError)?;
    let get = |name: &str| {
        tags.iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    if get("v").is_some_and(|v| v != "DKIM1") {
        return Err(DkimResult::PermError);
    }
    let kind = get("k").unwrap_or("rsa").to_ascii_lowercase();
    let fits = matches!(
        (kind.as_str(), algorithm),
        ("rsa", Algorithm::RsaSha256) | ("ed25519", Algorithm::Ed25519Sha256)
    );
    if !fits {
        return Err(DkimResult::PermError);
    }
    if get("h").is_some_and(|h| !h.split(':').any(|a| a.eq_ignore_ascii_case("sha256"))) {
        return Err(DkimResult::PermError);
    }
    if get("s").is_some_and(|s| {
        !s.split(':')
            .any(|t| t == "*" || t.eq_ignore_ascii_case("email"))
    }) {
        return Err(DkimResult::PermError);
    }
    // An empty p= is a revoked key.
    let key = STANDARD
        .decode(get("p").unwrap_or_default())
        .map_err(|_| DkimResult::PermError)?;
    if key.is_empty() {
        return Err(DkimResult::PermError);
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dns_test_server::TestDnsServer;

    /// RFC 8463 appendix A: one message signed with Ed25519 and with RSA.
    /// The keys of both, as `name record` lines.
    const KEYS: &str = include_str!("../../tests/fixtures/dkim-keys.txt");
    const RFC8463_MESSAGE: &str = include_str!("../../tests/fixtures/dkim-rfc8463.eml");

    /// simple/simple, a PKCS#1 key, an AUID under the signing domain (the
    /// example of RFC 6376 appendix A, as the mail-auth crate re-signed it).
    const SIMPLE_MESSAGE: &str = include_str!("../../tests/fixtures/dkim-simple.eml");

    const NOW: u64 = 1_700_000_000;
    const BUDGET: Duration = Duration::from_secs(5);

    fn crlf(s: &str) -> Vec<u8> {
        s.replace('\n', "\r\n").into_bytes()
    }

    async fn setup() -> (TestDnsServer, Dns) {
        let server = TestDnsServer::start().await.expect("test DNS server");
        for (name, key) in KEYS.lines().filter_map(|l| l.split_once(' ')) {
            server.set_txt(name, &[key]);
        }
        let dns = Dns::new(Some(&[server.addr()])).expect("resolver");
        (server, dns)
    }

    fn results(checks: &[DkimCheck]) -> Vec<(DkimResult, &str, &str)> {
        checks
            .iter()
            .map(|c| (c.result, c.domain.as_str(), c.selector.as_str()))
            .collect()
    }

    #[tokio::test]
    async fn the_rfc_examples_verify() {
        let (_server, dns) = setup().await;
        let checks = verify(&dns, &crlf(RFC8463_MESSAGE), NOW, BUDGET).await;
        assert_eq!(
            results(&checks),
            vec![
                (DkimResult::Pass, "football.example.com", "brisbane"),
                (DkimResult::Pass, "football.example.com", "test"),
            ]
        );
        assert_eq!(checks[0].b, "/gCrinpc");
        let checks = verify(&dns, &crlf(SIMPLE_MESSAGE), NOW, BUDGET).await;
        assert_eq!(
            results(&checks),
            vec![(DkimResult::Pass, "example.com", "newengland")]
        );
        // Relaxed survives re-folding and spacing; simple does not.
        let respaced = RFC8463_MESSAGE.replace("Subject: Is dinner", "Subject:   Is\n  dinner");
        let checks = verify(&dns, &crlf(&respaced), NOW, BUDGET).await;
        assert!(checks.iter().all(|c| c.result == DkimResult::Pass));
        let respaced = SIMPLE_MESSAGE.replace("Subject: Is dinner", "Subject:  Is dinner");
        let checks = verify(&dns, &crlf(&respaced), NOW, BUDGET).await;
        assert_eq!(checks[0].result, DkimResult::Fail);
    }

    #[tokio::test]
    async fn tampering_fails() {
        let (_server, dns) = setup().await;
        for (from, to) in [
            ("We lost the game.", "We won the game."),
            ("Subject: Is dinner ready?", "Subject: Is lunch ready?"),
            ("From: Joe SixPack", "From: Joe Sixpack"),
        ] {
            for message in [RFC8463_MESSAGE, SIMPLE_MESSAGE] {
                let changed = message.replace(from, to);
                let checks = verify(&dns, &crlf(&changed), NOW, BUDGET).await;
                assert!(
                    checks.iter().all(|c| c.result == DkimResult::Fail),
                    "{to}: {checks:?}"
                );
            }
        }
        // A second From above the signed one (what a reader would see):
        // these signatures name From twice, so the added one is covered too.
        let prepended = format!("From: ceo@bank.test\n{RFC8463_MESSAGE}");
        let checks = verify(&dns, &crlf(&prepended), NOW, BUDGET).await;
        assert!(
            checks.iter().all(|c| c.result == DkimResult::Fail),
            "{checks:?}"
        );
    }

    #[tokio::test]
    async fn keys_missing_revoked_or_unreachable() {
        let (server, dns) = setup().await;
        server.set_txt(
            "brisbane._domainkey.football.example.com",
            &["v=DKIM1; k=ed25519; p="],
        );
        server.remove("test._domainkey.football.example.com");
        let checks = verify(&dns, &crlf(RFC8463_MESSAGE), NOW, BUDGET).await;
        assert_eq!(
            results(&checks),
            vec![
                (DkimResult::PermError, "football.example.com", "brisbane"),
                (DkimResult::PermError, "football.example.com", "test"),
            ]
        );
        // The RSA key where an Ed25519 one is expected.
        let rsa = KEYS
            .lines()
            .find_map(|l| l.strip_prefix("test._domainkey.football.example.com "));
        server.set_txt("brisbane._domainkey.football.example.com", &[rsa.unwrap()]);
        let checks = verify(&dns, &crlf(RFC8463_MESSAGE), NOW, BUDGET).await;
        assert_eq!(checks[0].result, DkimResult::PermError);

        let silent = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let dead = Dns::new(Some(&[silent.local_addr().unwrap()])).unwrap();
        let started = std::time::Instant::now();
        let checks = verify(
            &dead,
            &crlf(RFC8463_MESSAGE),
            NOW,
            Duration::from_millis(300),
        )
        .await;
        assert!(checks.iter().all(|c| c.result == DkimResult::TempError));
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn unacceptable_or_malformed_signatures() {
        let (_server, dns) = setup().await;
        assert!(
            verify(&dns, b"Subject: unsigned\r\n\r\nhi\r\n", NOW, BUDGET)
                .await
                .is_empty()
        );
        for (from, to, want) in [
            ("a=ed25519-sha256", "a=rsa-sha1", DkimResult::Policy),
            (
                "t=1528637909;",
                "t=1528637909; x=1528637999;",
                DkimResult::Policy,
            ),
            ("h=from : to :", "h=to :", DkimResult::Fail),
            ("h=from : to :", "h=from : : to :", DkimResult::Neutral),
            ("i=@football", "i=@evil", DkimResult::Policy),
            ("v=1;", "v=2;", DkimResult::Neutral),
            ("q=dns/txt;", "q=dns/txt; q=x;", DkimResult::Neutral),
            ("bh=2jUS", "bh=!!!", DkimResult::Neutral),
        ] {
            let changed = RFC8463_MESSAGE.replacen(from, to, 1);
            assert_ne!(changed, RFC8463_MESSAGE, "{from}");
            let checks = verify(&dns, &crlf(&changed), NOW, BUDGET).await;
            assert_eq!(checks[0].result, want, "{to}");
            assert_eq!(checks[1].result, DkimResult::Pass, "{to}");
        }
        // No From among the signed fields.
        let changed = RFC8463_MESSAGE.replacen(
            "h=from : to :\n subject : date : message-id : from : subject : date;",
            "h=to : subject;",
            1,
        );
        let checks = verify(&dns, &crlf(&changed), NOW, BUDGET).await;
        assert_eq!(checks[0].result, DkimResult::Policy);
        // Bounds on what one message may make us do.
        let crowded = format!(
            "{}{RFC8463_MESSAGE}",
            "X-Junk: 1\n".repeat(MAX_HEADER_FIELDS)
        );
        let checks = verify(&dns, &crlf(&crowded), NOW, BUDGET).await;
        assert!(
            checks.iter().all(|c| c.result == DkimResult::Neutral),
            "{checks:?}"
        );
        let names = format!("h={}from :", "x : ".repeat(MAX_SIGNED_FIELDS));
        let long_h = RFC8463_MESSAGE.replacen("h=from :", &names, 1);
        let checks = verify(&dns, &crlf(&long_h), NOW, BUDGET).await;
        assert_eq!(checks[0].result, DkimResult::Neutral);
        let padding = format!("t=1528637909; z={};", "a".repeat(MAX_SIGNATURE_FIELD));
        let huge = RFC8463_MESSAGE.replacen("t=1528637909;", &padding, 1);
        let checks = verify(&dns, &crlf(&huge), NOW, BUDGET).await;
        assert_eq!(checks[0].result, DkimResult::Neutral);
        // At most MAX_SIGNATURES are looked at.
        let sig = RFC8463_MESSAGE.split("DKIM-Signature").nth(1).unwrap();
        let many = format!(
            "{}{RFC8463_MESSAGE}",
            format!("DKIM-Signature{sig}").repeat(6)
        );
        assert_eq!(
            verify(&dns, &crlf(&many), NOW, BUDGET).await.len(),
            MAX_SIGNATURES
        );
    }

    #[test]
    fn body_canonicalization() {
        let sha = |b: &[u8]| Some(Sha256::digest(b).to_vec());
        let relaxed = |b: &[u8]| body_hash(b, Canon::Relaxed, None);
        let simple = |b: &[u8]| body_hash(b, Canon::Simple, None);
        assert_eq!(relaxed(b" C \r\nD \t E\r\n\r\n\r\n"), sha(b" C\r\nD E\r\n"));
        assert_eq!(
            simple(b" C \r\nD \t E\r\n\r\n\r\n"),
            sha(b" C \r\nD \t E\r\n")
        );
        assert_eq!(
            relaxed(b"a\r\n\r\n \r\nb\r\n \r\n"),
            sha(b"a\r\n\r\n\r\nb\r\n")
        );
        assert_eq!(relaxed(b""), sha(b""));
        assert_eq!(simple(b""), sha(b"\r\n"));
        assert_eq!(relaxed(b"\r\n \r\n"), sha(b""));
        assert_eq!(simple(b"\r\n\r\n"), sha(b"\r\n"));
        assert_eq!(relaxed(b"x"), sha(b"x\r\n"));
        // l= hashes a prefix; longer than the body is no hash at all.
        assert_eq!(
            body_hash(b"abc\r\ndef\r\n", Canon::Simple, Some(4)),
            sha(b"abc\r")
        );
        assert_eq!(body_hash(b"abc\r\n", Canon::Simple, Some(6)), None);
        assert_eq!(
            canonical_field(b"Subject", b" \t A  b\r\n\t c \r\n", b"", Canon::Relaxed),
            b"subject:A b c\r\n"
        );
        assert_eq!(
            without_b_value(b" v=1; b=abc\r\n def; bh=xyz;\r\n"),
            b" v=1; b=; bh=xyz;\r\n"
        );
        assert_eq!(without_b_value(b" v=1; b=abc\r\n def\r\n"), b" v=1; b=\r\n");
    }
}
