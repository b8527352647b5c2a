//! The Prometheus endpoint (`--metrics ADDR`): `GET /metrics` answers in
//! the text exposition format with
//!
//! - `sluice_command_duration_seconds{cmd}`: a latency histogram per
//!   command (its `_count` is the command's calls), recorded as commands
//!   run, only when the endpoint is configured;
//! - the server's counters (connections, commands, expired keys) and
//!   gauges (clients, resident memory), read from the `INFO` counters at
//!   scrape time (`CONFIG RESETSTAT` resets the counters; Prometheus treats
//!   that as a counter reset);
//! - the engine's [`sluicedb::Stats`]: I/O per class, flushes, compactions,
//!   stalls by reason, levels, the value store, GC, space amplification.
//!
//! The `prometheus` crate keeps the histograms and writes the text; the
//! HTTP side is a few lines here (one request per connection, then close),
//! since a scrape is the only request it serves.

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use prometheus::proto::{Counter, Gauge, LabelPair, Metric, MetricFamily, MetricType};
use prometheus::{Histogram, HistogramOpts, HistogramVec, Registry, TextEncoder};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::cmd::COMMANDS;
use crate::server::{resident_bytes, Server};

/// Latency buckets: 10 µs doubling to about 10 s.
const BUCKET_START_SECS: f64 = 10e-6;
const BUCKETS: usize = 21;
/// Most bytes of a request head read before answering 431.
const MAX_REQUEST_HEAD_BYTES: usize = 8 * 1024;
/// A scrape that has not sent its request by then is dropped.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Per-command latency histograms.
pub struct Metrics {
    registry: Registry,
    durations: HistogramVec,
    /// By position in `COMMANDS`, made on a command's first call so the
    /// output lists the commands used, not all of them.
    per_command: Vec<OnceLock<Histogram>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let registry = Registry::new();
        let buckets = prometheus::exponential_buckets(BUCKET_START_SECS, 2.0, BUCKETS)
            .expect("constant bucket parameters are valid");
        let durations = HistogramVec::new(
            HistogramOpts::new(
                "sluice_command_duration_seconds",
                "Time to run a command, from parsed to reply written to the buffer",
            )
            .buckets(buckets),
            &["cmd"],
        )
        .expect("constant metric options are valid");
        registry
            .register(Box::new(durations.clone()))
            .expect("one registration of a new metric");
        Metrics {
            registry,
            durations,
            per_command: COMMANDS.iter().map(|_| OnceLock::new()).collect(),
        }
    }

    /// Records one call of `COMMANDS[index]`.
    pub fn observe(&self, index: usize, took: Duration) {
        self.per_command[index]
            .get_or_init(|| self.durations.with_label_values(&[COMMANDS[index].name]))
            .observe(took.as_secs_f64());
    }

    /// The text exposition of everything.
    pub fn render(&self, server: &Server) -> String {
        let mut families = self.registry.gather();
        families.extend(server_families(server));
        let mut text = String::new();
        // Writing to a String fails only on a malformed family, which the
        // builders below do not make.
        let _ = TextEncoder::new().encode_utf8(&families, &mut text);
        text
    }
}

fn label(name: &str, value: &str) -> LabelPair {
    let mut l = LabelPair::default();
    l.set_name(name.to_owned());
    l.set_value(value.to_owned());
    l
}

/// Builds metric families from values read now.
#[derive(Default)]
struct Families(Vec<MetricFamily>);

impl Families {
    fn add(
        &mut self,
        name: &str,
        help: &str,
        kind: MetricType,
        samples: Vec<(Vec<LabelPair>, f64)>,
    ) {
        let mut f = MetricFamily::default();
        f.set_name(name.to_owned());
        f.set_help(help.to_owned());
        f.set_field_type(kind);
        f.set_metric(
            samples
                .into_iter()
                .map(|(labels, v)| {
                    let mut m = Metric::default();
                    m.set_label(labels);
                    if kind == MetricType::COUNTER {
                        let mut c = Counter::default();
                        c.set_value(v);
                        m.set_counter(c);
                    } else {
                        let mut g = Gauge::default();
                        g.set_value(v);
                        m.set_gauge(g);
                    }
                    m
                })
                .collect(),
        );
        self.0.push(f);
    }

