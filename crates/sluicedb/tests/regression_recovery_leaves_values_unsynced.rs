//! After a process is killed, its unsynced appends are still in the page
//! cache: recovery reads them, replays the journal's pointers into them,
//! and writes tables that point at them. Those value bytes must be durable
//! before the recovered manifest names the tables: a power loss right
//! after the open must not leave an index pointing at values that never
//! reached the disk (issue 50, found reviewing the hash layout's opens).

mod common;

use common::*;
use sluicedb::fs::MemFs;
use sluicedb::{Db, JournalMode, Options, WriteOptions};

fn check(name: &str, opts: &dyn Fn(&MemFs) -> Options) {
    for seed in 0..4u64 {
        let fs = MemFs::new();
        let db = Db::open("/db", opts(&fs)).unwrap();
        let mut rng = Rng::new(seed);
        let mut writes = Vec::new();
        for i in 0..60u64 {
            let w = Write {
                ops: vec![(key(&mut rng, 30), Some(value(&mut rng, i, 300)))],
                sync: i == 20,
            };
            db.write_opt(&WriteOptions { sync: w.sync }, w.batch())
                .unwrap();
            writes.push(w);
        }
        // Killed: the page cache keeps every written byte, unsynced.
        let killed = fs.kill_image();
        drop(db);
        let recovered = Db::open("/db", opts(&killed)).unwrap();
        let got = read_all(&recovered).unwrap();
        let n = matching_prefix(&writes, 21, writes.len(), &got)
            .unwrap_or_else(|| panic!("{name} seed {seed}: recovery is not a prefix"));
        // Power lost right after the open returned.
        let power = killed.crash_image();
        drop(recovered);
        let db = Db::open("/db", opts(&power))
            .unwrap_or_else(|e| panic!("{name} seed {seed}: open after power loss: {e}"));
        let again = read_all(&db)
            .unwrap_or_else(|e| panic!("{name} seed {seed}: scan after power loss: {e}"));
        assert!(
            matching_prefix(&writes, n.min(21), writes.len(), &again).is_some(),
            "{name} seed {seed}: not a prefix after power loss"
        );
        db.verify()
            .unwrap_or_else(|e| panic!("{name} seed {seed}: verify after power loss: {e}"));
    }
}

#[test]
fn recovered_values_are_durable_before_the_manifest_names_them() {
    let big = |o: Options| o.write_buffer_size_bytes(1 << 20);
    check("hash, separated when written", &|fs| {
        big(tiny_options(fs, 1))
    });
    check("hash, separated at flush", &|fs| big(tiny_options(fs, 6)));
    check("log with the engine journal", &|fs| {
        big(tiny_options(fs, 3).journal_mode(JournalMode::Journal))
    });
    check("log as journal", &|fs| big(tiny_options(fs, 3)));
    check("value tables", &|fs| big(tiny_options(fs, 4)));
    check("unified", &|fs| big(tiny_options(fs, 10)));
}
