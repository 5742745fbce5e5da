//! Derivative rules of `scan`.
//!
//! JVP (as JAX's partial evaluation of loops): find which carries have a
//! nonzero tangent (a fixed point: a carry whose next value depends on a
//! tangent needs one from the start), take the JVP of the body and split it
//! ([`rewrite::split_loop`]) into values hoisted out of the loop, a primal scan that
//! also stacks the per-step residuals, and a scan linear in the tangents
//! whose other operands are only residuals. Reverse mode then copies the
//! primal scan into the forward pass and transposes the linear one.
//!
//! Transpose (of such a linear scan): a scan in the opposite direction over
//! the transposed body; it carries the cotangents of the carries and, as
//! accumulators, those of the linear consts, and stacks the cotangents of
//! the linear xs. Carries are always treated as linear (they are tangents).
//!
//! Cost: the residual scan also returns the carries and `ys`, and the rule
//! hands them to the driver as the equation's results
//! (`JvpCx::replace_outputs`), so the scan the driver emitted is dead and
//! removed: reverse mode runs one forward sweep plus the reverse one (two
//! forward sweeps with checkpointing, which recomputes each segment once
//! more). The residual scan keeps every carry and `y` even when only the
//! gradient is used (e.g. a fori counter, or `ys` only the primal value needs).
//!
//! Remat: the JVP of a checkpointed scan is the JVP of the same loop
//! written as a scan over segments whose body is a `checkpoint` of an inner
//! scan over the segment's steps (plus a plain scan over the leftover steps).
//! The outer scan's residuals are then only each segment's first carry (and
//! its xs), and the transpose of the `checkpoint` recomputes a segment's
//! residuals right before transposing it. Each step's arithmetic is the
//! same as without checkpointing; a const's cotangent is summed within a
//! segment before it joins the total, so with segments longer than one
//! step a gradient can differ from the unsegmented one in the last bits.

use super::{Remat, Scan};
use crate::ad::{Diff, JvpCx, TransposeCx};
use crate::error::IrError;
use crate::ir::{Builder, Func, Value};
use crate::transform::rewrite::{
    self, permute_params, prune, split_loop, tangent_outputs, transpose_linear, TangentOuts,
};
use crate::types::TensorType;
use std::sync::Arc;

impl Diff for Scan {
    fn jvp(&self, b: &mut Builder, cx: &JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        if let Some(k) = self.remat.segment(self.length) {
            return self.jvp_checkpointed(b, cx, k);
        }
        let (nc, nk, nx, ny) = (self.n_consts, self.n_carry, self.n_xs(), self.n_ys());
        let body = &self.body;
        let mut nz: Vec<bool> = cx.tangents.iter().map(Option::is_some).collect();
        let out_nz = loop {
            let out_nz = tangent_outputs(body, &nz)?;
            let mut changed = false;
            for k in 0..nk {
                if out_nz[k] && !nz[nc + k] {
                    nz[nc + k] = true;
                    changed = true;
                }
            }
            if !changed {
                break out_nz;
            }
        };
        let mut out_t = out_nz;
        for k in 0..nk {
            out_t[k] = nz[nc + k] && body.ty(body.outputs[k]).dtype.is_float();
        }
        if !out_t.iter().any(|&t| t) {
            return Ok(vec![None; nk + ny]);
        }
        let jf = rewrite::jvp(body, format!("{}_jvp", body.name), &nz, true, TangentOuts::Marked(&out_t))?;
        let sp = split_loop(&jf, nc + nk + nx, nc, nk + ny)?;
        let (n_inv, n_step) = (sp.n_inv(), sp.n_step());
        let inv = b.inline(&sp.hoist, &cx.primals[..nc])?;
        let (results, steps) = self.residual_scan(b, &sp.fwd, cx.primals)?;
        cx.replace_outputs(results);
        let steps = &steps[..];

        // Tangent params of `lin` follow the body's params: consts, carries, xs.
        let t_idx: Vec<usize> = (0..nz.len()).filter(|&i| nz[i]).collect();
        let n_ct = t_idx.iter().filter(|&&i| i < nc).count();
        let n_kt = t_idx.iter().filter(|&&i| i >= nc && i < nc + nk).count();
        let n_xt = t_idx.len() - n_ct - n_kt;
        // lin params: inv, step, const_t, carry_t, x_t -> scan order: (inv, const_t) (carry_t) (step, x_t).
        let t0 = n_inv + n_step;
        let mut order: Vec<usize> = (0..n_inv).collect();
        order.extend(t0..t0 + n_ct);
        order.extend(t0 + n_ct..t0 + n_ct + n_kt);
        order.extend(n_inv..t0);
        order.extend(t0 + n_ct + n_kt..t0 + n_ct + n_kt + n_xt);
        let lin = permute_params(&sp.lin, &order)?;
        let mut args: Vec<Value> = inv;
        for &i in &t_idx {
            if i < nc {
                args.push(tangent(cx, i)?);
            }
        }
        for &i in &t_idx {
            if i >= nc && i < nc + nk {
                args.push(match cx.tangents[i] {
                    Some(t) => t,
                    None => b.zeros(body.ty(body.params[i]))?,
                });
            }
        }
        args.extend_from_slice(steps);
        for &i in &t_idx {
            if i >= nc + nk {
                args.push(tangent(cx, i)?);
            }
        }
        let lin_scan =
            Scan { body: Arc::new(lin), n_consts: n_inv + n_ct, n_carry: n_kt, remat: Remat::Off, ..self.clone() };
        let mut touts = b.emit(lin_scan, &args)?.into_iter();
        Ok(out_t.iter().map(|&t| if t { touts.next() } else { None }).collect())
    }

