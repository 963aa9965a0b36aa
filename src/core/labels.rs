//! Labels: account-wide names with a colour, attached to threads.

use crate::clock;
use crate::core::error::CoreError;
use crate::ids;
use crate::model::Timestamp;
use crate::model::labels as model;
use crate::store::{Db, RowExt, Sql, Tx, is_unique_violation};

pub const DEFAULT_COLOR: &str = "#9ca3af";
pub const MAX_NAME: usize = 60;

#[derive(Debug, Clone, PartialEq)]
pub struct Label {
    pub id: String,
    pub name: String,
    pub color: String,
    pub created_at: i64,
}

impl Label {
    fn from_row(r: &sqlx::any::AnyRow) -> Result<Label, sqlx::Error> {
        Ok(Label {
            id: r.text("id")?,
            name: r.text("name")?,
            color: r.text("color")?,
            created_at: r.int("created_at")?,
        })
    }

    pub fn to_wire(&self) -> model::Label {
        model::Label {
            object: model::LabelObject,
            id: crate::ids::Id::from_stored(self.id.clone()),
            name: self.name.clone(),
            color: self.color.clone(),
            created_at: Timestamp(self.created_at),
        }
    }

    /// The short form embedded in a thread.
    pub fn embedded(&self) -> model::LabelRef {
        model::LabelRef {
            object: model::LabelObject,
            id: crate::ids::Id::from_stored(self.id.clone()),
            name: self.name.clone(),
        }
    }
}

pub fn validate_name(raw: &str) -> Result<String, String> {
    // Counted as sent, spaces included, as the document's `maxLength` is:
    // a name the schema refuses must not be accepted once trimmed.
    if raw.chars().count() > MAX_NAME {
        return Err(format!("a label name is at most {MAX_NAME} characters"));
    }
    let name = raw.trim();
    if name.is_empty() {
        return Err("a label name is required".into());
    }
    if name.chars().any(char::is_control) {
        return Err("a label name cannot contain control characters".into());
    }
    Ok(name.to_string())
}

pub async fn list(db: &Db) -> Result<Vec<Label>, sqlx::Error> {
    let rows = Sql::new("SELECT id, name, color, created_at FROM labels ORDER BY name_key")
        .fetch_all(db.reader())
        .await?;
    rows.iter().map(Label::from_row).collect()
}

/// By id or by name (case-insensitive).
pub async fn find(db: &Db, id_or_name: &str) -> Result<Option<Label>, sqlx::Error> {
    // No label holds a NUL (names refuse control characters), and
    // PostgreSQL cannot compare text that does.
    if id_or_name.contains('\0') {
        return Ok(None);
    }
    Sql::new("SELECT id, name, color, created_at FROM labels WHERE id = ")
        .bind(id_or_name)
        .push(" OR name_key = ")
        .bind(id_or_name.trim().to_lowercase())
        .fetch_optional(db.reader())
        .await?
        .map(|r| Label::from_row(&r))
        .transpose()
}

pub async fn create(db: &Db, name: &str, color: &str) -> Result<Label, CoreError> {
    let label = Label {
        id: ids::new_id("lbl"),
        name: name.to_string(),
        color: color.to_string(),
        created_at: clock::now_micros(),
    };
    Sql::new("INSERT INTO labels (id, name, name_key, color, created_at) VALUES (")
        .bind(&label.id)
        .push(", ")
        .bind(&label.name)
        .push(", ")
        .bind(label.name.to_lowercase())
        .push(", ")
        .bind(&label.color)
        .push(", ")
        .bind(label.created_at)
        .push(")")
        .execute(db.writer())
        .await
        .map_err(|e| {
            if is_unique_violation(&e) {
                CoreError::conflict(format!("a label named {name:?} already exists"))
            } else {
                e.into()
            }
        })?;
    Ok(label)
}

