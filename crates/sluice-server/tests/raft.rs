//! A replicated shard of three `sluice serve` nodes on loopback, driven
//! through a real Redis client:
//! - the leader process is SIGKILLed mid-load: a new leader is elected,
//!   it holds every acknowledged write (each acknowledged `INCR` exactly
//!   once), and the old leader, restarted, rejoins and converges;
//! - a leader cut off from the others (links dropped in process) cannot
//!   acknowledge a write, while the majority elects a leader that can;
//! - a node wiped of everything joins again under a new id, as a learner
//!   promoted to voter, and catches up by snapshot once the log it missed
//!   was purged; its old id is refused;
//! - a follower cut off until the leader purged its log installs a
//!   snapshot while `READONLY` reads on it run: none sees the keyspace
//!   half replaced; a pipeline of writes is applied in the order sent;
//! - a snapshot stream cut midway installs nothing, and a later whole
//!   one installs;
//! - a follower installs a snapshot while writes go on: entries are
//!   committed while its install is held before the swap and right after
//!   it, and every node ends with every acknowledged write;
//! - under `appendfsync always`, a leader whose own log sync is held
//!   acknowledges nothing until it holds the entry durably (its followers
//!   have it meanwhile), and one whose sync fails acknowledges nothing
//!   more;
//! - `FLUSHDB` and `FLUSHALL`, alone and inside `EXEC`, leave the same
//!   database map on every node;
//! - under `appendfsync everysec` a leader kill loses no acknowledged
//!   write either, and `CONFIG SET appendfsync` switches whether a write
//!   waits for the leader's log sync.
//!
//! Node processes are this test binary re-run with only the ignored
//! `raft_child_node` test. Randomized choices print their seed
//! (`SLUICE_RAFT_SEED` replays one).

mod common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use sluice_server::raft::RaftConfig;
use sluice_server::{start, Config, Running};

const CHILD_ENV: &str = "SLUICE_RAFT_CHILD";
/// A node process's config file in its directory, read at each start.
const CHILD_CONF: &str = "sluice.conf";
/// Short timeouts, so that elections take a fraction of a second.
const HEARTBEAT_MS: u64 = 100;
/// Bound of every wait for the group to reach a state (a failure, not a
/// measurement: the states are reached in well under a second here).
const PATIENCE: Duration = Duration::from_secs(60);

fn raft_config(id: u64, raft_port: u16, join: Option<String>, snapshot_entries: u64) -> RaftConfig {
    let mut r = RaftConfig::new(id, format!("127.0.0.1:{raft_port}"));
    r.join = join;
    r.heartbeat_ms = HEARTBEAT_MS;
    r.election_min_ms = 5 * HEARTBEAT_MS;
    r.election_max_ms = 10 * HEARTBEAT_MS;
    r.snapshot_entries = snapshot_entries;
    r.write_timeout_ms = 3000;
    r
}

fn seed() -> u64 {
    let s = std::env::var("SLUICE_RAFT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("seed {s} (SLUICE_RAFT_SEED={s} replays it)");
    s
}

#[test]
#[ignore = "a node process of the raft tests; run by them"]
fn raft_child_node() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    // dir|id|redis port|raft port|join (or -)[|snapshot entries]
    let f: Vec<&str> = spec.split('|').collect();
    let snapshot_entries = f.get(5).map_or(10_000, |n| n.parse().expect("entries"));
    let mut c = Config::new(f[0]);
    // A test's settings for this node (`appendfsync`: [`spawn_group_with`]).
    let conf = Path::new(f[0]).join(CHILD_CONF);
    if conf.exists() {
        c.load_file(&conf).expect("the node's config file");
    }
    c.port = f[2].parse().expect("redis port");
    let join = (f[4] != "-").then(|| f[4].to_owned());
    c.raft = Some(raft_config(
        f[1].parse().expect("id"),
        f[3].parse().expect("raft port"),
        join,
        snapshot_entries,
    ));
    let running = start(c).expect("node starts");
    let raft = running.raft_addr().expect("a raft node");
    println!(
        "PORTS {} {}",
        running.addr().port(),
        raft.rsplit(':').next().unwrap_or("0")
    );
    loop {
        std::thread::sleep(Duration::from_secs(60));
    }
}

/// This test binary run as the node `spec` describes (`raft_child_node`).
fn child_command(spec: String) -> Command {
    let mut c = Command::new(std::env::current_exe().expect("test binary"));
    c.args(["raft_child_node", "--exact", "--ignored", "--nocapture"])
        .env(CHILD_ENV, spec);
    c
}

/// A node process whose stdout reports its ports ([`Node::from_child`]).
fn spawn_child(spec: String) -> Child {
    child_command(spec)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn a node")
}

/// A node in a child process.
struct Node {
    id: u64,
    dir: PathBuf,
    child: Option<Child>,
    redis: SocketAddr,
    raft_port: u16,
}

impl Node {
    /// Starts node `id` in `dir`; ports 0 pick free ones.
    fn spawn(id: u64, dir: &Path, redis_port: u16, raft_port: u16, join: Option<&str>) -> Node {
        let spec = format!(
            "{}|{id}|{redis_port}|{raft_port}|{}",
            dir.display(),
            join.unwrap_or("-")
        );
        Node::from_child(id, dir, spawn_child(spec))
    }

    /// A node process taking a snapshot every `entries` entries.
    fn spawn_small_snapshots(id: u64, dir: &Path, join: Option<&str>, entries: u64) -> Node {
        let spec = format!(
            "{}|{id}|0|0|{}|{entries}",
            dir.display(),
            join.unwrap_or("-")
        );
        Node::from_child(id, dir, spawn_child(spec))
    }

    /// Runs this node again on its ports with `SLUICE_RAFT_CRASH_INSTALL`
    /// set to `at`, waits until it aborted inside a snapshot install, and
    /// returns its stderr.
    fn run_until_install_crash(&mut self, at: &str, entries: u64) -> String {
        self.kill();
        let spec = self.own_ports_spec(entries);
        let err_path = self.dir.with_extension(format!("{at}.stderr"));
        let err = std::fs::File::create(&err_path).expect("stderr file");
        let mut child = child_command(spec)
            .env("SLUICE_RAFT_CRASH_INSTALL", at)
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .expect("spawn a node");
        let start = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().expect("wait") {
                break s;
            }
            if start.elapsed() > PATIENCE {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "node {} never reached the install crash point {at}",
                    self.id
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(!status.success(), "node {}: {status}", self.id);
        std::fs::read_to_string(&err_path).expect("read stderr")
    }

    fn from_child(id: u64, dir: &Path, mut child: Child) -> Node {
        let out = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(out).lines();
        let (redis, raft) = loop {
            let line = lines
                .next()
                .expect("the node printed its ports (did it fail to start?)")
                .expect("read");
            if let Some(p) = line.strip_prefix("PORTS ") {
                let mut it = p
                    .split_whitespace()
                    .map(|x| x.parse::<u16>().expect("port"));
                break (it.next().expect("redis"), it.next().expect("raft"));
            }
        };
        Node {
            id,
            dir: dir.to_path_buf(),
            child: Some(child),
            redis: format!("127.0.0.1:{redis}").parse().expect("addr"),
            raft_port: raft,
        }
    }

    fn raft_addr(&self) -> String {
        format!("127.0.0.1:{}", self.raft_port)
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill(); // SIGKILL
            let _ = c.wait();
        }
    }

    /// Starts it again on the same ports (the group knows it by them).
    fn restart(&mut self) {
        self.kill();
        let n = Node::spawn(self.id, &self.dir, self.redis.port(), self.raft_port, None);
        self.child = n.into_child();
    }

    /// [`Node::restart`] with a snapshot every `entries` entries.
    fn restart_small_snapshots(&mut self, entries: u64) {
        self.kill();
        let spec = self.own_ports_spec(entries);
        self.child = Node::from_child(self.id, &self.dir, spawn_child(spec)).into_child();
    }

    /// The child spec of this node on its own ports, taking a snapshot
    /// every `entries` entries.
    fn own_ports_spec(&self, entries: u64) -> String {
        format!(
            "{}|{}|{}|{}|-|{entries}",
            self.dir.display(),
            self.id,
            self.redis.port(),
            self.raft_port
        )
    }

    fn into_child(mut self) -> Option<Child> {
        self.child.take()
    }

