//! Fuzz target `gradbench`: see `graft_gradbench::fuzzing::protocol` (what
//! runs) and fuzz/README.md (how to run it, where failing inputs go).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| graft_gradbench::fuzzing::protocol(data));
