//! Inbox read benchmark: starts Pigeonhole on a fresh database, bulk-loads a
//! realistic mail store straight into the tables (threads, messages, full-text
//! index, recipients, contacts, labels, events, attachments), then measures the
//! read API sequentially over one keep-alive connection.
//!
//!     cargo run --release --example bench_inbox -- --messages 1000000 --threads 200000 --mailboxes 50
//!
//! Options: `--messages N` (10000), `--threads N` (messages / 5), `--mailboxes N`
//! (50), `--requests N` timed requests per figure (200), `--warmup N` (200;
//! see below),
//! `--depth N` cursor pages to walk before timing the deep page (200),
//! `--seed N` (1), `--rows-per-statement N` (500), `--tx-messages N` messages
//! per load transaction (2000), `--budget SECS` wall time per measured figure
//! (30; at least 5 samples), `--keep` (keep the database afterwards),
//! `--no-analyze` (PostgreSQL: measure right after the load, before any
//! `VACUUM ANALYZE` of the benchmark's own; the load is still written out
//! by a `CHECKPOINT` before timing, which leaves the statistics alone),
//! `--explain` (print the query plans of the measured list queries),
//! `--samples DIR` (each figure's start and its latencies, in the order they
//! ran, to a file of its own in DIR), `--in-turn` (time the search figures
//! in turn, one request of each per round, where each figure's requests
//! otherwise run one after the other: `Client::measure_in_turn`),
//! `--db URL` (reuse a database kept by an earlier run with the same sizes and
//! seed: nothing is loaded, the same plan is regenerated to pick ids and terms),
//! `--load-pool-searches` (PostgreSQL, after a load: time the search figures
//! once through the loading pool's connections too, before the service's
//! own; see below).
//!
//! On PostgreSQL the load goes through the first server's pool; what is
//! timed goes through a second server with a pool of its own, as a service
//! reading a store has never run the loader's bulk statements (each INSERT
//! of hundreds of rows prepared and cached on its connection) nor the
//! thread documents' backfill.
//!
//! The warm-up is sized to the service's pool of 16 PostgreSQL connections,
//! which a sequential client goes round: each connection plans a statement
//! on its first six runs (PostgreSQL's custom plans, then the generic one)
//! and loads its caches on the first, so a figure whose statements are new
//! to the run (the first search of a list) was timing some 130 of those
//! one-off runs, a tenth of a millisecond or more each, with a warm-up of
//! 20: its p99 said how the pool warms, not what a search costs.
//!
//! Uses SQLite in a temporary directory, or PostgreSQL when
//! `PIGEONHOLE_BENCH_POSTGRES_URL` names a server (a fresh database is created).
//! The data are generated from a seeded RNG, so two runs with the same sizes and
//! seed load the same mail (ids included).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use pigeonhole::app::{self, AppState};
use pigeonhole::auth;
use pigeonhole::config::Config;
use pigeonhole::core::thread_actions::COLUMNS as THREAD_COLUMNS;
use pigeonhole::core::threads::{format_folders, normalize_subject, snippet, subject_key};
use pigeonhole::store::{Backend, Db, RowExt, Sql, Value};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value as Json, json};

// ---------------------------------------------------------------------------
// Arguments
// ---------------------------------------------------------------------------

struct Args {
    messages: usize,
    threads: usize,
    mailboxes: usize,
    requests: usize,
    warmup: usize,
    depth: usize,
    seed: u64,
    rows_per_statement: usize,
    tx_messages: usize,
    budget_secs: usize,
    keep: bool,
    no_analyze: bool,
    explain: bool,
    db: Option<String>,
    samples: Option<String>,
    in_turn: bool,
    load_pool_searches: bool,
}

fn parse_args() -> Args {
    let args: Vec<String> = std::env::args().collect();
    let get = |name: &str| -> Option<String> {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let num = |name: &str, default: usize| -> usize {
        get(name)
            .map(|v| v.replace('_', "").parse().unwrap_or(default))
            .unwrap_or(default)
    };
    let messages = num("--messages", 10_000).max(1);
    let threads = num("--threads", (messages / 5).max(1)).clamp(1, messages);
    Args {
        messages,
        threads,
        mailboxes: num("--mailboxes", 50).clamp(1, 10_000),
        requests: num("--requests", 200).max(1),
        warmup: num("--warmup", 200),
        depth: num("--depth", 200),
        seed: num("--seed", 1) as u64,
        rows_per_statement: num("--rows-per-statement", 500).max(1),
        tx_messages: num("--tx-messages", 2000).max(1),
        budget_secs: num("--budget", 30).max(1),
        keep: args.iter().any(|a| a == "--keep"),
        no_analyze: args.iter().any(|a| a == "--no-analyze"),
        explain: args.iter().any(|a| a == "--explain"),
        db: get("--db"),
        samples: get("--samples"),
        in_turn: args.iter().any(|a| a == "--in-turn"),
        load_pool_searches: args.iter().any(|a| a == "--load-pool-searches"),
    }
}

// ---------------------------------------------------------------------------
// Deterministic helpers
// ---------------------------------------------------------------------------

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn mix(a: u64, b: u64) -> u64 {
    splitmix(a ^ splitmix(b.wrapping_add(0x1234_5678)))
}

const ALPHABET: &[u8] = b"0123456789abcdefghjkmnpqrstvwxyz";

/// `len` base32 characters derived from `h` (the same alphabet as real ids).
fn token(h: u64, len: usize) -> String {
    let mut out = String::with_capacity(len);
    let mut x = h;
    let mut left = 0;
    for _ in 0..len {
        if left < 5 {
            x = splitmix(x);
            left = 64;
        }
        out.push(ALPHABET[(x & 31) as usize] as char);
        x >>= 5;
        left -= 5;
    }
    out
}

// ---------------------------------------------------------------------------
// Vocabulary
// ---------------------------------------------------------------------------

/// Real words, most frequent first; the tail of the vocabulary is synthetic.
const WORDS: &str = "the to and of a in that is for it you on with this be we have are as \
at your not will can if or but all from by so do about an our would there what just me \
they one out up get when which more like time know was please some need thanks any also \
them has new could now other into then than only see here next week make let back should \
been well work its how team update today meeting still think call over want sure going \
good look after before first last because project plan review tomorrow send sent attached \
note thing right way take may these those very much many most where while again around \
help check said since each day days early late soon question questions answer issue issues \
customer client order invoice payment account report data budget quarter monday tuesday \
wednesday thursday friday morning afternoon evening schedule draft final version change \
changes agenda notes follow following available confirm confirmed details document \
documents share shared feedback proposal contract deadline launch release support ticket \
service price pricing quote discount shipping delivery product feature request access \
login password server email message list group office remote travel flight hotel lunch \
dinner coffee weekend holiday vacation offer interview candidate hire role position \
salary benefits policy legal review approved approval sign signed copy file folder link \
site page website design mockup brand marketing campaign sales lead leads target goal \
numbers figures chart slide slides deck presentation demo trial subscription renewal \
cancel refund return warranty repair install setup config test testing bug fix patch \
deploy production staging backup storage network security audit compliance training \
course workshop conference event venue booking reservation receipt expense expenses \
reimbursement tax taxes bank transfer wire balance statement summary minutes action \
items owner status blocked pending progress complete done ready waiting hold priority \
urgent important reminder overdue estimate timeline milestone phase scope requirement \
requirements spec architecture database migration performance latency incident outage \
postmortem roadmap strategy partner partners vendor supplier inventory warehouse \
logistics freight customs packaging label labels sample samples catalog order's";

const FIRST_NAMES: &[&str] = &[
    "alice", "bruno", "carla", "dmitri", "elena", "farid", "greta", "hiro", "ines", "jonas",
    "kofi", "lena", "marco", "nadia", "oscar", "priya", "quentin", "rosa", "samir", "tanya",
    "ulrich", "vera", "wei", "ximena", "yusuf", "zoe", "anders", "beatriz", "chen", "daria",
    "emil", "fatima", "goran", "hannah", "igor", "julia", "kenji", "laila", "mateo", "nora",
    "omar", "paula", "rafael", "sofia", "tomas", "ursula", "viktor", "wanda", "yara", "zeno",
];
const LAST_NAMES: &[&str] = &[
    "moreno",
    "schmidt",
    "tanaka",
    "okafor",
    "novak",
    "rossi",
    "larsen",
    "kowalski",
    "haddad",
    "fischer",
    "silva",
    "petrov",
    "nakamura",
    "dubois",
    "jensen",
    "garcia",
    "ivanova",
    "kaplan",
    "lindqvist",
    "mensah",
    "oconnor",
    "popescu",
    "quinn",
    "ramos",
    "sato",
    "torres",
    "urban",
    "varga",
    "weber",
    "yilmaz",
    "zhang",
    "andersen",
    "brennan",
    "costa",
    "dalton",
    "eriksen",
    "ferreira",
    "gallo",
    "horvat",
    "ito",
];
const FREEMAIL: &[&str] = &[
    "gmail.com",
    "outlook.com",
    "yahoo.com",
    "fastmail.com",
    "proton.me",
    "icloud.com",
];
const RARE_WORDS: &[&str] = &[
    "quetzalcoatl",
    "xylophonist",
    "zeugma",
    "kumquat",
    "palimpsest",
    "sesquipedalian",
    "borborygmus",
    "defenestrate",
    "ziggurat",
    "flibbertigibbet",
    "snollygoster",
    "cattywampus",
    "lollygag",
    "brouhaha",
    "gobbledygook",
    "kerfuffle",
    "widdershins",
    "bumfuzzle",
    "taradiddle",
    "collywobbles",
];
const LABEL_NAMES: &[&str] = &[
    "Finance",
    "Clients",
    "Follow up",
    "Legal",
    "Travel",
    "Receipts",
];

struct Vocab {
    words: Vec<String>,
    /// Cumulative Zipf weights over `words`.
    cdf: Vec<f64>,
    /// Id of the first rare word (they follow the Zipf vocabulary).
    rare_base: usize,
    index: HashMap<String, usize>,
}

impl Vocab {
    fn new(size: usize) -> Vocab {
        let mut words: Vec<String> = Vec::new();
        let mut seen: HashSet<String> = HashSet::new();
        for w in WORDS.split_whitespace() {
            if seen.insert(w.to_string()) {
                words.push(w.to_string());
            }
        }
        for n in FIRST_NAMES.iter().chain(LAST_NAMES).chain(RARE_WORDS) {
            seen.insert(n.to_string());
        }
        // Pronounceable synthetic words, from a fixed seed so that the
        // vocabulary is the same whatever the data seed.
        let mut rng = StdRng::seed_from_u64(0x05ee_d0f7_0cab);
        let onsets = [
            "b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br",
            "cl", "dr", "st", "tr", "gr", "pl", "sh", "ch",
        ];
        let vowels = ["a", "e", "i", "o", "u", "ai", "ou", "ea"];
        let codas = ["", "", "", "n", "r", "s", "l", "t", "m", "nd", "st", "x"];
        while words.len() < size {
            let syllables = rng.gen_range(2..=3);
            let mut w = String::new();
            for _ in 0..syllables {
                w.push_str(onsets[rng.gen_range(0..onsets.len())]);
                w.push_str(vowels[rng.gen_range(0..vowels.len())]);
            }
            w.push_str(codas[rng.gen_range(0..codas.len())]);
            if seen.insert(w.clone()) {
                words.push(w);
            }
        }
        let mut cdf = Vec::with_capacity(words.len());
        let mut total = 0.0;
        for r in 0..words.len() {
            total += 1.0 / (r as f64 + 2.7).powf(1.07);
            cdf.push(total);
        }
        for c in &mut cdf {
            *c /= total;
        }
        let rare_base = words.len();
        words.extend(RARE_WORDS.iter().map(|w| w.to_string()));
        let index = words
            .iter()
            .enumerate()
            .map(|(i, w)| (w.clone(), i))
            .collect();
        Vocab {
            words,
            cdf,
            rare_base,
            index,
        }
    }

    fn sample(&self, rng: &mut StdRng) -> usize {
        let u: f64 = rng.r#gen();
        self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1)
    }

    /// A content word: mostly skips the very frequent function words.
    fn sample_content(&self, rng: &mut StdRng) -> usize {
        loop {
            let w = self.sample(rng);
            if w >= 40 || rng.gen_bool(0.05) {
                return w;
            }
        }
    }
}

