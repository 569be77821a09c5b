//! The component host: the default policy component loaded from its `.wasm`, purity,
//! limits (each fault fixture denies within its bound and the host keeps working), the
//! compiled-component cache.

use std::sync::OnceLock;

use toolward::component::{
    CacheOutcome, CallView, ComponentError, ComponentHost, Decision, Effect, GuestLimits,
    LoadedComponent, Policy, ReadyStats, ToolView,
};

use crate::support::nonsense_component_bytes;

/// One host for the tests of this file, sharing compiled components through a cache in
/// the target directory.
fn host() -> &'static ComponentHost {
    static HOST: OnceLock<ComponentHost> = OnceLock::new();
    HOST.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("toolward-test-cache-{}", std::process::id()));
        // Ready instances whatever the machine's cores, so the tests take that path.
        let limits = GuestLimits {
            ready_instances: toolward::component::DEFAULT_READY_INSTANCES,
            ..GuestLimits::default()
        };
        ComponentHost::new(limits, Some(crate::support::cache_in(&dir))).unwrap()
    })
}

fn default_component() -> LoadedComponent {
    let bytes = std::fs::read(toolward::guests::DEFAULT_POLICY_WASM).unwrap();
    host()
        .load(&bytes, toolward::guests::DEFAULT_POLICY_WASM)
        .unwrap()
}

fn fault_component() -> LoadedComponent {
    let bytes = std::fs::read(toolward::guests::FAULT_GUEST_WASM).unwrap();
    host().load(&bytes, "fault-guest").unwrap()
}

fn call(server: &str, tool: &str, effect: Effect) -> CallView {
    CallView {
        id: "01TESTCALL".into(),
        server: server.into(),
        tool: tool.into(),
        effect,
        arguments: "{}".into(),
        arguments_sha256: toolward::canonical::sha256_hex(b"{}"),
        principal: "operator".into(),
        session: "test".into(),
        principal_attributes: Vec::new(),
        labels: Default::default(),
        time_ms: 1_700_000_000_000,
        facts: Vec::new(),
    }
}

const RULES: &str = r#"{
  "servers": {
    "fs": {
      "decisions": {"remote-change": "deny"},
      "tools": {
        "read_file": {"effect": "read-only"},
        "write_file": {"effect": "local-change", "allow_hint_mismatch": true},
        "edit_file": {"effect": "local-change", "fix": {"dryRun": true}, "deny": ["backup"],
                      "description": "Preview an edit.", "decision": "allow"}
      }
    }
  }
}"#;

#[test]
fn default_component_from_its_wasm_decides_by_the_default_table() {
    let policy = host().configure_policy(&default_component(), "{}").unwrap();
    assert_eq!(
        policy.decide(&call("s", "t", Effect::ReadOnly)),
        Decision::Allow
    );
    assert_eq!(
        policy.decide(&call("s", "t", Effect::LocalChange)),
        Decision::Hold("effect `local-change` needs approval by the default decision table".into())
    );
    assert_eq!(
        policy.decide(&call("s", "t", Effect::RemoteChange)),
        Decision::Hold(
            "effect `remote-change` needs approval by the default decision table".into()
        )
    );
    assert_eq!(
        policy.decide(&call("s", "t", Effect::Destructive)),
        Decision::Deny("effect `destructive` is denied by the default decision table".into())
    );
}

#[test]
fn default_component_applies_server_and_tool_overrides() {
    let policy = host()
        .configure_policy(&default_component(), RULES)
        .unwrap();
    assert_eq!(
        policy.decide(&call("fs", "edit_file", Effect::LocalChange)),
        Decision::Allow
    );
    assert_eq!(
        policy.decide(&call("fs", "write_file", Effect::RemoteChange)),
        Decision::Deny(
            "effect `remote-change` is denied by the decision table of server `fs`".into()
        )
    );
    assert!(matches!(
        policy.decide(&call("fs", "write_file", Effect::LocalChange)),
        Decision::Hold(_)
    ));
}

