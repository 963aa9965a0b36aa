//! Mailboxes: addresses on the account's domains that hold mail.

use crate::auth::{ApiKey, Reach, address_domain};
use crate::clock;
use crate::core::domains;
use crate::core::error::{CoreError, Problems};
use crate::core::validate;
use crate::ids;
use crate::model::Timestamp;
use crate::model::mailboxes as model;
use crate::sql;
use crate::store::{Backend, Db, RowExt, Sql, Tx, is_unique_violation};

pub const DEFAULT_COLOR: &str = "#6366f1";

#[derive(Debug, Clone, PartialEq)]
pub struct Mailbox {
    pub id: String,
    pub address: String,
    pub domain: String,
    pub domain_id: String,
    pub display_name: String,
    pub signature: Option<String>,
    pub is_catch_all: bool,
    pub is_default: bool,
    pub color: String,
    pub created_at: i64,
}

const COLUMNS: &str = "id, address, domain, domain_id, display_name, signature, is_catch_all, is_default, color, created_at";

impl Mailbox {
    /// A mailbox made on first use of its address (a first send from it, or
    /// first mail to an `auto_create_mailboxes` domain), with the defaults.
    pub fn on_first_use(address: &str, domain_id: String) -> Mailbox {
        Mailbox {
            id: ids::new_id("mbx"),
            address: address.to_string(),
            domain: address_domain(address).to_string(),
            domain_id,
            display_name: String::new(),
            signature: None,
            is_catch_all: false,
            is_default: false,
            color: DEFAULT_COLOR.to_string(),
            created_at: clock::now_micros(),
        }
    }

    fn from_row(row: &impl RowExt) -> Result<Mailbox, sqlx::Error> {
        Ok(Mailbox {
            id: row.text("id")?,
            address: row.text("address")?,
            domain: row.text("domain")?,
            domain_id: row.text("domain_id")?,
            display_name: row.text("display_name")?,
            signature: row.opt_text("signature")?,
            is_catch_all: row.flag("is_catch_all")?,
            is_default: row.flag("is_default")?,
            color: row.text("color")?,
            created_at: row.int("created_at")?,
        })
    }

    pub fn to_wire(&self) -> model::Mailbox {
        model::Mailbox {
            object: model::MailboxObject,
            id: crate::ids::Id::from_stored(self.id.clone()),
            address: self.address.clone(),
            domain: self.domain.clone(),
            domain_id: crate::ids::Id::from_stored(self.domain_id.clone()),
            display_name: self.display_name.clone(),
            signature: self.signature.clone(),
            is_catch_all: self.is_catch_all,
            is_default: self.is_default,
            color: self.color.clone(),
            created_at: Timestamp(self.created_at),
        }
    }

    /// What `DELETE` answers for this mailbox.
    pub fn deleted(&self) -> model::MailboxDeleted {
        model::MailboxDeleted {
            object: model::MailboxObject,
            id: crate::ids::Id::from_stored(self.id.clone()),
            deleted: true,
        }
    }
}

/// Fields a caller may set; validated by the API layer into this shape.
#[derive(Debug, Default, Clone)]
pub struct MailboxInput {
    pub display_name: Option<String>,
    /// `Some(None)` clears.
    pub signature: Option<Option<String>>,
    pub is_catch_all: Option<bool>,
    pub is_default: Option<bool>,
    pub color: Option<String>,
}

pub async fn list(
    db: &Db,
    reach: &Reach,
    domain: Option<&str>,
) -> Result<Vec<Mailbox>, sqlx::Error> {
    let mut q = Sql::new(&format!("SELECT {COLUMNS} FROM mailboxes WHERE 1 = 1"));
    reach.filter_address_columns(&mut q, "address", "domain");
    if let Some(d) = domain {
        q.push(" AND domain = ").bind(d.to_ascii_lowercase());
    }
    q.push(" ORDER BY created_at, id");
    let rows = q.fetch_all(db.reader()).await?;
    rows.iter().map(Mailbox::from_row).collect()
}

/// By id or address, within the reach.
pub async fn get(
    db: &Db,
    reach: &Reach,
    id_or_address: &str,
) -> Result<Option<Mailbox>, sqlx::Error> {
    let mut q = Sql::new(&format!("SELECT {COLUMNS} FROM mailboxes WHERE (id = "));
    q.bind(id_or_address)
        .push(" OR address = ")
        .bind(id_or_address.to_lowercase())
        .push(")");
    reach.filter_address_columns(&mut q, "address", "domain");
    q.fetch_optional(db.reader())
        .await?
        .map(|r| Mailbox::from_row(&r))
        .transpose()
}

pub async fn by_address(db: &Db, address: &str) -> Result<Option<Mailbox>, sqlx::Error> {
    db.lookup_optional(&by_address_read(address))
        .await?
        .map(|r| Mailbox::from_row(&r))
        .transpose()
}

