//! Fuzz target: `sluicedb::fuzzing::value_log` (`docs/fuzzing.md`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluicedb::fuzzing::value_log(data));
