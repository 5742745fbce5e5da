//! `debug_print`: prints formatted values while a program runs (JAX's
//! `jax.debug.print`).
//!
//! `debug_print[fmt, lead](args...)` has **no results**. It is the one
//! primitive with an effect, and every pass knows it through
//! [`Prim::has_effect`](crate::ops::Prim::has_effect) (true for this
//! primitive and for every primitive holding a sub-function that contains
//! one, at any depth):
//! - dead-code elimination keeps effectful equations although nothing reads
//!   their results (`opt::dce`), CSE never merges them (`opt::cse`),
//!   constant folding never evaluates them at plan time (`opt::fold`),
//!   if-conversion never inlines a branch holding one (`opt::ifconv`);
//! - partial evaluation and the loop-body split (`transform::rewrite::cut`)
//!   put them in the forward stage only (never hoisted out of a loop, never
//!   copied into the linear stage), so reverse mode prints during the
//!   forward pass, once;
//! - rules that run a function's forward computation a second time strip
//!   its prints ([`strip_effects`]: a checkpoint's tangent map, a `cond`'s
//!   residual branches) or run it muted ([`muted`]: the kernels of
//!   `while_jvp`, `while_vjp`, `while_hvp`), and rules that compute the
//!   primal results themselves hand them to the JVP driver, which then
//!   removes its own copy of the equation (`ad::jvp`), so a print runs once
//!   per forward evaluation;
//! - the executor runs equations that are not fused in program order, and
//!   this primitive has no kernel form, so a loop body holding one is never
//!   compiled to native code (the executor steps it), and a fused group or
//!   row region never spans it.
//!
//! Printed values are the primal values: the JVP rule adds no tangent
//! equations (the driver's copy of the equation prints the primals, as
//! JAX's forward pass does), and the equation is never linear, so it has no
//! transpose. Results of the program never change: the primitive writes
//! nothing.
//!
//! Batching: `lead` is the number of leading axes that index examples of a
//! vmap (every operand has them). The batching rule moves the new batch
//! axis to the front of every operand (broadcasting unbatched ones) and
//! adds one to `lead`; the kernel prints one line per example, examples in
//! row-major order (the outermost vmap slowest). A print whose operands are
//! all unbatched is copied unchanged by the vmap driver and prints once.
//!
//! Format strings: `{}` is a placeholder, `{{` and `}}` print a brace; the
//! number of placeholders must equal the number of operands (checked by
//! the shape rule and, with a source location, by the language). Values are
//! printed like `graft run` prints them ([`crate::format::format_tensor`]).
//!
//! Where lines go: to the innermost [`capture_prints`] on this thread (the
//! executor runs a function's kernels, loop bodies included, on the calling
//! thread), else to standard error, one locked write per line.

use super::{check, Op, Prim};
use crate::error::{ExecError, IrError, TypeError};
use crate::ir::{Builder, Eqn, Func, Value};
use crate::tensor::{Storage, Tensor};
use crate::types::TensorType;
use std::cell::{Cell, RefCell};
use std::io::Write;
use std::sync::Arc;

/// Prints its operands through a format string (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DebugPrint {
    /// The format string, with `{}` placeholders.
    pub fmt: Arc<str>,
    /// Leading axes of every operand that index vmap examples.
    pub lead: usize,
}

/// The literal pieces of a format string around its `{}` placeholders
/// (`pieces.len()` = placeholders + 1), or a message saying what is wrong
/// (an unmatched `{` or `}`, or something other than `{}` between braces).
pub fn parse_format(fmt: &str) -> Result<Vec<String>, String> {
    let mut pieces = vec![String::new()];
    let mut chars = fmt.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                pieces.last_mut().expect("internal error: pieces is never empty").push('{');
            }
            '{' if chars.peek() == Some(&'}') => {
                chars.next();
                pieces.push(String::new());
            }
            '{' => return Err("`{` must be followed by `}` (a placeholder) or `{` (a literal brace)".into()),
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                pieces.last_mut().expect("internal error: pieces is never empty").push('}');
            }
            '}' => return Err("unmatched `}`: write `}}` for a literal brace".into()),
            c => pieces.last_mut().expect("internal error: pieces is never empty").push(c),
        }
    }
    Ok(pieces)
}

/// Formats one line: `pieces` interleaved with the values.
fn render(pieces: &[String], values: &[Tensor]) -> String {
    let mut line = pieces[0].clone();
    for (v, p) in values.iter().zip(&pieces[1..]) {
        line.push_str(&crate::format::format_tensor(v));
        line.push_str(p);
    }
    line
}

