//! `SAVE`, `BGSAVE` and `LASTSAVE` with `checkpoint-dir`: each save is a
//! checkpoint that a server opens with every key written before it, and
//! only the newest whole save is kept.

mod common;

use std::path::{Path, PathBuf};

use common::TestServer;
use redis::Commands;

/// The save directories in `dir`, oldest first.
fn saves(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    out.sort();
    out
}

fn info_persistence(c: &mut redis::Connection) -> String {
    redis::cmd("INFO").arg("persistence").query(c).unwrap()
}

#[test]
fn save_and_bgsave_write_checkpoints_and_keep_the_newest() {
    let saves_dir = tempfile::tempdir().unwrap();
    let target = saves_dir.path().join("saves");
    let server = TestServer::start(|c| c.checkpoint_dir = Some(target.clone()));
    let mut c = server.client();
    for i in 0..300 {
        let _: () = c.set(format!("k{i}"), vec![b'x'; 500]).unwrap();
    }
    let before: i64 = redis::cmd("LASTSAVE").query(&mut c).unwrap();
    let ok: String = redis::cmd("SAVE").query(&mut c).unwrap();
    assert_eq!(ok, "OK");
    let first = saves(&target);
    assert_eq!(first.len(), 1, "{first:?}");
    let after: i64 = redis::cmd("LASTSAVE").query(&mut c).unwrap();
    assert!(after >= before);

    let _: () = c.set("late", "yes").unwrap();
    let started: String = redis::cmd("BGSAVE").query(&mut c).unwrap();
    assert_eq!(started, "Background saving started");
    // Done once INFO says so (no timing assumed).
    while info_persistence(&mut c).contains("rdb_bgsave_in_progress:1") {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let info = info_persistence(&mut c);
    assert!(info.contains("rdb_last_bgsave_status:ok"), "{info}");
    let second = saves(&target);
    assert_eq!(second.len(), 1, "only the newest is kept: {second:?}");
    assert_ne!(second, first);
    let _: () = c.set("after", "no").unwrap();
    drop(c);
    drop(server);

    // The save serves as a database of its own.
    let copy = tempfile::tempdir().unwrap();
    let db = copy.path().join("db");
    std::fs::rename(&second[0], &db).unwrap();
    let restored = TestServer::start_in(&db, |_| {});
    let mut c = redis::Client::open(format!("redis://{}/", restored.addr()))
        .unwrap()
        .get_connection()
        .unwrap();
    for i in 0..300 {
        assert_eq!(
            c.get::<_, Vec<u8>>(format!("k{i}")).unwrap(),
            vec![b'x'; 500]
        );
    }
    assert_eq!(
        c.get::<_, Option<String>>("late").unwrap().as_deref(),
        Some("yes")
    );
    assert_eq!(c.get::<_, Option<String>>("after").unwrap(), None);
    restored.shutdown().unwrap();
}
