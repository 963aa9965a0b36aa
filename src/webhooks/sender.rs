//! One signed HTTP attempt at one endpoint, behind the URL safety checks.
//!
//! Every attempt re-checks the URL ([`ssrf::check_url`]), resolves the host
//! through the service's resolver ([`Dns::lookup_ips`]), checks every address
//! ([`ssrf::check_resolved`]) and then connects to exactly those addresses: the
//! HTTP client used for the attempt has the checked addresses as a DNS
//! override for the host and a resolver that refuses every other name, no
//! proxy and no redirects. Clients are cached per (host, checked addresses),
//! so keep-alive connections are reused while the DNS answer stays the same
//! and a changed answer gets a fresh client.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;

use crate::config::Environment;
use crate::dns::{Dns, DnsError};
use crate::telemetry::{AttemptOutcome, Telemetry};
use crate::webhooks::signature::{self, WebhookSecret};
use crate::webhooks::ssrf::{self, UrlError, UrlPolicy, WebhookTarget};

/// Bytes of an endpoint's reply kept in the delivery record.
pub const RESPONSE_BODY_LIMIT: usize = 4096;
/// The `User-Agent` of every delivery.
pub const USER_AGENT: &str = concat!("pigeonhole-webhooks/", env!("CARGO_PKG_VERSION"));
/// Cached clients kept at most (one per host and address set).
const CLIENT_CACHE_MAX: usize = 512;
/// A cached client unused this long is dropped when the cache is full.
const CLIENT_IDLE: Duration = Duration::from_secs(90);

/// The URL policy of an environment.
pub fn policy_for(env: Environment) -> UrlPolicy {
    match env {
        Environment::Production => UrlPolicy::Production,
        Environment::Development => UrlPolicy::Development,
    }
}

/// The result of one attempt.
#[derive(Debug, Clone)]
pub struct AttemptResult {
    /// The HTTP status, or `None` when no reply came.
    pub status: Option<u16>,
    /// The start of the reply body, at most [`RESPONSE_BODY_LIMIT`] bytes.
    pub response_body: String,
    /// Why the attempt failed; `None` on success.
    pub error: Option<String>,
    pub duration_ms: i64,
    pub succeeded: bool,
    /// Whether a failure is worth another attempt (408, 429, 5xx, no reply).
    pub retryable: bool,
    /// How it ended, for the metrics.
    pub outcome: AttemptOutcome,
}

/// How a reply status is judged: (succeeded, retryable).
pub fn classify(status: u16) -> (bool, bool) {
    match status {
        200..=299 => (true, false),
        408 | 429 | 500..=599 => (false, true),
        _ => (false, false),
    }
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct ClientKey {
    host: String,
    addrs: Vec<SocketAddr>,
}

/// Sends deliveries. Cheap to clone.
#[derive(Clone)]
pub struct Sender {
    dns: Arc<Dns>,
    policy: UrlPolicy,
    timeout: Duration,
    clients: Arc<Mutex<HashMap<ClientKey, (reqwest::Client, Instant)>>>,
    /// Counts every attempt (pings and replays too) by outcome.
    metrics: Telemetry,
}

/// A resolver for the delivery clients that answers nothing: the only names
/// they may reach are the checked overrides.
struct RefuseResolver;

impl reqwest::dns::Resolve for RefuseResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let name = name.as_str().to_owned();
        Box::pin(async move { Err(format!("{name} was not checked for this delivery").into()) })
    }
}