pub async fn update(
    db: &Db,
    label: &Label,
    name: Option<String>,
    color: Option<String>,
) -> Result<Label, CoreError> {
    let mut next = label.clone();
    if let Some(n) = name {
        next.name = n;
    }
    if let Some(c) = color {
        next.color = c;
    }
    Sql::new("UPDATE labels SET name = ")
        .bind(&next.name)
        .push(", name_key = ")
        .bind(next.name.to_lowercase())
        .push(", color = ")
        .bind(&next.color)
        .push(" WHERE id = ")
        .bind(&next.id)
        .execute(db.writer())
        .await
        .map_err(|e| {
            if is_unique_violation(&e) {
                CoreError::conflict(format!("a label named {:?} already exists", next.name))
            } else {
                e.into()
            }
        })?;
    Ok(next)
}

/// Deletes a label; it leaves every thread in the same transaction.
pub async fn delete(db: &Db, label: &Label) -> Result<(), sqlx::Error> {
    let mut tx = db.begin().await?;
    Sql::new("DELETE FROM thread_labels WHERE label_id = ")
        .bind(&label.id)
        .execute_tx(&mut tx)
        .await?;
    Sql::new("DELETE FROM labels WHERE id = ")
        .bind(&label.id)
        .execute_tx(&mut tx)
        .await?;
    tx.commit().await
}

/// Labels of many threads at once.
pub async fn of_threads(
    db: &Db,
    thread_ids: &[String],
) -> Result<Vec<(String, Label)>, sqlx::Error> {
    if thread_ids.is_empty() {
        return Ok(Vec::new());
    }
    let mut q = Sql::new(
        "SELECT tl.thread_id, l.id, l.name, l.color, l.created_at FROM thread_labels tl \
         JOIN labels l ON l.id = tl.label_id WHERE ",
    );
    db.push_in(&mut q, "tl.thread_id", thread_ids);
    q.push(" ORDER BY l.name_key");
    let rows = q.fetch_all(db.reader()).await?;
    rows.iter()
        .map(|r| Ok((r.text("thread_id")?, Label::from_row(r)?)))
        .collect()
}

pub async fn attach(tx: &mut Tx, thread_id: &str, label_id: &str) -> Result<(), sqlx::Error> {
    Sql::new("INSERT INTO thread_labels (thread_id, label_id) VALUES (")
        .bind(thread_id)
        .push(", ")
        .bind(label_id)
        .push(") ON CONFLICT (thread_id, label_id) DO NOTHING")
        .execute_tx(tx)
        .await
        .map(|_| ())
}

pub async fn detach(tx: &mut Tx, thread_id: &str, label_id: &str) -> Result<(), sqlx::Error> {
    Sql::new("DELETE FROM thread_labels WHERE thread_id = ")
        .bind(thread_id)
        .push(" AND label_id = ")
        .bind(label_id)
        .execute_tx(tx)
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_length_limit_counts_the_name_as_sent() {
        // Found by schemathesis: 61 characters, one a leading no-break
        // space, were 60 once trimmed and accepted against `maxLength`.
        let sent = format!("\u{a0}{}", "*".repeat(MAX_NAME));
        assert!(validate_name(&sent).is_err());
        let fits = format!(" {} ", "*".repeat(MAX_NAME - 2));
        assert_eq!(validate_name(&fits), Ok("*".repeat(MAX_NAME - 2)));
    }

    /// A page's labels read is one statement text whatever the page's size,
    /// and PostgreSQL keeps one generic plan for it.
    #[tokio::test]
    async fn a_pages_labels_read_is_one_statement_with_one_plan() {
        let Some(db) = crate::store::tests::fresh_postgres().await else {
            return;
        };
        let read = |count: usize| {
            let ids: Vec<String> = (0..count).map(|i| format!("thr_{i}")).collect();
            let mut q = Sql::new("SELECT tl.thread_id FROM thread_labels tl WHERE ");
            db.push_in(&mut q, "tl.thread_id", &ids);
            q
        };
        assert_eq!(read(1).text(), read(25).text());
        let mut conn = db.reader().acquire().await.unwrap();
        for count in [1, 3, 25, 2, 7, 25, 1, 4] {
            assert!(read(count).fetch_all(&mut *conn).await.unwrap().is_empty());
        }
        let plans = Sql::new(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = ",
        )
        .bind(read(1).text().to_string())
        .fetch_one(&mut *conn)
        .await
        .unwrap();
        assert_eq!(plans.int("custom_plans").unwrap(), 5);
        assert_eq!(plans.int("generic_plans").unwrap(), 3);
    }
}
