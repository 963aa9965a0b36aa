//! The delivery queue in the database: fan-out of outbox events into tasks,
//! claiming due tasks with a lease, and recording attempts.
//!
//! A task is one event for one endpoint. Its id is the envelope id
//! (`whd_…`) that the receiver sees in the body and the `webhook-id` header,
//! the same on every attempt and replay. `attempt` is the number of the next
//! attempt and `next_attempt_at` when it is due.
//!
//! Claiming sets `lease_until` and moves `next_attempt_at` to the same
//! instant, so a claimed task is simply "not due" until the lease runs out;
//! if its worker dies, it becomes due again then and another worker (or the
//! restarted process) takes it: at-least-once, never lost. On PostgreSQL the
//! claim locks with `FOR UPDATE SKIP LOCKED`, so several processes share
//! the queue without claiming the same task. No transaction is held across
//! an HTTP call: claim and commit, call, then record in a new transaction.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use crate::clock;
use crate::ids;
use crate::sql;
use crate::store::{Backend, Db, RowExt, Sql, Tx};
use crate::webhooks::endpoints::{DISABLE_AFTER_FAILURES, matches_event};

/// Rows per multi-row INSERT. Small on purpose: SQLite looks parameters up
/// by name in a list, so binding costs grow with the square of their number.
const INSERT_CHUNK: usize = 16;

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

fn lock_clause(backend: Backend) -> &'static str {
    match backend {
        Backend::Postgres => " FOR UPDATE SKIP LOCKED",
        Backend::Sqlite => "",
    }
}

/// The body a receiver gets: `{"id": <envelope id>, …the event payload…}`,
/// with the event payload (`type`, `created_at`, `data`) kept byte for byte.
pub fn envelope_body(envelope_id: &str, event_payload: &str) -> String {
    let id = Value::String(envelope_id.to_string()).to_string();
    let trimmed = event_payload.trim();
    match trimmed.strip_prefix('{') {
        Some(rest) if serde_json::from_str::<serde_json::Map<String, Value>>(trimmed).is_ok() => {
            if rest.trim_start().starts_with('}') {
                format!("{{\"id\":{id}}}")
            } else {
                format!("{{\"id\":{id},{rest}")
            }
        }
        // Not an object: carried whole as `data`.
        _ => {
            let data: Value =
                serde_json::from_str(trimmed).unwrap_or(Value::String(trimmed.to_string()));
            let wrapped = Wrapped {
                id: envelope_id,
                data,
            };
            serde_json::to_string(&wrapped).unwrap_or_else(|_| format!("{{\"id\":{id}}}"))
        }
    }
}

/// The body around a stored payload that is not an object (none the
/// service writes; kept deliverable rather than dropped).
#[derive(serde::Serialize)]
struct Wrapped<'a> {
    id: &'a str,
    data: Value,
}

/// Whether any event after `floor` awaits fan-out (a cheap read, for
/// polling).
///
/// `floor` lets the poll start past the events already dispatched: on
/// PostgreSQL the partial index keeps entries of dispatched rows until
/// vacuum, and a scan from the start would walk all of them every time.
pub async fn has_undispatched(db: &Db, floor: i64) -> Result<bool, sqlx::Error> {
    Ok(sql!(
        "SELECT seq FROM events WHERE dispatched_at IS NULL AND seq > $1 ORDER BY seq LIMIT 1",
        floor
    )
    .fetch_optional(db.reader())
    .await?
    .is_some())
}

/// What one fan-out transaction did.
#[derive(Debug, Clone, Copy, Default)]
pub struct Dispatched {
    pub events: usize,
    pub tasks: usize,
    /// The highest event seq fanned out.
    pub max_seq: Option<i64>,
}

/// Fans out up to `limit` undispatched events after `floor`, oldest first:
/// one task per matching enabled endpoint created before the event, and the
/// events marked dispatched, all in one transaction.
pub async fn dispatch(
    db: &Db,
    first_delay: Duration,
    limit: i64,
    floor: i64,
) -> Result<Dispatched, sqlx::Error> {
    let backend = db.backend();
    db.write(move |tx| Box::pin(dispatch_in(tx, backend, first_delay, limit, floor)))
        .await
}