/// Document frequencies (messages containing a word in subject or body).
struct Df {
    count: Vec<u32>,
    stamp: Vec<u32>,
    current: u32,
}

impl Df {
    fn new(words: usize) -> Df {
        Df {
            count: vec![0; words],
            stamp: vec![0; words],
            current: 0,
        }
    }
    fn next_message(&mut self) {
        self.current += 1;
    }
    fn see(&mut self, w: usize) {
        if self.stamp[w] != self.current {
            self.stamp[w] = self.current;
            self.count[w] += 1;
        }
    }
}

// ---------------------------------------------------------------------------
// The plan: who writes to whom, when
// ---------------------------------------------------------------------------

struct Mailbox {
    id: String,
    address: String,
    name: String,
    first: String,
}

struct Person {
    name: String,
    first: String,
    address: String,
}

#[derive(Clone, Copy)]
struct MsgPlan {
    at: i64,
    inbound: bool,
    read: bool,
    attach: bool,
    cc: bool,
    /// Index into the thread's people of the inbound sender.
    sender: u8,
}

struct ThreadPlan {
    id: String,
    mailbox: u32,
    subject: String,
    people: Vec<u32>,
    msgs: Vec<MsgPlan>,
    /// archive or trash for the whole thread; None = inbox/sent by direction.
    folder: Option<&'static str>,
    starred: bool,
    label: Option<usize>,
}

struct Plan {
    seed: u64,
    now: i64,
    mailboxes: Vec<Mailbox>,
    people: Vec<Person>,
    threads: Vec<ThreadPlan>,
    /// Every message as (time, thread, index in thread), oldest first.
    order: Vec<(i64, u32, u16)>,
    vocab: Vocab,
    labels: Vec<(String, String)>,
}

const DAY: i64 = 86_400_000_000;

fn build_plan(args: &Args, mailboxes: Vec<Mailbox>, now: i64) -> Plan {
    let seed = args.seed;
    let mut rng = StdRng::seed_from_u64(seed);
    let vocab = Vocab::new(4000);

    // Correspondents outside the service.
    let companies: Vec<String> = (0..200)
        .map(|i| {
            format!(
                "{}{}.{}",
                vocab.words[300 + i * 7 % 3000],
                ["", "-corp", "-labs", "-group", "-co"][i % 5],
                ["com", "io", "net", "org", "de"][i % 5]
            )
        })
        .collect();
    let n_people = (args.threads / 2 + 200).min(60_000);
    let mut used = HashSet::new();
    let people: Vec<Person> = (0..n_people)
        .map(|i| {
            let first = FIRST_NAMES[rng.gen_range(0..FIRST_NAMES.len())];
            let last = LAST_NAMES[rng.gen_range(0..LAST_NAMES.len())];
            let domain = if rng.gen_bool(0.4) {
                FREEMAIL[rng.gen_range(0..FREEMAIL.len())].to_string()
            } else {
                companies[rng.gen_range(0..companies.len())].clone()
            };
            let mut address = format!("{first}.{last}@{domain}");
            if !used.insert(address.clone()) {
                address = format!("{first}.{last}{i}@{domain}");
                used.insert(address.clone());
            }
            let cap = |s: &str| {
                let mut c = s.chars();
                c.next()
                    .map(|f| f.to_uppercase().collect::<String>() + c.as_str())
                    .unwrap_or_default()
            };
            Person {
                name: format!("{} {}", cap(first), cap(last)),
                first: cap(first),
                address,
            }
        })
        .collect();

    // Busy and quiet mailboxes: weight 1/(i+1)^0.8.
    let mb_weights: Vec<f64> = (0..mailboxes.len())
        .map(|i| 1.0 / (i as f64 + 1.0).powf(0.8))
        .collect();
    let mb_total: f64 = mb_weights.iter().sum();
    let mb_cdf: Vec<f64> = mb_weights
        .iter()
        .scan(0.0, |acc, w| {
            *acc += w / mb_total;
            Some(*acc)
        })
        .collect();

    // Messages per thread: 1 + exponential, capped, then nudged to the total.
    let extra_mean = (args.messages as f64 / args.threads as f64 - 1.0).max(0.0);
    let cap = 100usize;
    let mut counts: Vec<usize> = (0..args.threads)
        .map(|_| {
            if extra_mean == 0.0 {
                return 1;
            }
            let u: f64 = rng.r#gen::<f64>().max(1e-12);
            (1 + (-u.ln() * extra_mean) as usize).min(cap)
        })
        .collect();
    let mut sum: usize = counts.iter().sum();
    while sum < args.messages {
        let i = rng.gen_range(0..counts.len());
        if counts[i] < cap {
            counts[i] += 1;
            sum += 1;
        }
    }
    while sum > args.messages {
        let i = rng.gen_range(0..counts.len());
        if counts[i] > 1 {
            counts[i] -= 1;
            sum -= 1;
        }
    }

    let year = 365 * DAY;
    let mut threads = Vec::with_capacity(args.threads);
    for (t, &n) in counts.iter().enumerate() {
        let u: f64 = rng.r#gen();
        let mailbox = mb_cdf.partition_point(|&c| c < u).min(mailboxes.len() - 1) as u32;
        // Correspondents: mostly the mailbox's regulars.
        let pool = (n_people / 8).max(20).min(n_people);
        let offset = (mailbox as usize * 7919) % n_people;
        let k_people = 1 + usize::from(rng.gen_bool(0.25)) + usize::from(rng.gen_bool(0.08));
        let mut ppl: Vec<u32> = Vec::new();
        while ppl.len() < k_people {
            let r: f64 = rng.r#gen();
            let p = ((offset + (pool as f64 * r * r * r) as usize) % n_people) as u32;
            if !ppl.contains(&p) {
                ppl.push(p);
            }
        }
        // Subject.
        let mut words: Vec<String> = Vec::new();
        match rng.gen_range(0..10) {
            0 => words.push(format!("Invoice {}", rng.gen_range(1000..99999))),
            1 => words.push("Meeting:".into()),
            2 => words.push("Question about".into()),
            3 => words.push(format!("[{}]", vocab.words[vocab.sample_content(&mut rng)])),
            _ => {}
        }
        for _ in 0..rng.gen_range(2..=6) {
            words.push(vocab.words[vocab.sample_content(&mut rng)].clone());
        }
        let mut subject = words.join(" ");
        if let Some(f) = subject.get_mut(0..1) {
            f.make_ascii_uppercase();
        }
        // Times: exponential gaps (mean 10 h); the thread fits in the year.
        let mut gaps: Vec<i64> = (0..n)
            .map(|i| {
                if i == 0 {
                    0
                } else {
                    let u: f64 = rng.r#gen::<f64>().max(1e-12);
                    (-u.ln() * 10.0 * 3600.0 * 1e6) as i64 + rng.gen_range(0..60_000_000)
                }
            })
            .collect();
        let span: i64 = gaps.iter().sum();
        if span > year / 2 {
            let f = (year / 2) as f64 / span as f64;
            for g in &mut gaps {
                *g = (*g as f64 * f) as i64;
            }
        }
        let span: i64 = gaps.iter().sum();
        let start = now - 60_000_000 - span - rng.gen_range(0..(year - span).max(1));
        let mut at = start;
        let mut inbound = rng.gen_bool(0.65);
        let mut msgs = Vec::with_capacity(n);
        for (i, g) in gaps.iter().enumerate() {
            at += g;
            if i > 0 && rng.gen_bool(0.7) {
                inbound = !inbound;
            }
            let age = now - at;
            let read = !inbound || rng.gen_bool(if age > 7 * DAY { 0.98 } else { 0.5 });
            msgs.push(MsgPlan {
                at: at + i as i64, // keeps times in a thread strictly increasing
                inbound,
                read,
                attach: rng.gen_bool(0.02),
                cc: k_people > 1 && rng.gen_bool(0.6),
                sender: rng.gen_range(0..k_people) as u8,
            });
        }
        let folder = match rng.gen_range(0..100) {
            0..=7 => Some("archive"),
            8 => Some("trash"),
            _ => None,
        };
        threads.push(ThreadPlan {
            id: format!("thr_{}", token(mix(seed, 0x7000_0000_0000 | t as u64), 20)),
            mailbox,
            subject,
            people: ppl,
            msgs,
            folder,
            starred: rng.gen_bool(0.03),
            label: rng
                .gen_bool(0.05)
                .then(|| rng.gen_range(0..LABEL_NAMES.len())),
        });
    }
    let mut order: Vec<(i64, u32, u16)> = Vec::with_capacity(args.messages);
    for (t, th) in threads.iter().enumerate() {
        for (k, m) in th.msgs.iter().enumerate() {
            order.push((m.at, t as u32, k as u16));
        }
    }
    order.sort_unstable();
    let labels = LABEL_NAMES
        .iter()
        .enumerate()
        .map(|(i, n)| {
            (
                format!("lbl_{}", token(mix(seed, 0x1abe1 + i as u64), 20)),
                n.to_string(),
            )
        })
        .collect();
    Plan {
        seed,
        now,
        mailboxes,
        people,
        threads,
        order,
        vocab,
        labels,
    }
}

