//! The `Authentication-Results` header (RFC 8601) of inbound mail: the one
//! this server adds, and the removal of any the sender wrote under our name.

use crate::core::dkim::DkimCheck;
use crate::core::dmarc::DmarcCheck;
use crate::core::spf::{Identity, SpfCheck};
use crate::mime::header_fields;

/// `Authentication-Results: <authserv_id>; spf=<result> smtp.mailfrom=<…>`
/// (or `smtp.helo=` for the null sender), one `dkim=` per signature
/// (`dkim=none` for an unsigned message), then `dmarc=`, with its CRLF.
pub fn header(authserv_id: &str, spf: &SpfCheck, dkim: &[DkimCheck], dmarc: &DmarcCheck) -> String {
    let (property, value) = match &spf.identity {
        Identity::MailFrom(address) => ("smtp.mailfrom", address),
        Identity::Helo(name) => ("smtp.helo", name),
    };
    let mut h = format!(
        "Authentication-Results: {authserv_id};\r\n\tspf={} {property}={}",
        spf.result.as_str(),
        pvalue(value)
    );
    if dkim.is_empty() {
        h.push_str(";\r\n\tdkim=none");
    }
    for check in dkim {
        h.push_str(&format!(";\r\n\tdkim={}", check.result.as_str()));
        for (property, value) in [
            ("header.d", &check.domain),
            ("header.s", &check.selector),
            ("header.b", &check.b),
        ] {
            if !value.is_empty() {
                h.push_str(&format!(" {property}={}", pvalue(value)));
            }
        }
    }
    h.push_str(&format!(";\r\n\tdmarc={}", dmarc.result.as_str()));
    if let Some(policy) = &dmarc.policy {
        h.push_str(&format!(" (p={})", pvalue(policy)));
    }
    if !dmarc.from_domain.is_empty() {
        h.push_str(&format!(" header.from={}", pvalue(&dmarc.from_domain)));
    }
    h.push_str("\r\n");
    h
}

/// A property value (RFC 8601 §2.2): as is when it is a MIME token or a
/// plain `local@domain`, otherwise a quoted-string, so that nothing a client
/// sent can end the field early.
fn pvalue(value: &str) -> String {
    let token = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_graphic() && !"()<>@,;:\\\"/[]?=".contains(c))
    };
    let atext = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "!#$%&'*+-/=?^_`{|}~.".contains(c))
    };
    let plain = token(value)
        || value.rsplit_once('@').is_some_and(|(local, domain)| {
            (local.is_empty() || atext(local))
                && !domain.is_empty()
                && domain
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        });
    if plain {
        return value.to_owned();
    }
    let mut quoted = String::from("\"");
    for c in value.chars().filter(|c| !c.is_control()) {
        if c == '"' || c == '\\' {
            quoted.push('\\');
        }
        quoted.push(c);
    }
    quoted.push('"');
    quoted
}

/// Removes from the header section of `raw` every `Authentication-Results`
/// field whose authserv-id is `authserv_id` (RFC 8601 §5: only we may speak
/// for ourselves); fields of other authserv-ids stay. Returns how many
/// fields were removed.
pub fn strip_claimed(raw: &mut Vec<u8>, from: usize, authserv_id: &str) -> usize {
    let ours = authserv_id.trim_end_matches('.');
    let remove: Vec<(usize, usize)> = header_fields::fields(raw.get(from..).unwrap_or_default())
        .filter(|f| {
            f.is("Authentication-Results")
                && authserv_id_of(f.value).is_some_and(|id| id.eq_ignore_ascii_case(ours))
        })
        .map(|f| (from + f.start, from + f.start + f.raw.len()))
        .collect();
    for (start, end) in remove.iter().rev() {
        raw.drain(*start..*end);
    }
    remove.len()
}

