//! The user-key view of a merged internal iterator at a snapshot (LevelDB's
//! `DBIter`).
//!
//! Forward: the inner iterator sits on the entry being returned. Reverse: the
//! inner iterator sits just before all entries of the current user key, and
//! the key and value are held in `saved_*`. Switching direction re-positions
//! the inner iterator accordingly.

use super::InternalIterator;
use crate::error::Result;
use crate::key::{self, Kind};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Direction {
    Forward,
    Reverse,
}

pub(crate) struct DbIter {
    inner: Box<dyn InternalIterator>,
    sequence: u64,
    direction: Direction,
    valid: bool,
    saved_key: Vec<u8>,
    saved_value: Vec<u8>,
    saved_kind: Kind,
    seek_buf: Vec<u8>,
}

impl DbIter {
    pub(crate) fn new(inner: Box<dyn InternalIterator>, sequence: u64) -> Self {
        DbIter {
            inner,
            sequence,
            direction: Direction::Forward,
            valid: false,
            saved_key: Vec::new(),
            saved_value: Vec::new(),
            saved_kind: Kind::Value,
            seek_buf: Vec::new(),
        }
    }

    pub(crate) fn valid(&self) -> bool {
        self.valid
    }

    /// The current user key.
    pub(crate) fn key(&self) -> &[u8] {
        debug_assert!(self.valid);
        match self.direction {
            Direction::Forward => key::user_key(self.inner.key()),
            Direction::Reverse => &self.saved_key,
        }
    }

    /// The current entry's kind (inline value or value pointer) and bytes.
    pub(crate) fn entry(&self) -> (Kind, &[u8]) {
        debug_assert!(self.valid);
        match self.direction {
            Direction::Forward => {
                let kind = Kind::from_u8(key::kind_byte(self.inner.key())).unwrap_or(Kind::Value);
                (kind, self.inner.value())
            }
            Direction::Reverse => (self.saved_kind, &self.saved_value),
        }
    }

    pub(crate) fn status(&self) -> Result<()> {
        self.inner.status()
    }

    pub(crate) fn seek_to_first(&mut self) {
        self.direction = Direction::Forward;
        self.saved_key.clear();
        self.inner.seek_to_first();
        self.find_next_user_entry(false);
    }

    pub(crate) fn seek_to_last(&mut self) {
        self.direction = Direction::Reverse;
        self.saved_value.clear();
        self.inner.seek_to_last();
        self.find_prev_user_entry();
    }

    /// Positions at the first user key `>= target`.
    pub(crate) fn seek(&mut self, target: &[u8]) {
        self.direction = Direction::Forward;
        self.saved_key.clear();
        key::encode_into(&mut self.seek_buf, target, self.sequence, key::KIND_SEEK);
        self.inner.seek(&self.seek_buf);
        self.find_next_user_entry(false);
    }

    /// Positions at the last user key `< target`.
    pub(crate) fn seek_before(&mut self, target: &[u8]) {
        // Entries of `target` itself sort after (target, MAX_SEQUENCE), so
        // stepping back from that seek lands on smaller user keys only.
        key::encode_into(
            &mut self.seek_buf,
            target,
            key::MAX_SEQUENCE,
            key::KIND_SEEK,
        );
        self.inner.seek(&self.seek_buf);
        if self.inner.valid() {
            self.inner.prev();
        } else if self.inner.status().is_ok() {
            // Past the end: the last key is the one before `target`. (A
            // seek that failed stays failed: starting again from the end
            // would land after `target`.)
            self.inner.seek_to_last();
        }
        self.direction = Direction::Reverse;
        self.saved_value.clear();
        self.find_prev_user_entry();
    }

