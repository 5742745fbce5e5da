//! Elementwise unary primitives: `y[i] = f(x[i])`, same shape as the operand.
//!
//! Dtype rules: `neg`, `abs`, `sign` take any numeric dtype; `not` takes
//! bool (logical) or integers (bitwise); everything else needs a float.
//! `round` rounds half to even (NumPy's `round`, not C's `round`).
//! The transcendentals (`exp`, `expm1`, `log`, `log1p`, `sin`, `cos`, `tan`,
//! `tanh`, `logistic`, `erf`) use the branch-free, vectorised algorithms of
//! `ops::mathfn` (no libm: error bounds and specials are documented there),
//! which the native backend's C prelude (`src/kernel/prelude.h`) reproduces
//! bit for bit. `erf_inv` is XLA's CPU algorithm, bit for bit (so
//! `random.normal` draws JAX's samples; `mathfn/erf_inv.rs`).
//! `sqrt` is IEEE (correctly rounded), `rsqrt = 1 / sqrt(x)`.

use super::kernel::{check_block, for_blocks, simd, unsupported, zip1, BlockElem, BlockMut, BlockRef, Real};
use super::{check, Op};
use crate::dtype::DType;
use crate::error::{ExecError, IrError, TypeError};
use crate::ir::{Builder, Value};
use crate::tensor::Tensor;
use crate::types::TensorType;

/// An elementwise unary primitive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unary {
    /// `-x`
    Neg,
    /// `|x|`
    Abs,
    /// `-1`, `0` or `1` (and `0` for `±0`, NaN for NaN)
    Sign,
    /// `e^x`
    Exp,
    /// `e^x - 1`, accurate near 0
    Expm1,
    /// natural logarithm
    Log,
    /// `ln(1 + x)`, accurate near 0
    Log1p,
    /// square root
    Sqrt,
    /// `1 / sqrt(x)`
    Rsqrt,
    /// sine
    Sin,
    /// cosine
    Cos,
    /// tangent
    Tan,
    /// hyperbolic tangent
    Tanh,
    /// `1 / (1 + e^-x)`
    Logistic,
    /// error function
    Erf,
    /// inverse error function on `[-1, 1]` (JAX's bits on CPU)
    ErfInv,
    /// round towards -inf
    Floor,
    /// round towards +inf
    Ceil,
    /// round to nearest, ties to even
    Round,
    /// logical not (bool) or bitwise not (integers)
    Not,
}

impl Unary {
    /// Every unary primitive (for test tables and the language's name lookup).
    pub const ALL: [Unary; 20] = [
        Unary::Neg,
        Unary::Abs,
        Unary::Sign,
        Unary::Exp,
        Unary::Expm1,
        Unary::Log,
        Unary::Log1p,
        Unary::Sqrt,
        Unary::Rsqrt,
        Unary::Sin,
        Unary::Cos,
        Unary::Tan,
        Unary::Tanh,
        Unary::Logistic,
        Unary::Erf,
        Unary::ErfInv,
        Unary::Floor,
        Unary::Ceil,
        Unary::Round,
        Unary::Not,
    ];

    /// Whether this op accepts a dtype.
    pub fn accepts(self, dtype: DType) -> bool {
        match self {
            Unary::Neg | Unary::Abs | Unary::Sign => dtype.is_numeric(),
            Unary::Not => dtype == DType::Bool || dtype.is_integer(),
            _ => dtype.is_float(),
        }
    }

    /// The float function (the semantic definition for f32 and f64).
    #[inline(always)]
    fn apply<T: Real>(self, x: T) -> T {
        let one = T::one();
        match self {
            Unary::Neg => -x,
            Unary::Abs => x.abs(),
            Unary::Sign => {
                if x.is_nan() {
                    x
                } else if x > T::zero() {
                    one
                } else if x < T::zero() {
                    -one
                } else {
                    T::zero()
                }
            }
            Unary::Exp => x.exp1(),
            Unary::Expm1 => x.expm11(),
            Unary::Log => x.log1(),
            Unary::Log1p => x.log1p1(),
            Unary::Sqrt => x.sqrt(),
            Unary::Rsqrt => one / x.sqrt(),
            Unary::Sin => x.sin1(),
            Unary::Cos => x.cos1(),
            Unary::Tan => x.tan1(),
            Unary::Tanh => x.tanh1(),
            Unary::Logistic => x.logistic1(),
            Unary::Erf => x.erf1(),
            Unary::ErfInv => x.erf_inv1(),
            Unary::Floor => x.floor(),
            Unary::Ceil => x.ceil(),
            Unary::Round => x.round_even(),
            Unary::Not => x, // rejected by the shape rule for floats
        }
    }

