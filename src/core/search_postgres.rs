//! Search on PostgreSQL in steps of bounded size, each with one plan, never
//! the planner's guess of how common the words are, and the newest matches
//! found without reading the older ones.
//!
//! Every document (a thread's in `thread_search`, a message's own `search`)
//! is indexed with its words and its *eras*: one lexeme per level of
//! [`ERA_SHIFTS`], the document's time shifted right by that many bits
//! (`' 36/25669'`, a lexeme no text can give); a message's eras are those
//! of its side of the mail, sent or received (`' s36/25669'`:
//! [`message_sides_index`]), so a list of one side reads its own matches
//! only in each era. A word and an era together
//! are one GIN lookup whose cost is that of the smaller of the two posting
//! lists (GIN skips through the larger), so "the matches of the newest era
//! at this level" costs at most the era's documents, however common the
//! word and however big the store (a rare word's, its own few). So more
//! eras in one lookup cost their documents together. Collecting as many
//! eras as the rate seen said would hold a quarter of `collect_max` was
//! tried and left out: for a word in 1 % of the mail it read eight eras of
//! 19 hours, about 17,000 documents, for some 170 matches (3 ms in one
//! statement, 5.8 ms of statements per search against 3.6 for an era at a
//! time). Eras of the level below the one chosen, as many as hold what the
//! page still misses (at most [`FINER_MOST`]), are read instead of it
//! where the rate says so ([`Eras::finer_for`]): a word's list is shorter
//! than a coarse era's, so its lookup reads all of it, where the page
//! needs a few thousand documents' postings.
//!
//! A list search runs:
//!
//! 1. **Walk**: the list itself, newest first,
//!    [`SearchBounds::first_walk`] rows (the plain list's own statement
//!    with a larger limit), each row's words checked by its key, stopping
//!    once the page is full. A common word fills the page here; one met
//!    often enough that twice as many rows again would fill it is walked
//!    once more, that far ([`Found::next_walk_fills`]).
//! 2. **Collect by level**: the documents holding the words in the era of
//!    the time the search has reached (and in the one before it, when less
//!    than half of it is left: [`Eras`]), at the level where the rate the
//!    walk met them at (two more than it met) would put about a quarter of
//!    [`SearchBounds::collect_max`] matches in what it reads. An era holding at
//!    most `collect_max` matches is collected: they are sorted by time,
//!    joined to the list's rows until the page is full and filtered. More
//!    than that, and the next finer level is asked (and coarser ones stay
//!    closed until the search leaves that era). Once an era is used up,
//!    the list's next row below it, read with the collection, says where
//!    the list goes on (so empty eras are skipped and the end of the list
//!    is seen), and the rate of matches in
//!    the eras collected so far (one match more than they held) chooses
//!    the next level: the whole store when that rate would put at most
//!    three quarters of `collect_max` in the time the documents span
//!    (their oldest and newest, index probes read with the first era
//!    collected), so a rare word is an era or two, then the store; else
//!    the level whose eras hold about a quarter below the time reached
//!    ([`Counted::Below`]), or for threads the one above it when its
//!    eras would not fill the page ([`Seen::level_to_fill`]). That last step
//!    depends only on how many matches the eras hold, so an era's
//!    statement also collects the whole store when they are few enough
//!    (see [`collect_statement`]; the first era's, on the ends it reads):
//!    a rare word's search is the walk and one or two statements where it
//!    was four. A word of any
//!    frequency costs a few lookups and at most `collect_max` matches per
//!    era, and no lookup reads a common word's whole posting list.
//! 3. **Walk on**: only if even the finest era (about a second) holds more
//!    than `collect_max` matches: the words are so dense there that the
//!    walk meets them at once.
//!
//! Each step returns the page's rows with the list's columns
//! ([`SearchedList::columns`]): the walk reads them where it checks the
//! words, a collection where it joins a match to its row.
//!
//! The GIN index is read through PL/pgSQL functions that turn sequential
//! and plain index scans off (`ph_thread_matches`, `ph_message_matches`),
//! so a collection is a bitmap scan of the index however the statistics
//! read, and that keep one generic plan per connection
//! ([`matching_functions`]).
//! The walk looks each thread's document up in a `LATERAL` aggregate (a
//! message's is on the row it walks, checked in its select list) and the
//! collection joins each match to its row in a `LATERAL … OFFSET 0`:
//! neither can be pulled up into a join, so each is a probe by key per row,
//! never a scan of every document (a correlated `EXISTS` can be: PostgreSQL
//! planned it as a hashed scan of every thread document, chosen at run
//! time).

use crate::core::paging::Page;
use crate::sql;
use sqlx::AnyConnection;
use sqlx::any::AnyRow;

use crate::store::{Db, RowExt, Sql};

/// The levels of eras, finest first: a document's time (microseconds) is
/// shifted right by each to name its era at that level (about 1 s, 17 s,
/// 4.5 min, 71 min, 19 h, 12.7 days, 203 days). Each level is 16 eras of
/// the one below. The documents' index holds these lexemes (`ph_eras`):
/// changing them takes a migration that rebuilds the indexes.
pub const ERA_SHIFTS: [u32; 7] = [20, 24, 28, 32, 36, 40, 44];

/// The most eras of the level below one collection reads for the page
/// ([`Eras::finer_for`]): three quarters of an era of the level it was
/// chosen at. GIN reads every posting of a lookup's smallest entries that
/// must hold a match, so eras that sum to more than the word cost more
/// than the word's own list (eight eras of 19 hours, 17,000 documents for
/// 170 matches, took 3 ms); they read fewer matches' rows, though. At
/// 1,000,000 messages a 19-hour era holds about 1,100 received messages
/// and 760 sent ones, and a word in 1 % of the mail has about 10,000
/// postings: twelve eras read 13,200 and 9,100 postings, about what the
/// word's list costs. A sent-mail search of that word met once in the
/// first 12.6 hours was nine eras from it (the newest eras of a store
/// are sparse: 244 messages in that one).
const FINER_MOST: i64 = 12;

/// The most postings the words may be estimated to have (both sides of
/// the mail: the rate seen over the store's time, twice) for a message
/// list's coarser eras to come for a level's whole room
/// ([`Documents::coarser_room`]). Their lookup then reads the words' own
/// list, at about 0.1 ms a thousand postings (2,324 in 0.23 ms, 10,000
/// in 1.17 at 1,000,000 messages): below this, less than the round trip
/// and the finer eras' lookup of the statement it saves. A medium word
/// met 3 times in its first 14 hours was rated at about 5,000.
const FEW_POSTINGS: i64 = 4_000;

/// The eras one collection reads at one level: the era of the time the
/// search has reached, and the one before it too when less than half of
/// it is left below that time. A collection then never reads a sliver (a
/// store's newest era, or the rest of an era the search reached near its
/// start, held three hours of mail where the level was chosen for 19) and
/// at most two eras' worth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Eras {
    shift: u32,
    /// The number of the newest era (`at >> shift`).
    newest: i64,
    /// 1 or 2 ([`Eras::reached`]); up to [`FINER_MOST`] of a level below
    /// the one chosen ([`Eras::finer_for`]).
    count: i64,
}

impl Eras {
    fn reached(shift: u32, at: i64) -> Eras {
        let newest = at >> shift;
        let left = at - (newest << shift);
        let count = if left < (1i64 << shift) / 2 && newest > 0 {
            2
        } else {
            1
        };
        Eras {
            shift,
            newest,
            count,
        }
    }

    /// The start of the oldest era.
    fn start(self) -> i64 {
        (self.newest - self.count + 1) << self.shift
    }

    /// The tsquery of the eras of a side of the mail, as `ph_eras` and
    /// `ph_message_eras` name them.
    fn query(self, side: &str) -> String {
        (0..self.count)
            .map(|k| format!("' {side}{}/{}'", self.shift, self.newest - k))
            .collect::<Vec<_>>()
            .join(" | ")
    }

    /// The eras of the level below `level` (whose eras these are, read at
    /// `at`) that reach `aimed` below `at`, where at most [`FINER_MOST`]
    /// of them do; else these. A lookup of a word and eras reads the
    /// smaller of their posting lists: a word in 1 % of the mail has
    /// about 10,000 postings at 1,000,000 messages, and the two 12.7-day
    /// eras of received mail about 35,000, so their lookup read all of
    /// the word's (1.4 ms) for 228 matches where the page missed 21. Eras
    /// of the level below that hold what the page misses read their own
    /// postings, a few thousand. The rate counts one row more than seen
    /// (so they may hold fewer): the next collection, at the rate they
    /// add to, is of the same size at most.
    fn finer_for(self, level: usize, at: i64, aimed: Option<i128>) -> Eras {
        let (Some(aimed), Some(finer)) = (aimed, level.checked_sub(1)) else {
            return self;
        };
        let shift = ERA_SHIFTS[finer];
        let reached = Eras::reached(shift, at);
        let oldest = ((at as i128 - aimed).max(0) >> shift) as i64;
        let count = (reached.newest - oldest + 1).max(reached.count);
        if count > FINER_MOST {
            return self;
        }
        Eras { count, ..reached }
    }

    /// The time the eras cover at or below `top`, where the search started:
    /// the era it started in is seen only below that (the newest era of a
    /// store holds mail only up to its newest; taken whole, it made a word
    /// look rarer than it is, and the next era collected held 349 matches
    /// where 100 were wanted).
    fn span_below(self, top: i64) -> i128 {
        let end = ((self.newest as i128) + 1) << self.shift;
        end.min(top as i128 + 1) - self.start() as i128
    }
}

/// Where a list's words are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Documents {
    /// One document per thread (`thread_search`), its messages but drafts.
    Threads,
    /// Each sent message's own `search` column (drafts are not sent mail).
    Sent,
    /// Each received message's own `search` column.
    Received,
}

impl Documents {
    /// Table, key column and tsvector column of the documents, and the
    /// function that reads them through the GIN index.
    fn parts(self) -> (&'static str, &'static str, &'static str, &'static str) {
        match self {
            Documents::Threads => ("thread_search", "thread_id", "doc", "ph_thread_matches"),
            Documents::Sent | Documents::Received => {
                ("messages", "id", "search", "ph_message_matches")
            }
        }
    }

    /// The table and alias of the list these documents are searched for;
    /// the list's filters and [`Documents::time_col`] are written on the
    /// alias.
    fn list(self) -> (&'static str, &'static str) {
        match self {
            Documents::Threads => ("threads", "t"),
            Documents::Sent | Documents::Received => ("messages", "m"),
        }
    }

    /// The column a list of these documents is ordered by (the time their
    /// eras are made of), on the list's alias ([`Documents::list`]).
    pub fn time_col(self) -> &'static str {
        match self {
            Documents::Threads => "t.last_message_at",
            Documents::Sent => "m.created_at",
            Documents::Received => "m.received_at",
        }
    }

    /// The side of the mail a message's eras name (`ph_message_side`), so
    /// that an era's lookup reads the matches of one list's mail only.
    /// Threads have one side, unnamed.
    fn side(self) -> &'static str {
        match self {
            Documents::Threads => "",
            Documents::Sent => "s",
            Documents::Received => "r",
        }
    }

    /// The most matches the eras of the level above may be estimated to
    /// hold for a collection to read them when the level's own would not
    /// fill the page ([`Seen::level_to_fill`]). A match collected is a
    /// read of its document's row: a thread's is narrow (`thread_search`),
    /// many to a page; a message's is its whole row, a page of its own
    /// more often than not. At 1,000,000 messages, 102 matches of an
    /// uncommon word's threads took 0.68 ms in one collection against
    /// four 19-hour ones (0.86 ms and three round trips more; the search
    /// 2.50 and 2.57 ms at p50 before, 1.97 and 1.94 after), while with
    /// the rule for messages too, 171 sent messages of a medium word took
    /// 1.28 ms and its search went from 2.33 and 2.46 ms to 2.53 and
    /// 2.83: none for messages.
    fn fill_most(self, collect_max: i64) -> Option<i64> {
        match self {
            Documents::Threads => Some(collect_max / 2),
            Documents::Sent | Documents::Received => None,
        }
    }

    /// The matches the coarser eras that hold a collection's own may be
    /// estimated to hold for the collection to bring them ([`TierRule`]):
    /// `room`, a level's choice, for threads; for messages a quarter of
    /// it, or `room` where the words' postings are estimated to be few
    /// ([`FEW_POSTINGS`]). A lookup of a word and a coarse era of one side
    /// reads the shorter of their posting lists, and a 12.7-day era of
    /// received mail at 1,000,000 messages holds about 35,000, so a medium
    /// word (about 10,000 postings) met 3 times in the newest era (sparse,
    /// as a store's newest eras are), rated at 73 in the coarser eras,
    /// read all of its own: with `room` for messages its `/messages`
    /// search went from 1.75–1.79 ms at p50 to 2.06–2.09, where the finer
    /// eras read next hold a few thousand postings. A rare word, met in
    /// none of the newest era, is rated at 18. An uncommon word's own
    /// list is short (about 2,300 postings at 1,000,000 messages, its
    /// 12.7-day era read in 0.23 ms), and at a quarter of the room its
    /// `/messages` search was the walk and two collections where at
    /// 10,000 messages it is one (2.09 ms at p50 against 0.99).
    fn coarser_room(self, room: i64) -> CoarserRoom {
        match self {
            Documents::Threads => CoarserRoom { room, few: None },
            Documents::Sent | Documents::Received => CoarserRoom {
                room: room / 4,
                few: Some(FewPostings {
                    room,
                    postings: FEW_POSTINGS,
                }),
            },
        }
    }

    /// The most matches the whole store is collected for, as the rate seen
    /// estimates them: three quarters of what may be collected (the rate of
    /// a few matches is rough, and the store is the last step, so it may
    /// take more than an era's quarter), and half of that for messages. A
    /// message list's rate is of its own side of the mail, while the whole
    /// store is read by the words alone, on both sides (a lexeme naming a
    /// side made the lookup read a leaf of half the store per match), so
    /// it holds the other side's matches too. At 1,000,000 messages an
    /// uncommon word (2,309 messages, 1,149 of them sent) met in none of
    /// the first 32 hours of sent mail was taken for rare, the store
    /// spanning 270 such spans, and its whole store, over 400 matches,
    /// cost 1.6 ms for nothing (its search 3.95 ms at p50, against 1.23 at
    /// 10,000 messages).
    fn whole_room(self, collect_max: i64) -> i64 {
        let sides = match self {
            Documents::Threads => 1,
            Documents::Sent | Documents::Received => 2,
        };
        (collect_max * 3 / 4 / sides).max(1)
    }

    /// The times of the oldest and the newest documents, as the columns
    /// `oldest` and `newest`, each an index probe at an end of a list's
    /// order: a thread's `last_message_at`; a sent message's `created_at`,
    /// a received one's `received_at` (as `ph_message_time` gives them).
    fn ends(self) -> String {
        let (table, _) = self.list();
        let (col, filter) = match self {
            Documents::Threads => ("last_message_at", "1 = 1"),
            Documents::Sent => ("created_at", "direction = 'outbound' AND is_draft = 0"),
            Documents::Received => (
                "received_at",
                "direction <> 'outbound' AND received_at IS NOT NULL",
            ),
        };
        // The first row of a list's index, read in `order`.
        let end = |order: &str| {
            format!(
                "(SELECT {col} FROM {table} WHERE {filter} ORDER BY {col} {order}, id {order} LIMIT 1)"
            )
        };
        let messages = match self {
            Documents::Threads => "CAST(NULL AS BIGINT)",
            Documents::Sent | Documents::Received => {
                "(SELECT CAST(MAX(seq) - MIN(seq) + 1 AS BIGINT) FROM messages)"
            }
        };
        format!(
            "{} AS oldest, {} AS newest, {messages} AS messages",
            end("ASC"),
            end("DESC")
        )
    }
}

/// The bounds of one search's work. Tests set small ones to reach every
/// step with a small store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SearchBounds {
    /// Rows of the list walked before collecting (and twice that more when
    /// the first walk's rate says that fills the page).
    pub first_walk: i64,
    /// Rows walked per statement when even the finest era holds more
    /// matches than are collected.
    pub walk_chunk: i64,
    /// Most matching documents of one era (or of the whole store) collected
    /// and sorted; more, and a finer era is asked.
    pub collect_max: i64,
}

impl Default for SearchBounds {
    fn default() -> SearchBounds {
        SearchBounds {
            first_walk: 50,
            walk_chunk: 1000,
            collect_max: 400,
        }
    }
}

/// A list to search: `FROM {table} {alias} WHERE 1 = 1` (its documents'
/// [`Documents::list`]) followed by what `filters` appends (each condition
/// starting with ` AND `), newest first by its documents'
/// [`Documents::time_col`] then `{alias}.id`: the time the documents' eras
/// are made of (`last_message_at`; a message's `ph_message_time`).
pub struct SearchedList<'a> {
    pub documents: Documents,
    /// The columns a page's rows are read with, written on the list's
    /// alias, its `id` among them: the statements that find the rows
    /// return them, where a statement of their own after the search read
    /// each row again by its key (0.2–0.3 ms of a sent-mail search at
    /// 1,000,000 messages).
    pub columns: &'a str,
    pub filters: &'a (dyn Fn(&mut Sql) + Sync),
    /// One of the filters has an index holding only its rows (see
    /// [`Db::list_read`]).
    pub narrowed: bool,
}

/// The tsquery of a search's words (already split and lowercased).
fn push_query(sql: &mut Sql, words: &[String]) {
    sql.push("plainto_tsquery('simple', ")
        .bind(words.join(" "))
        .push(")");
}

/// What a search has found so far and where it stands in the list: the
/// page's rows (`R`, a row of the list's columns) and their count wanted.
struct Found<R> {
    hits: Vec<R>,
    wanted: usize,
    /// The last row of the list the search has passed.
    after: Option<(i64, String)>,
    /// The time of the first row it walked.
    first_at: Option<i64>,
}

impl<R> Found<R> {
    fn full(&self) -> bool {
        self.hits.len() >= self.wanted
    }

