//! `argsort`: the stable sorting permutation along one axis.
//!
//! `argsort(x, axis)` has `x`'s shape and an integer dtype; along `axis`,
//! entry `j` is the index (into that axis) of the `j`-th smallest element.
//! The sort is stable (equal elements keep their order) and orders floats
//! like NumPy: NaNs last (in their original order), `-0.0` equal to `0.0`.
//! Sorted values are a gather of `x` at the permutation
//! ([`crate::composite::sort::sort`]), so their derivative is the gather's
//! (each element's tangent moves with it); the permutation itself is an
//! integer result with no tangent.

use super::kernel::{output, unsupported, worth_parallel};
use super::monoid::split_at_axis;
use super::{check, Op};
use crate::dtype::DType;
use crate::error::{ExecError, IrError, TypeError};
use crate::ir::{Builder, Value};
use crate::tensor::{Element, Tensor};
use crate::types::TensorType;
use num_traits::AsPrimitive;
use rayon::prelude::*;
use std::cmp::Ordering;

/// The stable ascending sorting permutation along `axis` (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Argsort {
    /// The axis sorted along.
    pub axis: usize,
    /// Output dtype: i32 or i64.
    pub index_dtype: DType,
}

/// NumPy's sort order: NaN after every number, otherwise `<` (so `-0.0`
/// and `0.0` compare equal and keep their order in a stable sort).
trait SortKey: Element {
    fn order(a: Self, b: Self) -> Ordering;
}

impl SortKey for f32 {
    fn order(a: f32, b: f32) -> Ordering {
        match (a.is_nan(), b.is_nan()) {
            (false, false) => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
            (a_nan, b_nan) => a_nan.cmp(&b_nan),
        }
    }
}

impl SortKey for f64 {
    fn order(a: f64, b: f64) -> Ordering {
        match (a.is_nan(), b.is_nan()) {
            (false, false) => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
            (a_nan, b_nan) => a_nan.cmp(&b_nan),
        }
    }
}

impl SortKey for i32 {
    fn order(a: i32, b: i32) -> Ordering {
        a.cmp(&b)
    }
}

impl SortKey for i64 {
    fn order(a: i64, b: i64) -> Ordering {
        a.cmp(&b)
    }
}

/// Sorts every line along the middle dim of `(outer, n, inner)`; line `l`
/// (= `o * inner + i`) writes its permutation into `out` at the same strided
/// positions it reads.
fn argsort_kernel<T: SortKey, I: Element + Copy + Send + Sync + 'static>(
    x: &[T],
    (outer, n, inner): (usize, usize, usize),
    out: &mut [I],
) where
    usize: AsPrimitive<I>,
{
    if out.is_empty() {
        return;
    }
    let line = |l: usize, perm: &mut Vec<usize>| {
        let (o, i) = (l / inner, l % inner);
        let base = o * n * inner + i;
        perm.clear();
        perm.extend(0..n);
        perm.sort_by(|&a, &b| T::order(x[base + a * inner], x[base + b * inner]));
    };
    if inner == 1 {
        // Contiguous lines: one output chunk per line, in parallel when large.
        let run = |(o, chunk): (usize, &mut [I])| {
            let mut perm = Vec::with_capacity(n);
            line(o, &mut perm);
            for (c, &p) in chunk.iter_mut().zip(&perm) {
                *c = p.as_();
            }
        };
        if worth_parallel(out.len()) && outer > 1 {
            out.par_chunks_mut(n).enumerate().for_each(run);
        } else {
            out.chunks_mut(n).enumerate().for_each(run);
        }
        return;
    }
    let mut perm = Vec::with_capacity(n);
    for l in 0..outer * inner {
        line(l, &mut perm);
        let (o, i) = (l / inner, l % inner);
        let base = o * n * inner + i;
        for (j, &p) in perm.iter().enumerate() {
            out[base + j * inner] = p.as_();
        }
    }
}