    fn counter(&mut self, name: &str, help: &str, v: u64) {
        self.add(name, help, MetricType::COUNTER, vec![(vec![], v as f64)]);
    }

    fn gauge(&mut self, name: &str, help: &str, v: f64) {
        self.add(name, help, MetricType::GAUGE, vec![(vec![], v)]);
    }
}

fn server_families(server: &Server) -> Vec<MetricFamily> {
    let mut f = Families::default();
    f.gauge(
        "sluice_connected_clients",
        "Client connections open",
        server.clients.lock().len() as f64,
    );
    let counters = [
        (
            "sluice_connections_received_total",
            "Connections accepted",
            &server.connections_received,
        ),
        (
            "sluice_connections_rejected_total",
            "Connections refused at maxclients",
            &server.connections_rejected,
        ),
        (
            "sluice_commands_processed_total",
            "Commands run",
            &server.commands_processed,
        ),
        (
            "sluice_unknown_commands_total",
            "Commands refused as unknown",
            &server.unknown_commands,
        ),
        (
            "sluice_expired_keys_total",
            "Keys the expiry reaper deleted",
            &server.expired_keys,
        ),
    ];
    for (name, help, value) in counters {
        f.counter(name, help, value.load(Ordering::Relaxed));
    }
    f.gauge(
        "sluice_resident_memory_bytes",
        "The process's resident set size",
        resident_bytes() as f64,
    );
    f.gauge(
        "sluice_uptime_seconds",
        "Seconds since the server started",
        server.started.elapsed().as_secs_f64(),
    );
    if let Some(r) = server.replica.get() {
        raft_families(&mut f, &r.status());
    }
    engine_families(&mut f, &server.ks.db().stats());
    f.0
}

/// A replicated shard's node: its term, role, indexes and, on the
/// leader, each member's lag in entries.
fn raft_families(f: &mut Families, st: &crate::raft::Status) {
    f.gauge(
        "sluice_raft_term",
        "The node's current term",
        st.term as f64,
    );
    f.gauge(
        "sluice_raft_is_leader",
        "1 on the group's leader, else 0",
        f64::from(u8::from(st.role() == "leader")),
    );
    f.gauge(
        "sluice_raft_last_log_index",
        "Index of the last entry in the node's log",
        st.last_log_index as f64,
    );
    f.gauge(
        "sluice_raft_applied_index",
        "Index of the last entry the node applied",
        st.applied_index as f64,
    );
    f.gauge(
        "sluice_raft_members",
        "Members of the group, voters and learners",
        st.members.len() as f64,
    );
    let lag = st
        .matched
        .iter()
        .map(|(id, m)| {
            (
                vec![label("node", &id.to_string())],
                st.last_log_index.saturating_sub(*m) as f64,
            )
        })
        .collect();
    f.add(
        "sluice_raft_follower_lag_entries",
        "On the leader: entries each member lacks of its log",
        MetricType::GAUGE,
        lag,
    );
}

