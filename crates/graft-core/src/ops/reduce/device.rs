//! The device forms of reductions and index searches (for device backends,
//! through `Executable::device_plan`; the CPU has its own kernels in
//! `mod.rs` and the row planner's in `kernel::rows`).
//!
//! Both are row kernels of the kernel IR with one row per result element,
//! reading the reduced elements through a strided load over (kept dims,
//! reduced dims). They are the interpreter's bits where the combination
//! order cannot matter (max/min, i32 sums and products, which wrap, and
//! the index searches) and within the reduction tolerance for f32 sums and
//! products, which the device adds as a workgroup tree.

use crate::dtype::DType;
use crate::ir::{Eqn, Func, Value};
use crate::kernel::lines::row_major;
use crate::kernel::{Access, Arg, Index, Inner, Inst, Kernel, Reduction};
use crate::ops::Prim;

/// The device form of a `reduce_*`, `argmax` or `argmin` equation and the
/// values its arguments bind to (operand, result), or `None` (the equation
/// then runs on the host): dtypes other than f32 and i32 (bool only for
/// `reduce_max`/`reduce_min`, as 0/1 in f32), i64 indices, or nothing to
/// reduce.
pub fn device_kernel(func: &Func, eqn: &Eqn, name: &str) -> Option<(Kernel, Vec<Value>)> {
    let (&x, &out) = (eqn.inputs.first()?, eqn.outputs.first()?);
    if eqn.inputs.len() != 1 || eqn.outputs.len() != 1 {
        return None;
    }
    let k = match &eqn.prim {
        Prim::Reduce(r) => reduce_kernel(func, r, x, out, name)?,
        Prim::ArgReduce(a) => argreduce_kernel(func, a, x, out, name)?,
        _ => return None,
    };
    Some((k, vec![x, out]))
}

/// An f32 or i32 `reduce_*` equation (bool max/min as 0/1 in f32) as a
/// row kernel of the kernel IR: one row per result element, its points the
/// reduced elements, read through a strided index over (kept dims, reduced
/// dims).
fn reduce_kernel(f: &Func, r: &super::Reduce, x: Value, out: Value, name: &str) -> Option<Kernel> {
    use crate::ops::reduce::ReduceKind;
    let xt = f.ty(x);
    // Bools reduce by max (any) and min (all) as 0/1 in f32, exactly: how
    // a vmapped `while` combines its examples' predicates.
    let as_bool = xt.dtype == DType::Bool && matches!(r.kind, ReduceKind::Max | ReduceKind::Min);
    // f32, i32 and u32 reduce as they are (integer sums and products wrap,
    // as on the host).
    if !matches!(xt.dtype, DType::F32 | DType::I32 | DType::U32) && !as_bool {
        return None;
    }
    let shape = &xt.shape;
    let row = row_major(shape);
    let kept: Vec<usize> = (0..shape.len()).filter(|d| !r.axes.contains(d)).collect();
    let order: Vec<usize> = kept.iter().chain(&r.axes).copied().collect();
    let rows: usize = kept.iter().map(|&d| shape[d]).product();
    let len: usize = r.axes.iter().map(|&d| shape[d]).product();
    if rows == 0 || len == 0 {
        return None;
    }
    let dims: Vec<usize> = order.iter().map(|&d| shape[d]).collect();
    let strides: Vec<isize> = order.iter().map(|&d| row[d]).collect();
    let mut inner = vec![Inst::Load { arg: 0, index: Index::Strided { dims, strides, offset: 0 } }];
    if as_bool {
        inner.push(Inst::Convert(DType::F32, 0));
    }
    let reduced = inner.len() as u32 - 1;
    let inner = Inner { len, body: inner };
    let mut body = vec![Inst::Reduce(Box::new(Reduction { kind: r.kind, inner, value: reduced }))];
    if as_bool {
        body.push(Inst::Convert(DType::Bool, 0));
    }
    let value = body.len() as u32 - 1;
    body.push(Inst::Store { arg: 1, value, index: Index::Point });
    let k = Kernel {
        name: name.to_string(),
        args: vec![
            Arg { dtype: xt.dtype, len: xt.numel(), access: Access::Read },
            Arg { dtype: xt.dtype, len: f.ty(out).numel(), access: Access::Write },
        ],
        extent: rows,
        body,
    };
    crate::kernel::verify(&k).ok()?;
    Some(k)
}

