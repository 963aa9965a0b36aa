//! Webhook event payloads: what the outbox stores and what a receiver gets.
//!
//! The outbox stores `{type, created_at, data}` ([`EventEnvelope`]); the body
//! posted to a receiver is that object with the delivery id in front
//! (`{id, type, created_at, data}`, see `webhooks::queue::envelope_body`).
//! Field order and absent-versus-null are part of the bytes a receiver signs
//! over, so each `data` is a type here rather than assembled as a value.

use serde::Serialize;
use utoipa::ToSchema;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::openapi::{Ref, RefOr};

use super::Timestamp;
use super::domains::DomainEventData;
use super::messages::Message;
use super::threads::Thread;
use super::webhooks::EventName;
use crate::ids::{DeliveryId, WebhookId};

/// An event as the outbox stores it: its name, when it was written, and
/// what happened.
#[derive(Debug, Serialize)]
pub struct EventEnvelope<T> {
    #[serde(rename = "type")]
    pub kind: EventName,
    pub created_at: Timestamp,
    pub data: T,
}

/// The `data` of the `email.*` events: the message without bodies.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EmailEventData {
    pub email: Message,
    /// When it happened (for `email.sent`, when the provider accepted it).
    pub occurred_at: Timestamp,
    /// `email.sent` only: when the provider accepted it.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub sent_at: Option<Timestamp>,
    /// Provider events: the recipients the event concerns, when it names any.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub recipients: Option<Vec<String>>,
    /// Provider events: diagnostic detail (a bounce's SMTP line), when given.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub detail: Option<String>,
}

/// The `data` of `mail.received`: the received message (with its
/// `thread_id`) without bodies.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct MailReceivedData {
    pub email: Message,
    /// When it was stored.
    pub received_at: Timestamp,
}

/// The `data` of `thread.updated`: the thread after the change.
#[derive(Debug, Serialize, ToSchema)]
pub struct ThreadEventData {
    pub thread: Thread,
    /// When it changed.
    pub occurred_at: Timestamp,
}

/// The `data` of `webhook.test`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct WebhookTestData {
    pub webhook_id: WebhookId,
    /// The endpoint's URL.
    pub url: String,
    /// When the ping was sent.
    pub occurred_at: Timestamp,
}

/// The schema name of the `data` an event carries. Exhaustive, so that a
/// new event name has to say what it sends.
pub fn data_schema_name(name: EventName) -> String {
    match name {
        EventName::EmailSent
        | EventName::EmailDelivered
        | EventName::EmailBounced
        | EventName::EmailComplained
        | EventName::EmailRejected
        | EventName::EmailDelayed
        | EventName::EmailFailed
        | EventName::EmailOpened
        | EventName::EmailClicked => EmailEventData::name(),
        EventName::MailReceived => MailReceivedData::name(),
        EventName::ThreadUpdated => ThreadEventData::name(),
        EventName::DomainVerified | EventName::DomainFailed => DomainEventData::name(),
        EventName::WebhookTest => WebhookTestData::name(),
    }
    .into_owned()
}

/// Every schema the event bodies refer to, dependencies included, for the
/// document's `components/schemas`.
pub fn data_schemas() -> Vec<(String, RefOr<Schema>)> {
    fn add<T: ToSchema>(out: &mut Vec<(String, RefOr<Schema>)>) {
        out.push((T::name().into_owned(), T::schema()));
        T::schemas(out);
    }
    let mut out = Vec::new();
    add::<EmailEventData>(&mut out);
    add::<MailReceivedData>(&mut out);
    add::<ThreadEventData>(&mut out);
    add::<DomainEventData>(&mut out);
    add::<WebhookTestData>(&mut out);
    add::<DeliveryId>(&mut out);
    add::<WebhookId>(&mut out);
    add::<Timestamp>(&mut out);
    out
}

