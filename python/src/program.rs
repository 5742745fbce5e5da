//! `graft.load`: a graft-language program whose defs are called with
//! NumPy arrays.

use crate::convert::{to_numpy, to_tensor};
use crate::GraftError;
use graft_core::{exec, ExecOptions, Executable, Tensor, TensorType};
use graft_lang::diag::render;
use graft_lang::{Compiled, Module, Output};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// A parsed and type-checked graft program.
#[pyclass(unsendable, module = "graft._graft", name = "Program")]
pub struct Program {
    file: String,
    module: Module,
    /// Each entry lowered once per argument types (the plan is cached by
    /// the executor per lowered function; a shapeless program keeps its
    /// own plans, made with size-generic kernels).
    instances: RefCell<HashMap<(String, Vec<TensorType>), (Compiled, Option<Arc<Executable>>)>>,
    /// Plans with size-generic kernels (`ExecOptions::shapeless`): a def's
    /// instances at other sizes share one compiled library per argument
    /// dtypes and ranks.
    shapeless: bool,
}

fn render_all(ds: &[graft_lang::diag::Diagnostic], file: &str, src: &str) -> String {
    ds.iter().map(|d| render(d, file, src)).collect::<Vec<_>>().join("\n")
}

fn output(py: Python<'_>, o: Output) -> PyResult<PyObject> {
    match o {
        Output::Tensor(t) => to_numpy(py, t),
        Output::Tuple(v) => {
            let items = v.into_iter().map(|o| output(py, o)).collect::<PyResult<Vec<_>>>()?;
            Ok(PyTuple::new(py, items)?.into_any().unbind())
        }
    }
}

#[pymethods]
impl Program {
    /// Parses and checks `source` (named `file` in diagnostics);
    /// `shapeless` compiles each def once per argument dtypes and ranks.
    #[new]
    #[pyo3(signature = (file, source, shapeless=false))]
    fn new(file: String, source: String, shapeless: bool) -> PyResult<Program> {
        let module =
            Module::from_source(&file, &source).map_err(|ds| GraftError::new_err(render_all(&ds, &file, &source)))?;
        module.check().map_err(|ds| GraftError::new_err(render_all(&ds, &file, &source)))?;
        Ok(Program { file, module, instances: RefCell::new(HashMap::new()), shapeless })
    }

    /// How many compilations the program holds: one per (def, argument
    /// types), or for a shapeless program one per (def, argument dtypes
    /// and ranks), as `jit(f).cache_size()` counts them.
    fn cache_size(&self) -> usize {
        let instances = self.instances.borrow();
        if self.shapeless {
            let sigs: HashSet<(String, Vec<(graft_core::DType, usize)>)> =
                instances.keys().map(|(e, t)| (e.clone(), graft::signature(t))).collect();
            return sigs.len();
        }
        instances.len()
    }

    /// The names of the program's defs, in source order.
    fn defs(&self) -> Vec<String> {
        self.module.program().defs.iter().map(|d| d.name.name.clone()).collect()
    }

    /// Runs the def `entry` on NumPy arrays; a tuple result is a tuple.
    /// The def is lowered once per argument types; planning and running
    /// happen with the GIL released.
    fn run(&self, py: Python<'_>, entry: &str, args: Vec<Bound<'_, PyAny>>) -> PyResult<PyObject> {
        let ins = args
            .iter()
            .enumerate()
            .map(|(i, a)| to_tensor(a, &format!("{entry}: argument {i}")))
            .collect::<PyResult<Vec<_>>>()?;
        let types: Vec<TensorType> = ins.iter().map(Tensor::ty).collect();
        let key = (entry.to_string(), types);
        let cached = self.instances.borrow().get(&key).cloned();
        let (c, plan) = match cached {
            Some(c) => c,
            None => {
                let c = self
                    .module
                    .instantiate(entry, &key.1)
                    .map_err(|d| GraftError::new_err(render(&d, &self.file, self.module.source())))?;
                // Size-generic kernels: the library compiled for the first
                // sizes is found at plan time for the others.
                let plan = if self.shapeless {
                    let func = c.func.clone();
                    let options = ExecOptions { shapeless: true, ..ExecOptions::from_env() };
                    let exe = py.allow_threads(move || Executable::with_options(func, options));
                    Some(Arc::new(exe.map_err(|e| GraftError::new_err(e.to_string()))?))
                } else {
                    None
                };
                self.instances.borrow_mut().insert(key, (c.clone(), plan.clone()));
                (c, plan)
            }
        };
        let func = c.func.clone();
        let outs = py.allow_threads(move || {
            let exe = match plan {
                Some(exe) => exe,
                None => exec::plan_cached(&func).map_err(|e| e.to_string())?,
            };
            let refs: Vec<&Tensor> = ins.iter().collect();
            exe.run(&refs).map_err(|e| e.to_string())
        });
        let outs = outs.map_err(|msg| {
            let span = self.module.def(entry).map_or(0..0, |d| d.name.span.clone());
            let d = graft_lang::diag::Diagnostic::new(graft_lang::diag::Stage::Runtime, span, msg);
            GraftError::new_err(render(&d, &self.file, self.module.source()))
        })?;
        output(py, c.output(outs))
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Program>()
}
