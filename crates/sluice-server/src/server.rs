//! Server-wide state: settings, the keyspace, the client registry and
//! counters; and the per-connection client state.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};

use crate::cmd::{self, COMMANDS};
use crate::metrics::Metrics;
use crate::store::{now_ms, Fsync, Keyspace};
use crate::Config;

/// What other connections may read of a client (`CLIENT LIST`).
#[derive(Debug)]
pub struct ClientShared {
    pub id: u64,
    pub addr: SocketAddr,
    pub laddr: SocketAddr,
    pub created: Instant,
    pub last_active_ms: AtomicU64,
    pub name: Mutex<Option<Bytes>>,
    pub last_command: Mutex<&'static str>,
    /// Its selected database (`CLIENT LIST`'s `db`).
    pub db: std::sync::atomic::AtomicU8,
    /// `CLIENT KILL` chose it: its connection closes.
    pub killed: std::sync::atomic::AtomicBool,
    /// Its connection is to close (`CLIENT KILL`, shutdown): set once,
    /// never cleared.
    closing: std::sync::atomic::AtomicBool,
    /// Wakes its connection, waiting in [`ClientShared::kicked`], when
    /// `closing` is set. One waker, not a `Notify`'s list under a mutex:
    /// only the connection's own task waits, once per read.
    closing_waker: futures_util::task::AtomicWaker,
    /// Its blocked command while it waits (`CLIENT UNBLOCK` serves it).
    pub parked: Mutex<Option<Arc<crate::block::Waiter>>>,
}

impl ClientShared {
    /// Notes that the client's commands ran now (`CLIENT LIST`'s `idle`).
    pub fn touch(&self) {
        self.touch_at(now_ms());
    }

    /// [`ClientShared::touch`] at `at_ms` (ms since the epoch), a time
    /// the caller has read already.
    pub fn touch_at(&self, at_ms: u64) {
        self.last_active_ms.store(at_ms, Ordering::Relaxed);
    }

    pub fn kill(&self) {
        self.killed.store(true, Ordering::Relaxed);
        self.kick();
    }

    /// Asks its connection to close: a connection waiting to read, or
    /// blocked, wakes from [`ClientShared::kicked`]; one running commands
    /// sees it at its next wait.
    pub fn kick(&self) {
        self.closing.store(true, Ordering::Release);
        self.closing_waker.wake();
    }

    /// Resolves once [`ClientShared::kick`] was called (at once if it was
    /// before). The waker is registered before the flag is read, so a kick
    /// between the two is not missed.
    pub async fn kicked(&self) {
        std::future::poll_fn(|cx| {
            self.closing_waker.register(cx.waker());
            if self.closing.load(Ordering::Acquire) {
                std::task::Poll::Ready(())
            } else {
                std::task::Poll::Pending
            }
        })
        .await
    }

    pub fn is_killed(&self) -> bool {
        self.killed.load(Ordering::Relaxed)
    }
}

/// A key a client watches, as it was when watched.
#[derive(Debug)]
pub struct Watched {
    /// The database the key was watched in.
    pub db: u8,
    pub key: Vec<u8>,
    pub version: u64,
    /// Its expiry if it had one then (an expiry passing aborts `EXEC`).
    pub expire_at_ms: Option<u64>,
}

/// One connection's state.
#[derive(Debug)]
pub struct Client {
    pub id: u64,
    pub resp3: bool,
    /// The selected database (`SELECT`; 0 at connect and after `RESET`).
    pub db: u8,
    pub authenticated: bool,
    pub name: Option<Bytes>,
    /// Commands queued since `MULTI`.
    pub multi: Option<Vec<Vec<Bytes>>>,
    /// A command was refused while queueing: `EXEC` aborts.
    pub multi_error: bool,
    pub watched: Vec<Watched>,
    /// `READONLY`: on a replicated shard's follower, reads are served
    /// from its own state (possibly stale) instead of redirected.
    pub readonly: bool,
    /// Set while the client is blocked (`BLPOP` and the like).
    pub parked: Option<crate::block::Parked>,
    /// Pub/Sub: its channels and patterns, and where messages reach it.
    pub channels: crate::pubsub::Names,
    pub patterns: crate::pubsub::Names,
    pub mailbox: crate::pubsub::Mailbox,
    pub inbox: crate::pubsub::Inbox,
    pub last_command: &'static str,
    pub shared: Arc<ClientShared>,
    /// `CLIENT REPLY OFF`: its commands get no replies.
    pub reply_off: bool,
    /// `CLIENT REPLY SKIP`: the next command gets no reply.
    pub skip_next_reply: bool,
    /// The command running now gets no reply (it followed a `SKIP`).
    pub skip_this_reply: bool,
    /// Bytes of the command running now as a client sent them (`CLIENT
    /// LIST`'s `qbuf` for the client asking).
    pub query_bytes: usize,
}

