//! `llsq`: the least-squares objective of `x: f64[m]` on an `n`-point grid;
//! `n` is structural and arrives as the length of a zero-filled carrier.

use serde_json::Value;

use super::{encode_first, size_carrier, DecodeCx, ModuleSpec};
use crate::backend::TensorArgs;
use crate::convert::{Dim, Dims, Input};
use crate::error::GbError;

pub(super) const SPEC: ModuleSpec = ModuleSpec {
    name: "llsq",
    source: include_str!("../../../../gradbench/llsq.graft"),
    functions: &["primal", "gradient"],
    decode,
    encode: encode_first,
};

fn decode(input: &Value, cx: &DecodeCx) -> Result<TensorArgs, GbError> {
    let mut dims = Dims::new();
    let inp = Input::new(input)?;
    let x = inp.f64_tensor("x", &mut dims, &[Dim::Var("m")])?;
    let n = inp.usize("n")?;
    Ok(TensorArgs { tensors: vec![x, size_carrier(cx, "n", n, 2)?], statics: vec![n as i64] })
}
