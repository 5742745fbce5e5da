//! Kernels: the layer between the executor's plan and machine code.
//!
//! `ir` defines the backend-neutral kernel IR (index space, loads through
//! index expressions, ALU instructions, stores), with a printer and a
//! verifier; `lower` turns the executor's fused groups into kernels;
//! `interior` finds the test-free segment of 1-D stencil kernels and the
//! values their steps can reuse; `render_c` renders kernels to C with
//! vector extensions; `native`
//! compiles, caches and loads them.
//!
//! Data flow: `Executable::new` plans (fusion groups), then [`prepare`]
//! lowers every group to a kernel, renders all of them as one translation
//! unit and compiles it, on a background thread by default
//! ([`CompileMode`]). Until a group's native code is ready, the
//! interpreter runs it, so the first call never waits for the compiler;
//! since both compute bitwise the same results, which one ran is
//! invisible except in time.

pub mod host;
pub mod interior;
pub mod ir;
pub mod lines;
pub mod loops;
pub(crate) mod lower;
pub mod native;
pub mod render_c;
pub mod render_wgsl;
pub(crate) mod rows;

pub use ir::{verify, Access, Arg, Index, Inner, Inst, Kernel, KernelError, Lit, Reduction, Reg, Window, WordOp};

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
/// `shapeless` renders them size-generic (`render_c::render_unit_sized`).
/// A unit this process has loaded before (the same function planned
/// again, or a size-generic unit at new sizes) is used at once, even in
/// async mode.
pub(crate) fn prepare(func: &Func, plan: &mut Plan, mode: CompileMode, shapeless: bool) {
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
            group.in_place = in_place_candidates(&k, group.inputs.len());
            let slot = Arc::new(native::Slot::default());
            group.native = Some(slot.clone());
            slots.push((k.name.clone(), Arc::downgrade(&slot)));
            kernels.push(k);
        }
    }
    if kernels.is_empty() {
        return;
    }
    let lanes = unit_lanes(&kernels);
    let (source, tables) = if shapeless {
        let (source, tables) = render_c::render_unit_sized(&kernels, lanes);
        (source, tables.into_iter().map(Arc::from).collect())
    } else {
        (render_c::render_unit_streaming(&kernels, lanes, native::stream_min_bytes()), Vec::new())
    };
    native::Job { source, kernels: slots, tables }.start(mode);
}

/// For each written argument of elementwise kernel `k` (in order), the
/// read arguments among the first `n_inputs` whose buffer it may be
/// written into: same dtype and length, read only at each point's own
/// element (point loads), and never loaded after the written argument is
/// stored. A point then reads the input's value before it overwrites it,
/// whatever range a call covers, so an executor may hand a dying input's
/// buffer to the output instead of a fresh one (outputs in place).
pub(crate) fn in_place_candidates(k: &Kernel, n_inputs: usize) -> Vec<Vec<usize>> {
    let row = k.body.iter().any(|i| matches!(i, Inst::Reduce(_) | Inst::Map(_)));
    let writes: Vec<usize> = (0..k.args.len()).filter(|&a| k.args[a].access == Access::Write).collect();
    if row {
        return vec![Vec::new(); writes.len()];
    }
    let point_only = |a: usize| {
        k.body.iter().all(|i| match i {
            Inst::Load { arg, index } => *arg as usize != a || *index == Index::Point,
            Inst::Window { arg, .. } | Inst::LoadAt { arg, .. } => *arg as usize != a,
            _ => true,
        })
    };
    let last_load = |a: usize| {
        k.body
            .iter()
            .rposition(|i| matches!(i, Inst::Load { arg, .. } | Inst::Window { arg, .. } | Inst::LoadAt { arg, .. } if *arg as usize == a))
    };
    let store_at = |a: usize| {
        k.body.iter().position(|i| matches!(i, Inst::Store { arg, index: Index::Point, .. } if *arg as usize == a))
    };
    writes
        .iter()
        .map(|&w| {
            let Some(st) = store_at(w) else { return Vec::new() };
            (0..n_inputs.min(k.args.len()))
                .filter(|&j| {
                    let (a, b) = (&k.args[j], &k.args[w]);
                    a.access == Access::Read
                        && a.dtype == b.dtype
                        && a.len == b.len
                        && point_only(j)
                        && last_load(j).is_none_or(|l| l < st)
                })
                .collect()
        })
        .collect()
}

/// Lanes per vector for a translation unit: as many as fit the host's
/// vector register for the unit's widest element (`native::host_lanes`
/// counts 4-byte lanes), at least 4. A unit touching f64 or i64 on an
/// AVX-512 host runs 8 lanes: 16 lanes of f64 span two registers, which
/// GCC keeps on the stack (an f64 loop ran 1.9x slower that way). The
/// same holds for f32 operations evaluated in f64 ([`widens`]): at 16
/// lanes f32 `sin` ran 2.2x and f32 `pow` 1.6x slower than at 8.
/// `GRAFT_LANES` overrides the choice. Results never depend on it.
pub fn unit_lanes(kernels: &[Kernel]) -> usize {
    if native::lanes_override().is_some() {
        return native::host_lanes();
    }
    let args = kernels.iter().flat_map(|k| k.args.iter().map(|a| a.dtype.size_bytes()));
    let wide = kernels.iter().any(|k| k.body.iter().any(widens));
    let widest = args.chain(wide.then_some(8)).max().unwrap_or(4).max(4);
    (native::host_lanes() * 4 / widest).max(4)
}

