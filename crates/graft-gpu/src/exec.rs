//! Running a planned function on the device.
//!
//! The function is planned by the CPU executor (fusion groups, row-kernel
//! regions) with native compilation off, and its plan is taken in
//! kernel-IR form ([`Executable::device_plan`]). Each step then becomes:
//!
//! - **kernels** (fused groups, row kernels, single elementwise and
//!   layout equations): rendered to WGSL by `kernel::render_wgsl` and run
//!   on the device;
//! - **`dot_general`** on f32: the tiled GEMM of [`crate::gemm`], after
//!   kernel-IR copies when an operand's layout needs one;
//! - **f32 and i32 reductions** the planner left as equations,
//!   **`argmax`/`argmin`** and **cumulative ops**: row kernels of the plan,
//!   from their op families' device forms (`ops::reduce::device_kernel`,
//!   `ops::cumulative::device_kernel`), rendered like any other;
//!   **`argsort`** as ranks into a temporary, then their inverse
//!   (`ops::sort::argsort_device_kernels`), or for long lines as a bitonic
//!   network (`ops::sort::argsort_bitonic_kernels`), and cumulative ops
//!   over long lines as Hillis-Steele passes
//!   (`ops::cumulative::device_pass_kernels`): launches chained through
//!   temporaries of their own (see [`ChainStep`]);
//! - **`conv_general`** on f32: an im2col kernel of the kernel IR
//!   (`ops::conv::im2col_kernel`) and the GEMM over (image, group), whose
//!   result is the output's layout (see [`prepare_conv`]); pooling windows
//!   come as kernels of the plan (`ops::window::device_kernel`);
//! - **aliases** (reshape, stop_gradient): the operand's buffer;
//! - **loops** (`scan`, including `fori`, and `while`) whose body (and
//!   predicate) run wholly on the device: driven from the host, each step
//!   the body's own device plan on the carries' device buffers, `xs`
//!   slices and `ys` rows moved by buffer copies on the device, nothing
//!   read back (see [`ScanStep`]); a `while` reads back its one-element
//!   predicate per step, the one wait a run-time trip count needs;
//! - **everything else** (loops whose bodies need the host, long sorts
//!   and cumulative ops, decompositions...): on the host, by
//!   the primitive's interpreter kernel, with explicit transfers: its
//!   operands are downloaded (one wait for all of them) and its results
//!   uploaded when a device step first reads them. [`GpuExecutable::host_steps`]
//!   lists such steps and why, and [`GpuStats`] counts the transfers.
//!
//! Values stay on the device between device steps. Buffers come from a
//! pool and go back to it after a value's last reader (liveness over the
//! device plan), so a function called repeatedly stops allocating.

use crate::device::{device_bytes, DevBuf, Gpu};
use crate::gemm::{self, GemmPlan};
use crate::GpuError;
use graft_core::exec::device::{DevicePlan, DeviceStep};
use graft_core::ir::Func;
use graft_core::kernel::lines::LINE_WORK_MAX;
use graft_core::kernel::render_wgsl::{render_wgsl, WgslKernel};
use graft_core::kernel::CompileMode;
use graft_core::kernel::{Access, Kernel};
use graft_core::ops::Op;
use graft_core::{DType, ExecOptions, Executable, Prim, Tensor, Value};
use std::collections::HashMap;
use std::sync::Arc;

/// One kernel launch of a device step.
#[derive(Debug)]
struct Launch {
    pipeline: Arc<wgpu::ComputePipeline>,
    rendered: WgslKernel,
    /// Values bound to the kernel's arguments, in order.
    binds: Vec<Value>,
    /// Which arguments are written.
    writes: Vec<bool>,
    /// Element count of each argument.
    lens: Vec<usize>,
    name: String,
}

/// A step as prepared for the device.
#[derive(Debug)]
enum Prepared {
    /// Kernel launches in order.
    Device {
        launches: Vec<Launch>,
        what: String,
    },
    /// A matrix product.
    Gemm(Box<GemmStep>),
    /// A convolution: im2col and a product per part of the batch.
    Conv(Box<ConvStep>),
    /// An `argsort`: each element's rank, then the permutation.
    /// Launches chained through temporaries of their own.
    Chain(Box<ChainStep>),
    Alias {
        src: Value,
        dst: Value,
    },
    /// A parameter-free equation (`constant`, `iota`, `full`...) with no
    /// kernel: evaluated once at plan time and kept on the device, so
    /// repeated calls upload nothing for it.
    Const {
        value: Value,
        buf: Arc<DevBuf>,
    },
    /// Equations run on the host, in order.
    Host {
        eqns: Vec<usize>,
        reason: String,
    },
    /// A `scan` whose body runs on the device.
    Scan(Box<ScanStep>),
    /// A `while` whose predicate and body run on the device.
    While(Box<WhileStep>),
}

/// A `scan` on the device: the body is planned for the device on its own
/// (a nested [`GpuExecutable`] with no host step). Per step the host
/// records, without waiting: a buffer copy of each `xs` slice, the body's
/// launches on (consts, carries, slices), and a buffer copy of each `y`
/// into its row of the stacked result; the body's carry results are the
/// next step's carries (buffers, no copy). Every value is 4 bytes per
/// element on the device, so rows are 4-byte aligned as copies require.
/// The body runs the same kernels a step of the function would, so the
/// results are those of the steps run one by one.
#[derive(Debug)]
struct ScanStep {
    body: GpuExecutable,
    n_consts: usize,
    n_carry: usize,
    length: usize,
    reverse: bool,
    inputs: Vec<Value>,
    outputs: Vec<Value>,
}

/// A `while` on the device: the predicate and the body are nested
/// [`GpuExecutable`]s with no host step; per step the predicate runs on the
/// device and its one element is read back (a wait per step: the trip count
/// is data), then the body runs on the carries' buffers.
#[derive(Debug)]
struct WhileStep {
    cond: GpuExecutable,
    body: GpuExecutable,
    n_consts: usize,
    inputs: Vec<Value>,
    outputs: Vec<Value>,
}

/// A matrix product: optional operand copies (launches binding the
/// operand and a temporary), then the GEMM.
#[derive(Debug)]
struct GemmStep {
    lhs_copy: Option<Launch>,
    rhs_copy: Option<Launch>,
    pipeline: Arc<wgpu::ComputePipeline>,
    plan: GemmPlan,
    lhs: Value,
    rhs: Value,
    out: Value,
}

/// A convolution (see [`prepare_conv`]): the batch in parts, each an
/// im2col launch (none when the window is the identity and the lhs already
/// is the matrix) and a GEMM that writes its part of the result in place.
#[derive(Debug)]
struct ConvStep {
    parts: Vec<ConvPart>,
    lhs: Value,
    rhs: Value,
    out: Value,
}

/// One part of a [`ConvStep`]'s batch.
#[derive(Debug)]
struct ConvPart {
    /// The im2col kernel, bound to the lhs and a temporary.
    im2col: Option<Launch>,
    gemm: gemm::Gemm,
    pipeline: Arc<wgpu::ComputePipeline>,
}

/// Where an argument of a [`ChainStep`] launch lives.
#[derive(Debug)]
enum ChainBuf {
    /// The equation's operand.
    Input,
    /// The equation's result.
    Output,
    /// The step's temporary of that index.
    Temp(usize),
    /// A constant uploaded once (a pass's parameters).
    Param(Arc<DevBuf>),
}

/// One equation run as launches chained through temporaries of its own:
/// an `argsort` as ranks then their inverse
/// (`ops::sort::argsort_device_kernels`) or as a bitonic network
/// (`ops::sort::argsort_bitonic_kernels`, one pass kernel called with
/// each pass's parameters), a long cumulative op as Hillis-Steele passes
/// (`ops::cumulative::device_pass_kernels`). The temporaries live for the
/// step only (back to the pool once it is recorded).
#[derive(Debug)]
struct ChainStep {
    /// The primitive, for messages.
    what: &'static str,
    /// The line `describe` prints for it.
    summary: String,
    /// The distinct kernels.
    launches: Vec<Launch>,
    /// The launches in order: which kernel, on which buffers.
    calls: Vec<(usize, Vec<ChainBuf>)>,
    /// Bytes of each temporary.
    temps: Vec<u64>,
    x: Value,
    out: Value,
}

