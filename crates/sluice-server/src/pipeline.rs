//! Pipelined writes as one engine batch.
//!
//! A client that pipelines sends many commands in one read. The write
//! commands among them that follow one another run in one transaction,
//! under the locks of all their keys, and reach the engine as one
//! `WriteBatch`: one turn of the group commit, one journal append and one
//! lock hold instead of one of each per command (under redis-benchmark's
//! `-P 16` on one hot key, those turns were most of a command's cost).
//!
//! The replies are those the commands would get run one by one: each sees
//! the writes of those before it (a [`Txn`] reads what it staged); one
//! that fails stages nothing (a data command checks before it stages, the
//! rule `EXEC` relies on too), so the others stand; the batch commits
//! whole or not at all, and if the engine refuses it every command of the
//! run answers that error. Only the timing differs: the writes become
//! visible together, when the last of them would have, and their replies
//! went out together anyway. Blocking commands, transactions, Pub/Sub
//! mode, `CLIENT REPLY`, `MONITOR` and replicated shards keep the
//! one-by-one path.

use std::collections::VecDeque;

use crate::clock::Clock;
use crate::cmd::{self, Kind, Request, Spec};
use crate::data;
use crate::resp::Out;
use crate::server::{Client, Server};
use crate::store::Txn;

/// Most commands run as one batch.
const RUN_MAX_COMMANDS: usize = 256;

/// How many commands at the front of `queue` run as one batch; below 2,
/// the caller runs the next command alone.
pub fn write_run_len(server: &Server, client: &Client, queue: &VecDeque<Request>) -> usize {
    if queue.len() < 2
        || !client.authenticated
        || client.multi.is_some()
        || client.reply_off
        || client.skip_next_reply
        || !client.channels.is_empty()
        || !client.patterns.is_empty()
        || server.replica.get().is_some()
        || server.monitors.active()
    {
        return 0;
    }
    queue
        .iter()
        .take(RUN_MAX_COMMANDS)
        .take_while(|req| batchable(req).is_some())
        .count()
}

/// The first key of the command at the front of `queue` when it is a
/// write that will lock it: the connection waits for that key's stripe
/// before it runs the command ([`crate::store::Keyspace::wait_for_stripe`]).
pub fn next_write_key<'a>(client: &Client, queue: &'a VecDeque<Request>) -> Option<&'a [u8]> {
    if client.multi.is_some() {
        return None;
    }
    let req = queue.front()?;
    let (_, spec) = batchable(req)?;
    let i = usize::try_from(spec.first_key).ok().filter(|&i| i > 0)?;
    req.args.get(i).map(|a| &a[..])
}

/// The spec of a command that may join a batch: a known, well-formed,
/// non-blocking write.
fn batchable(req: &Request) -> Option<(usize, &'static Spec)> {
    let i = req.index?;
    let spec = &cmd::COMMANDS[i];
    (spec.kind == Kind::Write
        && cmd::arity_ok(spec, req.args.len())
        && !spec.flags.contains(&"blocking"))
    .then_some((i, spec))
}

/// Runs `run` (from [`write_run_len`]) as one transaction and one batch,
/// writing each command's reply to `out` in order; `clock` times the run
/// (each command is charged an equal share) and gives its wall-clock time.
pub fn execute_writes(
    server: &Server,
    client: &mut Client,
    run: Vec<Request>,
    out: &mut Out,
    clock: &mut Clock,
) -> cmd::After {
    let specs: Vec<(usize, &'static Spec)> = run
        .iter()
        .map(|req| batchable(req).expect("checked by write_run_len"))
        .collect();
    let run: Vec<_> = run.into_iter().map(|req| req.args).collect();
    let ks = &server.ks;
    let mut keys: Vec<&[u8]> = Vec::with_capacity(run.len());
    for ((_, spec), args) in specs.iter().zip(&run) {
        keys.extend(cmd::keys_of(spec, args));
    }
    let mut held = ks.lock_keys(&keys);
    let ctx = cmd::ctx(server);
    let mut txn = Txn::new_at(ks, clock.now_ms());
    txn.db = client.db;
    txn.notify = cmd::txn_flags(server);
    let start = out.buf.len();
    let mut failed = Vec::with_capacity(run.len());
    for (n, ((_, spec), args)) in specs.iter().zip(&run).enumerate() {
        txn.run_left = run.len() - 1 - n;
        let at = out.buf.len();
        let mark = txn.events_len();
        txn.misses = cmd::misses_of(spec, args, txn.notify);
        let r = data::run(spec.name, args, &mut txn, &ctx, out);
        if let Err(e) = &r {
            out.buf.truncate(at);
            out.error(e);
            txn.truncate_events(mark);
        }
        failed.push(r.is_err());
    }
    let mut events = txn.take_events();
    let mut written = Vec::new();
    if txn.has_writes() {
        written = txn.written_keys().to_vec();
        if let Err(e) = txn.commit(&mut held) {
            // Nothing of the batch was applied: every reply is the error.
            let e = data::engine(e);
            out.buf.truncate(start);
            for f in &mut failed {
                out.error(&e);
                *f = true;
            }
            written.clear();
            events.clear();
        }
    }
    drop(held);
    cmd::publish_committed(server, &written, events);
    if server.blocking.any() && !written.is_empty() {
        cmd::serve_blocked(server, client.db, written);
    }
    let each = clock.lap() / run.len() as u32;
    for ((i, _), f) in specs.iter().zip(failed) {
        server.record(Some(*i), each, f);
    }
    let (_, last) = specs[specs.len() - 1];
    client.last_command = cmd::full_name(last, &run[run.len() - 1]);
    client.skip_this_reply = false;
    cmd::After::Continue
}
