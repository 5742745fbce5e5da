//! Calling a function-valued transform (`grad(f)(x)`, `jacfwd(f)(x)`,
//! `checkpoint(f)(x)`; vmap in `vmap.rs`): lower `f` at the call's argument
//! types, apply the core `Transform`, inline the result.

use super::vmap::vmap_apply;
use super::*;

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
