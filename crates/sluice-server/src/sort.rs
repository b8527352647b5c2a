//! `SORT key [BY pattern] [LIMIT offset count] [GET pattern ...]
//! [ASC|DESC] [ALPHA] [STORE destination]` and `SORT_RO` (no `STORE`), as
//! redis-server 7.0 runs them, `BY` and `GET` patterns included: a
//! pattern's first `*` is replaced by the element, and `key->field` reads
//! a hash's field. The pattern keys are read, not locked (redis-server's
//! key specs call them unknown keys; a read command reads them at its
//! snapshot).
//!
//! Where redis-server's order is not defined by the command, this one's
//! is: equal `ALPHA` keys under `BY` keep their input order (redis-server's
//! quicksort leaves them in any order), `ALPHA` compares bytes (as
//! redis-server in the C locale), and a set sorted `BY` a constant comes in
//! member order (redis-server: its hash table's).

use std::cmp::Ordering;

use bytes::Bytes;

use crate::data::{engine, int_arg, CmdResult, SYNTAX};
use crate::resp::Out;
use crate::store::{CollKind, Rec, Txn, WRONGTYPE};

/// Runs `SORT`/`SORT_RO`; `None` if `name` is neither.
pub fn run(name: &str, args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> Option<CmdResult> {
    matches!(name, "sort" | "sort_ro").then(|| sort(name == "sort_ro", args, txn, out))
}

struct Options<'a> {
    desc: bool,
    alpha: bool,
    limit: Option<(i64, i64)>,
    store: Option<&'a [u8]>,
    by: Option<&'a [u8]>,
    /// `BY` a pattern without `*`: no sorting at all.
    dont_sort: bool,
    gets: Vec<&'a [u8]>,
}

fn options(args: &[Bytes], readonly: bool) -> Result<Options<'_>, String> {
    let mut o = Options {
        desc: false,
        alpha: false,
        limit: None,
        store: None,
        by: None,
        dont_sort: false,
        gets: Vec::new(),
    };
    let mut j = 2;
    while j < args.len() {
        let left = args.len() - j - 1;
        match &args[j].to_ascii_lowercase()[..] {
            b"asc" => o.desc = false,
            b"desc" => o.desc = true,
            b"alpha" => o.alpha = true,
            b"limit" if left >= 2 => {
                o.limit = Some((int_arg(&args[j + 1])?, int_arg(&args[j + 2])?));
                j += 2;
            }
            b"store" if left >= 1 && !readonly => {
                o.store = Some(&args[j + 1]);
                j += 1;
            }
            b"by" if left >= 1 => {
                o.by = Some(&args[j + 1]);
                o.dont_sort = !args[j + 1].contains(&b'*');
                j += 1;
            }
            b"get" if left >= 1 => {
                o.gets.push(&args[j + 1]);
                j += 1;
            }
            _ => return Err(SYNTAX.to_owned()),
        }
        j += 1;
    }
    Ok(o)
}

/// The keys `SORT` writes or must lock: the sorted key and the last
/// `STORE` destination (redis-server's `sortGetKeys`).
pub fn keys(args: &[Bytes]) -> Vec<&[u8]> {
    let mut keys: Vec<&[u8]> = vec![&args[1]];
    let mut store = None;
    let mut j = 2;
    while j < args.len() {
        let skip = match &args[j].to_ascii_lowercase()[..] {
            b"limit" => 2,
            b"get" | b"by" => 1,
            b"store" => {
                if let Some(k) = args.get(j + 1) {
                    store = Some(&k[..]);
                }
                1
            }
            _ => 0,
        };
        j += 1 + skip;
    }
    keys.extend(store);
    keys
}

