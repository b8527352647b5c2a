//! What the in-process tests of commands share: a keyspace on the
//! in-memory file system, and one command run and committed.

use std::sync::Arc;

use bytes::Bytes;
use sluicedb::fs::MemFs;
use sluicedb::{Db, Options};

use crate::data::Ctx;
use crate::resp::Out;
use crate::store::{Fsync, Keyspace, Txn};

/// A new keyspace at `/db` on its own in-memory file system.
pub fn keyspace() -> Keyspace {
    let o = Options::default().fs(Arc::new(MemFs::new()));
    Keyspace::new(Db::open("/db", o).unwrap(), Fsync::No).unwrap()
}

/// Runs one data command on key `args[1]` and commits it: the reply, or
/// the error line.
pub fn command(ks: &Keyspace, args: &[&[u8]]) -> Result<Vec<u8>, String> {
    command_in(ks, 0, args)
}

/// [`command`] in database `db`; a command without a key (`DBSIZE`,
/// `FLUSHDB`...) holds the whole keyspace.
pub fn command_in(ks: &Keyspace, db: u8, args: &[&[u8]]) -> Result<Vec<u8>, String> {
    let mut held = match args.get(1) {
        Some(key) if args.len() > 1 && !args[0].eq_ignore_ascii_case(b"flushdb") => {
            ks.lock_keys(&[key])
        }
        _ => ks.lock_all(),
    };
    let mut txn = Txn::new(ks);
    txn.db = db;
    let mut out = Out::default();
    let args: Vec<Bytes> = args.iter().map(|a| Bytes::copy_from_slice(a)).collect();
    let name = String::from_utf8_lossy(&args[0]).to_lowercase();
    let ctx = Ctx {
        max_bulk_bytes: crate::DEFAULT_MAX_BULK_BYTES,
    };
    crate::data::run(&name, &args, &mut txn, &ctx, &mut out)?;
    txn.commit(&mut held).unwrap();
    Ok(out.buf.to_vec())
}

/// The cursor and the elements of an `HSCAN`/`SSCAN`/`ZSCAN` reply (RESP2:
/// for `HSCAN` and `ZSCAN`, names and values alternate).
pub fn scan_reply(reply: &[u8]) -> (u64, Vec<Vec<u8>>) {
    let mut rest = reply;
    let mut line = || {
        let end = rest.windows(2).position(|w| w == b"\r\n").expect("a line");
        let l = rest[..end].to_vec();
        rest = &rest[end + 2..];
        l
    };
    assert_eq!(line(), b"*2", "{:?}", String::from_utf8_lossy(reply));
    line(); // the cursor's length
    let cursor = String::from_utf8(line()).unwrap().parse().unwrap();
    let n: usize = String::from_utf8(line()[1..].to_vec())
        .unwrap()
        .parse()
        .unwrap();
    let items = (0..n)
        .map(|_| {
            line(); // the length (no element here holds CR LF)
            line()
        })
        .collect();
    (cursor, items)
}
