//! Sets: a metadata record and one engine key per member
//! (`'e' | version | member -> empty`, no name hash: see
//! [`crate::store::hashes_names`]). Membership is one engine read;
//! the algebra (`SINTER`, `SUNION`, `SDIFF` and their `STORE` forms)
//! reads the members of each input.

use std::collections::BTreeSet;

use bytes::Bytes;
use rand::Rng;

use crate::coll::{card_limit, random_picks, scan_elements};
use crate::data::{engine, int_arg, CmdResult, SYNTAX};
use crate::notify as ev;
use crate::resp::Out;
use crate::store::{CollKind, Meta, Txn};

const SET: CollKind = CollKind::Set;

/// Runs a set command; `None` if `name` is not one.
pub fn run(name: &str, args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> Option<CmdResult> {
    let r = match name {
        "sadd" => sadd(args, txn, out),
        "srem" => srem(args, txn, out),
        "sismember" => (|| {
            let found = match txn.coll(&args[1], SET)? {
                Some(m) => txn.elem(&m.named(&args[2])).map_err(engine)?.is_some(),
                None => false,
            };
            out.int(i64::from(found));
            Ok(())
        })(),
        "smismember" => (|| {
            let m = txn.coll(&args[1], SET)?;
            out.array(args.len() - 2);
            for a in &args[2..] {
                let found = match &m {
                    Some(m) => txn.elem(&m.named(a)).map_err(engine)?.is_some(),
                    None => false,
                };
                out.int(i64::from(found));
            }
            Ok(())
        })(),
        "scard" => txn.coll(&args[1], SET).map(|m| {
            out.int(m.map_or(0, |m| m.count as i64));
        }),
        "smembers" => (|| {
            let members = members_of(txn, &args[1])?;
            reply_set(out, members.iter());
            Ok(())
        })(),
        "sscan" => (|| {
            let m = txn.coll(&args[1], SET)?;
            scan_elements(txn, m.as_ref(), &[], args, out, false)
        })(),
        "spop" => spop(args, txn, out),
        "srandmember" => srandmember(args, txn, out),
        "smove" => smove(args, txn, out),
        "sinter" | "sunion" | "sdiff" => (|| {
            let r = algebra(name, &args[1..], txn)?;
            reply_set(out, r.iter());
            Ok(())
        })(),
        "sinterstore" | "sunionstore" | "sdiffstore" => (|| {
            let r = algebra(&name[..name.len() - 5], &args[2..], txn)?;
            let n = r.len();
            // Emptied, the destination's `del` event comes from `put_meta`.
            store_set(txn, &args[1], r)?;
            if n > 0 {
                let event = ev::event_of(name, &["sinterstore", "sunionstore", "sdiffstore"]);
                txn.notify(ev::SET, event, &args[1]);
            }
            out.int(n as i64);
            Ok(())
        })(),
        "sintercard" => sintercard(args, txn, out),
        _ => return None,
    };
    Some(r)
}

fn reply_set<'a>(out: &mut Out, members: impl ExactSizeIterator<Item = &'a Vec<u8>>) {
    out.set(members.len());
    for m in members {
        out.bulk(m);
    }
}

/// The members of `key` in order (none if it does not exist).
fn members_of(txn: &mut Txn<'_>, key: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    Ok(match txn.coll(key, SET)? {
        Some(m) => txn
            .names(&m)
            .map_err(engine)?
            .into_iter()
            .map(|(k, _)| k)
            .collect(),
        None => Vec::new(),
    })
}

