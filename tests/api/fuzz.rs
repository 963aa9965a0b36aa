//! Hostile input, fuzzed (issue 15): MIME ingestion, the SMTP session (its
//! state machine and the real listener), JSON request bodies and SNS
//! messages. Each target runs its checked-in corpus (`tests/corpus/`, nasty
//! inputs named for what they are) and then proptest's mutations of it
//! (bytes flipped, cut, repeated, spliced, nasty fragments put in).
//! `PIGEONHOLE_FUZZ_CASES` sets the mutated cases per target (default 48).
//!
//! Every input must be answered: no panic, no hang (each case has a time
//! limit), and every refusal a clear SMTP reply or HTTP `{error, code}`
//! below 500. Afterwards the service still serves a normal request.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::Bytes;
use pigeonhole::core::inbound;
use pigeonhole::smtp::protocol::{Action, Command, DataReader, DataStep, Limits, Session};
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestRunner};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::helpers::TestApp;
use crate::inbound::{Inbound, assert_stored, send, setup_with, test_config};

fn cases() -> u32 {
    std::env::var("PIGEONHOLE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48)
}

fn runner() -> TestRunner {
    TestRunner::new(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    })
}

/// The corpus files of `kind`, sorted by name.
fn corpus(kind: &str) -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus")
        .join(kind);
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.expect("corpus entry").path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&path).expect("read corpus file"))
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "empty corpus {kind}");
    files
}

/// Fragments that have broken parsers before.
const NASTY: &[&[u8]] = &[
    b"\0",
    b"\xff\xfe",
    b"\xc3\x28",
    b"\xed\xa0\x80",
    b"\r\n.\r\n",
    b"\n.\n",
    b"\r",
    b"--",
    b"=?utf-8?B?",
    b"?=",
    b"=\r\n",
    b"boundary=\"",
    b"Content-Type: multipart/mixed; boundary=x\r\n\r\n--x\r\n",
    b"Content-Transfer-Encoding: base64\r\n",
    b"\\u0000",
    b"\\ud800",
    b"{\"",
    b"[[[[[[[[",
    b"\":null,\"",
    b"1e99999",
    b"<",
    b">",
    b"%00",
    b"\x1b[31m",
];

#[derive(Debug, Clone)]
enum Mutation {
    Flip { at: usize, with: u8 },
    Insert { at: usize, nasty: usize },
    Delete { at: usize, len: usize },
    Truncate { at: usize },
    Repeat { at: usize, len: usize, times: usize },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(at, with)| Mutation::Flip { at, with }),
        (any::<usize>(), 0..NASTY.len()).prop_map(|(at, nasty)| Mutation::Insert { at, nasty }),
        (any::<usize>(), 1usize..64).prop_map(|(at, len)| Mutation::Delete { at, len }),
        any::<usize>().prop_map(|at| Mutation::Truncate { at }),
        (any::<usize>(), 1usize..32, 2usize..200).prop_map(|(at, len, times)| Mutation::Repeat {
            at,
            len,
            times
        }),
    ]
}

fn mutate(seed: &[u8], mutations: &[Mutation]) -> Vec<u8> {
    let mut out = seed.to_vec();
    for m in mutations {
        let n = out.len();
        let pos = |at: usize| if n == 0 { 0 } else { at % (n + 1) };
        match *m {
            Mutation::Flip { at, with } if n > 0 => out[at % n] = with,
            Mutation::Flip { .. } => out.push(0),
            Mutation::Insert { at, nasty } => {
                let at = pos(at);
                out.splice(at..at, NASTY[nasty].iter().copied());
            }
            Mutation::Delete { at, len } => {
                let at = pos(at);
                out.drain(at..(at + len).min(n));
            }
            Mutation::Truncate { at } => out.truncate(pos(at)),
            Mutation::Repeat { at, len, times } => {
                let at = pos(at);
                let piece: Vec<u8> = out[at..(at + len).min(n)].to_vec();
                let copies: Vec<u8> = piece.repeat(times);
                out.splice(at..at, copies);
            }
        }
    }
    out
}

/// A corpus entry (by index) and mutations of it.
fn mutated(corpus_len: usize) -> impl Strategy<Value = (usize, Vec<Mutation>)> {
    (0..corpus_len, prop::collection::vec(mutation(), 1..8))
}

