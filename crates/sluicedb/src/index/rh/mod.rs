//! The Radix-Hash-Tree (RH-Tree) of LightKV (ICDE, §III-B..E): a prefix
//! tree over key bytes whose leaves are hash leaves ([`leaf::HashLeaf`]).
//!
//! Each leaf is a *partition*: the keys whose bytes (padded with zeros past
//! their end) start with the partition's prefix and whose next `width`
//! bytes, read as a big-endian number (the *digit*), lie in `lo..=hi`
//! ([`Span`]). Partitions are contiguous key ranges, and the tree keeps them
//! in key order.
//!
//! Growth (§III-C, §III-D), when a leaf is full:
//! - **normal split**: the span is cut at the median of its entries'
//!   digits, each side keeping at least `t_normal` digit values; entries
//!   move by their cache slot, without reading keys;
//! - **level split**: when the span is too narrow for that (or all entries
//!   share one digit), the digit widens by one byte (`lo·256 ..
//!   hi·256 + 255`), up to the four bytes a cache slot holds; a span of one
//!   four-byte digit becomes an inner node of its own, four bytes deeper,
//!   and only then are the entries' cache slots refilled from their keys;
//! - **linked leaves**: once `max_leaf_nodes` partitions exist, a full leaf
//!   gets a new empty top leaf in front of it; lookups go newest first.
//!
//! Departures from the paper, with reasons, are in `docs/design.md`, "The
//! RH-Tree". The leaf format is `docs/format/rh-leaf.md`.

pub(crate) mod leaf;

use leaf::{signature, Entry, HashLeaf};
use xxhash_rust::xxh3::xxh3_64;

/// Named defaults (the paper's MAX_LEAF_NODES and T_normal; leaves of 256
/// buckets, 1024 slots, plus 5% extra buckets).
pub(crate) const DEFAULT_LEAF_BUCKETS: usize = 256;
pub(crate) const DEFAULT_MAX_LEAF_NODES: usize = 2048;
pub(crate) const DEFAULT_T_NORMAL: u32 = 4;
pub(crate) const DEFAULT_INITIAL_LEAVES: u32 = 2;
/// A partition's prefix grows no deeper (keys equal up to here, padded,
/// share a chain of linked leaves instead).
const MAX_PREFIX_BYTES: usize = 256;

/// The tree's shape parameters.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RhParams {
    pub(crate) leaf_buckets: usize,
    pub(crate) extra_buckets: usize,
    pub(crate) max_leaf_nodes: usize,
    pub(crate) t_normal: u32,
    pub(crate) initial_leaves: u32,
}

impl Default for RhParams {
    fn default() -> Self {
        RhParams {
            leaf_buckets: DEFAULT_LEAF_BUCKETS,
            extra_buckets: DEFAULT_LEAF_BUCKETS.div_ceil(20),
            max_leaf_nodes: DEFAULT_MAX_LEAF_NODES,
            t_normal: DEFAULT_T_NORMAL,
            initial_leaves: DEFAULT_INITIAL_LEAVES,
        }
    }
}

/// The keys a partition maps (see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Span {
    pub(crate) prefix: Vec<u8>,
    pub(crate) width: u8,
    pub(crate) lo: u32,
    pub(crate) hi: u32,
}

/// Four bytes of `key` from `at`, padded with zeros, big-endian.
fn bytes4(key: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    for (i, x) in b.iter_mut().enumerate() {
        *x = key.get(at + i).copied().unwrap_or(0);
    }
    u32::from_be_bytes(b)
}

impl Span {
    /// The cache slot of `key` in this partition: four bytes from the
    /// digit's position.
    pub(crate) fn cache_of(&self, key: &[u8]) -> u32 {
        bytes4(key, self.prefix.len())
    }

    fn shift(&self) -> u32 {
        8 * (4 - u32::from(self.width))
    }

    /// The digit a cache slot holds.
    pub(crate) fn digit(&self, cache: u32) -> u32 {
        cache >> self.shift()
    }

    /// The span's start as a four-byte number (its place in its inner node).
    fn lo32(&self) -> u32 {
        self.lo << self.shift()
    }

    /// The smallest key in the partition.
    pub(crate) fn lower_bound(&self) -> Vec<u8> {
        let mut k = self.prefix.clone();
        k.extend_from_slice(&self.lo32().to_be_bytes());
        while k.last() == Some(&0) {
            k.pop();
        }
        k
    }

