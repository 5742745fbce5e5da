//! Kernels of the loop primitives. Each kernel plans its sub-functions once
//! (`exec::plan_cached`) and runs the plans on every trip; a dead carry goes
//! back to the body plan's pool, so steady-state trips allocate nothing.
//!
//! Reverse mode's carry stack lives here: it is sized by the run-time trip
//! count, which the IR (static types) cannot express. The bytes a kernel
//! holds (carries, stack, recomputed segment) plus each nested run's peak
//! are reported with `exec::note_nested_peak`, so peak-bytes figures of the
//! enclosing run include them.

use super::{Loop, Remat};
use crate::error::ExecError;
use crate::exec::{note_nested_peak, plan_cached, Executable};
use crate::ir::Func;
use crate::tensor::Tensor;
use std::sync::Arc;

/// Moves the results into the pre-sized outputs.
pub(super) fn write_outs(name: &str, outs: &mut [Tensor], fin: Vec<Tensor>) -> Result<(), ExecError> {
    if fin.len() != outs.len() {
        return Err(ExecError::kernel(
            name,
            format!("internal error: the loop produced {} results for {} outputs", fin.len(), outs.len()),
        ));
    }
    for (o, r) in outs.iter_mut().zip(fin) {
        *o = r;
    }
    Ok(())
}

fn bytes(ts: &[Tensor]) -> usize {
    ts.iter().map(Tensor::size_bytes).sum()
}

/// The planned cond and body of a loop.
struct Plans {
    cond: Arc<Executable>,
    body: Arc<Executable>,
}

impl Plans {
    fn new(lp: &Loop) -> Result<Plans, ExecError> {
        Ok(Plans { cond: plan_cached(&lp.cond)?, body: plan_cached(&lp.body)? })
    }

    /// `cond(consts, carry)`; `held` is what the kernel holds besides.
    fn test(&self, consts: &[&Tensor], carry: &[Tensor], held: usize) -> Result<bool, ExecError> {
        let (outs, stats) = self.cond.run_with_stats(&args(consts, carry))?;
        note_nested_peak(held + stats.peak_bytes);
        let p = outs
            .first()
            .and_then(|t| t.as_slice::<bool>().ok())
            .and_then(|s| s.first().copied())
            .ok_or_else(|| ExecError::kernel("while", "internal error: cond's type is checked to be bool[]"))?;
        self.cond.recycle(outs);
        Ok(p)
    }

    /// `body(consts, carry)`.
    fn step(&self, consts: &[&Tensor], carry: &[Tensor], held: usize) -> Result<Vec<Tensor>, ExecError> {
        let (outs, stats) = self.body.run_with_stats(&args(consts, carry))?;
        note_nested_peak(held + stats.peak_bytes);
        Ok(outs)
    }
}

fn args<'a>(consts: &[&'a Tensor], carry: &'a [Tensor]) -> Vec<&'a Tensor> {
    consts.iter().copied().chain(carry).collect()
}

/// Runs `lp` from `init`; returns the final carry.
pub(super) fn run_loop(lp: &Loop, consts: &[&Tensor], init: Vec<Tensor>) -> Result<Vec<Tensor>, ExecError> {
    let p = Plans::new(lp)?;
    // Compiled whole when `cond` and body have kernel forms and the code is
    // ready (bitwise the same carries, see `kernel::loops::whiles`).
    if let Some(nw) = p.body.native_while(&lp.cond, &p.cond, lp.n_consts, init.len()) {
        if let Some(f) = nw.ready() {
            return nw.run(f, consts, &init);
        }
    }
    let mut carry = init;
    while p.test(consts, &carry, bytes(&carry))? {
        let next = p.step(consts, &carry, bytes(&carry))?;
        p.body.recycle(std::mem::replace(&mut carry, next));
    }
    Ok(carry)
}

/// `while_jvp`: operands `(k, c0, v_k, v_c)`; runs the augmented loop on
/// consts `(k, v_k)` and carry `(c0, v_c)` and returns the tangent half.
pub(super) fn jvp(lp: &Loop, aug: &Loop, ins: &[&Tensor]) -> Result<Vec<Tensor>, ExecError> {
    let (nk, nx) = (lp.n_consts, lp.n_x());
    let (nfk, _) = lp.n_float();
    let (x, v) = ins.split_at(nx);
    let mut consts: Vec<&Tensor> = x[..nk].to_vec();
    consts.extend_from_slice(&v[..nfk]);
    let init: Vec<Tensor> = x[nk..].iter().chain(&v[nfk..]).map(|t| (*t).clone()).collect();
    let mut fin = run_loop(aug, &consts, init)?;
    Ok(fin.split_off(nx - nk))
}

