//! Inlining for execution: `call` and `checkpoint` equations and scans of
//! one step are replaced by their bodies.
//!
//! Why: these structures matter to the transforms (a `checkpoint` tells
//! reverse mode what to recompute; `Remat::Every(1)` builds a scan over
//! one-step segments), but once a function is about to run they only hide
//! its equations from the fusion planner and, in a loop body, keep the
//! body from compiling whole (a compiled loop has no form for a nested
//! call). Inlined, a rematerialising reverse sweep is one flat body that
//! recomputes each step's values and transposes them in the same kernels.
//!
//! Except one kind: a one-step scan whose body concatenates or pads (a
//! shift such as `concat([1], y[:-1])`) is kept as a loop where it is
//! planned on its own. A compiled loop reads such a piece in place and
//! takes a stage read at a shifted point from the stage it computes
//! (`kernel::loops`), so one kernel runs the whole step; inlined, the
//! straight-line planner copies every concatenation and splits the fused
//! work around it (GradBench's `ode` with one step: 0.56 ms inlined for
//! n = 100 000, against 7 us per step as a loop). Where a loop body is
//! compiled whole, [`flatten_all`] inlines it after all
//! (`Executable::loop_program`): a compiled loop has no form for a nested
//! scan.
//!
//! Invariant: results are unchanged. A body runs on the same operands and
//! computes the same equations in the same order; a one-step scan's `xs`
//! are its operands' only rows (a reshape) and its stacked `ys` the body's
//! results with a leading axis of one.

use crate::error::IrError;
use crate::ir::Func;
use crate::ops::Prim;

/// Most rounds of inlining (an inlined body may hold more calls); deeper
/// nesting is left as it is.
const MAX_ROUNDS: usize = 8;

/// Whether a one-step scan's body shifts values by concatenating or
/// padding (see the module docs).
fn windowed(body: &Func) -> bool {
    body.eqns.iter().any(|e| matches!(e.prim, Prim::Concatenate(_) | Prim::Pad(_)))
}

fn inlinable(e: &crate::ir::Eqn, all: bool) -> bool {
    match &e.prim {
        Prim::Call(_) | Prim::Checkpoint(_) => true,
        Prim::Scan(s) => s.length == 1 && (all || !windowed(&s.body)),
        _ => false,
    }
}

/// `f` with its calls, checkpoints and one-step scans inlined, but for the
/// one-step scans whose bodies shift values (see the module docs), or
/// `None` when it has nothing to inline.
pub fn flatten(f: &Func) -> Option<Func> {
    flatten_with(f, false)
}

/// [`flatten`], inlining every one-step scan: for a loop body about to be
/// compiled whole.
pub fn flatten_all(f: &Func) -> Option<Func> {
    flatten_with(f, true)
}

fn flatten_with(f: &Func, all: bool) -> Option<Func> {
    let mut cur: Option<Func> = None;
    for _ in 0..MAX_ROUNDS {
        let g = cur.as_ref().unwrap_or(f);
        if !g.eqns.iter().any(|e| inlinable(e, all)) {
            break;
        }
        // A body that fails to rebuild is left as it was (the executor
        // runs the structure itself).
        match flatten_once(g, all) {
            Ok(h) => cur = Some(h),
            Err(_) => break,
        }
    }
    cur
}

fn flatten_once(f: &Func, all: bool) -> Result<Func, IrError> {
    super::rebuild(f, |b, e, ins| match &e.prim {
        Prim::Call(c) => b.inline(&c.func, ins),
        Prim::Checkpoint(c) => b.inline(&c.func, ins),
        Prim::Scan(s) if s.length == 1 && (all || !windowed(&s.body)) => {
            let nck = s.n_consts + s.n_carry;
            let mut args = ins[..nck].to_vec();
            for &x in &ins[nck..] {
                let shape = b.ty(x)?.shape[1..].to_vec();
                args.push(b.reshape(x, &shape)?);
            }
            let mut outs = b.inline(&s.body, &args)?;
            for y in outs.iter_mut().skip(s.n_carry) {
                let mut shape = vec![1];
                shape.extend(&b.ty(*y)?.shape);
                *y = b.reshape(*y, &shape)?;
            }
            Ok(outs)
        }
        p => b.emit(p.clone(), ins),
    })
}
