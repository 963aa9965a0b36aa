//! One typed configuration, read from the environment (and optionally a TOML
//! file with the same keys), validated once at start.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Environment {
    Development,
    Production,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    Simulator,
    Ses,
}

#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub database_url: String,
    pub env: Environment,
    pub provider: ProviderKind,
    pub smtp_listen: Option<SocketAddr>,
    /// PEM certificate chain and key offered through STARTTLS (both or neither).
    pub smtp_tls_cert: Option<std::path::PathBuf>,
    pub smtp_tls_key: Option<std::path::PathBuf>,
    /// Inbound SMTP limits; `None` keeps the listener's default
    /// (`crate::smtp::SmtpConfig::default`).
    pub smtp_hostname: Option<String>,
    pub smtp_max_connections: Option<usize>,
    pub smtp_max_connections_per_ip: Option<usize>,
    pub smtp_idle_timeout: Option<Duration>,
    pub smtp_session_timeout: Option<Duration>,
    pub smtp_auth_timeout: Option<Duration>,
    pub public_url: String,
    pub open_tracking: bool,
    pub simulator_outbox: Option<std::path::PathBuf>,
    pub dns_servers: Option<Vec<SocketAddr>>,
    pub webhook_retry_delays: Vec<Duration>,
    pub webhook_timeout: Duration,
    pub rate_limit: u32,
    /// Whether a key's limit is counted in each process alone (spec §8)
    /// rather than across the deployment (PostgreSQL only).
    pub rate_limit_per_process: bool,
    pub ses_region: Option<String>,
    pub ses_endpoint: Option<String>,
    /// SNS topic ARNs whose notifications are accepted at `/sns/ses`.
    pub sns_topics: Vec<String>,
    pub http: HttpSettings,
    /// Memory that large messages (SMTP and HTTP alike) may take together
    /// while they are processed (see `core::memory`).
    pub message_memory_budget: usize,
    /// How long a large HTTP request waits for that memory before a 503.
    pub message_memory_wait: Duration,
    /// When a keyed send counts as interrupted, and how long its message
    /// then waits for the provider's events (see `core::interrupted`).
    pub interrupted_sends: crate::core::interrupted::Timings,
}

/// `PIGEONHOLE_MESSAGE_MEMORY_BUDGET` when unset: 512 MiB.
pub const DEFAULT_MESSAGE_MEMORY_BUDGET: usize = 512 * 1024 * 1024;

/// Bounds on what HTTP clients may hold: time, connections and head size.
#[derive(Debug, Clone)]
pub struct HttpSettings {
    /// A request head (request line and headers) must arrive whole within
    /// this time, counted from its first byte (from accept for a new connection).
    pub header_timeout: Duration,
    /// A request body must arrive whole within this time of its head.
    pub body_timeout: Duration,
    /// A keep-alive connection with no request in flight is closed after this.
    pub idle_timeout: Duration,
    /// Open HTTP connections; `None` means derived from the file limit at start.
    pub max_connections: Option<usize>,
    /// Open HTTP connections from one IPv4 address or IPv6 /64; 0 means no cap.
    pub max_connections_per_ip: usize,
    /// Request headers (names, values and separators) above this are 431.
    pub max_header_bytes: usize,
    /// A request URI longer than this is 414.
    pub max_uri_bytes: usize,
}

/// The largest header and URI limits accepted: below hyper's own hard limit on
/// a URI (64 KB), so our JSON 414 answers first (its read buffer is sized from
/// these, see `crate::server`).
pub const HTTP_MAX_HEADER_BYTES_CEILING: usize = 256 * 1024;
pub const HTTP_MAX_URI_BYTES_CEILING: usize = 60 * 1024;

/// A bad setting: names the variable and says what is wrong, in one line.
#[derive(Debug, thiserror::Error)]
#[error("{var}: {message}")]
pub struct ConfigError {
    pub var: String,
    pub message: String,
}

fn bad(var: &str, message: impl Into<String>) -> ConfigError {
    ConfigError {
        var: var.to_string(),
        message: message.into(),
    }
}

