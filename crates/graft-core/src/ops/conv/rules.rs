//! `conv_general`'s builder, derivative and batching rules, and the
//! rewrite of swapped layouts for device backends.

use super::*;

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
