//! Prometheus metrics: request counts and latency histograms by route and status.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;

use crate::app::AppState;

const BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

#[derive(Default)]
struct Series {
    count: u64,
    sum: f64,
    buckets: [u64; BUCKETS.len()],
}

#[derive(Default)]
pub struct Metrics {
    series: Mutex<BTreeMap<(String, String, u16), Series>>,
}

impl Metrics {
    pub fn observe(&self, method: &str, route: &str, status: u16, seconds: f64) {
        let mut map = match self.series.lock() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        let s = map
            .entry((method.to_string(), route.to_string(), status))
            .or_default();
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
        out
    }
}

pub async fn track(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = req.method().to_string();
    // The matched route template keeps label cardinality bounded.
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "unmatched".to_string());
    let resp = next.run(req).await;
    state.metrics.observe(
        &method,
        &route,
        resp.status().as_u16(),
        started.elapsed().as_secs_f64(),
    );
    resp
}
