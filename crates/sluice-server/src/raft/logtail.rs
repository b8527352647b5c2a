//! The newest entries of the Raft log, kept in memory as they were
//! appended, so that the reads that follow an append at once (the
//! leader's replication stream to each follower, and every node's apply)
//! take them from here instead of reading the record back from its
//! segment and decoding it. An entry's requests are one shared buffer
//! ([`super::batch::Batch`]), so a read here copies none of them.
//!
//! The tail always ends at the log's last entry: appends add to it, a
//! truncation cuts it where it cuts the log, a purge drops what it
//! drops, and an append that does not follow it starts it afresh. It
//! holds at most [`TAIL_BYTES`] of records (as the log encodes them),
//! dropping its oldest entries first; a read that reaches before its
//! first entry goes to the log's files whole.

use std::collections::VecDeque;

use super::TypeConfig;

type Entry = openraft::Entry<TypeConfig>;

/// Most bytes of records the tail holds: at pipelined writes of 1 KiB
/// values (16 a request, 50 clients) a leader appends some 10-20 MB a
/// second, so a follower less than about half a second behind reads from
/// memory.
pub const TAIL_BYTES: usize = 8 << 20;

#[derive(Default)]
pub struct LogTail {
    /// Entries with consecutive indexes, each with its record's size.
    entries: VecDeque<(Entry, usize)>,
    bytes: usize,
}

impl LogTail {
    /// The index of the first entry held.
    fn first(&self) -> Option<u64> {
        self.entries.front().map(|(e, _)| e.log_id.index)
    }

    /// The index after the last entry held.
    fn end(&self) -> Option<u64> {
        self.entries.back().map(|(e, _)| e.log_id.index + 1)
    }

    /// Adds an entry the log just wrote after its last; `bytes` is its
    /// record's size.
    pub fn push(&mut self, entry: Entry, bytes: usize) {
        if self.end().is_some_and(|end| end != entry.log_id.index) {
            self.clear();
        }
        self.bytes += bytes;
        self.entries.push_back((entry, bytes));
        while self.bytes > TAIL_BYTES && self.entries.len() > 1 {
            self.pop_front();
        }
    }

    /// The log was cut at `since`: entries from it on are gone.
    pub fn truncate(&mut self, since: u64) {
        while self.end().is_some_and(|end| end > since) {
            let (_, b) = self.entries.pop_back().expect("not empty");
            self.bytes -= b;
        }
    }

    /// The log was purged up to `upto`, inclusive.
    pub fn purge(&mut self, upto: u64) {
        while self.first().is_some_and(|f| f <= upto) {
            self.pop_front();
        }
    }

    pub fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }

    fn pop_front(&mut self) {
        if let Some((_, b)) = self.entries.pop_front() {
            self.bytes -= b;
        }
    }

    /// Entries `start..end` (`end` past the log's last: up to it) when the
    /// tail holds every one of them that the log holds; `None` when the
    /// range begins before the tail's first entry.
    pub fn get(&self, start: u64, end: u64) -> Option<Vec<Entry>> {
        let (first, last_end) = (self.first()?, self.end()?);
        if start < first {
            return None;
        }
        let lo = start.min(last_end);
        let hi = end.min(last_end).max(lo);
        Some(
            self.entries
                .range((lo - first) as usize..(hi - first) as usize)
                .map(|(e, _)| e.clone())
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::{CommittedLeaderId, EntryPayload, LogId};

    fn entry(index: u64) -> Entry {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Blank,
        }
    }

    fn indexes(v: Option<Vec<Entry>>) -> Option<Vec<u64>> {
        v.map(|v| v.iter().map(|e| e.log_id.index).collect())
    }

    #[test]
    fn the_tail_follows_appends_cuts_and_purges() {
        let mut t = LogTail::default();
        assert_eq!(indexes(t.get(0, 10)), None, "empty");
        for i in 5..10 {
            t.push(entry(i), 100);
        }
        assert_eq!(indexes(t.get(5, 10)), Some(vec![5, 6, 7, 8, 9]));
        assert_eq!(indexes(t.get(7, u64::MAX)), Some(vec![7, 8, 9]));
        assert_eq!(indexes(t.get(4, 8)), None, "begins before the tail");
        assert_eq!(indexes(t.get(10, 20)), Some(vec![]), "past the last");
        assert_eq!(indexes(t.get(15, 20)), Some(vec![]), "far past the last");
        assert_eq!(indexes(t.get(8, 8)), Some(vec![]), "an empty range");
        t.truncate(8);
        assert_eq!(indexes(t.get(5, 20)), Some(vec![5, 6, 7]));
        t.push(entry(8), 100);
        assert_eq!(indexes(t.get(6, 20)), Some(vec![6, 7, 8]));
        t.purge(6);
        assert_eq!(indexes(t.get(6, 20)), None);
        assert_eq!(indexes(t.get(7, 20)), Some(vec![7, 8]));
        // An append that does not follow the tail (after a snapshot
        // install) starts it afresh.
        t.push(entry(100), 100);
        assert_eq!(indexes(t.get(7, 200)), None);
        assert_eq!(indexes(t.get(100, 200)), Some(vec![100]));
        assert_eq!(t.bytes, 100);
        t.truncate(0);
        assert_eq!(indexes(t.get(100, 200)), None);
        assert_eq!(t.bytes, 0);
    }

    #[test]
    fn the_tail_keeps_its_newest_bytes() {
        let mut t = LogTail::default();
        let each = TAIL_BYTES / 4;
        for i in 0..10 {
            t.push(entry(i), each);
        }
        assert_eq!(indexes(t.get(6, 10)), Some(vec![6, 7, 8, 9]));
        assert_eq!(indexes(t.get(5, 10)), None);
        // One entry larger than the bound is still held: it is the last.
        t.push(entry(10), TAIL_BYTES * 2);
        assert_eq!(indexes(t.get(10, 11)), Some(vec![10]));
        assert_eq!(t.bytes, TAIL_BYTES * 2);
    }
}
