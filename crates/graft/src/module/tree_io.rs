//! Parameter trees as safetensors files (the format PyTorch, JAX and
//! Hugging Face tools read): each tensor under its path name, in the
//! tensor's own dtype. The byte conversions are public so `graft train`'s
//! checkpoints (which add optimizer state and a step count) share them.
//!
//! Saving writes a temporary file next to the target and renames it, so an
//! interrupted save never destroys the previous file; loading checks the
//! file against a model's tree and lists every mismatch at once.

use super::tree::ParamTree;
use crate::error::Error;
use graft_core::{DType, Element, Tensor};
use safetensors::tensor::{Dtype, TensorView};
use std::collections::HashMap;
use std::path::Path;

fn io(path: &Path, msg: impl std::fmt::Display) -> Error {
    Error::Io(format!("{}: {msg}", path.display()))
}

/// A tensor's safetensors dtype and little-endian bytes.
pub fn tensor_bytes(t: &Tensor) -> (Dtype, Vec<u8>) {
    fn le<T: Element, const N: usize>(t: &Tensor, f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
        t.as_slice::<T>().map(|s| s.iter().flat_map(|&x| f(x)).collect()).unwrap_or_default()
    }
    match t.dtype() {
        DType::F16 => (Dtype::F16, le::<graft_core::half::f16, 2>(t, graft_core::half::f16::to_le_bytes)),
        DType::F32 => (Dtype::F32, le::<f32, 4>(t, f32::to_le_bytes)),
        DType::F64 => (Dtype::F64, le::<f64, 8>(t, f64::to_le_bytes)),
        DType::I32 => (Dtype::I32, le::<i32, 4>(t, i32::to_le_bytes)),
        DType::I64 => (Dtype::I64, le::<i64, 8>(t, i64::to_le_bytes)),
        DType::U32 => (Dtype::U32, le::<u32, 4>(t, u32::to_le_bytes)),
        DType::Bool => (Dtype::BOOL, le::<bool, 1>(t, |b| [u8::from(b)])),
    }
}

/// A safetensors tensor as a graft tensor of the same dtype (`None` for a
/// dtype graft does not have).
pub fn tensor_from_view(v: &TensorView<'_>) -> Option<Tensor> {
    let d = v.data();
    let shape = v.shape().to_vec();
    fn words<T: Element, const N: usize>(d: &[u8], shape: Vec<usize>, f: impl Fn([u8; N]) -> T) -> Option<Tensor> {
        let vals: Option<Vec<T>> = d.chunks_exact(N).map(|c| c.try_into().ok().map(&f)).collect();
        Tensor::from_vec(shape, vals?).ok()
    }
    match v.dtype() {
        Dtype::F16 => words(d, shape, graft_core::half::f16::from_le_bytes),
        Dtype::F32 => words(d, shape, f32::from_le_bytes),
        Dtype::F64 => words(d, shape, f64::from_le_bytes),
        Dtype::I32 => words(d, shape, i32::from_le_bytes),
        Dtype::I64 => words(d, shape, i64::from_le_bytes),
        Dtype::U32 => words(d, shape, u32::from_le_bytes),
        Dtype::BOOL => Tensor::from_vec(shape, d.iter().map(|&b| b != 0).collect::<Vec<_>>()).ok(),
        _ => None,
    }
}

/// Serialises named tensors (and string metadata) to safetensors bytes.
pub fn to_safetensors<'a>(
    tensors: impl IntoIterator<Item = (&'a str, &'a Tensor)>,
    metadata: Option<HashMap<String, String>>,
) -> Result<Vec<u8>, Error> {
    let owned: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = tensors
        .into_iter()
        .map(|(n, t)| {
            let (dt, b) = tensor_bytes(t);
            (n.to_string(), dt, t.shape().to_vec(), b)
        })
        .collect();
    let views = owned
        .iter()
        .map(|(n, dt, s, b)| TensorView::new(*dt, s.clone(), b).map(|v| (n.clone(), v)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Error::Io(e.to_string()))?;
    safetensors::serialize(views, &metadata).map_err(|e| Error::Io(e.to_string()))
}

/// Writes `data` to `path` through a temporary file and a rename, so an
/// interrupted write leaves the previous file whole.
pub fn write_atomically(path: &Path, data: &[u8]) -> Result<(), Error> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    std::fs::write(&tmp, data).map_err(|e| io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| io(path, e))
}

impl ParamTree {
    /// The tree as safetensors bytes.
    pub fn to_safetensors(&self) -> Result<Vec<u8>, Error> {
        to_safetensors(self.iter(), None)
    }

    /// A tree from safetensors bytes, in the file's order (sorted by
    /// name; use [`ParamTree::load_into`] to get a model's order back).
    pub fn from_safetensors(data: &[u8]) -> Result<ParamTree, Error> {
        let st = safetensors::SafeTensors::deserialize(data)
            .map_err(|e| Error::Io(format!("not a valid safetensors file ({e})")))?;
        let mut tree = ParamTree::new();
        let mut entries = st.tensors();
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, v) in entries {
            let t = tensor_from_view(&v)
                .ok_or_else(|| Error::Io(format!("`{name}` has dtype {:?}, which graft does not have", v.dtype())))?;
            tree.insert(name, t)?;
        }
        Ok(tree)
    }

    /// Saves the tree to a safetensors file (temporary file, then rename).
    ///
    /// ```
    /// use graft::module::{Linear, Vars};
    /// use graft::DType;
    /// let vars = Vars::new(DType::F32);
    /// Linear::new(&vars.pp("fc"), 3, 2, true).unwrap();
    /// let tree = vars.init(0).unwrap();
    /// let path = std::env::temp_dir().join(format!("graft_doc_tree_{}.safetensors", std::process::id()));
    /// tree.save(&path).unwrap();
    /// let back = tree.load_into(&path).unwrap();
    /// assert_eq!(back, tree);
    /// std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn save(&self, path: &Path) -> Result<(), Error> {
        write_atomically(path, &self.to_safetensors()?)
    }

    /// Reads a safetensors file into a tree with exactly this tree's names,
    /// order and types; every missing, extra or mistyped tensor is listed.
    pub fn load_into(&self, path: &Path) -> Result<ParamTree, Error> {
        let data = std::fs::read(path).map_err(|e| io(path, e))?;
        let file = ParamTree::from_safetensors(&data).map_err(|e| io(path, e))?;
        self.check_matches(&file).map_err(|e| io(path, e))?;
        let mut out = ParamTree::new();
        for n in self.names() {
            out.insert(n.clone(), file.get(n)?.clone())?;
        }
        Ok(out)
    }
}
