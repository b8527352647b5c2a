//! LightKV (ICDE): the parts of the preset built on the persistent write
//! buffer ([`crate::pwb`]) and the RH-Tree ([`crate::index::rh`]). Not wired
//! into the engine yet (`docs/design.md`, "LightKV (being built)").

pub(crate) mod buffer;

#[cfg(test)]
mod tests;
