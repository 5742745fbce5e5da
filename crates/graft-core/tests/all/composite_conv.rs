//! Convolution composites (`composite::conv`) against independent naive
//! references: direct convolution (nested loops over output positions with
//! PyTorch's index formula) and transposed convolution by its scatter
//! definition (every input element times the kernel, added into the
//! output). Output sizes against PyTorch's formulas over a grid, bias,
//! groups, dilation, 'same'/'valid' padding, unbatched inputs, f32, errors,
//! and numeric gradient checks.

use crate::common;

use common::{check_grads, Rng};
use graft_core::composite::conv::{self, ConvOpts, ConvTransposeOpts, Padding, PerDim};
use graft_core::{Builder, DType, Executable, Func, IrError, Tensor, TensorType, Value};

fn ty(dtype: DType, shape: &[usize]) -> TensorType {
    TensorType::new(dtype, shape.to_vec())
}

fn build(
    types: &[TensorType],
    body: impl FnOnce(&mut Builder, &[Value]) -> Result<Value, IrError>,
) -> Result<Func, IrError> {
    let mut b = Builder::new("f");
    let ps: Vec<Value> = types.iter().map(|t| b.param(t.clone())).collect();
    let y = body(&mut b, &ps)?;
    b.finish(&[y])
}

fn run(f: &Func, inputs: &[&Tensor]) -> Tensor {
    let out = Executable::new(f.clone()).unwrap().run(inputs).unwrap().remove(0);
    assert_eq!(out.ty(), f.output_types()[0], "inferred type differs from the produced tensor");
    out
}

fn rand(rng: &mut Rng, dtype: DType, shape: &[usize]) -> Tensor {
    rng.tensor(&ty(dtype, shape), -1.0, 1.0)
}

fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Every multi-index of `shape` in row-major order.
fn indices(shape: &[usize]) -> Vec<Vec<usize>> {
    let n: usize = shape.iter().product();
    (0..n)
        .map(|mut f| {
            let mut idx = vec![0; shape.len()];
            for d in (0..shape.len()).rev() {
                idx[d] = f % shape[d];
                f /= shape[d];
            }
            idx
        })
        .collect()
}

fn flat(idx: &[usize], st: &[usize]) -> usize {
    idx.iter().zip(st).map(|(i, s)| i * s).sum()
}

/// Resolved convolution geometry for the references.
#[derive(Debug, Clone)]
struct Geo {
    stride: Vec<usize>,
    pad: Vec<(usize, usize)>,
    dil: Vec<usize>,
    groups: usize,
}

/// Direct convolution: `out[n, o, p] = bias[o] + sum_{c, t} x[n, g*cg + c, p*s + t*d - lo] * w[o, c, t]`.
fn ref_conv(x: &Tensor, w: &Tensor, bias: Option<&Tensor>, g: &Geo) -> (Vec<usize>, Vec<f64>) {
    let (xs, ws) = (x.shape().to_vec(), w.shape().to_vec());
    let (xv, wv) = (x.to_f64_vec(), w.to_f64_vec());
    let sp = xs.len() - 2;
    let (n, c_out, cg) = (xs[0], ws[0], ws[1]);
    let og = c_out / g.groups;
    let ksz = &ws[2..];
    let mut out_sp = vec![];
    for i in 0..sp {
        let padded = xs[2 + i] + g.pad[i].0 + g.pad[i].1;
        let eff = g.dil[i] * (ksz[i] - 1) + 1;
        out_sp.push((padded - eff) / g.stride[i] + 1);
    }
    let mut os = vec![n, c_out];
    os.extend(&out_sp);
    let (xst, wst) = (strides(&xs), strides(&ws));
    let mut out = vec![0.0; os.iter().product()];
    for (f, idx) in indices(&os).into_iter().enumerate() {
        let (b, o) = (idx[0], idx[1]);
        let grp = o / og;
        let mut acc = bias.map_or(0.0, |bv| bv.to_f64_vec()[o]);
        for c in 0..cg {
            'tap: for t in indices(ksz) {
                let mut xi = vec![b, grp * cg + c];
                for i in 0..sp {
                    let q = (idx[2 + i] * g.stride[i] + t[i] * g.dil[i]) as i64 - g.pad[i].0 as i64;
                    if q < 0 || q >= xs[2 + i] as i64 {
                        continue 'tap;
                    }
                    xi.push(q as usize);
                }
                let mut wi = vec![o, c];
                wi.extend(&t);
                acc += xv[flat(&xi, &xst)] * wv[flat(&wi, &wst)];
            }
        }
        out[f] = acc;
    }
    (os, out)
}

