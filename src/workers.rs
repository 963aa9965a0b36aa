//! Background work that runs beside the HTTP API.

use std::time::Duration;

use tokio::sync::mpsc::UnboundedReceiver;

use crate::core::idempotency;
use crate::core::provider_events::{self, Ingested};
use crate::provider::ProviderEvent;
use crate::store::Db;

/// Drains provider events into the ingestion path, many per transaction.
/// An event for a message whose send is not recorded yet is retried for a
/// few seconds on its own.
pub async fn provider_events(db: Db, mut events: UnboundedReceiver<ProviderEvent>) {
    let mut batch = Vec::with_capacity(256);
    while events.recv_many(&mut batch, 256).await > 0 {
        let mut later = Vec::new();
        match ingest_batch(&db, &batch, &mut later).await {
            Ok(()) => {}
            Err(e) => {
                tracing::warn!(error = %e, "provider event batch failed; retrying one by one");
                later = std::mem::take(&mut batch);
            }
        }
        batch.clear();
        for ev in later {
            let db = db.clone();
            tokio::spawn(async move { retry_one(&db, ev).await });
        }
    }
}

async fn ingest_batch(
    db: &Db,
    batch: &[ProviderEvent],
    later: &mut Vec<ProviderEvent>,
) -> Result<(), sqlx::Error> {
    let outcomes = provider_events::ingest_all(db, batch.to_vec()).await?;
    for (ev, outcome) in batch.iter().zip(outcomes) {
        if outcome == Ingested::UnknownMessage {
            later.push(ev.clone());
        }
    }
    Ok(())
}

async fn retry_one(db: &Db, ev: ProviderEvent) {
    for attempt in 0..50u32 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        match provider_events::ingest(db, &ev).await {
            Ok(Ingested::Applied) => return,
            Ok(Ingested::UnknownMessage) => {}
            Err(e) => tracing::warn!(error = %e, attempt, "provider event not ingested yet"),
        }
    }
    tracing::error!(provider_message_id = %ev.provider_message_id, "dropping a provider event for an unknown message");
}

/// Deletes idempotency records past their 24 hours, every ten minutes.
pub async fn purge_idempotency_keys(db: Db) {
    let mut tick = tokio::time::interval(Duration::from_secs(600));
    loop {
        tick.tick().await;
        if let Err(e) = idempotency::purge_expired(&db).await {
            tracing::warn!(error = %e, "purging idempotency keys failed");
        }
    }
}