    fn transpose(&self, b: &mut Builder, cx: &TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        let (nc, nk, nx, ny) = (self.n_consts, self.n_carry, self.n_xs(), self.n_ys());
        let body = &self.body;
        let np = nc + nk + nx;
        let linear: Vec<bool> = (0..np).map(|i| (i >= nc && i < nc + nk) || cx.is_linear(i)).collect();
        let ct_present: Vec<bool> = (0..nk + ny).map(|j| j < nk || cx.cts[j].is_some()).collect();
        let tb = transpose_linear(body, &linear, &ct_present)?;
        // tb: (nl consts, nl xs, ct carry, ct ys present) -> (ct lin consts, ct carries, ct lin xs).
        let nl_c: Vec<usize> = (0..nc).filter(|&i| !linear[i]).collect();
        let lin_c: Vec<usize> = (0..nc).filter(|&i| linear[i]).collect();
        let nl_x: Vec<usize> = (nc + nk..np).filter(|&i| !linear[i]).collect();
        let lin_x: Vec<usize> = (nc + nk..np).filter(|&i| linear[i]).collect();
        let ys_ct: Vec<usize> = (nk..nk + ny).filter(|&j| ct_present[j]).collect();

        let mut w = Builder::new(format!("{}_rev", body.name));
        let p_nlc: Vec<Value> = nl_c.iter().map(|&i| w.param(body.ty(body.params[i]).clone())).collect();
        let p_ctk: Vec<Value> = (0..nk).map(|k| w.param(body.ty(body.params[nc + k]).clone())).collect();
        let p_acc: Vec<Value> = lin_c.iter().map(|&i| w.param(body.ty(body.params[i]).clone())).collect();
        let p_nlx: Vec<Value> = nl_x.iter().map(|&i| w.param(body.ty(body.params[i]).clone())).collect();
        let p_cty: Vec<Value> = ys_ct.iter().map(|&j| w.param(body.ty(body.outputs[j]).clone())).collect();
        let args: Vec<Value> = p_nlc.iter().chain(&p_nlx).chain(&p_ctk).chain(&p_cty).copied().collect();
        let g = w.inline(&tb, &args)?;
        let (g_c, rest) = g.split_at(lin_c.len());
        let (g_k, g_x) = rest.split_at(nk);
        let mut outs = g_k.to_vec();
        for (&acc, &gc) in p_acc.iter().zip(g_c) {
            outs.push(w.add(acc, gc)?);
        }
        outs.extend_from_slice(g_x);
        let rev_body = Arc::new(crate::opt::simplify(&w.finish(&outs)?));

        let mut ops: Vec<Value> = nl_c.iter().map(|&i| cx.primal("scan", i)).collect::<Result<_, _>>()?;
        for k in 0..nk {
            ops.push(match cx.cts[k] {
                Some(c) => c,
                None => b.zeros(&cx.out_types[k])?,
            });
        }
        for &i in &lin_c {
            ops.push(b.zeros(&cx.in_types[i])?);
        }
        for &i in &nl_x {
            ops.push(cx.primal("scan", i)?);
        }
        for &j in &ys_ct {
            ops.push(cx.cts[j].ok_or_else(|| IrError::invalid("scan", "internal error: missing cotangent"))?);
        }
        let rev = Scan {
            body: rev_body,
            n_consts: nl_c.len(),
            n_carry: nk + lin_c.len(),
            reverse: !self.reverse,
            remat: Remat::Off,
            ..self.clone()
        };
        let res = b.emit(rev, &ops)?;
        let mut cts = vec![None; np];
        for k in 0..nk {
            if cx.is_linear(nc + k) {
                cts[nc + k] = Some(res[k]);
            }
        }
        for (n, &i) in lin_c.iter().enumerate() {
            cts[i] = Some(res[nk + n]);
        }
        for (n, &i) in lin_x.iter().enumerate() {
            cts[i] = Some(res[nk + lin_c.len() + n]);
        }
        Ok(cts)
    }
}

