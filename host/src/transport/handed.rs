//! A handed-in server: an rmcp client-role transport the embedder gave
//! ([`crate::config::ServerTransport::Handed`]), carrying the same client's messages as a
//! stdio server's pipes. toolward starts nothing: the server is not confined, has no process
//! and no standard error, and is connected once (a second connection, a restart among them,
//! fails with [`TransportError::HandedUsed`]).

use std::sync::Arc;

use tokio::sync::{mpsc, watch};

use super::client::{Connection, Outgoing, Shared};
use super::incoming::handle_line;
use super::{FailureReason, TransportError, TransportLimits, Upstream};
use crate::config::{HandedLines, HandedTransport};

impl Upstream {
    /// Connects to the handed-in server `server` through `handed` and runs the lifecycle
    /// (`server/discover`, else `initialize`), as for a stdio server. A message from the server
    /// longer than [`TransportLimits::max_frame_bytes`] once encoded fails it, as an over-long
    /// line would.
    ///
    /// # Errors
    ///
    /// [`TransportError::HandedUsed`] when an earlier connection used `handed`; otherwise as
    /// [`Upstream::connect_stdio`]'s handshake ([`TransportError::Failed`] with
    /// [`FailureReason::HandedEnded`] when the transport ends first).
    pub async fn connect_handed(
        server: &str,
        handed: &HandedTransport,
        limits: &TransportLimits,
    ) -> Result<Upstream, TransportError> {
        let Some(pump) = handed.take() else {
            return Err(TransportError::HandedUsed {
                server: server.to_owned(),
            });
        };
        let (outgoing, outgoing_rx) = mpsc::unbounded_channel();
        let (shutdown, shutdown_rx) = watch::channel(false);
        let (done_tx, done) = watch::channel(false);
        let shared = Arc::new(Shared::new(server, outgoing, shutdown));
        let (to_server, to_server_rx) = mpsc::unbounded_channel();
        let (from_server_tx, from_server) = mpsc::unbounded_channel();
        let pumped = tokio::spawn(pump(HandedLines {
            to_server: to_server_rx,
            from_server: from_server_tx,
        }));
        let tasks = vec![
            tokio::spawn(write(outgoing_rx, to_server)),
            tokio::spawn(read(
                Arc::clone(&shared),
                from_server,
                limits.max_frame_bytes,
            )),
        ];
        tokio::spawn(supervise(
            shutdown_rx,
            pumped,
            tasks,
            limits.close_grace,
            done_tx,
        ));
        let connection = Connection {
            shared,
            done,
            pid: None,
            confinement: None,
        };
        Upstream::handshake(connection, limits, |_| {}).await
    }
}

/// Passes toolward's messages to the transport until told to close it; dropping `to_server`
/// then ends the transport.
async fn write(
    mut outgoing: mpsc::UnboundedReceiver<Outgoing>,
    to_server: mpsc::UnboundedSender<Vec<u8>>,
) {
    while let Some(Outgoing::Line(line)) = outgoing.recv().await {
        if to_server.send(line).is_err() {
            return;
        }
    }
}

/// Handles the server's messages as lines of a stdio server, until the transport ends.
async fn read(
    shared: Arc<Shared>,
    mut from_server: mpsc::UnboundedReceiver<Result<Vec<u8>, String>>,
    limit: usize,
) {
    let reason = loop {
        match from_server.recv().await {
            Some(Ok(message)) if message.len() > limit => {
                break FailureReason::FrameTooLong { limit };
            }
            Some(Ok(message)) => {
                if let Err(reason) = handle_line(&shared, &message) {
                    break reason;
                }
            }
            Some(Err(detail)) => {
                break FailureReason::HandedEnded {
                    detail: crate::text::escape(&detail),
                };
            }
            None => {
                break FailureReason::HandedEnded {
                    detail: String::from("it stopped without saying why"),
                };
            }
        }
    };
    shared.fail(reason);
}

