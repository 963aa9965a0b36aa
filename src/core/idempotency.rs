//! Idempotency keys (spec §8), as Stripe does them: scoped to the API key and
//! the endpoint, fingerprinted by the canonical request body, replayed byte
//! for byte, and expired after 24 hours.

use sha2::{Digest, Sha256};

use crate::clock;
use crate::sql;
use crate::store::{Db, RowExt, is_unique_violation};

pub const RETENTION_MICROS: i64 = 24 * 3600 * 1_000_000;
/// A record still "running" after this long belongs to a process that died;
/// a retry may take it over.
const STALE_RUNNING_MICROS: i64 = 5 * 60 * 1_000_000;

pub enum Begin {
    /// First time: go ahead, then `finish` or `abandon`.
    Proceed,
    /// Already answered: replay this.
    Replay { status: u16, body: String },
    /// Same key, different request.
    Mismatch,
    /// The first request with this key is still running.
    InFlight,
}

/// SHA-256 of the body's canonical JSON (keys sorted, whitespace dropped).
pub fn fingerprint(body: &serde_json::Value) -> String {
    hex::encode(Sha256::digest(body.to_string().as_bytes()))
}

pub async fn begin(
    db: &Db,
    api_key_id: &str,
    endpoint: &str,
    key: &str,
    fingerprint: &str,
) -> Result<Begin, sqlx::Error> {
    let now = clock::now_micros();
    for _ in 0..3 {
        let inserted = db
            .write_statement(sql!(
                "INSERT INTO idempotency_keys (api_key_id, endpoint, key, fingerprint, state, created_at) \
                 VALUES ($1, $2, $3, $4, 'running', $5)",
                api_key_id,
                endpoint,
                key,
                fingerprint,
                now
            ))
            .await;
        match inserted {
            Ok(_) => return Ok(Begin::Proceed),
            Err(e) if is_unique_violation(&e) => {}
            Err(e) => return Err(e),
        }
        // Through the writer: a read beside it could miss a record still in
        // a group commit.
        let row = db
            .write_fetch_optional(sql!(
                "SELECT fingerprint, state, response_status, response_body, created_at FROM idempotency_keys \
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
        let stale = state == "running" && created < now - STALE_RUNNING_MICROS;
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
        if row.text("fingerprint")? != fingerprint {
            return Ok(Begin::Mismatch);
        }
        if state == "running" {
            return Ok(Begin::InFlight);
        }
        return Ok(Begin::Replay {
            status: row.opt_int("response_status")?.unwrap_or(200) as u16,
            body: row.opt_text("response_body")?.unwrap_or_default(),
        });
    }
    Ok(Begin::InFlight)
}

pub async fn finish(
    db: &Db,
    api_key_id: &str,
    endpoint: &str,
    key: &str,
    status: u16,
    body: &str,
) -> Result<(), sqlx::Error> {
    db.write_statement(sql!(
        "UPDATE idempotency_keys SET state = 'done', response_status = $1, response_body = $2 \
         WHERE api_key_id = $3 AND endpoint = $4 AND key = $5",
        i64::from(status),
        body,
        api_key_id,
        endpoint,
        key
    ))
    .await
    .map(|_| ())
}

/// Forgets the key so that a corrected or retried request can use it again.
pub async fn abandon(
    db: &Db,
    api_key_id: &str,
    endpoint: &str,
    key: &str,
) -> Result<(), sqlx::Error> {
    db.write_statement(sql!(
        "DELETE FROM idempotency_keys WHERE api_key_id = $1 AND endpoint = $2 AND key = $3",
        api_key_id,
        endpoint,
        key
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
