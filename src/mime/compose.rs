//! Builds the exact RFC 5322 message handed to the provider.

use bytes::Bytes;
use mail_builder::MessageBuilder;
use mail_builder::headers::address::Address;
use mail_builder::headers::message_id::MessageId;
use mail_builder::headers::raw::Raw;
use mail_builder::headers::text::Text;

/// One file to attach, already decoded; its bytes are shared by the
/// message built from it and the record of the send.
#[derive(Debug, Clone)]
pub struct OutgoingAttachment {
    pub filename: String,
    pub content_type: String,
    pub content: Bytes,
    /// When set, the file is embedded inline and referable as `cid:<id>`.
    pub content_id: Option<String>,
}

/// A named address: (display name, bare address).
pub type Named = (Option<String>, String);

/// What to build; the bodies and attachments, which may be large, are
/// borrowed.
#[derive(Debug, Clone, Default)]
pub struct Composition<'a> {
    pub from: Named,
    pub to: Vec<Named>,
    pub cc: Vec<Named>,
    pub reply_to: Option<String>,
    pub subject: String,
    pub text: Option<&'a str>,
    pub html: Option<&'a str>,
    /// Without angle brackets.
    pub message_id: String,
    pub in_reply_to: Option<String>,
    pub references: Vec<String>,
    pub headers: Vec<(String, String)>,
    pub attachments: &'a [OutgoingAttachment],
    /// Unix seconds for the Date header.
    pub date: i64,
}

fn address(n: &Named) -> Address<'static> {
    match &n.0 {
        Some(name) => Address::new_address(Some(name.clone()), n.1.clone()),
        None => Address::new_address(None::<String>, n.1.clone()),
    }
}

fn list(items: &[Named]) -> Address<'static> {
    Address::new_list(items.iter().map(address).collect())
}

/// About how many bytes [`compose`] writes for `c`: bodies as base64 at
/// worst, attachments as base64 in lines of 76, and room for headers.
fn estimated_size(c: &Composition<'_>) -> usize {
    let encoded = |n: usize| n.div_ceil(57) * 78;
    let bodies = encoded(c.text.map_or(0, str::len)) + encoded(c.html.map_or(0, str::len));
    let files: usize = c
        .attachments
        .iter()
        .map(|a| encoded(a.content.len()) + 512)
        .sum();
    bodies + files + 8192
}

/// Renders the message. Bcc is deliberately absent: it travels only in the
/// envelope. Bodies and attachments are encoded straight from the borrowed
/// bytes into one buffer sized up front: a large message is not copied on
/// the way, nor regrown.
pub fn compose(c: &Composition<'_>) -> std::io::Result<Vec<u8>> {
    let mut b = MessageBuilder::new()
        .from(address(&c.from))
        .subject(Text::new(c.subject.clone()))
        .message_id(MessageId::new(c.message_id.clone()))
        .date(c.date);
    if !c.to.is_empty() {
        b = b.to(list(&c.to));
    }
    if !c.cc.is_empty() {
        b = b.cc(list(&c.cc));
    }
    if let Some(r) = &c.reply_to {
        b = b.reply_to(Address::new_address(None::<String>, r.clone()));
    }
    if let Some(irt) = &c.in_reply_to {
        b = b.in_reply_to(MessageId::new(irt.clone()));
    }
    if !c.references.is_empty() {
        b = b.references(MessageId::new_list(c.references.iter().cloned()));
    }
    for (name, value) in &c.headers {
        b = b.header(name.clone(), Raw::new(value.clone()));
    }
    if let Some(t) = c.text {
        b = b.text_body(t);
    }
    if let Some(h) = c.html {
        b = b.html_body(h);
    }
    for a in c.attachments {
        b = match &a.content_id {
            Some(cid) => b.inline(a.content_type.clone(), cid.clone(), a.content.as_ref()),
            None => b.attachment(
                a.content_type.clone(),
                a.filename.clone(),
                a.content.as_ref(),
            ),
        };
    }
    let mut out = Vec::with_capacity(estimated_size(c));
    b.write_to(&mut out)?;
    Ok(out)
}

/// Adds the open-tracking image at the end of the HTML body.
pub fn with_tracking_pixel(html: &str, url: &str) -> String {
    let img = format!(
        "<img src=\"{url}\" width=\"1\" height=\"1\" alt=\"\" style=\"display:none;border:0\">"
    );
    // Found without a lower-case copy of a body that may be large.
    let tag = b"</body>";
    let at = (0..html.len()).rev().find(|&i| {
        html.as_bytes()
            .get(i..i + tag.len())
            .is_some_and(|w| w.eq_ignore_ascii_case(tag))
    });
    match at {
        Some(pos) => format!("{}{img}{}", &html[..pos], &html[pos..]),
        None => format!("{html}{img}"),
    }
}

