//! The CPU executor: runs any verified [`Func`] on host tensors.
//!
//! Planning happens once per [`Executable`]: liveness analysis finds, for
//! every equation, the values whose last reader it is. At run time those
//! buffers go back to a pool keyed by (dtype, element count) right after
//! that equation, and later equations take their output buffers from the
//! pool before allocating. The pool survives between calls, so a function
//! called repeatedly in a training loop stops allocating after its first call.
//!
//! Planning also fuses chains of elementwise equations into groups that
//! walk memory once, block by block (see [`fuse`]); liveness then runs over
//! the resulting schedule of steps (plain equations and fused groups). Values
//! that live only inside a group never get a buffer. Fusion is on by
//! default; `GRAFT_NO_FUSION=1` in the environment (read when an
//! [`Executable`] is planned) or `ExecOptions { fuse: false, .. }` turns it off.
//!
//! Peak bytes: the high-water mark of bytes the executor holds (live
//! intermediates plus pooled buffers) during one run. Caller-owned inputs
//! are not counted; outputs are counted until they are returned. Fused
//! groups' per-task block scratch is not counted (see [`fuse`]).

pub mod device;
pub mod fuse;
mod recompute;

use crate::error::ExecError;
use crate::ir::{verify, Func, Value};
use crate::kernel::loops::{NativeLoop, NativeWhile};
use crate::kernel::CompileMode;
use crate::ops::collective::Started;
use crate::ops::{Op, Prim};
use crate::tensor::Tensor;
use crate::types::TensorType;
use fuse::{Plan, Scalar, Step};
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Figures from one run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunStats {
    /// Most bytes held by the executor at any point of the run.
    pub peak_bytes: usize,
    /// Bytes newly allocated during the run (not served by the pool).
    pub fresh_bytes: usize,
    /// Output buffers served from the pool.
    pub reused_buffers: usize,
    /// Kernels launched: one per equation run on its own, one per fused
    /// group (however many equations it holds). Constants folded into fused
    /// groups at plan time launch nothing.
    pub kernels: usize,
    /// All-reduces started in the background and waited for at their first
    /// reader ([`ExecOptions::overlap`]).
    pub collectives_started: usize,
}

/// Planning choices of an [`Executable`]. They reach the sub-functions it
/// runs (loop bodies, calls, custom rules): while an executable runs, the
/// plans of its sub-functions are made with its options (see
/// [`plan_cached`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ExecOptions {
    /// Fuse chains of elementwise equations (default true). Off, every
    /// equation runs its own kernel over whole tensors; results are bitwise
    /// the same either way.
    pub fuse: bool,
    /// Elements per block in fused groups; `None` sizes blocks from the
    /// bytes one block of each group touches (see [`fuse::BLOCK_BUDGET`]).
    /// For tests and tuning: results do not depend on it.
    pub block_elems: Option<usize>,
    /// Whether and when fused groups are compiled to native code (see
    /// [`crate::kernel`]); results do not depend on it.
    pub compile: CompileMode,
    /// Render fused kernels size-generic (see `kernel::render_c`, Note
    /// [Size-generic kernels]): their sizes, strides and literals are read
    /// from a table at run time, so plans of the same function at other
    /// sizes share one compiled library (shapeless compilation). Off by
    /// default: constant sizes let the C compiler strength-reduce index
    /// arithmetic. Results do not depend on it.
    pub shapeless: bool,
    /// Overlap all-reduces with the work after them (default true; off with
    /// `GRAFT_OVERLAP=0`): a `psum`/`pmean`/`pmax`/`pmin` moves as early
    /// as its operand allows (`opt::hoist_collectives`), starts there
    /// through [`crate::comm::Communicator::all_reduce_start`] and is waited
    /// for at its first reader, so gradient buckets travel while the
    /// backward pass goes on. Results do not depend on it.
    pub overlap: bool,
}

impl Default for ExecOptions {
    fn default() -> Self {
        ExecOptions { fuse: true, block_elems: None, compile: CompileMode::Async, shapeless: false, overlap: true }
    }
}

impl ExecOptions {
    /// The defaults, with fusion off when the environment variable
    /// `GRAFT_NO_FUSION` is set to anything but empty or `0`, size-generic
    /// kernels when `GRAFT_SHAPELESS` is, and the compile mode from
    /// `GRAFT_COMPILE` ([`CompileMode::from_env`]).
    /// While compilation is disabled ([`disable_compile`]) every function
    /// runs op by op: no fusion and no native code.
    pub fn from_env() -> Self {
        if !compile_enabled() {
            return ExecOptions { fuse: false, compile: CompileMode::Off, ..ExecOptions::default() };
        }
        let off = env_flag("GRAFT_NO_FUSION");
        let shapeless = env_flag("GRAFT_SHAPELESS");
        let overlap = std::env::var("GRAFT_OVERLAP").map_or(true, |v| v.trim() != "0");
        ExecOptions { fuse: !off, compile: CompileMode::from_env(), shapeless, overlap, ..ExecOptions::default() }
    }
}

/// Whether an environment variable is set to anything but empty or `0`.
fn env_flag(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| !v.is_empty() && v != "0")
}

/// The process-wide compile switch (seed 002's `enable_compile` /
/// `disable_compile`), initially off when `GRAFT_DISABLE_COMPILE` is set.
fn compile_switch() -> &'static std::sync::atomic::AtomicBool {
    static SWITCH: std::sync::OnceLock<std::sync::atomic::AtomicBool> = std::sync::OnceLock::new();
    SWITCH.get_or_init(|| std::sync::atomic::AtomicBool::new(!env_flag("GRAFT_DISABLE_COMPILE")))
}

