//! Audit checkpoints through the `toolward` binary (issue 33.3): the proofs `audit prove` and
//! `audit verify --checkpoint` print are checked against an RFC 6962 tree and a signed-note
//! reader written here from the RFC and C2SP texts, sharing no code with toolward's; a log
//! and head rewritten together after a checkpoint was copied away are caught; a gateway signs
//! checkpoints at its interval and at shutdown.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::support::{FAKE_SERVER, audit_lines, toolward_binary};

// ---- RFC 6962 §2.1, written plainly from the text --------------------------------------

pub(crate) fn sha256(parts: &[&[u8]]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update(part);
    }
    hasher.finalize().into()
}

/// The largest power of two smaller than `n`.
fn k_of(n: usize) -> usize {
    let mut k = 1;
    while k * 2 < n {
        k *= 2;
    }
    k
}

/// `MTH(D[n])`.
pub(crate) fn mth(d: &[Vec<u8>]) -> [u8; 32] {
    match d.len() {
        0 => sha256(&[]),
        1 => sha256(&[&[0u8], &d[0]]),
        n => {
            let k = k_of(n);
            sha256(&[&[1u8], &mth(&d[..k]), &mth(&d[k..])])
        }
    }
}

/// `PATH(m, D[n])`.
pub(crate) fn rfc_path(m: usize, d: &[Vec<u8>]) -> Vec<[u8; 32]> {
    let n = d.len();
    if n <= 1 {
        return Vec::new();
    }
    let k = k_of(n);
    if m < k {
        let mut p = rfc_path(m, &d[..k]);
        p.push(mth(&d[k..]));
        p
    } else {
        let mut p = rfc_path(m - k, &d[k..]);
        p.push(mth(&d[..k]));
        p
    }
}

/// `SUBPROOF(m, D[n], b)`.
fn rfc_subproof(m: usize, d: &[Vec<u8>], b: bool) -> Vec<[u8; 32]> {
    let n = d.len();
    if m == n {
        return if b { Vec::new() } else { vec![mth(d)] };
    }
    let k = k_of(n);
    if m <= k {
        let mut p = rfc_subproof(m, &d[..k], b);
        p.push(mth(&d[k..]));
        p
    } else {
        let mut p = rfc_subproof(m - k, &d[k..], false);
        p.push(mth(&d[..k]));
        p
    }
}

/// `PROOF(m, D[n])`.
pub(crate) fn rfc_proof(m: usize, d: &[Vec<u8>]) -> Vec<[u8; 32]> {
    if m == 0 || m == d.len() {
        return Vec::new();
    }
    rfc_subproof(m, d, true)
}

pub(crate) fn hexes(proof: &[[u8; 32]]) -> Vec<String> {
    proof.iter().map(hex::encode).collect()
}

// ---- C2SP signed-note and tlog-checkpoint, read plainly -----------------------------------

/// The origin, size and root of `note` once its one signature verifies with the verifier key
/// `vkey` (`name+id+base64(0x01 || key)`); `None` when it does not.
pub(crate) fn open_checkpoint(note: &str, vkey: &str) -> Option<(String, u64, [u8; 32])> {
    let mut fields = vkey.trim().splitn(3, '+');
    let (name, id, key) = (fields.next()?, fields.next()?, fields.next()?);
    let key = BASE64.decode(key).ok()?;
    if key.len() != 33 || key[0] != 1 {
        return None;
    }
    let key: [u8; 32] = key[1..].try_into().ok()?;
    let want_id = sha256(&[name.as_bytes(), b"\n", &[1u8], &key]);
    if hex::encode(&want_id[..4]) != id {
        return None;
    }
    let at = note.rfind("\n\n")?;
    let (text, signatures) = (&note[..=at], &note[at + 2..]);
    let line = signatures.strip_suffix('\n')?;
    let rest = line.strip_prefix("\u{2014} ")?;
    let (signer, blob) = rest.split_once(' ')?;
    let blob = BASE64.decode(blob).ok()?;
    if signer != name || blob.len() != 68 || blob[..4] != want_id[..4] {
        return None;
    }
    let signature = ed25519_dalek::Signature::from_slice(&blob[4..]).ok()?;
    ed25519_dalek::VerifyingKey::from_bytes(&key)
        .ok()?
        .verify_strict(text.as_bytes(), &signature)
        .ok()?;
    let mut lines = text.lines();
    let origin = lines.next()?.to_owned();
    let size = lines.next()?.parse().ok()?;
    let root = BASE64.decode(lines.next()?).ok()?.try_into().ok()?;
    Some((origin, size, root))
}

