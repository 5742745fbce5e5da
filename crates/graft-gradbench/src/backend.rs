//! What a tool must provide to be served: the [`Backend`] trait, and the
//! per-shape program cache backends share.
//!
//! An `evaluate` is split into phases so the server can time exactly the
//! function: `decode` (JSON -> arguments, untimed), `compile` (reported as one
//! `"compile"` timing; a cache hit makes it nearly free), `run` (timed, once
//! per `"evaluate"` timing, possibly many times), `encode` (result -> JSON,
//! untimed). Compiling once per input shape is what lets repeated evaluations
//! of the same workload reuse the program.
//!
//! Invariant: `run` does not mutate the backend (it takes `&self`), so every
//! timed run does the same work on the same arguments.

use std::collections::HashMap;
use std::sync::Arc;

use graft_core::{Tensor, TensorType};
use serde_json::Value;

use crate::error::GbError;

/// A GradBench tool: knows some modules and runs their functions.
pub trait Backend {
    /// One evaluate call's decoded arguments.
    type Args;
    /// A compiled function, ready to be run many times.
    type Program;
    /// What one run produces, before encoding.
    type Output;

    /// The tool's name, sent in the `start` response.
    fn tool(&self) -> &str;

    /// Prepares `module` (e.g. loads and checks its program), or says why not
    /// (`GbError::UnknownModule` for modules the tool does not have).
    fn define(&mut self, module: &str) -> Result<(), GbError>;

    /// Turns `input` into arguments for `function`, checking fields and
    /// shapes. Unknown functions are reported here (`GbError::UnknownFunction`).
    fn decode(&mut self, module: &str, function: &str, input: &Value) -> Result<Self::Args, GbError>;

    /// The program for `function` at the shapes of `args`, compiled on first
    /// use and cached (see [`ProgramCache`]).
    fn compile(&mut self, module: &str, function: &str, args: &Self::Args) -> Result<Arc<Self::Program>, GbError>;

    /// One timed run.
    fn run(&self, program: &Self::Program, args: &Self::Args) -> Result<Self::Output, GbError>;

    /// The output in the module's JSON format (`args` gives sizes some
    /// formats need, e.g. `ba`'s sparse Jacobian).
    fn encode(&self, module: &str, function: &str, args: &Self::Args, output: Self::Output) -> Result<Value, GbError>;
}

/// Arguments as most graft backends hold them: tensors for the compiled
/// function, plus integer parameters that fix its structure (`llsq`'s `n`,
/// `ode`'s `s`, `det`'s `ell`) and so belong in the cache key.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorArgs {
    /// The function's tensor arguments, in parameter order.
    pub tensors: Vec<Tensor>,
    /// Structural integers: a change means a different program.
    pub statics: Vec<i64>,
}

impl TensorArgs {
    /// Borrowed tensors, as executors take them.
    pub fn refs(&self) -> Vec<&Tensor> {
        self.tensors.iter().collect()
    }

    /// The cache key of these arguments for `module.function`.
    pub fn key(&self, module: &str, function: &str) -> ShapeKey {
        ShapeKey {
            module: module.to_string(),
            function: function.to_string(),
            types: self.tensors.iter().map(Tensor::ty).collect(),
            statics: self.statics.clone(),
        }
    }
}

/// What a compiled program depends on: which function, at which argument
/// types, with which structural integers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ShapeKey {
    /// Module name.
    pub module: String,
    /// Function name.
    pub function: String,
    /// Argument types (dtype and shape).
    pub types: Vec<TensorType>,
    /// Structural integers.
    pub statics: Vec<i64>,
}

/// Compiled programs by [`ShapeKey`], with hit/miss counts so tests and
/// logs can show that repeated evaluations do not recompile.
#[derive(Debug)]
pub struct ProgramCache<P> {
    map: HashMap<ShapeKey, Arc<P>>,
    hits: usize,
    misses: usize,
}

impl<P> Default for ProgramCache<P> {
    fn default() -> Self {
        ProgramCache { map: HashMap::new(), hits: 0, misses: 0 }
    }
}

impl<P> ProgramCache<P> {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The cached program for `key`, or `build()`'s, which is cached on
    /// success (a failed build is not cached, so it is retried next time).
    pub fn get_or_build(
        &mut self,
        key: ShapeKey,
        build: impl FnOnce() -> Result<P, GbError>,
    ) -> Result<Arc<P>, GbError> {
        if let Some(p) = self.map.get(&key) {
            self.hits += 1;
            return Ok(p.clone());
        }
        let p = Arc::new(build()?);
        self.misses += 1;
        self.map.insert(key, p.clone());
        Ok(p)
    }

    /// Number of cached programs.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Lookups answered from the cache.
    pub fn hits(&self) -> usize {
        self.hits
    }

    /// Lookups that compiled.
    pub fn misses(&self) -> usize {
        self.misses
    }
}
