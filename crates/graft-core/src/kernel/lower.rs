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
            // pow and atan2 have no prelude version yet (bitwise-equal C
            // versions need their own algorithms): such groups stay interpreted.
            Prim::Binary(Binary::Pow | Binary::Atan2) => return None,
            Prim::Binary(op) => Inst::Binary(*op, lw.operand(eqn.inputs[0])?, lw.operand(eqn.inputs[1])?),
            Prim::Compare(op) => Inst::Compare(*op, lw.operand(eqn.inputs[0])?, lw.operand(eqn.inputs[1])?),
            Prim::Select(_) => {
                Inst::Select(lw.operand(eqn.inputs[0])?, lw.operand(eqn.inputs[1])?, lw.operand(eqn.inputs[2])?)
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
        body.push(Inst::Store { arg: (first_out + j) as u32, value });
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
