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
//! Invariants: a module is parsed and type-checked once, at `define`; an
//! entry is instantiated, simplified and planned once per argument types
//! (the `ProgramCache` key), so repeated evaluations only run the plan.

use std::collections::HashMap;
use std::sync::Arc;

use graft_core::exec::{self, Executable};
use graft_core::{DType, Tensor, TensorType};
use graft_lang::Module;
use serde_json::{Map, Value};

use crate::backend::{Backend, ProgramCache, TensorArgs};
use crate::convert::{f64_tensor, scalar_json, to_json, Dim, Dims, Input};
use crate::error::GbError;

/// The embedded programs, by GradBench module name.
pub const MODULES: &[(&str, &str)] = &[
    ("hello", include_str!("../../../gradbench/hello.graft")),
    ("lse", include_str!("../../../gradbench/lse.graft")),
    ("llsq", include_str!("../../../gradbench/llsq.graft")),
    ("kmeans", include_str!("../../../gradbench/kmeans.graft")),
    ("gmm", include_str!("../../../gradbench/gmm.graft")),
    ("ode", include_str!("../../../gradbench/ode.graft")),
];

/// The entry defs each module serves (GradBench function names).
fn functions(module: &str) -> &'static [&'static str] {
    match module {
        "hello" => &["square", "double"],
        "lse" | "llsq" | "ode" => &["primal", "gradient"],
        "kmeans" => &["cost", "dir"],
        "gmm" => &["objective", "jacobian"],
        _ => &[],
    }
}

/// An entry instantiated and planned at one set of argument types.
#[derive(Debug)]
pub struct LangProgram {
    exe: Arc<Executable>,
}

/// Serves the modules in [`MODULES`].
#[derive(Debug, Default)]
pub struct LangBackend {
    modules: HashMap<String, Module>,
    /// Compiled entries by argument types (public so tests can check reuse).
    pub cache: ProgramCache<LangProgram>,
}

impl LangBackend {
    /// A backend with no module defined yet.
    pub fn new() -> LangBackend {
        LangBackend::default()
    }
}

/// A zero-filled f64 vector whose length carries a structural integer.
fn size_carrier(field: &str, n: usize, min: usize) -> Result<Tensor, GbError> {
    if n < min {
        return Err(GbError::input(field, format!("must be at least {min}, found {n}")));
    }
    Tensor::from_vec(vec![n], vec![0.0f64; n]).map_err(|e| GbError::input(field, format!("internal error: {e}")))
}

fn scalar(field: &str, x: f64) -> Result<Tensor, GbError> {
    Tensor::from_vec(Vec::<usize>::new(), vec![x]).map_err(|e| GbError::input(field, format!("internal error: {e}")))
}

/// Checks that an integer field agrees with the size the tensors imply.
fn agree(inp: &Input<'_>, field: &str, dims: &Dims, dim: &str) -> Result<(), GbError> {
    let v = inp.usize(field)?;
    match dims.get(dim) {
        Some(s) if s != v => Err(GbError::input(field, format!("is {v} but the arrays have {dim} = {s}"))),
        _ => Ok(()),
    }
}