impl Sender {
    pub fn new(dns: Arc<Dns>, policy: UrlPolicy, timeout: Duration, metrics: Telemetry) -> Sender {
        Sender {
            dns,
            policy,
            timeout,
            clients: Arc::new(Mutex::new(HashMap::new())),
            metrics,
        }
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Checks `url` and resolves its host; returns the target and the only
    /// socket addresses a delivery may connect to.
    pub async fn check(&self, url: &str) -> Result<(WebhookTarget, Vec<SocketAddr>), String> {
        self.checked(url).await.map_err(|(_, e)| e)
    }

    /// [`Sender::check`], telling a refusal by the URL guard from a host
    /// that does not resolve.
    async fn checked(
        &self,
        url: &str,
    ) -> Result<(WebhookTarget, Vec<SocketAddr>), (AttemptOutcome, String)> {
        let refused = |e: UrlError| (AttemptOutcome::Refused, e.to_string());
        let target = ssrf::check_url(url, self.policy).map_err(refused)?;
        let ips = if target.loopback_allowed && target.ip_literal().is_none() {
            // `localhost` is loopback by definition (RFC 6761); it is not
            // asked of the DNS servers, which need not know it.
            vec![
                IpAddr::V4(Ipv4Addr::LOCALHOST),
                IpAddr::V6(Ipv6Addr::LOCALHOST),
            ]
        } else {
            match target.ip_literal() {
                Some(ip) => vec![ip],
                None => match self.dns.lookup_ips(&target.host).await {
                    Ok(ips) => ips,
                    Err(DnsError::NoRecords(_)) => {
                        let e = UrlError::NoAddresses {
                            host: target.host.clone(),
                        };
                        return Err((AttemptOutcome::Dns, e.to_string()));
                    }
                    Err(e) => {
                        return Err((
                            AttemptOutcome::Dns,
                            format!("webhook URL host could not be resolved: {e}"),
                        ));
                    }
                },
            }
        };
        let addrs = ssrf::check_resolved(&target, &ips).map_err(refused)?;
        Ok((target, addrs))
    }

    fn client(
        &self,
        target: &WebhookTarget,
        addrs: &[SocketAddr],
    ) -> Result<reqwest::Client, String> {
        let key = ClientKey {
            host: target.host.clone(),
            addrs: addrs.to_vec(),
        };
        let now = Instant::now();
        if let Ok(mut cache) = self.clients.lock()
            && let Some((client, used)) = cache.get_mut(&key)
        {
            *used = now;
            return Ok(client.clone());
        }
        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .dns_resolver(Arc::new(RefuseResolver))
            .connect_timeout(self.timeout)
            .pool_idle_timeout(Duration::from_secs(60))
            .pool_max_idle_per_host(crate::webhooks::engine::GLOBAL_IN_FLIGHT)
            .user_agent(USER_AGENT);
        if target.ip_literal().is_none() {
            builder = builder.resolve_to_addrs(&target.host, addrs);
        }
        let client = builder
            .build()
            .map_err(|e| format!("could not build the HTTP client: {e}"))?;
        if let Ok(mut cache) = self.clients.lock() {
            if cache.len() >= CLIENT_CACHE_MAX {
                cache.retain(|_, (_, used)| now.duration_since(*used) < CLIENT_IDLE);
                if cache.len() >= CLIENT_CACHE_MAX {
                    cache.clear();
                }
            }
            cache.insert(key, (client.clone(), now));
        }
        Ok(client)
    }

    /// One attempt: checks, signs and posts `body` with envelope id
    /// `envelope_id`. The whole attempt (DNS included) gets the configured
    /// timeout; a reply whose body is still arriving keeps its status.
    pub async fn send(
        &self,
        url: &str,
        secret: &str,
        envelope_id: &str,
        body: Bytes,
    ) -> AttemptResult {
        let start = Instant::now();
        let deadline = tokio::time::Instant::now() + self.timeout;
        let outcome =
            tokio::time::timeout_at(deadline, self.post(url, secret, envelope_id, body)).await;
        let (status, response_body, error, kind) = match outcome {
            Err(_) => (
                None,
                String::new(),
                Some(format!(
                    "no reply within {} ms (timeout)",
                    self.timeout.as_millis()
                )),
                AttemptOutcome::Timeout,
            ),
            Ok(Err((kind, e))) => (None, String::new(), Some(e), kind),
            Ok(Ok(resp)) => {
                let status = resp.status().as_u16();
                let text = read_limited(resp, deadline).await;
                let error = if classify(status).0 {
                    None
                } else {
                    Some(format!("endpoint answered HTTP {status}"))
                };
                (Some(status), text, error, AttemptOutcome::of_status(status))
            }
        };
        self.metrics.webhook_attempt(kind);
        let (succeeded, retryable) = match status {
            Some(s) => classify(s),
            None => (false, true),
        };
        AttemptResult {
            status,
            response_body,
            error,
            duration_ms: i64::try_from(start.elapsed().as_millis()).unwrap_or(i64::MAX),
            succeeded,
            retryable,
            outcome: kind,
        }
    }

    async fn post(
        &self,
        url: &str,
        secret: &str,
        envelope_id: &str,
        body: Bytes,
    ) -> Result<reqwest::Response, (AttemptOutcome, String)> {
        let secret = WebhookSecret::parse(secret)
            .map_err(|e| (AttemptOutcome::Error, format!("stored secret: {e}")))?;
        let (target, addrs) = self.checked(url).await?;
        let client = self
            .client(&target, &addrs)
            .map_err(|e| (AttemptOutcome::Error, e))?;
        let timestamp = crate::clock::now_micros().div_euclid(1_000_000);
        let sig = signature::sign(&secret, envelope_id, timestamp, &body);
        client
            .post(target.url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header("webhook-id", envelope_id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", sig)
            .body(body)
            .send()
            .await
            .map_err(|e| {
                let kind = if e.is_timeout() {
                    AttemptOutcome::Timeout
                } else if e.is_connect() || e.is_request() {
                    AttemptOutcome::Connect
                } else {
                    AttemptOutcome::Error
                };
                (kind, describe_error(e))
            })
    }
}

/// A transport error in one line, without the URL (the endpoint is known).
fn describe_error(e: reqwest::Error) -> String {
    let kind = if e.is_connect() {
        "could not connect"
    } else if e.is_timeout() {
        "timed out"
    } else if e.is_request() {
        "request failed"
    } else {
        "failed"
    };
    let mut detail = String::new();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        detail = s.to_string();
        source = s.source();
    }
    if detail.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}: {detail}")
    }
}

