//! Key choosers and value sources, deterministic from a seed.
//!
//! The skewed choosers follow YCSB (Cooper et al., SoCC 2010): a Zipfian
//! over item ranks by the method of Gray et al. ("Quickly generating
//! billion-record synthetic databases", SIGMOD 1994), *scrambled* by hashing
//! the rank so that hot items are spread over the key space, and *latest*,
//! which favours the most recently inserted items.

use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// YCSB's default Zipfian constant (the seeds use 0.99 throughout).
pub const ZIPF_THETA: f64 = 0.99;

/// Key number `n` as a fixed-width decimal key of `key_size` bytes, so that
/// key order is number order (db_bench's `%016d`).
pub fn make_key(n: u64, key_size: usize) -> Vec<u8> {
    let mut k = format!("{n:0width$}", width = key_size).into_bytes();
    k.truncate(key_size.max(1));
    k
}

/// Zipf(`theta`) over ranks `0..items`, rank 0 the most popular. The item
/// count may grow (for [`Latest`]); the normalising constant ζ(n) is then
/// extended incrementally, as YCSB's `ZipfianGenerator` does.
#[derive(Debug, Clone)]
pub struct Zipfian {
    items: u64,
    theta: f64,
    alpha: f64,
    zeta2: f64,
    zetan: f64,
    eta: f64,
}

impl Zipfian {
    /// # Panics
    /// If `theta` is not in (0, 1) — a programming error.
    pub fn new(items: u64, theta: f64) -> Self {
        assert!(theta > 0.0 && theta < 1.0, "Zipf theta must be in (0, 1)");
        let items = items.max(1);
        let zeta2 = zeta(0, 2, theta, 0.0);
        let mut z = Zipfian {
            items: 0,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zeta2,
            zetan: 0.0,
            eta: 0.0,
        };
        z.grow(items);
        z
    }

    /// The number of items ranks are drawn from.
    pub fn items(&self) -> u64 {
        self.items
    }

    fn grow(&mut self, items: u64) {
        if items <= self.items {
            return;
        }
        self.zetan = zeta(self.items, items, self.theta, self.zetan);
        self.items = items;
        self.eta =
            (1.0 - (2.0 / items as f64).powf(1.0 - self.theta)) / (1.0 - self.zeta2 / self.zetan);
    }

    /// A rank in `0..items`.
    pub fn sample(&self, rng: &mut impl Rng) -> u64 {
        let u: f64 = rng.gen();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1.min(self.items - 1);
        }
        let r = (self.items as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        r.min(self.items - 1)
    }

    /// A rank in `0..items`, first growing the item count to `items` (it
    /// never shrinks).
    pub fn sample_grown(&mut self, items: u64, rng: &mut impl Rng) -> u64 {
        self.grow(items.max(1));
        self.sample(rng)
    }
}

/// Σ 1/(i+1)^θ for i in `from..to`, added to `initial`.
fn zeta(from: u64, to: u64, theta: f64, initial: f64) -> f64 {
    (from..to).fold(initial, |s, i| s + 1.0 / ((i + 1) as f64).powf(theta))
}

/// FNV-1a of a number's little-endian bytes (YCSB scrambles ranks with
/// FNV-64).
pub fn fnv64(x: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in x.to_le_bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// How a workload picks the key of its next operation.
#[derive(Debug, Clone)]
pub enum Chooser {
    /// Uniform over the keys that exist.
    Uniform,
    /// Zipfian ranks hashed over the keys (YCSB's scrambled Zipfian): hot
    /// keys are few but spread over the key space. Fixed to the item count
    /// it was made with.
    ScrambledZipfian(Zipfian),
    /// Recently inserted keys are the hottest (YCSB's skewed-latest):
    /// `newest - zipf(count)`.
    Latest(Zipfian),
}

impl Chooser {
    pub fn scrambled(items: u64) -> Chooser {
        Chooser::ScrambledZipfian(Zipfian::new(items, ZIPF_THETA))
    }
    pub fn latest(items: u64) -> Chooser {
        Chooser::Latest(Zipfian::new(items, ZIPF_THETA))
    }

    /// A key number in `0..count`, where `count` keys exist now.
    pub fn next(&mut self, count: u64, rng: &mut impl Rng) -> u64 {
        let count = count.max(1);
        match self {
            Chooser::Uniform => rng.gen_range(0..count),
            Chooser::ScrambledZipfian(z) => fnv64(z.sample(rng)) % count,
            Chooser::Latest(z) => count - 1 - z.sample_grown(count, rng),
        }
    }
}

/// Value sizes of a workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueSizes {
    Fixed(usize),
    /// Scavenger's Mixed workload (Scavenger, VLDB, §2.5, §4.1): values 1:1 of
    /// 16 KiB and of 100-512 bytes (uniform), about 8 KiB on average.
    Mixed,
}

