//! The `toolward` command: see `toolward --help`.
//!
//! Exit codes: 0 success; 1 the command ran and found something refused (`check`), a broken
//! chain (`audit verify`), a failing case or a tool error (`call`); 2 a usage or config
//! error; 3 a runtime failure (a server, a file, a component); 141 standard output's reader
//! went away (`… | head -1`), as for a process SIGPIPE ended.

fn main() -> std::process::ExitCode {
    toolward::cli_main()
}
