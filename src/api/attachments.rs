//! Attachment downloads, for sent mail (`/emails/:id/attachments/:aid`,
//! `emails:read`) and received mail (`/messages/:id/attachments/:aid`,
//! `mail:read`). The bytes come from strangers, so a browser is told not to
//! guess their type and never to render one that can run script.

use axum::body::Body;
use axum::http::{HeaderValue, header};
use axum::response::Response;

use crate::auth::ApiKey;
use crate::core::messages::{self, Attachment, Direction};
use crate::error::ApiError;
use crate::store::Db;

/// The bytes of attachment `attachment_id` of the message `id` of `direction`.
pub async fn download(
    db: &Db,
    key: &ApiKey,
    direction: Direction,
    id: &str,
    attachment_id: &str,
) -> Result<Response, ApiError> {
    let m = messages::get(db, &key.reach, direction, id)
        .await?
        .ok_or(ApiError::NotFound(match direction {
            Direction::Outbound => "email",
            Direction::Inbound => "message",
        }))?;
    let (a, bytes) = messages::attachment_content(db, &m.id, attachment_id)
        .await?
        .ok_or(ApiError::NotFound("attachment"))?;
    Ok(response(&a, bytes))
}

fn response(a: &Attachment, bytes: Vec<u8>) -> Response {
    let inline = a.inline && !runs_in_a_browser(&a.content_type);
    let disposition = format!(
        "{}; filename=\"{}\"",
        if inline { "inline" } else { "attachment" },
        a.filename.replace(['"', '\\', '\r', '\n'], "_")
    );
    let mut resp = Response::new(Body::from(bytes));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_str(&a.content_type)
            .unwrap_or(HeaderValue::from_static("application/octet-stream")),
    );
    h.insert(
        header::CONTENT_DISPOSITION,
        HeaderValue::from_str(&disposition).unwrap_or(HeaderValue::from_static("attachment")),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    // Should a browser render it anyway, it gets no script and no origin.
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'none'; style-src 'unsafe-inline'; sandbox"),
    );
    resp
}

/// Types a browser would render as a document able to run script: HTML,
/// SVG and other XML, JavaScript. These are always served as `attachment`.
pub fn runs_in_a_browser(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let (kind, subtype) = essence.split_once('/').unwrap_or((essence.as_str(), ""));
    subtype.is_empty()
        || subtype == "html"
        || subtype == "xml"
        || subtype.ends_with("+xml")
        || subtype.contains("javascript")
        || subtype.contains("ecmascript")
        || subtype == "xsl"
        || subtype == "xslt+xml"
        || (kind == "application" && subtype == "x-shockwave-flash")
}

#[cfg(test)]
mod tests {
    use super::runs_in_a_browser;

    #[test]
    fn active_types_are_recognised_whatever_their_case_and_parameters() {
        for t in [
            "text/html",
            "TEXT/HTML; charset=utf-8",
            "image/svg+xml",
            "application/xhtml+xml",
            "text/xml",
            "application/xml",
            "text/javascript",
            "application/javascript",
            "application/x-javascript",
            "application/ecmascript",
            "garbage",
            "",
        ] {
            assert!(runs_in_a_browser(t), "{t}");
        }
        for t in [
            "image/png",
            "application/pdf",
            "text/plain",
            "image/jpeg; x=1",
        ] {
            assert!(!runs_in_a_browser(t), "{t}");
        }
    }
}