thread_local! {
    /// Captured lines of the innermost `capture_prints` on this thread.
    static SINK: RefCell<Option<Vec<String>>> = const { RefCell::new(None) };
    /// Depth of `muted` sections on this thread.
    static MUTE: Cell<usize> = const { Cell::new(0) };
}

/// Runs `f`, collecting the lines that `debug_print` equations executed by
/// it on this thread print, instead of writing them to standard error.
/// Nested captures each see their own lines.
pub fn capture_prints<R>(f: impl FnOnce() -> R) -> (R, Vec<String>) {
    let outer = SINK.with(|s| s.replace(Some(Vec::new())));
    // Restores the outer sink even if `f` panics.
    struct Restore(Option<Option<Vec<String>>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            if let Some(outer) = self.0.take() {
                SINK.with(|s| *s.borrow_mut() = outer);
            }
        }
    }
    let mut restore = Restore(Some(outer));
    let r = f();
    let mine = SINK.with(|s| s.borrow_mut().take()).unwrap_or_default();
    if let Some(outer) = restore.0.take() {
        SINK.with(|s| *s.borrow_mut() = outer);
    }
    (r, mine)
}

/// Runs `f` with `debug_print` silenced on this thread: for kernels that
/// re-run a forward computation the program already ran (the derivative
/// loops of `while`).
pub(crate) fn muted<R>(f: impl FnOnce() -> R) -> R {
    struct Unmute;
    impl Drop for Unmute {
        fn drop(&mut self) {
            MUTE.with(|m| m.set(m.get() - 1));
        }
    }
    MUTE.with(|m| m.set(m.get() + 1));
    let _unmute = Unmute;
    f()
}

fn emit_line(line: String) {
    if MUTE.with(Cell::get) > 0 {
        return;
    }
    let line = SINK.with(|s| match s.borrow_mut().as_mut() {
        Some(lines) => {
            lines.push(line);
            None
        }
        None => Some(line),
    });
    if let Some(line) = line {
        // A closed stderr is not the program's failure: printing is best effort.
        let _ = writeln!(std::io::stderr().lock(), "{line}");
    }
}

/// Elements `[e * per, (e + 1) * per)` of `t` as a tensor of shape `shape`.
fn block(t: &Tensor, e: usize, per: usize, shape: &[usize]) -> Result<Tensor, ExecError> {
    let r = e * per..(e + 1) * per;
    let s = match t.storage() {
        Storage::F16(v) => Storage::F16(v[r].to_vec()),
        Storage::F32(v) => Storage::F32(v[r].to_vec()),
        Storage::F64(v) => Storage::F64(v[r].to_vec()),
        Storage::I32(v) => Storage::I32(v[r].to_vec()),
        Storage::I64(v) => Storage::I64(v[r].to_vec()),
        Storage::U32(v) => Storage::U32(v[r].to_vec()),
        Storage::Bool(v) => Storage::Bool(v[r].to_vec()),
    };
    Tensor::from_storage(shape.to_vec(), s).map_err(|e| ExecError::kernel("debug_print", e.to_string()))
}

impl Op for DebugPrint {
    fn name(&self) -> &'static str {
        "debug_print"
    }

    fn params(&self) -> String {
        format!("fmt={:?}, lead={}", &*self.fmt, self.lead)
    }

    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        let pieces = parse_format(&self.fmt).map_err(|m| check::err(self, ins, m))?;
        if pieces.len() - 1 != ins.len() {
            return Err(check::err(
                self,
                ins,
                format!("the format has {} placeholder(s) for {} value(s)", pieces.len() - 1, ins.len()),
            ));
        }
        if let Some(first) = ins.first() {
            let ok = ins.iter().all(|t| t.rank() >= self.lead && t.shape[..self.lead] == first.shape[..self.lead]);
            if first.rank() < self.lead || !ok {
                return Err(check::err(
                    self,
                    ins,
                    format!("every operand must share {} leading batch axes", self.lead),
                ));
            }
        } else if self.lead > 0 {
            return Err(check::err(self, ins, "a batched print needs operands"));
        }
        Ok(vec![])
    }

    fn kernel(&self, ins: &[&Tensor], _outs: &mut [Tensor]) -> Result<(), ExecError> {
        let pieces = parse_format(&self.fmt).map_err(|m| ExecError::kernel(self.name(), m))?;
        let Some(first) = ins.first() else {
            emit_line(render(&pieces, &[]));
            return Ok(());
        };
        let examples: usize = first.shape()[..self.lead].iter().product();
        if self.lead == 0 {
            let values: Vec<Tensor> = ins.iter().map(|&t| t.clone()).collect();
            emit_line(render(&pieces, &values));
            return Ok(());
        }
        for e in 0..examples {
            let values: Vec<Tensor> = ins
                .iter()
                .map(|t| {
                    let shape = &t.shape()[self.lead..];
                    block(t, e, shape.iter().product(), shape)
                })
                .collect::<Result<_, _>>()?;
            emit_line(render(&pieces, &values));
        }
        Ok(())
    }
}

