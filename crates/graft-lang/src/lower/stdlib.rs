//! The standard library: builtin functions by their jax.numpy names, mapped
//! onto graft-core composites and builder methods.
//!
//! Conventions (see docs/language.md): reductions take `axis` (an integer,
//! a negative integer, a dimension name, or a tuple) and `keepdims`, and
//! reduce everything without an axis; `softmax`/`log_softmax` default to the
//! last axis; creation and random functions default to f32; `split(k)`
//! returns a pair of keys; `gather(table, idx)` takes rows like `jnp.take`;
//! `conv2d` is NCHW/OIHW cross-correlation; `max_pool2d(x, k)` uses stride k.
//! `tabulate(n, f)` is `vmap(f)` over `arange(n)` (no loop).

use super::expr::static_int;
use super::value::{ArrKind, Const, FnVal, TransformFn, Tv, Val, WrtSpec};
use super::{ArgVal, Lower};
use crate::ast::{Span, TransformKind};
use crate::diag::{Diagnostic, Stage};
use graft_core::composite::{self as c, conv::ConvOpts, pool::PoolOpts};
use graft_core::ops::binary::Binary;
use graft_core::{DType, TensorType, Value};
use std::rc::Rc;

/// (name, parameter names; a trailing `*` param takes the rest positionally).
const BUILTINS: &[(&str, &[&str])] = &[
    // elementwise math
    ("exp", &["x"]),
    ("log", &["x"]),
    ("tanh", &["x"]),
    ("sin", &["x"]),
    ("cos", &["x"]),
    ("tan", &["x"]),
    ("sqrt", &["x"]),
    ("rsqrt", &["x"]),
    ("abs", &["x"]),
    ("sign", &["x"]),
    ("expm1", &["x"]),
    ("log1p", &["x"]),
    ("floor", &["x"]),
    ("ceil", &["x"]),
    ("round", &["x"]),
    ("erf", &["x"]),
    ("sigmoid", &["x"]),
    ("logistic", &["x"]),
    ("relu", &["x"]),
    ("gelu", &["x", "approximate"]),
    ("silu", &["x"]),
    ("softplus", &["x"]),
    ("log_sigmoid", &["x"]),
    ("square", &["x"]),
    ("reciprocal", &["x"]),
    ("maximum", &["x", "y"]),
    ("minimum", &["x", "y"]),
    ("pow", &["x", "y"]),
    ("atan2", &["y", "x"]),
    ("where", &["cond", "x", "y"]),
    ("clip", &["x", "lo", "hi"]),
    ("stop_gradient", &["x"]),
    ("cast", &["x", "dtype"]),
    // reductions
    ("sum", &["x", "axis", "keepdims"]),
    ("mean", &["x", "axis", "keepdims"]),
    ("max", &["x", "axis", "keepdims"]),
    ("min", &["x", "axis", "keepdims"]),
    ("prod", &["x", "axis", "keepdims"]),
    ("var", &["x", "axis", "ddof", "keepdims"]),
    ("std", &["x", "axis", "ddof", "keepdims"]),
    ("argmax", &["x", "axis", "keepdims"]),
    ("argmin", &["x", "axis", "keepdims"]),
    ("logsumexp", &["x", "axis", "keepdims"]),
    ("softmax", &["x", "axis"]),
    ("log_softmax", &["x", "axis"]),
    ("cumsum", &["x", "axis", "reverse"]),
    // linear algebra
    ("matmul", &["x", "y"]),
    ("einsum", &["spec", "*operands"]),
    ("cholesky", &["x"]),
    ("triangular_solve", &["a", "b", "lower", "left", "transpose_a", "unit_diagonal"]),
    ("cho_solve", &["l", "b"]),
    ("lu", &["x"]),
    ("solve", &["a", "b"]),
    ("inv", &["x"]),
    ("slogdet", &["x"]),
    ("det", &["x"]),
    ("eye", &["n", "dtype"]),
    ("diag", &["v"]),
    ("diagonal", &["x"]),
    ("tril", &["x", "k"]),
    ("triu", &["x", "k"]),
    ("trace", &["x"]),
    ("outer", &["x", "y"]),
    ("kron", &["x", "y"]),
    ("norm", &["x", "ord"]),
    // shapes
    ("reshape", &["x", "shape"]),
    ("transpose", &["x", "perm"]),
    ("concat", &["xs", "axis"]),
    ("stack", &["xs", "axis"]),
    ("expand_dims", &["x", "axis"]),
    ("squeeze", &["x", "axis"]),
    ("flatten", &["x"]),
    ("broadcast_to", &["x", "shape"]),
    ("flip", &["x", "axis"]),
    ("gather", &["table", "idx"]),
    ("take", &["x", "idx", "axis"]),
    ("one_hot", &["labels", "n", "dtype"]),
    ("size", &["x", "axis"]),
    // creation
    ("zeros", &["shape", "dtype"]),
    ("ones", &["shape", "dtype"]),
    ("full", &["shape", "value", "dtype"]),
    ("arange", &["start", "stop", "step", "dtype"]),
    ("linspace", &["start", "stop", "num", "dtype"]),
    ("zeros_like", &["x"]),
    ("ones_like", &["x"]),
    // neural networks
    ("conv2d", &["x", "w", "bias", "stride", "padding"]),
    ("max_pool2d", &["x", "k", "stride"]),
    ("avg_pool2d", &["x", "k", "stride"]),
    ("layer_norm", &["x", "gamma", "beta", "eps"]),
    ("cross_entropy", &["logits", "labels"]),
    ("mse", &["pred", "target"]),
    // random numbers from explicit keys
    ("key", &["seed"]),
    ("split", &["key", "n"]),
    ("uniform", &["key", "shape", "lo", "hi", "dtype"]),
    ("normal", &["key", "shape", "dtype"]),
    ("bernoulli", &["key", "p", "shape"]),
    // control flow
    ("tabulate", &["n", "f"]),
    ("scan", &["f", "init", "xs"]),
    ("fori", &["n", "f", "init"]),
    ("while", &["cond", "body", "init"]),
];

