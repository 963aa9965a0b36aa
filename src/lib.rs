//! Pigeonhole: a self-hosted mail service.
pub mod api;
pub mod app;
pub mod auth;
pub mod clock;
pub mod config;
pub mod core;
pub mod dns;
/// A local DNS server for tests and benchmarks.
#[cfg(any(test, feature = "test-support"))]
pub mod dns_test_server;
pub mod error;
pub mod ids;
/// The machine's CPU time, for the benchmarks.
#[cfg(any(test, feature = "test-support"))]
pub mod machine_cpu;
pub mod mime;
pub mod model;
pub mod provider;
pub mod server;
pub mod smtp;
pub mod store;
pub mod telemetry;
pub mod webhooks;
pub mod workers;

/// Selects rustls' aws-lc-rs backend, the one the AWS SDK already builds, so
/// that only one TLS stack is compiled. Safe to call more than once.
pub fn init_tls() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}
