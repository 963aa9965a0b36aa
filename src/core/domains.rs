//! Sending domains: identities at the provider, the DNS records they need, and
//! subdomains that inherit a verified parent.

use crate::auth::{ApiKey, Reach};
use crate::clock;
use crate::core::error::CoreError;
use crate::core::events;
use crate::core::validate;
use crate::dns::Dns;
use crate::ids;
use crate::model::Timestamp;
use crate::model::domains::{self as model, DnsRecordPurpose, DnsRecordType, DomainStatus};
use crate::model::webhooks::EventName;
use crate::provider::{IdentityInfo, Provider, ProviderError};
use crate::sql;
use crate::store::{Db, RowExt, Sql, is_unique_violation};

#[derive(Debug, Clone, PartialEq)]
pub struct Domain {
    pub id: String,
    pub name: String,
    pub region: String,
    pub status: DomainStatus,
    pub sending_enabled: bool,
    pub dkim_status: String,
    pub dkim_origin: String,
    pub dkim_tokens: Vec<String>,
    pub mail_from_domain: String,
    pub mail_from_status: String,
    pub spf_verified: bool,
    pub dmarc_verified: bool,
    pub inherited_from: Option<String>,
    pub auto_create_mailboxes: bool,
    pub imported: bool,
    pub last_checked_at: i64,
    pub created_at: i64,
}

const COLUMNS: &str = "id, name, region, status, sending_enabled, dkim_status, dkim_origin, \
    dkim_tokens, mail_from_domain, mail_from_status, spf_verified, dmarc_verified, \
    inherited_from, auto_create_mailboxes, imported, last_checked_at, created_at";

impl Domain {
    fn from_row(row: &impl RowExt) -> Result<Domain, sqlx::Error> {
        let status = row.text("status")?;
        Ok(Domain {
            id: row.text("id")?,
            name: row.text("name")?,
            region: row.text("region")?,
            status: DomainStatus::parse(&status).ok_or_else(|| {
                sqlx::Error::Decode(format!("unknown domain status {status:?}").into())
            })?,
            sending_enabled: row.flag("sending_enabled")?,
            dkim_status: row.text("dkim_status")?,
            dkim_origin: row.text("dkim_origin")?,
            dkim_tokens: serde_json::from_str(&row.text("dkim_tokens")?).unwrap_or_default(),
            mail_from_domain: row.text("mail_from_domain")?,
            mail_from_status: row.text("mail_from_status")?,
            spf_verified: row.flag("spf_verified")?,
            dmarc_verified: row.flag("dmarc_verified")?,
            inherited_from: row.opt_text("inherited_from")?,
            auto_create_mailboxes: row.flag("auto_create_mailboxes")?,
            imported: row.flag("imported")?,
            last_checked_at: row.int("last_checked_at")?,
            created_at: row.int("created_at")?,
        })
    }

    pub fn is_verified(&self) -> bool {
        self.status == DomainStatus::Verified && self.sending_enabled
    }

    /// The DNS records to publish. A subdomain covered by its parent needs none.
    pub fn records(&self) -> Vec<model::DnsRecord> {
        if self.inherited_from.is_some() {
            return Vec::new();
        }
        let record = |kind, name: String, value: String, purpose, required| model::DnsRecord {
            kind,
            name,
            value,
            purpose,
            required,
        };
        let mut out: Vec<model::DnsRecord> = self
            .dkim_tokens
            .iter()
            .map(|t| {
                record(
                    DnsRecordType::Cname,
                    format!("{t}._domainkey.{}", self.name),
                    format!("{t}.dkim.amazonses.com"),
                    DnsRecordPurpose::Dkim,
                    true,
                )
            })
            .collect();
        out.push(record(
            DnsRecordType::Mx,
            self.mail_from_domain.clone(),
            format!("10 feedback-smtp.{}.amazonses.com", self.region),
            DnsRecordPurpose::MailFrom,
            true,
        ));
        out.push(record(
            DnsRecordType::Txt,
            self.mail_from_domain.clone(),
            "v=spf1 include:amazonses.com ~all".into(),
            DnsRecordPurpose::Spf,
            true,
        ));
        out.push(record(
            DnsRecordType::Txt,
            format!("_dmarc.{}", self.name),
            "v=DMARC1; p=none;".into(),
            DnsRecordPurpose::Dmarc,
            false,
        ));
        out
    }

