//! The absolute deadline of the answer a connection is sending: armed when a request
//! comes in, disarmed when its body is sent. The connection's task cuts the connection
//! when it passes, so a client reading a large answer slowly (progress now and then,
//! within the write timeout) cannot hold its answer slot for minutes.

use std::{
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use hyper::body::{Body, Frame, SizeHint};
use tokio::{sync::watch, time::Instant};

/// The sending side, one per connection (HTTP/1: one answer at a time).
#[derive(Clone)]
pub struct AnswerDeadline(Arc<watch::Sender<Option<Instant>>>);

/// Holds the deadline armed; dropping it (the body sent, or dropped) disarms it.
pub struct Armed(Arc<watch::Sender<Option<Instant>>>);

impl AnswerDeadline {
    /// A deadline and the receiver the connection's task watches.
    pub fn new() -> (Self, watch::Receiver<Option<Instant>>) {
        let (tx, rx) = watch::channel(None);
        (Self(Arc::new(tx)), rx)
    }

    pub fn arm(&self, at: Instant) -> Armed {
        self.0.send_replace(Some(at));
        Armed(self.0.clone())
    }
}

impl Drop for Armed {
    fn drop(&mut self) {
        self.0.send_replace(None);
    }
}

/// A body that keeps its answer's deadline armed until it is sent or dropped (its
/// size is told as the inner body's, so a small answer keeps its Content-Length).
pub struct ArmedBody<B> {
    body: B,
    _armed: Armed,
}

impl<B> ArmedBody<B> {
    pub fn new(body: B, armed: Armed) -> Self {
        Self {
            body,
            _armed: armed,
        }
    }
}

impl<B: Body + Unpin> Body for ArmedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// Completes when an armed deadline passes; never while none is armed.
pub async fn deadline_passed(rx: &mut watch::Receiver<Option<Instant>>) {
    loop {
        let armed = *rx.borrow_and_update();
        match armed {
            Some(at) => {
                tokio::select! {
                    _ = tokio::time::sleep_until(at) => return,
                    changed = rx.changed() => if changed.is_err() { return std::future::pending().await },
                }
            }
            None => {
                if rx.changed().await.is_err() {
                    return std::future::pending().await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn passes_only_while_armed() {
        let ms = Duration::from_millis;
        let (deadline, mut rx) = AnswerDeadline::new();
        let armed = deadline.arm(Instant::now() + ms(100));
        drop(armed);
        let waited = tokio::time::timeout(ms(300), deadline_passed(&mut rx)).await;
        assert!(waited.is_err(), "disarmed before it passed");
        let _armed = deadline.arm(Instant::now() + ms(100));
        let waited = tokio::time::timeout(ms(2000), deadline_passed(&mut rx)).await;
        assert!(waited.is_ok(), "armed and passed");
    }
}
