//! The compact form is used only when it was made by toolward from exactly the manifest's
//! bytes.

use std::collections::BTreeMap;

use super::*;
use crate::manifest::{PinnedServer, PinnedTool};

fn tool(description: &str, schema: &str) -> PinnedTool {
    let input_schema = canonical::parse(schema.as_bytes()).unwrap();
    PinnedTool {
        description: description.to_owned(),
        description_sha256: canonical::sha256_hex(description.as_bytes()),
        input_schema_sha256: canonical::sha256_hex(
            canonical::to_canonical(&input_schema).as_bytes(),
        ),
        input_schema,
        output_schema_sha256: None,
        annotations: None,
    }
}

fn manifest(description: &str) -> Manifest {
    let tools = BTreeMap::from([(
        String::from("read"),
        tool(
            description,
            r#"{"type":"object","properties":{"path":{"type":"string","maxLength":9007199254740993}}}"#,
        ),
    )]);
    Manifest {
        components: BTreeMap::new(),
        servers: BTreeMap::from([(
            String::from("fs"),
            PinnedServer {
                server_name: String::from("fs-server"),
                server_version: String::from("1.0.0"),
                protocol_version: String::from("2025-06-18"),
                tools,
                refused: BTreeMap::new(),
            },
        )]),
    }
}

/// The one entry in the folder: its path and text.
fn entry(state: &StateDir) -> (std::path::PathBuf, String) {
    let folder = state.path().join(COMPACT_FOLDER);
    let mut entries: Vec<_> = std::fs::read_dir(&folder)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(entries.len(), 1, "one entry: {entries:?}");
    let path = entries.remove(0);
    let text = std::fs::read_to_string(&path).unwrap();
    (path, text)
}

fn state() -> (tempfile::TempDir, StateDir) {
    let dir = tempfile::tempdir().unwrap();
    let state = StateDir::open(&dir.path().join("state")).unwrap();
    (dir, state)
}

#[test]
fn a_compact_form_is_made_from_the_manifest_and_reads_back_equal() {
    let (_dir, state) = state();
    let written = manifest("Read a file.");
    let bytes = written.to_json();
    assert_eq!(read(bytes.as_bytes(), &state).unwrap(), written);
    let (path, text) = entry(&state);
    assert_eq!(
        path.file_name().unwrap().to_string_lossy(),
        format!("{}.json", canonical::sha256_hex(bytes.as_bytes()))
    );
    assert!(text.len() < bytes.len(), "the compact form is smaller");
    // Read again: from the entry, equal.
    assert_eq!(read(bytes.as_bytes(), &state).unwrap(), written);
}

#[test]
fn an_edited_manifest_takes_effect_and_replaces_the_old_compact_form() {
    let (_dir, state) = state();
    let old = manifest("Read a file.").to_json();
    read(old.as_bytes(), &state).unwrap();
    let new = manifest("Read a file, now reviewed again.");
    let read_back = read(new.to_json().as_bytes(), &state).unwrap();
    assert_eq!(read_back, new);
    let (path, _) = entry(&state);
    assert!(
        path.to_string_lossy()
            .contains(&canonical::sha256_hex(new.to_json().as_bytes())),
        "only the new manifest's entry is left"
    );
}

#[test]
fn a_compact_form_that_disagrees_with_the_manifest_is_not_used() {
    let (_dir, state) = state();
    let reviewed = manifest("Read a file.");
    let bytes = reviewed.to_json();
    read(bytes.as_bytes(), &state).unwrap();
    let (path, text) = entry(&state);
    // Another schema and its matching hash, the MAC line kept: what a writer without the
    // key would plant to get an unreviewed schema past review.
    let widened = manifest("Read a file.");
    let mut widened_tool = tool("Read a file.", r#"{"type":"object"}"#);
    widened_tool.description = reviewed.servers["fs"].tools["read"].description.clone();
    let mut widened = widened;
    widened
        .servers
        .get_mut("fs")
        .unwrap()
        .tools
        .insert(String::from("read"), widened_tool);
    let body = widened.to_compact();
    let mac = &text[..MAC_HEX_BYTES];
    std::fs::write(&path, format!("{mac}\n{body}")).unwrap();
    assert_eq!(read(bytes.as_bytes(), &state).unwrap(), reviewed);
    // The same with a MAC made under another key.
    let other = Key::from_bytes([7; crate::state_dir::KEY_BYTES]);
    let digest = canonical::sha256_hex(bytes.as_bytes());
    let mac = other.mac_hex(&[MAC_CONTEXT, digest.as_bytes(), body.as_bytes()]);
    std::fs::write(&path, format!("{mac}\n{body}")).unwrap();
    assert_eq!(read(bytes.as_bytes(), &state).unwrap(), reviewed);
    // The refused entry was made again from the manifest.
    let (_, text) = entry(&state);
    assert_eq!(
        &text[MAC_HEX_BYTES + 1..],
        reviewed.to_compact()
    );
}

#[test]
fn a_manifest_edited_by_hand_is_refused_though_a_compact_form_exists() {
    let (_dir, state) = state();
    let reviewed = manifest("Read a file.").to_json();
    read(reviewed.as_bytes(), &state).unwrap();
    // The description changed without its hash: the new bytes have no entry, so they are
    // verified in full and refused.
    let edited = reviewed.replace("Read a file.", "Read any file.");
    let error = read(edited.as_bytes(), &state).unwrap_err();
    assert!(
        matches!(
            error,
            ManifestError::HashMismatch {
                field: "description",
                ..
            }
        ),
        "{error}"
    );
}

#[test]
fn a_compact_folder_open_to_others_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let (_dir, state) = state();
    let bytes = manifest("Read a file.").to_json();
    read(bytes.as_bytes(), &state).unwrap();
    let folder = state.path().join(COMPACT_FOLDER);
    std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o777)).unwrap();
    let error = read(bytes.as_bytes(), &state).unwrap_err();
    assert!(matches!(error, ManifestError::State(_)), "{error}");
}
