//! Checks the floors table of the crate docs (`lib.rs`) against the modules' imports.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Each module's floor, read from the `| N | a, b | … |` rows of `lib.rs`'s docs.
fn floors(lib: &str) -> BTreeMap<String, usize> {
    let mut floors = BTreeMap::new();
    for line in lib.lines() {
        let Some(row) = line.strip_prefix("//! | ") else {
            continue;
        };
        let mut cells = row.split(" | ");
        let (Some(floor), Some(modules)) = (cells.next(), cells.next()) else {
            continue;
        };
        let Ok(floor) = floor.trim().parse::<usize>() else {
            continue;
        };
        for module in modules.split(',') {
            floors.insert(module.trim().to_owned(), floor);
        }
    }
    floors
}

/// The crate modules named by `crate::NAME` in `text`, outside comments and the file's
/// `#[cfg(test)] mod tests`.
fn imports(text: &str) -> BTreeSet<String> {
    // An inline test module is cut off (it ends the file by convention); a declared one
    // (`mod tests;`) is a file of its own, skipped by `sources`.
    let code = text
        .split("#[cfg(test)]\nmod tests {")
        .next()
        .unwrap_or(text);
    let mut found = BTreeSet::new();
    for line in code
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
    {
        for (at, _) in line.match_indices("crate::") {
            let rest = &line[at + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            if !name.is_empty() {
                found.insert(name);
            }
            if let Some(group) = rest.strip_prefix('{') {
                let group = group.split('}').next().unwrap_or("");
                for item in group.split(',') {
                    let name = item.trim().split("::").next().unwrap_or("");
                    if name.chars().next().is_some_and(|c| c.is_ascii_lowercase()) {
                        found.insert(name.to_owned());
                    }
                }
            }
        }
    }
    found
}

fn sources(folder: &Path, into: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(folder).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if path.file_name().is_some_and(|name| name != "tests") {
                sources(&path, into);
            }
        } else if path.extension().is_some_and(|e| e == "rs")
            && path.file_name().is_some_and(|name| name != "tests.rs")
        {
            into.push((
                path.display().to_string(),
                std::fs::read_to_string(&path).unwrap(),
            ));
        }
    }
}

#[test]
fn every_module_imports_only_from_lower_floors() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let floors = floors(&std::fs::read_to_string(src.join("lib.rs")).unwrap());
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut problems = Vec::new();
    for (path, text) in &files {
        let relative = Path::new(path).strip_prefix(&src).unwrap();
        let top = relative
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_owned();
        // `tls_fixture` is a test fixture (the TLS server of the `ca_file` tests), in no floor.
        if ["lib", "main", "cli", "floors", "tls_fixture"].contains(&top.as_str()) {
            continue;
        }
        let Some(&floor) = floors.get(&top) else {
            problems.push(format!("module `{top}` has no floor in lib.rs's table"));
            continue;
        };
        for import in imports(text) {
            if import == top {
                continue;
            }
            match floors.get(&import) {
                Some(&below) if below < floor => {}
                Some(&other) => problems.push(format!(
                    "{path}: `{top}` (floor {floor}) imports `{import}` (floor {other})"
                )),
                None => {}
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn an_import_of_a_higher_floor_is_found() {
    let floors = floors("//! | 0 | text, ids | x |\n//! | 1 | call | y |\n");
    assert_eq!(floors.get("ids"), Some(&0));
    assert_eq!(floors.get("call"), Some(&1));
    let found = imports(
        "use crate::{call::CallPath, text};\n#[cfg(test)]\nmod tests;\n// crate::load\nfn f() { crate::ids::new_ulid(); }\n#[cfg(test)]\nmod tests { use crate::start; }\n",
    );
    assert_eq!(
        found.into_iter().collect::<Vec<_>>(),
        ["call", "ids", "text"]
    );
}
