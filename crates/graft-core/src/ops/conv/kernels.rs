//! The convolution's CPU kernels: the canonical im2col-and-GEMM form, the
//! swapped, wide and gathered forms, the weight gradient's own kernel, and
//! their helpers (transposes, per-thread scratch). Each gives every output
//! element one fixed accumulation order, whatever the thread count.

use super::*;
use crate::ops::tiles::{put_scratch, take_scratch, transpose_into};

pub(super) fn conv_kernel<T: Real>(
    c: &ConvGeneral,
    plan: &Plan,
    x: &Tensor,
    w: &Tensor,
    o: &mut Tensor,
) -> Result<(), ExecError> {
    let (x, w, o) = (input::<T>(x)?, input::<T>(w)?, output::<T>(o)?);
    let l = c.layout;
    if l.is_canonical() {
        canonical_kernel(plan, x, w, o);
    } else if l == ConvLayout::WEIGHT_GRAD && plan.groups == 1 {
        weight_grad_kernel(c, plan, x, w, o);
    } else {
        // Stored `[a, b, ...]` operands copied to the canonical `[b, a, ...]`.
        use std::borrow::Cow;
        let per_w = plan.og * plan.groups;
        let xc = if l.lhs_cn {
            Cow::Owned(swap_leading(x, plan.groups * plan.cg, plan.n, plan.in_size))
        } else {
            Cow::Borrowed(x)
        };
        let wc = if l.rhs_io { Cow::Owned(swap_leading(w, plan.cg, per_w, plan.kprod)) } else { Cow::Borrowed(w) };
        if l.out_cn {
            let mut oc = vec![T::zero(); o.len()];
            canonical_kernel(plan, &xc, &wc, &mut oc);
            o.copy_from_slice(&swap_leading(&oc, plan.n, per_w, plan.p));
        } else {
            canonical_kernel(plan, &xc, &wc, o);
        }
    }
    Ok(())
}

/// `src` read as `[a, b, inner]` row-major, written as `[b, a, inner]`.
pub(super) fn swap_leading<T: Copy>(src: &[T], a: usize, b: usize, inner: usize) -> Vec<T> {
    let mut dst = Vec::with_capacity(src.len());
    for j in 0..b {
        for i in 0..a {
            let at = (i * b + j) * inner;
            dst.extend_from_slice(&src[at..at + inner]);
        }
    }
    dst
}

