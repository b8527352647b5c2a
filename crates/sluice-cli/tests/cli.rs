//! The `sluice` operator commands, run as a user runs them.

use std::path::Path;
use std::process::{Command, Output};

fn sluice(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .output()
        .expect("sluice runs")
}

fn ok(args: &[&str]) -> String {
    let o = sluice(args);
    assert!(
        o.status.success(),
        "sluice {args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).expect("utf-8 output")
}

/// Runs a command that must fail; returns its error output.
fn fails(args: &[&str]) -> String {
    let o = sluice(args);
    assert!(!o.status.success(), "sluice {args:?} should have failed");
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn db_arg(p: &Path) -> String {
    p.to_str().expect("utf-8 temp path").to_string()
}

/// Bare `sluice` prints its help and touches nothing: it once ran the
/// benchmark and wrote about 100 MB into `./sluice-data`.
#[test]
fn bare_sluice_prints_help_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Usage:") && text.contains("bench"), "{text}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn put_get_delete_and_scan() {
    let dir = tempfile::tempdir().unwrap();
    let db = db_arg(&dir.path().join("db"));
    let db = db.as_str();
    // put needs an existing database unless --create.
    let e = fails(&["put", "--db", db, "a", "1"]);
    assert!(e.contains("no database here"), "{e}");
    ok(&["put", "--db", db, "--create", "user:1", "ada"]);
    ok(&["put", "--db", db, "user:2", "grace"]);
    ok(&["put", "--db", db, "user:3", "linus"]);
    ok(&["put", "--db", db, "zeta", "last"]);
    // A binary key and value through --hex.
    ok(&["put", "--db", db, "--hex", "00ff", "0a0b"]);
    assert_eq!(ok(&["get", "--db", db, "user:2"]), "grace\n");
    assert_eq!(ok(&["get", "--db", db, "--hex", "00ff"]), "0a0b\n");
    // Into a pipe a value is its own bytes, --raw or not; --raw and --hex
    // exclude each other.
    ok(&["put", "--db", db, "bin", "a\tb"]);
    assert_eq!(ok(&["get", "--db", db, "--raw", "bin"]), "a\tb\n");
    assert_eq!(ok(&["get", "--db", db, "bin"]), "a\tb\n");
    fails(&["get", "--db", db, "--raw", "--hex", "00ff"]);
    ok(&["delete", "--db", db, "bin"]);
    let e = fails(&["get", "--db", db, "nobody"]);
    assert!(e.contains("key nobody not found"), "{e}");

    let all = ok(&["scan", "--db", db]);
    assert_eq!(
        all,
        "\\x00\\xff\t\\x0a\\x0b\nuser:1\tada\nuser:2\tgrace\nuser:3\tlinus\nzeta\tlast\n"
    );
    let some = ok(&["scan", "--db", db, "--prefix", "user:", "--limit", "2"]);
    assert_eq!(some, "user:1\tada\nuser:2\tgrace\n");
    let range = ok(&["scan", "--db", db, "--from", "user:2", "--to", "zeta"]);
    assert_eq!(range, "user:2\tgrace\nuser:3\tlinus\n");
    let hex = ok(&["scan", "--db", db, "--hex", "--to", "75"]);
    assert_eq!(hex, "00ff\t0a0b\n");

    ok(&["delete", "--db", db, "user:2"]);
    let e = fails(&["get", "--db", db, "user:2"]);
    assert!(e.contains("not found"), "{e}");
    let left = ok(&["scan", "--db", db, "--prefix", "user:"]);
    assert_eq!(left, "user:1\tada\nuser:3\tlinus\n");
    // A prefix with a range: the keys in both, also when they do not meet,
    // and a prefix of 0xff bytes (no key ends its range).
    let both = ok(&["scan", "--db", db, "--prefix", "user:", "--from", "user:2"]);
    assert_eq!(both, "user:3\tlinus\n");
    let none = ok(&["scan", "--db", db, "--prefix", "user:", "--from", "zeta"]);
    assert_eq!(none, "");
    let none = ok(&["scan", "--db", db, "--prefix", "zeta", "--to", "user:"]);
    assert_eq!(none, "");
    ok(&["put", "--db", db, "--hex", "ffff01", "02"]);
    let ff = ok(&["scan", "--db", db, "--hex", "--prefix", "ffff"]);
    assert_eq!(ff, "ffff01\t02\n");
    // count: the keys scan would print, without their values.
    assert_eq!(ok(&["count", "--db", db]), "5\n");
    assert_eq!(ok(&["count", "--db", db, "--prefix", "user:"]), "2\n");
    assert_eq!(
        ok(&["count", "--db", db, "--from", "user:3", "--to", "zz"]),
        "2\n"
    );
    assert_eq!(ok(&["count", "--db", db, "--hex", "--prefix", "ff"]), "1\n");
}

#[test]
fn bad_arguments_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let db = db_arg(&dir.path().join("db"));
    let db = db.as_str();
    let e = fails(&["get", "--db", db, "k"]);
    assert!(e.contains("no database here"), "{e}");
    ok(&["put", "--db", db, "--create", "k", "v"]);
    for args in [
        &["get", "--db", db, "--hex", "zz"][..],
        &["put", "--db", db, "--hex", "00", "abc"],
        &["scan", "--db", db, "--hex", "--from", "0g"],
    ] {
        let e = fails(args);
        assert!(e.contains("is not hex"), "{args:?}: {e}");
    }
    // Nothing was written by the failed commands.
    assert_eq!(ok(&["scan", "--db", db]), "k\tv\n");
    // --create chooses the preset of a new database, and only of a new one.
    let made = dir.path().join("made");
    let made = db_arg(&made);
    let e = fails(&[
        "put",
        "--db",
        made.as_str(),
        "--create",
        "--preset",
        "nope",
        "k",
        "v",
    ]);
    assert!(e.contains("unknown preset") && e.contains("hashkv"), "{e}");
    ok(&[
        "put",
        "--db",
        made.as_str(),
        "--create",
        "--preset",
        "hashkv",
        "k",
        "v",
    ]);
    ok(&[
        "put",
        "--db",
        made.as_str(),
        "--create",
        "--preset",
        "leveldb",
        "k2",
        "v2",
    ]);
    let info = ok(&["info", "--db", made.as_str()]);
    assert!(info.contains("created with preset hashkv"), "{info}");
    let e = fails(&["put", "--db", made.as_str(), "--preset", "hashkv", "k", "v"]);
    assert!(e.contains("--create"), "{e}");
    // A file where a database should be is named as one.
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let file = db_arg(&file);
    for cmd in ["info", "get"] {
        let mut args = vec![cmd, "--db", file.as_str()];
        if cmd == "get" {
            args.push("k");
        }
        let e = fails(&args);
        assert!(e.contains("not a database: a file"), "{cmd}: {e}");
    }
    let bench = dir.path().join("bench");
    let bench = db_arg(&bench);
    for (limit, says) in [
        ("0.9", "1 < low <= high"),
        ("1.5,1.2", "1 < low <= high"),
        ("x", "not a ratio"),
    ] {
        let e = fails(&[
            "bench",
            "--db",
            &bench,
            "--num",
            "10",
            "--space-limit",
            limit,
        ]);
        assert!(e.contains(says), "--space-limit {limit}: {e}");
    }
}

#[test]
fn a_database_in_use_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let db = db_arg(&path);
    ok(&["put", "--db", &db, "--create", "k", "v"]);
    let open = sluicedb::Db::open(&path, sluicedb::Options::default()).unwrap();
    let e = fails(&["get", "--db", &db, "k"]);
    assert!(e.to_lowercase().contains("lock"), "{e}");
    assert!(e.contains("sluice serve"), "{e}");
    drop(open);
    // Closing released the lock. Other tests of this binary spawn `sluice`
    // at the same time, and a child forked while `open` was alive shares
    // its lock until the child execs (descriptors close on exec): on a
    // loaded machine that takes a moment, so allow a few tries.
    let mut tries = 0;
    let out = loop {
        let o = sluice(&["get", "--db", &db, "k"]);
        tries += 1;
        if o.status.success() || tries == 20 {
            break o;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert!(
        out.status.success(),
        "still locked after close: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, b"v\n");
}

#[test]
fn gc_collects_a_wisckey_database() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let db = db_arg(&path);
    {
        let d = sluicedb::Db::open(
            &path,
            sluicedb::Options::preset(sluicedb::Preset::WiscKey)
                .value_log_file_size_bytes(64 << 10)
                .gc_garbage_ratio(None),
        )
        .unwrap();
        for round in 0..4 {
            for k in 0..200 {
                d.put(format!("k{k:03}"), vec![b'a' + round; 1000]).unwrap();
            }
        }
    }
    let info = ok(&["info", "--db", &db]);
    assert!(
        info.contains("\ndisk: ") && info.contains("value store "),
        "{info}"
    );
    // Garbage is known once compaction drops overwritten pointers; the
    // line is there either way.
    assert!(info.contains("\nvalue store garbage: "), "{info}");
    // The space amplification over the user's live data: 200 keys of 4
    // bytes with 1000-byte values.
    assert!(
        info.contains("space amplification ") && info.contains(" over 200800 bytes of live data"),
        "{info}"
    );
    let dry = ok(&["gc", "--db", &db, "--dry-run"]);
    assert!(dry.starts_with("value store: "), "{dry}");
    assert!(
        !dry.contains("gc: read"),
        "a dry run collects nothing: {dry}"
    );
    let run = ok(&["gc", "--db", &db]);
    assert!(run.contains("gc: read"), "{run}");
    // Every value survives GC, at its last version.
    let all = ok(&["scan", "--db", &db, "--limit", "1000"]);
    assert_eq!(all.lines().count(), 200);
    let want = format!("k000\t{}", "d".repeat(1000));
    assert_eq!(all.lines().next().unwrap(), want);
}

/// Copies the database directory `from` to `to`.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

/// Flips one byte in the middle of the largest file whose name ends in
/// `ext`; returns the file's name.
fn damage_largest(dir: &Path, ext: &str) -> String {
    let (path, len) = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .map(|p| {
            let len = std::fs::metadata(&p).unwrap().len();
            (p, len)
        })
        .max_by_key(|(_, len)| *len)
        .expect("a file to damage");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[len as usize / 2] ^= 0x5a;
    std::fs::write(&path, bytes).unwrap();
    path.file_name().unwrap().to_str().unwrap().to_string()
}

#[test]
fn verify_finds_damage_in_tables_and_value_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    {
        let d =
            sluicedb::Db::open(&path, sluicedb::Options::preset(sluicedb::Preset::HashKv)).unwrap();
        for k in 0..2000 {
            d.put(format!("k{k:05}"), vec![b'v'; 400]).unwrap();
        }
        d.flush().unwrap();
    }
    let db = db_arg(&path);
    let info = ok(&["info", "--db", &db]);
    assert!(info.starts_with("created with preset hashkv\n"), "{info}");
    // Its life's totals, from the manifest, though this open wrote nothing:
    // 2000 keys of 6 bytes with 400-byte values.
    assert!(
        info.contains("\nsince creation: user writes 812000 bytes  written "),
        "{info}"
    );
    let out = ok(&["verify", "--db", &db]);
    // 2000 table entries, 2000 value records and 2000 pairs; every value
    // file's bytes add up.
    assert_eq!(
        out,
        "ok: 6000 table entries, value records and pairs checked\nspace accounting: exact\n"
    );
    for ext in ["sst", "vseg"] {
        let copy = dir.path().join(format!("copy-{ext}"));
        copy_dir(&path, &copy);
        let name = damage_largest(&copy, ext);
        let e = fails(&["verify", "--db", &db_arg(&copy)]);
        assert!(
            e.contains("corruption") && e.contains(&name) && e.contains("offset"),
            "{ext}: {e}"
        );
    }
    // The original is untouched.
    ok(&["verify", "--db", &db]);
}

#[test]
fn dump_prints_every_kind_of_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    {
        let d =
            sluicedb::Db::open(&path, sluicedb::Options::preset(sluicedb::Preset::HashKv)).unwrap();
        d.put("user:1", vec![b'a'; 300]).unwrap();
        d.put("user:2", "small").unwrap();
        d.flush().unwrap();
        d.delete("user:1").unwrap();
        d.flush().unwrap();
        d.put("user:3", "in the journal").unwrap();
        let mut b = sluicedb::WriteBatch::new();
        for i in 0..5 {
            b.put(format!("batch:{i}"), "x");
        }
        d.write(b).unwrap();
    }
    let db = db_arg(&path);
    let out = ok(&["dump", "--db", &db]);
    // The tables: a pointer to the separated value, an inline value, and
    // a deletion, whose flush counted the value it deletes as garbage.
    assert!(
        out.contains("user:1 @ 3 delete (shadows counted)\n"),
        "{out}"
    );
    assert!(out.contains("user:1 @ 1 pointer #"), "{out}");
    assert!(out.contains("user:2 @ 2 value (5 B) small\n"), "{out}");
    // The journal's last batch, the manifest's preset, the value record.
    assert!(
        out.contains("user:3 @ 4 value (14 B) in the journal\n"),
        "{out}"
    );
    // Manifest edits name what they set: the preset, hash groups, tables.
    assert!(out.contains(", preset hashkv,"), "{out}");
    assert!(out.contains(" hash groups"), "{out}");
    assert!(
        out.lines().any(|l| l.starts_with("edit at ")
            && l.contains("+L0 #")
            && l.contains("user:1 @ 1 .. user:2 @ 2)")),
        "{out}"
    );
    let rec = format!("key user:1 value (300 B) {}...", "a".repeat(32));
    assert!(out.contains(&rec), "{out}");
    // One file by name, and damage reported with a non-zero exit.
    // The first table (files are listed in name order, the oldest first).
    let table = out
        .lines()
        .find_map(|l| l.strip_prefix("== ").filter(|n| n.ends_with(".sst")))
        .unwrap()
        .to_string();
    let one = ok(&["dump", "--db", &db, &table, "--hex", "--limit", "1"]);
    // The file's name, its shape and one entry.
    assert_eq!(one.lines().count(), 3, "{one}");
    assert!(
        one.contains(" entries (1 pointers, 0 deletions), 1 data blocks"),
        "{one}"
    );
    assert!(one.contains(&format!("{} @ ", "757365723a31")), "{one}");
    // A journal's batch counts its operations against the limit too.
    let journal = out
        .lines()
        .filter_map(|l| l.strip_prefix("== ").filter(|n| n.ends_with(".log")))
        .next_back()
        .unwrap()
        .to_string();
    assert!(out.contains("ops 5\n"), "{out}");
    let four = ok(&["dump", "--db", &db, &journal, "--limit", "4"]);
    // Its name, then four lines: the link to the journal before, user:3's
    // batch and entry, the next batch's line, and none of its five entries.
    assert_eq!(four.lines().count(), 5, "{four}");
    assert!(four.trim_end().ends_with("ops 5"), "{four}");
    let name = damage_largest(&path, "sst");
    let e = fails(&["dump", "--db", &db, &name]);
    assert!(e.contains("corruption") && e.contains(&name), "{e}");
    let e = fails(&["dump", "--db", &db, "nonsense.txt"]);
    assert!(e.contains("not a database file"), "{e}");
}

