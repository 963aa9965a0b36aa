//! One query layer over SQLite and PostgreSQL.
//!
//! SQL is written once with `$n` placeholders (both backends accept them) and
//! run through sqlx's `Any` driver. Only what really differs between the two
//! dialects branches on [`Backend`]: DDL, full-text search and queue claiming.
//! Timestamps are integer microseconds since the epoch and booleans are
//! integers 0/1 on both backends, so rows decode identically.

use std::str::FromStr;
use std::time::Duration;

use bytes::Bytes;
use sqlx::any::{AnyArguments, AnyConnectOptions, AnyPoolOptions, AnyRow};
use sqlx::{Any, AnyPool, Arguments, ConnectOptions, Executor, Row};

pub mod fault;
mod group;
mod index_writes;
mod json_rows;
mod lite;
mod lookup;
mod migrations;

use group::GroupWriter;
pub use group::JobFuture;
pub use index_writes::{FtsIndex, IndexWrite};
use lite::LiteRow;
use lookup::LookupPool;

/// A write transaction. Outside the SQLite group writer it is sqlx's; inside
/// it, the group writer's own connection, whose transaction the group
/// writer opens and commits (see `lite`).
pub struct Tx {
    inner: TxInner,
    /// Group writer only: full-text index writes held back until every job
    /// of the batch has run (see [`Tx::write_index`]).
    index_writes: Vec<IndexWrite>,
}

enum TxInner {
    Pool(sqlx::Transaction<'static, Any>),
    Lite(rusqlite::Connection),
    /// A PostgreSQL write that has sent nothing yet. A job whose writes are
    /// one statement (a send's joined inserts, see [`execute_all`]) needs no
    /// BEGIN and COMMIT: the statement is held and runs on its own at
    /// commit, atomic by itself, one round trip instead of three. Anything
    /// more begins a real transaction first, the held statement in it.
    Deferred {
        pool: AnyPool,
        held: Option<Sql>,
    },
}

/// The connection a statement of a [`Tx`] runs on.
enum TxConn<'t> {
    Pool(&'t mut sqlx::AnyConnection),
    Lite(&'t mut rusqlite::Connection),
}

impl From<sqlx::Transaction<'static, Any>> for Tx {
    fn from(tx: sqlx::Transaction<'static, Any>) -> Tx {
        Tx {
            inner: TxInner::Pool(tx),
            index_writes: Vec::new(),
        }
    }
}

impl Tx {
    fn lite(conn: rusqlite::Connection) -> Tx {
        Tx {
            inner: TxInner::Lite(conn),
            index_writes: Vec::new(),
        }
    }

    fn deferred(pool: AnyPool) -> Tx {
        Tx {
            inner: TxInner::Deferred { pool, held: None },
            index_writes: Vec::new(),
        }
    }

    /// The connection to run a statement on; a deferred write begins its
    /// transaction here, its held statement first.
    async fn conn(&mut self) -> Result<TxConn<'_>, sqlx::Error> {
        if let TxInner::Deferred { pool, held } = &mut self.inner {
            let mut tx = pool.begin().await?;
            if let Some(statement) = held.take() {
                statement.execute(&mut *tx).await?;
            }
            self.inner = TxInner::Pool(tx);
        }
        match &mut self.inner {
            TxInner::Pool(t) => Ok(TxConn::Pool(t)),
            TxInner::Lite(conn) => Ok(TxConn::Lite(conn)),
            TxInner::Deferred { .. } => Err(sqlx::Error::Protocol(
                "a deferred write did not begin its transaction".into(),
            )),
        }
    }

    /// Changes full-text indexes as part of this transaction, in order: at
    /// once, or in the group writer with the rest of the batch's index
    /// writes after its last job (dropped with its job if the job fails;
    /// see `index_writes`).
    pub async fn write_index(
        &mut self,
        writes: impl IntoIterator<Item = IndexWrite>,
    ) -> Result<(), sqlx::Error> {
        match &self.inner {
            TxInner::Lite(_) => {
                self.index_writes.extend(writes);
                Ok(())
            }
            TxInner::Pool(_) | TxInner::Deferred { .. } => {
                let writes: Vec<IndexWrite> = writes.into_iter().collect();
                index_writes::apply(self, &writes).await
            }
        }
    }

    /// Commits a transaction from [`Db::begin`]. The group writer's is
    /// committed by the group writer, for every job in it at once.
    pub async fn commit(self) -> Result<(), sqlx::Error> {
        match self.inner {
            TxInner::Pool(tx) => tx.commit().await,
            TxInner::Deferred { pool, held } => match held {
                Some(statement) => statement.execute(&pool).await.map(|_| ()),
                None => Ok(()),
            },
            TxInner::Lite(_) => Err(sqlx::Error::Protocol(
                "a group-commit job cannot commit on its own".into(),
            )),
        }
    }
}

/// A row read inside a [`Tx`] or by a lookup ([`Db::lookup_all`]), read
/// through [`RowExt`].
pub struct TxRow(RowInner);

enum RowInner {
    Pool(AnyRow),
    Lite(LiteRow),
    Json(json_rows::JsonRow),
}

impl TxRow {
    fn row(&self) -> &dyn RowExt {
        match &self.0 {
            RowInner::Pool(r) => r,
            RowInner::Lite(r) => r,
            RowInner::Json(r) => r,
        }
    }
}

impl RowExt for TxRow {
    fn text(&self, col: &str) -> Result<String, sqlx::Error> {
        self.row().text(col)
    }
    fn opt_text(&self, col: &str) -> Result<Option<String>, sqlx::Error> {
        self.row().opt_text(col)
    }
    fn int(&self, col: &str) -> Result<i64, sqlx::Error> {
        self.row().int(col)
    }
    fn opt_int(&self, col: &str) -> Result<Option<i64>, sqlx::Error> {
        self.row().opt_int(col)
    }
    fn flag(&self, col: &str) -> Result<bool, sqlx::Error> {
        self.row().flag(col)
    }
    fn bytes(&self, col: &str) -> Result<Vec<u8>, sqlx::Error> {
        self.row().bytes(col)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// Handles to the database. On SQLite all writes go through one connection so
/// that writers queue in-process instead of failing with `SQLITE_BUSY`; reads
/// use their own pool. On PostgreSQL both are the same pool.
#[derive(Clone)]
pub struct Db {
    writer: AnyPool,
    /// SQLite only: batches request writes into shared transactions.
    group: Option<GroupWriter>,
    reader: AnyPool,
    /// SQLite only: point reads in place (see `lookup`).
    lookups: Option<std::sync::Arc<LookupPool>>,
    backend: Backend,
}

/// A bind parameter. Typed nulls keep PostgreSQL's parameter types right.
/// Bytes and [`SharedText`] are shared, not copied: a message's raw MIME or
/// an attachment costs nothing more when a statement is cloned (joined
/// inserts, a retried write) or bound.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Int(Option<i64>),
    Text(Option<String>),
    Bytes(Option<Bytes>),
    /// Text that may be large (a message body).
    SharedText(SharedText),
}

impl From<Vec<u8>> for Value {
    fn from(v: Vec<u8>) -> Self {
        Value::Bytes(Some(Bytes::from(v)))
    }
}

impl From<Bytes> for Value {
    fn from(v: Bytes) -> Self {
        Value::Bytes(Some(v))
    }
}

impl From<SharedText> for Value {
    fn from(v: SharedText) -> Self {
        Value::SharedText(v)
    }
}

impl From<&SharedText> for Value {
    fn from(v: &SharedText) -> Self {
        Value::SharedText(v.clone())
    }
}

/// UTF-8 text in shared bytes: a slice of a received message's raw bytes,
/// or a string handed over whole. Cloning or slicing it copies nothing.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SharedText(Bytes);

/// `part` without a copy when it lies within `whole` (a slice of it), else
/// a copy of it.
pub fn share_within(whole: &Bytes, part: &[u8]) -> Bytes {
    let start = whole.as_ptr() as usize;
    let at = part.as_ptr() as usize;
    if !part.is_empty() && at >= start && at + part.len() <= start + whole.len() {
        whole.slice_ref(part)
    } else {
        Bytes::copy_from_slice(part)
    }
}

impl SharedText {
    /// `part` without a copy when it lies within `whole`, else a copy of it.
    pub fn within(whole: &Bytes, part: &str) -> SharedText {
        SharedText(share_within(whole, part.as_bytes()))
    }