/// Largest im2col matrix of one part of a convolution's batch, in bytes
/// (besides the adapter's binding size and a quarter of the device memory
/// budget, when one is set): a larger batch is split, so the
/// temporary stays a fraction of the device memory (and of a memory budget)
/// while each product still has `images x groups` matrices to run in z.
const IM2COL_BYTES_MAX: u64 = 64 << 20;

/// Most parts a convolution's batch is split into (each part compiles its
/// own two kernels, whose offsets are constants); beyond that it runs on
/// the host.
const CONV_PARTS_MAX: usize = 64;

/// Transfers and launches of one run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GpuStats {
    /// Kernel launches on the device.
    pub launches: usize,
    /// Equations run on the host.
    pub host_eqns: usize,
    /// Host-to-device copies (parameters and host results read by device steps).
    pub uploads: usize,
    /// Device-to-host copies (operands of host steps, and results).
    pub downloads: usize,
    /// Bytes uploaded.
    pub bytes_up: usize,
    /// Bytes downloaded.
    pub bytes_down: usize,
    /// Waits for the device (one per batch of downloads).
    pub syncs: usize,
}

impl GpuStats {
    /// Adds another run's counts (a loop body's, per step).
    fn add(&mut self, o: &GpuStats) {
        self.launches += o.launches;
        self.host_eqns += o.host_eqns;
        self.uploads += o.uploads;
        self.downloads += o.downloads;
        self.bytes_up += o.bytes_up;
        self.bytes_down += o.bytes_down;
        self.syncs += o.syncs;
    }
}

/// A function planned for the GPU.
pub struct GpuExecutable {
    gpu: Arc<Gpu>,
    exe: Executable,
    steps: Vec<Prepared>,
    /// Values to drop after each step (their last reader).
    release_after: Vec<Vec<Value>>,
    /// The equation defining each value (for constants folded into groups).
    def: HashMap<Value, usize>,
}

impl std::fmt::Debug for GpuExecutable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GpuExecutable({}, {} steps)", self.exe.func().name, self.steps.len())
    }
}

/// Where a value lives during a run.
#[derive(Default, Clone)]
struct Slot {
    host: Option<Arc<Tensor>>,
    dev: Option<Arc<DevBuf>>,
}

/// The first value of a 64-bit dtype in `func` (parameters first, then
/// equation results), described with its name and source line, if any.
pub fn first_wide_value(func: &Func) -> Option<String> {
    let wide = |v: Value| matches!(func.ty(v).dtype, DType::F64 | DType::I64);
    let name = |v: Value| match func.names.get(v) {
        Some(n) => format!("`{n}` ({v})"),
        None => format!("{v}"),
    };
    if let Some((j, &p)) = func.params.iter().enumerate().find(|(_, &p)| wide(p)) {
        return Some(format!("parameter {j}, {}: {}", name(p), func.ty(p)));
    }
    for eqn in &func.eqns {
        if let Some(&v) = eqn.outputs.iter().find(|&&v| wide(v)) {
            let at = match &eqn.loc {
                Some(l) => format!(" at {l}"),
                None => String::new(),
            };
            return Some(format!("{}: {}, the result of {}{at}", name(v), func.ty(v), eqn.prim.name()));
        }
    }
    None
}

impl GpuExecutable {
    /// Plans `func` for the process's GPU ([`crate::device::global`]).
    /// Fails without an adapter, and for a function with an `f64` or `i64`
    /// value (WGSL has no 64-bit types), naming the first such value.
    pub fn new(func: impl Into<Arc<Func>>) -> Result<GpuExecutable, GpuError> {
        let gpu = crate::device::global()?;
        GpuExecutable::with_gpu(gpu, func)
    }

    /// Plans `func` for `gpu`.
    pub fn with_gpu(gpu: Arc<Gpu>, func: impl Into<Arc<Func>>) -> Result<GpuExecutable, GpuError> {
        let mut func = func.into();
        // The device's convolution reads canonical layouts; a swapped one (a
        // weight gradient) becomes transposes, which are layout kernels here.
        if let Some(g) = graft_core::ops::conv::canonical_layouts(&func).map_err(|e| GpuError::Exec(e.into()))? {
            func = Arc::new(g);
        }
        if let Some(v) = first_wide_value(&func) {
            return Err(GpuError::Wide(format!("in {}: {v}", func.name)));
        }
        let options = ExecOptions { compile: CompileMode::Off, ..ExecOptions::default() };
        let exe = Executable::with_options(func, options).map_err(GpuError::Exec)?;
        let f = exe.func().clone();
        // Planning may rewrite (constant folding); check the planned form too.
        if let Some(v) = first_wide_value(&f) {
            return Err(GpuError::Wide(format!("in {}: {v}", f.name)));
        }
        let plan: DevicePlan = exe.device_plan();
        let mut steps = Vec::with_capacity(plan.steps.len());
        for step in plan.steps {
            steps.push(prepare(&gpu, &f, step)?);
        }
        let release_after = releases(&f, &steps);
        let mut def = HashMap::new();
        for (e, eqn) in f.eqns.iter().enumerate() {
            for &v in &eqn.outputs {
                def.insert(v, e);
            }
        }
        Ok(GpuExecutable { gpu, exe, steps, release_after, def })
    }

    /// The adapter this runs on.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// The function as planned.
    pub fn func(&self) -> &Arc<Func> {
        self.exe.func()
    }

    /// Steps that run on the host: the primitives and why.
    pub fn host_steps(&self) -> Vec<(String, String)> {
        let f = self.exe.func();
        self.steps
            .iter()
            .filter_map(|s| match s {
                Prepared::Host { eqns, reason } => {
                    let names: Vec<&str> = eqns.iter().map(|&e| f.eqns[e].prim.name()).collect();
                    Some((names.join(", "), reason.clone()))
                }
                _ => None,
            })
            .collect()
    }

    /// Kernel launches per run on the device, and steps on the host.
    pub fn step_counts(&self) -> (usize, usize) {
        let mut dev = 0;
        let mut host = 0;
        for s in &self.steps {
            match s {
                Prepared::Device { launches, .. } => dev += launches.len(),
                Prepared::Gemm(g) => dev += 1 + g.lhs_copy.is_some() as usize + g.rhs_copy.is_some() as usize,
                Prepared::Conv(c) => dev += c.parts.iter().map(|p| 1 + p.im2col.is_some() as usize).sum::<usize>(),
                Prepared::Chain(c) => dev += c.calls.len(),
                Prepared::Host { .. } => host += 1,
                // Per step of the loop.
                Prepared::Scan(s) => dev += s.body.step_counts().0,
                Prepared::While(w) => dev += w.cond.step_counts().0 + w.body.step_counts().0,
                Prepared::Alias { .. } | Prepared::Const { .. } => {}
            }
        }
        (dev, host)
    }

