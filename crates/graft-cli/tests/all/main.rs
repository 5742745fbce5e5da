//! All integration tests of `graft-cli`, in one test binary (one link step
//! instead of one per file). Each module is a former `tests/<module>.rs`,
//! so `cargo test -p graft-cli <module>::` still selects one topic.

mod cli;
mod distributed;
mod docs;
mod gpu;
mod ir_kernels;
mod train;