async fn dispatch_in(
    tx: &mut Tx,
    backend: Backend,
    first_delay: Duration,
    limit: i64,
    floor: i64,
) -> Result<Dispatched, sqlx::Error> {
    let rows = Sql::with(
        &format!(
            "SELECT seq, id, type, mailbox_id, payload, created_at, request_id FROM events \
             WHERE dispatched_at IS NULL AND seq > $1 ORDER BY seq LIMIT {limit}{}",
            lock_clause(backend)
        ),
        vec![floor.into()],
    )
    .fetch_all_tx(tx)
    .await?;
    if rows.is_empty() {
        return Ok(Dispatched::default());
    }
    let hooks = sql!("SELECT id, events, mailbox_id, created_at FROM webhooks WHERE enabled = 1")
        .fetch_all_tx(tx)
        .await?;
    let mut endpoints: Vec<(String, Vec<String>, Option<String>, i64)> =
        Vec::with_capacity(hooks.len());
    for h in &hooks {
        endpoints.push((
            h.text("id")?,
            serde_json::from_str(&h.text("events")?).unwrap_or_default(),
            h.opt_text("mailbox_id")?,
            h.int("created_at")?,
        ));
    }
    let now = clock::now_micros();
    let due = now.saturating_add(micros(first_delay));
    let mut seqs: Vec<i64> = Vec::with_capacity(rows.len());
    let mut tasks: Vec<[crate::store::Value; 9]> = Vec::new();
    for r in &rows {
        seqs.push(r.int("seq")?);
        let event_id = r.text("id")?;
        let event_type = r.text("type")?;
        let mailbox = r.opt_text("mailbox_id")?;
        let payload = r.text("payload")?;
        let created_at = r.int("created_at")?;
        let request_id = r.opt_text("request_id")?;
        for (wid, events, wmailbox, since) in &endpoints {
            // An endpoint gets only events that happened after it was created.
            if *since > created_at
                || !matches_event(events, wmailbox.as_deref(), &event_type, mailbox.as_deref())
            {
                continue;
            }
            let id = ids::new_id("whd");
            let body = envelope_body(&id, &payload);
            tasks.push([
                id.into(),
                wid.into(),
                (&event_id).into(),
                (&event_type).into(),
                body.into(),
                1i64.into(),
                due.into(),
                now.into(),
                request_id.as_deref().into(),
            ]);
        }
    }
    let task_count = tasks.len();
    for chunk in tasks.chunks(INSERT_CHUNK) {
        let mut q = Sql::new(
            "INSERT INTO webhook_tasks (id, webhook_id, event_id, event_type, payload, attempt, next_attempt_at, created_at, request_id) VALUES ",
        );
        for (i, row) in chunk.iter().enumerate() {
            if i > 0 {
                q.push(", ");
            }
            q.bind_list(row);
        }
        q.execute_tx(tx).await?;
    }
    for chunk in seqs.chunks(INSERT_CHUNK * 8) {
        let mut q = Sql::new("UPDATE events SET dispatched_at = ");
        q.bind(now).push(" WHERE seq IN ").bind_list(chunk);
        q.execute_tx(tx).await?;
    }
    Ok(Dispatched {
        events: rows.len(),
        tasks: task_count,
        max_seq: seqs.iter().copied().max(),
    })
}

/// An enabled endpoint with due tasks, as the claimer needs it.
#[derive(Debug, Clone)]
pub struct DueEndpoint {
    pub id: String,
    pub url: String,
    pub secret: String,
    pub consecutive_failures: i64,
}

/// Enabled endpoints that have at least one task due at `now`.
///
/// Written as a correlated `ORDER BY … LIMIT 1` rather than `EXISTS`: that
/// is always one probe of the (webhook_id, next_attempt_at) index per
/// endpoint, whereas PostgreSQL may turn `EXISTS` into a hash join over the
/// whole queue (a cached generic plan made while the queue was small stays
/// even after it holds a million tasks).
pub async fn due_endpoints(db: &Db, now: i64) -> Result<Vec<DueEndpoint>, sqlx::Error> {
    let rows = sql!(
        "SELECT w.id, w.url, w.secret, w.consecutive_failures FROM webhooks w WHERE w.enabled = 1 \
         AND (SELECT t.next_attempt_at FROM webhook_tasks t WHERE t.webhook_id = w.id \
              ORDER BY t.next_attempt_at LIMIT 1) <= $1",
        now
    )
    .fetch_all(db.reader())
    .await?;
    rows.iter()
        .map(|r| {
            Ok(DueEndpoint {
                id: r.text("id")?,
                url: r.text("url")?,
                secret: r.text("secret")?,
                consecutive_failures: r.int("consecutive_failures")?,
            })
        })
        .collect()
}