/// Runs `f` on a thread of its own and fails if it does not return in `limit`.
fn within<T: Send + 'static>(
    what: &str,
    limit: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(v) => v,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!("{what}: no answer in {limit:?}"),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => panic!("{what}: panicked"),
    }
}

fn parse_mime(what: &str, raw: Vec<u8>) {
    within(what, Duration::from_secs(10), move || {
        let _ = inbound::parse(&Bytes::from(raw));
    });
}

#[test]
fn mime_parsing_survives_the_corpus_and_mutations_of_it() {
    let files = corpus("mime");
    for (name, raw) in &files {
        parse_mime(name, raw.clone());
    }
    // Extremes too large to check in.
    let head = b"From: a@x.test\r\nTo: b@y.test\r\nSubject: big\r\n".to_vec();
    let long_header = [
        head.clone(),
        b"X-Long: ".to_vec(),
        vec![b'a'; 1 << 20],
        b"\r\n\r\nbody\r\n".to_vec(),
    ]
    .concat();
    parse_mime("a 1 MiB header", long_header);
    let long_line = [head.clone(), b"\r\n".to_vec(), vec![b'x'; 8 << 20]].concat();
    parse_mime("an 8 MiB line", long_line);
    let mut many_parts = [
        head,
        b"Content-Type: multipart/mixed; boundary=p\r\n\r\n".to_vec(),
    ]
    .concat();
    for _ in 0..20_000 {
        many_parts.extend_from_slice(b"--p\r\nContent-Type: text/plain\r\n\r\nx\r\n");
    }
    parse_mime("20,000 parts", many_parts);

    runner()
        .run(&mutated(files.len()), |(i, mutations)| {
            let raw = mutate(&files[i].1, &mutations);
            parse_mime(&files[i].0, raw);
            Ok(())
        })
        .unwrap();
}

fn limits() -> Limits {
    Limits {
        hostname: "mx.ours.test".into(),
        max_message_size: 64 * 1024,
        max_recipients: 100,
        tls_available: false,
    }
}

/// Drives the state machine through `input` as the listener would, with
/// every recipient check answered by `ours`; returns the reply codes.
fn drive(input: &[u8]) -> Vec<u16> {
    let mut session = Session::new(limits());
    let mut codes = vec![session.greeting().code];
    let mut data: Option<DataReader> = None;
    for line in input.split(|b| *b == b'\n') {
        let bare_lf = !line.ends_with(b"\r");
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if let Some(reader) = data.as_mut() {
            if reader.push_line(line, bare_lf) == DataStep::End {
                let reader = data.take().expect("reader");
                let reply = match reader.finish() {
                    Ok(_) => {
                        session.take_envelope();
                        250
                    }
                    Err(reply) => reply.code,
                };
                codes.push(reply);
            }
            continue;
        }
        let reply = match session.handle(pigeonhole::smtp::protocol::parse_command(line)) {
            Action::Reply(r) | Action::Quit(r) | Action::StartTls(r) => r,
            Action::CheckRecipient(address) => {
                let ours = address.ends_with("@ours.test");
                session.recipient_checked(&address, Ok(ours))
            }
            Action::Admit(_) => session.admitted(true),
            Action::StartData(r) => {
                data = Some(DataReader::new(limits().max_message_size));
                r
            }
        };
        codes.push(reply.code);
    }
    codes
}

#[test]
fn the_smtp_state_machine_answers_every_line_with_a_reply_code() {
    let files = corpus("smtp");
    let check = |what: &str, input: Vec<u8>| {
        let codes = within(what, Duration::from_secs(10), move || drive(&input));
        assert!(
            codes.iter().all(|c| (200..600).contains(c)),
            "{what}: {codes:?}"
        );
    };
    for (name, raw) in &files {
        check(name, raw.clone());
    }
    // Lines the parser alone must survive.
    for line in [
        &b""[..],
        b" ",
        b"MAIL FROM:",
        b"RCPT TO:<",
        b"\xff",
        b"EHLO \0",
    ] {
        let _ = pigeonhole::smtp::protocol::parse_command(line);
        assert!(!matches!(
            pigeonhole::smtp::protocol::parse_command(line),
            Command::Data
        ));
    }
    runner()
        .run(&mutated(files.len()), |(i, mutations)| {
            check(&files[i].0, mutate(&files[i].1, &mutations));
            Ok(())
        })
        .unwrap();
}

