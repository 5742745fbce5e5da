//! Blocked step schedules: consecutive elementwise kernels of a loop step
//! run block by block, interleaved, so the values they pass each other stay
//! in the first-level cache.
//!
//! A step of a compiled loop calls its kernels one after the other, each
//! over all its points. When the step's vectors are larger than the L1
//! cache (an RK4 step over 10 000 f64 is eight 80 KB stage vectors), every
//! value one kernel writes and the next reads makes a round trip through
//! L2. Here a *run* of consecutive calls whose kernels have one index space
//! is executed in blocks of `block` points instead: for each block end `e`,
//! every call of the run computes its points up to `e + lead` (its lead
//! over the run's last call), continuing where it stopped for the previous
//! block. A call's lead covers the farthest point ahead that a later call
//! of the run reads of its output, so every value is written before it is
//! read: a stencil's shifted reads (`concat((1), y[:-1])` reads `y` one
//! point behind, a reverse sweep's `pad(slice(g, 1:))` one ahead) need
//! nothing recomputed, unlike the producer inlining of `inline.rs`.
//!
//! Results are bitwise those of the plain schedule: every point of every
//! kernel computes the same instructions on the same values (the C
//! renderer's kernels do not depend on where a range starts), only the
//! order in which points of different kernels run changes, and a run is
//! formed only where that order cannot be observed:
//! - its calls are kernels (not host calls) without rows, over the same
//!   number of points, storing point `i` at element `i`;
//! - a buffer written by a call of the run is neither read nor written by an
//!   earlier call of the run (a scratch buffer reused for a later value
//!   ends the run), and no call reads a buffer it writes;
//! - a later call reads an earlier call's output at a fixed offset from its
//!   own point (a point load, a row-major strided load, or a window load
//!   that is a pure shift), whose largest value bounds the lead.

use super::super::ir::{Access, Index, Inst, Kernel, Window};
use super::super::lower::row_strides;
use super::{Callee, Loc, LoopProgram};
use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::ops::Range;

/// Bytes of the values a run touches per block (all its full-size buffers
/// together): most of a 32 KiB L1 data cache.
const BLOCK_BYTES: usize = 24 << 10;

/// Fewest points per block (a multiple of every vector width).
const MIN_BLOCK: usize = 64;

/// Fewest blocks a run is cut into. Each block costs every call of the run
/// an entry and partial vectors at both ends of its range (leads are not
/// multiples of the vector width); with few blocks that outweighs the L2
/// traffic the blocks save.
/// Measured on GradBench `ode`'s gradient (10 steps, the reverse step's run
/// of seven calls, one thread): f64, n = 1 000 (5 blocks) 34.6 µs blocked
/// against 31.1 µs plain, n = 2 000 (10 blocks) 62.5 against 67.5 µs; f32,
/// n = 1 000 (2.6 blocks) 35-37 against 27 µs, n = 3 000 (7.8 blocks) 59-72
/// against 57-61 µs, n = 4 000 (10.4 blocks) 69.4 against 73-78 µs.
const MIN_BLOCKS: usize = 8;

/// Consecutive calls of a step run block by block (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    /// The calls, a range of [`LoopProgram::calls`].
    pub calls: Range<usize>,
    /// Points per block.
    pub block: usize,
    /// Points of every kernel of the run.
    pub extent: usize,
    /// Per call of the run: how many points ahead of the block end it runs.
    pub leads: Vec<usize>,
}

/// The offset `d` at which the read instruction `inst` reads a buffer of
/// `n` elements at point `i` (element `i + d` where it reads at all), if
/// it is a fixed offset. A scalar load (element 0) counts as offset 0: it
/// never reads ahead.
fn read_offset(inst: &Inst, n: usize) -> Option<isize> {
    let row_major =
        |dims: &[usize], strides: &[isize]| dims.iter().product::<usize>() == n && strides == row_strides(dims);
    match inst {
        Inst::Load { index: Index::Point | Index::Scalar, .. } => Some(0),
        Inst::Load { index: Index::Strided { dims, strides, offset }, .. } => {
            row_major(dims, strides).then_some(*offset)
        }
        Inst::Window { window: Window { dims, lo, strides, offset, .. }, .. } => {
            if !row_major(dims, strides) {
                return None;
            }
            let lo_flat: isize = lo.iter().zip(strides).map(|(l, s)| l * s).sum();
            Some(offset - lo_flat)
        }
        _ => None,
    }
}

/// The argument a read instruction reads.
fn read_arg(inst: &Inst) -> Option<u32> {
    match inst {
        Inst::Load { arg, .. } | Inst::Window { arg, .. } | Inst::LoadAt { arg, .. } => Some(*arg),
        _ => None,
    }
}

/// Whether a kernel can join a run: an elementwise body whose stores are
/// all at the point's own element.
fn joinable(k: &Kernel) -> bool {
    k.body.iter().all(|i| match i {
        Inst::Reduce(_) | Inst::Map(_) => false,
        Inst::Store { index, .. } => *index == Index::Point,
        _ => true,
    })
}

