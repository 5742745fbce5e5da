//! Elementwise binary primitives (`add`, `max`, `and`, ...), comparisons
//! (`eq`, `lt`, ...) and `select`.
//!
//! Broadcasting is explicit: both operands of a binary op or comparison must
//! have identical shapes and dtypes (use `broadcast_in_dim` first). Outputs
//! have the operands' shape; comparisons produce `bool`.
//!
//! Dtype rules and semantics:
//! - `add`, `sub`, `mul`, `div`, `rem`, `max`, `min`: any numeric dtype (not bool).
//!   - Integers use wrapping (two's complement) arithmetic: `i32::MAX + 1 == i32::MIN`,
//!     `MIN / -1 == MIN`, `MIN % -1 == 0`.
//!   - Integer `div` truncates toward zero (C, `lax.div`); `rem` takes the sign of
//!     the dividend (C `%`, `lax.rem`). Integer division or remainder by zero does
//!     not trap: **the result is defined as 0**.
//!   - Float `div` is IEEE (`x / 0` is `±inf` or NaN); float `rem` is C `fmod`
//!     (sign of the dividend, `fmod(x, 0)` is NaN, `fmod(x, ±inf)` is `x` for finite `x`).
//!   - Float `max`/`min` propagate NaN (like `jnp.maximum`, IEEE 754-2019
//!     `maximum`/`minimum`) and order `-0 < +0`: `max(-0, +0) == +0`, `min(-0, +0) == -0`.
//! - `pow`, `atan2`: floats only. `pow` is C `pow` (`pow(x, 0) == 1` and
//!   `pow(1, y) == 1` even for NaN; negative base with non-integer exponent is NaN).
//!   Integer powers are left to a composite. `atan2(y, x)` is C `atan2`
//!   (the angle of the point `(x, y)`, in `[-pi, pi]`), like `jnp.arctan2(y, x)`.
//! - `and`, `or`: bool (logical) or integers (bitwise).
//! - Comparisons: any dtype. Floats compare as IEEE (every comparison with NaN
//!   is false except `ne`, which is true; `-0 == +0`); bool orders `false < true`.
//! - `select(pred, on_true, on_false)`: `pred` is bool with the same shape as the
//!   branches, which have identical types (any dtype). Both branches are already
//!   computed; `select` only picks elementwise.

use super::kernel::{check_block, for_blocks, unsupported, zip2, zip3, BlockElem, BlockMut, BlockRef, Real};
use super::{check, Op};
use crate::dispatch_any;
use crate::dtype::DType;
use crate::error::{ExecError, IrError, TypeError};
use crate::ir::{Builder, Value};
use crate::tensor::Tensor;
use crate::types::TensorType;

/// An elementwise binary primitive on two operands of identical type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Binary {
    /// `x + y` (wrapping for integers)
    Add,
    /// `x - y` (wrapping for integers)
    Sub,
    /// `x * y` (wrapping for integers)
    Mul,
    /// `x / y`; integers truncate toward zero, and `x / 0 == 0`
    Div,
    /// remainder with the dividend's sign (C `fmod` / `%`); integer `x % 0 == 0`
    Rem,
    /// `x^y` (floats only)
    Pow,
    /// larger of the two; NaN propagates
    Max,
    /// smaller of the two; NaN propagates
    Min,
    /// C `atan2(y, x)` with the ordinate first: the angle of the point `(x, y)` (floats only)
    Atan2,
    /// logical and (bool) or bitwise and (integers)
    And,
    /// logical or (bool) or bitwise or (integers)
    Or,
}

impl Binary {
    /// Every binary primitive (for test tables and the language's name lookup).
    pub const ALL: [Binary; 11] = [
        Binary::Add,
        Binary::Sub,
        Binary::Mul,
        Binary::Div,
        Binary::Rem,
        Binary::Pow,
        Binary::Max,
        Binary::Min,
        Binary::Atan2,
        Binary::And,
        Binary::Or,
    ];

    /// Whether this op accepts operands of a dtype.
    pub fn accepts(self, dtype: DType) -> bool {
        match self {
            Binary::Add | Binary::Sub | Binary::Mul | Binary::Div | Binary::Rem | Binary::Max | Binary::Min => {
                dtype.is_numeric()
            }
            Binary::Pow | Binary::Atan2 => dtype.is_float(),
            Binary::And | Binary::Or => dtype == DType::Bool || dtype.is_int(),
        }
    }

