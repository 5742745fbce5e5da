//! Forward tests of `conv_general` against a naive reference written here:
//! the reference materialises the dilated, padded input (scatter, then
//! shift/crop) and the dilated kernel, then runs a plain strided grouped
//! cross-correlation. Covers 0-3 spatial dims, strides, padding (negative
//! too), both dilations, groups (depthwise too), batches, the serial,
//! batch-parallel, group-parallel and gemm-parallel paths, and the errors.
//!
//! Data are small multiples of 1/4, so results are exact in f32 and f64 and
//! compare with `==`.

use crate::common::{ravel, unravel};
use graft_core::ops::conv::{ConvGeneral, ConvLayout};
use graft_core::ops::display_prim;
use graft_core::{Builder, DType, Executable, IrError, Op, Tensor, TensorType};
use proptest::prelude::*;

fn run(p: &ConvGeneral, x: &Tensor, w: &Tensor) -> Tensor {
    let mut b = Builder::new("f");
    let (px, pw) = (b.param(x.ty()), b.param(w.ty()));
    let y = b.conv_general(px, pw, p.clone()).unwrap();
    let f = b.finish(&[y]).unwrap();
    Executable::new(f).unwrap().run(&[x, w]).unwrap().remove(0)
}

fn data(dtype: DType, shape: &[usize], seed: usize) -> Tensor {
    let ty = TensorType::new(dtype, shape.to_vec());
    Tensor::from_fn(&ty, |i| ((i.wrapping_mul(7919).wrapping_add(seed * 104_729)) % 17) as f64 * 0.25 - 2.0)
}

/// A row-major array of f64 for the reference.
struct Arr {
    shape: Vec<usize>,
    v: Vec<f64>,
}

/// Inserts `d - 1` zeros between elements along each spatial dim (dims >= 2).
fn dilate(a: &Arr, dil: &[usize]) -> Arr {
    let mut shape = a.shape.clone();
    for (d, &f) in dil.iter().enumerate() {
        let n = shape[d + 2];
        shape[d + 2] = if n == 0 { 0 } else { (n - 1) * f + 1 };
    }
    let mut v = vec![0.0; shape.iter().product()];
    for (i, &x) in a.v.iter().enumerate() {
        let mut idx = unravel(i, &a.shape);
        for (d, &f) in dil.iter().enumerate() {
            idx[d + 2] *= f;
        }
        v[ravel(&idx, &shape)] = x;
    }
    Arr { shape, v }
}

/// Shifts by `lo` and resizes by `lo + hi` along each spatial dim; negative crops.
fn pad(a: &Arr, pads: &[(i64, i64)]) -> Arr {
    let mut shape = a.shape.clone();
    for (d, &(lo, hi)) in pads.iter().enumerate() {
        shape[d + 2] = (shape[d + 2] as i64 + lo + hi) as usize;
    }
    let mut v = vec![0.0; shape.iter().product()];
    'elems: for (i, &x) in a.v.iter().enumerate() {
        let mut idx = unravel(i, &a.shape);
        for (d, &(lo, _)) in pads.iter().enumerate() {
            let q = idx[d + 2] as i64 + lo;
            if q < 0 || q >= shape[d + 2] as i64 {
                continue 'elems;
            }
            idx[d + 2] = q as usize;
        }
        v[ravel(&idx, &shape)] = x;
    }
    Arr { shape, v }
}

fn reference(p: &ConvGeneral, x: &Tensor, w: &Tensor) -> (Vec<usize>, Vec<f64>) {
    let xa = Arr { shape: x.shape().to_vec(), v: x.to_f64_vec() };
    let wa = Arr { shape: w.shape().to_vec(), v: w.to_f64_vec() };
    let xp = pad(&dilate(&xa, &p.lhs_dilation), &p.padding);
    let wd = dilate(&wa, &p.rhs_dilation);
    let s = x.shape().len() - 2;
    let (n, o, cg) = (x.shape()[0], w.shape()[0], w.shape()[1]);
    let og = o / p.feature_group_count;
    let mut out_shape = vec![n, o];
    for d in 0..s {
        out_shape.push((xp.shape[d + 2] - wd.shape[d + 2]) / p.strides[d] + 1);
    }
    let ksp = &wd.shape[2..];
    let kn: usize = ksp.iter().product();
    let mut out = vec![0.0; out_shape.iter().product()];
    for (i, y) in out.iter_mut().enumerate() {
        let idx = unravel(i, &out_shape);
        let (b, oc) = (idx[0], idx[1]);
        let g = oc / og;
        let mut acc = 0.0;
        for c in 0..cg {
            for t in 0..kn {
                let tap = unravel(t, ksp);
                let mut xi = vec![b, g * cg + c];
                let mut wi = vec![oc, c];
                for d in 0..s {
                    xi.push(idx[d + 2] * p.strides[d] + tap[d]);
                    wi.push(tap[d]);
                }
                acc += xp.v[ravel(&xi, &xp.shape)] * wd.v[ravel(&wi, &wd.shape)];
            }
        }
        *y = acc;
    }
    (out_shape, out)
}

