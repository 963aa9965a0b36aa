//! Background work that runs beside the HTTP API.

use std::time::{Duration, Instant};

use crate::clock;
use crate::core::waiting_events;
use crate::core::{idempotency, interrupted, rate_windows};
use crate::store::Db;
use crate::telemetry::Telemetry;

/// How often a process looks for waiting provider events that are due
/// (`core::waiting_events`), and the least time between two sweeps, so that
/// under load each sweep applies a batch rather than one event.
const SWEEP_POLL: Duration = Duration::from_millis(50);
const SWEEP_SPACING: Duration = Duration::from_millis(10);
const MAINTAIN_EVERY: Duration = Duration::from_secs(1);

/// Applies waiting provider events as they fall due or their messages
/// appear (the simulator's outcomes, SNS events that beat their send's
/// record), every process on its own; one sweeps at a time.
pub async fn provider_events(db: Db) {
    // Expiry and putting off unmatched events: after a sweep that applied
    // nothing (else unmatched events due would keep the loop busy), and at
    // least every MAINTAIN_EVERY under load.
    let mut maintained = Instant::now();
    let mut maintain = true;
    loop {
        let now = clock::now_micros();
        let next = match waiting_events::next_check(&db).await {
            Ok(next) => next,
            Err(e) => {
                tracing::warn!(error = %e, "reading waiting provider events failed");
                None
            }
        };
        if next.is_none_or(|at| at > now) {
            let wait = next.map_or(SWEEP_POLL, |at| {
                Duration::from_micros((at - now).max(0) as u64).min(SWEEP_POLL)
            });
            tokio::time::sleep(wait).await;
            continue;
        }
        maintain |= maintained.elapsed() >= MAINTAIN_EVERY;
        let swept =
            waiting_events::sweep_with(&db, now, waiting_events::SWEEP_MESSAGES, maintain).await;
        if let Ok(s) = &swept
            && !s.busy
        {
            if maintain {
                maintained = Instant::now();
            }
            maintain = s.applied == 0;
        }
        match swept {
            Ok(swept) if swept.full => continue,
            Ok(swept) if swept.busy => tokio::time::sleep(SWEEP_POLL).await,
            Ok(_) => tokio::time::sleep(SWEEP_SPACING).await,
            Err(e) => {
                tracing::warn!(error = %e, "applying waiting provider events failed; one message at a time");
                // Alone, the message that fails is found and put off, so
                // that it holds up no other (a failing database fails
                // these too, and the next round tries again).
                if let Err(e) = waiting_events::sweep_first_alone(&db, now).await {
                    match waiting_events::put_off_first(&db, now).await {
                        Ok(Some(pid)) => tracing::error!(
                            provider_message_id = %pid, error = %e,
                            "the waiting events of a message cannot be applied; put off for a minute"
                        ),
                        Ok(None) => {}
                        Err(e) => {
                            tracing::warn!(error = %e, "putting off waiting provider events failed")
                        }
                    }
                    tokio::time::sleep(SWEEP_POLL).await;
                }
            }
        }
    }
}

/// Recovers keyed sends interrupted by a crash without waiting for a retry,
/// and fails the recovered messages that no provider event claimed (see
/// `core::interrupted`); every process on its own, often enough for the
/// configured times.
pub async fn interrupted_sends(db: Db, timings: interrupted::Timings, metrics: Telemetry) {
    let every = (timings.stale_after.min(timings.give_up_after) / 4)
        .clamp(Duration::from_millis(100), Duration::from_secs(5));
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = clock::now_micros();
        match interrupted::recover_stale(&db, now, timings.stale_after).await {
            Ok(recovered) => metrics.sends_interrupted_recovered(recovered as u64),
            Err(e) => tracing::warn!(error = %e, "recovering interrupted sends failed"),
        }
        match interrupted::fail_overdue(&db, now, timings.give_up_after).await {
            Ok(0) => {}
            Ok(failed) => tracing::warn!(
                failed,
                "interrupted sends that no provider event claimed are now failed"
            ),
            Err(e) => tracing::warn!(error = %e, "failing overdue interrupted sends failed"),
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
