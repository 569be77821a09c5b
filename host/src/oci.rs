//! Rules and policy components, policy settings and Cedar policy text from OCI registries
//! (`oci://…@sha256:…` in `rules.component`, `policy.component`, `policy.settings` and
//! `policy.cedar`), with cosign's keyed signatures (`docs/registries.md`).
//!
//! # The artifacts
//!
//! Each is an OCI image manifest with one layer, the file's bytes; its [`ArtifactKind`] says
//! which media types it carries, and the config field that names it says which kind it must
//! be (a Cedar artifact named by `policy.settings` is refused, and so is a component there):
//!
//! | kind | `config.mediaType` | the layer's `mediaType` (and `artifactType`) | limit |
//! |---|---|---|---|
//! | component | [`WASM_CONFIG_MEDIA_TYPE`] | [`WASM_LAYER_MEDIA_TYPE`] | `MAX_COMPONENT_BYTES` |
//! | policy settings | [`EMPTY_CONFIG_MEDIA_TYPE`] | [`SETTINGS_MEDIA_TYPE`] | `MAX_SETTINGS_BYTES` |
//! | Cedar policies | [`EMPTY_CONFIG_MEDIA_TYPE`] | [`CEDAR_MEDIA_TYPE`] | `MAX_SETTINGS_BYTES` |
//!
//! A component follows the layout the CNCF Wasm working group describes for Wasm OCI
//! artifacts. Settings and Cedar text follow the OCI image specification's guidelines for
//! artifacts (v1.1, as ORAS pushes them): the empty config `{}`, `artifactType` set to the
//! layer's media type. toolward's media types are in the vendor tree without a structured
//! syntax suffix: settings are whatever text the policy component reads (not always JSON),
//! and `+text` is no registered suffix. A config pins the manifest's digest; the manifest
//! names the layer's digest, so the bytes follow from the pin. Anything else under the digest
//! (an image index, a manifest list, two layers, another media type) is refused, never
//! resolved.
//!
//! # Signatures
//!
//! cosign's keyed scheme, as `cosign sign --key` writes it and `cosign verify --key` reads it:
//! beside the artifact, the tag `sha256-<hex>.sig` holds a manifest whose layers (media type
//! [`SIMPLE_SIGNING_MEDIA_TYPE`]) are "simple signing" payloads naming the manifest digest,
//! each with the annotation [`SIGNATURE_ANNOTATION`]: the base64 of an ECDSA P-256 signature
//! (ASN.1 DER) over the payload's bytes with SHA-256. An artifact is used only when one of
//! those signatures verifies with a key of `oci.keys` and its payload names the pinned
//! digest; the key's name is recorded in the audit. The tag scheme rather than the OCI
//! referrers API because Debian's registry (distribution 2.8) has no referrers API.
//!
//! # Bounds
//!
//! Every manifest (the artifact's, its signature manifest, and what `resolve` reads), every
//! blob and the bearer token are read by toolward's own requests (`transport`), not
//! oci-client's (which reads a whole body, however long): a `Content-Length` over the limit is
//! refused before the body, and the body is read no further than the limit
//! ([`MAX_MANIFEST_BYTES`]; [`MAX_TOKEN_BYTES`]; for a blob, the descriptor's size or the
//! kind's limit, whichever is smaller). A blob's redirect is followed at most
//! [`MAX_REDIRECTS`] times, only to https (plain http only to loopback, for a loopback
//! registry), never with `Authorization`. oci-client only pushes, with the token found here.
//!
//! # The cache
//!
//! Pulled blobs are kept in the state folder by digest, `<state_dir>/oci/blobs/sha256/<hex>`
//! (the artifact's manifest, its layer, its signature manifest and payloads), and
//! `<state_dir>/oci/signatures/<hex>` names the signature manifest of the manifest `<hex>`.
//! Only what verified is kept. A kept file that is no regular file, larger than its size or
//! other bytes is treated as absent: pulled again and replaced. Every load reads them again and checks each blob's SHA-256
//! against the digest it is kept under and the signature against the config's keys of that
//! moment; what is missing is pulled. When no kept signature verifies, the signatures are
//! pulled again (a key rotation signs with a new key after the pull): a key taken out of
//! `oci.keys` refuses the next load of what only it signed.
//!
//! # Where ambient authority is used
//!
//! The network (the registry named by the reference, plain HTTP only when it is on loopback),
//! the environment and `~/.docker/config.json` for credentials (static `auths` entries only:
//! no credential helper is run), and the key files the config or the command line names.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use cap_std::fs::Dir;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::OciDistributionError;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use p256::ecdsa::signature::{Signer as _, Verifier as _};
use p256::ecdsa::{Signature, SigningKey, VerifyingKey};
use serde::Deserialize;
use sha2::{Digest as _, Sha256};

use crate::config::OciReference;
use crate::config::operator_file::{self, MAX_COMPONENT_BYTES, MAX_SETTINGS_BYTES};
use crate::state_dir::{StateDir, StateError, open_private_in, replace_private_in};

mod transport;
pub use transport::{MAX_REDIRECTS, MAX_TOKEN_BYTES};

/// The media type of a Wasm artifact's config (CNCF Wasm OCI artifact layout).
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The media type of a Wasm artifact's one layer: the component's bytes.
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/wasm";
/// The empty config of an artifact that needs none (`{}`, OCI image specification v1.1,
/// "Guidance for an empty descriptor"): the config of settings and Cedar artifacts.
pub const EMPTY_CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.empty.v1+json";
/// The empty config's bytes.
pub const EMPTY_CONFIG: &[u8] = b"{}";
/// The media type of a policy settings artifact's one layer (`policy.settings`), and its
/// `artifactType`.
pub const SETTINGS_MEDIA_TYPE: &str = "application/vnd.toolward.policy-settings.v1";
/// The media type of a Cedar policies artifact's one layer (`policy.cedar`), and its
/// `artifactType`.
pub const CEDAR_MEDIA_TYPE: &str = "application/vnd.toolward.cedar-policies.v1";
/// The OCI image manifest's media type, the only kind of manifest pulled.
pub const OCI_MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// The media type of an OCI image config (what cosign's signature manifests carry).
pub const OCI_CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.image.config.v1+json";
/// The media type of cosign's signature payloads.
pub const SIMPLE_SIGNING_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The annotation of a payload layer holding its signature (base64 of ASN.1 DER).
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// The `critical.type` of a cosign payload.
pub const COSIGN_SIGNATURE_TYPE: &str = "cosign container image signature";
/// The cache's folder in the state folder: `oci`.
pub const CACHE_FOLDER: &str = "oci";
/// Largest manifest read, kept or parsed, in bytes: 64 KiB. An artifact's manifest is under
/// 1 KiB; a signature manifest grows by about 1 KiB per signature. A registry's answer is
/// refused by its `Content-Length` before its body, and read no further than this.
pub const MAX_MANIFEST_BYTES: u64 = 64 * 1024;
/// Largest signature payload read, in bytes: 16 KiB. cosign's are about 250 bytes, more with
/// annotations.
pub const MAX_PAYLOAD_BYTES: u64 = 16 * 1024;
/// Most signatures `policy sign` keeps in a signature manifest: 32 (the one it adds and 31 of
/// those there). A load checks every signature layer a signature manifest holds (at most
/// [`MAX_MANIFEST_BYTES`] of them), so junk ones ahead of a valid one cannot hide it.
pub const MAX_SIGNATURES: usize = 32;
/// Most reasons a refusal for no valid signature lists, one per signature: 8 (then how many
/// more there were).
const MAX_REASONS_SHOWN: usize = 8;
/// Longest wait for a registry to connect, and for each read from it: 30 s.
pub const REGISTRY_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest a whole pull may take (manifest, layer, signatures): 5 minutes. Each read has
/// [`REGISTRY_TIMEOUT`], but a registry sending a byte every few seconds would otherwise hold
/// a load for days (an outside attack held `check` so).
pub const PULL_DEADLINE: Duration = Duration::from_secs(300);
/// Largest `~/.docker/config.json` read, in bytes: 1 MiB.
pub const MAX_DOCKER_CONFIG_BYTES: u64 = 1024 * 1024;
/// The variables registry credentials are read from first (both or neither, with
/// [`REGISTRY_VAR`]).
pub const USERNAME_VAR: &str = "TOOLWARD_REGISTRY_USERNAME";
/// See [`USERNAME_VAR`].
pub const PASSWORD_VAR: &str = "TOOLWARD_REGISTRY_PASSWORD";
/// The variable naming the one registry (`host[:port]`, as in the reference) the credentials
/// of [`USERNAME_VAR`] and [`PASSWORD_VAR`] are for: required with them, so they are never
/// sent to another registry a config names.
pub const REGISTRY_VAR: &str = "TOOLWARD_REGISTRY_HOST";