/// The weight gradient in its own layout ([`ConvLayout::WEIGHT_GRAD`],
/// ungrouped): the lhs is the forward input `x: [N, C, *in]`, the rhs the
/// forward output's cotangent `ct: [N, O, *out]` and the result `dw: [O, C,
/// *kernel]`. Canonically it is a convolution over `C` images of `N`
/// channels with the cotangent as an `[O, N, *out]` kernel; here it is run
/// as the forward convolution sees it: `dw[O, (C, tap)] = sum_n ct[n][O, P]
/// im2col(x[n])^T`, where `im2col(x[n])` (`[(C, tap), P]`) is the forward
/// matrix, built by the plan of the forward convolution (the roles of taps
/// and output positions swapped back: `stride <-> rhs_dilation`). No
/// operand is transposed, and each product is `C * taps` columns wide
/// whatever the image size. The batch is summed in order `n = 0, 1, ...`
/// (each product accumulated onto the previous), a fixed order whatever
/// the thread count.
pub(super) fn weight_grad_kernel<T: Real>(c: &ConvGeneral, plan: &Plan, x: &[T], ct: &[T], dw: &mut [T]) {
    // Canonically: images = C, channels = N, taps = prod(out), positions = prod(kernel).
    let (chans, batch, outs) = (plan.n, plan.cg, plan.og);
    let fwd = ConvGeneral {
        strides: c.rhs_dilation.clone(),
        rhs_dilation: c.strides.clone(),
        layout: ConvLayout::CANONICAL,
        ..c.clone()
    };
    let mut xs = vec![batch, chans];
    xs.extend_from_slice(&plan.in_sp);
    let mut ws = vec![outs, chans];
    ws.extend_from_slice(&plan.out_sp);
    let mut os = vec![batch, outs];
    os.extend_from_slice(&plan.k_sp);
    let fp = Plan::direct(&fwd, &xs, &ws, &os);
    let (kdim, p, per_x) = (chans * fp.kprod, fp.p, chans * fp.in_size);
    if batch == 0 || p == 0 {
        dw.fill(T::zero());
        return;
    }
    // Batch elements in fixed chunks (by shape only): each chunk's products
    // accumulate in order into its partial sum, chunks run in parallel, and
    // the partials are added in chunk order, so the bits do not depend on
    // the thread count.
    let chunks = batch.div_ceil(WEIGHT_GRAD_CHUNK);
    let per_dw = dw.len();
    let chunk_sum = |c: usize, acc: &mut [T]| {
        let mut col = if fp.identity { Vec::new() } else { take_scratch::<T>(kdim * p) };
        let first = c * WEIGHT_GRAD_CHUNK;
        for n in first..(first + WEIGHT_GRAD_CHUNK).min(batch) {
            let xn = &x[n * per_x..(n + 1) * per_x];
            let cols = if fp.identity {
                xn
            } else {
                let col = &mut col[..kdim * p];
                fp.im2col(xn, col, chunks == 1);
                &*col
            };
            let a = MatRef { data: &ct[n * outs * p..(n + 1) * outs * p], rs: p, cs: 1 };
            let b = MatRef { data: cols, rs: 1, cs: p };
            if n == first {
                gemm_into(outs, kdim, p, acc, a, b, chunks == 1);
            } else {
                gemm_acc_into(outs, kdim, p, acc, a, b, chunks == 1);
            }
        }
        if !fp.identity {
            put_scratch(col);
        }
    };
    if chunks == 1 {
        chunk_sum(0, dw);
        return;
    }
    let mut partials = vec![T::zero(); chunks * per_dw];
    let flops = outs * kdim * p * batch;
    if crate::ops::kernel::worth_parallel(flops / 8) {
        partials.par_chunks_mut(per_dw).enumerate().for_each(|(c, acc)| chunk_sum(c, acc));
    } else {
        partials.chunks_mut(per_dw).enumerate().for_each(|(c, acc)| chunk_sum(c, acc));
    }
    dw.copy_from_slice(&partials[..per_dw]);
    for part in partials[per_dw..].chunks(per_dw) {
        for (y, &v) in dw.iter_mut().zip(part) {
            *y = *y + v;
        }
    }
}

/// Batch elements whose weight-gradient products one task accumulates
/// ([`weight_grad_kernel`]); the chunks' partial sums are added after.
pub(super) const WEIGHT_GRAD_CHUNK: usize = 8;

/// Runs the convolution in the canonical layout.
pub(super) fn canonical_kernel<T: Real>(plan: &Plan, x: &[T], w: &[T], o: &mut [T]) {
    let per_out = plan.groups * plan.og * plan.p;
    if o.is_empty() {
        return;
    }
    if let Some(sw) = &plan.swapped {
        if plan.wide() {
            wide_kernel(plan, x, w, o);
        } else {
            swapped_kernel(plan, sw, x, w, o);
        }
        return;
    }
    if plan.gathered {
        gathered_kernel(plan, x, w, o);
        return;
    }
    let flops = plan.groups * plan.og * plan.cg * plan.kprod * plan.p;
    let serial = parallelism(plan.n, flops) == Parallelism::Serial;
    if serial && plan.groups == 1 && plan.wide() {
        wide_kernel(plan, x, w, o);
        return;
    }
    let per_in = plan.groups * plan.cg * plan.in_size;
    let col_len = if plan.identity { 0 } else { plan.cg * plan.kprod * plan.p };
    match parallelism(plan.n, flops) {
        Parallelism::Batch { items } => o.par_chunks_mut(items * per_out).enumerate().for_each(|(t, chunk)| {
            let mut col = vec![T::zero(); col_len];
            for (i, ob) in chunk.chunks_mut(per_out).enumerate() {
                let b = t * items + i;
                plan.one(&x[b * per_in..(b + 1) * per_in], w, ob, &mut col, false);
            }
        }),
        s => {
            let mut col = vec![T::zero(); col_len];
            for (b, ob) in o.chunks_mut(per_out).enumerate() {
                plan.one(&x[b * per_in..(b + 1) * per_in], w, ob, &mut col, s == Parallelism::Inner);
            }
        }
    }
}