/// Transposed convolution by scattering: each `x[n, ci, i]` times
/// `w[ci, oc_local, t]` is added at `out[n, grp*og + oc_local, i*s + t*d - p]`.
fn ref_conv_transpose(
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    stride: &[usize],
    pad: &[usize],
    out_pad: &[usize],
    dil: &[usize],
    groups: usize,
) -> (Vec<usize>, Vec<f64>) {
    let (xs, ws) = (x.shape().to_vec(), w.shape().to_vec());
    let (xv, wv) = (x.to_f64_vec(), w.to_f64_vec());
    let sp = xs.len() - 2;
    let (n, c_in, og) = (xs[0], xs[1], ws[1]);
    let c_out = og * groups;
    let cg = c_in / groups;
    let ksz = &ws[2..];
    let mut os = vec![n, c_out];
    for i in 0..sp {
        os.push((xs[2 + i] - 1) * stride[i] + dil[i] * (ksz[i] - 1) + out_pad[i] + 1 - 2 * pad[i]);
    }
    let (xst, wst, ost) = (strides(&xs), strides(&ws), strides(&os));
    let mut out = vec![0.0; os.iter().product()];
    if let Some(bv) = bias {
        let bv = bv.to_f64_vec();
        for (f, idx) in indices(&os).into_iter().enumerate() {
            out[f] = bv[idx[1]];
        }
    }
    for idx in indices(&xs) {
        let (b, ci) = (idx[0], idx[1]);
        let grp = ci / cg;
        let xval = xv[flat(&idx, &xst)];
        for ol in 0..og {
            'tap: for t in indices(ksz) {
                let mut oi = vec![b, grp * og + ol];
                for i in 0..sp {
                    let q = (idx[2 + i] * stride[i] + t[i] * dil[i]) as i64 - pad[i] as i64;
                    if q < 0 || q >= os[2 + i] as i64 {
                        continue 'tap;
                    }
                    oi.push(q as usize);
                }
                let mut wi = vec![ci, ol];
                wi.extend(&t);
                out[flat(&oi, &ost)] += xval * wv[flat(&wi, &wst)];
            }
        }
    }
    (os, out)
}

fn assert_close(got: &Tensor, shape: &[usize], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.shape(), shape, "{what}: shape");
    let g = got.to_f64_vec();
    for (i, (a, b)) in g.iter().zip(want).enumerate() {
        assert!((a - b).abs() <= tol * (1.0 + b.abs()), "{what}: element {i}: got {a}, want {b}");
    }
}

/// Runs `conv_nd` (or the fixed-rank entry) on random data and compares.
fn check_conv(dtype: DType, xs: &[usize], ws: &[usize], with_bias: bool, opts: &ConvOpts, seed: u64) {
    let mut rng = Rng(seed);
    let x = rand(&mut rng, dtype, xs);
    let w = rand(&mut rng, dtype, ws);
    let bias = rand(&mut rng, dtype, &[ws[0]]);
    let sp = ws.len() - 2;
    let mut types = vec![x.ty(), w.ty()];
    if with_bias {
        types.push(bias.ty());
    }
    let f = build(&types, |b, p| {
        let bv = with_bias.then(|| p[2]);
        match sp {
            1 => conv::conv1d(b, p[0], p[1], bv, opts),
            2 => conv::conv2d(b, p[0], p[1], bv, opts),
            3 => conv::conv3d(b, p[0], p[1], bv, opts),
            _ => conv::conv_nd(b, p[0], p[1], bv, opts),
        }
    })
    .unwrap_or_else(|e| panic!("{xs:?} {ws:?} {opts:?}: {e}"));
    let out = if with_bias { run(&f, &[&x, &w, &bias]) } else { run(&f, &[&x, &w]) };
    let stride = opts.stride.resolve("t", "s", sp).unwrap();
    let dil = opts.dilation.resolve("t", "d", sp).unwrap();
    let pad: Vec<(usize, usize)> = match &opts.padding {
        Padding::Valid => vec![(0, 0); sp],
        Padding::Same => (0..sp)
            .map(|i| {
                let tot = dil[i] * (ws[2 + i] - 1);
                (tot / 2, tot - tot / 2)
            })
            .collect(),
        Padding::Explicit(p) => p.resolve("t", "p", sp).unwrap().into_iter().map(|p| (p, p)).collect(),
        Padding::Pairs(p) => p.clone(),
    };
    let g = Geo { stride, pad, dil, groups: opts.groups };
    let (os, want) = ref_conv(&x, &w, with_bias.then_some(&bias), &g);
    let tol = if dtype == DType::F32 { 1e-5 } else { 1e-12 };
    assert_close(&out, &os, &want, tol, &format!("conv x{xs:?} w{ws:?} {opts:?}"));
}

