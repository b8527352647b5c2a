//! Versions: which tables make up the key index at a point in time, and the
//! manifest log that records every change (`docs/format/manifest.md`).

pub(crate) mod edit;
pub(crate) mod set;
#[allow(clippy::module_inception)]
pub(crate) mod version;

pub(crate) use edit::{FileMeta, VersionEdit};
pub(crate) use set::{ManifestState, VersionSet};
pub(crate) use version::Version;
