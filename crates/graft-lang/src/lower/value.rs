//! Compile-time values of the lowering: what an expression evaluates to
//! while a graft function is being turned into a `graft_core::ir::Func`.
//!
//! Tensors are IR values of one builder frame ([`Tv`] records which);
//! literals stay static ([`Val::Const`], [`Val::Array`]) until an operation
//! fixes their dtype, which is how integer literals work as floats and float
//! literals take the dtype of their context. Functions, lambdas and
//! transforms are compile-time values ([`FnVal`]): they are defunctionalised
//! at lowering, so nothing of them exists at run time.

use crate::ast::{Ident, LambdaParam, Span, TransformKind};
use graft_core::{DType, TensorType, Value};
use std::rc::Rc;

/// A tensor: an IR value of the builder frame at `level`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tv {
    pub level: usize,
    pub v: Value,
}

/// A static scalar literal, not yet given a dtype.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Const {
    Int(i64),
    Float(f64),
    Bool(bool),
}

impl Const {
    pub fn as_f64(self) -> f64 {
        match self {
            Const::Int(i) => i as f64,
            Const::Float(f) => f,
            Const::Bool(b) => f64::from(u8::from(b)),
        }
    }

    /// The dtype a literal gets when nothing else fixes it (f32 for floats, i32 for integers).
    pub fn default_dtype(self) -> DType {
        match self {
            Const::Int(_) => DType::I32,
            Const::Float(_) => DType::F32,
            Const::Bool(_) => DType::Bool,
        }
    }
}

/// The element kind of a static array literal: the widest of its elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ArrKind {
    Bool,
    Int,
    Float,
}

/// A value during lowering.
#[derive(Debug, Clone)]
pub enum Val {
    T(Tv),
    Const(Const),
    /// `[1.0, 2.0]`, `[[1, 2], [3, 4]]`: a static array literal.
    Array {
        shape: Vec<usize>,
        data: Rc<Vec<f64>>,
        kind: ArrKind,
    },
    Str(Rc<str>),
    /// `none` (in `in_axes`).
    None,
    Tuple(Rc<Vec<Val>>),
    F(Rc<FnVal>),
    /// A dimension variable used in an expression: its size, and its name
    /// so reductions can take it as an axis (`sum(x, features)`).
    Dim(Rc<str>, usize),
}

impl Val {
    pub fn tuple(items: Vec<Val>) -> Val {
        Val::Tuple(Rc::new(items))
    }

    /// A short description for messages ("a function", "a tuple of 2").
    pub fn describe(&self) -> String {
        match self {
            Val::T(_) => "a tensor".into(),
            Val::Const(Const::Int(i)) => format!("the integer {i}"),
            Val::Const(Const::Float(f)) => format!("the number {f}"),
            Val::Const(Const::Bool(b)) => format!("`{b}`"),
            Val::Array { .. } => "an array literal".into(),
            Val::Str(_) => "a string".into(),
            Val::None => "`none`".into(),
            Val::Tuple(t) => format!("a tuple of {}", t.len()),
            Val::F(f) => format!("the function `{}`", f.describe()),
            Val::Dim(n, s) => format!("the dimension `{n}` (= {s})"),
        }
    }
}

/// The shape of a value's structure with tensor types at the leaves: the
/// key of per-type instantiation and the layout of flattened results.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Tree {
    Leaf(TensorType),
    Tuple(Vec<Tree>),
}

impl Tree {
    pub fn leaves(&self) -> Vec<TensorType> {
        let mut out = Vec::new();
        self.collect(&mut out);
        out
    }

    fn collect(&self, out: &mut Vec<TensorType>) {
        match self {
            Tree::Leaf(t) => out.push(t.clone()),
            Tree::Tuple(ts) => ts.iter().for_each(|t| t.collect(out)),
        }
    }

    pub fn n_leaves(&self) -> usize {
        match self {
            Tree::Leaf(_) => 1,
            Tree::Tuple(ts) => ts.iter().map(Tree::n_leaves).sum(),
        }
    }

