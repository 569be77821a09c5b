//! The operator's first hour on the command line: `init`, `client connect`/`disconnect`,
//! `pin --tool`, `audit show`/`tail`/`replay`, and the accept command `check` prints. The
//! work is in the library (`init`, `client_config`, `pin::tool`, `audit::read`,
//! `audit::replay`); here are the terminal and the exit codes.

use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, anyhow};
use serde_json::Value;

use crate::audit::read::{self as audit_read, Filter};
use crate::client_config::{self, Outcome};
use crate::component::{ComponentHost, GuestLimits};
use crate::config::rewrite::Foreign;
use crate::manifest::Manifest;

use super::{
    AuditFilterArgs, ClientCommand, EXIT_FAILURE, EXIT_FOUND, Failure, failure, open_state,
    read_component, read_config, usage,
};

/// The config at `path` for commands that start no server (`client`, `audit show`,
/// `tail`, `replay`): a `${VAR}` that is not set reads as empty, since only the servers'
/// `env` and `headers` use them and the secrets may live in the client's config alone.
fn read_config_for_files(path: &Path) -> Result<crate::config::Config, Failure> {
    let text = std::fs::read(path)
        .with_context(|| format!("config `{}`", path.display()))
        .map_err(usage)?;
    let value: Value = serde_json::from_slice(crate::config::operator_file::without_bom(&text))
        .with_context(|| format!("config `{}`", path.display()))
        .map_err(usage)?;
    let folder = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let base = std::path::absolute(folder).map_err(failure)?;
    crate::config::Config::from_value_with_env(value, &base, &|name| {
        Ok(std::env::var(name).unwrap_or_default())
    })
    .with_context(|| format!("config `{}`", path.display()))
    .map_err(usage)
}

/// The user's home folder (`HOME`): where the clients keep their configs.
fn home() -> Result<std::path::PathBuf, Failure> {
    std::env::var_os("HOME")
        .map(std::path::PathBuf::from)
        .ok_or_else(|| {
            usage(anyhow!(
                "`HOME` is not set: cannot find the clients' configs"
            ))
        })
}

/// `toolward init`.
pub(super) async fn init(
    dir: &Path,
    clients: &[String],
    servers: &[String],
    yes: bool,
    list: bool,
) -> Result<ExitCode, Failure> {
    for id in clients {
        if client_config::client_by_id(id).is_none() {
            return Err(usage(anyhow!(
                "unknown client `{id}` (expected one of {})",
                ids()
            )));
        }
    }
    let project = std::env::current_dir().map_err(failure)?;
    let survey = crate::init::survey(&home()?, &project, clients, servers).map_err(usage)?;
    out!("{}", survey.render())?;
    if list {
        return Ok(ExitCode::SUCCESS);
    }
    if survey.candidates.is_empty() {
        return Err(usage(anyhow!(
            "nothing to import{}",
            if clients.is_empty() && servers.is_empty() {
                ""
            } else {
                " with these `--client`/`--server`"
            }
        )));
    }
    let chosen = if yes {
        survey.candidates
    } else if std::io::stdin().is_terminal() {
        crate::init::ask(survey.candidates).map_err(failure)?
    } else {
        return Err(usage(anyhow!(
            "no terminal to ask on: pass `--yes` to import the servers listed (choose with `--client` and `--server`)"
        )));
    };
    let report = crate::init::write(dir, &chosen).await.map_err(usage)?;
    for (client, names) in crate::init::by_client(&report) {
        let names: Vec<String> = names.iter().map(|n| crate::text::escape(n)).collect();
        outln!("imported from {client}: {}", names.join(", "))?;
    }
    if !report.variables.is_empty() {
        outln!(
            "secrets stay in the client's config: `{}` refers to {} (moved into the toolward entry by `client connect`)",
            report.config.display(),
            report
                .variables
                .iter()
                .map(|v| format!("${{{v}}}"))
                .collect::<Vec<_>>()
                .join(", ")
        )?;
    }
    for renamed in &report.renamed {
        outln!(
            "server `{}`'s {} `{}` is `${{{}}}`, not `${{{}}}`: that name is another secret's, and each secret has its own",
            crate::text::escape(&renamed.server),
            if renamed.place == "headers" {
                "header"
            } else {
                "env variable"
            },
            crate::text::escape(&renamed.key),
            renamed.variable,
            renamed.wanted
        )?;
    }
    for place in &report.secret_looking {
        errln!(
            "toolward: warning: {place} looks like it holds a secret; it is copied into `{}` (0600) as it is: move it into the server's `env` and refer to it as `${{VAR}}`",
            report.config.display()
        );
    }
    for failure in &report.failures {
        errln!("toolward: not pinned: {failure}");
    }
    let config = report.config.display();
    for server in &report.needs_sign_in {
        outln!(
            "server `{}` needs sign-in (it answered `401`): not pinned yet; run `toolward auth login {server} --config {config}`, then `toolward pin --config {config}`, and `toolward check --config {config} --suggest-rules` lists its tools to classify",
            crate::text::escape(server)
        )?;
    }
    outln!(
        "wrote `{config}`, `{}` ({} tools pinned) and `{}` (every tool unclassified)",
        report.manifest.display(),
        report.tools,
        report.rules.display()
    )?;
    outln!(
        "audit arguments are recorded (`audit.record_arguments`) so `toolward audit replay` can re-decide calls; set it to false to keep them out of the log"
    )?;
    outln!("next:")?;
    outln!(
        "  1. classify each tool in `{}`: replace \"unclassified\" with read-only | local-change | remote-change | destructive",
        report.rules.display()
    )?;
    outln!("  2. toolward check --config {config}")?;
    let first = report.servers.first().map_or("CLIENT", |(_, c)| *c);
    outln!("  3. toolward client connect {first} --config {config}")?;
    Ok(if report.failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_FAILURE)
    })
}

