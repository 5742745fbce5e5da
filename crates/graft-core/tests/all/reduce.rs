//! Forward tests of `reduce_*` and `argmax`/`argmin` against naive reference
//! loops, edge cases (empty axes, size-0 dims, NaN, ties, overflow), the
//! parallel paths, thread-count determinism, and every shape-rule error.

use graft_core::ops::reduce::{ArgKind, ArgReduce, Reduce, ReduceKind};
use graft_core::ops::{display_prim, Op};
use graft_core::{Builder, DType, Executable, IrError, Tensor, TensorType, Value};
use proptest::prelude::*;

/// Builds `f(param)`, runs it on `x`, and checks the inferred output type
/// equals the type of the tensor the kernel produced.
fn run(x: &Tensor, f: impl FnOnce(&mut Builder, Value) -> Result<Value, IrError>) -> Tensor {
    let mut b = Builder::new("f");
    let p = b.param(x.ty());
    let y = f(&mut b, p).unwrap();
    let func = b.finish(&[y]).unwrap();
    let inferred = func.ty(y).clone();
    let out = Executable::new(func).unwrap().run(&[x]).unwrap().remove(0);
    assert_eq!(out.ty(), inferred, "inferred type differs from the produced tensor");
    out
}

fn red(kind: ReduceKind, x: &Tensor, axes: &[usize]) -> Tensor {
    run(x, |b, p| b.reduce(kind, p, axes))
}

fn arg(kind: ArgKind, x: &Tensor, axis: usize, idx: DType) -> Tensor {
    run(x, |b, p| match kind {
        ArgKind::ArgMax => b.argmax(p, axis, idx),
        ArgKind::ArgMin => b.argmin(p, axis, idx),
    })
}

fn identity(kind: ReduceKind) -> f64 {
    match kind {
        ReduceKind::Sum => 0.0,
        ReduceKind::Prod => 1.0,
        ReduceKind::Max => f64::NEG_INFINITY,
        ReduceKind::Min => f64::INFINITY,
    }
}

fn combine(kind: ReduceKind, a: f64, b: f64) -> f64 {
    match kind {
        ReduceKind::Sum => a + b,
        ReduceKind::Prod => a * b,
        ReduceKind::Max if a.is_nan() || b.is_nan() => f64::NAN,
        ReduceKind::Min if a.is_nan() || b.is_nan() => f64::NAN,
        ReduceKind::Max => a.max(b),
        ReduceKind::Min => a.min(b),
    }
}

/// Naive reduction in f64: (output shape, values). Walks every input
/// element and adds it into its output slot.
fn ref_reduce(kind: ReduceKind, shape: &[usize], data: &[f64], axes: &[usize]) -> (Vec<usize>, Vec<f64>) {
    let oshape: Vec<usize> = (0..shape.len()).filter(|d| !axes.contains(d)).map(|d| shape[d]).collect();
    // Output stride of each input dim (0 for reduced dims).
    let mut ostride = vec![0; shape.len()];
    let mut acc = 1;
    for d in (0..shape.len()).rev() {
        if !axes.contains(&d) {
            ostride[d] = acc;
            acc *= shape[d];
        }
    }
    let mut out = vec![identity(kind); oshape.iter().product()];
    for (flat, &v) in data.iter().enumerate() {
        let (mut rem, mut o) = (flat, 0);
        for d in (0..shape.len()).rev() {
            o += (rem % shape[d]) * ostride[d];
            rem /= shape[d];
        }
        out[o] = combine(kind, out[o], v);
    }
    (oshape, out)
}

/// Naive arg-reduction: first index of the extreme, NaN most extreme.
fn ref_arg(kind: ArgKind, shape: &[usize], data: &[f64], axis: usize) -> (Vec<usize>, Vec<i64>) {
    let mut oshape = shape.to_vec();
    oshape.remove(axis);
    let inner: usize = shape[axis + 1..].iter().product();
    let n = shape[axis];
    let mut out = vec![0i64; oshape.iter().product()];
    for (o, slot) in out.iter_mut().enumerate() {
        let (outer_i, inner_i) = (o / inner, o % inner);
        let mut best: Option<(f64, usize)> = None;
        for k in 0..n {
            let v = data[(outer_i * n + k) * inner + inner_i];
            best = match best {
                None => Some((v, k)),
                Some((b, _)) if b.is_nan() => best,
                Some(_) if v.is_nan() => Some((v, k)),
                Some((b, _)) => {
                    let better = match kind {
                        ArgKind::ArgMax => v > b,
                        ArgKind::ArgMin => v < b,
                    };
                    if better {
                        Some((v, k))
                    } else {
                        best
                    }
                }
            };
        }
        *slot = best.expect("reference needs a non-empty axis").1 as i64;
    }
    (oshape, out)
}

