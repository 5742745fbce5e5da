//! The combining machinery the reduction-like families share (`reduce`,
//! `cumulative`, `window`): element types ([`RedElem`]), associative
//! combiners with identities ([`Monoid`]), the [`Combine`] tag each
//! primitive carries and `with_monoid!` to dispatch on it, so the three
//! families agree on identities, NaN and overflow behaviour.

use crate::dtype::DType;
use crate::tensor::Element;

/// Element types the reduction families combine, with the constants and
/// operations every combiner needs. Bool's `add`/`mul` are logical or/and;
/// the shape rules keep bool away from sums and products, so they only exist
/// to make the generic code total.
pub trait RedElem: Element {
    /// Additive identity.
    const ZERO: Self;
    /// Multiplicative identity.
    const ONE: Self;
    /// Identity of max: -inf, the integer minimum, or `false`.
    const LOWEST: Self;
    /// Identity of min: +inf, the integer maximum, or `true`.
    const HIGHEST: Self;
    /// Sum (wrapping for integers).
    fn add(self, o: Self) -> Self;
    /// Product (wrapping for integers).
    fn mul(self, o: Self) -> Self;
    /// Maximum; NaN if either side is NaN.
    fn max_nan(self, o: Self) -> Self;
    /// Minimum; NaN if either side is NaN.
    fn min_nan(self, o: Self) -> Self;
    /// Maximum for non-NaN operands (cheaper: one compare and select).
    fn max_plain(self, o: Self) -> Self;
    /// Minimum for non-NaN operands.
    fn min_plain(self, o: Self) -> Self;
    /// True for a float NaN.
    fn is_nan(self) -> bool;
}

macro_rules! red_float {
    ($t:ty) => {
        impl RedElem for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const LOWEST: Self = <$t>::NEG_INFINITY;
            const HIGHEST: Self = <$t>::INFINITY;
            #[inline(always)]
            fn add(self, o: Self) -> Self {
                self + o
            }
            #[inline(always)]
            fn mul(self, o: Self) -> Self {
                self * o
            }
            #[inline(always)]
            fn max_nan(self, o: Self) -> Self {
                // Keeps `self` when it is NaN (no comparison with NaN is true).
                if (o > self) | o.is_nan() {
                    o
                } else {
                    self
                }
            }
            #[inline(always)]
            fn min_nan(self, o: Self) -> Self {
                if (o < self) | o.is_nan() {
                    o
                } else {
                    self
                }
            }
            #[inline(always)]
            fn max_plain(self, o: Self) -> Self {
                if o > self {
                    o
                } else {
                    self
                }
            }
            #[inline(always)]
            fn min_plain(self, o: Self) -> Self {
                if o < self {
                    o
                } else {
                    self
                }
            }
            #[inline(always)]
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
        }
    };
}
red_float!(f32);
red_float!(f64);

macro_rules! red_int {
    ($t:ty) => {
        impl RedElem for $t {
            const ZERO: Self = 0;
            const ONE: Self = 1;
            const LOWEST: Self = <$t>::MIN;
            const HIGHEST: Self = <$t>::MAX;
            #[inline(always)]
            fn add(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            #[inline(always)]
            fn mul(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }
            #[inline(always)]
            fn max_nan(self, o: Self) -> Self {
                self.max(o)
            }
            #[inline(always)]
            fn min_nan(self, o: Self) -> Self {
                self.min(o)
            }
            #[inline(always)]
            fn max_plain(self, o: Self) -> Self {
                self.max(o)
            }
            #[inline(always)]
            fn min_plain(self, o: Self) -> Self {
                self.min(o)
            }
            #[inline(always)]
            fn is_nan(self) -> bool {
                false
            }
        }
    };
}
red_int!(i32);
red_int!(i64);
red_int!(u32);

impl RedElem for bool {
    const ZERO: Self = false;
    const ONE: Self = true;
    const LOWEST: Self = false;
    const HIGHEST: Self = true;
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        self | o
    }
    #[inline(always)]
    fn mul(self, o: Self) -> Self {
        self & o
    }
    #[inline(always)]
    fn max_nan(self, o: Self) -> Self {
        self | o
    }
    #[inline(always)]
    fn min_nan(self, o: Self) -> Self {
        self & o
    }
    #[inline(always)]
    fn max_plain(self, o: Self) -> Self {
        self | o
    }
    #[inline(always)]
    fn min_plain(self, o: Self) -> Self {
        self & o
    }
    #[inline(always)]
    fn is_nan(self) -> bool {
        false
    }
}

/// An associative combiner with its identity. Zero-sized, so kernels
/// generic over it compile to one tight loop per (dtype, combiner).
///
/// `op_plain` may differ from `op` only when an operand is NaN, and only for
/// combiners with `NAN_SENSITIVE`: hot loops use it and fall back to `op`
/// when they saw a NaN (NaN-propagating max/min vectorize poorly).
/// NaN-sensitive combiners must be idempotent (`op(op(a, b), b) ==
/// op(a, b)`), so such a fallback may combine an element twice.
pub trait Monoid<T>: Copy + Send + Sync + 'static {
    /// True when `op_plain` mishandles NaN (max, min; both idempotent).
    const NAN_SENSITIVE: bool;
    /// The identity element (also the value of padding in windows).
    fn id() -> T;
    /// Combines two values.
    fn op(a: T, b: T) -> T;
    /// `op` for non-NaN operands.
    fn op_plain(a: T, b: T) -> T;
}

/// Sum combiner.
#[derive(Debug, Clone, Copy)]
pub struct SumM;
/// Product combiner.
#[derive(Debug, Clone, Copy)]
pub struct ProdM;
/// NaN-propagating max combiner.
#[derive(Debug, Clone, Copy)]
pub struct MaxM;
/// NaN-propagating min combiner.
#[derive(Debug, Clone, Copy)]
pub struct MinM;

