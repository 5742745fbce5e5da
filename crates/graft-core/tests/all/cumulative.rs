//! Forward tests of `cumsum`/`cumprod`/`cummax`/`cummin` against a naive
//! sequential scan (bit-exact: the kernel scans each line in the same
//! order), edge cases, the parallel paths, and every shape-rule error.

use graft_core::ops::cumulative::{CumKind, Cumulative};
use graft_core::ops::{display_prim, Op};
use graft_core::{Builder, DType, Element, Executable, IrError, Tensor, TensorType, Value};
use proptest::prelude::*;

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

fn cum(kind: CumKind, x: &Tensor, axis: usize, reverse: bool) -> Tensor {
    run(x, |b, p| b.cumulative(kind, p, axis, reverse))
}

/// The combiner in a reference-friendly form, per element type.
trait RefElem: Element {
    fn comb(kind: CumKind, a: Self, b: Self) -> Self;
}
impl RefElem for f64 {
    fn comb(kind: CumKind, a: f64, b: f64) -> f64 {
        match kind {
            CumKind::Sum => a + b,
            CumKind::Prod => a * b,
            _ if a.is_nan() || b.is_nan() => f64::NAN,
            CumKind::Max => a.max(b),
            CumKind::Min => a.min(b),
        }
    }
}
impl RefElem for f32 {
    fn comb(kind: CumKind, a: f32, b: f32) -> f32 {
        match kind {
            CumKind::Sum => a + b,
            CumKind::Prod => a * b,
            _ if a.is_nan() || b.is_nan() => f32::NAN,
            CumKind::Max => a.max(b),
            CumKind::Min => a.min(b),
        }
    }
}
impl RefElem for i32 {
    fn comb(kind: CumKind, a: i32, b: i32) -> i32 {
        match kind {
            CumKind::Sum => a.wrapping_add(b),
            CumKind::Prod => a.wrapping_mul(b),
            CumKind::Max => a.max(b),
            CumKind::Min => a.min(b),
        }
    }
}
impl RefElem for i64 {
    fn comb(kind: CumKind, a: i64, b: i64) -> i64 {
        match kind {
            CumKind::Sum => a.wrapping_add(b),
            CumKind::Prod => a.wrapping_mul(b),
            CumKind::Max => a.max(b),
            CumKind::Min => a.min(b),
        }
    }
}
impl RefElem for bool {
    fn comb(kind: CumKind, a: bool, b: bool) -> bool {
        match kind {
            CumKind::Max => a | b,
            CumKind::Min => a & b,
            _ => unreachable!("bool has no sum/prod scan"),
        }
    }
}

/// Naive scan: walks every line element by element with explicit index math.
fn ref_cum<T: RefElem>(kind: CumKind, shape: &[usize], data: &[T], axis: usize, reverse: bool) -> Vec<T> {
    let mut out = data.to_vec();
    let stride: usize = shape[axis + 1..].iter().product();
    let n = shape[axis];
    for start in 0..data.len() {
        // `start` is the first element of a line iff its axis coordinate is 0.
        let coord = (start / stride) % n.max(1);
        if coord > 0 {
            continue;
        }
        let order: Vec<usize> = if reverse { (0..n).rev().collect() } else { (0..n).collect() };
        let mut acc: Option<T> = None;
        for k in order {
            let i = start + k * stride;
            let v = match acc {
                None => data[i],
                Some(a) => T::comb(kind, a, data[i]),
            };
            acc = Some(v);
            out[i] = v;
        }
    }
    out
}

fn check_all<T: RefElem>(kind: CumKind, x: &Tensor, axis: usize, reverse: bool) {
    let data = x.to_vec::<T>().unwrap();
    let want = ref_cum(kind, x.shape(), &data, axis, reverse);
    let got = cum(kind, x, axis, reverse).to_vec::<T>().unwrap();
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        // NaN-aware bitwise comparison through f64.
        let (g, w) = (g.to_f64(), w.to_f64());
        assert!(g == w || (g.is_nan() && w.is_nan()), "{kind:?} axis {axis} rev {reverse} [{i}]: {g} vs {w}");
    }
}

