//! `conv_general`: N-dimensional grouped, strided, padded and dilated
//! convolution (cross-correlation, no kernel flip), like
//! `lax.conv_general_dilated` / PyTorch `convNd`.
//!
//! Layout: lhs `[N, C, *spatial]`, rhs `[O, C / groups, *kernel]`, output
//! `[N, O, *out_spatial]`, each with its two leading dims swapped where the
//! op's [`ConvLayout`] says so (what the derivative rules use instead of
//! transposing around a convolution; everything below is written for the
//! canonical order). Channels split into `feature_group_count` groups:
//! output channel `o` sees input channels of group `o / (O / groups)` only.
//!
//! Per spatial dim (all in input coordinates after dilation and padding):
//! the input is first dilated (`lhs_dilation - 1` zeros between elements,
//! the transposed-convolution trick), then padded by `padding = (lo, hi)`
//! (negative values crop), and the kernel is dilated by `rhs_dilation`.
//! `out = floor((padded - dilated_kernel) / stride) + 1`, which must be >= 1.
//! Output position `o` with kernel tap `t` reads padded position
//! `o * stride + t * rhs_dilation`; positions in padding or in dilation holes
//! read zero. Any number of spatial dims is accepted (0 gives a grouped matmul).
//!
//! Kernel: per (batch element, group), an im2col matrix
//! `[C/groups * prod(kernel), prod(out_spatial)]` (skipped when the window is
//! the identity, e.g. a 1x1 stride-1 convolution) multiplied by the group's
//! weights `[O/groups, C/groups * prod(kernel)]` through the shared GEMM
//! helper. Batch elements run in parallel; a lone large product lets GEMM
//! split itself. Accumulation order per output element is fixed, so results
//! do not depend on the thread count.

use super::kernel::{input, output, simd_loop, Real, SimdLoop};
use super::linalg::{gemm_acc_into, gemm_into, parallelism, MatRef, Parallelism};
use super::{check, Op};
use crate::dispatch_float;
use crate::error::{ExecError, IrError, TypeError};
use crate::ir::{Builder, Value};
use crate::tensor::Tensor;
use crate::types::{fmt_list, strides_of, TensorType};
use rayon::prelude::*;

/// General convolution parameters; every list has one entry per spatial dim.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ConvGeneral {
    /// Window step per spatial dim (>= 1).
    pub strides: Vec<usize>,
    /// `(low, high)` padding per spatial dim of the dilated input; negative crops.
    pub padding: Vec<(i64, i64)>,
    /// Input dilation per spatial dim (>= 1; > 1 inserts zeros between elements).
    pub lhs_dilation: Vec<usize>,
    /// Kernel dilation per spatial dim (>= 1; "atrous" convolution).
    pub rhs_dilation: Vec<usize>,
    /// Number of channel groups (>= 1; `C` for depthwise).
    pub feature_group_count: usize,
    /// Which of each operand's two leading dims is which (the canonical
    /// layout unless a derivative rule asked otherwise).
    pub layout: ConvLayout,
}

/// Where the batch and feature dims of each operand sit: a restricted form
/// of XLA's convolution dimension numbers. Spatial dims are always last and
/// in order; each operand either has the canonical order of its two leading
/// dims or has them swapped. The kernel reads a swapped operand in place
/// (or through a scratch copy), so a rule that would transpose an operand,
/// run a convolution and transpose the result back (the weight gradient)
/// emits one convolution instead, and no `[b, c, h, w] -> [c, b, h, w]`
/// copies are materialised around it (they were 6 % of a CNN step).
///
/// The weight gradient `(CN, IO, CN)` has its own kernel (a sum over the
/// batch of products of the cotangent with the forward im2col matrix, see
/// [`weight_grad_kernel`]); other swapped layouts run the canonical kernel
/// on scratch copies. Device backends rewrite every swapped layout to
/// transposes around a canonical convolution ([`canonical_layouts`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ConvLayout {
    /// The lhs is `[C, N, *spatial]` instead of `[N, C, *spatial]`.
    pub lhs_cn: bool,
    /// The rhs is `[C/groups, O, *kernel]` instead of `[O, C/groups, *kernel]`.
    pub rhs_io: bool,
    /// The output is `[O, N, *out]` instead of `[N, O, *out]`.
    pub out_cn: bool,
}

impl ConvLayout {
    /// `[N, C]`, `[O, C/groups]`, `[N, O]`: what `conv2d` and most rules emit.
    pub const CANONICAL: ConvLayout = ConvLayout { lhs_cn: false, rhs_io: false, out_cn: false };
    /// The weight gradient's layout: every operand swapped, so that it reads
    /// the forward input `[N, C, *in]` and cotangent `[N, O, *out]` as they
    /// are and writes `[O, C, *kernel]`.
    pub const WEIGHT_GRAD: ConvLayout = ConvLayout { lhs_cn: true, rhs_io: true, out_cn: true };

    /// Whether every operand has the canonical order.
    pub fn is_canonical(self) -> bool {
        self == ConvLayout::CANONICAL
    }
}

/// `shape` with its two leading dims swapped when `swap` (a layout's
/// operand shape to or from the canonical one; rank >= 2 is checked first).
fn swap_leading_dims(shape: &[usize], swap: bool) -> Vec<usize> {
    let mut s = shape.to_vec();
    if swap && s.len() >= 2 {
        s.swap(0, 1);
    }
    s
}

impl ConvGeneral {
    /// A plain convolution over `spatial` dims: stride 1, no padding, no
    /// dilation, one group.
    pub fn unit(spatial: usize) -> ConvGeneral {
        ConvGeneral {
            strides: vec![1; spatial],
            padding: vec![(0, 0); spatial],
            lhs_dilation: vec![1; spatial],
            rhs_dilation: vec![1; spatial],
            feature_group_count: 1,
            layout: ConvLayout::CANONICAL,
        }
    }

    /// These parameters with the canonical layout.
    fn canonical(&self) -> ConvGeneral {
        ConvGeneral { layout: ConvLayout::CANONICAL, ..self.clone() }
    }
}

/// Size of a dim of `n` elements with `d - 1` zeros inserted between elements.
fn dilated(n: usize, d: usize) -> usize {
    if n == 0 {
        0
    } else {
        (n - 1) * d + 1
    }
}

