//! The workloads and the phases they run.

use crate::gen::Chooser;

/// A YCSB core workload (Cooper et al., SoCC 2010).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ycsb {
    /// Update heavy: 50% reads, 50% updates, Zipfian.
    A,
    /// Read mostly: 95% reads, 5% updates, Zipfian.
    B,
    /// Read only, Zipfian.
    C,
    /// Read latest: 95% reads, 5% inserts, reads favour new keys.
    D,
    /// Short ranges: 95% scans of 1-100 pairs, 5% inserts, Zipfian starts.
    E,
    /// Read-modify-write: 50% reads, 50% read-modify-writes, Zipfian.
    F,
}

/// A workload of `sluice bench`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Workload {
    /// Keys 0..num in order.
    FillSeq,
    /// Keys 0..num, each once, in random order.
    FillRandom,
    /// `ops` puts of uniformly random existing keys.
    Overwrite,
    /// `ops` lookups of uniformly random keys.
    ReadRandom,
    /// A forward scan over the whole database.
    ReadSeq,
    /// `ops` seeks to uniformly random keys, reading the pair found.
    SeekRandom,
    /// `ops` range scans of `scan_length` pairs from random keys.
    Scan,
    /// HashKV (USENIX ATC '18) §4.2: load num keys in random order (P0), then
    /// three phases of `update_ops` updates to keys drawn from a scrambled
    /// Zipf(0.99) (P1-P3); the value store is capped at data + 30%.
    Update,
    /// A YCSB core workload, `ops` operations, after a load if the
    /// database is empty.
    Ycsb(Ycsb),
    /// Scavenger's Mixed workload (Scavenger, VLDB, §4.1): load num keys with
    /// values 1:1 of 16 KiB and 100-512 B, then `update_ops` Zipfian
    /// updates of the same mix; the value store is capped at data + 50%.
    Mixed,
    /// Delete-heavy with a constant live set (issue 17): load num keys
    /// (P0), then three phases of `update_ops` operations, each deleting a
    /// uniformly random live key and inserting a new one (the next key
    /// number), so that each phase of `num` operations replaces about
    /// 63% of the keys while the live data stays the same.
    Churn,
    /// UniKV's Experiment 2 (UniKV, ICDE '20, §IV-B): on the loaded data (a load
    /// first if the database is empty), three phases of `ops` operations,
    /// reads and updates of Zipf(0.99) keys in the ratios 30:70, 50:50 and
    /// 70:30.
    ReadWrite,
    /// Random reads on every thread but one while that one overwrites
    /// random keys for as long as the readers run (LightKV's Table I and
    /// Fig. 11: read latency under concurrent writes; db_bench's
    /// readwhilewriting). Latency and ops/s are the reads'; at least two
    /// threads run.
    ReadWhileWriting,
}

/// The read shares of [`Workload::ReadWrite`]'s phases, in percent.
pub const READ_WRITE_READ_PERCENTS: [u32; 3] = [30, 50, 70];

impl Workload {
    pub const ALL: [Workload; 18] = [
        Workload::FillSeq,
        Workload::FillRandom,
        Workload::Overwrite,
        Workload::ReadRandom,
        Workload::ReadSeq,
        Workload::SeekRandom,
        Workload::Scan,
        Workload::Update,
        Workload::Ycsb(Ycsb::A),
        Workload::Ycsb(Ycsb::B),
        Workload::Ycsb(Ycsb::C),
        Workload::Ycsb(Ycsb::D),
        Workload::Ycsb(Ycsb::E),
        Workload::Ycsb(Ycsb::F),
        Workload::Mixed,
        Workload::Churn,
        Workload::ReadWrite,
        Workload::ReadWhileWriting,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Workload::FillSeq => "fillseq",
            Workload::FillRandom => "fillrandom",
            Workload::Overwrite => "overwrite",
            Workload::ReadRandom => "readrandom",
            Workload::ReadSeq => "readseq",
            Workload::SeekRandom => "seekrandom",
            Workload::Scan => "scan",
            Workload::Update => "update",
            Workload::Ycsb(Ycsb::A) => "ycsb-a",
            Workload::Ycsb(Ycsb::B) => "ycsb-b",
            Workload::Ycsb(Ycsb::C) => "ycsb-c",
            Workload::Ycsb(Ycsb::D) => "ycsb-d",
            Workload::Ycsb(Ycsb::E) => "ycsb-e",
            Workload::Ycsb(Ycsb::F) => "ycsb-f",
            Workload::Mixed => "mixed",
            Workload::Churn => "churn",
            Workload::ReadWrite => "readwrite",
            Workload::ReadWhileWriting => "readwhilewriting",
        }
    }

    /// Parses a comma-separated list; `ycsb` stands for A, B, C, F, D, E
    /// (YCSB's recommended order: the inserting workloads last).
    pub fn parse_list(s: &str) -> Result<Vec<Workload>, String> {
        let mut out = Vec::new();
        for name in s.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            if name == "ycsb" {
                out.extend(
                    [Ycsb::A, Ycsb::B, Ycsb::C, Ycsb::F, Ycsb::D, Ycsb::E].map(Workload::Ycsb),
                );
                continue;
            }
            let w = Workload::ALL
                .into_iter()
                .find(|w| w.name() == name)
                .ok_or_else(|| {
                    let names: Vec<&str> = Workload::ALL.iter().map(|w| w.name()).collect();
                    format!(
                        "unknown workload {name:?}; known: {}, ycsb",
                        names.join(", ")
                    )
                })?;
            out.push(w);
        }
        if out.is_empty() {
            return Err("no workload given".into());
        }
        Ok(out)
    }

    /// Whether the workload writes (its phases are settled and get a write
    /// amplification).
    pub fn writes(self) -> bool {
        !matches!(
            self,
            Workload::ReadRandom
                | Workload::ReadSeq
                | Workload::SeekRandom
                | Workload::Scan
                | Workload::Ycsb(Ycsb::C)
        )
    }
}

