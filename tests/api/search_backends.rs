//! Search gives the same answers on SQLite and PostgreSQL (issue 16): one
//! generated store, built through the API and SMTP, and a set of searches on
//! `/threads`, `/emails` and `/messages`, alone and with filters, paged by
//! cursor. Each backend is held to an expectation the test computes from
//! what it sent; when `PIGEONHOLE_TEST_POSTGRES_URL` is set the same store
//! is built on both backends in one run and their answers compared too.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use pigeonhole::auth::Reach;
use pigeonhole::config::Config;
use pigeonhole::core::message_lists::{self, ReceivedFilter};
use pigeonhole::core::paging::Page;
use pigeonhole::core::search_postgres::SearchBounds;
use pigeonhole::core::thread_actions::{self, ThreadFilter};
use pigeonhole::dns_test_server::TestDnsServer;
use pigeonhole::model::messages::Folder;
use pigeonhole::provider::simulator::Simulator;
use pigeonhole::smtp::SmtpConfig;
use pigeonhole::store::Db;
use serde_json::json;

use crate::helpers::{TestApp, TestSmtp, base_config, spawn_state, start_smtp};
use crate::inbound::Raw;

const MAILBOXES: [&str; 2] = ["team@example.com", "sales@example.com"];

/// Words and the chance that a message holds each: from most messages to
/// few. `quartz` is in exactly one message, `violet` only in drafts.
const WORDS: [(&str, u32); 6] = [
    ("apple", 60),
    ("river", 40),
    ("stone", 25),
    ("cloud", 15),
    ("maple", 8),
    ("ember", 4),
];

/// A small deterministic generator (xorshift), so that both backends get
/// the same store and a failure can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A name made of letters only, so that both tokenizers see one word.
fn letters(mut n: usize) -> String {
    let mut s = String::new();
    for _ in 0..3 {
        s.push((b'a' + (n % 26) as u8) as char);
        n /= 26;
    }
    s
}

