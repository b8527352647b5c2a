//! The README's library example, compiled and run: the lines between the
//! markers below must be the README's first `rust` block, word for word
//! (`the_readme_shows_this_example`), so the README cannot drift from an
//! API that compiles.

/// The README example, run in a directory of its own (it opens `my-db`
/// relative to the working directory; this binary holds no other test
/// that depends on it).
#[test]
#[rustfmt::skip] // kept as the README prints it
fn the_readme_example_compiles_and_runs() -> sluicedb::Result<()> {
    let dir = tempfile::tempdir().unwrap();
    std::env::set_current_dir(dir.path()).unwrap();
    // README example start
    use sluicedb::{Db, Options, ReadOptions, WriteBatch, WriteOptions};

    let db = Db::open("my-db", Options::default())?;
    db.put("user:1", "ada")?;
    let mut batch = WriteBatch::new();
    batch.put("user:2", "grace").delete("user:1");
    db.write_opt(&WriteOptions::synced(), batch)?;      // durable when it returns
    let snap = db.snapshot();
    for pair in db.prefix("user:").rev() {
        let (k, v) = pair?;
        println!("{} = {}", String::from_utf8_lossy(&k), String::from_utf8_lossy(&v));
    }
    assert_eq!(db.get_opt(&ReadOptions::at(&snap), "user:2")?, Some(b"grace".to_vec()));
    // README example end
    assert!(dir.path().join("my-db").join("CURRENT").exists());
    Ok(())
}

#[test]
fn the_readme_shows_this_example() {
    let readme = include_str!("../../../README.md");
    let start = readme
        .find("```rust\n")
        .expect("a rust block in the README")
        + 8;
    let len = readme[start..].find("```").expect("the block ends");
    let shown = &readme[start..start + len];
    let me = include_str!("readme_example.rs");
    let from = me.find("// README example start\n").unwrap() + "// README example start\n".len();
    let to = me.find("    // README example end").unwrap();
    let here: String = me[from..to]
        .lines()
        .map(|l| format!("{}\n", l.strip_prefix("    ").unwrap_or(l)))
        .collect();
    assert_eq!(shown, here, "README's example and this test's differ");
}
