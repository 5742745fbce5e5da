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
            let init: Vec<&Tensor> = init.iter().collect();
            return Ok(nw.run(f, consts, &init)?.0);
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
/// consts `(k, v_k)` and carry `(c0, v_c)` and returns the tangent half
/// (both halves, primal first, with `primal`).
pub(super) fn jvp(lp: &Loop, aug: &Loop, ins: &[&Tensor], primal: bool) -> Result<Vec<Tensor>, ExecError> {
    let (nk, nx) = (lp.n_consts, lp.n_x());
    let (nfk, _) = lp.n_float();
    let (x, v) = ins.split_at(nx);
    let mut consts: Vec<&Tensor> = x[..nk].to_vec();
    consts.extend_from_slice(&v[..nfk]);
    let init: Vec<Tensor> = x[nk..].iter().chain(&v[nfk..]).map(|t| (*t).clone()).collect();
    let mut fin = run_loop(aug, &consts, init)?;
    Ok(if primal { fin } else { fin.split_off(nx - nk) })
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
    if lp.remat == Remat::Off {
        if let Some(state) = compiled_vjp(lp, back, &p, k, c0, &seed)? {
            return Ok(state);
        }
    }
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

/// The two functions a compiled `while_vjp` runs as scans, derived from a
/// loop's body and its backward step (see [`compiled_vjp`]).
struct Sweeps {
    /// The loop's body and backward step (not kept alive by this).
    body: std::sync::Weak<Func>,
    back: std::sync::Weak<Func>,
    /// `(k, c) -> (body(k, c), c)`: the body, also returning the carry it
    /// read (the `ys` of a scan stack the carries).
    record: Arc<Func>,
    /// `(k, state, c) -> back(k, c, state)`: the backward step with its
    /// parameters in a scan body's order (consts, carry, x).
    back_scan: Arc<Func>,
}

/// Derived functions are built once per (body, back) pair and kept while
/// that pair lives, so that their plans and compiled loops (cached by
/// function) are found again. (Kept for good, they and their plans grew
/// with every loop ever differentiated.)
static SWEEPS: std::sync::Mutex<Vec<Arc<Sweeps>>> = std::sync::Mutex::new(Vec::new());

fn sweeps(lp: &Loop, back: &Arc<Func>) -> Arc<Sweeps> {
    let mut all = SWEEPS.lock().unwrap_or_else(|e| e.into_inner());
    // A dead `Weak` keeps its allocation, so a live function never shares
    // the address of one that was dropped.
    all.retain(|s| s.body.strong_count() > 0 && s.back.strong_count() > 0);
    if let Some(s) =
        all.iter().find(|s| s.body.as_ptr() == Arc::as_ptr(&lp.body) && s.back.as_ptr() == Arc::as_ptr(back))
    {
        return s.clone();
    }
    let (nc, nk) = (lp.n_consts, lp.body.outputs.len());
    let mut record = (*lp.body).clone();
    record.name = format!("{}_record", lp.body.name);
    record.outputs.extend_from_slice(&lp.body.params[nc..nc + nk]);
    let mut back_scan = (**back).clone();
    back_scan.name = format!("{}_scan", back.name);
    let bp = &back.params;
    back_scan.params = bp[..nc].iter().chain(&bp[nc + nk..]).chain(&bp[nc..nc + nk]).copied().collect();
    let s = Arc::new(Sweeps {
        body: Arc::downgrade(&lp.body),
        back: Arc::downgrade(back),
        record: Arc::new(record),
        back_scan: Arc::new(back_scan),
    });
    all.push(s.clone());
    s
}

/// `while_vjp` with both sweeps compiled (loops without rematerialisation,
/// once the native code of all three loops is ready; `None` otherwise):
/// the compiled while loop counts the trips `n`; a compiled scan of length
/// `n` over the body records the carries `c_0 .. c_{n-1}` as its stacked
/// `ys`; a compiled reverse scan over them runs the backward step, its
/// carry the state `(const cotangents, carry cotangent)`. The same steps in
/// the same order as the interpreted sweeps, so the same bits.
fn compiled_vjp(
    lp: &Loop,
    back: &Arc<Func>,
    p: &Plans,
    k: &[&Tensor],
    c0: &[&Tensor],
    seed: &[Tensor],
) -> Result<Option<Vec<Tensor>>, ExecError> {
    let (nc, nk) = (lp.n_consts, c0.len());
    let sw = sweeps(lp, back);
    let (rec, bk) = (plan_cached(&sw.record)?, plan_cached(&sw.back_scan)?);
    let nstate = sw.back_scan.outputs.len();
    // Ask for all three first, so that they compile side by side.
    let (nw, rl, bl) = (
        p.body.native_while(&lp.cond, &p.cond, nc, nk),
        rec.native_loop(nc, nk, false),
        bk.native_loop(nc, nstate, true),
    );
    let (Some(nw), Some(rl), Some(bl)) = (nw, rl, bl) else { return Ok(None) };
    let (Some(fw), Some(fr), Some(fb)) = (nw.ready(), rl.ready(), bl.ready()) else { return Ok(None) };
    let (_, n) = nw.run(fw, k, c0)?;
    // Forward sweep: the carries, stacked.
    let stacked = |t: &Tensor| {
        let mut shape = vec![n];
        shape.extend_from_slice(t.shape());
        crate::types::TensorType { dtype: t.dtype(), shape }
    };
    // The carry stack is sized by the trip count: allocated fallibly.
    let mut outs: Vec<Tensor> = c0.iter().map(|t| Tensor::try_zeros(&t.ty())).collect::<Result<_, _>>()?;
    for t in c0 {
        outs.push(Tensor::try_zeros(&stacked(t))?);
    }
    let stack_bytes: usize = outs[nk..].iter().map(Tensor::size_bytes).sum();
    let ins: Vec<&Tensor> = k.iter().chain(c0).copied().collect();
    rl.run(fr, n, &ins, &mut outs)?;
    let saved = outs.split_off(nk);
    drop(outs);
    // Backward sweep.
    let (nfk, _) = lp.n_float();
    let mut state: Vec<Tensor> = lp.float_x_types()[..nfk].iter().map(Tensor::zeros).collect();
    state.extend(seed.iter().cloned());
    let mut fin: Vec<Tensor> = state.iter().map(|t| Tensor::zeros(&t.ty())).collect();
    let ins: Vec<&Tensor> = k.iter().copied().chain(&state).chain(&saved).collect();
    bl.run(fb, n, &ins, &mut fin)?;
    note_nested_peak(stack_bytes + bytes(&state) + bytes(&fin));
    Ok(Some(fin))
}
