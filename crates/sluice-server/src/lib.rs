//! `sluice serve`: a Redis-protocol server over a sluicedb database, for
//! the clients people already have (redis-cli, redis-benchmark, redis-py,
//! go-redis). Strings, hashes, lists, sets, sorted sets and bitmaps with
//! redis-server's replies, transactions, blocking pops, Pub/Sub, expiry,
//! RESP2 and RESP3; see the README's "Server" section for what it does and does not
//! do, and `docs/format/server-keyspace.md` for how it stores keys.
//!
//! ```no_run
//! let mut config = sluice_server::Config::new("/tmp/sluice-serve");
//! config.port = 0; // any free port
//! let server = sluice_server::start(config).unwrap();
//! println!("listening on {}", server.addr());
//! server.shutdown().unwrap();
//! ```

mod bits;
mod block;
pub mod clock;
mod cmd;
mod coll;
mod conn;
#[cfg(test)]
mod corruption_tests;
mod data;
#[cfg(test)]
mod databases_tests;
mod dbslot;
mod dump;
mod fasthash;
#[cfg(test)]
mod flush_tests;
mod glob;
mod hash;
mod keys;
mod lcs;
mod list;
mod metrics;
mod migrate;
mod monitor;
mod notify;
mod pipeline;
#[cfg(test)]
mod pop_bounds_tests;
mod pubsub;
pub mod raft;
pub mod resp;
mod save;
mod server;
mod set;
mod sort;
mod store;
#[cfg(test)]
mod testutil;
mod zset;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sluicedb::{Db, Options, Preset};
use tokio::sync::watch;

pub use store::Fsync;

/// The version reported as `redis_version` (the redis-server release
/// whose replies this server follows).
pub const REDIS_VERSION: &str = "7.0.15";

/// Defaults, named so that docs and code agree.
pub const DEFAULT_PORT: u16 = 6379;
pub const DEFAULT_MAXCLIENTS: usize = 10_000;
/// redis-server's `proto-max-bulk-len`.
pub const DEFAULT_MAX_BULK_BYTES: usize = 512 << 20;
/// redis-server's `client-query-buffer-limit`.
pub const DEFAULT_MAX_QUERY_BUFFER_BYTES: usize = 1 << 30;
/// Most arguments in one command (redis-server takes up to 2^31 - 1 and
/// grows its array as they arrive; a bound here refuses `*2147483647`).
pub const DEFAULT_MAX_ARGS: usize = 1 << 20;

/// redis-server 7.0's encoding thresholds with their defaults.
pub const ENCODING_SETTINGS: &[(&str, &str)] = &[
    ("hash-max-listpack-entries", "128"),
    ("hash-max-listpack-value", "64"),
    ("hash-max-ziplist-entries", "128"),
    ("hash-max-ziplist-value", "64"),
    ("list-max-listpack-size", "-2"),
    ("list-max-ziplist-size", "-2"),
    ("list-compress-depth", "0"),
    ("set-max-intset-entries", "512"),
    ("zset-max-listpack-entries", "128"),
    ("zset-max-listpack-value", "64"),
    ("zset-max-ziplist-entries", "128"),
    ("zset-max-ziplist-value", "64"),
];