impl Client {
    pub fn new(server: &Server, addr: SocketAddr, laddr: SocketAddr) -> Client {
        let id = cmd::NEXT_CLIENT_ID.fetch_add(1, Ordering::Relaxed);
        let shared = Arc::new(ClientShared {
            id,
            addr,
            laddr,
            created: Instant::now(),
            last_active_ms: AtomicU64::new(now_ms()),
            name: Mutex::new(None),
            last_command: Mutex::new("NULL"),
            db: std::sync::atomic::AtomicU8::new(0),
            killed: std::sync::atomic::AtomicBool::new(false),
            closing: std::sync::atomic::AtomicBool::new(false),
            closing_waker: futures_util::task::AtomicWaker::new(),
            parked: Mutex::new(None),
        });
        server.clients.lock().insert(id, shared.clone());
        let (outbox, inbox) = tokio::sync::mpsc::unbounded_channel();
        Client {
            channels: Default::default(),
            patterns: Default::default(),
            mailbox: crate::pubsub::Mailbox::new(outbox),
            inbox,
            id,
            resp3: false,
            db: 0,
            authenticated: server.config.read().requirepass.is_none(),
            name: None,
            multi: None,
            multi_error: false,
            watched: Vec::new(),
            readonly: false,
            parked: None,
            last_command: "NULL",
            shared,
            reply_off: false,
            skip_next_reply: false,
            skip_this_reply: false,
            query_bytes: 0,
        }
    }

    /// Marks the open transaction as failed (a command was refused).
    pub fn flag_multi_error(&mut self) {
        if self.multi.is_some() {
            self.multi_error = true;
        }
    }

    pub fn set_name(&mut self, name: &[u8]) -> Result<(), String> {
        if name.iter().any(|&b| !(b'!'..=b'~').contains(&b)) {
            return Err(
                "ERR Client names cannot contain spaces, newlines or special characters."
                    .to_owned(),
            );
        }
        self.name = (!name.is_empty()).then(|| Bytes::copy_from_slice(name));
        *self.shared.name.lock() = self.name.clone();
        Ok(())
    }

    /// Selects database `db` (`SELECT`, `RESET`).
    pub fn select(&mut self, db: u8) {
        self.db = db;
        self.shared.db.store(db, Ordering::Relaxed);
    }

    /// Watches `key` of the selected database.
    pub fn watch(&mut self, server: &Server, key: &[u8], now: u64) -> sluicedb::Result<()> {
        let db = self.db;
        if self.watched.iter().any(|w| w.db == db && w.key == key) {
            return Ok(());
        }
        let version = server.ks.watch(db, key);
        let expire_at_ms = server.ks.read(db, key, now)?.and_then(|e| e.expire_at_ms());
        self.watched.push(Watched {
            db,
            key: key.to_vec(),
            version,
            expire_at_ms,
        });
        Ok(())
    }

    pub fn unwatch_all(&mut self, server: &Server) {
        for w in self.watched.drain(..) {
            server.ks.unwatch(w.db, &w.key);
        }
    }

    /// `RESET`: back to a new connection's state (same id).
    pub fn reset(&mut self, server: &Server) {
        self.multi = None;
        self.multi_error = false;
        self.unwatch_all(server);
        server.pubsub.forget(self);
        server.monitors.remove(self.id);
        self.resp3 = false;
        self.readonly = false;
        self.select(0);
        self.name = None;
        *self.shared.name.lock() = None;
        self.authenticated = server.config.read().requirepass.is_none();
    }

    /// Leaves the registry and drops its watches (on disconnect).
    pub fn close(&mut self, server: &Server) {
        self.unwatch_all(server);
        server.pubsub.forget(self);
        server.monitors.remove(self.id);
        server.clients.lock().remove(&self.id);
    }
}