impl Op for ConvGeneral {
    fn name(&self) -> &'static str {
        "conv_general"
    }

    fn params(&self) -> String {
        let pads: Vec<String> = self.padding.iter().map(|(lo, hi)| format!("({lo},{hi})")).collect();
        format!(
            "strides={}, padding=({}), lhs_dilation={}, rhs_dilation={}, feature_group_count={}",
            fmt_list(&self.strides),
            pads.join(","),
            fmt_list(&self.lhs_dilation),
            fmt_list(&self.rhs_dilation),
            self.feature_group_count
        ) + &self.layout_param()
    }

    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        check::arity(self, ins, 2)?;
        if !self.layout.is_canonical() {
            // The canonical operands' type, with the output's leading dims
            // swapped back (operand ranks are checked there first).
            let canon = |t: &TensorType, swap: bool| {
                TensorType::new(t.dtype, swap_leading_dims(&t.shape, swap && t.rank() == ins[0].rank()))
            };
            let cins = [canon(&ins[0], self.layout.lhs_cn), canon(&ins[1], self.layout.rhs_io)];
            let out = self
                .canonical()
                .infer(&cins)
                .map_err(|e| {
                    check::err(self, ins, format!("{} (after swapping the layout's leading dims)", e.expected))
                })?
                .remove(0);
            return Ok(vec![TensorType::new(out.dtype, swap_leading_dims(&out.shape, self.layout.out_cn))]);
        }
        let (l, r) = (&ins[0], &ins[1]);
        if l.dtype != r.dtype {
            return Err(check::err(self, ins, "expected both operands to have the same dtype"));
        }
        check::float(self, ins, l)?;
        if l.rank() < 2 || r.rank() != l.rank() {
            return Err(check::err(
                self,
                ins,
                "expected lhs [N, C, *spatial] and rhs [O, C/groups, *kernel] of equal rank >= 2",
            ));
        }
        let s = l.rank() - 2;
        let lens = [self.strides.len(), self.padding.len(), self.lhs_dilation.len(), self.rhs_dilation.len()];
        if lens.iter().any(|&n| n != s) {
            return Err(check::err(
                self,
                ins,
                format!(
                    "expected strides, padding, lhs_dilation and rhs_dilation with {s} entries (one per spatial dim)"
                ),
            ));
        }
        if self.strides.iter().chain(&self.lhs_dilation).chain(&self.rhs_dilation).any(|&v| v == 0) {
            return Err(check::err(self, ins, "expected strides and dilations >= 1"));
        }
        let g = self.feature_group_count;
        if g == 0 {
            return Err(check::err(self, ins, "expected feature_group_count >= 1"));
        }
        let (c, o) = (l.shape[1], r.shape[0]);
        if c != g * r.shape[1] {
            return Err(check::err(
                self,
                ins,
                format!("expected input channels ({c}) == feature_group_count ({g}) * rhs dim 1 ({})", r.shape[1]),
            ));
        }
        if o % g != 0 {
            return Err(check::err(
                self,
                ins,
                format!("expected output channels ({o}) divisible by feature_group_count ({g})"),
            ));
        }
        let mut shape = vec![l.shape[0], o];
        for d in 0..s {
            let (n, k) = (l.shape[d + 2], r.shape[d + 2]);
            if k == 0 {
                return Err(check::err(self, ins, format!("expected kernel spatial dim {d} of size >= 1")));
            }
            let (lo, hi) = self.padding[d];
            let padded = dilated(n, self.lhs_dilation[d]) as i128 + lo as i128 + hi as i128;
            let window = dilated(k, self.rhs_dilation[d]) as i128;
            if padded < window {
                return Err(check::err(
                    self,
                    ins,
                    format!(
                        "expected spatial dim {d}: dilated, padded input ({padded}) >= dilated kernel ({window}) \
                         so the output is non-empty"
                    ),
                ));
            }
            let Ok(out) = usize::try_from((padded - window) / self.strides[d] as i128 + 1) else {
                return Err(check::err(self, ins, format!("expected spatial dim {d} of the output to fit in usize")));
            };
            shape.push(out);
        }
        Ok(vec![TensorType::new(l.dtype, shape)])
    }

    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        let (x, w) = (ins[0], ins[1]);
        // Re-derive the output type: the im2col tables index by these shapes.
        let ty = self.infer(&[x.ty(), w.ty()]).map_err(IrError::from)?.remove(0);
        let o = &mut outs[0];
        if o.ty() != ty {
            return Err(ExecError::kernel(self.name(), format!("internal error: output is {}, expected {ty}", o.ty())));
        }
        // The plan is the canonical convolution's: a swapped operand is read
        // in place (the weight gradient) or copied to the canonical order.
        let l = self.layout;
        let xs = swap_leading_dims(x.shape(), l.lhs_cn);
        let ws = swap_leading_dims(w.shape(), l.rhs_io);
        let os = swap_leading_dims(&ty.shape, l.out_cn);
        let plan = Plan::new(self, &xs, &ws, &os);
        dispatch_float!(x.dtype(), self.name(), conv_kernel(self, &plan, x, w, o))
    }
}

/// Output rows (the last spatial dim) shorter than this fill im2col through
/// the per-plan gather table (`Plan::gather`); longer ones copy runs.
const GATHER_ROW_MAX: usize = 16;

/// Most entries (`kprod * p`) of a plan's gather table (256 KiB).
const GATHER_MAX: usize = 1 << 16;

