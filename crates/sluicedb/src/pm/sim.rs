//! [`SimPm`]: persistent memory in memory, with the crash model of
//! `docs/design.md` ("LightKV: persistent memory and its crash model").
//!
//! Per 8-byte word it keeps every value the word may come back with after a
//! crash: the durable value, then every value stored to it since (a dirty
//! line can be written back at any moment, so any of them may be the one
//! that reached the media). A flush remembers the word's value at that
//! moment; the next fence drops the values older than it. Crash images
//! pick one candidate per word, independently: enumerated by index
//! ([`SimPm::crash_image`]) or drawn by seed ([`SimPm::sampled_crash_image`]).
//!
//! In eADR mode ([`SimPm::new_eadr`]) the caches are in the persistence
//! domain: every store is durable when it returns, and a crash image is the
//! current content.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use super::{check_range, check_size, check_word, Pm, LINE_BYTES, WORD_BYTES};
use crate::error::Result;

/// What is about to happen, as a [`PmHook`] sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PmEvent {
    /// A store to `offset..offset + len` (by `write` or `write_u64`).
    Store { offset: u64, len: u64 },
    /// A fence.
    Fence,
}

/// Called before every store and fence of a [`SimPm`], with the region as
/// it is before the event: a crash suite takes crash images there. The hook
/// may read the region and take images, but must not store or fence.
pub type PmHook = Arc<dyn Fn(&SimPm, PmEvent) + Send + Sync>;

/// A word stored to since it was last durable.
#[derive(Debug, Clone)]
struct Dirty {
    /// `values[0]` is durable; every later one was stored since; the last
    /// is the current value. A crash leaves any one of them.
    values: Vec<u64>,
    /// Set by a flush: the index in `values` of the value it saw, which the
    /// next fence makes the oldest a crash can leave.
    flushed: Option<usize>,
}

#[derive(Debug, Clone, Default)]
struct State {
    bytes: Vec<u8>,
    /// Word index → its candidates, for words not durable as they stand.
    dirty: BTreeMap<u64, Dirty>,
    stores: u64,
    fences: u64,
}

struct Inner {
    name: PathBuf,
    eadr: bool,
    state: Mutex<State>,
    hook: Mutex<Option<PmHook>>,
}

/// A simulated persistent memory region; clones share it. See the module
/// documentation for the crash model.
#[derive(Clone)]
pub struct SimPm {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SimPm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.inner.state.lock();
        f.debug_struct("SimPm")
            .field("name", &self.inner.name)
            .field("len", &s.bytes.len())
            .field("dirty_words", &s.dirty.len())
            .field("eadr", &self.inner.eadr)
            .finish()
    }
}

