//! A connection whose writes must make progress within a timeout: a client that stops
//! reading an answer is disconnected instead of keeping the answer in memory and its
//! `/api/v1/incidents` slot taken.

use std::{
    io,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    time::{Instant, Sleep},
};

pub struct WriteDeadline<T> {
    io: T,
    timeout: Duration,
    /// Armed while a write waits for the client to read.
    sleep: Pin<Box<Sleep>>,
    waiting: bool,
}

impl<T> WriteDeadline<T> {
    pub fn new(io: T, timeout: Duration) -> Self {
        Self {
            io,
            timeout,
            sleep: Box::pin(tokio::time::sleep(timeout)),
            waiting: false,
        }
    }

    /// `Pending` from the socket starts (or continues) the wait; past the timeout it
    /// becomes an error, which makes hyper drop the connection.
    fn wait<R>(
        &mut self,
        polled: Poll<io::Result<R>>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<R>> {
        if polled.is_ready() {
            self.waiting = false;
            return polled;
        }
        if !self.waiting {
            self.waiting = true;
            let deadline = Instant::now() + self.timeout;
            self.sleep.as_mut().reset(deadline);
        }
        match self.sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client stopped reading the answer",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for WriteDeadline<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write(cx, buf);
        self.wait(polled, cx)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.io).poll_flush(cx);
        self.wait(polled, cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
