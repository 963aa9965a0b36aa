//! Amazon SNS: how SES reaches us.
//!
//! SES publishes sending events (Send, Delivery, Bounce, ...) and inbound mail
//! ("Received" receipt notifications carrying the MIME) to an SNS topic, and SNS
//! POSTs them as JSON to our HTTPS endpoint. This module
//!
//! * verifies those POSTs ([`SnsVerifier`]): topic allow-list, signing-certificate
//!   URL, and the RSA signature over the canonical string AWS documents;
//! * turns the SES payload inside a verified notification into a
//!   [`ProviderEvent`] or a received message ([`parse_ses_notification`]);
//! * offers [`testing`] helpers that sign notifications with a throw-away key, so
//!   tests can drive the real verification path.
//!
//! Crypto: `aws-lc-rs` (already built for rustls), X.509 parsing: `rustls-webpki`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use aws_lc_rs::signature::{
    ParsedPublicKey, RSA_PKCS1_2048_8192_SHA1_FOR_LEGACY_USE_ONLY, RSA_PKCS1_2048_8192_SHA256,
};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;
use serde::Deserialize;
use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::{ProviderEvent, ProviderEventKind};

/// How many signing certificates the verifier keeps parsed (SNS rotates them rarely).
const CERT_CACHE_CAPACITY: usize = 64;
/// Largest certificate body [`HttpsCertFetcher`] accepts.
const MAX_CERT_BYTES: usize = 64 * 1024;
/// Timeout of one certificate download.
const CERT_FETCH_TIMEOUT: Duration = Duration::from_secs(5);

// ---------------------------------------------------------------------------
// Errors and verified messages
// ---------------------------------------------------------------------------

/// Why an SNS POST was refused.
#[derive(Debug, thiserror::Error)]
pub enum SnsError {
    /// Not JSON, or a required field is missing or has the wrong type.
    #[error("malformed SNS message: {0}")]
    Malformed(String),
    /// `Type` is none of Notification, SubscriptionConfirmation, UnsubscribeConfirmation.
    #[error("unsupported SNS message type {0:?}")]
    UnsupportedType(String),
    /// `TopicArn` is not in the configured allow-list (an empty list allows none).
    #[error("SNS topic {0:?} is not allowed")]
    TopicNotAllowed(String),
    /// `SignatureVersion` is neither "1" (SHA1) nor "2" (SHA256).
    #[error("unsupported SNS SignatureVersion {0:?}")]
    UnsupportedSignatureVersion(String),
    /// `SigningCertURL` is not an https `.pem` URL on an `sns.<region>.amazonaws.com` host.
    #[error("untrusted SNS SigningCertURL {url:?}: {reason}")]
    UntrustedCertUrl { url: String, reason: &'static str },
    /// The signing certificate could not be downloaded (network, HTTP status, size).
    /// Transient: the sender should be asked to retry.
    #[error("cannot fetch the SNS signing certificate: {0}")]
    CertFetch(String),
    /// The downloaded document is not a usable RSA certificate.
    #[error("invalid SNS signing certificate: {0}")]
    InvalidCertificate(String),
    /// The signature is not base64, or does not match the message.
    #[error("SNS signature verification failed: {0}")]
    BadSignature(&'static str),
}

impl SnsError {
    /// True when retrying later may succeed (the certificate download failed);
    /// every other error is final for this body.
    pub fn is_transient(&self) -> bool {
        matches!(self, SnsError::CertFetch(_))
    }
}

/// The `Type` of an SNS message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnsKind {
    Notification,
    SubscriptionConfirmation,
    UnsubscribeConfirmation,
}

impl SnsKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SnsKind::Notification => "Notification",
            SnsKind::SubscriptionConfirmation => "SubscriptionConfirmation",
            SnsKind::UnsubscribeConfirmation => "UnsubscribeConfirmation",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "Notification" => SnsKind::Notification,
            "SubscriptionConfirmation" => SnsKind::SubscriptionConfirmation,
            "UnsubscribeConfirmation" => SnsKind::UnsubscribeConfirmation,
            _ => return None,
        })
    }
}

/// A message whose signature, topic and certificate URL have been verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnsMessage {
    pub kind: SnsKind,
    pub message_id: String,
    pub topic_arn: String,
    /// For notifications, the payload (SES JSON); for confirmations, AWS's prose.
    pub message: String,
    /// Present for (un)subscribe confirmations: GET it to confirm the subscription.
    /// Signed by SNS, but check it with [`is_sns_url`] before fetching it.
    pub subscribe_url: Option<String>,
    /// As SNS sent it (ISO 8601, e.g. `2024-05-01T12:00:00.000Z`); not checked for age.
    pub timestamp: String,
}

// ---------------------------------------------------------------------------
// Certificate fetching
// ---------------------------------------------------------------------------

/// Downloads the PEM document a `SigningCertURL` names. The URL has already been
/// checked (https, SNS host, `.pem` path) when this is called.
#[async_trait]
pub trait CertFetcher: Send + Sync {
    async fn fetch(&self, url: &str) -> Result<Vec<u8>, String>;
}

/// Fetches certificates over HTTPS with reqwest: no redirects, 5 s timeout,
/// https only, at most 64 KiB.
#[derive(Debug, Clone)]
pub struct HttpsCertFetcher {
    client: reqwest::Client,
}

impl HttpsCertFetcher {
    pub fn new() -> Result<Self, SnsError> {
        crate::init_tls();
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(CERT_FETCH_TIMEOUT)
            .https_only(true)
            .build()
            .map_err(|e| SnsError::CertFetch(format!("cannot build the HTTP client: {e}")))?;
        Ok(HttpsCertFetcher { client })
    }
}

