//! Sending: validation of a send request, then the one path every outgoing
//! message takes (POST /emails, batches, replies, drafts).
//!
//! The provider is called first, outside any transaction; then one
//! transaction records the attempt whatever its outcome (sent, rejected or
//! failed) with its events, so no answered send is lost or hidden. The
//! crash window this leaves is described in the README ("Sending path").

use std::sync::Arc;

use base64::Engine;
use bytes::Bytes;
use serde_json::Value;

use crate::auth::{ApiKey, address_domain};
use crate::clock;
use crate::core::domains;
use crate::core::error::{CoreError, Problems};
use crate::core::events;
use crate::core::idempotency::{self, Begin, KeyedSend};
use crate::core::interrupted::Preassigned;
use crate::core::mailboxes::{self, Mailbox};
use crate::core::memory;
use crate::core::messages::Message;
use crate::core::quota::QuotaGuard;
use crate::core::search;
use crate::core::suppressions;
use crate::core::threads::{self, ThreadContribution};
use crate::core::validate;
use crate::core::waiting_events;
use crate::ids;
use crate::mime::compose::{self, Composition, Named, OutgoingAttachment};
use crate::model::Timestamp;
use crate::model::drafts::OneOrMany;
use crate::model::events::EmailEventData;
use crate::model::messages::MessageStatus;
use crate::model::sending::{SendRequest, SendResult};
use crate::model::threads::Participant;
use crate::model::webhooks::EventName;
use crate::provider::{OutgoingMessage, PlannedEvent, Provider, ProviderError};
use crate::sql;
use crate::store::{Backend, Db, JobFuture, RowExt, SharedText, Sql, Tx, execute_all};
use crate::telemetry::{Limiter, ProviderErrorKind, SendStatus, Telemetry, context};

pub const MAX_ATTACHMENTS: usize = 20;
pub const MAX_RECIPIENTS: usize = 50;
/// Custom headers one send may set: each is stored with the message and
/// copied into the MIME, so their number is bounded like their size.
pub const MAX_HEADERS: usize = 50;
/// Entries of `tags`, SES's limit on message tags. The service has no use
/// for tags (they are neither stored nor passed on), but a list longer
/// than any provider takes is refused rather than silently dropped.
pub const MAX_TAGS: usize = 50;
/// Open-tracking tokens: 10 characters of time, then 32 random ones.
pub const OPEN_TOKEN_LEN: usize = 42;

/// A validated send: every value well-formed.
#[derive(Debug, Clone)]
pub struct SendInput {
    pub from: Named,
    pub to: Vec<Named>,
    pub cc: Vec<Named>,
    pub bcc: Vec<Named>,
    pub reply_to: Option<String>,
    pub subject: String,
    pub text: Option<String>,
    pub html: Option<String>,
    pub headers: Vec<(String, String)>,
    pub thread_id: Option<String>,
    /// With angle brackets.
    pub in_reply_to: Option<String>,
    pub references: Vec<String>,
    pub attachments: Vec<OutgoingAttachment>,
    /// The message's id and Message-ID, when they were chosen (and written
    /// down as the send's intent) before it started; else chosen by it.
    pub preassigned: Option<Preassigned>,
    /// A keyed send's Idempotency-Key. A claim still pending is written
    /// with the send's first reads, before anything is sent; a key found
    /// taken goes through `idempotency::begin`, which may give it to this
    /// send, else the send ends with [`CoreError::KeyTaken`] and nothing
    /// done. When the provider accepts the message, its record stores the
    /// reply under the key in the same commit (one write fewer than after).
    pub keyed: Option<KeyedSend>,
}

impl SendInput {
    pub fn recipients(&self) -> Vec<String> {
        let mut all: Vec<String> = Vec::new();
        for (_, a) in self.to.iter().chain(&self.cc).chain(&self.bcc) {
            if !all.contains(a) {
                all.push(a.clone());
            }
        }
        all
    }
}

/// Headers the service writes itself; callers may not set them.
const OWNED_HEADERS: &[&str] = &[
    "from",
    "to",
    "cc",
    "bcc",
    "subject",
    "message-id",
    "date",
    "reply-to",
    "in-reply-to",
    "references",
    "mime-version",
    "content-type",
    "content-transfer-encoding",
    "return-path",
    "sender",
];

fn addresses(problems: &mut Problems, param: &str, values: Vec<String>) -> Vec<Named> {
    let mut out = Vec::new();
    for (i, v) in values.iter().enumerate() {
        match validate::mailbox(v) {
            Ok(n) => out.push(n),
            Err(e) => problems.add(format!("{param}[{i}]"), e),
        }
    }
    out
}

/// The prefix of the headers through which SES takes instructions
/// (`X-SES-CONFIGURATION-SET`, `X-SES-SOURCE-ARN`, `X-SES-FROM-ARN`,
/// `X-SES-RETURN-PATH-ARN`, `X-SES-MESSAGE-TAGS`…): a caller setting them
/// could send around the configuration set that publishes events, or as
/// another identity. Matched case-insensitively.
const PROVIDER_HEADER_PREFIX: &str = "x-ses-";

/// Normalises a Message-ID to its bracketed form.
pub fn bracket_id(raw: &str) -> Result<String, String> {
    let inner = raw.trim().trim_start_matches('<').trim_end_matches('>');
    if inner.is_empty()
        || inner.len() > 900
        || !inner.contains('@')
        || inner
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '<' || c == '>')
    {
        return Err(format!("{raw:?} is not a Message-ID"));
    }
    Ok(format!("<{inner}>"))
}

fn mime_type_for(filename: &str) -> &'static str {
    let ext = filename
        .rsplit('.')
        .next()
        .unwrap_or("")
        .to_ascii_lowercase();
    match ext.as_str() {
        "pdf" => "application/pdf",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "svg" => "image/svg+xml",
        "txt" => "text/plain",
        "csv" => "text/csv",
        "html" | "htm" => "text/html",
        "json" => "application/json",
        "zip" => "application/zip",
        "ics" => "text/calendar",
        _ => "application/octet-stream",
    }
}

/// One line of header text: no control character but tab (line breaks
/// would start another header; NUL cannot be stored on PostgreSQL).
fn valid_header_text(s: &str) -> bool {
    !s.contains(|c: char| c.is_control() && c != '\t')
}

