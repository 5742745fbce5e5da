//! Parameter trees: an ordered map from path names (`encoder.layers.1.wq`)
//! to tensors, the host-side half of a model (Equinox/Flax keep parameters
//! as a pytree apart from the forward function; graft's trees are flat,
//! with the nesting spelled in the dotted names).
//!
//! Order is registration order, which is also the order of the flat list a
//! compiled step takes, so [`ParamTree::flatten`] and
//! [`ParamTree::unflatten`] are the bridge between named parameters and
//! positional function arguments.

use crate::error::Error;
use graft_core::{IrError, Tensor};
use std::collections::HashMap;

/// An ordered map from parameter path names to tensors.
///
/// ```
/// use graft::module::ParamTree;
/// use graft::Tensor;
/// let mut t = ParamTree::new();
/// t.insert("fc.weight", Tensor::vec1(&[1.0f64, 2.0])).unwrap();
/// t.insert("fc.bias", Tensor::vec1(&[0.5f64])).unwrap();
/// let (names, tensors) = t.clone().flatten();
/// assert_eq!(names, ["fc.weight", "fc.bias"]);
/// let back = ParamTree::unflatten(names, tensors).unwrap();
/// assert_eq!(back.get("fc.bias").unwrap().to_f64_vec(), vec![0.5]);
/// assert_eq!(back.subtree("fc").names(), ["weight", "bias"]);
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ParamTree {
    names: Vec<String>,
    tensors: Vec<Tensor>,
    index: HashMap<String, usize>,
}

fn invalid(msg: impl Into<String>) -> Error {
    IrError::invalid("param_tree", msg.into()).into()
}

impl ParamTree {
    /// An empty tree.
    pub fn new() -> ParamTree {
        ParamTree::default()
    }

    /// Adds a tensor under a new name (a repeated name is an error: two
    /// parameters must never share a path).
    pub fn insert(&mut self, name: impl Into<String>, tensor: Tensor) -> Result<(), Error> {
        let name = name.into();
        if self.index.contains_key(&name) {
            return Err(invalid(format!("`{name}` is already in the tree")));
        }
        self.index.insert(name.clone(), self.names.len());
        self.names.push(name);
        self.tensors.push(tensor);
        Ok(())
    }

    /// Replaces the tensor under an existing name; its type must not change
    /// (a compiled step is specialised to the types it was traced at).
    pub fn set(&mut self, name: &str, tensor: Tensor) -> Result<(), Error> {
        let i = *self.index.get(name).ok_or_else(|| invalid(format!("no parameter `{name}`")))?;
        if self.tensors[i].ty() != tensor.ty() {
            return Err(invalid(format!("`{name}` is {}, cannot set it to a {}", self.tensors[i].ty(), tensor.ty())));
        }
        self.tensors[i] = tensor;
        Ok(())
    }

    /// The tensor under `name`.
    pub fn get(&self, name: &str) -> Result<&Tensor, Error> {
        self.index.get(name).map(|&i| &self.tensors[i]).ok_or_else(|| invalid(format!("no parameter `{name}`")))
    }

    /// Whether `name` is in the tree.
    pub fn contains(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// Names in order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Tensors in order.
    pub fn tensors(&self) -> &[Tensor] {
        &self.tensors
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether the tree is empty.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Total number of scalars (what "parameter count" usually means).
    pub fn numel(&self) -> usize {
        self.tensors.iter().map(|t| t.shape().iter().product::<usize>()).sum()
    }

    /// `(name, tensor)` pairs in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Tensor)> {
        self.names.iter().map(String::as_str).zip(&self.tensors)
    }

    /// The names and tensors as two lists (the positional form a compiled
    /// function takes).
    pub fn flatten(self) -> (Vec<String>, Vec<Tensor>) {
        (self.names, self.tensors)
    }

    /// The inverse of [`ParamTree::flatten`]; the lists must have equal
    /// lengths and the names must be distinct.
    pub fn unflatten(names: Vec<String>, tensors: Vec<Tensor>) -> Result<ParamTree, Error> {
        if names.len() != tensors.len() {
            return Err(invalid(format!("{} names for {} tensors", names.len(), tensors.len())));
        }
        let mut t = ParamTree::new();
        for (n, x) in names.into_iter().zip(tensors) {
            t.insert(n, x)?;
        }
        Ok(t)
    }

    /// The entries under `prefix` (`"encoder"` selects `encoder.*`), with
    /// the prefix and its dot removed.
    pub fn subtree(&self, prefix: &str) -> ParamTree {
        let mut t = ParamTree::new();
        let dotted = format!("{prefix}.");
        for (n, x) in self.iter() {
            if let Some(rest) = n.strip_prefix(&dotted) {
                // Names are distinct, so their suffixes after one prefix are too.
                let _ = t.insert(rest, x.clone());
            }
        }
        t
    }

    /// Checks that `other` has exactly this tree's names and types,
    /// listing every difference (for loading a checkpoint into a model).
    pub fn check_matches(&self, other: &ParamTree) -> Result<(), Error> {
        let mut problems = Vec::new();
        for (n, x) in self.iter() {
            match other.get(n) {
                Err(_) => problems.push(format!("`{n}` is missing (the model has {})", x.ty())),
                Ok(y) if y.ty() != x.ty() => problems.push(format!("`{n}` is {}, the model has {}", y.ty(), x.ty())),
                Ok(_) => {}
            }
        }
        for n in other.names() {
            if !self.contains(n) {
                problems.push(format!("`{n}` is not a parameter of the model"));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(invalid(format!("the trees do not match:\n  {}", problems.join("\n  "))))
        }
    }
}
