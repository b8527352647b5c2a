//! RESP framing on the server side: requests in, replies out.
//!
//! Requests are what redis-server accepts: arrays of bulk strings
//! (`*2\r\n$3\r\nGET\r\n$1\r\nk\r\n`) and inline commands (`GET k\r\n`, as
//! typed into telnet). The parser keeps its place between reads, so a large
//! argument arriving in many reads is not parsed again each time, and it
//! checks every length header against the limits before it reserves a
//! byte: `*2147483647` or a 4 GiB bulk header is refused at the header
//! with redis-server's own protocol error, and the client is closed.
//!
//! Why not a framing crate: `redis-protocol` (the well-kept one) decodes
//! whole frames of any RESP type. Clients send only the two forms above,
//! and redis-server's behaviour on bad input (its exact error strings, the
//! stricter limits before `AUTH`, inline quoting) has to be reproduced here
//! anyway; a decoder that waits for a whole frame cannot refuse a bulk at
//! its header. Replies are written straight into the output buffer, with
//! no frame tree in between.

use bytes::{Buf, Bytes, BytesMut};

/// Longest inline command, count line or bulk length line (redis-server's
/// `PROTO_INLINE_MAX_SIZE`).
pub const INLINE_MAX_BYTES: usize = 64 * 1024;

/// Before `AUTH`, when a password is set: at most this many arguments...
pub const UNAUTHENTICATED_MAX_ARGS: usize = 10;
/// ...of at most this many bytes each (as redis-server).
pub const UNAUTHENTICATED_MAX_BULK_BYTES: usize = 16 * 1024;

/// The limits one connection's requests are held to.
#[derive(Debug, Clone, Copy)]
pub struct RequestLimits {
    /// Longest argument (redis-server's `proto-max-bulk-len`).
    pub max_bulk_bytes: usize,
    /// Most arguments in one command.
    pub max_args: usize,
    /// Most bytes a client may have buffered unparsed, partial command
    /// included (redis-server's `client-query-buffer-limit`).
    pub max_query_buffer_bytes: usize,
    /// The stricter limits before `AUTH`.
    pub unauthenticated: bool,
}

/// What the parser found in the buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// A whole command (never empty).
    Command(Vec<Bytes>),
    /// More bytes are needed.
    Incomplete,
    /// The input breaks the protocol or a limit: reply with this error
    /// (without the `-`), then close the connection.
    Error(String),
}

/// A multibulk command being read.
#[derive(Debug)]
struct Pending {
    remaining: usize,
    args: Vec<Bytes>,
    /// The announced length of the bulk being read, once its header is in.
    bulk_len: Option<usize>,
    /// Bytes of `args` (counted against the query buffer limit).
    bytes: usize,
}

/// An incremental request parser; one per connection.
#[derive(Debug, Default)]
pub struct RequestParser {
    pending: Option<Pending>,
}

fn protocol_error(what: &str) -> Parsed {
    Parsed::Error(format!("ERR Protocol error: {what}"))
}

