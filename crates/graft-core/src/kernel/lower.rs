//! From the executor's plan to kernels: a fused group becomes one kernel.
//!
//! The group (see `exec::fuse`) already decided what runs together and
//! which values are materialised; lowering only translates: the group's
//! full-size inputs become point loads, its splat operands scalar loads
//! (or literals, when the planner folded them), member equations become ALU
//! instructions in schedule order, and materialised values become stores.
//! `stop_gradient` is the identity and emits nothing.

use super::ir::{Access, Arg, Index, Inst, Kernel, Lit, Reg};
use crate::exec::fuse::{strided_map, Group, Scalar};
use crate::ir::{Func, Value};
use crate::ops::binary::Binary;
use crate::ops::{Op, Prim};
use std::collections::HashMap;

/// The kernel of a fused group: arguments are the group's inputs, then its
/// run-time scalars (folded ones become literals), then its outputs.
/// `None` if a member has no kernel-IR form (nothing of the group then
/// runs natively; the interpreter runs it as before).
pub(crate) fn group_kernel(func: &Func, group: &Group, name: String) -> Option<Kernel> {
    let n = group.n();
    let mut args: Vec<Arg> = Vec::new();
    let mut body: Vec<Inst> = Vec::new();
    let mut reg: HashMap<Value, Reg> = HashMap::new();
    for (&v, &len) in group.inputs.iter().zip(&group.input_len) {
        args.push(Arg { dtype: func.ty(v).dtype, len, access: Access::Read });
    }
    // Scalars in the group's order; a run-time scalar is an argument.
    let mut scalar_src: Vec<Inst> = Vec::new();
    for s in &group.scalars {
        match s {
            Scalar::Value(v) => {
                args.push(Arg { dtype: func.ty(*v).dtype, len: func.ty(*v).numel(), access: Access::Read });
                scalar_src.push(Inst::Load { arg: (args.len() - 1) as u32, index: Index::Scalar });
            }
            Scalar::Folded(t) => scalar_src.push(Inst::Lit(Lit::of_tensor(t)?)),
        }
    }
    let first_out = args.len();
    for &v in &group.outputs {
        args.push(Arg { dtype: func.ty(v).dtype, len: n, access: Access::Write });
    }
    let mut lw = Lowering { func, group, body: &mut body, reg: &mut reg };
    // The splat sources, in the order the group numbered them.
    let mut scalar_of: HashMap<Value, usize> = HashMap::new();
    let mut scalar_reg: Vec<Option<Reg>> = vec![None; scalar_src.len()];
    for &e in group.eqns() {
        let eqn = &func.eqns[e];
        let out = *eqn.outputs.first()?;
        let splat = eqn.prim.name() == "broadcast_in_dim" && func.ty(eqn.inputs[0]).numel() == 1;
        let inst = match &eqn.prim {
            Prim::Unary(op) => Inst::Unary(*op, lw.operand(eqn.inputs[0])?),
            // f64 pow and atan2 have no prelude version (see `has_c_form`):
            // such groups stay interpreted.
            Prim::Binary(op) if !has_c_form(*op, func.ty(out).dtype) => return None,
            Prim::Binary(op) => Inst::Binary(*op, lw.operand(eqn.inputs[0])?, lw.operand(eqn.inputs[1])?),
            Prim::Compare(op) => Inst::Compare(*op, lw.operand(eqn.inputs[0])?, lw.operand(eqn.inputs[1])?),
            Prim::Select(_) => {
                Inst::Select(lw.operand(eqn.inputs[0])?, lw.operand(eqn.inputs[1])?, lw.operand(eqn.inputs[2])?)
            }
            Prim::Fma(_) => {
                Inst::Fma(lw.operand(eqn.inputs[0])?, lw.operand(eqn.inputs[1])?, lw.operand(eqn.inputs[2])?)
            }
            Prim::Convert(c) => Inst::Convert(c.dtype, lw.operand(eqn.inputs[0])?),
            Prim::StopGradient(_) | Prim::Reshape(_) => {
                let r = lw.operand(eqn.inputs[0])?;
                lw.reg.insert(out, r);
                continue;
            }
            _ if splat => {
                let src = eqn.inputs[0];
                let next = scalar_of.len();
                let s = *scalar_of.entry(src).or_insert(next);
                let r = match scalar_reg.get(s)? {
                    Some(r) => *r,
                    None => {
                        let r = lw.push(scalar_src.get(s)?.clone());
                        scalar_reg[s] = Some(r);
                        r
                    }
                };
                lw.reg.insert(out, r);
                continue;
            }
            _ => {
                // A layout member: a load through its strided map.
                let map = strided_map(func, eqn)?;
                let arg = group.inputs.iter().position(|w| *w == eqn.inputs[0])? as u32;
                Inst::Load { arg, index: Index::Strided { dims: map.dims, strides: map.strides, offset: map.offset } }
            }
        };
        let r = lw.push(inst);
        lw.reg.insert(out, r);
    }
    for (j, &v) in group.outputs.iter().enumerate() {
        let value = *reg.get(&v)?;
        body.push(Inst::Store { arg: (first_out + j) as u32, value, index: Index::Point });
    }
    let k = Kernel { name, args, extent: n, body };
    // A group the verifier rejects is a planner bug; run it interpreted.
    super::ir::verify(&k).ok()?;
    Some(k)
}

