//! The rules of the service, callable without HTTP.
pub mod domains;
pub mod drafts;
pub mod events;
pub mod idempotency;
pub mod inbound;
pub mod inbound_hook;
pub mod labels;
pub mod mailboxes;
pub mod messages;
pub mod provider_events;
pub mod quota;
pub mod search;
pub mod sending;
pub mod suppressions;
pub mod thread_actions;
pub mod threads;
pub mod validate;
