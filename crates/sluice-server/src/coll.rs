//! What the collection families share: element scans (`HSCAN`, `SSCAN`,
//! `ZSCAN`), random picks, and Redis's number formats.

use bytes::Bytes;
use rand::seq::SliceRandom;
use rand::Rng;

use crate::data::{engine, int_arg, CmdResult, SYNTAX};
use crate::glob;
use crate::resp::Out;
use crate::store::{Meta, Txn, KEYSPACE_FORMAT};

pub fn wrong_args(name: &str) -> String {
    format!("ERR wrong number of arguments for '{name}' command")
}

/// Up to this many elements, a scan returns the whole collection in one
/// call with cursor 0, as redis-server does for its compact encodings.
const SCAN_WHOLE_ELEMENTS: u64 = 128;
/// Bytes of an element's suffix a scan cursor holds.
const CURSOR_PREFIX_BYTES: usize = 7;
/// Where a cursor's keyspace format starts (its top 5 bits).
const CURSOR_FORMAT_SHIFT: u32 = 59;
// The format fits in 5 bits and is never 0 (cursors before it had 0
// there), and 1 + the largest cursor does not overflow.
const _: () = assert!(KEYSPACE_FORMAT >= 1 && KEYSPACE_FORMAT < 31);
const _: () = assert!(CURSOR_PREFIX_BYTES < 8);

/// The cursor of a scan that resumes at the element whose suffix (past
/// a sorted set's sub-tag) starts with `prefix`: 1 + (this keyspace
/// format in the top 5 bits, the prefix's length in the next 3, then the
/// prefix, zero-padded), read big-endian (`docs/format/server-keyspace.md`,
/// "Element scan cursors").
fn encode_cursor(prefix: &[u8]) -> u64 {
    debug_assert!(prefix.len() <= CURSOR_PREFIX_BYTES);
    let mut b = [0u8; 8];
    b[0] = (KEYSPACE_FORMAT << (CURSOR_FORMAT_SHIFT - 56)) | prefix.len() as u8;
    b[1..1 + prefix.len()].copy_from_slice(prefix);
    u64::from_be_bytes(b) + 1
}

/// Where cursor `c` (not 0) resumes: the prefix it holds, or `None` to
/// start again from the first element. A cursor of another keyspace
/// format holds a prefix of another element-key order (issued before the
/// keyspace was converted, or by an older build, whose cursors carry 0
/// there): resuming at it could skip elements, starting again only
/// repeats some, which a scan may.
fn decode_cursor(c: u64) -> Option<Vec<u8>> {
    let b = (c - 1).to_be_bytes();
    if u64::from(b[0]) >> (CURSOR_FORMAT_SHIFT - 56) != u64::from(KEYSPACE_FORMAT) {
        return None;
    }
    let len = usize::from(b[0] & 0b111).min(CURSOR_PREFIX_BYTES);
    Some(b[1..1 + len].to_vec())
}

/// Positions of `n` elements to return for a random pick of `count`
/// (Redis's `SRANDMEMBER`/`HRANDFIELD` rule): distinct and at most `n`
/// when `count` >= 0 (all of them, in order, when `count` >= `n`), else
/// `-count` picks that may repeat.
pub fn random_picks(n: usize, count: i64) -> Vec<usize> {
    random_picks_with(&mut rand::thread_rng(), n, count)
}

/// [`random_picks`] drawing from `rng`.
pub fn random_picks_with(rng: &mut impl Rng, n: usize, count: i64) -> Vec<usize> {
    if n == 0 || count == 0 {
        return Vec::new();
    }
    if count < 0 {
        let want = count.unsigned_abs() as usize;
        return (0..want).map(|_| rng.gen_range(0..n)).collect();
    }
    let count = count as usize;
    if count >= n {
        return (0..n).collect();
    }
    let mut all: Vec<usize> = (0..n).collect();
    // The chosen ones are the first slice returned, wherever they sit.
    let (chosen, _) = all.partial_shuffle(rng, count);
    chosen.to_vec()
}

/// Most picks with repeats (a negative count) in one reply: a larger one
/// would be built in memory before it is sent. (redis-server takes any.)
pub const MAX_REPEATED_PICKS: i64 = 1 << 24;