/// Per-command counters (`INFO commandstats`, metrics).
#[derive(Debug, Default)]
pub struct CommandCounters {
    pub calls: AtomicU64,
    pub micros: AtomicU64,
    /// Calls that replied with an error.
    pub failed: AtomicU64,
}

/// The state every connection shares.
pub struct Server {
    pub ks: Keyspace,
    pub config: RwLock<Config>,
    pub clients: Mutex<BTreeMap<u64, Arc<ClientShared>>>,
    /// When the last save succeeded (shared with `saves`, which sets it).
    pub last_save_unix: Arc<AtomicU64>,
    pub saves: crate::save::Saves,
    pub started: Instant,
    pub connections_received: AtomicU64,
    pub connections_rejected: AtomicU64,
    pub commands_processed: AtomicU64,
    pub per_command: Vec<CommandCounters>,
    pub unknown_commands: AtomicU64,
    pub expired_keys: AtomicU64,
    /// The reaper runs (`DEBUG SET-ACTIVE-EXPIRE`): held through each of
    /// its rounds, so once a change returns no round runs against it.
    pub active_expire: Mutex<bool>,
    pub tcp_port: AtomicU64,
    /// Clients blocked in `BLPOP` and the like.
    pub blocking: crate::block::Blocking,
    pub pubsub: crate::pubsub::Registry,
    pub monitors: crate::monitor::Monitors,
    /// `notify-keyspace-events`'s classes (`crate::notify`).
    pub notify_flags: std::sync::atomic::AtomicU32,
    /// Latency histograms, when the metrics endpoint is on.
    pub metrics: Option<Metrics>,
    /// This node's part of a replicated shard (`--raft-id`); set once at
    /// start, before any client connects.
    pub replica: std::sync::OnceLock<Arc<crate::raft::Replica>>,
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

fn fsync_name(f: Fsync) -> &'static str {
    match f {
        Fsync::Always => "always",
        Fsync::EverySec => "everysec",
        Fsync::No => "no",
    }
}

/// A size as redis.conf writes it (`512mb`, `1gb`, `100`).
pub fn parse_size(s: &str) -> Option<usize> {
    let s = s.trim().to_ascii_lowercase();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: usize = num.parse().ok()?;
    let mul: usize = match unit {
        "" | "b" => 1,
        "k" => 1000,
        "kb" => 1 << 10,
        "m" => 1_000_000,
        "mb" => 1 << 20,
        "g" => 1_000_000_000,
        "gb" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mul)
}

impl Server {
    pub fn new(ks: Keyspace, config: Config) -> Server {
        let metrics = config.metrics.is_some().then(Metrics::new);
        let saves = crate::save::Saves::new(config.checkpoint_dir.clone());
        Server {
            ks,
            config: RwLock::new(config),
            clients: Mutex::new(BTreeMap::new()),
            last_save_unix: saves.last_unix.clone(),
            saves,
            started: Instant::now(),
            connections_received: AtomicU64::new(0),
            connections_rejected: AtomicU64::new(0),
            commands_processed: AtomicU64::new(0),
            per_command: COMMANDS
                .iter()
                .map(|_| CommandCounters::default())
                .collect(),
            unknown_commands: AtomicU64::new(0),
            expired_keys: AtomicU64::new(0),
            active_expire: Mutex::new(true),
            tcp_port: AtomicU64::new(0),
            blocking: crate::block::Blocking::default(),
            pubsub: crate::pubsub::Registry::default(),
            monitors: crate::monitor::Monitors::default(),
            notify_flags: std::sync::atomic::AtomicU32::new(0),
            metrics,
            replica: std::sync::OnceLock::new(),
        }
    }