    pub(crate) fn next(&mut self) {
        debug_assert!(self.valid);
        if self.direction == Direction::Reverse {
            self.direction = Direction::Forward;
            // The inner iterator is just before the current key's entries:
            // step into them; saved_key holds the key to skip.
            if self.inner.valid() {
                self.inner.next();
            } else {
                self.inner.seek_to_first();
            }
            if !self.inner.valid() {
                self.valid = false;
                self.saved_key.clear();
                return;
            }
        } else {
            self.saved_key.clear();
            self.saved_key
                .extend_from_slice(key::user_key(self.inner.key()));
            self.inner.next();
        }
        self.find_next_user_entry(true);
    }

    pub(crate) fn prev(&mut self) {
        debug_assert!(self.valid);
        if self.direction == Direction::Forward {
            // Step back until the user key changes.
            self.saved_key.clear();
            self.saved_key
                .extend_from_slice(key::user_key(self.inner.key()));
            loop {
                self.inner.prev();
                if !self.inner.valid() {
                    self.valid = false;
                    self.saved_key.clear();
                    self.saved_value.clear();
                    return;
                }
                if key::user_key(self.inner.key()) < self.saved_key.as_slice() {
                    break;
                }
            }
            self.direction = Direction::Reverse;
        }
        self.find_prev_user_entry();
    }

    /// Moves forward to the next visible, live entry. With `skipping`, user
    /// keys `<= saved_key` are hidden.
    fn find_next_user_entry(&mut self, mut skipping: bool) {
        while self.inner.valid() {
            let ik = self.inner.key();
            if key::sequence(ik) <= self.sequence {
                let uk = key::user_key(ik);
                match Kind::from_u8(key::kind_byte(ik)) {
                    Some(Kind::Delete) => {
                        self.saved_key.clear();
                        self.saved_key.extend_from_slice(uk);
                        skipping = true;
                    }
                    _ => {
                        if !(skipping && uk <= self.saved_key.as_slice()) {
                            self.valid = true;
                            self.saved_key.clear();
                            return;
                        }
                    }
                }
            }
            self.inner.next();
        }
        self.saved_key.clear();
        self.valid = false;
    }

