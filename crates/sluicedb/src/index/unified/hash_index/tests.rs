//! The two-level hash index against a `HashMap` model: no key is ever
//! missed, versions come newest first, tag false positives are rare, and
//! checkpoints round-trip and reject damage without panicking.

use std::collections::HashMap;
use std::path::Path;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;

fn key(i: u64) -> Vec<u8> {
    format!("user{i:012}").into_bytes()
}

/// Adds `tables` tables of random keys from a space of `key_space`; returns
/// the model: key → the tables holding it, oldest first.
fn fill(
    idx: &mut HashIndex,
    rng: &mut StdRng,
    tables: u64,
    keys_per_table: usize,
    key_space: u64,
) -> HashMap<Vec<u8>, Vec<u64>> {
    let mut model: HashMap<Vec<u8>, Vec<u64>> = HashMap::new();
    for t in 0..tables {
        let number = 100 + t * 3;
        let mut keys: Vec<Vec<u8>> = (0..keys_per_table)
            .map(|_| key(rng.gen_range(0..key_space)))
            .collect();
        keys.sort();
        // Several versions of a key in one table sit side by side.
        idx.add_table(number, keys.iter().map(|k| k.as_slice()))
            .unwrap();
        keys.dedup();
        for k in keys {
            model.entry(k).or_default().push(number);
        }
    }
    model
}

#[test]
fn every_indexed_key_finds_its_tables_newest_first() {
    // From roomy (few collisions) to 16 buckets for thousands of keys
    // (long overflow chains), with 1 to 8 hash functions.
    for (seed, buckets, functions) in [
        (1u64, 4096usize, 4u32),
        (2, 512, 4),
        (3, 16, 4),
        (4, 1000, 1),
        (5, 997, 8),
        (6, 1, 2),
    ] {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut idx = HashIndex::new(buckets, functions);
        let model = fill(&mut idx, &mut rng, 12, 300, 1500);
        let distinct: u64 = model.values().map(|t| t.len() as u64).sum();
        assert_eq!(
            idx.entries(),
            distinct,
            "seed {seed}: one entry per key per table"
        );
        assert_eq!(
            idx.entries(),
            (idx.load_factor() * buckets as f64).round() as u64 + idx.overflow_entries() as u64,
            "seed {seed}: every entry is a bucket's own or an overflow entry"
        );
        for (k, tables) in &model {
            let got = idx.candidates(k);
            // The key's own tables, in the order the index gives them.
            let own: Vec<u64> = got.iter().copied().filter(|t| tables.contains(t)).collect();
            let mut newest_first = tables.clone();
            newest_first.reverse();
            assert_eq!(
                own, newest_first,
                "seed {seed}: key {k:?}, candidates {got:?}"
            );
        }
    }
}

#[test]
fn tag_false_positives_are_rare_and_only_cost_a_probe() {
    let seed = 11;
    let mut rng = StdRng::seed_from_u64(seed);
    // About the paper's load: 80% of buckets taken by 4 functions.
    let mut idx = HashIndex::new(1 << 14, 4);
    fill(&mut idx, &mut rng, 20, 700, 1 << 40);
    assert!(
        idx.load_factor() > 0.5,
        "seed {seed}: load {}",
        idx.load_factor()
    );
    let mut false_positives = 0usize;
    let absent = 200_000u64;
    for i in 0..absent {
        false_positives += idx.candidates(format!("absent{i}").as_bytes()).len();
    }
    // Expected: absent × probed entries × 2^-16, about 4 × 0.85 × 3 = 10.
    assert!(
        false_positives < 60,
        "seed {seed}: {false_positives} false candidates in {absent} lookups"
    );
}

/// Two keys with the same 16-bit tag, found by search.
fn keys_sharing_a_tag() -> (Vec<u8>, Vec<u8>) {
    let mut by_tag: HashMap<u16, Vec<u8>> = HashMap::new();
    for i in 0.. {
        let k = key(i);
        let tag = KeyHash::of(&k).tag;
        if let Some(other) = by_tag.insert(tag, k.clone()) {
            return (other, k);
        }
    }
    unreachable!("the tag space is 16 bits")
}

#[test]
fn a_tag_collision_in_one_bucket_yields_both_tables_newest_first() {
    let (a, b) = keys_sharing_a_tag();
    // One bucket: everything collides; the second key overflows.
    let mut idx = HashIndex::new(1, 2);
    idx.add_table(7, [a.as_slice()]).unwrap();
    idx.add_table(9, [b.as_slice()]).unwrap();
    assert_eq!(idx.overflow_entries(), 1);
    // The newer table first: the caller probes 9, finds no `a`, then 7.
    assert_eq!(idx.candidates(&a).as_slice(), &[9, 7]);
    assert_eq!(idx.candidates(&b).as_slice(), &[9, 7]);
    assert!(idx.candidates(b"some other key").len() <= 2);
}

