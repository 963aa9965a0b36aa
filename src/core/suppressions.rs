//! The suppression list: addresses that hard-bounced or complained, and ones
//! added by hand. Sending to them is refused.

use crate::auth::Reach;
use crate::clock;
use crate::core::error::{CoreError, CoreResult};
use crate::core::paging::{CursorSigner, Page};
use crate::ids;
use crate::model::suppressions as model;
use crate::model::suppressions::SuppressionReason;
use crate::model::{List, Timestamp};
use crate::store::{Db, RowExt, Sql, Tx};

#[derive(Debug, Clone, PartialEq)]
pub struct Suppression {
    pub id: String,
    pub address: String,
    pub reason: SuppressionReason,
    pub detail: Option<String>,
    pub domain: Option<String>,
    pub message_id: Option<String>,
    pub created_at: i64,
}

impl Suppression {
    fn from_row(r: &sqlx::any::AnyRow) -> CoreResult<Suppression> {
        let reason = r.text("reason")?;
        Ok(Suppression {
            id: r.text("id")?,
            address: r.text("address")?,
            reason: SuppressionReason::parse(&reason).ok_or_else(|| {
                CoreError::Internal(anyhow::anyhow!("unknown suppression reason {reason:?}"))
            })?,
            detail: r.opt_text("detail")?,
            domain: r.opt_text("domain")?,
            message_id: r.opt_text("message_id")?,
            created_at: r.int("created_at")?,
        })
    }

    pub fn to_wire(&self) -> model::Suppression {
        model::Suppression {
            object: model::SuppressionObject,
            id: crate::ids::Id::from_stored(self.id.clone()),
            address: self.address.clone(),
            reason: self.reason,
            detail: self.detail.clone(),
            domain: self.domain.clone(),
            message_id: self.message_id.clone().map(crate::ids::Id::from_stored),
            created_at: Timestamp(self.created_at),
        }
    }
}

/// What `GET /suppressions` filters on.
#[derive(Debug, Default)]
pub struct Filter {
    pub address: Option<String>,
    pub reason: Option<SuppressionReason>,
}

/// One page of the suppressions the reach covers, newest first.
pub async fn list(
    db: &Db,
    signer: &CursorSigner,
    reach: &Reach,
    filter: &Filter,
    page: &Page,
) -> CoreResult<List<model::Suppression>> {
    let mut q = Sql::new(&format!("SELECT {COLUMNS} FROM suppressions WHERE 1 = 1"));
    filter_reach(reach, &mut q);
    if let Some(a) = &filter.address {
        q.push(" AND address = ").bind(a.trim().to_lowercase());
    }
    if let Some(r) = filter.reason {
        q.push(" AND reason = ").bind(r.as_str());
    }
    page.push(&mut q, "created_at", "id");
    let rows = q.fetch_all(db.reader()).await?;
    let items = rows
        .iter()
        .map(|r| {
            let s = Suppression::from_row(r)?;
            Ok((s.created_at, s.id.clone(), s.to_wire()))
        })
        .collect::<CoreResult<Vec<_>>>()?;
    Ok(page.list(signer, items))
}

/// Adds `address` (already validated) by hand; 409 when already there.
pub async fn add_manual(
    db: &Db,
    address: &str,
    reason: SuppressionReason,
) -> CoreResult<Suppression> {
    let mut tx = db.begin().await?;
    let added = add(&mut tx, address, reason, None, None, None, None).await?;
    tx.commit().await?;
    if !added {
        return Err(CoreError::conflict(format!(
            "{address} is already suppressed"
        )));
    }
    let row = Sql::new(&format!(
        "SELECT {COLUMNS} FROM suppressions WHERE address = "
    ))
    .bind(address.to_lowercase())
    .fetch_one(db.reader())
    .await?;
    Suppression::from_row(&row)
}

/// Removes the entry with this id or address that the reach covers.
pub async fn remove(db: &Db, reach: &Reach, id_or_address: &str) -> CoreResult<Suppression> {
    let mut q = Sql::new(&format!("SELECT {COLUMNS} FROM suppressions WHERE (id = "));
    q.bind(id_or_address)
        .push(" OR address = ")
        .bind(id_or_address.to_lowercase())
        .push(")");
    filter_reach(reach, &mut q);
    let row = q
        .fetch_optional(db.reader())
        .await?
        .ok_or(CoreError::NotFound("suppression"))?;
    let s = Suppression::from_row(&row)?;
    Sql::new("DELETE FROM suppressions WHERE id = ")
        .bind(&s.id)
        .execute(db.writer())
        .await?;
    Ok(s)
}

pub const COLUMNS: &str = "id, address, reason, detail, domain, mailbox, message_id, created_at";

/// Adds `address` unless already present. `domain`/`mailbox` record which
/// part of the account caused it, so narrower keys see their own entries.
#[allow(clippy::too_many_arguments)]
pub async fn add(
    tx: &mut Tx,
    address: &str,
    reason: SuppressionReason,
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
        .bind(reason.as_str())
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
