//! Reading a `text/event-stream` body (HTML Living Standard, "Server-sent events",
//! "Interpreting an event stream") into the data of its `message` events, each a JSON-RPC
//! message (MCP specification, "Transports", streamable HTTP).
//!
//! Lines end with CRLF, LF or CR. A `data` field adds its value and a line feed to the event's
//! data; a blank line ends the event, whose data (without the last line feed) is given out when
//! its type is `message` (the default). Comments (`:`), `id`, `retry`, unknown fields and
//! events of other types are dropped: toolward does not resume streams. An event left
//! unfinished when the stream ends is dropped, as the standard says.

/// An event whose data and line being read went past the limit.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct TooLarge {
    /// The limit (bytes).
    pub(super) limit: usize,
    /// The bytes held for the event when it was refused.
    pub(super) seen: usize,
}

/// The UTF-8 byte order mark, ignored at the start of a stream.
const BYTE_ORDER_MARK: &[u8] = b"\xEF\xBB\xBF";

/// Splits an event stream, fed chunk by chunk, into the data of its `message` events.
#[derive(Debug)]
pub(super) struct EventReader {
    limit: usize,
    /// The line being read, without its end.
    line: Vec<u8>,
    /// The event's data so far: each `data` value followed by a line feed.
    data: Vec<u8>,
    /// Whether the event's type is `message`.
    is_message: bool,
    /// Whether the last chunk ended with a CR, so a LF starting the next one ends nothing.
    after_cr: bool,
    /// Whether no byte has been read yet.
    at_start: bool,
}

impl EventReader {
    /// A reader refusing any event whose data, with the line being read, holds more than
    /// `limit` bytes.
    pub(super) fn new(limit: usize) -> EventReader {
        EventReader {
            limit,
            line: Vec::new(),
            data: Vec::new(),
            is_message: true,
            after_cr: false,
            at_start: true,
        }
    }

    /// Reads `chunk`: the data of each `message` event it ends, in order.
    ///
    /// # Errors
    ///
    /// [`TooLarge`] as soon as the event being read goes past the limit; the reader must not
    /// be used after.
    pub(super) fn push(&mut self, chunk: &[u8]) -> Result<Vec<Vec<u8>>, TooLarge> {
        let mut rest = chunk;
        if self.at_start && !rest.is_empty() {
            self.at_start = false;
            // A byte order mark split across chunks is not looked for: no server sends one.
            rest = rest.strip_prefix(BYTE_ORDER_MARK).unwrap_or(rest);
        }
        if self.after_cr && !rest.is_empty() {
            self.after_cr = false;
            rest = rest.strip_prefix(b"\n").unwrap_or(rest);
        }
        let mut events = Vec::new();
        while !rest.is_empty() {
            let Some(end) = rest.iter().position(|byte| matches!(byte, b'\n' | b'\r')) else {
                self.take(rest)?;
                break;
            };
            let (line, tail) = rest.split_at(end);
            self.take(line)?;
            let consumed = match tail {
                [b'\r', b'\n', ..] => 2,
                [b'\r'] => {
                    self.after_cr = true;
                    1
                }
                _ => 1,
            };
            rest = tail.get(consumed..).unwrap_or_default();
            self.end_line(&mut events);
        }
        Ok(events)
    }

    /// Adds `bytes` to the line being read.
    fn take(&mut self, bytes: &[u8]) -> Result<(), TooLarge> {
        let seen = self
            .data
            .len()
            .saturating_add(self.line.len())
            .saturating_add(bytes.len());
        if seen > self.limit {
            return Err(TooLarge {
                limit: self.limit,
                seen,
            });
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    fn end_line(&mut self, events: &mut Vec<Vec<u8>>) {
        let line = std::mem::take(&mut self.line);
        if line.is_empty() {
            self.dispatch(events);
        } else if line.first() != Some(&b':') {
            let (field, value) = match line.iter().position(|byte| *byte == b':') {
                Some(colon) => {
                    let value = line.get(colon + 1..).unwrap_or_default();
                    (
                        line.get(..colon).unwrap_or_default(),
                        value.strip_prefix(b" ").unwrap_or(value),
                    )
                }
                None => (&line[..], &b""[..]),
            };
            match field {
                b"data" => {
                    self.data.extend_from_slice(value);
                    self.data.push(b'\n');
                }
                b"event" => self.is_message = value.is_empty() || value == b"message",
                _ => {}
            }
        }
        self.line = line;
        self.line.clear();
    }

    fn dispatch(&mut self, events: &mut Vec<Vec<u8>>) {
        let mut data = std::mem::take(&mut self.data);
        if data.pop().is_some() && self.is_message {
            events.push(data);
        }
        self.is_message = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(chunks: &[&[u8]]) -> Vec<String> {
        let mut reader = EventReader::new(1024);
        let mut events = Vec::new();
        for chunk in chunks {
            for event in reader.push(chunk).unwrap() {
                events.push(String::from_utf8(event).unwrap());
            }
        }
        events
    }

    #[test]
    fn data_lines_of_one_event_are_joined_with_line_feeds() {
        let events = read_all(&[b"id: 7\ndata: {\"a\":\ndata:1}\n\n"]);
        assert_eq!(events, ["{\"a\":\n1}"]);
    }

    #[test]
    fn every_line_end_counts_even_across_chunks() {
        let events = read_all(&[b"data: a\r", b"\ndata: b\r", b"\r", b"data: c\n", b"\n"]);
        assert_eq!(events, ["a\nb", "c"]);
    }

    #[test]
    fn comments_other_events_and_unfinished_events_are_dropped() {
        let events = read_all(&[
            b"\xEF\xBB\xBF: keep-alive\n\nevent: ping\ndata: x\n\nretry: 10\nevent: message\ndata: y\n\n",
            b"data: never finished",
        ]);
        assert_eq!(events, ["y"]);
    }

    #[test]
    fn an_event_with_an_empty_data_field_is_given_out_empty() {
        // The priming event of MCP 2025-11-25: an id and empty data.
        let events = read_all(&[b"id: 1\ndata:\n\n"]);
        assert_eq!(events, [""]);
    }

    #[test]
    fn an_event_past_the_limit_is_refused_before_it_is_read_whole() {
        let mut reader = EventReader::new(16);
        assert_eq!(reader.push(b"data: 0123\n").unwrap(), Vec::<Vec<u8>>::new());
        let error = reader.push(b"data: 0123456789").unwrap_err();
        assert_eq!(
            error,
            TooLarge {
                limit: 16,
                seen: 21
            }
        );
        // Comments do not add up: only the event's data and the current line count.
        let mut reader = EventReader::new(16);
        for _ in 0..100 {
            assert!(reader.push(b": keep-alive\n").unwrap().is_empty());
        }
    }
}
