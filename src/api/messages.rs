//! `/messages`: received mail, newest first by `received_at`.

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, header};
use axum::response::Response;
use serde::Deserialize;
use serde_json::Value;

use crate::api::attachments;
use crate::api::emails::push_mailbox_filters;
use crate::api::extract::{ApiJson, Auth, Params};
use crate::api::pagination::ReadPage;
use crate::app::AppState;
use crate::auth::{Reach, Scope};
use crate::core::messages::{self, COLUMNS, Direction, Message};
use crate::core::search;
use crate::core::thread_actions::FOLDERS;
use crate::error::{ApiError, ApiResult, Problems};
use crate::store::{Db, RowExt, Sql};

pub async fn list(
    State(s): State<AppState>,
    Auth(key): Auth,
    params: Params,
) -> ApiResult<Json<Value>> {
    key.require(Scope::MailRead)?;
    let mut p = Problems::new();
    let page = s.cursors.page(&params, &mut p);
    let mut q = Sql::new(&format!(
        "SELECT {COLUMNS} FROM messages m WHERE m.direction = 'inbound'"
    ));
    key.reach
        .filter_address_columns(&mut q, "m.mailbox", "m.domain");
    if let Some(f) = params.text("folder") {
        if FOLDERS.contains(&f) {
            q.push(" AND m.folder = ").bind(f);
        } else if f != "all" {
            p.add("folder", format!("unknown folder {f:?}"));
        }
    }
    if let Some(t) = params.text("thread_id") {
        q.push(" AND m.thread_id = ").bind(t);
    }
    if let Some(from) = params.text("from") {
        q.push(" AND m.from_address = ")
            .bind(from.trim().to_lowercase());
    }
    if let Some(to) = params.text("to") {
        q.push(" AND EXISTS (SELECT 1 FROM message_recipients r WHERE r.message_id = m.id AND r.address = ")
            .bind(to.trim().to_lowercase())
            .push(")");
    }
    if let Some(subject) = params.text("subject") {
        q.push(" AND ");
        s.db.push_contains(&mut q, "m.subject", subject);
    }
    if let Some(text) = params.text("q") {
        search::push_match(&mut q, s.db.backend(), "m", text);
    }
    if let Some(unread) = params.flag(&mut p, "unread") {
        q.push(" AND m.is_read = ").bind(!unread);
    }
    if let Some(t) = params.instant(&mut p, "since") {
        q.push(" AND m.received_at >= ").bind(t);
    }
    if let Some(t) = params.until(&mut p, "until") {
        q.push(" AND m.received_at <= ").bind(t);
    }
    push_mailbox_filters(
        &params,
        &mut p,
        &mut q,
        "m.mailbox_id",
        "m.mailbox",
        "m.domain",
    );
    p.finish()?;
    page.push(&mut q, "m.received_at", "m.id");
    let rows = q.fetch_all(s.db.reader()).await?;
    let mut items = Vec::with_capacity(rows.len());
    for r in &rows {
        let m = Message::from_row(r)?;
        items.push((
            m.received_at.unwrap_or(m.created_at),
            m.id.clone(),
            m.summary_json(),
        ));
    }
    Ok(Json(page.envelope(&s.cursors, items)))
}

pub async fn get(
    State(s): State<AppState>,
    Auth(key): Auth,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    key.require(Scope::MailRead)?;
    let m = messages::get(&s.db, &key.reach, Direction::Inbound, &id)
        .await?
        .ok_or(ApiError::NotFound("message"))?;
    Ok(Json(messages::full_json(&s.db, &m).await?))
}

#[derive(Deserialize)]
pub struct PatchMessage {
    is_read: Option<bool>,
    is_starred: Option<bool>,
}

pub async fn patch(
    State(s): State<AppState>,
    Auth(key): Auth,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<PatchMessage>,
) -> ApiResult<Json<Value>> {
    key.require(Scope::MailWrite)?;
    let m = messages::get(&s.db, &key.reach, Direction::Inbound, &id)
        .await?
        .ok_or(ApiError::NotFound("message"))?;
    let mut tx = s.db.begin().await?;
    if let Some(read) = body.is_read {
        Sql::new("UPDATE messages SET is_read = ")
            .bind(read)
            .push(" WHERE id = ")
            .bind(&m.id)
            .execute_tx(&mut tx)
            .await?;
        // The thread's unread count follows its messages.
        Sql::new(
            "UPDATE threads SET unread_count = (SELECT COUNT(*) FROM messages WHERE is_read = 0 AND is_draft = 0 AND thread_id = ",
        )
        .bind(&m.thread_id)
        .push(") WHERE id = ")
        .bind(&m.thread_id)
        .execute_tx(&mut tx)
        .await?;
    }
    if let Some(star) = body.is_starred {
        Sql::new("UPDATE messages SET is_starred = ")
            .bind(star)
            .push(" WHERE id = ")
            .bind(&m.id)
            .execute_tx(&mut tx)
            .await?;
    }
    tx.commit().await?;
    let m = messages::get(&s.db, &key.reach, Direction::Inbound, &id)
        .await?
        .ok_or(ApiError::NotFound("message"))?;
    Ok(Json(messages::full_json(&s.db, &m).await?))
}

/// The bytes of one attachment of a received message.
pub async fn attachment(
    State(s): State<AppState>,
    Auth(key): Auth,
    Path((id, attachment_id)): Path<(String, String)>,
) -> ApiResult<Response> {
    key.require(Scope::MailRead)?;
    attachments::download(&s.db, &key, Direction::Inbound, &id, &attachment_id).await
}

/// The original MIME as received.
pub async fn raw(
    State(s): State<AppState>,
    Auth(key): Auth,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    key.require(Scope::MailRead)?;
    let bytes = raw_bytes(&s.db, &key.reach, &id)
        .await?
        .ok_or(ApiError::NotFound("message"))?;
    let mut resp = Response::new(Body::from(bytes));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("message/rfc822"),
    );
    Ok(resp)
}

async fn raw_bytes(db: &Db, reach: &Reach, id: &str) -> Result<Option<Vec<u8>>, sqlx::Error> {
    let mut q = Sql::new(
        "SELECT m.raw FROM messages m WHERE m.raw IS NOT NULL AND m.direction = 'inbound' AND m.id = ",
    );
    q.bind(id);
    reach.filter_address_columns(&mut q, "m.mailbox", "m.domain");
    q.fetch_optional(db.reader())
        .await?
        .map(|r| r.bytes("raw"))
        .transpose()
}