struct Lowering<'a> {
    func: &'a Func,
    group: &'a Group,
    body: &'a mut Vec<Inst>,
    reg: &'a mut HashMap<Value, Reg>,
}

impl Lowering<'_> {
    fn push(&mut self, i: Inst) -> Reg {
        self.body.push(i);
        (self.body.len() - 1) as Reg
    }

    /// The register of an operand: a member's result, or a point load of a
    /// full-size input (emitted at its first use).
    fn operand(&mut self, v: Value) -> Option<Reg> {
        if let Some(&r) = self.reg.get(&v) {
            return Some(r);
        }
        let k = self.group.inputs.iter().position(|w| *w == v)?;
        if self.func.ty(v).numel() != self.group.n() {
            return None;
        }
        let r = self.push(Inst::Load { arg: k as u32, index: Index::Point });
        self.reg.insert(v, r);
        Some(r)
    }
}

/// How a standalone equation (a plan step of its own) runs inside a
/// compiled loop body (see `kernel::loops`).
pub(crate) enum EqnLowering {
    /// Its result is its operand's buffer read as is (reshape,
    /// stop_gradient): no code.
    Alias,
    /// Kernels run in order, each with the values its arguments bind to
    /// (reads, then the result). Several kernels may write parts of the
    /// result (a concatenation writes one operand per kernel; a pad fills,
    /// then places its operand).
    Kernels(Vec<(Kernel, Vec<Value>)>),
}

/// Row-major strides of a shape.
/// Whether the binary op has a C prelude version computing the
/// interpreter's bits for `dtype`: all but f64 `atan2` and `pow`, whose
/// Rust kernels call std (`ops::binary`). Kernels of the IR are also what device
/// backends run, so an op without one also stays off the device.
pub(crate) fn has_c_form(op: Binary, dtype: crate::dtype::DType) -> bool {
    match op {
        Binary::Atan2 | Binary::Pow => dtype == crate::dtype::DType::F32,
        _ => true,
    }
}

pub(crate) fn row_strides(shape: &[usize]) -> Vec<isize> {
    let mut row = vec![1isize; shape.len()];
    for k in (0..shape.len().saturating_sub(1)).rev() {
        row[k] = row[k + 1] * shape[k + 1] as isize;
    }
    row
}

