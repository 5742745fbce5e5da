//! A GradBench tool process serving the `hello` and `lse` modules, whose
//! functions are written with graft's Rust tracing API and differentiated by
//! graft's `grad` (the protocol tests' backend). It exists to run the real
//! GradBench eval drivers against this crate's server before the graft
//! language backend lands; it is not the `graft gradbench` tool.
//!
//! Usage: as the `--tool` command of GradBench's `run`; it reads messages on
//! stdin and writes responses on stdout until stdin closes.

#[path = "../tests/common/mod.rs"]
mod common;

use std::io::{self, ErrorKind};

use graft_gradbench::Server;

fn main() {
    let mut server = Server::new(common::ToyBackend::new());
    match server.serve(io::stdin().lock(), io::stdout().lock()) {
        Ok(()) => {}
        // The eval closed its end: the session is over, not failed.
        Err(e) if e.kind() == ErrorKind::BrokenPipe => {}
        Err(e) => {
            eprintln!("traced_tool: {e}");
            std::process::exit(1);
        }
    }
    let log = server.log();
    eprintln!(
        "traced_tool: {} responses, {} failures, {} outputs valid, {} invalid",
        log.responses,
        log.failures,
        log.valid,
        log.invalid.len()
    );
}
