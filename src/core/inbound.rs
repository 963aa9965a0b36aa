//! Inbound mail: the one ingestion path for everything that arrives (the SMTP
//! listener and SES receipt notifications via SNS).
//!
//! [`accepts_recipient`] decides at RCPT time whether an address is ours;
//! [`ingest`] parses the MIME once, resolves the envelope recipients to local
//! mailboxes and stores one copy per mailbox (threaded, indexed, with its
//! `mail.received` event and contact updates) in ONE transaction: the caller
//! may acknowledge the message as soon as `ingest` returns `Ok`.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use mail_parser::{Address, HeaderValue, MessageParser, MessagePart, MimeHeaders, PartType};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::auth::address_domain;
use crate::clock;
use crate::core::domains;
use crate::core::events;
use crate::core::mailboxes;
use crate::core::memory;
use crate::core::messages::Message;
use crate::core::search;
use crate::core::threads::{self, THREAD_STATE_COLUMNS, ThreadContribution, ThreadState};
use crate::core::validate;
use crate::ids;
use crate::mime::compose;
use crate::model::Timestamp;
use crate::model::events::MailReceivedData;
use crate::model::messages::MessageStatus;
use crate::model::webhooks::EventName;
use crate::sql;
use crate::store::{Backend, Db, RowExt, SharedText, Sql, Tx, is_unique_violation, share_within};

/// A reply whose subject matches joins a thread only if that thread saw mail
/// within this window.
pub const SUBJECT_THREAD_WINDOW_MICROS: i64 = 30 * 24 * 3600 * 1_000_000;
/// References looked at for threading (the newest ones, at the end of the header).
const MAX_REFERENCES: usize = 50;
/// Addresses kept per recipient field; a hostile header cannot make a message
/// cost thousands of rows.
const MAX_ADDRESSES_PER_FIELD: usize = 200;
/// Contacts touched per stored message (sender first).
const MAX_CONTACTS: usize = 50;
/// Header fields kept in the `headers` JSON (the raw MIME keeps them all).
const MAX_HEADERS: usize = 1000;
/// Participants one message adds to its thread.
const MAX_THREAD_PARTICIPANTS: usize = 20;
/// Attempts of the storing transaction when a concurrent delivery of the same
/// Message-ID wins the race for the unique index.
const STORE_ATTEMPTS: usize = 3;

/// A mailbox that mail can be stored in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MailboxRef {
    pub id: String,
    pub address: String,
    pub domain: String,
}

/// Whether (and how) an address receives mail here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecipientDecision {
    /// A mailbox has exactly this address.
    Mailbox(MailboxRef),
    /// No mailbox of that address; the domain's catch-all mailbox takes it.
    CatchAll(MailboxRef),
    /// No mailbox yet; the domain creates one on first mail.
    AutoCreate { address: String, domain_id: String },
    /// Not ours: SMTP answers 550.
    Reject,
}

impl RecipientDecision {
    pub fn accepted(&self) -> bool {
        !matches!(self, RecipientDecision::Reject)
    }
}

/// One copy of an ingested message, in one mailbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredInbound {
    /// The stored message (`msg_…`); for a duplicate, the copy stored earlier.
    pub id: String,
    pub mailbox_id: String,
    pub mailbox: String,
    pub thread_id: String,
    /// The RFC Message-ID, in angle brackets.
    pub message_id: String,
    /// True when this mailbox already held the Message-ID and nothing was stored.
    pub duplicate: bool,
}

/// The bare, lower-case form of an envelope address (`<A@X.com>` → `a@x.com`),
/// or `None` when it cannot be an address.
pub fn normalize_recipient(raw: &str) -> Option<String> {
    let s = raw.trim();
    let s = s.strip_prefix('<').unwrap_or(s);
    let s = s.strip_suffix('>').unwrap_or(s).trim();
    let (local, domain) = s.rsplit_once('@')?;
    let ok = !local.is_empty()
        && !domain.is_empty()
        && s.len() <= 254
        && !s
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '<' || c == '>' || c == ',');
    ok.then(|| s.to_lowercase())
}

/// The RCPT-time decision for `address`: exact mailbox, else the domain's
/// catch-all, else a (verified, or under a verified parent) domain with
/// `auto_create_mailboxes`, else reject.
pub async fn accepts_recipient(db: &Db, address: &str) -> Result<RecipientDecision, sqlx::Error> {
    let Some(address) = normalize_recipient(address) else {
        return Ok(RecipientDecision::Reject);
    };
    if let Some(m) = mailboxes::by_address(db, &address).await? {
        return Ok(RecipientDecision::Mailbox(MailboxRef {
            id: m.id,
            address: m.address,
            domain: m.domain,
        }));
    }
    let domain = address_domain(&address).to_string();
    let catch_all = sql!(
        "SELECT id, address, domain FROM mailboxes WHERE domain = $1 AND is_catch_all = 1 \
         ORDER BY created_at, id LIMIT 1",
        &domain
    )
    .fetch_optional(db.reader())
    .await?;
    if let Some(r) = catch_all {
        return Ok(RecipientDecision::CatchAll(MailboxRef {
            id: r.text("id")?,
            address: r.text("address")?,
            domain: r.text("domain")?,
        }));
    }
    // A mailbox is only made for an address the API would accept too.
    if validate::address(&address).is_ok_and(|a| a == address)
        && let Some(d) = domains::sending_domain_for(db, &domain).await?
        && d.auto_create_mailboxes
    {
        return Ok(RecipientDecision::AutoCreate {
            address,
            domain_id: d.id,
        });
    }
    Ok(RecipientDecision::Reject)
}

/// Where one envelope recipient's copy goes.
#[derive(Debug, Clone)]
enum Target {
    Existing(MailboxRef),
    Create { address: String, domain_id: String },
}

impl Target {
    fn address(&self) -> &str {
        match self {
            Target::Existing(m) => &m.address,
            Target::Create { address, .. } => address,
        }
    }
}

