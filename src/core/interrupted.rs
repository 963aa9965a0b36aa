//! Keyed sends interrupted by a crash: never sent twice for one
//! `Idempotency-Key`, never silently lost.
//!
//! A send with an `Idempotency-Key` writes what it is about to send (its
//! [`Intent`]) into its idempotency record, in the statement that claims the
//! key and so before the provider is called: each message's id and
//! Message-ID, chosen ahead ([`Preassigned`]), with its addresses and
//! subject. The message's id also goes to SES as a message tag.
//!
//! A record still `running` after the stale time belongs to a process that
//! died. [`recover`] (run by a retry with the key, or by the sweep every
//! process runs) settles it in one transaction: each intended message that
//! is not recorded is recorded in short as `queued`, with the provider's id
//! if an SES event tagged with its id already waits for it; the record
//! becomes `done` with the reply the first request would have given, so a
//! retry replays it and nothing reaches the provider again. The provider's
//! events, matched by the tag, then move the message on (`queued` → `sent`
//! says `email.sent`); one that no event moves within the give-up time ends
//! `failed` with [`INTERRUPTED_ERROR`] and `email.failed` ([`fail_overdue`]).

use std::collections::HashMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::auth::address_domain;
use crate::core::domains;
use crate::core::error::CoreError;
use crate::core::events;
use crate::core::idempotency;
use crate::core::mailboxes::{self, Mailbox};
use crate::core::messages::{COLUMNS, Message};
use crate::core::sending::{self, Bodies, SendInput};
use crate::core::suppressions;
use crate::ids;
use crate::mime::compose::Named;
use crate::model::Timestamp;
use crate::model::events::EmailEventData;
use crate::model::messages::MessageStatus;
use crate::model::sending::{BatchItem, BatchObject, BatchResult};
use crate::model::webhooks::EventName;
use crate::sql;
use crate::store::{Backend, Db, RowExt, Sql, Tx, execute_all};

/// What `error` says of an interrupted send that no provider event claimed.
pub const INTERRUPTED_ERROR: &str = "the service stopped while sending this message, and no \
     event from the provider has shown that it went out: it may or may not have been sent";

/// What a batch item says when its send was interrupted before it could
/// have reached the provider.
const NOT_SENT_ERROR: &str =
    "not sent: the service stopped before this message reached the provider";

/// How long an interrupted send is given, and how long its message waits
/// for the provider's events.
#[derive(Debug, Clone, Copy)]
pub struct Timings {
    /// A keyed send still running after this long was interrupted.
    pub stale_after: Duration,
    /// A recovered message that no provider event moved ends `failed`
    /// this long after its send began.
    pub give_up_after: Duration,
}

impl Default for Timings {
    fn default() -> Timings {
        Timings {
            stale_after: Duration::from_secs(300),
            give_up_after: Duration::from_secs(900),
        }
    }
}

/// A message's id and the random part of its Message-ID, chosen before
/// its send starts.
#[derive(Debug, Clone)]
pub struct Preassigned {
    pub id: String,
    pub token: String,
}

impl Default for Preassigned {
    fn default() -> Preassigned {
        Preassigned {
            id: ids::new_id("msg"),
            token: ids::time_ordered_token(24),
        }
    }
}

/// One message a keyed send means to send: enough to record it in short.
#[derive(Debug, Serialize, Deserialize)]
struct IntendedSend {
    id: String,
    token: String,
    from: Named,
    to: Vec<Named>,
    cc: Vec<Named>,
    bcc: Vec<Named>,
    reply_to: Option<String>,
    subject: String,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum IntendedItem {
    Send(IntendedSend),
    /// A batch item refused before anything was sent, with its reply.
    Refused {
        status: u16,
        error: String,
    },
}

/// What a keyed send (one message, or a batch) is about to send.
#[derive(Debug, Serialize, Deserialize)]
pub struct Intent {
    batch: bool,
    items: Vec<IntendedItem>,
}

impl Intent {
    pub fn single() -> Intent {
        Intent {
            batch: false,
            items: Vec::new(),
        }
    }

    pub fn batch() -> Intent {
        Intent {
            batch: true,
            items: Vec::new(),
        }
    }

    /// Adds `input`, giving it its id and Message-ID now.
    pub fn send(&mut self, input: &mut SendInput) {
        let pre = input.preassigned.get_or_insert_with(Preassigned::default);
        self.items.push(IntendedItem::Send(IntendedSend {
            id: pre.id.clone(),
            token: pre.token.clone(),
            from: input.from.clone(),
            to: input.to.clone(),
            cc: input.cc.clone(),
            bcc: input.bcc.clone(),
            reply_to: input.reply_to.clone(),
            subject: input.subject.clone(),
        }));
    }

