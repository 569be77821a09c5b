use super::*;
use crate::Review;
use crate::tests::{hidden, reviewer_of};

fn review(text: &str) -> Vec<crate::Finding> {
    reviewer_of(&[Review::HiddenCharacters]).review(text)
}

#[test]
fn ansi_colour_sequences_are_one_finding_each() {
    assert_eq!(
        review("\u{1b}[31mred\u{1b}[0m plain"),
        [
            hidden(0, 5, "escape-sequence"),
            hidden(8, 12, "escape-sequence")
        ]
    );
    // Consecutive sequences make one run.
    assert_eq!(
        review("\u{1b}[1m\u{1b}[38;5;196mX"),
        [hidden(0, 15, "escape-sequence")]
    );
    // Private parameters, intermediates: cursor hide, erase screen, cursor style.
    assert_eq!(review("a\u{1b}[?25lb"), [hidden(1, 7, "escape-sequence")]);
    assert_eq!(
        review("\u{1b}[2J\u{1b}[H"),
        [hidden(0, 7, "escape-sequence")]
    );
    assert_eq!(review("\u{1b}[2 q"), [hidden(0, 5, "escape-sequence")]);
}

#[test]
fn osc_sequences_end_at_bel_or_st() {
    // A hyperlink: the target is hidden, the visible text is not.
    let text = "\u{1b}]8;;https://evil.example/\u{7}click here\u{1b}]8;;\u{7}";
    assert_eq!(
        review(text),
        [
            hidden(0, 27, "escape-sequence"),
            hidden(37, 43, "escape-sequence")
        ]
    );
    // A window title ended by ST, and by the C1 ST.
    assert_eq!(
        review("\u{1b}]0;title\u{1b}\\after"),
        [hidden(0, 11, "escape-sequence")]
    );
    assert_eq!(
        review("\u{1b}]0;title\u{9c}after"),
        [hidden(0, 11, "escape-sequence")]
    );
    // Non-ASCII inside the string.
    assert_eq!(
        review("\u{1b}]2;Ünïcode\u{7}x"),
        [hidden(0, 14, "escape-sequence")]
    );
}

#[test]
fn an_unterminated_string_sequence_runs_to_the_end() {
    let text = "ok \u{1b}]0;title and all the rest\nof the text";
    assert_eq!(review(text), [hidden(3, text.len(), "escape-sequence")]);
    let text = "\u{1b}Pq#0;2;0;0;0";
    assert_eq!(review(text), [hidden(0, text.len(), "escape-sequence")]);
}

#[test]
fn a_string_sequence_is_cancelled_by_can_sub_or_another_esc() {
    assert_eq!(
        review("\u{1b}]0;t\u{18}x"),
        [hidden(0, 5, "escape-sequence"), hidden(5, 6, "control")]
    );
    // A new sequence cancels the string and is found after it (one run).
    assert_eq!(
        review("\u{1b}]0;t\u{1b}[0mx"),
        [hidden(0, 9, "escape-sequence")]
    );
    // BEL does not end a DCS.
    assert_eq!(
        review("\u{1b}P1$r\u{7}x\u{1b}\\y"),
        [hidden(0, 9, "escape-sequence")]
    );
}

#[test]
fn other_escape_sequences() {
    // Character set, save cursor, reset.
    assert_eq!(review("\u{1b}(Bx"), [hidden(0, 3, "escape-sequence")]);
    assert_eq!(
        review("\u{1b}7x\u{1b}cy"),
        [
            hidden(0, 2, "escape-sequence"),
            hidden(3, 5, "escape-sequence")
        ]
    );
    // Malformed CSI: no final byte, then a line feed.
    assert_eq!(review("\u{1b}[12;\nx"), [hidden(0, 5, "escape-sequence")]);
    // Intermediates without a final byte.
    assert_eq!(review("\u{1b}( "), [hidden(0, 3, "escape-sequence")]);
}

#[test]
fn c1_introducers_start_sequences() {
    assert_eq!(review("\u{9b}31mx"), [hidden(0, 5, "escape-sequence")]);
    assert_eq!(review("\u{9d}0;t\u{7}x"), [hidden(0, 6, "escape-sequence")]);
    assert_eq!(
        review("\u{90}data\u{9c}x"),
        [hidden(0, 8, "escape-sequence")]
    );
}

