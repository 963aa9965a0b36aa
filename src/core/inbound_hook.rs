//! Where SES receipt notifications join the inbound ingestion path.

use crate::core::error::CoreError;
use crate::core::inbound;
use crate::store::Db;

/// Stores mail that SES received for our domains, through the same path as
/// SMTP. Recipients that are not ours are skipped (SMTP would answer 550).
pub async fn received(db: &Db, raw: bytes::Bytes, recipients: &[String]) -> Result<(), CoreError> {
    let stored = inbound::ingest(db, raw, recipients, &[]).await?;
    if stored.is_empty() {
        tracing::info!(
            ?recipients,
            "SES delivered mail for no local mailbox; dropped"
        );
    }
    Ok(())
}