    fn client(&self) -> redis::Connection {
        connect(self.redis)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `INFO replication` as name → value.
fn info(con: &mut redis::Connection) -> redis::RedisResult<Vec<(String, String)>> {
    let text: String = redis::cmd("INFO").arg("replication").query(con)?;
    Ok(text
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
        .collect())
}

fn field(info: &[(String, String)], name: &str) -> Option<String> {
    info.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
}

/// Waits until `f` holds, or panics naming `what`.
fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < PATIENCE, "gave up waiting: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The node among `nodes` (by index) that is leader of `voters` voters.
fn leader_of(nodes: &[&Node], voters: usize) -> usize {
    let mut found = None;
    wait_until(&format!("a leader of {voters} voters"), || {
        for (i, n) in nodes.iter().enumerate() {
            let Ok(mut con) = redis::Client::open(format!("redis://{}/", n.redis))
                .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
            else {
                continue;
            };
            let Ok(inf) = info(&mut con) else { continue };
            let voting = inf
                .iter()
                .filter(|(k, v)| k.starts_with("raft_member_") && v.contains("voter=1"))
                .count();
            if field(&inf, "raft_state").as_deref() == Some("leader") && voting == voters {
                found = Some(i);
                return true;
            }
        }
        false
    });
    found.expect("a leader")
}

/// The applied index a node reports.
fn applied(n: &Node) -> u64 {
    let Ok(mut con) = redis::Client::open(format!("redis://{}/", n.redis))
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
    else {
        return 0;
    };
    info(&mut con)
        .ok()
        .and_then(|i| field(&i, "raft_applied_index"))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// `counter` as a stale read (READONLY) on `n` sees it; `None` while the
/// node does not answer, or answers LOADING.
fn stale_counter(n: &Node) -> Option<i64> {
    let mut con = redis::Client::open(format!("redis://{}/", n.redis))
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
        .ok()?;
    redis::cmd("READONLY").query::<String>(&mut con).ok()?;
    let counter = redis::cmd("GET")
        .arg("counter")
        .query::<Option<i64>>(&mut con);
    counter.ok().map(|c| c.unwrap_or(0))
}

/// Three node processes under `dir`, nodes 2 and 3 joining node 1,
/// each with `appendfsync` set to `fsync` (in its config file, so that a
/// restart keeps it).
fn spawn_group_with(dir: &Path, fsync: &str) -> [Node; 3] {
    for id in 1..=3 {
        let d = dir.join(format!("n{id}"));
        std::fs::create_dir_all(&d).expect("node dir");
        std::fs::write(d.join(CHILD_CONF), format!("appendfsync {fsync}\n")).expect("config");
    }
    spawn_group(dir)
}

/// Three node processes under `dir`, nodes 2 and 3 joining node 1.
fn spawn_group(dir: &Path) -> [Node; 3] {
    let n1 = Node::spawn(1, &dir.join("n1"), 0, 0, None);
    let n2 = Node::spawn(2, &dir.join("n2"), 0, 0, Some(&n1.raft_addr()));
    let n3 = Node::spawn(3, &dir.join("n3"), 0, 0, Some(&n1.raft_addr()));
    [n1, n2, n3]
}

/// What a client saw of its writes: acknowledged, or sent with no answer.
#[derive(Default)]
struct Seen {
    acked_keys: Vec<String>,
    unknown_keys: Vec<String>,
    acked_incrs: u64,
    unknown_incrs: u64,
}

/// Writes `n` keys and `n` INCRs of `counter` through `con`, stopping at
/// the first error (its outcome unknown).
/// A group with writes acknowledged through its leader
/// ([`group_with_writes`]).
struct Written {
    seed: u64,
    nodes: [Node; 3],
    /// The leader's index in `nodes`.
    li: usize,
    seen: Seen,
    /// A connection to the leader.
    lc: redis::Connection,
}

/// Starts a group in `dir` under `appendfsync fsync` and writes through
/// its leader as many keys as the test's seed draws from `writes`.
fn group_with_writes(dir: &Path, fsync: &str, writes: std::ops::Range<usize>) -> Written {
    let seed = seed();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let nodes = spawn_group_with(dir, fsync);
    let li = leader_of(&nodes.iter().collect::<Vec<_>>(), 3);
    let mut seen = Seen::default();
    let mut lc = nodes[li].client();
    assert!(
        write_some(&mut lc, "w", rng.gen_range(writes), &mut seen),
        "writes (seed {seed})"
    );
    Written {
        seed,
        nodes,
        li,
        seen,
        lc,
    }
}

fn write_some(con: &mut redis::Connection, tag: &str, n: usize, seen: &mut Seen) -> bool {
    for i in 0..n {
        let key = format!("{tag}:{i}");
        match redis::cmd("SET").arg(&key).arg(&key).query::<String>(con) {
            Ok(_) => seen.acked_keys.push(key),
            Err(_) => {
                seen.unknown_keys.push(key);
                return false;
            }
        }
        match redis::cmd("INCR").arg("counter").query::<i64>(con) {
            Ok(_) => seen.acked_incrs += 1,
            Err(_) => {
                seen.unknown_incrs += 1;
                return false;
            }
        }
    }
    true
}

/// Every acknowledged key is on the node, and the counter counts every
/// acknowledged INCR once and no more than the unanswered ones besides.
fn check_node(con: &mut redis::Connection, seen: &Seen, seed: u64) -> i64 {
    for k in &seen.acked_keys {
        let v: Option<String> = redis::cmd("GET").arg(k).query(con).expect("GET");
        assert_eq!(
            v.as_deref(),
            Some(k.as_str()),
            "acknowledged {k} is missing (seed {seed})"
        );
    }
    let counter: i64 = redis::cmd("GET")
        .arg("counter")
        .query::<Option<i64>>(con)
        .expect("GET counter")
        .unwrap_or(0);
    let acked = seen.acked_incrs as i64;
    assert!(
        counter >= acked && counter <= acked + seen.unknown_incrs as i64,
        "counter {counter}: {acked} INCRs acknowledged, {} unanswered (seed {seed})",
        seen.unknown_incrs
    );
    counter
}

#[test]
fn killed_leader_loses_no_acknowledged_write_and_rejoins() {
    killed_leader_check("always");
}

/// The same under `appendfsync everysec`: appends are acknowledged once
/// written, and a killed process's page cache keeps them.
#[test]
fn killed_leader_loses_no_acknowledged_write_and_rejoins_under_everysec() {
    killed_leader_check("everysec");
}

fn killed_leader_check(fsync: &str) {
    let seed = seed();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let t = tempfile::tempdir().expect("temp dir");
    let mut nodes = spawn_group_with(t.path(), fsync);
    let li = leader_of(&nodes.iter().collect::<Vec<_>>(), 3);
    for n in &nodes {
        let i = info(&mut n.client()).expect("INFO");
        assert_eq!(field(&i, "raft_log_fsync").as_deref(), Some(fsync));
    }

    // A follower redirects writes and reads to the leader; after
    // READONLY it answers reads itself.
    let follower = &nodes[(li + 1) % 3];
    let mut fc = follower.client();
    let e = redis::cmd("SET")
        .arg("x")
        .arg("1")
        .query::<String>(&mut fc)
        .unwrap_err();
    assert_eq!(e.code(), Some("MOVED"), "{e}");
    assert!(e.to_string().contains(&nodes[li].redis.to_string()), "{e}");
    let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut fc).expect("ROLE");
    assert_eq!(role[0], redis::Value::BulkString(b"slave".to_vec()));

    let mut seen = Seen::default();
    let mut lc = nodes[li].client();
    let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut lc).expect("ROLE");
    assert_eq!(role[0], redis::Value::BulkString(b"master".to_vec()));
    let before = rng.gen_range(20..60);
    assert!(
        write_some(&mut lc, "before", before, &mut seen),
        "writes before the kill (seed {seed})"
    );
    // MULTI/EXEC is one entry.
    let (a, b): (i64, i64) = redis::pipe()
        .atomic()
        .cmd("INCR")
        .arg("counter")
        .cmd("INCR")
        .arg("counter")
        .query(&mut lc)
        .expect("EXEC");
    assert_eq!(b, a + 1);
    seen.acked_incrs += 2;

    // Kill the leader while a writer runs against it.
    let leader_addr = nodes[li].redis;
    let writer = std::thread::spawn(move || {
        let mut seen = Seen::default();
        if let Ok(mut con) =
            redis::Client::open(format!("redis://{leader_addr}/")).and_then(|c| c.get_connection())
        {
            let _ = con.set_read_timeout(Some(Duration::from_secs(10)));
            write_some(&mut con, "during", 100_000, &mut seen);
        }
        seen
    });
    std::thread::sleep(Duration::from_millis(rng.gen_range(50..300)));
    nodes[li].kill();
    let during = writer.join().expect("writer");
    seen.acked_keys.extend(during.acked_keys);
    seen.unknown_keys.extend(during.unknown_keys);
    seen.acked_incrs += during.acked_incrs;
    seen.unknown_incrs += during.unknown_incrs;

    // A new leader among the two left, with every acknowledged write.
    let left_idx: Vec<usize> = (0..3).filter(|&i| i != li).collect();
    let ni = {
        let left: Vec<&Node> = left_idx.iter().map(|&i| &nodes[i]).collect();
        left_idx[leader_of(&left, 3)]
    };
    let mut nc = nodes[ni].client();
    check_node(&mut nc, &seen, seed);
    let after = rng.gen_range(10..40);
    assert!(
        write_some(&mut nc, "after", after, &mut seen),
        "writes on the new leader (seed {seed})"
    );
    let counter = check_node(&mut nc, &seen, seed);

    // The old leader comes back as a follower and converges.
    nodes[li].restart();
    // The data itself, not the applied index: openraft 0.9 publishes that
    // a loop turn after it answers clients, so the new leader's could be
    // an entry short of the last INCR (the writes end with one).
    wait_until("the old leader catching up", || {
        stale_counter(&nodes[li]) == Some(counter)
    });
    let mut oc = nodes[li].client();
    let _: String = redis::cmd("READONLY").query(&mut oc).expect("READONLY");
    assert_eq!(check_node(&mut oc, &seen, seed), counter, "seed {seed}");
    let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut oc).expect("ROLE");
    assert_eq!(role[0], redis::Value::BulkString(b"slave".to_vec()));
}

