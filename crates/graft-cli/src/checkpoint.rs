//! Training checkpoints as safetensors files (the format PyTorch and JAX
//! tools read): every parameter under its name, the optimizer state under
//! `NAME.opt.K`, the trainer's buffers (BatchNorm statistics, a dropout
//! key) under their names, and the step count in the metadata. Saving writes a
//! temporary file and renames it over the old one, so an interrupted save
//! never destroys the previous checkpoint; loading checks every name,
//! dtype and shape and lists all mismatches at once. The format lives in
//! `graft::optim` (`Trainer::save_checkpoint`), shared with Python.

use crate::Fail;
use graft::module::tensor_from_view as decode;
use graft::optim::Trainer;
use graft::Tensor;
use std::path::Path;

fn fail(path: &Path, msg: impl std::fmt::Display) -> Fail {
    Fail::new(format!("error: {}: {msg}", path.display()))
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

/// Writes the trainer's parameters, optimizer state and step count
/// ([`Trainer::save_checkpoint`]).
pub fn save(path: &Path, tr: &Trainer) -> Result<(), Fail> {
    tr.save_checkpoint(path).map_err(|e| Fail::new(format!("error: {e}")))
}

/// Restores a checkpoint written by [`save`] for the same model and
/// optimizer ([`Trainer::load_checkpoint`]); every missing, extra or
/// mistyped tensor is listed.
pub fn load(path: &Path, tr: &mut Trainer) -> Result<(), Fail> {
    tr.load_checkpoint(path).map_err(|e| Fail::new(format!("error: {e}")))
}