#[test]
fn conv2d_matches_direct_reference_over_a_grid() {
    let mut seed = 1;
    for (stride, pad, dil) in [(1, 0, 1), (1, 1, 1), (2, 0, 1), (2, 1, 1), (3, 2, 1), (1, 2, 2), (2, 1, 2), (1, 0, 3)] {
        for groups in [1, 2] {
            for with_bias in [false, true] {
                let opts = ConvOpts::new().stride(stride).padding(pad).dilation(dil).groups(groups);
                check_conv(DType::F64, &[2, 4, 7, 8], &[6, 4 / groups, 3, 2], with_bias, &opts, seed);
                seed += 1;
            }
        }
    }
}

#[test]
fn conv_per_dim_options_and_asymmetric_pairs() {
    let opts = ConvOpts::new().stride([2, 1]).padding([1, 0]).dilation([1, 2]);
    check_conv(DType::F64, &[1, 3, 6, 9], &[2, 3, 3, 3], true, &opts, 11);
    let opts = ConvOpts::new().padding(Padding::Pairs(vec![(0, 2), (3, 1)])).stride([1, 2]);
    check_conv(DType::F64, &[2, 2, 5, 5], &[3, 2, 2, 3], false, &opts, 12);
}

#[test]
fn conv1d_and_conv3d_match_reference() {
    for (i, opts) in [
        ConvOpts::new(),
        ConvOpts::new().stride(2).padding(1),
        ConvOpts::new().dilation(2).padding(2).groups(3),
        ConvOpts::new().padding(Padding::Same).dilation(3),
    ]
    .iter()
    .enumerate()
    {
        check_conv(DType::F64, &[2, 3, 11], &[6, 3 / opts.groups, 3], true, opts, 20 + i as u64);
    }
    for (i, opts) in
        [ConvOpts::new(), ConvOpts::new().stride([1, 2, 2]).padding(1), ConvOpts::new().dilation([2, 1, 1]).groups(2)]
            .iter()
            .enumerate()
    {
        check_conv(DType::F64, &[1, 2, 5, 4, 6], &[4, 2 / opts.groups, 2, 3, 2], true, opts, 30 + i as u64);
    }
}

#[test]
fn depthwise_conv_groups_equal_channels() {
    let opts = ConvOpts::new().groups(4).padding(1);
    check_conv(DType::F64, &[2, 4, 5, 5], &[8, 1, 3, 3], true, &opts, 40);
}

#[test]
fn same_and_valid_padding() {
    // 'same' keeps the spatial size for odd and even (dilated) kernels.
    for (k, d) in [(3, 1), (4, 1), (2, 3), (5, 2)] {
        let opts = ConvOpts::new().padding(Padding::Same).dilation(d);
        check_conv(DType::F64, &[1, 2, 7, 6], &[3, 2, k, k], false, &opts, 50 + k as u64);
        let f = build(&[ty(DType::F64, &[1, 2, 7, 6]), ty(DType::F64, &[3, 2, k, k])], |b, p| {
            conv::conv2d(b, p[0], p[1], None, &opts)
        })
        .unwrap();
        assert_eq!(f.output_types()[0].shape, vec![1, 3, 7, 6]);
    }
    let opts = ConvOpts::new().padding(Padding::Valid);
    check_conv(DType::F64, &[1, 2, 7, 6], &[3, 2, 3, 2], false, &opts, 60);
}

