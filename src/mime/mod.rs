//! Mail formats: composing outgoing MIME (mail-builder) and parsing incoming
//! MIME (mail-parser).
pub mod compose;
pub mod header_fields;
