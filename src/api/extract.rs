//! Request extractors that turn every malformed input into the spec's errors.

use std::collections::HashMap;

use axum::body::{Bytes, HttpBody};
use axum::extract::rejection::PathRejection;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use bytes::BytesMut;
use serde::de::DeserializeOwned;
use serde_path_to_error::Segment;

use crate::api::{BODY_LIMIT, body_problems};

mod struct_as_map;
use crate::auth::ApiKey;
use crate::error::{ApiError, Problems};
use crate::ids::{Id, IdKind};
use crate::model::query::{Address, Query, QueryParam};
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
        return Err(ApiError::invalid_all(vec![first.problem]));
    }
    // The type stopped at its first problem; look on for the others.
    let value: serde_json::Value = serde_json::from_slice(bytes).map_err(malformed)?;
    let problems = match body_problems::first_failure::<T>(&value) {
        Some(first) => body_problems::all::<T>(value, first),
        None => vec![first.problem],
    };
    Err(ApiError::invalid_all(problems))
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

    /// The query struct `Q`, each field read by its own name (see
    /// `crate::model::query`); its problems join `problems` in field order.
    pub fn query<Q: Query>(&self, problems: &mut Problems) -> Q {
        let mut found = Vec::new();
        let q = Q::read(|name| self.0.get(name).map(String::as_str), &mut found);
        for (name, message) in found {
            problems.add(name, message);
        }
        q
    }
}

/// An address filter, lower-cased; anything else is refused.
impl QueryParam for Address {
    fn parse(raw: &str) -> Result<Self, String> {
        crate::core::validate::address(raw).map(Address)
    }
}

/// A path segment naming an object by its id of kind `K` (`thr_…`).
///
/// Reading it never fails the request (but for a segment that is not
/// UTF-8, the framework's 400 as before): a segment that cannot be such an
/// id names nothing, and [`PathId::get`] answers the 404 a lookup of it
/// would give, `{error: "<noun> not found"}`. The handler takes the id where
/// it looked the object up, after its scope, query and body checks, so a
/// key lacking the scope still gets 403 and a bad body still 422.
pub struct PathId<K>(Option<Id<K>>);

impl<K: IdKind> PathId<K> {
    /// The id, or 404 `<noun> not found` when the segment cannot be one.
    pub fn get(self) -> Result<Id<K>, ApiError> {
        self.0.ok_or(ApiError::not_found(K::NOUN))
    }
}

/// One segment of a path of two (see [`PathIds`]): an id checked as a
/// [`PathId`], or text as given (an id or a provider's message id).
pub trait PathSegment: Sized {
    fn from_segment(raw: String) -> Self;
}

impl PathSegment for String {
    fn from_segment(raw: String) -> Self {
        raw
    }
}

impl<K: IdKind> PathSegment for PathId<K> {
    fn from_segment(raw: String) -> Self {
        PathId(Id::parse(&raw))
    }
}

impl<S: Send + Sync, K: IdKind> FromRequestParts<S> for PathId<K> {
    type Rejection = PathRejection;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Path(raw) = Path::<String>::from_request_parts(parts, state).await?;
        Ok(PathId::from_segment(raw))
    }
}

/// The two segments of `/…/{id}/attachments/{attachment_id}`.
pub struct PathIds<A, B>(pub A, pub B);

impl<S: Send + Sync, A: PathSegment, B: PathSegment> FromRequestParts<S> for PathIds<A, B> {
    type Rejection = PathRejection;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Path((a, b)) = Path::<(String, String)>::from_request_parts(parts, state).await?;
        Ok(PathIds(A::from_segment(a), B::from_segment(b)))
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