/// Elements of the swapped im2col matrix built at once (a chunk of batch
/// elements): 32 MiB of f32.
pub(super) const SWAPPED_CHUNK: usize = 8 << 20;

/// Runs an ungrouped convolution with few output positions and many taps
/// (a weight gradient: the "kernel" is the output cotangent, its taps are
/// the forward output positions) with the roles of positions and taps
/// swapped. Plain im2col would fill `C * kprod` rows of only `p` elements
/// for every batch element and multiply by a matrix `p` columns wide;
/// here, for a chunk of batch elements, row `(b, P)` of `cols` holds, for
/// every input channel `c` and tap `T`, the input element that tap `T`
/// reads at output position `P` (rows of `kprod` elements, filled by the
/// swapped plan `sw`, whose positions are the taps), and one GEMM
/// `w[O, (c, T)] x cols^T` gives `out'[O, (b, P)]`, moved to `[b, O, P]`.
/// Every output element is one dot product over `(c, T)` in a fixed
/// order whatever the chunking and the thread count.
pub(super) fn swapped_kernel<T: Real>(plan: &Plan, sw: &Plan, x: &[T], w: &[T], o: &mut [T]) {
    let (cin, kprod, p, og) = (plan.cg, plan.kprod, plan.p, plan.og);
    let kdim = cin * kprod;
    let per_in = cin * plan.in_size;
    let per_b = p * kdim;
    let chunk = (SWAPPED_CHUNK / per_b.max(1)).clamp(1, plan.n);
    let mut cols = vec![T::zero(); chunk * per_b];
    let mut tmp = vec![T::zero(); og * chunk * p];
    for b0 in (0..plan.n).step_by(chunk) {
        let nb = chunk.min(plan.n - b0);
        let cols = &mut cols[..nb * per_b];
        // Row (b, P, c) of kprod elements = swapped im2col row c * p + P of batch element b.
        let fill = |pos: &mut Vec<usize>, (r, row): (usize, &mut [T])| {
            let (b, rest) = (r / (p * cin), r % (p * cin));
            let (pp, c) = (rest / cin, rest % cin);
            let xb = &x[(b0 + b) * per_in..(b0 + b + 1) * per_in];
            sw.im2col_row(xb, c * p + pp, row, pos);
        };
        let scratch = || vec![0usize; 2 * plan.out_sp.len()];
        if crate::ops::kernel::worth_parallel(cols.len()) {
            cols.par_chunks_mut(kprod).enumerate().for_each_init(scratch, fill);
        } else if let Some(gather) = &sw.gather {
            // The same rows in order, without index arithmetic per row: the
            // swapped plan's tap `P` is the forward output position.
            let xs = &x[b0 * per_in..(b0 + nb) * per_in];
            simd_loop::<SwappedRows, _>((gather.as_slice(), xs, cols, cin, kprod, plan.in_size));
        } else {
            let mut pos = scratch();
            cols.chunks_mut(kprod).enumerate().for_each(|r| fill(&mut pos, r));
        }
        let tmp = &mut tmp[..og * nb * p];
        let a = MatRef { data: w, rs: kdim, cs: 1 };
        let bt = MatRef { data: &*cols, rs: 1, cs: kdim };
        gemm_into(og, nb * p, kdim, tmp, a, bt, true);
        for (oc, trow) in tmp.chunks(nb * p).enumerate() {
            for (b, tb) in trow.chunks(p).enumerate() {
                let at = ((b0 + b) * og + oc) * p;
                o[at..at + p].copy_from_slice(tb);
            }
        }
    }
}

/// [`swapped_kernel`]'s rows for a chunk of batch elements `xs` through the
/// swapped plan's gather table: row `(b, P, c)` holds the `kprod` inputs of
/// channel `c` that the taps read at forward output position `P` (the
/// swapped plan's tap). Run through [`simd_loop`].
pub(super) struct SwappedRows;

impl<T: Real> SimdLoop<(&[u32], &[T], &mut [T], usize, usize, usize)> for SwappedRows {
    type Output = ();