    fn expected_dtype(self) -> &'static str {
        match self {
            Binary::Pow | Binary::Atan2 => "expected floating-point operands (f32 or f64)",
            Binary::And | Binary::Or => "expected bool or integer operands",
            _ => "expected numeric operands (f32, f64, i32 or i64; not bool)",
        }
    }
}

/// `max` with NaN propagation and `-0 < +0` (IEEE 754-2019 `maximum`).
#[inline(always)]
fn fmax<T: Real>(a: T, b: T) -> T {
    if a.is_nan() || b.is_nan() {
        a + b
    } else if a > b || (a == b && b.is_sign_negative()) {
        a
    } else {
        b
    }
}

/// `min` with NaN propagation and `-0 < +0` (IEEE 754-2019 `minimum`).
#[inline(always)]
fn fmin<T: Real>(a: T, b: T) -> T {
    if a.is_nan() || b.is_nan() {
        a + b
    } else if a < b || (a == b && b.is_sign_positive()) {
        a
    } else {
        b
    }
}

/// Float binary block: one `match` on the op, then a monomorphic loop.
fn float_binary<T: Real>(op: Binary, x: BlockRef<'_>, y: BlockRef<'_>, z: BlockMut<'_>) -> Result<(), ExecError> {
    let name = op.name();
    let (a, b, o) = (x.typed::<T>(name)?, y.typed::<T>(name)?, z.typed::<T>(name)?);
    match op {
        Binary::Add => zip2(a, b, o, |a, b| a + b),
        Binary::Sub => zip2(a, b, o, |a, b| a - b),
        Binary::Mul => zip2(a, b, o, |a, b| a * b),
        Binary::Div => zip2(a, b, o, |a, b| a / b),
        // Rust's float `%` is C `fmod`: the result has the dividend's sign.
        Binary::Rem => zip2(a, b, o, |a, b| a % b),
        Binary::Pow => zip2(a, b, o, |a, b| a.powf(b)),
        Binary::Max => zip2(a, b, o, fmax),
        Binary::Min => zip2(a, b, o, fmin),
        Binary::Atan2 => zip2(a, b, o, |a, b| a.atan2(b)),
        Binary::And | Binary::Or => return Err(unsupported(name, T::DTYPE)),
    }
    Ok(())
}

