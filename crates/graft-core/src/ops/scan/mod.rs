//! `scan`: a loop that carries a state through the leading axis of its
//! inputs, stacking per-step outputs (JAX's `lax.scan`), and `fori` with a
//! trip count known when the graph is built, lowered to `scan`.
//!
//! Semantics of `scan[length=n, reverse=r](consts..., init..., xs...)` with
//! body `body(consts..., carry..., x...) -> (carry'..., y...)`:
//! ```text
//! carry = init
//! for t in (0..n) (or (0..n).rev() when reverse):
//!     carry, ys[t] = body(consts, carry, xs[t])
//! return carry..., ys...
//! ```
//! Every `xs` operand has leading axis `n`; every `ys` result gets one. With
//! `reverse`, `xs` is read from the end and `ys[t]` is written at the same
//! index `t` (as `lax.scan`). `n = 0` is allowed: the carry passes through and
//! the `ys` are empty. The body is closed: loop-invariant values are explicit
//! `consts` operands (closure conversion is the builder's job). The IR has the
//! same size for every `n`.
//!
//! Invariants: `carry'` has exactly the types of `carry`; the body is planned
//! once (`exec::plan_cached`) and run once per step, and each step's results
//! that came from the body's buffer pool go back to it, so a long loop stops
//! allocating after its first steps. Tensors own their storage, so a step's
//! `x` slice is copied into a reused buffer and each `y` is copied into the
//! stacked result. Peak bytes: the stacked results and each body run's peak
//! are counted (Note [Nested peak bytes]); the kernel's own carry and slice
//! buffers between body runs are not.
//!
//! Rules (see `rules.rs`, `batching.rs`): the JVP is a primal scan that also
//! stacks the per-step residuals plus a scan linear in the tangents; the
//! transpose of that linear scan is a scan running the other way over the
//! transposed body, carrying the cotangents of the consts as accumulators.
//! `checkpoint` changes only what reverse mode saves (see [`Remat`]).

mod batching;
pub(crate) mod body;
mod rules;

use super::{check, Op};
use crate::dtype::DType;
use crate::error::{ExecError, IrError, TypeError};
use crate::ir::{Builder, Func, Value};
use crate::tensor::Tensor;
use crate::types::TensorType;
use std::fmt;
use std::sync::Arc;

use super::remat::Remat;

/// The loop primitive (see the module docs).
#[derive(Clone)]
pub struct Scan {
    /// `body(consts..., carry..., x...) -> (carry'..., y...)`.
    pub body: Arc<Func>,
    /// Number of loop-invariant operands (first).
    pub n_consts: usize,
    /// Number of carried values (after the consts).
    pub n_carry: usize,
    /// Trip count = leading axis of every `xs` operand and `ys` result.
    pub length: usize,
    /// Walk the steps from `length - 1` down to 0.
    pub reverse: bool,
    /// What reverse mode saves.
    pub remat: Remat,
}

impl PartialEq for Scan {
    fn eq(&self, o: &Self) -> bool {
        Arc::ptr_eq(&self.body, &o.body)
            && (self.n_consts, self.n_carry, self.length, self.reverse, self.remat)
                == (o.n_consts, o.n_carry, o.length, o.reverse, o.remat)
    }
}

impl fmt::Debug for Scan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Scan(@{}, {})", self.body.name, self.params())
    }
}

/// Options of [`Builder::scan`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScanOpts {
    /// Trip count.
    pub length: usize,
    /// Walk from the end.
    pub reverse: bool,
    /// What reverse mode saves.
    pub remat: Remat,
}

impl ScanOpts {
    /// A forward scan of `length` steps without checkpointing.
    pub fn new(length: usize) -> ScanOpts {
        ScanOpts { length, reverse: false, remat: Remat::Off }
    }

    /// Walks the steps from the end.
    pub fn reverse(mut self, reverse: bool) -> ScanOpts {
        self.reverse = reverse;
        self
    }

    /// Sets what reverse mode saves.
    pub fn remat(mut self, r: Remat) -> ScanOpts {
        self.remat = r;
        self
    }
}

impl Scan {
    fn n_xs(&self) -> usize {
        self.body.params.len().saturating_sub(self.n_consts + self.n_carry)
    }