/// The gather table of `Plan::gather`: per tap (row-major over `k_sp`) and
/// output position (row-major over `out_sp`), the input offset within a
/// channel, or `u32::MAX` where the tap reads padding or a dilation hole.
fn gather_table(k_sp: &[usize], out_sp: &[usize], tables: &[Vec<isize>], in_strides: &[usize]) -> Vec<u32> {
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
fn gather_row<T: Real>(xc: &[T], idx: &[u32], out: &mut [T]) {
    for (y, &i) in out.iter_mut().zip(idx) {
        *y = xc.get(i as usize).copied().unwrap_or_else(T::zero);
    }
}

/// A whole im2col matrix `col` (`[cg * kprod, p]`) through a gather table:
/// channel by channel, tap by tap, no index arithmetic per row. Run through
/// [`simd_loop`].
struct GatherRows;

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
struct Im2colRows;

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
struct Run {
    lo: usize,
    hi: usize,
    start: usize,
    step: usize,
}

impl Run {
    /// The row as a run, if its valid entries are contiguous and affine.
    fn of(row: &[isize]) -> Option<Run> {
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
struct Plan {
    /// Batch size.
    n: usize,
    groups: usize,
    /// Input channels per group.
    cg: usize,
    /// Output channels per group.
    og: usize,
    /// Input spatial dims.
    in_sp: Vec<usize>,
    /// Row-major strides of the input spatial dims (within one channel).
    in_strides: Vec<usize>,
    /// Elements per input channel.
    in_size: usize,
    /// Output positions per output channel (product of `out_sp`).
    p: usize,
    /// Kernel spatial sizes.
    k_sp: Vec<usize>,
    /// Kernel taps per input channel (product of `k_sp`).
    kprod: usize,
    /// Output spatial sizes.
    out_sp: Vec<usize>,
    /// `tables[d][t * out_sp[d] + o]`: input index read by tap `t` at output
    /// position `o` along spatial dim `d`, or -1 for padding / dilation holes.
    tables: Vec<Vec<isize>>,
    /// Per tap of the last spatial dim, its table row as one affine run when
    /// it is one (always without input dilation): positions `lo..hi` read
    /// `start + (o - lo) * step`, the rest are padding. Lets im2col copy
    /// whole runs instead of gathering element by element.
    runs: Vec<Option<Run>>,
    /// `gather[tap * p + j]`: the offset within one input channel that `tap`
    /// reads at output position `j` (row-major over `out_sp`), or `u32::MAX`
    /// for padding and dilation holes. Built for small images only (see
    /// [`GATHER_ROW_MAX`]): there im2col rows are a few elements per output
    /// row, and walking `tables` per output row costs more than the copies,
    /// while one lookup per element costs the same whatever the geometry.
    gather: Option<Vec<u32>>,
    /// The window maps output positions 1:1 onto the input (1x1 kernel,
    /// stride 1, no padding or input dilation): im2col would be a copy.
    identity: bool,
    /// The same convolution with the roles of output positions and kernel
    /// taps swapped (see [`swapped_kernel`]), when that is the cheaper way
    /// to run it: ungrouped, with fewer output positions than taps.
    swapped: Option<Box<Plan>>,
    /// Run as products on the undilated input and a gather of their sums
    /// (see [`gathered_kernel`]): ungrouped, input dilated (a transposed
    /// convolution, e.g. the input gradient of a strided one), fewer input
    /// positions than output positions per channel.
    gathered: bool,
}

impl Plan {
    fn new(c: &ConvGeneral, xs: &[usize], ws: &[usize], os: &[usize]) -> Plan {
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
    fn direct(c: &ConvGeneral, xs: &[usize], ws: &[usize], os: &[usize]) -> Plan {
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
    /// window not the identity) and its products are wide enough to gain.
    fn wide(&self) -> bool {
        self.gather.is_some() && !self.identity && self.wide_chunk() * self.p >= WIDE_MIN
    }

    /// Batch elements [`wide_kernel`] takes at once: as many as keep its
    /// im2col matrix within [`WIDE_CHUNK`], rounded down to a multiple of 8
    /// or a power of two, so that its pieces are [`fill_pieces`]' fixed-size
    /// moves (a chunk of 9 copied every 9-element piece with a `memcpy`
    /// call: 3 % of a CNN step).
    fn wide_chunk(&self) -> usize {
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
    fn im2col_row<T: Real>(&self, xg: &[T], row: usize, out: &mut [T], pos: &mut [usize]) {
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
    fn im2col<T: Real>(&self, xg: &[T], col: &mut [T], parallel: bool) {
        let scratch = || vec![0usize; 2 * self.out_sp.len()];
        let parallel = parallel && super::kernel::worth_parallel(col.len());
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
    fn one<T: Real>(&self, x: &[T], w: &[T], out: &mut [T], col: &mut [T], parallel: bool) {
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
    fn group<T: Real>(&self, x: &[T], w: &[T], g: usize, out: &mut [T], col: &mut [T], parallel: bool) {
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

fn conv_kernel<T: Real>(c: &ConvGeneral, plan: &Plan, x: &Tensor, w: &Tensor, o: &mut Tensor) -> Result<(), ExecError> {
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
fn swap_leading<T: Copy>(src: &[T], a: usize, b: usize, inner: usize) -> Vec<T> {
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
fn weight_grad_kernel<T: Real>(c: &ConvGeneral, plan: &Plan, x: &[T], ct: &[T], dw: &mut [T]) {
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
    if super::kernel::worth_parallel(flops / 8) {
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
const WEIGHT_GRAD_CHUNK: usize = 8;

/// Runs the convolution in the canonical layout.
fn canonical_kernel<T: Real>(plan: &Plan, x: &[T], w: &[T], o: &mut [T]) {
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
const SWAPPED_CHUNK: usize = 8 << 20;

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
fn swapped_kernel<T: Real>(plan: &Plan, sw: &Plan, x: &[T], w: &[T], o: &mut [T]) {
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
        if super::kernel::worth_parallel(cols.len()) {
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
struct SwappedRows;

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
const WIDE_CHUNK: usize = 1 << 18;

/// Fewest product columns (`nb * p`) for which [`wide_kernel`] beats the
/// swapped form: with narrower rows `gemm` packs many short rows.
const WIDE_MIN: usize = 32;

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
fn wide_kernel<T: Real>(plan: &Plan, x: &[T], w: &[T], o: &mut [T]) {
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
        if super::kernel::worth_parallel(cols.len()) {
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
struct WideRows;

impl<T: Real> SimdLoop<(&Plan, &[T], usize, usize, &mut [T])> for WideRows {
    type Output = ();

    #[inline(always)]
    fn run((plan, xt, nb, first, cols): (&Plan, &[T], usize, usize, &mut [T])) {
        let Some(gather) = &plan.gather else { unreachable!("wide_kernel checked that the plan has a gather table") };
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
fn fill_pieces<T: Real, const NB: usize>(row: &mut [T], idx: &[u32], xc: &[T], isz: usize) {
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

/// Writes the transpose of the row-major `rows x cols` matrix `a` to `dst`:
/// element `(i, j)` of `a` goes to `dst[j * ld + i]` (`ld >= rows`), eight
/// rows at a time (fewer for the last group), so that neither side walks
/// memory a whole row apart per element.
fn transpose_into<T: Copy + 'static>(a: &[T], rows: usize, cols: usize, ld: usize, dst: &mut [T]) {
    simd_loop::<TransposeTiles, _>((a, rows, cols, ld, dst));
}

/// [`transpose_into`]'s loops, run through [`simd_loop`].
struct TransposeTiles;

impl<T: Copy + 'static> SimdLoop<(&[T], usize, usize, usize, &mut [T])> for TransposeTiles {
    type Output = ();

    #[inline(always)]
    fn run((a, rows, cols, ld, dst): (&[T], usize, usize, usize, &mut [T])) {
        let mut i0 = 0;
        while i0 < rows {
            let r = (rows - i0).min(8);
            match r {
                8 => transpose_rows::<T, 8>(a, i0, cols, ld, dst),
                7 => transpose_rows::<T, 7>(a, i0, cols, ld, dst),
                6 => transpose_rows::<T, 6>(a, i0, cols, ld, dst),
                5 => transpose_rows::<T, 5>(a, i0, cols, ld, dst),
                4 => transpose_rows::<T, 4>(a, i0, cols, ld, dst),
                3 => transpose_rows::<T, 3>(a, i0, cols, ld, dst),
                2 => transpose_rows::<T, 2>(a, i0, cols, ld, dst),
                _ => transpose_rows::<T, 1>(a, i0, cols, ld, dst),
            }
            i0 += r;
        }
    }
}

/// Rows `i0..i0 + R` of [`transpose_into`]: tiles of `R x 8` are read row
/// by row into a local array (contiguous loads, bounds checked once per
/// row) and written column by column as runs of `R`; with constant sizes
/// the compiler keeps a tile in registers. Indexing `a` per element, with
/// a bounds check and a scalar load each, was most of `wide_kernel`'s time
/// (its batch chunks are often only a few rows). Full 8 x 8 tiles of f32
/// are transposed with AVX shuffles where the CPU has them ([`transpose8_f32`]):
/// the compiler writes a tile's columns element by element, which made
/// these transposes a seventh of a CNN step.
#[inline(always)]
fn transpose_rows<T: Copy + 'static, const R: usize>(a: &[T], i0: usize, cols: usize, ld: usize, dst: &mut [T]) {
    const W: usize = 8;
    let src: [&[T]; R] = std::array::from_fn(|k| &a[(i0 + k) * cols..(i0 + k + 1) * cols]);
    let full = cols - cols % W;
    #[cfg(target_arch = "x86_64")]
    let avx = if R == W && std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>() {
        pulp::x86::V3::try_new()
    } else {
        None
    };
    for j0 in (0..full).step_by(W) {
        let tile: [[T; W]; R] = std::array::from_fn(|k| {
            let r = &src[k][j0..j0 + W];
            std::array::from_fn(|j| r[j])
        });
        #[cfg(target_arch = "x86_64")]
        if let (Some(simd), Some(t)) = (avx, (&tile as &dyn std::any::Any).downcast_ref::<[[f32; 8]; 8]>()) {
            let out = transpose8_f32(simd, *t);
            let out = (&out as &dyn std::any::Any).downcast_ref::<[[T; R]; W]>();
            let out = out.expect("T is f32 and R is 8 (checked above)");
            for (j, col) in out.iter().enumerate() {
                dst[(j0 + j) * ld + i0..(j0 + j) * ld + i0 + R].copy_from_slice(col);
            }
            continue;
        }
        for j in 0..W {
            let d = &mut dst[(j0 + j) * ld + i0..(j0 + j) * ld + i0 + R];
            for (k, y) in d.iter_mut().enumerate() {
                *y = tile[k][j];
            }
        }
    }
    for j in full..cols {
        let d = &mut dst[j * ld + i0..j * ld + i0 + R];
        for (k, y) in d.iter_mut().enumerate() {
            *y = src[k][j];
        }
    }
}

/// The transpose of an 8 x 8 f32 tile in eight AVX registers: unpacks
/// interleave row pairs, shuffles gather quadruples, lane permutes join
/// the 128-bit halves. Only moves: the same bits as an element-wise copy.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn transpose8_f32(simd: pulp::x86::V3, rows: [[f32; 8]; 8]) -> [[f32; 8]; 8] {
    use std::arch::x86_64::__m256;
    let avx = simd.avx;
    let r: [__m256; 8] = rows.map(pulp::cast);
    let lo = |a: usize, b: usize| avx._mm256_unpacklo_ps(r[a], r[b]);
    let hi = |a: usize, b: usize| avx._mm256_unpackhi_ps(r[a], r[b]);
    let t = [lo(0, 1), hi(0, 1), lo(2, 3), hi(2, 3), lo(4, 5), hi(4, 5), lo(6, 7), hi(6, 7)];
    let even = |a: usize, b: usize| avx._mm256_shuffle_ps::<0x44>(t[a], t[b]);
    let odd = |a: usize, b: usize| avx._mm256_shuffle_ps::<0xEE>(t[a], t[b]);
    let s = [even(0, 2), odd(0, 2), even(1, 3), odd(1, 3), even(4, 6), odd(4, 6), even(5, 7), odd(5, 7)];
    let low = |a: usize| avx._mm256_permute2f128_ps::<0x20>(s[a], s[a + 4]);
    let high = |a: usize| avx._mm256_permute2f128_ps::<0x31>(s[a], s[a + 4]);
    [low(0), low(1), low(2), low(3), high(0), high(1), high(2), high(3)].map(pulp::cast)
}

thread_local! {
    /// Scratch vectors of [`wide_kernel`] kept between calls, any element type.
    static SCRATCH: std::cell::RefCell<Vec<Box<dyn std::any::Any>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A vector of at least `len` elements (contents unspecified) from this
/// thread's scratch, or a new zeroed one. Taken out, not borrowed, so a
/// rayon task run on this thread while it waits may take another.
fn take_scratch<T: Real + 'static>(len: usize) -> Vec<T> {
    let found = SCRATCH.with(|s| {
        let mut s = s.borrow_mut();
        // The smallest that is long enough.
        let at = (0..s.len())
            .filter_map(|i| s[i].downcast_ref::<Vec<T>>().filter(|v| v.len() >= len).map(|v| (v.len(), i)))
            .min()?
            .1;
        s.swap_remove(at).downcast::<Vec<T>>().ok()
    });
    match found {
        Some(v) => *v,
        None => vec![T::zero(); len],
    }
}

/// Hands a vector back to this thread's scratch (at most eight are kept).
fn put_scratch<T: Real + 'static>(v: Vec<T>) {
    SCRATCH.with(|s| {
        let mut s = s.borrow_mut();
        if s.len() < 8 {
            s.push(Box::new(v));
        }
    });
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
fn gathered_kernel<T: Real>(plan: &Plan, x: &[T], w: &[T], o: &mut [T]) {
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
struct TapReads {
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
fn step_index(idx: &mut [usize], sizes: &[usize]) {
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
struct SumTaps;

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

impl Builder {
    /// General N-d convolution (see [`ConvGeneral`] for layout and semantics).
    pub fn conv_general(&mut self, lhs: Value, rhs: Value, params: ConvGeneral) -> Result<Value, IrError> {
        self.emit1(params, &[lhs, rhs])
    }
}

// Derivative rules. conv_general is bilinear in (lhs, rhs): the JVP applies
// the op with one tangent operand at a time, and each transpose is again a
// conv_general (JAX's `_conv_general_dilated_transpose_lhs/_rhs`), so the
// rules are closed under differentiation.
//
// Per spatial dim write `dil(n, d) = (n - 1) d + 1` (0 for n = 0), `in`,
// `k`, `out` for the input, kernel and output sizes, `s` the stride, `ld` /
// `rd` the lhs / rhs dilations and `(lo, hi)` the padding. Forward, output
// `o` with tap `t` reads input `i` iff `o s + t rd - lo = i ld`.
//
// lhs cotangent: a convolution of `ct` dilated by `s` (lhs_dilation = s)
// with the spatially flipped kernel, stride `ld`, rhs_dilation `rd`, and
// padding `before = dil(k, rd) - 1 - lo`, `after = dil(in, ld) + dil(k, rd)
// - 1 - dil(out, s) - before`. Then output `i`, flipped tap `t' = k-1-t`,
// reads dilated `ct` position `i ld + t' rd - before = o s` exactly when the
// forward pair (o, t) reads `i`, and the padded length `dil(in, ld) + dil(k,
// rd) - 1` yields exactly `in` outputs. The kernel `[O, C/g, *k]` becomes
// `[C, O/g, *k]` by swapping the per-group in/out channel dims.
//
// rhs cotangent: the batch dim plays the role of input features. With
// `x_t = [C/g, g N, *in]` (group-major features) and `ct_t = [O, N, *out]`,
// a grouped convolution with stride `rd`, rhs_dilation `s`, lhs_dilation
// `ld` and padding `(lo, hi')` puts at output position `t` the sum over
// kernel taps `o` of `ct[o] x[i]` with `t rd + o s - lo = i ld`: the forward
// relation. `hi' = dil(out, s) - dil(in, ld) + dil(k, rd) - lo - 1` makes the
// padded length `dil(out, s) + dil(k, rd) - 1`, so the result has exactly `k`
// positions; input rows a strided forward conv never read (when
// `in + lo + hi - dil(k, rd)` is not a multiple of `s`) are cropped by the
// smaller (possibly negative) `hi'` instead of contributing.
impl crate::ad::Diff for ConvGeneral {
    fn jvp(&self, b: &mut Builder, cx: &crate::ad::JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        let (x, w) = (cx.primals[0], cx.primals[1]);
        let a = cx.tangents[0].map(|t| b.conv_general(t, w, self.clone())).transpose()?;
        let c = cx.tangents[1].map(|t| b.conv_general(x, t, self.clone())).transpose()?;
        Ok(vec![crate::ad::helpers::add_opt(b, a, c)?])
    }

    fn transpose(&self, b: &mut Builder, cx: &crate::ad::TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        let Some(ct) = cx.cts[0] else { return Ok(vec![None, None]) };
        let (lx, lw) = (cx.is_linear(0), cx.is_linear(1));
        if lx && lw {
            return Err(crate::ad::not_linear("conv_general"));
        }
        let (xt, wt) = (&cx.in_types[0], &cx.in_types[1]);
        // A zero-size operand makes every output read zeros: both cotangents vanish.
        if xt.numel() == 0 || wt.numel() == 0 {
            let z = if lx { b.zeros(xt)? } else { b.zeros(wt)? };
            return Ok(if lx { vec![Some(z), None] } else { vec![None, Some(z)] });
        }
        if !self.layout.is_canonical() {
            return self.swapped_transpose(b, cx, ct, lx);
        }
        if lx {
            let w = cx.primal("conv_general", 1)?;
            Ok(vec![Some(self.lhs_cotangent(b, ct, w, xt, wt, &cx.out_types[0].shape)?), None])
        } else {
            let x = cx.primal("conv_general", 0)?;
            Ok(vec![None, Some(self.rhs_cotangent(b, ct, x, xt, wt, &cx.out_types[0].shape)?)])
        }
    }
}

/// `v` with its two leading dims swapped when `swap`.
fn swap01(b: &mut Builder, v: Value, swap: bool) -> Result<Value, IrError> {
    if !swap {
        return Ok(v);
    }
    let rank = b.ty(v)?.rank();
    let mut perm: Vec<usize> = (0..rank).collect();
    perm.swap(0, 1);
    b.transpose(v, &perm)
}

/// A batched `v` (batch dim `bdim`) with the two leading dims of each
/// example swapped when `swap`; the batch dim moves to the front then.
fn swap01_batched(
    b: &mut Builder,
    v: Value,
    bdim: Option<usize>,
    swap: bool,
) -> Result<(Value, Option<usize>), IrError> {
    match (swap, bdim) {
        (false, _) => Ok((v, bdim)),
        (true, None) => Ok((swap01(b, v, true)?, None)),
        (true, Some(d)) => {
            let v = crate::batch::helpers::move_bdim(b, v, d, 0)?;
            let rank = b.ty(v)?.rank();
            let mut perm: Vec<usize> = (0..rank).collect();
            perm.swap(1, 2);
            Ok((b.transpose(v, &perm)?, Some(0)))
        }
    }
}

impl ConvGeneral {
    /// This convolution as transposes around its canonical form: what the
    /// rules of a swapped layout reduce to, and what device backends run
    /// ([`canonical_layouts`]).
    pub fn emit_canonical(&self, b: &mut Builder, x: Value, w: Value) -> Result<Value, IrError> {
        let l = self.layout;
        let x = swap01(b, x, l.lhs_cn)?;
        let w = swap01(b, w, l.rhs_io)?;
        let y = b.conv_general(x, w, self.canonical())?;
        swap01(b, y, l.out_cn)
    }

    /// The transpose rule of a swapped layout: the canonical rule on the
    /// operands and the cotangent in canonical order, its result swapped
    /// back to the operand's layout.
    fn swapped_transpose(
        &self,
        b: &mut Builder,
        cx: &crate::ad::TransposeCx<'_>,
        ct: Value,
        lx: bool,
    ) -> Result<Vec<Option<Value>>, IrError> {
        let l = self.layout;
        let canon = |t: &TensorType, swap: bool| TensorType::new(t.dtype, swap_leading_dims(&t.shape, swap));
        let (xt, wt) = (canon(&cx.in_types[0], l.lhs_cn), canon(&cx.in_types[1], l.rhs_io));
        let out = swap_leading_dims(&cx.out_types[0].shape, l.out_cn);
        let c = self.canonical();
        let ct = swap01(b, ct, l.out_cn)?;
        if lx {
            let w = swap01(b, cx.primal("conv_general", 1)?, l.rhs_io)?;
            let dx = c.lhs_cotangent(b, ct, w, &xt, &wt, &out)?;
            Ok(vec![Some(swap01(b, dx, l.lhs_cn)?), None])
        } else {
            let x = swap01(b, cx.primal("conv_general", 0)?, l.lhs_cn)?;
            let dw = c.rhs_cotangent(b, ct, x, &xt, &wt, &out)?;
            Ok(vec![None, Some(swap01(b, dw, l.rhs_io)?)])
        }
    }

    /// The layout as the printer shows it (`, layout=(CN, IO, CN)`), empty
    /// for the canonical one so that plain convolutions print as before.
    fn layout_param(&self) -> String {
        let l = self.layout;
        if l.is_canonical() {
            return String::new();
        }
        let pick = |swap: bool, plain: &'static str, swapped: &'static str| if swap { swapped } else { plain };
        format!(
            ", layout=({}, {}, {})",
            pick(l.lhs_cn, "NC", "CN"),
            pick(l.rhs_io, "OI", "IO"),
            pick(l.out_cn, "NC", "CN")
        )
    }

    /// The cotangent of the lhs given the output cotangent `ct` and the kernel `w`.
    fn lhs_cotangent(
        &self,
        b: &mut Builder,
        ct: Value,
        w: Value,
        xt: &TensorType,
        wt: &TensorType,
        out_shape: &[usize],
    ) -> Result<Value, IrError> {
        let s = xt.rank() - 2;
        let g = self.feature_group_count;
        let (c, o, cg) = (xt.shape[1], wt.shape[0], wt.shape[1]);
        let k_sp = &wt.shape[2..];
        let spatial: Vec<usize> = (2..s + 2).collect();
        // [O, C/g, *k] -> [C, O/g, *k], swapping in/out channels within each
        // group; ungrouped, the convolution reads `w` in the `IO` layout.
        let swapped = if g == 1 {
            w
        } else {
            let mut grouped = vec![g, o / g, cg];
            grouped.extend_from_slice(k_sp);
            let w1 = b.reshape(w, &grouped)?;
            let mut perm = vec![0, 2, 1];
            perm.extend(spatial.iter().map(|d| d + 1));
            let w2 = b.transpose(w1, &perm)?;
            let mut flat = vec![c, o / g];
            flat.extend_from_slice(k_sp);
            b.reshape(w2, &flat)?
        };
        let flipped = if s == 0 { swapped } else { b.reverse(swapped, &spatial)? };
        let padding = (0..s)
            .map(|d| {
                let window = dilated(k_sp[d], self.rhs_dilation[d]) as i64;
                let before = window - 1 - self.padding[d].0;
                let after = dilated(xt.shape[d + 2], self.lhs_dilation[d]) as i64 + window
                    - 1
                    - dilated(out_shape[d + 2], self.strides[d]) as i64
                    - before;
                (before, after)
            })
            .collect();
        let params = ConvGeneral {
            strides: self.lhs_dilation.clone(),
            padding,
            lhs_dilation: self.strides.clone(),
            rhs_dilation: self.rhs_dilation.clone(),
            feature_group_count: g,
            layout: ConvLayout { rhs_io: g == 1, ..ConvLayout::CANONICAL },
        };
        b.conv_general(ct, flipped, params)
    }

    /// The cotangent of the rhs given the output cotangent `ct` and the input `x`.
    fn rhs_cotangent(
        &self,
        b: &mut Builder,
        ct: Value,
        x: Value,
        xt: &TensorType,
        wt: &TensorType,
        out_shape: &[usize],
    ) -> Result<Value, IrError> {
        let s = xt.rank() - 2;
        let g = self.feature_group_count;
        let (n, cg) = (xt.shape[0], wt.shape[1]);
        let in_sp = &xt.shape[2..];
        let spatial: Vec<usize> = (2..s + 2).collect();
        // [N, C, *in] -> [C/g, g N, *in]: feature (group, batch) pairs,
        // group-major; ungrouped, the convolution reads `x` in the `CN` layout.
        let x_t = if g == 1 {
            x
        } else {
            let mut grouped = vec![n, g, cg];
            grouped.extend_from_slice(in_sp);
            let x1 = b.reshape(x, &grouped)?;
            let mut perm = vec![2, 1, 0];
            perm.extend(spatial.iter().map(|d| d + 1));
            let x2 = b.transpose(x1, &perm)?;
            let mut flat = vec![cg, g * n];
            flat.extend_from_slice(in_sp);
            b.reshape(x2, &flat)?
        };
        let padding = (0..s)
            .map(|d| {
                let lo = self.padding[d].0;
                let hi = dilated(out_shape[d + 2], self.strides[d]) as i64
                    - dilated(in_sp[d], self.lhs_dilation[d]) as i64
                    + dilated(wt.shape[d + 2], self.rhs_dilation[d]) as i64
                    - lo
                    - 1;
                (lo, hi)
            })
            .collect();
        let params = ConvGeneral {
            strides: self.rhs_dilation.clone(),
            padding,
            lhs_dilation: self.lhs_dilation.clone(),
            rhs_dilation: self.strides.clone(),
            feature_group_count: g,
            // The cotangent `[N, O, *out]` read as the kernel `[O, N, *out]`,
            // the result `[C/g, O, *k]` written as `[O, C/g, *k]`.
            layout: ConvLayout { lhs_cn: g == 1, rhs_io: true, out_cn: true },
        };
        b.conv_general(x_t, ct, params)
    }
}

// Batching rule, never a loop. Layouts: lhs `[N, C, sp...]`, rhs
// `[O, C/G, k...]`, out `[N, O, osp...]`.
// - lhs batched: the batch folds into N.
// - both batched: the batch folds into the feature groups: lhs channels
//   `(b, c)` and rhs output channels `(b, o)` flattened batch-major with
//   `B * G` groups give exactly the per-example grouping.
// - rhs batched: the batch folds into O within each group (rhs reordered to
//   `[G, B, O/G]` so group `g` still owns a contiguous channel block).
impl crate::batch::Batch for ConvGeneral {
    fn batch(&self, b: &mut Builder, cx: &crate::batch::BatchCx<'_>) -> Result<crate::batch::Batched, IrError> {
        let l = self.layout;
        if l.is_canonical() {
            return self.batch_canonical(b, cx.args, cx.bdims, cx.size);
        }
        // A swapped layout: the canonical rule on operands in canonical order.
        let (x, xd) = swap01_batched(b, cx.args[0], cx.bdims[0], l.lhs_cn)?;
        let (w, wd) = swap01_batched(b, cx.args[1], cx.bdims[1], l.rhs_io)?;
        let out = self.canonical().batch_canonical(b, &[x, w], &[xd, wd], cx.size)?;
        let (y, yd) = out[0];
        Ok(vec![swap01_batched(b, y, yd, l.out_cn)?])
    }
}

impl ConvGeneral {
    /// The batching rule of the canonical layout.
    fn batch_canonical(
        &self,
        b: &mut Builder,
        args: &[Value],
        bdims: &[Option<usize>],
        size: usize,
    ) -> Result<crate::batch::Batched, IrError> {
        use crate::batch::helpers::move_bdim;
        let g = self.feature_group_count;
        match (bdims[0], bdims[1]) {
            (Some(ld), None) => {
                let x = move_bdim(b, args[0], ld, 0)?;
                let shape = b.ty(x)?.shape.clone();
                let mut folded = vec![shape[0] * shape[1]];
                folded.extend_from_slice(&shape[2..]);
                let xf = b.reshape(x, &folded)?;
                let y = b.conv_general(xf, args[1], self.clone())?;
                let mut out = b.ty(y)?.shape.clone();
                out[0] = shape[1];
                out.insert(0, shape[0]);
                Ok(vec![(b.reshape(y, &out)?, Some(0))])
            }
            (Some(ld), Some(rd)) => {
                let x = move_bdim(b, args[0], ld, 1)?; // [N, B, C, sp...]
                let xs = b.ty(x)?.shape.clone();
                let mut xf = vec![xs[0], xs[1] * xs[2]];
                xf.extend_from_slice(&xs[3..]);
                let x = b.reshape(x, &xf)?;
                let w = move_bdim(b, args[1], rd, 0)?; // [B, O, C/G, k...]
                let ws = b.ty(w)?.shape.clone();
                let mut wf = vec![ws[0] * ws[1]];
                wf.extend_from_slice(&ws[2..]);
                let w = b.reshape(w, &wf)?;
                let op = ConvGeneral { feature_group_count: g * size, ..self.clone() };
                let y = b.conv_general(x, w, op)?; // [N, B*O, osp...]
                let mut ys = b.ty(y)?.shape.clone();
                ys[1] = ws[1];
                ys.insert(1, size);
                Ok(vec![(b.reshape(y, &ys)?, Some(1))])
            }
            (None, Some(rd)) => {
                let w = move_bdim(b, args[1], rd, 0)?; // [B, O, C/G, k...]
                let ws = b.ty(w)?.shape.clone();
                let (o, k) = (ws[1], ws.len() - 3);
                let mut split = vec![size, g, o / g];
                split.extend_from_slice(&ws[2..]);
                let w = b.reshape(w, &split)?;
                let mut perm = vec![1, 0];
                perm.extend(2..split.len());
                let w = b.transpose(w, &perm)?; // [G, B, O/G, C/G, k...]
                let mut wf = vec![size * o];
                wf.extend_from_slice(&ws[2..]);
                let w = b.reshape(w, &wf)?;
                let y = b.conv_general(args[0], w, self.clone())?; // [N, G*B*O/G, osp...]
                let ys = b.ty(y)?.shape.clone();
                let mut split = vec![ys[0], g, size, o / g];
                split.extend_from_slice(&ys[2..]);
                let y = b.reshape(y, &split)?;
                let mut perm = vec![2, 0, 1, 3];
                perm.extend(4..4 + k);
                let y = b.transpose(y, &perm)?; // [B, N, G, O/G, osp...]
                let mut out = vec![size, ys[0], o];
                out.extend_from_slice(&ys[2..]);
                Ok(vec![(b.reshape(y, &out)?, Some(0))])
            }
            (None, None) => Err(crate::batch::no_rule(self.name(), "internal error: called with no batched operand")),
        }
    }
}

/// `f` with every convolution in a swapped layout ([`ConvLayout`]) replaced
/// by transposes around a canonical one ([`ConvGeneral::emit_canonical`]),
/// or `None` when it has none. Device backends plan this form: their
/// convolution kernels read the canonical layout, and the transposes are
/// layout kernels there. Functions held by loops and branches are left as
/// they are (a backend plans a loop body through this function again).
pub fn canonical_layouts(f: &crate::ir::Func) -> Result<Option<crate::ir::Func>, IrError> {
    use crate::ir::{copy_eqns, lookup};
    use crate::ops::Prim;
    let swapped = |p: &Prim| matches!(p, Prim::ConvGeneral(c) if !c.layout.is_canonical());
    if !f.eqns.iter().any(|e| swapped(&e.prim)) {
        return Ok(None);
    }
    let mut b = Builder::new(&f.name);
    let mut map: Vec<Option<Value>> = vec![None; f.n_values()];
    for &p in &f.params {
        map[p.index()] = Some(b.param_like(f, p));
    }
    for eqn in &f.eqns {
        match &eqn.prim {
            Prim::ConvGeneral(c) if !c.layout.is_canonical() => {
                let (x, w) = (lookup(&map, eqn.inputs[0])?, lookup(&map, eqn.inputs[1])?);
                b.set_loc(eqn.loc.clone());
                let y = c.emit_canonical(&mut b, x, w)?;
                b.set_loc(None);
                if let Some(name) = f.names.get(eqn.outputs[0]) {
                    b.name_if_unnamed(y, name.clone());
                }
                map[eqn.outputs[0].index()] = Some(y);
            }
            _ => copy_eqns(&mut b, f, std::iter::once(eqn), &mut map)?,
        }
    }
    let outs: Vec<Value> = f.outputs.iter().map(|&v| lookup(&map, v)).collect::<Result<_, _>>()?;
    b.finish(&outs).map(Some)
}

/// The im2col matrix of batch elements `images` of a convolution as a
/// kernel of the kernel IR, for device backends (the GPU runs the product
/// with its own GEMM; see `graft-gpu`'s `exec.rs`). Arguments: the lhs
/// `[N, C, *in]` (read) and the matrix (written), `[images, groups, C/groups,
/// *kernel, *out]` row-major: for batch element `n` and group `g`, the
/// `[C/groups * prod(kernel), prod(out)]` operand that the group's weights
/// `[O/groups, C/groups * prod(kernel)]` multiply.
///
/// One point per element. Along spatial dim `d`, the point at kernel tap
/// `t` and output position `o` reads padded position `u = o * stride + t *
/// rhs_dilation - lo` of the dilated input, which is a single strided
/// [`Inst::Position`]; it is an input element when `0 <= u < dilated size`
/// and `u % lhs_dilation == 0`, at index `u / lhs_dilation`. The channel
/// part of the address is another position, the element is read with
/// [`Inst::LoadAt`] (clamped, so a padding point reads some element in
/// range) and replaced by 0 where a test failed. Tests that cannot fail
/// for these sizes are left out (no low padding: `u >= 0`; high padding
/// <= 0: `u` below the end), so an unpadded convolution is pure address
/// arithmetic. The copy is exact (bitwise on every backend).
///
/// `None` where the kernel does not apply: a swapped layout (see
/// [`canonical_layouts`]), a dtype other than f32 or f64, or addresses
/// beyond `i32` (the verifier checks every position).
pub fn im2col_kernel(
    c: &ConvGeneral,
    xs: &[usize],
    ws: &[usize],
    os: &[usize],
    images: std::ops::Range<usize>,
    dtype: crate::dtype::DType,
    name: &str,
) -> Option<crate::kernel::Kernel> {
    use crate::kernel::{Access, Arg, Index, Inst, Kernel, Lit};
    use crate::ops::binary::{Binary, Compare};
    if !c.layout.is_canonical() || !dtype.is_float() || xs.len() < 2 || ws.len() != xs.len() || os.len() != xs.len() {
        return None;
    }
    let s = xs.len() - 2;
    let (n0, nb) = (images.start, images.len());
    let (groups, cg) = (c.feature_group_count, ws[1]);
    let in_sp = &xs[2..];
    let in_size: usize = in_sp.iter().product();
    let in_strides = strides_of(in_sp);
    let mut dims = vec![nb, groups, cg];
    dims.extend_from_slice(&ws[2..]);
    dims.extend_from_slice(&os[2..]);
    let extent: usize = dims.iter().product();
    let x_len: usize = xs.iter().product();
    if extent == 0 || x_len == 0 || extent > i32::MAX as usize {
        return None;
    }
    let rank = dims.len();
    let mut body: Vec<Inst> = Vec::new();
    let push = |body: &mut Vec<Inst>, i: Inst| -> u32 {
        body.push(i);
        (body.len() - 1) as u32
    };
    let i32lit = |v: i64| Inst::Lit(Lit { dtype: crate::dtype::DType::I32, bits: v as u64 });
    // The channel's first element: n * C * in + g * cg * in + ch * in.
    let mut strides = vec![0isize; rank];
    strides[0] = isize::try_from(xs[1].checked_mul(in_size)?).ok()?;
    strides[1] = isize::try_from(cg.checked_mul(in_size)?).ok()?;
    strides[2] = isize::try_from(in_size).ok()?;
    let offset = isize::try_from(n0.checked_mul(xs[1])?.checked_mul(in_size)?).ok()?;
    let mut addr = push(&mut body, Inst::Position(Index::Strided { dims: dims.clone(), strides, offset }));
    let mut valid: Option<u32> = None;
    for d in 0..s {
        let (lo, hi) = c.padding[d];
        let (st, rd, ld) = (c.strides[d], c.rhs_dilation[d], c.lhs_dilation[d]);
        let mut strides = vec![0isize; rank];
        strides[3 + d] = isize::try_from(rd).ok()?;
        strides[3 + s + d] = isize::try_from(st).ok()?;
        let offset = isize::try_from(lo.checked_neg()?).ok()?;
        let u = push(&mut body, Inst::Position(Index::Strided { dims: dims.clone(), strides, offset }));
        let mut tests = Vec::new();
        if lo > 0 {
            let zero = push(&mut body, i32lit(0));
            tests.push(push(&mut body, Inst::Compare(Compare::Ge, u, zero)));
        }
        if hi > 0 {
            let end = push(&mut body, i32lit(i64::try_from(dilated(in_sp[d], ld)).ok()?));
            tests.push(push(&mut body, Inst::Compare(Compare::Lt, u, end)));
        }
        let mut index = u;
        if ld > 1 {
            let l = push(&mut body, i32lit(ld as i64));
            let rem = push(&mut body, Inst::Binary(Binary::Rem, u, l));
            let zero = push(&mut body, i32lit(0));
            tests.push(push(&mut body, Inst::Compare(Compare::Eq, rem, zero)));
            index = push(&mut body, Inst::Binary(Binary::Div, u, l));
        }
        for t in tests {
            valid = Some(match valid {
                None => t,
                Some(v) => push(&mut body, Inst::Binary(Binary::And, v, t)),
            });
        }
        let step = push(&mut body, i32lit(i64::try_from(in_strides[d]).ok()?));
        let off = push(&mut body, Inst::Binary(Binary::Mul, index, step));
        addr = push(&mut body, Inst::Binary(Binary::Add, addr, off));
    }
    let mut value = push(&mut body, Inst::LoadAt { arg: 0, addr });
    if let Some(ok) = valid {
        let zero = push(&mut body, Inst::Lit(Lit { dtype, bits: 0 }));
        value = push(&mut body, Inst::Select(ok, value, zero));
    }
    body.push(Inst::Store { arg: 1, value, index: Index::Point });
    let args = vec![Arg { dtype, len: x_len, access: Access::Read }, Arg { dtype, len: extent, access: Access::Write }];
    let k = Kernel { name: name.to_string(), args, extent, body };
    crate::kernel::verify(&k).ok()?;
    Some(k)
}

/// Whether im2col is the identity for these shapes (a 1x1 window at stride 1
/// without padding or dilation): the lhs `[N, C, *in]` already is the
/// `[N, groups, C/groups, prod(out)]` matrix [`im2col_kernel`] would build.
pub fn im2col_is_identity(c: &ConvGeneral, ws: &[usize]) -> bool {
    (0..ws.len().saturating_sub(2))
        .all(|d| ws[d + 2] == 1 && c.strides[d] == 1 && c.padding[d] == (0, 0) && c.lhs_dilation[d] == 1)
}

#[cfg(test)]
mod tests {
    use super::transpose_into;

    /// Every element lands at `j * ld + i`, whole tiles or not, and nothing
    /// between the rows of `dst` is touched.
    #[test]
    fn transpose_into_moves_every_element_once() {
        for rows in [0, 1, 3, 8, 9, 16, 21] {
            for cols in [0, 1, 7, 8, 13, 24] {
                for extra in [0, 3] {
                    let ld = rows + extra;
                    let a: Vec<i32> = (0..(rows * cols) as i32).collect();
                    let mut dst = vec![-1; cols * ld];
                    transpose_into(&a, rows, cols, ld, &mut dst);
                    for j in 0..cols {
                        for i in 0..ld {
                            let want = if i < rows { (i * cols + j) as i32 } else { -1 };
                            assert_eq!(dst[j * ld + i], want, "rows {rows}, cols {cols}, ld {ld}: ({i}, {j})");
                        }
                    }
                }
            }
        }
    }
}