    /// This op's f64 kernel applied to one element: bit for bit what an f64
    /// tensor's kernel computes for `x` (the vectorised slice functions of
    /// `ops::mathfn` equal their scalar versions element by element).
    /// Front ends fold constants with it, so a folded literal is exactly
    /// the value the f64 kernel would give at run time. `None` for `not`,
    /// which has no float kernel.
    pub fn eval_f64(self, x: f64) -> Option<f64> {
        (self != Unary::Not).then(|| self.apply(x))
    }
}

/// Float block: one `match` on the op outside the loop, so each arm is a
/// monomorphic loop (`apply` folds to a single function per arm). Inlined
/// so the loops are compiled at each [`simd`] level.
#[inline(always)]
fn float_block<T: Real>(op: Unary, x: BlockRef<'_>, y: BlockMut<'_>) -> Result<(), ExecError> {
    let (a, o) = (x.typed::<T>(op.name())?, y.typed::<T>(op.name())?);
    macro_rules! per_op {
        ($($v:ident),*) => {
            match op {
                // Whole-block vectorised loops (`ops::mathfn`), bitwise
                // equal to `apply` element by element.
                Unary::Exp => T::exp_slice(a, o),
                Unary::Tanh => T::tanh_slice(a, o),
                Unary::Expm1 => T::expm1_slice(a, o),
                Unary::Log => T::log_slice(a, o),
                Unary::Log1p => T::log1p_slice(a, o),
                Unary::Sin => T::sin_slice(a, o),
                Unary::Cos => T::cos_slice(a, o),
                Unary::Tan => T::tan_slice(a, o),
                Unary::Logistic => T::logistic_slice(a, o),
                Unary::Erf => T::erf_slice(a, o),
                Unary::ErfInv => T::erf_inv_slice(a, o),
                $(Unary::$v => zip1(a, o, |v| Unary::$v.apply(v)),)*
                Unary::Not => return Err(unsupported(op.name(), T::DTYPE)),
            }
        };
    }
    per_op!(Neg, Abs, Sign, Sqrt, Rsqrt, Floor, Ceil, Round);
    Ok(())
}

#[inline(always)]
fn int_block<T: BlockElem + num_traits::PrimInt + num_traits::Signed + num_traits::WrappingSub>(
    op: Unary,
    x: BlockRef<'_>,
    y: BlockMut<'_>,
) -> Result<(), ExecError> {
    let (a, o) = (x.typed::<T>(op.name())?, y.typed::<T>(op.name())?);
    match op {
        // Integer negation and abs wrap on the minimum value, like NumPy.
        Unary::Neg => zip1(a, o, |v| T::zero().wrapping_sub(&v)),
        Unary::Abs => zip1(a, o, |v| if v < T::zero() { T::zero().wrapping_sub(&v) } else { v }),
        Unary::Sign => zip1(a, o, |v| v.signum()),
        Unary::Not => zip1(a, o, |v| !v),
        _ => return Err(unsupported(op.name(), T::DTYPE)),
    }
    Ok(())
}

/// u32: negation wraps modulo 2^32, abs is the identity, sign is 0 or 1.
fn uint_block(op: Unary, x: BlockRef<'_>, y: BlockMut<'_>) -> Result<(), ExecError> {
    let (a, o) = (x.typed::<u32>(op.name())?, y.typed::<u32>(op.name())?);
    match op {
        Unary::Neg => zip1(a, o, |v| v.wrapping_neg()),
        Unary::Abs => zip1(a, o, |v| v),
        Unary::Sign => zip1(a, o, |v| (v != 0) as u32),
        Unary::Not => zip1(a, o, |v| !v),
        _ => return Err(unsupported(op.name(), DType::U32)),
    }
    Ok(())
}

