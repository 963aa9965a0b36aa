//! `/threads`: conversations, their filters, changes, deletion and replies.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;

use crate::api::emails::mailbox_filter;
use crate::api::extract::{ApiJson, Auth, Params, PathId, RawBody, parse_json};
use crate::api::pagination::{PageQuery, ReadPage};
use crate::app::AppState;
use crate::auth::Scope;
use crate::core::sending;
use crate::core::thread_actions::{self, ReplyInput, ThreadFilter, ThreadPatch};
use crate::error::{ApiError, ApiResult, Problems};
use crate::ids::{ThreadId, ThreadKind};
use crate::model::List;
use crate::model::drafts::OneOrMany;
use crate::model::messages::{Folder, FolderFilter};
use crate::model::sending::{ReplyRequest, SendRequest, SendResult};
use crate::model::threads::{
    Thread as WireThread, ThreadDeleteQuery, ThreadDeleted, ThreadDetail, ThreadListQuery,
    ThreadReadQuery, ThreadUpdate,
};

/// List threads
///
/// Paged, newest first by `last_message_at`. Without `folder` (or with `folder=all`) every thread not in trash or spam is listed; trash and spam only when asked for by name.
#[utoipa::path(get, path = "/threads", operation_id = "listThreads",
    params(PageQuery, ThreadListQuery),
    security(("bearer" = ["mail:read"])),
    responses((status = 200, description = "A page of threads.", body = List<WireThread>)))]
pub async fn list(
    State(s): State<AppState>,
    Auth(key): Auth,
    params: Params,
) -> ApiResult<Json<List<WireThread>>> {
    key.require(Scope::MailRead)?;
    let mut p = Problems::new();
    let page = s.cursors.page(&params, &mut p);
    let q: ThreadListQuery = params.query(&mut p);
    p.finish()?;
    let f = ThreadFilter {
        folder: q.folder.and_then(FolderFilter::folder),
        label: q.label_id.map(String::from).or(q.label),
        text: q.q,
        unread: q.unread,
        starred: q.starred,
        has_attachments: q.has_attachments,
        participant: q.participant.map(|a| a.0),
        subject: q.subject,
        since: q.since.map(|t| t.0),
        until: q.until.map(|t| t.0),
        mailboxes: mailbox_filter(q.mailbox_id, q.mailbox, q.domain),
        search_bounds: Default::default(),
    };
    let items = thread_actions::list(&s.db, &key.reach, &f, &page).await?;
    Ok(Json(page.list(&s.cursors, items)))
}

/// Read a thread
///
/// The thread with every message in `messages`, oldest first, with bodies and attachments; `include_body=false` gives the lighter message summaries.
#[utoipa::path(get, path = "/threads/{id}", operation_id = "getThread",
    params(("id" = inline(ThreadId), Path, description = "The thread id."), ThreadReadQuery),
    security(("bearer" = ["mail:read"])),
    responses((status = 200, description = "The thread.", body = ThreadDetail)))]
pub async fn get(
    State(s): State<AppState>,
    Auth(key): Auth,
    id: PathId<ThreadKind>,
    params: Params,
) -> ApiResult<Json<ThreadDetail>> {
    key.require(Scope::MailRead)?;
    let mut p = Problems::new();
    let q: ThreadReadQuery = params.query(&mut p);
    p.finish()?;
    let include_body = q.include_body.unwrap_or(true);
    let id = id.get()?;
    let t = thread_actions::get(&s.db, &key.reach, &id)
        .await?
        .ok_or(ApiError::not_found("thread"))?;
    Ok(Json(thread_actions::read(&s.db, &t, include_body).await?))
}

/// Move, flag or label a thread
///
/// Only fields sent change. Labels are resolved before anything is written: an unknown label is 422 and nothing changes. Drafts stay where they are when `folder` is set. Emits `thread.updated`.
#[utoipa::path(patch, path = "/threads/{id}", operation_id = "updateThread",
    params(("id" = inline(ThreadId), Path, description = "The thread id.")),
    request_body = ThreadUpdate,
    security(("bearer" = ["mail:write"])),
    responses((status = 200, description = "The thread as it now is.", body = WireThread)))]
