//! Prometheus metrics: request counts and latency histograms by route and
//! status, and what the connection limits did. Every label comes from a fixed
//! set, so nothing a client sends can add series.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;

use crate::app::AppState;
use crate::server::ConnectionCounters;

const BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

#[derive(Default)]
struct Series {
    count: u64,
    sum: f64,
    buckets: [u64; BUCKETS.len()],
}

/// The method label: the standard methods, anything else `other`.
pub fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        Method::CONNECT => "CONNECT",
        Method::TRACE => "TRACE",
        _ => "other",
    }
}

#[derive(Default)]
pub struct Metrics {
    /// By method label, route template (or `unmatched`) and status.
    series: Mutex<BTreeMap<(&'static str, String, u16), Series>>,
    pub connections: Arc<ConnectionCounters>,
}

impl Metrics {
    pub fn observe(&self, method: &'static str, route: &str, status: u16, seconds: f64) {
        let mut map = match self.series.lock() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        let s = map.entry((method, route.to_string(), status)).or_default();
        s.count += 1;
        s.sum += seconds;
        for (i, b) in BUCKETS.iter().enumerate() {
            if seconds <= *b {
                s.buckets[i] += 1;
            }
        }
    }

    pub fn render(&self) -> String {
        let map = match self.series.lock() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        let mut out = String::new();
        out.push_str("# HELP pigeonhole_http_requests_total HTTP requests by route and status.\n");
        out.push_str("# TYPE pigeonhole_http_requests_total counter\n");
        for ((m, r, st), s) in map.iter() {
            let _ = writeln!(
                out,
                "pigeonhole_http_requests_total{{method=\"{m}\",route=\"{r}\",status=\"{st}\"}} {}",
                s.count
            );
        }
        out.push_str("# HELP pigeonhole_http_request_duration_seconds HTTP request latency.\n");
        out.push_str("# TYPE pigeonhole_http_request_duration_seconds histogram\n");
        for ((m, r, st), s) in map.iter() {
            let labels = format!("method=\"{m}\",route=\"{r}\",status=\"{st}\"");
            for (i, b) in BUCKETS.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "pigeonhole_http_request_duration_seconds_bucket{{{labels},le=\"{b}\"}} {}",
                    s.buckets[i]
                );
            }
            let _ = writeln!(
                out,
                "pigeonhole_http_request_duration_seconds_bucket{{{labels},le=\"+Inf\"}} {}",
                s.count
            );
            let _ = writeln!(
                out,
                "pigeonhole_http_request_duration_seconds_sum{{{labels}}} {}",
                s.sum
            );
            let _ = writeln!(
                out,
                "pigeonhole_http_request_duration_seconds_count{{{labels}}} {}",
                s.count
            );
        }
        let c = &self.connections;
        out.push_str("# HELP pigeonhole_http_connections_open Open HTTP connections.\n");
        out.push_str("# TYPE pigeonhole_http_connections_open gauge\n");
        let _ = writeln!(out, "pigeonhole_http_connections_open {}", c.open.get());
        out.push_str(
            "# HELP pigeonhole_http_connections_closed_total HTTP connections closed or refused by the connection limits.\n",
        );
        out.push_str("# TYPE pigeonhole_http_connections_closed_total counter\n");
        for (reason, count) in [
            ("header_timeout", &c.header_timeouts),
            ("idle_timeout", &c.idle_timeouts),
            ("evicted", &c.evicted),
            ("per_ip_cap", &c.refused_per_ip),
            ("global_cap", &c.refused_full),
        ] {
            let _ = writeln!(
                out,
                "pigeonhole_http_connections_closed_total{{reason=\"{reason}\"}} {}",
                count.get()
            );
        }
        out
    }
}

pub async fn track(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = method_label(req.method());
    // The matched route template keeps label cardinality bounded.
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "unmatched".to_string());
    let resp = next.run(req).await;
    state.metrics.observe(
        method,
        &route,
        resp.status().as_u16(),
        started.elapsed().as_secs_f64(),
    );
    resp
}
