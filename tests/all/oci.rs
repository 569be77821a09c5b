//! Components from a real OCI registry (issue 33.1, 33.2, 33.4): Debian's `docker-registry`
//! (the CNCF distribution registry) that `scripts/registry.sh` starts on loopback
//! (`TOOLWARD_TEST_REGISTRY`; without it these tests fail when `CI` is set and are skipped
//! with a printed reason elsewhere), driven through the `toolward` binary: `policy keygen`,
//! `push`, `sign`, `pull`, then `pin` and `call` with `policy.component` an `oci://`
//! reference. Each test pushes a component of its own (the built-in policy with a custom
//! section naming the test), so its blobs are its own in the registry's shared blob store.
//!
//! The hostile registry is played by altering its storage on disk
//! (`TOOLWARD_TEST_REGISTRY_DIR`): the registry then serves other bytes for a digest.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

use crate::support::{FAKE_SERVER, audit_records, toolward_binary};

/// The registry the tests use (`host:port`), or why they do not run: `None` (skip, reason
/// printed) outside CI, a failure in CI.
fn test_registry(test: &str) -> Option<String> {
    match std::env::var("TOOLWARD_TEST_REGISTRY") {
        Ok(registry) if !registry.is_empty() => Some(registry),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "{test}: TOOLWARD_TEST_REGISTRY is not set, and CI must run the OCI registry tests: start one with `eval \"$(bash scripts/registry.sh start)\"`"
            );
            eprintln!(
                "{test}: skipped: TOOLWARD_TEST_REGISTRY is not set (start a test registry with `eval \"$(bash scripts/registry.sh start)\"`)"
            );
            None
        }
    }
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// The built-in policy component with a custom section naming `test` appended: the same
/// decisions, bytes (and so digests) of its own.
fn component_for(test: &str) -> Vec<u8> {
    let mut wasm = std::fs::read(toolward::guests::DEFAULT_POLICY_WASM).unwrap();
    let name = b"toolward-test";
    let mut content = Vec::new();
    content.push(u8::try_from(name.len()).unwrap());
    content.extend_from_slice(name);
    let nonce = format!(
        "{test}-{}-{:?}",
        std::process::id(),
        std::time::SystemTime::now()
    );
    content.extend_from_slice(nonce.as_bytes());
    assert!(content.len() < 128, "one-byte LEB128 section size");
    wasm.push(0);
    wasm.push(u8::try_from(content.len()).unwrap());
    wasm.extend_from_slice(&content);
    wasm
}

/// A folder with the component, a signing key and a config in front of the fake server.
struct Setup {
    dir: tempfile::TempDir,
    bin: &'static Path,
    registry: String,
    repository: String,
    wasm: Vec<u8>,
}