#[test]
fn bench_runs_engines_writes_json_and_reports() {
    let dir = tempfile::tempdir().unwrap();
    let db = db_arg(dir.path());
    let out = dir.path().join("r.jsonl");
    let out_s = db_arg(&out);
    let text = ok(&[
        "bench",
        "--quiet",
        "--db",
        &db,
        "--out",
        &out_s,
        "--engines",
        "leveldb,hashkv",
        "--benchmarks",
        "fillrandom,ycsb-b",
        "--num",
        "800",
        "--ops",
        "300",
    ]);
    for line in [
        "leveldb      fillrandom",
        "hashkv       ycsb-b",
        "| ycsb-b | hashkv |",
        // A few plain lines per engine, not every counter.
        "hashkv: ",
        "  value store: ",
        "(every counter: --verbose)",
    ] {
        assert!(text.contains(line), "no {line:?} in\n{text}");
    }
    assert!(!text.contains("created with preset"), "{text}");
    let verbose = ok(&[
        "bench",
        "--quiet",
        "--db",
        &db,
        "--engines",
        "leveldb",
        "--benchmarks",
        "fillrandom",
        "--num",
        "200",
        "--verbose",
    ]);
    assert!(verbose.contains("created with preset leveldb"), "{verbose}");
    let lines = std::fs::read_to_string(&out).unwrap();
    // fillrandom, ycsb-b and closed for each engine (ycsb-b needs no load
    // after fillrandom).
    assert_eq!(lines.lines().count(), 6, "{lines}");
    let svg = dir.path().join("r.svg");
    let table = ok(&["bench", "report", &out_s, "--svg", &db_arg(&svg)]);
    assert!(table.contains("| fillrandom | leveldb |"), "{table}");
    assert!(std::fs::read_to_string(&svg).unwrap().contains("ycsb-b"));
    // The database of each engine is a database the operator commands open.
    assert!(ok(&["info", "--db", &db_arg(&dir.path().join("hashkv"))])
        .contains("created with preset hashkv"));

    let e = fails(&["bench", "--db", &db, "--engines", "nosuch"]);
    assert!(
        e.contains("unknown engine \"nosuch\"") && e.contains("rocksdb-blob"),
        "{e}"
    );
    let e = fails(&["bench", "--db", &db, "--benchmarks", "ycsb-z"]);
    assert!(e.contains("unknown workload"), "{e}");
    let e = fails(&[
        "bench",
        "report",
        &db_arg(&dir.path().join("missing.jsonl")),
    ]);
    assert!(e.contains("missing.jsonl"), "{e}");
}

