//! The kill test's history: what the writer process does (`sluice
//! kill-writer`) and what a database recovered after `SIGKILL` must hold
//! (`crates/sluice-cli/tests/kill.rs`, `scripts/kill-test.sh`).
//!
//! Round `r` writes keys `r{r}:k{NN}` only, so rounds share a database
//! (kept across kills) and each round's keys are checked apart: the
//! current round's against its history, earlier rounds' against what they
//! held when their own check passed.

use std::collections::BTreeMap;

use sluicedb::{Options, Preset, WriteBatch};

/// Keys a round writes to (few, so that overwrites and deletes are many).
const KEYS: u64 = 97;

/// One write of the history: puts (`Some`) and deletes of one batch.
pub struct Op {
    pub ops: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

impl Op {
    pub fn batch(&self) -> WriteBatch {
        let mut b = WriteBatch::new();
        for (k, v) in &self.ops {
            match v {
                Some(v) => b.put(k, v),
                None => b.delete(k),
            };
        }
        b
    }
}

/// The options the writer and the checker open with: the preset and small
/// memtables and value files, so that flushes, compactions, file rotations
/// and GC happen between kills.
pub fn options(preset: Preset) -> Options {
    Options::preset(preset)
        .write_buffer_size_bytes(256 << 10)
        .value_log_file_size_bytes(1 << 20)
        .hash_main_segment_bytes(64 << 10)
        .hash_log_segment_bytes(16 << 10)
        .hash_groups(16)
        // LightKV: 4 MiB of write buffer in 64 KiB segments, so that leaves
        // link and flush within a round.
        .lightkv_buffer_bytes(4 << 20)
        .lightkv_segment_bytes(64 << 10)
}

/// True when write `i` is synced (every tenth).
pub fn synced(i: u64) -> bool {
    i % 10 == 9
}

/// The prefix of a round's keys.
pub fn round_prefix(round: u64) -> Vec<u8> {
    format!("r{round:03}:").into_bytes()
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
    z ^ (z >> 31)
}

/// Write `i` of round `round`: one to three operations, about one in six
/// a delete, values of 100 B to 4 KiB.
pub fn op(round: u64, i: u64) -> Op {
    let h = mix(round << 40 ^ i);
    let n = 1 + h % 3;
    let ops = (0..n)
        .map(|j| {
            let hj = mix(h ^ j);
            let mut k = round_prefix(round);
            k.extend_from_slice(format!("k{:02}", hj % KEYS).as_bytes());
            let v = !(hj >> 8).is_multiple_of(6);
            let v = v.then(|| {
                let len = 100 + (hj >> 16) as usize % 4000;
                let mut v = format!("{round}/{i}/{j}:").into_bytes();
                v.resize(len, b'a' + (i % 26) as u8);
                v
            });
            (k, v)
        })
        .collect();
    Op { ops }
}

pub type State = BTreeMap<Vec<u8>, Vec<u8>>;

/// The number of writes `n` in `lo..=hi` whose state `got` is: recovery
/// must yield a prefix of history holding every synced write.
pub fn matching_prefix(round: u64, lo: u64, hi: u64, got: &State) -> Option<u64> {
    let mut state = State::new();
    for n in 0..=hi {
        if n >= lo && &state == got {
            return Some(n);
        }
        for (k, v) in op(round, n).ops {
            match v {
                Some(v) => state.insert(k, v),
                None => state.remove(&k),
            };
        }
    }
    None
}
