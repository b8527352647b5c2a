//! Merges several sorted internal iterators into one (LevelDB's
//! `MergingIterator`). Children are few (memtables, L0 tables, one per
//! level), so the smallest is found by a linear scan.

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
    current: Option<usize>,
    direction: Direction,
}

impl MergingIterator {
    pub(crate) fn new(children: Vec<Box<dyn InternalIterator>>) -> Self {
        MergingIterator {
            children,
            current: None,
            direction: Direction::Forward,
        }
    }

    fn find_smallest(&mut self) {
        let mut best: Option<usize> = None;
        for (i, c) in self.children.iter().enumerate() {
            if c.valid()
                && best
                    .is_none_or(|b| key::compare(c.key(), self.children[b].key()) == Ordering::Less)
            {
                best = Some(i);
            }
        }
        self.current = best;
    }

    fn find_largest(&mut self) {
        let mut best: Option<usize> = None;
        for (i, c) in self.children.iter().enumerate().rev() {
            if c.valid()
                && best.is_none_or(|b| {
                    key::compare(c.key(), self.children[b].key()) == Ordering::Greater
                })
            {
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
        for c in &mut self.children {
            c.seek_to_first();
        }
        self.find_smallest();
        self.direction = Direction::Forward;
    }
    fn seek_to_last(&mut self) {
        for c in &mut self.children {
            c.seek_to_last();
        }
        self.find_largest();
        self.direction = Direction::Reverse;
    }
    fn seek(&mut self, target: &[u8]) {
        for c in &mut self.children {
            c.seek(target);
        }
        self.find_smallest();
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
        }
        self.children[cur].next();
        self.find_smallest();
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
                } else {
                    c.seek_to_last();
                }
            }
            self.direction = Direction::Reverse;
        }
        self.children[cur].prev();
        self.find_largest();
    }
    fn key(&self) -> &[u8] {
        self.children[self.current.expect("valid iterator")].key()
    }
    fn value(&self) -> &[u8] {
        self.children[self.current.expect("valid iterator")].value()
    }
    fn status(&self) -> Result<()> {
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
