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

// Kernel-IR forms (what the native loops and the GPU backend render).
//
// A gather is one point per output element: the element's slab origin
// and run offset come from its position (`Inst::Position`: batch and
// slab coordinates times the operand's strides), each index component is
// loaded through a strided index, resolved under the mode (clamped; `Fill`
// also tests the range and selects 0), scaled by its axis stride and
// added, and the operand is read there (`Inst::LoadAt`). The same
// elements as `gather_kernel`, so the result is bitwise the interpreter's.
//
// scatter_add on a device: one *row* per operand element (a row kernel
// whose `Reduce` walks the positions of the element's batch), summing the
// updates whose index vector resolves to that element (others contribute
// 0) and adding the sum to the operand. Why this form: it is deterministic
// (every element sums its positions in the row kernel's fixed order,
// whatever the scheduling: no atomics, and no float atomics exist in
// WGSL anyway) and needs nothing the kernel IR lacks; a sort of the
// positions by target would do less work but needs a device sort. The
// price is work proportional to elements x positions per batch (fine for
// the gradients of cross-entropy labels, embedding lookups of a few
// thousand rows and `take`; [`SCATTER_ROWS_MAX`] bounds it), and float
// results that are not the interpreter's bits: the interpreter adds in
// position order onto the operand, the row sums pairwise and then adds
// (both are exact sums of the same terms up to rounding). So this form is
// for devices only; the CPU keeps `scatter_elements`.

/// Most `elements x positions` a device scatter_add visits (2^28); larger
/// ones run on the host.
pub const SCATTER_ROWS_MAX: usize = 1 << 28;

/// Row-major strides as `isize`.
fn istrides(shape: &[usize]) -> Vec<isize> {
    strides_of(shape).into_iter().map(|s| s as isize).collect()
}

/// The kernel of a gather equation (i32 indices, an operand of at most
/// `i32::MAX` elements) and the values its arguments bind to, or `None`.
pub(crate) fn gather_eqn_kernel(
    func: &crate::ir::Func,
    eqn: &crate::ir::Eqn,
    name: &str,
) -> Option<(crate::kernel::Kernel, Vec<Value>)> {
    use crate::kernel::ir::{Access, Arg, Index, Inst, Kernel, Lit, Reg};
    use crate::ops::binary::{Binary, Compare};
    let crate::ops::Prim::Gather(g) = &eqn.prim else { return None };
    let (&x, &idx, &out) = (eqn.inputs.first()?, eqn.inputs.get(1)?, eqn.outputs.first()?);
    let (xt, it, ot) = (func.ty(x), func.ty(idx), func.ty(out));
    let n = ot.numel();
    if it.dtype != DType::I32 || xt.numel() == 0 || n == 0 || xt.numel() > i32::MAX as usize {
        return None;
    }
    let bd = g.batch_dims;
    let ni_dims = it.rank() - 1 - bd;
    let (xs, is) = (istrides(&xt.shape), istrides(&it.shape));
    let rest: Vec<usize> = (bd..xt.rank()).filter(|d| !g.index_dims.contains(d)).collect();
    // Over the output's dims [B..., I..., R...].
    let mut base = Vec::with_capacity(ot.rank());
    let mut comp = Vec::with_capacity(ot.rank());
    for d in 0..bd {
        base.push(xs[d]);
        comp.push(is[d]);
    }
    for j in 0..ni_dims {
        base.push(0);
        comp.push(is[bd + j]);
    }
    for &d in &rest {
        base.push(xs[d]);
        comp.push(0);
    }
    let dims = ot.shape.clone();
    let args = vec![
        Arg { dtype: xt.dtype, len: xt.numel(), access: Access::Read },
        Arg { dtype: DType::I32, len: it.numel(), access: Access::Read },
        Arg { dtype: ot.dtype, len: n, access: Access::Write },
    ];
    let mut body: Vec<Inst> = Vec::new();
    let push = |body: &mut Vec<Inst>, i: Inst| {
        body.push(i);
        (body.len() - 1) as Reg
    };
    let i32lit = |v: i64| Inst::Lit(Lit { dtype: DType::I32, bits: v as u64 });
    let mut addr = push(&mut body, Inst::Position(Index::Strided { dims: dims.clone(), strides: base, offset: 0 }));
    let zero = push(&mut body, i32lit(0));
    let mut inside: Option<Reg> = None;
    for (c, &d) in g.index_dims.iter().enumerate() {
        let index = Index::Strided { dims: dims.clone(), strides: comp.clone(), offset: c as isize };
        let raw = push(&mut body, Inst::Load { arg: 1, index });
        let top = push(&mut body, i32lit(xt.shape[d] as i64 - 1));
        let lo = push(&mut body, Inst::Binary(Binary::Max, raw, zero));
        let clamped = push(&mut body, Inst::Binary(Binary::Min, lo, top));
        if g.mode == IndexMode::Fill {
            let ok = push(&mut body, Inst::Compare(Compare::Eq, clamped, raw));
            inside = Some(match inside {
                None => ok,
                Some(a) => push(&mut body, Inst::Binary(Binary::And, a, ok)),
            });
        }
        let stride = push(&mut body, i32lit(xs[d] as i64));
        let off = push(&mut body, Inst::Binary(Binary::Mul, clamped, stride));
        addr = push(&mut body, Inst::Binary(Binary::Add, addr, off));
    }
    let mut value = push(&mut body, Inst::LoadAt { arg: 0, addr });
    if let Some(ok) = inside {
        let z = push(&mut body, Inst::Lit(Lit { dtype: xt.dtype, bits: 0 }));
        value = push(&mut body, Inst::Select(ok, value, z));
    }
    body.push(Inst::Store { arg: 2, value, index: Index::Point });
    let k = Kernel { name: name.to_string(), args, extent: n, body };
    crate::kernel::ir::verify(&k).ok()?;
    Some((k, vec![x, idx, out]))
}

