//! `gmm`: the Gaussian mixture log posterior and its gradient in
//! `alpha`, `mu`, `q`, `l` (output as an object of the four).

use graft_core::Tensor;
use serde_json::{Map, Value};

use super::{agree, encode_first, result, scalar, DecodeCx, ModuleSpec};
use crate::backend::TensorArgs;
use crate::convert::{to_json, Dim, Dims, Input};
use crate::error::GbError;

pub(super) const SPEC: ModuleSpec = ModuleSpec {
    name: "gmm",
    source: include_str!("../../../../gradbench/gmm.graft"),
    functions: &["objective", "jacobian"],
    decode,
    encode,
};

fn decode(input: &Value, _cx: &DecodeCx) -> Result<TensorArgs, GbError> {
    let mut dims = Dims::new();
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
    Ok(TensorArgs {
        tensors: vec![alpha, mu, q, l, x, scalar("gamma", gamma)?, scalar("m", m as f64)?],
        statics: vec![],
    })
}

fn encode(function: &str, args: &TensorArgs, output: Vec<Tensor>) -> Result<Value, GbError> {
    if function != "jacobian" {
        return encode_first(function, args, output);
    }
    let mut obj = Map::new();
    for (i, name) in ["alpha", "mu", "q", "l"].into_iter().enumerate() {
        obj.insert(name.to_string(), to_json(result(&output, i)?)?);
    }
    Ok(Value::Object(obj))
}
