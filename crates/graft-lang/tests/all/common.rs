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

/// Every leaf of a result as f64 values.
pub fn leaf_values(o: &Output) -> Vec<Vec<f64>> {
    o.leaves().iter().map(|t| t.to_f64_vec()).collect()
}

/// `got` within `tol` of `want`, relative to `1 + |want|`.
pub fn close(what: &str, got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: {got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= tol * (1.0 + w.abs()), "{what}: got {got:?}, want {want:?}");
    }
}

/// An f64 tensor of `shape` from row-major values.
pub fn f64s(shape: &[usize], v: &[f64]) -> Tensor {
    Tensor::from_vec(shape.to_vec(), v.to_vec()).unwrap()
}

/// The first diagnostic `graft check` reports for `src`, with its line and column.
pub fn check_error(src: &str) -> (String, (u32, u32)) {
    let m = module(src);
    match m.check() {
        Ok(()) => panic!("expected an error for:\n{src}"),
        Err(ds) => (ds[0].message.clone(), diag::line_col(src, ds[0].span.start)),
    }
}