/// `while_hvp`: operands `(k, c0, u, w)`; the `x` half of the augmented
/// loop's VJP at `((k, w_k), (c0, w_c))` with seed `(0, u)`.
pub(super) fn hvp(lp: &Loop, aug: &Loop, aug_back: &Arc<Func>, ins: &[&Tensor]) -> Result<Vec<Tensor>, ExecError> {
    let (nk, nx) = (lp.n_consts, lp.n_x());
    let (nfk, nfc) = lp.n_float();
    let (x, rest) = ins.split_at(nx);
    let (u, w) = rest.split_at(nfc);
    let mut xa: Vec<&Tensor> = x[..nk].to_vec();
    xa.extend_from_slice(&w[..nfk]);
    xa.extend_from_slice(&x[nk..]);
    xa.extend_from_slice(&w[nfk..]);
    let mut seed: Vec<Tensor> = lp.float_carry_types().iter().map(Tensor::zeros).collect();
    seed.extend(u.iter().map(|t| (*t).clone()));
    let all = vjp(aug, aug_back, &xa, seed)?;
    // all = (ct k_f, ct w_k, ct c_f, ct w_c); keep the x half.
    Ok(all
        .into_iter()
        .enumerate()
        .filter(|&(i, _)| i < nfk || (2 * nfk..2 * nfk + nfc).contains(&i))
        .map(|(_, t)| t)
        .collect())
}

/// `while_vjp`: the forward sweep keeps carries on a stack (every one, or
/// every `stride`-th under [`Remat`]); the backward sweep recomputes each
/// segment from its first carry and runs the backward step through it in
/// reverse, carrying `(acc of const cotangents, carry cotangent)`.
pub(super) fn vjp(lp: &Loop, back: &Arc<Func>, x: &[&Tensor], seed: Vec<Tensor>) -> Result<Vec<Tensor>, ExecError> {
    let (k, c0) = x.split_at(lp.n_consts);
    let p = Plans::new(lp)?;
    let bk = plan_cached(back)?;
    let init = || c0.iter().map(|t| (*t).clone()).collect::<Vec<Tensor>>();
    let stride = match lp.remat {
        Remat::Off => 1,
        Remat::Every(s) => s.max(1),
        Remat::Sqrt => {
            let mut carry = init();
            let mut n = 0usize;
            while p.test(k, &carry, bytes(&carry))? {
                let next = p.step(k, &carry, bytes(&carry))?;
                p.body.recycle(std::mem::replace(&mut carry, next));
                n += 1;
            }
            ((n as f64).sqrt().ceil() as usize).max(1)
        }
    };
    // Forward sweep: saved[j] = c_{j * stride}.
    let mut saved: Vec<Vec<Tensor>> = Vec::new();
    let mut stack_bytes = 0usize;
    let mut carry = init();
    let mut n = 0usize;
    while p.test(k, &carry, stack_bytes + bytes(&carry))? {
        let next = p.step(k, &carry, stack_bytes + bytes(&carry))?;
        let prev = std::mem::replace(&mut carry, next);
        if n.is_multiple_of(stride) {
            stack_bytes += bytes(&prev);
            saved.push(prev);
        } else {
            p.body.recycle(prev);
        }
        n += 1;
    }
    note_nested_peak(stack_bytes + bytes(&carry));
    drop(carry);
    // Backward sweep.
    let (nfk, _) = lp.n_float();
    let mut state: Vec<Tensor> = lp.float_x_types()[..nfk].iter().map(Tensor::zeros).collect();
    state.extend(seed);
    let state_bytes = bytes(&state);
    for j in (0..saved.len()).rev() {
        let first =
            saved.pop().ok_or_else(|| ExecError::kernel("while_vjp", "internal error: one save per segment"))?;
        stack_bytes -= bytes(&first);
        let end = ((j + 1) * stride).min(n);
        let mut segment = vec![first];
        let mut seg_bytes = bytes(&segment[0]);
        for _ in j * stride + 1..end {
            let last = segment.last().map(Vec::as_slice).unwrap_or(&[]);
            let next = p.step(k, last, stack_bytes + seg_bytes + state_bytes)?;
            seg_bytes += bytes(&next);
            segment.push(next);
        }
        while let Some(c) = segment.pop() {
            seg_bytes -= bytes(&c);
            let mut a = k.to_vec();
            a.extend(c.iter());
            a.extend(state.iter());
            let (outs, stats) = bk.run_with_stats(&a)?;
            note_nested_peak(stack_bytes + seg_bytes + bytes(&c) + state_bytes + stats.peak_bytes);
            bk.recycle(std::mem::replace(&mut state, outs));
            // `c` is dropped, not pooled: the body may not run again, and a
            // cached plan's pool outlives this call.
            drop(c);
        }
    }
    Ok(state)
}
