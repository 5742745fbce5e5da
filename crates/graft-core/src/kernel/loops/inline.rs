//! Producers inlined into their readers, at shifted points too
//! (recompute-fusion), inside compiled loops.
//!
//! The fusion planner stops at a value read at other points than its own:
//! an RK4 step's stage `k2 = x * concat(1, (y + h/2 k1)[:-1])` reads the
//! previous stage shifted by one element, so each stage is its own kernel
//! and the stages pass whole arrays through memory (the `ode` loop was
//! bound by that traffic). Here a kernel that reads a value an earlier,
//! elementwise kernel of the same step writes at every point gets the
//! producer's instructions instead of the load, evaluated at the read's
//! points: a point load takes them as they are; a window load that is a
//! pure shift `s` of the value's points takes them with every load of the
//! producer moved by `s` (a point load becomes a window load whose box
//! starts at `s`; windows move their box), and an `inside` test of the
//! read's box selects the read's fill outside it. Each point still
//! computes exactly the producer's arithmetic on the same elements, so
//! results stay bitwise those of the interpreter. A producer nobody reads
//! any more is then dropped with the other dead calls.
//!
//! Recomputation is bounded: only values one call alone reads (and the
//! body does not return) are inlined, so a value is never computed twice
//! per point by two readers; only producers whose slice for the value has
//! at most [`INLINE_MAX_SLICE`] instructions; and a kernel stops growing at
//! [`INLINE_MAX_BODY`] instructions. (A shifted read still recomputes the
//! producer's own shifted reads: an RK4 step evaluates its first stage at
//! four shifts.)
//!
//! Only reads at or behind the point are inlined. A read ahead of it (a
//! reverse sweep's `pad(slice(g, 1:))`, the transpose of a forward
//! stencil's shift) keeps its producer a kernel of its own: the reverse
//! sweep's chains read each stage's cotangent both at the point and ahead,
//! so inlining them recomputes most of the sweep, and the step's blocked
//! schedule (`blocks.rs`) already keeps the values in cache. Measured on
//! GradBench `ode`'s gradient (100 steps): 0.60 -> 0.48 ms at n = 1 000,
//! 5.4 -> 4.3 ms at n = 10 000; forward steps are unchanged.

use super::super::ir::{Access, Arg, Index, Inst, Kernel, Lit, Reg, Window};
use super::super::lower::row_strides;
use crate::ir::{Func, Value};

/// Most instructions of a producer's slice that are recomputed per read.
pub(super) const INLINE_MAX_SLICE: usize = 64;

/// Most instructions of a kernel that producers are inlined into.
pub(super) const INLINE_MAX_BODY: usize = 320;

fn is_row(k: &Kernel) -> bool {
    k.body.iter().any(|i| matches!(i, Inst::Reduce(_) | Inst::Map(_)))
}

/// Row-major coordinates of flat index `o` over `dims`, if `o` is one.
fn unravel(mut o: isize, dims: &[usize]) -> Option<Vec<isize>> {
    if o < 0 {
        return None;
    }
    let mut c = vec![0isize; dims.len()];
    for k in (0..dims.len()).rev() {
        let d = isize::try_from(dims[k]).ok()?;
        if d == 0 {
            return None;
        }
        c[k] = o % d;
        o /= d;
    }
    (o == 0).then_some(c)
}

/// How a read of a producer's value sees the producer's points.
enum Read<'a> {
    /// At the reader's own points.
    Point,
    /// At the points shifted by `shift` (over `window.dims`), inside
    /// `window`'s box; `fill` outside.
    Shifted { window: &'a Window, shift: Vec<isize>, fill: Reg },
}

/// The read instruction `inst` as a [`Read`] of a value with `numel`
/// elements laid out row-major over the reader's points, if it is one.
fn read_of(inst: &Inst, numel: usize) -> Option<Read<'_>> {
    match inst {
        Inst::Load { index: Index::Point, .. } => Some(Read::Point),
        Inst::Window { window, fill, .. } => {
            if window.dims.iter().product::<usize>() != numel || window.strides != row_strides(&window.dims) {
                return None;
            }
            let at_lo = unravel(window.offset, &window.dims)?;
            let shift: Vec<isize> = window.lo.iter().zip(&at_lo).map(|(l, a)| l - a).collect();
            // Reads ahead of the point (a transposed stencil in a reverse
            // sweep) stay loads: see the module docs.
            if shift.iter().any(|&x| x < 0) {
                return None;
            }
            Some(Read::Shifted { window, shift, fill: *fill })
        }
        _ => None,
    }
}

/// The registers of `body` that `value` depends on (itself included), in order.
fn slice(body: &[Inst], value: Reg) -> Vec<usize> {
    let mut need = vec![false; body.len()];
    need[value as usize] = true;
    for r in (0..body.len()).rev() {
        if need[r] {
            for o in body[r].operands() {
                need[o as usize] = true;
            }
        }
    }
    (0..body.len()).filter(|&r| need[r]).collect()
}