    /// Whether twice as many rows of the list again as the walk read (all
    /// of them, as the page is not full) would fill the page, at the rate
    /// the walk met the words (its hits are all the search has), with half
    /// as many again to spare. Walking on costs a few microseconds a row
    /// (a thread's about 9, its document read whole; a message's about 3)
    /// and stops at a full page, where a collection costs a statement and
    /// its matches: a word in 10 % of the mail is in about 40 % of the
    /// threads, and at 1,000,000 messages its search met 20 in the first
    /// 50 and collected twice (0.4 and 0.8 ms) for the six rows the page
    /// still missed. With as many rows again, a store whose newest 50
    /// threads held fewer of it (under 16) still collected twice (0.33
    /// and 0.85 ms; 2.36 ms at p50 against 1.30 on another store).
    fn next_walk_fills(&self) -> bool {
        let missing = self.wanted.saturating_sub(self.hits.len());
        self.hits.len() * 4 >= missing * 3
    }

    /// The time the search started from: the page's cursor, or the first
    /// row it walked.
    fn top(&self, page: &Page) -> Option<i64> {
        page.after.as_ref().map(|(at, _)| *at).or(self.first_at)
    }

    /// The time of the list's row the search has reached (the list's top
    /// before any).
    fn reached(&self) -> i64 {
        self.after.as_ref().map_or(i64::MAX, |(at, _)| *at)
    }

    /// The page from where the search stands, as many rows as the whole
    /// page: a collection's text holds its limit, and one limit for every
    /// collection of a search keeps it one prepared statement, run with its
    /// generic plan. A limit of the rows still missing made a statement
    /// per count, each planned anew on its first runs on each connection
    /// (0.2–0.5 ms a collection, the slowest 1 % of a word's searches at
    /// 1,000,000 messages). [`Found::take`] keeps what the page misses.
    fn rest(&self) -> Page {
        Page {
            limit: self.wanted as i64 - 1,
            after: self.after.clone(),
        }
    }

    /// Adds the rows of a collection, in list order, until the page is full.
    fn take(&mut self, rows: Vec<R>) {
        let missing = self.wanted.saturating_sub(self.hits.len());
        self.hits.extend(rows.into_iter().take(missing));
    }
}

impl Found<AnyRow> {
    /// Walks up to `chunk` rows from where the search stands, stopping
    /// once the page is full; false once the list has ended.
    async fn walk(
        &mut self,
        conn: &mut AnyConnection,
        list: &SearchedList<'_>,
        words: &[String],
        chunk: i64,
    ) -> Result<bool, sqlx::Error> {
        let missing = (self.wanted - self.hits.len()) as i64;
        let rows = walk(list, words, self.after.clone(), chunk, missing)
            .fetch_all(&mut *conn)
            .await?;
        let mut chunk_walked = false;
        for r in rows {
            let key = (r.int("k")?, r.text("id")?);
            self.first_at.get_or_insert(key.0);
            self.after = Some(key);
            chunk_walked = r.int("n")? == chunk;
            if r.int("hit")? == 1 {
                self.hits.push(r);
                if self.full() {
                    return Ok(true);
                }
            }
        }
        Ok(chunk_walked)
    }
}

/// Up to `page.limit + 1` rows of `list` (its [`SearchedList::columns`])
/// whose documents hold every word, in list order, from the page's cursor
/// on. Its statements run in one search read ([`Db::search_read`]): a walk
/// reads its list in order from an index and stops at its limit; the GIN
/// functions turn bitmaps back on for themselves.
pub async fn page_rows(
    db: &Db,
    list: &SearchedList<'_>,
    words: &[String],
    page: &Page,
    bounds: SearchBounds,
) -> Result<Vec<AnyRow>, sqlx::Error> {
    let mut tx = db.search_read(list.narrowed).await?;
    let hits = search(&mut tx, list, words, page, bounds).await?;
    tx.commit().await?;
    Ok(hits)
}

async fn search(
    conn: &mut AnyConnection,
    list: &SearchedList<'_>,
    words: &[String],
    page: &Page,
    bounds: SearchBounds,
) -> Result<Vec<AnyRow>, sqlx::Error> {
    let mut found = Found {
        hits: Vec::new(),
        wanted: (page.limit + 1) as usize,
        after: page.after.clone(),
        first_at: None,
    };
    let first_walk = bounds.first_walk.max(1);
    let mut going_on = found.walk(conn, list, words, first_walk).await?;
    if going_on && !found.full() && found.next_walk_fills() {
        going_on = found.walk(conn, list, words, 2 * first_walk).await?;
    }
    if !going_on || found.full() {
        return Ok(found.hits);
    }
    // An era is chosen to hold about a quarter of what may be collected.
    let room = (bounds.collect_max / 4).max(1);
    let whole = list.documents.whole_room(bounds.collect_max);
    let mut level = first_level(&found, page, room);
    let mut caps = Caps::default();
    let mut seen = Seen::default();
    // The times of the store's oldest and newest documents, read with the
    // first era collected.
    let mut ends: Option<Ends> = None;
    // Where the search started: matches above it are in no span it has seen.
    let top = found.top(page).unwrap_or(i64::MAX);
    // The time of the list's row the search has reached.
    let mut at = found.reached();
    // The time below `at` that the rate seen says holds the rows the page
    // misses ([`Eras::finer_for`]); none before any era was seen.
    let mut aimed: Option<i128> = None;
    loop {
        let store_span = ends.map(|ends| ends.span(top));
        let oldest = ends.and_then(|ends| ends.oldest);
        let era = eras_or_store(level, at, oldest.filter(|_| caps.store_open(at))).map(|eras| {
            let finer = eras.finer_for(level, at, aimed);
            if finer != eras && seen.finer_reads_more(finer, ends, top) {
                eras
            } else {
                finer
            }
        });
        if era.is_none() {
            level = ERA_SHIFTS.len();
        }
        let open = caps.top(at);
        let missing = found.wanted - found.hits.len();
        let ask = Ask {
            era,
            top,
            max: bounds.collect_max,
            with_ends: era.is_some() && ends.is_none(),
            whole: match era {
                Some(eras) if caps.is_empty() => {
                    Some(seen.whole_rule(whole, eras.span_below(top), store_span))
                }
                _ => None,
            },
            tier: era.and_then(|eras| {
                let room = list.documents.coarser_room(room);
                let rule = seen.tier_rule(eras, at, top, open, missing, room.room)?;
                Some(TierRule {
                    few: room
                        .few
                        .map(|few| seen.few_rule(eras, top, few, store_span)),
                    whole: caps
                        .is_empty()
                        .then(|| seen.whole_rule(whole, rule.eras.span_below(top), store_span)),
                    ..rule
                })
            }),
        };
        let Collected {
            matches,
            below_top,
            page_rows,
            next_at,
            ends: ends_read,
            whole_matches,
            tier,
        } = collect(conn, list, words, &found.rest(), ask).await?;
        ends = ends.or(ends_read);
        if whole_matches.is_some_and(|n| n <= bounds.collect_max) {
            // The whole store came with the eras: the page is its.
            found.take(page_rows);
            return Ok(found.hits);
        }
        if matches > bounds.collect_max {
            if level == 0 {
                break;
            }
            caps.add(level, at);
            aimed = None;
            level = if era.is_none() {
                // More than the evidence suggested: as if the walk had met one.
                rated_level(1, &found, page, room, at)
            } else {
                level - 1
            }
            .min(caps.top(at));
            continue;
        }
        // The coarser eras, if collected within `collect_max`, stand for
        // the eras asked; past it, their level stays closed here.
        let (era, below_top) = match (ask.tier, tier) {
            (Some(rule), Some(tier)) if tier.matches <= bounds.collect_max => {
                (Some(rule.eras), tier.below_top)
            }
            (Some(rule), Some(_)) => {
                caps.add(level_of(rule.eras), at);
                (era, below_top)
            }
            _ => (era, below_top),
        };
        let taken = page_rows.len();
        found.take(page_rows);
        let Some(eras) = era else {
            // Every match was collected.
            return Ok(found.hits);
        };
        if found.full() {
            return Ok(found.hits);
        }
        seen.add(below_top, eras.span_below(top));
        seen.took(taken);
        // The eras are used up: go on at the list's next row below them (the
        // eras between are empty), or stop where the list ends.
        let Some(next) = next_at else {
            return Ok(found.hits);
        };
        at = next;
        found.after = Some((next.saturating_add(1), String::new()));
        let missing = found.wanted - found.hits.len();
        aimed = Some(seen.time_for(missing));
        level = if whole_matches.is_some() {
            // The whole store, collected with the eras, held more than
            // `collect_max`: as if it had overflowed in its own statement.
            caps.add(ERA_SHIFTS.len(), at);
            rated_level(1, &found, page, room, at)
        } else {
            seen.level_to_fill(
                room,
                whole,
                store_span,
                at,
                missing,
                list.documents.fill_most(bounds.collect_max),
            )
        }
        .min(caps.top(at));
    }
    // Dense even within the finest era: walk on.
    while found
        .walk(conn, list, words, bounds.walk_chunk.max(1))
        .await?
        && !found.full()
    {}
    Ok(found.hits)
}

/// The matches counted in the eras collected so far, the list's rows they
/// gave the page, and the time they span: the rate that chooses the next
/// era's level.
#[derive(Default)]
struct Seen {
    matches: i64,
    rows: i64,
    span: i128,
}

impl Seen {
    fn add(&mut self, matches: i64, span: i128) {
        self.matches += matches;
        self.span += span.max(1);
    }

    /// The page took `rows` of the list from the eras last added (all of
    /// their rows, as the page was not full).
    fn took(&mut self, rows: usize) {
        self.rows += rows as i64;
    }

    /// [`Seen::level`], or the era level above it when the eras of that
    /// level would not give the `missing` rows at the rate the page met
    /// them (one more than seen) and those of the level above would hold
    /// at most `most` matches (never if none: [`Documents::fill_most`]; at
    /// half of `collect_max` the eras read hold no more than it, as they
    /// hold at most twice the estimate, [`Counted::Below`]). An uncommon word on
    /// `/threads` at 1,000,000 messages, met 4 times in 15 hours, was 133
    /// matches in the 12.7-day eras (over the room of 100) and 6 rows in
    /// a 19-hour one, and read four 19-hour eras one by one to fill its
    /// page where one collection of the 12.7-day eras held 102.
    fn level_to_fill(
        &self,
        room: i64,
        whole_room: i64,
        store: Option<i128>,
        at: i64,
        missing: usize,
        most: Option<i64>,
    ) -> usize {
        let level = self.level(room, whole_room, store, at);
        let coarser = level + 1;
        let Some(most) = most.filter(|_| coarser < ERA_SHIFTS.len()) else {
            return level;
        };
        let span = self.span.max(1);
        let rows = (self.rows + 1) as i128 * time_below(level, at) / span;
        let matches = self.counted() * time_below(coarser, at) / span;
        if rows < missing as i128 && matches <= most as i128 {
            coarser
        } else {
            level
        }
    }

    /// The whole store (`ERA_SHIFTS.len()`) if the rate seen would put at
    /// most `whole_room` matches in the `store` span its documents cover
    /// (read with the first era collected, so known here);
    /// else the level whose eras read at `at` would hold about `room`
    /// ([`level_for`]). The rate is taken as one match more than seen
    /// ([`Seen::counted`]).
    fn level(&self, room: i64, whole_room: i64, store: Option<i128>, at: i64) -> usize {
        let count = self.counted();
        if store.is_some_and(|store| count * store <= whole_room as i128 * self.span) {
            return ERA_SHIFTS.len();
        }
        level_for(count, self.span, room, at, Counted::Below)
    }

    /// The time at the rate the page took its rows (one more than it
    /// took, as [`Seen::level_to_fill`] counts them) that holds `rows`.
    fn time_for(&self, rows: usize) -> i128 {
        rows as i128 * self.span.max(1) / (self.rows + 1) as i128
    }

    /// The matches the rate is made of: one more than seen, as the walk's
    /// are two more ([`first_level`]), for the few seen in the first eras
    /// are a rough rate. None seen counts as one: a few hours without a
    /// match say little of a word (a word in 1 % of the mail was taken for
    /// rare and its whole store collected, 400 matches read for nothing).
    /// One seen counts as two: at 1,000,000 messages a word in 0.23 % of
    /// the mail met once in 31 hours of received mail (about four were
    /// due) looked rare enough for the whole store, which held over 400
    /// (5 ms for nothing, the search's slowest statement). A rare word's
    /// first eras still make its rate.
    fn counted(&self) -> i128 {
        self.matches as i128 + 1
    }

    /// Whether `finer` eras of a side of the mail would read more than
    /// twice the postings of the coarser eras they stand for: a lookup of
    /// a word and eras reads the shorter of the word's posting list (both
    /// sides: the rate seen, one more than seen, over the store's time,
    /// twice) and the eras' (their time's share of one side's documents,
    /// half the store's `messages`). An uncommon word on `/messages` at
    /// 1,000,000 messages (2,324 postings) read nine 19-hour eras of
    /// received mail, 10,001 documents, in 0.68 ms for 20 matches, where
    /// the 12.7-day era holding them took 0.23 ms for 39. Twice, as a rate
    /// of a few matches is rough and a coarse lookup costs more per
    /// posting: a medium word (about 10,000 postings) met 3 times in its
    /// first era was rated at about 5,000, under six 19-hour eras' 6,500
    /// documents, and its coarse eras took 1.17 ms where the six took
    /// 0.59. Unknown for threads (no count of documents is kept): their
    /// finer eras stay.
    fn finer_reads_more(&self, finer: Eras, ends: Option<Ends>, top: i64) -> bool {
        let Some((ends, messages)) = ends.and_then(|e| e.messages.map(|m| (e, m))) else {
            return false;
        };
        let store = ends.span(top);
        let finer_postings = ((finer.count as i128) << finer.shift) * messages as i128 / 2 / store;
        let word_postings = self.counted() * store * 2 / self.span.max(1);
        finer_postings > 2 * word_postings
    }

    /// The [`TierRule`] of `eras` read at `at` for a page missing
    /// `missing` rows: the eras of the level above, if it is open (`open`,
    /// [`Caps::top`]) and they start before these; the coarser eras may be
    /// estimated to hold `room` matches below these, the level's choice
    /// ([`Seen::level`]).
    fn tier_rule(
        &self,
        eras: Eras,
        at: i64,
        top: i64,
        open: usize,
        missing: usize,
        room: i64,
    ) -> Option<TierRule> {
        let coarser = level_of(eras) + 1;
        if coarser > open || coarser >= ERA_SHIFTS.len() {
            return None;
        }
        let tier = Eras::reached(ERA_SHIFTS[coarser], at);
        if tier.start() >= eras.start() {
            return None;
        }
        Some(TierRule {
            eras: tier,
            missing: missing as i64,
            counted: bounded(self.counted()),
            time: bounded(eras.start() as i128 - tier.start() as i128),
            room_span: bounded(room as i128 * self.span_with(eras, top)),
            whole: None,
            few: None,
        })
    }

    /// The [`FewRule`] of `few` for the coarser eras of `eras`, where the
    /// documents span `store` (none: read with the eras).
    fn few_rule(&self, eras: Eras, top: i64, few: FewPostings, store: Option<i128>) -> FewRule {
        let span = self.span_with(eras, top);
        FewRule {
            room_span: bounded(few.room as i128 * span),
            postings_span: bounded(few.postings as i128 * span),
            store: store.map(bounded),
        }
    }

    /// The time seen, with that of `eras` below `top`.
    fn span_with(&self, eras: Eras, top: i64) -> i128 {
        self.span + eras.span_below(top).max(1)
    }

    /// [`Seen::level`]'s rule for the whole store to follow eras spanning
    /// `span`, for a statement to check on the matches they hold: `store`
    /// is the time the documents span, or none where that statement reads
    /// their ends itself.
    fn whole_rule(&self, whole_room: i64, span: i128, store: Option<i128>) -> WholeRule {
        WholeRule {
            counted: bounded(self.counted()),
            room_span: bounded(whole_room as i128 * (self.span + span.max(1))),
            store: store.map(bounded),
        }
    }
}

/// A rule's figure as a statement binds it: at least 1, at most `i64::MAX`.
fn bounded(v: i128) -> i64 {
    v.clamp(1, i64::MAX as i128) as i64
}

/// When eras' matches at or below where the search started (`below`) make
/// [`Seen::level`] choose the whole store next: `(below + counted) * store
/// <= room_span`, checked by the eras' statement ([`collect_statement`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct WholeRule {
    /// The matches seen before these eras, one more ([`Seen::counted`]).
    counted: i64,
    /// The whole store's room times the time seen, these eras' with it.
    room_span: i64,
    /// The time the documents span; none: read with the eras (the first
    /// collection's [`Ask::with_ends`]), so that a rare word's first era
    /// brings the whole store, a statement fewer.
    store: Option<i64>,
}

/// The times of a list's oldest and newest documents ([`Documents::ends`]),
/// none if it has none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ends {
    oldest: Option<i64>,
    newest: Option<i64>,
    /// The documents of both sides of the mail, as many as messages were
    /// ever numbered (`seq`: two index probes); none for threads.
    messages: Option<i64>,
}

impl Ends {
    /// The time the documents span: from the oldest to the newest (or to
    /// `top`, where the search started, if later), at least 1.
    fn span(self, top: i64) -> i128 {
        let Some(oldest) = self.oldest else {
            return 1;
        };
        let newest = self.newest.unwrap_or(top).max(top);
        (newest as i128 - oldest as i128).max(1)
    }
}

/// What of the eras a level would read its estimate counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Counted {
    /// Their time below `at`, where the page is filled from: the rest of
    /// the era reached (at least half of it), or a sliver and the whole
    /// era before; never less than half an era nor more than one and a
    /// half, so the eras hold at most twice the estimate in all (half of
    /// `collect_max` at a room of a quarter). For a rate the eras
    /// collected so far made: counting two whole eras where a sliver and
    /// one are read kept an uncommon word at 1,000,000 messages (about 50
    /// matches in 12.7 days, 27 % of that era left) at 19-hour eras for
    /// three collections more, where one of 12.7 days would have filled
    /// its page.
    Below,
    /// The eras whole. For the walk's rate, the roughest: a word in 10 %
    /// of the mail met in none of 50 received messages.
    Whole,
}

