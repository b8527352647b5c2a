//! Bitmaps: string values read and written a bit at a time, as in Redis
//! (bit 0 is the most significant bit of the first byte). `SETBIT`
//! rewrites the string's record, like `SETRANGE`.

use bytes::Bytes;

use crate::data::{int_arg, CmdResult, SYNTAX};
use crate::resp::Out;
use crate::store::{Entry, Txn};

/// The largest bit offset (a 512 MiB string).
const MAX_BIT_OFFSET: i64 = (512 << 20) * 8 - 1;

/// Runs a bitmap command; `None` if `name` is not one.
pub fn run(name: &str, args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> Option<CmdResult> {
    let r = match name {
        "setbit" => setbit(args, txn, out),
        "getbit" => (|| {
            let off = offset(&args[2])?;
            let v = txn.get(&args[1])?.map(|e| e.value).unwrap_or_default();
            out.int(i64::from(bit(&v, off)));
            Ok(())
        })(),
        "bitcount" => bitcount(args, txn, out),
        "bitpos" => bitpos(args, txn, out),
        "bitop" => bitop(args, txn, out),
        _ => return None,
    };
    Some(r)
}

fn offset(arg: &[u8]) -> Result<u64, String> {
    int_arg(arg)
        .ok()
        .filter(|o| (0..=MAX_BIT_OFFSET).contains(o))
        .map(|o| o as u64)
        .ok_or_else(|| "ERR bit offset is not an integer or out of range".to_owned())
}

fn bit(v: &[u8], off: u64) -> bool {
    v.get((off / 8) as usize)
        .is_some_and(|b| b & (0x80 >> (off % 8)) != 0)
}

fn setbit(args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> CmdResult {
    let off = offset(&args[2])?;
    let on = match &args[3][..] {
        b"1" => true,
        b"0" => false,
        _ => return Err("ERR bit is not an integer or out of range".to_owned()),
    };
    let mut e = txn.get(&args[1])?.unwrap_or(Entry::plain(Vec::new()));
    let byte = (off / 8) as usize;
    if e.value.len() <= byte {
        e.value.resize(byte + 1, 0);
    }
    let mask = 0x80u8 >> (off % 8);
    let old = e.value[byte] & mask != 0;
    if on {
        e.value[byte] |= mask;
    } else {
        e.value[byte] &= !mask;
    }
    txn.set(&args[1], e);
    out.int(i64::from(old));
    Ok(())
}

/// A `start end [BYTE|BIT]` range over `len_bytes` bytes, as bit
/// positions `first ..= last`; `None` when empty. `end` absent: to the end.
fn bit_range(
    args: &[Bytes],
    len_bytes: usize,
    end_given: bool,
) -> Result<Option<(u64, u64)>, String> {
    let start = int_arg(&args[0])?;
    let end = if end_given { int_arg(&args[1])? } else { -1 };
    let unit_bits = match args.get(2).map(|u| u.to_ascii_lowercase()) {
        None => false,
        Some(u) if u == b"bit" => true,
        Some(u) if u == b"byte" => false,
        Some(_) => return Err(SYNTAX.to_owned()),
    };
    let len = if unit_bits {
        len_bytes as i64 * 8
    } else {
        len_bytes as i64
    };
    if start < 0 && end < 0 && start > end {
        return Ok(None);
    }
    let start = if start < 0 { start + len } else { start }.max(0);
    let end = if end < 0 { end + len } else { end }.max(0);
    let end = end.min(len - 1);
    if start > end || len == 0 {
        return Ok(None);
    }
    let (s, e) = (start as u64, end as u64);
    Ok(Some(if unit_bits {
        (s, e)
    } else {
        (s * 8, e * 8 + 7)
    }))
}

fn bitcount(args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> CmdResult {
    if args.len() == 3 || args.len() > 5 {
        return Err(SYNTAX.to_owned());
    }
    let v = txn.get(&args[1])?.map(|e| e.value).unwrap_or_default();
    let range = if args.len() >= 4 {
        bit_range(&args[2..], v.len(), true)?
    } else if v.is_empty() {
        None
    } else {
        Some((0, v.len() as u64 * 8 - 1))
    };
    let n = match range {
        Some((a, b)) => (a..=b).filter(|&i| bit(&v, i)).count(),
        None => 0,
    };
    out.int(n as i64);
    Ok(())
}

fn bitpos(args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> CmdResult {
    if args.len() > 6 {
        return Err(SYNTAX.to_owned());
    }
    let want = match &args[2][..] {
        b"1" => true,
        b"0" => false,
        _ => return Err("ERR The bit argument must be 1 or 0.".to_owned()),
    };
    let end_given = args.len() >= 5;
    let entry = txn.get(&args[1])?;
    if args.len() >= 4 {
        // Check the range's syntax even for a missing key.
        bit_range(&args[3..], 0, end_given)?;
    }
    let Some(e) = entry else {
        out.int(if want { -1 } else { 0 });
        return Ok(());
    };
    let v = e.value;
    let range = if args.len() >= 4 {
        bit_range(&args[3..], v.len(), end_given)?
    } else {
        Some((0, v.len() as u64 * 8 - 1))
    };
    let Some((a, b)) = range else {
        out.int(-1);
        return Ok(());
    };
    match (a..=b).find(|&i| bit(&v, i) == want) {
        Some(i) => out.int(i as i64),
        // Looking for a 0 past a string of ones with no end given: the
        // first bit after the string.
        None if !want && !end_given => out.int(b as i64 + 1),
        None => out.int(-1),
    }
    Ok(())
}

fn bitop(args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> CmdResult {
    let op = args[1].to_ascii_lowercase();
    if !matches!(&op[..], b"and" | b"or" | b"xor" | b"not") {
        return Err(SYNTAX.to_owned());
    }
    let srcs = &args[3..];
    if op == b"not" && srcs.len() != 1 {
        return Err("ERR BITOP NOT must be called with a single source key.".to_owned());
    }
    let mut vals = Vec::with_capacity(srcs.len());
    for k in srcs {
        vals.push(txn.get(k)?.map(|e| e.value).unwrap_or_default());
    }
    let len = vals.iter().map(Vec::len).max().unwrap_or(0);
    let mut res = vec![0u8; len];
    for (i, r) in res.iter_mut().enumerate() {
        let byte = |v: &Vec<u8>| v.get(i).copied().unwrap_or(0);
        *r = match &op[..] {
            b"not" => !byte(&vals[0]),
            b"and" => vals.iter().map(byte).fold(0xff, |a, b| a & b),
            b"or" => vals.iter().map(byte).fold(0, |a, b| a | b),
            _ => vals.iter().map(byte).fold(0, |a, b| a ^ b),
        };
    }
    if res.is_empty() {
        txn.rec(&args[2]).map_err(crate::data::engine)?;
        txn.delete(&args[2]);
    } else {
        txn.set(&args[2], Entry::plain(res));
    }
    out.int(len as i64);
    Ok(())
}
