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

impl SortKey for u32 {
    fn order(a: u32, b: u32) -> Ordering {
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
            DType::U32 => go::<u32>(self, x, dims, y),
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

/// The quadratic form's most element-position pairs
/// (`argsort_device_kernels`) before a device prefers the bitonic form
/// (`argsort_bitonic_kernels`): past it the quadratic work (a line of 4 096
/// ranks 4 096 elements each) costs more than the bitonic form's
/// `log2(len) (log2(len) + 1) / 2` passes, each one launch.
pub const QUADRATIC_PAIRS_MAX: usize = 1 << 24;

/// The bitonic form of a device `argsort` (Batcher's network: no
/// quadratic work, so lines of any length; see [`argsort_bitonic_kernels`]).
#[derive(Debug, Clone)]
pub struct BitonicArgsort {
    /// Writes every line, padded to a power of two, as sort keys and
    /// positions (arguments: `x`, keys, positions).
    pub init: crate::kernel::Kernel,
    /// One compare-exchange pass at run-time block size and distance
    /// (arguments: keys, positions, block size, distance (one i32 each),
    /// then the keys and positions it writes).
    pub pass: crate::kernel::Kernel,
    /// The permutation: each sorted line's first `len` positions, placed
    /// along the axis (arguments: positions, the result).
    pub finish: crate::kernel::Kernel,
    /// Each pass's block size and distance, in order.
    pub passes: Vec<(i32, i32)>,
    /// Elements of each temporary: the lines times their padded length.
    pub padded: usize,
}

/// `argsort` along one axis as a bitonic sorting network over
/// `(key, position)` pairs, for a device (it has no C form: the CPU's
/// merge sort is faster there).
///
/// The key is an i32 in the sort's order: an i32 element itself; for f32,
/// the bits with the magnitude flipped when the sign is set (so integer
/// order is float order), `-0.0` as `0`, every NaN as `i32::MAX` (after
/// `+inf`). Pairs compare by key, then position, a total order whose
/// ascending sequence is exactly the stable sort's (NaNs last in position
/// order, `-0.0` equal to `0.0`): the permutation is the host's, bitwise,
/// whatever order the network compares in. Lines are padded to a power of
/// two with key `i32::MAX` at positions past the line, which sort after
/// everything real (a NaN's position is smaller). Each pass runs one point
/// per padded element: it reads its partner at `point ^ distance` and
/// keeps the smaller pair when its block (of the pass's size) ascends and
/// it is the lower of the two, or descends and it is the upper, else the
/// larger. `None` for f64, i64 or bool data, i64 indices, empty results
/// or padded sizes past `i32` addresses.
pub fn argsort_bitonic_kernels(
    f: &crate::ir::Func,
    a: &Argsort,
    x: Value,
    out: Value,
    e: usize,
) -> Option<BitonicArgsort> {
    use crate::kernel::lines::row_major;
    use crate::kernel::{Access, Arg, Index, Inst, Kernel, Lit, Reg, Window, WordOp};
    use crate::ops::binary::{Binary, Compare};
    let xt = f.ty(x);
    if !matches!(xt.dtype, DType::F32 | DType::I32) || a.index_dtype != DType::I32 {
        return None;
    }
    let (n, len) = (xt.numel(), *xt.shape.get(a.axis)?);
    if n == 0 || len == 0 || f.ty(out).numel() != n {
        return None;
    }
    let p2 = len.checked_next_power_of_two()?;
    let padded = (n / len).checked_mul(p2)?;
    if padded > i32::MAX as usize {
        return None;
    }
    let lit = |v: i64| Inst::Lit(Lit { dtype: DType::I32, bits: v as u64 });
    let read = |dtype: DType, len: usize| Arg { dtype, len, access: Access::Read };
    let write = |len: usize| Arg { dtype: DType::I32, len, access: Access::Write };
    let xs = row_major(&xt.shape);
    // Padded lines: the dims other than the axis, then the padded axis.
    let mut dims: Vec<usize> = (0..xt.rank()).filter(|&d| d != a.axis).map(|d| xt.shape[d]).collect();
    let mut strides: Vec<isize> = (0..xt.rank()).filter(|&d| d != a.axis).map(|d| xs[d]).collect();
    dims.push(p2);
    strides.push(xs[a.axis]);
    let mut size = dims.clone();
    *size.last_mut()? = len;
    let window = Window { dims: dims.clone(), lo: vec![0; dims.len()], size, strides, offset: 0 };
    let mut along = vec![0isize; dims.len()];
    *along.last_mut()? = 1;

    // init: the key and the position of every padded point.
    let fill = match xt.dtype {
        DType::F32 => Inst::Lit(Lit { dtype: DType::F32, bits: u64::from(f32::NAN.to_bits()) }),
        _ => lit(i64::from(i32::MAX)),
    };
    let mut body = vec![fill, Inst::Window { arg: 0, window, fill: 0 }];
    let key: Reg = if xt.dtype == DType::F32 {
        body.extend([
            Inst::Bitcast(DType::I32, 1),     // 2: bits
            lit(0x7fff_ffff),                 // 3
            Inst::Binary(Binary::And, 2, 3),  // 4: magnitude
            lit(0x7f80_0000),                 // 5
            Inst::Compare(Compare::Gt, 4, 5), // 6: NaN
            lit(0),                           // 7
            Inst::Compare(Compare::Eq, 4, 7), // 8: a zero
            Inst::Compare(Compare::Lt, 2, 7), // 9: sign set
            Inst::Word(WordOp::Xor, 2, 3),    // 10: magnitude flipped
            Inst::Select(9, 10, 2),           // 11
            Inst::Select(8, 7, 11),           // 12
            lit(i64::from(i32::MAX)),         // 13
            Inst::Select(6, 13, 12),          // 14: the key
        ]);
        14
    } else {
        1
    };
    let pos = body.len() as Reg;
    body.push(Inst::Position(Index::Strided { dims: dims.clone(), strides: along, offset: 0 }));
    body.push(Inst::Store { arg: 1, value: key, index: Index::Point });
    body.push(Inst::Store { arg: 2, value: pos, index: Index::Point });
    let init = Kernel {
        name: format!("sb{e}"),
        args: vec![read(xt.dtype, n), write(padded), write(padded)],
        extent: padded,
        body,
    };

    // pass: compare-exchange with the partner at `point ^ distance`.
    let body = vec![
        Inst::Position(Index::Point),                // 0: p
        Inst::Load { arg: 2, index: Index::Scalar }, // 1: block size
        Inst::Load { arg: 3, index: Index::Scalar }, // 2: distance
        lit(p2 as i64 - 1),                          // 3
        Inst::Binary(Binary::And, 0, 3),             // 4: position in the line
        Inst::Word(WordOp::Xor, 0, 2),               // 5: the partner
        Inst::Load { arg: 0, index: Index::Point },  // 6: own key
        Inst::Load { arg: 1, index: Index::Point },  // 7: own position
        Inst::LoadAt { arg: 0, addr: 5 },            // 8: partner's key
        Inst::LoadAt { arg: 1, addr: 5 },            // 9: partner's position
        Inst::Compare(Compare::Lt, 6, 8),            // 10
        Inst::Compare(Compare::Eq, 6, 8),            // 11
        Inst::Compare(Compare::Lt, 7, 9),            // 12
        Inst::Binary(Binary::And, 11, 12),           // 13
        Inst::Binary(Binary::Or, 10, 13),            // 14: own pair is the smaller
        Inst::Binary(Binary::And, 0, 2),             // 15
        lit(0),                                      // 16
        Inst::Compare(Compare::Eq, 15, 16),          // 17: the lower of the two
        Inst::Binary(Binary::And, 4, 1),             // 18
        Inst::Compare(Compare::Eq, 18, 16),          // 19: the block ascends
        lit(1),                                      // 20
        Inst::Select(17, 20, 16),                    // 21
        Inst::Select(19, 20, 16),                    // 22
        Inst::Compare(Compare::Eq, 21, 22),          // 23: keeps the smaller
        Inst::Select(14, 20, 16),                    // 24
        Inst::Select(23, 20, 16),                    // 25
        Inst::Compare(Compare::Eq, 24, 25),          // 26: keeps its own pair
        Inst::Select(26, 6, 8),                      // 27
        Inst::Select(26, 7, 9),                      // 28
        Inst::Store { arg: 4, value: 27, index: Index::Point },
        Inst::Store { arg: 5, value: 28, index: Index::Point },
    ];
    let pass = Kernel {
        name: format!("sp{e}"),
        args: vec![
            read(DType::I32, padded),
            read(DType::I32, padded),
            read(DType::I32, 1),
            read(DType::I32, 1),
            write(padded),
            write(padded),
        ],
        extent: padded,
        body,
    };

    // finish: output element (.., j along the axis) reads its line's j-th position.
    let outer: Vec<usize> = (0..xt.rank()).filter(|&d| d != a.axis).map(|d| xt.shape[d]).collect();
    let os = row_major(&outer);
    let mut k = 0;
    let strides: Vec<isize> = (0..xt.rank())
        .map(|d| {
            if d == a.axis {
                1
            } else {
                k += 1;
                os[k - 1] * p2 as isize
            }
        })
        .collect();
    let finish = Kernel {
        name: format!("sf{e}"),
        args: vec![read(DType::I32, padded), write(n)],
        extent: n,
        body: vec![
            Inst::Load { arg: 0, index: Index::Strided { dims: xt.shape.clone(), strides, offset: 0 } },
            Inst::Store { arg: 1, value: 0, index: Index::Point },
        ],
    };
    let mut passes = Vec::new();
    let mut block = 2;
    while block <= p2 {
        let mut dist = block / 2;
        while dist >= 1 {
            passes.push((block as i32, dist as i32));
            dist /= 2;
        }
        block *= 2;
    }
    crate::kernel::verify(&init).ok()?;
    crate::kernel::verify(&pass).ok()?;
    crate::kernel::verify(&finish).ok()?;
    Some(BitonicArgsort { init, pass, finish, passes, padded })
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