#[test]
fn default_component_gives_every_effect_every_verdict_from_the_rules_table() {
    let component = default_component();
    for effect in Effect::ALL {
        for verdict in ["allow", "deny", "hold"] {
            let rules = format!(r#"{{"decisions": {{"{effect}": "{verdict}"}}}}"#);
            let policy = host().configure_policy(&component, &rules).unwrap();
            let got = match policy.decide(&call("s", "t", effect)) {
                Decision::Allow => "allow",
                Decision::Deny(_) => "deny",
                Decision::Hold(_) => "hold",
            };
            assert_eq!(got, verdict, "{effect}");
        }
    }
}

#[test]
fn default_component_classifies_from_the_rules_file() {
    let rules = host().configure_rules(&default_component(), RULES).unwrap();
    let mut classifier = rules.classifier().unwrap();
    let tool = |name: &str| ToolView {
        server: "fs".into(),
        name: name.into(),
        ..ToolView::default()
    };
    let edit = classifier.classify(&tool("edit_file")).unwrap().unwrap();
    assert_eq!(edit.effect, Effect::LocalChange);
    assert_eq!(edit.denied_parameters, ["backup"]);
    assert_eq!(
        edit.fixed_parameters,
        [("dryRun".to_owned(), "true".to_owned())]
    );
    assert_eq!(
        edit.description_override.as_deref(),
        Some("Preview an edit.")
    );
    assert!(!edit.allow_hint_mismatch);
    let write = classifier.classify(&tool("write_file")).unwrap().unwrap();
    assert!(write.allow_hint_mismatch);
    assert_eq!(
        classifier.classify(&tool("delete_everything")).unwrap(),
        None
    );
}

#[test]
fn invalid_rules_text_refuses_the_start_with_the_path_of_the_fault() {
    let err = host()
        .configure_policy(
            &default_component(),
            r#"{"servers": {"fs": {"tools": {"write_file": {"effect": "write"}}}}}"#,
        )
        .unwrap_err();
    let ComponentError::Settings { message, .. } = &err else {
        panic!("expected a settings error, got {err}");
    };
    assert_eq!(
        message,
        r#"servers.fs.tools.write_file.effect: unknown effect "write""#
    );
    assert!(err.to_string().contains("refused its settings"), "{err}");
}

#[test]
fn default_component_imports_only_toolward_types() {
    let component = default_component();
    assert!(component.exports_rules() && component.exports_policy());
    for import in component.imports() {
        assert!(import.starts_with("toolward:policy/"), "{import}");
    }
    assert_eq!(component.sha256().len(), 64);
}

/// The library embeds the prebuilt components of `host/guests/` (so an embedder's build
/// runs no nested wasm build); each must be exactly what its source builds here, and
/// `SHA256SUMS` must name each file's hash. `TOOLWARD_UPDATE_GUESTS=1` writes the built
/// bytes and their sums instead of failing (then re-pin the examples).
#[test]
fn the_prebuilt_guests_are_what_their_sources_build() {
    use toolward::component::{CEDAR_COMPONENT, DEFAULT_COMPONENT, REVIEWING_COMPONENT};
    use toolward::guests::{CEDAR_POLICY_WASM, DEFAULT_POLICY_WASM, REVIEWING_POLICY_WASM};
    let folder = crate::support::repo().join("host/guests");
    let update = std::env::var_os("TOOLWARD_UPDATE_GUESTS").is_some();
    let mut sums = String::new();
    let mut stale = Vec::new();
    for (file, embedded, built) in [
        ("cedar.wasm", CEDAR_COMPONENT, CEDAR_POLICY_WASM),
        (
            "policy-reviewing.wasm",
            REVIEWING_COMPONENT,
            REVIEWING_POLICY_WASM,
        ),
        ("policy.wasm", DEFAULT_COMPONENT, DEFAULT_POLICY_WASM),
    ] {
        let built = std::fs::read(built).unwrap();
        if update {
            std::fs::write(folder.join(file), &built).unwrap();
        } else if embedded != built.as_slice() {
            stale.push(file);
        }
        let sha256 = toolward::canonical::sha256_hex(&built);
        sums.push_str(&format!("{sha256}  {file}\n"));
    }
    if update {
        std::fs::write(folder.join("SHA256SUMS"), &sums).unwrap();
        return;
    }
    assert!(
        stale.is_empty(),
        "host/guests/{stale:?} differ from what their sources build: run \
         `TOOLWARD_UPDATE_GUESTS=1 cargo test --test all -- prebuilt_guests`, then `toolward \
         pin` for each example config, and commit both"
    );
    let recorded = std::fs::read_to_string(folder.join("SHA256SUMS")).unwrap();
    assert_eq!(
        recorded, sums,
        "host/guests/SHA256SUMS does not name the files' hashes"
    );
}

fn fault_policy(mode: &str) -> toolward::component::Policy {
    host().configure_policy(&fault_component(), mode).unwrap()
}

fn assert_denied_with(decision: Decision, needle: &str) {
    match decision {
        Decision::Deny(reason) => assert!(reason.contains(needle), "{reason:?} lacks {needle:?}"),
        other => panic!("expected a deny containing {needle:?}, got {other:?}"),
    }
}

fn next_decision_works() {
    let policy = host().configure_policy(&default_component(), "{}").unwrap();
    assert_eq!(
        policy.decide(&call("s", "t", Effect::ReadOnly)),
        Decision::Allow
    );
}

#[test]
fn endless_loop_in_decide_is_a_deny_when_fuel_runs_out() {
    let policy = fault_policy("loop");
    assert_denied_with(
        policy.decide(&call("s", "t", Effect::ReadOnly)),
        "ran out of fuel",
    );
    // The same policy denies again (no poisoned state), and other components still work.
    assert_denied_with(
        policy.decide(&call("s", "t", Effect::ReadOnly)),
        "ran out of fuel",
    );
    next_decision_works();
}

#[test]
fn memory_bomb_in_decide_is_a_deny_at_the_memory_limit() {
    let policy = fault_policy("alloc");
    assert_denied_with(
        policy.decide(&call("s", "t", Effect::ReadOnly)),
        "exceeded its memory limit",
    );
    next_decision_works();
}

#[test]
fn trap_in_decide_is_a_deny_naming_the_trap() {
    let policy = fault_policy("trap");
    assert_denied_with(policy.decide(&call("s", "t", Effect::ReadOnly)), "trapped");
    next_decision_works();
}

#[test]
fn trap_in_classify_refuses_and_poisons_only_that_load() {
    let rules = host().configure_rules(&fault_component(), "trap").unwrap();
    let mut classifier = rules.classifier().unwrap();
    let tool = ToolView::default();
    let first = classifier.classify(&tool).unwrap_err();
    assert!(first.contains("trapped"), "{first}");
    assert_eq!(classifier.classify(&tool).unwrap_err(), first);
}

#[test]
fn endless_configure_is_refused_when_fuel_runs_out() {
    let limits = GuestLimits {
        configure_fuel: 5_000_000,
        ..GuestLimits::default()
    };
    let host = ComponentHost::new(limits, None).unwrap();
    let bytes = std::fs::read(toolward::guests::FAULT_GUEST_WASM).unwrap();
    let component = host.load(&bytes, "fault-guest").unwrap();
    let err = host
        .configure_policy(&component, "configure-loop")
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("ran out of fuel (limit 5000000 units; raise `guest.configure_fuel`"),
        "{err}"
    );
}

