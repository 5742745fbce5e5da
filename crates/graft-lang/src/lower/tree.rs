//! Pytrees: tuples (nested to any depth) as containers of leaves, as in
//! JAX. Arithmetic `+ - * /` and unary `-` on tuples, and the builtins
//! `tree_map`, `tree_reduce` and `tree_leaves`.
//!
//! Rules (docs/language.md, "Pytrees"): two tuples combine leaf by leaf and
//! must have the same structure (the same tuple lengths at every level; a
//! leaf never meets a tuple); a tuple and a scalar (a number, a dimension or
//! a rank-0 tensor) combine by applying the scalar to every leaf; a tuple
//! and a tensor of rank one or more is an error (write `tree_map`), because
//! broadcasting one tensor against every leaf is rarely what a tree of
//! parameters means. A leaf is any value that is not a tuple. Everything
//! lowers to the ordinary operators on the leaves, so derivatives, `vmap`
//! and the rest see only primitives.

use super::value::{FnVal, Val};
use super::{ArgVal, Lower};
use crate::ast::{BinOp, Span, UnOp};
use crate::diag::{Diagnostic, Stage};

/// Whether two values have the same tuple structure (leaves are not compared).
fn same_structure(a: &Val, b: &Val) -> bool {
    match (a, b) {
        (Val::Tuple(x), Val::Tuple(y)) => {
            x.len() == y.len() && x.iter().zip(y.iter()).all(|(a, b)| same_structure(a, b))
        }
        (Val::Tuple(_), _) | (_, Val::Tuple(_)) => false,
        _ => true,
    }
}

/// The leaves of a value, depth first (a non-tuple is its own only leaf).
pub fn leaves(v: &Val, out: &mut Vec<Val>) {
    match v {
        Val::Tuple(items) => items.iter().for_each(|it| leaves(it, out)),
        other => out.push(other.clone()),
    }
}

/// How many arguments a function value takes, where that is fixed.
fn arity(l: &Lower<'_>, f: &FnVal) -> Option<usize> {
    match f {
        FnVal::Def(i, _) => {
            let d = &l.p.program.defs[*i];
            Some(d.params.len() + d.attrs.iter().filter(|a| a.is(crate::ast::AttrKind::Jvp)).count())
        }
        FnVal::DefBody(i, _) => Some(l.p.program.defs[*i].params.len()),
        FnVal::Lambda { params, .. } => Some(params.len()),
        _ => None,
    }
}

impl Lower<'_> {
    /// Whether `v` can be applied to every leaf of a tuple.
    fn scalar_like(&mut self, v: &Val) -> bool {
        match v {
            Val::Const(_) | Val::Dim(..) => true,
            Val::T(tv) => {
                let x = self.import(*tv);
                self.ty(x).rank() == 0
            }
            _ => false,
        }
    }

    /// `l op r` where at least one side is a tuple.
    pub fn tree_binary(
        &mut self,
        op: BinOp,
        l: &Val,
        r: &Val,
        ls: &Span,
        rs: &Span,
        span: &Span,
    ) -> Result<Val, Diagnostic> {
        let sym = op.symbol();
        if !matches!(op, BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div) {
            let (lt, rt) = (self.describe_tree(l), self.describe_tree(r));
            return Err(self
                .err(Stage::Type, span, format!("`{sym}` does not apply to tuples"))
                .with_secondary(ls.clone(), lt)
                .with_secondary(rs.clone(), rt)
                .with_note("note: on tuples (pytrees) only `+ - * /` and unary `-` work, leaf by leaf")
                .with_note(format!("help: map it over the leaves: `tree_map(fn (a, b) -> a {sym} b, t, u)`")));
        }
        let ok = match (l, r) {
            (Val::Tuple(_), Val::Tuple(_)) => same_structure(l, r),
            (Val::Tuple(_), x) | (x, Val::Tuple(_)) => self.scalar_like(x),
            _ => true,
        };
        if !ok {
            let (lt, rt) = (self.describe_tree(l), self.describe_tree(r));
            let both = matches!((l, r), (Val::Tuple(_), Val::Tuple(_)));
            let msg = if both {
                format!("`{sym}` needs tuples of the same structure, found {lt} and {rt}")
            } else {
                format!("`{sym}` between a tuple and a non-scalar: {lt} and {rt}")
            };
            let help = if both {
                "note: tuples combine leaf by leaf: the same lengths at every level, leaves against leaves".to_string()
            } else {
                format!(
                    "help: a tuple combines with a scalar (applied to every leaf); for anything else write \
                     `tree_map(fn (p) -> p {sym} x, t)`, or make one tensor of the tuple with `stack(t)`"
                )
            };
            return Err(self
                .err(Stage::Type, span, msg)
                .with_secondary(ls.clone(), lt)
                .with_secondary(rs.clone(), rt)
                .with_note(help));
        }
        self.tree_binary_rec(op, l, r, ls, rs, span)
    }

    fn tree_binary_rec(
        &mut self,
        op: BinOp,
        l: &Val,
        r: &Val,
        ls: &Span,
        rs: &Span,
        span: &Span,
    ) -> Result<Val, Diagnostic> {
        let items: Vec<Val> = match (l, r) {
            (Val::Tuple(a), Val::Tuple(b)) => a
                .iter()
                .zip(b.iter())
                .map(|(a, b)| self.tree_binary_rec(op, a, b, ls, rs, span))
                .collect::<Result<_, _>>()?,
            (Val::Tuple(a), x) => {
                a.iter().map(|a| self.tree_binary_rec(op, a, x, ls, rs, span)).collect::<Result<_, _>>()?
            }
            (x, Val::Tuple(b)) => {
                b.iter().map(|b| self.tree_binary_rec(op, x, b, ls, rs, span)).collect::<Result<_, _>>()?
            }
            _ => return self.binary(op, l.clone(), r.clone(), ls, rs, span),
        };
        Ok(Val::tuple(items))
    }

    /// `-t` on a tuple: every leaf negated (`not` does not apply to tuples).
    pub fn tree_unary(&mut self, op: UnOp, v: &Val, span: &Span) -> Result<Val, Diagnostic> {
        match v {
            Val::Tuple(items) => {
                if op == UnOp::Not {
                    let t = self.describe_tree(v);
                    return Err(self
                        .err(Stage::Type, span, format!("`not` does not apply to tuples, found {t}"))
                        .with_note("help: map it over the leaves: `tree_map(fn (b) -> not b, t)`"));
                }
                let out = items.iter().map(|it| self.tree_unary(op, it, span)).collect::<Result<Vec<_>, _>>()?;
                Ok(Val::tuple(out))
            }
            other => self.unary(op, other.clone(), span),
        }
    }
}