impl Setup {
    fn new(test: &str) -> Option<Setup> {
        let registry = test_registry(test)?;
        let bin = toolward_binary()?;
        let dir = tempfile::tempdir().unwrap();
        let wasm = component_for(test);
        std::fs::write(dir.path().join("policy.wasm"), &wasm).unwrap();
        std::fs::write(
            dir.path().join("s.json"),
            json!({"pages": [r#"{"tools": [{"name": "echo", "description": "Echoes.", "inputSchema": {"type": "object"}}, {"name": "wipe", "description": "Wipes.", "inputSchema": {"type": "object"}}]}"#]})
                .to_string(),
        )
        .unwrap();
        std::fs::write(
            dir.path().join("rules.json"),
            r#"{"servers": {"s": {"tools": {"echo": {"effect": "read-only"}, "wipe": {"effect": "destructive"}}}}}"#,
        )
        .unwrap();
        let setup = Setup {
            dir,
            bin,
            repository: format!("toolward-test/{}", test.replace('_', "-")),
            registry,
            wasm,
        };
        for key in ["release", "other"] {
            let keygen = setup.run(&["policy", "keygen", "--out", &format!("{key}.pem")]);
            assert!(keygen.status.success(), "{}", text(&keygen));
            assert!(
                String::from_utf8_lossy(&keygen.stdout).starts_with("-----BEGIN PUBLIC KEY-----")
            );
        }
        Some(setup)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `toolward ARGS` in the setup's folder.
    fn run(&self, args: &[&str]) -> Output {
        Command::new(self.bin)
            .args(args)
            .current_dir(self.dir.path())
            .env_remove("TOOLWARD_REGISTRY_USERNAME")
            .env_remove("TOOLWARD_REGISTRY_PASSWORD")
            .env("DOCKER_CONFIG", self.dir.path().join("no-docker-config"))
            .output()
            .unwrap()
    }

    fn tag_reference(&self, tag: &str) -> String {
        format!("oci://{}/{}:{tag}", self.registry, self.repository)
    }

    /// `policy push policy.wasm REPOSITORY:v1`: the digest reference it prints.
    fn push(&self) -> String {
        let pushed = self.run(&["policy", "push", "policy.wasm", &self.tag_reference("v1")]);
        assert!(pushed.status.success(), "{}", text(&pushed));
        let pinned = String::from_utf8(pushed.stdout).unwrap().trim().to_owned();
        assert!(
            pinned.starts_with(&format!(
                "oci://{}/{}@sha256:",
                self.registry, self.repository
            )),
            "{pinned}"
        );
        pinned
    }

    fn sign(&self, reference: &str, key: &str) {
        let signed = self.run(&["policy", "sign", reference, "--key", key]);
        assert!(signed.status.success(), "{}", text(&signed));
        assert_eq!(String::from_utf8_lossy(&signed.stdout).trim(), reference);
    }

    /// Writes the config with `policy.component` = `component` and the keys `keys` (names of
    /// `NAME.pem.pub`).
    fn configure(&self, component: &str, keys: &[&str]) -> PathBuf {
        let keys: serde_json::Map<String, Value> = keys
            .iter()
            .map(|name| ((*name).to_owned(), json!(format!("{name}.pem.pub"))))
            .collect();
        let config = self.path("toolward.json");
        std::fs::write(
            &config,
            json!({
                "mcpServers": {"s": {"command": FAKE_SERVER, "args": ["s.json"]}},
                "rules": {"file": "rules.json"},
                "policy": {"component": component},
                "oci": {"keys": keys},
                "state_dir": "state",
                "audit": {"file": "audit.jsonl"},
            })
            .to_string(),
        )
        .unwrap();
        config
    }

    /// The file of the registry's storage holding blob `digest` (`sha256:…`).
    fn registry_blob(&self, digest: &str) -> PathBuf {
        let dir = std::env::var("TOOLWARD_TEST_REGISTRY_DIR").expect(
            "TOOLWARD_TEST_REGISTRY_DIR: the registry's folder, which `scripts/registry.sh start` prints",
        );
        let hex = digest.strip_prefix("sha256:").unwrap();
        Path::new(&dir)
            .join("storage/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }
}

/// The manifest the registry holds at `reference`'s digest, read as a blob of its storage.
fn manifest_of(setup: &Setup, pinned: &str) -> Value {
    let digest = pinned.rsplit_once('@').unwrap().1;
    let bytes = std::fs::read(setup.registry_blob(digest)).unwrap();
    assert_eq!(format!("sha256:{}", sha256_hex(&bytes)), digest);
    serde_json::from_slice(&bytes).unwrap()
}

#[test]
fn push_then_pull_by_digest_round_trips_the_component_as_a_wasm_artifact() {
    let Some(setup) = Setup::new("push_then_pull_round_trip") else {
        return;
    };
    let pinned = setup.push();
    // The CNCF Wasm artifact layout: a wasm config and one `application/wasm` layer that is
    // the file, byte for byte.
    let manifest = manifest_of(&setup, &pinned);
    assert_eq!(
        manifest["mediaType"],
        "application/vnd.oci.image.manifest.v1+json"
    );
    assert_eq!(
        manifest["config"]["mediaType"],
        "application/vnd.wasm.config.v0+json"
    );
    let layers = manifest["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1);
    assert_eq!(layers[0]["mediaType"], "application/wasm");
    let layer_digest = format!("sha256:{}", sha256_hex(&setup.wasm));
    assert_eq!(layers[0]["digest"], layer_digest);
    // The tag resolves to the digest the push printed.
    let resolved = setup.run(&["policy", "pull", &setup.tag_reference("v1")]);
    assert!(resolved.status.success(), "{}", text(&resolved));
    assert_eq!(String::from_utf8_lossy(&resolved.stdout).trim(), pinned);
    // Signed, pulled by digest into the state folder and verified with the config's key.
    setup.sign(&pinned, "release.pem");
    let config = setup.configure(&pinned, &["release"]);
    let pulled = setup.run(&[
        "policy",
        "pull",
        &pinned,
        "--config",
        config.to_str().unwrap(),
    ]);
    assert!(pulled.status.success(), "{}", text(&pulled));
    assert_eq!(String::from_utf8_lossy(&pulled.stdout).trim(), pinned);
    assert!(text(&pulled).contains("`release`"), "{}", text(&pulled));
    let cached = std::fs::read(
        setup
            .path("state/oci/blobs/sha256")
            .join(layer_digest.strip_prefix("sha256:").unwrap()),
    )
    .unwrap();
    assert_eq!(cached, setup.wasm);
}

#[test]
fn a_signed_component_pinned_by_digest_loads_decides_and_its_signer_is_audited() {
    let Some(setup) = Setup::new("signed_component_loads") else {
        return;
    };
    let pinned = setup.push();
    setup.sign(&pinned, "release.pem");
    // Both keys trusted (a rotation under way): the one that signed is the one recorded.
    setup.configure(&pinned, &["other", "release"]);
    let pinned_tools = setup.run(&["pin", "--config", "toolward.json"]);
    assert!(pinned_tools.status.success(), "{}", text(&pinned_tools));
    let allowed = setup.run(&["call", "s__echo", "--config", "toolward.json"]);
    assert!(allowed.status.success(), "{}", text(&allowed));
    let denied = setup.run(&["call", "s__wipe", "--config", "toolward.json"]);
    assert!(!denied.status.success(), "{}", text(&denied));
    let records = audit_records(&setup.path("audit.jsonl"));
    let decisions: Vec<&Value> = records.iter().filter(|r| r["kind"] == "decision").collect();
    assert!(!decisions.is_empty(), "{records:#?}");
    for record in &decisions {
        assert_eq!(record["components"]["policy_signer"], "release", "{record}");
        assert_eq!(
            record["components"]["policy_sha256"],
            sha256_hex(&setup.wasm),
            "{record}"
        );
    }
    assert!(
        decisions.iter().any(|r| r["decision"] == "allow"),
        "{decisions:#?}"
    );
    assert!(
        decisions.iter().any(|r| r["decision"] == "deny"),
        "{decisions:#?}"
    );
}

#[test]
fn a_reference_by_tag_alone_is_refused_by_serve_naming_it_and_policy_pull() {
    let Some(setup) = Setup::new("tag_refused") else {
        return;
    };
    setup.push();
    let tagged = setup.tag_reference("v1");
    setup.configure(&tagged, &["release"]);
    let served = setup.run(&["serve", "--config", "toolward.json"]);
    assert!(!served.status.success(), "{}", text(&served));
    let message = text(&served);
    assert!(message.contains(&format!("`{tagged}`")), "{message}");
    assert!(
        message.contains(&format!("toolward policy pull {tagged}")),
        "{message}"
    );
}

#[test]
fn an_unsigned_component_is_refused_naming_the_reference_and_the_digest() {
    let Some(setup) = Setup::new("unsigned_refused") else {
        return;
    };
    let pinned = setup.push();
    setup.configure(&pinned, &["release"]);
    let refused = setup.run(&["pin", "--config", "toolward.json"]);
    assert!(!refused.status.success(), "{}", text(&refused));
    let digest = pinned.rsplit_once('@').unwrap().1;
    let message = text(&refused);
    assert!(message.contains(&format!("`{pinned}`")), "{message}");
    assert!(message.contains(digest), "{message}");
    assert!(message.contains("is not signed"), "{message}");
}

#[test]
fn a_component_signed_with_an_untrusted_key_is_refused_naming_the_reference_and_the_digest() {
    let Some(setup) = Setup::new("wrongly_signed_refused") else {
        return;
    };
    let pinned = setup.push();
    setup.sign(&pinned, "other.pem");
    setup.configure(&pinned, &["release"]);
    let refused = setup.run(&["pin", "--config", "toolward.json"]);
    assert!(!refused.status.success(), "{}", text(&refused));
    let digest = pinned.rsplit_once('@').unwrap().1;
    let message = text(&refused);
    assert!(message.contains(&format!("`{pinned}`")), "{message}");
    assert!(message.contains(digest), "{message}");
    assert!(
        message.contains("verifies with no key of `oci.keys` (`release`)"),
        "{message}"
    );
}

#[test]
fn a_signature_made_for_another_digest_is_refused() {
    let Some(setup) = Setup::new("signature_for_another_digest") else {
        return;
    };
    let pinned = setup.push();
    // A second component, signed; its signature manifest is then copied to the first's tag:
    // a valid signature by a trusted key, of other bytes.
    let other = Setup {
        wasm: component_for("signature_for_another_digest-other"),
        ..Setup::new("signature_for_another_digest_other").unwrap()
    };
    std::fs::write(other.path("policy.wasm"), &other.wasm).unwrap();
    std::fs::copy(setup.path("release.pem"), other.path("release.pem")).unwrap();
    let other_pinned = other.push();
    other.sign(&other_pinned, "release.pem");
    let other_digest = other_pinned.rsplit_once('@').unwrap().1;
    let digest = pinned.rsplit_once('@').unwrap().1;
    let sig_tag = |d: &str| format!("{}.sig", d.replacen(':', "-", 1));
    let tags = Path::new(&std::env::var("TOOLWARD_TEST_REGISTRY_DIR").unwrap())
        .join("storage/docker/registry/v2/repositories");
    let link = |repository: &str, tag: &str| {
        tags.join(repository)
            .join("_manifests/tags")
            .join(tag)
            .join("current/link")
    };
    let other_sig = std::fs::read(link(&other.repository, &sig_tag(other_digest))).unwrap();
    let sig_manifest_digest = String::from_utf8(other_sig.clone()).unwrap();
    // Make the signature manifest and its blobs known to the first repository too.
    let repo_dir = tags.join(&setup.repository);
    let other_dir = tags.join(&other.repository);
    copy_tree(&other_dir.join("_layers"), &repo_dir.join("_layers"));
    copy_tree(
        &other_dir.join("_manifests/revisions"),
        &repo_dir.join("_manifests/revisions"),
    );
    let target = link(&setup.repository, &sig_tag(digest));
    std::fs::create_dir_all(target.parent().unwrap()).unwrap();
    std::fs::write(&target, &sig_manifest_digest).unwrap();
    setup.configure(&pinned, &["release"]);
    let refused = setup.run(&["pin", "--config", "toolward.json"]);
    assert!(!refused.status.success(), "{}", text(&refused));
    let message = text(&refused);
    assert!(message.contains(&format!("`{pinned}`")), "{message}");
    assert!(
        message.contains(&format!("is for `{other_digest}`, another digest")),
        "{message}"
    );
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

#[test]
fn a_layer_the_registry_serves_with_other_bytes_is_refused_naming_both_digests() {
    let Some(setup) = Setup::new("tampered_layer_refused") else {
        return;
    };
    let pinned = setup.push();
    setup.sign(&pinned, "release.pem");
    let layer_digest = format!("sha256:{}", sha256_hex(&setup.wasm));
    // Same length, other bytes: what a compromised registry or mirror would serve.
    let blob = setup.registry_blob(&layer_digest);
    let mut bytes = std::fs::read(&blob).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&blob, &bytes).unwrap();
    setup.configure(&pinned, &["release"]);
    let refused = setup.run(&["pin", "--config", "toolward.json"]);
    assert!(!refused.status.success(), "{}", text(&refused));
    let message = text(&refused);
    assert!(message.contains(&format!("`{pinned}`")), "{message}");
    assert!(
        message.contains(&format!(
            "the layer has digest `sha256:{}`, not `{layer_digest}`",
            sha256_hex(&bytes)
        )),
        "{message}"
    );
}

#[test]
fn a_cached_layer_changed_in_the_state_folder_is_never_loaded() {
    let Some(setup) = Setup::new("cached_layer_changed") else {
        return;
    };
    let pinned = setup.push();
    setup.sign(&pinned, "release.pem");
    setup.configure(&pinned, &["release"]);
    let pinned_tools = setup.run(&["pin", "--config", "toolward.json"]);
    assert!(pinned_tools.status.success(), "{}", text(&pinned_tools));
    // The cached layer replaced by other bytes, and the registry gone: the load checks the
    // layer's digest, does not run what is there, and cannot pull it again.
    let layer_hex = sha256_hex(&setup.wasm);
    let cached = setup.path("state/oci/blobs/sha256").join(&layer_hex);
    let nonsense = crate::support::nonsense_component_bytes();
    std::fs::write(&cached, &nonsense).unwrap();
    let config = setup.path("toolward.json");
    let text_of_config = std::fs::read_to_string(&config)
        .unwrap()
        .replace(&setup.registry, "127.0.0.1:9");
    std::fs::write(&config, text_of_config).unwrap();
    let refused = setup.run(&["call", "s__echo", "--config", "toolward.json"]);
    assert!(!refused.status.success(), "{}", text(&refused));
    // The changed layer is not run: the load goes back to the registry for the real one.
    let message = text(&refused);
    assert!(
        message.contains("registry for `oci://127.0.0.1:9/"),
        "{message}"
    );
}

/// The signature `policy sign` publishes, read back from the registry's storage and checked
/// with OpenSSL, an implementation sharing nothing with toolward's: cosign's tag, media type,
/// payload (written out here from cosign's format) and annotation.
#[test]
fn a_signature_is_cosigns_simple_signing_layer_and_verifies_with_openssl() {
    let Some(setup) = Setup::new("signature_verifies_with_openssl") else {
        return;
    };
    if Command::new("openssl").arg("version").output().is_err() {
        eprintln!("signature_verifies_with_openssl: skipped: no `openssl` on PATH");
        return;
    }
    let pinned = setup.push();
    setup.sign(&pinned, "release.pem");
    let digest = pinned.rsplit_once('@').unwrap().1;
    let tag = format!("sha256-{}.sig", digest.strip_prefix("sha256:").unwrap());
    let link = Path::new(&std::env::var("TOOLWARD_TEST_REGISTRY_DIR").unwrap())
        .join("storage/docker/registry/v2/repositories")
        .join(&setup.repository)
        .join("_manifests/tags")
        .join(&tag)
        .join("current/link");
    let sig_manifest_digest = std::fs::read_to_string(link).unwrap();
    let sig_manifest: Value =
        serde_json::from_slice(&std::fs::read(setup.registry_blob(&sig_manifest_digest)).unwrap())
            .unwrap();
    let layers = sig_manifest["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1, "{sig_manifest}");
    let layer = &layers[0];
    assert_eq!(
        layer["mediaType"],
        "application/vnd.dev.cosign.simplesigning.v1+json"
    );
    let payload = std::fs::read(setup.registry_blob(layer["digest"].as_str().unwrap())).unwrap();
    let expected = format!(
        "{{\"critical\":{{\"identity\":{{\"docker-reference\":\"{}/{}\"}},\"image\":{{\"docker-manifest-digest\":\"{digest}\"}},\"type\":\"cosign container image signature\"}},\"optional\":null}}",
        setup.registry, setup.repository
    );
    assert_eq!(String::from_utf8(payload.clone()).unwrap(), expected);
    use base64::Engine as _;
    let signature = base64::engine::general_purpose::STANDARD
        .decode(
            layer["annotations"]["dev.cosignproject.cosign/signature"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
    std::fs::write(setup.path("payload.json"), &payload).unwrap();
    std::fs::write(setup.path("payload.sig"), &signature).unwrap();
    let verify = |key: &str| {
        Command::new("openssl")
            .args([
                "dgst",
                "-sha256",
                "-verify",
                key,
                "-signature",
                "payload.sig",
                "payload.json",
            ])
            .current_dir(setup.dir.path())
            .output()
            .unwrap()
    };
    let good = verify("release.pem.pub");
    assert!(good.status.success(), "{}", text(&good));
    let other = verify("other.pem.pub");
    assert!(!other.status.success(), "{}", text(&other));
}
