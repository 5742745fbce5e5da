//! All integration tests of `graft`, in one test binary (one link step
//! instead of one per file). Each module is a former `tests/<module>.rs`,
//! so `cargo test -p graft <module>::` still selects one topic.

mod front_ends;
mod layers;
mod modes;
mod module_layers;
mod module_train;
mod module_util;
mod optim;
mod roles;
mod tr_control;
mod tr_reduce_nn;
mod tr_shape_math;
mod train;
mod vmap;