/// Stores `raw` once in every local mailbox the envelope recipients resolve
/// to. Recipients that resolve to nothing are skipped; an empty result means
/// no recipient was ours. Everything is written in one transaction.
///
/// `raw` is shared, never copied: the parsed bodies and attachments that
/// were not encoded are slices of it, and the statements bind it as it is.
///
/// `decided` holds recipients already decided (SMTP decides each at RCPT),
/// by their lower-case envelope address; the others are decided here. A
/// mailbox decided on and deleted since is found gone by the storing
/// transaction and skipped, as if it had been decided now.
pub async fn ingest(
    db: &Db,
    raw: Bytes,
    envelope_recipients: &[String],
    decided: &[(String, RecipientDecision)],
) -> Result<Vec<StoredInbound>, sqlx::Error> {
    let mut targets: Vec<Target> = Vec::new();
    for r in envelope_recipients {
        let address = r.to_lowercase();
        let known = decided
            .iter()
            .find(|(decided_address, _)| *decided_address == address)
            .map(|(_, d)| d.clone());
        let decision = match known {
            Some(d) => d,
            None => accepts_recipient(db, r).await?,
        };
        let target = match decision {
            RecipientDecision::Mailbox(m) | RecipientDecision::CatchAll(m) => Target::Existing(m),
            RecipientDecision::AutoCreate { address, domain_id } => {
                Target::Create { address, domain_id }
            }
            RecipientDecision::Reject => continue,
        };
        let dup = targets.iter().any(|t| match (t, &target) {
            (Target::Existing(a), Target::Existing(b)) => a.id == b.id,
            _ => t.address() == target.address(),
        });
        if !dup {
            targets.push(target);
        }
    }
    if targets.is_empty() {
        return Ok(Vec::new());
    }
    let shared = raw.clone();
    let parsed = memory::aside(raw.len(), move || parse(&shared))
        .await
        // `parse` catches its own panics: the runtime is shutting down.
        .unwrap_or_else(|| parse(&raw));
    let parsed = Arc::new(parsed);
    // What the rows bind, per copy stored.
    let bound = (raw.len()
        + parsed
            .attachments
            .iter()
            .map(|a| a.content.len())
            .sum::<usize>())
    .saturating_mul(targets.len());
    let targets = Arc::new(targets);
    let backend = db.backend();
    let mut attempt = 0;
    loop {
        attempt += 1;
        let (parsed, raw, targets) = (parsed.clone(), raw.clone(), targets.clone());
        let stored = db
            .write_sized(bound, move |tx| {
                Box::pin(async move { store(tx, backend, &parsed, &raw, &targets).await })
            })
            .await;
        match stored {
            Err(e) if attempt < STORE_ATTEMPTS && is_unique_violation(&e) => {
                tracing::debug!(error = %e, "inbound store raced a concurrent delivery; retrying");
            }
            other => return other,
        }
    }
}

/// Finds or creates (first mail on an `auto_create_mailboxes` domain) the
/// mailbox of `target`, inside the storing transaction.
async fn mailbox_in(tx: &mut Tx, target: &Target) -> Result<MailboxRef, sqlx::Error> {
    let (address, domain_id) = match target {
        Target::Existing(m) => return Ok(m.clone()),
        Target::Create { address, domain_id } => (address, domain_id),
    };
    let mailbox = mailboxes::Mailbox::on_first_use(address, domain_id.clone());
    Ok(MailboxRef {
        id: mailboxes::insert_or_existing(tx, &mailbox).await?,
        address: mailbox.address,
        domain: mailbox.domain,
    })
}

