//! Kernel-IR forms of the indexing primitives: what the native loops and
//! the GPU backend render (see the comments below).

use super::*;

// Kernel-IR forms (what the native loops and the GPU backend render).
//
// A gather is one point per output element: the element's slab origin
// and run offset come from its position (`Inst::Position`: batch and
// slab coordinates times the operand's strides), each index component is
// loaded through a strided index, resolved under the mode (clamped; `Fill`
// also tests the range and selects 0), scaled by its axis stride and
// added, and the operand is read there (`Inst::LoadAt`). The same
// elements as `gather_kernel`, so the result is bitwise the interpreter's.
//
// scatter_add on a device: one *row* per operand element (a row kernel
// whose `Reduce` walks the positions of the element's batch), summing the
// updates whose index vector resolves to that element (others contribute
// 0) and adding the sum to the operand. Why this form: it is deterministic
// (every element sums its positions in the row kernel's fixed order,
// whatever the scheduling: no atomics, and no float atomics exist in
// WGSL anyway) and needs nothing the kernel IR lacks; a sort of the
// positions by target would do less work but needs a device sort. The
// price is work proportional to elements x positions per batch (fine for
// the gradients of cross-entropy labels, embedding lookups of a few
// thousand rows and `take`; [`SCATTER_ROWS_MAX`] bounds it), and float
// results that are not the interpreter's bits: the interpreter adds in
// position order onto the operand, the row sums pairwise and then adds
// (both are exact sums of the same terms up to rounding). So this form is
// for devices only; the CPU keeps `scatter_elements`.

/// Most `elements x positions` a device scatter_add visits (2^28); larger
/// ones run on the host.
pub const SCATTER_ROWS_MAX: usize = 1 << 28;

/// Row-major strides as `isize`.
fn istrides(shape: &[usize]) -> Vec<isize> {
    strides_of(shape).into_iter().map(|s| s as isize).collect()
}

