//! Batching rule of `scan`: a scan of the vmapped body.
//!
//! Batched consts and carries get their batch dim at axis 0, batched xs at
//! axis 1 (axis 0 stays the step axis, so a step's slice is batched at 0).
//! Which carries are batched is a fixed point, as in JAX: a carry whose next
//! value depends on a batched input is batched from the start (its init is
//! broadcast). Stacked ys that depend on a batched input come out batched at
//! axis 1; the others stay unbatched.

use super::Scan;
use crate::batch::helpers::{bdim_to_front, move_bdim};
use crate::batch::{vmap_func_named, Batch, BatchCx, Batched};
use crate::error::IrError;
use crate::ir::{Builder, Value};
use crate::transform::rewrite::outputs_depending;
use std::sync::Arc;

impl Batch for Scan {
    fn batch(&self, b: &mut Builder, cx: &BatchCx<'_>) -> Result<Batched, IrError> {
        let (nc, nk) = (self.n_consts, self.n_carry);
        let body = &self.body;
        let mut batched: Vec<bool> = cx.bdims.iter().map(Option::is_some).collect();
        let out_b = loop {
            let out_b = outputs_depending(body, &batched);
            let mut changed = false;
            for k in 0..nk {
                if out_b[k] && !batched[nc + k] {
                    batched[nc + k] = true;
                    changed = true;
                }
            }
            if !changed {
                break out_b;
            }
        };
        let in_axes: Vec<Option<usize>> = batched.iter().map(|&x| x.then_some(0)).collect();
        let mut out_axes: Vec<Option<usize>> = out_b.iter().map(|&x| x.then_some(0)).collect();
        for k in 0..nk {
            out_axes[k] = batched[nc + k].then_some(0);
        }
        let vbody = Arc::new(vmap_func_named(body, &in_axes, &out_axes, cx.size, cx.axis)?);
        let mut args: Vec<Value> = Vec::with_capacity(cx.args.len());
        for (i, (&x, &d)) in cx.args.iter().zip(cx.bdims).enumerate() {
            args.push(if i < nc + nk {
                if batched[i] {
                    bdim_to_front(b, x, d, cx.size)?
                } else {
                    x
                }
            } else {
                match d {
                    Some(d) => move_bdim(b, x, d, 1)?,
                    None => x,
                }
            });
        }
        let outs = b.emit(Scan { body: vbody, ..self.clone() }, &args)?;
        Ok(outs
            .into_iter()
            .enumerate()
            .map(|(j, o)| {
                let d = if j < nk { out_axes[j] } else { out_axes[j].map(|_| 1) };
                (o, d)
            })
            .collect())
    }
}