/// The server's settings: flags of `sluice serve`, or a config file.
#[derive(Debug, Clone)]
pub struct Config {
    pub dir: PathBuf,
    /// The preset asked for (`--preset`, the config file's `preset`): the
    /// new database's, and an existing one must have been created with it.
    /// None: an existing database opens with its own, a new one with the
    /// default. Once started, the preset of the open database.
    pub preset: Option<Preset>,
    pub bind: Vec<String>,
    /// 0 picks a free port (tests).
    pub port: u16,
    pub requirepass: Option<String>,
    /// redis-server's `appendfsync` (default `everysec`); on a replicated
    /// shard its Raft log's, whose default is `always` unless it was set
    /// ([`Config::appendfsync_set`]).
    pub appendfsync: Fsync,
    /// Whether `appendfsync` was given (config file, `--appendfsync`):
    /// a node of a replicated shard without it runs `always`, since
    /// `everysec` there can lose acknowledged writes on one machine's
    /// power cut (`docs/design.md`, "The log's appendfsync").
    pub appendfsync_set: bool,
    pub maxclients: usize,
    /// Close clients idle this long (0: never).
    pub timeout_secs: u64,
    pub max_bulk_bytes: usize,
    pub max_query_buffer_bytes: usize,
    pub max_args: usize,
    /// Where to serve Prometheus metrics (`host:port`; none: off).
    pub metrics: Option<String>,
    /// Where `SAVE` and `BGSAVE` put checkpoints of the database, keeping
    /// the newest whole one (none: they flush and sync only).
    pub checkpoint_dir: Option<PathBuf>,
    /// redis-server's `maxmemory`, here the engine's memory budget: the
    /// memtables and the block cache share it ([`sluicedb::Db::set_memory_budget`];
    /// `CONFIG SET` resizes the cache of a running server). 0, the default
    /// as in Redis: the preset's (a 64 MiB write buffer and a 64 MiB block
    /// cache). Keys are never evicted (`maxmemory-policy noeviction`) and
    /// writes never refused for it: the data lives on disk, and only what
    /// is kept in memory is bounded.
    pub maxmemory_bytes: usize,
    /// redis-server's encoding thresholds (`hash-max-listpack-entries`
    /// and the like, [`ENCODING_SETTINGS`]): clients and Redis's tests set
    /// them; kept and reported, with no effect (every collection is stored
    /// the same way here).
    pub encoding_settings: std::collections::BTreeMap<String, String>,
    /// Where the config file was read from (`CONFIG REWRITE` writes it).
    pub config_file: Option<PathBuf>,
    /// Shut down on SIGTERM and SIGINT (the command; not tests).
    pub handle_signals: bool,
    /// Serve as a node of a replicated shard (`--raft-id`): the engine
    /// then lives in `dir/db` and the snapshots in `dir/raft`.
    pub raft: Option<raft::RaftConfig>,
}

impl Config {
    pub fn new(dir: impl AsRef<Path>) -> Config {
        Config {
            dir: dir.as_ref().to_path_buf(),
            preset: None,
            bind: vec!["127.0.0.1".to_owned()],
            port: DEFAULT_PORT,
            requirepass: None,
            appendfsync: Fsync::EverySec,
            appendfsync_set: false,
            maxclients: DEFAULT_MAXCLIENTS,
            timeout_secs: 0,
            max_bulk_bytes: DEFAULT_MAX_BULK_BYTES,
            max_query_buffer_bytes: DEFAULT_MAX_QUERY_BUFFER_BYTES,
            max_args: DEFAULT_MAX_ARGS,
            metrics: None,
            checkpoint_dir: None,
            maxmemory_bytes: 0,
            encoding_settings: ENCODING_SETTINGS
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            config_file: None,
            handle_signals: false,
            raft: None,
        }
    }