    /// Adds a batch item refused before sending, with its reply.
    pub fn refused(&mut self, status: u16, error: String) {
        self.items.push(IntendedItem::Refused { status, error });
    }

    pub fn to_text(&self) -> Result<String, CoreError> {
        serde_json::to_string(self).map_err(|e| {
            CoreError::Internal(anyhow::anyhow!("an intent could not be written: {e}"))
        })
    }
}

/// An idempotency record, by its key.
#[derive(Debug, Clone)]
pub struct RecordKey {
    pub api_key_id: String,
    pub endpoint: String,
    pub key: String,
}

/// What [`recover`] made of a stale record.
#[derive(Debug, PartialEq, Eq)]
pub enum Recovered {
    /// The record is `done`: replay this.
    Replay { status: u16, body: String },
    /// Nothing could have been sent: the record is gone, and the request
    /// may run anew.
    Released,
}

/// Settles the stale record `record` created at `created_at` (see the
/// module's documentation), in one transaction. Also the number of
/// messages it recorded.
pub async fn recover(
    db: &Db,
    record: &RecordKey,
    created_at: i64,
) -> Result<(Recovered, usize), sqlx::Error> {
    let backend = db.backend();
    let record = record.clone();
    db.write(move |tx| Box::pin(async move { recover_in(tx, backend, &record, created_at).await }))
        .await
}

async fn recover_in(
    tx: &mut Tx,
    backend: Backend,
    record: &RecordKey,
    created_at: i64,
) -> Result<(Recovered, usize), sqlx::Error> {
    let mut q = Sql::new(
        "SELECT state, intent, response_status, response_body FROM idempotency_keys \
         WHERE api_key_id = ",
    );
    q.bind(record.api_key_id.as_str())
        .push(" AND endpoint = ")
        .bind(record.endpoint.as_str())
        .push(" AND key = ")
        .bind(record.key.as_str())
        .push(" AND created_at = ")
        .bind(created_at);
    if backend == Backend::Postgres {
        // Two processes recovering one record: the second waits, then
        // finds it done.
        q.push(" FOR UPDATE");
    }
    let Some(row) = q.fetch_optional_tx(tx).await? else {
        return Ok((Recovered::Released, 0));
    };
    if row.text("state")? != "running" {
        return Ok((
            Recovered::Replay {
                status: row.opt_int("response_status")?.unwrap_or(200) as u16,
                body: row.opt_text("response_body")?.unwrap_or_default(),
            },
            0,
        ));
    }
    let intent: Option<Intent> = match row.opt_text("intent")? {
        Some(text) => match serde_json::from_str(&text) {
            Ok(intent) => Some(intent),
            Err(e) => {
                tracing::error!(error = %e, endpoint = %record.endpoint, "an unreadable send intent; its record is released");
                None
            }
        },
        None => None,
    };
    let Some(intent) = intent else {
        delete_record(tx, record).await?;
        return Ok((Recovered::Released, 0));
    };

    let ids: Vec<String> = intent
        .items
        .iter()
        .filter_map(|item| match item {
            IntendedItem::Send(s) => Some(s.id.clone()),
            IntendedItem::Refused { .. } => None,
        })
        .collect();
    let mut recorded: HashMap<String, Message> = HashMap::new();
    if !ids.is_empty() {
        let mut q = Sql::new(&format!("SELECT {COLUMNS} FROM messages m WHERE m.id IN "));
        q.bind_list(&ids);
        for row in q.fetch_all_tx(tx).await? {
            let m = Message::from_row(&row)?;
            recorded.insert(m.id.clone(), m);
        }
    }
    let mut fresh = 0;
    for item in &intent.items {
        let IntendedItem::Send(send) = item else {
            continue;
        };
        if recorded.contains_key(&send.id) {
            continue;
        }
        if let Some(m) = record_queued(tx, backend, send, &record.api_key_id, created_at).await? {
            fresh += 1;
            recorded.insert(m.id.clone(), m);
        }
    }

    let reply = if intent.batch {
        Some(batch_reply(&intent, &recorded))
    } else {
        ids.first()
            .and_then(|id| recorded.get(id))
            .map(|m| (sending::ACCEPTED, sending::reply_text(m)))
    };
    let Some((status, body)) = reply else {
        delete_record(tx, record).await?;
        return Ok((Recovered::Released, fresh));
    };
    let body = body.map_err(|e| sqlx::Error::Protocol(e.to_string()))?;
    idempotency::finish_statement(record, status, &body)
        .execute_tx(tx)
        .await?;
    if fresh > 0 {
        tracing::warn!(
            endpoint = %record.endpoint,
            recovered = fresh,
            "recorded the messages of an interrupted keyed send as queued"
        );
    }
    Ok((Recovered::Replay { status, body }, fresh))
}

async fn delete_record(tx: &mut Tx, record: &RecordKey) -> Result<(), sqlx::Error> {
    sql!(
        "DELETE FROM idempotency_keys WHERE api_key_id = $1 AND endpoint = $2 AND key = $3",
        record.api_key_id.as_str(),
        record.endpoint.as_str(),
        record.key.as_str()
    )
    .execute_tx(tx)
    .await
    .map(|_| ())
}

/// Records `send` in short as `queued`, unless it could not have been sent
/// (its domain is no longer a verified sending domain, or a recipient is
/// suppressed: the checks its send made before calling the provider).
async fn record_queued(
    tx: &mut Tx,
    backend: Backend,
    send: &IntendedSend,
    api_key_id: &str,
    created_at: i64,
) -> Result<Option<Message>, sqlx::Error> {
    let from = &send.from.1;
    let from_domain = address_domain(from).to_string();
    let recipients: Vec<String> = send
        .to
        .iter()
        .chain(&send.cc)
        .chain(&send.bcc)
        .map(|(_, a)| a.clone())
        .collect();
    let domain_rows = domains::sending_domain_read(&from_domain)
        .fetch_all_tx(tx)
        .await?;
    let Some(domain) = domains::nearest_verified(&from_domain, &domain_rows)? else {
        return Ok(None);
    };
    let suppressed = suppressions::suppressed_read(&recipients)
        .fetch_all_tx(tx)
        .await?;
    if !suppressions::suppressed_in(&suppressed)?.is_empty() {
        return Ok(None);
    }
    let mailbox_rows = mailboxes::by_address_read(from).fetch_all_tx(tx).await?;
    let mut mailbox = match mailboxes::first_mailbox(&mailbox_rows)? {
        Some(m) => m,
        None => Mailbox::on_first_use(from, domain.id),
    };
    mailbox.id = mailboxes::insert_or_existing(tx, &mailbox).await?;
    // An SES event tagged with this message's id may have come first.
    let provider_message_id = sql!(
        "SELECT provider_message_id FROM waiting_provider_events WHERE message_tag = $1 LIMIT 1",
        send.id.as_str()
    )
    .fetch_optional_tx(tx)
    .await?
    .map(|r| r.text("provider_message_id"))
    .transpose()?;
    let names = |list: &[Named]| list.iter().map(|(_, a)| a.clone()).collect::<Vec<_>>();
    let message = Message {
        id: send.id.clone(),
        thread_id: ids::new_id("thr"),
        mailbox_id: mailbox.id.clone(),
        mailbox: mailbox.address.clone(),
        domain: mailbox.domain.clone(),
        direction: "outbound".into(),
        is_draft: false,
        folder: "sent".into(),
        message_id: format!("<{}@{from_domain}>", send.token),
        provider_message_id,
        from_address: from.clone(),
        from_name: send.from.0.clone(),
        to: names(&send.to),
        cc: names(&send.cc),
        bcc: names(&send.bcc),
        reply_to: send.reply_to.clone(),
        subject: send.subject.clone(),
        text: String::new(),
        html: String::new(),
        headers: serde_json::Value::Object(Default::default()),
        in_reply_to: None,
        references: None,
        status: MessageStatus::Queued,
        error: None,
        opened_at: None,
        open_count: 0,
        is_read: true,
        is_starred: false,
        has_attachments: false,
        api_key_id: Some(api_key_id.to_string()),
        created_at,
        sent_at: None,
        received_at: None,
    };
    let writes = sending::short_record_writes(&message, &Bodies::none());
    execute_all(tx, backend, &writes).await?;
    Ok(Some(message))
}

fn batch_reply(
    intent: &Intent,
    recorded: &HashMap<String, Message>,
) -> (u16, Result<String, CoreError>) {
    let (mut sent, mut failed) = (0, 0);
    let mut data = Vec::with_capacity(intent.items.len());
    for (index, item) in (0u32..).zip(&intent.items) {
        let message = match item {
            IntendedItem::Send(s) => recorded.get(&s.id),
            IntendedItem::Refused { .. } => None,
        };
        let result = match (item, message) {
            (_, Some(m)) => BatchItem::accepted(
                index,
                ids::Id::from_stored(m.id.clone()),
                ids::Id::from_stored(m.thread_id.clone()),
            ),
            (IntendedItem::Refused { status, error }, None) => {
                BatchItem::refused(index, error.clone(), *status)
            }
            (IntendedItem::Send(_), None) => BatchItem::refused(index, NOT_SENT_ERROR.into(), 503),
        };
        if result.ok {
            sent += 1;
        } else {
            failed += 1;
        }
        data.push(result);
    }
    let status = if failed == 0 { 202 } else { 207 };
    let body = serde_json::to_string(&BatchResult {
        object: BatchObject,
        sent,
        failed,
        data,
    })
    .map_err(|e| CoreError::Internal(anyhow::anyhow!("a reply could not be written: {e}")));
    (status, body)
}

/// Stale records one sweep recovers at most.
const RECOVER_BATCH: i64 = 50;
/// Overdue messages one sweep fails at most.
const FAIL_BATCH: i64 = 100;

/// Recovers the keyed sends that have been running longer than
/// `stale_after` at `now`, without waiting for a retry; how many messages
/// it recorded.
pub async fn recover_stale(db: &Db, now: i64, stale_after: Duration) -> Result<usize, sqlx::Error> {
    let cutoff = now.saturating_sub(stale_after.as_micros() as i64);
    let rows = db
        .lookup_all(&sql!(
            "SELECT api_key_id, endpoint, key, created_at FROM idempotency_keys \
             WHERE state = 'running' AND created_at < $1 AND intent IS NOT NULL \
             ORDER BY created_at LIMIT $2",
            cutoff,
            RECOVER_BATCH
        ))
        .await?;
    let mut recovered = 0;
    for row in rows {
        let record = RecordKey {
            api_key_id: row.text("api_key_id")?,
            endpoint: row.text("endpoint")?,
            key: row.text("key")?,
        };
        recovered += recover(db, &record, row.int("created_at")?).await?.1;
    }
    Ok(recovered)
}

/// Ends as `failed` (with `email.failed`) the recovered messages that no
/// provider event has moved within `give_up_after` of their send's start;
/// how many.
pub async fn fail_overdue(
    db: &Db,
    now: i64,
    give_up_after: Duration,
) -> Result<usize, sqlx::Error> {
    let cutoff = now.saturating_sub(give_up_after.as_micros() as i64);
    // A read first: on an idle service nothing is overdue, and the sweep
    // then costs no write (on SQLite, no turn of the one writer).
    let overdue = db
        .lookup_optional(&sql!(
            "SELECT 1 AS one FROM messages WHERE status = 'queued' AND created_at < $1 LIMIT 1",
            cutoff
        ))
        .await?;
    if overdue.is_none() {
        return Ok(0);
    }
    let backend = db.backend();
    db.write(move |tx| {
        Box::pin(async move {
            // `status = 'queued'` as written, for the partial index.
            let mut q = Sql::new(&format!(
                "SELECT {COLUMNS} FROM messages m WHERE m.status = 'queued' AND m.created_at < "
            ));
            q.bind(cutoff)
                .push(" ORDER BY m.created_at LIMIT ")
                .bind(FAIL_BATCH);
            if backend == Backend::Postgres {
                q.push(" FOR UPDATE");
            }
            let rows = q.fetch_all_tx(tx).await?;
            let mut writes = Vec::with_capacity(rows.len() * 2);
            for row in &rows {
                let mut m = Message::from_row(row)?;
                writes.push(sql!(
                    "UPDATE messages SET status = 'failed', error = $1 WHERE id = $2 AND status = 'queued'",
                    INTERRUPTED_ERROR,
                    m.id.as_str()
                ));
                m.status = MessageStatus::Failed;
                m.error = Some(INTERRUPTED_ERROR.into());
                let data = EmailEventData {
                    email: m.summary(),
                    occurred_at: Timestamp(now),
                    sent_at: None,
                    recipients: None,
                    detail: Some(INTERRUPTED_ERROR.into()),
                };
                writes.push(events::emit_statement(EventName::EmailFailed, Some(&m.mailbox_id), data)?.1);
            }
            execute_all(tx, backend, &writes).await?;
            Ok(rows.len())
        })
    })
    .await
}
