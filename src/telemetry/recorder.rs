//! The application's metrics: recorded through the `metrics` facade into a
//! Prometheus recorder that belongs to one application (not the process),
//! rendered by `metrics-exporter-prometheus` at `/metrics`.
//!
//! Why per application: the tests run many applications in one process, and
//! each one's `/metrics` must count only what it did. A process-wide
//! recorder would add them all up. So code records through the
//! [`Telemetry`] it was given (`metrics::counter!` inside
//! [`Telemetry::record`]), never through the global recorder, which is
//! never installed.
//!
//! Every label comes from a fixed set (the enums below, route templates,
//! status codes), so nothing a client sends can add series.

use std::sync::Arc;
use std::time::Duration;

use metrics::{
    Counter, Gauge, Unit, counter, describe_counter, describe_gauge, describe_histogram, gauge,
    histogram,
};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle, PrometheusRecorder};

/// Histogram buckets, in seconds, of every latency.
const BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

/// How often histogram samples are folded into their buckets when nobody
/// scrapes: until then each sample is kept (see [`Telemetry::upkeep_every`]).
pub const UPKEEP: Duration = Duration::from_secs(5);

/// A send's status once the provider answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendStatus {
    Sent,
    Rejected,
    Failed,
}

impl SendStatus {
    const ALL: [SendStatus; 3] = [SendStatus::Sent, SendStatus::Rejected, SendStatus::Failed];

    fn label(self) -> &'static str {
        match self {
            SendStatus::Sent => "sent",
            SendStatus::Rejected => "rejected",
            SendStatus::Failed => "failed",
        }
    }
}

/// Why the provider did not take a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderErrorKind {
    Rejected,
    NotFound,
    Throttled,
    Unavailable,
    /// The message could not be built, so the provider was not called.
    Compose,
}

impl ProviderErrorKind {
    const ALL: [ProviderErrorKind; 5] = [
        ProviderErrorKind::Rejected,
        ProviderErrorKind::NotFound,
        ProviderErrorKind::Throttled,
        ProviderErrorKind::Unavailable,
        ProviderErrorKind::Compose,
    ];

    fn label(self) -> &'static str {
        match self {
            ProviderErrorKind::Rejected => "rejected",
            ProviderErrorKind::NotFound => "not_found",
            ProviderErrorKind::Throttled => "throttled",
            ProviderErrorKind::Unavailable => "unavailable",
            ProviderErrorKind::Compose => "compose",
        }
    }
}

/// How one webhook attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptOutcome {
    Success,
    /// A reply outside 2xx, by class.
    Status3xx,
    Status4xx,
    Status5xx,
    StatusOther,
    /// No reply within the attempt's timeout.
    Timeout,
    /// The URL or its addresses were refused by the SSRF guard.
    Refused,
    /// The host could not be resolved.
    Dns,
    /// No connection, or it broke before a reply.
    Connect,
    /// Anything else (a stored secret that does not parse...).
    Error,
}

impl AttemptOutcome {
    const ALL: [AttemptOutcome; 10] = [
        AttemptOutcome::Success,
        AttemptOutcome::Status3xx,
        AttemptOutcome::Status4xx,
        AttemptOutcome::Status5xx,
        AttemptOutcome::StatusOther,
        AttemptOutcome::Timeout,
        AttemptOutcome::Refused,
        AttemptOutcome::Dns,
        AttemptOutcome::Connect,
        AttemptOutcome::Error,
    ];

    /// The outcome of an attempt that got a reply with `status`.
    pub fn of_status(status: u16) -> AttemptOutcome {
        match status {
            200..=299 => AttemptOutcome::Success,
            300..=399 => AttemptOutcome::Status3xx,
            400..=499 => AttemptOutcome::Status4xx,
            500..=599 => AttemptOutcome::Status5xx,
            _ => AttemptOutcome::StatusOther,
        }
    }