/// Writes one received message into every target mailbox, within `tx`.
async fn store(
    tx: &mut Tx,
    backend: Backend,
    p: &Parsed,
    raw: &Bytes,
    targets: &[Target],
) -> Result<Vec<StoredInbound>, sqlx::Error> {
    let now = clock::now_micros();
    let mut out: Vec<StoredInbound> = Vec::new();
    for target in targets {
        let mb = mailbox_in(tx, target).await?;
        if out.iter().any(|s| s.mailbox_id == mb.id) {
            continue;
        }
        // Threading: our own Message-IDs (and SES's rewritten ones) first,
        // then a recent thread with the same subject.
        let mut refs: Vec<String> = p.references.clone();
        refs.extend(p.in_reply_to.iter().cloned());
        refs.push(p.message_id.clone());
        refs.dedup();
        let refs = &refs[refs.len().saturating_sub(threads::MAX_REFERENCE_LOOKUPS)..];
        let Some(arrival) = arrival_read(backend, &mb.id, &p.message_id, refs)
            .fetch_optional_tx(tx)
            .await?
        else {
            // The mailbox was deleted after it was decided on.
            continue;
        };
        if let Some(id) = arrival.opt_text("duplicate_id")? {
            out.push(StoredInbound {
                id,
                mailbox_id: mb.id.clone(),
                mailbox: mb.address.clone(),
                thread_id: arrival.text("duplicate_thread")?,
                message_id: p.message_id.clone(),
                duplicate: true,
            });
            continue;
        }
        let mut thread = arrival
            .opt_text("id")?
            .map(|_| ThreadState::from_row(&arrival))
            .transpose()?;
        if thread.is_none() {
            thread = by_subject(tx, backend, &mb.id, &p.subject, now).await?;
        }
        let mut participants: Vec<(Option<String>, String)> = Vec::new();
        for (n, a) in std::iter::once(&p.from)
            .chain(p.to.iter())
            .chain(p.cc.iter())
            .filter(|(_, a)| !a.is_empty())
        {
            if participants.len() < MAX_THREAD_PARTICIPANTS
                && !participants.iter().any(|(_, x)| x == a)
            {
                participants.push((n.clone(), a.clone()));
            }
        }
        // Reads first; every write is collected and sent at the end as one
        // batch (on PostgreSQL one statement for a new thread; see
        // `store::execute_all`).
        let mut writes: Vec<Sql> = Vec::new();
        let (thread_id, thread_change) = threads::message_added(
            thread.as_ref(),
            &ThreadContribution {
                mailbox_id: &mb.id,
                mailbox: &mb.address,
                domain: &mb.domain,
                subject: &p.subject,
                snippet_source: &p.search_body,
                folder: "inbox",
                participants,
                unread: true,
                has_attachments: !p.attachments.is_empty(),
                at: now,
            },
        );
        writes.push(thread_change);

        let message = Message {
            id: ids::new_id("msg"),
            thread_id: thread_id.clone(),
            mailbox_id: mb.id.clone(),
            mailbox: mb.address.clone(),
            domain: mb.domain.clone(),
            direction: "inbound".into(),
            is_draft: false,
            folder: "inbox".into(),
            message_id: p.message_id.clone(),
            provider_message_id: None,
            from_address: p.from.1.clone(),
            from_name: p.from.0.clone(),
            to: addresses_of(&p.to),
            cc: addresses_of(&p.cc),
            bcc: addresses_of(&p.bcc),
            reply_to: p.reply_to.clone(),
            subject: p.subject.clone(),
            // Bodies and headers are bound from `p` (see `insert_message`):
            // a copy here would cost the size of the message.
            text: String::new(),
            html: String::new(),
            headers: Value::Null,
            in_reply_to: p.in_reply_to.clone(),
            references: (!p.references.is_empty()).then(|| p.references.join(" ")),
            status: MessageStatus::Received,
            error: None,
            opened_at: None,
            open_count: 0,
            is_read: false,
            is_starred: false,
            has_attachments: !p.attachments.is_empty(),
            api_key_id: None,
            created_at: now,
            sent_at: None,
            received_at: Some(now),
        };
        writes.push(message_insert(&message, p, raw));
        // One statement for all recipients (each statement is a round trip).
        let mut q = Sql::new("INSERT INTO message_recipients (message_id, kind, address) VALUES ");
        let mut rows = 0;
        for (kind, list) in [("to", &p.to), ("cc", &p.cc), ("bcc", &p.bcc)] {
            for (_, addr) in list {
                if rows > 0 {
                    q.push(", ");
                }
                q.push("(")
                    .bind(&message.id)
                    .push(", ")
                    .bind(kind)
                    .push(", ")
                    .bind(addr)
                    .push(")");
                rows += 1;
            }
        }
        if rows > 0 {
            writes.push(q);
        }
        for a in &p.attachments {
            writes.push(sql!(
                "INSERT INTO attachments (id, message_id, filename, content_type, size, content_id, inline, content) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                ids::new_id("att"),
                &message.id,
                &a.filename,
                &a.content_type,
                a.content.len() as i64,
                a.content_id.clone(),
                a.inline,
                a.content.clone()
            ));
        }
        writes.extend(contacts_upsert(&mb, p, now));
        writes.push(
            events::emit_statement(
                EventName::MailReceived,
                Some(&mb.id),
                MailReceivedData {
                    email: message.summary(),
                    received_at: Timestamp(now),
                },
            )?
            .1,
        );
        let indexed = search::IndexedMessage {
            id: &message.id,
            thread_id: &message.thread_id,
            subject: &p.subject,
            body: &p.search_body,
            at: message.created_at,
        };
        search::write_and_index(tx, backend, writes, &indexed).await?;
        out.push(StoredInbound {
            id: message.id,
            mailbox_id: mb.id,
            mailbox: mb.address,
            thread_id,
            message_id: p.message_id.clone(),
            duplicate: false,
        });
    }
    Ok(out)
}

/// What the storing transaction reads of one copy before it writes it, in
/// one statement: one row if the mailbox is there, with the copy of this
/// Message-ID the mailbox already holds (`duplicate_id`,
/// `duplicate_thread`) and the mailbox's thread that `refs` (at least one
/// id) name, as [`ThreadState`] reads it (null columns when there is none).
///
/// On PostgreSQL the mailbox is kept there until the transaction ends (a
/// deletion of the mailbox locks it first: it waits, or has committed and
/// the row is gone) and the thread is locked, as any thread a message is
/// added to. The mailbox is locked first, as a deletion does, which is why
/// the thread is read laterally (after the mailbox's row): in the other
/// order a deletion holding the mailbox and this read holding the thread
/// would wait for each other. SQLite's writes never overlap.
fn arrival_read(backend: Backend, mailbox_id: &str, message_id: &str, refs: &[String]) -> Sql {
    let (key_share, lateral, after_mailbox) = match backend {
        // A reference to `mb` (which no index takes) makes the read lateral.
        Backend::Postgres => (
            " FOR KEY SHARE",
            "LATERAL ",
            " AND mb.id IS NOT NULL FOR UPDATE",
        ),
        Backend::Sqlite => ("", "", ""),
    };
    let mut q = Sql::new(
        "SELECT d.id AS duplicate_id, d.thread_id AS duplicate_thread, t.* \
         FROM (SELECT id FROM mailboxes WHERE id = ",
    );
    q.bind(mailbox_id).push(key_share).push(&format!(
        ") mb LEFT JOIN {lateral}(SELECT {THREAD_STATE_COLUMNS} FROM threads WHERE id = ("
    ));
    threads::push_references_read(&mut q, mailbox_id, refs);
    // The mailbox's own id, not `mb.id`: the row of a locked subquery is
    // no constant to the planner, and the index's whole key is.
    q.push(&format!(
        "){after_mailbox}) t ON 1 = 1 LEFT JOIN messages d ON d.mailbox_id = "
    ))
    .bind(mailbox_id)
    .push(" AND d.message_id = ")
    .bind(message_id)
    .push(" AND d.direction = 'inbound'");
    q
}

fn addresses_of(list: &[(Option<String>, String)]) -> Vec<String> {
    list.iter().map(|(_, a)| a.clone()).collect()
}