    #[inline(always)]
    fn run((gather, xs, cols, cin, kprod, isz): (&[u32], &[T], &mut [T], usize, usize, usize)) {
        let mut rows = cols.chunks_mut(kprod);
        for xb in xs.chunks(cin * isz) {
            for idx in gather.chunks(kprod) {
                for (c, row) in rows.by_ref().take(cin).enumerate() {
                    gather_row(&xb[c * isz..(c + 1) * isz], idx, row);
                }
            }
        }
    }
}

/// Elements of the im2col matrix [`wide_kernel`] builds at once (1 MiB of
/// f32: it stays in L2 while the product reads it).
pub(super) const WIDE_CHUNK: usize = 1 << 18;

/// Fewest product columns (`nb * p`) for which [`wide_kernel`] beats the
/// swapped form: with narrower rows `gemm` packs many short rows.
pub(super) const WIDE_MIN: usize = 32;

/// Output positions from which one product per batch element is wide
/// enough by itself and [`wide_kernel`]'s two transposes no longer pay:
/// a CNN step's stride-2 convolution to 14 x 14 (`p` = 196) took 3.41 ms
/// with it and 3.16 ms without (docs/PERFORMANCE.md, session 28); a
/// 28 x 28 one is level either way.
pub(super) const WIDE_P_MAX: usize = 128;

/// Runs an ungrouped convolution of small images whose plan has a gather
/// table with the batch in the product's columns: for a chunk of `nb` batch
/// elements, the input is transposed to `[c, i, b]`, so that im2col row
/// `(c, tap)` (`[cg * kprod, p * nb]`) is `p` contiguous copies of `nb`
/// elements (or zeros where the tap reads padding), one GEMM
/// `w[O, (c, tap)] x cols` gives `[O, (P, b)]`, moved to `[b, O, P]`. This is what a weight gradient wants (few output
/// positions, many taps: per batch element the product would be only `p`
/// columns wide, and the swapped form's transposed operand is packed by
/// `gemm` element by element at a stride of `cg * kprod`). Every output
/// element is one dot product over `(c, tap)` in `gemm`'s order, which
/// does not depend on the chunking or the thread count (the chunk size
/// depends on the shapes only).
pub(super) fn wide_kernel<T: Real>(plan: &Plan, x: &[T], w: &[T], o: &mut [T]) {
    let (cin, kprod, p, og, isz) = (plan.cg, plan.kprod, plan.p, plan.og, plan.in_size);
    let kdim = cin * kprod;
    let per_in = cin * isz;
    let chunk = plan.wide_chunk();
    // The buffers are overwritten before they are read: reused per thread
    // (zeroing a fresh megabyte cost 6% of a convolution).
    let mut xt = take_scratch::<T>(per_in * chunk);
    let mut cols = take_scratch::<T>(kdim * chunk * p);
    let mut tmp = take_scratch::<T>(og * chunk * p);
    for b0 in (0..plan.n).step_by(chunk) {
        let nb = chunk.min(plan.n - b0);
        let width = nb * p;
        // The chunk's input with the batch innermost, `[c, i, b]`: the nb
        // elements an im2col entry (c, tap, P) takes from the batch
        // elements are then one contiguous copy.
        let xt = &mut xt[..per_in * nb];
        transpose_into(&x[b0 * per_in..(b0 + nb) * per_in], nb, per_in, nb, xt);
        let xt = &*xt;
        let cols = &mut cols[..kdim * width];
        if crate::ops::kernel::worth_parallel(cols.len()) {
            cols.par_chunks_mut(width)
                .enumerate()
                .for_each(|(r, row)| simd_loop::<WideRows, _>((plan, xt, nb, r, row)));
        } else {
            simd_loop::<WideRows, _>((plan, xt, nb, 0, cols));
        }
        let tmp = &mut tmp[..og * width];
        let a = MatRef { data: w, rs: kdim, cs: 1 };
        let bm = MatRef { data: &*cols, rs: width, cs: 1 };
        gemm_into(og, width, kdim, tmp, a, bm, true);
        // [O, (P, b)] -> [b, O, P]: per output channel a `p x nb` transpose
        // into rows `og * p` apart.
        let ob = &mut o[b0 * og * p..(b0 + nb) * og * p];
        for (oc, trow) in tmp.chunks(width).enumerate() {
            transpose_into(trow, p, nb, og * p, &mut ob[oc * p..]);
        }
    }
    put_scratch(xt);
    put_scratch(cols);
    put_scratch(tmp);
}