/// The applied index a node's database holds durably: opened read-only
/// while the node is down, its recovery as the next start would see it.
fn durable_applied(n: &Node) -> u64 {
    let dir = n.dir.join("db");
    let preset = sluicedb::Db::recorded_preset(&dir)
        .expect("preset")
        .unwrap_or_default();
    let db = sluicedb::Db::open(&dir, sluicedb::Options::preset(preset).read_only(true))
        .expect("open the node's database read-only");
    let a = sluice_server::raft::sm::read_applied(&db).expect("applied record");
    a.last.map_or(0, |l| l.index)
}

/// The committed id is kept where a kill does not lose it (the log's
/// state file): a node of a group killed whole, restarted alone (no
/// quorum, so nothing new is committed), re-applies every entry it knew
/// committed, and its stale reads show every write it acknowledged, each
/// INCR once.
#[test]
fn a_leader_restarted_alone_applies_every_write_it_acknowledged() {
    let t = tempfile::tempdir().expect("temp dir");
    let Written {
        seed,
        mut nodes,
        li,
        seen,
        mut lc,
    } = group_with_writes(t.path(), "always", 20..80);
    let counter = check_node(&mut lc, &seen, seed);
    drop(lc);
    let target = applied(&nodes[li]);
    for n in nodes.iter_mut() {
        n.kill();
    }
    let d = durable_applied(&nodes[li]);
    assert!(
        d < target,
        "the database holds applied index {d} of {target}: nothing to re-apply (seed {seed})"
    );
    nodes[li].restart();
    wait_until("the leader re-applying alone", || {
        stale_counter(&nodes[li]) == Some(counter)
    });
    let mut con = nodes[li].client();
    let _: String = redis::cmd("READONLY").query(&mut con).expect("READONLY");
    assert_eq!(check_node(&mut con, &seen, seed), counter, "seed {seed}");
}

/// A raft index `INFO replication` reports (0 when absent).
fn info_index(n: &Node, name: &str) -> u64 {
    let mut con = n.client();
    info(&mut con)
        .ok()
        .and_then(|i| field(&i, name))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// A follower dies inside a snapshot install, after openraft asked its
/// log to purge up to the snapshot (`docs/design.md`, "Snapshots"): once
/// with the snapshot unpacked and the swap not begun (the old database
/// stays: a purge run then would have left it behind a log without the
/// entries it lacks), once just after the swap's commit point, once after
/// the swap and before the purge ran. Each time it starts again on the
/// database it had or the one it installed, with a log that still holds
/// what that database has not applied, and at the end it holds every acknowledged write and counts
/// each acknowledged INCR once.
#[test]
fn a_node_killed_inside_a_snapshot_install_recovers_and_converges() {
    const ENTRIES: u64 = 20;
    let seed = seed();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let t = tempfile::tempdir().expect("temp dir");
    let dir = t.path();
    let n1 = Node::spawn_small_snapshots(1, &dir.join("n1"), None, ENTRIES);
    let n2 = Node::spawn_small_snapshots(2, &dir.join("n2"), Some(&n1.raft_addr()), ENTRIES);
    let n3 = Node::spawn_small_snapshots(3, &dir.join("n3"), Some(&n1.raft_addr()), ENTRIES);
    let mut nodes = [n1, n2, n3];
    let li = leader_of(&nodes.iter().collect::<Vec<_>>(), 3);
    let fi = (li + rng.gen_range(1..3)) % 3;
    let mut seen = Seen::default();
    let mut lc = nodes[li].client();
    assert!(
        write_some(&mut lc, "a", rng.gen_range(5..20), &mut seen),
        "writes (seed {seed})"
    );
    for at in ["unpacked", "commit", "swapped"] {
        // The follower's log ends at or before the leader's (it is down
        // in the second round: it crashed in the first).
        let behind = info_index(&nodes[li], "raft_last_log_index");
        nodes[fi].kill();
        // The leader snapshots and purges its log past the follower's.
        assert!(
            write_some(&mut lc, at, rng.gen_range(40..80), &mut seen),
            "writes (seed {seed})"
        );
        wait_until("the leader purging past the follower's log", || {
            info_index(&nodes[li], "raft_purged_index") > behind + 1
        });
        let err = nodes[fi].run_until_install_crash(at, ENTRIES);
        assert!(
            err.contains("aborting inside a snapshot install"),
            "node {} died elsewhere (seed {seed}):\n{err}",
            nodes[fi].id
        );
    }
    assert!(
        write_some(&mut lc, "last", rng.gen_range(5..20), &mut seen),
        "writes (seed {seed})"
    );
    let counter = check_node(&mut lc, &seen, seed);
    nodes[fi].restart_small_snapshots(ENTRIES);
    wait_until("the crashed follower catching up", || {
        stale_counter(&nodes[fi]) == Some(counter)
    });
    let mut fc = nodes[fi].client();
    let _: String = redis::cmd("READONLY").query(&mut fc).expect("READONLY");
    assert_eq!(check_node(&mut fc, &seen, seed), counter, "seed {seed}");
}

#[test]
fn a_group_killed_whole_applies_again_what_its_databases_never_flushed() {
    let t = tempfile::tempdir().expect("temp dir");
    let Written {
        seed,
        mut nodes,
        li,
        seen,
        lc: _,
    } = group_with_writes(t.path(), "everysec", 30..120);
    let target = applied(&nodes[li]);
    wait_until("every node applied every write", || {
        nodes.iter().all(|n| applied(n) >= target)
    });
    for n in nodes.iter_mut() {
        n.kill();
    }
    // The applied entries were never journaled nor flushed: the databases
    // hold an older state, and only the Raft logs hold the writes.
    for n in &nodes {
        let d = durable_applied(n);
        assert!(
            d < target,
            "node {}: its database holds applied index {d} of {target} (seed {seed})",
            n.id
        );
    }
    for n in nodes.iter_mut() {
        n.restart();
    }
    // A node may lead again in its old term at once, before it applied
    // anything: wait for the index applied before the kill.
    leader_of(&nodes.iter().collect::<Vec<_>>(), 3);
    for n in &nodes {
        wait_until(&format!("node {} applying its log again", n.id), || {
            applied(n) >= target
        });
        let mut con = n.client();
        let _: String = redis::cmd("READONLY").query(&mut con).expect("READONLY");
        let counter = check_node(&mut con, &seen, seed);
        assert_eq!(
            counter, seen.acked_incrs as i64,
            "node {}: INCR applied twice or lost (seed {seed})",
            n.id
        );
    }
}

/// Three nodes in this process, on free ports, once each knows all three
/// voters and a leader.
/// Expired keys are reaped through the log, never by a node on its own.
/// Each node's reaper went by its own clock while entries apply at their
/// proposer's, so a node applying late could reap a key that a later
/// entry, at its clock, still found alive, and the nodes then disagreed
/// (`INCR` of a key with a TTL counted from 1 on one node and on from the
/// old value on another). With the leader's reaper paused no node may
/// reap; resumed, every node deletes the key when it applies the leader's
/// reap entry.
#[test]
fn expired_keys_are_reaped_through_the_log_on_every_node() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = in_process_group(dir.path(), 10_000);
    let expired_keys = |n: &Running| -> u64 {
        let stats: String = redis::cmd("INFO")
            .arg("stats")
            .query(&mut running_client(n))
            .expect("INFO");
        stats
            .lines()
            .find_map(|l| l.trim().strip_prefix("expired_keys:")?.parse().ok())
            .expect("expired_keys in INFO stats")
    };
    let active_expire = |n: &Running, on: u8| {
        let _: String = redis::cmd("DEBUG")
            .arg("SET-ACTIVE-EXPIRE")
            .arg(on)
            .query(&mut running_client(n))
            .expect("DEBUG SET-ACTIVE-EXPIRE");
    };
    // The pause holds only while its node leads: an election during the
    // wait hands reaping to a node that was not paused, so that attempt
    // shows nothing and runs again on a fresh key.
    let mut attempts = 0;
    let (leader, key, before) = loop {
        attempts += 1;
        assert!(attempts <= 5, "the leader changed in every attempt");
        let leader = in_process_leader(&nodes, None);
        let term = nodes[leader].raft_status().expect("status").term;
        active_expire(&nodes[leader], 0);
        let before: Vec<u64> = nodes.iter().map(expired_keys).collect();
        let key = format!("ttl-key-{attempts}");
        let mut con = running_client(&nodes[leader]);
        let _: String = redis::cmd("SET")
            .arg(&key)
            .arg(5)
            .arg("PX")
            .arg(50)
            .query(&mut con)
            .expect("SET");
        // Past the expiry by several reaper rounds (100 ms apart).
        std::thread::sleep(Duration::from_millis(50) + 6 * sluice_server::REAP_INTERVAL);
        let v: Option<i64> = redis::cmd("GET").arg(&key).query(&mut con).expect("GET");
        assert_eq!(v, None, "an expired key reads as absent");
        let after: Vec<u64> = nodes.iter().map(expired_keys).collect();
        let same_leader = nodes[leader]
            .raft_status()
            .is_some_and(|s| s.term == term && s.role() == "leader");
        if same_leader {
            // Reaped through the log, a key counts on every node; reaped
            // by a node on its own, on that node alone. (A reap entry the
            // leader of an earlier attempt had in flight may still apply.)
            let grew: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
            assert!(
                grew.iter().all(|g| *g == grew[0]),
                "a node reaped a key outside the log: {before:?} -> {after:?}"
            );
            break (leader, key, after);
        }
        active_expire(&nodes[leader], 1);
    };
    active_expire(&nodes[leader], 1);
    wait_until("every node reaped the key from the log", || {
        let grew: Vec<u64> = nodes
            .iter()
            .zip(&before)
            .map(|(n, b)| expired_keys(n) - b)
            .collect();
        grew[0] >= 1 && grew.iter().all(|g| *g == grew[0])
    });
    // A write through the log finds it gone on every node alike.
    let leader = in_process_leader(&nodes, None);
    let n: i64 = redis::cmd("INCR")
        .arg(&key)
        .query(&mut running_client(&nodes[leader]))
        .expect("INCR");
    assert_eq!(n, 1);
    let mut cons: Vec<redis::Connection> = nodes.iter().map(running_client).collect();
    for con in &mut cons {
        let _: String = redis::cmd("READONLY").query(con).expect("READONLY");
    }
    wait_until("every node holds the INCR's 1", || {
        cons.iter_mut()
            .all(|con| redis::cmd("GET").arg(&key).query::<Option<i64>>(con).ok() == Some(Some(1)))
    });
}

