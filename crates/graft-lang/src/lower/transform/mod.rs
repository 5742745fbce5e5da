//! Transforms as compiler features: `grad`, `value_and_grad`, `jvp`,
//! `vjp`, `vmap`, `checkpoint`, `jacfwd`, `jacrev`, `hessian`, and the
//! `@grad(p)` / `@jvp(p)` attributes.
//!
//! Applying a transform lowers its function, at the argument types of the
//! call, into a standalone `Func` (tensors it closes over become extra
//! parameters), rewrites that `Func` with graft-core (`ad`, `batch`, `jac`)
//! and inlines the result, so the program keeps only primitives. Captured
//! tensors are constants for every transform: not differentiated, not
//! batched, zero tangents.
//!
//! Semantics chosen where JAX leaves room:
//! - `grad(f)` differentiates every parameter whose leaves are all floating
//!   point; one such parameter gives one gradient, several a tuple.
//!   `grad(f, wrt=w)` gives one gradient, `wrt=(a, b)` a tuple in that order.
//! - `vmap(f, axis=k)` batches every argument along axis `k` except rank-0
//!   arguments and arguments declared as scalars (shared by the batch), and
//!   puts the batch axis of every result at `k`. `in_axes`/`out_axes` take
//!   one entry per argument/result (an integer or `none`), nested like it.
//!   An out axis past a result's rank clamps (`min(k, rank)`, or for
//!   negative `k`, `max(rank + 1 + k, 0)`; `batch::place_out_axes`), so a
//!   per-example scalar under `axis=1` gives a vector.
//! - Several `@grad(p)` attributes make one gradient function returning the
//!   tuple of gradients in attribute order; `@jvp(p)` makes a function that
//!   takes the def's arguments plus one tangent per `@jvp` parameter and
//!   returns the output tangent.

use super::value::{FnVal, LinearFn, TransformFn, Tree, Tv, Val, WrtSpec};
use super::{ArgVal, Env, Lower, Standalone};
use crate::ast::{Arg, Attr, AttrKind, ExprKind, Span, TransformKind};
use crate::diag::{Diagnostic, Stage};
use graft_core::transform::{Policy, Transform, VmapAxes, Wrt};
use graft_core::{Func, IrError, Value};
use std::rc::Rc;

mod apply;
mod attrs;
mod direct;
mod vmap;

pub use apply::apply;
pub use attrs::call_attr_def;
pub use direct::{call_linear, jvp_call, linearize_call, vjp_call};