impl Op for Argsort {
    fn name(&self) -> &'static str {
        "argsort"
    }

    fn params(&self) -> String {
        format!("axis={}, index_dtype={}", self.axis, self.index_dtype)
    }

    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        check::arity(self, ins, 1)?;
        let x = &ins[0];
        if !x.dtype.is_numeric() {
            return Err(check::err(self, ins, "expected a numeric operand (not bool)"));
        }
        if !self.index_dtype.is_int() {
            return Err(check::err(self, ins, "expected index_dtype i32 or i64"));
        }
        if self.axis >= x.rank() {
            return Err(check::err(self, ins, format!("axis {} is out of range for rank {}", self.axis, x.rank())));
        }
        if self.index_dtype == DType::I32 && x.shape[self.axis] > i32::MAX as usize {
            return Err(check::err(self, ins, format!("axis {} is too long for i32 indices; use i64", self.axis)));
        }
        Ok(vec![TensorType::new(self.index_dtype, x.shape.clone())])
    }

    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        let x = ins[0];
        if self.axis >= x.rank() {
            return Err(ExecError::kernel(self.name(), "axis out of range"));
        }
        let dims = split_at_axis(x.shape(), self.axis);
        fn go<T: SortKey>(
            op: &Argsort,
            x: &Tensor,
            dims: (usize, usize, usize),
            y: &mut Tensor,
        ) -> Result<(), ExecError> {
            let xs = super::kernel::input::<T>(x)?;
            match op.index_dtype {
                DType::I32 => argsort_kernel::<T, i32>(xs, dims, output::<i32>(y)?),
                DType::I64 => argsort_kernel::<T, i64>(xs, dims, output::<i64>(y)?),
                d => return Err(unsupported(op.name(), d)),
            }
            Ok(())
        }
        let y = &mut outs[0];
        match x.dtype() {
            DType::F32 => go::<f32>(self, x, dims, y),
            DType::F64 => go::<f64>(self, x, dims, y),
            DType::I32 => go::<i32>(self, x, dims, y),
            DType::I64 => go::<i64>(self, x, dims, y),
            d => Err(unsupported(self.name(), d)),
        }
    }
}

impl Builder {
    /// The stable ascending sorting permutation of `x` along `axis` (NaNs last).
    pub fn argsort(&mut self, x: Value, axis: usize, index_dtype: DType) -> Result<Value, IrError> {
        self.emit1(Argsort { axis, index_dtype }, &[x])
    }
}

// ---------------------------------------------------------------------------
// The device form
// ---------------------------------------------------------------------------

