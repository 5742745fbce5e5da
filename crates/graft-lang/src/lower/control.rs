//! Control flow: `scan(f, init, xs)`, `fori(n, f, init)` and scalar `if`,
//! lowered to graft-core's `scan` and `cond` primitives (loop bodies and
//! branches are closed functions; the tensors they capture become explicit
//! operands).
//!
//! Float literals in an initial carry are f32 unless the body needs f64
//! (the loop is then lowered again with f64 literals).
//!
//! `fori` with `n` known while compiling (an integer literal, a dimension,
//! or arithmetic on those) lowers to a fixed-length `scan`; with a run-time
//! i32 scalar `n` it lowers to graft-core's `fori_dynamic` (a `while` loop
//! whose carry holds the counter; `n <= 0` runs no trip).
//! `while(cond, body, init)` lowers to the `while` primitive; `cond` and
//! `body` both take the union of their captures as leading constants.

use super::value::{FnVal, Tree, Tv, Val};
use super::{ArgVal, Env, Lower, Standalone};
use crate::ast::{Expr, Span};
use crate::diag::{Diagnostic, Stage};
use graft_core::ops::remat::Remat;
use graft_core::ops::scan::ScanOpts;
use graft_core::{Builder, Func, TensorType, Value};
use std::rc::Rc;
use std::sync::Arc;

/// `f`'s standalone function with parameters reordered to (captures..., real...).
fn captures_first(st: &Standalone) -> Result<Func, graft_core::IrError> {
    let f = &st.func;
    let mut b = Builder::new(f.name.clone());
    let n = st.n_real;
    let caps: Vec<Value> = f.params[n..].iter().map(|&p| b.param(f.ty(p).clone())).collect();
    let real: Vec<Value> = f.params[..n].iter().map(|&p| b.param(f.ty(p).clone())).collect();
    let mut args = real;
    args.extend(caps);
    let outs = b.inline(f, &args)?;
    b.finish(&outs)
}

fn lower_call(l: &mut Lower<'_>, f: &Rc<FnVal>, trees: &[Tree], span: &Span) -> Result<Standalone, Diagnostic> {
    let f = f.clone();
    let sp = span.clone();
    l.standalone("body", trees, span, move |this, vals| {
        let args = vals.into_iter().map(|val| ArgVal { name: None, val, span: sp.clone() }).collect();
        this.call_fn(&f, args, &sp)
    })
}

fn func_arg(l: &Lower<'_>, a: &ArgVal, what: &str) -> Result<Rc<FnVal>, Diagnostic> {
    match &a.val {
        Val::F(f) => Ok(f.clone()),
        other => Err(l.err(Stage::Type, &a.span, format!("{what} must be a function, found {}", other.describe()))),
    }
}

fn caps(l: &mut Lower<'_>, st: &Standalone) -> Vec<Value> {
    st.captures.iter().map(|&c| l.import(c)).collect()
}

fn rebuild(l: &Lower<'_>, t: &Tree, vals: &[Value]) -> Val {
    let level = l.level();
    t.rebuild(&mut vals.iter().map(|&v| Tv { level, v })).expect("internal error: a loop returns its tree's leaves")
}

/// Whether a value holds a float literal (whose dtype the context decides).
fn has_float_literal(v: &Val) -> bool {
    match v {
        Val::Const(super::value::Const::Float(_)) => true,
        Val::Array { kind: super::value::ArrKind::Float, .. } => true,
        Val::Tuple(ts) => ts.iter().any(has_float_literal),
        _ => false,
    }
}

/// A loop's initial carry: float literals become f32, or f64 on the retry
/// (`wide`), so `fori(n, f, 1.0)` works in f32 and f64 programs alike.
fn init_leaves(l: &mut Lower<'_>, v: &Val, wide: bool, span: &Span) -> Result<(Vec<Value>, Tree), Diagnostic> {
    if !wide {
        return l.flatten(v, span);
    }
    let v = widen(l, v, span)?;
    l.flatten(&v, span)
}

fn widen(l: &mut Lower<'_>, v: &Val, span: &Span) -> Result<Val, Diagnostic> {
    Ok(match v {
        Val::Tuple(ts) => Val::tuple(ts.iter().map(|t| widen(l, t, span)).collect::<Result<_, _>>()?),
        Val::Const(super::value::Const::Float(_)) | Val::Array { kind: super::value::ArrKind::Float, .. } => {
            Val::T(Tv { level: l.level(), v: l.tensor_as(v, graft_core::DType::F64, span)? })
        }
        other => other.clone(),
    })
}

