//! Background work that runs beside the HTTP API.

use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedReceiver;

use crate::core::provider_events::{self, Ingested};
use crate::core::{idempotency, rate_windows};
use crate::provider::ProviderEvent;
use crate::store::Db;

/// How long an event for a message whose send is not recorded yet keeps
/// being retried, and how often.
const UNKNOWN_MESSAGE_PATIENCE: Duration = Duration::from_secs(5);
const RETRY_EVERY: Duration = Duration::from_millis(100);

/// Drains provider events into the ingestion path, many per transaction.
/// Events for messages whose sends are not recorded yet wait and go again
/// in front of the next batch (or after `RETRY_EVERY`), in the order they
/// came: a complaint retried apart from its delivery could overtake it.
pub async fn provider_events(db: Db, mut events: UnboundedReceiver<ProviderEvent>) {
    let mut waiting: Vec<(ProviderEvent, Instant)> = Vec::new();
    let mut batch = Vec::with_capacity(256);
    loop {
        let received = if waiting.is_empty() {
            events.recv_many(&mut batch, 256).await
        } else {
            // recv_many is cancel-safe: a timeout loses nothing.
            tokio::time::timeout(RETRY_EVERY, events.recv_many(&mut batch, 256))
                .await
                .unwrap_or(usize::MAX)
        };
        if received == 0 {
            return;
        }
        let now = Instant::now();
        let mut all = std::mem::take(&mut waiting);
        all.extend(batch.drain(..).map(|ev| (ev, now)));
        for (ev, seen) in ingest_in_order(&db, all).await {
            if now.duration_since(seen) < UNKNOWN_MESSAGE_PATIENCE {
                waiting.push((ev, seen));
            } else {
                tracing::error!(provider_message_id = %ev.provider_message_id, "dropping a provider event for an unknown message");
            }
        }
    }
}

/// Ingests `events` in order in one write; returns, in order, those not
/// applied (their message unknown, or their write failed), each with the
/// time it was first seen.
async fn ingest_in_order(
    db: &Db,
    events: Vec<(ProviderEvent, Instant)>,
) -> Vec<(ProviderEvent, Instant)> {
    let batch: Vec<ProviderEvent> = events.iter().map(|(ev, _)| ev.clone()).collect();
    match provider_events::ingest_all(db, batch).await {
        Ok(outcomes) => events
            .into_iter()
            .zip(outcomes)
            .filter(|(_, outcome)| *outcome == Ingested::UnknownMessage)
            .map(|(ev, _)| ev)
            .collect(),
        Err(e) => {
            // One by one, so that one bad event holds up no other.
            tracing::warn!(error = %e, "provider event batch failed; retrying one by one");
            let mut left = Vec::new();
            for (ev, seen) in events {
                match provider_events::ingest(db, &ev).await {
                    Ok(Ingested::Applied) => {}
                    Ok(Ingested::UnknownMessage) => left.push((ev, seen)),
                    Err(e) => {
                        tracing::warn!(error = %e, "provider event not ingested yet");
                        left.push((ev, seen));
                    }
                }
            }
            left
        }
    }
}

/// Every ten minutes, deletes idempotency records past their 24 hours and
/// rate-limit windows that ended.
pub async fn purge_expired(db: Db) {
    let mut tick = tokio::time::interval(Duration::from_secs(600));
    loop {
        tick.tick().await;
        if let Err(e) = idempotency::purge_expired(&db).await {
            tracing::warn!(error = %e, "purging idempotency keys failed");
        }
        let now = crate::clock::now_micros() / 1_000_000;
        if let Err(e) = rate_windows::purge(&db, now - 120).await {
            tracing::warn!(error = %e, "purging rate-limit windows failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::provider_events::tests::{
        event, outbox, record_sent_message, status_and_error,
    };
    use crate::ids;
    use crate::provider::ProviderEventKind::{Complaint, Delivery};
    use crate::store::tests::TempSqlite;

    /// Events that beat their messages' records are applied once the
    /// records land, each message's in the order they came.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn early_events_are_retried_in_order() {
        let temp = TempSqlite::new("early-events").await;
        let db = temp.db.clone();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(provider_events(db.clone(), rx));
        let messages: Vec<(String, String)> = (0..20)
            .map(|_| {
                let id = ids::new_id("msg");
                (id.clone(), format!("0100-{id}"))
            })
            .collect();
        for (_, pid) in &messages {
            tx.send(event(pid, Delivery, None)).unwrap();
            tx.send(event(pid, Complaint, Some("abuse"))).unwrap();
        }
        for (id, pid) in &messages {
            record_sent_message(&db, id, pid).await;
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        for (id, _) in &messages {
            while status_and_error(&db, id).await.0 != "complained" {
                assert!(
                    std::time::Instant::now() < deadline,
                    "{id} never complained"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        // Each message's delivery came before its complaint: both wrote
        // their outbox events (a complaint first would have left the
        // delivery nothing to move).
        let events = outbox(&db).await;
        assert_eq!(events.len(), 40, "{events:?}");
        assert_eq!(
            events.iter().filter(|e| *e == "email.delivered").count(),
            20
        );
        temp.remove().await;
    }
}