/// An attachment's base64 (or a `data:` URL's), whitespace allowed, decoded.
/// The text is cleaned where it lies and dropped once decoded: no second
/// copy of a large attachment's text.
fn decode_attachment(content: String) -> Option<Bytes> {
    let mut text = content.into_bytes();
    if let Some(rest) = text.strip_prefix(b"data:") {
        let start = 5 + rest.iter().position(|b| *b == b',').map_or(0, |i| i + 1);
        text.drain(..start);
    }
    if text.is_ascii() {
        // `char::is_whitespace` in ASCII (`u8::is_ascii_whitespace` leaves
        // out the vertical tab).
        text.retain(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\x0B' | b'\x0C' | b'\r'));
    } else {
        // Anything outside ASCII but whitespace fails to decode anyway.
        let s = String::from_utf8_lossy(&text);
        text = s
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect::<String>()
            .into_bytes();
    }
    base64::engine::general_purpose::STANDARD
        .decode(&text)
        .ok()
        .map(Bytes::from)
}

/// Checks every field, collecting all problems; the first names `param`.
pub fn validate(body: SendRequest) -> Result<SendInput, CoreError> {
    let mut p = Problems::new();
    let from = p.check("from", validate::mailbox(&body.from));
    let to = addresses(&mut p, "to", body.to.into_vec());
    let cc = addresses(
        &mut p,
        "cc",
        body.cc.map(OneOrMany::into_vec).unwrap_or_default(),
    );
    let bcc = addresses(
        &mut p,
        "bcc",
        body.bcc.map(OneOrMany::into_vec).unwrap_or_default(),
    );
    if to.is_empty() && p.is_empty() {
        p.add("to", "at least one recipient is required");
    }
    if to.len() + cc.len() + bcc.len() > MAX_RECIPIENTS {
        p.add(
            "to",
            format!("at most {MAX_RECIPIENTS} recipients in to, cc and bcc together"),
        );
    }
    let reply_to = body
        .reply_to
        .as_deref()
        .and_then(|r| p.check("reply_to", validate::mailbox(r).map(|(_, a)| a)));
    let subject = body.subject.unwrap_or_default();
    if !valid_header_text(&subject) {
        p.add(
            "subject",
            "must not contain line breaks or other control characters",
        );
    } else if subject.chars().count() > 998 {
        p.add("subject", "must be at most 998 characters");
    }
    if body.text.is_none() && body.html.is_none() {
        p.add("text", "give text, html or both");
    }
    // PostgreSQL cannot store NUL; refused here, before anything is sent,
    // rather than failing the record of a send the provider took.
    for (param, body_text) in [("text", &body.text), ("html", &body.html)] {
        if body_text.as_deref().is_some_and(|t| t.contains('\0')) {
            p.add(param, "must not contain NUL characters");
        }
    }
    if let Some(tags) = &body.tags {
        let count = match tags {
            Value::Array(list) => list.len(),
            Value::Object(map) => map.len(),
            _ => 0,
        };
        if count > MAX_TAGS {
            p.add("tags", format!("at most {MAX_TAGS} tags"));
        }
    }
    let given_headers = body.headers.unwrap_or_default();
    if given_headers.len() > MAX_HEADERS {
        p.add("headers", format!("at most {MAX_HEADERS} custom headers"));
    }
    let mut headers = Vec::new();
    for (name, value) in given_headers.into_iter().take(MAX_HEADERS) {
        let param = format!("headers.{name}");
        let token_ok = !name.is_empty()
            && name.len() <= 76
            && name.bytes().all(|b| b.is_ascii_graphic() && b != b':');
        let lower = name.to_ascii_lowercase();
        if !token_ok {
            p.add(param, "is not a valid header name");
        } else if OWNED_HEADERS.contains(&lower.as_str()) {
            p.add(
                param,
                "is set by the service and cannot be overridden; use the matching field",
            );
        } else if lower.starts_with(PROVIDER_HEADER_PREFIX) {
            p.add(
                param,
                "X-SES-* headers are instructions to the provider and cannot be set",
            );
        } else if !valid_header_text(&value) || value.len() > 998 {
            p.add(
                param,
                "value must be one line of at most 998 characters, without control characters",
            );
        } else {
            headers.push((name, value));
        }
    }
    let in_reply_to = body
        .in_reply_to
        .as_deref()
        .and_then(|v| p.check("in_reply_to", bracket_id(v)));
    let mut references = Vec::new();
    for (i, r) in body
        .references
        .map(OneOrMany::into_vec)
        .unwrap_or_default()
        .iter()
        .flat_map(|s| s.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .enumerate()
    {
        if let Some(id) = p.check(&format!("references[{i}]"), bracket_id(&r)) {
            references.push(id);
        }
    }
    let mut attachments = Vec::new();
    let given = body.attachments.unwrap_or_default();
    if given.len() > MAX_ATTACHMENTS {
        p.add(
            "attachments",
            format!("at most {MAX_ATTACHMENTS} attachments"),
        );
    }
    for (i, a) in given.into_iter().enumerate().take(MAX_ATTACHMENTS) {
        let param = format!("attachments[{i}]");
        let filename = a.filename.unwrap_or_default();
        if filename.trim().is_empty() && a.content_id.is_none() {
            p.add(format!("{param}.filename"), "is required");
            continue;
        }
        if !valid_header_text(&filename) || filename.chars().count() > 255 {
            p.add(
                format!("{param}.filename"),
                "must be one line of at most 255 characters, without control characters",
            );
            continue;
        }
        let content = match decode_attachment(a.content) {
            Some(bytes) => bytes,
            None => {
                p.add(
                    format!("{param}.content"),
                    format!("attachment {filename:?} is not valid base64"),
                );
                continue;
            }
        };
        let content_type = match a.content_type {
            Some(ct) if ct.contains('/') && valid_header_text(&ct) && ct.len() <= 255 => ct,
            Some(_) => {
                p.add(format!("{param}.content_type"), "is not a MIME type");
                continue;
            }
            None => mime_type_for(&filename).to_string(),
        };
        let content_id = match a.content_id {
            Some(cid) => {
                let cid = cid
                    .trim()
                    .trim_start_matches('<')
                    .trim_end_matches('>')
                    .to_string();
                if cid.is_empty() || !valid_header_text(&cid) || cid.contains(char::is_whitespace) {
                    p.add(format!("{param}.content_id"), "is not a valid Content-ID");
                    continue;
                }
                Some(cid)
            }
            None => None,
        };
        attachments.push(OutgoingAttachment {
            filename,
            content_type,
            content,
            content_id,
        });
    }
    p.finish()?;
    Ok(SendInput {
        from: from.ok_or_else(|| CoreError::invalid("from", "is required"))?,
        to,
        cc,
        bcc,
        reply_to,
        subject,
        text: body.text,
        html: body.html,
        headers,
        thread_id: body.thread_id.map(String::from),
        in_reply_to,
        references,
        attachments,
        preassigned: None,
        keyed: None,
    })
}

/// [`validate`], on a blocking thread when the attachments are large:
/// decoding megabytes of base64 would hold a worker of the runtime.
pub async fn validate_aside(body: SendRequest) -> Result<SendInput, CoreError> {
    let size = body
        .attachments
        .iter()
        .flatten()
        .map(|a| a.content.len())
        .sum();
    memory::aside(size, move || validate(body))
        .await
        .unwrap_or_else(|| {
            Err(CoreError::Internal(anyhow::anyhow!(
                "the attachments could not be decoded"
            )))
        })
}

/// What a successful send answers (spec "Send result").
#[derive(Debug, Clone)]
pub struct SendOutcome {
    pub message: Message,
    /// The reply ([`ACCEPTED`] and the JSON text of
    /// [`SendOutcome::to_wire`]) is already stored under the send's key.
    pub reply_stored: bool,
}

impl SendOutcome {
    pub fn to_wire(&self) -> SendResult {
        wire(&self.message)
    }
}

/// The status a send the provider accepted answers with.
pub const ACCEPTED: u16 = 202;

/// The reply a send of `m` answers with, as stored for its Idempotency-Key.
pub fn reply_text(m: &Message) -> Result<String, CoreError> {
    serde_json::to_string(&wire(m))
        .map_err(|e| CoreError::Internal(anyhow::anyhow!("a reply could not be written: {e}")))
}

fn wire(m: &Message) -> SendResult {
    SendResult {
        id: crate::ids::Id::from_stored(m.id.clone()),
        message_id: m.message_id.clone(),
        provider_message_id: m.provider_message_id.clone(),
        thread_id: crate::ids::Id::from_stored(m.thread_id.clone()),
        from: m.from_address.clone(),
        to: m.to.clone(),
        subject: m.subject.clone(),
    }
}

fn names(list: &[Named]) -> Vec<String> {
    list.iter().map(|(_, a)| a.clone()).collect()
}

/// The sender's mailbox as found, or (on first use by a key that holds the
/// address) a new one on `domain_id`, the verified sending domain. Returns
/// it and whether it is new.
fn sender_mailbox(
    key: &ApiKey,
    address: &str,
    found: Option<Mailbox>,
    domain_id: String,
) -> Result<(Mailbox, bool), CoreError> {
    if let Some(m) = found {
        return Ok((m, false));
    }
    mailboxes::check_reach_for_address(key, address)?;
    Ok((Mailbox::on_first_use(address, domain_id), true))
}

/// What sending uses of the application: its database, provider and quota,
/// and two settings. The application builds it from its own state.
#[derive(Clone)]
pub struct Sending {
    pub db: Db,
    pub provider: Arc<dyn Provider>,
    pub quota: Arc<QuotaGuard>,
    /// Whether HTML mail gets an open-tracking image.
    pub open_tracking: bool,
    /// Where that image is served from.
    pub public_url: Arc<str>,
    /// Counts sends by outcome and times the provider.
    pub metrics: Telemetry,
}

/// Sends one message through the provider, recording it whatever happens.
/// The send runs on a task of its own: a caller that goes away (an HTTP
/// client that disconnects) must not cancel it during the provider call,
/// when the provider may have taken the message but it is not recorded yet.
/// `ctx` is a [`Sending`] or what makes one (the application's state).
pub async fn send(
    ctx: impl Into<Sending>,
    key: &ApiKey,
    input: SendInput,
) -> Result<SendOutcome, CoreError> {
    let (ctx, key) = (ctx.into(), key.clone());
    // With the request's span and id: the record and its events are the request's.
    tokio::spawn(context::carry(async move {
        start(ctx, &key, input).await?.finish().await
    }))
    .await
    .map_err(|e| CoreError::Internal(anyhow::anyhow!("a send's task failed: {e}")))?
}

/// A send the provider has answered and whose record is queued (on SQLite)
/// or written (on PostgreSQL).
pub struct PendingSend {
    /// `None` once settled.
    written: Option<JobFuture<'static, Result<Recorded, CoreError>>>,
    failure: Option<CoreError>,
    recipients: usize,
    quota: Arc<QuotaGuard>,
    /// Set when the provider accepted the message: what to record should
    /// the full record fail.
    accepted: Option<AcceptedSend>,
}

impl PendingSend {
    /// Waits until the record is committed; then the send's result. A
    /// message the provider accepted whose record fails, by an error or a
    /// panic, is still recorded, as `failed` (see [`AcceptedSend`]), and
    /// answered [`CoreError::SentNotRecorded`].
    pub async fn finish(mut self) -> Result<SendOutcome, CoreError> {
        let written = match self.written.as_mut() {
            Some(w) => w.await,
            None => Err(CoreError::Internal(anyhow::anyhow!(
                "a send was finished twice"
            ))),
        };
        self.written = None;
        match (written, self.accepted.take()) {
            (Ok(recorded), _) => match self.failure.take() {
                None => {
                    self.quota.record(self.recipients);
                    Ok(SendOutcome {
                        message: recorded.message,
                        reply_stored: recorded.reply_stored,
                    })
                }
                Some(err) => Err(err),
            },
            (Err(cause), Some(accepted)) => {
                self.quota.record(self.recipients);
                Err(accepted.record_short(cause).await)
            }
            (Err(cause), None) => Err(cause),
        }
    }
}

impl Drop for PendingSend {
    /// A caller that goes away before the record is settled (an HTTP client
    /// that disconnects) leaves the wait for it, and the short record should
    /// it fail, to a task of their own.
    fn drop(&mut self) {
        let (Some(written), Some(accepted)) = (self.written.take(), self.accepted.take()) else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(context::carry(async move {
                    if let Err(cause) = written.await {
                        accepted.record_short(cause).await;
                    }
                }));
            }
            Err(_) => tracing::error!(
                id = %accepted.message.id,
                "a send's record was dropped outside the runtime; it may be missing"
            ),
        }
    }
}

