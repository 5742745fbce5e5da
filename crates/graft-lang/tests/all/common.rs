//! Helpers shared by the test modules that compile and run small programs.

use graft_core::Tensor;
use graft_lang::{diag, Module, Output};

/// `src` as a module named `test.graft`; a diagnostic fails the test with its rendered text.
pub fn module(src: &str) -> Module {
    match Module::from_source("test.graft", src) {
        Ok(m) => m,
        Err(ds) => panic!("{}", ds.iter().map(|d| diag::render(d, "test.graft", src)).collect::<String>()),
    }
}

/// Runs `entry` on `inputs`; a diagnostic fails the test with its rendered text.
pub fn run(m: &Module, entry: &str, inputs: &[Tensor]) -> Output {
    match m.run(entry, inputs) {
        Ok(o) => o,
        Err(d) => panic!("{}", diag::render(&d, m.file(), m.source())),
    }
}
