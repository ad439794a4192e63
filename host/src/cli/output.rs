//! Where a command's text goes: this terminal, or a control-socket client (S118).

use std::io::Write;

use crate::driver::StoredEvent;

/// A command's two output streams.
pub trait Output: Send {
    /// One line of stdout.
    fn line(&mut self, text: &str);
    /// One line of stderr.
    fn err(&mut self, text: &str);
    /// The command's run `run_id` is stored: a client served through the control socket
    /// learns it, so it can say how to go on should the serving process die (S118).
    fn started(&mut self, _run_id: &str) {}
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
}

/// One human-readable line of progress for an event, its data cut to `max_data` bytes.
pub fn progress_line(ev: &StoredEvent, max_data: usize) -> String {
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
