//! Constant folding of the elementwise math builtins on number literals.
//!
//! `exp(0.5)`, `abs(-3.0)`, `gelu(1.0)`: every elementwise math builtin of
//! one number literal is evaluated while compiling, and the result is again
//! an untyped number that takes the dtype of its context, like the result
//! of literal arithmetic (`x + erf(0.5)` is f64 next to an f64 `x`). Folding
//! all of them, not some, is what makes that rule one rule.
//!
//! Why graft-core's kernels and not Rust's `f64` methods: the value must be
//! exactly what an f64 tensor of the literal would give at run time, and
//! graft's transcendentals are its own (`ops::mathfn`, no libm), which can
//! differ from `f64::exp` and friends in the last bit. So each builtin is
//! evaluated with [`Unary::eval_f64`] / [`Binary::eval_f64`] (the f64 kernels'
//! element functions), and the composites (`gelu`, `softplus`, ...) repeat
//! the primitive sequence of their `graft_core::composite::math` lowering,
//! constants included. In an f32 context the folded value is that f64 result
//! rounded once, like every untyped literal (`0.1 * 3.0` is computed in f64
//! too); it can differ from the f32 kernel's result by one ulp.
//!
//! Integer literals: `abs`, `sign`, `square` and `relu` keep them integers
//! (with the integer kernels' wrapping rules), the float functions read them
//! as floats (`exp(1)` like `exp(1.0)`; `floor(3)` is `3.0`). Bool literals
//! are not folded: the builtin rejects them as it rejects bool tensors.
//! Array literals are not folded either (their elements become a tensor).

use super::value::Const;
use graft_core::ops::binary::Binary;
use graft_core::ops::unary::Unary;

/// The builtins that fold: every elementwise math function of one operand.
pub const FOLDABLE: &[&str] = &[
    "exp",
    "log",
    "tanh",
    "sin",
    "cos",
    "tan",
    "sqrt",
    "rsqrt",
    "abs",
    "sign",
    "expm1",
    "log1p",
    "floor",
    "ceil",
    "round",
    "erf",
    "sigmoid",
    "logistic",
    "relu",
    "gelu",
    "silu",
    "softplus",
    "log_sigmoid",
    "square",
    "reciprocal",
];

/// `name(c)` evaluated now (`approximate` is `gelu`'s option); `None` when
/// `name` does not fold or `c` is a bool.
pub fn fold(name: &str, c: Const, approximate: bool) -> Option<Const> {
    if let Const::Int(i) = c {
        // The integer kernels' rules (wrapping like `int_block`'s abs and
        // `mul`, `relu` as `where(x <= 0, 0, x)`).
        match name {
            "abs" => return Some(Const::Int(i.wrapping_abs())),
            "sign" => return Some(Const::Int(i.signum())),
            "square" => return Some(Const::Int(i.wrapping_mul(i))),
            "relu" => return Some(Const::Int(if i <= 0 { 0 } else { i })),
            _ => {}
        }
    }
    let x = match c {
        Const::Int(i) => i as f64,
        Const::Float(f) => f,
        Const::Bool(_) => return None,
    };
    let u = |op: Unary, v: f64| op.eval_f64(v).expect("internal error: float unary ops have an f64 kernel");
    let b = |op: Binary, p: f64, q: f64| op.eval_f64(p, q).expect("internal error: arithmetic has an f64 kernel");
    let y = match name {
        "exp" => u(Unary::Exp, x),
        "log" => u(Unary::Log, x),
        "tanh" => u(Unary::Tanh, x),
        "sin" => u(Unary::Sin, x),
        "cos" => u(Unary::Cos, x),
        "tan" => u(Unary::Tan, x),
        "sqrt" => u(Unary::Sqrt, x),
        "rsqrt" => u(Unary::Rsqrt, x),
        "abs" => u(Unary::Abs, x),
        "sign" => u(Unary::Sign, x),
        "expm1" => u(Unary::Expm1, x),
        "log1p" => u(Unary::Log1p, x),
        "floor" => u(Unary::Floor, x),
        "ceil" => u(Unary::Ceil, x),
        "round" => u(Unary::Round, x),
        "erf" => u(Unary::Erf, x),
        "sigmoid" | "logistic" => u(Unary::Logistic, x),
        // composite::math::relu: select(x <= 0, 0, x).
        "relu" => {
            if x <= 0.0 {
                0.0
            } else {
                x
            }
        }
        "gelu" => gelu(x, approximate, &u, &b),
        // composite::math::silu: x * logistic(x).
        "silu" => b(Binary::Mul, x, u(Unary::Logistic, x)),
        "softplus" => softplus(x, &u, &b),
        // composite::math::log_sigmoid: -softplus(-x).
        "log_sigmoid" => -softplus(-x, &u, &b),
        // composite::math::square: mul(x, x).
        "square" => b(Binary::Mul, x, x),
        // composite::math::reciprocal: div(1, x).
        "reciprocal" => b(Binary::Div, 1.0, x),
        _ => return None,
    };
    Some(Const::Float(y))
}