fn words_of(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// What the test sent, in order: the expectation is computed from it.
#[derive(Clone)]
struct Msg {
    subject: String,
    text: String,
    inbound: bool,
    draft: bool,
}

#[derive(Clone)]
struct ThreadModel {
    /// The first word of each of its messages' subjects.
    tag: String,
    /// Its first message's, as the lists show it.
    subject: String,
    mailbox: usize,
    msgs: Vec<Msg>,
    /// Step of its last message (drafts included: a draft moves its
    /// thread up in the lists).
    last: usize,
    labelled: bool,
    trashed: bool,
    removed: bool,
}

enum Step {
    Start { thread: usize, msg: Msg },
    Reply { thread: usize, msg: Msg },
    Draft { thread: usize, msg: Msg },
}

struct Plan {
    threads: Vec<ThreadModel>,
    steps: Vec<Step>,
}

fn body(rng: &mut Rng, extra: &[&str]) -> String {
    let mut words = vec!["note".to_string()];
    for (w, chance) in WORDS {
        if rng.below(100) < chance as u64 {
            words.push(w.to_string());
        }
    }
    words.extend(extra.iter().map(|w| w.to_string()));
    words.join(" ")
}

fn plan() -> Plan {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let n_threads = 16;
    let mut threads = Vec::new();
    let mut steps = Vec::new();
    let mut n_msgs = 0usize;
    let mut msg = |rng: &mut Rng, thread: &str, inbound: bool, draft: bool, extra: &[&str]| {
        n_msgs += 1;
        Msg {
            subject: format!("{thread} m{}", letters(n_msgs)),
            text: body(rng, extra),
            inbound,
            draft,
        }
    };
    for i in 0..n_threads {
        let tag = format!("t{}", letters(i));
        let first = msg(&mut rng, &tag, i % 2 == 1, false, &[]);
        threads.push(ThreadModel {
            tag,
            subject: first.subject.clone(),
            mailbox: usize::from(i % 3 == 2),
            msgs: Vec::new(),
            last: 0,
            labelled: i % 4 == 0,
            trashed: i == 5,
            removed: i == 3 || i == 10,
        });
        steps.push(Step::Start {
            thread: i,
            msg: first,
        });
    }
    for k in 0..22 {
        let thread = rng.below(n_threads as u64) as usize;
        let subject = threads[thread].tag.clone();
        // The rare word sits in one early reply of a thread that keeps
        // moving: words match anywhere in a thread.
        let extra: &[&str] = if k == 1 { &["quartz"] } else { &[] };
        let inbound = rng.below(2) == 0;
        let m = msg(&mut rng, &subject, inbound, false, extra);
        steps.push(Step::Reply { thread, msg: m });
    }
    for thread in [1, 6, 11, 12] {
        let subject = threads[thread].tag.clone();
        let m = msg(&mut rng, &subject, false, true, &["violet", "apple"]);
        steps.push(Step::Draft { thread, msg: m });
    }
    for (i, step) in steps.iter().enumerate() {
        let (Step::Start { thread, msg }
        | Step::Reply { thread, msg }
        | Step::Draft { thread, msg }) = step;
        threads[*thread].msgs.push(msg.clone());
        threads[*thread].last = i;
    }
    Plan { threads, steps }
}

/// The thread subjects a search on threads should give, newest first.
fn expect_threads(p: &Plan, q: &str, keep: impl Fn(&ThreadModel) -> bool) -> Vec<String> {
    let wanted = words_of(q);
    let mut found: Vec<&ThreadModel> = p
        .threads
        .iter()
        .filter(|t| !t.removed && keep(t))
        .filter(|t| {
            let have: BTreeSet<String> = t
                .msgs
                .iter()
                .filter(|m| !m.draft)
                .flat_map(|m| words_of(&format!("{} {}", m.subject, m.text)))
                .collect();
            !wanted.is_empty() && wanted.is_subset(&have)
        })
        .collect();
    found.sort_by_key(|t| std::cmp::Reverse(t.last));
    found.iter().map(|t| t.subject.clone()).collect()
}

/// The message subjects a search on sent (`inbound` false) or received
/// mail should give, newest first.
fn expect_messages(
    p: &Plan,
    q: &str,
    inbound: bool,
    keep: impl Fn(&ThreadModel) -> bool,
) -> Vec<String> {
    let wanted = words_of(q);
    let mut out = Vec::new();
    for step in p.steps.iter().rev() {
        let (Step::Start { thread, msg } | Step::Reply { thread, msg }) = step else {
            continue;
        };
        let t = &p.threads[*thread];
        if t.removed || msg.inbound != inbound || !keep(t) {
            continue;
        }
        let have = words_of(&format!("{} {}", msg.subject, msg.text));
        if !wanted.is_empty() && wanted.is_subset(&have) {
            out.push(msg.subject.clone());
        }
    }
    out
}

/// One backend's store, built from the plan.
struct Store {
    app: TestApp,
    _smtp: TestSmtp,
}

async fn spawn_on(database_url: String) -> TestApp {
    let dns = TestDnsServer::start().await.expect("start test DNS server");
    let settings = base_config(&database_url, &dns);
    let config = Config::from_map(&settings).expect("valid test config");
    let db = Db::connect(&config.database_url).await.expect("connect");
    let provider = Arc::new(Simulator::new(config.simulator_outbox.clone()));
    let state = pigeonhole::app::AppState::with_provider(config, db, provider)
        .await
        .expect("build state");
    spawn_state(state, dns, database_url).await
}

async fn smtp_deliver(
    smtp: &TestSmtp,
    to: &str,
    msg: &Msg,
    message_id: &str,
    parent: Option<&str>,
) {
    let mut c = Raw::connect(smtp.addr).await;
    c.expect(220).await;
    c.send("EHLO client.test\r\n").await;
    c.expect(250).await;
    c.send(&format!(
        "MAIL FROM:<ann@external.test>\r\nRCPT TO:<{to}>\r\nDATA\r\n"
    ))
    .await;
    c.expect(250).await;
    c.expect(250).await;
    c.expect(354).await;
    let reply = parent
        .map(|p| format!("In-Reply-To: {p}\r\nReferences: {p}\r\n"))
        .unwrap_or_default();
    c.send(&format!(
        "From: Ann <ann@external.test>\r\nTo: {to}\r\nSubject: {}\r\nMessage-ID: {message_id}\r\n\
         {reply}MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n{}\r\n.\r\n",
        msg.subject, msg.text
    ))
    .await;
    c.expect(250).await;
    c.send("QUIT\r\n").await;
}

async fn build(p: &Plan, database_url: String) -> Store {
    let app = spawn_on(database_url).await;
    app.verified_domain("example.com").await;
    for m in MAILBOXES {
        app.mailbox(m).await;
    }
    let smtp = start_smtp(
        &app,
        SmtpConfig {
            hostname: "mx.example.com".into(),
            ..SmtpConfig::default()
        },
    )
    .await;
    // Each thread's id and the Message-ID its replies answer.
    let mut ids: HashMap<usize, (String, String)> = HashMap::new();
    let mut inbound_n = 0;
    for step in &p.steps {
        match step {
            Step::Start { thread, msg } => {
                let mailbox = MAILBOXES[p.threads[*thread].mailbox];
                let (thread_id, message_id) = if msg.inbound {
                    inbound_n += 1;
                    let message_id = format!("<in{inbound_n}@external.test>");
                    smtp_deliver(&smtp, mailbox, msg, &message_id, None).await;
                    let found = app
                        .list_all(&format!(
                            "/api/v1/messages?subject={}",
                            msg.subject.replace(' ', "+")
                        ))
                        .await;
                    assert_eq!(found.len(), 1, "{found:?}");
                    (
                        found[0]["thread_id"].as_str().unwrap().to_string(),
                        message_id,
                    )
                } else {
                    let r = app
                        .post(
                            "/api/v1/emails",
                            json!({"from": mailbox, "to": "ann@external.test", "subject": msg.subject, "text": msg.text}),
                        )
                        .await;
                    assert_eq!(r.status, 202, "{}", r.text);
                    (
                        r.body["thread_id"].as_str().unwrap().to_string(),
                        r.body["message_id"].as_str().unwrap().to_string(),
                    )
                };
                ids.insert(*thread, (thread_id, message_id));
            }
            Step::Reply { thread, msg } => {
                let (thread_id, parent) = ids[thread].clone();
                if msg.inbound {
                    inbound_n += 1;
                    let mailbox = MAILBOXES[p.threads[*thread].mailbox];
                    let parent = if parent.starts_with('<') {
                        parent
                    } else {
                        format!("<{parent}>")
                    };
                    let message_id = format!("<in{inbound_n}@external.test>");
                    smtp_deliver(&smtp, mailbox, msg, &message_id, Some(&parent)).await;
                } else {
                    let r = app
                        .post(
                            &format!("/api/v1/threads/{thread_id}/reply"),
                            json!({"text": msg.text, "subject": msg.subject, "quote": false}),
                        )
                        .await;
                    assert_eq!(r.status, 202, "{}", r.text);
                    assert_eq!(r.body["thread_id"], thread_id.as_str());
                }
            }
            Step::Draft { thread, msg } => {
                let mailbox = MAILBOXES[p.threads[*thread].mailbox];
                let r = app
                    .post(
                        "/api/v1/drafts",
                        json!({"from": mailbox, "thread_id": ids[thread].0, "subject": msg.subject, "text": msg.text}),
                    )
                    .await;
                assert_eq!(r.status, 201, "{}", r.text);
            }
        }
    }
    let r = app.post("/api/v1/labels", json!({"name": "Keep"})).await;
    assert_eq!(r.status, 201, "{}", r.text);
    for (i, t) in p.threads.iter().enumerate() {
        let id = &ids[&i].0;
        // Every thread holds what the plan put in it.
        let r = app.get(&format!("/api/v1/threads/{id}")).await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(
            r.body["messages"].as_array().unwrap().len(),
            t.msgs.len(),
            "{}",
            t.subject
        );
        if t.labelled {
            let r = app
                .patch(
                    &format!("/api/v1/threads/{id}"),
                    json!({"add_labels": ["Keep"]}),
                )
                .await;
            assert_eq!(r.status, 200, "{}", r.text);
        }
        if t.trashed || t.removed {
            let permanent = if t.removed { "?permanent=true" } else { "" };
            let r = app
                .delete(&format!("/api/v1/threads/{id}{permanent}"))
                .await;
            assert!(r.status < 300, "{}", r.text);
        }
    }
    Store { app, _smtp: smtp }
}

/// The `field` of every item of a list, walking its pages by cursor.
async fn walk(app: &TestApp, path: &str, limit: usize, field: &str) -> Vec<String> {
    let sep = if path.contains('?') { '&' } else { '?' };
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..100 {
        let page = match &cursor {
            Some(c) => format!("{path}{sep}limit={limit}&cursor={c}"),
            None => format!("{path}{sep}limit={limit}"),
        };
        let r = app.get(&page).await;
        assert_eq!(r.status, 200, "{page}: {}", r.text);
        let data = r.body["data"].as_array().unwrap();
        assert!(data.len() <= limit);
        out.extend(data.iter().map(|v| v[field].as_str().unwrap().to_string()));
        match r.body["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => return out,
        }
    }
    panic!("{path}: more than 100 pages");
}

fn enc(s: &str) -> String {
    s.replace(' ', "+").replace('@', "%40").replace(':', "%3A")
}

/// Every search of the set on one store, as (request, answer).
async fn answers(p: &Plan, store: &Store) -> Vec<(String, Vec<String>, Vec<String>)> {
    let app = &store.app;
    let queries = [
        "apple",
        "river",
        "stone",
        "cloud",
        "maple",
        "ember",
        "quartz",
        "violet",
        "nothing",
        "river stone",
        "maple ember",
        "apple quartz",
        "note",
        "Apple, CLOUD!",
    ];
    let everything = |_: &ThreadModel| true;
    // `since` from the plain lists: the newest half of each.
    let plain_threads = app.list_all("/api/v1/threads").await;
    let mid = plain_threads.len() / 2;
    let since_thread = plain_threads[mid]["last_message_at"]
        .as_str()
        .unwrap()
        .to_string();
    let recent: BTreeSet<String> = plain_threads[..=mid]
        .iter()
        .map(|t| t["subject"].as_str().unwrap().to_string())
        .collect();
    let plain_sent = app.list_all("/api/v1/emails").await;
    let since_sent = plain_sent[plain_sent.len() / 2]["created_at"]
        .as_str()
        .unwrap()
        .to_string();
    let plain_received = app.list_all("/api/v1/messages").await;
    let until_received = plain_received[plain_received.len() / 2]["received_at"]
        .as_str()
        .unwrap()
        .to_string();

    let mut out = Vec::new();
    for q in queries {
        let qe = enc(q);
        let mut case = |path: String, expected: Vec<String>, got: Vec<String>| {
            out.push((path, expected, got));
        };
        let live = |t: &ThreadModel| !t.trashed;
        let path = format!("/api/v1/threads?q={qe}");
        let got = walk(app, &path, 100, "subject").await;
        case(path.clone(), expect_threads(p, q, live), got);
        let got = walk(app, &path, 2, "subject").await;
        case(format!("{path} (by 2)"), expect_threads(p, q, live), got);
        let path = format!("/api/v1/threads?q={qe}&mailbox={}", enc(MAILBOXES[1]));
        let got = walk(app, &path, 100, "subject").await;
        case(
            path,
            expect_threads(p, q, |t| live(t) && t.mailbox == 1),
            got,
        );
        let path = format!("/api/v1/threads?q={qe}&label=Keep");
        let got = walk(app, &path, 1, "subject").await;
        case(path, expect_threads(p, q, |t| live(t) && t.labelled), got);
        let path = format!("/api/v1/threads?q={qe}&folder=inbox");
        let got = walk(app, &path, 100, "subject").await;
        case(
            path,
            expect_threads(p, q, |t| live(t) && t.msgs.iter().any(|m| m.inbound)),
            got,
        );
        let path = format!("/api/v1/threads?q={qe}&folder=trash");
        let got = walk(app, &path, 100, "subject").await;
        case(path, expect_threads(p, q, |t| t.trashed), got);
        let path = format!("/api/v1/threads?q={qe}&since={}", enc(&since_thread));
        let got = walk(app, &path, 3, "subject").await;
        case(
            path,
            expect_threads(p, q, |t| live(t) && recent.contains(&t.subject)),
            got,
        );

        let path = format!("/api/v1/emails?q={qe}");
        let got = walk(app, &path, 2, "subject").await;
        case(path, expect_messages(p, q, false, everything), got);
        let path = format!("/api/v1/emails?q={qe}&mailbox={}", enc(MAILBOXES[1]));
        let got = walk(app, &path, 100, "subject").await;
        case(path, expect_messages(p, q, false, |t| t.mailbox == 1), got);
        let path = format!("/api/v1/emails?q={qe}&since={}", enc(&since_sent));
        let got = walk(app, &path, 100, "subject").await;
        let newer: BTreeSet<String> = plain_sent[..=plain_sent.len() / 2]
            .iter()
            .map(|m| m["subject"].as_str().unwrap().to_string())
            .collect();
        let expected = expect_messages(p, q, false, everything)
            .into_iter()
            .filter(|s| newer.contains(s))
            .collect();
        case(path, expected, got);

        let path = format!("/api/v1/messages?q={qe}");
        let got = walk(app, &path, 3, "subject").await;
        case(path, expect_messages(p, q, true, everything), got);
        let path = format!("/api/v1/messages?q={qe}&folder=trash");
        let got = walk(app, &path, 100, "subject").await;
        case(path, expect_messages(p, q, true, |t| t.trashed), got);
        let path = format!("/api/v1/messages?q={qe}&until={}", enc(&until_received));
        let got = walk(app, &path, 100, "subject").await;
        let older: BTreeSet<String> = plain_received[plain_received.len() / 2..]
            .iter()
            .map(|m| m["subject"].as_str().unwrap().to_string())
            .collect();
        let expected = expect_messages(p, q, true, everything)
            .into_iter()
            .filter(|s| older.contains(s))
            .collect();
        case(path, expected, got);
    }
    out
}

fn sqlite_url() -> String {
    let dir = std::env::temp_dir().join("pigeonhole-tests");
    let _ = std::fs::create_dir_all(&dir);
    let name = format!("ph_test_{}", pigeonhole::ids::random_token(16));
    format!("sqlite://{}", dir.join(format!("{name}.db")).display())
}

#[tokio::test]
async fn searches_give_the_same_answers_on_both_backends() {
    let p = plan();
    // The plan exercises what it should: a word in one message only, words
    // only in drafts, words found in different messages of one thread, and
    // threads gone.
    assert!(p.threads.iter().any(|t| t.removed));
    assert!(expect_threads(&p, "violet", |_| true).is_empty());
    assert!(!expect_threads(&p, "quartz", |_| true).is_empty());
    let across = ["river stone", "maple ember", "apple quartz"]
        .iter()
        .any(|q| {
            let wanted = words_of(q);
            p.threads.iter().any(|t| {
                !t.removed
                    && expect_threads(&p, q, |_| true).contains(&t.subject)
                    && !t.msgs.iter().any(|m| {
                        !m.draft
                            && wanted.is_subset(&words_of(&format!("{} {}", m.subject, m.text)))
                    })
            })
        });
    assert!(
        across,
        "no search whose words are in different messages of a thread"
    );
    let mut urls = vec![("sqlite", sqlite_url())];
    if let Ok(admin) = std::env::var("PIGEONHOLE_TEST_POSTGRES_URL")
        && !admin.is_empty()
    {
        let name = format!("ph_test_{}", pigeonhole::ids::random_token(16));
        let url = pigeonhole::store::create_postgres_database(&admin, &name)
            .await
            .expect("create a database on PIGEONHOLE_TEST_POSTGRES_URL");
        urls.push(("postgres", url));
    }
    let mut all = Vec::new();
    for (backend, url) in urls {
        let store = build(&p, url).await;
        let got = answers(&p, &store).await;
        let mut nonempty = 0;
        for (path, expected, answer) in &got {
            assert_eq!(answer, expected, "{backend}: {path}");
            nonempty += usize::from(!expected.is_empty());
        }
        // Most searches find something: the comparison is not of empty lists.
        assert!(nonempty * 2 > got.len(), "{nonempty} of {}", got.len());
        all.push((backend, got));
    }
    if let [(a, first), (b, second)] = &all[..] {
        for ((path, _, x), (_, _, y)) in first.iter().zip(second) {
            assert_eq!(x, y, "{path}: {a} and {b} differ");
        }
    }
}

/// A thread search's pages through the core, with `bounds`.
async fn thread_pages(
    app: &TestApp,
    q: &str,
    folder: Option<Folder>,
    bounds: SearchBounds,
) -> Vec<String> {
    let filter = ThreadFilter {
        text: Some(q.to_string()),
        folder,
        search_bounds: bounds,
        ..ThreadFilter::default()
    };
    let mut page = Page {
        limit: 2,
        after: None,
    };
    let mut out = Vec::new();
    loop {
        let items = thread_actions::list(&app.db, &Reach::Account, &filter, &page)
            .await
            .unwrap();
        let more = items.len() as i64 > page.limit;
        for (at, id, t) in items.into_iter().take(page.limit as usize) {
            out.push(
                serde_json::to_value(&t).unwrap()["subject"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            );
            page.after = Some((at, id));
        }
        if !more {
            return out;
        }
    }
}

/// A received-mail search's pages through the core, with `bounds`.
async fn received_pages(app: &TestApp, q: &str, bounds: SearchBounds) -> Vec<String> {
    let filter = ReceivedFilter {
        text: Some(q.to_string()),
        search_bounds: bounds,
        ..ReceivedFilter::default()
    };
    let mut page = Page {
        limit: 2,
        after: None,
    };
    let mut out = Vec::new();
    loop {
        let items = message_lists::received(&app.db, &Reach::Account, &filter, &page)
            .await
            .unwrap();
        let more = items.len() as i64 > page.limit;
        for (at, id, m) in items.into_iter().take(page.limit as usize) {
            out.push(m.subject.clone());
            page.after = Some((at, id));
        }
        if !more {
            return out;
        }
    }
}

/// On PostgreSQL a search walks the list, counts the matches and then
/// either collects them or walks on (`core::search_postgres`); with small
/// bounds the generated store takes every one of those paths, and each
/// gives the answer the expectation does. (On SQLite the bounds do not
/// apply and the answers are the same.)
#[tokio::test]
async fn every_step_of_a_bounded_search_gives_the_same_answers() {
    let p = plan();
    let store = build(&p, crate::helpers::fresh_database_url().await).await;
    let bounds = [
        // The first walk fills the page or ends the list.
        SearchBounds {
            first_walk: 1000,
            walk_chunk: 1000,
            collect_max: 1000,
        },
        // Counted, and few enough to collect.
        SearchBounds {
            first_walk: 1,
            walk_chunk: 1,
            collect_max: 1000,
        },
        // Counted, too many to collect: the walk goes on, chunk by chunk.
        SearchBounds {
            first_walk: 1,
            walk_chunk: 2,
            collect_max: 0,
        },
        SearchBounds {
            first_walk: 2,
            walk_chunk: 3,
            collect_max: 1,
        },
    ];
    check_bounded_steps(&p, &store, &bounds).await;
    // On PostgreSQL the migration that creates the thread documents builds
    // them for the mail already stored; rebuilt that way they give the
    // same answers.
    if store.app.db.backend() == pigeonhole::store::Backend::Postgres {
        sqlx::raw_sql("DELETE FROM thread_search")
            .execute(store.app.db.writer())
            .await
            .unwrap();
        assert!(
            thread_pages(&store.app, "apple", None, bounds[1])
                .await
                .is_empty()
        );
        sqlx::raw_sql(pigeonhole::core::search_postgres::THREAD_DOCUMENTS_BACKFILL)
            .execute(store.app.db.writer())
            .await
            .unwrap();
        check_bounded_steps(&p, &store, &bounds).await;
    }
}

async fn check_bounded_steps(p: &Plan, store: &Store, bounds: &[SearchBounds]) {
    for q in [
        "apple",
        "river stone",
        "quartz",
        "maple",
        "violet",
        "nothing",
    ] {
        let live = |t: &ThreadModel| !t.trashed;
        for &b in bounds {
            assert_eq!(
                thread_pages(&store.app, q, None, b).await,
                expect_threads(p, q, live),
                "threads q={q} {b:?}"
            );
            assert_eq!(
                thread_pages(&store.app, q, Some(Folder::Inbox), b).await,
                expect_threads(p, q, |t| live(t) && t.msgs.iter().any(|m| m.inbound)),
                "inbox threads q={q} {b:?}"
            );
            assert_eq!(
                received_pages(&store.app, q, b).await,
                expect_messages(p, q, true, |_| true),
                "messages q={q} {b:?}"
            );
        }
    }
}
