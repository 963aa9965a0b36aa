//! `/threads`: conversations, their filters, changes, deletion and replies.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::api::emails::mailbox_filter;
use crate::api::extract::{ApiJson, Auth, Params, RawBody, parse_json};
use crate::api::pagination::ReadPage;
use crate::app::AppState;
use crate::auth::Scope;
use crate::core::labels;
use crate::core::search;
use crate::core::sending::{self, AttachmentBody, OneOrMany, SendBody};
use crate::core::thread_actions::{self, COLUMNS, FOLDERS, ReplyInput, Thread, ThreadPatch};
use crate::error::{ApiError, ApiResult, Problems};
use crate::store::{Backend, RowExt, Sql};

pub async fn list(
    State(s): State<AppState>,
    Auth(key): Auth,
    params: Params,
) -> ApiResult<Json<Value>> {
    key.require(Scope::MailRead)?;
    let mut p = Problems::new();
    let page = s.cursors.page(&params, &mut p);
    // On SQLite a search reads the thread index newest first and pages by
    // its key (see `search::thread_search_select`).
    let sqlite_search = params
        .text("q")
        .filter(|_| s.db.backend() == Backend::Sqlite);
    let mut q = match sqlite_search {
        Some(_) => search::thread_search_select(COLUMNS),
        None => Sql::new(&format!("SELECT {COLUMNS} FROM threads t WHERE 1 = 1")),
    };
    key.reach
        .filter_address_columns(&mut q, "t.mailbox", "t.domain");
    match params.text("folder") {
        None | Some("all") => {
            q.push(" AND t.folders NOT LIKE '%,trash,%' AND t.folders NOT LIKE '%,spam,%'");
        }
        Some(f) if FOLDERS.contains(&f) => {
            // A literal (from the fixed folder list), not a parameter: the
            // planners match it against the partial indexes of rare folders.
            q.push(&format!(" AND t.folders LIKE '%,{f},%'"));
        }
        Some(f) => p.add(
            "folder",
            format!("unknown folder {f:?}; one of {}, all", FOLDERS.join(", ")),
        ),
    }
    let label = params.text("label_id").or(params.text("label"));
    if let Some(l) = label {
        match labels::find(&s.db, l).await? {
            Some(found) => {
                q.push(" AND EXISTS (SELECT 1 FROM thread_labels tl WHERE tl.thread_id = t.id AND tl.label_id = ")
                    .bind(found.id)
                    .push(")");
            }
            None => {
                // An unknown label matches nothing.
                q.push(" AND 1 = 0");
            }
        }
    }
    match params.flag(&mut p, "unread") {
        Some(true) => {
            q.push(" AND t.unread_count > 0");
        }
        Some(false) => {
            q.push(" AND t.unread_count = 0");
        }
        None => {}
    }
    if let Some(v) = params.flag(&mut p, "starred") {
        q.push(" AND t.is_starred = ").bind(v);
    }
    if let Some(v) = params.flag(&mut p, "has_attachments") {
        q.push(" AND t.has_attachments = ").bind(v);
    }
    if let Some(who) = params.text("participant") {
        let needle = serde_json::to_string(&who.trim().to_lowercase()).unwrap_or_default();
        q.push(" AND t.participants LIKE ")
            .bind(format!("%\"address\":{needle}%"));
    }
    if let Some(subject) = params.text("subject") {
        q.push(" AND ");
        s.db.push_contains(&mut q, "t.subject", subject);
    }
    if let Some(t) = params.instant(&mut p, "since") {
        q.push(" AND t.last_message_at >= ").bind(t);
    }
    if let Some(t) = params.until(&mut p, "until") {
        q.push(" AND t.last_message_at <= ").bind(t);
    }
    mailbox_filter(&params, &mut p).push(&mut q, "t.mailbox_id", "t.mailbox", "t.domain");
    p.finish()?;
    match (sqlite_search, params.text("q")) {
        (Some(text), _) => {
            search::push_thread_search(&mut q, text);
            page.push_key(&mut q, "f.rowid");
        }
        (None, Some(text)) => {
            search::push_thread_match_postgres(&mut q, "t", text);
            page.push(&mut q, "t.last_message_at", "t.id");
        }
        (None, None) => page.push(&mut q, "t.last_message_at", "t.id"),
    }
    let rows = q.fetch_all(s.db.reader()).await?;
    let threads: Vec<Thread> = rows
        .iter()
        .map(Thread::from_row)
        .collect::<Result<_, _>>()?;
    let positions: Vec<i64> = match sqlite_search {
        Some(_) => rows
            .iter()
            .map(|r| r.int("search_key"))
            .collect::<Result<_, _>>()?,
        None => threads.iter().map(|t| t.last_message_at).collect(),
    };
    let json = thread_actions::with_labels(&s.db, &threads).await?;
    let items = threads
        .iter()
        .zip(positions)
        .zip(json)
        .map(|((t, at), v)| (at, t.id.clone(), v))
        .collect();
    Ok(Json(page.envelope(&s.cursors, items)))
}

