//! The write buffer's crash suite, on [`SimPm`]: crash images at every
//! fence and at sampled stores; each must reopen to a prefix of whole
//! batches holding every synced write, and the reopened buffer must take
//! another synced batch and survive a second crash. Injected faults show
//! the suite catches a missing flush or fence.

use std::sync::Arc;

use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::pm::{PmEvent, SimPm};

const SEGMENT_BYTES: u64 = 256;
/// Header line, one line of segment words, five segments.
const REGION_BYTES: u64 = 64 + 64 + 5 * SEGMENT_BYTES;
const LANES: u32 = 3;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Op {
    payload: Vec<u8>,
    place: u32,
    count: u32,
}

/// What was written and what was acknowledged as synced.
#[derive(Debug, Clone, Default)]
struct Model {
    /// Operation `seq` is `history[seq - 1]`.
    history: Vec<Op>,
    /// Every operation up to here was synced.
    synced: u64,
    /// Operations whose segment was released by `R`
    /// ([`Pwb::release_segments`]): durable elsewhere, so recovery may
    /// miss them.
    elsewhere: std::collections::BTreeSet<u64>,
}

impl Model {
    fn push(&mut self, payloads: &[Vec<u8>]) {
        for (place, p) in payloads.iter().enumerate() {
            self.history.push(Op {
                payload: p.clone(),
                place: place as u32,
                count: payloads.len() as u32,
            });
        }
    }

    fn batch_ends(&self, above: u64, upto: u64) -> Vec<u64> {
        (above + 1..=upto)
            .filter(|&s| {
                let op = &self.history[s as usize - 1];
                op.place + 1 == op.count
            })
            .collect()
    }
}

fn new_pm() -> SimPm {
    SimPm::new("pwb", REGION_BYTES).unwrap()
}

fn open(pm: &SimPm) -> Result<(Pwb, Recovered)> {
    Pwb::open(Arc::new(pm.clone()), SEGMENT_BYTES)
}

/// Recovery kept a prefix of whole batches holding every synced write.
fn verify(rec: &Recovered, model: &Model) -> std::result::Result<(), String> {
    let (w, c) = (rec.watermark, rec.last_seq);
    if c < model.synced {
        return Err(format!(
            "synced writes lost: kept up to {c}, synced up to {}",
            model.synced
        ));
    }
    if c as usize > model.history.len() || w > c {
        return Err(format!(
            "kept up to {c} above watermark {w}, of {}",
            model.history.len()
        ));
    }
    if c > 0 {
        let last = &model.history[c as usize - 1];
        if last.place + 1 != last.count {
            return Err(format!("kept up to {c}, inside a batch"));
        }
    }
    // Every operation in `w + 1..=c` is recovered, in order, but those
    // released by `R`, which may be missing.
    let mut records = rec.records.iter().peekable();
    for seq in w + 1..=c {
        let want = &model.history[seq as usize - 1];
        match records.peek() {
            Some(r) if r.seq == seq => {
                let got = Op {
                    payload: r.payload.clone(),
                    place: r.place,
                    count: r.count,
                };
                if &got != want {
                    return Err(format!("record {r:?}, expected {want:?} at {seq}"));
                }
                records.next();
            }
            _ if model.elsewhere.contains(&seq) && seq <= rec.released => {}
            _ => return Err(format!("operation {seq} missing, kept up to {c}")),
        }
    }
    if let Some(r) = records.next() {
        return Err(format!("record {} past {c}", r.seq));
    }
    Ok(())
}

/// Reopens `image`, verifies it, then (with `again`) has the reopened
/// buffer take a synced batch and checks two crash images of that; for one
/// seed in four also two images of every moment from the reopening on
/// (recovery's own writes included).
fn check(image: &SimPm, model: &Model, again: bool, seed: u64) -> std::result::Result<(), String> {
    if !again {
        let (_, rec) = open(image).map_err(|e| format!("reopen: {e}"))?;
        return verify(&rec, model);
    }
    if !mix(seed).is_multiple_of(4) {
        return reopen_and_write(image, model, seed, &Mutex::new(Model::default()));
    }
    // What a crash at each moment must keep: `model` until recovery is
    // done, then the kept prefix plus the new batch once it is synced.
    let now = Arc::new(Mutex::new(model.clone()));
    let failure = Arc::new(Mutex::new(None::<String>));
    let (m, f) = (now.clone(), failure.clone());
    image.set_hook(Some(Arc::new(move |pm: &SimPm, event| {
        let model = m.lock().clone();
        let moment = pm.stores() + pm.fences();
        for img in [
            pm.crash_image(0),
            pm.sampled_crash_image(mix(seed ^ moment)),
        ] {
            if let Err(e) = check(&img, &model, false, seed) {
                f.lock()
                    .get_or_insert(format!("crash at {event:?} after reopening: {e}"));
            }
        }
    })));
    let result = reopen_and_write(image, model, seed, &now);
    image.set_hook(None);
    if let Some(e) = failure.lock().take() {
        return Err(e);
    }
    result
}