impl Scan {
    /// Emits the primal scan of `fwd` (`(consts, carry, x) -> (carry', y,
    /// residuals)`): it returns the scan's own results (every carry and `y`)
    /// together with the stacked per-step residuals, so the caller hands the
    /// results to the JVP driver ([`JvpCx::replace_outputs`]) and the loop
    /// being differentiated is not run a second time. A residual that is an
    /// `x` slice is `xs` itself (not re-stacked), and operands the body does
    /// not read are dropped. Returns (results, residuals).
    fn residual_scan(&self, b: &mut Builder, fwd: &Func, ops: &[Value]) -> Result<(Vec<Value>, Vec<Value>), IrError> {
        let (nc, nk, ny) = (self.n_consts, self.n_carry, self.n_ys());
        let n_res = fwd.outputs.len() - nk - ny;
        let alias: Vec<Option<usize>> = fwd.outputs[nk + ny..]
            .iter()
            .map(|o| fwd.params[nc + nk..].iter().position(|p| p == o).map(|j| nc + nk + j))
            .collect();
        let keep_out: Vec<bool> = (0..nk + ny + n_res).map(|o| o < nk + ny || alias[o - nk - ny].is_none()).collect();
        let (body, kept) = prune(fwd, &keep_out);
        // A carry's parameter may be unread (e.g. it is overwritten each
        // step); the scan still carries it, so put it back.
        let need = vec![true; nk];
        let (body, kept) =
            if (0..nk).any(|k| !kept[nc + k]) { restore_params(fwd, &body, &kept, &need, nc)? } else { (body, kept) };
        let n_c = (0..nc).filter(|&i| kept[i]).count();
        let args: Vec<Value> = ops.iter().zip(&kept).filter(|(_, &k)| k).map(|(&v, _)| v).collect();
        let scan = Scan { body: Arc::new(body), n_consts: n_c, n_carry: nk, remat: Remat::Off, ..self.clone() };
        let mut outs = b.emit(scan, &args)?;
        let mut stacked = outs.split_off(nk + ny).into_iter();
        let res = alias
            .iter()
            .map(|a| match a {
                Some(i) => Ok(ops[*i]),
                None => stacked.next().ok_or_else(|| IrError::invalid("scan", "internal error: residual count")),
            })
            .collect::<Result<_, _>>()?;
        Ok((outs, res))
    }
}

/// `body` (pruned from `fwd`, keeping the params marked `kept`) with the
/// parameters of the needed carries added back, unread.
fn restore_params(
    fwd: &Func,
    body: &Func,
    kept: &[bool],
    need: &[bool],
    nc: usize,
) -> Result<(Func, Vec<bool>), IrError> {
    let mut kept2 = kept.to_vec();
    for (k, &n) in need.iter().enumerate() {
        kept2[nc + k] |= n;
    }
    let mut b = Builder::new(body.name.clone());
    let mut args = Vec::new();
    for (i, &p) in fwd.params.iter().enumerate() {
        if kept2[i] {
            let v = b.param(fwd.ty(p).clone());
            if kept[i] {
                args.push(v);
            }
        }
    }
    let outs = b.inline(body, &args)?;
    Ok((b.finish(&outs)?, kept2))
}

fn tangent(cx: &JvpCx<'_>, i: usize) -> Result<Value, IrError> {
    cx.tangents[i].ok_or_else(|| IrError::invalid("scan", "internal error: tangent expected"))
}

impl Scan {
    /// See the module docs: the JVP of the loop rewritten over segments of `k` steps.
    fn jvp_checkpointed(&self, b: &mut Builder, cx: &JvpCx<'_>, k: usize) -> Result<Vec<Option<Value>>, IrError> {
        let nested = self.segmented(k)?;
        let (outs, touts) = crate::ad::jvp_inline(b, &nested, cx.primals, cx.tangents)?;
        cx.replace_outputs(outs);
        Ok(touts)
    }

