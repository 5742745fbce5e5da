//! All integration tests of `graft-gradbench`, in one test binary (one link step
//! instead of one per file). Each module is a former `tests/<module>.rs`,
//! so `cargo test -p graft-gradbench <module>::` still selects one topic.

mod common;
mod lang_util;

mod convert;
mod lang_ba;
mod lang_det;
mod lang_grads;
mod lang_ht;
mod lang_lstm;
mod lang_particle;
mod lang_protocol;
mod lang_saddle;
mod protocol;
