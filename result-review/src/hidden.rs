//! The hidden-characters review: one pass over the text's bytes (see the crate docs for the
//! characters and how they compare with the host's `text::hidden_character`).

/// What a hidden character or sequence is: the `<what>` of the kind `hidden:<what>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hidden {
    EscapeSequence,
    Control,
    Bidi,
    ZeroWidth,
    Tag,
    VariationSelector,
    Invisible,
}

impl Hidden {
    /// The `<what>` of `hidden:<what>`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Hidden::EscapeSequence => "escape-sequence",
            Hidden::Control => "control",
            Hidden::Bidi => "bidi",
            Hidden::ZeroWidth => "zero-width",
            Hidden::Tag => "tag",
            Hidden::VariationSelector => "variation-selector",
            Hidden::Invisible => "invisible",
        }
    }
}

/// A run of hidden characters: `[start, end)`, what they are, and how many characters (or
/// sequences) it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Run {
    pub(crate) start: usize,
    pub(crate) end: usize,
    pub(crate) what: Hidden,
    count: usize,
}

/// What `c` is when hidden, leaving out escape sequences (an ESC or a C1 introducer is a
/// control here; [`sequence_end`] decides first whether it starts a sequence).
pub(crate) fn classify(c: char) -> Option<Hidden> {
    match c {
        '\t' | '\n' | '\r' => None,
        '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' => Some(Hidden::Control),
        '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => {
            Some(Hidden::Bidi)
        }
        '\u{ad}' | '\u{180e}' | '\u{200b}'..='\u{200d}' | '\u{2060}'..='\u{2064}' | '\u{feff}' => {
            Some(Hidden::ZeroWidth)
        }
        '\u{e0000}'..='\u{e007f}' => Some(Hidden::Tag),
        '\u{fe00}'..='\u{fe0f}' | '\u{e0100}'..='\u{e01ef}' => Some(Hidden::VariationSelector),
        '\u{34f}'
        | '\u{115f}'
        | '\u{1160}'
        | '\u{17b4}'
        | '\u{17b5}'
        | '\u{180b}'..='\u{180d}'
        | '\u{180f}'
        | '\u{2065}'
        | '\u{206a}'..='\u{206f}'
        | '\u{2800}'
        | '\u{3164}'
        | '\u{ffa0}'
        | '\u{fff0}'..='\u{fffb}'
        | '\u{110bd}'
        | '\u{110cd}'
        | '\u{13430}'..='\u{1343f}'
        | '\u{1bca0}'..='\u{1bca3}'
        | '\u{1d159}'
        | '\u{1d173}'..='\u{1d17a}'
        | '\u{e0080}'..='\u{e00ff}'
        | '\u{e01f0}'..='\u{e0fff}' => Some(Hidden::Invisible),
        _ => None,
    }
}

/// Whether a character starting with byte `b` can be hidden: a control byte, or the first byte
/// of the UTF-8 encoding of a character [`classify`] names (U+0080–U+00BF start with 0xC2,
/// U+061C with 0xD8, U+034F with 0xCD, U+115F–U+1160 and U+17B4–U+180F with 0xE1,
/// U+2000–U+2FFF with 0xE2, U+3164 with 0xE3, U+FE00–U+FFFF with 0xEF, and the planes 1 and 14
/// with 0xF0 and 0xF3).
pub(crate) fn may_hide(b: u8) -> bool {
    MAY_HIDE[usize::from(b)]
}

/// Whether the character starting at `at`, at a byte [`may_hide`] accepts, may be hidden, from
/// its first two bytes: of the characters starting with 0xE3 only U+3164 (`E3 85 A4`) is, so
/// Japanese and Chinese text is not decoded character by character; likewise for the other
/// lead bytes [`may_hide`] names. True for a control byte. Every character [`classify`] names
/// passes (the test `the_two_byte_check_passes_every_hidden_character` goes through all).
fn may_hide_char(bytes: &[u8], at: usize) -> bool {
    let second = bytes.get(at + 1).copied().unwrap_or(0);
    match bytes.get(at) {
        // C1 controls U+0080–U+009F, U+00AD.
        Some(0xc2) => (0x80..=0x9f).contains(&second) || second == 0xad,
        // U+034F.
        Some(0xcd) => second == 0x8f,
        // U+061C.
        Some(0xd8) => second == 0x9c,
        // U+1140–U+117F, U+1780–U+17BF, U+1800–U+183F.
        Some(0xe1) => matches!(second, 0x85 | 0x9e | 0xa0),
        // U+2000–U+207F, U+2800–U+283F.
        Some(0xe2) => matches!(second, 0x80 | 0x81 | 0xa0),
        // U+3140–U+317F.
        Some(0xe3) => second == 0x85,
        // U+FE00–U+FE3F, U+FEC0–U+FEFF, U+FF80–U+FFFF.
        Some(0xef) => matches!(second, 0xb8 | 0xbb | 0xbe | 0xbf),
        // U+11000–U+11FFF, U+13000–U+13FFF, U+1B000–U+1BFFF, U+1D000–U+1DFFF.
        Some(0xf0) => matches!(second, 0x91 | 0x93 | 0x9b | 0x9d),
        // U+E0000–U+E0FFF.
        Some(0xf3) => second == 0xa0,
        _ => true,
    }
}