impl Builder {
    /// Prints `args` through `fmt` (`{}` placeholders, `{{`/`}}` braces)
    /// when the function runs (see [`crate::ops::debug`]). Emits an
    /// equation with no results that every pass keeps in program order.
    pub fn debug_print(&mut self, fmt: &str, args: &[Value]) -> Result<(), IrError> {
        self.emit(DebugPrint { fmt: fmt.into(), lead: 0 }, args)?;
        Ok(())
    }
}

impl Func {
    /// Whether an equation of this function (or of a sub-function, at any
    /// depth) has an effect (see [`Prim::has_effect`]).
    pub fn has_effects(&self) -> bool {
        self.eqns.iter().any(|e| e.prim.has_effect())
    }
}

impl Prim {
    /// Whether running this primitive does something besides computing its
    /// results: a `debug_print`, or a primitive holding a sub-function with
    /// one. Passes never drop, merge, fold, hoist or duplicate such
    /// equations (see [`crate::ops::debug`]).
    pub fn has_effect(&self) -> bool {
        match self {
            Prim::DebugPrint(_) => true,
            // Their kernels re-run the loop's forward computation muted.
            Prim::WhileJvp(_) | Prim::WhileVjp(_) | Prim::WhileHvp(_) => false,
            p => p.subfuncs().iter().any(|f| f.has_effects()),
        }
    }
}

/// `f` without its prints, at any depth: for rules that run a forward
/// computation a second time (its results are unchanged, since prints have
/// none). Sub-functions of calls, checkpoints, scans, conds and whiles are
/// stripped; the derivative loops of `while` run muted instead.
pub fn strip_effects(f: &Func) -> Func {
    if !f.has_effects() {
        return f.clone();
    }
    let strip = |g: &Arc<Func>| if g.has_effects() { Arc::new(strip_effects(g)) } else { g.clone() };
    let mut out = f.clone();
    out.eqns = f
        .eqns
        .iter()
        .filter(|e| !matches!(e.prim, Prim::DebugPrint(_)))
        .map(|e| {
            let prim = match &e.prim {
                Prim::Call(c) => Prim::Call(super::control::Call { func: strip(&c.func) }),
                Prim::Checkpoint(c) => {
                    Prim::Checkpoint(super::control::Checkpoint { func: strip(&c.func), ..c.clone() })
                }
                Prim::Scan(s) => Prim::Scan(super::scan::Scan { body: strip(&s.body), ..s.clone() }),
                Prim::Cond(c) => Prim::Cond(super::cond::Cond { branches: c.branches.iter().map(strip).collect() }),
                Prim::While(w) => {
                    let mut w = w.clone();
                    w.lp.cond = strip(&w.lp.cond);
                    w.lp.body = strip(&w.lp.body);
                    Prim::While(w)
                }
                p => p.clone(),
            };
            Eqn { prim, ..e.clone() }
        })
        .collect();
    out
}

mod diff {
    use super::*;
    use crate::ad::{Diff, JvpCx, TransposeCx};

    impl Diff for DebugPrint {
        // No results, so no tangents: the driver's copy prints the primals.
        fn jvp(&self, _b: &mut Builder, _cx: &JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
            Ok(vec![])
        }
        // Never reached: an equation without results is never linear.
        fn transpose(&self, _b: &mut Builder, _cx: &TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
            Err(crate::ad::not_linear(self.name()))
        }
    }
}

mod batching {
    use super::*;
    use crate::batch::helpers::all_to_front;
    use crate::batch::{Batch, BatchCx, Batched};

    impl Batch for DebugPrint {
        fn batch(&self, b: &mut Builder, cx: &BatchCx<'_>) -> Result<Batched, IrError> {
            let args = all_to_front(b, cx)?;
            b.emit(DebugPrint { fmt: self.fmt.clone(), lead: self.lead + 1 }, &args)?;
            Ok(vec![])
        }
    }
}
