//! API keys: scopes, reach, hashing, and the lookup that authenticates a call.

use serde::Serialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::clock;
use crate::core::error::CoreError;
use crate::ids;
use crate::model::Timestamp;
use crate::model::keys as model;
use crate::sql;
use crate::store::{Db, RowExt, Sql};

/// The scope enum is the wire's (`emails:send`...): one list for keys,
/// checks and the document.
pub use crate::model::keys::Scope;

/// What part of the account a key may see and act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reach {
    Account,
    /// Whole domains (and their subdomains), lower-case.
    Domains(Vec<String>),
    /// Exact addresses, lower-case.
    Addresses(Vec<String>),
}

/// Whether `name` is `parent` or a subdomain of it.
pub fn domain_within(name: &str, parent: &str) -> bool {
    name == parent
        || (name.len() > parent.len()
            && name.ends_with(parent)
            && name.as_bytes()[name.len() - parent.len() - 1] == b'.')
}

pub fn address_domain(address: &str) -> &str {
    address.rsplit_once('@').map(|(_, d)| d).unwrap_or("")
}

impl Reach {
    pub fn kind(&self) -> &'static str {
        match self {
            Reach::Account => "account",
            Reach::Domains(_) => "domains",
            Reach::Addresses(_) => "addresses",
        }
    }

    /// The reach on the wire: `{kind, values}`.
    pub fn to_wire(&self) -> model::KeyReach {
        model::KeyReach {
            kind: match self {
                Reach::Account => model::ReachKind::Account,
                Reach::Domains(_) => model::ReachKind::Domains,
                Reach::Addresses(_) => model::ReachKind::Addresses,
            },
            values: self.values().to_vec(),
        }
    }

    pub fn values(&self) -> &[String] {
        match self {
            Reach::Account => &[],
            Reach::Domains(v) | Reach::Addresses(v) => v,
        }
    }

    pub fn is_account(&self) -> bool {
        matches!(self, Reach::Account)
    }

    pub fn covers_address(&self, address: &str) -> bool {
        match self {
            Reach::Account => true,
            Reach::Domains(ds) => ds.iter().any(|d| domain_within(address_domain(address), d)),
            Reach::Addresses(a) => a.iter().any(|x| x == address),
        }
    }

    /// Whether the key may see the domain record `name`.
    pub fn covers_domain(&self, name: &str) -> bool {
        match self {
            Reach::Account => true,
            Reach::Domains(ds) => ds.iter().any(|d| domain_within(name, d)),
            Reach::Addresses(a) => a.iter().any(|x| address_domain(x) == name),
        }
    }

    /// Whether the key reaches every address of the domain `name`: the whole
    /// account, or a domain reach that is `name` or one of its parents. An
    /// address reach never does; it may read its addresses' domains, not
    /// change them.
    pub fn covers_whole_domain(&self, name: &str) -> bool {
        match self {
            Reach::Account => true,
            Reach::Domains(ds) => ds.iter().any(|d| domain_within(name, d)),
            Reach::Addresses(_) => false,
        }
    }

    /// Appends ` AND (…)` limiting a domain-name column to the reach.
    pub fn filter_domain_column(&self, sql: &mut Sql, column: &str) {
        match self {
            Reach::Account => {}
            Reach::Domains(ds) => {
                sql.push(" AND (");
                push_domain_match(sql, column, ds);
                sql.push(")");
            }
            Reach::Addresses(a) => {
                let ds: Vec<String> = a.iter().map(|x| address_domain(x).to_string()).collect();
                sql.push(&format!(" AND {column} IN "));
                sql.bind_list(&ds);
            }
        }
    }

    /// Appends ` AND (…)` limiting rows with an address column and its
    /// domain column to the reach.
    pub fn filter_address_columns(&self, sql: &mut Sql, address_column: &str, domain_column: &str) {
        match self {
            Reach::Account => {}
            Reach::Domains(ds) => {
                sql.push(" AND (");
                push_domain_match(sql, domain_column, ds);
                sql.push(")");
            }
            Reach::Addresses(a) => {
                sql.push(&format!(" AND {address_column} IN "));
                sql.bind_list(a);
            }
        }
    }
}

