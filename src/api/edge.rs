//! The HTTP edge every request passes: request heads over our limits, and
//! bodies declared longer than the body limit, are refused with the spec's
//! JSON error (hyper's own, higher limits answer with
//! an empty body), and any error reply made below the handlers (axum's
//! rejections, 405) is given the `{error, code}` envelope.

use axum::body::to_bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::api::BODY_LIMIT;
use crate::config::HttpSettings;
use crate::error::ApiError;

/// Request headers answered with a JSON 431 above this count; hyper's
/// backstop is higher (see `crate::server`).
pub const MAX_HEADER_COUNT: usize = 100;

/// Framework error bodies longer than this are not quoted in the envelope.
const QUOTED_BODY_LIMIT: usize = 1024;

/// The limits the edge checks; a small copy, not the whole `AppState`, is
/// cloned into each request.
#[derive(Debug, Clone, Copy)]
pub struct HeadLimits {
    pub max_header_bytes: usize,
    pub max_uri_bytes: usize,
}

impl From<&HttpSettings> for HeadLimits {
    fn from(http: &HttpSettings) -> HeadLimits {
        HeadLimits {
            max_header_bytes: http.max_header_bytes,
            max_uri_bytes: http.max_uri_bytes,
        }
    }
}

pub async fn edge(State(limits): State<HeadLimits>, req: Request, next: Next) -> Response {
    if let Err(e) = check_head(&req, limits) {
        return e.into_response();
    }
    let resp = next.run(req).await;
    if resp.status().is_success() || is_json(&resp) {
        return resp;
    }
    envelope(resp).await
}

/// Whether a path holds a percent-encoded NUL (a raw one cannot reach here).
fn has_nul(path: &str) -> bool {
    path.as_bytes()
        .windows(3)
        .any(|w| w[0] == b'%' && w[1] == b'0' && w[2] == b'0')
}

fn check_head(req: &Request, limits: HeadLimits) -> Result<(), ApiError> {
    // On every route, also those that read no body: a client about to send
    // more than the limit learns so before sending it.
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > BODY_LIMIT as u64) {
        return Err(ApiError::PayloadTooLarge);
    }
    // No id, name or address holds NUL, and PostgreSQL cannot compare text
    // that does: a path naming one names nothing.
    if has_nul(req.uri().path()) {
        return Err(ApiError::not_found("object"));
    }
    if uri_len(req.uri()) > limits.max_uri_bytes {
        return Err(ApiError::UriTooLong {
            limit: limits.max_uri_bytes,
        });
    }
    let headers = req.headers();
    if headers.len() > MAX_HEADER_COUNT {
        return Err(ApiError::HeadersTooLarge {
            limit: format!("{MAX_HEADER_COUNT} headers"),
        });
    }
    // As on the wire: "name: value\r\n".
    let bytes: usize = headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum();
    if bytes > limits.max_header_bytes {
        return Err(ApiError::HeadersTooLarge {
            limit: format!("{} bytes", limits.max_header_bytes),
        });
    }
    Ok(())
}

fn uri_len(uri: &Uri) -> usize {
    uri.scheme_str().map_or(0, |s| s.len() + 3)
        + uri.authority().map_or(0, |a| a.as_str().len())
        + uri.path_and_query().map_or(0, |p| p.as_str().len())
}

fn is_json(resp: &Response) -> bool {
    resp.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/json"))
}

/// The same reply (status, headers such as `Allow`) with the JSON envelope;
/// a short plain-text reason becomes its `error`.
async fn envelope(resp: Response) -> Response {
    let (mut parts, body) = resp.into_parts();
    let error = match parts.status {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::PayloadTooLarge,
        StatusCode::METHOD_NOT_ALLOWED => ApiError::MethodNotAllowed,
        status => {
            let quoted = to_bytes(body, QUOTED_BODY_LIMIT)
                .await
                .ok()
                .and_then(|b| String::from_utf8(b.to_vec()).ok())
                .map(|t| t.trim().to_string())
                .filter(|t| !t.is_empty());
            let message = quoted.unwrap_or_else(|| {
                status
                    .canonical_reason()
                    .unwrap_or("the request failed")
                    .to_ascii_lowercase()
            });
            ApiError::Http { status, message }
        }
    };
    let fresh = error.into_response();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Response::from_parts(parts, fresh.into_body())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;

    #[tokio::test]
    async fn framework_replies_get_the_envelope_and_keep_their_headers() {
        let resp = Response::builder()
            .status(StatusCode::METHOD_NOT_ALLOWED)
            .header(header::ALLOW, "GET,HEAD")
            .body(Body::empty())
            .unwrap();
        let out = envelope(resp).await;
        assert_eq!(out.status(), 405);
        assert_eq!(out.headers()[header::ALLOW], "GET,HEAD");
        assert!(is_json(&out));
        let body = to_bytes(out.into_body(), 1 << 16).await.unwrap();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["code"], "method_not_allowed");

        let resp = (StatusCode::BAD_REQUEST, "Invalid URL: bad percent-encoding").into_response();
        let out = envelope(resp).await;
        let body = to_bytes(out.into_body(), 1 << 16).await.unwrap();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["code"], "bad_request");
        assert_eq!(v["error"], "Invalid URL: bad percent-encoding");
    }

    #[test]
    fn uri_length_counts_every_part() {
        let uri: Uri = "http://example.com/a/b?c=d".parse().unwrap();
        assert_eq!(uri_len(&uri), "http://example.com/a/b?c=d".len());
        let uri: Uri = "/a?b".parse().unwrap();
        assert_eq!(uri_len(&uri), 4);
    }
}