/// The body a receiver gets for the event `name`: `{id, type, created_at,
/// data}`, `type` being that name.
pub fn body_schema(name: EventName) -> Schema {
    ObjectBuilder::new()
        .description(Some(format!(
            "The `{}` event. `id` equals the `webhook-id` header and stays the same \
             across retries and replays.",
            name.as_str()
        )))
        .property("id", Ref::from_schema_name(DeliveryId::name()))
        .property(
            "type",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some([name.as_str()])),
        )
        .property("created_at", Ref::from_schema_name(Timestamp::name()))
        .property("data", Ref::from_schema_name(data_schema_name(name)))
        .required("id")
        .required("type")
        .required("created_at")
        .required("data")
        .into()
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::model::messages::{Direction, MessageObject, MessageStatus};

    fn message() -> Message {
        Message {
            object: MessageObject,
            id: crate::ids::Id::from_stored("msg_1".into()),
            message_id: "<a@b>".into(),
            provider_message_id: Some("p-1".into()),
            thread_id: crate::ids::Id::from_stored("thr_1".into()),
            mailbox_id: crate::ids::Id::from_stored("mbx_1".into()),
            direction: Direction::Outbound,
            from: "a@x.com".into(),
            from_name: None,
            to: vec!["b@y.com".into()],
            cc: vec![],
            bcc: vec![],
            reply_to: None,
            subject: "Hi".into(),
            status: MessageStatus::Sent,
            error: None,
            opened_at: None,
            open_count: 0,
            is_read: true,
            is_starred: false,
            is_draft: false,
            has_attachments: false,
            in_reply_to: None,
            references: None,
            api_key_id: Some(crate::ids::Id::from_stored("key_1".into())),
            created_at: Timestamp(1_795_000_000_000_000),
            sent_at: Some(Timestamp(1_795_000_000_000_001)),
            received_at: None,
        }
    }

    fn summary() -> Value {
        serde_json::to_value(message()).unwrap()
    }

    fn iso(t: i64) -> String {
        crate::clock::iso(t)
    }

    /// The bytes, not just the value: field order is part of the payload.
    fn same_bytes<T: Serialize>(typed: &T, before: Value) {
        assert_eq!(serde_json::to_string(typed).unwrap(), before.to_string());
    }

    #[test]
    fn the_envelope_is_type_created_at_data() {
        let e = EventEnvelope {
            kind: EventName::EmailDelivered,
            created_at: Timestamp(7),
            data: json!({"x": 1}),
        };
        same_bytes(
            &e,
            json!({ "type": "email.delivered", "created_at": iso(7), "data": {"x": 1} }),
        );
    }

    #[test]
    fn email_sent_data_carries_sent_at_after_occurred_at() {
        let d = EmailEventData {
            email: message(),
            occurred_at: Timestamp(9),
            sent_at: Some(Timestamp(9)),
            recipients: None,
            detail: None,
        };
        let mut before = json!({ "email": summary(), "occurred_at": iso(9) });
        before["sent_at"] = json!(iso(9));
        same_bytes(&d, before);
    }

    #[test]
    fn email_event_data_leaves_out_what_the_event_does_not_name() {
        let bare = EmailEventData {
            email: message(),
            occurred_at: Timestamp(9),
            sent_at: None,
            recipients: None,
            detail: None,
        };
        same_bytes(&bare, json!({ "email": summary(), "occurred_at": iso(9) }));
        let full = EmailEventData {
            recipients: Some(vec!["b@y.com".into()]),
            detail: Some("550 5.1.1 no such user".into()),
            ..bare
        };
        let mut before = json!({ "email": summary(), "occurred_at": iso(9) });
        before["recipients"] = json!(["b@y.com"]);
        before["detail"] = json!("550 5.1.1 no such user");
        same_bytes(&full, before);
    }

    #[test]
    fn mail_received_data_is_email_then_received_at() {
        let d = MailReceivedData {
            email: message(),
            received_at: Timestamp(11),
        };
        same_bytes(&d, json!({ "email": summary(), "received_at": iso(11) }));
    }

    #[test]
    fn thread_event_data_is_thread_then_occurred_at() {
        let thread = Thread {
            object: crate::model::threads::ThreadObject,
            id: crate::ids::Id::from_stored("thr_1".into()),
            mailbox: "a@x.com".into(),
            mailbox_id: crate::ids::Id::from_stored("mbx_1".into()),
            subject: "Hi".into(),
            snippet: "".into(),
            folders: vec![crate::model::messages::Folder::Inbox],
            participants: vec![],
            message_count: 1,
            unread_count: 0,
            is_starred: false,
            has_attachments: false,
            last_message_at: Timestamp(3),
            created_at: Timestamp(2),
            labels: vec![],
        };
        let wire = serde_json::to_value(&thread).unwrap();
        let d = ThreadEventData {
            thread,
            occurred_at: Timestamp(5),
        };
        same_bytes(&d, json!({"thread": wire, "occurred_at": iso(5)}));
    }

    #[test]
    fn webhook_test_data_is_webhook_id_url_occurred_at() {
        let d = WebhookTestData {
            webhook_id: WebhookId::from_stored("whk_1".into()),
            url: "https://example.com/h".into(),
            occurred_at: Timestamp(4),
        };
        same_bytes(
            &d,
            json!({ "webhook_id": "whk_1", "url": "https://example.com/h", "occurred_at": iso(4) }),
        );
    }

    #[test]
    fn every_event_has_a_body_schema_whose_data_is_collected() {
        let names: Vec<String> = data_schemas().into_iter().map(|(n, _)| n).collect();
        for e in EventName::ALL {
            assert!(names.contains(&data_schema_name(e)), "{}", e.as_str());
            let body = serde_json::to_value(body_schema(e)).unwrap();
            assert_eq!(body["properties"]["type"]["enum"], json!([e.as_str()]));
        }
    }
}
