use super::*;

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _, symlink};
use std::os::unix::process::CommandExt as _;

/// The uid of the second, non-root OS user the swaps run as when the tests run as root.
const NOBODY: u32 = 65534;

const FLAG: &str = "--accept-shared-file";

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn mode_of(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

fn is_root() -> bool {
    crate::identity::euid() == 0
}

/// Runs `script` with `sh` in `dir`, as `nobody` when the tests run as root (as whoever runs
/// them otherwise): the other local user who can write the folder.
fn as_other_user(dir: &Path, script: &str) {
    let mut command = std::process::Command::new("sh");
    command.arg("-c").arg(script).current_dir(dir);
    if is_root() {
        command.uid(NOBODY).gid(NOBODY);
    }
    let status = command.status().unwrap();
    assert!(status.success(), "{script}");
}

/// A folder `name` in `dir` the other user owns (as root) or anyone can write (otherwise),
/// `dir` made searchable for them.
fn shared_folder(dir: &Path, name: &str) -> PathBuf {
    set_mode(dir, 0o755);
    let folder = dir.join(name);
    std::fs::create_dir(&folder).unwrap();
    if is_root() {
        std::os::unix::fs::chown(&folder, Some(NOBODY), Some(NOBODY)).unwrap();
    } else {
        set_mode(&folder, 0o777);
    }
    folder
}

#[test]
fn a_file_linked_from_a_dotfiles_folder_is_rewritten_at_its_target_and_stays_linked() {
    let dir = tempfile::tempdir().unwrap();
    let dotfiles = dir.path().join("dotfiles");
    let home = dir.path().join("home");
    std::fs::create_dir_all(&dotfiles).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    let target = dotfiles.join("claude.json");
    std::fs::write(&target, "{}").unwrap();
    set_mode(&target, 0o640);
    let link = home.join("claude.json");
    // Relative, as stow makes them.
    symlink("../dotfiles/claude.json", &link).unwrap();
    let mut file = HeldFile::open(&link, Foreign::RefuseUnless(FLAG)).unwrap();
    assert_eq!(file.target(), dotfiles.join("claude.json"));
    assert_eq!(file.read(100).unwrap(), b"{}");
    file.replace(b"{\"new\": 1}", 0o600).unwrap();
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(std::fs::read(&target).unwrap(), b"{\"new\": 1}");
    assert_eq!(mode_of(&target), 0o640);
    let leftovers: Vec<_> = std::fs::read_dir(&dotfiles)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers, ["claude.json"]);
}