const VARS: &[&str] = &[
    "PIGEONHOLE_LISTEN",
    "PIGEONHOLE_DATABASE_URL",
    "PIGEONHOLE_ENV",
    "PIGEONHOLE_PROVIDER",
    "PIGEONHOLE_SMTP_LISTEN",
    "PIGEONHOLE_SMTP_TLS_CERT",
    "PIGEONHOLE_SMTP_TLS_KEY",
    "PIGEONHOLE_SMTP_HOSTNAME",
    "PIGEONHOLE_SMTP_MAX_CONNECTIONS",
    "PIGEONHOLE_SMTP_MAX_CONNECTIONS_PER_IP",
    "PIGEONHOLE_SMTP_IDLE_TIMEOUT",
    "PIGEONHOLE_SMTP_SESSION_TIMEOUT",
    "PIGEONHOLE_SMTP_AUTH_TIMEOUT",
    "PIGEONHOLE_PUBLIC_URL",
    "PIGEONHOLE_OPEN_TRACKING",
    "PIGEONHOLE_SIMULATOR_OUTBOX",
    "PIGEONHOLE_DNS_SERVERS",
    "PIGEONHOLE_WEBHOOK_RETRY_DELAYS",
    "PIGEONHOLE_WEBHOOK_TIMEOUT",
    "PIGEONHOLE_RATE_LIMIT",
    "PIGEONHOLE_RATE_LIMIT_SCOPE",
    "PIGEONHOLE_SES_REGION",
    "PIGEONHOLE_SES_ENDPOINT",
    "PIGEONHOLE_SNS_TOPICS",
    "PIGEONHOLE_HTTP_HEADER_TIMEOUT",
    "PIGEONHOLE_HTTP_BODY_TIMEOUT",
    "PIGEONHOLE_HTTP_IDLE_TIMEOUT",
    "PIGEONHOLE_HTTP_MAX_CONNECTIONS",
    "PIGEONHOLE_HTTP_MAX_CONNECTIONS_PER_IP",
    "PIGEONHOLE_HTTP_MAX_HEADER_BYTES",
    "PIGEONHOLE_HTTP_MAX_URI_BYTES",
    "PIGEONHOLE_MESSAGE_MEMORY_BUDGET",
    "PIGEONHOLE_MESSAGE_MEMORY_WAIT",
    "PIGEONHOLE_INTERRUPTED_SEND_AFTER",
    "PIGEONHOLE_INTERRUPTED_SEND_GIVE_UP",
];

