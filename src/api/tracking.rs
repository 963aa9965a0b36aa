//! The open-tracking image (no key needed) and the provider resource.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::header;
use axum::response::IntoResponse;
use serde_json::{Value, json};

use crate::api::extract::Auth;
use crate::app::AppState;
use crate::clock;
use crate::core::events;
use crate::core::messages::{COLUMNS, Message};
use crate::core::provider_events::record_open;
use crate::core::sending;
use crate::error::ApiResult;
use crate::ids;
use crate::sql;
use crate::store::Sql;

/// A transparent 1×1 GIF.
const PIXEL: &[u8] = &[
    0x47, 0x49, 0x46, 0x38, 0x39, 0x61, 0x01, 0x00, 0x01, 0x00, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00,
    0xff, 0xff, 0xff, 0x21, 0xf9, 0x04, 0x01, 0x00, 0x00, 0x00, 0x00, 0x2c, 0x00, 0x00, 0x00, 0x00,
    0x01, 0x00, 0x01, 0x00, 0x00, 0x02, 0x02, 0x44, 0x01, 0x00, 0x3b,
];

/// Records an open, then answers the image. Unknown tokens get the same
/// image, so the endpoint reveals nothing.
pub async fn open(State(s): State<AppState>, Path(token): Path<String>) -> impl IntoResponse {
    let token = token.trim_end_matches(".gif");
    // 32 characters: tokens made before they began with the time.
    if (token.len() == sending::OPEN_TOKEN_LEN || token.len() == 32)
        && token.bytes().all(|b| b.is_ascii_alphanumeric())
        && let Err(e) = record(&s, token).await
    {
        tracing::warn!(error = %e, "recording an open failed");
    }
    (
        [
            (header::CONTENT_TYPE, "image/gif"),
            (
                header::CACHE_CONTROL,
                "no-store, no-cache, must-revalidate, private",
            ),
        ],
        PIXEL,
    )
}

async fn record(s: &AppState, token: &str) -> Result<(), sqlx::Error> {
    let mut tx = s.db.begin().await?;
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
        "email.opened",
        Some(&m.mailbox_id),
        json!({"email": m.summary_json(), "occurred_at": clock::iso(now)}),
    )
    .await?;
    tx.commit().await
}

/// The provider and its sending quota; any valid key may read it.
pub async fn provider(State(s): State<AppState>, Auth(_key): Auth) -> ApiResult<Json<Value>> {
    let quota = s.quota.current().await.map(|(q, since)| {
        json!({
            "max_24_hour_send": q.max_24_hour_send,
            "max_send_rate": q.max_send_rate,
            "sent_last_24_hours": q.sent_last_24_hours + since as f64,
            "sandbox": q.sandbox,
            "sending_enabled": q.sending_enabled,
        })
    });
    Ok(Json(json!({
        "object": "provider",
        "name": s.provider.name(),
        "region": s.provider.region(),
        "quota": quota,
    })))
}