/// Everything about one message that its row needs.
struct Msg {
    id: String,
    message_id: String,
    from: (String, String),
    to: Vec<(String, String)>,
    cc: Vec<(String, String)>,
    subject: String,
    text: String,
    html: String,
    in_reply_to: Option<String>,
    references: Option<String>,
}

impl Plan {
    fn message_id_header(&self, t: usize, k: usize) -> String {
        let th = &self.threads[t];
        let h = mix(self.seed ^ 0x4d49_4400, ((t as u64) << 16) | k as u64);
        if th.msgs[k].inbound {
            let p = &self.people[th.people[th.msgs[k].sender as usize % th.people.len()] as usize];
            let domain = p.address.rsplit('@').next().unwrap_or("example.net");
            format!("<{}@{}>", token(h, 20), domain)
        } else {
            format!("<{}@bench.example.com>", token(h, 24))
        }
    }

    /// From, to, cc, the greeting's name and the signature's name.
    #[allow(clippy::type_complexity)]
    fn parties(
        &self,
        t: usize,
        k: usize,
    ) -> (
        (String, String),
        Vec<(String, String)>,
        Vec<(String, String)>,
        String,
        String,
    ) {
        let th = &self.threads[t];
        let mp = th.msgs[k];
        let mb = &self.mailboxes[th.mailbox as usize];
        let person = |i: usize| {
            let p = &self.people[th.people[i] as usize];
            (p.name.clone(), p.address.clone())
        };
        let owner = (mb.name.clone(), mb.address.clone());
        let sender = mp.sender as usize % th.people.len();
        if mp.inbound {
            let cc: Vec<_> = if mp.cc {
                (0..th.people.len())
                    .filter(|&i| i != sender)
                    .map(person)
                    .collect()
            } else {
                Vec::new()
            };
            let p = &self.people[th.people[sender] as usize];
            (
                person(sender),
                vec![owner],
                cc,
                mb.first.clone(),
                p.first.clone(),
            )
        } else {
            let cc: Vec<_> = if mp.cc {
                (1..th.people.len()).map(person).collect()
            } else {
                Vec::new()
            };
            let p = &self.people[th.people[0] as usize];
            (
                owner,
                vec![person(0)],
                cc,
                p.first.clone(),
                mb.first.clone(),
            )
        }
    }

    fn message(&self, t: usize, k: usize, mut df: Option<&mut Df>) -> Msg {
        let th = &self.threads[t];
        let mut rng = StdRng::seed_from_u64(mix(self.seed ^ 0xb0d1, ((t as u64) << 16) | k as u64));
        let (from, to, cc, greet, sign) = self.parties(t, k);
        if let Some(df) = df.as_deref_mut() {
            df.next_message();
        }
        let subject = if k == 0 {
            th.subject.clone()
        } else if mix(self.seed, ((t as u64) << 16) | k as u64).is_multiple_of(20) {
            format!("Fwd: {}", th.subject)
        } else {
            format!("Re: {}", th.subject)
        };
        // Body: greeting, 20–200 words in sentences and paragraphs, sign-off.
        let n_words = 20 + (180.0 * rng.r#gen::<f64>().powf(1.6)) as usize;
        let mut text = String::with_capacity(n_words * 7 + 64);
        let mut html = String::new();
        let with_html = rng.gen_bool(0.6);
        text.push_str(&format!("Hi {greet},\n\n"));
        let mut paragraphs: Vec<String> = Vec::new();
        let mut para = String::new();
        let mut written = 0;
        while written < n_words {
            let len = rng.gen_range(6..=16).min(n_words - written).max(1);
            let mut sentence = String::new();
            for i in 0..len {
                // About one message in 500 carries one of the rare words.
                let w = if rng.gen_bool(0.000_02) {
                    self.vocab.rare_base + rng.gen_range(0..RARE_WORDS.len())
                } else {
                    self.vocab.sample(&mut rng)
                };
                if let Some(df) = df.as_deref_mut() {
                    df.see(w);
                }
                if i > 0 {
                    sentence.push(' ');
                }
                sentence.push_str(&self.vocab.words[w]);
            }
            if rng.gen_bool(0.08) {
                sentence.push_str(&format!(" {}", rng.gen_range(100..999_999)));
            }
            if let Some(f) = sentence.get_mut(0..1) {
                f.make_ascii_uppercase();
            }
            sentence.push('.');
            if !para.is_empty() {
                para.push(' ');
            }
            para.push_str(&sentence);
            written += len;
            if rng.gen_bool(0.3) {
                paragraphs.push(std::mem::take(&mut para));
            }
        }
        if !para.is_empty() {
            paragraphs.push(para);
        }
        text.push_str(&paragraphs.join("\n\n"));
        let closing = ["Thanks", "Best", "Regards", "Cheers", "Kind regards"][rng.gen_range(0..5)];
        text.push_str(&format!("\n\n{closing},\n{sign}"));
        if with_html {
            html.push_str(&format!("<html><body><p>Hi {greet},</p>"));
            for p in &paragraphs {
                html.push_str("<p>");
                html.push_str(p);
                html.push_str("</p>");
            }
            html.push_str(&format!("<p>{closing},<br>{sign}</p></body></html>"));
        }
        if let Some(df) = df {
            // The subject is indexed too (FTS over subject and body).
            for w in subject.split(|c: char| !c.is_alphanumeric()) {
                if let Some(id) = self.word_id(w) {
                    df.see(id);
                }
            }
        }
        let in_reply_to = (k > 0).then(|| self.message_id_header(t, k - 1));
        let references = (k > 0).then(|| {
            (k.saturating_sub(10)..k)
                .map(|j| self.message_id_header(t, j))
                .collect::<Vec<_>>()
                .join(" ")
        });
        Msg {
            id: format!(
                "msg_{}",
                token(
                    mix(self.seed ^ 0x006d_7367, ((t as u64) << 16) | k as u64),
                    20
                )
            ),
            message_id: self.message_id_header(t, k),
            from,
            to,
            cc,
            subject,
            text,
            html,
            in_reply_to,
            references,
        }
    }

    fn word_id(&self, w: &str) -> Option<usize> {
        if w.is_empty() {
            return None;
        }
        self.vocab.index.get(&w.to_lowercase()).copied()
    }
}

// ---------------------------------------------------------------------------
// Rows
// ---------------------------------------------------------------------------

struct Table {
    name: &'static str,
    columns: &'static [&'static str],
    rows: Vec<Vec<Value>>,
}

