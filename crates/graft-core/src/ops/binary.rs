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
//!   f32 `pow` and `atan2` are graft's own (`mathfn::pow_f32`: `exp(y
//!   ln|x|)` in f64, `mathfn::atan2_f32`: a series in f64 after octant
//!   reduction; each rounded once, within 1 ulp), which the native
//!   backend's C prelude (`src/kernel/prelude.h`) reproduces bit for bit,
//!   so f32 groups holding them compile; f64 `pow` and `atan2` still call
//!   std (libm) and have no bitwise-equal C version yet, so groups holding
//!   them stay interpreted.
//!   `rem` is exact (Rust's `%` is IEEE `fmod`), and the prelude's
//!   integer-division fmod gives the same bits.
//! - `and`, `or`: bool (logical) or integers (bitwise).
//! - Comparisons: any dtype. Floats compare as IEEE (every comparison with NaN
//!   is false except `ne`, which is true; `-0 == +0`); bool orders `false < true`.
//! - `select(pred, on_true, on_false)`: `pred` is bool with the same shape as the
//!   branches, which have identical types (any dtype). Both branches are already
//!   computed; `select` only picks elementwise.

use super::kernel::{check_block, for_blocks, simd, unsupported, zip2, zip3, BlockElem, BlockMut, BlockRef, Real};
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
            Binary::And | Binary::Or => dtype == DType::Bool || dtype.is_integer(),
        }
    }

    fn expected_dtype(self) -> &'static str {
        match self {
            Binary::Pow | Binary::Atan2 => "expected floating-point operands (f32 or f64)",
            Binary::And | Binary::Or => "expected bool or integer operands",
            _ => "expected numeric operands (f16, f32, f64, i32, i64 or u32; not bool)",
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

impl Binary {
    /// This op's f64 kernel applied to one pair of elements: what an f64
    /// kernel of [`float_binary`] computes (each arm is the closure that
    /// kernel uses). Front ends fold constants with it. `None` for `and`
    /// and `or`, which have no float kernel.
    pub fn eval_f64(self, a: f64, b: f64) -> Option<f64> {
        Some(match self {
            Binary::Add => a + b,
            Binary::Sub => a - b,
            Binary::Mul => a * b,
            Binary::Div => a / b,
            Binary::Rem => a % b,
            Binary::Pow => a.powf(b),
            Binary::Max => fmax(a, b),
            Binary::Min => fmin(a, b),
            Binary::Atan2 => a.atan2(b),
            Binary::And | Binary::Or => return None,
        })
    }
}

/// Float binary block: one `match` on the op, then a monomorphic loop.
/// Inlined so the loop is compiled at each [`simd`] level.
#[inline(always)]
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
        Binary::Pow => zip2(a, b, o, |a, b| Real::pow(a, b)),
        Binary::Max => zip2(a, b, o, fmax),
        Binary::Min => zip2(a, b, o, fmin),
        Binary::Atan2 => zip2(a, b, o, Real::atan2),
        Binary::And | Binary::Or => return Err(unsupported(name, T::DTYPE)),
    }
    Ok(())
}

/// Integer binary block (signed and unsigned): wrapping arithmetic, division
/// and remainder by zero give 0 (graft's choice for every integer dtype).
#[inline(always)]
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

impl WrappingDivRem for u32 {
    #[inline(always)]
    fn wrap_div(self, b: Self) -> Self {
        self / b
    }
    #[inline(always)]
    fn wrap_rem(self, b: Self) -> Self {
        self % b
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

/// One binary block, run by [`simd`] at the CPU's best level.
struct BinaryBlock<'a> {
    op: Binary,
    x: BlockRef<'a>,
    y: BlockRef<'a>,
    out: BlockMut<'a>,
}

impl pulp::WithSimd for BinaryBlock<'_> {
    type Output = Result<(), ExecError>;

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) -> Self::Output {
        let BinaryBlock { op, x, y, out } = self;
        match x.dtype() {
            DType::F32 => float_binary::<f32>(op, x, y, out),
            DType::F64 => float_binary::<f64>(op, x, y, out),
            DType::I32 => int_binary::<i32>(op, x, y, out),
            DType::I64 => int_binary::<i64>(op, x, y, out),
            DType::U32 => int_binary::<u32>(op, x, y, out),
            DType::Bool => bool_binary(op, x, y, out),
            // f16 computes in f32 (`opt::widen_f16`): no kernel sees it.
            DType::F16 => Err(unsupported(op.name(), DType::F16)),
        }
    }
}