/// A loop's failure: the diagnostic, and whether it is the body changing
/// the carry's shape (see [`retry_wide`]).
struct LoopErr {
    diag: Box<Diagnostic>,
    carry_shape_changes: bool,
}

impl From<Diagnostic> for LoopErr {
    fn from(diag: Diagnostic) -> LoopErr {
        LoopErr { diag: Box::new(diag), carry_shape_changes: false }
    }
}

/// Lowers a loop with f32 float literals in its carry, then, if that fails
/// and the carry has float literals, again with f64 ones. The first error
/// is reported, unless the f64 attempt got as far as finding that the body
/// changes the carry's *shape*: no dtype can fix that, so it is the real
/// problem (`fori(3, fn (i, c) -> c + x, 0.0)` with an f64 `x` fails in f32
/// on the dtypes, but the carry goes from a scalar to `x`'s shape).
fn retry_wide(init: &ArgVal, mut at: impl FnMut(bool) -> Result<Val, LoopErr>) -> Result<Val, Diagnostic> {
    match at(false) {
        Ok(v) => Ok(v),
        Err(e) if has_float_literal(&init.val) => match at(true) {
            Ok(v) => Ok(v),
            Err(w) if w.carry_shape_changes && !e.carry_shape_changes => Err(*w.diag),
            Err(_) => Err(*e.diag),
        },
        Err(e) => Err(*e.diag),
    }
}

/// The error for a loop body whose result is not the carry's type: both
/// types, at the body, with the initial carry pointed at.
fn carry_changes(l: &Lower<'_>, what: &str, f: &ArgVal, init: &ArgVal, init_t: &Tree, got: &Tree) -> LoopErr {
    let diag = l
        .err(
            Stage::Type,
            &f.span,
            format!("the body of `{what}` changes the carry's type: it starts as {init_t} and comes back as {got}"),
        )
        .with_secondary(init.span.clone(), format!("the initial carry is {init_t}"));
    LoopErr { diag: Box::new(diag), carry_shape_changes: !same_shapes(init_t, got) }
}

/// Whether two trees have one structure and the same shapes at their
/// leaves (dtypes aside).
fn same_shapes(a: &Tree, b: &Tree) -> bool {
    match (a, b) {
        (Tree::Leaf(x), Tree::Leaf(y)) => x.shape == y.shape,
        (Tree::Tuple(xs), Tree::Tuple(ys)) => xs.len() == ys.len() && xs.iter().zip(ys).all(|(x, y)| same_shapes(x, y)),
        _ => false,
    }
}

/// `scan(f, init, xs)` with `f(carry, x) -> (carry, y)`: `(final_carry, ys)`.
pub fn scan(
    l: &mut Lower<'_>,
    f: &ArgVal,
    init: &ArgVal,
    xs: &ArgVal,
    remat: Remat,
    span: &Span,
) -> Result<Val, Diagnostic> {
    retry_wide(init, |wide| scan_at(l, f, init, xs, remat, span, wide))
}

fn scan_at(
    l: &mut Lower<'_>,
    f: &ArgVal,
    init: &ArgVal,
    xs: &ArgVal,
    remat: Remat,
    span: &Span,
    wide: bool,
) -> Result<Val, LoopErr> {
    let fv = func_arg(l, f, "the first argument of `scan`")?;
    let (init_l, init_t) = init_leaves(l, &init.val, wide, &init.span)?;
    let (xs_l, xs_t) = l.flatten(&xs.val, &xs.span)?;
    let mut n: Option<usize> = None;
    let mut per = Vec::new();
    for t in xs_t.leaves() {
        if t.rank() == 0 {
            return Err(l
                .err(
                    Stage::Type,
                    &xs.span,
                    format!("`scan` walks the leading axis of `xs`, but a part of it is the scalar {t}"),
                )
                .into());
        }
        match n {
            None => n = Some(t.shape[0]),
            Some(m) if m != t.shape[0] => {
                return Err(l
                    .err(
                        Stage::Type,
                        &xs.span,
                        format!("the parts of `xs` disagree on the leading axis: {m} and {}", t.shape[0]),
                    )
                    .into())
            }
            _ => {}
        }
        per.push(TensorType::new(t.dtype, t.shape[1..].to_vec()));
    }
    let Some(n) = n else {
        return Err(l.err(Stage::Type, &xs.span, "`scan` needs at least one tensor in `xs`").into());
    };
    let mut it = per.into_iter();
    let x_tree = retype(&xs_t, &mut it);
    let st = lower_call(l, &fv, &[init_t.clone(), x_tree], span)?;
    let pair = match &st.out {
        Tree::Tuple(parts) if parts.len() == 2 => Some(parts),
        _ => None,
    };
    let Some(parts) = pair else {
        return Err(l
            .err(Stage::Type, &f.span, format!("the body of `scan` must return (carry, y), but it returns {}", st.out))
            .into());
    };
    if parts[0] != init_t {
        return Err(carry_changes(l, "scan", f, init, &init_t, &parts[0]));
    }
    let body = captures_first(&st).map_err(|e| l.ir_err(e, span))?;
    let cs = caps(l, &st);
    l.set_span(span);
    let r = l.b().scan(Arc::new(body), &cs, &init_l, &xs_l, ScanOpts::new(n).remat(remat));
    let outs = l.ir(r, span)?;
    let nc = init_t.n_leaves();
    let carry = rebuild(l, &init_t, &outs[..nc]);
    let ys_tree = stack_tree(&parts[1], n);
    let ys = rebuild(l, &ys_tree, &outs[nc..]);
    Ok(Val::tuple(vec![carry, ys]))
}

