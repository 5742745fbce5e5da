//! `graft.load`: a graft-language program whose defs are called with
//! NumPy arrays.

use crate::convert::{to_numpy, to_tensor};
use crate::GraftError;
use graft_lang::diag::render;
use graft_lang::{Module, Output};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

/// A parsed and type-checked graft program.
#[pyclass(unsendable, module = "graft._graft", name = "Program")]
pub struct Program {
    file: String,
    module: Module,
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
    /// Parses and checks `source` (named `file` in diagnostics).
    #[new]
    fn new(file: String, source: String) -> PyResult<Program> {
        let module =
            Module::from_source(&file, &source).map_err(|ds| GraftError::new_err(render_all(&ds, &file, &source)))?;
        module.check().map_err(|ds| GraftError::new_err(render_all(&ds, &file, &source)))?;
        Ok(Program { file, module })
    }

    /// The names of the program's defs, in source order.
    fn defs(&self) -> Vec<String> {
        self.module.program().defs.iter().map(|d| d.name.name.clone()).collect()
    }

    /// Runs the def `entry` on NumPy arrays; a tuple result is a tuple.
    fn run(&self, py: Python<'_>, entry: &str, args: Vec<Bound<'_, PyAny>>) -> PyResult<PyObject> {
        let ins = args
            .iter()
            .enumerate()
            .map(|(i, a)| to_tensor(a, &format!("{entry}: argument {i}")))
            .collect::<PyResult<Vec<_>>>()?;
        let out = self
            .module
            .run(entry, &ins)
            .map_err(|d| GraftError::new_err(render(&d, &self.file, self.module.source())))?;
        output(py, out)
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Program>()
}
