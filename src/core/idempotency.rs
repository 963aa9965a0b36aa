//! Idempotency keys (spec §8), as Stripe does them: scoped to the API key and
//! the endpoint, fingerprinted by the canonical request body, replayed byte
//! for byte, and expired after 24 hours.

use std::io::Write;

use sha2::{Digest, Sha256};

use crate::clock;
use crate::core::interrupted::{self, RecordKey, Recovered};
use crate::sql;
use crate::store::{Db, RowExt, Sql, is_unique_violation};

pub const RETENTION_MICROS: i64 = 24 * 3600 * 1_000_000;

pub enum Begin {
    /// First time: go ahead, then `finish` or `abandon`.
    Proceed,
    /// What to answer instead.
    Taken(Taken),
}

/// What a request answers whose key another request has claimed.
#[derive(Debug)]
pub enum Taken {
    /// Already answered: replay this. `recovered` messages of an
    /// interrupted send were recorded just now to answer it.
    Replay {
        status: u16,
        body: String,
        recovered: usize,
    },
    /// Same key, different request.
    Mismatch,
    /// The first request with this key is still running.
    InFlight,
}

/// SHA-256 of the body's canonical JSON (keys sorted, whitespace dropped),
/// written straight into the hash: a large body costs no text of it.
pub fn fingerprint(body: &serde_json::Value) -> String {
    let mut hasher = Sha256::new();
    // Writing into a hash cannot fail.
    let _ = write_canonical(body, &mut hasher);
    hex::encode(hasher.finalize())
}

/// Compact JSON with every object's keys sorted by their bytes, at any depth;
/// arrays keep their order. Sorted here rather than by `Value::to_string`,
/// whose key order follows serde_json's `preserve_order` feature, which any
/// crate in the build may switch on (a dev-dependency does, so tests would
/// hash insertion order). The bytes equal `to_string` without that feature,
/// so fingerprints stored by earlier release builds still match.
#[cfg(test)]
fn canonical_json(value: &serde_json::Value) -> String {
    let mut out = Vec::new();
    let _ = write_canonical(value, &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

// Recursion is bounded: serde_json's parser refuses nesting deeper than 128.
fn write_canonical(value: &serde_json::Value, out: &mut impl Write) -> std::io::Result<()> {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.write_all(b"{")?;
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.write_all(b",")?;
                }
                write_str(k, out)?;
                out.write_all(b":")?;
                write_canonical(v, out)?;
            }
            out.write_all(b"}")
        }
        Value::Array(items) => {
            out.write_all(b"[")?;
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.write_all(b",")?;
                }
                write_canonical(v, out)?;
            }
            out.write_all(b"]")
        }
        Value::String(s) => write_str(s, out),
        Value::Null => out.write_all(b"null"),
        Value::Bool(b) => out.write_all(if *b { b"true" } else { b"false" }),
        Value::Number(n) => write!(out, "{n}"),
    }
}

/// A JSON string, escaped by serde_json itself, as `Value::to_string` does.
fn write_str(s: &str, out: &mut impl Write) -> std::io::Result<()> {
    serde_json::to_writer(out, s).map_err(std::io::Error::other)
}

/// A request's claim on its key: its record, written `running` with the
/// request's fingerprint and `intent` (a send's, see `core::interrupted`).
#[derive(Debug, Clone)]
pub struct Claim {
    pub record: RecordKey,
    pub fingerprint: String,
    pub intent: Option<String>,
    /// When it is claimed: with the key, what names this claim and no
    /// other (see [`abandon`]).
    pub at: i64,
    /// How long a record may stay `running` before its process is taken
    /// for dead (see [`begin`]).
    pub stale_after: std::time::Duration,
}

impl Claim {
    pub fn new(
        record: RecordKey,
        fingerprint: String,
        intent: Option<String>,
        stale_after: std::time::Duration,
    ) -> Claim {
        Claim {
            record,
            fingerprint,
            intent,
            at: clock::now_micros(),
            stale_after,
        }
    }

    fn insert(&self) -> Sql {
        sql!(
            "INSERT INTO idempotency_keys (api_key_id, endpoint, key, fingerprint, state, created_at, intent) \
             VALUES ($1, $2, $3, $4, 'running', $5, $6)",
            &self.record.api_key_id,
            &self.record.endpoint,
            &self.record.key,
            &self.fingerprint,
            self.at,
            self.intent.clone()
        )
    }

    /// The claim as a statement that returns a row if it took the key, and
    /// writes nothing if the key has a record: for a request that claims
    /// with its first reads (see `Db::write_then_lookup_each`), and calls
    /// [`begin`] only when the key was taken.
    pub fn taking_if_free(&self) -> Sql {
        let mut insert = self.insert();
        insert.push(" ON CONFLICT DO NOTHING RETURNING created_at");
        insert
    }
}

