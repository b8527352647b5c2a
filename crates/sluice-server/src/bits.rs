//! Bitmaps: string values read and written a bit at a time, as in Redis
//! (bit 0 is the most significant bit of the first byte). `SETBIT`
//! rewrites the string's record, like `SETRANGE`; so does a `BITFIELD`
//! that writes, once for all its operations.

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
        "bitfield" | "bitfield_ro" => bitfield(name, args, txn, out),
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
    let found = txn.get(&args[1])?;
    let existed = found.is_some();
    let mut e = found.unwrap_or(Entry::plain(Vec::new()));
    let mut value = e.value.to_vec();
    let byte = (off / 8) as usize;
    let grows = value.len() <= byte;
    if grows {
        value.resize(byte + 1, 0);
    }
    let mask = 0x80u8 >> (off % 8);
    let old = value[byte] & mask != 0;
    if on {
        value[byte] |= mask;
    } else {
        value[byte] &= !mask;
    }
    // An unchanged string is not written (no change to count or watch).
    if !existed || grows || old != on {
        e.value = value.into();
        txn.set(&args[1], e);
        txn.notify(crate::notify::STRING, "setbit", &args[1]);
    }
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
    // An empty string has no bit to find, 0 or 1 (redis-server: -1).
    let range = if args.len() >= 4 {
        bit_range(&args[3..], v.len(), end_given)?
    } else if v.is_empty() {
        None
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
    let len = vals.iter().map(Bytes::len).max().unwrap_or(0);
    let mut res = vec![0u8; len];
    for (i, r) in res.iter_mut().enumerate() {
        let byte = |v: &Bytes| v.get(i).copied().unwrap_or(0);
        *r = match &op[..] {
            b"not" => !byte(&vals[0]),
            b"and" => vals.iter().map(byte).fold(0xff, |a, b| a & b),
            b"or" => vals.iter().map(byte).fold(0, |a, b| a | b),
            _ => vals.iter().map(byte).fold(0, |a, b| a ^ b),
        };
    }
    if res.is_empty() {
        if txn.peek(&args[2]).map_err(crate::data::engine)?.is_some() {
            txn.notify(crate::notify::GENERIC, "del", &args[2]);
        }
        txn.delete(&args[2]);
    } else {
        txn.set(&args[2], Entry::plain(res));
        txn.notify(crate::notify::STRING, "set", &args[2]);
    }
    out.int(len as i64);
    Ok(())
}

/// What `BITFIELD` does when a `SET` or `INCRBY` leaves the field's range.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Overflow {
    Wrap,
    Sat,
    Fail,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum FieldOp {
    Get,
    Set,
    IncrBy,
}

/// One `BITFIELD` operation on the field of `bits` bits at bit `offset`.
struct Field {
    op: FieldOp,
    signed: bool,
    bits: u32,
    offset: u64,
    value: i64,
    overflow: Overflow,
}

/// A field type: `i1`..`i64` or `u1`..`u63` (a u64 could not be replied).
fn field_type(arg: &[u8]) -> Result<(bool, u32), String> {
    const ERR: &str = "ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.";
    let signed = match arg.first() {
        Some(b'i') => true,
        Some(b'u') => false,
        _ => return Err(ERR.to_owned()),
    };
    match crate::data::parse_i64(&arg[1..]) {
        Some(b) if b >= 1 && (b <= 63 || (signed && b == 64)) => Ok((signed, b as u32)),
        _ => Err(ERR.to_owned()),
    }
}

/// A field offset in bits; `#n` means n fields of `bits` bits.
fn field_offset(arg: &[u8], bits: u32) -> Result<u64, String> {
    const ERR: &str = "ERR bit offset is not an integer or out of range";
    let (times, digits) = match arg.strip_prefix(b"#") {
        Some(rest) => (i64::from(bits), rest),
        None => (1, arg),
    };
    crate::data::parse_i64(digits)
        .and_then(|o| o.checked_mul(times))
        .filter(|o| (0..=MAX_BIT_OFFSET).contains(o))
        .map(|o| o as u64)
        .ok_or_else(|| ERR.to_owned())
}

/// The `bits` bits at bit `offset` of `v` (zeros past its end), most
/// significant first.
fn get_field(v: &[u8], offset: u64, bits: u32) -> u64 {
    (0..u64::from(bits)).fold(0u64, |acc, i| (acc << 1) | u64::from(bit(v, offset + i)))
}

/// Writes the low `bits` bits of `value` at bit `offset` (`v` is long
/// enough).
fn set_field(v: &mut [u8], offset: u64, bits: u32, value: u64) {
    for i in 0..u64::from(bits) {
        let on = value >> (u64::from(bits) - 1 - i) & 1 == 1;
        let at = offset + i;
        let mask = 0x80u8 >> (at % 8);
        if on {
            v[(at / 8) as usize] |= mask;
        } else {
            v[(at / 8) as usize] &= !mask;
        }
    }
}

/// A signed field's value: its top bit extended.
fn sign_extend(raw: u64, bits: u32) -> i64 {
    if bits < 64 && raw >> (bits - 1) & 1 == 1 {
        (raw | (u64::MAX << bits)) as i64
    } else {
        raw as i64
    }
}

/// `value + incr` stored in an unsigned field of `bits` bits: the result,
/// or `None` when it overflows and the policy is `FAIL` (redis-server's
/// `checkUnsignedBitfieldOverflow`).
fn unsigned_result(value: u64, incr: i64, bits: u32, ow: Overflow) -> Option<u64> {
    let max = (1u64 << bits) - 1;
    let wrapped = value.wrapping_add(incr as u64) & max;
    let over = value > max || (incr > 0 && incr as u64 > max - value);
    let under = !over && incr < 0 && incr.unsigned_abs() > value;
    match (over || under, ow) {
        (false, _) => Some(value.wrapping_add(incr as u64)),
        (true, Overflow::Wrap) => Some(wrapped),
        (true, Overflow::Sat) => Some(if over { max } else { 0 }),
        (true, Overflow::Fail) => None,
    }
}