/// The kernel of a gather equation (i32 indices, an operand of at most
/// `i32::MAX` elements) and the values its arguments bind to, or `None`.
pub(crate) fn gather_eqn_kernel(
    func: &crate::ir::Func,
    eqn: &crate::ir::Eqn,
    name: &str,
) -> Option<(crate::kernel::Kernel, Vec<Value>)> {
    use crate::kernel::ir::{Access, Arg, Index, Inst, Kernel, Lit, Reg};
    use crate::ops::binary::{Binary, Compare};
    let crate::ops::Prim::Gather(g) = &eqn.prim else { return None };
    let (&x, &idx, &out) = (eqn.inputs.first()?, eqn.inputs.get(1)?, eqn.outputs.first()?);
    let (xt, it, ot) = (func.ty(x), func.ty(idx), func.ty(out));
    let n = ot.numel();
    if it.dtype != DType::I32 || xt.numel() == 0 || n == 0 || xt.numel() > i32::MAX as usize {
        return None;
    }
    let bd = g.batch_dims;
    let ni_dims = it.rank() - 1 - bd;
    let (xs, is) = (istrides(&xt.shape), istrides(&it.shape));
    let rest: Vec<usize> = (bd..xt.rank()).filter(|d| !g.index_dims.contains(d)).collect();
    // Over the output's dims [B..., I..., R...].
    let mut base = Vec::with_capacity(ot.rank());
    let mut comp = Vec::with_capacity(ot.rank());
    for d in 0..bd {
        base.push(xs[d]);
        comp.push(is[d]);
    }
    for j in 0..ni_dims {
        base.push(0);
        comp.push(is[bd + j]);
    }
    for &d in &rest {
        base.push(xs[d]);
        comp.push(0);
    }
    let dims = ot.shape.clone();
    let args = vec![
        Arg { dtype: xt.dtype, len: xt.numel(), access: Access::Read },
        Arg { dtype: DType::I32, len: it.numel(), access: Access::Read },
        Arg { dtype: ot.dtype, len: n, access: Access::Write },
    ];
    let mut body: Vec<Inst> = Vec::new();
    let push = |body: &mut Vec<Inst>, i: Inst| {
        body.push(i);
        (body.len() - 1) as Reg
    };
    let i32lit = |v: i64| Inst::Lit(Lit { dtype: DType::I32, bits: v as u64 });
    let mut addr = push(&mut body, Inst::Position(Index::Strided { dims: dims.clone(), strides: base, offset: 0 }));
    let zero = push(&mut body, i32lit(0));
    let mut inside: Option<Reg> = None;
    for (c, &d) in g.index_dims.iter().enumerate() {
        let index = Index::Strided { dims: dims.clone(), strides: comp.clone(), offset: c as isize };
        let raw = push(&mut body, Inst::Load { arg: 1, index });
        let top = push(&mut body, i32lit(xt.shape[d] as i64 - 1));
        let lo = push(&mut body, Inst::Binary(Binary::Max, raw, zero));
        let clamped = push(&mut body, Inst::Binary(Binary::Min, lo, top));
        if g.mode == IndexMode::Fill {
            let ok = push(&mut body, Inst::Compare(Compare::Eq, clamped, raw));
            inside = Some(match inside {
                None => ok,
                Some(a) => push(&mut body, Inst::Binary(Binary::And, a, ok)),
            });
        }
        let stride = push(&mut body, i32lit(xs[d] as i64));
        let off = push(&mut body, Inst::Binary(Binary::Mul, clamped, stride));
        addr = push(&mut body, Inst::Binary(Binary::Add, addr, off));
    }
    let mut value = push(&mut body, Inst::LoadAt { arg: 0, addr });
    if let Some(ok) = inside {
        let z = push(&mut body, Inst::Lit(Lit { dtype: xt.dtype, bits: 0 }));
        value = push(&mut body, Inst::Select(ok, value, z));
    }
    body.push(Inst::Store { arg: 2, value, index: Index::Point });
    let k = Kernel { name: name.to_string(), args, extent: n, body };
    crate::kernel::ir::verify(&k).ok()?;
    Some((k, vec![x, idx, out]))
}

/// The start of a dynamic slice along one dim, clamped into
/// `[0, top]` as the interpreter's `clamped_starts` does: `max(min(..))` of
/// the start argument `arg` (a rank-0 i32), pushed onto `body`.
fn clamped_start(body: &mut Vec<crate::kernel::ir::Inst>, arg: u32, top: usize) -> crate::kernel::ir::Reg {
    use crate::kernel::ir::{Index, Inst, Lit};
    use crate::ops::binary::Binary;
    let mut push = |i: Inst| {
        body.push(i);
        (body.len() - 1) as crate::kernel::ir::Reg
    };
    let raw = push(Inst::Load { arg, index: Index::Scalar });
    let zero = push(Inst::Lit(Lit { dtype: DType::I32, bits: 0 }));
    let hi = push(Inst::Lit(Lit { dtype: DType::I32, bits: top as u64 }));
    let lo = push(Inst::Binary(Binary::Max, raw, zero));
    push(Inst::Binary(Binary::Min, lo, hi))
}

/// Whether a dynamic slice's operands fit its kernel form: i32 starts and
/// an operand whose addresses fit an `i32`.
fn i32_starts(func: &crate::ir::Func, x: Value, starts: &[Value]) -> bool {
    func.ty(x).numel() <= i32::MAX as usize && starts.iter().all(|&s| func.ty(s).dtype == DType::I32)
}

