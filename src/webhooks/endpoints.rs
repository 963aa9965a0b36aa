//! Webhook endpoints: the rules for creating, reading, changing and deleting
//! them, with the key's reach applied in every query.
//!
//! A key that reaches the whole account sees every endpoint. A narrower key
//! sees only endpoints restricted to a mailbox it reaches; it cannot create an
//! endpoint for the whole account nor clear `mailbox_id` (403).

use crate::auth::{ApiKey, Reach};
use crate::clock;
use crate::core::error::{CoreError, Problems};
use crate::core::events::EVENT_TYPES;
use crate::core::mailboxes;
use crate::ids;
use crate::model::Timestamp;
use crate::model::webhooks::{self as model, AllEvents, EventName, EventSubscription};
use crate::sql;
use crate::store::{Db, RowExt, Sql};
use crate::webhooks::sender::Sender;
use crate::webhooks::signature::WebhookSecret;

/// Longest accepted description, in characters.
pub const MAX_DESCRIPTION: usize = 1000;
/// Failed attempts in a row that disable an endpoint.
pub const DISABLE_AFTER_FAILURES: i64 = 20;

#[derive(Debug, Clone, PartialEq)]
pub struct Webhook {
    pub id: String,
    pub url: String,
    pub description: String,
    pub events: Vec<String>,
    pub enabled: bool,
    pub mailbox_id: Option<String>,
    pub secret: String,
    pub last_status: Option<i64>,
    pub last_delivered_at: Option<i64>,
    pub last_error_at: Option<i64>,
    pub last_error: Option<String>,
    pub consecutive_failures: i64,
    pub created_at: i64,
}

const COLUMNS: &str = "w.id, w.url, w.description, w.events, w.enabled, w.mailbox_id, w.secret, \
     w.last_status, w.last_delivered_at, w.last_error_at, w.last_error, w.consecutive_failures, w.created_at";

impl Webhook {
    fn from_row(r: &sqlx::any::AnyRow) -> Result<Webhook, sqlx::Error> {
        Ok(Webhook {
            id: r.text("id")?,
            url: r.text("url")?,
            description: r.text("description")?,
            events: serde_json::from_str(&r.text("events")?).unwrap_or_default(),
            enabled: r.flag("enabled")?,
            mailbox_id: r.opt_text("mailbox_id")?,
            secret: r.text("secret")?,
            last_status: r.opt_int("last_status")?,
            last_delivered_at: r.opt_int("last_delivered_at")?,
            last_error_at: r.opt_int("last_error_at")?,
            last_error: r.opt_text("last_error")?,
            consecutive_failures: r.int("consecutive_failures")?,
            created_at: r.int("created_at")?,
        })
    }

    /// The spec's Webhook object, never with the secret.
    pub fn to_wire(&self) -> model::Webhook {
        model::Webhook {
            object: model::WebhookObject,
            id: crate::ids::Id::from_stored(self.id.clone()),
            url: self.url.clone(),
            description: self.description.clone(),
            // Stored lists were validated on write; a name this build no
            // longer knows cannot be answered as an event name.
            events: self
                .events
                .iter()
                .filter_map(|e| match e.as_str() {
                    "*" => Some(EventSubscription::All(AllEvents)),
                    name => EventName::parse(name).map(EventSubscription::Event),
                })
                .collect(),
            enabled: self.enabled,
            mailbox_id: self.mailbox_id.clone().map(crate::ids::Id::from_stored),
            last_status: self.last_status,
            last_delivered_at: Timestamp::opt(self.last_delivered_at),
            last_error_at: Timestamp::opt(self.last_error_at),
            last_error: self.last_error.clone(),
            consecutive_failures: self.consecutive_failures,
            created_at: Timestamp(self.created_at),
            secret: None,
        }
    }

    /// The Webhook object with its secret: on creation and on rotation only.
    pub fn to_wire_with_secret(&self, secret: String) -> model::Webhook {
        model::Webhook {
            secret: Some(secret),
            ..self.to_wire()
        }
    }

