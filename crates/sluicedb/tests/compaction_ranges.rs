//! Compactions that install their outputs a key range at a time
//! (`docs/design.md`, "Compactions installed a key range at a time"): the
//! leveled shape swaps finished outputs for the next level's inputs they
//! replace while the merge goes on. A crash between two such installs
//! leaves the upper inputs in place beside outputs holding the same
//! entries; reads must see each entry once, and the next merge must write
//! it once.

mod common;

use common::*;
use sluicedb::fs::MemFs;
use sluicedb::{Db, Preset, WriteOptions};

const KEYS: u64 = 600;

fn open(fs: &MemFs) -> Db {
    Db::open("/db", preset_options(fs, Preset::LevelDb)).expect("open")
}

/// Puts (some empty) and deletes over a small key space; returns the
/// expected contents.
fn write(db: &Db, rng: &mut Rng, n: u64, serial: &mut u64, model: &mut State) {
    for _ in 0..n {
        *serial += 1;
        let k = key(rng, KEYS);
        let v = (!rng.chance(10)).then(|| value(rng, *serial, 200));
        let w = Write {
            ops: vec![(k, v)],
            sync: false,
        };
        db.write_opt(&WriteOptions::default(), w.batch())
            .expect("write");
        w.apply(model);
    }
}

#[test]
fn a_merge_stopped_between_its_ranges_leaves_twins_read_and_merged_once() {
    for_seeds(seeds(11, 2), |seed| {
        let fs = MemFs::new();
        let mut rng = Rng::new(seed);
        let mut model = State::new();
        let mut serial = 0;
        let db = open(&fs);
        write(&db, &mut rng, 3000, &mut serial, &mut model);
        db.flush().expect("flush");
        db.compact_range(None, None).expect("compact");
        assert!(
            db.stats().compaction.ranges_installed > 0,
            "no compaction installed a range early: the test shows nothing"
        );
        assert_eq!(
            read_all(&db).expect("read"),
            model,
            "after the first merges"
        );

        // More versions over everything, then one manual compaction of the
        // whole tree with a crash image at every file operation.
        write(&db, &mut rng, 1500, &mut serial, &mut model);
        db.flush().expect("flush");
        fs.capture_images(false);
        db.compact_range(None, None).expect("compact");
        let images = fs.take_images();
        assert_eq!(
            read_all(&db).expect("read"),
            model,
            "after the second merges"
        );
        drop(db);

        // Every image holds the model (everything was flushed first); a
        // merge of the whole tree keeps it, dropping the twins it meets.
        // One image in ten: a range stays installed beside its upper
        // inputs for the many operations that write the next outputs.
        let mut twins = 0;
        for (op, image) in images.iter().step_by(10) {
            let db = Db::open("/db", preset_options(image, Preset::LevelDb))
                .unwrap_or_else(|e| panic!("image after op {op}: open: {e}"));
            assert_eq!(
                read_all(&db).expect("read"),
                model,
                "image after op {op}: contents"
            );
            db.compact_range(None, None)
                .unwrap_or_else(|e| panic!("image after op {op}: compact: {e}"));
            twins += db.stats().compaction.twins_dropped;
            assert_eq!(
                read_all(&db).expect("read"),
                model,
                "image after op {op}: contents after merging"
            );
            for (k, v) in model.iter().take(50) {
                assert_eq!(db.get(k).expect("get").as_deref(), Some(v.as_slice()));
            }
        }
        assert!(
            twins > 0,
            "no image held twins ({} images): the test shows nothing",
            images.len()
        );
    });
}