#[async_trait]
impl CertFetcher for HttpsCertFetcher {
    async fn fetch(&self, url: &str) -> Result<Vec<u8>, String> {
        let mut response = self
            .client
            .get(url)
            .send()
            .await
            .map_err(|e| format!("GET {url}: {e}"))?;
        if !response.status().is_success() {
            return Err(format!("GET {url}: HTTP {}", response.status()));
        }
        if response
            .content_length()
            .is_some_and(|len| len > MAX_CERT_BYTES as u64)
        {
            return Err(format!(
                "GET {url}: body larger than {MAX_CERT_BYTES} bytes"
            ));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| format!("GET {url}: {e}"))?
        {
            if body.len() + chunk.len() > MAX_CERT_BYTES {
                return Err(format!(
                    "GET {url}: body larger than {MAX_CERT_BYTES} bytes"
                ));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }
}

// ---------------------------------------------------------------------------
// Verification
// ---------------------------------------------------------------------------

/// The public key of one signing certificate, parsed once for each algorithm.
#[derive(Clone)]
struct CertKeys {
    sha1: ParsedPublicKey,
    sha256: ParsedPublicKey,
}

impl CertKeys {
    fn from_pem(pem: &[u8]) -> Result<Self, SnsError> {
        let der = CertificateDer::from_pem_slice(pem)
            .map_err(|e| SnsError::InvalidCertificate(format!("no PEM certificate: {e}")))?;
        let cert = webpki::EndEntityCert::try_from(&der)
            .map_err(|e| SnsError::InvalidCertificate(format!("cannot parse X.509: {e}")))?;
        let spki = cert.subject_public_key_info();
        let parse = |alg| {
            ParsedPublicKey::new(alg, spki.as_ref()).map_err(|e| {
                SnsError::InvalidCertificate(format!("not an RSA key of 2048 to 8192 bits: {e}"))
            })
        };
        Ok(CertKeys {
            sha1: parse(&RSA_PKCS1_2048_8192_SHA1_FOR_LEGACY_USE_ONLY)?,
            sha256: parse(&RSA_PKCS1_2048_8192_SHA256)?,
        })
    }
}

/// The JSON body of an SNS HTTP(S) POST. Unknown fields are ignored; a field
/// given twice is an error (serde refuses duplicates), so there is no ambiguity
/// about which value was signed.
#[derive(Deserialize)]
struct Envelope {
    #[serde(rename = "Type")]
    kind: String,
    #[serde(rename = "MessageId")]
    message_id: String,
    #[serde(rename = "Token")]
    token: Option<String>,
    #[serde(rename = "TopicArn")]
    topic_arn: String,
    #[serde(rename = "Subject")]
    subject: Option<String>,
    #[serde(rename = "Message")]
    message: String,
    #[serde(rename = "Timestamp")]
    timestamp: String,
    #[serde(rename = "SignatureVersion")]
    signature_version: String,
    #[serde(rename = "Signature")]
    signature: String,
    #[serde(rename = "SigningCertURL", alias = "SigningCertUrl")]
    signing_cert_url: String,
    #[serde(rename = "SubscribeURL", alias = "SubscribeUrl")]
    subscribe_url: Option<String>,
    #[serde(rename = "UnsubscribeURL", alias = "UnsubscribeUrl")]
    #[allow(dead_code)]
    unsubscribe_url: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SigAlg {
    Sha1,
    Sha256,
}

/// Verifies SNS messages: allowed topic, trusted certificate URL, valid signature.
pub struct SnsVerifier {
    allowed_topics: Vec<String>,
    fetcher: Arc<dyn CertFetcher>,
    cache: Mutex<HashMap<String, Arc<CertKeys>>>,
}

impl std::fmt::Debug for SnsVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnsVerifier")
            .field("allowed_topics", &self.allowed_topics)
            .finish_non_exhaustive()
    }
}

impl SnsVerifier {
    /// `allowed_topics`: exact topic ARNs accepted; empty refuses every message.
    pub fn new(allowed_topics: Vec<String>, fetcher: Arc<dyn CertFetcher>) -> Self {
        SnsVerifier {
            allowed_topics,
            fetcher,
            cache: Mutex::new(HashMap::new()),
        }
    }

    pub fn allowed_topics(&self) -> &[String] {
        &self.allowed_topics
    }

    /// Parses and verifies one POST body. Message age is deliberately not checked:
    /// SNS retries can legitimately arrive long after the Timestamp.
    pub async fn verify(&self, body: &[u8]) -> Result<SnsMessage, SnsError> {
        let envelope: Envelope =
            serde_json::from_slice(body).map_err(|e| SnsError::Malformed(e.to_string()))?;
        let kind = SnsKind::parse(&envelope.kind)
            .ok_or_else(|| SnsError::UnsupportedType(clip(&envelope.kind)))?;
        if !self.allowed_topics.contains(&envelope.topic_arn) {
            return Err(SnsError::TopicNotAllowed(clip(&envelope.topic_arn)));
        }
        let alg = match envelope.signature_version.as_str() {
            "1" => SigAlg::Sha1,
            "2" => SigAlg::Sha256,
            other => return Err(SnsError::UnsupportedSignatureVersion(clip(other))),
        };
        let cert_url = check_cert_url(&envelope.signing_cert_url).map_err(|reason| {
            SnsError::UntrustedCertUrl {
                url: clip(&envelope.signing_cert_url),
                reason,
            }
        })?;
        let to_sign = string_to_sign(kind, &envelope)?;
        let signature = BASE64
            .decode(envelope.signature.trim())
            .map_err(|_| SnsError::BadSignature("Signature is not base64"))?;

        let keys = self.keys_for(&cert_url).await?;
        let key = match alg {
            SigAlg::Sha1 => &keys.sha1,
            SigAlg::Sha256 => &keys.sha256,
        };
        key.verify_sig(to_sign.as_bytes(), &signature)
            .map_err(|_| SnsError::BadSignature("signature does not match the message"))?;

        Ok(SnsMessage {
            kind,
            message_id: envelope.message_id,
            topic_arn: envelope.topic_arn,
            message: envelope.message,
            subscribe_url: envelope.subscribe_url,
            timestamp: envelope.timestamp,
        })
    }

    /// The parsed key for a (checked, normalised) certificate URL, from the cache
    /// or fetched. The lock is never held across the fetch.
    async fn keys_for(&self, url: &str) -> Result<Arc<CertKeys>, SnsError> {
        if let Some(keys) = self.lock_cache().get(url) {
            return Ok(Arc::clone(keys));
        }
        let pem = self.fetcher.fetch(url).await.map_err(SnsError::CertFetch)?;
        let keys = Arc::new(CertKeys::from_pem(&pem)?);
        let mut cache = self.lock_cache();
        if cache.len() >= CERT_CACHE_CAPACITY
            && !cache.contains_key(url)
            && let Some(victim) = cache.keys().next().cloned()
        {
            cache.remove(&victim);
        }
        cache.insert(url.to_owned(), Arc::clone(&keys));
        Ok(keys)
    }

