//! The language backend: GradBench modules written as graft programs
//! (`gradbench/<module>.graft` at the repository root, embedded in the
//! binary), one entry def per GradBench function.
//!
//! The Rust side only moves data: JSON fields become tensors in the entry's
//! parameter order, and structural integers (`llsq`'s `n`, `ode`'s `s`)
//! become the length of a zero-filled f64 tensor, because the language sizes
//! loops and grids from tensor shapes, never from run-time values. Every
//! function value and every derivative is computed by the graft program
//! (its `grad`, `jvp`, ...).
//!
//! Each module (its program, functions, JSON decoding and encoding) lives in
//! its own file `lang/<module>.rs` as a [`ModuleSpec`], listed in [`SPECS`].
//!
//! Invariants: a module is parsed and type-checked once, at `define`; an
//! entry is instantiated, simplified and planned once per argument types
//! (the `ProgramCache` key), so repeated evaluations only run the plan.

mod ba;
mod det;
mod gmm;
mod hello;
mod ht;
mod kmeans;
mod llsq;
mod lse;
mod lstm;
mod ode;
mod particle;
mod saddle;

use std::collections::HashMap;
use std::sync::Arc;

use graft_core::exec::{self, Executable};
use graft_core::{DType, Tensor, TensorType};
use graft_lang::Module;
use serde_json::Value;

use crate::backend::{Backend, ProgramCache, TensorArgs};
use crate::convert::{scalar_json, to_json, Dims, Input};
use crate::error::GbError;
use crate::memory;

/// One GradBench module served by this backend: its graft program, the
/// GradBench functions it answers, and how its JSON input and output map to
/// the entry defs' tensors. Each module has its own file in `lang/`; adding
/// an eval touches that file and one line of [`SPECS`].
pub(crate) struct ModuleSpec {
    pub name: &'static str,
    /// The graft program, embedded so the binary works from any directory.
    pub source: &'static str,
    /// The entry defs served (GradBench function names).
    pub functions: &'static [&'static str],
    /// JSON input -> the entry's arguments in parameter order.
    pub decode: fn(&Value, &DecodeCx) -> Result<TensorArgs, GbError>,
    /// The entry's results -> the JSON output GradBench's golden tool prints.
    pub encode: fn(function: &str, args: &TensorArgs, output: Vec<Tensor>) -> Result<Value, GbError>,
}

const SPECS: &[&ModuleSpec] = &[
    &hello::SPEC,
    &lse::SPEC,
    &llsq::SPEC,
    &kmeans::SPEC,
    &gmm::SPEC,
    &ode::SPEC,
    &lstm::SPEC,
    &ba::SPEC,
    &ht::SPEC,
    &det::SPEC,
    &particle::SPEC,
    &saddle::SPEC,
];

fn spec(module: &str) -> Result<&'static ModuleSpec, GbError> {
    SPECS.iter().copied().find(|s| s.name == module).ok_or_else(|| GbError::UnknownModule(module.to_string()))
}

/// The names of the modules served.
pub fn module_names() -> impl Iterator<Item = &'static str> {
    SPECS.iter().map(|s| s.name)
}

/// What decoding may need besides the input: the memory budget that
/// structural carriers are checked against before they are allocated.
pub(crate) struct DecodeCx {
    pub memory_limit: u64,
}

/// An entry instantiated and planned at one set of argument types.
#[derive(Debug)]
pub struct LangProgram {
    exe: Arc<Executable>,
}

/// Serves the modules in [`SPECS`].
#[derive(Debug)]
pub struct LangBackend {
    modules: HashMap<String, Module>,
    /// Compiled entries by argument types (public so tests can check reuse).
    pub cache: ProgramCache<LangProgram>,
    /// Inputs needing more bytes than this are refused (see [`crate::memory`]).
    memory_limit: u64,
    /// `define` takes a copy of the module this thread checked before, if
    /// any (see [`LangBackend::reusing_checked_modules`]).
    reuse_checked: bool,
    /// `compile` finishes the native kernels before answering (see
    /// `warm_up`); off for [`LangBackend::compiling_in_background`].
    finish_native: bool,
}

