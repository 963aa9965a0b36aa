//! The provider resource: which provider transmits mail, and its quota.

use crate::core::error::{CoreError, CoreResult};
use crate::core::quota::QuotaGuard;
use crate::model::provider::{ProviderInfo, ProviderName, ProviderObject};
use crate::provider::Provider;

/// What `GET /provider` answers; `quota` is `None` when the provider could
/// not say.
pub async fn describe(provider: &dyn Provider, quota: &QuotaGuard) -> CoreResult<ProviderInfo> {
    let name = ProviderName::parse(provider.name()).ok_or_else(|| {
        CoreError::Internal(anyhow::anyhow!(
            "provider {:?} has no wire name",
            provider.name()
        ))
    })?;
    Ok(ProviderInfo {
        object: ProviderObject,
        name,
        region: provider.region(),
        quota: quota.to_wire().await,
    })
}