#[test]
fn a_table_is_indexed_once_and_the_index_holds_at_most_max_tables() {
    let mut idx = HashIndex::new(8, 4);
    idx.add_table(1, [b"k".as_slice()]).unwrap();
    let err = idx.add_table(1, [b"k".as_slice()]).unwrap_err();
    assert!(err.contains("already indexed"), "{err}");
    for t in 2..=MAX_TABLES as u64 {
        idx.add_table(t, std::iter::empty()).unwrap();
    }
    assert!(idx.is_full());
    let err = idx.add_table(u64::MAX, [b"x".as_slice()]).unwrap_err();
    assert!(err.contains("does not fit"), "{err}");
    assert_eq!(idx.candidates(b"k").as_slice(), &[1]);
}

#[test]
fn a_checkpoint_round_trips() {
    for (seed, buckets) in [(21u64, 64usize), (22, 3000)] {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut idx = HashIndex::new(buckets, 4);
        let model = fill(&mut idx, &mut rng, 6, 200, 800);
        for (i, t) in idx.tables().to_vec().into_iter().enumerate() {
            assert!(idx.note_shadowed(t, i as u64 * 7 + 1));
        }
        assert!(!idx.note_shadowed(u64::MAX, 1), "an unindexed table");
        let bytes = idx.encode();
        let back = HashIndex::decode(&bytes, Path::new("x.hix")).unwrap();
        assert_eq!(back, idx, "seed {seed}");
        for k in model.keys() {
            assert_eq!(back.candidates(k), idx.candidates(k), "seed {seed}");
        }
        assert_eq!(back.encode(), bytes, "seed {seed}: re-encoding is stable");
    }
}

#[test]
fn a_damaged_checkpoint_is_a_corruption_naming_the_offset() {
    let mut rng = StdRng::seed_from_u64(31);
    let mut idx = HashIndex::new(32, 2);
    fill(&mut idx, &mut rng, 3, 40, 100);
    let good = idx.encode();
    let file = Path::new("000042.hix");

    let err = HashIndex::decode(&good[..good.len() - 1], file).unwrap_err();
    assert!(err.is_corruption(), "{err}");

    let mut flipped = good.clone();
    flipped[HEADER_BYTES + 3] ^= 0x10;
    match HashIndex::decode(&flipped, file).unwrap_err() {
        Error::Corruption {
            file: f,
            offset,
            reason,
        } => {
            assert_eq!(f, file);
            assert_eq!(offset, good.len() as u64 - 4);
            assert!(reason.contains("checksum"), "{reason}");
        }
        e => panic!("expected corruption, got {e}"),
    }

    // Damage the checksum cannot see (a writer bug, or a forged file): a
    // link into the future and a slot past the table list.
    let first_overflow = HEADER_BYTES + idx.tables().len() * 16 + idx.buckets() * ENTRY_BYTES;
    assert!(
        idx.overflow_entries() > 0,
        "the test needs an overflow chain"
    );
    let mut looped = good.clone();
    looped[first_overflow + 4..first_overflow + 8].copy_from_slice(&1u32.to_le_bytes());
    resum(&mut looped);
    match HashIndex::decode(&looped, file).unwrap_err() {
        Error::Corruption { offset, .. } => assert_eq!(offset, (first_overflow + 4) as u64),
        e => panic!("expected corruption, got {e}"),
    }
    let mut slot = good.clone();
    let at = HEADER_BYTES + idx.tables().len() * 16 + 2;
    slot[at..at + 2].copy_from_slice(&99u16.to_le_bytes());
    resum(&mut slot);
    match HashIndex::decode(&slot, file).unwrap_err() {
        Error::Corruption { offset, .. } => assert_eq!(offset, at as u64),
        e => panic!("expected corruption, got {e}"),
    }

    let mut version = good.clone();
    version[8] = 9;
    resum(&mut version);
    assert!(matches!(
        HashIndex::decode(&version, file),
        Err(Error::UnsupportedVersion { version: 9, .. })
    ));
}

/// Fuzzing found it: a checkpoint (checksum intact) whose header counted
/// `u64::MAX` key entries decoded, and the next table indexed into it
/// overflowed the count (a panic in debug builds, a wrong count in
/// release). The count is what the buckets and overflow entries hold.
#[test]
fn a_checkpoint_whose_entry_count_disagrees_with_its_entries_is_corruption() {
    let mut rng = StdRng::seed_from_u64(5);
    let mut idx = HashIndex::new(16, 2);
    fill(&mut idx, &mut rng, 2, 30, 100);
    let file = Path::new("000042.hix");
    for count in [u64::MAX, idx.entries() + 1, idx.entries() - 1] {
        let mut bad = idx.encode();
        bad[28..36].copy_from_slice(&count.to_le_bytes());
        resum(&mut bad);
        match HashIndex::decode(&bad, file) {
            Err(Error::Corruption { offset, .. }) => assert_eq!(offset, 28, "count {count}"),
            other => panic!("count {count}: expected corruption, got {other:?}"),
        }
    }
    assert_eq!(HashIndex::decode(&idx.encode(), file).unwrap(), idx);
}