    pub fn as_str(&self) -> &str {
        // Built only from `str`s, so always UTF-8.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// At most the first `max` bytes, cut at a character boundary; shared.
    pub fn prefix(&self, max: usize) -> SharedText {
        let s = self.as_str();
        if s.len() <= max {
            return self.clone();
        }
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        SharedText(self.0.slice(..end))
    }
}

impl From<String> for SharedText {
    fn from(s: String) -> Self {
        SharedText(Bytes::from(s))
    }
}

impl From<&str> for SharedText {
    fn from(s: &str) -> Self {
        SharedText(Bytes::copy_from_slice(s.as_bytes()))
    }
}

impl std::ops::Deref for SharedText {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl std::fmt::Debug for SharedText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl PartialEq<str> for SharedText {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for SharedText {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Int(Some(v))
    }
}
impl From<Option<i64>> for Value {
    fn from(v: Option<i64>) -> Self {
        Value::Int(v)
    }
}
impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Int(Some(v as i64))
    }
}
impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::Text(Some(v.to_string()))
    }
}
impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::Text(Some(v))
    }
}
impl From<&String> for Value {
    fn from(v: &String) -> Self {
        Value::Text(Some(v.clone()))
    }
}
impl From<Option<String>> for Value {
    fn from(v: Option<String>) -> Self {
        Value::Text(v)
    }
}
impl From<Option<&str>> for Value {
    fn from(v: Option<&str>) -> Self {
        Value::Text(v.map(str::to_string))
    }
}

/// A statement under construction: text with `$n` placeholders and its values.
#[derive(Debug, Clone, Default)]
pub struct Sql {
    text: String,
    args: Vec<Value>,
    /// May join plain inserts in one statement (see [`Sql::joining_inserts`]).
    joins_inserts: bool,
    /// Joined as the CTE of this name, whose rows the statements joined
    /// after it read (see [`Sql::joined_as`]).
    cte_name: Option<&'static str>,
    /// Planned for its own values on every run (PostgreSQL) instead of
    /// prepared once per connection: see [`Sql::plan_each_run`].
    plan_each_run: bool,
}

impl Sql {
    pub fn new(text: &str) -> Sql {
        Sql::with(text, Vec::new())
    }

    /// A statement whose text already holds `$1..$n` for `args`.
    pub fn with(text: &str, args: Vec<Value>) -> Sql {
        Sql {
            text: text.to_string(),
            args,
            joins_inserts: false,
            cte_name: None,
            plan_each_run: false,
        }
    }

    /// Not kept as a prepared statement, so that PostgreSQL plans it for
    /// the store as it is at each run. A prepared statement's generic plan
    /// is made once per connection, when the connection first runs it a
    /// few times: made while a table was small, where any plan costs about
    /// the same, it can be one that reads a whole mailbox once the table
    /// is large, and it is kept (only ANALYZE replaces it). For a read
    /// whose right plan is clear at any size but a small one.
    pub fn plan_each_run(mut self) -> Sql {
        self.plan_each_run = true;
        self
    }

    /// Marks a write that [`execute_all`] may run on PostgreSQL as a part of
    /// one statement with the plain inserts around it, as it does those: it
    /// changes rows that no other statement of its transaction writes, and
    /// what it reads is right as of before the transaction's other writes
    /// (the parts of one statement share a snapshot).
    pub fn joining_inserts(mut self) -> Sql {
        self.joins_inserts = true;
        self
    }

    /// An insert that [`execute_all`] joins with the inserts around it on
    /// PostgreSQL as the CTE `name`, returning `returning`: a statement
    /// joined after it (marked [`Sql::joining_inserts`]) may read those
    /// rows from `name`, which is how one statement hands a value it
    /// computed to the next without computing it twice. The reader must
    /// come next in the same run of joined statements.
    pub fn joined_as(mut self, name: &'static str, returning: &str) -> Sql {
        self.text.push_str(" RETURNING ");
        self.text.push_str(returning);
        self.cte_name = Some(name);
        self
    }

    /// An `INSERT INTO table (…)`.
    pub fn inserts_into(&self, table: &str) -> bool {
        self.text
            .trim_start()
            .strip_prefix("INSERT INTO ")
            .and_then(|rest| rest.strip_prefix(table))
            .is_some_and(|rest| rest.starts_with(" ("))
    }

    pub fn push(&mut self, text: &str) -> &mut Self {
        self.text.push_str(text);
        self
    }

    /// Appends a placeholder for `v`.
    pub fn bind(&mut self, v: impl Into<Value>) -> &mut Self {
        self.args.push(v.into());
        self.text.push('$');
        self.text.push_str(&self.args.len().to_string());
        self
    }

    /// Appends `(p1, p2, …)` for a non-empty list.
    pub fn bind_list<V: Into<Value> + Clone>(&mut self, values: &[V]) -> &mut Self {
        self.text.push('(');
        for (i, v) in values.iter().enumerate() {
            if i > 0 {
                self.text.push_str(", ");
            }
            self.bind(v.clone());
        }
        self.text.push(')');
        self
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    /// The same statement behind `prefix` (a test's `EXPLAIN`).
    #[cfg(test)]
    pub fn prefixed(&self, prefix: &str) -> Sql {
        Sql::with(&format!("{prefix}{}", self.text), self.args.clone())
    }

    fn arguments(&self) -> Result<AnyArguments<'_>, sqlx::Error> {
        let mut args = AnyArguments::default();
        // Borrowed: the driver copies each value once, into what it sends.
        for v in &self.args {
            let res = match v {
                Value::Int(i) => args.add(*i),
                Value::Text(t) => args.add(t.as_deref()),
                Value::Bytes(b) => args.add(b.as_deref()),
                Value::SharedText(t) => args.add(t.as_str()),
            };
            res.map_err(sqlx::Error::Encode)?;
        }
        Ok(args)
    }

