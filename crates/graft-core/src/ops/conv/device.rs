//! The im2col matrix as a kernel of the kernel IR, for device backends.

use super::*;

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
