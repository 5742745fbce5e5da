//! Element types. The set is closed: every kernel dispatches over it with an
//! exhaustive `match`, so adding `bf16` later is a compile-guided change.
//!
//! `f16` (IEEE binary16) is a storage type: values are stored as 16-bit
//! floats, but every primitive computes on them in f32 and rounds each result
//! to f16 (see [`crate::opt::widen_f16`]).

use std::fmt;

/// The element type of a tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// IEEE-754 binary32.
    F32,
    /// IEEE-754 binary64.
    F64,
    /// Signed 32-bit integer.
    I32,
    /// Signed 64-bit integer.
    I64,
    /// Boolean (one byte per element in memory).
    Bool,
    /// IEEE-754 binary16: a storage type, computed on in f32 (last, so the
    /// other dtypes keep their discriminants).
    F16,
}

impl DType {
    /// All dtypes, in a fixed order (useful for tests and parsers).
    pub const ALL: [DType; 6] = [DType::F32, DType::F64, DType::I32, DType::I64, DType::Bool, DType::F16];

    /// Size of one element in bytes.
    pub fn size_bytes(self) -> usize {
        match self {
            DType::F16 => 2,
            DType::F32 | DType::I32 => 4,
            DType::F64 | DType::I64 => 8,
            DType::Bool => 1,
        }
    }

    /// True for floating-point dtypes (the differentiable ones).
    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::F32 | DType::F64)
    }

    /// True for signed integer dtypes.
    pub fn is_int(self) -> bool {
        matches!(self, DType::I32 | DType::I64)
    }

    /// True for dtypes with arithmetic (everything except bool).
    pub fn is_numeric(self) -> bool {
        !matches!(self, DType::Bool)
    }

    /// The name used by the printer, the language and NumPy-style output.
    pub fn name(self) -> &'static str {
        match self {
            DType::F16 => "f16",
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::Bool => "bool",
        }
    }

    /// Parses the printer's spelling (`f32`, `i64`, ...). Also accepts
    /// NumPy's long names (`float32`, `int64`, ...).
    pub fn parse(s: &str) -> Option<DType> {
        Some(match s {
            "f16" | "float16" => DType::F16,
            "f32" | "float32" => DType::F32,
            "f64" | "float64" => DType::F64,
            "i32" | "int32" => DType::I32,
            "i64" | "int64" => DType::I64,
            "bool" => DType::Bool,
            _ => return None,
        })
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
