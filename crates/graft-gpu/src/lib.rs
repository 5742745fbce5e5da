//! graft on the GPU: the kernel IR rendered to WGSL and run through wgpu
//! (Vulkan, Metal, DX12; in CI on Mesa's lavapipe, a Vulkan driver that
//! runs on the CPU).
//!
//! - [`device`]: adapter selection, pooled device buffers, pipelines
//!   cached by shader source, explicit transfers.
//! - [`exec`]: [`GpuExecutable`], a function planned by the CPU executor
//!   and run step by step on the device (fused groups, row kernels, single
//!   equations, GEMM, reductions), with the steps that have no GPU kernel
//!   on the host (listed by [`GpuExecutable::host_steps`]).
//! - [`gemm`]: the tiled workgroup-memory GEMM for `dot_general`.
//! - [`Device`] and [`Runner`]: `--device cpu|gpu|auto` and `GRAFT_DEVICE`.
//!
//! The WGSL renderer itself is `graft_core::kernel::render_wgsl`, next to
//! the C renderer of the same IR.

pub mod device;
pub mod exec;
pub mod gemm;

pub use device::{global, Gpu};
pub use exec::{first_wide_value, DeviceTensor, GpuExecutable, GpuStats};

use graft_core::ir::Func;
use graft_core::{DType, ExecError, Executable, Tensor};
use std::sync::Arc;

/// Why the GPU cannot run something.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// No adapter (no driver, no device), with what wgpu said.
    #[error("no GPU adapter: {0}")]
    NoAdapter(String),
    /// The program has a 64-bit value; WGSL has no 64-bit types.
    #[error(
        "the GPU has no f64 or i64 (WGSL has no 64-bit types): {0}; run it with --device cpu, or convert to f32/i32"
    )]
    Wide(String),
    /// A dtype with no device form reached a transfer.
    #[error("{0} has no GPU form (the GPU runs f32, i32 and bool)")]
    Dtype(DType),
    /// A shader failed validation or compilation.
    #[error("shader of {what} failed validation: {msg}")]
    Shader {
        /// The kernel and the primitives it came from.
        what: String,
        /// wgpu's message.
        msg: String,
    },
    /// The device reported an error while running.
    #[error("GPU error in {what}: {msg}")]
    Device {
        /// The work that failed.
        what: String,
        /// wgpu's message.
        msg: String,
    },
    /// The device was lost.
    #[error("the GPU device was lost: {0}")]
    Lost(String),
    /// An allocation failed.
    #[error("GPU memory exhausted allocating {0}")]
    OutOfMemory(String),
    /// A buffer beyond the adapter's limits.
    #[error("a GPU buffer of {bytes} bytes{what} exceeds the adapter's limit of {limit}")]
    TooLarge {
        /// Bytes asked for.
        bytes: u64,
        /// The limit.
        limit: u64,
        /// ` for <the kernel and its primitives>`, when known.
        what: String,
    },
    /// Inputs that do not match the function.
    #[error("{0}")]
    Inputs(String),
    /// The planner or a host step failed.
    #[error(transparent)]
    Exec(#[from] ExecError),
    /// A broken invariant of this crate (a bug).
    #[error("internal error in the GPU executor: {0}")]
    Internal(String),
    /// An unknown device name.
    #[error("unknown device `{0}` (expected cpu, gpu or auto)")]
    UnknownDevice(String),
}

impl GpuError {
    /// The error with the work it happened in (`kernel ek3 (broadcast_in_dim)`)
    /// added to an allocation failure's message, so exhausted memory names
    /// the kernel and the primitive it came from.
    pub fn during(self, what: &str) -> GpuError {
        match self {
            GpuError::OutOfMemory(m) => GpuError::OutOfMemory(format!("{m}, for {what}")),
            GpuError::TooLarge { bytes, limit, what: w } if w.is_empty() => {
                GpuError::TooLarge { bytes, limit, what: format!(" for {what}") }
            }
            other => other,
        }
    }
}

/// Where a program runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Device {
    /// The CPU executor.
    Cpu,
    /// The GPU; an error when there is no adapter or the program has f64.
    Gpu,
    /// The GPU when there is an adapter and the program has no 64-bit
    /// values, else the CPU, with a one-line note saying why.
    Auto,
}

impl Device {
    /// Parses `cpu`, `gpu` or `auto`.
    pub fn parse(s: &str) -> Result<Device, GpuError> {
        match s.trim() {
            "cpu" => Ok(Device::Cpu),
            "gpu" => Ok(Device::Gpu),
            "auto" => Ok(Device::Auto),
            other => Err(GpuError::UnknownDevice(other.to_string())),
        }
    }

    /// `GRAFT_DEVICE` (unset or empty: `None`).
    pub fn from_env() -> Result<Option<Device>, GpuError> {
        match std::env::var("GRAFT_DEVICE") {
            Ok(s) if !s.trim().is_empty() => Device::parse(&s).map(Some),
            _ => Ok(None),
        }
    }
}

/// A function planned for the device [`Device`] chose.
#[derive(Debug)]
pub enum Runner {
    /// The CPU executor.
    Cpu(Executable),
    /// The GPU executor.
    Gpu(GpuExecutable),
}

impl Runner {
    /// Plans `func` for `device`. Returns the runner and, for
    /// [`Device::Auto`] falling back to the CPU, a one-line note saying why.
    pub fn new(func: impl Into<Arc<Func>>, device: Device) -> Result<(Runner, Option<String>), GpuError> {
        let func = func.into();
        match device {
            Device::Cpu => Ok((Runner::Cpu(Executable::new(func)?), None)),
            Device::Gpu => Ok((Runner::Gpu(GpuExecutable::new(func)?), None)),
            Device::Auto => {
                if let Some(v) = first_wide_value(&func) {
                    let note = format!("graft: running on the CPU: the GPU has no 64-bit types ({v})");
                    return Ok((Runner::Cpu(Executable::new(func)?), Some(note)));
                }
                match GpuExecutable::new(func.clone()) {
                    Ok(g) => Ok((Runner::Gpu(g), None)),
                    Err(e) => {
                        let note = format!("graft: running on the CPU: {e}");
                        Ok((Runner::Cpu(Executable::new(func)?), Some(note)))
                    }
                }
            }
        }
    }

    /// Plans `func` for the device `GRAFT_DEVICE` names (`cpu` when it is
    /// unset): the Rust API's counterpart of `graft run`'s default.
    pub fn from_env(func: impl Into<Arc<Func>>) -> Result<(Runner, Option<String>), GpuError> {
        Runner::new(func, Device::from_env()?.unwrap_or(Device::Cpu))
    }

    /// Runs on host inputs.
    pub fn run(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>, GpuError> {
        match self {
            Runner::Cpu(e) => Ok(e.run(inputs)?),
            Runner::Gpu(g) => g.run(inputs),
        }
    }

    /// `cpu` or `gpu`.
    pub fn device_name(&self) -> &'static str {
        match self {
            Runner::Cpu(_) => "cpu",
            Runner::Gpu(_) => "gpu",
        }
    }
}
