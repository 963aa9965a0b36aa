//! The delivery log (every attempt, readable through the endpoints a key may
//! see), and the synchronous sends: ping and replay.

use axum::body::Bytes;
use serde_json::Value;

use crate::auth::Reach;
use crate::clock;
use crate::core::error::{CoreError, CoreResult};
use crate::core::paging::{CursorSigner, Page};
use crate::ids;
use crate::ids::WebhookId;
use crate::model::events::{EventEnvelope, WebhookTestData};
use crate::model::webhooks::{self as model, EventName};
use crate::model::{List, Timestamp};
use crate::sql;
use crate::store::{Db, RowExt, Sql};
use crate::webhooks::Webhooks;
use crate::webhooks::endpoints::{self, Webhook};
use crate::webhooks::queue::{self, Finished};
use crate::webhooks::sender::AttemptResult;

#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    pub id: String,
    pub envelope_id: String,
    pub webhook_id: String,
    pub event: String,
    pub payload: String,
    pub attempt: i64,
    pub status_code: i64,
    pub response_body: String,
    pub error: Option<String>,
    pub duration_ms: i64,
    pub succeeded: bool,
    pub created_at: i64,
}

const COLUMNS: &str = "d.id, d.envelope_id, d.webhook_id, d.event, d.payload, d.attempt, d.status_code, \
     d.response_body, d.error, d.duration_ms, d.succeeded, d.created_at";

impl Delivery {
    fn from_row(r: &sqlx::any::AnyRow) -> Result<Delivery, sqlx::Error> {
        Ok(Delivery {
            id: r.text("id")?,
            envelope_id: r.text("envelope_id")?,
            webhook_id: r.text("webhook_id")?,
            event: r.text("event")?,
            payload: r.text("payload")?,
            attempt: r.int("attempt")?,
            status_code: r.int("status_code")?,
            response_body: r.text("response_body")?,
            error: r.opt_text("error")?,
            duration_ms: r.int("duration_ms")?,
            succeeded: r.flag("succeeded")?,
            created_at: r.int("created_at")?,
        })
    }

    /// The spec's delivery object. `payload` is the body that was posted
    /// (its `id` is the envelope id); `status_code` is 0 when no HTTP reply
    /// came. `envelope_id` is the `webhook-id` the receiver saw.
    pub fn to_wire(&self) -> CoreResult<model::WebhookDelivery> {
        let payload: Value =
            serde_json::from_str(&self.payload).unwrap_or(Value::String(self.payload.clone()));
        let event = EventName::parse(&self.event).ok_or_else(|| {
            CoreError::Internal(anyhow::anyhow!("unknown event name {:?}", self.event))
        })?;
        Ok(model::WebhookDelivery {
            object: model::WebhookDeliveryObject,
            id: crate::ids::Id::from_stored(self.id.clone()),
            envelope_id: crate::ids::Id::from_stored(self.envelope_id.clone()),
            webhook_id: crate::ids::Id::from_stored(self.webhook_id.clone()),
            event,
            payload,
            attempt: self.attempt,
            status_code: self.status_code,
            response_body: self.response_body.clone(),
            error: self.error.clone(),
            duration_ms: self.duration_ms,
            succeeded: self.succeeded,
            created_at: Timestamp(self.created_at),
        })
    }
}

/// Deliveries of the endpoints `reach` may see.
fn visible(reach: &Reach) -> Sql {
    let mut q = Sql::new(&format!(
        "SELECT {COLUMNS} FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id \
         LEFT JOIN mailboxes m ON m.id = w.mailbox_id WHERE 1 = 1"
    ));
    if !reach.is_account() {
        q.push(" AND w.mailbox_id IS NOT NULL");
        reach.filter_address_columns(&mut q, "m.address", "m.domain");
    }
    q
}

/// Filters of the delivery list.
#[derive(Debug, Default, Clone)]
pub struct Filter {
    pub webhook_id: Option<String>,
    pub event: Option<EventName>,
    pub succeeded: Option<bool>,
}

/// A page of deliveries, newest first: up to `page.limit + 1` rows with
/// their sort keys.
pub async fn list(
    db: &Db,
    signer: &CursorSigner,
    reach: &Reach,
    filter: &Filter,
    page: &Page,
) -> CoreResult<List<model::WebhookDelivery>> {
    let mut q = visible(reach);
    if let Some(w) = &filter.webhook_id {
        q.push(" AND d.webhook_id = ").bind(w.clone());
    }
    if let Some(e) = filter.event {
        q.push(" AND d.event = ").bind(e.as_str());
    }
    if let Some(s) = filter.succeeded {
        q.push(" AND d.succeeded = ").bind(s);
    }
    page.push(&mut q, "d.created_at", "d.id");
    let rows = q.fetch_all(db.reader()).await?;
    let items = rows
        .iter()
        .map(|r| {
            let d = Delivery::from_row(r)?;
            Ok((d.created_at, d.id.clone(), d.to_wire()?))
        })
        .collect::<CoreResult<Vec<_>>>()?;
    Ok(page.list(signer, items))
}

