//! The application: state built from a `Config`, served on a given listener,
//! with graceful shutdown.

use std::sync::Arc;

use axum::http::{HeaderName, Request};
use tokio::net::TcpListener;
use tower_http::request_id::{PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;

use crate::api;
use crate::api::rate_limit::{KeyRateLimiter, RateLimiter, SharedRateLimiter};
use crate::config::{Config, ProviderKind};
use crate::core::memory::MemoryBudget;
use crate::core::paging::CursorSigner;
use crate::core::quota::QuotaGuard;
use crate::core::sending::Sending;
use crate::dns::Dns;
use crate::provider::Provider;
use crate::provider::ses::SesProvider;
use crate::provider::simulator::Simulator;
use crate::provider::sns::{HttpsCertFetcher, SnsVerifier};
use crate::server::ConnectionCounters;
use crate::sql;
use crate::store::{Backend, Db, RowExt};
use crate::telemetry::Telemetry;

#[derive(Clone)]
pub struct AppState {
    pub db: Db,
    pub config: Arc<Config>,
    pub provider: Arc<dyn Provider>,
    pub dns: Arc<Dns>,
    pub cursors: CursorSigner,
    /// Per key (see `api::rate_limit`).
    pub rate_limiter: Arc<KeyRateLimiter>,
    /// Per client address for calls without a key; always per process.
    pub address_limiter: Arc<RateLimiter>,
    /// This application's metrics (see `telemetry`), shared with the
    /// SMTP listener and the webhook engine.
    pub metrics: Telemetry,
    /// What the HTTP connection limits did, counted into `metrics`.
    pub connections: Arc<ConnectionCounters>,
    pub quota: Arc<QuotaGuard>,
    /// Memory for large messages, shared with the SMTP listener (see
    /// `core::memory`).
    pub memory: MemoryBudget,
    /// Verifies SNS deliveries at `/sns/ses` (SES events and inbound mail).
    pub sns: Arc<SnsVerifier>,
    /// Webhook delivery engine (and the sender used by ping and replay).
    pub webhooks: crate::webhooks::Webhooks,
}

impl AppState {
    /// Connects to the database (migrating it) and builds every service.
    pub async fn build(config: Config) -> anyhow::Result<AppState> {
        let db = Db::connect(&config.database_url).await?;
        let provider: Arc<dyn Provider> = match config.provider {
            ProviderKind::Simulator => Arc::new(Simulator::new(config.simulator_outbox.clone())),
            ProviderKind::Ses => Arc::new(
                SesProvider::new(config.ses_region.clone(), config.ses_endpoint.clone()).await,
            ),
        };
        AppState::with_provider(config, db, provider).await
    }

    pub async fn with_provider(
        config: Config,
        db: Db,
        provider: Arc<dyn Provider>,
    ) -> anyhow::Result<AppState> {
        crate::init_tls();
        let dns = Dns::new(config.dns_servers.as_deref())
            .map_err(|e| anyhow::anyhow!("PIGEONHOLE_DNS_SERVERS: {e}"))?;
        let cursor_key = shared_secret(&db, "cursor_key").await?;
        let sns = SnsVerifier::new(
            config.sns_topics.clone(),
            Arc::new(HttpsCertFetcher::new().map_err(|e| anyhow::anyhow!("{e}"))?),
        );
        let metrics = Telemetry::new();
        tokio::spawn(metrics.upkeep_every());
        tokio::spawn(crate::workers::provider_events(db.clone()));
        tokio::spawn(crate::workers::purge_expired(db.clone()));
        tokio::spawn(crate::workers::interrupted_sends(
            db.clone(),
            config.interrupted_sends,
            metrics.clone(),
        ));
        let dns = Arc::new(dns);
        let webhooks =
            crate::webhooks::Webhooks::start(db.clone(), &config, dns.clone(), metrics.clone());
        let quota = Arc::new(QuotaGuard::new(provider.clone()));
        let rate_limiter = match db.backend() {
            Backend::Postgres if !config.rate_limit_per_process => {
                KeyRateLimiter::Shared(SharedRateLimiter::new(db.clone()))
            }
            _ => KeyRateLimiter::Process(RateLimiter::default()),
        };
        Ok(AppState {
            db,
            memory: MemoryBudget::new(config.message_memory_budget),
            config: Arc::new(config),
            provider,
            dns,
            cursors: CursorSigner::new(cursor_key),
            rate_limiter: Arc::new(rate_limiter),
            address_limiter: Arc::new(RateLimiter::default()),
            connections: Arc::new(ConnectionCounters::new(&metrics)),
            metrics,
            quota,
            sns: Arc::new(sns),
            webhooks,
        })
    }
}

/// The pieces of the state a send uses.
impl From<&AppState> for Sending {
    fn from(s: &AppState) -> Sending {
        Sending {
            db: s.db.clone(),
            provider: s.provider.clone(),
            quota: s.quota.clone(),
            open_tracking: s.config.open_tracking,
            public_url: s.config.public_url.as_str().into(),
            metrics: s.metrics.clone(),
        }
    }
}

/// A random secret stored once in the database, so every process of one
/// deployment uses the same one.
async fn shared_secret(db: &Db, name: &str) -> anyhow::Result<Vec<u8>> {
    let fresh = crate::ids::random_token(43);
    sql!(
        "INSERT INTO settings (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING",
        name,
        fresh
    )
    .execute(db.writer())
    .await?;
    let row = sql!("SELECT value FROM settings WHERE key = $1", name)
        .fetch_one(db.writer())
        .await?;
    Ok(row.text("value")?.into_bytes())
}

/// The HTTP application with its cross-cutting layers.
pub fn http_app(state: AppState) -> axum::Router {
    let request_id = HeaderName::from_static("x-request-id");
    api::router(state)
        .layer(PropagateRequestIdLayer::new(request_id.clone()))
        .layer(
            TraceLayer::new_for_http().make_span_with(|req: &Request<_>| {
                let id = req
                    .headers()
                    .get("x-request-id")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("");
                // `route` is written once routing matched, `key_id` once
                // the key is known (`api::metrics`, `api::auth_layer`).
                tracing::info_span!(
                    "http",
                    method = %req.method(),
                    path = %req.uri().path(),
                    request_id = %id,
                    route = tracing::field::Empty,
                    key_id = tracing::field::Empty,
                )
            }),
        )
        .layer(SetRequestIdLayer::new(request_id, MakeRequestUuidLike))
        .layer(axum::middleware::map_request(usable_request_id))
}

/// Longest `X-Request-Id` a client may choose; it is logged and stored with
/// the events the request causes.
pub const MAX_REQUEST_ID: usize = 64;

/// A client's `X-Request-Id` is kept when it is short and plain (letters,
/// digits, `-_.:`); any other is dropped and the request gets a new one.
async fn usable_request_id<B>(mut req: Request<B>) -> Request<B> {
    let usable = match req.headers().get("x-request-id") {
        None => return req,
        Some(v) => {
            let b = v.as_bytes();
            !b.is_empty()
                && b.len() <= MAX_REQUEST_ID
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || b"-_.:".contains(c))
        }
    };
    if !usable {
        req.headers_mut().remove("x-request-id");
    }
    req
}