/// Rows `first..` of [`wide_kernel`]'s im2col matrix (row `(c, tap)`,
/// column `(P, b)`; `cols` holds whole rows of `p * nb`) from the chunk's
/// input `xt` (`[c, i, b]`). Run through [`simd_loop`].
pub(super) struct WideRows;

impl<T: Real> SimdLoop<(&Plan, &[T], usize, usize, &mut [T])> for WideRows {
    type Output = ();

    #[inline(always)]
    fn run((plan, xt, nb, first, cols): (&Plan, &[T], usize, usize, &mut [T])) {
        let Some(gather) = &plan.gather else {
            unreachable!("wide_kernel runs only plans with a gather table (Plan::wide)")
        };
        let (kprod, p, isz) = (plan.kprod, plan.p, plan.in_size);
        for (k, row) in cols.chunks_mut(p * nb).enumerate() {
            let (c, tap) = ((first + k) / kprod, (first + k) % kprod);
            let idx = &gather[tap * p..(tap + 1) * p];
            match nb {
                1 => fill_pieces::<T, 1>(row, idx, &xt[c * isz..(c + 1) * isz], isz),
                2 => fill_pieces::<T, 2>(row, idx, &xt[c * isz * 2..(c + 1) * isz * 2], isz),
                4 => fill_pieces::<T, 4>(row, idx, &xt[c * isz * 4..(c + 1) * isz * 4], isz),
                8 => fill_pieces::<T, 8>(row, idx, &xt[c * isz * 8..(c + 1) * isz * 8], isz),
                _ => {
                    for (piece, &src) in row.chunks_mut(nb).zip(idx) {
                        let src = src as usize;
                        if src < isz {
                            let at = (c * isz + src) * nb;
                            piece.copy_from_slice(&xt[at..at + nb]);
                        } else {
                            piece.fill(T::zero());
                        }
                    }
                }
            }
        }
    }
}

/// One im2col row of [`wide_kernel`] for a batch chunk of `NB` elements:
/// piece `k` is the `NB` elements of input position `idx[k]` (channel-local
/// `xc`, batch innermost) or zeros where the tap reads padding. With `NB`
/// a constant each piece is a fixed-size move instead of a `memcpy` call
/// (chunks of a few batch elements made those calls a tenth of a CNN step).
#[inline(always)]
pub(super) fn fill_pieces<T: Real, const NB: usize>(row: &mut [T], idx: &[u32], xc: &[T], isz: usize) {
    for (piece, &src) in row.chunks_exact_mut(NB).zip(idx) {
        let src = src as usize;
        let piece: &mut [T; NB] = piece.try_into().expect("chunks_exact_mut gives NB elements");
        *piece = if src < isz {
            let from = &xc[src * NB..src * NB + NB];
            std::array::from_fn(|k| from[k])
        } else {
            [T::zero(); NB]
        };
    }
}

