//! Audit records chained in memory: [`AuditChain`] stamps events into chained records as
//! every store must (an embedder's own store uses it), and [`MemoryAudit`] is the store of a
//! toolward started without a state folder: it keeps the chain's head and sends every record
//! to its subscribers, keeping none.

use std::path::PathBuf;
use std::sync::{Mutex, OnceLock, PoisonError};

use tokio::sync::broadcast;

use super::{
    AuditError, AuditEvent, AuditHead, AuditRecord, AuditStore, ComponentHashes, MAX_RECORD_BYTES,
};
use crate::canonical::sha256_hex;
use crate::text::IN_MEMORY;

/// Records a subscriber of [`MemoryAudit`] may fall behind by before it misses some: 4096.
/// A call writes a handful; a subscriber that lags further gets
/// [`broadcast::error::RecvError::Lagged`] with the count it missed, never a gap it cannot see.
pub const AUDIT_EVENTS_CAPACITY: usize = 4096;

/// Where a store sends the records it made durable to its subscribers: a broadcast channel
/// made at the first [`subscribe`](Self::subscribe). tokio makes all
/// [`AUDIT_EVENTS_CAPACITY`] slots at once, a record's room each (3.6 MB, every page
/// written), so a toolward nobody subscribes to, the CLI's gateway among them, does not pay
/// for them: made at the store's open, they were most of what `serve` gained in resident memory
/// after `ecca859` (BENCHMARKS.md §17).
#[derive(Debug, Default)]
pub(crate) struct RecordStream(OnceLock<broadcast::Sender<AuditRecord>>);

impl RecordStream {
    /// A receiver of the records sent from now on.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<AuditRecord> {
        self.0
            .get_or_init(|| broadcast::channel(AUDIT_EVENTS_CAPACITY).0)
            .subscribe()
    }

    /// Whether anyone would receive what is sent now: records are copied for the stream only
    /// then.
    pub(crate) fn listened(&self) -> bool {
        self.0.get().is_some_and(|events| events.receiver_count() > 0)
    }

    /// Sends `record` to the subscribers, if any. None is not an error: the store keeps
    /// the records, or says it keeps none.
    pub(crate) fn send(&self, record: AuditRecord) {
        if let Some(events) = self.0.get() {
            let _ = events.send(record);
        }
    }
}

/// The end of a hash chain of audit records: the next `seq`, the hash of the last record and
/// the component hashes stamped on records that carry none. [`seal`](Self::seal) turns
/// events into the records that follow, as the state folder's log and PostgreSQL write them,
/// so a store of an embedder's keeps the contract of [`AuditStore`] by calling it under its
/// own lock.
#[derive(Debug, Clone)]
pub struct AuditChain {
    next_seq: u64,
    prev: String,
    components: Option<ComponentHashes>,
}

impl Default for AuditChain {
    fn default() -> Self {
        Self::new()
    }
}

impl AuditChain {
    /// An empty chain: the first record gets `seq` 0 and `prev` [`GENESIS_PREV`](super::GENESIS_PREV).
    #[must_use]
    pub fn new() -> AuditChain {
        AuditChain::after(&AuditHead::empty())
    }

    /// The chain that continues after `head` (a store that keeps records reopened).
    #[must_use]
    pub fn after(head: &AuditHead) -> AuditChain {
        AuditChain {
            next_seq: head.records,
            prev: head.hash.clone(),
            components: None,
        }
    }

    /// Sets the component hashes stamped on every later record whose `components` is `None`
    /// ([`AuditStore::set_components`]).
    pub fn set_components(&mut self, components: ComponentHashes) {
        self.components = Some(components);
    }

    /// The chain's end: the records sealed so far and the last one's hash.
    #[must_use]
    pub fn head(&self) -> AuditHead {
        AuditHead {
            records: self.next_seq,
            hash: self.prev.clone(),
        }
    }

    /// Turns `events` into the next records, stamped with the time `time_ms` (milliseconds
    /// since the Unix epoch) and the component hashes, each with its exact bytes (JSON, no
    /// newline: what the next record's `prev` hashes, and what an export writes as a line).
    /// The chain moves on only when every event could be sealed.
    ///
    /// # Errors
    /// [`AuditError::Encode`], or [`AuditError::RecordTooLarge`] for a record of more than
    /// 64 MiB (the log's bound on a line); the chain is then unchanged.
    pub fn seal(
        &mut self,
        events: Vec<AuditEvent>,
        time_ms: u64,
    ) -> Result<Vec<(AuditRecord, Vec<u8>)>, AuditError> {
        let mut next = self.clone();
        let mut sealed = Vec::with_capacity(events.len());
        for mut event in events {
            if event.components.is_none() {
                event.components = next.components.clone();
            }
            let record = AuditRecord {
                seq: next.next_seq,
                time: time_ms,
                prev: std::mem::take(&mut next.prev),
                event,
            };
            let bytes = serde_json::to_vec(&record).map_err(|source| AuditError::Encode {
                path: PathBuf::from(IN_MEMORY),
                source,
            })?;
            if bytes.len() > MAX_RECORD_BYTES {
                return Err(AuditError::RecordTooLarge {
                    path: PathBuf::from(IN_MEMORY),
                    bytes: bytes.len(),
                    limit: MAX_RECORD_BYTES,
                });
            }
            next.prev = sha256_hex(&bytes);
            next.next_seq = next.next_seq.saturating_add(1);
            sealed.push((record, bytes));
        }
        *self = next;
        Ok(sealed)
    }
}

