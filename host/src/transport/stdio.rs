//! A stdio server: starting it, reading its standard output, writing its standard input,
//! keeping its standard error, and owning its process until it has ended.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use process_wrap::tokio::ChildWrapper;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStderr, ChildStdin, ChildStdout};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::client::{Connection, Outgoing, Shared};
use super::incoming::handle_line;
use super::{FailureReason, StdioSpec, TransportError, TransportLimits, Upstream, framing, process};

/// After `SIGKILL`, how long to wait for the leader's exit status and for orphans to be
/// reaped: the kernel ends killed processes at once, so this is only a bound.
const KILL_WAIT: Duration = Duration::from_secs(5);

/// How often closing checks whether the group has ended.
const CLOSE_POLL_INTERVAL: Duration = Duration::from_millis(20);

/// After the server's processes have ended, how long standard error may still be drained.
const STDERR_DRAIN_AFTER_EXIT: Duration = Duration::from_millis(200);

/// When the server's standard output ends, how long to wait for its exit status before
/// failing it for the closed output.
const EXIT_STATUS_WAIT: Duration = Duration::from_millis(500);

/// Read buffer on the server's standard output (bytes).
const STDOUT_READ_BUFFER_BYTES: usize = 64 * 1024;

/// Read buffer on the server's standard error (bytes).
const STDERR_READ_BUFFER_BYTES: usize = 8 * 1024;

impl Upstream {
    /// Starts the stdio server `spec` as server `server` and runs the `initialize` handshake,
    /// then sends `notifications/initialized`.
    ///
    /// # Errors
    ///
    /// [`TransportError::InvalidVariableName`] before starting anything;
    /// [`TransportError::Spawn`]; [`TransportError::StartTimeout`] after
    /// [`TransportLimits::start_timeout`]; [`TransportError::UnsupportedProtocol`];
    /// [`TransportError::Rpc`] or [`TransportError::MalformedResponse`] for a refused or
    /// malformed `initialize`; [`TransportError::Failed`] when the server fails meanwhile. The
    /// server's processes have ended when an error is returned.
    pub async fn connect_stdio(
        server: &str,
        spec: &StdioSpec,
        limits: &TransportLimits,
    ) -> Result<Upstream, TransportError> {
        let names = spec.env.keys().chain(&spec.pass_env);
        if let Some(name) = names
            .into_iter()
            .find(|name| !process::is_valid_variable_name(name))
        {
            return Err(TransportError::InvalidVariableName {
                server: server.to_owned(),
                name: name.clone(),
            });
        }
        let env = process::environment(spec);
        let mut command = process::command(spec, &env);
        let spawn_error = |source| TransportError::Spawn {
            server: server.to_owned(),
            command: spec.command.clone(),
            source,
        };
        let mut child = process::spawn(&mut command).map_err(spawn_error)?;
        let pid = child.id();
        let pipes = (
            child.stdin().take(),
            child.stdout().take(),
            child.stderr().take(),
        );
        let (Some(stdin), Some(stdout), Some(stderr)) = pipes else {
            // Not reachable with piped stdio; the child is killed on drop.
            return Err(spawn_error(io::Error::other(
                "a standard stream was not piped",
            )));
        };

        let (outgoing, outgoing_rx) = mpsc::unbounded_channel();
        let (shutdown, shutdown_rx) = watch::channel(false);
        let (done_tx, done) = watch::channel(false);
        let shared = Arc::new(Shared::new(server, outgoing, shutdown));
        let tasks = vec![
            tokio::spawn(drain_stderr(Arc::clone(&shared), stderr)),
            tokio::spawn(write_stdin(Arc::clone(&shared), stdin, outgoing_rx)),
            tokio::spawn(read_stdout(
                Arc::clone(&shared),
                stdout,
                limits.max_frame_bytes,
            )),
        ];
        tokio::spawn(supervise(
            Arc::clone(&shared),
            child,
            shutdown_rx,
            limits.close_grace,
            tasks,
            done_tx,
        ));
        let connection = Connection {
            shared,
            done,
            pid,
            confinement: spec.confine.clone(),
        };
        Upstream::handshake(connection, limits, |_| {}).await
    }
}

/// Reads the server's standard output until it ends or breaks the framing.
async fn read_stdout(shared: Arc<Shared>, stdout: ChildStdout, limit: usize) {
    let mut lines = framing::LineReader::new(
        BufReader::with_capacity(STDOUT_READ_BUFFER_BYTES, stdout),
        limit,
    );
    loop {
        let reason = match lines.next_line().await {
            Ok(Some(line)) => match handle_line(&shared, line) {
                Ok(()) => continue,
                Err(reason) => reason,
            },
            Ok(None) => {
                // A crashed server closes its output as it exits: give the supervisor the
                // chance to report the exit status, the more useful reason.
                let mut closing = shared.shutdown.subscribe();
                let _ =
                    tokio::time::timeout(EXIT_STATUS_WAIT, closing.wait_for(|closing| *closing))
                        .await;
                FailureReason::StdoutClosed
            }
            Err(framing::FrameError::TooLong { limit }) => FailureReason::FrameTooLong { limit },
            Err(framing::FrameError::Io(error)) => FailureReason::Read {
                message: error.to_string(),
            },
        };
        shared.fail(reason);
        return;
    }
}