impl Binary {
    /// Evaluates the op on one block: `out[i] = ins[0][i] op ins[1][i]`. The
    /// only implementation of the binary math: the kernel and the executor's
    /// fused groups both call it. Dispatches on the dtype once per block.
    pub(crate) fn eval_block(&self, ins: &[BlockRef<'_>], out: BlockMut<'_>) -> Result<(), ExecError> {
        check_block(self.name(), ins, 2, &out)?;
        simd(BinaryBlock { op: *self, x: ins[0], y: ins[1], out })
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

// Derivative rules. Tangents are combined only by linear ops (add, sub,
// neg, mul/div by a primal coefficient, select), so the linear part
// transposes with the rules below.
impl crate::ad::Diff for Binary {
    fn jvp(&self, b: &mut Builder, cx: &crate::ad::JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        use crate::ad::helpers::{add_opt, full_like, mask_like, scale_opt, sub_opt};
        let (x, y, out) = (cx.primals[0], cx.primals[1], cx.outputs[0]);
        let (x_dot, y_dot) = (cx.tangents[0], cx.tangents[1]);
        let t = match self {
            Binary::Add => add_opt(b, x_dot, y_dot)?,
            Binary::Sub => sub_opt(b, x_dot, y_dot)?,
            // d(xy) = x_dot y + x y_dot
            Binary::Mul => {
                let a = scale_opt(b, x_dot, y)?;
                let c = scale_opt(b, y_dot, x)?;
                add_opt(b, a, c)?
            }
            // d(x/y) = x_dot / y - y_dot (out / y)
            Binary::Div => {
                let a = x_dot.map(|t| b.div(t, y)).transpose()?;
                let c = match y_dot {
                    Some(t) => {
                        let q = b.div(out, y)?;
                        Some(b.mul(t, q)?)
                    }
                    None => None,
                };
                sub_opt(b, a, c)?
            }
            // rem(x, y) = x - y trunc(x/y): d = x_dot - y_dot trunc(x/y), with
            // trunc(x/y) recovered exactly as (x - out) / y.
            Binary::Rem => {
                let c = match y_dot {
                    Some(t) => {
                        let diff = b.sub(x, out)?;
                        let q = b.div(diff, y)?;
                        Some(b.mul(t, q)?)
                    }
                    None => None,
                };
                sub_opt(b, x_dot, c)?
            }
            // d(x^y) = y x^(y-1) x_dot + out ln(x) y_dot; ln is taken of 1 where
            // x == 0 so that 0^y has a finite y-derivative (JAX's convention).
            Binary::Pow => {
                let a = match x_dot {
                    Some(t) => {
                        let one = full_like(b, x, 1.0)?;
                        let ym1 = b.sub(y, one)?;
                        let p = b.pow(x, ym1)?;
                        let c = b.mul(y, p)?;
                        Some(b.mul(t, c)?)
                    }
                    None => None,
                };
                let c = match y_dot {
                    Some(t) => {
                        let zero = full_like(b, x, 0.0)?;
                        let one = full_like(b, x, 1.0)?;
                        let is_zero = b.eq(x, zero)?;
                        let safe = b.select(is_zero, one, x)?;
                        let l = b.log(safe)?;
                        let c = b.mul(out, l)?;
                        Some(b.mul(t, c)?)
                    }
                    None => None,
                };
                add_opt(b, a, c)?
            }
            // Ties split the derivative equally between the operands (seed 003).
            Binary::Max | Binary::Min => {
                let wins = if *self == Binary::Max { b.gt(x, y)? } else { b.lt(x, y)? };
                let ties = b.eq(x, y)?;
                let w = mask_like(b, wins, x)?;
                let tie = mask_like(b, ties, x)?;
                let half = full_like(b, x, 0.5)?;
                let half_tie = b.mul(half, tie)?;
                let cx_ = b.add(w, half_tie)?;
                let one = full_like(b, x, 1.0)?;
                let cy_ = b.sub(one, cx_)?;
                // Where either operand is NaN both coefficients are irrelevant
                // (the output is NaN); the formula keeps them finite.
                let a = scale_opt(b, x_dot, cx_)?;
                let c = scale_opt(b, y_dot, cy_)?;
                add_opt(b, a, c)?
            }
            // atan2(x, y): d = (y x_dot - x y_dot) / (x^2 + y^2)
            Binary::Atan2 => {
                let x2 = b.mul(x, x)?;
                let y2 = b.mul(y, y)?;
                let r2 = b.add(x2, y2)?;
                let cx_ = b.div(y, r2)?;
                let a = scale_opt(b, x_dot, cx_)?;
                let c = match y_dot {
                    Some(t) => {
                        let q = b.div(x, r2)?;
                        Some(b.mul(t, q)?)
                    }
                    None => None,
                };
                sub_opt(b, a, c)?
            }
            Binary::And | Binary::Or => None,
        };
        Ok(vec![t])
    }

    fn transpose(&self, b: &mut Builder, cx: &crate::ad::TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        let ct = cx.cts[0];
        let (lx, ly) = (cx.is_linear(0), cx.is_linear(1));
        let opt = |c: Option<Value>, on: bool| if on { c } else { None };
        Ok(match self {
            Binary::Add => vec![opt(ct, lx), opt(ct, ly)],
            Binary::Sub => {
                let n = if ly { ct.map(|c| b.neg(c)).transpose()? } else { None };
                vec![opt(ct, lx), n]
            }
            // Linear in exactly one operand: ct times the other.
            Binary::Mul => match (lx, ly, ct) {
                (true, false, Some(c)) => vec![Some(b.mul(c, cx.primal("mul", 1)?)?), None],
                (false, true, Some(c)) => vec![None, Some(b.mul(cx.primal("mul", 0)?, c)?)],
                (true, true, _) => return Err(crate::ad::not_linear("mul")),
                _ => vec![None, None],
            },
            // Linear in the numerator only.
            Binary::Div => match (lx, ly, ct) {
                (true, false, Some(c)) => vec![Some(b.div(c, cx.primal("div", 1)?)?), None],
                (_, true, _) => return Err(crate::ad::not_linear("div")),
                _ => vec![None, None],
            },
            _ => return Err(crate::ad::not_linear(self.name())),
        })
    }
}

impl crate::ad::Diff for Compare {
    fn jvp(&self, _b: &mut Builder, _cx: &crate::ad::JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        // A bool result carries no tangent.
        Ok(vec![None])
    }

    fn transpose(&self, _b: &mut Builder, _cx: &crate::ad::TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        Err(crate::ad::not_linear(self.name()))
    }
}

impl crate::ad::Diff for Select {
    // select(p, a, b) is linear in (a, b) for a fixed predicate.
    fn jvp(&self, b: &mut Builder, cx: &crate::ad::JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        use crate::ad::helpers::zeros_like;
        let (p, on_true, on_false) = (cx.primals[0], cx.primals[1], cx.primals[2]);
        Ok(vec![match (cx.tangents[1], cx.tangents[2]) {
            (None, None) => None,
            (t, f) => {
                let t = match t {
                    Some(t) => t,
                    None => zeros_like(b, on_true)?,
                };
                let f = match f {
                    Some(f) => f,
                    None => zeros_like(b, on_false)?,
                };
                Some(b.select(p, t, f)?)
            }
        }])
    }

    fn transpose(&self, b: &mut Builder, cx: &crate::ad::TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        let p = cx.primal("select", 0)?;
        let Some(ct) = cx.cts[0] else { return Ok(vec![None, None, None]) };
        let zero = crate::ad::helpers::zeros_like(b, ct)?;
        let t = if cx.is_linear(1) { Some(b.select(p, ct, zero)?) } else { None };
        let f = if cx.is_linear(2) { Some(b.select(p, zero, ct)?) } else { None };
        Ok(vec![None, t, f])
    }
}

// Batching rules: all three are elementwise over identical operand shapes,
// so batched operands are aligned and unbatched ones broadcast.
mod batching {
    use super::*;
    use crate::batch::{helpers::elementwise, Batch, BatchCx, Batched};

    impl Batch for Binary {
        fn batch(&self, b: &mut Builder, cx: &BatchCx<'_>) -> Result<Batched, IrError> {
            elementwise(b, *self, cx)
        }
    }

    impl Batch for Compare {
        fn batch(&self, b: &mut Builder, cx: &BatchCx<'_>) -> Result<Batched, IrError> {
            elementwise(b, *self, cx)
        }
    }

    impl Batch for Select {
        fn batch(&self, b: &mut Builder, cx: &BatchCx<'_>) -> Result<Batched, IrError> {
            elementwise(b, *self, cx)
        }
    }
}
