//! Compiling and calling functions, with a per-input-type cache for traced
//! closures (a traced function is re-traced and re-planned only when it is
//! called with inputs of a new dtype/shape combination).

use crate::error::Error;
use crate::trace::{trace, IntoOutputs, Tr};
use graft_core::ad::{self, Wrt};
use graft_core::{Executable, Func, RunStats, Tensor, TensorType};
use std::collections::HashMap;
use std::rc::Rc;
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

/// A function-to-function transform applied after tracing. Each keeps the
/// parameter list, so they compose in any order and depth
/// (`f.grad(..).grad(..)` is the second derivative).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transform {
    /// Gradient with respect to the listed parameters.
    Grad(Wrt),
    /// Value followed by the gradient.
    ValueAndGrad(Wrt),
}

/// A traced Rust closure, compiled lazily per input types and cached.
pub struct Jit<F> {
    name: String,
    f: Rc<F>,
    transforms: Vec<Transform>,
    /// Number of inputs the closure expects, when fixed (`jit`'s one-input form).
    arity: Option<usize>,
    cache: Mutex<HashMap<Vec<TensorType>, Compiled>>,
}

/// Wraps a closure over traced tensors. The closure receives one [`Tr`] per
/// input (`f(&[Tr])` form via [`Jit::call`]) — for one-input closures use
/// `jit(name, |x| ...)`; for several, `jit_n(name, |xs| ...)`.
pub fn jit<O: IntoOutputs, F: Fn(&Tr) -> O>(name: impl Into<String>, f: F) -> Jit<impl Fn(&[Tr]) -> O> {
    let mut j = Jit::new(name, move |xs: &[Tr]| f(&xs[0]));
    j.arity = Some(1);
    j
}

/// Wraps a closure taking every input as a slice of traced tensors.
pub fn jit_n<O: IntoOutputs, F: Fn(&[Tr]) -> O>(name: impl Into<String>, f: F) -> Jit<F> {
    Jit::new(name, f)
}

impl<O: IntoOutputs, F: Fn(&[Tr]) -> O> Jit<F> {
    /// Wraps a closure taking all inputs as a slice.
    pub fn new(name: impl Into<String>, f: F) -> Self {
        Jit { name: name.into(), f: Rc::new(f), transforms: Vec::new(), arity: None, cache: Mutex::new(HashMap::new()) }
    }

    fn with(&self, t: Transform) -> Self {
        let mut transforms = self.transforms.clone();
        transforms.push(t);
        Jit {
            name: self.name.clone(),
            f: self.f.clone(),
            transforms,
            arity: self.arity,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The gradient function (same inputs; one output per `wrt` parameter).
    /// The traced function must return one floating-point scalar.
    pub fn grad(&self, wrt: Wrt) -> Self {
        self.with(Transform::Grad(wrt))
    }

    /// Value and gradient from one forward pass: outputs `(value, grads...)`.
    pub fn value_and_grad(&self, wrt: Wrt) -> Self {
        self.with(Transform::ValueAndGrad(wrt))
    }

    /// Traces the closure for the given input types and applies the
    /// transforms (no caching).
    pub fn trace(&self, types: &[TensorType]) -> Result<Func, Error> {
        if let Some(n) = self.arity {
            if n != types.len() {
                return Err(graft_core::ExecError::InputCount {
                    func: self.name.clone(),
                    expected: n,
                    got: types.len(),
                }
                .into());
            }
        }
        let mut f = trace(&self.name, types, &*self.f)?;
        for t in &self.transforms {
            f = match t {
                Transform::Grad(wrt) => ad::grad(&f, wrt)?,
                Transform::ValueAndGrad(wrt) => ad::value_and_grad(&f, wrt)?,
            };
        }
        Ok(f)
    }

    /// Forward mode at a point: `(outputs, output tangents)`. One tangent per
    /// floating-point input, in order.
    pub fn jvp(&self, primals: &[&Tensor], tangents: &[&Tensor]) -> Result<(Vec<Tensor>, Vec<Tensor>), Error> {
        let types: Vec<TensorType> = primals.iter().map(|t| t.ty()).collect();
        let f = self.trace(&types)?;
        let j = compile(ad::jvp_func(&f)?)?;
        let mut ins: Vec<&Tensor> = primals.to_vec();
        ins.extend_from_slice(tangents);
        let mut outs = j.call(&ins)?;
        let touts = outs.split_off(f.outputs.len());
        Ok((outs, touts))
    }

    /// Reverse mode at a point: `(outputs, input cotangents)` for one
    /// cotangent per floating-point output; gradients for every float input.
    pub fn vjp(&self, primals: &[&Tensor], cotangents: &[&Tensor]) -> Result<(Vec<Tensor>, Vec<Tensor>), Error> {
        let pb = self.pullback(primals)?;
        let grads = pb.call(cotangents)?;
        Ok((pb.outputs, grads))
    }

    /// Runs the forward pass once and returns its outputs with a pullback that
    /// maps output cotangents to input cotangents, reusable for many cotangents.
    pub fn pullback(&self, primals: &[&Tensor]) -> Result<Pullback, Error> {
        let types: Vec<TensorType> = primals.iter().map(|t| t.ty()).collect();
        let f = self.trace(&types)?;
        let split = ad::vjp_split(&f, &Wrt::All)?;
        let mut fwd = compile(split.forward)?.call(primals)?;
        let residuals = fwd.split_off(split.n_outputs);
        Ok(Pullback { outputs: fwd, residuals, pullback: compile(split.rest)? })
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

/// The result of [`Jit::pullback`]: forward outputs and the saved residuals.
#[derive(Debug)]
pub struct Pullback {
    /// The forward outputs.
    pub outputs: Vec<Tensor>,
    residuals: Vec<Tensor>,
    pullback: Compiled,
}

impl Pullback {
    /// Input cotangents (one per floating-point input) for the given output
    /// cotangents (one per floating-point output).
    pub fn call(&self, cotangents: &[&Tensor]) -> Result<Vec<Tensor>, Error> {
        let mut ins: Vec<&Tensor> = self.residuals.iter().collect();
        ins.extend_from_slice(cotangents);
        self.pullback.call(&ins)
    }
}
