//! `particle`: nested AD through a data-dependent Euler loop; the input is
//! the solver's starting control `w`, the output the final `w`.

use serde_json::Value;

use super::{encode_first, scalar, DecodeCx, ModuleSpec};
use crate::backend::TensorArgs;
use crate::convert::Input;
use crate::error::GbError;

pub(super) const SPEC: ModuleSpec = ModuleSpec {
    name: "particle",
    source: include_str!("../../../../gradbench/particle.graft"),
    functions: &["rr", "rf", "fr", "ff"],
    decode,
    encode: encode_first,
};

fn decode(input: &Value, _cx: &DecodeCx) -> Result<TensorArgs, GbError> {
    let w = Input::new(input)?.f64("w")?;
    Ok(TensorArgs { tensors: vec![scalar("w", w)?], statics: vec![] })
}