    /// Whether an event of `event_type` for `mailbox_id` goes to this endpoint.
    pub fn matches(&self, event_type: &str, mailbox_id: Option<&str>) -> bool {
        matches_event(
            &self.events,
            self.mailbox_id.as_deref(),
            event_type,
            mailbox_id,
        )
    }
}

/// The fan-out rule: the endpoint's events list names the type or `*`, and
/// its mailbox (if any) is the event's mailbox.
pub fn matches_event(
    events: &[String],
    endpoint_mailbox: Option<&str>,
    event_type: &str,
    event_mailbox: Option<&str>,
) -> bool {
    let type_ok = events.iter().any(|e| e == "*" || e == event_type);
    let mailbox_ok = match endpoint_mailbox {
        None => true,
        Some(m) => event_mailbox == Some(m),
    };
    type_ok && mailbox_ok
}

/// `SELECT … FROM webhooks w … WHERE <reach>`: the endpoints `reach` may see.
pub fn visible(reach: &Reach, columns: &str) -> Sql {
    let mut q = Sql::new(&format!(
        "SELECT {columns} FROM webhooks w LEFT JOIN mailboxes m ON m.id = w.mailbox_id WHERE 1 = 1"
    ));
    if !reach.is_account() {
        q.push(" AND w.mailbox_id IS NOT NULL");
        reach.filter_address_columns(&mut q, "m.address", "m.domain");
    }
    q
}

pub async fn list(db: &Db, reach: &Reach) -> Result<Vec<Webhook>, sqlx::Error> {
    let mut q = visible(reach, COLUMNS);
    q.push(" ORDER BY w.created_at, w.id");
    let rows = q.fetch_all(db.reader()).await?;
    rows.iter().map(Webhook::from_row).collect()
}

pub async fn get(db: &Db, reach: &Reach, id: &str) -> Result<Option<Webhook>, sqlx::Error> {
    let mut q = visible(reach, COLUMNS);
    q.push(" AND w.id = ").bind(id);
    q.fetch_optional(db.reader())
        .await?
        .map(|r| Webhook::from_row(&r))
        .transpose()
}

