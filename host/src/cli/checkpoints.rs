//! `audit keygen`, `audit checkpoint`, `audit prove` and the checkpoint half of `audit
//! verify --checkpoint`: the terminal side of [`crate::checkpoint`].

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::anyhow;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

use crate::checkpoint::{self, CheckReport, Checkpoint, MAX_NOTE_BYTES, NoteSigner, NoteVerifier};

use super::{EXIT_FOUND, Failure, failure, read_config, usage};

/// `audit keygen --name NAME --out FILE`: a new signer key in FILE (created `0600`, never
/// over an existing file), its verifier key in `FILE.pub` and on standard output.
pub(super) fn keygen(name: &str, out: &Path) -> Result<ExitCode, Failure> {
    let signer = NoteSigner::generate(name).map_err(usage)?;
    let verifier = signer.verifier().to_string();
    let public = super::write_key_pair(
        out,
        &format!("{}\n", signer.to_text()),
        &format!("{verifier}\n"),
    )?;
    errln!(
        "signer key in `{}` (keep it private: name it in `audit.checkpoint.key`); verifier key in `{}`:",
        out.display(),
        public.display()
    );
    outln!("{verifier}")?;
    Ok(ExitCode::SUCCESS)
}

/// The config's log and the signer and origin of its `audit.checkpoint`.
fn signer_of(
    config: &crate::config::Config,
    config_path: &Path,
) -> Result<(NoteSigner, String), Failure> {
    let Some(settings) = &config.audit.checkpoint else {
        return Err(usage(anyhow!(
            "`{}` has no `audit.checkpoint`: name a signer key there (`toolward audit keygen` makes one)",
            config_path.display()
        )));
    };
    let signer = NoteSigner::read(&settings.key).map_err(usage)?;
    let origin = settings
        .origin
        .clone()
        .unwrap_or_else(|| signer.name().to_owned());
    Ok((signer, origin))
}

/// `audit checkpoint --config`: signs a checkpoint of the log (with `store.postgres`, the
/// database's chain) now and prints it; with `--latest`, prints the latest kept without
/// signing.
pub(super) async fn sign(config_path: &Path, latest: bool) -> Result<ExitCode, Failure> {
    let config = read_config(config_path)?;
    let state = crate::store::StateDir::open(&config.state_dir).map_err(usage)?;
    if let crate::config::StoreConfig::Postgres { url, .. } = &config.store {
        return sign_store(&config, config_path, url, state, latest).await;
    }
    if latest {
        let (note, path) = checkpoint::read_latest(&state, &config.audit.file).map_err(failure)?;
        let Some(note) = note else {
            return Err(usage(anyhow!(
                "no checkpoint of `{}` yet (`{}` does not exist): run `toolward audit checkpoint --config {}`",
                config.audit.file.display(),
                path.display(),
                config_path.display()
            )));
        };
        // Printed only once it opens with the config's own key: never unverified text.
        let (signer, _) = signer_of(&config, config_path)?;
        let what = format!("`{}`", path.display());
        signer.verifier().open(&note, &what).map_err(failure)?;
        out!("{}", String::from_utf8_lossy(&note))?;
        return Ok(ExitCode::SUCCESS);
    }
    let (signer, origin) = signer_of(&config, config_path)?;
    let signed =
        checkpoint::sign_log(&config.audit.file, &state, &signer, &origin).map_err(|e| {
            Failure {
                code: EXIT_FOUND,
                error: e.into(),
            }
        })?;
    errln!(
        "checkpoint of {} records of `{}`, kept in `{}`; verify it anywhere with the verifier key {}",
        signed.checkpoint.size,
        config.audit.file.display(),
        signed.path.display(),
        signer.verifier()
    );
    out!("{}", signed.note)?;
    Ok(ExitCode::SUCCESS)
}

