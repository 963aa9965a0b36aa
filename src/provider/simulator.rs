//! The built-in stand-in for SES: no network, deterministic behaviour
//! (interface.md, "The simulator provider").

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;

use super::{
    IdentityInfo, IdentityStatus, OutgoingMessage, PlannedEvent, Provider, ProviderError,
    ProviderEvent, ProviderEventKind, Quota,
};

/// The simulator's own 24-hour allowance, counted over a rolling window.
pub const DEFAULT_DAILY_QUOTA: u64 = 1_000_000;
const DAY_MICROS: i64 = 24 * 3600 * 1_000_000;

pub struct Simulator {
    outbox: Option<PathBuf>,
    daily_quota: u64,
    /// (sent at, recipients) of the last 24 hours.
    sent: Mutex<VecDeque<(i64, u64)>>,
    outcome_delay: Duration,
}

impl Simulator {
    pub fn new(outbox: Option<PathBuf>) -> Simulator {
        Simulator {
            outbox,
            daily_quota: DEFAULT_DAILY_QUOTA,
            sent: Mutex::new(VecDeque::new()),
            outcome_delay: Duration::from_millis(50),
        }
    }

    /// A simulator whose 24-hour quota is `max` messages.
    pub fn with_daily_quota(mut self, max: u64) -> Simulator {
        self.daily_quota = max;
        self
    }

    /// A simulator whose outcomes are due `delay` after each send (50 ms
    /// unless set).
    pub fn with_outcome_delay(mut self, delay: Duration) -> Simulator {
        self.outcome_delay = delay;
        self
    }

    fn sent_last_day(&self, now: i64) -> u64 {
        let mut sent = match self.sent.lock() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        };
        while sent.front().is_some_and(|(t, _)| *t < now - DAY_MICROS) {
            sent.pop_front();
        }
        sent.iter().map(|(_, n)| n).sum()
    }

    /// What the SES mailbox simulator does for each recipient.
    fn outcomes(provider_message_id: &str, recipients: &[String], at: i64) -> Vec<ProviderEvent> {
        let mut out = Vec::new();
        for r in recipients {
            let local = match r.rsplit_once('@') {
                Some((l, "simulator.amazonses.com")) => l.split('+').next().unwrap_or(l),
                _ => "",
            };
            let ev = |kind, detail: Option<&str>| ProviderEvent {
                provider_message_id: provider_message_id.to_string(),
                kind,
                recipients: vec![r.clone()],
                detail: detail.map(str::to_string),
                occurred_at: at,
                delivery_id: None,
                message_tag: None,
            };
            match local {
                "bounce" => out.push(ev(
                    ProviderEventKind::Bounce { permanent: true },
                    Some("smtp; 550 5.1.1 user unknown"),
                )),
                "suppressionlist" => out.push(ev(
                    ProviderEventKind::Bounce { permanent: true },
                    Some("Amazon SES has suppressed sending to this address because it is on the account-level suppression list."),
                )),
                "complaint" => {
                    out.push(ev(ProviderEventKind::Delivery, Some("250 2.6.0 Message received")));
                    // The complaint comes after the delivery, also for a
                    // reader ordering events by time.
                    let mut complaint = ev(ProviderEventKind::Complaint, Some("abuse"));
                    complaint.occurred_at += 1;
                    out.push(complaint);
                }
                _ => out.push(ev(ProviderEventKind::Delivery, Some("250 2.6.0 Message received"))),
            }
        }
        out
    }

    /// Stateless so that several processes agree: a new identity is pending and
    /// every later look-up finds it verified (or failed for `.invalid`).
    fn identity(domain: &str, created: bool) -> IdentityInfo {
        let failed = domain.ends_with(".invalid");
        let (status, dkim) = if created {
            (IdentityStatus::Pending, "pending")
        } else if failed {
            (IdentityStatus::Failed, "failed")
        } else {
            (IdentityStatus::Verified, "success")
        };
        IdentityInfo {
            status,
            sending_enabled: status == IdentityStatus::Verified,
            dkim_status: dkim.to_string(),
            dkim_origin: "aws_ses".to_string(),
            dkim_tokens: dkim_tokens(domain),
            mail_from_domain: Some(format!("mail.{domain}")),
            mail_from_status: if status == IdentityStatus::Verified {
                "success".into()
            } else {
                dkim.to_string()
            },
        }
    }
}

/// Three stable tokens per domain, shaped like SES's 32-character ones.
fn dkim_tokens(domain: &str) -> Vec<String> {
    use sha2::{Digest, Sha256};
    (0..3)
        .map(|i| {
            let digest = Sha256::digest(format!("{domain}/{i}").as_bytes());
            hex::encode(&digest[..16])
        })
        .collect()
}

#[async_trait]
impl Provider for Simulator {
    fn name(&self) -> &'static str {
        "simulator"
    }

    fn region(&self) -> String {
        "us-east-1".to_string()
    }

    async fn create_identity(&self, domain: &str) -> Result<IdentityInfo, ProviderError> {
        Ok(Simulator::identity(domain, true))
    }

    async fn get_identity(&self, domain: &str) -> Result<IdentityInfo, ProviderError> {
        Ok(Simulator::identity(domain, false))
    }

    async fn delete_identity(&self, _domain: &str) -> Result<(), ProviderError> {
        Ok(())
    }

    async fn send_raw(&self, message: &OutgoingMessage) -> Result<String, ProviderError> {
        let id = format!(
            "0100{}-{}-000000",
            crate::ids::time_ordered_token(12),
            crate::ids::random_token(20)
        );
        if let Some(dir) = &self.outbox {
            let path = dir.join(format!("{id}.eml"));
            tokio::fs::create_dir_all(dir)
                .await
                .map_err(|e| ProviderError::Unavailable(format!("simulator outbox: {e}")))?;
            tokio::fs::write(&path, &message.raw)
                .await
                .map_err(|e| ProviderError::Unavailable(format!("simulator outbox: {e}")))?;
        }
        let now = crate::clock::now_micros();
        if let Ok(mut sent) = self.sent.lock() {
            sent.push_back((now, message.recipients.len() as u64));
        }
        Ok(id)
    }

    /// Each recipient's outcome, due `outcome_delay` after the send: stored
    /// with the send's record, so that, as with SES and SNS, a process that
    /// dies before they are due loses none of them.
    fn planned_events(
        &self,
        provider_message_id: &str,
        recipients: &[String],
        accepted_at: i64,
    ) -> Vec<PlannedEvent> {
        let due_at = accepted_at.saturating_add(self.outcome_delay.as_micros() as i64);
        Simulator::outcomes(provider_message_id, recipients, due_at)
            .into_iter()
            .map(|event| PlannedEvent { event, due_at })
            .collect()
    }

    async fn quota(&self) -> Result<Quota, ProviderError> {
        Ok(Quota {
            max_24_hour_send: self.daily_quota as f64,
            max_send_rate: 10_000.0,
            sent_last_24_hours: self.sent_last_day(crate::clock::now_micros()) as f64,
            sandbox: false,
            sending_enabled: true,
        })
    }
}