/// The kernel of a `dynamic_slice` equation with i32 starts: one point per
/// output element, reading the operand (`Inst::LoadAt`) at the point's
/// coordinates times the operand's strides plus each dim's clamped start
/// times its stride. A copy, so bitwise the interpreter's. `None` for i64
/// starts or an operand past `i32` addresses.
pub(crate) fn dynamic_slice_eqn_kernel(
    func: &crate::ir::Func,
    eqn: &crate::ir::Eqn,
    name: &str,
) -> Option<(crate::kernel::Kernel, Vec<Value>)> {
    use crate::kernel::ir::{Access, Arg, Index, Inst, Kernel, Lit, Reg};
    use crate::ops::binary::Binary;
    let crate::ops::Prim::DynamicSlice(p) = &eqn.prim else { return None };
    let (&x, &out) = (eqn.inputs.first()?, eqn.outputs.first()?);
    let starts = &eqn.inputs[1..];
    let (xt, ot) = (func.ty(x), func.ty(out));
    let n = ot.numel();
    if n == 0 || !i32_starts(func, x, starts) || starts.len() != xt.rank() || p.sizes.len() != xt.rank() {
        return None;
    }
    let xs = istrides(&xt.shape);
    let mut args = vec![Arg { dtype: xt.dtype, len: xt.numel(), access: Access::Read }];
    args.extend(starts.iter().map(|_| Arg { dtype: DType::I32, len: 1, access: Access::Read }));
    let out_arg = args.len() as u32;
    args.push(Arg { dtype: ot.dtype, len: n, access: Access::Write });
    let mut body = vec![Inst::Position(Index::Strided { dims: ot.shape.clone(), strides: xs.clone(), offset: 0 })];
    let mut addr: Reg = 0;
    for d in 0..xt.rank() {
        let start = clamped_start(&mut body, 1 + d as u32, xt.shape[d] - p.sizes[d]);
        body.push(Inst::Lit(Lit { dtype: DType::I32, bits: xs[d] as u64 }));
        body.push(Inst::Binary(Binary::Mul, start, (body.len() - 1) as Reg));
        body.push(Inst::Binary(Binary::Add, addr, (body.len() - 1) as Reg));
        addr = (body.len() - 1) as Reg;
    }
    body.push(Inst::LoadAt { arg: 0, addr });
    body.push(Inst::Store { arg: out_arg, value: (body.len() - 1) as Reg, index: Index::Point });
    let k = Kernel { name: name.to_string(), args, extent: n, body };
    crate::kernel::ir::verify(&k).ok()?;
    let mut binds = eqn.inputs.clone();
    binds.push(out);
    Some((k, binds))
}

