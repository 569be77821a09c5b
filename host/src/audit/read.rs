//! Reading the audit log for people: `toolward audit show` (filtered, a table or JSON) and
//! `toolward audit tail [-f]`. Both check the chain as they read ([`ChainCheck`], the check of
//! [`verify`](super::verify)) and say where it breaks; nothing past a break is shown as if it
//! were on record.
//!
//! This reads the JSONL file of `audit.file`. When the audit moves behind a store interface,
//! a store's record stream takes the place of the file's lines: [`Filter`] and the rendering
//! work on [`AuditRecord`]s and the raw record JSON, not on the file.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufReader, Seek as _, SeekFrom};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{
    AuditDecision, AuditError, AuditRecord, BreakProblem, ChainBreak, ChainCheck, NextLine,
};

/// How often `tail -f` looks for new records, in milliseconds: 200. A person watching does
/// not notice a fifth of a second; the cost is one `stat` and one read.
pub const FOLLOW_POLL_MS: u64 = 200;

/// Which records to show. Every field that is set must match.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Records at or after this time, ms since the Unix epoch.
    pub since_ms: Option<u64>,
    /// Records before this time, ms since the Unix epoch.
    pub until_ms: Option<u64>,
    /// The server's name in the config.
    pub server: Option<String>,
    /// The tool: its exposed name (`fs__read_file`) or its name on the server.
    pub tool: Option<String>,
    /// The principal.
    pub principal: Option<String>,
    /// The decision (`allow`, `deny`, `hold`).
    pub decision: Option<AuditDecision>,
    /// The call id.
    pub call_id: Option<String>,
}

impl Filter {
    /// Whether `record` passes every condition set.
    #[must_use]
    pub fn matches(&self, record: &AuditRecord) -> bool {
        let e = &record.event;
        let eq = |want: &Option<String>, got: &Option<String>| {
            want.as_ref().is_none_or(|w| got.as_ref() == Some(w))
        };
        self.since_ms.is_none_or(|t| record.time >= t)
            && self.until_ms.is_none_or(|t| record.time < t)
            && eq(&self.server, &e.server)
            && eq(&self.principal, &e.principal)
            && eq(&self.call_id, &e.call_id)
            && self.decision.is_none_or(|d| e.decision == Some(d))
            && self
                .tool
                .as_ref()
                .is_none_or(|t| e.tool.as_ref() == Some(t) || e.upstream_tool.as_ref() == Some(t))
    }
}

/// Errors of the readers.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The log could not be read.
    #[error(transparent)]
    Audit(#[from] AuditError),
    /// A time given on the command line is not understood.
    #[error(
        "`{given}` is not a time: give `2026-12-01`, `2026-12-01T09:30:00Z`, an age like `90m`, `12h` or `7d`, or milliseconds since the epoch"
    )]
    Time {
        /// What was given.
        given: String,
    },
    /// The log got shorter while `tail -f` read it (cut or replaced).
    #[error(
        "audit log `{path}` is now {now} bytes, shorter than the {read} bytes already read: it was cut short or replaced; run `toolward audit verify`"
    )]
    Shrunk {
        /// The log.
        path: PathBuf,
        /// Bytes read so far.
        read: u64,
        /// Its size now.
        now: u64,
    },
    /// The chain breaks.
    #[error("chain broken at {0}; nothing past it is shown")]
    Broken(ChainBreak),
}

/// What [`show`] found: the matching records (each as its whole JSON, so fields added by
/// other versions are kept) and where the chain breaks, if it does.
#[derive(Debug, Clone)]
pub struct Shown {
    /// The matching records, in log order.
    pub records: Vec<(AuditRecord, Value)>,
    /// Records read (all intact ones, matching or not).
    pub read: u64,
    /// Where the chain breaks.
    pub first_break: Option<ChainBreak>,
}

/// The records of the log at `path` that `filter` passes, the chain checked as it reads.
///
/// # Errors
///
/// [`ReadError::Audit`] when the file cannot be read; a broken chain is
/// [`Shown::first_break`].
pub fn show(path: &Path, filter: &Filter) -> Result<Shown, ReadError> {
    let mut records = Vec::new();
    let report = super::read_chain(path, |record, line| {
        if filter.matches(record) {
            let raw = serde_json::from_slice(line).unwrap_or(Value::Null);
            records.push((record.clone(), raw));
        }
    })?;
    Ok(Shown {
        records,
        read: report.records,
        first_break: report.first_break,
    })
}