    /// True when `key` belongs here.
    pub(crate) fn contains(&self, key: &[u8]) -> bool {
        let padded = |i: usize| key.get(i).copied().unwrap_or(0);
        (0..self.prefix.len()).all(|i| padded(i) == self.prefix[i])
            && (self.lo..=self.hi).contains(&self.digit(self.cache_of(key)))
    }
}

/// Partition number.
pub(crate) type LeafId = usize;

#[derive(Debug)]
enum Child {
    Leaf(LeafId),
    Inner(Box<Inner>),
}

/// An inner node: its children cover all four-byte values at `depth`,
/// each from its start (sorted) to the next one's.
#[derive(Debug)]
struct Inner {
    depth: usize,
    children: Vec<(u32, Child)>,
}

impl Inner {
    /// The inner node holding leaf `id`.
    fn holding(&mut self, id: LeafId) -> Option<&mut Inner> {
        if self
            .children
            .iter()
            .any(|(_, c)| matches!(c, Child::Leaf(l) if *l == id))
        {
            return Some(self);
        }
        self.children.iter_mut().find_map(|(_, c)| match c {
            Child::Inner(inner) => inner.holding(id),
            Child::Leaf(_) => None,
        })
    }

    fn in_order(&self, out: &mut Vec<LeafId>) {
        for (_, c) in &self.children {
            match c {
                Child::Leaf(id) => out.push(*id),
                Child::Inner(inner) => inner.in_order(out),
            }
        }
    }
}

/// A partition: its span and its leaves, newest (the top leaf) first.
#[derive(Debug)]
struct Partition {
    span: Span,
    chain: Vec<HashLeaf>,
}

/// How the tree grew.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct RhStats {
    pub(crate) normal_splits: u64,
    pub(crate) level_splits: u64,
    /// Level splits that made an inner node (and refilled cache slots).
    pub(crate) new_inner_nodes: u64,
    pub(crate) links: u64,
}

/// The RH-Tree over offsets; the caller keeps the keys (in the write
/// buffer or tables) and passes `key_of` to read the key at an offset.
/// Not thread-safe on its own: the owner serializes writers.
#[derive(Debug)]
pub(crate) struct RhTree {
    params: RhParams,
    root: Inner,
    parts: Vec<Partition>,
    hash: fn(&[u8]) -> u64,
    stats: RhStats,
}

impl RhTree {
    /// A tree of `params.initial_leaves` partitions splitting the first
    /// byte evenly (§III-C).
    pub(crate) fn new(params: RhParams) -> RhTree {
        Self::with_hash(params, xxh3_64)
    }

    /// Like [`RhTree::new`] with another key hash (tests force signature
    /// collisions with it).
    pub(crate) fn with_hash(params: RhParams, hash: fn(&[u8]) -> u64) -> RhTree {
        let n = params.initial_leaves.clamp(1, 256);
        let mut tree = RhTree {
            params,
            root: Inner {
                depth: 0,
                children: Vec::new(),
            },
            parts: Vec::new(),
            hash,
            stats: RhStats::default(),
        };
        for i in 0..n {
            let span = Span {
                prefix: Vec::new(),
                width: 1,
                lo: 256 * i / n,
                hi: 256 * (i + 1) / n - 1,
            };
            tree.root
                .children
                .push((span.lo32(), Child::Leaf(i as LeafId)));
            tree.parts.push(Partition {
                span,
                chain: vec![tree.new_leaf()],
            });
        }
        tree
    }

    /// Appends the whole tree to a clean shutdown's image
    /// (`docs/format/lightkv-image.md`, "Tree").
    pub(crate) fn encode_into(&self, out: &mut Vec<u8>) {
        use crate::coding::{put_bytes, put_u32, put_u64};
        let st = self.stats;
        for x in [
            st.normal_splits,
            st.level_splits,
            st.new_inner_nodes,
            st.links,
        ] {
            put_u64(out, x);
        }
        put_u32(out, self.parts.len() as u32);
        for p in &self.parts {
            put_bytes(out, &p.span.prefix);
            out.push(p.span.width);
            put_u32(out, p.span.lo);
            put_u32(out, p.span.hi);
            put_u32(out, p.chain.len() as u32);
            for leaf in &p.chain {
                put_bytes(out, &leaf.encode());
            }
        }
        fn inner(node: &Inner, out: &mut Vec<u8>) {
            put_u32(out, node.depth as u32);
            put_u32(out, node.children.len() as u32);
            for (lo, c) in &node.children {
                put_u32(out, *lo);
                match c {
                    Child::Leaf(id) => {
                        out.push(0);
                        put_u32(out, *id as u32);
                    }
                    Child::Inner(i) => {
                        out.push(1);
                        inner(i, out);
                    }
                }
            }
        }
        inner(&self.root, out);
    }

