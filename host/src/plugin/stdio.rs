//! The guest's stdout and stderr: lines become log events.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

use super::events::{Emitter, MAX_LINE, Stdio};

/// The guest's stdout or stderr: lines become log events through the invocation's [`Emitter`].
#[derive(Clone)]
pub(crate) struct LineStream {
    out: Arc<Emitter>,
    which: Stdio,
}

impl LineStream {
    pub(crate) fn new(out: Arc<Emitter>, which: Stdio) -> Self {
        Self { out, which }
    }
}

impl IsTerminal for LineStream {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for LineStream {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for LineStream {
    async fn ready(&mut self) {}
}

impl OutputStream for LineStream {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.out.stdio(self.which, &bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(MAX_LINE)
    }
}

impl tokio::io::AsyncWrite for LineStream {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.out.stdio(self.which, buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