/// What an artifact holds, and so its media types, its size limit and the config field that
/// may name it (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ArtifactKind {
    /// A rules or policy component (`rules.component`, `policy.component`): the CNCF Wasm OCI
    /// artifact layout.
    Component,
    /// The text a policy component is configured with (`policy.settings`).
    PolicySettings,
    /// Cedar policies for the built-in Cedar component (`policy.cedar`).
    CedarPolicies,
}

impl ArtifactKind {
    /// Every kind.
    pub const ALL: [Self; 3] = [Self::Component, Self::PolicySettings, Self::CedarPolicies];

    /// The media type of the manifest's config.
    #[must_use]
    pub fn config_media_type(self) -> &'static str {
        match self {
            Self::Component => WASM_CONFIG_MEDIA_TYPE,
            Self::PolicySettings | Self::CedarPolicies => EMPTY_CONFIG_MEDIA_TYPE,
        }
    }

    /// The media type of the one layer (and the manifest's `artifactType`).
    #[must_use]
    pub fn layer_media_type(self) -> &'static str {
        match self {
            Self::Component => WASM_LAYER_MEDIA_TYPE,
            Self::PolicySettings => SETTINGS_MEDIA_TYPE,
            Self::CedarPolicies => CEDAR_MEDIA_TYPE,
        }
    }

    /// The largest layer read, in bytes: the limit on the same file read from disk.
    #[must_use]
    pub fn max_bytes(self) -> u64 {
        match self {
            Self::Component => MAX_COMPONENT_BYTES,
            Self::PolicySettings | Self::CedarPolicies => MAX_SETTINGS_BYTES,
        }
    }

    /// What the artifact is, in a message: `a Wasm component artifact`.
    #[must_use]
    pub fn describe(self) -> &'static str {
        match self {
            Self::Component => "a Wasm component artifact",
            Self::PolicySettings => "a policy settings artifact",
            Self::CedarPolicies => "a Cedar policies artifact",
        }
    }

    /// The word `toolward policy push --kind` takes: `component`, `settings`, `cedar`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Component => "component",
            Self::PolicySettings => "settings",
            Self::CedarPolicies => "cedar",
        }
    }

    /// The kind whose layer has `media_type`.
    fn of_layer(media_type: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|kind| kind.layer_media_type() == media_type)
    }
}