/// The device form of an f32 or i32 scatter_add equation (see the comment
/// above: one row per operand element; not the interpreter's bits for f32,
/// exactly them for i32, whose wrapping sums do not depend on the order)
/// and the values its arguments bind to, or `None` (64-bit data, i64
/// indices, nothing to add, more than [`SCATTER_ROWS_MAX`] element-position
/// pairs).
pub fn scatter_add_device_kernel(
    func: &crate::ir::Func,
    eqn: &crate::ir::Eqn,
    name: &str,
) -> Option<(crate::kernel::Kernel, Vec<Value>)> {
    use crate::kernel::ir::{Access, Arg, Index, Inner, Inst, Kernel, Lit, Reduction, Reg};
    use crate::ops::binary::{Binary, Compare};
    use crate::ops::reduce::ReduceKind;
    let crate::ops::Prim::ScatterAdd(g) = &eqn.prim else { return None };
    let (&x, &idx, &upd, &out) = (eqn.inputs.first()?, eqn.inputs.get(1)?, eqn.inputs.get(2)?, eqn.outputs.first()?);
    let (xt, it, ut) = (func.ty(x), func.ty(idx), func.ty(upd));
    let bd = g.batch_dims;
    let ni: usize = it.shape[bd..it.rank() - 1].iter().product();
    let rows = xt.numel();
    // i32 sums wrap on the device as in the interpreter: any order gives its bits.
    let dt = xt.dtype;
    if !matches!(dt, DType::F32 | DType::I32) || it.dtype != DType::I32 || rows == 0 || ni == 0 {
        return None;
    }
    if rows.checked_mul(ni)? > SCATTER_ROWS_MAX {
        return None;
    }
    let kc = g.index_dims.len();
    let slab: usize = ut.shape[it.rank() - 1..].iter().product();
    let (is, us) = (istrides(&it.shape), istrides(&ut.shape));
    // Inner points over [S..., ni]: the row's operand coordinates, then the position.
    let mut dims = xt.shape.clone();
    dims.push(ni);
    let mut comp = vec![0isize; dims.len()];
    let mut ustr = vec![0isize; dims.len()];
    comp[..bd].copy_from_slice(&is[..bd]);
    ustr[..bd].copy_from_slice(&us[..bd]);
    comp[xt.rank()] = kc as isize;
    ustr[xt.rank()] = slab as isize;
    let nidims = it.rank() - 1 - bd;
    for (j, d) in (bd..xt.rank()).filter(|d| !g.index_dims.contains(d)).enumerate() {
        ustr[d] = us[bd + nidims + j];
    }
    let mut inner: Vec<Inst> = Vec::new();
    let push = |body: &mut Vec<Inst>, i: Inst| {
        body.push(i);
        (body.len() - 1) as Reg
    };
    let i32lit = |v: i64| Inst::Lit(Lit { dtype: DType::I32, bits: v as u64 });
    let zero = push(&mut inner, i32lit(0));
    let mut hit: Option<Reg> = None;
    for (c, &d) in g.index_dims.iter().enumerate() {
        let raw = push(
            &mut inner,
            Inst::Load {
                arg: 1,
                index: Index::Strided { dims: dims.clone(), strides: comp.clone(), offset: c as isize },
            },
        );
        let mut unit = vec![0isize; dims.len()];
        unit[d] = 1;
        let coord = push(&mut inner, Inst::Position(Index::Strided { dims: dims.clone(), strides: unit, offset: 0 }));
        // Fill: only an in-range index equals a coordinate; Clip: the clamped one.
        let target = match g.mode {
            IndexMode::Fill => raw,
            IndexMode::Clip => {
                let top = push(&mut inner, i32lit(xt.shape[d] as i64 - 1));
                let lo = push(&mut inner, Inst::Binary(Binary::Max, raw, zero));
                push(&mut inner, Inst::Binary(Binary::Min, lo, top))
            }
        };
        let h = push(&mut inner, Inst::Compare(Compare::Eq, target, coord));
        hit = Some(match hit {
            None => h,
            Some(a) => push(&mut inner, Inst::Binary(Binary::And, a, h)),
        });
    }
    let u =
        push(&mut inner, Inst::Load { arg: 2, index: Index::Strided { dims: dims.clone(), strides: ustr, offset: 0 } });
    let value = match hit {
        Some(h) => {
            let z = push(&mut inner, Inst::Lit(Lit { dtype: dt, bits: 0 }));
            push(&mut inner, Inst::Select(h, u, z))
        }
        None => u,
    };
    let body = vec![
        Inst::Reduce(Box::new(Reduction { kind: ReduceKind::Sum, inner: Inner { len: ni, body: inner }, value })),
        Inst::Load { arg: 0, index: Index::Point },
        Inst::Binary(Binary::Add, 1, 0),
        Inst::Store { arg: 3, value: 2, index: Index::Point },
    ];
    let args = vec![
        Arg { dtype: dt, len: rows, access: Access::Read },
        Arg { dtype: DType::I32, len: it.numel(), access: Access::Read },
        Arg { dtype: dt, len: ut.numel(), access: Access::Read },
        Arg { dtype: dt, len: rows, access: Access::Write },
    ];
    let k = Kernel { name: name.to_string(), args, extent: rows, body };
    crate::kernel::ir::verify(&k).ok()?;
    Some((k, vec![x, idx, upd, out]))
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

// Derivative rules. All four ops are linear in their data operands (the
// indices are integers and carry no tangent); each transposes into the
// other op of its pair with the same mode and geometry, so the clip/fill
// semantics stay consistent between forward and reverse mode.
mod diff {
    use super::*;
    use crate::ad::helpers::or_zeros;
    use crate::ad::{Diff, JvpCx, TransposeCx};

    impl Diff for Gather {
        fn jvp(&self, b: &mut Builder, cx: &JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
            let idx = cx.primals[1];
            Ok(vec![cx.tangents[0]
                .map(|t| b.gather(t, idx, self.batch_dims, &self.index_dims, self.mode))
                .transpose()?])
        }
        fn transpose(&self, b: &mut Builder, cx: &TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
            let Some(ct) = cx.cts[0] else { return Ok(vec![None, None]) };
            let idx = cx.primal("gather", 1)?;
            let zeros = b.zeros(&cx.in_types[0])?;
            Ok(vec![Some(b.scatter_add(zeros, idx, ct, self.batch_dims, &self.index_dims, self.mode)?), None])
        }
    }

    impl Diff for ScatterAdd {
        fn jvp(&self, b: &mut Builder, cx: &JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
            let (op, idx, upd) = (cx.primals[0], cx.primals[1], cx.primals[2]);
            if cx.tangents[0].is_none() && cx.tangents[2].is_none() {
                return Ok(vec![None]);
            }
            let t_op = or_zeros(b, cx.tangents[0], op)?;
            let t_upd = or_zeros(b, cx.tangents[2], upd)?;
            Ok(vec![Some(b.scatter_add(t_op, idx, t_upd, self.batch_dims, &self.index_dims, self.mode)?)])
        }
        fn transpose(&self, b: &mut Builder, cx: &TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
            let Some(ct) = cx.cts[0] else { return Ok(vec![None, None, None]) };
            let idx = cx.primal("scatter_add", 1)?;
            let op_bar = if cx.is_linear(0) { Some(ct) } else { None };
            let upd_bar = if cx.is_linear(2) {
                Some(b.gather(ct, idx, self.batch_dims, &self.index_dims, self.mode)?)
            } else {
                None
            };
            Ok(vec![op_bar, None, upd_bar])
        }
    }

    impl Diff for DynamicSlice {
        fn jvp(&self, b: &mut Builder, cx: &JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
            let starts = &cx.primals[1..];
            Ok(vec![cx.tangents[0].map(|t| b.dynamic_slice(t, starts, &self.sizes)).transpose()?])
        }
        fn transpose(&self, b: &mut Builder, cx: &TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
            let mut res = vec![None; cx.inputs.len()];
            if let Some(ct) = cx.cts[0] {
                let starts: Vec<Value> =
                    (1..cx.inputs.len()).map(|i| cx.primal("dynamic_slice", i)).collect::<Result<_, _>>()?;
                let zeros = b.zeros(&cx.in_types[0])?;
                res[0] = Some(b.dynamic_update_slice(zeros, ct, &starts)?);
            }
            Ok(res)
        }
    }

    impl Diff for DynamicUpdateSlice {
        fn jvp(&self, b: &mut Builder, cx: &JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
            if cx.tangents[0].is_none() && cx.tangents[1].is_none() {
                return Ok(vec![None]);
            }
            let t_op = or_zeros(b, cx.tangents[0], cx.primals[0])?;
            let t_upd = or_zeros(b, cx.tangents[1], cx.primals[1])?;
            Ok(vec![Some(b.dynamic_update_slice(t_op, t_upd, &cx.primals[2..])?)])
        }
        // The operand's cotangent is ct with the updated window zeroed; the
        // update's is that window of ct (the same clamped starts apply).
        fn transpose(&self, b: &mut Builder, cx: &TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
            let mut res = vec![None; cx.inputs.len()];
            let Some(ct) = cx.cts[0] else { return Ok(res) };
            let starts: Vec<Value> =
                (2..cx.inputs.len()).map(|i| cx.primal("dynamic_update_slice", i)).collect::<Result<_, _>>()?;
            if cx.is_linear(0) {
                let z = b.zeros(&cx.in_types[1])?;
                res[0] = Some(b.dynamic_update_slice(ct, z, &starts)?);
            }
            if cx.is_linear(1) {
                res[1] = Some(b.dynamic_slice(ct, &starts, &cx.in_types[1].shape)?);
            }
            Ok(res)
        }
    }
}

// Batching rules. gather/scatter_add use their `batch_dims` parameter: the
// batch dims of the operands go to the front and `batch_dims` grows by one.
mod batching {
    use super::*;
    use crate::batch::helpers::{all_to_front, bdim_to_front, move_bdim};
    use crate::batch::{Batch, BatchCx, Batched};

    impl Batch for Gather {
        fn batch(&self, b: &mut Builder, cx: &BatchCx<'_>) -> Result<Batched, IrError> {
            // Shared operand, no batch dims: the indices' batch dim is just
            // one more index position (`I...`), so nothing is materialized.
            if let (None, Some(id), 0) = (cx.bdims[0], cx.bdims[1], self.batch_dims) {
                let idx = move_bdim(b, cx.args[1], id, 0)?;
                return Ok(vec![(b.emit1(self.clone(), &[cx.args[0], idx])?, Some(0))]);
            }
            // Batched operand, shared indices, batch dim outside the shared
            // leading dims: the batch dim is one more sliced (non-indexed)
            // axis, so the same gather runs with the index axes renumbered
            // and nothing moves or is broadcast (rows of a `[V, B, ..]`
            // tangent are copied whole).
            if let (Some(d), None) = (cx.bdims[0], cx.bdims[1]) {
                if d >= self.batch_dims {
                    let index_dims: Vec<usize> = self.index_dims.iter().map(|&k| k + usize::from(k >= d)).collect();
                    let n_i = b.ty(cx.args[1])?.rank() - self.batch_dims - 1;
                    let before = (self.batch_dims..d).filter(|a| !index_dims.contains(a)).count();
                    let op = Gather { batch_dims: self.batch_dims, index_dims, mode: self.mode };
                    return Ok(vec![(b.emit1(op, cx.args)?, Some(self.batch_dims + n_i + before))]);
                }
            }
            let args = all_to_front(b, cx)?;
            let op = Gather {
                batch_dims: self.batch_dims + 1,
                index_dims: self.index_dims.iter().map(|d| d + 1).collect(),
                mode: self.mode,
            };
            Ok(vec![(b.emit1(op, &args)?, Some(0))])
        }
    }

    impl Batch for ScatterAdd {
        fn batch(&self, b: &mut Builder, cx: &BatchCx<'_>) -> Result<Batched, IrError> {
            let args = all_to_front(b, cx)?;
            let op = ScatterAdd {
                batch_dims: self.batch_dims + 1,
                index_dims: self.index_dims.iter().map(|d| d + 1).collect(),
                mode: self.mode,
            };
            Ok(vec![(b.emit1(op, &args)?, Some(0))])
        }
    }

    /// Index vectors `[size, sizes..., r]` (i64) of every position of a
    /// block of `sizes` at per-example starts (clamped like dynamic_slice
    /// into `[0, full - sizes]`), for a gather/scatter over the batch.
    fn block_indices(
        b: &mut Builder,
        starts: &[Value],
        bdims: &[Option<usize>],
        full: &[usize],
        sizes: &[usize],
        size: usize,
    ) -> Result<Value, IrError> {
        let mut shape = vec![size];
        shape.extend_from_slice(sizes);
        let mut col_shape = shape.clone();
        col_shape.push(1);
        let mut cols = Vec::with_capacity(starts.len());
        for (d, (&s, &sd)) in starts.iter().zip(bdims).enumerate() {
            let s = b.convert(s, DType::I64)?;
            let s = bdim_to_front(b, s, sd, size)?;
            let lo = b.full(0.0, &TensorType::new(DType::I64, vec![size]))?;
            let hi = b.full((full[d] - sizes[d]) as f64, &TensorType::new(DType::I64, vec![size]))?;
            let s = b.max(s, lo)?;
            let s = b.min(s, hi)?;
            let sb = b.broadcast_in_dim(s, &shape, &[0])?;
            let io = b.iota(DType::I64, &shape, d + 1)?;
            let ix = b.add(sb, io)?;
            cols.push(b.reshape(ix, &col_shape)?);
        }
        b.concatenate(&cols, shape.len())
    }

    // Batched starts: the block is gathered at per-example index vectors
    // (one per block position), so there is still no loop over the batch.
    impl Batch for DynamicSlice {
        fn batch(&self, b: &mut Builder, cx: &BatchCx<'_>) -> Result<Batched, IrError> {
            let rank = self.sizes.len();
            if cx.bdims[1..].iter().all(Option::is_none) {
                let d = cx.bdims[0].expect("internal error: a batching rule runs only with a batched operand");
                let dt = cx.args.get(1).map(|&s| b.ty(s).map(|t| t.dtype)).transpose()?.unwrap_or(DType::I32);
                let zero = b.scalar(0.0, dt)?;
                let mut starts = cx.args[1..].to_vec();
                starts.insert(d, zero);
                let mut sizes = self.sizes.clone();
                sizes.insert(d, cx.size);
                return Ok(vec![(b.dynamic_slice(cx.args[0], &starts, &sizes)?, Some(d))]);
            }
            let (x, full) = match cx.bdims[0] {
                Some(d) => {
                    let x = move_bdim(b, cx.args[0], d, 0)?;
                    let full = b.ty(x)?.shape[1..].to_vec();
                    (x, full)
                }
                None => (cx.args[0], b.ty(cx.args[0])?.shape.clone()),
            };
            let idx = block_indices(b, &cx.args[1..], &cx.bdims[1..], &full, &self.sizes, cx.size)?;
            let out = match cx.bdims[0] {
                Some(_) => b.gather(x, idx, 1, &(1..=rank).collect::<Vec<_>>(), IndexMode::Clip)?,
                None => b.gather(x, idx, 0, &(0..rank).collect::<Vec<_>>(), IndexMode::Clip)?,
            };
            Ok(vec![(out, Some(0))])
        }
    }

    // Batched starts: scatter the update into zeros at the block's index
    // vectors and choose it where a scattered count of ones is positive, so
    // the written values are exactly the update's (no `x + (u - x)` rounding).
    impl Batch for DynamicUpdateSlice {
        fn batch(&self, b: &mut Builder, cx: &BatchCx<'_>) -> Result<Batched, IrError> {
            let data = BatchCx { args: &cx.args[..2], bdims: &cx.bdims[..2], size: cx.size, axis: cx.axis };
            let args = all_to_front(b, &data)?;
            let (x, u) = (args[0], args[1]);
            if cx.bdims[2..].iter().all(Option::is_none) {
                let dt = cx.args.get(2).map(|&s| b.ty(s).map(|t| t.dtype)).transpose()?.unwrap_or(DType::I32);
                let zero = b.scalar(0.0, dt)?;
                let mut starts = cx.args[2..].to_vec();
                starts.insert(0, zero);
                return Ok(vec![(b.dynamic_update_slice(x, u, &starts)?, Some(0))]);
            }
            let (xt, ut) = (b.ty(x)?.clone(), b.ty(u)?.clone());
            let rank = xt.rank() - 1;
            let idx = block_indices(b, &cx.args[2..], &cx.bdims[2..], &xt.shape[1..], &ut.shape[1..], cx.size)?;
            let dims: Vec<usize> = (1..=rank).collect();
            let zeros = b.zeros(&xt)?;
            let scattered = b.scatter_add(zeros, idx, u, 1, &dims, IndexMode::Clip)?;
            let count0 = b.zeros(&TensorType::new(DType::I32, xt.shape.clone()))?;
            let ones = b.ones(&TensorType::new(DType::I32, ut.shape.clone()))?;
            let count = b.scatter_add(count0, idx, ones, 1, &dims, IndexMode::Clip)?;
            let zi = b.zeros(&TensorType::new(DType::I32, xt.shape.clone()))?;
            let mask = b.gt(count, zi)?;
            Ok(vec![(b.select(mask, scattered, x)?, Some(0))])
        }
    }
}
