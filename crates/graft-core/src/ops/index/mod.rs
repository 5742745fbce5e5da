//! Indexing primitives: `gather`, `scatter_add`, `dynamic_slice` and
//! `dynamic_update_slice`.
//!
//! `gather` and `scatter_add` share one general form (a restricted XLA
//! gather/scatter) so that each is the other's transpose and batching only
//! has to bump `batch_dims`:
//!
//! - operand shape `[B..., O...]`, indices shape `[B..., I..., k]` where
//!   `B...` are the first `batch_dims` dims of both (equal sizes) and
//!   `k = index_dims.len()` (the trailing index-vector dim is always present;
//!   `k = 0` is allowed and indexes nothing, i.e. broadcasts over `I...`);
//! - `index_dims` are strictly increasing operand axes, each `>= batch_dims`;
//! - `gather` output shape `[B..., I..., R...]` with `R...` the operand dims
//!   after the batch dims with `index_dims` removed (in order), and
//!   `out[b, i, r] = operand[b, (index_dims := indices[b, i, :]), r]`;
//! - `scatter_add(operand, indices, updates)` takes `updates` of exactly the
//!   gather output shape and returns `operand` with every update added at the
//!   position gather would have read it from. Duplicate positions accumulate.
//!
//! Out-of-range indices ([`IndexMode`]): an index `v` into an axis of size
//! `n` is in range iff `0 <= v < n`; negative indices are out of range (no
//! Python-style wrap-around at this level). `Clip` clamps every index into
//! `[0, n-1]` (gather reads the edge, scatter_add adds to the edge); `Fill`
//! makes a gather of an index vector with any out-of-range component read 0
//! (`false` for bool) and makes scatter_add drop that update. An indexed
//! axis of size 0 has no in-range position, so both modes read 0 / drop
//! there. Each mode transposes into the same mode of the other op.
//!
//! Determinism: gather is a pure copy; scatter_add accumulates every output
//! element in the order of the index positions (row-major over `B..., I...`)
//! whatever the thread count, because threads own disjoint output ranges and
//! each walks the positions in order. Integer scatter_add wraps on overflow.
//!
//! `dynamic_slice` / `dynamic_update_slice` take one rank-0 i32/i64 start per
//! operand dim. As in XLA, each start is clamped into `[0, n - size]` so the
//! slice (or update) always fits entirely inside the operand; there is never
//! an out-of-range read or a partial write.

use super::kernel::{input, output, unsupported, worth_parallel, CHUNK};
use super::{check, Op};
use crate::dtype::DType;
use crate::error::{ExecError, IrError, TypeError};
use crate::ir::{Builder, Value};
use crate::tensor::{Element, Storage, Tensor};
use crate::types::{fmt_list, strides_of, Shape, TensorType};
use crate::{dispatch_any, dispatch_num};
use num_traits::AsPrimitive;
use rayon::prelude::*;
use std::fmt;

/// What gather and scatter_add do with an out-of-range index (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IndexMode {
    /// Clamp every index into range: read from / add to the edge.
    Clip,
    /// Out-of-range gathers read 0 (`false`); out-of-range updates are dropped.
    Fill,
}

impl IndexMode {
    /// The printed spelling (`clip`, `fill`).
    pub fn name(self) -> &'static str {
        match self {
            IndexMode::Clip => "clip",
            IndexMode::Fill => "fill",
        }
    }

    /// Parses the printed spelling.
    pub fn parse(s: &str) -> Option<IndexMode> {
        match s {
            "clip" => Some(IndexMode::Clip),
            "fill" => Some(IndexMode::Fill),
            _ => None,
        }
    }
}

impl fmt::Display for IndexMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Gathers slabs of the operand at index vectors (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Gather {
    /// Leading dims shared by operand and indices, indexed in lockstep.
    pub batch_dims: usize,
    /// Operand axes addressed by the index vectors, strictly increasing, each `>= batch_dims`.
    pub index_dims: Vec<usize>,
    /// Out-of-range behaviour.
    pub mode: IndexMode,
}

/// Adds updates into the operand at index vectors; the transpose of [`Gather`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ScatterAdd {
    /// Leading dims shared by operand, indices and updates.
    pub batch_dims: usize,
    /// Operand axes addressed by the index vectors, strictly increasing, each `>= batch_dims`.
    pub index_dims: Vec<usize>,
    /// Out-of-range behaviour.
    pub mode: IndexMode,
}

/// A slice of static `sizes` at run-time start indices (clamped to fit).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DynamicSlice {
    /// Size of the slice along each operand dim.
    pub sizes: Vec<usize>,
}

/// The operand with a block overwritten at run-time start indices (clamped to fit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DynamicUpdateSlice;

