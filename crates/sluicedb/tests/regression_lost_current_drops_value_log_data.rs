//! With the value log as the journal, synced writes live only in `.vlog`
//! files until a flush; with `CURRENT` lost, an open with defaults created
//! a new database and swept them away (outside test of issue 15). The
//! guard against creating over a database now counts value store files.

mod wisckey_files;

use std::path::Path;

use sluicedb::fs::Fs;
use sluicedb::Db;
use wisckey_files::*;

#[test]
fn regression_lost_current_refuses_to_create_over_value_log_files() {
    let fs = sluicedb::fs::MemFs::new();
    let files = filled(&fs);
    let before: Vec<_> = files.iter().map(|f| fs.contents(f)).collect();
    fs.remove(&Path::new("/db").join("CURRENT")).unwrap();
    let file = corrupt_file(Db::open("/db", wisckey(&fs)), "open without CURRENT");
    assert_eq!(file, Path::new("/db").join("CURRENT"));
    let after: Vec<_> = files.iter().map(|f| fs.contents(f)).collect();
    assert_eq!(before, after, "the value log files are untouched");
}