impl Config {
    /// Reads the process environment, over the optional TOML file. The file may
    /// use the variable names or their short forms (`listen`, `database_url`, …).
    pub fn load(file: Option<&std::path::Path>) -> Result<Config, ConfigError> {
        let mut values: HashMap<String, String> = HashMap::new();
        if let Some(path) = file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| bad("--config", format!("cannot read {}: {e}", path.display())))?;
            values.extend(parse_toml(&text)?);
        }
        for var in VARS {
            if let Ok(v) = std::env::var(var) {
                values.insert((*var).to_string(), v);
            }
        }
        Config::from_map(&values)
    }

    /// Builds a configuration from `PIGEONHOLE_*` names to raw values; absent means default.
    pub fn from_map(values: &HashMap<String, String>) -> Result<Config, ConfigError> {
        let get = |k: &str| values.get(k).map(|s| s.trim().to_string());

        let listen_var = "PIGEONHOLE_LISTEN";
        let listen = parse_addr(
            listen_var,
            &get(listen_var).unwrap_or("127.0.0.1:8080".into()),
        )?;

        let database_url =
            get("PIGEONHOLE_DATABASE_URL").unwrap_or("sqlite://pigeonhole.db".into());
        if !(database_url.starts_with("sqlite:")
            || database_url.starts_with("postgres://")
            || database_url.starts_with("postgresql://"))
        {
            return Err(bad(
                "PIGEONHOLE_DATABASE_URL",
                format!("expected sqlite://PATH or postgres://…, got {database_url:?}"),
            ));
        }

        let env = match get("PIGEONHOLE_ENV").as_deref().unwrap_or("production") {
            "development" => Environment::Development,
            "production" => Environment::Production,
            other => {
                return Err(bad(
                    "PIGEONHOLE_ENV",
                    format!("expected development or production, got {other:?}"),
                ));
            }
        };

        let provider = match get("PIGEONHOLE_PROVIDER").as_deref().unwrap_or("simulator") {
            "simulator" => ProviderKind::Simulator,
            "ses" => ProviderKind::Ses,
            other => {
                return Err(bad(
                    "PIGEONHOLE_PROVIDER",
                    format!("expected simulator or ses, got {other:?}"),
                ));
            }
        };

        let smtp_var = "PIGEONHOLE_SMTP_LISTEN";
        let smtp_listen = match get(smtp_var) {
            None => Some(parse_addr(smtp_var, "127.0.0.1:2525")?),
            Some(s) if s.is_empty() => None,
            Some(s) => Some(parse_addr(smtp_var, &s)?),
        };

        let smtp_tls_cert = get("PIGEONHOLE_SMTP_TLS_CERT")
            .filter(|s| !s.is_empty())
            .map(std::path::PathBuf::from);
        let smtp_tls_key = get("PIGEONHOLE_SMTP_TLS_KEY")
            .filter(|s| !s.is_empty())
            .map(std::path::PathBuf::from);
        match (&smtp_tls_cert, &smtp_tls_key) {
            (Some(_), None) => {
                return Err(bad(
                    "PIGEONHOLE_SMTP_TLS_KEY",
                    "is required when PIGEONHOLE_SMTP_TLS_CERT is set",
                ));
            }
            (None, Some(_)) => {
                return Err(bad(
                    "PIGEONHOLE_SMTP_TLS_CERT",
                    "is required when PIGEONHOLE_SMTP_TLS_KEY is set",
                ));
            }
            _ => {}
        }

        let smtp_hostname = match get("PIGEONHOLE_SMTP_HOSTNAME").filter(|s| !s.is_empty()) {
            Some(name) => Some(parse_hostname("PIGEONHOLE_SMTP_HOSTNAME", &name)?),
            None => None,
        };
        let positive = |var: &str| -> Result<Option<usize>, ConfigError> {
            get(var)
                .filter(|s| !s.is_empty())
                .map(|s| {
                    s.parse::<usize>().ok().filter(|n| *n > 0).ok_or_else(|| {
                        bad(
                            var,
                            format!("expected a whole number above zero, got {s:?}"),
                        )
                    })
                })
                .transpose()
        };
        let smtp_max_connections = positive("PIGEONHOLE_SMTP_MAX_CONNECTIONS")?;
        let smtp_max_connections_per_ip = positive("PIGEONHOLE_SMTP_MAX_CONNECTIONS_PER_IP")?;
        let duration = |var: &str| -> Result<Option<Duration>, ConfigError> {
            get(var)
                .filter(|s| !s.is_empty())
                .map(|s| {
                    let d = parse_seconds(var, &s)?;
                    if d.is_zero() {
                        return Err(bad(var, "must be more than zero"));
                    }
                    Ok(d)
                })
                .transpose()
        };
        let smtp_idle_timeout = duration("PIGEONHOLE_SMTP_IDLE_TIMEOUT")?;
        let smtp_session_timeout = duration("PIGEONHOLE_SMTP_SESSION_TIMEOUT")?;
        let smtp_auth_timeout = duration("PIGEONHOLE_SMTP_AUTH_TIMEOUT")?;

        let public_url = match get("PIGEONHOLE_PUBLIC_URL") {
            Some(u) if !u.is_empty() => {
                let parsed = url::Url::parse(&u)
                    .map_err(|e| bad("PIGEONHOLE_PUBLIC_URL", format!("not a URL: {e}")))?;
                if !matches!(parsed.scheme(), "http" | "https") {
                    return Err(bad("PIGEONHOLE_PUBLIC_URL", "must be http or https"));
                }
                u.trim_end_matches('/').to_string()
            }
            _ => format!("http://{listen}"),
        };

        let open_tracking = parse_bool(
            "PIGEONHOLE_OPEN_TRACKING",
            get("PIGEONHOLE_OPEN_TRACKING").as_deref().unwrap_or("true"),
        )?;

        let simulator_outbox = get("PIGEONHOLE_SIMULATOR_OUTBOX")
            .filter(|s| !s.is_empty())
            .map(std::path::PathBuf::from);

        let dns_var = "PIGEONHOLE_DNS_SERVERS";
        let dns_servers = match get(dns_var) {
            Some(s) if !s.is_empty() => Some(
                s.split(',')
                    .map(|part| parse_addr(dns_var, part.trim()))
                    .collect::<Result<Vec<_>, _>>()?,
            ),
            _ => None,
        };

        let delays_var = "PIGEONHOLE_WEBHOOK_RETRY_DELAYS";
        let webhook_retry_delays = get(delays_var)
            .unwrap_or("0,2,10,30".into())
            .split(',')
            .map(|part| parse_seconds(delays_var, part.trim()))
            .collect::<Result<Vec<_>, _>>()?;
        if webhook_retry_delays.len() != 4 {
            return Err(bad(
                delays_var,
                "expected four comma-separated delays (attempts 1 to 4)",
            ));
        }

        let timeout_var = "PIGEONHOLE_WEBHOOK_TIMEOUT";
        let webhook_timeout =
            positive_seconds(timeout_var, &get(timeout_var).unwrap_or("10".into()))?;

        let rate_var = "PIGEONHOLE_RATE_LIMIT";
        let rate_limit: u32 = get(rate_var)
            .unwrap_or("300".into())
            .parse()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| {
                bad(
                    rate_var,
                    "expected a whole number of calls per minute above zero",
                )
            })?;

        let scope_var = "PIGEONHOLE_RATE_LIMIT_SCOPE";
        let rate_limit_per_process = match get(scope_var).as_deref() {
            None | Some("") | Some("deployment") => false,
            Some("process") => true,
            Some(_) => return Err(bad(scope_var, "expected deployment or process")),
        };

        let ses_region = get("PIGEONHOLE_SES_REGION").filter(|s| !s.is_empty());
        let ses_endpoint = get("PIGEONHOLE_SES_ENDPOINT").filter(|s| !s.is_empty());
        if let Some(e) = &ses_endpoint {
            url::Url::parse(e)
                .map_err(|err| bad("PIGEONHOLE_SES_ENDPOINT", format!("not a URL: {err}")))?;
        }

        let sns_topics: Vec<String> = get("PIGEONHOLE_SNS_TOPICS")
            .unwrap_or_default()
            .split(',')
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty())
            .collect();
        if let Some(arn) = sns_topics.iter().find(|t| !t.starts_with("arn:")) {
            return Err(bad(
                "PIGEONHOLE_SNS_TOPICS",
                format!("{arn:?} is not a topic ARN"),
            ));
        }

        let http = HttpSettings {
            header_timeout: positive_seconds(
                "PIGEONHOLE_HTTP_HEADER_TIMEOUT",
                &get("PIGEONHOLE_HTTP_HEADER_TIMEOUT").unwrap_or("10".into()),
            )?,
            body_timeout: positive_seconds(
                "PIGEONHOLE_HTTP_BODY_TIMEOUT",
                &get("PIGEONHOLE_HTTP_BODY_TIMEOUT").unwrap_or("120".into()),
            )?,
            idle_timeout: positive_seconds(
                "PIGEONHOLE_HTTP_IDLE_TIMEOUT",
                &get("PIGEONHOLE_HTTP_IDLE_TIMEOUT").unwrap_or("75".into()),
            )?,
            max_connections: match get("PIGEONHOLE_HTTP_MAX_CONNECTIONS").as_deref() {
                None | Some("") | Some("auto") => None,
                Some(s) => Some(parse_count(
                    "PIGEONHOLE_HTTP_MAX_CONNECTIONS",
                    s,
                    1..=10_000_000,
                )?),
            },
            max_connections_per_ip: parse_count(
                "PIGEONHOLE_HTTP_MAX_CONNECTIONS_PER_IP",
                &get("PIGEONHOLE_HTTP_MAX_CONNECTIONS_PER_IP").unwrap_or("128".into()),
                0..=10_000_000,
            )?,
            max_header_bytes: parse_count(
                "PIGEONHOLE_HTTP_MAX_HEADER_BYTES",
                &get("PIGEONHOLE_HTTP_MAX_HEADER_BYTES").unwrap_or("32768".into()),
                1024..=HTTP_MAX_HEADER_BYTES_CEILING,
            )?,
            max_uri_bytes: parse_count(
                "PIGEONHOLE_HTTP_MAX_URI_BYTES",
                &get("PIGEONHOLE_HTTP_MAX_URI_BYTES").unwrap_or("8192".into()),
                256..=HTTP_MAX_URI_BYTES_CEILING,
            )?,
        };
        let budget_var = "PIGEONHOLE_MESSAGE_MEMORY_BUDGET";
        let message_memory_budget = match get(budget_var) {
            Some(v) => parse_bytes(budget_var, &v)?,
            None => DEFAULT_MESSAGE_MEMORY_BUDGET,
        };
        if message_memory_budget == 0 {
            return Err(bad(budget_var, "must be more than zero"));
        }
        let wait_var = "PIGEONHOLE_MESSAGE_MEMORY_WAIT";
        let message_memory_wait = parse_seconds(wait_var, &get(wait_var).unwrap_or("10".into()))?;
        let defaults = crate::core::interrupted::Timings::default();
        let interrupted_sends = crate::core::interrupted::Timings {
            stale_after: duration("PIGEONHOLE_INTERRUPTED_SEND_AFTER")?
                .unwrap_or(defaults.stale_after),
            give_up_after: duration("PIGEONHOLE_INTERRUPTED_SEND_GIVE_UP")?
                .unwrap_or(defaults.give_up_after),
        };

        Ok(Config {
            listen,
            database_url,
            env,
            provider,
            smtp_listen,
            smtp_tls_cert,
            smtp_tls_key,
            smtp_hostname,
            smtp_max_connections,
            smtp_max_connections_per_ip,
            smtp_idle_timeout,
            smtp_session_timeout,
            smtp_auth_timeout,
            public_url,
            open_tracking,
            simulator_outbox,
            dns_servers,
            webhook_retry_delays,
            webhook_timeout,
            rate_limit,
            rate_limit_per_process,
            ses_region,
            ses_endpoint,
            sns_topics,
            http,
            message_memory_budget,
            message_memory_wait,
            interrupted_sends,
        })
    }
}

