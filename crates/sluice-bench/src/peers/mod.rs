//! Peer engines, each behind its cargo feature.

#[cfg(feature = "fjall")]
pub mod fjall;
#[cfg(feature = "rocksdb")]
pub mod rocks;
