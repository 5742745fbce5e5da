//! Composite ops: a library of higher-level operations written over the
//! primitives with the [`Builder`](crate::ir::Builder). Because they expand
//! to primitives, every transform handles them for free. The Rust tracing
//! API and the graft language both call these functions, so each composite
//! has one definition.

pub mod attention;
pub mod broadcast;
pub mod linalg;
pub mod loss;
pub mod math;
pub mod norm;
pub mod random;
pub mod reduce;
pub mod shape;
