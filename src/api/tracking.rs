//! The open-tracking image (no key needed) and the provider resource.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::header;
use axum::response::IntoResponse;

use crate::api::extract::Auth;
use crate::app::AppState;
use crate::core::{provider_info, tracking};
use crate::error::ApiResult;
use crate::model::provider::ProviderInfo;

/// A transparent 1×1 GIF.
const PIXEL: &[u8] = &[
    0x47, 0x49, 0x46, 0x38, 0x39, 0x61, 0x01, 0x00, 0x01, 0x00, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00,
    0xff, 0xff, 0xff, 0x21, 0xf9, 0x04, 0x01, 0x00, 0x00, 0x00, 0x00, 0x2c, 0x00, 0x00, 0x00, 0x00,
    0x01, 0x00, 0x01, 0x00, 0x00, 0x02, 0x02, 0x44, 0x01, 0x00, 0x3b,
];

/// Open-tracking image
///
/// The 1×1 image placed in HTML mail. Loading it sets the message's `opened_at` (the first time),
/// increments `open_count`, records an `open` event and emits `email.opened`. Unknown tokens get
/// the same image, so the endpoint reveals nothing. No key needed.
#[utoipa::path(get, path = "/t/o/{token}", operation_id = "trackOpen", security(()),
    params(("token" = String, Path,
        description = "The message's 32-character open token, optionally followed by `.gif`.")),
    responses(
        (status = 200, description = "A transparent 1×1 GIF, never cached.",
            body = Vec<u8>, content_type = "image/gif"),
        (status = 500, description = "The instance failed; retry."),
    ))]
pub async fn open(State(s): State<AppState>, Path(token): Path<String>) -> impl IntoResponse {
    let token = token.trim_end_matches(".gif");
    if tracking::is_open_token(token)
        && let Err(e) = tracking::record(&s.db, token).await
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

/// The provider and its sending quota
///
/// Which provider transmits mail, its region and its current sending quota (`quota` is null when
/// the provider could not be asked). Needs no scope.
#[utoipa::path(get, path = "/provider", operation_id = "getProvider",
    security(("bearer" = [])),
    responses((status = 200, description = "The provider.", body = ProviderInfo)))]
pub async fn provider(
    State(s): State<AppState>,
    Auth(_key): Auth,
) -> ApiResult<Json<ProviderInfo>> {
    Ok(Json(
        provider_info::describe(s.provider.as_ref(), &s.quota).await?,
    ))
}
