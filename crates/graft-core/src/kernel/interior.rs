//! Interior steps of one-dimensional stencil kernels, and the reuse of
//! shifted values from one step to the next.
//!
//! A concatenation behind a constant, a pad that crops one end, a producer
//! inlined at a shifted point (GradBench's ODE, finite differences, causal
//! shifts) each give an elementwise kernel whose windows are ranges of the
//! point index. Two facts about such a kernel let a backend that runs
//! points in order, vector step after vector step, do less:
//!
//! - [`segment`]: the windows' ends cut the index space into segments in
//!   each of which every window is wholly inside or wholly outside, so
//!   whole steps of the longest one need no test (Note [Interior steps]).
//! - [`reuse_plan`]: there, a value computed at a shifted point is the same
//!   computation as another register's at the point itself, so it can be
//!   taken from that register's previous and current vectors instead of
//!   computed again (Note [Shifted reuse]).
//!
//! Both are backend-neutral facts about the kernel IR; `render_c` spells
//! them. Both keep the bits: every value is computed by the same
//! instructions from the same inputs, only fewer times.

use super::ir::{Index, Inst, Kernel, Lit, Reg};
use std::collections::HashMap;

// Note [Interior steps]
// A window load or an inside test checks per vector step whether its
// points lie in its box, and its select against the fill stays in the
// step. In a kernel whose windows are all one-dimensional once coalesced
// (a 1-D window's box is a range of the point index itself, as its single
// dimension is the kernel's extent), the boxes' ends cut the index space
// into segments in each of which every window is wholly inside or wholly
// outside. Whole vector steps of the longest segment run a body where each
// window is a plain load or its fill and each inside test a constant, with
// no test left; steps before and after it run the checked body. The values
// are the same (the checked body takes its all-inside or all-outside path
// at those steps), so the bits are too. Size-generic kernels do not split:
// which windows hold the segment depends on the sizes, which their text
// must not (see Note [Size-generic kernels] in `render_c`).

/// The interior segment of a kernel (see Note [Interior steps]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// First point of the segment.
    pub lo: usize,
    /// One past its last point.
    pub hi: usize,
    /// Per instruction: for a one-dimensional window load or inside test,
    /// whether its box holds the segment (else it lies wholly outside).
    pub inside: Vec<bool>,
}

/// The longest segment of a kernel's points in which every window is
/// wholly inside or outside its box; `None` when the kernel has no
/// one-dimensional window, has a window of more dimensions, or no segment
/// holds `lanes` points.
pub fn segment(k: &Kernel, lanes: usize) -> Option<Segment> {
    let ext = k.extent as isize;
    let mut cuts = vec![0, ext];
    let mut boxes = Vec::new();
    for (r, inst) in k.body.iter().enumerate() {
        let w = match inst {
            Inst::Window { window, .. } | Inst::Inside(window) => window.coalesced(),
            _ => continue,
        };
        match w.dims.len() {
            0 => {}
            1 => {
                let (lo, hi) = (w.lo[0], w.lo[0] + w.size[0] as isize);
                cuts.extend([lo.clamp(0, ext), hi.clamp(0, ext)]);
                boxes.push((r, lo, hi));
            }
            _ => return None,
        }
    }
    if boxes.is_empty() {
        return None;
    }
    cuts.sort_unstable();
    cuts.dedup();
    // The longest segment, the first of equal ones.
    let (lo, hi) = cuts.windows(2).map(|c| (c[0], c[1])).max_by_key(|&(a, b)| (b - a, -a))?;
    if ((hi - lo) as usize) < lanes.max(1) {
        return None;
    }
    let mut inside = vec![false; k.body.len()];
    for (r, blo, bhi) in boxes {
        inside[r] = blo <= lo && hi <= bhi;
    }
    Some(Segment { lo: lo as usize, hi: hi as usize, inside })
}