// ---- the scenario ----------------------------------------------------------------------------

/// A folder with a fake server `s` listing `echo` (read-only), a checkpoint key made by
/// `audit keygen`, a config naming it, and the manifest pinned.
struct Setup {
    dir: tempfile::TempDir,
    bin: &'static Path,
    config: PathBuf,
    /// The verifier key, as `audit keygen` printed it.
    vkey: String,
}

impl Setup {
    fn new(interval_ms: u64) -> Option<Setup> {
        let bin = toolward_binary()?;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("s.json"),
            json!({"pages": [r#"{"tools": [{"name": "echo", "description": "Echoes.", "inputSchema": {"type": "object"}}]}"#]})
                .to_string(),
        )
        .unwrap();
        std::fs::write(
            dir.path().join("rules.json"),
            r#"{"servers": {"s": {"tools": {"echo": {"effect": "read-only"}}}}}"#,
        )
        .unwrap();
        let keygen = Command::new(bin)
            .args([
                "audit",
                "keygen",
                "--name",
                "toolward.test/audit/laptop",
                "--out",
            ])
            .arg(dir.path().join("checkpoint.key"))
            .output()
            .unwrap();
        assert!(keygen.status.success(), "{}", text(&keygen));
        let vkey = String::from_utf8(keygen.stdout).unwrap().trim().to_owned();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("checkpoint.key.pub"))
                .unwrap()
                .trim(),
            vkey
        );
        let config = dir.path().join("toolward.json");
        std::fs::write(
            &config,
            json!({
                "mcpServers": {"s": {"command": FAKE_SERVER, "args": ["s.json"]}},
                "rules": {"file": "rules.json"},
                "state_dir": "state",
                "audit": {
                    "file": "audit.jsonl",
                    "checkpoint": {"key": "checkpoint.key", "interval_ms": interval_ms}
                },
            })
            .to_string(),
        )
        .unwrap();
        let setup = Setup {
            dir,
            bin,
            config,
            vkey,
        };
        let pinned = setup.run(&["pin"]);
        assert!(pinned.status.success(), "{}", text(&pinned));
        Some(setup)
    }

    /// `toolward ARGS --config CONFIG`.
    fn run(&self, args: &[&str]) -> Output {
        Command::new(self.bin)
            .args(args)
            .arg("--config")
            .arg(&self.config)
            .output()
            .unwrap()
    }

    fn calls(&self, n: usize) {
        for _ in 0..n {
            let call = self.run(&["call", "s__echo"]);
            assert!(call.status.success(), "{}", text(&call));
        }
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("audit.jsonl")
    }

    /// The log's record lines, as leaves.
    fn leaves(&self) -> Vec<Vec<u8>> {
        audit_lines(&self.log())
            .into_iter()
            .map(String::into_bytes)
            .collect()
    }

    /// Signs a checkpoint on demand and copies it out of the state folder ("away").
    fn anchor(&self, name: &str) -> (PathBuf, String) {
        let signed = self.run(&["audit", "checkpoint"]);
        assert!(signed.status.success(), "{}", text(&signed));
        let note = String::from_utf8(signed.stdout).unwrap();
        let away = self.dir.path().join(name);
        std::fs::write(&away, &note).unwrap();
        (away, note)
    }

    fn verify_against(&self, checkpoint: &Path, json: bool) -> Output {
        let mut args = vec!["audit", "verify"];
        if json {
            args.push("--json");
        }
        let checkpoint = checkpoint.to_str().unwrap();
        args.extend(["--checkpoint", checkpoint, "--public-key", &self.vkey]);
        self.run(&args)
    }
}