    /// A tree as [`RhTree::encode_into`] wrote it, under `params` (whose
    /// leaf shape must be the image's); `None` when it does not decode or
    /// does not hold together (every partition under exactly one leaf
    /// child, children sorted, inner nodes deeper than their parents).
    pub(crate) fn decode(params: RhParams, r: &mut crate::coding::Reader<'_>) -> Option<RhTree> {
        let stats = RhStats {
            normal_splits: r.u64()?,
            level_splits: r.u64()?,
            new_inner_nodes: r.u64()?,
            links: r.u64()?,
        };
        let n = r.u32()? as usize;
        let mut parts = Vec::new();
        for _ in 0..n {
            let prefix = r.len_prefixed()?.to_vec();
            let span = Span {
                prefix,
                width: r.u8()?,
                lo: r.u32()?,
                hi: r.u32()?,
            };
            if !(1..=4).contains(&span.width)
                || span.lo > span.hi
                || (span.width < 4 && span.hi >> (8 * u32::from(span.width)) != 0)
            {
                return None;
            }
            let leaves = r.u32()? as usize;
            if leaves == 0 {
                return None;
            }
            let mut chain = Vec::new();
            for _ in 0..leaves {
                let leaf = HashLeaf::decode(r.len_prefixed()?).ok()?;
                if leaf.buckets() != (params.leaf_buckets, params.extra_buckets) {
                    return None;
                }
                chain.push(leaf);
            }
            parts.push(Partition { span, chain });
        }
        let mut seen = vec![false; n];
        fn inner(
            r: &mut crate::coding::Reader<'_>,
            seen: &mut [bool],
            min_depth: usize,
        ) -> Option<Inner> {
            let depth = r.u32()? as usize;
            if depth < min_depth || depth > MAX_PREFIX_BYTES + 4 {
                return None;
            }
            let count = r.u32()? as usize;
            let mut children: Vec<(u32, Child)> = Vec::new();
            for _ in 0..count {
                let lo = r.u32()?;
                if children.last().is_some_and(|(prev, _)| *prev >= lo) {
                    return None;
                }
                let child = match r.u8()? {
                    0 => {
                        let id = r.u32()? as usize;
                        if std::mem::replace(seen.get_mut(id)?, true) {
                            return None;
                        }
                        Child::Leaf(id)
                    }
                    1 => Child::Inner(Box::new(inner(r, seen, depth + 1)?)),
                    _ => return None,
                };
                children.push((lo, child));
            }
            // Lookups take the last child starting at or below a key.
            (children.first()?.0 == 0).then_some(Inner { depth, children })
        }
        let root = inner(r, &mut seen, 0)?;
        if root.depth != 0 || !seen.iter().all(|&s| s) {
            return None;
        }
        Some(RhTree {
            params,
            root,
            parts,
            hash: xxh3_64,
            stats,
        })
    }

    fn new_leaf(&self) -> HashLeaf {
        HashLeaf::new(self.params.leaf_buckets, self.params.extra_buckets)
    }

    /// How the tree grew so far.
    pub(crate) fn stats(&self) -> RhStats {
        self.stats
    }

    /// Partitions (top leaves).
    pub(crate) fn partitions(&self) -> usize {
        self.parts.len()
    }

    /// Partition `id`'s span and its number of leaves.
    pub(crate) fn partition(&self, id: LeafId) -> (&Span, usize) {
        (&self.parts[id].span, self.parts[id].chain.len())
    }

    /// Partitions in key order.
    pub(crate) fn in_key_order(&self) -> Vec<LeafId> {
        let mut out = Vec::with_capacity(self.parts.len());
        self.root.in_order(&mut out);
        out
    }

    /// The partition `key` belongs to.
    pub(crate) fn partition_of(&self, key: &[u8]) -> LeafId {
        let mut node = &self.root;
        loop {
            let x = bytes4(key, node.depth);
            let i = node.children.partition_point(|(lo, _)| *lo <= x) - 1;
            match &node.children[i].1 {
                Child::Leaf(id) => return *id,
                Child::Inner(inner) => node = inner,
            }
        }
    }

    /// The newest offset recorded for `key`, searching its partition's
    /// leaves newest first and confirming each signature match with
    /// `key_of` (§IV, Get).
    pub(crate) fn get(&self, key: &[u8], mut key_of: impl FnMut(u64) -> Vec<u8>) -> Option<u64> {
        let sig = signature((self.hash)(key));
        let part = &self.parts[self.partition_of(key)];
        part.chain
            .iter()
            .find_map(|leaf| leaf.candidates(sig).find(|&o| key_of(o) == key))
    }

