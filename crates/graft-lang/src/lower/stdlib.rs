//! The standard library: builtin functions by their jax.numpy names, mapped
//! onto graft-core composites and builder methods (docs/builtins.md is the
//! reference; the constant folding of literals is in `fold.rs`).
//!
//! Conventions: every axis argument is resolved one way ([`Axes`]): an
//! integer (negative from the end), a dimension name (the axis carrying it,
//! else the one axis of its size), or for reductions a tuple of those; an
//! explicit `none` means the same as leaving an optional argument out where
//! [`none_is_default`] says so. Reductions reduce everything without an
//! axis; `softmax`/`log_softmax`/`cumsum` default to the last axis;
//! creation and random functions default to f32; `split(k)` returns a pair
//! of keys; `gather(table, idx)` takes rows like `jnp.take`; `conv2d` is
//! NCHW/OIHW cross-correlation; `max_pool2d(x, k)` uses stride k.
//! `tabulate(n, f)` is `vmap(f)` over `arange(n)` (no loop). Options out of
//! range are errors, never clamped, and every error names the builtin
//! ([`call`]).

use super::at::GetMode;
use super::expr::static_int;
use super::value::{ArrKind, Const, FnVal, TransformFn, Tv, Val, WrtSpec};
use super::{ArgVal, Lower};
use crate::ast::{Span, TransformKind};
use crate::diag::{Diagnostic, Stage};
use graft_core::composite::{self as c, conv::ConvOpts, pool::PoolOpts};
use graft_core::ops::binary::Binary;
use graft_core::ops::index::IndexMode;
use graft_core::ops::remat::Remat;
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
    ("leaky_relu", &["x", "negative_slope"]),
    ("elu", &["x", "alpha"]),
    ("isnan", &["x"]),
    ("isinf", &["x"]),
    ("isfinite", &["x"]),
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
    ("fma", &["x", "y", "z"]),
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
    ("sort", &["x", "axis"]),
    ("argsort", &["x", "axis"]),
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
    ("qr", &["x", "mode"]),
    ("eigh", &["x", "symmetrize_input"]),
    ("eigvalsh", &["x"]),
    ("svd", &["x", "full_matrices", "compute_uv"]),
    ("svdvals", &["x"]),
    ("pinv", &["x", "rtol"]),
    ("lstsq", &["a", "b", "rcond"]),
    ("matrix_norm", &["x", "ord"]),
    ("matrix_rank", &["x", "rtol"]),
    ("cond", &["x", "p"]),
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
    ("gather", &["table", "idx", "mode", "fill_value"]),
    ("take", &["x", "idx", "axis", "mode", "fill_value"]),
    ("dynamic_slice", &["x", "starts", "sizes"]),
    ("dynamic_update_slice", &["x", "update", "starts"]),
    ("scatter_add", &["x", "indices", "updates"]),
    ("one_hot", &["labels", "n", "dtype"]),
    ("size", &["x", "axis"]),
    ("ndim", &["x"]),
    ("shape", &["x"]),
    ("tile", &["x", "reps"]),
    ("repeat", &["x", "repeats", "axis"]),
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
    ("conv_transpose2d", &["x", "w", "bias", "stride", "padding", "output_padding"]),
    ("max_pool2d", &["x", "k", "stride", "padding"]),
    ("avg_pool2d", &["x", "k", "stride", "padding"]),
    ("layer_norm", &["x", "gamma", "beta", "eps"]),
    ("batch_norm", &["x", "gamma", "beta", "eps"]),
    ("group_norm", &["x", "num_groups", "gamma", "beta", "eps"]),
    ("dropout", &["key", "x", "rate", "training"]),
    ("attention", &["q", "k", "v", "causal", "mask", "scale"]),
    ("multi_head_attention", &["q", "k", "v", "wq", "wk", "wv", "wo", "heads", "causal", "mask"]),
    ("cross_entropy", &["logits", "labels"]),
    ("mse", &["pred", "target"]),
    // random numbers from explicit keys
    ("key", &["seed"]),
    ("split", &["key", "n"]),
    ("fold_in", &["key", "data"]),
    ("uniform", &["key", "shape", "lo", "hi", "dtype"]),
    ("normal", &["key", "shape", "dtype"]),
    ("bernoulli", &["key", "p", "shape"]),
    ("randint", &["key", "shape", "lo", "hi", "dtype"]),
    ("categorical", &["key", "logits", "axis"]),
    ("permutation", &["key", "x"]),
    // control flow
    ("tabulate", &["n", "f"]),
    ("scan", &["f", "init", "xs", "remat"]),
    ("fori", &["n", "f", "init", "remat"]),
    ("while", &["cond", "body", "init", "remat"]),
    // pytrees (tuples as containers of leaves; `lower/tree.rs`)
    ("tree_map", &["f", "*trees"]),
    ("tree_reduce", &["f", "tree", "init"]),
    ("tree_leaves", &["tree"]),
    // debugging
    ("debug_print", &["fmt", "*args"]),
    // collectives over a named axis (`vmap(f, axis_name=...)`, or the
    // processes of `mpirun`)
    ("psum", &["x", "axis_name"]),
    ("pmean", &["x", "axis_name"]),
    ("pmax", &["x", "axis_name"]),
    ("pmin", &["x", "axis_name"]),
    ("all_gather", &["x", "axis_name", "axis"]),
    ("psum_scatter", &["x", "axis_name", "scatter_dimension"]),
    ("ppermute", &["x", "axis_name", "perm"]),
    ("axis_index", &["axis_name"]),
];

/// The number of ranks an unbound axis name stands for while `check`ing.
const PLACEHOLDER_RANKS: usize = 19;

/// The axis a collective's `axis_name` names: the innermost enclosing
/// `vmap(.., axis_name=)` of that name, else a communicator bound to it in
/// this process (the MPI world of a distributed run).
fn named_axis(l: &mut Lower<'_>, a: &A) -> Result<graft_core::ops::collective::Axis, Diagnostic> {
    let arg = a.req(l, "axis_name")?.clone();
    let Val::Str(s) = &arg.val else {
        return Err(l.err(
            Stage::Type,
            &arg.span,
            format!("`axis_name` must be a string, found {}", arg.val.describe()),
        ));
    };
    let size = l.axes.iter().rev().find(|(n, _)| **n == **s).map(|(_, k)| *k);
    let size = size.or_else(|| graft_core::comm::lookup(s).map(|c| c.size()));
    // `check` lowers every def on its own, away from the vmap that will
    // bind the name: a placeholder size stands in, as for dimensions.
    let size = size.or(l.placeholder_sizes.then_some(PLACEHOLDER_RANKS));
    let Some(size) = size else {
        return Err(l.err(Stage::Type, &arg.span, format!("the axis name \"{s}\" is not bound here")).with_note(
            format!(
                "help: call this inside `vmap(f, axis_name=\"{s}\")`, or bind \"{s}\" to the processes of a distributed run (`mpirun -np N graft run ... --axis {s}`)"
            ),
        ));
    };
    l.axis_uses += 1;
    Ok(graft_core::ops::collective::Axis::new(s, size))
}

/// `ppermute`'s `perm`: a tuple of `(source, destination)` pairs of ranks.
fn perm_pairs(l: &Lower<'_>, a: &A, size: usize) -> Result<Vec<(usize, usize)>, Diagnostic> {
    let arg = a.req(l, "perm")?;
    let bad = || {
        l.err(
            Stage::Type,
            &arg.span,
            format!(
                "`perm` must be a tuple of (source, destination) pairs of ranks below {size}, found {}",
                arg.val.describe()
            ),
        )
    };
    let Val::Tuple(items) = &arg.val else { return Err(bad()) };
    let rank = |v: &Val| static_int(v).filter(|&k| k >= 0 && (k as usize) < size).map(|k| k as usize);
    items
        .iter()
        .map(|p| match p {
            Val::Tuple(two) if two.len() == 2 => rank(&two[0]).zip(rank(&two[1])).ok_or_else(bad),
            _ => Err(bad()),
        })
        .collect()
}

/// Named constants: numbers known while compiling, typed by their context
/// like a float literal (`pi * x` for an f32 `x` is f32). A local or a def
/// of the same name shadows them.
pub const CONSTANTS: &[(&str, f64)] = &[("pi", std::f64::consts::PI), ("inf", f64::INFINITY), ("nan", f64::NAN)];

