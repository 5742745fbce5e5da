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
//!
//! The traced API follows jax.numpy / PyTorch names: methods on [`Tr`]
//! (`sum`, `mean`, `softmax`, `matmul`, `reshape`, `relu`, ...; axes may be
//! negative, `()`/`None` means all axes), multi-input functions in [`ops`]
//! (`concat`, `stack`, `einsum`, ...), layers and losses in [`nn`], and
//! explicit-key random numbers in [`random`]; layers and models with named
//! parameters in [`module`]. All of them expand to
//! primitives through [`composite`], so every transform applies:
//!
//! ```
//! use graft::{jit_n, nn, Tensor, Wrt};
//! // A linear classifier's loss and its gradient with respect to the weight.
//! let loss = jit_n("loss", |v| nn::cross_entropy(&nn::linear(&v[0], &v[1], None), &v[2], -1));
//! let x = Tensor::from_vec(vec![2, 3], vec![1.0f64, 0.0, -1.0, 0.5, 2.0, 0.0]).unwrap();
//! let w = Tensor::from_vec(vec![4, 3], vec![0.1f64; 12]).unwrap();
//! let labels = Tensor::from_vec(vec![2], vec![3i32, 0]).unwrap();
//! let l = loss.call(&[&x, &w, &labels]).unwrap();
//! // Equal weights give equal logits: the loss is log(4 classes).
//! assert!((l[0].to_scalar_f64().unwrap() - 4f64.ln()).abs() < 1e-12);
//! let g = loss.grad(Wrt::Positions(vec![1])).call(&[&x, &w, &labels]).unwrap();
//! assert_eq!(g[0].shape(), &[4, 3]);
//! ```

mod error;
mod function;
pub mod module;
pub mod nn;
mod nn_layers;
pub mod optim;
pub mod random;
mod tr_collective;
mod tr_control;
mod tr_linalg;
mod tr_math;
mod tr_reduce;
mod tr_shape;
mod trace;

/// Convolution, pooling, embedding and dropout layers (PyTorch names and
/// layouts); also re-exported from [`nn`].
pub mod layers {
    pub use crate::nn_layers::*;
}

/// Multi-input array functions with NumPy names: `concat`, `stack`,
/// `where_`, `matmul`, `einsum`; structured control flow (`scan`, `fori`,
/// `cond`, `switch`) over traced closures.
pub mod ops {
    pub use crate::tr_collective::{all_gather, axis_index, pmax, pmean, pmin, ppermute, psum, reduce_scatter};
    pub use crate::tr_control::{cond, debug_print, fori, scan, switch, while_loop};
    pub use crate::tr_linalg::{einsum, matmul};
    pub use crate::tr_shape::{concat, stack, where_};
    pub use graft_core::ops::collective::Axis;
    pub use graft_core::ops::debug::capture_prints;
    pub use graft_core::ops::remat::Remat;
    pub use graft_core::ops::scan::ScanOpts;
}

pub use error::Error;
pub use function::{compile, compile_shapeless, jit, jit_n, signature, Compiled, Jit, Pullback};
#[cfg(feature = "gpu")]
pub use function::{compile_on, Device};
pub use graft_core::ad;
pub use graft_core::ad::Wrt;
/// The global allocator graft's own binaries use (large buffers on cache
/// lines, for the kernels' vector loads); a program opts in with
/// `#[global_allocator] static A: graft::CacheAligned = graft::CacheAligned;`.
pub use graft_core::alloc::CacheAligned;
pub use graft_core::comm;
pub use graft_core::composite;
pub use graft_core::npy;
pub use graft_core::transform::{self, Kind as TransformKind, Policy, Transform, VmapAxes};
pub use graft_core::{
    compile_enabled, disable_compile, enable_compile, Builder, DType, Element, ExecError, Executable, Func, IrError,
    RunStats, Tensor, TensorType, Value,
};
pub use trace::{trace, Axes, IntoOutputs, Tr};