    /// Moves backward, collecting the newest visible entry of the previous
    /// user key into `saved_*`; the inner iterator ends before that key.
    fn find_prev_user_entry(&mut self) {
        let mut kind = Kind::Delete;
        while self.inner.valid() {
            let ik = self.inner.key();
            if key::sequence(ik) <= self.sequence {
                let uk = key::user_key(ik);
                if kind != Kind::Delete && uk < self.saved_key.as_slice() {
                    break; // a live entry of a later key is complete
                }
                kind = Kind::from_u8(key::kind_byte(ik)).unwrap_or(Kind::Value);
                if kind == Kind::Delete {
                    self.saved_key.clear();
                    self.saved_value.clear();
                } else {
                    self.saved_key.clear();
                    self.saved_key.extend_from_slice(uk);
                    self.saved_value.clear();
                    self.saved_value.extend_from_slice(self.inner.value());
                    self.saved_kind = kind;
                }
            }
            self.inner.prev();
        }
        // Stopped by an error, the saved entry may be an older version
        // of a key whose newer ones the failed source held: never return
        // it.
        if kind == Kind::Delete || (!self.inner.valid() && self.inner.status().is_err()) {
            self.valid = false;
            self.saved_key.clear();
            self.saved_value.clear();
            self.direction = Direction::Forward;
        } else {
            self.valid = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iter::testutil::VecIter;

    fn put(k: &str, seq: u64, v: &str) -> (Vec<u8>, Vec<u8>) {
        (key::encode(k.as_bytes(), seq, 1), v.as_bytes().to_vec())
    }
    fn del(k: &str, seq: u64) -> (Vec<u8>, Vec<u8>) {
        (key::encode(k.as_bytes(), seq, 0), vec![])
    }

    fn collect_fwd(it: &mut DbIter) -> Vec<String> {
        let mut out = vec![];
        it.seek_to_first();
        while it.valid() {
            out.push(format!(
                "{}={}",
                String::from_utf8_lossy(it.key()),
                String::from_utf8_lossy(it.entry().1)
            ));
            it.next();
        }
        out
    }

    fn collect_rev(it: &mut DbIter) -> Vec<String> {
        let mut out = vec![];
        it.seek_to_last();
        while it.valid() {
            out.push(format!(
                "{}={}",
                String::from_utf8_lossy(it.key()),
                String::from_utf8_lossy(it.entry().1)
            ));
            it.prev();
        }
        out
    }

    fn data() -> Vec<(Vec<u8>, Vec<u8>)> {
        vec![
            put("a", 1, "a1"),
            put("a", 5, "a5"),
            del("b", 4),
            put("b", 2, "b2"),
            put("c", 3, "c3"),
            del("c", 7),
            put("d", 6, "d6"),
        ]
    }

    #[test]
    fn hides_deletes_old_versions_and_future() {
        let mut it = DbIter::new(Box::new(VecIter::new(data())), 100);
        assert_eq!(collect_fwd(&mut it), ["a=a5", "d=d6"]);
        assert_eq!(collect_rev(&mut it), ["d=d6", "a=a5"]);
        let mut it = DbIter::new(Box::new(VecIter::new(data())), 3);
        assert_eq!(collect_fwd(&mut it), ["a=a1", "b=b2", "c=c3"]);
        assert_eq!(collect_rev(&mut it), ["c=c3", "b=b2", "a=a1"]);
    }

    /// A source failing mid-scan ends the scan with its error: the other
    /// sources' older versions and the keys it deleted never show (the
    /// merge stepped past a failed table, issue 50).
    #[test]
    fn a_failing_source_ends_the_scan_with_its_error() {
        use crate::iter::MergingIterator;
        let scan = |reverse: bool| {
            // The newer source holds a9, b5 (damaged) and c's delete.
            let newer =
                VecIter::damaged(vec![put("a", 9, "a9"), put("b", 5, "b5"), del("c", 6)], 1);
            let older = VecIter::new(vec![
                put("a", 1, "a1"),
                put("b", 1, "b1"),
                put("c", 1, "c1"),
                put("d", 1, "d1"),
            ]);
            let merged = MergingIterator::new(vec![Box::new(newer), Box::new(older)]);
            let mut it = DbIter::new(Box::new(merged), 100);
            let got = if reverse {
                collect_rev(&mut it)
            } else {
                collect_fwd(&mut it)
            };
            (got, it.status().is_err())
        };
        assert_eq!(scan(false), (vec!["a=a9".to_string()], true));
        assert_eq!(scan(true), (vec!["d=d1".to_string()], true));
    }

    /// `seek_before` whose seek fails must not restart from the end (it
    /// would land after the target).
    #[test]
    fn a_failed_seek_before_stays_failed() {
        use crate::iter::MergingIterator;
        let newer = VecIter::damaged(vec![put("b", 5, "b5"), put("c", 5, "c5")], 0);
        let older = VecIter::new(vec![put("a", 1, "a1"), put("e", 1, "e1")]);
        let merged = MergingIterator::new(vec![Box::new(newer), Box::new(older)]);
        let mut it = DbIter::new(Box::new(merged), 100);
        it.seek_before(b"b");
        assert!(!it.valid());
        assert!(it.status().is_err());
    }

    #[test]
    fn direction_changes_and_seeks() {
        let mut it = DbIter::new(Box::new(VecIter::new(data())), 6);
        it.seek(b"b");
        assert_eq!(it.key(), b"c");
        it.prev();
        assert_eq!(it.key(), b"a");
        it.next();
        assert_eq!(it.key(), b"c");
        it.next();
        assert_eq!(it.key(), b"d");
        it.prev();
        assert_eq!(it.key(), b"c");
        it.seek_before(b"d");
        assert_eq!(it.key(), b"c");
        it.seek_before(b"a");
        assert!(!it.valid());
        it.seek_before(b"zz");
        assert_eq!(it.key(), b"d");
        it.next();
        assert!(!it.valid());
    }
}