/// Every file of `dir` with its bytes and modification time.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>, std::time::SystemTime)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let m = e.metadata().unwrap();
            let bytes = std::fs::read(e.path()).unwrap();
            (
                e.file_name().into_string().unwrap(),
                bytes,
                m.modified().unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

/// `info`, `get`, `scan`, `verify`, `dump` and `gc --dry-run` leave the
/// directory byte for byte as they found it, for every preset, also when
/// the journals still hold writes (issue 15: they rolled the manifest,
/// started journals, left a value log head per open and ran GC).
#[test]
fn read_only_commands_change_nothing() {
    for preset in sluicedb::Preset::all() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        {
            let d = sluicedb::Db::open(&path, sluicedb::Options::preset(*preset)).unwrap();
            for k in 0..300 {
                d.put(format!("k{k:04}"), vec![b'v'; 700]).unwrap();
            }
            d.flush().unwrap();
            for k in 0..100 {
                d.put(format!("k{k:04}"), vec![b'w'; 700]).unwrap();
            }
            // Not flushed: the next open replays these.
        }
        let db = db_arg(&path);
        let before = snapshot(&path);
        for args in [
            vec!["info", "--db", &db],
            vec!["get", "--db", &db, "k0005"],
            vec!["scan", "--db", &db, "--limit", "3"],
            vec!["verify", "--db", &db],
            vec!["dump", "--db", &db],
            vec!["gc", "--db", &db, "--dry-run"],
        ] {
            let out = ok(&args);
            if args[0] == "get" {
                assert_eq!(out, format!("{}\n", "w".repeat(700)), "{preset:?}");
            }
            assert!(
                snapshot(&path) == before,
                "{preset:?}: {args:?} changed the directory"
            );
        }
        // A writing command may change it.
        ok(&["put", "--db", &db, "x", "y"]);
        assert!(snapshot(&path) != before);
    }
}