fn index_params(batch_dims: usize, index_dims: &[usize], mode: IndexMode) -> String {
    format!("batch_dims={batch_dims}, index_dims={}, mode={mode}", fmt_list(index_dims))
}

/// The gather output shape for `(operand, indices)`; the shared half of the
/// gather and scatter_add shape rules.
fn gather_shape(
    op: &impl Op,
    ins: &[TensorType],
    operand: &TensorType,
    indices: &TensorType,
    batch_dims: usize,
    index_dims: &[usize],
) -> Result<Shape, TypeError> {
    let bd = batch_dims;
    let k = index_dims.len();
    if !indices.dtype.is_int() {
        return Err(check::err(op, ins, "expected integer indices (i32 or i64)"));
    }
    if indices.rank() < bd + 1 {
        return Err(check::err(
            op,
            ins,
            format!("expected indices of rank >= {} ({bd} batch dims plus the trailing index-vector dim)", bd + 1),
        ));
    }
    if indices.shape[indices.rank() - 1] != k {
        return Err(check::err(
            op,
            ins,
            format!("expected the last indices dim to be {k} (one component per index_dims entry)"),
        ));
    }
    if operand.rank() < bd {
        return Err(check::err(op, ins, format!("expected an operand of rank >= batch_dims={bd}")));
    }
    if operand.shape[..bd] != indices.shape[..bd] {
        return Err(check::err(
            op,
            ins,
            format!("expected operand and indices to share their {bd} leading batch dims"),
        ));
    }
    for (j, &d) in index_dims.iter().enumerate() {
        if d < bd || d >= operand.rank() {
            return Err(check::err(
                op,
                ins,
                format!("index_dims entry {d} must be an operand axis in [{bd}, {}) (not a batch dim)", operand.rank()),
            ));
        }
        if j > 0 && d <= index_dims[j - 1] {
            return Err(check::err(op, ins, "expected strictly increasing index_dims"));
        }
    }
    let mut shape: Shape = indices.shape[..indices.rank() - 1].to_vec();
    shape.extend((bd..operand.rank()).filter(|d| !index_dims.contains(d)).map(|d| operand.shape[d]));
    Ok(shape)
}

/// Where each index position's slab lives in the operand, derived once per
/// kernel call from the operand shape and the parameters.
///
/// A slab (the `R...` part of one position) is `runs.len()` contiguous runs
/// of `inner` elements: `inner` covers the operand axes after the last
/// indexed axis, `runs` enumerates the non-indexed axes before it.
struct Geometry {
    /// Index positions per batch element (the product of `I...`).
    ni: usize,
    /// Operand elements per batch element.
    op_batch: usize,
    /// `(size, stride)` of each indexed operand axis, in `index_dims` order.
    idx: Vec<(usize, usize)>,
    /// Operand offset of each run relative to the slab origin, in output order.
    runs: Vec<usize>,
    /// Length of every run.
    inner: usize,
    /// Output (or update) elements per index position: `runs.len() * inner`.
    slab: usize,
}

impl Geometry {
    fn new(op_shape: &[usize], idx_shape: &[usize], batch_dims: usize, index_dims: &[usize]) -> Geometry {
        let strides = strides_of(op_shape);
        let ni = idx_shape[batch_dims..idx_shape.len() - 1].iter().product();
        let op_batch = op_shape[batch_dims..].iter().product();
        let idx = index_dims.iter().map(|&d| (op_shape[d], strides[d])).collect();
        let tail = index_dims.last().map_or(batch_dims, |&d| d + 1);
        let inner = op_shape[tail..].iter().product();
        let outer: Vec<(usize, usize)> =
            (batch_dims..tail).filter(|d| !index_dims.contains(d)).map(|d| (op_shape[d], strides[d])).collect();
        let runs = odometer_offsets(&outer);
        let slab = runs.len() * inner;
        Geometry { ni, op_batch, idx, runs, inner, slab }
    }

    /// Operand offset of position `p`'s slab, or `None` when `Fill` (or an
    /// empty indexed axis) makes the position read 0 / drop its update.
    #[inline]
    fn origin<I: AsPrimitive<i64>>(&self, p: usize, indices: &[I], mode: IndexMode) -> Option<usize> {
        let k = self.idx.len();
        let mut off = (p / self.ni) * self.op_batch;
        for (&raw, &(size, stride)) in indices[p * k..p * k + k].iter().zip(&self.idx) {
            off += resolve(raw.as_(), size, mode)? * stride;
        }
        Some(off)
    }
}