#[test]
fn a_lone_esc_is_a_control() {
    assert_eq!(review("abc\u{1b}"), [hidden(3, 4, "control")]);
    assert_eq!(review("\u{1b}é"), [hidden(0, 1, "control")]);
    assert_eq!(review("\u{1b}\u{1b}"), [hidden(0, 2, "control")]);
    assert_eq!(review("\u{1b}\u{7f}"), [hidden(0, 2, "control")]);
}

#[test]
fn control_characters_but_layout() {
    assert_eq!(review("a\tb\nc\r\nd"), []);
    // A lone carriage return is a control (it moves the cursor back over the line).
    assert_eq!(review("d\re"), [hidden(1, 2, "control")]);
    assert_eq!(
        review("a\u{0}\u{7}b\u{7f}"),
        [hidden(1, 3, "control"), hidden(4, 5, "control")]
    );
    assert_eq!(
        review("\u{85}\u{9c}x\u{8}"),
        [hidden(0, 4, "control"), hidden(5, 6, "control")]
    );
}

#[test]
fn bidi_controls() {
    // "Trojan Source": an override hides the real order.
    let text = "access = \"user\u{202e} \u{2066}// admin\u{2069} \u{2066}\"";
    assert_eq!(
        review(text),
        [
            hidden(14, 17, "bidi"),
            hidden(18, 21, "bidi"),
            hidden(29, 32, "bidi"),
            hidden(33, 36, "bidi"),
        ]
    );
    assert_eq!(
        review("\u{200e}\u{200f}\u{61c}x\u{202a}"),
        [hidden(0, 8, "bidi"), hidden(9, 12, "bidi")]
    );
}

#[test]
fn zero_width_characters() {
    assert_eq!(review("a\u{200b}\u{200c}b"), [hidden(1, 7, "zero-width")]);
    assert_eq!(review("\u{feff}text"), [hidden(0, 3, "zero-width")]);
    assert_eq!(
        review("soft\u{ad}hyphen\u{2060}\u{2064}\u{180e}"),
        [hidden(4, 6, "zero-width"), hidden(12, 21, "zero-width")]
    );
    // An emoji sequence joined by ZWJ is found too, as the host refuses it.
    assert_eq!(review("👨\u{200d}👩"), [hidden(4, 7, "zero-width")]);
}

#[test]
fn tag_characters() {
    // "ASCII smuggling": invisible "ignore" after visible text.
    let tags: String = "ignore"
        .chars()
        .map(|c| char::from_u32(0xe0000 + u32::from(c)).unwrap())
        .collect();
    let text = format!("Hello{tags}!");
    assert_eq!(review(&text), [hidden(5, 5 + 24, "tag")]);
}

#[test]
fn variation_selectors_only_in_runs() {
    // One presentation selector after an emoji, or one ideographic selector: ordinary.
    assert_eq!(review("\u{2764}\u{fe0f} \u{845b}\u{e0100}"), []);
    // A run carrying bytes ("emoji smuggling").
    let text = "😀\u{fe00}\u{fe01}\u{e0101}\u{fe0f}.";
    assert_eq!(
        review(text),
        [hidden(4, 4 + 3 + 3 + 4 + 3, "variation-selector")]
    );
    assert_eq!(
        review("\u{fe0f}\u{fe0f}"),
        [hidden(0, 6, "variation-selector")]
    );
}

#[test]
fn other_invisible_characters() {
    assert_eq!(
        review("a\u{3164}b\u{115f}"),
        [hidden(1, 4, "invisible"), hidden(5, 8, "invisible")]
    );
    assert_eq!(
        review("\u{2800}\u{34f}\u{e0080}"),
        [hidden(0, 9, "invisible")]
    );
}

#[test]
fn adjacent_runs_of_different_kinds_stay_apart() {
    assert_eq!(
        review("\u{200b}\u{202e}\u{0}\u{1b}[0m"),
        [
            hidden(0, 3, "zero-width"),
            hidden(3, 6, "bidi"),
            hidden(6, 7, "control"),
            hidden(7, 11, "escape-sequence"),
        ]
    );
}

