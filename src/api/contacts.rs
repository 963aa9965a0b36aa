//! `/contacts`: every address seen in mail the key can reach.

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use crate::api::extract::{Auth, Params};
use crate::api::pagination::ReadPage;
use crate::app::AppState;
use crate::auth::Scope;
use crate::clock;
use crate::error::{ApiResult, Problems};
use crate::store::{RowExt, Sql};

pub async fn list(
    State(s): State<AppState>,
    Auth(key): Auth,
    params: Params,
) -> ApiResult<Json<Value>> {
    key.require(Scope::MailRead)?;
    let mut p = Problems::new();
    let page = s.cursors.page(&params, &mut p);
    let order_col = match params.text("order") {
        None | Some("recent") => "last_seen_at",
        Some("frequent") => "message_count",
        Some(other) => {
            p.add(
                "order",
                format!("unknown order {other:?}; recent or frequent"),
            );
            "last_seen_at"
        }
    };
    let mut q = Sql::new(
        "SELECT id, mailbox_id, mailbox, address, name, message_count, first_seen_at, last_seen_at FROM contacts WHERE 1 = 1",
    );
    key.reach
        .filter_address_columns(&mut q, "mailbox", "domain");
    if let Some(text) = params.text("q") {
        q.push(" AND (");
        s.db.push_contains(&mut q, "address", text);
        q.push(" OR ");
        s.db.push_contains(&mut q, "COALESCE(name, '')", text);
        q.push(")");
    }
    if let Some(mb) = params.text("mailbox") {
        q.push(" AND mailbox = ").bind(mb.trim().to_lowercase());
    }
    if let Some(id) = params.text("mailbox_id") {
        q.push(" AND mailbox_id = ").bind(id);
    }
    p.finish()?;
    page.push(&mut q, order_col, "id");
    let rows = q.fetch_all(s.db.reader()).await?;
    let mut items = Vec::with_capacity(rows.len());
    for r in &rows {
        let sort = r.int(order_col)?;
        let id = r.text("id")?;
        items.push((
            sort,
            id.clone(),
            json!({
                "object": "contact",
                "id": id,
                "address": r.text("address")?,
                "name": r.opt_text("name")?,
                "mailbox": r.text("mailbox")?,
                "mailbox_id": r.text("mailbox_id")?,
                "message_count": r.int("message_count")?,
                "first_seen_at": clock::iso(r.int("first_seen_at")?),
                "last_seen_at": clock::iso(r.int("last_seen_at")?),
            }),
        ));
    }
    Ok(Json(page.envelope(&s.cursors, items)))
}