/// `argsort` along one axis as two row kernels with one row per element,
/// over that element's line: `rank` counts the elements that sort before
/// it (NumPy's order: NaN after every number, `-0.0` equal to `0.0`, equal
/// elements in position order, so the ranks are a permutation), and
/// `invert` finds, for each output position `p`, the element of rank `p`
/// (an i32 max over `select(rank == p, j, -1)`). Quadratic in the line
/// length (bounded by [`LINE_WORK_MAX`](crate::kernel::lines::LINE_WORK_MAX)) but exact: the permutation is
/// the host's stable sort's, bitwise. `None` for f64, i64 or bool data,
/// i64 indices, empty results or lines, and work beyond the bound.
pub fn argsort_device_kernels(
    f: &crate::ir::Func,
    a: &Argsort,
    x: Value,
    out: Value,
    e: usize,
) -> Option<(crate::kernel::Kernel, crate::kernel::Kernel)> {
    use crate::kernel::lines::{LineIndex, LINE_WORK_MAX};
    use crate::kernel::{Access, Arg, Index, Inner, Inst, Kernel, Lit, Reduction};
    use crate::ops::binary::{Binary, Compare};
    use crate::ops::reduce::ReduceKind;
    let xt = f.ty(x);
    if !matches!(xt.dtype, DType::F32 | DType::I32) || a.index_dtype != DType::I32 {
        return None;
    }
    let (n, len) = (xt.numel(), *xt.shape.get(a.axis)?);
    if n == 0 || len == 0 || n.checked_mul(len)? > LINE_WORK_MAX || len > i32::MAX as usize {
        return None;
    }
    let at = LineIndex::new(&xt.shape, a.axis, len);
    let lit = |v: i64| Inst::Lit(Lit { dtype: DType::I32, bits: v as u64 });
    // rank: the outer body loads the element itself; the inner one compares.
    let mut inner = vec![
        Inst::Load { arg: 0, index: at.line.clone() }, // 0: x_j
        Inst::Outer(0),                                // 1: x_i
        Inst::Compare(Compare::Lt, 0, 1),              // 2
        Inst::Compare(Compare::Eq, 0, 1),              // 3
    ];
    let (lt, eq) = if xt.dtype == DType::F32 {
        // NaN on the bits: x_j < x_i also when only x_i is NaN; equal
        // also when both are.
        let nan = crate::kernel::lines::push_nan_tests(&mut inner, &[0, 1]); // x_j, x_i
        let (nj, ni) = (nan[0], nan[1]);
        let b = inner.len() as u32;
        inner.extend([
            Inst::Unary(crate::ops::unary::Unary::Not, nj), // b
            Inst::Binary(Binary::And, b, ni),               // b + 1: number before NaN
            Inst::Binary(Binary::Or, 2, b + 1),             // b + 2
            Inst::Binary(Binary::And, nj, ni),              // b + 3: both NaN
            Inst::Binary(Binary::Or, 3, b + 3),             // b + 4
        ]);
        (b + 2, b + 4)
    } else {
        (2, 3)
    };
    let j = inner.len() as u32;
    inner.extend([
        Inst::Position(at.j.clone()),         // j
        Inst::Position(at.own.clone()),       // k (the element's own position)
        Inst::Compare(Compare::Lt, j, j + 1), // j < k
        Inst::Binary(Binary::And, eq, j + 2), // equal and earlier
        Inst::Binary(Binary::Or, lt, j + 3),  // sorts before
        lit(1),
        lit(0),
        Inst::Select(j + 4, j + 5, j + 6),
    ]);
    let value = j + 7;
    let rank = Kernel {
        name: format!("sr{e}"),
        args: vec![
            Arg { dtype: xt.dtype, len: n, access: Access::Read },
            Arg { dtype: DType::I32, len: n, access: Access::Write },
        ],
        extent: n,
        body: vec![
            Inst::Load { arg: 0, index: Index::Point },
            Inst::Reduce(Box::new(Reduction { kind: ReduceKind::Sum, inner: Inner { len, body: inner }, value })),
            Inst::Store { arg: 1, value: 1, index: Index::Point },
        ],
    };
    // invert: the line position whose rank is this output's position.
    let inner = vec![
        Inst::Load { arg: 0, index: at.line.clone() }, // 0: rank_j
        Inst::Position(at.own.clone()),                // 1: p
        Inst::Compare(Compare::Eq, 0, 1),              // 2
        Inst::Position(at.j.clone()),                  // 3: j
        lit(-1),                                       // 4
        Inst::Select(2, 3, 4),                         // 5
    ];
    let invert = Kernel {
        name: format!("si{e}"),
        args: vec![
            Arg { dtype: DType::I32, len: n, access: Access::Read },
            Arg { dtype: DType::I32, len: f.ty(out).numel(), access: Access::Write },
        ],
        extent: n,
        body: vec![
            Inst::Reduce(Box::new(Reduction { kind: ReduceKind::Max, inner: Inner { len, body: inner }, value: 5 })),
            Inst::Store { arg: 1, value: 0, index: Index::Point },
        ],
    };
    crate::kernel::verify(&rank).ok()?;
    crate::kernel::verify(&invert).ok()?;
    Some((rank, invert))
}

mod diff {
    use super::*;
    use crate::ad::{Diff, JvpCx, TransposeCx};

    impl Diff for Argsort {
        // An index result carries no tangent.
        fn jvp(&self, _b: &mut Builder, _cx: &JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
            Ok(vec![None])
        }
        fn transpose(&self, _b: &mut Builder, _cx: &TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
            Err(crate::ad::not_linear(self.name()))
        }
    }
}

// The sorted axis shifts past the batch dim, which passes through (the
// result has the operand's shape, so its batch dim is the operand's).
mod batching {
    use super::*;
    use crate::batch::helpers::phys_axis;
    use crate::batch::{Batch, BatchCx, Batched};

    impl Batch for Argsort {
        fn batch(&self, b: &mut Builder, cx: &BatchCx<'_>) -> Result<Batched, IrError> {
            let d = cx.bdims[0].expect("internal error: a one-operand batching rule runs only on a batched operand");
            let op = Argsort { axis: phys_axis(self.axis, d), ..self.clone() };
            Ok(vec![(b.emit1(op, &[cx.args[0]])?, Some(d))])
        }
    }
}