/// Another user's link is refused even when the operator accepts a shared file (found by an
/// attack: it led `connect --accept-shared-file` to the operator's private `~/.claude.json`),
/// and the refusal names no flag, since none accepts it.
#[test]
fn a_link_another_user_owns_is_refused_even_with_the_flag_which_the_refusal_does_not_offer() {
    if !is_root() {
        eprintln!("SKIPPED: needs root, to give the link to uid 65534");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("real.json");
    std::fs::write(&target, "{}").unwrap();
    let link = dir.path().join(".mcp.json");
    symlink(&target, &link).unwrap();
    std::os::unix::fs::lchown(&link, Some(NOBODY), Some(NOBODY)).unwrap();
    let error = HeldFile::open(&link, Foreign::RefuseUnless(FLAG))
        .unwrap_err()
        .to_string();
    assert_eq!(
        error,
        format!(
            "`{}` is a symbolic link owned by uid 65534, not by uid 0 that toolward runs as nor by root: whoever owns it chooses which file toolward writes over; nothing was written",
            link.display()
        )
    );
    let error = HeldFile::open(&link, Foreign::Accept)
        .unwrap_err()
        .to_string();
    assert!(error.contains("owned by uid 65534"), "{error}");
}

#[test]
fn a_link_on_the_way_to_the_folder_is_checked_as_a_link_at_the_file_is() {
    // Found by an attack: `~/.config` linked into a shared folder, where another user's link
    // led on to a folder of root's, whose client file `client connect` then rewrote.
    if !is_root() {
        eprintln!("SKIPPED: needs root, to give the link to uid 65534");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let shared = shared_folder(dir.path(), "shared");
    let victim = dir.path().join("victim/Claude");
    std::fs::create_dir_all(&victim).unwrap();
    std::fs::write(victim.join("config.json"), "{\"root\": 1}").unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    symlink(shared.join("cfg"), home.join(".config")).unwrap();
    as_other_user(&shared, &format!("ln -s {} cfg", dir.path().join("victim").display()));
    let named = home.join(".config/Claude/config.json");
    let error = HeldFile::open(&named, Foreign::RefuseUnless(FLAG))
        .unwrap_err()
        .to_string();
    assert!(
        error.contains(&format!(
            "the folder `{}` holding `{}` is owned by uid 65534",
            shared.display(),
            shared.join("cfg").display()
        )) && !error.contains(FLAG),
        "{error}"
    );
    // The flag accepts the file and its folder, never a folder on the way.
    assert!(HeldFile::open(&named, Foreign::Accept).is_err());
    assert_eq!(
        std::fs::read(victim.join("config.json")).unwrap(),
        b"{\"root\": 1}"
    );
    // The operator's own link on the way (a dotfile manager's) is followed.
    std::fs::create_dir(dir.path().join("real")).unwrap();
    std::fs::write(dir.path().join("real/config.json"), "{}").unwrap();
    symlink(dir.path().join("real"), home.join("linked")).unwrap();
    let mut file = HeldFile::open(&home.join("linked/config.json"), Foreign::Refuse).unwrap();
    assert_eq!(file.target(), dir.path().join("real/config.json"));
    file.read(100).unwrap();
    file.replace(b"{\"new\": 1}", 0o600).unwrap();
    assert_eq!(
        std::fs::read(dir.path().join("real/config.json")).unwrap(),
        b"{\"new\": 1}"
    );
}

#[test]
fn a_link_of_roots_in_a_folder_another_user_owns_is_refused() {
    // Found by a third attack: the folder's owner moved one of root's links into the place
    // of another (a folder's owner can rename what is in it), and `client connect` rewrote
    // the root-owned file the moved link led to.
    if !is_root() {
        eprintln!("SKIPPED: needs root, to give the folder to uid 65534");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let theirs = shared_folder(dir.path(), "theirs");
    std::os::unix::fs::chown(&theirs, Some(NOBODY), Some(NOBODY)).unwrap();
    set_mode(&theirs, 0o755);
    let victim = dir.path().join("victim");
    std::fs::create_dir(&victim).unwrap();
    std::fs::write(victim.join("config.json"), "{}").unwrap();
    symlink(&victim, theirs.join(".config")).unwrap();
    let error = HeldFile::open(&theirs.join(".config/config.json"), Foreign::RefuseUnless(FLAG))
        .unwrap_err()
        .to_string();
    assert!(
        error.contains(&format!("the folder `{}`", theirs.display()))
            && error.contains("owned by uid 65534")
            && !error.contains(FLAG),
        "{error}"
    );
    // Nor with the flag: it accepts the file and the folder holding it, not the way there.
    assert!(HeldFile::open(&theirs.join(".config/config.json"), Foreign::Accept).is_err());
}

#[test]
fn a_folder_group_or_others_can_write_is_refused_naming_it_and_the_fix_but_a_sticky_one_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("project");
    std::fs::create_dir(&folder).unwrap();
    let path = folder.join(".mcp.json");
    std::fs::write(&path, "{}").unwrap();
    for mode in [0o775, 0o757, 0o777] {
        set_mode(&folder, mode);
        let error = HeldFile::open(&path, Foreign::RefuseUnless(FLAG))
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            format!(
                "the folder `{0}` holding `{1}` is mode {mode:04o}: whoever else can write it can swap the file for a link to any other; nothing was written; review it, then run `chmod go-w {0}`, or pass `{FLAG}` to write it anyway",
                folder.display(),
                path.display()
            )
        );
        HeldFile::open(&path, Foreign::Accept).unwrap();
    }
    set_mode(&folder, 0o1777);
    HeldFile::open(&path, Foreign::RefuseUnless(FLAG)).unwrap();
}

#[test]
fn a_file_group_or_others_can_write_or_another_user_owns_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("manifest.json");
    std::fs::write(&path, "{}").unwrap();
    set_mode(&path, 0o664);
    let error = HeldFile::open(&path, Foreign::Refuse)
        .unwrap_err()
        .to_string();
    assert_eq!(
        error,
        format!(
            "`{0}` has mode 0664: group or others can write it; nothing was written; review it, then run `chmod go-w {0}`",
            path.display()
        )
    );
    set_mode(&path, 0o644);
    if is_root() {
        std::os::unix::fs::chown(&path, Some(NOBODY), None).unwrap();
        let error = HeldFile::open(&path, Foreign::RefuseUnless(FLAG))
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with(&format!("`{}` is owned by uid 65534", path.display()))
                && error.ends_with(&format!("or pass `{FLAG}` to write it anyway")),
            "{error}"
        );
    }
}

