//! `Idempotency-Key` on `POST /emails` and `POST /emails/batch` (spec §8,
//! README "Idempotency"): the fingerprint ignores key order, records are
//! scoped to the endpoint and the API key, keys are 1–255 characters, a
//! different request is 409 `conflict`, a batch's key covers the whole array,
//! records expire after 24 hours and are purged, and a record left `running`
//! by a dead process is taken over. There is no injectable clock: records are
//! aged by moving their `created_at` back in the database.

use serde_json::{Value, json};

use crate::helpers::{Resp, TestApp, assert_error, spawn_app};
use pigeonhole::core::idempotency::{self, Begin, RETENTION_MICROS};
use pigeonhole::core::interrupted::{RecordKey, Timings};
use pigeonhole::sql;
use pigeonhole::store::RowExt;

const HOUR_MICROS: i64 = 3600 * 1_000_000;
const SECOND_MICROS: i64 = 1_000_000;
/// The default time after which a running record counts as interrupted.
const STALE_RUNNING_MICROS: i64 = 300 * SECOND_MICROS;

fn record(key_id: &str, endpoint: &str, key: &str) -> RecordKey {
    RecordKey {
        api_key_id: key_id.into(),
        endpoint: endpoint.into(),
        key: key.into(),
    }
}

pub(crate) fn simple(to: &str) -> Value {
    json!({"from": "Team <team@example.com>", "to": to, "subject": "Hello", "text": "Hi there"})
}

pub(crate) async fn ready() -> TestApp {
    let app = spawn_app().await;
    app.verified_domain("example.com").await;
    app
}

/// POSTs `body` as it is, so that the bytes (and their key order) are the
/// test's, not the JSON library's.
async fn post_raw(app: &TestApp, token: &str, path: &str, idem_key: &str, body: String) -> Resp {
    let r = app
        .client
        .post(format!("{}{path}", app.base))
        .bearer_auth(token)
        .header("Idempotency-Key", idem_key)
        .header("Content-Type", "application/json")
        .body(body)
        .send()
        .await
        .expect("request");
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let text = r.text().await.expect("body");
    Resp {
        status,
        headers,
        body: serde_json::from_str(&text).unwrap_or(Value::Null),
        text,
    }
}

pub(crate) async fn post(app: &TestApp, path: &str, idem_key: &str, body: &Value) -> Resp {
    post_raw(app, &app.key, path, idem_key, body.to_string()).await
}

fn assert_fresh(r: &Resp, status: u16) {
    assert_eq!(r.status, status, "{}", r.text);
    assert!(r.header("idempotency-replayed").is_none(), "{}", r.text);
}

fn assert_replay_of(r: &Resp, first: &Resp) {
    assert_eq!(r.status, first.status, "{}", r.text);
    assert_eq!(r.header("idempotency-replayed"), Some("true"), "{}", r.text);
    assert_eq!(r.text, first.text, "replayed byte for byte");
}

async fn messages_sent(app: &TestApp) -> i64 {
    sql!("SELECT COUNT(*) AS n FROM messages WHERE 1 = 1")
        .fetch_one(app.db.reader())
        .await
        .unwrap()
        .int("n")
        .unwrap()
}

/// Moves the record(s) under `idem_key` `micros` into the past.
async fn age(app: &TestApp, idem_key: &str, micros: i64) {
    let n = app
        .db
        .write_statement(sql!(
            "UPDATE idempotency_keys SET created_at = created_at - $1 WHERE key = $2",
            micros,
            idem_key
        ))
        .await
        .unwrap();
    assert!(n > 0, "no idempotency record under {idem_key}");
}

#[tokio::test]
async fn the_same_body_with_keys_reordered_is_replayed() {
    let app = ready().await;
    let first = post_raw(
        &app,
        &app.key,
        "/api/v1/emails",
        "reordered",
        r#"{"from":"Team <team@example.com>","to":["a@b.com"],"subject":"Hello","text":"Hi",
            "headers":{"X-One":"1","X-Two":"2"}}"#
            .into(),
    )
    .await;
    assert_fresh(&first, 202);
    // Every object's keys in reverse, nested ones too, and other whitespace.
    let again = post_raw(
        &app,
        &app.key,
        "/api/v1/emails",
        "reordered",
        r#"{ "headers": { "X-Two": "2", "X-One": "1" }, "text": "Hi", "subject": "Hello",
             "to": ["a@b.com"], "from": "Team <team@example.com>" }"#
            .into(),
    )
    .await;
    assert_replay_of(&again, &first);
    assert_eq!(messages_sent(&app).await, 1);
}

