//! Generic and higher-order defs: `def sgd[T](p: T, g: T, lr: f32) -> T`,
//! `def newton(f: fn, x: f64) -> f64`, `def adder(a: f32) -> fn`.
//!
//! A def is generic when it has type parameters or a `fn` in its signature
//! ([`crate::ast::Def::is_generic`]). Such a def is specialised at each
//! call: its arguments are matched against the declared types, each type
//! parameter is fixed by the first argument that mentions it (a tensor of
//! any rank and dtype, a tuple tree of them, or a function) and every later
//! mention must have exactly that type; then the body is evaluated in the
//! caller's frame, like a lambda's, so function arguments and results (and
//! the tensors they capture) need no run-time form. Concrete defs keep their
//! per-type instances (`Lower::instantiate`).
//!
//! Invariants: a generic def never becomes a standalone `Func` (so it is no
//! entry and `Module::check` checks it only through its calls); a generic
//! def that names itself is rejected by `check.rs` (recursion), while one
//! that is re-entered through a function argument is fine (GradBench
//! `saddle`'s solver runs an inner solve inside its objective) and a cycle
//! through arguments stops at the nesting limit; errors in the body carry a
//! note naming the call and the bindings it was specialised with.

use super::value::Val;
use super::{order_args, result_span, ArgVal, Dims, Env, Lower};
use crate::ast::{self, Span, TypeKind};
use crate::diag::{Diagnostic, Stage};
use graft_core::TensorType;
use std::collections::HashMap;
use std::fmt;

/// What a type parameter stands for at one call: the structure of a value
/// with tensor types at its leaves, where a leaf may also be a function.
#[derive(Debug, Clone, PartialEq)]
pub enum Shape {
    Leaf(TensorType),
    Tuple(Vec<Shape>),
    Fn,
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Shape::Leaf(t) => write!(f, "{t}"),
            Shape::Fn => f.write_str("fn"),
            Shape::Tuple(ts) => {
                f.write_str("(")?;
                for (i, t) in ts.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{t}")?;
                }
                if ts.len() == 1 {
                    f.write_str(",")?;
                }
                f.write_str(")")
            }
        }
    }
}

/// At most this many "in `f` specialised at ..." notes on one diagnostic.
const MAX_CALL_NOTES: usize = 8;

/// What one type parameter is bound to in one call.
#[derive(Debug, Clone)]
pub struct Binding {
    pub shape: Shape,
    /// What fixed it ("argument `p` of `sgd`").
    pub from: String,
    /// Fixed by a literal-only value, which stayed a literal: later
    /// literals for it stay literals too.
    pub literal: bool,
}

/// Type parameter bindings of one call, by name.
pub type TVars = HashMap<String, Binding>;

/// Whether a value holds only literals (no tensor, no function): such an
/// argument takes its dtype from a type parameter another argument fixes.
fn literal_only(v: &Val) -> bool {
    match v {
        Val::Const(_) | Val::Array { .. } | Val::Dim(..) => true,
        Val::Tuple(items) => items.iter().all(literal_only),
        _ => false,
    }
}

/// The type a literal-only value gets by default (f32 floats, i32 integers).
fn literal_shape(v: &Val) -> Shape {
    match v {
        Val::Tuple(items) => Shape::Tuple(items.iter().map(literal_shape).collect()),
        Val::Const(c) => Shape::Leaf(TensorType::scalar(c.default_dtype())),
        Val::Array { shape, kind, .. } => {
            let dt = match kind {
                super::value::ArrKind::Bool => graft_core::DType::Bool,
                super::value::ArrKind::Int => graft_core::DType::I32,
                super::value::ArrKind::Float => graft_core::DType::F32,
            };
            Shape::Leaf(TensorType::new(dt, shape.clone()))
        }
        _ => Shape::Leaf(TensorType::scalar(graft_core::DType::I32)),
    }
}

/// Whether two shapes agree in structure and leaf shapes (dtypes aside:
/// literals have none yet).
fn same_dims(a: &Shape, b: &Shape) -> bool {
    match (a, b) {
        (Shape::Leaf(x), Shape::Leaf(y)) => x.shape == y.shape,
        (Shape::Tuple(xs), Shape::Tuple(ys)) => xs.len() == ys.len() && xs.iter().zip(ys).all(|(x, y)| same_dims(x, y)),
        (Shape::Fn, Shape::Fn) => true,
        _ => false,
    }
}

