//! One invocation's events — writer chunks, custom events, log lines and captured stdio — in
//! call order, with the output limits (`limits.max-events`, `limits.max-output-mib`).

use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::lock;
use crate::executor::{EventSink, GuestEvent, LogLevel};

/// Longest captured stdout/stderr line; longer lines are split.
pub(crate) const MAX_LINE: usize = 64 * 1024;

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

/// A Rust panic report the guest printed on stderr: the reason goes into the failure's message,
/// the location only into the host's diagnostic log (S84).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PanicReport {
    /// The panic's message (its first line), once the line after the header was seen.
    pub(crate) message: Option<String>,
    /// `file:line:column` from the header line.
    pub(crate) location: Option<String>,
}

/// Spots Rust's panic report on stderr.
#[derive(Debug, Default)]
struct PanicSniffer {
    report: Option<PanicReport>,
}

impl PanicSniffer {
    fn line(&mut self, line: &str) {
        match &mut self.report {
            Some(report) if report.message.is_none() => {
                report.message = Some(line.trim().to_string());
            }
            Some(_) => {}
            None => {
                // `thread '<unnamed>' (1) panicked at src/lib.rs:7:5:`, the message on the next
                // line.
                if line.starts_with("thread '")
                    && let Some((_, rest)) = line.split_once(" panicked at ")
                {
                    self.report = Some(PanicReport {
                        message: None,
                        location: Some(rest.trim().trim_end_matches(':').to_string()),
                    });
                }
            }
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

    /// The panic report the guest printed on stderr, if any.
    pub(crate) fn panic_report(&self) -> Option<PanicReport> {
        lock(&self.state).panic.report.clone()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::EventLog;

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
            out.panic_report(),
            Some(PanicReport {
                message: Some("boom goes the plugin".into()),
                location: Some("src/lib.rs:71:24".into()),
            })
        );
    }
}