/// A random pick's count: redis-server refuses magnitudes past half of
/// i64's range (their replies could not be built).
pub fn pick_count(arg: &[u8]) -> Result<i64, String> {
    let c = int_arg(arg)?;
    if c == i64::MIN {
        return Err("ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807".to_owned());
    }
    if c.unsigned_abs() > (i64::MAX / 2) as u64 || c < -MAX_REPEATED_PICKS {
        return Err("ERR value is out of range".to_owned());
    }
    Ok(c)
}

/// How a scan replies with each element's value.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum ScanValues {
    /// Members only (`SSCAN`).
    None,
    /// The stored bytes (`HSCAN`).
    Raw,
    /// A score (`ZSCAN`).
    Score,
}

/// `HSCAN/SSCAN/ZSCAN key cursor [MATCH p] [COUNT n]` over the elements
/// of `m` whose suffix starts with `sub` (a sorted set's member records);
/// past `sub`, each suffix is a name hash and the name (a set's: the
/// name). The cursor holds the first 7 bytes of the next element's
/// suffix and the keyspace format ([`encode_cursor`]; 0: done): it needs
/// no server state, and every element present for the whole scan is
/// returned, across a restart and a conversion of the keyspace too;
/// elements sharing those 7 bytes come in the same call.
pub fn scan_elements(
    txn: &Txn<'_>,
    m: Option<&Meta>,
    sub: &[u8],
    args: &[Bytes],
    out: &mut Out,
    values: bool,
) -> CmdResult {
    scan_with(
        txn,
        m,
        sub,
        args,
        out,
        if values {
            ScanValues::Raw
        } else {
            ScanValues::None
        },
    )
}

pub fn scan_with(
    txn: &Txn<'_>,
    m: Option<&Meta>,
    sub: &[u8],
    args: &[Bytes],
    out: &mut Out,
    values: ScanValues,
) -> CmdResult {
    let cursor: u64 = std::str::from_utf8(&args[2])
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or("ERR invalid cursor")?;
    let (mut pattern, mut count) = (None, 10i64);
    let mut i = 3;
    while i < args.len() {
        let Some(val) = args.get(i + 1) else {
            return Err(SYNTAX.to_owned());
        };
        match &args[i].to_ascii_lowercase()[..] {
            b"match" => pattern = Some(val.clone()),
            b"count" => {
                count = int_arg(val)?;
                if count < 1 {
                    return Err(SYNTAX.to_owned());
                }
            }
            _ => return Err(SYNTAX.to_owned()),
        }
        i += 2;
    }
    let mut found: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let mut next = 0u64;
    if let Some(m) = m {
        let whole = m.count <= SCAN_WHOLE_ELEMENTS;
        let mut lo = m.elem(sub);
        if cursor > 0 && !whole {
            lo.extend(decode_cursor(cursor).unwrap_or_default());
        }
        let hi = if sub.is_empty() {
            m.end()
        } else {
            let mut h = m.elem(sub);
            *h.last_mut().expect("a sub-tag") += 1;
            h
        };
        let skip = m.prefix_len() + sub.len();
        let mut seen = 0i64;
        let mut stop_prefix: Option<Vec<u8>> = None;
        let mut bad = None;
        txn.elems_in(&lo, &hi, false, |k, v| {
            // The cursor holds the start of the suffix (a name hash first
            // but in a set).
            let rest = &k[skip..];
            let Some(name) = m.name_in(rest) else {
                bad = Some(crate::store::malformed_element(k));
                return false;
            };
            let v = match values {
                ScanValues::Score => match crate::store::stored_score(k, v) {
                    Ok(s) => std::borrow::Cow::Owned(format_score(s).into_bytes()),
                    Err(d) => {
                        bad = Some(d);
                        return false;
                    }
                },
                _ => std::borrow::Cow::Borrowed(v),
            };
            let prefix = &rest[..rest.len().min(CURSOR_PREFIX_BYTES)];
            if !whole && seen >= count {
                match &stop_prefix {
                    Some(p) if p.as_slice() == prefix => {}
                    _ => {
                        next = encode_cursor(prefix);
                        return false;
                    }
                }
            }
            seen += 1;
            stop_prefix = Some(prefix.to_vec());
            if pattern
                .as_ref()
                .is_none_or(|p| glob::matches(p, name, false))
            {
                found.push((name.to_vec(), v.to_vec()));
            }
            true
        })
        .map_err(engine)?;
        if let Some(d) = bad {
            return Err(txn.damaged(d));
        }
    }
    out.array(2);
    out.bulk(next.to_string().as_bytes());
    let per = if values == ScanValues::None { 1 } else { 2 };
    out.array(found.len() * per);
    for (name, v) in found {
        out.bulk(&name);
        // A score is formatted as the walk read it.
        if values != ScanValues::None {
            out.bulk(&v);
        }
    }
    Ok(())
}

