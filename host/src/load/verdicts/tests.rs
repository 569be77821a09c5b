//! A verdict is used only when this build wrote it into this state folder; a schema the
//! validator refuses is compiled, and refused, at every load.

use super::*;
use crate::schema::validator::check_validator;

/// Schemas that compile under 2020-12, with their hashes.
const GOOD: [&str; 3] = [
    r#"{"type":"object","properties":{"path":{"type":"string"}}}"#,
    r#"{"type":"object","properties":{"n":{"type":"integer","minimum":0}},"required":["n"]}"#,
    r#"{"type":"object","additionalProperties":false}"#,
];

/// A schema the validator refuses: `(` is no regular expression.
const REFUSED: &str = r#"{"type":"object","properties":{"x":{"type":"string","pattern":"("}}}"#;

fn schema(text: &str) -> (Value, String) {
    let value = canonical::parse(text.as_bytes()).unwrap();
    let sha256 = canonical::sha256_hex(canonical::to_canonical(&value).as_bytes());
    (value, sha256)
}

fn state() -> (tempfile::TempDir, StateDir) {
    let dir = tempfile::tempdir().unwrap();
    let state = StateDir::open(&dir.path().join("state")).unwrap();
    (dir, state)
}

/// One load's checks of `texts` under 2020-12 through the verdicts of `state`, saved: each
/// schema's result, and how many were compiled.
fn load(state: &StateDir, texts: &[&str]) -> (Vec<Result<(), ValidatorProblem>>, usize) {
    let mut verdicts = Verdicts::open(state);
    let results = texts
        .iter()
        .map(|text| {
            let (value, sha256) = schema(text);
            verdicts.check(&value, &sha256, Dialect::Draft202012)
        })
        .collect();
    verdicts.save();
    (results, verdicts.compiled())
}

fn file(state: &StateDir) -> std::path::PathBuf {
    state.path().join(VERDICTS_FILE)
}

/// Writes `bytes` as the file, private to the owner as toolward writes it.
fn write(state: &StateDir, bytes: impl AsRef<[u8]>) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(file(state))
        .unwrap()
        .write_all(bytes.as_ref())
        .unwrap();
}

/// Writes `body` as the file, with a MAC that verifies under the folder's key.
fn plant(state: &StateDir, body: &str) {
    let key = state.key(VERDICTS_KEY).unwrap();
    let mac = key.mac_hex(&[MAC_CONTEXT, body.as_bytes()]);
    write(state, format!("{mac}\n{body}"));
}

#[test]
fn a_second_load_compiles_no_schema_the_first_found_to_compile() {
    let (_dir, state) = state();
    let (first, compiled) = load(&state, &GOOD);
    assert!(first.iter().all(Result::is_ok), "{first:?}");
    assert_eq!(compiled, GOOD.len());
    let (second, compiled) = load(&state, &GOOD);
    assert!(second.iter().all(Result::is_ok), "{second:?}");
    assert_eq!(compiled, 0, "every schema was known to compile");
}

#[test]
fn only_the_schemas_not_seen_before_are_compiled() {
    let (_dir, state) = state();
    load(&state, &GOOD[..2]);
    let (results, compiled) = load(&state, &GOOD);
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(compiled, 1);
}

#[test]
fn a_schema_the_validator_refuses_is_refused_again_at_the_next_load_with_the_same_problem() {
    let (_dir, state) = state();
    let (value, _) = schema(REFUSED);
    let expected = check_validator(&value, Dialect::Draft202012).unwrap_err();
    assert_eq!(expected.pointer, "/properties/x/pattern");
    for _ in 0..2 {
        let (results, compiled) = load(&state, &[GOOD[0], REFUSED]);
        assert_eq!(results[1], Err(expected.clone()));
        assert!(compiled >= 1, "the refused schema is compiled at every load");
    }
    let (results, compiled) = load(&state, &[GOOD[0], REFUSED]);
    assert_eq!(results, [Ok(()), Err(expected)]);
    assert_eq!(compiled, 1, "only the refused schema");
    let text = std::fs::read_to_string(file(&state)).unwrap();
    assert_eq!(text.lines().count(), 3, "the MAC, the build and one entry: {text}");
}

#[test]
fn a_verdict_holds_only_for_its_own_dialect() {
    let (_dir, state) = state();
    load(&state, &GOOD[..1]);
    let (value, sha256) = schema(GOOD[0]);
    let mut verdicts = Verdicts::open(&state);
    verdicts.check(&value, &sha256, Dialect::Draft7).unwrap();
    assert_eq!(verdicts.compiled(), 1);
}

#[test]
fn an_entry_planted_without_the_key_is_not_trusted_and_the_schema_is_still_refused() {
    let (_dir, state) = state();
    load(&state, &GOOD[..1]);
    let (_, refused_sha256) = schema(REFUSED);
    // An entry for the refused schema added to a file this build wrote: the MAC no longer
    // covers the body.
    let mut text = std::fs::read_to_string(file(&state)).unwrap();
    text.push_str(&format!("2020-12 {refused_sha256}\n"));
    write(&state, &text);
    let (results, compiled) = load(&state, &[GOOD[0], REFUSED]);
    assert!(results[0].is_ok());
    assert!(results[1].is_err(), "the planted verdict was not used");
    assert_eq!(compiled, 2, "the tampered file was not read at all");
}

