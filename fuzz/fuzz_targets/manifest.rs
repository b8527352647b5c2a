//! Fuzz target: `sluicedb::fuzzing::manifest` (`docs/fuzzing.md`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluicedb::fuzzing::manifest(data));
