//! `/emails`: sending (single and batch, idempotent), the sent-mail list,
//! single reads and attachment downloads.

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::Value;

use crate::api::attachments;
use crate::api::extract::{Auth, Params, PathId, PathIds, RawBody, parse_json};
use crate::api::pagination::{PageQuery, ReadPage};
use crate::app::AppState;
use crate::auth::{ApiKey, Scope};
use crate::core::error::CoreError;
use crate::core::idempotency::{self, Begin, Claim, KeyedSend, Taken};
use crate::core::interrupted::{Intent, RecordKey};
use crate::core::memory;
use crate::core::message_lists::{self, MailboxFilter, SentFilter};
use crate::core::messages::{self, Direction};
use crate::core::sending;
use crate::error::{ApiError, ApiResult, Problems};
use crate::ids::{AttachmentId, AttachmentKind, MailboxId};
use crate::model::List;
use crate::model::messages::{EmailListQuery, FileBytes, Message, MessageDetail};
use crate::model::query::Address;
use crate::model::sending::{
    BatchItem, BatchObject, BatchRequest, BatchResult, SendRequest, SendResult,
};
use crate::store::Backend;
use utoipa::IntoParams;

pub use crate::model::sending::MAX_BATCH;

const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// The `Idempotency-Key` header, for the document.
#[derive(IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)] // Read from the headers by [`idempotent`]; this only describes it.
pub struct IdempotencyKey {
    /// 1 to 255 characters. Repeating the call with the same key and request replays the first reply (with `Idempotency-Replayed: true`) instead of sending again; a different request with the same key is 409. Kept 24 hours, per API key and endpoint.
    #[param(rename = "Idempotency-Key", value_type = String, required = false, min_length = 1, max_length = 255)]
    idempotency_key: Option<String>,
}

/// The fingerprint of the request body when the request has an
/// `Idempotency-Key` (`keyed`; see [`idempotent`]), else None without
/// looking at it.
fn fingerprint_if_keyed(keyed: bool, body: &[u8]) -> Result<Option<String>, ApiError> {
    if !keyed {
        return Ok(None);
    }
    let request: Value = parse_json(body)?;
    Ok(Some(idempotency::fingerprint(&request)))
}

