use std::collections::HashMap;
use std::sync::{Arc, Once};

use async_trait::async_trait;
use pigeonhole::app::{self, AppState};
use pigeonhole::auth::{self, CreatedKey};
use pigeonhole::config::Config;
use pigeonhole::dns_test_server::TestDnsServer;
use pigeonhole::provider::simulator::Simulator;
use pigeonhole::provider::{
    IdentityInfo, OutgoingMessage, PlannedEvent, Provider, ProviderError, Quota,
};
use pigeonhole::store::Db;
use serde_json::Value;
use tokio::sync::oneshot;

#[allow(dead_code)]
pub struct TestApp {
    pub base: String,
    pub state: AppState,
    pub db: Db,
    pub dns: TestDnsServer,
    pub client: reqwest::Client,
    /// A key reaching the whole account with every scope.
    pub key: String,
    pub database_url: String,
    shutdown: Option<oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

static BACKEND_NOTE: Once = Once::new();

/// A fresh, empty database URL for one test.
pub async fn fresh_database_url() -> String {
    let name = format!("ph_test_{}", pigeonhole::ids::random_token(16));
    match std::env::var("PIGEONHOLE_TEST_POSTGRES_URL") {
        Ok(admin) if !admin.is_empty() => {
            BACKEND_NOTE.call_once(|| eprintln!("tests run on PostgreSQL ({admin})"));
            pigeonhole::store::create_postgres_database(&admin, &name)
                .await
                .expect("create a database on PIGEONHOLE_TEST_POSTGRES_URL")
        }
        _ => {
            BACKEND_NOTE.call_once(|| {
                eprintln!("PIGEONHOLE_TEST_POSTGRES_URL is not set: tests run on SQLite, PostgreSQL skipped")
            });
            let dir = std::env::temp_dir().join("pigeonhole-tests");
            let _ = std::fs::create_dir_all(&dir);
            format!("sqlite://{}", dir.join(format!("{name}.db")).display())
        }
    }
}

pub fn base_config(database_url: &str, dns: &TestDnsServer) -> HashMap<String, String> {
    let mut m = HashMap::new();
    m.insert("PIGEONHOLE_DATABASE_URL".into(), database_url.to_string());
    m.insert("PIGEONHOLE_DNS_SERVERS".into(), dns.addr().to_string());
    m.insert("PIGEONHOLE_SMTP_LISTEN".into(), String::new());
    // Loopback webhook receivers and a local SNS SubscribeURL.
    m.insert("PIGEONHOLE_ENV".into(), "development".into());
    m.insert(
        "PIGEONHOLE_WEBHOOK_RETRY_DELAYS".into(),
        "0,0.05,0.1,0.15".into(),
    );
    m
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with(|_| {}).await
}

pub async fn spawn_app_with(tweak: impl FnOnce(&mut HashMap<String, String>)) -> TestApp {
    spawn_app_with_provider(tweak, |config| {
        Arc::new(Simulator::new(config.simulator_outbox.clone()))
    })
    .await
}

pub async fn spawn_app_with_provider(
    tweak: impl FnOnce(&mut HashMap<String, String>),
    make_provider: impl FnOnce(&Config) -> Arc<dyn Provider>,
) -> TestApp {
    spawn_app_custom(tweak, make_provider, |_| {}).await
}

/// The most general form: settings, provider and a last look at the state.
pub async fn spawn_app_custom(
    tweak: impl FnOnce(&mut HashMap<String, String>),
    make_provider: impl FnOnce(&Config) -> Arc<dyn Provider>,
    tweak_state: impl FnOnce(&mut AppState),
) -> TestApp {
    let dns = TestDnsServer::start().await.expect("start test DNS server");
    let database_url = fresh_database_url().await;
    let mut settings = base_config(&database_url, &dns);
    tweak(&mut settings);
    let config = Config::from_map(&settings).expect("valid test config");
    let db = Db::connect(&config.database_url).await.expect("connect");
    let provider = make_provider(&config);
    let mut state = AppState::with_provider(config, db.clone(), provider)
        .await
        .expect("build state");
    tweak_state(&mut state);
    spawn_state(state, dns, database_url).await
}

/// A second process of the same deployment: its own state, server and
/// key, over `app`'s database, with `tweak`ed settings.
#[allow(dead_code)]
pub async fn another_process(
    app: &TestApp,
    tweak: impl FnOnce(&mut HashMap<String, String>),
) -> TestApp {
    let dns = TestDnsServer::start().await.expect("start test DNS server");
    let mut settings = base_config(&app.database_url, &dns);
    tweak(&mut settings);
    let config = Config::from_map(&settings).expect("valid test config");
    let db = Db::connect(&config.database_url).await.expect("connect");
    let provider = Arc::new(Simulator::new(config.simulator_outbox.clone()));
    let state = AppState::with_provider(config, db, provider)
        .await
        .expect("build state");
    spawn_state(state, dns, app.database_url.clone()).await
}

pub async fn spawn_state(state: AppState, dns: TestDnsServer, database_url: String) -> TestApp {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (tx, rx) = oneshot::channel::<()>();
    let server = tokio::spawn(app::serve(state.clone(), listener, async move {
        let _ = rx.await;
    }));
    let key = auth::create_key(
        &state.db,
        auth::parse_new_key("test-admin", None, None, None, None).expect("key input"),
    )
    .await
    .expect("create key")
    .key;
    TestApp {
        base: format!("http://{addr}"),
        db: state.db.clone(),
        state,
        dns,
        client: reqwest::Client::new(),
        key,
        database_url,
        shutdown: Some(tx),
        server: Some(server),
    }
}

pub struct Resp {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
    pub text: String,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

impl TestApp {
    pub async fn new_key(
        &self,
        scopes: Option<&str>,
        domains: Option<&str>,
        addresses: Option<&str>,
        rate_limit: Option<u32>,
    ) -> CreatedKey {
        auth::create_key(
            &self.db,
            auth::parse_new_key("test", scopes, domains, addresses, rate_limit).expect("key input"),
        )
        .await
        .expect("create key")
    }