/// The kernel form of one equation: elementwise primitives, layout
/// operations with a strided map (broadcast, transpose, slice, reverse),
/// concatenation and pads (crops too, unless with interior padding), the
/// random family (`ops::random::eqn_kernel`), gathers and dynamic slices
/// with i32 starts (`ops::index::gather_eqn_kernel`,
/// `dynamic_slice_eqn_kernel`, `dynamic_update_eqn_kernel`). `None` for anything else (the loop
/// holding it then runs on the interpreter). Kernel names are `name` with a
/// suffix per kernel.
pub(crate) fn eqn_kernels(func: &Func, eqn: &crate::ir::Eqn, name: &str) -> Option<EqnLowering> {
    let out = *eqn.outputs.first()?;
    if eqn.outputs.len() != 1 {
        return None;
    }
    let ot = func.ty(out);
    let n = ot.numel();
    let rd = |v: Value| Arg { dtype: func.ty(v).dtype, len: func.ty(v).numel(), access: Access::Read };
    let wr = Arg { dtype: ot.dtype, len: n, access: Access::Write };
    let point = |arg: u32| Inst::Load { arg, index: Index::Point };
    let store = |arg: u32, value: Reg| Inst::Store { arg, value, index: Index::Point };
    let single = |args: Vec<Arg>, body: Vec<Inst>, extent: usize, binds: Vec<Value>| {
        let k = Kernel { name: name.to_string(), args, extent, body };
        super::ir::verify(&k).ok()?;
        Some(EqnLowering::Kernels(vec![(k, binds)]))
    };
    // Elementwise: point loads of every operand, the operation, a store.
    let elementwise = |inst: Inst| {
        if eqn.inputs.iter().any(|&v| func.ty(v).numel() != n) {
            return None;
        }
        let mut args: Vec<Arg> = eqn.inputs.iter().map(|&v| rd(v)).collect();
        let mut body: Vec<Inst> = (0..eqn.inputs.len() as u32).map(point).collect();
        body.push(inst);
        let k = eqn.inputs.len() as u32;
        body.push(store(k, k));
        args.push(wr.clone());
        let mut binds = eqn.inputs.clone();
        binds.push(out);
        single(args, body, n, binds)
    };
    match &eqn.prim {
        Prim::StopGradient(_) | Prim::Reshape(_) => Some(EqnLowering::Alias),
        Prim::Unary(op) => elementwise(Inst::Unary(*op, 0)),
        Prim::Binary(op) if !has_c_form(*op, ot.dtype) => None,
        Prim::Binary(op) => elementwise(Inst::Binary(*op, 0, 1)),
        Prim::Compare(op) => elementwise(Inst::Compare(*op, 0, 1)),
        Prim::Select(_) => elementwise(Inst::Select(0, 1, 2)),
        Prim::Fma(_) => elementwise(Inst::Fma(0, 1, 2)),
        Prim::Convert(c) => elementwise(Inst::Convert(c.dtype, 0)),
        Prim::Gather(_) => {
            let (k, binds) = crate::ops::index::gather_eqn_kernel(func, eqn, name)?;
            Some(EqnLowering::Kernels(vec![(k, binds)]))
        }
        Prim::DynamicSlice(_) => {
            let (k, binds) = crate::ops::index::dynamic_slice_eqn_kernel(func, eqn, name)?;
            Some(EqnLowering::Kernels(vec![(k, binds)]))
        }
        Prim::DynamicUpdateSlice(_) => {
            let (k, binds) = crate::ops::index::dynamic_update_eqn_kernel(func, eqn, name)?;
            Some(EqnLowering::Kernels(vec![(k, binds)]))
        }
        Prim::RandomBits(_) | Prim::RandomUniform(_) | Prim::RandomSplit(_) | Prim::RandomFoldIn(_) => {
            let (k, binds) = crate::ops::random::eqn_kernel(func, eqn, name)?;
            Some(EqnLowering::Kernels(vec![(k, binds)]))
        }
        Prim::Concatenate(p) => {
            // One kernel per (non-empty) operand, storing it at its offset
            // along the axis through the result's strides.
            let row = row_strides(&ot.shape);
            let mut start = 0usize;
            let mut ks = Vec::new();
            for (j, &v) in eqn.inputs.iter().enumerate() {
                let shape = &func.ty(v).shape;
                let len = *shape.get(p.axis)?;
                let m = func.ty(v).numel();
                if m > 0 {
                    let index = Index::Strided {
                        dims: shape.clone(),
                        strides: row.clone(),
                        offset: start as isize * *row.get(p.axis)?,
                    };
                    let body = vec![point(0), Inst::Store { arg: 1, value: 0, index }];
                    let k = Kernel { name: format!("{name}_{j}"), args: vec![rd(v), wr.clone()], extent: m, body };
                    super::ir::verify(&k).ok()?;
                    ks.push((k, vec![v, out]));
                }
                start += len;
            }
            Some(EqnLowering::Kernels(ks))
        }
        Prim::Pad(p) => {
            let (x, fill) = (*eqn.inputs.first()?, *eqn.inputs.get(1)?);
            let xt = func.ty(x);
            if p.interior.iter().all(|&e| e == 0) {
                // One pass: every point reads the operand where it lies
                // inside it (negative lo/hi crop), else the pad value.
                let window = super::ir::Window {
                    dims: ot.shape.clone(),
                    lo: p.lo.iter().map(|&l| l as isize).collect(),
                    size: xt.shape.clone(),
                    strides: row_strides(&xt.shape),
                    offset: 0,
                };
                let body = vec![
                    Inst::Load { arg: 1, index: Index::Scalar },
                    Inst::Window { arg: 0, window, fill: 0 },
                    store(2, 1),
                ];
                return single(vec![rd(x), rd(fill), wr.clone()], body, n, vec![x, fill, out]);
            }
            // Interior padding: fill with the pad value, then store the
            // operand at its spaced positions (crops stay interpreted).
            if p.lo.iter().chain(&p.hi).any(|&e| e < 0) {
                return None;
            }
            let row = row_strides(&ot.shape);
            let fill_k = Kernel {
                name: format!("{name}_fill"),
                args: vec![rd(fill), wr.clone()],
                extent: n,
                body: vec![Inst::Load { arg: 0, index: Index::Scalar }, store(1, 0)],
            };
            super::ir::verify(&fill_k).ok()?;
            let mut ks = vec![(fill_k, vec![fill, out])];
            if xt.numel() > 0 {
                let strides: Vec<isize> = row.iter().zip(&p.interior).map(|(&r, &e)| r * (e as isize + 1)).collect();
                let offset = row.iter().zip(&p.lo).map(|(&r, &l)| r * l as isize).sum();
                let index = Index::Strided { dims: xt.shape.clone(), strides, offset };
                let body = vec![point(0), Inst::Store { arg: 1, value: 0, index }];
                let k = Kernel { name: format!("{name}_put"), args: vec![rd(x), wr.clone()], extent: xt.numel(), body };
                super::ir::verify(&k).ok()?;
                ks.push((k, vec![x, out]));
            }
            Some(EqnLowering::Kernels(ks))
        }
        _ => {
            let map = strided_map(func, eqn)?;
            let src = *eqn.inputs.first()?;
            let index = Index::Strided { dims: map.dims, strides: map.strides, offset: map.offset };
            let body = vec![Inst::Load { arg: 0, index }, store(1, 0)];
            single(vec![rd(src), wr.clone()], body, n, vec![src, out])
        }
    }
}