/// Waits until `policy`'s worker has an instance ready, so the next decision takes it.
fn wait_until_ready(policy: &Policy) {
    let began = std::time::Instant::now();
    while policy.ready_instances() == 0 {
        assert!(
            began.elapsed() < std::time::Duration::from_secs(30),
            "no instance became ready"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

#[test]
fn decisions_start_from_the_configured_state_every_time() {
    // The fixture denies any call after the first one its instance saw: with a fresh
    // instance per decision, every call is the first. Each decision here takes an instance
    // the policy's worker thread prepared ahead of it.
    let policy = fault_policy("count");
    for _ in 0..5 {
        wait_until_ready(&policy);
        assert_eq!(
            policy.decide(&call("s", "t", Effect::ReadOnly)),
            Decision::Allow
        );
    }
    assert_eq!(
        policy.ready_stats(),
        ReadyStats {
            from_ready: 5,
            inline: 0
        }
    );
}

#[test]
fn decisions_instantiated_inline_start_from_the_configured_state_too() {
    let limits = GuestLimits {
        ready_instances: 0,
        ..GuestLimits::default()
    };
    let host = ComponentHost::new(limits, None).unwrap();
    let bytes = std::fs::read(toolward::guests::FAULT_GUEST_WASM).unwrap();
    let policy = host
        .configure_policy(&host.load(&bytes, "fault-guest").unwrap(), "count")
        .unwrap();
    for _ in 0..5 {
        assert_eq!(
            policy.decide(&call("s", "t", Effect::ReadOnly)),
            Decision::Allow
        );
    }
    assert_eq!(policy.ready_instances(), 0);
    assert_eq!(
        policy.ready_stats(),
        ReadyStats {
            from_ready: 0,
            inline: 5
        }
    );
}

#[test]
fn concurrent_decisions_never_share_an_instance() {
    // Threads deciding at once, faster than the worker refills: some decisions take a
    // ready instance, some instantiate inline; every one is the first its instance sees.
    let policy = std::sync::Arc::new(fault_policy("count"));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let policy = std::sync::Arc::clone(&policy);
            std::thread::spawn(move || {
                for _ in 0..50 {
                    assert_eq!(
                        policy.decide(&call("s", "t", Effect::ReadOnly)),
                        Decision::Allow
                    );
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let stats = policy.ready_stats();
    assert_eq!(stats.from_ready + stats.inline, 200, "{stats:?}");
}

#[test]
fn dropping_a_policy_stops_its_worker_and_frees_its_instances() {
    // Eight pool slots: one ready instance per policy (an eighth). Were a dropped policy's
    // instances kept, the slots would run out within these rounds and a decision deny.
    let limits = GuestLimits {
        max_instances: 8,
        ready_instances: toolward::component::DEFAULT_READY_INSTANCES,
        ..GuestLimits::default()
    };
    let cache = tempfile::tempdir().unwrap();
    let host = ComponentHost::new(
        limits,
        Some(crate::support::cache_in(&cache.path().join("cache"))),
    )
    .unwrap();
    let bytes = std::fs::read(toolward::guests::FAULT_GUEST_WASM).unwrap();
    let component = host.load(&bytes, "fault-guest").unwrap();
    for _ in 0..12 {
        let policy = host.configure_policy(&component, "count").unwrap();
        wait_until_ready(&policy);
        assert_eq!(
            policy.decide(&call("s", "t", Effect::ReadOnly)),
            Decision::Allow
        );
        wait_until_ready(&policy);
    }
}

#[test]
fn malformed_answer_is_a_deny() {
    let component = host()
        .load(&nonsense_component_bytes(), "nonsense.wasm")
        .unwrap();
    let policy = host().configure_policy(&component, "").unwrap();
    assert_denied_with(
        policy.decide(&call("s", "t", Effect::ReadOnly)),
        "gave no valid answer: unexpected discriminant: 7",
    );
    next_decision_works();
}

#[test]
fn a_component_that_imports_anything_else_is_refused_naming_the_import() {
    // Outside WASI 0.2 (another version, an interface the host does not provide) and
    // outside any WASI: each refused, named.
    for import in [
        "wasi:cli/environment@0.3.0",
        "wasi:http/outgoing-handler@0.2.0",
        "env:host/clock@1.0.0",
    ] {
        let bytes = wat::parse_str(format!(
            r#"(component
                (import "{import}" (instance
                  (export "get-arguments" (func (result (list string))))))
            )"#
        ))
        .unwrap();
        let err = host().load(&bytes, "greedy.wasm").unwrap_err();
        assert!(
            matches!(&err, ComponentError::ForbiddenImport { import: named, .. } if named == import),
            "{err}"
        );
        assert!(err.to_string().contains(&format!("`{import}`")), "{err}");
    }
}

#[test]
fn a_wasi_0_2_import_of_a_later_patch_version_links_and_gets_nothing() {
    // `0.2.9`, as componentize-py 0.25.1 imports, where wasmtime-wasi 48 provides 0.2.12.
    let bytes = wat::parse_str(
        r#"(component
            (import "wasi:cli/environment@0.2.9" (instance $env
              (export "get-arguments" (func (result (list string))))))
        )"#,
    )
    .unwrap();
    let loaded = host().load(&bytes, "wasi.wasm").unwrap();
    assert!(loaded.imports_wasi());
    assert_eq!(
        toolward::component::wasi::grant_of("wasi:cli/environment@0.2.9"),
        "empty"
    );
}

/// The compiled entries (`.cwasm`) in the cache of the state folder `state`.
fn cache_entries(state: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut entries: Vec<_> = std::fs::read_dir(state.join(toolward::component::CACHE_FOLDER))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "cwasm"))
        .collect();
    entries.sort();
    entries
}

fn mac_of(entry: &std::path::Path) -> std::path::PathBuf {
    let mut name = entry.file_name().unwrap().to_owned();
    name.push(".mac");
    entry.with_file_name(name)
}

#[test]
fn compiled_component_cache_misses_then_hits_then_replaces_a_corrupted_entry() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let bytes = std::fs::read(toolward::guests::DEFAULT_POLICY_WASM).unwrap();

    let first = ComponentHost::new(
        GuestLimits::default(),
        Some(crate::support::cache_in(&state)),
    )
    .unwrap();
    assert_eq!(first.load(&bytes, "d").unwrap().cache(), CacheOutcome::Miss);
    assert_eq!(first.load(&bytes, "d").unwrap().cache(), CacheOutcome::Hit);
    let folder = state.join(toolward::component::CACHE_FOLDER);
    let mode = std::fs::metadata(&folder).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    let sha = toolward::canonical::sha256_hex(&bytes);
    let entry = cache_entries(&state)
        .into_iter()
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with(&sha))
        .unwrap();
    for file in [&entry, &mac_of(&entry)] {
        let mode = std::fs::metadata(file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{}", file.display());
    }

    // A new host (a later process) finds the entry; a corrupted entry is compiled again.
    let second = ComponentHost::new(
        GuestLimits::default(),
        Some(crate::support::cache_in(&state)),
    )
    .unwrap();
    assert_eq!(second.load(&bytes, "d").unwrap().cache(), CacheOutcome::Hit);
    std::fs::write(&entry, b"not a compiled component").unwrap();
    let replaced = second.load(&bytes, "d").unwrap();
    assert_eq!(replaced.cache(), CacheOutcome::Replaced);
    let policy = second.configure_policy(&replaced, "{}").unwrap();
    assert_eq!(
        policy.decide(&call("s", "t", Effect::ReadOnly)),
        Decision::Allow
    );
    assert_eq!(second.load(&bytes, "d").unwrap().cache(), CacheOutcome::Hit);

    // An entry without its MAC is compiled again, not trusted.
    std::fs::remove_file(mac_of(&entry)).unwrap();
    assert_eq!(
        second.load(&bytes, "d").unwrap().cache(),
        CacheOutcome::Replaced
    );
    assert_eq!(second.load(&bytes, "d").unwrap().cache(), CacheOutcome::Hit);
}

#[test]
fn an_allow_all_policy_compiled_and_planted_in_the_cache_is_not_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let destructive = call("s", "t", Effect::Destructive);

    // The attacker's allow-all policy (the fault guest without a mode allows every call),
    // compiled into a cache of their own: its component entry and its configured snapshot.
    let theirs = dir.path().join("attacker");
    let attacker = ComponentHost::new(
        GuestLimits::default(),
        Some(crate::support::cache_in(&theirs)),
    )
    .unwrap();
    let fault = std::fs::read(toolward::guests::FAULT_GUEST_WASM).unwrap();
    let allow_all = attacker.load(&fault, "allow-all").unwrap();
    let allow_all = attacker.configure_policy(&allow_all, "").unwrap();
    assert_eq!(allow_all.decide(&destructive), Decision::Allow);
    let fault_sha = toolward::canonical::sha256_hex(&fault);
    let (their_component, their_snapshot): (Vec<_>, Vec<_>) =
        cache_entries(&theirs).into_iter().partition(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(&fault_sha)
        });

    // The operator's default policy, compiled into the operator's cache once.
    let ours = dir.path().join("state");
    let bytes = std::fs::read(toolward::guests::DEFAULT_POLICY_WASM).unwrap();
    let operator = ComponentHost::new(
        GuestLimits::default(),
        Some(crate::support::cache_in(&ours)),
    )
    .unwrap();
    let policy = operator
        .configure_policy(&operator.load(&bytes, "default").unwrap(), "{}")
        .unwrap();
    assert_ne!(policy.decide(&destructive), Decision::Allow);
    drop(policy);

    // The attack: the allow-all entries, with their MACs, under the operator's names.
    let sha = toolward::canonical::sha256_hex(&bytes);
    for entry in cache_entries(&ours) {
        let is_component = entry
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with(&sha);
        let planted = if is_component {
            &their_component[0]
        } else {
            &their_snapshot[0]
        };
        std::fs::copy(planted, &entry).unwrap();
        std::fs::copy(mac_of(planted), mac_of(&entry)).unwrap();
    }

    // A later start: every planted entry fails its MAC, is compiled again, and the operator's
    // policy decides.
    let later = ComponentHost::new(
        GuestLimits::default(),
        Some(crate::support::cache_in(&ours)),
    )
    .unwrap();
    let loaded = later.load(&bytes, "default").unwrap();
    assert_eq!(loaded.cache(), CacheOutcome::Replaced);
    let policy = later.configure_policy(&loaded, "{}").unwrap();
    assert_eq!(policy.snapshot_cache(), CacheOutcome::Replaced);
    assert_ne!(policy.decide(&destructive), Decision::Allow);
}

