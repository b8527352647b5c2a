//! The value store: where separated values live (DESIGN.md axis 2).
//!
//! Values at or above the separation threshold are written here and the key
//! index keeps a [`ValuePointer`] (entry kind 2). Layouts: `log` (WiscKey,
//! seed 001 §3.3.2) first; HashKV's `hash` and Scavenger's `table` later.
//! The write path and GC are wired in by issue 3 (`docs/design.md`, "Value
//! store"); until then only the formats, writer and reader exist here.

// Wired into the write path next (issue 3); the formats are tested now.
#![allow(dead_code)]

pub(crate) mod log;
pub(crate) mod pointer;