// Note [Shifted reuse]
// Inside the segment every window is a plain load `a[p + d]` or a
// constant, so each register's value at point `p` is `F(p - s)` for some
// computation `F` (its class) and shift `s`: a load of `a[p + d]` is class
// "load a" at shift `-d`, and an operation over shifted operands is the
// class of that operation over its operands' classes at their relative
// shifts, at the first shifted operand's shift. Two registers of one class
// at shifts `m < s` compute the same values `s - m` points apart. A
// backend running vector steps of `GL` points in order keeps the previous
// vector of the class's first register at the least shift; when
// `0 < s - m <= GL`, the later register's vector is the last `GL` lanes
// of (previous, current) moved by `s - m` lanes, bit for bit what
// computing it gives. Those lanes must be values of points inside the
// segment, so reuse starts at the segment's second step: the checked body
// runs the first (at points all inside, it computes what the interior
// body does) and keeps its vectors. Only registers with at least two
// operations under them are taken this way (a single operation costs
// about what the lane move does); loads stay loads.

/// How a register of the interior body gets its value at a step after the
/// segment's first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reuse {
    /// Computed by its instruction.
    Compute,
    /// The same values as an earlier register (same class, same shift).
    Alias(Reg),
    /// Register `from`'s values `delta` points back: the last `GL` lanes of
    /// (its previous vector, its current one) moved by `delta` lanes.
    Shift {
        /// The class's register at the least shift (computed every step).
        from: Reg,
        /// Points between the two, `1..=GL`.
        delta: usize,
    },
}

/// What a kernel's steps after the first of its segment reuse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReusePlan {
    /// Per instruction of the body.
    pub how: Vec<Reuse>,
    /// The instructions in an order where every register comes after the
    /// registers it is taken from (operands, alias or shift source).
    pub order: Vec<usize>,
    /// Registers whose previous vector later steps read.
    pub carried: Vec<Reg>,
}

/// A value that does not change from point to point, named by what it is
/// (so that equal literals of different registers are one value).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Invariant {
    Lit(Lit),
    Scalar(u32),
    Reg(Reg),
}

/// An operand of a class: invariant, or a class at a shift relative to
/// the instruction's first shifted operand.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Operand {
    Invariant(Invariant),
    Shifted(usize, isize),
}

/// What a register is, point by point (see Note [Shifted reuse]).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Sig {
    Invariant(Invariant),
    Shifted(usize, isize),
    Opaque,
}

