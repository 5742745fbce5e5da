//! Compiling and calling functions, with a per-input-type cache for traced
//! closures (a traced function is re-traced and re-planned only when it is
//! called with inputs of a new dtype/shape combination).

use crate::error::Error;
use crate::trace::{trace, IntoOutputs, Tr};
use graft_core::ad::{self, Wrt};
use graft_core::batch::{place_out_axes, vmap_for_args};
use graft_core::{Executable, Func, IrError, RunStats, Tensor, TensorType};
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

    /// Returns finished tensors (e.g. earlier outputs) to the buffer pool so
    /// later calls reuse them instead of allocating (see [`Executable::recycle`]).
    pub fn recycle(&self, tensors: impl IntoIterator<Item = Tensor>) {
        self.exe.recycle(tensors)
    }

    /// The IR being run.
    pub fn func(&self) -> &Func {
        self.exe.func()
    }
}

/// A function-to-function transform applied after tracing. They compose in
/// any order and depth (`f.grad(..).grad(..)` is the second derivative,
/// `f.grad(..).vmap(..)` per-example gradients).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transform {
    /// Gradient with respect to the listed parameters.
    Grad(Wrt),
    /// Value followed by the gradient.
    ValueAndGrad(Wrt),
    /// Vectorization over a batch axis (see [`Jit::vmap`]).
    Vmap {
        /// Where each argument's batch axis is (or `None`: shared).
        in_axes: VmapAxes,
        /// Where each output's batch axis goes (or `None`: unbatched).
        out_axes: VmapAxes,
    },
}

