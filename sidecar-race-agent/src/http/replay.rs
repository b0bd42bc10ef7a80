//! A connection whose first bytes were already read (a probe's request head, read
//! before it was given a health slot): they are read again first, then the connection.

use std::{
    io,
    pin::Pin,
    task::{Context, Poll},
};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

pub struct Replayed<I> {
    head: Vec<u8>,
    at: usize,
    io: I,
}

impl<I> Replayed<I> {
    pub fn new(head: Vec<u8>, io: I) -> Self {
        Self { head, at: 0, io }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Replayed<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.at < this.head.len() {
            let n = buf.remaining().min(this.head.len() - this.at);
            buf.put_slice(&this.head[this.at..this.at + n]);
            this.at += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Replayed<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn the_head_is_read_again_before_the_rest() {
        let (mut client, server) = tokio::io::duplex(64);
        client.write_all(b" HTTP/1.1\r\n").await.unwrap();
        drop(client);
        let mut replayed = Replayed::new(b"GET /healthz".to_vec(), server);
        let mut all = String::new();
        replayed.read_to_string(&mut all).await.unwrap();
        assert_eq!(all, "GET /healthz HTTP/1.1\r\n");
    }
}
