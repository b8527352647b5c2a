//! Merges several sorted internal iterators into one (LevelDB's
//! `MergingIterator`). Children are few (memtables, L0 tables, one per
//! level), so the smallest is found by a linear scan.
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
}

impl MergingIterator {
    pub(crate) fn new(children: Vec<Box<dyn InternalIterator>>) -> Self {
        MergingIterator {
            children,
            current: None,
            direction: Direction::Forward,
            status: Ok(()),
        }
    }

    /// Positions on the smallest (forward) or largest (reverse) child,
    /// or on none after an error. The invalid children among `moved`
    /// (the one child repositioned since the last settle; `None`: all of
    /// them) are asked their status: a failed child is invalid (the
    /// trait's contract), so the check rides on the validity test the
    /// search makes anyway and a scan's step costs no extra call.
    fn settle(&mut self, moved: Option<usize>, forward: bool) {
        self.current = None;
        if self.status.is_err() {
            return;
        }
        let n = self.children.len();
        let mut best: Option<usize> = None;
        for j in 0..n {
            let i = if forward { j } else { n - 1 - j };
            let c = self.children[i].as_ref();
            if !c.valid() {
                if moved.is_none_or(|m| m == i) {
                    if let Err(e) = c.status() {
                        self.status = Err(e);
                        return;
                    }
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

    fn settle_forward(&mut self, moved: Option<usize>) {
        self.settle(moved, true);
    }

    fn settle_reverse(&mut self, moved: Option<usize>) {
        self.settle(moved, false);
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
        self.settle_forward(None);
        self.direction = Direction::Forward;
    }
    fn seek_to_last(&mut self) {
        self.status = Ok(());
        for c in &mut self.children {
            c.seek_to_last();
        }
        self.settle_reverse(None);
        self.direction = Direction::Reverse;
    }
    fn seek(&mut self, target: &[u8]) {
        self.status = Ok(());
        for c in &mut self.children {
            c.seek(target);
        }
        self.settle_forward(None);
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
            return self.settle_forward(None);
        }
        self.children[cur].next();
        self.settle_forward(Some(cur));
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
            return self.settle_reverse(None);
        }
        self.children[cur].prev();
        self.settle_reverse(Some(cur));
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

    fn e(k: &str, seq: u64) -> (Vec<u8>, Vec<u8>) {
        (
            key::encode(k.as_bytes(), seq, 1),
            format!("{k}{seq}").into_bytes(),
        )
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