/// `inst` of the producer moved to points shifted by `shift` over `dims`
/// (registers renamed by `reg`, arguments by `arg`, `zero(dtype)` a
/// register holding a zero for loads outside the buffer), or `None` when it
/// cannot move (a strided read over other dims).
fn moved(inst: &Inst, dims: &[usize], shift: &[isize], reg: &dyn Fn(Reg) -> Reg, arg: u32, zero: Reg) -> Option<Inst> {
    let still = shift.iter().all(|&s| s == 0);
    let box_at = |strides: Vec<isize>, offset: isize| Window {
        dims: dims.to_vec(),
        lo: shift.to_vec(),
        size: dims.to_vec(),
        strides,
        offset,
    };
    Some(match inst {
        Inst::Load { index: Index::Scalar, .. } => Inst::Load { arg, index: Index::Scalar },
        Inst::Load { index, .. } if still => Inst::Load { arg, index: index.clone() },
        Inst::Load { index: Index::Point, .. } => {
            Inst::Window { arg, window: box_at(row_strides(dims), 0), fill: zero }
        }
        Inst::Load { index: Index::Strided { dims: d, strides, offset }, .. } if d == dims => {
            Inst::Window { arg, window: box_at(strides.clone(), *offset), fill: zero }
        }
        Inst::Load { .. } => return None,
        Inst::Window { window, fill, .. } if still || window.dims == dims => {
            let mut w = window.clone();
            for (l, s) in w.lo.iter_mut().zip(shift) {
                *l += s;
            }
            Inst::Window { arg, window: w, fill: reg(*fill) }
        }
        Inst::Inside(window) if still || window.dims == dims => {
            let mut w = window.clone();
            for (l, s) in w.lo.iter_mut().zip(shift) {
                *l += s;
            }
            Inst::Inside(w)
        }
        Inst::Window { .. } | Inst::Inside(_) => return None,
        // Positions and gathers depend on the point itself: they move only
        // when the reader reads at its own points.
        Inst::Position(_) if still => inst.clone(),
        Inst::LoadAt { addr, .. } if still => Inst::LoadAt { arg, addr: reg(*addr) },
        Inst::Position(_) | Inst::LoadAt { .. } => return None,
        Inst::Word(op, a, b) => Inst::Word(*op, reg(*a), reg(*b)),
        Inst::Bitcast(d, a) => Inst::Bitcast(*d, reg(*a)),
        Inst::Lit(_) => inst.clone(),
        Inst::Unary(op, a) => Inst::Unary(*op, reg(*a)),
        Inst::Binary(op, a, b) => Inst::Binary(*op, reg(*a), reg(*b)),
        Inst::Compare(op, a, b) => Inst::Compare(*op, reg(*a), reg(*b)),
        Inst::Select(p, a, b) => Inst::Select(reg(*p), reg(*a), reg(*b)),
        Inst::Fma(a, b, c) => Inst::Fma(reg(*a), reg(*b), reg(*c)),
        Inst::Convert(d, a) => Inst::Convert(*d, reg(*a)),
        Inst::Store { .. } | Inst::Reduce(_) | Inst::Map(_) | Inst::Outer(_) | Inst::Save { .. } | Inst::Restore(_) => {
            return None
        }
    })
}

/// The argument of the producer instruction `inst`, if it reads one.
fn arg_read(inst: &Inst) -> Option<u32> {
    match inst {
        Inst::Load { arg, .. } | Inst::Window { arg, .. } | Inst::LoadAt { arg, .. } => Some(*arg),
        _ => None,
    }
}