/// Runs `work` under the request's `Idempotency-Key`, if any: a repeat of the
/// same request replays the stored reply byte for byte, a different request
/// with the same key is 409. Successful replies are stored, and so are the
/// errors of requests that took effect regardless (a message the provider
/// accepted but that could not be recorded): a retry must not send again.
/// A send's record stores its reply itself, in the same commit.
///
/// `work`, and the storing of its reply, run on a task of their own (see
/// [`detached`]): a client that goes away (a timeout, a dropped connection)
/// must neither cancel a send in the middle of the provider call nor leave
/// the key `running` over a send that happened, for a retry to take over
/// once the record is stale and send again.
///
/// On PostgreSQL a work that can (`claims_itself`: a single send) is given
/// the claim to write with its first reads, one round trip fewer; a key it
/// finds taken goes through [`idempotency::begin`] there.
async fn idempotent<F, Fut, T>(
    state: &AppState,
    key: &ApiKey,
    endpoint: &'static str,
    headers: &HeaderMap,
    request: KeyedRequest,
    work: F,
) -> Result<Response, ApiError>
where
    F: FnOnce(Option<KeyedSend>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<Reply<T>, ApiError>> + Send + 'static,
    T: Serialize + Send + 'static,
{
    let idem_key = idempotency_key(headers)?;
    let (Some(idem_key), Some(fp)) = (idem_key, request.fingerprint) else {
        let reply = detached(work(None)).await?;
        return Ok((reply.status, Json(reply.body)).into_response());
    };
    let intent = request.intent.map(|i| i.to_text()).transpose()?;
    let record = RecordKey {
        api_key_id: key.id.clone(),
        endpoint: endpoint.to_string(),
        key: idem_key,
    };
    let claim = Claim::new(
        record,
        fp,
        intent,
        state.config.interrupted_sends.stale_after,
    );
    let claims_itself = request.claims_itself && state.db.backend() == Backend::Postgres;
    if !claims_itself && let Begin::Taken(taken) = idempotency::begin(&state.db, &claim).await? {
        return taken_key(state, taken);
    }
    let db = state.db.clone();
    let done = detached(async move {
        let keyed = KeyedSend {
            claim: claim.clone(),
            claim_pending: claims_itself,
        };
        // Stored as the JSON text it is answered with, so that a replay is
        // the first reply byte for byte.
        let (status, text) = match work(Some(keyed)).await {
            Ok(reply) if reply.stored => return Ok((reply.status, to_text(&reply.body)?)),
            Ok(reply) => (reply.status, to_text(&reply.body)?),
            Err(e) if e.took_effect() => (e.status(), to_text(&e.body())?),
            // Nothing done, nothing claimed.
            Err(e @ ApiError::Rule(CoreError::KeyTaken(_))) => return Err(e),
            Err(e) => {
                // Failed requests are not stored: the same key may be retried.
                if let Err(gone) = idempotency::abandon(&db, &claim).await {
                    tracing::warn!(error = %gone, "could not release an idempotency key");
                }
                return Err(e);
            }
        };
        idempotency::finish(&db, &claim.record, status.as_u16(), &text).await?;
        Ok((status, text))
    })
    .await;
    let (status, text) = match done {
        Ok(done) => done,
        Err(ApiError::Rule(CoreError::KeyTaken(taken))) => return taken_key(state, taken),
        Err(e) => return Err(e),
    };
    let mut resp = Response::new(Body::from(text));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(resp)
}

/// What [`idempotent`] takes of a request.
struct KeyedRequest {
    /// The request's (see [`fingerprint_if_keyed`]); None without a key.
    fingerprint: Option<String>,
    /// What a send is about to send, written with the key's claim (see
    /// `core::interrupted`).
    intent: Option<Intent>,
    /// The work can claim the key itself (see [`idempotent`]).
    claims_itself: bool,
}

/// What a request answers whose key another request has claimed.
fn taken_key(state: &AppState, taken: Taken) -> Result<Response, ApiError> {
    match taken {
        Taken::Replay {
            status,
            body,
            recovered,
        } => {
            state.metrics.sends_interrupted_recovered(recovered as u64);
            let mut resp = Response::new(Body::from(body));
            *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
            let h = resp.headers_mut();
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            h.insert("idempotency-replayed", HeaderValue::from_static("true"));
            Ok(resp)
        }
        Taken::Mismatch => Err(ApiError::conflict(
            "this Idempotency-Key was already used with a different request",
        )),
        Taken::InFlight => Err(ApiError::Rule(CoreError::Conflict {
            message: "a request with this Idempotency-Key is still being processed; retry shortly"
                .into(),
            retry_after: Some(1),
        })),
    }
}

/// What a request run by [`idempotent`] answers.
struct Reply<T> {
    status: StatusCode,
    body: T,
    /// Already stored under the request's Idempotency-Key, as the JSON text
    /// of `body` (a send's record stores it in its own commit).
    stored: bool,
}

impl<T> Reply<T> {
    fn new(status: StatusCode, body: T) -> Reply<T> {
        Reply {
            status,
            body,
            stored: false,
        }
    }
}

/// The request's `Idempotency-Key`, checked, if it has one.
fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(v) = headers.get(IDEMPOTENCY_KEY) else {
        return Ok(None);
    };
    let k = v
        .to_str()
        .map_err(|_| ApiError::invalid("Idempotency-Key", "must be visible ASCII"))?
        .trim()
        .to_string();
    if k.is_empty() || k.len() > 255 {
        return Err(ApiError::invalid(
            "Idempotency-Key",
            "must be 1 to 255 characters",
        ));
    }
    Ok(Some(k))
}

/// Runs `work` to its end on a task of its own, whether or not its caller
/// waits for it.
async fn detached<T: Send + 'static>(
    work: impl std::future::Future<Output = Result<T, ApiError>> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::spawn(crate::telemetry::context::carry(work))
        .await
        .map_err(|e| ApiError::Internal(anyhow::anyhow!("a request's task failed: {e}")))?
}