fn bool_block(op: Unary, x: BlockRef<'_>, y: BlockMut<'_>) -> Result<(), ExecError> {
    let (a, o) = (x.typed::<bool>(op.name())?, y.typed::<bool>(op.name())?);
    match op {
        Unary::Not => zip1(a, o, |v| !v),
        _ => return Err(unsupported(op.name(), DType::Bool)),
    }
    Ok(())
}

/// One unary block, run by [`simd`] at the CPU's best level.
struct UnaryBlock<'a> {
    op: Unary,
    x: BlockRef<'a>,
    out: BlockMut<'a>,
}

impl pulp::WithSimd for UnaryBlock<'_> {
    type Output = Result<(), ExecError>;

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) -> Self::Output {
        let UnaryBlock { op, x, out } = self;
        match x.dtype() {
            DType::F32 => float_block::<f32>(op, x, out),
            DType::F64 => float_block::<f64>(op, x, out),
            DType::I32 => int_block::<i32>(op, x, out),
            DType::I64 => int_block::<i64>(op, x, out),
            DType::U32 => uint_block(op, x, out),
            DType::Bool => bool_block(op, x, out),
            // f16 computes in f32 (`opt::widen_f16`): no kernel sees it.
            DType::F16 => Err(unsupported(op.name(), DType::F16)),
        }
    }
}

impl Unary {
    /// Evaluates the op on one block: `out[i] = f(ins[0][i])`. The only
    /// implementation of the unary math: the kernel and the executor's
    /// fused groups both call it. Dispatches on the dtype once per block.
    pub(crate) fn eval_block(&self, ins: &[BlockRef<'_>], out: BlockMut<'_>) -> Result<(), ExecError> {
        check_block(self.name(), ins, 1, &out)?;
        simd(UnaryBlock { op: *self, x: ins[0], out })
    }
}

impl Op for Unary {
    fn name(&self) -> &'static str {
        match self {
            Unary::Neg => "neg",
            Unary::Abs => "abs",
            Unary::Sign => "sign",
            Unary::Exp => "exp",
            Unary::Expm1 => "expm1",
            Unary::Log => "log",
            Unary::Log1p => "log1p",
            Unary::Sqrt => "sqrt",
            Unary::Rsqrt => "rsqrt",
            Unary::Sin => "sin",
            Unary::Cos => "cos",
            Unary::Tan => "tan",
            Unary::Tanh => "tanh",
            Unary::Logistic => "logistic",
            Unary::Erf => "erf",
            Unary::ErfInv => "erf_inv",
            Unary::Floor => "floor",
            Unary::Ceil => "ceil",
            Unary::Round => "round",
            Unary::Not => "not",
        }
    }

    fn params(&self) -> String {
        String::new()
    }

    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        check::arity(self, ins, 1)?;
        if !self.accepts(ins[0].dtype) {
            let what = match self {
                Unary::Neg | Unary::Abs | Unary::Sign => "a numeric operand (not bool)",
                Unary::Not => "a bool or integer operand",
                _ => "a floating-point operand (f32 or f64)",
            };
            return Err(check::err(self, ins, format!("expected {what}")));
        }
        Ok(vec![ins[0].clone()])
    }

    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        for_blocks(self.name(), ins, &mut outs[0], |ins, out| self.eval_block(ins, out))
    }
}

macro_rules! unary_builders {
    ($($method:ident => $op:ident),* $(,)?) => {
        impl Builder {
            /// Applies an elementwise unary primitive.
            pub fn unary(&mut self, op: Unary, x: Value) -> Result<Value, IrError> {
                self.emit1(op, &[x])
            }
            $(
                #[doc = concat!("Elementwise `", stringify!($method), "`.")]
                pub fn $method(&mut self, x: Value) -> Result<Value, IrError> {
                    self.emit1(Unary::$op, &[x])
                }
            )*
        }
    };
}

unary_builders! {
    neg => Neg, abs => Abs, sign => Sign, exp => Exp, expm1 => Expm1, log => Log,
    log1p => Log1p, sqrt => Sqrt, rsqrt => Rsqrt, sin => Sin, cos => Cos, tan => Tan,
    tanh => Tanh, logistic => Logistic, erf => Erf, erf_inv => ErfInv, floor => Floor, ceil => Ceil,
    round => Round, not => Not,
}

