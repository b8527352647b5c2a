//! A sealed `.vlog` that live keys point into was deleted: open and
//! `verify` passed while `get` failed for the keys in it (outside test of
//! issue 15). The manifest now names every sealed value log file with its
//! length and an open checks them; `verify` reads every live pair through
//! its pointer.

mod wisckey_files;

use sluicedb::fs::Fs;
use sluicedb::Db;
use wisckey_files::*;

#[test]
fn regression_open_refuses_a_missing_sealed_value_log_file() {
    let fs = sluicedb::fs::MemFs::new();
    let files = filled(&fs);
    assert!(files.len() >= 4, "{files:?}");
    // The first reopen names the sealed files in its manifest.
    drop(Db::open("/db", wisckey(&fs)).unwrap());
    let victim = &files[1];
    fs.remove(victim).unwrap();
    let file = corrupt_file(Db::open("/db", wisckey(&fs)), "open without a sealed file");
    assert_eq!(&file, victim);
}

#[test]
fn regression_verify_checks_every_pointer() {
    let fs = sluicedb::fs::MemFs::new();
    let files = filled(&fs);
    let db = Db::open("/db", wisckey(&fs)).unwrap();
    // Lost while open, behind the open's back (before anything read it).
    fs.remove(&files[1]).unwrap();
    let file = corrupt_file(db.verify(), "verify without a sealed file");
    assert_eq!(&file, &files[1]);
    drop(db);
    // Whole, it checks every table entry, record and live pair.
    let fs = sluicedb::fs::MemFs::new();
    filled(&fs);
    let db = Db::open("/db", wisckey(&fs)).unwrap();
    assert!(db.verify().unwrap() >= 2 * u64::from(KEYS));
}
