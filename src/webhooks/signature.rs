//! Standard Webhooks signing (<https://www.standardwebhooks.com>).
//!
//! A delivery carries three headers: `webhook-id` (the message id),
//! `webhook-timestamp` (Unix seconds) and `webhook-signature`, which holds one
//! or more space-separated `v1,<base64>` entries. Each entry is the standard
//! base64 of HMAC-SHA256 over `"{msg_id}.{timestamp}.{body}"`, keyed with the
//! raw bytes of the endpoint secret. The secret is shown to users as
//! `whsec_` followed by the standard base64 of those bytes.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use rand::RngCore as _;
use sha2::Sha256;
use subtle::ConstantTimeEq as _;

type HmacSha256 = Hmac<Sha256>;

/// Prefix of the textual form of a secret.
const SECRET_PREFIX: &str = "whsec_";
/// Random bytes in a generated secret (the spec asks for 24 to 64).
const GENERATED_SECRET_LEN: usize = 24;
/// Version tag of the only signature scheme we produce and accept.
const SIGNATURE_VERSION: &str = "v1";

/// Problems with a secret or a signature.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("webhook secret must start with \"whsec_\"")]
    MissingPrefix,
    #[error("webhook secret is not valid base64 after \"whsec_\"")]
    InvalidBase64,
    #[error("webhook secret is empty")]
    EmptySecret,
    #[error(
        "webhook timestamp {timestamp} is outside the allowed tolerance of {tolerance_secs}s (now {now})"
    )]
    TimestampOutOfTolerance {
        timestamp: i64,
        now: i64,
        tolerance_secs: i64,
    },
    #[error("no valid v1 signature matches the webhook payload")]
    NoMatchingSignature,
}

/// The key of one webhook endpoint. `Debug` never prints the key.
#[derive(Clone)]
pub struct WebhookSecret {
    key: Vec<u8>,
}

impl WebhookSecret {
    /// A fresh secret of 24 random bytes from the operating system.
    pub fn generate() -> WebhookSecret {
        let mut key = vec![0u8; GENERATED_SECRET_LEN];
        rand::rngs::OsRng.fill_bytes(&mut key);
        WebhookSecret { key }
    }

    /// Parses the `whsec_<base64>` form.
    pub fn parse(s: &str) -> Result<WebhookSecret, SignatureError> {
        let encoded = s
            .strip_prefix(SECRET_PREFIX)
            .ok_or(SignatureError::MissingPrefix)?;
        let key = STANDARD
            .decode(encoded)
            .map_err(|_| SignatureError::InvalidBase64)?;
        if key.is_empty() {
            return Err(SignatureError::EmptySecret);
        }
        Ok(WebhookSecret { key })
    }

    /// The `whsec_<base64>` form, as shown to the user once and stored.
    pub fn as_string(&self) -> String {
        format!("{SECRET_PREFIX}{}", STANDARD.encode(&self.key))
    }

    /// The raw key bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.key
    }
}

impl fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WebhookSecret(<redacted>)")
    }
}