/// What `error` says of a message recorded in the short form.
pub const SHORT_RECORD_ERROR: &str = "the provider accepted this message, but the service \
     could not write its full record (see the server log); it is recorded in short: \
     no attachments, search entry or place in an existing thread";

/// A message the provider accepted, kept aside until its record is
/// committed. Should that fail, whatever the cause (an error, a panic in the
/// record job, a failed group commit), [`AcceptedSend::record_short`]
/// writes it again in a short form that shares as little as possible with
/// the full record: a thread of its own, the message row as `failed` with
/// its `provider_message_id`, its recipients and the `email.failed` outbox
/// event. The mail went out: it must be listed, and a retry must not send
/// it again.
struct AcceptedSend {
    db: Db,
    /// The message without its bodies, which are in `bodies`.
    message: Message,
    bodies: Bodies,
    new_mailbox: Option<Mailbox>,
    done_at: i64,
}

impl AcceptedSend {
    /// Writes the short record and returns the error to answer.
    async fn record_short(self, cause: CoreError) -> CoreError {
        let id = self.message.id.clone();
        let provider_message_id = self.message.provider_message_id.clone().unwrap_or_default();
        tracing::error!(
            %id,
            %provider_message_id,
            error = %error_detail(&cause),
            "the provider accepted a message whose record failed; recording it in short as failed"
        );
        let AcceptedSend {
            db,
            mut message,
            bodies,
            new_mailbox,
            done_at,
        } = self;
        message.status = MessageStatus::Failed;
        message.error = Some(SHORT_RECORD_ERROR.into());
        message.has_attachments = false;
        let bodies = Bodies {
            search: SharedText::default(),
            ..bodies
        };
        let backend = db.backend();
        let written: Result<(), sqlx::Error> = db
            .write(move |tx| {
                Box::pin(async move {
                    if let Some(mb) = &new_mailbox {
                        message.mailbox_id = mailboxes::insert_or_existing(tx, mb).await?;
                    }
                    message.thread_id = ids::new_id("thr");
                    let event = events::emit_statement(
                        EventName::EmailFailed,
                        Some(&message.mailbox_id),
                        EmailEventData {
                            email: message.summary(),
                            occurred_at: Timestamp(done_at),
                            sent_at: None,
                            recipients: None,
                            detail: None,
                        },
                    )?
                    .1;
                    let mut writes = short_record_writes(&message, &bodies);
                    writes.push(event);
                    execute_all(tx, backend, &writes).await
                })
            })
            .await;
        let message = match written {
            Ok(()) => format!(
                "the provider accepted the message (provider message id {provider_message_id}), \
                 but the service failed to record it in full; it is listed as {id} with status \
                 failed. It was sent: do not send it again"
            ),
            Err(e) => {
                tracing::error!(
                    %id,
                    %provider_message_id,
                    error = %e,
                    "the short record of an accepted message failed too: it is not recorded"
                );
                format!(
                    "the provider accepted the message (provider message id {provider_message_id}), \
                     but the service failed to record it. It was sent: do not send it again"
                )
            }
        };
        CoreError::SentNotRecorded {
            message,
            id,
            provider_message_id,
        }
    }
}