    /// Rebuilds a value of this structure from leaf tensors, in order.
    pub fn rebuild(&self, leaves: &mut impl Iterator<Item = Tv>) -> Option<Val> {
        Some(match self {
            Tree::Leaf(_) => Val::T(leaves.next()?),
            Tree::Tuple(ts) => Val::tuple(ts.iter().map(|t| t.rebuild(leaves)).collect::<Option<Vec<_>>>()?),
        })
    }
}

impl std::fmt::Display for Tree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Tree::Leaf(t) => write!(f, "{t}"),
            Tree::Tuple(ts) => {
                write!(f, "(")?;
                for (i, t) in ts.iter().enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{t}")?;
                }
                write!(f, ")")
            }
        }
    }
}

/// Which parameters a gradient is taken with respect to, as written.
#[derive(Debug, Clone)]
pub enum WrtSpec {
    /// Every floating-point parameter.
    All,
    /// `wrt=w` (one gradient) or `wrt=(w, b)` (a tuple, in this order).
    Names { names: Vec<Ident>, single: bool },
}

/// A transform not yet applied to arguments, with its options.
#[derive(Debug, Clone)]
pub struct TransformFn {
    pub kind: TransformKind,
    pub inner: Rc<FnVal>,
    pub wrt: WrtSpec,
    /// `vmap`: `axis=` (applied to every batched argument and result).
    pub axis: Option<i64>,
    /// `vmap`: `in_axes=` (one entry per argument, nested like the argument).
    pub in_axes: Option<Val>,
    /// `vmap`: `out_axes=`.
    pub out_axes: Option<Val>,
    /// `checkpoint`: `policy=` (`"nothing"` or `"dots"`).
    pub policy: graft_core::transform::Policy,
    /// `vmap`: `axis_name=`, the name collectives inside use for the batch.
    pub axis_name: Option<Rc<str>>,
    /// Where the transform was written.
    pub span: Span,
}

/// A function value: something that can be called or transformed.
#[derive(Debug, Clone)]
pub enum FnVal {
    /// A top-level `def`, by index (with its attributes applied).
    Def(usize, Rc<str>),
    /// A `def`'s body as a plain function, ignoring `@grad`/`@jvp`
    /// attributes (what those attributes differentiate).
    DefBody(usize, Rc<str>),
    /// A standard-library function.
    Builtin(Rc<str>),
    /// `fn (params) -> body` with the environment it was written in.
    Lambda {
        params: Rc<Vec<LambdaParam>>,
        body: Rc<crate::ast::Expr>,
        env: super::Env,
        span: Span,
    },
    Transform(TransformFn),
    /// The tangent map `linearize(f, primals)` returns.
    Linear(Rc<LinearFn>),
}

/// The linear part of `f`'s JVP at the primals `linearize` was given:
/// `rest(residuals..., tangents of the float leaves...) -> (output tangents...)`,
/// with the residuals computed once, where `linearize` was applied.
#[derive(Debug)]
pub struct LinearFn {
    pub rest: graft_core::Func,
    pub residuals: Vec<Tv>,
    /// Structure of the primals, which the tangents must have.
    pub primals: Vec<Tree>,
    /// Structure of `f`'s result (and of the output tangents).
    pub out: Tree,
    /// How the function is named in messages (`f_jvp`).
    pub name: String,
}

impl FnVal {
    /// How the function is named in messages: `loss`, `fn`, `vmap(grad(loss))`.
    pub fn describe(&self) -> String {
        match self {
            FnVal::Def(_, n) | FnVal::DefBody(_, n) => n.to_string(),
            FnVal::Builtin(n) => n.to_string(),
            FnVal::Lambda { .. } => "fn".into(),
            FnVal::Transform(t) => format!("{}({})", t.kind.name(), t.inner.describe()),
            FnVal::Linear(lf) => lf.name.clone(),
        }
    }
}
