//! Sorted sets: a metadata record, a member record per member
//! (`'e' | version | 0x00 | name hash | member -> score`) and a score-ordered index
//! entry per member (`'e' | version | 0x01 | sortable score | member`).
//! `ZSCORE` is one read; ranges by score or rank and the pops are reads
//! of the index; a score change rewrites the member's two keys.

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;

use crate::coll::{card_limit, format_score, scan_with, ScanValues};
use crate::data::{engine, int_arg, parse_float, CmdResult, SYNTAX};
use crate::notify as ev;
use crate::resp::Out;
use crate::store::{
    stored_score, zset_index_entry, zset_index_suffix, zset_member_key, CollKind, Meta, Rec, Txn,
    ZSET_INDEX, ZSET_MEMBER,
};

const ZSET: CollKind = CollKind::ZSet;
/// Most index entries a pop reads past its own for the pops after it in
/// a pipelined run ([`Txn::keep_popped_ahead`]).
const POP_AHEAD_MAX: usize = 32;
const NOT_FLOAT: &str = "ERR value is not a valid float";
const MINMAX_FLOAT: &str = "ERR min or max is not a float";
const MINMAX_LEX: &str = "ERR min or max not valid string range item";

fn score_of(txn: &Txn<'_>, m: &Meta, member: &[u8]) -> Result<Option<f64>, String> {
    let ekey = zset_member_key(m, member);
    txn.elem(&ekey)
        .map_err(engine)?
        .map(|v| stored_score(&ekey, &v).map_err(|d| txn.damaged(d)))
        .transpose()
}

/// Sets `member`'s score (adding it if new), rewriting its index entry.
pub fn put(txn: &mut Txn<'_>, m: &mut Meta, member: &[u8], score: f64, old: Option<f64>) {
    let score = if score == 0.0 { 0.0 } else { score };
    match old {
        Some(o) => txn.elem_del(m.elem(&zset_index_suffix(o, member))),
        None => m.count += 1,
    }
    txn.elem_put(zset_member_key(m, member), score.to_le_bytes().to_vec());
    let index_key = m.elem(&zset_index_suffix(score, member));
    txn.index_inserted(m, &index_key);
    txn.elem_put(index_key, Vec::new());
}

fn del(txn: &mut Txn<'_>, m: &mut Meta, member: &[u8], score: f64) {
    txn.elem_del(zset_member_key(m, member));
    txn.elem_del(m.elem(&zset_index_suffix(score, member)));
    m.count -= 1;
}

/// The members in index order (descending with `rev`): `f` gets
/// (member, score) and returns false to stop. The walk starts and ends at
/// the bounds the pops learnt, past the tombstones of popped members.
fn walk(
    txn: &Txn<'_>,
    m: &Meta,
    rev: bool,
    mut f: impl FnMut(&[u8], f64) -> bool,
) -> Result<(), String> {
    let mut bad = None;
    let (lo, hi) = txn.index_bounds(m);
    txn.elems_in(
        &lo.unwrap_or_else(|| m.elem(&[ZSET_INDEX])),
        &hi.unwrap_or_else(|| m.elem(&[ZSET_INDEX + 1])),
        rev,
        |k, _| match zset_index_entry(m, k) {
            Ok((member, score)) => f(member, score),
            Err(d) => {
                bad = Some(d);
                false
            }
        },
    )
    .map_err(engine)?;
    match bad {
        Some(d) => Err(txn.damaged(d)),
        None => Ok(()),
    }
}

/// Every member of `m` in score order (`SORT`'s input).
pub fn members_by_score(txn: &Txn<'_>, m: &Meta) -> Result<Vec<Vec<u8>>, String> {
    let mut v = Vec::with_capacity(m.count as usize);
    walk(txn, m, false, |member, _| {
        v.push(member.to_vec());
        true
    })?;
    Ok(v)
}

/// A score bound: value and whether it is exclusive.
#[derive(Clone, Copy)]
struct ScoreBound(f64, bool);

fn score_bound(b: &[u8]) -> Result<ScoreBound, String> {
    let (ex, rest) = match b.strip_prefix(b"(") {
        Some(r) => (true, r),
        None => (false, b),
    };
    let v = parse_float(rest).ok_or(MINMAX_FLOAT)?;
    Ok(ScoreBound(v, ex))
}