/// The writes of a message recorded in short, in a thread of its own (see
/// [`AcceptedSend`] and `core::interrupted`): the thread, the message row
/// with `bodies` and its recipients.
pub(crate) fn short_record_writes(message: &Message, bodies: &Bodies) -> Vec<Sql> {
    [
        short_thread_insert(message),
        message_insert(message, bodies, None),
    ]
    .into_iter()
    .chain(recipients_insert(message))
    .collect()
}

/// An error with its causes, for the log.
fn error_detail(e: &CoreError) -> String {
    match e {
        CoreError::Internal(inner) => format!("{inner:#}"),
        other => other.to_string(),
    }
}

/// A thread holding just `m`, written without the thread logic of a full
/// record: the subject as it is, lower-cased for its key.
fn short_thread_insert(m: &Message) -> Sql {
    let participants: Vec<Participant> = std::iter::once(Participant {
        name: m.from_name.clone().unwrap_or_default(),
        address: m.from_address.clone(),
    })
    .chain(m.to.iter().chain(&m.cc).map(|a| Participant {
        name: String::new(),
        address: a.clone(),
    }))
    .collect();
    sql!(
        "INSERT INTO threads (id, mailbox_id, mailbox, domain, subject, normalized_subject, snippet, \
         folders, participants, message_count, unread_count, is_starred, has_attachments, \
         last_message_at, created_at) VALUES ($1, $2, $3, $4, $5, $6, '', $7, $8, 1, 0, 0, 0, $9, $10)",
        &m.thread_id,
        &m.mailbox_id,
        &m.mailbox,
        &m.domain,
        &m.subject,
        m.subject.to_lowercase(),
        threads::format_folders(&["sent".to_string()]),
        serde_json::to_string(&participants).unwrap_or_else(|_| "[]".into()),
        m.created_at,
        clock::now_micros()
    )
}

/// The INSERT of an outbound message row, its bodies bound from `bodies`.
fn message_insert(m: &Message, bodies: &Bodies, open_token: Option<String>) -> Sql {
    sql!(
        "INSERT INTO messages (id, thread_id, mailbox_id, mailbox, domain, direction, is_draft, folder, \
         message_id, provider_message_id, from_address, from_name, to_addresses, cc_addresses, \
         bcc_addresses, reply_to, subject, text_body, html_body, search_body, headers, in_reply_to, \
         references_header, status, error, open_count, open_token, is_read, is_starred, \
         has_attachments, api_key_id, created_at, sent_at) \
         VALUES ($1, $2, $3, $4, $5, 'outbound', 0, 'sent', $6, $7, $8, $9, $10, $11, $12, $13, $14, \
         $15, $16, $17, $18, $19, $20, $21, $22, 0, $23, 1, 0, $24, $25, $26, $27)",
        &m.id,
        &m.thread_id,
        &m.mailbox_id,
        &m.mailbox,
        &m.domain,
        &m.message_id,
        m.provider_message_id.clone(),
        &m.from_address,
        m.from_name.clone(),
        serde_json::to_string(&m.to).unwrap_or_default(),
        serde_json::to_string(&m.cc).unwrap_or_default(),
        serde_json::to_string(&m.bcc).unwrap_or_default(),
        m.reply_to.clone(),
        &m.subject,
        bodies.text.clone().unwrap_or_default(),
        bodies.html.clone().unwrap_or_default(),
        &bodies.search,
        m.headers.to_string(),
        m.in_reply_to.clone(),
        m.references.clone(),
        m.status.as_str(),
        m.error.clone(),
        open_token,
        m.has_attachments,
        m.api_key_id.clone(),
        m.created_at,
        m.sent_at
    )
}

/// The rows of `m`'s recipients (to, cc, bcc), if it has any.
fn recipients_insert(m: &Message) -> Option<Sql> {
    let mut rcpt = Sql::new("INSERT INTO message_recipients (message_id, kind, address) VALUES ");
    let mut first = true;
    for (kind, list) in [("to", &m.to), ("cc", &m.cc), ("bcc", &m.bcc)] {
        for addr in list {
            if !first {
                rcpt.push(", ");
            }
            first = false;
            rcpt.push("(")
                .bind(&m.id)
                .push(", ")
                .bind(kind)
                .push(", ")
                .bind(addr)
                .push(")");
        }
    }
    (!first).then_some(rcpt)
}

