//! Workflow files: the YAML (or JSON) format of WORKFLOW-FORMAT.md §1, checked into a graph.

mod checks;
mod load;
mod quote;
mod raw;
mod syntax;

use std::fmt;
use std::path::{Path, PathBuf};

pub(crate) use load::load_workflow_with;
pub use load::{LoadedWorkflow, MAX_ENTRIES, MAX_FILE_NESTING, load_workflow};

/// Why a workflow file was refused: the file, the line, what is wrong and how to fix it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct WorkflowError {
    /// The file.
    pub file: PathBuf,
    /// The line (1-based), when known.
    pub line: Option<u64>,
    /// The column (1-based), when known.
    pub column: Option<u64>,
    /// What is wrong.
    pub message: String,
    /// How to fix it.
    pub fix: String,
    /// The text of the line named, made printable, with a caret line under it when the column
    /// is known.
    pub source_line: Option<Box<str>>,
}

impl WorkflowError {
    fn at(file: &Path, line: Option<u64>, message: String, fix: &str) -> Self {
        WorkflowError {
            file: file.to_path_buf(),
            line,
            column: None,
            message,
            fix: fix.to_owned(),
            source_line: None,
        }
    }
}

/// The most characters of a file a message quotes in one place (between backquotes).
const QUOTE_CHARS: usize = 80;

/// The most characters a message has.
const MESSAGE_CHARS: usize = 1000;

impl WorkflowError {
    /// This error with its quotes of the file cut short: a message quotes what it refuses (a
    /// key, an id, a value), which may be megabytes long.
    fn bounded(mut self) -> Self {
        let mut message = String::new();
        for (n, part) in self.message.split('`').enumerate() {
            if n > 0 {
                message.push('`');
            }
            if n % 2 == 1 && part.chars().count() > QUOTE_CHARS {
                message.extend(part.chars().take(QUOTE_CHARS));
                message.push('…');
            } else {
                message.push_str(part);
            }
        }
        if message.chars().count() > MESSAGE_CHARS {
            message = message.chars().take(MESSAGE_CHARS).collect();
            message.push_str("… (cut short)");
        }
        self.message = message;
        self
    }
}

impl fmt::Display for WorkflowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(col) = self.column {
                write!(f, ":{col}")?;
            }
        }
        write!(f, ": {}", self.message)?;
        if let (Some(source), Some(number)) = (&self.source_line, self.line) {
            let gutter = number.to_string();
            for (n, line) in source.lines().enumerate() {
                let label = if n == 0 { gutter.as_str() } else { "" };
                write!(f, "\n  {label:>width$} | {line}", width = gutter.len())?;
            }
        }
        if !self.fix.is_empty() {
            write!(f, "\n  fix: {}", self.fix)?;
        }
        Ok(())
    }
}