fn to_text(body: &impl Serialize) -> Result<String, ApiError> {
    serde_json::to_string(body)
        .map_err(|e| ApiError::Internal(anyhow::anyhow!("a reply could not be written: {e}")))
}

/// What a batch item's result says of its error.
fn item_error(e: &ApiError) -> String {
    match e {
        ApiError::Internal(_) => "the server failed to handle this email".to_string(),
        other => other.to_string(),
    }
}

fn parse_send(value: Value) -> Result<SendRequest, ApiError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        ApiError::invalid(
            if path == "." { "body".into() } else { path },
            e.into_inner().to_string(),
        )
    })
}

/// Send an email
///
/// Sends one message from an address on a verified domain. Answers 202 once the provider has accepted it; delivery is reported later as the message's `status` and as webhook events. A key that may not send as `from` gets 403; a suppressed recipient, a bad field or a provider rejection gets 422 (a rejection is recorded with status `rejected`). 429 with `Retry-After` also means the provider's 24-hour quota cannot admit the recipients, or its account's sending is paused (nothing recorded), or the provider throttled the send (recorded `failed`); 503, the provider could not be reached (recorded `failed`), or, with `Retry-After`, the instance had no memory free for a large body within `PIGEONHOLE_MESSAGE_MEMORY_WAIT` (nothing recorded). A 500 whose body carries `id` and `provider_message_id` means the provider accepted the message but its full record failed: it was sent, it is listed with status `failed` and that `error`, and a retry under the same `Idempotency-Key` replays this reply instead of sending again.
#[utoipa::path(post, path = "/emails", operation_id = "sendEmail",
    params(IdempotencyKey),
    request_body = SendRequest,
    security(("bearer" = ["emails:send"])),
    responses(
        (status = 202, description = "Accepted by the provider.", body = SendResult),
        (status = 409, description = "The Idempotency-Key is in use."),
        (status = 503, description = "The provider could not be reached, or no memory was free."),
    ))]
pub async fn send(
    State(s): State<AppState>,
    Auth(key): Auth,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> ApiResult<Response> {
    key.require(Scope::EmailsSend)?;
    // A body may be 30 MB of attachments: it is parsed into the send's own
    // fields and then dropped, with no JSON tree of it kept beside them (one
    // is built for an Idempotency-Key's fingerprint only, and dropped first);
    // a large one on a blocking thread.
    let keyed = headers.contains_key(IDEMPOTENCY_KEY);
    let (fingerprint, request) = memory::aside(body.len(), move || {
        let fingerprint = fingerprint_if_keyed(keyed, &body)?;
        let request: SendRequest = parse_json(&body)?;
        Ok::<_, ApiError>((fingerprint, request))
    })
    .await
    .unwrap_or_else(|| {
        Err(ApiError::Internal(anyhow::anyhow!(
            "the request body could not be parsed"
        )))
    })?;
    // Checked before the key is claimed, so that an intent names only a
    // message that may be sent; a refusal is never stored, so a replay is
    // not changed by it.
    let mut input = sending::validate_aside(request).await?;
    if !key.reach.covers_address(&input.from.1) {
        return Err(ApiError::forbidden(format!(
            "this API key may not send as {}",
            input.from.1
        )));
    }
    let intent = fingerprint.is_some().then(|| {
        let mut intent = Intent::single();
        intent.send(&mut input);
        intent
    });
    let (state, caller) = (s.clone(), key.clone());
    let request = KeyedRequest {
        fingerprint,
        intent,
        claims_itself: true,
    };
    idempotent(
        &s,
        &key,
        "POST /emails",
        &headers,
        request,
        move |keyed| async move {
            let mut input = input;
            input.keyed = keyed;
            // Not `sending::send`, which would run on yet another task.
            let outcome = sending::start(&state, &caller, input)
                .await?
                .finish()
                .await?;
            Ok(Reply {
                status: StatusCode::ACCEPTED,
                body: outcome.to_wire(),
                stored: outcome.reply_stored,
            })
        },
    )
    .await
}

/// Send up to 100 emails
///
/// Every message is attempted, in order, one at a time, and recorded whatever its outcome; the reply comes once every attempt is recorded. 202 when all were accepted, 207 when some were not; the per-message outcome is in `data`. The `Idempotency-Key` covers the whole array.
#[utoipa::path(post, path = "/emails/batch", operation_id = "sendEmailBatch",
    params(IdempotencyKey),
    request_body = BatchRequest,
    security(("bearer" = ["emails:send"])),
    responses(
        (status = 202, description = "Every message was accepted.", body = BatchResult),
        (status = 207, description = "Some messages were not accepted; see each result.", body = BatchResult),
        (status = 409, description = "The Idempotency-Key is in use."),
    ))]
