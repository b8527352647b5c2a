//! The kill test: a real writer process (`sluice kill-writer`) is killed
//! with SIGKILL at a random moment, again and again on one database, for
//! every preset. After each kill the database must open and hold a prefix
//! of the round's history that includes every synced write, every earlier
//! round's keys exactly as their own check found them, and pass `verify`.
//!
//! `SLUICE_KILL_ROUNDS` sets the kills per preset (default 4; the outside
//! test that found issue 15 ran 1,904), `SLUICE_KILL_SEED` the seed of the
//! delays, `SLUICE_KILL_PRESET` one preset by name (default: all);
//! `scripts/kill-test.sh` runs many.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use sluice_bench::kill::{self, State};
use sluicedb::{Db, Preset};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// What the writer printed: the last acknowledged write and the last
/// synced one.
fn run_writer(
    db: &std::path::Path,
    preset: Preset,
    round: u64,
    delay: Duration,
) -> (Option<u64>, Option<u64>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "kill-writer",
            "--db",
            db.to_str().unwrap(),
            "--preset",
            preset.name(),
        ])
        .args(["--round", &round.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("writer starts");
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let (mut acked, mut synced) = (None, None);
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let mut parts = line.split(' ');
            let i: u64 = parts.next().unwrap().parse().expect("an index");
            acked = Some(i);
            if parts.next() == Some("s") {
                synced = Some(i);
            }
        }
        (acked, synced)
    });
    std::thread::sleep(delay);
    let early = child.try_wait().unwrap();
    assert!(
        early.is_none(),
        "the writer exited by itself: {early:?} {}",
        std::io::read_to_string(child.stderr.take().unwrap()).unwrap()
    );
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    reader.join().unwrap()
}

/// Every pair of the database, by the round that wrote it.
fn scan_by_round(d: &Db, what: &str) -> BTreeMap<u64, State> {
    let mut by_round: BTreeMap<u64, State> = BTreeMap::new();
    for pair in d.range::<&[u8]>(..) {
        let (k, v) = pair.unwrap_or_else(|e| panic!("{what}: scan: {e}"));
        let r: u64 = std::str::from_utf8(&k[1..4]).unwrap().parse().unwrap();
        by_round.entry(r).or_default().insert(k, v);
    }
    by_round
}

fn check_preset(preset: Preset, rounds: u64, seed: u64) {
    // Kept when a check fails (the panic skips the removal at the end), so
    // that the damaged database can be looked at (`sluice dump`).
    let dir = tempfile::tempdir().unwrap().keep();
    let db = dir.join("db");
    let mut kept: BTreeMap<u64, State> = BTreeMap::new();
    let mut rng = seed ^ preset.name().len() as u64;
    for round in 0..rounds {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let delay = Duration::from_millis(80 + (rng >> 33) % 600);
        let (acked, synced) = run_writer(&db, preset, round, delay);
        let what = format!(
            "{} round {round} seed {seed} delay {delay:?} acked {acked:?} synced {synced:?} db {}",
            preset.name(),
            db.display()
        );
        let d =
            Db::open(&db, kill::options(preset)).unwrap_or_else(|e| panic!("{what}: open: {e}"));
        let mut by_round = scan_by_round(&d, &what);
        let got = by_round.remove(&round).unwrap_or_default();
        let lo = synced.map_or(0, |s| s + 1);
        let hi = acked.map_or(1, |a| a + 2);
        let n = kill::matching_prefix(round, lo, hi, &got)
            .unwrap_or_else(|| panic!("{what}: not a prefix of history in {lo}..={hi}"));
        for (r, state) in &kept {
            assert!(
                by_round.get(r).unwrap_or(&State::new()) == state,
                "{what}: round {r}'s keys changed"
            );
        }
        d.verify()
            .unwrap_or_else(|e| panic!("{what}: verify after kill: {e}"));
        // Compaction and GC on the recovered state keep every pair: the one
        // failure seen here (issue 18) changed the state between two scans.
        d.compact_range(None, None)
            .unwrap_or_else(|e| panic!("{what}: compact after kill: {e}"));
        for _ in 0..3 {
            d.gc()
                .unwrap_or_else(|e| panic!("{what}: gc after kill: {e}"));
        }
        d.verify()
            .unwrap_or_else(|e| panic!("{what}: verify after compaction and GC: {e}"));
        let mut again = scan_by_round(&d, &format!("{what} (after compaction and GC)"));
        assert!(
            again.remove(&round).unwrap_or_default() == got
                && kept
                    .iter()
                    .all(|(r, s)| again.get(r).unwrap_or(&State::new()) == s),
            "{what}: compaction and GC after the kill changed the pairs"
        );
        eprintln!("{what}: recovered {n} writes");
        kept.insert(round, got);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn sigkill_a_writer_again_and_again() {
    let rounds = env_u64("SLUICE_KILL_ROUNDS", 4);
    let seed = env_u64(
        "SLUICE_KILL_SEED",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64,
    );
    eprintln!("kill test: {rounds} rounds per preset, SLUICE_KILL_SEED={seed}");
    let only = std::env::var("SLUICE_KILL_PRESET").ok();
    for &preset in Preset::all() {
        if only.as_deref().is_some_and(|p| p != preset.name()) {
            continue;
        }
        check_preset(preset, rounds, seed);
    }
}