    fn label(self) -> &'static str {
        match self {
            AttemptOutcome::Success => "success",
            AttemptOutcome::Status3xx => "status_3xx",
            AttemptOutcome::Status4xx => "status_4xx",
            AttemptOutcome::Status5xx => "status_5xx",
            AttemptOutcome::StatusOther => "status_other",
            AttemptOutcome::Timeout => "timeout",
            AttemptOutcome::Refused => "refused",
            AttemptOutcome::Dns => "dns",
            AttemptOutcome::Connect => "connect",
            AttemptOutcome::Error => "error",
        }
    }
}

/// The class of an SMTP reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyClass {
    Positive,
    Transient,
    Permanent,
}

impl ReplyClass {
    const ALL: [ReplyClass; 3] = [
        ReplyClass::Positive,
        ReplyClass::Transient,
        ReplyClass::Permanent,
    ];

    /// 2xx and 3xx are positive, 4xx transient, the rest permanent.
    pub fn of(code: u16) -> ReplyClass {
        match code {
            200..=399 => ReplyClass::Positive,
            400..=499 => ReplyClass::Transient,
            _ => ReplyClass::Permanent,
        }
    }

    fn label(self) -> &'static str {
        match self {
            ReplyClass::Positive => "2xx",
            ReplyClass::Transient => "4xx",
            ReplyClass::Permanent => "5xx",
        }
    }
}

/// A limit that refused a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limiter {
    /// The per-key rate limit (429).
    Key,
    /// The per-address limit of calls without a key (429).
    Address,
    /// The memory budget of large messages (503).
    Memory,
    /// The provider's sending quota, as the service knows it (429).
    SendQuota,
}

impl Limiter {
    const ALL: [Limiter; 4] = [
        Limiter::Key,
        Limiter::Address,
        Limiter::Memory,
        Limiter::SendQuota,
    ];

    fn label(self) -> &'static str {
        match self {
            Limiter::Key => "key",
            Limiter::Address => "address",
            Limiter::Memory => "memory",
            Limiter::SendQuota => "send_quota",
        }
    }
}

struct Inner {
    recorder: PrometheusRecorder,
    handle: PrometheusHandle,
}

/// One application's metrics. Cheap to clone; clones share the series.
#[derive(Clone)]
pub struct Telemetry {
    inner: Arc<Inner>,
}

impl Default for Telemetry {
    fn default() -> Telemetry {
        Telemetry::new()
    }
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Telemetry")
    }
}

impl Telemetry {
    /// A recorder of its own, every metric described and every series of
    /// a fixed label set present from the start (at zero), so that a rate
    /// over it is defined before the first event.
    pub fn new() -> Telemetry {
        let builder = PrometheusBuilder::new();
        // Only an empty list fails; without buckets latencies would be summaries.
        let builder = match builder.set_buckets(&BUCKETS) {
            Ok(b) => b,
            Err(_) => PrometheusBuilder::new(),
        };
        let recorder = builder.build_recorder();
        let handle = recorder.handle();
        let t = Telemetry {
            inner: Arc::new(Inner { recorder, handle }),
        };
        t.record(describe_all);
        t.record(|| {
            for s in SendStatus::ALL {
                counter!("pigeonhole_sends_total", "status" => s.label()).absolute(0);
            }
            for k in ProviderErrorKind::ALL {
                counter!("pigeonhole_send_provider_errors_total", "kind" => k.label()).absolute(0);
            }
            for o in AttemptOutcome::ALL {
                counter!("pigeonhole_webhook_attempts_total", "outcome" => o.label()).absolute(0);
            }
            for c in ReplyClass::ALL {
                counter!("pigeonhole_smtp_sessions_total", "class" => c.label()).absolute(0);
                counter!("pigeonhole_smtp_messages_total", "class" => c.label()).absolute(0);
            }
            for l in Limiter::ALL {
                counter!("pigeonhole_rate_limit_refusals_total", "limiter" => l.label())
                    .absolute(0);
            }
            counter!("pigeonhole_sends_interrupted_recovered_total").absolute(0);
        });
        t
    }

