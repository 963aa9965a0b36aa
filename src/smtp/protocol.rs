//! The ESMTP conversation as a state machine without I/O: commands in,
//! replies (or a request to the caller) out. The server feeds it lines; tests
//! drive it directly.

use std::fmt::Write as _;

/// One SMTP reply: a code and one or more text lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub code: u16,
    pub lines: Vec<String>,
}

impl Reply {
    pub fn new(code: u16, text: impl Into<String>) -> Reply {
        Reply {
            code,
            lines: vec![text.into()],
        }
    }

    pub fn multi(code: u16, lines: Vec<String>) -> Reply {
        Reply { code, lines }
    }

    /// Wire form: `250-first\r\n250 last\r\n`.
    pub fn to_wire(&self) -> String {
        let mut out = String::new();
        let n = self.lines.len().max(1);
        for i in 0..n {
            let text = self.lines.get(i).map(String::as_str).unwrap_or("");
            let sep = if i + 1 == n { ' ' } else { '-' };
            let _ = write!(out, "{}{}{}\r\n", self.code, sep, text);
        }
        out
    }

    /// 5xx: a hard error that counts towards the session's error limit.
    pub fn is_permanent_error(&self) -> bool {
        self.code >= 500
    }
}

/// ESMTP parameters of MAIL or RCPT: upper-case keyword and optional value.
pub type Params = Vec<(String, Option<String>)>;

/// A parsed command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Helo(String),
    Ehlo(String),
    /// `from` is the bare reverse-path, empty for the null sender `<>`.
    Mail {
        from: String,
        params: Params,
    },
    Rcpt {
        to: String,
        params: Params,
    },
    Data,
    Rset,
    Noop,
    Quit,
    Vrfy,
    Help,
    StartTls,
    /// A real SMTP verb this server does not offer (EXPN, AUTH, BDAT, …).
    NotImplemented(String),
    /// Not an SMTP command at all.
    Unknown,
    /// A known verb with unusable arguments: answered with this reply.
    Invalid(Reply),
}

/// Splits `<path> params…` after `FROM:` / `TO:`. The path may hold quoted
/// parts (`<"a b"@x>`) and a source route (`<@r1,@r2:a@x>`, dropped).
fn path_and_params(rest: &str) -> Option<(String, Params)> {
    let rest = rest.trim_start();
    let (path, tail) = if let Some(inner) = rest.strip_prefix('<') {
        let mut in_quotes = false;
        let mut escaped = false;
        let mut end = None;
        for (i, c) in inner.char_indices() {
            if escaped {
                escaped = false;
                continue;
            }
            match c {
                '\\' if in_quotes => escaped = true,
                '"' => in_quotes = !in_quotes,
                '>' if !in_quotes => {
                    end = Some(i);
                    break;
                }
                _ => {}
            }
        }
        let end = end?;
        (&inner[..end], &inner[end + 1..])
    } else {
        // Lenient: a bare address without brackets.
        match rest.find(' ') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        }
    };
    if !tail.is_empty() && !tail.starts_with(' ') {
        return None;
    }
    let path = match path.split_once(':') {
        Some((route, addr)) if route.starts_with('@') => addr,
        _ => path,
    };
    if path.chars().any(|c| c.is_control()) {
        return None;
    }
    let params = tail
        .split_whitespace()
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (k.to_ascii_uppercase(), Some(v.to_string())),
            None => (p.to_ascii_uppercase(), None),
        })
        .collect();
    Some((path.to_string(), params))
}