    /// Applies a redis.conf-style file: `name value` lines, `#` comments.
    /// Known names: dir, preset, bind (several addresses), port,
    /// requirepass, appendfsync, maxclients, timeout, proto-max-bulk-len,
    /// client-query-buffer-limit, metrics, checkpoint-dir, maxmemory.
    pub fn load_file(&mut self, path: &Path) -> Result<(), String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (name, value) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
            let value = value.trim().trim_matches('"');
            self.set(&name.to_ascii_lowercase(), value)
                .map_err(|e| format!("{}:{}: {e}", path.display(), n + 1))?;
        }
        self.config_file = Some(path.to_path_buf());
        Ok(())
    }

    /// Sets one setting by its config-file name.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), String> {
        let int = |v: &str| {
            v.parse::<u64>()
                .map_err(|_| format!("{name}: not a number: {v:?}"))
        };
        let size =
            |v: &str| server::parse_size(v).ok_or_else(|| format!("{name}: not a size: {v:?}"));
        match name {
            "dir" => self.dir = PathBuf::from(value),
            "preset" => {
                self.preset = Some(
                    Preset::from_name(value).ok_or_else(|| format!("unknown preset {value:?}"))?,
                );
            }
            "bind" => self.bind = value.split_whitespace().map(str::to_owned).collect(),
            "port" => {
                self.port =
                    u16::try_from(int(value)?).map_err(|_| format!("port {value} out of range"))?
            }
            "requirepass" => self.requirepass = (!value.is_empty()).then(|| value.to_owned()),
            "appendfsync" => {
                self.appendfsync = cmd::parse_fsync(value).ok_or_else(|| {
                    format!("appendfsync must be always, everysec or no, not {value:?}")
                })?;
                self.appendfsync_set = true;
            }
            "maxclients" => self.maxclients = int(value)? as usize,
            "timeout" => self.timeout_secs = int(value)?,
            "proto-max-bulk-len" => self.max_bulk_bytes = size(value)?,
            "client-query-buffer-limit" => self.max_query_buffer_bytes = size(value)?,
            "metrics" => self.metrics = (!value.is_empty()).then(|| value.to_owned()),
            "checkpoint-dir" => self.checkpoint_dir = (!value.is_empty()).then(|| value.into()),
            "maxmemory" => self.maxmemory_bytes = size(value)?,
            _ => return Err(format!("unknown setting {name:?}")),
        }
        Ok(())
    }
}

/// A running server.
pub struct Running {
    addrs: Vec<SocketAddr>,
    metrics_addr: Option<SocketAddr>,
    stop: watch::Sender<bool>,
    thread: Option<std::thread::JoinHandle<Result<(), String>>>,
    replica: Option<Arc<raft::Replica>>,
}

impl Running {
    /// The first address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addrs[0]
    }

    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// Where `GET /metrics` is served, when it is.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// On a replicated shard: this node's Raft address.
    pub fn raft_addr(&self) -> Option<String> {
        self.replica.as_ref().map(|r| r.me.raft_addr.clone())
    }

    /// On a replicated shard: the group as this node sees it.
    pub fn raft_status(&self) -> Option<raft::Status> {
        self.replica.as_ref().map(|r| r.status())
    }

    /// On a replicated shard: drops this node's links to `nodes` (none:
    /// heals), as a network partition would; the other side must drop
    /// its links to this node too for a full cut. For tests.
    pub fn partition(&self, nodes: &[raft::NodeId]) {
        if let Some(r) = &self.replica {
            r.blocked.set(nodes.iter().copied());
        }
    }

    /// On a replicated shard: while `on`, this node's Raft log syncs
    /// nothing (appends are written and readable, none becomes durable),
    /// as a slow disk would. For tests (the `fault-points` feature).
    #[cfg(feature = "fault-points")]
    pub fn hold_log_syncs(&self, on: bool) {
        if let Some(r) = &self.replica {
            r.log.syncer().hold(on);
        }
    }

    /// On a replicated shard: this node's next Raft log sync fails, as a
    /// failed `fdatasync` would. For tests (the `fault-points` feature).
    #[cfg(feature = "fault-points")]
    pub fn fail_next_log_sync(&self) {
        if let Some(r) = &self.replica {
            r.log.syncer().fail_next();
        }
    }

    /// On a replicated shard: this node's next snapshot install waits,
    /// unpacked and opened, before its swap while `closed` (`false`
    /// releases it). For tests (the `fault-points` feature).
    #[cfg(feature = "fault-points")]
    pub fn hold_next_snapshot_install(&self, closed: bool) {
        if let Some(r) = &self.replica {
            r.install_gate.close(closed);
        }
    }

    /// On a replicated shard: whether a snapshot install waits at the
    /// point [`Running::hold_next_snapshot_install`] holds it. For tests
    /// (the `fault-points` feature).
    #[cfg(feature = "fault-points")]
    pub fn snapshot_install_held(&self) -> bool {
        self.replica
            .as_ref()
            .is_some_and(|r| r.install_gate.waiting())
    }

    /// On a replicated shard: every snapshot stream this node sends from
    /// now on is cut after `bytes` of its archive (its connection
    /// dropped), as a broken link would cut it; `None` stops cutting.
    /// For tests (the `fault-points` feature).
    #[cfg(feature = "fault-points")]
    pub fn cut_snapshot_streams_after(&self, bytes: Option<u64>) {
        if let Some(r) = &self.replica {
            r.stream_faults.cut_after(bytes);
        }
    }

    /// On a replicated shard: how many snapshot streams this node cut
    /// ([`Running::cut_snapshot_streams_after`]). For tests (the
    /// `fault-points` feature).
    #[cfg(feature = "fault-points")]
    pub fn snapshot_streams_cut(&self) -> u64 {
        self.replica.as_ref().map_or(0, |r| r.stream_faults.cuts())
    }

    /// Stops it as `SHUTDOWN` does and waits: no new connections, the
    /// commands being run finish, the journal is synced, the database closed.
    pub fn shutdown(mut self) -> Result<(), String> {
        let _ = self.stop.send(true);
        self.join()
    }

    /// Waits until it stops (`SHUTDOWN`, or a signal with `handle_signals`).
    pub fn wait(mut self) -> Result<(), String> {
        self.join()
    }

    fn join(&mut self) -> Result<(), String> {
        match self.thread.take() {
            Some(t) => t
                .join()
                .map_err(|_| "the server thread panicked".to_owned())?,
            None => Ok(()),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        let _ = self.join();
    }
}

