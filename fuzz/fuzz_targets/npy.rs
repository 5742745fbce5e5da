//! Fuzz target `npy`: see `graft_core::npy::fuzz_read` (what runs) and
//! fuzz/README.md (how to run it, where failing inputs go).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| graft_core::npy::fuzz_read(data));
