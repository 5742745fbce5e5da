//! Fuzz target `front_end`: see `graft_lang::fuzzing::front_end` (what runs) and
//! fuzz/README.md (how to run it, where failing inputs go).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| graft_lang::fuzzing::front_end(data));
