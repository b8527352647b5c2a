//! The log's state file, `DIR/raft/log/state` (`docs/format/raft-log.md`,
//! "State file"): the committed id openraft saved last, and the last entry
//! the log knows it synced. Two 64-byte slots written in turn, each with
//! a sequence number and a CRC-32C; the valid slot with the higher number
//! counts, so a torn write of one leaves the other.
//!
//! A slot is written (`pwrite`, not synced) after each append's sync and
//! at each `save_committed`: it survives a killed process (the page cache
//! holds it), so a restarted node re-applies every committed entry at
//! once, before it hears from a leader. Lost with the machine, it only
//! costs that (the node waits for a leader's commit, as before) and the
//! torn-tail rule falls back to what reached the disk: since a slot is
//! written only after the sync it reports, whatever slot reached the disk
//! names entries that did.
//!
//! The synced index is lowered (written and synced) before a truncation
//! removes entries it names.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use openraft::{CommittedLeaderId, LogId};

use super::NodeId;

/// Its name in the log's directory.
pub const FILE: &str = "state";
const MAGIC: &[u8; 8] = b"SLRSTAT1";
pub const SLOT_BYTES: u64 = 64;
/// Bytes of a slot the CRC covers.
const CHECKED: usize = 48;

/// What the state file holds.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct State {
    pub committed: Option<LogId<NodeId>>,
    /// Entries up to this index are synced.
    pub synced: Option<u64>,
}

pub struct StateFile {
    path: PathBuf,
    file: File,
    seq: u64,
    state: State,
}

fn err(p: &Path, e: std::io::Error) -> String {
    format!("{}: {e}", p.display())
}

fn plus_one(i: Option<u64>) -> u64 {
    i.map_or(0, |i| i + 1)
}

/// The bytes of a slot.
pub fn encode_slot(seq: u64, s: &State) -> [u8; SLOT_BYTES as usize] {
    let mut b = [0u8; SLOT_BYTES as usize];
    b[..8].copy_from_slice(MAGIC);
    b[8..16].copy_from_slice(&seq.to_le_bytes());
    let (term, node) = s
        .committed
        .map_or((0, 0), |c| (c.leader_id.term, c.leader_id.node_id));
    b[16..24].copy_from_slice(&plus_one(s.committed.map(|c| c.index)).to_le_bytes());
    b[24..32].copy_from_slice(&term.to_le_bytes());
    b[32..40].copy_from_slice(&node.to_le_bytes());
    b[40..48].copy_from_slice(&plus_one(s.synced).to_le_bytes());
    let crc = crc32c::crc32c(&b[..CHECKED]);
    b[48..52].copy_from_slice(&crc.to_le_bytes());
    b
}

/// A slot's sequence number and state, if it checks.
fn decode_slot(b: &[u8]) -> Option<(u64, State)> {
    if b.len() < SLOT_BYTES as usize || &b[..8] != MAGIC {
        return None;
    }
    let crc = u32::from_le_bytes(b[48..52].try_into().ok()?);
    if crc32c::crc32c(&b[..CHECKED]) != crc {
        return None;
    }
    let u = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or_default());
    let committed = u(16).checked_sub(1).map(|index| LogId {
        leader_id: CommittedLeaderId::new(u(24), u(32)),
        index,
    });
    Some((
        u(8),
        State {
            committed,
            synced: u(40).checked_sub(1),
        },
    ))
}

