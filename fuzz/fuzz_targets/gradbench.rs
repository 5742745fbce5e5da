//! Fuzz target `gradbench`: see `graft_gradbench::fuzzing::protocol` (what
//! runs) and fuzz/README.md (how to run it, where failing inputs go).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    // A small memory budget: inputs whose sizes are within it still run,
    // larger ones must be refused cleanly (the property under test).
    if std::env::var_os("GRAFT_MAX_MEMORY").is_none() {
        std::env::set_var("GRAFT_MAX_MEMORY", "256M");
    }
    graft_gradbench::fuzzing::protocol(data)
});
