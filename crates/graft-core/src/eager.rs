//! Eager tensors: arithmetic and math directly on [`Tensor`] values, for
//! quick experiments (seed 002's eager mode). `(&a + &b)?.exp()?.sum(&[0], false)?`
//! runs at once and returns tensors.
//!
//! Each operation is the same primitive (or composite) the compiler uses,
//! wrapped in a one-operation function that is planned op by op (no fusion,
//! no native code) once per (operation, input types) and cached, so an
//! eager result is bitwise what a compiled program computes for that
//! operation. Operators return `Result`, as in candle: a shape or dtype
//! error is a value (`ExecError::Ir`), never a panic. Broadcasting and
//! axes follow jax.numpy (negative axes count from the end).

use crate::composite::{self as c, broadcast};
use crate::error::{ExecError, IrError};
use crate::exec::{ExecOptions, Executable};
use crate::ir::{Builder, Value};
use crate::kernel::CompileMode;
use crate::ops::binary::Binary;
use crate::ops::unary::Unary;
use crate::tensor::Tensor;
use crate::types::TensorType;
use std::collections::HashMap;
use std::ops;
use std::sync::{Arc, Mutex, OnceLock};

/// Most one-operation functions kept planned; the cache is emptied when
/// it grows past this (experiments with ever new shapes must not leak).
const CACHE_MAX: usize = 4096;

type Key = (String, Vec<TensorType>);

