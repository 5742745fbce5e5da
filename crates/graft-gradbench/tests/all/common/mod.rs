//! A real (if small) graft backend for protocol tests: the `hello` and `lse`
//! modules written with graft's tracing API, differentiated by graft's own
//! `grad`, compiled once per input shape through `ProgramCache`. The language
//! based backend replaces it for the real evals; this one exists so protocol
//! tests check actual numbers, not canned replies.
#![allow(dead_code)]

use std::cell::Cell;
use std::sync::Arc;

use graft::{compile, jit_n, Compiled, Tensor, Tr, Wrt};
use graft_gradbench::convert::{f64_tensor, scalar_json, to_json, Dim, Dims, Input};
use graft_gradbench::{Backend, GbError, ProgramCache, TensorArgs};
use serde_json::Value;

fn square(x: &[Tr]) -> Tr {
    &x[0] * &x[0]
}

/// LogSumExp from primitives, with the max-shift trick.
fn lse(x: &[Tr]) -> Tr {
    let m = x[0].max(());
    (&x[0] - &m).exp().sum(()).log() + &m
}

/// `hello` and `lse`, plus a test-only module `faulty` whose `panic`
/// function panics in `run`, to show a panic does not end the session.
pub struct ToyBackend {
    pub cache: ProgramCache<Compiled>,
    /// Runs performed, to check the timing policy.
    pub runs: Cell<usize>,
}

impl ToyBackend {
    pub fn new() -> ToyBackend {
        ToyBackend { cache: ProgramCache::new(), runs: Cell::new(0) }
    }
}

fn build(module: &str, function: &str, args: &TensorArgs) -> Result<Compiled, GbError> {
    let types: Vec<_> = args.tensors.iter().map(Tensor::ty).collect();
    let func = match (module, function) {
        ("hello", "square") => jit_n("square", square).trace(&types),
        ("hello", "double") => jit_n("square", square).grad(Wrt::All).trace(&types),
        ("lse", "primal") => jit_n("lse", lse).trace(&types),
        ("lse", "gradient") => jit_n("lse", lse).grad(Wrt::All).trace(&types),
        ("faulty", "panic") => jit_n("square", square).trace(&types),
        _ => return Err(GbError::UnknownFunction { module: module.into(), function: function.into() }),
    };
    let func = func.map_err(|e| GbError::Backend(e.to_string()))?;
    compile(func).map_err(|e| GbError::Backend(e.to_string()))
}

impl Backend for ToyBackend {
    type Args = (String, TensorArgs);
    type Program = Compiled;
    type Output = Vec<Tensor>;

    fn tool(&self) -> &str {
        "graft"
    }

    fn define(&mut self, module: &str) -> Result<(), GbError> {
        match module {
            "hello" | "lse" | "faulty" => Ok(()),
            _ => Err(GbError::UnknownModule(module.to_string())),
        }
    }

    fn decode(&mut self, module: &str, function: &str, input: &Value) -> Result<Self::Args, GbError> {
        let unknown = || GbError::UnknownFunction { module: module.into(), function: function.into() };
        let tensors = match (module, function) {
            ("hello", "square" | "double") | ("faulty", "panic") => {
                let x = f64_tensor("input", input)?;
                if x.rank() != 0 {
                    return Err(GbError::input("input", format!("expected a number, found shape {:?}", x.shape())));
                }
                vec![x]
            }
            ("lse", "primal" | "gradient") => {
                let mut dims = Dims::new();
                vec![Input::new(input)?.f64_tensor("x", &mut dims, &[Dim::Var("n")])?]
            }
            _ => return Err(unknown()),
        };
        Ok((function.to_string(), TensorArgs { tensors, statics: vec![] }))
    }

    fn compile(&mut self, module: &str, function: &str, args: &Self::Args) -> Result<Arc<Compiled>, GbError> {
        let key = args.1.key(module, function);
        self.cache.get_or_build(key, || build(module, function, &args.1))
    }

    fn run(&self, program: &Compiled, args: &Self::Args) -> Result<Vec<Tensor>, GbError> {
        self.runs.set(self.runs.get() + 1);
        if args.0 == "panic" {
            panic!("deliberate test panic");
        }
        program.call(&args.1.refs()).map_err(|e| GbError::Backend(e.to_string()))
    }

    fn encode(&self, _module: &str, function: &str, _args: &Self::Args, output: Vec<Tensor>) -> Result<Value, GbError> {
        let out = output.first().ok_or_else(|| GbError::Output("no output".into()))?;
        match function {
            "gradient" => to_json(out),
            _ => scalar_json(out),
        }
    }
}