/// The value a pattern names for `elem`: `#` is the element itself, else
/// the string at the key with the first `*` replaced by `elem`, or with a
/// `->field` suffix after the `*` that hash's field. `None` when the key,
/// field or `*` is missing or the key holds another type.
fn lookup(txn: &mut Txn<'_>, pattern: &[u8], elem: &[u8]) -> Result<Option<Vec<u8>>, String> {
    if pattern == b"#" {
        return Ok(Some(elem.to_vec()));
    }
    let Some(star) = pattern.iter().position(|&c| c == b'*') else {
        return Ok(None);
    };
    let after = &pattern[star + 1..];
    let (rest, field) = match after.windows(2).position(|w| w == b"->") {
        Some(at) if at + 2 < after.len() => (&after[..at], Some(&after[at + 2..])),
        _ => (after, None),
    };
    let key = [&pattern[..star], elem, rest].concat();
    match (txn.rec(&key).map_err(engine)?, field) {
        (Some(Rec::Str(e)), None) => Ok(Some(e.value.to_vec())),
        (Some(Rec::Coll(m)), Some(f)) if m.kind == CollKind::Hash => {
            txn.elem(&m.named(f)).map_err(engine)
        }
        _ => Ok(None),
    }
}

/// A sort weight as redis-server's `strtod` reads it: leading spaces,
/// then the whole rest a number (an empty rest is 0); `None` for anything
/// else, NaN, or a finite text out of range.
fn weight(v: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(v).ok()?;
    let s = s.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    if s.is_empty() {
        return Some(0.0);
    }
    let x: f64 = s.parse().ok()?;
    let literal_inf = s
        .trim_start_matches(['+', '-'])
        .to_ascii_lowercase()
        .starts_with("inf");
    (!x.is_nan() && (x.is_finite() || literal_inf)).then_some(x)
}

/// The elements of the key to sort, in its own order (a list's, a sorted
/// set's by score, a set's by member); `WRONGTYPE` for strings and hashes.
fn elements(txn: &mut Txn<'_>, key: &[u8]) -> Result<(Vec<Vec<u8>>, Option<CollKind>), String> {
    let m = match txn.rec(key).map_err(engine)? {
        None => return Ok((Vec::new(), None)),
        Some(Rec::Coll(m)) if m.kind != CollKind::Hash => m,
        Some(_) => return Err(WRONGTYPE.to_owned()),
    };
    let elems = match m.kind {
        CollKind::ZSet => crate::zset::members_by_score(txn, &m)?,
        CollKind::List => txn
            .all_elems(&m)
            .map_err(engine)?
            .into_iter()
            .map(|(_, v)| v)
            .collect(),
        _ => txn
            .names(&m)
            .map_err(engine)?
            .into_iter()
            .map(|(k, _)| k)
            .collect(),
    };
    Ok((elems, Some(m.kind)))
}

/// redis-server's `LIMIT` arithmetic: the positions `start ..= end` kept
/// out of `n` (empty when `end < start`).
fn window(limit: Option<(i64, i64)>, n: i64) -> (i64, i64) {
    let (offset, count) = limit.unwrap_or((0, -1));
    let mut start = offset.max(0).min(n);
    let count = count.max(-1).min(n);
    let mut end = if count < 0 { n - 1 } else { start + count - 1 };
    if start >= n {
        start = n - 1;
        end = n - 2;
    }
    (start, end.min(n - 1))
}