/// The authserv-id at the start of a field value, after any folding
/// white space and comments; the trailing dot of a domain is dropped.
fn authserv_id_of(value: &[u8]) -> Option<String> {
    let mut i = 0;
    let mut depth = 0usize;
    while i < value.len() {
        match value[i] {
            b'(' => depth += 1,
            b')' if depth > 0 => depth -= 1,
            b'\\' if depth > 0 => i += 1,
            b' ' | b'\t' | b'\r' | b'\n' => {}
            _ if depth > 0 => {}
            _ => break,
        }
        i += 1;
    }
    let rest = value.get(i..)?;
    let id = if let Some(quoted) = rest.strip_prefix(b"\"") {
        let close = quoted.iter().position(|b| *b == b'"')?;
        &quoted[..close]
    } else {
        let len = rest
            .iter()
            .position(|b| matches!(b, b' ' | b'\t' | b'\r' | b'\n' | b';' | b'('))
            .unwrap_or(rest.len());
        &rest[..len]
    };
    let id = String::from_utf8_lossy(id);
    let id = id.trim_end_matches('.');
    (!id.is_empty()).then(|| id.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::dkim::DkimResult;
    use crate::core::dmarc::DmarcResult;

    fn no_from() -> DmarcCheck {
        DmarcCheck {
            result: DmarcResult::PermError,
            from_domain: String::new(),
            policy: None,
        }
    }
    use crate::core::spf::SpfResult;

    #[test]
    fn our_header_names_the_identity_safely() {
        let spf = SpfCheck {
            result: SpfResult::Pass,
            identity: Identity::MailFrom("ann@external.test".into()),
        };
        assert_eq!(
            header("mx.ours.test", &spf, &[], &no_from()),
            "Authentication-Results: mx.ours.test;\r\n\tspf=pass smtp.mailfrom=ann@external.test;\r\n\tdkim=none;\r\n\tdmarc=permerror\r\n"
        );
        let spf = SpfCheck {
            result: SpfResult::None,
            identity: Identity::Helo("client.test".into()),
        };
        let dkim = [
            DkimCheck {
                result: DkimResult::Pass,
                domain: "football.example.com".into(),
                selector: "brisbane".into(),
                b: "/gCrinpc".into(),
            },
            DkimCheck {
                result: DkimResult::Neutral,
                domain: String::new(),
                selector: "x y".into(),
                b: String::new(),
            },
        ];
        assert_eq!(
            header(
                "mx.ours.test",
                &spf,
                &dkim,
                &DmarcCheck {
                    result: DmarcResult::Pass,
                    from_domain: "football.example.com".into(),
                    policy: Some("reject".into()),
                }
            ),
            "Authentication-Results: mx.ours.test;\r\n\tspf=none smtp.helo=client.test;\r\n\
             \tdkim=pass header.d=football.example.com header.s=brisbane header.b=\"/gCrinpc\";\r\n\
             \tdkim=neutral header.s=\"x y\";\r\n\
             \tdmarc=pass (p=reject) header.from=football.example.com\r\n"
        );
        let spf = SpfCheck {
            result: SpfResult::Fail,
            identity: Identity::MailFrom("\"odd; x\"\r\nX-Evil: 1@a.test".into()),
        };
        let h = header("mx.ours.test", &spf, &[], &no_from());
        assert!(
            h.contains("spf=fail smtp.mailfrom=\"\\\"odd; x\\\"X-Evil: 1@a.test\";"),
            "{h}"
        );
        assert_eq!(h.matches("\r\n").count(), 4);
        assert_eq!(pvalue("@bank.test"), "@bank.test");
        assert_eq!(pvalue("a=b"), "\"a=b\"");
    }

    #[test]
    fn only_fields_claiming_our_name_are_stripped() {
        let mut raw = b"Received: from a\r\n\tby b\r\n\
Authentication-Results: mx.ours.test; spf=pass smtp.mailfrom=x@bank.test\r\n\
authentication-results :  (forged)\r\n  MX.Ours.Test. 1;\r\n\tdkim=pass header.d=bank.test\r\n\
Authentication-Results: mx.ours.test.evil.test; spf=fail\r\n\
Authentication-Results: upstream.test; spf=pass smtp.mailfrom=y@z.test\r\n\
ARC-Authentication-Results: i=1; mx.ours.test; spf=pass\r\n\
Subject: hi\r\n\
\r\n\
Authentication-Results: mx.ours.test; spf=pass (in the body: kept)\r\n"
            .to_vec();
        assert_eq!(strip_claimed(&mut raw, 0, "mx.ours.test"), 2);
        assert_eq!(
            String::from_utf8(raw).unwrap(),
            "Received: from a\r\n\tby b\r\n\
Authentication-Results: mx.ours.test.evil.test; spf=fail\r\n\
Authentication-Results: upstream.test; spf=pass smtp.mailfrom=y@z.test\r\n\
ARC-Authentication-Results: i=1; mx.ours.test; spf=pass\r\n\
Subject: hi\r\n\
\r\n\
Authentication-Results: mx.ours.test; spf=pass (in the body: kept)\r\n"
        );
    }

    #[test]
    fn odd_inputs_never_panic() {
        for raw in [
            &b""[..],
            b"Authentication-Results:",
            b"Authentication-Results: (unclosed",
            b"Authentication-Results: \"mx.ours.test\"; spf=pass",
            b"Authentication-Results: mx.ours.test",
            b"no colon at all\n\nbody",
            b"\n",
        ] {
            let mut v = raw.to_vec();
            strip_claimed(&mut v, 0, "mx.ours.test");
        }
        let mut v = b"Authentication-Results: mx.ours.test".to_vec();
        assert_eq!(strip_claimed(&mut v, 0, "mx.ours.test"), 1);
        assert!(v.is_empty());
        let mut v = b"Authentication-Results: \"mx.ours.test\"; x\nA: b\n".to_vec();
        assert_eq!(strip_claimed(&mut v, 0, "mx.ours.test"), 1);
        assert_eq!(v, b"A: b\n");
    }
}
