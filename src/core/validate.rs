//! Edge validation of the small value types every resource uses.

/// What [`domain_name`] takes, as the document's pattern: a little
/// narrower (the function also trims whitespace and trailing dots, and
/// takes a last label that starts with a digit if it is not all digits).
pub const DOMAIN_NAME_PATTERN: &str = "^([a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?\\.)+[a-zA-Z]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?\\.?$";

/// A lower-case DNS name of at least two labels: letters, digits and inner hyphens.
pub fn domain_name(raw: &str) -> Result<String, String> {
    let name = raw.trim().trim_end_matches('.').to_ascii_lowercase();
    if name.is_empty() {
        return Err("a domain name is required".into());
    }
    if name.len() > 253 {
        return Err("a domain name is at most 253 characters".into());
    }
    let labels: Vec<&str> = name.split('.').collect();
    if labels.len() < 2 {
        return Err(format!("{raw:?} is not a domain name (it needs a dot)"));
    }
    for label in &labels {
        let ok = !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-');
        if !ok {
            return Err(format!("{raw:?} is not a valid domain name"));
        }
    }
    if labels
        .last()
        .is_some_and(|tld| tld.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(format!("{raw:?} is not a domain name"));
    }
    Ok(name)
}

/// A bare address `local@domain`, returned lower-case. The local part is
/// ASCII: SES takes no other (it has no SMTPUTF8), and lower-casing ASCII
/// keeps the address as long as it was and valid.
pub fn address(raw: &str) -> Result<String, String> {
    let s = raw.trim();
    if s.is_empty() {
        return Err("an email address is required".into());
    }
    if s.len() > 254 {
        return Err(format!("{s:?} is longer than 254 characters"));
    }
    let Some((local, domain)) = s.rsplit_once('@') else {
        return Err(format!("{s:?} is not an email address"));
    };
    let local_ok = !local.is_empty()
        && local.len() <= 64
        && !local.starts_with('.')
        && !local.ends_with('.')
        && !local.contains("..")
        && local
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "!#$%&'*+-/=?^_`{|}~.".contains(c));
    if !local_ok {
        return Err(format!("{s:?} is not a valid email address"));
    }
    let domain = domain_name(domain).map_err(|_| format!("{s:?} has an invalid domain"))?;
    Ok(format!("{}@{domain}", local.to_ascii_lowercase()))
}

/// `Name <addr>` or `addr`: the display name (if any) and the bare address.
pub fn mailbox(raw: &str) -> Result<(Option<String>, String), String> {
    let s = raw.trim();
    if let Some(open) = s.rfind('<') {
        let Some(inner) = s[open + 1..].strip_suffix('>') else {
            return Err(format!("{s:?} is not of the form Name <address>"));
        };
        // Quotes and white space around the name, in any mix, all go: what
        // is kept reads back the same.
        let name = s[..open].trim_matches(|c: char| c == '"' || c.is_whitespace());
        // Control characters (line breaks, NUL…) have no place in a header,
        // and PostgreSQL cannot store NUL.
        if name.contains(char::is_control) {
            return Err(
                "a display name cannot contain line breaks or other control characters".into(),
            );
        }
        let addr = address(inner)?;
        Ok(((!name.is_empty()).then(|| name.to_string()), addr))
    } else {
        Ok((None, address(s)?))
    }
}

/// `#rrggbb`, returned lower-case.
pub fn color(raw: &str) -> Result<String, String> {
    let ok =
        raw.len() == 7 && raw.starts_with('#') && raw[1..].bytes().all(|b| b.is_ascii_hexdigit());
    if ok {
        Ok(raw.to_ascii_lowercase())
    } else {
        Err(format!("{raw:?} is not a colour of the form #rrggbb"))
    }
}

