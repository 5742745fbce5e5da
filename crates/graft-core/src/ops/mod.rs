//! Every primitive of graft, one op family per file (a folder once a family
//! outgrows one file: `scan/`, `while_loop/`, `mathfn/`).
//!
//! A family file holds, for each of its primitives: the parameter type, the
//! [`Op`] impl (name, printed parameters, the shape rule `infer`, the
//! interpreter kernel), the builder entry point, and its rules for the two
//! other traits every primitive implements: [`crate::ad::Diff`] (JVP and
//! transpose) and [`crate::batch::Batch`] (vmap). None of the traits has
//! default rules, so a family that lacks one fails the build. What families
//! share lives beside them: `kernel.rs` (block loops, dtype dispatch, SIMD),
//! `monoid.rs` (combiners), `remat.rs` (the loops' rematerialisation policy).
//!
//! Adding a primitive: add it to its family file (or a new file) and, for a
//! new family, one line in `define_prims!` below. See docs/adding-a-primitive.md.

pub mod binary;
pub mod cast;
pub mod collective;
pub mod cond;
pub mod control;
pub mod conv;
pub mod create;
pub mod cumulative;
pub mod custom;
pub mod debug;
pub mod decomp;
pub mod fma;
pub mod index;
pub mod kernel;
pub mod linalg;
pub mod mathfn;
pub mod monoid;
pub mod random;
pub mod reduce;
pub mod remat;
pub mod scan;
pub mod shape;
pub mod sort;
pub(crate) mod tiles;
pub mod unary;
pub mod while_loop;
pub mod window;

use crate::error::{ExecError, TypeError};
use crate::ir::Func;
use crate::tensor::Tensor;
use crate::types::TensorType;
use std::fmt::Debug;
use std::sync::Arc;

/// Everything the compiler knows about a primitive.
///
/// Rule methods have no defaults: a family that lacks a rule fails the build.
pub trait Op: Debug + Clone + PartialEq {
    /// The primitive's name as printed (`exp`, `dot_general`, ...).
    fn name(&self) -> &'static str;
    /// Static parameters as printed inside `[...]`, e.g. `axes=(0,1)`; empty if none.
    fn params(&self) -> String;
    /// Output types from operand types. The only place shape and dtype rules live.
    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError>;
    /// Runs the primitive. `outs` are pre-sized tensors of the inferred types;
    /// their contents are unspecified on entry and must be fully written.
    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError>;
    /// Sub-functions held by this primitive (bodies of calls and control flow).
    fn subfuncs(&self) -> Vec<Arc<Func>> {
        Vec::new()
    }
}

/// Declares the closed set of primitive families and generates the `Prim`
/// enum with its `Op` dispatch and `From` conversions.
macro_rules! define_prims {
    ($( $(#[$doc:meta])* $variant:ident($ty:ty) ),* $(,)?) => {
        /// A primitive with its static parameters.
        #[derive(Debug, Clone, PartialEq)]
        pub enum Prim {
            $( $(#[$doc])* $variant($ty), )*
        }

        impl Op for Prim {
            fn name(&self) -> &'static str {
                match self { $( Prim::$variant(p) => p.name(), )* }
            }
            fn params(&self) -> String {
                match self { $( Prim::$variant(p) => p.params(), )* }
            }
            fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
                match self { $( Prim::$variant(p) => p.infer(ins), )* }
            }
            fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
                match self { $( Prim::$variant(p) => p.kernel(ins, outs), )* }
            }
            fn subfuncs(&self) -> Vec<Arc<Func>> {
                match self { $( Prim::$variant(p) => p.subfuncs(), )* }
            }
        }

        impl crate::ad::Diff for Prim {
            fn jvp(&self, b: &mut crate::ir::Builder, cx: &crate::ad::JvpCx<'_>) -> Result<Vec<Option<crate::ir::Value>>, crate::error::IrError> {
                match self { $( Prim::$variant(p) => p.jvp(b, cx), )* }
            }
            fn transpose(&self, b: &mut crate::ir::Builder, cx: &crate::ad::TransposeCx<'_>) -> Result<Vec<Option<crate::ir::Value>>, crate::error::IrError> {
                match self { $( Prim::$variant(p) => p.transpose(b, cx), )* }
            }
        }

        impl crate::batch::Batch for Prim {
            fn batch(&self, b: &mut crate::ir::Builder, cx: &crate::batch::BatchCx<'_>) -> Result<crate::batch::Batched, crate::error::IrError> {
                match self { $( Prim::$variant(p) => p.batch(b, cx), )* }
            }
        }

        impl Prim {
            /// Every family's variant name, in declaration order: the closed
            /// set that tests enumerate to check that their tables cover
            /// every primitive (`tests/all/prim_coverage.rs`).
            pub const FAMILIES: &'static [&'static str] = &[$( stringify!($variant), )*];

            /// This primitive's family: its variant name in [`Prim::FAMILIES`].
            pub fn family(&self) -> &'static str {
                match self { $( Prim::$variant(_) => stringify!($variant), )* }
            }
        }

        $( impl From<$ty> for Prim {
            fn from(p: $ty) -> Prim { Prim::$variant(p) }
        } )*
    };
}