/// Integer binary block: wrapping arithmetic, division by zero gives 0.
fn int_binary<T>(op: Binary, x: BlockRef<'_>, y: BlockRef<'_>, z: BlockMut<'_>) -> Result<(), ExecError>
where
    T: BlockElem
        + num_traits::PrimInt
        + num_traits::WrappingAdd
        + num_traits::WrappingSub
        + num_traits::WrappingMul
        + WrappingDivRem,
{
    let name = op.name();
    let (a, b, o) = (x.typed::<T>(name)?, y.typed::<T>(name)?, z.typed::<T>(name)?);
    let zero = T::zero();
    match op {
        Binary::Add => zip2(a, b, o, |a, b| a.wrapping_add(&b)),
        Binary::Sub => zip2(a, b, o, |a, b| a.wrapping_sub(&b)),
        Binary::Mul => zip2(a, b, o, |a, b| a.wrapping_mul(&b)),
        Binary::Div => zip2(a, b, o, |a, b| if b == zero { zero } else { a.wrap_div(b) }),
        Binary::Rem => zip2(a, b, o, |a, b| if b == zero { zero } else { a.wrap_rem(b) }),
        Binary::Max => zip2(a, b, o, |a, b| if a >= b { a } else { b }),
        Binary::Min => zip2(a, b, o, |a, b| if a <= b { a } else { b }),
        Binary::And => zip2(a, b, o, |a, b| a & b),
        Binary::Or => zip2(a, b, o, |a, b| a | b),
        Binary::Pow | Binary::Atan2 => return Err(unsupported(name, T::DTYPE)),
    }
    Ok(())
}

/// Truncating integer division/remainder that wrap on `MIN / -1` instead of
/// panicking (`num_traits` has no wrapping division trait).
trait WrappingDivRem: Copy {
    fn wrap_div(self, b: Self) -> Self;
    fn wrap_rem(self, b: Self) -> Self;
}

impl WrappingDivRem for i32 {
    #[inline(always)]
    fn wrap_div(self, b: Self) -> Self {
        self.wrapping_div(b)
    }
    #[inline(always)]
    fn wrap_rem(self, b: Self) -> Self {
        self.wrapping_rem(b)
    }
}

impl WrappingDivRem for i64 {
    #[inline(always)]
    fn wrap_div(self, b: Self) -> Self {
        self.wrapping_div(b)
    }
    #[inline(always)]
    fn wrap_rem(self, b: Self) -> Self {
        self.wrapping_rem(b)
    }
}

fn bool_binary(op: Binary, x: BlockRef<'_>, y: BlockRef<'_>, z: BlockMut<'_>) -> Result<(), ExecError> {
    let name = op.name();
    let (a, b, o) = (x.typed::<bool>(name)?, y.typed::<bool>(name)?, z.typed::<bool>(name)?);
    match op {
        Binary::And => zip2(a, b, o, |a, b| a & b),
        Binary::Or => zip2(a, b, o, |a, b| a | b),
        _ => return Err(unsupported(name, DType::Bool)),
    }
    Ok(())
}

impl Binary {
    /// Evaluates the op on one block: `out[i] = ins[0][i] op ins[1][i]`. The
    /// only implementation of the binary math: the kernel and the executor's
    /// fused groups both call it. Dispatches on the dtype once per block.
    pub(crate) fn eval_block(&self, ins: &[BlockRef<'_>], out: BlockMut<'_>) -> Result<(), ExecError> {
        check_block(self.name(), ins, 2, &out)?;
        let (op, x, y) = (*self, ins[0], ins[1]);
        match x.dtype() {
            DType::F32 => float_binary::<f32>(op, x, y, out),
            DType::F64 => float_binary::<f64>(op, x, y, out),
            DType::I32 => int_binary::<i32>(op, x, y, out),
            DType::I64 => int_binary::<i64>(op, x, y, out),
            DType::Bool => bool_binary(op, x, y, out),
        }
    }
}

impl Op for Binary {
    fn name(&self) -> &'static str {
        match self {
            Binary::Add => "add",
            Binary::Sub => "sub",
            Binary::Mul => "mul",
            Binary::Div => "div",
            Binary::Rem => "rem",
            Binary::Pow => "pow",
            Binary::Max => "max",
            Binary::Min => "min",
            Binary::Atan2 => "atan2",
            Binary::And => "and",
            Binary::Or => "or",
        }
    }

    fn params(&self) -> String {
        String::new()
    }

    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        check::arity(self, ins, 2)?;
        check::same_types(self, ins)?;
        if !self.accepts(ins[0].dtype) {
            return Err(check::err(self, ins, self.expected_dtype()));
        }
        Ok(vec![ins[0].clone()])
    }

    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        for_blocks(self.name(), ins, &mut outs[0], |ins, out| self.eval_block(ins, out))
    }
}

/// An elementwise comparison; the result is `bool` with the operands' shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Compare {
    /// `x == y`
    Eq,
    /// `x != y` (true when either is NaN)
    Ne,
    /// `x < y`
    Lt,
    /// `x <= y`
    Le,
    /// `x > y`
    Gt,
    /// `x >= y`
    Ge,
}

impl Compare {
    /// Every comparison primitive.
    pub const ALL: [Compare; 6] = [Compare::Eq, Compare::Ne, Compare::Lt, Compare::Le, Compare::Gt, Compare::Ge];
}

fn compare_block<T: BlockElem>(
    op: Compare,
    x: BlockRef<'_>,
    y: BlockRef<'_>,
    z: BlockMut<'_>,
) -> Result<(), ExecError> {
    let name = op.name();
    let (a, b, o) = (x.typed::<T>(name)?, y.typed::<T>(name)?, z.typed::<bool>(name)?);
    // `PartialOrd` gives IEEE semantics for floats (NaN unordered, -0 == +0).
    match op {
        Compare::Eq => zip2(a, b, o, |a, b| a == b),
        Compare::Ne => zip2(a, b, o, |a, b| a != b),
        Compare::Lt => zip2(a, b, o, |a, b| a < b),
        Compare::Le => zip2(a, b, o, |a, b| a <= b),
        Compare::Gt => zip2(a, b, o, |a, b| a > b),
        Compare::Ge => zip2(a, b, o, |a, b| a >= b),
    }
    Ok(())
}

impl Compare {
    /// Evaluates the comparison on one block (the kernel and fused groups
    /// both call it). Dispatches on the operand dtype once per block.
    pub(crate) fn eval_block(&self, ins: &[BlockRef<'_>], out: BlockMut<'_>) -> Result<(), ExecError> {
        check_block(self.name(), ins, 2, &out)?;
        let (op, x, y) = (*self, ins[0], ins[1]);
        dispatch_any!(x.dtype(), compare_block(op, x, y, out))
    }
}

impl Op for Compare {
    fn name(&self) -> &'static str {
        match self {
            Compare::Eq => "eq",
            Compare::Ne => "ne",
            Compare::Lt => "lt",
            Compare::Le => "le",
            Compare::Gt => "gt",
            Compare::Ge => "ge",
        }
    }

