//! After an ordinary kill, `verify` reported corruption until GC collected
//! the file: a kill could leave a 0-byte new value log head, or a torn tail
//! that recovery sealed without cutting (outside test of issue 15).
//! Recovery now removes files that hold no record and cuts torn tails.

mod wisckey_files;

use std::path::Path;

use sluicedb::fs::{Fs, MemFs};
use sluicedb::{Db, WriteOptions};
use wisckey_files::*;

#[test]
fn regression_verify_passes_after_a_torn_value_log_tail() {
    for seed in 0..16 {
        let fs = MemFs::new();
        let db = Db::open("/db", wisckey(&fs)).unwrap();
        for i in 0..40 {
            db.put_opt(&WriteOptions::synced(), key(i), value(i))
                .unwrap();
        }
        for i in 40..45 {
            db.put(key(i), value(i)).unwrap(); // left in the buffer...
        }
        // ...and part of it handed to the OS, unsynced, when the log rolls.
        let image = fs.torn_crash_image(seed);
        drop(db);
        let db = Db::open("/db", wisckey(&image)).unwrap();
        db.verify()
            .unwrap_or_else(|e| panic!("seed {seed}: verify after a torn tail: {e}"));
        for i in 0..40 {
            assert_eq!(db.get(key(i)).unwrap(), Some(value(i)), "seed {seed}");
        }
    }
}

#[test]
fn regression_verify_passes_after_an_empty_value_log_head() {
    let fs = MemFs::new();
    filled(&fs);
    // A head created just before the kill, its header never written.
    let empty = Path::new("/db").join("999999.vlog");
    drop(fs.create(&empty).unwrap());
    let db = Db::open("/db", wisckey(&fs)).unwrap();
    db.verify().unwrap();
    assert!(!fs.exists(&empty), "the empty head is removed");
    assert_eq!(db.get(key(7)).unwrap(), Some(value(7)));
}