fn reopen_and_write(
    image: &SimPm,
    model: &Model,
    seed: u64,
    now: &Mutex<Model>,
) -> std::result::Result<(), String> {
    let (pwb, rec) = open(image).map_err(|e| format!("reopen: {e}"))?;
    verify(&rec, model)?;
    let mut next = Model {
        history: model.history[..rec.last_seq as usize].to_vec(),
        synced: rec.last_seq,
        elsewhere: model.elsewhere.clone(),
    };
    *now.lock() = next.clone();
    let payloads = vec![b"after a crash".to_vec(), seed.to_le_bytes().to_vec()];
    let ops: Vec<(Lane, &[u8])> = payloads
        .iter()
        .map(|p| (seed as u32 % LANES, &p[..]))
        .collect();
    next.push(&payloads);
    now.lock().history = next.history.clone();
    let err = |e: Error| format!("after reopening: {e}");
    if pwb.append(&ops).map_err(err)?.is_none() {
        if rec.last_seq > rec.watermark {
            pwb.raise_watermark(rec.last_seq).map_err(err)?;
        }
        pwb.append(&ops)
            .map_err(err)?
            .ok_or("no room after a reopen")?;
    }
    pwb.sync().map_err(err)?;
    next.synced = next.history.len() as u64;
    *now.lock() = next.clone();
    for second in [image.crash_image(0), image.sampled_crash_image(seed)] {
        check(&second, &next, false, seed).map_err(|e| format!("second crash: {e}"))?;
    }
    Ok(())
}

/// How a run takes crash images.
#[derive(Debug, Clone, Copy)]
struct Plan {
    seed: u64,
    batches: usize,
    /// Largest payload.
    payload_bytes: usize,
    /// Chance that a batch is synced.
    sync_chance: f64,
    /// Moments with up to this many images are enumerated whole.
    exhaustive_up_to: u64,
    fault: Option<Fault>,
}