/// A free-text field of at most `max` characters.
pub fn text(raw: &str, max: usize) -> Result<String, String> {
    if raw.chars().count() > max {
        Err(format!("must be at most {max} characters"))
    } else {
        Ok(raw.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domains() {
        assert_eq!(domain_name("Example.COM.").unwrap(), "example.com");
        for bad in [
            "",
            "localhost",
            "a..b",
            "-a.com",
            "a_b.com",
            "1.2.3.4",
            "a b.com",
        ] {
            assert!(domain_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn addresses_and_mailboxes() {
        assert_eq!(address("Bob@Example.com").unwrap(), "bob@example.com");
        assert!(address("bob").is_err());
        assert!(address("bob@@x.com").is_err());
        assert!(address("a..b@x.com").is_err());
        assert_eq!(
            mailbox("Bob Smith <bob@x.com>").unwrap(),
            (Some("Bob Smith".into()), "bob@x.com".into())
        );
        assert_eq!(
            mailbox("\"Bob\" <bob@x.com>").unwrap().0.as_deref(),
            Some("Bob")
        );
        assert!(mailbox("Bob <bob@x.com").is_err());
    }

    #[test]
    fn local_parts_are_ascii_and_names_have_no_control_characters() {
        assert!(address("jos\u{e9}@x.com").is_err());
        assert!(address("\u{130}\u{130}@x.com").is_err());
        assert!(mailbox("Bob\u{0} <bob@x.com>").is_err());
        assert!(mailbox("Bob\u{7f} <bob@x.com>").is_err());
        // Found by the property test: the name once kept a quote that a
        // second reading dropped.
        assert_eq!(
            mailbox("\u{e9}\"\n\" <a@x.com>").unwrap().0.as_deref(),
            Some("\u{e9}")
        );
        assert_eq!(
            mailbox("Jos\u{e9} \u{212a} <bob@x.com>")
                .unwrap()
                .0
                .as_deref(),
            Some("Jos\u{e9} \u{212a}")
        );
    }

    #[test]
    fn colors() {
        assert_eq!(color("#A0b1C2").unwrap(), "#a0b1c2");
        assert!(color("a0b1c2").is_err());
        assert!(color("#abc").is_err());
        assert!(color("#ggggggg").is_err());
    }

    mod properties {
        use proptest::prelude::*;

        use super::super::*;

        /// Addresses as people type them, plus Unicode, controls and stray
        /// brackets, quotes and at signs.
        fn address_like() -> impl Strategy<Value = String> {
            prop_oneof![
                "[A-Za-z0-9._%+'-]{0,20}@[A-Za-z0-9.-]{0,20}",
                "[a-z]{1,8}(\\.[a-z]{1,8})?@[a-z]{1,10}\\.[a-z]{2,4}\\.?",
                ".{0,30}",
                "( |<|>|\"|@|\\.|a|\u{212a}|\u{130}|\u{0}|\r|\n){0,20}",
            ]
        }

        proptest! {
            #[test]
            fn accepted_addresses_round_trip(raw in address_like()) {
                if let Ok(a) = address(&raw) {
                    prop_assert_eq!(address(&a), Ok(a.clone()));
                    prop_assert!(a.is_ascii() && a.len() <= 254, "{:?}", a);
                    prop_assert_eq!(a.to_ascii_lowercase(), a.clone());
                    prop_assert_eq!(a.matches('@').count(), 1);
                }
            }

            #[test]
            fn accepted_domains_round_trip(raw in prop_oneof!["[A-Za-z0-9.-]{0,30}", ".{0,20}"]) {
                if let Ok(d) = domain_name(&raw) {
                    prop_assert_eq!(domain_name(&d), Ok(d.clone()));
                }
            }

            #[test]
            fn mailboxes_round_trip(
                name in prop_oneof![".{0,20}", "[ \"<>a\u{e9}\u{0}\n]{0,10}"],
                addr in address_like(),
                bracketed in any::<bool>(),
            ) {
                let raw = if bracketed { format!("{name} <{addr}>") } else { addr.clone() };
                if let Ok((display, bare)) = mailbox(&raw) {
                    prop_assert_eq!(address(&bare), Ok(bare.clone()));
                    let display_ok = display
                        .as_deref()
                        .is_none_or(|n| !n.is_empty() && !n.contains(char::is_control));
                    prop_assert!(display_ok, "{:?}", display);
                    let again = match &display {
                        Some(n) => format!("{n} <{bare}>"),
                        None => bare.clone(),
                    };
                    prop_assert_eq!(mailbox(&again), Ok((display.clone(), bare.clone())));
                }
            }

            #[test]
            fn any_text_is_answered(raw in any::<String>()) {
                let _ = domain_name(&raw);
                let _ = address(&raw);
                let _ = mailbox(&raw);
                let _ = color(&raw);
                prop_assert!(text(&raw, 10).is_ok() == (raw.chars().count() <= 10));
            }
        }
    }
}