/// Evaluates a transform expression: a function value, or for `jvp`/`vjp`
/// (which take their arguments directly) the result.
pub fn make(
    l: &mut Lower<'_>,
    kind: TransformKind,
    func: &crate::ast::Expr,
    args: &[Arg],
    env: &Env,
    span: &Span,
) -> Result<Val, Diagnostic> {
    let f = match l.expr(func, env)? {
        Val::F(f) => f,
        other => {
            return Err(l.err(
                Stage::Transform,
                &func.span,
                format!("`{}` must be applied to a function, found {}", kind.name(), other.describe()),
            ))
        }
    };
    let mut tf = TransformFn {
        kind,
        inner: f.clone(),
        wrt: WrtSpec::All,
        axis: None,
        in_axes: None,
        out_axes: None,
        policy: Default::default(),
        axis_name: None,
        span: span.clone(),
    };
    match kind {
        TransformKind::Linearize => {
            let [p] = args else {
                return Err(l.err(Stage::Transform, span, "`linearize` takes a function and the primals").with_note(
                    "help: write `linearize(f, (x, y))`; it returns `(y, f_jvp)`: the value and the tangent map",
                ));
            };
            let pv = l.expr(&p.value, env)?;
            l.set_span(span);
            let prims = match pv {
                Val::Tuple(items) => items.to_vec(),
                other => vec![other],
            };
            let desc = format!("linearize({})", f.describe());
            let pos = l.p.pos(span);
            return linearize_call(l, &f, prims, &p.span, span).map_err(|d| chain(d, &desc, &pos));
        }
        TransformKind::CustomJvp | TransformKind::CustomVjp => {
            return Err(l
                .err(Stage::Transform, span, format!("`{}` is a def attribute, not an expression", kind.name()))
                .with_note(format!("help: write `{}` above the def", crate::ast::transform_spelling(kind))))
        }
        TransformKind::Jvp | TransformKind::Vjp => {
            let [p, t] = args else {
                let what = if kind == TransformKind::Jvp { "jvp(f, (x, y), (tx, ty))" } else { "vjp(f, (x, y), ct)" };
                return Err(l
                    .err(Stage::Transform, span, format!("`{}` takes a function and two more arguments", kind.name()))
                    .with_note(format!("help: write `{what}`")));
            };
            let pv = l.expr(&p.value, env)?;
            let tv = l.expr(&t.value, env)?;
            l.set_span(span);
            let prims = match pv {
                Val::Tuple(items) => items.to_vec(),
                other => vec![other],
            };
            let desc = format!("{}({})", kind.name(), f.describe());
            let pos = l.p.pos(span);
            let r = if kind == TransformKind::Jvp {
                let tans: Vec<Option<Val>> = match tv {
                    Val::Tuple(items) => items.iter().cloned().map(Some).collect(),
                    other => vec![Some(other)],
                };
                if tans.len() != prims.len() {
                    return Err(l.err(
                        Stage::Transform,
                        &t.span,
                        format!("jvp got {} primals but {} tangents", prims.len(), tans.len()),
                    ));
                }
                jvp_call(l, &f, prims, &p.span, tans, &t.span, span).map(|(o, t)| Val::tuple(vec![o, t]))
            } else {
                vjp_call(l, &f, prims, &p.span, tv, &t.span, span)
            };
            return r.map_err(|d| chain(d, &desc, &pos));
        }
        _ => {}
    }
    for a in args {
        match (kind, a.name.as_ref().map(|n| n.name.as_str())) {
            (
                TransformKind::Grad
                | TransformKind::ValueAndGrad
                | TransformKind::Jacfwd
                | TransformKind::Jacrev
                | TransformKind::Jacobian
                | TransformKind::Hessian,
                Some("wrt"),
            ) => {
                tf.wrt = wrt_spec(l, a)?;
            }
            (TransformKind::Vmap, Some("axis") | None) => {
                let v = l.expr(&a.value, env)?;
                match super::expr::static_int(&v) {
                    Some(k) => tf.axis = Some(k),
                    None => {
                        return Err(l.err(
                            Stage::Transform,
                            &a.value.span,
                            format!("`axis` must be an integer, found {}", v.describe()),
                        ))
                    }
                }
            }
            (TransformKind::Checkpoint, Some("policy")) => {
                let v = l.expr(&a.value, env)?;
                tf.policy = match &v {
                    Val::Str(s) => Policy::parse(s),
                    _ => None,
                }
                .ok_or_else(|| {
                    l.err(
                        Stage::Transform,
                        &a.value.span,
                        format!("`policy` is \"nothing\" or \"dots\", found {}", v.describe()),
                    )
                })?;
            }
            (TransformKind::Vmap, Some("in_axes")) => tf.in_axes = Some(l.expr(&a.value, env)?),
            (TransformKind::Vmap, Some("axis_name")) => match l.expr(&a.value, env)? {
                Val::Str(s) => tf.axis_name = Some(Rc::from(&*s)),
                v => {
                    return Err(l.err(
                        Stage::Transform,
                        &a.value.span,
                        format!("`axis_name` must be a string, found {}", v.describe()),
                    ))
                }
            },
            (TransformKind::Vmap, Some("out_axes")) => tf.out_axes = Some(l.expr(&a.value, env)?),
            (_, name) => {
                let msg = match name {
                    Some(n) => format!("`{}` has no option `{n}`", kind.name()),
                    None => format!("`{}` takes only the function as a positional argument", kind.name()),
                };
                return Err(l.err(Stage::Transform, &a.span, msg).with_note(format!("help: {}", usage(kind))));
            }
        }
    }
    if tf.axis.is_some() && tf.in_axes.is_some() {
        return Err(l.err(Stage::Transform, span, "give either `axis` or `in_axes`, not both"));
    }
    Ok(Val::F(Rc::new(FnVal::Transform(tf))))
}

pub fn usage(kind: TransformKind) -> &'static str {
    match kind {
        TransformKind::Grad => "grad(f) or grad(f, wrt=(a, b))",
        TransformKind::ValueAndGrad => "value_and_grad(f) or value_and_grad(f, wrt=(a, b))",
        TransformKind::Vmap => "vmap(f, axis=0) or vmap(f, in_axes=(0, none), out_axes=0, axis_name=\"i\")",
        TransformKind::Checkpoint => "checkpoint(f) or checkpoint(f, policy=\"dots\")",
        TransformKind::Jacfwd => "jacfwd(f) or jacfwd(f, wrt=x)",
        TransformKind::Jacrev => "jacrev(f) or jacrev(f, wrt=x)",
        TransformKind::Jacobian => "jacobian(f) or jacobian(f, wrt=x)",
        TransformKind::Hessian => "hessian(f) or hessian(f, wrt=x)",
        TransformKind::Jvp => "jvp(f, (x, y), (tx, ty))",
        TransformKind::Vjp => "vjp(f, (x, y), ct)",
        TransformKind::Linearize => "linearize(f, (x, y))",
        TransformKind::CustomJvp => "@custom_jvp(rule) above a def",
        TransformKind::CustomVjp => "@custom_vjp(fwd, bwd) above a def",
    }
}

