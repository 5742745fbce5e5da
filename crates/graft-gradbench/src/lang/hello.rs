//! `hello`: `square(x) = x²` and its derivative `double`; the input is a bare number.

use serde_json::Value;

use super::{encode_first, DecodeCx, ModuleSpec};
use crate::backend::TensorArgs;
use crate::convert::f64_tensor;
use crate::error::GbError;

pub(super) const SPEC: ModuleSpec = ModuleSpec {
    name: "hello",
    source: include_str!("../../../../gradbench/hello.graft"),
    functions: &["square", "double"],
    decode,
    encode: encode_first,
};

fn decode(input: &Value, _cx: &DecodeCx) -> Result<TensorArgs, GbError> {
    let x = f64_tensor("input", input)?;
    if x.rank() != 0 {
        return Err(GbError::input("input", format!("expected a number, found shape {:?}", x.shape())));
    }
    Ok(TensorArgs { tensors: vec![x], statics: vec![] })
}
