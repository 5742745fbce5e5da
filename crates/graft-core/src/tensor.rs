//! Host tensors: a shape plus contiguous row-major data of one dtype.
//!
//! A `Tensor` is both the user-facing value (inputs, outputs, constants) and
//! the executor's buffer type: kernels write into pre-sized output tensors.
//! Invariant: `data.len() == shape.iter().product()`.

use crate::dtype::DType;
use crate::types::{Shape, TensorType};
use thiserror::Error;

/// Typed contiguous element storage.
#[derive(Debug, Clone, PartialEq)]
pub enum Storage {
    /// f16 elements (IEEE binary16).
    F16(Vec<half::f16>),
    /// f32 elements.
    F32(Vec<f32>),
    /// f64 elements.
    F64(Vec<f64>),
    /// i32 elements.
    I32(Vec<i32>),
    /// i64 elements.
    I64(Vec<i64>),
    /// u32 elements.
    U32(Vec<u32>),
    /// bool elements.
    Bool(Vec<bool>),
}

impl Storage {
    /// Element type of this storage.
    pub fn dtype(&self) -> DType {
        match self {
            Storage::F16(_) => DType::F16,
            Storage::F32(_) => DType::F32,
            Storage::F64(_) => DType::F64,
            Storage::I32(_) => DType::I32,
            Storage::I64(_) => DType::I64,
            Storage::U32(_) => DType::U32,
            Storage::Bool(_) => DType::Bool,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Storage::F16(v) => v.len(),
            Storage::F32(v) => v.len(),
            Storage::F64(v) => v.len(),
            Storage::I32(v) => v.len(),
            Storage::I64(v) => v.len(),
            Storage::U32(v) => v.len(),
            Storage::Bool(v) => v.len(),
        }
    }

    /// True when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Zero-filled storage (`false` for bool).
    pub fn zeros(dtype: DType, n: usize) -> Storage {
        match dtype {
            DType::F16 => Storage::F16(vec![half::f16::ZERO; n]),
            DType::F32 => Storage::F32(vec![0.0; n]),
            DType::F64 => Storage::F64(vec![0.0; n]),
            DType::I32 => Storage::I32(vec![0; n]),
            DType::I64 => Storage::I64(vec![0; n]),
            DType::U32 => Storage::U32(vec![0; n]),
            DType::Bool => Storage::Bool(vec![false; n]),
        }
    }

    /// [`Storage::zeros`] that reports failure instead of aborting the
    /// process: the byte count is checked for overflow, and a buffer of at
    /// least [`PROBE_BYTES`] is first reserved with `try_reserve_exact` (and
    /// released) before the zeroed allocation, which keeps `calloc`'s
    /// untouched pages. `Err` holds the bytes that were asked for
    /// (`u64::MAX` when the count overflows).
    pub fn try_zeros(dtype: DType, n: usize) -> Result<Storage, u64> {
        let bytes = n
            .checked_mul(dtype.size_bytes())
            .filter(|&b| b <= isize::MAX as usize)
            .ok_or_else(|| (n as u64).saturating_mul(dtype.size_bytes() as u64))?;
        if bytes >= PROBE_BYTES {
            let mut probe: Vec<u8> = Vec::new();
            probe.try_reserve_exact(bytes).map_err(|_| bytes as u64)?;
        }
        Ok(Storage::zeros(dtype, n))
    }

    /// Element `i` converted to f64 (bool as 0/1). For tests and printing, not hot paths.
    pub fn get_f64(&self, i: usize) -> f64 {
        match self {
            Storage::F16(v) => v[i].to_f64(),
            Storage::F32(v) => v[i] as f64,
            Storage::F64(v) => v[i],
            Storage::I32(v) => v[i] as f64,
            Storage::I64(v) => v[i] as f64,
            Storage::U32(v) => v[i] as f64,
            Storage::Bool(v) => v[i] as u8 as f64,
        }
    }

    /// Resizes to `n` elements, keeping the dtype. Used when the executor
    /// recycles a buffer for a value of another shape with the same byte size.
    pub fn resize(&mut self, n: usize) {
        match self {
            Storage::F16(v) => v.resize(n, half::f16::ZERO),
            Storage::F32(v) => v.resize(n, 0.0),
            Storage::F64(v) => v.resize(n, 0.0),
            Storage::I32(v) => v.resize(n, 0),
            Storage::I64(v) => v.resize(n, 0),
            Storage::U32(v) => v.resize(n, 0),
            Storage::Bool(v) => v.resize(n, false),
        }
    }
}

/// A Rust scalar type that can be a tensor element.
pub trait Element: Copy + Send + Sync + PartialOrd + std::fmt::Debug + 'static {
    /// The dtype of this element type.
    const DTYPE: DType;
    /// Wraps a vector into storage.
    fn into_storage(v: Vec<Self>) -> Storage;
    /// Borrows storage as a slice of this type, if the dtype matches.
    fn slice(s: &Storage) -> Option<&[Self]>;
    /// Mutably borrows storage as a slice of this type, if the dtype matches.
    fn slice_mut(s: &mut Storage) -> Option<&mut [Self]>;
    /// Lossy conversion from f64 (saturating for integers, `!= 0` for bool).
    fn from_f64(x: f64) -> Self;
    /// Lossy conversion to f64.
    fn to_f64(self) -> f64;
}

