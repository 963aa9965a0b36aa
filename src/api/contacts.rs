//! `/contacts`: every address seen in mail the key can reach.

use axum::Json;
use axum::extract::State;

use crate::api::extract::{Auth, Params};
use crate::api::pagination::{PageQuery, ReadPage};
use crate::app::AppState;
use crate::auth::Scope;
use crate::core::contacts::{self, ContactFilter};
use crate::error::{ApiResult, Problems};
use crate::model::List;
use crate::model::contacts::{Contact, ContactListQuery, ContactOrder};

/// List contacts
///
/// Paged: every address seen in mail of the mailboxes the key reaches, newest first by `last_seen_at`, or by `message_count` with `order=frequent`.
#[utoipa::path(get, path = "/contacts", operation_id = "listContacts",
    params(PageQuery, ContactListQuery),
    security(("bearer" = ["mail:read"])),
    responses((status = 200, description = "A page of contacts.", body = List<Contact>)))]
pub async fn list(
    State(s): State<AppState>,
    Auth(key): Auth,
    params: Params,
) -> ApiResult<Json<List<Contact>>> {
    key.require(Scope::MailRead)?;
    let mut p = Problems::new();
    let page = s.cursors.page(&params, &mut p);
    let q: ContactListQuery = params.query(&mut p);
    p.finish()?;
    let f = ContactFilter {
        order: q.order.unwrap_or(ContactOrder::Recent),
        text: q.q,
        mailbox: q.mailbox.map(|a| a.0),
        mailbox_id: q.mailbox_id.map(String::from),
    };
    let items = contacts::list(&s.db, &key.reach, &f, &page).await?;
    Ok(Json(page.list(&s.cursors, items)))
}