/// A claimed task.
#[derive(Debug, Clone)]
pub struct Task {
    /// The envelope id.
    pub id: String,
    pub webhook_id: String,
    pub event_id: String,
    pub event_type: String,
    /// The body to post.
    pub payload: String,
    /// This attempt's number.
    pub attempt: i64,
    /// The id of the request that caused the event, if one did.
    pub request_id: Option<String>,
    /// The lease this claim holds; the record step only touches the task
    /// while the lease is still this one.
    pub lease_until: i64,
}

/// Endpoints per claim statement (one `UNION ALL` arm each).
const CLAIM_CHUNK: usize = 100;

/// Claims due tasks, oldest first, up to a number per endpoint, leasing them
/// until `now + lease`: one statement for many endpoints, each arm using the
/// (webhook_id, next_attempt_at) index, so a huge backlog at one endpoint
/// costs nothing to the others. Commits before it returns: nothing stays
/// locked.
pub async fn claim(
    db: &Db,
    wants: &[(String, i64)],
    now: i64,
    lease: Duration,
) -> Result<Vec<Task>, sqlx::Error> {
    let lease_until = now.saturating_add(micros(lease));
    let mut claims = Vec::new();
    for chunk in wants.chunks(CLAIM_CHUNK) {
        let mut q = Sql::new("UPDATE webhook_tasks SET lease_until = ");
        q.bind(lease_until)
            .push(", next_attempt_at = ")
            .bind(lease_until)
            .push(" WHERE id IN (");
        for (i, (webhook_id, limit)) in chunk.iter().enumerate() {
            if i > 0 {
                q.push(" UNION ALL ");
            }
            q.push("SELECT id FROM (SELECT id FROM webhook_tasks WHERE webhook_id = ")
                .bind(webhook_id)
                .push(" AND next_attempt_at <= ")
                .bind(now)
                .push(" ORDER BY next_attempt_at LIMIT ")
                .bind(*limit)
                .push(lock_clause(db.backend()))
                .push(&format!(") c{i}"));
        }
        q.push(") RETURNING id, webhook_id, event_id, event_type, payload, attempt, request_id");
        claims.push(q);
    }
    if claims.is_empty() {
        return Ok(Vec::new());
    }
    db.write(move |tx| {
        Box::pin(async move {
            let mut out = Vec::new();
            for q in claims {
                for r in q.fetch_all_tx(tx).await? {
                    out.push(Task {
                        id: r.text("id")?,
                        webhook_id: r.text("webhook_id")?,
                        event_id: r.text("event_id")?,
                        event_type: r.text("event_type")?,
                        payload: r.text("payload")?,
                        attempt: r.int("attempt")?,
                        request_id: r.opt_text("request_id")?,
                        lease_until,
                    });
                }
            }
            Ok(out)
        })
    })
    .await
}

/// One finished attempt, to be recorded.
#[derive(Debug, Clone)]
pub struct Finished {
    pub webhook_id: String,
    pub envelope_id: String,
    pub event_id: Option<String>,
    pub event_type: String,
    pub payload: String,
    pub attempt: i64,
    pub status: Option<u16>,
    pub response_body: String,
    pub error: Option<String>,
    pub duration_ms: i64,
    pub succeeded: bool,
    pub retryable: bool,
    /// When the attempt started (the record's `created_at`).
    pub started_at: i64,
    /// When it ended (retry waits count from here).
    pub ended_at: i64,
    /// The lease of the queued task this attempt came from; `None` for
    /// pings and replays, which have no task.
    pub task_lease: Option<i64>,
    /// The record id to use; `None` picks the envelope id for attempt 1 and
    /// a fresh id otherwise.
    pub record_id: Option<String>,
}

