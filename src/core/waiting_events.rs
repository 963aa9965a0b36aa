//! Provider events that cannot be applied yet, kept in the database
//! (`waiting_provider_events`) instead of in memory:
//!
//! - an event for a message whose send is not recorded yet (an SNS
//!   notification can beat the send's commit, or come for an interrupted
//!   send), stored before SNS gets its 2xx;
//! - the simulator's outcomes, stored by the send's own record transaction
//!   with the time they are due, as SES would hold them.
//!
//! A sweep ([`sweep`], run by every process a few times a second) applies
//! each due event whose message now exists, every waiting event of one
//! message in arrival order (`seq`), in one transaction with the deletion of
//! the rows it applied. On PostgreSQL one process sweeps at a time (a
//! transaction-scoped advisory lock), and the rows it reads stay locked until
//! its commit, so that an SNS notification for the same message
//! ([`ingest_durably`]) waits for it instead of overtaking it: no event is
//! applied twice, none out of order. An event whose message is still unknown
//! is looked at again after a wait that grows with its age (100 ms to 60 s)
//! and dropped at [`EVENT_TTL`].

use std::time::Duration;

use crate::clock;
use crate::core::provider_events::{self, Ingested};
use crate::provider::{PlannedEvent, ProviderEvent, ProviderEventKind};
use crate::sql;
use crate::store::{Backend, Db, RowExt, Sql, Tx, TxRow};

/// How long an event for a message never recorded is kept.
pub const EVENT_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// The first and the longest wait before an unmatched event is looked at
/// again; in between, its age.
const FIRST_RECHECK_MICROS: i64 = 100_000;
const LONGEST_RECHECK_MICROS: i64 = 60_000_000;

/// Waiting events `/metrics` counts at most (and looks for the messages of).
pub const COUNTED_UP_TO: i64 = 10_000;

/// Messages whose waiting events one sweep applies at most.
pub const SWEEP_MESSAGES: i64 = 256;

/// The advisory lock that lets one PostgreSQL process sweep at a time.
const SWEEP_LOCK: i64 = 7_283_452;

/// How a kind is stored.
fn kind_name(kind: ProviderEventKind) -> &'static str {
    match kind {
        ProviderEventKind::Send => "send",
        ProviderEventKind::Delivery => "delivery",
        ProviderEventKind::Bounce { permanent: true } => "bounce",
        ProviderEventKind::Bounce { permanent: false } => "soft_bounce",
        ProviderEventKind::Complaint => "complaint",
        ProviderEventKind::Reject => "reject",
        ProviderEventKind::DeliveryDelay => "delivery_delay",
        ProviderEventKind::Open => "open",
        ProviderEventKind::Click => "click",
        ProviderEventKind::RenderingFailure => "rendering_failure",
    }
}

fn kind_from_name(name: &str) -> Option<ProviderEventKind> {
    Some(match name {
        "send" => ProviderEventKind::Send,
        "delivery" => ProviderEventKind::Delivery,
        "bounce" => ProviderEventKind::Bounce { permanent: true },
        "soft_bounce" => ProviderEventKind::Bounce { permanent: false },
        "complaint" => ProviderEventKind::Complaint,
        "reject" => ProviderEventKind::Reject,
        "delivery_delay" => ProviderEventKind::DeliveryDelay,
        "open" => ProviderEventKind::Open,
        "click" => ProviderEventKind::Click,
        "rendering_failure" => ProviderEventKind::RenderingFailure,
        _ => return None,
    })
}

const INSERT_HEAD: &str = "INSERT INTO waiting_provider_events (provider_message_id, kind, \
     recipients, detail, occurred_at, delivery_id, message_tag, due_at, check_at, expires_at, created_at) VALUES ";