#[derive(Debug, Default)]
struct Outcome {
    images: u64,
    /// Moments whose images were all taken.
    whole_moments: u64,
    sampled_moments: u64,
    failures: Vec<String>,
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The crash images of one moment: all of them when few, else a sample (32
/// at a fence, 8 at a sampled store); stores are sampled one in four.
fn images_at(pm: &SimPm, event: PmEvent, plan: &Plan, moment: u64) -> (Vec<SimPm>, bool) {
    let n = pm.crash_image_count();
    let sample = match event {
        PmEvent::Fence => 32,
        PmEvent::Store { .. }
            if n <= plan.exhaustive_up_to || mix(plan.seed ^ moment).is_multiple_of(4) =>
        {
            8
        }
        PmEvent::Store { .. } => return (Vec::new(), false),
    };
    if n <= plan.exhaustive_up_to {
        return ((0..n).map(|i| pm.crash_image(i)).collect(), true);
    }
    let mut images: Vec<SimPm> = (0..sample)
        .map(|k| pm.sampled_crash_image(mix(plan.seed ^ moment << 8 ^ k)))
        .collect();
    images.push(pm.crash_image(0));
    images.push(pm.crash_image(n - 1));
    (images, false)
}

fn run(plan: Plan) -> Outcome {
    let pm = new_pm();
    let (pwb, _) = open(&pm).unwrap();
    if let Some(f) = plan.fault {
        pwb.inject(f);
    }
    let model = Arc::new(Mutex::new(Model::default()));
    let outcome = Arc::new(Mutex::new(Outcome::default()));
    let (m, o) = (model.clone(), outcome.clone());
    pm.set_hook(Some(Arc::new(move |pm: &SimPm, event| {
        let moment = pm.stores() + pm.fences();
        let (images, whole) = images_at(pm, event, &plan, moment);
        if images.is_empty() {
            return;
        }
        let model = m.lock().clone();
        let mut o = o.lock();
        o.images += images.len() as u64;
        if whole {
            o.whole_moments += 1;
        } else {
            o.sampled_moments += 1;
        }
        for (k, image) in images.iter().enumerate() {
            let seed = mix(moment ^ k as u64);
            if let Err(e) = check(image, &model, true, seed) {
                o.failures.push(format!(
                    "seed {}: moment {moment} ({event:?}), image {k}: {e}",
                    plan.seed
                ));
                break;
            }
        }
    })));
    let mut rng = StdRng::seed_from_u64(plan.seed);
    // The operations each handed-out segment holds.
    let mut held: HashMap<u32, Vec<u64>> = HashMap::new();
    for _ in 0..plan.batches {
        let count = rng.gen_range(1..=3);
        let payloads: Vec<Vec<u8>> = (0..count)
            .map(|_| {
                let len = rng.gen_range(1..=plan.payload_bytes);
                (0..len).map(|_| rng.gen()).collect()
            })
            .collect();
        let ops: Vec<(Lane, &[u8])> = payloads
            .iter()
            .map(|p| (rng.gen_range(0..LANES), &p[..]))
            .collect();
        let before = model.lock().history.len() as u64;
        model.lock().push(&payloads);
        loop {
            if let Some(a) = pwb.append(&ops).unwrap() {
                for (k, loc) in a.locs.iter().enumerate() {
                    held.entry(loc.segment)
                        .or_default()
                        .push(a.first_seq + k as u64);
                }
                break;
            }
            if rng.gen_bool(0.5) {
                // Make room by `R`: declare one or two segments' operations
                // durable elsewhere (the engine: every leaf naming them was
                // flushed), persist `R`, release them.
                let mut segs: Vec<u32> = held.keys().copied().collect();
                segs.sort_unstable();
                let n = rng.gen_range(1..=2.min(segs.len()));
                let chosen: Vec<(u32, u32)> = (0..n)
                    .map(|_| segs.remove(rng.gen_range(0..segs.len())))
                    .filter_map(|i| Some((i, pwb.generation(i)?)))
                    .collect();
                pwb.persist_marks(None, &chosen).unwrap();
                pwb.release_segments(&chosen);
                {
                    // Not held across the buffer's next store: the hook
                    // takes it.
                    let mut m = model.lock();
                    for (i, _) in &chosen {
                        m.elsewhere.extend(held.remove(i).unwrap_or_default());
                    }
                }
                if rng.gen_bool(0.5) {
                    pwb.prepare_released().unwrap();
                }
                continue;
            }
            // Make room: declare a random earlier batch end durable elsewhere.
            let ends = model.lock().batch_ends(pwb.watermark(), before);
            let Some(&w) = ends.get(rng.gen_range(0..ends.len().max(1))) else {
                continue;
            };
            pwb.raise_watermark(w).unwrap();
            held.retain(|_, ops| ops.iter().any(|&s| s > w));
            // Half the time the released segments are prepared at once,
            // fenced outside the state lock (as the engine does after a
            // flush); otherwise by the next hand-out, under it.
            if rng.gen_bool(0.5) {
                pwb.prepare_released().unwrap();
            }
        }
        if rng.gen_bool(plan.sync_chance) {
            pwb.sync().unwrap();
            let mut m = model.lock();
            m.synced = m.history.len() as u64;
        }
    }
    pm.set_hook(None);
    Arc::try_unwrap(outcome).unwrap().into_inner()
}

fn plan(seed: u64) -> Plan {
    Plan {
        seed,
        batches: 40,
        payload_bytes: 48,
        sync_chance: 0.4,
        exhaustive_up_to: 64,
        fault: None,
    }
}

#[test]
fn every_crash_image_reopens_to_a_prefix_holding_every_synced_write() {
    for seed in 0..4 {
        let out = run(plan(seed));
        assert!(
            out.failures.is_empty(),
            "{:#?}",
            &out.failures[..out.failures.len().min(5)]
        );
        assert!(
            out.images > 500 && out.sampled_moments > 0,
            "seed {seed}: {out:?}"
        );
    }
}

#[test]
fn every_image_of_every_moment_of_a_small_buffer() {
    let plan = Plan {
        seed: 7,
        batches: 12,
        payload_bytes: 8,
        sync_chance: 0.7,
        exhaustive_up_to: 1 << 14,
        fault: None,
    };
    let out = run(plan);
    assert!(out.failures.is_empty(), "{:#?}", out.failures);
    assert_eq!(out.sampled_moments, 0, "every moment enumerated: {out:?}");
    assert!(out.whole_moments > 20 && out.images > 1000, "{out:?}");
}

/// Seeds out of ten whose run the suite fails with `fault` injected.
fn caught(fault: Fault) -> usize {
    let n = (0..10)
        .filter(|&seed| {
            let out = run(Plan {
                fault: Some(fault),
                ..plan(100 + seed)
            });
            if let Some(f) = out.failures.first() {
                eprintln!("{fault:?}: {f}");
            }
            !out.failures.is_empty()
        })
        .count();
    eprintln!("{fault:?} caught in {n} of 10 seeds");
    n
}

#[test]
fn the_suite_catches_a_missing_record_flush() {
    assert_eq!(caught(Fault::RecordFlush), 10);
}

#[test]
fn the_suite_catches_a_missing_sync_fence() {
    assert_eq!(caught(Fault::SyncFence), 10);
}

#[test]
fn the_suite_catches_a_missing_fence_before_segments_are_released() {
    assert_eq!(caught(Fault::WatermarkFence), 10);
}

#[test]
fn a_clean_reopen_keeps_everything_synced_and_reads_by_location() {
    let pm = new_pm();
    let (pwb, rec) = open(&pm).unwrap();
    assert_eq!((rec.last_seq, rec.records.len()), (0, 0));
    let a = pwb.append(&[(0, b"one"), (1, b"two")]).unwrap().unwrap();
    let b = pwb.append(&[(0, b"three")]).unwrap().unwrap();
    assert_eq!((a.first_seq, b.first_seq), (1, 3));
    assert_eq!(pwb.read(a.locs[1]).unwrap(), (2, b"two".to_vec()));
    pwb.sync().unwrap();
    drop(pwb);
    let (pwb, rec) = open(&pm.crash_image(0)).unwrap();
    let got: Vec<_> = rec
        .records
        .iter()
        .map(|r| (r.seq, r.payload.clone()))
        .collect();
    assert_eq!(
        got,
        vec![
            (1, b"one".to_vec()),
            (2, b"two".to_vec()),
            (3, b"three".to_vec())
        ]
    );
    assert_eq!(pwb.read(b.locs[0]).unwrap(), (3, b"three".to_vec()));
    let next = pwb.append(&[(0, b"four")]).unwrap().unwrap();
    assert_eq!(next.first_seq, 4);
    assert_ne!(
        next.locs[0].segment, b.locs[0].segment,
        "recovered segments are sealed"
    );
    assert_ne!(next.locs[0].to_u64(), b.locs[0].to_u64());
}

#[test]
fn the_watermark_releases_segments_between_batches() {
    let pm = new_pm();
    let (pwb, _) = open(&pm).unwrap();
    let big = [7u8; 200];
    for _ in 0..5 {
        assert!(pwb.append(&[(0, &big[..])]).unwrap().is_some());
    }
    assert!(
        pwb.append(&[(0, &big[..])]).unwrap().is_none(),
        "five segments, five records"
    );
    assert!(pwb.raise_watermark(6).is_err(), "past the last operation");
    assert_eq!(pwb.raise_watermark(2).unwrap(), 2);
    assert_eq!(pwb.segments(), (5, 2));
    pwb.sync().unwrap();
    let (_, rec) = open(&pm.crash_image(0)).unwrap();
    assert_eq!((rec.watermark, rec.last_seq, rec.records.len()), (2, 5, 3));
}

/// Released segments prepared ahead (`prepare_released`, one fence for
/// all) are handed out without a fence; without it, the hand-out fences.
#[test]
fn segments_prepared_after_a_release_are_handed_out_without_a_fence() {
    for ahead in [true, false] {
        let pm = new_pm();
        let (pwb, _) = open(&pm).unwrap();
        let big = [7u8; 200];
        for _ in 0..5 {
            assert!(pwb.append(&[(0, &big[..])]).unwrap().is_some());
        }
        // Every free segment is taken: the next hand-out needs a release.
        assert_eq!(pwb.raise_watermark(4).unwrap(), 4);
        if ahead {
            let before = pm.fences();
            pwb.prepare_released().unwrap();
            assert_eq!(pm.fences(), before + 1, "one fence for all four");
        }
        let before = pm.fences();
        for _ in 0..4 {
            assert!(pwb.append(&[(0, &big[..])]).unwrap().is_some());
        }
        let fenced = pm.fences() - before;
        assert_eq!(fenced, u64::from(!ahead), "ahead {ahead}");
        pwb.sync().unwrap();
        let (_, rec) = open(&pm.crash_image(0)).unwrap();
        assert_eq!((rec.watermark, rec.last_seq, rec.records.len()), (4, 9, 5));
    }
}

#[test]
fn damage_below_the_tail_is_corruption_naming_the_offset() {
    let pm = new_pm();
    let (pwb, _) = open(&pm).unwrap();
    let a = pwb.append(&[(0, b"payload")]).unwrap().unwrap();
    pwb.sync().unwrap();
    pwb.sync().unwrap();
    pwb.append(&[(0, b"more")]).unwrap().unwrap();
    pwb.sync().unwrap();
    let at = pwb.geometry.segment_at(a.locs[0].segment) + RECORD_HEADER_BYTES;
    pm.write(at, b"X").unwrap();
    match open(&pm) {
        Err(Error::Corruption { file, offset, .. }) => {
            assert_eq!(
                (file.to_str(), offset),
                (Some("pwb"), at - RECORD_HEADER_BYTES)
            );
        }
        other => panic!("expected corruption, got {:?}", other.map(|r| r.1)),
    }
    assert!(pwb.read(a.locs[0]).unwrap_err().is_corruption());
}

#[test]
fn bad_arguments_are_errors() {
    let pm = new_pm();
    let (pwb, _) = open(&pm).unwrap();
    assert!(pwb.append(&[]).is_err());
    assert!(pwb.append(&[(0, b"")]).is_err());
    let too_big = vec![0u8; pwb.max_payload() + 1];
    assert!(pwb.append(&[(0, &too_big[..])]).is_err());
    let tiny = SimPm::new("tiny", 128).unwrap();
    assert!(Pwb::open(Arc::new(tiny), SEGMENT_BYTES).is_err());
}

#[test]
fn a_sync_covers_batches_other_threads_appended() {
    let pm = SimPm::new("pwb", 64 + 64 + 5 * 4096).unwrap();
    let (pwb, _) = Pwb::open(Arc::new(pm.clone()), 4096).unwrap();
    let synced: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4u32)
            .map(|t| {
                let pwb = &pwb;
                s.spawn(move || {
                    let mut last = 0;
                    for i in 0..20u32 {
                        let p = [t as u8, i as u8];
                        let a = pwb.append(&[(t, &p[..])]).unwrap().expect("room");
                        if i % 5 == 4 {
                            pwb.sync().unwrap();
                            last = a.first_seq;
                        }
                    }
                    last
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let (_, rec) = open(&pm.crash_image(0)).unwrap();
    let need = synced.into_iter().max().unwrap();
    assert!(
        rec.last_seq >= need,
        "kept {} of synced {need}",
        rec.last_seq
    );
    let seqs: Vec<u64> = rec.records.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, (1..=rec.last_seq).collect::<Vec<_>>());
}

/// Append-and-sync rates on a mapped file, per fence mode and thread count
/// (a measurement, not a check: `cargo test -p sluicedb --lib --release
/// pwb_sync_rate -- --ignored --nocapture`; `LIGHTKV_PM_DIR` picks the
/// directory).
#[test]
#[ignore]
fn pwb_sync_rate() {
    use crate::pm::{FenceMode, MmapPm};
    let dir = std::env::var_os("LIGHTKV_PM_DIR").map_or_else(std::env::temp_dir, Into::into);
    let value = [7u8; 1024];
    for mode in [FenceMode::Msync, FenceMode::Cache] {
        for threads in [1u32, 4] {
            let path = dir.join(format!("pwb-rate-{}", std::process::id()));
            let _ = std::fs::remove_file(&path);
            let pm = MmapPm::open(&path, 64 << 20, mode).unwrap();
            let (pwb, _) = Pwb::open(Arc::new(pm), 1 << 20).unwrap();
            let per_thread = if mode == FenceMode::Msync {
                300
            } else {
                20_000
            } / threads;
            let start = std::time::Instant::now();
            std::thread::scope(|s| {
                for t in 0..threads {
                    let pwb = &pwb;
                    s.spawn(move || {
                        for _ in 0..per_thread {
                            pwb.append(&[(t, &value[..])]).unwrap().expect("room");
                            pwb.sync().unwrap();
                        }
                    });
                }
            });
            let secs = start.elapsed().as_secs_f64();
            let n = f64::from(per_thread * threads);
            println!(
                "{mode:?} {threads} thread(s): {n} synced 1 KiB writes in {secs:.3} s, {:.0}/s, {:.1} us each",
                n / secs,
                secs * 1e6 / n
            );
            let _ = std::fs::remove_file(&path);
        }
    }
}