/// The read behind [`by_address`].
pub fn by_address_read(address: &str) -> Sql {
    let mut q = Sql::new(&format!("SELECT {COLUMNS} FROM mailboxes WHERE address = "));
    q.bind(address);
    q
}

/// The mailbox of the rows of [`by_address_read`], if any.
pub fn first_mailbox(rows: &[impl RowExt]) -> Result<Option<Mailbox>, sqlx::Error> {
    rows.first().map(Mailbox::from_row).transpose()
}

/// Whether the key may hold a mailbox at `address` (403 otherwise).
pub fn check_reach_for_address(key: &ApiKey, address: &str) -> Result<(), CoreError> {
    if key.reach.covers_address(address) {
        Ok(())
    } else {
        Err(CoreError::Forbidden(format!(
            "this API key may not act for {address}"
        )))
    }
}

pub async fn create(
    db: &Db,
    key: &ApiKey,
    raw_address: &str,
    input: MailboxInput,
) -> Result<Mailbox, CoreError> {
    let address = validate::address(raw_address).map_err(|m| CoreError::invalid("address", m))?;
    check_reach_for_address(key, &address)?;
    let domain_name = address_domain(&address).to_string();
    let Some(domain) = domains::sending_domain_for(db, &domain_name).await? else {
        return Err(CoreError::invalid(
            "address",
            format!("{domain_name} is not a verified domain of this account, nor under one"),
        ));
    };
    let mailbox = Mailbox {
        id: ids::new_id("mbx"),
        address: address.clone(),
        domain: domain_name,
        domain_id: domain.id,
        display_name: input.display_name.unwrap_or_default(),
        signature: input.signature.flatten(),
        is_catch_all: input.is_catch_all.unwrap_or(false),
        is_default: input.is_default.unwrap_or(false),
        color: input.color.unwrap_or_else(|| DEFAULT_COLOR.to_string()),
        created_at: clock::now_micros(),
    };
    let mut tx = db.begin().await?;
    insert(&mut tx, &mailbox).await.map_err(|e| {
        if is_unique_violation(&e) {
            CoreError::conflict(format!("mailbox {address} already exists"))
        } else {
            e.into()
        }
    })?;
    enforce_single_flags(&mut tx, key, None, &mailbox).await?;
    tx.commit().await?;
    Ok(mailbox)
}

/// Inserts a mailbox row (also used when a first send creates one).
pub async fn insert(tx: &mut Tx, m: &Mailbox) -> Result<(), sqlx::Error> {
    insert_statement(m).execute_tx(tx).await.map(|_| ())
}

/// Inserts `m` unless a mailbox with its address exists already (made
/// meanwhile by a concurrent send or delivery); returns the id of the one
/// that stands.
pub async fn insert_or_existing(tx: &mut Tx, m: &Mailbox) -> Result<String, sqlx::Error> {
    let mut insert = insert_statement(m);
    insert.push(" ON CONFLICT (address) DO NOTHING");
    if insert.execute_tx(tx).await? == 1 {
        return Ok(m.id.clone());
    }
    sql!("SELECT id FROM mailboxes WHERE address = $1", &m.address)
        .fetch_one_tx(tx)
        .await?
        .text("id")
}

fn insert_statement(m: &Mailbox) -> Sql {
    sql!(
        "INSERT INTO mailboxes (id, address, domain, domain_id, display_name, signature, \
         is_catch_all, is_default, color, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        &m.id,
        &m.address,
        &m.domain,
        &m.domain_id,
        &m.display_name,
        m.signature.clone(),
        m.is_catch_all,
        m.is_default,
        &m.color,
        m.created_at
    )
}

/// One default mailbox in the account, one catch-all per domain: setting the
/// flag on `m` clears it elsewhere. A flag changes only through a key that
/// reaches every mailbox it changes (403 otherwise), and a catch-all, which
/// receives mail for any address of its domain, only through a key that
/// reaches the whole domain. `was` is the mailbox before the change.
async fn enforce_single_flags(
    tx: &mut Tx,
    key: &ApiKey,
    was: Option<&Mailbox>,
    m: &Mailbox,
) -> Result<(), CoreError> {
    let turned_on = |now: bool, before: Option<bool>| now && before != Some(true);
    if turned_on(m.is_catch_all, was.map(|w| w.is_catch_all)) {
        key.require_whole_domain(&m.domain, "making a mailbox the catch-all")?;
    }
    if m.is_default {
        let others = sql!(
            "SELECT address FROM mailboxes WHERE is_default = 1 AND id <> $1",
            &m.id
        );
        require_reach_over(tx, key, others, "is_default").await?;
        sql!(
            "UPDATE mailboxes SET is_default = 0 WHERE is_default = 1 AND id <> $1",
            &m.id
        )
        .execute_tx(tx)
        .await?;
    }
    if m.is_catch_all {
        let others = sql!(
            "SELECT address FROM mailboxes WHERE is_catch_all = 1 AND domain = $1 AND id <> $2",
            &m.domain,
            &m.id
        );
        require_reach_over(tx, key, others, "is_catch_all").await?;
        sql!(
            "UPDATE mailboxes SET is_catch_all = 0 WHERE is_catch_all = 1 AND domain = $1 AND id <> $2",
            &m.domain,
            &m.id
        )
        .execute_tx(tx)
        .await?;
    }
    Ok(())
}