/// The kernel of a `dynamic_update_slice` equation with i32 starts: one
/// point per operand element, which reads the update (`Inst::LoadAt`, at
/// its coordinates less the clamped starts) where it lies inside the
/// update's block and the operand elsewhere. Copies, so bitwise the
/// interpreter's. `None` for i64 starts or an operand past `i32` addresses.
pub(crate) fn dynamic_update_eqn_kernel(
    func: &crate::ir::Func,
    eqn: &crate::ir::Eqn,
    name: &str,
) -> Option<(crate::kernel::Kernel, Vec<Value>)> {
    use crate::kernel::ir::{Access, Arg, Index, Inst, Kernel, Lit, Reg};
    use crate::ops::binary::{Binary, Compare};
    let crate::ops::Prim::DynamicUpdateSlice(_) = &eqn.prim else { return None };
    let (&x, &upd, &out) = (eqn.inputs.first()?, eqn.inputs.get(1)?, eqn.outputs.first()?);
    let starts = &eqn.inputs[2..];
    let (xt, ut) = (func.ty(x), func.ty(upd));
    let n = xt.numel();
    if n == 0 || !i32_starts(func, x, starts) || starts.len() != xt.rank() || ut.rank() != xt.rank() {
        return None;
    }
    let us = istrides(&ut.shape);
    let mut args = vec![
        Arg { dtype: xt.dtype, len: n, access: Access::Read },
        Arg { dtype: ut.dtype, len: ut.numel(), access: Access::Read },
    ];
    args.extend(starts.iter().map(|_| Arg { dtype: DType::I32, len: 1, access: Access::Read }));
    let out_arg = args.len() as u32;
    args.push(Arg { dtype: xt.dtype, len: n, access: Access::Write });
    let mut body: Vec<Inst> = Vec::new();
    let push = |body: &mut Vec<Inst>, i: Inst| {
        body.push(i);
        (body.len() - 1) as Reg
    };
    let i32lit = |v: usize| Inst::Lit(Lit { dtype: DType::I32, bits: v as u64 });
    let mut addr = push(&mut body, i32lit(0));
    let zero = addr;
    let mut inside: Option<Reg> = None;
    for d in 0..xt.rank() {
        let mut unit = vec![0isize; xt.rank()];
        unit[d] = 1;
        let coord =
            push(&mut body, Inst::Position(Index::Strided { dims: xt.shape.clone(), strides: unit, offset: 0 }));
        let start = clamped_start(&mut body, 2 + d as u32, xt.shape[d] - ut.shape[d]);
        let q = push(&mut body, Inst::Binary(Binary::Sub, coord, start));
        let size = push(&mut body, i32lit(ut.shape[d]));
        let ge = push(&mut body, Inst::Compare(Compare::Ge, q, zero));
        let lt = push(&mut body, Inst::Compare(Compare::Lt, q, size));
        let ok = push(&mut body, Inst::Binary(Binary::And, ge, lt));
        inside = Some(match inside {
            None => ok,
            Some(a) => push(&mut body, Inst::Binary(Binary::And, a, ok)),
        });
        let stride = push(&mut body, i32lit(us[d] as usize));
        let off = push(&mut body, Inst::Binary(Binary::Mul, q, stride));
        addr = push(&mut body, Inst::Binary(Binary::Add, addr, off));
    }
    let old = push(&mut body, Inst::Load { arg: 0, index: Index::Point });
    let value = match inside {
        // Rank 0: the update is the whole result.
        None => push(&mut body, Inst::LoadAt { arg: 1, addr }),
        Some(ok) if ut.numel() > 0 => {
            let new = push(&mut body, Inst::LoadAt { arg: 1, addr });
            push(&mut body, Inst::Select(ok, new, old))
        }
        Some(_) => old,
    };
    body.push(Inst::Store { arg: out_arg, value, index: Index::Point });
    let k = Kernel { name: name.to_string(), args, extent: n, body };
    crate::kernel::ir::verify(&k).ok()?;
    let mut binds = eqn.inputs.clone();
    binds.push(out);
    Some((k, binds))
}

