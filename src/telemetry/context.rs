//! The request id of the work in hand, carried across tasks and threads.
//!
//! The HTTP layer puts each request's id here ([`scope`]); work handed to
//! another task or thread (a send's own task, the SQLite group writer) takes
//! it along with the request's span ([`carry`]), so that an outbox event
//! written there stores the id of the request that caused it and its
//! webhook attempt can log it.

use std::future::Future;
use std::sync::Arc;

use tracing::Instrument;

tokio::task_local! {
    static REQUEST_ID: Arc<str>;
}

/// The id of the request this task works for, if any.
pub fn request_id() -> Option<Arc<str>> {
    REQUEST_ID.try_with(Arc::clone).ok()
}

/// Runs `work` as part of the request `id`.
pub fn scope<F: Future>(id: Arc<str>, work: F) -> impl Future<Output = F::Output> {
    REQUEST_ID.scope(id, work)
}

/// What a future handed elsewhere takes from the code that hands it over:
/// the current span and request id. Taken with [`Carried::here`] where the
/// work is queued, put on with [`Carried::run`] where it runs.
#[derive(Clone)]
pub struct Carried {
    span: tracing::Span,
    request_id: Option<Arc<str>>,
}

impl Carried {
    pub fn here() -> Carried {
        Carried {
            span: tracing::Span::current(),
            request_id: request_id(),
        }
    }

    /// `work` inside the span and request id taken.
    pub fn run<F: Future>(self, work: F) -> impl Future<Output = F::Output> {
        let Carried { span, request_id } = self;
        async move {
            match request_id {
                Some(id) => REQUEST_ID.scope(id, work).await,
                None => work.await,
            }
        }
        .instrument(span)
    }
}

/// `work` with the current span and request id, to run on another task.
pub fn carry<F: Future>(work: F) -> impl Future<Output = F::Output> {
    Carried::here().run(work)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_carried_future_keeps_the_request_id_on_another_task() {
        let seen = scope("req_a".into(), async {
            tokio::spawn(carry(async { request_id() })).await
        })
        .await
        .ok()
        .flatten();
        assert_eq!(seen.as_deref(), Some("req_a"));
        let lost = scope("req_b".into(), async {
            tokio::spawn(async { request_id() }).await
        })
        .await
        .ok()
        .flatten();
        assert_eq!(lost, None, "without carry a spawned task has no request id");
    }
}