/// Validates an `events` list: known names or `*`, at least one. A list
/// with `*` is stored as `["*"]`; duplicates are dropped.
pub fn validate_events(problems: &mut Problems, events: &[String]) -> Vec<String> {
    if events.is_empty() {
        problems.add(
            "events",
            "must name at least one event, or [\"*\"] for all events",
        );
        return Vec::new();
    }
    let unknown: Vec<&str> = events
        .iter()
        .map(String::as_str)
        .filter(|e| *e != "*" && EventName::parse(e).is_none())
        .collect();
    if !unknown.is_empty() {
        problems.add(
            "events",
            format!(
                "unknown event name(s) {}; known: *, {}",
                unknown
                    .iter()
                    .map(|e| format!("{e:?}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                EVENT_TYPES.join(", ")
            ),
        );
        return Vec::new();
    }
    if events.iter().any(|e| e == "*") {
        return vec!["*".to_string()];
    }
    let mut out: Vec<String> = Vec::new();
    for e in events {
        if !out.contains(e) {
            out.push(e.clone());
        }
    }
    out
}

pub fn validate_description(problems: &mut Problems, d: &str) -> String {
    if d.chars().count() > MAX_DESCRIPTION {
        problems.add(
            "description",
            format!("must be at most {MAX_DESCRIPTION} characters"),
        );
    }
    d.to_string()
}

/// Checks a URL as given (syntax and policy) and what its host resolves to.
/// Records the reason on `url` when refused.
pub async fn validate_url(problems: &mut Problems, sender: &Sender, url: &str) -> String {
    let url = url.trim();
    if url.is_empty() {
        problems.add("url", "is required");
        return String::new();
    }
    if let Err(reason) = sender.check(url).await {
        problems.add("url", reason);
    }
    url.to_string()
}

/// A mailbox the key reaches, by id or address; a problem on `mailbox_id`
/// otherwise (outside the reach looks the same as absent).
pub async fn validate_mailbox(
    problems: &mut Problems,
    db: &Db,
    reach: &Reach,
    id: &str,
) -> Result<Option<String>, sqlx::Error> {
    // No id or address holds NUL (and PostgreSQL cannot compare text that does).
    let found = match id.contains('\0') {
        true => None,
        false => mailboxes::get(db, reach, id).await?,
    };
    match found {
        Some(m) => Ok(Some(m.id)),
        None => {
            problems.add("mailbox_id", format!("no mailbox {id:?}"));
            Ok(None)
        }
    }
}

/// What creation takes once parsed.
pub struct NewWebhook {
    pub url: Option<String>,
    pub events: Option<Vec<String>>,
    pub mailbox_id: Option<String>,
    pub description: Option<String>,
    pub enabled: Option<bool>,
}

/// Creates an endpoint; returns it with its secret (shown only now).
pub async fn create(
    db: &Db,
    sender: &Sender,
    key: &ApiKey,
    input: NewWebhook,
) -> Result<(Webhook, String), CoreError> {
    if input.mailbox_id.is_none() {
        key.require_account_reach("a webhook for every mailbox (no mailbox_id)")?;
    }
    let mut problems = Problems::new();
    let url = match &input.url {
        Some(u) => validate_url(&mut problems, sender, u).await,
        None => {
            problems.add("url", "is required");
            String::new()
        }
    };
    let events = match &input.events {
        Some(list) => validate_events(&mut problems, list),
        None => vec!["*".to_string()],
    };
    let description =
        validate_description(&mut problems, input.description.as_deref().unwrap_or(""));
    let mailbox_id = match &input.mailbox_id {
        Some(id) => validate_mailbox(&mut problems, db, &key.reach, id).await?,
        None => None,
    };
    problems.finish()?;
    let secret = WebhookSecret::generate().as_string();
    let w = Webhook {
        id: ids::new_id("whk"),
        url,
        description,
        events,
        enabled: input.enabled.unwrap_or(true),
        mailbox_id,
        secret: secret.clone(),
        last_status: None,
        last_delivered_at: None,
        last_error_at: None,
        last_error: None,
        consecutive_failures: 0,
        created_at: clock::now_micros(),
    };
    sql!(
        "INSERT INTO webhooks (id, url, description, events, enabled, mailbox_id, secret, consecutive_failures, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, 0, $8)",
        &w.id,
        &w.url,
        &w.description,
        serde_json::to_string(&w.events).unwrap_or_else(|_| "[\"*\"]".into()),
        w.enabled,
        w.mailbox_id.clone(),
        &w.secret,
        w.created_at
    )
    .execute(db.writer())
    .await?;
    Ok((w, secret))
}

/// What a PATCH may change; `None` leaves a field alone.
#[derive(Default)]
pub struct WebhookChanges {
    pub url: Option<String>,
    pub events: Option<Vec<String>>,
    /// `Some(None)` clears the restriction.
    pub mailbox_id: Option<Option<String>>,
    pub description: Option<String>,
    pub enabled: Option<bool>,
    pub rotate_secret: bool,
}

/// Applies changes; returns the endpoint and, when rotated, the new secret.
pub async fn update(
    db: &Db,
    sender: &Sender,
    key: &ApiKey,
    id: &str,
    changes: WebhookChanges,
) -> Result<(Webhook, Option<String>), CoreError> {
    let current = get(db, &key.reach, id)
        .await?
        .ok_or(CoreError::NotFound("webhook"))?;
    if matches!(changes.mailbox_id, Some(None)) {
        key.require_account_reach("a webhook for every mailbox (clearing mailbox_id)")?;
    }
    let mut problems = Problems::new();
    let url = match &changes.url {
        Some(u) => Some(validate_url(&mut problems, sender, u).await),
        None => None,
    };
    let events = changes
        .events
        .as_ref()
        .map(|list| validate_events(&mut problems, list));
    let description = changes
        .description
        .as_deref()
        .map(|d| validate_description(&mut problems, d));
    let mailbox_id = match &changes.mailbox_id {
        Some(Some(m)) => Some(validate_mailbox(&mut problems, db, &key.reach, m).await?),
        Some(None) => Some(None),
        None => None,
    };
    problems.finish()?;

    let mut q = Sql::new("UPDATE webhooks SET id = id");
    if let Some(u) = &url {
        q.push(", url = ").bind(u.clone());
    }
    if let Some(e) = &events {
        q.push(", events = ")
            .bind(serde_json::to_string(e).unwrap_or_else(|_| "[\"*\"]".into()));
    }
    if let Some(d) = &description {
        q.push(", description = ").bind(d.clone());
    }
    if let Some(m) = &mailbox_id {
        q.push(", mailbox_id = ").bind(m.clone());
    }
    match changes.enabled {
        Some(true) => {
            q.push(", enabled = 1, consecutive_failures = 0");
        }
        Some(false) => {
            q.push(", enabled = 0");
        }
        None => {}
    }
    let secret = if changes.rotate_secret {
        let s = WebhookSecret::generate().as_string();
        q.push(", secret = ").bind(s.clone());
        Some(s)
    } else {
        None
    };
    q.push(" WHERE id = ").bind(&current.id);
    q.execute(db.writer()).await?;
    let updated = get(db, &key.reach, &current.id)
        .await?
        .ok_or(CoreError::NotFound("webhook"))?;
    Ok((updated, secret))
}

/// Disables an endpoint, keeping it and its history.
pub async fn disable(db: &Db, key: &ApiKey, id: &str) -> Result<Webhook, CoreError> {
    let current = get(db, &key.reach, id)
        .await?
        .ok_or(CoreError::NotFound("webhook"))?;
    sql!("UPDATE webhooks SET enabled = 0 WHERE id = $1", &current.id)
        .execute(db.writer())
        .await?;
    get(db, &key.reach, &current.id)
        .await?
        .ok_or(CoreError::NotFound("webhook"))
}

/// Deletes an endpoint with its pending deliveries and its delivery history,
/// in one transaction (the endpoint row first, the lock order the delivery
/// recorder also uses).
pub async fn delete(db: &Db, key: &ApiKey, id: &str) -> Result<Webhook, CoreError> {
    let current = get(db, &key.reach, id)
        .await?
        .ok_or(CoreError::NotFound("webhook"))?;
    let mut tx = db.begin().await?;
    sql!("DELETE FROM webhooks WHERE id = $1", &current.id)
        .execute_tx(&mut tx)
        .await?;
    sql!(
        "DELETE FROM webhook_tasks WHERE webhook_id = $1",
        &current.id
    )
    .execute_tx(&mut tx)
    .await?;
    sql!(
        "DELETE FROM webhook_deliveries WHERE webhook_id = $1",
        &current.id
    )
    .execute_tx(&mut tx)
    .await?;
    tx.commit().await?;
    Ok(current)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_validated_and_normalised() {
        let mut p = Problems::new();
        assert_eq!(
            validate_events(&mut p, &["email.sent".into(), "email.sent".into()]),
            vec!["email.sent".to_string()]
        );
        assert_eq!(
            validate_events(&mut p, &["email.sent".into(), "*".into()]),
            vec!["*".to_string()]
        );
        assert!(p.is_empty());
        validate_events(&mut p, &["email.exploded".into()]);
        assert!(!p.is_empty());
        let mut p = Problems::new();
        validate_events(&mut p, &[]);
        assert!(!p.is_empty());
    }

    #[test]
    fn fan_out_rule() {
        let all = vec!["*".to_string()];
        let sent = vec!["email.sent".to_string()];
        assert!(matches_event(&all, None, "domain.verified", None));
        assert!(matches_event(&all, None, "email.sent", Some("mbx_1")));
        assert!(matches_event(&sent, None, "email.sent", Some("mbx_1")));
        assert!(!matches_event(
            &sent,
            None,
            "email.delivered",
            Some("mbx_1")
        ));
        assert!(matches_event(
            &all,
            Some("mbx_1"),
            "email.sent",
            Some("mbx_1")
        ));
        assert!(!matches_event(
            &all,
            Some("mbx_1"),
            "email.sent",
            Some("mbx_2")
        ));
        assert!(!matches_event(&all, Some("mbx_1"), "domain.verified", None));
    }
}
