//! Query parameters: the types their values take, and [`query_params!`],
//! which declares a query struct so that the names the document gives and
//! the names the service reads are the same field names.

use utoipa::openapi::schema::{AnyOfBuilder, KnownFormat, ObjectBuilder, SchemaFormat, Type};
use utoipa::openapi::{RefOr, Schema};
use utoipa::{PartialSchema, ToSchema};

use crate::ids::{Id, IdKind};

/// A problem with one parameter: its name and what is wrong.
pub type QueryProblem = (&'static str, String);

/// How one parameter's text becomes its field's value.
pub trait QueryParam: Sized {
    /// Free text: given empty (`q=`) it is absent. Any other type refuses
    /// an empty value: the document types it (a date, a boolean, an
    /// address, one of a list) and `""` is none of those.
    const FREE_TEXT: bool = false;

    /// The value of `raw` (never empty), or why it is not one.
    fn parse(raw: &str) -> Result<Self, String>;
}

/// Reads one parameter given as `raw` (None: absent), recording a problem.
pub fn read<T: QueryParam>(
    raw: Option<&str>,
    name: &'static str,
    problems: &mut Vec<QueryProblem>,
) -> Option<T> {
    let raw = raw?;
    if raw.is_empty() {
        if !T::FREE_TEXT {
            problems.push((
                name,
                "an empty value; leave the parameter out instead".into(),
            ));
        }
        return None;
    }
    T::parse(raw).map_err(|m| problems.push((name, m))).ok()
}

/// A struct of query parameters, declared with [`query_params!`].
pub trait Query: Sized {
    /// The parameters' names: the fields', which the document uses too.
    const NAMES: &'static [&'static str];

    /// Every field read by its name through `get` (a parameter's text as
    /// given), every problem recorded in field order.
    fn read<'a>(get: impl Fn(&str) -> Option<&'a str>, problems: &mut Vec<QueryProblem>) -> Self;
}

/// Declares a struct of optional query parameters: it derives its
/// document (`IntoParams`, with the doc comments and `#[param]` attributes
/// given) and implements [`Query`] from the same field names, each field's
/// type reading itself through [`QueryParam`].
macro_rules! query_params {
    ($(#[$meta:meta])* pub struct $name:ident {
        $($(#[$fmeta:meta])* pub $field:ident: Option<$ty:ty>,)*
    }) => {
        $(#[$meta])*
        #[derive(Debug, utoipa::IntoParams)]
        #[into_params(parameter_in = Query)]
        pub struct $name {
            $($(#[$fmeta])* pub $field: Option<$ty>,)*
        }

        impl $crate::model::query::Query for $name {
            const NAMES: &'static [&'static str] = &[$(stringify!($field)),*];

            fn read<'a>(
                get: impl Fn(&str) -> Option<&'a str>,
                problems: &mut Vec<$crate::model::query::QueryProblem>,
            ) -> Self {
                $name {
                    $($field: $crate::model::query::read(
                        get(stringify!($field)),
                        stringify!($field),
                        problems,
                    ),)*
                }
            }
        }
    };
}
pub(crate) use query_params;

/// Free text: any value; empty means absent.
impl QueryParam for String {
    const FREE_TEXT: bool = true;

    fn parse(raw: &str) -> Result<Self, String> {
        Ok(raw.to_string())
    }
}

/// `true`/`1` or `false`/`0`.
impl QueryParam for bool {
    fn parse(raw: &str) -> Result<Self, String> {
        match raw {
            "true" | "1" => Ok(true),
            "false" | "0" => Ok(false),
            other => Err(format!("expected true or false, got {other:?}")),
        }
    }
}

/// An id filter: a value that cannot be an id of that kind is refused
/// rather than matching nothing.
impl<K: IdKind> QueryParam for Id<K> {
    fn parse(raw: &str) -> Result<Self, String> {
        Id::parse(raw).ok_or_else(|| format!("{raw:?} is not a {}_ id", K::PREFIX))
    }
}

/// Text that must not be empty (an exact match, not validated further).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NonEmptyText(pub String);

impl QueryParam for NonEmptyText {
    fn parse(raw: &str) -> Result<Self, String> {
        Ok(NonEmptyText(raw.to_string()))
    }
}

impl PartialSchema for NonEmptyText {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .min_length(Some(1))
            .into()
    }
}

impl ToSchema for NonEmptyText {}

/// An address filter, lower-cased (its parsing is the API's address check,
/// in `crate::api::extract`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address(pub String);

impl PartialSchema for Address {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Email)))
            .into()
    }
}

impl ToSchema for Address {}

const NOT_AN_INSTANT: &str = "expected a date (2026-11-22) or an ISO 8601 timestamp, got";