/// Index `raw` into an axis of `size` under `mode` (see the module docs), or
/// `None` when the position reads 0 / drops its update.
#[inline]
fn resolve(raw: i64, size: usize, mode: IndexMode) -> Option<usize> {
    if raw >= 0 && (raw as u64) < size as u64 {
        return Some(raw as usize);
    }
    match mode {
        IndexMode::Fill => None,
        IndexMode::Clip if size == 0 => None,
        IndexMode::Clip if raw < 0 => Some(0),
        IndexMode::Clip => Some(size - 1),
    }
}

/// Offsets of every multi-index of `dims` (`(size, stride)` pairs) in
/// row-major order; one offset (0) for no dims, none if any size is 0.
fn odometer_offsets(dims: &[(usize, usize)]) -> Vec<usize> {
    let n: usize = dims.iter().map(|d| d.0).product();
    let mut out = Vec::with_capacity(n);
    let mut idx = vec![0usize; dims.len()];
    let mut off = 0usize;
    for _ in 0..n {
        out.push(off);
        for a in (0..dims.len()).rev() {
            idx[a] += 1;
            off += dims[a].1;
            if idx[a] < dims[a].0 {
                break;
            }
            off -= dims[a].1 * dims[a].0;
            idx[a] = 0;
        }
    }
    out
}

fn gather_kernel<T: Element, I: AsPrimitive<i64> + Sync>(
    g: &Geometry,
    mode: IndexMode,
    operand: &[T],
    indices: &[I],
    out: &mut [T],
) {
    if out.is_empty() {
        return;
    }
    let zero = T::from_f64(0.0);
    if g.slab == 1 && g.idx.len() == 1 {
        // Element gathers (one index per output element, e.g. `take` of
        // scalars by a big index table) skip the per-slab run loop: the
        // generic path costs several times the load itself per element.
        let (off, (size, stride), ni, ob) = (g.runs[0], g.idx[0], g.ni, g.op_batch);
        // What an out-of-range index reads from its batch's slice `src`.
        let outside = |src: &[T], raw: i64| match mode {
            IndexMode::Fill => zero,
            IndexMode::Clip if size == 0 => zero,
            IndexMode::Clip if raw < 0 => src[0],
            IndexMode::Clip => src[(size - 1) * stride],
        };
        let run = |start: usize, chunk: &mut [T]| {
            // One pass per batch the chunk touches, over that batch's slice
            // of the operand, so the loop body is an index check and a load
            // (a per-element batch count cost more than the load itself).
            // `ni >= 1` here: the output is not empty.
            let ni = ni.max(1);
            let mut done = 0;
            while done < chunk.len() {
                let p = start + done;
                let len = (ni - p % ni).min(chunk.len() - done);
                let src = &operand[(p / ni) * ob + off..];
                let (o, idx) = (&mut chunk[done..done + len], &indices[p..p + len]);
                if stride == 1 {
                    let src = &src[..size];
                    for (o, &raw) in o.iter_mut().zip(idx) {
                        let raw: i64 = raw.as_();
                        // A negative index wraps to a huge one: `get` refuses it.
                        *o = match src.get(raw as usize) {
                            Some(&v) => v,
                            None => outside(src, raw),
                        };
                    }
                } else {
                    for (o, &raw) in o.iter_mut().zip(idx) {
                        let raw: i64 = raw.as_();
                        *o = if raw >= 0 && (raw as u64) < size as u64 {
                            src[raw as usize * stride]
                        } else {
                            outside(src, raw)
                        };
                    }
                }
                done += len;
            }
        };
        if worth_parallel(out.len()) {
            out.par_chunks_mut(CHUNK).enumerate().for_each(|(t, chunk)| run(t * CHUNK, chunk));
        } else {
            run(0, out);
        }
        return;
    }
    let one = |p: usize, o: &mut [T]| match g.origin(p, indices, mode) {
        None => o.fill(zero),
        Some(base) if g.inner == 1 => {
            for (o, &r) in o.iter_mut().zip(&g.runs) {
                *o = operand[base + r];
            }
        }
        Some(base) => {
            for (o, &r) in o.chunks_exact_mut(g.inner).zip(&g.runs) {
                o.copy_from_slice(&operand[base + r..base + r + g.inner]);
            }
        }
    };
    if worth_parallel(out.len()) && out.len() > g.slab {
        let per_task = (CHUNK / g.slab).max(1);
        out.par_chunks_mut(g.slab * per_task).enumerate().for_each(|(t, chunk)| {
            for (q, o) in chunk.chunks_exact_mut(g.slab).enumerate() {
                one(t * per_task + q, o);
            }
        });
    } else {
        for (p, o) in out.chunks_exact_mut(g.slab).enumerate() {
            one(p, o);
        }
    }
}

/// Accumulation for scatter_add: float `+`, wrapping integer `+`.
trait Accumulate: Element {
    fn accumulate(self, x: Self) -> Self;
}

impl Accumulate for f32 {
    #[inline]
    fn accumulate(self, x: Self) -> Self {
        self + x
    }
}