/// The batch axes of a [`Transform::Vmap`], for its arguments or outputs.
/// Axes may be negative: for an argument, `-1` is the last axis of the
/// batched argument; for an output, `-1` puts the batch axis last. An
/// output axis past the output's rank clamps to the nearest end
/// (`min(k, rank)`; negative: `max(rank + 1 + k, 0)`), so outputs of any
/// rank take the batch axis: under `vmap_axis(1)` a per-example scalar
/// becomes a vector (see [`graft_core::batch::place_out_axes`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VmapAxes {
    /// One entry per argument (or output); `None` = not batched.
    Each(Vec<Option<isize>>),
    /// Axis `k` for every argument of rank > 0, rank-0 arguments shared
    /// (they have no axis to batch); for outputs, axis `k` for every output.
    All(isize),
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

    /// The vectorized function (`jax.vmap`): argument `i` carries a batch
    /// axis at `in_axes[i]` (`None`: shared by every example) and output `j`
    /// gets its batch axis at `out_axes[j]` (`None`: the output must not
    /// depend on a batched argument). The per-example function is traced at
    /// the argument types with the batch axes removed; all batched arguments
    /// must agree on the batch size. Negative axes count from the end (see
    /// [`VmapAxes`]).
    pub fn vmap(&self, in_axes: &[Option<isize>], out_axes: &[Option<isize>]) -> Self {
        self.with(Transform::Vmap {
            in_axes: VmapAxes::Each(in_axes.to_vec()),
            out_axes: VmapAxes::Each(out_axes.to_vec()),
        })
    }

    /// `vmap(f, axis=k)`: every argument of rank > 0 carries the batch at
    /// axis `k`, rank-0 arguments are shared across the batch, and every
    /// output gets its batch axis at `k`, or last if the output has rank
    /// below `k` (see [`VmapAxes`]).
    pub fn vmap_axis(&self, k: isize) -> Self {
        self.with(Transform::Vmap { in_axes: VmapAxes::All(k), out_axes: VmapAxes::All(k) })
    }

    /// Calls this (transformed) function from inside another trace: it is
    /// traced at the types of `xs` and emitted as one `call` equation, so the
    /// enclosing function can be transformed further (e.g. the gradient of
    /// `sum(f.vmap(..).apply(xs))`). If it fails, the enclosing trace
    /// returns the error and the single handle returned is poisoned. A
    /// function of no arguments has no enclosing trace to emit into: it
    /// cannot be applied, and the list returned is empty.
    pub fn apply(&self, xs: &[Tr]) -> Vec<Tr> {
        let Some(first) = xs.first() else {
            return Vec::new();
        };
        let types: Option<Vec<TensorType>> = xs.iter().map(Tr::ty).collect();
        let inner = match types.ok_or(None).and_then(|t| self.trace(&t).map_err(Some)) {
            Ok(f) => f,
            Err(e) => {
                let e = match e {
                    Some(Error::Ir(e)) => e,
                    Some(other) => IrError::invalid("apply", other.to_string()),
                    None => IrError::invalid("apply", "an argument comes from a failed op"),
                };
                return vec![first.lift(|_, _| Err(e))];
            }
        };
        let n = inner.outputs.len();
        let others: Vec<&Tr> = xs[1..].iter().collect();
        let inner = Arc::new(inner);
        first.lift_many(&others, n, |b, vals| b.call(inner, vals))
    }

    /// Applies `transforms[..k]` to the closure traced at the types that
    /// layer `k` sees. Transforms are applied inside out, but types flow
    /// outside in: a vmap layer strips its batch axes before tracing below.
    fn trace_layer(&self, k: usize, types: &[TensorType]) -> Result<Func, Error> {
        let Some(t) = k.checked_sub(1).map(|i| &self.transforms[i]) else {
            return Ok(trace(&self.name, types, &*self.f)?);
        };
        Ok(match t {
            Transform::Grad(wrt) => ad::grad(&self.trace_layer(k - 1, types)?, wrt)?,
            Transform::ValueAndGrad(wrt) => ad::value_and_grad(&self.trace_layer(k - 1, types)?, wrt)?,
            Transform::Vmap { in_axes, out_axes } => {
                let ia = resolve_in_axes(in_axes, types)?;
                let per: Vec<TensorType> = types
                    .iter()
                    .zip(&ia)
                    .map(|(t, a)| match a {
                        Some(a) => {
                            let mut shape = t.shape.clone();
                            shape.remove(*a);
                            TensorType::new(t.dtype, shape)
                        }
                        None => t.clone(),
                    })
                    .collect();
                let inner = self.trace_layer(k - 1, &per)?;
                let out_ranks: Vec<usize> = inner.output_types().iter().map(TensorType::rank).collect();
                let oa = match out_axes {
                    VmapAxes::Each(v) => place_out_axes(v, &out_ranks)?,
                    VmapAxes::All(a) => place_out_axes(&vec![Some(*a); out_ranks.len()], &out_ranks)?,
                };
                vmap_for_args(&inner, &ia, &oa, types, None)?
            }
        })
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
        self.trace_layer(self.transforms.len(), types)
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

/// Resolves a vmap's argument axes against the actual (batched) argument
/// types: axis `a` of an argument of rank `r` must be in `-r ..= r - 1`.
fn resolve_in_axes(axes: &VmapAxes, types: &[TensorType]) -> Result<Vec<Option<usize>>, IrError> {
    let each: Vec<Option<isize>> = match axes {
        VmapAxes::Each(v) => {
            if v.len() != types.len() {
                return Err(IrError::invalid(
                    "vmap",
                    format!(
                        "in_axes has {} entries but the function was called with {} arguments",
                        v.len(),
                        types.len()
                    ),
                ));
            }
            v.clone()
        }
        VmapAxes::All(a) => types.iter().map(|t| (t.rank() > 0).then_some(*a)).collect(),
    };
    each.iter()
        .zip(types)
        .enumerate()
        .map(|(i, (a, t))| {
            let Some(a) = *a else { return Ok(None) };
            let r = t.rank() as isize;
            let res = if a < 0 { a + r } else { a };
            if (0..r).contains(&res) {
                Ok(Some(res as usize))
            } else if r == 0 {
                Err(IrError::invalid(
                    "vmap",
                    format!("in_axes[{i}] = {a}, but argument {i} has type {t}, a scalar with no axis to batch"),
                ))
            } else {
                Err(IrError::invalid(
                    "vmap",
                    format!(
                        "in_axes[{i}] = {a} is out of range for argument {i} of type {t} (expected {} ..= {})",
                        -r,
                        r - 1
                    ),
                ))
            }
        })
        .collect()
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
