//! Key commands that cross types: `COPY`, `TOUCH`, `EXPIRETIME`,
//! `PEXPIRETIME`, `OBJECT`. (`DEL`, `UNLINK`, `TYPE`, `RENAME`, `EXPIRE`
//! and `SCAN ... TYPE` are in `data.rs`: they never read elements.)

use bytes::Bytes;

use crate::data::{engine, parse_i64, CmdResult, SYNTAX};
use crate::resp::Out;
use crate::store::{CollKind, Rec, Txn};

/// Runs a key command; `None` if `name` is not one.
pub fn run(name: &str, args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> Option<CmdResult> {
    let r = match name {
        "copy" => copy(args, txn, out),
        "move" => move_key(args, txn, out),
        "touch" => (|| {
            let mut n = 0;
            for k in &args[1..] {
                n += i64::from(txn.exists(k)?);
            }
            out.int(n);
            Ok(())
        })(),
        "expiretime" | "pexpiretime" => (|| {
            let r = match txn.rec(&args[1]).map_err(engine)? {
                None => -2,
                Some(r) => match r.expire_at_ms() {
                    None => -1,
                    Some(at) if name == "expiretime" => (at / 1000) as i64,
                    Some(at) => at as i64,
                },
            };
            out.int(r);
            Ok(())
        })(),
        "object" => object(args, txn, out),
        "memory" => memory(args, txn, out),
        _ => return None,
    };
    Some(r)
}

/// A database number argument (`MOVE`, `COPY ... DB`); another than the
/// transaction's is refused on a replicated shard ([`Txn::one_db`]).
fn db_arg(txn: &Txn<'_>, arg: &[u8]) -> Result<u8, String> {
    let db = parse_i64(arg).ok_or(crate::data::NOT_INTEGER)?;
    let db = u8::try_from(db)
        .ok()
        .filter(|&d| d < crate::store::DATABASES)
        .ok_or_else(|| "ERR DB index is out of range".to_owned())?;
    if txn.one_db && db != txn.db {
        return Err(
            "ERR databases other than 0 are not supported on a replicated shard".to_owned(),
        );
    }
    Ok(db)
}

/// `MOVE key db`: the record moves to database `db` if `key` is absent
/// there; a collection keeps its version, so its elements stay where
/// they are. One batch deletes the key here and writes it there.
fn move_key(args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> CmdResult {
    let db = db_arg(txn, &args[2])?;
    if db == txn.db {
        return Err("ERR source and destination objects are the same".to_owned());
    }
    let Some(r) = txn.rec(&args[1]).map_err(engine)? else {
        out.int(0);
        return Ok(());
    };
    let there = txn.rec_in_db(db, &args[1]).map_err(engine)?;
    if there.as_ref().is_some_and(|t| !t.expired(txn.now)) {
        out.int(0);
        return Ok(());
    }
    // redis-server's order: `new` there, `move_from` here, `move_to` there.
    txn.put_in_db(db, &args[1], r, there);
    txn.delete(&args[1]);
    txn.notify(crate::notify::GENERIC, "move_from", &args[1]);
    txn.notify_in(db, crate::notify::GENERIC, "move_to", &args[1]);
    out.int(1);
    Ok(())
}

/// `COPY source destination [DB db] [REPLACE]`: a collection is copied
/// element by element under a new version.
fn copy(args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> CmdResult {
    let mut replace = false;
    let mut dst_db = txn.db;
    let mut i = 3;
    while i < args.len() {
        match &args[i].to_ascii_lowercase()[..] {
            b"replace" => replace = true,
            b"db" if i + 1 < args.len() => {
                dst_db = db_arg(txn, &args[i + 1])?;
                i += 1;
            }
            _ => return Err(SYNTAX.to_owned()),
        }
        i += 1;
    }
    if dst_db == txn.db && args[1] == args[2] {
        return Err("ERR source and destination objects are the same".to_owned());
    }
    let Some(src) = txn.rec(&args[1]).map_err(engine)? else {
        out.int(0);
        return Ok(());
    };
    if dst_db != txn.db {
        return copy_to_db(txn, &args[2], dst_db, src, replace, out);
    }
    let replacing = txn.peek(&args[2]).map_err(engine)?.is_some();
    if replacing && !replace {
        out.int(0);
        return Ok(());
    }
    if replacing {
        // redis-server deletes the old key, then adds the copy as new.
        txn.notify(crate::notify::NEW, "new", &args[2]);
    }
    match copied(txn, src)? {
        Rec::Str(e) => txn.set(&args[2], e),
        copy => txn.put(&args[2], copy),
    }
    txn.notify(crate::notify::GENERIC, "copy_to", &args[2]);
    out.int(1);
    Ok(())
}

/// `COPY`'s copy of record `src`: a string as it is; a collection under a
/// new version, every element copied to it (the source keeps its own).
fn copied(txn: &mut Txn<'_>, src: Rec) -> Result<Rec, String> {
    Ok(match src {
        Rec::Str(e) => Rec::Str(e),
        Rec::Coll(m) => {
            let elems = txn.all_elems(&m).map_err(engine)?;
            let mut copy = txn.new_coll(m.kind)?;
            copy.count = m.count;
            copy.head = m.head;
            copy.tail = m.tail;
            copy.expire_at_ms = m.expire_at_ms;
            for (suffix, v) in elems {
                txn.elem_put(copy.elem(&suffix), v);
            }
            Rec::Coll(copy)
        }
    })
}

/// `COPY` of `src` to `key` of database `db`, another than the
/// transaction's.
fn copy_to_db(
    txn: &mut Txn<'_>,
    key: &[u8],
    db: u8,
    src: Rec,
    replace: bool,
    out: &mut Out,
) -> CmdResult {
    let there = txn.rec_in_db(db, key).map_err(engine)?;
    if there.as_ref().is_some_and(|t| !t.expired(txn.now)) && !replace {
        out.int(0);
        return Ok(());
    }
    let copy = copied(txn, src)?;
    txn.put_in_db(db, key, copy, there);
    txn.notify_in(db, crate::notify::GENERIC, "copy_to", key);
    out.int(1);
    Ok(())
}

/// `MEMORY USAGE key [SAMPLES n]`: the bytes the key takes in the engine
/// before compression, estimated from its record and element count (a
/// collection's elements are not read), nil for a missing key.
fn memory(args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> CmdResult {
    let sub = args[1].to_ascii_lowercase();
    if sub != b"usage" {
        return Err(format!(
            "ERR unknown subcommand '{}'. Try MEMORY HELP.",
            String::from_utf8_lossy(&args[1])
        ));
    }
    if args.len() != 3 && !(args.len() == 5 && args[3].eq_ignore_ascii_case(b"samples")) {
        return Err(if args.len() < 3 {
            "ERR wrong number of arguments for 'memory|usage' command".to_owned()
        } else {
            SYNTAX.to_owned()
        });
    }
    /// An engine entry's key and bookkeeping, roughly.
    const ENTRY_BYTES: u64 = 32;
    let key = &args[2];
    match txn.rec(key).map_err(engine)? {
        None => out.null(),
        Some(r) => {
            let record = r.encode().len() as u64 + key.len() as u64 + 9 + ENTRY_BYTES;
            let elements = match &r {
                Rec::Str(_) => 0,
                Rec::Coll(m) => m.count * (ENTRY_BYTES + 17),
            };
            out.int((record + elements) as i64);
        }
    }
    Ok(())
}

/// Up to these sizes redis-server 7.0 keeps a collection compact
/// (`*-max-listpack-entries`, `set-max-intset-entries`), and these are
/// the encodings `OBJECT ENCODING` names; here every collection is stored
/// the same way, so the answer is what redis-server would say.
const COMPACT_ENTRIES: u64 = 128;
const INTSET_ENTRIES: u64 = 512;
const COMPACT_VALUE_BYTES: usize = 64;

fn object(args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> CmdResult {
    let sub = args[1].to_ascii_lowercase();
    if sub == b"help" && args.len() == 2 {
        let lines = [
            "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "ENCODING <key>",
            "    Return the kind of internal representation used in order to store the value",
            "    associated with a <key>.",
            "FREQ <key>",
            "    Return the access frequency index of the <key>. The returned integer is",
            "    proportional to the logarithm of the recent access frequency of the key.",
            "IDLETIME <key>",
            "    Return the idle time of the <key>, that is the approximated number of",
            "    seconds elapsed since the last access to the key.",
            "REFCOUNT <key>",
            "    Return the number of references of the value associated with the specified",
            "    <key>.",
            "HELP",
            "    Prints this help.",
        ];
        out.help(&lines);
        return Ok(());
    }
    let known = ["encoding", "freq", "idletime", "refcount", "help"];
    let lower = String::from_utf8_lossy(&sub).into_owned();
    if !known.contains(&lower.as_str()) {
        return Err(format!(
            "ERR unknown subcommand '{}'. Try OBJECT HELP.",
            String::from_utf8_lossy(&args[1])
        ));
    }
    if args.len() != 3 || lower == "help" {
        return Err(format!(
            "ERR wrong number of arguments for 'object|{lower}' command"
        ));
    }
    let Some(rec) = txn.rec(&args[2]).map_err(engine)? else {
        out.null();
        return Ok(());
    };
    match &sub[..] {
        b"encoding" => {
            let enc = encoding(txn, &rec)?;
            out.bulk(enc.as_bytes());
        }
        b"freq" => {
            return Err("ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.".to_owned());
        }
        // Access times are not kept: every key reads as just used.
        b"idletime" => out.int(0),
        _ => out.int(1),
    }
    Ok(())
}

fn encoding(txn: &Txn<'_>, rec: &Rec) -> Result<&'static str, String> {
    let m = match rec {
        Rec::Str(e) => {
            return Ok(if e.value.len() <= 20 && parse_i64(&e.value).is_some() {
                "int"
            } else if e.value.len() <= 44 {
                "embstr"
            } else {
                "raw"
            });
        }
        Rec::Coll(m) => m,
    };
    Ok(match m.kind {
        CollKind::List => "quicklist",
        CollKind::Set => {
            if m.count > INTSET_ENTRIES {
                return Ok("hashtable");
            }
            let elems = txn.names(m).map_err(engine)?;
            if elems.iter().all(|(k, _)| parse_i64(k).is_some()) {
                "intset"
            } else {
                "hashtable"
            }
        }
        CollKind::Hash | CollKind::ZSet => {
            if m.count > COMPACT_ENTRIES {
                return Ok(if m.kind == CollKind::Hash {
                    "hashtable"
                } else {
                    "skiplist"
                });
            }
            let elems = txn.names(m).map_err(engine)?;
            let small = elems.iter().all(|(k, v)| match m.kind {
                // A sorted set's member records: the value is the score.
                CollKind::ZSet => k.len() <= COMPACT_VALUE_BYTES,
                _ => k.len() <= COMPACT_VALUE_BYTES && v.len() <= COMPACT_VALUE_BYTES,
            });
            match (small, m.kind) {
                (true, _) => "listpack",
                (false, CollKind::Hash) => "hashtable",
                _ => "skiplist",
            }
        }
    })
}