impl Finished {
    fn record_id(&self) -> String {
        match &self.record_id {
            Some(id) => id.clone(),
            None if self.attempt == 1 => self.envelope_id.clone(),
            None => ids::new_id("whd"),
        }
    }
}

/// Per-endpoint effect of a batch of attempts, in the order they finished.
#[derive(Default)]
struct EndpointEffect {
    had_success: bool,
    /// Failures after the last success (or in all, without a success).
    failures_tail: i64,
    last_status: Option<i64>,
    last_success_at: Option<i64>,
    last_error_at: Option<i64>,
    last_error: Option<String>,
}

/// Records finished attempts in one transaction: the endpoints' state (in id
/// order, so concurrent recorders lock rows in the same order), one delivery
/// record per attempt, and the tasks (deleted when done, rescheduled when
/// another attempt is due). Returns the record ids, in input order; `None`
/// for attempts of endpoints deleted meanwhile (not recorded).
pub async fn record(
    db: &Db,
    finished: &[Finished],
    delays: &[Duration],
) -> Result<Vec<Option<String>>, sqlx::Error> {
    if finished.is_empty() {
        return Ok(Vec::new());
    }
    let backend = db.backend();
    let finished = finished.to_vec();
    let delays = delays.to_vec();
    db.write(move |tx| Box::pin(async move { record_in(tx, backend, &finished, &delays).await }))
        .await
}