#[test]
fn hand_computed_1d_scans_in_every_numeric_dtype() {
    let x = Tensor::vec1(&[1.0, 3.0, 2.0, 4.0]);
    let cases: [(CumKind, bool, [f64; 4]); 8] = [
        (CumKind::Sum, false, [1.0, 4.0, 6.0, 10.0]),
        (CumKind::Sum, true, [10.0, 9.0, 6.0, 4.0]),
        (CumKind::Prod, false, [1.0, 3.0, 6.0, 24.0]),
        (CumKind::Prod, true, [24.0, 24.0, 8.0, 4.0]),
        (CumKind::Max, false, [1.0, 3.0, 3.0, 4.0]),
        (CumKind::Max, true, [4.0, 4.0, 4.0, 4.0]),
        (CumKind::Min, false, [1.0, 1.0, 1.0, 1.0]),
        (CumKind::Min, true, [1.0, 2.0, 2.0, 4.0]),
    ];
    for dtype in [DType::F64, DType::F32, DType::I32, DType::I64] {
        let x = x.cast(dtype);
        for (kind, rev, want) in cases {
            let y = cum(kind, &x, 0, rev);
            assert_eq!(y.dtype(), dtype);
            assert_eq!(y.to_f64_vec(), want, "{kind:?} rev {rev} {dtype}");
        }
    }
}

#[test]
fn hand_computed_2d_scans_both_axes() {
    let x = Tensor::from_vec(vec![2, 3], vec![1i32, 2, 3, 4, 5, 6]).unwrap();
    assert_eq!(cum(CumKind::Sum, &x, 0, false).to_vec::<i32>().unwrap(), vec![1, 2, 3, 5, 7, 9]);
    assert_eq!(cum(CumKind::Sum, &x, 0, true).to_vec::<i32>().unwrap(), vec![5, 7, 9, 4, 5, 6]);
    assert_eq!(cum(CumKind::Sum, &x, 1, false).to_vec::<i32>().unwrap(), vec![1, 3, 6, 4, 9, 15]);
    assert_eq!(cum(CumKind::Sum, &x, 1, true).to_vec::<i32>().unwrap(), vec![6, 5, 3, 15, 11, 6]);
    assert_eq!(cum(CumKind::Prod, &x, 0, false).to_vec::<i32>().unwrap(), vec![1, 2, 3, 4, 10, 18]);
    let y = Tensor::from_vec(vec![3, 2], vec![5.0f64, 1.0, 2.0, 7.0, 9.0, 0.0]).unwrap();
    assert_eq!(cum(CumKind::Max, &y, 0, false).to_f64_vec(), vec![5.0, 1.0, 5.0, 7.0, 9.0, 7.0]);
    assert_eq!(cum(CumKind::Min, &y, 0, true).to_f64_vec(), vec![2.0, 0.0, 2.0, 0.0, 9.0, 0.0]);
}

#[test]
fn bool_cummax_is_running_any_and_cummin_running_all() {
    let x = Tensor::vec1(&[false, true, false, true]);
    assert_eq!(cum(CumKind::Max, &x, 0, false).to_vec::<bool>().unwrap(), vec![false, true, true, true]);
    assert_eq!(cum(CumKind::Max, &x, 0, true).to_vec::<bool>().unwrap(), vec![true, true, true, true]);
    assert_eq!(cum(CumKind::Min, &x, 0, false).to_vec::<bool>().unwrap(), vec![false, false, false, false]);
    assert_eq!(cum(CumKind::Min, &x, 0, true).to_vec::<bool>().unwrap(), vec![false, false, false, true]);
}

