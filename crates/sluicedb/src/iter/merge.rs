//! Merges several sorted internal iterators into one (LevelDB's
//! `MergingIterator`). A seek finds the smallest child by a linear scan; a
//! step keeps the other children ranked (the order a linear scan would
//! pick them in) and puts the moved child back in place by binary search,
//! so it asks about `log2(n)` children for their keys, not all `n`: a
//! lightkv partition merges 6-20 tables (`docs/experiments.md`, "LightKV:
//! seeks through the index directory and merges without a layer per
//! table").
//!
//! A child that fails (a damaged block, an unreadable table) stops the
//! whole merge: the merged iterator turns invalid at once and `status`
//! returns the child's error. Merging on without it would yield the
//! other children's entries in its place: older versions of its keys,
//! keys it deleted (RocksDB's `MergingIterator` keeps the first child
//! error for the same reason).

use std::cmp::Ordering;

use super::InternalIterator;
use crate::error::Result;
use crate::key;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    Forward,
    Reverse,
}

pub(crate) struct MergingIterator {
    children: Vec<Box<dyn InternalIterator>>,
    /// The child positioned on the smallest (forward) or largest
    /// (reverse) entry; `None` at the end, and for good after an error.
    current: Option<usize>,
    direction: Direction,
    /// The first child error met; once set, the iterator stays invalid
    /// until repositioned by a seek.
    status: Result<()>,
    /// The valid children other than `current`, nearest first in the
    /// direction of travel (ties by child number, as the linear scan
    /// breaks them), once `ranked`: steps keep it; seeks and turns clear
    /// `ranked`, and the next step ranks again.
    rest: Vec<usize>,
    ranked: bool,
}

/// Whether child `a` comes before child `b` in a merge going `forward`:
/// by key, then the lower child number forward and the higher in reverse
/// (the choice of [`MergingIterator::settle`]'s scan).
fn ahead(children: &[Box<dyn InternalIterator>], a: usize, b: usize, forward: bool) -> bool {
    let order = key::compare(children[a].key(), children[b].key()).then(a.cmp(&b));
    if forward {
        order == Ordering::Less
    } else {
        order == Ordering::Greater
    }
}

impl MergingIterator {
    pub(crate) fn new(children: Vec<Box<dyn InternalIterator>>) -> Self {
        MergingIterator {
            children,
            current: None,
            direction: Direction::Forward,
            status: Ok(()),
            rest: Vec::new(),
            ranked: false,
        }
    }

    /// After the current child `cur` stepped: the nearest child. The
    /// others have not moved, so only `cur`'s place among them changes.
    fn settle_step(&mut self, cur: usize, forward: bool) {
        let children = &self.children;
        if !self.ranked {
            self.rest.clear();
            self.rest
                .extend((0..children.len()).filter(|&i| i != cur && children[i].valid()));
            self.rest.sort_unstable_by(|&a, &b| {
                if ahead(children, a, b, forward) {
                    Ordering::Less
                } else {
                    Ordering::Greater
                }
            });
            self.ranked = true;
        }
        let c = children[cur].as_ref();
        if !c.valid() {
            if let Err(e) = c.status() {
                self.status = Err(e);
                self.current = None;
                self.ranked = false;
                return;
            }
            self.current = (!self.rest.is_empty()).then(|| self.rest.remove(0));
            return;
        }
        match self.rest.first() {
            Some(&next) if ahead(children, next, cur, forward) => {
                let at = 1 + self.rest[1..].partition_point(|&o| ahead(children, o, cur, forward));
                self.rest.remove(0);
                self.rest.insert(at - 1, cur);
                self.current = Some(next);
            }
            _ => self.current = Some(cur),
        }
    }

    /// After a seek or a turn, which moved every child: positions on the
    /// smallest (forward) or largest (reverse) child, or on none after an
    /// error. The invalid children are asked their status: a failed child
    /// is invalid (the trait's contract), so the check rides on the
    /// validity test the search makes anyway. A step checks the child it
    /// moved the same way ([`MergingIterator::settle_step`]).
    fn settle(&mut self, forward: bool) {
        self.current = None;
        self.ranked = false;
        if self.status.is_err() {
            return;
        }
        let n = self.children.len();
        let mut best: Option<usize> = None;
        for j in 0..n {
            let i = if forward { j } else { n - 1 - j };
            let c = self.children[i].as_ref();
            if !c.valid() {
                if let Err(e) = c.status() {
                    self.status = Err(e);
                    return;
                }
                continue;
            }
            let better = best.is_none_or(|b| {
                let order = key::compare(c.key(), self.children[b].key());
                if forward {
                    order == Ordering::Less
                } else {
                    order == Ordering::Greater
                }
            });
            if better {
                best = Some(i);
            }
        }
        self.current = best;
    }
}

