//! `policy push`, `policy pull`, `policy sign` and `policy keygen`: the terminal side of
//! [`crate::oci`] (`docs/registries.md`), for components, policy settings and Cedar text.

use std::path::Path;
use std::process::ExitCode;

use anyhow::anyhow;

use crate::config::OciReference;
use crate::config::operator_file;
use crate::oci::{self, ArtifactKind, RegistryClient, TrustedKeys};

use super::{Failure, PushKind, failure, open_state, read_config, usage};

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

/// The config field that pins an artifact of `kind`, for messages.
fn field_of(kind: ArtifactKind) -> &'static str {
    match kind {
        ArtifactKind::Component => "`policy.component` or `rules.component`",
        ArtifactKind::PolicySettings => "`policy.settings`",
        ArtifactKind::CedarPolicies => "`policy.cedar`",
    }
}

/// What `policy push` publishes: `--kind`, else a component by its preamble or Cedar text by
/// its `.cedar` name. Settings are never guessed: any text could be settings, and a file
/// pushed as the wrong kind is refused only when a config names it.
fn kind_of(file: &Path, bytes: &[u8], kind: Option<PushKind>) -> Result<ArtifactKind, Failure> {
    Ok(match kind {
        Some(PushKind::Component) => ArtifactKind::Component,
        Some(PushKind::Settings) => ArtifactKind::PolicySettings,
        Some(PushKind::Cedar) => ArtifactKind::CedarPolicies,
        None if oci::is_component(bytes) => ArtifactKind::Component,
        None if file
            .extension()
            .is_some_and(|e| e == crate::cedar::CEDAR_EXTENSION) =>
        {
            ArtifactKind::CedarPolicies
        }
        None => {
            return Err(usage(anyhow!(
                "`{}` is not a WebAssembly component and its name does not end in `.cedar`: say what it is, `--kind settings` (for `policy.settings`) or `--kind cedar`",
                file.display()
            )));
        }
    })
}

/// `policy push FILE REF [--kind KIND]`: publishes the component, settings or Cedar text and
/// prints its digest reference.
pub(super) async fn push(
    file: &Path,
    target: &str,
    kind: Option<PushKind>,
) -> Result<ExitCode, Failure> {
    let target = reference(target)?;
    if target.digest.is_some() {
        return Err(usage(anyhow!(
            "`{target}` has a digest: push to a tag or to the repository alone; the digest is what the push prints"
        )));
    }
    let largest = ArtifactKind::ALL
        .into_iter()
        .map(ArtifactKind::max_bytes)
        .max()
        .unwrap_or(0);
    let bytes = operator_file::read(file, "file to push", largest).map_err(usage)?;
    let kind = kind_of(file, &bytes, kind)?;
    let client = RegistryClient::new(&target.registry).map_err(usage)?;
    let digest = client.push(&target, kind, &bytes).await.map_err(refused)?;
    errln!(
        "pushed `{}` ({} bytes) to `{target}` as {}; sign it with `toolward policy sign`, and pin it in {}:",
        file.display(),
        bytes.len(),
        kind.describe(),
        field_of(kind)
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
    let (digest, kind) = client.resolve(&source).await.map_err(refused)?;
    let pinned = source.pinned(&digest);
    match config {
        Some(path) => {
            let config = read_config(path)?;
            let state = open_state(&config)?;
            let keys = TrustedKeys::read(&config.oci.keys).map_err(usage)?;
            let signer = oci::pull_verified(&pinned, kind, &state, &keys)
                .await
                .map_err(refused)?;
            errln!(
                "{} pulled into `{}`; signed with the key `{}` of `oci.keys`; pin it in {}:",
                kind.describe(),
                state.path().display(),
                crate::text::escape(&signer),
                field_of(kind)
            );
        }
        None => errln!(
            "{} (signature not checked: give `--config` to pull it and verify it with `oci.keys`); pin it in {}:",
            kind.describe(),
            field_of(kind)
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
    let (tag, kind) = client.sign(&target, &key).await.map_err(refused)?;
    errln!(
        "signed {}; the signature is at the tag `{tag}` beside it:",
        kind.describe()
    );
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
