//! With the `internals` feature only (this workspace's tests and benches): builds every
//! guest component of the workspace from source in nested cargo runs, for
//! `wasm32-unknown-unknown`, linked by the `wasm-component-ld` that ships with rustc, so that
//! `cargo test --workspace` needs no manual step. As wasmtime's
//! `test-programs/artifacts/build.rs` does, the nested cargo gets a `CARGO_TARGET_DIR` of its
//! own and no inherited `RUSTFLAGS`. That folder is `guests/` in the outer target folder,
//! shared by every build of this crate (tests, clippy, each set of features): each used to
//! build the guests again under its own `OUT_DIR`, 784 MB and half a minute to a minute
//! apiece, four times in a CI run.
//!
//! The library itself embeds the prebuilt components of `host/guests/` (see its README), so
//! an embedder's build runs no nested wasm build. The tests compare those files with what
//! this script builds (`the_prebuilt_guests_are_what_their_sources_build`), and the test
//! fixtures exist only here.
//!
//! Emits `guests.rs` into `OUT_DIR` with one `&str` constant per guest: the path of its
//! `.wasm`.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// (package, constant name) for each guest built here, in groups: each group is one cargo
/// run. Cedar builds alone because cargo unifies the features of the dependencies of one
/// run: built with the others, its dependencies changed the default component's bytes, and
/// so its SHA-256 pinned in manifests.
const GUESTS: &[&[(&str, &str)]] = &[
    &[
        ("toolward-guest-policy", "DEFAULT_POLICY_WASM"),
        ("toolward-fault-guest", "FAULT_GUEST_WASM"),
        ("toolward-example-custom-policy", "CUSTOM_POLICY_WASM"),
    ],
    &[("toolward-guest-cedar", "CEDAR_POLICY_WASM")],
];

/// The `opt-level` of each group of [`GUESTS`], in order. The small guests are built for
/// size (`"s"`), which keeps the default component's bytes, and so its SHA-256, as they
/// were. Cedar is built for speed: measured in one run (BENCHMARKS.md §9.4), `3` against
/// `"s"` took a decision with 10 policies from 57.9 to 53.0 µs and the configure of 1,000
/// policies from 8.2 to 5.1 s, for 0.63 MB more component (5.08 MB).
const OPT_LEVELS: [&str; 2] = ["s", "3"];

/// The guest built only with the library's `cedar` feature.
const CEDAR_PACKAGE: &str = "toolward-guest-cedar";

const WASM_TARGET: &str = "wasm32-unknown-unknown";

fn main() {
    if let Err(message) = run() {
        println!("cargo::error={message}");
        std::process::exit(1);
    }
}

/// Rust flags that take this machine's paths out of the guests: a panic location in a
/// dependency names its source file, under cargo's home, which differs between machines,
/// and the component's SHA-256 (pinned in manifests) would differ with it. The checkout is
/// mapped to `/toolward`, cargo's home to `/cargo` (the toolchain's own sources are
/// already `/rustc/…`), and the guests' own target folder to `/guests`: a dependency's
/// generated code (Cedar's parser, under its build script's `OUT_DIR`) is named by a path
/// inside that folder, which sits under this crate's `OUT_DIR`, whose hash differs between
/// a test build, a plain build and a clippy run. rustc applies the last prefix that matches,
/// so the target folder, inside the checkout, comes last. Flags separated by 0x1f, as
/// `CARGO_ENCODED_RUSTFLAGS` wants.
fn remap_paths(root: &Path, target_dir: &Path) -> String {
    let mut homes: Vec<PathBuf> = Vec::new();
    if let Some(home) = env::var_os("CARGO_HOME") {
        homes.push(PathBuf::from(home));
    }
    if let Some(home) = env::var_os("HOME") {
        homes.push(PathBuf::from(home).join(".cargo"));
    }
    let mut flags = vec![format!("--remap-path-prefix={}=/toolward", root.display())];
    for home in homes {
        flags.push(format!("--remap-path-prefix={}=/cargo", home.display()));
        if let Ok(real) = home.canonicalize() {
            flags.push(format!("--remap-path-prefix={}=/cargo", real.display()));
        }
    }
    flags.push(format!(
        "--remap-path-prefix={}=/guests",
        target_dir.display()
    ));
    flags.join("\u{1f}")
}