impl ScoreBound {
    fn below(self, s: f64) -> bool {
        // s is at or past the lower bound.
        if self.1 {
            s > self.0
        } else {
            s >= self.0
        }
    }
    fn above(self, s: f64) -> bool {
        if self.1 {
            s < self.0
        } else {
            s <= self.0
        }
    }
}

#[derive(Clone)]
enum LexBound {
    Min,
    Max,
    In(Vec<u8>, bool),
}

fn lex_bound(b: &[u8]) -> Result<LexBound, String> {
    match b.first() {
        Some(b'-') if b.len() == 1 => Ok(LexBound::Min),
        Some(b'+') if b.len() == 1 => Ok(LexBound::Max),
        Some(b'(') => Ok(LexBound::In(b[1..].to_vec(), true)),
        Some(b'[') => Ok(LexBound::In(b[1..].to_vec(), false)),
        _ => Err(MINMAX_LEX.to_owned()),
    }
}

fn lex_ge(lo: &LexBound, m: &[u8]) -> bool {
    match lo {
        LexBound::Min => true,
        LexBound::Max => false,
        LexBound::In(v, ex) => {
            if *ex {
                m > v.as_slice()
            } else {
                m >= v.as_slice()
            }
        }
    }
}

fn lex_le(hi: &LexBound, m: &[u8]) -> bool {
    match hi {
        LexBound::Min => false,
        LexBound::Max => true,
        LexBound::In(v, ex) => {
            if *ex {
                m < v.as_slice()
            } else {
                m <= v.as_slice()
            }
        }
    }
}

enum By {
    Rank(i64, i64),
    Score(ScoreBound, ScoreBound),
    Lex(LexBound, LexBound),
}

struct RangeSpec {
    by: By,
    rev: bool,
    /// (offset, count); count < 0: all.
    limit: Option<(i64, i64)>,
}

/// The members a range selects, with their scores, in reply order.
fn range(txn: &Txn<'_>, m: &Meta, spec: &RangeSpec) -> Result<Vec<(Vec<u8>, f64)>, String> {
    let mut got = Vec::new();
    match &spec.by {
        By::Rank(start, stop) => {
            let len = m.count as i64;
            let start = if *start < 0 { start + len } else { *start }.max(0);
            let stop = if *stop < 0 { stop + len } else { *stop }.min(len - 1);
            if start > stop || start >= len {
                return Ok(got);
            }
            let mut i = 0i64;
            walk(txn, m, spec.rev, |member, s| {
                if i >= start {
                    got.push((member.to_vec(), s));
                }
                i += 1;
                i <= stop
            })?;
        }
        By::Score(min, max) => {
            // Past the range's far end in the walk's direction; in it.
            let past = |_: &[u8], s: f64| {
                if spec.rev {
                    !min.below(s)
                } else {
                    !max.above(s)
                }
            };
            let inside = |_: &[u8], s: f64| min.below(s) && max.above(s);
            walk_limited(txn, m, spec, &mut got, past, inside)?;
        }
        By::Lex(min, max) => {
            let past = |member: &[u8], _: f64| {
                if spec.rev {
                    !lex_ge(min, member)
                } else {
                    !lex_le(max, member)
                }
            };
            let inside = |member: &[u8], _: f64| lex_ge(min, member) && lex_le(max, member);
            walk_limited(txn, m, spec, &mut got, past, inside)?;
        }
    }
    Ok(got)
}

/// Walks the members in `spec`'s direction until `past`, collecting those
/// `inside` after skipping `spec.limit`'s offset, at most its count (a
/// negative count: all): the score and lex forms of ZRANGE.
fn walk_limited(
    txn: &Txn<'_>,
    m: &Meta,
    spec: &RangeSpec,
    got: &mut Vec<(Vec<u8>, f64)>,
    past: impl Fn(&[u8], f64) -> bool,
    inside: impl Fn(&[u8], f64) -> bool,
) -> Result<(), String> {
    let (offset, count) = spec.limit.unwrap_or((0, -1));
    if offset < 0 || count == 0 {
        return Ok(());
    }
    let mut skipped = 0;
    walk(txn, m, spec.rev, |member, s| {
        if past(member, s) {
            return false;
        }
        if inside(member, s) {
            if skipped < offset {
                skipped += 1;
            } else {
                got.push((member.to_vec(), s));
                if count >= 0 && got.len() as i64 >= count {
                    return false;
                }
            }
        }
        true
    })
}

