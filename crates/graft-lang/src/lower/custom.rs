//! `@custom_vjp(fwd, bwd)` and `@custom_jvp(rule)`: a call of such a def
//! lowers to graft-core's `custom_vjp` / `custom_jvp` primitive around the
//! def's body, so every transform (grad, jvp, vmap, at any depth) uses the
//! user's rule instead of differentiating the body.
//!
//! Conventions, on flattened leaves (tuples are flattened depth first):
//! - `fwd(primals...)` returns `(outputs..., residuals...)`: its first leaves
//!   are the def's outputs (same types), the rest are residuals.
//! - `bwd(residuals..., cotangents of float outputs...)` returns the
//!   cotangents of the float input leaves; `bwd` takes one parameter per
//!   leaf (no tuple parameters).
//! - `rule(primals..., tangents of float input leaves...)` returns
//!   `(outputs..., tangents of float outputs...)` (one tangent parameter per
//!   float leaf; integer inputs get none).

use super::value::{Tree, Tv, Val};
use super::Lower;
use crate::ast::{self, ExprKind, Span};
use crate::diag::{Diagnostic, Stage};
use graft_core::{Func, TensorType, Value};
use std::sync::Arc;

/// The custom rule a def declares, if any (names of defs).
pub enum Rule {
    Vjp(usize, usize),
    Jvp(usize),
}

/// The custom rule attribute of `def` (at most one).
pub fn rule_of(l: &Lower<'_>, def: &ast::Def) -> Result<Option<Rule>, Diagnostic> {
    let mut found: Option<Rule> = None;
    for a in &def.attrs {
        let Some(kind) = a.kind().filter(|k| k.is_custom_rule()) else {
            continue;
        };
        if found.is_some() {
            return Err(l.err(Stage::Transform, &a.span, format!("`{}` has more than one custom rule", def.name.name)));
        }
        if def.attrs.iter().any(|b| b.kind().is_some_and(ast::AttrKind::is_derivative)) {
            return Err(l.err(
                Stage::Transform,
                &a.span,
                "a def with `@grad`/`@jvp` cannot also have a custom rule; put the rule on the def it differentiates",
            ));
        }
        let want = if kind == ast::AttrKind::CustomVjp { 2 } else { 1 };
        let mut idx = Vec::new();
        for arg in &a.args {
            let i = match (&arg.name, &arg.value.kind) {
                (None, ExprKind::Var(id)) => l.p.defs.get(id.name.as_str()).copied(),
                _ => None,
            };
            match i {
                Some(i) => idx.push(i),
                None => {
                    return Err(l.err(Stage::Transform, &arg.span, format!("`@{}` takes names of defs", kind.name())))
                }
            }
        }
        if idx.len() != want {
            let help = if want == 2 { "@custom_vjp(fwd, bwd)" } else { "@custom_jvp(rule)" };
            return Err(l
                .err(
                    Stage::Transform,
                    &a.span,
                    format!("`@{}` takes {want} def name(s), found {}", kind.name(), idx.len()),
                )
                .with_note(format!("help: write `{help}`")));
        }
        found = Some(if want == 2 { Rule::Vjp(idx[0], idx[1]) } else { Rule::Jvp(idx[0]) });
    }
    Ok(found)
}

fn leaf_trees(ts: &[TensorType]) -> Vec<Tree> {
    ts.iter().cloned().map(Tree::Leaf).collect()
}

fn float_leaves(ts: &[TensorType]) -> Vec<TensorType> {
    ts.iter().filter(|t| t.dtype.is_float()).cloned().collect()
}

fn list(ts: &[TensorType]) -> String {
    ts.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", ")
}

/// Calls def `idx` (already instantiated as `func` for `trees`) on `leaves`
/// through its custom rule.
pub fn call(
    l: &mut Lower<'_>,
    rule: Rule,
    idx: usize,
    func: Arc<Func>,
    out: &Tree,
    trees: &[Tree],
    leaves: &[Value],
    span: &Span,
) -> Result<Val, Diagnostic> {
    let p = l.p;
    let name = &p.program.defs[idx].name.name;
    let in_t: Vec<TensorType> = trees.iter().flat_map(Tree::leaves).collect();
    let out_t = out.leaves();
    let mismatch = |l: &Lower<'_>, which: usize, what: String| {
        let d = &p.program.defs[which];
        l.err(Stage::Type, span, format!("custom rule `{}` of `{name}`: {what}", d.name.name))
            .with_secondary(d.name.span.clone(), "the rule is defined here")
    };
    let r = match rule {
        Rule::Vjp(fi, bi) => {
            let fwd = l.instantiate(fi, trees, span)?;
            let ft = fwd.out.leaves();
            if ft.len() < out_t.len() || ft[..out_t.len()] != out_t[..] {
                return Err(mismatch(
                    l,
                    fi,
                    format!(
                        "it must return (outputs..., residuals...) with outputs ({}), but returns {}",
                        list(&out_t),
                        fwd.out
                    ),
                ));
            }
            let mut bt = ft[out_t.len()..].to_vec();
            bt.extend(float_leaves(&out_t));
            if p.program.defs[bi].params.len() != bt.len() {
                return Err(mismatch(
                    l,
                    bi,
                    format!("it must take one parameter per residual and float output cotangent: ({})", list(&bt)),
                ));
            }
            let bwd = l.instantiate(bi, &leaf_trees(&bt), span)?;
            let want = float_leaves(&in_t);
            if bwd.out.leaves() != want {
                return Err(mismatch(
                    l,
                    bi,
                    format!(
                        "it must return the cotangents of the float inputs ({}), but returns {}",
                        list(&want),
                        bwd.out
                    ),
                ));
            }
            l.set_span(span);
            let r = l.b().custom_vjp(func, fwd.func.clone(), bwd.func.clone(), leaves);
            l.ir(r, span)?
        }
        Rule::Jvp(ri) => {
            let mut rt = trees.to_vec();
            rt.extend(leaf_trees(&float_leaves(&in_t)));
            let rf = l.instantiate(ri, &rt, span)?;
            let mut want = out_t.clone();
            want.extend(float_leaves(&out_t));
            if rf.out.leaves() != want {
                return Err(mismatch(
                    l,
                    ri,
                    format!(
                        "it must return (outputs..., output tangents...) = ({}), but returns {}",
                        list(&want),
                        rf.out
                    ),
                ));
            }
            l.set_span(span);
            let r = l.b().custom_jvp(func, rf.func.clone(), leaves);
            l.ir(r, span)?
        }
    };
    let level = l.level();
    Ok(out
        .rebuild(&mut r.into_iter().map(|v| Tv { level, v }))
        .expect("internal error: a custom call returns its tree's leaves"))
}
