//! Compiling and calling functions, with a per-input-type cache for traced
//! closures (a traced function is re-traced and re-planned only when it is
//! called with inputs of a new dtype/shape combination).

use crate::error::Error;
use crate::trace::{trace, IntoOutputs, Tr};
use graft_core::ad::Wrt;
use graft_core::transform::{Policy, Transform, VmapAxes};
use graft_core::{Executable, Func, IrError, RunStats, Tensor, TensorType};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

/// A verified and planned function.
#[derive(Debug, Clone)]
pub struct Compiled {
    exe: Backend,
}

/// Where a compiled function runs.
#[derive(Debug, Clone)]
enum Backend {
    Cpu(Arc<Executable>),
    #[cfg(feature = "gpu")]
    Gpu(Arc<graft_gpu::GpuExecutable>),
}

/// Verifies and plans a function built with the builder (or traced).
pub fn compile(func: Func) -> Result<Compiled, Error> {
    Ok(Compiled { exe: Backend::Cpu(Arc::new(Executable::new(func)?)) })
}

/// [`compile`] with size-generic native kernels: plans of the same function
/// at other sizes share their compiled code (see [`Jit::shapeless`]).
pub fn compile_shapeless(func: Func) -> Result<Compiled, Error> {
    let options = graft_core::ExecOptions { shapeless: true, ..graft_core::ExecOptions::from_env() };
    Ok(Compiled { exe: Backend::Cpu(Arc::new(Executable::with_options(func, options)?)) })
}

/// The GPU backend's device choice (`cpu`, `gpu`, `auto`), as `graft run
/// --device` and `GRAFT_DEVICE` take it (feature `gpu`).
#[cfg(feature = "gpu")]
pub use graft_gpu::Device;

/// [`compile`] for a device: [`Device::Gpu`] plans for the GPU backend
/// (an error without an adapter or for a function with f64/i64 values),
/// [`Device::Auto`] the GPU when it can run the function and else the CPU
/// (the reason is dropped: [`Compiled::device_name`] says where it runs),
/// [`Device::Cpu`] is [`compile`] (feature `gpu`).
#[cfg(feature = "gpu")]
pub fn compile_on(func: Func, device: Device) -> Result<Compiled, Error> {
    if device == Device::Cpu {
        return compile(func);
    }
    let (runner, _note) = graft_gpu::Runner::new(func, device).map_err(|e| Error::Gpu(e.to_string()))?;
    Ok(Compiled {
        exe: match runner {
            graft_gpu::Runner::Cpu(e) => Backend::Cpu(Arc::new(e)),
            graft_gpu::Runner::Gpu(g) => Backend::Gpu(Arc::new(g)),
        },
    })
}