/// Parses one command line (without its line ending).
pub fn parse_command(line: &[u8]) -> Command {
    let line = String::from_utf8_lossy(line);
    let line = line.trim_end_matches([' ', '\t']);
    let (verb, rest) = match line.find([' ', '\t']) {
        Some(i) => (&line[..i], line[i + 1..].trim_start()),
        None => (line, ""),
    };
    if verb.is_empty() || verb.len() > 16 || !verb.bytes().all(|b| b.is_ascii_alphabetic()) {
        return Command::Unknown;
    }
    let upper = verb.to_ascii_uppercase();
    let no_args = |cmd: Command| {
        if rest.is_empty() {
            cmd
        } else {
            Command::Invalid(Reply::new(501, "5.5.4 Syntax error: no parameters allowed"))
        }
    };
    match upper.as_str() {
        "HELO" | "EHLO" => {
            let name = rest.split_whitespace().next().unwrap_or("");
            if name.is_empty() {
                Command::Invalid(Reply::new(501, format!("5.5.4 Syntax: {upper} hostname")))
            } else if upper == "HELO" {
                Command::Helo(name.to_string())
            } else {
                Command::Ehlo(name.to_string())
            }
        }
        "MAIL" => {
            let Some(arg) = strip_keyword(rest, "FROM:") else {
                return Command::Invalid(Reply::new(501, "5.5.4 Syntax: MAIL FROM:<address>"));
            };
            match path_and_params(arg) {
                Some((from, params)) => Command::Mail { from, params },
                None => Command::Invalid(Reply::new(501, "5.1.7 Bad sender address syntax")),
            }
        }
        "RCPT" => {
            let Some(arg) = strip_keyword(rest, "TO:") else {
                return Command::Invalid(Reply::new(501, "5.5.4 Syntax: RCPT TO:<address>"));
            };
            match path_and_params(arg) {
                Some((to, params)) if !to.is_empty() => Command::Rcpt { to, params },
                _ => Command::Invalid(Reply::new(501, "5.1.3 Bad recipient address syntax")),
            }
        }
        "DATA" => no_args(Command::Data),
        "RSET" => no_args(Command::Rset),
        "NOOP" => Command::Noop,
        "QUIT" => no_args(Command::Quit),
        "VRFY" => Command::Vrfy,
        "HELP" => Command::Help,
        "STARTTLS" => no_args(Command::StartTls),
        "EXPN" | "AUTH" | "BDAT" | "TURN" | "ETRN" | "ATRN" | "SEND" | "SOML" | "SAML" => {
            Command::NotImplemented(upper)
        }
        _ => Command::Unknown,
    }
}

/// `FROM:<x>` with any case and optional space after the colon.
fn strip_keyword<'a>(rest: &'a str, keyword: &str) -> Option<&'a str> {
    let head = rest.get(..keyword.len())?;
    head.eq_ignore_ascii_case(keyword)
        .then(|| &rest[keyword.len()..])
}

/// Limits and identity of the conversation.
#[derive(Debug, Clone)]
pub struct Limits {
    pub hostname: String,
    pub max_message_size: usize,
    pub max_recipients: usize,
    /// Whether STARTTLS can be offered (a certificate is configured).
    pub tls_available: bool,
}

/// What the server must do after a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Reply(Reply),
    /// Ask the store whether the address is ours, then call
    /// [`Session::recipient_checked`].
    CheckRecipient(String),
    /// A MAIL declared the message's size: reserve memory for it, then call
    /// [`Session::admitted`].
    Admit(usize),
    /// Send the 354 reply and read the message.
    StartData(Reply),
    /// Send the 220 reply and start the TLS handshake.
    StartTls(Reply),
    /// Send the 221 reply and close.
    Quit(Reply),
}

/// The envelope of the message being received.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Envelope {
    pub helo: String,
    pub mail_from: String,
    pub recipients: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct Session {
    limits: Limits,
    pub tls_active: bool,
    helo: Option<String>,
    esmtp: bool,
    mail_from: Option<String>,
    /// The SIZE the MAIL command declared.
    declared_size: Option<usize>,
    recipients: Vec<String>,
}

impl Session {
    pub fn new(limits: Limits) -> Session {
        Session {
            limits,
            tls_active: false,
            helo: None,
            esmtp: false,
            mail_from: None,
            declared_size: None,
            recipients: Vec::new(),
        }
    }

    pub fn greeting(&self) -> Reply {
        Reply::new(220, format!("{} ESMTP Pigeonhole", self.limits.hostname))
    }

    pub fn is_esmtp(&self) -> bool {
        self.esmtp
    }

    fn reset_transaction(&mut self) {
        self.mail_from = None;
        self.declared_size = None;
        self.recipients.clear();
    }

    /// After HELO or EHLO.
    pub fn greeted(&self) -> bool {
        self.helo.is_some()
    }

    /// Whether the current transaction has an accepted recipient.
    pub fn has_recipients(&self) -> bool {
        !self.recipients.is_empty()
    }

    /// Between an accepted MAIL and the end of its DATA (or RSET).
    pub fn in_transaction(&self) -> bool {
        self.mail_from.is_some()
    }

    /// The message size the current MAIL declared, if it did.
    pub fn declared_size(&self) -> Option<usize> {
        self.declared_size
    }

