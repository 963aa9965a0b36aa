//! Identifiers: a kind prefix and random lower-case base32.

use rand::Rng;

const ALPHABET: &[u8] = b"0123456789abcdefghjkmnpqrstvwxyz";

pub fn random_token(len: usize) -> String {
    let mut rng = rand::thread_rng();
    (0..len)
        .map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())] as char)
        .collect()
}

/// `prefix_` followed by 20 random characters (100 bits).
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", random_token(20))
}