/// `FLUSHDB` and `FLUSHALL`, alone and inside `EXEC`, map database 0 to
/// a fresh stored database in their entry's batch, chosen from the
/// database map alone: every node's map, read from its database after a
/// clean stop, is the same bytes, and every node's stale reads show the
/// flushes and the writes around them.
#[test]
fn flushes_choose_the_same_fresh_stored_database_on_every_node() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = in_process_group(dir.path(), 10_000);
    let leader = in_process_leader(&nodes, None);
    let mut con = running_client(&nodes[leader]);
    let rounds = 20;
    for round in 0..rounds {
        set_numbered(&mut con, &format!("r{round}-"), 20);
        let _: i64 = redis::cmd("HSET")
            .arg(format!("h{round}"))
            .arg("f")
            .arg("v")
            .query(&mut con)
            .expect("HSET");
        let flush = if round % 5 == 4 {
            "FLUSHALL"
        } else {
            "FLUSHDB"
        };
        if round % 2 == 1 {
            let _: String = redis::cmd("MULTI").query(&mut con).expect("MULTI");
            for c in [
                redis::cmd("SET").arg(format!("a{round}")).arg("x").clone(),
                redis::cmd(flush),
                redis::cmd("SET").arg(format!("b{round}")).arg("x").clone(),
            ] {
                let queued: String = c.query(&mut con).expect("queued");
                assert_eq!(queued, "QUEUED");
            }
            let _: redis::Value = redis::cmd("EXEC").query(&mut con).expect("EXEC");
        } else {
            let _: String = redis::cmd(flush).query(&mut con).expect("flush");
        }
        set_numbered(&mut con, &format!("after{round}-"), 3);
    }
    let last = rounds - 1;
    let mut cons: Vec<redis::Connection> = nodes.iter().map(running_client).collect();
    for con in &mut cons {
        let _: String = redis::cmd("READONLY").query(con).expect("READONLY");
    }
    wait_until(
        "every node shows the last flush and the writes after it",
        || {
            cons.iter_mut().all(|con| {
                let n: Option<i64> = redis::cmd("DBSIZE").query(con).ok();
                let b: Option<Option<String>> =
                    redis::cmd("GET").arg(format!("b{last}")).query(con).ok();
                n == Some(4) && b == Some(Some("x".into()))
            })
        },
    );
    for con in &mut cons {
        check_numbered(con, &format!("after{last}-"), 3);
        let gone: Option<String> = redis::cmd("GET")
            .arg(format!("a{last}"))
            .query(con)
            .unwrap();
        assert_eq!(gone, None, "written before the flush in its EXEC");
    }
    drop(cons);
    drop(con);
    let mut maps = Vec::new();
    for (i, n) in nodes.into_iter().enumerate() {
        n.shutdown().expect("stop");
        let db_dir = dir.path().join(format!("n{}", i + 1)).join("db");
        let preset = sluicedb::Db::recorded_preset(&db_dir)
            .expect("preset")
            .unwrap_or_default();
        let db = sluicedb::Db::open(&db_dir, sluicedb::Options::preset(preset).read_only(true))
            .expect("open the node's database read-only");
        maps.push(db.get(b"m").expect("read the map").expect("a map"));
    }
    assert_eq!(maps[0].len(), 17, "{:?}", maps[0]);
    assert!(
        maps.iter().all(|m| *m == maps[0]),
        "the nodes' maps differ: {maps:?}"
    );
}

/// Cuts node `fi` of a three-node group off from the others, both ways
/// (node ids are 1 to 3).
fn cut_off(nodes: &[Running], fi: usize) {
    let fid = nodes[fi].raft_status().expect("status").id;
    let others: Vec<u64> = (1..=3).filter(|&i| i != fid).collect();
    nodes[fi].partition(&others);
    for (i, n) in nodes.iter().enumerate() {
        if i != fi {
            n.partition(&[fid]);
        }
    }
}

/// Heals every cut.
fn heal(nodes: &[Running]) {
    for n in nodes {
        n.partition(&[]);
    }
}

fn in_process_group(root: &Path, snapshot_entries: u64) -> Vec<Running> {
    in_process_group_with(root, |r| r.snapshot_entries = snapshot_entries)
}

/// [`in_process_group`] with `tune` applied to each node's settings (no
/// `appendfsync` given: a shard's default, `always`).
fn in_process_group_with(root: &Path, tune: impl Fn(&mut RaftConfig)) -> Vec<Running> {
    in_process_group_fsync(root, None, tune)
}

/// [`in_process_group_with`] under `appendfsync fsync` if given.
fn in_process_group_fsync(
    root: &Path,
    fsync: Option<&str>,
    tune: impl Fn(&mut RaftConfig),
) -> Vec<Running> {
    let mut nodes: Vec<Running> = Vec::new();
    for id in 1..=3u64 {
        let mut c = Config::new(root.join(format!("n{id}")));
        if let Some(f) = fsync {
            c.set("appendfsync", f).expect("appendfsync");
        }
        c.port = 0;
        c.metrics = Some("127.0.0.1:0".into());
        let join = nodes.first().and_then(|n| n.raft_addr());
        let mut r = raft_config(id, 0, join, 10_000);
        tune(&mut r);
        c.raft = Some(r);
        nodes.push(start(c).expect("node starts"));
    }
    wait_until("three voters", || {
        nodes.iter().all(|n| {
            n.raft_status()
                .is_some_and(|s| s.members.len() == 3 && s.leader.is_some())
        })
    });
    nodes
}

/// The node's Prometheus text.
fn scrape(r: &Running) -> String {
    use std::io::{Read, Write};
    let addr = r.metrics_addr().expect("metrics on");
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .expect("send");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read");
    text
}

/// `SET {prefix}{i} {i}` for every `i` below `n`, each acknowledged.
fn set_numbered(con: &mut redis::Connection, prefix: &str, n: usize) {
    for i in 0..n {
        let _: String = redis::cmd("SET")
            .arg(format!("{prefix}{i}"))
            .arg(i)
            .query(con)
            .expect("SET");
    }
}

/// Every key `set_numbered` wrote holds its number.
fn check_numbered(con: &mut redis::Connection, prefix: &str, n: usize) {
    for i in 0..n {
        let v: Option<usize> = redis::cmd("GET")
            .arg(format!("{prefix}{i}"))
            .query(con)
            .expect("GET");
        assert_eq!(v, Some(i), "{prefix}{i}");
    }
}

fn running_client(r: &Running) -> redis::Connection {
    connect(r.addr())
}

/// Writes keys `late0..late59` through the leader's client `lc`, then
/// waits until the leader's log is purged past `last` (a cut-off
/// follower's last index): that follower can then catch up by snapshot
/// only.
fn write_until_purged_past(nodes: &[Running], li: usize, lc: &mut redis::Connection, last: u64) {
    set_numbered(lc, "late", 60);
    wait_until("the leader purging past the follower", || {
        nodes[li]
            .raft_status()
            .is_some_and(|s| s.purged_index.is_some_and(|p| p > last))
    });
}

/// A group taking a snapshot every 20 entries (keeping 20 after it), so
/// that a follower cut off soon needs one: the nodes, the leader's index,
/// a follower's (the one after it) and a client of the leader.
fn snapshotting_group(root: &Path) -> (Vec<Running>, usize, usize, redis::Connection) {
    let nodes = in_process_group(root, 20);
    let li = in_process_leader(&nodes, None);
    let lc = running_client(&nodes[li]);
    (nodes, li, (li + 1) % 3, lc)
}

/// A client of the node at `addr`, with 10 s to connect and to read.
fn connect(addr: SocketAddr) -> redis::Connection {
    let c = redis::Client::open(format!("redis://{addr}/")).expect("client");
    let con = c
        .get_connection_with_timeout(Duration::from_secs(10))
        .expect("connect");
    con.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    con
}

fn in_process_leader(nodes: &[Running], except: Option<usize>) -> usize {
    let mut found = None;
    wait_until("an in-process leader", || {
        found = nodes.iter().enumerate().position(|(i, n)| {
            Some(i) != except
                && n.raft_status()
                    .is_some_and(|s| s.role() == "leader" && s.members.values().all(|(_, v)| *v))
        });
        found.is_some()
    });
    found.expect("leader")
}

