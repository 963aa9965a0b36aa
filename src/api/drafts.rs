//! `/drafts`: create, edit, send and delete unsent messages.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;

use crate::api::extract::{ApiJson, Auth, Params, PathId};
use crate::api::pagination::{PageQuery, ReadPage};
use crate::app::AppState;
use crate::auth::Scope;
use crate::core::drafts::{self, DraftContent};
use crate::core::validate;
use crate::error::{ApiError, ApiResult, Problems};
use crate::ids::{DraftId, DraftKind};
use crate::mime::compose::Named;
use crate::model::drafts::{
    Draft, DraftCreate, DraftListQuery, DraftObject, DraftUpdate, OneOrMany,
};
use crate::model::sending::SendResult;
use crate::model::{Deleted, List};

fn list_of(p: &mut Problems, param: &str, v: Option<OneOrMany>) -> Option<Vec<Named>> {
    v.map(|v| {
        v.into_vec()
            .iter()
            .enumerate()
            .filter_map(|(i, a)| p.check(&format!("{param}[{i}]"), validate::mailbox(a)))
            .collect()
    })
}

/// Applies the given fields over `base`, validating each.
fn merge(body: DraftUpdate, base: DraftContent) -> Result<DraftContent, ApiError> {
    let mut p = Problems::new();
    let to = list_of(&mut p, "to", body.to);
    let cc = list_of(&mut p, "cc", body.cc);
    let bcc = list_of(&mut p, "bcc", body.bcc);
    if let Some(s) = &body.subject
        && s.contains(['\r', '\n'])
    {
        p.add("subject", "must not contain line breaks");
    }
    p.finish()?;
    Ok(DraftContent {
        to: to.unwrap_or(base.to),
        cc: cc.unwrap_or(base.cc),
        bcc: bcc.unwrap_or(base.bcc),
        subject: body.subject.unwrap_or(base.subject),
        text: body.text.unwrap_or(base.text),
        html: body.html.unwrap_or(base.html),
    })
}

/// Create a draft
///
/// An unsent message in a mailbox the key reaches, optionally in an existing thread.
#[utoipa::path(post, path = "/drafts", operation_id = "createDraft",
    request_body = DraftCreate,
    security(("bearer" = ["mail:write"])),
    responses((status = 201, description = "Created.", body = Draft)))]
pub async fn create(
    State(s): State<AppState>,
    Auth(key): Auth,
    ApiJson(body): ApiJson<DraftCreate>,
) -> ApiResult<(StatusCode, Json<Draft>)> {
    key.require(Scope::MailWrite)?;
    let DraftCreate {
        from,
        thread_id,
        to,
        cc,
        bcc,
        subject,
        text,
        html,
    } = body;
    let content = merge(
        DraftUpdate {
            to,
            cc,
            bcc,
            subject,
            text,
            html,
        },
        DraftContent::default(),
    )?;
    let from = from.ok_or_else(|| ApiError::invalid("from", "the mailbox address is required"))?;
    let from = validate::address(&from).map_err(|e| ApiError::invalid("from", e))?;
    let d = drafts::create(&s.db, &key, &from, thread_id.as_deref(), content).await?;
    Ok((StatusCode::CREATED, Json(drafts::to_wire(&d))))
}

/// List drafts
///
/// Paged, newest first by `created_at`.
#[utoipa::path(get, path = "/drafts", operation_id = "listDrafts",
    params(PageQuery, DraftListQuery),
    security(("bearer" = ["mail:read"])),
    responses((status = 200, description = "A page of drafts.", body = List<Draft>)))]
pub async fn list(
    State(s): State<AppState>,
    Auth(key): Auth,
    params: Params,
) -> ApiResult<Json<List<Draft>>> {
    key.require(Scope::MailRead)?;
    let mut p = Problems::new();
    let page = s.cursors.page(&params, &mut p);
    let q: DraftListQuery = params.query(&mut p);
    p.finish()?;
    let items = drafts::list(&s.db, &key.reach, &page, q.mailbox.as_deref()).await?;
    Ok(Json(page.list(&s.cursors, items)))
}

/// Read a draft
#[utoipa::path(get, path = "/drafts/{id}", operation_id = "getDraft",
    params(("id" = inline(DraftId), Path, description = "The draft's message id.")),
    security(("bearer" = ["mail:read"])),
    responses((status = 200, description = "The draft.", body = Draft)))]
pub async fn get(
    State(s): State<AppState>,
    Auth(key): Auth,
    id: PathId<DraftKind>,
) -> ApiResult<Json<Draft>> {
    key.require(Scope::MailRead)?;
    let id = id.get()?;
    Ok(Json(drafts::to_wire(
        &drafts::get(&s.db, &key.reach, &id).await?,
    )))
}

/// Edit a draft
///
/// Only fields sent change; `from` and `thread_id` are fixed at creation.
#[utoipa::path(patch, path = "/drafts/{id}", operation_id = "updateDraft",
    params(("id" = inline(DraftId), Path, description = "The draft's message id.")),
    request_body = DraftUpdate,
    security(("bearer" = ["mail:write"])),
    responses((status = 200, description = "The draft as it now is.", body = Draft)))]
pub async fn update(
    State(s): State<AppState>,
    Auth(key): Auth,
    id: PathId<DraftKind>,
    ApiJson(body): ApiJson<DraftUpdate>,
) -> ApiResult<Json<Draft>> {
    key.require(Scope::MailWrite)?;
    let id = id.get()?;
    let current = drafts::get(&s.db, &key.reach, &id).await?;
    let content = merge(body, drafts::content_of(&current))?;
    Ok(Json(drafts::to_wire(
        &drafts::update(&s.db, &key.reach, &id, content).await?,
    )))
}

/// Delete a draft
#[utoipa::path(delete, path = "/drafts/{id}", operation_id = "deleteDraft",
    params(("id" = inline(DraftId), Path, description = "The draft's message id.")),
    security(("bearer" = ["mail:write"])),
    responses((status = 200, description = "Deleted.", body = Deleted<DraftObject>)))]
pub async fn delete(
    State(s): State<AppState>,
    Auth(key): Auth,
    id: PathId<DraftKind>,
) -> ApiResult<Json<Deleted<DraftObject>>> {
    key.require(Scope::MailWrite)?;
    let id = id.get()?;
    Ok(Json(drafts::delete(&s.db, &key.reach, &id).await?))
}

/// Send a draft
///
/// Sends the draft as it is (it needs a recipient and a body). No request body. Needs `emails:send` as well as `mail:write`.
#[utoipa::path(post, path = "/drafts/{id}/send", operation_id = "sendDraft",
    params(("id" = inline(DraftId), Path, description = "The draft's message id.")),
    security(("bearer" = ["mail:write", "emails:send"])),
    responses(
        (status = 202, description = "Accepted by the provider.", body = SendResult),
        (status = 422, description = "The draft has no recipient or no body."),
        (status = 503, description = "The provider could not be reached."),
    ))]
pub async fn send(
    State(s): State<AppState>,
    Auth(key): Auth,
    id: PathId<DraftKind>,
) -> ApiResult<(StatusCode, Json<SendResult>)> {
    key.require(Scope::MailWrite)?;
    key.require(Scope::EmailsSend)?;
    let id = id.get()?;
    let outcome = drafts::send(&s, &key, &id).await?;
    Ok((StatusCode::ACCEPTED, Json(outcome.to_wire())))
}
