//! Inbound SMTP against hostile clients (review issue 13): one address
//! holding every connection, sessions that never end, SMTP smuggling; and
//! the SPF result recorded in `Authentication-Results`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pigeonhole::dns::Dns;
use pigeonhole::smtp::SmtpConfig;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::inbound::{Inbound, Raw, inbound_in, raw_of, setup_with, still_serving, test_config};

#[tokio::test]
async fn one_address_cannot_take_every_connection() {
    let t = setup_with(SmtpConfig {
        max_connections_per_ip: 2,
        ..test_config()
    })
    .await;
    let mut a = Raw::connect_from(t.smtp.addr, "127.0.0.1").await;
    a.expect(220).await;
    let mut b = Raw::connect_from(t.smtp.addr, "127.0.0.1").await;
    b.expect(220).await;
    let mut c = Raw::connect_from(t.smtp.addr, "127.0.0.1").await;
    assert!(c.expect(421).await.contains("4.7.0"));
    assert!(c.closed().await);
    // Another address is served while the first one is at its cap.
    let mut d = Raw::connect_from(t.smtp.addr, "127.0.0.2").await;
    d.expect(220).await;
    d.send("QUIT\r\n").await;
    d.expect(221).await;

    a.send("QUIT\r\n").await;
    a.expect(221).await;
    assert!(a.closed().await);
    // The slot is given back when the session ends.
    let mut greeted = false;
    for _ in 0..50 {
        let mut e = Raw::connect_from(t.smtp.addr, "127.0.0.1").await;
        if e.reply().await.0 == 220 {
            greeted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(greeted, "a freed per-address slot is reused");
    drop(b);
}

#[tokio::test]
async fn a_busy_session_ends_at_its_time_limit() {
    let limit = Duration::from_millis(700);
    let t = setup_with(SmtpConfig {
        session_timeout: limit,
        idle_timeout: Duration::from_secs(30),
        ..test_config()
    })
    .await;
    let started = Instant::now();
    let mut c = Raw::connect(t.smtp.addr).await;
    c.expect(220).await;
    // Never idle: a NOOP every 50 ms.
    let bye = loop {
        c.send("NOOP\r\n").await;
        let (code, text) = c.reply().await;
        if code != 250 {
            break (code, text);
        }
        assert!(started.elapsed() < Duration::from_secs(10), "never cut off");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(bye.0, 421, "{}", bye.1);
    assert!(bye.1.contains("4.4.2") && bye.1.contains("session time limit"));
    assert!(started.elapsed() >= limit);
    assert!(c.closed().await);

    // Mid-DATA too: the message is not stored.
    let mut c = Raw::connect(t.smtp.addr).await;
    c.expect(220).await;
    c.send("EHLO x.test\r\nMAIL FROM:<a@x.test>\r\nRCPT TO:<inbox@ours.test>\r\nDATA\r\n")
        .await;
    for code in [250, 250, 250, 354] {
        c.expect(code).await;
    }
    let started = Instant::now();
    // A line every 50 ms, past the limit (the server reads on after its 421
    // for a moment, so these writes do not fail).
    while started.elapsed() < limit + Duration::from_millis(300) {
        c.send("X-Slow: line\r\n").await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(c.expect(421).await.contains("session time limit"));
    assert!(inbound_in(&t.app.db, "inbox@ours.test").await.is_empty());
    still_serving(&t, 1).await;
}

#[tokio::test]
async fn a_pipelining_flood_ends_at_the_time_limit_too() {
    let limit = Duration::from_millis(500);
    let t = setup_with(SmtpConfig {
        session_timeout: limit,
        idle_timeout: Duration::from_secs(30),
        ..test_config()
    })
    .await;
    let (rd, mut wr) = TcpStream::connect(t.smtp.addr)
        .await
        .expect("connect")
        .into_split();
    let started = Instant::now();
    // Commands arrive faster than they are answered (several batches stay
    // unanswered, but fewer than the server reads after its last reply):
    // the server never waits for input, so only a check of the clock can
    // end the session.
    const BATCH: usize = 10_000;
    const OUTSTANDING: usize = 8;
    let (answered_tx, mut answered) = tokio::sync::watch::channel(0usize);
    let flood = tokio::spawn(async move {
        let batch = "NOOP\r\n".repeat(BATCH);
        let mut sent = 0usize;
        while started.elapsed() < Duration::from_secs(10) {
            if wr.write_all(batch.as_bytes()).await.is_err() {
                break;
            }
            sent += BATCH;
            let wanted = sent.saturating_sub(OUTSTANDING * BATCH);
            if answered.wait_for(|n| *n >= wanted).await.is_err() {
                break;
            }
        }
    });
    let mut rd = BufReader::new(rd);
    let mut line = String::new();
    let mut oks = 0usize;
    let last = loop {
        line.clear();
        let n = tokio::time::timeout(Duration::from_secs(15), rd.read_line(&mut line))
            .await
            .expect("a reply")
            .expect("read a reply");
        if line.starts_with("250") {
            oks += 1;
            answered_tx.send_replace(oks);
        } else if n == 0 || !line.starts_with("220") {
            break line.clone();
        }
    };
    assert!(oks > BATCH, "the flood was served for a while ({oks})");
    assert!(last.starts_with("421 4.4.2"), "{last:?}");
    assert!(
        started.elapsed() < limit + Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    flood.abort();
}

/// The start of a transaction for inbox@ours.test, up to the 354.
async fn start_data(c: &mut Raw) {
    c.send("MAIL FROM:<ann@external.test>\r\nRCPT TO:<inbox@ours.test>\r\nDATA\r\n")
        .await;
    for code in [250, 250, 354] {
        c.expect(code).await;
    }
}

#[tokio::test]
async fn sessions_in_data_are_never_evicted() {
    let t = setup_with(SmtpConfig {
        max_connections: 2,
        idle_timeout: Duration::from_secs(30),
        ..test_config()
    })
    .await;
    let mut senders = Vec::new();
    for _ in 0..2 {
        let mut c = Raw::connect(t.smtp.addr).await;
        c.expect(220).await;
        c.send("EHLO x.test\r\n").await;
        c.expect(250).await;
        start_data(&mut c).await;
        c.send("Subject: part way\r\n").await;
        senders.push(c);
    }
    // Every place is receiving DATA: the newcomer is the one refused.
    let mut late = Raw::connect(t.smtp.addr).await;
    assert!(
        late.expect(421)
            .await
            .contains("4.3.2 Too many connections")
    );
    assert!(late.closed().await);
    for (n, c) in senders.iter_mut().enumerate() {
        c.send(&format!(
            "Message-ID: <data-{n}@external.test>\r\n\r\nkept\r\n.\r\nQUIT\r\n"
        ))
        .await;
        c.expect(250).await;
        c.expect(221).await;
    }
    assert_eq!(inbound_in(&t.app.db, "inbox@ours.test").await.len(), 2);
    drop(senders);
    still_serving(&t, 1).await;
}

#[tokio::test]
async fn a_smuggled_end_of_data_is_refused_and_nothing_is_stored() {
    let t = setup_with(test_config()).await;
    let mut c = Raw::connect(t.smtp.addr).await;
    c.expect(220).await;
    c.send("EHLO x.test\r\n").await;
    c.expect(250).await;
    for (n, end) in ["\n.\n", "\r\n.\n", "\n.\r\n"].into_iter().enumerate() {
        start_data(&mut c).await;
        // What a server that ends DATA at a bare-LF "." would take as a
        // second, forged transaction.
        let payload = format!(
            "Subject: innocent {n}\r\n\r\nhello{end}MAIL FROM:<ceo@ours.test>\r\n\
             RCPT TO:<inbox@ours.test>\r\nDATA\r\nFrom: ceo@ours.test\r\n\
             Subject: smuggled {n}\r\n\r\npay them\r\n.\r\n"
        );
        c.send_bytes(payload.as_bytes()).await;
        let refused = c.expect(554).await;
        assert!(
            refused.contains("5.5.2") && refused.contains("bare <LF>"),
            "{refused}"
        );
    }
    // The session is still in step: the next transaction goes through.
    start_data(&mut c).await;
    c.send("Subject: fine\r\nMessage-ID: <fine@external.test>\r\n\r\nok\r\n.\r\nQUIT\r\n")
        .await;
    c.expect(250).await;
    c.expect(221).await;
    let subjects: Vec<String> = inbound_in(&t.app.db, "inbox@ours.test")
        .await
        .into_iter()
        .map(|m| m.subject)
        .collect();
    assert_eq!(subjects, vec!["fine"]);
}

/// One message through a fresh session; the stored copy's raw MIME.
async fn deliver(t: &Inbound, helo: &str, from: &str, data: &str) -> String {
    let mut c = Raw::connect(t.smtp.addr).await;
    c.expect(220).await;
    c.send(&format!(
        "EHLO {helo}\r\nMAIL FROM:<{from}>\r\nRCPT TO:<inbox@ours.test>\r\nDATA\r\n"
    ))
    .await;
    for code in [250, 250, 250, 354] {
        c.expect(code).await;
    }
    c.send(&format!("{data}\r\n.\r\nQUIT\r\n")).await;
    let stored = c.expect(250).await;
    c.expect(221).await;
    let id = stored.rsplit(' ').next().expect("message id");
    String::from_utf8(raw_of(&t.app.db, id).await).expect("utf-8")
}

/// The results of one method (`spf`, `dkim`, `dmarc`) in an unfolded field.
fn method<'a>(results: &'a str, name: &str) -> Vec<&'a str> {
    results
        .split("; ")
        .filter(|r| r.starts_with(&format!("{name}=")))
        .collect()
}

/// The value of our `Authentication-Results` field, unfolded.
fn our_results(raw: &str) -> String {
    let head = raw.split("\r\n\r\n").next().unwrap_or("");
    let fields: Vec<&str> = head
        .split("\r\nAuthentication-Results: mx.ours.test;")
        .skip(1)
        .collect();
    assert_eq!(fields.len(), 1, "exactly one field of ours: {head}");
    // The rest of its first line, then its folded lines.
    let mut lines = fields[0].split("\r\n");
    let mut out = lines.next().unwrap_or("").trim().to_string();
    for line in lines.take_while(|l| l.starts_with([' ', '\t'])) {
        out.push(' ');
        out.push_str(line.trim());
    }
    out.trim().to_string()
}

#[tokio::test]
async fn accepted_mail_carries_its_spf_result() {
    let t = setup_with(test_config()).await;
    t.app
        .dns
        .set_txt("pass.test", &["v=spf1 ip4:192.0.2.1 ip4:127.0.0.0/8 -all"]);
    t.app
        .dns
        .set_txt("fail.test", &["v=spf1 ip4:192.0.2.1 -all"]);
    t.app.dns.set_txt("soft.test", &["v=spf1 ~all"]);
    t.app.dns.set_txt("helo.pass.test", &["v=spf1 a -all"]);
    t.app
        .dns
        .set_a("helo.pass.test", &["127.0.0.1".parse().unwrap()]);
    for (helo, from, want) in [
        (
            "c.test",
            "ann@pass.test",
            "spf=pass smtp.mailfrom=ann@pass.test",
        ),
        (
            "c.test",
            "ann@fail.test",
            "spf=fail smtp.mailfrom=ann@fail.test",
        ),
        (
            "c.test",
            "ann@soft.test",
            "spf=softfail smtp.mailfrom=ann@soft.test",
        ),
        (
            "c.test",
            "ann@none.test",
            "spf=none smtp.mailfrom=ann@none.test",
        ),
        ("helo.pass.test", "", "spf=pass smtp.helo=helo.pass.test"),
        ("nothing.test", "", "spf=none smtp.helo=nothing.test"),
    ] {
        let raw = deliver(&t, helo, from, "Subject: hi\r\n\r\nhello").await;
        let results = our_results(&raw);
        assert_eq!(method(&results, "spf"), vec![want], "{from}");
        assert_eq!(method(&results, "dkim"), vec!["dkim=none"]);
        // No From field: no domain for DMARC to check.
        assert_eq!(method(&results, "dmarc"), vec!["dmarc=permerror"]);
    }
}

#[tokio::test]
async fn results_forged_under_our_name_are_dropped_and_others_kept() {
    let t = setup_with(test_config()).await;
    t.app
        .dns
        .set_txt("bank.test", &["v=spf1 ip4:192.0.2.1 -all"]);
    let data = "Authentication-Results: mx.ours.test; spf=pass smtp.mailfrom=ceo@bank.test\r\n\
                Authentication-Results: MX.OURS.TEST (forged)\r\n  ; dkim=pass header.d=bank.test\r\n\
                Authentication-Results: upstream.test; spf=pass smtp.mailfrom=ceo@bank.test\r\n\
                From: ceo@bank.test\r\nSubject: wire the money\r\n\r\nnow";
    let raw = deliver(&t, "c.test", "ceo@bank.test", data).await;
    assert_eq!(
        our_results(&raw),
        "spf=fail smtp.mailfrom=ceo@bank.test; dkim=none; dmarc=none header.from=bank.test"
    );
    assert!(!raw.to_ascii_lowercase().contains("forged"), "{raw}");
    assert!(raw.contains("\r\nAuthentication-Results: upstream.test; spf=pass"));
    assert!(raw.contains("\r\nSubject: wire the money\r\n"));
}

#[tokio::test]
async fn a_dead_resolver_is_a_temperror_without_stalling_the_session() {
    // A DNS server that never answers.
    let silent = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let dead = Dns::new(Some(&[silent.local_addr().unwrap()])).unwrap();
    let app = crate::helpers::spawn_app().await;
    app.verified_domain("ours.test").await;
    app.mailbox("inbox@ours.test").await;
    let smtp = crate::helpers::start_smtp_with(
        &app.db,
        Arc::new(dead),
        SmtpConfig {
            auth_timeout: Duration::from_millis(300),
            ..test_config()
        },
    )
    .await;
    let t = Inbound { app, smtp };
    let started = Instant::now();
    let raw = deliver(
        &t,
        "c.test",
        "ann@external.test",
        "From: ann@external.test\r\nSubject: hi\r\n\r\nhello",
    )
    .await;
    assert_eq!(
        our_results(&raw),
        "spf=temperror smtp.mailfrom=ann@external.test; dkim=none; \
         dmarc=temperror header.from=external.test"
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

fn fixture(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    std::fs::read_to_string(path).expect("fixture")
}

#[tokio::test]
async fn dkim_signatures_are_verified() {
    let t = setup_with(test_config()).await;
    for (name, record) in fixture("dkim-keys.txt")
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once(' '))
    {
        t.app.dns.set_txt(name, &[record]);
    }
    // RFC 8463's example, signed with Ed25519 and with RSA.
    let signed = fixture("dkim-rfc8463.eml").replace('\n', "\r\n");
    let signed = signed.trim_end_matches("\r\n");
    let raw = deliver(&t, "c.test", "joe@football.example.com", signed).await;
    assert_eq!(
        our_results(&raw),
        "spf=none smtp.mailfrom=joe@football.example.com; \
         dkim=pass header.d=football.example.com header.s=brisbane header.b=\"/gCrinpc\"; \
         dkim=pass header.d=football.example.com header.s=test header.b=F45dVWDf; \
         dmarc=none header.from=football.example.com"
    );
    // A new Message-ID too, or this would be a duplicate of the first.
    let tampered = signed
        .replace("We lost the game.", "We won the game.")
        .replace("<20030712040037", "<tampered-20030712040037");
    let raw = deliver(&t, "c.test", "joe@football.example.com", &tampered).await;
    let results = our_results(&raw);
    assert_eq!(results.matches("dkim=fail").count(), 2, "{results}");
}

#[tokio::test]
async fn sender_checks_are_reused_within_a_session() {
    let t = setup_with(test_config()).await;
    t.app.dns.set_txt("a.test", &["v=spf1 ip4:127.0.0.1 -all"]);
    t.app.dns.set_txt("_dmarc.a.test", &["v=DMARC1; p=none"]);
    t.app.dns.set_txt("b.test", &["v=spf1 -all"]);
    let mut c = Raw::connect(t.smtp.addr).await;
    c.expect(220).await;
    c.send("EHLO c.test\r\n").await;
    c.expect(250).await;
    let mut results = Vec::new();
    for (n, from) in ["x@a.test", "x@a.test", "x@b.test", "x@a.test"]
        .into_iter()
        .enumerate()
    {
        c.send(&format!(
            "MAIL FROM:<{from}>\r\nRCPT TO:<inbox@ours.test>\r\nDATA\r\n"
        ))
        .await;
        for code in [250, 250, 354] {
            c.expect(code).await;
        }
        c.send(&format!("From: {from}\r\nSubject: {n}\r\n\r\nhi\r\n.\r\n"))
            .await;
        let stored = c.expect(250).await;
        let id = stored.rsplit(' ').next().expect("message id").to_string();
        let raw = String::from_utf8(raw_of(&t.app.db, &id).await).expect("utf-8");
        results.push(our_results(&raw));
        // The policies change after the first message: the session keeps
        // what it found for the same sender, and looks again for another.
        t.app.dns.set_txt("a.test", &["v=spf1 ~all"]);
        t.app.dns.set_txt("_dmarc.a.test", &["v=DMARC1; p=reject"]);
    }
    assert_eq!(
        results,
        vec![
            "spf=pass smtp.mailfrom=x@a.test; dkim=none; dmarc=pass (p=none) header.from=a.test",
            "spf=pass smtp.mailfrom=x@a.test; dkim=none; dmarc=pass (p=none) header.from=a.test",
            "spf=fail smtp.mailfrom=x@b.test; dkim=none; dmarc=none header.from=b.test",
            "spf=softfail smtp.mailfrom=x@a.test; dkim=none; dmarc=fail (p=reject) header.from=a.test",
        ]
    );
}

#[tokio::test]
async fn dmarc_passes_only_with_an_aligned_pass() {
    let t = setup_with(test_config()).await;
    let dns = &t.app.dns;
    dns.set_txt("_dmarc.bank.test", &["v=DMARC1; p=reject"]);
    dns.set_txt("bank.test", &["v=spf1 ip4:127.0.0.1 -all"]);
    dns.set_txt("mail.bank.test", &["v=spf1 ip4:127.0.0.1 -all"]);
    dns.set_txt("attacker.test", &["v=spf1 +all"]);
    for (n, (mail_from, from, want)) in [
        (
            "ceo@bank.test",
            "ceo@bank.test",
            "dmarc=pass (p=reject) header.from=bank.test",
        ),
        // SPF passes, but for the attacker's own domain.
        (
            "x@attacker.test",
            "ceo@bank.test",
            "dmarc=fail (p=reject) header.from=bank.test",
        ),
        // Another subdomain of the same organization: aligned (relaxed).
        (
            "bounce@mail.bank.test",
            "News <news@news.bank.test>",
            "dmarc=pass (p=reject) header.from=news.bank.test",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let data = format!("From: {from}\r\nSubject: {n}\r\n\r\nhello");
        let raw = deliver(&t, "c.test", mail_from, &data).await;
        let results = our_results(&raw);
        assert_eq!(method(&results, "dmarc"), vec![want], "{results}");
    }
}
