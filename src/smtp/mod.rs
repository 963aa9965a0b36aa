//! The inbound SMTP listener: ESMTP with PIPELINING, 8BITMIME, SMTPUTF8, SIZE
//! and (when a certificate is configured) STARTTLS. Recipients are checked at
//! RCPT time; an accepted message gets an `Authentication-Results` field with
//! its SPF, DKIM and DMARC results ([`crate::core::inbound_auth`]) and goes
//! through [`crate::core::inbound::ingest`]; the 250 after DATA is sent only
//! once that transaction has committed. A "." line next to a bare LF does not
//! end DATA, and the message is refused (SMTP smuggling).
//!
//! The protocol state machine ([`protocol`]) has no I/O; [`run`] owns the
//! sockets, timeouts and limits that keep slow or hostile clients from
//! exhausting the server.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

mod per_client;
pub mod protocol;
mod server;
mod sessions;

pub use server::run;

use crate::config::DEFAULT_MESSAGE_MEMORY_BUDGET;
use crate::core::memory::MemoryBudget;

/// The SIZE advertised and enforced: 30 MiB, like the HTTP body limit.
pub const MAX_MESSAGE_SIZE: usize = 31_457_280;

/// Listener settings. `Default` holds the production values; tests shorten
/// the timeout or lower the limits.
#[derive(Clone)]
pub struct SmtpConfig {
    /// Name in the greeting, the EHLO reply and the Received header.
    pub hostname: String,
    pub max_message_size: usize,
    pub max_recipients: usize,
    /// Longest line accepted, commands and message text alike. RFC 5321 says
    /// 1000 octets; real mail breaks that, so up to this many are taken.
    pub max_line_length: usize,
    /// A client that sends nothing for this long is told 421 and dropped.
    pub idle_timeout: Duration,
    /// Sessions served at once. Beyond, a newcomer evicts the session with
    /// the least progress that has waited longest and is not receiving DATA
    /// (told 421 4.3.2); only when all are in DATA is the newcomer refused.
    pub max_connections: usize,
    /// Connections one client may hold at once (an IPv4 address, or an IPv6
    /// /64, which one host usually has whole); more get 421 4.7.0.
    pub max_connections_per_ip: usize,
    /// A session is told 421 4.4.2 and closed this long after it connected,
    /// however busy it is (a message being stored finishes first).
    pub session_timeout: Duration,
    /// Time the sender checks of one message (the DNS lookups of SPF, DKIM
    /// and DMARC, made together) may take; what is not done by then is
    /// `temperror`.
    pub auth_timeout: Duration,
    /// Hard (5xx) errors after which the session is closed.
    pub max_errors: usize,
    /// Memory for messages being received and stored, shared with large
    /// HTTP requests: a message reserves what processing it costs (see
    /// `core::memory`), at MAIL when it declares its SIZE, else as it
    /// arrives; one that finds too little left gets 452 4.3.1 (try later).
    pub memory: MemoryBudget,
    /// Offered as STARTTLS when set.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Where sessions and messages are counted: the application's, so that
    /// its `/metrics` shows them.
    pub metrics: crate::telemetry::Telemetry,
}

impl Default for SmtpConfig {
    fn default() -> Self {
        SmtpConfig {
            hostname: local_hostname(),
            max_message_size: MAX_MESSAGE_SIZE,
            max_recipients: 100,
            max_line_length: 64 * 1024,
            idle_timeout: Duration::from_secs(60),
            max_connections: 256,
            max_connections_per_ip: 20,
            session_timeout: Duration::from_secs(600),
            auth_timeout: Duration::from_secs(3),
            max_errors: 20,
            memory: MemoryBudget::new(DEFAULT_MESSAGE_MEMORY_BUDGET),
            tls: None,
            metrics: crate::telemetry::Telemetry::new(),
        }
    }
}

impl std::fmt::Debug for SmtpConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SmtpConfig")
            .field("hostname", &self.hostname)
            .field("max_message_size", &self.max_message_size)
            .field("max_recipients", &self.max_recipients)
            .field("max_line_length", &self.max_line_length)
            .field("idle_timeout", &self.idle_timeout)
            .field("max_connections", &self.max_connections)
            .field("max_connections_per_ip", &self.max_connections_per_ip)
            .field("session_timeout", &self.session_timeout)
            .field("auth_timeout", &self.auth_timeout)
            .field("max_errors", &self.max_errors)
            .field("memory", &self.memory)
            .field("starttls", &self.tls.is_some())
            .finish()
    }
}

