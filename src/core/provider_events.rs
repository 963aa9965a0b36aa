//! The one ingestion path for provider events (the simulator's, or SES's via
//! SNS): message events, status transitions, suppressions and `email.*`
//! outbox events, all in one transaction.
//!
//! Status transitions (anything else is ignored, so a late or duplicate event
//! never moves a status backwards):
//!
//! | from              | event          | to         |
//! |-------------------|----------------|------------|
//! | queued            | Send           | sent       |
//! | queued, sent, delayed | Delivery   | delivered  |
//! | queued, sent, delayed | Bounce     | bounced    |
//! | queued, sent      | DeliveryDelay  | delayed    |
//! | queued, sent      | Reject         | rejected   |
//! | queued, sent      | RenderingFailure | failed   |
//! | sent, delivered   | Complaint      | complained |

use std::collections::{HashMap, HashSet};

use crate::clock;
use crate::core::events;
use crate::core::messages::{COLUMNS, Message};
use crate::core::suppressions;
use crate::ids;
use crate::model::Timestamp;
use crate::model::events::EmailEventData;
use crate::model::messages::MessageStatus;
use crate::model::suppressions::SuppressionReason;
use crate::model::webhooks::EventName;
use crate::provider::{ProviderEvent, ProviderEventKind};
use crate::sql;
use crate::store::{Backend, Db, RowExt, Sql, execute_all};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ingested {
    Applied,
    /// No message has that provider id (yet).
    UnknownMessage,
}

fn event_type(kind: ProviderEventKind) -> &'static str {
    match kind {
        ProviderEventKind::Send => "send",
        ProviderEventKind::Delivery => "delivery",
        ProviderEventKind::Bounce { .. } => "bounce",
        ProviderEventKind::Complaint => "complaint",
        ProviderEventKind::Reject => "reject",
        ProviderEventKind::DeliveryDelay => "delivery_delay",
        ProviderEventKind::Open => "open",
        ProviderEventKind::Click => "click",
        ProviderEventKind::RenderingFailure => "rendering_failure",
    }
}

/// The status an event moves a message to, if any: the table above.
pub fn next(from: MessageStatus, event: ProviderEventKind) -> Option<MessageStatus> {
    use MessageStatus::*;
    use ProviderEventKind as E;
    match (from, event) {
        (Queued, E::Send) => Some(Sent),
        (Queued | Sent | Delayed, E::Delivery) => Some(Delivered),
        (Queued | Sent | Delayed, E::Bounce { .. }) => Some(Bounced),
        (Queued | Sent, E::DeliveryDelay) => Some(Delayed),
        (Queued | Sent, E::Reject) => Some(Rejected),
        (Queued | Sent, E::RenderingFailure) => Some(Failed),
        (Sent | Delivered, E::Complaint) => Some(Complained),
        _ => None,
    }
}

/// Events that can only happen once per recipient; repeats are dropped.
fn once_per_recipient(kind: ProviderEventKind) -> bool {
    !matches!(
        kind,
        ProviderEventKind::Open | ProviderEventKind::Click | ProviderEventKind::DeliveryDelay
    )
}

pub async fn ingest(db: &Db, ev: &ProviderEvent) -> Result<Ingested, sqlx::Error> {
    ingest_all(db, vec![ev.clone()])
        .await?
        .first()
        .copied()
        .ok_or_else(|| sqlx::Error::Protocol("ingestion returned no outcome".into()))
}

/// Ingests events in order in one write; an outcome per event.
pub async fn ingest_all(db: &Db, events: Vec<ProviderEvent>) -> Result<Vec<Ingested>, sqlx::Error> {
    let backend = db.backend();
    db.write(move |tx| Box::pin(async move { ingest_batch_in(tx, backend, &events).await }))
        .await
}

/// Applies events in order inside the caller's transaction, so that a batch
/// shares one commit. The messages they name and the message events those
/// already have are read once for the whole batch, and every write but the
/// rare ones (SNS dedupe, suppressions, opens) goes out in one call at the
/// end: per batch, not per event, trips to the connection.
pub(crate) async fn ingest_batch_in(
    tx: &mut crate::store::Tx,
    backend: Backend,
    events: &[ProviderEvent],
) -> Result<Vec<Ingested>, sqlx::Error> {
    let mut known = Known::load(tx, backend, events).await?;
    let mut writes: Vec<Sql> = Vec::new();
    let mut outcomes = Vec::with_capacity(events.len());
    for ev in events {
        outcomes.push(apply(tx, &mut known, ev, &mut writes).await?);
    }
    execute_all(tx, backend, &writes).await?;
    Ok(outcomes)
}

