//! Training checkpoints as safetensors files (the format PyTorch and JAX
//! tools read): every parameter under its name, the optimizer state under
//! `NAME.opt.K`, and the step count in the metadata. Saving writes a
//! temporary file and renames it over the old one, so an interrupted save
//! never destroys the previous checkpoint; loading checks every name,
//! dtype and shape and lists all mismatches at once.

use crate::Fail;
use graft::optim::Trainer;
use graft::{DType, Tensor};
use safetensors::tensor::{Dtype, TensorView};
use std::collections::HashMap;
use std::path::Path;

fn fail(path: &Path, msg: impl std::fmt::Display) -> Fail {
    Fail::new(format!("error: {}: {msg}", path.display()))
}

fn bytes(t: &Tensor) -> (Dtype, Vec<u8>) {
    fn le<T: graft::Element, const N: usize>(t: &Tensor, f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
        t.as_slice::<T>().map(|s| s.iter().flat_map(|&x| f(x)).collect()).unwrap_or_default()
    }
    match t.dtype() {
        DType::F32 => (Dtype::F32, le::<f32, 4>(t, f32::to_le_bytes)),
        DType::F64 => (Dtype::F64, le::<f64, 8>(t, f64::to_le_bytes)),
        DType::I32 => (Dtype::I32, le::<i32, 4>(t, i32::to_le_bytes)),
        DType::I64 => (Dtype::I64, le::<i64, 8>(t, i64::to_le_bytes)),
        DType::Bool => (Dtype::BOOL, le::<bool, 1>(t, |b| [u8::from(b)])),
    }
}

/// A safetensors tensor as a graft tensor of the same dtype (`None` for a
/// dtype graft does not have).
fn decode(v: &TensorView<'_>) -> Option<Tensor> {
    let d = v.data();
    let shape = v.shape().to_vec();
    macro_rules! from {
        ($ty:ty, $n:expr) => {
            Tensor::from_vec(
                shape,
                d.chunks_exact($n)
                    .map(|c| <$ty>::from_le_bytes(c.try_into().expect("chunks_exact gives exactly $n bytes")))
                    .collect::<Vec<_>>(),
            )
            .ok()
        };
    }
    match v.dtype() {
        Dtype::F32 => from!(f32, 4),
        Dtype::F64 => from!(f64, 8),
        Dtype::I32 => from!(i32, 4),
        Dtype::I64 => from!(i64, 8),
        Dtype::BOOL => Tensor::from_vec(shape, d.iter().map(|&b| b != 0).collect::<Vec<_>>()).ok(),
        _ => None,
    }
}

fn tensor(v: &TensorView<'_>, want: &Tensor) -> Option<Tensor> {
    decode(v).filter(|t| t.dtype() == want.dtype())
}

/// Every array of a safetensors file (a dataset for `graft train`), by name.
pub fn load_arrays(path: &Path) -> Result<Vec<(String, Tensor)>, Fail> {
    let data = std::fs::read(path).map_err(|e| fail(path, e))?;
    let st = safetensors::SafeTensors::deserialize(&data)
        .map_err(|e| fail(path, format!("not a valid safetensors file ({e})")))?;
    st.tensors()
        .into_iter()
        .map(|(name, v)| {
            decode(&v)
                .map(|t| (name.clone(), t))
                .ok_or_else(|| fail(path, format!("`{name}` has dtype {:?}, which graft does not have", v.dtype())))
        })
        .collect()
}

/// Every tensor of the trainer under its checkpoint name.
fn named(tr: &Trainer) -> Vec<(String, &Tensor)> {
    let k = tr.optimizer().n_state();
    let mut out: Vec<(String, &Tensor)> = tr.names().iter().cloned().zip(&tr.params).collect();
    for (i, s) in tr.state.iter().enumerate() {
        out.push((format!("{}.opt.{}", tr.names()[i / k.max(1)], i % k.max(1)), s));
    }
    out
}

/// Writes the trainer's parameters, optimizer state and step count.
pub fn save(path: &Path, tr: &Trainer) -> Result<(), Fail> {
    let owned: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = named(tr)
        .into_iter()
        .map(|(n, t)| {
            let (dt, b) = bytes(t);
            (n, dt, t.shape().to_vec(), b)
        })
        .collect();
    let views = owned
        .iter()
        .map(|(n, dt, s, b)| TensorView::new(*dt, s.clone(), b).map(|v| (n.clone(), v)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| fail(path, e))?;
    let meta = HashMap::from([("step".to_string(), tr.count.to_string())]);
    let data = safetensors::serialize(views, &Some(meta)).map_err(|e| fail(path, e))?;
    let tmp = path.with_extension("safetensors.tmp");
    std::fs::write(&tmp, data).map_err(|e| fail(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| fail(path, e))
}

/// Restores a checkpoint written by [`save`] for the same model and
/// optimizer; every missing, extra or mistyped tensor is listed.
pub fn load(path: &Path, tr: &mut Trainer) -> Result<(), Fail> {
    let data = std::fs::read(path).map_err(|e| fail(path, e))?;
    let st = safetensors::SafeTensors::deserialize(&data)
        .map_err(|e| fail(path, format!("not a valid checkpoint ({e})")))?;
    let (_, meta) = safetensors::SafeTensors::read_metadata(&data).map_err(|e| fail(path, e))?;
    let step: u64 = meta
        .metadata()
        .as_ref()
        .and_then(|m| m.get("step"))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| fail(path, "the checkpoint has no step count"))?;
    let want: Vec<(String, Tensor)> = named(tr).into_iter().map(|(n, t)| (n, t.clone())).collect();
    let mut problems = Vec::new();
    let mut got = Vec::with_capacity(want.len());
    for (name, w) in &want {
        match st.tensor(name) {
            Err(_) => problems.push(format!("`{name}` is missing (the model has {})", w.ty())),
            Ok(v) => match tensor(&v, w) {
                Some(t) if t.ty() == w.ty() => got.push(t),
                _ => problems.push(format!("`{name}` is {:?}{:?}, the model has {}", v.dtype(), v.shape(), w.ty())),
            },
        }
    }
    for n in st.names() {
        if !want.iter().any(|(w, _)| w == n) {
            problems.push(format!("`{n}` is not a tensor of this model"));
        }
    }
    if !problems.is_empty() {
        problems.sort();
        return Err(fail(path, format!("the checkpoint does not match the model:\n  {}", problems.join("\n  "))));
    }
    let n = tr.params.len();
    let mut it = got.into_iter();
    tr.params = it.by_ref().take(n).collect();
    tr.state = it.collect();
    tr.count = step;
    Ok(())
}
