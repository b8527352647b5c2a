//! The RH-Tree against a `BTreeMap` model: offsets index a record list
//! (key, value or tombstone), as they will index the write buffer.

use std::collections::BTreeMap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;

/// Records, as the write buffer would hold them: offset = index.
#[derive(Default)]
struct Records(Vec<(Vec<u8>, Option<u32>)>);

impl Records {
    fn key(&self, offset: u64) -> Vec<u8> {
        self.0[offset as usize].0.clone()
    }
}

fn small() -> RhParams {
    RhParams {
        leaf_buckets: 2,
        extra_buckets: 1,
        max_leaf_nodes: 48,
        t_normal: 4,
        initial_leaves: 2,
    }
}

/// Keys that share prefixes, run short, hold zero bytes and prefix each
/// other: what makes level splits and new inner nodes happen.
fn random_key(rng: &mut StdRng) -> Vec<u8> {
    const PREFIXES: [&[u8]; 6] = [b"", b"a", b"user:", b"user:0000", b"\0", b"\xff\xff"];
    let mut k = PREFIXES[rng.gen_range(0..PREFIXES.len())].to_vec();
    for _ in 0..rng.gen_range(0..6) {
        k.push([0u8, 1, b'0', b'7', b'a', 0xfe][rng.gen_range(0..6)]);
    }
    k
}

struct Run {
    tree: RhTree,
    records: Records,
    model: BTreeMap<Vec<u8>, Option<u32>>,
}

impl Run {
    fn new(tree: RhTree) -> Run {
        Run {
            tree,
            records: Records::default(),
            model: BTreeMap::new(),
        }
    }

    fn put(&mut self, key: &[u8], value: Option<u32>) {
        self.records.0.push((key.to_vec(), value));
        let offset = self.records.0.len() as u64 - 1;
        let records = &self.records;
        self.tree.put(key, offset, |o| records.key(o));
        self.model.insert(key.to_vec(), value);
    }

    fn get(&self, key: &[u8]) -> Option<Option<u32>> {
        let off = self.tree.get(key, |o| self.records.key(o))?;
        Some(self.records.0[off as usize].1)
    }

    fn verify(&self, probes: &[Vec<u8>]) -> Result<(), String> {
        self.tree.check(|o| self.records.key(o))?;
        for (k, v) in &self.model {
            if self.get(k) != Some(*v) {
                return Err(format!("{k:?}: {:?}, model {v:?}", self.get(k)));
            }
        }
        for k in probes.iter().filter(|k| !self.model.contains_key(*k)) {
            if let Some(v) = self.get(k) {
                return Err(format!("absent {k:?} found as {v:?}"));
            }
        }
        Ok(())
    }
}

fn random_run(seed: u64, params: RhParams, hash: fn(&[u8]) -> u64, ops: usize) -> Run {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut run = Run::new(RhTree::with_hash(params, hash));
    for i in 0..ops {
        let key = random_key(&mut rng);
        let value = (!rng.gen_bool(0.15)).then_some(i as u32);
        run.put(&key, value);
        if i % 97 == 0 {
            let probes: Vec<Vec<u8>> = (0..20).map(|_| random_key(&mut rng)).collect();
            if let Err(e) = run.verify(&probes) {
                panic!("seed {seed}, after {i} puts: {e}");
            }
        }
    }
    let probes: Vec<Vec<u8>> = (0..200).map(|_| random_key(&mut rng)).collect();
    if let Err(e) = run.verify(&probes) {
        panic!("seed {seed}: {e}");
    }
    run
}

#[test]
fn matches_a_btreemap_through_splits_of_both_kinds_and_links() {
    for seed in 0..6 {
        let run = random_run(seed, small(), xxh3_64, 3000);
        let s = run.tree.stats();
        assert!(
            s.normal_splits > 10 && s.level_splits > 3,
            "seed {seed}: {s:?}"
        );
        assert!(s.new_inner_nodes > 0 && s.links > 0, "seed {seed}: {s:?}");
        assert_eq!(run.tree.partitions(), small().max_leaf_nodes, "seed {seed}");
    }
}

#[test]
fn forced_signature_collisions_are_told_apart_by_the_key() {
    // Every key gets one signature: both bucket choices coincide and the
    // extra bucket overflows at once, so leaves split by cache slots alone.
    let run = random_run(11, small(), |_| 0x1234_5678, 1500);
    assert!(run.tree.stats().normal_splits > 5, "{:?}", run.tree.stats());
}

#[test]
fn a_tombstone_in_the_top_leaf_shadows_a_linked_leaf() {
    let params = RhParams {
        max_leaf_nodes: 2,
        ..small()
    };
    let mut run = Run::new(RhTree::new(params));
    run.put(b"k", Some(1));
    for i in 0..40u32 {
        run.put(format!("k{i}").as_bytes(), Some(i));
    }
    let id = run.tree.partition_of(b"k");
    assert!(
        run.tree.partition(id).1 > 1,
        "linked leaves: {:?}",
        run.tree.stats()
    );
    run.put(b"k", None);
    assert_eq!(run.get(b"k"), Some(None));
    run.verify(&[b"j".to_vec(), b"k00".to_vec()]).unwrap();
}

#[test]
fn partitions_cover_the_key_space_in_order() {
    let run = random_run(3, small(), xxh3_64, 2000);
    let order = run.tree.in_key_order();
    assert_eq!(
        run.tree.partition(order[0]).0.lower_bound(),
        Vec::<u8>::new()
    );
    for k in run.model.keys() {
        let id = run.tree.partition_of(k);
        assert!(run.tree.partition(id).0.contains(k), "{k:?}");
    }
    // Keys in order visit partitions in order.
    let place: BTreeMap<LeafId, usize> = order.iter().enumerate().map(|(i, &id)| (id, i)).collect();
    let visited: Vec<usize> = run
        .model
        .keys()
        .map(|k| place[&run.tree.partition_of(k)])
        .collect();
    assert!(visited.windows(2).all(|w| w[0] <= w[1]));
}

#[test]
fn short_keys_and_zero_padding() {
    let mut run = Run::new(RhTree::new(small()));
    for k in [
        &b""[..],
        b"\0",
        b"\0\0",
        b"a",
        b"a\0",
        b"a\0\0\0\0\0",
        b"a\x01",
    ] {
        run.put(k, Some(k.len() as u32));
    }
    run.verify(&[b"\0\0\0".to_vec(), b"a\0\0".to_vec()])
        .unwrap();
}