thread_local! {
    /// Modules as `define` left them (parsed and checked), for backends
    /// made with [`LangBackend::reusing_checked_modules`].
    static CHECKED: std::cell::RefCell<HashMap<&'static str, Module>> = std::cell::RefCell::new(HashMap::new());
}

impl Default for LangBackend {
    fn default() -> Self {
        LangBackend::with_memory_limit(memory::default_limit())
    }
}

impl LangBackend {
    /// A backend with no module defined yet and the default memory budget
    /// ([`memory::default_limit`]).
    pub fn new() -> LangBackend {
        LangBackend::default()
    }

    /// A backend refusing inputs that would need more than `bytes`.
    pub fn with_memory_limit(bytes: u64) -> LangBackend {
        LangBackend {
            modules: HashMap::new(),
            cache: ProgramCache::new(),
            memory_limit: bytes,
            reuse_checked: false,
            finish_native: true,
        }
    }

    /// This backend with `define` copying the module a backend of this
    /// thread parsed and checked before (as that `define` left it, before
    /// any evaluation) instead of parsing and checking it again. The
    /// embedded programs never change, so the copy is what `define` would
    /// build; for processes serving many sessions (the `gradbench` fuzz
    /// target, where checking was nine tenths of the time).
    #[doc(hidden)]
    pub fn reusing_checked_modules(mut self) -> LangBackend {
        self.reuse_checked = true;
        self
    }

    /// This backend with `compile` answering at once, its native kernels
    /// compiling in the background (`GRAFT_COMPILE`'s default) while the
    /// first runs use the interpreter: for the `gradbench` fuzz target,
    /// which would otherwise wait for the C compiler on every new shape.
    #[doc(hidden)]
    pub fn compiling_in_background(mut self) -> LangBackend {
        self.finish_native = false;
        self
    }

    /// The memory budget in bytes.
    pub fn memory_limit(&self) -> u64 {
        self.memory_limit
    }
}

fn diag_err(module: &str, d: graft_lang::diag::Diagnostic) -> GbError {
    GbError::Backend(format!("{module}.graft: {}", d.message))
}

impl Backend for LangBackend {
    type Args = TensorArgs;
    type Program = LangProgram;
    type Output = Vec<Tensor>;

    fn tool(&self) -> &str {
        "graft"
    }

    fn define(&mut self, module: &str) -> Result<(), GbError> {
        if self.modules.contains_key(module) {
            return Ok(());
        }
        let spec = spec(module)?;
        let reused = if self.reuse_checked { CHECKED.with(|c| c.borrow().get(spec.name).cloned()) } else { None };
        let parsed = match reused {
            Some(m) => m,
            None => {
                let file = format!("{module}.graft");
                let m = Module::from_source(&file, spec.source).and_then(|m| m.check().map(|()| m)).map_err(|ds| {
                    GbError::Backend(ds.iter().map(|d| format!("{file}: {}", d.message)).collect::<Vec<_>>().join("; "))
                })?;
                if self.reuse_checked {
                    CHECKED.with(|c| c.borrow_mut().insert(spec.name, m.clone()));
                }
                m
            }
        };
        self.modules.insert(module.to_string(), parsed);
        Ok(())
    }

    fn decode(&mut self, module: &str, function: &str, input: &Value) -> Result<TensorArgs, GbError> {
        let spec = spec(module)?;
        if !spec.functions.contains(&function) {
            return Err(GbError::UnknownFunction { module: module.into(), function: function.into() });
        }
        (spec.decode)(input, &DecodeCx { memory_limit: self.memory_limit })
    }

    fn compile(&mut self, module: &str, function: &str, args: &TensorArgs) -> Result<Arc<LangProgram>, GbError> {
        let m = self.modules.get(module).ok_or_else(|| GbError::NotDefined(module.to_string()))?;
        let key = args.key(module, function);
        self.cache.get_or_build(key, || {
            let types: Vec<TensorType> = args.tensors.iter().map(Tensor::ty).collect();
            let c = m.instantiate(function, &types).map_err(|d| diag_err(module, d))?;
            let need = memory::estimated_peak_bytes(&c.func);
            memory::check(&format!("`{module}.{function}` at these sizes"), need, self.memory_limit)?;
            let exe = exec::plan_cached(&c.func).map_err(|e| GbError::Backend(e.to_string()))?;
            if self.finish_native {
                warm_up(&exe, args)?;
            }
            Ok(LangProgram { exe })
        })
    }