    pub fn to_wire(&self) -> model::Domain {
        model::Domain {
            object: model::DomainObject,
            id: crate::ids::Id::from_stored(self.id.clone()),
            name: self.name.clone(),
            region: self.region.clone(),
            status: self.status,
            sending_enabled: self.sending_enabled,
            dkim_status: self.dkim_status.clone(),
            dkim_origin: self.dkim_origin.clone(),
            mail_from_domain: self.mail_from_domain.clone(),
            mail_from_status: self.mail_from_status.clone(),
            spf_verified: self.spf_verified,
            dmarc_verified: self.dmarc_verified,
            inherited_from: self.inherited_from.clone(),
            auto_create_mailboxes: self.auto_create_mailboxes,
            imported: self.imported,
            last_checked_at: Timestamp(self.last_checked_at),
            created_at: Timestamp(self.created_at),
            records: self.records(),
        }
    }

    /// What `DELETE` answers for this domain.
    pub fn deleted(&self, deleted_in_provider: bool) -> model::DomainDeleted {
        model::DomainDeleted {
            object: model::DomainObject,
            id: crate::ids::Id::from_stored(self.id.clone()),
            name: self.name.clone(),
            deleted: true,
            deleted_in_provider,
        }
    }
}

pub async fn list(db: &Db, reach: &Reach) -> Result<Vec<Domain>, sqlx::Error> {
    let mut q = Sql::new(&format!("SELECT {COLUMNS} FROM domains WHERE 1 = 1"));
    reach.filter_domain_column(&mut q, "name");
    q.push(" ORDER BY created_at, id");
    let rows = q.fetch_all(db.reader()).await?;
    rows.iter().map(Domain::from_row).collect()
}

/// By id or by name, within the reach: outside it is the same as missing.
pub async fn get(db: &Db, reach: &Reach, id_or_name: &str) -> Result<Option<Domain>, sqlx::Error> {
    let mut q = Sql::new(&format!("SELECT {COLUMNS} FROM domains WHERE (id = "));
    q.bind(id_or_name)
        .push(" OR name = ")
        .bind(id_or_name.to_ascii_lowercase())
        .push(")");
    reach.filter_domain_column(&mut q, "name");
    q.fetch_optional(db.reader())
        .await?
        .map(|r| Domain::from_row(&r))
        .transpose()
}

async fn by_name(db: &Db, name: &str) -> Result<Option<Domain>, sqlx::Error> {
    Sql::new(&format!("SELECT {COLUMNS} FROM domains WHERE name = "))
        .bind(name)
        .fetch_optional(db.reader())
        .await?
        .map(|r| Domain::from_row(&r))
        .transpose()
}

/// Every proper ancestor of `name` that can still be a domain: `a.b.c.com` →
/// `b.c.com`, `c.com`.
fn ancestors(name: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = name;
    while let Some((_, parent)) = rest.split_once('.') {
        if parent.contains('.') {
            out.push(parent);
        }
        rest = parent;
    }
    out
}

/// The domain record that lets mail go out from `domain_name`: its own, if
/// verified, else the nearest verified ancestor's.
pub async fn sending_domain_for(db: &Db, domain_name: &str) -> Result<Option<Domain>, sqlx::Error> {
    let rows = db.lookup_all(&sending_domain_read(domain_name)).await?;
    nearest_verified(domain_name, &rows)
}