async fn record_in(
    tx: &mut Tx,
    backend: Backend,
    finished: &[Finished],
    delays: &[Duration],
) -> Result<Vec<Option<String>>, sqlx::Error> {
    let mut effects: BTreeMap<&str, EndpointEffect> = BTreeMap::new();
    for f in finished {
        let e = effects.entry(f.webhook_id.as_str()).or_default();
        e.last_status = Some(f.status.map(i64::from).unwrap_or(0));
        if f.succeeded {
            e.had_success = true;
            e.failures_tail = 0;
            e.last_success_at = Some(f.ended_at);
        } else {
            e.failures_tail += 1;
            e.last_error_at = Some(f.ended_at);
            e.last_error = f.error.clone();
        }
    }
    if backend == Backend::Postgres {
        // Lock the endpoints in id order first: recorders of several
        // processes then never wait on each other in a cycle.
        let ids: Vec<&str> = effects.keys().copied().collect();
        let mut q = Sql::new("SELECT id FROM webhooks WHERE id IN ");
        q.bind_list(&ids).push(" ORDER BY id FOR UPDATE");
        q.fetch_all_tx(tx).await?;
    }
    let mut alive: Vec<String> = Vec::with_capacity(effects.len());
    // Endpoints whose attempts all succeeded: one statement for all of them.
    let clean: Vec<(&str, &EndpointEffect)> = effects
        .iter()
        .filter(|(_, e)| e.had_success && e.failures_tail == 0)
        .map(|(id, e)| (*id, e))
        .collect();
    if !clean.is_empty() {
        let mut q = Sql::new("UPDATE webhooks SET consecutive_failures = 0, last_status = CASE id");
        for (id, e) in &clean {
            q.push(" WHEN ")
                .bind(*id)
                .push(" THEN ")
                .bind(e.last_status);
        }
        q.push(" END, last_delivered_at = CASE id");
        for (id, e) in &clean {
            q.push(" WHEN ")
                .bind(*id)
                .push(" THEN ")
                .bind(e.last_success_at);
        }
        q.push(" END WHERE id IN ");
        let ids: Vec<&str> = clean.iter().map(|(id, _)| *id).collect();
        q.bind_list(&ids).push(" RETURNING id");
        for r in q.fetch_all_tx(tx).await? {
            alive.push(r.text("id")?);
        }
    }
    for (id, e) in &effects {
        if e.had_success && e.failures_tail == 0 {
            continue;
        }
        // new count = a * old + b
        let (a, b) = if e.had_success {
            (0i64, e.failures_tail)
        } else {
            (1i64, e.failures_tail)
        };
        let n = sql!(
            "UPDATE webhooks SET consecutive_failures = $1 * consecutive_failures + $2, \
             enabled = CASE WHEN $1 * consecutive_failures + $2 >= $3 THEN 0 ELSE enabled END, \
             last_status = $4, \
             last_delivered_at = COALESCE($5, last_delivered_at), \
             last_error_at = COALESCE($6, last_error_at), \
             last_error = CASE WHEN $6 IS NULL THEN last_error ELSE $7 END \
             WHERE id = $8",
            a,
            b,
            DISABLE_AFTER_FAILURES,
            e.last_status,
            e.last_success_at,
            e.last_error_at,
            e.last_error.clone(),
            *id
        )
        .execute_tx(tx)
        .await?;
        if n > 0 {
            alive.push((*id).to_string());
        }
    }
    let alive: std::collections::HashSet<&str> = alive.iter().map(String::as_str).collect();

    let mut ids_out: Vec<Option<String>> = Vec::with_capacity(finished.len());
    let mut rows: Vec<(String, &Finished)> = Vec::with_capacity(finished.len());
    for f in finished {
        if alive.contains(f.webhook_id.as_str()) {
            let id = f.record_id();
            ids_out.push(Some(id.clone()));
            rows.push((id, f));
        } else {
            ids_out.push(None);
        }
    }
    let mut inserted: u64 = 0;
    for chunk in rows.chunks(INSERT_CHUNK) {
        let mut q = Sql::new(
            "INSERT INTO webhook_deliveries (id, envelope_id, webhook_id, event_id, event, payload, attempt, \
             status_code, response_body, error, duration_ms, succeeded, created_at) VALUES ",
        );
        for (i, (id, f)) in chunk.iter().enumerate() {
            if i > 0 {
                q.push(", ");
            }
            delivery_values(&mut q, id, f);
        }
        q.push(" ON CONFLICT (id) DO NOTHING");
        inserted += q.execute_tx(tx).await?;
    }
    if inserted < rows.len() as u64 {
        // An attempt-1 record already exists under the envelope id: a task
        // whose lease ran out was attempted twice. The later one gets its
        // own id, so every attempt stays on record.
        for (pos, out) in ids_out.iter_mut().enumerate() {
            let Some(id) = out.clone() else { continue };
            let f = &finished[pos];
            let existing = sql!(
                "SELECT created_at, duration_ms FROM webhook_deliveries WHERE id = $1",
                &id
            )
            .fetch_optional_tx(tx)
            .await?;
            let ours = match &existing {
                Some(r) => {
                    r.int("created_at")? == f.started_at && r.int("duration_ms")? == f.duration_ms
                }
                None => false,
            };
            if !ours {
                let fresh = ids::new_id("whd");
                let mut q = Sql::new(
                    "INSERT INTO webhook_deliveries (id, envelope_id, webhook_id, event_id, event, payload, attempt, \
                     status_code, response_body, error, duration_ms, succeeded, created_at) VALUES ",
                );
                delivery_values(&mut q, &fresh, f);
                q.execute_tx(tx).await?;
                *out = Some(fresh);
            }
        }
    }

    let max_attempts = delays.len() as i64;
    let mut done: Vec<String> = Vec::new();
    for f in finished {
        let Some(lease) = f.task_lease else { continue };
        let again = !f.succeeded && f.retryable && f.attempt < max_attempts;
        if again && alive.contains(f.webhook_id.as_str()) {
            let wait = usize::try_from(f.attempt)
                .ok()
                .and_then(|i| delays.get(i))
                .copied()
                .unwrap_or_default();
            sql!(
                "UPDATE webhook_tasks SET attempt = $1, next_attempt_at = $2, lease_until = NULL \
                 WHERE id = $3 AND lease_until = $4",
                f.attempt + 1,
                f.ended_at.saturating_add(micros(wait)),
                &f.envelope_id,
                lease
            )
            .execute_tx(tx)
            .await?;
        } else {
            done.push(f.envelope_id.clone());
        }
    }
    for chunk in done.chunks(INSERT_CHUNK * 8) {
        let mut q = Sql::new("DELETE FROM webhook_tasks WHERE id IN ");
        q.bind_list(chunk);
        q.execute_tx(tx).await?;
    }
    Ok(ids_out)
}