    fn n_ys(&self) -> usize {
        self.body.outputs.len().saturating_sub(self.n_carry)
    }

    /// Per-step type `t` with the leading `length` axis added.
    fn stacked(&self, t: &TensorType) -> TensorType {
        let mut shape = vec![self.length];
        shape.extend_from_slice(&t.shape);
        TensorType::new(t.dtype, shape)
    }
}

impl Op for Scan {
    fn name(&self) -> &'static str {
        "scan"
    }

    fn params(&self) -> String {
        let remat = match self.remat {
            Remat::Off => String::new(),
            r => format!(", remat={r}"),
        };
        format!(
            "body=@{}, consts={}, carry={}, length={}, reverse={}{remat}",
            self.body.name, self.n_consts, self.n_carry, self.length, self.reverse
        )
    }

    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        let f = &self.body;
        let name = &f.name;
        let typed = f.params.iter().chain(&f.outputs).all(|v| v.index() < f.types.len());
        if !typed {
            return Err(check::err(self, ins, format!("expected a well-formed body, but @{name} has untyped values")));
        }
        let (nc, nk) = (self.n_consts, self.n_carry);
        if nc + nk > f.params.len() || nk > f.outputs.len() {
            return Err(check::err(
                self,
                ins,
                format!("@{name} must take at least {} parameters and return at least {nk} values", nc + nk),
            ));
        }
        if let Remat::Every(0) = self.remat {
            return Err(check::err(self, ins, "checkpoint segments must hold at least one step"));
        }
        let params = body::param_types(f, 0..f.params.len());
        if ins.len() != params.len() {
            return Err(check::err(
                self,
                ins,
                format!("expected {} operands (the parameters of @{name})", params.len()),
            ));
        }
        for i in 0..nc + nk {
            if ins[i] != params[i] {
                return Err(check::err(
                    self,
                    ins,
                    format!("expected operand {i} to be {} (parameter {i} of @{name})", params[i]),
                ));
            }
        }
        for i in nc + nk..ins.len() {
            let want = self.stacked(&params[i]);
            if ins[i] != want {
                return Err(check::err(
                    self,
                    ins,
                    format!(
                        "expected operand {i} to be {want} (parameter {i} of @{name} stacked {} times)",
                        self.length
                    ),
                ));
            }
        }
        let outs = body::output_types(f, 0..f.outputs.len());
        for k in 0..nk {
            if outs[k] != params[nc + k] {
                return Err(check::err(
                    self,
                    ins,
                    format!("@{name} returns {} as carry {k}, which enters as {}", outs[k], params[nc + k]),
                ));
            }
        }
        let mut res = outs[..nk].to_vec();
        res.extend(outs[nk..].iter().map(|t| self.stacked(t)));
        Ok(res)
    }

    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        let exe = crate::exec::plan_cached(&self.body)?;
        let (nc, nk, nx, ny) = (self.n_consts, self.n_carry, self.n_xs(), self.n_ys());
        if ins.len() != nc + nk + nx || outs.len() != nk + ny {
            return Err(ExecError::kernel("scan", "internal error: operand or result count differs from the body's"));
        }
        // The whole loop as one native function, once compiled (bitwise the
        // same results as the steps below).
        if let Some(compiled) = exe.native_loop(nc, nk, self.reverse) {
            if let Some(f) = compiled.ready() {
                return compiled.run(f, self.length, ins, outs);
            }
        }
        // Only results the body's equations produced came from its pool;
        // parameters returned as results are copies, and handing those back
        // would grow the pool by a buffer per step.
        let f = &self.body;
        let recyclable: Vec<bool> = (0..f.outputs.len())
            .map(|j| !f.params.contains(&f.outputs[j]) && !f.outputs[j + 1..].contains(&f.outputs[j]))
            .collect();
        let give_back = |ts: Vec<Tensor>, mask: &[bool]| {
            exe.recycle(ts.into_iter().zip(mask).filter(|(_, &r)| r).map(|(t, _)| t));
        };
        let mut carry_owned = false;
        let mut carry: Vec<Tensor> = ins[nc..nc + nk].iter().map(|t| (*t).clone()).collect();
        let mut xbuf: Vec<Tensor> =
            body::param_types(&self.body, nc + nk..nc + nk + nx).iter().map(Tensor::zeros).collect();
        for i in 0..self.length {
            let t = if self.reverse { self.length - 1 - i } else { i };
            for (j, xb) in xbuf.iter_mut().enumerate() {
                let n = xb.numel();
                body::copy_chunk("scan", ins[nc + nk + j].storage(), t * n, xb.storage_mut(), 0, n)?;
            }
            let args: Vec<&Tensor> = ins[..nc].iter().copied().chain(carry.iter()).chain(xbuf.iter()).collect();
            let mut res = exe.run(&args)?;
            let ys = res.split_off(nk);
            for (j, y) in ys.iter().enumerate() {
                let n = y.numel();
                body::copy_chunk("scan", y.storage(), 0, outs[nk + j].storage_mut(), t * n, n)?;
            }
            give_back(ys, &recyclable[nk..]);
            let old = std::mem::replace(&mut carry, res);
            if carry_owned {
                give_back(old, &recyclable[..nk]);
            }
            carry_owned = true;
        }
        for (o, c) in outs[..nk].iter_mut().zip(&carry) {
            body::copy_chunk("scan", c.storage(), 0, o.storage_mut(), 0, c.numel())?;
        }
        if carry_owned {
            give_back(carry, &recyclable[..nk]);
        }
        Ok(())
    }

    fn subfuncs(&self) -> Vec<Arc<Func>> {
        vec![self.body.clone()]
    }
}