/// The raw HMAC-SHA256 of `"{msg_id}.{timestamp}.{body}"`.
fn mac(secret: &WebhookSecret, msg_id: &str, timestamp: i64, body: &[u8]) -> [u8; 32] {
    let mut mac = HmacSha256::new_from_slice(&secret.key).expect("HMAC accepts keys of any length");
    mac.update(msg_id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.finalize().into_bytes().into()
}

/// The `webhook-signature` header value for one delivery: `v1,<base64>`.
pub fn sign(secret: &WebhookSecret, msg_id: &str, timestamp: i64, body: &[u8]) -> String {
    format!(
        "{SIGNATURE_VERSION},{}",
        STANDARD.encode(mac(secret, msg_id, timestamp, body))
    )
}

/// Checks a `webhook-signature` header against the payload.
///
/// The header may carry several space-separated signatures (e.g. during a
/// secret rotation); one matching `v1` entry suffices. Entries of other
/// versions or with undecodable base64 are skipped. The timestamp must lie
/// within `tolerance_secs` of `now` in either direction, so that captured
/// deliveries cannot be replayed later.
pub fn verify(
    secret: &WebhookSecret,
    msg_id: &str,
    timestamp: i64,
    body: &[u8],
    signature_header: &str,
    now: i64,
    tolerance_secs: i64,
) -> Result<(), SignatureError> {
    let tolerance = u64::try_from(tolerance_secs).unwrap_or(0);
    if timestamp.abs_diff(now) > tolerance {
        return Err(SignatureError::TimestampOutOfTolerance {
            timestamp,
            now,
            tolerance_secs,
        });
    }
    let expected = mac(secret, msg_id, timestamp, body);
    let mut matched = false;
    for entry in signature_header.split_ascii_whitespace() {
        let Some((version, encoded)) = entry.split_once(',') else {
            continue;
        };
        if version != SIGNATURE_VERSION {
            continue;
        }
        let Ok(candidate) = STANDARD.decode(encoded) else {
            continue;
        };
        // Lengths are public; the bytes are compared in constant time.
        matched |= bool::from(candidate.as_slice().ct_eq(&expected));
    }
    if matched {
        Ok(())
    } else {
        Err(SignatureError::NoMatchingSignature)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The official Standard Webhooks test vector.
    const VECTOR_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const VECTOR_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const VECTOR_TS: i64 = 1614265330;
    const VECTOR_BODY: &[u8] = br#"{"test": 2432232314}"#;
    const VECTOR_SIG: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    fn vector_secret() -> WebhookSecret {
        WebhookSecret::parse(VECTOR_SECRET).unwrap()
    }

    #[test]
    fn official_test_vector_signs() {
        assert_eq!(
            sign(&vector_secret(), VECTOR_ID, VECTOR_TS, VECTOR_BODY),
            VECTOR_SIG
        );
    }

    #[test]
    fn official_test_vector_verifies() {
        verify(
            &vector_secret(),
            VECTOR_ID,
            VECTOR_TS,
            VECTOR_BODY,
            VECTOR_SIG,
            VECTOR_TS,
            300,
        )
        .unwrap();
    }

    #[test]
    fn parse_round_trips() {
        let s = vector_secret();
        assert_eq!(s.as_string(), VECTOR_SECRET);
        assert_eq!(s.as_bytes().len(), 24);
    }

    #[test]
    fn parse_rejects_bad_secrets() {
        assert_eq!(
            WebhookSecret::parse("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap_err(),
            SignatureError::MissingPrefix
        );
        assert_eq!(
            WebhookSecret::parse("WHSEC_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap_err(),
            SignatureError::MissingPrefix
        );
        assert_eq!(
            WebhookSecret::parse("whsec_not base64!").unwrap_err(),
            SignatureError::InvalidBase64
        );
        assert_eq!(
            WebhookSecret::parse("whsec_abc").unwrap_err(),
            SignatureError::InvalidBase64
        );
        assert_eq!(
            WebhookSecret::parse("whsec_").unwrap_err(),
            SignatureError::EmptySecret
        );
        assert_eq!(
            WebhookSecret::parse("").unwrap_err(),
            SignatureError::MissingPrefix
        );
    }

    #[test]
    fn generate_gives_24_random_bytes() {
        let a = WebhookSecret::generate();
        let b = WebhookSecret::generate();
        assert_eq!(a.as_bytes().len(), 24);
        assert_ne!(a.as_bytes(), b.as_bytes());
        let text = a.as_string();
        assert!(text.starts_with("whsec_"));
        assert_eq!(text.len(), "whsec_".len() + 32);
        assert_eq!(
            WebhookSecret::parse(&text).unwrap().as_bytes(),
            a.as_bytes()
        );
    }

    #[test]
    fn debug_does_not_leak_the_key() {
        let s = vector_secret();
        let dbg = format!("{s:?}");
        assert!(!dbg.contains("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"));
        assert!(!dbg.contains(&format!("{:?}", s.as_bytes())));
        assert!(dbg.contains("redacted"));
    }

    #[test]
    fn verify_accepts_any_of_several_signatures() {
        let other = WebhookSecret::generate();
        let wrong = sign(&other, VECTOR_ID, VECTOR_TS, VECTOR_BODY);
        let header = format!("v2,abcd {wrong} garbage v1,!!! {VECTOR_SIG}");
        verify(
            &vector_secret(),
            VECTOR_ID,
            VECTOR_TS,
            VECTOR_BODY,
            &header,
            VECTOR_TS,
            300,
        )
        .unwrap();
        // The same header without the right entry fails.
        let header = format!("v2,abcd {wrong} garbage v1,!!!");
        assert_eq!(
            verify(
                &vector_secret(),
                VECTOR_ID,
                VECTOR_TS,
                VECTOR_BODY,
                &header,
                VECTOR_TS,
                300,
            ),
            Err(SignatureError::NoMatchingSignature)
        );
    }

    #[test]
    fn verify_rejects_tampering() {
        let secret = vector_secret();
        let check = |id: &str, ts: i64, body: &[u8], header: &str| {
            verify(&secret, id, ts, body, header, VECTOR_TS, 300)
        };
        let nomatch = Err(SignatureError::NoMatchingSignature);
        assert_eq!(
            check(VECTOR_ID, VECTOR_TS, br#"{"test": 2432232315}"#, VECTOR_SIG),
            nomatch
        );
        assert_eq!(
            check("msg_other", VECTOR_TS, VECTOR_BODY, VECTOR_SIG),
            nomatch
        );
        assert_eq!(
            check(VECTOR_ID, VECTOR_TS + 1, VECTOR_BODY, VECTOR_SIG),
            nomatch
        );
        // Right bytes under another version tag.
        let v2 = VECTOR_SIG.replacen("v1,", "v2,", 1);
        assert_eq!(check(VECTOR_ID, VECTOR_TS, VECTOR_BODY, &v2), nomatch);
        // Truncated signature.
        assert_eq!(
            check(VECTOR_ID, VECTOR_TS, VECTOR_BODY, "v1,g0hM9SsE+OTPJTGt"),
            nomatch
        );
        assert_eq!(check(VECTOR_ID, VECTOR_TS, VECTOR_BODY, ""), nomatch);
        // Another key.
        let other = WebhookSecret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSx").unwrap();
        assert_eq!(
            verify(
                &other,
                VECTOR_ID,
                VECTOR_TS,
                VECTOR_BODY,
                VECTOR_SIG,
                VECTOR_TS,
                300
            ),
            nomatch
        );
    }

    #[test]
    fn verify_enforces_timestamp_tolerance() {
        let secret = vector_secret();
        let at = |now: i64, tol: i64| {
            verify(
                &secret,
                VECTOR_ID,
                VECTOR_TS,
                VECTOR_BODY,
                VECTOR_SIG,
                now,
                tol,
            )
        };
        assert!(at(VECTOR_TS + 300, 300).is_ok());
        assert!(at(VECTOR_TS - 300, 300).is_ok());
        assert!(matches!(
            at(VECTOR_TS + 301, 300),
            Err(SignatureError::TimestampOutOfTolerance { .. })
        ));
        assert!(matches!(
            at(VECTOR_TS - 301, 300),
            Err(SignatureError::TimestampOutOfTolerance { .. })
        ));
        // Extreme values neither overflow nor pass.
        assert!(at(i64::MIN, 300).is_err());
        assert!(at(i64::MAX, i64::MAX).is_ok());
        assert!(at(VECTOR_TS, -5).is_ok());
        assert!(at(VECTOR_TS + 1, -5).is_err());
    }

    #[test]
    fn sign_then_verify_round_trip_with_binary_body() {
        let secret = WebhookSecret::generate();
        let body = [0u8, 0xff, b'.', b'\n', 0x80];
        let sig = sign(&secret, "msg_1", -5, &body);
        assert!(sig.starts_with("v1,"));
        verify(&secret, "msg_1", -5, &body, &sig, 0, 10).unwrap();
    }
}