/// The snapshot policy by bytes (`docs/design.md`, "Snapshots"): far
/// fewer entries than `snapshot_entries`, but more bytes than
/// `snapshot_log_bytes`, make snapshots, and each node's log keeps at most
/// `log_keep_bytes` of entries up to its last one. By entries alone, every
/// entry written would still be held.
#[test]
fn the_log_is_bounded_by_bytes_however_few_its_entries() {
    let t = tempfile::tempdir().expect("temp dir");
    let nodes = in_process_group_with(t.path(), |r| {
        r.snapshot_entries = 1_000_000;
        r.snapshot_log_bytes = 16 << 10;
        r.log_keep_bytes = 16 << 10;
    });
    let li = in_process_leader(&nodes, None);
    let mut con = running_client(&nodes[li]);
    let value = vec![b'v'; 1000];
    // One client, one write at a time: an entry each, of about 1 KB.
    for i in 0..300 {
        let _: String = redis::cmd("SET")
            .arg(format!("k{i}"))
            .arg(&value)
            .query(&mut con)
            .expect("SET");
    }
    for (i, n) in nodes.iter().enumerate() {
        // About 16 entries after the last snapshot at most, and 16 kept
        // up to it: 60 leaves room for the membership entries.
        wait_until(&format!("node {} holds a bounded log", i + 1), || {
            n.raft_status().is_some_and(|s| {
                s.snapshot_index.is_some() && s.last_log_index - s.purged_index.unwrap_or(0) <= 60
            })
        });
    }
    let v: Vec<u8> = redis::cmd("GET").arg("k299").query(&mut con).expect("GET");
    assert_eq!(v, value);
}

#[test]
fn a_partitioned_minority_leader_cannot_acknowledge_writes() {
    let seed = seed();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let t = tempfile::tempdir().expect("temp dir");
    let nodes = in_process_group(t.path(), 10_000);
    let li = in_process_leader(&nodes, None);
    let mut lc = running_client(&nodes[li]);
    let n = rng.gen_range(5..20);
    set_numbered(&mut lc, "k", n);
    // Cut the leader off both ways.
    let lid = nodes[li].raft_status().expect("status").id;
    cut_off(&nodes, li);
    let r = redis::cmd("SET")
        .arg("cut")
        .arg("off")
        .query::<String>(&mut lc);
    let e = r.expect_err("a leader without a quorum acknowledged a write (seed {seed})");
    assert!(
        matches!(
            e.code(),
            Some("TRYAGAIN") | Some("MOVED") | Some("CLUSTERDOWN")
        ),
        "{e} (seed {seed})"
    );
    // Its reads are refused too: a read barrier needs the quorum.
    let r = redis::cmd("GET").arg("k0").query::<Option<String>>(&mut lc);
    assert!(
        r.is_err(),
        "a cut-off leader answered a linearizable read (seed {seed})"
    );

    // The majority elects a leader that acknowledges writes.
    let mi = in_process_leader(&nodes, Some(li));
    let mut mc = running_client(&nodes[mi]);
    let _: String = redis::cmd("SET")
        .arg("majority")
        .arg("yes")
        .query(&mut mc)
        .expect("SET");

    // The new leader's metrics say so, and count the cut-off node's lag.
    let text = scrape(&nodes[mi]);
    assert!(text.contains("sluice_raft_is_leader 1"), "{text}");
    assert!(
        text.contains(&format!(
            "sluice_raft_follower_lag_entries{{node=\"{lid}\"}}"
        )),
        "{text}"
    );
    assert!(scrape(&nodes[li]).contains("sluice_raft_term "));

    // Healed: the old leader follows and converges; the write it could
    // not acknowledge is nowhere.
    heal(&nodes);
    wait_until("the old leader following", || {
        nodes[li].raft_status().is_some_and(|s| {
            s.role() == "follower"
                && s.applied_index
                    >= nodes[mi]
                        .raft_status()
                        .map_or(u64::MAX, |m| m.applied_index)
        })
    });
    let mut oc = running_client(&nodes[li]);
    let _: String = redis::cmd("READONLY").query(&mut oc).expect("READONLY");
    for con in [&mut oc, &mut mc] {
        let v: Option<String> = redis::cmd("GET").arg("majority").query(con).expect("GET");
        assert_eq!(v.as_deref(), Some("yes"));
        let v: Option<String> = redis::cmd("GET").arg("cut").query(con).expect("GET");
        assert_eq!(
            v, None,
            "an unacknowledged write of the cut-off leader survived (seed {seed})"
        );
        check_numbered(con, "k", n);
    }
}

/// The leader's log sync runs beside replication (`docs/design.md`,
/// "The leader's sync beside replication"). With the leader's syncs held,
/// a write reaches both followers (each answers once the entry is synced
/// in its log: the leader counts them as holding it) while the leader
/// counts nothing for itself, and no client is answered: the leader
/// applies, and so answers, only entries its own log holds durably.
/// Released, the write is acknowledged. Then the leader's next sync
/// fails: it acknowledges nothing more, and the others elect a leader
/// that holds every acknowledged write.
#[test]
fn a_leader_acknowledges_only_what_its_own_log_holds_durably() {
    let seed = seed();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let t = tempfile::tempdir().expect("temp dir");
    // A shard's node with no appendfsync given runs `always`.
    let nodes = in_process_group(t.path(), 10_000);
    let li = in_process_leader(&nodes, None);
    let lid = nodes[li].raft_status().expect("status").id;
    let mut lc = running_client(&nodes[li]);
    assert_eq!(
        field(&info(&mut lc).expect("INFO"), "raft_log_fsync").as_deref(),
        Some("always")
    );
    let got: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("appendfsync")
        .query(&mut lc)
        .expect("CONFIG GET");
    assert_eq!(got, ["appendfsync", "always"]);
    // Under `always` the log carries durability: the applied batches are
    // not synced through the engine's journal too (one sync per entry).
    let journal_syncs = |c: &mut redis::Connection| -> u64 {
        let text: String = redis::cmd("INFO")
            .arg("persistence")
            .query(c)
            .expect("INFO");
        text.lines()
            .find_map(|l| l.strip_prefix("journal_syncs:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("journal_syncs")
    };
    let before = journal_syncs(&mut lc);
    set_numbered(&mut lc, "j", 20);
    let grew = journal_syncs(&mut lc) - before;
    assert!(
        grew < 5,
        "{grew} engine journal syncs for 20 replicated writes"
    );
    let n = rng.gen_range(3..12);
    set_numbered(&mut lc, "k", n);
    let before = nodes[li].raft_status().expect("status").last_log_index;

    nodes[li].hold_log_syncs(true);
    let addr = nodes[li].addr();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut c = connect(addr);
        let r = redis::cmd("SET")
            .arg("held")
            .arg("v")
            .query::<String>(&mut c);
        let _ = tx.send(r.map_err(|e| e.to_string()));
    });
    // Both followers hold the entry durably (they answered for it).
    wait_until("both followers holding the write", || {
        nodes[li].raft_status().is_some_and(|s| {
            s.matched
                .iter()
                .filter(|(id, _)| **id != lid)
                .all(|(_, m)| *m > before)
                && s.matched.len() == 3
        })
    });
    assert!(
        rx.recv_timeout(Duration::from_millis(500)).is_err(),
        "the leader acknowledged a write its own log had not synced (seed {seed})"
    );
    let s = nodes[li].raft_status().expect("status");
    assert!(
        s.matched.get(&lid).is_some_and(|m| *m <= before) && s.applied_index <= before,
        "the leader counted or applied its unsynced entry: {s:?} (seed {seed})"
    );

    nodes[li].hold_log_syncs(false);
    let r = rx
        .recv_timeout(PATIENCE)
        .expect("the write is answered once the leader synced it");
    assert_eq!(r.as_deref(), Ok("OK"), "seed {seed}");

    // A failed sync: this leader acknowledges nothing more.
    nodes[li].fail_next_log_sync();
    let r = redis::cmd("SET")
        .arg("after-failure")
        .arg("v")
        .query::<String>(&mut lc);
    assert!(
        r.is_err(),
        "a leader whose log sync failed acknowledged a write (seed {seed})"
    );
    let mi = in_process_leader(&nodes, Some(li));
    let mut mc = running_client(&nodes[mi]);
    let _: String = redis::cmd("SET")
        .arg("new-leader")
        .arg("yes")
        .query(&mut mc)
        .expect("SET on the new leader");
    check_numbered(&mut mc, "k", n);
    let v: Option<String> = redis::cmd("GET").arg("held").query(&mut mc).expect("GET");
    assert_eq!(v.as_deref(), Some("v"), "seed {seed}");
}