fn run() -> Result<(), String> {
    println!("cargo::rerun-if-changed=build.rs");
    if env::var_os("CARGO_FEATURE_INTERNALS").is_none() {
        return Ok(());
    }
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").map_err(|e| e.to_string())?);
    let root = manifest_dir
        .parent()
        .ok_or("the host crate has no parent directory")?
        .to_path_buf();
    let out_dir = PathBuf::from(env::var("OUT_DIR").map_err(|e| e.to_string())?);
    let target_dir = guests_target_dir(&out_dir);

    for watched in [
        "wit",
        "guest-policy",
        "guest-cedar",
        "docs/toolward.cedarschema",
        "policy-table",
        "result-review",
        "tests/fault-guest",
        "examples/custom-policy",
        "Cargo.lock",
    ] {
        println!("cargo::rerun-if-changed={}", root.join(watched).display());
    }

    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let linker = component_linker(&rustc)?;

    // The Cedar guest only for a library built with its `cedar` feature.
    let cedar = env::var_os("CARGO_FEATURE_CEDAR").is_some();
    let wanted = |package: &str| cedar || package != CEDAR_PACKAGE;
    for (group, opt_level) in GUESTS.iter().zip(OPT_LEVELS) {
        if !group.iter().any(|(package, _)| wanted(package)) {
            continue;
        }
        build_group(
            group,
            opt_level,
            &[],
            &[],
            &root,
            &target_dir,
            &cargo,
            &linker,
        )?;
    }
    // The default component again with its result reviews, in a target folder of its own
    // (same package, other features): the variant `load` picks for rules that name reviews.
    let reviewing_dir = target_dir.join("reviewing");
    build_group(
        &[("toolward-guest-policy", "REVIEWING_POLICY_WASM")],
        REVIEWING_OPT_LEVEL,
        &["toolward-guest-policy/reviews"],
        REVIEWING_RUSTFLAGS,
        &root,
        &reviewing_dir,
        &cargo,
        &linker,
    )?;

    let mut constants = String::new();
    let reviewing = [(
        "toolward-guest-policy",
        "REVIEWING_POLICY_WASM",
        &reviewing_dir,
    )];
    let built = GUESTS
        .iter()
        .copied()
        .flatten()
        .filter(|(package, _)| wanted(package))
        .map(|(package, constant)| (*package, *constant, &target_dir))
        .chain(reviewing);
    for (package, constant, target_dir) in built {
        let file = target_dir
            .join(WASM_TARGET)
            .join("release")
            .join(format!("{}.wasm", package.replace('-', "_")));
        if !file.is_file() {
            return Err(format!(
                "the guest `{package}` built no `{}`",
                file.display()
            ));
        }
        constants.push_str(&format!(
            "/// Path of the `{package}` component, built by `host/build.rs`.\npub const {constant}: &str = {:?};\n",
            file.display().to_string()
        ));
    }
    std::fs::write(out_dir.join("guests.rs"), constants).map_err(|e| e.to_string())?;
    Ok(())
}

/// The guests' target folder: `guests/` in the target folder cargo builds this crate in,
/// found as the nearest ancestor of `OUT_DIR` that holds cargo's `CACHEDIR.TAG`, or under
/// `OUT_DIR` when none does. Cargo's file lock on that folder orders two builds that run
/// at once, and the paths' remapping (`/guests`) keeps the components' bytes the same.
fn guests_target_dir(out_dir: &Path) -> PathBuf {
    out_dir
        .ancestors()
        .skip(1)
        .find(|folder| folder.join("CACHEDIR.TAG").is_file())
        .map_or_else(|| out_dir.join("guests"), |target| target.join("guests"))
}

