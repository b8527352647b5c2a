//! Redis's glob patterns (`KEYS`, `SCAN MATCH`, `CONFIG GET`), with
//! redis-server's `stringmatchlen` rules: `*`, `?`, `[abc]`, `[^a]`,
//! `[a-z]` (either order), and `\` quoting the next byte.

/// True if `s` matches `pattern`; `nocase` folds ASCII case.
pub fn matches(pattern: &[u8], s: &[u8], nocase: bool) -> bool {
    // Iterative with one backtrack point for `*`: linear in practice and
    // never recursive, so a hostile pattern cannot overflow the stack.
    let (mut p, mut i) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    let eq = |a: u8, b: u8| {
        if nocase {
            a.eq_ignore_ascii_case(&b)
        } else {
            a == b
        }
    };
    loop {
        if p < pattern.len() {
            match pattern[p] {
                b'*' => {
                    while p < pattern.len() && pattern[p] == b'*' {
                        p += 1;
                    }
                    if p == pattern.len() {
                        return true;
                    }
                    star = Some((p, i));
                    continue;
                }
                b'?' if i < s.len() => {
                    p += 1;
                    i += 1;
                    continue;
                }
                b'[' if i < s.len() => {
                    if let Some((ok, next)) = class(pattern, p, s[i], nocase) {
                        if ok {
                            p = next;
                            i += 1;
                            continue;
                        }
                    }
                }
                b'\\' if p + 1 < pattern.len() && i < s.len() && eq(pattern[p + 1], s[i]) => {
                    p += 2;
                    i += 1;
                    continue;
                }
                b'\\' if p + 1 < pattern.len() => {}
                c if i < s.len() && c != b'?' && c != b'[' && eq(c, s[i]) => {
                    p += 1;
                    i += 1;
                    continue;
                }
                _ => {}
            }
        } else if i == s.len() {
            return true;
        }
        // Mismatch: let the last `*` take one more byte.
        match star {
            Some((sp, si)) if si < s.len() => {
                star = Some((sp, si + 1));
                p = sp;
                i = si + 1;
            }
            _ => return false,
        }
    }
}

/// Matches `c` against the class starting at `pattern[p] == '['`; returns
/// whether it matched and where the pattern goes on. An unclosed class
/// runs to the end of the pattern, as in redis-server.
fn class(pattern: &[u8], p: usize, c: u8, nocase: bool) -> Option<(bool, usize)> {
    let fold = |b: u8| if nocase { b.to_ascii_lowercase() } else { b };
    let c = fold(c);
    let mut j = p + 1;
    let not = pattern.get(j) == Some(&b'^');
    if not {
        j += 1;
    }
    let mut hit = false;
    loop {
        match pattern.get(j) {
            None => break,
            Some(b'\\') if j + 1 < pattern.len() => {
                if fold(pattern[j + 1]) == c {
                    hit = true;
                }
                j += 2;
            }
            Some(b']') => {
                j += 1;
                break;
            }
            Some(_) if pattern.get(j + 1) == Some(&b'-') && j + 2 < pattern.len() => {
                let (mut lo, mut hi) = (fold(pattern[j]), fold(pattern[j + 2]));
                if lo > hi {
                    std::mem::swap(&mut lo, &mut hi);
                }
                if c >= lo && c <= hi {
                    hit = true;
                }
                j += 3;
            }
            Some(&b) => {
                if fold(b) == c {
                    hit = true;
                }
                j += 1;
            }
        }
    }
    Some((hit != not, j))
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn patterns_match_as_in_redis() {
        let m = |p: &str, s: &str| matches(p.as_bytes(), s.as_bytes(), false);
        assert!(m("*", ""));
        assert!(m("h?llo", "hello"));
        assert!(!m("h?llo", "hllo"));
        assert!(m("h*llo", "heeeello"));
        assert!(m("h[ae]llo", "hallo"));
        assert!(!m("h[ae]llo", "hillo"));
        assert!(m("h[^e]llo", "hallo"));
        assert!(!m("h[^e]llo", "hello"));
        assert!(m("h[a-b]llo", "hbllo"));
        assert!(m("h[b-a]llo", "hbllo"));
        assert!(m("a\\*b", "a*b"));
        assert!(!m("a\\*b", "axb"));
        assert!(m("user:*:name", "user:42:name"));
        assert!(!m("user:*:name", "user:42:nam"));
        assert!(m("*a*b*c*", "xxaxxbxxcxx"));
        assert!(!m("*a*b*c*", "xxaxxcxxbxx"));
        assert!(matches(b"HELLO", b"hello", true));
        // A hostile pattern finishes (no exponential backtracking).
        let s = "a".repeat(10_000);
        assert!(!m(&format!("{}b", "*a".repeat(50)), &s));
    }
}