/// Deterministic pseudo-random numbers for sampled images (splitmix64).
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn word_at(bytes: &[u8], w: u64) -> u64 {
    let at = (w * WORD_BYTES) as usize;
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

fn set_word(bytes: &mut [u8], w: u64, v: u64) {
    let at = (w * WORD_BYTES) as usize;
    bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

impl SimPm {
    /// A zeroed region of `len_bytes` (a positive multiple of 64), durable
    /// as it stands.
    pub fn new(name: impl Into<PathBuf>, len_bytes: u64) -> Result<SimPm> {
        Self::build(name.into(), len_bytes, false)
    }

    /// Like [`SimPm::new`], with the caches in the persistence domain
    /// (eADR): every store is durable when it returns.
    pub fn new_eadr(name: impl Into<PathBuf>, len_bytes: u64) -> Result<SimPm> {
        Self::build(name.into(), len_bytes, true)
    }

    fn build(name: PathBuf, len_bytes: u64, eadr: bool) -> Result<SimPm> {
        check_size(&name, len_bytes)?;
        let state = State {
            bytes: vec![0; len_bytes as usize],
            ..State::default()
        };
        Ok(Self::from_state(name, eadr, state))
    }

    fn from_state(name: PathBuf, eadr: bool, state: State) -> SimPm {
        SimPm {
            inner: Arc::new(Inner {
                name,
                eadr,
                state: Mutex::new(state),
                hook: Mutex::new(None),
            }),
        }
    }

    /// True in eADR mode.
    pub fn is_eadr(&self) -> bool {
        self.inner.eadr
    }

    /// Installs (or with `None` removes) the hook run before every store
    /// and fence.
    pub fn set_hook(&self, hook: Option<PmHook>) {
        *self.inner.hook.lock() = hook;
    }

    /// Stores so far (`write` and `write_u64` calls).
    pub fn stores(&self) -> u64 {
        self.inner.state.lock().stores
    }

    /// Fences so far.
    pub fn fences(&self) -> u64 {
        self.inner.state.lock().fences
    }

    /// Words whose value a crash could change now.
    pub fn dirty_words(&self) -> usize {
        self.inner.state.lock().dirty.len()
    }

    /// How many distinct crash images [`SimPm::crash_image`] enumerates:
    /// the product of each dirty word's candidates, `u64::MAX` when larger.
    pub fn crash_image_count(&self) -> u64 {
        let s = self.inner.state.lock();
        s.dirty
            .values()
            .fold(1u64, |n, d| n.saturating_mul(d.values.len() as u64))
    }

    /// Crash image number `index` (below [`SimPm::crash_image_count`]):
    /// the index is read in mixed radix, one digit per dirty word in
    /// address order. Image 0 holds only durable values; the last one
    /// holds the current content. The image is durable as it stands, has
    /// no hook, and is independent of `self`.
    pub fn crash_image(&self, index: u64) -> SimPm {
        let mut rest = index;
        self.image_by(|_, n| {
            let pick = rest % n;
            rest /= n;
            pick
        })
    }

    /// A crash image whose words each pick a candidate at random, drawn
    /// from `seed` (the same seed gives the same image).
    pub fn sampled_crash_image(&self, seed: u64) -> SimPm {
        self.image_by(|w, n| mix(seed ^ mix(w)) % n)
    }

    /// The region a killed process leaves (caches and memory survive, a
    /// later power loss may still drop what is not durable): a copy with
    /// the same candidates and no hook.
    pub fn kill_image(&self) -> SimPm {
        let s = self.inner.state.lock().clone();
        Self::from_state(self.inner.name.clone(), self.inner.eadr, s)
    }

    /// A copy of the whole content now (for tests and read-only copies).
    pub fn contents(&self) -> Vec<u8> {
        self.inner.state.lock().bytes.clone()
    }

    fn image_by(&self, mut pick: impl FnMut(u64, u64) -> u64) -> SimPm {
        let s = self.inner.state.lock();
        let mut bytes = s.bytes.clone();
        for (&w, d) in &s.dirty {
            let i = pick(w, d.values.len() as u64) as usize;
            set_word(&mut bytes, w, d.values[i]);
        }
        let state = State {
            bytes,
            ..State::default()
        };
        Self::from_state(self.inner.name.clone(), self.inner.eadr, state)
    }

    fn before(&self, event: PmEvent) {
        let hook = self.inner.hook.lock().clone();
        if let Some(hook) = hook {
            hook(self, event);
        }
    }

    /// Applies a store of `data` at `offset`, one candidate per changed word.
    fn store(&self, offset: u64, data: &[u8]) -> Result<()> {
        let len = data.len() as u64;
        self.before(PmEvent::Store { offset, len });
        let mut s = self.inner.state.lock();
        check_range(&self.inner.name, s.bytes.len() as u64, offset, len)?;
        s.stores += 1;
        if len == 0 {
            return Ok(());
        }
        let first = offset / WORD_BYTES;
        let last = (offset + len - 1) / WORD_BYTES;
        let old: Vec<u64> = (first..=last).map(|w| word_at(&s.bytes, w)).collect();
        s.bytes[offset as usize..(offset + len) as usize].copy_from_slice(data);
        if self.inner.eadr {
            return Ok(());
        }
        for (w, old) in (first..=last).zip(old) {
            let new = word_at(&s.bytes, w);
            if new == old {
                continue;
            }
            s.dirty
                .entry(w)
                .or_insert_with(|| Dirty {
                    values: vec![old],
                    flushed: None,
                })
                .values
                .push(new);
        }
        Ok(())
    }
}

impl Pm for SimPm {
    fn name(&self) -> &Path {
        &self.inner.name
    }

    fn len(&self) -> u64 {
        self.inner.state.lock().bytes.len() as u64
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let s = self.inner.state.lock();
        check_range(
            &self.inner.name,
            s.bytes.len() as u64,
            offset,
            buf.len() as u64,
        )?;
        buf.copy_from_slice(&s.bytes[offset as usize..offset as usize + buf.len()]);
        Ok(())
    }

    fn read_with(&self, offset: u64, len: usize, f: &mut dyn FnMut(&[u8])) -> Result<()> {
        let s = self.inner.state.lock();
        check_range(&self.inner.name, s.bytes.len() as u64, offset, len as u64)?;
        f(&s.bytes[offset as usize..offset as usize + len]);
        Ok(())
    }

    fn read_u64(&self, offset: u64) -> Result<u64> {
        let s = self.inner.state.lock();
        check_word(&self.inner.name, s.bytes.len() as u64, offset)?;
        Ok(word_at(&s.bytes, offset / WORD_BYTES))
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.store(offset, data)
    }

    fn write_u64(&self, offset: u64, value: u64) -> Result<()> {
        check_word(&self.inner.name, self.len(), offset)?;
        self.store(offset, &value.to_le_bytes())
    }

    fn flush(&self, offset: u64, len: u64) {
        if self.inner.eadr || len == 0 {
            return;
        }
        let mut s = self.inner.state.lock();
        let start = offset / LINE_BYTES * LINE_BYTES / WORD_BYTES;
        let end = offset.saturating_add(len).div_ceil(LINE_BYTES) * LINE_BYTES / WORD_BYTES;
        for d in s.dirty.range_mut(start..end).map(|(_, d)| d) {
            d.flushed = Some(d.values.len() - 1);
        }
    }

    fn fence(&self) -> Result<()> {
        self.before(PmEvent::Fence);
        let mut s = self.inner.state.lock();
        s.fences += 1;
        s.dirty.retain(|_, d| {
            if let Some(i) = d.flushed.take() {
                d.values.drain(..i);
            }
            d.values.len() > 1
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pm() -> SimPm {
        SimPm::new("pm", 256).unwrap()
    }

    fn word(pm: &SimPm, offset: u64) -> u64 {
        pm.read_u64(offset).unwrap()
    }

    /// Every value of the word at `offset` over all crash images.
    fn outcomes(pm: &SimPm, offset: u64) -> Vec<u64> {
        let mut out: Vec<u64> = (0..pm.crash_image_count())
            .map(|i| word(&pm.crash_image(i), offset))
            .collect();
        out.sort();
        out.dedup();
        out
    }

    #[test]
    fn an_unflushed_store_may_come_back_old_or_new() {
        let pm = pm();
        pm.write_u64(0, 1).unwrap();
        pm.write_u64(0, 2).unwrap();
        assert_eq!(outcomes(&pm, 0), vec![0, 1, 2]);
        pm.fence().unwrap();
        assert_eq!(
            outcomes(&pm, 0),
            vec![0, 1, 2],
            "a fence without a flush persists nothing"
        );
    }

    #[test]
    fn flush_then_fence_makes_the_flushed_value_durable() {
        let pm = pm();
        pm.write_u64(8, 1).unwrap();
        pm.flush(8, 8);
        pm.write_u64(8, 2).unwrap();
        assert_eq!(
            outcomes(&pm, 8),
            vec![0, 1, 2],
            "not durable before the fence"
        );
        pm.fence().unwrap();
        assert_eq!(
            outcomes(&pm, 8),
            vec![1, 2],
            "a store after the flush is not covered"
        );
        pm.persist(8, 8).unwrap();
        assert_eq!(outcomes(&pm, 8), vec![2]);
        assert_eq!(pm.dirty_words(), 0);
    }

    #[test]
    fn a_flush_covers_whole_lines_only() {
        let pm = pm();
        pm.write_u64(56, 7).unwrap();
        pm.write_u64(64, 9).unwrap();
        pm.persist(0, 1).unwrap();
        assert_eq!(outcomes(&pm, 56), vec![7], "same line as byte 0");
        assert_eq!(outcomes(&pm, 64), vec![0, 9], "next line untouched");
    }

    #[test]
    fn words_of_a_write_come_back_independently() {
        let pm = pm();
        pm.write(0, &[0xff; 16]).unwrap();
        assert_eq!(pm.crash_image_count(), 4);
        let images: Vec<(u64, u64)> = (0..4)
            .map(|i| {
                let img = pm.crash_image(i);
                (word(&img, 0), word(&img, 8))
            })
            .collect();
        let ones = u64::MAX;
        for pair in [(0, 0), (ones, 0), (0, ones), (ones, ones)] {
            assert!(images.contains(&pair), "{pair:?} missing from {images:?}");
        }
        let first = pm.crash_image(0);
        assert_eq!(first.dirty_words(), 0, "an image is durable as it stands");
    }

    #[test]
    fn sampled_images_are_repeatable_and_vary() {
        let pm = pm();
        for w in 0..32 {
            pm.write_u64(w * 8, w + 1).unwrap();
        }
        let a = pm.sampled_crash_image(5).contents();
        assert_eq!(a, pm.sampled_crash_image(5).contents());
        let differ = (0..8).any(|seed| pm.sampled_crash_image(seed).contents() != a);
        assert!(differ);
    }

    #[test]
    fn eadr_makes_every_store_durable() {
        let pm = SimPm::new_eadr("pm", 128).unwrap();
        pm.write(3, b"hello").unwrap();
        assert_eq!(pm.crash_image_count(), 1);
        let mut buf = [0; 5];
        pm.crash_image(0).read(3, &mut buf).unwrap();
        assert_eq!(&buf, b"hello");
    }

    #[test]
    fn hook_runs_before_each_store_and_fence() {
        let pm = pm();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        pm.set_hook(Some(Arc::new(move |pm: &SimPm, e| {
            log.lock().push((e, pm.read_u64(0).unwrap()));
        })));
        pm.write_u64(0, 4).unwrap();
        pm.persist(0, 8).unwrap();
        let seen = seen.lock().clone();
        assert_eq!(
            seen,
            vec![
                (PmEvent::Store { offset: 0, len: 8 }, 0),
                (PmEvent::Fence, 4)
            ]
        );
    }

    #[test]
    fn out_of_range_and_unaligned_accesses_are_errors() {
        let pm = pm();
        assert!(pm.write(250, &[0; 8]).is_err());
        assert!(pm.write_u64(4, 1).is_err());
        assert!(pm.read_u64(256).is_err());
        let mut called = false;
        assert!(pm.read_with(250, 7, &mut |_| called = true).is_err());
        assert!(!called);
        pm.write(248, b"in range").unwrap();
        pm.read_with(248, 8, &mut |b| called = b == b"in range")
            .unwrap();
        assert!(called);
        assert!(SimPm::new("pm", 100).is_err());
    }
}