/// Crude but safe text from HTML, for search and snippets.
pub fn html_to_text(html: &str) -> String {
    let mut out = String::with_capacity(html.len());
    let mut in_tag = false;
    for ch in html.chars() {
        match ch {
            '<' => in_tag = true,
            '>' if in_tag => {
                in_tag = false;
                out.push(' ');
            }
            _ if !in_tag => out.push(ch),
            _ => {}
        }
    }
    out.replace("&nbsp;", " ")
        .replace("&amp;", "&")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn composes_headers_bodies_and_inline_parts() {
        let c = Composition {
            from: (Some("Support Team".into()), "support@example.com".into()),
            to: vec![(None, "a@x.com".into())],
            cc: vec![(Some("B".into()), "b@x.com".into())],
            reply_to: Some("help@example.com".into()),
            subject: "Hello ünïcode".into(),
            text: Some("hi"),
            html: Some("<p>hi <img src=\"cid:logo\"></p>"),
            message_id: "abc@example.com".into(),
            in_reply_to: Some("prev@x.com".into()),
            references: vec!["first@x.com".into(), "prev@x.com".into()],
            headers: vec![("X-Campaign".into(), "fall".into())],
            attachments: &[
                OutgoingAttachment {
                    filename: "logo.png".into(),
                    content_type: "image/png".into(),
                    content: Bytes::from_static(&[1, 2, 3]),
                    content_id: Some("logo".into()),
                },
                OutgoingAttachment {
                    filename: "report.pdf".into(),
                    content_type: "application/pdf".into(),
                    content: Bytes::from_static(b"%PDF"),
                    content_id: None,
                },
            ],
            date: 1_795_305_600,
        };
        let raw = String::from_utf8(compose(&c).unwrap()).unwrap();
        assert!(raw.contains("Message-ID: <abc@example.com>"), "{raw}");
        assert!(raw.contains("In-Reply-To: <prev@x.com>"));
        assert!(raw.contains("References: <first@x.com>"));
        assert!(raw.contains("X-Campaign: fall"));
        assert!(raw.contains("Content-ID: <logo>"));
        assert!(raw.contains("filename=\"report.pdf\"") || raw.contains("filename=report.pdf"));
        assert!(raw.contains("\"Support Team\" <support@example.com>"));
        assert!(!raw.to_ascii_lowercase().contains("bcc:"));
    }

    #[test]
    fn pixel_goes_before_the_body_close() {
        let h = with_tracking_pixel("<html><body>x</body></html>", "http://h/t/o/abc");
        assert!(h.ends_with("<img src=\"http://h/t/o/abc\" width=\"1\" height=\"1\" alt=\"\" style=\"display:none;border:0\"></body></html>"));
        assert!(with_tracking_pixel("x", "u").starts_with("x<img"));
        // Any case; the last one; bodies shorter than the tag.
        let h = with_tracking_pixel("<BODY>a</BoDy>b</Body>", "u");
        assert!(h.starts_with("<BODY>a</BoDy>b<img src=\"u\""), "{h}");
        assert!(h.ends_with("></Body>"), "{h}");
        assert!(with_tracking_pixel("</bod", "u").starts_with("</bod<img"));
        assert!(with_tracking_pixel("", "u").starts_with("<img"));
    }

    mod properties {
        use mail_parser::MessageParser;
        use proptest::prelude::*;

        use super::super::*;

        /// What validation lets into a header: no control character but tab.
        fn header_text() -> impl Strategy<Value = String> {
            prop_oneof![
                "([^\\p{Cc}]|\t){0,60}",
                "( |=|\\?|\"|;|:|a|\u{e9}|\u{212a}|\u{1f426}){0,30}"
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(128))]

            /// Any values validation accepts compose into a message that
            /// parses back with the same sender, one custom header holding
            /// the value and one attachment: nothing a value holds can add
            /// or break a header.
            #[test]
            fn validated_values_compose_into_parseable_mail(
                subject in header_text(),
                name in "[^\\p{Cc}]{0,20}",
                value in header_text(),
                filename in "([^\\p{Cc}]|\t){1,40}",
            ) {
                let name = Some(name.trim().to_string()).filter(|n| !n.is_empty());
                let c = Composition {
                    from: (name, "a@x.com".into()),
                    to: vec![(None, "b@y.com".into())],
                    subject: subject.clone(),
                    text: Some("hi"),
                    message_id: "m@x.com".into(),
                    headers: vec![("X-Custom".into(), value.clone())],
                    attachments: &[OutgoingAttachment {
                        filename,
                        content_type: "application/pdf".into(),
                        content: vec![1, 2, 3].into(),
                        content_id: None,
                    }],
                    date: 1_795_305_600,
                    ..Composition::default()
                };
                let raw = compose(&c).expect("compose");
                let parsed = MessageParser::default().parse(&raw).expect("parse");
                let from = parsed.from().and_then(|a| a.first()).and_then(|a| a.address());
                prop_assert_eq!(from, Some("a@x.com"));
                let custom: Vec<&str> = parsed
                    .headers_raw()
                    .filter(|(n, _)| n.eq_ignore_ascii_case("X-Custom"))
                    .map(|(_, v)| v)
                    .collect();
                prop_assert_eq!(custom.len(), 1);
                // Long values are folded, which may add white space.
                let words = |s: &str| s.split_whitespace().map(str::to_string).collect::<Vec<_>>();
                prop_assert_eq!(words(custom[0]), words(&value));
                prop_assert_eq!(parsed.attachment_count(), 1);
                prop_assert_eq!(parsed.message_id(), Some("m@x.com"));
            }

            #[test]
            fn the_pixel_goes_in_whatever_the_html(html in any::<String>()) {
                let out = with_tracking_pixel(&html, "u");
                prop_assert_eq!(out.len(), html.len() + with_tracking_pixel("", "u").len());
                let _ = html_to_text(&html);
            }
        }
    }
}
