//! `SCAN` over a damaged table (issue 50): the engine's scans yielded older
//! versions and deleted keys of a failed table before reporting it. Through
//! the server, every `SCAN` reply before the error must name only live
//! keys, each once, and a `SCAN` that completes must name all of them.
//! Each table of a database of each preset gets a byte flipped at spread
//! positions in turn, each in a fresh copy of the directory.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use common::TestServer;
use redis::{Commands, RedisResult};
use sluicedb::Preset;

const KEYS: u32 = 240;

fn key(i: u32) -> String {
    format!("key:{i:04}")
}

/// Fills a database through the server: all keys, then overwrites and
/// deletes in a later table, each round saved (flushed) to its own table.
/// Returns the live keys.
fn build(dir: &Path, preset: Preset) -> BTreeSet<String> {
    let running = TestServer::start_in(dir, |c| c.preset = Some(preset));
    let mut c = redis::Client::open(format!("redis://{}/", running.addr()))
        .unwrap()
        .get_connection()
        .unwrap();
    let mut live = BTreeSet::new();
    for i in 0..KEYS {
        let v = format!("{i}:").repeat(20 + (i % 50) as usize);
        let _: () = c.set(key(i), v).unwrap();
        live.insert(key(i));
    }
    let _: () = redis::cmd("SAVE").query(&mut c).unwrap();
    for i in (0..KEYS).step_by(4) {
        let _: () = c.set(key(i), format!("new{i}").repeat(30)).unwrap();
    }
    for i in (1..KEYS).step_by(5) {
        let _: i64 = c.del(key(i)).unwrap();
        live.remove(&key(i));
    }
    let _: () = redis::cmd("SAVE").query(&mut c).unwrap();
    running.shutdown().unwrap();
    live
}

fn copy_dir(from: &Path, to: &Path) {
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

/// SCANs the whole keyspace; returns whether a reply was an error.
fn scan_checked(addr: std::net::SocketAddr, live: &BTreeSet<String>, what: &str) -> bool {
    let mut c = redis::Client::open(format!("redis://{addr}/"))
        .unwrap()
        .get_connection()
        .unwrap();
    let mut seen = BTreeSet::new();
    let mut cursor = 0u64;
    loop {
        let r: RedisResult<(u64, Vec<String>)> = redis::cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(25)
            .query(&mut c);
        let (next, keys) = match r {
            Ok(r) => r,
            Err(e) => {
                let text = e.to_string();
                assert!(
                    text.contains("orruption"),
                    "{what}: SCAN failed with {text}"
                );
                return true;
            }
        };
        for k in keys {
            assert!(live.contains(&k), "{what}: SCAN returned {k}, deleted");
            assert!(seen.insert(k.clone()), "{what}: SCAN returned {k} twice");
        }
        if next == 0 {
            break;
        }
        cursor = next;
    }
    assert_eq!(
        &seen, live,
        "{what}: SCAN ended without an error, keys missing"
    );
    false
}

fn run(preset: Preset) {
    let base = tempfile::tempdir().unwrap();
    let live = build(base.path(), preset);
    let tables: Vec<PathBuf> = std::fs::read_dir(base.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sst"))
        .collect();
    assert!(!tables.is_empty(), "{preset:?}: no tables");
    let (mut flips, mut failed) = (0, 0);
    for table in &tables {
        let len = std::fs::metadata(table).unwrap().len() as usize;
        let mut positions: Vec<usize> = (0..len).step_by(len / 10 + 1).collect();
        positions.extend([len - 1, len - 20, len / 2 + 7]);
        for pos in positions {
            let copy = tempfile::tempdir().unwrap();
            copy_dir(base.path(), copy.path());
            let path = copy.path().join(table.file_name().unwrap());
            let mut data = std::fs::read(&path).unwrap();
            data[pos] ^= 0x20;
            std::fs::write(&path, data).unwrap();
            flips += 1;
            let what = format!("{preset:?}: {} byte {pos}", table.display());
            let mut config = sluice_server::Config::new(copy.path());
            config.port = 0;
            let running = match sluice_server::start(config) {
                Ok(r) => r,
                Err(e) => {
                    assert!(e.contains("orruption"), "{what}: start failed with {e}");
                    failed += 1;
                    continue;
                }
            };
            if scan_checked(running.addr(), &live, &what) {
                failed += 1;
            }
            // Background work may have met the damage too: stopping
            // reports it, which is not what this test checks.
            let _ = running.shutdown();
        }
    }
    println!("{preset:?}: {flips} flips, {failed} reported");
    assert!(failed > 0, "{preset:?}: no flip was reported");
}

#[test]
fn scan_stops_at_damage_leveldb() {
    run(Preset::LevelDb);
}

#[test]
fn scan_stops_at_damage_wisckey() {
    run(Preset::WiscKey);
}

#[test]
fn scan_stops_at_damage_hashkv() {
    run(Preset::HashKv);
}

#[test]
fn scan_stops_at_damage_scavenger() {
    run(Preset::Scavenger);
}

#[test]
fn scan_stops_at_damage_unikv() {
    run(Preset::UniKv);
}
