//! The data of one invocation's `Store`: WASI from the sandbox, the host imports, the output
//! accounting, the memory limiter and the abort view.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::Value;
use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, Result};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks, WasiHttpView};

use super::bindings::weft::plugin::{abort, log, run, types, writer};
use super::io::{AbortHandle, EventSink, GuestEvent, LogLevel, RunAccess, lock};
use super::sandbox::HostPattern;

/// Longest captured stdout/stderr line; longer lines are split.
const MAX_LINE: usize = 64 * 1024;

/// The `T` of every `Store<T>` the host creates.
pub(crate) struct StoreState {
    pub(crate) wasi: WasiCtx,
    pub(crate) table: ResourceTable,
    pub(crate) http: WasiHttpCtx,
    pub(crate) gate: HttpGate,
    pub(crate) limiter: MemoryLimiter,
    pub(crate) out: Arc<Emitter>,
    pub(crate) abort: AbortView,
    pub(crate) run: Arc<dyn RunAccess>,
    pub(crate) patches: Vec<Value>,
    /// The first `set-state` patch that was not a JSON object, described.
    pub(crate) bad_patch: Option<String>,
}

impl WasiView for StoreState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for StoreState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.gate,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Deadline and cancellation as the guest and the host see them.

/// Why an invocation is aborted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AbortCause {
    /// The caller's handle was aborted.
    Cancelled,
    /// The attempt's deadline passed.
    Timeout,
}

/// The caller's abort handle combined with this attempt's deadline.
#[derive(Debug, Clone)]
pub(crate) struct AbortView {
    pub(crate) handle: AbortHandle,
    pub(crate) deadline_at: Option<Instant>,
    pub(crate) grace: Duration,
}

impl AbortView {
    /// What aborted the invocation first, and when, if anything has by `now`.
    pub(crate) fn cause(&self, now: Instant) -> Option<(AbortCause, Instant)> {
        let cancelled = self
            .handle
            .aborted_at()
            .map(|at| (AbortCause::Cancelled, at));
        let timeout = self
            .deadline_at
            .filter(|at| *at <= now)
            .map(|at| (AbortCause::Timeout, at));
        match (cancelled, timeout) {
            (Some(c), Some(t)) => Some(if t.1 < c.1 { t } else { c }),
            (c, t) => c.or(t),
        }
    }

    /// The reason the guest sees through `abort.reason`.
    pub(crate) fn reason(&self, now: Instant) -> Option<String> {
        self.cause(now).map(|(cause, _)| match cause {
            AbortCause::Cancelled => self.handle.reason().unwrap_or_else(|| "cancelled".into()),
            AbortCause::Timeout => "timeout".into(),
        })
    }

    /// True once the grace after the abort has run out: the guest must be stopped.
    pub(crate) fn must_stop(&self, now: Instant) -> bool {
        self.cause(now)
            .and_then(|(_, at)| at.checked_add(self.grace))
            .is_some_and(|stop_at| now >= stop_at)
    }