pub async fn get(db: &Db, reach: &Reach, id: &str) -> Result<Option<Delivery>, sqlx::Error> {
    let mut q = visible(reach);
    q.push(" AND d.id = ").bind(id);
    q.fetch_optional(db.reader())
        .await?
        .map(|r| Delivery::from_row(&r))
        .transpose()
}

/// The result of a ping or replay.
pub struct SyncResult {
    pub webhook_id: String,
    pub delivery_id: Option<String>,
    pub result: AttemptResult,
}

impl SyncResult {
    /// The `webhook_ping` object.
    pub fn to_wire(&self) -> model::WebhookPing {
        model::WebhookPing {
            object: model::WebhookPingObject,
            webhook_id: crate::ids::Id::from_stored(self.webhook_id.clone()),
            succeeded: self.result.succeeded,
            status_code: self.result.status.map(i64::from).unwrap_or(0),
            duration_ms: self.result.duration_ms,
            response_body: self.result.response_body.clone(),
            error: self.result.error.clone(),
        }
    }
}

/// Sends one body now (no retry) and records it as an attempt of `envelope_id`.
/// One synchronous send.
struct Outgoing {
    envelope_id: String,
    event: String,
    event_id: Option<String>,
    body: String,
    attempt: i64,
    record_id: String,
}

async fn send_and_record(
    db: &Db,
    webhooks: &Webhooks,
    w: &Webhook,
    out: Outgoing,
) -> Result<SyncResult, CoreError> {
    let started_at = clock::now_micros();
    let result = webhooks
        .sender()
        .send(
            &w.url,
            &w.secret,
            &out.envelope_id,
            Bytes::from(out.body.clone()),
        )
        .await;
    let finished = Finished {
        webhook_id: w.id.clone(),
        envelope_id: out.envelope_id,
        event_id: out.event_id,
        event_type: out.event,
        payload: out.body,
        attempt: out.attempt,
        status: result.status,
        response_body: result.response_body.clone(),
        error: result.error.clone(),
        duration_ms: result.duration_ms,
        succeeded: result.succeeded,
        retryable: false,
        started_at,
        ended_at: clock::now_micros(),
        task_lease: None,
        record_id: Some(out.record_id),
    };
    let ids = queue::record(db, &[finished], webhooks.retry_delays()).await?;
    Ok(SyncResult {
        webhook_id: w.id.clone(),
        delivery_id: ids.into_iter().next().flatten(),
        result,
    })
}

/// Sends a `webhook.test` event to the endpoint now, enabled or not.
pub async fn ping(
    db: &Db,
    webhooks: &Webhooks,
    reach: &Reach,
    webhook_id: &str,
) -> Result<SyncResult, CoreError> {
    let w = endpoints::get(db, reach, webhook_id)
        .await?
        .ok_or(CoreError::NotFound("webhook"))?;
    let id = ids::new_id("whd");
    let now = clock::now_micros();
    let payload = EventEnvelope {
        kind: EventName::WebhookTest,
        created_at: Timestamp(now),
        data: WebhookTestData {
            webhook_id: WebhookId::from_stored(w.id.clone()),
            url: w.url.clone(),
            occurred_at: Timestamp(now),
        },
    };
    let payload = serde_json::to_string(&payload).map_err(anyhow::Error::from)?;
    let body = queue::envelope_body(&id, &payload);
    let out = Outgoing {
        envelope_id: id.clone(),
        event: "webhook.test".into(),
        event_id: None,
        body,
        attempt: 1,
        record_id: id,
    };
    send_and_record(db, webhooks, &w, out).await
}

/// Sends a recorded delivery's body again under its original envelope id,
/// recorded as the next attempt of that envelope.
pub async fn replay(
    db: &Db,
    webhooks: &Webhooks,
    reach: &Reach,
    delivery_id: &str,
) -> Result<SyncResult, CoreError> {
    let d = get(db, reach, delivery_id)
        .await?
        .ok_or(CoreError::NotFound("webhook delivery"))?;
    let w = endpoints::get(db, reach, &d.webhook_id)
        .await?
        .ok_or(CoreError::NotFound("webhook delivery"))?;
    let last = sql!(
        "SELECT MAX(attempt) AS n, MAX(event_id) AS event_id FROM webhook_deliveries WHERE envelope_id = $1",
        &d.envelope_id
    )
    .fetch_one(db.reader())
    .await?;
    let attempt = last.opt_int("n")?.unwrap_or(d.attempt) + 1;
    let event_id = last.opt_text("event_id")?;
    let out = Outgoing {
        envelope_id: d.envelope_id.clone(),
        event: d.event.clone(),
        event_id,
        body: d.payload.clone(),
        attempt,
        record_id: ids::new_id("whd"),
    };
    send_and_record(db, webhooks, &w, out).await
}
