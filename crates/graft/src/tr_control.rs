//! Structured control flow for traced code: `scan`, `fori`, `while_loop`, `cond`, `switch`,
//! and `debug_print` (an effect ordered with them).
//!
//! Bodies and branches are Rust closures traced into closed sub-functions
//! (see `graft_core::ops::scan` and `graft_core::ops::cond` for semantics).
//! Closures must not use tensors of the enclosing trace: pass loop-invariant
//! values as `consts` (scan, fori) or `operands` (cond); a captured outer
//! tensor poisons the trace with an error, it never panics.

use crate::trace::{trace, Tr};
use graft_core::ops::remat::Remat;
use graft_core::ops::scan::ScanOpts;
use graft_core::{IrError, TensorType};
use std::sync::Arc;

fn types_of(xs: &[Tr]) -> Option<Vec<TensorType>> {
    xs.iter().map(Tr::ty).collect()
}

/// Emits a multi-result op over `args`; `n_out` failed handles when there is
/// nothing to attach it to or a type is unknown (the trace already failed).
fn emit(
    args: &[Tr],
    n_out: usize,
    f: impl FnOnce(&mut graft_core::Builder, &[graft_core::Value]) -> Result<Vec<graft_core::Value>, IrError>,
) -> Vec<Tr> {
    match args.split_first() {
        Some((first, rest)) => {
            let others: Vec<&Tr> = rest.iter().collect();
            first.lift_many(&others, n_out, f)
        }
        None => Vec::new(),
    }
}

/// `lax.scan`: `body(consts, carry, x) -> (carry', y)` over the leading axis
/// of `xs`; returns (final carry, stacked ys). Needs at least one operand.
pub fn scan(
    consts: &[Tr],
    init: &[Tr],
    xs: &[Tr],
    opts: ScanOpts,
    body: impl Fn(&[Tr], &[Tr], &[Tr]) -> (Vec<Tr>, Vec<Tr>),
) -> (Vec<Tr>, Vec<Tr>) {
    let (nc, nk) = (consts.len(), init.len());
    let args: Vec<Tr> = consts.iter().chain(init).chain(xs).cloned().collect();
    let traced = (|| -> Result<graft_core::Func, IrError> {
        let tys = types_of(&args).ok_or_else(|| IrError::invalid("scan", "an operand comes from a failed op"))?;
        let mut body_tys = tys[..nc + nk].to_vec();
        for t in &tys[nc + nk..] {
            if t.rank() == 0 || t.shape[0] != opts.length {
                return Err(IrError::invalid("scan", format!("xs must have leading axis {}, got {t}", opts.length)));
            }
            body_tys.push(TensorType::new(t.dtype, t.shape[1..].to_vec()));
        }
        trace("scan_body", &body_tys, |p| {
            let (c, y) = body(&p[..nc], &p[nc..nc + nk], &p[nc + nk..]);
            c.into_iter().chain(y).collect::<Vec<Tr>>()
        })
    })();
    let n_out = traced.as_ref().map_or(nk, |f| f.outputs.len());
    let mut outs = emit(&args, n_out, |b, vals| {
        let f = Arc::new(traced?);
        b.scan(f, &vals[..nc], &vals[nc..nc + nk], &vals[nc + nk..], opts)
    });
    let ys = outs.split_off(nk.min(outs.len()));
    (outs, ys)
}

/// `fori_loop` with a trip count known now: `carry = body(consts, i, carry)`
/// for `i = 0..n` (`i`: an i32 scalar); returns the final carry.
pub fn fori(
    n: usize,
    consts: &[Tr],
    init: &[Tr],
    remat: Remat,
    body: impl Fn(&[Tr], &Tr, &[Tr]) -> Vec<Tr>,
) -> Vec<Tr> {
    let nc = consts.len();
    let args: Vec<Tr> = consts.iter().chain(init).cloned().collect();
    let traced = (|| -> Result<graft_core::Func, IrError> {
        let tys = types_of(&args).ok_or_else(|| IrError::invalid("fori", "an operand comes from a failed op"))?;
        let mut body_tys = tys[..nc].to_vec();
        body_tys.push(TensorType::scalar(graft_core::DType::I32));
        body_tys.extend_from_slice(&tys[nc..]);
        trace("fori_body", &body_tys, |p| body(&p[..nc], &p[nc], &p[nc + 1..]))
    })();
    emit(&args, init.len(), |b, vals| b.fori(n, &traced?, &vals[..nc], &vals[nc..], remat))
}