/// The coarsest era level whose eras read at `at` (one, or two for a
/// sliver: [`Eras::reached`]) would hold at most `room` matches in what
/// `counted` says if `count` were met in `span` microseconds; the finest
/// if none. Counting one era where two are read sent a word in 1 % of the
/// mail, met 5 times in 19 hours, to two eras of 12.7 days: 386 matches,
/// and a GIN lookup of all of the word's documents (3 ms).
fn level_for(count: i128, span: i128, room: i64, at: i64, counted: Counted) -> usize {
    (0..ERA_SHIFTS.len())
        .rposition(|level| {
            let time = match counted {
                Counted::Below => time_below(level, at),
                Counted::Whole => {
                    let shift = ERA_SHIFTS[level];
                    (Eras::reached(shift, at).count as i128) << shift
                }
            };
            count * time <= room as i128 * span.max(1)
        })
        .unwrap_or(0)
}

/// The eras of `level` read at `at` ([`Eras::reached`]), or none for the
/// whole store: past the coarsest level, or where they hold at least half
/// of the time from the `oldest` document to `at` (if the whole store may
/// be collected). A lookup of a word and an era descends the era's posting
/// tree for each of the word's matches, where the word alone reads its own
/// list: a rare word on `/threads` at 1,000,000 messages read two 203-day
/// eras (most of a year's store) and the whole store in one statement,
/// 0.78 ms. The store then holds about twice the eras' matches at most,
/// which the level chose to be few.
fn eras_or_store(level: usize, at: i64, oldest: Option<i64>) -> Option<Eras> {
    let eras = Eras::reached(*ERA_SHIFTS.get(level)?, at);
    let start = eras.start() as i128;
    match oldest {
        Some(oldest) if start - oldest as i128 <= at as i128 - start => None,
        _ => Some(eras),
    }
}

/// The level of eras of `eras.shift`.
fn level_of(eras: Eras) -> usize {
    ERA_SHIFTS
        .iter()
        .position(|&s| s == eras.shift)
        .unwrap_or(ERA_SHIFTS.len() - 1)
}

/// The time the eras of `level` read at `at` hold below it
/// ([`Counted::Below`]), at least 1.
fn time_below(level: usize, at: i64) -> i128 {
    let eras = Eras::reached(ERA_SHIFTS[level], at);
    (at as i128 - eras.start() as i128).max(1)
}

/// Where the search found more than `collect_max` matches: the era (or
/// the whole store) holds no fewer below the cursor, so coarser levels
/// than the finer one it went on with stay closed until it leaves it.
#[derive(Default)]
struct Caps(Vec<(usize, i64)>);

impl Caps {
    /// No level was ever found too full.
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn add(&mut self, level: usize, at: i64) {
        let era = ERA_SHIFTS.get(level).map_or(0, |&shift| at >> shift);
        self.0.push((level, era));
    }

    /// Every level is open at `at`: neither the whole store nor an era
    /// holding `at` was found too full (the store then holds no fewer).
    fn store_open(&mut self, at: i64) -> bool {
        self.top(at) == ERA_SHIFTS.len()
    }

    /// The coarsest level open at `at`.
    fn top(&mut self, at: i64) -> usize {
        self.0.retain(|&(level, era)| {
            ERA_SHIFTS
                .get(level)
                .is_none_or(|&shift| at >> shift == era)
        });
        self.0
            .iter()
            .map(|&(level, _)| level.saturating_sub(1))
            .min()
            .unwrap_or(ERA_SHIFTS.len())
    }
}

/// The coarsest era level (not the whole store) whose eras read at `at`
/// would hold about `room` matches if the words were met as often as `met`
/// in the rows walked so far.
fn rated_level<R>(met: usize, found: &Found<R>, page: &Page, room: i64, at: i64) -> usize {
    let (Some(top), Some((bottom, _))) = (found.top(page), found.after.as_ref()) else {
        return ERA_SHIFTS.len() - 1;
    };
    let span = top as i128 - *bottom as i128;
    level_for(met as i128, span, room, at, Counted::Whole)
}

/// The level of the first collection, from the walk. Its rows are few and
/// may be a part of the documents (received mail, one mailbox), so its
/// rate is taken as two matches more than it met: a word in 10 % of the
/// mail, met once in 50 received messages, was collected over 15 days of
/// all mail (3 ms to learn there were more than 400).
fn first_level<R>(found: &Found<R>, page: &Page, room: i64) -> usize {
    rated_level(found.hits.len() + 2, found, page, room, found.reached())
}

/// Step 1: up to `chunk` rows of the list after `after`, each with its
/// time (`k`) and the list's columns, numbered
/// (`n`) and with whether its document holds the words (`hit`); of them
/// only the hits, the first and the last are returned, and the walk stops
/// once `hits` are found: a common word's page is full before the chunk
/// is walked, and the rows it did not need are never looked up.
fn walk(
    list: &SearchedList<'_>,
    words: &[String],
    after: Option<(i64, String)>,
    chunk: i64,
    hits: i64,
) -> Sql {
    let (docs, key, column, _) = list.documents.parts();
    let (table, alias) = list.documents.list();
    let time_col = list.documents.time_col();
    // A message's document is a column of its own row, read where the walk
    // reads the row; a lookup by key per row (as a thread's document
    // takes) read twice the buffers, its key's index three levels deep at
    // 1,000,000 messages. The check is in the list's select list above
    // its limit, so only the rows walked are checked (and after a sort,
    // as PostgreSQL postpones a costly select list past sort and limit).
    let own_row = docs == table;
    let mut sql = Sql::new(&format!(
        "SELECT r.* FROM (SELECT w.*{hit}, \
         row_number() OVER (ORDER BY w.k DESC, w.id DESC) AS n \
         FROM (SELECT {time_col} AS k, {columns}",
        hit = if own_row { "" } else { ", h.hit" },
        columns = list.columns,
    ));
    if own_row {
        sql.push(&format!(", CASE WHEN {alias}.{column} @@ "));
        push_query(&mut sql, words);
        sql.push(" THEN 1 ELSE 0 END AS hit");
    }
    sql.push(&format!(" FROM {table} {alias} WHERE 1 = 1"));
    (list.filters)(&mut sql);
    Page {
        limit: chunk - 1,
        after,
    }
    .push(&mut sql, time_col, &format!("{alias}.id"));
    sql.push(") w");
    if !own_row {
        sql.push(&format!(
            " CROSS JOIN LATERAL (SELECT COUNT(*) AS hit FROM (SELECT 1 FROM {docs} d \
             WHERE d.{key} = w.id AND d.{column} @@ "
        ));
        push_query(&mut sql, words);
        sql.push(" LIMIT 1) x) h");
    }
    // The window's order is the walk's, so the rows stream through it in
    // order (no sort) and stop at the outer limit.
    sql.push(&format!(
        ") r WHERE r.hit = 1 OR r.n = 1 OR r.n = {chunk} \
         ORDER BY r.k DESC, r.id DESC LIMIT "
    ))
    .bind(hits + 2);
    sql
}

/// What one collection found.
struct Collected {
    /// Documents holding the words, up to `max + 1`.
    matches: i64,
    /// Those of them at or below the time the search started from.
    below_top: i64,
    /// The rest of the page among them, rows of the list's columns (only
    /// meaningful if `matches` is within `max`).
    page_rows: Vec<AnyRow>,
    /// The time of the list's first row below the eras collected (none if
    /// the list ends there, or the whole store was collected).
    next_at: Option<i64>,
    /// The documents' ends, if they were asked for.
    ends: Option<Ends>,
    /// The matches in the whole store (up to `max + 1`), if it was
    /// collected with the eras (then `page_rows` are its, unless more
    /// than `max`).
    whole_matches: Option<i64>,
    /// The matches of the coarser eras ([`TierRule`]), if they were
    /// collected with the eras (then `page_rows` and `next_at` are theirs,
    /// unless more than `max`).
    tier: Option<TierMatches>,
}

/// The matches of a collection's coarser eras ([`TierRule`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TierMatches {
    /// Up to `max + 1`.
    matches: i64,
    /// Those at or below the time the search started from.
    below_top: i64,
}

/// Step 2: runs the [`collect_statement`] of `ask` and reads what it
/// found.
async fn collect(
    conn: &mut AnyConnection,
    list: &SearchedList<'_>,
    words: &[String],
    page: &Page,
    ask: Ask,
) -> Result<Collected, sqlx::Error> {
    let rows = collect_statement(list, words, page, ask)
        .fetch_all(&mut *conn)
        .await?;
    let (matches, below_top, next_at, ends, whole_matches) = match rows.first() {
        Some(r) => (
            r.int("n")?,
            r.int("below_top")?,
            r.opt_int("next_at")?,
            match ask.with_ends {
                true => Some(Ends {
                    oldest: r.opt_int("oldest")?,
                    newest: r.opt_int("newest")?,
                    messages: r.opt_int("messages")?,
                }),
                false => None,
            },
            r.opt_int("whole_n")?,
        ),
        None => (0, 0, None, None, None),
    };
    let tier = match (ask.tier, rows.first()) {
        (Some(_), Some(r)) => match (r.opt_int("tier_n")?, r.opt_int("tier_below")?) {
            (Some(matches), Some(below_top)) => Some(TierMatches { matches, below_top }),
            _ => None,
        },
        _ => None,
    };
    let mut page_rows = Vec::new();
    for r in rows {
        // The statement's one row, without a page row, when none was found.
        if r.opt_int("k")?.is_some() {
            page_rows.push(r);
        }
    }
    Ok(Collected {
        matches,
        below_top,
        page_rows,
        next_at,
        ends,
        whole_matches,
        tier,
    })
}

/// What one collection asks for, besides the list, the words and the page.
#[derive(Debug, Clone, Copy)]
struct Ask {
    /// The eras collected; none: the whole store.
    era: Option<Eras>,
    /// Where the search started ([`Found::top`]).
    top: i64,
    /// The most matches collected ([`SearchBounds::collect_max`]).
    max: i64,
    /// Read the documents' ends too ([`Documents::ends`]).
    with_ends: bool,
    /// The rule by which the eras' matches choose the whole store next
    /// ([`Seen::whole_rule`]), none for never; if they meet it, it is
    /// collected in the same statement.
    whole: Option<WholeRule>,
    /// The coarser eras that hold these ([`TierRule`]), collected in the
    /// same statement when these hold too few for the page; none for never.
    tier: Option<TierRule>,
}

/// When a collection's eras hold fewer matches than the page misses and
/// the rate they make puts at most a level's worth in the coarser eras
/// that hold them, those coarser eras are collected in the same statement
/// and stand for them: a search that would have read the coarser eras
/// next reads them a round trip sooner. At 1,000,000 messages an uncommon
/// word on `/threads` met 4, then 16, then 10 matches in three
/// collections, one statement each, where at 10,000 messages a search is
/// one collection: the extra round trips were most of the difference.
/// The coarser eras hold these (they start earlier and end where they do,
/// [`Seen::tier_rule`]), so their matches are the page's with these among
/// them; past `max` the search keeps these eras' page and the coarser
/// level stays closed there ([`Caps`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TierRule {
    /// The coarser eras.
    eras: Eras,
    /// Rows the page misses: the eras' matches below the start must be
    /// fewer.
    missing: i64,
    /// The matches seen before these eras, one more ([`Seen::counted`]).
    counted: i64,
    /// The time the coarser eras hold below these.
    time: i64,
    /// The matches the coarser eras may be estimated to hold times the
    /// time seen (these eras' with it).
    room_span: i64,
    /// The rule by which the coarser eras' matches choose the whole store
    /// next, collected in the same statement too (a rare word: its first
    /// era, the coarser eras, then everything), where the collection's own
    /// eras may choose it ([`Ask::whole`]).
    whole: Option<WholeRule>,
    /// A larger room where the words' postings are few (message lists:
    /// [`Documents::coarser_room`]).
    few: Option<FewRule>,
}

/// The room of a list's coarser eras ([`Documents::coarser_room`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CoarserRoom {
    /// The matches they may be estimated to hold.
    room: i64,
    /// More, where the words' postings are estimated to be few.
    few: Option<FewPostings>,
}

/// A room for words of few postings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FewPostings {
    /// The matches the coarser eras may be estimated to hold.
    room: i64,
    /// The most postings the words may be estimated to have.
    postings: i64,
}

/// [`FewPostings`] for a statement to check on the matches its eras hold:
/// `(below + counted) * time <= room_span` and `(below + counted) * 2 *
/// store <= postings_span`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FewRule {
    /// The room times the time seen (these eras' with it).
    room_span: i64,
    /// The most postings times the time seen.
    postings_span: i64,
    /// The time the documents span; none: read with the eras.
    store: Option<i64>,
}

/// The documents holding the words (in the eras asked, or all of them), up
/// to `max + 1`: how many, how many at or below `top`, the page among
/// them, sorted by time and joined to the list's rows only until it is
/// full, and the time of the list's first row below the eras, and with
/// `with_ends` the times of the oldest and newest documents (the first
/// era collected reads them for the next level's rate, a round trip fewer
/// than a statement of their own).
///
/// The step after eras used up is often the whole store (a rare word: an
/// era or two, then everything), and whether it is depends only on how
/// many matches the eras hold. So when the rule could choose it, the
/// statement checks it ([`WholeRule`]; the first collection on the ends
/// it reads) and, if the eras meet it, collects the whole store too (PostgreSQL reads it
/// only then: a one-time filter): its page is the page (the eras' matches
/// are its newest below the cursor), a round trip and a statement fewer.
/// Past `max`, the eras' page is kept and the search goes on as if the
/// store had been asked for in a statement of its own.
///
/// Everything that changes from one collection of a search to the next is
/// a bound value (the page's limit is the whole page's: [`Found::rest`]),
/// so a list and page size have a few texts: the first eras (with the
/// documents' ends), eras, eras the store may come with, each of these
/// with their coarser eras (and the store after those where it may come
/// at all: [`TierRule::whole`]), and the whole store.
fn collect_statement(list: &SearchedList<'_>, words: &[String], page: &Page, ask: Ask) -> Sql {
    let (_, _, _, matches) = list.documents.parts();
    let side = list.documents.side();
    let (table, alias) = list.documents.list();
    let time_col = list.documents.time_col();
    // The matches of the words, in `eras` of the list's side, or everywhere
    // (on both sides: a lexeme of a side names half the store, and GIN reads
    // a leaf of its posting tree for each of a rare word's matches, 2.4 ms
    // for 52 of them at 1,000,000 messages against 0.1 for the word alone).
    // A message's matches name its side (migration 21), so the page joins
    // only its list's to their rows.
    let (columns, own_side) = match list.documents {
        Documents::Threads => ("id, at", String::new()),
        Documents::Sent | Documents::Received => {
            ("id, at, side", format!(" WHERE side = '{side}'"))
        }
    };
    let push_matches = |sql: &mut Sql, eras: Option<Eras>| {
        sql.push(&format!("SELECT {columns} FROM {matches}("));
        push_query(sql, words);
        if let Some(eras) = eras {
            sql.push(" && CAST(")
                .bind(eras.query(side))
                .push(" AS tsquery)");
        }
        sql.push(", ").bind(ask.max + 1).push(")");
    };
    let mut sql = Sql::new("WITH m AS MATERIALIZED (");
    push_matches(&mut sql, ask.era);
    sql.push("), e AS MATERIALIZED (SELECT (SELECT COUNT(*) FROM m) AS n, (SELECT COUNT(*) FROM m WHERE at <= ")
        .bind(ask.top)
        .push(") AS below_top, ");
    // Where the list goes on below the eras, read with them: a statement
    // fewer per era.
    let push_next_at = |sql: &mut Sql, start: i64| {
        sql.push(&format!(
            "(SELECT {time_col} FROM {table} {alias} WHERE 1 = 1"
        ));
        (list.filters)(sql);
        Page {
            limit: 0,
            after: Some((start, String::new())),
        }
        .push(sql, time_col, &format!("{alias}.id"));
        sql.push(")");
    };
    match ask.era {
        Some(eras) => push_next_at(&mut sql, eras.start()),
        None => {
            sql.push("CAST(NULL AS BIGINT)");
        }
    }
    sql.push(" AS next_at");
    if ask.with_ends {
        sql.push(&format!(", {}", list.documents.ends()));
    }
    sql.push(")");
    let whole = ask.era.and(ask.whole);
    let tier = ask.era.and(ask.tier);
    // The matches a rule counts: those of `below` (a column) with the
    // ones seen before, one more.
    let push_counted = |sql: &mut Sql, below: &str, counted: i64| {
        sql.push(&format!("CAST({below} + "))
            .bind(counted)
            .push(" AS NUMERIC)");
    };
    // The whole store's rule on the ends read above where not known.
    let push_store = |sql: &mut Sql, store: Option<i64>| {
        match store {
            Some(store) => sql.bind(store),
            None => sql
                .push("GREATEST(GREATEST(e.newest, ")
                .bind(ask.top)
                .push(") - e.oldest, 1)"),
        };
    };
    if let Some(rule) = whole {
        sql.push(", g AS MATERIALIZED (SELECT e.n <= ")
            .bind(ask.max)
            .push(" AND ");
        push_counted(&mut sql, "e.below_top", rule.counted);
        sql.push(" * ");
        push_store(&mut sql, rule.store);
        sql.push(" <= ").bind(rule.room_span).push(" AS go FROM e)");
    }
    // The whole store after the coarser eras, by their matches.
    let whole_after_tier = whole.and(tier.and_then(|rule| rule.whole));
    if let Some(rule) = tier {
        // Only where the whole store is not asked for: it holds them.
        sql.push(", h AS MATERIALIZED (SELECT e.below_top < ")
            .bind(rule.missing)
            .push(" AND (");
        push_counted(&mut sql, "e.below_top", rule.counted);
        sql.push(" * ")
            .bind(rule.time)
            .push(" <= ")
            .bind(rule.room_span);
        if let Some(few) = rule.few {
            sql.push(" OR ");
            push_counted(&mut sql, "e.below_top", rule.counted);
            sql.push(" * ")
                .bind(rule.time)
                .push(" <= ")
                .bind(few.room_span)
                .push(" AND ");
            push_counted(&mut sql, "e.below_top", rule.counted);
            sql.push(" * 2 * ");
            push_store(&mut sql, few.store);
            sql.push(" <= ").bind(few.postings_span);
        }
        sql.push(")");
        if whole.is_some() {
            sql.push(" AND NOT (SELECT go FROM g)");
        }
        sql.push(" AS go FROM e), w2 AS MATERIALIZED (SELECT * FROM (");
        push_matches(&mut sql, Some(rule.eras));
        sql.push(") s WHERE (SELECT go FROM h)), v AS MATERIALIZED (SELECT (SELECT go FROM h) AND (SELECT COUNT(*) FROM w2) <= ")
            .bind(ask.max)
            .push(" AS tier, (SELECT COUNT(*) FROM w2 WHERE at <= ")
            .bind(ask.top)
            .push(") AS below_top)");
        if let Some(after) = whole_after_tier {
            sql.push(", g3 AS MATERIALIZED (SELECT v.tier AND ");
            push_counted(&mut sql, "v.below_top", after.counted);
            sql.push(" * ");
            push_store(&mut sql, after.store);
            sql.push(" <= ")
                .bind(after.room_span)
                .push(" AS go FROM e, v)");
        }
    }
    let whole_gate = match whole_after_tier {
        Some(_) => "((SELECT go FROM g) OR (SELECT go FROM g3))",
        None => "(SELECT go FROM g)",
    };
    if whole.is_some() {
        sql.push(", w AS MATERIALIZED (SELECT * FROM (");
        push_matches(&mut sql, None);
        sql.push(&format!(
            ") s WHERE {whole_gate}), u AS MATERIALIZED (SELECT {whole_gate} AND (SELECT COUNT(*) FROM w) <= "
        ))
        .bind(ask.max)
        .push(" AS whole)");
    }
    // The matches the page is taken from: the whole store's or the coarser
    // eras' where collected within `max`, else the eras'.
    let source = match (whole.is_some(), tier.is_some()) {
        (false, false) => "m",
        (true, false) => {
            "(SELECT * FROM w WHERE (SELECT whole FROM u) \
             UNION ALL SELECT * FROM m WHERE NOT (SELECT whole FROM u)) s"
        }
        (false, true) => {
            "(SELECT * FROM w2 WHERE (SELECT tier FROM v) \
             UNION ALL SELECT * FROM m WHERE NOT (SELECT tier FROM v)) s"
        }
        (true, true) => {
            "(SELECT * FROM w WHERE (SELECT whole FROM u) \
             UNION ALL SELECT * FROM w2 WHERE (SELECT tier FROM v) AND NOT (SELECT whole FROM u) \
             UNION ALL SELECT * FROM m WHERE NOT (SELECT whole FROM u) \
             AND NOT (SELECT tier FROM v)) s"
        }
    };
    sql.push(" SELECT e.n AS n, e.below_top AS below_top, ");
    match tier {
        Some(rule) => {
            sql.push("CASE WHEN (SELECT tier FROM v) THEN ");
            push_next_at(&mut sql, rule.eras.start());
            sql.push(
                " ELSE e.next_at END AS next_at, CASE WHEN (SELECT go FROM h) \
                 THEN (SELECT COUNT(*) FROM w2) END AS tier_n, CASE WHEN (SELECT go FROM h) \
                 THEN (SELECT below_top FROM v) END AS tier_below, ",
            );
        }
        None => {
            sql.push("e.next_at AS next_at, ");
        }
    }
    match whole {
        Some(_) => sql.push(&format!(
            "CASE WHEN {whole_gate} THEN (SELECT COUNT(*) FROM w) END AS whole_n"
        )),
        None => sql.push("CAST(NULL AS BIGINT) AS whole_n"),
    };
    if ask.with_ends {
        sql.push(", e.oldest AS oldest, e.newest AS newest, e.messages AS messages");
    }
    // The page among the matches, newest first, each joined to its row of
    // the list (by key, never a scan) until it is full.
    sql.push(&format!(
        ", p.* FROM e LEFT JOIN LATERAL (SELECT c.at AS k, {columns} FROM \
         (SELECT * FROM {source}{own_side} ORDER BY at DESC, id DESC) c CROSS JOIN LATERAL \
         (SELECT * FROM {table} x WHERE x.id = c.id OFFSET 0) {alias} WHERE 1 = 1",
        columns = list.columns,
    ));
    (list.filters)(&mut sql);
    page.push(&mut sql, "c.at", "c.id");
    sql.push(") p ON true ORDER BY p.k DESC, p.id DESC");
    sql
}

