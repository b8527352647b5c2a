//! `LCS key1 key2 [LEN] [IDX] [MINMATCHLEN n] [WITHMATCHLEN]`: the longest
//! common subsequence of two strings, by redis-server's dynamic program
//! (a table of (len1 + 1) x (len2 + 1) lengths, walked back from the end),
//! so that the subsequence and the matched ranges it picks among equally
//! long ones are redis-server's.

use bytes::Bytes;

use crate::data::{int_arg, CmdResult, Ctx, SYNTAX};
use crate::resp::Out;
use crate::store::Rec;

/// Runs `LCS`; `None` if `name` is not it.
pub fn run(
    name: &str,
    args: &[Bytes],
    txn: &mut crate::store::Txn<'_>,
    ctx: &Ctx,
    out: &mut Out,
) -> Option<CmdResult> {
    (name == "lcs").then(|| lcs(args, txn, ctx, out))
}

struct Options {
    len: bool,
    idx: bool,
    min_match_len: u64,
    with_match_len: bool,
}

fn options(args: &[Bytes]) -> Result<Options, String> {
    let mut o = Options {
        len: false,
        idx: false,
        min_match_len: 0,
        with_match_len: false,
    };
    let mut j = 3;
    while j < args.len() {
        match &args[j].to_ascii_lowercase()[..] {
            b"idx" => o.idx = true,
            b"len" => o.len = true,
            b"withmatchlen" => o.with_match_len = true,
            b"minmatchlen" if j + 1 < args.len() => {
                o.min_match_len = int_arg(&args[j + 1])?.max(0) as u64;
                j += 1;
            }
            _ => return Err(SYNTAX.to_owned()),
        }
        j += 1;
    }
    if o.len && o.idx {
        return Err("ERR If you want both the length and indexes, please just use IDX.".to_owned());
    }
    Ok(o)
}

/// A key's string for `LCS` (absent: empty).
fn string_of(txn: &mut crate::store::Txn<'_>, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
    match txn.rec(key).map_err(crate::data::engine)? {
        None => Ok(Some(Vec::new())),
        Some(Rec::Str(e)) => Ok(Some(e.value.to_vec())),
        Some(Rec::Coll(_)) => Ok(None),
    }
}

fn lcs(args: &[Bytes], txn: &mut crate::store::Txn<'_>, ctx: &Ctx, out: &mut Out) -> CmdResult {
    let (a, b) = match (string_of(txn, &args[1])?, string_of(txn, &args[2])?) {
        (Some(a), Some(b)) => (a, b),
        _ => return Err("ERR The specified keys must contain string values".to_owned()),
    };
    let o = options(args)?;
    if a.len() >= u32::MAX as usize - 1 || b.len() >= u32::MAX as usize - 1 {
        return Err("ERR String too long for LCS".to_owned());
    }
    let (alen, blen) = (a.len(), b.len());
    let cells = (alen as u64 + 1) * (blen as u64 + 1);
    if cells * 4 > ctx.max_bulk_bytes as u64 {
        return Err(
            "ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len"
                .to_owned(),
        );
    }
    // table[i * (blen + 1) + j]: the LCS length of a[..i] and b[..j].
    let w = blen + 1;
    let mut table = vec![0u32; cells as usize];
    for i in 1..=alen {
        for j in 1..=blen {
            table[i * w + j] = if a[i - 1] == b[j - 1] {
                table[(i - 1) * w + j - 1] + 1
            } else {
                table[(i - 1) * w + j].max(table[i * w + j - 1])
            };
        }
    }
    let total = table[alen * w + blen];
    if o.len {
        out.int(i64::from(total));
        return Ok(());
    }
    // Walk back from the end, collecting the subsequence and the ranges
    // of contiguous matches (a range is (a start, a end, b start, b end)).
    let mut result = vec![0u8; total as usize];
    let mut ranges: Vec<(usize, usize, usize, usize)> = Vec::new();
    let mut current: Option<(usize, usize, usize, usize)> = None;
    let (mut i, mut j, mut k) = (alen, blen, total as usize);
    while i > 0 && j > 0 {
        let mut emit = false;
        if a[i - 1] == b[j - 1] {
            result[k - 1] = a[i - 1];
            match current.as_mut() {
                None => current = Some((i - 1, i - 1, j - 1, j - 1)),
                Some(r) if r.0 == i && r.2 == j => {
                    r.0 -= 1;
                    r.2 -= 1;
                }
                Some(_) => emit = true,
            }
            if current.is_some_and(|r| r.0 == 0 || r.2 == 0) {
                emit = true;
            }
            k -= 1;
            i -= 1;
            j -= 1;
        } else {
            if table[(i - 1) * w + j] > table[i * w + j - 1] {
                i -= 1;
            } else {
                j -= 1;
            }
            emit = current.is_some();
        }
        if emit {
            if let Some(r) = current.take() {
                let len = (r.1 - r.0 + 1) as u64;
                if o.min_match_len == 0 || len >= o.min_match_len {
                    ranges.push(r);
                }
            }
        }
    }
    if !o.idx {
        out.bulk(&result);
        return Ok(());
    }
    out.map(2);
    out.bulk(b"matches");
    out.array(ranges.len());
    for r in ranges {
        out.array(if o.with_match_len { 3 } else { 2 });
        out.array(2);
        out.int(r.0 as i64);
        out.int(r.1 as i64);
        out.array(2);
        out.int(r.2 as i64);
        out.int(r.3 as i64);
        if o.with_match_len {
            out.int((r.1 - r.0 + 1) as i64);
        }
    }
    out.bulk(b"len");
    out.int(i64::from(total));
    Ok(())
}