/// Whether an instruction (or an inner body under it) is an operation
/// whose f32 version computes in f64 (`ops::mathfn`: `log1p`, `expm1`,
/// `sin`, `cos`, `tan`, `erf`, `pow`), so its registers hold 8-byte lanes
/// whatever the arguments' dtypes.
fn widens(inst: &Inst) -> bool {
    use crate::ops::binary::Binary;
    use crate::ops::unary::Unary;
    match inst {
        Inst::Unary(op, _) => {
            matches!(op, Unary::Log1p | Unary::Expm1 | Unary::Sin | Unary::Cos | Unary::Tan | Unary::Erf)
        }
        Inst::Binary(op, ..) => matches!(op, Binary::Pow | Binary::Atan2),
        Inst::Reduce(r) => r.inner.body.iter().any(widens),
        Inst::Map(m) => m.body.iter().any(widens),
        _ => false,
    }
}

/// The compiled loops of a function's scans (including scans nested in
/// loop bodies), as `graft ir --kernels` shows them: for each scan whose
/// body has a compiled form, the body's name and the program. Planned with
/// `options` (compilation itself is not started).
pub fn loop_programs(func: &Func, options: crate::ExecOptions) -> Vec<(String, loops::LoopProgram)> {
    let options = crate::ExecOptions { compile: CompileMode::Off, ..options };
    walk_loops(as_planned(func, options), options).scans
}

/// `f` as the executor runs it (after the passes that precede planning:
/// constant folding, inlining, hoisting), or `f` itself if it does not plan.
fn as_planned(f: &Func, options: crate::ExecOptions) -> Arc<Func> {
    match crate::Executable::with_options(f.clone(), options) {
        Ok(exe) => exe.func().clone(),
        Err(_) => Arc::new(f.clone()),
    }
}

/// The compiled forms of a function's `while` loops (including loops nested
/// in other loops' bodies), as `graft ir --kernels` shows them: for each
/// `while` whose `cond` and body have compiled forms, the body's name and
/// the program. Planned with `options` (compilation itself is not started).
pub fn while_programs(func: &Func, options: crate::ExecOptions) -> Vec<(String, loops::WhileProgram)> {
    let options = crate::ExecOptions { compile: CompileMode::Off, ..options };
    walk_loops(as_planned(func, options), options).whiles
}

/// A function's compiled scan and `while` loops (see [`loop_programs`] and
/// [`while_programs`]).
#[derive(Debug, Default)]
pub struct LoopPrograms {
    /// What [`loop_programs`] gives.
    pub scans: Vec<(String, loops::LoopProgram)>,
    /// What [`while_programs`] gives.
    pub whiles: Vec<(String, loops::WhileProgram)>,
}

/// [`loop_programs`] and [`while_programs`] of the function `exe` was
/// planned from (with `options`, compilation off), starting from `exe`'s
/// plan rather than planning that function twice more.
pub fn loop_programs_of(exe: &crate::Executable, options: crate::ExecOptions) -> LoopPrograms {
    let options = crate::ExecOptions { compile: CompileMode::Off, ..options };
    walk_loops(exe.func().clone(), options)
}

/// The scans and `while` loops of `planned` (a function as planned) and of
/// every function nested in it, depth first, each nested function planned
/// once (a scan's or a loop's body is both compiled and walked into; it
/// was planned for each, and every plan verifies the functions nested in
/// it again).
fn walk_loops(planned: Arc<Func>, options: crate::ExecOptions) -> LoopPrograms {
    // By the address of the function planned, which the map keeps alive.
    let mut plans: std::collections::HashMap<usize, (Arc<Func>, Option<Arc<crate::Executable>>)> =
        std::collections::HashMap::new();
    let mut plan = |f: &Arc<Func>| -> Option<Arc<crate::Executable>> {
        let entry = plans
            .entry(Arc::as_ptr(f) as usize)
            .or_insert_with(|| (f.clone(), crate::Executable::with_options(f.clone(), options).ok().map(Arc::new)));
        entry.1.clone()
    };
    let mut out = LoopPrograms::default();
    let mut seen_scans = std::collections::HashSet::new();
    let mut seen_whiles = std::collections::HashSet::new();
    let mut todo: Vec<Arc<Func>> = Vec::new();
    let mut next = Some(planned);
    while let Some(f) = next.take().or_else(|| {
        let f = todo.pop()?;
        Some(plan(&f).map_or(f, |exe| exe.func().clone()))
    }) {
        for eqn in &f.eqns {
            match &eqn.prim {
                crate::ops::Prim::Scan(s) => {
                    let key = (Arc::as_ptr(&s.body) as usize, s.n_consts, s.n_carry, s.reverse);
                    if seen_scans.insert(key) {
                        if let Some(p) = plan(&s.body).and_then(|e| e.loop_program(s.n_consts, s.n_carry, s.reverse)) {
                            out.scans.push((s.body.name.clone(), p));
                        }
                    }
                }
                crate::ops::Prim::While(w) => {
                    let lp = &w.lp;
                    let nk = lp.body.outputs.len();
                    let key = (Arc::as_ptr(&lp.cond) as usize, Arc::as_ptr(&lp.body) as usize, lp.n_consts);
                    if seen_whiles.insert(key) {
                        let exes = plan(&lp.cond).zip(plan(&lp.body));
                        if let Some(p) = exes.and_then(|(c, b)| b.while_program(&c, lp.n_consts, nk)) {
                            out.whiles.push((lp.body.name.clone(), p));
                        }
                    }
                }
                _ => {}
            }
            todo.extend(crate::ops::Op::subfuncs(&eqn.prim));
        }
    }
    out
}

/// The kernels an executable's fused groups lower to (for `graft ir
/// --kernels` and tests), in plan order.
pub fn kernels_of(exe: &crate::exec::Executable) -> Vec<Kernel> {
    exe.plan_kernels()
}