/// The device form of an f32 or i32 scatter_add equation (see the comment
/// above: one row per operand element; not the interpreter's bits for f32,
/// exactly them for i32, whose wrapping sums do not depend on the order)
/// and the values its arguments bind to, or `None` (64-bit data, i64
/// indices, nothing to add, more than [`SCATTER_ROWS_MAX`] element-position
/// pairs).
pub fn scatter_add_device_kernel(
    func: &crate::ir::Func,
    eqn: &crate::ir::Eqn,
    name: &str,
) -> Option<(crate::kernel::Kernel, Vec<Value>)> {
    use crate::kernel::ir::{Access, Arg, Index, Inner, Inst, Kernel, Lit, Reduction, Reg};
    use crate::ops::binary::{Binary, Compare};
    use crate::ops::reduce::ReduceKind;
    let crate::ops::Prim::ScatterAdd(g) = &eqn.prim else { return None };
    let (&x, &idx, &upd, &out) = (eqn.inputs.first()?, eqn.inputs.get(1)?, eqn.inputs.get(2)?, eqn.outputs.first()?);
    let (xt, it, ut) = (func.ty(x), func.ty(idx), func.ty(upd));
    let bd = g.batch_dims;
    let ni: usize = it.shape[bd..it.rank() - 1].iter().product();
    let rows = xt.numel();
    // i32 and u32 sums wrap on the device as in the interpreter: any order
    // gives its bits.
    let dt = xt.dtype;
    if !matches!(dt, DType::F32 | DType::I32 | DType::U32) || it.dtype != DType::I32 || rows == 0 || ni == 0 {
        return None;
    }
    if rows.checked_mul(ni)? > SCATTER_ROWS_MAX {
        return None;
    }
    let kc = g.index_dims.len();
    let slab: usize = ut.shape[it.rank() - 1..].iter().product();
    let (is, us) = (istrides(&it.shape), istrides(&ut.shape));
    // Inner points over [S..., ni]: the row's operand coordinates, then the position.
    let mut dims = xt.shape.clone();
    dims.push(ni);
    let mut comp = vec![0isize; dims.len()];
    let mut ustr = vec![0isize; dims.len()];
    comp[..bd].copy_from_slice(&is[..bd]);
    ustr[..bd].copy_from_slice(&us[..bd]);
    comp[xt.rank()] = kc as isize;
    ustr[xt.rank()] = slab as isize;
    let nidims = it.rank() - 1 - bd;
    for (j, d) in (bd..xt.rank()).filter(|d| !g.index_dims.contains(d)).enumerate() {
        ustr[d] = us[bd + nidims + j];
    }
    let mut inner: Vec<Inst> = Vec::new();
    let push = |body: &mut Vec<Inst>, i: Inst| {
        body.push(i);
        (body.len() - 1) as Reg
    };
    let i32lit = |v: i64| Inst::Lit(Lit { dtype: DType::I32, bits: v as u64 });
    let zero = push(&mut inner, i32lit(0));
    let mut hit: Option<Reg> = None;
    for (c, &d) in g.index_dims.iter().enumerate() {
        let raw = push(
            &mut inner,
            Inst::Load {
                arg: 1,
                index: Index::Strided { dims: dims.clone(), strides: comp.clone(), offset: c as isize },
            },
        );
        let mut unit = vec![0isize; dims.len()];
        unit[d] = 1;
        let coord = push(&mut inner, Inst::Position(Index::Strided { dims: dims.clone(), strides: unit, offset: 0 }));
        // Fill: only an in-range index equals a coordinate; Clip: the clamped one.
        let target = match g.mode {
            IndexMode::Fill => raw,
            IndexMode::Clip => {
                let top = push(&mut inner, i32lit(xt.shape[d] as i64 - 1));
                let lo = push(&mut inner, Inst::Binary(Binary::Max, raw, zero));
                push(&mut inner, Inst::Binary(Binary::Min, lo, top))
            }
        };
        let h = push(&mut inner, Inst::Compare(Compare::Eq, target, coord));
        hit = Some(match hit {
            None => h,
            Some(a) => push(&mut inner, Inst::Binary(Binary::And, a, h)),
        });
    }
    let u =
        push(&mut inner, Inst::Load { arg: 2, index: Index::Strided { dims: dims.clone(), strides: ustr, offset: 0 } });
    let value = match hit {
        Some(h) => {
            let z = push(&mut inner, Inst::Lit(Lit { dtype: dt, bits: 0 }));
            push(&mut inner, Inst::Select(h, u, z))
        }
        None => u,
    };
    let body = vec![
        Inst::Reduce(Box::new(Reduction { kind: ReduceKind::Sum, inner: Inner { len: ni, body: inner }, value })),
        Inst::Load { arg: 0, index: Index::Point },
        Inst::Binary(Binary::Add, 1, 0),
        Inst::Store { arg: 3, value: 2, index: Index::Point },
    ];
    let args = vec![
        Arg { dtype: dt, len: rows, access: Access::Read },
        Arg { dtype: DType::I32, len: it.numel(), access: Access::Read },
        Arg { dtype: dt, len: ut.numel(), access: Access::Read },
        Arg { dtype: dt, len: rows, access: Access::Write },
    ];
    let k = Kernel { name: name.to_string(), args, extent: rows, body };
    crate::kernel::ir::verify(&k).ok()?;
    Some((k, vec![x, idx, upd, out]))
}
