//! Black-box tests of the HTTP API, one binary with a module per area. Each
//! test gets a fresh database: SQLite by default, PostgreSQL when
//! `PIGEONHOLE_TEST_POSTGRES_URL` is set.

mod helpers;

mod auth;
mod cli;
mod db_outage;
mod domains;
mod drafts;
mod email_lists;
mod emails;
mod errors;
mod faults;
mod fuzz;
mod http_edge;
mod idempotency;
mod inbound;
mod interrupted;
mod layering;
mod mailboxes;
mod message_memory;
mod metrics;
mod openapi;
mod ops;
mod processes;
mod provider_events;
mod reach_writes;
mod received;
mod receiver;
mod search_backends;
mod send_safety;
mod sending_rules;
mod ses_moto;
mod simulator;
mod smtp_hardening;
mod sns;
mod suppressions;
mod threads;
mod webhook_delivery;
mod webhooks;