/// The most recent thread of the mailbox with the same subject key, if it saw
/// mail within the window, read (and on PostgreSQL locked) as
/// [`ThreadState`]. An empty subject never matches.
async fn by_subject(
    tx: &mut Tx,
    backend: Backend,
    mailbox_id: &str,
    subject: &str,
    now: i64,
) -> Result<Option<ThreadState>, sqlx::Error> {
    let key = threads::subject_key(subject);
    if key.is_empty() {
        return Ok(None);
    }
    subject_read(
        backend,
        mailbox_id,
        &key,
        now - SUBJECT_THREAD_WINDOW_MICROS,
    )
    .fetch_optional_tx(tx)
    .await?
    .map(|r| ThreadState::from_row(&r))
    .transpose()
}

/// The read of [`by_subject`]: the newest thread of the mailbox with the
/// subject key, active since `since` (one entry of `threads_subject`).
/// Planned on each run: `threads_mailbox_recent` gives the same order, and
/// on a small table the two cost the same, so a generic plan made then can
/// walk the mailbox's threads and filter the subject, and be kept for good
/// (measured: 46 ms a message at 250,000 stored). Planned for the table as
/// it is, the subject's index wins as soon as the table is not small.
fn subject_read(backend: Backend, mailbox_id: &str, key: &str, since: i64) -> Sql {
    let mut q = Sql::new(&format!(
        "SELECT {THREAD_STATE_COLUMNS} FROM threads WHERE mailbox_id = "
    ));
    q.bind(mailbox_id)
        .push(" AND normalized_subject = ")
        .bind(key)
        .push(" AND last_message_at >= ")
        .bind(since)
        .push(" ORDER BY last_message_at DESC, id DESC LIMIT 1")
        .push(threads::lock_suffix(backend));
    q.plan_each_run()
}

/// The row of `m`, its bodies and headers from `p`.
fn message_insert(m: &Message, p: &Parsed, raw: &Bytes) -> Sql {
    sql!(
        "INSERT INTO messages (id, thread_id, mailbox_id, mailbox, domain, direction, is_draft, folder, \
         message_id, from_address, from_name, to_addresses, cc_addresses, bcc_addresses, reply_to, \
         subject, text_body, html_body, search_body, headers, in_reply_to, references_header, status, \
         open_count, is_read, is_starred, has_attachments, raw, created_at, received_at) \
         VALUES ($1, $2, $3, $4, $5, 'inbound', 0, 'inbox', $6, $7, $8, $9, $10, $11, $12, $13, $14, \
         $15, $16, $17, $18, $19, 'received', 0, 0, 0, $20, $21, $22, $22)",
        &m.id,
        &m.thread_id,
        &m.mailbox_id,
        &m.mailbox,
        &m.domain,
        &m.message_id,
        &m.from_address,
        m.from_name.clone(),
        serde_json::to_string(&m.to).unwrap_or_else(|_| "[]".into()),
        serde_json::to_string(&m.cc).unwrap_or_else(|_| "[]".into()),
        serde_json::to_string(&m.bcc).unwrap_or_else(|_| "[]".into()),
        m.reply_to.clone(),
        &m.subject,
        &p.text,
        &p.html,
        &p.search_body,
        p.headers.to_string(),
        m.in_reply_to.clone(),
        m.references.clone(),
        m.has_attachments,
        raw.clone(),
        m.created_at
    )
}

/// Counts the sender and the other people on the message as contacts of the
/// mailbox (never the mailbox itself): one upsert, None when there is
/// nobody. Only it writes the mailbox's contacts in the message's write,
/// so it may join the message's inserts.
fn contacts_upsert(mb: &MailboxRef, p: &Parsed, now: i64) -> Option<Sql> {
    let mut seen: Vec<(&Option<String>, &str)> = Vec::new();
    for (name, address) in std::iter::once(&p.from)
        .chain(p.to.iter())
        .chain(p.cc.iter())
    {
        if address.is_empty()
            || *address == mb.address
            || seen.iter().any(|(_, a)| *a == address.as_str())
        {
            continue;
        }
        if seen.len() >= MAX_CONTACTS {
            break;
        }
        seen.push((name, address));
    }
    if seen.is_empty() {
        return None;
    }
    // One multi-row upsert; the addresses are distinct, as both dialects need.
    let mut q = Sql::new(
        "INSERT INTO contacts (id, mailbox_id, mailbox, domain, address, name, message_count, \
         first_seen_at, last_seen_at) VALUES ",
    );
    for (i, (name, address)) in seen.iter().enumerate() {
        if i > 0 {
            q.push(", ");
        }
        q.push("(")
            .bind(ids::new_id("con"))
            .push(", ")
            .bind(&mb.id)
            .push(", ")
            .bind(&mb.address)
            .push(", ")
            .bind(&mb.domain)
            .push(", ")
            .bind(*address)
            .push(", ")
            .bind((*name).clone())
            .push(", 1, ")
            .bind(now)
            .push(", ")
            .bind(now)
            .push(")");
    }
    q.push(
        " ON CONFLICT (mailbox_id, address) DO UPDATE SET \
         message_count = contacts.message_count + 1, \
         last_seen_at = CASE WHEN excluded.last_seen_at > contacts.last_seen_at \
             THEN excluded.last_seen_at ELSE contacts.last_seen_at END, \
         name = COALESCE(excluded.name, contacts.name)",
    );
    Some(q.joining_inserts())
}

// ---------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------

/// One attachment (or inline part) of a received message.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedAttachment {
    pub filename: String,
    pub content_type: String,
    /// Without angle brackets.
    pub content_id: Option<String>,
    pub inline: bool,
    /// Decoded; a slice of the raw message when it was not encoded.
    pub content: Bytes,
}

/// What the service keeps of a received message, parsed once for every
/// mailbox it goes to. Bodies and attachments share the raw message's bytes
/// where they can (see [`parse`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    /// In angle brackets; generated from the content when the message has none.
    pub message_id: String,
    pub from: (Option<String>, String),
    pub to: Vec<(Option<String>, String)>,
    pub cc: Vec<(Option<String>, String)>,
    pub bcc: Vec<(Option<String>, String)>,
    pub reply_to: Option<String>,
    pub subject: String,
    pub text: SharedText,
    pub html: SharedText,
    /// Text the full-text index and the snippet use: the start of `text`
    /// (see [`search::indexed_prefix`]).
    pub search_body: SharedText,
    /// Header name → value (unfolded, as received); a repeated header → array.
    pub headers: Value,
    pub in_reply_to: Option<String>,
    pub references: Vec<String>,
    pub attachments: Vec<ParsedAttachment>,
}