pub async fn batch(
    State(s): State<AppState>,
    Auth(key): Auth,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> ApiResult<Response> {
    key.require(Scope::EmailsSend)?;
    let request: Value = parse_json(&body)?;
    drop(body);
    let fingerprint = headers
        .contains_key(IDEMPOTENCY_KEY)
        .then(|| idempotency::fingerprint(&request));
    // The items are taken out of the request, not copied.
    let items = match request {
        Value::Array(a) => a,
        Value::Object(mut o) => match o.remove("emails") {
            Some(Value::Array(a)) => a,
            _ => {
                return Err(ApiError::invalid(
                    "emails",
                    "expected an array of emails, or {\"emails\": [...]}",
                ));
            }
        },
        _ => {
            return Err(ApiError::invalid(
                "body",
                "expected an array of emails, or {\"emails\": [...]}",
            ));
        }
    };
    if items.is_empty() {
        return Err(ApiError::invalid(
            "emails",
            "at least one email is required",
        ));
    }
    if items.len() > MAX_BATCH {
        return Err(ApiError::invalid(
            "emails",
            format!("at most {MAX_BATCH} emails per batch"),
        ));
    }
    // Every item is checked before the key is claimed, so that the intent
    // holds each one's id or its refusal (see `core::interrupted`).
    let mut inputs = Vec::with_capacity(items.len());
    for item in items {
        inputs.push(match parse_send(item) {
            Ok(body) => sending::validate_aside(body).await.map_err(ApiError::from),
            Err(e) => Err(e),
        });
    }
    let intent = fingerprint.is_some().then(|| {
        let mut intent = Intent::batch();
        for input in &mut inputs {
            match input {
                Ok(input) => intent.send(input),
                Err(e) => intent.refused(e.status().as_u16(), item_error(e)),
            }
        }
        intent
    });
    let (state, caller) = (s.clone(), key.clone());
    let request = KeyedRequest {
        fingerprint,
        intent,
        claims_itself: false,
    };
    idempotent(
        &s,
        &key,
        "POST /emails/batch",
        &headers,
        request,
        // The reply is stored once every item's record is.
        move |_keyed| async move {
            let (s, key) = (state, caller);
            let mut results = Vec::with_capacity(inputs.len());
            let (mut sent, mut failed) = (0, 0);
            // Sends are attempted in order, one at a time; their records are
            // committed behind them and waited for together.
            let mut started = Vec::with_capacity(inputs.len());
            for input in inputs {
                started.push(match input {
                    Ok(input) => sending::start(&s, &key, input)
                        .await
                        .map_err(ApiError::from),
                    Err(e) => Err(e),
                });
            }
            for (index, pending) in (0u32..).zip(started) {
                let outcome = match pending {
                    Ok(p) => p.finish().await.map_err(ApiError::from),
                    Err(e) => Err(e),
                };
                match outcome {
                    Ok(o) => {
                        sent += 1;
                        results.push(BatchItem::accepted(
                            index,
                            crate::ids::Id::from_stored(o.message.id),
                            crate::ids::Id::from_stored(o.message.thread_id),
                        ));
                    }
                    Err(e) => {
                        failed += 1;
                        if let ApiError::Internal(inner) = &e {
                            tracing::error!(
                                error = format!("{inner:#}"),
                                index,
                                "batch item failed"
                            );
                        }
                        results.push(BatchItem::refused(
                            index,
                            item_error(&e),
                            e.status().as_u16(),
                        ));
                    }
                }
            }
            let status = if failed == 0 {
                StatusCode::ACCEPTED
            } else {
                StatusCode::MULTI_STATUS
            };
            Ok(Reply::new(
                status,
                BatchResult {
                    object: BatchObject,
                    sent,
                    failed,
                    data: results,
                },
            ))
        },
    )
    .await
}

/// List sent messages
///
/// Paged list of sent messages, newest first by `created_at`, without bodies. Drafts are excluded.
#[utoipa::path(get, path = "/emails", operation_id = "listEmails",
    params(PageQuery, EmailListQuery),
    security(("bearer" = ["emails:read"])),
    responses((status = 200, description = "A page of messages.", body = List<Message>)))]
