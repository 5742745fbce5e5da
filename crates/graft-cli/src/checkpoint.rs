//! Training checkpoints as safetensors files (the format PyTorch and JAX
//! tools read): every parameter under its name, the optimizer state under
//! `NAME.opt.K`, the trainer's buffers (BatchNorm statistics, a dropout
//! key) under their names, and the step count in the metadata. Saving writes a
//! temporary file and renames it over the old one, so an interrupted save
//! never destroys the previous checkpoint; loading checks every name,
//! dtype and shape and lists all mismatches at once.

use crate::Fail;
use graft::module::{tensor_from_view as decode, to_safetensors, write_atomically};
use graft::optim::Trainer;
use graft::Tensor;
use safetensors::tensor::TensorView;
use std::collections::HashMap;
use std::path::Path;

fn fail(path: &Path, msg: impl std::fmt::Display) -> Fail {
    Fail::new(format!("error: {}: {msg}", path.display()))
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
    out.extend(tr.buffer_names().iter().cloned().zip(&tr.buffers));
    out
}

/// Writes the trainer's parameters, optimizer state and step count.
pub fn save(path: &Path, tr: &Trainer) -> Result<(), Fail> {
    let named = named(tr);
    let meta = HashMap::from([("step".to_string(), tr.count.to_string())]);
    let data = to_safetensors(named.iter().map(|(n, t)| (n.as_str(), *t)), Some(meta)).map_err(|e| fail(path, e))?;
    write_atomically(path, &data).map_err(|e| Fail::new(format!("error: {e}")))
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
    let n_state = tr.state.len();
    tr.params = it.by_ref().take(n).collect();
    tr.state = it.by_ref().take(n_state).collect();
    tr.buffers = it.collect();
    tr.count = step;
    Ok(())
}