    /// After a TLS handshake the client starts over with EHLO (RFC 3207).
    pub fn tls_started(&mut self) {
        self.tls_active = true;
        self.helo = None;
        self.esmtp = false;
        self.reset_transaction();
    }

    fn ehlo_lines(&self) -> Vec<String> {
        let mut lines = vec![
            self.limits.hostname.clone(),
            format!("SIZE {}", self.limits.max_message_size),
            "8BITMIME".to_string(),
            "PIPELINING".to_string(),
            "SMTPUTF8".to_string(),
            "ENHANCEDSTATUSCODES".to_string(),
        ];
        if self.limits.tls_available && !self.tls_active {
            lines.push("STARTTLS".to_string());
        }
        lines
    }

    pub fn handle(&mut self, cmd: Command) -> Action {
        let reply = |code: u16, text: &str| Action::Reply(Reply::new(code, text));
        match cmd {
            Command::Ehlo(name) => {
                self.helo = Some(name);
                self.esmtp = true;
                self.reset_transaction();
                Action::Reply(Reply::multi(250, self.ehlo_lines()))
            }
            Command::Helo(name) => {
                self.helo = Some(name);
                self.esmtp = false;
                self.reset_transaction();
                Action::Reply(Reply::new(250, self.limits.hostname.clone()))
            }
            Command::Mail { from, params } => {
                if self.helo.is_none() {
                    return reply(503, "5.5.1 Error: send HELO/EHLO first");
                }
                if self.mail_from.is_some() {
                    return reply(503, "5.5.1 Error: nested MAIL command");
                }
                let mut declared = None;
                for (key, value) in &params {
                    match (key.as_str(), value.as_deref()) {
                        ("SIZE", Some(v)) if self.esmtp => match v.parse::<u64>() {
                            Ok(n) if n > self.limits.max_message_size as u64 => {
                                return reply(
                                    552,
                                    "5.3.4 Message size exceeds fixed maximum message size",
                                );
                            }
                            Ok(n) => declared = usize::try_from(n).ok(),
                            Err(_) => return reply(501, "5.5.4 Bad SIZE parameter"),
                        },
                        ("BODY", Some(v))
                            if self.esmtp
                                && (v.eq_ignore_ascii_case("8BITMIME")
                                    || v.eq_ignore_ascii_case("7BIT")) => {}
                        ("SMTPUTF8", None) if self.esmtp => {}
                        _ => return reply(555, "5.5.4 Unsupported MAIL parameter"),
                    }
                }
                if !from.is_empty() && !from.contains('@') {
                    return reply(501, "5.1.7 Bad sender address syntax");
                }
                self.mail_from = Some(from);
                self.declared_size = declared;
                match declared {
                    Some(size) => Action::Admit(size),
                    None => reply(250, "2.1.0 Ok"),
                }
            }
            Command::Rcpt { to, params } => {
                if self.mail_from.is_none() {
                    return reply(503, "5.5.1 Error: need MAIL command");
                }
                if !params.is_empty() {
                    return reply(555, "5.5.4 Unsupported RCPT parameter");
                }
                if self.recipients.len() >= self.limits.max_recipients {
                    return reply(452, "4.5.3 Error: too many recipients");
                }
                Action::CheckRecipient(to)
            }
            Command::Data => {
                if self.mail_from.is_none() {
                    return reply(503, "5.5.1 Error: need MAIL command");
                }
                if self.recipients.is_empty() {
                    return reply(554, "5.5.1 Error: no valid recipients");
                }
                Action::StartData(Reply::new(354, "End data with <CR><LF>.<CR><LF>"))
            }
            Command::Rset => {
                self.reset_transaction();
                reply(250, "2.0.0 Ok")
            }
            Command::Noop => reply(250, "2.0.0 Ok"),
            Command::Quit => Action::Quit(Reply::new(221, "2.0.0 Bye")),
            Command::Vrfy => reply(
                252,
                "2.5.0 Cannot VRFY user, but will accept message and attempt delivery",
            ),
            Command::Help => reply(
                214,
                "2.0.0 Commands: EHLO HELO MAIL RCPT DATA RSET NOOP QUIT VRFY HELP STARTTLS",
            ),
            Command::StartTls => {
                if !self.limits.tls_available {
                    reply(502, "5.5.1 Error: STARTTLS is not offered")
                } else if self.tls_active {
                    reply(503, "5.5.1 Error: TLS already active")
                } else {
                    Action::StartTls(Reply::new(220, "2.0.0 Ready to start TLS"))
                }
            }
            Command::NotImplemented(verb) => Action::Reply(Reply::new(
                502,
                format!("5.5.1 Error: {verb} not implemented"),
            )),
            Command::Unknown => reply(500, "5.5.2 Error: command not recognized"),
            Command::Invalid(r) => Action::Reply(r),
        }
    }

