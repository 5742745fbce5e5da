//! `ht`: ADBench's hand-tracking residuals `f64[3N]` and their Jacobian
//! `f64[3N][26]` (simple variant, `us` empty) or `f64[3N][28]`
//! (complicated: the u0 and u1 columns first).
//!
//! `us` reaches the entry as `[n, 2]` in both variants (zeros for the simple
//! one) and the variant as the length, 0 or 1, of a carrier vector: it is
//! structural, since the Jacobian's width depends on it.
//!
//! The model object is decoded into tensors in the entry's parameter order;
//! the parent tree stays data (the program resolves it by pointer doubling),
//! so one compiled program serves every tree of the same size. Index fields
//! are checked here (range, parents before children), because the program's
//! gathers clamp out-of-range indices instead of failing.

use graft_core::Tensor;
use serde_json::Value;

use super::{encode_first, scalar, size_carrier, DecodeCx, ModuleSpec};
use crate::backend::TensorArgs;
use crate::convert::{Dim, Dims, Input};
use crate::error::GbError;

pub(super) const SPEC: ModuleSpec = ModuleSpec {
    name: "ht",
    source: include_str!("../../../../gradbench/ht.graft"),
    functions: &["objective", "jacobian"],
    decode,
    encode: encode_first,
};

/// The theta layout (global rotation and translation, then four angles per
/// finger over a fixed bone table) is defined for ADBench's 22-bone hand.
const BONES: usize = 22;

fn ints(t: &Tensor) -> Vec<i64> {
    t.to_f64_vec().into_iter().map(|x| x as i64).collect()
}

/// Every index of `field` must lie in `0..bound`.
fn in_range(field: &str, t: &Tensor, bound: usize) -> Result<(), GbError> {
    match ints(t).into_iter().enumerate().find(|&(_, x)| x < 0 || x as usize >= bound) {
        Some((i, x)) => Err(GbError::input(field, format!("entry {i} is {x}, outside 0..{bound}"))),
        None => Ok(()),
    }
}

fn decode(input: &Value, cx: &DecodeCx) -> Result<TensorArgs, GbError> {
    let mut dims = Dims::new();
    let inp = Input::new(input)?;
    let theta = inp.f64_tensor("theta", &mut dims, &[Dim::Fixed(26)])?;
    let us = inp.f64_tensor("us", &mut dims, &[Dim::Var("u"), Dim::Fixed(2)])?;
    let data = inp.object("data", "data")?;
    let model = data.object("model", "data.model")?;
    let parents = model.i64_tensor("parents", &mut dims, &[Dim::Fixed(BONES)])?;
    let b = [Dim::Fixed(BONES), Dim::Fixed(4), Dim::Fixed(4)];
    let base_rel = model.f64_tensor("base_relatives", &mut dims, &b)?;
    let inv_base_abs = model.f64_tensor("inverse_base_absolutes", &mut dims, &b)?;
    let base_pos = model.f64_tensor("base_positions", &mut dims, &[Dim::Var("v"), Dim::Fixed(4)])?;
    let weights = model.f64_tensor("weights", &mut dims, &[Dim::Var("v"), Dim::Fixed(BONES)])?;
    let triangles = model.i64_tensor("triangles", &mut dims, &[Dim::Var("t"), Dim::Fixed(3)])?;
    let mirrored = model.bool("is_mirrored")?;
    let corr = data.i64_tensor("correspondences", &mut dims, &[Dim::Var("n")])?;
    let points = data.f64_tensor("points", &mut dims, &[Dim::Var("n"), Dim::Fixed(3)])?;

    let bone_count = model.usize("bone_count")?;
    if bone_count != BONES {
        return Err(GbError::input(
            "data.model.bone_count",
            format!("must be {BONES} (the hand model), found {bone_count}"),
        ));
    }
    for (i, p) in ints(&parents).into_iter().enumerate() {
        if p < -1 || p >= i as i64 {
            return Err(GbError::input(
                "data.model.parents",
                format!("entry {i} is {p}: a parent must be -1 (root) or an earlier bone"),
            ));
        }
    }
    let nv = dims.get("v").unwrap_or(0);
    let nt = dims.get("t").unwrap_or(0);
    let n = dims.get("n").unwrap_or(0);
    if nv == 0 {
        return Err(GbError::input("data.model.base_positions", "the model has no vertices"));
    }
    if n == 0 {
        return Err(GbError::input("data.correspondences", "must not be empty"));
    }
    in_range("data.model.triangles", &triangles, nv)?;
    let nu = dims.get("u").unwrap_or(0);
    let complicated = nu != 0;
    let us = if complicated {
        if nu != n {
            return Err(GbError::input("us", format!("has {nu} pairs but there are {n} correspondences")));
        }
        in_range("data.correspondences", &corr, nt)?;
        us
    } else {
        in_range("data.correspondences", &corr, nv)?;
        // The entry's `us` is [n, 2] in both variants; the simple one ignores it.
        Tensor::from_vec(vec![n, 2], vec![0.0f64; 2 * n])
            .map_err(|e| GbError::input("us", format!("internal error: {e}")))?
    };
    let variant = size_carrier(cx, "us", usize::from(complicated), 0)?;
    let mirrored = scalar("data.model.is_mirrored", if mirrored { 1.0 } else { 0.0 })?;
    Ok(TensorArgs {
        tensors: vec![
            theta,
            us,
            variant,
            parents,
            base_rel,
            inv_base_abs,
            base_pos,
            weights,
            mirrored,
            triangles,
            corr,
            points,
        ],
        statics: vec![],
    })
}
