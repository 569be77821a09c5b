//! The approvals queue in PostgreSQL: a call held on one gateway is listed and answered from
//! any machine whose `toolward approvals --config` names the same database.
//!
//! A held call is a row of `toolward_approvals` in state `pending`, with its deadline (the
//! holding gateway's `limits.approval_timeout_ms`). An answer is one `UPDATE ... WHERE state
//! = 'pending' AND expires_at_ms > now`: of two answers, the second finds no pending row, so
//! the first wins, transactionally. The same transaction sends `NOTIFY toolward_approvals`;
//! every gateway `LISTEN`s on one connection of its own and wakes its waiting calls, which
//! also look every [`POLL_INTERVAL`] in case a notification was missed (a reconnect). The
//! row names who answered (the operating-system user and uid of `toolward approvals`, and
//! the machine and process it ran on), and the waiting gateway records it in the
//! `approval-answered` audit record.
//!
//! Unlike the state folder's queue, rows are not MAC'd: anyone who can update the table can
//! answer; the database's access control is the boundary (SECURITY.md). The entry's
//! `arguments` are still checked against its `arguments_sha256` when listed.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use deadpool_postgres::Pool;
use tokio::sync::watch;

use crate::approval::{
    Answer, AnsweredBy, ApprovalAnswer, ApprovalRequest, Approver, Channel, MAX_PENDING_REQUESTS,
    ApprovalError, PendingEntry, check_call_id, current_os_user,
};
use crate::identity::{Approvers, HeldCall};
use crate::audit::AuditStore;
use crate::database::{PgError, PgStore, now_ms, this_process};
use crate::store::approvals::{ApprovalStore, ApprovalStoreError, StoreFuture};

/// How often a waiting call looks at its row besides being woken by `NOTIFY`: 500 ms, so a
/// missed notification still reaches it within a second.
pub const POLL_INTERVAL: Duration = Duration::from_millis(500);

/// How long the listener waits before connecting again after its connection is lost: 1 s.
pub const LISTEN_RETRY: Duration = Duration::from_secs(1);

/// The channel of `LISTEN`/`NOTIFY`.
const CHANNEL: &str = "toolward_approvals";

/// The PostgreSQL approvals store.
#[derive(Clone)]
pub struct PgApprovals {
    inner: Arc<Inner>,
}

struct Inner {
    store: PgStore,
    pool: Pool,
    approval_timeout: Duration,
    wakeups: OnceLock<watch::Receiver<u64>>,
}

impl std::fmt::Debug for PgApprovals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgApprovals")
            .field("store", &self.inner.store.name())
            .finish_non_exhaustive()
    }
}

impl PgApprovals {
    /// A connection from the pool; an error names the store.
    async fn client(&self) -> Result<deadpool_postgres::Object, PgError> {
        self.inner
            .pool
            .get()
            .await
            .map_err(|e| self.inner.store.connect_error(e))
    }

    /// The approvals of `store`; a held call waits at most `approval_timeout` (after it,
    /// answers are refused).
    ///
    /// # Errors
    ///
    /// [`PgError::Connect`] when the pool cannot be built.
    pub fn new(store: &PgStore, approval_timeout: Duration) -> Result<PgApprovals, PgError> {
        Ok(PgApprovals {
            inner: Arc::new(Inner {
                store: store.clone(),
                pool: store.pool()?,
                approval_timeout,
                wakeups: OnceLock::new(),
            }),
        })
    }

    /// Refuses a database without this toolward's schema, as [`PgStore::check_schema`].
    ///
    /// # Errors
    ///
    /// As [`PgStore::check_schema`].
    pub async fn check_schema(&self) -> Result<(), PgError> {
        self.inner.store.check_schema(&self.inner.pool).await
    }

    fn name_quoted(&self) -> String {
        format!("PostgreSQL store {}", self.inner.store.name())
    }

    /// A receiver that changes on every `NOTIFY`; starts the listener on first use (on the
    /// current runtime).
    fn wakeups(&self) -> watch::Receiver<u64> {
        self.inner
            .wakeups
            .get_or_init(|| {
                let (sender, receiver) = watch::channel(0u64);
                tokio::spawn(listen(self.inner.store.clone(), sender));
                receiver
            })
            .clone()
    }