/// `lax.while_loop`: `while cond(consts, carry): carry = body(consts,
/// carry)` from `init`; returns the final carry. `cond` returns a bool
/// scalar; `body` returns the next carry (same types as `init`).
pub fn while_loop(
    consts: &[Tr],
    init: &[Tr],
    cond: impl Fn(&[Tr], &[Tr]) -> Tr,
    body: impl Fn(&[Tr], &[Tr]) -> Vec<Tr>,
) -> Vec<Tr> {
    let nc = consts.len();
    let args: Vec<Tr> = consts.iter().chain(init).cloned().collect();
    let made = (|| -> Result<(Arc<graft_core::Func>, Arc<graft_core::Func>), IrError> {
        let tys = types_of(&args).ok_or_else(|| IrError::invalid("while", "an operand comes from a failed op"))?;
        let c = trace("while_cond", &tys, |p| cond(&p[..nc], &p[nc..]))?;
        let b = trace("while_body", &tys, |p| body(&p[..nc], &p[nc..]))?;
        Ok((Arc::new(c), Arc::new(b)))
    })();
    emit(&args, init.len(), |b, vals| {
        let (c, body) = made?;
        b.while_loop(c, body, &vals[..nc], &vals[nc..])
    })
}

/// The result count of the first branch that traced; 1 when none did (the
/// trace fails anyway, and callers commonly take the first result).
fn out_count<const N: usize>(made: [&Result<Arc<graft_core::Func>, IrError>; N]) -> usize {
    made.iter().find_map(|m| m.as_ref().ok()).map_or(1, |f| f.outputs.len())
}

fn branch(name: &str, tys: &[TensorType], f: impl Fn(&[Tr]) -> Vec<Tr>) -> Result<Arc<graft_core::Func>, IrError> {
    trace(name, tys, f).map(Arc::new)
}

/// `lax.cond`: `on_true(operands)` if the bool scalar `pred` holds, else
/// `on_false(operands)`; both must return the same types.
pub fn cond(
    pred: &Tr,
    operands: &[Tr],
    on_true: impl Fn(&[Tr]) -> Vec<Tr>,
    on_false: impl Fn(&[Tr]) -> Vec<Tr>,
) -> Vec<Tr> {
    let tys = types_of(operands).ok_or_else(|| IrError::invalid("cond", "an operand comes from a failed op"));
    let t = tys.clone().and_then(|t| branch("on_true", &t, on_true));
    let f = tys.and_then(|t| branch("on_false", &t, on_false));
    let n_out = out_count([&t, &f]);
    let made = t.and_then(|t| Ok((t, f?)));
    let args: Vec<Tr> = std::iter::once(pred.clone()).chain(operands.iter().cloned()).collect();
    emit(&args, n_out, |b, vals| {
        let (t, f) = made?;
        b.cond(vals[0], t, f, &vals[1..])
    })
}

/// `lax.switch`: runs `branches[clamp(index)]` on `operands` (`index`: i32 scalar).
pub fn switch(index: &Tr, operands: &[Tr], branches: &[&dyn Fn(&[Tr]) -> Vec<Tr>]) -> Vec<Tr> {
    let made = types_of(operands)
        .ok_or_else(|| IrError::invalid("switch", "an operand comes from a failed op"))
        .and_then(|t| {
            branches
                .iter()
                .enumerate()
                .map(|(k, f)| branch(&format!("branch{k}"), &t, f))
                .collect::<Result<Vec<_>, _>>()
        });
    let n_out = made.as_ref().ok().and_then(|v| v.first()).map_or(1, |f| f.outputs.len());
    let args: Vec<Tr> = std::iter::once(index.clone()).chain(operands.iter().cloned()).collect();
    emit(&args, n_out, |b, vals| b.switch(vals[0], &made?, &vals[1..]))
}

/// Prints `values` through `fmt` (`{}` placeholders, `{{`/`}}` braces) each
/// time the traced function runs: in program order, on every loop trip,
/// the forward values under the derivative transforms, one line per example
/// under vmap (see `graft_core::ops::debug`). `ctx` names the trace (any
/// value of it, as for `random::key`). Lines go to standard error, or to
/// [`graft_core::ops::debug::capture_prints`] on the running thread. A
/// format that does not have one placeholder per value poisons the trace
/// with an error.
pub fn debug_print(ctx: &Tr, fmt: &str, values: &[&Tr]) {
    ctx.lift_many(values, 1, |b, v| {
        b.debug_print(fmt, &v[1..])?;
        // `lift_many` hands back results; the print has none, so the
        // context value stands in for it (and is dropped).
        Ok(vec![v[0]])
    });
}
