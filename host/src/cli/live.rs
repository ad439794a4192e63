//! The progress of `run` and `resume` on a terminal: one status line redrawn in place (steps
//! done, running and failed, the time taken, the foreach in progress as a bar), with what a
//! person must read printed above it: a retry and why, a suspension, a sleep, a log line, a
//! model's text. A failure is counted, not written out: the run's record says it, once.

use std::collections::HashSet;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::Value;

use super::output::streamed_text;
use crate::driver::StoredEvent;
use crate::engine::EventKind;

/// How often the status line is redrawn (its spinner and clock move between events too).
const TICK: Duration = Duration::from_millis(100);

/// An entry's execution: its path, foreach item and loop iteration.
type Execution = (String, Option<u32>, Option<u32>);

/// The live display of one run's progress.
pub(super) struct Live {
    /// The status line.
    bar: ProgressBar,
    /// Executions started and not yet ended.
    running: HashSet<Execution>,
    /// Executions that succeeded.
    done: u64,
    /// Executions that failed.
    failed: u64,
    /// Items of the foreach shown that failed.
    failed_items: u64,
    /// The foreach shown as a bar: its path.
    foreach: Option<String>,
    /// The model call whose text is streaming, and its line so far.
    streaming: Option<(String, String)>,
}

impl Live {
    /// A display drawn on stderr.
    pub(super) fn new() -> Self {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        bar.set_style(spinner_style());
        bar.enable_steady_tick(TICK);
        let mut live = Live {
            bar,
            running: HashSet::new(),
            done: 0,
            failed: 0,
            failed_items: 0,
            foreach: None,
            streaming: None,
        };
        live.redraw();
        live
    }

    /// Takes in one event of the run.
    pub(super) fn show(&mut self, ev: &StoredEvent) {
        let path = ev.path.clone().unwrap_or_default();
        let at = (path.clone(), ev.foreach_index, ev.iteration);
        if let Some(text) = streamed_text(ev) {
            self.stream(&path, text);
            return;
        }
        self.end_stream();
        match ev.kind {
            EventKind::StepStarted => {
                self.running.insert(at);
            }
            EventKind::StepSucceeded | EventKind::StepFailed | EventKind::StepCancelled => {
                self.running.remove(&at);
                match ev.kind {
                    EventKind::StepSucceeded => self.done += 1,
                    EventKind::StepFailed => self.failed += 1,
                    _ => {}
                }
                if self.foreach.as_deref() == Some(path.as_str()) {
                    self.foreach = None;
                    self.bar.set_style(spinner_style());
                }
            }
            EventKind::StepSuspended => {
                self.running.remove(&at);
                self.say(&format!("waiting: {} waits for a resume", place(ev)));
            }
            EventKind::StepWaiting => {
                let until = ev.data.get("until").and_then(Value::as_str);
                self.say(&format!(
                    "waiting: {} sleeps until {}",
                    place(ev),
                    until.unwrap_or("its time")
                ));
            }
            EventKind::StepRetrying => {
                let attempt = ev.data.get("attempt").and_then(Value::as_u64).unwrap_or(0);
                let delay = ev.data.get("delay_ms").and_then(Value::as_u64).unwrap_or(0);
                let why = ev
                    .data
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or("it failed");
                self.say(&format!(
                    "retrying: {} (attempt {attempt} in {delay} ms): {why}",
                    place(ev)
                ));
            }
            EventKind::StepProgress => self.item(&path, &ev.data),
            EventKind::Log => {
                let level = ev
                    .data
                    .get("level")
                    .and_then(Value::as_str)
                    .unwrap_or("info");
                let message = ev.data.get("message").and_then(Value::as_str);
                let message = message.map_or_else(|| ev.data.to_string(), str::to_owned);
                self.say(&format!("{level}: {}{message}", prefix(ev)));
            }
            _ => {}
        }
        self.redraw();
    }

    /// Ends the display, leaving a line of what was done and how long it took.
    pub(super) fn finish(mut self) {
        self.end_stream();
        let took = self.bar.elapsed();
        self.bar.finish_and_clear();
        let summary = self.counts();
        eprintln!("{summary} in {:.1} s", took.as_secs_f64());
    }

    /// A foreach item ended: the foreach's bar moves on.
    fn item(&mut self, path: &str, data: &Value) {
        let (Some(done), Some(total)) = (
            data.get("done").and_then(Value::as_u64),
            data.get("total").and_then(Value::as_u64),
        ) else {
            return;
        };
        self.bar.set_length(total);
        self.bar.set_position(done);
        if self.foreach.as_deref() != Some(path) {
            self.foreach = Some(path.to_owned());
            self.failed_items = 0;
            self.bar.set_prefix(path.to_owned());
            self.bar.set_style(bar_style());
        }
        if data.get("status").and_then(Value::as_str) == Some("failed") {
            self.failed_items += 1;
        }
    }