    async fn hold(&self, request: &ApprovalRequest) -> Result<(), PgError> {
        let store = &self.inner.store;
        let text = serde_json::to_string(request)
            .map_err(|e| store.query_error("encode the held call", e))?;
        let held = now_ms();
        let timeout_ms = i64::try_from(self.inner.approval_timeout.as_millis()).unwrap_or(i64::MAX);
        let client = self.client().await?;
        client
            .execute(
                "INSERT INTO toolward_approvals (call_id, request, held_by, held_at_ms, expires_at_ms) VALUES ($1, $2, $3, $4, $5)",
                &[
                    &request.call_id,
                    &text,
                    &this_process(),
                    &held,
                    &held.saturating_add(timeout_ms),
                ],
            )
            .await
            .map_err(|e| store.query_error("hold the call", e))?;
        Ok(())
    }

    /// The answer to `call_id`, when there is one.
    async fn check(&self, call_id: &str) -> Result<Option<Answer>, PgError> {
        let store = &self.inner.store;
        let client = self.client().await?;
        let row = client
            .query_opt(
                "SELECT state, reason, answerer, answerer_uid, answered_through, answerer_groups FROM toolward_approvals WHERE call_id = $1",
                &[&call_id],
            )
            .await
            .map_err(|e| store.query_error("read the held call", e))?;
        let Some(row) = row else {
            return Ok(None);
        };
        let state: String = row.get(0);
        let reason: Option<String> = row.get(1);
        // The console's answers say so; `toolward approvals` leaves the channel empty.
        let channel = match row.get::<_, Option<&str>>(4) {
            Some("console") => Channel::Console,
            _ => Channel::Queue,
        };
        let by = AnsweredBy {
            channel,
            answerer: row.get(2),
            uid: row
                .get::<_, Option<i64>>(3)
                .and_then(|uid| u32::try_from(uid).ok()),
            groups: row
                .get::<_, Option<Vec<String>>>(5)
                .unwrap_or_default(),
        };
        let verdict = match state.as_str() {
            "approved" => ApprovalAnswer::Approved,
            "denied" => ApprovalAnswer::Denied(
                reason.unwrap_or_else(|| String::from("denied through the approvals queue")),
            ),
            _ => return Ok(None),
        };
        Ok(Some(Answer { verdict, by }))
    }
}

/// Marks a held call abandoned when its wait ends without an answer (timeout, cancel).
struct Abandon {
    pool: Option<Pool>,
    call_id: String,
}

impl Drop for Abandon {
    fn drop(&mut self) {
        let Some(pool) = self.pool.take() else {
            return;
        };
        let call_id = std::mem::take(&mut self.call_id);
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                if let Ok(client) = pool.get().await {
                    let _ = client
                        .execute(
                            "UPDATE toolward_approvals SET state = 'abandoned' WHERE call_id = $1 AND state = 'pending'",
                            &[&call_id],
                        )
                        .await;
                }
            });
        }
    }
}

impl Approver for PgApprovals {
    fn ask(&self, request: ApprovalRequest) -> Pin<Box<dyn Future<Output = Answer> + Send + '_>> {
        Box::pin(async move {
            let refuse = |reason: String| Answer {
                verdict: ApprovalAnswer::Denied(reason),
                by: AnsweredBy::nobody(Channel::Queue),
            };
            if let Err(error) = check_call_id(&request.call_id) {
                return refuse(error.to_string());
            }
            let mut wakeups = self.wakeups();
            if let Err(error) = self.hold(&request).await {
                return refuse(format!(
                    "the call could not be held for an approval: {error}"
                ));
            }
            let mut abandon = Abandon {
                pool: Some(self.inner.pool.clone()),
                call_id: request.call_id.clone(),
            };
            loop {
                match self.check(&request.call_id).await {
                    Ok(Some(answer)) => {
                        abandon.pool = None;
                        return answer;
                    }
                    Ok(None) => {}
                    // The database may come back before the approval timeout ends the wait.
                    Err(error) => tracing::warn!(call_id = %request.call_id, "{error}"),
                }
                tokio::select! {
                    changed = wakeups.changed() => {
                        if changed.is_err() {
                            tokio::time::sleep(POLL_INTERVAL).await;
                        }
                    }
                    () = tokio::time::sleep(POLL_INTERVAL) => {}
                }
            }
        })
    }

    fn channel(&self) -> Channel {
        Channel::Queue
    }
}

