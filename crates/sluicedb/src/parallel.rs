//! Scoped fan-out for short work a waiting thread needs done now: a
//! relocation commit the writer queue waits for, a flush's fsyncs. The
//! calling thread does a part itself rather than wait for a pool's threads
//! (what `rayon::join` does when called from outside a pool), and blocking
//! calls (fsync) stay off the GC pool.

/// The CPUs this process may run on (at least 1), asked once: the pieces
/// of a fan-out, and whether a waiting thread may spin.
pub(crate) fn cpus() -> usize {
    static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Runs `f` on up to `parts` contiguous pieces of `items`, of about equal
/// length: the first on this thread, each other on a scoped thread of its
/// own. `f` gets a piece and its offset in `items`; the results come in
/// the pieces' order. Fewer items than `parts` make fewer pieces; no items
/// make one empty piece. A panic in a piece is resumed here.
pub(crate) fn in_parts<T: Sync, R: Send>(
    items: &[T],
    parts: usize,
    f: impl Fn(&[T], usize) -> R + Sync,
) -> Vec<R> {
    let n = parts.clamp(1, items.len().max(1));
    if n == 1 {
        return vec![f(items, 0)];
    }
    let len = items.len().div_ceil(n);
    let (first, rest) = items.split_at(len);
    std::thread::scope(|s| {
        let f = &f;
        let others: Vec<_> = (rest.chunks(len).enumerate())
            .map(|(i, piece)| s.spawn(move || f(piece, len * (i + 1))))
            .collect();
        let mut out = Vec::with_capacity(n);
        out.push(f(first, 0));
        for t in others {
            out.push(t.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
        }
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_cover_every_item_once_in_order_with_their_offsets() {
        for len in [0usize, 1, 2, 3, 7, 8, 100] {
            let items: Vec<usize> = (0..len).collect();
            for parts in [1, 2, 3, 8, 200] {
                let pieces = in_parts(&items, parts, |piece, at| (at, piece.to_vec()));
                assert!(pieces.len() <= parts.max(1), "{len} items, {parts} parts");
                let mut seen = Vec::new();
                for (at, piece) in pieces {
                    assert_eq!(at, seen.len(), "{len} items, {parts} parts");
                    seen.extend(piece);
                }
                assert_eq!(seen, items, "{len} items, {parts} parts");
            }
        }
    }

    #[test]
    fn a_panic_in_another_piece_reaches_the_caller() {
        let r = std::panic::catch_unwind(|| {
            in_parts(&[1, 2, 3, 4], 2, |piece, at| {
                assert!(at == 0, "boom");
                piece.len()
            })
        });
        assert!(r.is_err());
    }
}