/// A double as redis-server 7.0 replies with one (`%.17g`; `inf`, `-inf`).
pub fn format_score(v: f64) -> String {
    if v.is_infinite() {
        return if v > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0" } else { "0" }.to_owned();
    }
    // An integer of at most 17 digits is all its digits under %.17g (the
    // common score; the scientific detour costs a pop's reply ~1 µs).
    if v.fract() == 0.0 && v.abs() < 1e17 {
        return itoa::Buffer::new().format(v as i64).to_owned();
    }
    // 17 significant digits in scientific form, then %g's choice.
    let sci = format!("{v:.16e}");
    let (mantissa, exp) = sci.split_once('e').expect("scientific form");
    let exp: i32 = exp.parse().expect("an exponent");
    let (neg, digits) = match mantissa.strip_prefix('-') {
        Some(m) => (true, m.replace('.', "")),
        None => (false, mantissa.replace('.', "")),
    };
    let sign = if neg { "-" } else { "" };
    if !(-4..17).contains(&exp) {
        let mut m = format!("{}.{}", &digits[..1], &digits[1..]);
        while m.ends_with('0') {
            m.pop();
        }
        if m.ends_with('.') {
            m.pop();
        }
        let esign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{m}e{esign}{:02}", exp.abs());
    }
    let mut s = if exp >= 0 {
        let int_len = exp as usize + 1;
        format!("{}.{}", &digits[..int_len], &digits[int_len..])
    } else {
        format!("0.{}{}", "0".repeat((-exp - 1) as usize), digits)
    };
    if s.contains('.') {
        while s.ends_with('0') {
            s.pop();
        }
        if s.ends_with('.') {
            s.pop();
        }
    }
    format!("{sign}{s}")
}