    /// The offset leaf `depth` of partition `id`'s chain (0: the top leaf)
    /// holds for `key`, each signature match confirmed by `is_key(offset)`
    /// (the record there is `key`'s).
    pub(crate) fn get_in(
        &self,
        id: LeafId,
        depth: usize,
        key: &[u8],
        mut is_key: impl FnMut(u64) -> bool,
    ) -> Option<u64> {
        let sig = signature((self.hash)(key));
        self.parts[id]
            .chain
            .get(depth)?
            .candidates(sig)
            .find(|&o| is_key(o))
    }

    /// The offsets leaf `depth` of partition `id`'s chain holds.
    pub(crate) fn offsets_in(&self, id: LeafId, depth: usize) -> Vec<u64> {
        self.parts[id].chain[depth]
            .entries()
            .map(|e| e.offset)
            .collect()
    }

    /// Entries in partition `id`'s top leaf, and the slots it has.
    pub(crate) fn top_fill(&self, id: LeafId) -> (usize, usize) {
        let top = &self.parts[id].chain[0];
        (top.len(), top.capacity())
    }

    /// Puts a new empty top leaf in front of partition `id`'s chain, so its
    /// old top leaf can be flushed (§III-D).
    pub(crate) fn link(&mut self, id: LeafId) {
        let leaf = self.new_leaf();
        self.parts[id].chain.insert(0, leaf);
        self.stats.links += 1;
    }

    /// Drops the oldest leaf of partition `id`'s chain once it is flushed;
    /// the top leaf is never dropped. False when the chain has one leaf.
    pub(crate) fn drop_oldest(&mut self, id: LeafId) -> bool {
        let chain = &mut self.parts[id].chain;
        if chain.len() < 2 {
            return false;
        }
        chain.pop();
        true
    }

    /// Records `offset` as `key`'s newest version: updates the top leaf's
    /// entry for it, or adds one, splitting or linking a full leaf (§IV,
    /// Insert and Update). A delete is a tombstone's offset like any other.
    pub(crate) fn put(&mut self, key: &[u8], offset: u64, key_of: impl FnMut(u64) -> Vec<u8>) {
        let key_of = std::cell::RefCell::new(key_of);
        self.put_with(
            key,
            offset,
            |o| (key_of.borrow_mut())(o) == key,
            |o| (key_of.borrow_mut())(o),
        );
    }

    /// [`RhTree::put`] with the signature matches confirmed by
    /// `is_key(offset)` (the record there is `key`'s), which need not read
    /// the whole key; `key_of` gives the keys a split needs. Returns the
    /// partition it went into.
    pub(crate) fn put_with(
        &mut self,
        key: &[u8],
        offset: u64,
        mut is_key: impl FnMut(u64) -> bool,
        mut key_of: impl FnMut(u64) -> Vec<u8>,
    ) -> LeafId {
        let sig = signature((self.hash)(key));
        loop {
            let id = self.partition_of(key);
            let part = &mut self.parts[id];
            if part.chain[0].update(sig, offset, &mut is_key) {
                return id;
            }
            let cache = part.span.cache_of(key);
            if part.chain[0].insert(Entry { sig, cache, offset }) {
                return id;
            }
            let linked = part.chain.len() > 1;
            let may_split = self.parts.len() < self.params.max_leaf_nodes && !linked;
            if !(may_split && self.split(id, &mut key_of)) {
                let leaf = self.new_leaf();
                self.parts[id].chain.insert(0, leaf);
                self.stats.links += 1;
            }
        }
    }

    /// Splits full partition `id` once; false when its entries cannot be
    /// told apart within [`MAX_PREFIX_BYTES`].
    fn split(&mut self, id: LeafId, key_of: &mut impl FnMut(u64) -> Vec<u8>) -> bool {
        loop {
            let span = self.parts[id].span.clone();
            let mut digits: Vec<u32> = self.parts[id].chain[0]
                .entries()
                .map(|e| span.digit(e.cache))
                .collect();
            digits.sort_unstable();
            let (first, last) = (digits[0], digits[digits.len() - 1]);
            let values = u64::from(span.hi - span.lo) + 1;
            let t = self.params.t_normal.max(1);
            if first != last && values >= 2 * u64::from(t) {
                let m = balanced(&digits).clamp(span.lo + t, span.hi - (t - 1));
                self.normal_split(id, m);
                return true;
            }
            if span.width < 4 {
                let p = &mut self.parts[id].span;
                p.width += 1;
                p.lo <<= 8;
                p.hi = p.hi << 8 | 0xff;
                self.stats.level_splits += 1;
                continue;
            }
            if span.lo < span.hi {
                // Four-byte digits, a narrow span: cut without the T_normal
                // floor, isolating a shared digit if need be.
                let m = if first != last {
                    balanced(&digits)
                } else if first > span.lo {
                    first
                } else {
                    first + 1
                };
                self.normal_split(id, m.clamp(span.lo + 1, span.hi));
                return true;
            }
            if span.prefix.len() + 4 > MAX_PREFIX_BYTES {
                return false;
            }
            self.new_inner_node(id, key_of);
        }
    }