    /// Counts one command (by its position in `COMMANDS`; `None` for an
    /// unknown one) and its time.
    pub fn record(&self, index: Option<usize>, took: Duration, failed: bool) {
        self.commands_processed.fetch_add(1, Ordering::Relaxed);
        match index {
            Some(i) => {
                let c = &self.per_command[i];
                c.calls.fetch_add(1, Ordering::Relaxed);
                c.failed.fetch_add(u64::from(failed), Ordering::Relaxed);
                c.micros
                    .fetch_add(took.as_micros() as u64, Ordering::Relaxed);
                if let Some(m) = &self.metrics {
                    m.observe(i, took);
                }
            }
            None => {
                self.unknown_commands.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    pub fn reset_stats(&self) {
        for c in &self.per_command {
            c.calls.store(0, Ordering::Relaxed);
            c.micros.store(0, Ordering::Relaxed);
            c.failed.store(0, Ordering::Relaxed);
        }
        self.commands_processed.store(0, Ordering::Relaxed);
        self.connections_received.store(0, Ordering::Relaxed);
        self.connections_rejected.store(0, Ordering::Relaxed);
        self.expired_keys.store(0, Ordering::Relaxed);
    }

    /// `SAVE`: a checkpoint into `checkpoint-dir`, or without one the
    /// memtable flushed to tables and the journal synced (`save.rs`).
    pub fn save(&self) -> Result<(), String> {
        let changes = self.ks.changes.swap(0, Ordering::Relaxed);
        let r = self.saves.save(&self.ks.db());
        if r.is_err() {
            self.ks.changes.fetch_add(changes, Ordering::Relaxed);
        }
        r
    }

    /// `BGSAVE`: the same on a thread of its own.
    pub fn bgsave(&self) -> Result<(), String> {
        self.saves.bgsave(&self.ks.db())?;
        // The save covers what was written before it started.
        self.ks.changes.store(0, Ordering::Relaxed);
        Ok(())
    }

    /// The settings `CONFIG GET` knows, with their values now.
    pub fn config_pairs(&self) -> Vec<(String, String)> {
        let c = self.config.read();
        let mut pairs: Vec<(String, String)> = vec![
            ("bind".into(), c.bind.join(" ")),
            ("port".into(), c.port.to_string()),
            ("dir".into(), c.dir.display().to_string()),
            (
                "requirepass".into(),
                c.requirepass.clone().unwrap_or_default(),
            ),
            ("appendonly".into(), "yes".into()),
            ("appendfsync".into(), fsync_name(c.appendfsync).into()),
            ("maxclients".into(), c.maxclients.to_string()),
            ("timeout".into(), c.timeout_secs.to_string()),
            ("proto-max-bulk-len".into(), c.max_bulk_bytes.to_string()),
            (
                "client-query-buffer-limit".into(),
                c.max_query_buffer_bytes.to_string(),
            ),
            ("databases".into(), crate::store::DATABASES.to_string()),
            ("save".into(), String::new()),
            ("maxmemory".into(), c.maxmemory_bytes.to_string()),
            ("preset".into(), c.preset.unwrap_or_default().name().into()),
            ("metrics".into(), c.metrics.clone().unwrap_or_default()),
            (
                "checkpoint-dir".into(),
                (c.checkpoint_dir.as_ref()).map_or(String::new(), |d| d.display().to_string()),
            ),
        ];
        pairs.extend(c.encoding_settings.clone());
        pairs.push((
            "notify-keyspace-events".into(),
            crate::notify::format(self.notify_flags.load(Ordering::Relaxed)),
        ));
        pairs
    }

    /// `CONFIG SET`: all pairs checked first, then applied together.
    pub fn config_set(&self, pairs: &[(String, String)]) -> Result<(), String> {
        let mut next = self.config.read().clone();
        let mut notify = None;
        for (i, (k, v)) in pairs.iter().enumerate() {
            let bad = |why: &str| {
                format!("ERR CONFIG SET failed (possibly related to argument '{k}') - {why}")
            };
            if pairs[..i].iter().any(|(seen, _)| seen == k) {
                return Err(bad("duplicate parameter"));
            }
            match k.as_str() {
                // Fixed at start, as in redis-server.
                "daemonize" | "databases" | "bind" | "port" | "dir" | "preset" | "metrics"
                | "checkpoint-dir" => return Err(bad("can't set immutable config")),
                "requirepass" => next.requirepass = (!v.is_empty()).then(|| v.clone()),
                "appendfsync" => {
                    next.appendfsync = cmd::parse_fsync(v).ok_or_else(|| {
                        bad("argument(s) must be one of the following: always, everysec, no")
                    })?;
                }
                "maxclients" => {
                    next.maxclients = v
                        .parse()
                        .map_err(|_| bad("argument couldn't be parsed into an integer"))?
                }
                "timeout" => {
                    next.timeout_secs = v
                        .parse()
                        .map_err(|_| bad("argument couldn't be parsed into an integer"))?
                }
                "proto-max-bulk-len" => {
                    next.max_bulk_bytes = parse_size(v)
                        .filter(|&n| n >= 1024 * 1024)
                        .ok_or_else(|| bad("argument must be a memory value of at least 1mb"))?;
                }
                "client-query-buffer-limit" => {
                    next.max_query_buffer_bytes = parse_size(v)
                        .filter(|&n| n >= 1024 * 1024)
                        .ok_or_else(|| bad("argument must be a memory value of at least 1mb"))?;
                }
                "maxmemory" => {
                    next.maxmemory_bytes =
                        parse_size(v).ok_or_else(|| bad("argument must be a memory value"))?;
                }
                "notify-keyspace-events" => {
                    notify = Some(crate::notify::parse(v).ok_or_else(|| {
                        bad("Invalid event class character. Use 'Ag$lshzxeKEtmd'.")
                    })?);
                }
                k if next.encoding_settings.contains_key(k) => {
                    v.parse::<i64>()
                        .map_err(|_| bad("argument couldn't be parsed into an integer"))?;
                    next.encoding_settings.insert(k.to_owned(), v.clone());
                }
                // Read by redis-benchmark and some clients; nothing to change.
                "save" | "appendonly" if v.is_empty() || v == "yes" => {}
                _ => {
                    return Err(format!(
                        "ERR Unknown option or number of arguments for CONFIG SET - '{k}'"
                    ))
                }
            }
        }
        match self.replica.get() {
            // The log is the write-ahead log; the keyspace never syncs.
            Some(r) => r.set_fsync(next.appendfsync),
            None => self.ks.set_fsync(next.appendfsync),
        }
        if next.maxmemory_bytes != self.config.read().maxmemory_bytes {
            self.ks
                .db()
                .set_memory_budget(crate::memory_budget(next.maxmemory_bytes));
        }
        *self.config.write() = next;
        if let Some(flags) = notify {
            self.notify_flags.store(flags, Ordering::Relaxed);
        }
        Ok(())
    }

    /// `CONFIG REWRITE`: the settings back into the config file.
    pub fn config_rewrite(&self) -> Result<(), String> {
        let path: Option<PathBuf> = self.config.read().config_file.clone();
        let Some(path) = path else {
            return Err("ERR The server is running without a config file".to_owned());
        };
        let mut text = String::from("# Written by CONFIG REWRITE.\n");
        for (k, v) in self.config_pairs() {
            if k == "databases" || k == "save" || k == "appendonly" || next_is_encoding_setting(&k)
            {
                continue;
            }
            if (k == "requirepass" || k == "metrics" || k == "checkpoint-dir") && v.is_empty() {
                continue;
            }
            let _ = writeln!(text, "{k} {v}");
        }
        std::fs::write(&path, text).map_err(|e| format!("ERR Rewriting config file: {e}"))
    }

    /// One client's `CLIENT LIST` line.
    pub fn client_line(&self, c: &Client) -> String {
        self.shared_line(&c.shared, Some(c))
    }

    fn shared_line(&self, s: &ClientShared, me: Option<&Client>) -> String {
        let now = now_ms();
        let idle = now.saturating_sub(s.last_active_ms.load(Ordering::Relaxed)) / 1000;
        let name = s.name.lock().clone().unwrap_or_default();
        let (flags, multi, cmd, resp, qbuf) = match me {
            Some(c) => (
                if c.multi.is_some() { "x" } else { "N" },
                c.multi.as_ref().map_or(-1, |q| q.len() as i64),
                c.last_command,
                if c.resp3 { 3 } else { 2 },
                c.query_bytes,
            ),
            None => ("N", -1, *s.last_command.lock(), 2, 0),
        };
        format!(
            "id={} addr={} laddr={} fd=-1 name={} age={} idle={} flags={} db={} sub=0 psub=0 ssub=0 multi={} qbuf={} qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd={} user=default redir=-1 resp={}",
            s.id,
            s.addr,
            s.laddr,
            String::from_utf8_lossy(&name),
            s.created.elapsed().as_secs(),
            idle,
            flags,
            s.db.load(Ordering::Relaxed),
            multi,
            qbuf,
            cmd,
            resp
        )
    }

    pub fn client_list(&self, me: &Client) -> String {
        let clients: Vec<Arc<ClientShared>> = self.clients.lock().values().cloned().collect();
        let mut out = String::new();
        for s in clients {
            let line = if s.id == me.id {
                self.client_line(me)
            } else {
                self.shared_line(&s, None)
            };
            out.push_str(&line);
            out.push('\n');
        }
        out
    }

    /// `INFO [section ...]`: redis-server's sections with its field names,
    /// and a `sluicedb` section from the engine's `Stats`.
    pub fn info(&self, sections: &[Bytes]) -> String {
        let wanted: Vec<String> = sections
            .iter()
            .map(|s| String::from_utf8_lossy(s).to_ascii_lowercase())
            .collect();
        let all = wanted.iter().any(|w| w == "all" || w == "everything");
        let default = wanted.is_empty() || wanted.iter().any(|w| w == "default");
        let want = |name: &str| {
            all || wanted.iter().any(|w| w == name) || (default && name != "commandstats")
        };
        let mut out = String::new();
        let c = self.config.read().clone();
        let up = self.started.elapsed().as_secs();
        if want("server") {
            let _ = write!(
                out,
                "# Server\r\nredis_version:{}\r\nsluicedb_version:{}\r\nredis_mode:standalone\r\nos:{} {}\r\narch_bits:64\r\nprocess_id:{}\r\ntcp_port:{}\r\nuptime_in_seconds:{}\r\nuptime_in_days:{}\r\npreset:{}\r\nconfig_file:{}\r\n\r\n",
                crate::REDIS_VERSION,
                env!("CARGO_PKG_VERSION"),
                std::env::consts::OS,
                std::env::consts::ARCH,
                std::process::id(),
                self.tcp_port.load(Ordering::Relaxed),
                up,
                up / 86400,
                c.preset.unwrap_or_default().name(),
                c.config_file.as_ref().map(|p| p.display().to_string()).unwrap_or_default(),
            );
        }
        if want("clients") {
            let _ = write!(
                out,
                "# Clients\r\nconnected_clients:{}\r\nmaxclients:{}\r\nblocked_clients:{}\r\n\r\n",
                self.clients.lock().len(),
                c.maxclients,
                self.blocking.blocked.load(Ordering::Relaxed)
            );
        }
        if want("memory") {
            let rss = resident_bytes();
            let _ = write!(
                out,
                "# Memory\r\nused_memory:{rss}\r\nused_memory_rss:{rss}\r\nmaxmemory:{}\r\nmaxmemory_policy:noeviction\r\n\r\n",
                c.maxmemory_bytes
            );
        }
        let stats = self.ks.db().stats();
        if want("persistence") {
            let _ = write!(
                out,
                "# Persistence\r\nloading:0\r\nrdb_changes_since_last_save:{}\r\nrdb_bgsave_in_progress:{}\r\nrdb_last_save_time:{}\r\nrdb_last_bgsave_status:{}\r\naof_enabled:1\r\naof_rewrite_in_progress:0\r\nappendfsync:{}\r\njournal_syncs:{}\r\n\r\n",
                self.ks.changes.load(Ordering::Relaxed),
                u8::from(self.saves.in_progress()),
                self.last_save_unix.load(Ordering::Relaxed),
                if self.saves.last_failed.load(Ordering::Relaxed) { "err" } else { "ok" },
                fsync_name(c.appendfsync),
                stats.writes.journal_syncs,
            );
        }
        if want("stats") {
            let _ = write!(
                out,
                "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\nrejected_connections:{}\r\nexpired_keys:{}\r\nunknown_commands:{}\r\n\r\n",
                self.connections_received.load(Ordering::Relaxed),
                self.commands_processed.load(Ordering::Relaxed),
                self.connections_rejected.load(Ordering::Relaxed),
                self.expired_keys.load(Ordering::Relaxed),
                self.unknown_commands.load(Ordering::Relaxed),
            );
        }
        if want("replication") {
            if let Some(r) = self.replica.get() {
                out.push_str(&crate::raft::info_replication(r));
            } else {
                out.push_str("# Replication\r\nrole:master\r\nconnected_slaves:0\r\nmaster_failover_state:no-failover\r\nmaster_replid:0000000000000000000000000000000000000000\r\nmaster_repl_offset:0\r\nsecond_repl_offset:-1\r\nrepl_backlog_active:0\r\n\r\n");
            }
        }
        if want("cpu") {
            let (user, sys) = cpu_seconds();
            let _ = write!(
                out,
                "# CPU\r\nused_cpu_sys:{sys:.6}\r\nused_cpu_user:{user:.6}\r\nused_cpu_sys_children:0.000000\r\nused_cpu_user_children:0.000000\r\n\r\n"
            );
        }
        if want("commandstats") {
            out.push_str("# Commandstats\r\n");
            for (s, n) in COMMANDS.iter().zip(&self.per_command) {
                let calls = n.calls.load(Ordering::Relaxed);
                if calls > 0 {
                    let us = n.micros.load(Ordering::Relaxed);
                    let _ = write!(
                        out,
                        "cmdstat_{}:calls={},usec={},usec_per_call={:.2},rejected_calls=0,failed_calls={}\r\n",
                        s.name,
                        calls,
                        us,
                        us as f64 / calls as f64,
                        n.failed.load(Ordering::Relaxed)
                    );
                }
            }
            out.push_str("\r\n");
        }
        if want("keyspace") {
            // A full count: the engine keeps no key count (see README).
            out.push_str("# Keyspace\r\n");
            for db in 0..crate::store::DATABASES {
                let (mut keys, mut expires) = (0u64, 0u64);
                let _ = self.ks.scan_from(db, 0, now_ms(), |_, _, e| {
                    keys += 1;
                    expires += u64::from(e.expire_at_ms().is_some());
                    true
                });
                if keys > 0 {
                    let _ = write!(out, "db{db}:keys={keys},expires={expires},avg_ttl=0\r\n");
                }
            }
            out.push_str("\r\n");
        }
        if want("sluicedb") {
            let _ = write!(
                out,
                "# Sluicedb\r\ncreated_with:{}\r\nuser_bytes_written:{}\r\nuser_ops_written:{}\r\nmemtable_bytes:{}\r\nflushes:{}\r\ncompactions:{}\r\nwrite_stalls:{}\r\nwrite_stall_micros:{}\r\nlive_table_bytes:{}\r\nblock_cache_bytes:{}\r\nblock_cache_capacity_bytes:{}\r\nblock_cache_size_bytes:{}\r\nvalue_store_bytes:{}\r\nvalue_live_bytes:{}\r\nvalue_garbage_bytes:{}\r\ngc_runs:{}\r\nlive_data_bytes:{}\r\nspace_amplification:{:.3}\r\npoisoned:{}\r\n\r\n",
                stats.created_with.map_or("unknown", |p| p.name()),
                stats.writes.user_bytes_written,
                stats.writes.user_ops_written,
                stats.flush.memtable_bytes,
                stats.flush.flushes,
                stats.compaction.compactions,
                stats.writes.write_stalls,
                stats.writes.write_stall_micros,
                stats.index.live_table_bytes,
                stats.index.block_cache_bytes,
                stats.index.block_cache_capacity_bytes,
                stats.index.block_cache_size_bytes,
                stats.values.bytes,
                stats.values.live_bytes,
                stats.values.garbage_bytes,
                stats.gc.runs,
                stats.space.live_data_bytes,
                stats.space.space_amplification,
                yes_no(stats.poisoned.is_some()),
            );
        }
        // redis-server ends without the last blank line.
        while out.ends_with("\r\n\r\n") {
            out.truncate(out.len() - 2);
        }
        out
    }
}

fn next_is_encoding_setting(k: &str) -> bool {
    crate::ENCODING_SETTINGS.iter().any(|(n, _)| *n == k)
}

/// The process's CPU time (user, system) in seconds, from /proc (zeros
/// where there is none; the kernel counts in 1/100 s ticks on Linux).
pub fn cpu_seconds() -> (f64, f64) {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return (0.0, 0.0);
    };
    // Fields after the command name, which is in parentheses.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0) / 100.0;
    // utime and stime are fields 14 and 15 of the line, 11 and 12 here.
    (ticks(11), ticks(12))
}

/// The process's resident set size, from /proc (0 where there is none).
pub fn resident_bytes() -> u64 {
    sluicedb::sysmem::process_resident_bytes().map_or(0, |(now, _)| now)
}