pub fn is_builtin(name: &str) -> bool {
    BUILTINS.iter().any(|(n, _)| *n == name)
}

/// Every builtin name (for "did you mean" suggestions).
pub fn names() -> impl Iterator<Item = &'static str> {
    BUILTINS.iter().map(|(n, _)| *n)
}

/// Arguments matched to a builtin's parameters.
struct A {
    name: &'static str,
    params: &'static [&'static str],
    slots: Vec<Option<ArgVal>>,
    rest: Vec<ArgVal>,
    span: Span,
}

impl A {
    fn new(l: &Lower<'_>, name: &str, args: Vec<ArgVal>, span: &Span) -> Result<A, Diagnostic> {
        let (bname, params) = BUILTINS
            .iter()
            .find(|(n, _)| *n == name)
            .copied()
            .ok_or_else(|| l.err(Stage::Resolve, span, format!("unknown function `{name}`")))?;
        let star = params.last().is_some_and(|p| p.starts_with('*'));
        let fixed = if star { params.len() - 1 } else { params.len() };
        let mut a = A { name: bname, params, slots: vec![None; fixed], rest: Vec::new(), span: span.clone() };
        let mut pos = 0;
        for arg in args {
            match &arg.name {
                None if pos < fixed => {
                    a.slots[pos] = Some(arg);
                    pos += 1;
                }
                None if star => a.rest.push(arg),
                None => {
                    return Err(l
                        .err(Stage::Type, &arg.span, format!("`{name}` takes at most {fixed} arguments"))
                        .with_note(format!("note: its parameters are {}", params.join(", "))))
                }
                Some(n) => {
                    let Some(i) = params[..fixed].iter().position(|p| *p == n.name) else {
                        return Err(l
                            .err(Stage::Type, &n.span, format!("`{name}` has no parameter `{}`", n.name))
                            .with_note(format!("note: its parameters are {}", params.join(", "))));
                    };
                    if a.slots[i].is_some() {
                        return Err(l.err(Stage::Type, &n.span, format!("`{}` is given twice", n.name)));
                    }
                    a.slots[i] = Some(arg);
                }
            }
        }
        Ok(a)
    }

    fn idx(&self, p: &str) -> usize {
        self.params.iter().position(|q| *q == p).expect("internal error: builtins ask only for their own parameters")
    }

    fn opt(&self, p: &str) -> Option<&ArgVal> {
        self.slots[self.idx(p)].as_ref()
    }

    fn req(&self, l: &Lower<'_>, p: &str) -> Result<&ArgVal, Diagnostic> {
        self.opt(p).ok_or_else(|| {
            l.err(Stage::Type, &self.span, format!("`{}` needs the argument `{p}`", self.name))
                .with_note(format!("note: its parameters are {}", self.params.join(", ")))
        })
    }

    /// A tensor argument; literals become f32 when `float`, else their default.
    fn t(&self, l: &mut Lower<'_>, p: &str, float: bool) -> Result<Value, Diagnostic> {
        let a = self.req(l, p)?.clone();
        if float && !matches!(a.val, Val::T(_)) {
            return l.tensor_as(&a.val, DType::F32, &a.span);
        }
        l.tensor(&a.val, &a.span)
    }

    fn int(&self, l: &Lower<'_>, p: &str, default: Option<i64>) -> Result<i64, Diagnostic> {
        match self.opt(p) {
            None => default
                .ok_or_else(|| l.err(Stage::Type, &self.span, format!("`{}` needs the argument `{p}`", self.name))),
            Some(a) => static_int(&a.val).ok_or_else(|| {
                l.err(
                    Stage::Type,
                    &a.span,
                    format!(
                        "`{p}` of `{}` must be an integer known while compiling, found {}",
                        self.name,
                        a.val.describe()
                    ),
                )
            }),
        }
    }

    fn num(&self, l: &Lower<'_>, p: &str, default: f64) -> Result<f64, Diagnostic> {
        match self.opt(p) {
            None => Ok(default),
            Some(a) => super::expr::static_scalar(&a.val).map(Const::as_f64).ok_or_else(|| {
                l.err(
                    Stage::Type,
                    &a.span,
                    format!(
                        "`{p}` of `{}` must be a number known while compiling, found {}",
                        self.name,
                        a.val.describe()
                    ),
                )
            }),
        }
    }

    fn flag(&self, l: &Lower<'_>, p: &str) -> Result<bool, Diagnostic> {
        self.flag_or(l, p, false)
    }

    fn flag_or(&self, l: &Lower<'_>, p: &str, default: bool) -> Result<bool, Diagnostic> {
        match self.opt(p) {
            None => Ok(default),
            Some(a) => match a.val {
                Val::Const(Const::Bool(b)) => Ok(b),
                _ => Err(l.err(
                    Stage::Type,
                    &a.span,
                    format!("`{p}` must be `true` or `false`, found {}", a.val.describe()),
                )),
            },
        }
    }

    fn dtype(&self, l: &Lower<'_>, p: &str, default: DType) -> Result<DType, Diagnostic> {
        match self.opt(p) {
            None => Ok(default),
            Some(a) => match &a.val {
                Val::Str(s) => {
                    DType::parse(s).ok_or_else(|| l.err(Stage::Type, &a.span, format!("unknown dtype `{s}`")))
                }
                other => Err(l.err(
                    Stage::Type,
                    &a.span,
                    format!("expected a dtype (f32, f64, i32, i64, bool), found {}", other.describe()),
                )),
            },
        }
    }