/// `audit checkpoint --config` with `store.postgres`: the database's chain, read whole, signed
/// with this config's key, kept in the state folder and in `toolward_checkpoints`; with
/// `--latest`, the largest this key signed as this origin, from the table or else the state
/// folder, printed once it opens with the key.
async fn sign_store(
    config: &crate::config::Config,
    config_path: &Path,
    url: &str,
    state: crate::store::StateDir,
    latest: bool,
) -> Result<ExitCode, Failure> {
    use crate::store::postgres::checkpoints;
    let store = super::pg_store(url, config_path)?;
    let (signer, origin) = signer_of(config, config_path)?;
    let verifier = signer.verifier();
    if latest {
        let note = match checkpoints::latest_note(&store, &verifier, &origin)
            .await
            .map_err(failure)?
        {
            Some(note) => note.into_bytes(),
            None => {
                let name = checkpoint::store_latest_name(store.name());
                let (note, path) = checkpoint::read_latest_named(&state, &name).map_err(failure)?;
                let Some(note) = note else {
                    return Err(usage(anyhow!(
                        "no checkpoint of PostgreSQL store {} by key `{}` yet (none in toolward_checkpoints, and `{}` does not exist): run `toolward audit checkpoint --config {}`",
                        store.name(),
                        verifier.name(),
                        path.display(),
                        config_path.display()
                    )));
                };
                let what = format!("`{}`", path.display());
                verifier.open(&note, &what).map_err(failure)?;
                note
            }
        };
        out!("{}", String::from_utf8_lossy(&note))?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut chain =
        checkpoints::ChainSigner::new(&store, std::sync::Arc::new(state), signer, origin)
            .map_err(usage)?;
    let signed = chain
        .sign(false)
        .await
        .map_err(|e| Failure {
            code: EXIT_FOUND,
            error: e.into(),
        })?
        .ok_or_else(|| failure(anyhow!("no checkpoint signed")))?;
    errln!(
        "checkpoint of {} records of PostgreSQL store {}, kept in `{}` and in toolward_checkpoints; verify it anywhere with the verifier key {verifier}",
        signed.checkpoint.size,
        store.name(),
        signed.path.display(),
    );
    out!("{}", signed.note)?;
    Ok(ExitCode::SUCCESS)
}

/// Reads the checkpoint in `file` and verifies its signature with `public_key`: a verifier
/// key (`NAME+ID+KEY`), or a file holding one.
///
/// # Errors
/// Exit 2 for a key or file that cannot be read; exit 1 for a checkpoint that does not open
/// with the key.
pub(super) fn anchor(file: &Path, public_key: &str) -> Result<(Checkpoint, String), Failure> {
    let verifier = match NoteVerifier::parse(public_key, "`--public-key`") {
        Ok(verifier) => verifier,
        Err(_) if Path::new(public_key).is_file() => {
            let mut text = String::new();
            std::fs::File::open(public_key)
                .and_then(|f| {
                    f.take(checkpoint::MAX_KEY_FILE_BYTES)
                        .read_to_string(&mut text)
                })
                .map_err(|e| usage(anyhow!("cannot read `{public_key}`: {e}")))?;
            NoteVerifier::parse(text.trim(), &format!("`{public_key}`")).map_err(usage)?
        }
        Err(e) => return Err(usage(e)),
    };
    let mut note = Vec::new();
    std::fs::File::open(file)
        .and_then(|f| f.take(MAX_NOTE_BYTES as u64 + 1).read_to_end(&mut note))
        .map_err(|e| usage(anyhow!("cannot read `{}`: {e}", file.display())))?;
    let what = format!("checkpoint `{}`", file.display());
    let checkpoint = verifier.open(&note, &what).map_err(|e| Failure {
        code: EXIT_FOUND,
        error: e.into(),
    })?;
    Ok((checkpoint, verifier.name().to_owned()))
}

/// Checks the log at `file` against the verified `checkpoint`.
pub(super) fn check(file: &Path, checkpoint: Checkpoint) -> Result<CheckReport, Failure> {
    let read = checkpoint::read_tree(file, None).map_err(failure)?;
    Ok(checkpoint::check_log(&read, checkpoint))
}

/// What `audit verify` prints of a [`CheckReport`], as JSON.
pub(super) fn report_json(report: &CheckReport, key: &str) -> serde_json::Value {
    serde_json::json!({
        "origin": report.checkpoint.origin,
        "key": key,
        "size": report.checkpoint.size,
        "root": BASE64.encode(report.checkpoint.root),
        "log_records": report.records,
        "log_root": BASE64.encode(report.root),
        "consistent": report.problem.is_none(),
        "consistency_proof": report.proof.as_ref().map(|proof| proof.iter().map(hex::encode).collect::<Vec<_>>()),
        "problem": report.problem,
    })
}

/// What `audit verify` prints of a [`CheckReport`], as text.
pub(super) fn report_text(report: &CheckReport, file: &Path, key: &str) -> Result<(), Failure> {
    let c = &report.checkpoint;
    let origin = crate::text::escape(&c.origin);
    match &report.problem {
        None => {
            outln!(
                "checkpoint `{origin}` ({} records, root {}), signed by `{key}`: the log holds them unchanged; its tree of {} records has root {}",
                c.size,
                BASE64.encode(c.root),
                report.records,
                BASE64.encode(report.root)
            )?;
            if let Some(proof) = &report.proof {
                outln!("consistency proof ({} hashes):", proof.len())?;
                for hash in proof {
                    outln!("  {}", hex::encode(hash))?;
                }
            }
        }
        Some(problem) => outln!(
            "checkpoint `{origin}` ({} records, root {}), signed by `{key}`: `{}` does not extend it: {problem}",
            c.size,
            BASE64.encode(c.root),
            file.display()
        )?,
    }
    Ok(())
}

/// `audit prove SEQ --config [--size N]`: the inclusion proof of record SEQ in the tree of the
/// log's first N records (default: every record up to the head), as JSON. With
/// `store.postgres`, the database's chain up to its head row.
pub(super) async fn prove(
    config_path: &Path,
    seq: u64,
    size: Option<u64>,
) -> Result<ExitCode, Failure> {
    let config = read_config(config_path)?;
    if let crate::config::StoreConfig::Postgres { url, .. } = &config.store {
        let store = super::pg_store(url, config_path)?;
        let pool = store.pool().map_err(failure)?;
        store.check_schema(&pool).await.map_err(failure)?;
        let mut leaves = crate::store::postgres::checkpoints::ChainLeaves::new();
        leaves
            .read_to_head(&store, &pool)
            .await
            .map_err(|e| Failure {
                code: EXIT_FOUND,
                error: e.into(),
            })?;
        return print_proof(
            leaves.tree(),
            seq,
            size,
            &format!("PostgreSQL store {}", store.name()),
        );
    }
    let state = crate::store::StateDir::open(&config.state_dir).map_err(usage)?;
    let log: PathBuf = config.audit.file.clone();
    let upto = match size {
        Some(size) => Some(size),
        None => crate::audit::read_head(&state, &log)
            .map_err(failure)?
            .0
            .map(|head| head.records),
    };
    let read = checkpoint::read_tree(&log, upto).map_err(failure)?;
    print_proof(
        &read.tree,
        seq,
        size,
        &format!("audit log `{}`", log.display()),
    )
}

/// Prints the inclusion proof of leaf `seq` in the tree of `tree`'s first `size` leaves
/// (default: all of them), as JSON; `what` names the log in errors.
fn print_proof(
    tree: &crate::merkle::Tree,
    seq: u64,
    size: Option<u64>,
    what: &str,
) -> Result<ExitCode, Failure> {
    let size = size.unwrap_or(tree.size());
    let found = |e: crate::merkle::ProofError| Failure {
        code: EXIT_FOUND,
        error: anyhow!("{what}: {e}"),
    };
    let proof = tree.inclusion_proof(seq, size).map_err(found)?;
    let root = tree.root(size).map_err(found)?;
    let leaf = tree
        .leaf(seq)
        .ok_or_else(|| found(crate::merkle::ProofError::NoLeaf { index: seq, size }))?;
    let value = serde_json::json!({
        "seq": seq,
        "tree_size": size,
        "leaf_hash": hex::encode(leaf),
        "root": BASE64.encode(root),
        "proof": proof.iter().map(hex::encode).collect::<Vec<_>>(),
    });
    outln!("{value:#}")?;
    Ok(ExitCode::SUCCESS)
}