#[test]
fn nan_sticks_for_the_rest_of_the_line() {
    let x = Tensor::vec1(&[1.0, f64::NAN, 3.0, 0.5]);
    for dtype in [DType::F64, DType::F32] {
        let x = x.cast(dtype);
        let y = cum(CumKind::Max, &x, 0, false).to_f64_vec();
        assert!(y[0] == 1.0 && y[1..].iter().all(|v| v.is_nan()), "{y:?}");
        let y = cum(CumKind::Min, &x, 0, true).to_f64_vec();
        assert!(y[..2].iter().all(|v| v.is_nan()) && y[2] == 0.5 && y[3] == 0.5, "{y:?}");
    }
}

#[test]
fn integer_scans_wrap() {
    let x = Tensor::vec1(&[i32::MAX, 1, 1]);
    assert_eq!(cum(CumKind::Sum, &x, 0, false).to_vec::<i32>().unwrap(), vec![i32::MAX, i32::MIN, i32::MIN + 1]);
    let x = Tensor::vec1(&[1i64 << 62, 4]);
    assert_eq!(cum(CumKind::Prod, &x, 0, false).to_vec::<i64>().unwrap(), vec![1 << 62, 0]);
}

#[test]
fn empty_and_size_one_axes() {
    let e = Tensor::zeros(&TensorType::new(DType::F32, vec![2, 0, 3]));
    for kind in CumKind::ALL {
        for axis in 0..3 {
            let y = cum(kind, &e, axis, axis == 1);
            assert_eq!(y.shape(), &[2, 0, 3]);
        }
    }
    let x = Tensor::from_vec(vec![3, 1], vec![4i64, -2, 9]).unwrap();
    for kind in CumKind::ALL {
        assert_eq!(cum(kind, &x, 1, false), x);
        assert_eq!(cum(kind, &x, 1, true), x);
    }
    let neg0 = Tensor::vec1(&[-0.0f64, -0.0]);
    assert!(cum(CumKind::Sum, &neg0, 0, false).to_f64_vec().iter().all(|v| *v == 0.0 && v.is_sign_negative()));
}