fn push_domain_match(sql: &mut Sql, column: &str, domains: &[String]) {
    sql.push(&format!("{column} IN "));
    sql.bind_list(domains);
    for d in domains {
        // Domain names are validated to letters, digits, '-' and '.', so no
        // LIKE wildcard can hide in them.
        sql.push(&format!(" OR {column} LIKE "))
            .bind(format!("%.{d}"));
    }
}

/// A key as the API sees it once authenticated. Never holds the secret.
#[derive(Debug, Clone)]
pub struct ApiKey {
    pub id: String,
    pub name: String,
    pub scopes: Vec<Scope>,
    pub reach: Reach,
    pub rate_limit: Option<u32>,
    pub created_at: i64,
    pub revoked_at: Option<i64>,
}

impl ApiKey {
    pub fn require(&self, scope: Scope) -> Result<(), CoreError> {
        if self.scopes.contains(&scope) {
            Ok(())
        } else {
            Err(CoreError::MissingScope {
                required: scope.as_str(),
                scopes: self.scopes.iter().map(|s| s.as_str().to_string()).collect(),
            })
        }
    }

    /// 403 for account-wide operations attempted by a narrower key.
    pub fn require_account_reach(&self, what: &str) -> Result<(), CoreError> {
        if self.reach.is_account() {
            Ok(())
        } else {
            Err(CoreError::Forbidden(format!(
                "{what} needs a key that reaches the whole account"
            )))
        }
    }

    /// 403 for a change to the domain `name` by a key that does not reach
    /// all of it (an address reach; spec §5).
    pub fn require_whole_domain(&self, name: &str, what: &str) -> Result<(), CoreError> {
        if self.reach.covers_whole_domain(name) {
            Ok(())
        } else {
            Err(CoreError::Forbidden(format!(
                "{what} needs a key that reaches the whole domain {name}"
            )))
        }
    }

    pub fn to_wire(&self) -> model::ApiKey {
        model::ApiKey {
            object: model::ApiKeyObject,
            id: crate::ids::Id::from_stored(self.id.clone()),
            name: self.name.clone(),
            scopes: self.scopes.clone(),
            reach: self.reach.to_wire(),
            rate_limit: self.rate_limit,
            created_at: Timestamp(self.created_at),
            revoked_at: Timestamp::opt(self.revoked_at),
        }
    }
}

/// What `keys create` returns: the key record and its secret, shown only once.
#[derive(Debug, Serialize)]
pub struct CreatedKey {
    pub id: String,
    pub key: String,
    pub name: String,
    pub scopes: Vec<&'static str>,
    pub reach: model::KeyReach,
    pub rate_limit: Option<u32>,
}

pub struct NewKey {
    pub name: String,
    pub scopes: Vec<Scope>,
    pub reach: Reach,
    pub rate_limit: Option<u32>,
}

/// Parses and normalises key creation input (shared by the CLI and tests).
pub fn parse_new_key(
    name: &str,
    scopes: Option<&str>,
    domains: Option<&str>,
    addresses: Option<&str>,
    rate_limit: Option<u32>,
) -> Result<NewKey, String> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > 200 {
        return Err("--name must be 1 to 200 characters".into());
    }
    let scopes = match scopes {
        None => Scope::ALL.to_vec(),
        Some(list) => {
            let mut out = Vec::new();
            for s in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                let sc = Scope::parse(s).ok_or_else(|| {
                    format!(
                        "unknown scope {s:?}; known: {}",
                        Scope::ALL.map(|s| s.as_str()).join(", ")
                    )
                })?;
                if !out.contains(&sc) {
                    out.push(sc);
                }
            }
            if out.is_empty() {
                return Err("--scopes must name at least one scope".into());
            }
            out
        }
    };
    let split = |list: &str| -> Vec<String> {
        list.split(',')
            .map(|s| s.trim().to_ascii_lowercase())
            .filter(|s| !s.is_empty())
            .collect()
    };
    let reach = match (domains, addresses) {
        (Some(_), Some(_)) => return Err("give --domains or --addresses, not both".into()),
        (Some(d), None) => {
            let ds = split(d);
            if ds.is_empty() {
                return Err("--domains must name at least one domain".into());
            }
            for x in &ds {
                crate::core::validate::domain_name(x)
                    .map_err(|e| format!("--domains: {x}: {e}"))?;
            }
            Reach::Domains(ds)
        }
        (None, Some(a)) => {
            let list = split(a);
            if list.is_empty() {
                return Err("--addresses must name at least one address".into());
            }
            for x in &list {
                crate::core::validate::address(x).map_err(|e| format!("--addresses: {e}"))?;
            }
            Reach::Addresses(list)
        }
        (None, None) => Reach::Account,
    };
    if rate_limit == Some(0) {
        return Err("--rate-limit must be above zero".into());
    }
    Ok(NewKey {
        name: name.to_string(),
        scopes,
        reach,
        rate_limit,
    })
}

