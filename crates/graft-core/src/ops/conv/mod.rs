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

mod device;
mod kernels;
mod plan;
mod rules;

pub use device::{im2col_is_identity, im2col_kernel};
use kernels::*;
use plan::*;
pub use rules::canonical_layouts;

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
