//! The queue approver: a held call's pending entry, waited on until its answer comes or the
//! entry goes.

use std::fmt;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;

use super::files::{Queue, entry_name};
use super::{
    Answer, AnsweredBy, ApprovalAnswer, ApprovalRequest, Approver, Channel, MAX_FORGERIES_AUDITED,
    QUEUE_POLL_INTERVAL, check_call_id,
};
use crate::audit::{AuditEvent, AuditKind, AuditStore};
use crate::text;

/// Asks through a pending queue in the state folder (see the module documentation); a
/// person answers with `toolward approvals approve ID` or `deny ID`, or any program with
/// `answer`.
///
/// Polls for the answer every `QUEUE_POLL_INTERVAL`. A request that cannot be written is
/// denied with the reason. A forged answer is ignored and, with an audit log
/// ([`QueueApprover::with_audit`]), recorded as `approval-forged`.
#[derive(Clone)]
pub struct QueueApprover {
    state_dir: PathBuf,
    audit: Option<Arc<dyn AuditStore>>,
}

impl fmt::Debug for QueueApprover {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueueApprover")
            .field("state_dir", &self.state_dir)
            .field("audit", &self.audit.as_ref().map(|store| store.name()))
            .finish()
    }
}

impl QueueApprover {
    /// A queue under `state_dir` (created on first use), recording forgeries nowhere but the
    /// log output.
    pub fn new(state_dir: impl Into<PathBuf>) -> Self {
        Self {
            state_dir: state_dir.into(),
            audit: None,
        }
    }

    /// The same queue, recording each forged answer to `audit` as an `approval-forged`
    /// record.
    #[must_use]
    pub fn with_audit(mut self, audit: Option<Arc<dyn AuditStore>>) -> Self {
        self.audit = audit;
        self
    }

    /// The state folder.
    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// Records the forged answer found for `request` (the `count`th for this call).
    fn forged(&self, queue: &Queue, request: &ApprovalRequest, why: &str, count: usize) {
        let file = queue.answer_path(&entry_name(&request.call_id));
        tracing::warn!(
            call_id = %request.call_id,
            "a forged answer for call `{}` was ignored: `{}`: {why}",
            request.call_id,
            file.display()
        );
        let Some(audit) = &self.audit else { return };
        if count > MAX_FORGERIES_AUDITED {
            return;
        }
        let mut reason = format!("answer file `{}` does not count: {why}", file.display());
        if count == MAX_FORGERIES_AUDITED {
            reason.push_str(&format!(
                "; this is the {MAX_FORGERIES_AUDITED}th for this call, later ones are not recorded"
            ));
        }
        let event = AuditEvent {
            call_id: Some(request.call_id.clone()),
            principal: Some(request.principal.clone()),
            session: Some(request.session.clone()),
            server: Some(request.server.clone()),
            tool: Some(request.exposed_tool.clone()),
            upstream_tool: Some(request.tool.clone()),
            arguments_sha256: Some(request.arguments_sha256.clone()),
            reason: Some(reason),
            detail: Some(serde_json::json!({ "file": file, "why": why })),
            ..AuditEvent::new(AuditKind::ApprovalForged)
        };
        if let Err(error) = audit.append(event) {
            tracing::error!(call_id = %request.call_id, "cannot record a forged answer for call `{}`: {error}", request.call_id);
        }
    }
}

impl Approver for QueueApprover {
    fn ask(&self, request: ApprovalRequest) -> Pin<Box<dyn Future<Output = Answer> + Send + '_>> {
        Box::pin(async move {
            let refuse = |reason: String| Answer {
                verdict: ApprovalAnswer::Denied(reason),
                by: AnsweredBy::nobody(Channel::Queue),
            };
            let call_id = request.call_id.clone();
            if let Err(error) = check_call_id(&call_id) {
                return refuse(error.to_string());
            }
            // The guard removes the entry and the answer however the wait ends, including the
            // future being dropped.
            let (queue, _guard) = match Queue::open(&self.state_dir)
                .and_then(|queue| queue.hold(&request).map(|guard| (queue, guard)))
            {
                Ok(held) => held,
                Err(error) => {
                    return refuse(format!(
                        "the approval request for tool `{}` on server `{}` could not be queued: {}",
                        text::escape(&request.exposed_tool),
                        text::escape(&request.server),
                        crate::text::error_chain(&error)
                    ));
                }
            };
            tracing::info!(
                call_id = %call_id,
                "call `{call_id}` of tool `{}` on server `{}` waits for an approval: run `toolward approvals approve {call_id}` or `toolward approvals deny {call_id}`",
                text::escape(&request.exposed_tool),
                text::escape(&request.server)
            );
            let name = entry_name(&call_id);
            let mut forgeries = 0;
            loop {
                tokio::time::sleep(QUEUE_POLL_INTERVAL).await;
                match queue.read_answer(&request) {
                    None => {}
                    Some(Ok(answer)) => return answer,
                    Some(Err((why, identity))) => {
                        queue.remove_answer(&name, identity);
                        forgeries += 1;
                        self.forged(&queue, &request, &why, forgeries);
                    }
                }
                if !queue.pending_exists(&name) {
                    return refuse(String::from("the pending approval request was removed"));
                }
            }
        })
    }

    fn channel(&self) -> Channel {
        Channel::Queue
    }
}