/// Parses MIME as far as it goes. Never panics: input mail-parser cannot
/// read at all is kept as text with a generated Message-ID.
///
/// Nothing large is copied: a body or attachment that was not encoded is a
/// slice of `raw`, and one that was is taken out of the parser's result
/// (which decoded it) rather than copied from it.
pub fn parse(raw: &Bytes) -> Parsed {
    std::panic::catch_unwind(|| parse_mime(raw))
        .ok()
        .flatten()
        .unwrap_or_else(|| unparsed(raw))
}

fn unparsed(raw: &[u8]) -> Parsed {
    let text: String = String::from_utf8_lossy(raw)
        .chars()
        .take(1_000_000)
        .collect();
    let text = SharedText::from(text);
    Parsed {
        message_id: generated_message_id(raw),
        from: (None, String::new()),
        to: Vec::new(),
        cc: Vec::new(),
        bcc: Vec::new(),
        reply_to: None,
        subject: String::new(),
        search_body: search::indexed_prefix(&text),
        text,
        html: SharedText::default(),
        headers: Value::Object(Map::new()),
        in_reply_to: None,
        references: Vec::new(),
        attachments: Vec::new(),
    }
}

fn generated_message_id(raw: &[u8]) -> String {
    let digest = Sha256::digest(raw);
    format!(
        "<{}@generated.pigeonhole.invalid>",
        hex::encode(&digest[..16])
    )
}

/// `<id>` from a Message-ID-like value, or `None` if it cannot be one.
fn bracketed(raw: &str) -> Option<String> {
    let inner = raw
        .trim()
        .trim_start_matches('<')
        .trim_end_matches('>')
        .trim();
    (!inner.is_empty()
        && inner.len() <= 900
        && !inner
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '<' || c == '>'))
    .then(|| format!("<{inner}>"))
}

fn id_list(v: &HeaderValue<'_>) -> Vec<String> {
    match v {
        HeaderValue::Text(t) => t.split_whitespace().filter_map(bracketed).collect(),
        HeaderValue::TextList(list) => list
            .iter()
            .flat_map(|t| t.split_whitespace())
            .filter_map(bracketed)
            .collect(),
        _ => Vec::new(),
    }
}

fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect::<String>()
        .trim()
        .to_string()
}

fn named(addr: &mail_parser::Addr<'_>) -> Option<(Option<String>, String)> {
    let address = addr.address.as_deref().map(one_line)?.to_lowercase();
    if address.is_empty() {
        return None;
    }
    let name = addr.name.as_deref().map(one_line).filter(|n| !n.is_empty());
    Some((name, address))
}

fn address_list<'a, 'x: 'a>(
    values: impl Iterator<Item = &'a Address<'x>>,
) -> Vec<(Option<String>, String)> {
    let mut out: Vec<(Option<String>, String)> = Vec::new();
    for list in values {
        for a in list.iter() {
            if out.len() >= MAX_ADDRESSES_PER_FIELD {
                return out;
            }
            if let Some(n) = named(a)
                && !out.iter().any(|(_, x)| *x == n.1)
            {
                out.push(n);
            }
        }
    }
    out
}

/// Header values as received, unfolded; names keep the case of their first
/// occurrence, and a repeated header becomes an array.
fn headers_json(msg: &mail_parser::Message<'_>) -> Value {
    let mut map: Map<String, Value> = Map::new();
    // Lower-case name → the key used in `map`.
    let mut keys: std::collections::HashMap<String, String> = std::collections::HashMap::new();
    for (name, value) in msg.headers_raw().take(MAX_HEADERS) {
        let unfolded = value
            .split(['\r', '\n'])
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
        let existing = keys
            .get(&name.to_ascii_lowercase())
            .and_then(|k| map.get_mut(k));
        match existing {
            Some(Value::Array(list)) => list.push(Value::String(unfolded)),
            Some(v) => {
                let first = v.take();
                *v = Value::Array(vec![first, Value::String(unfolded)]);
            }
            None => {
                keys.insert(name.to_ascii_lowercase(), name.to_string());
                map.insert(name.to_string(), Value::String(unfolded));
            }
        }
    }
    Value::Object(map)
}

fn safe_filename(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|c| {
            if c.is_control() || c == '/' || c == '\\' {
                '_'
            } else {
                c
            }
        })
        .collect();
    // Leading dots (hidden files, `..`) and spaces go however they mix, and
    // the cut to 255 characters leaves no trailing space: cleaning a
    // cleaned name changes nothing.
    let trimmed = cleaned.trim_start_matches(|c: char| c == '.' || c.is_whitespace());
    let kept: String = trimmed.chars().take(255).collect();
    kept.trim_end().to_string()
}

/// An attachment's description, read before its content is taken.
struct AttachmentInfo {
    part: usize,
    filename: String,
    content_type: String,
    content_id: Option<String>,
    inline: bool,
}

fn attachment_info(n: usize, index: usize, part: &MessagePart<'_>) -> AttachmentInfo {
    let content_type = part
        .content_type()
        .map(|ct| {
            format!("{}/{}", ct.ctype(), ct.subtype().unwrap_or("octet-stream"))
                .to_ascii_lowercase()
        })
        .unwrap_or_else(|| match &part.body {
            PartType::Message(_) => "message/rfc822".into(),
            PartType::Text(_) => "text/plain".into(),
            PartType::Html(_) => "text/html".into(),
            _ => "application/octet-stream".into(),
        });
    let filename = part
        .attachment_name()
        .map(safe_filename)
        .filter(|f| !f.is_empty())
        .unwrap_or_else(|| match &part.body {
            PartType::Message(_) => format!("message-{}.eml", n + 1),
            _ => format!("attachment-{}", n + 1),
        });
    let content_id = part
        .content_id()
        .map(|c| {
            c.trim()
                .trim_start_matches('<')
                .trim_end_matches('>')
                .trim()
        })
        .filter(|c| !c.is_empty())
        .map(one_line);
    let explicit_attachment = part
        .content_disposition()
        .is_some_and(|cd| cd.is_attachment());
    AttachmentInfo {
        part: index,
        filename,
        content_type,
        inline: content_id.is_some() && !explicit_attachment,
        content_id,
    }
}

