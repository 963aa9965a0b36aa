//! Contacts: every address seen in mail of a mailbox, listed within a reach.

use crate::auth::Reach;
use crate::core::paging::Page;
use crate::model::Timestamp;
use crate::model::contacts::{Contact, ContactObject, ContactOrder};
use crate::store::{Db, RowExt, Sql};

/// The filters of the contact list.
#[derive(Debug, Default)]
pub struct ContactFilter {
    pub order: ContactOrder,
    /// Substring of the address or the name.
    pub text: Option<String>,
    pub mailbox: Option<String>,
    pub mailbox_id: Option<String>,
}

/// A page of contacts with their sort keys, newest (or most frequent) first.
pub async fn list(
    db: &Db,
    reach: &Reach,
    f: &ContactFilter,
    page: &Page,
) -> Result<Vec<(i64, String, Contact)>, sqlx::Error> {
    let order_col = match f.order {
        ContactOrder::Recent => "last_seen_at",
        ContactOrder::Frequent => "message_count",
    };
    let mut q = Sql::new(
        "SELECT id, mailbox_id, mailbox, address, name, message_count, first_seen_at, last_seen_at FROM contacts WHERE 1 = 1",
    );
    reach.filter_address_columns(&mut q, "mailbox", "domain");
    if let Some(text) = &f.text {
        q.push(" AND (");
        db.push_contains(&mut q, "address", text);
        q.push(" OR ");
        db.push_contains(&mut q, "COALESCE(name, '')", text);
        q.push(")");
    }
    if let Some(mb) = &f.mailbox {
        q.push(" AND mailbox = ").bind(mb.trim().to_lowercase());
    }
    if let Some(id) = &f.mailbox_id {
        q.push(" AND mailbox_id = ").bind(id.clone());
    }
    page.push(&mut q, order_col, "id");
    let rows = q.fetch_all(db.reader()).await?;
    rows.iter()
        .map(|r| {
            let c = Contact {
                object: ContactObject,
                id: crate::ids::Id::from_stored(r.text("id")?),
                address: r.text("address")?,
                name: r.opt_text("name")?,
                mailbox: r.text("mailbox")?,
                mailbox_id: crate::ids::Id::from_stored(r.text("mailbox_id")?),
                message_count: r.int("message_count")?,
                first_seen_at: Timestamp(r.int("first_seen_at")?),
                last_seen_at: Timestamp(r.int("last_seen_at")?),
            };
            Ok((r.int(order_col)?, c.id.to_string(), c))
        })
        .collect()
}