    /// A description of the device plan, one line per step (for `graft ir
    /// --device gpu` and `--verbose` runs).
    pub fn describe(&self) -> String {
        use std::fmt::Write;
        let f = self.exe.func();
        let mut s = String::new();
        let _ = writeln!(s, "device: {}", self.gpu.describe());
        for (i, step) in self.steps.iter().enumerate() {
            match step {
                Prepared::Device { launches, what } => {
                    let names: Vec<&str> = launches.iter().map(|l| l.name.as_str()).collect();
                    let _ = writeln!(s, "  step {i}: gpu  {what}: {}", names.join(", "));
                }
                Prepared::Gemm(step) => {
                    let (plan, g) = (&step.plan, &step.plan.gemm);
                    let copies = plan.lhs_copy.is_some() as usize + plan.rhs_copy.is_some() as usize;
                    let _ = writeln!(
                        s,
                        "  step {i}: gpu  dot_general as gemm [{}x{}x{}] x [{}x{}] ({copies} layout copies)",
                        g.batch, g.m, g.k, g.k, g.n
                    );
                }
                Prepared::Conv(c) => {
                    let g = &c.parts[0].gemm;
                    let im2col = if c.parts[0].im2col.is_some() { "im2col + " } else { "" };
                    let _ = writeln!(
                        s,
                        "  step {i}: gpu  conv_general as {im2col}gemm [{}x{}x{}] x [{}x{}] per part, {} part(s)",
                        g.batch,
                        g.m,
                        g.k,
                        g.k,
                        g.n,
                        c.parts.len()
                    );
                }
                Prepared::Chain(c) => {
                    let _ = writeln!(s, "  step {i}: gpu  {}", c.summary);
                }
                Prepared::Alias { .. } => {
                    let _ = writeln!(s, "  step {i}: --   alias (reshape/stop_gradient)");
                }
                Prepared::Const { value, .. } => {
                    let _ = writeln!(
                        s,
                        "  step {i}: gpu  constant {value}: {} (resident, uploaded at plan time)",
                        f.ty(*value)
                    );
                }
                Prepared::Host { eqns, reason } => {
                    let names: Vec<&str> = eqns.iter().map(|&e| f.eqns[e].prim.name()).collect();
                    let _ = writeln!(s, "  step {i}: HOST {}: {reason}", names.join(", "));
                }
                Prepared::Scan(sc) => {
                    let dir = if sc.reverse { ", reverse" } else { "" };
                    let _ = writeln!(
                        s,
                        "  step {i}: gpu  scan of {} steps{dir}, driven from the host; per step the body:",
                        sc.length
                    );
                    indent_body(&mut s, &sc.body.describe());
                }
                Prepared::While(w) => {
                    let _ = writeln!(
                        s,
                        "  step {i}: gpu  while, driven from the host (the predicate read back per step); the predicate:"
                    );
                    indent_body(&mut s, &w.cond.describe());
                    let _ = writeln!(s, "    the body:");
                    indent_body(&mut s, &w.body.describe());
                }
            }
        }
        s
    }

    /// The WGSL of every kernel of the plan (for `graft ir --wgsl`).
    pub fn wgsl_sources(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for step in &self.steps {
            match step {
                Prepared::Device { launches, .. } => {
                    out.extend(launches.iter().map(|l| (l.name.clone(), l.rendered.source.clone())));
                }
                Prepared::Gemm(g) => {
                    for l in g.lhs_copy.iter().chain(&g.rhs_copy) {
                        out.push((l.name.clone(), l.rendered.source.clone()));
                    }
                    out.push(("gemm".into(), gemm_source(&self.gpu, &g.plan.gemm)));
                }
                Prepared::Conv(c) => {
                    for p in &c.parts {
                        if let Some(l) = &p.im2col {
                            out.push((l.name.clone(), l.rendered.source.clone()));
                        }
                        out.push(("conv gemm".into(), gemm_source(&self.gpu, &p.gemm)));
                    }
                }
                Prepared::Chain(c) => {
                    for l in &c.launches {
                        out.push((l.name.clone(), l.rendered.source.clone()));
                    }
                }
                Prepared::Scan(s) => out.extend(s.body.wgsl_sources()),
                Prepared::While(w) => {
                    out.extend(w.cond.wgsl_sources());
                    out.extend(w.body.wgsl_sources());
                }
                _ => {}
            }
        }
        out
    }

    /// Runs on host inputs and returns host results.
    pub fn run(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>, GpuError> {
        self.run_with_stats(inputs).map(|(r, _)| r)
    }

    /// [`GpuExecutable::run`], with the run's transfer and launch counts.
    pub fn run_with_stats(&self, inputs: &[&Tensor]) -> Result<(Vec<Tensor>, GpuStats), GpuError> {
        let f = self.exe.func().clone();
        let slots = inputs.iter().map(|t| Slot { host: Some(Arc::new((*t).clone())), dev: None }).collect();
        let mut run = self.run_slots(slots, None)?;
        let outs = run.fetch(&f.outputs)?;
        Ok((outs, run.stats))
    }

    /// Runs on device tensors and leaves the results on the device: how
    /// parameters and optimizer state stay resident across the calls of a
    /// training loop (inputs a host step produced are uploaded when read).
    /// Nothing is downloaded unless a host step needs it.
    pub fn run_resident(&self, inputs: &[&DeviceTensor]) -> Result<(Vec<DeviceTensor>, GpuStats), GpuError> {
        let f = self.exe.func().clone();
        for (j, (&p, t)) in f.params.iter().zip(inputs).enumerate() {
            if t.ty != *f.ty(p) {
                return Err(GpuError::Inputs(format!("input {j} of {} is {}, expected {}", f.name, t.ty, f.ty(p))));
            }
        }
        let mut run = self.run_slots(inputs.iter().map(|t| t.slot.clone()).collect(), None)?;
        for &v in &f.outputs {
            run.ensure(v)?;
        }
        if let Some(enc) = run.enc.take() {
            self.gpu.submit(enc);
        }
        let outs =
            f.outputs.iter().map(|&v| DeviceTensor { ty: f.ty(v).clone(), slot: run.env[v.index()].clone() }).collect();
        Ok((outs, run.stats))
    }

    /// Uploads a host tensor for [`GpuExecutable::run_resident`].
    pub fn to_device(&self, t: &Tensor) -> Result<DeviceTensor, GpuError> {
        Ok(DeviceTensor { ty: t.ty(), slot: Slot { host: None, dev: Some(self.gpu.upload(t)?) } })
    }

    /// Downloads device tensors (one submission and one wait for all).
    pub fn to_host(&self, ts: &[&DeviceTensor]) -> Result<Vec<Tensor>, GpuError> {
        let mut out: Vec<Option<Tensor>> = ts.iter().map(|t| t.slot.host.as_ref().map(|h| (**h).clone())).collect();
        let need: Vec<usize> = (0..ts.len()).filter(|&i| out[i].is_none()).collect();
        let bufs: Vec<Arc<DevBuf>> = need
            .iter()
            .map(|&i| {
                ts[i].slot.dev.clone().ok_or_else(|| GpuError::Internal("a device tensor without a value".into()))
            })
            .collect::<Result<_, _>>()?;
        let items: Vec<(&DevBuf, &graft_core::TensorType)> =
            bufs.iter().zip(&need).map(|(b, &i)| (&**b, &ts[i].ty)).collect();
        let got = self.gpu.download(self.gpu.encoder(), &items)?;
        for (i, t) in need.into_iter().zip(got) {
            out[i] = Some(t);
        }
        out.into_iter().map(|t| t.ok_or_else(|| GpuError::Internal("a download went missing".into()))).collect()
    }

    /// Runs as one step of a loop: on the loop's slots, recording into the
    /// loop's encoder (`None`: a new one). Returns the result slots, the
    /// encoder with whatever is recorded and not yet submitted, and the
    /// counts.
    fn run_nested(
        &self,
        inputs: Vec<Slot>,
        enc: Option<wgpu::CommandEncoder>,
    ) -> Result<(Vec<Slot>, Option<wgpu::CommandEncoder>, GpuStats), GpuError> {
        let f = self.exe.func().clone();
        let mut run = self.run_slots(inputs, enc)?;
        for &v in &f.outputs {
            run.ensure(v)?;
        }
        let outs = f.outputs.iter().map(|v| run.env[v.index()].clone()).collect();
        Ok((outs, run.enc.take(), run.stats))
    }

    /// Checks the inputs' types and runs every step, recording into `enc`
    /// (or a new encoder); the results are in the returned run's
    /// environment.
    fn run_slots(&self, inputs: Vec<Slot>, enc: Option<wgpu::CommandEncoder>) -> Result<Run<'_>, GpuError> {
        let f = self.exe.func();
        if inputs.len() != f.params.len() {
            return Err(GpuError::Inputs(format!("{} takes {} inputs, got {}", f.name, f.params.len(), inputs.len())));
        }
        for (j, (&p, s)) in f.params.iter().zip(&inputs).enumerate() {
            let ty = f.ty(p);
            if let Some(t) = &s.host {
                if t.dtype() != ty.dtype || t.shape() != &ty.shape[..] {
                    let got = format!("{}{:?}", t.dtype(), t.shape());
                    return Err(GpuError::Inputs(format!("input {j} of {} is {got}, expected {ty}", f.name)));
                }
            }
        }
        let mut run = Run {
            gpu: &self.gpu,
            func: f,
            env: vec![Slot::default(); f.types.len()],
            enc: Some(enc.unwrap_or_else(|| self.gpu.encoder())),
            stats: GpuStats::default(),
            def: &self.def,
        };
        for (&p, s) in f.params.iter().zip(inputs) {
            run.env[p.index()] = s;
        }
        for (i, step) in self.steps.iter().enumerate() {
            run.step(step)?;
            for v in &self.release_after[i] {
                run.env[v.index()] = Slot::default();
            }
        }
        Ok(run)
    }
}

