//! The real SES sending path end to end: `POST /api/v1/emails` → mail-builder
//! MIME → SES v2 `SendEmail` (raw content) through `aws-sdk-sesv2`, against a
//! local moto server, whose model dump (`/moto-api/data.json`) shows what SES
//! received. Skipped with a note when moto is not installed (set
//! `PIGEONHOLE_TEST_MOTO_PYTHON`); in CI (`CI=true`) a missing moto fails.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use base64::Engine;
use mail_parser::{MessageParser, MimeHeaders};
use serde_json::{Value, json};

use crate::helpers::{TestApp, Wrapped, Wrapping, assert_error, spawn_app_with_provider};
use pigeonhole::config::ProviderKind;
use pigeonhole::provider::moto_server::MotoServer;
use pigeonhole::provider::ses::SesProvider;
use pigeonhole::provider::{IdentityInfo, IdentityStatus, Provider, ProviderError};

const REGION: &str = "us-east-1";

/// The SES provider pointed at moto, passing every call through, with one
/// correction for a gap in moto.
///
/// Moto (5.2.5) answers `GetEmailIdentity` with `VerificationStatus: SUCCESS`
/// at once but hard-codes `VerifiedForSendingStatus: false`, and neither its
/// SES APIs nor `/moto-api` can change that; real SES turns it true once the
/// identity is verified. The service sends only from a domain that is
/// `verified` with `sending_enabled`, so with moto's answer unchanged no send
/// would ever reach it. Once `verified_for_sending` is set, an identity moto
/// reports as verified is also reported as verified for sending, as SES would.
struct MotoSes {
    ses: SesProvider,
    verified_for_sending: AtomicBool,
}

#[async_trait]
impl Wrapping for MotoSes {
    fn inner(&self) -> &dyn Provider {
        &self.ses
    }
    async fn get_identity(&self, domain: &str) -> Result<IdentityInfo, ProviderError> {
        let mut info = self.ses.get_identity(domain).await?;
        if self.verified_for_sending.load(Ordering::SeqCst)
            && info.status == IdentityStatus::Verified
        {
            info.sending_enabled = true;
        }
        Ok(info)
    }
}

/// The app configured as `PIGEONHOLE_PROVIDER=ses` against `moto`, with the
/// static test credentials (the process environment is left alone: tests
/// run in parallel).
async fn spawn_with_moto(
    moto: &MotoServer,
    verified_for_sending: bool,
) -> (TestApp, Arc<Wrapped<MotoSes>>) {
    let endpoint = moto.endpoint();
    let ses = SesProvider::with_static_credentials(
        Some(REGION.into()),
        Some(endpoint.clone()),
        "testing",
        "testing",
    )
    .await;
    let provider = Arc::new(Wrapped(MotoSes {
        ses,
        verified_for_sending: AtomicBool::new(verified_for_sending),
    }));
    let given = provider.clone();
    let configured = endpoint.clone();
    let app = spawn_app_with_provider(
        move |m| {
            m.insert("PIGEONHOLE_PROVIDER".into(), "ses".into());
            m.insert("PIGEONHOLE_SES_REGION".into(), REGION.into());
            m.insert("PIGEONHOLE_SES_ENDPOINT".into(), configured);
        },
        move |config| {
            // What `AppState::build` would hand `SesProvider::new`.
            assert_eq!(config.provider, ProviderKind::Ses);
            assert_eq!(config.ses_region.as_deref(), Some(REGION));
            assert_eq!(config.ses_endpoint.as_deref(), Some(endpoint.as_str()));
            given
        },
    )
    .await;
    (app, provider)
}

async fn verify(app: &TestApp, name: &str) -> Value {
    let r = app
        .post(&format!("/api/v1/domains/{name}/verify"), json!({}))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.body
}

fn full_send() -> Value {
    json!({
        "from": "Team <team@example.com>",
        "to": ["bob@example.net"],
        "cc": ["carol@example.org"],
        "bcc": ["dave@example.org"],
        "subject": "Quarterly numbers — ready",
        "text": "The numbers are attached.",
        "html": "<p>The numbers are <b>attached</b>.</p>",
        "headers": {"X-Campaign": "q3-report"},
        "attachments": [{
            "filename": "report.csv",
            "content": base64::engine::general_purpose::STANDARD.encode("quarter,total\nq3,42\n"),
        }],
    })
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .filter_map(Value::as_str)
        .collect()
}