/// The function argument of a tree builtin, with its arity checked against
/// the number of arguments the builtin passes it (`n`).
fn function_arg(l: &mut Lower<'_>, name: &str, f: &ArgVal, n: usize, why: &str) -> Result<FnVal, Diagnostic> {
    let Val::F(fv) = &f.val else {
        let got = l.describe_tree(&f.val);
        return Err(l
            .err(Stage::Type, &f.span, format!("`{name}` needs a function as its first argument, found {got}"))
            .with_note(format!("help: e.g. `{name}(fn (x) -> 2.0 * x, t)`")));
    };
    if let Some(k) = arity(l, fv) {
        if k != n {
            return Err(l
                .err(
                    Stage::Type,
                    &f.span,
                    format!("`{name}`: the function `{}` takes {k} argument{}, but {why}", fv.describe(), plural(k)),
                )
                .with_label(format!("takes {k}")));
        }
    }
    Ok((**fv).clone())
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// `tree_map(f, t1, ..., tk)`: `f(leaf of t1, ..., leaf of tk)` at every
/// leaf of `t1`; the trees must have the same structure.
pub fn tree_map(l: &mut Lower<'_>, f: &ArgVal, trees: &[ArgVal], span: &Span) -> Result<Val, Diagnostic> {
    if trees.is_empty() {
        return Err(l
            .err(Stage::Type, span, "`tree_map` needs at least one tree after the function")
            .with_note("help: `tree_map(f, t)` or `tree_map(f, t1, t2)`"));
    }
    let k = trees.len();
    let fv = function_arg(
        l,
        "tree_map",
        f,
        k,
        &format!("{k} tree{} {} given", plural(k), if k == 1 { "was" } else { "were" }),
    )?;
    for t in &trees[1..] {
        if !same_structure(&trees[0].val, &t.val) {
            let (a, b) = (l.describe_tree(&trees[0].val), l.describe_tree(&t.val));
            return Err(l
                .err(Stage::Type, span, format!("`tree_map`: the trees have different structures, {a} and {b}"))
                .with_secondary(trees[0].span.clone(), a)
                .with_secondary(t.span.clone(), b)
                .with_note("note: every tree must have the same tuple lengths at every level as the first"));
        }
    }
    let vals: Vec<Val> = trees.iter().map(|t| t.val.clone()).collect();
    let spans: Vec<Span> = trees.iter().map(|t| t.span.clone()).collect();
    map_rec(l, &fv, &vals, &spans, span)
}

fn map_rec(l: &mut Lower<'_>, f: &FnVal, vals: &[Val], spans: &[Span], span: &Span) -> Result<Val, Diagnostic> {
    if let Val::Tuple(first) = &vals[0] {
        let mut out = Vec::new();
        for i in 0..first.len() {
            let sub: Vec<Val> = vals
                .iter()
                .map(|v| match v {
                    Val::Tuple(items) => items[i].clone(),
                    other => other.clone(),
                })
                .collect();
            out.push(map_rec(l, f, &sub, spans, span)?);
        }
        return Ok(Val::tuple(out));
    }
    let args = vals.iter().zip(spans).map(|(v, s)| ArgVal { name: None, val: v.clone(), span: s.clone() }).collect();
    l.call_fn(f, args, span)
}

/// `tree_reduce(f, t, init)`: `f(... f(f(init, leaf0), leaf1) ..., leafN)`.
pub fn tree_reduce(
    l: &mut Lower<'_>,
    f: &ArgVal,
    tree: &ArgVal,
    init: &ArgVal,
    span: &Span,
) -> Result<Val, Diagnostic> {
    let fv = function_arg(l, "tree_reduce", f, 2, "it is called with two (the accumulator and a leaf)")?;
    let mut ls = Vec::new();
    leaves(&tree.val, &mut ls);
    let mut acc = init.val.clone();
    for leaf in ls {
        let args = vec![
            ArgVal { name: None, val: acc, span: init.span.clone() },
            ArgVal { name: None, val: leaf, span: tree.span.clone() },
        ];
        acc = l.call_fn(&fv, args, span)?;
    }
    Ok(acc)
}

/// `tree_leaves(t)`: the leaves of `t`, depth first, as a flat tuple.
pub fn tree_leaves(tree: &Val) -> Val {
    let mut ls = Vec::new();
    leaves(tree, &mut ls);
    Val::tuple(ls)
}