/// Writes `input` to the listener as one burst and reads until it closes or
/// goes quiet; every line it sent back must be an SMTP reply.
async fn hostile_session(addr: SocketAddr, input: &[u8]) -> Vec<String> {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let (mut reader, mut writer) = stream.split();
    // The server may close before it has read everything: that is its right.
    let write = async {
        let _ = writer.write_all(input).await;
        let _ = writer.write_all(b"\r\nQUIT\r\n").await;
    };
    let mut got = Vec::new();
    let read = async {
        let mut buf = [0u8; 8192];
        loop {
            match tokio::time::timeout(Duration::from_secs(1), reader.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
                Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            }
        }
    };
    tokio::join!(write, read);
    String::from_utf8_lossy(&got)
        .split("\r\n")
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

fn assert_replies(what: &str, lines: &[String]) {
    assert!(!lines.is_empty(), "{what}: no greeting");
    for line in lines {
        let code: Option<u16> = line.get(..3).and_then(|c| c.parse().ok());
        let sep = line.as_bytes().get(3).copied();
        assert!(
            code.is_some_and(|c| (200..600).contains(&c))
                && matches!(sep, Some(b' ') | Some(b'-') | None),
            "{what}: not an SMTP reply: {line:?}"
        );
    }
}

#[test]
fn the_smtp_listener_answers_hostile_clients_and_keeps_serving() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let Inbound { app, smtp } = rt.block_on(setup_with(test_config()));
    let addr = smtp.addr;
    let files = corpus("smtp");
    for (name, raw) in &files {
        let lines = rt.block_on(hostile_session(addr, raw));
        assert_replies(name, &lines);
    }
    for (name, raw) in corpus("mime") {
        // MIME corpus as message data, dot-stuffed by nobody.
        let mut input =
            b"EHLO x\r\nMAIL FROM:<a@x.test>\r\nRCPT TO:<inbox@ours.test>\r\nDATA\r\n".to_vec();
        input.extend_from_slice(&raw);
        input.extend_from_slice(b"\r\n.\r\n");
        let lines = rt.block_on(hostile_session(addr, &input));
        assert_replies(&name, &lines);
        // Stored (250) or refused for good (5xx): a message that can never
        // be stored must not be deferred for the sender to retry for days.
        let verdict = lines
            .iter()
            .rposition(|l| l.starts_with("221"))
            .and_then(|quit| quit.checked_sub(1))
            .map(|i| lines[i].clone())
            .unwrap_or_default();
        assert!(
            verdict.starts_with("250") || verdict.starts_with('5'),
            "{name}: {lines:?}"
        );
    }
    // A mutated session can end mid-DATA and cost a second of silence.
    let cases = (cases() / 10).clamp(24, 100);
    let mut runner = TestRunner::new(ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    runner
        .run(&mutated(files.len()), |(i, mutations)| {
            let input = mutate(&files[i].1, &mutations);
            let lines = rt.block_on(hostile_session(addr, &input));
            assert_replies(&files[i].0, &lines);
            Ok(())
        })
        .unwrap();
    // Still serving.
    let r = rt.block_on(send(
        addr,
        "a@x.test",
        &["inbox@ours.test"],
        "Subject: after\n\nfine\n",
    ));
    assert_stored(&r);
    drop(app);
}

/// POSTs `body` as it is; a reply of 500 or more, or an error without the
/// spec's shape, fails.
async fn post_raw(app: &TestApp, path: &str, body: Vec<u8>) -> (u16, Value) {
    let started = Instant::now();
    let r = tokio::time::timeout(
        Duration::from_secs(30),
        app.client
            .post(format!("{}{path}", app.base))
            .bearer_auth(&app.key)
            .header("content-type", "application/json")
            .body(body)
            .send(),
    )
    .await
    .unwrap_or_else(|_| panic!("{path}: no reply in 30 s"))
    .expect("request");
    let status = r.status().as_u16();
    let text = r.text().await.unwrap_or_default();
    let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    assert!(
        status < 500,
        "{path}: {status} after {:?}: {text}",
        started.elapsed()
    );
    if status >= 400 {
        assert!(
            body["error"].as_str().is_some_and(|e| !e.is_empty()) && body["code"].is_string(),
            "{path}: {status} without {{error, code}}: {text}"
        );
    }
    (status, body)
}

/// Valid bodies the mutations start from, per endpoint.
fn json_seeds() -> Vec<(&'static str, Value)> {
    vec![
        (
            "/api/v1/emails",
            json!({"from": "Team <team@ours.test>", "to": ["a@x.test"], "cc": "b@x.test",
            "subject": "hi", "text": "t", "html": "<p>h</p>", "headers": {"X-A": "1"}, "tags": [{"name": "n", "value": "v"}],
            "attachments": [{"filename": "a.txt", "content": "aGVsbG8="}], "reply_to": "r@x.test"}),
        ),
        (
            "/api/v1/emails/batch",
            json!([{"from": "team@ours.test", "to": "a@x.test", "text": "t"},
            {"from": "team@ours.test", "to": "b@x.test", "html": "<b>x</b>"}]),
        ),
        (
            "/api/v1/domains",
            json!({"name": "fuzz.example", "auto_create_mailboxes": true}),
        ),
        (
            "/api/v1/mailboxes",
            json!({"address": "box@ours.test", "display_name": "Box", "color": "#aabbcc"}),
        ),
        ("/api/v1/labels", json!({"name": "L", "color": "#112233"})),
        (
            "/api/v1/webhooks",
            json!({"url": "https://hooks.example/p", "events": ["email.sent", "*"], "description": "d"}),
        ),
        (
            "/api/v1/drafts",
            json!({"from": "team@ours.test", "to": ["a@x.test"], "subject": "d", "text": "t"}),
        ),
        (
            "/api/v1/suppressions",
            json!({"address": "s@x.test", "reason": "manual"}),
        ),
    ]
}

#[test]
fn json_bodies_are_answered_below_500_with_the_spec_error_shape() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let app = rt.block_on(async {
        let app = crate::helpers::spawn_app_with(|m| {
            m.insert("PIGEONHOLE_RATE_LIMIT".into(), "1000000".into());
        })
        .await;
        app.verified_domain("ours.test").await;
        app
    });
    let seeds = json_seeds();
    let paths: Vec<&str> = seeds.iter().map(|(p, _)| *p).collect();
    for (name, raw) in corpus("json") {
        for path in &paths {
            rt.block_on(post_raw(&app, path, raw.clone()));
            let _ = &name;
        }
    }
    let seed_bytes: Vec<Vec<u8>> = seeds
        .iter()
        .map(|(_, v)| v.to_string().into_bytes())
        .collect();
    let posted = std::sync::atomic::AtomicU32::new(0);
    runner()
        .run(&mutated(seeds.len()), |(i, mutations)| {
            let body = mutate(&seed_bytes[i], &mutations);
            rt.block_on(post_raw(&app, seeds[i].0, body));
            posted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok(())
        })
        .unwrap();
    eprintln!("fuzz: {} mutated JSON bodies posted", posted.into_inner());
    // Still serving. The suppression seed's mutations may have suppressed
    // any address (one byte turns `s@x.test` into `a@x.test`), so the
    // address is taken off the list first: a refused send would then be
    // the service's fault, not the fuzz's.
    let after = "after@x.test";
    let removed = rt.block_on(app.delete(&format!("/api/v1/suppressions/{after}")));
    assert!([200, 404].contains(&removed.status), "{}", removed.text);
    let (status, body) = rt.block_on(post_raw(
        &app,
        "/api/v1/emails",
        json!({"from": "team@ours.test", "to": after, "text": "after"})
            .to_string()
            .into_bytes(),
    ));
    assert_eq!(status, 202, "{body}");
}