impl<T: RedElem> Monoid<T> for SumM {
    const NAN_SENSITIVE: bool = false;
    #[inline(always)]
    fn id() -> T {
        T::ZERO
    }
    #[inline(always)]
    fn op(a: T, b: T) -> T {
        a.add(b)
    }
    #[inline(always)]
    fn op_plain(a: T, b: T) -> T {
        a.add(b)
    }
}
impl<T: RedElem> Monoid<T> for ProdM {
    const NAN_SENSITIVE: bool = false;
    #[inline(always)]
    fn id() -> T {
        T::ONE
    }
    #[inline(always)]
    fn op(a: T, b: T) -> T {
        a.mul(b)
    }
    #[inline(always)]
    fn op_plain(a: T, b: T) -> T {
        a.mul(b)
    }
}
impl<T: RedElem> Monoid<T> for MaxM {
    const NAN_SENSITIVE: bool = true;
    #[inline(always)]
    fn id() -> T {
        T::LOWEST
    }
    #[inline(always)]
    fn op(a: T, b: T) -> T {
        a.max_nan(b)
    }
    #[inline(always)]
    fn op_plain(a: T, b: T) -> T {
        a.max_plain(b)
    }
}
impl<T: RedElem> Monoid<T> for MinM {
    const NAN_SENSITIVE: bool = true;
    #[inline(always)]
    fn id() -> T {
        T::HIGHEST
    }
    #[inline(always)]
    fn op(a: T, b: T) -> T {
        a.min_nan(b)
    }
    #[inline(always)]
    fn op_plain(a: T, b: T) -> T {
        a.min_plain(b)
    }
}

/// The combiner of a reduction-like primitive, shared by the families so
/// one dispatch macro serves them all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Combine {
    /// [`SumM`]
    Sum,
    /// [`ProdM`]
    Prod,
    /// [`MaxM`]
    Max,
    /// [`MinM`]
    Min,
}

impl Combine {
    /// Whether the combiner accepts a dtype: every numeric dtype, and bool
    /// for max/min (logical or/and).
    pub fn accepts(self, dtype: DType) -> bool {
        dtype.is_numeric() || matches!(self, Combine::Max | Combine::Min)
    }

    /// The operand requirement, as a type-error fragment.
    pub fn expected(self) -> &'static str {
        match self {
            Combine::Sum | Combine::Prod => "expected a numeric operand (not bool)",
            Combine::Max | Combine::Min => "expected a numeric or bool operand",
        }
    }
}

/// Calls `$f::<T, M>(args)` with `T` the element type of `$dtype` and `M`
/// the combiner of `$comb` (a [`Combine`]); unsupported pairs (bool sums
/// and products) give a kernel error.
macro_rules! with_monoid {
    ($comb:expr, $dtype:expr, $prim:expr, $f:ident ( $($arg:expr),* )) => {{
        use $crate::dtype::DType;
        use $crate::ops::monoid::{Combine, MaxM, MinM, ProdM, SumM};
        match ($dtype, $comb) {
            (DType::F32, Combine::Sum) => $f::<f32, SumM>($($arg),*),
            (DType::F32, Combine::Prod) => $f::<f32, ProdM>($($arg),*),
            (DType::F32, Combine::Max) => $f::<f32, MaxM>($($arg),*),
            (DType::F32, Combine::Min) => $f::<f32, MinM>($($arg),*),
            (DType::F64, Combine::Sum) => $f::<f64, SumM>($($arg),*),
            (DType::F64, Combine::Prod) => $f::<f64, ProdM>($($arg),*),
            (DType::F64, Combine::Max) => $f::<f64, MaxM>($($arg),*),
            (DType::F64, Combine::Min) => $f::<f64, MinM>($($arg),*),
            (DType::I32, Combine::Sum) => $f::<i32, SumM>($($arg),*),
            (DType::I32, Combine::Prod) => $f::<i32, ProdM>($($arg),*),
            (DType::I32, Combine::Max) => $f::<i32, MaxM>($($arg),*),
            (DType::I32, Combine::Min) => $f::<i32, MinM>($($arg),*),
            (DType::I64, Combine::Sum) => $f::<i64, SumM>($($arg),*),
            (DType::U32, Combine::Sum) => $f::<u32, SumM>($($arg),*),
            (DType::I64, Combine::Prod) => $f::<i64, ProdM>($($arg),*),
            (DType::U32, Combine::Prod) => $f::<u32, ProdM>($($arg),*),
            (DType::I64, Combine::Max) => $f::<i64, MaxM>($($arg),*),
            (DType::U32, Combine::Max) => $f::<u32, MaxM>($($arg),*),
            (DType::I64, Combine::Min) => $f::<i64, MinM>($($arg),*),
            (DType::U32, Combine::Min) => $f::<u32, MinM>($($arg),*),
            (DType::Bool, Combine::Max) => $f::<bool, MaxM>($($arg),*),
            (DType::Bool, Combine::Min) => $f::<bool, MinM>($($arg),*),
            (d, _) => Err($crate::ops::kernel::unsupported($prim, d)),
        }
    }};
}
pub(crate) use with_monoid;

/// Sizes of the `[outer, axis, inner]` view of a row-major shape around `axis`.
pub(crate) fn split_at_axis(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    let outer = shape[..axis].iter().product();
    let inner = shape[axis + 1..].iter().product();
    (outer, shape[axis], inner)
}

/// Column-chunk width for `[rows, inner]` blocks: the accumulator row of one
/// task (at most 8 KiB of f64) stays in L1 while rows stream past it.
pub(crate) const COLS: usize = 1024;