fn cache() -> &'static Mutex<HashMap<Key, Arc<Executable>>> {
    static CACHE: OnceLock<Mutex<HashMap<Key, Arc<Executable>>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Runs `build` (one operation over parameters of the inputs' types) on
/// the inputs, planned op by op and cached under `key` and the input types.
fn run(
    key: String,
    ins: &[&Tensor],
    build: impl FnOnce(&mut Builder, &[Value]) -> Result<Value, IrError>,
) -> Result<Tensor, ExecError> {
    let types: Vec<TensorType> = ins.iter().map(|t| t.ty()).collect();
    let key = (key, types);
    let hit = cache().lock().unwrap_or_else(|e| e.into_inner()).get(&key).cloned();
    let exe = match hit {
        Some(e) => e,
        None => {
            let mut b = Builder::new(format!("eager_{}", key.0.split('(').next().unwrap_or("op")));
            let params: Vec<Value> = key.1.iter().map(|t| b.param(t.clone())).collect();
            let out = build(&mut b, &params)?;
            let opts = ExecOptions { fuse: false, compile: CompileMode::Off, ..ExecOptions::default() };
            let exe = Arc::new(Executable::with_options(b.finish(&[out])?, opts)?);
            let mut cache = cache().lock().unwrap_or_else(|e| e.into_inner());
            if cache.len() >= CACHE_MAX {
                cache.clear();
            }
            cache.insert(key, exe.clone());
            exe
        }
    };
    let mut outs = exe.run(ins)?;
    outs.pop().ok_or_else(|| ExecError::kernel("eager", "internal error: a one-operation function has one output"))
}

/// Resolves possibly negative axes against a rank (sorted, no repeats).
fn axes_of(op: &str, axes: &[isize], rank: usize) -> Result<Vec<usize>, IrError> {
    let mut out = Vec::with_capacity(axes.len());
    for &a in axes {
        let r = rank as isize;
        let k = if a < 0 { a + r } else { a };
        if !(0..r).contains(&k) {
            return Err(IrError::invalid(op, format!("axis {a} is out of range for rank {rank}")));
        }
        if out.contains(&(k as usize)) {
            return Err(IrError::invalid(op, format!("axis {a} is repeated")));
        }
        out.push(k as usize);
    }
    out.sort_unstable();
    Ok(out)
}

macro_rules! unary_methods {
    ($($(#[$doc:meta])* $name:ident => $body:expr),* $(,)?) => {
        impl Tensor {
            $(
                $(#[$doc])*
                pub fn $name(&self) -> Result<Tensor, ExecError> {
                    let f: fn(&mut Builder, Value) -> Result<Value, IrError> = $body;
                    run(stringify!($name).to_string(), &[self], |b, p| f(b, p[0]))
                }
            )*
        }
    };
}

unary_methods! {
    /// Elementwise `e^x`.
    exp => |b, x| b.unary(Unary::Exp, x),
    /// Elementwise natural logarithm.
    log => |b, x| b.unary(Unary::Log, x),
    /// Elementwise sine.
    sin => |b, x| b.unary(Unary::Sin, x),
    /// Elementwise cosine.
    cos => |b, x| b.unary(Unary::Cos, x),
    /// Elementwise hyperbolic tangent.
    tanh => |b, x| b.unary(Unary::Tanh, x),
    /// Elementwise square root.
    sqrt => |b, x| b.unary(Unary::Sqrt, x),
    /// Elementwise absolute value.
    abs => |b, x| b.unary(Unary::Abs, x),
    /// Elementwise negation.
    neg => |b, x| b.unary(Unary::Neg, x),
    /// Elementwise `max(x, 0)`.
    relu => c::math::relu,
    /// Elementwise logistic function `1 / (1 + e^-x)`.
    sigmoid => c::math::sigmoid,
    /// Elementwise `x * x`.
    square => c::math::square,
}

impl Tensor {
    /// Sum over `axes` (every axis when empty), keeping them as size 1 with `keepdims`.
    pub fn sum(&self, axes: &[isize], keepdims: bool) -> Result<Tensor, ExecError> {
        self.reduce("sum", axes, keepdims, c::reduce::sum)
    }

    /// Mean over `axes` (every axis when empty).
    pub fn mean(&self, axes: &[isize], keepdims: bool) -> Result<Tensor, ExecError> {
        self.reduce("mean", axes, keepdims, c::reduce::mean)
    }

    /// Maximum over `axes` (every axis when empty); NaN propagates.
    pub fn max(&self, axes: &[isize], keepdims: bool) -> Result<Tensor, ExecError> {
        self.reduce("max", axes, keepdims, c::reduce::max)
    }

    /// Minimum over `axes` (every axis when empty); NaN propagates.
    pub fn min(&self, axes: &[isize], keepdims: bool) -> Result<Tensor, ExecError> {
        self.reduce("min", axes, keepdims, c::reduce::min)
    }

    fn reduce(
        &self,
        op: &str,
        axes: &[isize],
        keepdims: bool,
        f: fn(&mut Builder, Value, &[usize], bool) -> Result<Value, IrError>,
    ) -> Result<Tensor, ExecError> {
        let ax = if axes.is_empty() { (0..self.rank()).collect() } else { axes_of(op, axes, self.rank())? };
        run(format!("{op}({ax:?}, {keepdims})"), &[self], |b, p| f(b, p[0], &ax, keepdims))
    }

    /// Softmax along `axis`.
    pub fn softmax(&self, axis: isize) -> Result<Tensor, ExecError> {
        let ax = axes_of("softmax", &[axis], self.rank())?[0];
        run(format!("softmax({ax})"), &[self], |b, p| c::reduce::softmax(b, p[0], ax))
    }

    /// Matrix product with NumPy's `matmul` rules (batch dims broadcast,
    /// vectors promoted).
    pub fn matmul(&self, other: &Tensor) -> Result<Tensor, ExecError> {
        run("matmul".into(), &[self, other], |b, p| c::linalg::matmul(b, p[0], p[1]))
    }

    /// The same elements in a new shape; one entry may be `-1` (inferred).
    pub fn reshaped(&self, shape: &[isize]) -> Result<Tensor, ExecError> {
        run(format!("reshape({shape:?})"), &[self], |b, p| c::shape::reshape(b, p[0], shape))
    }

    /// Axes permuted (reversed when `perm` is `None`).
    pub fn transposed(&self, perm: Option<&[usize]>) -> Result<Tensor, ExecError> {
        run(format!("transpose({perm:?})"), &[self], |b, p| c::shape::transpose(b, p[0], perm))
    }

    /// Elementwise `self ** other` with broadcasting.
    pub fn pow(&self, other: &Tensor) -> Result<Tensor, ExecError> {
        binary(Binary::Pow, self, other)
    }

    /// Elementwise maximum with broadcasting (NaN propagates).
    pub fn maximum(&self, other: &Tensor) -> Result<Tensor, ExecError> {
        binary(Binary::Max, self, other)
    }

    /// Elementwise minimum with broadcasting (NaN propagates).
    pub fn minimum(&self, other: &Tensor) -> Result<Tensor, ExecError> {
        binary(Binary::Min, self, other)
    }
}

fn binary(op: Binary, x: &Tensor, y: &Tensor) -> Result<Tensor, ExecError> {
    run(format!("{op:?}"), &[x, y], |b, p| broadcast::binary(b, op, p[0], p[1]))
}

/// `tensor op scalar` (or `scalar op tensor` when `flip`): the scalar takes
/// the tensor's dtype, as a Python scalar does in jax.numpy.
fn binary_scalar(op: Binary, x: &Tensor, s: f64, flip: bool) -> Result<Tensor, ExecError> {
    let st = Tensor::full(&TensorType::scalar(x.dtype()), s);
    let (a, b) = if flip { (&st, x) } else { (x, &st) };
    binary(op, a, b)
}

macro_rules! binop {
    ($trait:ident, $method:ident, $op:ident) => {
        impl ops::$trait<&Tensor> for &Tensor {
            type Output = Result<Tensor, ExecError>;
            fn $method(self, rhs: &Tensor) -> Self::Output {
                binary(Binary::$op, self, rhs)
            }
        }
        impl ops::$trait<f64> for &Tensor {
            type Output = Result<Tensor, ExecError>;
            fn $method(self, rhs: f64) -> Self::Output {
                binary_scalar(Binary::$op, self, rhs, false)
            }
        }
        impl ops::$trait<&Tensor> for f64 {
            type Output = Result<Tensor, ExecError>;
            fn $method(self, rhs: &Tensor) -> Self::Output {
                binary_scalar(Binary::$op, rhs, self, true)
            }
        }
    };
}

binop!(Add, add, Add);
binop!(Sub, sub, Sub);
binop!(Mul, mul, Mul);
binop!(Div, div, Div);

impl ops::Neg for &Tensor {
    type Output = Result<Tensor, ExecError>;
    fn neg(self) -> Self::Output {
        Tensor::neg(self)
    }
}