/// A lower bound in microseconds: a date (`2026-11-22`, its midnight UTC)
/// or a full ISO 8601 timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Since(pub i64);

impl QueryParam for Since {
    fn parse(raw: &str) -> Result<Self, String> {
        crate::clock::parse_instant(raw)
            .map(Since)
            .ok_or_else(|| format!("{NOT_AN_INSTANT} {raw:?}"))
    }
}

/// An upper bound in microseconds: a date means the end of that day (UTC).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Until(pub i64);

impl QueryParam for Until {
    fn parse(raw: &str) -> Result<Self, String> {
        crate::clock::parse_until(raw)
            .map(Until)
            .ok_or_else(|| format!("{NOT_AN_INSTANT} {raw:?}"))
    }
}

/// A query bound's schema: a date (`2026-11-22`) or a full ISO 8601 timestamp.
fn instant_schema() -> RefOr<Schema> {
    let of = |f| {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(SchemaFormat::KnownFormat(f)))
    };
    AnyOfBuilder::new()
        .item(of(KnownFormat::Date))
        .item(of(KnownFormat::DateTime))
        .into()
}

impl PartialSchema for Since {
    fn schema() -> RefOr<Schema> {
        instant_schema()
    }
}

impl ToSchema for Since {}

impl PartialSchema for Until {
    fn schema() -> RefOr<Schema> {
        instant_schema()
    }
}

impl ToSchema for Until {}

/// A folder, or `all` (every folder but trash and spam on the thread list).
impl QueryParam for super::messages::FolderFilter {
    fn parse(raw: &str) -> Result<Self, String> {
        use super::messages::{Folder, FolderFilter};
        if raw == "all" {
            return Ok(FolderFilter::All);
        }
        Ok(match Folder::parse(raw) {
            Some(Folder::Inbox) => FolderFilter::Inbox,
            Some(Folder::Sent) => FolderFilter::Sent,
            Some(Folder::Drafts) => FolderFilter::Drafts,
            Some(Folder::Archive) => FolderFilter::Archive,
            Some(Folder::Spam) => FolderFilter::Spam,
            Some(Folder::Trash) => FolderFilter::Trash,
            None => {
                let all: Vec<&str> = Folder::ALL.iter().map(|f| f.as_str()).collect();
                return Err(format!(
                    "unknown folder {raw:?}; one of {}, all",
                    all.join(", ")
                ));
            }
        })
    }
}

impl super::messages::FolderFilter {
    /// The one folder asked for; None for `all`.
    pub fn folder(self) -> Option<super::messages::Folder> {
        use super::messages::{Folder, FolderFilter};
        match self {
            FolderFilter::Inbox => Some(Folder::Inbox),
            FolderFilter::Sent => Some(Folder::Sent),
            FolderFilter::Drafts => Some(Folder::Drafts),
            FolderFilter::Archive => Some(Folder::Archive),
            FolderFilter::Spam => Some(Folder::Spam),
            FolderFilter::Trash => Some(Folder::Trash),
            FolderFilter::All => None,
        }
    }
}

/// Sent-mail statuses, comma-separated; the first unknown one is the problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentStatuses(pub Vec<super::messages::MessageStatus>);

impl QueryParam for SentStatuses {
    fn parse(raw: &str) -> Result<Self, String> {
        use super::messages::MessageStatus;
        let mut statuses = Vec::new();
        for x in raw.split(',').map(str::trim).filter(|x| !x.is_empty()) {
            match MessageStatus::parse_sent(x) {
                Some(st) => statuses.push(st),
                None => {
                    let all: Vec<&str> = MessageStatus::SENT.iter().map(|s| s.as_str()).collect();
                    return Err(format!("unknown status {x:?}; one of {}", all.join(", ")));
                }
            }
        }
        Ok(SentStatuses(statuses))
    }
}

impl QueryParam for super::contacts::ContactOrder {
    fn parse(raw: &str) -> Result<Self, String> {
        Self::parse(raw).ok_or_else(|| format!("unknown order {raw:?}; recent or frequent"))
    }
}

impl QueryParam for super::suppressions::SuppressionReason {
    fn parse(raw: &str) -> Result<Self, String> {
        Self::parse(raw).ok_or_else(|| "one of manual, bounce, complaint".to_string())
    }
}

