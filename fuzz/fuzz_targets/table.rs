//! Fuzz target: `sluicedb::fuzzing::table` (`docs/fuzzing.md`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluicedb::fuzzing::table(data));