fn engine_families(f: &mut Families, s: &sluicedb::Stats) {
    use sluicedb::fs::IoClass;
    let per_class = |read: bool| -> Vec<(Vec<LabelPair>, f64)> {
        IoClass::ALL
            .iter()
            .map(|&c| {
                let v = if read { s.io.read(c) } else { s.io.written(c) };
                (vec![label("class", c.name())], v as f64)
            })
            .collect()
    };
    f.add(
        "sluice_engine_read_bytes_total",
        "Bytes the engine read, by purpose",
        MetricType::COUNTER,
        per_class(true),
    );
    f.add(
        "sluice_engine_written_bytes_total",
        "Bytes the engine wrote, by purpose",
        MetricType::COUNTER,
        per_class(false),
    );
    f.counter(
        "sluice_engine_user_written_bytes_total",
        "Bytes of keys and values the user wrote",
        s.writes.user_bytes_written,
    );
    f.counter(
        "sluice_engine_user_written_ops_total",
        "Puts and deletes the user wrote",
        s.writes.user_ops_written,
    );
    f.gauge(
        "sluice_engine_write_amplification",
        "Bytes written to files per byte the user wrote, since open",
        s.write_amplification(),
    );
    f.gauge(
        "sluice_engine_space_amplification",
        "Bytes of every file per byte of live data, when last measured (0: not yet)",
        s.space.space_amplification,
    );
    f.gauge(
        "sluice_engine_live_data_bytes",
        "The user's live keys and values the space amplification divides by",
        s.space.live_data_bytes as f64,
    );
    f.gauge(
        "sluice_engine_memtable_bytes",
        "Bytes in the active and immutable memtables",
        s.flush.memtable_bytes as f64,
    );
    f.gauge(
        "sluice_engine_memtable_filter_bytes",
        "Bytes of the memtables' key filters",
        s.flush.memtable_filter_bytes as f64,
    );
    f.gauge(
        "sluice_engine_immutable_memtables",
        "Memtables waiting for flush",
        s.flush.immutable_memtables as f64,
    );
    f.counter("sluice_engine_flushes_total", "Flushes", s.flush.flushes);
    f.counter(
        "sluice_engine_discovery_flushes_total",
        "Memtables switched early under space pressure",
        s.flush.discovery_flushes,
    );
    f.counter(
        "sluice_engine_compactions_total",
        "Compactions, trivial moves included",
        s.compaction.compactions,
    );
    f.counter(
        "sluice_engine_trivial_moves_total",
        "Compactions that moved a table without rewriting it",
        s.compaction.trivial_moves,
    );
    f.counter(
        "sluice_engine_compaction_read_bytes_total",
        "Bytes compactions read",
        s.compaction.compaction_bytes_read,
    );
    f.counter(
        "sluice_engine_compaction_written_bytes_total",
        "Bytes compactions wrote",
        s.compaction.compaction_bytes_written,
    );
    f.counter(
        "sluice_engine_write_slowdowns_total",
        "Writes delayed by the L0 slowdown trigger",
        s.writes.write_slowdowns,
    );
    f.counter(
        "sluice_engine_write_stalls_total",
        "Times writes waited",
        s.writes.write_stalls,
    );
    let r = &s.writes.write_stall_micros_by_reason;
    f.add(
        "sluice_engine_write_stall_seconds_total",
        "Time writes spent delayed or stalled, by reason",
        MetricType::COUNTER,
        [
            ("memtables", r.memtables),
            ("level0", r.level0),
            ("value_store", r.value_store),
            ("space_limit", r.space_limit),
        ]
        .iter()
        .map(|&(why, us)| (vec![label("reason", why)], us as f64 / 1e6))
        .collect(),
    );
    f.counter(
        "sluice_engine_journal_syncs_total",
        "Journal syncs",
        s.writes.journal_syncs,
    );
    f.counter(
        "sluice_engine_write_groups_total",
        "Write groups committed (one journal append each)",
        s.writes.write_groups,
    );
    f.gauge(
        "sluice_engine_block_cache_bytes",
        "Bytes held by the block cache",
        s.index.block_cache_bytes as f64,
    );
    f.gauge(
        "sluice_engine_open_table_bytes",
        "Index blocks and filters of the open tables, outside the block cache",
        s.index.open_table_bytes as f64,
    );
    f.gauge(
        "sluice_engine_live_table_bytes",
        "Bytes of live table files",
        s.index.live_table_bytes as f64,
    );
    let per_level = |bytes: bool| -> Vec<(Vec<LabelPair>, f64)> {
        s.index
            .levels
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let v = if bytes {
                    l.bytes as f64
                } else {
                    l.tables as f64
                };
                (vec![label("level", &i.to_string())], v)
            })
            .collect()
    };
    f.add(
        "sluice_engine_level_tables",
        "Tables per level of the key index",
        MetricType::GAUGE,
        per_level(false),
    );
    f.add(
        "sluice_engine_level_bytes",
        "Bytes per level of the key index",
        MetricType::GAUGE,
        per_level(true),
    );
    let v = &s.values;
    f.gauge(
        "sluice_engine_value_files",
        "Files of the value store",
        v.files as f64,
    );
    f.gauge(
        "sluice_engine_value_bytes",
        "Bytes of the value store's files",
        v.bytes as f64,
    );
    f.gauge(
        "sluice_engine_value_live_bytes",
        "Bytes of value records the index points at",
        v.live_bytes as f64,
    );
    f.gauge(
        "sluice_engine_value_garbage_bytes",
        "Bytes of value records no index entry points at",
        v.garbage_bytes as f64,
    );
    f.counter(
        "sluice_engine_value_appended_bytes_total",
        "Bytes of value records appended (user writes and GC)",
        v.appended_bytes,
    );
    f.counter(
        "sluice_engine_gc_runs_total",
        "Value store GC steps",
        s.gc.runs,
    );
    f.counter(
        "sluice_engine_gc_read_bytes_total",
        "Bytes GC read from the value store",
        s.gc.bytes_read,
    );
    f.counter(
        "sluice_engine_gc_written_bytes_total",
        "Bytes GC wrote to the value store",
        s.gc.bytes_written,
    );
    f.add(
        "sluice_engine_gc_relocations_total",
        "GC relocations, applied or dropped (the key changed meanwhile)",
        MetricType::COUNTER,
        vec![
            (
                vec![label("result", "applied")],
                s.gc.relocations_applied as f64,
            ),
            (
                vec![label("result", "dropped")],
                s.gc.relocations_dropped as f64,
            ),
        ],
    );
    f.gauge(
        "sluice_engine_poisoned",
        "1 when a failed write stopped further writes",
        if s.poisoned.is_some() { 1.0 } else { 0.0 },
    );
}

