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
    /// Unsigned 32-bit integer (NumPy/XLA `uint32`: arithmetic wraps modulo
    /// 2^32, division, comparisons and max/min are unsigned).
    U32,
}

impl DType {
    /// All dtypes, in a fixed order (useful for tests and parsers).
    pub const ALL: [DType; 7] = [DType::F32, DType::F64, DType::I32, DType::I64, DType::Bool, DType::F16, DType::U32];

    /// Size of one element in bytes.
    pub fn size_bytes(self) -> usize {
        match self {
            DType::F16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 => 8,
            DType::Bool => 1,
        }
    }

    /// True for floating-point dtypes (the differentiable ones).
    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::F32 | DType::F64)
    }

    /// True for signed integer dtypes (what indices, seeds and counts are).
    pub fn is_int(self) -> bool {
        matches!(self, DType::I32 | DType::I64)
    }

    /// True for unsigned integer dtypes (`u32`).
    pub fn is_unsigned(self) -> bool {
        matches!(self, DType::U32)
    }

    /// True for every integer dtype, signed or unsigned (bitwise operations).
    pub fn is_integer(self) -> bool {
        self.is_int() || self.is_unsigned()
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
            DType::U32 => "u32",
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
            "u32" | "uint32" => DType::U32,
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

/// `x` rounded once to the nearest f16, ties to even; overflow gives `±inf`,
/// NaN stays NaN (quiet, its top payload bits kept), signed zeros keep their
/// sign.
///
/// Why not `half::f16::from_f64`: on x86 CPUs with F16C it converts through
/// f32 (`f as f32`, then the hardware's f32 -> f16), which rounds twice:
/// `1 + 2^-11 + 2^-40` goes to the tie `1 + 2^-11` and then to even, 1.0,
/// where the correctly rounded result is `1 + 2^-10`; and its result would
/// depend on the CPU. This is the integer rounding of the exact value.
pub fn f16_from_f64(x: f64) -> half::f16 {
    let bits = x.to_bits();
    let sign = ((bits >> 48) & 0x8000) as u16;
    let exp = ((bits >> 52) & 0x7ff) as i32;
    let man = bits & ((1u64 << 52) - 1);
    if exp == 0x7ff {
        let nan = if man == 0 { 0 } else { 0x0200 | (man >> 42) as u16 };
        return half::f16::from_bits(sign | 0x7c00 | nan);
    }
    // f64 subnormals (and zeros) are far below half of f16's smallest subnormal.
    if exp == 0 {
        return half::f16::from_bits(sign);
    }
    let e = exp - 1023;
    if e > 15 {
        return half::f16::from_bits(sign | 0x7c00);
    }
    // x = sig * 2^(e - 52); the result is a multiple of 2^q (q = -24 for
    // f16's subnormals), r = sig * 2^(e - 52 - q) rounded to an integer.
    let sig = (1u64 << 52) | man;
    let q = e.max(-14) - 10;
    let shift = (q - (e - 52)) as u32; // >= 42
    if shift >= 54 {
        // sig < 2^53 <= half a unit of 2^q: rounds to zero.
        return half::f16::from_bits(sign);
    }
    let mut r = sig >> shift;
    let rem = sig & ((1u64 << shift) - 1);
    let half_unit = 1u64 << (shift - 1);
    if rem > half_unit || (rem == half_unit && r & 1 == 1) {
        r += 1;
    }
    // Normal: r in [2^10, 2^11] holds the implicit bit, so adding it to the
    // exponent field one below carries into the exponent (r == 2^11 at
    // e == 15 gives exactly inf's bits). Subnormal: r in [0, 2^10].
    let mag = if e >= -14 { (((e + 14) as u64) << 10) + r } else { r };
    half::f16::from_bits(sign | mag as u16)
}