fn hash_secret(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// Keys look like `ph_<id part>_<secret>`; the id part finds the row, the
/// whole string's hash is compared in constant time.
pub async fn create_key(db: &Db, new: NewKey) -> Result<CreatedKey, sqlx::Error> {
    let id = ids::new_id("key");
    let id_part = id.trim_start_matches("key_");
    let secret = format!("ph_{id_part}_{}", ids::random_token(40));
    let scopes: Vec<&'static str> = new.scopes.iter().map(|s| s.as_str()).collect();
    sql!(
        "INSERT INTO api_keys (id, name, secret_hash, scopes, reach_kind, reach_values, rate_limit, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        &id,
        &new.name,
        hash_secret(&secret),
        serde_json::to_string(&scopes).unwrap_or_default(),
        new.reach.kind(),
        serde_json::to_string(new.reach.values()).unwrap_or_default(),
        new.rate_limit.map(i64::from),
        clock::now_micros()
    )
    .execute(db.writer())
    .await?;
    Ok(CreatedKey {
        id,
        key: secret,
        name: new.name,
        scopes,
        reach: new.reach.to_wire(),
        rate_limit: new.rate_limit,
    })
}

fn key_from_row(row: &impl RowExt) -> Result<ApiKey, sqlx::Error> {
    let scopes: Vec<String> = serde_json::from_str(&row.text("scopes")?).unwrap_or_default();
    let values: Vec<String> = serde_json::from_str(&row.text("reach_values")?).unwrap_or_default();
    let reach = match row.text("reach_kind")?.as_str() {
        "domains" => Reach::Domains(values),
        "addresses" => Reach::Addresses(values),
        _ => Reach::Account,
    };
    Ok(ApiKey {
        id: row.text("id")?,
        name: row.text("name")?,
        scopes: scopes.iter().filter_map(|s| Scope::parse(s)).collect(),
        reach,
        rate_limit: row
            .opt_int("rate_limit")?
            .and_then(|n| u32::try_from(n).ok()),
        created_at: row.int("created_at")?,
        revoked_at: row.opt_int("revoked_at")?,
    })
}

const KEY_COLUMNS: &str =
    "id, name, secret_hash, scopes, reach_kind, reach_values, rate_limit, created_at, revoked_at";

pub async fn list_keys(db: &Db) -> Result<Vec<ApiKey>, sqlx::Error> {
    let rows = Sql::new(&format!(
        "SELECT {KEY_COLUMNS} FROM api_keys ORDER BY created_at, id"
    ))
    .fetch_all(db.reader())
    .await?;
    rows.iter().map(key_from_row).collect()
}

/// Revokes at once; returns false when no such key exists.
pub async fn revoke_key(db: &Db, id: &str) -> Result<bool, sqlx::Error> {
    let n = sql!(
        "UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL",
        clock::now_micros(),
        id
    )
    .execute(db.writer())
    .await?;
    if n > 0 {
        return Ok(true);
    }
    Ok(sql!("SELECT id FROM api_keys WHERE id = $1", id)
        .fetch_optional(db.reader())
        .await?
        .is_some())
}

/// The key a bearer token names, if it exists, matches and is not revoked.
pub async fn authenticate(db: &Db, presented: &str) -> Result<Option<ApiKey>, sqlx::Error> {
    let Some(rest) = presented.strip_prefix("ph_") else {
        return Ok(None);
    };
    let Some((id_part, _)) = rest.split_once('_') else {
        return Ok(None);
    };
    if id_part.len() != 20 || !id_part.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Ok(None);
    }
    let row = db
        .lookup_optional(
            Sql::new(&format!("SELECT {KEY_COLUMNS} FROM api_keys WHERE id = "))
                .bind(format!("key_{id_part}")),
        )
        .await?;
    let Some(row) = row else { return Ok(None) };
    let stored = row.text("secret_hash")?;
    let matches: bool = stored
        .as_bytes()
        .ct_eq(hash_secret(presented).as_bytes())
        .into();
    if !matches || row.opt_int("revoked_at")?.is_some() {
        return Ok(None);
    }
    key_from_row(&row).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `keys create` prints the reach as the `json!` that built it did.
    #[test]
    fn a_created_key_prints_its_reach_as_kind_then_values() {
        let reach = Reach::Domains(vec!["a.com".into()]);
        let created = CreatedKey {
            id: "key_1".into(),
            key: "ph_1_s".into(),
            name: "n".into(),
            scopes: vec!["emails:send"],
            reach: reach.to_wire(),
            rate_limit: None,
        };
        let before = serde_json::json!({
            "id": "key_1", "key": "ph_1_s", "name": "n", "scopes": ["emails:send"],
            "reach": {"kind": reach.kind(), "values": reach.values()}, "rate_limit": null,
        });
        assert_eq!(serde_json::to_string(&created).unwrap(), before.to_string());
        assert_eq!(
            serde_json::to_value(Reach::Account.to_wire()).unwrap(),
            serde_json::json!({"kind": "account", "values": []})
        );
    }

    #[test]
    fn domain_reach_covers_subdomains_but_not_lookalikes() {
        let r = Reach::Domains(vec!["example.com".into()]);
        assert!(r.covers_address("a@example.com"));
        assert!(r.covers_address("a@eu.example.com"));
        assert!(!r.covers_address("a@badexample.com"));
        assert!(!r.covers_address("a@example.com.evil.io"));
        let a = Reach::Addresses(vec!["a@example.com".into()]);
        assert!(a.covers_address("a@example.com"));
        assert!(!a.covers_address("b@example.com"));
        assert!(a.covers_domain("example.com"));
        assert!(!a.covers_domain("other.com"));
    }

    #[test]
    fn only_account_and_domain_reach_cover_a_whole_domain() {
        assert!(Reach::Account.covers_whole_domain("example.com"));
        let d = Reach::Domains(vec!["example.com".into()]);
        assert!(d.covers_whole_domain("example.com"));
        assert!(d.covers_whole_domain("eu.example.com"));
        assert!(!d.covers_whole_domain("other.com"));
        let sub = Reach::Domains(vec!["eu.example.com".into()]);
        assert!(!sub.covers_whole_domain("example.com"));
        let a = Reach::Addresses(vec!["a@example.com".into()]);
        assert!(a.covers_domain("example.com"));
        assert!(!a.covers_whole_domain("example.com"));
    }

    #[test]
    fn key_input_is_validated() {
        assert!(parse_new_key("ci", Some("emails:send,bogus"), None, None, None).is_err());
        assert!(parse_new_key("ci", None, Some("a.com"), Some("x@a.com"), None).is_err());
        assert!(parse_new_key("", None, None, None, None).is_err());
        assert!(parse_new_key("ci", None, Some("not a domain"), None, None).is_err());
        let k = parse_new_key("ci", None, None, Some("X@A.com"), Some(5)).unwrap();
        assert_eq!(k.reach, Reach::Addresses(vec!["x@a.com".into()]));
        assert_eq!(k.scopes.len(), 10);
    }
}
