//! Fuzz target: `sluicedb::fuzzing::hash_index_checkpoint` (`docs/fuzzing.md`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluicedb::fuzzing::hash_index_checkpoint(data));