/// A size in bytes: a whole number, optionally with `K`, `M` or `G`
/// (binary multiples; `KiB`, `MB` and the like are read the same).
fn parse_bytes(var: &str, s: &str) -> Result<usize, ConfigError> {
    let lower = s.trim().to_ascii_lowercase();
    let number = lower.trim_end_matches(['b', 'i']);
    let (digits, unit) = match number.char_indices().last() {
        Some((i, 'k')) => (&number[..i], 1usize << 10),
        Some((i, 'm')) => (&number[..i], 1 << 20),
        Some((i, 'g')) => (&number[..i], 1 << 30),
        _ => (number, 1),
    };
    digits
        .trim()
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
        .ok_or_else(|| {
            bad(
                var,
                format!("expected a size in bytes, or with K, M or G (512M), got {s:?}"),
            )
        })
}

fn parse_addr(var: &str, s: &str) -> Result<SocketAddr, ConfigError> {
    s.parse()
        .map_err(|_| bad(var, format!("expected ip:port, got {s:?}")))
}

/// A host name as SMTP announces it (greeting, `Received`, the authserv-id of
/// `Authentication-Results`): letters, digits, `-` and `.`, at most 253.
fn parse_hostname(var: &str, s: &str) -> Result<String, ConfigError> {
    let ok = s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        });
    if ok {
        Ok(s.to_ascii_lowercase())
    } else {
        Err(bad(var, format!("expected a host name, got {s:?}")))
    }
}

