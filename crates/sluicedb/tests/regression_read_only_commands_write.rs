//! Read-only commands wrote: `info`, `get`, `scan` and `verify` rolled the
//! manifest, started a journal, left a value log head per open and started
//! GC (issue 15). They now open with `Options::read_only`: recovery in
//! memory, the directory byte for byte as it was, under every separation
//! variant.

mod common;

use std::path::PathBuf;

use common::*;
use sluicedb::fs::MemFs;
use sluicedb::{Db, Error, WriteOptions};

fn files(fs: &MemFs) -> Vec<(PathBuf, Option<Vec<u8>>)> {
    let mut v: Vec<_> = fs
        .paths()
        .into_iter()
        .map(|p| (p.clone(), fs.contents(&p)))
        .collect();
    v.sort();
    v
}

#[test]
fn read_only_open_changes_nothing_and_sees_every_write() {
    for variant in 0..8 {
        let fs = MemFs::new();
        let mut rng = Rng::new(variant);
        let db = Db::open("/db", tiny_options(&fs, variant)).unwrap();
        for i in 0..400u64 {
            let k = key(&mut rng, 60);
            let v = value(&mut rng, i, 90);
            db.put_opt(&WriteOptions { sync: i % 10 == 0 }, &k, &v)
                .unwrap();
        }
        // A crash: journals and value files hold writes no table has yet.
        let image = fs.crash_image();
        drop(db);
        let before = files(&image);
        let synced = {
            let db = Db::open("/db", tiny_options(&image, variant).read_only(true)).unwrap();
            let got = read_all(&db).unwrap();
            db.verify()
                .unwrap_or_else(|e| panic!("variant {variant}: verify read-only: {e}"));
            let w = db.put("k", "v");
            assert!(
                matches!(w, Err(Error::ReadOnly)),
                "variant {variant}: {w:?}"
            );
            assert!(matches!(db.flush(), Err(Error::ReadOnly)));
            assert!(matches!(db.gc(), Err(Error::ReadOnly)));
            assert!(matches!(db.compact_range(None, None), Err(Error::ReadOnly)));
            db.wait_for_background().unwrap();
            got
        };
        assert_eq!(
            files(&image),
            before,
            "variant {variant}: a read-only open wrote"
        );
        // It reads what a writable open recovers.
        let db = Db::open("/db", tiny_options(&image, variant)).unwrap();
        assert_eq!(read_all(&db).unwrap(), synced, "variant {variant}");
        assert!(!synced.is_empty());
    }
}

#[test]
fn read_only_open_needs_a_database() {
    let fs = MemFs::new();
    let r = Db::open("/db", tiny_options(&fs, 0).read_only(true));
    assert!(matches!(r, Err(Error::NotFound(_))), "{r:?}");
    assert!(fs.paths().is_empty());
}