/// Claims the key for a request (see [`Claim`]); or says what to answer
/// instead. A record of the same request still running after
/// `stale_after` belongs to a process that died: a record with an intent
/// is recovered (see [`interrupted::recover`]), one without is taken over.
pub async fn begin(db: &Db, claim: &Claim) -> Result<Begin, sqlx::Error> {
    let stale_after = claim.stale_after;
    let record = &claim.record;
    let fingerprint = claim.fingerprint.as_str();
    let (api_key_id, endpoint, key) = (
        record.api_key_id.as_str(),
        record.endpoint.as_str(),
        record.key.as_str(),
    );
    let now = claim.at;
    for _ in 0..3 {
        let inserted = db.write_statement(claim.insert()).await;
        match inserted {
            Ok(_) => return Ok(Begin::Proceed),
            Err(e) if is_unique_violation(&e) => {}
            Err(e) => return Err(e),
        }
        // Through the writer: a read beside it could miss a record still in
        // a group commit.
        let row = db
            .write_fetch_optional(sql!(
                "SELECT fingerprint, state, response_status, response_body, created_at, \
                 CAST(CASE WHEN intent IS NULL THEN 0 ELSE 1 END AS BIGINT) AS has_intent FROM idempotency_keys \
                 WHERE api_key_id = $1 AND endpoint = $2 AND key = $3",
                api_key_id,
                endpoint,
                key
            ))
            .await?;
        let Some(row) = row else { continue };
        let created = row.int("created_at")?;
        let state = row.text("state")?;
        let expired = created < now - RETENTION_MICROS;
        let same_request = row.text("fingerprint")? == fingerprint;
        // Only a retry of the same request takes over a stale record: another
        // request under the key misuses it, whatever became of the first.
        let stale = same_request
            && state == "running"
            && created < now.saturating_sub(stale_after.as_micros() as i64);
        if stale && !expired && row.int("has_intent")? == 1 {
            match interrupted::recover(db, record, created).await? {
                (Recovered::Replay { status, body }, recovered) => {
                    return Ok(Begin::Taken(Taken::Replay {
                        status,
                        body,
                        recovered,
                    }));
                }
                (Recovered::Released, _) => continue,
            }
        }
        if expired || stale {
            // Delete exactly the record we looked at, then race for a fresh insert.
            db.write_statement(sql!(
                "DELETE FROM idempotency_keys WHERE api_key_id = $1 AND endpoint = $2 AND key = $3 AND created_at = $4",
                api_key_id,
                endpoint,
                key,
                created
            ))
            .await?;
            continue;
        }
        if !same_request {
            return Ok(Begin::Taken(Taken::Mismatch));
        }
        if state == "running" {
            return Ok(Begin::Taken(Taken::InFlight));
        }
        return Ok(Begin::Taken(Taken::Replay {
            status: row.opt_int("response_status")?.unwrap_or(200) as u16,
            body: row.opt_text("response_body")?.unwrap_or_default(),
            recovered: 0,
        }));
    }
    Ok(Begin::Taken(Taken::InFlight))
}

/// A keyed single send's hold on its Idempotency-Key, as the send uses it:
/// its record stores the reply under `claim.record`, in its own commit.
#[derive(Debug, Clone)]
pub struct KeyedSend {
    pub claim: Claim,
    /// The claim is not written yet: the send writes it with its first
    /// reads (PostgreSQL). Else [`begin`] has written it.
    pub claim_pending: bool,
}

/// Stores the reply of the request that claimed `record`.
pub async fn finish(
    db: &Db,
    record: &RecordKey,
    status: u16,
    body: &str,
) -> Result<(), sqlx::Error> {
    db.write_statement(finish_statement(record, status, body))
        .await
        .map(|_| ())
}

/// The statement of [`finish`], for a transaction that stores the reply
/// with what the request wrote.
pub fn finish_statement(record: &RecordKey, status: u16, body: &str) -> Sql {
    // Only this request writes its record while it runs: the statement may
    // join the request's inserts.
    sql!(
        // The intent has served once the reply is stored.
        "UPDATE idempotency_keys SET state = 'done', response_status = $1, response_body = $2, \
         intent = NULL WHERE api_key_id = $3 AND endpoint = $4 AND key = $5",
        i64::from(status),
        body,
        &record.api_key_id,
        &record.endpoint,
        &record.key
    )
    .joining_inserts()
}

/// Forgets the key so that a corrected or retried request can use it
/// again: the record of `claim`, and no other request's.
pub async fn abandon(db: &Db, claim: &Claim) -> Result<(), sqlx::Error> {
    db.write_statement(sql!(
        "DELETE FROM idempotency_keys WHERE api_key_id = $1 AND endpoint = $2 AND key = $3 \
         AND created_at = $4 AND state = 'running'",
        &claim.record.api_key_id,
        &claim.record.endpoint,
        &claim.record.key,
        claim.at
    ))
    .await
    .map(|_| ())
}