impl ValueSizes {
    pub const MIXED_LARGE_BYTES: usize = 16 << 10;
    pub const MIXED_SMALL_BYTES: std::ops::RangeInclusive<usize> = 100..=512;

    pub fn next(self, rng: &mut impl Rng) -> usize {
        match self {
            ValueSizes::Fixed(n) => n,
            ValueSizes::Mixed => {
                if rng.gen_bool(0.5) {
                    Self::MIXED_LARGE_BYTES
                } else {
                    rng.gen_range(Self::MIXED_SMALL_BYTES)
                }
            }
        }
    }

    pub fn max(self) -> usize {
        match self {
            ValueSizes::Fixed(n) => n,
            ValueSizes::Mixed => Self::MIXED_LARGE_BYTES,
        }
    }

    /// The mean value size.
    pub fn mean(self) -> f64 {
        match self {
            ValueSizes::Fixed(n) => n as f64,
            ValueSizes::Mixed => (Self::MIXED_LARGE_BYTES as f64 + 306.0) / 2.0,
        }
    }
}

/// Incompressible value bytes (db_bench's `RandomGenerator`): slices of
/// one random buffer shared by all threads, each thread starting
/// elsewhere.
#[derive(Clone)]
pub struct Values {
    buf: Arc<Vec<u8>>,
    pos: usize,
}

impl Values {
    pub fn new(seed: u64, max_value_bytes: usize) -> Self {
        let mut rng = StdRng::seed_from_u64(seed ^ 0x7a1e);
        let len = (1 << 20).max(max_value_bytes * 2);
        Values {
            buf: Arc::new((0..len).map(|_| rng.gen()).collect()),
            pos: 0,
        }
    }

    /// The same bytes, read from another position (for another thread).
    pub fn fork(&self, offset: usize) -> Values {
        Values {
            buf: Arc::clone(&self.buf),
            pos: offset % self.buf.len(),
        }
    }