impl Accumulate for f64 {
    #[inline]
    fn accumulate(self, x: Self) -> Self {
        self + x
    }
}

impl Accumulate for i32 {
    #[inline]
    fn accumulate(self, x: Self) -> Self {
        self.wrapping_add(x)
    }
}

impl Accumulate for u32 {
    #[inline]
    fn accumulate(self, x: Self) -> Self {
        self.wrapping_add(x)
    }
}

impl Accumulate for i64 {
    #[inline]
    fn accumulate(self, x: Self) -> Self {
        self.wrapping_add(x)
    }
}

/// Positions an element scatter examines at once (see [`scatter_elements`]).
const SCATTER_WINDOW: usize = 4096;

/// Adds `updates[p]` to the element of `out` that `indices[p]` names (see
/// [`ElementTargets`]; dropped where it names none) for every
/// position `p` in order, so each element's additions keep position order.
///
/// Why not one read-modify-write per position: consecutive updates of the
/// same element then form a chain through memory (store, forwarded load,
/// add: about three times an addition's latency), and long runs of one
/// target are common (the transpose of a gather by a permutation table, as
/// in GradBench `det`, adds 720 consecutive updates to one element). Each
/// window of positions is resolved to targets and cut into runs of one
/// target first. A window whose runs average fewer than four adds adds in
/// memory, where the additions to different elements overlap. Otherwise
/// each run adds in a register, stored once at its end, and up to four
/// consecutive runs with distinct targets add in lockstep ([`sum_runs`]),
/// so their latency chains overlap. Runs with distinct targets touch
/// disjoint elements, and a run never starts before the earlier runs of
/// its target ended, so every element still adds in position order: the
/// bits are those of the plain loop.
fn scatter_elements<T: Accumulate, I: AsPrimitive<i64>>(
    out: &mut [T],
    indices: &[I],
    updates: &[T],
    at: ElementTargets,
) {
    let mut t: Vec<usize> = Vec::with_capacity(SCATTER_WINDOW.min(indices.len()));
    let mut runs: Vec<(usize, usize, usize)> = Vec::new();
    for (idx, upd) in indices.chunks(SCATTER_WINDOW).zip(updates.chunks(SCATTER_WINDOW)) {
        t.resize(idx.len(), 0);
        at.resolve(idx, &mut t);
        let n_runs = 1 + t.windows(2).filter(|w| w[0] != w[1]).count();
        if n_runs * 4 > t.len() {
            for (&s, &u) in t.iter().zip(upd) {
                if s != usize::MAX {
                    out[s] = out[s].accumulate(u);
                }
            }
            continue;
        }
        runs.clear();
        let mut p = 0;
        while p < t.len() {
            let s = t[p];
            let end = p + t[p..].iter().position(|&x| x != s).unwrap_or(t.len() - p);
            if s != usize::MAX {
                runs.push((p, end, s));
            }
            p = end;
        }
        let mut i = 0;
        while i < runs.len() {
            let mut j = i + 1;
            while j < runs.len() && j - i < 4 && !runs[i..j].iter().any(|r| r.2 == runs[j].2) {
                j += 1;
            }
            match j - i {
                4 => sum_runs::<T, 4>(out, upd, &runs[i..j]),
                3 => sum_runs::<T, 3>(out, upd, &runs[i..j]),
                2 => sum_runs::<T, 2>(out, upd, &runs[i..j]),
                _ => sum_runs::<T, 1>(out, upd, &runs[i..j]),
            }
            i = j;
        }
    }
}

/// Where the updates of an element scatter land in the output range
/// `lo..lo + len` of one thread: index `v` (resolved by `mode` into an axis
/// of `size`) adds to element `base + v * stride`.
#[derive(Clone, Copy)]
struct ElementTargets {
    base: usize,
    size: usize,
    stride: usize,
    mode: IndexMode,
    lo: usize,
    len: usize,
}

impl ElementTargets {
    /// Each index's offset in the output range, `usize::MAX` where its
    /// update is dropped or lands outside the range. A loop of its own,
    /// over plain copies of the geometry, so it compiles to a few
    /// instructions per index.
    fn resolve<I: AsPrimitive<i64>>(self, idx: &[I], t: &mut [usize]) {
        let ElementTargets { base, size, stride, mode, lo, len } = self;
        for (ti, raw) in t.iter_mut().zip(idx) {
            let raw: i64 = raw.as_();
            // A negative index wraps to a huge one and takes the slow path.
            let v = if (raw as u64) < size as u64 { Some(raw as usize) } else { resolve(raw, size, mode) };
            let s = v.map_or(usize::MAX, |v| (base + v * stride).wrapping_sub(lo));
            *ti = if s < len { s } else { usize::MAX };
        }
    }
}