/// A value for [`GpuExecutable::run_resident`]: on the device (or, for a
/// result a host step produced, on the host until a device step reads it).
#[derive(Clone)]
pub struct DeviceTensor {
    ty: graft_core::TensorType,
    slot: Slot,
}

impl DeviceTensor {
    /// Its type.
    pub fn ty(&self) -> &graft_core::TensorType {
        &self.ty
    }
}

impl std::fmt::Debug for DeviceTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceTensor({})", self.ty)
    }
}

/// Releases: for each step, the values whose last reader it is (never the
/// function's outputs).
fn releases(f: &Func, steps: &[Prepared]) -> Vec<Vec<Value>> {
    let mut last: HashMap<Value, usize> = HashMap::new();
    for (i, s) in steps.iter().enumerate() {
        let reads: Vec<Value> = match s {
            Prepared::Device { launches, .. } => launches
                .iter()
                .flat_map(|l| l.binds.iter().zip(&l.writes).filter(|(_, w)| !**w).map(|(v, _)| *v))
                .collect(),
            Prepared::Gemm(g) => vec![g.lhs, g.rhs],
            Prepared::Conv(c) => vec![c.lhs, c.rhs],
            Prepared::Chain(c) => vec![c.x],
            Prepared::Alias { src, .. } => vec![*src],
            Prepared::Const { .. } => vec![],
            Prepared::Host { eqns, .. } => eqns.iter().flat_map(|&e| f.eqns[e].inputs.iter().copied()).collect(),
            Prepared::Scan(s) => s.inputs.clone(),
            Prepared::While(w) => w.inputs.clone(),
        };
        for v in reads {
            last.insert(v, i);
        }
    }
    let mut out = vec![Vec::new(); steps.len()];
    for (v, i) in last {
        if !f.outputs.contains(&v) {
            out[i].push(v);
        }
    }
    out
}

/// Appends a nested plan's description (its step lines, without the
/// device line) indented under a loop step.
fn indent_body(s: &mut String, body: &str) {
    for line in body.lines().skip(1) {
        s.push_str("    ");
        s.push_str(line);
        s.push('\n');
    }
}