impl Lower<'_> {
    /// A value's structure as messages show it: `(f32[3], fn)`, `the number 2`.
    pub fn describe_tree(&mut self, v: &Val) -> String {
        match v {
            Val::T(tv) => {
                let x = self.import(*tv);
                self.ty(x).to_string()
            }
            Val::F(_) => "fn".into(),
            Val::Array { shape, .. } => format!(
                "an array literal of shape [{}]",
                shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")
            ),
            Val::Tuple(items) => {
                let parts: Vec<String> = items.iter().map(|it| self.describe_tree(it)).collect();
                if parts.len() == 1 {
                    format!("({},)", parts[0])
                } else {
                    format!("({})", parts.join(", "))
                }
            }
            other => other.describe(),
        }
    }

    /// The value with literals made tensors (default dtypes) and its shape.
    fn shape_of(&mut self, v: &Val, span: &Span) -> Result<(Val, Shape), Diagnostic> {
        match v {
            Val::F(_) => Ok((v.clone(), Shape::Fn)),
            Val::Tuple(items) => {
                let mut vals = Vec::new();
                let mut shapes = Vec::new();
                for it in items.iter() {
                    let (v, s) = self.shape_of(it, span)?;
                    vals.push(v);
                    shapes.push(s);
                }
                Ok((Val::tuple(vals), Shape::Tuple(shapes)))
            }
            Val::Str(_) | Val::None => {
                Err(self.err(Stage::Type, span, format!("expected a value, found {}", v.describe())))
            }
            _ => {
                let t = self.tensor(v, span)?;
                Ok((Val::T(self.tv(t)), Shape::Leaf(self.ty(t))))
            }
        }
    }

    /// `v` matched against a bound shape (literals take the leaf's dtype
    /// and must have its shape); `None` when it does not fit.
    fn fit_shape(&mut self, v: &Val, s: &Shape, span: &Span) -> Option<Val> {
        match (s, v) {
            (Shape::Fn, Val::F(_)) => Some(v.clone()),
            (Shape::Tuple(ss), Val::Tuple(items)) if ss.len() == items.len() => {
                let mut out = Vec::new();
                for (s, it) in ss.iter().zip(items.iter()) {
                    out.push(self.fit_shape(it, s, span)?);
                }
                Some(Val::tuple(out))
            }
            (Shape::Leaf(tt), Val::T(_) | Val::Const(_) | Val::Array { .. } | Val::Dim(..)) => {
                let x = self.tensor_as(v, tt.dtype, span).ok()?;
                (self.ty(x) == *tt).then(|| Val::T(self.tv(x)))
            }
            _ => None,
        }
    }

    /// Checks `v` against a declared type that may mention type parameters
    /// (bound in `tv`) and `fn`; concrete parts go through [`Lower::coerce`].
    pub fn coerce_generic(
        &mut self,
        v: &Val,
        ty: &ast::Type,
        dims: &mut Dims,
        tv: &mut TVars,
        span: &Span,
        what: &str,
    ) -> Result<Val, Diagnostic> {
        match &ty.kind {
            TypeKind::Var(id) => match tv.get(&id.name).cloned() {
                Some(b) if b.literal && literal_only(v) && same_dims(&literal_shape(v), &b.shape) => Ok(v.clone()),
                Some(Binding { shape, from, .. }) => match self.fit_shape(v, &shape, span) {
                    Some(v) => Ok(v),
                    None => {
                        let got = self.describe_tree(v);
                        Err(self
                            .err(
                                Stage::Type,
                                span,
                                format!("{what} must have type `{}` = {shape} (fixed by {from}), found {got}", id.name),
                            )
                            .with_label(format!("this is {got}"))
                            .with_secondary(id.span.clone(), format!("`{}` here", id.name))
                            .with_note(format!(
                                "note: every use of the type parameter `{}` in one call has the same type: the same \
                                 tuple structure, dtypes and shapes",
                                id.name
                            )))
                    }
                },
                None if literal_only(v) => {
                    // Nothing fixes a dtype yet: the literal stays a literal
                    // (typed by its uses, like any literal); later mentions
                    // of the parameter see its default type.
                    let shape = literal_shape(v);
                    tv.insert(id.name.clone(), Binding { shape, from: what.to_string(), literal: true });
                    Ok(v.clone())
                }
                None => {
                    let (v, shape) = self.shape_of(v, span)?;
                    tv.insert(id.name.clone(), Binding { shape, from: what.to_string(), literal: false });
                    Ok(v)
                }
            },
            TypeKind::Fn => match v {
                Val::F(_) => Ok(v.clone()),
                _ => {
                    let got = self.describe_tree(v);
                    Err(self
                        .err(Stage::Type, span, format!("{what} must be a function (`fn`), found {got}"))
                        .with_label(format!("this is {got}"))
                        .with_secondary(ty.span.clone(), "declared here"))
                }
            },
            TypeKind::Tuple(ts) if ty.is_generic() => {
                let got = match v {
                    Val::Tuple(items) if items.len() == ts.len() => items.clone(),
                    _ => {
                        let got = self.describe_tree(v);
                        return Err(self
                            .err(Stage::Type, span, format!("{what} must be a tuple of {}, found {got}", ts.len()))
                            .with_label(format!("this is {got}"))
                            .with_secondary(ty.span.clone(), "declared here"));
                    }
                };
                let mut out = Vec::new();
                for (i, (it, t)) in got.iter().zip(ts).enumerate() {
                    out.push(self.coerce_generic(it, t, dims, tv, span, &format!("element {i} of {what}"))?);
                }
                Ok(Val::tuple(out))
            }
            _ => self.coerce(v, ty, dims, span, what),
        }
    }

    /// Calls the generic def `idx`: arguments matched and type parameters
    /// fixed, then the body evaluated in the current frame.
    pub fn call_generic(&mut self, idx: usize, args: Vec<ArgVal>, span: &Span) -> Result<Val, Diagnostic> {
        let p = self.p;
        let def = &p.program.defs[idx];
        let name = def.name.name.as_str();
        let names: Vec<String> = def.params.iter().map(|p| p.name.name.clone()).collect();
        let args = order_args(self, &names, 0, args, name, span)?;
        p.specialised.borrow_mut().insert(idx);
        // Arguments that are literals only and declared as a bare type
        // parameter are matched last, so they take the dtype a tensor fixes.
        let mut order: Vec<usize> = (0..args.len()).collect();
        order.sort_by_key(|&i| literal_only(&args[i].val) && matches!(def.params[i].ty.kind, TypeKind::Var(_)));
        let mut dims = Dims::new();
        let mut tv = TVars::new();
        let mut coerced: Vec<Option<Val>> = vec![None; args.len()];
        for i in order {
            let prm = &def.params[i];
            let what = format!("argument `{}` of `{name}`", prm.name.name);
            coerced[i] = Some(self.coerce_generic(&args[i].val, &prm.ty, &mut dims, &mut tv, &args[i].span, &what)?);
        }
        let saved = self.loc.clone();
        let r = (|| {
            let mut env = Env::default();
            for (d, (n, _)) in &dims {
                env = env.bind(d, Val::Dim(d.as_str().into(), *n));
            }
            // Every slot was filled above (each argument index once).
            for (v, prm) in coerced.into_iter().flatten().zip(&def.params) {
                self.name_value(&v, &prm.name.name);
                env = env.bind(&prm.name.name, v);
            }
            let out = self.expr(&def.body, &env)?;
            match &def.ret {
                Some(rt) => {
                    let what = format!("the result of `{name}`");
                    self.coerce_generic(&out, rt, &mut dims, &mut tv, &result_span(&def.body), &what)
                }
                None => Ok(out),
            }
        })();
        self.loc = saved;
        self.restore_loc();
        r.map_err(|d| {
            // Through many nested calls (up to the depth limit) the first
            // notes say enough.
            if d.notes.iter().filter(|n| n.starts_with("note: in `")).count() >= MAX_CALL_NOTES {
                return d;
            }
            let mut binds: Vec<String> = def
                .tparams
                .iter()
                .filter_map(|t| {
                    tv.get(&t.name).map(|b| {
                        let lit = if b.literal { " (a literal)" } else { "" };
                        format!("{} = {}{lit}", t.name, b.shape)
                    })
                })
                .collect();
            let mut dnames: Vec<(&String, &(usize, String))> = dims.iter().collect();
            dnames.sort();
            binds.extend(dnames.into_iter().map(|(n, (s, _))| format!("{n} = {s}")));
            let with = if binds.is_empty() { String::new() } else { format!(" with {}", binds.join(", ")) };
            d.with_note(format!("note: in `{name}` specialised at {}{with}", self.p.pos(span)))
        })
    }
}
