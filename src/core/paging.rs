//! Keyset pagination shared by every paged list: an opaque signed cursor on
//! (sort time, id), the keyset condition, and the list envelope. Reading
//! `limit` and `cursor` from a request is the API's job (`api::pagination`).

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use utoipa::ToSchema;

use crate::model::List;
use crate::store::Sql;

pub const DEFAULT_LIMIT: i64 = 25;
pub const MAX_LIMIT: i64 = 100;

/// Signs cursors so that a forged or edited one is refused. The key lives in
/// the database so that every process of one deployment shares it.
#[derive(Clone)]
pub struct CursorSigner {
    key: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    pub limit: i64,
    /// Continue strictly after this (time, id), newest-first order.
    pub after: Option<(i64, String)>,
}

impl CursorSigner {
    pub fn new(key: Vec<u8>) -> CursorSigner {
        CursorSigner { key }
    }

    fn tag(&self, payload: &[u8]) -> Vec<u8> {
        let mut mac = match Hmac::<Sha256>::new_from_slice(&self.key) {
            Ok(m) => m,
            Err(_) => return Vec::new(),
        };
        mac.update(payload);
        mac.finalize().into_bytes()[..16].to_vec()
    }

    pub fn encode(&self, time: i64, id: &str) -> String {
        let payload = format!("{time}:{id}");
        format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(payload.as_bytes()),
            URL_SAFE_NO_PAD.encode(self.tag(payload.as_bytes()))
        )
    }

    pub fn decode(&self, cursor: &str) -> Option<(i64, String)> {
        let (body, tag) = cursor.split_once('.')?;
        let payload = URL_SAFE_NO_PAD.decode(body).ok()?;
        let tag = URL_SAFE_NO_PAD.decode(tag).ok()?;
        let expected = self.tag(&payload);
        if expected.is_empty()
            || !bool::from(subtle::ConstantTimeEq::ct_eq(&tag[..], &expected[..]))
        {
            return None;
        }
        let text = String::from_utf8(payload).ok()?;
        let (t, id) = text.split_once(':')?;
        Some((t.parse().ok()?, id.to_string()))
    }
}

impl Page {
    /// Appends the keyset condition, newest-first order and the limit (one
    /// extra row tells whether there is more).
    pub fn push(&self, sql: &mut Sql, time_col: &str, id_col: &str) {
        // `t <= x AND (t < x OR id < y)` rather than `t < x OR (t = x AND
        // id < y)`: the leading range lets both planners start the index
        // scan at the cursor instead of filtering from the newest row, so a
        // deep page costs what the first page does.
        if let Some((t, id)) = &self.after {
            sql.push(&format!(" AND {time_col} <= "))
                .bind(*t)
                .push(&format!(" AND ({time_col} < "))
                .bind(*t)
                .push(&format!(" OR {id_col} < "))
                .bind(id.clone())
                .push(")");
        }
        sql.push(&format!(
            " ORDER BY {time_col} DESC, {id_col} DESC LIMIT {}",
            self.limit + 1
        ));
    }

    /// As [`Page::push`] for an order by one unique integer key (the
    /// cursor's time part carries it; its id part is not needed).
    pub fn push_key(&self, sql: &mut Sql, key_col: &str) {
        if let Some((key, _)) = &self.after {
            sql.push(&format!(" AND {key_col} < ")).bind(*key);
        }
        sql.push(&format!(
            " ORDER BY {key_col} DESC LIMIT {}",
            self.limit + 1
        ));
    }

    /// The list envelope from up to `limit + 1` items with their sort keys.
    pub fn list<T: ToSchema>(
        &self,
        signer: &CursorSigner,
        mut items: Vec<(i64, String, T)>,
    ) -> List<T> {
        let has_more = items.len() as i64 > self.limit;
        items.truncate(self.limit as usize);
        let next_cursor = if has_more {
            items.last().map(|(t, id, _)| signer.encode(*t, id))
        } else {
            None
        };
        List {
            next_cursor,
            has_more,
            ..List::whole(items.into_iter().map(|(_, _, v)| v).collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_forgeries_fail() {
        let s = CursorSigner::new(b"k".to_vec());
        let c = s.encode(42, "msg_abc");
        assert_eq!(s.decode(&c), Some((42, "msg_abc".into())));
        let forged = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode("43:msg_abc"),
            c.split_once('.').unwrap().1
        );
        assert_eq!(s.decode(&forged), None);
        assert_eq!(CursorSigner::new(b"other".to_vec()).decode(&c), None);
        assert_eq!(s.decode("garbage"), None);
    }
}