fn pseudo(i: usize) -> f64 {
    let h = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 11;
    (h as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
}

#[test]
fn large_inputs_take_parallel_paths_correctly() {
    // Many short lines (inner 1), many blocks with inner > 1, few wide blocks
    // (column strips, with a partial last strip), one long line.
    let cases: [(&[usize], usize); 5] =
        [(&[300, 1001], 1), (&[2000, 50, 7], 1), (&[2, 40, 5000], 1), (&[3, 20_000, 3], 0), (&[100_003], 0)];
    for (shape, axis) in cases {
        let ty = TensorType::new(DType::F64, shape.to_vec());
        let x = Tensor::from_fn(&ty, pseudo);
        let x32 = x.cast(DType::F32);
        let xi = Tensor::from_fn(&ty.with_dtype(DType::I64), |i| (pseudo(i) * 1e6).round());
        for reverse in [false, true] {
            for kind in CumKind::ALL {
                check_all::<f64>(kind, &x, axis, reverse);
                check_all::<f32>(kind, &x32, axis, reverse);
                check_all::<i64>(kind, &xi, axis, reverse);
            }
        }
    }
}

#[test]
fn results_do_not_depend_on_thread_count() {
    let x = Tensor::from_fn(&TensorType::new(DType::F32, vec![3, 200, 3000]), pseudo);
    for axis in 0..3 {
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap()
            .install(|| cum(CumKind::Sum, &x, axis, false));
        let many = rayon::ThreadPoolBuilder::new()
            .num_threads(5)
            .build()
            .unwrap()
            .install(|| cum(CumKind::Sum, &x, axis, false));
        assert_eq!(one, many, "axis {axis}");
    }
}

#[test]
fn params_print() {
    let c = Cumulative { kind: CumKind::Sum, axis: 2, reverse: true };
    assert_eq!(display_prim(&c), "cumsum[axis=2, reverse=true]");
    let names: Vec<&str> =
        CumKind::ALL.iter().map(|&kind| Cumulative { kind, axis: 0, reverse: false }.name()).collect();
    assert_eq!(names, ["cumsum", "cummax", "cummin", "cumprod"]);
}

fn type_err(r: Result<Value, IrError>) -> graft_core::TypeError {
    match r {
        Err(IrError::Type(te)) => te,
        other => panic!("expected a type error, got {other:?}"),
    }
}

#[test]
fn errors_are_structured() {
    let mut b = Builder::new("f");
    let t = TensorType::new(DType::F32, vec![2, 3]);
    let x = b.param(t.clone());
    for kind in CumKind::ALL {
        let te = type_err(b.cumulative(kind, x, 2, false));
        assert!(te.prim.starts_with(Cumulative { kind, axis: 0, reverse: false }.name()));
        assert_eq!(te.operands, vec![t.clone()]);
        assert!(te.expected.contains("out of range"), "{}", te.expected);
    }
    let s = b.param(TensorType::scalar(DType::F64));
    assert!(b.cumsum(s, 0, false).is_err());
    let bl = b.param(TensorType::new(DType::Bool, vec![3]));
    let te = type_err(b.cumsum(bl, 0, false));
    assert_eq!(
        te.to_string(),
        "cumsum[axis=0, reverse=false]: expected a numeric operand (not bool); got operands (bool[3])"
    );
    assert!(b.cumprod(bl, 0, true).is_err());
    assert!(b.cummax(bl, 0, false).is_ok());
    assert!(b.cummin(bl, 0, false).is_ok());
    let c = Cumulative { kind: CumKind::Max, axis: 0, reverse: false };
    assert!(c.infer(&[t.clone(), t]).is_err());
    assert!(c.infer(&[]).is_err());
}

fn shape_axis_data() -> impl Strategy<Value = (Vec<usize>, usize, Vec<i32>)> {
    (prop::collection::vec(0usize..=5, 1..=4), 0usize..4).prop_flat_map(|(shape, seed)| {
        let n: usize = shape.iter().product();
        let axis = seed % shape.len();
        (Just(shape), Just(axis), prop::collection::vec(-3i32..=3, n))
    })
}

proptest! {
    #[test]
    fn prop_scans_match_reference((shape, axis, data) in shape_axis_data(), reverse in any::<bool>()) {
        let xi = Tensor::from_vec(shape.clone(), data.clone()).unwrap();
        let xf: Vec<f64> = data.iter().map(|&v| v as f64 * 0.37).collect();
        let xf = Tensor::from_vec(shape.clone(), xf).unwrap();
        let xb = Tensor::from_vec(shape.clone(), data.iter().map(|&v| v > 0).collect::<Vec<_>>()).unwrap();
        for kind in CumKind::ALL {
            let y = cum(kind, &xi, axis, reverse);
            prop_assert_eq!(y.shape(), shape.as_slice());
            prop_assert_eq!(y.to_vec::<i32>().unwrap(), ref_cum(kind, &shape, &data, axis, reverse));
            let d64 = xf.to_vec::<f64>().unwrap();
            prop_assert_eq!(cum(kind, &xf, axis, reverse).to_vec::<f64>().unwrap(), ref_cum(kind, &shape, &d64, axis, reverse));
            let x32 = xf.cast(DType::F32);
            let d32 = x32.to_vec::<f32>().unwrap();
            prop_assert_eq!(cum(kind, &x32, axis, reverse).to_vec::<f32>().unwrap(), ref_cum(kind, &shape, &d32, axis, reverse));
            if matches!(kind, CumKind::Max | CumKind::Min) {
                let db = xb.to_vec::<bool>().unwrap();
                prop_assert_eq!(cum(kind, &xb, axis, reverse).to_vec::<bool>().unwrap(), ref_cum(kind, &shape, &db, axis, reverse));
            }
        }
    }
}
