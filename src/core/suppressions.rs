//! The suppression list: addresses that hard-bounced or complained, and ones
//! added by hand. Sending to them is refused.

use serde_json::{Value, json};

use crate::auth::Reach;
use crate::clock;
use crate::ids;
use crate::store::{RowExt, Sql, Tx};

pub fn row_json(r: &sqlx::any::AnyRow) -> Result<(i64, String, Value), sqlx::Error> {
    let created = r.int("created_at")?;
    let id = r.text("id")?;
    Ok((
        created,
        id.clone(),
        json!({
            "object": "suppression",
            "id": id,
            "address": r.text("address")?,
            "reason": r.text("reason")?,
            "detail": r.opt_text("detail")?,
            "domain": r.opt_text("domain")?,
            "message_id": r.opt_text("message_id")?,
            "created_at": clock::iso(created),
        }),
    ))
}

pub const COLUMNS: &str = "id, address, reason, detail, domain, mailbox, message_id, created_at";

/// Adds `address` unless already present. `domain`/`mailbox` record which
/// part of the account caused it, so narrower keys see their own entries.
#[allow(clippy::too_many_arguments)]
pub async fn add(
    tx: &mut Tx,
    address: &str,
    reason: &str,
    detail: Option<&str>,
    domain: Option<&str>,
    mailbox: Option<&str>,
    message_id: Option<&str>,
) -> Result<bool, sqlx::Error> {
    let n = Sql::new(&format!("INSERT INTO suppressions ({COLUMNS}) VALUES ("))
        .bind(ids::new_id("sup"))
        .push(", ")
        .bind(address.to_lowercase())
        .push(", ")
        .bind(reason)
        .push(", ")
        .bind(detail)
        .push(", ")
        .bind(domain)
        .push(", ")
        .bind(mailbox)
        .push(", ")
        .bind(message_id)
        .push(", ")
        .bind(clock::now_micros())
        .push(") ON CONFLICT (address) DO NOTHING")
        .execute_tx(tx)
        .await?;
    Ok(n > 0)
}

/// The read of which of `addresses` (a non-empty list) are suppressed; its
/// rows give them through [`suppressed_in`].
pub fn suppressed_read(addresses: &[String]) -> Sql {
    let mut q = Sql::new("SELECT address FROM suppressions WHERE address IN ");
    q.bind_list(addresses);
    q
}

/// The addresses of the rows of [`suppressed_read`].
pub fn suppressed_in(rows: &[impl RowExt]) -> Result<Vec<String>, sqlx::Error> {
    rows.iter().map(|r| r.text("address")).collect()
}

/// Limits suppression rows to the reach: entries caused by mail of the key's
/// domains or addresses; entries added by hand are account-wide.
pub fn filter_reach(reach: &Reach, q: &mut Sql) {
    reach.filter_address_columns(q, "mailbox", "domain");
}