/// Adds `G` runs `(start, end, target)` of `upd` to their (distinct)
/// targets in `out`, each in position order, the runs in lockstep over
/// their common length (independent chains the core overlaps), then each
/// run's rest.
fn sum_runs<T: Accumulate, const G: usize>(out: &mut [T], upd: &[T], runs: &[(usize, usize, usize)]) {
    let m = runs.iter().map(|r| r.1 - r.0).min().unwrap_or(0);
    let mut acc: [T; G] = std::array::from_fn(|r| out[runs[r].2]);
    let heads: [&[T]; G] = std::array::from_fn(|r| &upd[runs[r].0..runs[r].0 + m]);
    for k in 0..m {
        for r in 0..G {
            acc[r] = acc[r].accumulate(heads[r][k]);
        }
    }
    for (r, &(start, end, s)) in runs.iter().enumerate() {
        let mut a = acc[r];
        for &u in &upd[start + m..end] {
            a = a.accumulate(u);
        }
        out[s] = a;
    }
}

/// Runs at least this long make it worth letting every thread scan all
/// index positions and keep only the parts landing in its output range.
const SCATTER_SPLIT_MIN_RUN: usize = 64;

fn scatter_kernel<T: Accumulate, I: AsPrimitive<i64> + Sync>(
    g: &Geometry,
    mode: IndexMode,
    operand: &[T],
    indices: &[I],
    updates: &[T],
    out: &mut [T],
) {
    out.copy_from_slice(operand);
    if out.is_empty() || updates.is_empty() {
        return;
    }
    let nb = out.len() / g.op_batch;
    // Adds every update that lands in `chunk` = out[lo..lo + chunk.len()],
    // scanning positions in order so each element's sum order is fixed.
    let apply = |chunk: &mut [T], lo: usize| {
        let hi = lo + chunk.len();
        let (b0, b1) = (lo / g.op_batch, hi.div_ceil(g.op_batch).min(nb));
        if g.slab == 1 && g.idx.len() == 1 {
            // Element scatters (one index per update, e.g. the gradient of
            // max pooling) skip the per-slab run loop, as gather does: the
            // generic path costs several times the addition per element.
            let (off, (size, stride)) = (g.runs[0], g.idx[0]);
            for b in b0..b1 {
                let base = b * g.op_batch + off;
                let ps = b * g.ni..(b + 1) * g.ni;
                let at = ElementTargets { base, size, stride, mode, lo, len: hi - lo };
                scatter_elements(chunk, &indices[ps.clone()], &updates[ps], at);
            }
            return;
        }
        if let ([0], [(size, stride)], true) = (g.runs.as_slice(), g.idx.as_slice(), b1 - b0 == 1) {
            // Rows of one batch through one indexed axis, each update one
            // contiguous run (the gradient of `take(table, idx, axis=0)`):
            // the slab's origin without the generic per-position division.
            let (size, stride, inner) = (*size, *stride, g.inner);
            let base0 = b0 * g.op_batch;
            for p in b0 * g.ni..b1 * g.ni {
                let Some(v) = resolve(indices[p].as_(), size, mode) else { continue };
                let s = base0 + v * stride;
                let (a, b) = (s.max(lo), (s + inner).min(hi));
                if a < b {
                    let u = &updates[p * inner + (a - s)..p * inner + (b - s)];
                    for (o, &x) in chunk[a - lo..b - lo].iter_mut().zip(u) {
                        *o = o.accumulate(x);
                    }
                }
            }
            return;
        }
        for p in b0 * g.ni..b1 * g.ni {
            let Some(base) = g.origin(p, indices, mode) else { continue };
            let upd = &updates[p * g.slab..(p + 1) * g.slab];
            for (u, &r) in upd.chunks_exact(g.inner).zip(&g.runs) {
                let s = base + r;
                let (a, b) = (s.max(lo), (s + g.inner).min(hi));
                if a < b {
                    for (o, &x) in chunk[a - lo..b - lo].iter_mut().zip(&u[a - s..b - s]) {
                        *o = o.accumulate(x);
                    }
                }
            }
        }
    };
    let threads = rayon::current_num_threads();
    if worth_parallel(updates.len()) && (nb >= 2 * threads || g.inner >= SCATTER_SPLIT_MIN_RUN) {
        // Batch-aligned ranges when there are enough batches (each thread
        // then scans only its own batches), else an even split.
        let len = if nb >= 2 * threads { nb.div_ceil(threads) * g.op_batch } else { out.len().div_ceil(threads) };
        out.par_chunks_mut(len).enumerate().for_each(|(t, chunk)| apply(chunk, t * len));
    } else {
        apply(out, 0);
    }
}

