//! Compiling and calling functions, with a per-input-type cache for traced
//! closures (a traced function is re-traced and re-planned only when it is
//! called with inputs of a new dtype/shape combination).

use crate::error::Error;
use crate::trace::{trace, IntoOutputs, Tr};
use graft_core::{Executable, Func, RunStats, Tensor, TensorType};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A verified and planned function.
#[derive(Debug, Clone)]
pub struct Compiled {
    exe: Arc<Executable>,
}

/// Verifies and plans a function built with the builder (or traced).
pub fn compile(func: Func) -> Result<Compiled, Error> {
    Ok(Compiled { exe: Arc::new(Executable::new(func)?) })
}

impl Compiled {
    /// Runs on the inputs.
    pub fn call(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>, Error> {
        Ok(self.exe.run(inputs)?)
    }

    /// Runs and reports peak bytes and kernel counts.
    pub fn call_with_stats(&self, inputs: &[&Tensor]) -> Result<(Vec<Tensor>, RunStats), Error> {
        Ok(self.exe.run_with_stats(inputs)?)
    }

    /// The IR being run.
    pub fn func(&self) -> &Func {
        self.exe.func()
    }
}

/// A traced Rust closure, compiled lazily per input types and cached.
pub struct Jit<F> {
    name: String,
    f: F,
    cache: Mutex<HashMap<Vec<TensorType>, Compiled>>,
}

/// Wraps a closure over traced tensors. The closure receives one [`Tr`] per
/// input (`f(&[Tr])` form via [`Jit::call`]) — for one-input closures use
/// `jit(name, |x| ...)`; for several, `jit_n(name, |xs| ...)`.
pub fn jit<O: IntoOutputs, F: Fn(&Tr) -> O>(name: impl Into<String>, f: F) -> Jit<impl Fn(&[Tr]) -> O> {
    Jit::new(name, move |xs: &[Tr]| f(&xs[0]))
}

impl<O: IntoOutputs, F: Fn(&[Tr]) -> O> Jit<F> {
    /// Wraps a closure taking all inputs as a slice.
    pub fn new(name: impl Into<String>, f: F) -> Self {
        Jit { name: name.into(), f, cache: Mutex::new(HashMap::new()) }
    }

    /// Traces the closure for the given input types (no caching).
    pub fn trace(&self, types: &[TensorType]) -> Result<Func, Error> {
        Ok(trace(&self.name, types, &self.f)?)
    }

    /// The compiled form for these input types (traced and planned on first use).
    pub fn compiled(&self, types: &[TensorType]) -> Result<Compiled, Error> {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = cache.get(types) {
            return Ok(c.clone());
        }
        let c = compile(self.trace(types)?)?;
        cache.insert(types.to_vec(), c.clone());
        Ok(c)
    }

    /// Number of distinct input-type signatures compiled so far.
    pub fn cache_len(&self) -> usize {
        self.cache.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Calls the function on tensors, compiling for their types if needed.
    pub fn call(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>, Error> {
        let types: Vec<TensorType> = inputs.iter().map(|t| t.ty()).collect();
        self.compiled(&types)?.call(inputs)
    }
}
