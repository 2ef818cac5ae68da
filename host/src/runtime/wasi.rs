//! The guest's WASI p2 environment: no preopened directories, no environment variables or
//! arguments, no network (TCP, UDP, name lookup and every socket address denied), empty stdin,
//! and stdout/stderr captured line by line into the plugin's log.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use parking_lot::Mutex;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder};

use super::guest_log::GuestLog;

/// Longest line kept before it is emitted anyway, so a guest cannot grow host memory by never
/// writing a newline.
const MAX_LINE: usize = 16 * 1024;
/// Stderr lines kept to explain a trap (a Rust panic message precedes the trap).
const STDERR_TAIL: usize = 4;

/// Builds the sandboxed WASI context for one instance; returns it with the handles the instance
/// uses to flush partial lines and read the stderr tail.
pub(crate) fn sandboxed_ctx(log: &GuestLog) -> (WasiCtx, GuestOutput) {
    let output = GuestOutput {
        stdout: Arc::new(Mutex::new(LineBuffer::new(log.clone(), false))),
        stderr: Arc::new(Mutex::new(LineBuffer::new(log.clone(), true))),
    };
    let ctx = WasiCtxBuilder::new()
        .stdout(CaptureStream(output.stdout.clone()))
        .stderr(CaptureStream(output.stderr.clone()))
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .socket_addr_check(|_, _| Box::pin(async { false }))
        .build();
    (ctx, output)
}

/// The host's end of one instance's stdout and stderr.
pub(crate) struct GuestOutput {
    stdout: Arc<Mutex<LineBuffer>>,
    stderr: Arc<Mutex<LineBuffer>>,
}

impl GuestOutput {
    /// Emits any unterminated line; called after every call so output is never held back.
    pub fn flush(&self) {
        self.stdout.lock().flush_partial();
        self.stderr.lock().flush_partial();
    }

    /// Forgets the stderr lines of earlier calls.
    pub fn reset_tail(&self) {
        self.stderr.lock().tail.clear();
    }

    /// The last stderr lines written during this call, joined for an error message.
    pub fn stderr_tail(&self) -> Option<String> {
        let err = self.stderr.lock();
        (!err.tail.is_empty()).then(|| err.tail.iter().cloned().collect::<Vec<_>>().join(" | "))
    }
}

struct LineBuffer {
    log: GuestLog,
    stderr: bool,
    partial: Vec<u8>,
    tail: VecDeque<String>,
}

impl LineBuffer {
    fn new(log: GuestLog, stderr: bool) -> Self {
        Self {
            log,
            stderr,
            partial: Vec::new(),
            tail: VecDeque::new(),
        }
    }

    fn write(&mut self, mut bytes: &[u8]) {
        while let Some(pos) = bytes.iter().position(|&b| b == b'\n') {
            self.partial.extend_from_slice(&bytes[..pos]);
            self.emit();
            bytes = &bytes[pos + 1..];
        }
        self.partial.extend_from_slice(bytes);
        if self.partial.len() >= MAX_LINE {
            self.emit();
        }
    }

    fn flush_partial(&mut self) {
        if !self.partial.is_empty() {
            self.emit();
        }
    }

    fn emit(&mut self) {
        let raw = std::mem::take(&mut self.partial);
        let line = String::from_utf8_lossy(&raw);
        let line = line.strip_suffix('\r').unwrap_or(&line);
        if line.trim().is_empty() {
            return;
        }
        self.log.output_line(self.stderr, line);
        if self.stderr {
            if self.tail.len() == STDERR_TAIL {
                self.tail.pop_front();
            }
            self.tail.push_back(line.to_string());
        }
    }
}

/// A guest stdout or stderr; every handle the guest opens writes into the same line buffer.
struct CaptureStream(Arc<Mutex<LineBuffer>>);

impl IsTerminal for CaptureStream {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for CaptureStream {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(CaptureStream(self.0.clone()))
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(CaptureStream(self.0.clone()))
    }
}

/// Writes complete synchronously, on the calling thread, so lines are logged in order with the
/// guest's `log` calls and before the call returns.
impl OutputStream for CaptureStream {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.0.lock().write(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(64 * 1024)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for CaptureStream {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for CaptureStream {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.0.lock().write(buf);
        Poll::Ready(Ok(buf.len()))
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
    use std::sync::Arc;

    use parking_lot::Mutex;

    use super::super::types::GuestLogLevel;
    use super::*;

    #[test]
    fn splits_lines_bounds_long_ones_and_keeps_the_stderr_tail() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        let log = GuestLog::new(
            "p".into(),
            Some(Arc::new(move |_: &str, level: GuestLogLevel, msg: &str| {
                sink.lock().push((level, msg.len(), msg.to_string()))
            })),
        );
        let (_ctx, out) = sandboxed_ctx(&log);
        let mut err = out.stderr.lock();
        err.write(b"one\r\ntw");
        err.write(b"o\n\nthree");
        err.write(&vec![b'x'; MAX_LINE]);
        drop(err);
        out.flush();
        let seen = seen.lock();
        assert_eq!(seen[0].2, "one");
        assert_eq!(seen[1].2, "two");
        assert_eq!(
            seen[2].1,
            "three".len() + MAX_LINE,
            "emitted once over the bound"
        );
        assert_eq!(seen.len(), 3, "blank lines are dropped");
        assert!(seen.iter().all(|(l, ..)| *l == GuestLogLevel::Warn));
        assert!(out.stderr_tail().unwrap().starts_with("one | two | three"));
        out.reset_tail();
        assert_eq!(out.stderr_tail(), None);
    }
}