fn sadd(args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> CmdResult {
    let mut m = match txn.coll(&args[1], SET)? {
        Some(m) => m,
        None => txn.new_coll(SET)?,
    };
    let mut added = 0;
    for a in &args[2..] {
        let ek = m.named(a);
        if txn.elem(&ek).map_err(engine)?.is_none() {
            txn.index_inserted(&mut m, &ek);
            txn.elem_put(ek, Vec::new());
            added += 1;
        }
    }
    if added > 0 {
        m.count += added;
        txn.put_meta(&args[1], m);
        txn.notify(ev::SET, "sadd", &args[1]);
    }
    out.int(added as i64);
    Ok(())
}

fn remove(txn: &mut Txn<'_>, key: &[u8], mut m: Meta, members: &[&[u8]]) -> Result<u64, String> {
    let mut n = 0;
    for a in members {
        let ek = m.named(a);
        if txn.elem(&ek).map_err(engine)?.is_some() {
            txn.elem_del(ek);
            n += 1;
        }
    }
    if n > 0 {
        m.count -= n;
        txn.put_meta(key, m);
    }
    Ok(n)
}

fn srem(args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> CmdResult {
    let Some(m) = txn.coll(&args[1], SET)? else {
        out.int(0);
        return Ok(());
    };
    let members: Vec<&[u8]> = args[2..].iter().map(|a| &a[..]).collect();
    let n = remove(txn, &args[1], m, &members)?;
    if n > 0 {
        txn.notify(ev::SET, "srem", &args[1]);
    }
    out.int(n as i64);
    Ok(())
}

fn count_arg(args: &[Bytes]) -> Result<Option<i64>, String> {
    match args.len() {
        2 => Ok(None),
        3 => crate::coll::pick_count(&args[2]).map(Some),
        _ => Err(SYNTAX.to_owned()),
    }
}

/// Up to this many members, a pick of one random member reads them all
/// and is exactly uniform; past it, or once the set has been popped while
/// larger, it seeks (`seek_random_member`).
const EXACT_PICK_MEMBERS: u64 = 1024;

/// Bytes past the common prefix a random seek target draws.
const TARGET_BYTES: usize = 8;

/// One member of a large set, picked by seeking to a random point between
/// its first and last member (from where its live members are known to
/// begin, once it was popped): past their common prefix, each byte drawn
/// uniformly between the first's and the last's byte at that position
/// (so `element:000123` members draw digits, not any byte, and the picks
/// spread over the members instead of piling up at the start of each
/// run); past the last live member, the pick is the first. Forward reads
/// only: the memtable steps back by searching from its head, so walking
/// back over the tombstones of popped members cost milliseconds a pick
/// once a set was mostly popped. The known bounds of its live members
/// ([`crate::store::PopBounds`], kept up by `SADD` and narrowed by `SPOP`
/// under the key's lock, as for sorted sets) give the start of the first
/// read and the last member; without them one backward read finds it.
/// A seek that lands in a stretch a committed pop walked (a hole of
/// [`crate::store::PopBounds`]: from that pop's target to its pick, all
/// popped) starts at the stretch's end, where the walk would have come
/// out: the pick is the same, without walking those tombstones again (a
/// mostly popped set had each seek walk a run of them: 13 µs of server
/// CPU per pipelined `SPOP`, most of it stepping over tombstones in the
/// memtable). Members in sparse stretches of the key space come more often than in
/// dense ones (redis-server's pick is uniform over members).
fn seek_random_member(txn: &mut Txn<'_>, m: &Meta, pop: bool) -> Result<Option<Vec<u8>>, String> {
    let bounds = txn.keyspace().pop_bounds(m.version);
    let prefix_len = m.prefix_len();
    // The record's end holds too (after a restart, the only one known).
    let known_hi = crate::store::tighter(bounds.hi, m.pop_bound_key(true), true);
    // Where the live members begin: the known bound, past the holes at
    // it (no live member is below it); without one, a seek finds the
    // first member.
    let known_lo = txn.pop_bound(m, false).filter(|lo| lo.len() > prefix_len);
    let (lo, mut first) = match known_lo {
        Some(lo) => (txn.past_holes(m.version, lo), None),
        None => {
            let Some(first) = first_from(txn, m, &m.prefix(), &m.end())? else {
                return Ok(None);
            };
            if pop {
                // Every member before the first is gone.
                txn.popped_to(m.version, false, m.elem(&first));
            }
            (m.elem(&first), Some(first))
        }
    };
    // Every live member is below `hi`, an engine key.
    let hi = match known_hi {
        Some(hi) if hi.len() > prefix_len => hi,
        _ => {
            let mut last = None;
            txn.walk(&m.prefix(), &m.end(), true, |k, _| {
                last = Some(k.to_vec());
                false
            })
            .map_err(engine)?;
            let Some(mut past) = last else {
                return Ok(None);
            };
            past.push(0);
            if pop {
                txn.popped_to(m.version, true, past.clone());
            }
            past
        }
    };
    let target = m.elem(&random_target(&lo[prefix_len..], &hi[prefix_len..]));
    let found = first_from(txn, m, &txn.past_holes(m.version, target.clone()), &hi)?;
    if let Some(f) = found {
        if pop {
            // Nothing is live from the target to the pick, nor the pick
            // once popped: the next seeks into that stretch start past it.
            let mut past = m.elem(&f);
            past.push(0);
            txn.learn_hole(m.version, target, past);
        }
        return member_in(txn, m, &f).map(Some);
    }
    if pop && target < hi {
        // None from the target on: the next picks draw below it, and no
        // later seek walks the tombstones past it again.
        txn.popped_to(m.version, true, target);
    }
    // Past the last live member the pick is the first.
    if first.is_none() {
        first = first_from(txn, m, &lo, &m.end())?;
    }
    let Some(first) = first else {
        return Ok(None);
    };
    if pop {
        let mut past = m.elem(&first);
        past.push(0);
        txn.learn_hole(m.version, lo, past);
        txn.popped_to(m.version, false, m.elem(&first));
    }
    member_in(txn, m, &first).map(Some)
}

/// The member named by `suffix`, one of `m`'s.
fn member_in(txn: &Txn<'_>, m: &Meta, suffix: &[u8]) -> Result<Vec<u8>, String> {
    match m.name_in(suffix) {
        Some(name) => Ok(name.to_vec()),
        None => Err(txn.damaged(crate::store::malformed_element(&m.elem(suffix)))),
    }
}

/// The suffix (the member) of the first member at or after engine
/// key `from`, before `end`.
fn first_from(txn: &Txn<'_>, m: &Meta, from: &[u8], end: &[u8]) -> Result<Option<Vec<u8>>, String> {
    let mut found = None;
    txn.walk(from, end, false, |k, _| {
        found = Some(m.suffix_of(k).to_vec());
        false
    })
    .map_err(engine)?;
    Ok(found)
}

/// A random member name between `first` and `last`: their common
/// prefix, then each byte drawn between theirs at that position.
fn random_target(first: &[u8], last: &[u8]) -> Vec<u8> {
    let common = first.iter().zip(last).take_while(|(a, b)| a == b).count();
    let mut rng = rand::thread_rng();
    let mut target = last[..common].to_vec();
    for i in common..common + TARGET_BYTES {
        let (lo, hi) = match (first.get(i), last.get(i)) {
            (Some(&a), Some(&b)) => (a.min(b), a.max(b)),
            (Some(&x), None) | (None, Some(&x)) => (0, x),
            (None, None) => break,
        };
        target.push(rng.gen_range(lo..=hi));
    }
    target
}

/// One random member (none if the set is empty).
fn random_member(
    txn: &mut Txn<'_>,
    key: &[u8],
    m: &Meta,
    pop: bool,
) -> Result<Option<Vec<u8>>, String> {
    // A set popped while large keeps seeking: the tombstones of its
    // popped members would make every whole read cost them all.
    let bounds = txn.keyspace().pop_bounds(m.version);
    let popped = bounds.lo.is_some() || bounds.hi.is_some();
    if m.count > EXACT_PICK_MEMBERS || popped || m.pop_lo.is_some() || m.pop_hi.is_some() {
        if pop {
            txn.count_pop(m.version);
        }
        return seek_random_member(txn, m, pop);
    }
    let mut members = members_of(txn, key)?;
    Ok(random_picks(members.len(), 1)
        .first()
        .map(|&i| std::mem::take(&mut members[i])))
}

fn spop(args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> CmdResult {
    let count = count_arg(args)?;
    if count.is_some_and(|c| c < 0) {
        return Err("ERR value is out of range, must be positive".to_owned());
    }
    let Some(m) = txn.coll(&args[1], SET)? else {
        match count {
            Some(_) => out.set(0),
            None => out.null(),
        }
        return Ok(());
    };
    // A replicated shard's nodes must pop the same member: the seek reads
    // bounds each node keeps in its own memory, so they take the seeded
    // whole read below.
    if count.is_none() && txn.seed.is_none() {
        let pick = random_member(txn, &args[1], &m, true)?;
        if let Some(p) = &pick {
            // Read from this transaction's view just now: present.
            let mut m = m;
            txn.elem_del(m.named(p));
            m.count -= 1;
            txn.put_meta(&args[1], m);
            txn.notify(ev::SET, "spop", &args[1]);
        }
        out.opt_bulk(pick.as_deref());
        return Ok(());
    }
    let members = members_of(txn, &args[1])?;
    // A replicated shard's nodes pick the same members.
    let picks = match txn.seed {
        Some(seed) => {
            use rand::SeedableRng;
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            crate::coll::random_picks_with(&mut rng, members.len(), count.unwrap_or(1))
        }
        None => random_picks(members.len(), count.unwrap_or(1)),
    };
    let chosen: Vec<&[u8]> = picks.iter().map(|&i| &members[i][..]).collect();
    if remove(txn, &args[1], m, &chosen)? > 0 {
        txn.notify(ev::SET, "spop", &args[1]);
    }
    match count {
        None => out.opt_bulk(chosen.first().copied()),
        Some(_) => {
            out.set(chosen.len());
            for c in chosen {
                out.bulk(c);
            }
        }
    }
    Ok(())
}

fn srandmember(args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> CmdResult {
    let count = count_arg(args)?;
    if count.is_none() {
        let pick = match txn.coll(&args[1], SET)? {
            Some(m) => random_member(txn, &args[1], &m, false)?,
            None => None,
        };
        out.opt_bulk(pick.as_deref());
        return Ok(());
    }
    let members = members_of(txn, &args[1])?;
    match count {
        None => {
            let pick = random_picks(members.len(), 1).into_iter().next();
            out.opt_bulk(pick.map(|i| &members[i][..]));
        }
        Some(c) => {
            let picks = random_picks(members.len(), c);
            out.array(picks.len());
            for i in picks {
                out.bulk(&members[i]);
            }
        }
    }
    Ok(())
}

fn smove(args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> CmdResult {
    let src = txn.coll(&args[1], SET)?;
    let dst = txn.coll(&args[2], SET)?;
    let Some(src) = src else {
        out.int(0);
        return Ok(());
    };
    if txn.elem(&src.named(&args[3])).map_err(engine)?.is_none() {
        out.int(0);
        return Ok(());
    }
    if args[1] == args[2] {
        out.int(1);
        return Ok(());
    }
    remove(txn, &args[1], src, &[&args[3]])?;
    txn.notify(ev::SET, "srem", &args[1]);
    let mut dst = match dst {
        Some(d) => d,
        None => txn.new_coll(SET)?,
    };
    let ek = dst.named(&args[3]);
    if txn.elem(&ek).map_err(engine)?.is_none() {
        txn.index_inserted(&mut dst, &ek);
        txn.elem_put(ek, Vec::new());
        dst.count += 1;
        txn.put_meta(&args[2], dst);
        txn.notify(ev::SET, "sadd", &args[2]);
    }
    out.int(1);
    Ok(())
}

/// `SINTER`, `SUNION` or `SDIFF` of `keys` (missing keys are empty sets).
fn algebra(op: &str, keys: &[Bytes], txn: &mut Txn<'_>) -> Result<BTreeSet<Vec<u8>>, String> {
    let mut sets = Vec::with_capacity(keys.len());
    for k in keys {
        sets.push(members_of(txn, k)?);
    }
    let mut it = sets.into_iter();
    let mut acc: BTreeSet<Vec<u8>> = it.next().unwrap_or_default().into_iter().collect();
    for s in it {
        let s: BTreeSet<Vec<u8>> = s.into_iter().collect();
        match op {
            "sinter" => acc.retain(|m| s.contains(m)),
            "sunion" => acc.extend(s),
            _ => acc.retain(|m| !s.contains(m)),
        }
    }
    Ok(acc)
}

/// Replaces `key` with a set of `members` (none: deletes it).
fn store_set(txn: &mut Txn<'_>, key: &[u8], members: BTreeSet<Vec<u8>>) -> CmdResult {
    // The old value, of any type, is replaced (and becomes garbage).
    txn.peek(key).map_err(engine)?;
    let mut m = txn.new_coll(SET)?;
    for a in members {
        txn.elem_put(m.named(&a), Vec::new());
        m.count += 1;
    }
    txn.put_meta(key, m);
    Ok(())
}

/// `SINTERCARD numkeys key [key ...] [LIMIT limit]`.
fn sintercard(args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> CmdResult {
    let n = int_arg(&args[1]).map_err(|_| "ERR numkeys should be greater than 0".to_owned())?;
    if n <= 0 {
        return Err("ERR numkeys should be greater than 0".to_owned());
    }
    let n = n as usize;
    if n > args.len() - 2 {
        return Err("ERR Number of keys can't be greater than number of args".to_owned());
    }
    let limit = card_limit(args, 2 + n)?;
    let r = algebra("sinter", &args[2..2 + n], txn)?;
    let c = if limit > 0 {
        r.len().min(limit)
    } else {
        r.len()
    };
    out.int(c as i64);
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use sluicedb::fs::MemFs;
    use sluicedb::{Db, Options};

    use super::*;
    use crate::store::{Fsync, Keyspace};

    fn keyspace(fs: &MemFs) -> Keyspace {
        let o = Options::default().fs(Arc::new(fs.clone()));
        Keyspace::new(Db::open("/db", o).unwrap(), Fsync::No).unwrap()
    }

    /// Runs one set command on `args[1]` with the replication seed `seed`
    /// and commits it; returns its reply.
    fn command(ks: &Keyspace, seed: Option<u64>, args: &[&[u8]]) -> Vec<u8> {
        let mut held = ks.lock_keys(&[args[1]]);
        let mut txn = Txn::new(ks);
        txn.seed = seed;
        let mut out = Out::default();
        let args: Vec<Bytes> = args.iter().map(|a| Bytes::copy_from_slice(a)).collect();
        let name = String::from_utf8_lossy(&args[0]).to_lowercase();
        run(&name, &args, &mut txn, &mut out).unwrap().unwrap();
        txn.commit(&mut held).unwrap();
        out.buf.to_vec()
    }

    /// Two nodes of a replicated shard hold the same set but not the same
    /// memory of it (one has popped from it, learning where its live
    /// members lie; the other has just opened): a seeded `SPOP` pops the
    /// same member on both. The seek of an unreplicated pop reads those
    /// in-memory bounds, so it could not promise this.
    #[test]
    fn a_seeded_spop_pops_the_same_member_whatever_a_node_remembers() {
        let fs = MemFs::new();
        let a = keyspace(&fs);
        for chunk in 0..3 {
            let mut args: Vec<Vec<u8>> = vec![b"sadd".to_vec(), b"s".to_vec()];
            args.extend((0..1000).map(|i| format!("m{:05}", chunk * 1000 + i).into_bytes()));
            let args: Vec<&[u8]> = args.iter().map(|a| &a[..]).collect();
            command(&a, None, &args);
        }
        for _ in 0..500 {
            command(&a, None, &[b"spop", b"s"]);
        }
        a.db().flush().unwrap();
        let b = keyspace(&fs.kill_image());
        for seed in 0..20u64 {
            let on_a = command(&a, Some(seed), &[b"spop", b"s"]);
            let on_b = command(&b, Some(seed), &[b"spop", b"s"]);
            assert_eq!(on_a, on_b, "seed {seed}");
            assert!(
                on_a.starts_with(b"$6\r\nm"),
                "{:?}",
                String::from_utf8_lossy(&on_a)
            );
        }
    }
}