impl std::fmt::Display for ArtifactKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why an artifact from a registry is not loaded, pushed, pulled or signed. Every message
/// about an artifact names its reference; those about its bytes or signature name the digest.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    /// A reference that is not one, or not of the kind the command needs.
    #[error("`{reference}`: {reason}")]
    Reference {
        /// The reference as given.
        reference: String,
        /// What is wrong.
        reason: String,
    },
    /// The registry refused or failed a request.
    #[error("registry for `{reference}`: {source}")]
    Registry {
        /// The reference.
        reference: String,
        /// The client's error (oci-client's, boxed: its type is not part of toolward's API).
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// What the registry holds under the reference is not the kind of artifact asked for
    /// (a component where the config names a component, settings where it names settings).
    #[error("`{reference}` (`{digest}`) is not {expected}: {reason}")]
    WrongArtifact {
        /// The reference.
        reference: String,
        /// The manifest's digest (of the file, for one refused before a push).
        digest: String,
        /// What was asked for: `a Wasm component artifact`, `a policy settings artifact` or
        /// `a Cedar policies artifact`.
        expected: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// Bytes whose SHA-256 is not the digest they were asked for or are kept under.
    #[error("`{reference}`: {what} has digest `{actual}`, not `{expected}`")]
    DigestMismatch {
        /// The reference.
        reference: String,
        /// What (`the manifest`, `the layer`).
        what: &'static str,
        /// The digest asked for.
        expected: String,
        /// The digest of the bytes received.
        actual: String,
    },
    /// More bytes than a limit allows.
    #[error("`{reference}`: {what} is larger than the limit of {limit} bytes ({bytes} bytes)")]
    TooLarge {
        /// The reference.
        reference: String,
        /// What (`the manifest`, `the layer`).
        what: &'static str,
        /// Its size, or what was read before stopping.
        bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// No signature is published for the digest.
    #[error(
        "`{reference}` (`{digest}`) is not signed: the registry has no `{tag}` tag; sign it with `toolward policy sign {reference} --key KEY.pem` or pin a signed digest"
    )]
    Unsigned {
        /// The reference.
        reference: String,
        /// The manifest's digest.
        digest: String,
        /// The signature tag looked for.
        tag: String,
    },
    /// Signatures are published, and none verifies with a key of `oci.keys`.
    #[error("`{reference}` (`{digest}`): no valid signature: {reason}")]
    BadSignature {
        /// The reference.
        reference: String,
        /// The manifest's digest.
        digest: String,
        /// Why each signature was not accepted.
        reason: String,
    },
    /// A key file cannot be read or is not a P-256 key in PEM.
    #[error("key `{path}`: {reason}")]
    Key {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The credentials in the environment or the Docker config cannot be used.
    #[error("registry credentials for `{registry}`: {reason}")]
    Credentials {
        /// The registry.
        registry: String,
        /// What is wrong.
        reason: String,
    },
    /// The cache in the state folder cannot be read or written.
    #[error(transparent)]
    State(#[from] StateError),
    /// The pull could not be run (no thread or runtime for it).
    #[error("cannot pull `{reference}`: {reason}")]
    Runtime {
        /// The reference.
        reference: String,
        /// Why.
        reason: String,
    },
}

/// The public keys an artifact's signature may verify with (`oci.keys`), by name.
#[derive(Debug, Clone, Default)]
pub struct TrustedKeys {
    keys: Vec<(String, VerifyingKey)>,
}

impl TrustedKeys {
    /// Reads each key file of `keys` (PEM `PUBLIC KEY`, ECDSA P-256, as `cosign
    /// generate-key-pair` writes `cosign.pub`).
    ///
    /// # Errors
    /// [`OciError::Key`] naming the file.
    pub fn read(keys: &BTreeMap<String, PathBuf>) -> Result<Self, OciError> {
        use p256::pkcs8::DecodePublicKey as _;
        let mut read = Vec::new();
        for (name, path) in keys {
            let text = read_key_text(path, "public key")?;
            let key = VerifyingKey::from_public_key_pem(&text).map_err(|e| OciError::Key {
                path: path.clone(),
                reason: format!(
                    "not a PEM `PUBLIC KEY` of an ECDSA P-256 key (cosign's `cosign.pub`): {e}"
                ),
            })?;
            read.push((name.clone(), key));
        }
        Ok(Self { keys: read })
    }

    fn names(&self) -> String {
        self.keys
            .iter()
            .map(|(name, _)| format!("`{}`", crate::text::escape(name)))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn read_key_text(path: &Path, what: &'static str) -> Result<String, OciError> {
    let bytes = operator_file::read(path, what, 64 * 1024).map_err(|e| OciError::Key {
        path: path.to_owned(),
        reason: e.to_string(),
    })?;
    String::from_utf8(bytes).map_err(|_| OciError::Key {
        path: path.to_owned(),
        reason: "not UTF-8 text".to_owned(),
    })
}

/// Reads a signing key: PEM `PRIVATE KEY` (PKCS#8) or `EC PRIVATE KEY` (SEC1) of a P-256 key.
/// cosign's own `cosign.key` is encrypted in a format of its own; `cosign import-key-pair`
/// reads these PEM files, so the same key signs with both.
///
/// # Errors
/// [`OciError::Key`] naming the file.
pub fn read_signing_key(path: &Path) -> Result<SigningKey, OciError> {
    use p256::pkcs8::DecodePrivateKey as _;
    let text = read_key_text(path, "signing key")?;
    if let Ok(key) = SigningKey::from_pkcs8_pem(&text) {
        return Ok(key);
    }
    p256::SecretKey::from_sec1_pem(&text)
        .map(SigningKey::from)
        .map_err(|_| OciError::Key {
            path: path.to_owned(),
            reason: "not a PEM `PRIVATE KEY` (PKCS#8) or `EC PRIVATE KEY` of an ECDSA P-256 key"
                .to_owned(),
        })
}

/// A new signing key from the operating system's random source, as PKCS#8 PEM, and its public
/// key as PEM `PUBLIC KEY` (cosign's `cosign.pub` format).
///
/// # Errors
/// [`OciError::Key`] when there is no randomness or the key cannot be encoded.
pub fn generate_key(path: &Path) -> Result<(String, String), OciError> {
    use p256::pkcs8::{EncodePrivateKey as _, EncodePublicKey as _, LineEnding};
    let fail = |reason: String| OciError::Key {
        path: path.to_owned(),
        reason,
    };
    // A random 32-byte string is a valid scalar but for odds of about 2^-32; draw again then.
    let key = loop {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).map_err(|e| fail(e.to_string()))?;
        if let Ok(key) = SigningKey::from_slice(&bytes) {
            break key;
        }
    };
    let private = key
        .to_pkcs8_pem(LineEnding::LF)
        .map_err(|e| fail(e.to_string()))?;
    let public = key
        .verifying_key()
        .to_public_key_pem(LineEnding::LF)
        .map_err(|e| fail(e.to_string()))?;
    Ok((private.to_string(), public))
}

/// An artifact pulled and verified: its bytes, and who signed it.
#[derive(Debug, Clone)]
pub struct Verified {
    /// The artifact's layer: the component, the settings or the Cedar text.
    pub bytes: Vec<u8>,
    /// The name in `oci.keys` of the key its signature verified with.
    pub signer: String,
}

/// The `sha256:<hex>` of `bytes`.
#[must_use]
pub fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// cosign's signature tag for `digest`: `sha256-<hex>.sig`.
#[must_use]
pub fn signature_tag(digest: &str) -> String {
    format!("{}.sig", digest.replacen(':', "-", 1))
}

/// cosign's simple-signing payload for the manifest `digest` of `reference`'s repository,
/// byte for byte as cosign writes it.
#[must_use]
pub fn signature_payload(reference: &OciReference, digest: &str) -> String {
    serde_json::json!({
        "critical": {
            "identity": {"docker-reference": reference.repository_name()},
            "image": {"docker-manifest-digest": digest},
            "type": COSIGN_SIGNATURE_TYPE,
        },
        "optional": null,
    })
    .to_string()
}

// ---------------------------------------------------------------------------------------------
// Manifests as toolward reads them: only the fields it checks.

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Manifest {
    schema_version: u32,
    media_type: Option<String>,
    config: Descriptor,
    #[serde(default)]
    layers: Vec<Descriptor>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Descriptor {
    media_type: String,
    digest: String,
    size: u64,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
struct Payload {
    critical: Critical,
}

#[derive(Debug, Deserialize)]
struct Critical {
    image: PayloadImage,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Debug, Deserialize)]
struct PayloadImage {
    #[serde(rename = "docker-manifest-digest")]
    digest: String,
}

/// Parses an OCI image manifest (not an index, not a Docker manifest list).
fn parse_manifest(bytes: &[u8]) -> Result<Manifest, String> {
    let manifest: Manifest = serde_json::from_slice(bytes)
        .map_err(|e| format!("the manifest is not an OCI image manifest ({e})"))?;
    if manifest.schema_version != 2 {
        return Err(format!(
            "`schemaVersion` is {}, not 2",
            manifest.schema_version
        ));
    }
    match manifest.media_type.as_deref() {
        Some(OCI_MANIFEST_MEDIA_TYPE) => {}
        Some(other) => {
            return Err(format!(
                "the manifest's media type is `{}`, not `{OCI_MANIFEST_MEDIA_TYPE}` (an index or manifest list is not followed)",
                crate::text::escape(other)
            ));
        }
        None => {
            return Err(format!(
                "the manifest has no `mediaType` (`{OCI_MANIFEST_MEDIA_TYPE}` expected)"
            ));
        }
    }
    for descriptor in std::iter::once(&manifest.config).chain(&manifest.layers) {
        if !crate::config::is_sha256_digest(&descriptor.digest) {
            return Err(format!(
                "a descriptor's digest `{}` is not `sha256:` and 64 lowercase hex digits",
                crate::text::escape(&descriptor.digest)
            ));
        }
    }
    Ok(manifest)
}

/// The one layer of an artifact of `kind`, from its manifest.
fn artifact_layer(manifest: &Manifest, kind: ArtifactKind) -> Result<&Descriptor, String> {
    let [layer] = manifest.layers.as_slice() else {
        return Err(format!(
            "{} layers, where an artifact has one",
            manifest.layers.len()
        ));
    };
    if layer.media_type != kind.layer_media_type() {
        let found = match ArtifactKind::of_layer(&layer.media_type) {
            Some(other) => format!(" ({})", other.describe()),
            None => String::new(),
        };
        return Err(format!(
            "the layer's media type is `{}`{found}, not `{}`",
            crate::text::escape(&layer.media_type),
            kind.layer_media_type()
        ));
    }
    if manifest.config.media_type != kind.config_media_type() {
        return Err(format!(
            "the config's media type is `{}`, not `{}`",
            crate::text::escape(&manifest.config.media_type),
            kind.config_media_type()
        ));
    }
    if layer.size > kind.max_bytes() {
        return Err(format!(
            "the layer is {} bytes, over the limit of {} bytes for {}",
            layer.size,
            kind.max_bytes(),
            kind.describe()
        ));
    }
    Ok(layer)
}

/// The kind of artifact a manifest holds, by its one layer's media type.
fn kind_of(manifest: &Manifest) -> Result<ArtifactKind, String> {
    let [layer] = manifest.layers.as_slice() else {
        return Err(format!(
            "{} layers, where an artifact has one",
            manifest.layers.len()
        ));
    };
    ArtifactKind::of_layer(&layer.media_type).ok_or_else(|| {
        format!(
            "the layer's media type `{}` is none of toolward's (`{WASM_LAYER_MEDIA_TYPE}`, `{SETTINGS_MEDIA_TYPE}`, `{CEDAR_MEDIA_TYPE}`)",
            crate::text::escape(&layer.media_type)
        )
    })
}

/// The signature layers of a signature manifest: every one of cosign's simple-signing payloads
/// no larger than [`MAX_PAYLOAD_BYTES`] (the manifest's own limit bounds how many); other
/// layers are skipped.
fn signature_layers(
    reference: &OciReference,
    digest: &str,
    tag: &str,
    bytes: &[u8],
) -> Result<Vec<Descriptor>, OciError> {
    let manifest = parse_manifest(bytes).map_err(|reason| OciError::BadSignature {
        reference: reference.to_string(),
        digest: digest.to_owned(),
        reason: format!("its signature manifest `{tag}`: {reason}"),
    })?;
    Ok(manifest
        .layers
        .into_iter()
        .filter(|layer| {
            layer.media_type == SIMPLE_SIGNING_MEDIA_TYPE && layer.size <= MAX_PAYLOAD_BYTES
        })
        .collect())
}

/// An artifact as read from the registry or the cache, each blob checked against its digest
/// and each manifest parsed once: what [`Parts::verify`] reads and [`OciCache::keep`] stores.
struct Parts {
    /// The manifest's digest (the pin).
    digest: String,
    manifest: Vec<u8>,
    layer: Descriptor,
    content: Vec<u8>,
    signature_digest: String,
    signature_manifest: Vec<u8>,
    payloads: Vec<(Descriptor, Vec<u8>)>,
}

impl Parts {
    /// The artifact's bytes and signer, when one of its signatures verifies with `keys`; with
    /// `keep`, kept in that cache first (only what verified is kept).
    fn verify(
        self,
        reference: &OciReference,
        keys: &TrustedKeys,
        keep: Option<&OciCache>,
    ) -> Result<Verified, OciError> {
        let signer = verify_signatures(reference, &self.digest, &self.payloads, keys)?;
        if let Some(cache) = keep {
            cache.keep(&self)?;
        }
        Ok(Verified {
            bytes: self.content,
            signer,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// The cache in the state folder.

/// The cache of pulled blobs in the state folder (see the module documentation).
#[derive(Debug)]
pub struct OciCache {
    blobs: Dir,
    blobs_path: PathBuf,
    signatures: Dir,
    signatures_path: PathBuf,
}

impl OciCache {
    /// Opens (creating) `<state_dir>/oci/blobs/sha256` and `<state_dir>/oci/signatures`.
    ///
    /// # Errors
    /// [`OciError::State`] naming the folder.
    pub fn open(state: &StateDir) -> Result<Self, OciError> {
        let blobs_name = Path::new(CACHE_FOLDER).join("blobs").join("sha256");
        let signatures_name = Path::new(CACHE_FOLDER).join("signatures");
        Ok(Self {
            blobs: state.subdir(&blobs_name)?,
            blobs_path: state.path().join(blobs_name),
            signatures: state.subdir(&signatures_name)?,
            signatures_path: state.path().join(signatures_name),
        })
    }

    fn put_blob(&self, digest: &str, bytes: &[u8]) -> Result<(), OciError> {
        let hex = hex_of(digest);
        replace_private_in(&self.blobs, hex, bytes, &self.blobs_path.join(hex))?;
        Ok(())
    }

    /// The blob `digest`, at most `limit` bytes, its SHA-256 checked; `None` when not kept,
    /// or when what is kept is no regular file, larger than `limit` or other bytes (changed
    /// in the state folder since it was pulled): it is then pulled again and replaced, with a
    /// warning naming the file. The file is opened without following a symlink and without
    /// blocking (a FIFO put there would hold the load), and read no further than `limit`
    /// and one byte.
    fn blob(&self, what: &'static str, digest: &str, limit: u64) -> Option<Vec<u8>> {
        let hex = hex_of(digest);
        let path = self.blobs_path.join(hex);
        let bad = |reason: String| {
            tracing::warn!(file = %path.display(), what, "a cached blob is not usable ({reason}); pulling it again");
            None
        };
        let file = match open_private_in(&self.blobs, Path::new(hex), &path) {
            Ok(file) => file,
            Err(e) if e.not_found() => return None,
            Err(e) => return bad(e.to_string()),
        };
        let mut bytes = Vec::new();
        if let Err(e) = file.take(limit + 1).read_to_end(&mut bytes) {
            return bad(e.to_string());
        }
        if bytes.len() as u64 > limit {
            return bad(format!("larger than the {limit} bytes expected"));
        }
        let actual = sha256_digest(&bytes);
        if actual != digest {
            return bad(format!("its digest is `{actual}`, not `{digest}`"));
        }
        Some(bytes)
    }

    fn signature_manifest_digest(&self, digest: &str) -> Result<Option<String>, OciError> {
        let hex = hex_of(digest);
        let full = self.signatures_path.join(hex);
        let file = match open_private_in(&self.signatures, Path::new(hex), &full) {
            Ok(file) => file,
            Err(e) if e.not_found() => return Ok(None),
            Err(e) => {
                tracing::warn!(file = %full.display(), "a cached signature name is not usable ({e}); pulling the signatures again");
                return Ok(None);
            }
        };
        let mut text = String::new();
        if file.take(128).read_to_string(&mut text).is_err() {
            return Ok(None);
        }
        let text = text.trim().to_owned();
        Ok(crate::config::is_sha256_digest(&text).then_some(text))
    }

    /// Keeps a verified artifact's blobs, the signature manifest's name last: a load that
    /// finds it finds the rest.
    fn keep(&self, parts: &Parts) -> Result<(), OciError> {
        self.put_blob(&parts.digest, &parts.manifest)?;
        self.put_blob(&parts.layer.digest, &parts.content)?;
        for (layer, payload) in &parts.payloads {
            self.put_blob(&layer.digest, payload)?;
        }
        self.put_blob(&parts.signature_digest, &parts.signature_manifest)?;
        let hex = hex_of(&parts.digest);
        replace_private_in(
            &self.signatures,
            hex,
            parts.signature_digest.as_bytes(),
            &self.signatures_path.join(hex),
        )?;
        Ok(())
    }

    /// The artifact of `kind` `reference` pins, read from the cache (each blob checked against
    /// its digest); `None` when something is not there (pull it).
    fn read(&self, reference: &OciReference, kind: ArtifactKind) -> Result<Option<Parts>, OciError> {
        let digest = pinned_digest(reference)?;
        let Some(manifest_bytes) = self.blob("the manifest", digest, MAX_MANIFEST_BYTES) else {
            return Ok(None);
        };
        let wrong = |reason| OciError::WrongArtifact {
            reference: reference.to_string(),
            digest: digest.to_owned(),
            expected: kind.describe(),
            reason,
        };
        let manifest = parse_manifest(&manifest_bytes).map_err(wrong)?;
        let layer = artifact_layer(&manifest, kind).map_err(wrong)?.clone();
        let Some(content) = self.blob("the layer", &layer.digest, layer.size) else {
            return Ok(None);
        };
        if content.len() as u64 != layer.size {
            return Ok(None);
        }
        let Some(signature_digest) = self.signature_manifest_digest(digest)? else {
            return Ok(None);
        };
        let Some(signature_manifest) =
            self.blob("the signature manifest", &signature_digest, MAX_MANIFEST_BYTES)
        else {
            return Ok(None);
        };
        let tag = signature_tag(digest);
        let mut payloads = Vec::new();
        // Only the payloads read up to the one that verified were kept: the others are not
        // there, and need not be.
        for layer in signature_layers(reference, digest, &tag, &signature_manifest)? {
            if let Some(payload) =
                self.blob("a signature payload", &layer.digest, MAX_PAYLOAD_BYTES)
            {
                payloads.push((layer, payload));
            }
        }
        Ok(Some(Parts {
            digest: digest.to_owned(),
            manifest: manifest_bytes,
            layer,
            content,
            signature_digest,
            signature_manifest,
            payloads,
        }))
    }
}

fn hex_of(digest: &str) -> &str {
    digest.strip_prefix("sha256:").unwrap_or(digest)
}

fn pinned_digest(reference: &OciReference) -> Result<&str, OciError> {
    reference.digest.as_deref().ok_or_else(|| OciError::Reference {
        reference: reference.to_string(),
        reason: format!(
            "names a tag, which the registry can move to other bytes: pin the digest that `toolward policy pull {reference}` prints"
        ),
    })
}

/// The name of the first key of `keys` that one of `payloads`' signatures verifies with, for
/// a payload naming `digest`.
fn verify_signatures(
    reference: &OciReference,
    digest: &str,
    payloads: &[(Descriptor, Vec<u8>)],
    keys: &TrustedKeys,
) -> Result<String, OciError> {
    let bad = |reason: String| OciError::BadSignature {
        reference: reference.to_string(),
        digest: digest.to_owned(),
        reason,
    };
    if keys.keys.is_empty() {
        return Err(bad("`oci.keys` names no key to verify with".to_owned()));
    }
    if payloads.is_empty() {
        return Err(bad(format!(
            "the signature manifest holds no `{SIMPLE_SIGNING_MEDIA_TYPE}` layer"
        )));
    }
    let mut reasons = Vec::new();
    for (index, (layer, payload)) in payloads.iter().enumerate() {
        match check_signature(index + 1, layer, payload, digest, keys) {
            Ok(name) => return Ok(name),
            Err(reason) => reasons.push(reason),
        }
    }
    let more = reasons.len().saturating_sub(MAX_REASONS_SHOWN);
    reasons.truncate(MAX_REASONS_SHOWN);
    let mut reason = reasons.join("; ");
    if more > 0 {
        reason.push_str(&format!("; and {more} more signatures not accepted"));
    }
    Err(bad(reason))
}

/// The name of the key of `keys` signature `n` (`layer`, over `payload`) verifies with, when
/// its payload names `digest`; else why not.
fn check_signature(
    n: usize,
    layer: &Descriptor,
    payload: &[u8],
    digest: &str,
    keys: &TrustedKeys,
) -> Result<String, String> {
    let Some(encoded) = layer.annotations.get(SIGNATURE_ANNOTATION) else {
        return Err(format!("signature {n} has no `{SIGNATURE_ANNOTATION}` annotation"));
    };
    let Ok(der) = BASE64.decode(encoded.trim()) else {
        return Err(format!("signature {n} is not base64"));
    };
    let Ok(signature) = Signature::from_der(&der) else {
        return Err(format!("signature {n} is not an ECDSA signature in ASN.1 DER"));
    };
    let Some((name, _)) = keys
        .keys
        .iter()
        .find(|(_, key)| key.verify(payload, &signature).is_ok())
    else {
        return Err(format!(
            "signature {n} verifies with no key of `oci.keys` ({})",
            keys.names()
        ));
    };
    // Only a verified payload is read: what it says is the signer's claim.
    match serde_json::from_slice::<Payload>(payload) {
        Ok(p) if p.critical.kind == COSIGN_SIGNATURE_TYPE && p.critical.image.digest == digest => {
            Ok(name.clone())
        }
        Ok(p) if p.critical.kind != COSIGN_SIGNATURE_TYPE => Err(format!(
            "signature {n} (key `{}`) is of type `{}`, not `{COSIGN_SIGNATURE_TYPE}`",
            crate::text::escape(name),
            crate::text::escape(&p.critical.kind)
        )),
        Ok(p) => Err(format!(
            "signature {n} (key `{}`) is for `{}`, another digest",
            crate::text::escape(name),
            crate::text::escape(&p.critical.image.digest)
        )),
        Err(e) => Err(format!(
            "signature {n} (key `{}`) signs a payload that is not cosign's ({e})",
            crate::text::escape(name)
        )),
    }
}

// ---------------------------------------------------------------------------------------------
// The registry.

/// Whether `registry` (`host[:port]`) is this machine: the only registries reached over plain
/// HTTP.
#[must_use]
pub fn is_loopback(registry: &str) -> bool {
    let host = match registry.rsplit_once(':') {
        Some((host, port)) if !port.contains(']') => host,
        _ => registry,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// A client of one registry, with its credentials: oci-client for authentication, blobs and
/// pushes; toolward's own bounded request for manifests (see the module documentation).
pub struct RegistryClient {
    client: Client,
    http: reqwest::Client,
    scheme: &'static str,
    auth: RegistryAuth,
    registry: String,
    /// What requests to each repository carry (see [`transport::Authorization`]).
    tokens: transport::Tokens,
}

impl std::fmt::Debug for RegistryClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryClient").finish_non_exhaustive()
    }
}

impl RegistryClient {
    /// A client of `registry`: HTTPS (rustls, the bundled Mozilla roots), plain HTTP only to a
    /// loopback registry; image indexes are never resolved to a platform's manifest; a
    /// manifest request follows no redirect; credentials from [`credentials`].
    ///
    /// # Errors
    /// [`OciError::Credentials`], and [`OciError::Registry`] when no HTTP client can be built.
    pub fn new(registry: &str) -> Result<Self, OciError> {
        let loopback = is_loopback(registry);
        let protocol = if loopback {
            ClientProtocol::HttpsExcept(vec![registry.to_owned()])
        } else {
            ClientProtocol::Https
        };
        let config = ClientConfig {
            protocol,
            platform_resolver: None,
            read_timeout: Some(REGISTRY_TIMEOUT),
            connect_timeout: Some(REGISTRY_TIMEOUT),
            ..ClientConfig::default()
        };
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .https_only(!loopback)
            .read_timeout(REGISTRY_TIMEOUT)
            .connect_timeout(REGISTRY_TIMEOUT)
            .build()
            .map_err(|e| OciError::Registry {
                reference: registry.to_owned(),
                source: Box::new(e),
            })?;
        Ok(Self {
            client: Client::new(config),
            http,
            scheme: if loopback { "http" } else { "https" },
            auth: credentials(registry)?,
            registry: registry.to_owned(),
            tokens: transport::Tokens::default(),
        })
    }

    fn registry_error(reference: &OciReference, source: OciDistributionError) -> OciError {
        OciError::Registry {
            reference: reference.to_string(),
            source: Box::new(source),
        }
    }

    fn failed(reference: &OciReference, reason: String) -> OciError {
        OciError::Registry {
            reference: reference.to_string(),
            source: reason.into(),
        }
    }

    /// Resolves `reference` (a tag, or a digest checked) to its manifest digest and the kind
    /// of artifact it holds.
    ///
    /// # Errors
    /// [`OciError::Reference`] when nothing is there, [`OciError::WrongArtifact`] when it is
    /// none of toolward's kinds, and registry errors.
    pub async fn resolve(
        &self,
        reference: &OciReference,
    ) -> Result<(String, ArtifactKind), OciError> {
        let Some((bytes, digest)) = self.manifest(reference).await? else {
            return Err(OciError::Reference {
                reference: reference.to_string(),
                reason: "the registry has no manifest there".to_owned(),
            });
        };
        let kind = parse_manifest(&bytes).and_then(|manifest| {
            let kind = kind_of(&manifest)?;
            artifact_layer(&manifest, kind)?;
            Ok(kind)
        });
        let kind = kind.map_err(|reason| OciError::WrongArtifact {
            reference: reference.to_string(),
            digest: digest.clone(),
            expected: "a component, policy settings or Cedar policies artifact",
            reason,
        })?;
        Ok((digest, kind))
    }

    /// Pulls the artifact of `kind` the pinned `reference` names: its manifest, its layer,
    /// its signature manifest and payloads, each read once and checked against its digest.
    ///
    /// # Errors
    /// [`OciError::Unsigned`] when no signature tag exists, [`OciError::WrongArtifact`],
    /// [`OciError::DigestMismatch`], [`OciError::TooLarge`] and registry errors.
    /// Signature payloads are read in order up to the first that verifies with `keys`.
    async fn pull(
        &self,
        reference: &OciReference,
        kind: ArtifactKind,
        keys: &TrustedKeys,
    ) -> Result<Parts, OciError> {
        let digest = pinned_digest(reference)?.to_owned();
        let Some((manifest_bytes, _)) = self.manifest(reference).await? else {
            return Err(OciError::Reference {
                reference: reference.to_string(),
                reason: "the registry has no manifest with this digest".to_owned(),
            });
        };
        let wrong = |reason| OciError::WrongArtifact {
            reference: reference.to_string(),
            digest: digest.clone(),
            expected: kind.describe(),
            reason,
        };
        let manifest = parse_manifest(&manifest_bytes).map_err(wrong)?;
        let layer = artifact_layer(&manifest, kind).map_err(wrong)?.clone();
        let content = self
            .blob(reference, "the layer", &layer, kind.max_bytes())
            .await?;
        let tag = signature_tag(&digest);
        let sig_reference = OciReference {
            tag: Some(tag.clone()),
            digest: None,
            ..reference.clone()
        };
        let Some((signature_manifest, signature_digest)) = self.manifest(&sig_reference).await?
        else {
            return Err(OciError::Unsigned {
                reference: reference.to_string(),
                digest,
                tag,
            });
        };
        let mut payloads = Vec::new();
        for (index, layer) in signature_layers(reference, &digest, &tag, &signature_manifest)?
            .into_iter()
            .enumerate()
        {
            let payload = self
                .blob(reference, "a signature payload", &layer, MAX_PAYLOAD_BYTES)
                .await?;
            let verified = check_signature(index + 1, &layer, &payload, &digest, keys).is_ok();
            payloads.push((layer, payload));
            if verified {
                break;
            }
        }
        Ok(Parts {
            digest,
            manifest: manifest_bytes,
            layer,
            content,
            signature_digest,
            signature_manifest,
            payloads,
        })
    }

    /// [`Self::pull`], refused once it takes longer than [`PULL_DEADLINE`].
    async fn pull_within_deadline(
        &self,
        reference: &OciReference,
        kind: ArtifactKind,
        keys: &TrustedKeys,
    ) -> Result<Parts, OciError> {
        tokio::time::timeout(PULL_DEADLINE, self.pull(reference, kind, keys))
            .await
            .unwrap_or_else(|_| {
                Err(Self::failed(
                    reference,
                    format!(
                        "the pull took longer than {} s: a registry this slow is not waited for",
                        PULL_DEADLINE.as_secs()
                    ),
                ))
            })
    }

    async fn push_blob(&self, reference: &OciReference, bytes: &[u8]) -> Result<String, OciError> {
        let digest = sha256_digest(bytes);
        let target = to_client_reference(reference);
        self.authorize_push(reference).await?;
        self.client
            .push_blob(&target, bytes, &digest)
            .await
            .map_err(|e| Self::registry_error(reference, e))?;
        Ok(digest)
    }

    async fn push_manifest(
        &self,
        reference: &OciReference,
        bytes: Vec<u8>,
    ) -> Result<(), OciError> {
        let target = to_client_reference(reference);
        self.authorize_push(reference).await?;
        self.client
            .push_manifest_raw(
                &target,
                bytes,
                http::HeaderValue::from_static(OCI_MANIFEST_MEDIA_TYPE),
            )
            .await
            .map_err(|e| Self::registry_error(reference, e))?;
        Ok(())
    }

    /// Publishes `bytes` at `reference` (its tag, or by digest alone) as an artifact of `kind`
    /// (see the module documentation); the manifest digest. The same bytes always give the
    /// same digest (no time in the config or the manifest).
    ///
    /// # Errors
    /// [`OciError::WrongArtifact`] when `bytes` are not a component (for a component) or not
    /// UTF-8 text (for settings or Cedar policies); [`OciError::TooLarge`]; registry errors.
    pub async fn push(
        &self,
        reference: &OciReference,
        kind: ArtifactKind,
        bytes: &[u8],
    ) -> Result<String, OciError> {
        let wrong = |reason: &str| OciError::WrongArtifact {
            reference: reference.to_string(),
            digest: sha256_digest(bytes),
            expected: kind.describe(),
            reason: reason.to_owned(),
        };
        if bytes.len() as u64 > kind.max_bytes() {
            return Err(OciError::TooLarge {
                reference: reference.to_string(),
                what: "the file",
                bytes: bytes.len() as u64,
                limit: kind.max_bytes(),
            });
        }
        let config = match kind {
            ArtifactKind::Component => {
                if !is_component(bytes) {
                    return Err(wrong(
                        "the file is not a WebAssembly component (no component preamble)",
                    ));
                }
                serde_json::json!({
                    "architecture": "wasm",
                    "os": "wasip2",
                    "layerDigests": [sha256_digest(bytes)],
                })
                .to_string()
                .into_bytes()
            }
            ArtifactKind::PolicySettings | ArtifactKind::CedarPolicies => {
                if std::str::from_utf8(bytes).is_err() {
                    return Err(wrong("the file is not UTF-8 text"));
                }
                if is_component(bytes) {
                    return Err(wrong("the file is a WebAssembly component"));
                }
                EMPTY_CONFIG.to_vec()
            }
        };
        let layer_digest = self.push_blob(reference, bytes).await?;
        let config_digest = self.push_blob(reference, &config).await?;
        let artifact_type = match kind {
            ArtifactKind::Component => WASM_CONFIG_MEDIA_TYPE,
            ArtifactKind::PolicySettings | ArtifactKind::CedarPolicies => kind.layer_media_type(),
        };
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST_MEDIA_TYPE,
            "artifactType": artifact_type,
            "config": {
                "mediaType": kind.config_media_type(),
                "digest": config_digest,
                "size": config.len(),
            },
            "layers": [{
                "mediaType": kind.layer_media_type(),
                "digest": layer_digest,
                "size": bytes.len(),
            }],
        });
        let manifest = manifest.to_string().into_bytes();
        let digest = sha256_digest(&manifest);
        let target = match &reference.tag {
            Some(_) => OciReference {
                digest: None,
                ..reference.clone()
            },
            None => reference.pinned(&digest),
        };
        self.push_manifest(&target, manifest).await?;
        Ok(digest)
    }

    /// Signs the artifact `reference` pins with `key`, cosign's way: a simple-signing payload
    /// layer with its signature annotated, added to the manifest at `sha256-<hex>.sig` (the
    /// signatures already there are kept). The signature tag and the kind of artifact signed.
    ///
    /// # Errors
    /// [`OciError::Reference`] for a reference without a digest or with nothing there;
    /// [`OciError::WrongArtifact`]; registry errors.
    pub async fn sign(
        &self,
        reference: &OciReference,
        key: &SigningKey,
    ) -> Result<(String, ArtifactKind), OciError> {
        let digest = pinned_digest(reference)?.to_owned();
        let (_, kind) = self.resolve(reference).await?;
        let payload = signature_payload(reference, &digest);
        let signature: Signature = key.sign(payload.as_bytes());
        let annotation = BASE64.encode(signature.to_der().as_bytes());
        let tag = signature_tag(&digest);
        let sig_reference = OciReference {
            tag: Some(tag.clone()),
            digest: None,
            ..reference.clone()
        };
        let mut layers: Vec<serde_json::Value> = Vec::new();
        if let Some((bytes, _)) = self.manifest(&sig_reference).await?
            && let Ok(serde_json::Value::Object(existing)) =
                serde_json::from_slice::<serde_json::Value>(&bytes)
            && let Some(serde_json::Value::Array(existing)) = existing.get("layers")
        {
            layers.extend(existing.iter().take(MAX_SIGNATURES - 1).cloned());
        }
        let payload_digest = self.push_blob(reference, payload.as_bytes()).await?;
        layers.retain(|layer| {
            layer.get("annotations").and_then(|a| a.get(SIGNATURE_ANNOTATION))
                != Some(&serde_json::Value::String(annotation.clone()))
        });
        layers.push(serde_json::json!({
            "mediaType": SIMPLE_SIGNING_MEDIA_TYPE,
            "digest": payload_digest,
            "size": payload.len(),
            "annotations": {SIGNATURE_ANNOTATION: annotation},
        }));
        let diff_ids: Vec<_> = layers.iter().filter_map(|l| l.get("digest").cloned()).collect();
        let config = serde_json::json!({
            "architecture": "",
            "config": {},
            "created": "0001-01-01T00:00:00Z",
            "history": [{"created": "0001-01-01T00:00:00Z"}],
            "os": "",
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
        })
        .to_string();
        let config_digest = self.push_blob(reference, config.as_bytes()).await?;
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST_MEDIA_TYPE,
            "config": {
                "mediaType": OCI_CONFIG_MEDIA_TYPE,
                "digest": config_digest,
                "size": config.len(),
            },
            "layers": layers,
        })
        .to_string()
        .into_bytes();
        self.push_manifest(&sig_reference, manifest).await?;
        Ok((tag, kind))
    }
}

/// Whether `bytes` start with the WebAssembly component preamble (magic, version 0x0d, layer 1).
#[must_use]
pub fn is_component(bytes: &[u8]) -> bool {
    const COMPONENT_PREAMBLE: [u8; 8] = [0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00];
    bytes.starts_with(&COMPONENT_PREAMBLE)
}

fn to_client_reference(reference: &OciReference) -> Reference {
    match (&reference.digest, &reference.tag) {
        (Some(digest), _) => Reference::with_digest(
            reference.registry.clone(),
            reference.repository.clone(),
            digest.clone(),
        ),
        (None, Some(tag)) => Reference::with_tag(
            reference.registry.clone(),
            reference.repository.clone(),
            tag.clone(),
        ),
        (None, None) => Reference::with_tag(
            reference.registry.clone(),
            reference.repository.clone(),
            "latest".to_owned(),
        ),
    }
}

/// The credentials for `registry`: `TOOLWARD_REGISTRY_USERNAME` and `_PASSWORD` when both are
/// set and `TOOLWARD_REGISTRY_HOST` names `registry`, else the static `auths` entry of the Docker config file (`$DOCKER_CONFIG/config.json`,
/// else `~/.docker/config.json`), else none. Credential helpers (`credsStore`, `credHelpers`)
/// are never run: a helper is a program the config file names.
///
/// # Errors
/// [`OciError::Credentials`] for one variable without the other, the two without
/// `TOOLWARD_REGISTRY_HOST` (or it without them), or an entry that cannot be decoded.
pub fn credentials(registry: &str) -> Result<RegistryAuth, OciError> {
    let from_environment =
        environment_credentials(registry, |name| std::env::var(name).ok())?;
    match from_environment {
        Some(auth) => Ok(auth),
        None => docker_credentials(registry),
    }
}

/// The credentials of [`USERNAME_VAR`] and [`PASSWORD_VAR`] (read by `var`) when
/// [`REGISTRY_VAR`] names `registry`; `None` when none are set or they are for another
/// registry.
fn environment_credentials(
    registry: &str,
    var: impl Fn(&str) -> Option<String>,
) -> Result<Option<RegistryAuth>, OciError> {
    let fail = |reason: String| OciError::Credentials {
        registry: registry.to_owned(),
        reason,
    };
    match (var(USERNAME_VAR), var(PASSWORD_VAR), var(REGISTRY_VAR)) {
        (Some(user), Some(password), Some(host)) => {
            let host = host.trim();
            let host = host
                .strip_prefix("https://")
                .or_else(|| host.strip_prefix("http://"))
                .unwrap_or(host)
                .trim_end_matches('/');
            Ok(host
                .eq_ignore_ascii_case(registry)
                .then_some(RegistryAuth::Basic(user, password)))
        }
        (Some(_), Some(_), None) => Err(fail(format!(
            "`{USERNAME_VAR}` and `{PASSWORD_VAR}` are set without `{REGISTRY_VAR}`: set it to the one registry they are for (`host[:port]`, as in the reference), so they are sent to no other"
        ))),
        (Some(_), None, _) | (None, Some(_), _) => Err(fail(format!(
            "set both `{USERNAME_VAR}` and `{PASSWORD_VAR}`, or neither"
        ))),
        (None, None, Some(_)) => Err(fail(format!(
            "`{REGISTRY_VAR}` is set without `{USERNAME_VAR}` and `{PASSWORD_VAR}`"
        ))),
        (None, None, None) => Ok(None),
    }
}

/// The static `auths` entry of the Docker config file for `registry` (see [`credentials`]).
fn docker_credentials(registry: &str) -> Result<RegistryAuth, OciError> {
    let fail = |reason: String| OciError::Credentials {
        registry: registry.to_owned(),
        reason,
    };
    let file = match std::env::var_os("DOCKER_CONFIG") {
        Some(dir) => PathBuf::from(dir).join("config.json"),
        None => match std::env::var_os("HOME") {
            Some(home) => PathBuf::from(home).join(".docker").join("config.json"),
            None => return Ok(RegistryAuth::Anonymous),
        },
    };
    let bytes = match operator_file::read(&file, "Docker config", MAX_DOCKER_CONFIG_BYTES) {
        Ok(bytes) => bytes,
        Err(operator_file::OperatorFileError::Io { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            return Ok(RegistryAuth::Anonymous);
        }
        Err(e) => return Err(fail(e.to_string())),
    };
    let config: serde_json::Value = serde_json::from_slice(&bytes)
        .map_err(|e| fail(format!("`{}` is not JSON: {e}", file.display())))?;
    let Some(auths) = config.get("auths").and_then(serde_json::Value::as_object) else {
        return Ok(RegistryAuth::Anonymous);
    };
    let entry = auths.iter().find_map(|(key, entry)| {
        let host = key
            .trim_start_matches("https://")
            .trim_start_matches("http://");
        let host = host.split('/').next().unwrap_or(host);
        (host == registry).then_some(entry)
    });
    let Some(entry) = entry else {
        return Ok(RegistryAuth::Anonymous);
    };
    if let Some(encoded) = entry.get("auth").and_then(serde_json::Value::as_str)
        && !encoded.is_empty()
    {
        let decoded = BASE64
            .decode(encoded.trim())
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .ok_or_else(|| fail(format!("the `auth` of `{}` is not base64 of `user:password`", file.display())))?;
        let Some((user, password)) = decoded.split_once(':') else {
            return Err(fail(format!(
                "the `auth` of `{}` is not `user:password`",
                file.display()
            )));
        };
        return Ok(RegistryAuth::Basic(user.to_owned(), password.to_owned()));
    }
    match (
        entry.get("username").and_then(serde_json::Value::as_str),
        entry.get("password").and_then(serde_json::Value::as_str),
    ) {
        (Some(user), Some(password)) => Ok(RegistryAuth::Basic(user.to_owned(), password.to_owned())),
        _ => Ok(RegistryAuth::Anonymous),
    }
}

/// The `realm` and `service` of a `Bearer` challenge
/// (`WWW-Authenticate: Bearer realm="…",service="…"`), when `challenge` is one.
fn bearer_challenge(challenge: &str) -> Option<(String, Option<String>)> {
    let (scheme, params) = challenge.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let param = |name: &str| {
        let at = params.to_ascii_lowercase().find(&format!("{name}="))?;
        let rest = &params[at + name.len() + 1..];
        let value = match rest.strip_prefix('"') {
            Some(quoted) => quoted.split('"').next()?,
            None => rest.split(',').next()?.trim(),
        };
        Some(value.to_owned())
    };
    Some((param("realm")?, param("service")))
}

/// The artifact of `kind` `reference` pins, verified: from the cache in `state`, else pulled
/// from the registry, verified and then kept. Synchronous, for the load: the pull runs on a
/// thread of its own with a runtime of its own, so it may be called from inside an async
/// runtime.
///
/// # Errors
/// Every [`OciError`]: each names the reference, and the digest where the bytes or the
/// signature are at fault.
pub fn fetch_verified(
    reference: &OciReference,
    kind: ArtifactKind,
    state: &StateDir,
    keys: &TrustedKeys,
) -> Result<Verified, OciError> {
    let cache = OciCache::open(state)?;
    let Some(parts) = cache.read(reference, kind)? else {
        return pull_blocking(reference, kind, keys)?.verify(reference, keys, Some(&cache));
    };
    match parts.verify(reference, keys, None) {
        // The signatures kept may predate a key rotation (signed with the new key since, the
        // old one then taken out of `oci.keys`): the registry's are read again. When the
        // registry cannot be reached, the refusal is the cache's.
        Err(cached @ OciError::BadSignature { .. }) => {
            match pull_blocking(reference, kind, keys) {
                Ok(parts) => parts.verify(reference, keys, Some(&cache)),
                Err(OciError::Registry { .. } | OciError::Runtime { .. }) => Err(cached),
                Err(other) => Err(other),
            }
        }
        verified => verified,
    }
}

/// Pulls on a thread of its own (see [`fetch_verified`]).
fn pull_blocking(
    reference: &OciReference,
    kind: ArtifactKind,
    keys: &TrustedKeys,
) -> Result<Parts, OciError> {
    let runtime_error = |reason: String| OciError::Runtime {
        reference: reference.to_string(),
        reason,
    };
    std::thread::scope(|scope| {
        let pulled = scope.spawn(|| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| runtime_error(e.to_string()))?;
            runtime.block_on(async {
                let client = RegistryClient::new(&reference.registry)?;
                client.pull_within_deadline(reference, kind, keys).await
            })
        });
        pulled
            .join()
            .unwrap_or_else(|_| Err(runtime_error("the pull's thread panicked".to_owned())))
    })
}

/// Pulls the artifact of `kind` `reference` pins from the registry, verifies it with `keys`
/// and keeps it in `state`'s cache (`toolward policy pull --config`): the signer's name.
///
/// # Errors
/// As [`fetch_verified`].
pub async fn pull_verified(
    reference: &OciReference,
    kind: ArtifactKind,
    state: &StateDir,
    keys: &TrustedKeys,
) -> Result<String, OciError> {
    let cache = OciCache::open(state)?;
    let client = RegistryClient::new(&reference.registry)?;
    let parts = client.pull_within_deadline(reference, kind, keys).await?;
    Ok(parts.verify(reference, keys, Some(&cache))?.signer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bearer_challenges_realm_is_read_quoted_or_not() {
        assert_eq!(
            bearer_challenge(r#"Bearer realm="https://auth.example/token",service="r""#),
            Some(("https://auth.example/token".to_owned(), Some("r".to_owned())))
        );
        assert_eq!(
            bearer_challenge("bearer Realm=http://192.0.2.2/t"),
            Some(("http://192.0.2.2/t".to_owned(), None))
        );
        assert_eq!(bearer_challenge(r#"Basic realm="registry""#), None);
    }

    #[test]
    fn signature_payload_is_cosigns_byte_for_byte() {
        let reference = OciReference::parse("oci://127.0.0.1:5000/p/deny").unwrap();
        let digest = format!("sha256:{}", "ab".repeat(32));
        assert_eq!(
            signature_payload(&reference, &digest),
            format!(
                r#"{{"critical":{{"identity":{{"docker-reference":"127.0.0.1:5000/p/deny"}},"image":{{"docker-manifest-digest":"{digest}"}},"type":"cosign container image signature"}},"optional":null}}"#
            )
        );
        assert_eq!(signature_tag(&digest), format!("sha256-{}.sig", "ab".repeat(32)));
    }

    #[test]
    fn only_loopback_registries_are_plain_http() {
        for host in ["127.0.0.1:5000", "localhost:5000", "[::1]:5000", "127.8.0.1", "localhost"] {
            assert!(is_loopback(host), "{host}");
        }
        for host in ["ghcr.io", "10.0.0.1:5000", "localhost.example:5000", "[2001:db8::1]:5000"] {
            assert!(!is_loopback(host), "{host}");
        }
    }

    #[test]
    fn a_manifest_list_or_index_is_not_a_component() {
        let index = br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}"#;
        assert!(parse_manifest(index).is_err());
        let list = br#"{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.list.v2+json","manifests":[]}"#;
        assert!(parse_manifest(list).is_err());
    }

    /// A registry on loopback that answers `/v2/` (no authentication) and any other request
    /// with what `answer` writes: its address.
    fn hostile_registry(
        answer: fn(&mut std::net::TcpStream) -> std::io::Result<()>,
    ) -> String {
        use std::io::Write as _;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                std::thread::spawn(move || {
                    let Some(head) = read_head(&mut stream) else {
                        return;
                    };
                    if head.starts_with(b"GET /v2/ ") {
                        let _ = stream.write_all(
                            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
                        );
                    } else {
                        let _ = answer(&mut stream);
                    }
                });
            }
        });
        address
    }

    /// A request's head, read a byte at a time up to its blank line; `None` when the
    /// connection ends first.
    pub(super) fn read_head(stream: &mut std::net::TcpStream) -> Option<Vec<u8>> {
        use std::io::Read as _;
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            if stream.read(&mut byte).unwrap_or(0) == 0 {
                return None;
            }
            head.push(byte[0]);
        }
        Some(head)
    }

    pub(super) fn pull_manifest(reference: &str) -> Result<Option<(Vec<u8>, String)>, OciError> {
        pull_manifest_as(reference, None)
    }

    /// The manifest at `reference`, asked for with `auth` instead of the environment's
    /// credentials when given.
    fn pull_manifest_as(
        reference: &str,
        auth: Option<RegistryAuth>,
    ) -> Result<Option<(Vec<u8>, String)>, OciError> {
        let reference = OciReference::parse(reference).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let mut client = RegistryClient::new(&reference.registry).unwrap();
            if let Some(auth) = auth {
                client.auth = auth;
            }
            client.manifest(&reference).await
        })
    }

    #[test]
    fn credentials_are_not_sent_to_a_plain_http_token_endpoint_the_registry_names() {
        use std::io::Write as _;
        // `/v2/` names a token endpoint on plain http at another address; any request that
        // carries credentials is remembered.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let registry = listener.local_addr().unwrap().to_string();
        let (saw, seen) = std::sync::mpsc::channel::<bool>();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let head = read_head(&mut stream).unwrap_or_default();
                let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
                let _ = saw.send(text.contains("authorization:"));
                let _ = stream.write_all(
                    b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer realm=\"http://192.0.2.2/token\",service=\"r\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                );
            }
        });
        let refused = pull_manifest_as(
            &format!("{registry}/p/c@sha256:{}", "ab".repeat(32)),
            Some(RegistryAuth::Basic(String::from("u"), String::from("secret"))),
        );
        let Err(OciError::Credentials { reason, .. }) = refused else {
            panic!("{refused:?}");
        };
        assert!(reason.contains("http://192.0.2.2/token"), "{reason}");
        assert!(!seen.try_iter().any(|authorized| authorized));
    }

    #[test]
    fn a_manifest_announced_over_the_limit_is_refused_before_its_body() {
        // 10 MiB announced, and no byte of it sent: reading the body would wait for the
        // timeout; the refusal comes from the head alone.
        let registry = hostile_registry(|stream| {
            use std::io::Write as _;
            stream.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 10485760\r\nConnection: close\r\n\r\n",
            )?;
            std::thread::sleep(Duration::from_secs(60));
            Ok(())
        });
        let started = std::time::Instant::now();
        let refused = pull_manifest(&format!("{registry}/p/big@sha256:{}", "ab".repeat(32)));
        assert!(
            matches!(
                refused,
                Err(OciError::TooLarge { bytes: 10_485_760, limit: MAX_MANIFEST_BYTES, .. })
            ),
            "{refused:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(20));
    }

    #[test]
    fn a_manifest_without_a_length_is_read_no_further_than_the_limit() {
        // Chunked, 16 MiB: the read stops past 64 KiB, within one read of the client (which
        // may join chunks) of it.
        let registry = hostile_registry(|stream| {
            use std::io::Write as _;
            stream.write_all(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
            )?;
            let chunk = vec![b' '; 4096];
            for _ in 0..4096 {
                stream.write_all(format!("{:x}\r\n", chunk.len()).as_bytes())?;
                stream.write_all(&chunk)?;
                stream.write_all(b"\r\n")?;
            }
            stream.write_all(b"0\r\n\r\n")
        });
        let refused = pull_manifest(&format!("{registry}/p/big:v1"));
        let Err(OciError::TooLarge { bytes, limit, .. }) = refused else {
            panic!("{refused:?}");
        };
        assert_eq!(limit, MAX_MANIFEST_BYTES);
        assert!(
            bytes > MAX_MANIFEST_BYTES && bytes < MAX_MANIFEST_BYTES + 512 * 1024,
            "{bytes}"
        );
    }

    fn manifest_with(config: &str, layer: &str) -> Manifest {
        let digest = format!("sha256:{}", "ab".repeat(32));
        let text = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST_MEDIA_TYPE,
            "config": {"mediaType": config, "digest": digest, "size": 2},
            "layers": [{"mediaType": layer, "digest": digest, "size": 10}],
        })
        .to_string();
        parse_manifest(text.as_bytes()).unwrap()
    }

    #[test]
    fn an_artifact_is_read_only_as_the_kind_its_field_names() {
        for kind in ArtifactKind::ALL {
            let manifest = manifest_with(kind.config_media_type(), kind.layer_media_type());
            assert_eq!(kind_of(&manifest).unwrap(), kind);
            for other in ArtifactKind::ALL {
                let read = artifact_layer(&manifest, other);
                assert_eq!(read.is_ok(), other == kind, "{kind} read as {other}: {read:?}");
                if other != kind {
                    // The refusal says what the artifact is.
                    assert!(read.unwrap_err().contains(kind.describe()));
                }
            }
        }
        // Settings published with an image config (an older ORAS habit) are not settings.
        let manifest = manifest_with(OCI_CONFIG_MEDIA_TYPE, SETTINGS_MEDIA_TYPE);
        let refused = artifact_layer(&manifest, ArtifactKind::PolicySettings).unwrap_err();
        assert!(refused.contains(EMPTY_CONFIG_MEDIA_TYPE), "{refused}");
    }

    #[test]
    fn a_fifo_or_a_larger_file_in_the_cache_is_treated_as_absent_without_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::open(&dir.path().join("state")).unwrap();
        let cache = OciCache::open(&state).unwrap();
        let bytes = b"the layer";
        let digest = sha256_digest(bytes);
        let file = cache.blobs_path.join(hex_of(&digest));
        // A FIFO with no writer: opening it to read would wait for one.
        let made = std::process::Command::new("mkfifo")
            .args(["-m", "600"])
            .arg(&file)
            .status()
            .unwrap();
        assert!(made.success());
        let (done, finished) = std::sync::mpsc::channel();
        let blobs = cache.blobs.try_clone().unwrap();
        let blobs_path = cache.blobs_path.clone();
        let fifo_digest = digest.clone();
        std::thread::spawn(move || {
            let cache = OciCache {
                signatures: blobs.try_clone().unwrap(),
                signatures_path: blobs_path.clone(),
                blobs,
                blobs_path,
            };
            let _ = done.send(cache.blob("the layer", &fifo_digest, 9));
        });
        let read = finished
            .recv_timeout(Duration::from_secs(10))
            .expect("reading a FIFO in the cache waited");
        assert_eq!(read, None);
        // The right bytes and one more: absent (pulled again), not refused.
        std::fs::remove_file(&file).unwrap();
        cache.put_blob(&digest, b"the layer!").unwrap();
        assert_eq!(cache.blob("the layer", &digest, 9), None);
        // Once replaced by what the pull verified, read again.
        cache.put_blob(&digest, bytes).unwrap();
        assert_eq!(cache.blob("the layer", &digest, 9).as_deref(), Some(&bytes[..]));
    }

    #[test]
    fn the_environments_credentials_are_used_only_for_the_registry_they_name() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                vars.iter()
                    .find(|(var, _)| *var == name)
                    .map(|(_, value)| (*value).to_owned())
            }
        };
        let all = &[
            (USERNAME_VAR, "u"),
            (PASSWORD_VAR, "p"),
            (REGISTRY_VAR, "ghcr.io"),
        ];
        assert!(matches!(
            environment_credentials("ghcr.io", env(all)),
            Ok(Some(RegistryAuth::Basic(user, password))) if user == "u" && password == "p"
        ));
        assert!(matches!(
            environment_credentials("evil.example", env(all)),
            Ok(None)
        ));
        let Err(refused) = environment_credentials(
            "ghcr.io",
            env(&[(USERNAME_VAR, "u"), (PASSWORD_VAR, "p")]),
        ) else {
            panic!("credentials without the registry they are for were used");
        };
        assert!(refused.to_string().contains(REGISTRY_VAR), "{refused}");
        assert!(environment_credentials("ghcr.io", env(&[(USERNAME_VAR, "u")])).is_err());
        assert!(environment_credentials("ghcr.io", env(&[(REGISTRY_VAR, "ghcr.io")])).is_err());
        assert!(matches!(environment_credentials("ghcr.io", env(&[])), Ok(None)));
    }
}
