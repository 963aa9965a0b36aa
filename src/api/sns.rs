//! `POST /sns/ses`: Amazon SNS deliveries of SES events and inbound mail.
//! No API key: the SNS signature, the certificate host and the topic
//! allow-list (`PIGEONHOLE_SNS_TOPICS`) decide what is accepted.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;

use crate::api::extract::RawBody;
use crate::app::AppState;
use crate::config::Environment;
use crate::core::error::UpstreamKind;
use crate::core::waiting_events;
use crate::error::{ApiError, ApiResult};
use crate::model::ops::{SnsMessage, SnsResult};
use crate::provider::sns::{self, SesNotification, SnsKind};

/// Amazon SNS deliveries from SES
///
/// Receives SES sending events and SES inbound mail through Amazon SNS. No API key: the SNS
/// signature, the signing certificate's host and the topic allow-list (`PIGEONHOLE_SNS_TOPICS`)
/// decide what is accepted. Subscription confirmations are confirmed by calling the `SubscribeURL`.
#[utoipa::path(post, path = "/sns/ses", operation_id = "receiveSns", security(()),
    request_body(content(
        (SnsMessage = "text/plain"),
        (SnsMessage = "application/json"),
    )),
    responses(
        (status = 200, description = "Accepted: a notification was applied or stored to wait for its message, or a subscription confirmed.",
            body = SnsResult),
        (status = 403, description = "Refused."),
        (status = 413, description = "Too large."),
        (status = 422, description = "Unreadable."),
        (status = 500, description = "Failed."),
        (status = 502, description = "Upstream failed."),
        (status = 503, description = "Upstream unavailable."),
    ))]
pub async fn receive(
    State(s): State<AppState>,
    RawBody(body): RawBody,
) -> ApiResult<(StatusCode, Json<SnsResult>)> {
    let msg = match s.sns.verify(&body).await {
        Ok(m) => m,
        Err(e) if e.is_transient() => {
            tracing::warn!(error = %e, "SNS certificate unavailable");
            return Err(ApiError::upstream(
                UpstreamKind::Unavailable,
                "the SNS signing certificate could not be fetched; SNS will retry",
            ));
        }
        Err(e) => {
            tracing::warn!(error = %e, "refused an SNS message");
            return Err(ApiError::forbidden(format!("SNS message refused: {e}")));
        }
    };
    match msg.kind {
        SnsKind::SubscriptionConfirmation => {
            let url = msg.subscribe_url.clone().unwrap_or_default();
            // Outside production a local stand-in may confirm (tests); in
            // production only a real SNS host is ever called.
            let local_ok = s.config.env == Environment::Development
                && url::Url::parse(&url).ok().is_some_and(|u| {
                    matches!(u.host_str(), Some("127.0.0.1" | "localhost" | "[::1]"))
                });
            if !(sns::is_sns_url(&url) || local_ok) {
                return Err(ApiError::forbidden("SubscribeURL is not an SNS address"));
            }
            confirm(&url).await?;
            Ok((
                StatusCode::OK,
                Json(SnsResult {
                    confirmed: Some(true),
                    topic_arn: Some(msg.topic_arn),
                    ..SnsResult::default()
                }),
            ))
        }
        SnsKind::UnsubscribeConfirmation => Ok((
            StatusCode::OK,
            Json(SnsResult {
                ok: Some(true),
                ..SnsResult::default()
            }),
        )),
        SnsKind::Notification => {
            match sns::parse_ses_notification(&msg.message) {
                Ok(SesNotification::Event(mut ev)) => {
                    ev.delivery_id = Some(msg.message_id.clone());
                    // Applied, or stored to wait for its message (the send
                    // may not be recorded yet), before SNS hears 200; a
                    // database failure answers 500 and SNS retries.
                    waiting_events::ingest_durably(&s.db, ev).await?;
                }
                Ok(SesNotification::Received {
                    recipients,
                    raw_mime,
                }) => {
                    crate::core::inbound_hook::received(&s.db, raw_mime.into(), &recipients)
                        .await?;
                }
                Ok(SesNotification::Ignored(why)) => {
                    tracing::debug!(why, "SNS notification ignored");
                }
                Err(e) => {
                    return Err(ApiError::invalid(
                        "Message",
                        format!("not an SES notification: {e}"),
                    ));
                }
            }
            Ok((
                StatusCode::OK,
                Json(SnsResult {
                    ok: Some(true),
                    ..SnsResult::default()
                }),
            ))
        }
    }
}

async fn confirm(url: &str) -> Result<(), ApiError> {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(std::time::Duration::from_secs(10))
        .build()
        .map_err(|e| ApiError::Internal(e.into()))?;
    let resp = client.get(url).send().await.map_err(|e| {
        ApiError::upstream(
            UpstreamKind::Unreachable,
            format!("confirming the SNS subscription failed: {e}"),
        )
    })?;
    if !resp.status().is_success() {
        return Err(ApiError::upstream(
            UpstreamKind::Unreachable,
            format!(
                "confirming the SNS subscription failed: HTTP {}",
                resp.status()
            ),
        ));
    }
    Ok(())
}
