//! Identifiers: a kind prefix and lower-case base32.

use std::marker::PhantomData;

use rand::Rng;

const ALPHABET: &[u8] = b"0123456789abcdefghjkmnpqrstvwxyz";

pub fn random_token(len: usize) -> String {
    let mut rng = rand::thread_rng();
    (0..len)
        .map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())] as char)
        .collect()
}

/// `len` (at least 10) characters: the time in milliseconds (10
/// characters, 50 bits), then random ones. Tokens made later sort later, so
/// rows keyed by them land at the end of their index instead of on a random
/// page of it: fewer pages written per insert.
pub fn time_ordered_token(len: usize) -> String {
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    time_ordered_token_at(millis, len)
}

fn time_ordered_token_at(millis: u64, len: usize) -> String {
    let mut token = String::with_capacity(len.max(10));
    for shift in (0..10).rev() {
        token.push(ALPHABET[((millis >> (shift * 5)) & 31) as usize] as char);
    }
    token.push_str(&random_token(len.saturating_sub(10)));
    token
}

/// `prefix_` followed by 20 time-ordered characters (50 random bits).
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", time_ordered_token(20))
}

/// Whether `s` can be an id of kind `prefix` (`mbx` for `mbx_…`).
pub fn is_id(prefix: &str, s: &str) -> bool {
    s.strip_prefix(prefix)
        .and_then(|rest| rest.strip_prefix('_'))
        .is_some_and(|token| !token.is_empty() && token.bytes().all(|b| ALPHABET.contains(&b)))
}

/// The document's pattern for ids of kind `prefix`, matching [`is_id`].
pub fn pattern(prefix: &str) -> String {
    format!("^{prefix}_[0-9a-hjkmnp-tv-z]+$")
}

/// What an [`Id`] names: its prefix, and the word a 404 uses for it.
pub trait IdKind {
    const PREFIX: &'static str;
    /// As in "thread not found".
    const NOUN: &'static str;
    /// The document's schema name (`ThreadId`).
    const SCHEMA: &'static str;
}

macro_rules! id_kinds {
    ($($kind:ident $alias:ident: $prefix:literal, $noun:literal;)*) => {$(
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $kind {}
        impl IdKind for $kind {
            const PREFIX: &'static str = $prefix;
            const NOUN: &'static str = $noun;
            const SCHEMA: &'static str = stringify!($alias);
        }
        pub type $alias = Id<$kind>;
    )*};
}

id_kinds! {
    MessageKind MessageId: "msg", "message";
    ThreadKind ThreadId: "thr", "thread";
    DomainKind DomainId: "dom", "domain";
    MailboxKind MailboxId: "mbx", "mailbox";
    WebhookKind WebhookId: "whk", "webhook";
    DeliveryKind DeliveryId: "whd", "webhook delivery";
    LabelKind LabelId: "lbl", "label";
    AttachmentKind AttachmentId: "att", "attachment";
    ContactKind ContactId: "con", "contact";
    SuppressionKind SuppressionId: "sup", "suppression";
    KeyKind KeyId: "key", "key";
    EventKind EventId: "evt", "event";
    // A message not sent yet: its id is a message id, its 404 says "draft".
    DraftKind DraftId: "msg", "draft";
}

/// An identifier of one kind: `thr_…` can only be a [`ThreadId`]. Input
/// becomes one through [`Id::parse`] (or deserialising), which checks the
/// prefix and the alphabet; what the store gives back is trusted.
pub struct Id<K>(String, PhantomData<fn() -> K>);

impl<K: IdKind> Id<K> {
    /// A fresh, time-ordered id of this kind.
    pub fn generate() -> Self {
        Id(new_id(K::PREFIX), PhantomData)
    }

    /// `raw` if it can be an id of this kind.
    pub fn parse(raw: &str) -> Option<Self> {
        is_id(K::PREFIX, raw).then(|| Id(raw.to_string(), PhantomData))
    }

    /// An id read back from the store, which only ever holds ids it made.
    pub fn from_stored(raw: String) -> Self {
        Id(raw, PhantomData)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

impl<K> Clone for Id<K> {
    fn clone(&self) -> Self {
        Id(self.0.clone(), PhantomData)
    }
}

impl<K> PartialEq for Id<K> {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

impl<K> Eq for Id<K> {}

impl<K> std::hash::Hash for Id<K> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state)
    }
}

impl<K> std::fmt::Debug for Id<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.0, f)
    }
}

impl<K> std::fmt::Display for Id<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl<K> std::ops::Deref for Id<K> {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl<K> AsRef<str> for Id<K> {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl<K> From<Id<K>> for String {
    fn from(id: Id<K>) -> String {
        id.0
    }
}

impl<K> serde::Serialize for Id<K> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de, K: IdKind> serde::Deserialize<'de> for Id<K> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Id::parse(&raw)
            .ok_or_else(|| serde::de::Error::custom(format!("{raw:?} is not a {}_ id", K::PREFIX)))
    }
}

impl<K: IdKind> utoipa::PartialSchema for Id<K> {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::schema::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .pattern(Some(pattern(K::PREFIX)))
            .description(Some(format!("A {} id (`{}_…`).", K::NOUN, K::PREFIX)))
            .into()
    }
}

impl<K: IdKind> utoipa::ToSchema for Id<K> {
    fn name() -> std::borrow::Cow<'static, str> {
        std::borrow::Cow::Borrowed(K::SCHEMA)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_made_later_sort_later_and_ids_differ() {
        let earlier = time_ordered_token_at(1_795_000_000_000, 20);
        let later = time_ordered_token_at(1_795_000_000_001, 20);
        assert!(earlier < later, "{earlier} !< {later}");
        assert!(
            time_ordered_token_at(31, 12) < time_ordered_token_at(32, 12),
            "a carry into the next character still sorts"
        );
        let id = new_id("msg");
        assert_eq!(id.len(), "msg_".len() + 20);
        assert!(id[4..].bytes().all(|b| ALPHABET.contains(&b)));
        let same_millisecond: std::collections::HashSet<String> =
            (0..1000).map(|_| new_id("msg")).collect();
        assert_eq!(same_millisecond.len(), 1000);
        assert_eq!(time_ordered_token(24).len(), 24);
        assert!(is_id("msg", &id));
        assert!(!is_id("mbx", &id));
        assert!(!is_id("msg", "msg_"));
        assert!(!is_id("msg", "msg_01ILOU"));
        let typed: ThreadId = serde_json::from_str("\"thr_0123abc\"").unwrap();
        assert_eq!(typed.as_str(), "thr_0123abc");
        assert!(serde_json::from_str::<ThreadId>("\"msg_0123abc\"").is_err());
        assert!(ThreadId::parse("thr_01IL").is_none());
        assert!(is_id("thr", &ThreadId::generate()));
        let re = pattern("msg");
        assert_eq!(re, "^msg_[0-9a-hjkmnp-tv-z]+$");
    }
}
