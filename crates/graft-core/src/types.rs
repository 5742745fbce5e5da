//! Static tensor types: a dtype plus a fully known shape.
//!
//! Shapes are static at IR level: every value in a [`crate::ir::Func`] has a
//! concrete shape, inferred by its primitive's shape rule when it is built.

use crate::dtype::DType;
use std::fmt;

/// A tensor shape: the size of each dimension, outermost first (row-major).
pub type Shape = Vec<usize>;

/// The type of an IR value: element type and static shape.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TensorType {
    /// Element type.
    pub dtype: DType,
    /// Dimension sizes (empty for a scalar).
    pub shape: Shape,
}

impl TensorType {
    /// A tensor type from a dtype and a shape.
    pub fn new(dtype: DType, shape: impl Into<Shape>) -> Self {
        TensorType { dtype, shape: shape.into() }
    }

    /// A rank-0 (scalar) type.
    pub fn scalar(dtype: DType) -> Self {
        TensorType { dtype, shape: Vec::new() }
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Number of elements (1 for a scalar).
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Size of a tensor of this type in bytes.
    pub fn size_bytes(&self) -> usize {
        self.numel() * self.dtype.size_bytes()
    }

    /// Same shape, another dtype.
    pub fn with_dtype(&self, dtype: DType) -> Self {
        TensorType { dtype, shape: self.shape.clone() }
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[", self.dtype)?;
        for (i, d) in self.shape.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

/// Row-major strides (in elements) of a shape.
pub fn strides_of(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1];
    }
    strides
}

/// Formats a list of integers as `(a,b,c)`, the printer's tuple syntax.
pub fn fmt_list<T: fmt::Display>(xs: &[T]) -> String {
    let mut s = String::from("(");
    for (i, x) in xs.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        s.push_str(&x.to_string());
    }
    s.push(')');
    s
}
