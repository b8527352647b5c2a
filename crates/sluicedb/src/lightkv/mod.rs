//! LightKV (ICDE): the parts of the preset built on the persistent write
//! buffer ([`crate::pwb`]) and the RH-Tree ([`crate::index::rh`]); the
//! engine holds it through `db/light.rs` (`docs/design.md`, "LightKV: the
//! preset").

pub(crate) mod buffer;
pub(crate) mod compaction;
pub(crate) mod memory;

#[cfg(test)]
mod tests;