impl QueryParam for super::webhooks::EventName {
    fn parse(raw: &str) -> Result<Self, String> {
        Self::parse(raw).ok_or_else(|| format!("unknown event name {raw:?}"))
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::HashMap;

    use utoipa::IntoParams;
    use utoipa::openapi::path::ParameterIn;

    use super::*;
    use crate::model::contacts::ContactListQuery;
    use crate::model::domains::DomainDeleteQuery;
    use crate::model::drafts::DraftListQuery;
    use crate::model::mailboxes::{MailboxDeleteQuery, MailboxFilter};
    use crate::model::messages::{EmailListQuery, FolderFilter, MessageListQuery, MessageStatus};
    use crate::model::suppressions::SuppressionFilter;
    use crate::model::threads::{ThreadDeleteQuery, ThreadListQuery, ThreadReadQuery};
    use crate::model::webhooks::{DeliveryFilter, WebhookDeleteQuery};

    /// The names the document gives, the names read, and `NAMES`: one list.
    fn same_names<Q: Query + IntoParams>() {
        let documented: Vec<String> = Q::into_params(|| Some(ParameterIn::Query))
            .into_iter()
            .map(|p| p.name)
            .collect();
        let asked = RefCell::new(Vec::new());
        Q::read(
            |name| {
                asked.borrow_mut().push(name.to_string());
                None
            },
            &mut Vec::new(),
        );
        assert_eq!(documented, asked.into_inner());
        assert_eq!(documented, Q::NAMES);
    }

    #[test]
    fn every_query_struct_reads_the_names_it_documents() {
        same_names::<ThreadListQuery>();
        same_names::<ThreadReadQuery>();
        same_names::<ThreadDeleteQuery>();
        same_names::<EmailListQuery>();
        same_names::<MessageListQuery>();
        same_names::<ContactListQuery>();
        same_names::<DraftListQuery>();
        same_names::<MailboxFilter>();
        same_names::<MailboxDeleteQuery>();
        same_names::<DomainDeleteQuery>();
        same_names::<SuppressionFilter>();
        same_names::<WebhookDeleteQuery>();
        same_names::<DeliveryFilter>();
    }

    fn read_from<Q: Query>(pairs: &[(&str, &str)]) -> (Q, Vec<QueryProblem>) {
        let map: HashMap<&str, &str> = pairs.iter().copied().collect();
        let mut problems = Vec::new();
        let q = Q::read(|name| map.get(name).copied(), &mut problems);
        (q, problems)
    }

    #[test]
    fn every_problem_is_listed_in_field_order_and_free_text_may_be_empty() {
        let (q, problems) = read_from::<ThreadListQuery>(&[
            ("until", ""),
            ("folder", "bogus"),
            ("unread", "maybe"),
            ("label_id", "msg_0123"),
            ("q", ""),
            ("subject", "hi"),
            ("since", "yesterday"),
            ("not_a_parameter", "x"),
        ]);
        let names: Vec<&str> = problems.iter().map(|p| p.0).collect();
        assert_eq!(names, ["folder", "label_id", "unread", "since", "until"]);
        assert_eq!(
            problems[0].1,
            "unknown folder \"bogus\"; one of inbox, sent, drafts, archive, spam, trash, all"
        );
        assert_eq!(problems[1].1, "\"msg_0123\" is not a lbl_ id");
        assert_eq!(problems[2].1, "expected true or false, got \"maybe\"");
        assert_eq!(
            problems[4].1,
            "an empty value; leave the parameter out instead"
        );
        assert_eq!(q.q, None);
        assert_eq!(q.subject.as_deref(), Some("hi"));

        let (q, problems) = read_from::<ThreadListQuery>(&[
            ("folder", "all"),
            ("since", "2026-11-22"),
            ("until", "2026-11-22"),
            ("starred", "1"),
            ("label_id", "lbl_0123"),
        ]);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(q.folder.and_then(FolderFilter::folder), None);
        let (since, until) = (q.since.map(|t| t.0), q.until.map(|t| t.0));
        // A date as `until` is the end of that day.
        assert_eq!(
            until.zip(since).map(|(u, s)| u - s),
            Some(86_400_000_000 - 1)
        );
        assert_eq!(q.starred, Some(true));
        assert_eq!(q.label_id.as_deref(), Some("lbl_0123"));

        let (q, problems) =
            read_from::<EmailListQuery>(&[("status", "sent, delivered,"), ("opened", "0")]);
        assert!(problems.is_empty(), "{problems:?}");
        let statuses = q.status.map(|s| s.0);
        assert_eq!(
            statuses,
            Some(vec![MessageStatus::Sent, MessageStatus::Delivered])
        );
        assert_eq!(q.opened, Some(false));
        let (_, problems) = read_from::<EmailListQuery>(&[("status", "sent,nope,gone")]);
        assert_eq!(problems.len(), 1);
        assert!(
            problems[0]
                .1
                .starts_with("unknown status \"nope\"; one of ")
        );
    }
}