impl Builder {
    /// Emits a scan of `body` (see the module docs): returns the final carry
    /// values followed by the stacked per-step outputs.
    pub fn scan(
        &mut self,
        body: Arc<Func>,
        consts: &[Value],
        init: &[Value],
        xs: &[Value],
        opts: ScanOpts,
    ) -> Result<Vec<Value>, IrError> {
        let args: Vec<Value> = consts.iter().chain(init).chain(xs).copied().collect();
        self.emit(
            Scan {
                body,
                n_consts: consts.len(),
                n_carry: init.len(),
                length: opts.length,
                reverse: opts.reverse,
                remat: opts.remat,
            },
            &args,
        )
    }

    /// A loop of `n` steps (known now): `carry = body(consts..., i, carry...)`
    /// for `i = 0..n` (`i` an i32 scalar); returns the final carry. Lowered to
    /// a scan whose carry also holds `i`, so the graph size does not depend
    /// on `n` and all scan rules (and `remat`) apply.
    pub fn fori(
        &mut self,
        n: usize,
        body: &Func,
        consts: &[Value],
        init: &[Value],
        remat: Remat,
    ) -> Result<Vec<Value>, IrError> {
        let nc = consts.len();
        let want = nc + 1 + init.len();
        if body.params.len() != want || body.outputs.len() != init.len() {
            return Err(IrError::invalid(
                "fori",
                format!(
                    "body `{}` must take (consts..., i, carry...) = {want} parameters and return the {} carry values",
                    body.name,
                    init.len()
                ),
            ));
        }
        let mut b = Builder::new(format!("fori_{}", body.name));
        let cs: Vec<Value> = body.params[..nc].iter().map(|&p| b.param(body.ty(p).clone())).collect();
        let i = b.param(TensorType::scalar(DType::I32));
        let carry: Vec<Value> = body.params[nc + 1..].iter().map(|&p| b.param(body.ty(p).clone())).collect();
        let mut args = cs;
        args.push(i);
        args.extend(&carry);
        let next = b.inline(body, &args)?;
        let one = b.scalar(1.0, DType::I32)?;
        let i1 = b.add(i, one)?;
        let mut outs = vec![i1];
        outs.extend(next);
        let wrapped = Arc::new(b.finish(&outs)?);
        let zero = self.scalar(0.0, DType::I32)?;
        let mut init_all = vec![zero];
        init_all.extend_from_slice(init);
        let res = self.scan(wrapped, consts, &init_all, &[], ScanOpts::new(n).remat(remat))?;
        Ok(res[1..].to_vec())
    }
}
