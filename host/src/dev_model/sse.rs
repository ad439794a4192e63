//! A planned Server-Sent Events body: frames, the framing quirks, and where a hold waits.

use std::convert::Infallible;

use axum::body::{Body, Bytes};

use super::Hold;
use super::script::Quirks;

/// One step of a planned stream.
enum Piece {
    /// Bytes to send, as one body chunk.
    Bytes(Bytes),
    /// Let the connection flush before going on, so the next bytes go out in another write.
    Flush,
    /// Wait for the release here, when the request holds.
    Hold,
}

/// A stream planned in full before it is sent.
pub(crate) struct Plan {
    pieces: Vec<Piece>,
    quirks: Quirks,
    frames: usize,
}

impl Plan {
    /// An empty plan framing with `quirks`.
    pub(crate) fn new(quirks: Quirks) -> Plan {
        Plan {
            pieces: Vec::new(),
            quirks,
            frames: 0,
        }
    }

    /// A `data:` frame.
    pub(crate) fn data(&mut self, data: &str) {
        self.frame(format!("data: {data}\n\n"));
    }

    /// An `event:` frame with its data.
    pub(crate) fn event(&mut self, event: &str, data: &str) {
        self.frame(format!("event: {event}\ndata: {data}\n\n"));
    }

    /// The point where a held request waits for its release.
    pub(crate) fn hold(&mut self) {
        self.pieces.push(Piece::Hold);
    }

    fn frame(&mut self, frame: String) {
        if self.quirks.keepalive && self.frames > 0 {
            self.pieces
                .push(Piece::Bytes(Bytes::from_static(b": keep-alive\n\n")));
        }
        self.frames += 1;
        let bytes = Bytes::from(frame);
        if self.quirks.split_frames && bytes.len() > 2 {
            // Mid-line: the cut falls inside the frame's first line for any frame this sends.
            let cut = (bytes.len() / 2).min(bytes.iter().position(|b| *b == b'\n').unwrap_or(1));
            let cut = cut.max(1);
            self.pieces.push(Piece::Bytes(bytes.slice(..cut)));
            self.pieces.push(Piece::Flush);
            self.pieces.push(Piece::Bytes(bytes.slice(cut..)));
            self.pieces.push(Piece::Flush);
        } else {
            self.pieces.push(Piece::Bytes(bytes));
        }
    }

    /// The response body playing this plan; at a hold point it waits on `hold` (without one,
    /// it goes straight on).
    pub(crate) fn into_body(self, hold: Option<Hold>) -> Body {
        let state = (self.pieces.into_iter(), hold);
        let stream = futures::stream::unfold(state, |(mut pieces, mut hold)| async move {
            loop {
                match pieces.next()? {
                    Piece::Bytes(b) => return Some((Ok::<_, Infallible>(b), (pieces, hold))),
                    Piece::Flush => tokio::task::yield_now().await,
                    Piece::Hold => {
                        if let Some(h) = hold.take() {
                            h.wait().await;
                        }
                    }
                }
            }
        });
        Body::from_stream(stream)
    }
}