#[test]
fn set_user_id_and_set_group_id_bits_are_not_carried_to_the_rewritten_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hook.sh");
    std::fs::write(&path, "#!/bin/sh\n").unwrap();
    set_mode(&path, 0o6755);
    assert_eq!(mode_of(&path), 0o6755);
    let mut file = HeldFile::open(&path, Foreign::Refuse).unwrap();
    file.read(100).unwrap();
    file.replace(b"#!/bin/sh\necho new\n", 0o600).unwrap();
    assert_eq!(mode_of(&path), 0o755);
    assert_eq!(std::fs::read(&path).unwrap(), b"#!/bin/sh\necho new\n");
}

#[test]
fn a_file_swapped_for_a_link_after_the_read_is_not_written_and_the_link_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let folder = shared_folder(dir.path(), "project");
    let path = folder.join(".mcp.json");
    std::fs::write(&path, "{\"mcpServers\": {}}").unwrap();
    set_mode(&path, 0o644);
    let victim = dir.path().join("victim.sh");
    std::fs::write(&victim, "#!/bin/sh\necho victim\n").unwrap();
    set_mode(&victim, 0o755);
    let mut file = HeldFile::open(&path, Foreign::Accept).unwrap();
    file.read(1000).unwrap();
    // The other user, who can write the folder, swaps the file for a link to the victim.
    as_other_user(
        &folder,
        &format!(
            "mv .mcp.json .mcp.json.read && ln -s {} .mcp.json",
            victim.display()
        ),
    );
    let error = file.replace(b"{\"written\": true}", 0o600).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "`{}` changed since toolward read it (another file or a link is in its place): nothing was written; check what changed it, then run the command again",
            path.display()
        )
    );
    assert_eq!(std::fs::read(&victim).unwrap(), b"#!/bin/sh\necho victim\n");
    assert_eq!(mode_of(&victim), 0o755);
    assert!(
        std::fs::symlink_metadata(&path)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    // Another regular file in its place is refused as well.
    as_other_user(&folder, "rm .mcp.json && echo '{}' > .mcp.json");
    assert!(matches!(
        file.replace(b"{}", 0o600),
        Err(RewriteError::Changed { .. })
    ));
}

#[test]
fn a_file_swapped_for_a_link_between_open_and_read_is_not_read_through_the_link() {
    let dir = tempfile::tempdir().unwrap();
    let folder = shared_folder(dir.path(), "project");
    let path = folder.join(".mcp.json");
    std::fs::write(&path, "{}").unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "secret").unwrap();
    let mut file = HeldFile::open(&path, Foreign::Accept).unwrap();
    as_other_user(
        &folder,
        &format!("rm -f .mcp.json && ln -s {} .mcp.json", secret.display()),
    );
    assert!(matches!(file.read(100), Err(RewriteError::Changed { .. })));
}

#[test]
fn a_chain_of_links_is_followed_up_to_the_limit_and_refused_past_it() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("file");
    std::fs::write(&target, "{}").unwrap();
    let mut previous = target.clone();
    for i in 0..=MAX_LINKS {
        let link = dir.path().join(format!("link{i}"));
        symlink(&previous, &link).unwrap();
        previous = link;
    }
    let within = dir.path().join(format!("link{}", MAX_LINKS - 1));
    assert_eq!(
        HeldFile::open(&within, Foreign::Refuse).unwrap().target(),
        target
    );
    let error = HeldFile::open(&previous, Foreign::Refuse)
        .unwrap_err()
        .to_string();
    assert_eq!(
        error,
        format!(
            "`{}` leads through more than {MAX_LINKS} symbolic links: toolward follows at most {MAX_LINKS}; point it at the file",
            previous.display()
        )
    );
}

#[test]
fn a_new_file_is_not_written_over_a_link_or_a_file_put_at_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("toolward.json");
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "victim").unwrap();
    let mut file = HeldFile::open(&path, Foreign::Refuse).unwrap();
    assert!(!file.exists());
    symlink(&victim, &path).unwrap();
    let error = file.create_new(b"{}", 0o600).unwrap_err();
    assert!(matches!(error, RewriteError::Exists { .. }), "{error}");
    assert_eq!(std::fs::read(&victim).unwrap(), b"victim");
    // A rewrite of a name that held nothing refuses what appeared there.
    let mut other = HeldFile::open(&dir.path().join("rules.json"), Foreign::Refuse).unwrap();
    std::fs::write(dir.path().join("rules.json"), "planted").unwrap();
    assert!(matches!(
        other.replace(b"{}", 0o644),
        Err(RewriteError::Changed { .. })
    ));
    std::fs::remove_file(&path).unwrap();
    let mut file = HeldFile::open(&path, Foreign::Refuse).unwrap();
    file.create_new(b"{}", 0o600).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"{}");
    assert_eq!(mode_of(&path) & 0o077, 0);
}
