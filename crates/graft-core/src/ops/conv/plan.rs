//! The plan of one `conv_general` call (derived from the shapes once per
//! call) and its im2col fills: per-dim index tables, affine runs, the
//! gather table of small images, the swapped plan.

use super::*;

/// Output rows (the last spatial dim) shorter than this fill im2col through
/// the per-plan gather table (`Plan::gather`); longer ones copy runs.
pub(super) const GATHER_ROW_MAX: usize = 16;

/// Most entries (`kprod * p`) of a plan's gather table (256 KiB).
pub(super) const GATHER_MAX: usize = 1 << 16;

/// The gather table of `Plan::gather`: per tap (row-major over `k_sp`) and
/// output position (row-major over `out_sp`), the input offset within a
/// channel, or `u32::MAX` where the tap reads padding or a dilation hole.
pub(super) fn gather_table(k_sp: &[usize], out_sp: &[usize], tables: &[Vec<isize>], in_strides: &[usize]) -> Vec<u32> {
    let s = out_sp.len();
    let (kprod, p) = (k_sp.iter().product::<usize>(), out_sp.iter().product::<usize>());
    let mut table = Vec::with_capacity(kprod * p);
    let mut tap = vec![0usize; s];
    for _ in 0..kprod {
        let mut pos = vec![0usize; s];
        for _ in 0..p {
            let mut off = Some(0usize);
            for d in 0..s {
                let i = tables[d][tap[d] * out_sp[d] + pos[d]];
                off = if i < 0 { None } else { off.map(|o| o + i as usize * in_strides[d]) };
            }
            // The caller checked that every offset (< in_size) fits below u32::MAX.
            table.push(off.map_or(u32::MAX, |o| o as u32));
            step_index(&mut pos, out_sp);
        }
        step_index(&mut tap, k_sp);
    }
    table
}

/// Fills one im2col row from one input channel `xc` through its slice of a
/// gather table (`Plan::gather`). Padding entries (`u32::MAX`) are past the
/// channel: `get` reads them as zero.
#[inline(always)]
pub(super) fn gather_row<T: Real>(xc: &[T], idx: &[u32], out: &mut [T]) {
    for (y, &i) in out.iter_mut().zip(idx) {
        *y = xc.get(i as usize).copied().unwrap_or_else(T::zero);
    }
}

/// A whole im2col matrix `col` (`[cg * kprod, p]`) through a gather table:
/// channel by channel, tap by tap, no index arithmetic per row. Run through
/// [`simd_loop`].
pub(super) struct GatherRows;

impl<T: Real> SimdLoop<(&[u32], &[T], &mut [T], usize, usize, usize)> for GatherRows {
    type Output = ();

    #[inline(always)]
    fn run((gather, xg, col, kprod, p, isz): (&[u32], &[T], &mut [T], usize, usize, usize)) {
        for (ch, rows) in col.chunks_mut(kprod * p).enumerate() {
            let xc = &xg[ch * isz..(ch + 1) * isz];
            for (idx, out) in gather.chunks(p).zip(rows.chunks_mut(p)) {
                gather_row(xc, idx, out);
            }
        }
    }
}

/// Im2col rows `first..` of `plan` into `col` (whole rows of `plan.p`);
/// `pos` is [`Plan::im2col_row`]'s scratch. Run through [`simd_loop`].
pub(super) struct Im2colRows;

impl<T: Real> SimdLoop<(&Plan, &[T], usize, &mut [T], &mut [usize])> for Im2colRows {
    type Output = ();

    #[inline(always)]
    fn run((plan, xg, first, col, pos): (&Plan, &[T], usize, &mut [T], &mut [usize])) {
        for (r, row) in col.chunks_mut(plan.p).enumerate() {
            plan.im2col_row(xg, first + r, row, pos);
        }
    }
}

/// An affine stretch of one im2col table row (see `Plan::runs`).
#[derive(Clone, Copy, Debug)]
pub(super) struct Run {
    lo: usize,
    hi: usize,
    start: usize,
    step: usize,
}

impl Run {
    /// The row as a run, if its valid entries are contiguous and affine.
    pub(super) fn of(row: &[isize]) -> Option<Run> {
        let Some(lo) = row.iter().position(|&i| i >= 0) else {
            return Some(Run { lo: 0, hi: 0, start: 0, step: 1 });
        };
        let hi = lo + row[lo..].iter().take_while(|&&i| i >= 0).count();
        if row[hi..].iter().any(|&i| i >= 0) {
            return None;
        }
        let step = if hi - lo > 1 { row[lo + 1] - row[lo] } else { 1 };
        let affine = step >= 1 && row[lo..hi].windows(2).all(|w| w[1] - w[0] == step);
        affine.then_some(Run { lo, hi, start: row[lo] as usize, step: step as usize })
    }
}

