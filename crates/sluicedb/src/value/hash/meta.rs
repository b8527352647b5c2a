//! What the manifest records of the hash layout (`docs/format/manifest.md`,
//! tags 12-14 and 17): the files of every segment group and of the cold
//! log, and the splits that made the groups past the first ones.

use crate::coding::{put_u32, put_u64, Reader};
use crate::version::tag;

/// The group id of the hash layout's cold log in manifest edits.
pub(crate) const COLD_GROUP: u32 = u32::MAX;

/// The hash layout's state in a version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct HashMeta {
    /// Files of each group, oldest first; writes go to the last. Empty
    /// until the hash layout is first opened.
    pub(crate) groups: Vec<Vec<u64>>,
    /// Files of the cold log (HashKV, USENIX ATC '18, §3.4), oldest first; edits name it
    /// as group [`COLD_GROUP`].
    pub(crate) cold: Vec<u64>,
    /// The group each group past the roots was split from, in the order
    /// of the splits: group `roots + i` was split from `parents[i]`.
    pub(crate) parents: Vec<u32>,
}

/// Where a group sits in the elastic hash layout (`docs/design.md`, "Hash
/// layout: elastic groups"): a key with hash `h` belongs to the group whose
/// `root` is `h mod roots` and whose `pattern` equals the low `depth` bits
/// of `h / roots`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GroupShape {
    pub(crate) root: u32,
    pub(crate) depth: u32,
    pub(crate) pattern: u64,
}

impl GroupShape {
    /// The shapes of `roots` root groups, none split yet.
    pub(crate) fn roots(roots: usize) -> Vec<GroupShape> {
        (0..roots as u32)
            .map(|root| GroupShape {
                root,
                depth: 0,
                pattern: 0,
            })
            .collect()
    }

    /// Splits this group by its next hash bit: it keeps the keys whose bit
    /// is 0, the returned child takes those whose bit is 1.
    pub(crate) fn split(&mut self) -> GroupShape {
        let child = GroupShape {
            root: self.root,
            depth: self.depth + 1,
            pattern: self.pattern | 1 << self.depth,
        };
        self.depth += 1;
        child
    }
}

/// Deepest a group may be split: 2^24 groups per root is far past any
/// store this layout is meant for, and keeps patterns and directories small.
pub(crate) const MAX_SPLIT_DEPTH: u32 = 24;

/// Most root groups a manifest may record
/// ([`MAX_HASH_GROUPS`](crate::options::MAX_HASH_GROUPS)).
pub(crate) const MAX_ROOT_GROUPS: u32 = crate::options::MAX_HASH_GROUPS;

/// A change to [`HashMeta`], part of a manifest record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct HashEdit {
    /// Number of segment groups (set once, when the store is created).
    pub(crate) groups: Option<u32>,
    /// Files that became part of a segment group: (group, file).
    pub(crate) added: Vec<(u32, u64)>,
    /// Files that left their segment group: (group, file).
    pub(crate) dropped: Vec<(u32, u64)>,
    /// Group splits, in order: (parent, child). The child is the next
    /// group id; the parent keeps the keys whose next hash bit is 0.
    pub(crate) splits: Vec<(u32, u32)>,
    /// Files GC handed from their group to the cold log whole, records in
    /// place: (group, file). The cold log lists them in file order.
    pub(crate) to_cold: Vec<(u32, u64)>,
}

impl HashMeta {
    /// The file list of group id `g` (the cold log for [`COLD_GROUP`]).
    fn list_mut(&mut self, g: u32) -> Result<&mut Vec<u64>, String> {
        if g == COLD_GROUP {
            return Ok(&mut self.cold);
        }
        self.groups
            .get_mut(g as usize)
            .ok_or_else(|| format!("hash group {g} out of range"))
    }

    /// True if a group or the cold log lists `file`.
    pub(crate) fn lists(&self, file: u64) -> bool {
        self.groups
            .iter()
            .chain(std::iter::once(&self.cold))
            .any(|files| files.contains(&file))
    }

    /// Number of root groups, the ones made when the store was created.
    pub(crate) fn roots(&self) -> usize {
        self.groups.len() - self.parents.len()
    }

    /// The shape of every group, from the roots and the splits in order.
    pub(crate) fn shapes(&self) -> Vec<GroupShape> {
        let mut shapes = GroupShape::roots(self.roots());
        for &parent in &self.parents {
            let child = shapes[parent as usize].split();
            shapes.push(child);
        }
        shapes
    }

