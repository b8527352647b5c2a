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

/// Every kind of file a database writes after its first manifest stops a
/// create over a directory that lost `CURRENT`: value tables (`.vst`) and
/// the unified shape's hash index checkpoints (`.hix`) did not, and a
/// new database would have reused their numbers.
#[test]
fn regression_lost_current_refuses_to_create_over_any_data_file() {
    use std::sync::Arc;

    for name in [
        "000003.sst",
        "000004.log",
        "000005.vlog",
        "000006.vseg",
        "000007.vst",
        "000009.hix",
    ] {
        let fs = sluicedb::fs::MemFs::new();
        let dir = Path::new("/db");
        fs.create_dir_all(dir).unwrap();
        let path = dir.join(name);
        let mut f = fs.create(&path).unwrap();
        f.append(b"data of a database whose CURRENT was lost")
            .unwrap();
        f.sync().unwrap();
        drop(f);
        let opts = sluicedb::Options::default().fs(Arc::new(fs.clone()));
        let file = corrupt_file(Db::open(dir, opts), name);
        assert_eq!(file, dir.join("CURRENT"), "{name}");
        assert_eq!(
            fs.contents(&path).unwrap(),
            b"data of a database whose CURRENT was lost",
            "{name} untouched"
        );
        assert_eq!(fs.paths().len(), 1, "{name}: nothing created beside it");
    }
}