    pub async fn execute<'e, E: Executor<'e, Database = Any>>(
        &self,
        ex: E,
    ) -> Result<u64, sqlx::Error> {
        let args = self.arguments()?;
        Ok(sqlx::query_with(&self.text, args)
            .persistent(!self.plan_each_run)
            .execute(ex)
            .await?
            .rows_affected())
    }

    pub async fn fetch_all<'e, E: Executor<'e, Database = Any>>(
        &self,
        ex: E,
    ) -> Result<Vec<AnyRow>, sqlx::Error> {
        let args = self.arguments()?;
        sqlx::query_with(&self.text, args)
            .persistent(!self.plan_each_run)
            .fetch_all(ex)
            .await
    }

    pub async fn fetch_optional<'e, E: Executor<'e, Database = Any>>(
        &self,
        ex: E,
    ) -> Result<Option<AnyRow>, sqlx::Error> {
        let args = self.arguments()?;
        sqlx::query_with(&self.text, args)
            .persistent(!self.plan_each_run)
            .fetch_optional(ex)
            .await
    }

    pub async fn fetch_one<'e, E: Executor<'e, Database = Any>>(
        &self,
        ex: E,
    ) -> Result<AnyRow, sqlx::Error> {
        let args = self.arguments()?;
        sqlx::query_with(&self.text, args)
            .persistent(!self.plan_each_run)
            .fetch_one(ex)
            .await
    }
}

/// The same statements inside a [`Tx`].
impl Sql {
    pub async fn execute_tx(&self, tx: &mut Tx) -> Result<u64, sqlx::Error> {
        match tx.conn().await? {
            TxConn::Pool(c) => self.execute(c).await,
            TxConn::Lite(conn) => lite::execute(conn, self),
        }
    }

    pub async fn fetch_all_tx(&self, tx: &mut Tx) -> Result<Vec<TxRow>, sqlx::Error> {
        match tx.conn().await? {
            TxConn::Pool(c) => Ok(self
                .fetch_all(c)
                .await?
                .into_iter()
                .map(|r| TxRow(RowInner::Pool(r)))
                .collect()),
            TxConn::Lite(conn) => Ok(lite::fetch_all(conn, self)?
                .into_iter()
                .map(|r| TxRow(RowInner::Lite(r)))
                .collect()),
        }
    }

    pub async fn fetch_optional_tx(&self, tx: &mut Tx) -> Result<Option<TxRow>, sqlx::Error> {
        match tx.conn().await? {
            TxConn::Pool(c) => Ok(self
                .fetch_optional(c)
                .await?
                .map(|r| TxRow(RowInner::Pool(r)))),
            TxConn::Lite(conn) => {
                Ok(lite::fetch_optional(conn, self)?.map(|r| TxRow(RowInner::Lite(r))))
            }
        }
    }

    pub async fn fetch_one_tx(&self, tx: &mut Tx) -> Result<TxRow, sqlx::Error> {
        self.fetch_optional_tx(tx)
            .await?
            .ok_or(sqlx::Error::RowNotFound)
    }
}

impl Sql {
    /// Appends `other` as a further statement, its placeholders renumbered
    /// after this one's.
    fn append_statement(&mut self, other: &Sql) {
        if !self.text.trim_end().ends_with(';') {
            self.text.push(';');
        }
        self.text.push('\n');
        self.push_renumbered(other);
    }

    /// Appends `other`'s text and values, its placeholders renumbered after
    /// this one's. Placeholders are `$n` outside quoted literals.
    fn push_renumbered(&mut self, other: &Sql) {
        let offset = self.args.len();
        let mut chars = other.text.chars().peekable();
        let mut quoted = false;
        while let Some(c) = chars.next() {
            self.text.push(c);
            if c == '\'' {
                quoted = !quoted;
            } else if c == '$' && !quoted {
                let mut digits = String::new();
                while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                    digits.push(*d);
                    chars.next();
                }
                match digits.parse::<usize>() {
                    Ok(n) => self.text.push_str(&(n + offset).to_string()),
                    Err(_) => self.text.push_str(&digits),
                }
            }
        }
        self.args.extend(other.args.iter().cloned());
    }
}

/// The rows of each read of a [`json_rows::statement`] answer.
fn json_answers<const N: usize>(row: &AnyRow) -> Result<[Vec<TxRow>; N], sqlx::Error> {
    let mut answers = Vec::with_capacity(N);
    for i in 0..N {
        let rows = json_rows::rows(&row.text(&format!("r{i}"))?)?;
        answers.push(rows.into_iter().map(|r| TxRow(RowInner::Json(r))).collect());
    }
    answers
        .try_into()
        .map_err(|_| sqlx::Error::Protocol("a lookup went unanswered".into()))
}

/// Runs statements that return no rows, in order, stopping at the first
/// error (the ones before it have run: call it inside a transaction that an
/// error rolls back). On a pooled SQLite connection they go as one
/// multi-statement call: one trip to sqlx's connection thread instead of
/// one per statement, which is most of what a small write costs there.
/// PostgreSQL's protocol takes one statement with parameters per call, so
/// there each run of plain inserts becomes one statement (see
/// [`merge_plain_inserts`]) and the rest run one by one. The group writer's
/// connection has no trips to save: one by one.
pub async fn execute_all(
    tx: &mut Tx,
    backend: Backend,
    statements: &[Sql],
) -> Result<(), sqlx::Error> {
    if backend == Backend::Postgres
        && let TxInner::Deferred {
            held: held @ None, ..
        } = &mut tx.inner
    {
        let mut merged = merge_plain_inserts(statements);
        if merged.len() <= 1 {
            *held = merged.pop();
            return Ok(());
        }
    }
    let conn = match tx.conn().await? {
        TxConn::Pool(c) => c,
        TxConn::Lite(conn) => {
            for s in statements {
                lite::execute(conn, s)?;
            }
            return Ok(());
        }
    };
    match backend {
        Backend::Sqlite => {
            let mut all = Sql::default();
            for s in statements {
                if all.text.is_empty() {
                    all = s.clone();
                } else {
                    all.append_statement(s);
                }
            }
            if !all.text.is_empty() {
                all.execute(&mut *conn).await?;
            }
        }
        Backend::Postgres => {
            for s in merge_plain_inserts(statements) {
                s.execute(&mut *conn).await?;
            }
        }
    }
    Ok(())
}