/// What a part holds, as shared bytes: taken from the parser's result when
/// it decoded the part, a slice of `raw` when it did not.
fn take_contents(part: &mut MessagePart<'_>, raw: &Bytes) -> Bytes {
    fn shared(raw: &Bytes, bytes: Cow<'_, [u8]>) -> Bytes {
        match bytes {
            Cow::Borrowed(b) => share_within(raw, b),
            Cow::Owned(v) => Bytes::from(v),
        }
    }
    match std::mem::take(&mut part.body) {
        PartType::Text(t) | PartType::Html(t) => match t {
            Cow::Borrowed(s) => share_within(raw, s.as_bytes()),
            Cow::Owned(s) => Bytes::from(s),
        },
        PartType::Binary(b) | PartType::InlineBinary(b) => shared(raw, b),
        PartType::Message(m) => shared(raw, m.raw_message),
        PartType::Multipart(_) => Bytes::new(),
    }
}

/// The text (or HTML) body: its parts joined by newlines. A body of one
/// part that is not also an attachment is taken (or shared), not copied.
fn body_text(msg: &mut mail_parser::Message<'_>, raw: &Bytes, html: bool) -> SharedText {
    fn text_of<'p>(p: &'p MessagePart<'_>, html: bool) -> Option<&'p str> {
        match (&p.body, html) {
            (PartType::Text(t), false) | (PartType::Html(t), true) => Some(t.as_ref()),
            _ => None,
        }
    }
    let of_kind = |p| text_of(p, html);
    let ids: Vec<usize> = if html { &msg.html_body } else { &msg.text_body }
        .iter()
        .map(|i| *i as usize)
        .filter(|i| msg.parts.get(*i).and_then(of_kind).is_some())
        .collect();
    match ids.as_slice() {
        [] => SharedText::default(),
        [only] if !msg.attachments.iter().any(|a| *a as usize == *only) => {
            match msg.parts.get_mut(*only) {
                Some(part) => match std::mem::take(&mut part.body) {
                    PartType::Text(Cow::Owned(t)) | PartType::Html(Cow::Owned(t)) => {
                        SharedText::from(t)
                    }
                    PartType::Text(Cow::Borrowed(t)) | PartType::Html(Cow::Borrowed(t)) => {
                        SharedText::within(raw, t)
                    }
                    _ => SharedText::default(),
                },
                None => SharedText::default(),
            }
        }
        _ => SharedText::from(
            ids.iter()
                .filter_map(|i| msg.parts.get(*i).and_then(of_kind))
                .collect::<Vec<_>>()
                .join("\n"),
        ),
    }
}

