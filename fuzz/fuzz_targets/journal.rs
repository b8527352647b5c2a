//! Fuzz target: `sluicedb::fuzzing::journal` (`docs/fuzzing.md`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluicedb::fuzzing::journal(data));
