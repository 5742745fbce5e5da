//! `ode`: RK4 with `s` steps; `s` is structural (a carrier's length).

use serde_json::Value;

use super::{encode_first, size_carrier, DecodeCx, ModuleSpec};
use crate::backend::TensorArgs;
use crate::convert::{Dim, Dims, Input};
use crate::error::GbError;

pub(super) const SPEC: ModuleSpec = ModuleSpec {
    name: "ode",
    source: include_str!("../../../../gradbench/ode.graft"),
    functions: &["primal", "gradient"],
    decode,
    encode: encode_first,
};

fn decode(input: &Value, cx: &DecodeCx) -> Result<TensorArgs, GbError> {
    let mut dims = Dims::new();
    let inp = Input::new(input)?;
    let x = inp.f64_tensor("x", &mut dims, &[Dim::Var("n")])?;
    if x.numel() == 0 {
        return Err(GbError::input("x", "must not be empty"));
    }
    let s = inp.usize("s")?;
    Ok(TensorArgs { tensors: vec![x, size_carrier(cx, "s", s, 1)?], statics: vec![s as i64] })
}