impl InternalIterator for MergingIterator {
    fn valid(&self) -> bool {
        self.current.is_some()
    }
    fn seek_to_first(&mut self) {
        self.status = Ok(());
        for c in &mut self.children {
            c.seek_to_first();
        }
        self.settle(true);
        self.direction = Direction::Forward;
    }
    fn seek_to_last(&mut self) {
        self.status = Ok(());
        for c in &mut self.children {
            c.seek_to_last();
        }
        self.settle(false);
        self.direction = Direction::Reverse;
    }
    fn seek(&mut self, target: &[u8]) {
        self.status = Ok(());
        for c in &mut self.children {
            c.seek(target);
        }
        self.settle(true);
        self.direction = Direction::Forward;
    }
    fn next(&mut self) {
        let Some(cur) = self.current else { return };
        if self.direction != Direction::Forward {
            // Move every other child to the first entry after key().
            let k = self.children[cur].key().to_vec();
            for (i, c) in self.children.iter_mut().enumerate() {
                if i == cur {
                    continue;
                }
                c.seek(&k);
                if c.valid() && key::compare(&k, c.key()) == Ordering::Equal {
                    c.next();
                }
            }
            self.direction = Direction::Forward;
            self.children[cur].next();
            return self.settle(true);
        }
        self.children[cur].next();
        self.settle_step(cur, true);
    }
    fn prev(&mut self) {
        let Some(cur) = self.current else { return };
        if self.direction != Direction::Reverse {
            // Move every other child to the last entry before key().
            let k = self.children[cur].key().to_vec();
            for (i, c) in self.children.iter_mut().enumerate() {
                if i == cur {
                    continue;
                }
                c.seek(&k);
                if c.valid() {
                    c.prev();
                } else if c.status().is_ok() {
                    c.seek_to_last();
                }
            }
            self.direction = Direction::Reverse;
            self.children[cur].prev();
            return self.settle(false);
        }
        self.children[cur].prev();
        self.settle_step(cur, false);
    }
    fn key(&self) -> &[u8] {
        self.children[self.current.expect("valid iterator")].key()
    }
    fn value(&self) -> &[u8] {
        self.children[self.current.expect("valid iterator")].value()
    }
    fn status(&self) -> Result<()> {
        self.status.clone()?;
        for c in &self.children {
            c.status()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iter::testutil::VecIter;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
    use std::sync::Arc;

    fn e(k: &str, seq: u64) -> (Vec<u8>, Vec<u8>) {
        (
            key::encode(k.as_bytes(), seq, 1),
            format!("{k}{seq}").into_bytes(),
        )
    }

    /// A child that counts the keys it is asked for.
    struct Counted(VecIter, Arc<AtomicUsize>);

    impl InternalIterator for Counted {
        fn valid(&self) -> bool {
            self.0.valid()
        }
        fn seek_to_first(&mut self) {
            self.0.seek_to_first()
        }
        fn seek_to_last(&mut self) {
            self.0.seek_to_last()
        }
        fn seek(&mut self, t: &[u8]) {
            self.0.seek(t)
        }
        fn next(&mut self) {
            self.0.next()
        }
        fn prev(&mut self) {
            self.0.prev()
        }
        fn key(&self) -> &[u8] {
            self.1.fetch_add(1, AtomicOrdering::Relaxed);
            self.0.key()
        }
        fn value(&self) -> &[u8] {
            self.0.value()
        }
        fn status(&self) -> Result<()> {
            self.0.status()
        }
    }

    /// `n` children of random entries over a few keys; an entry may be in
    /// several children under the same internal key (as a put recovery
    /// indexed again in the lightkv buffer is also in a table). Each
    /// value names its child.
    fn random_children(rng: &mut StdRng, n: usize) -> Vec<Vec<(Vec<u8>, Vec<u8>)>> {
        (0..n)
            .map(|c| {
                let mut items: Vec<(Vec<u8>, Vec<u8>)> = (0..rng.gen_range(0..40))
                    .map(|_| {
                        let k = format!("k{:02}", rng.gen_range(0..30));
                        let seq = rng.gen_range(1..4);
                        (
                            key::encode(k.as_bytes(), seq, 1),
                            format!("{c}").into_bytes(),
                        )
                    })
                    .collect();
                items.sort_by(|a, b| key::compare(&a.0, &b.0));
                items.dedup_by(|a, b| a.0 == b.0);
                items
            })
            .collect()
    }

    fn merged(children: &[Vec<(Vec<u8>, Vec<u8>)>]) -> MergingIterator {
        MergingIterator::new(
            children
                .iter()
                .map(|c| Box::new(VecIter::new(c.clone())) as Box<dyn InternalIterator>)
                .collect(),
        )
    }

    /// Steps take the children in the order a scan of them all would:
    /// by key, ties to the lower child forward and the higher in reverse.
    #[test]
    fn steps_take_children_in_key_order_ties_by_child_both_ways() {
        let mut rng = StdRng::seed_from_u64(52);
        for round in 0..300 {
            let children = random_children(&mut rng, 1 + round % 13);
            let mut all: Vec<(Vec<u8>, usize, Vec<u8>)> = children
                .iter()
                .enumerate()
                .flat_map(|(c, items)| items.iter().map(move |(k, v)| (k.clone(), c, v.clone())))
                .collect();
            all.sort_by(|a, b| key::compare(&a.0, &b.0).then(a.1.cmp(&b.1)));
            let want: Vec<_> = all.iter().map(|(k, _, v)| (k.clone(), v.clone())).collect();
            let mut m = merged(&children);
            let mut got = Vec::new();
            m.seek_to_first();
            while m.valid() {
                got.push((m.key().to_vec(), m.value().to_vec()));
                m.next();
            }
            assert_eq!(got, want, "forward, round {round}");
            all.sort_by(|a, b| key::compare(&b.0, &a.0).then(b.1.cmp(&a.1)));
            let want: Vec<_> = all.iter().map(|(k, _, v)| (k.clone(), v.clone())).collect();
            got.clear();
            m.seek_to_last();
            while m.valid() {
                got.push((m.key().to_vec(), m.value().to_vec()));
                m.prev();
            }
            assert_eq!(got, want, "reverse, round {round}");
            // From a seek, forward: the entries at or after the target.
            let target = key::encode(format!("k{:02}", rng.gen_range(0..30)).as_bytes(), 2, 1);
            m.seek(&target);
            let mut got = Vec::new();
            while m.valid() {
                got.push(m.key().to_vec());
                m.next();
            }
            let mut want: Vec<_> = want.into_iter().map(|(k, _)| k).collect();
            want.reverse();
            want.retain(|k| key::compare(k, &target).is_ge());
            assert_eq!(got, want, "from a seek, round {round}");
        }
    }

    /// A step asks a few children for their keys, not every one: a merge
    /// of 16 interleaved children about 2 log2(16) keys a step, where a
    /// scan of them all asks 30.
    #[test]
    fn a_step_asks_a_logarithmic_number_of_children_for_keys() {
        let asked = Arc::new(AtomicUsize::new(0));
        let n = 16;
        let children: Vec<Box<dyn InternalIterator>> = (0..n)
            .map(|c| {
                let items = (0..100)
                    .map(|i| {
                        (
                            key::encode(format!("k{:05}", i * n + c).as_bytes(), 1, 1),
                            vec![],
                        )
                    })
                    .collect();
                Box::new(Counted(VecIter::new(items), asked.clone())) as Box<dyn InternalIterator>
            })
            .collect();
        let mut m = MergingIterator::new(children);
        m.seek_to_first();
        let mut steps = 0;
        asked.store(0, AtomicOrdering::Relaxed);
        while m.valid() {
            m.next();
            steps += 1;
        }
        assert_eq!(steps, 1600);
        let per_step = asked.load(AtomicOrdering::Relaxed) as f64 / steps as f64;
        assert!(per_step <= 12.0, "{per_step} keys asked per step");
    }

    #[test]
    fn merges_and_switches_direction() {
        let a = VecIter::new(vec![e("a", 1), e("c", 1), e("e", 1)]);
        let b = VecIter::new(vec![e("b", 1), e("c", 2), e("d", 1)]);
        let mut m = MergingIterator::new(vec![Box::new(a), Box::new(b)]);
        m.seek_to_first();
        let mut fwd = vec![];
        while m.valid() {
            fwd.push(String::from_utf8(m.value().to_vec()).unwrap());
            m.next();
        }
        assert_eq!(fwd, ["a1", "b1", "c2", "c1", "d1", "e1"]);
        m.seek(&key::encode(b"c", 1, key::KIND_SEEK));
        assert_eq!(m.value(), b"c1");
        m.prev();
        assert_eq!(m.value(), b"c2");
        m.prev();
        assert_eq!(m.value(), b"b1");
        m.next();
        assert_eq!(m.value(), b"c2");
        m.next();
        assert_eq!(m.value(), b"c1");
    }
}
