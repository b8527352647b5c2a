//! Fuzz target: the RESP request parser of `sluice-server`
//! (`crates/sluice-server/src/resp.rs`, `docs/fuzzing.md`).
//!
//! The first byte picks the limits; the rest is what a client sends. It is
//! parsed whole and again fed in small reads, as a connection gets it: both
//! must give the same commands and end the same way (never a panic). Every
//! command must come back from its encodings: as a multibulk written by the
//! server's own reply encoder, and as an inline line quoted the way
//! `split_args` reads it.
#![no_main]

use bytes::{Bytes, BytesMut};
use sluice_server::resp::{split_args, Out, Parsed, RequestLimits, RequestParser};

/// What a parse of a whole input gave: the commands, then how it ended.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    commands: Vec<Vec<Bytes>>,
    error: Option<String>,
}

fn limits(flags: u8) -> RequestLimits {
    RequestLimits {
        max_bulk_bytes: if flags & 1 == 0 { 512 << 20 } else { 16 },
        max_args: if flags & 2 == 0 { 1 << 20 } else { 3 },
        max_query_buffer_bytes: if flags & 4 == 0 { 1 << 30 } else { 64 },
        unauthenticated: flags & 8 != 0,
    }
}

fn permissive() -> RequestLimits {
    limits(0)
}

/// Parses everything `buf` holds into `out`; false once an error ends
/// the connection.
fn drain(p: &mut RequestParser, buf: &mut BytesMut, l: &RequestLimits, out: &mut Outcome) -> bool {
    loop {
        match p.parse(buf, l) {
            Parsed::Command(args) => {
                assert!(!args.is_empty(), "an empty command");
                out.commands.push(args);
            }
            Parsed::Incomplete => return true,
            Parsed::Error(e) => {
                out.error = Some(e);
                return false;
            }
        }
    }
}

fn whole(input: &[u8], l: &RequestLimits) -> Outcome {
    let mut out = Outcome {
        commands: Vec::new(),
        error: None,
    };
    drain(
        &mut RequestParser::default(),
        &mut BytesMut::from(input),
        l,
        &mut out,
    );
    out
}

/// Fed in reads of 1 to 8 bytes, sizes taken from the input itself.
fn chunked(input: &[u8], l: &RequestLimits) -> Outcome {
    let mut out = Outcome {
        commands: Vec::new(),
        error: None,
    };
    let mut p = RequestParser::default();
    let mut buf = BytesMut::new();
    let mut at = 0;
    while at < input.len() {
        let n = 1 + usize::from(input[at] % 8);
        let end = (at + n).min(input.len());
        buf.extend_from_slice(&input[at..end]);
        at = end;
        let _ = p.wanted_bytes(buf.len());
        if !drain(&mut p, &mut buf, l, &mut out) {
            break;
        }
    }
    out
}

/// A command as the server's encoder writes an array of bulk strings.
fn multibulk(args: &[Bytes]) -> BytesMut {
    let mut out = Out::default();
    out.array(args.len());
    for a in args {
        out.bulk(a);
    }
    BytesMut::from(&out.buf[..])
}

/// An argument quoted so that `split_args` reads it back byte for byte.
fn quoted(arg: &[u8]) -> Vec<u8> {
    let mut q = b"\"".to_vec();
    for b in arg {
        q.extend_from_slice(format!("\\x{b:02x}").as_bytes());
    }
    q.push(b'"');
    q
}

fn round_trips(args: &[Bytes]) {
    let mut buf = multibulk(args);
    let got = RequestParser::default().parse(&mut buf, &permissive());
    assert_eq!(
        got,
        Parsed::Command(args.to_vec()),
        "a multibulk does not parse back"
    );
    assert!(buf.is_empty(), "a multibulk leaves bytes behind");
    let line: Vec<u8> = args
        .iter()
        .map(|a| quoted(a))
        .collect::<Vec<_>>()
        .join(&b' ');
    let back = split_args(&line).expect("quoted arguments split");
    let want: Vec<Vec<u8>> = args.iter().map(|a| a.to_vec()).collect();
    assert_eq!(back, want, "quoted arguments do not split back");
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((&flags, input)) = data.split_first() else {
        return;
    };
    let l = limits(flags);
    let all = whole(input, &l);
    assert_eq!(chunked(input, &l), all, "small reads parse differently");
    for args in &all.commands {
        round_trips(args);
    }
    // The inline splitter on its own, with whatever quoting the input has.
    if let Some(args) = split_args(input) {
        let args: Vec<Bytes> = args.into_iter().map(Bytes::from).collect();
        if !args.is_empty() {
            round_trips(&args);
        }
    }
});
