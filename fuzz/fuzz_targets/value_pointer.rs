//! Fuzz target: `sluicedb::fuzzing::value_pointer` (`docs/fuzzing.md`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluicedb::fuzzing::value_pointer(data));