    /// Runs `f` with this application's recorder as the one the `metrics`
    /// macros use.
    pub fn record<T>(&self, f: impl FnOnce() -> T) -> T {
        metrics::with_local_recorder(&self.inner.recorder, f)
    }

    /// The Prometheus text of every series.
    pub fn render(&self) -> String {
        self.inner.handle.render()
    }

    /// Folds histogram samples into their buckets every [`UPKEEP`] for as
    /// long as the application lives, so that samples do not pile up
    /// between scrapes (or without any).
    pub fn upkeep_every(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let weak = Arc::downgrade(&self.inner);
        async move {
            let mut tick = tokio::time::interval(UPKEEP);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                match weak.upgrade() {
                    Some(inner) => inner.handle.run_upkeep(),
                    None => return,
                }
            }
        }
    }

    /// One HTTP request: counted and timed by method, route template (or
    /// `unmatched`) and status.
    pub fn http_request(&self, method: &'static str, route: &str, status: u16, seconds: f64) {
        let (route, status) = (route.to_string(), status.to_string());
        self.record(|| {
            counter!("pigeonhole_http_requests_total", "method" => method, "route" => route.clone(), "status" => status.clone())
                .increment(1);
            histogram!("pigeonhole_http_request_duration_seconds", "method" => method, "route" => route, "status" => status)
                .record(seconds);
        });
    }

    /// A send the provider answered (or that could not be built), by the
    /// status it is recorded with.
    pub fn send_finished(&self, status: SendStatus) {
        self.record(|| counter!("pigeonhole_sends_total", "status" => status.label()).increment(1));
    }

    pub fn provider_error(&self, kind: ProviderErrorKind) {
        self.record(|| {
            counter!("pigeonhole_send_provider_errors_total", "kind" => kind.label()).increment(1)
        });
    }

    /// How long the provider took to answer a send (`ok` or `error`).
    pub fn provider_call(&self, ok: bool, elapsed: Duration) {
        let outcome = if ok { "ok" } else { "error" };
        self.record(|| {
            histogram!("pigeonhole_provider_send_duration_seconds", "outcome" => outcome)
                .record(elapsed.as_secs_f64())
        });
    }

    pub fn webhook_attempt(&self, outcome: AttemptOutcome) {
        self.record(|| {
            counter!("pigeonhole_webhook_attempts_total", "outcome" => outcome.label()).increment(1)
        });
    }

    /// An SMTP connection, by the class of its first reply (220, or 421
    /// when turned away).
    pub fn smtp_session(&self, class: ReplyClass) {
        self.record(|| {
            counter!("pigeonhole_smtp_sessions_total", "class" => class.label()).increment(1)
        });
    }

    /// A message an SMTP client sent (DATA), by the class of its reply.
    pub fn smtp_message(&self, class: ReplyClass) {
        self.record(|| {
            counter!("pigeonhole_smtp_messages_total", "class" => class.label()).increment(1)
        });
    }

    pub fn refused(&self, limiter: Limiter) {
        self.record(|| {
            counter!("pigeonhole_rate_limit_refusals_total", "limiter" => limiter.label())
                .increment(1)
        });
    }

    /// Sends found interrupted (the process died during the provider call)
    /// and settled since.
    pub fn sends_interrupted_recovered(&self, n: u64) {
        self.record(|| counter!("pigeonhole_sends_interrupted_recovered_total").increment(n));
    }

    /// A gauge read from the database at scrape time.
    pub fn set(&self, name: &'static str, value: f64) {
        self.record(|| gauge!(name).set(value));
    }

    /// The handles the HTTP server counts its connections with.
    pub fn connection_handles(&self) -> (Gauge, [Counter; 5]) {
        self.record(|| {
            let closed = |reason: &'static str| {
                counter!("pigeonhole_http_connections_closed_total", "reason" => reason)
            };
            let open = gauge!("pigeonhole_http_connections_open");
            open.set(0.0);
            let counters = [
                closed("header_timeout"),
                closed("idle_timeout"),
                closed("evicted"),
                closed("per_ip_cap"),
                closed("global_cap"),
            ];
            for c in &counters {
                c.absolute(0);
            }
            (open, counters)
        })
    }
}

