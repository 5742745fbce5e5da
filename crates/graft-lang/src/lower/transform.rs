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
        TransformKind::Vmap => "vmap(f, axis=0) or vmap(f, in_axes=(0, none), out_axes=0)",
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

fn wrt_spec(l: &Lower<'_>, a: &Arg) -> Result<WrtSpec, Diagnostic> {
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
fn chain(mut d: Diagnostic, desc: &str, pos: &str) -> Diagnostic {
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
fn tf_err(l: &Lower<'_>, e: IrError, desc: &str, span: &Span) -> Diagnostic {
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
fn apply_core(l: &Lower<'_>, t: &Transform, f: &Func, desc: &str, span: &Span) -> Result<Func, Diagnostic> {
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
fn root_def(f: &FnVal) -> Option<usize> {
    match f {
        FnVal::Def(i, _) | FnVal::DefBody(i, _) => Some(*i),
        FnVal::Transform(t) => root_def(&t.inner),
        _ => None,
    }
}

/// Arguments of a transformed function as leaves of the current frame.
struct Prepared {
    leaves: Vec<Value>,
    trees: Vec<Tree>,
    spans: Vec<Span>,
}

fn prepare(l: &mut Lower<'_>, f: &FnVal, args: Vec<ArgVal>, span: &Span) -> Result<Prepared, Diagnostic> {
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

fn dtype_of_type(t: &crate::ast::Type) -> Option<graft_core::DType> {
    match &t.kind {
        crate::ast::TypeKind::Scalar(s) | crate::ast::TypeKind::Tensor { dtype: s, .. } => Some(super::dtype_of(*s)),
        crate::ast::TypeKind::Tuple(_) => None,
    }
}

/// Lowers `f` at these argument structures into a standalone function.
fn lower_fn(
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
fn inline_with(
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

fn rebuild(l: &Lower<'_>, tree: &Tree, vals: &[Value]) -> Val {
    let level = l.level();
    tree.rebuild(&mut vals.iter().map(|&v| Tv { level, v }))
        .expect("internal error: a transformed function returns its tree's leaves")
}

/// Leaf offset of each argument.
fn offsets(trees: &[Tree]) -> Vec<usize> {
    let mut o = Vec::new();
    let mut k = 0;
    for t in trees {
        o.push(k);
        k += t.n_leaves();
    }
    o
}

/// Calls a transformed function.
pub fn apply(l: &mut Lower<'_>, tf: &TransformFn, args: Vec<ArgVal>, span: &Span) -> Result<Val, Diagnostic> {
    let desc = format!("{}({})", tf.kind.name(), tf.inner.describe());
    let pos = l.p.pos(span);
    apply_inner(l, tf, args, span, &desc).map_err(|d| chain(d, &desc, &pos))
}

fn apply_inner(
    l: &mut Lower<'_>,
    tf: &TransformFn,
    args: Vec<ArgVal>,
    span: &Span,
    desc: &str,
) -> Result<Val, Diagnostic> {
    let f = &tf.inner;
    match tf.kind {
        TransformKind::Grad | TransformKind::ValueAndGrad => {
            let pr = prepare(l, f, args, span)?;
            let st = lower_fn(l, f, &pr.trees, &pr.spans, span)?;
            match &st.out {
                Tree::Leaf(t) if t.dtype.is_float() && t.rank() == 0 => {}
                other => {
                    return Err(l
                        .err(
                            Stage::Type,
                            span,
                            format!(
                                "{desc} needs `{}` to return one floating-point scalar, but it returns {other}",
                                f.describe()
                            ),
                        )
                        .with_label("the gradient is taken here")
                        .with_note("help: reduce the result to a scalar first, e.g. with `sum(...)` or `mean(...)`"))
                }
            }
            let (params, single) = select_params(l, tf, &pr.trees, span)?;
            let offs = offsets(&pr.trees);
            let mut pos = Vec::new();
            for &p in &params {
                pos.extend(offs[p]..offs[p] + pr.trees[p].n_leaves());
            }
            let wrt = Wrt::Positions(pos);
            let t =
                if tf.kind == TransformKind::Grad { Transform::Grad { wrt } } else { Transform::ValueAndGrad { wrt } };
            let g = apply_core(l, &t, &st.func, desc, span)?;
            l.set_span(span);
            let outs = inline_with(l, &g, &pr.leaves, &st.captures, span)?;
            let (value, rest) =
                if tf.kind == TransformKind::Grad { (None, &outs[..]) } else { (Some(outs[0]), &outs[1..]) };
            let mut grads = Vec::new();
            let mut k = 0;
            for &p in &params {
                let n = pr.trees[p].n_leaves();
                grads.push(rebuild(l, &pr.trees[p], &rest[k..k + n]));
                k += n;
            }
            let g = if single {
                grads.pop().expect("internal error: single means one gradient")
            } else {
                Val::tuple(grads)
            };
            Ok(match value {
                Some(v) => Val::tuple(vec![Val::T(l.tv(v)), g]),
                None => g,
            })
        }
        TransformKind::Vmap => vmap_apply(l, tf, args, span, desc),
        TransformKind::Checkpoint => {
            let pr = prepare(l, f, args, span)?;
            let st = lower_fn(l, f, &pr.trees, &pr.spans, span)?;
            let g = apply_core(l, &Transform::Checkpoint { policy: tf.policy }, &st.func, desc, span)?;
            l.set_span(span);
            let outs = inline_with(l, &g, &pr.leaves, &st.captures, span)?;
            Ok(rebuild(l, &st.out, &outs))
        }
        TransformKind::Jacfwd | TransformKind::Jacrev | TransformKind::Jacobian | TransformKind::Hessian => {
            let pr = prepare(l, f, args, span)?;
            let st = lower_fn(l, f, &pr.trees, &pr.spans, span)?;
            if !matches!(st.out, Tree::Leaf(_)) {
                return Err(l.err(
                    Stage::Type,
                    span,
                    format!("{desc} needs `{}` to return one tensor, but it returns {}", f.describe(), st.out),
                ));
            }
            let (params, _) = select_params(l, tf, &pr.trees, span)?;
            let p = match (&tf.wrt, params.as_slice()) {
                (WrtSpec::All, [p, ..]) => *p,
                (_, [p]) => *p,
                _ => {
                    return Err(l.err(
                        Stage::Transform,
                        span,
                        format!(
                            "`{}` differentiates with respect to one parameter; name it with `wrt=x`",
                            tf.kind.name()
                        ),
                    ))
                }
            };
            if !matches!(pr.trees[p], Tree::Leaf(_)) {
                return Err(l.err(
                    Stage::Transform,
                    span,
                    format!("`{}` needs a tensor parameter, not a tuple", tf.kind.name()),
                ));
            }
            let leaf = offsets(&pr.trees)[p];
            let t = match tf.kind {
                TransformKind::Jacfwd => Transform::Jacfwd { wrt: leaf },
                TransformKind::Jacrev => Transform::Jacrev { wrt: leaf },
                TransformKind::Jacobian => Transform::Jacobian { wrt: leaf },
                _ => Transform::Hessian { wrt: leaf },
            };
            let g = apply_core(l, &t, &st.func, desc, span)?;
            l.set_span(span);
            let outs = inline_with(l, &g, &pr.leaves, &st.captures, span)?;
            Ok(Val::T(l.tv(outs[0])))
        }
        TransformKind::Jvp | TransformKind::Vjp | TransformKind::Linearize => {
            Err(l.err(Stage::Transform, span, "internal error: jvp, vjp and linearize are applied directly"))
        }
        TransformKind::CustomJvp | TransformKind::CustomVjp => {
            Err(l.err(Stage::Transform, span, "internal error: custom rules are def attributes, not function values"))
        }
    }
}

/// Which parameters a gradient/Jacobian is taken with respect to, and
/// whether the result is one gradient (not a tuple).
fn select_params(
    l: &Lower<'_>,
    tf: &TransformFn,
    trees: &[Tree],
    span: &Span,
) -> Result<(Vec<usize>, bool), Diagnostic> {
    let all_float = |t: &Tree| t.leaves().iter().all(|x| x.dtype.is_float());
    match &tf.wrt {
        WrtSpec::All => {
            let ps: Vec<usize> = (0..trees.len()).filter(|&i| all_float(&trees[i])).collect();
            if ps.is_empty() {
                return Err(l.err(
                    Stage::Type,
                    span,
                    format!("`{}` has no floating-point parameter to differentiate", tf.inner.describe()),
                ));
            }
            let single = ps.len() == 1;
            Ok((ps, single))
        }
        WrtSpec::Names { names, single } => {
            let Some(pnames) = param_names(l, &tf.inner) else {
                return Err(l.err(
                    Stage::Transform,
                    &names[0].span,
                    format!("`{}` has no parameter names to refer to with `wrt`", tf.inner.describe()),
                ));
            };
            let mut ps = Vec::new();
            for n in names {
                let Some(i) = pnames.iter().position(|p| *p == n.name) else {
                    return Err(l
                        .err(
                            Stage::Resolve,
                            &n.span,
                            format!("`{}` has no parameter named `{}`", tf.inner.describe(), n.name),
                        )
                        .with_note(format!(
                            "note: its parameters are {}",
                            pnames.iter().map(|p| format!("`{p}`")).collect::<Vec<_>>().join(", ")
                        )));
                };
                if ps.contains(&i) {
                    return Err(l.err(Stage::Transform, &n.span, format!("`{}` is listed twice in `wrt`", n.name)));
                }
                if i >= trees.len() || !all_float(&trees[i]) {
                    let t = trees.get(i).map(|t| t.to_string()).unwrap_or_default();
                    return Err(l
                        .err(
                            Stage::Type,
                            &n.span,
                            format!("cannot differentiate with respect to `{}`: it is {t}", n.name),
                        )
                        .with_note("note: only f32 and f64 values have derivatives"));
                }
                ps.push(i);
            }
            Ok((ps, *single))
        }
    }
}

/// Per-leaf batch axes of one argument from an `in_axes` entry.
fn axes_for(l: &Lower<'_>, spec: &Val, tree: &Tree, span: &Span, out: &mut Vec<Option<i64>>) -> Result<(), Diagnostic> {
    match (spec, tree) {
        (Val::None, t) => out.extend(std::iter::repeat_n(None, t.n_leaves())),
        (Val::Tuple(items), Tree::Tuple(ts)) if items.len() == ts.len() => {
            for (s, t) in items.iter().zip(ts) {
                axes_for(l, s, t, span, out)?;
            }
        }
        (v, t) => match super::expr::static_int(v) {
            Some(k) => out.extend(std::iter::repeat_n(Some(k), t.n_leaves())),
            None => {
                return Err(l.err(
                    Stage::Transform,
                    span,
                    format!(
                        "an axis entry must be an integer or `none` (nested like the value {t}), found {}",
                        v.describe()
                    ),
                ))
            }
        },
    }
    Ok(())
}

fn vmap_apply(
    l: &mut Lower<'_>,
    tf: &TransformFn,
    args: Vec<ArgVal>,
    span: &Span,
    desc: &str,
) -> Result<Val, Diagnostic> {
    let f = &tf.inner;
    let pr = prepare(l, f, args, span)?;
    let types: Vec<Vec<graft_core::TensorType>> = pr.trees.iter().map(Tree::leaves).collect();
    // Per-leaf axes (as written, possibly negative).
    let mut axes: Vec<Option<i64>> = Vec::new();
    match &tf.in_axes {
        Some(Val::Tuple(items)) => {
            if items.len() != pr.trees.len() {
                return Err(l.err(
                    Stage::Transform,
                    &tf.span,
                    format!(
                        "in_axes has {} entries but the function is called with {} arguments",
                        items.len(),
                        pr.trees.len()
                    ),
                ));
            }
            for (s, t) in items.iter().zip(&pr.trees) {
                axes_for(l, s, t, &tf.span, &mut axes)?;
            }
        }
        Some(v) => {
            for t in &pr.trees {
                axes_for(l, v, t, &tf.span, &mut axes)?;
            }
        }
        None => {
            let k = tf.axis.unwrap_or(0);
            // Scalars are shared; a tensor passed for a parameter declared
            // scalar is batched too (the only reading under which it fits).
            for ts in &types {
                for t in ts {
                    axes.push(if t.rank() == 0 { None } else { Some(k) });
                }
            }
        }
    }
    // Resolve against the batched ranks, find the batch size, strip the axis.
    let mut per: Vec<graft_core::TensorType> = Vec::new();
    let mut in_axes: Vec<Option<usize>> = Vec::new();
    let mut size: Option<(usize, usize)> = None;
    let arg_of: Vec<usize> =
        pr.trees.iter().enumerate().flat_map(|(i, t)| std::iter::repeat_n(i, t.n_leaves())).collect();
    let flat: Vec<graft_core::TensorType> = types.concat();
    for (j, (t, a)) in flat.iter().zip(&axes).enumerate() {
        match a {
            None => {
                per.push(t.clone());
                in_axes.push(None);
            }
            Some(a) => {
                let r = t.rank() as i64;
                let ax = if *a < 0 { a + r } else { *a };
                if ax < 0 || ax >= r {
                    return Err(l
                        .err(
                            Stage::Transform,
                            &pr.spans[arg_of[j]],
                            format!("{desc}: cannot batch along axis {a}: this argument is {t} (rank {r})"),
                        )
                        .with_secondary(tf.span.clone(), "batch axis chosen here"));
                }
                let ax = ax as usize;
                let n = t.shape[ax];
                match size {
                    None => size = Some((n, j)),
                    Some((n0, j0)) if n0 != n => {
                        return Err(l
                            .err(
                                Stage::Transform,
                                &pr.spans[arg_of[j]],
                                format!("{desc}: the batched arguments disagree on the batch size: {n0} and {n}"),
                            )
                            .with_label(format!("this is {t}, batch size {n}"))
                            .with_secondary(pr.spans[arg_of[j0]].clone(), format!("this has batch size {n0}")));
                    }
                    Some(_) => {}
                }
                let mut s = t.shape.clone();
                s.remove(ax);
                per.push(graft_core::TensorType::new(t.dtype, s));
                in_axes.push(Some(ax));
            }
        }
    }
    if size.is_none() {
        return Err(l
            .err(Stage::Transform, span, format!("{desc}: no argument has a batch axis"))
            .with_note("help: scalars are shared by every example; pass at least one tensor to batch over"));
    }
    let mut it = per.into_iter();
    let per_trees: Vec<Tree> = pr.trees.iter().map(|t| retype(t, &mut it)).collect();
    let st = lower_fn(l, f, &per_trees, &pr.spans, span)?;
    let n_out = st.out.n_leaves();
    let mut out_axes: Vec<Option<isize>> = Vec::new();
    match &tf.out_axes {
        Some(v) => {
            let mut o = Vec::new();
            axes_for(l, v, &st.out, &tf.span, &mut o)?;
            out_axes = o.into_iter().map(|a| a.map(|a| a as isize)).collect();
        }
        None => out_axes.extend(std::iter::repeat_n(Some(tf.axis.unwrap_or(0) as isize), n_out)),
    }
    // The axes are resolved above (for located messages); the core
    // resolves them again against the batched types, which agree.
    let mut ia: Vec<Option<isize>> = in_axes.iter().map(|a| a.map(|a| a as isize)).collect();
    ia.extend(std::iter::repeat_n(None, st.captures.len()));
    let mut outer = flat;
    outer.extend(st.func.param_types().drain(st.n_real..));
    let t = Transform::Vmap { in_axes: VmapAxes::Each(ia), out_axes: VmapAxes::Each(out_axes) };
    let g = t.apply(&st.func, &outer).map_err(|e| tf_err(l, e, desc, span))?;
    l.set_span(span);
    let outs = inline_with(l, &g, &pr.leaves, &st.captures, span)?;
    Ok(rebuild(l, &st.out, &outs))
}

fn retype(t: &Tree, it: &mut impl Iterator<Item = graft_core::TensorType>) -> Tree {
    match t {
        Tree::Leaf(_) => Tree::Leaf(it.next().expect("internal error: one per-example type per leaf")),
        Tree::Tuple(ts) => Tree::Tuple(ts.iter().map(|t| retype(t, it)).collect()),
    }
}

/// `jvp(f, primals, tangents)`: (outputs, output tangents). A `None`
/// tangent is zero.
pub fn jvp_call(
    l: &mut Lower<'_>,
    f: &Rc<FnVal>,
    prims: Vec<Val>,
    pspan: &Span,
    tans: Vec<Option<Val>>,
    tspan: &Span,
    span: &Span,
) -> Result<(Val, Val), Diagnostic> {
    let args = prims.into_iter().map(|val| ArgVal { name: None, val, span: pspan.clone() }).collect();
    let pr = prepare(l, f, args, span)?;
    let st = lower_fn(l, f, &pr.trees, &pr.spans, span)?;
    let desc = format!("jvp({})", f.describe());
    let mut ins = pr.leaves.clone();
    for &c in &st.captures {
        ins.push(l.import(c));
    }
    // Tangents of the float leaves of the real params, in order; `None` for
    // captures (constants of `f`) and for params given no tangent, so they
    // stay symbolic zeros and emit no tangent equations.
    let mut has_tangent = Vec::new();
    for (k, t) in pr.trees.iter().enumerate() {
        let leaves = t.leaves();
        match &tans[k] {
            None => has_tangent.extend(leaves.iter().map(|_| false)),
            Some(tv) => {
                let (tl, tt) = flatten_as(l, tv, t, tspan)?;
                if tt.len() != leaves.len() {
                    return Err(l.err(Stage::Type, tspan, format!("tangent {k} must have the structure {t}")));
                }
                for (v, ty) in tl.into_iter().zip(&leaves) {
                    has_tangent.push(ty.dtype.is_float());
                    if ty.dtype.is_float() {
                        ins.push(v);
                    }
                }
            }
        }
    }
    has_tangent.extend(st.captures.iter().map(|_| false));
    let wrt = Wrt::Positions((0..has_tangent.len()).filter(|&i| has_tangent[i]).collect());
    let g = apply_core(l, &Transform::Jvp { wrt }, &st.func, &desc, span)?;
    l.set_span(span);
    let outs = l.inline(&g, &ins, span)?;
    let n = st.out.n_leaves();
    Ok((rebuild(l, &st.out, &outs[..n]), rebuild(l, &st.out, &outs[n..])))
}

/// `linearize(f, primals)`: `(f(primals), f_jvp)`, where `f_jvp` maps
/// tangents shaped like the primals to output tangents, reusing the
/// forward values saved here (the forward pass runs once however often
/// `f_jvp` is called).
pub fn linearize_call(
    l: &mut Lower<'_>,
    f: &Rc<FnVal>,
    prims: Vec<Val>,
    pspan: &Span,
    span: &Span,
) -> Result<Val, Diagnostic> {
    let args = prims.into_iter().map(|val| ArgVal { name: None, val, span: pspan.clone() }).collect();
    let pr = prepare(l, f, args, span)?;
    let st = lower_fn(l, f, &pr.trees, &pr.spans, span)?;
    let desc = format!("linearize({})", f.describe());
    // Tangents for the float leaves of the real arguments; captures are constants.
    let types = st.func.param_types();
    let pos: Vec<usize> = (0..pr.leaves.len()).filter(|&i| types[i].dtype.is_float()).collect();
    let staged =
        Transform::Linearize { wrt: Wrt::Positions(pos) }.stage(&st.func).map_err(|e| tf_err(l, e, &desc, span))?;
    l.set_span(span);
    let fwd = inline_with(l, &staged.forward, &pr.leaves, &st.captures, span)?;
    let n = staged.n_outputs;
    let out = rebuild(l, &st.out, &fwd[..n]);
    let residuals: Vec<Tv> = fwd[n..].iter().map(|&v| l.tv(v)).collect();
    let lf = LinearFn {
        rest: staged.rest,
        residuals,
        primals: pr.trees,
        out: st.out,
        name: format!("{}_jvp", f.describe()),
    };
    Ok(Val::tuple(vec![out, Val::F(Rc::new(FnVal::Linear(Rc::new(lf))))]))
}

/// Calls the tangent map `linearize` returned: one tangent per primal,
/// shaped like it (integer leaves take no tangent and are ignored).
pub fn call_linear(l: &mut Lower<'_>, lf: &LinearFn, args: Vec<ArgVal>, span: &Span) -> Result<Val, Diagnostic> {
    if let Some(a) = args.iter().find(|a| a.name.is_some()) {
        return Err(l.err(Stage::Type, &a.span, format!("`{}` takes positional arguments only", lf.name)));
    }
    if args.len() != lf.primals.len() {
        return Err(l.err(
            Stage::Type,
            span,
            format!(
                "`{}` takes {} tangents (one per primal), but {} were given",
                lf.name,
                lf.primals.len(),
                args.len()
            ),
        ));
    }
    let mut ins: Vec<Value> = lf.residuals.iter().map(|&r| l.import(r)).collect();
    for (a, t) in args.iter().zip(&lf.primals) {
        let (vals, types) = flatten_as(l, &a.val, t, &a.span)?;
        ins.extend(vals.into_iter().zip(&types).filter(|(_, ty)| ty.dtype.is_float()).map(|(v, _)| v));
    }
    l.set_span(span);
    let outs = l.inline(&lf.rest, &ins, span)?;
    Ok(rebuild(l, &lf.out, &outs))
}

/// `v` flattened with literals given the dtypes of `like`'s leaves and
/// shapes checked against them.
fn flatten_as(
    l: &mut Lower<'_>,
    v: &Val,
    like: &Tree,
    span: &Span,
) -> Result<(Vec<Value>, Vec<graft_core::TensorType>), Diagnostic> {
    match (v, like) {
        (Val::Tuple(items), Tree::Tuple(ts)) if items.len() == ts.len() => {
            let mut a = Vec::new();
            let mut b = Vec::new();
            for (i, t) in items.iter().zip(ts) {
                let (x, y) = flatten_as(l, i, t, span)?;
                a.extend(x);
                b.extend(y);
            }
            Ok((a, b))
        }
        (v, Tree::Leaf(ty)) if !matches!(v, Val::Tuple(_)) => {
            let x = l.tensor_as(v, ty.dtype, span)?;
            let x = if l.ty(x).rank() == 0 && ty.rank() > 0 {
                let r = l.b().broadcast_in_dim(x, &ty.shape, &[]);
                l.ir(r, span)?
            } else {
                x
            };
            if l.ty(x) != *ty {
                return Err(l.err(Stage::Type, span, format!("expected {ty}, found {}", l.ty(x))));
            }
            Ok((vec![x], vec![ty.clone()]))
        }
        (v, t) => Err(l.err(Stage::Type, span, format!("expected a value shaped like {t}, found {}", v.describe()))),
    }
}

/// `vjp(f, primals, ct)`: (outputs, (gradient per primal...)).
pub fn vjp_call(
    l: &mut Lower<'_>,
    f: &Rc<FnVal>,
    prims: Vec<Val>,
    pspan: &Span,
    ct: Val,
    cspan: &Span,
    span: &Span,
) -> Result<Val, Diagnostic> {
    let args = prims.into_iter().map(|val| ArgVal { name: None, val, span: pspan.clone() }).collect();
    let pr = prepare(l, f, args, span)?;
    let st = lower_fn(l, f, &pr.trees, &pr.spans, span)?;
    let desc = format!("vjp({})", f.describe());
    let all: Vec<graft_core::TensorType> = pr.trees.iter().flat_map(Tree::leaves).collect();
    let pos: Vec<usize> = (0..all.len()).filter(|&i| all[i].dtype.is_float()).collect();
    let g = apply_core(l, &Transform::Vjp { wrt: Wrt::Positions(pos.clone()) }, &st.func, &desc, span)?;
    let mut ins = pr.leaves.clone();
    for &c in &st.captures {
        ins.push(l.import(c));
    }
    let (cl, ct_types) = flatten_as(l, &ct, &st.out, cspan)?;
    for (v, ty) in cl.into_iter().zip(&ct_types) {
        if ty.dtype.is_float() {
            ins.push(v);
        }
    }
    l.set_span(span);
    let outs = l.inline(&g, &ins, span)?;
    let n = st.out.n_leaves();
    let out = rebuild(l, &st.out, &outs[..n]);
    let mut grads_by_leaf: Vec<Option<Value>> = vec![None; all.len()];
    for (k, &p) in pos.iter().enumerate() {
        grads_by_leaf[p] = Some(outs[n + k]);
    }
    let mut leaf_vals = Vec::new();
    for (i, g) in grads_by_leaf.into_iter().enumerate() {
        leaf_vals.push(match g {
            Some(v) => v,
            None => {
                let r = l.b().zeros(&all[i]);
                l.ir(r, span)?
            }
        });
    }
    let mut grads = Vec::new();
    let mut k = 0;
    for t in &pr.trees {
        let m = t.n_leaves();
        grads.push(rebuild(l, t, &leaf_vals[k..k + m]));
        k += m;
    }
    Ok(Val::tuple(vec![out, Val::tuple(grads)]))
}

/// A def with `@grad(p)` or `@jvp(p)` attributes, called with (coerced) arguments.
pub fn call_attr_def(
    l: &mut Lower<'_>,
    idx: usize,
    attrs: &[&Attr],
    coerced: Vec<Val>,
    args: &[ArgVal],
    span: &Span,
) -> Result<Val, Diagnostic> {
    let def = &l.p.program.defs[idx];
    let name: Rc<str> = def.name.name.as_str().into();
    let body = Rc::new(FnVal::DefBody(idx, name.clone()));
    let kinds: Vec<Option<AttrKind>> = attrs.iter().map(|a| a.kind()).collect();
    if kinds.iter().any(|k| *k != kinds[0]) {
        return Err(l.err(Stage::Transform, &attrs[0].span, "a def cannot have both `@grad` and `@jvp` attributes"));
    }
    let kind = match kinds.first() {
        Some(Some(k)) if k.is_derivative() => *k,
        _ => return Err(l.err(Stage::Transform, span, "internal error: call_attr_def needs @grad or @jvp attributes")),
    };
    let mut names = Vec::new();
    for a in attrs {
        match a.args.as_slice() {
            [arg] if arg.name.is_none() => match &arg.value.kind {
                ExprKind::Var(id) => names.push(id.clone()),
                _ => {
                    return Err(l.err(
                        Stage::Transform,
                        &arg.span,
                        format!("`@{}` takes a parameter name", kind.name()),
                    ))
                }
            },
            _ => {
                return Err(l
                    .err(Stage::Transform, &a.span, format!("`@{}` takes exactly one parameter name", kind.name()))
                    .with_note(format!("help: write `@{}(w)`; repeat the attribute for more parameters", kind.name())))
            }
        }
    }
    let pnames: Vec<String> = def.params.iter().map(|p| p.name.name.clone()).collect();
    for n in &names {
        if !pnames.contains(&n.name) {
            return Err(l
                .err(Stage::Resolve, &n.span, format!("`{name}` has no parameter named `{}`", n.name))
                .with_note(format!(
                    "note: its parameters are {}",
                    pnames.iter().map(|p| format!("`{p}`")).collect::<Vec<_>>().join(", ")
                )));
        }
    }
    let n_params = def.params.len();
    if kind == AttrKind::Grad {
        let single = names.len() == 1;
        let tf = TransformFn {
            kind: TransformKind::Grad,
            inner: body,
            wrt: WrtSpec::Names { names, single },
            axis: None,
            in_axes: None,
            out_axes: None,
            policy: Default::default(),
            span: attrs[0].span.clone(),
        };
        let av =
            coerced.into_iter().zip(args).map(|(val, a)| ArgVal { name: None, val, span: a.span.clone() }).collect();
        return apply(l, &tf, av, span);
    }
    // @jvp: the remaining arguments are the tangents, in attribute order.
    let mut tans: Vec<Option<Val>> = vec![None; n_params];
    for (k, n) in names.iter().enumerate() {
        let i = pnames.iter().position(|p| *p == n.name).expect("internal error: checked above");
        tans[i] = Some(args[n_params + k].val.clone());
    }
    let tspan = args.get(n_params).map(|a| a.span.clone()).unwrap_or(span.clone());
    let pspan = args.first().map(|a| a.span.clone()).unwrap_or(span.clone());
    let desc = format!("jvp({name})");
    let pos = l.p.pos(span);
    jvp_call(l, &body, coerced, &pspan, tans, &tspan, span).map(|(_, t)| t).map_err(|d| chain(d, &desc, &pos))
}
