//! `policy push`, `policy pull`, `policy sign` and `policy keygen`: the terminal side of
//! [`crate::oci`] (`docs/registries.md`).

use std::path::Path;
use std::process::ExitCode;

use anyhow::anyhow;

use crate::config::OciReference;
use crate::config::operator_file::{self, MAX_COMPONENT_BYTES};
use crate::oci::{self, RegistryClient, TrustedKeys};

use super::{Failure, failure, open_state, read_config, usage};

fn reference(text: &str) -> Result<OciReference, Failure> {
    OciReference::parse(text).map_err(|reason| {
        usage(anyhow!(
            "`{}` is not an OCI reference: {reason}",
            crate::text::escape(text)
        ))
    })
}

/// Refusals of the registry's answers are exit 1 (something was refused); the rest, 3.
fn refused(error: oci::OciError) -> Failure {
    match error {
        oci::OciError::Registry { .. }
        | oci::OciError::Runtime { .. }
        | oci::OciError::State(_) => failure(error),
        oci::OciError::Credentials { .. } | oci::OciError::Key { .. } => usage(error),
        other => Failure {
            code: super::EXIT_FOUND,
            error: other.into(),
        },
    }
}

/// `policy push FILE REF`: publishes the component and prints its digest reference.
pub(super) async fn push(file: &Path, target: &str) -> Result<ExitCode, Failure> {
    let target = reference(target)?;
    if target.digest.is_some() {
        return Err(usage(anyhow!(
            "`{target}` has a digest: push to a tag or to the repository alone; the digest is what the push prints"
        )));
    }
    let wasm = operator_file::read(file, "component", MAX_COMPONENT_BYTES).map_err(usage)?;
    let client = RegistryClient::new(&target.registry).map_err(usage)?;
    let digest = client.push(&target, &wasm).await.map_err(refused)?;
    errln!(
        "pushed `{}` ({} bytes) to `{target}`; pin it, and sign it with `toolward policy sign`:",
        file.display(),
        wasm.len()
    );
    outln!("{}", target.pinned(&digest))?;
    Ok(ExitCode::SUCCESS)
}

/// `policy pull REF [--config FILE]`: resolves a tag to its digest and prints the reference
/// to pin; with a config, pulls the component into its state folder and verifies its
/// signature with `oci.keys`.
pub(super) async fn pull(source: &str, config: Option<&Path>) -> Result<ExitCode, Failure> {
    let source = reference(source)?;
    let client = RegistryClient::new(&source.registry).map_err(usage)?;
    let digest = client.resolve(&source).await.map_err(refused)?;
    let pinned = source.pinned(&digest);
    match config {
        Some(path) => {
            let config = read_config(path)?;
            let state = open_state(&config)?;
            let keys = TrustedKeys::read(&config.oci.keys).map_err(usage)?;
            let signer = oci::pull_verified(&pinned, &state, &keys)
                .await
                .map_err(refused)?;
            errln!(
                "pulled into `{}`; signed with the key `{}` of `oci.keys`; pin:",
                state.path().display(),
                crate::text::escape(&signer)
            );
        }
        None => errln!(
            "a Wasm component (signature not checked: give `--config` to pull it and verify it with `oci.keys`); pin:"
        ),
    }
    outln!("{pinned}")?;
    Ok(ExitCode::SUCCESS)
}

/// `policy sign REF --key KEY.pem`: adds a cosign signature of the digest REF pins.
pub(super) async fn sign(target: &str, key: &Path) -> Result<ExitCode, Failure> {
    let target = reference(target)?;
    if target.digest.is_none() {
        return Err(usage(anyhow!(
            "`{target}` names no digest: sign what you reviewed, by digest (`toolward policy pull {target}` prints it)"
        )));
    }
    let key = oci::read_signing_key(key).map_err(usage)?;
    let client = RegistryClient::new(&target.registry).map_err(usage)?;
    let tag = client.sign(&target, &key).await.map_err(refused)?;
    errln!("signed; the signature is at the tag `{tag}` beside it:");
    outln!("{target}")?;
    Ok(ExitCode::SUCCESS)
}

/// `policy keygen --out FILE`: a new ECDSA P-256 signing key in FILE (PKCS#8 PEM, created
/// `0600`, never over an existing file) and its public key in `FILE.pub` and on standard
/// output (PEM `PUBLIC KEY`, what `oci.keys` names and `cosign verify --key` reads).
pub(super) fn keygen(out: &Path) -> Result<ExitCode, Failure> {
    let (private, public) = oci::generate_key(out).map_err(failure)?;
    let public_path = super::write_key_pair(out, &private, &public)?;
    errln!(
        "signing key in `{}` (keep it private); public key in `{}` (name it in `oci.keys`):",
        out.display(),
        public_path.display()
    );
    out!("{public}")?;
    Ok(ExitCode::SUCCESS)
}