    /// The outcome of the RCPT check for `address`: accepted (`Ok(true)`),
    /// unknown (`Ok(false)`) or not checkable now (`Err`).
    pub fn recipient_checked(&mut self, address: &str, outcome: Result<bool, ()>) -> Reply {
        match outcome {
            Ok(true) => {
                let normalized = address.to_lowercase();
                if !self.recipients.contains(&normalized) {
                    self.recipients.push(normalized);
                }
                Reply::new(250, "2.1.5 Ok")
            }
            Ok(false) => Reply::new(
                550,
                format!("5.1.1 <{address}>: Recipient address rejected: User unknown"),
            ),
            Err(()) => Reply::new(451, "4.3.0 Error: recipient check failed, try again later"),
        }
    }

    /// Whether memory for the declared message could be reserved. If not,
    /// the MAIL is refused for now (RFC 1870: 452, try later) before the
    /// client sends the message for nothing.
    pub fn admitted(&mut self, ok: bool) -> Reply {
        if ok {
            Reply::new(250, "2.1.0 Ok")
        } else {
            self.reset_transaction();
            out_of_memory()
        }
    }

    /// Ends the transaction after DATA, handing over its envelope.
    pub fn take_envelope(&mut self) -> Envelope {
        let env = Envelope {
            helo: self.helo.clone().unwrap_or_default(),
            mail_from: self.mail_from.take().unwrap_or_default(),
            recipients: std::mem::take(&mut self.recipients),
        };
        self.reset_transaction();
        env
    }
}

/// The server cannot take the message now: the client should try later.
fn out_of_memory() -> Reply {
    Reply::new(
        452,
        "4.3.1 Error: insufficient system resources, try again later",
    )
}

/// Collects the lines of DATA: dot-unstuffing, size and line-length limits.
#[derive(Debug)]
pub struct DataReader {
    max_size: usize,
    message: Vec<u8>,
    /// Bytes received (including those dropped after a limit was hit).
    received: usize,
    too_big: bool,
    line_too_long: bool,
    out_of_memory: bool,
    /// The previous line ended in a bare LF.
    after_bare_lf: bool,
    /// A "." line touched a bare LF (see [`DataReader::push_line`]).
    smuggled_end: bool,
}

/// Whether the end-of-data line has been seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataStep {
    More,
    End,
}

impl DataReader {
    pub fn new(max_size: usize) -> DataReader {
        DataReader::with_prefix(max_size, Vec::new(), 0)
    }

    /// A reader whose message starts with `prefix` (the trace headers this
    /// hop adds), with room for `expected` bytes after it: no copy to put
    /// them in front later, no reallocations while a message of the
    /// declared size arrives.
    pub fn with_prefix(max_size: usize, mut prefix: Vec<u8>, expected: usize) -> DataReader {
        prefix.reserve_exact(expected.min(max_size));
        DataReader {
            max_size,
            message: prefix,
            received: 0,
            too_big: false,
            line_too_long: false,
            out_of_memory: false,
            after_bare_lf: false,
            smuggled_end: false,
        }
    }

    /// One line without its line ending; `bare_lf` when that ending was a LF
    /// without CR. Bare LFs are taken as line ends (much real mail has
    /// them), but only `<CR><LF>.<CR><LF>` ends the data: a "." line with a
    /// bare LF on either side is where other servers may disagree on the end
    /// of the message (SMTP smuggling), so it ends nothing and the message is
    /// refused at the real end.
    pub fn push_line(&mut self, line: &[u8], bare_lf: bool) -> DataStep {
        let after_bare_lf = std::mem::replace(&mut self.after_bare_lf, bare_lf);
        if line == b"." {
            if !bare_lf && !after_bare_lf {
                return DataStep::End;
            }
            self.smuggled_end = true;
            self.message = Vec::new();
            return DataStep::More;
        }
        let line = line.strip_prefix(b".").unwrap_or(line);
        self.received += line.len() + 2;
        if self.received > self.max_size {
            self.too_big = true;
            self.message = Vec::new();
        }
        if !self.too_big && !self.line_too_long && !self.out_of_memory && !self.smuggled_end {
            self.message.extend_from_slice(line);
            self.message.extend_from_slice(b"\r\n");
        }
        DataStep::More
    }