fn push_row(q: &mut Sql, ev: &ProviderEvent, due_at: i64, now: i64) {
    let recipients = serde_json::to_string(&ev.recipients).unwrap_or_else(|_| "[]".into());
    q.push("(")
        .bind(ev.provider_message_id.as_str())
        .push(", ")
        .bind(kind_name(ev.kind))
        .push(", ")
        .bind(recipients)
        .push(", ")
        .bind(ev.detail.clone())
        .push(", ")
        .bind(ev.occurred_at)
        .push(", ")
        .bind(ev.delivery_id.clone())
        .push(", ")
        .bind(ev.message_tag.clone())
        .push(", ")
        .bind(due_at)
        .push(", ")
        .bind(due_at)
        .push(", ")
        .bind(due_at.max(now).saturating_add(EVENT_TTL.as_micros() as i64))
        .push(", ")
        .bind(now)
        .push(")");
}

/// One plain INSERT of `planned` (for a send's record, whose inserts go out
/// joined); `None` when there is nothing to store.
pub fn planned_insert(planned: &[PlannedEvent], now: i64) -> Option<Sql> {
    if planned.is_empty() {
        return None;
    }
    let mut q = Sql::new(INSERT_HEAD);
    for (i, p) in planned.iter().enumerate() {
        if i > 0 {
            q.push(", ");
        }
        push_row(&mut q, &p.event, p.due_at, now);
    }
    Some(q)
}

/// A waiting row read back: its seq and its event.
fn from_row(row: &TxRow) -> Result<(i64, ProviderEvent), sqlx::Error> {
    let kind_text = row.text("kind")?;
    let kind = kind_from_name(&kind_text).ok_or_else(|| {
        sqlx::Error::Decode(format!("unknown waiting provider event kind {kind_text:?}").into())
    })?;
    let recipients: Vec<String> = serde_json::from_str(&row.text("recipients")?)
        .map_err(|e| sqlx::Error::Decode(Box::new(e)))?;
    Ok((
        row.int("seq")?,
        ProviderEvent {
            provider_message_id: row.text("provider_message_id")?,
            kind,
            recipients,
            detail: row.opt_text("detail")?,
            occurred_at: row.int("occurred_at")?,
            delivery_id: row.opt_text("delivery_id")?,
            message_tag: row.opt_text("message_tag")?,
        },
    ))
}

const COLUMNS: &str = "w.seq, w.provider_message_id, w.kind, w.recipients, w.detail, w.occurred_at, w.delivery_id, w.message_tag";

/// Deletes the rows `seqs` (applied).
fn delete_statement(seqs: &[i64]) -> Sql {
    let mut q = Sql::new("DELETE FROM waiting_provider_events WHERE seq IN ");
    q.bind_list(seqs);
    q
}

/// Applies `ev` (an SNS notification) now if its message is recorded, after
/// every event of that message still waiting, in order; otherwise stores it
/// to wait. Either way it is in the database when this returns `Ok`, so the
/// notification may be answered 2xx; an `Err` has written nothing.
pub async fn ingest_durably(db: &Db, ev: ProviderEvent) -> Result<Ingested, sqlx::Error> {
    let backend = db.backend();
    db.write(move |tx| {
        Box::pin(async move { ingest_in(tx, backend, ev, clock::now_micros()).await })
    })
    .await
}