// Derivative rules. Each JVP computes a primal coefficient `c = f'(x)` and
// scales the tangent by it; only `neg` is linear, so only it transposes.
impl crate::ad::Diff for Unary {
    fn jvp(&self, b: &mut Builder, cx: &crate::ad::JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        use crate::ad::helpers::{full_like, scale_opt};
        let (x, y, x_dot) = (cx.primals[0], cx.outputs[0], cx.tangents[0]);
        let c = match self {
            // Linear: the tangent goes through the op itself.
            Unary::Neg => return Ok(vec![x_dot.map(|t| b.neg(t)).transpose()?]),
            // f'(x) = sign(x); abs'(0) = 0 by convention (sign(0) = 0).
            Unary::Abs => b.sign(x)?,
            // Piecewise constant: zero derivative everywhere (conventions of seed 003).
            Unary::Sign | Unary::Floor | Unary::Ceil | Unary::Round | Unary::Not => return Ok(vec![None]),
            // f'(x) = e^x = y
            Unary::Exp => y,
            // f'(x) = e^x = y + 1
            Unary::Expm1 => {
                let one = full_like(b, x, 1.0)?;
                b.add(y, one)?
            }
            // f'(x) = 1/x
            Unary::Log => {
                let one = full_like(b, x, 1.0)?;
                b.div(one, x)?
            }
            // f'(x) = 1/(1+x)
            Unary::Log1p => {
                let one = full_like(b, x, 1.0)?;
                let d = b.add(one, x)?;
                b.div(one, d)?
            }
            // f'(x) = 1/(2 sqrt x) = 0.5 / y
            Unary::Sqrt => {
                let half = full_like(b, x, 0.5)?;
                b.div(half, y)?
            }
            // f'(x) = -1/2 x^(-3/2) = -0.5 * y / x
            Unary::Rsqrt => {
                let h = full_like(b, x, -0.5)?;
                let yx = b.div(y, x)?;
                b.mul(h, yx)?
            }
            // f'(x) = cos x
            Unary::Sin => b.cos(x)?,
            // f'(x) = -sin x
            Unary::Cos => {
                let s = b.sin(x)?;
                b.neg(s)?
            }
            // f'(x) = 1 + tan^2 x = 1 + y^2
            Unary::Tan => {
                let y2 = b.mul(y, y)?;
                let one = full_like(b, x, 1.0)?;
                b.add(one, y2)?
            }
            // f'(x) = 1 - tanh^2 x = 1 - y^2
            Unary::Tanh => {
                let y2 = b.mul(y, y)?;
                let one = full_like(b, x, 1.0)?;
                b.sub(one, y2)?
            }
            // f'(x) = y (1 - y)
            Unary::Logistic => {
                let one = full_like(b, x, 1.0)?;
                let one_minus = b.sub(one, y)?;
                b.mul(y, one_minus)?
            }
            // f'(x) = 2/sqrt(pi) e^(-x^2)
            Unary::Erf => {
                let x2 = b.mul(x, x)?;
                let minus_x2 = b.neg(x2)?;
                let e = b.exp(minus_x2)?;
                let k = full_like(b, x, std::f64::consts::FRAC_2_SQRT_PI)?;
                b.mul(k, e)?
            }
            // f'(x) = sqrt(pi)/2 e^(y^2) (JAX's rule); infinite at ±1.
            Unary::ErfInv => {
                let y2 = b.mul(y, y)?;
                let e = b.exp(y2)?;
                let k = full_like(b, x, std::f64::consts::PI.sqrt() / 2.0)?;
                b.mul(k, e)?
            }
        };
        Ok(vec![scale_opt(b, x_dot, c)?])
    }

    fn transpose(&self, b: &mut Builder, cx: &crate::ad::TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        match self {
            Unary::Neg => Ok(vec![cx.cts[0].map(|ct| b.neg(ct)).transpose()?]),
            _ => Err(crate::ad::not_linear(self.name())),
        }
    }
}

// Batching rule: elementwise, the result keeps the operand's batch dim.
impl crate::batch::Batch for Unary {
    fn batch(&self, b: &mut Builder, cx: &crate::batch::BatchCx<'_>) -> Result<crate::batch::Batched, IrError> {
        crate::batch::helpers::elementwise(b, *self, cx)
    }
}