#[tokio::test]
async fn one_key_on_two_endpoints_is_two_independent_records() {
    let app = ready().await;
    let single = post(&app, "/api/v1/emails", "shared", &simple("a@b.com")).await;
    assert_fresh(&single, 202);
    // Neither a replay of the single send nor a conflict with it.
    let batch = post(
        &app,
        "/api/v1/emails/batch",
        "shared",
        &json!([simple("a@b.com")]),
    )
    .await;
    assert_fresh(&batch, 202);
    assert_eq!(batch.body["object"], "batch", "{}", batch.text);
    assert_eq!(messages_sent(&app).await, 2);
    // Both records live on, each replaying its own reply.
    assert_replay_of(
        &post(&app, "/api/v1/emails", "shared", &simple("a@b.com")).await,
        &single,
    );
    assert_replay_of(
        &post(
            &app,
            "/api/v1/emails/batch",
            "shared",
            &json!([simple("a@b.com")]),
        )
        .await,
        &batch,
    );
    assert_eq!(messages_sent(&app).await, 2);
}

#[tokio::test]
async fn one_key_under_two_api_keys_is_two_independent_records() {
    let app = ready().await;
    let other = app.new_key(None, None, None, None).await;
    let body = simple("a@b.com").to_string();
    let mine = post_raw(&app, &app.key, "/api/v1/emails", "shared", body.clone()).await;
    assert_fresh(&mine, 202);
    // The same key and the same request from another API key is sent again.
    let theirs = post_raw(&app, &other.key, "/api/v1/emails", "shared", body.clone()).await;
    assert_fresh(&theirs, 202);
    assert_ne!(theirs.body["id"], mine.body["id"]);
    assert_eq!(messages_sent(&app).await, 2);
    // Each API key has its own record: a conflict with the other's own
    // request, a replay of one's own.
    let r = post_raw(
        &app,
        &other.key,
        "/api/v1/emails",
        "shared",
        simple("c@d.com").to_string(),
    )
    .await;
    assert_error(&r, 409, "conflict");
    assert_replay_of(
        &post_raw(&app, &other.key, "/api/v1/emails", "shared", body.clone()).await,
        &theirs,
    );
    assert_replay_of(
        &post_raw(&app, &app.key, "/api/v1/emails", "shared", body).await,
        &mine,
    );
    assert_eq!(messages_sent(&app).await, 2);
}

#[tokio::test]
async fn a_key_of_255_characters_is_accepted_and_256_is_refused() {
    let app = ready().await;
    let longest = "k".repeat(255);
    let first = post(&app, "/api/v1/emails", &longest, &simple("a@b.com")).await;
    assert_fresh(&first, 202);
    // Stored under all 255 characters: the repeat is a replay.
    assert_replay_of(
        &post(&app, "/api/v1/emails", &longest, &simple("a@b.com")).await,
        &first,
    );
    let too_long = "k".repeat(256);
    let r = post(&app, "/api/v1/emails", &too_long, &simple("a@b.com")).await;
    assert_error(&r, 422, "invalid_request");
    assert_eq!(r.body["param"], "Idempotency-Key", "{}", r.text);
    let r = post(&app, "/api/v1/emails", "   ", &simple("a@b.com")).await;
    assert_error(&r, 422, "invalid_request");
    assert_eq!(r.body["param"], "Idempotency-Key", "{}", r.text);
    assert_eq!(messages_sent(&app).await, 1);
}

#[tokio::test]
async fn the_same_key_with_another_body_is_409_conflict() {
    let app = ready().await;
    let first = post(&app, "/api/v1/emails", "k", &simple("a@b.com")).await;
    assert_fresh(&first, 202);
    let mut changed = simple("a@b.com");
    changed["subject"] = json!("Hello!");
    let r = post(&app, "/api/v1/emails", "k", &changed).await;
    assert_error(&r, 409, "conflict");
    // Retry-After is for a request still running, not for a mismatch.
    assert!(r.header("retry-after").is_none());
    assert_eq!(messages_sent(&app).await, 1);
    // The conflict left the record as it was.
    assert_replay_of(
        &post(&app, "/api/v1/emails", "k", &simple("a@b.com")).await,
        &first,
    );
}