/// Reads a rank-0 i32/i64 start index.
fn read_start(prim: &str, t: &Tensor) -> Result<i64, ExecError> {
    let v = match t.storage() {
        Storage::I32(v) => v.first().map(|&x| i64::from(x)),
        Storage::I64(v) => v.first().copied(),
        _ => None,
    };
    v.ok_or_else(|| ExecError::kernel(prim, format!("start indices must be rank-0 integers, got {}", t.ty())))
}

/// Start indices clamped so a block of `sizes` fits in `shape` (XLA semantics).
fn clamped_starts(prim: &str, starts: &[&Tensor], shape: &[usize], sizes: &[usize]) -> Result<Vec<usize>, ExecError> {
    starts
        .iter()
        .zip(shape.iter().zip(sizes))
        .map(|(t, (&n, &s))| Ok(read_start(prim, t)?.clamp(0, n.saturating_sub(s) as i64) as usize))
        .collect()
}

/// Copies the block of `sizes` at `s0` in `src` (shape `ss`) to `d0` in `dst`
/// (shape `ds`), one contiguous run at a time: trailing axes that are whole
/// on both sides fuse into the run.
fn copy_block<T: Copy>(
    src: &[T],
    ss: &[usize],
    s0: &[usize],
    dst: &mut [T],
    ds: &[usize],
    d0: &[usize],
    sizes: &[usize],
) {
    let rank = sizes.len();
    if sizes.contains(&0) {
        return;
    }
    let (sst, dstr) = (strides_of(ss), strides_of(ds));
    let mut j = rank.saturating_sub(1);
    while j > 0 && sizes[j] == ss[j] && sizes[j] == ds[j] {
        j -= 1;
    }
    let run: usize = sizes[j..].iter().product();
    let mut so: usize = s0.iter().zip(&sst).map(|(a, b)| a * b).sum();
    let mut dof: usize = d0.iter().zip(&dstr).map(|(a, b)| a * b).sum();
    let n_runs: usize = sizes[..j].iter().product();
    let mut idx = vec![0usize; j];
    for _ in 0..n_runs {
        dst[dof..dof + run].copy_from_slice(&src[so..so + run]);
        for a in (0..j).rev() {
            idx[a] += 1;
            so += sst[a];
            dof += dstr[a];
            if idx[a] < sizes[a] {
                break;
            }
            so -= sst[a] * sizes[a];
            dof -= dstr[a] * sizes[a];
            idx[a] = 0;
        }
    }
}

/// Rows (axis-0 slices) per parallel task for a block copy with rows of `row_len`.
fn rows_per_task(row_len: usize) -> usize {
    (4 * CHUNK / row_len.max(1)).max(1)
}

fn dynamic_slice_kernel<T: Element>(
    src: &[T],
    shape: &[usize],
    starts: &[usize],
    sizes: &[usize],
    out: &mut [T],
) -> Result<(), ExecError> {
    if out.is_empty() {
        return Ok(());
    }
    let zeros = vec![0; sizes.len()];
    if worth_parallel(out.len()) && !sizes.is_empty() && sizes[0] > 1 {
        let row_len = out.len() / sizes[0];
        let rows = rows_per_task(row_len);
        out.par_chunks_mut(rows * row_len).enumerate().for_each(|(t, chunk)| {
            let (mut sz, mut st) = (sizes.to_vec(), starts.to_vec());
            sz[0] = chunk.len() / row_len;
            st[0] += t * rows;
            copy_block(src, shape, &st, chunk, &sz, &zeros, &sz);
        });
    } else {
        copy_block(src, shape, starts, out, sizes, &zeros, sizes);
    }
    Ok(())
}

fn dynamic_update_kernel<T: Element>(
    operand: &[T],
    update: &[T],
    shape: &[usize],
    starts: &[usize],
    sizes: &[usize],
    out: &mut [T],
) -> Result<(), ExecError> {
    if out.is_empty() {
        return Ok(());
    }
    let zeros = vec![0; sizes.len()];
    if worth_parallel(out.len()) && !shape.is_empty() && shape[0] > 1 {
        let row_len = out.len() / shape[0];
        let rows = rows_per_task(row_len);
        out.par_chunks_mut(rows * row_len).zip(operand.par_chunks(rows * row_len)).enumerate().for_each(
            |(t, (chunk, src))| {
                chunk.copy_from_slice(src);
                let (r0, r1) = (t * rows, t * rows + chunk.len() / row_len);
                let (a, b) = (r0.max(starts[0]), r1.min(starts[0] + sizes[0]));
                if a < b {
                    let (mut sz, mut us, mut ds, mut cs) =
                        (sizes.to_vec(), zeros.clone(), starts.to_vec(), shape.to_vec());
                    sz[0] = b - a;
                    us[0] = a - starts[0];
                    ds[0] = a - r0;
                    cs[0] = r1 - r0;
                    copy_block(update, sizes, &us, chunk, &cs, &ds, &sz);
                }
            },
        );
    } else {
        out.copy_from_slice(operand);
        copy_block(update, sizes, &zeros, out, shape, starts, sizes);
    }
    Ok(())
}