/// The audit store of a toolward started without a state folder or a store of the
/// embedder's: records are chained ([`AuditChain`]) and sent to every subscriber
/// ([`subscribe`](AuditStore::subscribe), [`crate::Toolward::audit_events`]), in `seq`
/// order; none is kept, so a record nobody received is gone. Keep them with a store of your
/// own when they must outlive the process.
#[derive(Debug)]
pub struct MemoryAudit {
    chain: Mutex<AuditChain>,
    events: RecordStream,
}

impl Default for MemoryAudit {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryAudit {
    /// An empty chain with no subscriber yet.
    #[must_use]
    pub fn new() -> MemoryAudit {
        MemoryAudit {
            chain: Mutex::new(AuditChain::new()),
            events: RecordStream::default(),
        }
    }

    fn chain(&self) -> std::sync::MutexGuard<'_, AuditChain> {
        self.chain.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl AuditStore for MemoryAudit {
    fn name(&self) -> String {
        "audit records in memory".to_owned()
    }

    fn waits(&self) -> bool {
        false
    }

    fn set_components(&self, components: ComponentHashes) {
        self.chain().set_components(components);
    }

    fn append_batch(&self, events: Vec<AuditEvent>) -> Result<Option<u64>, AuditError> {
        let time = super::now_ms()?;
        // Sent under the chain's lock, so every subscriber sees the records in `seq` order.
        let mut chain = self.chain();
        let sealed = chain.seal(events, time)?;
        let last = sealed.last().map(|(record, _)| record.seq);
        for (record, _) in sealed {
            self.events.send(record);
        }
        Ok(last)
    }

    fn write(&self, events: Vec<AuditEvent>) -> Result<(), AuditError> {
        self.append_batch(events).map(|_| ())
    }

    fn head(&self) -> Option<AuditHead> {
        Some(self.chain().head())
    }

    fn subscribe(&self) -> Option<broadcast::Receiver<AuditRecord>> {
        Some(self.events.subscribe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::{AuditKind, ChainCheck};

    #[test]
    fn memory_audit_sends_every_record_chained_in_order() {
        let store = MemoryAudit::new();
        let mut events = store.subscribe().unwrap();
        store
            .append_batch(vec![
                AuditEvent::new(AuditKind::Load),
                AuditEvent::new(AuditKind::CallReceived),
            ])
            .unwrap();
        store.append(AuditEvent::new(AuditKind::Refusal)).unwrap();
        let mut check = ChainCheck::default();
        for seq in 0..3 {
            let record = events.try_recv().unwrap();
            assert_eq!(record.seq, seq);
            let line = serde_json::to_vec(&record).unwrap();
            check.check(&line).unwrap();
        }
        assert_eq!(store.head().unwrap().records, 3);
        assert_eq!(store.head().unwrap().hash, check.last_hash());
    }

    #[test]
    fn the_record_stream_is_made_at_the_first_subscribe_and_hears_from_then_on() {
        let store = MemoryAudit::new();
        store.append(AuditEvent::new(AuditKind::Load)).unwrap();
        assert!(
            store.events.0.get().is_none(),
            "no channel (3.6 MB of slots) before anyone subscribes"
        );
        assert!(!store.events.listened());
        let mut events = store.subscribe().unwrap();
        assert!(store.events.listened());
        store.append(AuditEvent::new(AuditKind::Refusal)).unwrap();
        assert_eq!(events.try_recv().unwrap().seq, 1, "the record before it is not sent");
        assert!(events.try_recv().is_err());
        drop(events);
        assert!(!store.events.listened(), "a dropped receiver listens no more");
    }

    #[test]
    fn a_record_that_cannot_be_sealed_leaves_the_chain_unchanged() {
        let mut chain = AuditChain::new();
        let huge = AuditEvent {
            reason: Some("x".repeat(MAX_RECORD_BYTES)),
            ..AuditEvent::new(AuditKind::Refusal)
        };
        let err = chain
            .seal(vec![AuditEvent::new(AuditKind::Load), huge], 0)
            .unwrap_err();
        assert!(matches!(err, AuditError::RecordTooLarge { .. }), "{err}");
        assert_eq!(chain.head(), AuditHead::empty());
    }
}