    /// A static shape: `(3, 4)`, `3`, or dimension names.
    fn shape(&self, l: &Lower<'_>, p: &str) -> Result<Vec<isize>, Diagnostic> {
        let a = self.req(l, p)?;
        let items: Vec<Val> = match &a.val {
            Val::Tuple(t) => t.to_vec(),
            other => vec![other.clone()],
        };
        items.iter().map(|v| static_int(v).map(|k| k as isize)).collect::<Option<Vec<_>>>().ok_or_else(|| {
            l.err(
                Stage::Type,
                &a.span,
                format!("`{p}` must be a tuple of integers known while compiling, found {}", a.val.describe()),
            )
        })
    }

    fn ushape(&self, l: &Lower<'_>, p: &str) -> Result<Vec<usize>, Diagnostic> {
        let s = self.shape(l, p)?;
        if s.iter().any(|&d| d < 0) {
            let a = self.req(l, p)?;
            return Err(l.err(Stage::Type, &a.span, format!("`{p}` must not have negative sizes, found {s:?}")));
        }
        Ok(s.into_iter().map(|d| d as usize).collect())
    }

    fn span_of(&self, p: &str) -> Span {
        self.opt(p).map_or(self.span.clone(), |a| a.span.clone())
    }
}

/// Resolves an `axis` argument against `x`: integers (negative from the
/// end), dimension names (the axis of `x` with that name or, if `x` has no
/// names, the one axis of that size), or a tuple of those. `None` = all.
fn axes(l: &Lower<'_>, x: Value, a: Option<&ArgVal>) -> Result<Vec<usize>, Diagnostic> {
    let ty = l.ty(x);
    let r = ty.rank();
    let Some(a) = a else { return Ok((0..r).collect()) };
    let items: Vec<Val> = match &a.val {
        Val::Tuple(t) => t.to_vec(),
        Val::None => return Ok((0..r).collect()),
        other => vec![other.clone()],
    };
    let mut out = Vec::new();
    for v in items {
        let ax = match &v {
            Val::Dim(name, size) => {
                let by_label = l.labels(x).and_then(|ls| ls.iter().position(|n| n.as_deref() == Some(&**name)));
                match by_label {
                    Some(i) => i,
                    None => {
                        let hits: Vec<usize> = (0..r).filter(|&i| ty.shape[i] == *size).collect();
                        match hits.as_slice() {
                            [i] => *i,
                            [] => {
                                return Err(l.err(
                                    Stage::Type,
                                    &a.span,
                                    format!("dimension `{name}` (= {size}) is not an axis of this value ({ty})"),
                                ))
                            }
                            _ => {
                                return Err(l
                                    .err(
                                        Stage::Type,
                                        &a.span,
                                        format!("dimension `{name}` (= {size}) matches several axes of {ty}"),
                                    )
                                    .with_note("help: give the axis as an integer"))
                            }
                        }
                    }
                }
            }
            v => match static_int(v) {
                Some(k) => {
                    let k2 = if k < 0 { k + r as i64 } else { k };
                    if k2 < 0 || k2 >= r as i64 {
                        return Err(l.err(
                            Stage::Type,
                            &a.span,
                            format!("axis {k} is out of range for a value of rank {r} ({ty})"),
                        ));
                    }
                    k2 as usize
                }
                None => {
                    return Err(l.err(
                        Stage::Type,
                        &a.span,
                        format!("an axis must be an integer or a dimension name, found {}", v.describe()),
                    ))
                }
            },
        };
        if out.contains(&ax) {
            return Err(l.err(Stage::Type, &a.span, format!("axis {ax} is given twice")));
        }
        out.push(ax);
    }
    Ok(out)
}

fn one_axis(l: &Lower<'_>, x: Value, a: Option<&ArgVal>, default_last: bool, span: &Span) -> Result<usize, Diagnostic> {
    let r = l.ty(x).rank();
    match a {
        None if default_last => {
            if r == 0 {
                return Err(l.err(Stage::Type, span, "needs a value with at least one axis"));
            }
            Ok(r - 1)
        }
        _ => {
            let ax = axes(l, x, a)?;
            match ax.as_slice() {
                [k] => Ok(*k),
                _ => Err(l.err(Stage::Type, span, "needs exactly one axis")),
            }
        }
    }
}

fn tensors_of(l: &mut Lower<'_>, a: &ArgVal) -> Result<Vec<Value>, Diagnostic> {
    match &a.val {
        Val::Tuple(items) => {
            let first_t = items.iter().find_map(|v| if let Val::T(t) = v { Some(*t) } else { None });
            let dt = match first_t {
                Some(t) => {
                    let v = l.import(t);
                    l.ty(v).dtype
                }
                None => DType::F32,
            };
            items.iter().map(|v| l.tensor_as(v, dt, &a.span)).collect()
        }
        other => Err(l
            .err(Stage::Type, &a.span, format!("expected a tuple of tensors, found {}", other.describe()))
            .with_note("help: write `concat((a, b), axis=0)`")),
    }
}