#[test]
fn a_cache_folder_open_to_other_users_is_refused_with_the_fix() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let state = toolward::store::StateDir::open(&dir.path().join("state")).unwrap();
    let folder = state.path().join(toolward::component::CACHE_FOLDER);
    std::fs::create_dir(&folder).unwrap();
    std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o777)).unwrap();
    let err = toolward::component::ComponentCache::open(&state).unwrap_err();
    assert!(
        err.to_string().contains(&format!(
            "has mode 0777, which gives other users access: run `chmod 0700 {}`",
            folder.display()
        )),
        "{err}"
    );
}

#[test]
fn a_cache_folder_or_entry_of_another_owner_is_refused_with_the_fix() {
    let Some(other) = crate::support::other_user() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let state_path = dir.path().join("state");
    let bytes = std::fs::read(toolward::guests::DEFAULT_POLICY_WASM).unwrap();
    let host = ComponentHost::new(
        GuestLimits::default(),
        Some(crate::support::cache_in(&state_path)),
    )
    .unwrap();
    assert_eq!(host.load(&bytes, "d").unwrap().cache(), CacheOutcome::Miss);

    // An entry someone else owns: refused, not loaded and not silently replaced.
    let entry = cache_entries(&state_path).remove(0);
    std::os::unix::fs::chown(&entry, Some(other), None).unwrap();
    let err = host.load(&bytes, "d").unwrap_err().to_string();
    assert!(
        err.contains(&format!("`{}` is owned by uid {other}", entry.display()))
            && err.contains("run `chown 0"),
        "{err}"
    );
    std::os::unix::fs::chown(&entry, Some(0), None).unwrap();

    // The folder itself.
    let folder = state_path.join(toolward::component::CACHE_FOLDER);
    std::os::unix::fs::chown(&folder, Some(other), None).unwrap();
    let state = toolward::store::StateDir::open(&state_path).unwrap();
    let err = toolward::component::ComponentCache::open(&state)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!("`{}` is owned by uid {other}", folder.display())),
        "{err}"
    );
}