/// A thread's document with a message's words added: each word once, no
/// positions, at most 768 KiB (PostgreSQL refuses a tsvector over 1 MiB):
/// once full, a thread's later words are not added. STABLE, as
/// `pg_column_size` is: PostgreSQL inlines an SQL function only when its
/// body is no more volatile than it is declared. Not inlined, every
/// statement that adds a message parsed and planned the body anew.
pub const THREAD_DOC_FUNCTION: &str = r#"
CREATE OR REPLACE FUNCTION ph_thread_doc(doc tsvector, add tsvector) RETURNS tsvector
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT CASE
    WHEN doc IS NULL THEN strip(add)
    WHEN pg_column_size(strip(doc)) + pg_column_size(strip(add)) > 786432 THEN doc
    ELSE strip(doc) || strip(add)
END
$$;
"#;

/// The documents of threads (PostgreSQL): kept in the transaction of each
/// message, see [`index_message_statements`]. Follows
/// [`THREAD_DOC_FUNCTION`].
pub const THREAD_DOCUMENTS: &str = r#"
CREATE TABLE thread_search (
    thread_id TEXT PRIMARY KEY,
    doc tsvector NOT NULL,
    -- The thread's last_message_at, kept with it (a message or a draft
    -- moves it): the matches of a rare word are sorted without their
    -- threads.
    last_at BIGINT NOT NULL
);
CREATE INDEX thread_search_doc ON thread_search USING GIN (doc);
ALTER TABLE thread_search ALTER COLUMN doc SET STATISTICS 1000;
CREATE AGGREGATE ph_thread_doc_agg(tsvector) (SFUNC = ph_thread_doc, STYPE = tsvector);
-- The GIN index read as a bitmap, whatever the statistics say: a scan of
-- every row stopped by the LIMIT is what a rare word must never get.
CREATE FUNCTION ph_thread_matches(q tsquery, n BIGINT) RETURNS TABLE (id TEXT, last_at BIGINT)
LANGUAGE sql STABLE SET enable_seqscan = off SET enable_indexscan = off
AS $$ SELECT thread_id, last_at FROM thread_search WHERE doc @@ q LIMIT n $$;
CREATE FUNCTION ph_message_matches(q tsquery, n BIGINT) RETURNS TABLE (id TEXT)
LANGUAGE sql STABLE SET enable_seqscan = off SET enable_indexscan = off
AS $$ SELECT id FROM messages WHERE search @@ q LIMIT n $$;
"#;

/// Migration 17: the documents' indexes hold their eras (see the module's
/// notes). `ph_eras` names a time's era at every level of [`ERA_SHIFTS`];
/// a message's time is the one its list orders by (`ph_message_time`:
/// received mail by `received_at`, sent mail by `created_at`). The indexes
/// are on the documents with their eras, so they follow a thread's
/// `last_at` by themselves; the matching functions read them and return
/// each match's time, which is what a collection sorts by. Their lists of
/// pending entries (GIN's fast update) are kept to 128 KiB: every lookup
/// reads the whole list, and a search makes several (at the default 4 MiB
/// a lookup read 167 pending pages, 1.9 ms, against 0.3 ms once merged).
pub fn era_indexes() -> String {
    format!(
        r#"
{eras_function}
CREATE FUNCTION ph_message_time(direction TEXT, created_at BIGINT, received_at BIGINT) RETURNS BIGINT
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT CASE WHEN direction = 'inbound' THEN COALESCE(received_at, created_at) ELSE created_at END $$;
CREATE INDEX thread_search_eras ON thread_search USING GIN ((doc || ph_eras(last_at)))
    WITH (gin_pending_list_limit = 128);
DROP INDEX thread_search_doc;
CREATE INDEX messages_search_eras ON messages
    USING GIN ((search || ph_eras(ph_message_time(direction, created_at, received_at))))
    WITH (gin_pending_list_limit = 128);
DROP INDEX messages_search;
DROP FUNCTION ph_thread_matches(tsquery, BIGINT);
DROP FUNCTION ph_message_matches(tsquery, BIGINT);
CREATE FUNCTION ph_thread_matches(q tsquery, n BIGINT) RETURNS TABLE (id TEXT, at BIGINT)
LANGUAGE sql STABLE SET enable_seqscan = off SET enable_indexscan = off SET enable_bitmapscan = on
AS $$ SELECT thread_id, last_at FROM thread_search WHERE (doc || ph_eras(last_at)) @@ q LIMIT n $$;
CREATE FUNCTION ph_message_matches(q tsquery, n BIGINT) RETURNS TABLE (id TEXT, at BIGINT)
LANGUAGE sql STABLE SET enable_seqscan = off SET enable_indexscan = off SET enable_bitmapscan = on
AS $$ SELECT id, ph_message_time(direction, created_at, received_at) FROM messages
    WHERE (search || ph_eras(ph_message_time(direction, created_at, received_at))) @@ q LIMIT n $$;
"#,
        eras_function = eras_function()
    )
}

/// `ph_eras`, in a form PostgreSQL inlines: each era's number is cast to
/// text by `::text`, which is immutable; `text || bigint` is a STABLE SQL
/// function, which kept the whole function from being inlined, so that
/// every statement that wrote a message or a thread's document parsed and
/// planned it anew for the index (a fifth of the server's CPU in sends).
/// Its values are the same either way: the indexes stay as they are.
pub fn eras_function() -> String {
    format!(
        "CREATE OR REPLACE FUNCTION ph_eras(at BIGINT) RETURNS tsvector \
         LANGUAGE sql IMMUTABLE PARALLEL SAFE \
         AS $$ SELECT array_to_tsvector(ARRAY[{}]) $$;",
        era_lexemes(None)
    )
}

/// Makes every connection read the expressions of the indexes built on
/// `ph_eras` again, after [`eras_function`] replaced its body: a
/// connection that had read them while it had its old body kept that
/// expression, which no lookup written with the new, inlined one matches
/// (a sequential scan of every document; found when a test's connection
/// read the index between the two bodies). Setting an index's option, to
/// the value it has, is what tells the others.
pub const ERA_INDEXES_REREAD: &str = "ALTER INDEX IF EXISTS thread_search_eras \
    SET (gin_pending_list_limit = 128); \
    ALTER INDEX IF EXISTS messages_search_eras SET (gin_pending_list_limit = 128);";