#[tokio::test]
async fn a_batch_key_covers_the_whole_array() {
    let app = ready().await;
    let batch = json!([simple("a@b.com"), simple("c@d.com")]);
    let first = post(&app, "/api/v1/emails/batch", "b", &batch).await;
    assert_fresh(&first, 202);
    assert_eq!(first.body["sent"], 2, "{}", first.text);
    assert_replay_of(
        &post(&app, "/api/v1/emails/batch", "b", &batch).await,
        &first,
    );
    let mut second_changed = batch.clone();
    second_changed[1]["text"] = json!("Other");
    for other in [
        json!([simple("c@d.com"), simple("a@b.com")]),
        json!([simple("a@b.com")]),
        json!([simple("a@b.com"), simple("c@d.com"), simple("e@f.com")]),
        second_changed,
    ] {
        let r = post(&app, "/api/v1/emails/batch", "b", &other).await;
        assert_error(&r, 409, "conflict");
    }
    assert_eq!(messages_sent(&app).await, 2);
}

#[tokio::test]
async fn a_record_older_than_24_hours_is_not_replayed() {
    let app = ready().await;
    let first = post(&app, "/api/v1/emails", "old", &simple("a@b.com")).await;
    assert_fresh(&first, 202);
    // 23 hours on, a finished record is still replayed.
    age(&app, "old", 23 * HOUR_MICROS).await;
    assert_replay_of(
        &post(&app, "/api/v1/emails", "old", &simple("a@b.com")).await,
        &first,
    );
    // Past 24 hours the request runs again, though no purge has run.
    age(&app, "old", HOUR_MICROS + SECOND_MICROS).await;
    let again = post(&app, "/api/v1/emails", "old", &simple("a@b.com")).await;
    assert_fresh(&again, 202);
    assert_ne!(again.body["id"], first.body["id"]);
    assert_eq!(messages_sent(&app).await, 2);
    // ... and its reply is the one recorded now.
    assert_replay_of(
        &post(&app, "/api/v1/emails", "old", &simple("a@b.com")).await,
        &again,
    );
}

#[tokio::test]
async fn the_purge_deletes_expired_records_and_keeps_fresh_ones() {
    let app = ready().await;
    let mut replies = Vec::new();
    for key in ["expired", "almost", "fresh"] {
        let r = post(&app, "/api/v1/emails", key, &simple("a@b.com")).await;
        assert_fresh(&r, 202);
        replies.push(r);
    }
    age(&app, "expired", RETENTION_MICROS + SECOND_MICROS).await;
    age(&app, "almost", RETENTION_MICROS - 60 * SECOND_MICROS).await;
    assert_eq!(idempotency::purge_expired(&app.db).await.unwrap(), 1);
    let left: Vec<String> = sql!("SELECT key FROM idempotency_keys ORDER BY key")
        .fetch_all(app.db.reader())
        .await
        .unwrap()
        .iter()
        .map(|r| r.text("key").unwrap())
        .collect();
    assert_eq!(left, ["almost", "fresh"]);
    assert_replay_of(
        &post(&app, "/api/v1/emails", "almost", &simple("a@b.com")).await,
        &replies[1],
    );
    assert_replay_of(
        &post(&app, "/api/v1/emails", "fresh", &simple("a@b.com")).await,
        &replies[2],
    );
    assert_eq!(idempotency::purge_expired(&app.db).await.unwrap(), 0);
}