fn ids() -> String {
    client_config::KNOWN_CLIENTS
        .iter()
        .map(|c| c.id)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The flag that accepts a client's file others can change ([`super::SharedFileArg`]).
const ACCEPT_SHARED_FILE: &str = "--accept-shared-file";

/// `toolward client connect|disconnect`.
pub(super) fn client(config_path: &Path, command: ClientCommand) -> Result<ExitCode, Failure> {
    let config = read_config_for_files(config_path)?;
    let (id, shared) = match &command {
        ClientCommand::Connect { client, shared }
        | ClientCommand::Disconnect { client, shared } => (client, shared),
    };
    let foreign = if shared.accept_shared_file {
        Foreign::Accept
    } else {
        Foreign::RefuseUnless(ACCEPT_SHARED_FILE)
    };
    let spec = client_config::client_by_id(id)
        .ok_or_else(|| usage(anyhow!("unknown client `{id}` (expected one of {})", ids())))?;
    match command {
        ClientCommand::Connect { .. } => {
            let project = std::env::current_dir().map_err(failure)?;
            let path = client_config::client_path(spec, &home()?, &project);
            if !path.is_file() {
                return Err(usage(anyhow!(
                    "no config of `{id}` at `{}`",
                    path.display()
                )));
            }
            let absolute = std::fs::canonicalize(config_path).map_err(failure)?;
            let raw: Value = serde_json::from_slice(
                &std::fs::read(config_path)
                    .with_context(|| format!("config `{}`", config_path.display()))
                    .map_err(usage)?,
            )
            .map_err(usage)?;
            let servers = raw
                .get("mcpServers")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            let toolward = client_config::Toolward {
                program: std::env::current_exe().map_err(failure)?,
                config: absolute,
                servers,
                state_dir: config.state_dir.clone(),
            };
            match client_config::connect(spec, &path, &toolward, foreign).map_err(usage)? {
                Outcome::Changed(replaced) => {
                    outln!(
                        "`{}` now starts toolward in place of: {}",
                        path.display(),
                        replaced.join(", ")
                    )?;
                    outln!(
                        "its tools are now named `server__tool` (`{}__…`): per-tool allow-lists the client keeps must use the new names; restart {} to pick it up",
                        replaced.first().map_or("server", String::as_str),
                        spec.name
                    )?;
                    outln!(
                        "undo with: toolward client disconnect {id} --config {}",
                        config_path.display()
                    )?;
                }
                _ => outln!(
                    "`{}` already starts toolward: nothing changed",
                    path.display()
                )?,
            }
        }
        ClientCommand::Disconnect { .. } => {
            match client_config::disconnect(spec, &config.state_dir, foreign).map_err(usage)? {
                Outcome::Restored => outln!("restored `{id}`'s config as it was before connect")?,
                Outcome::Undone(names) => outln!(
                    "`{id}`'s config changed since connect: removed the toolward entry and put back {}; the rest is as the client left it",
                    names.join(", ")
                )?,
                _ => outln!("nothing to undo")?,
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// For each tool `check` refused because it changed since the pin, the command that
/// accepts it (after showing its diff).
pub(super) fn accept_commands(report: &crate::load::LoadReport, config: &Path) -> String {
    let mut out = String::new();
    for server in &report.servers {
        let mut seen = Vec::new();
        for refusal in &server.refused {
            if refusal.reason.contains("changed since the pin") && !seen.contains(&&refusal.tool) {
                seen.push(&refusal.tool);
                out.push_str(&format!(
                    "  accept `{}/{}`: toolward pin --config {} --tool {}/{}\n",
                    server.server,
                    crate::text::escape(&refusal.tool),
                    config.display(),
                    server.server,
                    crate::text::escape(&refusal.tool)
                ));
            }
        }
    }
    out
}

/// `toolward pin --tool SERVER/TOOL`.
pub(super) async fn pin_tool(
    config_path: &Path,
    given: &str,
    yes: bool,
    dry_run: bool,
) -> Result<ExitCode, Failure> {
    let (server, tool) = crate::pin::tool::parse_server_tool(given).map_err(usage)?;
    let config = read_config(config_path)?;
    let state = open_state(&config)?;
    let components = crate::load::prepare_components(&config, config.guest.clone(), Some(&state))
        .map_err(usage)?;
    let crate::pin::tool::ToolChange { updated, diff, .. } =
        crate::pin::tool::tool_change(&config, server, tool, components.digests)
            .await
            .map_err(|error| match error {
                crate::pin::tool::ToolPinError::NotListed { .. } => failure(error),
                other => usage(other),
            })?;
    if diff.is_empty() {
        outln!("tool `{tool}` of server `{server}` matches its pin: nothing to accept")?;
        return Ok(ExitCode::SUCCESS);
    }
    outln!("{diff}")?;
    if dry_run {
        return Ok(ExitCode::SUCCESS);
    }
    if !yes {
        if !std::io::stdin().is_terminal() {
            return Err(usage(anyhow!(
                "no terminal to ask on: pass `--yes` to accept this change"
            )));
        }
        err!("accept this change of `{server}/{tool}`? [y/N] ");
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map_err(failure)?;
        if !line.trim().eq_ignore_ascii_case("y") {
            outln!("not accepted; the pins are unchanged")?;
            return Ok(ExitCode::from(EXIT_FOUND));
        }
    }
    write_manifest(&updated, &config.manifest)?;
    outln!(
        "re-pinned `{server}/{tool}` in `{}`; every other pin is unchanged",
        config.manifest.display()
    )?;
    Ok(ExitCode::SUCCESS)
}

fn write_manifest(manifest: &Manifest, path: &Path) -> Result<(), Failure> {
    manifest.write(path).map_err(failure)
}

fn filter_of(args: &AuditFilterArgs) -> Result<Filter, Failure> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0);
    let time = |t: &Option<String>| {
        t.as_deref()
            .map(|t| audit_read::parse_time(t, now))
            .transpose()
            .map_err(usage)
    };
    let decision = match args.decision.as_deref() {
        None => None,
        Some("allow") => Some(crate::audit::AuditDecision::Allow),
        Some("deny") => Some(crate::audit::AuditDecision::Deny),
        Some("hold") => Some(crate::audit::AuditDecision::Hold),
        Some(other) => {
            return Err(usage(anyhow!(
                "`--decision {other}`: expected allow, deny or hold"
            )));
        }
    };
    Ok(Filter {
        since_ms: time(&args.since)?,
        until_ms: time(&args.until)?,
        server: args.server.clone(),
        tool: args.tool.clone(),
        principal: args.principal.clone(),
        decision,
        call_id: args.call_id.clone(),
    })
}

/// Where the log at `file` no longer matches its head in the config's state folder (cut short,
/// its last records rewritten or the file replaced): the check `audit verify --config` and
/// `serve` make, which the chain alone cannot (a log cut after a record is a valid chain).
/// `None` when it matches or no head was written yet; a head that cannot be read is reported.
fn head_mismatch(config: &crate::config::Config) -> Option<String> {
    let file = &config.audit.file;
    let state = match crate::store::StateDir::open(&config.state_dir) {
        Ok(state) => state,
        Err(e) => return Some(format!("its head cannot be checked: {e}")),
    };
    let (head, head_path) = match crate::audit::read_head(&state, file) {
        Ok((Some(head), path)) => (head, path),
        Ok((None, _)) => return None,
        Err(e) => return Some(format!("its head cannot be read: {e}")),
    };
    match crate::audit::verify_with_head(file, &head) {
        Ok((_, None)) => None,
        Ok((_, Some(problem))) => Some(format!(
            "does not match its head `{}` ({head}): {problem}",
            head_path.display()
        )),
        Err(e) => Some(format!("its head cannot be checked: {e}")),
    }
}

/// Says where the log does not match its head, on standard error; whether it did not.
fn report_head_mismatch(config: &crate::config::Config, config_path: &Path) -> bool {
    match head_mismatch(config) {
        None => false,
        Some(problem) => {
            errln!(
                "toolward: `{}` {problem}; what is shown may be cut short or rewritten (`toolward audit verify --config {}`)",
                config.audit.file.display(),
                config_path.display()
            );
            true
        }
    }
}

fn print_record(
    record: &crate::audit::AuditRecord,
    raw: &Value,
    json: bool,
) -> Result<(), Failure> {
    if json {
        outln!("{}", crate::text::escape_json(&raw.to_string()))
    } else {
        outln!("{}", audit_read::render_row(record))
    }
}

/// The reader of the config's PostgreSQL chain, when `store.postgres` names one.
async fn pg_reader(
    config: &crate::config::Config,
    config_path: &Path,
) -> Result<Option<crate::store::postgres::audit::Reader>, Failure> {
    let crate::config::StoreConfig::Postgres { url, .. } = &config.store else {
        return Ok(None);
    };
    let store = super::pg_store(url, config_path)?;
    crate::store::postgres::audit::Reader::open(&store)
        .await
        .map(Some)
        .map_err(failure)
}

/// Says where the database's chain breaks or does not end at its head row, on standard
/// error; whether it does.
fn report_pg_problem(
    read: &crate::store::postgres::audit::ReadRecords,
    store: &str,
    config_path: &Path,
) -> bool {
    let problem = match (&read.first_break, &read.head_problem) {
        (Some(brk), _) => format!("chain broken at {brk}; nothing past it is shown"),
        (None, Some(problem)) => {
            format!("{problem}; what is shown may be cut short or rewritten")
        }
        (None, None) => return false,
    };
    errln!(
        "toolward: {store}: {problem} (`toolward audit verify --config {}`)",
        config_path.display()
    );
    true
}

/// `toolward audit show` on a PostgreSQL store: the chain read in one snapshot with its
/// head row.
async fn audit_show_pg(
    mut reader: crate::store::postgres::audit::Reader,
    config_path: &Path,
    filter: &Filter,
    json: bool,
) -> Result<ExitCode, Failure> {
    let read = reader.read_new().await.map_err(failure)?;
    if !json {
        outln!("{}", audit_read::TABLE_HEADER)?;
    }
    let mut shown = 0usize;
    for (record, raw) in read.records.iter().filter(|(r, _)| filter.matches(r)) {
        print_record(record, raw, json)?;
        shown += 1;
    }
    if !json {
        outln!("{shown} of {} records match", read.records.len())?;
    }
    let store = format!("PostgreSQL store {}", reader.store_name());
    Ok(if report_pg_problem(&read, &store, config_path) {
        ExitCode::from(EXIT_FOUND)
    } else {
        ExitCode::SUCCESS
    })
}

/// `toolward audit tail [-f]` on a PostgreSQL store: the database asked for new records
/// every [`audit_read::FOLLOW_POLL_MS`].
async fn audit_tail_pg(
    mut reader: crate::store::postgres::audit::Reader,
    config_path: &Path,
    (follow, lines): (bool, usize),
    filter: &Filter,
    json: bool,
) -> Result<ExitCode, Failure> {
    let store = format!("PostgreSQL store {}", reader.store_name());
    let read = reader.read_new().await.map_err(failure)?;
    if !json {
        outln!("{}", audit_read::TABLE_HEADER)?;
    }
    let problem = report_pg_problem(&read, &store, config_path);
    for (record, raw) in audit_read::last_matching(read.records, filter, lines) {
        print_record(&record, &raw, json)?;
    }
    if !follow || read.first_break.is_some() {
        return Ok(if problem {
            ExitCode::from(EXIT_FOUND)
        } else {
            ExitCode::SUCCESS
        });
    }
    loop {
        tokio::time::sleep(std::time::Duration::from_millis(audit_read::FOLLOW_POLL_MS)).await;
        let read = reader.read_new().await.map_err(failure)?;
        for (record, raw) in read.records.iter().filter(|(r, _)| filter.matches(r)) {
            print_record(record, raw, json)?;
        }
        if read.first_break.is_some() {
            report_pg_problem(&read, &store, config_path);
            return Ok(ExitCode::from(EXIT_FOUND));
        }
    }
}

/// `toolward audit show`: the config's PostgreSQL store when it names one, else its log.
pub(super) async fn audit_show(
    config_path: &Path,
    args: &AuditFilterArgs,
    json: bool,
) -> Result<ExitCode, Failure> {
    let config = read_config_for_files(config_path)?;
    let filter = filter_of(args)?;
    if let Some(reader) = pg_reader(&config, config_path).await? {
        return audit_show_pg(reader, config_path, &filter, json).await;
    }
    let shown = audit_read::show(&config.audit.file, &filter).map_err(failure)?;
    if !json {
        outln!("{}", audit_read::TABLE_HEADER)?;
    }
    for (record, raw) in &shown.records {
        print_record(record, raw, json)?;
    }
    if !json {
        outln!("{} of {} records match", shown.records.len(), shown.read)?;
    }
    match &shown.first_break {
        None if report_head_mismatch(&config, config_path) => Ok(ExitCode::from(EXIT_FOUND)),
        None => Ok(ExitCode::SUCCESS),
        Some(brk) => {
            errln!(
                "toolward: `{}`: chain broken at {brk}; nothing past it is shown (`toolward audit verify --config {}`)",
                config.audit.file.display(),
                config_path.display()
            );
            Ok(ExitCode::from(EXIT_FOUND))
        }
    }
}

/// `toolward audit tail [-f]`: the config's PostgreSQL store when it names one, else its
/// log.
pub(super) async fn audit_tail(
    config_path: &Path,
    follow: bool,
    lines: usize,
    args: &AuditFilterArgs,
    json: bool,
) -> Result<ExitCode, Failure> {
    let config = read_config_for_files(config_path)?;
    let filter = filter_of(args)?;
    if let Some(reader) = pg_reader(&config, config_path).await? {
        return audit_tail_pg(reader, config_path, (follow, lines), &filter, json).await;
    }
    let path = &config.audit.file;
    let mut follower = audit_read::Follower::new(path);
    let broken = |e: audit_read::ReadError| {
        errln!("toolward: `{}`: {e}", path.display());
        Ok(ExitCode::from(EXIT_FOUND))
    };
    let first = match follower.poll() {
        Ok(records) => records,
        Err(e @ audit_read::ReadError::Audit(_)) => return Err(failure(e)),
        Err(e) => return broken(e),
    };
    if !json {
        outln!("{}", audit_read::TABLE_HEADER)?;
    }
    for (record, raw) in audit_read::last_matching(first, &filter, lines) {
        print_record(&record, &raw, json)?;
    }
    // A log cut after a record, or rewritten at its end, is still a chain: only the head
    // tells. Checked once, on what was there at the start.
    let mismatch = report_head_mismatch(&config, config_path);
    if !follow {
        return Ok(if mismatch {
            ExitCode::from(EXIT_FOUND)
        } else {
            ExitCode::SUCCESS
        });
    }
    loop {
        std::thread::sleep(std::time::Duration::from_millis(audit_read::FOLLOW_POLL_MS));
        match follower.poll() {
            Ok(records) => {
                for (record, raw) in records.iter().filter(|(r, _)| filter.matches(r)) {
                    print_record(record, raw, json)?;
                }
            }
            Err(e @ audit_read::ReadError::Audit(_)) => return Err(failure(e)),
            Err(e) => return broken(e),
        }
    }
}

/// `toolward audit replay`.
pub(super) fn audit_replay(
    config_path: &Path,
    policy: &str,
    settings: Option<&Path>,
    json: bool,
) -> Result<ExitCode, Failure> {
    let config = read_config_for_files(config_path)?;
    // A `.cedar` file is policies for the built-in Cedar component: its settings text, as
    // `policy test` takes it.
    let is_cedar = Path::new(policy)
        .extension()
        .is_some_and(|e| e == crate::cedar::CEDAR_EXTENSION);
    // A config read from a file names its rules by a file.
    let rules_file = config
        .rules
        .text
        .file()
        .map(Path::to_path_buf)
        .ok_or_else(|| usage(anyhow!("the config's rules are not in a file")))?;
    let settings_path = if is_cedar {
        PathBuf::from(policy)
    } else {
        match (settings, &config.policy.settings) {
            (Some(path), _) => path.to_path_buf(),
            (None, Some(crate::config::TextSource::File(path))) => path.clone(),
            (None, Some(other)) => {
                return Err(usage(anyhow!(
                    "`policy.settings` is `{other}`, not a file: give the settings to replay with as a file, `--settings FILE`"
                )));
            }
            (None, None) => rules_file.clone(),
        }
    };
    let mut settings_text = crate::policy_test::read_text(
        &settings_path,
        "policy settings",
        crate::config::operator_file::MAX_SETTINGS_BYTES,
    )
    .map_err(usage)?;
    if is_cedar && config.rules.component.is_none() {
        // With the reviews, levels and tools' `returns` of the config's rules file, as the
        // gateway configures the Cedar component.
        let rules = crate::policy_test::read_text(
            &rules_file,
            "rules file",
            crate::config::operator_file::MAX_RULES_BYTES,
        )
        .map_err(usage)?;
        settings_text = crate::cedar::settings(&settings_text, Some(&rules));
    }
    let bytes = if is_cedar {
        crate::component::CEDAR_COMPONENT.to_vec()
    } else {
        read_component(policy, Some(&settings_text))?
    };
    let host = ComponentHost::new(GuestLimits::default(), None).map_err(failure)?;
    let loaded = host.load(&bytes, policy).map_err(usage)?;
    let configured = host
        .configure_policy(&loaded, &settings_text)
        .with_context(|| format!("settings `{}`", settings_path.display()))
        .map_err(usage)?;
    let report = crate::audit::replay::replay(&config.audit.file, &configured).map_err(failure)?;
    let mismatch = report_head_mismatch(&config, config_path);
    if json {
        let text = serde_json::to_string_pretty(&report).map_err(failure)?;
        outln!("{text}")?;
    } else {
        outln!(
            "replaying `{}` under `{policy}` (sha256 {}) with settings `{}`",
            config.audit.file.display(),
            loaded.sha256(),
            settings_path.display()
        )?;
        out!("{}", report.render())?;
    }
    Ok(if report.first_break.is_some() || mismatch {
        ExitCode::from(EXIT_FOUND)
    } else {
        ExitCode::SUCCESS
    })
}