/// Serves scrapes on `listener` until shutdown.
pub async fn serve(server: Arc<Server>, listener: TcpListener, mut stopped: watch::Receiver<bool>) {
    while let Some((stream, _)) = crate::conn::accept(&listener, &mut stopped).await {
        let server = server.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(REQUEST_TIMEOUT, scrape(&server, stream)).await;
        });
    }
}

/// Answers one HTTP request and closes.
async fn scrape(server: &Server, mut stream: TcpStream) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        if head.len() > MAX_REQUEST_HEAD_BYTES {
            return respond(&mut stream, "431 Request Header Fields Too Large", "", true).await;
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&chunk[..n]);
    }
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let mut parts = line.split(|&b| b == b' ');
    let method = parts.next().unwrap_or_default();
    let target = parts.next().unwrap_or_default();
    let path = target.split(|&b| b == b'?').next().unwrap_or_default();
    if method != b"GET" && method != b"HEAD" {
        return respond(&mut stream, "405 Method Not Allowed", "", true).await;
    }
    if path != b"/metrics" {
        return respond(&mut stream, "404 Not Found", "", true).await;
    }
    let Some(metrics) = server.metrics.as_ref() else {
        return respond(&mut stream, "404 Not Found", "", true).await;
    };
    let body = tokio::task::block_in_place(|| metrics.render(server));
    respond(&mut stream, "200 OK", &body, method == b"GET").await
}

/// Writes a response (`with_body` false: `HEAD`, the head alone).
async fn respond(
    stream: &mut TcpStream,
    status: &str,
    body: &str,
    with_body: bool,
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        prometheus::TEXT_FORMAT,
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    if with_body {
        stream.write_all(body.as_bytes()).await?;
    }
    stream.shutdown().await
}
