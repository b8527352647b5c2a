//! An entry's requests, encoded once. The leader encodes the requests of
//! an entry when it proposes them and the entry carries those bytes from
//! then on: into the log, out of it, over the wire and into a follower's
//! log they are copied whole (a byte string in postcard), never decoded
//! and encoded again request by request. Applying decodes them once, and
//! the arguments it hands to the commands are slices of the same buffer
//! (`Bytes::slice_ref`), not copies.
//!
//! The bytes are postcard's encoding of `Vec<Request>`
//! (`docs/format/raft-log.md`, "Worked example").

use bytes::Bytes;
use serde::de::{Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use super::Request;

/// The encoded requests of one entry; clones share the bytes.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Batch(Bytes);

impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Batch({} bytes)", self.0.len())
    }
}

/// A request as it is decoded: its arguments borrow the batch's buffer.
#[derive(Deserialize)]
struct RequestRef<'a> {
    now_ms: u64,
    resp3: bool,
    multi: bool,
    #[serde(borrow)]
    cmds: Vec<Vec<&'a [u8]>>,
}

impl Batch {
    /// Encodes `reqs`; `size_hint` is about their encoded size. postcard
    /// into a `Vec` fails only for a type serde cannot say, and requests
    /// are plain data; were it to fail, the requests get the error rather
    /// than an entry that holds none of them.
    pub fn encode(reqs: &[Request], size_hint: usize) -> Result<Batch, String> {
        let buf = Vec::with_capacity(size_hint);
        postcard::to_extend(reqs, buf)
            .map(|b| Batch(Bytes::from(b)))
            .map_err(|e| format!("raft entry: encoding its requests: {e}"))
    }

    /// The encoded bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }

    /// Decodes the requests; their arguments are slices of this batch.
    pub fn requests(&self) -> Result<Vec<Request>, String> {
        let refs: Vec<RequestRef<'_>> = postcard::from_bytes(&self.0)
            .map_err(|e| format!("raft entry: malformed requests: {e}"))?;
        Ok(refs
            .into_iter()
            .map(|r| Request {
                now_ms: r.now_ms,
                resp3: r.resp3,
                multi: r.multi,
                cmds: r
                    .cmds
                    .into_iter()
                    .map(|c| c.into_iter().map(|a| self.slice(a)).collect())
                    .collect(),
            })
            .collect())
    }

    fn slice(&self, a: &[u8]) -> Bytes {
        if a.is_empty() {
            Bytes::new()
        } else {
            self.0.slice_ref(a)
        }
    }
}

impl Serialize for Batch {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

struct BatchVisitor;

impl<'de> Visitor<'de> for BatchVisitor {
    type Value = Batch;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an entry's encoded requests")
    }

    fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Batch, E> {
        Ok(Batch(Bytes::copy_from_slice(v)))
    }

    fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Batch, E> {
        Ok(Batch(Bytes::from(v)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Batch, A::Error> {
        let mut v = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(b) = seq.next_element::<u8>()? {
            v.push(b);
        }
        Ok(Batch(Bytes::from(v)))
    }
}

impl<'de> Deserialize<'de> for Batch {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Batch, D::Error> {
        d.deserialize_byte_buf(BatchVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_come_back_as_slices_of_the_batch() {
        let reqs = vec![
            Request {
                now_ms: 7,
                resp3: true,
                multi: false,
                cmds: vec![vec![
                    Bytes::from_static(b"SET"),
                    Bytes::from_static(b"k"),
                    Bytes::new(),
                ]],
            },
            Request {
                now_ms: 9,
                resp3: false,
                multi: true,
                cmds: vec![
                    vec![Bytes::from_static(b"INCR"), Bytes::from_static(b"n")],
                    vec![Bytes::from(vec![0xffu8; 300])],
                ],
            },
        ];
        let b = Batch::encode(&reqs, 0).unwrap();
        let back = b.requests().unwrap();
        assert_eq!(back.len(), 2);
        for (x, y) in reqs.iter().zip(&back) {
            assert_eq!((x.now_ms, x.resp3, x.multi), (y.now_ms, y.resp3, y.multi));
            assert_eq!(x.cmds, y.cmds);
        }
        let range = b.bytes().as_ptr_range();
        assert!(range.contains(&back[1].cmds[1][0].as_ptr()));
        // Through serde (the log and the wire) the bytes stay whole.
        let wire = postcard::to_stdvec(&b).unwrap();
        let again: Batch = postcard::from_bytes(&wire).unwrap();
        assert_eq!(again, b);
        assert!(Batch(Bytes::from_static(&[5, 1])).requests().is_err());
    }
}
