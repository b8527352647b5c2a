//! Versions: which tables make up the key index at a point in time, and the
//! manifest log that records every change (`docs/format/manifest.md`).

pub(crate) mod edit;
pub(crate) mod set;
pub(crate) mod tag;
#[expect(
    clippy::module_inception,
    reason = "version::version holds the Version type; set and edit sit beside it"
)]
pub(crate) mod version;

pub(crate) use edit::{FileMeta, TablePayload, VersionEdit};
pub(crate) use set::{ManifestHead, ManifestState, VersionSet};
pub(crate) use version::{LevelRules, Version};