async fn post_sns(app: &TestApp, body: Vec<u8>) -> (u16, String) {
    let r = tokio::time::timeout(
        Duration::from_secs(30),
        app.client
            .post(format!("{}/sns/ses", app.base))
            .header("content-type", "text/plain; charset=UTF-8")
            .header("x-amz-sns-message-type", "Notification")
            .body(body)
            .send(),
    )
    .await
    .expect("an SNS reply in 30 s")
    .expect("request");
    let status = r.status().as_u16();
    let text = r.text().await.unwrap_or_default();
    assert!(status < 500 || status == 503, "SNS: {status}: {text}");
    if status >= 400 {
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        assert!(
            body["code"].is_string(),
            "SNS: {status} without a code: {text}"
        );
    }
    (status, text)
}

/// SES payloads a signed notification may carry: events and inbound mail.
fn ses_seeds(provider_message_id: &str) -> Vec<Value> {
    let mail = json!({"timestamp": "2026-11-22T10:00:00.000Z", "messageId": provider_message_id,
        "source": "team@example.com", "destination": ["a@x.test"], "tags": {"k": ["v"]}});
    let mime = "From: a@x.test\r\nTo: inbox@example.com\r\nSubject: in\r\nMessage-ID: <sns@x.test>\r\n\r\nhello\r\n";
    vec![
        json!({"eventType": "Delivery", "mail": mail, "delivery": {"timestamp": "2026-11-22T10:00:01.000Z", "recipients": ["a@x.test"]}}),
        json!({"eventType": "Bounce", "mail": mail, "bounce": {"bounceType": "Permanent", "bounceSubType": "General",
            "bouncedRecipients": [{"emailAddress": "a@x.test", "diagnosticCode": "550 5.1.1"}]}}),
        json!({"eventType": "Complaint", "mail": mail, "complaint": {"complainedRecipients": [{"emailAddress": "a@x.test"}]}}),
        json!({"notificationType": "Received", "mail": mail, "receipt": {"recipients": ["inbox@example.com"],
            "action": {"type": "SNS", "encoding": "BASE64"}}, "content": base64_encode(mime.as_bytes())}),
        json!({"notificationType": "Received", "mail": mail, "receipt": {"recipients": ["inbox@example.com"],
            "action": {"type": "SNS", "encoding": "UTF8"}}, "content": mime}),
    ]
}

