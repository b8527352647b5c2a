//! A cursor over key-range parts in key order, each part's sources merged
//! and the next part entered only when the current one runs out: LightKV's
//! buffer partitions (`db/light.rs`) and the partitioned shape's table
//! partitions (`index/partitioned.rs`). A seek so reads the sources of one
//! part, not of every part in range.

use super::{InternalIterator, MergingIterator};
use crate::error::Result;
use crate::key;

/// Where a part is entered.
pub(crate) enum Entry<'a> {
    /// At its first entry at or after this internal key.
    At(&'a [u8]),
    First,
    Last,
}

/// The parts a [`PartsCursor`] goes over, in key order.
pub(crate) trait Parts: Send {
    fn len(&self) -> usize;
    /// Part `at`'s sources merged, positioned as `to` says.
    fn enter(&self, at: usize, to: Entry<'_>) -> MergingIterator;
    /// Whether `user_key` belongs to part `at` (a source may hold keys of
    /// other parts; the cursor skips them).
    fn holds(&self, at: usize, user_key: &[u8]) -> bool;
    /// The part a seek to `user_key` starts in; the later ones are sought
    /// too until one has an entry at or after the target.
    fn seek_start(&self, user_key: &[u8]) -> usize;
}

pub(crate) struct PartsCursor<P> {
    parts: P,
    /// The part `inner` merges, if positioned.
    at: usize,
    inner: Option<MergingIterator>,
    /// Whether `inner` stands on an entry of part `at`, as of the last
    /// move: `valid` is asked several times per step of a scan, and
    /// `holds` compares keys.
    on: bool,
}

impl<P: Parts> PartsCursor<P> {
    pub(crate) fn new(parts: P) -> PartsCursor<P> {
        PartsCursor {
            parts,
            at: 0,
            inner: None,
            on: false,
        }
    }

    fn enter(&mut self, at: usize, to: Entry<'_>) {
        self.at = at;
        self.inner = Some(self.parts.enter(at, to));
    }

    /// Whether `inner` stands on an entry of part `at` (`on` caches it).
    fn inner_valid(&self) -> bool {
        self.inner
            .as_ref()
            .is_some_and(|i| i.valid() && self.parts.holds(self.at, key::user_key(i.key())))
    }

    /// From an exhausted part on (not a failed one), the first entry of the
    /// next ones.
    fn forward(&mut self) {
        while !self.inner_valid() && self.status().is_ok() && self.at + 1 < self.parts.len() {
            self.enter(self.at + 1, Entry::First);
        }
        self.on = self.inner_valid();
    }

    /// From an exhausted part back, the last entry of the earlier ones.
    fn backward(&mut self) {
        while !self.inner_valid() && self.status().is_ok() && self.at > 0 {
            self.enter(self.at - 1, Entry::Last);
        }
        self.on = self.inner_valid();
    }
}

impl<P: Parts> InternalIterator for PartsCursor<P> {
    fn valid(&self) -> bool {
        self.on
    }
    fn seek_to_first(&mut self) {
        if self.parts.len() > 0 {
            self.enter(0, Entry::First);
            self.forward();
        }
    }
    fn seek_to_last(&mut self) {
        if let Some(last) = self.parts.len().checked_sub(1) {
            self.enter(last, Entry::Last);
            self.backward();
        }
    }
    fn seek(&mut self, target: &[u8]) {
        self.on = false;
        if self.parts.len() == 0 {
            return;
        }
        let mut at = self
            .parts
            .seek_start(key::user_key(target))
            .min(self.parts.len() - 1);
        loop {
            self.enter(at, Entry::At(target));
            if self.inner_valid() || self.status().is_err() || at + 1 >= self.parts.len() {
                break;
            }
            at += 1;
        }
        self.on = self.inner_valid();
    }
    fn next(&mut self) {
        if let Some(i) = &mut self.inner {
            i.next();
        }
        self.forward();
    }
    fn prev(&mut self) {
        if let Some(i) = &mut self.inner {
            i.prev();
        }
        self.backward();
    }
    fn key(&self) -> &[u8] {
        self.inner.as_ref().expect("a valid iterator").key()
    }
    fn value(&self) -> &[u8] {
        self.inner.as_ref().expect("a valid iterator").value()
    }
    fn status(&self) -> Result<()> {
        self.inner.as_ref().map_or(Ok(()), |i| i.status())
    }
}
