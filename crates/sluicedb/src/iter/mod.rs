//! Iterators over internal keys (the user-facing cursor built on them is
//! `db/cursor.rs`, which reads separated values).
//!
//! Every source (memtable, table block, table, level) is an
//! [`InternalIterator`]: a bidirectional cursor over internal keys. They are
//! combined by [`MergingIterator`], and [`DbIter`] turns the merged stream
//! into user keys: it hides versions newer than the snapshot, older versions
//! of a key and deleted keys, in both directions.

mod db_iter;
mod merge;
mod parts;

pub(crate) use db_iter::DbIter;
pub(crate) use merge::MergingIterator;
pub(crate) use parts::{Entry, Parts, PartsCursor};

use crate::error::Result;

/// A bidirectional cursor over entries ordered by internal key.
///
/// `key`/`value` may only be called while `valid()`. After an I/O or
/// corruption error the iterator becomes invalid and `status` returns it.
pub(crate) trait InternalIterator: Send {
    fn valid(&self) -> bool;
    fn seek_to_first(&mut self);
    fn seek_to_last(&mut self);
    /// Positions at the first entry at or after `target` (an internal key).
    fn seek(&mut self, target: &[u8]);
    fn next(&mut self);
    fn prev(&mut self);
    fn key(&self) -> &[u8];
    fn value(&self) -> &[u8];
    fn status(&self) -> Result<()>;
}

/// An iterator that holds nothing and reports `0`'s error: a source that
/// could not be opened, in a merge.
pub(crate) struct Failed(pub(crate) crate::error::Error);

impl InternalIterator for Failed {
    fn valid(&self) -> bool {
        false
    }
    fn seek_to_first(&mut self) {}
    fn seek_to_last(&mut self) {}
    fn seek(&mut self, _target: &[u8]) {}
    fn next(&mut self) {}
    fn prev(&mut self) {}
    fn key(&self) -> &[u8] {
        &[]
    }
    fn value(&self) -> &[u8] {
        &[]
    }
    fn status(&self) -> Result<()> {
        Err(self.0.clone())
    }
}

#[cfg(test)]
pub(crate) mod testutil {
    use super::InternalIterator;
    use crate::error::Result;
    use crate::key;

    /// An iterator over a sorted vector, for tests of combinators. With
    /// `damaged_at`, the entry at that index stands for a damaged block:
    /// moving onto it fails the iterator for good, as a table's does.
    pub(crate) struct VecIter {
        pub(crate) items: Vec<(Vec<u8>, Vec<u8>)>,
        pub(crate) pos: Option<usize>,
        pub(crate) damaged_at: Option<usize>,
        failed: bool,
    }

    impl VecIter {
        pub(crate) fn new(mut items: Vec<(Vec<u8>, Vec<u8>)>) -> Self {
            items.sort_by(|a, b| key::compare(&a.0, &b.0));
            VecIter {
                items,
                pos: None,
                damaged_at: None,
                failed: false,
            }
        }

        /// Fails at the `damaged_at`-th entry in key order.
        pub(crate) fn damaged(items: Vec<(Vec<u8>, Vec<u8>)>, damaged_at: usize) -> Self {
            VecIter {
                damaged_at: Some(damaged_at),
                ..VecIter::new(items)
            }
        }

        fn check(&mut self) {
            if self.failed || (self.pos.is_some() && self.pos == self.damaged_at) {
                self.failed = true;
                self.pos = None;
            }
        }
    }

    impl InternalIterator for VecIter {
        fn valid(&self) -> bool {
            self.pos.is_some()
        }
        fn seek_to_first(&mut self) {
            self.pos = (!self.items.is_empty()).then_some(0);
            self.check();
        }
        fn seek_to_last(&mut self) {
            self.pos = self.items.len().checked_sub(1);
            self.check();
        }
        fn seek(&mut self, t: &[u8]) {
            let i = self
                .items
                .partition_point(|(k, _)| key::compare(k, t).is_lt());
            self.pos = (i < self.items.len()).then_some(i);
            self.check();
        }
        fn next(&mut self) {
            self.pos = self.pos.map(|p| p + 1).filter(|&p| p < self.items.len());
            self.check();
        }
        fn prev(&mut self) {
            self.pos = self.pos.and_then(|p| p.checked_sub(1));
            self.check();
        }
        fn key(&self) -> &[u8] {
            &self.items[self.pos.unwrap()].0
        }
        fn value(&self) -> &[u8] {
            &self.items[self.pos.unwrap()].1
        }
        fn status(&self) -> Result<()> {
            if self.failed {
                return Err(crate::error::Error::corruption(
                    std::path::Path::new("damaged.sst"),
                    0,
                    "damaged block",
                ));
            }
            Ok(())
        }
    }
}