/// The signed counterpart (`checkSignedBitfieldOverflow`).
fn signed_result(value: i64, incr: i64, bits: u32, ow: Overflow) -> Option<i64> {
    let max = if bits == 64 {
        i64::MAX
    } else {
        (1i64 << (bits - 1)) - 1
    };
    let min = -max - 1;
    let sum = i128::from(value) + i128::from(incr);
    let over = sum > i128::from(max);
    let under = sum < i128::from(min);
    match (over || under, ow) {
        (false, _) => Some(sum as i64),
        (true, Overflow::Wrap) => Some(sign_extend(
            (value as u64).wrapping_add(incr as u64) & field_mask(bits),
            bits,
        )),
        (true, Overflow::Sat) => Some(if over { max } else { min }),
        (true, Overflow::Fail) => None,
    }
}

fn field_mask(bits: u32) -> u64 {
    if bits == 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

/// Parses `BITFIELD`'s operations (`GET type offset`, `SET type offset
/// value`, `INCRBY type offset incr`, `OVERFLOW WRAP|SAT|FAIL`).
fn field_ops(args: &[Bytes]) -> Result<Vec<Field>, String> {
    let mut ops = Vec::new();
    let mut overflow = Overflow::Wrap;
    let mut j = 2;
    while j < args.len() {
        let rest = args.len() - j - 1;
        let op = match &args[j].to_ascii_lowercase()[..] {
            b"get" if rest >= 2 => FieldOp::Get,
            b"set" if rest >= 3 => FieldOp::Set,
            b"incrby" if rest >= 3 => FieldOp::IncrBy,
            b"overflow" if rest >= 1 => {
                overflow = match &args[j + 1].to_ascii_lowercase()[..] {
                    b"wrap" => Overflow::Wrap,
                    b"sat" => Overflow::Sat,
                    b"fail" => Overflow::Fail,
                    _ => return Err("ERR Invalid OVERFLOW type specified".to_owned()),
                };
                j += 2;
                continue;
            }
            _ => return Err(SYNTAX.to_owned()),
        };
        let (signed, bits) = field_type(&args[j + 1])?;
        let offset = field_offset(&args[j + 2], bits)?;
        let value = if op == FieldOp::Get {
            0
        } else {
            int_arg(&args[j + 3])?
        };
        ops.push(Field {
            op,
            signed,
            bits,
            offset,
            value,
            overflow,
        });
        j += if op == FieldOp::Get { 3 } else { 4 };
    }
    Ok(ops)
}

/// `BITFIELD key [op ...]` and `BITFIELD_RO key [GET type offset ...]`:
/// every operation applies to the string as the previous ones left it;
/// the string is written once, grown to the farthest field written.
fn bitfield(name: &str, args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> CmdResult {
    let ops = field_ops(args)?;
    let writes = ops.iter().any(|f| f.op != FieldOp::Get);
    if writes && name == "bitfield_ro" {
        return Err("ERR BITFIELD_RO only supports the GET subcommand".to_owned());
    }
    let entry = txn.get(&args[1])?;
    let existed = entry.is_some();
    let mut e = entry.unwrap_or(Entry::plain(Vec::new()));
    let mut value = e.value.to_vec();
    let old_len = value.len();
    if let Some(last) = ops
        .iter()
        .filter(|f| f.op != FieldOp::Get)
        .map(|f| f.offset + u64::from(f.bits) - 1)
        .max()
    {
        let need = (last / 8) as usize + 1;
        if value.len() < need {
            value.resize(need, 0);
        }
    }
    let mut changed = false;
    out.array(ops.len());
    for f in &ops {
        let raw = get_field(&value, f.offset, f.bits);
        if f.op == FieldOp::Get {
            if f.signed {
                out.int(sign_extend(raw, f.bits));
            } else {
                out.int(raw as i64);
            }
            continue;
        }
        let (new, reply) = if f.signed {
            let old = sign_extend(raw, f.bits);
            let r = if f.op == FieldOp::IncrBy {
                signed_result(old, f.value, f.bits, f.overflow)
            } else {
                signed_result(f.value, 0, f.bits, f.overflow)
            };
            match r {
                Some(v) => (Some(v as u64 & field_mask(f.bits)), {
                    if f.op == FieldOp::IncrBy {
                        v
                    } else {
                        old
                    }
                }),
                None => (None, 0),
            }
        } else {
            let r = if f.op == FieldOp::IncrBy {
                unsigned_result(raw, f.value, f.bits, f.overflow)
            } else {
                unsigned_result(f.value as u64, 0, f.bits, f.overflow)
            };
            match r {
                Some(v) => (
                    Some(v & field_mask(f.bits)),
                    if f.op == FieldOp::IncrBy {
                        v as i64
                    } else {
                        raw as i64
                    },
                ),
                None => (None, 0),
            }
        };
        match new {
            Some(v) => {
                set_field(&mut value, f.offset, f.bits, v);
                changed |= v != raw;
                out.int(reply);
            }
            None => out.null(),
        }
    }
    if writes && (changed || !existed || value.len() != old_len) {
        e.value = value.into();
        txn.set(&args[1], e);
        txn.notify(crate::notify::STRING, "setbit", &args[1]);
    }
    Ok(())
}
