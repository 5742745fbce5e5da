//! All integration tests of `graft-core`, in one test binary (one link step
//! instead of one per file). Each module is a former `tests/<module>.rs`,
//! so `cargo test -p graft-core <module>::` still selects one topic.

mod common;
mod composite_util;
mod loops_util;

mod ad_api;
mod ad_composites;
mod ad_prims;
mod binary;
mod cast;
mod checkpoint;
mod composite_broadcast;
mod composite_conv;
mod composite_embed;
mod composite_linalg;
mod composite_math;
mod composite_nn;
mod composite_pool;
mod composite_random;
mod composite_reduce;
mod composite_shape;
mod cond;
mod control;
mod conv;
mod create;
mod cumulative;
mod custom_rules;
mod eager;
mod exec;
mod fold;
mod format_npy;
mod fusion;
mod fusion_shape;
mod index;
mod ir;
mod jac;
mod linalg;
mod linalg_decomp;
mod mathfn;
mod mathfn_c;
mod native;
mod native_loops;
mod native_rows;
mod opt;
mod prim_coverage;
mod random;
mod reduce;
mod scan;
mod shape;
mod simd;
mod unary;
mod vmap;
mod vmap_composites;
mod while_loop;
mod window;