/// What a batch of events is applied against, kept current as it goes.
struct Known {
    /// By provider message id.
    messages: HashMap<String, Message>,
    /// (message id, event type, recipient) of every message event.
    events: HashSet<(String, String, Option<String>)>,
}

impl Known {
    async fn load(
        tx: &mut crate::store::Tx,
        backend: Backend,
        events: &[ProviderEvent],
    ) -> Result<Known, sqlx::Error> {
        let mut ids: Vec<String> = events
            .iter()
            .map(|e| e.provider_message_id.clone())
            .collect();
        ids.sort();
        ids.dedup();
        let mut q = Sql::new(&format!(
            "SELECT {COLUMNS} FROM messages m WHERE m.provider_message_id IN "
        ));
        q.bind_list(&ids);
        // The statuses read here decide the transitions written at the end:
        // on PostgreSQL the rows stay locked until the commit so that no
        // other process moves them in between, taken in one order so that
        // two batches cannot deadlock.
        q.push(" ORDER BY m.created_at, m.id");
        if backend == Backend::Postgres {
            q.push(" FOR UPDATE");
        }
        let mut messages = HashMap::new();
        for row in q.fetch_all_tx(tx).await? {
            let m = Message::from_row(&row)?;
            if let Some(pid) = m.provider_message_id.clone() {
                messages.entry(pid).or_insert(m);
            }
        }
        let mut known_events = HashSet::new();
        if !messages.is_empty() {
            let message_ids: Vec<String> = messages.values().map(|m| m.id.clone()).collect();
            let mut q = Sql::new(
                "SELECT message_id, type, recipient FROM message_events WHERE message_id IN ",
            );
            q.bind_list(&message_ids);
            for row in q.fetch_all_tx(tx).await? {
                let recipient = row.opt_text("recipient")?;
                known_events.insert((row.text("message_id")?, row.text("type")?, recipient));
            }
        }
        Ok(Known {
            messages,
            events: known_events,
        })
    }
}