/// `appendfsync` decides when a node's log acknowledges an append, and
/// `CONFIG SET` switches it on a running node: under `everysec` a leader
/// whose log syncs are held still answers a write (its append acknowledged
/// once written); switched to `always` it answers none until its sync
/// ends; switched back, it answers at once again. `INFO replication`
/// shows the mode.
#[test]
fn config_set_appendfsync_switches_when_a_replicated_write_is_acknowledged() {
    let t = tempfile::tempdir().expect("temp dir");
    let nodes = in_process_group_fsync(t.path(), Some("everysec"), |_| {});
    let li = in_process_leader(&nodes, None);
    let mut lc = running_client(&nodes[li]);
    let mode = |c: &mut redis::Connection| field(&info(c).expect("INFO"), "raft_log_fsync");
    assert_eq!(mode(&mut lc).as_deref(), Some("everysec"));
    let addr = nodes[li].addr();
    let set_held = |key: &'static str| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut c = connect(addr);
            let r = redis::cmd("SET").arg(key).arg("v").query::<String>(&mut c);
            let _ = tx.send(r.map_err(|e| e.to_string()));
        });
        rx
    };

    // Under everysec: answered while the leader's log syncs are held.
    let answered_while_held = |key: &'static str| {
        nodes[li].hold_log_syncs(true);
        let r = set_held(key)
            .recv_timeout(PATIENCE)
            .unwrap_or_else(|_| panic!("{key}: answered under everysec with the syncs held"));
        assert_eq!(r.as_deref(), Ok("OK"), "{key}");
        nodes[li].hold_log_syncs(false);
    };
    let switch_to = |c: &mut redis::Connection, to: &str| {
        let _: String = redis::cmd("CONFIG")
            .arg("SET")
            .arg("appendfsync")
            .arg(to)
            .query(c)
            .expect("CONFIG SET");
        assert_eq!(mode(c).as_deref(), Some(to));
    };

    answered_while_held("everysec-held");
    switch_to(&mut lc, "always");
    nodes[li].hold_log_syncs(true);
    let rx = set_held("always-held");
    assert!(
        rx.recv_timeout(Duration::from_millis(1500)).is_err(),
        "answered under always while the leader's log sync was held"
    );
    nodes[li].hold_log_syncs(false);
    let r = rx.recv_timeout(PATIENCE).expect("answered once synced");
    assert_eq!(r.as_deref(), Ok("OK"));

    switch_to(&mut lc, "everysec");
    answered_while_held("everysec-again");
    for k in ["everysec-held", "always-held", "everysec-again"] {
        let v: Option<String> = redis::cmd("GET").arg(k).query(&mut lc).expect("GET");
        assert_eq!(v.as_deref(), Some("v"), "{k}");
    }
}

#[test]
fn a_wiped_node_rejoins_under_a_new_id_by_snapshot() {
    let t = tempfile::tempdir().expect("temp dir");
    // The log a wiped node missed is soon purged.
    let (mut nodes, _, victim, mut lc) = snapshotting_group(t.path());
    set_numbered(&mut lc, "a", 30);
    // Wipe a follower: stop it and remove its directory.
    let gone = nodes.remove(victim);
    gone.shutdown().expect("stop");
    std::fs::remove_dir_all(t.path().join(format!("n{}", victim + 1))).expect("wipe");
    let li = in_process_leader(&nodes, None);
    let mut lc = running_client(&nodes[li]);
    // Collections too: their elements and versions travel in the snapshot.
    set_numbered(&mut lc, "b", 100);
    for i in 0..100 {
        let _: i64 = redis::cmd("HSET")
            .arg("h")
            .arg(format!("f{i}"))
            .arg(i)
            .query(&mut lc)
            .expect("HSET");
    }
    let _: i64 = redis::cmd("INCRBY")
        .arg("n")
        .arg(7)
        .query(&mut lc)
        .expect("INCRBY");
    wait_until("the leader purging its log", || {
        nodes[li]
            .raft_status()
            .is_some_and(|s| s.purged_index.is_some_and(|p| p > 30))
    });

    // Its old id is refused: ids are never reused.
    let mut c = Config::new(t.path().join("again"));
    c.port = 0;
    c.raft = Some(raft_config(victim as u64 + 1, 0, nodes[li].raft_addr(), 20));
    let e = start(c).err().expect("a used id was admitted");
    assert!(e.contains("never reused"), "{e}");

    // Under a new id: a learner, copied the snapshot, then a voter. Its
    // `maxmemory` holds for the database the snapshot replaces its own with.
    let mut c = Config::new(t.path().join("n4"));
    c.port = 0;
    c.maxmemory_bytes = 96 << 20;
    c.raft = Some(raft_config(4, 0, nodes[li].raft_addr(), 20));
    let n4 = start(c).expect("node 4 joins");
    let st = n4.raft_status().expect("status");
    assert!(
        st.members.get(&4).is_some_and(|(_, voter)| *voter),
        "node 4 votes: {st:?}"
    );
    let target = nodes[li].raft_status().expect("leader").applied_index;
    wait_until("node 4 catching up", || {
        n4.raft_status().is_some_and(|s| s.applied_index >= target)
    });
    let st = n4.raft_status().expect("status");
    assert!(
        st.snapshot_index.is_some(),
        "node 4 installed a snapshot: {st:?}"
    );
    let mut c4 = running_client(&n4);
    let engine: String = redis::cmd("INFO")
        .arg("sluicedb")
        .query(&mut c4)
        .expect("INFO");
    assert!(
        engine.contains(&format!("block_cache_size_bytes:{}\r\n", 32 << 20)),
        "a 96 MiB budget less the 64 MiB write buffer: {engine}"
    );
    let _: String = redis::cmd("READONLY").query(&mut c4).expect("READONLY");
    check_numbered(&mut c4, "a", 30);
    check_numbered(&mut c4, "b", 100);
    let len: i64 = redis::cmd("HLEN").arg("h").query(&mut c4).expect("HLEN");
    assert_eq!(len, 100);
    let v: i64 = redis::cmd("GET").arg("n").query(&mut c4).expect("GET");
    assert_eq!(v, 7);
    // It takes writes through the log like any member: a new collection
    // on it gets a version its snapshot reserved past.
    let _: String = redis::cmd("READWRITE").query(&mut c4).expect("READWRITE");
    let _: i64 = redis::cmd("HSET")
        .arg("h2")
        .arg("f")
        .arg(1)
        .query(&mut lc)
        .expect("HSET");
    // Waits for the write itself, not for node 4's applied index: once in
    // 20 runs (issue 56) the index had passed the leader's while a read did
    // not show the write. Stale reads during a snapshot's copy could read a
    // keyspace half replaced, and the reclaimer could delete a snapshot's
    // live elements; both are shut out now
    // (`stale_reads_never_see_a_snapshot_half_installed`), but neither is
    // proven to be what that run met.
    let _: String = redis::cmd("READONLY").query(&mut c4).expect("READONLY");
    wait_until("node 4 applying the HSET", || {
        redis::cmd("HLEN")
            .arg("h2")
            .query::<i64>(&mut c4)
            .expect("HLEN")
            == 1
    });
    let len: i64 = redis::cmd("HLEN").arg("h").query(&mut c4).expect("HLEN");
    assert_eq!(len, 100);
}

#[test]
fn stale_reads_never_see_a_snapshot_half_installed() {
    let t = tempfile::tempdir().expect("temp dir");
    let (nodes, li, fi, mut lc) = snapshotting_group(t.path());
    // A pipeline of writes goes to the log at once and is applied, and
    // answered, in the order sent.
    let mut p = redis::pipe();
    for i in 0..200 {
        p.cmd("RPUSH").arg("order").arg(i);
    }
    let lens: Vec<i64> = p.query(&mut lc).expect("pipelined RPUSH");
    assert_eq!(lens, (1..=200).collect::<Vec<i64>>());
    // Enough keys that copying them in takes a while; "stable" sorts
    // after them and is never written again.
    let mut p = redis::pipe();
    for b in 0..10 {
        let mut c = redis::cmd("MSET");
        for i in 0..1000 {
            c.arg(format!("bulk{b}:{i}")).arg(i);
        }
        p.add_command(c).ignore();
    }
    p.cmd("SET").arg("stable").arg("yes").ignore();
    let () = p.query(&mut lc).expect("bulk load");
    // Waits for the follower to show the load's last write, not for its
    // applied index to reach the leader's: openraft answers a write from
    // the apply result and publishes its metrics a turn of its loop later,
    // so the leader's applied index read here is at times one entry short
    // (the one with "stable"). A follower cut off then had not learnt that
    // entry committed, and a stale read of it rightly answered nil.
    let mut fc = running_client(&nodes[fi]);
    let _: String = redis::cmd("READONLY").query(&mut fc).expect("READONLY");
    wait_until("the follower applying the load", || {
        match redis::cmd("GET")
            .arg("stable")
            .query::<Option<String>>(&mut fc)
        {
            Ok(v) => v.as_deref() == Some("yes"),
            Err(e) if e.code() == Some("LOADING") => false,
            Err(e) => panic!("stale read: {e}"),
        }
    });
    // Cut the follower off until the log it misses is purged.
    let lid = li as u64 + 1;
    cut_off(&nodes, fi);
    let f_last = nodes[fi].raft_status().expect("follower").last_log_index;
    write_until_purged_past(&nodes, li, &mut lc, f_last);
    assert!(nodes[li].raft_status().is_some_and(|s| s.id == lid));
    // Stale reads on the follower while it installs the leader's snapshot:
    // each sees "stable" (the state before or after), or is told to wait.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (stop, addr) = (stop.clone(), nodes[fi].addr());
        std::thread::spawn(move || {
            let mut c = connect(addr);
            let _: String = redis::cmd("READONLY").query(&mut c).expect("READONLY");
            let (mut reads, mut waits) = (0u64, 0u64);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                match redis::cmd("GET")
                    .arg("stable")
                    .query::<Option<String>>(&mut c)
                {
                    Ok(v) => {
                        assert_eq!(
                            v.as_deref(),
                            Some("yes"),
                            "a stale read saw a half-installed snapshot after {reads} reads"
                        );
                        reads += 1;
                    }
                    Err(e) if e.code() == Some("LOADING") => waits += 1,
                    Err(e) => panic!("stale read: {e}"),
                }
            }
            (reads, waits)
        })
    };
    heal(&nodes);
    wait_until(
        "the follower installing the snapshot and catching up",
        || {
            let l = nodes[li].raft_status().map_or(0, |s| s.applied_index);
            nodes[fi].raft_status().is_some_and(|s| {
                s.snapshot_index.is_some_and(|i| i > f_last) && s.applied_index >= l
            })
        },
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (reads, waits) = reader.join().expect("reader");
    eprintln!("stale reads during the install: {reads} answered, {waits} told to wait");
    check_numbered(&mut fc, "late", 60);
    let order: Vec<i64> = redis::cmd("LRANGE")
        .arg("order")
        .arg(0)
        .arg(-1)
        .query(&mut fc)
        .expect("LRANGE");
    assert_eq!(order, (0..200).collect::<Vec<i64>>());
}