    pub fn next(&mut self, n: usize) -> &[u8] {
        if self.pos + n > self.buf.len() {
            self.pos = 0;
        }
        let v = &self.buf[self.pos..self.pos + n];
        self.pos += n % 4099 + 1;
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn counts(xs: &[u64]) -> Vec<u32> {
        let mut m: HashMap<u64, u32> = HashMap::new();
        for &x in xs {
            *m.entry(x).or_default() += 1;
        }
        let mut c: Vec<u32> = m.into_values().collect();
        c.sort_unstable_by(|a, b| b.cmp(a));
        c
    }

    #[test]
    fn zipfian_ranks_follow_the_power_law() {
        let n = 10_000u64;
        let z = Zipfian::new(n, ZIPF_THETA);
        let mut rng = StdRng::seed_from_u64(7);
        let draws = 200_000;
        let mut hist = vec![0u32; n as usize];
        for _ in 0..draws {
            let r = z.sample(&mut rng);
            assert!(r < n);
            hist[r as usize] += 1;
        }
        // P(rank 0) = 1/zeta(n); for n = 10^4 and 0.99, zeta is about 9.8.
        let expect0 = draws as f64 / zeta(0, n, ZIPF_THETA, 0.0);
        let got0 = f64::from(hist[0]);
        assert!(
            (got0 / expect0 - 1.0).abs() < 0.05,
            "rank 0: {got0} vs {expect0}"
        );
        // Rank 9 is about 10^0.99 times rarer than rank 0.
        let ratio = got0 / f64::from(hist[9]);
        assert!((7.0..13.0).contains(&ratio), "rank 0 / rank 9 = {ratio}");
        // The tail is reached.
        assert!(hist[(n / 2) as usize..].iter().any(|&c| c > 0));
    }

    #[test]
    fn growing_a_zipfian_equals_making_it_at_that_size() {
        let mut grown = Zipfian::new(1000, ZIPF_THETA);
        let made = Zipfian::new(5000, ZIPF_THETA);
        let mut a = StdRng::seed_from_u64(3);
        let mut b = StdRng::seed_from_u64(3);
        let xs: Vec<u64> = (0..1000)
            .map(|_| grown.sample_grown(5000, &mut a))
            .collect();
        let ys: Vec<u64> = (0..1000).map(|_| made.sample(&mut b)).collect();
        assert_eq!(xs, ys);
        assert!((grown.zetan - made.zetan).abs() < 1e-9);
    }

    #[test]
    fn scrambled_zipfian_is_skewed_spread_and_deterministic() {
        let draw = |seed| {
            let mut c = Chooser::scrambled(10_000);
            let mut rng = StdRng::seed_from_u64(seed);
            (0..20_000)
                .map(|_| c.next(10_000, &mut rng))
                .collect::<Vec<_>>()
        };
        let xs = draw(1);
        assert_eq!(xs, draw(1), "same seed, same keys");
        assert_ne!(xs, draw(2), "another seed, other keys");
        assert!(xs.iter().all(|&x| x < 10_000));
        let c = counts(&xs);
        let top10: u32 = c.iter().take(10).sum();
        // Zipf(0.99): the 10 hottest of 10,000 keys draw about 30%.
        assert!(top10 > 4_000, "not skewed: top 10 drew {top10}");
        // Scrambled: the hottest keys are not the smallest numbers.
        let small = xs.iter().filter(|&&x| x < 10).count();
        assert!(small < 1_000, "hot keys bunched at the start: {small}");
    }

    #[test]
    fn latest_prefers_the_newest_keys_as_keys_are_added() {
        let mut c = Chooser::latest(1000);
        let mut rng = StdRng::seed_from_u64(5);
        for count in [1000u64, 1500, 4000] {
            let xs: Vec<u64> = (0..10_000).map(|_| c.next(count, &mut rng)).collect();
            assert!(xs.iter().all(|&x| x < count));
            let newest = xs.iter().filter(|&&x| x == count - 1).count();
            assert!(newest > 800, "newest key drawn {newest} times of 10,000");
            let recent = xs.iter().filter(|&&x| x >= count - 100).count();
            assert!(recent > 5_000, "last 100 keys drawn {recent} times");
        }
    }

    #[test]
    fn mixed_sizes_are_half_large_and_small_uniform() {
        let mut rng = StdRng::seed_from_u64(11);
        let xs: Vec<usize> = (0..10_000)
            .map(|_| ValueSizes::Mixed.next(&mut rng))
            .collect();
        let large = xs.iter().filter(|&&s| s == 16 << 10).count();
        assert!((4_700..5_300).contains(&large), "{large} large of 10,000");
        let small: Vec<usize> = xs.iter().copied().filter(|&s| s != 16 << 10).collect();
        assert!(small.iter().all(|s| (100..=512).contains(s)));
        let mean = small.iter().sum::<usize>() as f64 / small.len() as f64;
        assert!((290.0..322.0).contains(&mean), "small mean {mean}");
    }

    #[test]
    fn keys_are_fixed_width_and_ordered() {
        assert_eq!(make_key(42, 16), b"0000000000000042".to_vec());
        assert!(make_key(9, 16) < make_key(10, 16));
    }
}