/// Applies one event to `known`, pushing its writes onto `writes`.
async fn apply(
    tx: &mut crate::store::Tx,
    known: &mut Known,
    ev: &ProviderEvent,
    writes: &mut Vec<Sql>,
) -> Result<Ingested, sqlx::Error> {
    let Some(message) = known.messages.get_mut(&ev.provider_message_id) else {
        return Ok(Ingested::UnknownMessage);
    };
    if let Some(delivery_id) = &ev.delivery_id {
        let first = sql!(
            "INSERT INTO sns_seen (message_id, created_at) VALUES ($1, $2) ON CONFLICT (message_id) DO NOTHING",
            delivery_id,
            clock::now_micros()
        )
        .execute_tx(tx)
        .await?;
        if first == 0 {
            return Ok(Ingested::Applied);
        }
    }
    let etype = event_type(ev.kind);
    // Send, Reject and rendering failures concern the message, not one recipient.
    let message_level = matches!(
        ev.kind,
        ProviderEventKind::Send | ProviderEventKind::Reject | ProviderEventKind::RenderingFailure
    );
    let recipients: Vec<Option<String>> = if ev.recipients.is_empty() || message_level {
        vec![None]
    } else {
        ev.recipients
            .iter()
            .map(|r| Some(r.to_lowercase()))
            .collect()
    };
    let mut fresh = false;
    for rcpt in &recipients {
        let key = (message.id.clone(), etype.to_string(), rcpt.clone());
        if once_per_recipient(ev.kind) && known.events.contains(&key) {
            continue;
        }
        known.events.insert(key);
        fresh = true;
        writes.push(sql!(
            "INSERT INTO message_events (id, message_id, type, recipient, detail, occurred_at, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
            ids::new_id("mev"),
            &message.id,
            etype,
            rcpt.clone(),
            ev.detail.clone(),
            ev.occurred_at,
            clock::now_micros()
        ));
        let suppress = match ev.kind {
            ProviderEventKind::Bounce { permanent: true } => Some(SuppressionReason::Bounce),
            ProviderEventKind::Complaint => Some(SuppressionReason::Complaint),
            _ => None,
        };
        if let (Some(reason), Some(r)) = (suppress, rcpt) {
            suppressions::add(
                tx,
                r,
                reason,
                ev.detail.as_deref(),
                Some(&message.domain),
                Some(&message.mailbox),
                Some(&message.id),
            )
            .await?;
        }
    }
    if !fresh {
        return Ok(Ingested::Applied);
    }

    let mut outbox_event = None;
    let mut sent_at = None;
    if let Some(to) = next(message.status, ev.kind) {
        // Only a send recovered after a crash is `queued` (see
        // `core::interrupted`): its provider's Send event is the first word
        // that it went out, so it is what says `email.sent`.
        let first_sent = message.status == MessageStatus::Queued && to == MessageStatus::Sent;
        if first_sent {
            sent_at = Some(ev.occurred_at);
            writes.push(sql!(
                "UPDATE messages SET sent_at = $1 WHERE id = $2",
                ev.occurred_at,
                &message.id
            ));
            message.sent_at = Some(ev.occurred_at);
        }
        let error = match ev.kind {
            ProviderEventKind::Bounce { .. }
            | ProviderEventKind::Reject
            | ProviderEventKind::RenderingFailure => ev.detail.clone(),
            _ => message.error.clone(),
        };
        // The row is ours until the commit (locked on PostgreSQL, the one
        // writer on SQLite); the guard on the status read is a second belt.
        writes.push(sql!(
            "UPDATE messages SET status = $1, error = $2 WHERE id = $3 AND status = $4",
            to.as_str(),
            error.clone(),
            &message.id,
            message.status.as_str()
        ));
        message.status = to;
        message.error = error;
        outbox_event = match ev.kind {
            // Otherwise email.sent is written by the send itself.
            ProviderEventKind::Send if first_sent => Some(EventName::EmailSent),
            ProviderEventKind::Send => None,
            ProviderEventKind::Delivery => Some(EventName::EmailDelivered),
            ProviderEventKind::Bounce { .. } => Some(EventName::EmailBounced),
            ProviderEventKind::Complaint => Some(EventName::EmailComplained),
            ProviderEventKind::Reject => Some(EventName::EmailRejected),
            ProviderEventKind::DeliveryDelay => Some(EventName::EmailDelayed),
            ProviderEventKind::RenderingFailure => Some(EventName::EmailFailed),
            _ => None,
        };
    }
    match ev.kind {
        ProviderEventKind::Open => {
            record_open(tx, message, ev.occurred_at).await?;
            outbox_event = Some(EventName::EmailOpened);
        }
        ProviderEventKind::Click => outbox_event = Some(EventName::EmailClicked),
        _ => {}
    }
    if let Some(name) = outbox_event {
        let data = EmailEventData {
            email: message.summary(),
            occurred_at: Timestamp(ev.occurred_at),
            sent_at: sent_at.map(Timestamp),
            recipients: (!ev.recipients.is_empty()).then(|| ev.recipients.clone()),
            detail: ev.detail.clone(),
        };
        writes.push(events::emit_statement(name, Some(&message.mailbox_id), data)?.1);
    }
    Ok(Ingested::Applied)
}