fn assert_close(got: &[f64], want: &[f64], rel: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= rel * w.abs().max(1.0);
        assert!(ok, "{what}: element {i}: got {g}, want {w}");
    }
}

const M23: [f64; 6] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];

#[test]
fn hand_computed_reductions_in_every_numeric_dtype() {
    let cases: [(ReduceKind, &[usize], &[usize], &[f64]); 12] = [
        (ReduceKind::Sum, &[0], &[3], &[5.0, 7.0, 9.0]),
        (ReduceKind::Sum, &[1], &[2], &[6.0, 15.0]),
        (ReduceKind::Sum, &[0, 1], &[], &[21.0]),
        (ReduceKind::Max, &[0], &[3], &[4.0, 5.0, 6.0]),
        (ReduceKind::Max, &[1], &[2], &[3.0, 6.0]),
        (ReduceKind::Max, &[0, 1], &[], &[6.0]),
        (ReduceKind::Min, &[0], &[3], &[1.0, 2.0, 3.0]),
        (ReduceKind::Min, &[1], &[2], &[1.0, 4.0]),
        (ReduceKind::Min, &[0, 1], &[], &[1.0]),
        (ReduceKind::Prod, &[0], &[3], &[4.0, 10.0, 18.0]),
        (ReduceKind::Prod, &[1], &[2], &[6.0, 120.0]),
        (ReduceKind::Prod, &[0, 1], &[], &[720.0]),
    ];
    for dtype in [DType::F64, DType::F32, DType::I32, DType::I64] {
        let x = Tensor::from_vec(vec![2, 3], M23.to_vec()).unwrap().cast(dtype);
        for (kind, axes, shape, want) in cases {
            let y = red(kind, &x, axes);
            assert_eq!(y.dtype(), dtype);
            assert_eq!(y.shape(), shape, "{kind:?} {axes:?} {dtype}");
            assert_eq!(y.to_f64_vec(), want, "{kind:?} {axes:?} {dtype}");
        }
    }
}

#[test]
fn bool_max_is_any_and_min_is_all() {
    let x = Tensor::from_vec(vec![2, 3], vec![true, false, false, true, true, true]).unwrap();
    assert_eq!(red(ReduceKind::Max, &x, &[1]).to_vec::<bool>().unwrap(), vec![true, true]);
    assert_eq!(red(ReduceKind::Min, &x, &[1]).to_vec::<bool>().unwrap(), vec![false, true]);
    assert_eq!(red(ReduceKind::Max, &x, &[0]).to_vec::<bool>().unwrap(), vec![true, true, true]);
    assert_eq!(red(ReduceKind::Min, &x, &[0]).to_vec::<bool>().unwrap(), vec![true, false, false]);
    let e = Tensor::from_vec(vec![0, 2], Vec::<bool>::new()).unwrap();
    assert_eq!(red(ReduceKind::Max, &e, &[0]).to_vec::<bool>().unwrap(), vec![false, false]);
    assert_eq!(red(ReduceKind::Min, &e, &[0]).to_vec::<bool>().unwrap(), vec![true, true]);
}

#[test]
fn empty_axes_copy_and_rank0() {
    let x = Tensor::from_vec(vec![2, 3], M23.to_vec()).unwrap();
    for kind in ReduceKind::ALL {
        let y = red(kind, &x, &[]);
        assert_eq!(y, x);
    }
    let s = Tensor::scalar(7.5f32);
    assert_eq!(red(ReduceKind::Sum, &s, &[]), s);
    // Reducing only size-1 axes is a copy with those axes removed.
    let x = Tensor::from_vec(vec![1, 3, 1], vec![4i64, -2, 9]).unwrap();
    let y = red(ReduceKind::Prod, &x, &[0, 2]);
    assert_eq!(y.shape(), &[3]);
    assert_eq!(y.to_vec::<i64>().unwrap(), vec![4, -2, 9]);
}