    /// The earliest instant at which the guest may have to be stopped, as things stand.
    pub(crate) fn next_stop(&self) -> Option<Instant> {
        let deadline = self.deadline_at.and_then(|at| at.checked_add(self.grace));
        let cancel = self
            .handle
            .aborted_at()
            .and_then(|at| at.checked_add(self.grace));
        match (deadline, cancel) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Memory.

/// A `ResourceLimiter` that caps linear memory and remembers that it refused growth.
#[derive(Debug)]
pub(crate) struct MemoryLimiter {
    pub(crate) max_bytes: u64,
    pub(crate) max_table_elements: usize,
    pub(crate) denied: bool,
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> Result<bool> {
        if desired as u64 > self.max_bytes {
            self.denied = true;
            return Ok(false);
        }
        // Beyond the memory's own declared maximum (or the pool's slot): refused, but that is
        // the guest's own bound, not `limits.memory-mib`.
        Ok(maximum.is_none_or(|m| desired <= m))
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> Result<bool> {
        Ok(desired <= self.max_table_elements && maximum.is_none_or(|m| desired <= m))
    }
}

// ---------------------------------------------------------------------------------------------
// Events: writer, custom, log and captured stdio, in call order, with limits.

/// Which captured stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stdio {
    Stdout = 0,
    Stderr = 1,
}

/// Delivers one invocation's events to the sink, in call order, and enforces the output limits.
pub(crate) struct Emitter {
    sink: Arc<dyn EventSink>,
    state: Mutex<EmitState>,
}

struct EmitState {
    events: u64,
    max_events: u64,
    max_chunk: u64,
    max_output_mib: u64,
    stdio_bytes: u64,
    stdio_truncated: bool,
    partial: [Vec<u8>; 2],
    /// The first output limit a host import hit (the invocation fails with `output-limit`).
    limit_hit: Option<String>,
    panic: PanicSniffer,
}

/// Spots Rust's panic report on stderr, to name the panic in a trap's message.
#[derive(Debug, Default)]
struct PanicSniffer {
    location: Option<String>,
    message: Option<String>,
}

impl PanicSniffer {
    fn line(&mut self, line: &str) {
        if self.message.is_some() {
            return;
        }
        if let Some(location) = &self.location {
            self.message = Some(format!("{} (at {location})", line.trim()));
            return;
        }
        // `thread '<unnamed>' (1) panicked at src/lib.rs:7:5:`, the message on the next line.
        if line.starts_with("thread '")
            && let Some((_, rest)) = line.split_once(" panicked at ")
        {
            self.location = Some(rest.trim().trim_end_matches(':').to_string());
        }
    }
}

impl Emitter {
    pub(crate) fn new(sink: Arc<dyn EventSink>, max_events: u64, max_output_mib: u64) -> Self {
        Self {
            sink,
            state: Mutex::new(EmitState {
                events: 0,
                max_events,
                max_chunk: max_output_mib.saturating_mul(1024 * 1024),
                max_output_mib,
                stdio_bytes: 0,
                stdio_truncated: false,
                partial: [Vec::new(), Vec::new()],
                limit_hit: None,
                panic: PanicSniffer::default(),
            }),
        }
    }

    /// The output limit a host import hit, if any.
    pub(crate) fn limit_hit(&self) -> Option<String> {
        lock(&self.state).limit_hit.clone()
    }

    /// `panicked at LOCATION` and the message, when the guest printed a Rust panic report.
    pub(crate) fn panic_message(&self) -> Option<String> {
        let state = lock(&self.state);
        state.panic.message.clone().or_else(|| {
            state
                .panic
                .location
                .as_ref()
                .map(|loc| format!("(at {loc})"))
        })
    }

    /// Counts one event from a host import of `size` bytes; `Err` with the message when a limit
    /// is exceeded (the import then traps and the invocation fails with `output-limit`).
    fn admit(&self, state: &mut EmitState, what: &str, size: usize) -> Result<(), String> {
        if let Some(hit) = &state.limit_hit {
            return Err(hit.clone());
        }
        if size as u64 > state.max_chunk {
            let msg = format!(
                "{what} of {size} bytes exceeds limits.max-output-mib ({} MiB); raise \
                 limits.max-output-mib in the workflow file or emit smaller pieces",
                state.max_output_mib
            );
            state.limit_hit = Some(msg.clone());
            return Err(msg);
        }
        if state.events >= state.max_events {
            let msg = format!(
                "plugin emitted more than {} events (writer chunks, custom events and log \
                 lines) in one invocation; raise limits.max-events in the workflow file",
                state.max_events
            );
            state.limit_hit = Some(msg.clone());
            return Err(msg);
        }
        state.events += 1;
        Ok(())
    }

    /// `writer.write`.
    pub(crate) fn chunk(&self, chunk: String) -> Result<(), String> {
        let mut state = lock(&self.state);
        self.admit(&mut state, "a writer chunk", chunk.len())?;
        self.flush_partials(&mut state);
        self.sink.emit(GuestEvent::Output(json_or_string(chunk)));
        Ok(())
    }

    /// `writer.custom`.
    pub(crate) fn custom(&self, kind: String, data: String) -> Result<(), String> {
        let mut state = lock(&self.state);
        self.admit(&mut state, "a custom event", kind.len() + data.len())?;
        self.flush_partials(&mut state);
        self.sink.emit(GuestEvent::Custom {
            kind,
            data: json_or_string(data),
        });
        Ok(())
    }

    /// `log.log`.
    pub(crate) fn log(&self, level: LogLevel, message: String) -> Result<(), String> {
        let mut state = lock(&self.state);
        self.admit(&mut state, "a log message", message.len())?;
        self.flush_partials(&mut state);
        self.sink.emit(GuestEvent::Log { level, message });
        Ok(())
    }

    /// A notice from the host itself (a denied HTTP request); not counted, never fails.
    pub(crate) fn notice(&self, level: LogLevel, message: String) {
        let mut state = lock(&self.state);
        self.flush_partials(&mut state);
        self.sink.emit(GuestEvent::Log { level, message });
    }

    /// Bytes the guest wrote to stdout or stderr.
    pub(crate) fn stdio(&self, which: Stdio, mut bytes: &[u8]) {
        let mut state = lock(&self.state);
        if state.stdio_truncated && which == Stdio::Stdout {
            // Dropped anyway; only stderr is still read, for a panic report.
            return;
        }
        let idx = which as usize;
        // Another stream's unfinished line goes out first, to keep call order.
        let other = 1 - idx;
        if !state.partial[other].is_empty() {
            let line = std::mem::take(&mut state.partial[other]);
            self.stdio_line(&mut state, other, &line);
        }
        while !bytes.is_empty() {
            match bytes.iter().position(|b| *b == b'\n') {
                Some(pos) => {
                    let mut line = std::mem::take(&mut state.partial[idx]);
                    line.extend_from_slice(&bytes[..pos]);
                    self.stdio_line(&mut state, idx, &line);
                    bytes = &bytes[pos + 1..];
                }
                None => {
                    state.partial[idx].extend_from_slice(bytes);
                    bytes = &[];
                }
            }
            while state.partial[idx].len() >= MAX_LINE {
                let rest = state.partial[idx].split_off(MAX_LINE);
                let line = std::mem::replace(&mut state.partial[idx], rest);
                self.stdio_line(&mut state, idx, &line);
            }
        }
    }

    /// Emits unfinished stdout/stderr lines (before another event, and at the end).
    fn flush_partials(&self, state: &mut EmitState) {
        for idx in 0..2 {
            if !state.partial[idx].is_empty() {
                let line = std::mem::take(&mut state.partial[idx]);
                self.stdio_line(state, idx, &line);
            }
        }
    }

    /// Ends the invocation's output: unfinished lines go out.
    pub(crate) fn finish(&self) {
        let mut state = lock(&self.state);
        self.flush_partials(&mut state);
    }

    fn stdio_line(&self, state: &mut EmitState, idx: usize, line: &[u8]) {
        let text = String::from_utf8_lossy(line);
        let text = text.strip_suffix('\r').unwrap_or(&text);
        if idx == Stdio::Stderr as usize {
            state.panic.line(text);
        }
        if state.stdio_truncated {
            return;
        }
        let size = line.len() as u64 + 1;
        if state.events >= state.max_events || state.stdio_bytes + size > state.max_chunk {
            state.stdio_truncated = true;
            self.sink.emit(GuestEvent::Log {
                level: LogLevel::Warn,
                message: format!(
                    "plugin output truncated: stdout/stderr beyond {} events or {} MiB is \
                     dropped (limits.max-events, limits.max-output-mib)",
                    state.max_events, state.max_output_mib
                ),
            });
            return;
        }
        state.events += 1;
        state.stdio_bytes += size;
        let level = if idx == Stdio::Stdout as usize {
            LogLevel::Info
        } else {
            LogLevel::Warn
        };
        self.sink.emit(GuestEvent::Log {
            level,
            message: text.to_string(),
        });
    }
}

/// Parses a chunk as JSON; text that is not JSON becomes a JSON string.
pub(crate) fn json_or_string(text: String) -> Value {
    match serde_json::from_str(&text) {
        Ok(value) => value,
        Err(_) => Value::String(text),
    }
}

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

// ---------------------------------------------------------------------------------------------
// HTTP: only to granted hosts.

/// `wasi:http` hooks that refuse requests to hosts not in `grants.http`.
pub(crate) struct HttpGate {
    pub(crate) allowed: Arc<[HostPattern]>,
    pub(crate) out: Arc<Emitter>,
}

impl HttpGate {
    /// `None` when the request may go out; else the refused `host:port`.
    fn refused(&self, uri: &http::Uri) -> Option<String> {
        let Some(host) = uri.host() else {
            return Some("a request without host".to_string());
        };
        let port = uri.port_u16().unwrap_or(match uri.scheme_str() {
            Some("http") => 80,
            _ => 443,
        });
        if self.allowed.iter().any(|p| p.allows(host, port)) {
            None
        } else {
            Some(format!("{host}:{port}"))
        }
    }
}

type SendResult = wasmtime_wasi_http::Result<(
    http::Response<wasmtime_wasi_http::WasiBody>,
    Box<dyn Future<Output = wasmtime_wasi_http::Result<()>> + Send>,
)>;

impl WasiHttpHooks for HttpGate {
    fn send_request(
        &mut self,
        request: http::Request<wasmtime_wasi_http::WasiBody>,
        options: Option<wasmtime_wasi_http::RequestOptions>,
        fut: Box<dyn Future<Output = wasmtime_wasi_http::Result<()>> + Send>,
    ) -> Box<dyn Future<Output = SendResult> + Send> {
        if let Some(target) = self.refused(request.uri()) {
            self.out.notice(
                LogLevel::Warn,
                format!(
                    "HTTP request to {target} denied: the host is not listed in the plugin's \
                     grants.http"
                ),
            );
            return Box::new(async { Err(wasmtime_wasi_http::Error::HttpRequestDenied) });
        }
        wasmtime_wasi_http::default_hooks().send_request(request, options, fut)
    }
}

// ---------------------------------------------------------------------------------------------
// The weft host imports.

/// Traps the guest from a host import with this message.
#[derive(Debug)]
pub(crate) struct OutputLimit(pub(crate) String);

impl std::fmt::Display for OutputLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for OutputLimit {}

fn limit_trap(message: String) -> wasmtime::Error {
    wasmtime::Error::new(OutputLimit(message))
}

impl types::Host for StoreState {}

impl writer::Host for StoreState {
    fn write(&mut self, chunk: String) -> Result<()> {
        self.out.chunk(chunk).map_err(limit_trap)
    }

    fn custom(&mut self, kind: String, data: String) -> Result<()> {
        self.out.custom(kind, data).map_err(limit_trap)
    }
}

impl abort::Host for StoreState {
    fn is_aborted(&mut self) -> Result<bool> {
        Ok(self.abort.cause(Instant::now()).is_some())
    }

    fn reason(&mut self) -> Result<Option<String>> {
        Ok(self.abort.reason(Instant::now()))
    }
}

impl run::Host for StoreState {
    fn init_data(&mut self) -> Result<String> {
        Ok(self.run.init_data().to_string())
    }

    fn step_result(&mut self, step: String) -> Result<Option<String>> {
        Ok(self.run.step_result(&step).map(|v| v.to_string()))
    }

    fn set_state(&mut self, patch: String) -> Result<()> {
        if self.bad_patch.is_some() {
            return Ok(());
        }
        match serde_json::from_str::<Value>(&patch) {
            Ok(Value::Object(map)) => self.patches.push(Value::Object(map)),
            Ok(other) => {
                self.bad_patch = Some(format!(
                    "run.set-state was given {}, not a JSON object",
                    json_kind(&other)
                ));
            }
            Err(err) => {
                self.bad_patch = Some(format!(
                    "run.set-state was given text that is not JSON: {err}"
                ));
            }
        }
        Ok(())
    }
}

impl log::Host for StoreState {
    fn log(&mut self, level: log::Level, message: String) -> Result<()> {
        let level = match level {
            log::Level::Trace => LogLevel::Trace,
            log::Level::Debug => LogLevel::Debug,
            log::Level::Info => LogLevel::Info,
            log::Level::Warn => LogLevel::Warn,
            log::Level::Error => LogLevel::Error,
        };
        self.out.log(level, message).map_err(limit_trap)
    }
}

/// `an array`, `a string`, ... for messages.
pub(crate) fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::io::EventLog;

    fn emitter(max_events: u64) -> (Arc<EventLog>, Emitter) {
        let log = Arc::new(EventLog::new());
        let out = Emitter::new(log.clone(), max_events, 1);
        (log, out)
    }

    fn messages(log: &EventLog) -> Vec<String> {
        log.events()
            .into_iter()
            .map(|e| match e {
                GuestEvent::Output(v) => format!("out:{v}"),
                GuestEvent::Custom { kind, data } => format!("custom:{kind}:{data}"),
                GuestEvent::Log { level, message } => format!("{level:?}:{message}"),
            })
            .collect()
    }

    #[test]
    fn stdio_lines_and_events_keep_call_order() {
        let (log, out) = emitter(100);
        out.stdio(Stdio::Stdout, b"one\ntw");
        out.stdio(Stdio::Stdout, b"o\n");
        out.stdio(Stdio::Stderr, b"partial ");
        out.chunk("{\"a\":1}".into()).expect("ok");
        out.stdio(Stdio::Stderr, b"rest\r\n");
        out.chunk("not json".into()).expect("ok");
        out.stdio(Stdio::Stdout, b"tail");
        out.finish();
        assert_eq!(
            messages(&log),
            [
                "Info:one",
                "Info:two",
                "Warn:partial ",
                "out:{\"a\":1}",
                "Warn:rest",
                "out:\"not json\"",
                "Info:tail"
            ]
        );
    }

    #[test]
    fn import_events_over_the_cap_fail_and_stdio_is_truncated_once() {
        let (log, out) = emitter(3);
        out.stdio(Stdio::Stdout, b"a\nb\nc\nd\ne\n");
        let msgs = messages(&log);
        assert_eq!(msgs.len(), 4, "{msgs:?}");
        assert!(msgs[3].contains("truncated"), "{msgs:?}");
        let err = out.chunk("1".into()).expect_err("over the cap");
        assert!(err.contains("limits.max-events"), "{err}");
        assert!(out.limit_hit().is_some());
    }

    #[test]
    fn endless_lines_are_split() {
        let (log, out) = emitter(100);
        out.stdio(Stdio::Stdout, &vec![b'x'; MAX_LINE * 2 + 10]);
        out.finish();
        let lens: Vec<usize> = log
            .events()
            .into_iter()
            .map(|e| match e {
                GuestEvent::Log { message, .. } => message.len(),
                _ => 0,
            })
            .collect();
        assert_eq!(lens, [MAX_LINE, MAX_LINE, 10]);
    }

    #[test]
    fn big_chunks_fail() {
        let (_log, out) = emitter(10);
        let err = out
            .chunk("x".repeat(1024 * 1024 + 1))
            .expect_err("over 1 MiB");
        assert!(err.contains("limits.max-output-mib"), "{err}");
    }

    #[test]
    fn panic_reports_are_recognized() {
        let (_log, out) = emitter(10);
        out.stdio(
            Stdio::Stderr,
            b"\nthread '<unnamed>' (1) panicked at src/lib.rs:71:24:\nboom goes the plugin\nnote: run with `RUST_BACKTRACE=1`\n",
        );
        assert_eq!(
            out.panic_message().as_deref(),
            Some("boom goes the plugin (at src/lib.rs:71:24)")
        );
    }

    #[test]
    fn abort_view_prefers_the_earliest_cause_and_waits_for_the_grace() {
        let handle = AbortHandle::new();
        let start = Instant::now();
        let view = AbortView {
            handle: handle.clone(),
            deadline_at: Some(start + Duration::from_millis(50)),
            grace: Duration::from_millis(100),
        };
        assert_eq!(view.cause(start), None);
        let later = start + Duration::from_millis(60);
        assert_eq!(view.reason(later).as_deref(), Some("timeout"));
        assert!(!view.must_stop(later));
        assert!(view.must_stop(start + Duration::from_millis(151)));
        handle.cancel();
        // The cancel (just now) came before the deadline (start + 50 ms): it is the cause.
        let after_both = Instant::now() + Duration::from_millis(60);
        assert_eq!(view.reason(after_both).as_deref(), Some("cancelled"));
        let no_deadline = AbortView {
            deadline_at: None,
            ..view
        };
        assert_eq!(
            no_deadline.reason(Instant::now()).as_deref(),
            Some("cancelled")
        );
    }
}