/// The length of the UTF-8 encoding that `lead` starts.
fn utf8_len(lead: u8) -> usize {
    match lead {
        0xf0.. => 4,
        0xe0.. => 3,
        0xc0.. => 2,
        _ => 1,
    }
}

/// [`may_hide`] as a table.
pub(crate) const MAY_HIDE: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = b < 0x20
            || matches!(
                b,
                0x7f | 0xc2 | 0xcd | 0xd8 | 0xe1 | 0xe2 | 0xe3 | 0xef | 0xf0 | 0xf3
            );
        b += 1;
    }
    table
};

/// The first byte from `at` on that [`may_hide`] accepts: sixteen bytes at a time, as
/// [`next_may_hide_in_blocks`] in a guest with `simd128` (one vector lookup of the exact set
/// for each block), else as [`next_may_hide_in_words`].
fn next_may_hide(bytes: &[u8], at: usize) -> Option<usize> {
    if crate::simd::VECTORS {
        next_may_hide_in_blocks(bytes, at)
    } else {
        next_may_hide_in_words(bytes, at)
    }
}

/// [`next_may_hide`] with the masks of [`crate::simd::MAY_HIDE`]: the first block whose mask is
/// not empty holds it.
fn next_may_hide_in_blocks(bytes: &[u8], at: usize) -> Option<usize> {
    let mut block = at;
    while let Some(bytes) = bytes
        .get(block..block + crate::simd::BLOCK)
        .and_then(|bytes| <&[u8; crate::simd::BLOCK]>::try_from(bytes).ok())
    {
        let mask = crate::simd::MAY_HIDE.mask(bytes);
        if mask != 0 {
            return Some(block + mask.trailing_zeros() as usize);
        }
        block += crate::simd::BLOCK;
    }
    bytes
        .get(block..)?
        .iter()
        .position(|&b| may_hide(b))
        .map(|found| block + found)
}

/// [`next_may_hide`] sixteen bytes at a time: a block of
/// printable ASCII (0x20–0x7E), as most text is, is skipped whole, and any other block is
/// looked at byte by byte (a block of text that is not ASCII, most of whose bytes cannot hide
/// anything, does not end the block-at-a-time scan). The test of a block has no early exit,
/// so that the compiler makes it one vector comparison (`simd128` in the guest, SSE2
/// natively).
fn next_may_hide_in_words(bytes: &[u8], at: usize) -> Option<usize> {
    let rest = bytes.get(at..)?;
    let mut blocks = rest.chunks_exact(16);
    let mut offset = at;
    for block in blocks.by_ref() {
        // A byte below 0x20, or above 0x7E (DEL and every non-ASCII byte).
        let outside = block
            .iter()
            .fold(false, |any, &b| any | (b.wrapping_sub(0x20) > 0x5e));
        if outside && let Some(found) = block.iter().position(|&b| may_hide(b)) {
            return Some(offset + found);
        }
        offset += 16;
    }
    blocks
        .remainder()
        .iter()
        .position(|&b| may_hide(b))
        .map(|found| offset + found)
}

/// ESC.
const ESC: u8 = 0x1b;

/// What kind of escape sequence an introducer starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Introducer {
    /// Control Sequence Introducer (`ESC [`, U+009B).
    Csi,
    /// Operating System Command (`ESC ]`, U+009D): a string, ended by ST or BEL.
    Osc,
    /// Device Control String, Start Of String, Privacy Message, Application Program Command
    /// (`ESC P`, `ESC X`, `ESC ^`, `ESC _`; U+0090, U+0098, U+009E, U+009F): a string, ended
    /// by ST.
    String,
}

