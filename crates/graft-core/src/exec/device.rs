//! The plan as another backend runs it: every step either as kernels of
//! the kernel IR (with the values each kernel's arguments bind to), as an
//! alias (reshape, stop_gradient: the result is the operand's buffer), or
//! as an equation the backend runs itself or hands back to the host.
//!
//! This is what the GPU backend (`graft-gpu`) renders: the same fused
//! groups, row kernels and single-equation kernels the CPU compiles to C,
//! so a device backend never re-implements a primitive the kernel IR
//! already expresses.

use super::fuse::{Scalar, Step};
use super::Executable;
use crate::ir::Value;
use crate::kernel::lower::{eqn_kernels, group_kernel, EqnLowering};
use crate::kernel::Kernel;

/// One step of a [`DevicePlan`].
#[derive(Debug, Clone)]
pub enum DeviceStep {
    /// Kernels run in order; each binds its arguments (in order) to values.
    /// `eqns` are the equations the step computes (for diagnostics).
    Kernels {
        /// The kernels with their argument values.
        kernels: Vec<(Kernel, Vec<Value>)>,
        /// The equations they compute.
        eqns: Vec<usize>,
        /// What the step is: `fused group`, `row kernel` or `equation`.
        what: &'static str,
    },
    /// `dst` is `src`'s buffer read as is.
    Alias {
        /// The operand.
        src: Value,
        /// The result.
        dst: Value,
    },
    /// An equation with no kernel-IR form of its own (a matrix product, a
    /// convolution, a loop, an argsort, a reduction or scan of a dtype its
    /// device form lacks...):
    /// the backend runs it with its own kernel (a convolution as
    /// `ops::conv::im2col_kernel` and a product) or on the host.
    Eqn(usize),
    /// A fused group with no kernel-IR form: its equations, in order.
    Eqns(Vec<usize>),
}

/// An executable's schedule in kernel-IR form (see the module docs).
#[derive(Debug, Clone)]
pub struct DevicePlan {
    /// The steps in order.
    pub steps: Vec<DeviceStep>,
}

impl Executable {
    /// This executable's plan as a device backend runs it: row kernels of
    /// the plan's regions, fused groups' kernels, single equations'
    /// kernels where they have a kernel-IR form, the rest as equations.
    /// Plan an executable with `CompileMode::Off` for this (no C is
    /// compiled; regions are found in every mode).
    pub fn device_plan(&self) -> DevicePlan {
        let func = &self.func;
        let plan = &self.plan;
        let mut steps = Vec::new();
        let mut regions = plan.regions.iter().peekable();
        let mut i = 0;
        while i < plan.steps.len() {
            while regions.peek().is_some_and(|r| r.start < i) {
                regions.next();
            }
            if let Some(r) = regions.peek().filter(|r| r.start == i) {
                let binds = r.inputs.iter().chain(&r.outputs).copied().collect();
                let mut eqns = Vec::new();
                for s in &plan.steps[r.start..r.end] {
                    match *s {
                        Step::Eqn(e) => eqns.push(e),
                        Step::Group(g) => eqns.extend_from_slice(plan.groups[g].eqns()),
                    }
                }
                steps.push(DeviceStep::Kernels { kernels: vec![(r.kernel.clone(), binds)], eqns, what: "row kernel" });
                i = r.end;
                continue;
            }
            match plan.steps[i] {
                Step::Group(g) => {
                    let group = &plan.groups[g];
                    match group_kernel(func, group, format!("gk{g}")) {
                        Some(k) => {
                            let scalars = group.scalars.iter().filter_map(|s| match s {
                                Scalar::Value(v) => Some(*v),
                                Scalar::Folded(_) => None,
                            });
                            let binds = group
                                .inputs
                                .iter()
                                .copied()
                                .chain(scalars)
                                .chain(group.outputs.iter().copied())
                                .collect();
                            steps.push(DeviceStep::Kernels {
                                kernels: vec![(k, binds)],
                                eqns: group.eqns().to_vec(),
                                what: "fused group",
                            });
                        }
                        None => steps.push(DeviceStep::Eqns(group.eqns().to_vec())),
                    }
                }
                Step::Eqn(e) => {
                    let eqn = &func.eqns[e];
                    match eqn_kernels(func, eqn, &format!("ek{e}")) {
                        Some(EqnLowering::Alias) => match (eqn.inputs.first(), eqn.outputs.first()) {
                            (Some(&src), Some(&dst)) => steps.push(DeviceStep::Alias { src, dst }),
                            _ => steps.push(DeviceStep::Eqn(e)),
                        },
                        Some(EqnLowering::Kernels(kernels)) => {
                            steps.push(DeviceStep::Kernels { kernels, eqns: vec![e], what: "equation" })
                        }
                        None => match device_form(func, eqn, e) {
                            Some((kernels, what)) => steps.push(DeviceStep::Kernels { kernels, eqns: vec![e], what }),
                            None => steps.push(DeviceStep::Eqn(e)),
                        },
                    }
                }
            }
            i += 1;
        }
        DevicePlan { steps }
    }
}

/// The device-only form of a single equation, from its op family's file,
/// and what the step is: forms the CPU does not use because it has kernels
/// of its own (a sequential pass per line, a scatter in position order)
/// that give the interpreter's bits where the device form may not (an f32
/// scatter-add's or cumulative sum's order of addition; see each).
/// `None`: the backend runs the equation itself or on the host.
fn device_form(
    func: &crate::ir::Func,
    eqn: &crate::ir::Eqn,
    e: usize,
) -> Option<(Vec<(Kernel, Vec<Value>)>, &'static str)> {
    use crate::ops::{cumulative, index, reduce, window, Prim};
    let (form, what) = match &eqn.prim {
        Prim::ScatterAdd(_) => (index::scatter_add_device_kernel(func, eqn, &format!("sk{e}")), "scatter rows"),
        // The interpreter's order of combination.
        Prim::ReduceWindow(_) => (window::device_kernel(func, eqn, &format!("wk{e}")), "pooling window"),
        // Reductions the planner left alone (no row region took them).
        Prim::Reduce(_) => (reduce::device_kernel(func, eqn, &format!("rk{e}")), "reduction"),
        Prim::ArgReduce(_) => (reduce::device_kernel(func, eqn, &format!("ak{e}")), "index search"),
        Prim::Cumulative(_) => (cumulative::device_kernel(func, eqn, &format!("ck{e}")), "scan rows"),
        _ => return None,
    };
    form.map(|k| (vec![k], what))
}