pub(super) fn wrt_spec(l: &Lower<'_>, a: &Arg) -> Result<WrtSpec, Diagnostic> {
    let one = |e: &crate::ast::Expr| match &e.kind {
        ExprKind::Var(id) => Ok(id.clone()),
        _ => Err(l.err(
            Stage::Transform,
            &e.span,
            "`wrt` names parameters of the function: write `wrt=x` or `wrt=(x, y)`",
        )),
    };
    match &a.value.kind {
        ExprKind::Tuple(items) => {
            Ok(WrtSpec::Names { names: items.iter().map(one).collect::<Result<_, _>>()?, single: false })
        }
        _ => Ok(WrtSpec::Names { names: vec![one(&a.value)?], single: true }),
    }
}

/// Adds "in grad(loss) at file:3:5" to a diagnostic raised inside a transform.
pub(super) fn chain(mut d: Diagnostic, desc: &str, pos: &str) -> Diagnostic {
    let note = format!("note: in {desc} at {pos}");
    if !d.notes.contains(&note) {
        d.notes.push(note);
    }
    d
}

/// A graft-core error while rewriting. When the rule that failed was
/// rewriting an equation from this file, the diagnostic points at that
/// equation's source (the user's line) and labels the transform's call;
/// otherwise it points at the call.
pub(super) fn tf_err(l: &Lower<'_>, e: IrError, desc: &str, span: &Span) -> Diagnostic {
    let (e, loc) = e.located();
    let msg = match e {
        IrError::NoRule { prim, rule, msg } => {
            format!("{desc} cannot be computed: the primitive `{prim}` has no {rule} rule ({msg})")
        }
        other => format!("{desc} failed: {other}"),
    };
    let at = loc.filter(|loc| *loc.file == *l.p.file).and_then(|loc| l.p.span_at(loc.line, loc.col));
    let note = format!("note: in {desc} at {}", l.p.pos(span));
    match at {
        Some(at) if at.start != span.start => Diagnostic::new(Stage::Transform, at, msg)
            .with_label("the operation the transform could not rewrite")
            .with_secondary(span.clone(), format!("{desc} applied here"))
            .with_note(note),
        _ => Diagnostic::new(Stage::Transform, span.clone(), msg).with_note(note),
    }
}

/// Applies a core transform to a standalone function (whose parameters are
/// the call's leaves, then the captures), with errors as diagnostics.
pub(super) fn apply_core(l: &Lower<'_>, t: &Transform, f: &Func, desc: &str, span: &Span) -> Result<Func, Diagnostic> {
    let mut outer = f.param_types();
    if let Transform::Jvp { wrt: Wrt::Positions(ps) } | Transform::Linearize { wrt: Wrt::Positions(ps) } = t {
        outer.extend(ps.iter().map(|&p| f.ty(f.params[p]).clone()));
    }
    t.apply(f, &outer).map_err(|e| tf_err(l, e, desc, span))
}

/// Parameter names of a function value, where it has them.
pub fn param_names(l: &Lower<'_>, f: &FnVal) -> Option<Vec<String>> {
    match f {
        FnVal::Def(i, _) | FnVal::DefBody(i, _) => {
            Some(l.p.program.defs[*i].params.iter().map(|p| p.name.name.clone()).collect())
        }
        FnVal::Lambda { params, .. } => params
            .iter()
            .map(|p| match &p.pat.kind {
                crate::ast::PatternKind::Var(id) => Some(id.name.clone()),
                _ => None,
            })
            .collect(),
        FnVal::Transform(t) => match t.kind {
            TransformKind::Grad
            | TransformKind::ValueAndGrad
            | TransformKind::Vmap
            | TransformKind::Checkpoint
            | TransformKind::Jacfwd
            | TransformKind::Jacrev
            | TransformKind::Jacobian
            | TransformKind::Hessian => param_names(l, &t.inner),
            _ => None,
        },
        FnVal::Builtin(_) | FnVal::Linear(_) => None,
    }
}

