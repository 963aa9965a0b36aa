//! Builds the exact RFC 5322 message handed to the provider.

use mail_builder::MessageBuilder;
use mail_builder::headers::address::Address;
use mail_builder::headers::message_id::MessageId;
use mail_builder::headers::raw::Raw;
use mail_builder::headers::text::Text;

/// One file to attach, already decoded.
#[derive(Debug, Clone)]
pub struct OutgoingAttachment {
    pub filename: String,
    pub content_type: String,
    pub content: Vec<u8>,
    /// When set, the file is embedded inline and referable as `cid:<id>`.
    pub content_id: Option<String>,
}

/// A named address: (display name, bare address).
pub type Named = (Option<String>, String);

#[derive(Debug, Clone, Default)]
pub struct Composition {
    pub from: Named,
    pub to: Vec<Named>,
    pub cc: Vec<Named>,
    pub reply_to: Option<String>,
    pub subject: String,
    pub text: Option<String>,
    pub html: Option<String>,
    /// Without angle brackets.
    pub message_id: String,
    pub in_reply_to: Option<String>,
    pub references: Vec<String>,
    pub headers: Vec<(String, String)>,
    pub attachments: Vec<OutgoingAttachment>,
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

/// Renders the message. Bcc is deliberately absent: it travels only in the envelope.
pub fn compose(c: &Composition) -> std::io::Result<Vec<u8>> {
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
    if let Some(t) = &c.text {
        b = b.text_body(t.clone());
    }
    if let Some(h) = &c.html {
        b = b.html_body(h.clone());
    }
    for a in &c.attachments {
        b = match &a.content_id {
            Some(cid) => b.inline(a.content_type.clone(), cid.clone(), a.content.clone()),
            None => b.attachment(
                a.content_type.clone(),
                a.filename.clone(),
                a.content.clone(),
            ),
        };
    }
    b.write_to_vec()
}

/// Adds the open-tracking image at the end of the HTML body.
pub fn with_tracking_pixel(html: &str, url: &str) -> String {
    let img = format!(
        "<img src=\"{url}\" width=\"1\" height=\"1\" alt=\"\" style=\"display:none;border:0\">"
    );
    match html.to_ascii_lowercase().rfind("</body>") {
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
            text: Some("hi".into()),
            html: Some("<p>hi <img src=\"cid:logo\"></p>".into()),
            message_id: "abc@example.com".into(),
            in_reply_to: Some("prev@x.com".into()),
            references: vec!["first@x.com".into(), "prev@x.com".into()],
            headers: vec![("X-Campaign".into(), "fall".into())],
            attachments: vec![
                OutgoingAttachment {
                    filename: "logo.png".into(),
                    content_type: "image/png".into(),
                    content: vec![1, 2, 3],
                    content_id: Some("logo".into()),
                },
                OutgoingAttachment {
                    filename: "report.pdf".into(),
                    content_type: "application/pdf".into(),
                    content: b"%PDF".to_vec(),
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
                    text: Some("hi".into()),
                    message_id: "m@x.com".into(),
                    headers: vec![("X-Custom".into(), value.clone())],
                    attachments: vec![OutgoingAttachment {
                        filename,
                        content_type: "application/pdf".into(),
                        content: vec![1, 2, 3],
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