    fn run(&self, program: &LangProgram, args: &TensorArgs) -> Result<Vec<Tensor>, GbError> {
        program.exe.run(&args.refs()).map_err(|e| GbError::Backend(e.to_string()))
    }

    fn encode(&self, module: &str, function: &str, args: &TensorArgs, output: Vec<Tensor>) -> Result<Value, GbError> {
        for t in &output {
            if t.dtype() != DType::F64 && t.dtype() != DType::I64 && t.dtype() != DType::I32 {
                return Err(GbError::Output(format!("unexpected {} result", t.dtype().name())));
            }
        }
        (spec(module)?.encode)(function, args, output)
    }
}

/// Most time the compile phase waits for the C compiler.
const NATIVE_WAIT: std::time::Duration = std::time::Duration::from_secs(600);

/// Finishes compiling `exe` inside the protocol's `"compile"` phase, which
/// GradBench times apart from the scored `"evaluate"` runs: waits for its
/// kernels, runs it once on the input (loop bodies are planned and their
/// compiled loops queued on their first run) and waits for those too, as
/// `graft bench` does. Without this the runs start on the interpreter
/// while the kernels compile on a background thread (`GRAFT_COMPILE`'s
/// default, right for a program run once), and with a driver's few runs
/// per input most of them, or all, ran interpreted: under GradBench's own
/// drivers `ode` and `lstm` measured 3-15x slower than compiled. With
/// `GRAFT_COMPILE=off` nothing is compiled and nothing is waited for.
fn warm_up(exe: &Executable, args: &TensorArgs) -> Result<(), GbError> {
    if graft_core::kernel::CompileMode::from_env() == graft_core::kernel::CompileMode::Off {
        return Ok(());
    }
    exe.wait_native(NATIVE_WAIT);
    let outs = exe.run(&args.refs()).map_err(|e| GbError::Backend(e.to_string()))?;
    exe.recycle(outs);
    exe.wait_all_native(NATIVE_WAIT);
    Ok(())
}

/// Result `i` of an entry's outputs.
pub(crate) fn result(output: &[Tensor], i: usize) -> Result<&Tensor, GbError> {
    output.get(i).ok_or_else(|| GbError::Output(format!("missing result {i}")))
}

/// The usual encoding: a scalar result as a JSON number, anything else as
/// nested lists (first result only).
pub(crate) fn encode_first(_function: &str, _args: &TensorArgs, output: Vec<Tensor>) -> Result<Value, GbError> {
    let t = result(&output, 0)?;
    if t.rank() == 0 {
        scalar_json(t)
    } else {
        to_json(t)
    }
}

/// A zero-filled f64 vector whose length carries a structural integer,
/// checked against the memory budget before it is allocated.
pub(crate) fn size_carrier(cx: &DecodeCx, field: &str, n: usize, min: usize) -> Result<Tensor, GbError> {
    if n < min {
        return Err(GbError::input(field, format!("must be at least {min}, found {n}")));
    }
    let bytes = (n as u64).saturating_mul(8);
    memory::check(&format!("input field `{field}` = {n}"), bytes, cx.memory_limit)?;
    Tensor::from_vec(vec![n], vec![0.0f64; n]).map_err(|e| GbError::input(field, format!("internal error: {e}")))
}

pub(crate) fn scalar(field: &str, x: f64) -> Result<Tensor, GbError> {
    Tensor::from_vec(Vec::<usize>::new(), vec![x]).map_err(|e| GbError::input(field, format!("internal error: {e}")))
}

/// Checks that an integer field agrees with the size the tensors imply.
pub(crate) fn agree(inp: &Input<'_>, field: &str, dims: &Dims, dim: &str) -> Result<(), GbError> {
    let v = inp.usize(field)?;
    match dims.get(dim) {
        Some(s) if s != v => Err(GbError::input(field, format!("is {v} but the arrays have {dim} = {s}"))),
        _ => Ok(()),
    }
}