/// Joins each run of two or more plain inserts into one statement of
/// data-modifying CTEs (`WITH s0 AS (INSERT …), s1 AS (INSERT …) INSERT …`):
/// one round trip to PostgreSQL instead of one each. Only `INSERT … VALUES`
/// without `ON CONFLICT` or `RETURNING` qualifies, and a statement marked
/// [`Sql::joining_inserts`]: the parts of one statement share a snapshot
/// and run in no set order, so none may read what another writes, and no
/// two may write the same row (but for the rows an insert
/// [`Sql::joined_as`] returns). Other statements stay as they are, in their
/// place.
fn merge_plain_inserts(statements: &[Sql]) -> Vec<Sql> {
    fn joins(s: &Sql) -> bool {
        let text = s.text.trim_start();
        if s.joins_inserts || s.cte_name.is_some() {
            return !text.trim_end().ends_with(';');
        }
        text.starts_with("INSERT INTO")
            && !text.contains("SELECT")
            && !text.contains("ON CONFLICT")
            && !text.contains("RETURNING")
            && !text.trim_end().ends_with(';')
    }
    fn join(run: &[&Sql]) -> Sql {
        let Some((last, firsts)) = run.split_last() else {
            return Sql::default();
        };
        if firsts.is_empty() {
            return (*last).clone();
        }
        let mut all = Sql::new("WITH ");
        for (i, s) in firsts.iter().enumerate() {
            if i > 0 {
                all.push(", ");
            }
            match s.cte_name {
                Some(name) => all.push(&format!("{name} AS (")),
                None => all.push(&format!("s{i} AS (")),
            };
            all.push_renumbered(s);
            all.push(")");
        }
        all.push(" ");
        all.push_renumbered(last);
        all
    }
    let mut merged = Vec::new();
    let mut run: Vec<&Sql> = Vec::new();
    for s in statements {
        if joins(s) {
            run.push(s);
            continue;
        }
        if !run.is_empty() {
            merged.push(join(&run));
            run.clear();
        }
        merged.push(s.clone());
    }
    if !run.is_empty() {
        merged.push(join(&run));
    }
    merged
}

/// Builds a [`Sql`] from text with `$n` placeholders and the values in order.
#[macro_export]
macro_rules! sql {
    ($text:expr $(, $arg:expr)* $(,)?) => {
        $crate::store::Sql::with($text, vec![$($crate::store::Value::from($arg)),*])
    };
}

/// Typed column access that turns decode problems into `sqlx::Error`.
pub trait RowExt {
    fn text(&self, col: &str) -> Result<String, sqlx::Error>;
    fn opt_text(&self, col: &str) -> Result<Option<String>, sqlx::Error>;
    fn int(&self, col: &str) -> Result<i64, sqlx::Error>;
    fn opt_int(&self, col: &str) -> Result<Option<i64>, sqlx::Error>;
    fn flag(&self, col: &str) -> Result<bool, sqlx::Error>;
    fn bytes(&self, col: &str) -> Result<Vec<u8>, sqlx::Error>;
}

impl RowExt for AnyRow {
    fn text(&self, col: &str) -> Result<String, sqlx::Error> {
        self.try_get::<String, _>(col)
    }
    fn opt_text(&self, col: &str) -> Result<Option<String>, sqlx::Error> {
        self.try_get::<Option<String>, _>(col)
    }
    fn int(&self, col: &str) -> Result<i64, sqlx::Error> {
        self.try_get::<i64, _>(col)
    }
    fn opt_int(&self, col: &str) -> Result<Option<i64>, sqlx::Error> {
        self.try_get::<Option<i64>, _>(col)
    }
    fn flag(&self, col: &str) -> Result<bool, sqlx::Error> {
        Ok(self.try_get::<i64, _>(col)? != 0)
    }
    fn bytes(&self, col: &str) -> Result<Vec<u8>, sqlx::Error> {
        Ok(self.try_get::<Option<Vec<u8>>, _>(col)?.unwrap_or_default())
    }
}

/// How long a request waits for a PostgreSQL connection (the server
/// restarting, or every connection busy) before it is refused as unavailable.
pub const POSTGRES_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

impl Db {
    /// Connects (creating a SQLite file if missing) and applies migrations.
    pub async fn connect(url: &str) -> anyhow::Result<Db> {
        sqlx::any::install_default_drivers();
        let backend = if url.starts_with("sqlite:") {
            Backend::Sqlite
        } else {
            Backend::Postgres
        };
        let db = match backend {
            Backend::Sqlite => {
                let url = sqlite_url(url);
                let opts = AnyConnectOptions::from_str(&url)?.disable_statement_logging();
                let writer = AnyPoolOptions::new()
                    .max_connections(1)
                    .acquire_timeout(Duration::from_secs(30))
                    // A ping on every checkout costs a round trip per query;
                    // broken connections surface as errors instead.
                    .test_before_acquire(false)
                    .after_connect(sqlite_pragmas)
                    .connect_with(opts.clone())
                    .await?;
                let reader = AnyPoolOptions::new()
                    .max_connections(4)
                    .acquire_timeout(Duration::from_secs(30))
                    // A ping on every checkout costs a round trip per query;
                    // broken connections surface as errors instead.
                    .test_before_acquire(false)
                    .after_connect(sqlite_pragmas)
                    .connect_with(opts)
                    .await?;
                // The group writer opens the same file on its own connection,
                // after the pool has created it and set WAL mode.
                let file = Sql::new("SELECT file FROM pragma_database_list WHERE name = 'main'")
                    .fetch_one(&writer)
                    .await?
                    .text("file")?;
                if file.is_empty() {
                    // Each connection would have a database of its own.
                    anyhow::bail!(
                        "an in-memory SQLite database is not supported: give a file, \
                         such as sqlite://pigeonhole.db"
                    );
                }
                let file = std::path::Path::new(&file);
                Db {
                    group: Some(GroupWriter::start(file)?),
                    writer,
                    reader,
                    lookups: Some(std::sync::Arc::new(LookupPool::new(file))),
                    backend,
                }
            }
            Backend::Postgres => {
                let opts = AnyConnectOptions::from_str(url)?.disable_statement_logging();
                let pool = AnyPoolOptions::new()
                    .max_connections(16)
                    // While the server is away a request waits this long for
                    // it, then is answered 503 with Retry-After.
                    .acquire_timeout(POSTGRES_ACQUIRE_TIMEOUT)
                    // A ping on every checkout costs a round trip per query;
                    // broken connections surface as errors instead.
                    .test_before_acquire(false)
                    .connect_with(opts)
                    .await?;
                Db {
                    writer: pool.clone(),
                    group: None,
                    reader: pool,
                    lookups: None,
                    backend,
                }
            }
        };
        migrations::apply(&db).await?;
        Ok(db)
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Pool for statements that only read.
    pub fn reader(&self) -> &AnyPool {
        &self.reader
    }

    /// A read transaction for a list's statements (a page, a search).
    ///
    /// On PostgreSQL a list is a walk of an index in the list's order,
    /// stopped at a page, and must not depend on the planner's statistics:
    /// without them (a store just loaded) it takes a condition such as
    /// `folders LIKE '%,archive,%'` or `direction = 'inbound'` for a rare
    /// one, and would rather read every row and sort (43 ms for a folder at
    /// 200,000 threads). So the planner may neither sort nor build a bitmap
    /// here, unless the list is `narrowed`: one of its conditions has an
    /// index of its own that holds only its rows (a thread, a label), which
    /// are read and sorted, where a walk in order would pass every row of
    /// the store (9 s for a thread's received mail at 1,000,000 messages).
    /// A path the settings forbid still costs more than any other (a sort
    /// of a few collected matches has no other path), which would make
    /// every such statement pass `jit_above_cost`: JIT is off too (it took
    /// 200 ms a statement). So are parallel workers: a planner that
    /// expects a walk to read the whole list starts two, 4 ms, for a walk
    /// of a few hundred rows. SQLite plans by its indexes, not by
    /// statistics.
    pub async fn list_read(
        &self,
        narrowed: bool,
    ) -> Result<sqlx::Transaction<'static, Any>, sqlx::Error> {
        self.read_in_order(narrowed, false).await
    }