/// Runs an ungrouped convolution of a dilated input (a transposed
/// convolution, e.g. the input gradient of a strided one) without
/// multiplying by the dilation's zeros: im2col of the dilated input is
/// mostly holes (3/4 for a stride-2 input gradient in 2-d). Per batch
/// element, one GEMM `z[i, (t, o)] = sum_c x[c, i] w[o, c, t]` over the
/// input as it is, then each output position sums, in tap order, the rows
/// `z[i, (t, .)]` of the taps `t` that read an input position `i` there
/// ([`TapReads`]), for all output channels at once (they are contiguous in
/// `z`), into `[P, O]`, transposed to `[O, P]`. A fixed order whatever the
/// thread count. (With the taps outermost, each tap added a few elements
/// per output row at a stride: a third of a CNN step's convolution time.)
pub(super) fn gathered_kernel<T: Real>(plan: &Plan, x: &[T], w: &[T], o: &mut [T]) {
    let (cin, kprod, og, p, isz) = (plan.cg, plan.kprod, plan.og, plan.p, plan.in_size);
    let kdim = cin * kprod;
    let width = kprod * og;
    // w reordered to [c, (t, o)].
    let mut wr = vec![T::zero(); cin * width];
    for (r, row) in wr.chunks_mut(og).enumerate() {
        let (c, t) = (r / kprod, r % kprod);
        for (oc, y) in row.iter_mut().enumerate() {
            *y = w[oc * kdim + c * kprod + t];
        }
    }
    let reads = TapReads::new(plan);
    let one = |xb: &[T], ob: &mut [T], (z, ot): &mut (Vec<T>, Vec<T>), parallel: bool| {
        // x^T [i, c] times wr [c, (t, o)].
        let a = MatRef { data: xb, rs: 1, cs: isz };
        let bm = MatRef { data: &wr, rs: width, cs: 1 };
        gemm_into(isz, width, cin, z, a, bm, parallel);
        simd_loop::<SumTaps, _>((&reads, &z[..], &mut ot[..], og));
        transpose_into(ot, p, og, p, ob);
    };
    let per_in = cin * isz;
    let per_out = og * p;
    let scratch = || (vec![T::zero(); isz * width], vec![T::zero(); per_out]);
    match parallelism(plan.n, width * cin * isz) {
        Parallelism::Batch { items } => {
            o.par_chunks_mut(items * per_out).enumerate().for_each_init(scratch, |s, (t, chunk)| {
                for (i, ob) in chunk.chunks_mut(per_out).enumerate() {
                    let b = t * items + i;
                    one(&x[b * per_in..(b + 1) * per_in], ob, s, false);
                }
            })
        }
        sp => {
            let mut s = scratch();
            for (b, ob) in o.chunks_mut(per_out).enumerate() {
                one(&x[b * per_in..(b + 1) * per_in], ob, &mut s, sp == Parallelism::Inner);
            }
        }
    }
}

/// Per output position of a [`gathered_kernel`] plan (row-major over the
/// output's spatial dims), the taps that read an input position there, in
/// tap order, as offsets of their rows in `z` (`(i * kprod + t) * og`).
/// The same for every batch element.
pub(super) struct TapReads {
    /// Position `j`'s rows are `rows[starts[j]..starts[j + 1]]`.
    starts: Vec<usize>,
    rows: Vec<usize>,
}

impl TapReads {
    fn new(plan: &Plan) -> TapReads {
        let s = plan.out_sp.len();
        let mut starts = Vec::with_capacity(plan.p + 1);
        let mut rows = Vec::new();
        let mut pos = vec![0usize; s];
        for _ in 0..plan.p {
            starts.push(rows.len());
            let mut tap = vec![0usize; s];
            for t in 0..plan.kprod {
                let mut at = Some(0usize);
                for d in 0..s {
                    let i = plan.tables[d][tap[d] * plan.out_sp[d] + pos[d]];
                    at = if i < 0 { None } else { at.map(|a| a + i as usize * plan.in_strides[d]) };
                }
                if let Some(i) = at {
                    rows.push((i * plan.kprod + t) * plan.og);
                }
                step_index(&mut tap, &plan.k_sp);
            }
            step_index(&mut pos, &plan.out_sp);
        }
        starts.push(rows.len());
        TapReads { starts, rows }
    }
}

/// Advances a row-major multi-index `idx` over `sizes` by one (wrapping).
pub(super) fn step_index(idx: &mut [usize], sizes: &[usize]) {
    for d in (0..idx.len()).rev() {
        idx[d] += 1;
        if idx[d] < sizes[d] {
            return;
        }
        idx[d] = 0;
    }
}

/// [`gathered_kernel`]'s sums for one batch element: `ot` (`[P, og]`,
/// overwritten) gets, per output position, zero plus the `z` rows of its
/// taps in tap order, each element by one addition per tap. Run through
/// [`simd_loop`].
pub(super) struct SumTaps;

impl<T: Real> SimdLoop<(&TapReads, &[T], &mut [T], usize)> for SumTaps {
    type Output = ();

    #[inline(always)]
    fn run((reads, z, ot, og): (&TapReads, &[T], &mut [T], usize)) {
        for (j, acc) in ot.chunks_exact_mut(og).enumerate() {
            acc.fill(T::zero());
            for &r in &reads.rows[reads.starts[j]..reads.starts[j + 1]] {
                for (y, &v) in acc.iter_mut().zip(&z[r..r + og]) {
                    *y = *y + v;
                }
            }
        }
    }
}