/// Reads at most [`RESPONSE_BODY_LIMIT`] bytes of the reply before `deadline`,
/// cut at a character boundary; invalid UTF-8 is replaced.
async fn read_limited(mut resp: reqwest::Response, deadline: tokio::time::Instant) -> String {
    let mut buf: Vec<u8> = Vec::new();
    while buf.len() < RESPONSE_BODY_LIMIT {
        match tokio::time::timeout_at(deadline, resp.chunk()).await {
            Ok(Ok(Some(chunk))) => buf.extend_from_slice(&chunk),
            _ => break,
        }
    }
    truncate_utf8(&buf, RESPONSE_BODY_LIMIT)
}

fn truncate_utf8(bytes: &[u8], limit: usize) -> String {
    if bytes.len() <= limit {
        return String::from_utf8_lossy(bytes).into_owned();
    }
    let mut cut = limit;
    // Step back over at most three continuation bytes of a split character.
    while cut > 0 && cut > limit.saturating_sub(3) && (bytes[cut] & 0xC0) == 0x80 {
        cut -= 1;
    }
    String::from_utf8_lossy(&bytes[..cut]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification_follows_the_spec() {
        assert_eq!(classify(200), (true, false));
        assert_eq!(classify(204), (true, false));
        assert_eq!(classify(408), (false, true));
        assert_eq!(classify(429), (false, true));
        assert_eq!(classify(500), (false, true));
        assert_eq!(classify(503), (false, true));
        assert_eq!(classify(400), (false, false));
        assert_eq!(classify(401), (false, false));
        assert_eq!(classify(403), (false, false));
        assert_eq!(classify(410), (false, false));
        assert_eq!(classify(301), (false, false));
    }

    #[test]
    fn truncation_keeps_characters_whole() {
        assert_eq!(truncate_utf8(b"abc", 4), "abc");
        let s = "aé".repeat(3); // 3 bytes each
        let t = truncate_utf8(s.as_bytes(), 5);
        assert_eq!(t, "aéa");
        let t = truncate_utf8(s.as_bytes(), 4);
        assert_eq!(t, "aéa");
        let t = truncate_utf8(s.as_bytes(), 2);
        assert_eq!(t, "a");
    }
}
