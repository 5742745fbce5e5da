//! All integration tests of `graft-lang`, in one test binary (one link step
//! instead of one per file). Each module is a former `tests/<module>.rs`,
//! so `cargo test -p graft-lang <module>::` still selects one topic.

mod common;

mod check_no_panic;
mod collectives;
mod debug_print;
mod diagnostics;
mod examples_dir;
mod f16;
mod limits;
mod linalg;
mod linalg_spectral;
mod operators;
mod parse_corpus;
mod parse_docs;
mod parse_errors;
mod parse_examples;
mod parse_props;
mod pytrees;
mod run_examples;
mod sorting;
mod stdlib;
mod transforms;
mod u32;
mod updates;
