//! Pub/Sub: `SUBSCRIBE`, `PSUBSCRIBE`, their `UN` forms, `PUBLISH` and
//! `PUBSUB`. Messages are not stored: `PUBLISH` hands each subscriber a
//! copy through its connection's inbox (an unbounded channel), and the
//! connection writes it out between commands (RESP2 arrays, RESP3 pushes).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::mpsc;

use crate::data::CmdResult;
use crate::glob;
use crate::resp::Out;
use crate::server::{Client, Server};

/// A message on its way to one subscriber (or monitor).
#[derive(Debug, Clone)]
pub enum Message {
    Pub {
        /// The pattern it matched (`PSUBSCRIBE`), if any.
        pattern: Option<Bytes>,
        channel: Bytes,
        payload: Bytes,
    },
    /// A line written as it is (`MONITOR`'s).
    Line(Bytes),
}

pub type Inbox = mpsc::UnboundedReceiver<Message>;
pub type Outbox = mpsc::UnboundedSender<Message>;

/// A connection's sending end, handed out only through [`Mailbox::sender`],
/// which remembers that it was: until then nothing can arrive in the
/// inbox, and the connection's read wait does not poll it (a poll per
/// wait, a cold cache line of the channel's, for the clients that never
/// subscribe or monitor).
#[derive(Debug)]
pub struct Mailbox {
    outbox: Outbox,
    handed_out: bool,
}

impl Mailbox {
    pub fn new(outbox: Outbox) -> Mailbox {
        Mailbox {
            outbox,
            handed_out: false,
        }
    }

    /// A sender for a registry (subscriptions, monitors).
    pub fn sender(&mut self) -> Outbox {
        self.handed_out = true;
        self.outbox.clone()
    }

    /// Whether a sender was ever handed out, so messages may arrive (it
    /// stays true: some may still be queued after an unsubscribe).
    pub fn may_receive(&self) -> bool {
        self.handed_out
    }
}

/// Who listens to what.
#[derive(Debug, Default)]
pub struct Registry {
    inner: Mutex<Subscriptions>,
}

#[derive(Debug, Default)]
struct Subscriptions {
    channels: BTreeMap<Bytes, HashMap<u64, Outbox>>,
    patterns: BTreeMap<Bytes, HashMap<u64, Outbox>>,
}

impl Registry {
    /// Delivers a message; returns how many subscribers got it.
    pub fn publish(&self, channel: &Bytes, payload: &Bytes) -> i64 {
        let s = self.inner.lock();
        let mut n = 0;
        if let Some(subs) = s.channels.get(channel) {
            for tx in subs.values() {
                let m = Message::Pub {
                    pattern: None,
                    channel: channel.clone(),
                    payload: payload.clone(),
                };
                n += i64::from(tx.send(m).is_ok());
            }
        }
        for (p, subs) in &s.patterns {
            if glob::matches(p, channel, false) {
                for tx in subs.values() {
                    let m = Message::Pub {
                        pattern: Some(p.clone()),
                        channel: channel.clone(),
                        payload: payload.clone(),
                    };
                    n += i64::from(tx.send(m).is_ok());
                }
            }
        }
        n
    }

    /// Drops every subscription of a client (disconnect, `RESET`).
    pub fn forget(&self, client: &mut Client) {
        let mut s = self.inner.lock();
        for ch in std::mem::take(&mut client.channels) {
            remove(&mut s.channels, &ch, client.id);
        }
        for p in std::mem::take(&mut client.patterns) {
            remove(&mut s.patterns, &p, client.id);
        }
    }
}

fn remove(map: &mut BTreeMap<Bytes, HashMap<u64, Outbox>>, key: &Bytes, id: u64) {
    if let Some(subs) = map.get_mut(key) {
        subs.remove(&id);
        if subs.is_empty() {
            map.remove(key);
        }
    }
}

/// Writes a message as the client's protocol has it.
pub fn write_message(out: &mut Out, m: &Message) {
    let (pattern, channel, payload) = match m {
        Message::Line(l) => return out.buf.extend_from_slice(l),
        Message::Pub {
            pattern,
            channel,
            payload,
        } => (pattern, channel, payload),
    };
    match pattern {
        Some(p) => {
            out.push(4);
            out.bulk(b"pmessage");
            out.bulk(p);
        }
        None => {
            out.push(3);
            out.bulk(b"message");
        }
    }
    out.bulk(channel);
    out.bulk(payload);
}