#[tokio::test]
async fn a_stale_running_record_is_taken_over() {
    let app = ready().await;
    let me = app.get("/api/v1/me").await.body;
    let key_id = me["id"].as_str().unwrap();
    let body = simple("a@b.com");
    // A process began this request and died: its record stays `running`.
    // (Without an intent, as records written before intents were.)
    let claim = idempotency::Claim::new(
        record(key_id, "POST /emails", "orphan"),
        idempotency::fingerprint(&body),
        None,
        Timings::default().stale_after,
    );
    let began = idempotency::begin(&app.db, &claim).await.unwrap();
    assert!(matches!(began, Begin::Proceed));
    let r = post(&app, "/api/v1/emails", "orphan", &body).await;
    assert_error(&r, 409, "conflict");
    assert_eq!(r.header("retry-after"), Some("1"));
    // Short of the timeout it may still be running somewhere.
    age(&app, "orphan", STALE_RUNNING_MICROS - 60 * SECOND_MICROS).await;
    let r = post(&app, "/api/v1/emails", "orphan", &body).await;
    assert_error(&r, 409, "conflict");
    assert_eq!(messages_sent(&app).await, 0);
    // Past it, another request under the key is still a conflict...
    age(&app, "orphan", 2 * 60 * SECOND_MICROS).await;
    let other = post(&app, "/api/v1/emails", "orphan", &simple("c@d.com")).await;
    assert_error(&other, 409, "conflict");
    assert_eq!(messages_sent(&app).await, 0);
    // ...and a retry of the same one takes the record over and sends.
    let taken = post(&app, "/api/v1/emails", "orphan", &body).await;
    assert_fresh(&taken, 202);
    assert_eq!(messages_sent(&app).await, 1);
    let state = sql!(
        "SELECT state FROM idempotency_keys WHERE key = $1",
        "orphan"
    )
    .fetch_one(app.db.reader())
    .await
    .unwrap()
    .text("state")
    .unwrap();
    assert_eq!(state, "done");
    assert_replay_of(&post(&app, "/api/v1/emails", "orphan", &body).await, &taken);
}

/// A keyed send's record stores the reply in its own commit: after the
/// send, with nothing else run, the key is answered and its intent gone.
#[tokio::test]
async fn a_keyed_sends_reply_is_stored_with_its_record() {
    let app = ready().await;
    let key = pigeonhole::auth::authenticate(&app.db, &app.key)
        .await
        .unwrap()
        .unwrap();
    let body = simple("a@b.com");
    let claim = idempotency::Claim::new(
        record(&key.id, "POST /emails", "with-record"),
        idempotency::fingerprint(&body),
        Some("{}".into()),
        Timings::default().stale_after,
    );
    assert!(matches!(
        idempotency::begin(&app.db, &claim).await.unwrap(),
        Begin::Proceed
    ));
    let mut input =
        pigeonhole::core::sending::validate(serde_json::from_value(body).unwrap()).unwrap();
    input.keyed = Some(idempotency::KeyedSend {
        claim,
        claim_pending: false,
    });
    let outcome = pigeonhole::core::sending::start(&app.state, &key, input)
        .await
        .unwrap()
        .finish()
        .await
        .unwrap();
    assert!(outcome.reply_stored);
    let row = sql!(
        "SELECT state, response_status, response_body, intent FROM idempotency_keys WHERE key = $1",
        "with-record"
    )
    .fetch_one(app.db.reader())
    .await
    .unwrap();
    assert_eq!(row.text("state").unwrap(), "done");
    assert_eq!(row.int("response_status").unwrap(), 202);
    assert_eq!(
        row.text("response_body").unwrap(),
        pigeonhole::core::sending::reply_text(&outcome.message).unwrap()
    );
    assert_eq!(row.opt_text("intent").unwrap(), None);
}

/// A request releases its own claim on a key and no other: a claim made
/// at another moment (another request's) stays.
#[tokio::test]
async fn a_request_releases_only_its_own_claim() {
    let app = ready().await;
    let me = app.get("/api/v1/me").await.body;
    let key_id = me["id"].as_str().unwrap();
    let claim = |fp: &str| {
        idempotency::Claim::new(
            record(key_id, "POST /emails", "shared"),
            fp.into(),
            None,
            Timings::default().stale_after,
        )
    };
    let first = claim("first");
    assert!(matches!(
        idempotency::begin(&app.db, &first).await.unwrap(),
        Begin::Proceed
    ));
    let mut other = claim("first");
    other.at -= 1;
    let records = || async {
        sql!(
            "SELECT COUNT(*) AS n FROM idempotency_keys WHERE key = $1",
            "shared"
        )
        .fetch_one(app.db.reader())
        .await
        .unwrap()
        .int("n")
        .unwrap()
    };
    idempotency::abandon(&app.db, &other).await.unwrap();
    assert_eq!(records().await, 1, "another request's claim was released");
    idempotency::abandon(&app.db, &first).await.unwrap();
    assert_eq!(records().await, 0);
}
