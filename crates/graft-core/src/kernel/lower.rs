//! From the executor's plan to kernels: a fused group becomes one kernel.
//!
//! The group (see `exec::fuse`) already decided what runs together and
//! which values are materialised; lowering only translates: the group's
//! full-size inputs become point loads, its splat operands scalar loads
//! (or literals, when the planner folded them), member equations become ALU
//! instructions in schedule order, and materialised values become stores.
//! `stop_gradient` is the identity and emits nothing.

use super::ir::{Access, Arg, Index, Inst, Kernel, Lit, Reg};
use crate::exec::fuse::{Group, Scalar};
use crate::ir::{Func, Value};
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
    let push = |body: &mut Vec<Inst>, i: Inst| -> Reg {
        body.push(i);
        (body.len() - 1) as Reg
    };
    for &v in &group.inputs {
        args.push(Arg { dtype: func.ty(v).dtype, len: n, access: Access::Read });
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
    for (k, &v) in group.inputs.iter().enumerate() {
        let r = push(&mut body, Inst::Load { arg: k as u32, index: Index::Point });
        reg.insert(v, r);
    }
    // The splat sources, in the order the group numbered them.
    let mut scalar_of: HashMap<Value, usize> = HashMap::new();
    let mut scalar_reg: Vec<Option<Reg>> = vec![None; scalar_src.len()];
    for &e in group.eqns() {
        let eqn = &func.eqns[e];
        let out = *eqn.outputs.first()?;
        let operand = |u: &Value| reg.get(u).copied();
        let inst = match &eqn.prim {
            Prim::Unary(op) => Inst::Unary(*op, operand(&eqn.inputs[0])?),
            Prim::Binary(op) => Inst::Binary(*op, operand(&eqn.inputs[0])?, operand(&eqn.inputs[1])?),
            Prim::Compare(op) => Inst::Compare(*op, operand(&eqn.inputs[0])?, operand(&eqn.inputs[1])?),
            Prim::Select(_) => Inst::Select(
                operand(&eqn.inputs[0])?,
                operand(&eqn.inputs[1])?,
                operand(&eqn.inputs[2])?,
            ),
            Prim::Convert(c) => Inst::Convert(c.dtype, operand(&eqn.inputs[0])?),
            Prim::StopGradient(_) => {
                let r = operand(&eqn.inputs[0])?;
                reg.insert(out, r);
                continue;
            }
            p if p.name() == "broadcast_in_dim" => {
                let src = eqn.inputs[0];
                let next = scalar_of.len();
                let s = *scalar_of.entry(src).or_insert(next);
                let r = match scalar_reg.get(s)? {
                    Some(r) => *r,
                    None => {
                        let r = push(&mut body, scalar_src.get(s)?.clone());
                        scalar_reg[s] = Some(r);
                        r
                    }
                };
                reg.insert(out, r);
                continue;
            }
            _ => return None,
        };
        let r = push(&mut body, inst);
        reg.insert(out, r);
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
