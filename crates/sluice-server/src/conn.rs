//! The network side: accepting, one task per connection, the background
//! tasks (journal sync each second, the expiry reaper), and shutdown.
//!
//! A connection reads what the client sent, parses every whole command in
//! it (pipelining), runs them, and writes the replies in one go. Commands
//! run on the runtime's worker thread itself, as Kvrocks runs them on its
//! workers: engine calls are short (memory, the page cache, a journal
//! append), and handing each batch to another thread cost more than the
//! commands (measured: `block_in_place` grew the pool to 311 threads under
//! redis-benchmark's 50 clients, with 0.6× the throughput and 3.4× the
//! peak RSS). Under `appendfsync always` every write waits for a sync
//! (~3.5 ms here), so there the batch runs under `block_in_place` and the
//! worker goes on serving other connections, whose writes join the same
//! group commit. Replies are written out
//! whenever 64 KiB have gathered, so a client that reads slowly holds back
//! only itself and the server never buffers more than that plus one reply
//! for it. Shutdown: no new connections; each connection finishes the
//! commands it is running, sends their replies and closes; then the journal
//! is synced and the database closed.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::clock::Clock;
use crate::cmd::{self, After, Request};
use crate::resp::{Out, Parsed, RequestLimits, RequestParser};
use crate::server::{Client, Server};
use crate::store::Fsync;

/// Replies gathered before they are written out mid-pipeline.
const OUT_FLUSH_BYTES: usize = 64 * 1024;
/// Bytes read per system call at least.
const READ_CHUNK_BYTES: usize = 16 * 1024;

/// Serves until `stopped` turns true; then closes the database.
pub async fn serve(
    server: Arc<Server>,
    listeners: Vec<std::net::TcpListener>,
    metrics: Option<std::net::TcpListener>,
    stop: watch::Sender<bool>,
    stopped: watch::Receiver<bool>,
) -> Result<(), String> {
    let mut accepts = JoinSet::new();
    let conns = Arc::new(tokio::sync::Mutex::new(JoinSet::new()));
    for l in listeners {
        let l = TcpListener::from_std(l).map_err(|e| e.to_string())?;
        accepts.spawn(accept_loop(
            server.clone(),
            l,
            stop.clone(),
            stopped.clone(),
            conns.clone(),
        ));
    }
    if let Some(l) = metrics {
        let l = TcpListener::from_std(l).map_err(|e| e.to_string())?;
        tokio::spawn(crate::metrics::serve(server.clone(), l, stopped.clone()));
    }
    let background = tokio::spawn(background(server.clone(), stopped.clone()));
    if server.config.read().handle_signals {
        tokio::spawn(signals(stop.clone()));
    }
    let mut wait = stopped.clone();
    let _ = wait.wait_for(|s| *s).await;
    while accepts.join_next().await.is_some() {}
    // Connections finish what they run and close: each checks `stopped`
    // before it reads, and one waiting to read or blocked is woken by its
    // kick (which stays set if it is not waiting yet). Every client is
    // registered by now, the accept loops having ended.
    for c in server.clients.lock().values() {
        c.kick();
    }
    let mut set = std::mem::take(&mut *conns.lock().await);
    while set.join_next().await.is_some() {}
    let _ = background.await;
    let ks = &server.ks;
    if let Some(r) = server.replica.get() {
        crate::raft::stop(r).await;
        // The applied entries are not journaled: flushed, a restart need
        // not apply them again.
        tokio::task::block_in_place(|| ks.db().flush()).map_err(|e| format!("final flush: {e}"))?;
    }
    tokio::task::block_in_place(|| ks.db().sync()).map_err(|e| format!("final sync: {e}"))
}

async fn signals(stop: watch::Sender<bool>) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    let _ = stop.send(true);
}