/// Follows a log as it grows: the chain checked from its first record.
#[derive(Debug)]
pub struct Follower {
    path: PathBuf,
    chain: ChainCheck,
    /// Bytes of complete records read.
    offset: u64,
}

impl Follower {
    /// A follower at the start of the log at `path`.
    #[must_use]
    pub fn new(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
            chain: ChainCheck::default(),
            offset: 0,
        }
    }

    /// The records written since the last call (all of them the first time), each with its
    /// JSON. Reading stops at the room at the end of the log. A line that looks cut off, or
    /// bytes past the room, are read again under the shared lock writers take, so a record
    /// being written is waited for; seen under the lock, they are a break, wherever they are.
    ///
    /// # Errors
    ///
    /// [`ReadError::Broken`] at a break, [`ReadError::Shrunk`] when the file got shorter
    /// than what was read, [`ReadError::Audit`] when it cannot be read.
    pub fn poll(&mut self) -> Result<Vec<(AuditRecord, Value)>, ReadError> {
        let io = |action| AuditError::io(action, &self.path);
        let file = match File::open(&self.path) {
            Ok(file) => file,
            // A log not written yet: `tail -f` waits for its first record.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && self.offset == 0 => {
                return Ok(Vec::new());
            }
            Err(e) => return Err(io("open")(e).into()),
        };
        let len = file.metadata().map_err(io("read"))?.len();
        if len < self.offset {
            return Err(ReadError::Shrunk {
                path: self.path.clone(),
                read: self.offset,
                now: len,
            });
        }
        let mut handle = &file;
        handle
            .seek(SeekFrom::Start(self.offset))
            .map_err(io("read"))?;
        let mut reader = BufReader::new(&file);
        let mut locked = false;
        let mut line = Vec::new();
        let mut out = Vec::new();
        loop {
            let problem = match super::next_line(&mut reader, &mut line).map_err(io("read"))? {
                NextLine::Line => {
                    let record = self.chain.check(&line).map_err(ReadError::Broken)?;
                    self.offset += line.len() as u64 + 1;
                    out.push((record, serde_json::from_slice(&line).unwrap_or(Value::Null)));
                    continue;
                }
                NextLine::End => return Ok(out),
                NextLine::Room => {
                    if !super::has_bytes_past_room(&mut reader).map_err(io("read"))? {
                        return Ok(out);
                    }
                    BreakProblem::AfterRoom
                }
                NextLine::Torn { too_long: true } => BreakProblem::TooLong,
                NextLine::Torn { too_long: false } => BreakProblem::Torn,
            };
            if locked || problem == BreakProblem::TooLong {
                return Err(ReadError::Broken(self.chain.torn_at(problem)));
            }
            // A writer may be halfway through its write: read on under the shared lock.
            reader = super::relock(&file, self.offset).map_err(io("read"))?;
            locked = true;
        }
    }
}

/// The last `count` of `records` that `filter` passes.
#[must_use]
pub fn last_matching(
    records: Vec<(AuditRecord, Value)>,
    filter: &Filter,
    count: usize,
) -> Vec<(AuditRecord, Value)> {
    let mut last = VecDeque::with_capacity(count);
    for r in records.into_iter().filter(|(r, _)| filter.matches(r)) {
        if last.len() == count {
            last.pop_front();
        }
        if count > 0 {
            last.push_back(r);
        }
    }
    last.into()
}

/// The header of [`render_row`]'s table.
pub const TABLE_HEADER: &str = "time (UTC)               seq    kind               call        principal    tool                          decision  reason";

/// One record as a table row: time, seq, kind, call id, principal, tool, decision, reason.
/// Text from servers, clients and policies is escaped ([`crate::text::escape`]), never
/// interpreted: each row is one line, whatever the record holds.
#[must_use]
pub fn render_row(record: &AuditRecord) -> String {
    let e = &record.event;
    let text = |v: &Option<String>| crate::text::escape(v.as_deref().unwrap_or("-"));
    let decision = e.decision.map_or("-", |d| match d {
        AuditDecision::Allow => "allow",
        AuditDecision::Deny => "deny",
        AuditDecision::Hold => "hold",
    });
    let reason = text(&e.reason);
    let mut out = String::new();
    let _ = write!(
        out,
        "{:24} {:<6} {:18} {:11} {:12} {:29} {:9} {}",
        utc(record.time),
        record.seq,
        e.kind.to_string(),
        text(&e.call_id),
        text(&e.principal),
        text(&e.tool),
        decision,
        reason
    );
    out
}