/// `argmax`/`argmin` as a row kernel of two reductions over each row (the
/// searched axis, read through a strided load): the extreme `m` (NaN-
/// propagating max/min for f32, so a row with a NaN has `m` NaN), then the
/// least position `k` whose element equals `m` (or is NaN where `m` is) as an
/// i32 min over `select(hit, k, i32::MAX)`: the first occurrence, the first
/// NaN winning, as the interpreter defines it (`ops::reduce`), so the indices
/// are the host's exactly. `None` for other dtypes (i64 indices, f64 or
/// bool data) and empty rows.
fn argreduce_kernel(f: &Func, a: &super::ArgReduce, x: Value, out: Value, name: &str) -> Option<Kernel> {
    use crate::kernel::Lit;
    use crate::ops::binary::{Binary, Compare};
    use crate::ops::reduce::{ArgKind, ReduceKind};
    let xt = f.ty(x);
    if !matches!(xt.dtype, DType::F32 | DType::I32 | DType::U32) || a.index_dtype != DType::I32 {
        return None;
    }
    let shape = &xt.shape;
    let row = row_major(shape);
    let kept: Vec<usize> = (0..shape.len()).filter(|&d| d != a.axis).collect();
    let rows: usize = kept.iter().map(|&d| shape[d]).product();
    let len = *shape.get(a.axis)?;
    if rows == 0 || len == 0 || len > i32::MAX as usize {
        return None;
    }
    let order: Vec<usize> = kept.iter().copied().chain([a.axis]).collect();
    let dims: Vec<usize> = order.iter().map(|&d| shape[d]).collect();
    let strides: Vec<isize> = order.iter().map(|&d| row[d]).collect();
    let load = Inst::Load { arg: 0, index: Index::Strided { dims, strides, offset: 0 } };
    let kind = match a.kind {
        ArgKind::ArgMax => ReduceKind::Max,
        ArgKind::ArgMin => ReduceKind::Min,
    };
    let extreme = Reduction { kind, inner: Inner { len, body: vec![load.clone()] }, value: 0 };
    // The row's points are `i * len + k`: position `k` within the row.
    let k = Inst::Position(Index::Strided { dims: vec![rows, len], strides: vec![0, 1], offset: 0 });
    let never = Inst::Lit(Lit { dtype: DType::I32, bits: i32::MAX as u32 as u64 });
    let mut inner = vec![load, Inst::Outer(0), Inst::Compare(Compare::Eq, 0, 1)];
    if xt.dtype == DType::F32 {
        // A NaN matches a NaN extreme (NaN tested on the bits).
        let nan = crate::kernel::lines::push_nan_tests(&mut inner, &[0, 1]); // x, m
        let both = inner.len() as u32;
        inner.extend([Inst::Binary(Binary::And, nan[0], nan[1]), Inst::Binary(Binary::Or, 2, both)]);
    }
    let hit = inner.len() as u32 - 1;
    inner.extend([k, never]);
    let n = inner.len() as u32;
    inner.push(Inst::Select(hit, n - 2, n - 1));
    let first = Reduction { kind: ReduceKind::Min, inner: Inner { len, body: inner }, value: n };
    let body = vec![
        Inst::Reduce(Box::new(extreme)),
        Inst::Reduce(Box::new(first)),
        Inst::Store { arg: 1, value: 1, index: Index::Point },
    ];
    let k = Kernel {
        name: name.to_string(),
        args: vec![
            Arg { dtype: xt.dtype, len: xt.numel(), access: Access::Read },
            Arg { dtype: DType::I32, len: f.ty(out).numel(), access: Access::Write },
        ],
        extent: rows,
        body,
    };
    crate::kernel::verify(&k).ok()?;
    Some(k)
}