/// First open sets `opened_at`; every open counts.
pub async fn record_open(
    tx: &mut crate::store::Tx,
    message: &mut Message,
    at: i64,
) -> Result<(), sqlx::Error> {
    sql!(
        "UPDATE messages SET open_count = open_count + 1, opened_at = COALESCE(opened_at, $1) WHERE id = $2",
        at,
        &message.id
    )
    .execute_tx(tx)
    .await?;
    message.open_count += 1;
    message.opened_at.get_or_insert(at);
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::messages::MessageStatus::{
        Bounced, Complained, Delayed, Delivered, Draft, Failed, Queued, Received, Rejected, Sent,
    };
    use crate::store::tests::TempSqlite;
    use ProviderEventKind::*;

    /// An outbound message already `sent`, as a send leaves it; returns its
    /// id and provider message id.
    pub(crate) async fn sent_message(db: &Db) -> (String, String) {
        let id = ids::new_id("msg");
        let pid = format!("0100-{id}");
        record_sent_message(db, &id, &pid).await;
        (id, pid)
    }

    /// Records the message `id`, `sent` with provider message id `pid`.
    pub(crate) async fn record_sent_message(db: &Db, id: &str, pid: &str) {
        sql!(
            "INSERT INTO messages (id, thread_id, mailbox_id, mailbox, domain, direction, is_draft, \
             folder, message_id, provider_message_id, from_address, to_addresses, cc_addresses, \
             bcc_addresses, subject, text_body, html_body, search_body, headers, status, open_count, \
             is_read, is_starred, has_attachments, created_at) \
             VALUES ($1, $2, $3, $4, $5, 'outbound', 0, 'sent', $6, $7, $4, $8, '[]', '[]', 's', 't', \
             '', 't', '{}', 'sent', 0, 0, 0, 0, $9)",
            id,
            ids::new_id("thr"),
            ids::new_id("mbx"),
            "team@example.com",
            "example.com",
            format!("<{id}@example.com>"),
            pid,
            r#"["a@x.com"]"#,
            clock::now_micros()
        )
        .execute(db.writer())
        .await
        .unwrap();
    }

    pub(crate) fn event(pid: &str, kind: ProviderEventKind, detail: Option<&str>) -> ProviderEvent {
        ProviderEvent {
            provider_message_id: pid.to_string(),
            kind,
            recipients: vec!["a@x.com".to_string()],
            detail: detail.map(str::to_string),
            occurred_at: clock::now_micros(),
            delivery_id: None,
            message_tag: None,
        }
    }

    pub(crate) async fn status_and_error(db: &Db, id: &str) -> (String, Option<String>) {
        let row = sql!("SELECT status, error FROM messages WHERE id = $1", id)
            .fetch_one(db.reader())
            .await
            .unwrap();
        (row.text("status").unwrap(), row.opt_text("error").unwrap())
    }

    /// The outbox events of each type, in order.
    pub(crate) async fn outbox(db: &Db) -> Vec<String> {
        sql!("SELECT type FROM events ORDER BY seq")
            .fetch_all(db.reader())
            .await
            .unwrap()
            .iter()
            .map(|r| r.text("type").unwrap())
            .collect()
    }

    #[tokio::test]
    async fn a_late_reject_or_rendering_failure_leaves_a_delivered_message_alone() {
        assert_eq!(next(Delivered, Reject), None);
        assert_eq!(next(Delivered, RenderingFailure), None);
        let temp = TempSqlite::new("late-failures").await;
        let db = &temp.db;
        let (id, pid) = sent_message(db).await;
        let delivery = event(&pid, Delivery, Some("250 ok"));
        assert_eq!(ingest(db, &delivery).await.unwrap(), Ingested::Applied);
        assert_eq!(
            status_and_error(db, &id).await,
            ("delivered".to_string(), None)
        );
        assert_eq!(outbox(db).await, ["email.delivered"]);

        for (kind, detail) in [
            (Reject, "Bad content"),
            (RenderingFailure, "Attribute 'name' is not present"),
        ] {
            let late = event(&pid, kind, Some(detail));
            assert_eq!(ingest(db, &late).await.unwrap(), Ingested::Applied);
            assert_eq!(
                status_and_error(db, &id).await,
                ("delivered".to_string(), None),
                "{kind:?} after delivery"
            );
        }
        assert_eq!(outbox(db).await, ["email.delivered"]);

        // The same events on a message not yet delivered do move it.
        let (rejected, rpid) = sent_message(db).await;
        ingest(db, &event(&rpid, Reject, Some("Bad content")))
            .await
            .unwrap();
        assert_eq!(
            status_and_error(db, &rejected).await,
            ("rejected".to_string(), Some("Bad content".to_string()))
        );
        let (failed, fpid) = sent_message(db).await;
        ingest(db, &event(&fpid, RenderingFailure, Some("no name")))
            .await
            .unwrap();
        assert_eq!(status_and_error(db, &failed).await.0, "failed");
        assert_eq!(
            outbox(db).await,
            ["email.delivered", "email.rejected", "email.failed"]
        );
        temp.remove().await;
    }

    /// One batch moving one message several times leaves it at the last
    /// status reached, with an outbox event per move; a message the batch
    /// cannot move keeps its status.
    #[tokio::test]
    async fn a_batch_moves_each_message_to_the_last_status_it_reaches() {
        let temp = TempSqlite::new("batch-moves").await;
        let db = &temp.db;
        let (first, pid1) = sent_message(db).await;
        let (second, pid2) = sent_message(db).await;
        let (third, pid3) = sent_message(db).await;
        ingest(db, &event(&pid3, Delivery, None)).await.unwrap();
        let batch = vec![
            event(&pid1, DeliveryDelay, Some("mailbox full")),
            event(&pid2, Delivery, None),
            event(&pid1, Delivery, None),
            event(&pid3, Reject, Some("late")),
            event(&pid1, Complaint, None),
        ];
        let outcomes = ingest_all(db, batch).await.unwrap();
        assert_eq!(outcomes, vec![Ingested::Applied; 5]);
        assert_eq!(status_and_error(db, &first).await.0, "complained");
        assert_eq!(status_and_error(db, &second).await.0, "delivered");
        assert_eq!(
            status_and_error(db, &third).await,
            ("delivered".to_string(), None)
        );
        assert_eq!(
            outbox(db).await,
            [
                "email.delivered",
                "email.delayed",
                "email.delivered",
                "email.delivered",
                "email.complained"
            ]
        );

        temp.remove().await;
    }

    #[tokio::test]
    async fn a_late_delivery_delay_writes_no_outbox_event() {
        let temp = TempSqlite::new("late-delay").await;
        let db = &temp.db;
        let (id, pid) = sent_message(db).await;
        ingest(db, &event(&pid, Delivery, Some("250 ok")))
            .await
            .unwrap();
        assert_eq!(outbox(db).await, ["email.delivered"]);
        // Delays are not kept once per recipient: two late ones, one batch.
        let late = vec![
            event(&pid, DeliveryDelay, Some("421 busy")),
            event(&pid, DeliveryDelay, Some("421 still busy")),
        ];
        let outcomes = ingest_all(db, late).await.unwrap();
        assert_eq!(outcomes, [Ingested::Applied, Ingested::Applied]);
        ingest(db, &event(&pid, DeliveryDelay, Some("421 busy again")))
            .await
            .unwrap();
        assert_eq!(status_and_error(db, &id).await.0, "delivered");
        assert_eq!(outbox(db).await, ["email.delivered"]);

        // A delay before delivery does move the message and is announced.
        let (delayed, dpid) = sent_message(db).await;
        ingest(db, &event(&dpid, DeliveryDelay, Some("421 busy")))
            .await
            .unwrap();
        assert_eq!(status_and_error(db, &delayed).await.0, "delayed");
        assert_eq!(outbox(db).await, ["email.delivered", "email.delayed"]);
        temp.remove().await;
    }

    /// Every status paired with every event kind but the row's own: none
    /// of them moves, so each row below is the only way into its status.
    fn only(from: &[MessageStatus], event: ProviderEventKind, to: MessageStatus) {
        for status in MessageStatus::ALL {
            let expected = from.contains(&status).then_some(to);
            assert_eq!(next(status, event), expected, "{status:?} on {event:?}");
        }
    }

    #[test]
    fn send_moves_queued_to_sent() {
        only(&[Queued], Send, Sent);
    }

    #[test]
    fn delivery_moves_queued_sent_and_delayed_to_delivered() {
        only(&[Queued, Sent, Delayed], Delivery, Delivered);
    }

    #[test]
    fn a_bounce_moves_queued_sent_and_delayed_to_bounced() {
        only(
            &[Queued, Sent, Delayed],
            Bounce { permanent: true },
            Bounced,
        );
        only(
            &[Queued, Sent, Delayed],
            Bounce { permanent: false },
            Bounced,
        );
    }

    #[test]
    fn a_delay_moves_queued_and_sent_to_delayed() {
        only(&[Queued, Sent], DeliveryDelay, Delayed);
    }

    #[test]
    fn a_reject_moves_queued_and_sent_to_rejected() {
        only(&[Queued, Sent], Reject, Rejected);
    }

    #[test]
    fn a_rendering_failure_moves_queued_and_sent_to_failed() {
        only(&[Queued, Sent], RenderingFailure, Failed);
    }

    #[test]
    fn a_complaint_moves_sent_and_delivered_to_complained() {
        only(&[Sent, Delivered], Complaint, Complained);
    }

    #[test]
    fn opens_clicks_drafts_and_received_mail_never_move() {
        for status in MessageStatus::ALL {
            assert_eq!(next(status, Open), None);
            assert_eq!(next(status, Click), None);
        }
        for event in [
            Send,
            Delivery,
            Bounce { permanent: true },
            Complaint,
            Reject,
            DeliveryDelay,
            RenderingFailure,
        ] {
            assert_eq!(next(Draft, event), None);
            assert_eq!(next(Received, event), None);
        }
    }
}
