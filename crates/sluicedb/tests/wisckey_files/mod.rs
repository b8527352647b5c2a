//! Shared by the WiscKey regression tests: a database with values in
//! several sealed value log files.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sluicedb::fs::{Fs, MemFs};
use sluicedb::{Db, Options, Preset};

pub const KEYS: u32 = 400;

/// WiscKey with its defaults but small value log files, on `fs`.
pub fn wisckey(fs: &MemFs) -> Options {
    Options::preset(Preset::WiscKey)
        .fs(Arc::new(fs.clone()))
        .value_log_file_size_bytes(8192)
        .gc_garbage_ratio(None)
}

pub fn key(i: u32) -> String {
    format!("key{i:05}")
}

pub fn value(i: u32) -> Vec<u8> {
    format!("value-{i:05}-").repeat(20).into_bytes()
}

/// Writes `KEYS` synced keys and closes the database; returns the value
/// log files, oldest first.
pub fn filled(fs: &MemFs) -> Vec<PathBuf> {
    let db = Db::open("/db", wisckey(fs)).unwrap();
    for i in 0..KEYS {
        db.put_opt(&sluicedb::WriteOptions::synced(), key(i), value(i))
            .unwrap();
    }
    drop(db);
    vlogs(fs)
}

pub fn vlogs(fs: &MemFs) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs
        .list(Path::new("/db"))
        .unwrap()
        .into_iter()
        .filter(|n| n.ends_with(".vlog"))
        .map(|n| Path::new("/db").join(n))
        .collect();
    v.sort();
    v
}

/// The corruption error's file, or a panic naming what came instead.
pub fn corrupt_file<T: std::fmt::Debug>(r: sluicedb::Result<T>, what: &str) -> PathBuf {
    match r {
        Err(sluicedb::Error::Corruption { file, .. }) => file,
        other => panic!("{what}: expected Corruption, got {other:?}"),
    }
}