/// Checks, hands the message to the provider and queues its record. A batch
/// starts its sends one after another, in order, and waits for their records
/// together, so that one send's commit does not hold up the next.
pub async fn start(
    ctx: impl Into<Sending>,
    key: &ApiKey,
    mut input: SendInput,
) -> Result<PendingSend, CoreError> {
    let ctx: Sending = ctx.into();
    let from = input.from.1.clone();
    if !key.reach.covers_address(&from) {
        return Err(CoreError::Forbidden(format!(
            "this API key may not send as {from}"
        )));
    }
    let from_domain = address_domain(&from).to_string();
    let recipients = input.recipients();
    if recipients.is_empty() {
        return Err(CoreError::invalid(
            "to",
            "at least one recipient is required",
        ));
    }
    // Three independent reads at once, and the key's claim if the send
    // makes it: on PostgreSQL one statement, one round trip.
    let reads = [
        &domains::sending_domain_read(&from_domain),
        &suppressions::suppressed_read(&recipients),
        &mailboxes::by_address_read(&from),
    ];
    let pending_claim = input.keyed.as_ref().filter(|k| k.claim_pending);
    let [domain_rows, suppressed_rows, mailbox_rows] = match pending_claim {
        Some(KeyedSend { claim, .. }) => {
            let (claimed, rows) = ctx
                .db
                .write_then_lookup_each(&claim.taking_if_free(), reads)
                .await?;
            // Taken: what became of the request that took it decides.
            if !claimed && let Begin::Taken(taken) = idempotency::begin(&ctx.db, claim).await? {
                return Err(CoreError::KeyTaken(taken));
            }
            rows
        }
        None => ctx.db.lookup_each(reads).await?,
    };
    let sending_domain = domains::nearest_verified(&from_domain, &domain_rows)?;
    let suppressed = suppressions::suppressed_in(&suppressed_rows)?;
    let found_mailbox = mailboxes::first_mailbox(&mailbox_rows)?;
    let Some(sending_domain) = sending_domain else {
        return Err(CoreError::invalid(
            "from",
            format!("{from_domain} is not a verified sending domain of this account"),
        ));
    };
    if !suppressed.is_empty() {
        let param = if input.to.iter().any(|(_, a)| suppressed.contains(a)) {
            "to"
        } else if input.cc.iter().any(|(_, a)| suppressed.contains(a)) {
            "cc"
        } else {
            "bcc"
        };
        return Err(CoreError::invalid(
            param,
            format!(
                "{} on the suppression list (an earlier hard bounce or complaint); remove it with DELETE /api/v1/suppressions/{{address}} to send again",
                suppressed.join(", ") + if suppressed.len() == 1 { " is" } else { " are" }
            ),
        ));
    }
    if let Err(e) = ctx.quota.admit(recipients.len()).await {
        ctx.metrics.refused(Limiter::SendQuota);
        return Err(e);
    }

    let (mailbox, new_mailbox) = sender_mailbox(key, &from, found_mailbox, sending_domain.id)?;
    let now = clock::now_micros();
    let Preassigned { id, token } = input.preassigned.take().unwrap_or_default();
    let message_id = format!("<{token}@{from_domain}>");
    // Time first, so that the token's index grows at its end instead of
    // taking a write on a random page of it per send; 32 random characters
    // after it keep it unguessable.
    let open_token = (ctx.open_tracking && input.html.is_some())
        .then(|| ids::time_ordered_token(OPEN_TOKEN_LEN));
    // The bodies, taken (not copied) from the input: the message is built
    // from them and the record binds them.
    let bodies = Bodies::new(input.text.take(), input.html.take());

    // The thread named by thread_id must belong to the sender's mailbox;
    // checked before anything is sent.
    if let Some(tid) = &input.thread_id {
        let row = ctx
            .db
            .lookup_optional(&sql!("SELECT mailbox_id FROM threads WHERE id = $1", tid))
            .await?;
        let ours = match row {
            Some(r) => r.text("mailbox_id")? == mailbox.id,
            None => false,
        };
        if !ours {
            return Err(CoreError::invalid(
                "thread_id",
                format!("no thread {tid} in the mailbox of {from}"),
            ));
        }
    }

    // What the MIME encodes and the record binds.
    let bound = input
        .attachments
        .iter()
        .map(|a| a.content.len())
        .sum::<usize>()
        + bodies.text.as_ref().map_or(0, |t| t.len())
        + bodies.html.as_ref().map_or(0, |h| h.len());
    // 1. Hand the message to the provider, outside any transaction. What
    // is built for it (the tracked HTML, the MIME) goes when it answers.
    let html = match (&bodies.html, &open_token) {
        (Some(h), Some(t)) => Some(SharedText::from(compose::with_tracking_pixel(
            h,
            &format!("{}/t/o/{t}", ctx.public_url),
        ))),
        (h, _) => h.clone(),
    };
    // Shared, not copied, with the composer (on its own thread when large).
    let parts = (bodies.text.clone(), html, input.attachments.clone());
    let head = Composition {
        from: input.from.clone(),
        to: input.to.clone(),
        cc: input.cc.clone(),
        reply_to: input.reply_to.clone(),
        subject: input.subject.clone(),
        text: None,
        html: None,
        message_id: message_id.trim_matches(['<', '>']).to_string(),
        in_reply_to: input
            .in_reply_to
            .as_ref()
            .map(|s| s.trim_matches(['<', '>']).to_string()),
        references: input
            .references
            .iter()
            .map(|s| s.trim_matches(['<', '>']).to_string())
            .collect(),
        headers: input.headers.clone(),
        attachments: &[],
        date: now / 1_000_000,
    };
    let composed = memory::aside(bound, move || {
        let (text, html, attachments) = &parts;
        compose::compose(&Composition {
            text: text.as_deref(),
            html: html.as_deref(),
            attachments,
            ..head
        })
    })
    .await
    .unwrap_or_else(|| Err(std::io::Error::other("the composer stopped")));
    let outcome = match composed {
        Ok(raw) => {
            let called = std::time::Instant::now();
            let answer = ctx
                .provider
                .send_raw(&OutgoingMessage {
                    from: from.clone(),
                    recipients: recipients.clone(),
                    raw,
                    message_id: id.clone(),
                })
                .await;
            ctx.metrics.provider_call(answer.is_ok(), called.elapsed());
            if let Err(e) = &answer {
                ctx.metrics.provider_error(match e {
                    ProviderError::Rejected(_) => ProviderErrorKind::Rejected,
                    ProviderError::NotFound(_) => ProviderErrorKind::NotFound,
                    ProviderError::Throttled { .. } => ProviderErrorKind::Throttled,
                    ProviderError::Unavailable(_) => ProviderErrorKind::Unavailable,
                });
            }
            answer
        }
        Err(e) => {
            ctx.metrics.provider_error(ProviderErrorKind::Compose);
            Err(ProviderError::Rejected(format!(
                "the message could not be composed: {e}"
            )))
        }
    };
    let done_at = clock::now_micros();
    let (status, provider_message_id, error, event, failure) = match outcome {
        Ok(pid) => (
            MessageStatus::Sent,
            Some(pid),
            None,
            EventName::EmailSent,
            None,
        ),
        Err(e) => {
            let text = e.to_string();
            let (status, event, err) = match e {
                ProviderError::Rejected(m) | ProviderError::NotFound(m) => (
                    MessageStatus::Rejected,
                    EventName::EmailRejected,
                    CoreError::invalid("body", format!("the provider rejected the message: {m}")),
                ),
                ProviderError::Throttled {
                    message,
                    retry_after_secs,
                } => (
                    MessageStatus::Failed,
                    EventName::EmailFailed,
                    CoreError::RateLimited {
                        message: format!("the provider is throttling sends: {message}"),
                        retry_after: retry_after_secs.unwrap_or(1),
                    },
                ),
                ProviderError::Unavailable(m) => (
                    MessageStatus::Failed,
                    EventName::EmailFailed,
                    CoreError::Upstream {
                        kind: crate::core::error::UpstreamKind::Unavailable,
                        message: format!("the provider could not be reached: {m}"),
                    },
                ),
            };
            (status, None, Some(text), event, Some(err))
        }
    };

    ctx.metrics.send_finished(match status {
        MessageStatus::Sent => SendStatus::Sent,
        MessageStatus::Rejected => SendStatus::Rejected,
        _ => SendStatus::Failed,
    });
    tracing::debug!(
        %id,
        status = ?status,
        provider_message_id = provider_message_id.as_deref().unwrap_or(""),
        "provider answered the send"
    );

    // What the provider already knows it will report (the simulator's
    // outcomes): stored with the record, so a crash cannot lose them.
    let planned = match &provider_message_id {
        Some(pid) => ctx.provider.planned_events(pid, &recipients, done_at),
        None => Vec::new(),
    };

    // 2. One transaction records the attempt whatever its outcome: the
    // message with its thread, recipients, attachments, search entry, its
    // `send` event, the outbox event and the planned provider events.
    let message = Message {
        id: id.clone(),
        thread_id: String::new(),
        mailbox_id: mailbox.id.clone(),
        mailbox: mailbox.address.clone(),
        domain: mailbox.domain.clone(),
        direction: "outbound".into(),
        is_draft: false,
        folder: "sent".into(),
        message_id: message_id.clone(),
        provider_message_id,
        from_address: from.clone(),
        from_name: input.from.0.clone(),
        to: names(&input.to),
        cc: names(&input.cc),
        bcc: names(&input.bcc),
        reply_to: input.reply_to.clone(),
        subject: input.subject.clone(),
        // Bound from `bodies` by `record`: a copy here would cost their size.
        text: String::new(),
        html: String::new(),
        headers: Value::Object(
            input
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect(),
        ),
        in_reply_to: input.in_reply_to.clone(),
        references: (!input.references.is_empty()).then(|| input.references.join(" ")),
        status,
        error,
        opened_at: None,
        open_count: 0,
        is_read: true,
        is_starred: false,
        has_attachments: !input.attachments.is_empty(),
        api_key_id: Some(key.id.clone()),
        created_at: now,
        sent_at: (status == MessageStatus::Sent).then_some(done_at),
        received_at: None,
    };
    let backend = ctx.db.backend();
    let new_mailbox = new_mailbox.then_some(mailbox);
    let recipient_count = recipients.len();
    let input = Arc::new(input);
    let accepted = (status == MessageStatus::Sent).then(|| AcceptedSend {
        db: ctx.db.clone(),
        message: message.clone(),
        bodies: bodies.clone(),
        new_mailbox: new_mailbox.clone(),
        done_at,
    });
    let job = RecordJob {
        backend,
        input,
        message,
        new_mailbox,
        open_token,
        bodies,
        done_at,
        event,
        planned: Arc::new(planned),
    };
    let first = ctx.db.write_queued_sized(bound, job.clone().work()).await;
    let written = retry_record_on_connection_faults(ctx.db.clone(), bound, job, first);
    Ok(PendingSend {
        written: Some(written),
        failure,
        recipients: recipient_count,
        quota: ctx.quota.clone(),
        accepted,
    })
}

