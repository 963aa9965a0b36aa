//! The provider's sending quota, checked before a send so that a send the
//! quota cannot admit fails fast with a clear 429.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::core::error::CoreError;
use crate::model::provider::ProviderQuota;
use crate::provider::{Provider, Quota};

/// How long a quota reading is trusted; sends in between are counted locally.
/// A failed reading is remembered as long, so that a provider that cannot
/// say (an SES key without `ses:GetAccount`, say) costs one call and one
/// warning per period, not one per send.
const REFRESH: Duration = Duration::from_secs(30);

/// When the quota was read, what it said (None: the provider could not say),
/// and the recipients sent since.
type Reading = (Instant, Option<Quota>, u64);

/// The quota of one provider, read now and then.
pub struct QuotaGuard {
    provider: Arc<dyn Provider>,
    cached: Mutex<Option<Reading>>,
}

impl QuotaGuard {
    pub fn new(provider: Arc<dyn Provider>) -> QuotaGuard {
        QuotaGuard {
            provider,
            cached: Mutex::new(None),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Reading>> {
        match self.cached.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// The current quota, from cache or the provider. `None` when the
    /// provider cannot say (then sends are not held back).
    pub async fn current(&self) -> Option<(Quota, u64)> {
        if let Some((at, q, since)) = self.lock().as_ref()
            && at.elapsed() < REFRESH
        {
            return q.clone().map(|q| (q, *since));
        }
        let reading = match self.provider.quota().await {
            Ok(q) => Some(q),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the provider's sending quota; sends are not held back");
                None
            }
        };
        *self.lock() = Some((Instant::now(), reading.clone(), 0));
        reading.map(|q| (q, 0))
    }

    /// The quota as `GET /provider` shows it: the last reading plus the
    /// recipients sent since it was taken.
    pub async fn to_wire(&self) -> Option<ProviderQuota> {
        self.current().await.map(|(q, since)| ProviderQuota {
            max_24_hour_send: q.max_24_hour_send,
            max_send_rate: q.max_send_rate,
            sent_last_24_hours: q.sent_last_24_hours + since as f64,
            sandbox: q.sandbox,
            sending_enabled: q.sending_enabled,
        })
    }

    pub async fn admit(&self, recipients: usize) -> Result<(), CoreError> {
        let Some((q, since)) = self.current().await else {
            return Ok(());
        };
        if !q.sending_enabled {
            return Err(CoreError::RateLimited {
                message: "sending is paused for this provider account".into(),
                retry_after: 3600,
            });
        }
        let used = q.sent_last_24_hours + since as f64;
        if q.max_24_hour_send >= 0.0 && used + recipients as f64 > q.max_24_hour_send {
            return Err(CoreError::RateLimited {
                message: format!(
                    "the provider's 24-hour sending quota is used up ({used} of {} messages sent in the last 24 hours); capacity returns as sends age past 24 hours",
                    q.max_24_hour_send
                ),
                retry_after: 3600,
            });
        }
        Ok(())
    }

    /// Counts a successful send until the next refresh.
    pub fn record(&self, recipients: usize) {
        if let Some((_, _, since)) = self.lock().as_mut() {
            *since += recipients as u64;
        }
    }
}
