//! Attachment downloads, for sent mail (`/emails/:id/attachments/:aid`,
//! `emails:read`) and received mail (`/messages/:id/attachments/:aid`,
//! `mail:read`). The bytes come from strangers, so a browser is told not to
//! guess their type and never to render one that can run script.

use axum::body::Body;
use axum::http::{HeaderValue, header};
use axum::response::Response;

use crate::api::extract::PathId;
use crate::auth::ApiKey;
use crate::core::messages::{self, Attachment, Direction};
use crate::error::ApiError;
use crate::ids::AttachmentKind;
use crate::store::Db;

/// The bytes of attachment `attachment_id` of the message `id` of `direction`
/// (the message is looked up first, so its 404 comes first).
pub async fn download(
    db: &Db,
    key: &ApiKey,
    direction: Direction,
    id: &str,
    attachment_id: PathId<AttachmentKind>,
) -> Result<Response, ApiError> {
    let m = messages::get(db, &key.reach, direction, id)
        .await?
        .ok_or(ApiError::not_found(match direction {
            Direction::Outbound => "email",
            Direction::Inbound => "message",
        }))?;
    let attachment_id = attachment_id.get()?;
    let (a, bytes) = messages::attachment_content(db, &m.id, &attachment_id)
        .await?
        .ok_or(ApiError::not_found("attachment"))?;
    Ok(response(&a, bytes))
}

fn response(a: &Attachment, bytes: Vec<u8>) -> Response {
    let inline = a.inline && !runs_in_a_browser(&a.content_type);
    let mut resp = Response::new(Body::from(bytes));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_str(&a.content_type)
            .unwrap_or(HeaderValue::from_static("application/octet-stream")),
    );
    h.insert(
        header::CONTENT_DISPOSITION,
        content_disposition(inline, &a.filename),
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

/// `attachment; filename="…"` (or `inline`) with the name in plain ASCII,
/// anything else replaced by `_`, and, when that changed it, the exact name
/// as `filename*` (RFC 6266, UTF-8 percent-encoded): a raw UTF-8 name is
/// not a header value every client reads alike.
fn content_disposition(inline: bool, filename: &str) -> HeaderValue {
    let kind = if inline { "inline" } else { "attachment" };
    let plain: String = filename
        .chars()
        .map(|c| {
            if (c.is_ascii_graphic() || c == ' ') && c != '"' && c != '\\' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let mut value = format!("{kind}; filename=\"{plain}\"");
    if plain != filename {
        value.push_str("; filename*=UTF-8''");
        for b in filename.bytes() {
            if b.is_ascii_alphanumeric() || b"!#$&+-.^_`|~".contains(&b) {
                value.push(char::from(b));
            } else {
                value.push_str(&format!("%{b:02X}"));
            }
        }
    }
    // Visible ASCII only, so always a header value.
    HeaderValue::from_str(&value).unwrap_or(HeaderValue::from_static("attachment"))
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
    use proptest::prelude::*;

    use super::*;

    /// The name `filename*` carries, decoded.
    fn extended_name(value: &str) -> Option<String> {
        let encoded = value.split("filename*=UTF-8''").nth(1)?;
        let mut bytes = Vec::new();
        let mut rest = encoded.as_bytes();
        while let Some((&b, tail)) = rest.split_first() {
            if b == b'%' {
                let hex = std::str::from_utf8(tail.get(..2)?).ok()?;
                bytes.push(u8::from_str_radix(hex, 16).ok()?);
                rest = &tail[2..];
            } else {
                bytes.push(b);
                rest = tail;
            }
        }
        String::from_utf8(bytes).ok()
    }

    #[test]
    fn plain_names_stay_plain_and_others_travel_encoded() {
        let v = content_disposition(false, "report 2026.pdf");
        assert_eq!(v, "attachment; filename=\"report 2026.pdf\"");
        let v = content_disposition(true, "M\u{e4}rz \"final\".pdf");
        let v = v.to_str().unwrap();
        assert!(v.starts_with("inline; filename=\"M_rz _final_.pdf\"; filename*=UTF-8''M%C3%A4rz%20%22final%22.pdf"), "{v}");
        assert_eq!(extended_name(v).as_deref(), Some("M\u{e4}rz \"final\".pdf"));
    }

    proptest! {
        #[test]
        fn any_file_name_makes_a_header_that_gives_it_back(name in any::<String>(), inline in any::<bool>()) {
            let v = content_disposition(inline, &name);
            let text = v.to_str().expect("visible ASCII");
            prop_assert!(text.is_ascii());
            let given = extended_name(text).unwrap_or_else(|| {
                text.split("filename=\"").nth(1).and_then(|r| r.strip_suffix('"')).unwrap_or_default().to_string()
            });
            prop_assert_eq!(given, name);
        }
    }

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