/// Everything a send's record needs, so that it can be written again.
#[derive(Clone)]
struct RecordJob {
    backend: Backend,
    input: Arc<SendInput>,
    message: Message,
    new_mailbox: Option<Mailbox>,
    open_token: Option<String>,
    bodies: Bodies,
    done_at: i64,
    event: EventName,
    /// The provider's outcomes known ahead (the simulator's), shared by
    /// every try.
    planned: Arc<Vec<PlannedEvent>>,
}

impl RecordJob {
    fn work(
        self,
    ) -> impl for<'t> FnOnce(&'t mut Tx) -> JobFuture<'t, Result<Recorded, CoreError>> + Send + 'static
    {
        move |tx| {
            Box::pin(async move {
                record(
                    tx,
                    self.backend,
                    &self.input,
                    self.message,
                    self.new_mailbox.as_ref(),
                    self.open_token,
                    &self.bodies,
                    self.done_at,
                    self.event,
                    &self.planned,
                )
                .await
            })
        }
    }
}

/// Waits before each new try of a record whose connection failed.
const RECORD_RETRY_DELAYS: [std::time::Duration; 3] = [
    std::time::Duration::from_millis(50),
    std::time::Duration::from_millis(250),
    std::time::Duration::from_secs(1),
];

/// A record that failed because the database connection did (PostgreSQL
/// restarting, its connections dropped) rolled back whole, so it is written
/// again on a new connection, a few times over about a second and a half:
/// the provider has accepted the message, and only a lasting outage should
/// leave it to the short record. A commit whose acknowledgement was lost
/// may have gone through: the message is looked for before writing again.
fn retry_record_on_connection_faults(
    db: Db,
    bound: usize,
    job: RecordJob,
    first: JobFuture<'static, Result<Recorded, CoreError>>,
) -> JobFuture<'static, Result<Recorded, CoreError>> {
    Box::pin(async move {
        let mut result = first.await;
        for delay in RECORD_RETRY_DELAYS {
            match &result {
                Err(CoreError::Internal(e))
                    if crate::store::fault::classify(e)
                        == Some(crate::store::fault::StoreFault::Unavailable) => {}
                _ => break,
            }
            tracing::warn!(id = %job.message.id, "a send's record lost its connection; writing it again");
            tokio::time::sleep(delay).await;
            // A commit whose acknowledgement was lost may have gone through.
            let recorded = crate::core::messages::get(
                &db,
                &crate::auth::Reach::Account,
                crate::core::messages::Direction::Outbound,
                &job.message.id,
            )
            .await;
            match recorded {
                // Whether the reply went with it is not known: the caller
                // stores it (again).
                Ok(Some(message)) => {
                    return Ok(Recorded {
                        message,
                        reply_stored: false,
                    });
                }
                Ok(None) => {}
                Err(e) => {
                    result = Err(e.into());
                    continue;
                }
            }
            result = db.write_queued_sized(bound, job.clone().work()).await.await;
        }
        result
    })
}

/// A send's bodies, shared (not copied) by the message built from them,
/// its record and, should that fail, its short record.
#[derive(Clone)]
pub(crate) struct Bodies {
    text: Option<SharedText>,
    html: Option<SharedText>,
    /// What search indexes: the start of the text, else of the HTML's text.
    search: SharedText,
}

impl Bodies {
    /// None: a record without its bodies.
    pub(crate) fn none() -> Bodies {
        Bodies::new(None, None)
    }

    fn new(text: Option<String>, html: Option<String>) -> Bodies {
        let text = text.map(SharedText::from);
        let html = html.map(SharedText::from);
        let search = match (&text, &html) {
            (Some(t), _) if !t.is_empty() => search::indexed_prefix(t),
            (_, Some(h)) => {
                // Tags and entities shrink: a few times the indexed size of
                // HTML is enough to fill it.
                let start = h.prefix(4 * search::MAX_INDEXED_TEXT);
                search::indexed_prefix(&SharedText::from(compose::html_to_text(&start)))
            }
            _ => SharedText::default(),
        };
        Bodies { text, html, search }
    }
}

/// A send's record, committed.
struct Recorded {
    message: Message,
    /// The reply under the send's key was written with it.
    reply_stored: bool,
}

