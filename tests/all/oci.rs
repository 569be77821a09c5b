//! Components, policy settings and Cedar text from a real OCI registry (issue 33.1, 33.2,
//! 33.4): Debian's `docker-registry` (the CNCF distribution registry) that
//! `scripts/registry.sh` starts on loopback (`TOOLWARD_TEST_REGISTRY`; without it these tests
//! fail when `CI` is set and are skipped with a printed reason elsewhere), driven through the
//! `toolward` binary: `policy keygen`, `push`, `sign`, `pull`, then `pin` and `call` with
//! `policy.component`, `policy.settings` or `policy.cedar` an `oci://` reference. Each test
//! pushes files of its own (the built-in policy with a custom section naming the test, text
//! naming it), so its blobs are its own in the registry's shared blob store. [`Setup`] is
//! the one setup every test here uses.
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

/// Text naming `test` and this run: bytes (and so digests) of its own, as [`component_for`].
fn nonce(test: &str) -> String {
    format!(
        "{test}-{}-{:?}",
        std::process::id(),
        std::time::SystemTime::now()
    )
}

/// The built-in policy component with a custom section naming `test` appended: the same
/// decisions, bytes (and so digests) of its own.
fn component_for(test: &str) -> Vec<u8> {
    let mut wasm = std::fs::read(toolward::guests::DEFAULT_POLICY_WASM).unwrap();
    let name = b"toolward-test";
    let mut content = Vec::new();
    content.push(u8::try_from(name.len()).unwrap());
    content.extend_from_slice(name);
    content.extend_from_slice(nonce(test).as_bytes());
    assert!(content.len() < 128, "one-byte LEB128 section size");
    wasm.push(0);
    wasm.push(u8::try_from(content.len()).unwrap());
    wasm.extend_from_slice(&content);
    wasm
}

/// The registry's storage folder (`TOOLWARD_TEST_REGISTRY_DIR`), which the tests alter to
/// play a hostile registry.
fn registry_dir() -> PathBuf {
    PathBuf::from(std::env::var("TOOLWARD_TEST_REGISTRY_DIR").expect(
        "TOOLWARD_TEST_REGISTRY_DIR: the registry's folder, which `scripts/registry.sh start` prints",
    ))
}

/// The file of the registry's storage naming what `tag` of `repository` points at.
fn tag_link(repository: &str, tag: &str) -> PathBuf {
    registry_dir()
        .join("storage/docker/registry/v2/repositories")
        .join(repository)
        .join("_manifests/tags")
        .join(tag)
        .join("current/link")
}

/// The digest a pinned reference names, `sha256:…`.
fn digest_of(pinned: &str) -> &str {
    pinned.rsplit_once('@').unwrap().1
}