pub async fn patch(
    State(s): State<AppState>,
    Auth(key): Auth,
    id: PathId<ThreadKind>,
    ApiJson(body): ApiJson<ThreadUpdate>,
) -> ApiResult<Json<WireThread>> {
    key.require(Scope::MailWrite)?;
    let mut p = Problems::new();
    let folder = body.folder.as_deref().and_then(|f| match Folder::parse(f) {
        Some(folder) if folder != Folder::Drafts => Some(folder),
        _ => {
            p.add(
                "folder",
                format!("unknown folder {f:?}; one of inbox, sent, archive, spam, trash"),
            );
            None
        }
    });
    // Labels are resolved before anything is written.
    let add = thread_actions::resolve_labels(
        &s.db,
        &mut p,
        "add_labels",
        body.add_labels.as_deref().unwrap_or(&[]),
    )
    .await?;
    let remove = thread_actions::resolve_labels(
        &s.db,
        &mut p,
        "remove_labels",
        body.remove_labels.as_deref().unwrap_or(&[]),
    )
    .await?;
    p.finish()?;
    let id = id.get()?;
    let thread = thread_actions::patch(
        &s.db,
        &key.reach,
        &id,
        ThreadPatch {
            folder,
            is_read: body.is_read,
            is_starred: body.is_starred,
            add,
            remove,
        },
    )
    .await?;
    Ok(Json(thread))
}

/// Trash or delete a thread
///
/// Moves the thread to trash; deleting a thread already in trash, or with `permanent=true`, removes it for good.
#[utoipa::path(delete, path = "/threads/{id}", operation_id = "deleteThread",
    params(("id" = inline(ThreadId), Path, description = "The thread id."), ThreadDeleteQuery),
    security(("bearer" = ["mail:write"])),
    responses((status = 200, description = "Trashed or removed.", body = ThreadDeleted)))]
pub async fn delete(
    State(s): State<AppState>,
    Auth(key): Auth,
    id: PathId<ThreadKind>,
    params: Params,
) -> ApiResult<Json<ThreadDeleted>> {
    key.require(Scope::MailWrite)?;
    let mut p = Problems::new();
    let q: ThreadDeleteQuery = params.query(&mut p);
    p.finish()?;
    let permanent = q.permanent.unwrap_or(false);
    let id = id.get()?;
    Ok(Json(
        thread_actions::delete(&s.db, &key.reach, &id, permanent).await?,
    ))
}

/// Reply in a thread
///
/// Recipients, subject and threading headers are derived from the last message of the thread unless given. Answers 202 once the provider accepted the reply.
#[utoipa::path(post, path = "/threads/{id}/reply", operation_id = "replyToThread",
    params(("id" = inline(ThreadId), Path, description = "The thread id.")),
    request_body = ReplyRequest,
    security(("bearer" = ["mail:write"])),
    responses(
        (status = 202, description = "Accepted by the provider.", body = SendResult),
        (status = 503, description = "The provider could not be reached."),
    ))]
pub async fn reply(
    State(s): State<AppState>,
    Auth(key): Auth,
    id: PathId<ThreadKind>,
    RawBody(body): RawBody,
) -> ApiResult<(StatusCode, Json<SendResult>)> {
    key.require(Scope::MailWrite)?;
    let mut b: ReplyRequest = parse_json(&body)?;
    drop(body);
    if b.text.is_none() && b.html.is_none() {
        return Err(ApiError::invalid("text", "give text, html or both"));
    }
    // Reuse the send validation for addresses, headers and attachments.
    let probe = SendRequest {
        from: "reply@validation.invalid".into(),
        to: b
            .to
            .clone()
            .unwrap_or(OneOrMany::One("reply@validation.invalid".into())),
        cc: b.cc.clone(),
        bcc: b.bcc.clone(),
        reply_to: None,
        subject: b.subject.clone(),
        // Moved through validation and back: bodies and attachments may be large.
        html: b.html.take(),
        text: b.text.take(),
        headers: b.headers.clone(),
        thread_id: None,
        in_reply_to: None,
        references: None,
        attachments: b.attachments.take(),
        tags: None,
    };
    let checked = sending::validate_aside(probe).await?;
    let id = id.get()?;
    let outcome = thread_actions::reply(
        &s,
        &key,
        &id,
        ReplyInput {
            text: checked.text,
            html: checked.html,
            reply_all: b.reply_all,
            to: b.to.map(|_| checked.to.clone()),
            cc: b.cc.map(|_| checked.cc.clone()),
            bcc: b.bcc.map(|_| checked.bcc.clone()),
            subject: b.subject,
            quote: b.quote.unwrap_or(true),
            headers: checked.headers,
            attachments: checked.attachments,
        },
    )
    .await?;
    Ok((StatusCode::ACCEPTED, Json(outcome.to_wire())))
}