/// The lexemes of the eras of `at` at every level of [`ERA_SHIFTS`], as
/// the elements of an SQL array: `' 36/25669'`, or with a message's side
/// (an SQL expression) `' s36/25669'`. Cast with `::text`, which keeps the
/// functions built of them inlinable (see [`eras_function`]).
fn era_lexemes(side: Option<&str>) -> String {
    ERA_SHIFTS
        .iter()
        .map(|s| match side {
            None => format!("' {s}/' || (at >> {s})::text"),
            Some(side) => format!("' ' || {side} || '{s}/' || (at >> {s})::text"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Migration 19: a message's eras name the side of the mail it is on
/// (`ph_message_side`: `s` sent, `r` received, `d` a draft; `' s36/25669'`),
/// so a search of sent or received mail reads the matches of that list's
/// mail only in each era. With one set of eras for both, a list of one
/// side read about twice the eras for a page (a word in 1 % of the mail:
/// four collections at 1,000,000 messages where the thread list made two).
/// The whole store is still read by the words alone (see
/// [`collect_statement`]).
pub fn message_sides_index() -> String {
    format!(
        r#"
CREATE FUNCTION ph_message_side(direction TEXT, is_draft BIGINT) RETURNS TEXT
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT CASE WHEN direction <> 'outbound' THEN 'r' WHEN is_draft = 0 THEN 's' ELSE 'd' END $$;
CREATE FUNCTION ph_message_eras(side TEXT, at BIGINT) RETURNS tsvector
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT array_to_tsvector(ARRAY[{eras}]) $$;
CREATE INDEX messages_search_sides ON messages
    USING GIN ((search || {MESSAGE_ERAS}))
    WITH (gin_pending_list_limit = 128);
DROP INDEX messages_search_eras;
CREATE OR REPLACE FUNCTION ph_message_matches(q tsquery, n BIGINT) RETURNS TABLE (id TEXT, at BIGINT)
LANGUAGE sql STABLE SET enable_seqscan = off SET enable_indexscan = off SET enable_bitmapscan = on
AS $$ SELECT id, ph_message_time(direction, created_at, received_at) FROM messages
    WHERE (search || {MESSAGE_ERAS}) @@ q LIMIT n $$;
"#,
        eras = era_lexemes(Some("side"))
    )
}

/// Migration 20: the matching functions in PL/pgSQL, each planned once per
/// connection. An SQL function that is not inlined (these set their own
/// settings, so they are not) is parsed and planned on every call: 0.16 ms
/// of planning for a lookup that ran in 0.05 (most of it matching the
/// messages' long index expression), about 0.25 ms per call in all, and a
/// search's collection calls one or two. PL/pgSQL keeps the plan of its
/// query for the connection; with the generic plan forced (the lookup's
/// plan is the index's bitmap whatever the words, as sequential and plain
/// index scans are off) a call costs 0.14 ms where it cost 0.34 (pgbench,
/// one connection, a rare word in an era, at 1,000,000 messages).
pub fn matching_functions() -> String {
    const MATCHES: &str = "id TEXT, at BIGINT";
    matching_function("ph_thread_matches", MATCHES, thread_matches("q", "n"))
        + &matching_function(
            "ph_message_matches",
            MATCHES,
            message_matches("q", "n", false),
        )
}

/// Migration 21: a message's matches name their side too
/// (`ph_message_side`), so that a collection of the whole store, which
/// reads both sides (see [`collect_statement`]), joins only its list's
/// matches to their rows: a rare word's page of 25 sent messages joined
/// 47 rows, the other side's only to filter them out. The side is read
/// from the row the lookup reads anyway.
pub fn sided_message_matches() -> String {
    "DROP FUNCTION ph_message_matches(tsquery, BIGINT);\n".to_string()
        + &matching_function(
            "ph_message_matches",
            "id TEXT, at BIGINT, side TEXT",
            message_matches("q", "n", true),
        )
}

/// A matching function: `columns` of the table it returns, `body` its
/// query, with its arguments `q` and `n`.
fn matching_function(name: &str, columns: &str, body: String) -> String {
    format!(
        "CREATE OR REPLACE FUNCTION {name}(q tsquery, n BIGINT) RETURNS TABLE ({columns})\n\
         LANGUAGE plpgsql STABLE SET enable_seqscan = off SET enable_indexscan = off \
         SET enable_bitmapscan = on SET plan_cache_mode = force_generic_plan\n\
         AS $$ BEGIN RETURN QUERY {body}; END $$;\n"
    )
}

/// The query of `ph_thread_matches`, with `q` and `n` for its arguments.
fn thread_matches(q: &str, n: &str) -> String {
    format!(
        "SELECT s.thread_id, s.last_at FROM thread_search s \
         WHERE (s.doc || ph_eras(s.last_at)) @@ {q} LIMIT {n}"
    )
}

/// The query of `ph_message_matches`, with `q` and `n` for its arguments,
/// and with `sided` each match's side (migration 21); its columns are
/// qualified where PL/pgSQL has a variable of their name (the function's
/// `id`).
fn message_matches(q: &str, n: &str, sided: bool) -> String {
    let side = if sided {
        ", ph_message_side(direction, is_draft)"
    } else {
        ""
    };
    format!(
        "SELECT m.id, ph_message_time(direction, created_at, received_at){side} FROM messages m \
         WHERE (search || {MESSAGE_ERAS}) @@ {q} LIMIT {n}"
    )
}

/// A message's eras and side, as its index holds them (migration 19).
pub const MESSAGE_ERAS: &str = "ph_message_eras(ph_message_side(direction, is_draft), \
    ph_message_time(direction, created_at, received_at))";

/// Builds the thread documents of a store that has none (the migration
/// that creates them, and bulk loaders).
pub const THREAD_DOCUMENTS_BACKFILL: &str = r#"
INSERT INTO thread_search (thread_id, doc, last_at)
    SELECT m.thread_id, ph_thread_doc_agg(m.search ORDER BY m.created_at, m.seq), MAX(t.last_message_at)
    FROM messages m JOIN threads t ON t.id = m.thread_id
    WHERE m.is_draft = 0 GROUP BY m.thread_id;
"#;

/// Adds a message (not a draft) to its thread's document, in the
/// message's transaction: `insert`, the message's, returns its `search`
/// column, whose words the document takes (computed once: parsing a body
/// into words was a quarter of the server's CPU in inbound mail when the
/// document parsed it again), and `last_at` is what the thread's
/// `last_message_at` becomes with it (the later of the two; a thread just
/// created is not there yet). The two join the message's other inserts in
/// one statement, the document's right after the message's: it reads
/// nothing else but the thread, as of before the message.
pub fn index_message_statements(insert: Sql, thread_id: &str, at: i64) -> (Sql, Sql) {
    let insert = insert.joined_as("indexed_message", "search");
    let index = sql!(
        "INSERT INTO thread_search (thread_id, doc, last_at) SELECT $1, strip(search), \
         GREATEST((SELECT last_message_at FROM threads WHERE id = $1), $2) FROM indexed_message \
         ON CONFLICT (thread_id) DO UPDATE SET doc = ph_thread_doc(thread_search.doc, EXCLUDED.doc), \
         last_at = EXCLUDED.last_at",
        thread_id,
        at
    )
    .joining_inserts();
    (insert, index)
}

/// Brings a thread's document's `last_at` up to date with the thread (a
/// draft moved it).
pub async fn follow_thread(tx: &mut crate::store::Tx, thread_id: &str) -> Result<(), sqlx::Error> {
    Sql::new("UPDATE thread_search SET last_at = (SELECT last_message_at FROM threads WHERE id = ")
        .bind(thread_id)
        .push(") WHERE thread_id = ")
        .bind(thread_id)
        .execute_tx(tx)
        .await?;
    Ok(())
}

/// Removes threads' documents (before the threads are deleted).
pub async fn unindex_threads(
    tx: &mut crate::store::Tx,
    thread_ids: &[String],
) -> Result<(), sqlx::Error> {
    for chunk in thread_ids.chunks(500) {
        let mut q = Sql::new("DELETE FROM thread_search WHERE thread_id IN ");
        q.bind_list(chunk);
        q.execute_tx(tx).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 300 threads: a third in one crowded tenth of a second, a third over a
    /// year, a third over a few hours, with ties; words from every thread
    /// to a few.
    async fn spread_store(db: &Db) {
        threads_store(
            db,
            r#"
INSERT INTO threads (id, mailbox_id, mailbox, domain, subject, normalized_subject, snippet,
    folders, participants, message_count, unread_count, is_starred, has_attachments,
    last_message_at, created_at)
SELECT 'th' || lpad(i::text, 5, '0'), 'mb' || (i % 4), 'a@example.com', 'example.com', 's', 's',
    '', ',inbox,', '', 1, 0, 0, 0, at, at
FROM (SELECT i, CASE i % 3
        WHEN 0 THEN 1790000000000000 + ((i / 3) % 50) * 1000
        WHEN 1 THEN 1790000000000000 - (abs(hashtext('y' || i))::bigint << 14)
        ELSE 1790000000000000 - (abs(hashtext('h' || i))::bigint << 2) END AS at
    FROM generate_series(1, 300) i) g;
INSERT INTO thread_search (thread_id, doc, last_at)
SELECT 'th' || lpad(i::text, 5, '0'), to_tsvector('simple', concat_ws(' ', 'every',
        CASE WHEN i % 2 = 0 THEN 'half' END, CASE WHEN i % 10 = 0 THEN 'tenth' END,
        CASE WHEN i % 100 = 7 THEN 'rare' END, CASE WHEN i % 3 = 0 THEN 'dense' END)),
    t.last_message_at
FROM generate_series(1, 300) i JOIN threads t ON t.id = 'th' || lpad(i::text, 5, '0');
"#,
        )
        .await;
    }

    /// Runs `inserts` (of threads and their documents) and vacuums the
    /// documents, as a store that has been: each lookup in the GIN index
    /// otherwise reads its whole list of pending entries too.
    async fn threads_store(db: &Db, inserts: &str) {
        sqlx::raw_sql(inserts).execute(db.writer()).await.unwrap();
        sqlx::raw_sql("VACUUM thread_search")
            .execute(db.writer())
            .await
            .unwrap();
    }

    /// The list of threads, filtered by `filters`.
    fn thread_list(filters: &(dyn Fn(&mut Sql) + Sync), narrowed: bool) -> SearchedList<'_> {
        SearchedList {
            documents: Documents::Threads,
            columns: crate::core::thread_actions::COLUMNS,
            filters,
            narrowed,
        }
    }

    /// A search for a page of 26 that has walked from 1000 to 990 and met
    /// `hits` there.
    fn found(hits: usize) -> Found<(i64, String)> {
        Found {
            hits: (0..hits as i64)
                .map(|k| (1000 - k, format!("th{k}")))
                .collect(),
            wanted: 26,
            after: Some((990, "th9".into())),
            first_at: Some(1000),
        }
    }

    /// A collection of `era` from `top` that neither reads the documents'
    /// ends nor collects the whole store with the era.
    fn ask(era: Option<Eras>, top: i64, max: i64) -> Ask {
        Ask {
            era,
            top,
            max,
            with_ends: false,
            whole: None,
            tier: None,
        }
    }

    /// What one collection of `ask` finds of `word` for a first page of
    /// 25, in a read transaction of its own.
    async fn first_page_collected(
        db: &Db,
        list: &SearchedList<'_>,
        word: &str,
        ask: Ask,
    ) -> Collected {
        let page = Page {
            limit: 25,
            after: None,
        };
        let words = vec![word.to_string()];
        let mut tx = db.search_read(false).await.unwrap();
        let got = collect(&mut tx, list, &words, &page, ask).await.unwrap();
        tx.rollback().await.unwrap();
        got
    }

    /// The rows of every page of `limit` of a search, in order, as
    /// `page_rows` gives them.
    async fn paged(
        db: &Db,
        list: &SearchedList<'_>,
        q: &str,
        bounds: SearchBounds,
        limit: i64,
    ) -> Vec<AnyRow> {
        let words: Vec<String> = q.split(' ').map(str::to_string).collect();
        let mut page = Page { limit, after: None };
        let mut out = Vec::new();
        loop {
            let rows = page_rows(db, list, &words, &page, bounds).await.unwrap();
            let more = rows.len() as i64 > limit;
            for r in rows.into_iter().take(limit as usize) {
                page.after = Some((r.int("k").unwrap(), r.text("id").unwrap()));
                out.push(r);
            }
            if !more {
                return out;
            }
        }
    }

    /// Every page of 7 of a thread search.
    async fn searched(
        db: &Db,
        list: &SearchedList<'_>,
        q: &str,
        bounds: SearchBounds,
    ) -> Vec<String> {
        let rows = paged(db, list, q, bounds, 7).await;
        rows.iter()
            .map(|r| {
                // Walked or collected, a page's row is its thread's, read
                // with the list's columns.
                let thread = crate::core::thread_actions::Thread::from_row(r).unwrap();
                assert_eq!(thread.last_message_at, r.int("k").unwrap());
                thread.id
            })
            .collect()
    }

    /// The same search as one full sort.
    async fn sorted(db: &Db, q: &str, mailbox: Option<&str>) -> Vec<String> {
        let mut sql = Sql::new(
            "SELECT t.id FROM threads t JOIN thread_search d ON d.thread_id = t.id \
             WHERE d.doc @@ plainto_tsquery('simple', ",
        );
        sql.bind(q).push(")");
        if let Some(mb) = mailbox {
            sql.push(" AND t.mailbox_id = ").bind(mb);
        }
        sql.push(" ORDER BY t.last_message_at DESC, t.id DESC");
        sql.fetch_all(db.reader())
            .await
            .unwrap()
            .iter()
            .map(|r| r.text("id").unwrap())
            .collect()
    }

    /// A rate that would put at most 300 matches in the store's span: the
    /// whole store; else the level whose era holds about `room`; the rate
    /// is one match more than seen.
    #[test]
    fn the_rate_seen_chooses_the_level() {
        let all = ERA_SHIFTS.len();
        let era = |level: usize| 1i128 << ERA_SHIFTS[level];
        let year = Some(365 * 24 * 3_600_000_000i128);
        // The end of an era at every level: no sliver read with the one before.
        let at = (1i64 << 50) - 1;
        let mut seen = Seen::default();
        seen.add(99, era(4));
        assert_eq!(seen.level(100, 300, year, at), 4);
        let mut seen = Seen::default();
        seen.add(100, era(4));
        assert_eq!(seen.level(100, 300, year, at), 3);
        // 1,700 in two eras of level 4: 53 in one of level 3.
        seen.add(1600, era(4));
        assert_eq!(seen.level(100, 300, year, at), 3);
        let mut dense = Seen::default();
        dense.add(1_000_000, era(0));
        assert_eq!(dense.level(100, 300, year, at), 0);
        // 9 in two weeks: 235 in a year, the whole store; in ten years, 2,350,
        // so an era of level 5 (12.7 days, 8).
        let mut rare = Seen::default();
        rare.add(9, 14 * 24 * 3_600_000_000);
        assert_eq!(rare.level(100, 300, year, at), all);
        assert_eq!(rare.level(100, 300, year.map(|y| 10 * y), at), 5);
        // None in three hours is not taken for rare: as one, 2,920 in the
        // year; an era of 300 hours at most (level 4, 19 hours).
        let mut none = Seen::default();
        none.add(0, 3 * 3_600_000_000);
        assert_eq!(none.level(100, 300, year, at), 4);
        // None in 31 hours: 283 in the year, the whole store; one is
        // counted as two, 565, an era of 12.7 days (level 5, 20).
        let hours_31 = 31 * 3_600_000_000;
        let mut none = Seen::default();
        none.add(0, hours_31);
        assert_eq!(none.level(100, 300, year, at), all);
        let mut one = Seen::default();
        one.add(1, hours_31);
        assert_eq!(one.level(100, 300, year, at), 5);
        // None in 40 days is: about 9 in the store at that rate.
        let mut none = Seen::default();
        none.add(0, 40 * 24 * 3_600_000_000);
        assert_eq!(none.level(100, 300, year, at), all);
        // Not with the store's span unknown.
        assert_eq!(none.level(100, 300, None, at), all - 1);
    }

    /// The era a search starts in counts only up to where it started: 90
    /// matches in its first five sixths are a rate that puts 108 in an era
    /// of level 4, so level 3, not 90 in one of level 4 (a search read the
    /// next era of level 4 holding 349 so).
    #[test]
    fn the_first_era_is_seen_up_to_where_the_search_started() {
        let shift = ERA_SHIFTS[4];
        let era = 1i64 << shift;
        let start = 1_633i64 << shift;
        let top = start + era * 5 / 6;
        let eras = Eras::reached(shift, top - 5);
        assert_eq!((eras.count, eras.start()), (1, start));
        assert_eq!(eras.span_below(top), (top - start + 1) as i128);
        let mut seen = Seen::default();
        seen.add(90, eras.span_below(top));
        // Chosen where the search goes on: the era below, nearly whole.
        assert_eq!(
            seen.level(100, 300, Some(365 * 24 * 3_600_000_000), start - 1),
            3
        );
        // An era wholly below the start counts whole.
        assert_eq!(Eras::reached(shift, start - 1).span_below(top), era as i128);
    }

    /// The walk's rate is taken as two more matches than it met: once in
    /// 4.5 hours is an era of level 4 (19 hours), not of level 5 (12.7
    /// days, 68 at that rate but 400 or more at the rate of the mail
    /// below).
    #[test]
    fn the_first_level_takes_the_walk_for_two_more() {
        // Where the walk ends, more than half of the era of level 5 is left.
        let top = 1_795_728_593_359_914i64 + (1 << 39);
        let hour = 3_600_000_000i64;
        let page = Page {
            limit: 25,
            after: None,
        };
        let mut found = Found {
            hits: vec![(top - hour, "a")],
            wanted: 26,
            after: Some((top - hour * 9 / 2, "b".into())),
            first_at: Some(top),
        };
        assert_eq!(first_level(&found, &page, 100), 4);
        found.hits.clear();
        assert_eq!(first_level(&found, &page, 100), 4);
        let at = top - hour * 9 / 2;
        assert_eq!(rated_level(1, &found, &page, 100, at), 5);
    }

    /// Less than half an era left below the time reached: the era before
    /// it is read with it, and the two count up to where the search
    /// started.
    #[test]
    fn a_sliver_of_an_era_is_read_with_the_era_before() {
        let shift = ERA_SHIFTS[4];
        let era = 1i64 << shift;
        let start = 1_633i64 << shift;
        let top = start + era / 6;
        let eras = Eras::reached(shift, top - 5);
        assert_eq!((eras.count, eras.start()), (2, start - era));
        assert_eq!(eras.query(""), "' 36/1633' | ' 36/1632'");
        assert_eq!(eras.query("s"), "' s36/1633' | ' s36/1632'");
        assert_eq!(eras.span_below(top), (top - start + era + 1) as i128);
        assert_eq!(Eras::reached(shift, start + era / 2).count, 1);
    }

    /// A level is chosen for what its collection reads below the time
    /// reached: 4 matches in 19 hours (counted as 5) put 80 in an era of
    /// level 5 (12.7 days). With three quarters of it left, 60; with a
    /// quarter left (read with the era before), 100, still within the
    /// room; with 45 % left, 116, so level 4.
    #[test]
    fn a_level_is_rated_for_the_eras_it_reads() {
        let era = |level: usize| 1i64 << ERA_SHIFTS[level];
        let year = Some(365 * 24 * 3_600_000_000i128);
        let mut seen = Seen::default();
        seen.add(4, era(4) as i128);
        let start = 1_633 * era(5);
        assert_eq!(seen.level(100, 300, year, start + era(5) * 3 / 4), 5);
        assert_eq!(seen.level(100, 300, year, start + era(5) / 4), 5);
        assert_eq!(seen.level(100, 300, year, start + era(5) * 45 / 100), 4);
    }

    /// A sliver and the era before count for the time they hold below the
    /// time reached, not as two whole eras: 4 matches in a day and a half
    /// of 19-hour eras (counted as 5) are 53 in 12.7 days, 68 in the 27 %
    /// of one left and the one before, so level 5; as two whole eras
    /// (107), it was level 4, and an uncommon word at 1,000,000 messages
    /// read three more 19-hour eras one by one before its 12.7-day era
    /// filled the page.
    #[test]
    fn a_sliver_counts_for_the_time_it_holds() {
        let era = |level: usize| 1i64 << ERA_SHIFTS[level];
        let year = Some(365 * 24 * 3_600_000_000i128);
        let mut seen = Seen::default();
        seen.add(4, (era(4) * 3 / 2) as i128);
        let start = 1_633 * era(5);
        let at = start + era(5) * 27 / 100;
        assert_eq!(Eras::reached(ERA_SHIFTS[5], at).count, 2);
        assert_eq!(seen.level(100, 300, year, at), 5);
    }

    /// A level whose eras would not fill the page at the rate the page met
    /// its rows gives way to the level above when that one's eras would
    /// hold at most half of `collect_max`: 4 matches and rows in 15 hours
    /// (counted as 5) are 6 rows in a 19-hour era where 22 are missing,
    /// and 133 matches in the 12.7-day eras, so one collection of those.
    #[test]
    fn a_level_that_cannot_fill_the_page_gives_way_to_the_one_above() {
        let era = |level: usize| 1i64 << ERA_SHIFTS[level];
        let year = Some(365 * 24 * 3_600_000_000i128);
        let hours_15 = 15 * 3_600_000_000i128;
        // The end of a 19-hour era, 5/16 into one of 12.7 days (read with
        // the one before: Eras::reached).
        let at = 1_633 * era(5) + era(5) * 5 / 16 - 1;
        assert_eq!(Eras::reached(ERA_SHIFTS[5], at).count, 2);
        let mut seen = Seen::default();
        seen.add(4, hours_15);
        seen.took(4);
        assert_eq!(seen.level(100, 300, year, at), 4);
        assert_eq!(seen.level_to_fill(100, 300, year, at, 22, Some(200)), 5);
        // Six rows are due in the 19-hour era: enough for five.
        assert_eq!(seen.level_to_fill(100, 300, year, at, 5, Some(200)), 4);
        // Not when the eras above would hold more than `most`.
        assert_eq!(seen.level_to_fill(100, 300, year, at, 22, Some(132)), 4);
        // Nor for documents that never go up (messages).
        assert_eq!(seen.level_to_fill(100, 300, year, at, 22, None), 4);
        // A list that took none of the matches (a mailbox of many): one row
        // due in a 19-hour era, so the level above even for five missing.
        let mut filtered = Seen::default();
        filtered.add(4, hours_15);
        assert_eq!(filtered.level_to_fill(100, 300, year, at, 5, Some(200)), 5);
        // The coarsest era level has none above it but the whole store,
        // which only the rate chooses.
        let mut sparse = Seen::default();
        sparse.add(1, 300 * 24 * 3_600_000_000);
        assert_eq!(sparse.level(100, 300, None, at), ERA_SHIFTS.len() - 1);
        assert_eq!(
            sparse.level_to_fill(100, 300, None, at, 26, Some(200)),
            ERA_SHIFTS.len() - 1
        );
    }

    /// Where fewer eras of the level below than [`FINER_MOST`] hold what the
    /// page misses, at the rate it took its rows, those are read instead
    /// of the level's: 5 rows in 19 hours (counted as 6) and 20 missing
    /// are 63 hours, four 19-hour eras, not the 12.7-day era (about 100
    /// matches, and a lookup of the word's whole posting list at 1,000,000
    /// messages).
    #[test]
    fn the_eras_below_that_hold_what_the_page_misses_are_read() {
        let era = |level: usize| 1i64 << ERA_SHIFTS[level];
        let start = 1_633 * era(5);
        // The end of the twelfth 19-hour era of a 12.7-day one.
        let at = start + 12 * era(4) - 1;
        let eras = Eras::reached(ERA_SHIFTS[5], at);
        assert_eq!(eras.count, 1);
        let mut seen = Seen::default();
        seen.add(5, era(4) as i128);
        seen.took(5);
        let aimed = seen.time_for(20);
        assert_eq!(aimed, 20 * era(4) as i128 / 6);
        let finer = eras.finer_for(5, at, Some(aimed));
        let newest = (start >> ERA_SHIFTS[4]) + 11;
        assert_eq!(
            finer,
            Eras {
                shift: ERA_SHIFTS[4],
                newest,
                count: 4
            }
        );
        assert!(finer.span_below(at) >= aimed);
        assert_eq!(
            finer.query("r"),
            format!(
                "' r36/{newest}' | ' r36/{}' | ' r36/{}' | ' r36/{}'",
                newest - 1,
                newest - 2,
                newest - 3
            )
        );
        // Twelve eras at most: 80 missing are 13.3 eras.
        assert_eq!(eras.finer_for(5, at, Some(seen.time_for(70))).count, 12);
        assert_eq!(eras.finer_for(5, at, Some(seen.time_for(80))), eras);
        // Rows the page did not take (a mailbox among many) are a rate of
        // one row in all the time seen: far more than twelve eras.
        let mut filtered = Seen::default();
        filtered.add(5, era(4) as i128);
        assert_eq!(eras.finer_for(5, at, Some(filtered.time_for(20))), eras);
        // None before any era was seen, nor below the finest level.
        assert_eq!(eras.finer_for(5, at, None), eras);
        let finest = Eras::reached(ERA_SHIFTS[0], at);
        assert_eq!(finest.finer_for(0, at, Some(1)), finest);
        // A sliver of an era of the level below is read with the one before.
        let early = start + 12 * era(4) + era(4) / 8;
        let eras = Eras::reached(ERA_SHIFTS[5], early);
        assert_eq!(eras.finer_for(5, early, Some(1)).count, 2);
    }

    /// The whole store holds both sides of the mail, where a message list's
    /// rate is of its own side: none in a 270th of the store is the whole
    /// store for threads (at most 270 due, room for 300), not for sent
    /// mail (room for 150), nor in the first era's statement.
    #[test]
    fn a_message_lists_whole_store_holds_both_sides() {
        let span = 32 * 3_600_000_000i128;
        let store = Some(270 * span);
        let at = (1i64 << 50) - 1;
        let threads = Documents::Threads.whole_room(400);
        let sent = Documents::Sent.whole_room(400);
        assert_eq!((threads, sent), (300, 150));
        assert_eq!(Documents::Received.whole_room(400), 150);
        let mut none = Seen::default();
        none.add(0, span);
        assert_eq!(none.level(100, threads, store, at), ERA_SHIFTS.len());
        assert!(none.level(100, sent, store, at) < ERA_SHIFTS.len());
        let rule = |room: i64| {
            let rule = Seen::default().whole_rule(room, span, Some(270 * span));
            (rule.counted as i128) * rule.store.unwrap() as i128 <= rule.room_span as i128
        };
        assert!(rule(threads));
        assert!(!rule(sent));
    }

    /// Every collection of a search is one statement text, whatever its
    /// page still misses, so one prepared statement (and its generic plan)
    /// serves them; a collection adds only what the page misses.
    #[test]
    fn a_search_collects_with_one_statement() {
        let everything = |_: &mut Sql| {};
        let list = thread_list(&everything, false);
        let words = vec!["word".to_string()];
        let era = Some(Eras::reached(ERA_SHIFTS[3], 1 << 40));
        let text = |hits: usize| {
            collect_statement(&list, &words, &found(hits).rest(), ask(era, 1000, 400))
                .text()
                .to_string()
        };
        assert_eq!(text(0), text(3));
        assert_eq!(text(3), text(25));

        let mut nearly = found(24);
        nearly.take((0..5).map(|k| (900 - k, format!("x{k}"))).collect());
        assert_eq!(nearly.hits.len(), 26);
        assert_eq!(nearly.hits[24..], [(900, "x0".into()), (899, "x1".into())]);
        assert!(nearly.full());
    }

    /// The next walk (twice the first) is taken when the rate met says it
    /// fills the page with half as many again to spare.
    #[test]
    fn a_walk_goes_on_where_its_rate_fills_the_page() {
        // 20 met: 40 more due in twice as many rows again, 6 missing.
        assert!(found(20).next_walk_fills());
        // 12 met: 24 due, 14 missing: half as many again and more.
        assert!(found(12).next_walk_fills());
        // 11 met: 22 due, 15 missing: short of half again.
        assert!(!found(11).next_walk_fills());
        // 6 due, 23 missing.
        assert!(!found(3).next_walk_fills());
        assert!(!found(0).next_walk_fills());
    }

    /// The calls of the matching functions (collections) a search of
    /// threads makes, and its page.
    async fn collections_of(
        db: &Db,
        word: &str,
        limit: i64,
        bounds: SearchBounds,
    ) -> (i64, Vec<String>) {
        let (calls, _, page) = search_counted(db, word, limit, bounds).await;
        (calls, page)
    }

    /// [`collections_of`], with the thread documents the search read
    /// (those the walk looked up and the matches collected).
    async fn search_counted(
        db: &Db,
        word: &str,
        limit: i64,
        bounds: SearchBounds,
    ) -> (i64, i64, Vec<String>) {
        let everything = |_: &mut Sql| {};
        let list = thread_list(&everything, false);
        let page = Page { limit, after: None };
        let mut tx = db.search_read(false).await.unwrap();
        sqlx::raw_sql("SET LOCAL track_functions = 'pl'")
            .execute(&mut *tx)
            .await
            .unwrap();
        // The counts of earlier transactions of the connection may not be
        // reported yet (at most once a second), so they are read before.
        let counted = async |tx: &mut sqlx::Transaction<'static, sqlx::Any>| {
            let r = &Sql::new(
                "SELECT (SELECT CAST(COALESCE(SUM(calls), 0) AS BIGINT) \
                 FROM pg_stat_xact_user_functions WHERE funcname = 'ph_thread_matches') AS n, \
                 (SELECT CAST(idx_tup_fetch AS BIGINT) FROM pg_stat_xact_user_tables \
                 WHERE relname = 'thread_search') AS fetched",
            )
            .fetch_all(&mut **tx)
            .await
            .unwrap()[0];
            (r.int("n").unwrap(), r.int("fetched").unwrap())
        };
        let before = counted(&mut tx).await;
        let hits = search(&mut tx, &list, &[word.to_string()], &page, bounds)
            .await
            .unwrap();
        let after = counted(&mut tx).await;
        tx.rollback().await.unwrap();
        (
            after.0 - before.0,
            after.1 - before.1,
            hits.iter().map(|r| r.text("id").unwrap()).collect(),
        )
    }

    /// The newest time of [`steady_store`]: the end of the twelfth 19-hour
    /// era of a 12.7-day era.
    const STEADY_TOP: i64 = (1_633i64 << ERA_SHIFTS[5]) + (12i64 << ERA_SHIFTS[4]) - 1;
    /// The time between two of its threads: 40 to a 19-hour era.
    const STEADY_STEP: i64 = (1i64 << ERA_SHIFTS[4]) / 40;

    /// 6,400 threads, one every [`STEADY_STEP`] from [`STEADY_TOP`] down;
    /// `steady` in one thread in ten, `quarter` in one in four.
    async fn steady_store(db: &Db) {
        let (top, step) = (STEADY_TOP, STEADY_STEP);
        threads_store(
            db,
            &format!(
                r#"
INSERT INTO threads (id, mailbox_id, mailbox, domain, subject, normalized_subject, snippet,
    folders, participants, message_count, unread_count, is_starred, has_attachments,
    last_message_at, created_at)
SELECT 'th' || lpad(i::text, 5, '0'), 'mb', 'a@example.com', 'example.com', 's', 's',
    '', ',inbox,', '', 1, 0, 0, 0, {top} - i::bigint * {step}, {top} - i::bigint * {step}
FROM generate_series(0, 6399) i;
INSERT INTO thread_search (thread_id, doc, last_at)
SELECT 'th' || lpad(i::text, 5, '0'), to_tsvector('simple', concat_ws(' ', 'every',
        CASE WHEN i % 10 = 3 THEN 'steady' END, CASE WHEN i % 4 = 1 THEN 'quarter' END)),
    {top} - i::bigint * {step}
FROM generate_series(0, 6399) i;
"#
            ),
        )
        .await;
    }

    /// The first page of 25 of `word` in a fresh [`steady_store`], walked
    /// 8 rows first, checked against a full sort: the calls of the
    /// matching function and the documents read ([`search_counted`]);
    /// none without PostgreSQL.
    async fn steady_search(word: &str) -> Option<(i64, i64)> {
        let db = crate::store::tests::fresh_postgres().await?;
        steady_store(&db).await;
        let bounds = SearchBounds {
            first_walk: 8,
            ..SearchBounds::default()
        };
        let (calls, fetched, page) = search_counted(&db, word, 25, bounds).await;
        assert_eq!(page, sorted(&db, word, None).await[..26]);
        Some((calls, fetched))
    }

    /// A word in one thread in four: its first 19-hour era holds too many
    /// for the coarser era to be collected with it (10, counted as 11, in
    /// 19 hours would put 121 in the eleven 19-hour eras of the 12.7-day
    /// era below it, over the room of 100), so after it the search reads
    /// the 19-hour eras that hold what its page misses.
    #[tokio::test]
    async fn a_search_reads_the_finer_eras_its_page_misses() {
        let Some((calls, fetched)) = steady_search("quarter").await else {
            return;
        };
        // The walk looked 8 documents up (2 matches); the first 19-hour
        // era held 10 (8 more rows); 8 rows in 19 hours (counted as 9)
        // put the 16 missing in under two eras, so two were read, 20
        // matches. The 12.7-day era would have been 120.
        assert_eq!((calls, fetched), (2, 8 + 10 + 20));
    }

    /// A word in one thread in ten: its first 19-hour era holds 4, fewer
    /// than the page misses, and 4 (counted as 5) in 19 hours put at most
    /// the room of 100 in the 12.7-day era that holds it, so that era is
    /// collected in the same statement (a second call of the matching
    /// function, no second statement) and fills the page. Collected
    /// separately, it took a statement after the first era's: two
    /// statements, 36 documents (the six 19-hour eras that held what the
    /// page missed).
    #[tokio::test]
    async fn a_sparse_era_brings_its_coarser_era_in_one_statement() {
        let Some((calls, fetched)) = steady_search("steady").await else {
            return;
        };
        // The walk's 8 documents, the 19-hour era's 4, the 12.7-day era's
        // 48 (those 4 among them).
        assert_eq!((calls, fetched), (2, 8 + 4 + 48));
    }

    /// The finer eras are read unless their documents are more than twice
    /// the word's postings: load 25's uncommon word on `/messages` (18
    /// matches seen in seven 19-hour eras, 1,000,000 messages over a
    /// year) reads the 12.7-day era, where nine 19-hour eras would read
    /// about 9,800 documents of received mail for its 2,500 postings; load
    /// 26's medium word, met 3 times in 14 hours (rated at about 5,000),
    /// reads six 19-hour eras (6,500 documents); so do a word ten times as
    /// dense as the first and threads, which keep no count of their
    /// documents.
    #[test]
    fn finer_eras_are_read_unless_they_hold_twice_the_words_postings() {
        let hour: i128 = 3_600_000_000;
        let top = 1_795_915_895_250_384;
        let store = Ends {
            oldest: Some(top - (8_760 * hour) as i64),
            newest: Some(top),
            messages: Some(1_000_000),
        };
        let finer = Eras {
            shift: ERA_SHIFTS[4],
            newest: 26_126,
            count: 9,
        };
        let seen = |matches: i64| Seen {
            matches,
            rows: matches,
            span: 7 << ERA_SHIFTS[4],
        };
        assert!(seen(18).finer_reads_more(finer, Some(store), top));
        assert!(!seen(180).finer_reads_more(finer, Some(store), top));
        let medium = Seen {
            matches: 3,
            rows: 3,
            span: 14 * hour,
        };
        let six = Eras { count: 6, ..finer };
        assert!(!medium.finer_reads_more(six, Some(store), top));
        let threads = Ends {
            messages: None,
            ..store
        };
        assert!(!seen(18).finer_reads_more(finer, Some(threads), top));
        assert!(!seen(18).finer_reads_more(finer, None, top));
    }

    /// With statistics, PostgreSQL rated the plan made for each run's values
    /// cheaper than a statement's generic plan, and planned a search's
    /// collections anew on every run; in a search read each statement
    /// keeps one generic plan from its first run on.
    #[tokio::test]
    async fn a_search_plans_its_statements_once_after_analyze() {
        let Some(db) = crate::store::tests::fresh_postgres().await else {
            return;
        };
        spread_store(&db).await;
        sqlx::raw_sql("ANALYZE threads; ANALYZE thread_search")
            .execute(db.writer())
            .await
            .unwrap();
        let everything = |_: &mut Sql| {};
        let list = thread_list(&everything, false);
        let words = vec!["rare".to_string()];
        let page = Page {
            limit: 25,
            after: None,
        };
        let bounds = SearchBounds {
            first_walk: 4,
            ..SearchBounds::default()
        };
        let mut tx = db.search_read(false).await.unwrap();
        for _ in 0..8 {
            let hits = search(&mut tx, &list, &words, &page, bounds).await.unwrap();
            assert_eq!(hits.len(), 3);
        }
        let plans = &Sql::new(
            "SELECT CAST(COUNT(*) AS BIGINT) AS statements, \
             CAST(COALESCE(SUM(generic_plans), 0) AS BIGINT) AS generic, \
             CAST(COALESCE(SUM(custom_plans), 0) AS BIGINT) AS custom \
             FROM pg_prepared_statements WHERE statement LIKE '%ph_thread_matches%' \
             OR statement LIKE '%row_number() OVER%'",
        )
        .fetch_all(&mut *tx)
        .await
        .unwrap()[0];
        tx.rollback().await.unwrap();
        // The walk and at least one collection, run eight times each.
        assert!(plans.int("statements").unwrap() >= 2);
        assert!(plans.int("generic").unwrap() >= 16);
        assert_eq!(plans.int("custom").unwrap(), 0);
    }

    /// A word the first walk met often enough is walked on, not collected:
    /// the page is the full sort's, and no matching function was called.
    #[tokio::test]
    async fn a_dense_word_is_walked_on_not_collected() {
        let Some(db) = crate::store::tests::fresh_postgres().await else {
            return;
        };
        spread_store(&db).await;
        let walking = |first_walk| SearchBounds {
            first_walk,
            ..SearchBounds::default()
        };
        let (calls, page) = collections_of(&db, "half", 14, walking(20)).await;
        assert_eq!(calls, 0);
        assert_eq!(page, sorted(&db, "half", None).await[..15]);
        // Met 12 times in the newest 24 threads (every other one), 14
        // missing: walked on twice as far, where as far again would leave
        // the page two short.
        let (calls, page) = collections_of(&db, "half", 25, walking(24)).await;
        assert_eq!(calls, 0);
        assert_eq!(page, sorted(&db, "half", None).await[..26]);
        // Met 8 times in the newest 16, 18 missing: collected. (A first
        // walk of twice its rows, met 16 times, would have walked on.)
        let (calls, page) = collections_of(&db, "half", 25, walking(16)).await;
        assert!(calls >= 1);
        assert_eq!(page, sorted(&db, "half", None).await[..26]);
        // A word too sparse for it is collected.
        let (calls, page) = collections_of(&db, "tenth", 14, walking(20)).await;
        assert!(calls >= 1);
        assert_eq!(page, sorted(&db, "tenth", None).await[..15]);
    }

    /// Eras holding at least half of the time back to the oldest document
    /// are the whole store, read by the words alone; not where it is
    /// unknown, nor once the whole store was found too full (each would
    /// read it again and again).
    #[test]
    fn eras_holding_half_the_store_are_the_whole_store() {
        let shift = ERA_SHIFTS[6];
        let quarter = 1i64 << (shift - 2);
        // Three quarters into era 100: that era alone.
        let at = (100i64 << shift) + 3 * quarter;
        let eras = Eras::reached(shift, at);
        assert_eq!(eras.count, 1);
        assert_eq!(eras_or_store(6, at, None), Some(eras));
        assert_eq!(eras_or_store(6, at, Some(at)), None);
        assert_eq!(eras_or_store(6, at, Some(eras.start())), None);
        // Three quarters below the era's start: half of the time.
        assert_eq!(eras_or_store(6, at, Some(eras.start() - 3 * quarter)), None);
        let older = eras.start() - 3 * quarter - 1;
        assert_eq!(eras_or_store(6, at, Some(older)), Some(eras));
        assert_eq!(eras_or_store(ERA_SHIFTS.len(), at, None), None);
        // A sliver is read with the era before it: from that one's start.
        let sliver = (100i64 << shift) + 5;
        let two = Eras::reached(shift, sliver);
        assert_eq!(two.count, 2);
        let from = 99i64 << shift;
        assert_eq!(eras_or_store(6, sliver, Some(from - (sliver - from))), None);
        let older = from - (sliver - from) - 1;
        assert_eq!(eras_or_store(6, sliver, Some(older)), Some(two));

        // Closed while in an era found too full (the store holds no fewer),
        // and for good once the store itself was.
        let mut caps = Caps::default();
        assert!(caps.store_open(at));
        caps.add(3, at);
        assert!(!caps.store_open(at));
        let below = ((at >> ERA_SHIFTS[3]) << ERA_SHIFTS[3]) - 1;
        assert!(caps.store_open(below));
        caps.add(ERA_SHIFTS.len(), below);
        assert!(!caps.store_open(below - (1 << 50)));
    }

    /// A level that overflowed stays closed, with every coarser one, while
    /// the search is in that era; the whole store, for good.
    #[test]
    fn an_overflowed_era_closes_its_level_until_left() {
        let shift = ERA_SHIFTS[3];
        let at = 5i64 << shift;
        let mut caps = Caps::default();
        assert_eq!(caps.top(at), ERA_SHIFTS.len());
        caps.add(3, at + 7);
        assert_eq!(caps.top(at), 2);
        assert_eq!(caps.top(at - 1), ERA_SHIFTS.len());
        caps.add(ERA_SHIFTS.len(), at);
        assert_eq!(caps.top(at - 1), ERA_SHIFTS.len() - 1);
    }

    /// What `explain` (an `EXPLAIN …`) prints, as one text.
    async fn explained(conn: &mut AnyConnection, explain: &str) -> String {
        Sql::new(explain)
            .fetch_all(conn)
            .await
            .unwrap()
            .iter()
            .map(|r| r.text("QUERY PLAN").unwrap())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The plan of a list statement read in `db.list_read(narrowed)`, with
    /// parallel workers as cheap as they can be.
    async fn plan(db: &Db, narrowed: bool, statement: &str) -> String {
        let mut tx = db.list_read(narrowed).await.unwrap();
        sqlx::raw_sql(
            "SET LOCAL parallel_setup_cost = 0; SET LOCAL parallel_tuple_cost = 0; \
             SET LOCAL min_parallel_index_scan_size = 0; SET LOCAL min_parallel_table_scan_size = 0",
        )
        .execute(&mut *tx)
        .await
        .unwrap();
        let plan = explained(&mut tx, &format!("EXPLAIN {statement}")).await;
        tx.rollback().await.unwrap();
        plan
    }

    /// Without statistics (as here) the planner takes a folder for a rare
    /// condition and would read every thread and sort; a list read walks
    /// the list's index in order and stops at the page. A narrowed list
    /// (a label's threads) is read by the label's index instead: walked in
    /// order it would pass every thread of the store.
    #[tokio::test]
    async fn a_list_read_walks_in_order_unless_narrowed() {
        let Some(db) = crate::store::tests::fresh_postgres().await else {
            return;
        };
        spread_store(&db).await;
        sqlx::raw_sql(
            "INSERT INTO thread_labels (thread_id, label_id) \
             SELECT id, 'lbl_rare' FROM threads ORDER BY id LIMIT 2",
        )
        .execute(db.reader())
        .await
        .unwrap();
        let order = "ORDER BY t.last_message_at DESC, t.id DESC LIMIT 26";
        let folder =
            format!("SELECT t.id FROM threads t WHERE t.folders LIKE '%,archive,%' {order}");
        let walked = plan(&db, false, &folder).await;
        assert!(
            walked.contains("threads_recent")
                && !walked.contains("Sort")
                && !walked.contains("Gather"),
            "{walked}"
        );
        let labelled = format!(
            "SELECT t.id FROM threads t WHERE EXISTS (SELECT 1 FROM thread_labels tl \
             WHERE tl.thread_id = t.id AND tl.label_id = 'lbl_rare') {order}"
        );
        let narrowed = plan(&db, true, &labelled).await;
        assert!(
            narrowed.contains("thread_labels_label") && !narrowed.contains("threads_recent"),
            "{narrowed}"
        );
        let walked = plan(&db, false, &labelled).await;
        assert!(walked.contains("threads_recent"), "{walked}");
    }

    /// What each expression of `select` is planned as.
    async fn planned_output(db: &Db, select: &str) -> String {
        let mut conn = db.reader().acquire().await.unwrap();
        explained(&mut conn, &format!("EXPLAIN VERBOSE {select}")).await
    }

    /// The functions of the documents' indexes and of a thread's document
    /// are inlined (each statement that wrote a message parsed and planned
    /// them anew when they were not), the documents' indexes still serve
    /// the lookups written with them, and a store migrated before they
    /// could be inlined gets the inlinable forms.
    #[tokio::test]
    async fn the_documents_functions_are_inlined() {
        let Some(db) = crate::store::tests::fresh_postgres().await else {
            return;
        };
        let inlined = |what: &str, output: &str| {
            assert!(
                output.contains("Output:") && !output.contains("ph_"),
                "{what}: {output}"
            );
        };
        let check = |db: Db| async move {
            let threads = planned_output(
                &db,
                "SELECT ph_eras(last_at), ph_thread_doc(doc, doc) FROM thread_search",
            )
            .await;
            inlined("thread documents", &threads);
            let messages =
                planned_output(&db, &format!("SELECT {MESSAGE_ERAS} FROM messages")).await;
            inlined("messages", &messages);
            let mut tx = db.reader().begin().await.unwrap();
            sqlx::raw_sql("SET LOCAL enable_seqscan = off")
                .execute(&mut *tx)
                .await
                .unwrap();
            for (lookup, index) in [
                (
                    "SELECT thread_id FROM thread_search WHERE (doc || ph_eras(last_at)) @@ 'a'::tsquery"
                        .to_string(),
                    "thread_search_eras",
                ),
                (
                    format!("SELECT id FROM messages WHERE (search || {MESSAGE_ERAS}) @@ 'a'::tsquery"),
                    "messages_search_sides",
                ),
            ] {
                let plan = explained(&mut tx, &format!("EXPLAIN {lookup}")).await;
                assert!(plan.contains(index), "{plan}");
            }
            tx.rollback().await.unwrap();
            db
        };
        let db = check(db).await;
        // The forms migration 17 made (`text || bigint` is STABLE, and so
        // is `pg_column_size`): not inlined.
        sqlx::raw_sql(
            "CREATE OR REPLACE FUNCTION ph_eras(at BIGINT) RETURNS tsvector LANGUAGE sql \
             IMMUTABLE AS $$ SELECT array_to_tsvector(ARRAY[' 20/' || (at >> 20)]) $$; \
             CREATE OR REPLACE FUNCTION ph_thread_doc(doc tsvector, add tsvector) \
             RETURNS tsvector LANGUAGE sql IMMUTABLE AS $$ SELECT strip(doc) || \
             strip(add) WHERE pg_column_size(doc) > 0 $$; \
             DELETE FROM schema_migrations WHERE version = 18",
        )
        .execute(db.writer())
        .await
        .unwrap();
        // A connection that first reads the index with the old body keeps
        // that expression through the migration, unless it is told.
        let name = Sql::new("SELECT CAST(current_database() AS TEXT) AS name")
            .fetch_one(db.reader())
            .await
            .unwrap()
            .text("name")
            .unwrap();
        let mut url =
            url::Url::parse(&std::env::var("PIGEONHOLE_TEST_POSTGRES_URL").unwrap()).unwrap();
        url.set_path(&format!("/{name}"));
        let mut stale = {
            use sqlx::Connection;
            AnyConnection::connect(url.as_str()).await.unwrap()
        };
        let old = explained(
            &mut stale,
            "EXPLAIN VERBOSE SELECT ph_eras(last_at) FROM thread_search",
        )
        .await;
        assert!(old.contains("ph_eras("), "{old}");
        crate::store::tests::migrate(&db).await;
        sqlx::raw_sql("SET enable_seqscan = off")
            .execute(&mut stale)
            .await
            .unwrap();
        let plan = explained(
            &mut stale,
            "EXPLAIN SELECT thread_id FROM thread_search WHERE (doc || ph_eras(last_at)) @@ 'a'::tsquery",
        )
        .await;
        assert!(plan.contains("thread_search_eras"), "{plan}");
        check(db).await;
    }

    /// The matching functions are PL/pgSQL with the generic plan forced,
    /// so a connection plans each once (an SQL function planned its query
    /// on every call), and that generic plan, with the words and the limit
    /// unknown, reads the documents' index.
    #[tokio::test]
    async fn the_matching_functions_keep_one_plan_on_the_index() {
        let Some(db) = crate::store::tests::fresh_postgres().await else {
            return;
        };
        for name in ["ph_thread_matches", "ph_message_matches"] {
            let row = Sql::new(
                "SELECT CAST(l.lanname AS TEXT) AS language, array_to_string(p.proconfig, ',') AS settings \
                 FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang WHERE p.proname = ",
            )
            .bind(name)
            .fetch_one(db.reader())
            .await
            .unwrap();
            assert_eq!(row.text("language").unwrap(), "plpgsql", "{name}");
            let settings = row.text("settings").unwrap();
            for setting in [
                "plan_cache_mode=force_generic_plan",
                "enable_seqscan=off",
                "enable_indexscan=off",
            ] {
                assert!(settings.contains(setting), "{name}: {settings}");
            }
        }
        let mut tx = db.reader().begin().await.unwrap();
        sqlx::raw_sql(
            "SET LOCAL enable_seqscan = off; SET LOCAL enable_indexscan = off; \
             SET LOCAL plan_cache_mode = force_generic_plan",
        )
        .execute(&mut *tx)
        .await
        .unwrap();
        for (name, query, index) in [
            ("threads", thread_matches("$1", "$2"), "thread_search_eras"),
            (
                "messages",
                message_matches("$1", "$2", true),
                "messages_search_sides",
            ),
        ] {
            sqlx::raw_sql(&format!("PREPARE {name}(tsquery, BIGINT) AS {query}"))
                .execute(&mut *tx)
                .await
                .unwrap();
            let plan = explained(
                &mut tx,
                &format!("EXPLAIN EXECUTE {name}(plainto_tsquery('simple', 'a'), 401)"),
            )
            .await;
            assert!(plan.contains(index) && plan.contains("$1"), "{plan}");
            sqlx::raw_sql(&format!("DEALLOCATE {name}"))
                .execute(&mut *tx)
                .await
                .unwrap();
        }
        tx.rollback().await.unwrap();
    }

    /// `count` messages with the word `words`, a millisecond apart, in the
    /// threads of [`spread_store`]; `direction` and `is_draft` are SQL
    /// expressions of `i`, the message's number.
    async fn messages_store(db: &Db, count: i64, direction: &str, is_draft: &str) {
        sqlx::raw_sql(&format!(
            r#"
INSERT INTO messages (id, thread_id, mailbox_id, mailbox, domain, direction, is_draft, folder,
    message_id, from_address, to_addresses, cc_addresses, bcc_addresses, subject, text_body,
    html_body, search_body, headers, status, open_count, is_read, is_starred, has_attachments,
    created_at, received_at)
SELECT 'msg' || i, 'th' || lpad((i % 300 + 1)::text, 5, '0'), 'mb0', 'a@example.com',
    'example.com', direction, is_draft, 'inbox', '<' || i || '@example.com>', 'a@example.com',
    '', '', '', 's', 'words', '', 'words', '', 'sent', 0, 0, 0, 0, 1790000000000000 - i * 1000,
    CASE WHEN direction = 'inbound' THEN 1790000000000000 - i * 1000 END
FROM (SELECT i, {direction} AS direction, {is_draft} AS is_draft
    FROM generate_series(1, {count}) i) g;
"#
        ))
        .execute(db.writer())
        .await
        .unwrap();
    }

    /// [`spread_store`] and 3,000 messages with the word `words`, every
    /// other one sent, the others received.
    async fn both_sides_store(db: &Db) {
        spread_store(db).await;
        let direction = "CASE WHEN i % 2 = 0 THEN 'outbound' ELSE 'inbound' END";
        messages_store(db, 3000, direction, "0").await;
    }

    fn sent_mail(sql: &mut Sql) {
        sql.push(" AND m.direction = 'outbound' AND m.is_draft = 0");
    }

    fn received_mail(sql: &mut Sql) {
        sql.push(" AND m.direction <> 'outbound'");
    }

    /// The list of one side's messages, as `message_lists` makes it.
    fn message_list(documents: Documents) -> SearchedList<'static> {
        let filters: &'static (dyn Fn(&mut Sql) + Sync) = match documents {
            Documents::Received => &received_mail,
            _ => &sent_mail,
        };
        SearchedList {
            documents,
            columns: crate::core::messages::SUMMARY_COLUMNS,
            filters,
            narrowed: false,
        }
    }

    /// The documents' ends are index probes, narrowed or not, without
    /// statistics (as here) or with: never a scan of every row and a sort.
    #[tokio::test]
    async fn the_documents_ends_are_index_probes() {
        let Some(db) = crate::store::tests::fresh_postgres().await else {
            return;
        };
        both_sides_store(&db).await;
        for documents in [Documents::Threads, Documents::Sent, Documents::Received] {
            let statement = format!("SELECT {}", documents.ends());
            for analyzed in [false, true] {
                if analyzed {
                    sqlx::raw_sql("ANALYZE threads; ANALYZE messages")
                        .execute(db.writer())
                        .await
                        .unwrap();
                }
                for narrowed in [false, true] {
                    let plan = plan(&db, narrowed, &statement).await;
                    let scans: Vec<&str> = plan.lines().filter(|l| l.contains(" Scan")).collect();
                    assert!(
                        scans
                            .iter()
                            .all(|l| l.contains("Index") && !l.contains("Bitmap"))
                            && scans.len() == plan.matches("Limit").count()
                            && !plan.contains("Sort"),
                        "{documents:?} analyzed={analyzed} narrowed={narrowed}\n{plan}"
                    );
                }
            }
        }
        // The first era collected reads them.
        let everything = |_: &mut Sql| {};
        let threads = thread_list(&everything, false);
        let words = vec!["words".to_string()];
        let era = Some(Eras::reached(ERA_SHIFTS[0], 1_790_000_000_000_000));
        let page = Page {
            limit: 25,
            after: None,
        };
        let mut tx = db.search_read(false).await.unwrap();
        let mut ends_of = async |list: &SearchedList<'_>| {
            let ends = Ask {
                with_ends: true,
                ..ask(era, 0, 400)
            };
            let collected = collect(&mut tx, list, &words, &page, ends).await.unwrap();
            collected.ends.unwrap()
        };
        let threads_ends = ends_of(&threads).await;
        let span = threads_ends.span(0);
        // Each side's own: sent mail is the even messages (2 to 3,000),
        // received the odd ones (1 to 2,999), a millisecond apart.
        let sent = ends_of(&message_list(Documents::Sent)).await;
        let received = ends_of(&message_list(Documents::Received)).await;
        tx.rollback().await.unwrap();
        assert_eq!((sent.span(0), received.span(0)), (2_998_000, 2_998_000));
        // The messages of both sides are counted for either; threads keep no count.
        assert_eq!(
            (sent.messages, received.messages, threads_ends.messages),
            (Some(3000), Some(3000), None)
        );
        let ends =
            Sql::new("SELECT MIN(last_message_at) AS lo, MAX(last_message_at) AS hi FROM threads")
                .fetch_one(db.writer())
                .await
                .unwrap();
        let (lo, hi) = (ends.int("lo").unwrap(), ends.int("hi").unwrap());
        assert_eq!(span, (hi - lo) as i128);
    }

    /// A collection of sent or received mail reads the matches of its own
    /// side only in eras, and a draft's in neither: a list of one side needs
    /// no more eras for a page than the thread list. The whole store is
    /// read by the words alone and its page is the side's: only the side's
    /// matches are joined to their rows.
    #[tokio::test]
    async fn a_collection_reads_the_matches_of_its_side() {
        let Some(db) = crate::store::tests::fresh_postgres().await else {
            return;
        };
        spread_store(&db).await;
        // A third each: sent, received, drafts.
        let direction = "CASE WHEN i % 3 = 1 THEN 'inbound' ELSE 'outbound' END";
        messages_store(&db, 300, direction, "CASE WHEN i % 3 = 2 THEN 1 ELSE 0 END").await;
        let words = vec!["words".to_string()];
        let page = Page {
            limit: 400,
            after: None,
        };
        let top = 1_790_000_000_000_000;
        let coarsest = Some(Eras::reached(ERA_SHIFTS[ERA_SHIFTS.len() - 1], top));
        let mut tx = db.search_read(false).await.unwrap();
        for documents in [Documents::Sent, Documents::Received] {
            for (era, matches) in [(coarsest, 100), (None, 300)] {
                let list = message_list(documents);
                let collected = collect(&mut tx, &list, &words, &page, ask(era, top, 1000))
                    .await
                    .unwrap();
                assert_eq!(
                    (collected.matches, collected.page_rows.len()),
                    (matches, 100),
                    "{documents:?} {era:?}"
                );
                // Only the side's matches are joined to their rows: 100
                // probes by key, where the whole store holds 300.
                let statement = collect_statement(&list, &words, &page, ask(era, top, 1000));
                let plan = plan_as_run(&mut tx, &statement).await;
                let probe = plan
                    .iter()
                    .find(|l| l.contains(" on messages x"))
                    .unwrap_or_else(|| panic!("{plan:#?}"));
                assert!(
                    probe.contains("loops=100)"),
                    "{documents:?} {era:?}: {probe}"
                );
            }
        }
        tx.rollback().await.unwrap();
    }

    /// The plan of `statement` as run (`EXPLAIN ANALYZE`), a line each.
    async fn plan_as_run(conn: &mut AnyConnection, statement: &Sql) -> Vec<String> {
        statement
            .prefixed("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) ")
            .fetch_all(conn)
            .await
            .unwrap()
            .iter()
            .map(|r| r.text("QUERY PLAN").unwrap())
            .collect()
    }

    /// A walk of `list`'s first 50 rows for 8 hits of `word`: its plan as
    /// run and the numbers of the rows it returned.
    async fn walked(db: &Db, list: &SearchedList<'_>, word: &str) -> (Vec<String>, Vec<i64>) {
        let walk = walk(list, &[word.to_string()], None, 50, 8);
        let mut tx = db.search_read(false).await.unwrap();
        let plan = plan_as_run(&mut tx, &walk).await;
        let rows = walk.fetch_all(&mut *tx).await.unwrap();
        tx.rollback().await.unwrap();
        (plan, rows.iter().map(|r| r.int("n").unwrap()).collect())
    }

    /// A walk stops once its page is full: a word in every document looks
    /// up the documents of the rows the page needs (and one more, read
    /// ahead), not the whole chunk; a word in none looks up the chunk and
    /// returns its first and last rows, which say where the walk was.
    #[tokio::test]
    async fn a_walk_stops_at_a_full_page() {
        let Some(db) = crate::store::tests::fresh_postgres().await else {
            return;
        };
        spread_store(&db).await;
        let everything = |_: &mut Sql| {};
        let list = thread_list(&everything, false);
        // The document lookups of a walk of 50 rows for 8 hits.
        let lookups = |word: &'static str| {
            let (db, list) = (&db, &list);
            async move {
                let (plan, numbers) = walked(db, list, word).await;
                // One aggregate per row looked up, whichever scan it runs.
                let probe = plan
                    .iter()
                    .find(|l| l.contains("Aggregate"))
                    .unwrap_or_else(|| panic!("{plan:#?}"));
                let loops: i64 = probe
                    .rsplit("loops=")
                    .next()
                    .and_then(|n| n.trim_end_matches(')').parse().ok())
                    .unwrap_or_else(|| panic!("{probe}"));
                (loops, numbers)
            }
        };
        // Room for 8 hits and the first and last rows: 10, and the one
        // the window reads ahead.
        let (loops, numbers) = lookups("every").await;
        assert_eq!(loops, 11);
        assert_eq!(numbers, (1..=10).collect::<Vec<_>>());
        let (loops, numbers) = lookups("nowhere").await;
        assert_eq!(loops, 50);
        assert_eq!(numbers, [1, 50]);
    }

    /// A message walk checks each row's own document where it reads the
    /// row: one scan of `messages` (no lookup by key per row), checking
    /// only the rows the page needs (and the one read ahead), or the chunk.
    #[tokio::test]
    async fn a_message_walk_checks_its_rows_in_place() {
        let Some(db) = crate::store::tests::fresh_postgres().await else {
            return;
        };
        both_sides_store(&db).await;
        let list = message_list(Documents::Received);
        for (word, scanned, numbers) in [
            ("words", 11, (1..=10).collect::<Vec<i64>>()),
            ("nowhere", 50, vec![1, 50]),
        ] {
            let (plan, walked) = walked(&db, &list, word).await;
            let plan = plan.join("\n");
            assert_eq!(plan.matches(" on messages").count(), 1, "{plan}");
            let scan = plan
                .lines()
                .find(|l| l.contains(" on messages"))
                .unwrap_or_default();
            assert!(scan.contains(&format!("rows={scanned} ")), "{plan}");
            assert_eq!(walked, numbers, "{word}");
        }
    }

    /// `whole_rule` is `Seen::level`'s rule: eras holding as many matches
    /// as it admits are followed by the whole store, one more is not.
    #[test]
    fn the_whole_store_follows_eras_that_meet_its_rule() {
        let at = (1i64 << 50) - 1;
        let day = 24 * 3_600_000_000i128;
        for (matches, span) in [(0, 1), (0, day), (3, 20 * day), (40, 30 * day)] {
            for store in [1, day, 365 * day, 3650 * day] {
                for era_span in [1, day / 24, 13 * day, 200 * day] {
                    let mut seen = Seen::default();
                    seen.add(matches, span);
                    let rule = seen.whole_rule(300, era_span, Some(store));
                    assert_eq!(rule.store, Some(store as i64));
                    // The statement's check ([`collect_statement`]).
                    let meets =
                        |held: i64| (held + rule.counted) as i128 * store <= rule.room_span as i128;
                    let level_after = |held: i64| {
                        let mut after = Seen::default();
                        after.add(matches, span);
                        after.add(held, era_span);
                        after.level(100, 300, Some(store), at)
                    };
                    let case = format!("{matches} in {span}, store {store}, era {era_span}");
                    for held in 0..400 {
                        assert_eq!(
                            meets(held),
                            level_after(held) == ERA_SHIFTS.len(),
                            "{case}, {held} held"
                        );
                    }
                }
            }
        }
    }

    /// An era collection asked to collect the whole store when the eras
    /// meet its rule does so in the same statement: its page is then the
    /// store's; if the store holds more than `max`, the era's page is kept
    /// and the count says so; asked for never, or by a rule the eras do not
    /// meet, the store is not read. The first collection checks the rule
    /// on the documents' ends it reads.
    #[tokio::test]
    async fn the_whole_store_comes_with_an_era_that_meets_its_rule() {
        let Some(db) = crate::store::tests::fresh_postgres().await else {
            return;
        };
        spread_store(&db).await;
        let everything = |_: &mut Sql| {};
        let list = thread_list(&everything, false);
        // The era of the newest third of the store's threads (the ones 50 ms
        // apart), at the finest level: a few of each word, none "rare".
        let newest = 1_790_000_000_000_000 + 49 * 1000;
        let era = Some(Eras::reached(ERA_SHIFTS[0], newest));
        let run = async |word: &str, whole: Option<WholeRule>, max: i64| {
            let with_store = Ask {
                with_ends: whole.is_some_and(|rule| rule.store.is_none()),
                whole,
                ..ask(era, newest, max)
            };
            let got = first_page_collected(&db, &list, word, with_store).await;
            let ids: Vec<String> = got
                .page_rows
                .iter()
                .map(|r| r.text("id").unwrap())
                .collect();
            (got.matches, got.whole_matches, ids)
        };
        // The eras' matches (with one more) times the store's span, at most
        // `room_span`.
        let rule = |counted: i64, room_span: i64, store: Option<i64>| {
            Some(WholeRule {
                counted,
                room_span,
                store,
            })
        };
        let rare = sorted(&db, "rare", None).await;
        assert_eq!(rare.len(), 3);
        let (in_era, whole, ids) = run("rare", rule(1, 10, Some(1)), 400).await;
        assert!(in_era < 3);
        assert_eq!(whole, Some(3));
        assert_eq!(ids, rare);
        let (in_era, whole, ids) = run("rare", None, 400).await;
        assert_eq!((whole, ids.len() as i64), (None, in_era));
        // More than `max` in the store: the era's page, the store's count.
        let (in_era, whole, ids) = run("tenth", rule(1, 10_000, Some(1)), 20).await;
        assert_eq!(whole, Some(21));
        assert_eq!(ids.len() as i64, in_era);
        // Eras holding more than the rule admits: not read.
        let (_, whole, _) = run("tenth", rule(1, in_era, Some(1)), 400).await;
        assert_eq!(whole, None);
        let (_, whole, _) = run("tenth", rule(1, in_era + 1, Some(1)), 400).await;
        assert_eq!(whole, Some(30));
        // The first collection: the store's span is its documents' ends
        // (`Ends::span`), read in the same statement.
        let ends =
            Sql::new("SELECT MIN(last_message_at) AS lo, MAX(last_message_at) AS hi FROM threads")
                .fetch_one(db.writer())
                .await
                .unwrap();
        let span = ends.int("hi").unwrap() - ends.int("lo").unwrap();
        let (in_era, _, _) = run("rare", None, 400).await;
        let room_span = (in_era + 1) * span;
        let (_, whole, ids) = run("rare", rule(1, room_span, None), 400).await;
        assert_eq!((whole, ids), (Some(3), rare));
        let (_, whole, _) = run("rare", rule(1, room_span - 1, None), 400).await;
        assert_eq!(whole, None);
    }

    /// A collection's coarser eras ([`TierRule`]) are collected in the same
    /// statement when its own hold fewer matches than the page misses and
    /// the rate they make admits the coarser ones: the page and where the
    /// list goes on are then theirs. Past `max` the eras' own page is kept
    /// and the count says so; the whole store after them comes by its own
    /// rule on their matches.
    #[tokio::test]
    async fn the_coarser_eras_come_with_eras_too_sparse_for_the_page() {
        let Some(db) = crate::store::tests::fresh_postgres().await else {
            return;
        };
        steady_store(&db).await;
        let everything = |_: &mut Sql| {};
        let list = thread_list(&everything, false);
        let (top, step) = (STEADY_TOP, STEADY_STEP);
        // The 19-hour era of the newest 40 threads (4 of `steady`), and the
        // 12.7-day era of the newest 480 (48).
        let era = Eras::reached(ERA_SHIFTS[4], top);
        let coarser = Eras::reached(ERA_SHIFTS[5], top);
        assert_eq!((era.count, coarser.count), (1, 1));
        let time = era.start() - coarser.start();
        let tier = |missing: i64, room_span: i64, whole: Option<WholeRule>| TierRule {
            eras: coarser,
            missing,
            counted: 1,
            time,
            room_span,
            whole,
            few: None,
        };
        let run = async |tier: TierRule, whole: Option<WholeRule>, max: i64| {
            let asked = Ask {
                tier: Some(tier),
                whole,
                ..ask(Some(era), top, max)
            };
            let got = first_page_collected(&db, &list, "steady", asked).await;
            let ids: Vec<String> = got
                .page_rows
                .iter()
                .map(|r| r.text("id").unwrap())
                .collect();
            (got.matches, got.tier, got.next_at, got.whole_matches, ids)
        };
        let steady = sorted(&db, "steady", None).await;
        // The time of the first thread below an era's start.
        let first_below = |start: i64| Some(top - ((top - start) / step + 1) * step);
        let below_era = first_below(era.start());
        let below_coarser = first_below(coarser.start());
        // 4 in the era, counted as 5, times the coarser era's time: the
        // most room_span admits.
        let admits = 5 * time;
        let (in_era, got, next_at, _, ids) = run(tier(26, admits, None), None, 400).await;
        assert_eq!(in_era, 4);
        let both = TierMatches {
            matches: 48,
            below_top: 48,
        };
        assert_eq!((got, next_at), (Some(both), below_coarser));
        assert_eq!(ids, steady[..26]);
        // A rate one short of it, or eras holding as many as the page
        // misses: the era's own page.
        for closed in [tier(26, admits - 1, None), tier(4, admits, None)] {
            let (_, got, next_at, _, ids) = run(closed, None, 400).await;
            assert_eq!((got, next_at), (None, below_era));
            assert_eq!(ids, steady[..4]);
        }
        // More than `max` in the coarser era: the era's page, their count.
        let (_, got, next_at, _, ids) = run(tier(26, admits, None), None, 40).await;
        assert_eq!(got.map(|t| t.matches), Some(41));
        assert_eq!((next_at, ids), (below_era, steady[..4].to_vec()));
        // The whole store after the coarser era, by its rule on the 48
        // (counted with one more) and a store's span of 1; the era's own
        // rule is not met.
        let rule = |counted: i64, room_span: i64| {
            Some(WholeRule {
                counted,
                room_span,
                store: Some(1),
            })
        };
        let never = rule(1, 1);
        let (_, _, _, whole, ids) = run(tier(26, admits, rule(1, 49)), never, 700).await;
        assert_eq!((whole, ids), (Some(640), steady[..26].to_vec()));
        let (_, got, _, whole, _) = run(tier(26, admits, rule(1, 48)), never, 700).await;
        assert_eq!((got, whole), (Some(both), None));
        // Past `max` in the whole store: the coarser era's page.
        let (_, got, next_at, whole, ids) = run(tier(26, admits, rule(1, 49)), never, 600).await;
        assert_eq!(
            (got, whole, next_at),
            (Some(both), Some(601), below_coarser)
        );
        assert_eq!(ids, steady[..26]);
    }

    /// The coarser eras come with a message list's first era for a word
    /// rated at a quarter of a level's room (25 in them), or at the room
    /// where its postings are few; with a thread list's for one rated at
    /// the room (100): one match in the newest 19-hour era (counted as 2)
    /// puts 22 in the eleven 19-hour eras of the 12.7-day era below it,
    /// four (counted as 5) put 55, nine (10) 110.
    #[test]
    fn a_message_lists_coarser_eras_come_for_a_quarter_of_the_room_or_few_postings() {
        let top = STEADY_TOP;
        let era = Eras::reached(ERA_SHIFTS[4], top);
        let hour: i128 = 3_600_000_000;
        // The statement's check ([`collect_statement`]), a store of
        // `store` spanning a year or ten times less.
        let brings = |documents: Documents, held: i64, store: i128| {
            let room = documents.coarser_room(100);
            let seen = Seen::default();
            let rule = seen
                .tier_rule(era, top, top, ERA_SHIFTS.len(), 26, room.room)
                .unwrap();
            let count = (held + rule.counted) as i128;
            count * rule.time as i128 <= rule.room_span as i128
                || room.few.is_some_and(|few| {
                    let few = seen.few_rule(era, top, few, Some(store));
                    count * rule.time as i128 <= few.room_span as i128
                        && count * 2 * few.store.unwrap() as i128 <= few.postings_span as i128
                })
        };
        let (year, month) = (8_760 * hour, 876 * hour);
        for documents in [Documents::Sent, Documents::Received] {
            // Rated at 22 (quarter of the room) whatever its postings.
            assert!(brings(documents, 1, year));
            // Rated at 55: with a year's store, about 4,600 postings (5
            // in 19 hours, twice over 8,760); with a tenth, 460.
            assert!(!brings(documents, 4, year));
            assert!(brings(documents, 4, month));
            assert!(!brings(documents, 9, month));
        }
        assert!(brings(Documents::Threads, 4, year));
        assert!(!brings(Documents::Threads, 9, month));
    }

    /// Received mail spread as [`steady_store`]'s threads (6,400 messages,
    /// 40 to a 19-hour era): `scarce` in one in 40, `steady` in one in ten.
    async fn received_store(db: &Db) {
        let (top, step) = (STEADY_TOP, STEADY_STEP);
        sqlx::raw_sql(&format!(
            r#"
INSERT INTO messages (id, thread_id, mailbox_id, mailbox, domain, direction, is_draft, folder,
    message_id, from_address, to_addresses, cc_addresses, bcc_addresses, subject, text_body,
    html_body, search_body, headers, status, open_count, is_read, is_starred, has_attachments,
    created_at, received_at)
SELECT 'msg' || lpad(i::text, 5, '0'), 'th1', 'mb0', 'a@example.com', 'example.com', 'inbound',
    0, 'inbox', '<' || i || '@example.com>', 'a@example.com', '', '', '', 's', '', '',
    concat_ws(' ', 'words', CASE WHEN i % 40 = 20 THEN 'scarce' END,
        CASE WHEN i % 10 = 3 THEN 'steady' END),
    '', 'received', 0, 0, 0, 0, {top} - i::bigint * {step}, {top} - i::bigint * {step}
FROM generate_series(0, 6399) i;
"#
        ))
        .execute(db.writer())
        .await
        .unwrap();
        sqlx::raw_sql("VACUUM messages")
            .execute(db.writer())
            .await
            .unwrap();
    }

    /// On [`received_store`], whatever the bounds, and whether the coarser
    /// eras come with the first or not, a search of the received list
    /// pages as a full sort does.
    #[tokio::test]
    async fn a_message_search_by_era_pages_as_a_full_sort_does() {
        let Some(db) = crate::store::tests::fresh_postgres().await else {
            return;
        };
        received_store(&db).await;
        let list = message_list(Documents::Received);
        for word in ["scarce", "steady"] {
            let expected: Vec<String> =
                Sql::new("SELECT id FROM messages WHERE search_body LIKE '%' || ")
                    .bind(word)
                    .push(" || '%' ORDER BY received_at DESC, id DESC")
                    .fetch_all(db.reader())
                    .await
                    .unwrap()
                    .iter()
                    .map(|r| r.text("id").unwrap())
                    .collect();
            for bounds in [
                SearchBounds {
                    first_walk: 8,
                    ..SearchBounds::default()
                },
                SearchBounds {
                    first_walk: 1,
                    walk_chunk: 50,
                    collect_max: 30,
                },
            ] {
                let got: Vec<String> = paged(&db, &list, word, bounds, 25)
                    .await
                    .iter()
                    .map(|r| r.text("id").unwrap())
                    .collect();
                assert_eq!(got, expected, "{word}, {bounds:?}");
            }
        }
    }

    /// A message list's coarser eras come for a word rated past the
    /// quarter room when its postings, the rate over the store's time
    /// (known, or read with the eras), are few: on [`received_store`],
    /// `steady` is 4 in the newest 19-hour era, counted as 5, and 48 in
    /// the 12.7-day era that holds it. One short of either bound, and
    /// the era's own page.
    #[tokio::test]
    async fn a_message_lists_coarser_eras_come_for_few_postings() {
        let Some(db) = crate::store::tests::fresh_postgres().await else {
            return;
        };
        received_store(&db).await;
        let list = message_list(Documents::Received);
        let (top, step) = (STEADY_TOP, STEADY_STEP);
        let era = Eras::reached(ERA_SHIFTS[4], top);
        let coarser = Eras::reached(ERA_SHIFTS[5], top);
        let time = era.start() - coarser.start();
        // The oldest message to the newest, and the bounds 5 meet.
        let store = 6_399 * step;
        let (admits, postings) = (5 * time, 5 * 2 * store);
        let run = async |few: FewRule| {
            let tier = TierRule {
                eras: coarser,
                missing: 26,
                counted: 1,
                time,
                room_span: admits - 1,
                whole: None,
                few: Some(few),
            };
            let asked = Ask {
                tier: Some(tier),
                with_ends: few.store.is_none(),
                ..ask(Some(era), top, 400)
            };
            let got = first_page_collected(&db, &list, "steady", asked).await;
            (got.matches, got.tier, got.page_rows.len())
        };
        for known in [Some(store), None] {
            let few = |room_span: i64, postings_span: i64| FewRule {
                room_span,
                postings_span,
                store: known,
            };
            let both = TierMatches {
                matches: 48,
                below_top: 48,
            };
            assert_eq!(run(few(admits, postings)).await, (4, Some(both), 26));
            for closed in [few(admits - 1, postings), few(admits, postings - 1)] {
                assert_eq!(run(closed).await, (4, None, 4), "{known:?}");
            }
        }
    }

    /// The coarser eras of a collection are the level above its own, read
    /// at the same time, if that level is open and they start before its
    /// eras; the rule counts what was seen with one more and admits
    /// `room` in the time seen with the eras'.
    #[test]
    fn a_collections_coarser_eras_are_the_open_level_above() {
        let at = STEADY_TOP;
        let era = Eras::reached(ERA_SHIFTS[4], at);
        let mut seen = Seen::default();
        seen.add(3, 1000);
        let rule = seen
            .tier_rule(era, at, at, ERA_SHIFTS.len(), 20, 100)
            .unwrap();
        assert_eq!(rule.eras, Eras::reached(ERA_SHIFTS[5], at));
        assert_eq!(rule.time, era.start() - rule.eras.start());
        assert_eq!((rule.missing, rule.counted), (20, 4));
        assert_eq!(rule.room_span as i128, 100 * (1000 + era.span_below(at)));
        // The level above closed, or none above.
        assert_eq!(seen.tier_rule(era, at, at, 4, 20, 100), None);
        let coarsest = Eras::reached(ERA_SHIFTS[6], at);
        assert_eq!(seen.tier_rule(coarsest, at, at, 7, 20, 100), None);
        // Finer eras reaching below the coarser era's start: not held.
        let reaching = Eras {
            count: 13,
            ..Eras::reached(ERA_SHIFTS[4], at)
        };
        assert_eq!(seen.tier_rule(reaching, at, at, 7, 20, 100), None);
    }

    /// Whatever the bounds (so whichever levels a search collects at, goes
    /// up and down through, or walks), a search pages as a full sort does:
    /// the eras of the index are the times the list orders by.
    #[tokio::test]
    async fn a_search_by_era_pages_as_a_full_sort_does() {
        let Some(db) = crate::store::tests::fresh_postgres().await else {
            return;
        };
        spread_store(&db).await;
        let bounds = [
            SearchBounds::default(),
            // Every level too full: the finest era too, so the walk goes on.
            SearchBounds {
                first_walk: 1,
                walk_chunk: 3,
                collect_max: 0,
            },
            // Collected in fine eras, up and down the levels.
            SearchBounds {
                first_walk: 1,
                walk_chunk: 1,
                collect_max: 2,
            },
            SearchBounds {
                first_walk: 5,
                walk_chunk: 50,
                collect_max: 30,
            },
            SearchBounds {
                first_walk: 20,
                walk_chunk: 1000,
                collect_max: 600,
            },
        ];
        let everything = |_: &mut Sql| {};
        let one_mailbox = |q: &mut Sql| {
            q.push(" AND t.mailbox_id = ").bind("mb1");
        };
        // Narrowed or not, the plans differ, not the answers.
        for (mailbox, filters, narrowed) in [
            (None, &everything as &(dyn Fn(&mut Sql) + Sync), false),
            (Some("mb1"), &one_mailbox, false),
            (Some("mb1"), &one_mailbox, true),
        ] {
            let list = thread_list(filters, narrowed);
            for q in [
                "every",
                "half",
                "tenth",
                "rare",
                "dense",
                "half tenth",
                "dense rare",
                "none",
            ] {
                let expected = sorted(&db, q, mailbox).await;
                for b in bounds {
                    assert_eq!(
                        searched(&db, &list, q, b).await,
                        expected,
                        "q={q} mailbox={mailbox:?} narrowed={narrowed} {b:?}"
                    );
                }
            }
        }
    }
}