/// The def a chain of transforms is applied to, if any.
pub(super) fn root_def(f: &FnVal) -> Option<usize> {
    match f {
        FnVal::Def(i, _) | FnVal::DefBody(i, _) => Some(*i),
        FnVal::Transform(t) => root_def(&t.inner),
        _ => None,
    }
}

/// Arguments of a transformed function as leaves of the current frame.
pub(super) struct Prepared {
    pub(super) leaves: Vec<Value>,
    pub(super) trees: Vec<Tree>,
    pub(super) spans: Vec<Span>,
}

pub(super) fn prepare(l: &mut Lower<'_>, f: &FnVal, args: Vec<ArgVal>, span: &Span) -> Result<Prepared, Diagnostic> {
    let args = match (param_names(l, f), args.iter().any(|a| a.name.is_some())) {
        (Some(names), true) => super::order_args(l, &names, 0, args, &f.describe(), span)?,
        (None, true) => {
            let a = args.iter().find(|a| a.name.is_some()).map(|a| a.span.clone()).unwrap_or(span.clone());
            return Err(l.err(Stage::Type, &a, "this function takes positional arguments only"));
        }
        _ => args,
    };
    // Literal arguments of a def take the declared dtype.
    let declared = root_def(f).map(|i| &l.p.program.defs[i].params);
    let mut out = Prepared { leaves: Vec::new(), trees: Vec::new(), spans: Vec::new() };
    for (k, a) in args.iter().enumerate() {
        let v = match (declared.and_then(|ps| ps.get(k)), &a.val) {
            (Some(p), Val::Const(_) | Val::Array { .. } | Val::Dim(..)) if matches!(f, FnVal::Transform(_)) => {
                // Only the dtype is taken from the declaration here; shapes are checked by the def itself.
                match dtype_of_type(&p.ty) {
                    Some(dt) => Val::T(Tv { level: l.level(), v: l.tensor_as(&a.val, dt, &a.span)? }),
                    None => a.val.clone(),
                }
            }
            _ => a.val.clone(),
        };
        let (lv, t) = l.flatten(&v, &a.span)?;
        out.leaves.extend(lv);
        out.trees.push(t);
        out.spans.push(a.span.clone());
    }
    Ok(out)
}

pub(super) fn dtype_of_type(t: &crate::ast::Type) -> Option<graft_core::DType> {
    match &t.kind {
        crate::ast::TypeKind::Scalar(s) | crate::ast::TypeKind::Tensor { dtype: s, .. } => Some(super::dtype_of(*s)),
        crate::ast::TypeKind::Tuple(_) | crate::ast::TypeKind::Var(_) | crate::ast::TypeKind::Fn => None,
    }
}

/// Lowers `f` at these argument structures into a standalone function.
pub(super) fn lower_fn(
    l: &mut Lower<'_>,
    f: &Rc<FnVal>,
    trees: &[Tree],
    spans: &[Span],
    span: &Span,
) -> Result<Standalone, Diagnostic> {
    let name = match &**f {
        FnVal::Def(i, _) | FnVal::DefBody(i, _) => l.p.program.defs[*i].name.name.clone(),
        FnVal::Lambda { .. } => "lambda".to_string(),
        other => other.describe().replace(['(', ')'], "_"),
    };
    let spans = spans.to_vec();
    let f = f.clone();
    l.standalone(&name, trees, span, move |this, vals| {
        let args = vals.into_iter().zip(spans).map(|(val, span)| ArgVal { name: None, val, span }).collect();
        this.call_fn(&f, args, span)
    })
}

/// Inlines a transformed function with the real arguments and the captures.
pub(super) fn inline_with(
    l: &mut Lower<'_>,
    g: &Func,
    leaves: &[Value],
    caps: &[Tv],
    span: &Span,
) -> Result<Vec<Value>, Diagnostic> {
    let mut args = leaves.to_vec();
    for &c in caps {
        args.push(l.import(c));
    }
    l.inline(g, &args, span)
}

pub(super) fn rebuild(l: &Lower<'_>, tree: &Tree, vals: &[Value]) -> Val {
    let level = l.level();
    tree.rebuild(&mut vals.iter().map(|&v| Tv { level, v }))
        .expect("internal error: a transformed function returns its tree's leaves")
}

/// Leaf offset of each argument.
pub(super) fn offsets(trees: &[Tree]) -> Vec<usize> {
    let mut o = Vec::new();
    let mut k = 0;
    for t in trees {
        o.push(k);
        k += t.n_leaves();
    }
    o
}
