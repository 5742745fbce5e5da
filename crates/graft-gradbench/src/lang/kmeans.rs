//! `kmeans`: the cost and the Newton direction `dir` for `points: f64[n][d]`
//! and `centroids: f64[k][d]`.

use serde_json::Value;

use super::{encode_first, DecodeCx, ModuleSpec};
use crate::backend::TensorArgs;
use crate::convert::{Dim, Dims, Input};
use crate::error::GbError;

pub(super) const SPEC: ModuleSpec = ModuleSpec {
    name: "kmeans",
    source: include_str!("../../../../gradbench/kmeans.graft"),
    functions: &["cost", "dir"],
    decode,
    encode: encode_first,
};

fn decode(input: &Value, _cx: &DecodeCx) -> Result<TensorArgs, GbError> {
    let mut dims = Dims::new();
    let inp = Input::new(input)?;
    let p = inp.f64_tensor("points", &mut dims, &[Dim::Var("n"), Dim::Var("d")])?;
    let c = inp.f64_tensor("centroids", &mut dims, &[Dim::Var("k"), Dim::Var("d")])?;
    if p.numel() == 0 || c.numel() == 0 {
        return Err(GbError::input("points", "points and centroids must not be empty"));
    }
    Ok(TensorArgs { tensors: vec![p, c], statics: vec![] })
}