#[tokio::test]
async fn the_config_guest_section_bounds_the_components_and_a_refusal_names_the_key_to_raise() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("rules.json"),
        r#"{"servers": {"s": {"tools": {"echo": {"effect": "read-only"}}}}}"#,
    )
    .unwrap();
    let scenario = serde_json::json!({
        "pages": [r#"{"tools": [{"name": "echo", "description": "Echoes.", "inputSchema": {"type": "object"}}]}"#],
    });
    std::fs::write(dir.path().join("s.json"), scenario.to_string()).unwrap();
    let config = |guest: serde_json::Value| {
        toolward::config::Config::from_value(
            serde_json::json!({
                "mcpServers": {"s": {"command": crate::support::FAKE_SERVER, "args": ["s.json"]}},
                "rules": {"file": "rules.json"},
                "state_dir": "state",
                "guest": guest,
            }),
            dir.path(),
        )
        .unwrap()
    };
    let roomy = config(serde_json::json!({}));
    let pinned = toolward::pin::pin(&roomy, None, None, std::collections::BTreeMap::new())
        .await
        .unwrap();
    pinned.manifest.write(&roomy.manifest).unwrap();
    let starved = config(serde_json::json!({"configure_fuel": 1000}));
    assert_eq!(starved.guest.configure_fuel, 1000);
    let error = toolward::Toolward::start(starved)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("ran out of fuel (limit 1000 units; raise `guest.configure_fuel`"),
        "{error}"
    );
    // The same rules within the default limits: the start succeeds and registers the tool.
    let toolward = toolward::Toolward::start(roomy).await.unwrap();
    assert!(toolward.call_path().registry().get("s__echo").is_some());
}