    /// Cuts partition `id` at digit `m`: it keeps `lo..m`, a new partition
    /// takes `m..=hi` and the entries whose digits are there.
    fn normal_split(&mut self, id: LeafId, m: u32) {
        let new_id = self.parts.len();
        let part = &mut self.parts[id];
        let mut span = part.span.clone();
        span.lo = m;
        part.span.hi = m - 1;
        let moved = part.chain[0].split_off(|e| span.digit(e.cache) >= m);
        let lo32 = span.lo32();
        self.parts.push(Partition {
            span,
            chain: vec![moved],
        });
        let inner = self
            .root
            .holding(id)
            .expect("every partition is in the tree");
        let at = inner.children.partition_point(|(lo, _)| *lo < lo32);
        inner.children.insert(at, (lo32, Child::Leaf(new_id)));
        self.stats.normal_splits += 1;
    }

    /// Partition `id` maps one four-byte digit: it becomes the only child
    /// of a new inner node four bytes deeper, and its cache slots are
    /// refilled from the keys.
    fn new_inner_node(&mut self, id: LeafId, key_of: &mut impl FnMut(u64) -> Vec<u8>) {
        let part = &mut self.parts[id];
        let digit = part.span.lo;
        part.span.prefix.extend_from_slice(&digit.to_be_bytes());
        (part.span.width, part.span.lo, part.span.hi) = (1, 0, 255);
        let span = part.span.clone();
        part.chain[0].recache(|o| span.cache_of(&key_of(o)));
        let inner = self
            .root
            .holding(id)
            .expect("every partition is in the tree");
        let slot = inner
            .children
            .iter_mut()
            .find(|(_, c)| matches!(c, Child::Leaf(l) if *l == id))
            .expect("holding found it");
        slot.1 = Child::Inner(Box::new(Inner {
            depth: span.prefix.len(),
            children: vec![(0, Child::Leaf(id))],
        }));
        self.stats.level_splits += 1;
        self.stats.new_inner_nodes += 1;
    }

    /// Checks every partition against its span and the key order
    /// (`key_of` reads keys); `Err` says what is wrong.
    #[cfg(test)]
    pub(crate) fn check(&self, mut key_of: impl FnMut(u64) -> Vec<u8>) -> Result<(), String> {
        let order = self.in_key_order();
        if order.len() != self.parts.len() {
            return Err(format!(
                "{} partitions in the tree, {} made",
                order.len(),
                self.parts.len()
            ));
        }
        for w in order.windows(2) {
            let (a, b) = (&self.parts[w[0]].span, &self.parts[w[1]].span);
            if a.lower_bound() >= b.lower_bound() {
                return Err(format!("partitions out of key order: {a:?} then {b:?}"));
            }
        }
        for (id, p) in self.parts.iter().enumerate() {
            for (depth, leaf) in p.chain.iter().enumerate() {
                for e in leaf.entries() {
                    let key = key_of(e.offset);
                    if self.partition_of(&key) != id || (depth == 0 && !p.span.contains(&key)) {
                        return Err(format!("{key:?} in partition {id} ({:?})", p.span));
                    }
                    if depth == 0 && e.cache != p.span.cache_of(&key) {
                        return Err(format!("{key:?}: stale cache slot in partition {id}"));
                    }
                }
            }
        }
        Ok(())
    }
}

/// A cut that puts about half of the sorted `digits` (not all equal) on
/// each side: their median, or the next larger digit if the median is
/// the smallest.
fn balanced(digits: &[u32]) -> u32 {
    let m = digits[digits.len() / 2];
    if m > digits[0] {
        m
    } else {
        *digits
            .iter()
            .find(|&&d| d > m)
            .expect("digits are not all equal")
    }
}

#[cfg(test)]
mod tests;