/// Position of the `\r\n` ending the line at the start of `buf`.
fn line_end(buf: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = buf[from..].iter().position(|&b| b == b'\r') {
        let at = from + i;
        if buf.get(at + 1) == Some(&b'\n') {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// A length header's number as redis-server's `string2ll` reads it.
fn parse_len(digits: &[u8]) -> Option<i64> {
    std::str::from_utf8(digits).ok()?.parse::<i64>().ok()
}

impl RequestParser {
    /// Bytes to reserve in the read buffer for the argument being read,
    /// so that a large value is read in large steps (never more than the
    /// announced length, and never past 1 MiB ahead).
    pub fn wanted_bytes(&self, buffered: usize) -> usize {
        match &self.pending {
            Some(Pending {
                bulk_len: Some(n), ..
            }) => (n + 2).saturating_sub(buffered).min(1 << 20),
            _ => 0,
        }
    }

    /// Parses the next command out of `buf`, consuming what it parsed.
    pub fn parse(&mut self, buf: &mut BytesMut, limits: &RequestLimits) -> Parsed {
        loop {
            if self.pending.is_none() {
                match buf.first() {
                    None => return Parsed::Incomplete,
                    Some(b'*') => match self.start_multibulk(buf, limits) {
                        Ok(true) => {}
                        Ok(false) => continue, // an empty command: nothing to run
                        Err(p) => return p,
                    },
                    Some(_) => match parse_inline(buf) {
                        Parsed::Command(args) if args.is_empty() => continue,
                        other => return other,
                    },
                }
            }
            return self.continue_multibulk(buf, limits);
        }
    }

    /// Reads a `*N\r\n` header: `Ok(true)` when a command of N > 0
    /// arguments starts, `Ok(false)` for N ≤ 0 (ignored, as redis-server).
    fn start_multibulk(
        &mut self,
        buf: &mut BytesMut,
        limits: &RequestLimits,
    ) -> Result<bool, Parsed> {
        let Some(end) = line_end(buf) else {
            if buf.len() > INLINE_MAX_BYTES {
                return Err(protocol_error("too big mbulk count string"));
            }
            return Err(Parsed::Incomplete);
        };
        if end > INLINE_MAX_BYTES {
            return Err(protocol_error("too big mbulk count string"));
        }
        let n = parse_len(&buf[1..end]);
        let n = match n {
            Some(n) if n <= i64::from(i32::MAX) => n,
            _ => return Err(protocol_error("invalid multibulk length")),
        };
        if limits.unauthenticated && n > UNAUTHENTICATED_MAX_ARGS as i64 {
            return Err(protocol_error("unauthenticated multibulk length"));
        }
        if n > limits.max_args as i64 {
            return Err(protocol_error("invalid multibulk length"));
        }
        buf.advance(end + 2);
        if n <= 0 {
            return Ok(false);
        }
        let n = n as usize;
        self.pending = Some(Pending {
            remaining: n,
            args: Vec::with_capacity(n.min(1024)),
            bulk_len: None,
            bytes: 0,
        });
        Ok(true)
    }

    fn continue_multibulk(&mut self, buf: &mut BytesMut, limits: &RequestLimits) -> Parsed {
        let p = self
            .pending
            .as_mut()
            .expect("a multibulk command is pending");
        while p.remaining > 0 {
            let len = match p.bulk_len {
                Some(len) => len,
                None => {
                    let Some(&first) = buf.first() else {
                        return Parsed::Incomplete;
                    };
                    if first != b'$' {
                        let got = char::from(first);
                        return protocol_error(&format!("expected '$', got '{got}'"));
                    }
                    let Some(end) = line_end(buf) else {
                        if buf.len() > INLINE_MAX_BYTES {
                            return protocol_error("too big bulk count string");
                        }
                        return Parsed::Incomplete;
                    };
                    if end > INLINE_MAX_BYTES {
                        return protocol_error("too big bulk count string");
                    }
                    let len = match parse_len(&buf[1..end]) {
                        Some(n) if n >= 0 && n as u64 <= limits.max_bulk_bytes as u64 => n as usize,
                        _ => return protocol_error("invalid bulk length"),
                    };
                    if limits.unauthenticated && len > UNAUTHENTICATED_MAX_BULK_BYTES {
                        return protocol_error("unauthenticated bulk length");
                    }
                    if p.bytes.saturating_add(len) > limits.max_query_buffer_bytes {
                        return Parsed::Error(
                            "ERR client query buffer limit reached; closing the connection"
                                .to_owned(),
                        );
                    }
                    buf.advance(end + 2);
                    p.bulk_len = Some(len);
                    len
                }
            };
            if buf.len() < len + 2 {
                return Parsed::Incomplete;
            }
            if &buf[len..len + 2] != b"\r\n" {
                // redis-server trusts the length and drops two bytes; a
                // client that gets here is out of step: close it.
                return protocol_error("bulk string not terminated by CRLF");
            }
            let arg = buf.split_to(len).freeze();
            buf.advance(2);
            p.bytes += len;
            p.args.push(arg);
            p.bulk_len = None;
            p.remaining -= 1;
        }
        let p = self.pending.take().expect("pending");
        Parsed::Command(p.args)
    }

    /// Bytes held for the command being parsed, for the query buffer limit.
    pub fn pending_bytes(&self) -> usize {
        self.pending.as_ref().map_or(0, |p| p.bytes)
    }
}

/// An inline command: one line, split like redis-server's `sdssplitargs`.
fn parse_inline(buf: &mut BytesMut) -> Parsed {
    let Some(nl) = buf.iter().position(|&b| b == b'\n') else {
        if buf.len() > INLINE_MAX_BYTES {
            return protocol_error("too big inline request");
        }
        return Parsed::Incomplete;
    };
    if nl > INLINE_MAX_BYTES {
        return protocol_error("too big inline request");
    }
    let line = buf.split_to(nl + 1);
    let mut line = &line[..nl];
    if line.last() == Some(&b'\r') {
        line = &line[..line.len() - 1];
    }
    match split_args(line) {
        Some(args) => Parsed::Command(args.into_iter().map(Bytes::from).collect()),
        None => protocol_error("unbalanced quotes in request"),
    }
}

fn hex_digit(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

/// Splits a line into arguments the way redis-server's `sdssplitargs`
/// does: spaces separate, `"..."` takes `\n \r \t \b \a \\ \" \xHH`,
/// `'...'` takes `\'`; a closing quote must be followed by a space or the
/// end. `None` for unbalanced quotes.
pub fn split_args(line: &[u8]) -> Option<Vec<Vec<u8>>> {
    // C's `isspace`; and a NUL ends the line, as it ends a C string.
    let is_space = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r');
    let line = &line[..line.iter().position(|&b| b == 0).unwrap_or(line.len())];
    let mut args = Vec::new();
    let mut i = 0;
    loop {
        while i < line.len() && is_space(&line[i]) {
            i += 1;
        }
        if i >= line.len() {
            return Some(args);
        }
        let mut cur = Vec::new();
        let (mut inq, mut insq) = (false, false);
        loop {
            let c = line.get(i).copied();
            if inq {
                match c {
                    None => return None,
                    Some(b'\\')
                        if line.get(i + 1) == Some(&b'x')
                            && line.get(i + 2).and_then(|&b| hex_digit(b)).is_some()
                            && line.get(i + 3).and_then(|&b| hex_digit(b)).is_some() =>
                    {
                        let hi = hex_digit(line[i + 2]).unwrap_or(0);
                        let lo = hex_digit(line[i + 3]).unwrap_or(0);
                        cur.push(hi * 16 + lo);
                        i += 3;
                    }
                    Some(b'\\') if i + 1 < line.len() => {
                        i += 1;
                        cur.push(match line[i] {
                            b'n' => b'\n',
                            b'r' => b'\r',
                            b't' => b'\t',
                            b'b' => 8,
                            b'a' => 7,
                            other => other,
                        });
                    }
                    Some(b'"') => {
                        if line.get(i + 1).is_some_and(|b| !is_space(b)) {
                            return None;
                        }
                        i += 1;
                        break;
                    }
                    Some(b) => cur.push(b),
                }
            } else if insq {
                match c {
                    None => return None,
                    Some(b'\\') if line.get(i + 1) == Some(&b'\'') => {
                        i += 1;
                        cur.push(b'\'');
                    }
                    Some(b'\'') => {
                        if line.get(i + 1).is_some_and(|b| !is_space(b)) {
                            return None;
                        }
                        i += 1;
                        break;
                    }
                    Some(b) => cur.push(b),
                }
            } else {
                match c {
                    None | Some(b' ' | b'\n' | b'\r' | b'\t') => break,
                    Some(b'"') => inq = true,
                    Some(b'\'') => insq = true,
                    Some(b) => cur.push(b),
                }
            }
            i += 1;
        }
        args.push(cur);
    }
}

/// Replies, encoded as RESP2 or RESP3 (`HELLO 3`) into one buffer.
#[derive(Debug, Default)]
pub struct Out {
    pub buf: Vec<u8>,
    pub resp3: bool,
}

impl Out {
    fn line(&mut self, tag: u8, body: &[u8]) {
        self.buf.push(tag);
        self.buf.extend_from_slice(body);
        self.buf.extend_from_slice(b"\r\n");
    }

    fn len_line(&mut self, tag: u8, n: i64) {
        self.buf.push(tag);
        self.buf
            .extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
        self.buf.extend_from_slice(b"\r\n");
    }

    pub fn ok(&mut self) {
        self.buf.extend_from_slice(b"+OK\r\n");
    }

    pub fn simple(&mut self, s: &str) {
        self.line(b'+', s.as_bytes());
    }

    /// A `HELP` subcommand's reply: its lines as an array of simple strings.
    pub fn help(&mut self, lines: &[&str]) {
        self.array(lines.len());
        for l in lines {
            self.simple(l);
        }
    }

    /// An error reply; `e` starts with its code (`ERR ...`). Line breaks
    /// become spaces, as redis-server does, so the reply stays one line.
    pub fn error(&mut self, e: &str) {
        let clean: Vec<u8> = e
            .bytes()
            .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b })
            .collect();
        self.line(b'-', &clean);
    }

    pub fn int(&mut self, n: i64) {
        self.len_line(b':', n);
    }

    pub fn bulk(&mut self, b: &[u8]) {
        self.len_line(b'$', b.len() as i64);
        self.buf.extend_from_slice(b);
        self.buf.extend_from_slice(b"\r\n");
    }

    pub fn opt_bulk(&mut self, b: Option<&[u8]>) {
        match b {
            Some(b) => self.bulk(b),
            None => self.null(),
        }
    }

    /// A missing value: `$-1` in RESP2, `_` in RESP3.
    pub fn null(&mut self) {
        if self.resp3 {
            self.buf.extend_from_slice(b"_\r\n");
        } else {
            self.buf.extend_from_slice(b"$-1\r\n");
        }
    }

    /// A missing array (an aborted `EXEC`): `*-1` in RESP2, `_` in RESP3.
    pub fn null_array(&mut self) {
        if self.resp3 {
            self.buf.extend_from_slice(b"_\r\n");
        } else {
            self.buf.extend_from_slice(b"*-1\r\n");
        }
    }

    pub fn array(&mut self, n: usize) {
        self.len_line(b'*', n as i64);
    }

    /// An out-of-band message of `n` elements (Pub/Sub): `>n` in RESP3,
    /// an array in RESP2.
    pub fn push(&mut self, n: usize) {
        self.len_line(if self.resp3 { b'>' } else { b'*' }, n as i64);
    }

    /// A map of `n` pairs: `%n` in RESP3, a flat array of 2n in RESP2.
    pub fn map(&mut self, n: usize) {
        if self.resp3 {
            self.len_line(b'%', n as i64);
        } else {
            self.len_line(b'*', 2 * n as i64);
        }
    }

    /// A set of `n` elements: `~n` in RESP3, an array in RESP2.
    pub fn set(&mut self, n: usize) {
        self.len_line(if self.resp3 { b'~' } else { b'*' }, n as i64);
    }

    /// A double (`INCRBYFLOAT` replies with a bulk string in both).
    pub fn double(&mut self, text: &str) {
        if self.resp3 {
            self.line(b',', text.as_bytes());
        } else {
            self.bulk(text.as_bytes());
        }
    }

    /// Text for humans (`INFO`, `CLIENT INFO`): a verbatim string `=` in
    /// RESP3, a bulk string in RESP2.
    pub fn verbatim(&mut self, text: &str) {
        if self.resp3 {
            self.len_line(b'=', (text.len() + 4) as i64);
            self.buf.extend_from_slice(b"txt:");
            self.buf.extend_from_slice(text.as_bytes());
            self.buf.extend_from_slice(b"\r\n");
        } else {
            self.bulk(text.as_bytes());
        }
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
}

#[cfg(test)]
mod tests;