/// Prepares one step: renders and compiles its kernels, or says why it
/// runs on the host.
fn prepare(gpu: &Arc<Gpu>, f: &Func, step: DeviceStep) -> Result<Prepared, GpuError> {
    let host = |eqns: Vec<usize>, reason: String| Ok(Prepared::Host { eqns, reason });
    match step {
        DeviceStep::Alias { src, dst } => Ok(Prepared::Alias { src, dst }),
        DeviceStep::Eqns(eqns) => host(eqns, "fused group without a kernel-IR form (f64 pow or atan2)".into()),
        DeviceStep::Kernels { kernels, eqns, what } => {
            let prims = prim_names(f, &eqns);
            let mut launches = Vec::with_capacity(kernels.len());
            for (k, binds) in kernels {
                match launch(gpu, &k, binds, &prims)? {
                    Ok(l) => launches.push(l),
                    Err(why) => return host(eqns, why),
                }
            }
            Ok(Prepared::Device { launches, what: format!("{what} ({prims})") })
        }
        DeviceStep::Eqn(e) => {
            let eqn = &f.eqns[e];
            if eqn.inputs.is_empty() && eqn.outputs.len() == 1 {
                let ty = f.ty(eqn.outputs[0]);
                if matches!(ty.dtype, DType::F32 | DType::I32 | DType::U32 | DType::Bool | DType::F16) {
                    let mut outs = vec![Tensor::try_zeros(ty)
                        .map_err(|e| GpuError::OutOfMemory(format!("the constant {}: {e}", eqn.prim.name())))?];
                    eqn.prim.kernel(&[], &mut outs).map_err(GpuError::Exec)?;
                    let buf = gpu.upload(&outs[0])?;
                    return Ok(Prepared::Const { value: eqn.outputs[0], buf });
                }
            }
            match &eqn.prim {
                Prim::DotGeneral(p) if eqn.inputs.len() == 2 && eqn.outputs.len() == 1 => {
                    let (lhs, rhs, out) = (eqn.inputs[0], eqn.inputs[1], eqn.outputs[0]);
                    let Some(plan) = gemm::plan(f, p, lhs, rhs, out) else {
                        return host(vec![e], "dot_general of non-f32 operands or an unsupported size".into());
                    };
                    let fits = [lhs, rhs, out]
                        .iter()
                        .all(|&v| device_bytes(f.ty(v)) <= gpu.limits.max_storage_buffer_binding_size);
                    if !fits {
                        return host(vec![e], "operands beyond the adapter's storage-buffer binding size".into());
                    }
                    let copy = |k: &Option<Kernel>, v: Value| -> Result<Option<Launch>, GpuError> {
                        match k {
                            None => Ok(None),
                            // The copy's output is bound to a placeholder value (the step fills it in).
                            Some(k) => match launch(gpu, k, vec![v, v], "dot_general")? {
                                Ok(l) => Ok(Some(l)),
                                Err(_) => Ok(None),
                            },
                        }
                    };
                    let lhs_copy = copy(&plan.lhs_copy, lhs)?;
                    let rhs_copy = copy(&plan.rhs_copy, rhs)?;
                    if lhs_copy.is_none() != plan.lhs_copy.is_none() || rhs_copy.is_none() != plan.rhs_copy.is_none() {
                        return host(vec![e], "dot_general operand layout copy has no device form".into());
                    }
                    let pipeline = gpu.pipeline(&gemm_source(gpu, &plan.gemm), "dot_general (gemm)")?;
                    Ok(Prepared::Gemm(Box::new(GemmStep { lhs_copy, rhs_copy, pipeline, plan, lhs, rhs, out })))
                }
                Prim::ConvGeneral(c) if eqn.inputs.len() == 2 && eqn.outputs.len() == 1 => {
                    match prepare_conv(gpu, f, e, c)? {
                        Ok(step) => Ok(Prepared::Conv(Box::new(step))),
                        Err(why) => host(vec![e], why),
                    }
                }
                // The plan had no device kernel for it (`ops::reduce::device_kernel`).
                Prim::Reduce(_) => {
                    host(vec![e], "a reduction of a dtype other than f32, i32 and bool, or over nothing".into())
                }
                Prim::ArgReduce(_) => {
                    host(vec![e], "an index search over f64 or bool data, i64 indices or empty rows".into())
                }
                // The plan had no row kernel for it (`ops::cumulative::device_kernel`):
                // long lines scan by passes.
                Prim::Cumulative(_) if eqn.inputs.len() == 1 && eqn.outputs.len() == 1 => {
                    let (x, out) = (eqn.inputs[0], eqn.outputs[0]);
                    let name = format!("cp{e}");
                    let Some(kernels) = graft_core::ops::cumulative::device_pass_kernels(f, eqn, &name) else {
                        return host(
                            vec![e],
                            format!(
                                "a scan of f64 or i64, of bool over more than {LINE_WORK_MAX} element-position \
                                 pairs, or over nothing"
                            ),
                        );
                    };
                    let last = kernels.len() - 1;
                    let mut launches = Vec::with_capacity(kernels.len());
                    let mut calls = Vec::with_capacity(kernels.len());
                    for (t, k) in kernels.iter().enumerate() {
                        match launch(gpu, k, vec![x, out], eqn.prim.name())? {
                            Ok(l) => launches.push(l),
                            Err(why) => return host(vec![e], why),
                        }
                        let from = if t == 0 { ChainBuf::Input } else { ChainBuf::Temp((t - 1) % 2) };
                        let to = if t == last { ChainBuf::Output } else { ChainBuf::Temp(t % 2) };
                        calls.push((t, vec![from, to]));
                    }
                    let summary = format!("{} as {} Hillis-Steele passes", eqn.prim.name(), kernels.len());
                    let temps = vec![device_bytes(f.ty(out)); last.min(2)];
                    let what = "cumulative";
                    Ok(Prepared::Chain(Box::new(ChainStep { what, summary, launches, calls, temps, x, out })))
                }
                Prim::Cumulative(_) => host(vec![e], "a scan with several operands or results".into()),
                Prim::Argsort(a) if eqn.inputs.len() == 1 && eqn.outputs.len() == 1 => {
                    let (x, out) = (eqn.inputs[0], eqn.outputs[0]);
                    let xt = f.ty(x);
                    let pairs = xt.shape.get(a.axis).map_or(0, |&len| xt.numel().saturating_mul(len));
                    // Short lines rank in two launches; long ones (or past the
                    // quadratic form's bound) sort by the network.
                    let ranks = (pairs <= graft_core::ops::sort::QUADRATIC_PAIRS_MAX)
                        .then(|| graft_core::ops::sort::argsort_device_kernels(f, a, x, out, e))
                        .flatten();
                    use ChainBuf::{Input, Output, Param, Temp};
                    if let Some((rank, invert)) = ranks {
                        // Binds are placeholders: the chain binds the buffers.
                        let mut launches = Vec::with_capacity(2);
                        for k in [&rank, &invert] {
                            match launch(gpu, k, vec![x, out], "argsort")? {
                                Ok(l) => launches.push(l),
                                Err(why) => return host(vec![e], why),
                            }
                        }
                        let summary = format!("argsort as ranks, then their inverse: {}, {}", rank.name, invert.name);
                        let calls = vec![(0, vec![Input, Temp(0)]), (1, vec![Temp(0), Output])];
                        let temps = vec![device_bytes(f.ty(out))];
                        let what = "argsort";
                        return Ok(Prepared::Chain(Box::new(ChainStep {
                            what,
                            summary,
                            launches,
                            calls,
                            temps,
                            x,
                            out,
                        })));
                    }
                    let Some(b) = graft_core::ops::sort::argsort_bitonic_kernels(f, a, x, out, e) else {
                        return host(
                            vec![e],
                            "an argsort of f64 or bool data, i64 indices, over nothing, or whose lines padded to \
                             a power of two pass i32 addresses"
                                .to_string(),
                        );
                    };
                    let mut launches = Vec::with_capacity(3);
                    for k in [&b.init, &b.pass, &b.finish] {
                        match launch(gpu, k, vec![x; k.args.len()], "argsort")? {
                            Ok(l) => launches.push(l),
                            Err(why) => return host(vec![e], why),
                        }
                    }
                    // Temporaries 0, 1 and 2, 3: keys and positions, read and
                    // written in turn by the passes.
                    let mut calls = vec![(0, vec![Input, Temp(0), Temp(1)])];
                    for (t, &(block, dist)) in b.passes.iter().enumerate() {
                        let up = |v: i32| gpu.upload(&Tensor::scalar(v)).map_err(|err| err.during("argsort"));
                        let (r, w) = (2 * (t % 2), 2 - 2 * (t % 2));
                        let params = [Param(up(block)?), Param(up(dist)?)];
                        let [pb, pd] = params;
                        calls.push((1, vec![Temp(r), Temp(r + 1), pb, pd, Temp(w), Temp(w + 1)]));
                    }
                    calls.push((2, vec![Temp(2 * (b.passes.len() % 2) + 1), Output]));
                    let summary = format!(
                        "argsort as a bitonic network: {}, {} passes of {}, {}",
                        b.init.name,
                        b.passes.len(),
                        b.pass.name,
                        b.finish.name
                    );
                    let temps = vec![b.padded as u64 * 4; 4];
                    let what = "argsort";
                    Ok(Prepared::Chain(Box::new(ChainStep { what, summary, launches, calls, temps, x, out })))
                }
                // The plan had no device kernel for it (`ops::window::device_kernel`).
                Prim::ReduceWindow(w) => {
                    let taps: usize = w.window.iter().product();
                    let why = if !f.ty(eqn.inputs[0]).dtype.is_float() {
                        "a window over integers or bools (float windows only)".to_string()
                    } else if w.base_dilation.iter().any(|&d| d > 1) {
                        "a window with base dilation (taps on holes have no window-load form)".to_string()
                    } else if taps > graft_core::ops::window::DEVICE_TAPS_MAX {
                        format!("a window of {taps} taps (unrolled up to {})", graft_core::ops::window::DEVICE_TAPS_MAX)
                    } else {
                        "a window whose kernel did not verify".to_string()
                    };
                    host(vec![e], why)
                }
                // The plan had no device kernel for it (`ops::index::scatter_add_device_kernel`).
                Prim::ScatterAdd(_) => host(
                    vec![e],
                    format!(
                        "a scatter-add of 64-bit data or indices, or of more than {} element-position pairs \
                         (the device sums each element's updates in a row of its own)",
                        graft_core::ops::index::SCATTER_ROWS_MAX
                    ),
                ),
                Prim::Scan(s) => {
                    let body = if s.length == 0 {
                        Err("a scan of no steps".to_string())
                    } else {
                        device_body(gpu, &s.body, "scan")?
                    };
                    match body {
                        Ok(body) => Ok(Prepared::Scan(Box::new(ScanStep {
                            body,
                            n_consts: s.n_consts,
                            n_carry: s.n_carry,
                            length: s.length,
                            reverse: s.reverse,
                            inputs: eqn.inputs.clone(),
                            outputs: eqn.outputs.clone(),
                        }))),
                        Err(why) => host(vec![e], why),
                    }
                }
                Prim::While(w) => {
                    let lp = &w.lp;
                    match (device_body(gpu, &lp.cond, "while predicate")?, device_body(gpu, &lp.body, "while")?) {
                        (Ok(cond), Ok(body)) => Ok(Prepared::While(Box::new(WhileStep {
                            cond,
                            body,
                            n_consts: lp.n_consts,
                            inputs: eqn.inputs.clone(),
                            outputs: eqn.outputs.clone(),
                        }))),
                        (Err(why), _) | (_, Err(why)) => host(vec![e], why),
                    }
                }
                p => host(vec![e], format!("no GPU kernel for {} yet", p.name())),
            }
        }
    }
}

/// A loop's body (or predicate) planned for the device, if it runs there
/// whole; the inner `Err` says why the loop runs on the host instead (a
/// body with a host step would pay its transfers at every step).
fn device_body(gpu: &Arc<Gpu>, body: &Arc<Func>, what: &str) -> Result<Result<GpuExecutable, String>, GpuError> {
    let exe = match GpuExecutable::with_gpu(gpu.clone(), body.clone()) {
        Ok(exe) => exe,
        Err(GpuError::Wide(why)) => return Ok(Err(format!("a {what} body with a 64-bit value ({why})"))),
        Err(e) => return Err(e),
    };
    match exe.host_steps().first() {
        Some((prims, why)) => Ok(Err(format!("a {what} body with a host step ({prims}: {why})"))),
        None => Ok(Ok(exe)),
    }
}