#[test]
fn messages_name_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let db = db_arg(&path);
    ok(&["put", "--db", &db, "--create", "a", "1"]);
    // A long key is not echoed whole.
    let long = "k".repeat(100_000);
    let e = fails(&["get", "--db", &db, &long]);
    assert!(
        e.len() < 1000 && e.contains("(100000 bytes)"),
        "{}",
        &e[..e.len().min(300)]
    );
    // CURRENT lost: the message says so, and nothing is created over it.
    std::fs::remove_file(path.join("CURRENT")).unwrap();
    for cmd in ["info", "get", "dump"] {
        let mut args = vec![cmd, "--db", &db];
        if cmd == "get" {
            args.push("a");
        }
        let e = fails(&args);
        assert!(
            e.contains("CURRENT is missing") && e.contains("MANIFEST-"),
            "{cmd}: {e}"
        );
    }
    let e = fails(&["put", "--db", &db, "--create", "b", "2"]);
    assert!(e.contains("CURRENT"), "{e}");
}

/// `bench --db D` empties `D/<engine>` first: never a directory of
/// someone else's files.
#[test]
fn bench_refuses_to_empty_a_foreign_directory() {
    let dir = tempfile::tempdir().unwrap();
    let engine_dir = dir.path().join("leveldb");
    std::fs::create_dir_all(&engine_dir).unwrap();
    std::fs::write(engine_dir.join("thesis.tex"), "precious").unwrap();
    let db = db_arg(dir.path());
    let args = [
        "bench",
        "--db",
        &db,
        "--engines",
        "leveldb",
        "--benchmarks",
        "fillseq",
        "--num",
        "100",
        "--quiet",
    ];
    let e = fails(&args);
    assert!(e.contains("did not make"), "{e}");
    assert_eq!(
        std::fs::read_to_string(engine_dir.join("thesis.tex")).unwrap(),
        "precious"
    );
    // Once removed, the benchmark runs, and runs again over its own output.
    std::fs::remove_file(engine_dir.join("thesis.tex")).unwrap();
    ok(&args);
    ok(&args);
}

