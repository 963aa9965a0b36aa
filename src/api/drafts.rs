//! `/drafts`: create, edit, send and delete unsent messages.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::api::extract::{ApiJson, Auth, Params};
use crate::api::pagination::ReadPage;
use crate::app::AppState;
use crate::auth::Scope;
use crate::core::drafts::{self, DraftContent};
use crate::core::sending::OneOrMany;
use crate::core::validate;
use crate::error::{ApiResult, Problems};
use crate::mime::compose::Named;

#[derive(Deserialize)]
pub struct DraftBody {
    from: Option<String>,
    thread_id: Option<String>,
    to: Option<OneOrMany>,
    cc: Option<OneOrMany>,
    bcc: Option<OneOrMany>,
    subject: Option<String>,
    text: Option<String>,
    html: Option<String>,
}

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
fn merge(
    body: DraftBody,
    base: DraftContent,
) -> Result<(Option<String>, Option<String>, DraftContent), crate::error::ApiError> {
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
    Ok((
        body.from,
        body.thread_id,
        DraftContent {
            to: to.unwrap_or(base.to),
            cc: cc.unwrap_or(base.cc),
            bcc: bcc.unwrap_or(base.bcc),
            subject: body.subject.unwrap_or(base.subject),
            text: body.text.unwrap_or(base.text),
            html: body.html.unwrap_or(base.html),
        },
    ))
}

pub async fn create(
    State(s): State<AppState>,
    Auth(key): Auth,
    ApiJson(body): ApiJson<DraftBody>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    key.require(Scope::MailWrite)?;
    let (from, thread_id, content) = merge(body, DraftContent::default())?;
    let from = from.ok_or_else(|| {
        crate::error::ApiError::invalid("from", "the mailbox address is required")
    })?;
    let from = validate::address(&from).map_err(|e| crate::error::ApiError::invalid("from", e))?;
    let d = drafts::create(&s, &key, &from, thread_id.as_deref(), content).await?;
    Ok((StatusCode::CREATED, Json(drafts::to_json(&d))))
}

pub async fn list(
    State(s): State<AppState>,
    Auth(key): Auth,
    params: Params,
) -> ApiResult<Json<Value>> {
    key.require(Scope::MailRead)?;
    let mut p = Problems::new();
    let page = s.cursors.page(&params, &mut p);
    p.finish()?;
    let items = drafts::list(&s, &key, &page, params.text("mailbox")).await?;
    Ok(Json(page.envelope(&s.cursors, items)))
}

pub async fn get(
    State(s): State<AppState>,
    Auth(key): Auth,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    key.require(Scope::MailRead)?;
    Ok(Json(drafts::to_json(&drafts::get(&s, &key, &id).await?)))
}

pub async fn update(
    State(s): State<AppState>,
    Auth(key): Auth,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<DraftBody>,
) -> ApiResult<Json<Value>> {
    key.require(Scope::MailWrite)?;
    let current = drafts::get(&s, &key, &id).await?;
    let (_, _, content) = merge(body, drafts::content_of(&current))?;
    Ok(Json(drafts::to_json(
        &drafts::update(&s, &key, &id, content).await?,
    )))
}

pub async fn delete(
    State(s): State<AppState>,
    Auth(key): Auth,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    key.require(Scope::MailWrite)?;
    let d = drafts::delete(&s, &key, &id).await?;
    Ok(Json(
        json!({"object": "draft", "id": d.id, "deleted": true}),
    ))
}

pub async fn send(
    State(s): State<AppState>,
    Auth(key): Auth,
    Path(id): Path<String>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    key.require(Scope::MailWrite)?;
    key.require(Scope::EmailsSend)?;
    let outcome = drafts::send(&s, &key, &id).await?;
    Ok((StatusCode::ACCEPTED, Json(outcome.to_json())))
}