    /// The same loop as a scan over `n / k` segments whose body checkpoints an
    /// inner scan of `k` steps, followed (or, reversed, preceded) by a plain
    /// scan of the `n % k` leftover steps.
    fn segmented(&self, k: usize) -> Result<Func, IrError> {
        let (nc, nk, nx, ny) = (self.n_consts, self.n_carry, self.n_xs(), self.n_ys());
        let body = &self.body;
        let n = self.length;
        let (m, r) = (n / k, n % k);
        let plain = |length| Scan { length, remat: Remat::Off, ..self.clone() };
        let with_len = |t: &TensorType, lead: &[usize]| {
            let mut s = lead.to_vec();
            s.extend_from_slice(&t.shape);
            TensorType::new(t.dtype, s)
        };
        let pty: Vec<TensorType> = body.params.iter().map(|&p| body.ty(p).clone()).collect();

        // seg(consts, carry, xs[k]) -> (carry', ys[k]), checkpointed by the outer body.
        let mut sb = Builder::new(format!("{}_seg", body.name));
        let sp: Vec<Value> = pty
            .iter()
            .enumerate()
            .map(|(i, t)| sb.param(if i < nc + nk { t.clone() } else { with_len(t, &[k]) }))
            .collect();
        let so = sb.emit(plain(k), &sp)?;
        let seg = Arc::new(sb.finish(&so)?);
        let mut ob = Builder::new(format!("{}_segs", body.name));
        let op: Vec<Value> = pty
            .iter()
            .enumerate()
            .map(|(i, t)| ob.param(if i < nc + nk { t.clone() } else { with_len(t, &[k]) }))
            .collect();
        let oo = ob.checkpoint(seg, &op)?;
        let outer_body = Arc::new(ob.finish(&oo)?);

        let mut fb = Builder::new(format!("{}_segmented", body.name));
        let fp: Vec<Value> = pty
            .iter()
            .enumerate()
            .map(|(i, t)| fb.param(if i < nc + nk { t.clone() } else { with_len(t, &[n]) }))
            .collect();
        let consts = &fp[..nc];
        let xs = &fp[nc + nk..];
        let mut xs_main = Vec::with_capacity(nx);
        let mut xs_tail = Vec::with_capacity(nx);
        for (j, &x) in xs.iter().enumerate() {
            let t = &pty[nc + nk + j];
            let rank = t.rank() + 1;
            let mut start = vec![0; rank];
            let mut stop = with_len(t, &[n]).shape;
            stop[0] = m * k;
            let stride = vec![1; rank];
            let main = fb.slice(x, &start, &stop, &stride)?;
            xs_main.push(fb.reshape(main, &with_len(t, &[m, k]).shape)?);
            start[0] = m * k;
            stop[0] = n;
            xs_tail.push(fb.slice(x, &start, &stop, &stride)?);
        }
        let run_outer = |fb: &mut Builder, carry: &[Value]| -> Result<Vec<Value>, IrError> {
            let args: Vec<Value> = consts.iter().chain(carry).chain(&xs_main).copied().collect();
            let outer = Scan { body: outer_body.clone(), length: m, remat: Remat::Off, ..self.clone() };
            fb.emit(outer, &args)
        };
        let run_tail = |fb: &mut Builder, carry: &[Value]| -> Result<Vec<Value>, IrError> {
            let args: Vec<Value> = consts.iter().chain(carry).chain(&xs_tail).copied().collect();
            fb.emit(plain(r), &args)
        };
        let init = &fp[nc..nc + nk];
        let (main_out, tail_out) = match (r, self.reverse) {
            (0, _) => (run_outer(&mut fb, init)?, None),
            (_, true) => {
                let t = run_tail(&mut fb, init)?;
                (run_outer(&mut fb, &t[..nk])?, Some(t))
            }
            (_, false) => {
                let o = run_outer(&mut fb, init)?;
                let t = run_tail(&mut fb, &o[..nk])?;
                (o, Some(t))
            }
        };
        let final_carry = match (&tail_out, self.reverse) {
            (Some(t), false) => &t[..nk],
            _ => &main_out[..nk],
        };
        let mut outs = final_carry.to_vec();
        for j in 0..ny {
            let t = body.ty(body.outputs[nk + j]);
            let main = fb.reshape(main_out[nk + j], &with_len(t, &[m * k]).shape)?;
            outs.push(match &tail_out {
                Some(tail) => fb.concatenate(&[main, tail[nk + j]], 0)?,
                None => main,
            });
        }
        fb.finish(&outs)
    }
}