pub async fn get(
    State(s): State<AppState>,
    Auth(key): Auth,
    Path(id): Path<String>,
    params: Params,
) -> ApiResult<Json<Value>> {
    key.require(Scope::MailRead)?;
    let mut p = Problems::new();
    let include_body = params.flag(&mut p, "include_body").unwrap_or(true);
    p.finish()?;
    let t = thread_actions::get(&s.db, &key.reach, &id)
        .await?
        .ok_or(ApiError::NotFound("thread"))?;
    Ok(Json(thread_actions::read(&s.db, &t, include_body).await?))
}

#[derive(Deserialize)]
pub struct PatchThread {
    folder: Option<String>,
    is_read: Option<bool>,
    is_starred: Option<bool>,
    add_labels: Option<Vec<String>>,
    remove_labels: Option<Vec<String>>,
}

pub async fn patch(
    State(s): State<AppState>,
    Auth(key): Auth,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<PatchThread>,
) -> ApiResult<Json<Value>> {
    key.require(Scope::MailWrite)?;
    let mut p = Problems::new();
    if let Some(f) = &body.folder
        && (!FOLDERS.contains(&f.as_str()) || f == "drafts")
    {
        p.add(
            "folder",
            format!("unknown folder {f:?}; one of inbox, sent, archive, spam, trash"),
        );
    }
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
    let json = thread_actions::patch(
        &s,
        &key,
        &id,
        ThreadPatch {
            folder: body.folder,
            is_read: body.is_read,
            is_starred: body.is_starred,
            add,
            remove,
        },
    )
    .await?;
    Ok(Json(json))
}

pub async fn delete(
    State(s): State<AppState>,
    Auth(key): Auth,
    Path(id): Path<String>,
    params: Params,
) -> ApiResult<Json<Value>> {
    key.require(Scope::MailWrite)?;
    let mut p = Problems::new();
    let permanent = params.flag(&mut p, "permanent").unwrap_or(false);
    p.finish()?;
    let (id, for_good) = thread_actions::delete(&s, &key, &id, permanent).await?;
    Ok(Json(
        json!({"object": "thread", "id": id, "deleted": true, "permanent": for_good}),
    ))
}

#[derive(Deserialize)]
pub struct ReplyBody {
    text: Option<String>,
    html: Option<String>,
    #[serde(default)]
    reply_all: bool,
    to: Option<OneOrMany>,
    cc: Option<OneOrMany>,
    bcc: Option<OneOrMany>,
    subject: Option<String>,
    quote: Option<bool>,
    headers: Option<std::collections::BTreeMap<String, String>>,
    attachments: Option<Vec<AttachmentBody>>,
}

pub async fn reply(
    State(s): State<AppState>,
    Auth(key): Auth,
    Path(id): Path<String>,
    RawBody(body): RawBody,
) -> ApiResult<(StatusCode, Json<Value>)> {
    key.require(Scope::MailWrite)?;
    let mut b: ReplyBody = parse_json(&body)?;
    drop(body);
    if b.text.is_none() && b.html.is_none() {
        return Err(ApiError::invalid("text", "give text, html or both"));
    }
    // Reuse the send validation for addresses, headers and attachments.
    let probe = SendBody {
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
    Ok((StatusCode::ACCEPTED, Json(outcome.to_json())))
}