/// Deletes records older than the retention; run periodically.
pub async fn purge_expired(db: &Db) -> Result<u64, sqlx::Error> {
    db.write_statement(sql!(
        "DELETE FROM idempotency_keys WHERE created_at < $1",
        clock::now_micros() - RETENTION_MICROS
    ))
    .await
}

#[cfg(test)]
mod tests {
    use serde_json::{Map, Value, json};

    use super::*;

    fn parse(text: &str) -> Value {
        serde_json::from_str(text).expect("test JSON")
    }

    /// `value` rebuilt with every object's keys inserted in sorted order, so
    /// that `to_string` prints them sorted whether or not serde_json
    /// preserves insertion order: an oracle independent of that feature.
    fn sorted(value: &Value) -> Value {
        match value {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                let mut out = Map::new();
                for k in keys {
                    out.insert(k.clone(), sorted(&map[k]));
                }
                Value::Object(out)
            }
            Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }

    #[test]
    fn the_same_body_in_any_key_order_has_one_fingerprint() {
        let a = parse(
            r#"{"from":"a@x.com","to":["b@y.com"],"headers":{"X-A":"1","X-B":"2"},
                "attachments":[{"filename":"f.txt","content":"aGk=","meta":{"z":1,"y":[{"q":1,"p":2}]}}]}"#,
        );
        let b = parse(
            r#"{"attachments":[{"meta":{"y":[{"p":2,"q":1}],"z":1},"content":"aGk=","filename":"f.txt"}],
                "headers":{"X-B":"2","X-A":"1"},"to":["b@y.com"],"from":"a@x.com"}"#,
        );
        assert_eq!(fingerprint(&a), fingerprint(&b));
        assert_eq!(
            canonical_json(&b),
            r#"{"attachments":[{"content":"aGk=","filename":"f.txt","meta":{"y":[{"p":2,"q":1}],"z":1}}],"from":"a@x.com","headers":{"X-A":"1","X-B":"2"},"to":["b@y.com"]}"#
        );
    }

    #[test]
    fn different_requests_have_different_fingerprints() {
        let base = json!({"from": "a@x.com", "to": ["b@y.com", "c@y.com"], "headers": {"X-A": "1"}, "n": 1});
        let variants = [
            json!({"from": "a@x.com", "to": ["b@y.com", "c@y.com"], "headers": {"X-A": "2"}, "n": 1}),
            // Arrays are ordered: a batch in another order is another request.
            json!({"from": "a@x.com", "to": ["c@y.com", "b@y.com"], "headers": {"X-A": "1"}, "n": 1}),
            json!({"from": "a@x.com", "to": ["b@y.com", "c@y.com"], "headers": {"X-B": "1"}, "n": 1}),
            json!({"from": "a@x.com", "to": ["b@y.com", "c@y.com"], "headers": {"X-A": "1"}, "n": "1"}),
            json!({"from": "a@x.com", "to": ["b@y.com", "c@y.com"], "headers": {"X-A": "1"}, "n": 1.5}),
            json!({"from": "a@x.com", "to": ["b@y.com", "c@y.com"], "headers": {"X-A": "1"}}),
            json!({"from": "a@x.com", "to": ["b@y.com", "c@y.com"], "headers": {"X-A": "1"}, "n": null}),
            json!([{"from": "a@x.com", "to": ["b@y.com", "c@y.com"], "headers": {"X-A": "1"}, "n": 1}]),
        ];
        let fp = fingerprint(&base);
        assert_eq!(fp.len(), 64);
        let mut seen = vec![fp];
        for v in &variants {
            let f = fingerprint(v);
            assert!(!seen.contains(&f), "{v} shares a fingerprint");
            seen.push(f);
        }
    }

    /// Fingerprints stored before keys were sorted here were SHA-256 of
    /// `to_string` in release builds, whose maps were sorted: the bytes must
    /// not change, escapes and numbers included.
    #[test]
    fn canonical_bytes_are_serde_jsons_sorted_compact_form() {
        let controls: String = (0u8..0x20).map(char::from).collect();
        let messy = json!({
            "zeta": [3, -1, 0.5, 1e300, u64::MAX, i64::MIN, true, false, null, {}, []],
            "Alpha": {"b": "quote \" backslash \\ slash / tab \t", "a": controls},
            "é": "ünïcödé and 🐦 and \u{7f}",
            "a1": {"nested": {"deeper": [{"y": 1, "x": 2}]}},
            "a": "",
            "": "empty key",
            "B": 1
        });
        assert_eq!(canonical_json(&messy), sorted(&messy).to_string());
        // Keys sort by bytes, as a BTreeMap<String, _> sorts them.
        assert!(canonical_json(&messy).starts_with(r#"{"":"empty key","Alpha":"#));
        assert!(canonical_json(&messy).ends_with("\"é\":\"ünïcödé and 🐦 and \u{7f}\"}"));
        assert_eq!(
            fingerprint(&json!({"a": 1})),
            hex::encode(Sha256::digest(br#"{"a":1}"#))
        );
    }
}