/// `stack`/`concat` of number literals and static arrays only: a static
/// array, so its dtype comes from its context like `[10.0, 0.0]`'s
/// (`x * stack((10.0, 0.0))` is f64 next to an f64 `x`, not an f32 tensor).
/// `None` when an item is not static or the shapes do not fit (the tensor
/// path then reports it).
fn static_join(items: &[Val], stack: bool, axis: i64) -> Option<Val> {
    let mut parts: Vec<(Vec<usize>, Rc<Vec<f64>>, ArrKind)> = Vec::new();
    for v in items {
        parts.push(match v {
            Val::Const(c) => {
                let kind = match c {
                    Const::Bool(_) => ArrKind::Bool,
                    Const::Int(_) => ArrKind::Int,
                    Const::Float(_) => ArrKind::Float,
                };
                (Vec::new(), Rc::new(vec![c.as_f64()]), kind)
            }
            Val::Array { shape, data, kind } => (shape.clone(), data.clone(), *kind),
            _ => return None,
        });
    }
    let first = parts.first()?.0.clone();
    let rank = first.len() + usize::from(stack);
    let k = if axis < 0 { axis + rank as i64 } else { axis };
    if k < 0 || k as usize >= rank {
        return None;
    }
    let k = k as usize;
    if stack {
        if parts.iter().any(|p| p.0 != first) {
            return None;
        }
        for p in &mut parts {
            p.0.insert(k, 1);
        }
    } else if parts
        .iter()
        .any(|p| p.0.len() != first.len() || p.0.iter().zip(&first).enumerate().any(|(i, (a, b))| i != k && a != b))
    {
        return None;
    }
    let mut shape = parts[0].0.clone();
    shape[k] = parts.iter().map(|p| p.0[k]).sum();
    let outer: usize = shape[..k].iter().product();
    let mut data = Vec::with_capacity(shape.iter().product());
    for o in 0..outer {
        for (s, d, _) in &parts {
            let inner: usize = s[k..].iter().product();
            data.extend_from_slice(&d[o * inner..(o + 1) * inner]);
        }
    }
    let kind = parts.iter().map(|p| p.2).max()?;
    Some(Val::Array { shape, data: Rc::new(data), kind })
}

fn out(l: &Lower<'_>, v: Value) -> Val {
    Val::T(Tv { level: l.level(), v })
}

/// Evaluates a float math builtin on a number literal while compiling, so
/// `x + log(2.0)` stays an untyped constant that takes the dtype of its
/// context (f64 next to an f64 `x`) instead of becoming an f32 tensor.
fn fold_const(name: &str, args: &[ArgVal]) -> Option<Val> {
    let [ArgVal { name: None, val: Val::Const(c @ (Const::Int(_) | Const::Float(_))), .. }] = args else {
        return None;
    };
    let x = c.as_f64();
    let y = match name {
        "exp" => x.exp(),
        "log" => x.ln(),
        "tanh" => x.tanh(),
        "sin" => x.sin(),
        "cos" => x.cos(),
        "tan" => x.tan(),
        "sqrt" => x.sqrt(),
        "rsqrt" => 1.0 / x.sqrt(),
        "expm1" => x.exp_m1(),
        "log1p" => x.ln_1p(),
        "sigmoid" | "logistic" => 1.0 / (1.0 + (-x).exp()),
        "reciprocal" => 1.0 / x,
        _ => return None,
    };
    Some(Val::Const(Const::Float(y)))
}

/// The `ord` of `norm`: `none`, `1`, `2`, `"fro"`, `"inf"`, `"-inf"` (or an
/// infinite number known while compiling).
fn norm_ord(l: &Lower<'_>, a: &A) -> Result<c::decomp::NormOrd, Diagnostic> {
    use c::decomp::NormOrd;
    let Some(o) = a.opt("ord") else { return Ok(NormOrd::Default) };
    let bad = || {
        l.err(
            Stage::Type,
            &o.span,
            format!("`ord` of `norm` must be none, 1, 2, \"fro\", \"inf\" or \"-inf\", found {}", o.val.describe()),
        )
    };
    match &o.val {
        Val::None => Ok(NormOrd::Default),
        Val::Str(s) => match &**s {
            "fro" => Ok(NormOrd::Fro),
            "inf" => Ok(NormOrd::Inf),
            "-inf" => Ok(NormOrd::NegInf),
            _ => Err(bad()),
        },
        v => match super::expr::static_scalar(v).map(Const::as_f64) {
            Some(1.0) => Ok(NormOrd::One),
            Some(2.0) => Ok(NormOrd::Two),
            Some(f64::INFINITY) => Ok(NormOrd::Inf),
            Some(f64::NEG_INFINITY) => Ok(NormOrd::NegInf),
            _ => Err(bad()),
        },
    }
}

