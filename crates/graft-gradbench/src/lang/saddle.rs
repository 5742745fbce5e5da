//! `saddle`: nested gradient descent (an argmin of an argmax); the input is
//! the common starting point `start: f64[2]`, the output `x* ++ y*: f64[4]`.

use serde_json::Value;

use super::{encode_first, DecodeCx, ModuleSpec};
use crate::backend::TensorArgs;
use crate::convert::{Dim, Dims, Input};
use crate::error::GbError;

pub(super) const SPEC: ModuleSpec = ModuleSpec {
    name: "saddle",
    source: include_str!("../../../../gradbench/saddle.graft"),
    functions: &["rr", "rf", "fr", "ff"],
    decode,
    encode: encode_first,
};

fn decode(input: &Value, _cx: &DecodeCx) -> Result<TensorArgs, GbError> {
    let mut dims = Dims::new();
    let start = Input::new(input)?.f64_tensor("start", &mut dims, &[Dim::Fixed(2)])?;
    Ok(TensorArgs { tensors: vec![start], statics: vec![] })
}