    fn lock_cache(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<CertKeys>>> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The canonical string SNS signs, per the AWS documentation: `Key\nValue\n` for
/// each field in a fixed order; Subject only when present.
fn string_to_sign(kind: SnsKind, e: &Envelope) -> Result<String, SnsError> {
    let mut out = String::with_capacity(e.message.len() + 512);
    let mut push = |key: &str, value: &str| {
        out.push_str(key);
        out.push('\n');
        out.push_str(value);
        out.push('\n');
    };
    match kind {
        SnsKind::Notification => {
            push("Message", &e.message);
            push("MessageId", &e.message_id);
            if let Some(subject) = &e.subject {
                push("Subject", subject);
            }
            push("Timestamp", &e.timestamp);
            push("TopicArn", &e.topic_arn);
            push("Type", &e.kind);
        }
        SnsKind::SubscriptionConfirmation | SnsKind::UnsubscribeConfirmation => {
            let missing =
                |field: &str| SnsError::Malformed(format!("{} without {field}", kind.as_str()));
            let subscribe_url = e
                .subscribe_url
                .as_deref()
                .ok_or_else(|| missing("SubscribeURL"))?;
            let token = e.token.as_deref().ok_or_else(|| missing("Token"))?;
            push("Message", &e.message);
            push("MessageId", &e.message_id);
            push("SubscribeURL", subscribe_url);
            push("Timestamp", &e.timestamp);
            push("Token", token);
            push("TopicArn", &e.topic_arn);
            push("Type", &e.kind);
        }
    }
    Ok(out)
}

/// True for a host `sns.<region>.amazonaws.com` or `sns.<region>.amazonaws.com.cn`.
fn is_sns_host(host: &str) -> bool {
    let Some(rest) = host.strip_prefix("sns.") else {
        return false;
    };
    let Some(region) = rest
        .strip_suffix(".amazonaws.com")
        .or_else(|| rest.strip_suffix(".amazonaws.com.cn"))
    else {
        return false;
    };
    !region.is_empty()
        && region
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && region.contains('-')
        && !region.starts_with('-')
        && !region.ends_with('-')
        && !region.contains("--")
}

/// Parses `raw` as an https URL on an SNS host with no userinfo and no explicit
/// port other than 443.
fn parse_sns_url(raw: &str) -> Result<url::Url, &'static str> {
    if !raw.starts_with("https://") {
        return Err("not an https URL");
    }
    if raw
        .chars()
        .any(|c| c == '\\' || c == '@' || c.is_whitespace() || c.is_control())
    {
        return Err("unexpected character in URL");
    }
    let url = url::Url::parse(raw).map_err(|_| "not a URL")?;
    if url.scheme() != "https" {
        return Err("not an https URL");
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("URL carries user information");
    }
    if url.port().is_some() {
        return Err("URL names a port");
    }
    match url.host() {
        Some(url::Host::Domain(host)) if is_sns_host(host) => Ok(url),
        Some(url::Host::Domain(_)) => Err("host is not sns.<region>.amazonaws.com"),
        _ => Err("host is not a domain name"),
    }
}

/// Checks a `SigningCertURL`; returns the normalised URL to fetch and cache under.
fn check_cert_url(raw: &str) -> Result<String, &'static str> {
    let url = parse_sns_url(raw)?;
    if url.query().is_some() || url.fragment().is_some() {
        return Err("certificate URL has a query or fragment");
    }
    if !url.path().ends_with(".pem") {
        return Err("certificate URL path does not end in .pem");
    }
    Ok(url.as_str().to_owned())
}

/// True when `url` is an https URL on an `sns.<region>.amazonaws.com(.cn)` host
/// (no userinfo, default port). Check a confirmation's `SubscribeURL` with this
/// before GETting it.
pub fn is_sns_url(url: &str) -> bool {
    parse_sns_url(url).is_ok()
}

/// Shortens attacker-controlled text before it goes into an error message.
fn clip(s: &str) -> String {
    const MAX: usize = 200;
    match s.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &s[..cut]),
        None => s.to_owned(),
    }
}

// ---------------------------------------------------------------------------
// SES payloads
// ---------------------------------------------------------------------------

/// What an SES payload (the `Message` of a verified notification) means to us.
#[derive(Debug, Clone, PartialEq)]
pub enum SesNotification {
    /// A sending event about a message we sent.
    Event(ProviderEvent),
    /// Inbound mail from a receipt rule's SNS action.
    Received {
        recipients: Vec<String>,
        raw_mime: Vec<u8>,
    },
    /// Well-formed but of no interest (e.g. SES's topic-subscription notice, the
    /// Subscription event type, or a type this version does not know).
    Ignored(String),
}

/// Parses the SES JSON inside an SNS notification: event publishing (`eventType`)
/// or the older identity notifications (`notificationType`), including inbound
/// "Received" notifications.
pub fn parse_ses_notification(message: &str) -> Result<SesNotification, String> {
    let root: Value =
        serde_json::from_str(message).map_err(|e| format!("SES payload is not JSON: {e}"))?;
    if !root.is_object() {
        return Err("SES payload is not a JSON object".into());
    }
    let event_type = str_at(&root, &["eventType"])
        .or_else(|| str_at(&root, &["notificationType"]))
        .ok_or("SES payload has neither eventType nor notificationType")?;

    let (kind, detail_key) = match event_type {
        "Received" => return parse_received(&root),
        "Send" => (ProviderEventKind::Send, "send"),
        "Delivery" => (ProviderEventKind::Delivery, "delivery"),
        "Bounce" => (
            ProviderEventKind::Bounce {
                permanent: str_at(&root, &["bounce", "bounceType"]) == Some("Permanent"),
            },
            "bounce",
        ),
        "Complaint" => (ProviderEventKind::Complaint, "complaint"),
        "Reject" => (ProviderEventKind::Reject, "reject"),
        "DeliveryDelay" => (ProviderEventKind::DeliveryDelay, "deliveryDelay"),
        "Open" => (ProviderEventKind::Open, "open"),
        "Click" => (ProviderEventKind::Click, "click"),
        "Rendering Failure" | "RenderingFailure" => {
            (ProviderEventKind::RenderingFailure, "failure")
        }
        "AmazonSnsSubscriptionSucceeded" => {
            return Ok(SesNotification::Ignored(
                "SES confirmed the SNS topic subscription".into(),
            ));
        }
        other => {
            return Ok(SesNotification::Ignored(format!(
                "SES event type {:?} is not handled",
                clip(other)
            )));
        }
    };

    let provider_message_id = str_at(&root, &["mail", "messageId"])
        .filter(|id| !id.is_empty())
        .ok_or_else(|| format!("SES {event_type} event without mail.messageId"))?
        .to_owned();
    let sub = root.get(detail_key).unwrap_or(&Value::Null);

    let recipients = match kind {
        ProviderEventKind::Bounce { .. } => addresses(sub.get("bouncedRecipients")),
        ProviderEventKind::Complaint => addresses(sub.get("complainedRecipients")),
        ProviderEventKind::Delivery => strings(sub.get("recipients")),
        ProviderEventKind::DeliveryDelay => addresses(sub.get("delayedRecipients")),
        _ => strings(root.get("mail").and_then(|m| m.get("destination"))),
    };

    let detail = match kind {
        ProviderEventKind::Bounce { .. } => {
            first_field(sub.get("bouncedRecipients"), "diagnosticCode").or_else(|| {
                let bounce_type = str_at(sub, &["bounceType"])?;
                Some(match str_at(sub, &["bounceSubType"]) {
                    Some(subtype) => format!("{bounce_type}/{subtype}"),
                    None => bounce_type.to_owned(),
                })
            })
        }
        ProviderEventKind::Complaint => str_at(sub, &["complaintFeedbackType"])
            .or_else(|| str_at(sub, &["complaintSubType"]))
            .map(str::to_owned),
        ProviderEventKind::Delivery => str_at(sub, &["smtpResponse"]).map(str::to_owned),
        ProviderEventKind::Reject => str_at(sub, &["reason"]).map(str::to_owned),
        ProviderEventKind::DeliveryDelay => {
            let delay_type = str_at(sub, &["delayType"]);
            let diagnostic = first_field(sub.get("delayedRecipients"), "diagnosticCode");
            match (delay_type, diagnostic) {
                (Some(t), Some(d)) => Some(format!("{t}: {d}")),
                (Some(t), None) => Some(t.to_owned()),
                (None, d) => d,
            }
        }
        ProviderEventKind::RenderingFailure => str_at(sub, &["errorMessage"]).map(str::to_owned),
        ProviderEventKind::Click => str_at(sub, &["link"]).map(str::to_owned),
        ProviderEventKind::Send | ProviderEventKind::Open => None,
    };

    let timestamp = str_at(sub, &["timestamp"])
        .or_else(|| str_at(&root, &["mail", "timestamp"]))
        .ok_or_else(|| format!("SES {event_type} event without a timestamp"))?;
    let occurred_at = parse_micros(timestamp)?;

    Ok(SesNotification::Event(ProviderEvent {
        provider_message_id,
        kind,
        recipients,
        detail,
        occurred_at,
        delivery_id: None,
        message_tag: message_tag(&root),
    }))
}