/// 403 unless the key reaches every mailbox `addresses` reads (those whose
/// `flag` the change would clear).
async fn require_reach_over(
    tx: &mut Tx,
    key: &ApiKey,
    addresses: Sql,
    flag: &str,
) -> Result<(), CoreError> {
    for row in addresses.fetch_all_tx(tx).await? {
        let address = row.text("address")?;
        if !key.reach.covers_address(&address) {
            return Err(CoreError::Forbidden(format!(
                "setting {flag} would clear it on a mailbox this API key does not reach"
            )));
        }
    }
    Ok(())
}

pub async fn update(
    db: &Db,
    key: &ApiKey,
    id: &str,
    input: MailboxInput,
) -> Result<Mailbox, CoreError> {
    let was = get(db, &key.reach, id)
        .await?
        .ok_or(CoreError::NotFound("mailbox"))?;
    let mut m = was.clone();
    if let Some(v) = input.display_name {
        m.display_name = v;
    }
    if let Some(v) = input.signature {
        m.signature = v;
    }
    if let Some(v) = input.is_catch_all {
        m.is_catch_all = v;
    }
    if let Some(v) = input.is_default {
        m.is_default = v;
    }
    if let Some(v) = input.color {
        m.color = v;
    }
    let mut tx = db.begin().await?;
    sql!(
        "UPDATE mailboxes SET display_name = $1, signature = $2, is_catch_all = $3, \
         is_default = $4, color = $5 WHERE id = $6",
        &m.display_name,
        m.signature.clone(),
        m.is_catch_all,
        m.is_default,
        &m.color,
        &m.id
    )
    .execute_tx(&mut tx)
    .await?;
    enforce_single_flags(&mut tx, key, Some(&was), &m).await?;
    tx.commit().await?;
    Ok(m)
}

/// Deletes the mailbox. Without `confirm` nothing changes and the caller gets 409.
pub async fn delete(db: &Db, key: &ApiKey, id: &str, confirm: bool) -> Result<Mailbox, CoreError> {
    let m = get(db, &key.reach, id)
        .await?
        .ok_or(CoreError::NotFound("mailbox"))?;
    if !confirm {
        return Err(CoreError::conflict(
            "deleting a mailbox deletes all its mail; repeat with ?confirm=true",
        ));
    }
    let mut tx = db.begin().await?;
    // The mailbox is locked before its mail is read: mail being stored in
    // it (which holds it, see `inbound::ingest`) is committed first, and
    // is read and deleted below, or finds the mailbox gone. (SQLite's
    // write transactions never overlap.)
    if db.backend() == Backend::Postgres {
        sql!("SELECT id FROM mailboxes WHERE id = $1 FOR UPDATE", &m.id)
            .fetch_optional_tx(&mut tx)
            .await?;
    }
    // The mail goes with the mailbox: threads, messages, attachments, contacts.
    let threads: Vec<String> = sql!("SELECT id FROM threads WHERE mailbox_id = $1", &m.id)
        .fetch_all_tx(&mut tx)
        .await?
        .iter()
        .map(|r| r.text("id"))
        .collect::<Result<_, _>>()?;
    for chunk in threads.chunks(500) {
        crate::core::thread_actions::remove_threads(&mut tx, db.backend(), chunk).await?;
    }
    sql!("DELETE FROM contacts WHERE mailbox_id = $1", &m.id)
        .execute_tx(&mut tx)
        .await?;
    sql!("DELETE FROM mailboxes WHERE id = $1", &m.id)
        .execute_tx(&mut tx)
        .await?;
    tx.commit().await?;
    Ok(m)
}

/// Shared checks of the editable fields, collecting every problem.
pub fn validate_input(
    problems: &mut Problems,
    display_name: Option<&str>,
    signature: Option<Option<&str>>,
    color: Option<&str>,
) -> MailboxInput {
    MailboxInput {
        display_name: display_name
            .and_then(|v| problems.check("display_name", validate::text(v, 200))),
        signature: signature.and_then(|s| match s {
            None => Some(None),
            Some(v) => problems
                .check("signature", validate::text(v, 10_000))
                .map(Some),
        }),
        color: color.and_then(|c| problems.check("color", validate::color(c))),
        ..Default::default()
    }
}