fn reply_scored(out: &mut Out, items: &[(Vec<u8>, f64)], with_scores: bool) {
    if with_scores && out.resp3 {
        out.array(items.len());
        for (m, s) in items {
            out.array(2);
            out.bulk(m);
            out.double(&format_score(*s));
        }
    } else {
        out.array(items.len() * if with_scores { 2 } else { 1 });
        for (m, s) in items {
            out.bulk(m);
            if with_scores {
                out.bulk(format_score(*s).as_bytes());
            }
        }
    }
}

/// Runs a sorted-set command; `None` if `name` is not one.
pub fn run(name: &str, args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> Option<CmdResult> {
    let r = match name {
        "zadd" => zadd(args, txn, out),
        "zincrby" => (|| {
            let by = parse_float(&args[2]).ok_or(NOT_FLOAT)?;
            let mut m = match txn.coll(&args[1], ZSET)? {
                Some(m) => m,
                None => txn.new_coll(ZSET)?,
            };
            let old = score_of(txn, &m, &args[3])?;
            let s = old.unwrap_or(0.0) + by;
            if s.is_nan() {
                return Err("ERR resulting score is not a number (NaN)".to_owned());
            }
            put(txn, &mut m, &args[3], s, old);
            txn.put_meta(&args[1], m);
            txn.notify(ev::ZSET, "zincr", &args[1]);
            out.double(&format_score(s));
            Ok(())
        })(),
        "zrem" => (|| {
            let Some(mut m) = txn.coll(&args[1], ZSET)? else {
                out.int(0);
                return Ok(());
            };
            let mut n = 0;
            for a in &args[2..] {
                if let Some(s) = score_of(txn, &m, a)? {
                    del(txn, &mut m, a, s);
                    n += 1;
                }
            }
            if n > 0 {
                txn.put_meta(&args[1], m);
                txn.notify(ev::ZSET, "zrem", &args[1]);
            }
            out.int(n);
            Ok(())
        })(),
        "zscore" => (|| {
            let s = match txn.coll(&args[1], ZSET)? {
                Some(m) => score_of(txn, &m, &args[2])?,
                None => None,
            };
            match s {
                Some(s) => out.double(&format_score(s)),
                None => out.null(),
            }
            Ok(())
        })(),
        "zmscore" => (|| {
            let m = txn.coll(&args[1], ZSET)?;
            out.array(args.len() - 2);
            for a in &args[2..] {
                let s = match &m {
                    Some(m) => score_of(txn, m, a)?,
                    None => None,
                };
                match s {
                    Some(s) => out.double(&format_score(s)),
                    None => out.null(),
                }
            }
            Ok(())
        })(),
        "zcard" => txn.coll(&args[1], ZSET).map(|m| {
            out.int(m.map_or(0, |m| m.count as i64));
        }),
        "zcount" | "zlexcount" => (|| {
            let by = if name == "zcount" {
                By::Score(score_bound(&args[2])?, score_bound(&args[3])?)
            } else {
                By::Lex(lex_bound(&args[2])?, lex_bound(&args[3])?)
            };
            let n = match txn.coll(&args[1], ZSET)? {
                Some(m) => range(
                    txn,
                    &m,
                    &RangeSpec {
                        by,
                        rev: false,
                        limit: None,
                    },
                )?
                .len(),
                None => 0,
            };
            out.int(n as i64);
            Ok(())
        })(),
        "zrange" | "zrevrange" | "zrangebyscore" | "zrevrangebyscore" | "zrangebylex"
        | "zrevrangebylex" => (|| {
            let (spec, with_scores) = parse_range(name, &args[1..])?;
            let items = match txn.coll(&args[1], ZSET)? {
                Some(m) => range(txn, &m, &spec)?,
                None => Vec::new(),
            };
            reply_scored(out, &items, with_scores);
            Ok(())
        })(),
        "zrangestore" => (|| {
            let (spec, with_scores) = parse_range("zrange", &args[2..])?;
            if with_scores {
                return Err(SYNTAX.to_owned());
            }
            let items = match txn.coll(&args[2], ZSET)? {
                Some(m) => range(txn, &m, &spec)?,
                None => Vec::new(),
            };
            let n = items.len();
            store(txn, &args[1], items.into_iter())?;
            if n > 0 {
                txn.notify(ev::ZSET, "zrangestore", &args[1]);
            }
            out.int(n as i64);
            Ok(())
        })(),
        "zrank" | "zrevrank" => (|| {
            let mut rank = None;
            if let Some(m) = txn.coll(&args[1], ZSET)? {
                if score_of(txn, &m, &args[2])?.is_some() {
                    let mut i = 0i64;
                    walk(txn, &m, name == "zrevrank", |member, _| {
                        if member == &args[2][..] {
                            rank = Some(i);
                            return false;
                        }
                        i += 1;
                        true
                    })?;
                }
            }
            match rank {
                Some(r) => out.int(r),
                None => out.null(),
            }
            Ok(())
        })(),
        "zpopmin" | "zpopmax" => zpop(name, args, txn, out),
        "bzpopmin" | "bzpopmax" => bzpop(name, args, txn, out),
        "zmpop" | "bzmpop" => zmpop(name, args, txn, out),
        "zrandmember" => zrandmember(args, txn, out),
        "zremrangebyscore" | "zremrangebyrank" | "zremrangebylex" => (|| {
            let by = match name {
                "zremrangebyscore" => By::Score(score_bound(&args[2])?, score_bound(&args[3])?),
                "zremrangebylex" => By::Lex(lex_bound(&args[2])?, lex_bound(&args[3])?),
                _ => By::Rank(int_arg(&args[2])?, int_arg(&args[3])?),
            };
            let Some(mut m) = txn.coll(&args[1], ZSET)? else {
                out.int(0);
                return Ok(());
            };
            let items = range(
                txn,
                &m,
                &RangeSpec {
                    by,
                    rev: false,
                    limit: None,
                },
            )?;
            for (member, s) in &items {
                del(txn, &mut m, member, *s);
            }
            if !items.is_empty() {
                txn.put_meta(&args[1], m);
                let event = ev::event_of(
                    name,
                    &["zremrangebyscore", "zremrangebylex", "zremrangebyrank"],
                );
                txn.notify(ev::ZSET, event, &args[1]);
            }
            out.int(items.len() as i64);
            Ok(())
        })(),
        "zunionstore" | "zinterstore" | "zdiffstore" => combine(name, &args[1..], args, txn, out),
        "zunion" | "zinter" | "zdiff" => combine(name, &[], args, txn, out),
        "zintercard" => zintercard(args, txn, out),
        "zscan" => (|| {
            let m = txn.coll(&args[1], ZSET)?;
            scan_with(
                txn,
                m.as_ref(),
                &[ZSET_MEMBER],
                args,
                out,
                ScanValues::Score,
            )
        })(),
        _ => return None,
    };
    Some(r)
}

/// `ZRANGE key start stop [BYSCORE|BYLEX] [REV] [LIMIT o c] [WITHSCORES]`
/// and the older forms; `args` starts at the key.
fn parse_range(name: &str, args: &[Bytes]) -> Result<(RangeSpec, bool), String> {
    let (mut byscore, mut bylex, mut rev) = (false, false, false);
    let mut limit = None;
    let mut with_scores = false;
    match name {
        "zrevrange" => rev = true,
        "zrangebyscore" => byscore = true,
        "zrevrangebyscore" => (byscore, rev) = (true, true),
        "zrangebylex" => bylex = true,
        "zrevrangebylex" => (bylex, rev) = (true, true),
        _ => {}
    }
    let mut i = 3;
    while i < args.len() {
        let opt = args[i].to_ascii_lowercase();
        match &opt[..] {
            b"withscores" if name != "zrangebylex" && name != "zrevrangebylex" => {
                with_scores = true
            }
            b"limit" if i + 2 < args.len() && name != "zrevrange" => {
                limit = Some((int_arg(&args[i + 1])?, int_arg(&args[i + 2])?));
                i += 2;
            }
            b"byscore" if name == "zrange" && !bylex => byscore = true,
            b"bylex" if name == "zrange" && !byscore => bylex = true,
            b"rev" if name == "zrange" => rev = true,
            _ => return Err(SYNTAX.to_owned()),
        }
        i += 1;
    }
    if limit.is_some() && !byscore && !bylex {
        return Err(
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX"
                .to_owned(),
        );
    }
    if with_scores && bylex {
        return Err(
            "ERR syntax error, WITHSCORES not supported in combination with BYLEX".to_owned(),
        );
    }
    // With REV the bounds come max first.
    let (lo, hi) = if rev && (byscore || bylex) {
        (&args[2], &args[1])
    } else {
        (&args[1], &args[2])
    };
    let by = if byscore {
        By::Score(score_bound(lo)?, score_bound(hi)?)
    } else if bylex {
        By::Lex(lex_bound(lo)?, lex_bound(hi)?)
    } else {
        By::Rank(int_arg(&args[1])?, int_arg(&args[2])?)
    };
    Ok((RangeSpec { by, rev, limit }, with_scores))
}

/// `ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member ...`.
fn zadd(args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> CmdResult {
    let (mut nx, mut xx, mut gt, mut lt, mut ch, mut incr) =
        (false, false, false, false, false, false);
    let mut i = 2;
    while i < args.len() {
        match &args[i].to_ascii_lowercase()[..] {
            b"nx" => nx = true,
            b"xx" => xx = true,
            b"gt" => gt = true,
            b"lt" => lt = true,
            b"ch" => ch = true,
            b"incr" => incr = true,
            _ => break,
        }
        i += 1;
    }
    let rest = &args[i..];
    if rest.is_empty() || !rest.len().is_multiple_of(2) {
        return Err(SYNTAX.to_owned());
    }
    if nx && xx {
        return Err("ERR XX and NX options at the same time are not compatible".to_owned());
    }
    if ((gt || lt) && nx) || (gt && lt) {
        return Err("ERR GT, LT, and/or NX options at the same time are not compatible".to_owned());
    }
    if incr && rest.len() > 2 {
        return Err("ERR INCR option supports a single increment-element pair".to_owned());
    }
    let mut pairs = Vec::with_capacity(rest.len() / 2);
    for p in rest.chunks(2) {
        pairs.push((parse_float(&p[0]).ok_or(NOT_FLOAT)?, &p[1]));
    }
    let existing = txn.coll(&args[1], ZSET)?;
    if existing.is_none() && xx {
        if incr {
            out.null();
        } else {
            out.int(0);
        }
        return Ok(());
    }
    let mut m = match existing {
        Some(m) => m,
        None => txn.new_coll(ZSET)?,
    };
    let (mut added, mut updated) = (0, 0);
    let mut incr_result = None;
    for (score, member) in pairs {
        let old = score_of(txn, &m, member)?;
        match old {
            Some(cur) => {
                if nx {
                    continue;
                }
                let new = if incr { cur + score } else { score };
                if new.is_nan() {
                    return Err("ERR resulting score is not a number (NaN)".to_owned());
                }
                if (gt && new <= cur) || (lt && new >= cur) {
                    continue;
                }
                incr_result = Some(new);
                if new != cur {
                    put(txn, &mut m, member, new, old);
                    updated += 1;
                }
            }
            None => {
                if xx {
                    continue;
                }
                put(txn, &mut m, member, score, None);
                incr_result = Some(score);
                added += 1;
            }
        }
    }
    txn.put_meta(&args[1], m);
    if added + updated > 0 {
        txn.notify(ev::ZSET, if incr { "zincr" } else { "zadd" }, &args[1]);
    }
    if incr {
        match incr_result {
            Some(s) => out.double(&format_score(s)),
            None => out.null(),
        }
    } else {
        out.int(if ch { added + updated } else { added });
    }
    Ok(())
}

/// Pops up to `count` lowest (or highest) members of `key`.
fn pop_members(
    txn: &mut Txn<'_>,
    key: &[u8],
    mut m: Meta,
    count: usize,
    max: bool,
) -> Result<Vec<(Vec<u8>, f64)>, String> {
    let mut got = Vec::new();
    if count == 0 {
        return Ok(got);
    }
    let entry = |k: &[u8]| zset_index_entry(&m, k).map(|(member, score)| (member.to_vec(), score));
    // A pop before this one in the pipelined run may have read these.
    let taken = txn.take_popped_ahead(m.version, max, count);
    for k in &taken {
        got.push(entry(k).map_err(|d| txn.damaged(d))?);
    }
    if got.len() < count {
        // Start past the members popped before (their tombstones, and the
        // deletes this transaction staged), and past those just taken
        // (the entries kept ahead run up to them from the bound).
        let (mut lo, mut hi) = (m.elem(&[ZSET_INDEX]), m.elem(&[ZSET_INDEX + 1]));
        match (taken.last(), max) {
            (Some(last), false) => {
                lo = last.clone();
                lo.push(0);
            }
            (Some(last), true) => hi = last.clone(),
            (None, false) => lo = txn.pop_bound(&m, false).unwrap_or(lo),
            (None, true) => hi = txn.pop_bound(&m, true).unwrap_or(hi),
        }
        // The pops that follow in the pipeline take the entries read past
        // this one's: one engine seek serves a run of pops.
        let ahead = txn.run_left.min(POP_AHEAD_MAX);
        let mut past = VecDeque::new();
        let mut bad = None;
        txn.walk(&lo, &hi, max, |k, _| {
            if got.len() < count {
                match entry(k) {
                    Ok(e) => got.push(e),
                    Err(d) => {
                        bad = Some(d);
                        return false;
                    }
                }
            } else {
                past.push_back(k.to_vec());
            }
            got.len() < count || past.len() < ahead
        })
        .map_err(engine)?;
        if let Some(d) = bad {
            return Err(txn.damaged(d));
        }
        txn.keep_popped_ahead(m.version, max, past);
    }
    if let Some((member, s)) = got.last() {
        let mut bound = m.elem(&zset_index_suffix(*s, member));
        if !max {
            bound.push(0);
        }
        txn.popped_to(m.version, max, bound);
    }
    for (member, s) in &got {
        del(txn, &mut m, member, *s);
    }
    txn.put_meta(key, m);
    if !got.is_empty() {
        txn.notify(ev::ZSET, if max { "zpopmax" } else { "zpopmin" }, key);
    }
    Ok(got)
}

fn zpop(name: &str, args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> CmdResult {
    if args.len() > 3 {
        return Err(SYNTAX.to_owned());
    }
    let count = match args.get(2) {
        Some(c) => {
            let c = int_arg(c)?;
            if c < 0 {
                return Err("ERR value is out of range, must be positive".to_owned());
            }
            Some(c as usize)
        }
        None => None,
    };
    let items = match txn.coll(&args[1], ZSET)? {
        Some(m) => pop_members(txn, &args[1], m, count.unwrap_or(1), name == "zpopmax")?,
        None => Vec::new(),
    };
    if count.is_some() && out.resp3 {
        reply_scored(out, &items, true);
    } else {
        out.array(items.len() * 2);
        for (m, s) in &items {
            out.bulk(m);
            out.double(&format_score(*s));
        }
    }
    Ok(())
}

fn bzpop(name: &str, args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> CmdResult {
    crate::list::timeout_arg(&args[args.len() - 1])?;
    for key in &args[1..args.len() - 1] {
        if let Some(m) = txn.pop_source(key, ZSET)? {
            let items = pop_members(txn, key, m, 1, name == "bzpopmax")?;
            out.array(3);
            out.bulk(key);
            out.bulk(&items[0].0);
            out.double(&format_score(items[0].1));
            return Ok(());
        }
    }
    if !txn.block() {
        out.null_array();
    }
    Ok(())
}

/// `ZMPOP numkeys key... MIN|MAX [COUNT n]` and `BZMPOP timeout numkeys
/// ...`: pops from the first sorted set present, replying its name and
/// the members with their scores.
fn zmpop(name: &str, args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> CmdResult {
    let blocking = name == "bzmpop";
    let at = if blocking { 2 } else { 1 };
    let is_side = |s: &[u8]| s.eq_ignore_ascii_case(b"min") || s.eq_ignore_ascii_case(b"max");
    let p = crate::list::multi_pop_args(args, at, is_side)?;
    let max = p.side.eq_ignore_ascii_case(b"max");
    if blocking {
        crate::list::timeout_arg(&args[1])?;
    }
    for key in p.keys {
        if let Some(m) = txn.pop_source(key, ZSET)? {
            let count = usize::try_from(p.count).unwrap_or(usize::MAX);
            let items = pop_members(txn, key, m, count, max)?;
            out.array(2);
            out.bulk(key);
            out.array(items.len());
            for (member, s) in &items {
                out.array(2);
                out.bulk(member);
                out.double(&format_score(*s));
            }
            return Ok(());
        }
    }
    if !(blocking && txn.block()) {
        out.null_array();
    }
    Ok(())
}

/// `ZRANDMEMBER key [count [WITHSCORES]]`, by `HRANDFIELD`'s rules.
fn zrandmember(args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> CmdResult {
    let count = match args.get(2) {
        Some(c) => {
            let c = int_arg(c)?;
            if c == i64::MIN {
                return Err("ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807".to_owned());
            }
            Some(c)
        }
        None => None,
    };
    if args.len() > 4 || (args.len() == 4 && !args[3].eq_ignore_ascii_case(b"withscores")) {
        return Err(SYNTAX.to_owned());
    }
    let with_scores = args.len() == 4;
    if let Some(c) = count {
        if (with_scores && c.unsigned_abs() > (i64::MAX / 2) as u64)
            || c < -crate::coll::MAX_REPEATED_PICKS
        {
            return Err("ERR value is out of range".to_owned());
        }
    }
    let mut items = Vec::new();
    if let Some(m) = txn.coll(&args[1], ZSET)? {
        walk(txn, &m, false, |member, s| {
            items.push((member.to_vec(), s));
            true
        })?;
    }
    let Some(count) = count else {
        let pick = crate::coll::random_picks(items.len(), 1).into_iter().next();
        out.opt_bulk(pick.map(|i| &items[i].0[..]));
        return Ok(());
    };
    let picks = crate::coll::random_picks(items.len(), count);
    let flat = with_scores && !out.resp3;
    out.array(picks.len() * if flat { 2 } else { 1 });
    for i in picks {
        let (member, s) = &items[i];
        if with_scores && out.resp3 {
            out.array(2);
        }
        out.bulk(member);
        if with_scores {
            out.double(&format_score(*s));
        }
    }
    Ok(())
}

/// Replaces `key` with a sorted set of `items` (none: deletes it, and
/// [`Txn::put_meta`] records the `del` event of a key that was there).
fn store(txn: &mut Txn<'_>, key: &[u8], items: impl Iterator<Item = (Vec<u8>, f64)>) -> CmdResult {
    txn.peek(key).map_err(engine)?;
    let mut m = txn.new_coll(ZSET)?;
    for (member, s) in items {
        put(txn, &mut m, &member, s, None);
    }
    txn.put_meta(key, m);
    Ok(())
}

/// The members and scores of a sorted set or (scores 1) a set.
fn inputs(txn: &mut Txn<'_>, key: &[u8]) -> Result<Vec<(Vec<u8>, f64)>, String> {
    match txn.rec(key).map_err(engine)? {
        None => Ok(Vec::new()),
        Some(Rec::Coll(m)) if m.kind == ZSET => {
            let mut v = Vec::with_capacity(m.count as usize);
            walk(txn, &m, false, |member, s| {
                v.push((member.to_vec(), s));
                true
            })?;
            Ok(v)
        }
        Some(Rec::Coll(m)) if m.kind == CollKind::Set => Ok(txn
            .names(&m)
            .map_err(engine)?
            .into_iter()
            .map(|(k, _)| (k, 1.0))
            .collect()),
        Some(_) => Err(crate::store::WRONGTYPE.to_owned()),
    }
}

/// `ZUNIONSTORE/ZINTERSTORE/ZDIFFSTORE dst numkeys key ... [WEIGHTS w ...]
/// [AGGREGATE SUM|MIN|MAX]` and `ZUNION/ZINTER/ZDIFF numkeys key ...
/// [... ] [WITHSCORES]`. `dst` is the destination for the store forms
/// (`args[1..]`), empty otherwise.
fn combine(
    name: &str,
    dst: &[Bytes],
    args: &[Bytes],
    txn: &mut Txn<'_>,
    out: &mut Out,
) -> CmdResult {
    let storing = !dst.is_empty();
    let at = if storing { 2 } else { 1 };
    let op = name.trim_end_matches("store");
    let n = int_arg(&args[at])?;
    if n < 1 {
        return Err(format!(
            "ERR at least 1 input key is needed for '{name}' command"
        ));
    }
    let n = n as usize;
    if at + 1 + n > args.len() {
        return Err(SYNTAX.to_owned());
    }
    let keys = &args[at + 1..at + 1 + n];
    let mut weights = vec![1.0; n];
    let mut agg = "sum";
    let mut with_scores = false;
    let mut i = at + 1 + n;
    while i < args.len() {
        let opt = args[i].to_ascii_lowercase();
        match &opt[..] {
            b"weights" if op != "zdiff" && i + n < args.len() => {
                for (j, w) in weights.iter_mut().enumerate() {
                    *w = parse_float(&args[i + 1 + j]).ok_or("ERR weight value is not a float")?;
                }
                i += n;
            }
            b"aggregate" if op != "zdiff" && i + 1 < args.len() => {
                agg = match &args[i + 1].to_ascii_lowercase()[..] {
                    b"sum" => "sum",
                    b"min" => "min",
                    b"max" => "max",
                    _ => return Err(SYNTAX.to_owned()),
                };
                i += 1;
            }
            b"withscores" if !storing => with_scores = true,
            _ => return Err(SYNTAX.to_owned()),
        }
        i += 1;
    }
    let mut acc: BTreeMap<Vec<u8>, f64> = BTreeMap::new();
    for (j, k) in keys.iter().enumerate() {
        let items = inputs(txn, k)?;
        let w = weights[j];
        let weighted = |s: f64| {
            let v = s * w;
            if v.is_nan() {
                0.0
            } else {
                v
            }
        };
        if j == 0 {
            acc = items.into_iter().map(|(m, s)| (m, weighted(s))).collect();
            continue;
        }
        match op {
            "zunion" => {
                for (m, s) in items {
                    let s = weighted(s);
                    acc.entry(m)
                        .and_modify(|cur| *cur = aggregate(agg, *cur, s))
                        .or_insert(s);
                }
            }
            "zinter" => {
                let other: BTreeMap<Vec<u8>, f64> = items.into_iter().collect();
                acc.retain(|m, _| other.contains_key(m));
                for (m, cur) in acc.iter_mut() {
                    *cur = aggregate(agg, *cur, weighted(other[m]));
                }
            }
            _ => {
                for (m, _) in items {
                    acc.remove(&m);
                }
            }
        }
    }
    let mut items: Vec<(Vec<u8>, f64)> = acc.into_iter().collect();
    items.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
    if storing {
        let n = items.len();
        store(txn, &dst[0], items.into_iter())?;
        if n > 0 {
            let event = ev::event_of(name, &["zunionstore", "zinterstore", "zdiffstore"]);
            txn.notify(ev::ZSET, event, &dst[0]);
        }
        out.int(n as i64);
    } else {
        reply_scored(out, &items, with_scores);
    }
    Ok(())
}

fn aggregate(agg: &str, a: f64, b: f64) -> f64 {
    match agg {
        "min" => a.min(b),
        "max" => a.max(b),
        _ => {
            let s = a + b;
            if s.is_nan() {
                0.0
            } else {
                s
            }
        }
    }
}

/// `ZINTERCARD numkeys key [key ...] [LIMIT limit]` (sets count too).
fn zintercard(args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> CmdResult {
    let n = int_arg(&args[1])?;
    if n <= 0 {
        return Err("ERR at least 1 input key is needed for 'zintercard' command".to_owned());
    }
    let n = n as usize;
    if n > args.len() - 2 {
        return Err("ERR Number of keys can't be greater than number of args".to_owned());
    }
    let limit = card_limit(args, 2 + n)?;
    let mut acc: Option<std::collections::BTreeSet<Vec<u8>>> = None;
    for k in &args[2..2 + n] {
        let members: std::collections::BTreeSet<Vec<u8>> =
            inputs(txn, k)?.into_iter().map(|(m, _)| m).collect();
        acc = Some(match acc {
            None => members,
            Some(a) => a.intersection(&members).cloned().collect(),
        });
    }
    let c = acc.map_or(0, |a| a.len());
    out.int(if limit > 0 { c.min(limit) } else { c } as i64);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::now_ms;
    use crate::testutil::{command, keyspace};

    /// A read at a snapshot walks from the pops' bound only while no pop
    /// narrowed a bound since it took the snapshot: one that did may have
    /// moved past members the snapshot still holds.
    #[test]
    fn a_snapshot_read_sees_the_members_popped_after_it() {
        let ks = keyspace();
        command(&ks, &[b"zadd", b"z", b"1", b"a", b"2", b"b", b"3", b"c"]).unwrap();
        command(&ks, &[b"zpopmin", b"z"]).unwrap();
        let members = |txn: &mut Txn<'_>| {
            let m = txn.coll(b"z", ZSET).unwrap().unwrap();
            members_by_score(txn, &m).unwrap()
        };
        let mut before = Txn::at_snapshot(&ks, now_ms());
        let m = before.coll(b"z", ZSET).unwrap().unwrap();
        let (lo, _) = before.index_bounds(&m);
        assert!(lo.is_some(), "the first pop's bound is used");
        command(&ks, &[b"zpopmin", b"z"]).unwrap();
        assert_eq!(members(&mut before), [b"b".to_vec(), b"c".to_vec()]);
        let mut after = Txn::at_snapshot(&ks, now_ms());
        assert_eq!(members(&mut after), [b"c".to_vec()]);
    }
}
