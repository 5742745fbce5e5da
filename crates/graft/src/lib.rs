//! graft: a differentiable-programming compiler for Rust.
//!
//! Programs over tensors are held as a typed SSA graph of primitives
//! ([`Func`]); this crate is the public Rust API over it. Two ways to build
//! graphs produce the same IR:
//!
//! - the explicit [`Builder`] with typed [`Value`] handles, and
//! - tracing a Rust closure over [`Tr`] handles with operator overloading.
//!
//! ```
//! use graft::{jit, Tensor};
//! let f = jit("f", |x| (x.sin() * x).sum(()));
//! let x = Tensor::vec1(&[0.0f64, 1.0, 2.0]);
//! let y = f.call(&[&x]).unwrap();
//! let expected: f64 = [0.0f64, 1.0, 2.0].iter().map(|v| v.sin() * v).sum();
//! assert!((y[0].to_scalar_f64().unwrap() - expected).abs() < 1e-12);
//! ```

mod error;
mod function;
pub mod nn;
pub mod random;
mod tr_linalg;
mod tr_math;
mod tr_reduce;
mod tr_shape;
mod trace;

/// Multi-input array functions with NumPy names: `concat`, `stack`,
/// `where_`, `matmul`, `einsum`.
pub mod ops {
    pub use crate::tr_linalg::{einsum, matmul};
    pub use crate::tr_shape::{concat, stack, where_};
}

pub use error::Error;
pub use function::{compile, jit, jit_n, Compiled, Jit, Pullback, Transform};
pub use graft_core::ad::Wrt;
pub use graft_core::composite;
pub use graft_core::npy;
pub use graft_core::{
    Builder, DType, Element, ExecError, Executable, Func, IrError, RunStats, Tensor, TensorType, Value,
};
pub use trace::{trace, Axes, IntoOutputs, Tr};
