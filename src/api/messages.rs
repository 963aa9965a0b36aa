//! `/messages`: received mail, newest first by `received_at`.

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::Response;

use crate::api::attachments;
use crate::api::emails::mailbox_filter;
use crate::api::extract::{ApiJson, Auth, Params, PathId, PathIds};
use crate::api::pagination::{PageQuery, ReadPage};
use crate::app::AppState;
use crate::auth::Scope;
use crate::core::message_lists::{self, ReceivedFilter};
use crate::core::messages::{self, Direction};
use crate::error::{ApiError, ApiResult, Problems};
use crate::ids::{AttachmentId, AttachmentKind, MessageId, MessageKind};
use crate::model::List;
use crate::model::messages::{
    FileBytes, FolderFilter, Message, MessageDetail, MessageListQuery, MessageUpdate, RawMime,
};

/// List received messages
///
/// Paged list of received mail, newest first by `received_at`, without bodies.
#[utoipa::path(get, path = "/messages", operation_id = "listMessages",
    params(PageQuery, MessageListQuery),
    security(("bearer" = ["mail:read"])),
    responses((status = 200, description = "A page of messages.", body = List<Message>)))]
pub async fn list(
    State(s): State<AppState>,
    Auth(key): Auth,
    params: Params,
) -> ApiResult<Json<List<Message>>> {
    key.require(Scope::MailRead)?;
    let mut p = Problems::new();
    let page = s.cursors.page(&params, &mut p);
    let q: MessageListQuery = params.query(&mut p);
    p.finish()?;
    let f = ReceivedFilter {
        folder: q.folder.and_then(FolderFilter::folder),
        thread_id: q.thread_id.map(String::from),
        from: q.from.map(|a| a.0),
        to: q.to.map(|a| a.0),
        subject: q.subject,
        text: q.q,
        unread: q.unread,
        since: q.since.map(|t| t.0),
        until: q.until.map(|t| t.0),
        mailboxes: mailbox_filter(q.mailbox_id, q.mailbox, q.domain),
        search_bounds: Default::default(),
    };
    let items = message_lists::received(&s.db, &key.reach, &f, &page).await?;
    Ok(Json(page.list(&s.cursors, items)))
}

/// Read a message
///
/// Any stored message (received or sent) with bodies, headers, attachments and events.
#[utoipa::path(get, path = "/messages/{id}", operation_id = "getMessage",
    params(("id" = inline(MessageId), Path, description = "The message id.")),
    security(("bearer" = ["mail:read"])),
    responses((status = 200, description = "The message.", body = MessageDetail)))]
pub async fn get(
    State(s): State<AppState>,
    Auth(key): Auth,
    id: PathId<MessageKind>,
) -> ApiResult<Json<MessageDetail>> {
    key.require(Scope::MailRead)?;
    let id = id.get()?;
    let m = messages::get(&s.db, &key.reach, Direction::Inbound, &id)
        .await?
        .ok_or(ApiError::not_found("message"))?;
    Ok(Json(messages::detail(&s.db, &m).await?))
}

/// Mark a message read or starred
///
/// Only fields sent change; the thread's unread count follows.
#[utoipa::path(patch, path = "/messages/{id}", operation_id = "updateMessage",
    params(("id" = inline(MessageId), Path, description = "The message id.")),
    request_body = MessageUpdate,
    security(("bearer" = ["mail:write"])),
    responses((status = 200, description = "The message as it now is.", body = MessageDetail)))]
pub async fn patch(
    State(s): State<AppState>,
    Auth(key): Auth,
    id: PathId<MessageKind>,
    ApiJson(body): ApiJson<MessageUpdate>,
) -> ApiResult<Json<MessageDetail>> {
    key.require(Scope::MailWrite)?;
    let id = id.get()?;
    let m = messages::get(&s.db, &key.reach, Direction::Inbound, &id)
        .await?
        .ok_or(ApiError::not_found("message"))?;
    messages::set_flags(&s.db, &m, body.is_read, body.is_starred).await?;
    let m = messages::get(&s.db, &key.reach, Direction::Inbound, &id)
        .await?
        .ok_or(ApiError::not_found("message"))?;
    Ok(Json(messages::detail(&s.db, &m).await?))
}

/// Download an attachment of a received message
///
/// As for sent mail: the file with its own `Content-Type`, `X-Content-Type-Options: nosniff`, and types a browser would run always as `attachment`.
#[utoipa::path(get, path = "/messages/{id}/attachments/{attachment_id}", operation_id = "getMessageAttachment",
    params(
        ("id" = inline(MessageId), Path, description = "The message id."),
        ("attachment_id" = inline(AttachmentId), Path, description = "The attachment's `id` as listed on the message."),
    ),
    security(("bearer" = ["mail:read"])),
    responses((status = 200, description = "The file; `Content-Type` is the attachment's own type.",
        content_type = "application/octet-stream", body = FileBytes)))]
pub async fn attachment(
    State(s): State<AppState>,
    Auth(key): Auth,
    PathIds(id, attachment_id): PathIds<PathId<MessageKind>, PathId<AttachmentKind>>,
) -> ApiResult<Response> {
    key.require(Scope::MailRead)?;
    let id = id.get()?;
    attachments::download(&s.db, &key, Direction::Inbound, &id, attachment_id).await
}

/// The original MIME of a received message
#[utoipa::path(get, path = "/messages/{id}/raw", operation_id = "getMessageRaw",
    params(("id" = inline(MessageId), Path, description = "The message id.")),
    security(("bearer" = ["mail:read"])),
    responses((status = 200, description = "The message exactly as received.",
        content_type = "message/rfc822", body = RawMime)))]
pub async fn raw(
    State(s): State<AppState>,
    Auth(key): Auth,
    id: PathId<MessageKind>,
) -> ApiResult<Response> {
    key.require(Scope::MailRead)?;
    let id = id.get()?;
    let bytes = messages::raw(&s.db, &key.reach, &id)
        .await?
        .ok_or(ApiError::not_found("message"))?;
    let mut resp = Response::new(Body::from(bytes));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("message/rfc822"),
    );
    Ok(resp)
}