/// Entries in the follower's snapshot staging directory (`raft/install.tmp`):
/// what streams being received, or given up and not yet removed, left.
fn staged(root: &Path, id: u64) -> usize {
    std::fs::read_dir(root.join(format!("n{id}/raft/install.tmp"))).map_or(0, |d| d.count())
}

/// A snapshot stream cut midway (every node's sender drops its connection
/// after part of the archive, as a broken link would) leaves the follower
/// on its old state, with nothing of the stream kept; once streams are no
/// longer cut, the next one installs and the follower converges.
#[test]
fn a_snapshot_stream_cut_midway_installs_nothing_and_a_later_one_installs() {
    let t = tempfile::tempdir().expect("temp dir");
    let (nodes, li, fi, mut lc) = snapshotting_group(t.path());
    let fid = fi as u64 + 1;
    // An archive of some hundreds of KB, so that the cut falls inside it.
    let mut mset = redis::cmd("MSET");
    for i in 0..300 {
        mset.arg(format!("bulk{i}"))
            .arg(vec![b'a' + (i % 26) as u8; 1000]);
    }
    let () = mset.query(&mut lc).expect("MSET");
    set_numbered(&mut lc, "early", 10);
    let mut fc = running_client(&nodes[fi]);
    let _: String = redis::cmd("READONLY").query(&mut fc).expect("READONLY");
    wait_until("the follower applying the early writes", || {
        redis::cmd("GET")
            .arg("early9")
            .query::<Option<usize>>(&mut fc)
            .ok()
            == Some(Some(9))
    });
    cut_off(&nodes, fi);
    // Its log cannot grow while cut off: once it applied all of it, its
    // state stays as it is until a snapshot is installed.
    wait_until("the cut-off follower applying its whole log", || {
        nodes[fi]
            .raft_status()
            .is_some_and(|s| s.applied_index == s.last_log_index)
    });
    let f = nodes[fi].raft_status().expect("follower");
    write_until_purged_past(&nodes, li, &mut lc, f.last_log_index);
    // Whoever leads after the heal (the follower's candidacies while cut
    // off may bring an election), its streams are cut.
    for n in &nodes {
        n.cut_snapshot_streams_after(Some(16 << 10));
    }
    heal(&nodes);
    wait_until("two snapshot streams cut", || {
        nodes.iter().map(Running::snapshot_streams_cut).sum::<u64>() >= 2
    });
    let cut = nodes[fi].raft_status().expect("follower");
    assert_eq!(
        cut.applied_index, f.applied_index,
        "a cut stream changed what the follower applied"
    );
    assert_eq!(
        cut.snapshot_index, f.snapshot_index,
        "a cut stream installed"
    );
    for n in &nodes {
        n.cut_snapshot_streams_after(None);
    }
    wait_until(
        "the follower installing a later stream and catching up",
        || {
            let l = nodes[li]
                .raft_status()
                .map_or(u64::MAX, |s| s.applied_index);
            nodes[fi].raft_status().is_some_and(|s| {
                s.snapshot_index.is_some_and(|i| i > f.last_log_index) && s.applied_index >= l
            })
        },
    );
    wait_until("the given-up streams' files removed", || {
        staged(t.path(), fid) == 0
    });
    check_numbered(&mut fc, "early", 10);
    check_numbered(&mut fc, "late", 60);
    let v: Vec<u8> = redis::cmd("GET")
        .arg("bulk299")
        .query(&mut fc)
        .expect("GET");
    assert_eq!(v, vec![b'a' + (299 % 26) as u8; 1000]);
}

/// A follower sent a snapshot while the leader applied entries after its
/// newest one (here any: the threshold is 1 byte) is sent a fresh
/// snapshot holding all of them, not the newest one and the entries after
/// it by log. The leader's own snapshots come every 20 entries, and no
/// write follows the heal, so only a fresh build reaches past them.
#[test]
fn a_follower_far_behind_is_sent_a_fresh_snapshot() {
    let t = tempfile::tempdir().expect("temp dir");
    let nodes = in_process_group_with(t.path(), |r| {
        r.snapshot_entries = 20;
        r.fresh_snapshot_bytes = 1;
    });
    let li = in_process_leader(&nodes, None);
    let fi = (li + 1) % 3;
    let mut lc = running_client(&nodes[li]);
    set_numbered(&mut lc, "early", 10);
    cut_off(&nodes, fi);
    let f_last = nodes[fi].raft_status().expect("follower").last_log_index;
    write_until_purged_past(&nodes, li, &mut lc, f_last);
    // Entries applied after the leader's last snapshot, and too few for
    // its policy to take another (20): one write at a time until so.
    let mut extra = 0;
    let (snap, applied) = loop {
        let s = nodes[li].raft_status().expect("leader");
        let snap = s.snapshot_index.unwrap_or(0);
        if s.applied_index == s.last_log_index
            && (3..20).contains(&s.applied_index.saturating_sub(snap))
        {
            break (snap, s.applied_index);
        }
        let _: String = redis::cmd("SET")
            .arg(format!("extra{extra}"))
            .arg(extra)
            .query(&mut lc)
            .expect("SET");
        extra += 1;
        assert!(extra < 100, "the leader's snapshots never left a tail");
    };
    heal(&nodes);
    wait_until("the follower installing a snapshot and catching up", || {
        nodes[fi].raft_status().is_some_and(|s| {
            s.snapshot_index.is_some_and(|i| i > f_last) && s.applied_index >= applied
        })
    });
    let f = nodes[fi].raft_status().expect("follower");
    assert!(
        f.snapshot_index.is_some_and(|i| i >= applied),
        "the follower was sent snapshot {:?}, the leader's was {snap} and it had applied {applied}",
        f.snapshot_index
    );
    let mut fc = running_client(&nodes[fi]);
    let _: String = redis::cmd("READONLY").query(&mut fc).expect("READONLY");
    check_numbered(&mut fc, "early", 10);
    check_numbered(&mut fc, "late", 60);
    check_numbered(&mut fc, "extra", extra);
}

#[test]
fn a_removed_member_leaves_the_group_and_its_id_is_never_reused() {
    use sluice_server::raft::remove_member;
    let t = tempfile::tempdir().expect("temp dir");
    let mut nodes = in_process_group(t.path(), 10_000);
    let li = in_process_leader(&nodes, None);
    let lid = li as u64 + 1;
    let victim = (li + 1) % 3;
    let vid = victim as u64 + 1;
    // Asked through the third node, which forwards to the leader.
    let asker = nodes[(li + 2) % 3].raft_addr().expect("raft address");
    let e = remove_member(&asker, lid).expect_err("the leader removed itself");
    assert!(e.contains("leads"), "{e}");
    remove_member(&asker, vid).expect("removing a follower");
    let st = nodes[li].raft_status().expect("leader");
    assert!(!st.members.contains_key(&vid), "{st:?}");
    assert_eq!(st.members.len(), 2, "{st:?}");
    let e = remove_member(&asker, vid).expect_err("removed twice");
    assert!(e.contains("not a member"), "{e}");
    // The two left acknowledge writes without it.
    nodes
        .remove(victim)
        .shutdown()
        .expect("stop the removed node");
    let li = in_process_leader(&nodes, None);
    let mut lc = running_client(&nodes[li]);
    set_numbered(&mut lc, "after", 10);
    check_numbered(&mut lc, "after", 10);
    // Its id does not come back, even from an empty node.
    let mut c = Config::new(t.path().join("again"));
    c.port = 0;
    c.raft = Some(raft_config(vid, 0, nodes[li].raft_addr(), 10_000));
    let e = start(c).err().expect("a removed id was admitted");
    assert!(e.contains("never reused"), "{e}");
}

/// Rounds of writes the writers of
/// [`a_follower_installing_a_snapshot_under_writes_converges`] may still
/// start, and how many they finished: the test hands them out in batches.
#[derive(Default)]
struct Rounds {
    allowed: std::sync::atomic::AtomicU64,
    done: std::sync::atomic::AtomicU64,
    stop: std::sync::atomic::AtomicBool,
}