/// The read behind [`sending_domain_for`]: the domain and its ancestors.
pub fn sending_domain_read(domain_name: &str) -> Sql {
    let mut candidates = vec![domain_name];
    candidates.extend(ancestors(domain_name));
    let mut q = Sql::new(&format!("SELECT {COLUMNS} FROM domains WHERE name IN "));
    q.bind_list(&candidates);
    q
}

/// Of the rows of [`sending_domain_read`], the verified domain nearest to
/// `domain_name`: the exact name, then each ancestor in turn.
pub fn nearest_verified(
    domain_name: &str,
    rows: &[impl RowExt],
) -> Result<Option<Domain>, sqlx::Error> {
    let found: Vec<Domain> = rows
        .iter()
        .map(Domain::from_row)
        .collect::<Result<_, _>>()?;
    Ok(std::iter::once(domain_name)
        .chain(ancestors(domain_name))
        .filter_map(|c| found.iter().find(|d| d.name == c))
        .find(|d| d.is_verified())
        .cloned())
}

fn provider_error(e: ProviderError) -> CoreError {
    match e {
        ProviderError::Rejected(m) => {
            CoreError::invalid("name", format!("the provider refused: {m}"))
        }
        ProviderError::NotFound(m) => {
            CoreError::invalid("name", format!("the provider has no such identity: {m}"))
        }
        ProviderError::Throttled {
            message,
            retry_after_secs,
        } => CoreError::RateLimited {
            message: format!("the provider is throttling requests: {message}"),
            retry_after: retry_after_secs.unwrap_or(1),
        },
        ProviderError::Unavailable(m) => CoreError::Upstream {
            kind: crate::core::error::UpstreamKind::Unreachable,
            message: format!("the provider could not be reached: {m}"),
        },
    }
}

fn default_mail_from(name: &str) -> String {
    format!("mail.{name}")
}

/// Creates a domain: an identity at the provider, or, under a verified parent,
/// an inherited record that needs no identity of its own.
pub async fn create(
    db: &Db,
    provider: &dyn Provider,
    key: &ApiKey,
    raw_name: &str,
    auto_create_mailboxes: bool,
) -> Result<Domain, CoreError> {
    key.require_account_reach("adding a domain")?;
    let name = validate::domain_name(raw_name).map_err(|m| CoreError::invalid("name", m))?;
    if by_name(db, &name).await?.is_some() {
        return Err(CoreError::conflict(format!("domain {name} already exists")));
    }
    let now = clock::now_micros();
    let mut parent = None;
    for anc in ancestors(&name) {
        if let Some(d) = by_name(db, anc).await?
            && d.is_verified()
            && d.inherited_from.is_none()
        {
            parent = Some(d);
            break;
        }
    }
    let domain = match parent {
        Some(p) => Domain {
            id: ids::new_id("dom"),
            name: name.clone(),
            region: p.region.clone(),
            status: p.status,
            sending_enabled: p.sending_enabled,
            dkim_status: p.dkim_status.clone(),
            dkim_origin: p.dkim_origin.clone(),
            dkim_tokens: Vec::new(),
            mail_from_domain: p.mail_from_domain.clone(),
            mail_from_status: p.mail_from_status.clone(),
            spf_verified: p.spf_verified,
            dmarc_verified: p.dmarc_verified,
            inherited_from: Some(p.name.clone()),
            auto_create_mailboxes,
            imported: false,
            last_checked_at: now,
            created_at: now,
        },
        None => {
            let (info, imported) = match provider.create_identity(&name).await {
                Ok(info) => (info, false),
                // The identity already exists at the provider: adopt it.
                Err(ProviderError::Rejected(m))
                    if m.to_ascii_lowercase().contains("already exist") =>
                {
                    (
                        provider.get_identity(&name).await.map_err(provider_error)?,
                        true,
                    )
                }
                Err(e) => return Err(provider_error(e)),
            };
            from_identity(
                &name,
                provider.region(),
                &info,
                imported,
                auto_create_mailboxes,
                now,
            )
        }
    };
    let mut tx = db.begin().await?;
    let inserted = insert(&mut tx, &domain).await;
    match inserted {
        Ok(()) => {}
        Err(e) if is_unique_violation(&e) => {
            return Err(CoreError::conflict(format!("domain {name} already exists")));
        }
        Err(e) => return Err(e.into()),
    }
    tx.commit().await?;
    Ok(domain)
}

