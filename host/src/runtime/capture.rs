//! Captured guest stdout and stderr: kept up to a limit, the rest counted and
//! dropped. A guest that floods its output never fails because of it and
//! never makes the host buffer more than the limit.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi_io::poll::Pollable;
use wasmtime_wasi_io::streams::{OutputStream, StreamError};

/// What a guest wrote to one stream during a call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Captured {
    /// The first `limit` bytes, lossily decoded.
    pub text: String,
    /// How many bytes were written after the limit and dropped.
    pub truncated_bytes: u64,
}

/// A stream the guest writes into. Clones share the same buffer.
#[derive(Clone)]
pub(crate) struct CaptureStream {
    inner: Arc<Mutex<Buffer>>,
}

struct Buffer {
    bytes: Vec<u8>,
    limit: usize,
    dropped: u64,
}

impl CaptureStream {
    pub(crate) fn new(limit: usize) -> Self {
        CaptureStream { inner: Arc::new(Mutex::new(Buffer { bytes: Vec::new(), limit, dropped: 0 })) }
    }

    fn append(&self, data: &[u8]) {
        let mut buffer = self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let room = buffer.limit.saturating_sub(buffer.bytes.len());
        let kept = data.len().min(room);
        buffer.bytes.extend_from_slice(&data[..kept]);
        buffer.dropped += (data.len() - kept) as u64;
    }

    pub(crate) fn take(&self) -> Captured {
        let mut buffer = self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let bytes = std::mem::take(&mut buffer.bytes);
        Captured {
            text: String::from_utf8_lossy(&bytes).into_owned(),
            truncated_bytes: std::mem::take(&mut buffer.dropped),
        }
    }
}

impl IsTerminal for CaptureStream {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for CaptureStream {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[async_trait::async_trait]
impl OutputStream for CaptureStream {
    fn write(&mut self, bytes: Bytes) -> Result<(), StreamError> {
        self.append(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StreamError> {
        Ok(())
    }

    fn check_write(&mut self) -> Result<usize, StreamError> {
        // Always willing: what is over the limit is dropped, not refused,
        // because a refused write makes a Rust guest's println! panic.
        Ok(1 << 20)
    }
}

#[async_trait::async_trait]
impl Pollable for CaptureStream {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for CaptureStream {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        self.append(data);
        Poll::Ready(Ok(data.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_head_and_counts_the_rest() {
        let stream = CaptureStream::new(8);
        stream.append(b"hello ");
        stream.append(b"world, this is dropped");
        let captured = stream.take();
        assert_eq!(captured.text, "hello wo");
        assert_eq!(captured.truncated_bytes, 20);
        assert_eq!(stream.take(), Captured::default());
    }
}