#[tokio::test]
async fn a_send_goes_through_ses_v2_to_moto_as_built() {
    let Some(moto) = MotoServer::start_or_skip("SES API round-trip").await else {
        return;
    };
    let (app, provider) = spawn_with_moto(&moto, false).await;

    // The domain is created as an SES identity...
    let r = app
        .post("/api/v1/domains", json!({"name": "example.com"}))
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.body["region"], REGION, "{}", r.text);
    let held = provider
        .0
        .ses
        .get_identity("example.com")
        .await
        .expect("moto holds the identity");
    assert_eq!(held.status, IdentityStatus::Verified);
    assert!(!held.sending_enabled, "moto never verifies for sending");

    // ...and moto's own answer to /verify: verified, but not for sending, so
    // the service refuses to send from it, and moto sees nothing.
    let d = verify(&app, "example.com").await;
    assert_eq!(d["status"], "verified", "{d}");
    assert_eq!(d["sending_enabled"], false, "{d}");
    let r = app.post("/api/v1/emails", full_send()).await;
    assert_error(&r, 422, "invalid_request");
    assert_eq!(r.body["param"], "from", "{}", r.text);
    assert!(moto.raw_messages().await.is_empty());

    // With the identity verified for sending, as SES would report it.
    provider
        .0
        .verified_for_sending
        .store(true, Ordering::SeqCst);
    let d = verify(&app, "example.com").await;
    assert_eq!(d["status"], "verified", "{d}");
    assert_eq!(d["sending_enabled"], true, "{d}");

    let r = app.post("/api/v1/emails", full_send()).await;
    assert_eq!(r.status, 202, "{}", r.text);
    let id = r.body["id"].as_str().expect("id").to_string();
    let message_id = r.body["message_id"].as_str().expect("message_id");
    assert!(
        message_id.starts_with('<') && message_id.ends_with("@example.com>"),
        "{message_id}"
    );
    let pid = r.body["provider_message_id"]
        .as_str()
        .expect("provider_message_id")
        .to_string();

    // Exactly this one message reached moto, under the id the API returned.
    let stored = moto.raw_messages().await;
    assert_eq!(stored.len(), 1, "{stored:?}");
    let stored = &stored[0];
    assert_eq!(stored["id"], pid.as_str(), "{stored}");
    assert_eq!(stored["source"], "team@example.com", "{stored}");
    let destinations = strings(&stored["destinations"]);
    for rcpt in ["bob@example.net", "carol@example.org", "dave@example.org"] {
        assert!(destinations.contains(&rcpt), "{rcpt} in {destinations:?}");
    }

    // The MIME SES got is the one mail-builder wrote for this request.
    let raw = stored["raw_data"].as_str().expect("raw_data");
    let mime = MessageParser::default()
        .parse(raw.as_bytes())
        .unwrap_or_else(|| panic!("moto's raw_data is not MIME:\n{raw}"));
    assert_eq!(
        mime.message_id().map(|m| format!("<{m}>")).as_deref(),
        Some(message_id),
        "{raw}"
    );
    assert_eq!(mime.subject(), Some("Quarterly numbers — ready"), "{raw}");
    assert_eq!(
        mime.header_raw("X-Campaign").map(str::trim),
        Some("q3-report"),
        "{raw}"
    );
    let from = mime.from().and_then(|a| a.first()).expect("From");
    assert_eq!(from.address(), Some("team@example.com"));
    assert_eq!(from.name(), Some("Team"));
    let addresses = |a: Option<&mail_parser::Address>| -> Vec<String> {
        a.map(|a| {
            a.iter()
                .filter_map(|x| x.address().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
    };
    assert_eq!(addresses(mime.to()), ["bob@example.net"], "{raw}");
    assert_eq!(addresses(mime.cc()), ["carol@example.org"], "{raw}");
    // Bcc travels in the envelope only.
    assert!(mime.bcc().is_none(), "{raw}");
    assert!(!raw.contains("dave@example.org"), "{raw}");
    assert!(
        mime.body_text(0)
            .is_some_and(|t| t.contains("The numbers are attached.")),
        "{raw}"
    );
    assert!(
        mime.body_html(0)
            .is_some_and(|h| h.contains("<b>attached</b>") && h.contains("/t/o/")),
        "{raw}"
    );
    let attachments: Vec<_> = mime.attachments().collect();
    assert_eq!(attachments.len(), 1, "{raw}");
    assert_eq!(attachments[0].attachment_name(), Some("report.csv"));
    assert_eq!(attachments[0].contents(), b"quarter,total\nq3,42\n");

    // The record shows it sent, under moto's message id.
    let m = app.get(&format!("/api/v1/emails/{id}")).await;
    assert_eq!(m.status, 200, "{}", m.text);
    assert_eq!(m.body["status"], "sent", "{}", m.text);
    assert_eq!(m.body["provider_message_id"], pid.as_str(), "{}", m.text);
    assert_eq!(m.body["message_id"], message_id, "{}", m.text);
    assert_eq!(m.body["bcc"], json!(["dave@example.org"]), "{}", m.text);
    assert_eq!(m.body["error"], Value::Null, "{}", m.text);
}

#[tokio::test]
async fn a_send_ses_rejects_is_recorded_rejected_and_answered_422() {
    let Some(moto) = MotoServer::start_or_skip("SES API rejection").await else {
        return;
    };
    let (app, provider) = spawn_with_moto(&moto, true).await;
    let d = app.verified_domain("example.com").await;
    assert_eq!(d["sending_enabled"], true, "{d}");

    // The identity disappears at SES behind the service's back (deleted in
    // the console): the service still holds example.com as verified, so the
    // send reaches SES, which refuses a sender it does not know.
    provider
        .delete_identity("example.com")
        .await
        .expect("delete the identity at moto");

    let r = app.post("/api/v1/emails", full_send()).await;
    assert_error(&r, 422, "invalid_request");
    let refusal = "Did not have authority to send from email team@example.com";
    assert!(r.text.contains(refusal), "{}", r.text);
    assert!(moto.raw_messages().await.is_empty());

    // The attempt is recorded, rejected, with SES's reason.
    let list = app.get("/api/v1/emails").await;
    assert_eq!(list.status, 200, "{}", list.text);
    let data = list.body["data"].as_array().expect("data");
    assert_eq!(data.len(), 1, "{}", list.text);
    let id = data[0]["id"].as_str().expect("id");
    let m = app.get(&format!("/api/v1/emails/{id}")).await;
    assert_eq!(m.body["status"], "rejected", "{}", m.text);
    assert_eq!(m.body["provider_message_id"], Value::Null, "{}", m.text);
    assert!(
        m.body["error"]
            .as_str()
            .is_some_and(|e| e.contains(refusal)),
        "{}",
        m.text
    );
    let events = app.outbox_types().await;
    assert!(events.iter().any(|t| t == "email.rejected"), "{events:?}");
    assert!(!events.iter().any(|t| t == "email.sent"), "{events:?}");
}