/// A convolution on the device: per part of the batch, the im2col matrix
/// `[images, groups, C/groups * taps, positions]` (`ops::conv::im2col_kernel`,
/// a kernel-IR kernel: padding and dilation holes read 0) and one batched
/// GEMM over (image, group) in z whose `A` is the group's weights
/// `[O/groups, C/groups * taps]` (the rhs as stored, `z % groups`) and whose
/// result `[O/groups, positions]` per (image, group) is exactly the output
/// layout `[N, O, *out]`, so no layout kernel follows. The inner `Err` is a
/// reason to run it on the host.
fn prepare_conv(
    gpu: &Gpu,
    f: &Func,
    e: usize,
    c: &graft_core::ops::conv::ConvGeneral,
) -> Result<Result<ConvStep, String>, GpuError> {
    use graft_core::ops::conv::{im2col_is_identity, im2col_kernel};
    let eqn = &f.eqns[e];
    let (lhs, rhs, out) = (eqn.inputs[0], eqn.inputs[1], eqn.outputs[0]);
    let (xt, wt, ot) = (f.ty(lhs), f.ty(rhs), f.ty(out));
    if [xt, wt, ot].iter().any(|t| t.dtype != DType::F32) {
        return Ok(Err("convolution of non-f32 operands".into()));
    }
    if [xt, wt, ot].iter().any(|t| t.numel() == 0) {
        return Ok(Err("an empty convolution".into()));
    }
    let limit = gpu.limits.max_storage_buffer_binding_size;
    if [xt, wt, ot].iter().any(|t| device_bytes(t) > limit || t.numel() > i32::MAX as usize) {
        return Ok(Err("operands beyond the adapter's storage-buffer binding size".into()));
    }
    let (xs, ws, os) = (&xt.shape, &wt.shape, &ot.shape);
    let groups = c.feature_group_count;
    let (images, chans, outs) = (xs[0], xs[1], os[1]);
    let og = outs / groups;
    let k = ws[1..].iter().product::<usize>();
    let p = os[2..].iter().product::<usize>();
    let identity = im2col_is_identity(c, ws);
    // Images per part: every image at once unless the matrix needs splitting.
    let z_max = 65535 / groups;
    let mut per_part = images.min(z_max);
    if !identity {
        let per_image = (groups * k * p) as u64 * 4;
        let part_max = limit.min(IM2COL_BYTES_MAX).min(gpu.memory_limit().map_or(u64::MAX, |m| m / 4));
        let fit = (part_max / per_image) as usize;
        if fit == 0 {
            return Ok(Err(format!("the im2col matrix of one image ({per_image} bytes) exceeds the part size")));
        }
        per_part = per_part.min(fit);
    }
    if per_part == 0 {
        return Ok(Err(format!("{groups} feature groups, beyond one dispatch dimension")));
    }
    let nparts = images.div_ceil(per_part);
    if nparts > CONV_PARTS_MAX {
        return Ok(Err(format!("the batch would be split into {nparts} parts (at most {CONV_PARTS_MAX})")));
    }
    let mut parts = Vec::with_capacity(nparts);
    for part in 0..nparts {
        let n0 = part * per_part;
        let nb = per_part.min(images - n0);
        let im2col = if identity {
            None
        } else {
            let name = format!("im2col{e}_{part}");
            let Some(kernel) = im2col_kernel(c, xs, ws, os, n0..n0 + nb, DType::F32, &name) else {
                return Ok(Err("im2col addresses beyond i32".into()));
            };
            match launch(gpu, &kernel, vec![lhs, lhs], "conv_general")? {
                Ok(l) => Some(l),
                Err(why) => return Ok(Err(why)),
            }
        };
        let gemm = gemm::Gemm {
            batch: nb * groups,
            m: og,
            n: p,
            k,
            ta: false,
            tb: false,
            a_period: groups,
            b_base: if identity { n0 * chans * p } else { 0 },
            c_base: n0 * outs * p,
        };
        let pipeline = gpu.pipeline(&gemm_source(gpu, &gemm), "conv_general (gemm)")?;
        parts.push(ConvPart { im2col, gemm, pipeline });
    }
    Ok(Ok(ConvStep { parts, lhs, rhs, out }))
}

/// The GEMM kernel for this adapter: without workgroup memory on a CPU
/// adapter (lavapipe), tiled in workgroup memory otherwise;
/// `GRAFT_GPU_GEMM=tiled|direct` overrides (for measurements).
fn gemm_source(gpu: &Gpu, g: &gemm::Gemm) -> String {
    let direct = match std::env::var("GRAFT_GPU_GEMM").ok().as_deref() {
        Some("direct") => true,
        Some("tiled") => false,
        _ => gpu.info.device_type == wgpu::DeviceType::Cpu,
    };
    if direct {
        g.wgsl_direct()
    } else {
        g.wgsl()
    }
}

fn prim_names(f: &Func, eqns: &[usize]) -> String {
    let mut names: Vec<&str> = eqns.iter().map(|&e| f.eqns[e].prim.name()).collect();
    names.dedup();
    names.join(" ")
}

/// Renders and compiles a kernel. The inner `Err` is a reason to run the
/// step on the host (a dtype WGSL lacks, a size the device cannot bind);
/// the outer one a device failure.
fn launch(gpu: &Gpu, k: &Kernel, binds: Vec<Value>, prims: &str) -> Result<Result<Launch, String>, GpuError> {
    let rendered = match render_wgsl(k) {
        Ok(r) => r,
        Err(e) => return Ok(Err(e.to_string())),
    };
    let limit = gpu.limits.max_storage_buffer_binding_size;
    if let Some(a) = k.args.iter().find(|a| a.len as u64 * 4 > limit) {
        return Ok(Err(format!("a buffer of {} elements exceeds the adapter's binding size ({limit} bytes)", a.len)));
    }
    let nbuf = k.args.len() + rendered.scratch.len();
    if nbuf as u32 > gpu.limits.max_storage_buffers_per_shader_stage {
        return Ok(Err(format!(
            "{nbuf} buffers, more than the adapter binds per shader ({})",
            gpu.limits.max_storage_buffers_per_shader_stage
        )));
    }
    let what = format!("kernel {} ({prims})", k.name);
    let pipeline = gpu.pipeline(&rendered.source, &what)?;
    let writes = k.args.iter().map(|a| a.access == Access::Write).collect();
    let lens = k.args.iter().map(|a| a.len).collect();
    Ok(Ok(Launch { pipeline, rendered, binds, writes, lens, name: k.name.clone() }))
}

/// The state of one run.
struct Run<'a> {
    gpu: &'a Gpu,
    func: &'a Func,
    env: Vec<Slot>,
    /// Commands recorded since the last submission.
    enc: Option<wgpu::CommandEncoder>,
    stats: GpuStats,
    def: &'a HashMap<Value, usize>,
}

/// Runs `eqn` on the host by its primitive's interpreter kernel, into
/// fresh zeroed results; running out of host memory is an error naming
/// `what` and the primitive.
fn host_eval(f: &Func, eqn: &graft_core::ir::Eqn, ins: &[&Tensor], what: &str) -> Result<Vec<Tensor>, GpuError> {
    let mut outs: Vec<Tensor> = eqn
        .outputs
        .iter()
        .map(|&o| Tensor::try_zeros(f.ty(o)))
        .collect::<Result<_, _>>()
        .map_err(|e| GpuError::OutOfMemory(format!("{what} {}: {e}", eqn.prim.name())))?;
    eqn.prim.kernel(ins, &mut outs).map_err(GpuError::Exec)?;
    Ok(outs)
}