/// One call as the run finder sees it: its kernel (`None` for a host
/// call) and what each argument is bound to (values while the program is
/// built, buffers once it is).
pub(super) type CallView<'a, B> = (Option<&'a Kernel>, &'a [B]);

/// The runs of `p`'s step worth blocking: at least two calls over at least
/// [`MIN_BLOCKS`] blocks of points.
pub fn runs(p: &LoopProgram) -> Vec<Run> {
    let calls: Vec<CallView<'_, Loc>> = p
        .calls
        .iter()
        .map(|c| match c.callee {
            Callee::Kernel(k) => (Some(&p.kernels[k]), c.args.as_slice()),
            Callee::Host(_) => (None, c.args.as_slice()),
        })
        .collect();
    find_runs(&calls)
}

/// [`runs`] over calls bound to anything that names a buffer (the builder
/// plans scratch buffers with the runs its values form, so that buffer
/// reuse never ends a run).
pub(super) fn find_runs<B: Copy + Eq + Hash>(calls: &[CallView<'_, B>]) -> Vec<Run> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < calls.len() {
        let end = run_end(calls, start);
        if end - start >= 2 {
            if let Some(run) = schedule(calls, start..end) {
                out.push(run);
            }
        }
        start = end.max(start + 1);
    }
    out
}

/// The kernel of call `c`, if it is a joinable kernel.
fn kernel_of<'a, B>(calls: &[CallView<'a, B>], c: usize) -> Option<&'a Kernel> {
    calls[c].0.filter(|k| joinable(k))
}

/// The end of the longest run that starts at call `start` (`start + 1`
/// when the call cannot start one).
fn run_end<B: Copy + Eq + Hash>(calls: &[CallView<'_, B>], start: usize) -> usize {
    let Some(first) = kernel_of(calls, start) else { return start + 1 };
    let n = first.extent;
    let mut written: HashSet<B> = HashSet::new();
    let mut touched: HashSet<B> = HashSet::new();
    let mut c = start;
    while c < calls.len() {
        let Some(k) = kernel_of(calls, c).filter(|k| k.extent == n) else { break };
        let binds = calls[c].1;
        let reads: HashSet<B> =
            k.args.iter().zip(binds).filter(|(a, _)| a.access == Access::Read).map(|(_, l)| *l).collect();
        let writes: Vec<B> =
            k.args.iter().zip(binds).filter(|(a, _)| a.access == Access::Write).map(|(_, l)| *l).collect();
        if writes.iter().any(|w| touched.contains(w) || reads.contains(w)) {
            break;
        }
        // Reads of the run's own outputs must be at fixed offsets.
        let fixed = k.body.iter().all(|inst| match read_arg(inst) {
            Some(a) if written.contains(&binds[a as usize]) => read_offset(inst, n).is_some(),
            _ => true,
        });
        if !fixed {
            break;
        }
        touched.extend(reads.iter().copied());
        touched.extend(writes.iter().copied());
        written.extend(writes);
        c += 1;
    }
    c.max(start + 1)
}

/// Leads and block size of the run over `range`, or `None` when it is too
/// small to gain from blocking.
fn schedule<B: Copy + Eq + Hash>(calls: &[CallView<'_, B>], range: Range<usize>) -> Option<Run> {
    let ks: Vec<&Kernel> = range.clone().map(|c| kernel_of(calls, c)).collect::<Option<_>>()?;
    let n = ks[0].extent;
    // Who writes each buffer, and the bytes per point of everything touched.
    let mut writer: HashMap<B, usize> = HashMap::new();
    let mut sizes: HashMap<B, usize> = HashMap::new();
    for (j, (k, c)) in ks.iter().zip(range.clone()).enumerate() {
        for (a, l) in k.args.iter().zip(calls[c].1) {
            if a.len == n {
                sizes.insert(*l, a.dtype.size_bytes());
            }
            if a.access == Access::Write {
                writer.insert(*l, j);
            }
        }
    }
    let per_point: usize = sizes.values().sum::<usize>().max(1);
    let block = (BLOCK_BYTES / per_point / MIN_BLOCK * MIN_BLOCK).max(MIN_BLOCK);
    if n < MIN_BLOCKS * block {
        return None;
    }
    // Leads, from the last call back: a producer runs far enough ahead of
    // each reader for the reader's farthest read.
    let mut leads = vec![0usize; ks.len()];
    for j in (0..ks.len()).rev() {
        let binds = calls[range.start + j].1;
        for inst in &ks[j].body {
            let Some(a) = read_arg(inst) else { continue };
            let Some(&w) = writer.get(&binds[a as usize]).filter(|&&w| w < j) else { continue };
            let d = read_offset(inst, n)?;
            let need = (leads[j] as isize).saturating_add(d).max(0) as usize;
            leads[w] = leads[w].max(need.min(n));
        }
    }
    Some(Run { calls: range, block, extent: n, leads })
}