fn parse_bool(var: &str, s: &str) -> Result<bool, ConfigError> {
    match s.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => Err(bad(var, format!("expected true or false, got {s:?}"))),
    }
}

fn parse_seconds(var: &str, s: &str) -> Result<Duration, ConfigError> {
    s.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0 && *v <= 86_400.0)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| {
            bad(
                var,
                format!("expected seconds (0 to 86400, decimals allowed), got {s:?}"),
            )
        })
}

fn positive_seconds(var: &str, s: &str) -> Result<Duration, ConfigError> {
    let d = parse_seconds(var, s)?;
    if d.is_zero() {
        return Err(bad(var, "must be more than zero"));
    }
    Ok(d)
}

fn parse_count(
    var: &str,
    s: &str,
    range: std::ops::RangeInclusive<usize>,
) -> Result<usize, ConfigError> {
    s.parse::<usize>()
        .ok()
        .filter(|n| range.contains(n))
        .ok_or_else(|| {
            bad(
                var,
                format!(
                    "expected a whole number from {} to {}, got {s:?}",
                    range.start(),
                    range.end()
                ),
            )
        })
}

/// Accepts `PIGEONHOLE_LISTEN = "…"` or `listen = "…"`; numbers and booleans
/// are taken as their text.
fn parse_toml(text: &str) -> Result<HashMap<String, String>, ConfigError> {
    let table: toml::Table = text
        .parse()
        .map_err(|e| bad("--config", format!("invalid TOML: {e}")))?;
    let mut out = HashMap::new();
    for (key, value) in table {
        let var = if key.starts_with("PIGEONHOLE_") {
            key.clone()
        } else {
            format!("PIGEONHOLE_{}", key.to_ascii_uppercase())
        };
        if !VARS.contains(&var.as_str()) {
            return Err(bad("--config", format!("unknown setting {key:?}")));
        }
        let s = match value {
            toml::Value::String(s) => s,
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Float(f) => f.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            toml::Value::Array(items) => items
                .iter()
                .map(|v| match v {
                    toml::Value::String(s) => Ok(s.clone()),
                    toml::Value::Integer(i) => Ok(i.to_string()),
                    toml::Value::Float(f) => Ok(f.to_string()),
                    _ => Err(bad("--config", format!("{key}: unsupported list item"))),
                })
                .collect::<Result<Vec<_>, _>>()?
                .join(","),
            _ => return Err(bad("--config", format!("{key}: unsupported value"))),
        };
        out.insert(var, s);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn defaults_match_the_contract() {
        let c = Config::from_map(&HashMap::new()).unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(c.database_url, "sqlite://pigeonhole.db");
        assert_eq!(c.env, Environment::Production);
        assert_eq!(c.provider, ProviderKind::Simulator);
        assert_eq!(c.smtp_listen.unwrap().to_string(), "127.0.0.1:2525");
        assert_eq!(c.public_url, "http://127.0.0.1:8080");
        assert!(c.open_tracking);
        assert_eq!(c.webhook_retry_delays.len(), 4);
        assert_eq!(c.webhook_retry_delays[3], Duration::from_secs(30));
        assert_eq!(c.webhook_timeout, Duration::from_secs(10));
        assert_eq!(c.rate_limit, 300);
        assert!(!c.rate_limit_per_process);
        assert_eq!(c.http.header_timeout, Duration::from_secs(10));
        assert_eq!(c.http.idle_timeout, Duration::from_secs(75));
        assert_eq!(c.http.body_timeout, Duration::from_secs(120));
        assert_eq!(c.http.max_connections, None);
        assert_eq!(c.http.max_connections_per_ip, 128);
        assert_eq!(c.http.max_header_bytes, 32768);
        assert_eq!(c.http.max_uri_bytes, 8192);
        assert_eq!(c.message_memory_budget, 512 * 1024 * 1024);
        assert_eq!(c.message_memory_wait, Duration::from_secs(10));
    }

    #[test]
    fn sizes_take_binary_suffixes() {
        let var = "PIGEONHOLE_MESSAGE_MEMORY_BUDGET";
        for (raw, bytes) in [
            ("1048576", 1 << 20),
            ("64k", 64 << 10),
            ("512M", 512 << 20),
            ("512MiB", 512 << 20),
            ("2 GB", 2 << 30),
        ] {
            let c = Config::from_map(&map(&[(var, raw)])).unwrap();
            assert_eq!(c.message_memory_budget, bytes, "{raw}");
        }
        for raw in ["", "lots", "-1", "0", "12T", "M"] {
            let err = Config::from_map(&map(&[(var, raw)])).unwrap_err();
            assert_eq!(err.var, var, "{raw}");
        }
    }

    #[test]
    fn bad_values_name_the_variable() {
        for (var, value) in [
            ("PIGEONHOLE_LISTEN", "nowhere"),
            ("PIGEONHOLE_DATABASE_URL", "mysql://x"),
            ("PIGEONHOLE_ENV", "staging"),
            ("PIGEONHOLE_PROVIDER", "sendgrid"),
            ("PIGEONHOLE_OPEN_TRACKING", "maybe"),
            ("PIGEONHOLE_WEBHOOK_RETRY_DELAYS", "0,1"),
            ("PIGEONHOLE_WEBHOOK_RETRY_DELAYS", "0,a,1,2"),
            ("PIGEONHOLE_WEBHOOK_TIMEOUT", "-1"),
            ("PIGEONHOLE_RATE_LIMIT", "0"),
            ("PIGEONHOLE_RATE_LIMIT_SCOPE", "cluster"),
            ("PIGEONHOLE_DNS_SERVERS", "1.1.1.1"),
            ("PIGEONHOLE_PUBLIC_URL", "ftp://x"),
            ("PIGEONHOLE_HTTP_HEADER_TIMEOUT", "0"),
            ("PIGEONHOLE_HTTP_IDLE_TIMEOUT", "soon"),
            ("PIGEONHOLE_HTTP_BODY_TIMEOUT", "0"),
            ("PIGEONHOLE_HTTP_MAX_CONNECTIONS", "0"),
            ("PIGEONHOLE_HTTP_MAX_CONNECTIONS_PER_IP", "-1"),
            ("PIGEONHOLE_HTTP_MAX_HEADER_BYTES", "1000000"),
            ("PIGEONHOLE_HTTP_MAX_URI_BYTES", "65535"),
            ("PIGEONHOLE_SMTP_HOSTNAME", "mx.example.com;evil"),
            ("PIGEONHOLE_SMTP_HOSTNAME", "a..b"),
            ("PIGEONHOLE_SMTP_MAX_CONNECTIONS", "0"),
            ("PIGEONHOLE_SMTP_MAX_CONNECTIONS_PER_IP", "-3"),
            ("PIGEONHOLE_SMTP_IDLE_TIMEOUT", "0"),
            ("PIGEONHOLE_SMTP_SESSION_TIMEOUT", "soon"),
            ("PIGEONHOLE_SMTP_AUTH_TIMEOUT", "100000"),
        ] {
            let err = Config::from_map(&map(&[(var, value)])).unwrap_err();
            assert_eq!(err.var, var, "{value}");
            assert!(err.to_string().starts_with(var));
        }
    }

    #[test]
    fn empty_smtp_listen_disables_it_and_decimals_are_allowed() {
        let c = Config::from_map(&map(&[
            ("PIGEONHOLE_SMTP_LISTEN", ""),
            ("PIGEONHOLE_WEBHOOK_RETRY_DELAYS", "0,0.05,0.1,0.2"),
            ("PIGEONHOLE_DNS_SERVERS", "127.0.0.1:53,[::1]:5353"),
        ]))
        .unwrap();
        assert!(c.smtp_listen.is_none());
        assert_eq!(c.webhook_retry_delays[1], Duration::from_millis(50));
        assert_eq!(c.dns_servers.unwrap().len(), 2);
    }

    #[test]
    fn http_limits_are_read() {
        let c = Config::from_map(&map(&[
            ("PIGEONHOLE_HTTP_HEADER_TIMEOUT", "0.3"),
            ("PIGEONHOLE_HTTP_IDLE_TIMEOUT", "2"),
            ("PIGEONHOLE_HTTP_MAX_CONNECTIONS", "50"),
            ("PIGEONHOLE_HTTP_MAX_CONNECTIONS_PER_IP", "0"),
        ]))
        .unwrap();
        assert_eq!(c.http.header_timeout, Duration::from_millis(300));
        assert_eq!(c.http.idle_timeout, Duration::from_secs(2));
        assert_eq!(c.http.max_connections, Some(50));
        assert_eq!(c.http.max_connections_per_ip, 0);
        let auto = Config::from_map(&map(&[("PIGEONHOLE_HTTP_MAX_CONNECTIONS", "auto")]));
        assert_eq!(auto.unwrap().http.max_connections, None);
    }

    #[test]
    fn interrupted_send_timings_are_read_from_the_environment_or_a_file() {
        let defaults = Config::from_map(&HashMap::new()).unwrap().interrupted_sends;
        assert_eq!(defaults.stale_after, Duration::from_secs(300));
        assert_eq!(defaults.give_up_after, Duration::from_secs(900));
        let c = Config::from_map(&map(&[
            ("PIGEONHOLE_INTERRUPTED_SEND_AFTER", "3"),
            ("PIGEONHOLE_INTERRUPTED_SEND_GIVE_UP", "0.5"),
        ]))
        .unwrap();
        assert_eq!(c.interrupted_sends.stale_after, Duration::from_secs(3));
        assert_eq!(
            c.interrupted_sends.give_up_after,
            Duration::from_millis(500)
        );
        // Both are names `Config::load` reads.
        assert!(VARS.contains(&"PIGEONHOLE_INTERRUPTED_SEND_AFTER"));
        assert!(VARS.contains(&"PIGEONHOLE_INTERRUPTED_SEND_GIVE_UP"));
        assert!(Config::from_map(&map(&[("PIGEONHOLE_INTERRUPTED_SEND_AFTER", "0")])).is_err());
    }

    #[test]
    fn smtp_limits_are_optional_and_parsed() {
        let c = Config::from_map(&HashMap::new()).unwrap();
        assert!(c.smtp_hostname.is_none() && c.smtp_max_connections_per_ip.is_none());
        assert!(c.smtp_session_timeout.is_none() && c.smtp_auth_timeout.is_none());
        let c = Config::from_map(&map(&[
            ("PIGEONHOLE_SMTP_HOSTNAME", "MX1.Example.com"),
            ("PIGEONHOLE_SMTP_MAX_CONNECTIONS", "100"),
            ("PIGEONHOLE_SMTP_MAX_CONNECTIONS_PER_IP", "4"),
            ("PIGEONHOLE_SMTP_IDLE_TIMEOUT", "30"),
            ("PIGEONHOLE_SMTP_SESSION_TIMEOUT", "120.5"),
            ("PIGEONHOLE_SMTP_AUTH_TIMEOUT", "0.5"),
        ]))
        .unwrap();
        assert_eq!(c.smtp_hostname.as_deref(), Some("mx1.example.com"));
        assert_eq!(c.smtp_max_connections, Some(100));
        assert_eq!(c.smtp_max_connections_per_ip, Some(4));
        assert_eq!(c.smtp_idle_timeout, Some(Duration::from_secs(30)));
        assert_eq!(c.smtp_session_timeout, Some(Duration::from_millis(120_500)));
        assert_eq!(c.smtp_auth_timeout, Some(Duration::from_millis(500)));
    }

    #[test]
    fn toml_file_keys_are_accepted() {
        let m = parse_toml("listen = \"0.0.0.0:9000\"\nrate_limit = 5\n").unwrap();
        let c = Config::from_map(&m).unwrap();
        assert_eq!(c.listen.port(), 9000);
        assert_eq!(c.rate_limit, 5);
        assert!(parse_toml("bogus = 1").is_err());
    }
}
