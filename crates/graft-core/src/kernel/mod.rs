//! Kernels: the layer between the executor's plan and machine code.
//!
//! `ir` defines the backend-neutral kernel IR (index space, loads through
//! index expressions, ALU instructions, stores), with a printer and a
//! verifier; `lower` turns the executor's fused groups into kernels;
//! `render_c` renders kernels to C with vector extensions; `native`
//! compiles, caches and loads them.
//!
//! Data flow: `Executable::new` plans (fusion groups), then [`prepare`]
//! lowers every group to a kernel, renders all of them as one translation
//! unit and compiles it, on a background thread by default
//! ([`CompileMode`]). Until a group's native code is ready, the
//! interpreter runs it, so the first call never waits for the compiler;
//! since both compute bitwise the same results, which one ran is
//! invisible except in time.

pub mod ir;
pub mod loops;
pub(crate) mod lower;
pub mod native;
pub mod render_c;
pub(crate) mod rows;

pub use ir::{verify, Access, Arg, Index, Inner, Inst, Kernel, KernelError, Lit, Reduction, Reg};

use crate::exec::fuse::Plan;
use crate::ir::Func;
use std::sync::Arc;

/// When fused kernels are compiled to native code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CompileMode {
    /// On a background thread; calls use the interpreter until it is done.
    Async,
    /// Before `Executable::new` returns (first call already native).
    Sync,
    /// Never: the interpreter runs everything.
    Off,
}

impl CompileMode {
    /// `GRAFT_COMPILE` = `sync`, `async` or `off` (default `async`); an
    /// unknown value warns once and means `async`.
    pub fn from_env() -> CompileMode {
        match std::env::var("GRAFT_COMPILE").ok().as_deref().map(str::trim) {
            None | Some("") | Some("async") => CompileMode::Async,
            Some("sync") => CompileMode::Sync,
            Some("off") | Some("0") => CompileMode::Off,
            Some(other) => {
                native::warn_once(
                    "env",
                    &format!("GRAFT_COMPILE={other} is not one of sync, async, off; using async native compilation"),
                );
                CompileMode::Async
            }
        }
    }
}

/// Lowers the plan's fused groups to kernels and starts compiling them
/// (or compiles them now, for [`CompileMode::Sync`]). Groups whose
/// members have no kernel form keep an empty slot and stay interpreted.
pub(crate) fn prepare(func: &Func, plan: &mut Plan, mode: CompileMode) {
    if plan.groups.is_empty() {
        return;
    }
    // Regions are found whatever the mode, so that `graft ir --kernels`
    // shows what runs natively; without compilation their steps run.
    plan.regions = rows::find_regions(func, plan);
    if mode == CompileMode::Off {
        return;
    }
    let mut kernels = Vec::new();
    let mut slots = Vec::new();
    for region in &mut plan.regions {
        let slot = Arc::new(native::Slot::default());
        region.native = Some(slot.clone());
        slots.push((region.kernel.name.clone(), Arc::downgrade(&slot)));
        kernels.push(region.kernel.clone());
    }
    // Groups inside a region only run until its kernel is ready: they are
    // not compiled.
    let in_region = plan.groups_in_regions();
    for (g, group) in plan.groups.iter_mut().enumerate() {
        if in_region[g] {
            continue;
        }
        if let Some(k) = lower::group_kernel(func, group, format!("gk{g}")) {
            let slot = Arc::new(native::Slot::default());
            group.native = Some(slot.clone());
            slots.push((k.name.clone(), Arc::downgrade(&slot)));
            kernels.push(k);
        }
    }
    if kernels.is_empty() {
        return;
    }
    let source = render_c::render_unit(&kernels, native::host_lanes());
    let job = native::Job { source, kernels: slots };
    match mode {
        CompileMode::Sync => job.run(),
        CompileMode::Async => native::submit(job),
        CompileMode::Off => {}
    }
}

/// The kernels an executable's fused groups lower to (for `graft ir
/// --kernels` and tests), in plan order.
pub fn kernels_of(exe: &crate::exec::Executable) -> Vec<Kernel> {
    exe.plan_kernels()
}