/// How long the scans of a phase are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanLength {
    Fixed(usize),
    /// Uniform in 1..=max (YCSB E).
    Uniform(usize),
}

/// Fractions of each operation in a phase's mix (summing to 1).
#[derive(Debug, Clone, Copy, Default)]
pub struct Mix {
    pub read: f64,
    pub update: f64,
    pub insert: f64,
    pub scan: f64,
    pub read_modify_write: f64,
    pub churn: f64,
}

/// One kind of operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Read,
    Update,
    Insert,
    Scan,
    ReadModifyWrite,
    /// Delete a random live key and insert a new one ([`Workload::Churn`]).
    Churn,
}

impl Mix {
    pub fn only(op: Op) -> Mix {
        Mix::default().with(op, 1.0)
    }

    pub fn with(mut self, op: Op, share: f64) -> Mix {
        *match op {
            Op::Read => &mut self.read,
            Op::Update => &mut self.update,
            Op::Insert => &mut self.insert,
            Op::Scan => &mut self.scan,
            Op::ReadModifyWrite => &mut self.read_modify_write,
            Op::Churn => &mut self.churn,
        } = share;
        self
    }

    /// The operation for a uniform draw `u` in [0, 1).
    pub fn pick(&self, u: f64) -> Op {
        let mut acc = self.read;
        if u < acc {
            return Op::Read;
        }
        acc += self.update;
        if u < acc {
            return Op::Update;
        }
        acc += self.insert;
        if u < acc {
            return Op::Insert;
        }
        acc += self.scan;
        if u < acc {
            return Op::Scan;
        }
        acc += self.churn;
        if u < acc {
            return Op::Churn;
        }
        Op::ReadModifyWrite
    }
}

/// What a phase does.
#[derive(Debug, Clone)]
pub enum Body {
    /// Put each of these key numbers once, split over the threads.
    Load { keys: Vec<u64> },
    /// `ops` operations drawn from a mix, keys from a chooser.
    Ops {
        mix: Mix,
        chooser: Chooser,
        scan_length: ScanLength,
    },
    /// One scan over everything, on one thread.
    ReadAll,
    /// `ops` random reads spread over every thread but the first, which
    /// overwrites random keys until they are done; only the reads count.
    ReadWhileWriting { chooser: Chooser },
}

/// One measured phase of a workload.
#[derive(Debug, Clone)]
pub struct Phase {
    pub workload: Workload,
    /// The workload's name, or `update.P1` style for one of its phases.
    pub label: String,
    pub ops: u64,
    pub body: Body,
    /// Whether values use the mixed sizes.
    pub mixed_sizes: bool,
}

impl Ycsb {
    pub fn mix(self) -> (Mix, ScanLength) {
        use Op::*;
        let fixed = ScanLength::Fixed(1);
        match self {
            Ycsb::A => (Mix::default().with(Read, 0.5).with(Update, 0.5), fixed),
            Ycsb::B => (Mix::default().with(Read, 0.95).with(Update, 0.05), fixed),
            Ycsb::C => (Mix::only(Read), fixed),
            Ycsb::D => (Mix::default().with(Read, 0.95).with(Insert, 0.05), fixed),
            Ycsb::E => (
                Mix::default().with(Scan, 0.95).with(Insert, 0.05),
                ScanLength::Uniform(100),
            ),
            Ycsb::F => (
                Mix::default().with(Read, 0.5).with(ReadModifyWrite, 0.5),
                fixed,
            ),
        }
    }

    /// The fraction of operations that insert new keys.
    pub fn insert_share(self) -> f64 {
        self.mix().0.insert
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workload_names_round_trip_and_ycsb_expands() {
        for w in Workload::ALL {
            assert_eq!(Workload::parse_list(w.name()).unwrap(), vec![w]);
        }
        let all = Workload::parse_list("fillseq, ycsb").unwrap();
        let names: Vec<&str> = all.iter().map(|w| w.name()).collect();
        assert_eq!(
            names,
            ["fillseq", "ycsb-a", "ycsb-b", "ycsb-c", "ycsb-f", "ycsb-d", "ycsb-e"]
        );
        assert!(Workload::parse_list("fillrandom,nope")
            .unwrap_err()
            .contains("nope"));
        assert!(Workload::parse_list("").is_err());
    }

    #[test]
    fn mixes_pick_operations_in_their_shares() {
        for y in [Ycsb::A, Ycsb::B, Ycsb::C, Ycsb::D, Ycsb::E, Ycsb::F] {
            let (m, _) = y.mix();
            let total = m.read + m.update + m.insert + m.scan + m.read_modify_write;
            assert!((total - 1.0).abs() < 1e-9, "{y:?} sums to {total}");
            let n = 10_000;
            let picks: Vec<Op> = (0..n).map(|i| m.pick(i as f64 / n as f64)).collect();
            let share = |op| picks.iter().filter(|&&p| p == op).count() as f64 / n as f64;
            assert!((share(Op::Read) - m.read).abs() < 0.001, "{y:?}");
            assert!((share(Op::Insert) - m.insert).abs() < 0.001, "{y:?}");
            assert!((share(Op::Scan) - m.scan).abs() < 0.001, "{y:?}");
        }
    }
}
