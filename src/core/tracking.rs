//! Open tracking: the image's token finds the message, and the open is
//! recorded as a message event and an `email.opened` webhook event.

use crate::clock;
use crate::core::events;
use crate::core::messages::{COLUMNS, Message};
use crate::core::provider_events::record_open;
use crate::core::sending;
use crate::ids;
use crate::model::Timestamp;
use crate::model::events::EmailEventData;
use crate::model::webhooks::EventName;
use crate::sql;
use crate::store::{Db, Sql};

/// Whether `token` has the shape of an open token (32 characters: tokens
/// made before they began with the time).
pub fn is_open_token(token: &str) -> bool {
    (token.len() == sending::OPEN_TOKEN_LEN || token.len() == 32)
        && token.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// Records an open of the message carrying `token`; an unknown token is
/// nothing to record.
pub async fn record(db: &Db, token: &str) -> Result<(), sqlx::Error> {
    let mut tx = db.begin().await?;
    let row = Sql::new(&format!(
        "SELECT {COLUMNS} FROM messages m WHERE m.open_token = "
    ))
    .bind(token)
    .fetch_optional_tx(&mut tx)
    .await?;
    let Some(row) = row else { return Ok(()) };
    let mut m = Message::from_row(&row)?;
    let now = clock::now_micros();
    record_open(&mut tx, &mut m, now).await?;
    sql!(
        "INSERT INTO message_events (id, message_id, type, recipient, detail, occurred_at, created_at) \
         VALUES ($1, $2, 'open', NULL, NULL, $3, $3)",
        ids::new_id("mev"),
        &m.id,
        now
    )
    .execute_tx(&mut tx)
    .await?;
    events::emit(
        &mut tx,
        EventName::EmailOpened,
        Some(&m.mailbox_id),
        EmailEventData {
            email: m.summary(),
            occurred_at: Timestamp(now),
            sent_at: None,
            recipients: None,
            detail: None,
        },
    )
    .await?;
    tx.commit().await
}