    /// A [`Db::list_read`] for a search's statements, each run with its
    /// generic plan from its first run on: their shape is fixed by the
    /// search (a walk of the list's index, GIN lookups inside the matching
    /// functions, rows read by key), so a plan made for each run's values
    /// (a cursor's time, an era's start) buys nothing, and PostgreSQL makes
    /// one for each of a statement's first five runs on every connection
    /// and keeps doing so while it rates those cheaper than the generic
    /// one. At 1,000,000 messages after `ANALYZE`, a thread collection's
    /// bind (its planning) took 0.50 ms at the median on those first runs
    /// and 0.034 ms after; 0.054 ms with the generic plan from the start.
    pub async fn search_read(
        &self,
        narrowed: bool,
    ) -> Result<sqlx::Transaction<'static, Any>, sqlx::Error> {
        self.read_in_order(narrowed, true).await
    }

    async fn read_in_order(
        &self,
        narrowed: bool,
        generic_plans: bool,
    ) -> Result<sqlx::Transaction<'static, Any>, sqlx::Error> {
        if self.backend != Backend::Postgres {
            return self.reader.begin().await;
        }
        // The settings go with the BEGIN, in one simple query: a round trip
        // fewer for every list page and search than a statement after it.
        macro_rules! begin_read {
            ($sorts:literal) => {
                concat!(
                    "BEGIN; SET LOCAL enable_sort = ",
                    $sorts,
                    "; SET LOCAL enable_bitmapscan = ",
                    $sorts,
                    "; SET LOCAL jit = off; SET LOCAL max_parallel_workers_per_gather = 0"
                )
            };
            ($sorts:literal, generic plans) => {
                concat!(
                    begin_read!($sorts),
                    "; SET LOCAL plan_cache_mode = force_generic_plan"
                )
            };
        }
        self.reader
            .begin_with(match (narrowed, generic_plans) {
                (true, false) => begin_read!("on"),
                (false, false) => begin_read!("off"),
                (true, true) => begin_read!("on", generic plans),
                (false, true) => begin_read!("off", generic plans),
            })
            .await
    }

    /// The rows of a list's one statement, read as [`Db::list_read`] says
    /// (SQLite needs no transaction for it).
    pub async fn fetch_list(&self, sql: &Sql, narrowed: bool) -> Result<Vec<AnyRow>, sqlx::Error> {
        if self.backend != Backend::Postgres {
            return sql.fetch_all(&self.reader).await;
        }
        let mut tx = self.list_read(narrowed).await?;
        let rows = sql.fetch_all(&mut *tx).await?;
        tx.commit().await?;
        Ok(rows)
    }

    /// Rows of a read that finds them by an index in microseconds (a row
    /// by its key, a few by a list of keys). On SQLite it runs in place on
    /// the calling thread (see `lookup`); anything longer belongs in
    /// [`Db::reader`], whose connections have threads of their own.
    pub async fn lookup_all(&self, sql: &Sql) -> Result<Vec<TxRow>, sqlx::Error> {
        Ok(match &self.lookups {
            Some(pool) => pool
                .fetch(sql, usize::MAX)?
                .into_iter()
                .map(|r| TxRow(RowInner::Lite(r)))
                .collect(),
            None => sql
                .fetch_all(&self.reader)
                .await?
                .into_iter()
                .map(|r| TxRow(RowInner::Pool(r)))
                .collect(),
        })
    }

    /// Several lookups (see [`Db::lookup_all`]) at once, the rows of each:
    /// on SQLite one after another in place; on PostgreSQL as one statement,
    /// one round trip instead of one each (see `json_rows`).
    pub async fn lookup_each<const N: usize>(
        &self,
        reads: [&Sql; N],
    ) -> Result<[Vec<TxRow>; N], sqlx::Error> {
        if self.backend == Backend::Postgres {
            let row = json_rows::statement(&reads).fetch_one(&self.reader).await?;
            return json_answers(&row);
        }
        let mut answers = Vec::with_capacity(N);
        for read in reads {
            answers.push(self.lookup_all(read).await?);
        }
        answers
            .try_into()
            .map_err(|_| sqlx::Error::Protocol("a lookup went unanswered".into()))
    }

    /// A write that returns a row when it writes one (`… ON CONFLICT DO
    /// NOTHING RETURNING …`), then lookups (see [`Db::lookup_each`]):
    /// whether it wrote, and the rows of each read. On PostgreSQL one
    /// statement, one round trip (the reads see the store as of before the
    /// write); on SQLite the write through the group commit, then the reads.
    pub async fn write_then_lookup_each<const N: usize>(
        &self,
        write: &Sql,
        reads: [&Sql; N],
    ) -> Result<(bool, [Vec<TxRow>; N]), sqlx::Error> {
        if self.backend == Backend::Sqlite {
            let written = self.write_fetch_optional(write.clone()).await?.is_some();
            return Ok((written, self.lookup_each(reads).await?));
        }
        let mut all = Sql::new("WITH w AS (");
        all.push_renumbered(write);
        all.push(") ");
        let mut select = json_rows::statement(&reads);
        select.push(", (SELECT COUNT(*) FROM w) AS written");
        all.push_renumbered(&select);
        let row = all.fetch_one(&self.writer).await?;
        Ok((row.int("written")? > 0, json_answers(&row)?))
    }

    /// The first row of a lookup (see [`Db::lookup_all`]).
    pub async fn lookup_optional(&self, sql: &Sql) -> Result<Option<TxRow>, sqlx::Error> {
        Ok(match &self.lookups {
            Some(pool) => pool.fetch(sql, 1)?.pop().map(|r| TxRow(RowInner::Lite(r))),
            None => sql
                .fetch_optional(&self.reader)
                .await?
                .map(|r| TxRow(RowInner::Pool(r))),
        })
    }

    /// Pool for single statements that write (autocommit).
    pub fn writer(&self) -> &AnyPool {
        &self.writer
    }

    /// Starts a write transaction. On SQLite it takes the write lock at
    /// once (`BEGIN IMMEDIATE`): the group writer writes from another
    /// connection, and a transaction that read before asking to write would
    /// fail instead of waiting if the group writer committed in between.
    pub async fn begin(&self) -> Result<Tx, sqlx::Error> {
        match self.backend {
            Backend::Sqlite => match self.writer.begin_with("BEGIN IMMEDIATE").await {
                // SQLite rolls a whole transaction back by itself on some
                // errors (a full disk, an I/O error); sqlx's ROLLBACK then
                // fails and it goes on counting the transaction as open, so
                // every later BEGIN on that connection is refused. The
                // connection is dropped from the pool for a new one.
                Err(sqlx::Error::InvalidSavePointStatement) => {
                    tracing::warn!(
                        "the SQLite write connection lost its transaction; replacing it"
                    );
                    let stale = self.writer.acquire().await?.detach();
                    let _ = sqlx::Connection::close_hard(stale).await;
                    self.writer
                        .begin_with("BEGIN IMMEDIATE")
                        .await
                        .map(Tx::from)
                }
                other => other.map(Tx::from),
            },
            Backend::Postgres => self.writer.begin().await.map(Tx::from),
        }
    }

    /// Runs `work` in a write transaction and commits it; an `Err` from
    /// `work` rolls back what it wrote. On SQLite the transaction is shared
    /// with other writes queued at the same moment (see `group`); on
    /// PostgreSQL each call has its own, since writers there run side by side.
    pub async fn write<T, E, F>(&self, work: F) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<sqlx::Error> + Send + 'static,
        F: for<'t> FnOnce(&'t mut Tx) -> JobFuture<'t, Result<T, E>> + Send + 'static,
    {
        self.write_queued_sized(0, work).await.await
    }

    /// As [`Db::write`], for a write that binds about `bytes` (a received
    /// message, a send's attachments): on SQLite a large one waits for the
    /// large write before it to commit, then commits alone, so that small
    /// writes never queue behind several (see `group`).
    pub async fn write_sized<T, E, F>(&self, bytes: usize, work: F) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<sqlx::Error> + Send + 'static,
        F: for<'t> FnOnce(&'t mut Tx) -> JobFuture<'t, Result<T, E>> + Send + 'static,
    {
        self.write_queued_sized(bytes, work).await.await
    }

    /// As [`Db::write`], but returns as soon as the write is queued (SQLite)
    /// or started on a task of its own (PostgreSQL), with the wait for its
    /// result: a caller can start several writes and wait for them together.
    /// On SQLite they commit in the order queued; on PostgreSQL they run side
    /// by side. `bytes` is about what the write binds (see
    /// [`Db::write_sized`]).
    pub async fn write_queued_sized<T, E, F>(
        &self,
        bytes: usize,
        work: F,
    ) -> JobFuture<'static, Result<T, E>>
    where
        T: Send + 'static,
        E: From<sqlx::Error> + Send + 'static,
        F: for<'t> FnOnce(&'t mut Tx) -> JobFuture<'t, Result<T, E>> + Send + 'static,
    {
        if let Some(group) = &self.group {
            let large = group.admit(bytes).await;
            return group.enqueue(large, work);
        }
        // Its own task, as on SQLite: the write finishes even if the caller
        // goes away, and a batch need not wait for one record before
        // starting the next send.
        let writer = self.writer.clone();
        let written = tokio::spawn(crate::telemetry::context::carry(async move {
            let mut tx = Tx::deferred(writer);
            let value = work(&mut tx).await?;
            tx.commit().await?;
            Ok(value)
        }));
        Box::pin(async move {
            match written.await {
                Ok(outcome) => outcome,
                Err(e) => Err(E::from(sqlx::Error::Protocol(format!(
                    "the write could not be run: {e}"
                )))),
            }
        })
    }

    /// One writing statement through [`Db::write`]: on SQLite it joins a
    /// group commit instead of taking the writer connection from the
    /// shared runtime, where every wake-up waits behind the requests being
    /// served and the group writer waits behind that. Rows affected.
    pub async fn write_statement(&self, statement: Sql) -> Result<u64, sqlx::Error> {
        if self.group.is_none() {
            // One statement is atomic by itself: no BEGIN and COMMIT.
            return statement.execute(&self.writer).await;
        }
        self.write(move |tx| Box::pin(async move { statement.execute_tx(tx).await }))
            .await
    }

    /// As [`Db::write_statement`], for a statement that reads (a read that
    /// must see writes still in the group commit) or returns a row.
    pub async fn write_fetch_optional(&self, statement: Sql) -> Result<Option<TxRow>, sqlx::Error> {
        if self.group.is_none() {
            return Ok(statement
                .fetch_optional(&self.writer)
                .await?
                .map(|r| TxRow(RowInner::Pool(r))));
        }
        self.write(move |tx| Box::pin(async move { statement.fetch_optional_tx(tx).await }))
            .await
    }

    pub async fn ping(&self) -> Result<(), sqlx::Error> {
        sql!("SELECT 1 AS one")
            .fetch_one(&self.reader)
            .await
            .map(|_| ())
    }

    pub async fn close(&self) {
        if let Some(lookups) = &self.lookups {
            lookups.close();
        }
        self.writer.close().await;
        self.reader.close().await;
    }

    /// `column` (a text column) is one of `values` (not empty: SQLite
    /// refuses `IN ()`). On PostgreSQL the values
    /// are one JSON array, so that a read of a page's rows is one statement
    /// text (one prepared statement, one generic plan) whatever the page's
    /// size: with a list of its own per count, a thread page's labels read
    /// was planned anew on every run at 1,000,000 messages (0.2 ms; its
    /// plan with the values looked cheaper than its generic one). SQLite
    /// plans every statement anyway: `IN (…)`.
    pub fn push_in(&self, sql: &mut Sql, column: &str, values: &[String]) {
        match self.backend {
            Backend::Postgres => {
                // A list of strings always serializes.
                let array = serde_json::to_string(values).unwrap_or_else(|_| "[]".into());
                sql.push(&format!(
                    "{column} = ANY(ARRAY(SELECT json_array_elements_text(CAST("
                ))
                .bind(array)
                .push(" AS json))))");
            }
            Backend::Sqlite => {
                sql.push(&format!("{column} IN ")).bind_list(values);
            }
        }
    }

    /// Case-insensitive substring match, `LIKE` wildcards in `needle` escaped.
    pub fn push_contains(&self, sql: &mut Sql, column: &str, needle: &str) {
        let escaped = needle
            .to_lowercase()
            .replace('\\', "\\\\")
            .replace('%', "\\%")
            .replace('_', "\\_");
        sql.push(&format!("LOWER({column}) LIKE "))
            .bind(format!("%{escaped}%"))
            .push(" ESCAPE '\\'");
    }
}