/// Listens for `NOTIFY toolward_approvals` on a connection of its own, bumping `sender` on
/// each, connecting again after [`LISTEN_RETRY`] when the connection is lost; ends when every
/// receiver is gone.
async fn listen(store: PgStore, sender: watch::Sender<u64>) {
    loop {
        if let Ok((client, driver)) = store.connect_listening(sender.clone()).await {
            if client
                .batch_execute(&format!("LISTEN {CHANNEL}"))
                .await
                .is_ok()
            {
                // Calls held before the listener was ready look again.
                sender.send_modify(|n| *n = n.wrapping_add(1));
                tokio::select! {
                    _ = driver => {}
                    () = sender.closed() => return,
                }
            } else {
                driver.abort();
            }
        }
        tokio::select! {
            () = tokio::time::sleep(LISTEN_RETRY) => {}
            () = sender.closed() => return,
        }
    }
}

impl ApprovalStore for PgApprovals {
    fn name(&self) -> String {
        self.name_quoted()
    }

    fn approver(&self, _audit: Option<Arc<dyn AuditStore>>) -> Arc<dyn Approver> {
        Arc::new(self.clone())
    }

    fn list(&self) -> StoreFuture<'_, Vec<PendingEntry>> {
        Box::pin(async move {
            let store = &self.inner.store;
            let client = self.client().await?;
            let limit = i64::try_from(MAX_PENDING_REQUESTS).unwrap_or(i64::MAX);
            let rows = client
                .query(
                    "SELECT request, expires_at_ms FROM toolward_approvals WHERE state = 'pending' ORDER BY held_at_ms, call_id LIMIT $1",
                    &[&limit],
                )
                .await
                .map_err(|e| store.query_error("list held calls", e))?;
            let now = now_ms();
            let mut entries = Vec::with_capacity(rows.len());
            for row in rows {
                let text: String = row.get(0);
                let expires: i64 = row.get(1);
                let request: ApprovalRequest = match serde_json::from_str(&text) {
                    Ok(request) => request,
                    Err(error) => {
                        tracing::warn!(
                            "skipping a held call in {} that is not a request: {error}",
                            store.name()
                        );
                        continue;
                    }
                };
                let problem = (crate::canonical::sha256_hex(request.arguments.as_bytes())
                    != request.arguments_sha256)
                    .then(|| String::from("its `arguments` do not hash to its `arguments_sha256`"));
                entries.push(PendingEntry {
                    request,
                    waiting: expires > now,
                    problem,
                });
            }
            Ok(entries)
        })
    }

    fn answer<'a>(
        &'a self,
        call_id: &'a str,
        approve: bool,
        reason: Option<String>,
        approvers: &'a Approvers,
    ) -> StoreFuture<'a, AnsweredBy> {
        Box::pin(async move {
            let user = current_os_user();
            let by = AnsweredBy::os_user(Channel::Queue, &user);
            let reason = (!approve).then(|| {
                reason.unwrap_or_else(|| {
                    format!("denied through the approvals queue by `{}`", user.name)
                })
            });
            self.answer_as(call_id, approve, reason, by, approvers).await
        })
    }

    fn abandon_ended(&self) -> StoreFuture<'_, Vec<ApprovalRequest>> {
        Box::pin(async move {
            let store = &self.inner.store;
            let client = self.client().await?;
            let rows = client
                .query(
                    "UPDATE toolward_approvals SET state = 'abandoned' WHERE state = 'pending' AND expires_at_ms <= $1 RETURNING request",
                    &[&now_ms()],
                )
                .await
                .map_err(|e| store.query_error("abandon expired held calls", e))?;
            Ok(rows
                .iter()
                .filter_map(|row| serde_json::from_str(row.get::<_, &str>(0)).ok())
                .collect())
        })
    }
}