fn from_identity(
    name: &str,
    region: String,
    info: &IdentityInfo,
    imported: bool,
    auto_create_mailboxes: bool,
    now: i64,
) -> Domain {
    Domain {
        id: ids::new_id("dom"),
        name: name.to_string(),
        region,
        status: info.status,
        sending_enabled: info.sending_enabled,
        dkim_status: info.dkim_status.clone(),
        dkim_origin: info.dkim_origin.clone(),
        dkim_tokens: info.dkim_tokens.clone(),
        mail_from_domain: info
            .mail_from_domain
            .clone()
            .unwrap_or_else(|| default_mail_from(name)),
        mail_from_status: info.mail_from_status.clone(),
        spf_verified: false,
        dmarc_verified: false,
        inherited_from: None,
        auto_create_mailboxes,
        imported,
        last_checked_at: now,
        created_at: now,
    }
}

async fn insert(tx: &mut crate::store::Tx, d: &Domain) -> Result<(), sqlx::Error> {
    sql!(
        "INSERT INTO domains (id, name, region, status, sending_enabled, dkim_status, dkim_origin, \
         dkim_tokens, mail_from_domain, mail_from_status, spf_verified, dmarc_verified, \
         inherited_from, auto_create_mailboxes, imported, last_checked_at, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)",
        &d.id,
        &d.name,
        &d.region,
        d.status.as_str(),
        d.sending_enabled,
        &d.dkim_status,
        &d.dkim_origin,
        serde_json::to_string(&d.dkim_tokens).unwrap_or_else(|_| "[]".into()),
        &d.mail_from_domain,
        &d.mail_from_status,
        d.spf_verified,
        d.dmarc_verified,
        d.inherited_from.clone(),
        d.auto_create_mailboxes,
        d.imported,
        d.last_checked_at,
        d.created_at
    )
    .execute_tx(tx)
    .await
    .map(|_| ())
}