impl Compiled {
    /// Runs on the inputs.
    pub fn call(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>, Error> {
        match &self.exe {
            Backend::Cpu(e) => Ok(e.run(inputs)?),
            #[cfg(feature = "gpu")]
            Backend::Gpu(g) => g.run(inputs).map_err(|e| Error::Gpu(e.to_string())),
        }
    }

    /// Runs with some inputs donated (see [`Executable::run_donating`]):
    /// their buffers are reused by the run once they are dead, and an
    /// elementwise update can write its result over its own input. On the
    /// GPU a donation only ends the caller's ownership (inputs are copied
    /// to the device anyway).
    pub fn call_donating(&self, inputs: Vec<graft_core::Input<'_>>) -> Result<Vec<Tensor>, Error> {
        match &self.exe {
            Backend::Cpu(e) => Ok(e.run_donating(inputs)?.0),
            #[cfg(feature = "gpu")]
            Backend::Gpu(g) => {
                let owned: Vec<Tensor> = inputs
                    .into_iter()
                    .map(|i| match i {
                        graft_core::Input::Borrowed(t) => t.clone(),
                        graft_core::Input::Donated(t) => t,
                    })
                    .collect();
                let refs: Vec<&Tensor> = owned.iter().collect();
                g.run(&refs).map_err(|e| Error::Gpu(e.to_string()))
            }
        }
    }

    /// Runs and reports peak bytes and kernel counts (CPU statistics: on
    /// the GPU this is an error; `graft_gpu::GpuExecutable::run_with_stats`
    /// reports launches and transfers).
    pub fn call_with_stats(&self, inputs: &[&Tensor]) -> Result<(Vec<Tensor>, RunStats), Error> {
        match &self.exe {
            Backend::Cpu(e) => Ok(e.run_with_stats(inputs)?),
            #[cfg(feature = "gpu")]
            Backend::Gpu(_) => Err(Error::Gpu(
                "call_with_stats reports the CPU executor's statistics; this function runs on the GPU".into(),
            )),
        }
    }

    /// Returns finished tensors (e.g. earlier outputs) to the buffer pool so
    /// later calls reuse them instead of allocating (see [`Executable::recycle`]).
    /// A GPU function's host results are simply dropped.
    pub fn recycle(&self, tensors: impl IntoIterator<Item = Tensor>) {
        match &self.exe {
            Backend::Cpu(e) => e.recycle(tensors),
            #[cfg(feature = "gpu")]
            Backend::Gpu(_) => tensors.into_iter().for_each(drop),
        }
    }

    /// The IR being run.
    pub fn func(&self) -> &Func {
        match &self.exe {
            Backend::Cpu(e) => e.func(),
            #[cfg(feature = "gpu")]
            Backend::Gpu(g) => g.func(),
        }
    }

    /// `cpu` or `gpu`: where calls run.
    pub fn device_name(&self) -> &'static str {
        match &self.exe {
            Backend::Cpu(_) => "cpu",
            #[cfg(feature = "gpu")]
            Backend::Gpu(_) => "gpu",
        }
    }

    /// The GPU executable, when this function runs on the GPU (its plan,
    /// host steps and transfer statistics).
    #[cfg(feature = "gpu")]
    pub fn gpu(&self) -> Option<&graft_gpu::GpuExecutable> {
        match &self.exe {
            Backend::Gpu(g) => Some(g),
            Backend::Cpu(_) => None,
        }
    }

    /// How many of its fused kernels have native code ready, of how many
    /// (see [`Executable::native_status`]); the rest run on the interpreter.
    /// `(0, 0)` on the GPU.
    pub fn native_status(&self) -> (usize, usize) {
        match &self.exe {
            Backend::Cpu(e) => e.native_status(),
            #[cfg(feature = "gpu")]
            Backend::Gpu(_) => (0, 0),
        }
    }

    /// Waits (up to `timeout`) until every compile this function started
    /// has finished; true if they did in time. Calls never need it.
    pub fn wait_native(&self, timeout: std::time::Duration) -> bool {
        match &self.exe {
            Backend::Cpu(e) => e.wait_all_native(timeout),
            #[cfg(feature = "gpu")]
            Backend::Gpu(_) => true,
        }
    }
}

/// A transform layer of a [`Jit`]: a [`Transform`] value, or a custom rule
/// whose functions are traced closures, traced once the types they are
/// called at are known.
#[derive(Clone)]
enum Layer {
    Fixed(Transform),
    CustomJvp(Rc<dyn TraceAt>),
    CustomVjp { fwd: Rc<dyn TraceAt>, bwd: Rc<dyn TraceAt> },
}

/// Something that can be traced into a [`Func`] at given input types (a
/// [`Jit`] of any closure type), so custom rules can be stored type-erased.
trait TraceAt {
    fn trace_at(&self, types: &[TensorType]) -> Result<Func, Error>;
}

impl<O: IntoOutputs, F: Fn(&[Tr]) -> O> TraceAt for Jit<F> {
    fn trace_at(&self, types: &[TensorType]) -> Result<Func, Error> {
        self.trace(types)
    }
}