#[test]
fn reducing_an_empty_axis_gives_the_identity() {
    let f = TensorType::new(DType::F64, vec![2, 0, 3]);
    let x = Tensor::zeros(&f);
    for kind in ReduceKind::ALL {
        let y = red(kind, &x, &[1]);
        assert_eq!(y.shape(), &[2, 3]);
        assert!(y.to_f64_vec().iter().all(|&v| v == identity(kind)), "{kind:?}");
    }
    let x32 = Tensor::zeros(&f.with_dtype(DType::F32));
    assert_eq!(red(ReduceKind::Max, &x32, &[0, 1, 2]).to_vec::<f32>().unwrap(), vec![f32::NEG_INFINITY]);
    let xi = Tensor::zeros(&f.with_dtype(DType::I32));
    assert_eq!(red(ReduceKind::Max, &xi, &[1]).to_vec::<i32>().unwrap(), vec![i32::MIN; 6]);
    assert_eq!(red(ReduceKind::Min, &xi, &[1]).to_vec::<i32>().unwrap(), vec![i32::MAX; 6]);
    assert_eq!(red(ReduceKind::Prod, &xi, &[1]).to_vec::<i32>().unwrap(), vec![1; 6]);
    let xl = Tensor::zeros(&f.with_dtype(DType::I64));
    assert_eq!(red(ReduceKind::Max, &xl, &[1]).to_vec::<i64>().unwrap(), vec![i64::MIN; 6]);
    assert_eq!(red(ReduceKind::Min, &xl, &[1]).to_vec::<i64>().unwrap(), vec![i64::MAX; 6]);
    // Empty output: nothing to compute, shape still right.
    let y = red(ReduceKind::Sum, &x, &[2]);
    assert_eq!(y.shape(), &[2, 0]);
    assert_eq!(y.numel(), 0);
}

#[test]
fn max_and_min_propagate_nan_everywhere() {
    for n in [1usize, 7, 8, 9, 300, 1000] {
        for pos in [0, n / 2, n - 1] {
            let mut v: Vec<f64> = (0..n).map(|i| i as f64).collect();
            v[pos] = f64::NAN;
            for dtype in [DType::F64, DType::F32] {
                let x = Tensor::vec1(&v).cast(dtype);
                for kind in [ReduceKind::Max, ReduceKind::Min, ReduceKind::Sum] {
                    let y = red(kind, &x, &[0]).to_scalar_f64().unwrap();
                    assert!(y.is_nan(), "{kind:?} n={n} pos={pos} {dtype}: {y}");
                }
            }
            // Column path: NaN in one column only.
            let t = Tensor::from_fn(&TensorType::new(DType::F64, vec![n, 3]), |i| {
                if i == pos * 3 + 1 {
                    f64::NAN
                } else {
                    i as f64
                }
            });
            let y = red(ReduceKind::Max, &t, &[0]).to_f64_vec();
            assert!(!y[0].is_nan() && y[1].is_nan() && !y[2].is_nan(), "{y:?}");
            let y = red(ReduceKind::Min, &t, &[0]).to_f64_vec();
            assert!(y[0] == 0.0 && y[1].is_nan() && y[2] == 2.0, "{y:?}");
        }
    }
    let inf = Tensor::vec1(&[f64::NEG_INFINITY, f64::NEG_INFINITY]);
    assert_eq!(red(ReduceKind::Max, &inf, &[0]).to_scalar_f64().unwrap(), f64::NEG_INFINITY);
}

#[test]
fn integer_sums_and_products_wrap() {
    let x = Tensor::vec1(&[i32::MAX, 1, 1]);
    assert_eq!(red(ReduceKind::Sum, &x, &[0]).to_vec::<i32>().unwrap(), vec![i32::MIN + 1]);
    let x = Tensor::vec1(&[65536i32, 65536, 3]);
    assert_eq!(red(ReduceKind::Prod, &x, &[0]).to_vec::<i32>().unwrap(), vec![0]);
    let x = Tensor::vec1(&[i64::MAX, 2]);
    assert_eq!(red(ReduceKind::Sum, &x, &[0]).to_vec::<i64>().unwrap(), vec![i64::MIN + 1]);
}