/// Binds, opens the database, and serves on a thread of its own.
pub fn start(mut config: Config) -> Result<Running, String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("sluice-serve")
        .build()
        .map_err(|e| format!("starting the runtime: {e}"))?;
    let mut listeners = Vec::new();
    for host in &config.bind {
        let addr = format!("{host}:{}", config.port);
        let std_listener =
            std::net::TcpListener::bind(&addr).map_err(|e| format!("binding {addr}: {e}"))?;
        std_listener
            .set_nonblocking(true)
            .map_err(|e| e.to_string())?;
        listeners.push(std_listener);
    }
    let metrics_listener = match &config.metrics {
        Some(addr) => {
            let l = std::net::TcpListener::bind(addr)
                .map_err(|e| format!("binding the metrics address {addr}: {e}"))?;
            l.set_nonblocking(true).map_err(|e| e.to_string())?;
            Some(l)
        }
        None => None,
    };
    // Bound first: a port in use fails the start before anything exists
    // on disk (it left an empty database behind). An existing database is
    // opened with the preset it was created with; a preset asked for that
    // differs is refused by the open, naming both.
    let raft_listener = match &config.raft {
        Some(r) => {
            let l = std::net::TcpListener::bind(&r.addr)
                .map_err(|e| format!("binding the raft address {}: {e}", r.addr))?;
            l.set_nonblocking(true).map_err(|e| e.to_string())?;
            // Port 0 (tests): the group knows the node by the port taken.
            if let Ok(a) = l.local_addr() {
                if r.addr.ends_with(":0") {
                    if let Some(rc) = config.raft.as_mut() {
                        rc.addr = a.to_string();
                    }
                }
            }
            Some(l)
        }
        None => None,
    };
    let db_dir = match &config.raft {
        Some(_) => raft::db_dir(&config.dir),
        None => config.dir.clone(),
    };
    if config.raft.is_some() {
        // A snapshot install a crash cut: finished if it had reached its
        // commit point, dropped if not.
        raft::swap::recover(&config.dir).map_err(|e| format!("raft snapshot swap: {e}"))?;
    }
    let preset = match config.preset {
        Some(p) => p,
        None => Db::recorded_preset(&db_dir)
            .ok()
            .flatten()
            .unwrap_or_default(),
    };
    if config.raft.is_some() {
        std::fs::create_dir_all(&config.dir)
            .map_err(|e| format!("creating {}: {e}", config.dir.display()))?;
    }
    let opts = match &config.raft {
        Some(_) => raft::db_options(preset),
        None => Options::preset(preset),
    };
    let db = Db::open(&db_dir, opts).map_err(|e| {
        let asked = if config.preset.is_some() {
            " (--preset, or the config file's preset)"
        } else {
            ""
        };
        format!("opening {}{asked}: {e}", db_dir.display())
    })?;
    db.set_memory_budget(memory_budget(config.maxmemory_bytes));
    config.preset = Some(preset);
    let metrics_addr = metrics_listener.as_ref().and_then(|l| l.local_addr().ok());
    let addrs: Vec<SocketAddr> = listeners
        .iter()
        .filter_map(|l| l.local_addr().ok())
        .collect();
    // On a replicated shard `appendfsync` is the Raft log's (`raft::logsync`):
    // the applied batches are never synced nor journaled ("One write-ahead
    // log" in docs/design.md).
    if config.raft.is_some() && !config.appendfsync_set {
        config.appendfsync = Fsync::Always;
    }
    let ks_fsync = match config.raft {
        Some(_) => Fsync::No,
        None => config.appendfsync,
    };
    let ks = store::Keyspace::new(db, ks_fsync)
        .map_err(|e| format!("opening {}: {e}", config.dir.display()))?;
    let raft_config = config.raft.clone();
    let dir = config.dir.clone();
    let server = Arc::new(server::Server::new(ks, config));
    let replica = match (raft_config, raft_listener) {
        (Some(rc), Some(l)) => {
            let redis_addr = addrs
                .first()
                .map(|a| a.to_string())
                .ok_or("no address to serve on")?;
            let r = runtime.block_on(raft::start(server.clone(), rc, dir, redis_addr, l))?;
            let _ = server.replica.set(r.clone());
            Some(r)
        }
        _ => None,
    };
    server.tcp_port.store(
        u64::from(addrs.first().map_or(0, |a| a.port())),
        std::sync::atomic::Ordering::Relaxed,
    );
    let (stop, stopped) = watch::channel(false);
    let stop_inner = stop.clone();
    let thread = std::thread::Builder::new()
        .name("sluice-serve-main".into())
        .spawn(move || {
            runtime.block_on(conn::serve(
                server,
                listeners,
                metrics_listener,
                stop_inner,
                stopped,
            ))
        })
        .map_err(|e| e.to_string())?;
    Ok(Running {
        addrs,
        metrics_addr,
        stop,
        thread: Some(thread),
        replica,
    })
}