/// The end of the escape sequence starting at `at` (an ESC byte or a C1 introducer), or `None`
/// when no sequence starts there (a lone ESC, an ESC before a control, a non-ASCII character
/// or the end of the text; a C1 control that introduces nothing).
///
/// - `ESC [` or U+009B (CSI): parameter bytes 0x30–0x3F, intermediate bytes 0x20–0x2F, then a
///   final byte 0x40–0x7E. Without a final byte the sequence ends before the first byte that
///   is none of these (a malformed sequence, still hidden).
/// - `ESC ]` or U+009D (OSC): through BEL, `ESC \` or U+009C (ST);
/// - `ESC P`, `ESC X`, `ESC ^`, `ESC _` or U+0090, U+0098, U+009E, U+009F: through `ESC \` or
///   U+009C. A string sequence also ends right before CAN (0x18), SUB (0x1A) or an ESC that does
///   not start ST, as terminals cancel it there; unterminated, it runs to the end of the text
///   (all a terminal would swallow).
/// - `ESC` followed by intermediate bytes 0x20–0x2F and a final byte 0x30–0x7E (`ESC ( B`,
///   `ESC 7`, `ESC c`…): through the final byte; without one, before the first other byte.
pub(crate) fn sequence_end(text: &[u8], at: usize) -> Option<usize> {
    let (introducer, body) = match text.get(at..)? {
        [ESC, b'[', ..] => (Introducer::Csi, at + 2),
        [ESC, b']', ..] => (Introducer::Osc, at + 2),
        [ESC, b'P' | b'X' | b'^' | b'_', ..] => (Introducer::String, at + 2),
        [ESC, next, ..] if (0x20..=0x7e).contains(next) => {
            let intermediates = count(text, at + 1, |b| (0x20..=0x2f).contains(&b));
            let end = at + 1 + intermediates;
            return Some(match text.get(end) {
                Some(b) if (0x30..=0x7e).contains(b) => end + 1,
                _ => end,
            });
        }
        [ESC, ..] => return None,
        [0xc2, 0x9b, ..] => (Introducer::Csi, at + 2),
        [0xc2, 0x9d, ..] => (Introducer::Osc, at + 2),
        [0xc2, 0x90 | 0x98 | 0x9e | 0x9f, ..] => (Introducer::String, at + 2),
        _ => return None,
    };
    Some(match introducer {
        Introducer::Csi => {
            let parameters = count(text, body, |b| (0x30..=0x3f).contains(&b));
            let intermediates = count(text, body + parameters, |b| (0x20..=0x2f).contains(&b));
            let end = body + parameters + intermediates;
            match text.get(end) {
                Some(b) if (0x40..=0x7e).contains(b) => end + 1,
                _ => end,
            }
        }
        Introducer::Osc | Introducer::String => {
            let mut i = body;
            loop {
                match text.get(i..).unwrap_or_default() {
                    [] => break text.len(),
                    [0x07, ..] if introducer == Introducer::Osc => break i + 1,
                    [ESC, b'\\', ..] => break i + 2,
                    [0xc2, 0x9c, ..] => break i + 2,
                    [ESC | 0x18 | 0x1a, ..] => break i,
                    _ => i += 1,
                }
            }
        }
    })
}

/// How many bytes from `at` on are in `class`.
fn count(text: &[u8], at: usize, class: impl Fn(u8) -> bool) -> usize {
    text.get(at..)
        .unwrap_or_default()
        .iter()
        .take_while(|&&b| class(b))
        .count()
}

/// Every run of hidden characters of `text`, in order: consecutive characters (or escape
/// sequences) of the same kind make one run; a run of variation selectors counts only with two
/// or more.
pub(crate) fn review(text: &str) -> Vec<Run> {
    let bytes = text.as_bytes();
    let mut runs: Vec<Run> = Vec::new();
    let mut push = |start: usize, end: usize, what: Hidden| match runs.last_mut() {
        Some(run) if run.end == start && run.what == what => {
            run.end = end;
            run.count += 1;
        }
        _ => runs.push(Run {
            start,
            end,
            what,
            count: 1,
        }),
    };
    let mut at = 0;
    while at < bytes.len() {
        // Most bytes cannot start anything hidden: skip them without decoding.
        let Some(next) = next_may_hide(bytes, at) else {
            break;
        };
        at = next;
        if let Some(end) = sequence_end(bytes, at) {
            push(at, end, Hidden::EscapeSequence);
            at = end;
            continue;
        }
        if !may_hide_char(bytes, at) {
            at += bytes.get(at).map_or(1, |&lead| utf8_len(lead));
            continue;
        }
        let Some(c) = text.get(at..).and_then(|rest| rest.chars().next()) else {
            // Not a character boundary: cannot happen, as `at` only ever moves by whole
            // characters or to a byte `may_hide` accepts, which never continues a character.
            at += 1;
            continue;
        };
        let end = at + c.len_utf8();
        // A carriage return not followed by a line feed moves a terminal's cursor back over
        // the line: a control here (one before a line feed is layout).
        let lone_cr = c == '\r' && bytes.get(end) != Some(&b'\n');
        if lone_cr {
            push(at, end, Hidden::Control);
        } else if let Some(what) = classify(c) {
            push(at, end, what);
        }
        at = end;
    }
    runs.retain(|run| run.what != Hidden::VariationSelector || run.count >= 2);
    runs
}

#[cfg(test)]
#[path = "hidden/tests.rs"]
mod tests;
