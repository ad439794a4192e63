//! Where a command's text goes: this terminal, or a control-socket client (S118).

use std::io::Write;

use serde_json::Value;

use crate::driver::StoredEvent;
use crate::engine::EventKind;

/// A command's two output streams.
pub trait Output: Send {
    /// One line of stdout.
    fn line(&mut self, text: &str);
    /// One line of stderr.
    fn err(&mut self, text: &str);
    /// A piece of a stderr line, shown at once (a model's text as it streams); the line ends
    /// with the next [`Output::err`]. By default each piece is a line of its own.
    fn err_part(&mut self, text: &str) {
        self.err(text);
    }
    /// The command's run `run_id` is stored: a client served through the control socket
    /// learns it, so it can say how to go on should the serving process die (S118).
    fn started(&mut self, _run_id: &str) {}
    /// Whether stderr is a terminal a live display can be drawn on (for a client served through
    /// the control socket, the client's).
    fn terminal(&self) -> bool {
        false
    }
    /// Hands `ev` to a live display drawn by another process (a control-socket client on a
    /// terminal); `false` when the display is this process's to draw.
    fn live_elsewhere(&mut self, _ev: &StoredEvent) -> bool {
        false
    }
}

/// This process's own stdout and stderr.
pub struct StdOutput;

impl Output for StdOutput {
    fn line(&mut self, text: &str) {
        // A reader that went away (`weft ... | head`) is not an error of ours.
        let _ = writeln!(std::io::stdout().lock(), "{text}");
    }

    fn err(&mut self, text: &str) {
        let _ = writeln!(std::io::stderr().lock(), "{text}");
    }

    fn err_part(&mut self, text: &str) {
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "{text}");
        let _ = err.flush();
    }

    fn terminal(&self) -> bool {
        std::io::IsTerminal::is_terminal(&std::io::stderr())
    }
}

/// Progress on stderr: one line per event, except a model's text, which is shown as it streams
/// (`PATH: text…` on one line, ended by the next event). A failure is written out once: the
/// events that carry it on (the step's, the run's) name the line that said it.
#[derive(Default)]
pub(super) struct Progress {
    /// The path of the model call whose text is being shown.
    streaming: Option<String>,
    /// The last failure written out: its step and message, and the event that said it.
    said: Option<(Value, Value, u64)>,
}

impl Progress {
    /// Shows `ev`, its data cut to `max_data` bytes.
    pub(super) fn show(&mut self, out: &mut dyn Output, ev: &StoredEvent, max_data: usize) {
        if let (Some(text), Some(path)) = (streamed_text(ev), &ev.path) {
            if self.streaming.as_ref() != Some(path) {
                self.end(out);
                out.err_part(&format!("[{:>3}] {path}: ", ev.seq));
                self.streaming = Some(path.clone());
            }
            out.err_part(text);
            return;
        }
        self.end(out);
        if let Some(error) = ev.data.get("error") {
            let key = (error.get("step").cloned(), error.get("message").cloned());
            if let (Some(step), Some(message)) = key {
                match &self.said {
                    Some((s, m, seq)) if *s == step && *m == message => {
                        let mut line = progress_line(&ev_without_data(ev), max_data);
                        line.push_str(&format!(": the failure of [{seq:>3}]"));
                        out.err(&line);
                        return;
                    }
                    _ => self.said = Some((step, message, ev.seq)),
                }
            }
        }
        out.err(&progress_line(ev, max_data));
    }

    /// Ends a line of streamed text.
    pub(super) fn end(&mut self, out: &mut dyn Output) {
        if self.streaming.take().is_some() {
            out.err("");
        }
    }
}

/// The text of a writer chunk that is a model's text (`{"text": ...}` alone).
pub(super) fn streamed_text(ev: &StoredEvent) -> Option<&str> {
    match (&ev.data, ev.kind) {
        (Value::Object(map), EventKind::StepOutput) if map.len() == 1 => {
            map.get("text").and_then(Value::as_str)
        }
        _ => None,
    }
}

/// `ev` without its data, for a line that refers to an earlier one.
fn ev_without_data(ev: &StoredEvent) -> StoredEvent {
    StoredEvent {
        data: Value::Null,
        ..ev.clone()
    }
}

/// One human-readable line of progress for an event, its data cut to `max_data` bytes.
pub(super) fn progress_line(ev: &StoredEvent, max_data: usize) -> String {
    let kind = serde_json::to_value(ev.kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let mut line = format!("[{:>3}] {kind}", ev.seq);
    if let Some(path) = &ev.path {
        line.push(' ');
        line.push_str(path);
    }
    if let Some(i) = ev.foreach_index {
        line.push_str(&format!(" [item {i}]"));
    }
    if let Some(i) = ev.iteration {
        line.push_str(&format!(" [iteration {i}]"));
    }
    if !ev.data.is_null() {
        let mut data = ev.data.to_string();
        if data.len() > max_data {
            data.truncate(data.floor_char_boundary(max_data));
            data.push('…');
        }
        line.push(' ');
        line.push_str(&data);
    }
    line
}