/// The value of the named constant `name`, if it is one.
pub fn constant(name: &str) -> Option<f64> {
    CONSTANTS.iter().find(|(n, _)| *n == name).map(|&(_, v)| v)
}

pub fn is_builtin(name: &str) -> bool {
    BUILTINS.iter().any(|(n, _)| *n == name)
}

/// Every builtin name (for "did you mean" suggestions).
pub fn names() -> impl Iterator<Item = &'static str> {
    BUILTINS.iter().map(|(n, _)| *n)
}

/// Parameters for which an explicit `none` means the same as leaving the
/// argument out: every optional `axis` (as in jax.numpy, where `axis=None`
/// is the default spelled out) and the parameters whose default is `none`.
/// `expand_dims` needs its axis, and `concat`/`stack` take one integer axis
/// (`jnp.concatenate(axis=None)` flattens first, which graft does not do),
/// so an explicit `none` there is an error rather than a silent axis 0.
fn none_is_default(name: &str, p: &str) -> bool {
    match p {
        "axis" => !matches!(name, "expand_dims" | "concat" | "stack" | "sort" | "argsort"),
        _ => matches!(
            (name, p),
            ("transpose", "perm")
                | ("arange", "stop")
                | ("arange", "dtype")
                | ("split", "n")
                | ("conv2d", "bias")
                | ("layer_norm", "beta")
                | ("conv_transpose2d", "bias")
                | ("attention" | "multi_head_attention", "mask")
                | ("attention", "scale")
                | ("batch_norm", "gamma" | "beta")
                | ("group_norm", "gamma" | "beta")
                | (_, "remat")
                | ("pinv", "rtol")
                | ("lstsq", "rcond")
                | ("matrix_rank", "rtol")
                | ("cond", "p")
        ),
    }
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

    /// The argument of `p`, if given (an explicit `none` counts as not
    /// given where [`none_is_default`] says so).
    fn opt(&self, p: &str) -> Option<&ArgVal> {
        let a = self.slots[self.idx(p)].as_ref()?;
        if matches!(a.val, Val::None) && none_is_default(self.name, p) {
            return None;
        }
        Some(a)
    }

    fn missing(&self, l: &Lower<'_>, p: &str) -> Diagnostic {
        l.err(Stage::Type, &self.span, format!("`{}` needs the argument `{p}`", self.name))
            .with_note(format!("note: its parameters are {}", self.params.join(", ")))
    }

    fn req(&self, l: &Lower<'_>, p: &str) -> Result<&ArgVal, Diagnostic> {
        self.opt(p).ok_or_else(|| self.missing(l, p))
    }

    /// A tensor argument; literals become f32 when `float`, else their default.
    fn t(&self, l: &mut Lower<'_>, p: &str, float: bool) -> Result<Value, Diagnostic> {
        let a = self.req(l, p)?.clone();
        if float && !matches!(a.val, Val::T(_)) {
            return l.tensor_as(&a.val, DType::F32, &a.span);
        }
        l.tensor(&a.val, &a.span)
    }

    /// The float arguments `req` (required) and `opt` (optional) of one
    /// operation as tensors: literals take the dtype of the first tensor
    /// among them, as operands of a binary operator do (f32 when all are
    /// literals); tensors are left as they are (graft-core checks that they
    /// agree). Returns the required ones and the optional one if given.
    fn float_operands(
        &self,
        l: &mut Lower<'_>,
        req: [&str; 2],
        opt: &str,
    ) -> Result<(Value, Value, Option<Value>), Diagnostic> {
        for p in req {
            self.req(l, p)?;
        }
        let ps = [req[0], req[1], opt];
        let mut dt = DType::F32;
        for p in ps {
            if let Some(ArgVal { val: Val::T(tv), .. }) = self.opt(p) {
                let v = l.import(*tv);
                dt = l.ty(v).dtype;
                break;
            }
        }
        let mut out = Vec::new();
        for p in ps {
            out.push(match self.opt(p).cloned() {
                None => None,
                Some(a @ ArgVal { val: Val::T(_), .. }) => Some(l.tensor(&a.val, &a.span)?),
                Some(a) => Some(l.tensor_as(&a.val, dt, &a.span)?),
            });
        }
        let need = "internal error: required arguments were checked above";
        Ok((out[0].expect(need), out[1].expect(need), out[2]))
    }

    fn int(&self, l: &Lower<'_>, p: &str, default: Option<i64>) -> Result<i64, Diagnostic> {
        match self.opt(p) {
            None => default.ok_or_else(|| self.missing(l, p)),
            Some(a) => static_int(&a.val).ok_or_else(|| {
                l.err(
                    Stage::Type,
                    &a.span,
                    format!("`{p}` must be an integer known while compiling, found {}", a.val.describe()),
                )
            }),
        }
    }

    /// A static axis option (default 0) among `n` positions, negative
    /// counting from the end; out of range is an error at the argument.
    fn axis_or(&self, l: &Lower<'_>, p: &str, n: usize) -> Result<usize, Diagnostic> {
        let k = self.int(l, p, Some(0))?;
        let r = if k < 0 { k + n as i64 } else { k };
        if r < 0 || r >= n as i64 {
            return Err(l.err(
                Stage::Type,
                &self.span_of(p),
                format!("`{p}` must be in -{n} ..= {}, found {k}", n as i64 - 1),
            ));
        }
        Ok(r as usize)
    }

    /// An integer option that must be at least `min` (`stride >= 1`,
    /// `ddof >= 0`): other values are an error at the argument, never
    /// clamped.
    fn int_min(&self, l: &Lower<'_>, p: &str, default: Option<i64>, min: i64) -> Result<i64, Diagnostic> {
        let k = self.int(l, p, default)?;
        if k < min {
            return Err(l.err(Stage::Type, &self.span_of(p), format!("`{p}` must be an integer >= {min}, found {k}")));
        }
        Ok(k)
    }

    fn num(&self, l: &Lower<'_>, p: &str, default: Option<f64>) -> Result<f64, Diagnostic> {
        match self.opt(p) {
            None => default.ok_or_else(|| self.missing(l, p)),
            Some(a) => super::expr::static_scalar(&a.val).map(Const::as_f64).ok_or_else(|| {
                l.err(
                    Stage::Type,
                    &a.span,
                    format!("`{p}` must be a number known while compiling, found {}", a.val.describe()),
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

    /// A loop's `remat` option: `"off"` (the default: save every trip),
    /// `"sqrt"`, or an integer `k >= 1` (save the carry every `k` trips and
    /// recompute the trips in between during the reverse sweep).
    fn remat(&self, l: &Lower<'_>, p: &str) -> Result<Remat, Diagnostic> {
        let Some(a) = self.opt(p) else { return Ok(Remat::Off) };
        let bad = |found: String| {
            l.err(Stage::Type, &a.span, format!("`{p}` must be \"off\", \"sqrt\" or an integer >= 1, found {found}"))
        };
        match &a.val {
            Val::Str(s) => match &**s {
                "off" => Ok(Remat::Off),
                "sqrt" => Ok(Remat::Sqrt),
                other => Err(bad(format!("\"{other}\""))),
            },
            v => match static_int(v) {
                Some(k) if k >= 1 => Ok(Remat::Every(k as usize)),
                Some(k) => Err(bad(k.to_string())),
                None => Err(bad(v.describe())),
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
                    format!("expected a dtype (f16, f32, f64, i32, i64, u32, bool), found {}", other.describe()),
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

/// `mode` and `fill_value` of `gather`/`take`: `None` for `mode="clip"`
/// (the default), the fill value (0 unless given) for `mode="fill"`.
fn gather_mode(l: &Lower<'_>, a: &A) -> Result<Option<f64>, Diagnostic> {
    let fill = match a.opt("mode") {
        None => false,
        Some(m) => match &m.val {
            Val::Str(s) if &**s == "clip" => false,
            Val::Str(s) if &**s == "fill" => true,
            Val::Str(s) => {
                return Err(l.err(Stage::Type, &m.span, format!("`mode` must be \"clip\" or \"fill\", found \"{s}\"")))
            }
            other => {
                return Err(l.err(
                    Stage::Type,
                    &m.span,
                    format!("`mode` must be \"clip\" or \"fill\", found {}", other.describe()),
                ))
            }
        },
    };
    match (fill, a.opt("fill_value")) {
        (false, Some(f)) => Err(l
            .err(Stage::Type, &f.span, "`fill_value` applies only with `mode=\"fill\"`")
            .with_note(format!("help: write `{}(x, idx, mode=\"fill\", fill_value=...)`", a.name))),
        (false, None) => Ok(None),
        (true, _) => Ok(Some(a.num(l, "fill_value", Some(0.0))?)),
    }
}

/// The `starts` of `dynamic_slice`/`dynamic_update_slice`: one integer
/// (static or a run-time rank-0 i32/i64) per axis of `x`, a tuple or, for a
/// rank-1 `x`, one value. A negative start counts from the end once (`i + n`,
/// as JAX does); the primitive then clamps it so the block fits.
fn dyn_starts(l: &mut Lower<'_>, a: &A, x: Value) -> Result<Vec<Value>, Diagnostic> {
    let sa = a.req(l, "starts")?.clone();
    let xt = l.ty(x);
    let items: Vec<Val> = match &sa.val {
        Val::Tuple(t) => t.to_vec(),
        other => vec![other.clone()],
    };
    if items.len() != xt.rank() {
        return Err(l
            .err(Stage::Type, &sa.span, format!("`starts` needs one start per axis of x ({xt}), found {}", items.len()))
            .with_note("help: give a tuple of integers, e.g. `(i, 0)` for a rank-2 `x`"));
    }
    let mut out = Vec::new();
    for (d, v) in items.iter().enumerate() {
        let n = xt.shape[d] as i64;
        if let Some(k) = static_int(v) {
            let k = if k < 0 { k + n } else { k };
            let r = l.b().scalar(k as f64, DType::I32);
            out.push(l.ir(r, &sa.span)?);
            continue;
        }
        let bad = |l: &Lower<'_>, found: String| {
            l.err(Stage::Type, &sa.span, format!("start {d} must be an integer scalar, found {found}"))
        };
        let t = match v {
            Val::T(_) => l.tensor(v, &sa.span)?,
            other => return Err(bad(l, other.describe())),
        };
        let tt = l.ty(t);
        if !tt.dtype.is_int() || tt.rank() != 0 {
            return Err(bad(l, tt.to_string()));
        }
        let r = l.b().scalar(0.0, tt.dtype);
        let zero = l.ir(r, &sa.span)?;
        let r = l.b().scalar(n as f64, tt.dtype);
        let nn = l.ir(r, &sa.span)?;
        let r = l.b().lt(t, zero);
        let neg = l.ir(r, &sa.span)?;
        let r = l.b().add(t, nn);
        let w = l.ir(r, &sa.span)?;
        let r = l.b().select(neg, w, t);
        out.push(l.ir(r, &sa.span)?);
    }
    Ok(out)
}

/// What an axis is resolved against: the type of the value whose axes are
/// meant and the dimension names its axes carry.
struct Axes {
    ty: TensorType,
    labels: Option<Rc<Vec<Option<Rc<str>>>>>,
}

impl Axes {
    fn of(l: &Lower<'_>, x: Value) -> Axes {
        Axes { ty: l.ty(x), labels: l.labels(x) }
    }

    /// One item of an axis spec. Integers count from the end when negative
    /// and must lie in `0..rank` (`rank` is the value's rank, or the
    /// result's where the axis is an insertion point: `expand_dims`,
    /// `stack`). A dimension name is the axis of the value that carries it,
    /// or, when none does, the one axis of that size (an insertion point
    /// then goes before that axis: `expand_dims(x, b)` puts the new axis
    /// where `b` is).
    fn one(&self, l: &Lower<'_>, v: &Val, rank: usize, span: &Span) -> Result<usize, Diagnostic> {
        let ty = &self.ty;
        match v {
            Val::Dim(name, size) => {
                let by_label =
                    self.labels.as_ref().and_then(|ls| ls.iter().position(|n| n.as_deref() == Some(&**name)));
                if let Some(i) = by_label {
                    return Ok(i);
                }
                let hits: Vec<usize> = (0..ty.rank()).filter(|&i| ty.shape[i] == *size).collect();
                match hits.as_slice() {
                    [i] => Ok(*i),
                    [] => Err(l.err(
                        Stage::Type,
                        span,
                        format!("dimension `{name}` (= {size}) is not an axis of this value ({ty})"),
                    )),
                    _ => Err(l
                        .err(Stage::Type, span, format!("dimension `{name}` (= {size}) matches several axes of {ty}"))
                        .with_note("help: give the axis as an integer")),
                }
            }
            v => match static_int(v) {
                Some(k) => {
                    let k2 = if k < 0 { k + rank as i64 } else { k };
                    if k2 < 0 || k2 >= rank as i64 {
                        let what = if rank == ty.rank() {
                            format!("a value of rank {rank} ({ty})")
                        } else {
                            format!("a result of rank {rank}")
                        };
                        return Err(l.err(Stage::Type, span, format!("axis {k} is out of range for {what}")));
                    }
                    Ok(k2 as usize)
                }
                None => Err(l.err(
                    Stage::Type,
                    span,
                    format!("an axis must be an integer or a dimension name, found {}", v.describe()),
                )),
            },
        }
    }

    /// An axis spec: one item or a tuple of distinct ones.
    fn many(&self, l: &Lower<'_>, a: &ArgVal, rank: usize) -> Result<Vec<usize>, Diagnostic> {
        let items: Vec<Val> = match &a.val {
            Val::Tuple(t) => t.to_vec(),
            other => vec![other.clone()],
        };
        let mut out = Vec::new();
        for v in &items {
            let ax = self.one(l, v, rank, &a.span)?;
            if out.contains(&ax) {
                return Err(l.err(Stage::Type, &a.span, format!("axis {ax} is given twice")));
            }
            out.push(ax);
        }
        Ok(out)
    }
}

/// Resolves an optional `axis` argument against `x`: integers (negative
/// from the end), dimension names (see [`Axes::one`]), or a tuple of
/// those. Left out (or `none`): every axis.
fn axes(l: &Lower<'_>, x: Value, a: Option<&ArgVal>) -> Result<Vec<usize>, Diagnostic> {
    let ax = Axes::of(l, x);
    match a {
        None => Ok((0..ax.ty.rank()).collect()),
        Some(a) => ax.many(l, a, ax.ty.rank()),
    }
}

/// Exactly one axis of `x` for the builtin `name`; left out (or `none`),
/// the last axis when `default_last`.
fn one_axis(
    l: &Lower<'_>,
    name: &str,
    x: Value,
    a: Option<&ArgVal>,
    default_last: bool,
    span: &Span,
) -> Result<usize, Diagnostic> {
    let ty = l.ty(x);
    match a {
        None if default_last => {
            if ty.rank() == 0 {
                return Err(l.err(
                    Stage::Type,
                    span,
                    format!("`{name}` needs a value with at least one axis, found {ty}"),
                ));
            }
            Ok(ty.rank() - 1)
        }
        None => Err(l.err(Stage::Type, span, format!("`{name}` needs the argument `axis`"))),
        Some(a) => {
            let ax = axes(l, x, Some(a))?;
            match ax.as_slice() {
                [k] => Ok(*k),
                _ => Err(l.err(Stage::Type, &a.span, format!("`{name}` needs exactly one axis, got {}", ax.len()))),
            }
        }
    }
}

fn not_a_tuple(l: &Lower<'_>, name: &str, a: &ArgVal) -> Diagnostic {
    l.err(Stage::Type, &a.span, format!("expected a tuple of tensors, found {}", a.val.describe()))
        .with_note(format!("help: write `{name}((a, b), axis=0)`"))
}

fn tensors_of(l: &mut Lower<'_>, name: &str, a: &ArgVal) -> Result<Vec<Value>, Diagnostic> {
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
        _ => Err(not_a_tuple(l, name, a)),
    }
}

/// The shape and dimension names of one item of `concat`/`stack`'s tuple
/// (what a dimension name as their axis is resolved against).
fn item_axes(l: &mut Lower<'_>, v: &Val) -> Option<Axes> {
    match v {
        Val::T(tv) => {
            let x = l.import(*tv);
            Some(Axes::of(l, x))
        }
        Val::Array { shape, kind, .. } => {
            let dt = match kind {
                ArrKind::Bool => DType::Bool,
                ArrKind::Int => DType::I32,
                ArrKind::Float => DType::F32,
            };
            Some(Axes { ty: TensorType::new(dt, shape.clone()), labels: None })
        }
        Val::Const(c) => Some(Axes { ty: TensorType::scalar(c.default_dtype()), labels: None }),
        _ => None,
    }
}

/// `stack`/`concat` of number literals and static arrays only: a static
/// array, so its dtype comes from its context like `[10.0, 0.0]`'s
/// (`x * stack((10.0, 0.0))` is f64 next to an f64 `x`, not an f32 tensor).
/// `None` when an item is not static or the shapes do not fit (the tensor
/// path then reports it). `k` is already resolved against the result.
fn static_join(items: &[Val], stack: bool, k: usize) -> Option<Val> {
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
    if k >= rank {
        return None;
    }
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

/// `cast` of a number or array literal: the literal's own value converted
/// straight to `dt` (not through an f32 tensor first), so `cast(0.1, f64)`
/// is exactly 0.1. A value the target cannot hold is an error, not `inf`
/// or a saturated integer (a typed tensor keeps the kernel's saturation):
/// a finite float beyond the f32 range, or a number whose integer part is
/// outside the integer dtype. NaN follows the kernel (0 for integers).
fn cast_literal(l: &mut Lower<'_>, v: &Val, dt: DType, span: &Span) -> Result<Value, Diagnostic> {
    let (shape, data): (Vec<usize>, Vec<f64>) = match v {
        Val::Const(c) => (Vec::new(), vec![c.as_f64()]),
        Val::Dim(_, n) => (Vec::new(), vec![*n as f64]),
        Val::Array { shape, data, .. } => (shape.clone(), data.to_vec()),
        _ => unreachable!("internal error: cast_literal is called on literals only"),
    };
    // An integer literal keeps its exact i64 value (f64 would round it
    // beyond 2^53).
    if let Val::Const(Const::Int(i)) = v {
        let fits = match dt {
            DType::I32 => i32::try_from(*i).is_ok(),
            DType::U32 => u32::try_from(*i).is_ok(),
            _ => true,
        };
        if !fits {
            let (lo, hi) = if dt == DType::U32 { (0, u32::MAX as i64) } else { (i32::MIN as i64, i32::MAX as i64) };
            return Err(l
                .err(Stage::Type, span, format!("{i} is out of range for {dt}"))
                .with_note(format!("note: {dt} holds {lo} to {hi}")));
        }
        if dt == DType::I64 {
            let r = l.b().constant(graft_core::Tensor::scalar(*i));
            return l.ir(r, span);
        }
    }
    for &x in &data {
        let bad = match dt {
            DType::F16 => x.is_finite() && !graft_core::dtype::f16_from_f64(x).is_finite(),
            DType::F32 => x.is_finite() && !(x as f32).is_finite(),
            DType::I32 => !x.is_nan() && (x.trunc() < i32::MIN as f64 || x.trunc() > i32::MAX as f64),
            // i64::MAX as f64 is 2^63, itself out of range.
            DType::I64 => !x.is_nan() && (x.trunc() < i64::MIN as f64 || x.trunc() >= i64::MAX as f64),
            DType::U32 => !x.is_nan() && (x.trunc() < 0.0 || x.trunc() > u32::MAX as f64),
            DType::F64 | DType::Bool => false,
        };
        if bad {
            let range = match dt {
                DType::F16 => format!("the largest f16 is {:e}", graft_core::half::f16::MAX.to_f64()),
                DType::F32 => format!("the largest f32 is {:e}", f32::MAX),
                DType::I32 => format!("i32 holds {} to {}", i32::MIN, i32::MAX),
                DType::U32 => format!("u32 holds 0 to {}", u32::MAX),
                _ => format!("i64 holds {} to {}", i64::MIN, i64::MAX),
            };
            // As written for moderate magnitudes (`3000000000.0`), with an
            // exponent for huge ones (`1e39`).
            let shown = if x.abs() >= 1e16 { format!("{x:e}") } else { format!("{x:?}") };
            return Err(l
                .err(Stage::Type, span, format!("{shown} is out of range for {dt}"))
                .with_note(format!("note: {range}")));
        }
    }
    let data: Vec<f64> = match dt {
        DType::I32 | DType::I64 | DType::U32 => data.iter().map(|x| if x.is_nan() { 0.0 } else { x.trunc() }).collect(),
        DType::Bool => data.iter().map(|&x| f64::from(u8::from(x != 0.0))).collect(),
        DType::F16 | DType::F32 | DType::F64 => data,
    };
    l.const_tensor(&shape, &data, dt, span)
}

/// The `ord` of `norm`: `none`, `1`, `-1`, `2`, `-2`, `"fro"`, `"nuc"`,
/// `"inf"`, `"-inf"` (or an infinite number known while compiling).
/// `p` names the argument (`ord`, or `cond`'s `p`).
fn norm_ord(l: &Lower<'_>, a: &A, p: &str) -> Result<c::decomp::NormOrd, Diagnostic> {
    use c::decomp::NormOrd;
    let Some(o) = a.opt(p) else { return Ok(NormOrd::Default) };
    let bad = || {
        l.err(
            Stage::Type,
            &o.span,
            format!(
                "`{p}` of `{}` must be none, 1, -1, 2, -2, \"fro\", \"nuc\", \"inf\" or \"-inf\", found {}",
                a.name,
                o.val.describe()
            ),
        )
    };
    match &o.val {
        Val::None => Ok(NormOrd::Default),
        Val::Str(s) => match &**s {
            "fro" => Ok(NormOrd::Fro),
            "nuc" => Ok(NormOrd::Nuc),
            "inf" => Ok(NormOrd::Inf),
            "-inf" => Ok(NormOrd::NegInf),
            _ => Err(bad()),
        },
        v => match super::expr::static_scalar(v).map(Const::as_f64) {
            Some(1.0) => Ok(NormOrd::One),
            Some(-1.0) => Ok(NormOrd::NegOne),
            Some(2.0) => Ok(NormOrd::Two),
            Some(-2.0) => Ok(NormOrd::NegTwo),
            Some(f64::INFINITY) => Ok(NormOrd::Inf),
            Some(f64::NEG_INFINITY) => Ok(NormOrd::NegInf),
            _ => Err(bad()),
        },
    }
}

/// A matrix order (`matrix_norm`'s `ord`, `cond`'s `p`): `norm`'s orders
/// less the default; `matrix_norm` defaults to `"fro"`.
fn matrix_ord(l: &Lower<'_>, a: &A, p: &str) -> Result<Option<c::spectral::MatrixOrd>, Diagnostic> {
    use c::decomp::NormOrd;
    use c::spectral::MatrixOrd;
    Ok(match norm_ord(l, a, p)? {
        NormOrd::Default => None,
        NormOrd::Fro => Some(MatrixOrd::Fro),
        NormOrd::Nuc => Some(MatrixOrd::Nuc),
        NormOrd::One => Some(MatrixOrd::One),
        NormOrd::NegOne => Some(MatrixOrd::NegOne),
        NormOrd::Two => Some(MatrixOrd::Two),
        NormOrd::NegTwo => Some(MatrixOrd::NegTwo),
        NormOrd::Inf => Some(MatrixOrd::Inf),
        NormOrd::NegInf => Some(MatrixOrd::NegInf),
    })
}

/// A relative tolerance option (`rtol`, `rcond`): a number known while
/// compiling, or `none` for the default.
fn tolerance(l: &Lower<'_>, a: &A, p: &str) -> Result<Option<f64>, Diagnostic> {
    match a.opt(p) {
        None => Ok(None),
        Some(_) => a.num(l, p, None).map(Some),
    }
}

/// Calls builtin `name`. Every error it reports names the builtin: messages
/// start with it (`` `softmax` needs exactly one axis, got 2 ``), or get
/// `` `name`: `` in front. The loops and `tabulate` are left alone: their
/// errors may come from the user's function, which names itself.
pub fn call(l: &mut Lower<'_>, name: &str, args: Vec<ArgVal>, span: &Span) -> Result<Val, Diagnostic> {
    let r = call_builtin(l, name, args, span);
    if matches!(name, "scan" | "fori" | "while" | "tabulate" | "tree_map" | "tree_reduce") {
        return r;
    }
    r.map_err(|mut d| {
        if !d.message.starts_with(&format!("`{name}`")) {
            d.message = format!("`{name}`: {}", d.message);
        }
        d
    })
}

fn call_builtin(l: &mut Lower<'_>, name: &str, args: Vec<ArgVal>, span: &Span) -> Result<Val, Diagnostic> {
    let a = A::new(l, name, args, span)?;
    match name {
        "tree_map" => return super::tree::tree_map(l, &a.req(l, "f")?.clone(), &a.rest, span),
        "tree_reduce" => {
            let (f, t, i) = (a.req(l, "f")?.clone(), a.req(l, "tree")?.clone(), a.req(l, "init")?.clone());
            return super::tree::tree_reduce(l, &f, &t, &i, span);
        }
        "tree_leaves" => return Ok(super::tree::tree_leaves(&a.req(l, "tree")?.val)),
        _ => {}
    }
    if super::fold::FOLDABLE.contains(&name) {
        if let Some(ArgVal { val: Val::Const(x), .. }) = a.opt("x") {
            let approximate = name == "gelu" && a.flag(l, "approximate")?;
            if let Some(y) = super::fold::fold(name, *x, approximate) {
                return Ok(Val::Const(y));
            }
        }
    }
    l.set_span(span);
    macro_rules! ir {
        ($e:expr) => {{
            let r = $e;
            l.ir_named(r, name, span)?
        }};
    }
    let v: Value = match name {
        "exp" | "log" | "tanh" | "sin" | "cos" | "tan" | "sqrt" | "rsqrt" | "expm1" | "log1p" | "erf" | "sigmoid"
        | "logistic" | "gelu" | "silu" | "softplus" | "log_sigmoid" | "reciprocal" | "floor" | "ceil" | "round" => {
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
                "floor" => ir!(b.floor(x)),
                "ceil" => ir!(b.ceil(x)),
                "round" => ir!(b.round(x)),
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
        "relu" | "abs" | "sign" | "square" => {
            let x = a.t(l, "x", false)?;
            let t = l.ty(x);
            if t.dtype == DType::Bool {
                return Err(l
                    .err(Stage::Type, &a.span_of("x"), format!("`{name}` needs a numeric value, found {t}"))
                    .with_note("help: convert with `cast(x, i32)` or `cast(x, f32)`"));
            }
            let b = l.b();
            match name {
                "relu" => ir!(c::math::relu(b, x)),
                "abs" => ir!(b.abs(x)),
                "sign" => ir!(b.sign(x)),
                _ => ir!(c::math::square(b, x)),
            }
        }
        "leaky_relu" | "elu" => {
            let x = a.t(l, "x", true)?;
            let t = l.ty(x);
            if !t.dtype.is_float() {
                return Err(l
                    .err(Stage::Type, &a.span_of("x"), format!("`{name}` needs a floating-point value, found {t}"))
                    .with_note("help: convert with `cast(x, f32)`"));
            }
            if name == "elu" {
                let alpha = a.num(l, "alpha", Some(1.0))?;
                ir!(c::math::elu(l.b(), x, alpha))
            } else {
                let slope = a.num(l, "negative_slope", Some(0.01))?;
                ir!(c::math::leaky_relu(l.b(), x, slope))
            }
        }
        "isnan" | "isinf" | "isfinite" => {
            let x = a.t(l, "x", true)?;
            let b = l.b();
            match name {
                "isnan" => ir!(c::math::isnan(b, x)),
                "isinf" => ir!(c::math::isinf(b, x)),
                _ => ir!(c::math::isfinite(b, x)),
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
        "fma" => {
            let ops = [a.req(l, "x")?.clone(), a.req(l, "y")?.clone(), a.req(l, "z")?.clone()];
            // The first tensor operand's dtype; numbers follow it (f32 if all are numbers).
            let dt = match ops.iter().find(|o| matches!(o.val, Val::T(_))) {
                Some(o) => {
                    let t = l.tensor(&o.val, &o.span)?;
                    l.ty(t).dtype
                }
                None => DType::F32,
            };
            let mut vs = Vec::with_capacity(3);
            for o in &ops {
                vs.push(l.tensor_as(&o.val, dt, &o.span)?);
            }
            ir!(c::broadcast::fma(l.b(), vs[0], vs[1], vs[2]))
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
            let xa = a.req(l, "x")?.clone();
            let dt = match a.opt("dtype") {
                None => return Err(l.err(Stage::Type, span, "`cast` needs a dtype: `cast(x, f64)`")),
                Some(_) => a.dtype(l, "dtype", DType::F32)?,
            };
            match xa.val {
                Val::Const(_) | Val::Dim(..) | Val::Array { .. } => cast_literal(l, &xa.val, dt, &xa.span)?,
                _ => {
                    let x = l.tensor(&xa.val, &xa.span)?;
                    ir!(l.b().convert(x, dt))
                }
            }
        }
        "sum" | "mean" | "max" | "min" | "prod" | "logsumexp" | "var" | "std" => {
            // The float reductions make a literal f32; the others keep its
            // default dtype (`sum([1, 2])` is the i32 3, as `jnp.sum` of an
            // int array is an int).
            let float = matches!(name, "mean" | "logsumexp" | "var" | "std");
            let x = a.t(l, "x", float)?;
            let ax = axes(l, x, a.opt("axis"))?;
            let kd = a.flag(l, "keepdims")?;
            if float && !l.ty(x).dtype.is_float() {
                let t = l.ty(x);
                return Err(l
                    .err(Stage::Type, &a.span_of("x"), format!("`{name}` needs a floating-point value, found {t}"))
                    .with_note("help: convert with `cast(x, f32)`"));
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
                    let ddof = a.int_min(l, "ddof", Some(0), 0)? as usize;
                    let b = l.b();
                    if name == "var" {
                        ir!(c::reduce::var(b, x, &ax, ddof, kd))
                    } else {
                        ir!(c::reduce::std(b, x, &ax, ddof, kd))
                    }
                }
            }
        }
        "sort" | "argsort" => {
            let x = a.t(l, "x", false)?;
            let ax = one_axis(l, name, x, a.opt("axis"), true, span)?;
            if name == "sort" {
                ir!(c::sort::sort(l.b(), x, ax))
            } else {
                ir!(c::sort::argsort(l.b(), x, ax))
            }
        }
        "argmax" | "argmin" => {
            let x = a.t(l, "x", false)?;
            let kd = a.flag(l, "keepdims")?;
            let (v, ax, flat) = match a.opt("axis") {
                None => {
                    let n = l.ty(x).numel();
                    (ir!(l.b().reshape(x, &[n])), 0, true)
                }
                Some(_) => (x, one_axis(l, name, x, a.opt("axis"), false, span)?, false),
            };
            let b = l.b();
            let r = if name == "argmax" {
                ir!(c::reduce::argmax(b, v, ax, kd, DType::I32))
            } else {
                ir!(c::reduce::argmin(b, v, ax, kd, DType::I32))
            };
            if flat && kd {
                // Every axis was reduced, so every axis is kept as 1 (JAX's
                // `argmax(x, keepdims=True)` has shape (1, ..., 1)).
                let ones = vec![1; l.ty(x).rank()];
                ir!(l.b().reshape(r, &ones))
            } else {
                r
            }
        }
        "softmax" | "log_softmax" => {
            let x = a.t(l, "x", true)?;
            let ax = one_axis(l, name, x, a.opt("axis"), true, span)?;
            if name == "softmax" {
                ir!(c::reduce::softmax(l.b(), x, ax))
            } else {
                ir!(c::reduce::log_softmax(l.b(), x, ax))
            }
        }
        "cumsum" => {
            let x = a.t(l, "x", false)?;
            let ax = one_axis(l, name, x, a.opt("axis"), true, span)?;
            let rev = a.flag(l, "reverse")?;
            ir!(l.b().cumsum(x, ax, rev))
        }
        "matmul" => {
            let (xa, ya) = (a.req(l, "x")?.clone(), a.req(l, "y")?.clone());
            return l.matmul("`matmul`", &xa.val, &ya.val, &xa.span, &ya.span, span);
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
            // Literal operands take the first tensor operand's dtype (f32
            // when every operand is a literal), like a binary operator's.
            let dt = match a.rest.iter().find_map(|o| if let Val::T(t) = o.val { Some(t) } else { None }) {
                Some(t) => {
                    let v = l.import(t);
                    l.ty(v).dtype
                }
                None => DType::F32,
            };
            let mut ops = Vec::new();
            for o in &a.rest {
                ops.push(match o.val {
                    Val::T(_) => l.tensor(&o.val, &o.span)?,
                    _ => l.tensor_as(&o.val, dt, &o.span).or_else(|_| l.tensor(&o.val, &o.span))?,
                });
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
                    let ord = norm_ord(l, &a, "ord")?;
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
        "matrix_norm" | "matrix_rank" | "cond" | "pinv" | "eigvalsh" | "svdvals" => {
            let x = a.t(l, "x", true)?;
            match name {
                "matrix_norm" => {
                    let ord = matrix_ord(l, &a, "ord")?.unwrap_or(c::spectral::MatrixOrd::Fro);
                    ir!(c::spectral::matrix_norm(l.b(), x, ord))
                }
                "matrix_rank" => {
                    let rtol = tolerance(l, &a, "rtol")?;
                    ir!(c::spectral::matrix_rank(l.b(), x, rtol))
                }
                "cond" => {
                    let p = matrix_ord(l, &a, "p")?;
                    ir!(c::spectral::cond(l.b(), x, p))
                }
                "pinv" => {
                    let rtol = tolerance(l, &a, "rtol")?;
                    ir!(c::spectral::pinv(l.b(), x, rtol))
                }
                "eigvalsh" => ir!(c::spectral::eigvalsh(l.b(), x)),
                _ => ir!(c::spectral::svdvals(l.b(), x)),
            }
        }
        "qr" | "eigh" | "svd" => {
            let x = a.t(l, "x", true)?;
            let vals: Vec<Value> = match name {
                "qr" => {
                    let mode = match a.opt("mode").map(|m| (&m.val, &m.span)) {
                        None => "reduced".to_string(),
                        Some((Val::Str(s), _)) if matches!(&**s, "reduced" | "complete" | "r") => s.to_string(),
                        Some((v, sp)) => {
                            return Err(l.err(
                                Stage::Type,
                                sp,
                                format!(
                                    "`mode` of `qr` must be \"reduced\", \"complete\" or \"r\", found {}",
                                    v.describe()
                                ),
                            ))
                        }
                    };
                    let (q, r) = ir!(c::spectral::qr(l.b(), x, mode == "complete"));
                    if mode == "r" {
                        return Ok(out(l, r));
                    }
                    vec![q, r]
                }
                "eigh" => {
                    let sym = a.flag_or(l, "symmetrize_input", true)?;
                    let (w, v) = ir!(c::spectral::eigh(l.b(), x, sym));
                    vec![w, v]
                }
                _ => {
                    let full = a.flag(l, "full_matrices")?;
                    if !a.flag_or(l, "compute_uv", true)? {
                        let s = ir!(c::spectral::svdvals(l.b(), x));
                        return Ok(out(l, s));
                    }
                    let (u, s, vh) = ir!(c::spectral::svd(l.b(), x, full));
                    vec![u, s, vh]
                }
            };
            return Ok(Val::tuple(vals.into_iter().map(|v| out(l, v)).collect()));
        }
        "lstsq" => {
            let (xa, ya) = (a.req(l, "a")?.clone(), a.req(l, "b")?.clone());
            let (x, y) = if matches!(xa.val, Val::T(_)) || matches!(ya.val, Val::T(_)) {
                l.unify(&xa.val, &ya.val, span)?
            } else {
                (l.tensor_as(&xa.val, DType::F32, &xa.span)?, l.tensor_as(&ya.val, DType::F32, &ya.span)?)
            };
            let rcond = tolerance(l, &a, "rcond")?;
            let (sol, resid, rank, s) = ir!(c::spectral::lstsq(l.b(), x, y, rcond));
            return Ok(Val::tuple([sol, resid, rank, s].into_iter().map(|v| out(l, v)).collect()));
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
                Some(pa) => {
                    // Entries are axes of `x`: negative ones count from the
                    // end and dimension names name axes (`jnp.transpose`
                    // takes negative entries too).
                    let pa = pa.clone();
                    let ax = Axes::of(l, x);
                    let p = ax.many(l, &pa, ax.ty.rank())?;
                    ir!(c::shape::transpose(l.b(), x, Some(&p)))
                }
            }
        }
        "concat" | "stack" => {
            let stack = name == "stack";
            let xs_arg = a.req(l, "xs")?.clone();
            let Val::Tuple(items) = &xs_arg.val else {
                return Err(not_a_tuple(l, name, &xs_arg));
            };
            let Some(first) = items.first().and_then(|v| item_axes(l, v)) else {
                return Err(l.err(Stage::Type, &xs_arg.span, "expected a tuple of tensors"));
            };
            let rank = first.ty.rank() + usize::from(stack);
            let k = match a.opt("axis") {
                None => 0,
                Some(av) => first.one(l, &av.val, rank, &av.span)?,
            };
            if rank == 0 {
                // As `jnp.concatenate`, which cannot join zero-dimensional arrays.
                return Err(l
                    .err(
                        Stage::Type,
                        &xs_arg.span,
                        format!("`concat` needs items with at least one axis, found {}", first.ty),
                    )
                    .with_note("help: `stack` joins scalars into a vector"));
            }
            if let Some(v) = static_join(items, stack, k) {
                return Ok(v);
            }
            let xs = tensors_of(l, name, &xs_arg)?;
            l.set_span(span);
            if stack {
                ir!(c::shape::stack(l.b(), &xs, k))
            } else {
                ir!(c::shape::concat(l.b(), &xs, k))
            }
        }
        "expand_dims" => {
            let x = a.t(l, "x", false)?;
            let av = a.req(l, "axis")?.clone();
            if let Val::Tuple(t) = &av.val {
                return Err(l.err(
                    Stage::Type,
                    &av.span,
                    format!("`expand_dims` takes one axis, found a tuple of {}", t.len()),
                ));
            }
            let ax = Axes::of(l, x);
            let k = ax.one(l, &av.val, ax.ty.rank() + 1, &av.span)?;
            ir!(c::shape::expand_dims(l.b(), x, &[k]))
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
            if l.ty(x).rank() == 0 {
                return Err(l.err(Stage::Type, span, format!("`{name}` needs a tensor with at least one axis")));
            }
            // `gather` has no `axis` parameter: it always takes rows.
            let axis_arg = if name == "take" { a.opt("axis") } else { None };
            let ax = match axis_arg {
                Some(av) => one_axis(l, name, x, Some(av), false, span)?,
                None => 0,
            };
            let fill = gather_mode(l, &a)?;
            let mode = if fill.is_some() { IndexMode::Fill } else { IndexMode::Clip };
            let g = ir!(c::shape::take_with_mode(l.b(), x, i, ax, mode));
            match fill {
                Some(f) if f != 0.0 => {
                    // Out-of-range positions read `f` (the gather read 0 there).
                    let (it, gt) = (l.ty(i), l.ty(g));
                    let n = l.ty(x).shape[ax] as f64;
                    let i64t = TensorType::new(DType::I64, it.shape.clone());
                    let i = ir!(l.b().convert(i, DType::I64));
                    let zero = ir!(l.b().full(0.0, &i64t));
                    let nn = ir!(l.b().full(n, &i64t));
                    let lo = ir!(l.b().ge(i, zero));
                    let hi = ir!(l.b().lt(i, nn));
                    let ok = ir!(l.b().and(lo, hi));
                    let dims: Vec<usize> = (ax..ax + it.rank()).collect();
                    let ok = ir!(l.b().broadcast_in_dim(ok, &gt.shape, &dims));
                    let fv = ir!(l.b().full(f, &gt));
                    ir!(l.b().select(ok, g, fv))
                }
                _ => g,
            }
        }
        "dynamic_slice" => {
            let x = a.t(l, "x", false)?;
            let starts = dyn_starts(l, &a, x)?;
            let sizes = a.ushape(l, "sizes")?;
            let rank = l.ty(x).rank();
            if sizes.len() != rank {
                return Err(l.err(
                    Stage::Type,
                    &a.span_of("sizes"),
                    format!("`sizes` needs one size per axis of x ({}), found {}", l.ty(x), sizes.len()),
                ));
            }
            ir!(l.b().dynamic_slice(x, &starts, &sizes))
        }
        "dynamic_update_slice" => {
            let x = a.t(l, "x", false)?;
            let dt = l.ty(x).dtype;
            let u = a.req(l, "update")?.clone();
            let u = l.tensor_as(&u.val, dt, &u.span)?;
            let (xt, ut) = (l.ty(x), l.ty(u));
            if ut.rank() != xt.rank() {
                return Err(l.err(
                    Stage::Type,
                    &a.span_of("update"),
                    format!("the update must have the rank of x ({xt}), found {ut}"),
                ));
            }
            let starts = dyn_starts(l, &a, x)?;
            ir!(l.b().dynamic_update_slice(x, u, &starts))
        }
        "scatter_add" => {
            let x = a.t(l, "x", false)?;
            let xt = l.ty(x);
            if xt.rank() == 0 {
                return Err(l.err(Stage::Type, &a.span_of("x"), format!("`x` needs at least one axis, found {xt}")));
            }
            let ia = a.req(l, "indices")?.clone();
            let item = l.index_value(&ia.val, 0, xt.shape[0], &ia.span)?;
            let upd = a.req(l, "updates")?.clone();
            let r = l.at_apply(x, vec![(item, ia.span.clone())], "add", Some(&upd), GetMode::Clip, span, span)?;
            return Ok(out(l, r));
        }
        "one_hot" => {
            let ids = a.t(l, "labels", false)?;
            let n = a.int_min(l, "n", None, 0)?;
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
                    let k = one_axis(l, name, x, a.opt("axis"), false, span)?;
                    Val::Const(Const::Int(t.shape[k] as i64))
                }
            });
        }
        "ndim" => {
            let x = a.t(l, "x", false)?;
            return Ok(Val::Const(Const::Int(l.ty(x).rank() as i64)));
        }
        "shape" => {
            let x = a.t(l, "x", false)?;
            let dims = l.ty(x).shape.iter().map(|&d| Val::Const(Const::Int(d as i64))).collect();
            return Ok(Val::tuple(dims));
        }
        "tile" => {
            let x = a.t(l, "x", false)?;
            let reps = a.ushape(l, "reps")?;
            ir!(c::shape::tile(l.b(), x, &reps))
        }
        "repeat" => {
            let x = a.t(l, "x", false)?;
            let r = a.int_min(l, "repeats", None, 0)? as usize;
            let axis = match a.opt("axis") {
                None => None,
                Some(_) => Some(one_axis(l, name, x, a.opt("axis"), false, span)?),
            };
            ir!(c::shape::repeat(l.b(), x, r, axis))
        }
        "zeros" | "ones" | "full" => {
            let s = a.ushape(l, "shape")?;
            let value = match name {
                "zeros" => 0.0,
                "ones" => 1.0,
                _ => a.num(l, "value", None)?,
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
            let start = a.num(l, "start", None)?;
            let (start, stop) = match a.opt("stop") {
                None => (0.0, start),
                Some(_) => (start, a.num(l, "stop", None)?),
            };
            let step = a.num(l, "step", Some(1.0))?;
            let dt = a.dtype(l, "dtype", if all_int { DType::I32 } else { DType::F32 })?;
            ir!(c::shape::arange(l.b(), start, stop, step, dt))
        }
        "linspace" => {
            let (s0, s1) = (a.num(l, "start", None)?, a.num(l, "stop", None)?);
            // `np.linspace` rejects a negative `num` too.
            let n = a.int_min(l, "num", Some(50), 0)? as usize;
            let dt = a.dtype(l, "dtype", DType::F32)?;
            ir!(c::shape::linspace(l.b(), s0, s1, n, true, dt))
        }
        "conv2d" => {
            let (x, w, bias) = a.float_operands(l, ["x", "w"], "bias")?;
            let st = a.int_min(l, "stride", Some(1), 1)? as usize;
            let pd = a.int_min(l, "padding", Some(0), 0)? as usize;
            let opts = ConvOpts::new().stride(st).padding(pd);
            ir!(c::conv::conv2d(l.b(), x, w, bias, &opts))
        }
        "max_pool2d" | "avg_pool2d" => {
            let x = a.t(l, "x", true)?;
            let k = a.int_min(l, "k", None, 1)? as usize;
            let mut opts = PoolOpts::new().padding(a.int_min(l, "padding", Some(0), 0)? as usize);
            if a.opt("stride").is_some() {
                opts = opts.stride(a.int_min(l, "stride", None, 1)? as usize);
            }
            let kd = c::conv::PerDim::from(k);
            if name == "max_pool2d" {
                ir!(c::pool::max_pool2d(l.b(), x, &kd, &opts))
            } else {
                ir!(c::pool::avg_pool2d(l.b(), x, &kd, &opts))
            }
        }
        "conv_transpose2d" => {
            let (x, w, bias) = a.float_operands(l, ["x", "w"], "bias")?;
            let st = a.int_min(l, "stride", Some(1), 1)? as usize;
            let pd = a.int_min(l, "padding", Some(0), 0)? as usize;
            let op = a.int_min(l, "output_padding", Some(0), 0)? as usize;
            let opts = c::conv::ConvTransposeOpts::new().stride(st).padding(pd).output_padding(op);
            ir!(c::conv::conv_transpose2d(l.b(), x, w, bias, &opts))
        }
        "batch_norm" | "group_norm" => {
            let x = a.t(l, "x", true)?;
            let dt = l.ty(x).dtype;
            let mut affine = |p: &str| -> Result<Option<Value>, Diagnostic> {
                match a.opt(p).cloned() {
                    None => Ok(None),
                    Some(v) => Ok(Some(l.tensor_as(&v.val, dt, &v.span)?)),
                }
            };
            let (g, beta) = (affine("gamma")?, affine("beta")?);
            let eps = a.num(l, "eps", Some(1e-5))?;
            if name == "group_norm" {
                let groups = a.int_min(l, "num_groups", None, 1)? as usize;
                ir!(c::norm::group_norm(l.b(), x, groups, g, beta, eps))
            } else {
                l.set_span(span);
                let r = c::norm::batch_norm(l.b(), x, g, beta, None, eps);
                let (y, mean, var) = r.map_err(|e| l.ir_err(e, span))?;
                let vals = [y, mean, var].iter().map(|&v| Val::T(l.tv(v))).collect();
                return Ok(Val::tuple(vals));
            }
        }
        "attention" | "multi_head_attention" => {
            let q = a.t(l, "q", true)?;
            let dt = l.ty(q).dtype;
            let float = |l: &mut Lower<'_>, p: &str| -> Result<Value, Diagnostic> {
                let v = a.req(l, p)?.clone();
                l.tensor_as(&v.val, dt, &v.span)
            };
            let (k, v) = (float(l, "k")?, float(l, "v")?);
            let causal = a.flag(l, "causal")?;
            let mask = match a.opt("mask").cloned() {
                None => None,
                // A bool mask stays bool (may attend); a number is added to the scores.
                Some(m)
                    if matches!(
                        m.val,
                        Val::T(_) | Val::Const(Const::Bool(_)) | Val::Array { kind: ArrKind::Bool, .. }
                    ) =>
                {
                    Some(l.tensor(&m.val, &m.span)?)
                }
                Some(m) => Some(l.tensor_as(&m.val, dt, &m.span)?),
            };
            if name == "attention" {
                let scale = match a.opt("scale") {
                    None => None,
                    Some(_) => Some(a.num(l, "scale", None)?),
                };
                ir!(c::attention::scaled_dot_product_attention(l.b(), q, k, v, causal, mask, scale))
            } else {
                let (wq, wk, wv, wo) = (float(l, "wq")?, float(l, "wk")?, float(l, "wv")?, float(l, "wo")?);
                let heads = a.int_min(l, "heads", None, 1)? as usize;
                ir!(c::attention::multi_head_attention(l.b(), q, k, v, wq, wk, wv, wo, heads, causal, mask))
            }
        }
        "dropout" => {
            let k = a.t(l, "key", false)?;
            let x = a.t(l, "x", true)?;
            let rate = a.num(l, "rate", None)?;
            let training = a.flag_or(l, "training", true)?;
            ir!(c::dropout::dropout(l.b(), k, x, rate, training))
        }
        "layer_norm" => {
            let (x, g, beta) = a.float_operands(l, ["x", "gamma"], "beta")?;
            let eps = a.num(l, "eps", Some(1e-5))?;
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
                    let n = a.int_min(l, "n", None, 0)? as usize;
                    ir!(c::random::split(l.b(), k, n))
                }
            }
        }
        "fold_in" => {
            let k = a.t(l, "key", false)?;
            let d = a.req(l, "data")?.clone();
            match static_int(&d.val) {
                Some(n) => {
                    // JAX takes a Python int data as a uint32.
                    let Ok(n) = u32::try_from(n) else {
                        return Err(l.err(
                            Stage::Type,
                            &d.span,
                            format!("`data` must be in 0 ..= 4294967295 (a u32), found {n}"),
                        ));
                    };
                    let t = ir!(l.b().constant(graft_core::Tensor::scalar(n as i32)));
                    ir!(c::random::fold_in(l.b(), k, t))
                }
                None => {
                    let t = l.tensor(&d.val, &d.span)?;
                    let ty = l.ty(t);
                    if ty.rank() != 0 || !ty.dtype.is_int() {
                        return Err(l.err(
                            Stage::Type,
                            &d.span,
                            format!("`data` must be an integer scalar (i32 or i64), found {ty}"),
                        ));
                    }
                    ir!(c::random::fold_in(l.b(), k, t))
                }
            }
        }
        "debug_print" => return debug_print(l, &a, span),
        "psum" | "pmean" | "pmax" | "pmin" | "all_gather" | "psum_scatter" | "ppermute" | "axis_index" => {
            let axis = named_axis(l, &a)?;
            use graft_core::ops::collective::Kind;
            if name == "axis_index" {
                ir!(l.b().axis_index(&axis))
            } else {
                let x = a.t(l, "x", false)?;
                let rank = l.ty(x).rank();
                let kind = match name {
                    "psum" => Kind::Psum,
                    "pmean" => Kind::Pmean,
                    "pmax" => Kind::Pmax,
                    "pmin" => Kind::Pmin,
                    "all_gather" => Kind::AllGather { dim: a.axis_or(l, "axis", rank + 1)? },
                    "psum_scatter" => Kind::ReduceScatter { dim: a.axis_or(l, "scatter_dimension", rank)? },
                    _ => Kind::Ppermute { perm: perm_pairs(l, &a, axis.size)? },
                };
                ir!(l.b().collective(kind, &axis, Some(x)))
            }
        }
        "uniform" | "normal" => {
            let k = a.t(l, "key", false)?;
            let s = a.ushape(l, "shape")?;
            let dt = a.dtype(l, "dtype", DType::F32)?;
            if name == "uniform" {
                let (lo, hi) = (a.num(l, "lo", Some(0.0))?, a.num(l, "hi", Some(1.0))?);
                ir!(c::random::uniform(l.b(), k, &s, dt, lo, hi))
            } else {
                ir!(c::random::normal(l.b(), k, &s, dt))
            }
        }
        "bernoulli" => {
            let k = a.t(l, "key", false)?;
            let p = a.num(l, "p", Some(0.5))?;
            let s = a.ushape(l, "shape")?;
            ir!(c::random::bernoulli(l.b(), k, p, &s))
        }
        "randint" => {
            let k = a.t(l, "key", false)?;
            let s = a.ushape(l, "shape")?;
            let (lo, hi) = (a.int(l, "lo", None)?, a.int(l, "hi", None)?);
            let dt = a.dtype(l, "dtype", DType::I32)?;
            ir!(c::random::randint(l.b(), k, &s, lo, hi, dt))
        }
        "permutation" => {
            let k = a.t(l, "key", false)?;
            let xa = a.req(l, "x")?.clone();
            match static_int(&xa.val) {
                Some(n) if n >= 0 => ir!(c::random::permutation(l.b(), k, n as usize)),
                Some(n) => {
                    return Err(l.err(
                        Stage::Type,
                        &xa.span,
                        format!("`x` must be an integer >= 0 or a tensor, found {n}"),
                    ))
                }
                None => {
                    let x = l.tensor(&xa.val, &xa.span)?;
                    let xt = l.ty(x);
                    if xt.rank() == 0 {
                        return Err(l.err(
                            Stage::Type,
                            &xa.span,
                            format!(
                                "`x` must be an integer known while compiling or a tensor with an axis, found {xt}"
                            ),
                        ));
                    }
                    let p = ir!(c::random::permutation(l.b(), k, xt.shape[0]));
                    ir!(c::shape::take(l.b(), x, p, 0))
                }
            }
        }
        "categorical" => {
            let k = a.t(l, "key", false)?;
            let logits = a.t(l, "logits", true)?;
            let axis = one_axis(l, name, logits, a.opt("axis"), true, span)?;
            ir!(c::random::categorical(l.b(), k, logits, axis, DType::I32))
        }
        "scan" => {
            let (f, i, x) = (a.req(l, "f")?.clone(), a.req(l, "init")?.clone(), a.req(l, "xs")?.clone());
            let remat = a.remat(l, "remat")?;
            return super::control::scan(l, &f, &i, &x, remat, span);
        }
        "fori" => {
            let (n, f, i) = (a.req(l, "n")?.clone(), a.req(l, "f")?.clone(), a.req(l, "init")?.clone());
            let remat = a.remat(l, "remat")?;
            return super::control::fori(l, &n, &f, &i, remat, span);
        }
        "while" => {
            let (c, f, i) = (a.req(l, "cond")?.clone(), a.req(l, "body")?.clone(), a.req(l, "init")?.clone());
            let remat = a.remat(l, "remat")?;
            return super::control::while_loop(l, &c, &f, &i, remat, span);
        }
        "tabulate" => {
            let n = a.int(l, "n", None).map_err(|mut d| {
                d.message = format!("`tabulate`: {}", d.message);
                d
            })?;
            if n < 0 {
                return Err(l.err(Stage::Type, &a.span_of("n"), format!("`tabulate` needs `n` >= 0, found {n}")));
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
                axis_name: None,
                span: span.clone(),
            };
            let iv = out(l, i);
            return l.call_fn(&FnVal::Transform(tf), vec![ArgVal { name: None, val: iv, span: a.span_of("n") }], span);
        }
        other => return Err(l.err(Stage::Resolve, span, format!("internal error: builtin `{other}` has no lowering"))),
    };
    Ok(out(l, v))
}

/// `debug_print(fmt, args...)`: a `debug_print` equation (see
/// `graft_core::ops::debug`); its value is the empty tuple. The format is
/// checked here, so a bad one is an error at the string and a count
/// mismatch one at the call, naming both counts.
fn debug_print(l: &mut Lower<'_>, a: &A, span: &Span) -> Result<Val, Diagnostic> {
    let f = a.req(l, "fmt")?.clone();
    let Val::Str(fmt) = &f.val else {
        return Err(l
            .err(
                Stage::Type,
                &f.span,
                format!("the first argument must be a format string, found {}", f.val.describe()),
            )
            .with_note("help: e.g. `debug_print(\"loss {} at step {}\", loss, i)`"));
    };
    let pieces = graft_core::ops::debug::parse_format(fmt)
        .map_err(|m| l.err(Stage::Type, &f.span, format!("bad format string: {m}")))?;
    let holes = pieces.len() - 1;
    if holes != a.rest.len() {
        let s = |n: usize| if n == 1 { "" } else { "s" };
        let at = a.rest.get(holes).map_or(span, |extra| &extra.span);
        return Err(l
            .err(
                Stage::Type,
                at,
                format!(
                    "the format string has {holes} placeholder{} `{{}}` but {} value{} {} given",
                    s(holes),
                    a.rest.len(),
                    s(a.rest.len()),
                    if a.rest.len() == 1 { "is" } else { "are" }
                ),
            )
            .with_note("help: write one `{}` per value (`{{` and `}}` print braces)"));
    }
    if l.both_branches > 0 {
        return Err(l
            .err(Stage::Type, span, "`debug_print` in a branch chosen per element would print for both branches")
            .with_note(
                "help: an `if` whose condition is a tensor (not a scalar) or whose branches differ in type computes both branches and selects; print after it, or make the condition a scalar",
            ));
    }
    let mut vals = Vec::with_capacity(a.rest.len());
    for arg in &a.rest {
        vals.push(match &arg.val {
            Val::T(_) | Val::Const(_) | Val::Array { .. } | Val::Dim(..) => l.tensor(&arg.val, &arg.span)?,
            other => {
                return Err(l.err(
                    Stage::Type,
                    &arg.span,
                    format!("`debug_print` prints tensors and numbers, found {}", other.describe()),
                ))
            }
        });
    }
    l.set_span(span);
    let r = l.b().debug_print(fmt, &vals);
    l.ir_named(r, "debug_print", span)?;
    Ok(Val::tuple(Vec::new()))
}