fn delivery_values(q: &mut Sql, id: &str, f: &Finished) {
    q.bind_list(&[
        crate::store::Value::from(id),
        (&f.envelope_id).into(),
        (&f.webhook_id).into(),
        f.event_id.clone().into(),
        (&f.event_type).into(),
        (&f.payload).into(),
        f.attempt.into(),
        i64::from(f.status.unwrap_or(0)).into(),
        (&f.response_body).into(),
        f.error.clone().into(),
        f.duration_ms.into(),
        f.succeeded.into(),
        f.started_at.into(),
    ]);
}

/// Queue depth is counted up to this many tasks: a count of a huge
/// backlog would cost the scrape a walk of all of it.
pub const DEPTH_COUNTED_UP_TO: i64 = 100_000;

/// The queue's state for `/metrics`, read from the database so that every
/// process of a deployment reports the same figures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QueueGauges {
    /// Tasks in the queue (due, waiting for a retry or in flight), at most
    /// [`DEPTH_COUNTED_UP_TO`].
    pub depth: i64,
    /// Microseconds the oldest due task of an enabled endpoint has waited
    /// (0 when none is due).
    pub oldest_due_age: i64,
    /// Endpoints disabled, by their owner or after repeated failures.
    pub disabled_endpoints: i64,
}

/// Reads [`QueueGauges`]: three bounded reads (the oldest due task is one
/// probe of the (webhook_id, next_attempt_at) index per enabled endpoint).
pub async fn gauges(db: &Db, now: i64) -> Result<QueueGauges, sqlx::Error> {
    let depth = sql!(
        "SELECT COUNT(*) AS n FROM (SELECT 1 FROM webhook_tasks LIMIT $1) q",
        DEPTH_COUNTED_UP_TO
    )
    .fetch_one(db.reader())
    .await?
    .int("n")?;
    let oldest = sql!(
        "SELECT MIN((SELECT t.next_attempt_at FROM webhook_tasks t WHERE t.webhook_id = w.id \
         ORDER BY t.next_attempt_at LIMIT 1)) AS oldest FROM webhooks w WHERE w.enabled = 1"
    )
    .fetch_one(db.reader())
    .await?
    .opt_int("oldest")?;
    let disabled_endpoints = sql!("SELECT COUNT(*) AS n FROM webhooks WHERE enabled = 0")
        .fetch_one(db.reader())
        .await?
        .int("n")?;
    Ok(QueueGauges {
        depth,
        oldest_due_age: oldest.map_or(0, |o| now.saturating_sub(o).max(0)),
        disabled_endpoints,
    })
}

/// Gives back the leases of claimed tasks that were never attempted (at
/// shutdown), so they are due again at once.
pub async fn release(db: &Db, tasks: &[(String, i64)]) -> Result<(), sqlx::Error> {
    let now = clock::now_micros();
    for (id, lease) in tasks {
        sql!(
            "UPDATE webhook_tasks SET lease_until = NULL, next_attempt_at = $1 WHERE id = $2 AND lease_until = $3",
            now,
            id,
            *lease
        )
        .execute(db.writer())
        .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_puts_the_id_first_and_keeps_the_payload() {
        let body = envelope_body(
            "whd_1",
            r#"{"created_at":"2026-01-01T00:00:00.000000Z","data":{"a":1},"type":"email.sent"}"#,
        );
        assert_eq!(
            body,
            r#"{"id":"whd_1","created_at":"2026-01-01T00:00:00.000000Z","data":{"a":1},"type":"email.sent"}"#
        );
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["id"], "whd_1");
        assert_eq!(envelope_body("whd_2", " {} "), r#"{"id":"whd_2"}"#);
        let v: Value = serde_json::from_str(&envelope_body("whd_3", "[1]")).unwrap();
        assert_eq!(v["data"], serde_json::json!([1]));
        let v: Value = serde_json::from_str(&envelope_body("whd_4", "{nope")).unwrap();
        assert_eq!(v["id"], "whd_4");
    }

    /// Bytes as the `json!` that built them before: `id`, then `data`.
    #[test]
    fn a_payload_that_is_not_an_object_is_wrapped_as_before() {
        assert_eq!(
            envelope_body("whd_3", "[1]"),
            r#"{"id":"whd_3","data":[1]}"#
        );
        assert_eq!(
            envelope_body("whd_4", "{nope"),
            r#"{"id":"whd_4","data":"{nope"}"#
        );
    }
}