pub(crate) fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn inclusion_and_consistency_proofs_match_an_independent_rfc_6962_tree() {
    let Some(setup) = Setup::new(600_000) else {
        return;
    };
    setup.calls(2);
    let (anchored, note) = setup.anchor("first.checkpoint");
    let first = setup.leaves();
    let (origin, size, root) = open_checkpoint(&note, &setup.vkey).expect("the note verifies");
    assert_eq!(origin, "toolward.test/audit/laptop");
    assert_eq!(size as usize, first.len());
    assert_eq!(root, mth(&first));

    setup.calls(3);
    let leaves = setup.leaves();
    assert!(leaves.len() > first.len());
    // Every record's inclusion proof in the whole tree, and in the checkpoint's smaller one.
    for seq in 0..leaves.len() {
        for tree in [leaves.len(), first.len()] {
            if seq >= tree {
                continue;
            }
            let size = tree.to_string();
            let proved = setup.run(&["audit", "prove", &seq.to_string(), "--size", &size]);
            assert!(proved.status.success(), "{}", text(&proved));
            let proved: Value = serde_json::from_slice(&proved.stdout).unwrap();
            let d = &leaves[..tree];
            assert_eq!(proved["tree_size"], tree);
            assert_eq!(proved["leaf_hash"], hex::encode(sha256(&[&[0u8], &d[seq]])));
            assert_eq!(proved["root"], BASE64.encode(mth(d)));
            assert_eq!(
                proved["proof"],
                json!(hexes(&rfc_path(seq, d))),
                "seq {seq} in a tree of {tree}"
            );
        }
    }
    // The consistency proof from the copied checkpoint to the log now.
    let verified = setup.verify_against(&anchored, true);
    assert!(verified.status.success(), "{}", text(&verified));
    let report: Value = serde_json::from_slice(&verified.stdout).unwrap();
    let checkpoint = &report["checkpoint"];
    assert_eq!(checkpoint["consistent"], true);
    assert_eq!(checkpoint["log_records"], leaves.len());
    assert_eq!(checkpoint["log_root"], BASE64.encode(mth(&leaves)));
    assert_eq!(
        checkpoint["consistency_proof"],
        json!(hexes(&rfc_proof(first.len(), &leaves)))
    );
    // A checkpoint signed now covers the whole log, and the RFC's tree agrees.
    let (_, now) = setup.anchor("now.checkpoint");
    let (_, size, root) = open_checkpoint(&now, &setup.vkey).unwrap();
    assert_eq!((size as usize, root), (leaves.len(), mth(&leaves)));
}

/// The log replaced by `lines`, every `prev` made to chain again, and the head rewritten to
/// name the new end: what the operator's own account can do.
fn rewrite_log_and_head(setup: &Setup, lines: Vec<String>) {
    let mut out = Vec::new();
    let mut prev = "0".repeat(64);
    for line in lines {
        let record: Value = serde_json::from_str(&line).unwrap();
        let old_prev = record["prev"].as_str().unwrap().to_owned();
        let line = line.replacen(&old_prev, &prev, 1);
        prev = hex::encode(sha256(&[line.as_bytes()]));
        out.push(line);
    }
    let mut bytes = out.join("\n").into_bytes();
    bytes.push(b'\n');
    std::fs::write(setup.log(), &bytes).unwrap();
    let heads = setup.dir.path().join("state/audit-heads");
    let head = std::fs::read_dir(&heads)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut text = json!({"records": out.len(), "hash": prev, "end": bytes.len()}).to_string();
    while text.len() < 159 {
        text.push(' ');
    }
    text.push('\n');
    std::fs::write(head, text).unwrap();
    // The operator's account also holds the key: it signs the rewritten log, once the latest
    // checkpoint (which no longer matches) is out of the way.
    std::fs::remove_dir_all(setup.dir.path().join("state/audit-checkpoints")).unwrap();
}

#[test]
fn a_log_and_head_rewritten_together_after_a_checkpoint_was_copied_away_are_caught() {
    let Some(setup) = Setup::new(600_000) else {
        return;
    };
    setup.calls(2);
    let (anchored, _) = setup.anchor("anchored.checkpoint");
    setup.calls(1);
    let verified = setup.verify_against(&anchored, false);
    assert!(verified.status.success(), "{}", text(&verified));
    assert!(
        text(&verified).contains("the log holds them unchanged"),
        "{}",
        text(&verified)
    );

    // One record the checkpoint covers is changed, the chain and head made to agree.
    let mut lines = audit_lines(&setup.log());
    let changed = lines[3].replacen("\"time\":", "\"time\":1", 1);
    assert_ne!(changed, lines[3]);
    lines[3] = changed;
    let original = setup.leaves();
    rewrite_log_and_head(&setup, lines);

    // The chain and the head agree with the rewrite, and the key (on the same account) signs
    // it: nothing on the machine tells.
    let plain = setup.run(&["audit", "verify"]);
    assert!(
        plain.status.success(),
        "the head alone cannot catch a rewrite of log and head: {}",
        text(&plain)
    );
    let resigned = setup.run(&["audit", "checkpoint"]);
    assert!(
        resigned.status.success(),
        "a key on the same account signs the rewritten log: {}",
        text(&resigned)
    );

    let caught = setup.verify_against(&anchored, false);
    assert_eq!(caught.status.code(), Some(1), "{}", text(&caught));
    assert!(
        text(&caught).contains(
            "do not hash to the checkpoint's root: a record it covers was changed, removed or reordered"
        ),
        "{}",
        text(&caught)
    );

    // Records removed from the end, the head moved back with them: caught too.
    let mut lines: Vec<String> = original
        .into_iter()
        .map(|line| String::from_utf8(line).unwrap())
        .collect();
    lines.truncate(2);
    rewrite_log_and_head(&setup, lines);
    let caught = setup.verify_against(&anchored, false);
    assert_eq!(caught.status.code(), Some(1), "{}", text(&caught));
    assert!(
        text(&caught).contains("fewer than the"),
        "{}",
        text(&caught)
    );
}

