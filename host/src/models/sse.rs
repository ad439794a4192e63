//! Server-Sent Events, read from a model's answer as its bytes arrive: lines end in LF, CRLF or
//! CR; `event:` names an event, `data:` lines gather its data (joined by LF), `:` starts a
//! comment, and a blank line ends the event. Each byte is looked at once: a chunk is scanned
//! from where the last one stopped, never from the start of the buffered line, so a long line
//! costs time in proportion to its length. A line (or an event's gathered data) longer than
//! the bound is refused before more of it is buffered.

/// One event of the stream.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Event {
    /// Its `event:` name; empty when it had none.
    pub(crate) event: String,
    /// Its `data:` lines, joined by LF.
    pub(crate) data: String,
}

/// A stream that breaks the bound on a line or an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TooLong {
    /// What broke it: `a line` or `an event's data`.
    pub(crate) what: &'static str,
    /// The bound, in bytes.
    pub(crate) max: usize,
}

impl std::fmt::Display for TooLong {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} longer than {} bytes in its event stream; raise RuntimeConfig::models.max_line_bytes (weft --model-max-line-kib) if the provider's lines are that long",
            self.what, self.max
        )
    }
}

/// The parser's state between chunks.
pub(crate) struct Parser {
    /// The bytes of the line not ended yet.
    line: Vec<u8>,
    /// The last chunk ended in CR: an LF that starts the next one ends nothing.
    after_cr: bool,
    /// No line was ended yet (a byte-order mark that starts the first line is dropped).
    at_start: bool,
    /// The event being gathered.
    event: Event,
    /// Whether a `data:` line was seen for it.
    has_data: bool,
    max_line: usize,
}

impl Parser {
    /// A parser refusing lines (and events' data) of more than `max_line` bytes.
    pub(crate) fn new(max_line: usize) -> Parser {
        Parser {
            line: Vec::new(),
            after_cr: false,
            at_start: true,
            event: Event::default(),
            has_data: false,
            max_line,
        }
    }

    /// Reads `chunk`, appending the events it completes to `out`.
    pub(crate) fn push(&mut self, mut chunk: &[u8], out: &mut Vec<Event>) -> Result<(), TooLong> {
        if self.after_cr && chunk.first() == Some(&b'\n') {
            chunk = &chunk[1..];
        }
        self.after_cr = false;
        while let Some(end) = chunk.iter().position(|b| *b == b'\n' || *b == b'\r') {
            self.take(&chunk[..end])?;
            let line = std::mem::take(&mut self.line);
            self.line_done(&line, out)?;
            self.line = line;
            self.line.clear();
            let crlf = chunk[end] == b'\r' && chunk.get(end + 1) == Some(&b'\n');
            if chunk[end] == b'\r' && end + 1 == chunk.len() {
                self.after_cr = true;
            }
            chunk = &chunk[end + if crlf { 2 } else { 1 }..];
        }
        self.take(chunk)
    }

    /// Buffers `bytes` of the current line, within the bound.
    fn take(&mut self, bytes: &[u8]) -> Result<(), TooLong> {
        if self.line.len() + bytes.len() > self.max_line {
            return Err(TooLong {
                what: "a line",
                max: self.max_line,
            });
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    /// A whole line: a field, a comment, or the blank line that ends an event.
    fn line_done(&mut self, mut line: &[u8], out: &mut Vec<Event>) -> Result<(), TooLong> {
        if self.at_start {
            self.at_start = false;
            line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        }
        if line.is_empty() {
            if self.has_data {
                out.push(std::mem::take(&mut self.event));
            }
            self.event = Event::default();
            self.has_data = false;
            return Ok(());
        }
        if line[0] == b':' {
            return Ok(());
        }
        let line = String::from_utf8_lossy(line);
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line.as_ref(), ""),
        };
        match field {
            "event" => self.event.event = value.to_owned(),
            "data" => {
                if self.event.data.len() + value.len() + 1 > self.max_line {
                    return Err(TooLong {
                        what: "an event's data",
                        max: self.max_line,
                    });
                }
                if self.has_data {
                    self.event.data.push('\n');
                }
                self.event.data.push_str(value);
                self.has_data = true;
            }
            // `id`, `retry` and unknown fields mean nothing to a model's answer.
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(chunks: &[&[u8]], max: usize) -> Result<Vec<Event>, TooLong> {
        let mut parser = Parser::new(max);
        let mut out = Vec::new();
        for chunk in chunks {
            parser.push(chunk, &mut out)?;
        }
        Ok(out)
    }

    fn event(event: &str, data: &str) -> Event {
        Event {
            event: event.into(),
            data: data.into(),
        }
    }

    #[test]
    fn events_gather_their_lines_whatever_the_line_endings_and_the_cuts() {
        let whole: &[u8] =
            b"\xEF\xBB\xBFevent: a\ndata: 1\ndata:2\n\n: note\r\ndata: x\r\n\r\ndata\rdata: y\r\r";
        let want = vec![event("a", "1\n2"), event("", "x"), event("", "\ny")];
        assert_eq!(parse(&[whole], 100), Ok(want.clone()));
        // Cut at every byte: the same events, CR then LF across a cut one line end.
        let bytes: Vec<&[u8]> = whole.chunks(1).collect();
        assert_eq!(parse(&bytes, 100), Ok(want.clone()));
        for at in 0..whole.len() {
            assert_eq!(parse(&[&whole[..at], &whole[at..]], 100), Ok(want.clone()));
        }
        // An event with no data, and a last event without its blank line, give nothing.
        assert_eq!(parse(&[b"event: x\n\ndata: 1\n"], 100), Ok(vec![]));
    }

    #[test]
    fn a_line_or_an_events_data_over_the_bound_is_refused_as_it_grows() {
        let long = vec![b'x'; 64];
        let err = parse(&[b": ", &long], 32).expect_err("too long");
        assert_eq!(err.what, "a line");
        assert!(err.to_string().contains("longer than 32 bytes"), "{err}");
        assert!(err.to_string().contains("max_line_bytes"), "{err}");
        // At the bound, a line is read.
        let mut line = b"data: ".to_vec();
        line.resize(32, b'y');
        line.extend_from_slice(b"\n\n");
        assert_eq!(parse(&[&line], 32).map(|e| e.len()), Ok(1));
        // Many short data lines add up to one event's data.
        let many = b"data: 0123456789\n".repeat(4);
        let err = parse(&[&many], 32).expect_err("too much data");
        assert_eq!(err.what, "an event's data");
    }

    #[test]
    fn a_long_line_in_small_chunks_is_read_whole() {
        // 16 MiB of one comment line in 4 KiB chunks, then an event.
        let mut parser = Parser::new(64 << 20);
        let mut out = Vec::new();
        parser.push(b": ", &mut out).expect("ok");
        let chunk = vec![b'x'; 4096];
        for _ in 0..4096 {
            parser.push(&chunk, &mut out).expect("ok");
        }
        parser.push(b"\n\ndata: done\n\n", &mut out).expect("ok");
        assert_eq!(out, vec![event("", "done")]);
        assert!(parser.line.is_empty());
    }
}