/// Consumer `k` (arguments bound to `binds`) with its read at register
/// `at` replaced by producer `p`'s instructions for the value stored from
/// register `value` (`p`'s arguments bound to `pbinds`), and the arguments
/// no instruction reads any more removed; `None` when it cannot be done.
fn inline_read(
    func: &Func,
    k: &Kernel,
    binds: &[Value],
    at: usize,
    p: &Kernel,
    pbinds: &[Value],
    value: Reg,
    numel: usize,
) -> Option<(Kernel, Vec<Value>)> {
    let read = read_of(&k.body[at], numel)?;
    let (dims, shift) = match &read {
        Read::Point => (vec![k.extent], vec![0isize]),
        Read::Shifted { window, shift, .. } => (window.dims.clone(), shift.clone()),
    };
    let mut args = k.args.clone();
    let mut binds = binds.to_vec();
    let mut body: Vec<Inst> = Vec::with_capacity(k.body.len() + INLINE_MAX_SLICE + 4);
    let mut map: Vec<Reg> = Vec::with_capacity(k.body.len());
    for (r, inst) in k.body.iter().enumerate() {
        if r != at {
            body.push(inst.remapped(&map)?);
            map.push((body.len() - 1) as Reg);
            continue;
        }
        // The producer's slice, moved.
        let mut pmap: Vec<Option<Reg>> = vec![None; p.body.len()];
        for pr in slice(&p.body, value) {
            let pinst = &p.body[pr];
            let arg = match arg_read(pinst) {
                Some(a) => {
                    let v = *pbinds.get(a as usize)?;
                    let found = binds.iter().zip(&args).position(|(w, x)| *w == v && x.access == Access::Read);
                    match found {
                        Some(j) => j as u32,
                        None => {
                            args.push(Arg { dtype: func.ty(v).dtype, len: func.ty(v).numel(), access: Access::Read });
                            binds.push(v);
                            (args.len() - 1) as u32
                        }
                    }
                }
                None => 0,
            };
            let zero = match pinst {
                Inst::Load { arg: a, .. } if !shift.iter().all(|&s| s == 0) => {
                    let dtype = p.args.get(*a as usize)?.dtype;
                    body.push(Inst::Lit(Lit { dtype, bits: 0 }));
                    (body.len() - 1) as Reg
                }
                _ => 0,
            };
            let reg = |x: Reg| pmap[x as usize].unwrap_or(Reg::MAX);
            let m = moved(pinst, &dims, &shift, &reg, arg, zero)?;
            if m.operands().contains(&Reg::MAX) {
                return None;
            }
            body.push(m);
            pmap[pr] = Some((body.len() - 1) as Reg);
        }
        let val = pmap[value as usize]?;
        match &read {
            Read::Point => map.push(val),
            Read::Shifted { window, fill, .. } => {
                body.push(Inst::Inside(Window { strides: vec![0; window.dims.len()], offset: 0, ..(*window).clone() }));
                let inside = (body.len() - 1) as Reg;
                body.push(Inst::Select(inside, val, *map.get(*fill as usize)?));
                map.push((body.len() - 1) as Reg);
            }
        }
    }
    // Drop arguments nothing reads any more (the inlined value's, usually).
    let (args, binds) = super::drop_unused_args(args, binds, &mut body);
    let k2 = Kernel { name: k.name.clone(), args, extent: k.extent, body };
    super::super::ir::verify(&k2).ok()?;
    Some((k2, binds))
}

impl super::Builder<'_> {
    /// Inlines producers into the kernels that read them (see the module
    /// docs), in call order, so a chain of shifted stages collapses into
    /// its last reader.
    pub(super) fn inline_producers(&mut self) {
        for c in 0..self.calls.len() {
            let mut at = 0;
            loop {
                let kid = self.calls[c].0;
                let k = &self.kernels[kid];
                if is_row(k) || at >= k.body.len() || k.body.len() > INLINE_MAX_BODY {
                    break;
                }
                let rewritten = self.try_inline(c, at);
                match rewritten {
                    // The read became the producer's instructions: look
                    // again from there (they may read producers too).
                    Some((k2, binds)) => {
                        self.kernels[kid] = k2;
                        self.calls[c].1 = binds;
                    }
                    None => at += 1,
                }
            }
        }
    }

    /// Call `c`'s kernel with its read at register `at` inlined, if that
    /// register reads a value an earlier elementwise call writes at every
    /// point and the producer's slice is small enough.
    fn try_inline(&self, c: usize, at: usize) -> Option<(Kernel, Vec<Value>)> {
        let (kid, binds) = &self.calls[c];
        let k = &self.kernels[*kid];
        let arg = arg_read(&k.body[at])?;
        let v = *binds.get(arg as usize)?;
        let p = (0..c).rev().find(|&p| {
            let (pk, pb) = &self.calls[p];
            self.kernels[*pk].args.iter().zip(pb).any(|(a, w)| a.access == Access::Write && *w == v)
        })?;
        let (pk, pbinds) = &self.calls[p];
        let prod = &self.kernels[*pk];
        if is_row(prod) || prod.extent != k.extent {
            return None;
        }
        // Only a value this call alone reads (and the body does not
        // return): recomputing it here then costs no more than the
        // producer's pass did, and the producer can die.
        let readers = self
            .calls
            .iter()
            .filter(|(rk, rb)| self.kernels[*rk].args.iter().zip(rb).any(|(a, w)| a.access == Access::Read && *w == v))
            .count();
        if readers != 1 || self.func.outputs.iter().any(|&o| self.root(o) == v) {
            return None;
        }
        let value = prod.body.iter().find_map(|i| match i {
            Inst::Store { arg, value, index: Index::Point } if pbinds.get(*arg as usize) == Some(&v) => Some(*value),
            _ => None,
        })?;
        if slice(&prod.body, value).len() > INLINE_MAX_SLICE {
            return None;
        }
        inline_read(self.func, k, binds, at, prod, pbinds, value, self.func.ty(v).numel())
    }
}