    pub(crate) fn apply(&self, edit: &HashEdit) -> Result<HashMeta, String> {
        let mut h = self.clone();
        if let Some(n) = edit.groups {
            if n > MAX_ROOT_GROUPS {
                return Err(format!(
                    "hash layout of {n} root groups, more than {MAX_ROOT_GROUPS}"
                ));
            }
            if !h.groups.is_empty() && h.roots() != n as usize {
                return Err(format!(
                    "hash layout has {} root groups, an edit says {n}",
                    h.roots()
                ));
            }
            h.groups.resize(n as usize + h.parents.len(), Vec::new());
        }
        let mut shapes = if edit.splits.is_empty() {
            Vec::new()
        } else {
            h.shapes()
        };
        for &(parent, child) in &edit.splits {
            if child as usize != h.groups.len() || parent >= child {
                return Err(format!(
                    "hash group {child} split from {parent}, but the next group is {}",
                    h.groups.len()
                ));
            }
            let depth = shapes[parent as usize].depth;
            if depth >= MAX_SPLIT_DEPTH {
                return Err(format!("hash group {parent} split past depth {depth}"));
            }
            let shape = shapes[parent as usize].split();
            shapes.push(shape);
            h.groups.push(Vec::new());
            h.parents.push(parent);
        }
        for &(g, file) in &edit.dropped {
            let files = h.list_mut(g)?;
            let before = files.len();
            files.retain(|&f| f != file);
            if files.len() == before {
                return Err(format!("file {file} is not in hash group {g}"));
            }
        }
        for &(g, file) in &edit.to_cold {
            let files = h.list_mut(g)?;
            let before = files.len();
            files.retain(|&f| f != file);
            if g == COLD_GROUP || files.len() == before {
                return Err(format!(
                    "file {file} handed to the cold log is not in hash group {g}"
                ));
            }
            match h.cold.binary_search(&file) {
                Ok(_) => return Err(format!("file {file} is in the cold log already")),
                Err(at) => h.cold.insert(at, file),
            }
        }
        for &(g, file) in &edit.added {
            let files = h.list_mut(g)?;
            if files.last().is_some_and(|&l| l >= file) {
                return Err(format!("file {file} added to hash group {g} out of order"));
            }
            files.push(file);
        }
        Ok(h)
    }

    /// The edit that recreates this state from nothing (manifest roll).
    pub(crate) fn snapshot(&self) -> HashEdit {
        let mut e = HashEdit::default();
        if !self.groups.is_empty() {
            e.groups = Some(self.roots() as u32);
        }
        let roots = self.roots() as u32;
        e.splits = (self.parents.iter().enumerate())
            .map(|(i, &p)| (p, roots + i as u32))
            .collect();
        for (g, files) in self.groups.iter().enumerate() {
            e.added.extend(files.iter().map(|&f| (g as u32, f)));
        }
        e.added.extend(self.cold.iter().map(|&f| (COLD_GROUP, f)));
        e
    }
}

impl HashEdit {
    pub(crate) fn encode(&self, field: &mut dyn FnMut(u32, &[u8])) {
        if let Some(g) = self.groups {
            field(tag::HASH_GROUPS, &g.to_le_bytes());
        }
        for &(parent, child) in &self.splits {
            let mut p = Vec::with_capacity(8);
            put_u32(&mut p, parent);
            put_u32(&mut p, child);
            field(tag::HASH_GROUP_SPLIT, &p);
        }
        for (t, list) in [
            (tag::HASH_FILE_DROPPED, &self.dropped),
            (tag::HASH_FILE_TO_COLD, &self.to_cold),
            (tag::HASH_FILE_ADDED, &self.added),
        ] {
            for &(group, file) in list {
                let mut p = Vec::with_capacity(12);
                put_u32(&mut p, group);
                put_u64(&mut p, file);
                field(t, &p);
            }
        }
    }

    /// Decodes a field of one of its tags; `None` for other tags.
    pub(crate) fn decode(&mut self, t: u32, payload: &[u8]) -> Option<Result<(), ()>> {
        let mut p = Reader::new(payload);
        let ok = match t {
            tag::HASH_GROUPS => p
                .u32()
                .filter(|_| p.is_empty())
                .map(|g| self.groups = Some(g)),
            tag::HASH_GROUP_SPLIT => (|| {
                let parent = p.u32()?;
                let child = p.u32().filter(|_| p.is_empty())?;
                self.splits.push((parent, child));
                Some(())
            })(),
            tag::HASH_FILE_ADDED | tag::HASH_FILE_DROPPED | tag::HASH_FILE_TO_COLD => (|| {
                let group = p.u32()?;
                let file = p.u64().filter(|_| p.is_empty())?;
                let list = match t {
                    tag::HASH_FILE_ADDED => &mut self.added,
                    tag::HASH_FILE_TO_COLD => &mut self.to_cold,
                    _ => &mut self.dropped,
                };
                list.push((group, file));
                Some(())
            })(
            ),
            _ => return None,
        };
        Some(ok.ok_or(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fuzzing found it: a manifest record (checksum intact) naming
    /// 134,217,727 root groups made recovery allocate an empty file list
    /// for each, 3 GiB, and u32::MAX of them more than the machine has,
    /// instead of refusing the record.
    #[test]
    fn a_manifest_naming_too_many_root_groups_is_refused_not_allocated() {
        for n in [0x07ff_ffff, u32::MAX] {
            let edit = HashEdit {
                groups: Some(n),
                ..HashEdit::default()
            };
            let e = HashMeta::default().apply(&edit).unwrap_err();
            assert!(e.contains("root groups"), "{e}");
        }
        let edit = HashEdit {
            groups: Some(MAX_ROOT_GROUPS),
            ..HashEdit::default()
        };
        assert_eq!(HashMeta::default().apply(&edit).unwrap().roots(), 1 << 20);
    }
}