/// The `[LIMIT limit]` that ends `SINTERCARD` and `ZINTERCARD` from
/// `args[from]` on: 0 (no limit) when absent.
pub(crate) fn card_limit(args: &[Bytes], from: usize) -> Result<usize, String> {
    let mut limit = 0usize;
    let mut i = from;
    while i < args.len() {
        if args[i].eq_ignore_ascii_case(b"limit") && i + 1 < args.len() {
            let l = int_arg(&args[i + 1]).map_err(|_| "ERR LIMIT can't be negative".to_owned())?;
            if l < 0 {
                return Err("ERR LIMIT can't be negative".to_owned());
            }
            limit = l as usize;
            i += 2;
        } else {
            return Err(SYNTAX.to_owned());
        }
    }
    Ok(limit)
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    /// Regression: the picks were the unshuffled front of the slice, so
    /// the last element was never picked.
    #[test]
    fn random_picks_are_distinct_and_reach_every_element() {
        let mut seen = [false; 3];
        for _ in 0..200 {
            let p = random_picks(3, 2);
            assert_eq!(p.len(), 2);
            assert_ne!(p[0], p[1]);
            for i in p {
                seen[i] = true;
            }
        }
        assert_eq!(seen, [true; 3]);
        assert_eq!(random_picks(3, 5), [0, 1, 2]);
        assert_eq!(random_picks(3, -5).len(), 5);
        assert!(random_picks(0, -5).is_empty());
    }

    /// A cursor holds this keyspace format: one from before it (format
    /// 0 there, an older build's or another layout's) starts the scan again.
    #[test]
    fn cursors_carry_the_keyspace_format() {
        for prefix in [
            &b""[..],
            b"a",
            b"\0\0\0\0\0\0\0",
            b"\xff\xff\xff\xff\xff\xff\xff",
        ] {
            let c = encode_cursor(prefix);
            assert_ne!(c, 0);
            assert_eq!(decode_cursor(c).as_deref(), Some(prefix));
            let before = c - (u64::from(KEYSPACE_FORMAT) << CURSOR_FORMAT_SHIFT);
            assert_eq!(decode_cursor(before), None, "{prefix:?}");
        }
        // The format document's example.
        let next = [0x0c, 0x35, 0x4e, 0xcd, 0x6e, 0x61, 0x6d];
        assert_eq!(encode_cursor(&next), 1_084_300_222_859_731_310);
    }

    /// Redis's promise: an element present from the start to the end of a
    /// full scan is returned at least once, whatever happens in between.
    /// Each collection starts at a size around the one-call size (where a
    /// scan stops returning everything with cursor 0 and hands out
    /// cursors) and grows by 40 elements after each of its first 10 calls,
    /// some also shrinking back halfway (the new elements removed).
    #[test]
    fn a_scan_returns_every_element_while_the_collection_grows_past_one_call() {
        const GROWING_CALLS: usize = 10;
        let seed: u64 = rand::random();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let ks = crate::testutil::keyspace();
        let run = |args: &[&[u8]]| crate::testutil::command(&ks, args).unwrap();
        for start in [100usize, 128, 129, 200] {
            for shrink in [false, true] {
                for (add, scan, per) in [
                    (&b"hset"[..], &b"hscan"[..], 2),
                    (b"sadd", b"sscan", 1),
                    (b"zadd", b"zscan", 2),
                ] {
                    let key = format!("{}-{start}-{shrink}", String::from_utf8_lossy(add));
                    let key = key.as_bytes();
                    let mut fresh = |n: usize| -> Vec<Vec<u8>> {
                        (0..n)
                            .map(|_| {
                                let len = rng.gen_range(1..12);
                                (0..len).map(|_| rng.gen_range(b'a'..=b'z')).collect()
                            })
                            .collect()
                    };
                    let put = |names: &[Vec<u8>]| {
                        let mut args: Vec<&[u8]> = vec![add, key];
                        for n in names {
                            match add {
                                b"sadd" => args.push(n),
                                b"zadd" => args.extend([&b"1"[..], n]),
                                _ => args.extend([&n[..], b"v"]),
                            }
                        }
                        run(&args);
                    };
                    let mut original = fresh(start);
                    original.sort();
                    original.dedup();
                    put(&original);
                    let mut added = Vec::new();
                    let mut got = std::collections::BTreeSet::new();
                    let mut cursor = 0u64;
                    for call in 0.. {
                        assert!(call < 10_000, "seed {seed}: the scan did not end");
                        let c = cursor.to_string();
                        let reply = run(&[scan, key, c.as_bytes(), b"COUNT", b"3"]);
                        let (next, items) = crate::testutil::scan_reply(&reply);
                        got.extend(items.into_iter().step_by(per));
                        cursor = next;
                        if cursor == 0 {
                            break;
                        }
                        if call < GROWING_CALLS {
                            let more = fresh(40);
                            put(&more);
                            added.extend(more);
                        }
                        if shrink && call == GROWING_CALLS / 2 {
                            let remove = match add {
                                b"hset" => &b"hdel"[..],
                                b"sadd" => b"srem",
                                _ => b"zrem",
                            };
                            for n in added.drain(..).filter(|n| !original.contains(n)) {
                                run(&[remove, key, &n]);
                            }
                        }
                    }
                    for n in &original {
                        assert!(
                            got.contains(n),
                            "seed {seed}: {} of {} (start {start}, shrink {shrink}) never returned",
                            String::from_utf8_lossy(n),
                            String::from_utf8_lossy(key)
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn scores_format_as_printf_17g() {
        for (v, want) in [
            (1.0, "1"),
            (1.1, "1.1000000000000001"),
            (-2.5, "-2.5"),
            (0.1, "0.10000000000000001"),
            (1e17, "1e+17"),
            (1e16, "10000000000000000"),
            (-42.0, "-42"),
            (12345678901234567.0, "12345678901234568"),
            (1.5e-5, "1.5e-05"),
            (0.0001, "0.0001"),
            (f64::INFINITY, "inf"),
            (3.0e100, "2.9999999999999999e+100"),
        ] {
            assert_eq!(format_score(v), want, "{v}");
        }
    }
}