type ConnectFuture<'c> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), sqlx::Error>> + Send + 'c>>;

/// What every SQLite connection, sqlx's or the group writer's, is set to.
const SQLITE_PRAGMAS: [&str; 4] = [
    "PRAGMA journal_mode = WAL",
    "PRAGMA synchronous = NORMAL",
    "PRAGMA busy_timeout = 10000",
    "PRAGMA foreign_keys = ON",
];

fn sqlite_pragmas(
    conn: &mut sqlx::AnyConnection,
    _: sqlx::pool::PoolConnectionMetadata,
) -> ConnectFuture<'_> {
    Box::pin(async move {
        for pragma in SQLITE_PRAGMAS {
            Sql::new(pragma).execute(&mut *conn).await?;
        }
        Ok(())
    })
}

/// `sqlite://PATH` → a URL that creates the file when missing.
fn sqlite_url(url: &str) -> String {
    if url.contains("mode=") || url.contains(":memory:") {
        return url.to_string();
    }
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}mode=rwc")
}

/// Creates the empty PostgreSQL database `name` on the server `admin_url`
/// names and returns the new database's URL: for tests and benchmarks, which
/// each want a database of their own. `name` is a plain identifier. Not in
/// the shipped binary: the service never creates a database.
#[cfg(any(test, feature = "test-support"))]
pub async fn create_postgres_database(admin_url: &str, name: &str) -> anyhow::Result<String> {
    use sqlx::Connection;
    anyhow::ensure!(
        !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'),
        "{name:?} is not a plain database name"
    );
    sqlx::any::install_default_drivers();
    let mut conn = sqlx::AnyConnection::connect(admin_url).await?;
    conn.execute(format!("CREATE DATABASE {name}").as_str())
        .await?;
    conn.close().await?;
    let mut url = url::Url::parse(admin_url)?;
    url.set_path(&format!("/{name}"));
    Ok(url.to_string())
}