    pub async fn call(
        &self,
        method: &str,
        path: &str,
        key: Option<&str>,
        body: Option<Value>,
    ) -> Resp {
        let url = format!("{}{}", self.base, path);
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut req = self.client.request(method, url);
        if let Some(k) = key {
            req = req.bearer_auth(k);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.expect("request");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let text = resp.text().await.expect("body");
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Resp {
            status,
            headers,
            body,
            text,
        }
    }

    pub async fn get(&self, path: &str) -> Resp {
        self.call("GET", path, Some(&self.key.clone()), None).await
    }
    pub async fn post(&self, path: &str, body: Value) -> Resp {
        self.call("POST", path, Some(&self.key.clone()), Some(body))
            .await
    }
    pub async fn patch(&self, path: &str, body: Value) -> Resp {
        self.call("PATCH", path, Some(&self.key.clone()), Some(body))
            .await
    }
    pub async fn delete(&self, path: &str) -> Resp {
        self.call("DELETE", path, Some(&self.key.clone()), None)
            .await
    }

    /// Adds and verifies a domain, returning its JSON.
    pub async fn verified_domain(&self, name: &str) -> Value {
        let r = self
            .post("/api/v1/domains", serde_json::json!({ "name": name }))
            .await;
        assert_eq!(r.status, 201, "{}", r.text);
        let r = self
            .post(
                &format!("/api/v1/domains/{name}/verify"),
                serde_json::json!({}),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(r.body["status"], "verified");
        r.body
    }

    pub async fn mailbox(&self, address: &str) -> Value {
        let r = self
            .post(
                "/api/v1/mailboxes",
                serde_json::json!({ "address": address }),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.text);
        r.body
    }

    /// The status of sent message `id`.
    pub async fn email_status(&self, id: &str) -> String {
        self.get(&format!("/api/v1/emails/{id}")).await.body["status"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// Every item of the list at `path`, which must fit one page of 100.
    pub async fn list_all(&self, path: &str) -> Vec<Value> {
        let sep = if path.contains('?') { '&' } else { '?' };
        let r = self.get(&format!("{path}{sep}limit=100")).await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(r.body["has_more"], false, "{}", r.text);
        r.body["data"].as_array().unwrap().clone()
    }

    /// The types of the outbox events, in the order written.
    pub async fn outbox_types(&self) -> Vec<String> {
        use pigeonhole::store::RowExt;
        pigeonhole::sql!("SELECT type FROM events ORDER BY seq")
            .fetch_all(self.db.reader())
            .await
            .unwrap()
            .iter()
            .map(|r| r.text("type").unwrap())
            .collect()
    }

    /// Stops the server, letting in-flight requests finish.
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(h) = self.server.take() {
            let _ = h.await;
        }
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// Polls `check` until it returns `Some`, for at most five seconds.
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Asserts the spec's error body and returns it.
pub fn assert_error(r: &Resp, status: u16, code: &str) {
    assert_eq!(r.status, status, "{}", r.text);
    assert_eq!(r.body["code"], code, "{}", r.text);
    assert!(
        r.body["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{}",
        r.text
    );
}

/// An inbound SMTP listener on a free loopback port, serving `db`; it stops
/// when dropped.
#[allow(dead_code)]
pub struct TestSmtp {
    pub addr: std::net::SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
}

impl Drop for TestSmtp {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// Starts `pigeonhole::smtp::run` on 127.0.0.1:0 with `config`, over the
/// app's database, resolver (its test DNS server) and metrics.
#[allow(dead_code)]
pub async fn start_smtp(app: &TestApp, config: pigeonhole::smtp::SmtpConfig) -> TestSmtp {
    let config = pigeonhole::smtp::SmtpConfig {
        metrics: app.state.metrics.clone(),
        ..config
    };
    start_smtp_with(&app.db, app.state.dns.clone(), config).await
}

/// [`start_smtp`] with a resolver of the test's choice.
#[allow(dead_code)]
pub async fn start_smtp_with(
    db: &Db,
    dns: Arc<pigeonhole::dns::Dns>,
    config: pigeonhole::smtp::SmtpConfig,
) -> TestSmtp {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind smtp");
    let addr = listener.local_addr().expect("smtp addr");
    let (tx, rx) = oneshot::channel::<()>();
    tokio::spawn(pigeonhole::smtp::run(
        listener,
        db.clone(),
        dns,
        config,
        async move {
            let _ = rx.await;
        },
    ));
    TestSmtp {
        addr,
        shutdown: Some(tx),
    }
}

/// A test's stand-in provider: `inner` (the simulator, SES against moto…)
/// with the calls the test changes; every other call, events included, goes
/// to `inner`. Give it to the app as `Arc::new(Wrapped(…))`.
#[async_trait]
pub trait Wrapping: Send + Sync + 'static {
    fn inner(&self) -> &dyn Provider;
    fn name(&self) -> &'static str {
        self.inner().name()
    }
    fn region(&self) -> String {
        self.inner().region()
    }
    async fn create_identity(&self, domain: &str) -> Result<IdentityInfo, ProviderError> {
        self.inner().create_identity(domain).await
    }
    async fn get_identity(&self, domain: &str) -> Result<IdentityInfo, ProviderError> {
        self.inner().get_identity(domain).await
    }
    async fn delete_identity(&self, domain: &str) -> Result<(), ProviderError> {
        self.inner().delete_identity(domain).await
    }
    async fn send_raw(&self, message: &OutgoingMessage) -> Result<String, ProviderError> {
        self.inner().send_raw(message).await
    }
    async fn quota(&self) -> Result<Quota, ProviderError> {
        self.inner().quota().await
    }
    fn planned_events(&self, pid: &str, recipients: &[String], at: i64) -> Vec<PlannedEvent> {
        self.inner().planned_events(pid, recipients, at)
    }
}

/// A [`Wrapping`] as the service's [`Provider`].
pub struct Wrapped<W>(pub W);

#[async_trait]
impl<W: Wrapping> Provider for Wrapped<W> {
    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn region(&self) -> String {
        self.0.region()
    }
    async fn create_identity(&self, domain: &str) -> Result<IdentityInfo, ProviderError> {
        self.0.create_identity(domain).await
    }
    async fn get_identity(&self, domain: &str) -> Result<IdentityInfo, ProviderError> {
        self.0.get_identity(domain).await
    }
    async fn delete_identity(&self, domain: &str) -> Result<(), ProviderError> {
        self.0.delete_identity(domain).await
    }
    async fn send_raw(&self, message: &OutgoingMessage) -> Result<String, ProviderError> {
        self.0.send_raw(message).await
    }
    async fn quota(&self) -> Result<Quota, ProviderError> {
        self.0.quota().await
    }
    fn planned_events(&self, pid: &str, recipients: &[String], at: i64) -> Vec<PlannedEvent> {
        self.0.planned_events(pid, recipients, at)
    }
}

/// A directory for the simulator's outbox (`<provider_message_id>.eml` per
/// message it transmits), removed when dropped.
pub struct TempOutbox(pub std::path::PathBuf);

impl TempOutbox {
    pub fn new() -> TempOutbox {
        TempOutbox(
            std::env::temp_dir().join(format!("ph-outbox-{}", pigeonhole::ids::random_token(10))),
        )
    }

    /// The setting that points the simulator here.
    pub fn setting(&self) -> (String, String) {
        (
            "PIGEONHOLE_SIMULATOR_OUTBOX".into(),
            self.0.display().to_string(),
        )
    }

    /// The exact MIME the simulator transmitted as `provider_message_id`.
    pub fn eml(&self, provider_message_id: &str) -> Vec<u8> {
        let path = self.0.join(format!("{provider_message_id}.eml"));
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }
}

impl Drop for TempOutbox {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