/// `composite::math::gelu`, step by step in f64.
fn gelu(x: f64, approximate: bool, u: &impl Fn(Unary, f64) -> f64, b: &impl Fn(Binary, f64, f64) -> f64) -> f64 {
    let inner = if approximate {
        let c = (2.0 / std::f64::consts::PI).sqrt();
        let x3 = b(Binary::Mul, b(Binary::Mul, x, x), x);
        let s = b(Binary::Add, x, b(Binary::Mul, 0.044715, x3));
        u(Unary::Tanh, b(Binary::Mul, c, s))
    } else {
        u(Unary::Erf, b(Binary::Mul, x, std::f64::consts::FRAC_1_SQRT_2))
    };
    let t = b(Binary::Add, 1.0, inner);
    b(Binary::Mul, b(Binary::Mul, 0.5, x), t)
}

/// `composite::math::softplus`: `max(x, 0) + log1p(exp(-|x|))`.
fn softplus(x: f64, u: &impl Fn(Unary, f64) -> f64, b: &impl Fn(Binary, f64, f64) -> f64) -> f64 {
    let pos = b(Binary::Max, x, 0.0);
    let e = u(Unary::Exp, -u(Unary::Abs, x));
    b(Binary::Add, pos, u(Unary::Log1p, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Folding uses graft's kernels: each folded value equals what the f64
    /// kernel computes, which is not always what Rust's libm computes.
    #[test]
    fn folded_values_are_the_f64_kernels() {
        use graft_core::ops::mathfn;
        let bits = |c: Option<Const>| match c {
            Some(Const::Float(f)) => f.to_bits(),
            other => panic!("expected a folded float, got {other:?}"),
        };
        for x in [0.5, -3.0, 1e-10, 2.5, 100.0, -0.0] {
            let c = Const::Float(x);
            assert_eq!(bits(fold("exp", c, false)), mathfn::exp_f64(x).to_bits(), "exp({x})");
            assert_eq!(bits(fold("erf", c, false)), mathfn::erf_f64(x).to_bits(), "erf({x})");
            // `log1p(-3)` is a NaN: its bits must match too.
            assert_eq!(bits(fold("log1p", c, false)), mathfn::log1p_f64(x).to_bits(), "log1p({x})");
            assert_eq!(bits(fold("tanh", c, false)), mathfn::tanh_f64(x).to_bits(), "tanh({x})");
        }
        assert_eq!(fold("abs", Const::Int(-3), false), Some(Const::Int(3)));
        assert_eq!(fold("floor", Const::Int(3), false), Some(Const::Float(3.0)));
        assert_eq!(fold("relu", Const::Bool(true), false), None);
        assert_eq!(fold("sum", Const::Float(1.0), false), None);
    }
}