impl PgApprovals {
    /// Answers the held call `call_id` as `by` (the console's signed-in user, or the
    /// operating-system user of `toolward approvals`): approve, or deny with `reason`; judged
    /// by `approvers` against the held call first. The first answer wins.
    ///
    /// # Errors
    ///
    /// As [`ApprovalStore::answer`].
    pub async fn answer_as(
        &self,
        call_id: &str,
        approve: bool,
        reason: Option<String>,
        by: AnsweredBy,
        approvers: &Approvers,
    ) -> Result<AnsweredBy, ApprovalStoreError> {
        check_call_id(call_id)?;
        let store = &self.inner.store;
        let state = if approve { "approved" } else { "denied" };
        let reason = if approve { None } else { reason };
        let now = now_ms();
        let mut client = self.client().await?;
        let tx = client
            .transaction()
            .await
            .map_err(|e| store.query_error("begin the answer", e))?;
        if approvers.named() {
            let row = tx
                .query_opt(
                    "SELECT request FROM toolward_approvals WHERE call_id = $1",
                    &[&call_id],
                )
                .await
                .map_err(|e| store.query_error("read the held call", e))?;
            if let Some(row) = row {
                let text: String = row.get(0);
                let refused = |reason: String| {
                    ApprovalStoreError::Queue(ApprovalError::NotAnApprover {
                        call_id: call_id.to_owned(),
                        reason,
                    })
                };
                let request: ApprovalRequest = serde_json::from_str(&text).map_err(|e| {
                    refused(format!("its held call cannot be read to judge who may answer it: {e}"))
                })?;
                // A fleet's gateways run on other machines: whose uid holds the call is
                // not known here.
                let held = HeldCall {
                    server: &request.server,
                    effect: &request.effect,
                    principal: &request.principal,
                    holder_uid: None,
                };
                approvers.may_answer(&by, &held).map_err(refused)?;
            }
        }
        // The channel and groups columns only for the console's answers: `toolward approvals`
        // runs as an approver role, whose grant names the columns of version 5 alone.
        let answered = "UPDATE toolward_approvals SET state = $2, reason = $3, answerer = $4, answerer_uid = $5, answered_from = $6, answered_at_ms = $7";
        let pending = "WHERE call_id = $1 AND state = 'pending' AND expires_at_ms > $7";
        let (answerer, uid, from) = (&by.answerer, by.uid.map(i64::from), this_process());
        let updated = if by.channel == Channel::Console {
            let groups = by.groups.clone();
            tx.execute(
                &format!("{answered}, answered_through = $8, answerer_groups = $9 {pending}"),
                &[
                    &call_id,
                    &state,
                    &reason,
                    answerer,
                    &uid,
                    &from,
                    &now,
                    &Channel::Console.as_str(),
                    &groups,
                ],
            )
            .await
        } else {
            tx.execute(
                &format!("{answered} {pending}"),
                &[&call_id, &state, &reason, answerer, &uid, &from, &now],
            )
            .await
        }
        .map_err(|e| store.query_error("answer the held call", e))?;
        if updated == 0 {
            let row = tx
                .query_opt(
                    "SELECT state FROM toolward_approvals WHERE call_id = $1",
                    &[&call_id],
                )
                .await
                .map_err(|e| store.query_error("read the held call", e))?;
            let name = self.name_quoted();
            return Err(match row.map(|row| row.get::<_, String>(0)) {
                None => ApprovalStoreError::NotPending {
                    call_id: call_id.to_owned(),
                    store: name,
                },
                Some(found) if found == "pending" || found == "abandoned" => {
                    ApprovalStoreError::Expired {
                        call_id: call_id.to_owned(),
                        store: name,
                    }
                }
                Some(found) => ApprovalStoreError::AlreadyAnswered {
                    call_id: call_id.to_owned(),
                    state: found,
                    store: name,
                },
            });
        }
        tx.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &call_id])
            .await
            .map_err(|e| store.query_error("notify the waiting gateway", e))?;
        tx.commit()
            .await
            .map_err(|e| store.query_error("commit the answer", e))?;
        Ok(by)
    }
}