impl Run<'_> {
    fn encoder(&mut self) -> &mut wgpu::CommandEncoder {
        self.enc.get_or_insert_with(|| self.gpu.encoder())
    }

    /// A value's device buffer, uploading its host copy on first use.
    fn dev(&mut self, v: Value) -> Result<Arc<DevBuf>, GpuError> {
        self.ensure(v)?;
        let slot = self.env[v.index()].clone();
        if let Some(d) = slot.dev {
            return Ok(d);
        }
        if slot.host.is_none() {
            return Err(GpuError::Internal(format!("{v} has no value")));
        }
        let d = self.slot_dev(&slot)?;
        self.env[v.index()].dev = Some(d.clone());
        Ok(d)
    }

    /// Makes sure `v` has a value: a constant folded into a fused group
    /// at plan time has none until a host step needs it.
    fn ensure(&mut self, v: Value) -> Result<(), GpuError> {
        let slot = &self.env[v.index()];
        if slot.dev.is_some() || slot.host.is_some() {
            return Ok(());
        }
        let e = *self.def.get(&v).ok_or_else(|| GpuError::Internal(format!("{v} is read before it is defined")))?;
        let eqn = &self.func.eqns[e];
        if !eqn.inputs.is_empty() {
            return Err(GpuError::Internal(format!("{v} ({}) is read before it is computed", eqn.prim.name())));
        }
        let outs = host_eval(self.func, eqn, &[], "the constant")?;
        for (&o, t) in eqn.outputs.iter().zip(outs) {
            self.env[o.index()].host = Some(Arc::new(t));
        }
        Ok(())
    }

    /// Host copies of `values`, downloading those that live only on the
    /// device (one submission and one wait for all).
    fn fetch(&mut self, values: &[Value]) -> Result<Vec<Tensor>, GpuError> {
        for &v in values {
            self.ensure(v)?;
        }
        let need: Vec<Value> = {
            let mut n: Vec<Value> = values.iter().copied().filter(|v| self.env[v.index()].host.is_none()).collect();
            n.dedup();
            n
        };
        if !need.is_empty() {
            let bufs: Vec<Arc<DevBuf>> = need
                .iter()
                .map(|v| self.env[v.index()].dev.clone().ok_or_else(|| GpuError::Internal(format!("{v} has no value"))))
                .collect::<Result<_, _>>()?;
            let items: Vec<(&DevBuf, &graft_core::TensorType)> =
                bufs.iter().zip(&need).map(|(b, v)| (&**b, self.func.ty(*v))).collect();
            let enc = self.enc.take().unwrap_or_else(|| self.gpu.encoder());
            let ts = self.gpu.download(enc, &items)?;
            self.stats.syncs += 1;
            for (v, t) in need.iter().zip(ts) {
                self.stats.downloads += 1;
                self.stats.bytes_down += t.numel() * 4;
                self.env[v.index()].host = Some(Arc::new(t));
            }
        }
        values
            .iter()
            .map(|v| {
                self.env[v.index()]
                    .host
                    .as_ref()
                    .map(|t| (**t).clone())
                    .ok_or_else(|| GpuError::Internal(format!("{v} has no host value")))
            })
            .collect()
    }

    fn step(&mut self, step: &Prepared) -> Result<(), GpuError> {
        match step {
            Prepared::Alias { src, dst } => {
                self.ensure(*src)?;
                let s = self.env[src.index()].clone();
                let ty = self.func.ty(*dst);
                // Same elements; a host copy takes the result's shape.
                let host = match &s.host {
                    Some(t) => Some(Arc::new(
                        (**t).clone().reshape(ty.shape.clone()).map_err(|e| GpuError::Internal(e.to_string()))?,
                    )),
                    None => None,
                };
                self.env[dst.index()] = Slot { host, dev: s.dev };
            }
            Prepared::Const { value, buf } => {
                self.env[value.index()] = Slot { host: None, dev: Some(buf.clone()) };
            }
            Prepared::Device { launches, what } => {
                for l in launches {
                    self.run_launch(l, None, what)?;
                }
            }
            Prepared::Gemm(g) => {
                let GemmStep { lhs_copy, rhs_copy, pipeline, plan, lhs, rhs, out } = &**g;
                let a = match lhs_copy {
                    Some(l) => self.run_launch(l, Some(*lhs), "dot_general")?,
                    None => self.dev(*lhs)?,
                };
                let b = match rhs_copy {
                    Some(l) => self.run_launch(l, Some(*rhs), "dot_general")?,
                    None => self.dev(*rhs)?,
                };
                let c = self.gpu.alloc(device_bytes(self.func.ty(*out))).map_err(|e| e.during("dot_general (gemm)"))?;
                let wg = plan.gemm.workgroups();
                let gpu = self.gpu;
                gpu.dispatch(self.encoder(), pipeline, &[a.buffer(), b.buffer(), c.buffer()], wg);
                self.stats.launches += 1;
                self.env[out.index()] = Slot { host: None, dev: Some(c) };
            }
            Prepared::Conv(c) => {
                let ConvStep { parts, lhs, rhs, out } = &**c;
                let w = self.dev(*rhs)?;
                let y = self.gpu.alloc(device_bytes(self.func.ty(*out))).map_err(|e| e.during("conv_general"))?;
                for part in parts {
                    // The im2col temporary goes back to the pool after the
                    // product that reads it is recorded (a later part's
                    // kernels are recorded after it, so may reuse it).
                    let col = match &part.im2col {
                        Some(l) => self.run_launch(l, Some(*lhs), "conv_general")?,
                        None => self.dev(*lhs)?,
                    };
                    let gpu = self.gpu;
                    let bufs = [w.buffer(), col.buffer(), y.buffer()];
                    gpu.dispatch(self.encoder(), &part.pipeline, &bufs, part.gemm.workgroups());
                    self.stats.launches += 1;
                }
                self.gpu.check("conv_general (gemm)")?;
                self.env[out.index()] = Slot { host: None, dev: Some(y) };
            }
            Prepared::Chain(c) => self.chain(c)?,
            Prepared::Scan(s) => self.scan(s)?,
            Prepared::While(w) => self.while_loop(w)?,
            Prepared::Host { eqns, .. } => {
                for &e in eqns {
                    let eqn = &self.func.eqns[e];
                    let ins = self.fetch(&eqn.inputs)?;
                    let ins_ref: Vec<&Tensor> = ins.iter().collect();
                    let outs = host_eval(self.func, eqn, &ins_ref, "a host result of")?;
                    self.stats.host_eqns += 1;
                    for (&o, t) in eqn.outputs.iter().zip(outs) {
                        self.env[o.index()] = Slot { host: Some(Arc::new(t)), dev: None };
                    }
                }
            }
        }
        Ok(())
    }

    /// A slot's device buffer, uploading a host-only value (a loop body's
    /// result that is one of its constants, say).
    fn slot_dev(&mut self, s: &Slot) -> Result<Arc<DevBuf>, GpuError> {
        if let Some(d) = &s.dev {
            return Ok(d.clone());
        }
        let h = s.host.as_ref().ok_or_else(|| GpuError::Internal("a loop value without a value".into()))?;
        self.stats.uploads += 1;
        self.stats.bytes_up += h.numel() * 4;
        self.gpu.upload(h)
    }

    /// The device slots of `values` (uploaded where only on the host).
    fn dev_slots(&mut self, values: &[Value]) -> Result<Vec<Slot>, GpuError> {
        values.iter().map(|&v| Ok(Slot { host: None, dev: Some(self.dev(v)?) })).collect()
    }

    /// Runs a [`ScanStep`]. What this run recorded so far is submitted
    /// first, so the steps' commands follow it on the queue.
    fn scan(&mut self, s: &ScanStep) -> Result<(), GpuError> {
        let (nc, nk) = (s.n_consts, s.n_carry);
        let consts = self.dev_slots(&s.inputs[..nc])?;
        let mut carry = self.dev_slots(&s.inputs[nc..nc + nk])?;
        // Bytes of one step's slice of each `xs` operand and `ys` result.
        let row = |ty: &graft_core::TensorType| (ty.numel() / s.length) as u64 * 4;
        let mut xs = Vec::with_capacity(s.inputs.len() - nc - nk);
        for &v in &s.inputs[nc + nk..] {
            xs.push((self.dev(v)?, row(self.func.ty(v))));
        }
        let mut ys = Vec::with_capacity(s.outputs.len() - nk);
        for &v in &s.outputs[nk..] {
            let ty = self.func.ty(v);
            ys.push((self.gpu.alloc(device_bytes(ty)).map_err(|e| e.during("scan (stacked results)"))?, row(ty)));
        }
        if let Some(enc) = self.enc.take() {
            self.gpu.submit(enc);
        }
        for t in 0..s.length {
            let at = (if s.reverse { s.length - 1 - t } else { t }) as u64;
            let mut enc = self.gpu.encoder();
            let mut slots = consts.clone();
            slots.append(&mut carry);
            for (buf, bytes) in &xs {
                let d = self.gpu.alloc((*bytes).max(4)).map_err(|e| e.during("scan (a step's xs)"))?;
                if *bytes > 0 {
                    enc.copy_buffer_to_buffer(buf.buffer(), at * bytes, d.buffer(), 0, *bytes);
                }
                slots.push(Slot { host: None, dev: Some(d) });
            }
            let (outs, enc, stats) = s.body.run_nested(slots, Some(enc))?;
            self.stats.add(&stats);
            let mut enc = enc.unwrap_or_else(|| self.gpu.encoder());
            for ((buf, bytes), y) in ys.iter().zip(&outs[nk..]) {
                let src = self.slot_dev(y)?;
                if *bytes > 0 {
                    enc.copy_buffer_to_buffer(src.buffer(), 0, buf.buffer(), at * bytes, *bytes);
                }
            }
            self.gpu.submit(enc);
            self.gpu.check("scan (a step's copies)")?;
            carry = outs[..nk].to_vec();
        }
        for (&v, c) in s.outputs[..nk].iter().zip(carry) {
            self.env[v.index()] = c;
        }
        for (&v, (buf, _)) in s.outputs[nk..].iter().zip(ys) {
            self.env[v.index()] = Slot { host: None, dev: Some(buf) };
        }
        Ok(())
    }

    /// Runs a [`WhileStep`]: the predicate on the device, its element read
    /// back (one wait), then the body, until the predicate is false.
    fn while_loop(&mut self, w: &WhileStep) -> Result<(), GpuError> {
        let consts = self.dev_slots(&w.inputs[..w.n_consts])?;
        let mut carry = self.dev_slots(&w.inputs[w.n_consts..])?;
        let pred_ty = graft_core::TensorType::scalar(DType::Bool);
        loop {
            let mut slots = consts.clone();
            slots.extend(carry.iter().cloned());
            let enc = self.enc.take();
            let (p, enc, stats) = w.cond.run_nested(slots, enc)?;
            self.stats.add(&stats);
            let keep_going = match &p[0].host {
                Some(h) => {
                    self.enc = enc;
                    h.to_f64_vec().first().is_some_and(|&x| x != 0.0)
                }
                None => {
                    let buf = self.slot_dev(&p[0])?;
                    let enc = enc.unwrap_or_else(|| self.gpu.encoder());
                    let got = self.gpu.download(enc, &[(&*buf, &pred_ty)])?;
                    self.stats.syncs += 1;
                    self.stats.downloads += 1;
                    self.stats.bytes_down += 4;
                    got.first().and_then(|t| t.to_f64_vec().first().copied()).is_some_and(|x| x != 0.0)
                }
            };
            if !keep_going {
                break;
            }
            let mut slots = consts.clone();
            slots.append(&mut carry);
            let (outs, enc, stats) = w.body.run_nested(slots, self.enc.take())?;
            self.stats.add(&stats);
            self.enc = enc;
            carry = outs;
        }
        for (&v, c) in w.outputs.iter().zip(carry) {
            self.env[v.index()] = c;
        }
        Ok(())
    }

    /// Records one launch. `copy_of`: a layout copy of that value, whose
    /// result is returned instead of being bound to a value.
    /// Records a chain of launches (see [`ChainStep`]).
    fn chain(&mut self, c: &ChainStep) -> Result<(), GpuError> {
        let x = self.dev(c.x)?;
        let y = self.gpu.alloc(device_bytes(self.func.ty(c.out))).map_err(|e| e.during(c.what))?;
        let temps =
            c.temps.iter().map(|&b| self.gpu.alloc(b).map_err(|e| e.during(c.what))).collect::<Result<Vec<_>, _>>()?;
        for (k, args) in &c.calls {
            let mut bufs: Vec<&Arc<DevBuf>> = Vec::with_capacity(args.len());
            for a in args {
                bufs.push(match a {
                    ChainBuf::Input => &x,
                    ChainBuf::Output => &y,
                    ChainBuf::Param(p) => p,
                    ChainBuf::Temp(i) => {
                        temps.get(*i).ok_or_else(|| GpuError::Internal(format!("{}: temporary {i}", c.what)))?
                    }
                });
            }
            let l = c.launches.get(*k).ok_or_else(|| GpuError::Internal(format!("{}: kernel {k}", c.what)))?;
            self.dispatch_raw(l, &bufs, c.what)?;
        }
        self.env[c.out.index()] = Slot { host: None, dev: Some(y) };
        Ok(())
    }

    /// Records one launch of `l` on the given buffers (its arguments, in
    /// order), unless it has no points.
    fn dispatch_raw(&mut self, l: &Launch, bufs: &[&Arc<DevBuf>], what: &str) -> Result<(), GpuError> {
        let raw: Vec<&wgpu::Buffer> = bufs.iter().map(|b| b.buffer()).collect();
        let gpu = self.gpu;
        if !l.rendered.workgroups.contains(&0) {
            gpu.dispatch(self.encoder(), &l.pipeline, &raw, l.rendered.workgroups);
            self.stats.launches += 1;
        }
        gpu.check(&format!("{} ({what})", l.name))
    }

    fn run_launch(&mut self, l: &Launch, copy_of: Option<Value>, what: &str) -> Result<Arc<DevBuf>, GpuError> {
        self.record_launch(l, copy_of, what).map_err(|e| e.during(&format!("kernel {} ({what})", l.name)))
    }

    fn record_launch(&mut self, l: &Launch, copy_of: Option<Value>, what: &str) -> Result<Arc<DevBuf>, GpuError> {
        let mut bufs: Vec<Arc<DevBuf>> = Vec::with_capacity(l.binds.len() + l.rendered.scratch.len());
        let mut last = None;
        for (j, (&v, &w)) in l.binds.iter().zip(&l.writes).enumerate() {
            if !w {
                bufs.push(self.dev(v)?);
                continue;
            }
            let len = l.rendered_len(j);
            let buf = match copy_of {
                Some(_) => self.gpu.alloc(len * 4)?,
                // Several kernels of one step may write parts of one result
                // (a concatenation, a pad): the first allocates it.
                None => match &self.env[v.index()].dev {
                    Some(d) if self.env[v.index()].host.is_none() => d.clone(),
                    _ => {
                        let d = self.gpu.alloc(device_bytes(self.func.ty(v)))?;
                        self.env[v.index()] = Slot { host: None, dev: Some(d.clone()) };
                        d
                    }
                },
            };
            last = Some(buf.clone());
            bufs.push(buf);
        }
        for &(_, n) in &l.rendered.scratch {
            bufs.push(self.gpu.alloc(n as u64 * 4)?);
        }
        let raw: Vec<&wgpu::Buffer> = bufs.iter().map(|b| b.buffer()).collect();
        let gpu = self.gpu;
        let wg = l.rendered.workgroups;
        if !(wg.contains(&0)) {
            gpu.dispatch(self.encoder(), &l.pipeline, &raw, wg);
            self.stats.launches += 1;
        }
        gpu.check(&format!("{} ({what})", l.name))?;
        last.ok_or_else(|| GpuError::Internal(format!("kernel {} writes nothing", l.name)))
    }
}

impl Launch {
    /// Element count of argument `j`.
    fn rendered_len(&self, j: usize) -> u64 {
        self.lens.get(j).copied().unwrap_or(1) as u64
    }
}
