//! Identifiers: a kind prefix and lower-case base32.

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
        let re = pattern("msg");
        assert_eq!(re, "^msg_[0-9a-hjkmnp-tv-z]+$");
    }
}