/// Re-checks a domain: the provider's view of the identity (or the parent's,
/// for an inherited subdomain) and SPF and DMARC in DNS. A change of
/// verification outcome writes `domain.verified` or `domain.failed`.
pub async fn verify(
    db: &Db,
    provider: &dyn Provider,
    dns: &Dns,
    key: &ApiKey,
    id_or_name: &str,
) -> Result<Domain, CoreError> {
    let current = get(db, &key.reach, id_or_name)
        .await?
        .ok_or(CoreError::NotFound("domain"))?;
    key.require_whole_domain(&current.name, "verifying a domain")?;
    let mut next = current.clone();
    match &current.inherited_from {
        Some(parent_name) => {
            let parent = by_name(db, parent_name).await?;
            match parent {
                Some(p) => {
                    next.status = p.status;
                    next.sending_enabled = p.sending_enabled;
                    next.dkim_status = p.dkim_status.clone();
                    next.mail_from_status = p.mail_from_status.clone();
                }
                None => {
                    next.status = DomainStatus::NotStarted;
                    next.sending_enabled = false;
                }
            }
        }
        None => {
            let info = provider
                .get_identity(&current.name)
                .await
                .map_err(provider_error)?;
            next.status = info.status;
            next.sending_enabled = info.sending_enabled;
            next.dkim_status = info.dkim_status.clone();
            next.dkim_origin = info.dkim_origin.clone();
            if !info.dkim_tokens.is_empty() {
                next.dkim_tokens = info.dkim_tokens.clone();
            }
            if let Some(m) = info.mail_from_domain {
                next.mail_from_domain = m;
            }
            next.mail_from_status = info.mail_from_status.clone();
        }
    }
    // A DNS failure is not a verdict: it leaves the flag false and is logged.
    next.spf_verified = dns
        .spf_includes(&next.mail_from_domain, "amazonses.com")
        .await
        .unwrap_or_else(|e| {
            tracing::warn!(domain = %next.name, error = %e, "SPF probe failed");
            false
        });
    next.dmarc_verified = dns.has_dmarc(&next.name).await.unwrap_or_else(|e| {
        tracing::warn!(domain = %next.name, error = %e, "DMARC probe failed");
        false
    });
    next.last_checked_at = clock::now_micros();

    let mut tx = db.begin().await?;
    sql!(
        "UPDATE domains SET status = $1, sending_enabled = $2, dkim_status = $3, dkim_origin = $4, \
         dkim_tokens = $5, mail_from_domain = $6, mail_from_status = $7, spf_verified = $8, \
         dmarc_verified = $9, last_checked_at = $10 WHERE id = $11",
        next.status.as_str(),
        next.sending_enabled,
        &next.dkim_status,
        &next.dkim_origin,
        serde_json::to_string(&next.dkim_tokens).unwrap_or_else(|_| "[]".into()),
        &next.mail_from_domain,
        &next.mail_from_status,
        next.spf_verified,
        next.dmarc_verified,
        next.last_checked_at,
        &next.id
    )
    .execute_tx(&mut tx)
    .await?;
    if next.status != current.status {
        let event = match next.status {
            DomainStatus::Verified => Some(EventName::DomainVerified),
            DomainStatus::Failed => Some(EventName::DomainFailed),
            _ => None,
        };
        if let Some(event) = event {
            let data = model::DomainEventData {
                domain: next.to_wire(),
            };
            events::emit(&mut tx, event, None, data).await?;
        }
    }
    tx.commit().await?;
    Ok(next)
}

pub async fn set_auto_create(
    db: &Db,
    key: &ApiKey,
    id_or_name: &str,
    value: bool,
) -> Result<Domain, CoreError> {
    let mut d = get(db, &key.reach, id_or_name)
        .await?
        .ok_or(CoreError::NotFound("domain"))?;
    key.require_whole_domain(&d.name, "changing a domain")?;
    sql!(
        "UPDATE domains SET auto_create_mailboxes = $1 WHERE id = $2",
        value,
        &d.id
    )
    .execute(db.writer())
    .await?;
    d.auto_create_mailboxes = value;
    Ok(d)
}

/// Removes the domain record. Mailboxes and mail on it are kept; without a
/// domain they can no longer send. With `delete_in_provider` the identity is
/// deleted at the provider first (an identity already gone there is fine).
pub async fn delete(
    db: &Db,
    provider: &dyn Provider,
    key: &ApiKey,
    id_or_name: &str,
    delete_in_provider: bool,
) -> Result<(Domain, bool), CoreError> {
    let d = get(db, &key.reach, id_or_name)
        .await?
        .ok_or(CoreError::NotFound("domain"))?;
    key.require_whole_domain(&d.name, "deleting a domain")?;
    let mut deleted_in_provider = false;
    if delete_in_provider && d.inherited_from.is_none() {
        match provider.delete_identity(&d.name).await {
            Ok(()) | Err(ProviderError::NotFound(_)) => deleted_in_provider = true,
            Err(e) => return Err(provider_error(e)),
        }
    }
    sql!("DELETE FROM domains WHERE id = $1", &d.id)
        .execute(db.writer())
        .await?;
    Ok((d, deleted_in_provider))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ancestors_stop_before_the_tld() {
        assert_eq!(
            ancestors("a.b.example.com"),
            vec!["b.example.com", "example.com"]
        );
        assert!(ancestors("example.com").is_empty());
    }
}