fn check(p: &ConvGeneral, xs: &[usize], ws: &[usize]) {
    for dt in [DType::F32, DType::F64] {
        let (x, w) = (data(dt, xs, 1), data(dt, ws, 2));
        let y = run(p, &x, &w);
        let (shape, want) = reference(p, &x, &w);
        assert_eq!(y.dtype(), dt);
        assert_eq!(y.shape(), &shape[..], "{p:?} {xs:?} {ws:?}");
        assert_eq!(y.to_f64_vec(), want, "{dt} {p:?} {xs:?} {ws:?}");
    }
}

fn conv(strides: &[usize], padding: &[(i64, i64)], ld: &[usize], rd: &[usize], groups: usize) -> ConvGeneral {
    ConvGeneral {
        strides: strides.to_vec(),
        padding: padding.to_vec(),
        lhs_dilation: ld.to_vec(),
        rhs_dilation: rd.to_vec(),
        feature_group_count: groups,
        layout: Default::default(),
    }
}

#[test]
fn hand_computed_1d_2d_and_transposed() {
    let x = Tensor::from_vec(vec![1, 1, 4], vec![1.0f64, 2.0, 3.0, 4.0]).unwrap();
    let w = Tensor::from_vec(vec![1, 1, 3], vec![1.0f64, 0.0, -1.0]).unwrap();
    assert_eq!(run(&ConvGeneral::unit(1), &x, &w).to_f64_vec(), vec![-2.0, -2.0]);

    let x = Tensor::from_vec(vec![1, 1, 3, 3], (1..=9).map(|v| v as f32).collect()).unwrap();
    let w = Tensor::from_vec(vec![1, 1, 2, 2], vec![1.0f32; 4]).unwrap();
    let y = run(&ConvGeneral::unit(2), &x, &w);
    assert_eq!(y.shape(), &[1, 1, 2, 2]);
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![12.0, 16.0, 24.0, 28.0]);

    // Transposed conv: [1, 2] dilated to [1, 0, 2], padded by 2 each side.
    let x = Tensor::from_vec(vec![1, 1, 2], vec![1.0f64, 2.0]).unwrap();
    let w = Tensor::from_vec(vec![1, 1, 3], vec![1.0f64, 1.0, 1.0]).unwrap();
    let y = run(&conv(&[1], &[(2, 2)], &[2], &[1], 1), &x, &w);
    assert_eq!(y.to_f64_vec(), vec![1.0, 1.0, 3.0, 2.0, 2.0]);

    // Stride 2 with negative padding: [1..=6] cropped to [2,3,4,5], window 2 stride 2.
    let x = Tensor::from_vec(vec![1, 1, 6], vec![1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
    let w = Tensor::from_vec(vec![1, 1, 2], vec![1.0f64, 10.0]).unwrap();
    let y = run(&conv(&[2], &[(-1, -1)], &[1], &[1], 1), &x, &w);
    assert_eq!(y.to_f64_vec(), vec![32.0, 54.0]);

    // Kernel dilation 2: taps 0 and 2.
    let y = run(&conv(&[1], &[(0, 0)], &[1], &[2], 1), &x, &w);
    assert_eq!(y.to_f64_vec(), vec![31.0, 42.0, 53.0, 64.0]);
}

#[test]
fn one_d_configurations() {
    check(&ConvGeneral::unit(1), &[2, 3, 10], &[4, 3, 3]);
    check(&conv(&[2], &[(1, 1)], &[1], &[1], 1), &[2, 3, 11], &[4, 3, 3]);
    check(&conv(&[3], &[(2, 0)], &[1], &[2], 1), &[1, 2, 13], &[5, 2, 3]);
    check(&conv(&[1], &[(-2, 1)], &[3], &[1], 1), &[3, 2, 5], &[2, 2, 4]);
    check(&conv(&[2], &[(1, -1)], &[2], &[3], 2), &[2, 4, 9], &[6, 2, 2]);
    // Depthwise with channel multiplier 2.
    check(&conv(&[1], &[(1, 1)], &[1], &[1], 3), &[2, 3, 8], &[6, 1, 3]);
    // Kernel as big as the padded input: one output.
    check(&conv(&[1], &[(1, 1)], &[1], &[1], 1), &[1, 2, 4], &[1, 2, 6]);
}

#[test]
fn two_d_configurations() {
    check(&ConvGeneral::unit(2), &[2, 3, 7, 6], &[4, 3, 3, 2]);
    check(&conv(&[2, 1], &[(1, 1), (0, 2)], &[1, 1], &[1, 1], 1), &[2, 3, 9, 8], &[5, 3, 3, 3]);
    check(&conv(&[1, 2], &[(0, 0), (1, 1)], &[1, 1], &[2, 3], 1), &[1, 2, 10, 11], &[3, 2, 3, 2]);
    check(&conv(&[1, 1], &[(-1, 0), (2, -2)], &[2, 1], &[1, 1], 1), &[2, 2, 6, 7], &[2, 2, 2, 3]);
    // Transposed-conv style: stride-2 upsampling by input dilation.
    check(&conv(&[1, 1], &[(2, 2), (2, 2)], &[2, 2], &[1, 1], 1), &[2, 4, 5, 5], &[3, 4, 3, 3]);
    // Groups and depthwise.
    check(&conv(&[1, 1], &[(1, 1), (1, 1)], &[1, 1], &[1, 1], 2), &[3, 4, 6, 6], &[6, 2, 3, 3]);
    check(&conv(&[2, 2], &[(1, 1), (1, 1)], &[1, 1], &[1, 1], 5), &[2, 5, 7, 7], &[5, 1, 3, 3]);
    // 1x1 kernels: the identity window skips im2col; strided one does not.
    check(&ConvGeneral::unit(2), &[2, 6, 5, 4], &[3, 6, 1, 1]);
    check(&conv(&[2, 2], &[(0, 0), (0, 0)], &[1, 1], &[1, 1], 1), &[2, 6, 5, 4], &[3, 6, 1, 1]);
    check(&conv(&[1, 1], &[(0, 0), (0, 0)], &[1, 1], &[4, 4], 3), &[2, 6, 5, 4], &[3, 2, 1, 1]);
}

#[test]
fn three_d_and_zero_d_configurations() {
    check(&ConvGeneral::unit(3), &[2, 2, 4, 5, 3], &[3, 2, 2, 3, 2]);
    check(&conv(&[2, 1, 1], &[(1, 0), (0, 1), (-1, 1)], &[1, 2, 1], &[1, 1, 2], 2), &[2, 4, 5, 3, 6], &[4, 2, 2, 2, 2]);
    // No spatial dims: a grouped matmul over channels.
    check(&conv(&[], &[], &[], &[], 1), &[3, 4], &[5, 4]);
    check(&conv(&[], &[], &[], &[], 2), &[3, 4], &[6, 2]);
}

#[test]
fn empty_batch_and_channels() {
    check(&ConvGeneral::unit(2), &[0, 3, 5, 5], &[2, 3, 3, 3]);
    check(&ConvGeneral::unit(2), &[2, 3, 5, 5], &[0, 3, 3, 3]);
    // Zero input channels: sums over nothing are zero.
    check(&ConvGeneral::unit(1), &[2, 0, 5], &[3, 0, 2]);
    // Zero-size input spatial dim padded up to a valid window.
    check(&conv(&[1], &[(1, 2)], &[1], &[1], 1), &[1, 2, 0], &[2, 2, 2]);
}

#[test]
fn extreme_padding_does_not_overflow() {
    // The window lies entirely in padding: all zeros, without i64 overflow.
    check(&conv(&[1], &[(i64::MIN, i64::MAX)], &[1], &[1], 1), &[1, 2, 5], &[3, 2, 2]);
    check(&conv(&[2], &[(-(1 << 62), 1 << 62)], &[3], &[2], 1), &[2, 1, 5], &[1, 1, 2]);
    let x = data(DType::F64, &[1, 1, 5], 0);
    let y = run(&conv(&[1], &[(i64::MIN, i64::MAX)], &[1], &[1], 1), &x, &data(DType::F64, &[1, 1, 2], 0));
    assert_eq!(y.to_f64_vec(), vec![0.0; 3]);
}

#[test]
fn large_inputs_take_every_parallel_path() {
    // Batch 1, big product: gemm splits itself, im2col rows in parallel.
    check(&conv(&[1, 1], &[(1, 1), (1, 1)], &[1, 1], &[1, 1], 1), &[1, 16, 41, 39], &[33, 16, 3, 3]);
    // Batch > 1: batch elements in parallel.
    check(&conv(&[2, 1], &[(1, 0), (1, 2)], &[1, 1], &[1, 1], 1), &[5, 8, 33, 29], &[12, 8, 3, 3]);
    // Batch 1 depthwise with many groups: groups in parallel.
    check(&conv(&[1, 1], &[(1, 1), (1, 1)], &[1, 1], &[1, 1], 64), &[1, 64, 30, 31], &[64, 1, 3, 3]);
    // Identity window at parallel size.
    check(&ConvGeneral::unit(2), &[1, 64, 40, 40], &[48, 64, 1, 1]);
    // Big 1-D with dilations.
    check(&conv(&[3], &[(-3, 4)], &[2], &[3], 4), &[3, 8, 3001], &[8, 2, 5]);
    // Weight-gradient shape (3x3 outputs, 14x14 taps dilated by 2): positions and taps swapped.
    check(&conv(&[1, 1], &[(1, 0), (1, 0)], &[1, 1], &[2, 2], 1), &[16, 32, 28, 28], &[8, 32, 14, 14]);
    // Input-gradient shape of a stride-2 conv (input dilated by 2): products, then a gather.
    check(&conv(&[1, 1], &[(1, 2), (1, 2)], &[2, 2], &[1, 1], 1), &[6, 32, 14, 14], &[16, 32, 3, 3]);
    // The same with dilations 3 and 1 (runs stepping by 3, and by 1).
    check(&conv(&[1, 1], &[(2, 2), (1, 1)], &[3, 1], &[1, 1], 1), &[4, 16, 10, 13], &[8, 16, 3, 3]);
}

#[test]
fn output_garbage_is_overwritten() {
    for (p, xs, ws) in [
        (conv(&[1, 1], &[(1, 1), (1, 1)], &[1, 1], &[1, 1], 1), vec![2, 3, 5, 5], vec![4, 3, 3, 3]),
        (ConvGeneral::unit(2), vec![2, 3, 5, 5], vec![4, 3, 1, 1]),
        (ConvGeneral::unit(1), vec![2, 0, 5], vec![3, 0, 2]),
    ] {
        for dt in [DType::F32, DType::F64] {
            let (x, w) = (data(dt, &xs, 3), data(dt, &ws, 4));
            let ty = p.infer(&[x.ty(), w.ty()]).unwrap().remove(0);
            let mut outs = [Tensor::full(&ty, f64::NAN)];
            p.kernel(&[&x, &w], &mut outs).unwrap();
            assert_eq!(outs[0].to_f64_vec(), reference(&p, &x, &w).1);
        }
    }
}

#[test]
fn results_do_not_depend_on_thread_count() {
    let p = conv(&[1, 1], &[(1, 1), (1, 1)], &[1, 1], &[1, 1], 1);
    // Plain im2col, then the swapped (weight gradient) and gathered (input
    // gradient) forms.
    let swapped = conv(&[1, 1], &[(1, 0), (1, 0)], &[1, 1], &[2, 2], 1);
    let gathered = conv(&[1, 1], &[(1, 2), (1, 2)], &[2, 2], &[1, 1], 1);
    for (p, xs, ws) in [
        (p.clone(), vec![1, 16, 40, 40], vec![32, 16, 3, 3]),
        (p, vec![4, 8, 20, 20], vec![8, 8, 3, 3]),
        (swapped, vec![16, 32, 28, 28], vec![8, 32, 14, 14]),
        (gathered, vec![6, 32, 14, 14], vec![16, 32, 3, 3]),
    ] {
        let x = Tensor::from_fn(&TensorType::new(DType::F32, xs), |i| (i as f64 * 0.37).sin());
        let w = Tensor::from_fn(&TensorType::new(DType::F32, ws), |i| (i as f64 * 0.11).cos());
        let multi = run(&p, &x, &w);
        let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
        let single = pool.install(|| run(&p, &x, &w));
        assert_eq!(multi, single);
        for (g, r) in multi.to_f64_vec().iter().zip(reference(&p, &x, &w).1) {
            assert!((g - r).abs() <= 1e-4 * r.abs().max(1.0), "{g} vs {r}");
        }
    }
}

/// Small images fill im2col through the plan's gather table (output rows
/// shorter than 16), longer rows by copying runs: both sides of the
/// threshold, in 1-3 spatial dims, with strides, padding (negative too),
/// both dilations, groups and batch sizes 1 to 5 and 8, exact against the
/// reference in f32 and f64 and the same on 1 and 2 threads. The weight
/// gradient shapes (few output positions, many taps: the swapped plan, whose
/// rows are gathered the same way) are among them.
#[test]
fn small_images_gather_and_row_runs_match_the_reference() {
    let threads = |n: usize| rayon::ThreadPoolBuilder::new().num_threads(n).build().unwrap();
    let mut cases: Vec<(ConvGeneral, Vec<usize>, Vec<usize>)> = Vec::new();
    // Batch 8 takes the wide form (the batch in the product's columns) where
    // the plan gathers; 1 and 3 the per-element and swapped forms as well;
    // 2, 4 and 5 the wide form's fixed-size and general piece copies.
    for n in [1, 2, 3, 4, 5, 8] {
        for width in [4, 7, 8, 15, 16, 17] {
            cases.push((conv(&[1, 1], &[(1, 1), (1, 1)], &[1, 1], &[1, 1], 1), vec![n, 3, 5, width], vec![4, 3, 3, 3]));
            cases.push((conv(&[2, 2], &[(1, 0), (0, 1)], &[1, 1], &[1, 1], 1), vec![n, 2, 6, width], vec![2, 2, 3, 2]));
            cases.push((
                conv(&[1, 2], &[(2, 1), (-1, 2)], &[1, 1], &[2, 1], 2),
                vec![n, 4, 7, width],
                vec![6, 2, 2, 3],
            ));
            cases.push((conv(&[1, 1], &[(0, 0), (1, 1)], &[2, 1], &[1, 2], 1), vec![n, 2, 3, width], vec![3, 2, 2, 2]));
            cases.push((conv(&[1], &[(1, 1)], &[1], &[1], 1), vec![n, 3, width], vec![5, 3, 3]));
            cases.push((
                conv(&[2, 1, 1], &[(1, 1), (0, 0), (1, 1)], &[1, 1, 1], &[1, 1, 1], 1),
                vec![n, 2, 3, 4, width],
                vec![3, 2, 2, 2, 3],
            ));
            // Weight-gradient shape: the "kernel" covers most of the image.
            cases.push((
                conv(&[1, 1], &[(1, 1), (1, 1)], &[1, 1], &[1, 1], 1),
                vec![n, 5, 6, width],
                vec![2, 5, 6, width],
            ));
        }
    }
    for (p, xs, ws) in cases {
        check(&p, &xs, &ws);
        let (x, w) = (data(DType::F32, &xs, 3), data(DType::F32, &ws, 4));
        let one = threads(1).install(|| run(&p, &x, &w));
        assert_eq!(threads(2).install(|| run(&p, &x, &w)), one, "{p:?} {xs:?} {ws:?}");
    }
}

/// `t` with its two leading dims swapped when `swap` (a canonical operand
/// to its stored form in a swapped layout, and back).
fn swap01(t: &Tensor, swap: bool) -> Tensor {
    if !swap {
        return t.clone();
    }
    let mut shape = t.shape().to_vec();
    shape.swap(0, 1);
    let v = t.to_f64_vec();
    Tensor::from_fn(&TensorType::new(t.dtype(), shape.clone()), |i| {
        let mut idx = unravel(i, &shape);
        idx.swap(0, 1);
        v[ravel(&idx, t.shape())]
    })
}

/// Every layout with the canonical operand shapes `xs`, `ws`: the stored
/// operands are the canonical data with swapped dims, and the result, read
/// back in canonical order, equals the reference exactly (f32 and f64) and
/// is the same on 1 and 2 threads.
fn check_layouts(p: &ConvGeneral, xs: &[usize], ws: &[usize]) {
    let threads = |n: usize| rayon::ThreadPoolBuilder::new().num_threads(n).build().unwrap();
    for bits in 0..8u8 {
        let layout = ConvLayout { lhs_cn: bits & 1 != 0, rhs_io: bits & 2 != 0, out_cn: bits & 4 != 0 };
        let q = ConvGeneral { layout, ..p.clone() };
        for dt in [DType::F32, DType::F64] {
            let (x, w) = (data(dt, xs, 7), data(dt, ws, 8));
            let (shape, want) = reference(p, &x, &w);
            let (xq, wq) = (swap01(&x, layout.lhs_cn), swap01(&w, layout.rhs_io));
            let inferred = q.infer(&[xq.ty(), wq.ty()]).unwrap().remove(0);
            let y = threads(1).install(|| run(&q, &xq, &wq));
            assert_eq!(y.ty(), inferred, "{q:?}");
            let yc = swap01(&y, layout.out_cn);
            assert_eq!(yc.shape(), &shape[..], "{q:?} {xs:?} {ws:?}");
            assert_eq!(yc.to_f64_vec(), want, "{dt} {q:?} {xs:?} {ws:?}");
            assert_eq!(threads(2).install(|| run(&q, &xq, &wq)), y, "{q:?} {xs:?} {ws:?}");
        }
    }
}

/// Swapped layouts ([`ConvLayout`]) compute the canonical convolution of
/// the same data: the weight-gradient kernel (all swapped, ungrouped) with
/// its forward plan gathering small images, copying runs of wide ones and
/// skipping im2col for a 1x1 forward window, its batch in one chunk or
/// several; the scratch-copy path for the
/// other layouts and for groups; 0-3 spatial dims; empty batches and
/// channels.
#[test]
fn swapped_layouts_match_the_reference() {
    let cases: Vec<(ConvGeneral, Vec<usize>, Vec<usize>)> = vec![
        // The weight gradient of a 3x3 pad-1 convolution of 6x5 images (batch 4).
        (conv(&[1, 1], &[(1, 1), (1, 1)], &[1, 1], &[1, 1], 1), vec![3, 4, 6, 5], vec![2, 4, 6, 5]),
        // ... of rows wider than the gather threshold.
        (conv(&[1, 1], &[(1, 1), (1, 1)], &[1, 1], &[1, 1], 1), vec![3, 2, 4, 19], vec![2, 2, 4, 19]),
        // ... of a stride-2 convolution (rhs dilation 2), odd sizes cropped.
        (conv(&[1, 1], &[(1, 0), (1, 0)], &[1, 1], &[2, 2], 1), vec![2, 3, 7, 6], vec![3, 3, 3, 3]),
        // A batch of 19: three chunks of the weight gradient's partial sums.
        (conv(&[1, 1], &[(1, 1), (0, 1)], &[1, 1], &[2, 1], 1), vec![2, 19, 6, 5], vec![3, 19, 2, 3]),
        // A 1x1 forward window: the weight gradient multiplies the input as it is.
        (conv(&[1, 1], &[(0, 0), (0, 0)], &[1, 1], &[1, 1], 1), vec![2, 3, 5, 5], vec![4, 3, 5, 5]),
        // Strides, lhs dilation, negative padding, 1-D and 3-D.
        (conv(&[2], &[(2, -1)], &[2], &[1], 1), vec![2, 3, 9], vec![4, 3, 3]),
        (
            conv(&[1, 2, 1], &[(0, 1), (1, 1), (0, 0)], &[1, 1, 1], &[1, 1, 2], 1),
            vec![2, 2, 3, 4, 5],
            vec![3, 2, 2, 2, 2],
        ),
        // Groups (and depthwise): the scratch-copy path for every layout.
        (conv(&[1, 1], &[(1, 1), (0, 0)], &[1, 1], &[1, 1], 2), vec![3, 4, 5, 4], vec![6, 2, 3, 2]),
        (conv(&[1], &[(1, 1)], &[1], &[1], 3), vec![2, 3, 6], vec![3, 1, 3]),
        // 0 spatial dims (a grouped product), empty batch, empty channels.
        (conv(&[], &[], &[], &[], 1), vec![3, 4], vec![5, 4]),
        (conv(&[1], &[(0, 0)], &[1], &[1], 1), vec![0, 3, 5], vec![2, 3, 2]),
        (conv(&[1], &[(0, 0)], &[1], &[1], 1), vec![2, 0, 5], vec![3, 0, 2]),
    ];
    for (p, xs, ws) in cases {
        check_layouts(&p, &xs, &ws);
    }
}

#[test]
fn params_print() {
    let p = conv(&[1, 2], &[(0, 0), (1, -1)], &[1, 1], &[2, 1], 3);
    assert_eq!(
        display_prim(&p),
        "conv_general[strides=(1,2), padding=((0,0),(1,-1)), lhs_dilation=(1,1), rhs_dilation=(2,1), feature_group_count=3]"
    );
    let q = ConvGeneral { layout: ConvLayout::WEIGHT_GRAD, ..ConvGeneral::unit(1) };
    assert_eq!(
        display_prim(&q),
        "conv_general[strides=(1), padding=((0,0)), lhs_dilation=(1), rhs_dilation=(1), feature_group_count=1, \
         layout=(CN, IO, CN)]"
    );
    // A swapped layout's type errors name the operands as given.
    let f = |s: &[usize]| TensorType::new(DType::F32, s.to_vec());
    let e = type_err(&q, f(&[2, 3, 5]), f(&[2, 4, 6]));
    assert!(e.contains("after swapping the layout's leading dims"), "{e}");
}

fn type_err(p: &ConvGeneral, x: TensorType, w: TensorType) -> String {
    let mut b = Builder::new("f");
    let (px, pw) = (b.param(x.clone()), b.param(w.clone()));
    let e = b.conv_general(px, pw, p.clone()).unwrap_err();
    let IrError::Type(te) = &e else { panic!("expected a type error, got {e:?}") };
    assert_eq!(te.prim, display_prim(p));
    assert!(te.prim.starts_with("conv_general["));
    assert_eq!(te.operands, vec![x, w]);
    te.expected.clone()
}

#[test]
fn shape_errors_are_structured() {
    let f = |s: &[usize]| TensorType::new(DType::F32, s.to_vec());
    let u2 = ConvGeneral::unit(2);
    let i = |s: &[usize]| TensorType::new(DType::I32, s.to_vec());
    assert!(type_err(&u2, i(&[1, 1, 3, 3]), i(&[1, 1, 2, 2])).contains("floating-point"));
    assert!(type_err(&u2, f(&[1, 1, 3, 3]), TensorType::new(DType::F64, vec![1, 1, 2, 2])).contains("same dtype"));
    assert!(type_err(&u2, f(&[1, 1, 3, 3]), f(&[1, 1, 2])).contains("equal rank"));
    assert!(type_err(&conv(&[], &[], &[], &[], 1), f(&[3]), f(&[3])).contains("equal rank >= 2"));
    assert!(type_err(&ConvGeneral::unit(1), f(&[1, 1, 3, 3]), f(&[1, 1, 2, 2])).contains("2 entries"));
    assert!(type_err(&conv(&[0, 1], &[(0, 0); 2], &[1, 1], &[1, 1], 1), f(&[1, 1, 3, 3]), f(&[1, 1, 2, 2]))
        .contains("strides and dilations >= 1"));
    assert!(type_err(&conv(&[1, 1], &[(0, 0); 2], &[1, 1], &[1, 0], 1), f(&[1, 1, 3, 3]), f(&[1, 1, 2, 2]))
        .contains("strides and dilations >= 1"));
    assert!(type_err(&conv(&[1, 1], &[(0, 0); 2], &[1, 1], &[1, 1], 0), f(&[1, 2, 3, 3]), f(&[1, 2, 2, 2]))
        .contains("feature_group_count >= 1"));
    assert!(type_err(&u2, f(&[1, 3, 3, 3]), f(&[1, 2, 2, 2])).contains("input channels (3)"));
    assert!(type_err(&conv(&[1, 1], &[(0, 0); 2], &[1, 1], &[1, 1], 2), f(&[1, 4, 3, 3]), f(&[3, 2, 2, 2]))
        .contains("divisible"));
    assert!(type_err(&u2, f(&[1, 1, 3, 3]), f(&[1, 1, 4, 2])).contains("non-empty"));
    assert!(type_err(&conv(&[1, 1], &[(-2, 0), (0, 0)], &[1, 1], &[1, 1], 1), f(&[1, 1, 3, 3]), f(&[1, 1, 2, 2]))
        .contains("non-empty"));
    assert!(type_err(&conv(&[1, 1], &[(0, 0); 2], &[1, 1], &[2, 1], 1), f(&[1, 1, 3, 3]), f(&[1, 1, 3, 2]))
        .contains("non-empty"));
    assert!(type_err(&u2, f(&[1, 1, 3, 3]), f(&[1, 1, 0, 2])).contains("kernel spatial dim 0"));
    let e = u2.infer(&[f(&[1, 1, 3, 3])]).unwrap_err();
    assert_eq!(e.prim, display_prim(&u2));
}

/// A random valid convolution with 0-3 spatial dims.
fn arb_conv() -> impl Strategy<Value = (ConvGeneral, Vec<usize>, Vec<usize>)> {
    let dim = (1usize..=5, 1usize..=3, 1usize..=3, 1usize..=3, 1usize..=3, -2i64..=2, -2i64..=2);
    (0usize..=3, 1usize..=3, 1usize..=2, 1usize..=2, 0usize..=2)
        .prop_flat_map(move |(s, groups, cg, og, n)| (Just((groups, cg, og, n)), prop::collection::vec(dim.clone(), s)))
        .prop_filter_map("output must be non-empty", |((groups, cg, og, n), dims)| {
            let mut p = ConvGeneral::unit(dims.len());
            p.feature_group_count = groups;
            let mut xs = vec![n, groups * cg];
            let mut ws = vec![groups * og, cg];
            for (d, &(inp, k, st, ld, rd, lo, hi)) in dims.iter().enumerate() {
                let padded = ((inp - 1) * ld + 1) as i64 + lo + hi;
                if padded < ((k - 1) * rd + 1) as i64 {
                    return None;
                }
                p.strides[d] = st;
                p.lhs_dilation[d] = ld;
                p.rhs_dilation[d] = rd;
                p.padding[d] = (lo, hi);
                xs.push(inp);
                ws.push(k);
            }
            Some((p, xs, ws))
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(150))]
    #[test]
    fn random_configs_in_random_layouts_match_reference((p, xs, ws) in arb_conv(), bits in 0u8..8) {
        let layout = ConvLayout { lhs_cn: bits & 1 != 0, rhs_io: bits & 2 != 0, out_cn: bits & 4 != 0 };
        let q = ConvGeneral { layout, ..p.clone() };
        let (x, w) = (data(DType::F64, &xs, 9), data(DType::F64, &ws, 10));
        let (shape, want) = reference(&p, &x, &w);
        let y = swap01(&run(&q, &swap01(&x, layout.lhs_cn), &swap01(&w, layout.rhs_io)), layout.out_cn);
        prop_assert_eq!(y.shape(), &shape[..]);
        prop_assert_eq!(y.to_f64_vec(), want);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    #[test]
    fn random_configs_match_reference((p, xs, ws) in arb_conv(), f64_dtype in any::<bool>()) {
        let dt = if f64_dtype { DType::F64 } else { DType::F32 };
        let (x, w) = (data(dt, &xs, 5), data(dt, &ws, 6));
        let inferred = p.infer(&[x.ty(), w.ty()]).unwrap().remove(0);
        let y = run(&p, &x, &w);
        let (shape, want) = reference(&p, &x, &w);
        prop_assert_eq!(&inferred.shape, &shape);
        prop_assert_eq!(y.ty(), inferred);
        prop_assert_eq!(y.to_f64_vec(), want);
    }
}

/// The device form of a swapped layout: transposes around a canonical
/// convolution, nothing swapped left, the same results; a function without
/// one is left alone.
#[test]
fn canonical_layouts_rewrites_swapped_convolutions_only() {
    use graft_core::ops::conv::canonical_layouts;
    let q = ConvGeneral { padding: vec![(1, 1)], layout: ConvLayout::WEIGHT_GRAD, ..ConvGeneral::unit(1) };
    let (x, ct) = (data(DType::F32, &[3, 2, 6], 1), data(DType::F32, &[3, 4, 6], 2));
    let mut b = Builder::new("dw");
    let (px, pc) = (b.param(x.ty()), b.param(ct.ty()));
    let y = b.conv_general(px, pc, q.clone()).unwrap();
    let f = b.finish(&[y]).unwrap();
    let g = canonical_layouts(&f).unwrap().expect("a swapped convolution is rewritten");
    let text = g.to_string();
    assert!(!text.contains("layout="), "{text}");
    assert_eq!(text.matches("transpose").count(), 3, "{text}");
    let want = Executable::new(f).unwrap().run(&[&x, &ct]).unwrap();
    assert_eq!(Executable::new(g).unwrap().run(&[&x, &ct]).unwrap(), want);
    let mut b = Builder::new("plain");
    let (px, pw) = (b.param(x.ty()), b.param(TensorType::new(DType::F32, vec![4, 2, 3])));
    let y = b.conv_general(px, pw, ConvGeneral::unit(1)).unwrap();
    assert!(canonical_layouts(&b.finish(&[y]).unwrap()).unwrap().is_none());
}
