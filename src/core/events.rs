//! The event outbox. Every state change writes its events here, in the same
//! transaction as the change; webhook delivery reads only this table.

use serde::Serialize;

use crate::clock;
use crate::ids;
use crate::model::Timestamp;
use crate::model::events::EventEnvelope;
use crate::model::webhooks::EventName;
use crate::sql;
use crate::store::{Sql, Tx};
use crate::telemetry::context;

/// Every event name the service emits, from the wire enum. A webhook
/// subscribed to `*` gets all of them, including ones added later.
pub const EVENT_TYPES: &[&str] = &EVENT_NAMES;

const EVENT_NAMES: [&str; EventName::ALL.len()] = {
    let mut out = [""; EventName::ALL.len()];
    let mut i = 0;
    while i < out.len() {
        out[i] = EventName::ALL[i].as_str();
        i += 1;
    }
    out
};

/// Writes one event into the outbox within `tx`. `mailbox_id` lets webhooks
/// restricted to a mailbox match it. Returns the event id.
pub async fn emit<T: Serialize>(
    tx: &mut Tx,
    event: EventName,
    mailbox_id: Option<&str>,
    data: T,
) -> Result<String, sqlx::Error> {
    let (id, insert) = emit_statement(event, mailbox_id, data)?;
    insert.execute_tx(tx).await?;
    Ok(id)
}

/// The event id and the INSERT that writes the event, for callers that
/// batch their statements (it must run in the business transaction).
pub fn emit_statement<T: Serialize>(
    event: EventName,
    mailbox_id: Option<&str>,
    data: T,
) -> Result<(String, Sql), sqlx::Error> {
    let id = ids::new_id("evt");
    let now = clock::now_micros();
    let payload = EventEnvelope {
        kind: event,
        created_at: Timestamp(now),
        data,
    };
    // Only a payload type that cannot be written as JSON fails here: the
    // change it belongs to is then not made either.
    let payload = serde_json::to_string(&payload).map_err(|e| sqlx::Error::Encode(Box::new(e)))?;
    // The request that caused it, for the log lines of its webhook attempts.
    let request_id = context::request_id();
    let insert = sql!(
        "INSERT INTO events (id, type, mailbox_id, payload, created_at, request_id) VALUES ($1, $2, $3, $4, $5, $6)",
        &id,
        event.as_str(),
        mailbox_id,
        payload,
        now,
        request_id.as_deref()
    );
    Ok((id, insert))
}
