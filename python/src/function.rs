//! A Python function over flat lists of traced tensors, as a `graft::Jit`.
//!
//! Transform layers are core `Transform` values stacked with
//! `Jit::transform` (custom rules with `Jit::custom_jvp`/`custom_vjp`), the
//! path the Rust API and the graft language take, so each transform is
//! defined once, in `graft_core::transform`.

use crate::convert::{dtype_name, tensor_type, to_numpy, to_tensor};
use crate::ops::call_body;
use crate::{graft_err, take_pending, Handle};
use graft::{transform, Compiled, Jit, Tensor, TensorType, Tr, Transform, VmapAxes, Wrt};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

pub(crate) type PyFn = Box<dyn Fn(&[Tr]) -> Vec<Tr>>;

/// A closure over traced tensors that calls the Python callable `f` with a
/// list of handles and takes back the list of handles it returns.
pub(crate) fn closure(f: Py<PyAny>) -> PyFn {
    Box::new(move |xs: &[Tr]| Python::with_gil(|py| call_body(f.bind(py), xs)))
}

/// One transform layer: a core `Transform`, or a custom rule whose
/// functions are Python callables (traced when the types are known).
enum Layer {
    Fixed(Transform),
    CustomJvp(Py<PyAny>),
    CustomVjp(Py<PyAny>, Py<PyAny>),
}

/// A Python function traced into graft, with transform layers on top.
///
/// It holds the callable and the layers, not a `graft::Jit` (whose traced
/// handles are single-threaded): a `Jit` is built for each trace, and the
/// compiled forms are cached here per input types, so one function can be
/// called from several Python threads.
#[pyclass(frozen, module = "graft._graft", name = "Function")]
pub struct Function {
    name: String,
    f: Py<PyAny>,
    layers: Vec<Layer>,
    cache: Mutex<HashMap<Vec<TensorType>, Compiled>>,
    /// Compiled once per dtypes and ranks (`graft::compile_shapeless`).
    shapeless: bool,
}

impl Function {
    fn with(&self, py: Python<'_>, layer: Layer) -> Function {
        let mut layers: Vec<Layer> = self
            .layers
            .iter()
            .map(|l| match l {
                Layer::Fixed(t) => Layer::Fixed(t.clone()),
                Layer::CustomJvp(r) => Layer::CustomJvp(r.clone_ref(py)),
                Layer::CustomVjp(a, b) => Layer::CustomVjp(a.clone_ref(py), b.clone_ref(py)),
            })
            .collect();
        layers.push(layer);
        Function {
            name: self.name.clone(),
            f: self.f.clone_ref(py),
            layers,
            cache: Mutex::new(HashMap::new()),
            shapeless: self.shapeless,
        }
    }

    /// The `graft::Jit` of the callable with every layer stacked on it.
    fn jit(&self, py: Python<'_>) -> Jit<PyFn> {
        let mut j = Jit::new(self.name.clone(), closure(self.f.clone_ref(py)));
        for l in &self.layers {
            j = match l {
                Layer::Fixed(t) => j.transform(t.clone()),
                Layer::CustomJvp(r) => j.custom_jvp(Jit::new(format!("{}_jvp", self.name), closure(r.clone_ref(py)))),
                Layer::CustomVjp(a, b) => j.custom_vjp(
                    Jit::new(format!("{}_fwd", self.name), closure(a.clone_ref(py))),
                    Jit::new(format!("{}_bwd", self.name), closure(b.clone_ref(py))),
                ),
            };
        }
        j
    }

    fn trace(&self, py: Python<'_>, types: &[TensorType]) -> PyResult<graft::Func> {
        take_pending();
        self.jit(py).trace(types).map_err(graft_err)
    }

    /// The compiled form for these types: from the cache, or traced (with
    /// the GIL: tracing calls Python) and compiled. The cache is not locked
    /// while tracing, since Python may switch threads meanwhile.
    fn compiled(&self, py: Python<'_>, types: &[TensorType]) -> PyResult<Compiled> {
        if let Some(c) = self.cache.lock().unwrap_or_else(|e| e.into_inner()).get(types) {
            return Ok(c.clone());
        }
        let func = self.trace(py, types)?;
        let c = if self.shapeless { graft::compile_shapeless(func) } else { graft::compile(func) };
        let c = c.map_err(graft_err)?;
        self.cache.lock().unwrap_or_else(|e| e.into_inner()).insert(types.to_vec(), c.clone());
        Ok(c)
    }
}