#[test]
fn signing_refuses_a_log_that_no_longer_holds_its_latest_checkpoint() {
    let Some(setup) = Setup::new(600_000) else {
        return;
    };
    setup.calls(2);
    setup.anchor("anchored.checkpoint");
    let mut lines = audit_lines(&setup.log());
    lines[1] = lines[1].replacen("\"time\":", "\"time\":1", 1);
    rewrite_log_and_head_keeping_checkpoints(&setup, lines);
    let refused = setup.run(&["audit", "checkpoint"]);
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    assert!(
        text(&refused).contains("no longer holds the")
            && text(&refused).contains("no checkpoint signed"),
        "{}",
        text(&refused)
    );
}

/// As [`rewrite_log_and_head`], leaving the state folder's latest checkpoint in place.
fn rewrite_log_and_head_keeping_checkpoints(setup: &Setup, lines: Vec<String>) {
    let kept = setup.dir.path().join("kept-checkpoints");
    let checkpoints = setup.dir.path().join("state/audit-checkpoints");
    copy_dir(&checkpoints, &kept);
    rewrite_log_and_head(setup, lines);
    copy_dir(&kept, &checkpoints);
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

#[test]
fn a_forged_or_foreign_checkpoint_is_refused_naming_the_key() {
    let Some(setup) = Setup::new(600_000) else {
        return;
    };
    setup.calls(1);
    let (anchored, note) = setup.anchor("anchored.checkpoint");

    // The size raised by one, the signature kept.
    let (origin, size, _) = open_checkpoint(&note, &setup.vkey).unwrap();
    let forged = note.replacen(
        &format!("{origin}\n{size}\n"),
        &format!("{origin}\n{}\n", size + 1),
        1,
    );
    std::fs::write(&anchored, forged).unwrap();
    let refused = setup.verify_against(&anchored, false);
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    assert!(
        text(&refused).contains("no signature by key `toolward.test/audit/laptop+")
            && text(&refused).contains("does not verify"),
        "{}",
        text(&refused)
    );

    // A checkpoint of this very log signed by another key with the same name.
    let other = setup.dir.path().join("other.key");
    let made = Command::new(setup.bin)
        .args([
            "audit",
            "keygen",
            "--name",
            "toolward.test/audit/laptop",
            "--out",
        ])
        .arg(&other)
        .output()
        .unwrap();
    assert!(made.status.success());
    std::fs::write(&anchored, &note).unwrap();
    let other_vkey = String::from_utf8(made.stdout).unwrap();
    let refused = setup.run(&[
        "audit",
        "verify",
        "--checkpoint",
        anchored.to_str().unwrap(),
        "--public-key",
        other_vkey.trim(),
    ]);
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    assert!(
        text(&refused).contains("carries no signature by that name and id"),
        "{}",
        text(&refused)
    );
}

#[tokio::test]
async fn a_gateway_signs_at_its_interval_and_at_shutdown() {
    let Some(setup) = Setup::new(1000) else {
        return;
    };
    let config = toolward::config::Config::from_path(&setup.config).unwrap();
    let toolward = toolward::Toolward::start(config).await.unwrap();
    crate::support::call(&toolward, "s__echo").await;
    let latest = setup.dir.path().join("state/audit-checkpoints");
    let signed_size = || -> Option<u64> {
        let file = std::fs::read_dir(&latest).ok()?.next()?.ok()?.path();
        let note = std::fs::read_to_string(file).ok()?;
        open_checkpoint(&note, &setup.vkey).map(|(_, size, _)| size)
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while signed_size().is_none_or(|size| size < 4) {
        assert!(
            std::time::Instant::now() < deadline,
            "no interval checkpoint covers the call's records"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    crate::support::call(&toolward, "s__echo").await;
    toolward.shutdown().await;
    let leaves = setup.leaves();
    assert_eq!(
        signed_size(),
        Some(leaves.len() as u64),
        "the shutdown checkpoint covers every record"
    );
}
