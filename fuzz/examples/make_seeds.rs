//! Writes the seed corpora of the fuzz targets: files of small databases
//! of every preset that the engine writes in memory, and blocks and value
//! pointers cut from them (`sluicedb::fuzzing::seeds`), as
//! `corpus/<target>/seed-*`. Run from `fuzz/`:
//! `cargo run --example make_seeds`.

use std::fs;
use std::path::Path;

fn main() -> std::io::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let mut n = 0;
    for (target, name, bytes) in sluicedb::fuzzing::seeds() {
        let dir = root.join(target);
        fs::create_dir_all(&dir)?;
        fs::write(dir.join(name), bytes)?;
        n += 1;
    }
    // The RESP target's first byte picks the limits (0: the defaults).
    let resp = root.join("resp");
    fs::create_dir_all(&resp)?;
    for (name, bytes) in [
        (
            "seed-multibulk",
            &b"\0*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n"[..],
        ),
        ("seed-inline", b"\0SET k \"a\\x41\\n\" 'it\\'s'\r\nPING\n"),
        (
            "seed-unauthenticated",
            b"\x08*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n",
        ),
        ("seed-limits", b"\x07*4\r\n$100\r\n"),
    ] {
        fs::write(resp.join(name), bytes)?;
        n += 1;
    }
    println!("{n} seeds under {}", root.display());
    Ok(())
}