fn stack_tree(t: &Tree, n: usize) -> Tree {
    match t {
        Tree::Leaf(ty) => {
            let mut s = vec![n];
            s.extend(&ty.shape);
            Tree::Leaf(TensorType::new(ty.dtype, s))
        }
        Tree::Tuple(ts) => Tree::Tuple(ts.iter().map(|t| stack_tree(t, n)).collect()),
    }
}

fn retype(t: &Tree, it: &mut impl Iterator<Item = TensorType>) -> Tree {
    match t {
        Tree::Leaf(_) => Tree::Leaf(it.next().expect("internal error: one type per leaf")),
        Tree::Tuple(ts) => Tree::Tuple(ts.iter().map(|t| retype(t, it)).collect()),
    }
}

/// `fori(n, f, init)` with `f(i, carry) -> carry` (`i` an i32 scalar).
pub fn fori(
    l: &mut Lower<'_>,
    n: &ArgVal,
    f: &ArgVal,
    init: &ArgVal,
    remat: Remat,
    span: &Span,
) -> Result<Val, Diagnostic> {
    retry_wide(init, |wide| fori_at(l, n, f, init, remat, span, wide))
}

fn fori_at(
    l: &mut Lower<'_>,
    n: &ArgVal,
    f: &ArgVal,
    init: &ArgVal,
    remat: Remat,
    span: &Span,
    wide: bool,
) -> Result<Val, LoopErr> {
    let k = super::expr::static_int(&n.val);
    let dynamic = match k {
        Some(k) if k < 0 => {
            return Err(l.err(Stage::Type, &n.span, format!("`fori` needs a trip count >= 0, found {k}")).into())
        }
        Some(_) => None,
        None => Some(run_time_count(l, n)?),
    };
    let fv = func_arg(l, f, "the second argument of `fori`")?;
    let (init_l, init_t) = init_leaves(l, &init.val, wide, &init.span)?;
    let i_t = Tree::Leaf(TensorType::scalar(graft_core::DType::I32));
    let st = lower_call(l, &fv, &[i_t, init_t.clone()], span)?;
    if st.out != init_t {
        return Err(carry_changes(l, "fori", f, init, &init_t, &st.out));
    }
    let body = captures_first(&st).map_err(|e| l.ir_err(e, span))?;
    let cs = caps(l, &st);
    l.set_span(span);
    let r = match (dynamic, k) {
        (Some(nv), _) => l.b().fori_dynamic(nv, &body, &cs, &init_l, remat),
        (None, k) => l.b().fori(k.unwrap_or(0) as usize, &body, &cs, &init_l, remat),
    };
    let outs = l.ir(r, span)?;
    Ok(rebuild(l, &init_t, &outs))
}

/// A run-time trip count: an i32 scalar tensor (other integer or float
/// types are rejected rather than silently converted).
fn run_time_count(l: &mut Lower<'_>, n: &ArgVal) -> Result<Value, Diagnostic> {
    let bad = |l: &Lower<'_>, found: String| {
        l.err(
            Stage::Type,
            &n.span,
            format!(
                "the trip count of `fori` must be an integer known while compiling or an i32 scalar, found {found}"
            ),
        )
    };
    let Val::T(tv) = &n.val else { return Err(bad(l, n.val.describe())) };
    let v = l.import(*tv);
    let ty = l.ty(v);
    if ty != TensorType::scalar(graft_core::DType::I32) {
        return Err(bad(l, ty.to_string()));
    }
    Ok(v)
}