/// Waits for the order to close (or a failure), then lets the transport end: the writer
/// stops, the transport is closed, and after `grace` what is left is stopped.
async fn supervise(
    mut shutdown: watch::Receiver<bool>,
    mut pumped: tokio::task::JoinHandle<()>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    grace: std::time::Duration,
    done: watch::Sender<bool>,
) {
    let _ = shutdown.wait_for(|closing| *closing).await;
    // Stopping the writer drops the transport's input: the pump then closes the transport.
    let mut tasks = tasks.into_iter();
    if let Some(writer) = tasks.next() {
        writer.abort();
    }
    if tokio::time::timeout(grace, &mut pumped).await.is_err() {
        pumped.abort();
    }
    for task in tasks {
        task.abort();
    }
    done.send_replace(true);
}

/// `transport` (anything rmcp can make a client-role transport of: an rmcp
/// [`Transport`](rmcp::transport::Transport), a byte stream such as one end of
/// [`tokio::io::duplex`], a `(reader, writer)` pair, a sink and a stream) as a server toolward
/// connects to.
///
/// toolward's client writes JSON-RPC messages as bytes; each is decoded into rmcp's
/// `ClientJsonRpcMessage` and sent, and each message the transport receives is encoded back
/// to bytes for the client. So the listing toolward pins is rmcp's encoding of what the
/// server sent (for a server written with rmcp, the same bytes each time), not the bytes on
/// a wire. A request of toolward's that rmcp's types cannot carry is answered with a JSON-RPC
/// error, sending nothing.
#[cfg(feature = "gateway")]
pub(crate) fn rmcp_transport<T, E, A>(transport: T) -> HandedTransport
where
    T: rmcp::transport::IntoTransport<rmcp::RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    HandedTransport::new(Box::new(move |lines: HandedLines| {
        Box::pin(pump(transport.into_transport(), lines))
    }))
}

/// Carries messages both ways between toolward's client and `transport` until either ends,
/// then closes the transport.
#[cfg(feature = "gateway")]
async fn pump<T>(mut transport: T, lines: HandedLines)
where
    T: rmcp::transport::Transport<rmcp::RoleClient>,
{
    use rmcp::model::ClientJsonRpcMessage;
    use serde_json::{Value, json};

    let HandedLines {
        mut to_server,
        from_server,
    } = lines;
    loop {
        tokio::select! {
            line = to_server.recv() => {
                // toolward closed the server.
                let Some(line) = line else { break };
                match serde_json::from_slice::<ClientJsonRpcMessage>(&line) {
                    Ok(message) => {
                        if let Err(error) = transport.send(message).await {
                            let _ = from_server.send(Err(format!("sending to it failed: {error}")));
                            break;
                        }
                    }
                    Err(error) => {
                        let id = serde_json::from_slice::<Value>(&line)
                            .ok()
                            .and_then(|message| message.get("id").cloned());
                        // serde's message may quote a value of the call's arguments.
                        tracing::warn!(
                            "a message of toolward's cannot be carried by an rmcp transport: {}",
                            crate::text::escape(&error.to_string())
                        );
                        // A request is answered, so it does not wait for its timeout.
                        if let Some(id) = id {
                            let answer = json!({
                                "jsonrpc": "2.0",
                                "id": id,
                                "error": {
                                    "code": -32603,
                                    "message": format!("toolward's request cannot be carried by the handed-in rmcp transport: {error}"),
                                },
                            });
                            if let Ok(bytes) = serde_json::to_vec(&answer)
                                && from_server.send(Ok(bytes)).is_err()
                            {
                                break;
                            }
                        }
                    }
                }
            }
            message = transport.receive() => {
                let Some(message) = message else {
                    let _ = from_server.send(Err(String::from("the server's end closed")));
                    break;
                };
                let sent = match serde_json::to_vec(&message) {
                    Ok(bytes) => from_server.send(Ok(bytes)),
                    Err(error) => from_server.send(Err(format!(
                        "a message of the server's cannot be encoded: {error}"
                    ))),
                };
                if sent.is_err() {
                    break;
                }
            }
        }
    }
    let _ = transport.close().await;
}