/// Writes a send attempt and everything it touches within `tx`.
#[allow(clippy::too_many_arguments)]
async fn record(
    tx: &mut Tx,
    backend: Backend,
    input: &SendInput,
    mut m: Message,
    new_mailbox: Option<&Mailbox>,
    open_token: Option<String>,
    bodies: &Bodies,
    done_at: i64,
    event: EventName,
    planned: &[PlannedEvent],
) -> Result<Recorded, CoreError> {
    // Reads come first; every write is collected and sent at the end as one
    // batch (see `store::execute_all`).
    let mut writes: Vec<Sql> = Vec::new();
    if let Some(mb) = new_mailbox {
        // A send just before this one (a batch, or another request) may have
        // created the same mailbox since it was looked up: use that one.
        m.mailbox_id = mailboxes::insert_or_existing(tx, mb).await?;
    }
    let existing = match &input.thread_id {
        Some(tid) => Some(tid.clone()),
        None => {
            let mut refs: Vec<String> = input.references.clone();
            if let Some(irt) = &input.in_reply_to {
                refs.push(irt.clone());
            }
            threads::by_references(tx, &m.mailbox_id, &refs).await?
        }
    };
    let mut participants: Vec<Named> = vec![input.from.clone()];
    participants.extend(input.to.iter().cloned());
    participants.extend(input.cc.iter().cloned());
    let (thread_id, thread_change) = threads::add_message_statement(
        tx,
        backend,
        existing.as_deref(),
        &ThreadContribution {
            mailbox_id: &m.mailbox_id,
            mailbox: &m.mailbox,
            domain: &m.domain,
            subject: &m.subject,
            snippet_source: &bodies.search,
            folder: "sent",
            participants,
            unread: false,
            has_attachments: m.has_attachments,
            at: m.created_at,
        },
    )
    .await?;
    m.thread_id = thread_id;
    writes.push(thread_change);
    writes.push(message_insert(&m, bodies, open_token));
    writes.extend(recipients_insert(&m));
    writes.extend(waiting_events::planned_insert(planned, done_at));
    for a in &input.attachments {
        writes.push(sql!(
            "INSERT INTO attachments (id, message_id, filename, content_type, size, content_id, inline, content) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            ids::new_id("att"),
            &m.id,
            &a.filename,
            &a.content_type,
            a.content.len() as i64,
            a.content_id.clone(),
            a.content_id.is_some(),
            a.content.clone()
        ));
    }
    if m.status == MessageStatus::Sent {
        writes.push(sql!(
            "INSERT INTO message_events (id, message_id, type, recipient, detail, occurred_at, created_at) \
             VALUES ($1, $2, 'send', NULL, NULL, $3, $3)",
            ids::new_id("mev"),
            &m.id,
            done_at
        ));
    }
    let data = EmailEventData {
        email: m.summary(),
        occurred_at: Timestamp(done_at),
        sent_at: (m.status == MessageStatus::Sent).then_some(Timestamp(done_at)),
        recipients: None,
        detail: None,
    };
    writes.push(events::emit_statement(event, Some(&m.mailbox_id), data)?.1);
    // Only an accepted send's reply: a refusal's is the caller's to store
    // or not.
    let reply = input
        .keyed
        .as_ref()
        .filter(|_| m.status == MessageStatus::Sent);
    if let Some(keyed) = reply {
        writes.push(idempotency::finish_statement(
            &keyed.claim.record,
            ACCEPTED,
            &reply_text(&m)?,
        ));
    }
    let indexed = search::IndexedMessage {
        id: &m.id,
        thread_id: &m.thread_id,
        subject: &m.subject,
        body: &bodies.search,
        at: m.created_at,
    };
    search::write_and_index(tx, backend, writes, &indexed).await?;
    Ok(Recorded {
        message: m,
        reply_stored: reply.is_some(),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn body(v: Value) -> SendRequest {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn validation_collects_every_problem() {
        let err = validate(body(json!({
            "from": "nope",
            "to": ["ok@x.com", "bad"],
            "headers": {"Message-ID": "<x@y>", "X-Ok": "1"},
            "attachments": [{"filename": "a.txt", "content": "!!!"}],
        })))
        .unwrap_err();
        let CoreError::Invalid(problems) = err else {
            panic!()
        };
        let params: Vec<_> = problems.iter().map(|p| p.param.as_str()).collect();
        assert_eq!(params[0], "from");
        assert!(params.contains(&"to[1]"));
        assert!(params.contains(&"text"));
        assert!(params.contains(&"headers.Message-ID"));
        assert!(params.contains(&"attachments[0].content"));
    }

    #[test]
    fn data_urls_and_inline_parts_are_accepted() {
        let input = validate(body(json!({
            "from": "Team <team@x.com>",
            "to": "a@y.com",
            "html": "<img src=\"cid:logo\">",
            "attachments": [{"content": "data:image/png;base64,AQID", "content_id": "<logo>", "content_type": "image/png"}],
            "references": "<a@b> <c@d>",
        })))
        .unwrap();
        assert_eq!(input.from, (Some("Team".into()), "team@x.com".into()));
        assert_eq!(input.attachments[0].content, vec![1, 2, 3]);
        assert_eq!(input.attachments[0].content_id.as_deref(), Some("logo"));
        assert_eq!(input.references, vec!["<a@b>", "<c@d>"]);
    }

    fn problem_params(v: Value) -> Vec<String> {
        match validate(body(v)) {
            Err(CoreError::Invalid(problems)) => problems.into_iter().map(|p| p.param).collect(),
            other => panic!("expected a 422, got {other:?}"),
        }
    }

    fn headers(n: usize) -> Value {
        Value::Object((0..n).map(|i| (format!("X-H{i}"), json!("v"))).collect())
    }

    #[test]
    fn provider_control_headers_are_refused_in_any_case() {
        for name in [
            "X-SES-CONFIGURATION-SET",
            "x-ses-source-arn",
            "X-Ses-From-Arn",
            "X-SES-MESSAGE-TAGS",
        ] {
            let params = problem_params(json!({
                "from": "a@x.com", "to": "b@y.com", "text": "t",
                "headers": {name: "v", "X-Fine": "1"},
            }));
            assert_eq!(params, [format!("headers.{name}")]);
        }
        // Only the prefix: a header merely mentioning SES is fine.
        let ok = validate(body(json!({
            "from": "a@x.com", "to": "b@y.com", "text": "t",
            "headers": {"X-Sesame": "1", "X-Mailer-SES": "2"},
        })))
        .unwrap();
        assert_eq!(ok.headers.len(), 2);
    }

    #[test]
    fn custom_headers_and_tags_are_capped() {
        let at_limit = json!({"from": "a@x.com", "to": "b@y.com", "text": "t",
            "headers": headers(MAX_HEADERS),
            "tags": (0..MAX_TAGS).map(|i| json!({"name": format!("t{i}"), "value": "v"})).collect::<Vec<_>>()});
        assert_eq!(validate(body(at_limit)).unwrap().headers.len(), MAX_HEADERS);
        let params = problem_params(json!({"from": "a@x.com", "to": "b@y.com", "text": "t",
            "headers": headers(MAX_HEADERS + 1)}));
        assert_eq!(params, ["headers"]);
        let params = problem_params(json!({"from": "a@x.com", "to": "b@y.com", "text": "t",
            "tags": vec![json!({"name": "n", "value": "v"}); MAX_TAGS + 1]}));
        assert_eq!(params, ["tags"]);
    }

    #[test]
    fn control_characters_are_refused_where_they_cannot_go() {
        let params = problem_params(json!({"from": "a@x.com", "to": "b@y.com",
            "text": "nul \u{0} here", "html": "<p>\u{0}</p>"}));
        assert_eq!(params, ["text", "html"]);
        let params = problem_params(json!({"from": "a@x.com", "to": "b@y.com", "text": "t",
            "subject": "bell \u{7}", "in_reply_to": "<a\u{1}@b>",
            "headers": {"X-A": "escape \u{1b}[31m"}}));
        assert_eq!(params, ["subject", "headers.X-A", "in_reply_to"]);
        // A tab is fine.
        assert!(
            validate(body(
                json!({"from": "a@x.com", "to": "b@y.com", "text": "t",
            "subject": "a\tb", "headers": {"X-A": "1\t2"}})
            ))
            .is_ok()
        );
    }

    mod properties {
        use proptest::prelude::*;

        use super::*;

        fn header_name() -> impl Strategy<Value = String> {
            prop_oneof![
                "[!-~]{0,12}",
                "(X-SES-|x-ses-|X-Ses|From|X-)[A-Za-z-]{0,8}",
                ".{0,8}"
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(128))]

            /// Whatever the strings, validation answers (never panics), and
            /// what it accepts can go into a header and the database.
            #[test]
            fn what_validation_accepts_is_safe_to_send(
                from in prop_oneof![".{0,20}", "[A-Za-z ]{0,8} <[a-z]{1,5}@x\\.com>"],
                subject in any::<String>(),
                names in prop::collection::vec(header_name(), 0..4),
                value in any::<String>(),
                filename in any::<String>(),
                reference in any::<String>(),
            ) {
                let headers: serde_json::Map<String, Value> =
                    names.iter().map(|n| (n.clone(), json!(value))).collect();
                let result = validate(body(json!({
                    "from": from, "to": "b@y.com", "text": "t", "subject": subject,
                    "headers": headers, "references": reference,
                    "attachments": [{"filename": filename, "content": "AQID"}],
                })));
                if let Ok(input) = result {
                    prop_assert!(valid_header_text(&input.subject));
                    prop_assert!(input.from.0.as_deref().is_none_or(|n| !n.contains(char::is_control)));
                    for (name, v) in &input.headers {
                        prop_assert!(!name.to_ascii_lowercase().starts_with(PROVIDER_HEADER_PREFIX));
                        prop_assert!(!OWNED_HEADERS.contains(&name.to_ascii_lowercase().as_str()));
                        prop_assert!(valid_header_text(v));
                    }
                    for a in &input.attachments {
                        prop_assert!(valid_header_text(&a.filename));
                    }
                    for r in &input.references {
                        prop_assert_eq!(bracket_id(r), Ok(r.clone()));
                    }
                }
            }

            #[test]
            fn message_ids_bracket_once_for_all(raw in prop_oneof![any::<String>(), "<?[a-z@.<> \u{0}]{0,12}>?"]) {
                if let Ok(id) = bracket_id(&raw) {
                    prop_assert_eq!(bracket_id(&id), Ok(id.clone()));
                    prop_assert!(!id.contains(|c: char| c.is_whitespace() || c.is_control()));
                }
            }
        }
    }

    mod short_record {
        use super::*;
        use crate::store::tests::{TempSqlite, fresh_postgres};

        fn accepted_message() -> Message {
            Message {
                id: ids::new_id("msg"),
                thread_id: String::new(),
                mailbox_id: "mbx_test".into(),
                mailbox: "a@x.com".into(),
                domain: "x.com".into(),
                direction: "outbound".into(),
                is_draft: false,
                folder: "sent".into(),
                message_id: "<m@x.com>".into(),
                provider_message_id: Some("prov-1".into()),
                from_address: "a@x.com".into(),
                from_name: Some("A".into()),
                to: vec!["b@y.com".into()],
                cc: vec!["c@y.com".into()],
                bcc: vec![],
                reply_to: None,
                subject: "Re:\u{212a}".into(),
                text: String::new(),
                html: String::new(),
                headers: json!({}),
                in_reply_to: None,
                references: None,
                status: MessageStatus::Sent,
                error: None,
                opened_at: None,
                open_count: 0,
                is_read: true,
                is_starred: false,
                has_attachments: false,
                api_key_id: Some("key_test".into()),
                created_at: clock::now_micros(),
                sent_at: None,
                received_at: None,
            }
        }

        fn input() -> Arc<SendInput> {
            let mut input = validate(body(
                json!({"from": "a@x.com", "to": "b@y.com", "text": "the body"}),
            ))
            .unwrap();
            input.subject = "Re:\u{212a}".into();
            Arc::new(input)
        }

        /// A send whose record job panics, as the one with the subject
        /// `Re:K` did (issue 13).
        async fn panicking_send(db: &Db) -> (PendingSend, String) {
            let message = accepted_message();
            let id = message.id.clone();
            let written = db
                .write_queued_sized(0, |_tx| Box::pin(async { panic!("a bug in the record") }))
                .await;
            let pending = PendingSend {
                written: Some(written),
                failure: None,
                recipients: 2,
                quota: Arc::new(QuotaGuard::new(Arc::new(
                    crate::provider::simulator::Simulator::new(None),
                ))),
                accepted: Some(AcceptedSend {
                    db: db.clone(),
                    message,
                    bodies: Bodies::new(input().text.clone(), None),
                    new_mailbox: None,
                    done_at: clock::now_micros(),
                }),
            };
            (pending, id)
        }

        async fn short_record_of(db: &Db, id: &str) -> Option<(String, String, String, String)> {
            let row = sql!(
                "SELECT m.status, m.error, m.provider_message_id, m.text_body, t.subject \
                 FROM messages m JOIN threads t ON t.id = m.thread_id WHERE m.id = $1",
                id
            )
            .fetch_optional(db.reader())
            .await
            .unwrap()?;
            assert_eq!(row.text("subject").unwrap(), "Re:\u{212a}");
            Some((
                row.text("status").unwrap(),
                row.text("error").unwrap(),
                row.text("provider_message_id").unwrap(),
                row.text("text_body").unwrap(),
            ))
        }

        async fn check(db: &Db) {
            let (pending, id) = panicking_send(db).await;
            let err = pending.finish().await.unwrap_err();
            let CoreError::SentNotRecorded {
                id: said,
                provider_message_id,
                message,
            } = &err
            else {
                panic!("{err:?}");
            };
            assert_eq!(
                (said.as_str(), provider_message_id.as_str()),
                (id.as_str(), "prov-1")
            );
            assert!(message.contains("listed as"), "{message}");
            assert!(err.took_effect());
            let (status, error, provider, text) = short_record_of(db, &id).await.expect("recorded");
            assert_eq!(
                (status.as_str(), provider.as_str(), text.as_str()),
                ("failed", "prov-1", "the body")
            );
            assert_eq!(error, SHORT_RECORD_ERROR);
            let recipients = sql!(
                "SELECT COUNT(*) AS n FROM message_recipients WHERE message_id = $1",
                &id
            )
            .fetch_one(db.reader())
            .await
            .unwrap()
            .int("n")
            .unwrap();
            assert_eq!(recipients, 2);
            let events = sql!("SELECT type FROM events")
                .fetch_all(db.reader())
                .await
                .unwrap();
            assert_eq!(
                events
                    .iter()
                    .map(|r| r.text("type").unwrap())
                    .collect::<Vec<_>>(),
                ["email.failed"]
            );

            // A caller gone before the record settled: the short record is
            // written all the same.
            let (pending, id) = panicking_send(db).await;
            drop(pending);
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            while short_record_of(db, &id).await.is_none() {
                assert!(std::time::Instant::now() < deadline, "never recorded");
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        }

        #[tokio::test]
        async fn a_panicking_record_job_still_records_the_accepted_send_on_sqlite() {
            let temp = TempSqlite::new("short-record").await;
            check(&temp.db).await;
            temp.remove().await;
        }

        /// PostgreSQL's writes run on a task of their own (`Db::write_queued`),
        /// whose panic reaches the caller as a failed join.
        #[tokio::test]
        async fn a_panicking_record_job_still_records_the_accepted_send_on_postgres() {
            let Some(db) = fresh_postgres().await else {
                return;
            };
            check(&db).await;
            db.close().await;
        }
    }
}
