//! `ba`: bundle adjustment. The input is compressed (one camera, point,
//! weight and feature, plus the counts `n`, `m`, `p`); decoding expands it
//! as GradBench's golden tool does (n equal cameras, m equal points, p equal
//! weights and features, observation i = (camera i mod n, point i mod m)),
//! and the program computes every observation from the expanded data.
//!
//! Encoding writes the golden tool's compressed formats: the objective as
//! the first observation's residuals plus repeat counts, the Jacobian as
//! the first 30 and the last entry of its CSR arrays. The CSR index arrays
//! depend only on `n`, `m`, `p`, so they are generated here; every value
//! comes from the program's derivative.

use graft_core::Tensor;
use serde_json::{json, Value};

use super::{result, DecodeCx, ModuleSpec};
use crate::backend::TensorArgs;
use crate::convert::{to_json_flat, Dim, Dims, Input};
use crate::error::GbError;

pub(super) const SPEC: ModuleSpec = ModuleSpec {
    name: "ba",
    source: include_str!("../../../../gradbench/ba.graft"),
    functions: &["objective", "jacobian"],
    decode,
    encode,
};

/// Camera parameters per camera (r, C, f, u0, v0, k1, k2).
const NCAM: usize = 11;
/// Non-zeros of one reprojection row: 11 camera, 3 point, 1 weight column.
const ROW_NNZ: usize = NCAM + 3 + 1;
/// How many leading entries of each CSR array the golden format keeps.
const HEAD: usize = 2 * ROW_NNZ;
/// Largest accepted count: indices are i32 in the program, and the
/// expanded arrays (about 56 bytes per observation) must fit in memory.
const MAX_COUNT: usize = 1 << 27;

fn count(inp: &Input<'_>, field: &str) -> Result<usize, GbError> {
    let v = inp.usize(field)?;
    if v == 0 || v > MAX_COUNT {
        return Err(GbError::input(field, format!("must be between 1 and {MAX_COUNT}, found {v}")));
    }
    Ok(v)
}

fn tensor<T: graft_core::Element>(field: &str, shape: Vec<usize>, data: Vec<T>) -> Result<Tensor, GbError> {
    Tensor::from_vec(shape, data).map_err(|e| GbError::input(field, format!("internal error: {e}")))
}

/// `copies` copies of `one`, back to back.
fn repeat(one: &Tensor, copies: usize) -> Result<Vec<f64>, GbError> {
    let s = one.as_slice::<f64>().map_err(|e| GbError::input("ba", format!("internal error: {e}")))?;
    Ok(s.repeat(copies))
}

fn decode(input: &Value, _cx: &DecodeCx) -> Result<TensorArgs, GbError> {
    let mut dims = Dims::new();
    let inp = Input::new(input)?;
    let (n, m, p) = (count(&inp, "n")?, count(&inp, "m")?, count(&inp, "p")?);
    let cam = inp.f64_tensor("cam", &mut dims, &[Dim::Fixed(NCAM)])?;
    let x = inp.f64_tensor("x", &mut dims, &[Dim::Fixed(3)])?;
    let feat = inp.f64_tensor("feat", &mut dims, &[Dim::Fixed(2)])?;
    let w = inp.f64("w")?;
    let cam_idx: Vec<i32> = (0..p).map(|i| (i % n) as i32).collect();
    let pt_idx: Vec<i32> = (0..p).map(|i| (i % m) as i32).collect();
    Ok(TensorArgs {
        tensors: vec![
            tensor("cam", vec![n, NCAM], repeat(&cam, n)?)?,
            tensor("x", vec![m, 3], repeat(&x, m)?)?,
            tensor("w", vec![p], vec![w; p])?,
            tensor("feat", vec![p, 2], repeat(&feat, p)?)?,
            tensor("n", vec![p], cam_idx)?,
            tensor("m", vec![p], pt_idx)?,
        ],
        statics: vec![],
    })
}

fn f64s<'a>(t: &'a Tensor, what: &str) -> Result<&'a [f64], GbError> {
    t.as_slice::<f64>().map_err(|e| GbError::Output(format!("{what}: {e}")))
}

fn encode(function: &str, args: &TensorArgs, output: Vec<Tensor>) -> Result<Value, GbError> {
    let shape = |i: usize| args.tensors.get(i).map(|t| t.shape().first().copied().unwrap_or(0)).unwrap_or(0);
    let (n, m, p) = (shape(0), shape(1), shape(2));
    let first = result(&output, 0)?;
    let second = f64s(result(&output, 1)?, "w result")?;
    if function != "jacobian" {
        let e = f64s(first, "reprojection error")?;
        if p == 0 || e.len() != 2 * p || second.len() != p {
            return Err(GbError::Output(format!("expected {p} observations, found {} and {}", e.len(), second.len())));
        }
        return Ok(json!({
            "reproj_error": {"elements": to_json_flat(&tensor("reproj_error", vec![2], e[..2].to_vec())?)?, "repeated": p},
            "w_err": {"element": second[0], "repeated": p},
        }));
    }
    let blocks = f64s(first, "jacobian blocks")?;
    if p == 0 || blocks.len() != 2 * ROW_NNZ * p || second.len() != p {
        return Err(GbError::Output(format!("expected {p} blocks, found {} values", blocks.len())));
    }
    // CSR row pointers: 2p rows of ROW_NNZ entries, then p rows of one.
    let nrows = 3 * p;
    let row_ptr = |r: usize| if r <= 2 * p { ROW_NNZ * r } else { ROW_NNZ * 2 * p + (r - 2 * p) };
    let mut rows: Vec<usize> = (0..HEAD.min(nrows + 1)).map(row_ptr).collect();
    rows.push(row_ptr(nrows));
    // Observation 0's two rows both use camera 0, point 0, weight 0; the
    // last entry is w_err's column for weight p - 1.
    let one_row = (0..NCAM).chain((0..3).map(|k| NCAM * n + k)).chain([NCAM * n + 3 * m]);
    let mut cols: Vec<usize> = one_row.clone().chain(one_row).collect();
    cols.push(NCAM * n + 3 * m + p - 1);
    let mut vals: Vec<f64> = blocks[..HEAD].to_vec();
    vals.push(second[p - 1]);
    let vals = to_json_flat(&tensor("vals", vec![vals.len()], vals)?)?;
    Ok(json!({"rows": rows, "cols": cols, "vals": vals}))
}