fn decode_args(module: &str, input: &Value) -> Result<TensorArgs, GbError> {
    let mut dims = Dims::new();
    let (tensors, statics) = match module {
        "hello" => {
            let x = f64_tensor("input", input)?;
            if x.rank() != 0 {
                return Err(GbError::input("input", format!("expected a number, found shape {:?}", x.shape())));
            }
            (vec![x], vec![])
        }
        "lse" => (vec![Input::new(input)?.f64_tensor("x", &mut dims, &[Dim::Var("n")])?], vec![]),
        "llsq" => {
            let inp = Input::new(input)?;
            let x = inp.f64_tensor("x", &mut dims, &[Dim::Var("m")])?;
            let n = inp.usize("n")?;
            (vec![x, size_carrier("n", n, 2)?], vec![n as i64])
        }
        "ode" => {
            let inp = Input::new(input)?;
            let x = inp.f64_tensor("x", &mut dims, &[Dim::Var("n")])?;
            if x.numel() == 0 {
                return Err(GbError::input("x", "must not be empty"));
            }
            let s = inp.usize("s")?;
            (vec![x, size_carrier("s", s, 1)?], vec![s as i64])
        }
        "kmeans" => {
            let inp = Input::new(input)?;
            let p = inp.f64_tensor("points", &mut dims, &[Dim::Var("n"), Dim::Var("d")])?;
            let c = inp.f64_tensor("centroids", &mut dims, &[Dim::Var("k"), Dim::Var("d")])?;
            if p.numel() == 0 || c.numel() == 0 {
                return Err(GbError::input("points", "points and centroids must not be empty"));
            }
            (vec![p, c], vec![])
        }
        "gmm" => {
            let inp = Input::new(input)?;
            let alpha = inp.f64_tensor("alpha", &mut dims, &[Dim::Var("k")])?;
            let mu = inp.f64_tensor("mu", &mut dims, &[Dim::Var("k"), Dim::Var("d")])?;
            let q = inp.f64_tensor("q", &mut dims, &[Dim::Var("k"), Dim::Var("d")])?;
            let d = dims.get("d").unwrap_or(0);
            if d < 2 || dims.get("k").unwrap_or(0) == 0 {
                return Err(GbError::input("mu", "need k >= 1 components of dimension d >= 2"));
            }
            dims.bind("p", d * (d - 1) / 2, "d")?;
            let l = inp.f64_tensor("l", &mut dims, &[Dim::Var("k"), Dim::Var("p")])?;
            let x = inp.f64_tensor("x", &mut dims, &[Dim::Var("n"), Dim::Var("d")])?;
            for (field, dim) in [("d", "d"), ("k", "k"), ("n", "n")] {
                agree(&inp, field, &dims, dim)?;
            }
            let gamma = inp.f64("gamma")?;
            let m = inp.usize("m")?;
            (vec![alpha, mu, q, l, x, scalar("gamma", gamma)?, scalar("m", m as f64)?], vec![])
        }
        other => return Err(GbError::UnknownModule(other.to_string())),
    };
    Ok(TensorArgs { tensors, statics })
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
        let Some((_, src)) = MODULES.iter().find(|(m, _)| *m == module) else {
            return Err(GbError::UnknownModule(module.to_string()));
        };
        let file = format!("{module}.graft");
        let parsed = Module::from_source(&file, src).and_then(|m| m.check().map(|()| m)).map_err(|ds| {
            GbError::Backend(ds.iter().map(|d| format!("{file}: {}", d.message)).collect::<Vec<_>>().join("; "))
        })?;
        self.modules.insert(module.to_string(), parsed);
        Ok(())
    }

    fn decode(&mut self, module: &str, function: &str, input: &Value) -> Result<TensorArgs, GbError> {
        if !functions(module).contains(&function) {
            return Err(GbError::UnknownFunction { module: module.into(), function: function.into() });
        }
        decode_args(module, input)
    }

    fn compile(&mut self, module: &str, function: &str, args: &TensorArgs) -> Result<Arc<LangProgram>, GbError> {
        let m = self.modules.get(module).ok_or_else(|| GbError::NotDefined(module.to_string()))?;
        let key = args.key(module, function);
        self.cache.get_or_build(key, || {
            let types: Vec<TensorType> = args.tensors.iter().map(Tensor::ty).collect();
            let c = m.instantiate(function, &types).map_err(|d| diag_err(module, d))?;
            let exe = exec::plan_cached(&c.func).map_err(|e| GbError::Backend(e.to_string()))?;
            Ok(LangProgram { exe })
        })
    }

    fn run(&self, program: &LangProgram, args: &TensorArgs) -> Result<Vec<Tensor>, GbError> {
        program.exe.run(&args.refs()).map_err(|e| GbError::Backend(e.to_string()))
    }

    fn encode(&self, module: &str, function: &str, _args: &TensorArgs, output: Vec<Tensor>) -> Result<Value, GbError> {
        let one = |i: usize| output.get(i).ok_or_else(|| GbError::Output(format!("missing result {i}")));
        for t in &output {
            if t.dtype() != DType::F64 {
                return Err(GbError::Output(format!("expected f64 results, found {}", t.dtype().name())));
            }
        }
        match (module, function) {
            ("gmm", "jacobian") => {
                let mut obj = Map::new();
                for (i, name) in ["alpha", "mu", "q", "l"].into_iter().enumerate() {
                    obj.insert(name.to_string(), to_json(one(i)?)?);
                }
                Ok(Value::Object(obj))
            }
            (_, "square" | "double" | "primal" | "cost" | "objective") if module != "ode" => scalar_json(one(0)?),
            _ => to_json(one(0)?),
        }
    }
}