define_prims! {
    /// Elementwise binary arithmetic and logic (add, max, and, ...).
    Binary(binary::Binary),
    /// Elementwise comparisons (eq, lt, ...), producing bool.
    Compare(binary::Compare),
    /// Elementwise choice between two operands by a bool predicate.
    Select(binary::Select),
    /// Fused multiply-add `a * b + c`, rounded once.
    Fma(fma::Fma),
    /// Dtype conversion.
    Convert(cast::Convert),
    /// Identity with a zero derivative.
    StopGradient(cast::StopGradient),
    /// Sub-function application.
    Call(control::Call),
    /// Run one of several branches by a run-time index.
    Cond(cond::Cond),
    /// Loop carrying a state through the leading axis of its inputs.
    Scan(scan::Scan),
    /// A call whose intermediates are recomputed in reverse mode.
    Checkpoint(control::Checkpoint),
    /// A function with a user JVP rule.
    CustomJvp(custom::CustomJvp),
    /// A function with user forward/backward functions.
    CustomVjp(custom::CustomVjp),
    /// The tangent map of a custom_vjp function (transposes to its bwd).
    CustomVjpTangent(custom::CustomVjpTangent),
    /// Slice at run-time start indices.
    DynamicSlice(index::DynamicSlice),
    /// Overwrite a block at run-time start indices.
    DynamicUpdateSlice(index::DynamicUpdateSlice),
    /// Gather slabs at index vectors.
    Gather(index::Gather),
    /// Collectives over a named axis (psum, all_gather, ppermute, ...).
    Collective(collective::Collective),
    /// Prints values while the program runs (the one primitive with an effect).
    DebugPrint(debug::DebugPrint),
    /// Threefry key derived from a key and an integer (`fold_in`).
    RandomFoldIn(random::RandomFoldIn),
    /// Threefry random bits.
    RandomBits(random::RandomBits),
    /// Threefry key splitting.
    RandomSplit(random::RandomSplit),
    /// Threefry uniform floats in [0, 1).
    RandomUniform(random::RandomUniform),
    /// Add updates at index vectors (gather's transpose).
    ScatterAdd(index::ScatterAdd),
    /// The stable sorting permutation along one axis (NaNs last).
    Argsort(sort::Argsort),
    /// Elementwise unary math (neg, exp, sin, ...).
    Unary(unary::Unary),
    /// `out[idx] = idx[axis]`.
    Iota(create::Iota),
    /// A literal tensor.
    Constant(create::Constant),
    /// Broadcast into a larger shape.
    BroadcastInDim(shape::BroadcastInDim),
    /// Same elements, new shape.
    Reshape(shape::Reshape),
    /// Permute dims.
    Transpose(shape::Transpose),
    /// Strided window.
    Slice(shape::Slice),
    /// Edge/interior padding (negative edges crop).
    Pad(shape::Pad),
    /// Join along an axis.
    Concatenate(shape::Concatenate),
    /// Flip axes.
    Reverse(shape::Reverse),
    /// General batched tensor contraction (XLA `DotGeneral`).
    DotGeneral(linalg::DotGeneral),
    /// Lower Cholesky factor of `[..., n, n]` (NaN where not positive definite).
    Cholesky(decomp::Cholesky),
    /// Solve a triangular system `op(A) X = B` or `X op(A) = B`.
    TriangularSolve(decomp::TriangularSolve),
    /// LU with partial pivoting: `(lu, pivots, permutation)`.
    Lu(decomp::Lu),
    /// Householder QR: `(q, r)`.
    Qr(decomp::Qr),
    /// Symmetric eigendecomposition: `(w, v)`, eigenvalues ascending.
    Eigh(decomp::Eigh),
    /// Singular value decomposition: `(u, s, vh)`, `s` descending.
    Svd(decomp::Svd),
    /// General N-d grouped, strided, padded, dilated convolution.
    ConvGeneral(conv::ConvGeneral),
    /// Reductions over axes (reduce_sum, reduce_max, ...).
    Reduce(reduce::Reduce),
    /// Index of the extreme along one axis (argmax, argmin).
    ArgReduce(reduce::ArgReduce),
    /// Inclusive scans along one axis (cumsum, cummax, ...).
    Cumulative(cumulative::Cumulative),
    /// Sliding-window reductions (pooling).
    ReduceWindow(window::ReduceWindow),
    /// A while loop over sub-functions (run-time trip count).
    While(while_loop::While),
    /// A while loop's tangent map `J v` (linear in `v`).
    WhileJvp(while_loop::WhileJvp),
    /// A while loop's pullback `J^T u` (linear in `u`; carry stack in the kernel).
    WhileVjp(while_loop::WhileVjp),
    /// A while loop's Hessian-vector map `H_u w`.
    WhileHvp(while_loop::WhileHvp),
}