/// The service's message id from the send's tags (`mail.tags`, where SES
/// gives each tag as a list of values), if it is one of ours.
fn message_tag(root: &Value) -> Option<String> {
    let value = root
        .get("mail")?
        .get("tags")?
        .get(crate::provider::MESSAGE_TAG)?
        .get(0)?
        .as_str()?;
    crate::ids::MessageId::parse(value).map(|id| id.to_string())
}

fn parse_received(root: &Value) -> Result<SesNotification, String> {
    let receipt = root
        .get("receipt")
        .filter(|r| r.is_object())
        .ok_or("Received notification without receipt")?;
    let mut recipients = strings(receipt.get("recipients"));
    if recipients.is_empty() {
        recipients = strings(root.get("mail").and_then(|m| m.get("destination")));
    }
    let content = str_at(root, &["content"]).ok_or_else(|| {
        format!(
            "Received notification without content (receipt action {:?}; only the SNS action includes the message)",
            str_at(receipt, &["action", "type"]).unwrap_or("unknown")
        )
    })?;
    let base64 = str_at(receipt, &["action", "encoding"])
        .is_some_and(|enc| enc.eq_ignore_ascii_case("BASE64"));
    let raw_mime = if base64 {
        let compact: String = content
            .chars()
            .filter(|c| !c.is_ascii_whitespace())
            .collect();
        BASE64
            .decode(compact)
            .map_err(|e| format!("Received content is not valid base64: {e}"))?
    } else {
        content.as_bytes().to_vec()
    };
    Ok(SesNotification::Received {
        recipients,
        raw_mime,
    })
}

/// The string at a path of object keys.
fn str_at<'a>(value: &'a Value, path: &[&str]) -> Option<&'a str> {
    let mut v = value;
    for key in path {
        v = v.get(key)?;
    }
    v.as_str()
}