/// cosign's signature tag for `digest`.
fn signature_tag(digest: &str) -> String {
    format!("{}.sig", digest.replacen(':', "-", 1))
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
            .env_remove("TOOLWARD_REGISTRY_HOST")
            .env("DOCKER_CONFIG", self.dir.path().join("no-docker-config"))
            .output()
            .unwrap()
    }

    fn tag_reference(&self, tag: &str) -> String {
        format!("oci://{}/{}:{tag}", self.registry, self.repository)
    }

    /// `policy push policy.wasm REPOSITORY:v1`: the digest reference it prints.
    fn push(&self) -> String {
        self.push_file("policy.wasm", "v1", &[])
    }

    /// `policy push FILE REPOSITORY:TAG ARGS…`: the digest reference it prints.
    fn push_file(&self, file: &str, tag: &str, args: &[&str]) -> String {
        let target = self.tag_reference(tag);
        let mut command = vec!["policy", "push", file, target.as_str()];
        command.extend_from_slice(args);
        let pushed = self.run(&command);
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
        self.configure_policy(json!({"component": component}), keys)
    }

    /// Writes the config with `policy` = `policy` and the keys `keys` (names of
    /// `NAME.pem.pub`).
    fn configure_policy(&self, policy: Value, keys: &[&str]) -> PathBuf {
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
                "policy": policy,
                "oci": {"keys": keys},
                "state_dir": "state",
                "audit": {"file": "audit.jsonl"},
            })
            .to_string(),
        )
        .unwrap();
        config
    }

    /// `toolward ARGS`, which must fail: its message (standard output and error).
    fn refusal(&self, args: &[&str]) -> String {
        let refused = self.run(args);
        assert!(!refused.status.success(), "{}", text(&refused));
        text(&refused)
    }

    /// The file of the registry's storage holding blob `digest` (`sha256:…`).
    fn registry_blob(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").unwrap();
        registry_dir()
            .join("storage/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }
}

/// The manifest the registry holds at `reference`'s digest, read as a blob of its storage.
fn manifest_of(setup: &Setup, pinned: &str) -> Value {
    let digest = digest_of(pinned);
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
    let message = setup.refusal(&["serve", "--config", "toolward.json"]);
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
    let message = setup.refusal(&["pin", "--config", "toolward.json"]);
    assert!(message.contains(&format!("`{pinned}`")), "{message}");
    assert!(message.contains(digest_of(&pinned)), "{message}");
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
    let message = setup.refusal(&["pin", "--config", "toolward.json"]);
    assert!(message.contains(&format!("`{pinned}`")), "{message}");
    assert!(message.contains(digest_of(&pinned)), "{message}");
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
    let other_digest = digest_of(&other_pinned);
    let other_sig =
        std::fs::read(tag_link(&other.repository, &signature_tag(other_digest))).unwrap();
    let sig_manifest_digest = String::from_utf8(other_sig).unwrap();
    let tags = registry_dir().join("storage/docker/registry/v2/repositories");
    // Make the signature manifest and its blobs known to the first repository too.
    let repo_dir = tags.join(&setup.repository);
    let other_dir = tags.join(&other.repository);
    copy_tree(&other_dir.join("_layers"), &repo_dir.join("_layers"));
    copy_tree(
        &other_dir.join("_manifests/revisions"),
        &repo_dir.join("_manifests/revisions"),
    );
    let target = tag_link(&setup.repository, &signature_tag(digest_of(&pinned)));
    std::fs::create_dir_all(target.parent().unwrap()).unwrap();
    std::fs::write(&target, &sig_manifest_digest).unwrap();
    setup.configure(&pinned, &["release"]);
    let message = setup.refusal(&["pin", "--config", "toolward.json"]);
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
    let message = setup.refusal(&["pin", "--config", "toolward.json"]);
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
    let message = setup.refusal(&["call", "s__echo", "--config", "toolward.json"]);
    // The changed layer is not run: the load goes back to the registry for the real one.
    assert!(
        message.contains("registry for `oci://127.0.0.1:9/"),
        "{message}"
    );
}

/// A cached layer made larger in the state folder (its bytes and more) is not a refusal on
/// every load: it is treated as absent, pulled again and replaced, with a warning naming the
/// file.
#[test]
fn a_cached_layer_made_larger_in_the_state_folder_is_pulled_again_and_replaced() {
    let Some(setup) = Setup::new("cached_layer_larger") else {
        return;
    };
    let pinned = setup.push();
    setup.sign(&pinned, "release.pem");
    setup.configure(&pinned, &["release"]);
    let first = setup.run(&["pin", "--config", "toolward.json"]);
    assert!(first.status.success(), "{}", text(&first));
    let cached = setup
        .path("state/oci/blobs/sha256")
        .join(sha256_hex(&setup.wasm));
    let mut larger = setup.wasm.clone();
    larger.extend_from_slice(b"and more");
    std::fs::write(&cached, &larger).unwrap();
    let allowed = setup.run(&["call", "s__echo", "--config", "toolward.json"]);
    assert!(allowed.status.success(), "{}", text(&allowed));
    let said = text(&allowed);
    assert!(said.contains("pulling it again"), "{said}");
    assert!(said.contains(&sha256_hex(&setup.wasm)), "{said}");
    assert_eq!(std::fs::read(&cached).unwrap(), setup.wasm);
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
    let digest = digest_of(&pinned);
    let sig_manifest_digest =
        std::fs::read_to_string(tag_link(&setup.repository, &signature_tag(digest))).unwrap();
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

/// The rules file with reads denied too: settings that decide otherwise than `rules.json`
/// (which allows `echo`), so a decision shows which text the policy was configured with.
fn settings_denying_reads(test: &str) -> String {
    json!({
        "$schema": format!("urn:toolward-test:{}", nonce(test)),
        "servers": {"s": {"tools": {"echo": {"effect": "read-only"}, "wipe": {"effect": "destructive"}}}},
        "decisions": {"read-only": "deny"},
    })
    .to_string()
}

/// Cedar policies that permit every call but `echo` (which the default table allows) and so
/// allow `wipe` (which it denies).
fn cedar_forbidding_echo(test: &str) -> String {
    format!(
        "// {}\n@id(\"calls\") permit(principal, action, resource);\n\n@id(\"no-echo\")\n@reason(\"echo is forbidden by the published policies\")\nforbid(principal, action, resource == Toolward::Tool::\"s/echo\");\n",
        nonce(test)
    )
}

/// The decisions of the audit log, by exposed tool.
fn decisions(setup: &Setup) -> Vec<Value> {
    audit_records(&setup.path("audit.jsonl"))
        .into_iter()
        .filter(|r| r["kind"] == "decision")
        .collect()
}

#[test]
fn signed_policy_settings_pinned_by_digest_configure_the_policy_and_their_signer_is_audited() {
    let Some(setup) = Setup::new("signed_settings_load") else {
        return;
    };
    std::fs::write(
        setup.path("settings.json"),
        settings_denying_reads("signed_settings_load"),
    )
    .unwrap();
    // Settings are never guessed from a file's name: any text could be settings.
    let unsaid = setup.refusal(&[
        "policy",
        "push",
        "settings.json",
        &setup.tag_reference("settings"),
    ]);
    assert!(unsaid.contains("`--kind settings`"), "{unsaid}");
    let pinned = setup.push_file("settings.json", "settings", &["--kind", "settings"]);
    // The OCI artifact guidelines' layout: the empty config, `artifactType` and the layer of
    // toolward's settings media type, the file byte for byte.
    let manifest = manifest_of(&setup, &pinned);
    assert_eq!(
        manifest["config"]["mediaType"],
        "application/vnd.oci.empty.v1+json"
    );
    assert_eq!(
        manifest["artifactType"],
        "application/vnd.toolward.policy-settings.v1"
    );
    let layers = manifest["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1, "{manifest}");
    assert_eq!(
        layers[0]["mediaType"],
        "application/vnd.toolward.policy-settings.v1"
    );
    let settings = std::fs::read(setup.path("settings.json")).unwrap();
    assert_eq!(
        layers[0]["digest"],
        format!("sha256:{}", sha256_hex(&settings))
    );
    // The tag resolves, naming what is there and where to pin it.
    let resolved = setup.run(&["policy", "pull", &setup.tag_reference("settings")]);
    assert!(resolved.status.success(), "{}", text(&resolved));
    assert_eq!(String::from_utf8_lossy(&resolved.stdout).trim(), pinned);
    assert!(
        text(&resolved).contains("a policy settings artifact"),
        "{}",
        text(&resolved)
    );
    setup.sign(&pinned, "release.pem");
    setup.configure_policy(json!({"settings": pinned}), &["other", "release"]);
    let pinned_tools = setup.run(&["pin", "--config", "toolward.json"]);
    assert!(pinned_tools.status.success(), "{}", text(&pinned_tools));
    // The published settings decide: a read is denied, where `rules.json` alone allows it.
    let denied = setup.run(&["call", "s__echo", "--config", "toolward.json"]);
    assert!(!denied.status.success(), "{}", text(&denied));
    let decisions = decisions(&setup);
    assert!(!decisions.is_empty());
    for record in &decisions {
        assert_eq!(record["decision"], "deny", "{record}");
        assert_eq!(
            record["components"]["settings_signer"], "release",
            "{record}"
        );
        assert_eq!(
            record["components"]["settings_digest"],
            digest_of(&pinned),
            "{record}"
        );
    }
    // Kept in the state folder by digest.
    let cached = setup
        .path("state/oci/blobs/sha256")
        .join(sha256_hex(&settings));
    assert_eq!(std::fs::read(cached).unwrap(), settings);
}

#[test]
fn signed_cedar_policies_pinned_by_digest_decide_calls() {
    let Some(setup) = Setup::new("signed_cedar_load") else {
        return;
    };
    std::fs::write(
        setup.path("policy.cedar"),
        cedar_forbidding_echo("signed_cedar_load"),
    )
    .unwrap();
    // A `.cedar` name says what it is.
    let pinned = setup.push_file("policy.cedar", "cedar", &[]);
    let manifest = manifest_of(&setup, &pinned);
    assert_eq!(
        manifest["layers"][0]["mediaType"],
        "application/vnd.toolward.cedar-policies.v1"
    );
    setup.sign(&pinned, "release.pem");
    setup.configure_policy(json!({"cedar": pinned}), &["release"]);
    let pinned_tools = setup.run(&["pin", "--config", "toolward.json"]);
    assert!(pinned_tools.status.success(), "{}", text(&pinned_tools));
    let denied = setup.run(&["call", "s__echo", "--config", "toolward.json"]);
    assert!(!denied.status.success(), "{}", text(&denied));
    assert!(
        text(&denied).contains("echo is forbidden by the published policies"),
        "{}",
        text(&denied)
    );
    let allowed = setup.run(&["call", "s__wipe", "--config", "toolward.json"]);
    assert!(allowed.status.success(), "{}", text(&allowed));
    let decisions = decisions(&setup);
    assert_eq!(decisions.len(), 2, "{decisions:#?}");
    for record in &decisions {
        assert_eq!(
            record["components"]["settings_signer"], "release",
            "{record}"
        );
    }
}

#[test]
fn settings_and_cedar_text_unsigned_wrongly_signed_or_of_another_kind_are_refused_naming_reference_and_digest()
 {
    let Some(setup) = Setup::new("text_artifacts_refused") else {
        return;
    };
    std::fs::write(
        setup.path("settings.json"),
        settings_denying_reads("text_artifacts_refused"),
    )
    .unwrap();
    std::fs::write(
        setup.path("policy.cedar"),
        cedar_forbidding_echo("text_artifacts_refused"),
    )
    .unwrap();
    let settings = setup.push_file("settings.json", "settings", &["--kind", "settings"]);
    let cedar = setup.push_file("policy.cedar", "cedar", &[]);
    let component = setup.push();
    let pin = ["pin", "--config", "toolward.json"];
    let refused_naming = |message: &str, pinned: &str, why: &str| {
        assert!(message.contains(&format!("`{pinned}`")), "{message}");
        assert!(message.contains(digest_of(pinned)), "{message}");
        assert!(message.contains(why), "{why}: {message}");
    };
    // Missing signature.
    setup.configure_policy(json!({"settings": settings}), &["release"]);
    refused_naming(&setup.refusal(&pin), &settings, "is not signed");
    // Signed with a key `oci.keys` does not name.
    setup.sign(&cedar, "other.pem");
    setup.configure_policy(json!({"cedar": cedar}), &["release"]);
    refused_naming(
        &setup.refusal(&pin),
        &cedar,
        "verifies with no key of `oci.keys` (`release`)",
    );
    // Signed, and of another kind than the field names: Cedar text as settings, a component
    // as Cedar text.
    setup.sign(&cedar, "release.pem");
    let cedar_as_settings = settings.replace(digest_of(&settings), digest_of(&cedar));
    setup.configure_policy(json!({"settings": cedar_as_settings}), &["release"]);
    refused_naming(
        &setup.refusal(&pin),
        &cedar_as_settings,
        "is not a policy settings artifact: the layer's media type is `application/vnd.toolward.cedar-policies.v1` (a Cedar policies artifact)",
    );
    setup.sign(&component, "release.pem");
    setup.configure_policy(json!({"cedar": component}), &["release"]);
    refused_naming(
        &setup.refusal(&pin),
        &component,
        "is not a Cedar policies artifact",
    );
    // A digest nothing is published under.
    let absent = format!(
        "{}@sha256:{}",
        settings.rsplit_once('@').unwrap().0,
        "0".repeat(64)
    );
    setup.configure_policy(json!({"settings": absent}), &["release"]);
    refused_naming(
        &setup.refusal(&pin),
        &absent,
        "the registry has no manifest with this digest",
    );
}

#[test]
fn settings_or_cedar_text_by_tag_alone_are_refused_by_serve_naming_the_reference() {
    let Some(setup) = Setup::new("text_tag_refused") else {
        return;
    };
    for (field, tag) in [("settings", "settings"), ("cedar", "cedar")] {
        let tagged = setup.tag_reference(tag);
        setup.configure_policy(json!({field: tagged}), &["release"]);
        let message = setup.refusal(&["serve", "--config", "toolward.json"]);
        assert!(message.contains(&format!("policy.{field}")), "{message}");
        assert!(message.contains(&format!("`{tagged}`")), "{message}");
        assert!(
            message.contains(&format!("toolward policy pull {tagged}")),
            "{message}"
        );
    }
}

/// A hostile registry serving a manifest of 1 MiB for the pin: refused by its length, before
/// its body is read (the message gives the length the registry announced).
#[test]
fn a_manifest_over_the_limit_is_refused_by_its_announced_length() {
    let Some(setup) = Setup::new("oversized_manifest") else {
        return;
    };
    let pinned = setup.push();
    setup.sign(&pinned, "release.pem");
    let blob = setup.registry_blob(digest_of(&pinned));
    let mut manifest: Value = serde_json::from_slice(&std::fs::read(&blob).unwrap()).unwrap();
    manifest["annotations"] = json!({"padding": "x".repeat(1024 * 1024)});
    let oversized = serde_json::to_vec(&manifest).unwrap();
    std::fs::write(&blob, &oversized).unwrap();
    setup.configure(&pinned, &["release"]);
    let message = setup.refusal(&["pin", "--config", "toolward.json"]);
    assert!(message.contains(&format!("`{pinned}`")), "{message}");
    assert!(
        message.contains(&format!(
            "the manifest is larger than the limit of 65536 bytes ({} bytes)",
            oversized.len()
        )),
        "{message}"
    );
}

/// The rotation `docs/registries.md` describes, with the component already in the state
/// folder: signed with the new key, the old key taken out of `oci.keys`, the next load reads
/// the registry's signatures again and loads it, naming the new key.
#[test]
fn after_a_key_rotation_the_cached_component_loads_with_the_new_signature() {
    let Some(setup) = Setup::new("key_rotation") else {
        return;
    };
    let pinned = setup.push();
    setup.sign(&pinned, "release.pem");
    setup.configure(&pinned, &["release"]);
    let first = setup.run(&["pin", "--config", "toolward.json"]);
    assert!(first.status.success(), "{}", text(&first));
    setup.sign(&pinned, "other.pem");
    setup.configure(&pinned, &["other"]);
    let allowed = setup.run(&["call", "s__echo", "--config", "toolward.json"]);
    assert!(allowed.status.success(), "{}", text(&allowed));
    let decisions = decisions(&setup);
    assert_eq!(decisions.len(), 1, "{decisions:#?}");
    assert_eq!(decisions[0]["components"]["policy_signer"], "other");
    // With the registry out of reach, a key that signed nothing is refused by the cache's
    // signatures, naming the key, not the connection.
    let keygen = setup.run(&["policy", "keygen", "--out", "third.pem"]);
    assert!(keygen.status.success(), "{}", text(&keygen));
    let unreachable = pinned.replace(&setup.registry, "127.0.0.1:9");
    setup.configure(&unreachable, &["third"]);
    let message = setup.refusal(&["call", "s__echo", "--config", "toolward.json"]);
    assert!(message.contains(&format!("`{unreachable}`")), "{message}");
    assert!(
        message.contains("verifies with no key of `oci.keys` (`third`)"),
        "{message}"
    );
}