/// The printed form of a primitive with its parameters: `name[params]`.
pub fn display_prim(op: &impl Op) -> String {
    let p = op.params();
    if p.is_empty() {
        op.name().to_string()
    } else {
        format!("{}[{}]", op.name(), p)
    }
}

/// Shape-rule helpers shared by the families.
pub mod check {
    use super::{display_prim, Op};
    use crate::error::TypeError;
    use crate::types::TensorType;

    /// A type error for `op` on `ins`.
    pub fn err(op: &impl Op, ins: &[TensorType], expected: impl Into<String>) -> TypeError {
        TypeError::new(display_prim(op), ins, expected)
    }

    /// Requires exactly `n` operands.
    pub fn arity(op: &impl Op, ins: &[TensorType], n: usize) -> Result<(), TypeError> {
        if ins.len() == n {
            Ok(())
        } else {
            Err(err(op, ins, format!("expected {n} operand{}", if n == 1 { "" } else { "s" })))
        }
    }

    /// Requires every operand to have the same shape and dtype as the first.
    pub fn same_types(op: &impl Op, ins: &[TensorType]) -> Result<(), TypeError> {
        if ins.iter().all(|t| t == &ins[0]) {
            Ok(())
        } else {
            Err(err(op, ins, "operands must have identical shapes and dtypes (broadcasting is explicit)"))
        }
    }

    /// Requires a floating-point dtype.
    pub fn float(op: &impl Op, ins: &[TensorType], t: &TensorType) -> Result<(), TypeError> {
        if t.dtype.is_float() {
            Ok(())
        } else {
            Err(err(op, ins, "expected a floating-point operand (f32 or f64)"))
        }
    }

    /// Requires every axis to be `< rank` and no axis repeated.
    pub fn axes(op: &impl Op, ins: &[TensorType], axes: &[usize], rank: usize) -> Result<(), TypeError> {
        for (i, &a) in axes.iter().enumerate() {
            if a >= rank {
                return Err(err(op, ins, format!("axis {a} is out of range for rank {rank}")));
            }
            if axes[..i].contains(&a) {
                return Err(err(op, ins, format!("axis {a} is repeated")));
            }
        }
        Ok(())
    }
}