/// Writes queued lines to the server's standard input until told to close it.
async fn write_stdin(
    shared: Arc<Shared>,
    mut stdin: ChildStdin,
    mut outgoing: mpsc::UnboundedReceiver<Outgoing>,
) {
    while let Some(Outgoing::Line(mut line)) = outgoing.recv().await {
        line.push(b'\n');
        let written = async {
            stdin.write_all(&line).await?;
            stdin.flush().await
        };
        if let Err(error) = written.await {
            // A broken pipe usually means the server exited: as for a closed standard
            // output, give the supervisor a chance to report the exit status first.
            let mut closing = shared.shutdown.subscribe();
            let _ =
                tokio::time::timeout(EXIT_STATUS_WAIT, closing.wait_for(|closing| *closing)).await;
            shared.fail(FailureReason::Write {
                message: error.to_string(),
            });
            return;
        }
    }
    // `Outgoing::Close`: dropping `stdin` closes the pipe, the polite request to exit.
}

/// Keeps the end of the server's standard error.
async fn drain_stderr(shared: Arc<Shared>, mut stderr: ChildStderr) {
    let mut buffer = vec![0u8; STDERR_READ_BUFFER_BYTES];
    loop {
        match stderr.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(read) => shared.push_stderr(buffer.get(..read).unwrap_or_default()),
        }
    }
}

/// Kills the server's group if the supervisor is dropped before it finished (the runtime
/// shutting down): the synchronous part of closing.
#[derive(Debug)]
struct GroupKillGuard {
    pgid: Option<u32>,
}

impl Drop for GroupKillGuard {
    fn drop(&mut self) {
        #[cfg(unix)]
        if let Some(pgid) = self.pgid {
            process::signal_group(pgid, process::SIGKILL);
        }
        #[cfg(not(unix))]
        let _ = self.pgid;
    }
}

/// Owns the server's process: waits for it to exit or for the order to close, then ends its
/// group and descendants (see the module documentation) and stops the tasks.
async fn supervise(
    shared: Arc<Shared>,
    mut child: Box<dyn ChildWrapper>,
    mut shutdown: watch::Receiver<bool>,
    grace: Duration,
    tasks: Vec<JoinHandle<()>>,
    done: watch::Sender<bool>,
) {
    let pid = child.id();
    let mut guard = GroupKillGuard { pgid: pid };
    // The wrapper's own `wait` would also reap the whole group, blocking while any member
    // lives; only the leader's exit is waited for here.
    let mut exited = tokio::select! {
        status = child.inner_mut().wait() => {
            let status = status.map_or_else(|error| error.to_string(), |status| status.to_string());
            shared.fail(FailureReason::Exited { status });
            true
        }
        _ = shutdown.wait_for(|closing| *closing) => false,
    };
    // Before the leader goes, while parent links still lead from it to every descendant.
    let family = pid.map(process::descendants).unwrap_or_default();
    let _ = shared.outgoing.send(Outgoing::Close);
    if !exited {
        exited = tokio::time::timeout(grace, child.inner_mut().wait())
            .await
            .is_ok();
    }
    #[cfg(unix)]
    if let Some(pgid) = pid {
        if !exited || process::group_alive(pgid) || !family.is_empty() {
            process::signal_group(pgid, process::SIGTERM);
            family
                .iter()
                .for_each(|member| member.signal(process::SIGTERM));
            let deadline = tokio::time::Instant::now() + grace;
            loop {
                if !exited {
                    exited = matches!(child.inner_mut().try_wait(), Ok(Some(_)));
                }
                if (exited && !process::group_alive(pgid))
                    || tokio::time::Instant::now() >= deadline
                {
                    break;
                }
                tokio::time::sleep(CLOSE_POLL_INTERVAL).await;
            }
        }
        process::signal_group(pgid, process::SIGKILL);
        family
            .iter()
            .for_each(|member| member.signal(process::SIGKILL));
    }
    #[cfg(not(unix))]
    {
        // No process group off Unix: the leader alone is killed.
        let _ = (&family, child.start_kill());
    }
    if !exited {
        exited = tokio::time::timeout(KILL_WAIT, child.inner_mut().wait())
            .await
            .is_ok();
    }
    // A descendant is reparented only once its parent has exited: wait for the killed group
    // to be gone, or the sweep could run while a parent is still dying and miss its orphan.
    #[cfg(unix)]
    if let Some(pgid) = pid {
        let deadline = tokio::time::Instant::now() + KILL_WAIT;
        while process::group_alive(pgid) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(CLOSE_POLL_INTERVAL).await;
        }
    }
    process::reap_orphans(pid, KILL_WAIT, CLOSE_POLL_INTERVAL).await;
    if exited && let Some(pid) = pid {
        process::forget_leader(pid);
    }
    guard.pgid = None;
    let mut tasks = tasks.into_iter();
    if let Some(mut stderr) = tasks.next() {
        // A descendant that escaped every signal could hold the pipe open.
        if tokio::time::timeout(STDERR_DRAIN_AFTER_EXIT, &mut stderr)
            .await
            .is_err()
        {
            stderr.abort();
        }
    }
    for task in tasks {
        task.abort();
    }
    done.send_replace(true);
}
