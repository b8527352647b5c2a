//! Fuzz target: `sluicedb::fuzzing::block` (`docs/fuzzing.md`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluicedb::fuzzing::block(data));