/// Everything the kernel needs, derived once per call from the shapes.
pub(super) struct Plan {
    /// Batch size.
    pub(super) n: usize,
    pub(super) groups: usize,
    /// Input channels per group.
    pub(super) cg: usize,
    /// Output channels per group.
    pub(super) og: usize,
    /// Input spatial dims.
    pub(super) in_sp: Vec<usize>,
    /// Row-major strides of the input spatial dims (within one channel).
    pub(super) in_strides: Vec<usize>,
    /// Elements per input channel.
    pub(super) in_size: usize,
    /// Output positions per output channel (product of `out_sp`).
    pub(super) p: usize,
    /// Kernel spatial sizes.
    pub(super) k_sp: Vec<usize>,
    /// Kernel taps per input channel (product of `k_sp`).
    pub(super) kprod: usize,
    /// Output spatial sizes.
    pub(super) out_sp: Vec<usize>,
    /// `tables[d][t * out_sp[d] + o]`: input index read by tap `t` at output
    /// position `o` along spatial dim `d`, or -1 for padding / dilation holes.
    pub(super) tables: Vec<Vec<isize>>,
    /// Per tap of the last spatial dim, its table row as one affine run when
    /// it is one (always without input dilation): positions `lo..hi` read
    /// `start + (o - lo) * step`, the rest are padding. Lets im2col copy
    /// whole runs instead of gathering element by element.
    pub(super) runs: Vec<Option<Run>>,
    /// `gather[tap * p + j]`: the offset within one input channel that `tap`
    /// reads at output position `j` (row-major over `out_sp`), or `u32::MAX`
    /// for padding and dilation holes. Built for small images only (see
    /// [`GATHER_ROW_MAX`]): there im2col rows are a few elements per output
    /// row, and walking `tables` per output row costs more than the copies,
    /// while one lookup per element costs the same whatever the geometry.
    pub(super) gather: Option<Vec<u32>>,
    /// The window maps output positions 1:1 onto the input (1x1 kernel,
    /// stride 1, no padding or input dilation): im2col would be a copy.
    pub(super) identity: bool,
    /// The same convolution with the roles of output positions and kernel
    /// taps swapped (see [`swapped_kernel`]), when that is the cheaper way
    /// to run it: ungrouped, with fewer output positions than taps.
    pub(super) swapped: Option<Box<Plan>>,
    /// Run as products on the undilated input and a gather of their sums
    /// (see [`gathered_kernel`]): ungrouped, input dilated (a transposed
    /// convolution, e.g. the input gradient of a strided one), fewer input
    /// positions than output positions per channel.
    pub(super) gathered: bool,
}

impl Plan {
    pub(super) fn new(c: &ConvGeneral, xs: &[usize], ws: &[usize], os: &[usize]) -> Plan {
        let mut plan = Plan::direct(c, xs, ws, os);
        let s = xs.len() - 2;
        plan.gathered =
            c.feature_group_count == 1 && s >= 1 && c.lhs_dilation.iter().any(|&d| d > 1) && plan.in_size < plan.p;
        if !plan.gathered && c.feature_group_count == 1 && s >= 1 && !plan.identity && plan.p < plan.kprod {
            // Output positions become taps (stride -> rhs_dilation) and taps
            // output positions (rhs_dilation -> stride): padded position
            // `o * stride + t * rhs_dilation - lo` is symmetric in the two.
            let swapped = ConvGeneral { strides: c.rhs_dilation.clone(), rhs_dilation: c.strides.clone(), ..c.clone() };
            let mut ws2 = ws[..2].to_vec();
            ws2.extend_from_slice(&os[2..]);
            let mut os2 = os[..2].to_vec();
            os2.extend_from_slice(&ws[2..]);
            plan.swapped = Some(Box::new(Plan::direct(&swapped, xs, &ws2, &os2)));
        }
        plan
    }