/// `[{"emailAddress": ...}, ...]` → addresses.
fn addresses(list: Option<&Value>) -> Vec<String> {
    list.and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(|item| item.get("emailAddress").and_then(Value::as_str))
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

/// `["a", "b"]` → strings.
fn strings(list: Option<&Value>) -> Vec<String> {
    list.and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(Value::as_str)
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

/// The first non-empty `field` among the objects of an array.
fn first_field(list: Option<&Value>, field: &str) -> Option<String> {
    list?
        .as_array()?
        .iter()
        .filter_map(|item| item.get(field).and_then(Value::as_str))
        .find(|s| !s.is_empty())
        .map(str::to_owned)
}

/// RFC 3339 → microseconds since the epoch.
fn parse_micros(timestamp: &str) -> Result<i64, String> {
    let at = OffsetDateTime::parse(timestamp, &Rfc3339)
        .map_err(|e| format!("bad SES timestamp {:?}: {e}", clip(timestamp)))?;
    i64::try_from(at.unix_timestamp_nanos() / 1_000)
        .map_err(|_| format!("SES timestamp {:?} out of range", clip(timestamp)))
}

/// Signed SNS bodies for tests (the `test-support` feature).
#[cfg(any(test, feature = "test-support"))]
pub mod testing;

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use std::sync::OnceLock;

    use super::testing::{StaticCertFetcher, TEST_CERT_URL, TestSigner};
    use super::*;

    const TOPIC: &str = "arn:aws:sns:us-east-1:123456789012:pigeonhole-events";

    fn signer() -> &'static TestSigner {
        static SIGNER: OnceLock<TestSigner> = OnceLock::new();
        SIGNER.get_or_init(TestSigner::new)
    }

    fn verifier_with(fetcher: Arc<StaticCertFetcher>) -> SnsVerifier {
        SnsVerifier::new(vec![TOPIC.to_owned()], fetcher)
    }

    fn verifier() -> (SnsVerifier, Arc<StaticCertFetcher>) {
        let fetcher = Arc::new(signer().fetcher());
        (verifier_with(fetcher.clone()), fetcher)
    }

    fn edit(body: &str, f: impl FnOnce(&mut serde_json::Map<String, Value>)) -> String {
        let mut v: Value = serde_json::from_str(body).unwrap();
        f(v.as_object_mut().unwrap());
        v.to_string()
    }

    #[tokio::test]
    async fn valid_v1_and_v2_notifications() {
        let (verifier, _) = verifier();
        for version in [1u8, 2] {
            let body = signer().sign_notification(TOPIC, "{\"hello\":\"world\"}", "msg-1", version);
            let msg = verifier.verify(body.as_bytes()).await.unwrap_or_else(|e| {
                panic!("version {version}: {e}");
            });
            assert_eq!(msg.kind, SnsKind::Notification);
            assert_eq!(msg.message_id, "msg-1");
            assert_eq!(msg.topic_arn, TOPIC);
            assert_eq!(msg.message, "{\"hello\":\"world\"}");
            assert_eq!(msg.subscribe_url, None);
            assert!(msg.timestamp.ends_with('Z'));
        }
    }

    #[tokio::test]
    async fn valid_confirmations() {
        let (verifier, _) = verifier();
        let url = "https://sns.us-east-1.amazonaws.com/?Action=ConfirmSubscription&TopicArn=arn&Token=abc";
        let body = signer().sign_subscription_confirmation(TOPIC, url, "conf-1");
        let msg = verifier.verify(body.as_bytes()).await.unwrap();
        assert_eq!(msg.kind, SnsKind::SubscriptionConfirmation);
        assert_eq!(msg.subscribe_url.as_deref(), Some(url));
        assert!(msg.message.contains(TOPIC));
        assert!(is_sns_url(msg.subscribe_url.as_deref().unwrap()));

        let body = signer().sign_unsubscribe_confirmation(TOPIC, url, "conf-2");
        let msg = verifier.verify(body.as_bytes()).await.unwrap();
        assert_eq!(msg.kind, SnsKind::UnsubscribeConfirmation);

        // The SubscribeURL and Token are signed.
        let forged = edit(&body, |o| {
            o.insert(
                "SubscribeURL".into(),
                json_str("https://sns.us-east-1.amazonaws.com/?x=1"),
            );
        });
        assert!(matches!(
            verifier.verify(forged.as_bytes()).await,
            Err(SnsError::BadSignature(_))
        ));
        let forged = edit(&body, |o| {
            o.insert("Token".into(), json_str("other"));
        });
        assert!(matches!(
            verifier.verify(forged.as_bytes()).await,
            Err(SnsError::BadSignature(_))
        ));
        let missing = edit(&body, |o| {
            o.remove("Token");
        });
        assert!(matches!(
            verifier.verify(missing.as_bytes()).await,
            Err(SnsError::Malformed(_))
        ));
    }

    fn json_str(s: &str) -> Value {
        Value::String(s.to_owned())
    }

    #[tokio::test]
    async fn tampered_fields_are_refused() {
        let (verifier, _) = verifier();
        let body = signer().sign_notification(TOPIC, "{\"a\":1}", "msg-2", 2);
        for (field, value) in [
            ("Message", "{\"a\":2}"),
            ("MessageId", "msg-3"),
            ("Timestamp", "2020-01-01T00:00:00.000Z"),
            ("Subject", "added"),
        ] {
            let tampered = edit(&body, |o| {
                o.insert(field.into(), json_str(value));
            });
            let err = verifier.verify(tampered.as_bytes()).await.unwrap_err();
            assert!(matches!(err, SnsError::BadSignature(_)), "{field}: {err}");
        }
        // Signature bytes flipped, and not base64 at all.
        let tampered = edit(&body, |o| {
            let sig = o["Signature"].as_str().unwrap();
            let mut bytes = BASE64.decode(sig).unwrap();
            bytes[10] ^= 1;
            o.insert("Signature".into(), json_str(&BASE64.encode(bytes)));
        });
        assert!(matches!(
            verifier.verify(tampered.as_bytes()).await,
            Err(SnsError::BadSignature(_))
        ));
        let tampered = edit(&body, |o| {
            o.insert("Signature".into(), json_str("%%% not base64 %%%"));
        });
        assert!(matches!(
            verifier.verify(tampered.as_bytes()).await,
            Err(SnsError::BadSignature(_))
        ));
        // A v2 signature presented as v1 (and vice versa) does not verify.
        let tampered = edit(&body, |o| {
            o.insert("SignatureVersion".into(), json_str("1"));
        });
        assert!(matches!(
            verifier.verify(tampered.as_bytes()).await,
            Err(SnsError::BadSignature(_))
        ));
    }

    #[tokio::test]
    async fn subject_is_in_the_canonical_string_only_when_present() {
        let (verifier, _) = verifier();
        let with = signer().sign_notification_with_subject(TOPIC, Some("Hello"), "m", "id-s", 1);
        let msg = verifier.verify(with.as_bytes()).await.unwrap();
        assert_eq!(msg.message, "m");
        // Dropping the signed Subject breaks the signature...
        let dropped = edit(&with, |o| {
            o.remove("Subject");
        });
        assert!(verifier.verify(dropped.as_bytes()).await.is_err());
        // ...and so does changing it.
        let changed = edit(&with, |o| {
            o.insert("Subject".into(), json_str("Hullo"));
        });
        assert!(verifier.verify(changed.as_bytes()).await.is_err());
        // Without Subject, a JSON null Subject counts as absent.
        let without = signer().sign_notification(TOPIC, "m", "id-n", 2);
        let nulled = edit(&without, |o| {
            o.insert("Subject".into(), Value::Null);
        });
        verifier.verify(nulled.as_bytes()).await.unwrap();
    }

    #[test]
    fn canonical_strings_match_the_documented_format() {
        let mut e: Envelope = serde_json::from_value(serde_json::json!({
            "Type": "Notification",
            "MessageId": "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324",
            "TopicArn": "arn:aws:sns:us-west-2:123456789012:MyTopic",
            "Subject": "My First Message",
            "Message": "Hello world!",
            "Timestamp": "2012-05-02T00:54:06.655Z",
            "SignatureVersion": "1",
            "Signature": "x",
            "SigningCertURL": "https://sns.us-west-2.amazonaws.com/x.pem",
        }))
        .unwrap();
        assert_eq!(
            string_to_sign(SnsKind::Notification, &e).unwrap(),
            "Message\nHello world!\nMessageId\n22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324\nSubject\nMy First Message\nTimestamp\n2012-05-02T00:54:06.655Z\nTopicArn\narn:aws:sns:us-west-2:123456789012:MyTopic\nType\nNotification\n"
        );
        e.subject = None;
        assert_eq!(
            string_to_sign(SnsKind::Notification, &e).unwrap(),
            "Message\nHello world!\nMessageId\n22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324\nTimestamp\n2012-05-02T00:54:06.655Z\nTopicArn\narn:aws:sns:us-west-2:123456789012:MyTopic\nType\nNotification\n"
        );
        e.kind = "SubscriptionConfirmation".into();
        e.subject = Some("ignored for confirmations".into());
        e.token = Some("tok".into());
        e.subscribe_url =
            Some("https://sns.us-west-2.amazonaws.com/?Action=ConfirmSubscription".into());
        assert_eq!(
            string_to_sign(SnsKind::SubscriptionConfirmation, &e).unwrap(),
            "Message\nHello world!\nMessageId\n22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324\nSubscribeURL\nhttps://sns.us-west-2.amazonaws.com/?Action=ConfirmSubscription\nTimestamp\n2012-05-02T00:54:06.655Z\nToken\ntok\nTopicArn\narn:aws:sns:us-west-2:123456789012:MyTopic\nType\nSubscriptionConfirmation\n"
        );
    }

    #[tokio::test]
    async fn topic_must_be_allowed() {
        let (verifier, fetcher) = verifier();
        let other = "arn:aws:sns:us-east-1:999999999999:someone-else";
        let body = signer().sign_notification(other, "m", "id", 2);
        assert!(matches!(
            verifier.verify(body.as_bytes()).await,
            Err(SnsError::TopicNotAllowed(_))
        ));
        // An empty allow-list refuses everything, even a correctly signed message.
        let closed = SnsVerifier::new(Vec::new(), fetcher.clone());
        let body = signer().sign_notification(TOPIC, "m", "id", 2);
        assert!(matches!(
            closed.verify(body.as_bytes()).await,
            Err(SnsError::TopicNotAllowed(_))
        ));
        assert_eq!(fetcher.fetch_count(), 0);
    }

    #[tokio::test]
    async fn untrusted_cert_urls_are_refused_without_fetching() {
        let body = signer().sign_notification(TOPIC, "m", "id", 2);
        let bad_urls = [
            "http://sns.us-east-1.amazonaws.com/SimpleNotificationService-test.pem",
            "https://sns.us-east-1.amazonaws.com.evil.com/SimpleNotificationService-test.pem",
            "https://sns.us-east-1.amazonaws.com.cn.evil.com/x.pem",
            "https://evil.com/sns.us-east-1.amazonaws.com/x.pem",
            "https://user@sns.us-east-1.amazonaws.com/x.pem",
            "https://user:pw@sns.us-east-1.amazonaws.com/x.pem",
            "https://sns.us-east-1.amazonaws.com:8443/x.pem",
            "https://sns.us-east-1.amazonaws.com\\@evil.com/x.pem",
            "https://sns.us-east-1.amazonaws.com/x.txt",
            "https://sns.us-east-1.amazonaws.com/x.pem?y=1",
            "https://sns.us-east-1.amazonaws.com/x.pem#frag",
            "https://sns.amazonaws.com/x.pem",
            "https://sns..amazonaws.com/x.pem",
            "https://sqs.us-east-1.amazonaws.com/x.pem",
            "https://snsus-east-1.amazonaws.com/x.pem",
            "https://xsns.us-east-1.amazonaws.com/x.pem",
            "https://sns.us-east-1.amazonaws.com./x.pem",
            "https://sns.us.east.1.amazonaws.com/x.pem",
            "https://54.239.0.1/x.pem",
            "https://[::1]/x.pem",
            "HTTPS://sns.us-east-1.amazonaws.com/x.pem",
            "ftp://sns.us-east-1.amazonaws.com/x.pem",
            "//sns.us-east-1.amazonaws.com/x.pem",
            "not a url",
            "",
        ];
        for bad in bad_urls {
            // Serve the real certificate at the bad URL too: only the URL check stops it.
            let fetcher = Arc::new(signer().fetcher().with(bad, signer().cert_pem()));
            let verifier = verifier_with(fetcher.clone());
            let forged = edit(&body, |o| {
                o.insert("SigningCertURL".into(), json_str(bad));
            });
            let err = verifier.verify(forged.as_bytes()).await.unwrap_err();
            assert!(
                matches!(err, SnsError::UntrustedCertUrl { .. }),
                "{bad}: {err}"
            );
            assert_eq!(fetcher.fetch_count(), 0, "{bad}");
        }
        // Accepted forms: other regions, China, GovCloud, an explicit default port
        // (normalised away, so the cache key is the same URL).
        for good in [
            "https://sns.eu-west-1.amazonaws.com/SimpleNotificationService-abc.pem",
            "https://sns.cn-north-1.amazonaws.com.cn/SimpleNotificationService-abc.pem",
            "https://sns.us-gov-west-1.amazonaws.com/SimpleNotificationService-abc.pem",
            "https://sns.us-east-1.amazonaws.com:443/SimpleNotificationService-test.pem",
        ] {
            assert!(check_cert_url(good).is_ok(), "{good}");
        }
        assert_eq!(
            check_cert_url(
                "https://sns.us-east-1.amazonaws.com:443/SimpleNotificationService-test.pem"
            ),
            Ok(TEST_CERT_URL.to_owned())
        );
    }

    #[tokio::test]
    async fn unknown_signature_version_and_type_are_refused() {
        let (verifier, fetcher) = verifier();
        for version in [0u8, 3, 9] {
            let body = signer().sign_notification(TOPIC, "m", "id", version);
            assert!(matches!(
                verifier.verify(body.as_bytes()).await,
                Err(SnsError::UnsupportedSignatureVersion(_))
            ));
        }
        let body = signer().sign_notification(TOPIC, "m", "id", 2);
        let odd = edit(&body, |o| {
            o.insert("Type".into(), json_str("Bogus"));
        });
        assert!(matches!(
            verifier.verify(odd.as_bytes()).await,
            Err(SnsError::UnsupportedType(_))
        ));
        assert_eq!(fetcher.fetch_count(), 0);
        for junk in [
            &b"not json"[..],
            b"{}",
            b"[]",
            b"",
            b"{\"Type\":\"Notification\"}",
        ] {
            assert!(matches!(
                verifier.verify(junk).await,
                Err(SnsError::Malformed(_))
            ));
        }
        let dup = body.replacen("\"Message\":", "\"Message\":\"x\",\"Message\":", 1);
        assert!(matches!(
            verifier.verify(dup.as_bytes()).await,
            Err(SnsError::Malformed(_))
        ));
    }

    #[tokio::test]
    async fn certificate_is_fetched_once_and_cached() {
        let (verifier, fetcher) = verifier();
        let a = signer().sign_notification(TOPIC, "a", "id-a", 1);
        let b = signer().sign_notification(TOPIC, "b", "id-b", 2);
        verifier.verify(a.as_bytes()).await.unwrap();
        verifier.verify(b.as_bytes()).await.unwrap();
        assert_eq!(fetcher.fetch_count(), 1);
        // A bad signature does not evict or refetch.
        let bad = edit(&a, |o| {
            o.insert("Message".into(), json_str("changed"));
        });
        assert!(verifier.verify(bad.as_bytes()).await.is_err());
        verifier.verify(a.as_bytes()).await.unwrap();
        assert_eq!(fetcher.fetch_count(), 1);
    }

    #[tokio::test]
    async fn fetch_and_certificate_failures_are_errors() {
        let body = signer().sign_notification(TOPIC, "m", "id", 2);
        // Nothing served: transient fetch error, not cached.
        let empty = Arc::new(StaticCertFetcher::new());
        let verifier = verifier_with(empty.clone());
        let err = verifier.verify(body.as_bytes()).await.unwrap_err();
        assert!(
            matches!(err, SnsError::CertFetch(_)) && err.is_transient(),
            "{err}"
        );
        assert!(verifier.verify(body.as_bytes()).await.is_err());
        assert_eq!(empty.fetch_count(), 2);
        // Garbage instead of a certificate.
        for junk in [
            b"hello".to_vec(),
            b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".to_vec(),
        ] {
            let verifier =
                verifier_with(Arc::new(StaticCertFetcher::new().with(TEST_CERT_URL, junk)));
            let err = verifier.verify(body.as_bytes()).await.unwrap_err();
            assert!(matches!(err, SnsError::InvalidCertificate(_)), "{err}");
            assert!(!err.is_transient());
        }
        // Another key's certificate at the URL: the signature does not verify.
        let other = TestSigner::new();
        let verifier = verifier_with(Arc::new(other.fetcher()));
        assert!(matches!(
            verifier.verify(body.as_bytes()).await,
            Err(SnsError::BadSignature(_))
        ));
    }

    #[tokio::test]
    async fn verifier_is_shareable_and_its_future_is_send() {
        fn assert_send_sync<T: Send + Sync>(_: &T) {}
        fn assert_send<T: Send>(_: T) {}
        let (verifier, _) = verifier();
        assert_send_sync(&verifier);
        assert_send(verifier.verify(b"{}"));
    }

    #[tokio::test]
    async fn https_fetcher_refuses_plain_http() {
        let fetcher = HttpsCertFetcher::new().unwrap();
        // https_only: refused before any connection is attempted.
        let err = fetcher.fetch("http://127.0.0.1:9/x.pem").await.unwrap_err();
        assert!(err.contains("127.0.0.1"), "{err}");
    }

    #[test]
    fn error_text_is_clipped() {
        let long = "x".repeat(5000);
        let err = SnsError::TopicNotAllowed(clip(&long));
        assert!(err.to_string().len() < 300);
    }

    // --- SES payloads --------------------------------------------------------

    const MAIL: &str = r#"{
        "timestamp": "2024-03-10T08:00:00.000Z",
        "source": "Pigeon <pigeon@example.org>",
        "sourceArn": "arn:aws:ses:us-east-1:123456789012:identity/example.org",
        "sendingAccountId": "123456789012",
        "messageId": "0100018e2b7c1d2f-aaaa-bbbb-cccc-000000000000-000000",
        "destination": ["alice@example.net", "bob@example.net"],
        "headersTruncated": false,
        "headers": [{"name": "Subject", "value": "Hi"}],
        "commonHeaders": {"from": ["Pigeon <pigeon@example.org>"], "to": ["alice@example.net"], "subject": "Hi"},
        "tags": {"ses:configuration-set": ["pigeonhole"]}
    }"#;
    const MESSAGE_ID: &str = "0100018e2b7c1d2f-aaaa-bbbb-cccc-000000000000-000000";

    fn event(kind_field: &str, kind: &str, extra: &str) -> String {
        format!(r#"{{"{kind_field}": "{kind}", "mail": {MAIL}{extra}}}"#)
    }

    fn micros(ts: &str) -> i64 {
        parse_micros(ts).unwrap()
    }

    fn parsed_event(json: &str) -> ProviderEvent {
        match parse_ses_notification(json).unwrap() {
            SesNotification::Event(e) => e,
            other => panic!("expected an event, got {other:?}"),
        }
    }

    #[test]
    fn the_message_tag_names_our_message_when_it_is_one_of_our_ids() {
        let untagged = parsed_event(&event("eventType", "Send", r#", "send": {}"#));
        assert_eq!(untagged.message_tag, None);
        let with_tag = |value: &str| {
            let mail = MAIL.replace(
                r#""tags": {"ses:configuration-set": ["pigeonhole"]}"#,
                &format!(
                    r#""tags": {{"ses:configuration-set": ["pigeonhole"], "pigeonhole_message_id": [{value}]}}"#
                ),
            );
            parsed_event(&format!(
                r#"{{"eventType": "Send", "mail": {mail}, "send": {{}}}}"#
            ))
        };
        assert_eq!(
            with_tag(r#""msg_0123456789abcdefghjk""#)
                .message_tag
                .as_deref(),
            Some("msg_0123456789abcdefghjk")
        );
        // Anything else is not a message of ours: no tag rather than a bad one.
        for bad in [
            r#""thr_0123456789abcdefghjk""#,
            r#""msg_ bad""#,
            "1",
            "null",
        ] {
            assert_eq!(with_tag(bad).message_tag, None, "{bad}");
        }
    }

    #[test]
    fn ses_bounce_event() {
        let json = event(
            "eventType",
            "Bounce",
            r#", "bounce": {
                "bounceType": "Permanent", "bounceSubType": "General",
                "bouncedRecipients": [{"emailAddress": "alice@example.net", "action": "failed",
                    "status": "5.1.1", "diagnosticCode": "smtp; 550 5.1.1 user unknown"}],
                "timestamp": "2024-03-10T08:00:03.250Z",
                "feedbackId": "0100018e-feedback", "reportingMTA": "dsn; mta.example.net"}"#,
        );
        let e = parsed_event(&json);
        assert_eq!(e.provider_message_id, MESSAGE_ID);
        assert_eq!(e.kind, ProviderEventKind::Bounce { permanent: true });
        assert_eq!(e.recipients, vec!["alice@example.net"]);
        assert_eq!(e.detail.as_deref(), Some("smtp; 550 5.1.1 user unknown"));
        assert_eq!(e.occurred_at, micros("2024-03-10T08:00:03.250Z"));
        assert_eq!(e.occurred_at, 1_710_057_603_250_000);

        // Transient bounce without a diagnostic code, old notification format.
        let json = event(
            "notificationType",
            "Bounce",
            r#", "bounce": {
                "bounceType": "Transient", "bounceSubType": "MailboxFull",
                "bouncedRecipients": [{"emailAddress": "bob@example.net"}],
                "timestamp": "2024-03-10T08:00:04Z"}"#,
        );
        let e = parsed_event(&json);
        assert_eq!(e.kind, ProviderEventKind::Bounce { permanent: false });
        assert_eq!(e.recipients, vec!["bob@example.net"]);
        assert_eq!(e.detail.as_deref(), Some("Transient/MailboxFull"));
        assert_eq!(e.occurred_at, micros("2024-03-10T08:00:04Z"));
    }

    #[test]
    fn ses_complaint_event() {
        let json = event(
            "eventType",
            "Complaint",
            r#", "complaint": {
                "feedbackId": "0100018e-complaint", "complaintSubType": null,
                "complainedRecipients": [{"emailAddress": "bob@example.net"}],
                "timestamp": "2024-03-10T09:15:00.000Z",
                "userAgent": "ExampleFeedbackLoop/1.0", "complaintFeedbackType": "abuse",
                "arrivalDate": "2024-03-10T09:14:58.000Z"}"#,
        );
        let e = parsed_event(&json);
        assert_eq!(e.kind, ProviderEventKind::Complaint);
        assert_eq!(e.recipients, vec!["bob@example.net"]);
        assert_eq!(e.detail.as_deref(), Some("abuse"));
        assert_eq!(e.occurred_at, micros("2024-03-10T09:15:00.000Z"));
    }

    #[test]
    fn ses_delivery_event() {
        let json = event(
            "eventType",
            "Delivery",
            r#", "delivery": {
                "timestamp": "2024-03-10T08:00:01.500Z", "processingTimeMillis": 1500,
                "recipients": ["alice@example.net"],
                "smtpResponse": "250 2.6.0 Message received", "reportingMTA": "a1-2.smtp-out.amazonses.com"}"#,
        );
        let e = parsed_event(&json);
        assert_eq!(e.kind, ProviderEventKind::Delivery);
        assert_eq!(e.recipients, vec!["alice@example.net"]);
        assert_eq!(e.detail.as_deref(), Some("250 2.6.0 Message received"));
        assert_eq!(e.occurred_at, micros("2024-03-10T08:00:01.500Z"));
    }

    #[test]
    fn ses_send_and_reject_events_use_mail_destination_and_timestamp() {
        let e = parsed_event(&event("eventType", "Send", r#", "send": {}"#));
        assert_eq!(e.kind, ProviderEventKind::Send);
        assert_eq!(e.recipients, vec!["alice@example.net", "bob@example.net"]);
        assert_eq!(e.detail, None);
        assert_eq!(e.occurred_at, micros("2024-03-10T08:00:00.000Z"));

        let e = parsed_event(&event(
            "eventType",
            "Reject",
            r#", "reject": {"reason": "Bad content"}"#,
        ));
        assert_eq!(e.kind, ProviderEventKind::Reject);
        assert_eq!(e.recipients, vec!["alice@example.net", "bob@example.net"]);
        assert_eq!(e.detail.as_deref(), Some("Bad content"));
        assert_eq!(e.occurred_at, micros("2024-03-10T08:00:00.000Z"));
    }

    #[test]
    fn ses_delivery_delay_event() {
        let json = event(
            "eventType",
            "DeliveryDelay",
            r#", "deliveryDelay": {
                "timestamp": "2024-03-10T08:20:00.000Z", "delayType": "TransientCommunicationFailure",
                "expirationTime": "2024-03-10T22:00:00.000Z",
                "delayedRecipients": [{"emailAddress": "bob@example.net", "status": "4.4.1",
                    "diagnosticCode": "smtp; 421 4.4.1 Unable to connect to remote host"}]}"#,
        );
        let e = parsed_event(&json);
        assert_eq!(e.kind, ProviderEventKind::DeliveryDelay);
        assert_eq!(e.recipients, vec!["bob@example.net"]);
        assert_eq!(
            e.detail.as_deref(),
            Some("TransientCommunicationFailure: smtp; 421 4.4.1 Unable to connect to remote host")
        );
        assert_eq!(e.occurred_at, micros("2024-03-10T08:20:00.000Z"));
    }

    #[test]
    fn ses_open_and_click_events() {
        let e = parsed_event(&event(
            "eventType",
            "Open",
            r#", "open": {"ipAddress": "192.0.2.1", "timestamp": "2024-03-10T10:00:00.000Z",
                "userAgent": "Mozilla/5.0"}"#,
        ));
        assert_eq!(e.kind, ProviderEventKind::Open);
        assert_eq!(e.recipients, vec!["alice@example.net", "bob@example.net"]);
        assert_eq!(e.detail, None);
        assert_eq!(e.occurred_at, micros("2024-03-10T10:00:00.000Z"));

        let e = parsed_event(&event(
            "eventType",
            "Click",
            r#", "click": {"ipAddress": "192.0.2.1", "link": "https://example.org/welcome",
                "linkTags": {"campaign": ["spring"]}, "timestamp": "2024-03-10T10:01:00.000Z",
                "userAgent": "Mozilla/5.0"}"#,
        ));
        assert_eq!(e.kind, ProviderEventKind::Click);
        assert_eq!(e.detail.as_deref(), Some("https://example.org/welcome"));
        assert_eq!(e.occurred_at, micros("2024-03-10T10:01:00.000Z"));
    }

    #[test]
    fn ses_rendering_failure_event() {
        let e = parsed_event(&event(
            "eventType",
            "Rendering Failure",
            r#", "failure": {"errorMessage": "Attribute 'name' is not present in the rendering data.",
                "templateName": "Welcome"}"#,
        ));
        assert_eq!(e.kind, ProviderEventKind::RenderingFailure);
        assert_eq!(
            e.detail.as_deref(),
            Some("Attribute 'name' is not present in the rendering data.")
        );
        assert_eq!(e.occurred_at, micros("2024-03-10T08:00:00.000Z"));
    }

    #[test]
    fn ses_received_notification() {
        let mime = "From: Carol <carol@example.net>\r\nTo: inbox@example.org\r\nSubject: Hello\r\n\r\nHi there\r\n";
        let encoded = BASE64.encode(mime);
        let receipt = |encoding: &str, content: Option<&str>| {
            let content = content
                .map(|c| format!(r#", "content": {}"#, Value::String(c.to_owned())))
                .unwrap_or_default();
            format!(
                r#"{{"notificationType": "Received",
                "mail": {{"timestamp": "2024-03-10T11:00:00.000Z", "source": "carol@example.net",
                    "messageId": "inbound-1", "destination": ["inbox@example.org", "other@example.com"]}},
                "receipt": {{"timestamp": "2024-03-10T11:00:00.000Z", "processingTimeMillis": 420,
                    "recipients": ["inbox@example.org"],
                    "spamVerdict": {{"status": "PASS"}}, "virusVerdict": {{"status": "PASS"}},
                    "spfVerdict": {{"status": "PASS"}}, "dkimVerdict": {{"status": "PASS"}},
                    "dmarcVerdict": {{"status": "PASS"}},
                    "action": {{"type": "SNS", "topicArn": "{TOPIC}", "encoding": "{encoding}"}}}}
                {content}}}"#
            )
        };
        let want = SesNotification::Received {
            recipients: vec!["inbox@example.org".into()],
            raw_mime: mime.as_bytes().to_vec(),
        };
        assert_eq!(
            parse_ses_notification(&receipt("BASE64", Some(&encoded))).unwrap(),
            want
        );
        assert_eq!(
            parse_ses_notification(&receipt("UTF8", Some(mime))).unwrap(),
            want
        );
        // Base64 with line breaks is tolerated.
        let wrapped: String = encoded
            .as_bytes()
            .chunks(20)
            .map(|c| format!("{}\r\n", std::str::from_utf8(c).unwrap()))
            .collect();
        assert_eq!(
            parse_ses_notification(&receipt("BASE64", Some(&wrapped))).unwrap(),
            want
        );
        // No content (e.g. an S3 action) or bad base64 is an error.
        assert!(parse_ses_notification(&receipt("BASE64", None)).is_err());
        assert!(parse_ses_notification(&receipt("BASE64", Some("***"))).is_err());
    }

    #[test]
    fn ses_ignored_and_malformed_payloads() {
        assert!(matches!(
            parse_ses_notification(
                r#"{"notificationType": "AmazonSnsSubscriptionSucceeded", "message": "ok"}"#
            ),
            Ok(SesNotification::Ignored(_))
        ));
        assert!(matches!(
            parse_ses_notification(&event(
                "eventType",
                "Subscription",
                r#", "subscription": {}"#
            )),
            Ok(SesNotification::Ignored(_))
        ));
        for bad in [
            "not json",
            "[]",
            "{}",
            r#"{"eventType": "Send", "send": {}}"#,
            r#"{"eventType": "Send", "mail": {"messageId": "x"}}"#,
            r#"{"eventType": "Send", "mail": {"messageId": "x", "timestamp": "yesterday"}}"#,
            r#"{"notificationType": "Received", "mail": {"messageId": "x"}}"#,
        ] {
            assert!(parse_ses_notification(bad).is_err(), "{bad}");
        }
    }

    #[tokio::test]
    async fn signed_ses_event_end_to_end() {
        let (verifier, _) = verifier();
        let payload = event("eventType", "Send", r#", "send": {}"#);
        let body = signer().sign_notification(TOPIC, &payload, "e2e", 1);
        let msg = verifier.verify(body.as_bytes()).await.unwrap();
        let e = parsed_event(&msg.message);
        assert_eq!(e.provider_message_id, MESSAGE_ID);
    }
}