/// Fuzzing found it: a checkpoint (checksum intact) holding a table's
/// shadowed count near `u64::MAX` decoded, and the next flush that
/// shadowed keys of that table overflowed the count (a panic in debug
/// builds).
#[test]
fn a_checkpoints_huge_shadowed_count_does_not_overflow_when_counted_on() {
    let mut rng = StdRng::seed_from_u64(6);
    let mut idx = HashIndex::new(16, 2);
    fill(&mut idx, &mut rng, 2, 30, 100);
    let first = idx.tables()[0];
    let mut bytes = idx.encode();
    let at = HEADER_BYTES + idx.tables().len() * 8;
    bytes[at..at + 8].copy_from_slice(&(u64::MAX - 1).to_le_bytes());
    resum(&mut bytes);
    let mut back = HashIndex::decode(&bytes, Path::new("000042.hix")).unwrap();
    assert!(back.note_shadowed(first, 5));
    assert_eq!(back.shadowed().next(), Some((first, u64::MAX)));
}

/// A checkpoint of format 1, written before the shadowed counts, reads
/// back with every count 0.
#[test]
fn a_format_1_checkpoint_reads_with_no_shadowed_keys() {
    let mut rng = StdRng::seed_from_u64(51);
    let mut idx = HashIndex::new(64, 3);
    let model = fill(&mut idx, &mut rng, 4, 50, 200);
    assert!(idx.note_shadowed(idx.tables()[0], 9));
    let v2 = idx.encode();
    let tables = idx.tables().len();
    let counts = HEADER_BYTES + tables * 8;
    let mut v1 = [&v2[..counts], &v2[counts + tables * 8..]].concat();
    v1[8..12].copy_from_slice(&1u32.to_le_bytes());
    resum(&mut v1);
    let back = HashIndex::decode(&v1, Path::new("x.hix")).unwrap();
    assert!(back.shadowed().all(|(_, n)| n == 0));
    assert_eq!(back.tables(), idx.tables());
    for k in model.keys() {
        assert_eq!(back.candidates(k), idx.candidates(k));
    }
}

/// Rewrites the trailing checksum over tampered bytes.
fn resum(bytes: &mut [u8]) {
    let body = bytes.len() - 4;
    let crc = masked_crc(&bytes[..body]);
    bytes[body..].copy_from_slice(&crc.to_le_bytes());
}

#[test]
fn random_damage_never_panics_and_never_loops() {
    let seed = 41;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut idx = HashIndex::new(16, 3);
    let model = fill(&mut idx, &mut rng, 4, 30, 200);
    let good = idx.encode();
    for round in 0..2000 {
        let mut bad = good.clone();
        for _ in 0..rng.gen_range(1..4) {
            let at = rng.gen_range(0..bad.len() - 4);
            bad[at] = rng.gen();
        }
        resum(&mut bad);
        if let Ok(decoded) = HashIndex::decode(&bad, Path::new("x")) {
            // Whatever decoded must answer lookups, and end every chain.
            for k in model.keys().take(20) {
                let got = decoded.candidates(k);
                assert!(
                    got.len() <= decoded.tables().len(),
                    "seed {seed} round {round}"
                );
            }
        }
    }
}

#[test]
fn sized_at_the_papers_load_an_entry_costs_about_ten_bytes() {
    // Seed 004 §III-B: 8-byte entries, about 80% of buckets used, so about
    // 10 MB per million keys (1 GiB of 1 KiB pairs).
    let keys = 100_000u64;
    let mut idx = HashIndex::new((keys as f64 / 0.8) as usize, 4);
    assert_eq!(idx.functions(), 4);
    let mut sorted: Vec<Vec<u8>> = (0..keys).map(key).collect();
    sorted.sort();
    idx.add_table(5, sorted.iter().map(|k| k.as_slice()))
        .unwrap();
    let per_key = idx.memory_bytes() as f64 / keys as f64;
    assert!(
        (8.0..11.0).contains(&per_key),
        "{per_key:.2} bytes per key; load {:.3}, {} overflow entries",
        idx.load_factor(),
        idx.overflow_entries()
    );
    for k in sorted.iter().step_by(97) {
        assert!(idx.candidates(k).contains(&5));
    }
}

/// The worked example of `docs/format/unikv-hash-index.md`.
#[test]
fn the_format_docs_worked_example_matches_the_encoder() {
    let mut idx = HashIndex::new(2, 1);
    idx.add_table(7, std::iter::empty()).unwrap();
    let hex: String = idx.encode().iter().map(|b| format!("{b:02x}")).collect();
    let doc = include_str!("../../../../../../docs/format/unikv-hash-index.md");
    let documented: String = doc
        .lines()
        .skip_while(|l| !l.starts_with("```hex"))
        .skip(1)
        .take_while(|l| !l.starts_with("```"))
        .flat_map(|l| l.split('#').next().unwrap_or("").split_whitespace())
        .collect();
    assert_eq!(hex, documented);
}