fn tensors(args: &[Bound<'_, PyAny>]) -> PyResult<Vec<Tensor>> {
    args.iter().enumerate().map(|(i, a)| to_tensor(a, &format!("argument {i}"))).collect()
}

fn types_of(args: &[(Vec<usize>, String)]) -> PyResult<Vec<TensorType>> {
    args.iter().map(|(s, d)| tensor_type(s.clone(), d)).collect()
}

/// Runs a compiled function with the GIL released.
fn run(py: Python<'_>, c: &Compiled, ins: &[&Tensor]) -> PyResult<Vec<PyObject>> {
    let outs = py.allow_threads(|| c.call(ins));
    let outs = outs.map_err(graft_err)?;
    outs.into_iter().map(|t| to_numpy(py, t)).collect()
}

#[pymethods]
impl Function {
    /// Wraps `f(handles: list) -> list of handles`; `shapeless` compiles
    /// it once per input dtypes and ranks instead of once per shape.
    #[new]
    #[pyo3(signature = (name, f, shapeless=false))]
    fn new(name: String, f: Py<PyAny>, shapeless: bool) -> Function {
        Function { name, f, layers: Vec::new(), cache: Mutex::new(HashMap::new()), shapeless }
    }

    /// The function's name.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// A new function with one more transform layer (a core `Transform`).
    /// A vmap with `axis_name` binds that name for the collectives in its
    /// body (`graft.lax.psum(x, axis_name)` and the others).
    #[pyo3(signature = (kind, wrt=None, index=0, in_axes=None, out_axes=None, out_axis=None, policy="nothing", axis_name=None))]
    #[allow(clippy::too_many_arguments)]
    fn transform(
        &self,
        py: Python<'_>,
        kind: &str,
        wrt: Option<Vec<usize>>,
        index: usize,
        in_axes: Option<Vec<Option<isize>>>,
        out_axes: Option<Vec<Option<isize>>>,
        out_axis: Option<isize>,
        policy: &str,
        axis_name: Option<String>,
    ) -> PyResult<Function> {
        if axis_name.is_some() && kind != "vmap" {
            return Err(PyValueError::new_err(format!("axis_name is a vmap parameter, not one of `{kind}`")));
        }
        // One place maps names to transforms (`Transform::from_name`), so
        // a new transform needs no change here.
        let out_axes = match (out_axes, out_axis) {
            (Some(v), _) => Some(VmapAxes::Each(v)),
            (None, Some(k)) => Some(VmapAxes::All(k)),
            (None, None) => None,
        };
        let options = transform::Options {
            wrt,
            index,
            in_axes: in_axes.map(VmapAxes::Each),
            out_axes,
            axis_name,
            policy: Some(policy.to_string()),
        };
        let t = Transform::from_name(kind, options).map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(self.with(py, Layer::Fixed(t)))
    }

    /// The same function whose derivatives use `rule(primals + tangents of
    /// the float inputs) -> outputs + tangents of the float outputs`.
    fn custom_jvp(&self, py: Python<'_>, rule: Py<PyAny>) -> Function {
        self.with(py, Layer::CustomJvp(rule))
    }

    /// The same function whose reverse mode uses `fwd(primals) -> outputs +
    /// residuals` and `bwd(residuals + cotangents of the float outputs) ->
    /// cotangents of the float inputs`.
    fn custom_vjp(&self, py: Python<'_>, fwd: Py<PyAny>, bwd: Py<PyAny>) -> Function {
        self.with(py, Layer::CustomVjp(fwd, bwd))
    }

    /// Runs on NumPy arrays (compiled once per input types; the GIL is
    /// released while graft runs). Returns one NumPy array per output.
    fn call(&self, py: Python<'_>, args: Vec<Bound<'_, PyAny>>) -> PyResult<Vec<PyObject>> {
        let ins = tensors(&args)?;
        let types: Vec<TensorType> = ins.iter().map(Tensor::ty).collect();
        let c = self.compiled(py, &types)?;
        let refs: Vec<&Tensor> = ins.iter().collect();
        run(py, &c, &refs)
    }

    /// Calls the function from inside another trace (one `call` equation,
    /// so the enclosing function can be transformed further).
    fn apply(&self, py: Python<'_>, args: Vec<PyRef<'_, Handle>>) -> PyResult<Vec<Handle>> {
        let xs: Vec<Tr> = args.iter().map(|h| h.tr.clone()).collect();
        if xs.is_empty() {
            return Err(PyValueError::new_err("a function of no arguments cannot be applied inside a trace"));
        }
        take_pending();
        let outs = self.jit(py).apply(&xs);
        if let Some(e) = take_pending() {
            return Err(e);
        }
        outs.into_iter().map(Handle::checked).collect()
    }

    /// The output types `[(shape, dtype)]` at these input types.
    fn output_types(
        &self,
        py: Python<'_>,
        types: Vec<(Vec<usize>, String)>,
    ) -> PyResult<Vec<(Vec<usize>, &'static str)>> {
        let f = self.trace(py, &types_of(&types)?)?;
        Ok(f.output_types().into_iter().map(|t| (t.shape.to_vec(), dtype_name(t.dtype))).collect())
    }

    /// The IR at these input types `[(shape, dtype)]`, as text.
    fn lower_text(&self, py: Python<'_>, types: Vec<(Vec<usize>, String)>) -> PyResult<String> {
        let f = self.trace(py, &types_of(&types)?)?;
        Ok(f.to_string())
    }

    /// How many compilations are cached: one per input-type signature, or
    /// for a shapeless function one per input dtypes and ranks.
    fn cache_size(&self) -> usize {
        let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if self.shapeless {
            return cache.keys().map(|t| graft::signature(t)).collect::<std::collections::HashSet<_>>().len();
        }
        cache.len()
    }

    /// Runs the forward pass once; returns `(outputs, pullback)` where the
    /// pullback maps output cotangents to input cotangents (`jax.vjp`).
    fn pullback(&self, py: Python<'_>, args: Vec<Bound<'_, PyAny>>) -> PyResult<(Vec<PyObject>, LinearMap)> {
        self.staged(py, args, "vjp")
    }

    /// Runs the forward pass once; returns `(outputs, linear map)` from input
    /// tangents to output tangents (`jax.linearize`).
    fn linearize(&self, py: Python<'_>, args: Vec<Bound<'_, PyAny>>) -> PyResult<(Vec<PyObject>, LinearMap)> {
        self.staged(py, args, "linearize")
    }
}

impl Function {
    fn staged(&self, py: Python<'_>, args: Vec<Bound<'_, PyAny>>, kind: &str) -> PyResult<(Vec<PyObject>, LinearMap)> {
        let ins = tensors(&args)?;
        let types: Vec<TensorType> = ins.iter().map(Tensor::ty).collect();
        let f = self.trace(py, &types)?;
        let t = if kind == "vjp" { Transform::Vjp { wrt: Wrt::All } } else { Transform::Linearize { wrt: Wrt::All } };
        let staged = t.stage(&f).map_err(graft_err)?;
        let fwd = graft::compile(staged.forward).map_err(graft_err)?;
        let rest = graft::compile(staged.rest).map_err(graft_err)?;
        let n = staged.n_outputs;
        let mut outs = py
            .allow_threads(|| {
                let refs: Vec<&Tensor> = ins.iter().collect();
                fwd.call(&refs)
            })
            .map_err(graft_err)?;
        let residuals = outs.split_off(n);
        let outs = outs.into_iter().map(|t| to_numpy(py, t)).collect::<PyResult<_>>()?;
        Ok((outs, LinearMap { residuals: Arc::new(residuals), map: rest }))
    }
}

/// The linear map of `Function.pullback`/`Function.linearize`: holds the
/// residuals of the forward pass that ran once.
#[pyclass(module = "graft._graft", name = "LinearMap")]
pub struct LinearMap {
    residuals: Arc<Vec<Tensor>>,
    map: Compiled,
}

#[pymethods]
impl LinearMap {
    /// Applies the map to NumPy arrays (cotangents or tangents).
    fn call(&self, py: Python<'_>, args: Vec<Bound<'_, PyAny>>) -> PyResult<Vec<PyObject>> {
        let given = tensors(&args)?;
        let ins: Vec<&Tensor> = self.residuals.iter().chain(&given).collect();
        run(py, &self.map, &ins)
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Function>()?;
    m.add_class::<LinearMap>()?;
    Ok(())
}