macro_rules! impl_element {
    ($t:ty, $dt:ident, $from:expr, $to:expr) => {
        impl Element for $t {
            const DTYPE: DType = DType::$dt;
            fn into_storage(v: Vec<Self>) -> Storage {
                Storage::$dt(v)
            }
            fn slice(s: &Storage) -> Option<&[Self]> {
                match s {
                    Storage::$dt(v) => Some(v),
                    _ => None,
                }
            }
            fn slice_mut(s: &mut Storage) -> Option<&mut [Self]> {
                match s {
                    Storage::$dt(v) => Some(v),
                    _ => None,
                }
            }
            fn from_f64(x: f64) -> Self {
                let f: fn(f64) -> $t = $from;
                f(x)
            }
            fn to_f64(self) -> f64 {
                let f: fn($t) -> f64 = $to;
                f(self)
            }
        }
    };
}
// f64 -> f16 rounds once, to nearest even (not through f32: no double rounding).
impl_element!(half::f16, F16, crate::dtype::f16_from_f64, half::f16::to_f64);
impl_element!(f32, F32, |x| x as f32, |x| x as f64);
impl_element!(f64, F64, |x| x, |x| x);
impl_element!(i32, I32, |x| x as i32, |x| x as f64);
impl_element!(i64, I64, |x| x as i64, |x| x as f64);
impl_element!(u32, U32, |x| x as u32, |x| x as f64);
impl_element!(bool, Bool, |x| x != 0.0, |x| x as u8 as f64);

/// Errors from constructing or converting host tensors.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum TensorError {
    /// Data length does not match the product of the shape.
    #[error("tensor data has {got} elements but shape {shape:?} needs {expected}")]
    LenMismatch {
        /// Requested shape.
        shape: Shape,
        /// Elements the shape needs.
        expected: usize,
        /// Elements supplied.
        got: usize,
    },
    /// The tensor has another dtype than the one asked for.
    #[error("expected a {expected} tensor, found {got}")]
    DType {
        /// Requested dtype.
        expected: DType,
        /// Actual dtype.
        got: DType,
    },
    /// A scalar was asked of a tensor with more than one element.
    #[error("expected a tensor with one element, found shape {0:?}")]
    NotScalar(Shape),
    /// A tensor's memory could not be allocated.
    #[error("cannot allocate {} for a tensor of type {ty}: {}", show_need(*bytes), if *bytes == u64::MAX { "its size overflows" } else { "out of memory" })]
    Alloc {
        /// The tensor's type.
        ty: TensorType,
        /// Bytes asked for (`u64::MAX`: more than a `u64` counts).
        bytes: u64,
    },
    /// Reading or writing `.npy`/`.npz` failed.
    #[error("npy: {0}")]
    Npy(String),
}

/// Allocations of at least this many bytes are reserved fallibly first
/// ([`Storage::try_zeros`]); smaller ones cannot fail short of the machine
/// having no memory at all.
pub const PROBE_BYTES: usize = 1 << 16;

fn show_need(bytes: u64) -> String {
    if bytes == u64::MAX {
        "more bytes than a machine can address".to_string()
    } else {
        format!("{} ({bytes} bytes)", crate::memory::show_bytes(bytes))
    }
}

/// A host tensor: row-major contiguous data with a static shape.
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    shape: Shape,
    data: Storage,
}

impl Tensor {
    /// A tensor from a shape and storage; fails if their sizes disagree.
    pub fn from_storage(shape: impl Into<Shape>, data: Storage) -> Result<Tensor, TensorError> {
        let shape = shape.into();
        let expected: usize = shape.iter().product();
        if expected != data.len() {
            return Err(TensorError::LenMismatch { shape, expected, got: data.len() });
        }
        Ok(Tensor { shape, data })
    }

    /// A tensor from a shape and a vector of elements.
    pub fn from_vec<T: Element>(shape: impl Into<Shape>, data: Vec<T>) -> Result<Tensor, TensorError> {
        Tensor::from_storage(shape, T::into_storage(data))
    }

    /// A rank-0 tensor.
    pub fn scalar<T: Element>(x: T) -> Tensor {
        Tensor { shape: Vec::new(), data: T::into_storage(vec![x]) }
    }

    /// A rank-1 tensor from a slice.
    pub fn vec1<T: Element>(xs: &[T]) -> Tensor {
        Tensor { shape: vec![xs.len()], data: T::into_storage(xs.to_vec()) }
    }

    /// Zeros of a type.
    pub fn zeros(ty: &TensorType) -> Tensor {
        Tensor { shape: ty.shape.clone(), data: Storage::zeros(ty.dtype, ty.numel()) }
    }