impl StateFile {
    /// Opens (creating) the state file at `path`. Slots that do not check
    /// (a torn write) are passed over; none: an empty state.
    pub fn open(path: &Path) -> Result<StateFile, String> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| err(path, e))?;
        let mut raw = vec![0u8; 2 * SLOT_BYTES as usize];
        let len = file.metadata().map_err(|e| err(path, e))?.len() as usize;
        let n = len.min(raw.len());
        file.read_exact_at(&mut raw[..n], 0)
            .map_err(|e| err(path, e))?;
        let best = raw
            .chunks(SLOT_BYTES as usize)
            .filter_map(decode_slot)
            .max_by_key(|(seq, _)| *seq);
        let (seq, state) = best.unwrap_or_default();
        Ok(StateFile {
            path: path.to_path_buf(),
            file,
            seq,
            state,
        })
    }

    pub fn state(&self) -> State {
        self.state
    }

    fn write(&mut self, s: State) -> Result<(), String> {
        let seq = self.seq + 1;
        let at = (seq % 2) * SLOT_BYTES;
        self.file
            .write_all_at(&encode_slot(seq, &s), at)
            .map_err(|e| err(&self.path, e))?;
        self.seq = seq;
        self.state = s;
        Ok(())
    }

    /// Notes the committed id (unsynced).
    pub fn set_committed(&mut self, c: Option<LogId<NodeId>>) -> Result<(), String> {
        let s = State {
            committed: c,
            ..self.state
        };
        self.write(s)
    }

    /// Notes that entries up to `last` are synced (unsynced itself).
    pub fn set_synced(&mut self, last: u64) -> Result<(), String> {
        if self.state.synced.is_some_and(|s| s >= last) {
            return Ok(());
        }
        let s = State {
            synced: Some(last),
            ..self.state
        };
        self.write(s)
    }

    /// Before entries from `since` on are cut: the synced index is lowered
    /// below them, synced, so that no restart takes the cut for damage.
    pub fn lower_synced(&mut self, since: u64) -> Result<(), String> {
        if self.state.synced.is_none_or(|s| s < since) {
            return Ok(());
        }
        let s = State {
            synced: since.checked_sub(1),
            ..self.state
        };
        self.write(s)?;
        self.file.sync_data().map_err(|e| err(&self.path, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(term: u64, node: u64, index: u64) -> LogId<NodeId> {
        LogId {
            leader_id: CommittedLeaderId::new(term, node),
            index,
        }
    }

    /// The worked example of `docs/format/raft-log.md`, "State file".
    #[test]
    fn a_slot_encodes_as_documented() {
        let s = State {
            committed: Some(id(3, 2, 41)),
            synced: Some(43),
        };
        let b = encode_slot(7, &s);
        assert_eq!(&b[..8], b"SLRSTAT1");
        assert_eq!(b[8], 7);
        assert_eq!(b[16], 42);
        assert_eq!(b[24], 3);
        assert_eq!(b[32], 2);
        assert_eq!(b[40], 44);
        assert_eq!(
            u32::from_le_bytes(b[48..52].try_into().unwrap()),
            crc32c::crc32c(&b[..48])
        );
        assert!(b[52..].iter().all(|&x| x == 0));
        assert_eq!(decode_slot(&b), Some((7, s)));
    }

    /// The state survives a reopen; a torn write of the newer slot leaves
    /// the older one; lowering the synced index holds across a reopen.
    #[test]
    fn the_newest_whole_slot_counts() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("state");
        let mut st = StateFile::open(&p).unwrap();
        assert_eq!(st.state(), State::default());
        st.set_synced(10).unwrap();
        st.set_committed(Some(id(1, 1, 9))).unwrap();
        st.set_synced(12).unwrap();
        let want = State {
            committed: Some(id(1, 1, 9)),
            synced: Some(12),
        };
        assert_eq!(StateFile::open(&p).unwrap().state(), want);
        // Tear the newest slot (seq 3, at offset 64): the one before counts.
        let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        f.write_all_at(&[0xff; 8], SLOT_BYTES + 20).unwrap();
        let mut st = StateFile::open(&p).unwrap();
        assert_eq!(
            st.state(),
            State {
                committed: Some(id(1, 1, 9)),
                synced: Some(10),
            }
        );
        st.lower_synced(5).unwrap();
        assert_eq!(StateFile::open(&p).unwrap().state().synced, Some(4));
        // Both slots torn: nothing known.
        f.write_all_at(&[0u8; 128], 0).unwrap();
        assert_eq!(StateFile::open(&p).unwrap().state(), State::default());
    }
}