    fn params(&self) -> String {
        String::new()
    }

    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        check::arity(self, ins, 2)?;
        check::same_types(self, ins)?;
        Ok(vec![ins[0].with_dtype(DType::Bool)])
    }

    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        for_blocks(self.name(), ins, &mut outs[0], |ins, out| self.eval_block(ins, out))
    }
}

/// `out[i] = if pred[i] { on_true[i] } else { on_false[i] }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Select;

fn select_block<T: BlockElem>(
    p: BlockRef<'_>,
    t: BlockRef<'_>,
    f: BlockRef<'_>,
    z: BlockMut<'_>,
) -> Result<(), ExecError> {
    let name = "select";
    let (p, t, f, o) = (p.typed::<bool>(name)?, t.typed::<T>(name)?, f.typed::<T>(name)?, z.typed::<T>(name)?);
    zip3(p, t, f, o, |p, t, f| if p { t } else { f });
    Ok(())
}

impl Select {
    /// Evaluates `select` on one block (the kernel and fused groups both
    /// call it). Dispatches on the branches' dtype once per block.
    pub(crate) fn eval_block(&self, ins: &[BlockRef<'_>], out: BlockMut<'_>) -> Result<(), ExecError> {
        check_block(self.name(), ins, 3, &out)?;
        let (p, t, f) = (ins[0], ins[1], ins[2]);
        dispatch_any!(t.dtype(), select_block(p, t, f, out))
    }
}

impl Op for Select {
    fn name(&self) -> &'static str {
        "select"
    }

    fn params(&self) -> String {
        String::new()
    }

    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        check::arity(self, ins, 3)?;
        let (pred, on_true, on_false) = (&ins[0], &ins[1], &ins[2]);
        if pred.dtype != DType::Bool {
            return Err(check::err(self, ins, "expected a bool predicate"));
        }
        if on_true != on_false {
            return Err(check::err(self, ins, "expected on_true and on_false of identical shapes and dtypes"));
        }
        if pred.shape != on_true.shape {
            return Err(check::err(
                self,
                ins,
                "expected the predicate to have the branches' shape (broadcasting is explicit)",
            ));
        }
        Ok(vec![on_true.clone()])
    }

    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        for_blocks(self.name(), ins, &mut outs[0], |ins, out| self.eval_block(ins, out))
    }
}

macro_rules! binary_builders {
    ($($method:ident => $op:ident),* $(,)?) => {
        impl Builder {
            /// Applies an elementwise binary primitive to two operands of identical type.
            pub fn binary(&mut self, op: Binary, x: Value, y: Value) -> Result<Value, IrError> {
                self.emit1(op, &[x, y])
            }
            $(
                #[doc = concat!("Elementwise `", stringify!($method), "` (operands of identical type).")]
                pub fn $method(&mut self, x: Value, y: Value) -> Result<Value, IrError> {
                    self.emit1(Binary::$op, &[x, y])
                }
            )*
        }
    };
}

binary_builders! {
    add => Add, sub => Sub, mul => Mul, div => Div, rem => Rem, pow => Pow,
    max => Max, min => Min, atan2 => Atan2, and => And, or => Or,
}

macro_rules! compare_builders {
    ($($method:ident => $op:ident),* $(,)?) => {
        impl Builder {
            /// Applies an elementwise comparison; the result is bool.
            pub fn compare(&mut self, op: Compare, x: Value, y: Value) -> Result<Value, IrError> {
                self.emit1(op, &[x, y])
            }
            $(
                #[doc = concat!("Elementwise comparison `", stringify!($method), "`; the result is bool.")]
                pub fn $method(&mut self, x: Value, y: Value) -> Result<Value, IrError> {
                    self.emit1(Compare::$op, &[x, y])
                }
            )*
        }
    };
}

compare_builders! { eq => Eq, ne => Ne, lt => Lt, le => Le, gt => Gt, ge => Ge }

impl Builder {
    /// Picks `on_true` where `pred` holds and `on_false` elsewhere.
    pub fn select(&mut self, pred: Value, on_true: Value, on_false: Value) -> Result<Value, IrError> {
        self.emit1(Select, &[pred, on_true, on_false])
    }
}