impl Table {
    fn new(name: &'static str, columns: &'static [&'static str]) -> Table {
        Table {
            name,
            columns,
            rows: Vec::new(),
        }
    }
}

/// One load transaction.
struct Chunk {
    tables: Vec<Table>,
    messages: usize,
}

const THREAD_COLS: &[&str] = &[
    "id",
    "mailbox_id",
    "mailbox",
    "domain",
    "subject",
    "normalized_subject",
    "snippet",
    "folders",
    "participants",
    "message_count",
    "unread_count",
    "is_starred",
    "has_attachments",
    "last_message_at",
    "created_at",
];
const MESSAGE_COLS: &[&str] = &[
    "seq",
    "id",
    "thread_id",
    "mailbox_id",
    "mailbox",
    "domain",
    "direction",
    "is_draft",
    "folder",
    "message_id",
    "provider_message_id",
    "from_address",
    "from_name",
    "to_addresses",
    "cc_addresses",
    "bcc_addresses",
    "reply_to",
    "subject",
    "text_body",
    "html_body",
    "search_body",
    "headers",
    "in_reply_to",
    "references_header",
    "status",
    "error",
    "opened_at",
    "open_count",
    "open_token",
    "is_read",
    "is_starred",
    "has_attachments",
    "api_key_id",
    "raw",
    "created_at",
    "sent_at",
    "received_at",
];
const RECIPIENT_COLS: &[&str] = &["message_id", "kind", "address"];
const FTS_COLS: &[&str] = &["rowid", "subject", "body"];
const EVENT_COLS: &[&str] = &[
    "id",
    "message_id",
    "type",
    "recipient",
    "detail",
    "occurred_at",
    "created_at",
];
const ATTACHMENT_COLS: &[&str] = &[
    "id",
    "message_id",
    "filename",
    "content_type",
    "size",
    "content_id",
    "inline",
    "content",
];
const CONTACT_COLS: &[&str] = &[
    "id",
    "mailbox_id",
    "mailbox",
    "domain",
    "address",
    "name",
    "message_count",
    "first_seen_at",
    "last_seen_at",
];
const LABEL_COLS: &[&str] = &["id", "name", "name_key", "color", "created_at"];
const THREAD_LABEL_COLS: &[&str] = &["thread_id", "label_id"];

fn t(s: impl Into<String>) -> Value {
    Value::Text(Some(s.into()))
}
fn ot(s: Option<String>) -> Value {
    Value::Text(s)
}
fn i(v: i64) -> Value {
    Value::Int(Some(v))
}
fn oi(v: Option<i64>) -> Value {
    Value::Int(v)
}

fn participants_json(list: &[(String, String)]) -> String {
    Json::Array(
        list.iter()
            .map(|(n, a)| json!({"name": n, "address": a}))
            .collect(),
    )
    .to_string()
}

fn rfc2822(micros: i64) -> String {
    let dt = time::OffsetDateTime::from_unix_timestamp(micros / 1_000_000)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    dt.format(&time::format_description::well_known::Rfc2822)
        .unwrap_or_default()
}

fn fmt_named(p: &(String, String)) -> String {
    if p.0.is_empty() {
        p.1.clone()
    } else {
        format!("{} <{}>", p.0, p.1)
    }
}

/// Thread rows (and, once, labels and contacts), in creation order.
fn thread_chunks(plan: &Plan, per_tx: usize, out: &tokio::sync::mpsc::Sender<Chunk>) {
    let mut by_start: Vec<usize> = (0..plan.threads.len()).collect();
    by_start.sort_by_key(|&t| plan.threads[t].msgs[0].at);
    for part in by_start.chunks(per_tx) {
        let mut threads = Table::new("threads", THREAD_COLS);
        let mut thread_labels = Table::new("thread_labels", THREAD_LABEL_COLS);
        for &ti in part {
            let th = &plan.threads[ti];
            let mb = &plan.mailboxes[th.mailbox as usize];
            let last = th.msgs.len() - 1;
            let last_msg = plan.message(ti, last, None);
            let mut folders: Vec<String> = Vec::new();
            let mut people: Vec<(String, String)> = Vec::new();
            let mut unread = 0;
            let mut attach = false;
            for (k, m) in th.msgs.iter().enumerate() {
                let f = th
                    .folder
                    .unwrap_or(if m.inbound { "inbox" } else { "sent" })
                    .to_string();
                if !folders.contains(&f) {
                    folders.push(f);
                }
                unread += i64::from(!m.read);
                attach |= m.attach;
                // Participants as the application accumulates them: from, to, cc.
                let (from, to, cc, _, _) = plan.parties(ti, k);
                let msg_people = std::iter::once(from).chain(to).chain(cc);
                for p in msg_people {
                    if people.len() < 20 && !people.iter().any(|(_, a)| *a == p.1) {
                        people.push(p);
                    }
                }
            }
            let first_at = th.msgs[0].at;
            threads.rows.push(vec![
                t(&th.id),
                t(&mb.id),
                t(&mb.address),
                t("bench.example.com"),
                t(normalize_subject(&th.subject)),
                t(subject_key(&th.subject)),
                t(snippet(&last_msg.text)),
                t(format_folders(&folders)),
                t(participants_json(&people)),
                i(th.msgs.len() as i64),
                i(unread),
                i(i64::from(th.starred)),
                i(i64::from(attach)),
                i(th.msgs[last].at),
                i(first_at),
            ]);
            if let Some(l) = th.label {
                thread_labels
                    .rows
                    .push(vec![t(&th.id), t(&plan.labels[l].0)]);
            }
        }
        if out
            .blocking_send(Chunk {
                tables: vec![threads, thread_labels],
                messages: 0,
            })
            .is_err()
        {
            return;
        }
    }

    // Labels and contacts (what inbound mail leaves behind).
    let mut labels = Table::new("labels", LABEL_COLS);
    let colors = [
        "#ef4444", "#f59e0b", "#10b981", "#3b82f6", "#8b5cf6", "#ec4899",
    ];
    for (n, (id, name)) in plan.labels.iter().enumerate() {
        labels.rows.push(vec![
            t(id),
            t(name),
            t(name.to_lowercase()),
            t(colors[n % colors.len()]),
            i(plan.now - 400 * DAY),
        ]);
    }
    let mut contacts: HashMap<(u32, u32), (i64, i64, i64)> = HashMap::new();
    for th in &plan.threads {
        for m in th.msgs.iter().filter(|m| m.inbound) {
            let sender = m.sender as usize % th.people.len();
            for (idx, p) in th.people.iter().enumerate() {
                if idx != sender && !m.cc {
                    continue;
                }
                let e = contacts
                    .entry((th.mailbox, *p))
                    .or_insert((0, i64::MAX, i64::MIN));
                e.0 += 1;
                e.1 = e.1.min(m.at);
                e.2 = e.2.max(m.at);
            }
        }
    }
    let mut keys: Vec<_> = contacts.keys().copied().collect();
    keys.sort_unstable();
    let mut first = true;
    for part in keys.chunks(per_tx * 2) {
        let mut table = Table::new("contacts", CONTACT_COLS);
        for (mbi, p) in part {
            let (count, first_seen, last_seen) = contacts[&(*mbi, *p)];
            let mb = &plan.mailboxes[*mbi as usize];
            let person = &plan.people[*p as usize];
            table.rows.push(vec![
                t(format!(
                    "con_{}",
                    token(mix(plan.seed ^ 0xc0, ((*mbi as u64) << 32) | *p as u64), 20)
                )),
                t(&mb.id),
                t(&mb.address),
                t("bench.example.com"),
                t(&person.address),
                t(&person.name),
                i(count),
                i(first_seen),
                i(last_seen),
            ]);
        }
        let mut tables = vec![table];
        if first {
            tables.push(std::mem::replace(
                &mut labels,
                Table::new("labels", LABEL_COLS),
            ));
            first = false;
        }
        if out
            .blocking_send(Chunk {
                tables,
                messages: 0,
            })
            .is_err()
        {
            return;
        }
    }
    if first {
        let _ = out.blocking_send(Chunk {
            tables: vec![labels],
            messages: 0,
        });
    }
}

/// Message rows (with recipients, FTS rows, events, attachments), oldest first.
fn message_chunks(
    plan: &Plan,
    backend: Backend,
    key_id: &str,
    per_tx: usize,
    out: &tokio::sync::mpsc::Sender<Chunk>,
) -> Df {
    let mut df = Df::new(plan.vocab.words.len());
    let mut seq: i64 = 0;
    for part in plan.order.chunks(per_tx) {
        let mut messages = Table::new("messages", MESSAGE_COLS);
        let mut recipients = Table::new("message_recipients", RECIPIENT_COLS);
        let mut fts = Table::new("messages_fts", FTS_COLS);
        let mut events = Table::new("message_events", EVENT_COLS);
        let mut attachments = Table::new("attachments", ATTACHMENT_COLS);
        for &(at, ti, k) in part {
            seq += 1;
            let (ti, k) = (ti as usize, k as usize);
            let th = &plan.threads[ti];
            let mp = th.msgs[k];
            let mb = &plan.mailboxes[th.mailbox as usize];
            let m = plan.message(ti, k, Some(&mut df));
            let h = mix(plan.seed ^ 0xe7, seq as u64);
            let folder = th
                .folder
                .unwrap_or(if mp.inbound { "inbox" } else { "sent" });
            let to_json = serde_json::to_string(&m.to.iter().map(|p| &p.1).collect::<Vec<_>>())
                .unwrap_or_default();
            let cc_json = serde_json::to_string(&m.cc.iter().map(|p| &p.1).collect::<Vec<_>>())
                .unwrap_or_default();
            let (headers, raw, status, provider_id, open_token, sent_at, received_at) =
                if mp.inbound {
                    let mut hdr = serde_json::Map::new();
                    hdr.insert("From".into(), json!(fmt_named(&m.from)));
                    hdr.insert(
                        "To".into(),
                        json!(m.to.iter().map(fmt_named).collect::<Vec<_>>().join(", ")),
                    );
                    if !m.cc.is_empty() {
                        hdr.insert(
                            "Cc".into(),
                            json!(m.cc.iter().map(fmt_named).collect::<Vec<_>>().join(", ")),
                        );
                    }
                    hdr.insert("Subject".into(), json!(m.subject));
                    hdr.insert("Date".into(), json!(rfc2822(at)));
                    hdr.insert("Message-ID".into(), json!(m.message_id));
                    if let Some(r) = &m.in_reply_to {
                        hdr.insert("In-Reply-To".into(), json!(r));
                    }
                    if let Some(r) = &m.references {
                        hdr.insert("References".into(), json!(r));
                    }
                    hdr.insert("MIME-Version".into(), json!("1.0"));
                    hdr.insert("Content-Type".into(), json!("text/plain; charset=utf-8"));
                    let mut raw = String::with_capacity(m.text.len() + 400);
                    for (k, v) in &hdr {
                        raw.push_str(&format!("{k}: {}\r\n", v.as_str().unwrap_or_default()));
                    }
                    raw.push_str("\r\n");
                    raw.push_str(&m.text.replace('\n', "\r\n"));
                    (
                        Json::Object(hdr).to_string(),
                        Value::Bytes(Some(raw.into_bytes().into())),
                        "received",
                        None,
                        None,
                        None,
                        Some(at),
                    )
                } else {
                    let status = match h % 100 {
                        0 | 1 => "bounced",
                        2 => "sent",
                        _ => "delivered",
                    };
                    (
                        "{}".to_string(),
                        Value::Bytes(None),
                        status,
                        Some(format!(
                            "0100{:012x}-{}-{}-000000",
                            at / 1000,
                            token(h, 8),
                            token(h >> 7, 12)
                        )),
                        (!m.html.is_empty()).then(|| token(h ^ 0x0be, 32)),
                        Some(at + 250_000 + (h % 500_000) as i64),
                        None,
                    )
                };
            let opened = open_token.is_some() && h % 5 < 2;
            messages.rows.push(vec![
                i(seq),
                t(&m.id),
                t(&th.id),
                t(&mb.id),
                t(&mb.address),
                t("bench.example.com"),
                t(if mp.inbound { "inbound" } else { "outbound" }),
                i(0),
                t(folder),
                t(&m.message_id),
                ot(provider_id),
                t(&m.from.1),
                ot((!m.from.0.is_empty()).then(|| m.from.0.clone())),
                t(to_json),
                t(cc_json),
                t("[]"),
                ot(None),
                t(&m.subject),
                t(&m.text),
                t(&m.html),
                t(&m.text),
                t(headers),
                ot(m.in_reply_to.clone()),
                ot(m.references.clone()),
                t(status),
                ot((status == "bounced").then(|| {
                    "550 5.1.1 The email account that you tried to reach does not exist".to_string()
                })),
                oi(opened.then(|| at + 3_600_000_000)),
                i(if opened { 1 + (h % 3) as i64 } else { 0 }),
                ot(open_token),
                i(i64::from(mp.read)),
                i(i64::from(th.starred)),
                i(i64::from(mp.attach)),
                ot((!mp.inbound).then(|| key_id.to_string())),
                raw,
                i(at),
                oi(sent_at),
                oi(received_at),
            ]);
            for (kind, list) in [("to", &m.to), ("cc", &m.cc)] {
                for p in list {
                    recipients.rows.push(vec![t(&m.id), t(kind), t(&p.1)]);
                }
            }
            if backend == Backend::Sqlite {
                fts.rows.push(vec![i(seq), t(&m.subject), t(&m.text)]);
            }
            if let Some(sent) = sent_at {
                events.rows.push(vec![
                    t(format!("mev_{}", token(h ^ 0x5e, 20))),
                    t(&m.id),
                    t("send"),
                    ot(None),
                    ot(None),
                    i(sent),
                    i(sent),
                ]);
                if status != "sent" {
                    let kind = if status == "bounced" {
                        "bounce"
                    } else {
                        "delivery"
                    };
                    events.rows.push(vec![
                        t(format!("mev_{}", token(h ^ 0xde, 20))),
                        t(&m.id),
                        t(kind),
                        t(&m.to[0].1),
                        ot(None),
                        i(sent + 2_000_000),
                        i(sent + 2_100_000),
                    ]);
                }
            }
            if mp.attach {
                let content: Vec<u8> = (0..2048u32)
                    .map(|b| (mix(h, b as u64) & 0xff) as u8)
                    .collect();
                attachments.rows.push(vec![
                    t(format!("att_{}", token(h ^ 0xa7, 20))),
                    t(&m.id),
                    t(format!("document-{}.pdf", h % 10_000)),
                    t("application/pdf"),
                    i(content.len() as i64),
                    ot(None),
                    i(0),
                    Value::Bytes(Some(content.into())),
                ]);
            }
        }
        let chunk = Chunk {
            messages: part.len(),
            tables: vec![messages, recipients, fts, events, attachments],
        };
        if out.blocking_send(chunk).is_err() {
            break;
        }
    }
    df
}

/// One multi-row INSERT. On SQLite the placeholders are anonymous `?`: sqlx
/// looks every `$n` up with `sqlite3_bind_parameter_name`, a linear scan, so
/// thousands of `$n` in one statement cost quadratic time.
fn insert_statement(backend: Backend, table: &Table, rows: Vec<Vec<Value>>) -> Sql {
    let cols = table.columns.len();
    let mut text = format!(
        "INSERT INTO {} ({}) VALUES ",
        table.name,
        table.columns.join(", ")
    );
    let mut args = Vec::with_capacity(rows.len() * cols);
    let mut n = 0;
    for (r, row) in rows.into_iter().enumerate() {
        if r > 0 {
            text.push_str(", ");
        }
        text.push('(');
        for (c, v) in row.into_iter().enumerate() {
            if c > 0 {
                text.push_str(", ");
            }
            n += 1;
            match backend {
                Backend::Sqlite => text.push('?'),
                Backend::Postgres => {
                    text.push('$');
                    text.push_str(&n.to_string());
                }
            }
            args.push(v);
        }
        text.push(')');
    }
    Sql::with(&text, args)
}

struct LoadStats {
    rows: u64,
    messages: u64,
    started: Instant,
    last_print: Instant,
    rows_at_print: u64,
}

async fn write_chunk(
    db: &Db,
    chunk: Chunk,
    rows_per_statement: usize,
    stats: &mut LoadStats,
) -> anyhow::Result<()> {
    let mut tx = db.begin().await?;
    for mut table in chunk.tables {
        if table.rows.is_empty() {
            continue;
        }
        // Stay well under both backends' bound-parameter limits.
        let per = rows_per_statement.min(30_000 / table.columns.len()).max(1);
        let rows = std::mem::take(&mut table.rows);
        stats.rows += rows.len() as u64;
        let mut it = rows.into_iter().peekable();
        while it.peek().is_some() {
            let batch: Vec<Vec<Value>> = it.by_ref().take(per).collect();
            insert_statement(db.backend(), &table, batch)
                .execute_tx(&mut tx)
                .await
                .map_err(|e| anyhow::anyhow!("insert into {}: {e}", table.name))?;
        }
    }
    tx.commit().await?;
    stats.messages += chunk.messages as u64;
    let now = Instant::now();
    if now.duration_since(stats.last_print) >= Duration::from_secs(5) {
        let dt = now.duration_since(stats.last_print).as_secs_f64();
        println!(
            "  loaded {:>9} messages, {:>10} rows in {:>6.1}s  ({:.0} rows/s now, {:.0} rows/s overall, {:.0} messages/s overall)",
            stats.messages,
            stats.rows,
            stats.started.elapsed().as_secs_f64(),
            (stats.rows - stats.rows_at_print) as f64 / dt,
            stats.rows as f64 / stats.started.elapsed().as_secs_f64(),
            stats.messages as f64 / stats.started.elapsed().as_secs_f64(),
        );
        stats.last_print = now;
        stats.rows_at_print = stats.rows;
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Database set-up and size
// ---------------------------------------------------------------------------

async fn fresh_database_url() -> anyhow::Result<String> {
    let name = format!("ph_bench_{}", pigeonhole::ids::random_token(10));
    if let Ok(admin) = std::env::var("PIGEONHOLE_BENCH_POSTGRES_URL") {
        return pigeonhole::store::create_postgres_database(&admin, &name).await;
    }
    let dir = std::env::temp_dir().join("pigeonhole-bench");
    std::fs::create_dir_all(&dir)?;
    Ok(format!(
        "sqlite://{}",
        dir.join(format!("{name}.db")).display()
    ))
}

fn sqlite_path(url: &str) -> Option<std::path::PathBuf> {
    let rest = url
        .strip_prefix("sqlite://")
        .or(url.strip_prefix("sqlite:"))?;
    Some(std::path::PathBuf::from(
        rest.split('?').next().unwrap_or(rest),
    ))
}

async fn database_size(db: &Db, url: &str) -> anyhow::Result<String> {
    if let Some(path) = sqlite_path(url) {
        let size = |suffix: &str| {
            let mut p = path.clone().into_os_string();
            p.push(suffix);
            std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
        };
        let (main, wal) = (size(""), size("-wal"));
        return Ok(format!(
            "{:.1} MiB file + {:.1} MiB WAL ({}); {}",
            main as f64 / 1048576.0,
            wal as f64 / 1048576.0,
            path.display(),
            page_cache_note()
        ));
    }
    let r = Sql::new(
        "SELECT pg_database_size(current_database()) AS total, \
         pg_total_relation_size('messages') AS messages, \
         pg_total_relation_size('threads') AS threads, \
         pg_relation_size('messages_search_sides') AS gin, \
         current_setting('shared_buffers') AS shared_buffers",
    )
    .fetch_one(db.reader())
    .await?;
    Ok(format!(
        "{:.1} MiB (messages {:.1} MiB incl. indexes and TOAST, of which GIN {:.1} MiB; threads {:.1} MiB); server shared_buffers {}; {}",
        r.int("total")? as f64 / 1048576.0,
        r.int("messages")? as f64 / 1048576.0,
        r.int("gin")? as f64 / 1048576.0,
        r.int("threads")? as f64 / 1048576.0,
        r.text("shared_buffers")?,
        page_cache_note(),
    ))
}

/// What the machine keeps of the store in memory, which decides whether a
/// big store's searches read from disk: the page cache's size, and whether
/// the kernel's DAMON runs and with what action (`pageout`: it reclaims
/// what was not touched for a while). Runs on different days differed by
/// both.
fn page_cache_note() -> String {
    let cached_mib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("Cached:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or("unknown".to_string(), |kb| format!("{} MiB", kb / 1024));
    let kdamond = "/sys/kernel/mm/damon/admin/kdamonds/0";
    let read = |file: &str| std::fs::read_to_string(format!("{kdamond}/{file}")).ok();
    let damon = match (read("state"), read("contexts/0/schemes/0/action")) {
        (Some(state), Some(action)) => format!("{} ({})", state.trim(), action.trim()),
        (Some(state), None) => state.trim().to_string(),
        (None, _) => "absent".to_string(),
    };
    format!("page cache {cached_mib}, kernel DAMON {damon}")
}

// ---------------------------------------------------------------------------
// Measurement
// ---------------------------------------------------------------------------

#[derive(Clone)]
struct Stats {
    name: String,
    p50: f64,
    p99: f64,
    max: f64,
    mean: f64,
    note: String,
    target: Option<f64>,
    samples: usize,
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

struct Client {
    http: reqwest::Client,
    base: String,
    key: String,
    budget: Duration,
    /// Where each figure's timed requests are written, in the order they ran.
    samples: Option<std::path::PathBuf>,
}

impl Client {
    /// A GET of `path` with the key: its status and body.
    async fn send_get(&self, path: &str) -> anyhow::Result<(reqwest::StatusCode, bytes::Bytes)> {
        let r = self
            .http
            .get(format!("{}{path}", self.base))
            .bearer_auth(&self.key)
            .send()
            .await?;
        let status = r.status();
        Ok((status, r.bytes().await?))
    }

    async fn get(&self, path: &str) -> anyhow::Result<Json> {
        let (status, body) = self.send_get(path).await?;
        anyhow::ensure!(
            status.is_success(),
            "GET {path} answered {status}: {}",
            String::from_utf8_lossy(&body)
        );
        Ok(serde_json::from_slice(&body)?)
    }

    async fn post(&self, path: &str, body: Json) -> anyhow::Result<Json> {
        let r = self
            .http
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.key)
            .json(&body)
            .send()
            .await?;
        let status = r.status();
        let bytes = r.bytes().await?;
        anyhow::ensure!(
            status.is_success(),
            "POST {path} answered {status}: {}",
            String::from_utf8_lossy(&bytes)
        );
        Ok(serde_json::from_slice(&bytes).unwrap_or(Json::Null))
    }

    /// Times `n` sequential GETs after `warmup` untimed ones; `path(i)` gives
    /// the i-th path (warm-up included).
    async fn measure(
        &self,
        name: &str,
        warmup: usize,
        n: usize,
        path: impl Fn(usize) -> String,
    ) -> anyhow::Result<(Stats, Json)> {
        self.measure_in_turn(&[(name, &path)], warmup, n)
            .await?
            .pop()
            .ok_or_else(|| anyhow::anyhow!("one figure measured, none came back"))
    }

    /// Times `n` GETs of each of `figures` (a name, and the path of its
    /// i-th request, warm-up included) taken in turn, one of each per
    /// round, after `warmup` untimed rounds: the machine's
    /// bursts (a second or so, every few seconds, in which every request
    /// is half as slow again) then fall on every figure alike, where one
    /// after the other a burst fell on some 60 consecutive requests of one
    /// figure. Each request then finds less of its own data in the CPU's
    /// caches, which costs a search at 1,000,000 messages more than at
    /// 10,000: on one store (load 21) the rare words' p50 went from 1.7–2.2
    /// to 2.4–2.6 ms, at 10,000 1.1–1.3 either way.
    async fn measure_in_turn(
        &self,
        figures: &[(&str, &dyn Fn(usize) -> String)],
        warmup: usize,
        n: usize,
    ) -> anyhow::Result<Vec<(Stats, Json)>> {
        // A figure gets at most `budget` of wall time (at least 5 samples),
        // so that a pathological query does not stall the run for hours.
        let budget = self.budget * figures.len().max(1) as u32;
        let t_start = Instant::now();
        for w in 0..warmup {
            for (_, path) in figures {
                self.get(&path(w)).await?;
            }
            if t_start.elapsed() > budget / 4 {
                break;
            }
        }
        let t_start = Instant::now();
        let mut timed: Vec<Timed> = figures.iter().map(|_| Timed::new(n)).collect();
        let mut first = vec![Json::Null; figures.len()];
        for k in 0..n {
            if k >= 5 && t_start.elapsed() > budget {
                break;
            }
            for (i, (_, path)) in figures.iter().enumerate() {
                let body = self
                    .timed_get(&path(warmup + k), &mut timed[i], t_start)
                    .await?;
                if k == 0 {
                    first[i] = serde_json::from_slice(&body)?;
                }
            }
        }
        figures
            .iter()
            .zip(timed)
            .zip(first)
            .map(|(((name, _), timed), first)| Ok((self.stats(name, timed)?, first)))
            .collect()
    }

    /// One GET of `path`, timed into `timed` (its start after `t_start`);
    /// its body.
    async fn timed_get(
        &self,
        path: &str,
        timed: &mut Timed,
        t_start: Instant,
    ) -> anyhow::Result<bytes::Bytes> {
        let t0 = Instant::now();
        let (status, body) = self.send_get(path).await?;
        timed.lat.push(t0.elapsed());
        timed.starts.push(t0 - t_start);
        anyhow::ensure!(status.is_success(), "GET {path} answered {status}");
        Ok(body)
    }

    /// A figure's statistics, its samples written out first (`--samples`).
    fn stats(&self, name: &str, mut timed: Timed) -> anyhow::Result<Stats> {
        if let Some(dir) = &self.samples {
            write_samples(dir, name, timed.wall_start, &timed.starts, &timed.lat)?;
        }
        let lat = &mut timed.lat;
        lat.sort();
        let mean = lat.iter().map(|d| d.as_secs_f64()).sum::<f64>() / lat.len() as f64 * 1000.0;
        Ok(Stats {
            name: name.to_string(),
            p50: percentile(lat, 0.5),
            p99: percentile(lat, 0.99),
            max: percentile(lat, 1.0),
            mean,
            note: String::new(),
            target: None,
            samples: lat.len(),
        })
    }
}

/// A figure's timed requests: when each started (after the figure's
/// start) and took.
struct Timed {
    wall_start: std::time::SystemTime,
    starts: Vec<Duration>,
    lat: Vec<Duration>,
}

impl Timed {
    fn new(n: usize) -> Timed {
        Timed {
            wall_start: std::time::SystemTime::now(),
            starts: Vec::with_capacity(n),
            lat: Vec::with_capacity(n),
        }
    }
}

/// One figure's requests, a line each in the order they ran (its start, ms
/// after the figure's, and its latency, ms), after the wall-clock time
/// (Unix ms) the figure started, to `dir/<figure>.txt`: whether the slow
/// ones come together or apart, and when.
fn write_samples(
    dir: &std::path::Path,
    name: &str,
    started: std::time::SystemTime,
    starts: &[Duration],
    lat: &[Duration],
) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    let file: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let since_epoch = started
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let mut lines = format!("started {}\n", since_epoch.as_millis());
    for (at, d) in starts.iter().zip(lat) {
        lines.push_str(&format!(
            "{:.3} {:.3}\n",
            at.as_secs_f64() * 1000.0,
            d.as_secs_f64() * 1000.0
        ));
    }
    std::fs::write(dir.join(format!("{file}.txt")), lines)?;
    Ok(())
}

fn print_stats(s: &Stats) {
    println!(
        "  {:<44} p50 {:>8.2} ms  p99 {:>8.2} ms  max {:>8.2} ms  mean {:>8.2} ms  n {:>3}  {}",
        s.name, s.p50, s.p99, s.max, s.mean, s.samples, s.note
    );
}

/// A search figure's request: the first page of `list` for `term`.
fn search_path(list: &str, term: &str) -> String {
    format!("/api/v1/{list}?limit=25&q={}", enc(term))
}

fn enc(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

// ---------------------------------------------------------------------------
// EXPLAIN
// ---------------------------------------------------------------------------

fn decode_cursor(cursor: &str) -> Option<(i64, String)> {
    use base64::Engine;
    let body = cursor.split('.').next()?;
    let payload = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(body)
        .ok()?;
    let text = String::from_utf8(payload).ok()?;
    let (t, id) = text.split_once(':')?;
    Some((t.parse().ok()?, id.to_string()))
}

async fn explain(db: &Db, title: &str, sql: &str, args: Vec<Value>) -> anyhow::Result<f64> {
    println!("\n--- {title}\n{sql}");
    let (prefix, col) = match db.backend() {
        Backend::Sqlite => ("EXPLAIN QUERY PLAN ", "detail"),
        Backend::Postgres => ("EXPLAIN (ANALYZE, BUFFERS) ", "QUERY PLAN"),
    };
    let rows = Sql::with(&format!("{prefix}{sql}"), args.clone())
        .fetch_all(db.reader())
        .await?;
    for r in rows {
        println!("    {}", r.text(col)?);
    }
    // Time the statement itself, without HTTP and JSON (best of up to 5).
    let mut best = f64::MAX;
    let mut n = 0;
    for _ in 0..5 {
        let t0 = Instant::now();
        n = Sql::with(sql, args.clone())
            .fetch_all(db.reader())
            .await?
            .len();
        let ms = t0.elapsed().as_secs_f64() * 1000.0;
        best = best.min(ms);
        if ms > 1000.0 {
            break;
        }
    }
    println!("    => {n} rows, best: {best:.2} ms");
    Ok(best)
}

/// A thread search as `GET /threads?q=` makes it, for one word bound as
/// `$1` (the FTS5 expression on SQLite); `base` and `order` are the plain
/// list's.
fn search_statement(backend: Backend, base: &str, order: &str) -> String {
    match backend {
        // The thread index read newest first, built as the API builds it.
        Backend::Sqlite => {
            let mut q = pigeonhole::core::search::thread_search_select(THREAD_COLUMNS);
            q.push(" AND t.folders NOT LIKE '%,trash,%' AND t.folders NOT LIKE '%,spam,%'");
            pigeonhole::core::search::push_thread_search(&mut q, "word");
            q.push(" ORDER BY f.rowid DESC LIMIT 26");
            q.text().to_string()
        }
        // The step that reads the GIN index for the whole store
        // (`core::search_postgres`); the walk is the plain list's own
        // statement.
        Backend::Postgres => {
            let _ = (base, order);
            let most = pigeonhole::core::search_postgres::SearchBounds::default().collect_max + 1;
            format!(
                "SELECT COUNT(*) AS n FROM ph_thread_matches(plainto_tsquery('simple', $1), {most}) c"
            )
        }
    }
}

async fn explain_all(
    db: &Db,
    cursor: Option<&str>,
    terms: &[(String, String, u32)],
    mailboxes: &[String],
    thread_id: &str,
) -> anyhow::Result<()> {
    println!("\n=== Query plans (the statements GET /api/v1/threads issues) ===");
    let base = format!(
        "SELECT {THREAD_COLUMNS} FROM threads t WHERE 1 = 1 AND t.folders NOT LIKE '%,trash,%' \
         AND t.folders NOT LIKE '%,spam,%'"
    );
    let order = " ORDER BY t.last_message_at DESC, t.id DESC LIMIT 26";
    explain(
        db,
        "threads list, first page",
        &format!("{base}{order}"),
        vec![],
    )
    .await?;
    if let Some((at, id)) = cursor.and_then(decode_cursor) {
        explain(
            db,
            "threads list, deep cursor page (current)",
            &format!(
                "{base} AND (t.last_message_at < $1 OR (t.last_message_at = $2 AND t.id < $3)){order}"
            ),
            vec![Value::from(at), Value::from(at), Value::from(id.clone())],
        )
        .await?;
        explain(
            db,
            "threads list, deep cursor page (proposed: leading column as a range)",
            &format!(
                "{base} AND t.last_message_at <= $1 AND (t.last_message_at < $2 OR t.id < $3){order}"
            ),
            vec![Value::from(at), Value::from(at), Value::from(id)],
        )
        .await?;
    }
    for (label, term, df) in terms {
        let arg = match db.backend() {
            Backend::Sqlite => format!("\"{term}\""),
            Backend::Postgres => term.clone(),
        };
        explain(
            db,
            &format!("search {label} q={term} ({df} messages)"),
            &search_statement(db.backend(), &base, order),
            vec![Value::from(arg)],
        )
        .await?;
    }
    for mb in mailboxes {
        explain(
            db,
            &format!("mailbox filter {mb}"),
            &format!("{base} AND t.mailbox = $1{order}"),
            vec![Value::from(mb.as_str())],
        )
        .await?;
    }
    explain(
        db,
        "folder filter spam",
        &format!("SELECT {THREAD_COLUMNS} FROM threads t WHERE 1 = 1 AND t.folders LIKE $1{order}"),
        vec![Value::from("%,spam,%")],
    )
    .await?;
    explain(
        db,
        "single read: messages of a thread",
        &format!(
            "SELECT {} FROM messages m WHERE m.thread_id = $1 ORDER BY m.created_at, m.id",
            pigeonhole::core::messages::COLUMNS
        ),
        vec![Value::from(thread_id)],
    )
    .await?;
    Ok(())
}

// ---------------------------------------------------------------------------
// Main
// ---------------------------------------------------------------------------

// The service binary's allocator (see src/main.rs): measure what it runs.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = parse_args();
    let reuse = args.db.is_some();
    let url = match &args.db {
        Some(u) => u.clone(),
        None => fresh_database_url().await?,
    };
    let backend_name = if url.starts_with("sqlite") {
        "SQLite"
    } else {
        "PostgreSQL"
    };
    println!(
        "bench_inbox: {} messages, {} threads, {} mailboxes on {backend_name} ({})",
        args.messages,
        args.threads,
        args.mailboxes,
        if reuse {
            "reused database"
        } else {
            "fresh database"
        }
    );
    let mut settings = HashMap::new();
    settings.insert("PIGEONHOLE_DATABASE_URL".to_string(), url.clone());
    settings.insert("PIGEONHOLE_SMTP_LISTEN".to_string(), String::new());
    let config = Config::from_map(&settings)?;
    let state = AppState::build(config).await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let mut db: Db = state.db.clone();
    let backend = db.backend();
    let (stop_first, first_stopped) = tokio::sync::oneshot::channel::<()>();
    let first_server = tokio::spawn(app::serve(state, listener, async {
        let _ = first_stopped.await;
    }));

    let created = auth::create_key(
        &db,
        auth::parse_new_key("bench-inbox", None, None, None, Some(u32::MAX))
            .map_err(|e| anyhow::anyhow!(e))?,
    )
    .await?;
    let mut client = Client {
        http: reqwest::Client::builder()
            .pool_max_idle_per_host(4)
            .tcp_nodelay(true)
            .build()?,
        base,
        key: created.key.clone(),
        budget: Duration::from_secs(args.budget_secs as u64),
        samples: args.samples.as_ref().map(std::path::PathBuf::from),
    };

    // Domain and mailboxes through the API.
    let existing = client.get("/api/v1/mailboxes").await?;
    let mut by_address: HashMap<String, String> = existing["data"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| {
            Some((
                m["address"].as_str()?.to_string(),
                m["id"].as_str()?.to_string(),
            ))
        })
        .collect();
    if !reuse {
        client
            .post("/api/v1/domains", json!({"name": "bench.example.com"}))
            .await?;
        let d = client
            .post("/api/v1/domains/bench.example.com/verify", json!({}))
            .await?;
        anyhow::ensure!(
            d["status"] == "verified",
            "domain did not verify: {}",
            d["status"]
        );
    }
    let roles = ["support", "sales", "billing", "info", "jobs"];
    let mut mailboxes = Vec::new();
    for n in 0..args.mailboxes {
        let (local, name, first) = if n < roles.len() {
            let r = roles[n];
            (r.to_string(), format!("Bench {}", r), "Team".to_string())
        } else {
            let f = FIRST_NAMES[n % FIRST_NAMES.len()];
            let l = LAST_NAMES[(n * 7) % LAST_NAMES.len()];
            let cap = |s: &str| s[..1].to_uppercase() + &s[1..];
            (
                format!("{f}.{l}{n}"),
                format!("{} {}", cap(f), cap(l)),
                cap(f),
            )
        };
        let address = format!("{local}@bench.example.com");
        let id = match by_address.remove(&address) {
            Some(id) => id,
            None => {
                let m = client
                    .post(
                        "/api/v1/mailboxes",
                        json!({"address": address, "display_name": name}),
                    )
                    .await?;
                m["id"]
                    .as_str()
                    .ok_or_else(|| anyhow::anyhow!("mailbox without id: {m}"))?
                    .to_string()
            }
        };
        mailboxes.push(Mailbox {
            id,
            address,
            name,
            first,
        });
    }

    // ------------------------------------------------------------------ load
    let t_plan = Instant::now();
    let now = if reuse {
        // The plan's clock must match the loaded data: take the newest thread.
        let r = Sql::new("SELECT MAX(last_message_at) AS m FROM threads")
            .fetch_one(db.reader())
            .await?;
        r.opt_int("m")?
            .unwrap_or_else(pigeonhole::clock::now_micros)
            + 60_000_000
    } else {
        pigeonhole::clock::now_micros()
    };
    let plan = std::sync::Arc::new(build_plan(&args, mailboxes, now));
    println!(
        "plan: {} threads, {} messages, {} correspondents, built in {:.1}s",
        plan.threads.len(),
        plan.order.len(),
        plan.people.len(),
        t_plan.elapsed().as_secs_f64()
    );

    let (tx, mut rx) = tokio::sync::mpsc::channel::<Chunk>(4);
    let producer = {
        let plan = plan.clone();
        let key_id = created.id.clone();
        let per_tx = args.tx_messages;
        std::thread::spawn(move || {
            thread_chunks(&plan, per_tx, &tx);
            message_chunks(&plan, backend, &key_id, per_tx, &tx)
        })
    };
    let started = Instant::now();
    let mut stats = LoadStats {
        rows: 0,
        messages: 0,
        started,
        last_print: started,
        rows_at_print: 0,
    };
    if reuse {
        println!("reusing {url}: regenerating the plan without loading");
        while rx.recv().await.is_some() {}
    } else {
        println!(
            "loading (transactions of {} messages, {} rows per INSERT)...",
            args.tx_messages, args.rows_per_statement
        );
        // SQLite writes go through the one writer connection: give it a large
        // page cache while loading (random index inserts), the default after.
        if backend == Backend::Sqlite {
            sqlx::raw_sql("PRAGMA cache_size = -1048576")
                .execute(db.writer())
                .await?;
        }
        while let Some(chunk) = rx.recv().await {
            write_chunk(&db, chunk, args.rows_per_statement, &mut stats).await?;
        }
        if backend == Backend::Sqlite {
            sqlx::raw_sql("PRAGMA cache_size = -2000")
                .execute(db.writer())
                .await?;
        }
    }
    let df = producer
        .join()
        .map_err(|_| anyhow::anyhow!("generator thread panicked"))?;
    let load_secs = started.elapsed().as_secs_f64();
    let mut post_secs = 0.0;
    if !reuse {
        let t0 = Instant::now();
        match backend {
            Backend::Postgres => {
                Sql::new("SELECT setval(pg_get_serial_sequence('messages', 'seq'), (SELECT MAX(seq) FROM messages))")
                    .fetch_one(db.writer())
                    .await?;
                // What the service keeps as it goes: each thread's document.
                sqlx::raw_sql(pigeonhole::core::search_postgres::THREAD_DOCUMENTS_BACKFILL)
                    .execute(db.writer())
                    .await?;
                // What autovacuum would have done by the time anyone reads.
                if !args.no_analyze {
                    sqlx::raw_sql("VACUUM ANALYZE").execute(db.writer()).await?;
                }
            }
            Backend::Sqlite => {
                // What the service keeps as it goes: each thread's document
                // in the thread search index.
                sqlx::raw_sql(&pigeonhole::core::search::thread_index_backfill())
                    .execute(db.writer())
                    .await?;
                sqlx::raw_sql("PRAGMA wal_checkpoint(TRUNCATE)")
                    .execute(db.writer())
                    .await?;
            }
        }
        post_secs = t0.elapsed().as_secs_f64();
        println!(
            "loaded {} rows ({} messages) in {:.1}s: {:.0} rows/s, {:.0} messages/s; then {} in {:.1}s",
            stats.rows,
            stats.messages,
            load_secs,
            stats.rows as f64 / load_secs,
            stats.messages as f64 / load_secs,
            if backend == Backend::Postgres && args.no_analyze {
                "setval + thread documents"
            } else if backend == Backend::Postgres {
                "setval + thread documents + VACUUM ANALYZE"
            } else {
                "thread search index + WAL checkpoint"
            },
            post_secs
        );
    }
    if backend == Backend::Postgres {
        // The load's dirty pages written out before anything is timed, as
        // SQLite's WAL checkpoint above: right after a load of 1,000,000
        // messages the checkpointer was still writing them through the
        // first minutes of the timed requests. Statistics are untouched.
        let t0 = Instant::now();
        match sqlx::raw_sql("CHECKPOINT").execute(db.writer()).await {
            Ok(_) => println!("CHECKPOINT in {:.1}s", t0.elapsed().as_secs_f64()),
            Err(e) => {
                println!("CHECKPOINT not run ({e}): the load may still be written out while timing")
            }
        }
    }
    let size = database_size(&db, &url).await?;
    println!("database size: {size}");

    // Search terms by document frequency.
    let pick = |target: f64| -> (String, u32) {
        let want = (target * args.messages as f64).max(1.0);
        let mut best = (f64::MAX, 0usize);
        for (w, &c) in df.count.iter().enumerate() {
            if c == 0 {
                continue;
            }
            let d = ((c as f64).ln() - want.ln()).abs();
            if d < best.0 {
                best = (d, w);
            }
        }
        (plan.vocab.words[best.1].clone(), df.count[best.1])
    };
    let top = df
        .count
        .iter()
        .enumerate()
        .max_by_key(|(_, c)| **c)
        .map(|(w, c)| (plan.vocab.words[w].clone(), *c))
        .unwrap_or_default();
    let mut terms: Vec<(String, String, u32)> = vec![("most common".into(), top.0, top.1)];
    for (label, f) in [
        ("common", 0.25),
        ("frequent", 0.10),
        ("medium", 0.01),
        ("uncommon", 0.001),
        ("rare", 0.0001),
    ] {
        let (w, c) = pick(f);
        terms.push((label.to_string(), w, c));
    }

    // Mailboxes by size.
    let mut per_mb = vec![0usize; plan.mailboxes.len()];
    for th in &plan.threads {
        per_mb[th.mailbox as usize] += 1;
    }
    let busiest = (0..per_mb.len()).max_by_key(|&i| per_mb[i]).unwrap_or(0);
    let quietest = (0..per_mb.len()).min_by_key(|&i| per_mb[i]).unwrap_or(0);

    // A second server, with connections that did not load (see the notes
    // at the top); the loading one's pool is closed once compared.
    if !reuse && backend == Backend::Postgres {
        if args.load_pool_searches {
            println!("\nthe searches through the loading pool:");
            for (label, term, _) in &terms {
                for list in ["threads", "emails", "messages"] {
                    let path = search_path(list, term);
                    let (s, _) = client
                        .measure(
                            &format!("load pool: GET /{list}?q={term} ({label})"),
                            args.warmup,
                            args.requests,
                            |_| path.clone(),
                        )
                        .await?;
                    print_stats(&s);
                }
            }
        }
        let state = AppState::build(Config::from_map(&settings)?).await?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        client.base = format!("http://{}", listener.local_addr()?);
        let loading = std::mem::replace(&mut db, state.db.clone());
        tokio::spawn(app::serve(state, listener, std::future::pending()));
        let _ = stop_first.send(());
        first_server.await??;
        loading.close().await;
    }

    // ----------------------------------------------------------- measure
    println!(
        "\nmeasuring: {} timed requests per figure after {} warm-up requests, sequential, one keep-alive connection{}",
        args.requests,
        args.warmup,
        if args.in_turn {
            "; the searches in turn"
        } else {
            ""
        }
    );
    let mut results: Vec<Stats> = Vec::new();
    let n = args.requests;
    let w = args.warmup;

    let (mut s, first) = client
        .measure("GET /threads (first page, limit 25)", w, n, |_| {
            "/api/v1/threads?limit=25".into()
        })
        .await?;
    s.note = format!(
        "{} threads",
        first["data"].as_array().map_or(0, |a| a.len())
    );
    s.target = Some(10.0);
    print_stats(&s);
    results.push(s);

    // Deep cursor: walk next_cursor first.
    let t_walk = Instant::now();
    let mut cursor: Option<String> = None;
    let mut depth = 0;
    while depth < args.depth {
        let path = match &cursor {
            Some(c) => format!("/api/v1/threads?limit=25&cursor={}", enc(c)),
            None => "/api/v1/threads?limit=25".into(),
        };
        let page = client.get(&path).await?;
        match page["next_cursor"].as_str() {
            Some(c) => {
                cursor = Some(c.to_string());
                depth += 1;
            }
            None => break,
        }
    }
    let walk_ms = t_walk.elapsed().as_secs_f64() * 1000.0;
    if let Some(c) = &cursor {
        let path = format!("/api/v1/threads?limit=25&cursor={}", enc(c));
        let (mut s, _) = client
            .measure(
                &format!("GET /threads (cursor {depth} pages deep)"),
                w,
                n,
                |_| path.clone(),
            )
            .await?;
        s.note = format!(
            "walk of {depth} pages: {walk_ms:.0} ms, {:.2} ms/page",
            walk_ms / (depth + 1) as f64
        );
        s.target = Some(10.0);
        print_stats(&s);
        results.push(s);
    }

    // Single reads of random threads.
    let mut rng = StdRng::seed_from_u64(args.seed ^ 0x7ead);
    let picks: Vec<usize> = (0..n + w)
        .map(|_| rng.gen_range(0..plan.threads.len()))
        .collect();
    let (mut s, _) = client
        .measure("GET /threads/:id (random thread)", w, n, |k| {
            format!("/api/v1/threads/{}", plan.threads[picks[k]].id)
        })
        .await?;
    let avg: f64 = picks[w..]
        .iter()
        .map(|&p| plan.threads[p].msgs.len() as f64)
        .sum::<f64>()
        / n as f64;
    let maxm = picks[w..]
        .iter()
        .map(|&p| plan.threads[p].msgs.len())
        .max()
        .unwrap_or(0);
    s.note = format!("{avg:.1} messages/thread on average, up to {maxm}");
    print_stats(&s);
    results.push(s);

    // The same words in threads, and in sent and received mail (each
    // message's own words), each figure's requests one after the other
    // (`--in-turn`: `Client::measure_in_turn`).
    let searches: Vec<(String, String, &str, &u32)> = [
        ("threads", "threads"),
        ("emails", "sent"),
        ("messages", "received"),
    ]
    .iter()
    .flat_map(|&(list, what)| {
        terms.iter().map(move |(label, term, count)| {
            (
                format!("GET /{list}?q={term} ({label})"),
                search_path(list, term),
                what,
                count,
            )
        })
    })
    .collect();
    let paths: Vec<_> = searches
        .iter()
        .map(|(_, path, ..)| move |_: usize| path.clone())
        .collect();
    let figures: Vec<(&str, &dyn Fn(usize) -> String)> = searches
        .iter()
        .zip(&paths)
        .map(|((name, ..), path)| (name.as_str(), path as &dyn Fn(usize) -> String))
        .collect();
    let measured = if args.in_turn {
        client.measure_in_turn(&figures, w, n).await?
    } else {
        let mut measured = Vec::new();
        for (name, path) in &figures {
            measured.push(client.measure(name, w, n, path).await?);
        }
        measured
    };
    for ((mut s, first), (_, _, what, count)) in measured.into_iter().zip(&searches) {
        s.note = format!(
            "{count} messages ({:.3}%), {} {what} on page",
            **count as f64 * 100.0 / args.messages as f64,
            first["data"].as_array().map_or(0, |a| a.len())
        );
        s.target = Some(50.0);
        print_stats(&s);
        results.push(s);
    }

    for (label, mbi) in [("busiest", busiest), ("quietest", quietest)] {
        let addr = plan.mailboxes[mbi].address.clone();
        let path = format!("/api/v1/threads?limit=25&mailbox={}", enc(&addr));
        let (mut s, _) = client
            .measure(&format!("GET /threads?mailbox= ({label})"), w, n, |_| {
                path.clone()
            })
            .await?;
        s.note = format!(
            "{addr}: {} threads ({:.2}%)",
            per_mb[mbi],
            per_mb[mbi] as f64 * 100.0 / plan.threads.len() as f64
        );
        s.target = Some(10.0);
        print_stats(&s);
        results.push(s);
    }

    // A mailbox added after the mail arrived: it holds no thread at all.
    let empty = "new.hire@bench.example.com";
    let have = client.get("/api/v1/mailboxes").await?;
    if !have["data"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|m| m["address"] == empty)
    {
        client
            .post(
                "/api/v1/mailboxes",
                json!({"address": empty, "display_name": "New Hire"}),
            )
            .await?;
    }
    let path = format!("/api/v1/threads?limit=25&mailbox={}", enc(empty));
    let (mut s, _) = client
        .measure("GET /threads?mailbox= (new, empty)", w, n, |_| path.clone())
        .await?;
    s.note = format!("{empty}: 0 threads");
    s.target = Some(10.0);
    print_stats(&s);
    results.push(s);

    for (folder, note) in [("archive", "about 8% of threads"), ("spam", "no thread")] {
        let path = format!("/api/v1/threads?limit=25&folder={folder}");
        let (mut s, _) = client
            .measure(&format!("GET /threads?folder={folder}"), w, n, |_| {
                path.clone()
            })
            .await?;
        s.note = note.into();
        s.target = Some(10.0);
        print_stats(&s);
        results.push(s);
    }

    if args.explain {
        let addrs = vec![
            plan.mailboxes[busiest].address.clone(),
            plan.mailboxes[quietest].address.clone(),
            empty.to_string(),
        ];
        explain_all(
            &db,
            cursor.as_deref(),
            &terms,
            &addrs,
            &plan.threads[picks[0]].id,
        )
        .await?;
    }

    // ----------------------------------------------------------- summary
    println!(
        "\n=== Summary: {backend_name}, {} messages, {} threads, {} mailboxes ===",
        args.messages, args.threads, args.mailboxes
    );
    if !reuse {
        println!(
            "load: {:.1}s ({} rows, {:.0} rows/s) + {:.1}s post-load; size: {size}",
            load_secs,
            stats.rows,
            stats.rows as f64 / load_secs,
            post_secs
        );
    } else {
        println!("size: {size}");
    }
    println!(
        "| {:<44} | {:>9} | {:>9} | {:>9} | {:>5} | {:>7} | {:<4} |",
        "request", "p50 ms", "p99 ms", "max ms", "n", "target", "ok"
    );
    println!(
        "|{:-<46}|{:-<11}|{:-<11}|{:-<11}|{:-<7}|{:-<9}|{:-<6}|",
        "", "", "", "", "", "", ""
    );
    for s in &results {
        let (target, ok) = match s.target {
            Some(tg) => (format!("{tg:.0}"), if s.p99 <= tg { "yes" } else { "NO" }),
            None => ("-".into(), "-"),
        };
        println!(
            "| {:<44} | {:>9.2} | {:>9.2} | {:>9.2} | {:>5} | {:>7} | {:<4} |",
            s.name, s.p50, s.p99, s.max, s.samples, target, ok
        );
    }

    if args.keep || reuse {
        println!("\nkept: {url}");
        println!(
            "reuse: cargo run --release --example bench_inbox -- --messages {} --threads {} --mailboxes {} --seed {} --db '{url}'",
            args.messages, args.threads, args.mailboxes, args.seed
        );
    } else {
        db.close().await;
        if let Some(path) = sqlite_path(&url) {
            for suffix in ["", "-wal", "-shm"] {
                let mut p = path.clone().into_os_string();
                p.push(suffix);
                let _ = std::fs::remove_file(p);
            }
        } else if let Ok(admin) = std::env::var("PIGEONHOLE_BENCH_POSTGRES_URL") {
            use sqlx::Connection;
            let name = url::Url::parse(&url)?
                .path()
                .trim_start_matches('/')
                .to_string();
            let mut conn = sqlx::AnyConnection::connect(&admin).await?;
            sqlx::Executor::execute(
                &mut conn,
                format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str(),
            )
            .await?;
        }
    }
    Ok(())
}
