//! Reading a paged list's `limit` and `cursor` from a request; the paging
//! itself lives in `core::paging`.

use serde::Deserialize;
use utoipa::IntoParams;

pub use crate::core::paging::{CursorSigner, DEFAULT_LIMIT, MAX_LIMIT, Page};

use crate::api::extract::Params;
use crate::error::Problems;

/// The paging parameters every paged list takes.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PageQuery {
    /// Page size, 1 to 100; default 25.
    #[param(minimum = 1, maximum = 100, default = 25)]
    pub limit: Option<i64>,
    /// The `next_cursor` of the previous page, passed back untouched.
    pub cursor: Option<String>,
}

/// Reads `limit` and `cursor` into a [`Page`].
pub trait ReadPage {
    fn page(&self, params: &Params, problems: &mut Problems) -> Page;
}

impl ReadPage for CursorSigner {
    /// Reads `limit` and `cursor`, recording problems.
    fn page(&self, params: &Params, problems: &mut Problems) -> Page {
        let limit = match params.typed(problems, "limit") {
            None => DEFAULT_LIMIT,
            Some(raw) => match raw.parse::<i64>() {
                Ok(n) if (1..=MAX_LIMIT).contains(&n) => n,
                _ => {
                    problems.add(
                        "limit",
                        format!("must be a whole number from 1 to {MAX_LIMIT}"),
                    );
                    DEFAULT_LIMIT
                }
            },
        };
        let after = params.text("cursor").and_then(|c| {
            let decoded = self.decode(c);
            if decoded.is_none() {
                problems.add(
                    "cursor",
                    "not a cursor this service issued; pass next_cursor back untouched",
                );
            }
            decoded
        });
        Page { limit, after }
    }
}
