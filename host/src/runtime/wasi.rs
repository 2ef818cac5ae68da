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

use super::guest_log::{CleanText, GuestLog, MAX_GUEST_TEXT, clean, clean_to};

/// Bytes of one line kept before the newline arrives; the rest of an overlong line is counted
/// and discarded, so a guest cannot grow host memory by never writing a newline, and the line is
/// still logged once (truncated, with the count) rather than as many fragments.
const MAX_LINE: usize = MAX_GUEST_TEXT;
/// Most bytes one `wasi:random` call may ask for: the host makes them before lowering them into
/// guest memory, and wasmtime-wasi allows 64 MiB. A seed needs 16-32; a request over it traps.
pub(crate) const MAX_RANDOM_BYTES: u64 = 1 << 20;
/// Stderr lines kept to explain a trap (a Rust panic message precedes the trap).
const STDERR_TAIL: usize = 4;
/// Bytes kept of each of those lines, so the joined tail stays within one guest text's cap.
const TAIL_LINE: usize = MAX_GUEST_TEXT / STDERR_TAIL;

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
        .max_random_size(MAX_RANDOM_BYTES)
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
    pub(crate) fn flush(&self) {
        self.stdout.lock().flush_partial();
        self.stderr.lock().flush_partial();
    }

    /// Forgets the stderr lines of earlier calls.
    pub(crate) fn reset_tail(&self) {
        self.stderr.lock().tail.clear();
    }

    /// The last stderr lines written during this call, joined for an error message (each line
    /// capped at [`TAIL_LINE`] bytes).
    pub(crate) fn stderr_tail(&self) -> Option<String> {
        let err = self.stderr.lock();
        (!err.tail.is_empty()).then(|| {
            let lines: Vec<&str> = err.tail.iter().map(CleanText::as_str).collect();
            lines.join(" | ")
        })
    }
}

struct LineBuffer {
    log: GuestLog,
    stderr: bool,
    /// The start of the current line, at most [`MAX_LINE`] bytes.
    partial: Vec<u8>,
    /// Bytes of the current line discarded beyond [`MAX_LINE`].
    overflow: usize,
    tail: VecDeque<CleanText>,
}

impl LineBuffer {
    fn new(log: GuestLog, stderr: bool) -> Self {
        Self {
            log,
            stderr,
            partial: Vec::new(),
            overflow: 0,
            tail: VecDeque::new(),
        }
    }

    fn write(&mut self, mut bytes: &[u8]) {
        while let Some(pos) = bytes.iter().position(|&b| b == b'\n') {
            self.keep(&bytes[..pos]);
            self.emit();
            bytes = &bytes[pos + 1..];
        }
        self.keep(bytes);
    }

    /// Appends to the current line up to [`MAX_LINE`], counting the rest.
    fn keep(&mut self, bytes: &[u8]) {
        let room = MAX_LINE - self.partial.len();
        let (kept, over) = bytes.split_at(bytes.len().min(room));
        self.partial.extend_from_slice(kept);
        self.overflow += over.len();
    }

    fn flush_partial(&mut self) {
        if !self.partial.is_empty() || self.overflow > 0 {
            self.emit();
        }
    }

    fn emit(&mut self) {
        let raw = std::mem::take(&mut self.partial);
        let overflow = std::mem::take(&mut self.overflow);
        let line = String::from_utf8_lossy(&raw);
        let line = line.strip_suffix('\r').unwrap_or(&line);
        if line.trim().is_empty() && overflow == 0 {
            return;
        }
        self.log.output_line(self.stderr, &clean(line, overflow));
        if self.stderr {
            // Kept even when the rate limit dropped the line: a panic message explains the
            // trap that follows it, and the tail is bounded.
            if self.tail.len() == STDERR_TAIL {
                self.tail.pop_front();
            }
            self.tail.push_back(clean_to(line, overflow, TAIL_LINE));
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

    use super::super::metrics::RuntimeMetrics;
    use super::super::types::GuestLogLevel;
    use super::*;

    fn capture() -> (GuestOutput, crate::test_support::SeenLines) {
        let seen = crate::test_support::SeenLines::default();
        let log = GuestLog::new(
            "p".into(),
            Some(Arc::new(seen.clone())),
            &RuntimeMetrics::unregistered(),
        );
        (sandboxed_ctx(&log).1, seen)
    }

    #[test]
    fn splits_lines_and_keeps_the_stderr_tail() {
        let (out, seen) = capture();
        let mut err = out.stderr.lock();
        err.write(b"one\r\ntw");
        err.write(b"o\n\n  \nthree");
        drop(err);
        out.flush();
        let seen = seen.lock();
        let lines: Vec<&str> = seen.iter().map(|(_, m)| m.as_str()).collect();
        assert_eq!(lines, ["one", "two", "three"], "blank lines are dropped");
        assert!(seen.iter().all(|(l, _)| *l == GuestLogLevel::Warn));
        assert_eq!(out.stderr_tail().unwrap(), "one | two | three");
        out.reset_tail();
        assert_eq!(out.stderr_tail(), None);
    }

    #[test]
    fn an_endless_line_is_held_to_the_cap_and_logged_once_truncated() {
        let (out, seen) = capture();
        let mut stdout = out.stdout.lock();
        stdout.write(b"start:");
        // 60 MiB in 64 KiB writes (what the stream admits per `check_write`), no newline.
        let chunk = vec![b'x'; 64 * 1024];
        for _ in 0..960 {
            stdout.write(&chunk);
            assert!(
                stdout.partial.len() <= MAX_LINE,
                "the host holds one capped line"
            );
        }
        stdout.write(b"\nnext\n");
        drop(stdout);
        let seen = seen.lock();
        assert_eq!(seen.len(), 2, "one line, not thousands of fragments");
        let first = &seen[0].1;
        let dropped = 6 + 960 * 64 * 1024 - MAX_LINE;
        assert!(first.starts_with("start:xxx"), "{}", &first[..20]);
        assert!(
            first.ends_with(&format!("x…[truncated {dropped} bytes]")),
            "{}",
            &first[first.len() - 40..]
        );
        assert_eq!(
            first.len() - format!("…[truncated {dropped} bytes]").len(),
            MAX_LINE
        );
        assert_eq!(seen[1].1, "next");
    }

    #[test]
    fn an_unterminated_overlong_line_is_flushed_at_the_end_of_the_call() {
        let (out, seen) = capture();
        out.stderr.lock().write(&vec![b'y'; MAX_LINE + 10]);
        assert!(
            seen.lock().is_empty(),
            "held until the newline or the call's end"
        );
        out.flush();
        assert!(seen.lock()[0].1.ends_with("y…[truncated 10 bytes]"));
        let tail = out.stderr_tail().unwrap();
        assert_eq!(tail.len(), TAIL_LINE + "…[truncated 12298 bytes]".len());
        assert!(
            tail.ends_with(&format!(
                "y…[truncated {} bytes]",
                MAX_LINE - TAIL_LINE + 10
            )),
            "{tail}"
        );
    }

    #[test]
    fn output_lines_cannot_forge_log_lines_or_escape_the_terminal() {
        let (out, seen) = capture();
        out.stdout
            .lock()
            .write(b"ok\r2024-01-01T00:00:00Z ERROR forged \x1b[2J\x1b[31mred\xff\n");
        assert_eq!(
            seen.lock()[0].1,
            "ok\\r2024-01-01T00:00:00Z ERROR forged \\u{1b}[2J\\u{1b}[31mred\u{fffd}"
        );
    }
}