/// Whether an error is a unique-constraint violation (on either backend).
pub fn is_unique_violation(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Database(db) => {
            db.kind() == sqlx::error::ErrorKind::UniqueViolation
                || db.code().as_deref() == Some("23505")
                || db.message().contains("UNIQUE constraint failed")
        }
        _ => false,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A fresh SQLite database in the temporary directory, for unit tests.
    pub(crate) struct TempSqlite {
        pub db: Db,
        pub path: std::path::PathBuf,
    }

    impl TempSqlite {
        pub async fn new(name: &str) -> TempSqlite {
            let path =
                std::env::temp_dir().join(format!("ph-{name}-{}.db", crate::ids::random_token(10)));
            let db = Db::connect(&format!("sqlite://{}", path.display()))
                .await
                .unwrap();
            TempSqlite { db, path }
        }

        pub async fn remove(self) {
            self.db.close().await;
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", self.path.display()));
            }
        }
    }

    /// Applies the migrations not recorded in `db` (a test that undoes one).
    pub(crate) async fn migrate(db: &Db) {
        super::migrations::apply(db).await.unwrap();
    }

    /// A fresh database on the PostgreSQL server `PIGEONHOLE_TEST_POSTGRES_URL`
    /// names; None when it is not set (the SQLite run).
    pub(crate) async fn fresh_postgres() -> Option<Db> {
        let admin = std::env::var("PIGEONHOLE_TEST_POSTGRES_URL")
            .ok()
            .filter(|u| !u.is_empty())?;
        let name = format!("ph_test_{}", crate::ids::random_token(16));
        let url = create_postgres_database(&admin, &name).await.unwrap();
        Some(Db::connect(&url).await.unwrap())
    }

    async fn probe_rows(db: &Db) -> i64 {
        Sql::new("SELECT COUNT(*) AS n FROM probe")
            .fetch_one(db.reader())
            .await
            .unwrap()
            .int("n")
            .unwrap()
    }

    fn probe_insert(id: &str) -> Sql {
        sql!("INSERT INTO probe (id) VALUES ($1)", id)
    }

    #[tokio::test]
    async fn a_one_statement_write_on_postgres_is_held_until_commit_and_sent_alone() {
        let Some(db) = fresh_postgres().await else {
            return;
        };
        Sql::new("CREATE TABLE probe (id TEXT PRIMARY KEY)")
            .execute(db.writer())
            .await
            .unwrap();
        let pg = Backend::Postgres;

        // Joined inserts are held, not sent, until the commit runs them alone.
        let mut tx = Tx::deferred(db.writer().clone());
        execute_all(&mut tx, pg, &[probe_insert("a"), probe_insert("b")])
            .await
            .unwrap();
        assert!(matches!(&tx.inner, TxInner::Deferred { held: Some(_), .. }));
        assert_eq!(probe_rows(&db).await, 0);
        tx.commit().await.unwrap();
        assert_eq!(probe_rows(&db).await, 2);

        // Dropped before its commit: nothing was written.
        let mut tx = Tx::deferred(db.writer().clone());
        execute_all(&mut tx, pg, &[probe_insert("c")])
            .await
            .unwrap();
        drop(tx);
        assert_eq!(probe_rows(&db).await, 2);

        // Anything more begins a transaction, the held statement first.
        let mut tx = Tx::deferred(db.writer().clone());
        execute_all(&mut tx, pg, &[probe_insert("d")])
            .await
            .unwrap();
        let seen = sql!("SELECT id FROM probe WHERE id = $1", "d")
            .fetch_optional_tx(&mut tx)
            .await
            .unwrap();
        assert!(seen.is_some());
        assert!(matches!(&tx.inner, TxInner::Pool(_)));
        assert_eq!(probe_rows(&db).await, 2, "not committed yet");
        tx.commit().await.unwrap();
        assert_eq!(probe_rows(&db).await, 3);

        // Through Db::write: a job that fails after holding its statement
        // leaves nothing; a held statement that fails is the write's error.
        let failed: Result<(), sqlx::Error> = db
            .write(|tx| {
                Box::pin(async move {
                    execute_all(tx, Backend::Postgres, &[probe_insert("e")]).await?;
                    Err(sqlx::Error::RowNotFound)
                })
            })
            .await;
        assert!(failed.is_err());
        assert_eq!(probe_rows(&db).await, 3);
        let duplicate: Result<(), sqlx::Error> = db
            .write(|tx| {
                Box::pin(
                    async move { execute_all(tx, Backend::Postgres, &[probe_insert("a")]).await },
                )
            })
            .await;
        assert!(is_unique_violation(&duplicate.unwrap_err()));
        assert_eq!(probe_rows(&db).await, 3);
        db.close().await;
    }

    #[test]
    fn shared_text_is_sliced_not_copied_and_cut_between_characters() {
        let whole = Bytes::from("hé wörld".to_string());
        let text = std::str::from_utf8(&whole).unwrap();
        let inside = SharedText::within(&whole, &text[4..]);
        assert_eq!(inside, "wörld");
        assert_eq!(inside.as_ptr(), text[4..].as_ptr(), "a slice of `whole`");
        let elsewhere = SharedText::within(&whole, "wörld");
        assert_eq!(elsewhere, "wörld");
        assert_ne!(elsewhere.as_ptr(), text[4..].as_ptr(), "a copy");
        // "ö" is two bytes: a cut inside it moves back to its start.
        assert_eq!(inside.prefix(2), "w");
        assert_eq!(inside.prefix(3), "wö");
        assert_eq!(inside.prefix(100), "wörld");
        assert_eq!(inside.prefix(3).as_ptr(), inside.as_ptr());
    }

    #[tokio::test]
    async fn an_in_memory_database_is_refused_with_a_reason() {
        let Err(err) = Db::connect("sqlite::memory:").await else {
            panic!("an in-memory database was accepted");
        };
        assert!(err.to_string().contains("in-memory"), "{err}");
    }

    #[test]
    fn appended_statements_number_their_placeholders_after_the_first() {
        let mut all = sql!("INSERT INTO a VALUES ($1, $2, 'x$1')", 1i64, "b");
        all.append_statement(&sql!(
            "UPDATE c SET d = $1 WHERE e = '$2' AND f = $2",
            "g",
            7i64
        ));
        assert_eq!(
            all.text(),
            "INSERT INTO a VALUES ($1, $2, 'x$1');\nUPDATE c SET d = $3 WHERE e = '$2' AND f = $4"
        );
        assert_eq!(
            all.args,
            vec![
                Value::from(1i64),
                Value::from("b"),
                Value::from("g"),
                Value::from(7i64)
            ]
        );
    }

    #[test]
    fn runs_of_plain_inserts_become_one_statement_for_postgres() {
        let statements = vec![
            sql!("UPDATE threads SET n = $1 WHERE id = $2", 1, "t"),
            sql!("INSERT INTO a (x, y) VALUES ($1, $2)", "a1", "a2"),
            sql!("INSERT INTO b (x) VALUES ($1)", "b1"),
            sql!("INSERT INTO c (x, note) VALUES ($1, 'costs $2')", "c1"),
            sql!("INSERT INTO d (x) VALUES ($1) ON CONFLICT DO NOTHING", "d1"),
            sql!("INSERT INTO e (x) VALUES ($1)", "e1"),
        ];
        let merged = merge_plain_inserts(&statements);
        let texts: Vec<&str> = merged.iter().map(Sql::text).collect();
        assert_eq!(
            texts,
            [
                "UPDATE threads SET n = $1 WHERE id = $2",
                "WITH s0 AS (INSERT INTO a (x, y) VALUES ($1, $2)), \
                 s1 AS (INSERT INTO b (x) VALUES ($3)) \
                 INSERT INTO c (x, note) VALUES ($4, 'costs $2')",
                "INSERT INTO d (x) VALUES ($1) ON CONFLICT DO NOTHING",
                "INSERT INTO e (x) VALUES ($1)",
            ]
        );
        let values: Vec<String> = merged[1]
            .args
            .iter()
            .map(|v| match v {
                Value::Text(Some(t)) => t.clone(),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(values, ["a1", "a2", "b1", "c1"]);
        assert!(merge_plain_inserts(&[]).is_empty());
    }

    /// A write marked as joining inserts joins them, where it is, as the
    /// same update unmarked does not.
    #[test]
    fn a_joining_write_joins_the_inserts_around_it() {
        let update = || sql!("UPDATE k SET done = 1 WHERE key = $1", "k1");
        let statements = vec![
            sql!("INSERT INTO a (x) VALUES ($1)", "a1"),
            update().joining_inserts(),
            sql!(
                "INSERT INTO b (x) VALUES ($1) ON CONFLICT (x) DO NOTHING",
                "b1"
            )
            .joining_inserts(),
        ];
        let merged = merge_plain_inserts(&statements);
        let texts: Vec<&str> = merged.iter().map(Sql::text).collect();
        assert_eq!(
            texts,
            ["WITH s0 AS (INSERT INTO a (x) VALUES ($1)), \
              s1 AS (UPDATE k SET done = 1 WHERE key = $2) \
              INSERT INTO b (x) VALUES ($3) ON CONFLICT (x) DO NOTHING"]
        );
        let unmarked = merge_plain_inserts(&[statements[0].clone(), update()]);
        assert_eq!(unmarked.len(), 2);
    }

    /// An insert joined as a named CTE returns its rows to the statement
    /// joined after it; on PostgreSQL that statement reads them (a value
    /// the insert computed, here a copy of the key).
    #[tokio::test]
    async fn an_insert_joined_as_a_cte_hands_its_rows_to_the_next() {
        let statements = |key: &str| {
            vec![
                sql!("INSERT INTO settings (key, value) VALUES ($1, 'v')", key)
                    .joined_as("made", "key"),
                sql!("INSERT INTO settings (key, value) SELECT key || '-copy', 'c' FROM made")
                    .joining_inserts(),
                sql!(
                    "INSERT INTO settings (key, value) VALUES ($1, 'w')",
                    format!("{key}-w")
                ),
            ]
        };
        let merged = merge_plain_inserts(&statements("k"));
        let texts: Vec<&str> = merged.iter().map(Sql::text).collect();
        assert_eq!(
            texts,
            [
                "WITH made AS (INSERT INTO settings (key, value) VALUES ($1, 'v') RETURNING key), \
              s1 AS (INSERT INTO settings (key, value) SELECT key || '-copy', 'c' FROM made) \
              INSERT INTO settings (key, value) VALUES ($2, 'w')"
            ]
        );
        assert!(statements("k")[0].inserts_into("settings"));
        assert!(!statements("k")[0].inserts_into("setting"));
        let Some(db) = fresh_postgres().await else {
            return;
        };
        let mut tx = db.begin().await.unwrap();
        execute_all(&mut tx, Backend::Postgres, &statements("joined"))
            .await
            .unwrap();
        tx.commit().await.unwrap();
        assert_eq!(
            settings_like(&db, "joined").await,
            [
                ("joined".to_string(), "v".to_string()),
                ("joined-copy".to_string(), "c".to_string()),
                ("joined-w".to_string(), "w".to_string()),
            ]
        );
        db.close().await;
    }

    /// The write and the reads of one call: whether the write took, and
    /// the reads' rows, on either backend.
    #[tokio::test]
    async fn a_write_then_lookups_says_whether_it_wrote() {
        let temp = TempSqlite::new("write-lookup").await;
        let pg = fresh_postgres().await;
        let mut dbs = vec![temp.db.clone()];
        dbs.extend(pg.clone());
        for db in &dbs {
            let claim = || {
                sql!(
                    "INSERT INTO settings (key, value) VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING key",
                    "claimed",
                    "v"
                )
            };
            let read = sql!("SELECT value FROM settings WHERE key = $1", "claimed");
            let (wrote, [rows]) = db.write_then_lookup_each(&claim(), [&read]).await.unwrap();
            assert!(wrote);
            // On PostgreSQL the read sees the store as of before the write.
            assert_eq!(rows.len(), usize::from(db.backend() == Backend::Sqlite));
            let (wrote, [rows]) = db.write_then_lookup_each(&claim(), [&read]).await.unwrap();
            assert!(!wrote, "the key was taken");
            assert_eq!(rows[0].text("value").unwrap(), "v");
        }
        if let Some(pg) = pg {
            pg.close().await;
        }
        temp.remove().await;
    }

    fn inserts(prefix: &str) -> Vec<Sql> {
        (0..5i64)
            .map(|i| {
                sql!(
                    "INSERT INTO settings (key, value) VALUES ($1, $2)",
                    format!("{prefix}{i}"),
                    format!("v{i}")
                )
            })
            .collect()
    }

    async fn settings_like(db: &Db, prefix: &str) -> Vec<(String, String)> {
        sql!(
            "SELECT key, value FROM settings WHERE key LIKE $1 ORDER BY key",
            format!("{prefix}%")
        )
        .fetch_all(db.reader())
        .await
        .unwrap()
        .iter()
        .map(|r| (r.text("key").unwrap(), r.text("value").unwrap()))
        .collect()
    }

    #[tokio::test]
    async fn execute_all_runs_every_statement_on_sqlite_in_both_kinds_of_transaction() {
        let temp = TempSqlite::new("exec").await;
        // sqlx's connection, as one multi-statement call.
        let mut tx = temp.db.begin().await.unwrap();
        execute_all(&mut tx, Backend::Sqlite, &inserts("x"))
            .await
            .unwrap();
        tx.commit().await.unwrap();
        // The group writer's connection, one by one.
        temp.db
            .write(|tx| {
                Box::pin(async move { execute_all(tx, Backend::Sqlite, &inserts("y")).await })
            })
            .await
            .unwrap();
        for prefix in ["x", "y"] {
            let want: Vec<(String, String)> = (0..5)
                .map(|i| (format!("{prefix}{i}"), format!("v{i}")))
                .collect();
            assert_eq!(settings_like(&temp.db, prefix).await, want);
        }
        temp.remove().await;
    }
}
