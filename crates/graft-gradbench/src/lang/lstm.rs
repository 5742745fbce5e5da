//! `lstm`: ADBench's diagonal LSTM objective and its gradient in
//! `main_params` then `extra_params` (one flat vector, as the golden tool
//! prints it). The layer count is structural: it is part of the argument
//! types. The JSON rows are regrouped by layer (a reshape, same row-major
//! order): `main_params` `[2l][4b]` -> `[l, 2, 4, b]` (layer, weight or
//! bias, gate, bit) and `state` `[2l][b]` -> `[l, 2, b]` (layer, hidden or
//! cell, bit), because the language has no integer division to split `2l`
//! or `4b` itself.

use serde_json::Value;

use super::{encode_first, DecodeCx, ModuleSpec};
use crate::backend::TensorArgs;
use crate::convert::{Dim, Dims, Input};
use crate::error::GbError;

pub(super) const SPEC: ModuleSpec = ModuleSpec {
    name: "lstm",
    source: include_str!("../../../../gradbench/lstm.graft"),
    functions: &["objective", "jacobian"],
    decode,
    encode: encode_first,
};

fn decode(input: &Value, _cx: &DecodeCx) -> Result<TensorArgs, GbError> {
    let mut dims = Dims::new();
    let inp = Input::new(input)?;
    let sequence = inp.f64_tensor("sequence", &mut dims, &[Dim::Var("c"), Dim::Var("b")])?;
    let b = dims.get("b").unwrap_or(0);
    if b == 0 {
        return Err(GbError::input("sequence", "needs at least one bit per character"));
    }
    if dims.get("c").unwrap_or(0) < 2 {
        return Err(GbError::input("sequence", "needs at least two characters (one prediction)"));
    }
    dims.bind("b4", 4 * b, "b")?;
    let main_params = inp.f64_tensor("main_params", &mut dims, &[Dim::Var("l2"), Dim::Var("b4")])?;
    let l2 = dims.get("l2").unwrap_or(0);
    if l2 == 0 || !l2.is_multiple_of(2) {
        return Err(GbError::input("main_params", format!("needs 2l rows for l >= 1 layers, found {l2}")));
    }
    let extra_params = inp.f64_tensor("extra_params", &mut dims, &[Dim::Fixed(3), Dim::Var("b")])?;
    let state = inp.f64_tensor("state", &mut dims, &[Dim::Var("l2"), Dim::Var("b")])?;
    let l = l2 / 2;
    let regroup = |t: graft_core::Tensor, shape: Vec<usize>, field: &str| {
        t.reshape(shape).map_err(|e| GbError::input(field, format!("internal error: {e}")))
    };
    let main_params = regroup(main_params, vec![l, 2, 4, b], "main_params")?;
    let state = regroup(state, vec![l, 2, b], "state")?;
    Ok(TensorArgs { tensors: vec![main_params, extra_params, state, sequence], statics: vec![] })
}