impl Op for Gather {
    fn name(&self) -> &'static str {
        "gather"
    }

    fn params(&self) -> String {
        index_params(self.batch_dims, &self.index_dims, self.mode)
    }

    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        check::arity(self, ins, 2)?;
        let shape = gather_shape(self, ins, &ins[0], &ins[1], self.batch_dims, &self.index_dims)?;
        Ok(vec![TensorType::new(ins[0].dtype, shape)])
    }

    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        fn run<T: Element>(
            op: &Gather,
            g: &Geometry,
            operand: &Tensor,
            indices: &Tensor,
            out: &mut Tensor,
        ) -> Result<(), ExecError> {
            let (a, o) = (input::<T>(operand)?, output::<T>(out)?);
            match indices.dtype() {
                DType::I32 => gather_kernel(g, op.mode, a, input::<i32>(indices)?, o),
                DType::I64 => gather_kernel(g, op.mode, a, input::<i64>(indices)?, o),
                d => return Err(unsupported(op.name(), d)),
            }
            Ok(())
        }
        let (operand, indices) = (ins[0], ins[1]);
        let g = Geometry::new(operand.shape(), indices.shape(), self.batch_dims, &self.index_dims);
        dispatch_any!(operand.dtype(), run(self, &g, operand, indices, &mut outs[0]))
    }
}

impl Op for ScatterAdd {
    fn name(&self) -> &'static str {
        "scatter_add"
    }

    fn params(&self) -> String {
        index_params(self.batch_dims, &self.index_dims, self.mode)
    }

    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        check::arity(self, ins, 3)?;
        let (operand, indices, updates) = (&ins[0], &ins[1], &ins[2]);
        if !operand.dtype.is_numeric() {
            return Err(check::err(self, ins, "expected a numeric operand (not bool)"));
        }
        if updates.dtype != operand.dtype {
            return Err(check::err(self, ins, "expected updates of the operand's dtype"));
        }
        let shape = gather_shape(self, ins, operand, indices, self.batch_dims, &self.index_dims)?;
        if updates.shape != shape {
            return Err(check::err(
                self,
                ins,
                format!("expected updates of shape {} (what gather of operand by indices returns)", fmt_list(&shape)),
            ));
        }
        Ok(vec![operand.clone()])
    }

    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        fn run<T: Accumulate>(
            op: &ScatterAdd,
            g: &Geometry,
            ins: &[&Tensor],
            out: &mut Tensor,
        ) -> Result<(), ExecError> {
            let (a, u, o) = (input::<T>(ins[0])?, input::<T>(ins[2])?, output::<T>(out)?);
            match ins[1].dtype() {
                DType::I32 => scatter_kernel(g, op.mode, a, input::<i32>(ins[1])?, u, o),
                DType::I64 => scatter_kernel(g, op.mode, a, input::<i64>(ins[1])?, u, o),
                d => return Err(unsupported(op.name(), d)),
            }
            Ok(())
        }
        let g = Geometry::new(ins[0].shape(), ins[1].shape(), self.batch_dims, &self.index_dims);
        dispatch_num!(ins[0].dtype(), self.name(), run(self, &g, ins, &mut outs[0]))
    }
}

/// Checks that every start index is a rank-0 integer (the count is checked by the caller).
fn check_starts(op: &impl Op, ins: &[TensorType], starts: &[TensorType]) -> Result<(), TypeError> {
    for (d, t) in starts.iter().enumerate() {
        if !t.dtype.is_int() || t.rank() != 0 {
            return Err(check::err(op, ins, format!("expected start index {d} to be a rank-0 i32 or i64, got {t}")));
        }
    }
    Ok(())
}