/// Rules with a limit of each kind on `fs`'s `write_file` and on the server, the tool's
/// verdict and the limits' counts from the test.
fn limited_rules(verdict: &str, limits: [u64; 4]) -> String {
    let [fm, fh, hm, hh] = limits;
    serde_json::json!({"servers": {"fs": {
        "limits": {"forwarded_per_hour": fh, "held_per_minute": hm},
        "tools": {"write_file": {"effect": "local-change", "decision": verdict,
            "limits": {"forwarded_per_minute": fm, "held_per_hour": hh}}}}}})
    .to_string()
}

mod facts_agree {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(16))]

        /// The default component and the native table (`Rules::decide_with_facts`) decide alike
        /// on any limits and any facts, missing and malformed ones included.
        #[test]
        fn the_guest_and_the_native_table_decide_identically_on_any_facts(
            verdict in proptest::sample::select(vec!["allow", "hold", "deny"]),
            limits in proptest::array::uniform4(0u64..6),
            counts in proptest::collection::vec(
                proptest::option::of(proptest::prop_oneof![
                    (0u64..8).prop_map(|n| n.to_string()),
                    proptest::sample::select(vec!["-1".to_owned(), "01".to_owned(), "1.5".to_owned()]),
                ]),
                8,
            ),
        ) {
            let rules = limited_rules(verdict, limits);
            let policy = host().configure_policy(&default_component(), &rules).unwrap();
            let native = toolward_policy_table::Rules::parse(&rules).unwrap();
            let names = [
                "tool.forwarded.minute", "tool.forwarded.hour", "tool.held.minute", "tool.held.hour",
                "server.forwarded.minute", "server.forwarded.hour", "server.held.minute", "server.held.hour",
            ];
            let facts: Vec<(String, String)> = names
                .iter()
                .zip(&counts)
                .filter_map(|(name, count)| count.clone().map(|count| ((*name).to_owned(), count)))
                .collect();
            let mut view = call("fs", "write_file", Effect::LocalChange);
            view.facts = facts.clone();
            let pairs: Vec<(&str, &str)> =
                facts.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
            proptest::prop_assert_eq!(
                policy.decide(&view),
                native.decide_with_facts("fs", "write_file", Effect::LocalChange, &pairs)
            );
        }
    }
}