#[test]
fn conv_f32_matches_reference() {
    let opts = ConvOpts::new().stride(2).padding(1).groups(2);
    check_conv(DType::F32, &[2, 4, 9, 9], &[4, 2, 3, 3], true, &opts, 70);
}

#[test]
fn unbatched_conv_drops_the_batch_dim() {
    let mut rng = Rng(80);
    let x = rand(&mut rng, DType::F64, &[3, 6, 5]);
    let w = rand(&mut rng, DType::F64, &[2, 3, 3, 3]);
    let bias = rand(&mut rng, DType::F64, &[2]);
    let opts = ConvOpts::new().padding(1);
    let f = build(&[x.ty(), w.ty(), bias.ty()], |b, p| conv::conv2d(b, p[0], p[1], Some(p[2]), &opts)).unwrap();
    let out = run(&f, &[&x, &w, &bias]);
    let xb = x.clone().reshape(vec![1, 3, 6, 5]).unwrap();
    let g = Geo { stride: vec![1, 1], pad: vec![(1, 1); 2], dil: vec![1, 1], groups: 1 };
    let (os, want) = ref_conv(&xb, &w, Some(&bias), &g);
    assert_eq!(os, vec![1, 2, 6, 5]);
    assert_close(&out, &[2, 6, 5], &want, 1e-12, "unbatched conv2d");
}