/// Runs every function planned from now on op by op, for debugging: each
/// equation runs its own interpreter kernel over whole tensors, with no
/// fusion and no native code. Results are bitwise the same as compiled
/// runs (the kernels share their math and reduction order). Functions
/// already planned keep their plan; the Rust `Jit` plans again on its next
/// call. `GRAFT_DISABLE_COMPILE=1` starts a process in this mode.
pub fn disable_compile() {
    compile_switch().store(false, std::sync::atomic::Ordering::SeqCst);
}

/// Undoes [`disable_compile`]: functions planned from now on fuse and
/// compile as [`ExecOptions::from_env`] says.
pub fn enable_compile() {
    compile_switch().store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Whether functions planned now fuse and compile (see [`disable_compile`]).
pub fn compile_enabled() -> bool {
    compile_switch().load(std::sync::atomic::Ordering::SeqCst)
}

/// A verified, planned function ready to run.
#[derive(Debug)]
pub struct Executable {
    func: Arc<Func>,
    /// The schedule: plain equations and fused groups.
    plan: Plan,
    /// For each step, the owned values to release after it ran.
    release_after: Vec<Vec<Value>>,
    pool: Mutex<Pool>,
    /// How many values of each (dtype, element count) the function has: the
    /// most buffers of that kind `recycle` keeps (computed once at plan time,
    /// because loop kernels recycle on every iteration).
    kinds: KindMap<usize>,
    /// The options it was planned with (its sub-functions get them too).
    options: ExecOptions,
    /// Compiled loops of this function as a scan body, per (consts,
    /// carries, reverse); `None` when the body has no compiled form.
    loops: Mutex<Vec<(LoopKey, Option<Arc<NativeLoop>>)>>,
    /// Compiled while loops with this function as the body, per (cond,
    /// consts, carries); `None` when the loop has no compiled form.
    whiles: Mutex<Vec<(WhileKey, Option<Arc<NativeWhile>>)>>,
}

/// A compiled while loop's `cond` (held, so that the pointer compared
/// stays this function's) and operand split.
type WhileKey = (Arc<Func>, usize, usize);

/// What a compiled loop depends on besides its body: the scan's operand
/// split and direction.
type LoopKey = (usize, usize, bool);

impl Executable {
    /// Verifies and plans a function with [`ExecOptions::from_env`].
    pub fn new(func: impl Into<Arc<Func>>) -> Result<Executable, ExecError> {
        Executable::with_options(func, ExecOptions::from_env())
    }

    /// Verifies and plans a function with explicit options (the environment
    /// is not consulted).
    pub fn with_options(func: impl Into<Arc<Func>>, options: ExecOptions) -> Result<Executable, ExecError> {
        let func = func.into();
        verify(&func)?;
        let verified = func.clone();
        // Flattened first, so parameter-free work inside calls (a loss
        // differentiated by a trainer's step) is folded too.
        // Inlined calls may repeat each other's work (two metrics of one
        // model's forward pass): CSE shares it, as it would have had the
        // caller been written inline. Results are unchanged (every merged
        // equation is pure and computes the same bits).
        let func = match crate::opt::flatten(&func) {
            Some(f) => {
                let merged = crate::opt::cse(&f);
                Arc::new(if merged.eqns.len() < f.eqns.len() { merged } else { f })
            }
            None => func,
        };
        // Parameter-free work is done once, here, by the interpreter (see
        // `opt::fold_constants`); the evaluation itself is planned unfolded.
        let eval = |sub: Func| {
            let opts = ExecOptions { compile: CompileMode::Off, ..options };
            Executable::planned(Arc::new(sub), opts).ok()?.run(&[]).ok()
        };
        let func = match crate::opt::fold_constants(&func, eval) {
            Some(folded) => Arc::new(folded),
            None => func,
        };
        if Arc::ptr_eq(&func, &verified) {
            // Neither pass changed it: verified above.
            Executable::plan_verified(func, options)
        } else {
            Executable::planned(func, options)
        }
    }

    /// Verifies and plans a function as it is (no constant folding).
    fn planned(func: Arc<Func>, options: ExecOptions) -> Result<Executable, ExecError> {
        verify(&func)?;
        Executable::plan_verified(func, options)
    }

    /// Plans a verified function as it is (no constant folding).
    fn plan_verified(func: Arc<Func>, options: ExecOptions) -> Result<Executable, ExecError> {
        // f16 is a storage type: what computes on it computes in f32 and
        // rounds each result (`opt::widen_f16`). First, so every function
        // planned (every front end, every body, fused or not) is widened.
        let func = match crate::opt::widen_f16(&func)? {
            Some(f) => Arc::new(f),
            None => func,
        };
        // Calls, checkpoints and one-step scans run as their bodies
        // (`opt::flatten`); splats go next to their readers.
        let func = match crate::opt::flatten(&func) {
            // Inlined bodies computed on f16 inside: widened here.
            Some(f) => Arc::new(crate::opt::widen_f16(&f)?.unwrap_or(f)),
            None => func,
        };
        // Neighbouring one-step scans that would each compile whole run as
        // one loop, and their unread results go (`opt::merge_steps`).
        // Planned the same with compilation off, so the interpreter runs
        // (and `graft ir --kernels` lists) the graph compiled code runs;
        // not without fusion (op by op, the reference).
        let func = match options
            .fuse
            .then(|| crate::opt::merge_steps(&func, &|s| Executable::compiles_whole(s, options)))
            .flatten()
        {
            Some(f) => Arc::new(f),
            None => func,
        };
        // A `while` and its JVP on the same operands run as one loop
        // (`opt::merge_while_jvp`).
        let func = match crate::opt::merge_while_jvp(&func) {
            Some(f) => Arc::new(f),
            None => func,
        };
        // Per-step sums of products leave their loops (`opt::hoist_accumulations`).
        let func = match crate::opt::hoist_accumulations(&func) {
            Some(f) => Arc::new(f),
            None => func,
        };
        // All-reduces start as early as their operands allow, so they
        // overlap with what follows (`ExecOptions::overlap`).
        let func = match options.overlap.then(|| crate::opt::hoist_collectives(&func)).flatten() {
            Some(f) => Arc::new(f),
            None => func,
        };
        let func = match options.fuse.then(|| fuse::unshare_splats(&func)).flatten() {
            Some(f) => Arc::new(f),
            None => func,
        };
        // What the passes above moved out of loop bodies (a hoisted sum of
        // f16 products) is widened too; nothing to do otherwise.
        let mut func = match crate::opt::widen_f16(&func)? {
            Some(f) => Arc::new(f),
            None => func,
        };
        let mut plan = fuse::plan(&func, &options);
        // Values a group reads from another are computed again where that
        // moves fewer bytes (`recompute`), and the result planned again.
        if let Some(f) = options.fuse.then(|| recompute::recompute(&func, &plan)).flatten() {
            if verify(&f).is_ok() {
                let f = Arc::new(f);
                plan = fuse::plan(&f, &options);
                func = f;
            }
        }
        crate::kernel::prepare(&func, &mut plan, options.compile, options.shapeless);
        let release_after = plan_releases(&func, &plan);
        let mut kinds = KindMap::default();
        for ty in &func.types {
            *kinds.entry((ty.dtype, ty.numel())).or_insert(0) += 1;
        }
        Ok(Executable {
            func,
            plan,
            release_after,
            pool: Mutex::new(Pool::default()),
            kinds,
            options,
            loops: Mutex::new(Vec::new()),
            whiles: Mutex::new(Vec::new()),
        })
    }

    /// Whether scan `s`'s body has a compiled loop program (every step a
    /// kernel form; see [`crate::kernel::loops`]), by planning it.
    fn compiles_whole(s: &crate::ops::scan::Scan, options: ExecOptions) -> bool {
        let opts = ExecOptions { compile: CompileMode::Off, ..options };
        Executable::with_options(s.body.clone(), opts)
            .ok()
            .and_then(|e| e.loop_program(s.n_consts, s.n_carry, s.reverse))
            .is_some()
    }

    /// This function's plan as a scan body's compiled loop program (see
    /// [`crate::kernel::loops`]), if every step has a kernel form.
    pub fn loop_program(
        &self,
        n_consts: usize,
        n_carry: usize,
        reverse: bool,
    ) -> Option<crate::kernel::loops::LoopProgram> {
        let conv = self.if_converted();
        let e = conv.as_ref().unwrap_or(self);
        crate::kernel::loops::build(&e.func, &e.plan, n_consts, n_carry, reverse, "gl")
    }

    /// This function as a compiled loop's body needs it, planned again when
    /// that changes it: its one-step scans inlined (`opt::flatten_all`;
    /// planning keeps those that shift values, see `opt::flatten`) and its
    /// `cond`s if-converted (`opt::if_convert`): a compiled loop has no
    /// form for a nested scan or a branch, so its body runs every branch
    /// and selects.
    fn if_converted(&self) -> Option<Executable> {
        let flat = crate::opt::flatten_all(&self.func);
        let f = flat.as_ref().unwrap_or(&self.func);
        let g = match crate::opt::if_convert(f) {
            Some(g) => g,
            None => flat?,
        };
        Executable::with_options(g, ExecOptions { compile: CompileMode::Off, ..self.options }).ok()
    }

    /// This function as the body of a scan with `n_consts` consts and
    /// `n_carry` carries, compiled whole (see [`crate::kernel::loops`]):
    /// planned and handed to the compiler on the first request, returned
    /// once its native code is ready. `None` while compiling, when the
    /// body has a step without a kernel form, or with compilation off.
    pub(crate) fn native_loop(&self, n_consts: usize, n_carry: usize, reverse: bool) -> Option<Arc<NativeLoop>> {
        if self.options.compile == CompileMode::Off {
            return None;
        }
        let key = (n_consts, n_carry, reverse);
        let mut loops = self.loops.lock().unwrap_or_else(|e| e.into_inner());
        let entry = match loops.iter().find(|(k, _)| *k == key) {
            Some((_, l)) => l.clone(),
            None => {
                let l = self
                    .loop_program(n_consts, n_carry, reverse)
                    .map(|p| NativeLoop::start(p, self.options.compile, self.options.shapeless));
                loops.push((key, l.clone()));
                l
            }
        };
        entry.filter(|l| l.ready().is_some())
    }

    /// This function as the body of a while loop with condition `cond`
    /// (planned as `cond_exe`), `n_consts` consts and `n_carry` carries, as
    /// a while program (see [`crate::kernel::loops`]), if every step of
    /// both has a kernel form.
    pub fn while_program(
        &self,
        cond_exe: &Executable,
        n_consts: usize,
        n_carry: usize,
    ) -> Option<crate::kernel::loops::WhileProgram> {
        let (cc, bc) = (cond_exe.if_converted(), self.if_converted());
        let (c, b) = (cc.as_ref().unwrap_or(cond_exe), bc.as_ref().unwrap_or(self));
        crate::kernel::loops::build_while((&c.func, &c.plan), (&b.func, &b.plan), n_consts, n_carry, "gw")
    }

    /// This function as a while loop's body, compiled whole with `cond`
    /// (see [`Executable::while_program`]): planned and handed to the
    /// compiler on the first request, returned once its native code is
    /// ready; `None` before, without a compiled form, or with compilation off.
    pub(crate) fn native_while(
        &self,
        cond: &Arc<Func>,
        cond_exe: &Executable,
        n_consts: usize,
        n_carry: usize,
    ) -> Option<Arc<NativeWhile>> {
        if self.options.compile == CompileMode::Off {
            return None;
        }
        let mut whiles = self.whiles.lock().unwrap_or_else(|e| e.into_inner());
        let found = whiles.iter().find(|((c, k, n), _)| Arc::ptr_eq(c, cond) && (*k, *n) == (n_consts, n_carry));
        let entry = match found {
            Some((_, w)) => w.clone(),
            None => {
                let w = self
                    .while_program(cond_exe, n_consts, n_carry)
                    .map(|p| NativeWhile::start(p, self.options.compile, self.options.shapeless));
                whiles.push(((cond.clone(), n_consts, n_carry), w.clone()));
                w
            }
        };
        entry.filter(|w| w.ready().is_some())
    }

    /// Number of fused groups in the plan and the equations they hold.
    pub fn fusion_summary(&self) -> (usize, usize) {
        (self.plan.groups.len(), self.plan.groups.iter().map(|g| g.len()).sum())
    }

    /// The kernels of the plan: row kernels of its regions, then those of
    /// the fused groups outside regions (the groups that have a kernel
    /// form), in plan order.
    pub fn plan_kernels(&self) -> Vec<crate::kernel::Kernel> {
        let in_region = self.plan.groups_in_regions();
        let rows = self.plan.regions.iter().map(|r| r.kernel.clone());
        let groups = self
            .plan
            .groups
            .iter()
            .enumerate()
            .filter(|(g, _)| !in_region[*g])
            .filter_map(|(g, group)| crate::kernel::lower::group_kernel(&self.func, group, format!("gk{g}")));
        rows.chain(groups).collect()
    }

    /// `(ready, total)`: fused groups whose native code is loaded, and
    /// fused groups that were handed to the compiler.
    pub fn native_status(&self) -> (usize, usize) {
        let slots = self.native_slots();
        slots.fold((0, 0), |(r, t), s| (r + s.get().is_some() as usize, t + 1))
    }

    /// Waits (up to `timeout`) until every fused group's compile has
    /// finished, successfully or not; true if all finished in time. Runs
    /// never need this: they use the interpreter meanwhile.
    pub fn wait_native(&self, timeout: std::time::Duration) -> bool {
        let start = std::time::Instant::now();
        loop {
            if self.native_slots().all(|s| s.settled()) {
                return true;
            }
            if start.elapsed() >= timeout {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Waits (up to `timeout`) until every kernel compile this process
    /// started has finished, including those of sub-functions (loop bodies
    /// compiled whole on their first run); true if all finished in time.
    pub fn wait_all_native(&self, timeout: std::time::Duration) -> bool {
        self.wait_native(timeout) && crate::kernel::native::wait_idle(timeout)
    }

    fn native_slots(&self) -> impl Iterator<Item = &Arc<crate::kernel::native::Slot>> {
        let groups = self.plan.groups.iter().filter_map(|g| g.native.as_ref());
        groups.chain(self.plan.regions.iter().filter_map(|r| r.native.as_ref()))
    }

    /// The function this executable runs.
    pub fn func(&self) -> &Arc<Func> {
        &self.func
    }

    /// Runs on the given inputs and returns the outputs.
    pub fn run(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>, ExecError> {
        self.run_with_stats(inputs).map(|(outs, _)| outs)
    }

    /// Hands finished tensors (typically the outputs of an earlier run) back
    /// to this executable's buffer pool, so later runs write into them
    /// instead of allocating. A fresh buffer is zero-filled by the allocator:
    /// one extra pass over memory that dominates when a function returns
    /// large outputs (vmapped per-example gradients: 26 MB per call). A
    /// recycled buffer is simply overwritten, as every kernel writes all of
    /// its output. Only tensors whose dtype and element count some value of
    /// the function has are kept, at most as many per kind as the function
    /// has such values, so the pool stays bounded.
    pub fn recycle(&self, tensors: impl IntoIterator<Item = Tensor>) {
        let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        for t in tensors {
            let key = (t.dtype(), t.numel());
            let room = self.kinds.get(&key).copied().unwrap_or(0);
            if pool.free.get(&key).map_or(0, Vec::len) < room {
                pool.put(t);
            }
        }
    }

    /// Runs and also reports memory and kernel figures.
    pub fn run_with_stats(&self, inputs: &[&Tensor]) -> Result<(Vec<Tensor>, RunStats), ExecError> {
        self.run_inputs(inputs.iter().map(|&t| Input::Borrowed(t)).collect())
    }

    /// Runs with some inputs donated: a donated tensor's buffer belongs to
    /// the run, which hands it to its buffer pool after the input's last
    /// reader, so values computed later (the updated parameters of an
    /// optimizer step, say) are written into it instead of a fresh buffer;
    /// a donated input the function returns as is comes back without a
    /// copy. Results are those of [`Executable::run`]. The memory figures
    /// count donated buffers as the run's own from its start.
    pub fn run_donating(&self, inputs: Vec<Input<'_>>) -> Result<(Vec<Tensor>, RunStats), ExecError> {
        self.run_inputs(inputs)
    }

    fn run_inputs(&self, inputs: Vec<Input<'_>>) -> Result<(Vec<Tensor>, RunStats), ExecError> {
        let refs: Vec<&Tensor> = inputs.iter().map(Input::tensor).collect();
        self.check_inputs(&refs)?;
        drop(refs);
        // See Note [Nested peak bytes].
        let enclosing = NESTED_PEAK.with(Cell::get);
        // Sub-functions planned while this runs get its options.
        let outer_options = CONTEXT.with(|c| c.replace(Some(self.options)));
        // Take the pool so concurrent runs never share buffers; a concurrent
        // run simply starts with an empty pool.
        let mut pool = std::mem::take(&mut *self.pool.lock().unwrap_or_else(|e| e.into_inner()));
        let result = self.run_inner(inputs, &mut pool);
        *self.pool.lock().unwrap_or_else(|e| e.into_inner()) = pool;
        let mine = result.as_ref().map_or(0, |(_, s)| s.peak_bytes);
        NESTED_PEAK.with(|c| c.set(enclosing.max(mine)));
        CONTEXT.with(|c| c.set(outer_options));
        result
    }

    fn check_inputs(&self, inputs: &[&Tensor]) -> Result<(), ExecError> {
        let f = &self.func;
        if inputs.len() != f.params.len() {
            return Err(ExecError::InputCount { func: f.name.clone(), expected: f.params.len(), got: inputs.len() });
        }
        for (i, (&p, t)) in f.params.iter().zip(inputs).enumerate() {
            if f.ty(p).dtype != t.dtype() || f.ty(p).shape != t.shape() {
                return Err(ExecError::InputType {
                    func: f.name.clone(),
                    index: i,
                    expected: f.ty(p).clone(),
                    got: t.ty(),
                });
            }
        }
        Ok(())
    }

    fn run_inner<'a>(&'a self, inputs: Vec<Input<'a>>, pool: &mut Pool) -> Result<(Vec<Tensor>, RunStats), ExecError> {
        let f = &*self.func;
        let mut stats = RunStats::default();
        pool.held = pool.pooled_bytes();
        let mut env: Vec<Slot<'a>> = (0..f.n_values()).map(|_| Slot::Empty).collect();
        for (&p, t) in f.params.iter().zip(inputs) {
            env[p.index()] = match t {
                Input::Borrowed(t) => Slot::Borrowed(t),
                Input::Donated(t) => {
                    pool.held += t.size_bytes();
                    Slot::Owned(t)
                }
            };
        }
        pool.peak = pool.held;
        let mut regions = self.plan.regions.iter().peekable();
        let mut i = 0;
        while i < self.plan.steps.len() {
            // A region whose row kernel is ready runs instead of its steps.
            while regions.peek().is_some_and(|r| r.start < i) {
                regions.next();
            }
            if let Some(r) = regions.peek().filter(|r| r.start == i) {
                if let Some(native) = r.native.as_ref().and_then(|s| s.get()) {
                    settle(&mut env, r.inputs.iter().copied(), pool)?;
                    let mut outs: Vec<Tensor> =
                        r.outputs.iter().map(|&v| pool.take(f.ty(v), &mut stats)).collect::<Result<_, _>>()?;
                    let ins: Vec<&Tensor> = r.inputs.iter().map(|&v| env[v.index()].get()).collect::<Result<_, _>>()?;
                    run_region(r, native, &ins, &mut outs)?;
                    stats.kernels += 1;
                    for (&v, t) in r.outputs.iter().zip(outs) {
                        env[v.index()] = Slot::Owned(t);
                    }
                    for k in r.start..r.end {
                        self.release(k, &mut env, pool);
                    }
                    i = r.end;
                    continue;
                }
            }
            let step = &self.plan.steps[i];
            match *step {
                Step::Eqn(e) => settle(&mut env, f.eqns[e].inputs.iter().copied(), pool)?,
                Step::Group(g) => settle(&mut env, self.plan.groups[g].reads(), pool)?,
            }
            if let Some(started) = self.start_collective(step, &env)? {
                let Step::Eqn(e) = *step else { unreachable!("start_collective only starts equations") };
                env[f.eqns[e].outputs[0].index()] = Slot::Pending(started);
                stats.kernels += 1;
                stats.collectives_started += 1;
                self.release(i, &mut env, pool);
                i += 1;
                continue;
            }
            let (outputs, outs) = match *step {
                Step::Eqn(e) => {
                    let eqn = &f.eqns[e];
                    if let (Prim::Constant(c), [v]) = (&eqn.prim, &eqn.outputs[..]) {
                        // A constant is read from the plan where it lies, like
                        // a borrowed parameter: copying it into a fresh buffer
                        // every run cost as much as a kernel (GradBench `det`'s
                        // permutation tables, 420 KB).
                        env[v.index()] = Slot::Borrowed(&c.value);
                        stats.kernels += 1;
                        self.release(i, &mut env, pool);
                        i += 1;
                        continue;
                    }
                    let mut outs: Vec<Tensor> =
                        eqn.outputs.iter().map(|&v| pool.take(f.ty(v), &mut stats)).collect::<Result<_, _>>()?;
                    let ins: Vec<&Tensor> =
                        eqn.inputs.iter().map(|&v| env[v.index()].get()).collect::<Result<_, _>>()?;
                    NESTED_PEAK.with(|c| c.set(0));
                    eqn.prim.kernel(&ins, &mut outs)?;
                    let nested = NESTED_PEAK.with(Cell::get);
                    pool.peak = pool.peak.max(pool.held + nested);
                    (&eqn.outputs, outs)
                }
                Step::Group(g) if self.in_place_ready(g) => {
                    let group = &self.plan.groups[g];
                    let outs = self.run_group_in_place(i, g, &mut env, pool, &mut stats)?;
                    (&group.outputs, outs)
                }
                Step::Group(g) => {
                    let group = &self.plan.groups[g];
                    let mut outs: Vec<Tensor> =
                        group.outputs.iter().map(|&v| pool.take(f.ty(v), &mut stats)).collect::<Result<_, _>>()?;
                    let ins: Vec<&Tensor> =
                        group.inputs.iter().map(|&v| env[v.index()].get()).collect::<Result<_, _>>()?;
                    let scalars = group_scalars(group, &env)?;
                    group.run(&ins, &scalars, &mut outs)?;
                    (&group.outputs, outs)
                }
            };
            stats.kernels += 1;
            for (&v, t) in outputs.iter().zip(outs) {
                env[v.index()] = Slot::Owned(t);
            }
            self.release(i, &mut env, pool);
            i += 1;
        }
        settle(&mut env, f.outputs.iter().copied(), pool)?;
        let mut results = Vec::with_capacity(f.outputs.len());
        for (k, &v) in f.outputs.iter().enumerate() {
            let repeated_later = f.outputs[k + 1..].contains(&v);
            let t = match std::mem::replace(&mut env[v.index()], Slot::Empty) {
                Slot::Owned(t) if repeated_later => {
                    let c = t.clone();
                    env[v.index()] = Slot::Owned(t);
                    c
                }
                Slot::Owned(t) => {
                    pool.held -= t.size_bytes();
                    t
                }
                Slot::Borrowed(t) => {
                    env[v.index()] = Slot::Borrowed(t);
                    t.clone()
                }
                Slot::Empty => return Err(internal(format!("output {v} was released before the end"))),
                Slot::Pending(_) => return Err(internal(format!("output {v} was not waited for"))),
            };
            results.push(t);
        }
        stats.peak_bytes = pool.peak;
        Ok((results, stats))
    }
}

impl Executable {
    /// Whether group `g` runs native code that may write an output in place
    /// of an input (see [`Executable::run_group_in_place`]).
    fn in_place_ready(&self, g: usize) -> bool {
        let group = &self.plan.groups[g];
        group.in_place.iter().any(|c| !c.is_empty()) && group.native.as_ref().is_some_and(|s| s.get().is_some())
    }

    /// Runs group `g` (step `i`) natively, writing each output into the
    /// buffer of an input that dies at this step when the kernel allows it
    /// (`kernel::in_place_candidates`) and the run owns that buffer (a value
    /// computed earlier, or a donated parameter): no fresh buffer, and the
    /// input's memory is reused while it is still in cache.
    fn run_group_in_place<'a>(
        &self,
        i: usize,
        g: usize,
        env: &mut [Slot<'a>],
        pool: &mut Pool,
        stats: &mut RunStats,
    ) -> Result<Vec<Tensor>, ExecError> {
        let f = &*self.func;
        let group = &self.plan.groups[g];
        let native = group
            .native
            .as_ref()
            .and_then(|s| s.get())
            .ok_or_else(|| internal("in-place group without code".into()))?;
        let dying = &self.release_after[i];
        let mut donor: Vec<Option<usize>> = vec![None; group.inputs.len()]; // input -> output
        let mut outs = Vec::with_capacity(group.outputs.len());
        for (k, &v) in group.outputs.iter().enumerate() {
            let pick = group.in_place.get(k).and_then(|c| {
                c.iter().copied().find(|&j| {
                    let u = group.inputs[j];
                    donor[j].is_none()
                        && dying.contains(&u)
                        && matches!(env[u.index()], Slot::Owned(_))
                        && group.reads().filter(|&w| w == u).count() == 1
                })
            });
            match pick {
                Some(j) => {
                    let u = group.inputs[j];
                    let Slot::Owned(mut t) = std::mem::replace(&mut env[u.index()], Slot::Empty) else {
                        return Err(internal(format!("in-place input {u} is not owned")));
                    };
                    t.repurpose(f.ty(v));
                    stats.reused_buffers += 1;
                    donor[j] = Some(k);
                    outs.push(t);
                }
                None => outs.push(pool.take(f.ty(v), stats)?),
            }
        }
        let ins: Vec<Result<&Tensor, usize>> = group
            .inputs
            .iter()
            .zip(&donor)
            .map(|(&v, d)| match d {
                Some(k) => Ok(Err(*k)),
                None => env[v.index()].get().map(Ok),
            })
            .collect::<Result<_, _>>()?;
        let scalars = group_scalars(group, env)?;
        group.run_in_place(native, &ins, &scalars, &mut outs)?;
        Ok(outs)
    }

    /// Returns the buffers whose last reader is step `i` to the pool (those
    /// a region's kernel never produced are simply absent).
    fn release(&self, i: usize, env: &mut [Slot<'_>], pool: &mut Pool) {
        for &v in &self.release_after[i] {
            match std::mem::replace(&mut env[v.index()], Slot::Empty) {
                Slot::Owned(t) => pool.put(t),
                // A collective nobody reads (dead code elimination removes
                // most): it must still complete, since the other ranks take
                // part in it; its result, or its failure, is dropped.
                Slot::Pending(s) => drop(s.wait()),
                Slot::Empty | Slot::Borrowed(_) => {}
            }
        }
    }

    /// Starts step `step` in the background when it is an all-reduce and
    /// [`ExecOptions::overlap`] is on (see [`crate::ops::collective::Started`]).
    fn start_collective(&self, step: &Step, env: &[Slot<'_>]) -> Result<Option<Started>, ExecError> {
        if !self.options.overlap {
            return Ok(None);
        }
        let Step::Eqn(e) = *step else { return Ok(None) };
        let eqn = &self.func.eqns[e];
        match &eqn.prim {
            Prim::Collective(c) if c.is_all_reduce() => c.start(env[eqn.inputs[0].index()].get()?),
            _ => Ok(None),
        }
    }
}

/// Waits for the collectives in flight among `values` and puts their
/// results in place (a fresh buffer each, counted like a pool allocation).
fn settle(env: &mut [Slot<'_>], values: impl Iterator<Item = Value>, pool: &mut Pool) -> Result<(), ExecError> {
    for v in values {
        if let Slot::Pending(_) = env[v.index()] {
            let Slot::Pending(s) = std::mem::replace(&mut env[v.index()], Slot::Empty) else {
                unreachable!("the slot was just matched as pending")
            };
            let t = s.wait()?;
            pool.held += t.size_bytes();
            pool.peak = pool.peak.max(pool.held);
            env[v.index()] = Slot::Owned(t);
        }
    }
    Ok(())
}

/// A group's one-element operands: run-time values from `env`, folded
/// ones as they are.
fn group_scalars<'e>(group: &'e crate::exec::fuse::Group, env: &'e [Slot<'_>]) -> Result<Vec<&'e Tensor>, ExecError> {
    group
        .scalars
        .iter()
        .map(|s| match s {
            Scalar::Value(v) => env[v.index()].get(),
            Scalar::Folded(t) => Ok(t),
        })
        .collect()
}

/// Runs a region's row kernel: `ins` and `outs` follow the kernel's read
/// and written arguments, checked here against their dtypes and lengths.
fn run_region(
    r: &crate::kernel::rows::Region,
    f: &crate::kernel::native::NativeFn,
    ins: &[&Tensor],
    outs: &mut [Tensor],
) -> Result<(), ExecError> {
    let args = &r.kernel.args;
    let ok = args.len() == ins.len() + outs.len()
        && ins
            .iter()
            .map(|t| (t.dtype(), t.numel()))
            .chain(outs.iter().map(|t| (t.dtype(), t.numel())))
            .zip(args)
            .all(|((d, n), a)| a.dtype == d && a.len == n);
    if !ok {
        return Err(internal(format!("row kernel {} operands do not match its arguments", r.kernel.name)));
    }
    // At most one task per row: a row's reduction is never split.
    let tasks = crate::ops::kernel::parallel_tasks(r.kernel.units()).min(r.rows);
    let ins: Vec<Result<&Tensor, usize>> = ins.iter().map(|&t| Ok(t)).collect();
    crate::kernel::native::run_group(f, r.rows, &ins, outs, tasks);
    Ok(())
}

// Note [Nested peak bytes]
// Primitives that hold sub-functions (call, checkpoint, custom rules) run
// them with a nested executor on the same thread. A nested run publishes its
// peak in NESTED_PEAK; the enclosing run clears it before each kernel and
// afterwards counts `held + nested peak` towards its own peak, so the figure
// of the outer run includes the memory its sub-functions used.
// Kernels that hold memory of their own between nested runs (a loop's
// carries, the carry stack of reverse mode) report `held + that run's peak`
// through `note_nested_peak`, so the enclosing figure includes it.
thread_local! {
    static NESTED_PEAK: Cell<usize> = const { Cell::new(0) };
    /// The options of the innermost executable running on this thread.
    static CONTEXT: Cell<Option<ExecOptions>> = const { Cell::new(None) };
}

/// Reports that a kernel held `bytes` at some point while it ran (see
/// Note [Nested peak bytes]); the enclosing run counts the largest report.
pub fn note_nested_peak(bytes: usize) {
    NESTED_PEAK.with(|c| c.set(c.get().max(bytes)));
}

/// Runs a function, planning it at most once per callee: the plan (and its
/// buffer pool) is cached by [`plan_cached`], so a sub-function run on every
/// iteration of a loop, or on every call of an enclosing function, is
/// verified and planned only the first time.
pub fn run_func(func: impl Into<Arc<Func>>, inputs: &[&Tensor]) -> Result<Vec<Tensor>, ExecError> {
    plan_cached(&func.into())?.run(inputs)
}

// Note [Plan cache]
// Sub-functions are held as `Arc<Func>` and never mutated after
// construction, so the allocation's address identifies the function while it
// is alive. The cache maps that address (and the options planned with) to the plan, together with a `Weak`
// that tells whether the address still belongs to the same function (an
// address can be reused after the function is dropped). Dead entries are
// swept when the cache has doubled since the last sweep, so the cache
// stays proportional to the live sub-functions. An entry is dead when no
// one but its own plan holds the function: a plan holds the very `Arc` it
// was planned from when no pass changed it.
struct PlanCache {
    plans: HashMap<(usize, ExecOptions), (std::sync::Weak<Func>, Arc<Executable>)>,
    sweep_at: usize,
}

static PLANS: Mutex<Option<PlanCache>> = Mutex::new(None);

/// The plan of `func`, made on first use and shared afterwards (see
/// Note [Plan cache]). Planning uses the options of the executable running
/// on this thread (a loop body gets its loop's), else
/// [`ExecOptions::from_env`].
pub fn plan_cached(func: &Arc<Func>) -> Result<Arc<Executable>, ExecError> {
    let options = CONTEXT.with(Cell::get).unwrap_or_else(ExecOptions::from_env);
    let key = (Arc::as_ptr(func) as usize, options);
    {
        let guard = PLANS.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((weak, exe)) = guard.as_ref().and_then(|c| c.plans.get(&key)) {
            if weak.upgrade().is_some_and(|f| Arc::ptr_eq(&f, func)) {
                return Ok(exe.clone());
            }
        }
    }
    // Plan outside the lock: planning may itself plan nested callees.
    let exe = Arc::new(Executable::with_options(func.clone(), options)?);
    let mut guard = PLANS.lock().unwrap_or_else(|e| e.into_inner());
    let cache = guard.get_or_insert_with(|| PlanCache { plans: HashMap::new(), sweep_at: 64 });
    cache.plans.insert(key, (Arc::downgrade(func), exe.clone()));
    if cache.plans.len() >= cache.sweep_at {
        // A plan of a function that planning left as it was holds the
        // function itself: that reference does not keep the entry (it
        // kept every such plan, and its buffer pool, for good).
        cache
            .plans
            .retain(|_, (w, exe)| w.strong_count() > usize::from(std::ptr::eq(w.as_ptr(), Arc::as_ptr(exe.func()))));
        cache.sweep_at = (cache.plans.len() * 2).max(64);
    }
    Ok(exe)
}

fn internal(msg: String) -> ExecError {
    ExecError::kernel("executor", format!("internal error: {msg}"))
}

/// An input of [`Executable::run_donating`].
#[derive(Debug)]
pub enum Input<'a> {
    /// Read only; the caller keeps it.
    Borrowed(&'a Tensor),
    /// Handed over: the run reuses its buffer once the input is dead.
    Donated(Tensor),
}

impl Input<'_> {
    fn tensor(&self) -> &Tensor {
        match self {
            Input::Borrowed(t) => t,
            Input::Donated(t) => t,
        }
    }
}

enum Slot<'a> {
    Empty,
    Borrowed(&'a Tensor),
    Owned(Tensor),
    /// A collective in flight ([`ExecOptions::overlap`]), waited for by
    /// [`settle`] before its first reader.
    Pending(Started),
}

impl Slot<'_> {
    fn get(&self) -> Result<&Tensor, ExecError> {
        match self {
            Slot::Borrowed(t) => Ok(t),
            Slot::Owned(t) => Ok(t),
            Slot::Empty => Err(internal("operand read after release (liveness plan is wrong)".into())),
            Slot::Pending(_) => Err(internal("collective result read before it was waited for".into())),
        }
    }
}

/// Liveness over the schedule: for each step, the step-defined values whose
/// last reader it is (or that nobody reads, released right after
/// definition). Values private to a fused group are never defined here.
/// Outputs are returned, so they are never released; parameters (borrowed or
/// donated, see [`Executable::run_donating`]) are, after their last reader.
fn plan_releases(func: &Func, plan: &Plan) -> Vec<Vec<Value>> {
    let n = func.n_values();
    let steps = &plan.steps;
    let reads = |s: &Step| -> Vec<Value> {
        match *s {
            Step::Eqn(e) => func.eqns[e].inputs.clone(),
            Step::Group(g) => plan.groups[g].reads().collect(),
        }
    };
    let defs = |s: &Step| -> &[Value] {
        match *s {
            Step::Eqn(e) => &func.eqns[e].outputs,
            Step::Group(g) => &plan.groups[g].outputs,
        }
    };
    let mut last_use: Vec<Option<usize>> = vec![None; n];
    let mut keep = vec![false; n];
    for &p in &func.params {
        keep[p.index()] = true;
    }
    for &v in &func.outputs {
        keep[v.index()] = true;
    }
    for (i, s) in steps.iter().enumerate() {
        for v in reads(s) {
            last_use[v.index()] = Some(i);
        }
    }
    let mut release = vec![Vec::new(); steps.len()];
    // Parameters are released after their last reader too: a borrowed one
    // is only forgotten, a donated one goes to the pool.
    for &p in &func.params {
        if !func.outputs.contains(&p) {
            if let Some(at) = last_use[p.index()] {
                release[at].push(p);
            }
        }
    }
    for (i, s) in steps.iter().enumerate() {
        for &v in defs(s) {
            if keep[v.index()] {
                continue;
            }
            let at = last_use[v.index()].unwrap_or(i);
            release[at].push(v);
        }
    }
    for list in &mut release {
        list.sort();
        list.dedup();
    }
    release
}

/// A hasher for the pool's small integer keys: SipHash showed as ~4% of
/// small loop bodies, where every equation takes and returns a buffer.
#[derive(Default)]
struct KindHasher(u64);

impl std::hash::Hasher for KindHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_usize(&mut self, x: usize) {
        self.write_u64(x as u64);
    }
}

type KindMap<V> = HashMap<(crate::dtype::DType, usize), V, std::hash::BuildHasherDefault<KindHasher>>;

/// Recycled buffers keyed by (dtype, element count), with byte accounting.
#[derive(Debug, Default)]
struct Pool {
    free: KindMap<Vec<Tensor>>,
    held: usize,
    peak: usize,
}

impl Pool {
    fn pooled_bytes(&self) -> usize {
        self.free.values().flatten().map(Tensor::size_bytes).sum()
    }

    /// A buffer for a value of type `ty`: a pooled one, or a fresh one
    /// allocated fallibly (an error, not an abort, when memory runs out).
    fn take(&mut self, ty: &TensorType, stats: &mut RunStats) -> Result<Tensor, ExecError> {
        if let Some(mut t) = self.free.get_mut(&(ty.dtype, ty.numel())).and_then(Vec::pop) {
            t.repurpose(ty);
            stats.reused_buffers += 1;
            return Ok(t);
        }
        let t = Tensor::try_zeros(ty)?;
        let bytes = ty.size_bytes();
        self.held += bytes;
        self.peak = self.peak.max(self.held);
        stats.fresh_bytes += bytes;
        Ok(t)
    }

    fn put(&mut self, t: Tensor) {
        self.free.entry((t.dtype(), t.numel())).or_default().push(t);
    }
}

#[cfg(test)]
mod tests {
    use super::plan_cached;
    use crate::{Builder, DType, TensorType};
    use std::sync::Arc;

    /// Plans of functions no one holds any more leave the cache, also when
    /// planning changed nothing (the plan then holds the function itself,
    /// which kept every such plan and its buffers alive for good).
    #[test]
    fn plans_of_dropped_functions_are_swept() {
        let mut b = Builder::new("double");
        let x = b.param(TensorType::new(DType::F64, vec![3]));
        let y = b.add(x, x).unwrap();
        let f = b.finish(&[y]).unwrap();
        let mut gone = Vec::new();
        for _ in 0..1000 {
            let g = Arc::new(f.clone());
            let exe = plan_cached(&g).unwrap();
            assert!(Arc::ptr_eq(exe.func(), &g), "planning changes nothing in this function");
            gone.push(Arc::downgrade(&g));
        }
        let alive = gone.iter().filter(|w| w.strong_count() > 0).count();
        // Sweeps run when the cache doubles: what other tests keep planned
        // meanwhile delays them, never by this much.
        assert!(alive < 500, "{alive} of 1000 dropped functions are still held by the plan cache");
    }
}
