//! Training checkpoints as safetensors files (the format PyTorch and JAX
//! tools read): every parameter under its name, the optimizer state under
//! `NAME.opt.K`, the trainer's buffers (BatchNorm statistics, a dropout
//! key) under their names, and the step count in the metadata. Saving
//! writes a temporary file and renames it over the old one, so an
//! interrupted save never destroys the previous checkpoint; loading checks
//! every name, dtype and shape and lists all mismatches at once. Shared by
//! `graft train` and the Python `graft.nn.Trainer`.

use crate::error::Error;
use crate::module::{tensor_from_view, to_safetensors, write_atomically};
use crate::optim::Trainer;
use graft_core::Tensor;
use std::collections::HashMap;
use std::path::Path;

fn io(path: &Path, msg: impl std::fmt::Display) -> Error {
    Error::Io(format!("{}: {msg}", path.display()))
}

impl Trainer {
    /// Every tensor of the trainer under its checkpoint name: parameters,
    /// optimizer state (`NAME.opt.K`), buffers.
    pub fn checkpoint_tensors(&self) -> Vec<(String, &Tensor)> {
        let k = self.optimizer().n_state();
        let mut out: Vec<(String, &Tensor)> = self.names().iter().cloned().zip(&self.params).collect();
        for (i, s) in self.state.iter().enumerate() {
            out.push((format!("{}.opt.{}", self.names()[i / k.max(1)], i % k.max(1)), s));
        }
        out.extend(self.buffer_names().iter().cloned().zip(&self.buffers));
        out
    }

    /// Writes the parameters, optimizer state, buffers and step count to a
    /// safetensors file (a temporary file, then a rename).
    pub fn save_checkpoint(&self, path: &Path) -> Result<(), Error> {
        let named = self.checkpoint_tensors();
        let meta = HashMap::from([("step".to_string(), self.count.to_string())]);
        let data = to_safetensors(named.iter().map(|(n, t)| (n.as_str(), *t)), Some(meta)).map_err(|e| io(path, e))?;
        write_atomically(path, &data)
    }

    /// Restores a checkpoint written by [`Trainer::save_checkpoint`] for the
    /// same model and optimizer; every missing, extra or mistyped tensor is
    /// listed, and on any error the trainer is left as it was.
    pub fn load_checkpoint(&mut self, path: &Path) -> Result<(), Error> {
        let data = std::fs::read(path).map_err(|e| io(path, e))?;
        let st = safetensors::SafeTensors::deserialize(&data)
            .map_err(|e| io(path, format!("not a valid checkpoint ({e})")))?;
        let (_, meta) = safetensors::SafeTensors::read_metadata(&data).map_err(|e| io(path, e))?;
        let step: u64 = meta
            .metadata()
            .as_ref()
            .and_then(|m| m.get("step"))
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| io(path, "the checkpoint has no step count"))?;
        let want: Vec<(String, graft_core::TensorType)> =
            self.checkpoint_tensors().into_iter().map(|(n, t)| (n, t.ty())).collect();
        let mut problems = Vec::new();
        let mut got = Vec::with_capacity(want.len());
        for (name, w) in &want {
            match st.tensor(name) {
                Err(_) => problems.push(format!("`{name}` is missing (the model has {w})")),
                Ok(v) => match tensor_from_view(&v) {
                    Some(t) if t.ty() == *w => got.push(t),
                    _ => problems.push(format!("`{name}` is {:?}{:?}, the model has {w}", v.dtype(), v.shape())),
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
            return Err(io(path, format!("the checkpoint does not match the model:\n  {}", problems.join("\n  "))));
        }
        let (n, n_state) = (self.params.len(), self.state.len());
        let mut it = got.into_iter();
        self.params = it.by_ref().take(n).collect();
        self.state = it.by_ref().take(n_state).collect();
        self.buffers = it.collect();
        self.count = step;
        Ok(())
    }
}