    /// Zeros of a type, or [`TensorError::Alloc`] when the memory cannot be
    /// had (the element count overflows, or the allocator refuses), where
    /// [`Tensor::zeros`] would abort the process. For sizes that come from
    /// input.
    pub fn try_zeros(ty: &TensorType) -> Result<Tensor, TensorError> {
        let n = ty.shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        let data = n
            .ok_or(u64::MAX)
            .and_then(|n| Storage::try_zeros(ty.dtype, n))
            .map_err(|bytes| TensorError::Alloc { ty: ty.clone(), bytes })?;
        Ok(Tensor { shape: ty.shape.clone(), data })
    }

    /// A tensor filled with one value (converted to the dtype).
    pub fn full(ty: &TensorType, value: f64) -> Tensor {
        let n = ty.numel();
        let data = match ty.dtype {
            DType::F16 => Storage::F16(vec![crate::dtype::f16_from_f64(value); n]),
            DType::F32 => Storage::F32(vec![value as f32; n]),
            DType::F64 => Storage::F64(vec![value; n]),
            DType::I32 => Storage::I32(vec![value as i32; n]),
            DType::I64 => Storage::I64(vec![value as i64; n]),
            DType::U32 => Storage::U32(vec![value as u32; n]),
            DType::Bool => Storage::Bool(vec![value != 0.0; n]),
        };
        Tensor { shape: ty.shape.clone(), data }
    }

    /// A tensor of the given type whose elements are `f(flat_index)`.
    pub fn from_fn(ty: &TensorType, f: impl Fn(usize) -> f64) -> Tensor {
        let n = ty.numel();
        let data = match ty.dtype {
            DType::F16 => Storage::F16((0..n).map(|i| crate::dtype::f16_from_f64(f(i))).collect()),
            DType::F32 => Storage::F32((0..n).map(|i| f(i) as f32).collect()),
            DType::F64 => Storage::F64((0..n).map(&f).collect()),
            DType::I32 => Storage::I32((0..n).map(|i| f(i) as i32).collect()),
            DType::I64 => Storage::I64((0..n).map(|i| f(i) as i64).collect()),
            DType::U32 => Storage::U32((0..n).map(|i| f(i) as u32).collect()),
            DType::Bool => Storage::Bool((0..n).map(|i| f(i) != 0.0).collect()),
        };
        Tensor { shape: ty.shape.clone(), data }
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The dtype.
    pub fn dtype(&self) -> DType {
        self.data.dtype()
    }

    /// The static type (dtype and shape).
    pub fn ty(&self) -> TensorType {
        TensorType::new(self.dtype(), self.shape.clone())
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.data.len()
    }

    /// Size of the data in bytes.
    pub fn size_bytes(&self) -> usize {
        self.numel() * self.dtype().size_bytes()
    }

    /// The storage.
    pub fn storage(&self) -> &Storage {
        &self.data
    }

    /// The storage, mutably.
    pub fn storage_mut(&mut self) -> &mut Storage {
        &mut self.data
    }

    /// Consumes the tensor, returning its storage.
    pub fn into_storage(self) -> Storage {
        self.data
    }

    /// Borrows the data as a typed slice.
    pub fn as_slice<T: Element>(&self) -> Result<&[T], TensorError> {
        T::slice(&self.data).ok_or(TensorError::DType { expected: T::DTYPE, got: self.dtype() })
    }

    /// Mutably borrows the data as a typed slice.
    pub fn as_slice_mut<T: Element>(&mut self) -> Result<&mut [T], TensorError> {
        let got = self.dtype();
        T::slice_mut(&mut self.data).ok_or(TensorError::DType { expected: T::DTYPE, got })
    }

    /// Copies the data into a `Vec` of the given element type (must match the dtype).
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>, TensorError> {
        self.as_slice::<T>().map(|s| s.to_vec())
    }

    /// All elements converted to f64 (for tests and comparisons).
    pub fn to_f64_vec(&self) -> Vec<f64> {
        (0..self.numel()).map(|i| self.data.get_f64(i)).collect()
    }

    /// The single element of a one-element tensor, as f64.
    pub fn to_scalar_f64(&self) -> Result<f64, TensorError> {
        if self.numel() != 1 {
            return Err(TensorError::NotScalar(self.shape.clone()));
        }
        Ok(self.data.get_f64(0))
    }

    /// Changes the shape in place; the element count must stay the same.
    pub fn reshape(mut self, shape: impl Into<Shape>) -> Result<Tensor, TensorError> {
        let shape = shape.into();
        let expected: usize = shape.iter().product();
        if expected != self.numel() {
            return Err(TensorError::LenMismatch { shape, expected, got: self.numel() });
        }
        self.shape = shape;
        Ok(self)
    }

    /// Converts every element to another dtype (C-style casts, bool as 0/1).
    pub fn cast(&self, dtype: DType) -> Tensor {
        let ty = TensorType::new(dtype, self.shape.clone());
        Tensor::from_fn(&ty, |i| self.data.get_f64(i))
    }

    /// Reshapes a recycled buffer to a new type without reallocating when the
    /// element count fits. Executor-internal: contents are unspecified afterwards.
    pub(crate) fn repurpose(&mut self, ty: &TensorType) {
        debug_assert_eq!(self.dtype(), ty.dtype, "internal error: repurpose keeps the dtype");
        self.data.resize(ty.numel());
        self.shape.clone_from(&ty.shape);
    }
}