    /// Shows a piece of a model's text: whole lines above the status line as they end.
    fn stream(&mut self, path: &str, text: &str) {
        if self.streaming.as_ref().is_some_and(|(p, _)| p != path) {
            self.end_stream();
        }
        let (_, line) = self
            .streaming
            .get_or_insert_with(|| (path.to_owned(), String::new()));
        line.push_str(text);
        while let Some(end) = line.find('\n') {
            let whole: String = line.drain(..=end).collect();
            self.bar.println(format!(
                "{path}: {}",
                printable(whole.trim_end_matches('\n'))
            ));
        }
    }

    /// Writes out the rest of a model's text.
    fn end_stream(&mut self) {
        if let Some((path, line)) = self.streaming.take()
            && !line.is_empty()
        {
            self.bar.println(format!("{path}: {}", printable(&line)));
        }
    }

    /// Prints a line above the status line.
    fn say(&self, line: &str) {
        self.bar.println(printable(line));
    }

    /// The counts, as the status line and the last line show them.
    fn counts(&self) -> String {
        let mut text = format!("{} done, {} running", self.done, self.running.len());
        if self.failed > 0 {
            text.push_str(&format!(", {} failed", self.failed));
        }
        text
    }

    fn redraw(&mut self) {
        let mut text = self.counts();
        if self.foreach.is_some() && self.failed_items > 0 {
            text.push_str(&format!(" ({} items failed)", self.failed_items));
        }
        self.bar.set_message(text);
    }
}

/// The status line with no foreach in progress.
fn spinner_style() -> ProgressStyle {
    ProgressStyle::with_template("{spinner} {elapsed:>4} {msg}").unwrap_or_else(|_| {
        // The template is a constant: it parses.
        ProgressStyle::default_spinner()
    })
}

/// The status line while a foreach runs: its items as a bar.
fn bar_style() -> ProgressStyle {
    ProgressStyle::with_template(
        "{spinner} {elapsed:>4} {prefix} [{bar:24}] {pos}/{len} items · {msg}",
    )
    .map(|s| s.progress_chars("=> "))
    .unwrap_or_else(|_| ProgressStyle::default_bar())
}

/// Where an event happened: `path [item I] [iteration N]`.
fn place(ev: &StoredEvent) -> String {
    let mut text = ev.path.clone().unwrap_or_else(|| "the run".to_owned());
    if let Some(i) = ev.foreach_index {
        text.push_str(&format!(" [item {i}]"));
    }
    if let Some(i) = ev.iteration {
        text.push_str(&format!(" [iteration {i}]"));
    }
    text
}

/// `path: ` before a log line of a step, nothing before one of the run.
fn prefix(ev: &StoredEvent) -> String {
    ev.path
        .as_ref()
        .map(|_| format!("{}: ", place(ev)))
        .unwrap_or_default()
}

/// `text` with its control characters shown as spaces: a plugin's or model's text never moves
/// the terminal's cursor or changes its state.
fn printable(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(
        seq: u64,
        kind: EventKind,
        path: &str,
        index: Option<u32>,
        data: Value,
    ) -> StoredEvent {
        StoredEvent {
            seq,
            run_id: "r".into(),
            at: String::new(),
            kind,
            path: Some(path.into()).filter(|p: &String| !p.is_empty()),
            foreach_index: index,
            iteration: None,
            data,
        }
    }

    #[test]
    fn counts_follow_starts_and_ends_and_foreach_items() {
        let mut live = Live::new();
        live.bar.set_draw_target(ProgressDrawTarget::hidden());
        live.show(&event(1, EventKind::StepStarted, "a", None, Value::Null));
        live.show(&event(2, EventKind::StepStarted, "each", None, Value::Null));
        assert_eq!(live.counts(), "0 done, 2 running");
        live.show(&event(3, EventKind::StepSucceeded, "a", None, Value::Null));
        let item = serde_json::json!({"index": 0, "total": 3, "status": "failed", "done": 1});
        live.show(&event(4, EventKind::StepProgress, "each", None, item));
        assert_eq!(live.foreach.as_deref(), Some("each"));
        assert_eq!((live.bar.position(), live.bar.length()), (1, Some(3)));
        assert_eq!(live.failed_items, 1);
        live.show(&event(5, EventKind::StepFailed, "each", None, Value::Null));
        assert_eq!(live.counts(), "1 done, 0 running, 1 failed");
        assert_eq!(live.foreach, None, "the bar goes with its foreach");
    }

    #[test]
    fn text_is_made_printable() {
        assert_eq!(printable("a\u{1b}[2Jb\r"), "a [2Jb ");
    }
}