    /// The plan that runs the convolution as written (im2col per batch element).
    pub(super) fn direct(c: &ConvGeneral, xs: &[usize], ws: &[usize], os: &[usize]) -> Plan {
        let s = xs.len() - 2;
        let in_sp = xs[2..].to_vec();
        let k_sp = ws[2..].to_vec();
        let out_sp = os[2..].to_vec();
        let tables: Vec<Vec<isize>> = (0..s)
            .map(|d| {
                // i128: padding may be any i64, so `u` may not fit in i64.
                let (ld, rd, st) = (c.lhs_dilation[d] as i128, c.rhs_dilation[d] as i128, c.strides[d] as i128);
                let span = dilated(in_sp[d], c.lhs_dilation[d]) as i128;
                let mut t = Vec::with_capacity(k_sp[d] * out_sp[d]);
                for tap in 0..k_sp[d] as i128 {
                    for o in 0..out_sp[d] as i128 {
                        let u = o * st + tap * rd - c.padding[d].0 as i128;
                        t.push(if u < 0 || u >= span || u % ld != 0 { -1 } else { (u / ld) as isize });
                    }
                }
                t
            })
            .collect();
        let runs = match s.checked_sub(1) {
            Some(last) => tables[last].chunks(out_sp[last].max(1)).map(Run::of).collect(),
            None => Vec::new(),
        };
        let identity =
            (0..s).all(|d| k_sp[d] == 1 && c.strides[d] == 1 && c.padding[d] == (0, 0) && c.lhs_dilation[d] == 1);
        let in_strides = strides_of(&in_sp);
        let in_size: usize = in_sp.iter().product();
        let (kprod, p) = (k_sp.iter().product::<usize>(), out_sp.iter().product::<usize>());
        let small = out_sp.last().is_some_and(|&ol| ol < GATHER_ROW_MAX)
            && kprod.saturating_mul(p) <= GATHER_MAX
            && in_size < u32::MAX as usize;
        let gather = (small && !identity).then(|| gather_table(&k_sp, &out_sp, &tables, &in_strides));
        Plan {
            n: xs[0],
            in_sp,
            groups: c.feature_group_count,
            cg: ws[1],
            og: ws[0] / c.feature_group_count,
            in_strides,
            in_size,
            p,
            kprod,
            k_sp,
            out_sp,
            tables,
            runs,
            gather,
            identity,
            swapped: None,
            gathered: false,
        }
    }

    /// Whether [`wide_kernel`] can run this plan (a gather table, the
    /// window not the identity), its products are wide enough to gain and
    /// one batch element's alone would be narrow (under [`WIDE_P_MAX`]
    /// output positions).
    pub(super) fn wide(&self) -> bool {
        self.gather.is_some() && !self.identity && self.wide_chunk() * self.p >= WIDE_MIN && self.p < WIDE_P_MAX
    }

    /// Batch elements [`wide_kernel`] takes at once: as many as keep its
    /// im2col matrix within [`WIDE_CHUNK`], rounded down to a multiple of 8
    /// or a power of two, so that its pieces are [`fill_pieces`]' fixed-size
    /// moves (a chunk of 9 copied every 9-element piece with a `memcpy`
    /// call: 3 % of a CNN step).
    pub(super) fn wide_chunk(&self) -> usize {
        let c = (WIDE_CHUNK / (self.cg * self.kprod * self.p).max(1)).clamp(1, self.n.max(1));
        if c >= 8 {
            c - c % 8
        } else {
            1 << c.ilog2()
        }
    }