fn sort(readonly: bool, args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> CmdResult {
    let mut o = options(args, readonly)?;
    let (mut elems, kind) = elements(txn, &args[1])?;
    // A set has no order of its own to keep: stored or not, it is sorted.
    if o.dont_sort && kind == Some(CollKind::Set) && o.store.is_some() {
        o.dont_sort = false;
        o.alpha = true;
        o.by = None;
    }
    let (start, end) = window(o.limit, elems.len() as i64);
    if o.dont_sort {
        if o.desc && kind != Some(CollKind::Set) {
            elems.reverse();
        }
    } else {
        sort_elements(txn, &o, &mut elems)?;
    }
    let picked: &[Vec<u8>] = if end >= start {
        &elems[start as usize..=end as usize]
    } else {
        &[]
    };
    let mut rows: Vec<Option<Vec<u8>>> = Vec::new();
    for e in picked {
        if o.gets.is_empty() {
            rows.push(Some(e.clone()));
        }
        for g in &o.gets {
            rows.push(lookup(txn, g, e)?);
        }
    }
    match o.store {
        None => {
            out.array(rows.len());
            for r in &rows {
                out.opt_bulk(r.as_deref());
            }
        }
        Some(dst) => {
            let existed = txn.peek(dst).map_err(engine)?.is_some();
            if rows.is_empty() {
                txn.delete(dst);
                if existed {
                    txn.notify(crate::notify::GENERIC, "del", dst);
                }
            } else {
                // A fresh list replaces whatever `dst` held.
                let mut m = txn.new_coll(CollKind::List)?;
                for r in &rows {
                    let v = r.as_deref().unwrap_or(b"").to_vec();
                    txn.elem_put(m.elem(&crate::store::list_seq(m.tail)), v);
                    m.tail += 1;
                    m.count += 1;
                }
                txn.put_meta(dst, m);
                txn.notify(crate::notify::LIST, "sortstore", dst);
            }
            out.int(rows.len() as i64);
        }
    }
    Ok(())
}

/// Sorts by weight (numbers, ties by element bytes) or, with `ALPHA`, by
/// the element or its `BY` value (a missing value first).
fn sort_elements(txn: &mut Txn<'_>, o: &Options<'_>, elems: &mut Vec<Vec<u8>>) -> CmdResult {
    let mut keyed: Vec<(Option<Vec<u8>>, f64, Vec<u8>)> = Vec::with_capacity(elems.len());
    let mut bad_weight = false;
    for e in elems.drain(..) {
        let by = match o.by {
            Some(p) => lookup(txn, p, &e)?,
            None => None,
        };
        let mut w = 0.0;
        if !o.alpha {
            let src = if o.by.is_some() {
                by.as_deref()
            } else {
                Some(&e[..])
            };
            if let Some(v) = src {
                match weight(v) {
                    Some(x) => w = x,
                    None => bad_weight = true,
                }
            }
        }
        keyed.push((by, w, e));
    }
    if bad_weight {
        return Err("ERR One or more scores can't be converted into double".to_owned());
    }
    let by_pattern = o.by.is_some();
    keyed.sort_by(|a, b| {
        let c = if !o.alpha {
            a.1.partial_cmp(&b.1)
                .unwrap_or(Ordering::Equal)
                .then_with(|| a.2.cmp(&b.2))
        } else if by_pattern {
            a.0.cmp(&b.0)
        } else {
            a.2.cmp(&b.2)
        };
        if o.desc {
            c.reverse()
        } else {
            c
        }
    });
    elems.extend(keyed.into_iter().map(|(_, _, e)| e));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_read_as_strtod_reads_them() {
        assert_eq!(weight(b"1.5"), Some(1.5));
        assert_eq!(weight(b"  -2"), Some(-2.0));
        assert_eq!(weight(b""), Some(0.0));
        assert_eq!(weight(b"+inf"), Some(f64::INFINITY));
        assert_eq!(weight(b"1e400"), None, "out of range");
        assert_eq!(weight(b"nan"), None);
        assert_eq!(weight(b"1x"), None);
    }

    #[test]
    fn the_limit_window_is_redis_servers() {
        assert_eq!(window(None, 5), (0, 4));
        assert_eq!(window(Some((1, 2)), 5), (1, 2));
        assert_eq!(window(Some((-3, 2)), 5), (0, 1));
        assert_eq!(window(Some((4, 10)), 5), (4, 4));
        assert_eq!(window(Some((5, 1)), 5), (4, 3));
        assert_eq!(window(Some((0, 0)), 5), (0, -1));
        assert_eq!(window(None, 0), (-1, -2));
    }
}
