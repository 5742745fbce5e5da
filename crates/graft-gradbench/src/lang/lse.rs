//! `lse`: LogSumExp of `x: f64[n]` and its gradient.

use serde_json::Value;

use super::{encode_first, DecodeCx, ModuleSpec};
use crate::backend::TensorArgs;
use crate::convert::{Dim, Dims, Input};
use crate::error::GbError;

pub(super) const SPEC: ModuleSpec = ModuleSpec {
    name: "lse",
    source: include_str!("../../../../gradbench/lse.graft"),
    functions: &["primal", "gradient"],
    decode,
    encode: encode_first,
};

fn decode(input: &Value, _cx: &DecodeCx) -> Result<TensorArgs, GbError> {
    let mut dims = Dims::new();
    let x = Input::new(input)?.f64_tensor("x", &mut dims, &[Dim::Var("n")])?;
    Ok(TensorArgs { tensors: vec![x], statics: vec![] })
}
