//! A local webhook receiver for the tests: an HTTP server on 127.0.0.1 that
//! records every request and answers with scripted statuses and delays.
//! Also helpers shared by the webhook test modules.
#![allow(dead_code)]

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::IntoResponse;
use serde_json::{Value, json};

use crate::helpers::TestApp;

#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub delay: Duration,
    pub body: String,
}

impl Reply {
    pub fn status(status: u16) -> Reply {
        Reply {
            status,
            delay: Duration::ZERO,
            body: format!("status {status}"),
        }
    }
    pub fn slow(status: u16, delay: Duration) -> Reply {
        Reply {
            delay,
            ..Reply::status(status)
        }
    }
}

#[derive(Debug, Clone)]
pub struct Captured {
    pub path: String,
    pub headers: HashMap<String, String>,
    pub body: String,
    pub json: Value,
    pub at: Instant,
}

impl Captured {
    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).map(String::as_str).unwrap_or("")
    }
    /// The `webhook-id` header.
    pub fn id(&self) -> &str {
        self.header("webhook-id")
    }
}

#[derive(Default)]
struct State {
    requests: Mutex<Vec<Captured>>,
    script: Mutex<VecDeque<Reply>>,
    default: Mutex<Option<Reply>>,
}

pub struct Receiver {
    pub addr: SocketAddr,
    state: Arc<State>,
    _server: tokio::task::JoinHandle<()>,
}

impl Receiver {
    pub async fn start() -> Receiver {
        let state = Arc::new(State::default());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind receiver");
        let addr = listener.local_addr().unwrap();
        let st = state.clone();
        let app = axum::Router::new().fallback(move |uri: Uri, headers: HeaderMap, body: Bytes| {
            let st = st.clone();
            async move { handle(st, uri, headers, body).await }
        });
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Receiver {
            addr,
            state,
            _server: server,
        }
    }

    /// `http://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Replies used in order before the default one.
    pub fn script(&self, replies: impl IntoIterator<Item = Reply>) {
        self.state.script.lock().unwrap().extend(replies);
    }

    /// The reply once the script is used up (200 unless set).
    pub fn set_default(&self, reply: Reply) {
        *self.state.default.lock().unwrap() = Some(reply);
    }

    pub fn requests(&self) -> Vec<Captured> {
        self.state.requests.lock().unwrap().clone()
    }

    pub fn requests_to(&self, path: &str) -> Vec<Captured> {
        self.requests()
            .into_iter()
            .filter(|c| c.path == path)
            .collect()
    }

    /// Waits until at least `n` requests arrived (panics after `within`).
    pub async fn wait_for(&self, n: usize, within: Duration) -> Vec<Captured> {
        let deadline = Instant::now() + within;
        loop {
            let got = self.requests();
            if got.len() >= n {
                return got;
            }
            assert!(
                Instant::now() < deadline,
                "expected {n} webhook requests within {within:?}, got {}: {:?}",
                got.len(),
                got.iter().map(|c| (&c.path, &c.body)).collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

async fn handle(st: Arc<State>, uri: Uri, headers: HeaderMap, body: Bytes) -> impl IntoResponse {
    let text = String::from_utf8_lossy(&body).into_owned();
    let captured = Captured {
        path: uri.path().to_string(),
        headers: headers
            .iter()
            .map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap_or("").to_string()))
            .collect(),
        json: serde_json::from_str(&text).unwrap_or(Value::Null),
        body: text,
        at: Instant::now(),
    };
    st.requests.lock().unwrap().push(captured);
    let reply = st
        .script
        .lock()
        .unwrap()
        .pop_front()
        .or_else(|| st.default.lock().unwrap().clone())
        .unwrap_or(Reply::status(200));
    if !reply.delay.is_zero() {
        tokio::time::sleep(reply.delay).await;
    }
    (
        StatusCode::from_u16(reply.status).unwrap_or(StatusCode::OK),
        reply.body,
    )
}

/// A local port with nothing listening (connections are refused).
pub async fn dead_url() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    drop(l);
    format!("http://127.0.0.1:{port}/dead")
}

/// Creates a webhook (201 expected) with `extra` fields merged in.
pub async fn create_webhook(app: &TestApp, url: &str, extra: Value) -> Value {
    let mut body = json!({ "url": url });
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            b.insert(k.clone(), v.clone());
        }
    }
    let r = app.post("/api/v1/webhooks", body).await;
    assert_eq!(r.status, 201, "{}", r.text);
    r.body
}

/// Writes one event into the outbox, as a state change would.
pub async fn emit(
    app: &TestApp,
    event_type: &str,
    mailbox_id: Option<&str>,
    data: Value,
) -> String {
    let mut tx = app.db.begin().await.unwrap();
    let event = pigeonhole::model::webhooks::EventName::parse(event_type).expect("an event name");
    let id = pigeonhole::core::events::emit(&mut tx, event, mailbox_id, data)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    id
}

/// Deliveries of one webhook, oldest first.
pub async fn deliveries_of(app: &TestApp, webhook_id: &str) -> Vec<Value> {
    let r = app
        .get(&format!(
            "/api/v1/webhook-deliveries?webhook_id={webhook_id}&limit=100"
        ))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let mut v = r.body["data"].as_array().unwrap().clone();
    v.reverse();
    v
}

/// Waits until a webhook has at least `n` delivery records.
pub async fn wait_deliveries(
    app: &TestApp,
    webhook_id: &str,
    n: usize,
    within: Duration,
) -> Vec<Value> {
    let deadline = Instant::now() + within;
    loop {
        let got = deliveries_of(app, webhook_id).await;
        if got.len() >= n {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "expected {n} deliveries within {within:?}, got {}: {got:?}",
            got.len()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Pending tasks in the delivery queue.
pub async fn pending_tasks(app: &TestApp) -> i64 {
    use pigeonhole::store::RowExt;
    pigeonhole::sql!("SELECT COUNT(*) AS n FROM webhook_tasks")
        .fetch_one(app.db.reader())
        .await
        .unwrap()
        .int("n")
        .unwrap()
}