    /// A line over the limit was received (and discarded); `len` bytes of
    /// it, ended as [`DataReader::push_line`]'s `bare_lf` says.
    pub fn note_long_line(&mut self, len: usize, bare_lf: bool) {
        self.after_bare_lf = bare_lf;
        self.line_too_long = true;
        self.received += len;
        self.message = Vec::new();
        if self.received > self.max_size {
            self.too_big = true;
        }
    }

    pub fn received(&self) -> usize {
        self.received
    }

    /// Bytes held in memory for the message so far.
    pub fn buffered(&self) -> usize {
        self.message.len()
    }

    /// The server cannot hold more message data now: the rest is read and
    /// dropped, and the message refused with a temporary error.
    pub fn out_of_memory(&mut self) {
        self.out_of_memory = true;
        self.message = Vec::new();
    }

    /// The message, or the reply refusing it.
    pub fn finish(self) -> Result<Vec<u8>, Reply> {
        if self.smuggled_end {
            Err(Reply::new(
                554,
                "5.5.2 Error: bare <LF> next to a \".\" line in message data",
            ))
        } else if self.too_big {
            Err(Reply::new(
                552,
                "5.3.4 Error: message exceeds fixed maximum message size",
            ))
        } else if self.line_too_long {
            Err(Reply::new(500, "5.5.2 Error: line too long"))
        } else if self.out_of_memory {
            Err(out_of_memory())
        } else {
            Ok(self.message)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(tls: bool) -> Session {
        Session::new(Limits {
            hostname: "mx.test".into(),
            max_message_size: 1000,
            max_recipients: 2,
            tls_available: tls,
        })
    }

    fn code(a: &Action) -> u16 {
        match a {
            Action::Reply(r) | Action::StartData(r) | Action::StartTls(r) | Action::Quit(r) => {
                r.code
            }
            Action::CheckRecipient(_) | Action::Admit(_) => 0,
        }
    }

    fn run(s: &mut Session, line: &str) -> Action {
        s.handle(parse_command(line.as_bytes()))
    }

    #[test]
    fn parses_commands_leniently() {
        assert_eq!(
            parse_command(b"mail from: <A@x.test> SIZE=10 body=8bitmime"),
            Command::Mail {
                from: "A@x.test".into(),
                params: vec![
                    ("SIZE".into(), Some("10".into())),
                    ("BODY".into(), Some("8bitmime".into()))
                ]
            }
        );
        assert_eq!(
            parse_command(b"MAIL FROM:<>"),
            Command::Mail {
                from: String::new(),
                params: vec![]
            }
        );
        assert_eq!(
            parse_command(b"RCPT TO:<@relay.test:b@y.test>"),
            Command::Rcpt {
                to: "b@y.test".into(),
                params: vec![]
            }
        );
        assert_eq!(
            parse_command(b"RCPT TO:<\"odd > name\"@y.test>"),
            Command::Rcpt {
                to: "\"odd > name\"@y.test".into(),
                params: vec![]
            }
        );
        assert_eq!(
            parse_command(b"RCPT TO:b@y.test"),
            Command::Rcpt {
                to: "b@y.test".into(),
                params: vec![]
            }
        );
        assert!(matches!(parse_command(b"RCPT TO:<>"), Command::Invalid(r) if r.code == 501));
        assert!(matches!(parse_command(b"RCPT <b@y>"), Command::Invalid(r) if r.code == 501));
        assert!(matches!(parse_command(b"MAIL FROM:<a@b"), Command::Invalid(r) if r.code == 501));
        assert!(matches!(parse_command(b"EHLO"), Command::Invalid(r) if r.code == 501));
        assert!(matches!(parse_command(b"DATA now"), Command::Invalid(r) if r.code == 501));
        assert_eq!(parse_command(b"quit"), Command::Quit);
        assert_eq!(parse_command(b"\x00\xff garbage"), Command::Unknown);
        assert_eq!(parse_command(b""), Command::Unknown);
        assert_eq!(parse_command(b"GET / HTTP/1.1"), Command::Unknown);
        assert_eq!(
            parse_command(b"EXPN list"),
            Command::NotImplemented("EXPN".into())
        );
    }

    #[test]
    fn a_whole_transaction() {
        let mut s = session(false);
        assert_eq!(s.greeting().to_wire(), "220 mx.test ESMTP Pigeonhole\r\n");
        assert_eq!(code(&run(&mut s, "MAIL FROM:<a@x.test>")), 503);
        let Action::Reply(ehlo) = run(&mut s, "EHLO client.test") else {
            panic!()
        };
        let wire = ehlo.to_wire();
        assert!(wire.starts_with("250-mx.test\r\n"), "{wire}");
        assert!(wire.contains("250-SIZE 1000\r\n"));
        assert!(wire.contains("PIPELINING") && wire.contains("8BITMIME"));
        assert!(wire.contains("SMTPUTF8") && !wire.contains("STARTTLS"));
        assert!(wire.ends_with("250 ENHANCEDSTATUSCODES\r\n"));
        assert_eq!(code(&run(&mut s, "RCPT TO:<b@y.test>")), 503);
        assert_eq!(code(&run(&mut s, "DATA")), 503);
        assert_eq!(code(&run(&mut s, "MAIL FROM:<a@x.test> SIZE=1001")), 552);
        assert_eq!(code(&run(&mut s, "MAIL FROM:<a@x.test> FOO=1")), 555);
        // A declared size is admitted by the server (memory), then answered.
        assert_eq!(
            run(&mut s, "MAIL FROM:<a@x.test> SIZE=999"),
            Action::Admit(999)
        );
        assert_eq!(s.declared_size(), Some(999));
        assert_eq!(s.admitted(false).code, 452);
        assert!(!s.in_transaction(), "a refused MAIL starts nothing");
        assert_eq!(code(&run(&mut s, "RCPT TO:<b@y.test>")), 503);
        assert_eq!(
            run(&mut s, "MAIL FROM:<a@x.test> SIZE=999"),
            Action::Admit(999)
        );
        assert_eq!(s.admitted(true).code, 250);
        assert!(s.in_transaction());
        assert_eq!(code(&run(&mut s, "MAIL FROM:<a@x.test>")), 503);
        assert_eq!(code(&run(&mut s, "DATA")), 554);
        assert_eq!(
            run(&mut s, "RCPT TO:<B@y.test>"),
            Action::CheckRecipient("B@y.test".into())
        );
        assert_eq!(s.recipient_checked("B@y.test", Ok(true)).code, 250);
        assert_eq!(s.recipient_checked("c@y.test", Ok(false)).code, 550);
        assert_eq!(s.recipient_checked("d@y.test", Err(())).code, 451);
        assert_eq!(s.recipient_checked("e@y.test", Ok(true)).code, 250);
        assert_eq!(code(&run(&mut s, "RCPT TO:<f@y.test>")), 452);
        assert_eq!(code(&run(&mut s, "VRFY x")), 252);
        assert_eq!(code(&run(&mut s, "NOOP")), 250);
        assert_eq!(code(&run(&mut s, "DATA")), 354);
        let env = s.take_envelope();
        assert_eq!(env.recipients, vec!["b@y.test", "e@y.test"]);
        assert_eq!(env.mail_from, "a@x.test");
        assert_eq!(env.helo, "client.test");
        // The transaction is over: a new one starts with MAIL.
        assert!(!s.in_transaction() && s.declared_size().is_none());
        assert_eq!(code(&run(&mut s, "RCPT TO:<b@y.test>")), 503);
        assert_eq!(code(&run(&mut s, "MAIL FROM:<>")), 250);
        assert_eq!(code(&run(&mut s, "RSET")), 250);
        assert_eq!(code(&run(&mut s, "RCPT TO:<b@y.test>")), 503);
        assert_eq!(code(&run(&mut s, "STARTTLS")), 502);
        assert_eq!(code(&run(&mut s, "FOO")), 500);
        assert_eq!(code(&run(&mut s, "AUTH PLAIN x")), 502);
        assert!(matches!(run(&mut s, "QUIT"), Action::Quit(r) if r.code == 221));
    }

    #[test]
    fn helo_is_not_esmtp_and_starttls_resets() {
        let mut s = session(true);
        assert_eq!(code(&run(&mut s, "HELO c")), 250);
        assert_eq!(code(&run(&mut s, "MAIL FROM:<a@x.test> SIZE=10")), 555);
        let Action::Reply(ehlo) = run(&mut s, "EHLO c") else {
            panic!()
        };
        assert!(
            ehlo.to_wire().contains("250-STARTTLS\r\n")
                || ehlo.to_wire().contains("250 STARTTLS\r\n")
        );
        assert_eq!(code(&run(&mut s, "MAIL FROM:<a@x.test>")), 250);
        assert!(matches!(run(&mut s, "STARTTLS"), Action::StartTls(r) if r.code == 220));
        s.tls_started();
        assert_eq!(code(&run(&mut s, "MAIL FROM:<a@x.test>")), 503);
        let Action::Reply(ehlo) = run(&mut s, "EHLO c") else {
            panic!()
        };
        assert!(!ehlo.to_wire().contains("STARTTLS"));
        assert_eq!(code(&run(&mut s, "STARTTLS")), 503);
    }

    #[test]
    fn data_is_unstuffed_and_limited() {
        let mut d = DataReader::new(100);
        assert_eq!(d.push_line(b"Subject: x", false), DataStep::More);
        assert_eq!(d.push_line(b"", false), DataStep::More);
        assert_eq!(d.push_line(b"..leading dot", false), DataStep::More);
        assert_eq!(d.push_line(b".x", false), DataStep::More);
        assert_eq!(d.push_line(b".", false), DataStep::End);
        assert_eq!(
            d.finish().unwrap(),
            b"Subject: x\r\n\r\n.leading dot\r\nx\r\n".to_vec()
        );

        let mut d = DataReader::new(10);
        d.push_line(b"0123456789", false);
        assert_eq!(d.finish().unwrap_err().code, 552);

        let mut d = DataReader::new(100);
        d.push_line(b"ok", false);
        d.note_long_line(50, false);
        d.push_line(b"ok", false);
        assert_eq!(d.finish().unwrap_err().code, 500);

        let mut d = DataReader::new(100);
        d.push_line(b"ok", false);
        assert_eq!(d.buffered(), 4);
        d.out_of_memory();
        d.push_line(b"ok", false);
        assert_eq!(d.buffered(), 0);
        assert_eq!(d.finish().unwrap_err().code, 452);
    }

    /// Lines as the server reads them: (text, ended in a bare LF).
    fn feed(d: &mut DataReader, wire: &[u8]) -> DataStep {
        let mut step = DataStep::More;
        for piece in wire.split_inclusive(|b| *b == b'\n') {
            let line = piece.strip_suffix(b"\n").expect("whole lines");
            let (line, bare_lf) = match line.strip_suffix(b"\r") {
                Some(l) => (l, false),
                None => (line, true),
            };
            step = d.push_line(line, bare_lf);
            if step == DataStep::End {
                break;
            }
        }
        step
    }

    #[test]
    fn a_dot_next_to_a_bare_lf_ends_nothing_and_refuses_the_message() {
        for smuggled in [
            &b"Subject: a\r\n\r\nbody\n.\nMAIL FROM:<x@evil.test>\r\n"[..],
            b"Subject: a\r\n\r\nbody\r\n.\nMAIL FROM:<x@evil.test>\r\n",
            b"Subject: a\r\n\r\nbody\n.\r\nMAIL FROM:<x@evil.test>\r\n",
        ] {
            let mut d = DataReader::new(1000);
            assert_eq!(feed(&mut d, smuggled), DataStep::More, "{smuggled:?}");
            assert_eq!(feed(&mut d, b"more\r\n.\r\n"), DataStep::End);
            let refused = d.finish().unwrap_err();
            assert_eq!(
                (refused.code, refused.lines[0].get(..5)),
                (554, Some("5.5.2"))
            );
        }
        // Bare LFs elsewhere are fine: taken as line ends.
        let mut d = DataReader::new(1000);
        assert_eq!(
            feed(&mut d, b"Subject: a\n\nbody\nmore\r\n.\r\n"),
            DataStep::End
        );
        assert_eq!(
            d.finish().unwrap(),
            b"Subject: a\r\n\r\nbody\r\nmore\r\n".to_vec()
        );
        // A long line that ended in a bare LF counts as well.
        let mut d = DataReader::new(1000);
        d.note_long_line(100, true);
        assert_eq!(d.push_line(b".", false), DataStep::More);
        assert_eq!(d.push_line(b".", false), DataStep::End);
        assert_eq!(d.finish().unwrap_err().code, 554);
    }
}