/// Calls builtin `name`.
pub fn call(l: &mut Lower<'_>, name: &str, args: Vec<ArgVal>, span: &Span) -> Result<Val, Diagnostic> {
    if let Some(v) = fold_const(name, &args) {
        return Ok(v);
    }
    let a = A::new(l, name, args, span)?;
    l.set_span(span);
    macro_rules! ir {
        ($e:expr) => {{
            let r = $e;
            l.ir(r, span)?
        }};
    }
    let v: Value = match name {
        "exp" | "log" | "tanh" | "sin" | "cos" | "tan" | "sqrt" | "rsqrt" | "expm1" | "log1p" | "erf" | "sigmoid"
        | "logistic" | "gelu" | "silu" | "softplus" | "log_sigmoid" | "reciprocal" => {
            let x = a.t(l, "x", true)?;
            let t = l.ty(x);
            if !t.dtype.is_float() {
                return Err(l
                    .err(Stage::Type, &a.span_of("x"), format!("`{name}` needs a floating-point value, found {t}"))
                    .with_note("help: convert with `cast(x, f32)`"));
            }
            let b = l.b();
            match name {
                "exp" => ir!(b.exp(x)),
                "log" => ir!(b.log(x)),
                "tanh" => ir!(b.tanh(x)),
                "sin" => ir!(b.sin(x)),
                "cos" => ir!(b.cos(x)),
                "tan" => ir!(b.tan(x)),
                "sqrt" => ir!(b.sqrt(x)),
                "rsqrt" => ir!(b.rsqrt(x)),
                "expm1" => ir!(b.expm1(x)),
                "log1p" => ir!(b.log1p(x)),
                "erf" => ir!(b.erf(x)),
                "sigmoid" | "logistic" => ir!(c::math::sigmoid(b, x)),
                "gelu" => {
                    let approx = a.flag(l, "approximate")?;
                    ir!(c::math::gelu(l.b(), x, approx))
                }
                "silu" => ir!(c::math::silu(b, x)),
                "softplus" => ir!(c::math::softplus(b, x)),
                "log_sigmoid" => ir!(c::math::log_sigmoid(b, x)),
                _ => ir!(c::math::reciprocal(b, x)),
            }
        }
        "relu" | "abs" | "sign" | "floor" | "ceil" | "round" | "square" => {
            let x = a.t(l, "x", false)?;
            let b = l.b();
            match name {
                "relu" => ir!(c::math::relu(b, x)),
                "abs" => ir!(b.abs(x)),
                "sign" => ir!(b.sign(x)),
                "floor" => ir!(b.floor(x)),
                "ceil" => ir!(b.ceil(x)),
                "round" => ir!(b.round(x)),
                _ => ir!(c::math::square(b, x)),
            }
        }
        "maximum" | "minimum" | "pow" | "atan2" => {
            let (p, q) = if name == "atan2" { ("y", "x") } else { ("x", "y") };
            let (xa, ya) = (a.req(l, p)?.clone(), a.req(l, q)?.clone());
            let (x, y) = l.unify(&xa.val, &ya.val, span)?;
            let op = match name {
                "maximum" => Binary::Max,
                "minimum" => Binary::Min,
                "pow" => Binary::Pow,
                _ => Binary::Atan2,
            };
            ir!(c::broadcast::binary(l.b(), op, x, y))
        }
        "where" => {
            let cnd = a.t(l, "cond", false)?;
            let (xa, ya) = (a.req(l, "x")?.clone(), a.req(l, "y")?.clone());
            let (x, y) = l.unify(&xa.val, &ya.val, span)?;
            ir!(c::shape::where_(l.b(), cnd, x, y))
        }
        "clip" => {
            let x = a.t(l, "x", false)?;
            let dt = l.ty(x).dtype;
            let lo = a.req(l, "lo")?.clone();
            let hi = a.req(l, "hi")?.clone();
            let lo = l.tensor_as(&lo.val, dt, &lo.span)?;
            let hi = l.tensor_as(&hi.val, dt, &hi.span)?;
            ir!(c::math::clamp_tensor(l.b(), x, lo, hi))
        }
        "stop_gradient" => {
            let x = a.t(l, "x", false)?;
            ir!(l.b().stop_gradient(x))
        }
        "cast" => {
            let x = a.t(l, "x", false)?;
            let dt = match a.opt("dtype") {
                None => return Err(l.err(Stage::Type, span, "`cast` needs a dtype: `cast(x, f64)`")),
                Some(_) => a.dtype(l, "dtype", DType::F32)?,
            };
            ir!(l.b().convert(x, dt))
        }
        "sum" | "mean" | "max" | "min" | "prod" | "logsumexp" | "var" | "std" => {
            let x = a.t(l, "x", true)?;
            let ax = axes(l, x, a.opt("axis"))?;
            let kd = a.flag(l, "keepdims")?;
            if matches!(name, "mean" | "logsumexp" | "var" | "std") && !l.ty(x).dtype.is_float() {
                let t = l.ty(x);
                return Err(l.err(
                    Stage::Type,
                    &a.span_of("x"),
                    format!("`{name}` needs a floating-point value, found {t}"),
                ));
            }
            let b = l.b();
            match name {
                "sum" => ir!(c::reduce::sum(b, x, &ax, kd)),
                "mean" => ir!(c::reduce::mean(b, x, &ax, kd)),
                "max" => ir!(c::reduce::max(b, x, &ax, kd)),
                "min" => ir!(c::reduce::min(b, x, &ax, kd)),
                "prod" => ir!(c::reduce::prod(b, x, &ax, kd)),
                "logsumexp" => ir!(c::reduce::logsumexp(b, x, &ax, kd)),
                _ => {
                    let ddof = a.int(l, "ddof", Some(0))?.max(0) as usize;
                    let b = l.b();
                    if name == "var" {
                        ir!(c::reduce::var(b, x, &ax, ddof, kd))
                    } else {
                        ir!(c::reduce::std(b, x, &ax, ddof, kd))
                    }
                }
            }
        }
        "argmax" | "argmin" => {
            let x = a.t(l, "x", false)?;
            let kd = a.flag(l, "keepdims")?;
            let (x, ax) = if a.opt("axis").is_none() {
                let n = l.ty(x).numel();
                (ir!(l.b().reshape(x, &[n])), 0)
            } else {
                let ax = one_axis(l, x, a.opt("axis"), false, span)?;
                (x, ax)
            };
            let b = l.b();
            if name == "argmax" {
                ir!(c::reduce::argmax(b, x, ax, kd, DType::I32))
            } else {
                ir!(c::reduce::argmin(b, x, ax, kd, DType::I32))
            }
        }
        "softmax" | "log_softmax" => {
            let x = a.t(l, "x", true)?;
            let ax = one_axis(l, x, a.opt("axis"), true, span)?;
            if name == "softmax" {
                ir!(c::reduce::softmax(l.b(), x, ax))
            } else {
                ir!(c::reduce::log_softmax(l.b(), x, ax))
            }
        }
        "cumsum" => {
            let x = a.t(l, "x", false)?;
            let ax = one_axis(l, x, a.opt("axis"), true, span)?;
            let rev = a.flag(l, "reverse")?;
            ir!(l.b().cumsum(x, ax, rev))
        }
        "matmul" => {
            let (xa, ya) = (a.req(l, "x")?.clone(), a.req(l, "y")?.clone());
            return l.binary(crate::ast::BinOp::MatMul, xa.val, ya.val, &xa.span, &ya.span, span);
        }
        "einsum" => {
            let spec = match &a.req(l, "spec")?.val {
                Val::Str(s) => s.clone(),
                other => {
                    return Err(l.err(
                        Stage::Type,
                        &a.span_of("spec"),
                        format!("`einsum` needs a spec string first, found {}", other.describe()),
                    ))
                }
            };
            let mut ops = Vec::new();
            for o in &a.rest {
                ops.push(l.tensor_as(&o.val, DType::F32, &o.span).or_else(|_| l.tensor(&o.val, &o.span))?);
            }
            ir!(c::linalg::einsum(l.b(), &spec, &ops))
        }
        "cholesky" | "inv" | "det" | "diagonal" | "trace" | "tril" | "triu" | "diag" | "norm" => {
            let p = if name == "diag" { "v" } else { "x" };
            // The float-only ones make a literal f32; the structural ones keep its dtype.
            let x = a.t(l, p, matches!(name, "cholesky" | "inv" | "det" | "norm"))?;
            let b = l.b();
            match name {
                "cholesky" => ir!(c::decomp::cholesky(b, x)),
                "inv" => ir!(c::decomp::inv(b, x)),
                "det" => ir!(c::decomp::det(b, x)),
                "diagonal" => ir!(c::decomp::diagonal(b, x)),
                "trace" => ir!(c::decomp::trace(b, x)),
                "diag" => {
                    let t = l.ty(x);
                    if t.rank() != 1 {
                        return Err(l
                            .err(Stage::Type, &a.span_of("v"), format!("`diag` needs a vector, found {t}"))
                            .with_note(
                                "help: `diagonal(x)` takes the diagonal of a matrix; `vmap(diag)` builds a batch",
                            ));
                    }
                    ir!(c::decomp::diag(l.b(), x))
                }
                "norm" => {
                    let ord = norm_ord(l, &a)?;
                    ir!(c::decomp::norm(l.b(), x, ord))
                }
                _ => {
                    let k = a.int(l, "k", Some(0))?;
                    let b = l.b();
                    if name == "tril" {
                        ir!(c::decomp::tril(b, x, k))
                    } else {
                        ir!(c::decomp::triu(b, x, k))
                    }
                }
            }
        }
        "lu" | "slogdet" => {
            let x = a.t(l, "x", true)?;
            let vals: Vec<Value> = if name == "lu" {
                let (lu, piv, perm) = ir!(c::decomp::lu(l.b(), x));
                vec![lu, piv, perm]
            } else {
                let (sign, logabs) = ir!(c::decomp::slogdet(l.b(), x));
                vec![sign, logabs]
            };
            return Ok(Val::tuple(vals.into_iter().map(|v| out(l, v)).collect()));
        }
        "triangular_solve" | "cho_solve" | "solve" | "outer" | "kron" => {
            let (p, q) = match name {
                "triangular_solve" | "solve" => ("a", "b"),
                "cho_solve" => ("l", "b"),
                _ => ("x", "y"),
            };
            let (xa, ya) = (a.req(l, p)?.clone(), a.req(l, q)?.clone());
            let float = !matches!(name, "outer" | "kron");
            let (x, y) = if !float || matches!(xa.val, Val::T(_)) || matches!(ya.val, Val::T(_)) {
                l.unify(&xa.val, &ya.val, span)?
            } else {
                // Two literals: a float function makes them f32 (like `a.t(.., true)`).
                (l.tensor_as(&xa.val, DType::F32, &xa.span)?, l.tensor_as(&ya.val, DType::F32, &ya.span)?)
            };
            match name {
                "triangular_solve" => {
                    let lower = a.flag_or(l, "lower", true)?;
                    let left = a.flag_or(l, "left", true)?;
                    let tr = a.flag(l, "transpose_a")?;
                    let unit = a.flag(l, "unit_diagonal")?;
                    ir!(c::decomp::triangular_solve(l.b(), x, y, left, lower, tr, unit))
                }
                "cho_solve" => ir!(c::decomp::cho_solve(l.b(), x, y)),
                "solve" => ir!(c::decomp::solve(l.b(), x, y)),
                "outer" => ir!(c::decomp::outer(l.b(), x, y)),
                _ => ir!(c::decomp::kron(l.b(), x, y)),
            }
        }
        "eye" => {
            let n = a.int(l, "n", None)?;
            if n < 0 {
                return Err(l.err(Stage::Type, &a.span_of("n"), "`n` must not be negative"));
            }
            let dt = a.dtype(l, "dtype", DType::F32)?;
            ir!(c::decomp::eye(l.b(), n as usize, dt))
        }
        "reshape" => {
            let x = a.t(l, "x", false)?;
            let s = a.shape(l, "shape")?;
            ir!(c::shape::reshape(l.b(), x, &s))
        }
        "transpose" => {
            let x = a.t(l, "x", false)?;
            match a.opt("perm") {
                None => ir!(c::shape::transpose(l.b(), x, None)),
                Some(_) => {
                    let p = a.ushape(l, "perm")?;
                    ir!(c::shape::transpose(l.b(), x, Some(&p)))
                }
            }
        }
        "concat" | "stack" => {
            let xs_arg = a.req(l, "xs")?.clone();
            if let Val::Tuple(items) = &xs_arg.val {
                let k = a.int(l, "axis", Some(0))?;
                if let Some(v) = static_join(items, name == "stack", k) {
                    return Ok(v);
                }
            }
            let xs = tensors_of(l, &xs_arg)?;
            let r = l.ty(xs[0]).rank() + usize::from(name == "stack");
            let k = a.int(l, "axis", Some(0))?;
            let k = if k < 0 { k + r as i64 } else { k };
            if k < 0 || k as usize >= r.max(1) {
                return Err(l.err(Stage::Type, &a.span_of("axis"), format!("axis {k} is out of range for rank {r}")));
            }
            l.set_span(span);
            if name == "concat" {
                ir!(c::shape::concat(l.b(), &xs, k as usize))
            } else {
                ir!(c::shape::stack(l.b(), &xs, k as usize))
            }
        }
        "expand_dims" => {
            let x = a.t(l, "x", false)?;
            let r = l.ty(x).rank() as i64 + 1;
            let k = a.int(l, "axis", None)?;
            let k = if k < 0 { k + r } else { k };
            if k < 0 || k >= r {
                return Err(l.err(
                    Stage::Type,
                    &a.span_of("axis"),
                    format!("axis out of range for the result rank {r}"),
                ));
            }
            ir!(c::shape::expand_dims(l.b(), x, &[k as usize]))
        }
        "squeeze" => {
            let x = a.t(l, "x", false)?;
            match a.opt("axis") {
                None => ir!(c::shape::squeeze_all(l.b(), x)),
                Some(_) => {
                    let ax = axes(l, x, a.opt("axis"))?;
                    ir!(c::shape::squeeze(l.b(), x, &ax))
                }
            }
        }
        "flatten" => {
            let x = a.t(l, "x", false)?;
            let n = l.ty(x).numel();
            ir!(l.b().reshape(x, &[n]))
        }
        "broadcast_to" => {
            let x = a.t(l, "x", false)?;
            let s = a.ushape(l, "shape")?;
            ir!(c::shape::broadcast_to(l.b(), x, &s))
        }
        "flip" => {
            let x = a.t(l, "x", false)?;
            let ax = axes(l, x, a.opt("axis"))?;
            ir!(l.b().reverse(x, &ax))
        }
        "gather" | "take" => {
            let (x, i) = if name == "gather" {
                (a.t(l, "table", false)?, a.t(l, "idx", false)?)
            } else {
                (a.t(l, "x", false)?, a.t(l, "idx", false)?)
            };
            let ax =
                if name == "take" && a.opt("axis").is_some() { one_axis(l, x, a.opt("axis"), false, span)? } else { 0 };
            if l.ty(x).rank() == 0 {
                return Err(l.err(Stage::Type, span, format!("`{name}` needs a tensor with at least one axis")));
            }
            ir!(c::shape::take(l.b(), x, i, ax))
        }
        "one_hot" => {
            let ids = a.t(l, "labels", false)?;
            let n = a.int(l, "n", None)?;
            if n < 0 {
                return Err(l.err(Stage::Type, &a.span_of("n"), "`n` must not be negative"));
            }
            let dt = a.dtype(l, "dtype", DType::F32)?;
            let r = l.ty(ids).rank();
            ir!(c::embed::one_hot(l.b(), ids, n as usize, dt, r))
        }
        "size" => {
            let x = a.t(l, "x", false)?;
            let t = l.ty(x);
            return Ok(match a.opt("axis") {
                None => Val::Const(Const::Int(t.numel() as i64)),
                Some(_) => {
                    let k = one_axis(l, x, a.opt("axis"), false, span)?;
                    Val::Const(Const::Int(t.shape[k] as i64))
                }
            });
        }
        "zeros" | "ones" | "full" => {
            let s = a.ushape(l, "shape")?;
            let value = match name {
                "zeros" => 0.0,
                "ones" => 1.0,
                _ => a.num(l, "value", f64::NAN).and_then(|v| {
                    if v.is_nan() && a.opt("value").is_none() {
                        Err(l.err(Stage::Type, span, "`full` needs a value"))
                    } else {
                        Ok(v)
                    }
                })?,
            };
            let dt = a.dtype(l, "dtype", DType::F32)?;
            ir!(l.b().full(value, &TensorType::new(dt, s)))
        }
        "zeros_like" | "ones_like" => {
            let x = a.t(l, "x", false)?;
            let t = l.ty(x);
            ir!(l.b().full(if name == "zeros_like" { 0.0 } else { 1.0 }, &t))
        }
        "arange" => {
            let all_int =
                ["start", "stop", "step"].iter().all(|p| a.opt(p).is_none_or(|x| static_int(&x.val).is_some()));
            let (start, stop) = match a.opt("stop") {
                None => (0.0, a.num(l, "start", f64::NAN)?),
                Some(_) => (a.num(l, "start", 0.0)?, a.num(l, "stop", 0.0)?),
            };
            let step = a.num(l, "step", 1.0)?;
            let dt = a.dtype(l, "dtype", if all_int { DType::I32 } else { DType::F32 })?;
            ir!(c::shape::arange(l.b(), start, stop, step, dt))
        }
        "linspace" => {
            let (s0, s1) = (a.num(l, "start", 0.0)?, a.num(l, "stop", 0.0)?);
            let n = a.int(l, "num", Some(50))?.max(0) as usize;
            let dt = a.dtype(l, "dtype", DType::F32)?;
            ir!(c::shape::linspace(l.b(), s0, s1, n, true, dt))
        }
        "conv2d" => {
            let x = a.t(l, "x", true)?;
            let w = a.t(l, "w", true)?;
            let bias = match a.opt("bias") {
                Some(bv) if !matches!(bv.val, Val::None) => Some(a.t(l, "bias", true)?),
                _ => None,
            };
            let st = a.int(l, "stride", Some(1))?.max(1) as usize;
            let pd = a.int(l, "padding", Some(0))?.max(0) as usize;
            let opts = ConvOpts::new().stride(st).padding(pd);
            ir!(c::conv::conv2d(l.b(), x, w, bias, &opts))
        }
        "max_pool2d" | "avg_pool2d" => {
            let x = a.t(l, "x", true)?;
            let k = a.int(l, "k", None)?.max(1) as usize;
            let mut opts = PoolOpts::new();
            if a.opt("stride").is_some() {
                opts = opts.stride(a.int(l, "stride", None)?.max(1) as usize);
            }
            let kd = c::conv::PerDim::from(k);
            if name == "max_pool2d" {
                ir!(c::pool::max_pool2d(l.b(), x, &kd, &opts))
            } else {
                ir!(c::pool::avg_pool2d(l.b(), x, &kd, &opts))
            }
        }
        "layer_norm" => {
            let x = a.t(l, "x", true)?;
            let g = a.t(l, "gamma", true)?;
            let beta = match a.opt("beta") {
                Some(bv) if !matches!(bv.val, Val::None) => Some(a.t(l, "beta", true)?),
                _ => None,
            };
            let eps = a.num(l, "eps", 1e-5)?;
            ir!(c::norm::layer_norm(l.b(), x, g, beta, eps))
        }
        "cross_entropy" => {
            let x = a.t(l, "logits", true)?;
            let y = a.t(l, "labels", false)?;
            let r = l.ty(x).rank();
            if r == 0 {
                return Err(l.err(Stage::Type, span, "`cross_entropy` needs logits with a class axis"));
            }
            ir!(c::loss::cross_entropy(l.b(), x, y, r - 1))
        }
        "mse" => {
            let (xa, ya) = (a.req(l, "pred")?.clone(), a.req(l, "target")?.clone());
            let (x, y) = l.unify(&xa.val, &ya.val, span)?;
            ir!(c::loss::mse(l.b(), x, y))
        }
        "key" => {
            let s = a.req(l, "seed")?.clone();
            match static_int(&s.val) {
                Some(k) => ir!(c::random::key(l.b(), k)),
                None => {
                    let t = l.tensor(&s.val, &s.span)?;
                    ir!(c::random::key_from(l.b(), t))
                }
            }
        }
        "split" => {
            let k = a.t(l, "key", false)?;
            match a.opt("n") {
                None => {
                    let ks = ir!(c::random::split_keys(l.b(), k, 2));
                    return Ok(Val::tuple(ks.into_iter().map(|v| out(l, v)).collect()));
                }
                Some(_) => {
                    let n = a.int(l, "n", None)?.max(0) as usize;
                    ir!(c::random::split(l.b(), k, n))
                }
            }
        }
        "uniform" | "normal" => {
            let k = a.t(l, "key", false)?;
            let s = a.ushape(l, "shape")?;
            let dt = a.dtype(l, "dtype", DType::F32)?;
            if name == "uniform" {
                let (lo, hi) = (a.num(l, "lo", 0.0)?, a.num(l, "hi", 1.0)?);
                ir!(c::random::uniform(l.b(), k, &s, dt, lo, hi))
            } else {
                ir!(c::random::normal(l.b(), k, &s, dt))
            }
        }
        "bernoulli" => {
            let k = a.t(l, "key", false)?;
            let p = a.num(l, "p", 0.5)?;
            let s = a.ushape(l, "shape")?;
            ir!(c::random::bernoulli(l.b(), k, p, &s))
        }
        "scan" => {
            let (f, i, x) = (a.req(l, "f")?.clone(), a.req(l, "init")?.clone(), a.req(l, "xs")?.clone());
            return super::control::scan(l, &f, &i, &x, span);
        }
        "fori" => {
            let (n, f, i) = (a.req(l, "n")?.clone(), a.req(l, "f")?.clone(), a.req(l, "init")?.clone());
            return super::control::fori(l, &n, &f, &i, span);
        }
        "while" => {
            let (c, f, i) = (a.req(l, "cond")?.clone(), a.req(l, "body")?.clone(), a.req(l, "init")?.clone());
            return super::control::while_loop(l, &c, &f, &i, span);
        }
        "tabulate" => {
            let n = a.int(l, "n", None)?;
            if n < 0 {
                return Err(l.err(Stage::Type, &a.span_of("n"), "`n` must not be negative"));
            }
            let f = match &a.req(l, "f")?.val {
                Val::F(f) => f.clone(),
                other => {
                    return Err(l.err(
                        Stage::Type,
                        &a.span_of("f"),
                        format!("`tabulate` needs a function `fn (i) -> ...`, found {}", other.describe()),
                    ))
                }
            };
            let i = ir!(l.b().iota(DType::I32, &[n as usize], 0));
            let tf = TransformFn {
                kind: TransformKind::Vmap,
                inner: f,
                wrt: WrtSpec::All,
                axis: Some(0),
                in_axes: None,
                out_axes: None,
                policy: Default::default(),
                span: span.clone(),
            };
            let iv = out(l, i);
            return l.call_fn(&FnVal::Transform(tf), vec![ArgVal { name: None, val: iv, span: a.span_of("n") }], span);
        }
        other => return Err(l.err(Stage::Resolve, span, format!("internal error: builtin `{other}` has no lowering"))),
    };
    Ok(out(l, v))
}
