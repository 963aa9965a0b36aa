//! Edge validation of the small value types every resource uses.

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

/// A bare address `local@domain`, returned lower-case.
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
            .all(|c| c.is_alphanumeric() || "!#$%&'*+-/=?^_`{|}~.".contains(c));
    if !local_ok {
        return Err(format!("{s:?} is not a valid email address"));
    }
    let domain = domain_name(domain).map_err(|_| format!("{s:?} has an invalid domain"))?;
    Ok(format!("{}@{domain}", local.to_lowercase()))
}

/// `Name <addr>` or `addr`: the display name (if any) and the bare address.
pub fn mailbox(raw: &str) -> Result<(Option<String>, String), String> {
    let s = raw.trim();
    if let Some(open) = s.rfind('<') {
        let Some(inner) = s[open + 1..].strip_suffix('>') else {
            return Err(format!("{s:?} is not of the form Name <address>"));
        };
        let name = s[..open].trim().trim_matches('"').trim();
        if name.contains(['\r', '\n']) {
            return Err("a display name cannot contain line breaks".into());
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
    fn colors() {
        assert_eq!(color("#A0b1C2").unwrap(), "#a0b1c2");
        assert!(color("a0b1c2").is_err());
        assert!(color("#abc").is_err());
        assert!(color("#ggggggg").is_err());
    }
}