/// `while(cond, body, init)`: `cond(carry) -> bool`, `body(carry) -> carry`;
/// repeats `body` while `cond` holds and returns the final carry.
pub fn while_loop(
    l: &mut Lower<'_>,
    c: &ArgVal,
    f: &ArgVal,
    init: &ArgVal,
    remat: Remat,
    span: &Span,
) -> Result<Val, Diagnostic> {
    retry_wide(init, |wide| while_at(l, c, f, init, remat, span, wide))
}

fn while_at(
    l: &mut Lower<'_>,
    c: &ArgVal,
    f: &ArgVal,
    init: &ArgVal,
    remat: Remat,
    span: &Span,
    wide: bool,
) -> Result<Val, LoopErr> {
    let cv = func_arg(l, c, "the first argument of `while`")?;
    let fv = func_arg(l, f, "the second argument of `while`")?;
    let (init_l, init_t) = init_leaves(l, &init.val, wide, &init.span)?;
    let cst = lower_call(l, &cv, std::slice::from_ref(&init_t), span)?;
    let bool_t = Tree::Leaf(TensorType::scalar(graft_core::DType::Bool));
    if cst.out != bool_t {
        return Err(l
            .err(
                Stage::Type,
                &c.span,
                format!("the condition of `while` must return a bool scalar, but it returns {}", cst.out),
            )
            .into());
    }
    let bst = lower_call(l, &fv, std::slice::from_ref(&init_t), span)?;
    if bst.out != init_t {
        return Err(carry_changes(l, "while", f, init, &init_t, &bst.out));
    }
    let cc = caps(l, &cst);
    let bc = caps(l, &bst);
    let types: Vec<TensorType> = cc.iter().chain(&bc).map(|&v| l.ty(v)).collect();
    let cf = consts_first(&cst, &types, 0).map_err(|e| l.ir_err(e, span))?;
    let bf = consts_first(&bst, &types, cc.len()).map_err(|e| l.ir_err(e, span))?;
    let mut consts = cc;
    consts.extend(bc);
    l.set_span(span);
    let r = l.b().while_loop_remat(Arc::new(cf), Arc::new(bf), &consts, &init_l, remat);
    let outs = l.ir(r, span)?;
    Ok(rebuild(l, &init_t, &outs))
}

/// `st`'s function as `(consts..., real...)` where `consts` has the types
/// `types` and `st`'s own captures are `consts[skip..]` (in order).
fn consts_first(st: &Standalone, types: &[TensorType], skip: usize) -> Result<Func, graft_core::IrError> {
    let f = &st.func;
    let mut b = Builder::new(f.name.clone());
    let ks: Vec<Value> = types.iter().map(|t| b.param(t.clone())).collect();
    let mut args: Vec<Value> = f.params[..st.n_real].iter().map(|&p| b.param(f.ty(p).clone())).collect();
    args.extend_from_slice(&ks[skip..skip + st.captures.len()]);
    let outs = b.inline(f, &args)?;
    b.finish(&outs)
}

/// Scalar `if` with a run-time condition: a `cond` that runs one branch.
/// Returns `None` when the branches' types differ (the caller then unifies
/// literals and selects).
pub fn if_cond(
    l: &mut Lower<'_>,
    pred: Value,
    then: &Expr,
    otherwise: &Expr,
    env: &Env,
    span: &Span,
) -> Result<Option<Val>, Diagnostic> {
    let a = l.standalone("then", &[], &then.span, |this, _| this.expr(then, env))?;
    let b = l.standalone("else", &[], &otherwise.span, |this, _| this.expr(otherwise, env))?;
    if a.out != b.out {
        return Ok(None);
    }
    // Both branches take the union of the captures.
    let ca: Vec<Value> = caps(l, &a);
    let cb: Vec<Value> = caps(l, &b);
    let types: Vec<TensorType> = ca.iter().chain(&cb).map(|&v| l.ty(v)).collect();
    let wrap = |st: &Standalone, skip: usize, keep: usize| -> Result<Func, graft_core::IrError> {
        let mut bld = Builder::new(st.func.name.clone());
        let ps: Vec<Value> = types.iter().map(|t| bld.param(t.clone())).collect();
        let outs = bld.inline(&st.func, &ps[skip..skip + keep])?;
        bld.finish(&outs)
    };
    let fa = wrap(&a, 0, ca.len()).map_err(|e| l.ir_err(e, span))?;
    let fb = wrap(&b, ca.len(), cb.len()).map_err(|e| l.ir_err(e, span))?;
    let mut ops = ca;
    ops.extend(cb);
    l.set_span(span);
    let r = l.b().cond(pred, Arc::new(fa), Arc::new(fb), &ops);
    let outs = l.ir(r, span)?;
    Ok(Some(rebuild(l, &a.out, &outs)))
}
