//! `det`: the determinant by expansion over all ell! permutations and its
//! gradient. `ell` is structural: A arrives flat (`f64[ell²]`, row-major)
//! and is passed as `[ell, ell]`, so the size is part of the argument type.

use serde_json::Value;

use super::{encode_first, DecodeCx, ModuleSpec};
use crate::backend::TensorArgs;
use crate::convert::{Dim, Dims, Input};
use crate::error::GbError;

/// The program sizes its prefix count ell!/7! for ell <= 13 (13! is
/// 6.2e9 terms, minutes of work); larger inputs are refused.
pub(crate) const MAX_ELL: usize = 13;

pub(super) const SPEC: ModuleSpec = ModuleSpec {
    name: "det",
    source: include_str!("../../../../gradbench/det.graft"),
    functions: &["primal", "gradient"],
    decode,
    encode: encode_first,
};

fn decode(input: &Value, _cx: &DecodeCx) -> Result<TensorArgs, GbError> {
    let mut dims = Dims::new();
    let inp = Input::new(input)?;
    let ell = inp.usize("ell")?;
    if ell == 0 || ell > MAX_ELL {
        return Err(GbError::input("ell", format!("must be between 1 and {MAX_ELL}, found {ell}")));
    }
    let a = inp.f64_tensor("A", &mut dims, &[Dim::Fixed(ell * ell)])?;
    let a = a.reshape(vec![ell, ell]).map_err(|e| GbError::input("A", format!("internal error: {e}")))?;
    Ok(TensorArgs { tensors: vec![a], statics: vec![ell as i64] })
}
