//! PATCH(sluicedb): the leader's own log appends, reported to `RaftCore` as their flushes
//! complete, in log order.
//!
//! `RaftCore` submits the leader's input entries to `RaftLogStorage::append` without waiting
//! for the `LogFlushed` callback, so it can replicate them while they are synced (Ongaro,
//! "Consensus: Bridging Theory and Practice", Stanford 2014, §10.2.1). Each append's
//! callback receiver is queued here; one task awaits them one after another and sends the
//! core a `Notify::LocalLogFlushed` for each, so the core learns of flushes in the order the
//! entries were appended (never one task per append: a later flush reported first would
//! count entries whose earlier neighbours are not yet durable).

use anyerror::AnyError;
use tokio::sync::mpsc;

use crate::core::notify::Notify;
use crate::type_config::alias::OneshotReceiverOf;
use crate::LogId;
use crate::RaftTypeConfig;
use crate::StorageIOError;
use crate::Vote;

/// One append of the leader's entries whose flush is awaited.
pub(crate) struct Pending<C>
where C: RaftTypeConfig
{
    pub(crate) vote: Vote<C::NodeId>,
    pub(crate) last_log_id: LogId<C::NodeId>,
    pub(crate) rx: OneshotReceiverOf<C, Result<crate::raft_state::LogIOId<C::NodeId>, std::io::Error>>,
}

/// Awaits each pending append's flush in the order queued and reports it to the core; ends
/// when the core drops its sender or its notification channel.
pub(crate) async fn wait_in_order<C>(
    mut rx_pending: mpsc::UnboundedReceiver<Pending<C>>,
    tx_notify: mpsc::UnboundedSender<Notify<C>>,
) where
    C: RaftTypeConfig,
{
    while let Some(p) = rx_pending.recv().await {
        let result = match p.rx.await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(StorageIOError::write_logs(AnyError::error(e))),
            // The callback was dropped without a report: the flush is not known to be done.
            Err(e) => Err(StorageIOError::write_logs(AnyError::error(e))),
        };
        let notify = Notify::LocalLogFlushed {
            vote: p.vote,
            last_log_id: p.last_log_id,
            result,
        };
        if tx_notify.send(notify).is_err() {
            return;
        }
    }
}