fn parse_mime(raw: &Bytes) -> Option<Parsed> {
    let mut msg = MessageParser::default().parse(raw.as_ref())?;
    msg.parts.first()?;

    let message_id = msg
        .message_id()
        .and_then(bracketed)
        .unwrap_or_else(|| generated_message_id(raw));
    let from = msg
        .from()
        .and_then(|a| a.iter().find_map(named))
        .or_else(|| {
            msg.return_address()
                .map(|a| (None, one_line(a).to_lowercase()))
        })
        .unwrap_or((None, String::new()));
    let to = address_list(msg.all_to());
    let cc = address_list(msg.all_cc());
    let bcc = address_list(msg.all_bcc());
    let reply_to = msg
        .reply_to()
        .and_then(|a| a.iter().find_map(named))
        .map(|(_, a)| a);
    let subject = msg.subject().map(one_line).unwrap_or_default();
    let in_reply_to = id_list(msg.in_reply_to()).into_iter().next_back();
    let mut references = id_list(msg.references());
    if references.len() > MAX_REFERENCES {
        references.drain(..references.len() - MAX_REFERENCES);
    }
    let headers = headers_json(&msg);
    let infos: Vec<AttachmentInfo> = msg
        .attachments
        .iter()
        .filter_map(|i| {
            let index = *i as usize;
            msg.parts.get(index).map(|p| (index, p))
        })
        .enumerate()
        .map(|(n, (index, part))| attachment_info(n, index, part))
        .collect();

    // The contents last: taking them out of `msg` empties its parts.
    let html = body_text(&mut msg, raw, true);
    let mut text = body_text(&mut msg, raw, false);
    if text.is_empty() && !html.is_empty() {
        text = SharedText::from(compose::html_to_text(&html));
    }
    let mut taken: HashMap<usize, Bytes> = HashMap::new();
    let mut attachments = Vec::with_capacity(infos.len());
    for info in infos {
        let content = match taken.get(&info.part) {
            // Listed twice: the same bytes again.
            Some(b) => b.clone(),
            None => {
                let b = msg
                    .parts
                    .get_mut(info.part)
                    .map(|part| take_contents(part, raw))
                    .unwrap_or_default();
                taken.insert(info.part, b.clone());
                b
            }
        };
        attachments.push(ParsedAttachment {
            filename: info.filename,
            content_type: info.content_type,
            content_id: info.content_id,
            inline: info.inline,
            content,
        });
    }

    Some(Parsed {
        message_id,
        from,
        to,
        cc,
        bcc,
        reply_to,
        subject,
        search_body: search::indexed_prefix(&text),
        text,
        html,
        headers,
        in_reply_to,
        references,
        attachments,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The plan PostgreSQL keeps for a threading read made when the store
    /// was empty, as a connection does at the start of a load: a generic
    /// one, used for every later arrival however large the store grows.
    async fn generic_plan(db: &Db, read: &Sql, values: &[&str]) -> String {
        let mut conn = db.writer().acquire().await.unwrap();
        Sql::new(&format!("PREPARE threading_read AS {}", read.text()))
            .execute(&mut *conn)
            .await
            .unwrap();
        Sql::new("SET plan_cache_mode = force_generic_plan")
            .execute(&mut *conn)
            .await
            .unwrap();
        let args: Vec<String> = values.iter().map(|v| format!("'{v}'")).collect();
        let rows = Sql::new(&format!(
            "EXPLAIN EXECUTE threading_read({})",
            args.join(", ")
        ))
        .fetch_all(&mut *conn)
        .await
        .unwrap();
        let plan: Vec<String> = rows.iter().map(|r| r.text("QUERY PLAN").unwrap()).collect();
        // The connection goes back to the pool: leave it as it was.
        for reset in ["DEALLOCATE threading_read", "RESET plan_cache_mode"] {
            Sql::new(reset).execute(&mut *conn).await.unwrap();
        }
        plan.join("\n")
    }

    /// Threading an arrival reads one index entry per reference and per
    /// subject, never the mailbox: a plan that filters the mailbox's rows
    /// costs every arrival the size of the store, and a connection keeps
    /// the plan it made while the store was small.
    #[tokio::test]
    async fn threading_reads_find_by_whole_index_keys_in_any_plan() {
        let Some(db) = crate::store::tests::fresh_postgres().await else {
            return;
        };
        let refs = vec![
            "<a@x.test>".to_string(),
            "<b@email.amazonses.com>".to_string(),
        ];
        let plan = generic_plan(
            &db,
            &arrival_read(Backend::Postgres, "mbx_1", "<c@x.test>", &refs),
            &[
                "mbx_1",
                "mbx_1",
                "<a@x.test>",
                "mbx_1",
                "<b@email.amazonses.com>",
                "b",
                "mbx_1",
                "mbx_1",
                "<c@x.test>",
            ],
        )
        .await;
        // Each id is a condition of its index scan, as are the mailbox,
        // the arrival's own Message-ID and the thread found; only a
        // provider id's few rows are filtered by mailbox.
        assert!(!plan.contains("Seq Scan"), "{plan}");
        assert_eq!(plan.matches("Index Cond").count(), 6, "{plan}");
        // The mailbox is locked before the thread, as a deletion of the
        // mailbox locks them: its row is read first, the thread laterally.
        let at = |index: &str| {
            plan.find(index)
                .unwrap_or_else(|| panic!("{index}: {plan}"))
        };
        assert_eq!(plan.matches("LockRows").count(), 2, "{plan}");
        assert!(at("mailboxes_pkey") < at("threads_pkey"), "{plan}");
        at("Index Cond: ((mailbox_id = $8) AND (message_id = $9))");
        for line in plan.lines().filter(|l| l.contains("Filter")) {
            assert!(!line.contains("message_id"), "{plan}");
        }
        // The subject read is planned on each run, never kept.
        let mut conn = db.writer().acquire().await.unwrap();
        subject_read(Backend::Postgres, "mbx_1", "topic", 0)
            .fetch_optional(&mut *conn)
            .await
            .unwrap();
        let kept = Sql::new(
            "SELECT COUNT(*) AS n FROM pg_prepared_statements WHERE statement LIKE '%normalized_subject%' \
             AND statement NOT LIKE '%pg_prepared_statements%'",
        )
        .fetch_one(&mut *conn)
        .await
        .unwrap()
        .int("n")
        .unwrap();
        assert_eq!(kept, 0);
        drop(conn);
        db.close().await;
    }

    const PLAIN: &str = "From: \"Ann Example\" <Ann@Example.org>\r\n\
        To: inbox@ours.test, Bob <bob@else.test>\r\n\
        Cc: carol@else.test\r\n\
        Subject: Re: Hello there\r\n\
        Message-ID: <abc@example.org>\r\n\
        In-Reply-To: <sent-1@ours.test>\r\n\
        References: <root@ours.test>\r\n <sent-1@ours.test>\r\n\
        Received: from a\r\n\
        Received: from b\r\n\
        \r\n\
        Hi!\r\n";

    #[test]
    fn parses_addresses_ids_and_headers() {
        let p = parse(&Bytes::from_static(PLAIN.as_bytes()));
        assert_eq!(p.message_id, "<abc@example.org>");
        assert_eq!(
            p.from,
            (Some("Ann Example".into()), "ann@example.org".into())
        );
        assert_eq!(
            addresses_of(&p.to),
            vec!["inbox@ours.test", "bob@else.test"]
        );
        assert_eq!(addresses_of(&p.cc), vec!["carol@else.test"]);
        assert_eq!(p.subject, "Re: Hello there");
        assert_eq!(p.in_reply_to.as_deref(), Some("<sent-1@ours.test>"));
        assert_eq!(p.references, vec!["<root@ours.test>", "<sent-1@ours.test>"]);
        assert_eq!(p.text.trim(), "Hi!");
        assert_eq!(p.html, "");
        assert_eq!(p.headers["Subject"], "Re: Hello there");
        assert_eq!(
            p.headers["References"],
            "<root@ours.test> <sent-1@ours.test>"
        );
        assert_eq!(p.headers["Received"], json!(["from a", "from b"]));
    }

    #[test]
    fn attachments_and_inline_parts() {
        let raw = "From: a@x.test\r\nTo: b@y.test\r\nSubject: files\r\nMessage-ID: <m1@x.test>\r\n\
            MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"OUT\"\r\n\r\n\
            --OUT\r\nContent-Type: multipart/related; boundary=\"REL\"\r\n\r\n\
            --REL\r\nContent-Type: text/html; charset=utf-8\r\n\r\n<p>logo <img src=\"cid:logo@x\"></p>\r\n\
            --REL\r\nContent-Type: image/png\r\nContent-ID: <logo@x>\r\nContent-Disposition: inline\r\n\
            Content-Transfer-Encoding: base64\r\n\r\nAQID\r\n--REL--\r\n\
            --OUT\r\nContent-Type: application/pdf; name=\"r.pdf\"\r\n\
            Content-Disposition: attachment; filename=\"../r.pdf\"\r\nContent-Transfer-Encoding: base64\r\n\r\nBAUG\r\n\
            --OUT--\r\n";
        let p = parse(&Bytes::from_static(raw.as_bytes()));
        assert!(p.html.contains("cid:logo@x"), "{p:?}");
        assert!(p.text.contains("logo"));
        assert_eq!(p.attachments.len(), 2, "{:?}", p.attachments);
        let png = p
            .attachments
            .iter()
            .find(|a| a.content_type == "image/png")
            .unwrap();
        assert_eq!(png.content, vec![1, 2, 3]);
        assert_eq!(png.content_id.as_deref(), Some("logo@x"));
        assert!(png.inline);
        let pdf = p
            .attachments
            .iter()
            .find(|a| a.content_type == "application/pdf")
            .unwrap();
        assert_eq!(pdf.filename, "_r.pdf");
        assert!(!pdf.inline);
        assert_eq!(pdf.content, vec![4, 5, 6]);
    }

    /// Bodies and parts that were not encoded are slices of the raw bytes,
    /// not copies; decoded ones are the parser's own; search gets a bounded
    /// start of the text.
    #[test]
    fn bodies_and_plain_parts_share_the_raw_message() {
        let long_text = "word ".repeat(search::MAX_INDEXED_TEXT / 4);
        let raw = Bytes::from(format!(
            "From: a@x.test\r\nMessage-ID: <s@x.test>\r\nMIME-Version: 1.0\r\n\
             Content-Type: multipart/mixed; boundary=\"B\"\r\n\r\n\
             --B\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n{long_text}\r\n\
             --B\r\nContent-Type: application/octet-stream\r\n\
             Content-Disposition: attachment; filename=\"plain.bin\"\r\n\r\nnot encoded\r\n\
             --B\r\nContent-Type: application/octet-stream\r\n\
             Content-Disposition: attachment; filename=\"coded.bin\"\r\n\
             Content-Transfer-Encoding: base64\r\n\r\nAQID\r\n--B--\r\n"
        ));
        let p = parse(&raw);
        let inside = |b: &[u8]| {
            let (start, at) = (raw.as_ptr() as usize, b.as_ptr() as usize);
            at >= start && at + b.len() <= start + raw.len()
        };
        assert_eq!(p.text.as_str(), long_text);
        assert!(
            inside(p.text.as_bytes()),
            "the text is a slice of the message"
        );
        assert_eq!(p.search_body.len(), search::MAX_INDEXED_TEXT);
        assert!(p.text.starts_with(p.search_body.as_str()));
        assert!(inside(p.search_body.as_bytes()));
        let plain = &p.attachments[0];
        assert_eq!(plain.content, &b"not encoded"[..]);
        assert!(inside(&plain.content), "an unencoded part is a slice too");
        let coded = &p.attachments[1];
        assert_eq!(coded.content, vec![1, 2, 3]);
        assert!(!inside(&coded.content));
    }

    #[test]
    fn garbage_never_panics_and_gets_a_stable_id() {
        for raw in [
            &b""[..],
            b"\xff\xfe\x00garbage",
            b"no headers at all",
            b"Content-Type: multipart/mixed; boundary=x\r\n\r\n--x\r\nContent-Type: multipart/mixed; boundary=x\r\n\r\n--x",
            b"Subject: =?utf-8?B?////?=\r\nFrom: <<<@>>>\r\nMessage-ID: not an id\r\n\r\nbody",
        ] {
            let raw = Bytes::from_static(raw);
            let a = parse(&raw);
            let b = parse(&raw);
            assert_eq!(a.message_id, b.message_id);
            assert!(a.message_id.starts_with('<') && a.message_id.ends_with('>'));
        }
    }

    mod properties {
        use proptest::prelude::*;

        use super::super::*;

        proptest! {
            #[test]
            fn file_names_are_cleaned_once_for_all(raw in prop_oneof![any::<String>(), "( |\\.|/|\\\\|\u{0}|\n|a|\u{e9}){0,300}"]) {
                let clean = safe_filename(&raw);
                prop_assert_eq!(safe_filename(&clean), clean.clone());
                prop_assert!(clean.chars().count() <= 255);
                prop_assert!(!clean.contains(['/', '\\']) && !clean.contains(char::is_control));
                prop_assert!(!clean.starts_with('.') && clean.trim() == clean);
            }

            #[test]
            fn recipients_normalise_once_for_all(raw in prop_oneof![any::<String>(), "<?[A-Za-z0-9.@ <>\u{212a}]{0,20}>?"]) {
                if let Some(a) = normalize_recipient(&raw) {
                    prop_assert_eq!(normalize_recipient(&a), Some(a.clone()));
                }
            }

            #[test]
            fn any_bytes_parse(raw in prop::collection::vec(any::<u8>(), 0..2000)) {
                let p = parse(&raw.into());
                prop_assert!(p.message_id.starts_with('<') && p.message_id.ends_with('>'));
                prop_assert!(!p.subject.contains(char::is_control));
            }

            #[test]
            fn any_subject_header_parses_to_one_line(subject in any::<String>()) {
                let raw = format!("From: a@x.test\r\nSubject: {subject}\r\nMessage-ID: <p@x.test>\r\n\r\nbody\r\n");
                let p = parse(&raw.into_bytes().into());
                prop_assert!(!p.subject.contains(char::is_control));
                prop_assert_eq!(p.message_id, "<p@x.test>");
            }
        }
    }

    #[test]
    fn recipients_are_normalized() {
        assert_eq!(
            normalize_recipient("<Inbox@Ours.Test>").as_deref(),
            Some("inbox@ours.test")
        );
        assert_eq!(normalize_recipient("no-at-sign"), None);
        assert_eq!(normalize_recipient("a b@c.test"), None);
        assert_eq!(normalize_recipient("@c.test"), None);
    }
}