pub async fn list(
    State(s): State<AppState>,
    Auth(key): Auth,
    params: Params,
) -> ApiResult<Json<List<Message>>> {
    key.require(Scope::EmailsRead)?;
    let mut p = Problems::new();
    let page = s.cursors.page(&params, &mut p);
    let q: EmailListQuery = params.query(&mut p);
    p.finish()?;
    let f = SentFilter {
        statuses: q.status.map(|s| s.0).unwrap_or_default(),
        from: q.from.map(|a| a.0),
        to: q.to.map(|a| a.0),
        subject: q.subject,
        text: q.q,
        opened: q.opened,
        api_key_id: q.api_key_id.map(String::from),
        since: q.since.map(|t| t.0),
        until: q.until.map(|t| t.0),
        mailboxes: mailbox_filter(q.mailbox_id, q.mailbox, q.domain),
        search_bounds: Default::default(),
    };
    let items = message_lists::sent(&s.db, &key.reach, &f, &page).await?;
    Ok(Json(page.list(&s.cursors, items)))
}

/// `mailbox_id`, `mailbox` and `domain`, the filters every mail list takes.
pub fn mailbox_filter(
    mailbox_id: Option<MailboxId>,
    mailbox: Option<Address>,
    domain: Option<String>,
) -> MailboxFilter {
    MailboxFilter {
        mailbox_id: mailbox_id.map(String::from),
        mailbox: mailbox.map(|a| a.0),
        domain,
    }
}

/// Read a message
///
/// The message with its bodies, headers, attachments and every event seen so far.
#[utoipa::path(get, path = "/emails/{id}", operation_id = "getEmail",
    params(("id" = String, Path, description = "The message id (`msg_…`) or the provider's message id.")),
    security(("bearer" = ["emails:read"])),
    responses((status = 200, description = "The message.", body = MessageDetail)))]
pub async fn get(
    State(s): State<AppState>,
    Auth(key): Auth,
    Path(id): Path<String>,
) -> ApiResult<Json<MessageDetail>> {
    key.require(Scope::EmailsRead)?;
    let m = messages::get(&s.db, &key.reach, Direction::Outbound, &id)
        .await?
        .ok_or(ApiError::not_found("email"))?;
    Ok(Json(messages::detail(&s.db, &m).await?))
}

/// Download an attachment of a sent message
///
/// The bytes of one attachment, with its own `Content-Type` and a `Content-Disposition` naming the file; `X-Content-Type-Options: nosniff`, and types a browser would run (HTML, SVG and other XML, JavaScript) always as `attachment`. Received mail's attachments are under `/api/v1/messages`.
#[utoipa::path(get, path = "/emails/{id}/attachments/{attachment_id}", operation_id = "getEmailAttachment",
    params(
        ("id" = String, Path, description = "The message id (`msg_…`) or the provider's message id."),
        ("attachment_id" = inline(AttachmentId), Path, description = "The attachment's `id` as listed on the message."),
    ),
    security(("bearer" = ["emails:read"])),
    responses((status = 200, description = "The file; `Content-Type` is the attachment's own type.",
        content_type = "application/octet-stream", body = FileBytes)))]
pub async fn attachment(
    State(s): State<AppState>,
    Auth(key): Auth,
    PathIds(id, attachment_id): PathIds<String, PathId<AttachmentKind>>,
) -> ApiResult<Response> {
    key.require(Scope::EmailsRead)?;
    attachments::download(&s.db, &key, Direction::Outbound, &id, attachment_id).await
}