/// Milliseconds since the epoch as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
#[must_use]
pub fn utc(ms: u64) -> String {
    let secs = ms / 1000;
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60,
        ms % 1000
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (H. Hinnant's
/// `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let m = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// (year, month, day) to days since 1970-01-01 (H. Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// A time from the command line, as ms since the epoch: `2026-12-01`,
/// `2026-12-01T09:30:00Z` (UTC), an age before `now_ms` (`90s`, `90m`, `12h`, `7d`), or
/// milliseconds since the epoch.
///
/// # Errors
///
/// [`ReadError::Time`] for anything else.
pub fn parse_time(given: &str, now_ms: u64) -> Result<u64, ReadError> {
    let bad = || ReadError::Time {
        given: given.to_owned(),
    };
    if let Ok(ms) = given.parse::<u64>() {
        return Ok(ms);
    }
    if let Some(unit) = given.chars().last().filter(|c| "smhd".contains(*c)) {
        let n: u64 = given
            .get(..given.len() - 1)
            .and_then(|n| n.parse().ok())
            .ok_or_else(bad)?;
        let ms = match unit {
            's' => 1000,
            'm' => 60_000,
            'h' => 3_600_000,
            _ => 86_400_000,
        };
        return Ok(now_ms.saturating_sub(n.saturating_mul(ms)));
    }
    let (date, time) = match given.split_once('T') {
        Some((date, time)) => (date, Some(time.strip_suffix('Z').ok_or_else(bad)?)),
        None => (given, None),
    };
    let mut parts = date.split('-');
    let (Some(y), Some(m), Some(d), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad());
    };
    let (y, m, d): (i64, u32, u32) = (
        y.parse().map_err(|_| bad())?,
        m.parse().map_err(|_| bad())?,
        d.parse().map_err(|_| bad())?,
    );
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || y < 1970 {
        return Err(bad());
    }
    let mut secs = days_from_civil(y, m, d) * 86_400;
    if let Some(time) = time {
        let fields: Vec<&str> = time.split(':').collect();
        let [h, mi, s] = fields.as_slice() else {
            return Err(bad());
        };
        let (h, mi, s): (i64, i64, i64) = (
            h.parse().map_err(|_| bad())?,
            mi.parse().map_err(|_| bad())?,
            s.parse().map_err(|_| bad())?,
        );
        if h > 23 || mi > 59 || s > 60 {
            return Err(bad());
        }
        secs += h * 3600 + mi * 60 + s;
    }
    u64::try_from(secs).map(|s| s * 1000).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::{AuditEvent, AuditKind, AuditLog, AuditSync};

    fn log_with(n: u64) -> (tempfile::TempDir, PathBuf, AuditLog) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path, AuditSync::None).unwrap();
        for i in 0..n {
            log.append(AuditEvent {
                call_id: Some(format!("c{i}")),
                server: Some(if i % 2 == 0 { "fs" } else { "git" }.to_owned()),
                tool: Some("fs__read_file".to_owned()),
                decision: Some(if i == 3 {
                    AuditDecision::Deny
                } else {
                    AuditDecision::Allow
                }),
                ..AuditEvent::new(AuditKind::Decision)
            })
            .unwrap();
        }
        (dir, path, log)
    }

    #[test]
    fn a_row_shows_a_reason_on_one_line_with_no_control_left() {
        let record = AuditRecord {
            seq: 7,
            time: 0,
            prev: String::new(),
            event: AuditEvent {
                reason: Some("bad\u{1b}[31mRED\r\nINJECTED audit line".to_owned()),
                ..AuditEvent::new(AuditKind::Decision)
            },
        };
        let row = render_row(&record);
        assert!(
            row.ends_with("bad\\u{001B}[31mRED\\r\\nINJECTED audit line"),
            "{row:?}"
        );
        assert!(!row.chars().any(char::is_control), "{row:?}");
    }

    #[test]
    fn a_row_escapes_line_breaks_tabs_and_bidi_controls_in_the_tool_and_principal_columns() {
        let record = AuditRecord {
            seq: 7,
            time: 0,
            prev: String::new(),
            event: AuditEvent {
                tool: Some("s__t\nFAKE ROW\tx".to_owned()),
                principal: Some("ci\r\u{202e}nimda\u{200b}".to_owned()),
                ..AuditEvent::new(AuditKind::Decision)
            },
        };
        let row = render_row(&record);
        assert!(row.contains("s__t\\nFAKE ROW\\tx"), "{row:?}");
        assert!(row.contains("ci\\r\\u{202E}nimda\\u{200B}"), "{row:?}");
        assert!(
            !row.chars()
                .any(|c| c.is_control() || crate::text::is_escaped(c)),
            "{row:?}"
        );
    }

    #[test]
    fn show_filters_by_server_decision_and_call_and_reports_a_break() {
        let (_dir, path, log) = log_with(6);
        drop(log);
        let by = |filter: Filter| {
            show(&path, &filter)
                .unwrap()
                .records
                .iter()
                .map(|(r, _)| r.event.call_id.clone().unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            by(Filter {
                server: Some("git".to_owned()),
                ..Filter::default()
            }),
            ["c1", "c3", "c5"]
        );
        assert_eq!(
            by(Filter {
                decision: Some(AuditDecision::Deny),
                ..Filter::default()
            }),
            ["c3"]
        );
        assert_eq!(
            by(Filter {
                call_id: Some("c4".to_owned()),
                ..Filter::default()
            }),
            ["c4"]
        );
        // Change one record: the chain breaks at the next line, and nothing past it shows.
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replacen("\"c2\"", "\"cX\"", 1)).unwrap();
        let shown = show(&path, &Filter::default()).unwrap();
        let brk = shown.first_break.unwrap();
        assert_eq!(brk.line, 4);
        assert_eq!(shown.records.len(), 3);
    }

    #[test]
    fn follower_returns_new_records_and_stops_at_a_rewritten_log() {
        let (_dir, path, log) = log_with(2);
        let mut follower = Follower::new(&path);
        assert_eq!(follower.poll().unwrap().len(), 2);
        assert!(follower.poll().unwrap().is_empty());
        log.append(AuditEvent::new(AuditKind::Load)).unwrap();
        let fresh = follower.poll().unwrap();
        assert_eq!(fresh.len(), 1);
        assert_eq!(fresh[0].0.seq, 2);
        drop(log);
        std::fs::write(&path, "").unwrap();
        assert!(matches!(follower.poll(), Err(ReadError::Shrunk { .. })));
    }

    #[test]
    fn a_blank_or_spaces_line_before_later_records_breaks_the_follower_as_it_breaks_show() {
        for inserted in ["\n", "   \n"] {
            let (_dir, path, log) = log_with(3);
            drop(log);
            let bytes = std::fs::read(&path).unwrap();
            let first = bytes.iter().position(|b| *b == b'\n').unwrap() + 1;
            let mut edited = bytes.get(..first).unwrap().to_vec();
            edited.extend_from_slice(inserted.as_bytes());
            edited.extend_from_slice(bytes.get(first..).unwrap());
            std::fs::write(&path, edited).unwrap();

            let shown = show(&path, &Filter::default()).unwrap();
            assert_eq!(shown.records.len(), 1, "{inserted:?}");
            let expected = shown.first_break.unwrap();
            assert_eq!(expected.problem, BreakProblem::AfterRoom);
            match Follower::new(&path).poll() {
                Err(ReadError::Broken(brk)) => assert_eq!(brk, expected, "{inserted:?}"),
                other => panic!("{inserted:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn times_parse_as_dates_ages_and_milliseconds() {
        assert_eq!(parse_time("1970-01-02", 0).unwrap(), 86_400_000);
        assert_eq!(
            parse_time("2026-12-01T09:30:00Z", 0).unwrap(),
            1_796_117_400_000
        );
        assert_eq!(
            parse_time("2h", 10_000_000).unwrap(),
            10_000_000 - 7_200_000
        );
        assert_eq!(parse_time("123", 0).unwrap(), 123);
        assert!(parse_time("yesterday", 0).is_err());
        assert_eq!(utc(1_796_117_400_123), "2026-12-01T09:30:00.123Z");
    }
}