/// The `opt-level` of the reviewing variant of the default component: built for speed, as
/// Cedar is, since a review reads every byte of a result with each of its patterns.
const REVIEWING_OPT_LEVEL: &str = "3";

/// Rust flags of the reviewing variant alone: 128-bit SIMD, so that `memchr` (the prefilters
/// of the result reviews' searches) runs its vector code in the guest rather than its scalar
/// fallback, and loops over bytes may be vectorized. wasmtime compiles SIMD by default on
/// x86_64 and aarch64; an engine without it refuses the component when it loads it, which
/// fails closed.
const REVIEWING_RUSTFLAGS: &[&str] = &["-Ctarget-feature=+simd128"];

/// One nested cargo run building the guests of `group` for [`WASM_TARGET`] at `opt_level`,
/// with `features` (`package/feature`) and Rust flags `rustflags` besides the paths' remapping.
#[expect(
    clippy::too_many_arguments,
    reason = "one build script's helper, called twice"
)]
fn build_group(
    group: &[(&str, &str)],
    opt_level: &str,
    features: &[&str],
    rustflags: &[&str],
    root: &Path,
    target_dir: &Path,
    cargo: &str,
    linker: &Path,
) -> Result<(), String> {
    let mut encoded_rustflags = remap_paths(root, target_dir);
    for flag in rustflags {
        encoded_rustflags.push('\u{1f}');
        encoded_rustflags.push_str(flag);
    }
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root)
        .arg("build")
        .arg("--release")
        .arg("--target")
        .arg(WASM_TARGET)
        .arg("--manifest-path")
        .arg(root.join("Cargo.toml"));
    for (package, _) in group {
        cmd.arg("-p").arg(package);
    }
    for feature in features {
        cmd.arg("--features").arg(feature);
    }
    cmd.env("CARGO_TARGET_DIR", target_dir)
        .env("CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER", linker)
        .env("CARGO_PROFILE_RELEASE_OPT_LEVEL", opt_level)
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        .env("CARGO_PROFILE_RELEASE_PANIC", "abort")
        .env("CARGO_PROFILE_RELEASE_STRIP", "debuginfo")
        .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "1")
        .env_remove("RUSTFLAGS")
        .env("CARGO_ENCODED_RUSTFLAGS", encoded_rustflags)
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("RUSTC_WRAPPER")
        .env_remove("CARGO_BUILD_TARGET");
    let status = cmd
        .status()
        .map_err(|e| format!("cannot run `{cargo}` to build the guest components: {e}"))?;
    if !status.success() {
        return Err(format!(
            "building the guest components for `{WASM_TARGET}` failed ({status}); is the target \
             installed? `rustup target add {WASM_TARGET}`"
        ));
    }

    Ok(())
}

/// The `wasm-component-ld` in the toolchain's sysroot: it links the core module with
/// `wasm-ld` and turns it into a component from the WIT that wit-bindgen embedded.
fn component_linker(rustc: &str) -> Result<PathBuf, String> {
    let output = Command::new(rustc)
        .args(["--print", "sysroot"])
        .output()
        .map_err(|e| format!("cannot run `{rustc} --print sysroot`: {e}"))?;
    let sysroot = String::from_utf8(output.stdout).map_err(|e| e.to_string())?;
    let host = env::var("HOST").map_err(|e| e.to_string())?;
    let exe = if cfg!(windows) {
        "wasm-component-ld.exe"
    } else {
        "wasm-component-ld"
    };
    let linker = Path::new(sysroot.trim())
        .join("lib/rustlib")
        .join(host)
        .join("bin")
        .join(exe);
    if linker.is_file() {
        Ok(linker)
    } else {
        Err(format!(
            "`{}` is missing: the toolchain ships it from Rust 1.82 on",
            linker.display()
        ))
    }
}