fn confirm(out: &mut Out, kind: &[u8], name: Option<&[u8]>, count: usize) {
    out.push(3);
    out.bulk(kind);
    out.opt_bulk(name);
    out.int(count as i64);
}

/// The subscription commands; they need the client (its inbox and sets).
pub fn run(
    server: &Server,
    client: &mut Client,
    name: &str,
    args: &[Bytes],
    out: &mut Out,
) -> CmdResult {
    let reg = &server.pubsub;
    match name {
        "subscribe" | "psubscribe" => {
            let pattern = name == "psubscribe";
            let mut s = reg.inner.lock();
            for a in &args[1..] {
                let (map, mine) = if pattern {
                    (&mut s.patterns, &mut client.patterns)
                } else {
                    (&mut s.channels, &mut client.channels)
                };
                if mine.insert(a.clone()) {
                    map.entry(a.clone())
                        .or_default()
                        .insert(client.id, client.mailbox.sender());
                }
                let count = client.channels.len() + client.patterns.len();
                confirm(out, name.as_bytes(), Some(a), count);
            }
        }
        "unsubscribe" | "punsubscribe" => {
            let pattern = name == "punsubscribe";
            let mut s = reg.inner.lock();
            let targets: Vec<Bytes> = if args.len() > 1 {
                args[1..].to_vec()
            } else if pattern {
                client.patterns.iter().cloned().collect()
            } else {
                client.channels.iter().cloned().collect()
            };
            if targets.is_empty() {
                let count = client.channels.len() + client.patterns.len();
                confirm(out, name.as_bytes(), None, count);
            }
            for t in targets {
                let (map, mine) = if pattern {
                    (&mut s.patterns, &mut client.patterns)
                } else {
                    (&mut s.channels, &mut client.channels)
                };
                if mine.remove(&t) {
                    remove(map, &t, client.id);
                }
                let count = client.channels.len() + client.patterns.len();
                confirm(out, name.as_bytes(), Some(&t), count);
            }
        }
        "publish" => {
            let n = reg.publish(&args[1], &args[2]);
            out.int(n);
        }
        "pubsub" => pubsub(server, args, out)?,
        _ => return Err(format!("ERR unknown command '{name}'")),
    }
    Ok(())
}

fn pubsub(server: &Server, args: &[Bytes], out: &mut Out) -> CmdResult {
    let s = server.pubsub.inner.lock();
    let sub = args[1].to_ascii_lowercase();
    match (&sub[..], args.len()) {
        (b"channels", 2 | 3) => {
            let names: Vec<&Bytes> = s
                .channels
                .keys()
                .filter(|c| args.get(2).is_none_or(|p| glob::matches(p, c, false)))
                .collect();
            out.array(names.len());
            for n in names {
                out.bulk(n);
            }
        }
        (b"numsub", _) => {
            out.map(args.len() - 2);
            for c in &args[2..] {
                out.bulk(c);
                out.int(s.channels.get(c).map_or(0, |m| m.len() as i64));
            }
        }
        // Distinct patterns, however many clients share one.
        (b"numpat", 2) => out.int(s.patterns.len() as i64),
        (b"shardchannels", 2 | 3) => out.array(0),
        (b"shardnumsub", _) => {
            out.map(args.len() - 2);
            for c in &args[2..] {
                out.bulk(c);
                out.int(0);
            }
        }
        _ => {
            let lower = String::from_utf8_lossy(&sub).into_owned();
            let known = [
                "channels",
                "numsub",
                "numpat",
                "shardchannels",
                "shardnumsub",
                "help",
            ];
            return Err(if known.contains(&lower.as_str()) {
                format!("ERR wrong number of arguments for 'pubsub|{lower}' command")
            } else {
                format!(
                    "ERR unknown subcommand '{}'. Try PUBSUB HELP.",
                    String::from_utf8_lossy(&args[1])
                )
            });
        }
    }
    Ok(())
}

/// A client's subscriptions.
pub type Names = BTreeSet<Bytes>;