impl SmtpConfig {
    /// The production settings for `config`, loading the STARTTLS certificate
    /// when one is configured. The error is one line naming the variable.
    pub fn from_config(config: &crate::config::Config) -> Result<SmtpConfig, String> {
        let mut c = SmtpConfig {
            memory: MemoryBudget::new(config.message_memory_budget),
            ..SmtpConfig::default()
        };
        if let Some(name) = &config.smtp_hostname {
            c.hostname = name.clone();
        }
        if let Some(n) = config.smtp_max_connections {
            c.max_connections = n;
        }
        if let Some(n) = config.smtp_max_connections_per_ip {
            c.max_connections_per_ip = n;
        }
        if let Some(d) = config.smtp_idle_timeout {
            c.idle_timeout = d;
        }
        if let Some(d) = config.smtp_session_timeout {
            c.session_timeout = d;
        }
        if let Some(d) = config.smtp_auth_timeout {
            c.auth_timeout = d;
        }
        if let (Some(cert), Some(key)) = (&config.smtp_tls_cert, &config.smtp_tls_key) {
            c.tls = Some(load_tls(cert, key)?);
        }
        Ok(c)
    }

    pub(crate) fn limits(&self) -> protocol::Limits {
        protocol::Limits {
            hostname: self.hostname.clone(),
            max_message_size: self.max_message_size,
            max_recipients: self.max_recipients,
            tls_available: self.tls.is_some(),
        }
    }
}

/// A rustls server configuration from a PEM certificate chain and key.
pub fn load_tls(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| {
            format!(
                "PIGEONHOLE_SMTP_TLS_CERT: cannot read a PEM certificate from {}: {e}",
                cert.display()
            )
        })?;
    if chain.is_empty() {
        return Err(format!(
            "PIGEONHOLE_SMTP_TLS_CERT: no certificate in {}",
            cert.display()
        ));
    }
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| {
        format!(
            "PIGEONHOLE_SMTP_TLS_KEY: cannot read a PEM private key from {}: {e}",
            key.display()
        )
    })?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("PIGEONHOLE_SMTP_TLS_CERT: {e}"))?
        .with_no_client_auth()
        .with_single_cert(chain, key_der)
        .map_err(|e| format!("PIGEONHOLE_SMTP_TLS_KEY: does not fit the certificate: {e}"))?;
    Ok(Arc::new(config))
}

/// This machine's name for the greeting, or `localhost`.
fn local_hostname() -> String {
    let raw = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .unwrap_or_default();
    let name: String = raw
        .trim()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '.')
        .take(253)
        .collect();
    if name.is_empty() {
        "localhost".into()
    } else {
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_reach_the_listener() {
        let values = [
            ("PIGEONHOLE_SMTP_HOSTNAME", "mx.example.test"),
            ("PIGEONHOLE_SMTP_MAX_CONNECTIONS", "40"),
            ("PIGEONHOLE_SMTP_MAX_CONNECTIONS_PER_IP", "3"),
            ("PIGEONHOLE_SMTP_IDLE_TIMEOUT", "15"),
            ("PIGEONHOLE_SMTP_SESSION_TIMEOUT", "90"),
            ("PIGEONHOLE_SMTP_AUTH_TIMEOUT", "1.5"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let config = crate::config::Config::from_map(&values).unwrap();
        let c = SmtpConfig::from_config(&config).unwrap();
        assert_eq!(c.hostname, "mx.example.test");
        assert_eq!((c.max_connections, c.max_connections_per_ip), (40, 3));
        assert_eq!(c.idle_timeout, Duration::from_secs(15));
        assert_eq!(c.session_timeout, Duration::from_secs(90));
        assert_eq!(c.auth_timeout, Duration::from_millis(1500));

        let unset = crate::config::Config::from_map(&Default::default()).unwrap();
        let d = SmtpConfig::from_config(&unset).unwrap();
        let default = SmtpConfig::default();
        assert_eq!(d.max_connections_per_ip, default.max_connections_per_ip);
        assert_eq!(d.session_timeout, default.session_timeout);
    }
}
