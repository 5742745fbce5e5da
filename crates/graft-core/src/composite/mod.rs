//! Composite ops: a library of higher-level operations written over the
//! primitives with the [`Builder`](crate::ir::Builder). Because they expand
//! to primitives, every transform handles them for free. The Rust tracing
//! API and the graft language both call these functions, so each composite
//! has one definition.

pub mod broadcast;
pub mod conv;
pub mod dropout;
pub mod embed;
pub mod pool;
