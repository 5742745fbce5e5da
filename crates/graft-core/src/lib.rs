//! graft-core: tensor types, the primitive IR (every primitive with its
//! shape rule, kernel and builder entry point), and the CPU executor.
//!
//! Data flow: build a [`ir::Func`] with [`ir::Builder`] (or the tracing API
//! of the `graft` crate), check it with [`ir::verify`], plan it into an
//! [`exec::Executable`], and run it on [`tensor::Tensor`]s.

pub mod ad;
pub mod alloc;
pub mod batch;
pub mod comm;
pub mod composite;
pub mod dtype;
pub mod eager;
pub mod error;
pub mod exec;
pub mod format;
#[doc(hidden)]
pub mod fuzzing;
pub mod ir;
pub mod jac;
pub mod kernel;
pub mod memory;
pub mod npy;
pub mod ops;
pub mod opt;
pub mod tensor;
pub mod transform;
pub mod types;

pub use dtype::DType;
pub use error::{ExecError, IrError, TypeError};
pub use exec::{compile_enabled, disable_compile, enable_compile, ExecOptions, Executable, Input, RunStats};
/// The `half` crate, whose `f16` is the element type of [`DType::F16`] tensors.
pub use half;
pub use ir::{Builder, Func, Value};
pub use ops::{Op, Prim};
pub use tensor::{Element, Tensor, TensorError};
pub use types::{Shape, TensorType};