#[test]
fn conv_output_size_follows_pytorch_formula() {
    for l in 1..12usize {
        for k in 1..5usize {
            for s in 1..4usize {
                for p in 0..3usize {
                    for d in 1..3usize {
                        let num = l as i64 + 2 * p as i64 - d as i64 * (k as i64 - 1) - 1;
                        let want = (num >= 0).then(|| (num / s as i64 + 1) as usize);
                        assert_eq!(conv::conv_output_size(l, k, s, p, p, d), want, "l={l} k={k} s={s} p={p} d={d}");
                        // The traced conv1d produces that size (or refuses).
                        let f = build(&[ty(DType::F64, &[1, 1, l]), ty(DType::F64, &[1, 1, k])], |b, v| {
                            conv::conv1d(b, v[0], v[1], None, &ConvOpts::new().stride(s).padding(p).dilation(d))
                        });
                        match (want, f) {
                            (Some(o), Ok(f)) => assert_eq!(f.output_types()[0].shape, vec![1, 1, o]),
                            (None, Err(e)) => assert!(e.to_string().contains("smaller than the dilated kernel"), "{e}"),
                            (w, f) => panic!("l={l} k={k} s={s} p={p} d={d}: want {w:?}, got {f:?}"),
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn conv_transpose_output_size_follows_pytorch_formula() {
    for l in 1..8usize {
        for k in 1..4usize {
            for s in 1..4usize {
                for p in 0..3usize {
                    for d in 1..3usize {
                        for op in 0..s.max(d) {
                            let v =
                                (l as i64 - 1) * s as i64 - 2 * p as i64 + d as i64 * (k as i64 - 1) + op as i64 + 1;
                            let want = (v >= 1).then_some(v as usize);
                            assert_eq!(conv::conv_transpose_output_size(l, k, s, p, op, d), want);
                            let opts = ConvTransposeOpts::new().stride(s).padding(p).output_padding(op).dilation(d);
                            let f = build(&[ty(DType::F64, &[1, 1, l]), ty(DType::F64, &[1, 1, k])], |b, v| {
                                conv::conv_transpose1d(b, v[0], v[1], None, &opts)
                            });
                            match (want, f) {
                                (Some(o), Ok(f)) => assert_eq!(f.output_types()[0].shape, vec![1, 1, o]),
                                (None, Err(e)) => assert!(e.to_string().contains("is below 1"), "{e}"),
                                (w, f) => panic!("l={l} k={k} s={s} p={p} op={op} d={d}: want {w:?}, got {f:?}"),
                            }
                        }
                    }
                }
            }
        }
    }
}

fn check_transpose(xs: &[usize], ws: &[usize], with_bias: bool, opts: &ConvTransposeOpts, seed: u64) {
    check_transpose_dt(DType::F64, xs, ws, with_bias, opts, seed)
}

fn check_transpose_dt(dtype: DType, xs: &[usize], ws: &[usize], with_bias: bool, opts: &ConvTransposeOpts, seed: u64) {
    let mut rng = Rng(seed);
    let x = rand(&mut rng, dtype, xs);
    let w = rand(&mut rng, dtype, ws);
    let sp = ws.len() - 2;
    let bias = rand(&mut rng, dtype, &[ws[1] * opts.groups]);
    let mut types = vec![x.ty(), w.ty()];
    if with_bias {
        types.push(bias.ty());
    }
    let f = build(&types, |b, p| {
        let bv = with_bias.then(|| p[2]);
        match sp {
            1 => conv::conv_transpose1d(b, p[0], p[1], bv, opts),
            2 => conv::conv_transpose2d(b, p[0], p[1], bv, opts),
            3 => conv::conv_transpose3d(b, p[0], p[1], bv, opts),
            _ => conv::conv_transpose_nd(b, p[0], p[1], bv, opts),
        }
    })
    .unwrap_or_else(|e| panic!("{xs:?} {ws:?} {opts:?}: {e}"));
    let out = if with_bias { run(&f, &[&x, &w, &bias]) } else { run(&f, &[&x, &w]) };
    let r = |v: &PerDim| v.resolve("t", "v", sp).unwrap();
    let (os, want) = ref_conv_transpose(
        &x,
        &w,
        with_bias.then_some(&bias),
        &r(&opts.stride),
        &r(&opts.padding),
        &r(&opts.output_padding),
        &r(&opts.dilation),
        opts.groups,
    );
    let tol = if dtype == DType::F32 { 1e-5 } else { 1e-12 };
    assert_close(&out, &os, &want, tol, &format!("conv_transpose {dtype} x{xs:?} w{ws:?} {opts:?}"));
}

#[test]
fn conv_transpose2d_matches_scatter_reference_over_a_grid() {
    let mut seed = 100;
    for (s, p, op, d) in [
        (1, 0, 0, 1),
        (2, 0, 0, 1),
        (2, 1, 1, 1),
        (3, 1, 2, 1),
        (1, 1, 0, 2),
        (2, 2, 1, 2),
        (2, 3, 0, 1), // p > d(k-1): negative padding crops
        (1, 0, 1, 2), // output_padding < dilation
    ] {
        for groups in [1, 2] {
            for with_bias in [false, true] {
                let opts = ConvTransposeOpts::new().stride(s).padding(p).output_padding(op).dilation(d).groups(groups);
                check_transpose(&[2, 4, 4, 5], &[4, 3, 3, 2], with_bias, &opts, seed);
                seed += 1;
            }
        }
    }
}

#[test]
fn conv_transpose1d_3d_and_per_dim_options() {
    check_transpose(
        &[2, 3, 6],
        &[3, 2, 4],
        true,
        &ConvTransposeOpts::new().stride(3).padding(1).output_padding(2),
        130,
    );
    check_transpose(&[1, 6, 5], &[6, 1, 3], false, &ConvTransposeOpts::new().groups(6).stride(2), 131);
    check_transpose(
        &[1, 2, 3, 2, 3],
        &[2, 2, 2, 3, 2],
        true,
        &ConvTransposeOpts::new().stride([2, 1, 2]).padding([0, 1, 1]).output_padding([1, 0, 0]),
        132,
    );
    check_transpose(
        &[1, 2, 4, 3],
        &[2, 3, 3, 3],
        false,
        &ConvTransposeOpts::new().stride([1, 2]).dilation([2, 1]).padding([2, 0]).output_padding([1, 1]),
        133,
    );
}

#[test]
fn conv_transpose_f32_matches_reference() {
    let opts = ConvTransposeOpts::new().stride(2).padding(1).output_padding(1).groups(2);
    check_transpose_dt(DType::F32, &[2, 4, 5, 4], &[4, 3, 3, 3], true, &opts, 135);
}

#[test]
fn conv_transpose_is_the_adjoint_of_conv() {
    // <conv(x, w), y> == <x, conv_transpose(y, w)> for matching geometry:
    // conv weight [O, C/g, k] is conv_transpose's [C_in=O, C_out/g=C/g, k]
    // only for one group, so test g = 1.
    let mut rng = Rng(140);
    let x = rand(&mut rng, DType::F64, &[2, 3, 9, 8]);
    let w = rand(&mut rng, DType::F64, &[5, 3, 3, 2]);
    let copts = ConvOpts::new().stride(2).padding(1).dilation([1, 2]);
    let fc = build(&[x.ty(), w.ty()], |b, p| conv::conv2d(b, p[0], p[1], None, &copts)).unwrap();
    let y_shape = fc.output_types()[0].shape.clone();
    let y = rand(&mut rng, DType::F64, &y_shape);
    // output_padding recovers the exact input size lost to the stride's floor.
    let topts = ConvTransposeOpts::new().stride(2).padding(1).dilation([1, 2]).output_padding([0, 1]);
    let ft = build(&[y.ty(), w.ty()], |b, p| conv::conv_transpose2d(b, p[0], p[1], None, &topts)).unwrap();
    let cx = run(&fc, &[&x, &w]);
    let ty_ = run(&ft, &[&y, &w]);
    assert_eq!(ty_.shape(), x.shape());
    let lhs = common::dot(&cx, &y);
    let rhs = common::dot(&x, &ty_);
    assert!((lhs - rhs).abs() < 1e-10 * (1.0 + lhs.abs()), "{lhs} vs {rhs}");
}

fn conv_err(xs: &[usize], ws: &[usize], bias: Option<&[usize]>, opts: &ConvOpts) -> String {
    let mut types = vec![ty(DType::F64, xs), ty(DType::F64, ws)];
    if let Some(bs) = bias {
        types.push(ty(DType::F64, bs));
    }
    let has_bias = bias.is_some();
    build(&types, |b, p| conv::conv2d(b, p[0], p[1], has_bias.then(|| p[2]), opts)).unwrap_err().to_string()
}

#[test]
fn conv_errors_are_clear() {
    let o = ConvOpts::new();
    let e = conv_err(&[1, 3, 5, 5], &[2, 4, 3, 3], None, &o);
    assert!(
        e.contains("conv2d") && e.contains("expects 4 input channels per group") && e.contains("3 channels"),
        "{e}"
    );
    let e = conv_err(&[1, 4, 5, 5], &[3, 2, 3, 3], None, &o.clone().groups(2));
    assert!(e.contains("output channels (3) must be divisible by groups (2)"), "{e}");
    let e = conv_err(&[1, 3, 5, 5], &[4, 1, 3, 3], None, &o.clone().groups(2));
    assert!(e.contains("input channels (3) must be divisible by groups (2)"), "{e}");
    let e = conv_err(&[1, 4, 5, 5], &[4, 2, 3, 3], None, &o.clone().groups(0));
    assert!(e.contains("groups >= 1"), "{e}");
    let e = conv_err(&[1, 2, 5, 5], &[4, 2, 3, 3], None, &o.clone().padding(Padding::Same).stride(2));
    assert!(e.contains("padding='same' is only supported with stride 1"), "{e}");
    let e = conv_err(&[1, 2, 5, 5], &[4, 2, 3, 3], None, &o.clone().stride([1, 2, 3]));
    assert!(e.contains("expected stride with 1 or 2 entries"), "{e}");
    let e = conv_err(&[1, 2, 5, 5], &[4, 2, 3, 3], None, &o.clone().stride(0));
    assert!(e.contains("stride entry >= 1"), "{e}");
    let e = conv_err(&[1, 2, 5, 5], &[4, 2, 3, 3], None, &o.clone().dilation(0));
    assert!(e.contains("dilation entry >= 1"), "{e}");
    let e = conv_err(&[1, 2, 2, 5], &[4, 2, 3, 3], None, &o);
    assert!(e.contains("spatial dim 0") && e.contains("smaller than the dilated kernel (3)"), "{e}");
    let e = conv_err(&[1, 2, 5, 5], &[4, 2, 3, 3], Some(&[3]), &o);
    assert!(e.contains("expected a bias of type f64[4]"), "{e}");
    let e = conv_err(&[2, 5, 5], &[4, 2, 3], None, &o);
    assert!(e.contains("expected a weight of rank 4"), "{e}");
    let e = conv_err(&[5, 5], &[4, 2, 3, 3], None, &o);
    assert!(e.contains("expected an input of rank 4") && e.contains("or 3 (unbatched"), "{e}");
    let e = conv_err(&[1, 2, 5, 5], &[4, 2, 3, 3], None, &o.clone().padding(Padding::Pairs(vec![(1, 1)])));
    assert!(e.contains("padding pairs with 2 entries"), "{e}");
    // dtype mismatch and integer input.
    let e = build(&[ty(DType::F32, &[1, 2, 5, 5]), ty(DType::F64, &[4, 2, 3, 3])], |b, p| {
        conv::conv2d(b, p[0], p[1], None, &o)
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("different dtypes"), "{e}");
    let e = build(&[ty(DType::I32, &[1, 2, 5, 5]), ty(DType::I32, &[4, 2, 3, 3])], |b, p| {
        conv::conv2d(b, p[0], p[1], None, &o)
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("floating-point"), "{e}");
}

#[test]
fn conv_transpose_errors_are_clear() {
    let err = |xs: &[usize], ws: &[usize], o: &ConvTransposeOpts| {
        build(&[ty(DType::F64, xs), ty(DType::F64, ws)], |b, p| conv::conv_transpose2d(b, p[0], p[1], None, o))
            .unwrap_err()
            .to_string()
    };
    let o = ConvTransposeOpts::new();
    let e = err(&[1, 3, 4, 4], &[2, 2, 3, 3], &o);
    assert!(e.contains("conv_transpose2d") && e.contains("expects 2 input channels"), "{e}");
    let e = err(&[1, 4, 4, 4], &[4, 2, 3, 3], &o.clone().stride(2).output_padding(2));
    assert!(e.contains("output_padding (2) must be smaller than either stride (2) or dilation (1)"), "{e}");
    let e = err(&[1, 3, 4, 4], &[3, 2, 3, 3], &o.clone().groups(2));
    assert!(e.contains("input channels (3) must be divisible by groups (2)"), "{e}");
    let e = err(&[1, 2, 1, 1], &[2, 2, 1, 1], &o.clone().padding(1));
    assert!(e.contains("is below 1"), "{e}");
    let e = err(&[1, 2, 4, 4], &[2, 2, 3], &o);
    assert!(e.contains("expected a weight of rank 4"), "{e}");
}

#[test]
fn conv2d_gradients() {
    let mut rng = Rng(200);
    let opts = ConvOpts::new().stride(2).padding(1).dilation([1, 2]).groups(2);
    let f = build(&[ty(DType::F64, &[2, 4, 6, 7]), ty(DType::F64, &[4, 2, 3, 2]), ty(DType::F64, &[4])], |b, p| {
        conv::conv2d(b, p[0], p[1], Some(p[2]), &opts)
    })
    .unwrap();
    let inputs: Vec<Tensor> = f.param_types().iter().map(|t| rng.tensor(t, -1.0, 1.0)).collect();
    check_grads("conv2d", &f, &inputs, &mut rng, 1e-6, 1e-6);
}

#[test]
fn conv_transpose2d_gradients() {
    let mut rng = Rng(201);
    let opts = ConvTransposeOpts::new().stride(2).padding(1).output_padding(1).groups(2);
    let f = build(&[ty(DType::F64, &[2, 4, 3, 4]), ty(DType::F64, &[4, 3, 3, 3]), ty(DType::F64, &[6])], |b, p| {
        conv::conv_transpose2d(b, p[0], p[1], Some(p[2]), &opts)
    })
    .unwrap();
    let inputs: Vec<Tensor> = f.param_types().iter().map(|t| rng.tensor(t, -1.0, 1.0)).collect();
    check_grads("conv_transpose2d", &f, &inputs, &mut rng, 1e-6, 1e-6);
}
