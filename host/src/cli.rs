//! Command-line interface of the `toolward` binary.
// Output goes through `out!`, `outln!`, `err!` and `errln!` (see below).
#![deny(clippy::print_stdout, clippy::print_stderr)]

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context as _, anyhow};
use clap::{Parser, Subcommand};

use crate::approval::{
    AnsweredBy, ApprovalAnswer, ApprovalRequest, Channel, FnApprover, current_os_user,
};
use crate::component::{ComponentCache, ComponentHost, GuestLimits};
use crate::config::Config;
use crate::load;
use crate::manifest::Manifest;
use crate::store::StateDir;

// What the commands print goes through these, never `print!` or `eprint!` (denied above):
// those panic when the write fails, and it fails as soon as the reader of a pipe is gone
// (`toolward audit show | head -1`). SIGPIPE stays ignored, as Rust sets it, so a gateway
// (`serve`, `console`) whose client or server went away gets an error to handle, and only
// the printing commands stop.

/// `print!` to standard output, as a `Result<(), Failure>` (see [`write_stdout`]).
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::write_stdout(format_args!($($arg)*), false)
    };
}

/// `println!` to standard output, as a `Result<(), Failure>` (see [`write_stdout`]).
macro_rules! outln {
    () => {
        $crate::cli::write_stdout(format_args!(""), true)
    };
    ($($arg:tt)*) => {
        $crate::cli::write_stdout(format_args!($($arg)*), true)
    };
}

/// `eprint!` that cannot panic (see [`write_stderr`]).
macro_rules! err {
    ($($arg:tt)*) => {
        $crate::cli::write_stderr(format_args!($($arg)*), false)
    };
}

/// `eprintln!` that cannot panic (see [`write_stderr`]).
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::cli::write_stderr(format_args!($($arg)*), true)
    };
}

#[cfg(feature = "http-upstream")]
mod auth;
mod checkpoints;
mod first_hour;
mod registries;

use first_hour::{audit_replay, audit_show, audit_tail, client, init, pin_tool};

/// Exit code: the command ran and found something refused, broken or failing.
const EXIT_FOUND: u8 = 1;
/// Exit code: a usage or config error.
const EXIT_USAGE: u8 = 2;
/// Exit code: a runtime failure.
const EXIT_FAILURE: u8 = 3;
/// Exit code: standard output's reader went away (`EPIPE`) and the command stopped: 141,
/// 128 + SIGPIPE, the status a shell shows for `cat` or `ls` in `… | head -1`.
const EXIT_READER_GONE: u8 = 141;