impl Op for DynamicSlice {
    fn name(&self) -> &'static str {
        "dynamic_slice"
    }

    fn params(&self) -> String {
        format!("sizes={}", fmt_list(&self.sizes))
    }

    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        let Some(operand) = ins.first() else {
            return Err(check::err(self, ins, "expected an operand followed by one start index per dim"));
        };
        let rank = operand.rank();
        if ins.len() != 1 + rank {
            return Err(check::err(
                self,
                ins,
                format!("expected {} operands (the operand and one start index per dim)", 1 + rank),
            ));
        }
        if self.sizes.len() != rank {
            return Err(check::err(self, ins, format!("expected {rank} sizes (one per operand dim)")));
        }
        if let Some(d) = (0..rank).find(|&d| self.sizes[d] > operand.shape[d]) {
            return Err(check::err(
                self,
                ins,
                format!("slice size {} exceeds operand dim {d} of size {}", self.sizes[d], operand.shape[d]),
            ));
        }
        check_starts(self, ins, &ins[1..])?;
        Ok(vec![TensorType::new(operand.dtype, self.sizes.clone())])
    }

    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        fn run<T: Element>(op: &DynamicSlice, ins: &[&Tensor], out: &mut Tensor) -> Result<(), ExecError> {
            let x = ins[0];
            let starts = clamped_starts(op.name(), &ins[1..], x.shape(), &op.sizes)?;
            dynamic_slice_kernel(input::<T>(x)?, x.shape(), &starts, &op.sizes, output::<T>(out)?)
        }
        dispatch_any!(ins[0].dtype(), run(self, ins, &mut outs[0]))
    }
}

impl Op for DynamicUpdateSlice {
    fn name(&self) -> &'static str {
        "dynamic_update_slice"
    }

    fn params(&self) -> String {
        String::new()
    }

    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        if ins.len() < 2 {
            return Err(check::err(self, ins, "expected an operand, an update and one start index per dim"));
        }
        let (operand, update) = (&ins[0], &ins[1]);
        let rank = operand.rank();
        if update.dtype != operand.dtype {
            return Err(check::err(self, ins, "expected an update of the operand's dtype"));
        }
        if update.rank() != rank {
            return Err(check::err(self, ins, format!("expected an update of the operand's rank {rank}")));
        }
        if let Some(d) = (0..rank).find(|&d| update.shape[d] > operand.shape[d]) {
            return Err(check::err(
                self,
                ins,
                format!("update dim {d} of size {} exceeds the operand's {}", update.shape[d], operand.shape[d]),
            ));
        }
        if ins.len() != 2 + rank {
            return Err(check::err(
                self,
                ins,
                format!("expected {} operands (operand, update and one start index per dim)", 2 + rank),
            ));
        }
        check_starts(self, ins, &ins[2..])?;
        Ok(vec![operand.clone()])
    }

    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        fn run<T: Element>(name: &str, ins: &[&Tensor], out: &mut Tensor) -> Result<(), ExecError> {
            let (x, u) = (ins[0], ins[1]);
            let starts = clamped_starts(name, &ins[2..], x.shape(), u.shape())?;
            dynamic_update_kernel(input::<T>(x)?, input::<T>(u)?, x.shape(), &starts, u.shape(), output::<T>(out)?)
        }
        dispatch_any!(ins[0].dtype(), run(self.name(), ins, &mut outs[0]))
    }
}

impl Builder {
    /// Gathers slabs of `operand` at the index vectors in `indices` (see [`Gather`]).
    pub fn gather(
        &mut self,
        operand: Value,
        indices: Value,
        batch_dims: usize,
        index_dims: &[usize],
        mode: IndexMode,
    ) -> Result<Value, IrError> {
        self.emit1(Gather { batch_dims, index_dims: index_dims.to_vec(), mode }, &[operand, indices])
    }

    /// `operand` with `updates` added at the index vectors in `indices` (see [`ScatterAdd`]).
    pub fn scatter_add(
        &mut self,
        operand: Value,
        indices: Value,
        updates: Value,
        batch_dims: usize,
        index_dims: &[usize],
        mode: IndexMode,
    ) -> Result<Value, IrError> {
        self.emit1(ScatterAdd { batch_dims, index_dims: index_dims.to_vec(), mode }, &[operand, indices, updates])
    }

    /// The block of `sizes` starting at `starts` (rank-0 ints, clamped so the block fits).
    pub fn dynamic_slice(&mut self, x: Value, starts: &[Value], sizes: &[usize]) -> Result<Value, IrError> {
        let mut ins = Vec::with_capacity(1 + starts.len());
        ins.push(x);
        ins.extend_from_slice(starts);
        self.emit1(DynamicSlice { sizes: sizes.to_vec() }, &ins)
    }

    /// `x` with `update` written at `starts` (rank-0 ints, clamped so the update fits).
    pub fn dynamic_update_slice(&mut self, x: Value, update: Value, starts: &[Value]) -> Result<Value, IrError> {
        let mut ins = Vec::with_capacity(2 + starts.len());
        ins.push(x);
        ins.push(update);
        ins.extend_from_slice(starts);
        self.emit1(DynamicUpdateSlice, &ins)
    }
}

mod kernels;
mod rules;

pub(crate) use kernels::{dynamic_slice_eqn_kernel, dynamic_update_eqn_kernel, gather_eqn_kernel};
pub use kernels::{scatter_add_device_kernel, SCATTER_ROWS_MAX};