fn describe_all() {
    describe_counter!(
        "pigeonhole_http_requests_total",
        "HTTP requests by route and status."
    );
    describe_histogram!(
        "pigeonhole_http_request_duration_seconds",
        Unit::Seconds,
        "HTTP request latency."
    );
    describe_gauge!("pigeonhole_http_connections_open", "Open HTTP connections.");
    describe_counter!(
        "pigeonhole_http_connections_closed_total",
        "HTTP connections closed or refused by the connection limits."
    );
    describe_counter!(
        "pigeonhole_sends_total",
        "Sends by the status they were recorded with once the provider answered."
    );
    describe_counter!(
        "pigeonhole_send_provider_errors_total",
        "Sends the provider did not take, by kind of error."
    );
    describe_histogram!(
        "pigeonhole_provider_send_duration_seconds",
        Unit::Seconds,
        "How long the provider took to answer a send."
    );
    describe_counter!(
        "pigeonhole_sends_interrupted_recovered_total",
        "Sends interrupted during the provider call (the process died) and settled since."
    );
    describe_counter!(
        "pigeonhole_webhook_attempts_total",
        "Webhook delivery attempts by outcome."
    );
    describe_gauge!(
        "pigeonhole_webhook_queue_depth",
        "Webhook deliveries waiting in the queue (due, retrying or in flight), counted up to 100000."
    );
    describe_gauge!(
        "pigeonhole_webhook_oldest_due_seconds",
        Unit::Seconds,
        "Age of the oldest webhook attempt that is due and not started (0 when none)."
    );
    describe_gauge!(
        "pigeonhole_webhook_endpoints_disabled",
        "Webhook endpoints disabled (by their owner or after repeated failures)."
    );
    describe_counter!(
        "pigeonhole_smtp_sessions_total",
        "SMTP connections by the class of their first reply (220 served, 421 turned away)."
    );
    describe_counter!(
        "pigeonhole_smtp_messages_total",
        "Messages SMTP clients sent, by the class of the reply to their DATA."
    );
    describe_counter!(
        "pigeonhole_rate_limit_refusals_total",
        "Calls refused by a limit, by limiter."
    );
    describe_gauge!(
        "pigeonhole_provider_events_waiting",
        "Provider events stored and not applied yet (planned outcomes not due, or no message yet)."
    );
    describe_gauge!(
        "pigeonhole_provider_events_unmatched",
        "Provider events waiting for a message that is not recorded (dropped after 7 days)."
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_applications_count_apart() {
        let (a, b) = (Telemetry::new(), Telemetry::new());
        a.send_finished(SendStatus::Sent);
        a.send_finished(SendStatus::Sent);
        b.send_finished(SendStatus::Sent);
        assert!(
            a.render()
                .contains("pigeonhole_sends_total{status=\"sent\"} 2")
        );
        assert!(
            b.render()
                .contains("pigeonhole_sends_total{status=\"sent\"} 1")
        );
    }

    #[test]
    fn reply_classes_and_attempt_outcomes_follow_the_code() {
        assert_eq!(ReplyClass::of(250), ReplyClass::Positive);
        assert_eq!(ReplyClass::of(354), ReplyClass::Positive);
        assert_eq!(ReplyClass::of(451), ReplyClass::Transient);
        assert_eq!(ReplyClass::of(554), ReplyClass::Permanent);
        assert_eq!(AttemptOutcome::of_status(204), AttemptOutcome::Success);
        assert_eq!(AttemptOutcome::of_status(302), AttemptOutcome::Status3xx);
        assert_eq!(AttemptOutcome::of_status(410), AttemptOutcome::Status4xx);
        assert_eq!(AttemptOutcome::of_status(503), AttemptOutcome::Status5xx);
    }
}