/// export and import move every pair, binary keys and values included,
/// in both formats; a damaged or truncated export is refused at the byte
/// that is wrong.
#[test]
fn export_and_import_round_trip_and_refuse_damage() {
    let dir = tempfile::tempdir().unwrap();
    let src = db_arg(&dir.path().join("src"));
    ok(&["put", "--db", &src, "--create", "user:1", "ada"]);
    ok(&["put", "--db", &src, "user:2", "grace"]);
    ok(&["put", "--db", &src, "--hex", "00ff", "0a0bff"]);
    ok(&["put", "--db", &src, "zeta", &"z".repeat(5000)]);
    let all = ok(&["scan", "--db", &src]);
    for format in ["binary", "jsonl"] {
        let file = dir.path().join(format!("export.{format}"));
        let file_arg = db_arg(&file);
        ok(&["export", "--db", &src, "--format", format, &file_arg]);
        let dst = db_arg(&dir.path().join(format!("dst-{format}")));
        ok(&[
            "import", "--db", &dst, "--create", "--preset", "hashkv", &file_arg,
        ]);
        assert_eq!(ok(&["scan", "--db", &dst]), all, "{format}");
        assert_eq!(ok(&["count", "--db", &dst]), "4\n");
        // A prefix exports its keys only.
        let part = dir.path().join(format!("part.{format}"));
        let part_arg = db_arg(&part);
        ok(&[
            "export", "--db", &src, "--format", format, "--prefix", "user:", &part_arg,
        ]);
        let dst2 = db_arg(&dir.path().join(format!("part-{format}")));
        ok(&["import", "--db", &dst2, "--create", &part_arg]);
        assert_eq!(ok(&["scan", "--db", &dst2]), "user:1\tada\nuser:2\tgrace\n");
    }
    let jsonl = std::fs::read_to_string(dir.path().join("export.jsonl")).unwrap();
    assert!(
        jsonl.contains(r#"{"key":"user:1","value":"ada"}"#),
        "{jsonl}"
    );
    assert!(jsonl.contains(r#""key_hex":"00ff""#), "{jsonl}");
    // A flipped byte in a pair, and a cut before the end record.
    let good = std::fs::read(dir.path().join("export.binary")).unwrap();
    let mut bad = good.clone();
    bad[12] ^= 0x40;
    let bad_file = dir.path().join("bad");
    std::fs::write(&bad_file, &bad).unwrap();
    let dst = db_arg(&dir.path().join("dst-bad"));
    let e = fails(&["import", "--db", &dst, "--create", &db_arg(&bad_file)]);
    assert!(e.contains("damaged at byte"), "{e}");
    std::fs::write(&bad_file, &good[..good.len() - 5]).unwrap();
    let e = fails(&["import", "--db", &dst, &db_arg(&bad_file)]);
    assert!(e.contains("truncated"), "{e}");
    std::fs::write(&bad_file, "{\"key\":\"a\"}\n").unwrap();
    let e = fails(&["import", "--db", &dst, &db_arg(&bad_file)]);
    assert!(e.contains("line 1") && e.contains("value"), "{e}");
}

/// The exit codes the README documents: 0 done, 1 failed (the message on
/// standard error), 2 a command line clap refuses.
#[test]
fn exit_codes_are_the_documented_ones() {
    let dir = tempfile::tempdir().unwrap();
    let db = db_arg(&dir.path().join("db"));
    let code = |args: &[&str]| sluice(args).status.code();
    assert_eq!(code(&["put", "--db", &db, "--create", "k", "v"]), Some(0));
    assert_eq!(code(&["get", "--db", &db, "k"]), Some(0));
    assert_eq!(code(&["get", "--db", &db, "missing"]), Some(1));
    assert_eq!(
        code(&[
            "get",
            "--db",
            &dir.path().join("none").display().to_string(),
            "k"
        ]),
        Some(1)
    );
    assert_eq!(code(&["get", "--db", &db]), Some(2));
    assert_eq!(code(&["no-such-command"]), Some(2));
    assert_eq!(
        code(&["put", "--db", &db, "--preset", "hashkv", "k", "v"]),
        Some(2)
    );
}

/// info on a database of the default preset counts its value tables as the
/// value store's files on disk, and says its counters are this read-only
/// open's.
#[test]
fn info_counts_value_tables_and_says_it_opened_read_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    {
        let d = sluicedb::Db::open(&path, sluicedb::Options::default()).unwrap();
        for k in 0..20 {
            d.put(format!("k{k:02}"), vec![b'v'; 4096]).unwrap();
        }
        d.flush().unwrap();
    }
    let info = ok(&["info", "--db", &db_arg(&path)]);
    assert!(info.contains("\n(opened read-only: "), "{info}");
    let disk = info.lines().find(|l| l.starts_with("disk: ")).unwrap();
    // The value table; CURRENT and LOCK are the only other files.
    let others = disk
        .split(['(', ',', ')'])
        .find_map(|part| part.trim().strip_prefix("other "))
        .and_then(|o| o.rsplit_once(" in "))
        .map(|(_, n)| n.to_string());
    assert!(disk.contains("value store "), "{disk}");
    assert_eq!(others.as_deref(), Some("2"), "{disk}");
}

/// `sluice checkpoint` makes a copy that opens with every key, links what it
/// can, and refuses a directory that exists.
#[test]
fn checkpoint_copies_a_database() {
    let dir = tempfile::tempdir().unwrap();
    let db = db_arg(&dir.path().join("db"));
    let copy = db_arg(&dir.path().join("copy"));
    ok(&[
        "put", "--db", &db, "--create", "--preset", "wisckey", "a", "1",
    ]);
    ok(&["put", "--db", &db, "b", "2"]);
    ok(&["compact", "--db", &db]);
    ok(&["put", "--db", &db, "c", "3"]);
    let out = ok(&["checkpoint", "--db", &db, &copy]);
    assert!(out.contains("files linked"), "{out}");
    let linked: usize = out
        .split(": ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a count of linked files: {out}"));
    assert!(linked > 0, "{out}");
    ok(&["put", "--db", &db, "d", "4"]);
    ok(&["verify", "--db", &copy]);
    assert_eq!(ok(&["scan", "--db", &copy]), "a\t1\nb\t2\nc\t3\n");
    assert!(ok(&["info", "--db", &copy]).contains("wisckey"));
    let e = fails(&["checkpoint", "--db", &db, &copy]);
    assert!(e.contains("already exists"), "{e}");
}

/// `sluice info` on a lightkv database shows its write buffer and its
/// partitions' tables (issue 52's operator view).
#[test]
fn info_shows_the_lightkv_buffer_and_partitions() {
    let dir = tempfile::tempdir().unwrap();
    let db = db_arg(&dir.path().join("light"));
    ok(&[
        "put", "--db", &db, "--create", "--preset", "lightkv", "k", "v",
    ]);
    let info = ok(&["info", "--db", &db]);
    assert!(info.contains("created with preset lightkv"), "{info}");
    assert!(
        info.contains("  write buffer: ") && info.contains(" segments free, "),
        "{info}"
    );
    // One partition so far: the whole key space, its tables (none or the
    // one a flush at close wrote) newest first.
    assert!(
        info.contains("partitions (smallest key: tables newest first as weight:bytes):\n  \"\": "),
        "{info}"
    );
}
