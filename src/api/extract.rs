//! Request extractors that turn every malformed input into the spec's errors.

use std::collections::HashMap;

use axum::body::{Bytes, HttpBody};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use bytes::BytesMut;
use serde::de::DeserializeOwned;
use serde_path_to_error::Segment;

use crate::api::{BODY_LIMIT, body_problems};

mod struct_as_map;
use crate::auth::ApiKey;
use crate::error::{ApiError, Problems};
use struct_as_map::StructAsMap;

/// A request body read whole into one buffer sized by its `Content-Length`
/// (axum's bytes extractor collects chunks and then copies them together,
/// twice the memory of a large body). Over the limit it is 413, before
/// anything is read when the length says so; a body that misses its
/// deadline (see `crate::server`) is 408.
pub struct RawBody(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for RawBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, _: &S) -> Result<Self, Self::Rejection> {
        let declared = req
            .headers()
            .get(axum::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<usize>().ok());
        if declared.is_some_and(|n| n > BODY_LIMIT) {
            return Err(ApiError::PayloadTooLarge);
        }
        let mut body = req.into_body();
        let mut buf = BytesMut::with_capacity(declared.unwrap_or(0));
        while let Some(frame) =
            std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await
        {
            let frame = frame.map_err(|e| match timed_out(&e) {
                Some(timeout) => ApiError::Http {
                    status: StatusCode::REQUEST_TIMEOUT,
                    message: timeout.to_string(),
                },
                None => {
                    ApiError::invalid("body", format!("the request body could not be read: {e}"))
                }
            })?;
            if let Ok(data) = frame.into_data() {
                if buf.len() + data.len() > BODY_LIMIT {
                    return Err(ApiError::PayloadTooLarge);
                }
                buf.extend_from_slice(&data);
            }
        }
        Ok(RawBody(buf.freeze()))
    }
}

/// The body deadline's error (see `crate::server`), if that is why the body
/// could not be read.
fn timed_out<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a std::io::Error> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::TimedOut
        {
            return Some(io);
        }
        source = err.source();
    }
    None
}

/// JSON body. Syntax errors, wrong types, unknown enum values and missing
/// fields are 422 with `param` naming the path of the first bad field and
/// `error` listing them all; a body over the limit is 413.
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let RawBody(bytes) = RawBody::from_request(req, state).await?;
        parse_json(&bytes).map(ApiJson)
    }
}

pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::invalid("body", "a JSON body is required"));
    }
    // Straight into the type: a large body is not held twice on the way.
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let e = match serde_path_to_error::deserialize(StructAsMap(&mut de)) {
        Ok(value) => {
            de.end().map_err(malformed)?;
            return Ok(value);
        }
        Err(e) => e,
    };
    let path: Vec<Segment> = e.path().iter().cloned().collect();
    let inner = e.into_inner();
    if inner.is_syntax() || inner.is_eof() {
        return Err(malformed(inner));
    }
    let first = body_problems::failure(path, inner);
    if bytes.len() > THOROUGH_UP_TO {
        return Err(ApiError::Invalid(vec![first.problem]));
    }
    // The type stopped at its first problem; look on for the others.
    let value: serde_json::Value = serde_json::from_slice(bytes).map_err(malformed)?;
    let problems = match body_problems::first_failure::<T>(&value) {
        Some(first) => body_problems::all::<T>(value, first),
        None => vec![first.problem],
    };
    Err(ApiError::Invalid(problems))
}

/// Bodies up to this size have every problem listed; a larger one (an
/// attachment's megabytes) its first, so as not to hold it twice more.
const THOROUGH_UP_TO: usize = 1024 * 1024;

fn malformed(e: serde_json::Error) -> ApiError {
    ApiError::invalid("body", format!("malformed JSON: {e}"))
}

/// Query parameters as text, read field by field with precise errors.
pub struct Params(pub HashMap<String, String>);

impl<S: Send + Sync> FromRequestParts<S> for Params {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let q = parts.uri.query().unwrap_or("");
        let mut map = HashMap::new();
        for (k, v) in url::form_urlencoded::parse(q.as_bytes()) {
            // PostgreSQL cannot store or compare text with NUL in it.
            if v.contains('\0') {
                return Err(ApiError::invalid(
                    k.as_ref(),
                    "must not contain NUL characters",
                ));
            }
            map.insert(k.into_owned(), v.into_owned());
        }
        Ok(Params(map))
    }
}

impl Params {
    pub fn text(&self, name: &str) -> Option<&str> {
        self.0
            .get(name)
            .map(String::as_str)
            .filter(|s| !s.is_empty())
    }

    /// A typed parameter's text. Given empty (`until=`) it is refused: the
    /// document types it (a date, a boolean, an address, one of a list)
    /// and `""` is none of those; free-text parameters read through
    /// [`Params::text`], where empty means absent.
    pub fn typed(&self, problems: &mut Problems, name: &str) -> Option<&str> {
        let raw = self.0.get(name)?;
        if raw.is_empty() {
            problems.add(name, "an empty value; leave the parameter out instead");
            return None;
        }
        Some(raw)
    }

    /// An address filter, lower-cased; anything else is refused.
    pub fn address(&self, problems: &mut Problems, name: &str) -> Option<String> {
        let raw = self.typed(problems, name)?;
        problems.check(name, crate::core::validate::address(raw))
    }

    /// An id filter (`mbx_…`); a value that cannot be an id of that kind
    /// is refused rather than matching nothing.
    pub fn id(&self, problems: &mut Problems, name: &str, prefix: &str) -> Option<String> {
        let raw = self.typed(problems, name)?;
        if crate::ids::is_id(prefix, raw) {
            Some(raw.to_string())
        } else {
            problems.add(name, format!("{raw:?} is not a {prefix}_ id"));
            None
        }
    }

    pub fn flag(&self, problems: &mut Problems, name: &str) -> Option<bool> {
        match self.typed(problems, name)? {
            "true" | "1" => Some(true),
            "false" | "0" => Some(false),
            other => {
                problems.add(name, format!("expected true or false, got {other:?}"));
                None
            }
        }
    }

    pub fn instant(&self, problems: &mut Problems, name: &str) -> Option<i64> {
        self.parsed_instant(problems, name, crate::clock::parse_instant)
    }

    /// An `until` bound: a date means the end of that day.
    pub fn until(&self, problems: &mut Problems, name: &str) -> Option<i64> {
        self.parsed_instant(problems, name, crate::clock::parse_until)
    }

    fn parsed_instant(
        &self,
        problems: &mut Problems,
        name: &str,
        parse: fn(&str) -> Option<i64>,
    ) -> Option<i64> {
        let raw = self.typed(problems, name)?;
        let t = parse(raw);
        if t.is_none() {
            problems.add(
                name,
                format!("expected a date (2026-11-22) or an ISO 8601 timestamp, got {raw:?}"),
            );
        }
        t
    }
}

/// The authenticated key, put in place by the auth middleware.
pub struct Auth(pub ApiKey);

impl<S: Send + Sync> FromRequestParts<S> for Auth {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<ApiKey>()
            .cloned()
            .map(Auth)
            .ok_or(ApiError::Unauthorized)
    }
}

/// Double option for PATCH fields where `null` means "clear".
pub fn nullable<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    serde::Deserialize::deserialize(d).map(Some)
}
