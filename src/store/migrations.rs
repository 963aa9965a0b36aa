//! Embedded, ordered migrations. Each step has a SQLite and a PostgreSQL form
//! only because DDL differs (types, full-text search); queries do not.

use super::{Backend, Db};
use crate::core::{search, search_postgres};
use crate::sql;
use crate::store::RowExt;

struct Migration {
    version: i64,
    name: &'static str,
    sqlite: &'static str,
    postgres: &'static str,
}

/// Tables shared verbatim by both dialects (BIGINT and TEXT mean the same to both).
const FOUNDATION: &str = r#"
CREATE TABLE settings (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE api_keys (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    secret_hash TEXT NOT NULL,
    scopes TEXT NOT NULL,
    reach_kind TEXT NOT NULL,
    reach_values TEXT NOT NULL,
    rate_limit BIGINT,
    created_at BIGINT NOT NULL,
    revoked_at BIGINT
);
CREATE TABLE domains (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    region TEXT NOT NULL,
    status TEXT NOT NULL,
    sending_enabled BIGINT NOT NULL,
    dkim_status TEXT NOT NULL,
    dkim_origin TEXT NOT NULL,
    dkim_tokens TEXT NOT NULL,
    mail_from_domain TEXT NOT NULL,
    mail_from_status TEXT NOT NULL,
    spf_verified BIGINT NOT NULL,
    dmarc_verified BIGINT NOT NULL,
    inherited_from TEXT,
    auto_create_mailboxes BIGINT NOT NULL,
    imported BIGINT NOT NULL,
    last_checked_at BIGINT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE TABLE mailboxes (
    id TEXT PRIMARY KEY,
    address TEXT NOT NULL UNIQUE,
    domain TEXT NOT NULL,
    domain_id TEXT NOT NULL,
    display_name TEXT NOT NULL,
    signature TEXT,
    is_catch_all BIGINT NOT NULL,
    is_default BIGINT NOT NULL,
    color TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX mailboxes_domain ON mailboxes (domain);
CREATE INDEX mailboxes_domain_id ON mailboxes (domain_id);
"#;

/// Mail: threads, messages and what hangs off them. `{BLOB}` and `{SEQ}` are
/// filled per dialect.
const MAIL: &str = r#"
CREATE TABLE threads (
    id TEXT PRIMARY KEY,
    mailbox_id TEXT NOT NULL,
    mailbox TEXT NOT NULL,
    domain TEXT NOT NULL,
    subject TEXT NOT NULL,
    normalized_subject TEXT NOT NULL,
    snippet TEXT NOT NULL,
    folders TEXT NOT NULL,
    participants TEXT NOT NULL,
    message_count BIGINT NOT NULL,
    unread_count BIGINT NOT NULL,
    is_starred BIGINT NOT NULL,
    has_attachments BIGINT NOT NULL,
    last_message_at BIGINT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX threads_recent ON threads (last_message_at DESC, id DESC);
CREATE INDEX threads_mailbox_recent ON threads (mailbox_id, last_message_at DESC, id DESC);
CREATE INDEX threads_subject ON threads (mailbox_id, normalized_subject, last_message_at);

CREATE TABLE messages (
    seq {SEQ},
    id TEXT NOT NULL UNIQUE,
    thread_id TEXT NOT NULL,
    mailbox_id TEXT NOT NULL,
    mailbox TEXT NOT NULL,
    domain TEXT NOT NULL,
    direction TEXT NOT NULL,
    is_draft BIGINT NOT NULL,
    folder TEXT NOT NULL,
    message_id TEXT NOT NULL,
    provider_message_id TEXT,
    from_address TEXT NOT NULL,
    from_name TEXT,
    to_addresses TEXT NOT NULL,
    cc_addresses TEXT NOT NULL,
    bcc_addresses TEXT NOT NULL,
    reply_to TEXT,
    subject TEXT NOT NULL,
    text_body TEXT NOT NULL,
    html_body TEXT NOT NULL,
    search_body TEXT NOT NULL,
    headers TEXT NOT NULL,
    in_reply_to TEXT,
    references_header TEXT,
    status TEXT NOT NULL,
    error TEXT,
    opened_at BIGINT,
    open_count BIGINT NOT NULL,
    open_token TEXT,
    is_read BIGINT NOT NULL,
    is_starred BIGINT NOT NULL,
    has_attachments BIGINT NOT NULL,
    api_key_id TEXT,
    raw {BLOB},
    created_at BIGINT NOT NULL,
    sent_at BIGINT,
    received_at BIGINT
);
CREATE INDEX messages_thread ON messages (thread_id, created_at);
CREATE INDEX messages_outbound_recent ON messages (direction, is_draft, created_at DESC, id DESC);
CREATE INDEX messages_received_recent ON messages (received_at DESC, id DESC);
CREATE INDEX messages_mailbox_message_id ON messages (mailbox_id, message_id);
CREATE INDEX messages_provider_id ON messages (provider_message_id);
CREATE INDEX messages_open_token ON messages (open_token);

CREATE TABLE message_recipients (
    message_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    address TEXT NOT NULL
);
CREATE INDEX message_recipients_message ON message_recipients (message_id);
CREATE INDEX message_recipients_address ON message_recipients (address);

CREATE TABLE attachments (
    id TEXT PRIMARY KEY,
    message_id TEXT NOT NULL,
    filename TEXT NOT NULL,
    content_type TEXT NOT NULL,
    size BIGINT NOT NULL,
    content_id TEXT,
    inline BIGINT NOT NULL,
    content {BLOB} NOT NULL
);
CREATE INDEX attachments_message ON attachments (message_id);

CREATE TABLE message_events (
    id TEXT PRIMARY KEY,
    message_id TEXT NOT NULL,
    type TEXT NOT NULL,
    recipient TEXT,
    detail TEXT,
    occurred_at BIGINT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX message_events_message ON message_events (message_id, occurred_at);

CREATE TABLE suppressions (
    id TEXT PRIMARY KEY,
    address TEXT NOT NULL UNIQUE,
    reason TEXT NOT NULL,
    detail TEXT,
    domain TEXT,
    mailbox TEXT,
    message_id TEXT,
    created_at BIGINT NOT NULL
);
CREATE INDEX suppressions_recent ON suppressions (created_at DESC, id DESC);

CREATE TABLE idempotency_keys (
    api_key_id TEXT NOT NULL,
    endpoint TEXT NOT NULL,
    key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    state TEXT NOT NULL,
    response_status BIGINT,
    response_body TEXT,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (api_key_id, endpoint, key)
);
CREATE INDEX idempotency_keys_age ON idempotency_keys (created_at);

CREATE TABLE sns_seen (
    message_id TEXT PRIMARY KEY,
    created_at BIGINT NOT NULL
);
"#;

/// Inbound mail: contacts seen per mailbox, and at most one received copy of a
/// Message-ID per mailbox (the dedupe rule, enforced even between concurrent
/// deliveries). Shared verbatim by both dialects.
const INBOUND: &str = r#"
CREATE TABLE contacts (
    id TEXT PRIMARY KEY,
    mailbox_id TEXT NOT NULL,
    mailbox TEXT NOT NULL,
    domain TEXT NOT NULL,
    address TEXT NOT NULL,
    name TEXT,
    message_count BIGINT NOT NULL,
    first_seen_at BIGINT NOT NULL,
    last_seen_at BIGINT NOT NULL,
    UNIQUE (mailbox_id, address)
);
CREATE INDEX contacts_recent ON contacts (last_seen_at DESC, id DESC);
CREATE INDEX contacts_frequent ON contacts (message_count DESC, id DESC);
CREATE INDEX contacts_mailbox_recent ON contacts (mailbox_id, last_seen_at DESC, id DESC);
CREATE INDEX contacts_address ON contacts (address);
CREATE UNIQUE INDEX messages_inbound_once ON messages (mailbox_id, message_id) WHERE direction = 'inbound';
"#;

/// Webhook endpoints, their delivery queue (one task per event and endpoint,
/// claimed with a lease) and the record of every attempt. Shared verbatim by
/// both dialects.
const WEBHOOKS: &str = r#"
CREATE TABLE webhooks (
    id TEXT PRIMARY KEY,
    url TEXT NOT NULL,
    description TEXT NOT NULL,
    events TEXT NOT NULL,
    enabled BIGINT NOT NULL,
    mailbox_id TEXT,
    secret TEXT NOT NULL,
    last_status BIGINT,
    last_delivered_at BIGINT,
    last_error_at BIGINT,
    last_error TEXT,
    consecutive_failures BIGINT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX webhooks_mailbox ON webhooks (mailbox_id);
CREATE TABLE webhook_tasks (
    id TEXT PRIMARY KEY,
    webhook_id TEXT NOT NULL,
    event_id TEXT NOT NULL,
    event_type TEXT NOT NULL,
    payload TEXT NOT NULL,
    attempt BIGINT NOT NULL,
    next_attempt_at BIGINT NOT NULL,
    lease_until BIGINT,
    created_at BIGINT NOT NULL
);
CREATE INDEX webhook_tasks_due ON webhook_tasks (webhook_id, next_attempt_at);
CREATE TABLE webhook_deliveries (
    id TEXT PRIMARY KEY,
    envelope_id TEXT NOT NULL,
    webhook_id TEXT NOT NULL,
    event_id TEXT,
    event TEXT NOT NULL,
    payload TEXT NOT NULL,
    attempt BIGINT NOT NULL,
    status_code BIGINT NOT NULL,
    response_body TEXT NOT NULL,
    error TEXT,
    duration_ms BIGINT NOT NULL,
    succeeded BIGINT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX webhook_deliveries_recent ON webhook_deliveries (created_at DESC, id DESC);
CREATE INDEX webhook_deliveries_webhook ON webhook_deliveries (webhook_id, created_at DESC, id DESC);
CREATE INDEX webhook_deliveries_envelope ON webhook_deliveries (envelope_id);
"#;

const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "foundation",
        sqlite: FOUNDATION,
        postgres: FOUNDATION,
    },
    Migration {
        version: 2,
        name: "event outbox",
        sqlite: r#"
CREATE TABLE events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    type TEXT NOT NULL,
    mailbox_id TEXT,
    payload TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    dispatched_at BIGINT
);
CREATE INDEX events_undispatched ON events (seq) WHERE dispatched_at IS NULL;
"#,
        postgres: r#"
CREATE TABLE events (
    seq BIGSERIAL PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    type TEXT NOT NULL,
    mailbox_id TEXT,
    payload TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    dispatched_at BIGINT
);
CREATE INDEX events_undispatched ON events (seq) WHERE dispatched_at IS NULL;
"#,
    },
    Migration {
        version: 3,
        name: "mail",
        sqlite: "",
        postgres: "",
    },
    Migration {
        version: 4,
        name: "webhooks",
        sqlite: WEBHOOKS,
        postgres: WEBHOOKS,
    },
    Migration {
        version: 5,
        name: "inbound",
        sqlite: INBOUND,
        postgres: INBOUND,
    },
    Migration {
        version: 6,
        name: "labels",
        sqlite: LABELS,
        postgres: LABELS,
    },
    Migration {
        version: 7,
        name: "inbox indexes",
        sqlite: INBOX_INDEXES,
        postgres: INBOX_INDEXES,
    },
    Migration {
        version: 8,
        name: "search statistics",
        // SQLite's FTS5 index needs no planner statistics.
        sqlite: "SELECT 1;",
        postgres: SEARCH_STATISTICS,
    },
    Migration {
        version: 9,
        name: "rare folder indexes",
        sqlite: RARE_FOLDER_INDEXES,
        postgres: RARE_FOLDER_INDEXES,
    },
    Migration {
        version: 10,
        name: "thread search index",
        sqlite: THREAD_SEARCH,
        // PostgreSQL's planner walks or collects by itself (see `search`).
        postgres: "SELECT 1;",
    },
    Migration {
        version: 11,
        name: "waiting provider events",
        sqlite: WAITING_PROVIDER_EVENTS,
        postgres: WAITING_PROVIDER_EVENTS,
    },
    Migration {
        version: 12,
        name: "rate windows",
        sqlite: RATE_WINDOWS,
        postgres: RATE_WINDOWS,
    },
    Migration {
        version: 13,
        name: "send intents",
        sqlite: SEND_INTENTS,
        postgres: SEND_INTENTS,
    },
    Migration {
        version: 14,
        name: "request ids of events",
        sqlite: REQUEST_IDS,
        postgres: REQUEST_IDS,
    },
    Migration {
        version: 15,
        name: "thread search documents",
        // SQLite has its thread index since migration 10.
        sqlite: "SELECT 1;",
        // With the backfill: see `ddl`.
        postgres: search_postgres::THREAD_DOCUMENTS,
    },
    Migration {
        version: 16,
        name: "subject threading in index order",
        sqlite: SUBJECT_THREADING,
        postgres: SUBJECT_THREADING,
    },
    Migration {
        version: 17,
        name: "search by era, received mail in order",
        sqlite: RECEIVED_IN_ORDER,
        // With the documents' era indexes: see `ddl`.
        postgres: RECEIVED_IN_ORDER,
    },
    Migration {
        version: 18,
        name: "search functions PostgreSQL inlines",
        sqlite: "SELECT 1;",
        // With `ph_eras`: see `ddl`.
        postgres: search_postgres::THREAD_DOC_FUNCTION,
    },
    Migration {
        version: 19,
        name: "sent and received mail searched apart",
        sqlite: "SELECT 1;",
        // `search_postgres::message_sides_index`: see `ddl`.
        postgres: "SELECT 1;",
    },
    Migration {
        version: 20,
        name: "search functions planned once per connection",
        sqlite: "SELECT 1;",
        // `search_postgres::matching_functions`: see `ddl`.
        postgres: "SELECT 1;",
    },
    Migration {
        version: 21,
        name: "a message's matches name their side",
        sqlite: "SELECT 1;",
        // `search_postgres::sided_message_matches`: see `ddl`.
        postgres: "SELECT 1;",
    },
];

/// Received mail newest first (`GET /messages`). The index had every
/// message, and sent mail has no `received_at`: PostgreSQL puts NULLs first
/// in a descending order, so the list read every sent message before the
/// first received one (27 ms at 10,000 messages, linear in the store).
/// The list asks `direction <> 'outbound'` (the same rows: there are two
/// directions) because a planner without statistics takes an equality for
/// a rare value, and would collect and sort instead of reading the index.
const RECEIVED_IN_ORDER: &str = r#"
CREATE INDEX messages_received_in_order ON messages (received_at DESC, id DESC) WHERE direction <> 'outbound';
DROP INDEX messages_received_recent;
"#;

/// A message threaded by its subject looks for the newest thread of its
/// mailbox with that subject (`inbound::by_subject`). The index had the
/// subject but not the order, so a plan could as well walk the mailbox's
/// threads newest first and filter the subject, reading every thread of the
/// window: PostgreSQL's generic plan made while the table was small did,
/// and kept doing as it grew. In the query's order it is the one index
/// that answers it from its first entry.
const SUBJECT_THREADING: &str = r#"
DROP INDEX threads_subject;
CREATE INDEX threads_subject ON threads (mailbox_id, normalized_subject, last_message_at DESC, id DESC);
"#;

/// What a keyed send meant to send, written with its idempotency record
/// before the provider is called (`core::interrupted`); the SES tag that
/// names the message an event is for, kept with a waiting event; and the
/// two partial indexes that let the recovery sweeps find what they look
/// for without reading every record.
const SEND_INTENTS: &str = r#"
ALTER TABLE idempotency_keys ADD COLUMN intent TEXT;
CREATE INDEX idempotency_keys_running ON idempotency_keys (created_at) WHERE state = 'running';
ALTER TABLE waiting_provider_events ADD COLUMN message_tag TEXT;
CREATE INDEX waiting_provider_events_tag ON waiting_provider_events (message_tag) WHERE message_tag IS NOT NULL;
CREATE INDEX messages_queued ON messages (created_at) WHERE status = 'queued';
"#;

/// The id of the HTTP request that caused an event, carried to its webhook
/// tasks so that an attempt logs it (`telemetry::context`). Null for events
/// no request caused (SMTP, SNS sweeps) and for rows written before.
const REQUEST_IDS: &str = r#"
ALTER TABLE events ADD COLUMN request_id TEXT;
ALTER TABLE webhook_tasks ADD COLUMN request_id TEXT;
"#;

/// Provider events not applied yet (`core::waiting_events`): for a message
/// not recorded yet, or planned (the simulator's outcomes) and not due yet.
/// `seq` is the arrival order; `{SEQ}` is filled per dialect.
const WAITING_PROVIDER_EVENTS: &str = r#"
CREATE TABLE waiting_provider_events (
    seq {SEQ},
    provider_message_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    recipients TEXT NOT NULL,
    detail TEXT,
    occurred_at BIGINT NOT NULL,
    delivery_id TEXT,
    due_at BIGINT NOT NULL,
    check_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX waiting_provider_events_message ON waiting_provider_events (provider_message_id, seq);
CREATE INDEX waiting_provider_events_check ON waiting_provider_events (check_at);
"#;

/// Calls leased per key and one-minute window by the processes of a
/// deployment (`core::rate_windows`); `granted` is the last lease's size.
const RATE_WINDOWS: &str = r#"
CREATE TABLE rate_windows (
    who TEXT NOT NULL,
    window_start BIGINT NOT NULL,
    leased BIGINT NOT NULL,
    granted BIGINT NOT NULL,
    PRIMARY KEY (who, window_start)
);
"#;

/// `GET /threads?folder=spam` (or trash, drafts) walked every thread when few
/// or none were in the folder. A partial index per rare folder holds just
/// its threads; the list query names the folder as the same literal so that
/// both planners can use it.
/// SQLite: every thread's messages as one document of an FTS5 index whose
/// rowid orders threads newest first (see `search::THREAD_KEY_SPAN`), so a
/// thread search reads the index from its newest end and stops at a page.
/// Existing threads are indexed by `search::thread_index_backfill`.
const THREAD_SEARCH: &str = r#"
ALTER TABLE threads ADD COLUMN search_key INTEGER;
CREATE UNIQUE INDEX threads_search_key ON threads (search_key);
CREATE VIRTUAL TABLE threads_fts USING fts5(body, content='', contentless_delete=1);
"#;

const RARE_FOLDER_INDEXES: &str = r#"
CREATE INDEX threads_in_spam ON threads (last_message_at DESC, id DESC) WHERE folders LIKE '%,spam,%';
CREATE INDEX threads_in_trash ON threads (last_message_at DESC, id DESC) WHERE folders LIKE '%,trash,%';
CREATE INDEX threads_in_drafts ON threads (last_message_at DESC, id DESC) WHERE folders LIKE '%,drafts,%';
"#;

/// With the default sample the planner guesses a rare word's frequency from
/// the commonest ones, and picks a walk of every message for it; a larger
/// sample of the tsvector lets it see that the GIN index is the cheap path.
const SEARCH_STATISTICS: &str = r#"
ALTER TABLE messages ALTER COLUMN search SET STATISTICS 1000;
"#;

/// `GET /threads?mailbox=<address>` filters on `threads.mailbox`: without this
/// index a quiet or new mailbox walks every thread of the account.
const INBOX_INDEXES: &str = r#"
CREATE INDEX threads_mailbox_address_recent ON threads (mailbox, last_message_at DESC, id DESC);
"#;

/// Labels on threads.
const LABELS: &str = r#"
CREATE TABLE labels (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    name_key TEXT NOT NULL UNIQUE,
    color TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE TABLE thread_labels (
    thread_id TEXT NOT NULL,
    label_id TEXT NOT NULL,
    PRIMARY KEY (thread_id, label_id)
);
CREATE INDEX thread_labels_label ON thread_labels (label_id);
"#;

/// DDL of one migration for one dialect.
fn ddl(m: &Migration, backend: Backend) -> String {
    match (m.version, backend) {
        (3, Backend::Sqlite) => {
            MAIL.replace("{SEQ}", "INTEGER PRIMARY KEY AUTOINCREMENT")
                .replace("{BLOB}", "BLOB")
                + "CREATE VIRTUAL TABLE messages_fts USING fts5(subject, body, content='', contentless_delete=1);"
        }
        (3, Backend::Postgres) => {
            MAIL.replace("{SEQ}", "BIGSERIAL PRIMARY KEY")
                .replace("{BLOB}", "BYTEA")
                + "ALTER TABLE messages ADD COLUMN search tsvector GENERATED ALWAYS AS \
               (to_tsvector('simple', subject || ' ' || search_body)) STORED;\
               CREATE INDEX messages_search ON messages USING GIN (search);"
        }
        (10, Backend::Sqlite) => format!("{}{}", m.sqlite, search::thread_index_backfill()),
        (15, Backend::Postgres) => format!(
            "{}{}{}",
            search_postgres::THREAD_DOC_FUNCTION,
            m.postgres,
            search_postgres::THREAD_DOCUMENTS_BACKFILL
        ),
        (17, Backend::Postgres) => format!("{}{}", m.postgres, search_postgres::era_indexes()),
        (18, Backend::Postgres) => format!(
            "{}{}{}",
            m.postgres,
            search_postgres::eras_function(),
            search_postgres::ERA_INDEXES_REREAD
        ),
        (19, Backend::Postgres) => search_postgres::message_sides_index(),
        (20, Backend::Postgres) => search_postgres::matching_functions(),
        (21, Backend::Postgres) => search_postgres::sided_message_matches(),
        // An INTEGER PRIMARY KEY is SQLite's rowid: each new row's is above
        // every row's there is, which is all the order `seq` must keep.
        (_, Backend::Sqlite) => m.sqlite.replace("{SEQ}", "INTEGER PRIMARY KEY"),
        (_, Backend::Postgres) => m.postgres.replace("{SEQ}", "BIGSERIAL PRIMARY KEY"),
    }
}

/// Applies every migration not yet recorded. On PostgreSQL an advisory lock
/// keeps several starting processes from migrating at once.
pub(super) async fn apply(db: &Db) -> anyhow::Result<()> {
    let mut conn = db.writer.acquire().await?;
    if db.backend == Backend::Postgres {
        sqlx::raw_sql("SELECT pg_advisory_lock(7283451)")
            .execute(&mut *conn)
            .await?;
    }
    let result = apply_locked(db.backend, &mut conn).await;
    if db.backend == Backend::Postgres {
        sqlx::raw_sql("SELECT pg_advisory_unlock(7283451)")
            .execute(&mut *conn)
            .await?;
    }
    result
}

async fn apply_locked(backend: Backend, conn: &mut sqlx::AnyConnection) -> anyhow::Result<()> {
    sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version BIGINT PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)",
    )
    .execute(&mut *conn)
    .await?;
    let rows = sql!("SELECT version FROM schema_migrations")
        .fetch_all(&mut *conn)
        .await?;
    let applied: Vec<i64> = rows
        .iter()
        .map(|r| r.int("version"))
        .collect::<Result<_, _>>()?;
    for m in MIGRATIONS {
        if applied.contains(&m.version) {
            continue;
        }
        let ddl = ddl(m, backend);
        let mut tx = sqlx::Connection::begin(&mut *conn).await?;
        sqlx::raw_sql(&ddl)
            .execute(&mut *tx)
            .await
            .map_err(|e| anyhow::anyhow!("migration {} ({}) failed: {e}", m.version, m.name))?;
        sql!(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)",
            m.version,
            m.name,
            crate::clock::now_micros()
        )
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
    }
    Ok(())
}