fn base64_encode(data: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(data)
}

#[test]
fn sns_messages_forged_or_hostile_never_break_the_endpoint() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (app, pid) = rt.block_on(async {
        let app = crate::sns::app().await;
        app.mailbox("inbox@example.com").await;
        let r = app
            .post(
                "/api/v1/emails",
                json!({"from": "team@example.com", "to": "a@x.test", "text": "t"}),
            )
            .await;
        assert_eq!(r.status, 202, "{}", r.text);
        let pid = r.body["provider_message_id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        (app, pid)
    });
    // Nothing unsigned or forged is taken.
    for (name, raw) in corpus("sns") {
        let (status, text) = rt.block_on(post_sns(&app, raw));
        assert!(status >= 400, "{name}: {status} {text}");
    }
    // Signed notifications whose SES payload is hostile are answered, never 500.
    let seeds: Vec<Vec<u8>> = ses_seeds(&pid)
        .iter()
        .map(|v| v.to_string().into_bytes())
        .collect();
    let n = std::sync::atomic::AtomicU32::new(0);
    runner()
        .run(&mutated(seeds.len()), |(i, mutations)| {
            let message = String::from_utf8_lossy(&mutate(&seeds[i], &mutations)).into_owned();
            let n = n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let body = crate::sns::signer().sign_notification(
                crate::sns::TOPIC,
                &message,
                &format!("fuzz-{n}"),
                2,
            );
            rt.block_on(post_sns(&app, body.into_bytes()));
            // The same bytes mutated after signing are a forgery.
            let forged = mutate(
                crate::sns::signer()
                    .sign_notification(crate::sns::TOPIC, &message, &format!("fuzz-f{n}"), 2)
                    .as_bytes(),
                &mutations,
            );
            rt.block_on(post_sns(&app, forged));
            Ok(())
        })
        .unwrap();
    eprintln!(
        "fuzz: {} signed hostile SNS notifications (and as many forged)",
        n.into_inner()
    );
    // Still serving.
    let r = rt.block_on(app.get("/api/v1/emails"));
    assert_eq!(r.status, 200, "{}", r.text);
}
