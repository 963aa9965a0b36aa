//! A request body must arrive whole within a deadline counted from its head:
//! a client trickling a body byte by byte would otherwise hold a busy
//! connection (which is never evicted) for as long as it likes.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use tokio::time::{Instant, Sleep};

pub struct DeadlineBody {
    inner: Incoming,
    limit: Duration,
    deadline: Instant,
    /// Armed the first time the body is not ready, so a body that came with
    /// its head costs no timer.
    timer: Option<Pin<Box<Sleep>>>,
}

impl DeadlineBody {
    pub fn new(inner: Incoming, limit: Duration) -> DeadlineBody {
        DeadlineBody {
            inner,
            limit,
            deadline: Instant::now() + limit,
            timer: None,
        }
    }
}

impl Body for DeadlineBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(io::Error::other)));
        }
        let deadline = self.deadline;
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if timer.as_mut().poll(cx).is_ready() {
            // The API maps a TimedOut body error to 408.
            return Poll::Ready(Some(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "the request body did not arrive within {} s",
                    self.limit.as_secs_f64()
                ),
            ))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