impl Rounds {
    /// Takes a round to run; `None` once stopped.
    fn take(&self) -> Option<()> {
        use std::sync::atomic::Ordering::SeqCst;
        loop {
            if self.stop.load(SeqCst) {
                return None;
            }
            let left = self.allowed.load(SeqCst);
            if left > 0 {
                if self
                    .allowed
                    .compare_exchange(left, left - 1, SeqCst, SeqCst)
                    .is_ok()
                {
                    return Some(());
                }
            } else {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }

    /// Lets `n` more rounds run and waits until they ran.
    fn run(&self, n: u64, what: &str) {
        use std::sync::atomic::Ordering::SeqCst;
        let target = self.done.load(SeqCst) + self.allowed.load(SeqCst) + n;
        self.allowed.fetch_add(n, SeqCst);
        wait_until(what, || self.done.load(SeqCst) >= target);
    }
}

/// A writer's loop ([`a_follower_installing_a_snapshot_under_writes_converges`]):
/// per round it is given, SETs of its own keys (one, or a pipeline of
/// several) and an INCR of `counter`, through whichever node takes them. A
/// round that fails is counted as unanswered (its outcome unknown) and the
/// writer moves to the next node.
fn write_rounds(addrs: &[SocketAddr], tag: usize, seed: u64, rounds: &Rounds) -> Seen {
    use std::sync::atomic::Ordering::SeqCst;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut seen = Seen::default();
    let mut at = 0;
    let mut con = connect(addrs[at]);
    let mut i = 0usize;
    while rounds.take().is_some() {
        let n = if rng.gen_bool(0.5) {
            1
        } else {
            rng.gen_range(2..8)
        };
        let keys: Vec<String> = (i..i + n).map(|k| format!("t{tag}:{k}")).collect();
        i += n;
        let mut p = redis::pipe();
        for k in &keys {
            p.cmd("SET").arg(k).arg(k).ignore();
        }
        p.cmd("INCR").arg("counter");
        match p.query::<(i64,)>(&mut con) {
            Ok(_) => {
                seen.acked_keys.extend(keys);
                seen.acked_incrs += 1;
            }
            Err(e) => {
                if seen.unknown_incrs < 3 {
                    eprintln!("writer {tag} at {}: {e}", addrs[at]);
                }
                seen.unknown_keys.extend(keys);
                seen.unknown_incrs += 1;
                at = (at + 1) % addrs.len();
                std::thread::sleep(Duration::from_millis(20));
                con = connect(addrs[at]);
            }
        }
        rounds.done.fetch_add(1, SeqCst);
    }
    seen
}

/// A follower installs a snapshot while the leader keeps taking writes:
/// cut off until the leader purged the log it lacks, it is sent the
/// leader's snapshot once healed, and its install is held (unpacked and
/// opened, before its swap) while writers keep having requests
/// acknowledged, so entries are committed during the install; released,
/// more are acknowledged right after it. The entries after the snapshot
/// reach the follower by its log (the leader keeps 200 entries behind its
/// snapshots, more than the test writes after the one sent): it installs
/// no other snapshot. At the end every node holds every acknowledged write
/// (each acknowledged `INCR` counted once), and the follower's applied
/// index is the leader's.
#[test]
fn a_follower_installing_a_snapshot_under_writes_converges() {
    use std::sync::Arc;
    /// A snapshot every this many entries, and as many kept behind it.
    const ENTRIES: u64 = 200;
    let seed = seed();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let t = tempfile::tempdir().expect("temp dir");
    let nodes = in_process_group(t.path(), ENTRIES);
    let li = in_process_leader(&nodes, None);
    let fi = (li + rng.gen_range(1..3)) % 3;
    let mut lc = running_client(&nodes[li]);
    let before = rng.gen_range(10..60);
    set_numbered(&mut lc, "k", before);
    // Cut the follower off until the leader purged past its log.
    cut_off(&nodes, fi);
    let f_last = nodes[fi].raft_status().expect("follower").last_log_index;
    // One entry per write, until the leader purged past the follower's
    // log and its last snapshot is within a few entries of its log's end
    // (the snapshot it sends: what follows it stays in its log).
    let mut cut = 0;
    let started = Instant::now();
    while !nodes[li].raft_status().is_some_and(|s| {
        s.purged_index.is_some_and(|p| p > f_last)
            && s.snapshot_index.is_some_and(|i| i + 5 >= s.last_log_index)
    }) {
        assert!(
            started.elapsed() < PATIENCE,
            "gave up waiting for the leader's purge (seed {seed})"
        );
        let _: String = redis::cmd("SET")
            .arg(format!("cut{cut}"))
            .arg(cut)
            .query(&mut lc)
            .expect("SET");
        cut += 1;
    }

    nodes[fi].hold_next_snapshot_install(true);
    heal(&nodes);
    wait_until("the follower's install held before its swap", || {
        nodes[fi].snapshot_install_held()
    });
    let rounds = Arc::new(Rounds::default());
    // The leader first: writers move on to the others only on a failure.
    let mut addrs: Vec<SocketAddr> = nodes.iter().map(Running::addr).collect();
    addrs.rotate_left(li);
    let writers: Vec<_> = (0..rng.gen_range(1..4))
        .map(|w| {
            let (rounds, addrs) = (rounds.clone(), addrs.clone());
            let wseed = seed.wrapping_add(w as u64 + 1);
            std::thread::spawn(move || write_rounds(&addrs, w, wseed, &rounds))
        })
        .collect();
    // Rounds answered while the follower installs: committed by the two
    // others, after the snapshot it is installing. At most 60 rounds in
    // all (an entry each at most), so the leader's log still holds every
    // entry after that snapshot.
    rounds.run(rng.gen_range(5..30), "writes during the install");
    assert!(
        nodes[fi].snapshot_install_held(),
        "the install was not held (seed {seed})"
    );
    nodes[fi].hold_next_snapshot_install(false);
    wait_until("the follower's install done", || {
        nodes[fi]
            .raft_status()
            .is_some_and(|s| s.snapshot_index.is_some_and(|i| i > f_last))
    });
    let installed = nodes[fi].raft_status().and_then(|s| s.snapshot_index);
    // And right after it.
    rounds.run(rng.gen_range(5..30), "writes after the install");
    rounds.stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut seen = Seen::default();
    for w in writers {
        let s = w.join().expect("writer");
        seen.acked_keys.extend(s.acked_keys);
        seen.unknown_keys.extend(s.unknown_keys);
        seen.acked_incrs += s.acked_incrs;
        seen.unknown_incrs += s.unknown_incrs;
    }
    eprintln!(
        "{} keys and {} INCRs acknowledged, {} requests unanswered (seed {seed})",
        seen.acked_keys.len(),
        seen.acked_incrs,
        seen.unknown_keys.len() as u64 + seen.unknown_incrs
    );

    let li = in_process_leader(&nodes, None);
    wait_until("every node applying the leader's last entry", || {
        let Some(l) = nodes[li].raft_status() else {
            return false;
        };
        l.applied_index == l.last_log_index
            && nodes.iter().all(|n| {
                n.raft_status()
                    .is_some_and(|s| s.applied_index == l.applied_index)
            })
    });
    let leader_applied = nodes[li].raft_status().expect("leader").applied_index;
    let f = nodes[fi].raft_status().expect("follower");
    assert_eq!(f.applied_index, leader_applied, "seed {seed}");
    assert_eq!(
        f.snapshot_index, installed,
        "the follower took another snapshot after the one held (seed {seed})"
    );
    assert!(
        installed.is_some_and(|i| i < f.applied_index),
        "no entry reached the follower after its snapshot {installed:?} (seed {seed})"
    );
    let mut counters = Vec::new();
    for n in &nodes {
        let mut con = running_client(n);
        let _: String = redis::cmd("READONLY").query(&mut con).expect("READONLY");
        check_numbered(&mut con, "k", before);
        check_numbered(&mut con, "cut", cut);
        counters.push(check_node(&mut con, &seen, seed));
    }
    assert!(
        counters.iter().all(|c| *c == counters[0]),
        "the nodes' counters differ: {counters:?} (seed {seed})"
    );
}

/// A replicated shard's log entries carry no database: `SWAPDB`, and
/// `SELECT` inside `MULTI`, are refused there with an error that says so
/// (as `SELECT` beyond 0 is), and nothing is swapped.
#[test]
fn a_replicated_shard_refuses_swapdb_and_select_inside_multi() {
    let dir = tempfile::tempdir().expect("temp dir");
    let nodes = in_process_group(dir.path(), 10_000);
    let li = in_process_leader(&nodes, None);
    let mut c = running_client(&nodes[li]);
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .query(&mut c)
        .expect("SET");
    let e = redis::cmd("SWAPDB")
        .arg(0)
        .arg(1)
        .query::<()>(&mut c)
        .expect_err("refused");
    assert!(
        e.to_string()
            .contains("SWAPDB is not supported on a replicated shard"),
        "{e}"
    );
    let _: () = redis::cmd("MULTI").query(&mut c).expect("MULTI");
    let e = redis::cmd("SELECT")
        .arg(0)
        .query::<()>(&mut c)
        .expect_err("refused");
    assert!(
        e.to_string()
            .contains("SELECT inside MULTI is not supported on a replicated shard"),
        "{e}"
    );
    let e = redis::cmd("EXEC").query::<()>(&mut c).expect_err("aborted");
    assert!(e.to_string().contains("Transaction discarded"), "{e}");
    let v: Option<String> = redis::cmd("GET").arg("k").query(&mut c).expect("GET");
    assert_eq!(v.as_deref(), Some("v"));
}