/// Which registers of a kernel's interior body can be taken from others
/// (see Note [Shifted reuse]) at vector steps of `lanes` points; `None`
/// when none can.
pub fn reuse_plan(k: &Kernel, seg: &Segment, lanes: usize) -> Option<ReusePlan> {
    let n = k.body.len();
    let mut classes: HashMap<(Inst, Vec<Operand>), usize> = HashMap::new();
    let mut intern = |template: Inst, ops: Vec<Operand>| {
        let next = classes.len();
        *classes.entry((template, ops)).or_insert(next)
    };
    let mut sig = vec![Sig::Opaque; n];
    // Operations under a register (loads and invariants count none).
    let mut depth = vec![0usize; n];
    let zeroed = vec![0 as Reg; n];
    for (r, inst) in k.body.iter().enumerate() {
        sig[r] = match inst {
            Inst::Lit(l) => Sig::Invariant(Invariant::Lit(*l)),
            Inst::Load { arg, index: Index::Scalar } => Sig::Invariant(Invariant::Scalar(*arg)),
            Inst::Load { arg, index: Index::Point } => {
                Sig::Shifted(intern(Inst::Load { arg: *arg, index: Index::Point }, vec![]), 0)
            }
            Inst::Window { arg, window, fill } => {
                let w = window.coalesced();
                match w.dims.len() {
                    0 => Sig::Invariant(Invariant::Reg(r as Reg)),
                    1 if !seg.inside[r] => sig[*fill as usize].clone(),
                    1 if w.strides[0] == 1 => {
                        // `a[offset + (p - lo)]`: shift `lo - offset`.
                        Sig::Shifted(intern(Inst::Load { arg: *arg, index: Index::Point }, vec![]), w.lo[0] - w.offset)
                    }
                    _ => Sig::Opaque,
                }
            }
            Inst::Inside(w) if w.coalesced().dims.len() == 1 => {
                Sig::Invariant(Invariant::Lit(Lit { dtype: crate::dtype::DType::Bool, bits: u64::from(seg.inside[r]) }))
            }
            Inst::Unary(..)
            | Inst::Binary(..)
            | Inst::Compare(..)
            | Inst::Select(..)
            | Inst::Fma(..)
            | Inst::Convert(..)
            | Inst::Word(..)
            | Inst::Bitcast(..) => {
                let mut base = None;
                let mut ops = Vec::new();
                let mut opaque = false;
                for o in inst.operands() {
                    depth[r] = depth[r].max(depth[o as usize] + 1);
                    match &sig[o as usize] {
                        Sig::Invariant(v) => ops.push(Operand::Invariant(v.clone())),
                        Sig::Shifted(c, s) => {
                            let b = *base.get_or_insert(*s);
                            ops.push(Operand::Shifted(*c, s - b));
                        }
                        Sig::Opaque => opaque = true,
                    }
                }
                match (opaque, base, inst.remapped(&zeroed)) {
                    (false, Some(b), Some(template)) => Sig::Shifted(intern(template, ops), b),
                    (false, None, _) => Sig::Invariant(Invariant::Reg(r as Reg)),
                    _ => Sig::Opaque,
                }
            }
            _ => {
                for o in inst.operands() {
                    depth[r] = depth[r].max(depth[o as usize] + 1);
                }
                Sig::Opaque
            }
        };
    }
    // Per class, its first register at the least shift.
    let mut lead: HashMap<usize, (isize, Reg)> = HashMap::new();
    for (r, s) in sig.iter().enumerate() {
        if let Sig::Shifted(c, s) = *s {
            let e = lead.entry(c).or_insert((s, r as Reg));
            if s < e.0 {
                *e = (s, r as Reg);
            }
        }
    }
    let mut how = vec![Reuse::Compute; n];
    let mut carried = Vec::new();
    for (r, s) in sig.iter().enumerate() {
        let Sig::Shifted(c, s) = *s else { continue };
        let (m, from) = lead[&c];
        let delta = (s - m) as usize;
        if from as usize == r || matches!(k.body[r], Inst::Load { .. } | Inst::Window { .. }) {
            continue;
        }
        if delta == 0 {
            how[r] = Reuse::Alias(from);
        } else if depth[r] >= 2 && delta <= lanes {
            how[r] = Reuse::Shift { from, delta };
            if !carried.contains(&from) {
                carried.push(from);
            }
        }
    }
    if how.iter().all(|h| *h == Reuse::Compute) {
        return None;
    }
    let order = dependency_order(k, &how);
    Some(ReusePlan { how, order, carried })
}

/// The body's instructions in an order where each comes after what it
/// reads (its operands when computed, else its source): a depth-first
/// walk without recursion, visiting roots in body order. Sources are
/// registers of lower structure or of the same class at a lesser shift,
/// so the walk finds no cycle.
fn dependency_order(k: &Kernel, how: &[Reuse]) -> Vec<usize> {
    let n = k.body.len();
    let deps = |r: usize| -> Vec<usize> {
        match how[r] {
            Reuse::Compute => k.body[r].operands().into_iter().map(|o| o as usize).collect(),
            Reuse::Alias(f) | Reuse::Shift { from: f, .. } => vec![f as usize],
        }
    };
    let mut state = vec![0u8; n]; // 0 new, 1 open, 2 done
    let mut order = Vec::with_capacity(n);
    for root in 0..n {
        if state[root] != 0 {
            continue;
        }
        let mut stack = vec![(root, false)];
        while let Some((r, expanded)) = stack.pop() {
            if expanded {
                state[r] = 2;
                order.push(r);
                continue;
            }
            if state[r] != 0 {
                continue;
            }
            state[r] = 1;
            stack.push((r, true));
            for d in deps(r).into_iter().rev() {
                if state[d] == 0 {
                    stack.push((d, false));
                }
            }
        }
    }
    order
}