/// The engine's memory budget for redis-server's `maxmemory` (0: none set,
/// the preset's).
pub(crate) fn memory_budget(maxmemory_bytes: usize) -> Option<usize> {
    (maxmemory_bytes > 0).then_some(maxmemory_bytes)
}

/// Checks the keyspace of the database in `dir` (not being served):
/// every collection's metadata agrees with its elements, and every element
/// belongs to a key or to garbage being reclaimed. Returns what disagrees;
/// empty when consistent. With `reclaim`, garbage is reclaimed first, and
/// the answer then also lists any left.
pub fn check_keyspace(dir: &Path, reclaim: bool) -> Result<Vec<String>, String> {
    let preset = Db::recorded_preset(dir).ok().flatten().unwrap_or_default();
    let db = Db::open(dir, Options::preset(preset))
        .map_err(|e| format!("opening {}: {e}", dir.display()))?;
    let ks = store::Keyspace::new(db, Fsync::No).map_err(|e| e.to_string())?;
    if reclaim {
        while ks.reclaim(usize::MAX).map_err(|e| e.to_string())? > 0 {}
    }
    let mut problems = ks.check().map_err(|e| e.to_string())?;
    if reclaim && ks.garbage_left().map_err(|e| e.to_string())? {
        problems.push("garbage left after reclaiming".to_owned());
    }
    Ok(problems)
}

/// How often the expiry reaper looks for keys past their time.
pub const REAP_INTERVAL: Duration = Duration::from_millis(100);
