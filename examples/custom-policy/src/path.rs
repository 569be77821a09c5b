//! Whether a path argument stays inside `write_root`, decided lexically.
//!
//! The component has no filesystem (it is pure), so it cannot resolve symlinks: it
//! normalises the text the way a POSIX path resolver would walk it, with no link in the
//! way. Empty and `.` components are dropped (so `//srv//sandbox/./a` is
//! `/srv/sandbox/a`), `..` drops the component before it (and stays at `/` at the root),
//! and the result must be `write_root` or below it. A symlink inside `write_root` that
//! points out of it is the server's to refuse (the reference filesystem server resolves
//! links against its own allowed directories).
//!
//! A relative path is taken relative to `write_root`: the operator starts the server with
//! `write_root` as its working directory (or as its only allowed directory). So
//! `a/../../x` is `/srv/x`, which leaves `/srv/sandbox`.
//!
//! Some texts are refused outright, because a server may read them differently than a
//! POSIX resolver would:
//! - a backslash (a separator on Windows, a name character on Linux: either reading can
//!   be the escaping one);
//! - a leading `~` (servers expand it to a home directory);
//! - a `file:` URL (servers that accept one strip the scheme);
//! - an empty path, a NUL or another control character.

/// `Ok` when `path` resolves to `root` or below it; otherwise the fault.
///
/// `root` is absolute and already normalised (see [`normalise`]).
pub(crate) fn check(root: &str, path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("the path is empty".to_owned());
    }
    if path.chars().any(|c| c == '\\' || c.is_control()) {
        return Err(format!(
            "path `{}` holds a backslash or a control character, which servers read differently",
            path.escape_debug()
        ));
    }
    if path.starts_with('~') {
        return Err(format!(
            "path `{path}` starts with `~`, which servers expand to a home directory"
        ));
    }
    if path
        .get(..5)
        .is_some_and(|p| p.eq_ignore_ascii_case("file:"))
    {
        return Err(format!("path `{path}` is a `file:` URL, not a path"));
    }
    let resolved = normalise(root, path);
    if within(root, &resolved) {
        Ok(())
    } else {
        Err(format!(
            "path `{path}` resolves to `{resolved}`, which leaves the write root `{root}`"
        ))
    }
}

/// The lexical normal form of `path`, taken relative to `base` when it is not absolute:
/// absolute, no empty, `.` or `..` components, no trailing `/` (except for `/` itself).
pub(crate) fn normalise(base: &str, path: &str) -> String {
    let mut out = String::with_capacity(base.len() + path.len() + 1);
    if !path.starts_with('/') {
        push_components(&mut out, base);
    }
    push_components(&mut out, path);
    if out.is_empty() {
        out.push('/');
    }
    out
}

/// Appends the components of `path` to `out`, which holds `/`-prefixed components (empty
/// meaning the root).
fn push_components(out: &mut String, path: &str) {
    for component in path.split('/') {
        match component {
            "" | "." => {}
            ".." => {
                let parent = out.rfind('/').unwrap_or(0);
                out.truncate(parent);
            }
            name => {
                out.push('/');
                out.push_str(name);
            }
        }
    }
}

/// Whether the normalised `path` is the normalised `root` or below it. A prefix of a name
/// does not count: `/srv/sandbox2` is not inside `/srv/sandbox`.
fn within(root: &str, path: &str) -> bool {
    if root == "/" {
        return true;
    }
    match path.strip_prefix(root) {
        Some(rest) => rest.is_empty() || rest.starts_with('/'),
        None => false,
    }
}