    /// Fills im2col row `row` (= channel * kprod + tap) from one group's input
    /// `xg` (`[cg, *in_sp]`). `out` has `p` elements. `pos` is scratch of
    /// two entries per spatial dim (rows are filled by the hundred thousand
    /// for a weight gradient: no allocation per row).
    #[inline(always)]
    pub(super) fn im2col_row<T: Real>(&self, xg: &[T], row: usize, out: &mut [T], pos: &mut [usize]) {
        let (ch, tap) = (row / self.kprod, row % self.kprod);
        let xc = &xg[ch * self.in_size..(ch + 1) * self.in_size];
        if let Some(gather) = &self.gather {
            gather_row(xc, &gather[tap * self.p..(tap + 1) * self.p], out);
            return;
        }
        let s = self.out_sp.len();
        let Some(last) = s.checked_sub(1) else {
            out[0] = xc[0]; // no spatial dims: the single "position" is the channel value
            return;
        };
        // `pos[s + d]`: start of dim `d`'s table row for this row's tap;
        // `pos[d]`: the current output position along `d`.
        let (pos, starts) = pos.split_at_mut(s);
        let mut t = tap;
        for d in (0..s).rev() {
            starts[d] = (t % self.k_sp[d]) * self.out_sp[d];
            t /= self.k_sp[d];
        }
        pos.fill(0);
        let ol = self.out_sp[last];
        let tap_last = starts[last] / ol.max(1);
        let inner = &self.tables[last][starts[last]..starts[last] + ol];
        let run = self.runs[tap_last];
        for orow in out.chunks_mut(ol) {
            // Offset of this run's outer coordinates, or None inside padding.
            let mut base = Some(0usize);
            for d in 0..last {
                let i = self.tables[d][starts[d] + pos[d]];
                base = if i < 0 { None } else { base.map(|b| b + i as usize * self.in_strides[d]) };
            }
            match base {
                None => orow.fill(T::zero()),
                Some(b) => match run {
                    Some(r) => {
                        orow[..r.lo].fill(T::zero());
                        orow[r.hi..].fill(T::zero());
                        let src = &xc[b + r.start..];
                        let dst = &mut orow[r.lo..r.hi];
                        if r.step == 1 {
                            dst.copy_from_slice(&src[..dst.len()]);
                        } else if let Some(last) = dst.len().checked_sub(1) {
                            // Whole chunks of `step` (no bounds check or
                            // counter per element; vectorises for step 2),
                            // then the last element.
                            let src = &src[..last * r.step + 1];
                            if r.step == 2 {
                                // The step as a constant (stride-2 convolutions).
                                for (y, pair) in dst[..last].iter_mut().zip(src.chunks_exact(2)) {
                                    *y = pair[0];
                                }
                            } else {
                                for (y, chunk) in dst[..last].iter_mut().zip(src.chunks_exact(r.step)) {
                                    *y = chunk[0];
                                }
                            }
                            dst[last] = src[last * r.step];
                        }
                    }
                    None => {
                        for (y, &i) in orow.iter_mut().zip(inner) {
                            *y = if i < 0 { T::zero() } else { xc[b + i as usize] };
                        }
                    }
                },
            }
            for d in (0..last).rev() {
                pos[d] += 1;
                if pos[d] < self.out_sp[d] {
                    break;
                }
                pos[d] = 0;
            }
        }
    }

    /// Fills the im2col matrix `col` (`[cg * kprod, p]`) of one group's input.
    pub(super) fn im2col<T: Real>(&self, xg: &[T], col: &mut [T], parallel: bool) {
        let scratch = || vec![0usize; 2 * self.out_sp.len()];
        let parallel = parallel && crate::ops::kernel::worth_parallel(col.len());
        if let (Some(gather), false) = (&self.gather, parallel) {
            simd_loop::<GatherRows, _>((gather.as_slice(), xg, col, self.kprod, self.p, self.in_size));
            return;
        }
        if parallel {
            col.par_chunks_mut(self.p).enumerate().for_each_init(scratch, |pos, (r, row)| {
                simd_loop::<Im2colRows, _>((self, xg, r, row, pos.as_mut_slice()))
            });
        } else {
            let mut pos = scratch();
            simd_loop::<Im2colRows, _>((self, xg, 0, col, pos.as_mut_slice()));
        }
    }

    /// Convolves one batch element: `x` is `[C, *in_sp]`, `out` `[O, *out_sp]`.
    /// `col` is scratch of `cg * kprod * p` elements (unused when `identity`).
    /// `parallel`: this call may use the whole pool (it is not itself inside
    /// a parallel batch loop).
    pub(super) fn one<T: Real>(&self, x: &[T], w: &[T], out: &mut [T], col: &mut [T], parallel: bool) {
        let kdim = self.cg * self.kprod;
        let gout = self.og * self.p;
        let per_group = self.og * kdim * self.p;
        if parallel && matches!(parallelism(self.groups, per_group), Parallelism::Batch { .. }) {
            // Many small per-group products (e.g. depthwise): split over groups.
            let col_len = col.len();
            out.par_chunks_mut(gout)
                .enumerate()
                .for_each_init(|| vec![T::zero(); col_len], |col, (g, og)| self.group(x, w, g, og, col, false));
        } else {
            for (g, og) in out.chunks_mut(gout).enumerate() {
                self.group(x, w, g, og, col, parallel);
            }
        }
    }

    /// Convolves group `g` of one batch element into `out` (`[og, *out_sp]`).
    pub(super) fn group<T: Real>(&self, x: &[T], w: &[T], g: usize, out: &mut [T], col: &mut [T], parallel: bool) {
        let kdim = self.cg * self.kprod;
        let (gin, gw) = (self.cg * self.in_size, self.og * kdim);
        let xg = &x[g * gin..(g + 1) * gin];
        let cols = if self.identity {
            MatRef { data: xg, rs: self.p, cs: 1 }
        } else {
            self.im2col(xg, col, parallel);
            MatRef { data: &*col, rs: self.p, cs: 1 }
        };
        let wg = MatRef { data: &w[g * gw..(g + 1) * gw], rs: kdim, cs: 1 };
        gemm_into(self.og, self.p, kdim, out, wg, cols, parallel);
    }
}