#[test]
fn visible_text_is_not_found() {
    assert_eq!(
        review("plain ASCII, Ünïcödé, 日本語, emoji 😀, Arabic عربى, math ∑ and ≠"),
        []
    );
    assert_eq!(review("\u{2028}\u{2029}\u{600}"), []);
}

#[test]
fn classify_agrees_with_the_documented_ranges() {
    for (c, what) in [
        ('\u{1}', Some(Hidden::Control)),
        ('\u{9f}', Some(Hidden::Control)),
        ('\u{a0}', None),
        ('\u{ad}', Some(Hidden::ZeroWidth)),
        ('\u{200a}', None),
        ('\u{2065}', Some(Hidden::Invisible)),
        ('\u{2070}', None),
        ('\u{e007f}', Some(Hidden::Tag)),
        ('\u{e00ff}', Some(Hidden::Invisible)),
        ('\u{e01ef}', Some(Hidden::VariationSelector)),
        ('\u{e0fff}', Some(Hidden::Invisible)),
        ('\u{e1000}', None),
    ] {
        assert_eq!(classify(c), what, "U+{:04X}", u32::from(c));
    }
}

#[test]
fn may_hide_covers_every_hidden_character() {
    for c in (0..=0x10ffff).filter_map(char::from_u32) {
        if classify(c).is_some() {
            let mut utf8 = [0; 4];
            let first = c.encode_utf8(&mut utf8).as_bytes()[0];
            assert!(may_hide(first), "U+{:04X}", u32::from(c));
        }
    }
}

proptest::proptest! {
    #[test]
    fn next_may_hide_agrees_with_a_plain_search(
        bytes in proptest::collection::vec(proptest::prop_oneof![0x20u8..0x7f, proptest::num::u8::ANY], 0..100),
        at in 0..100usize,
    ) {
        let at = at.min(bytes.len());
        let plain = bytes.iter().skip(at).position(|&b| may_hide(b)).map(|i| at + i);
        proptest::prop_assert_eq!(next_may_hide(&bytes, at), plain);
    }
}

#[test]
fn a_lone_carriage_return_is_a_control_and_one_before_a_line_feed_is_layout() {
    let reviewer = crate::Reviewer::new(&[crate::Review::HiddenCharacters]).unwrap();
    let found = reviewer.review("safe output\rEVIL OVERWRITE\r\nnext\r");
    let spans: Vec<(usize, usize, &str)> = found
        .iter()
        .map(|f| (f.start, f.end, f.kind.as_str()))
        .collect();
    assert_eq!(
        spans,
        [(11, 12, "hidden:control"), (32, 33, "hidden:control")]
    );
}

#[test]
fn the_two_byte_check_passes_every_hidden_character() {
    for c in (0..=0x10ffff).filter_map(char::from_u32) {
        let mut utf8 = [0; 4];
        let bytes = c.encode_utf8(&mut utf8).as_bytes();
        if classify(c).is_some() || sequence_end(bytes, 0).is_some() {
            assert!(may_hide(bytes[0]), "U+{:04X}", u32::from(c));
            assert!(may_hide_char(bytes, 0), "U+{:04X}", u32::from(c));
        }
        if may_hide(bytes[0]) {
            assert_eq!(utf8_len(bytes[0]), bytes.len(), "U+{:04X}", u32::from(c));
        }
    }
}

proptest::proptest! {
    #[test]
    fn next_may_hide_in_blocks_agrees_with_a_plain_search(
        bytes in proptest::collection::vec(proptest::prop_oneof![0x20u8..0x7f, proptest::num::u8::ANY], 0..100),
        at in 0..100usize,
    ) {
        let at = at.min(bytes.len());
        let plain = bytes.iter().skip(at).position(|&b| may_hide(b)).map(|i| at + i);
        proptest::prop_assert_eq!(next_may_hide_in_blocks(&bytes, at), plain);
        proptest::prop_assert_eq!(next_may_hide_in_words(&bytes, at), plain);
    }
}
