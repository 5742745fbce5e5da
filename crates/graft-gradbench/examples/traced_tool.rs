//! A GradBench tool process serving the `hello` and `lse` modules, whose
//! functions are written with graft's Rust tracing API and differentiated by
//! graft's `grad` (the protocol tests' backend). It exists to run the real
//! GradBench eval drivers against this crate's server before the graft
//! language backend lands; it is not the `graft gradbench` tool.
//!
//! Usage: as the `--tool` command of GradBench's `run`; it reads messages on
//! stdin and writes responses on stdout until stdin closes.

#[path = "../tests/all/common/mod.rs"]
mod common;

use graft_gradbench::serve_stdio;

fn main() {
    match serve_stdio(common::ToyBackend::new()) {
        Ok(log) => eprintln!(
            "traced_tool: {} responses, {} failures, {} outputs valid, {} invalid",
            log.responses,
            log.failures,
            log.valid,
            log.invalid.len()
        ),
        Err(e) => {
            eprintln!("traced_tool: {e}");
            std::process::exit(1);
        }
    }
}