/// How long the command's end waits for work left on the async runtime's blocking pool
/// (1 s): an audit write of a call the end cancelled (an `fdatasync`, milliseconds), and
/// nothing more, except a read of a terminal, which never ends and is left behind.
const BLOCKING_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// Puts the tools of third-party MCP servers behind an operator's policy.
///
/// Exit codes: 0 success; 1 something was refused (check), a chain is broken (audit
/// verify) or a call returned a tool error (call); 2 usage or config error; 3 runtime
/// failure; 141 standard output's reader went away (`… | head -1`).
#[derive(Debug, Parser)]
#[command(name = "toolward", version, about, long_about = None)]
struct Cli {
    /// Log filter for stderr (`error`, `warn`, `info`, `debug`, or a tracing filter).
    #[arg(long, global = true, default_value = "warn", env = "TOOLWARD_LOG")]
    log: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Connect to each server, list its tools and write the manifest the operator reviews.
    ///
    /// When a manifest exists, shows what changes before writing it.
    ///
    /// Example: `toolward pin --config toolward.json --tool fs/read_file` accepts the
    /// changed description of one tool after showing its diff.
    Pin {
        /// The config file.
        #[arg(long, short, default_value = "toolward.json")]
        config: PathBuf,
        /// Re-pin only this server; the others keep their pins.
        #[arg(long, conflicts_with = "tool")]
        server: Option<String>,
        /// Re-pin only this tool (`SERVER/TOOL`) after showing its diff: what `check` prints
        /// for a tool refused because it changed. Every other pin stays as it was.
        #[arg(long, value_name = "SERVER/TOOL")]
        tool: Option<String>,
        /// With `--tool`: accept without asking (needed without a terminal).
        #[arg(long, short, requires = "tool")]
        yes: bool,
        /// Show what would change, write nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Load every server against the manifest and report what registers and what is
    /// refused, and why (exit 1 when anything is refused).
    Check {
        /// The config file.
        #[arg(long, short, default_value = "toolward.json")]
        config: PathBuf,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// Print a rules skeleton for the unclassified tools, with their hints and
        /// descriptions; the effect is left for the operator to choose.
        #[arg(long)]
        suggest_rules: bool,
    },
    /// Serve the registered tools as an MCP server on stdio: what an MCP client starts in
    /// place of the real servers. With `--listen`, over streamable HTTP instead.
    ///
    /// Over HTTP every request needs `Authorization: Bearer TOKEN` (a token of
    /// `listen.tokens`, or the one generated into the state folder at first start), and a
    /// request whose `Origin` is not in `listen.allowed_origins` is answered 403.
    Serve {
        /// The config file.
        #[arg(long, short, default_value = "toolward.json")]
        config: PathBuf,
        /// Serve streamable HTTP on this address (`127.0.0.1:8080`; port 0 picks one) at
        /// `/mcp`, instead of stdio. Prints the URL and where the token is on stderr.
        #[arg(long, value_name = "ADDR")]
        listen: Option<std::net::SocketAddr>,
        /// Accept a `--listen` address that is not loopback (the token is then the only
        /// thing between the network and the tools).
        #[arg(long, requires = "listen")]
        listen_non_loopback: bool,
    },
    /// Make one call through the whole path from a terminal; a held call asks for approval
    /// on the terminal (answer `y` to approve). Exit 1 when the result is a tool error.
    Call {
        /// The config file.
        #[arg(long, short, default_value = "toolward.json")]
        config: PathBuf,
        /// The tool's exposed name (`server__tool`).
        tool: String,
        /// The arguments, a JSON object.
        #[arg(long, default_value = "{}")]
        args: String,
        /// Print the whole result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Sign in to HTTP servers that ask for it (OAuth 2.1), see the grants, sign out.
    ///
    /// Grants are kept in the state folder, encrypted; `serve`, `check` and `pin` use them
    /// and renew them, and never ask anything: a server that needs sign-in is reported
    /// with the command to run.
    #[cfg(feature = "http-upstream")]
    Auth {
        /// The config file (its `state_dir` holds the grants).
        #[arg(long, short, global = true, default_value = "toolward.json")]
        config: PathBuf,
        #[command(subcommand)]
        command: auth::AuthCommand,
    },
    /// Serve the web console: the held calls of the state folder's queue, answered from a
    /// browser, and the audit log with its chain's state. Sign in with a token of
    /// `listen.tokens` (or the generated token file): the token's name is the user, recorded
    /// as the answerer through the channel `console`; or, with `console.oidc` in the config,
    /// with the OpenID provider it names.
    ///
    /// Example: `toolward console --config toolward.json --listen 127.0.0.1:8443`
    Console {
        /// The config file (its `state_dir` holds the queue, `audit.file` the log).
        #[arg(long, short, default_value = "toolward.json")]
        config: PathBuf,
        /// The address to serve on (port 0 picks one); the URL is printed on stderr.
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8443")]
        listen: std::net::SocketAddr,
        /// Accept a `--listen` address that is not loopback.
        #[arg(long)]
        listen_non_loopback: bool,
        /// An origin the console is also reached at, through a TLS proxy
        /// (`https://console.example`); repeatable. With an https origin, cookies are `Secure`.
        #[arg(long = "public-origin", value_name = "URL")]
        public_origins: Vec<String>,
        /// Post each newly held call, refused tool and break of the audit chain to this URL as
        /// JSON, signed with `--notify-secret-file` in `X-Toolward-Signature` (https; http only
        /// to a loopback IP); repeatable, added to the config's `notify.webhooks`.
        #[arg(long = "notify-webhook", value_name = "URL")]
        notify_webhooks: Vec<String>,
        /// Post the same to this Slack incoming webhook; repeatable, added to the config's
        /// `notify.slack`.
        #[arg(long = "notify-slack", value_name = "URL")]
        notify_slack: Vec<String>,
        /// The key of the webhooks' HMAC-SHA256 signature: a file, its content trimmed
        /// (instead of the config's `notify.secret_file`).
        #[arg(long = "notify-secret-file", value_name = "FILE")]
        notify_secret_file: Option<PathBuf>,
        /// Put the call's arguments in the notifications.
        #[arg(long)]
        notify_arguments: bool,
        /// Post to targets that resolve to private addresses.
        #[arg(long)]
        notify_allow_private: bool,
        /// Post each new signed checkpoint of the audit log (`audit.checkpoint`), so it is
        /// kept off this machine: the state folder's latest, or each fleet gateway's.
        #[arg(long)]
        notify_checkpoints: bool,
    },
    /// Held calls waiting for a person (when the client cannot ask through elicitation).
    Approvals {
        /// The config file (its `state_dir` holds the queue).
        #[arg(long, short, global = true, default_value = "toolward.json")]
        config: PathBuf,
        #[command(subcommand)]
        command: ApprovalsCommand,
    },
    /// Verify an audit log's hash chain and report the first break (exit 1).
    Audit {
        #[command(subcommand)]
        command: AuditCommand,
    },
    /// The PostgreSQL store of a fleet (`store.postgres`).
    Store {
        #[command(subcommand)]
        command: StoreCommand,
    },
    /// Policy components: inspect one, or test one against decision cases.
    Policy {
        #[command(subcommand)]
        command: PolicyCommand,
    },
    /// Find the MCP client configs on this machine, import their servers into a new
    /// `toolward.json`, pin them, and write `rules.json` listing every tool unclassified.
    ///
    /// Secret `env` values stay in the client's config (`toolward.json` names them
    /// `${VAR}`); nothing of a client is edited (that is `client connect`). Without a
    /// terminal, give `--yes` (with `--client`/`--server` to choose).
    ///
    /// Example: `toolward init --client claude-desktop --server fs --yes`
    Init {
        /// The folder to write `toolward.json`, `rules.json`, `manifest.json` and `state/` in.
        #[arg(long, default_value = ".")]
        dir: PathBuf,
        /// Import from this client only (repeatable): claude-desktop, claude-code, project,
        /// cursor, vscode, windsurf, zed, codex, gemini. A project's `.mcp.json` is read only
        /// when named.
        #[arg(long, value_name = "CLIENT")]
        client: Vec<String>,
        /// Import only this server (repeatable), by its name in the client.
        #[arg(long, value_name = "NAME")]
        server: Vec<String>,
        /// Import every server chosen by `--client` and `--server` without asking.
        #[arg(long, short)]
        yes: bool,
        /// List the clients and their servers, write nothing.
        #[arg(long)]
        list: bool,
    },
    /// Point an MCP client at toolward: `connect` rewrites its config to start `toolward
    /// serve` in place of the servers toolward imported; `disconnect` undoes that.
    ///
    /// Example: `toolward client connect claude-desktop --config toolward.json`
    Client {
        /// The toolward config.
        #[arg(long, short, global = true, default_value = "toolward.json")]
        config: PathBuf,
        #[command(subcommand)]
        command: ClientCommand,
    },
    /// Internal: how toolward starts a stdio server confined by Landlock. Restricts this
    /// process (every `--deny` withheld, TCP denied with `--deny-tcp`), then executes
    /// PROGRAM; exit 126 when it cannot. `--probe` only restricts and prints the ABI.
    #[command(name = "__confine", hide = true)]
    Confine {
        /// A path to withhold (repeatable).
        #[arg(long, value_name = "PATH")]
        deny: Vec<PathBuf>,
        /// A path to grant even beneath a withheld one (repeatable).
        #[arg(long, value_name = "PATH")]
        allow: Vec<PathBuf>,
        /// A device node to grant beside the standard ones (repeatable).
        #[arg(long, value_name = "PATH")]
        device: Vec<PathBuf>,
        /// Deny TCP `bind` and `connect`.
        #[arg(long)]
        deny_tcp: bool,
        /// Start the server in user, mount and PID namespaces with every `--deny` covered.
        #[arg(long)]
        namespaces: bool,
        /// A network namespace of its own (with `--namespaces`).
        #[arg(long)]
        deny_network: bool,
        /// Restrict, print `landlock-abi N` and exit.
        #[arg(long)]
        probe: bool,
        /// The program and its arguments.
        #[arg(last = true, value_parser = clap::value_parser!(std::ffi::OsString))]
        command: Vec<std::ffi::OsString>,
    },
}

#[derive(Debug, Subcommand)]
enum ApprovalsCommand {
    /// List the held calls.
    List {
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Approve one held call, once, for exactly its arguments.
    Approve {
        /// The call id (from `list`).
        id: String,
    },
    /// Deny one held call.
    Deny {
        /// The call id (from `list`).
        id: String,
        /// Why, for the model and the audit log.
        #[arg(long)]
        reason: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
enum StoreCommand {
    /// Create the schema, or bring an older one to this toolward's version, and grant each
    /// role of docs/fleet.md (`toolward_gateway`, `toolward_approver`, `toolward_auditor`)
    /// what it needs. Run it as the role that owns the tables, before the first gateway
    /// starts and after each upgrade of toolward; running it again changes nothing. Every
    /// other command runs no DDL and refuses a schema that is missing or older.
    ///
    /// Then it checks the tables for drift: privileges beyond docs/fleet.md's (to `PUBLIC`, to
    /// other roles, more columns, grant options), row-level security and policies, rules, and
    /// triggers it did not make. Each finding is a line `drift: TABLE: WHAT: SQL`, the SQL
    /// removing it when run as the owner, and any finding exits 1 (the migration itself is
    /// kept) unless `--accept-drift`.
    ///
    /// Example: `toolward store migrate --config toolward.json`
    Migrate {
        /// The config file (its `store.postgres`).
        #[arg(long, short, default_value = "toolward.json")]
        config: PathBuf,
        /// Exit 0 even when the tables hold more than the contract (the findings are still
        /// printed): for a grant, policy, rule or trigger the operator added on purpose.
        #[arg(long)]
        accept_drift: bool,
    },
}

#[derive(Debug, Subcommand)]
enum ClientCommand {
    /// Rewrite CLIENT's config to start toolward in place of the servers it manages; every
    /// other key, comment and server stays. A backup goes to `<state_dir>/clients/`; running
    /// it again changes nothing.
    ///
    /// Tool names change to `server__tool`: a client's per-tool allow-lists must follow.
    ///
    /// Example: `toolward client connect vscode --config ~/toolward/toolward.json`
    Connect {
        /// The client (claude-desktop, claude-code, project, cursor, vscode, windsurf, zed,
        /// codex, gemini).
        client: String,
        #[command(flatten)]
        shared: SharedFileArg,
    },
    /// Undo `connect`: restores CLIENT's file byte for byte when nothing changed it since,
    /// otherwise removes the toolward entry and puts the replaced servers back.
    ///
    /// Example: `toolward client disconnect claude-desktop --config toolward.json`
    Disconnect {
        /// The client.
        client: String,
        #[command(flatten)]
        shared: SharedFileArg,
    },
}

/// The flag of `client connect` and `disconnect` that accepts a client's file others can
/// change.
#[derive(Debug, clap::Args)]
struct SharedFileArg {
    /// Write CLIENT's file even when it or the folder holding it is another user's or
    /// writable by group or others (a shared project's `.mcp.json`). Without it such a file
    /// is refused, naming it and why. Never accepted, with it or not: a symbolic link another
    /// user owns or one in a folder others can write, at the file or on the way, or a folder
    /// on the way others can write. Either way the file is reached once, through its folder,
    /// and not written if another file or a link took its place since it was read.
    #[arg(long = "accept-shared-file")]
    accept_shared_file: bool,
}

/// The filters of `audit show` and `audit tail`.
#[derive(Debug, clap::Args)]
struct AuditFilterArgs {
    /// Records at or after: `2026-12-01`, `2026-12-01T09:30:00Z` (UTC), an age (`90m`,
    /// `12h`, `7d`) or ms since the epoch.
    #[arg(long)]
    since: Option<String>,
    /// Records before (same forms as `--since`).
    #[arg(long)]
    until: Option<String>,
    /// Only this server.
    #[arg(long)]
    server: Option<String>,
    /// Only this tool: exposed name (`fs__read_file`) or the server's name for it.
    #[arg(long)]
    tool: Option<String>,
    /// Only this principal.
    #[arg(long)]
    principal: Option<String>,
    /// Only this decision: allow, deny, hold.
    #[arg(long)]
    decision: Option<String>,
    /// Only the records of this call.
    #[arg(long = "call")]
    call_id: Option<String>,
}

#[derive(Debug, Subcommand)]
enum AuditCommand {
    /// Check the chain of FILE, or of the config's log and against its head (exit 1 naming
    /// the missing records when the log was cut short).
    Verify {
        /// The audit log (JSONL).
        #[arg(required_unless_present = "config", conflicts_with = "config")]
        file: Option<PathBuf>,
        /// The config whose `audit.file` to check, against the head kept in its `state_dir`.
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// A checkpoint copied away earlier (the signed note `audit checkpoint` printed): the
        /// log must still hold its records unchanged, shown by a consistency proof from its
        /// tree to the log's (exit 1 otherwise). Needs `--public-key`.
        #[arg(long, requires = "public_key", value_name = "FILE")]
        checkpoint: Option<PathBuf>,
        /// The verifier key of the checkpoint's signer (`NAME+ID+KEY`, as `audit keygen`
        /// prints it), or a file holding it.
        #[arg(long, requires = "checkpoint", value_name = "KEY")]
        public_key: Option<String>,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Sign a checkpoint of the config's log now (`audit.checkpoint` names the key) and print
    /// it: copy it somewhere the operator's account cannot write (a ticket, another host),
    /// where `audit verify --checkpoint` can later check the log against it.
    ///
    /// Example: `toolward audit checkpoint --config toolward.json > checkpoint-$(date +%F).txt`
    Checkpoint {
        /// The config file.
        #[arg(long, short, default_value = "toolward.json")]
        config: PathBuf,
        /// Print the latest checkpoint kept in the state folder instead of signing one.
        #[arg(long)]
        latest: bool,
    },
    /// Print the inclusion proof of record SEQ (RFC 6962) in the tree of the log's records,
    /// as JSON: with the root of a checkpoint of that size, anyone can check that the record
    /// is in the log it covers.
    Prove {
        /// The record's `seq`.
        seq: u64,
        /// The config file.
        #[arg(long, short, default_value = "toolward.json")]
        config: PathBuf,
        /// The tree's size: a checkpoint's (default: every record up to the log's head).
        #[arg(long)]
        size: Option<u64>,
    },
    /// Make a checkpoint signer key: FILE (created 0600) for `audit.checkpoint.key`, and its
    /// verifier key, printed and written to `FILE.pub`, for whoever checks checkpoints.
    Keygen {
        /// The key's name: the checkpoints' origin unless the config names one (a URL-like
        /// name without a scheme, such as `example.com/toolward/laptop`).
        #[arg(long)]
        name: String,
        /// Where to write the signer key.
        #[arg(long)]
        out: PathBuf,
    },
    /// Show the records of the config's log that match the filters, checking the chain as it
    /// reads (exit 1 at a break, saying where).
    ///
    /// Example: `toolward audit show --config toolward.json --since 1h --decision hold`
    Show {
        /// The config file.
        #[arg(long, short, default_value = "toolward.json")]
        config: PathBuf,
        #[command(flatten)]
        filter: AuditFilterArgs,
        /// One JSON record a line, as on record.
        #[arg(long)]
        json: bool,
    },
    /// Show the last records of the config's log; with `-f`, keep showing new ones as they
    /// are written. The chain is checked from the first record (exit 1 at a break).
    ///
    /// Example: `toolward audit tail -f --config toolward.json --server fs`
    Tail {
        /// The config file.
        #[arg(long, short, default_value = "toolward.json")]
        config: PathBuf,
        /// Keep following the log.
        #[arg(long, short)]
        follow: bool,
        /// How many of the last matching records to show first.
        #[arg(long, short = 'n', default_value_t = 10)]
        lines: usize,
        #[command(flatten)]
        filter: AuditFilterArgs,
        /// One JSON record a line.
        #[arg(long)]
        json: bool,
    },
    /// Re-decide every call on record under another policy and print the calls whose
    /// decision would change, with counts by tool and decision. Needs
    /// `audit.record_arguments`; calls recorded without arguments are counted and skipped.
    ///
    /// Example: `toolward audit replay --config toolward.json --policy built-in --settings stricter-rules.json`
    Replay {
        /// The config file (its `audit.file` is read).
        #[arg(long, short, default_value = "toolward.json")]
        config: PathBuf,
        /// The other policy: a component (`.wasm`), `built-in` for the default component, or a
        /// Cedar policy file (`.cedar`), decided by the built-in Cedar component.
        #[arg(long)]
        policy: String,
        /// Settings for its `configure` (for `built-in`, a rules file); default: what the
        /// config gives its policy (`policy.settings`, else the rules file).
        #[arg(long)]
        settings: Option<PathBuf>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Write the config's audit records (the PostgreSQL store's, or the state folder's log)
    /// as JSONL, each line the exact bytes hashed: `audit verify FILE` accepts the result.
    Export {
        /// The config file.
        #[arg(long, short, default_value = "toolward.json")]
        config: PathBuf,
        /// Where to write (standard output when absent).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Start the config's PostgreSQL audit chain (empty) from a state folder's log FILE: every
    /// record kept as it is, so the chain and its hashes continue (docs/fleet.md).
    Import {
        /// The config file (its `store.postgres`).
        #[arg(long, short, default_value = "toolward.json")]
        config: PathBuf,
        /// The state folder's audit log (JSONL).
        file: PathBuf,
    },
    /// Continue the config's log as it is when it no longer matches its head (`serve` refuses
    /// to start on it): appends a `recovered` record saying how it differed, and makes its
    /// end the head. Run `audit verify --config` first to see what is missing.
    Accept {
        /// The config file.
        #[arg(long, short, default_value = "toolward.json")]
        config: PathBuf,
    },
}

/// What `policy push` publishes (`--kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum PushKind {
    /// A rules or policy component.
    Component,
    /// A policy settings file.
    Settings,
    /// Cedar policies.
    Cedar,
}

#[derive(Debug, Subcommand)]
enum PolicyCommand {
    /// Print a component's SHA-256, size, worlds, exports and imports; refuse it (exit 1)
    /// when it imports anything beyond toolward's WIT.
    Inspect {
        /// The component (`.wasm`), `built-in` for the default component, or
        /// `built-in-cedar` for the Cedar component.
        component: String,
        /// Print as JSON.
        #[arg(long)]
        json: bool,
        /// A config whose compiled-component cache (`<state_dir>/components`) to look in
        /// (and fill): the output then says whether the compiled form was cached.
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
    /// Run the decision cases of CASES against a policy component and print each case's
    /// pass or fail with the actual decision and reason (exit 1 on any mismatch).
    ///
    /// CASES is JSON; its schema is `docs/policy-cases.schema.json`.
    Test {
        /// The cases file (JSON).
        cases: PathBuf,
        /// The component (`.wasm`), `built-in` for the default component, or a Cedar
        /// policy file (`.cedar`), decided by the built-in Cedar component.
        #[arg(long)]
        policy: String,
        /// A settings file for the component's `configure`, used instead of the cases
        /// file's `settings` or `settings_file`; with a `.cedar` policy, the rules file
        /// whose reviews, levels and tools' `returns` the Cedar component is given.
        #[arg(long)]
        rules: Option<PathBuf>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Publish a component, a policy settings file or Cedar policies to an OCI registry and
    /// print the reference to pin (`oci://REGISTRY/REPOSITORY@sha256:…`). A component is a
    /// Wasm artifact (`application/wasm`); settings and Cedar text are artifacts of their own
    /// media types (`docs/registries.md`). Credentials: `TOOLWARD_REGISTRY_USERNAME` and
    /// `TOOLWARD_REGISTRY_PASSWORD` for the registry `TOOLWARD_REGISTRY_HOST` names, or the
    /// static `auths` of `~/.docker/config.json`.
    Push {
        /// The file: a component (`.wasm`), a settings file, or Cedar policies (`.cedar`).
        file: PathBuf,
        /// Where: `oci://REGISTRY/REPOSITORY[:TAG]`.
        reference: String,
        /// What FILE is, and so which field may pin it: `component` (`policy.component`,
        /// `rules.component`), `settings` (`policy.settings`) or `cedar` (`policy.cedar`).
        /// Without it: a component when FILE starts with the component preamble, `cedar` when
        /// its name ends in `.cedar`; anything else needs `--kind settings`.
        #[arg(long, value_enum)]
        kind: Option<PushKind>,
    },
    /// Resolve a reference (a tag) to the digest to pin in `policy.component`,
    /// `rules.component`, `policy.settings` or `policy.cedar`, and print it; with `--config`,
    /// also pull the artifact into that config's state folder and verify its signature with
    /// `oci.keys` (exit 1 when refused).
    Pull {
        /// `oci://REGISTRY/REPOSITORY:TAG` or `…@sha256:…`.
        reference: String,
        /// A config whose state folder to pull into and whose `oci.keys` to verify with.
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
    /// Sign a component, settings or Cedar artifact in a registry, by digest, with cosign's
    /// keyed scheme (the `sha256-<hex>.sig` tag; `cosign verify --key` reads it).
    Sign {
        /// `oci://REGISTRY/REPOSITORY@sha256:…`.
        reference: String,
        /// The signing key: PEM `PRIVATE KEY` (PKCS#8) or `EC PRIVATE KEY` of an ECDSA P-256
        /// key (`toolward policy keygen` makes one).
        #[arg(long)]
        key: PathBuf,
    },
    /// Make an ECDSA P-256 signing key (FILE, mode 0600) and its public key (FILE.pub, also
    /// printed) for `policy sign` and `oci.keys`.
    Keygen {
        /// Where to write the signing key (never over an existing file).
        #[arg(long)]
        out: PathBuf,
    },
    /// Check the config's policy against the tools the servers register: for Cedar
    /// policies (`policy.cedar`), type-check them against `docs/toolward.cedarschema` with
    /// each tool's `inputSchema` as the type of its arguments, naming the policy, its line
    /// and column and the tool of each error (exit 1 on any). `toolward check` runs it too.
    Validate {
        /// The config file.
        #[arg(long, short, default_value = "toolward.json")]
        config: PathBuf,
    },
}

/// Runs the command line; the process exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    // Before anything starts a thread: Landlock restricts the calling thread only.
    if let Command::Confine {
        deny,
        allow,
        device,
        deny_tcp,
        namespaces,
        deny_network,
        probe,
        command,
    } = cli.command
    {
        return confine(
            crate::confine::LaunchRequest {
                deny,
                allow,
                devices: device,
                deny_tcp,
                namespaces,
                deny_network,
                command,
            },
            probe,
        );
    }
    let filter = tracing_subscriber::EnvFilter::try_new(&cli.log)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    // Not dumpable: processes of the same user (the servers toolward starts among them)
    // cannot read `/proc/<toolward>/environ`, `mem` or `maps`. The environment holds what
    // `${VAR}` expands into (listen tokens, HTTP servers' headers, other servers' secrets),
    // and Landlock does not withhold another process's `environ` (a security tester read it
    // from a confined server).
    #[cfg(target_os = "linux")]
    if let Err(e) =
        rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
    {
        tracing::warn!(error = %e, "cannot make toolward non-dumpable; its servers may read its environment under /proc");
    }
    #[cfg(target_os = "linux")]
    if let Err(e) = crate::transport::become_subreaper() {
        tracing::warn!(error = %e, "cannot become a child subreaper; a server's descendant that leaves its process group may outlive it");
    }
    // `serve` on stdio has one client: one thread runs it all, so a call is never handed
    // between worker threads (each hand-off is a futex wake-up; `benches/gateway.rs`
    // measured ≈ 60 µs added per call with one worker against 65–225 µs with two). Blocking
    // work (fsync of the audit log) still goes to the blocking pool. Everything else,
    // `serve --listen` with its many clients included, gets a worker per core.
    let one_client = matches!(cli.command, Command::Serve { listen: None, .. });
    let mut builder = if one_client {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    let runtime = match builder.enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            errln!("toolward: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    let outcome = runtime.block_on(run(cli.command));
    // Dropping the runtime would wait for every read and write on its blocking pool, and a
    // read of a terminal (`serve`'s standard input when it is one) cannot be cancelled: a
    // SIGTERM would end the command and leave the process waiting for a line that never
    // comes. What else can be left there ends within the grace.
    runtime.shutdown_timeout(BLOCKING_GRACE);
    match outcome {
        Ok(code) => code,
        // Said by nobody, as by a process SIGPIPE ended: whoever reads the rest has gone.
        Err(Failure {
            code: EXIT_READER_GONE,
            ..
        }) => ExitCode::from(EXIT_READER_GONE),
        Err(Failure { code, error }) => {
            errln!("toolward: {error:#}");
            ExitCode::from(code)
        }
    }
}

/// Writes `text` (and a newline when `newline`) to standard output in one locked write.
///
/// # Errors
/// A [`Failure`] of [`EXIT_READER_GONE`] when the reader went away (`EPIPE`), which ends the
/// command without a message; of [`EXIT_FAILURE`] when the write failed otherwise (a full
/// disk under `> file`).
fn write_stdout(text: std::fmt::Arguments<'_>, newline: bool) -> Result<(), Failure> {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_fmt(text)
        .and_then(|()| {
            if newline {
                stdout.write_all(b"\n")
            } else {
                Ok(())
            }
        })
        .map_err(stdout_failure)
}

/// The failure of a write to standard output: quiet when its reader went away.
fn stdout_failure(error: std::io::Error) -> Failure {
    if error.kind() == std::io::ErrorKind::BrokenPipe {
        Failure {
            code: EXIT_READER_GONE,
            error: anyhow!("standard output's reader went away"),
        }
    } else {
        failure(anyhow!("cannot write to standard output: {error}"))
    }
}

/// Writes a new key pair: `private` to `out` (created `0600`, never over an existing file,
/// synced) and `public` to `out` with `.pub` appended; that path. `audit keygen` and
/// `policy keygen`.
fn write_key_pair(out: &Path, private: &str, public: &str) -> Result<PathBuf, Failure> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(out)
        .map_err(|e| usage(anyhow!("cannot create `{}`: {e}", out.display())))?;
    file.write_all(private.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(failure)?;
    let mut public_path = out.as_os_str().to_owned();
    public_path.push(".pub");
    let public_path = PathBuf::from(public_path);
    std::fs::write(&public_path, public).map_err(failure)?;
    Ok(public_path)
}

/// Writes `text` (and a newline when `newline`) to standard error, and goes on whether or
/// not that worked: standard error is where a failure would be told, so a failure to write
/// there has nowhere to go, and a gateway (`serve`, `console`) must not stop for it.
fn write_stderr(text: std::fmt::Arguments<'_>, newline: bool) {
    let mut stderr = std::io::stderr().lock();
    let _ = stderr.write_fmt(text).and_then(|()| {
        if newline {
            stderr.write_all(b"\n")
        } else {
            Ok(())
        }
    });
}

/// An error with the exit code it means.
struct Failure {
    code: u8,
    error: anyhow::Error,
}

fn usage(error: impl Into<anyhow::Error>) -> Failure {
    Failure {
        code: EXIT_USAGE,
        error: error.into(),
    }
}

fn failure(error: impl Into<anyhow::Error>) -> Failure {
    Failure {
        code: EXIT_FAILURE,
        error: error.into(),
    }
}

fn read_config(path: &Path) -> Result<Config, Failure> {
    Config::from_path(path)
        .with_context(|| format!("config `{}`", path.display()))
        .map_err(usage)
}

/// The state folder of `config`, opened once for the command (see [`crate::store`]).
fn open_state(config: &Config) -> Result<StateDir, Failure> {
    StateDir::open(&config.state_dir).map_err(usage)
}

fn read_manifest(config: &Config) -> Result<Manifest, Failure> {
    if !config.manifest.exists() {
        return Err(usage(anyhow!(
            "no manifest at `{}`: run `toolward pin` and review what it writes",
            config.manifest.display()
        )));
    }
    Manifest::read(&config.manifest).map_err(usage)
}

async fn run(command: Command) -> Result<ExitCode, Failure> {
    match command {
        Command::Pin {
            config,
            tool: Some(tool),
            yes,
            dry_run,
            ..
        } => pin_tool(&config, &tool, yes, dry_run).await,
        Command::Pin {
            config,
            server,
            dry_run,
            ..
        } => pin(&config, server.as_deref(), dry_run).await,
        Command::Init {
            dir,
            client,
            server,
            yes,
            list,
        } => init(&dir, &client, &server, yes, list).await,
        Command::Client { config, command } => client(&config, command),
        Command::Audit {
            command:
                AuditCommand::Show {
                    config,
                    filter,
                    json,
                },
        } => audit_show(&config, &filter, json).await,
        Command::Audit {
            command:
                AuditCommand::Tail {
                    config,
                    follow,
                    lines,
                    filter,
                    json,
                },
        } => audit_tail(&config, follow, lines, &filter, json).await,
        Command::Audit {
            command:
                AuditCommand::Replay {
                    config,
                    policy,
                    settings,
                    json,
                },
        } => audit_replay(&config, &policy, settings.as_deref(), json),
        Command::Check {
            config,
            json,
            suggest_rules,
        } => check(&config, json, suggest_rules).await,
        Command::Serve {
            config,
            listen,
            listen_non_loopback,
        } => match listen {
            None => serve(&config).await,
            Some(addr) => serve_http(&config, addr, listen_non_loopback).await,
        },
        Command::Call {
            config,
            tool,
            args,
            json,
        } => call(&config, &tool, &args, json).await,
        Command::Approvals { config, command } => approvals(&config, command).await,
        Command::Console {
            config,
            listen,
            listen_non_loopback,
            public_origins,
            notify_webhooks,
            notify_slack,
            notify_secret_file,
            notify_arguments,
            notify_allow_private,
            notify_checkpoints,
        } => {
            // The config's `notify`, with the flags added to it.
            let configured = read_config(&config)?.notify;
            let notify = console_notify(
                [configured.webhooks, notify_webhooks].concat(),
                [configured.slack, notify_slack].concat(),
                notify_secret_file.or(configured.secret_file).as_deref(),
                notify_arguments || configured.arguments,
                notify_allow_private || configured.allow_private,
                notify_checkpoints || configured.checkpoints,
                configured
                    .console_url
                    .or_else(|| public_origins.first().cloned()),
            )
            .await?;
            console(&config, listen, listen_non_loopback, public_origins, notify).await
        }
        #[cfg(feature = "http-upstream")]
        Command::Auth { config, command } => auth::run(&config, command).await,
        Command::Store {
            command:
                StoreCommand::Migrate {
                    config,
                    accept_drift,
                },
        } => store_migrate(&config, accept_drift).await,
        Command::Audit {
            command:
                AuditCommand::Verify {
                    file,
                    config,
                    checkpoint,
                    public_key,
                    json,
                },
        } => {
            let anchor = match (&checkpoint, &public_key) {
                (Some(checkpoint), Some(key)) => Some(checkpoints::anchor(checkpoint, key)?),
                _ => None,
            };
            match (file, config) {
                (Some(file), _) => audit_verify(&file, None, anchor, json),
                (None, Some(config)) => audit_verify_config(&config, anchor, json).await,
                (None, None) => Err(usage(anyhow!("give an audit log or `--config`"))),
            }
        }
        Command::Audit {
            command: AuditCommand::Checkpoint { config, latest },
        } => checkpoints::sign(&config, latest).await,
        Command::Audit {
            command: AuditCommand::Prove { seq, config, size },
        } => checkpoints::prove(&config, seq, size).await,
        Command::Audit {
            command: AuditCommand::Keygen { name, out },
        } => checkpoints::keygen(&name, &out),
        Command::Audit {
            command: AuditCommand::Accept { config },
        } => audit_accept(&config),
        Command::Audit {
            command: AuditCommand::Export { config, out },
        } => audit_export(&config, out.as_deref()).await,
        Command::Audit {
            command: AuditCommand::Import { config, file },
        } => audit_import(&config, &file).await,
        Command::Policy {
            command:
                PolicyCommand::Inspect {
                    component,
                    json,
                    config,
                },
        } => policy_inspect(&component, json, config.as_deref()),
        Command::Policy {
            command:
                PolicyCommand::Test {
                    cases,
                    policy,
                    rules,
                    json,
                },
        } => policy_test(&cases, &policy, rules.as_deref(), json),
        Command::Policy {
            command: PolicyCommand::Validate { config },
        } => policy_validate(&config).await,
        Command::Policy {
            command:
                PolicyCommand::Push {
                    file,
                    reference,
                    kind,
                },
        } => registries::push(&file, &reference, kind).await,
        Command::Policy {
            command: PolicyCommand::Pull { reference, config },
        } => registries::pull(&reference, config.as_deref()).await,
        Command::Policy {
            command: PolicyCommand::Sign { reference, key },
        } => registries::sign(&reference, &key).await,
        Command::Policy {
            command: PolicyCommand::Keygen { out },
        } => registries::keygen(&out),
        Command::Confine { .. } => Err(usage(anyhow!(
            "`{}` runs before the runtime starts",
            crate::confine::LAUNCHER_SUBCOMMAND
        ))),
    }
}

/// The launcher (`toolward __confine`): returns only when it could not confine itself or
/// start the program; `--probe` prints the Landlock ABI obtained.
fn confine(request: crate::confine::LaunchRequest, probe: bool) -> ExitCode {
    crate::confine::run_launcher(&request, probe)
}

async fn pin(config_path: &Path, server: Option<&str>, dry_run: bool) -> Result<ExitCode, Failure> {
    let config = read_config(config_path)?;
    if let Some(server) = server
        && !config.servers.contains_key(server)
    {
        return Err(usage(anyhow!("server `{server}` is not in the config")));
    }
    let state = open_state(&config)?;
    let components =
        load::prepare_components(&config, config.guest.clone(), Some(&state)).map_err(usage)?;
    let existing = if config.manifest.exists() {
        Some(Manifest::read(&config.manifest).map_err(usage)?)
    } else {
        None
    };
    let outcome = crate::pin::pin(
        &config,
        server,
        existing.as_ref(),
        components.digests.clone(),
    )
    .await
    .map_err(failure)?;
    let diff = outcome.diff.to_string();
    if existing.is_some() && outcome.failures.is_empty() {
        if outcome.diff.is_empty() {
            outln!("no change against `{}`", config.manifest.display())?;
        } else {
            outln!("{diff}")?;
        }
    }
    for error in outcome.failures.values() {
        errln!("toolward: not pinned: {}", crate::text::error_chain(error));
    }
    for (server, tools) in &outcome.refused {
        for (tool, why) in tools {
            errln!("toolward: refused tool `{tool}` of server `{server}`: {why}");
        }
    }
    if dry_run {
        return Ok(ExitCode::SUCCESS);
    }
    // Servers that failed keep their earlier pins (or stay unpinned); the others are written.
    outcome.manifest.write(&config.manifest).map_err(failure)?;
    let tools: usize = outcome
        .manifest
        .servers
        .values()
        .map(|s| s.tools.len())
        .sum();
    let servers = outcome.manifest.servers.len();
    let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
    outln!(
        "pinned {} of {} into `{}`: review it before `toolward serve`",
        plural(tools, "tool"),
        plural(servers, "server"),
        config.manifest.display()
    )?;
    if !outcome.failures.is_empty() {
        let failed: Vec<&str> = outcome.failures.keys().map(String::as_str).collect();
        errln!(
            "toolward: {} servers were not pinned ({}); fix them and run `toolward pin --server NAME`",
            failed.len(),
            failed.join(", ")
        );
        return Ok(ExitCode::from(EXIT_FAILURE));
    }
    if !outcome.refused.is_empty() {
        let refused: usize = outcome.refused.values().map(BTreeMap::len).sum();
        errln!(
            "toolward: {} refused and not pinned (recorded under `refused` in the manifest, and reported by `toolward check`); the other tools are pinned",
            plural(refused, "tool")
        );
        return Ok(ExitCode::from(EXIT_FAILURE));
    }
    Ok(ExitCode::SUCCESS)
}

async fn check(config_path: &Path, json: bool, suggest_rules: bool) -> Result<ExitCode, Failure> {
    let Validated {
        report, problems, ..
    } = load_and_validate(config_path).await?;
    if suggest_rules {
        outln!("{}", suggested_rules(&report))?;
    } else if json {
        let text = serde_json::to_string_pretty(&report).map_err(failure)?;
        outln!("{text}")?;
    } else {
        out!("{}", report.render())?;
        out!("{}", first_hour::accept_commands(&report, config_path))?;
    }
    // On stderr with `--json`, so stdout stays the report's JSON.
    for problem in &problems {
        if json {
            errln!("toolward: policy: {problem}");
        } else {
            outln!("policy: {problem}")?;
        }
    }
    Ok(if report.refused_anything() || !problems.is_empty() {
        ExitCode::from(EXIT_FOUND)
    } else {
        ExitCode::SUCCESS
    })
}

/// What `check` and `policy validate` both learn: the servers loaded as `serve` would load
/// them, and the policy's problems for the registered tools (its servers closed again).
struct Validated {
    report: load::LoadReport,
    /// Tools registered.
    tools: usize,
    /// Whether the policy component validates its settings at all (the Cedar component does).
    validates: bool,
    problems: Vec<String>,
}

async fn load_and_validate(config_path: &Path) -> Result<Validated, Failure> {
    let config = read_config(config_path)?;
    let manifest = read_manifest(&config)?;
    let state = open_state(&config)?;
    let components =
        load::prepare_components(&config, config.guest.clone(), Some(&state)).map_err(usage)?;
    let (registry, report) = load::load(
        &config,
        &components.rules,
        &manifest,
        components.digests.clone(),
        Some(&state),
    )
    .await
    .map_err(usage)?;
    let tools = registry.tools().count();
    let problems = crate::cedar::validate(&components.policy, &registry).map_err(usage);
    registry.close().await;
    Ok(Validated {
        report,
        tools,
        validates: components.policy.validates(),
        problems: problems?,
    })
}

/// `policy validate`: loads the servers as `check` does and prints the policy's problems
/// for the registered tools.
async fn policy_validate(config_path: &Path) -> Result<ExitCode, Failure> {
    let Validated {
        tools,
        validates,
        problems,
        ..
    } = load_and_validate(config_path).await?;
    if !validates {
        outln!("the policy component does not validate its settings: nothing to check")?;
        return Ok(ExitCode::SUCCESS);
    }
    for problem in &problems {
        outln!("policy: {problem}")?;
    }
    if problems.is_empty() {
        outln!("the policies type-check for all {tools} registered tools")?;
        Ok(ExitCode::SUCCESS)
    } else {
        outln!("{} problems", problems.len())?;
        Ok(ExitCode::from(EXIT_FOUND))
    }
}

async fn start(config_path: &Path) -> Result<crate::Toolward, Failure> {
    let config = read_config(config_path)?;
    match crate::Toolward::start(config).await {
        Ok(toolward) => Ok(toolward),
        Err(
            error @ crate::start::StartFailure::Audit(crate::audit::AuditError::HeadMismatch {
                ..
            }),
        ) => {
            let config = config_path.display();
            Err(usage(anyhow!(
                "{error}: `toolward audit verify --config {config}` names what is missing; `toolward audit accept --config {config}` continues the log as it is"
            )))
        }
        Err(error) => Err(usage(error)),
    }
}

async fn serve(config_path: &Path) -> Result<ExitCode, Failure> {
    let toolward = start(config_path).await?;
    print_audit_head(&toolward);
    for message in toolward.report().messages() {
        tracing::warn!("{message}");
    }
    let published = publish_state(&toolward, None).await;
    let settings = crate::gateway::GatewaySettings::from_config(toolward.config());
    let served = crate::gateway::serve_stdio(
        toolward.call_path().clone(),
        toolward.report().messages(),
        settings,
    );
    let outcome = tokio::select! {
        outcome = served => outcome.map_err(failure),
        () = shutdown_signal() => {
            tracing::info!("signal received: closing the servers");
            Ok(())
        }
    };
    if let Some(published) = published {
        published.stop().await;
    }
    toolward.shutdown().await;
    outcome.map(|()| ExitCode::SUCCESS)
}

/// Publishes the gateway's state for the console ([`crate::gateways`]): into the fleet's
/// database with `store.postgres`, else the state folder; one that cannot is said in the
/// log and serves on.
async fn publish_state(
    toolward: &crate::Toolward,
    listen: Option<std::net::SocketAddr>,
) -> Option<crate::gateways::Publisher> {
    let config = toolward.config();
    let registry = toolward.call_path().registry();
    let published = match &config.store {
        crate::config::StoreConfig::Postgres { url, .. } => {
            let store = crate::store::postgres::PgStore::new(url)
                .map(|store| match &config.file {
                    Some(file) => store.with_config_file(file),
                    None => store,
                })
                .map_err(|error| crate::text::error_chain(&error));
            match store {
                Ok(store) => match crate::store::postgres::PgGateways::open(&store).await {
                    Ok(gateways) => {
                        crate::gateways::publish_to_database(
                            gateways,
                            config.file.clone(),
                            toolward.report(),
                            registry,
                            listen,
                        )
                        .await
                    }
                    Err(error) => Err(crate::text::error_chain(&error)),
                },
                Err(error) => Err(error),
            }
        }
        crate::config::StoreConfig::StateDir | crate::config::StoreConfig::Memory => {
            match toolward.state() {
                Some(state) => crate::gateways::publish(
                    state,
                    config.file.clone(),
                    toolward.report(),
                    registry,
                    listen,
                )
                .map_err(|error| crate::text::error_chain(&error)),
                None => Err("this gateway has no state folder".to_owned()),
            }
        }
    };
    published
        .map_err(|error| {
            tracing::warn!(
                "the console will not see this gateway: {}",
                crate::text::escape(&error)
            );
        })
        .ok()
}

async fn serve_http(
    config_path: &Path,
    addr: std::net::SocketAddr,
    allow_non_loopback: bool,
) -> Result<ExitCode, Failure> {
    let toolward = start(config_path).await?;
    print_audit_head(&toolward);
    for message in toolward.report().messages() {
        tracing::warn!("{message}");
    }
    let config = toolward.config();
    let state = toolward.state().ok_or_else(|| {
        usage(anyhow!(
            "`serve --listen` keeps its tokens in a state folder"
        ))
    })?;
    let (tokens, token_file) =
        crate::listen::tokens(&config.listen, state, &config.principal).map_err(usage)?;
    let settings = crate::gateway::GatewaySettings::from_config(config);
    let listening = crate::listen::serve_http(
        toolward.call_path().clone(),
        toolward.report().messages(),
        settings,
        crate::listen::ListenSettings {
            addr,
            allow_non_loopback,
            tokens,
            allowed_origins: config.listen.allowed_origins.clone(),
            limits: crate::listen::ListenLimits::from_config(&config.listen),
            oauth: config.listen.oauth.clone(),
        },
    )
    .await;
    let listening = match listening {
        Ok(listening) => listening,
        Err(error) => {
            toolward.shutdown().await;
            return Err(match error {
                crate::listen::ListenError::NotLoopback { .. } => usage(error),
                other => failure(other),
            });
        }
    };
    let published = publish_state(&toolward, Some(listening.addr)).await;
    let registered = toolward.tools().count();
    errln!(
        "toolward serves {registered} tools at {} (streamable HTTP)",
        listening.url()
    );
    match (token_file, &config.listen.oauth) {
        (Some(file), _) => errln!(
            "bearer token: in {} (send `Authorization: Bearer $(cat {})`)",
            file.display(),
            file.display()
        ),
        (None, Some(oauth)) if config.listen.tokens.is_empty() => errln!(
            "bearer tokens: access tokens of issuer {} for {}",
            oauth.issuer,
            oauth.resource
        ),
        (None, Some(oauth)) => errln!(
            "bearer tokens: the names in `listen.tokens` of the config, and access tokens of issuer {} for {}",
            oauth.issuer,
            oauth.resource
        ),
        (None, None) => errln!("bearer tokens: the names in `listen.tokens` of the config"),
    }
    shutdown_signal().await;
    tracing::info!("signal received: closing the servers");
    listening.stop().await;
    if let Some(published) = published {
        published.stop().await;
    }
    toolward.shutdown().await;
    Ok(ExitCode::SUCCESS)
}

/// The notification settings of `toolward console`'s flags, each target checked now.
async fn console_notify(
    webhooks: Vec<String>,
    slack: Vec<String>,
    secret_file: Option<&Path>,
    include_arguments: bool,
    allow_private: bool,
    checkpoints: bool,
    link_base: Option<String>,
) -> Result<crate::console::NotifySettings, Failure> {
    use crate::console::{NotifyFormat, NotifyTarget};
    let targets: Vec<NotifyTarget> = webhooks
        .into_iter()
        .map(|url| NotifyTarget {
            url,
            format: NotifyFormat::Webhook,
        })
        .chain(slack.into_iter().map(|url| NotifyTarget {
            url,
            format: NotifyFormat::Slack,
        }))
        .collect();
    for target in &targets {
        crate::console::notify::check_target(&target.url, allow_private)
            .await
            .map_err(usage)?;
    }
    let has_webhooks = targets
        .iter()
        .any(|target| matches!(target.format, NotifyFormat::Webhook));
    let secret = match secret_file {
        None if has_webhooks => {
            return Err(usage(anyhow!(
                "`--notify-webhook` needs `--notify-secret-file` (or the config's `notify.secret_file`): a receiver can tell a post from toolward only by its signature"
            )));
        }
        None => None,
        Some(file) => {
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                let mode = std::fs::metadata(file)
                    .with_context(|| format!("the notification secret `{}`", file.display()))
                    .map_err(usage)?
                    .permissions()
                    .mode();
                if mode & 0o077 != 0 {
                    return Err(usage(anyhow!(
                        "the notification secret `{}` can be read by others (mode {:o}): `chmod 600` it",
                        file.display(),
                        mode & 0o777
                    )));
                }
            }
            let text = std::fs::read_to_string(file)
                .with_context(|| format!("the notification secret `{}`", file.display()))
                .map_err(usage)?;
            let secret = text.trim().as_bytes().to_vec();
            if secret.len() < 32 {
                return Err(usage(anyhow!(
                    "the notification secret `{}` is {} bytes; at least 32 are needed (`head -c 32 /dev/urandom | base64`)",
                    file.display(),
                    secret.len()
                )));
            }
            Some(secret)
        }
    };
    Ok(crate::console::NotifySettings {
        targets,
        secret,
        include_arguments,
        allow_private,
        checkpoints,
        link_base: link_base.unwrap_or_default(),
    })
}

/// `toolward console`: serves the web console over the config's state folder, or its
/// fleet's database, until a signal.
async fn console(
    config_path: &Path,
    addr: std::net::SocketAddr,
    allow_non_loopback: bool,
    public_origins: Vec<String>,
    notify: crate::console::NotifySettings,
) -> Result<ExitCode, Failure> {
    let config = read_config(config_path)?;
    let database = match &config.store {
        crate::config::StoreConfig::Postgres { url, .. } => Some(pg_store(url, config_path)?),
        crate::config::StoreConfig::StateDir | crate::config::StoreConfig::Memory => None,
    };
    let state = open_state(&config)?;
    let (users, token_file) =
        crate::listen::tokens(&config.listen, &state, &config.principal).map_err(usage)?;
    let public_origins_first = public_origins.first().cloned();
    let settings = crate::console::ConsoleSettings {
        addr,
        allow_non_loopback,
        state_dir: config.state_dir.clone(),
        audit_file: config.audit.file.clone(),
        database,
        users,
        public_origins,
        header_read_timeout: std::time::Duration::from_millis(config.listen.header_read_timeout_ms),
        max_connections: usize::try_from(config.listen.max_connections).unwrap_or(usize::MAX),
        notify,
        approvers: config.approvers.clone(),
        config: Some(config.clone()),
        oidc: config.console.oidc.clone(),
    };
    let console = crate::console::serve_console(settings)
        .await
        .map_err(|error| match error {
            crate::console::ConsoleError::Bind { .. }
            | crate::console::ConsoleError::Oidc { .. }
            | crate::console::ConsoleError::Store { .. }
            | crate::console::ConsoleError::Templates(_) => failure(error),
            other => usage(other),
        })?;
    errln!("toolward console at {}", console.url());
    match token_file {
        Some(file) => errln!(
            "sign in with the token in {} (its user is `{}`)",
            file.display(),
            crate::text::escape(&config.principal)
        ),
        None => errln!("sign in with a token of `listen.tokens`: its name is the user"),
    }
    if let Some(oidc) = &config.console.oidc {
        errln!(
            "or with the identity provider `{}` (redirect URI {}{})",
            crate::text::escape(&oidc.issuer),
            crate::text::escape(
                public_origins_first
                    .as_deref()
                    .map_or_else(
                        || console.url(),
                        |origin| origin.trim_end_matches('/').to_owned()
                    )
                    .trim_end_matches('/')
            ),
            crate::console::OIDC_CALLBACK_PATH
        );
    }
    shutdown_signal().await;
    console.stop().await;
    Ok(ExitCode::SUCCESS)
}

/// Resolves on SIGINT or SIGTERM (Unix) or Ctrl-C.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) {
            (Ok(mut int), Ok(mut term)) => {
                tokio::select! {
                    _ = int.recv() => {}
                    _ = term.recv() => {}
                }
            }
            _ => std::future::pending::<()>().await,
        }
    }
    #[cfg(not(unix))]
    {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

async fn call(config_path: &Path, tool: &str, args: &str, json: bool) -> Result<ExitCode, Failure> {
    let arguments = match serde_json::from_str::<serde_json::Value>(args) {
        Ok(serde_json::Value::Object(map)) => Some(map),
        Ok(_) => {
            return Err(usage(anyhow!(
                "`--args` must be a JSON object, like `{{\"path\": \"a.txt\"}}`"
            )));
        }
        Err(e) => return Err(usage(anyhow!("`--args` is not JSON: {e}"))),
    };
    let toolward = start(config_path).await?;
    let terminal = AnsweredBy::os_user(Channel::Terminal, &current_os_user());
    let approver = Arc::new(FnApprover::answered_by(
        terminal,
        |request: ApprovalRequest| async move { ask_on_terminal(&request).await },
    ));
    let result = toolward.call(tool, arguments, approver).await;
    toolward.shutdown().await;
    if json {
        outln!("{:#}", result.result)?;
    } else {
        // Results come from a server nobody here wrote: escape what could drive the terminal,
        // keeping the result's lines as lines.
        let text = crate::text::lines(&result.text())
            .collect::<Vec<_>>()
            .join("\n");
        if result.is_error() {
            outln!("tool error: {text}")?;
        } else {
            outln!("{text}")?;
        }
    }
    Ok(if result.is_error() {
        ExitCode::from(EXIT_FOUND)
    } else {
        ExitCode::SUCCESS
    })
}

/// Shows a held call on stderr and reads `y` or `n` from stdin; anything else, or no
/// terminal, is a deny.
async fn ask_on_terminal(request: &ApprovalRequest) -> ApprovalAnswer {
    errln!("{}", crate::approval::display_request(request));
    err!("approve this call once? [y/N] ");
    let answer = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    })
    .await;
    match answer {
        Ok(Ok(line)) if line.trim().eq_ignore_ascii_case("y") => {
            errln!("approved");
            ApprovalAnswer::Approved
        }
        _ => {
            errln!("denied");
            ApprovalAnswer::Denied("denied on the terminal".to_owned())
        }
    }
}

/// The PostgreSQL store at `url`, named by the config at `config_path` (which its errors
/// ask to migrate).
fn pg_store(url: &str, config_path: &Path) -> Result<crate::store::postgres::PgStore, Failure> {
    Ok(crate::store::postgres::PgStore::new(url)
        .map_err(usage)?
        .with_config_file(config_path))
}

/// The approvals store `config` names: its PostgreSQL database (its schema version checked),
/// else its state folder.
async fn approvals_store(
    config: &Config,
    config_path: &Path,
) -> Result<Box<dyn crate::store::ApprovalStore>, Failure> {
    Ok(match &config.store {
        crate::config::StoreConfig::StateDir | crate::config::StoreConfig::Memory => Box::new(
            crate::store::StateDirApprovals::new(config.state_dir.clone()),
        ),
        crate::config::StoreConfig::Postgres { url, .. } => {
            let store = pg_store(url, config_path)?;
            let approvals =
                crate::store::postgres::PgApprovals::new(&store, config.limits.approval_timeout())
                    .map_err(failure)?;
            approvals.check_schema().await.map_err(failure)?;
            Box::new(approvals)
        }
    })
}

/// `toolward store migrate --config`: creates or upgrades the PostgreSQL schema and grants
/// the roles of docs/fleet.md, as the role that owns the tables; then reports drift, exiting
/// 1 on any unless `accept_drift`.
async fn store_migrate(config_path: &Path, accept_drift: bool) -> Result<ExitCode, Failure> {
    let config = read_config(config_path)?;
    let crate::config::StoreConfig::Postgres { url, .. } = &config.store else {
        return Err(usage(anyhow!(
            "`{}` names no `store.postgres`: only a PostgreSQL store is migrated (the state folder needs no step)",
            config_path.display()
        )));
    };
    let store = pg_store(url, config_path)?;
    let pool = store.pool().map_err(failure)?;
    let migration = store.migrate(&pool).await.map_err(failure)?;
    let name = &migration.store;
    match migration.from {
        None => outln!(
            "PostgreSQL store {name}: created the schema, version {}",
            migration.to
        )?,
        Some(from) if from < migration.to => outln!(
            "PostgreSQL store {name}: migrated the schema from version {from} to {}",
            migration.to
        )?,
        Some(_) => outln!(
            "PostgreSQL store {name}: schema version {} already; nothing to create",
            migration.to
        )?,
    }
    if migration.key_made {
        outln!("made the fleet's `requestState` key (`toolward_keys`)")?;
    }
    if !migration.granted.is_empty() {
        outln!(
            "granted the rights of docs/fleet.md to {}",
            quoted(&migration.granted)
        )?;
    }
    for role in &migration.missing {
        outln!(
            "role `{role}` does not exist: granted it nothing (create it as docs/fleet.md shows, then run `migrate` again)"
        )?;
    }
    for drift in &migration.drift {
        outln!("drift: {drift}")?;
    }
    outln!("schema version {}", migration.to)?;
    if migration.drift.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    let count = migration.drift.len();
    if accept_drift {
        outln!("accepted {count} findings of drift (`--accept-drift`)")?;
        return Ok(ExitCode::SUCCESS);
    }
    errln!(
        "toolward: PostgreSQL store {name}: its tables hold {count} things beyond docs/fleet.md's roles (the `drift:` lines): run each line's SQL as the owner, or run `migrate` again with `--accept-drift` to keep them"
    );
    Ok(ExitCode::from(EXIT_FOUND))
}

/// `a`, `b`, `c`: each in backticks.
fn quoted(names: &[&str]) -> String {
    names
        .iter()
        .map(|name| format!("`{name}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

async fn approvals(config_path: &Path, command: ApprovalsCommand) -> Result<ExitCode, Failure> {
    let config = read_config(config_path)?;
    let store = approvals_store(&config, config_path).await?;
    match command {
        ApprovalsCommand::List { json } => {
            let entries = store.list().await.map_err(failure)?;
            if json {
                let entries: Vec<serde_json::Value> = entries
                    .iter()
                    .map(|entry| {
                        let mut value = serde_json::to_value(&entry.request).unwrap_or_default();
                        if let Some(map) = value.as_object_mut() {
                            map.insert("waiting".to_owned(), entry.waiting.into());
                            if let Some(problem) = &entry.problem {
                                map.insert("problem".to_owned(), problem.clone().into());
                            }
                        }
                        value
                    })
                    .collect();
                let text = serde_json::to_string_pretty(&entries).map_err(failure)?;
                outln!("{text}")?;
            } else if entries.is_empty() {
                outln!("no held calls")?;
            } else {
                for entry in &entries {
                    outln!("{}", crate::approval::display_request(&entry.request))?;
                    if let Some(problem) = &entry.problem {
                        outln!("  REFUSED:   {problem}: this entry cannot be answered")?;
                    } else if !entry.waiting {
                        outln!(
                            "  ABANDONED: the process that held it ended; the next start removes it"
                        )?;
                    }
                    outln!()?;
                }
            }
        }
        ApprovalsCommand::Approve { id } => {
            let by = store
                .answer(&id, true, None, &config.approvers)
                .await
                .map_err(usage)?;
            outln!("approved call `{id}` (once, for its arguments) as {by}")?;
        }
        ApprovalsCommand::Deny { id, reason } => {
            let by = store
                .answer(&id, false, reason, &config.approvers)
                .await
                .map_err(usage)?;
            outln!("denied call `{id}` as {by}")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A rules skeleton for the unclassified tools: each with its hints and description, the
/// effect left for the operator to choose.
fn suggested_rules(report: &load::LoadReport) -> String {
    let mut servers = serde_json::Map::new();
    for s in &report.servers {
        let mut tools = serde_json::Map::new();
        for u in &s.unclassified {
            tools.insert(
                u.tool.clone(),
                serde_json::json!({
                    "effect": "CHOOSE: read-only | local-change | remote-change | destructive",
                    "_description": u.description,
                    "_annotations": u.annotations,
                }),
            );
        }
        if !tools.is_empty() {
            servers.insert(s.server.clone(), serde_json::json!({ "tools": tools }));
        }
    }
    serde_json::to_string_pretty(&serde_json::json!({ "servers": servers })).unwrap_or_default()
}

/// `audit verify FILE`, or with `head` (the head and its file) `audit verify --config`; with
/// `anchor` (a checkpoint, its signature verified, and the key's name), `--checkpoint`.
fn audit_verify(
    file: &Path,
    head: Option<(crate::audit::AuditHead, PathBuf)>,
    anchor: Option<(crate::checkpoint::Checkpoint, String)>,
    json: bool,
) -> Result<ExitCode, Failure> {
    let (report, problem) = match &head {
        Some((head, _)) => crate::audit::verify_with_head(file, head).map_err(failure)?,
        None => (crate::audit::verify(file).map_err(failure)?, None),
    };
    let anchored = match anchor {
        Some((checkpoint, key)) => Some((checkpoints::check(file, checkpoint)?, key)),
        None => None,
    };
    let anchor_broken = anchored
        .as_ref()
        .is_some_and(|(report, _)| report.problem.is_some());
    if json {
        let value = serde_json::json!({
            "file": file.display().to_string(),
            "records": report.records,
            "last_hash": report.last_hash,
            "intact": report.first_break.is_none() && problem.is_none(),
            "first_break": report.first_break.as_ref().map(|b| b.to_string()),
            "head": head.as_ref().map(|(head, path)| serde_json::json!({
                "file": path.display().to_string(),
                "records": head.records,
                "hash": head.hash,
                "checked": problem.is_some() || report.first_break.is_none() || head.records <= report.records,
                "problem": problem.as_ref().map(ToString::to_string),
            })),
            "checkpoint": anchored.as_ref().map(|(report, key)| checkpoints::report_json(report, key)),
        });
        outln!("{value:#}")?;
    } else {
        match &report.first_break {
            None => outln!(
                "`{}`: {} records, chain intact, last hash {}",
                file.display(),
                report.records,
                report.last_hash
            )?,
            Some(b) => outln!("`{}`: chain broken: {b}", file.display())?,
        }
        if let Some((head, path)) = &head {
            match &problem {
                None if report.first_break.is_some() && head.records > report.records => outln!(
                    "head `{}` ({head}): not checked: the chain breaks before its record",
                    path.display()
                )?,
                None => outln!("head `{}` ({head}): matches", path.display())?,
                Some(problem) => outln!(
                    "head `{}` ({head}): does not match: {problem}",
                    path.display()
                )?,
            }
        }
        if let Some((report, key)) = &anchored {
            checkpoints::report_text(report, file, key)?;
        }
    }
    Ok(
        if report.first_break.is_some() || problem.is_some() || anchor_broken {
            ExitCode::from(EXIT_FOUND)
        } else {
            ExitCode::SUCCESS
        },
    )
}

/// `audit verify --config`: the config's log, against its head; with a PostgreSQL store,
/// its records exported (one snapshot) to a private temporary file, against the head row.
async fn audit_verify_config(
    config_path: &Path,
    anchor: Option<(crate::checkpoint::Checkpoint, String)>,
    json: bool,
) -> Result<ExitCode, Failure> {
    let config = read_config(config_path)?;
    if let crate::config::StoreConfig::Postgres { url, .. } = &config.store {
        let store = pg_store(url, config_path)?;
        let dir = std::env::temp_dir().join(format!(
            "toolward-verify-{}-{}",
            std::process::id(),
            crate::ids::new_ulid()
        ));
        std::fs::create_dir(&dir).map_err(failure)?;
        let file = dir.join("audit.jsonl");
        let verified = async {
            let mut out = std::io::BufWriter::new(std::fs::File::create(&file).map_err(failure)?);
            let head = crate::store::postgres::audit::export(&store, &mut out)
                .await
                .map_err(failure)?;
            drop(out);
            audit_verify(
                &file,
                Some((head, PathBuf::from(store.name().trim_matches('`')))),
                anchor,
                json,
            )
        }
        .await;
        let _ = std::fs::remove_dir_all(&dir);
        let verified = verified?;
        // The chain up to the head may verify while records past it refuse every append.
        let past = crate::store::postgres::audit::past_head(&store)
            .await
            .map_err(failure)?;
        if past > 0 {
            errln!(
                "toolward: PostgreSQL store {}: {past} records are at or past the head row: the head was moved back or rows were put past it, and every append of the fleet will collide with them",
                store.name()
            );
            return Ok(ExitCode::from(EXIT_FOUND));
        }
        return Ok(verified);
    }
    let state = crate::store::StateDir::open(&config.state_dir).map_err(usage)?;
    let file = &config.audit.file;
    if !file.exists() {
        let (head, _) = crate::audit::read_head(&state, file).map_err(failure)?;
        return match head {
            Some(head) if head.records > 0 => {
                outln!(
                    "`{}`: missing; its head ({head}) names {} records",
                    file.display(),
                    head.records
                )?;
                Ok(ExitCode::from(EXIT_FOUND))
            }
            _ => Err(usage(anyhow!("no audit log at `{}`", file.display()))),
        };
    }
    let (head, head_path) = crate::audit::read_head(&state, file).map_err(failure)?;
    audit_verify(file, head.map(|head| (head, head_path)), anchor, json)
}

/// `audit export --config [--out FILE]`.
async fn audit_export(config_path: &Path, out: Option<&Path>) -> Result<ExitCode, Failure> {
    let config = read_config(config_path)?;
    let mut sink: Box<dyn std::io::Write + Send> = match out {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path)
                .map_err(|e| usage(anyhow!("cannot create `{}`: {e}", path.display())))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout())),
    };
    // Into standard output, a reader that went away stops the export quietly.
    let failed = |error: std::io::Error| match out {
        Some(_) => failure(error),
        None => stdout_failure(error),
    };
    let head = match &config.store {
        crate::config::StoreConfig::Postgres { url, .. } => {
            let store = pg_store(url, config_path)?;
            crate::store::postgres::audit::export(&store, &mut *sink)
                .await
                .map_err(failure)?
        }
        crate::config::StoreConfig::StateDir | crate::config::StoreConfig::Memory => {
            // The record lines, each as hashed: not the room (spaces) kept at the log's end.
            let mut written = Ok(());
            let report = crate::audit::read_chain(&config.audit.file, |_, line| {
                if written.is_ok() {
                    written = sink.write_all(line).and_then(|()| sink.write_all(b"\n"));
                }
            })
            .map_err(usage)?;
            written.map_err(&failed)?;
            if let Some(brk) = &report.first_break {
                sink.flush().map_err(&failed)?;
                errln!(
                    "toolward: audit log `{}`: chain broken at {brk}; exported the {} records before it",
                    config.audit.file.display(),
                    report.records
                );
                return Ok(ExitCode::from(EXIT_FOUND));
            }
            crate::audit::AuditHead {
                records: report.records,
                hash: report.last_hash,
            }
        }
    };
    sink.flush().map_err(&failed)?;
    errln!("exported {} records, last hash {}", head.records, head.hash);
    Ok(ExitCode::SUCCESS)
}

/// `audit import --config FILE`.
async fn audit_import(config_path: &Path, file: &Path) -> Result<ExitCode, Failure> {
    let config = read_config(config_path)?;
    let crate::config::StoreConfig::Postgres { url, .. } = &config.store else {
        return Err(usage(anyhow!(
            "`{}` names no `store.postgres`: `audit import` moves a log into a PostgreSQL store",
            config_path.display()
        )));
    };
    let store = pg_store(url, config_path)?;
    let head = crate::store::postgres::audit::import(&store, file)
        .await
        .map_err(failure)?;
    outln!(
        "imported `{}` into PostgreSQL store {}: head {head}",
        file.display(),
        store.name()
    )?;
    Ok(ExitCode::SUCCESS)
}

/// `audit accept --config`.
fn audit_accept(config_path: &Path) -> Result<ExitCode, Failure> {
    let config = read_config(config_path)?;
    let state = crate::store::StateDir::open(&config.state_dir).map_err(usage)?;
    let (log, problem) =
        crate::audit::AuditLog::accept(&config.audit.file, config.audit.sync, &state)
            .map_err(failure)?;
    let head = log.head();
    drop(log);
    match problem {
        None => outln!(
            "`{}` matches its head: nothing to accept",
            config.audit.file.display()
        )?,
        Some(problem) => outln!(
            "`{}`: accepted as it is ({problem}); a `recovered` record says so",
            config.audit.file.display()
        )?,
    }
    if let Some(head) = head {
        outln!("head: {head}")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints the audit log's head when a gateway starts (`serve`), so the operator can keep it
/// elsewhere; `call`, one call from a terminal, does not repeat it (`audit verify` prints it).
fn print_audit_head(toolward: &crate::Toolward) {
    if let Some(head) = toolward.audit_head() {
        errln!("toolward: {}: head {head}", toolward.audit_store());
    }
}

/// The bytes of a component named on the command line: a `.wasm` path, or `built-in` (the
/// default component, its reviewing variant when `settings` name reviews).
fn read_component(component: &str, settings: Option<&str>) -> Result<Vec<u8>, Failure> {
    if component == "built-in" {
        return Ok(match settings {
            Some(settings) => crate::component::built_in_for(settings),
            None => crate::component::DEFAULT_COMPONENT,
        }
        .to_vec());
    }
    if component == crate::cedar::BUILT_IN_CEDAR {
        return Ok(crate::component::CEDAR_COMPONENT.to_vec());
    }
    crate::config::operator_file::read(
        Path::new(component),
        "component",
        crate::config::operator_file::MAX_COMPONENT_BYTES,
    )
    .map_err(usage)
}

fn policy_inspect(component: &str, json: bool, config: Option<&Path>) -> Result<ExitCode, Failure> {
    let bytes = read_component(component, None)?;
    let cache = match config {
        Some(path) => {
            let state = open_state(&read_config(path)?)?;
            Some(ComponentCache::open(&state).map_err(usage)?)
        }
        None => None,
    };
    let host = ComponentHost::new(GuestLimits::default(), cache).map_err(failure)?;
    let sha256 = crate::canonical::sha256_hex(&bytes);
    let loaded = match host.load(&bytes, component) {
        Ok(l) => l,
        Err(e) => {
            if json {
                outln!(
                    "{:#}",
                    serde_json::json!({"component": component, "sha256": sha256, "refused": e.to_string()})
                )?;
            } else {
                outln!("component `{component}`\n  sha256   {sha256}\n  REFUSED  {e}")?;
            }
            return Ok(ExitCode::from(EXIT_FOUND));
        }
    };
    let (v2, v3) = (loaded.exports_policy_v2(), loaded.exports_policy_v3());
    let v1 = loaded.exports_policy() && !v2 && !v3;
    let reviewing = v3 && loaded.exports_results();
    let worlds: Vec<&str> = [
        (loaded.exports_rules() && v1, "rules-and-policy"),
        (loaded.exports_rules(), "rules-component"),
        (v1, "policy-component"),
        (v2 && !loaded.exports_validation(), "policy-component@0.2.0"),
        (
            v2 && loaded.exports_validation(),
            "validated-policy-component@0.2.0",
        ),
        (
            loaded.exports_rules() && reviewing,
            "rules-and-reviewing-policy@0.3.0",
        ),
        (
            reviewing && !loaded.exports_rules() && !loaded.exports_validation(),
            "reviewing-policy-component@0.3.0",
        ),
        (
            reviewing && loaded.exports_validation(),
            "validated-reviewing-policy-component@0.3.0",
        ),
    ]
    .into_iter()
    .filter_map(|(ok, world)| ok.then_some(world))
    .collect();
    let cached = match loaded.cache() {
        crate::component::CacheOutcome::Disabled => "unknown (no --config: no cache looked at)",
        crate::component::CacheOutcome::Hit => "yes",
        crate::component::CacheOutcome::Miss => "no (compiled now, and cached)",
        crate::component::CacheOutcome::Replaced => {
            "no (the cache entry failed to load; compiled again, and cached)"
        }
    };
    if json {
        outln!(
            "{:#}",
            serde_json::json!({
                "component": component,
                "sha256": loaded.sha256(),
                "size_bytes": loaded.size_bytes(),
                "worlds": worlds,
                "exports": loaded.exports(),
                "imports": loaded.imports(),
                "wasi": wasi_grants(&loaded)
                    .iter()
                    .map(|(import, gets)| serde_json::json!({"import": import, "gets": gets}))
                    .collect::<Vec<_>>(),
                "cached": cached,
            })
        )?;
    } else {
        outln!("component `{component}`")?;
        outln!("  sha256   {}", loaded.sha256())?;
        outln!("  size     {} bytes", loaded.size_bytes())?;
        outln!("  worlds   {}", worlds.join(", "))?;
        outln!("  exports  {}", loaded.exports().join(", "))?;
        outln!("  cached   {cached}")?;
        let grants = wasi_grants(&loaded);
        let own: Vec<&str> = loaded
            .imports()
            .iter()
            .map(String::as_str)
            .filter(|import| !crate::component::wasi::is_provided(import))
            .collect();
        outln!(
            "  imports  {}",
            if own.is_empty() {
                "(none)".to_owned()
            } else {
                own.join(", ")
            }
        )?;
        if !grants.is_empty() {
            let width = grants.iter().map(|(i, _)| i.len()).max().unwrap_or(0);
            outln!("  wasi     (WASI 0.2, granting nothing; what each import gets)")?;
            for (import, gets) in &grants {
                outln!("    {import:width$}  {gets}")?;
            }
        }
    }
    Ok(if worlds.is_empty() {
        ExitCode::from(EXIT_FOUND)
    } else {
        ExitCode::SUCCESS
    })
}

/// Each WASI import of `loaded` and what the host gives a policy for it
/// ([`crate::component::wasi::grant_of`]).
fn wasi_grants(loaded: &crate::component::LoadedComponent) -> Vec<(&str, &'static str)> {
    loaded
        .imports()
        .iter()
        .map(String::as_str)
        .filter(|import| crate::component::wasi::is_provided(import))
        .map(|import| (import, crate::component::wasi::grant_of(import)))
        .collect()
}

fn policy_test(
    cases_path: &Path,
    component: &str,
    rules: Option<&Path>,
    json: bool,
) -> Result<ExitCode, Failure> {
    let mut cases = crate::policy_test::CasesFile::from_path(cases_path).map_err(usage)?;
    if let Some(path) = rules {
        let text = crate::policy_test::read_text(
            path,
            "policy settings",
            crate::config::operator_file::MAX_SETTINGS_BYTES,
        )
        .map_err(usage)?;
        cases.settings = Some(text);
    }
    // A `.cedar` file is policies for the built-in Cedar component, its settings text.
    let is_cedar = Path::new(component)
        .extension()
        .is_some_and(|e| e == crate::cedar::CEDAR_EXTENSION);
    if is_cedar {
        let text = crate::policy_test::read_text(
            Path::new(component),
            "Cedar policy",
            crate::config::operator_file::MAX_SETTINGS_BYTES,
        )
        .map_err(usage)?;
        // `--rules` then gives the Cedar component the rules file's reviews, levels and
        // tools' `returns`, as the gateway does.
        let rules = rules.and(cases.settings.as_deref());
        cases.settings = Some(crate::cedar::settings(&text, rules));
    }
    let bytes = if is_cedar {
        crate::component::CEDAR_COMPONENT.to_vec()
    } else {
        read_component(component, cases.settings.as_deref())?
    };
    let host = ComponentHost::new(GuestLimits::default(), None).map_err(failure)?;
    let loaded = host.load(&bytes, component).map_err(usage)?;
    let report = crate::policy_test::run_cases(&host, &loaded, &cases);
    if json {
        let text = serde_json::to_string_pretty(&report).map_err(failure)?;
        outln!("{text}")?;
    } else {
        out!("{}", report.render())?;
    }
    Ok(if report.all_passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_FOUND)
    })
}