#[test]
fn a_file_whose_mac_was_made_with_another_key_is_not_read() {
    let (_dir, state) = state();
    let (_, refused_sha256) = schema(REFUSED);
    let body = format!("{BUILD_PREFIX}{}\n2020-12 {refused_sha256}\n", build());
    let mac = Key::from_bytes([7; 32]).mac_hex(&[MAC_CONTEXT, body.as_bytes()]);
    write(&state, format!("{mac}\n{body}"));
    let (results, compiled) = load(&state, &[REFUSED]);
    assert!(results[0].is_err());
    assert_eq!(compiled, 1);
}

#[test]
fn an_entry_changed_after_it_was_written_is_not_trusted() {
    let (_dir, state) = state();
    load(&state, &GOOD[..1]);
    let (_, good_sha256) = schema(GOOD[0]);
    let (_, refused_sha256) = schema(REFUSED);
    // The good schema's hash swapped for the refused one's, the MAC left as it was.
    let text = std::fs::read_to_string(file(&state)).unwrap();
    assert!(text.contains(&good_sha256));
    write(&state, text.replace(&good_sha256, &refused_sha256));
    let (results, compiled) = load(&state, &[GOOD[0], REFUSED]);
    assert!(results[0].is_ok());
    assert!(results[1].is_err());
    assert_eq!(compiled, 2);
}

#[test]
fn a_file_another_build_wrote_is_not_read_even_when_its_mac_verifies() {
    let (_dir, state) = state();
    let (_, good_sha256) = schema(GOOD[0]);
    let other = "0".repeat(64);
    assert_ne!(build(), other);
    plant(&state, &format!("{BUILD_PREFIX}{other}\n2020-12 {good_sha256}\n"));
    let (results, compiled) = load(&state, &GOOD[..1]);
    assert!(results[0].is_ok());
    assert_eq!(compiled, 1, "another build's verdict was not used");
    // This build's file replaces it.
    let (_, compiled) = load(&state, &GOOD[..1]);
    assert_eq!(compiled, 0);
}

#[test]
fn a_verified_file_of_this_build_is_used_as_written() {
    // The test above relies on `plant` writing what `load` would accept.
    let (_dir, state) = state();
    let (_, good_sha256) = schema(GOOD[0]);
    plant(&state, &format!("{BUILD_PREFIX}{}\n2020-12 {good_sha256}\n", build()));
    let (_, compiled) = load(&state, &GOOD[..1]);
    assert_eq!(compiled, 0);
}

#[test]
fn a_damaged_file_costs_only_the_compiles() {
    let (_dir, state) = state();
    for body in [String::new(), "not a MAC\n".to_owned(), "x".repeat(200)] {
        write(&state, &body);
        let (results, compiled) = load(&state, &GOOD);
        assert!(results.iter().all(Result::is_ok));
        assert_eq!(compiled, GOOD.len());
        std::fs::remove_file(file(&state)).unwrap();
    }
    // A verified file with a line that is no entry is not used either.
    plant(&state, &format!("{BUILD_PREFIX}{}\n2020-12 xyz\n", build()));
    let (_, compiled) = load(&state, &GOOD[..1]);
    assert_eq!(compiled, 1);
}

#[test]
fn without_a_state_folder_every_load_compiles_every_schema() {
    for _ in 0..2 {
        let mut verdicts = Verdicts::memory();
        for text in GOOD {
            let (value, sha256) = schema(text);
            verdicts.check(&value, &sha256, Dialect::Draft202012).unwrap();
        }
        verdicts.save();
        assert_eq!(verdicts.compiled(), GOOD.len());
    }
}

#[test]
fn a_load_that_finds_every_verdict_writes_nothing() {
    let (_dir, state) = state();
    load(&state, &GOOD);
    let before = std::fs::read(file(&state)).unwrap();
    let modified = std::fs::metadata(file(&state)).unwrap().modified().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    load(&state, &GOOD);
    assert_eq!(std::fs::read(file(&state)).unwrap(), before);
    assert_eq!(
        std::fs::metadata(file(&state)).unwrap().modified().unwrap(),
        modified
    );
}

#[test]
fn the_file_is_private_to_the_owner() {
    use std::os::unix::fs::PermissionsExt;
    let (_dir, state) = state();
    load(&state, &GOOD);
    let mode = std::fs::metadata(file(&state)).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn a_file_others_can_read_is_not_read() {
    use std::os::unix::fs::PermissionsExt;
    let (_dir, state) = state();
    load(&state, &GOOD);
    std::fs::set_permissions(file(&state), std::fs::Permissions::from_mode(0o644)).unwrap();
    let (_, compiled) = load(&state, &GOOD);
    assert_eq!(compiled, GOOD.len());
}
