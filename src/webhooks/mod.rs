//! Webhook delivery: endpoints, the delivery queue and engine, signing and
//! URL safety.
pub mod deliveries;
pub mod endpoints;
pub mod engine;
pub mod queue;
pub mod sender;
pub mod signature;
pub mod ssrf;

pub use engine::Webhooks;