#[derive(Clone, Copy)]
struct MakeRequestUuidLike;

impl tower_http::request_id::MakeRequestId for MakeRequestUuidLike {
    fn make_request_id<B>(&mut self, _: &Request<B>) -> Option<tower_http::request_id::RequestId> {
        let id = crate::ids::new_id("req");
        axum::http::HeaderValue::from_str(&id)
            .ok()
            .map(tower_http::request_id::RequestId::new)
    }
}

/// Serves until `shutdown` resolves; in-flight requests finish first. Raises
/// the open-file limit and sizes the connection cap below it.
pub async fn serve(
    state: AppState,
    listener: TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let webhooks = state.webhooks.clone();
    let http = &state.config.http;
    let fd_limit = crate::server::fd_limit::raise_to_hard_limit();
    let limits = crate::server::ServeLimits {
        header_timeout: http.header_timeout,
        body_timeout: http.body_timeout,
        idle_timeout: http.idle_timeout,
        max_connections: crate::server::fd_limit::connection_cap(http.max_connections, fd_limit),
        max_connections_per_ip: http.max_connections_per_ip,
        max_header_bytes: http.max_header_bytes,
        max_uri_bytes: http.max_uri_bytes,
    };
    tracing::info!(
        fd_limit = fd_limit.unwrap_or(0),
        max_connections = limits.max_connections,
        max_connections_per_ip = limits.max_connections_per_ip,
        "http connection limits"
    );
    let counters = state.connections.clone();
    crate::server::serve(http_app(state), listener, limits, counters, shutdown).await;
    // Then webhook delivery: no new claims, attempts in flight finish and are recorded.
    webhooks.shutdown().await;
    Ok(())
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