async fn ingest_in(
    tx: &mut Tx,
    backend: Backend,
    ev: ProviderEvent,
    now: i64,
) -> Result<Ingested, sqlx::Error> {
    let mut q = Sql::new(&format!(
        "SELECT {COLUMNS} FROM waiting_provider_events w WHERE w.provider_message_id = "
    ));
    q.bind(ev.provider_message_id.as_str())
        .push(" AND w.due_at <= ")
        .bind(now)
        .push(" ORDER BY w.seq");
    if backend == Backend::Postgres {
        // A sweep applying these rows holds them: wait for it.
        q.push(" FOR UPDATE");
    }
    let mut seqs = Vec::new();
    let mut batch = Vec::new();
    for row in q.fetch_all_tx(tx).await? {
        let (seq, waiting) = from_row(&row)?;
        seqs.push(seq);
        batch.push(waiting);
    }
    batch.push(ev.clone());
    let mut outcomes = provider_events::ingest_batch_in(tx, backend, &batch).await?;
    if outcomes.last() == Some(&Ingested::UnknownMessage)
        && let Some(tag) = &ev.message_tag
        && adopt_provider_id(tx, tag, &ev.provider_message_id).await?
    {
        outcomes = provider_events::ingest_batch_in(tx, backend, &batch).await?;
    }
    if outcomes.last() == Some(&Ingested::UnknownMessage) {
        // SNS redelivers a notification it did not see answered: kept once.
        if let Some(delivery_id) = &ev.delivery_id {
            let stored = sql!(
                "SELECT seq FROM waiting_provider_events WHERE provider_message_id = $1 AND delivery_id = $2",
                ev.provider_message_id.as_str(),
                delivery_id.as_str()
            )
            .fetch_optional_tx(tx)
            .await?;
            if stored.is_some() {
                return Ok(Ingested::UnknownMessage);
            }
        }
        let mut insert = Sql::new(INSERT_HEAD);
        push_row(&mut insert, &ev, now, now);
        // Due at once: the next sweep looks for its message (and brings
        // the message's other waiting events with it).
        insert.execute_tx(tx).await?;
        return Ok(Ingested::UnknownMessage);
    }
    if !seqs.is_empty() {
        delete_statement(&seqs).execute_tx(tx).await?;
    }
    Ok(Ingested::Applied)
}

/// Gives the provider's id to the message `tag` names when that message was
/// recovered from its intent after a crash (`core::interrupted`) and so never
/// learnt it: the events of its send then find it. Whether it did.
pub(crate) async fn adopt_provider_id(
    tx: &mut Tx,
    tag: &str,
    provider_message_id: &str,
) -> Result<bool, sqlx::Error> {
    let changed = sql!(
        "UPDATE messages SET provider_message_id = $1 \
         WHERE id = $2 AND provider_message_id IS NULL AND status = 'queued'",
        provider_message_id,
        tag
    )
    .execute_tx(tx)
    .await?;
    Ok(changed > 0)
}

/// What one sweep did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    /// Waiting events applied.
    pub applied: usize,
    /// Unmatched events dropped at their expiry.
    pub expired: u64,
    /// Whether it stopped at its size: more may be due at once.
    pub full: bool,
    /// Whether another process was sweeping (PostgreSQL).
    pub busy: bool,
}

/// Applies the waiting events that are due and whose messages exist, drops
/// the expired ones, and puts off the next look at the rest; `now` is the
/// time it takes as current.
pub async fn sweep(db: &Db, now: i64) -> Result<Swept, sqlx::Error> {
    sweep_some(db, now, SWEEP_MESSAGES).await
}

/// As [`sweep`], applying the events of at most `messages` messages.
pub async fn sweep_some(db: &Db, now: i64, messages: i64) -> Result<Swept, sqlx::Error> {
    sweep_with(db, now, messages, true).await
}

/// As [`sweep_some`]; without `maintain` it neither drops expired events
/// nor puts off unmatched ones (two statements a sweep saved under load,
/// when the caller does it now and then).
pub async fn sweep_with(
    db: &Db,
    now: i64,
    messages: i64,
    maintain: bool,
) -> Result<Swept, sqlx::Error> {
    let backend = db.backend();
    db.write(move |tx| {
        Box::pin(async move { sweep_in(tx, backend, now, messages, maintain).await })
    })
    .await
}