async fn accept_loop(
    server: Arc<Server>,
    listener: TcpListener,
    stop: watch::Sender<bool>,
    mut stopped: watch::Receiver<bool>,
    conns: Arc<tokio::sync::Mutex<JoinSet<()>>>,
) {
    while let Some((stream, addr)) = accept(&listener, &mut stopped).await {
        server.connections_received.fetch_add(1, Ordering::Relaxed);
        let _ = stream.set_nodelay(true);
        let maxclients = server.config.read().maxclients;
        if server.clients.lock().len() >= maxclients {
            server.connections_rejected.fetch_add(1, Ordering::Relaxed);
            let mut stream = stream;
            tokio::spawn(async move {
                let _ = stream
                    .write_all(b"-ERR max number of clients reached\r\n")
                    .await;
            });
            continue;
        }
        let laddr = stream.local_addr().unwrap_or(addr);
        let client = Client::new(&server, addr, laddr);
        let mut set = conns.lock().await;
        // Reap finished connections so the set does not grow.
        while set.try_join_next().is_some() {}
        set.spawn(connection(
            server.clone(),
            stream,
            client,
            stop.clone(),
            stopped.clone(),
        ));
    }
}

/// The next connection, or `None` once `stopped` turns true. A failed
/// accept (out of descriptors and the like) backs off a little and retries.
pub async fn accept(
    listener: &TcpListener,
    stopped: &mut watch::Receiver<bool>,
) -> Option<(TcpStream, std::net::SocketAddr)> {
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stopped.wait_for(|s| *s) => return None,
        };
        match accepted {
            Ok(a) => return Some(a),
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

/// Everything one connection does; the client leaves the registry at the end.
async fn connection(
    server: Arc<Server>,
    mut stream: TcpStream,
    mut client: Client,
    stop: watch::Sender<bool>,
    mut stopped: watch::Receiver<bool>,
) {
    let after = serve_client(&server, &mut stream, &mut client, &mut stopped).await;
    client.close(&server);
    let _ = stream.shutdown().await;
    if after == After::Shutdown {
        let _ = stop.send(true);
    }
}

async fn serve_client(
    server: &Server,
    stream: &mut TcpStream,
    client: &mut Client,
    stopped: &mut watch::Receiver<bool>,
) -> After {
    let mut buf = BytesMut::with_capacity(READ_CHUNK_BYTES);
    let mut parser = RequestParser::default();
    let mut out = Out::default();
    let mut queue: VecDeque<Request> = VecDeque::new();
    loop {
        let (limits, timeout_secs) = {
            let c = server.config.read();
            (
                RequestLimits {
                    max_bulk_bytes: c.max_bulk_bytes,
                    max_args: c.max_args,
                    max_query_buffer_bytes: c.max_query_buffer_bytes,
                    unauthenticated: !client.authenticated,
                },
                c.timeout_secs,
            )
        };
        // Parse what is buffered. Limits depend on authentication, so
        // before AUTH one command is parsed and run at a time.
        let mut protocol_error = None;
        let mut need_read = false;
        loop {
            match parser.parse(&mut buf, &limits) {
                Parsed::Command(args) => {
                    queue.push_back(Request::new(args));
                    if !client.authenticated {
                        break;
                    }
                }
                Parsed::Incomplete => {
                    need_read = true;
                    break;
                }
                Parsed::Error(e) => {
                    protocol_error = Some(e);
                    break;
                }
            }
        }
        if buf.len() + parser.pending_bytes() > limits.max_query_buffer_bytes {
            protocol_error =
                Some("ERR client query buffer limit reached; closing the connection".into());
        }
        // A replicated shard runs them through the group.
        if let Some(replica) = server.replica.get() {
            let after =
                serve_replicated(server, replica, stream, client, &mut queue, &mut out).await;
            if after != After::Continue || client.shared.is_killed() {
                return after;
            }
        }
        // Run the queued commands, writing out every 64 KiB of replies.
        while !queue.is_empty() {
            if let Some(key) = crate::pipeline::next_write_key(client, &queue) {
                server.ks.wait_for_stripe(key).await;
            }
            let mut clock = Clock::start();
            let mut run = || {
                out.resp3 = client.resp3;
                while !queue.is_empty() {
                    // Consecutive writes go to the engine as one batch.
                    let n = crate::pipeline::write_run_len(server, client, &queue);
                    let after = if n >= 2 {
                        let run = queue.drain(..n).collect();
                        crate::pipeline::execute_writes(server, client, run, &mut out, &mut clock)
                    } else {
                        let req = queue.pop_front().expect("not empty");
                        cmd::execute(server, client, req, &mut out, &mut clock)
                    };
                    if after != After::Continue || out.len() >= OUT_FLUSH_BYTES {
                        return after;
                    }
                }
                After::Continue
            };
            let after = if server.ks.syncs_every_write() {
                tokio::task::block_in_place(run)
            } else {
                run()
            };
            client.shared.touch_at(clock.now_ms());
            *client.shared.last_command.lock() = client.last_command;
            if after == After::Shutdown {
                return after;
            }
            if after == After::Block {
                if !out.is_empty() {
                    if stream.write_all(&out.buf).await.is_err() {
                        if let Some(p) = client.parked.take() {
                            server.blocking.cancel(&p.waiter);
                        }
                        return After::Close;
                    }
                    out.buf.clear();
                }
                let open = wait_blocked(server, stream, client, &mut buf, &mut out).await;
                *client.shared.parked.lock() = None;
                if stream.write_all(&out.buf).await.is_err() || !open {
                    return After::Close;
                }
                out.buf.clear();
                continue;
            }
            if !out.is_empty() {
                if stream.write_all(&out.buf).await.is_err() {
                    return After::Close;
                }
                out.buf.clear();
                if out.buf.capacity() > 4 * OUT_FLUSH_BYTES {
                    out.buf.shrink_to(OUT_FLUSH_BYTES);
                }
            }
            if after == After::Close || client.shared.is_killed() {
                return After::Close;
            }
        }
        if let Some(e) = protocol_error {
            out.error(&e);
            let _ = stream.write_all(&out.buf).await;
            return After::Close;
        }
        if !need_read {
            // Parsed one command before AUTH: parse the rest with the
            // limits of the state now.
            continue;
        }
        if *stopped.borrow() {
            return After::Close;
        }
        // Read more.
        let want = parser.wanted_bytes(buf.len()).max(READ_CHUNK_BYTES);
        if buf.capacity() - buf.len() < want {
            buf.reserve(want);
        }
        // Shutdown reaches a waiting connection as a kick (`serve`), and
        // the inbox is polled only once messages can arrive, so most
        // waits register the socket and one atomic waker; `biased` polls
        // in this order without drawing a random start each time.
        let may_receive = client.mailbox.may_receive();
        let read = async {
            tokio::select! {
                biased;
                _ = client.shared.kicked() => None,
                Some(m) = client.inbox.recv(), if may_receive => {
                    Some(Ok(deliver(&mut out, client, m)))
                }
                r = stream.read_buf(&mut buf) => Some(r),
            }
        };
        let r = if timeout_secs > 0 {
            match tokio::time::timeout(Duration::from_secs(timeout_secs), read).await {
                Ok(r) => r,
                Err(_) => return After::Close, // idle too long
            }
        } else {
            read.await
        };
        match r {
            Some(Ok(n)) if n > 0 => {}
            _ => return After::Close,
        }
        if !out.is_empty() {
            // Pub/Sub messages.
            if stream.write_all(&out.buf).await.is_err() {
                return After::Close;
            }
            out.buf.clear();
        }
    }
}

/// Runs the queued commands of a client of a replicated shard, in order:
/// writes (and `EXEC`) through the log, awaiting their commit; reads after
/// one read barrier that covers every read queued (all of them arrived
/// before it); the rest here. Replies go out every 64 KiB and at the end.
async fn serve_replicated(
    server: &Server,
    replica: &crate::raft::Replica,
    stream: &mut TcpStream,
    client: &mut Client,
    queue: &mut VecDeque<Request>,
    out: &mut Out,
) -> After {
    let mut reads_cleared = false;
    // Writes proposed and not answered yet, in the order sent: a pipeline
    // of writes is queued for the log at once and answered in order.
    let mut pending: VecDeque<ProposedWrite> = VecDeque::new();
    // One clock for the commands that run back to back, as on one node
    // (two clock reads a command fewer: under pipelined GET, clock reads
    // took 3% of the leader's samples against 1% of one node's); started
    // again after each wait for a barrier or a commit, so that no command
    // is timed with a wait that came before it.
    let mut clock = Clock::start();
    while let Some(req) = queue.pop_front() {
        out.resp3 = client.resp3;
        let route = cmd::route(client, &req.args);
        if !matches!(route, cmd::Route::Write(_)) && !pending.is_empty() {
            // What runs here must see the writes sent before it.
            answer_writes(server, &mut pending, out).await;
            clock = Clock::start();
        }
        let after = match route {
            cmd::Route::Local => cmd::execute(server, client, req, out, &mut clock),
            cmd::Route::StaleRead => match server.ks.hold_for_stale_read() {
                Some(_held) => cmd::execute(server, client, req, out, &mut clock),
                None => {
                    out.error(crate::raft::INSTALLING);
                    After::Continue
                }
            },
            cmd::Route::Read => {
                if !reads_cleared {
                    match replica.read_barrier().await {
                        Ok(()) => reads_cleared = true,
                        Err(e) => out.error(&e),
                    }
                    clock = Clock::start();
                }
                if reads_cleared {
                    cmd::execute(server, client, req, out, &mut clock)
                } else {
                    After::Continue
                }
            }
            cmd::Route::Write(write) => {
                pending.push_back(ProposedWrite {
                    started: std::time::Instant::now(),
                    name: req.index,
                    reply: replica.propose(write),
                });
                After::Continue
            }
        };
        client.shared.touch_at(clock.now_ms());
        if after == After::Shutdown {
            return after;
        }
        if queue.is_empty() {
            answer_writes(server, &mut pending, out).await;
        }
        if (after != After::Continue || out.len() >= OUT_FLUSH_BYTES || queue.is_empty())
            && !out.is_empty()
        {
            if stream.write_all(&out.buf).await.is_err() {
                return After::Close;
            }
            out.buf.clear();
        }
        if after != After::Continue {
            // Blocking pops do not park on a replicated shard (they run
            // through the log, where nothing blocks): only Close is left.
            return After::Close;
        }
    }
    After::Continue
}

/// A write a connection sent to the log and waits for.
struct ProposedWrite {
    started: std::time::Instant,
    name: Option<usize>,
    reply: tokio::sync::oneshot::Receiver<crate::raft::WriteResult>,
}

/// Waits for the proposed writes' replies, in order, into `out`.
async fn answer_writes(server: &Server, pending: &mut VecDeque<ProposedWrite>, out: &mut Out) {
    while let Some(w) = pending.pop_front() {
        let r = w
            .reply
            .await
            .unwrap_or_else(|_| Err("CLUSTERDOWN the node is stopping".to_owned()));
        let failed = match r {
            Ok(reply) => {
                out.buf.extend_from_slice(&reply);
                reply.first() == Some(&b'-')
            }
            Err(e) => {
                out.error(&e);
                true
            }
        };
        server.record(w.name, w.started.elapsed(), failed);
    }
}

/// Writes a Pub/Sub message and any others waiting; returns 1 (the read
/// loop's "progress").
fn deliver(out: &mut Out, client: &mut Client, first: crate::pubsub::Message) -> usize {
    out.resp3 = client.resp3;
    crate::pubsub::write_message(out, &first);
    while let Ok(m) = client.inbox.try_recv() {
        crate::pubsub::write_message(out, &m);
    }
    1
}

/// Waits while the client is blocked: until a writer serves it (its reply
/// goes to `out`), its timeout passes (a null reply), or it disconnects or
/// the server stops (false: close). What the client sends meanwhile is
/// buffered and runs afterwards, as in redis-server.
async fn wait_blocked(
    server: &Server,
    stream: &mut TcpStream,
    client: &mut Client,
    buf: &mut BytesMut,
    out: &mut Out,
) -> bool {
    let Some(mut parked) = client.parked.take() else {
        return true;
    };
    let deadline = (parked.timeout_secs > 0.0)
        .then(|| tokio::time::Instant::now() + Duration::from_secs_f64(parked.timeout_secs));
    let sleep = async {
        match deadline {
            Some(d) => tokio::time::sleep_until(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(sleep);
    let mut open = true;
    loop {
        if buf.capacity() - buf.len() < READ_CHUNK_BYTES {
            buf.reserve(READ_CHUNK_BYTES);
        }
        tokio::select! {
            r = &mut parked.reply => {
                if let Ok(reply) = r {
                    out.buf.extend_from_slice(&reply);
                }
                return true;
            }
            _ = &mut sleep => break,
            // Shutdown kicks too (`serve`).
            _ = client.shared.kicked() => {
                open = false;
                break;
            }
            r = stream.read_buf(buf) => {
                if !matches!(r, Ok(n) if n > 0) {
                    open = false;
                    break;
                }
            }
        }
    }
    if server.blocking.cancel(&parked.waiter) {
        out.null_array();
    } else if let Ok(reply) = parked.reply.await {
        // Served while timing out: the reply stands.
        out.buf.extend_from_slice(&reply);
    }
    open
}

/// Journal sync once a second under `appendfsync everysec`, and the
/// expiry reaper, until shutdown.
async fn background(server: Arc<Server>, mut stopped: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(crate::REAP_INTERVAL);
    let mut last_sync = std::time::Instant::now();
    let reaping = Arc::new(AtomicBool::new(false));
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stopped.wait_for(|s| *s) => return,
        }
        let s = server.clone();
        // A replicated shard's log syncs on its own thread (`raft::logsync`).
        let everysec =
            server.config.read().appendfsync == Fsync::EverySec && server.replica.get().is_none();
        let sync_due = everysec && last_sync.elapsed() >= Duration::from_secs(1);
        if sync_due {
            last_sync = std::time::Instant::now();
        }
        let _ = tokio::task::spawn_blocking(move || {
            if sync_due && s.ks.dirty.swap(false, Ordering::Relaxed) {
                // A failed sync poisons the database; writes then fail
                // with that error, so nothing more is needed here.
                let _ = s.ks.db().sync();
            }
            // Reap in rounds of 1000 while keys are due, yielding to
            // the tick between when there are many.
            // Then the elements of deleted collections.
            let _ = s.ks.reclaim(10_000);
            // `DEBUG SET-ACTIVE-EXPIRE 0` turns the rounds off; its lock
            // held through them, so the command waits for a round under way.
            // A replicated shard reaps through its log instead
            // (`reap_through_log`, after this).
            let active = s.active_expire.lock();
            let rounds = if *active && s.replica.get().is_none() {
                10
            } else {
                0
            };
            for _ in 0..rounds {
                match s.ks.reap(1000) {
                    Ok((keys, more)) => {
                        s.expired_keys
                            .fetch_add(keys.len() as u64, Ordering::Relaxed);
                        let flags = cmd::txn_flags(&s);
                        if flags & crate::notify::EXPIRED != 0 {
                            let events: Vec<_> = keys
                                .into_iter()
                                .map(|(db, key)| crate::notify::Event {
                                    class: crate::notify::EXPIRED,
                                    name: "expired",
                                    db,
                                    key,
                                })
                                .collect();
                            crate::notify::publish(&s, flags, &events);
                        }
                        if !more {
                            break;
                        }
                    }
                    Err(_) => break,
                }
            }
        })
        .await;
        // Its own task, one at a time: a write through the log waits for a
        // quorum, which must not hold up this tick's other work.
        if let Some(replica) = server.replica.get() {
            if !reaping.swap(true, Ordering::AcqRel) {
                let (server, replica, reaping) = (server.clone(), replica.clone(), reaping.clone());
                tokio::spawn(async move {
                    reap_through_log(&server, &replica).await;
                    reaping.store(false, Ordering::Release);
                });
            }
        }
    }
}

/// A replicated shard's reaper, on the leader only: the keys the time
/// index holds due by this node's clock go to the log as one
/// [`cmd::REAP_EXPIRED`] entry per round of up to 1,000, which every node
/// applies at the entry's clock, deleting each key still past its expiry
/// there. Deleting by each node's own clock, outside the log, would let a
/// node applying an entry late (a follower catching up, a slow commit)
/// reap a key that entry still finds alive (`INCR` or `PERSIST` of a key
/// with a TTL), and the nodes would disagree (redis-server's master, the
/// same way, sends its replicas a `DEL` for each key it expires).
async fn reap_through_log(server: &Arc<Server>, replica: &Arc<crate::raft::Replica>) {
    for _ in 0..10 {
        if !replica.is_leader() || !*server.active_expire.lock() {
            return;
        }
        let s = server.clone();
        let now = crate::store::now_ms();
        let Ok(Ok((due, more))) =
            tokio::task::spawn_blocking(move || s.ks.due_expiries(now, 1000)).await
        else {
            return;
        };
        if due.is_empty() {
            return;
        }
        let mut args = vec![Bytes::from_static(cmd::REAP_EXPIRED)];
        for d in &due {
            args.push(Bytes::from(d.at_ms.to_string()));
            args.push(Bytes::copy_from_slice(d.key()));
        }
        let req = crate::raft::Request {
            now_ms: now,
            resp3: false,
            multi: false,
            cmds: vec![args],
        };
        // Lost leadership or a failed commit: the next tick tries again.
        if replica.write(req).await.is_err() || !more {
            return;
        }
    }
}