/// A traced Rust closure, compiled lazily per input types and cached.
/// Transforms stack on it as values (`f.grad(..).vmap(..)`), applied by
/// [`Transform::apply`], the same path the language takes.
pub struct Jit<F> {
    name: String,
    f: Rc<F>,
    layers: Vec<Layer>,
    /// Number of inputs the closure expects, when fixed (`jit`'s one-input form).
    arity: Option<usize>,
    /// Compiled forms per input types: `[0]` planned op by op (while
    /// compilation is disabled, see [`graft_core::disable_compile`]), `[1]` compiled.
    cache: Mutex<[HashMap<Vec<TensorType>, Compiled>; 2]>,
    /// Compiled once per dtypes and ranks ([`Jit::shapeless`]).
    shapeless: bool,
    /// Where compiled forms run ([`Jit::device`]; `None`: the CPU).
    #[cfg(feature = "gpu")]
    device: Option<Device>,
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
        Jit {
            name: name.into(),
            f: Rc::new(f),
            layers: Vec::new(),
            arity: None,
            cache: Mutex::new([HashMap::new(), HashMap::new()]),
            shapeless: false,
            #[cfg(feature = "gpu")]
            device: None,
        }
    }

    /// The same function compiled for `device` (feature `gpu`):
    /// [`Device::Gpu`] runs every call on the GPU backend (the first call
    /// at new input types fails without an adapter or for f64/i64 values),
    /// [`Device::Auto`] there when it can and else on the CPU.
    /// [`Compiled::device_name`] of [`Jit::compiled`] says which.
    /// `Jit::device_from_env` takes the device from `GRAFT_DEVICE`.
    #[cfg(feature = "gpu")]
    pub fn device(&self, device: Device) -> Self {
        let mut j = self.with_layers(self.layers.clone());
        j.device = Some(device);
        j
    }

    /// [`Jit::device`] with the device `GRAFT_DEVICE` names (`cpu` when it
    /// is unset), as `graft run` chooses without `--device`; an unknown
    /// name is an error.
    #[cfg(feature = "gpu")]
    pub fn device_from_env(&self) -> Result<Self, Error> {
        let d = Device::from_env().map_err(|e| Error::Gpu(e.to_string()))?;
        Ok(self.device(d.unwrap_or(Device::Cpu)))
    }

    /// The same function compiled once per input dtypes and ranks instead
    /// of once per shape (MLX's `compile(f, shapeless=True)`): its native
    /// kernels read their sizes at run time (see `ExecOptions::shapeless`),
    /// so a call at new sizes only traces and plans again (cheap) and runs
    /// the library compiled for the first sizes from its first call.
    /// [`Jit::cache_size`] then counts (dtypes, ranks) signatures.
    ///
    /// Sizes still reach the graph when it is traced, so a call whose
    /// sizes break a rule of the function (two dimensions that must be
    /// equal, a reshape to a fixed shape) is rejected by that rule's
    /// error, which names both sizes. A plan whose structure changes with
    /// the sizes (a dimension becoming 1, a row too long for a kernel's
    /// scratch) compiles a second library; results never depend on it.
    pub fn shapeless(&self) -> Self {
        let mut j = self.with_layers(self.layers.clone());
        j.shapeless = true;
        j
    }

    fn with(&self, layer: Layer) -> Self {
        let mut layers = self.layers.clone();
        layers.push(layer);
        self.with_layers(layers)
    }

    fn with_layers(&self, layers: Vec<Layer>) -> Self {
        Jit {
            name: self.name.clone(),
            f: self.f.clone(),
            layers,
            arity: self.arity,
            cache: Mutex::new([HashMap::new(), HashMap::new()]),
            shapeless: self.shapeless,
            #[cfg(feature = "gpu")]
            device: self.device,
        }
    }

    /// Any transform, as a value (see [`Transform`] for the signature of the
    /// function each makes). The named methods below are shorthands.
    pub fn transform(&self, t: Transform) -> Self {
        self.with(Layer::Fixed(t))
    }

    /// The gradient function (same inputs; one output per `wrt` parameter).
    /// The traced function must return one floating-point scalar.
    pub fn grad(&self, wrt: Wrt) -> Self {
        self.transform(Transform::Grad { wrt })
    }

    /// Value and gradient from one forward pass: outputs `(value, grads...)`.
    pub fn value_and_grad(&self, wrt: Wrt) -> Self {
        self.transform(Transform::ValueAndGrad { wrt })
    }

    /// The vectorized function (`jax.vmap`): argument `i` carries a batch
    /// axis at `in_axes[i]` (`None`: shared by every example) and output `j`
    /// gets its batch axis at `out_axes[j]` (`None`: the output must not
    /// depend on a batched argument). The per-example function is traced at
    /// the argument types with the batch axes removed; all batched arguments
    /// must agree on the batch size. Negative axes count from the end (see
    /// [`VmapAxes`]).
    pub fn vmap(&self, in_axes: &[Option<isize>], out_axes: &[Option<isize>]) -> Self {
        self.transform(Transform::Vmap {
            in_axes: VmapAxes::Each(in_axes.to_vec()),
            out_axes: VmapAxes::Each(out_axes.to_vec()),
            axis_name: None,
        })
    }

    /// [`Jit::vmap`] whose batch axis is called `axis_name` (JAX's
    /// `vmap(f, axis_name=...)`): the collectives over that name inside
    /// (`graft::ops::psum`, ...) run over the batch, so a program written
    /// for one rank of a data-parallel axis runs all ranks at once.
    pub fn vmap_named(&self, in_axes: &[Option<isize>], out_axes: &[Option<isize>], axis_name: &str) -> Self {
        self.transform(Transform::Vmap {
            in_axes: VmapAxes::Each(in_axes.to_vec()),
            out_axes: VmapAxes::Each(out_axes.to_vec()),
            axis_name: Some(axis_name.to_string()),
        })
    }

    /// `vmap(f, axis=k)`: every argument of rank > 0 carries the batch at
    /// axis `k`, rank-0 arguments are shared across the batch, and every
    /// output gets its batch axis at `k`, or last if the output has rank
    /// below `k` (see [`VmapAxes`]).
    pub fn vmap_axis(&self, k: isize) -> Self {
        self.transform(Transform::Vmap { in_axes: VmapAxes::All(k), out_axes: VmapAxes::All(k), axis_name: None })
    }

    /// Forward-mode Jacobian of the one output with respect to input `wrt`:
    /// shape `output.shape ++ input.shape` (`jax.jacfwd`).
    pub fn jacfwd(&self, wrt: usize) -> Self {
        self.transform(Transform::Jacfwd { wrt })
    }

    /// Reverse-mode Jacobian, same result as [`Jit::jacfwd`] (`jax.jacrev`).
    pub fn jacrev(&self, wrt: usize) -> Self {
        self.transform(Transform::Jacrev { wrt })
    }

    /// The Jacobian in whichever mode needs fewer passes (`jax.jacobian`
    /// picks reverse; graft picks forward when the input is no larger than
    /// the output).
    pub fn jacobian(&self, wrt: usize) -> Self {
        self.transform(Transform::Jacobian { wrt })
    }

    /// The Hessian of a scalar function with respect to input `wrt`.
    pub fn hessian(&self, wrt: usize) -> Self {
        self.transform(Transform::Hessian { wrt })
    }

    /// The same function, rematerialised in reverse mode: the backward pass
    /// recomputes its intermediates instead of keeping them (`jax.checkpoint`).
    pub fn checkpoint(&self) -> Self {
        self.checkpoint_with(Policy::Nothing)
    }

    /// [`Jit::checkpoint`] with a saving policy: `Policy::Dots` keeps the
    /// results of matrix products and convolutions (`jax`'s `dots_saveable`).
    pub fn checkpoint_with(&self, policy: Policy) -> Self {
        self.transform(Transform::Checkpoint { policy })
    }

    /// The same function with a custom JVP rule (`jax.custom_jvp`): `rule`
    /// takes `(primals..., tangents of the float inputs...)` and returns
    /// `(outputs..., tangents of the float outputs...)`, linear in the
    /// tangents; every derivative of this function uses it.
    pub fn custom_jvp<G, P>(&self, rule: Jit<G>) -> Self
    where
        P: IntoOutputs,
        G: Fn(&[Tr]) -> P + 'static,
    {
        self.with(Layer::CustomJvp(Rc::new(rule)))
    }

    /// The same function with custom reverse mode (`jax.custom_vjp`):
    /// `fwd(primals...)` returns `(outputs..., residuals...)` and
    /// `bwd(residuals..., cotangents of the float outputs...)` returns one
    /// cotangent per float input.
    pub fn custom_vjp<G, P, H, Q>(&self, fwd: Jit<G>, bwd: Jit<H>) -> Self
    where
        P: IntoOutputs,
        G: Fn(&[Tr]) -> P + 'static,
        Q: IntoOutputs,
        H: Fn(&[Tr]) -> Q + 'static,
    {
        self.with(Layer::CustomVjp { fwd: Rc::new(fwd), bwd: Rc::new(bwd) })
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

    /// Reverse mode from inside another trace: traces this function at the
    /// types of `primals`, takes its VJP with respect to `wrt` and emits it
    /// as one `call` on `primals ++ cotangents` (one cotangent per float
    /// output). Returns `(outputs..., cotangents of the wrt inputs...)`;
    /// every handle is poisoned if tracing or the transform fails.
    pub(crate) fn apply_vjp(&self, primals: &[Tr], cotangents: &[Tr], wrt: Wrt) -> Vec<Tr> {
        let Some(first) = primals.first() else {
            return Vec::new();
        };
        let made = (|| -> Result<Func, Error> {
            let types: Vec<TensorType> = primals
                .iter()
                .map(Tr::ty)
                .collect::<Option<_>>()
                .ok_or_else(|| IrError::invalid("vjp", "an argument comes from a failed op"))?;
            let f = self.trace(&types)?;
            let mut all = types;
            for c in cotangents {
                all.push(c.ty().ok_or_else(|| IrError::invalid("vjp", "a cotangent comes from a failed op"))?);
            }
            Ok(Transform::Vjp { wrt }.apply(&f, &all)?)
        })();
        let inner = match made {
            Ok(f) => Arc::new(f),
            Err(e) => {
                let e = match e {
                    Error::Ir(e) => e,
                    other => IrError::invalid("vjp", other.to_string()),
                };
                return vec![first.lift(|_, _| Err(e))];
            }
        };
        let n = inner.outputs.len();
        let others: Vec<&Tr> = primals[1..].iter().chain(cotangents).collect();
        first.lift_many(&others, n, |b, vals| b.call(inner, vals))
    }

    /// Applies `layers[..k]` to the closure traced at the types that
    /// layer `k` sees. Transforms are applied inside out, but types flow
    /// outside in: a vmap layer strips its batch axes before tracing below.
    fn trace_layer(&self, k: usize, types: &[TensorType]) -> Result<Func, Error> {
        let Some(layer) = k.checked_sub(1).map(|i| &self.layers[i]) else {
            return Ok(trace(&self.name, types, &*self.f)?);
        };
        let t = match layer {
            Layer::Fixed(Transform::Vjp { wrt }) => return self.trace_vjp(k, wrt, types),
            Layer::Fixed(t) => t.clone(),
            Layer::CustomJvp(rule) => {
                let inner = self.trace_layer(k - 1, types)?;
                let mut rule_types = types.to_vec();
                rule_types.extend(types.iter().filter(|t| t.dtype.is_float()).cloned());
                let rule = Arc::new(rule.trace_at(&rule_types)?);
                return Ok(Transform::CustomJvp { rule }.apply(&inner, types)?);
            }
            Layer::CustomVjp { fwd, bwd } => {
                let inner = self.trace_layer(k - 1, types)?;
                let fwd = fwd.trace_at(types)?;
                let n_out = inner.outputs.len();
                let fwd_outs = fwd.output_types();
                if fwd_outs.len() < n_out || fwd_outs[..n_out] != inner.output_types()[..] {
                    return Err(IrError::invalid(
                        "custom_vjp",
                        format!(
                            "fwd must return the function's outputs ({}) first, then the residuals; it returns ({})",
                            fmt_types(&inner.output_types()),
                            fmt_types(&fwd_outs)
                        ),
                    )
                    .into());
                }
                let mut bwd_types = fwd_outs[n_out..].to_vec();
                bwd_types.extend(inner.output_types().into_iter().filter(|t| t.dtype.is_float()));
                let bwd = Arc::new(bwd.trace_at(&bwd_types)?);
                return Ok(Transform::CustomVjp { fwd: Arc::new(fwd), bwd }.apply(&inner, types)?);
            }
        };
        let inner = self.trace_layer(k - 1, &t.inner_types(types)?)?;
        Ok(t.apply(&inner, types)?)
    }

    /// A `vjp` layer: its arguments are the primals, then one cotangent per
    /// float output of the layer below. The count of those outputs is read
    /// off a trace at all the arguments (a closure that reads fewer inputs
    /// than it is given ignores the rest, so this never indexes past what
    /// it was given), then the layer below is traced at the primals alone.
    fn trace_vjp(&self, k: usize, wrt: &Wrt, types: &[TensorType]) -> Result<Func, Error> {
        let float_outs =
            |f: &Func| -> Vec<TensorType> { f.output_types().into_iter().filter(|t| t.dtype.is_float()).collect() };
        let mismatch = || -> Error {
            IrError::invalid(
                "vjp",
                format!(
                    "the arguments ({}) are not primals followed by one cotangent per floating-point output of `{}`",
                    fmt_types(types),
                    self.name
                ),
            )
            .into()
        };
        let m = float_outs(&self.trace_layer(k - 1, types)?).len();
        let p = types.len().checked_sub(m).filter(|&p| p < types.len()).ok_or_else(mismatch)?;
        let inner = self.trace_layer(k - 1, &types[..p])?;
        if float_outs(&inner)[..] != types[p..] {
            return Err(mismatch());
        }
        Ok(Transform::Vjp { wrt: wrt.clone() }.apply(&inner, types)?)
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
        self.trace_layer(self.layers.len(), types)
    }

    /// Forward mode at a point: `(outputs, output tangents)`. One tangent per
    /// floating-point input, in order.
    pub fn jvp(&self, primals: &[&Tensor], tangents: &[&Tensor]) -> Result<(Vec<Tensor>, Vec<Tensor>), Error> {
        let types: Vec<TensorType> = primals.iter().map(|t| t.ty()).collect();
        let f = self.trace(&types)?;
        let mut all = types.clone();
        all.extend(tangents.iter().map(|t| t.ty()));
        let j = compile(Transform::Jvp { wrt: Wrt::All }.apply(&f, &all)?)?;
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
        let (outputs, residuals, rest) = self.staged(Transform::Vjp { wrt: Wrt::All }, primals)?;
        Ok(Pullback { outputs, residuals, pullback: rest })
    }

    /// `jax.linearize`: runs the forward pass once and returns its outputs
    /// with the linear map from input tangents (one per float input) to
    /// output tangents at that point, reusable for many tangents.
    pub fn linearize(&self, primals: &[&Tensor]) -> Result<Pullback, Error> {
        let (outputs, residuals, rest) = self.staged(Transform::Linearize { wrt: Wrt::All }, primals)?;
        Ok(Pullback { outputs, residuals, pullback: rest })
    }

    fn staged(&self, t: Transform, primals: &[&Tensor]) -> Result<(Vec<Tensor>, Vec<Tensor>, Compiled), Error> {
        let types: Vec<TensorType> = primals.iter().map(|t| t.ty()).collect();
        let f = self.trace(&types)?;
        let staged = t.stage(&f)?;
        let mut fwd = compile(staged.forward)?.call(primals)?;
        let residuals = fwd.split_off(staged.n_outputs);
        Ok((fwd, residuals, compile(staged.rest)?))
    }

    /// The compiled form for these input types (traced and planned on first
    /// use, and again after [`graft_core::disable_compile`] or
    /// [`graft_core::enable_compile`] changed how functions are planned).
    pub fn compiled(&self, types: &[TensorType]) -> Result<Compiled, Error> {
        let mode = usize::from(graft_core::compile_enabled());
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = cache[mode].get(types) {
            return Ok(c.clone());
        }
        let func = self.trace(types)?;
        #[cfg(feature = "gpu")]
        if let Some(d) = self.device.filter(|&d| d != Device::Cpu) {
            let c = compile_on(func, d)?;
            cache[mode].insert(types.to_vec(), c.clone());
            return Ok(c);
        }
        let c = if self.shapeless { compile_shapeless(func)? } else { compile(func)? };
        if self.shapeless {
            // Plans at earlier sizes are dropped once many sizes were seen
            // (say, one per sequence length): each is cheap to make again.
            let same = |t: &Vec<TensorType>| signature(t) == signature(types);
            if cache[mode].keys().filter(|t| same(t)).count() >= SHAPELESS_PLANS {
                cache[mode].retain(|t, _| !same(t));
            }
        }
        cache[mode].insert(types.to_vec(), c.clone());
        Ok(c)
    }

    /// How many compilations the function holds (`jax`'s `_cache_size()`):
    /// one per distinct input-type signature it was called with (per compile
    /// mode); for a [`Jit::shapeless`] function, one per distinct dtypes and
    /// ranks, however many sizes it was called at. Tests and users can see
    /// when a call recompiled.
    pub fn cache_size(&self) -> usize {
        let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if self.shapeless {
            cache.iter().map(|m| m.keys().map(|t| signature(t)).collect::<std::collections::HashSet<_>>().len()).sum()
        } else {
            cache.iter().map(HashMap::len).sum()
        }
    }

    /// Forgets every compilation, so the next call traces again (for a
    /// function whose closure reads a setting, such as the trainer's
    /// micro-batch count).
    pub fn clear_cache(&self) {
        for c in self.cache.lock().unwrap_or_else(|e| e.into_inner()).iter_mut() {
            c.clear();
        }
    }

    /// Calls the function on tensors, compiling for their types if needed.
    pub fn call(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>, Error> {
        let types: Vec<TensorType> = inputs.iter().map(|t| t.ty()).collect();
        self.compiled(&types)?.call(inputs)
    }
}

/// Plans kept per (dtypes, ranks) signature of a shapeless function.
const SHAPELESS_PLANS: usize = 32;

/// What a shapeless function compiles once for: each input's dtype and rank.
pub fn signature(types: &[TensorType]) -> Vec<(graft_core::DType, usize)> {
    types.iter().map(|t| (t.dtype, t.shape.len())).collect()
}

fn fmt_types(types: &[TensorType]) -> String {
    types.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", ")
}

/// The result of [`Jit::pullback`] and [`Jit::linearize`]: the forward
/// outputs, the saved residuals, and the linear map that reads them.
#[derive(Debug)]
pub struct Pullback {
    /// The forward outputs.
    pub outputs: Vec<Tensor>,
    residuals: Vec<Tensor>,
    pullback: Compiled,
}

impl Pullback {
    /// The linear map at the saved point: for a pullback, input cotangents
    /// (one per floating-point input) from output cotangents (one per
    /// floating-point output); for a linearization, output tangents from
    /// input tangents (one per floating-point input).
    pub fn call(&self, cotangents: &[&Tensor]) -> Result<Vec<Tensor>, Error> {
        let mut ins: Vec<&Tensor> = self.residuals.iter().collect();
        ins.extend_from_slice(cotangents);
        self.pullback.call(&ins)
    }
}