/// The events of the one message the next sweep would apply first, after
/// a sweep failed: a failed PostgreSQL transaction may hold the sweep lock
/// until its connection has rolled back, so a busy answer is asked again.
pub async fn sweep_first_alone(db: &Db, now: i64) -> Result<Swept, sqlx::Error> {
    for _ in 0..20 {
        let swept = sweep_some(db, now, 1).await?;
        if !swept.busy {
            return Ok(swept);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(Swept {
        busy: true,
        ..Swept::default()
    })
}

/// Puts off by a minute the events of the message the next sweep would
/// apply first, when applying them fails even alone: one bad row must not
/// hold up every other message's events. Their provider message id, if any.
pub async fn put_off_first(db: &Db, now: i64) -> Result<Option<String>, sqlx::Error> {
    let row = db
        .write_fetch_optional(sql!(
            "SELECT q.provider_message_id FROM waiting_provider_events q \
             WHERE q.check_at <= $1 AND q.due_at <= $1 AND EXISTS \
             (SELECT 1 FROM messages m WHERE m.provider_message_id = q.provider_message_id) \
             ORDER BY q.check_at LIMIT 1",
            now
        ))
        .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    let pid = row.text("provider_message_id")?;
    db.write_statement(sql!(
        "UPDATE waiting_provider_events SET check_at = $1 WHERE provider_message_id = $2",
        now.saturating_add(LONGEST_RECHECK_MICROS),
        pid.as_str()
    ))
    .await?;
    Ok(Some(pid))
}

async fn sweep_in(
    tx: &mut Tx,
    backend: Backend,
    now: i64,
    messages: i64,
    maintain: bool,
) -> Result<Swept, sqlx::Error> {
    if backend == Backend::Postgres {
        let got = Sql::new(&format!(
            "SELECT CAST(CASE WHEN pg_try_advisory_xact_lock({SWEEP_LOCK}) THEN 1 ELSE 0 END AS BIGINT) AS got"
        ))
        .fetch_one_tx(tx)
        .await?
        .int("got")?;
        if got == 0 {
            return Ok(Swept {
                busy: true,
                ..Swept::default()
            });
        }
    }
    // Every due event of the messages that have a due event to look at and
    // exist now, in arrival order.
    let mut q = Sql::new(&format!(
        "SELECT {COLUMNS} FROM waiting_provider_events w WHERE w.due_at <= "
    ));
    q.bind(now)
        .push(
            " AND w.provider_message_id IN (SELECT q.provider_message_id FROM waiting_provider_events q \
             WHERE q.check_at <= ",
        )
        .bind(now)
        .push(
            " AND EXISTS (SELECT 1 FROM messages m WHERE m.provider_message_id = q.provider_message_id) \
             ORDER BY q.check_at LIMIT ",
        )
        .bind(messages)
        .push(") ORDER BY w.seq");
    if backend == Backend::Postgres {
        q.push(" FOR UPDATE");
    }
    let rows = q.fetch_all_tx(tx).await?;
    let full = rows.len() as i64 >= messages;
    let mut seqs = Vec::with_capacity(rows.len());
    let mut batch = Vec::with_capacity(rows.len());
    for row in &rows {
        let (seq, ev) = from_row(row)?;
        seqs.push(seq);
        batch.push(ev);
    }
    let mut applied = 0;
    if !batch.is_empty() {
        let outcomes = provider_events::ingest_batch_in(tx, backend, &batch).await?;
        let done: Vec<i64> = seqs
            .iter()
            .zip(&outcomes)
            .filter(|(_, o)| **o == Ingested::Applied)
            .map(|(s, _)| *s)
            .collect();
        applied = done.len();
        if !done.is_empty() {
            delete_statement(&done).execute_tx(tx).await?;
        }
    }
    if !maintain {
        return Ok(Swept {
            applied,
            expired: 0,
            full,
            busy: false,
        });
    }
    let expired = sql!(
        // Through the index on check_at: an unmatched event is due again
        // within a minute, so it goes within a minute of its expiry, and no
        // index of its own costs every send a write.
        "DELETE FROM waiting_provider_events WHERE check_at <= $1 AND expires_at <= $1",
        now
    )
    .execute_tx(tx)
    .await?;
    if expired > 0 {
        tracing::warn!(
            expired,
            "dropped provider events whose message was never recorded"
        );
    }
    // The rest of what was due waits for its message: look again after a
    // wait as long as its age, within bounds, so that a burst of events for
    // mail this service never sent costs little.
    sql!(
        "UPDATE waiting_provider_events SET check_at = $1 + CASE \
         WHEN $1 - created_at < $2 THEN $2 WHEN $1 - created_at > $3 THEN $3 \
         ELSE $1 - created_at END \
         WHERE check_at <= $1 AND NOT EXISTS \
         (SELECT 1 FROM messages m WHERE m.provider_message_id = waiting_provider_events.provider_message_id)",
        now,
        FIRST_RECHECK_MICROS,
        LONGEST_RECHECK_MICROS
    )
    .execute_tx(tx)
    .await?;
    Ok(Swept {
        applied,
        expired,
        full,
        busy: false,
    })
}

/// When the next sweep has work: the earliest `check_at`, if any row waits.
pub async fn next_check(db: &Db) -> Result<Option<i64>, sqlx::Error> {
    let row = db
        .lookup_optional(&sql!(
            "SELECT MIN(check_at) AS next FROM waiting_provider_events"
        ))
        .await?;
    match row {
        Some(r) => r.opt_int("next"),
        None => Ok(None),
    }
}

/// Waiting events by state, for `/metrics`: (all, those whose message is not
/// recorded).
pub async fn counts(db: &Db) -> Result<(i64, i64), sqlx::Error> {
    // Bounded: `/metrics` asks on every scrape, with no key.
    let row = sql!(
        "SELECT COUNT(*) AS waiting, COALESCE(SUM(CASE WHEN EXISTS \
         (SELECT 1 FROM messages m WHERE m.provider_message_id = w.provider_message_id) \
         THEN 0 ELSE 1 END), 0) AS unmatched \
         FROM (SELECT provider_message_id FROM waiting_provider_events LIMIT $1) w",
        COUNTED_UP_TO
    )
    .fetch_one(db.reader())
    .await?;
    Ok((row.int("waiting")?, row.int("unmatched")?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::provider_events::tests::{
        event, outbox, record_sent_message, status_and_error,
    };
    use crate::ids;
    use crate::provider::ProviderEventKind::{Bounce, Complaint, Delivery};
    use crate::store::tests::{TempSqlite, fresh_postgres};

    const SECOND: i64 = 1_000_000;

    /// Runs `check` on a fresh SQLite database and, when
    /// `PIGEONHOLE_TEST_POSTGRES_URL` is set, on a fresh PostgreSQL one.
    async fn on_each_backend<F, Fut>(name: &str, check: F)
    where
        F: Fn(Db) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        let temp = TempSqlite::new(name).await;
        check(temp.db.clone()).await;
        temp.remove().await;
        if let Some(db) = fresh_postgres().await {
            check(db.clone()).await;
            db.close().await;
        }
    }

    async fn ingest_at(db: &Db, ev: ProviderEvent, now: i64) -> Ingested {
        let backend = db.backend();
        db.write(move |tx| Box::pin(async move { ingest_in(tx, backend, ev, now).await }))
            .await
            .unwrap()
    }

    fn new_message() -> (String, String) {
        let id = ids::new_id("msg");
        let pid = format!("0100-{id}");
        (id, pid)
    }

    #[tokio::test]
    async fn an_event_for_an_unknown_message_is_stored_and_applied_in_order_once_it_is_recorded() {
        on_each_backend("waiting-in-order", |db| async move {
            let (id, pid) = new_message();
            let now = clock::now_micros();
            let mut delivery = event(&pid, Delivery, None);
            delivery.delivery_id = Some("sns-1".into());
            let mut complaint = event(&pid, Complaint, Some("abuse"));
            complaint.delivery_id = Some("sns-2".into());
            assert_eq!(
                ingest_at(&db, delivery, now).await,
                Ingested::UnknownMessage
            );
            assert_eq!(
                ingest_at(&db, complaint.clone(), now + 1).await,
                Ingested::UnknownMessage
            );
            // A notification redelivered while it waits is kept once.
            ingest_at(&db, complaint, now + 2).await;
            assert_eq!(counts(&db).await.unwrap(), (2, 2));
            // Nothing to do while the message is unknown; looked at again later.
            let swept = sweep(&db, now + 2).await.unwrap();
            assert_eq!(swept.applied, 0);
            assert!(next_check(&db).await.unwrap().unwrap() > now + 2);

            record_sent_message(&db, &id, &pid).await;
            assert_eq!(counts(&db).await.unwrap(), (2, 0));
            let later = now + FIRST_RECHECK_MICROS + 3;
            let swept = sweep(&db, later).await.unwrap();
            assert_eq!(swept.applied, 2);
            assert_eq!(status_and_error(&db, &id).await.0, "complained");
            // The delivery came first: both moved the message.
            assert_eq!(outbox(&db).await, ["email.delivered", "email.complained"]);
            assert_eq!(counts(&db).await.unwrap(), (0, 0));
            assert_eq!(next_check(&db).await.unwrap(), None);
            // Applied once: a second sweep and a redelivered notification
            // change nothing.
            assert_eq!(sweep(&db, later + 1).await.unwrap().applied, 0);
            let mut again = event(&pid, Delivery, None);
            again.delivery_id = Some("sns-1".into());
            assert_eq!(ingest_at(&db, again, later + 2).await, Ingested::Applied);
            assert_eq!(outbox(&db).await, ["email.delivered", "email.complained"]);
        })
        .await;
    }

    /// A notification for a message that is recorded by now applies the
    /// events that wait for it first, without waiting for a sweep.
    #[tokio::test]
    async fn a_notification_for_a_recorded_message_applies_the_waiting_ones_first() {
        on_each_backend("waiting-first", |db| async move {
            let (id, pid) = new_message();
            let now = clock::now_micros();
            ingest_at(&db, event(&pid, Delivery, None), now).await;
            record_sent_message(&db, &id, &pid).await;
            assert_eq!(
                ingest_at(&db, event(&pid, Complaint, None), now + 1).await,
                Ingested::Applied
            );
            assert_eq!(status_and_error(&db, &id).await.0, "complained");
            assert_eq!(outbox(&db).await, ["email.delivered", "email.complained"]);
            assert_eq!(counts(&db).await.unwrap(), (0, 0));
        })
        .await;
    }

    #[tokio::test]
    async fn unmatched_events_expire_after_the_ttl() {
        on_each_backend("waiting-expiry", |db| async move {
            let (_, pid) = new_message();
            let now = clock::now_micros();
            ingest_at(&db, event(&pid, Delivery, None), now).await;
            let ttl = EVENT_TTL.as_micros() as i64;
            let kept = sweep(&db, now + ttl - 1).await.unwrap();
            assert_eq!(kept.expired, 0);
            assert_eq!(counts(&db).await.unwrap(), (1, 1));
            // Looked at once a minute at most, however old.
            let next = next_check(&db).await.unwrap().unwrap();
            assert_eq!(next, now + ttl - 1 + LONGEST_RECHECK_MICROS);
            // Dropped at its next look past the expiry; a sweep under load
            // leaves that to a later one.
            let end = next;
            let busy = sweep_with(&db, end, SWEEP_MESSAGES, false).await.unwrap();
            assert_eq!(busy.expired, 0);
            assert_eq!(counts(&db).await.unwrap(), (1, 1));
            let gone = sweep(&db, end).await.unwrap();
            assert_eq!(gone.expired, 1);
            assert_eq!(counts(&db).await.unwrap(), (0, 0));
        })
        .await;
    }

    /// Planned outcomes wait for their time, then apply without anyone
    /// holding them in memory.
    #[tokio::test]
    async fn planned_events_apply_when_due_and_not_before() {
        on_each_backend("waiting-planned", |db| async move {
            let (id, pid) = new_message();
            record_sent_message(&db, &id, &pid).await;
            let now = clock::now_micros();
            let due_at = now + SECOND;
            let planned = [PlannedEvent {
                event: event(&pid, Bounce { permanent: true }, Some("550 no such user")),
                due_at,
            }];
            let insert = planned_insert(&planned, now).unwrap();
            db.write_statement(insert).await.unwrap();
            assert_eq!(counts(&db).await.unwrap(), (1, 0));
            assert_eq!(next_check(&db).await.unwrap(), Some(due_at));
            assert_eq!(sweep(&db, due_at - 1).await.unwrap().applied, 0);
            assert_eq!(status_and_error(&db, &id).await.0, "sent");
            assert_eq!(sweep(&db, due_at).await.unwrap().applied, 1);
            assert_eq!(status_and_error(&db, &id).await.0, "bounced");
            assert_eq!(outbox(&db).await, ["email.bounced"]);
        })
        .await;
    }

    /// A message whose waiting events cannot be applied (here a row no
    /// version of the service wrote) is put off; the others still go.
    #[tokio::test]
    async fn a_message_whose_events_fail_is_put_off_and_holds_up_no_other() {
        on_each_backend("waiting-poison", |db| async move {
            let (bad, bad_pid) = new_message();
            let (good, good_pid) = new_message();
            record_sent_message(&db, &bad, &bad_pid).await;
            record_sent_message(&db, &good, &good_pid).await;
            let now = clock::now_micros();
            db.write_statement(sql!(
                "INSERT INTO waiting_provider_events (provider_message_id, kind, recipients, \
                 occurred_at, due_at, check_at, expires_at, created_at) \
                 VALUES ($1, 'no such kind', '[]', $2, $2, $2, $3, $2)",
                bad_pid.as_str(),
                now,
                now + SECOND * 3600
            ))
            .await
            .unwrap();
            let planned = [PlannedEvent {
                event: event(&good_pid, Delivery, None),
                due_at: now + 1,
            }];
            db.write_statement(planned_insert(&planned, now).unwrap())
                .await
                .unwrap();
            let at = now + SECOND;
            assert!(sweep(&db, at).await.is_err());
            assert!(sweep_first_alone(&db, at).await.is_err());
            assert_eq!(put_off_first(&db, at).await.unwrap(), Some(bad_pid));
            // The failed sweeps' lock may still be on its way out.
            let swept = sweep_first_alone(&db, at).await.unwrap();
            assert!(!swept.busy);
            assert_eq!(swept.applied, 1);
            assert_eq!(status_and_error(&db, &good).await.0, "delivered");
            assert_eq!(status_and_error(&db, &bad).await.0, "sent");
            assert_eq!(
                next_check(&db).await.unwrap(),
                Some(at + LONGEST_RECHECK_MICROS)
            );
        })
        .await;
    }

    /// Several processes sweeping one PostgreSQL database apply each event
    /// once, each message's in order.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_sweepers_apply_each_event_once_in_order() {
        let Some(db) = fresh_postgres().await else {
            return;
        };
        let now = clock::now_micros();
        let messages: Vec<(String, String)> = (0..40).map(|_| new_message()).collect();
        for (i, (_, pid)) in messages.iter().enumerate() {
            let t = now + 2 * i as i64;
            ingest_at(&db, event(pid, Delivery, None), t).await;
            ingest_at(&db, event(pid, Complaint, None), t + 1).await;
        }
        for (id, pid) in &messages {
            record_sent_message(&db, id, pid).await;
        }
        let at = now + SECOND;
        let sweepers: Vec<_> = (0..4)
            .map(|_| {
                let db = db.clone();
                tokio::spawn(async move {
                    let mut applied = 0;
                    for _ in 0..50 {
                        applied += sweep(&db, at).await.unwrap().applied;
                    }
                    applied
                })
            })
            .collect();
        let mut applied = 0;
        for s in sweepers {
            applied += s.await.unwrap();
        }
        assert_eq!(applied, 80);
        for (id, _) in &messages {
            assert_eq!(status_and_error(&db, id).await.0, "complained");
        }
        let events = outbox(&db).await;
        assert_eq!(events.len(), 80);
        assert_eq!(counts(&db).await.unwrap(), (0, 0));
        db.close().await;
    }
}