#[test]
fn negative_zero_sum_keeps_its_sign() {
    let x = Tensor::vec1(&[-0.0f64, -0.0, -0.0]);
    let y = red(ReduceKind::Sum, &x, &[0]).to_scalar_f64().unwrap();
    assert!(y == 0.0 && y.is_sign_negative());
}

#[test]
fn f32_sums_are_pairwise_accurate() {
    let n = 1_000_000;
    let x = Tensor::full(&TensorType::new(DType::F32, vec![n]), 0.1);
    let y = red(ReduceKind::Sum, &x, &[0]).to_scalar_f64().unwrap();
    let want = n as f64 * (0.1f32 as f64);
    // A sequential f32 loop is off by about 1%; pairwise stays near 1e-7.
    assert!((y - want).abs() / want < 1e-5, "{y} vs {want}");
    // Same along a leading axis (the row-block path).
    let x = Tensor::full(&TensorType::new(DType::F32, vec![200_000, 3]), 0.1);
    let y = red(ReduceKind::Sum, &x, &[0]).to_f64_vec();
    let want = 200_000.0 * (0.1f32 as f64);
    for v in y {
        assert!((v - want).abs() / want < 1e-5, "{v} vs {want}");
    }
}

fn pseudo(i: usize) -> f64 {
    // Deterministic values in [-1, 1) with no structure the kernel could exploit.
    let h = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 11;
    (h as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
}

#[test]
fn large_inputs_take_parallel_paths_correctly() {
    let cases: [(&[usize], &[usize]); 7] = [
        (&[1_000_003], &[0]),
        (&[7, 50_001], &[1]),
        (&[50_001, 7], &[0]),
        (&[3, 40_001, 5], &[0, 2]),
        (&[3, 40_001, 5], &[1]),
        (&[33, 2_501, 3], &[0, 1, 2]),
        (&[2, 300, 2051], &[1]),
    ];
    for (shape, axes) in cases {
        let ty = TensorType::new(DType::F64, shape.to_vec());
        let x = Tensor::from_fn(&ty, pseudo);
        let data = x.to_f64_vec();
        for kind in [ReduceKind::Sum, ReduceKind::Max, ReduceKind::Min] {
            let (oshape, want) = ref_reduce(kind, shape, &data, axes);
            let y = red(kind, &x, axes);
            assert_eq!(y.shape(), oshape.as_slice());
            let tol = if kind == ReduceKind::Sum { 1e-9 } else { 0.0 };
            assert_close(&y.to_f64_vec(), &want, tol, &format!("{kind:?} {shape:?} {axes:?}"));
            let x32 = x.cast(DType::F32);
            let data32 = x32.to_f64_vec();
            let (_, want32) = ref_reduce(kind, shape, &data32, axes);
            let tol = if kind == ReduceKind::Sum { 1e-3 } else { 0.0 };
            assert_close(&red(kind, &x32, axes).to_f64_vec(), &want32, tol, &format!("f32 {kind:?} {shape:?}"));
        }
        // Integers: exact.
        let xi = Tensor::from_fn(&ty.with_dtype(DType::I64), |i| (pseudo(i) * 1000.0).round());
        let (_, want) = ref_reduce(ReduceKind::Sum, shape, &xi.to_f64_vec(), axes);
        assert_eq!(red(ReduceKind::Sum, &xi, axes).to_f64_vec(), want);
    }
}

fn with_threads<R: Send>(n: usize, f: impl FnOnce() -> R + Send) -> R {
    rayon::ThreadPoolBuilder::new().num_threads(n).build().unwrap().install(f)
}

#[test]
fn float_sums_are_bitwise_identical_for_any_thread_count() {
    let cases: [(&[usize], &[usize]); 4] =
        [(&[1_000_003], &[0]), (&[300_007, 3], &[0]), (&[5, 70_001], &[1]), (&[9, 3001, 13], &[0, 2])];
    for (shape, axes) in cases {
        for dtype in [DType::F32, DType::F64] {
            let x = Tensor::from_fn(&TensorType::new(dtype, shape.to_vec()), |i| pseudo(i) * 1e3);
            let one = with_threads(1, || red(ReduceKind::Sum, &x, axes));
            let three = with_threads(3, || red(ReduceKind::Sum, &x, axes));
            let eight = with_threads(8, || red(ReduceKind::Sum, &x, axes));
            assert_eq!(one, three, "{shape:?} {dtype}");
            assert_eq!(one, eight, "{shape:?} {dtype}");
        }
    }
}

#[test]
fn argmax_argmin_hand_cases_with_ties() {
    let x = Tensor::from_vec(vec![2, 3], vec![1.0, 3.0, 3.0, 5.0, 0.0, 5.0]).unwrap();
    for dtype in [DType::F64, DType::F32, DType::I32, DType::I64] {
        let x = x.cast(dtype);
        for idx in [DType::I32, DType::I64] {
            let y = arg(ArgKind::ArgMax, &x, 1, idx);
            assert_eq!(y.dtype(), idx);
            assert_eq!(y.shape(), &[2]);
            assert_eq!(y.to_f64_vec(), vec![1.0, 0.0]);
            assert_eq!(arg(ArgKind::ArgMin, &x, 1, idx).to_f64_vec(), vec![0.0, 1.0]);
            assert_eq!(arg(ArgKind::ArgMax, &x, 0, idx).to_f64_vec(), vec![1.0, 0.0, 1.0]);
            assert_eq!(arg(ArgKind::ArgMin, &x, 0, idx).to_f64_vec(), vec![0.0, 1.0, 0.0]);
        }
    }
    // All equal: first index.
    let x = Tensor::vec1(&[2i32, 2, 2]);
    assert_eq!(arg(ArgKind::ArgMax, &x, 0, DType::I64).to_vec::<i64>().unwrap(), vec![0]);
    assert_eq!(arg(ArgKind::ArgMin, &x, 0, DType::I64).to_vec::<i64>().unwrap(), vec![0]);
    // Size-1 axis and empty other dims.
    let x = Tensor::from_vec(vec![3, 1], vec![1.0f32, 2.0, 3.0]).unwrap();
    assert_eq!(arg(ArgKind::ArgMax, &x, 1, DType::I32).to_vec::<i32>().unwrap(), vec![0, 0, 0]);
    let e = Tensor::zeros(&TensorType::new(DType::F64, vec![0, 4]));
    let y = arg(ArgKind::ArgMin, &e, 1, DType::I32);
    assert_eq!(y.shape(), &[0]);
}

#[test]
fn argmax_first_nan_wins() {
    let x = Tensor::vec1(&[1.0, f64::NAN, 3.0, f64::NAN]);
    for dtype in [DType::F64, DType::F32] {
        let x = x.cast(dtype);
        assert_eq!(arg(ArgKind::ArgMax, &x, 0, DType::I64).to_vec::<i64>().unwrap(), vec![1]);
        assert_eq!(arg(ArgKind::ArgMin, &x, 0, DType::I64).to_vec::<i64>().unwrap(), vec![1]);
    }
    // Column path.
    let x = Tensor::from_vec(vec![3, 2], vec![1.0, 5.0, f64::NAN, 9.0, 2.0, f64::NAN]).unwrap();
    assert_eq!(arg(ArgKind::ArgMax, &x, 0, DType::I32).to_vec::<i32>().unwrap(), vec![1, 2]);
    assert_eq!(arg(ArgKind::ArgMin, &x, 0, DType::I32).to_vec::<i32>().unwrap(), vec![1, 2]);
    // Infinities are ordinary extremes.
    let x = Tensor::vec1(&[0.0, f64::INFINITY, f64::NEG_INFINITY, f64::INFINITY]);
    assert_eq!(arg(ArgKind::ArgMax, &x, 0, DType::I32).to_vec::<i32>().unwrap(), vec![1]);
    assert_eq!(arg(ArgKind::ArgMin, &x, 0, DType::I32).to_vec::<i32>().unwrap(), vec![2]);
}

#[test]
fn argmax_large_parallel_paths() {
    let n = 1_000_003;
    // Repeated maximum and a NaN late in the line: the first of each must win.
    let mut v: Vec<f64> = (0..n).map(pseudo).collect();
    v[123_457] = 5.0;
    v[900_001] = 5.0;
    v[654_321] = -5.0;
    v[999_999] = -5.0;
    let x = Tensor::vec1(&v);
    for threads in [1, 4] {
        let (a, b) = with_threads(threads, || {
            (arg(ArgKind::ArgMax, &x, 0, DType::I64), arg(ArgKind::ArgMin, &x, 0, DType::I32))
        });
        assert_eq!(a.to_vec::<i64>().unwrap(), vec![123_457]);
        assert_eq!(b.to_vec::<i32>().unwrap(), vec![654_321]);
    }
    v[700_000] = f64::NAN;
    v[800_000] = f64::NAN;
    let x = Tensor::vec1(&v);
    assert_eq!(arg(ArgKind::ArgMax, &x, 0, DType::I64).to_vec::<i64>().unwrap(), vec![700_000]);
    for (shape, axis) in
        [(vec![3001usize, 40], 0usize), (vec![40, 3001], 1), (vec![3, 301, 2050], 1), (vec![2, 40_000], 0)]
    {
        let ty = TensorType::new(DType::F32, shape.clone());
        let x = Tensor::from_fn(&ty, |i| (pseudo(i) * 50.0).round());
        let data = x.to_f64_vec();
        for kind in [ArgKind::ArgMax, ArgKind::ArgMin] {
            let (oshape, want) = ref_arg(kind, &shape, &data, axis);
            let y = arg(kind, &x, axis, DType::I64);
            assert_eq!(y.shape(), oshape.as_slice());
            assert_eq!(y.to_vec::<i64>().unwrap(), want, "{kind:?} {shape:?} axis {axis}");
        }
    }
}

#[test]
fn argmax_blocks_lanes_ties_and_nans_match_reference() {
    // Lengths around the 16-lane and 2048-element block boundaries, values
    // with many ties, and NaNs at chosen places (first lanes, block edges, tail).
    for n in [1usize, 2, 15, 16, 17, 33, 2047, 2048, 2049, 4096, 5000] {
        let base: Vec<f64> = (0..n).map(|i| (pseudo(i * 31 + n) * 4.0).round()).collect();
        let mut variants = vec![base.clone()];
        for pos in [0, 3, 15, 16, n / 2, 2047, 2048, n - 1] {
            if pos < n {
                let mut v = base.clone();
                v[pos] = f64::NAN;
                if pos + 7 < n {
                    v[pos + 7] = f64::NAN;
                }
                variants.push(v);
            }
        }
        // The extreme value repeated in a later block must not win.
        let mut v = base.clone();
        v[n - 1] = 9.0;
        v[n / 3] = 9.0;
        v[0] = -9.0;
        v[n / 2] = -9.0;
        variants.push(v);
        for v in variants {
            for kind in [ArgKind::ArgMax, ArgKind::ArgMin] {
                let (_, want) = ref_arg(kind, &[n], &v, 0);
                for dtype in [DType::F64, DType::F32] {
                    let x = Tensor::vec1(&v).cast(dtype);
                    assert_eq!(arg(kind, &x, 0, DType::I64).to_vec::<i64>().unwrap(), want, "{kind:?} n={n} {dtype}");
                }
                if v.iter().all(|x| !x.is_nan()) {
                    let x = Tensor::vec1(&v).cast(DType::I32);
                    assert_eq!(arg(kind, &x, 0, DType::I32).to_f64_vec(), vec![want[0] as f64], "{kind:?} n={n} i32");
                }
            }
        }
    }
}

/// Rows shorter than 16 (`argmin` over k-means' 10 centroids) run eight
/// rows at a time: the reference's first extreme, first NaN and ties
/// (signed zeros compare equal, so the first zero wins) for row counts
/// that fill whole blocks of eight or leave a remainder, with NaNs in
/// some blocks only, for every float and integer dtype, serially and on
/// the parallel path.
#[test]
fn arg_short_rows_match_reference() {
    for (rows, r) in [(1000usize, 10usize), (8, 15), (13, 2), (3, 7), (40_000, 9), (17, 1)] {
        let mut v: Vec<f64> = (0..rows * r).map(|i| (pseudo(i * 7 + r) * 3.0).round()).collect();
        // Signed zeros, a NaN in row 1 and row 9, two NaNs in one row, an
        // infinity: each only in some blocks of eight rows.
        for (at, x) in [
            (0, -0.0),
            (1, 0.0),
            (r + 1, f64::NAN),
            (9 * r, f64::NAN),
            (9 * r + r - 1, f64::NAN),
            (4 * r, f64::INFINITY),
        ] {
            if at < v.len() {
                v[at] = x;
            }
        }
        for kind in [ArgKind::ArgMax, ArgKind::ArgMin] {
            let (_, want) = ref_arg(kind, &[rows, r], &v, 1);
            for dtype in [DType::F64, DType::F32] {
                let x = Tensor::from_vec(vec![rows, r], v.clone()).unwrap().cast(dtype);
                assert_eq!(
                    arg(kind, &x, 1, DType::I64).to_vec::<i64>().unwrap(),
                    want,
                    "{kind:?} [{rows}, {r}] {dtype}"
                );
            }
            let ints: Vec<f64> = v.iter().map(|&x| if x.is_finite() { x } else { 5.0 }).collect();
            let (_, want) = ref_arg(kind, &[rows, r], &ints, 1);
            for dtype in [DType::I32, DType::I64] {
                let x = Tensor::from_vec(vec![rows, r], ints.clone()).unwrap().cast(dtype);
                let got = arg(kind, &x, 1, DType::I32).to_f64_vec();
                let want: Vec<f64> = want.iter().map(|&w| w as f64).collect();
                assert_eq!(got, want, "{kind:?} [{rows}, {r}] {dtype}");
            }
        }
    }
}

#[test]
fn params_print() {
    let r = Reduce { kind: ReduceKind::Sum, axes: vec![0, 2] };
    assert_eq!(display_prim(&r), "reduce_sum[axes=(0,2)]");
    let a = ArgReduce { kind: ArgKind::ArgMin, axis: 1, index_dtype: DType::I32 };
    assert_eq!(display_prim(&a), "argmin[axis=1, index_dtype=i32]");
    let names: Vec<&str> = ReduceKind::ALL.iter().map(|&kind| Reduce { kind, axes: vec![] }.name()).collect::<Vec<_>>();
    assert_eq!(names, ["reduce_sum", "reduce_max", "reduce_min", "reduce_prod"]);
}

fn type_err(r: Result<Value, IrError>) -> graft_core::TypeError {
    match r {
        Err(IrError::Type(te)) => te,
        other => panic!("expected a type error, got {other:?}"),
    }
}

#[test]
fn reduce_errors_are_structured() {
    let mut b = Builder::new("f");
    let t = TensorType::new(DType::F32, vec![2, 3, 4]);
    let x = b.param(t.clone());
    for kind in ReduceKind::ALL {
        let te = type_err(b.reduce(kind, x, &[3]));
        assert!(te.prim.starts_with(Reduce { kind, axes: vec![] }.name()), "{}", te.prim);
        assert_eq!(te.operands, vec![t.clone()]);
        assert!(te.expected.contains("out of range"), "{}", te.expected);
    }
    let te = type_err(b.reduce_sum(x, &[2, 0]));
    assert_eq!(te.prim, "reduce_sum[axes=(2,0)]");
    assert!(te.expected.contains("ascending"));
    let te = type_err(b.reduce_max(x, &[1, 1]));
    assert!(te.expected.contains("repeated"));
    let bl = b.param(TensorType::new(DType::Bool, vec![2]));
    let te = type_err(b.reduce_sum(bl, &[0]));
    assert_eq!(te.to_string(), "reduce_sum[axes=(0)]: expected a numeric operand (not bool); got operands (bool[2])");
    assert!(b.reduce_prod(bl, &[0]).is_err());
    let s = b.param(TensorType::scalar(DType::F64));
    assert!(b.reduce_min(s, &[0]).is_err());
    // Arity, through the op directly.
    let r = Reduce { kind: ReduceKind::Sum, axes: vec![] };
    assert!(r.infer(&[t.clone(), t.clone()]).is_err());
    assert!(r.infer(&[]).is_err());
}

#[test]
fn argreduce_errors_are_structured() {
    let mut b = Builder::new("f");
    let t = TensorType::new(DType::F32, vec![2, 0, 4]);
    let x = b.param(t.clone());
    let te = type_err(b.argmax(x, 1, DType::I64));
    assert_eq!(te.prim, "argmax[axis=1, index_dtype=i64]");
    assert!(te.expected.contains("non-empty"));
    let te = type_err(b.argmin(x, 3, DType::I64));
    assert!(te.prim.starts_with("argmin"));
    assert!(te.expected.contains("out of range"));
    let te = type_err(b.argmax(x, 0, DType::F32));
    assert!(te.expected.contains("index_dtype"));
    assert!(b.argmax(x, 0, DType::Bool).is_err());
    let bl = b.param(TensorType::new(DType::Bool, vec![3]));
    let te = type_err(b.argmin(bl, 0, DType::I32));
    assert!(te.expected.contains("numeric"));
    let s = b.param(TensorType::scalar(DType::I32));
    assert!(b.argmax(s, 0, DType::I32).is_err());
    // An axis longer than i32 can index is rejected for i32 (shape only, no data).
    let huge = b.param(TensorType::new(DType::F32, vec![1usize << 32]));
    let te = type_err(b.argmax(huge, 0, DType::I32));
    assert!(te.expected.contains("i64"));
    assert!(b.argmax(huge, 0, DType::I64).is_ok());
    let a = ArgReduce { kind: ArgKind::ArgMax, axis: 0, index_dtype: DType::I32 };
    assert!(a.infer(&[t.clone(), t]).is_err());
}

/// A random shape (rank 0..=4, dims 0..=4), a random sorted axis subset, and data.
fn shape_axes_data() -> impl Strategy<Value = (Vec<usize>, Vec<usize>, Vec<i32>)> {
    prop::collection::vec(0usize..=4, 0..=4).prop_flat_map(|shape| {
        let rank = shape.len();
        let n: usize = shape.iter().product();
        (Just(shape), prop::collection::vec(any::<bool>(), rank), prop::collection::vec(-3i32..=3, n)).prop_map(
            |(shape, mask, data)| {
                let axes = (0..shape.len()).filter(|&d| mask[d]).collect();
                (shape, axes, data)
            },
        )
    })
}

proptest! {
    #[test]
    fn prop_reduce_matches_reference((shape, axes, data) in shape_axes_data()) {
        for kind in ReduceKind::ALL {
            // Products of values in {-1, 1} stay exact in every dtype.
            let vals: Vec<f64> = data.iter().map(|&v| {
                if kind == ReduceKind::Prod { if v < 0 { -1.0 } else { 1.0 } } else { v as f64 }
            }).collect();
            let (oshape, want) = ref_reduce(kind, &shape, &vals, &axes);
            for dtype in [DType::F64, DType::F32, DType::I32, DType::I64] {
                let x = Tensor::from_vec(shape.clone(), vals.clone()).unwrap().cast(dtype);
                let y = red(kind, &x, &axes);
                prop_assert_eq!(y.shape(), oshape.as_slice());
                let got = y.to_f64_vec();
                if dtype.is_int() && kind == ReduceKind::Max {
                    let w: Vec<f64> = want.iter().map(|&v| if v == f64::NEG_INFINITY {
                        if dtype == DType::I32 { i32::MIN as f64 } else { i64::MIN as f64 }
                    } else { v }).collect();
                    prop_assert_eq!(got, w);
                } else if dtype.is_int() && kind == ReduceKind::Min {
                    let w: Vec<f64> = want.iter().map(|&v| if v == f64::INFINITY {
                        if dtype == DType::I32 { i32::MAX as f64 } else { i64::MAX as f64 }
                    } else { v }).collect();
                    prop_assert_eq!(got, w);
                } else {
                    prop_assert_eq!(got, want.clone(), "{:?} {} {:?} {:?}", kind, dtype, shape, axes);
                }
            }
        }
    }

    #[test]
    fn prop_argreduce_matches_reference((shape, _axes, data) in shape_axes_data(), axis_seed in 0usize..4) {
        prop_assume!(!shape.is_empty());
        let axis = axis_seed % shape.len();
        prop_assume!(shape[axis] > 0);
        let vals: Vec<f64> = data.iter().map(|&v| v as f64).collect();
        for kind in [ArgKind::ArgMax, ArgKind::ArgMin] {
            let (oshape, want) = ref_arg(kind, &shape, &vals, axis);
            for dtype in [DType::F64, DType::I32] {
                let x = Tensor::from_vec(shape.clone(), vals.clone()).unwrap().cast(dtype);
                let y = arg(kind, &x, axis, DType::I64);
                prop_assert_eq!(y.shape(), oshape.as_slice());
                prop_assert_eq!(y.to_vec::<i64>().unwrap(), want.clone());
            }
        }
    }
}
