//! Forward tests of the elementwise binary primitives, comparisons and
//! `select` against hand-computed values and naive reference loops (wide
//! integer arithmetic for the wrapping ops), plus their shape-rule errors.

use graft_core::ops::binary::{Binary, Compare, Select};
use graft_core::{Builder, DType, Executable, IrError, Op, Tensor, TensorType};
use proptest::prelude::*;
use std::f64::consts::PI;

fn run_fn(f: impl FnOnce(&mut Builder, &[graft_core::Value]) -> graft_core::Value, xs: &[&Tensor]) -> Tensor {
    let mut b = Builder::new("f");
    let ps: Vec<_> = xs.iter().map(|x| b.param(x.ty())).collect();
    let y = f(&mut b, &ps);
    let expected_ty = b.ty(y).unwrap().clone();
    let f = b.finish(&[y]).unwrap();
    let out = Executable::new(f).unwrap().run(xs).unwrap().remove(0);
    assert_eq!(out.ty(), expected_ty, "kernel result type differs from the inferred type");
    out
}

fn run_bin(op: Binary, x: &Tensor, y: &Tensor) -> Tensor {
    run_fn(|b, p| b.binary(op, p[0], p[1]).unwrap(), &[x, y])
}

fn run_cmp(op: Compare, x: &Tensor, y: &Tensor) -> Vec<bool> {
    run_fn(|b, p| b.compare(op, p[0], p[1]).unwrap(), &[x, y]).to_vec::<bool>().unwrap()
}

fn run_select(p: &Tensor, t: &Tensor, f: &Tensor) -> Tensor {
    run_fn(|b, v| b.select(v[0], v[1], v[2]).unwrap(), &[p, t, f])
}

/// Same float value, NaN equal to NaN, and the sign of zero respected.
fn same_float(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || (a == b && a.is_sign_negative() == b.is_sign_negative())
}

fn assert_floats(op: Binary, got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(same_float(*g, *w), "{op:?} element {i}: got {g}, expected {w}");
    }
}

// ---------------------------------------------------------------- floats

/// atan2 by quadrant from atan, independent of libm's atan2 (x != 0 or y != 0).
fn atan2_reference(y: f64, x: f64) -> f64 {
    if x > 0.0 {
        (y / x).atan()
    } else if x < 0.0 {
        if y >= 0.0 {
            (y / x).atan() + PI
        } else {
            (y / x).atan() - PI
        }
    } else if y > 0.0 {
        PI / 2.0
    } else {
        -PI / 2.0
    }
}

/// Reference for ordinary (finite, non-zero divisor) operands.
fn float_reference(op: Binary, a: f64, b: f64) -> f64 {
    match op {
        Binary::Add => a + b,
        Binary::Sub => a - b,
        Binary::Mul => a * b,
        Binary::Div => a / b,
        Binary::Rem => a - b * (a / b).trunc(),
        Binary::Pow => (b * a.ln()).exp(),
        Binary::Max => {
            if a > b {
                a
            } else {
                b
            }
        }
        Binary::Min => {
            if a < b {
                a
            } else {
                b
            }
        }
        Binary::Atan2 => atan2_reference(a, b),
        Binary::And | Binary::Or => unreachable!("not a float op"),
    }
}

#[test]
fn float_ops_match_reference_in_f64_and_f32() {
    let xs = [0.3, 1.7, 2.5, -0.5, 5.5, -7.25, 2.9, 0.01, 3.0];
    let ys = [1.1, -0.4, 2.0, 0.75, -2.0, 2.5, 0.3, -3.0, 3.0];
    for op in Binary::ALL {
        if !op.accepts(DType::F64) {
            continue;
        }
        // pow via exp/ln needs a positive base.
        let xs: Vec<f64> =
            if op == Binary::Pow { xs.iter().map(|x: &f64| x.abs() + 0.1).collect() } else { xs.to_vec() };
        let (x64, y64) = (Tensor::vec1(&xs), Tensor::vec1(&ys));
        let z64 = run_bin(op, &x64, &y64);
        assert_eq!(z64.dtype(), DType::F64);
        for ((a, b), z) in xs.iter().zip(&ys).zip(z64.to_f64_vec()) {
            let r = float_reference(op, *a, *b);
            assert!((z - r).abs() <= 1e-12 * r.abs().max(1.0), "{op:?}({a}, {b}) = {z}, expected {r}");
        }
        let z32 = run_bin(op, &x64.cast(DType::F32), &y64.cast(DType::F32));
        assert_eq!(z32.dtype(), DType::F32);
        for ((a, b), z) in xs.iter().zip(&ys).zip(z32.to_f64_vec()) {
            let r = float_reference(op, (*a as f32) as f64, (*b as f32) as f64);
            assert!((z - r).abs() <= 2e-6 * r.abs().max(1.0), "f32 {op:?}({a}, {b}) = {z}, expected {r}");
        }
    }
}

/// Runs a float op in both f64 and f32 on the same (f32-exact) inputs.
fn check_float_table(op: Binary, xs: &[f64], ys: &[f64], want: &[f64]) {
    let got = run_bin(op, &Tensor::vec1(xs), &Tensor::vec1(ys)).to_f64_vec();
    assert_floats(op, &got, want);
    let x32: Vec<f32> = xs.iter().map(|&v| v as f32).collect();
    let y32: Vec<f32> = ys.iter().map(|&v| v as f32).collect();
    let got32 = run_bin(op, &Tensor::vec1(&x32), &Tensor::vec1(&y32)).to_f64_vec();
    let want32: Vec<f64> = want.iter().map(|&v| v as f32 as f64).collect();
    assert_floats(op, &got32, &want32);
}

const INF: f64 = f64::INFINITY;
const NAN: f64 = f64::NAN;

#[test]
fn float_division_follows_ieee() {
    check_float_table(
        Binary::Div,
        &[1.0, -1.0, 0.0, -0.0, INF, 1.0, 1.0, NAN, 7.0],
        &[0.0, 0.0, 0.0, 1.0, INF, INF, -INF, 1.0, -2.0],
        &[INF, -INF, NAN, -0.0, NAN, 0.0, -0.0, NAN, -3.5],
    );
}

#[test]
fn float_rem_is_fmod_with_sign_of_dividend() {
    check_float_table(
        Binary::Rem,
        &[5.5, -5.5, 5.5, -5.5, 1.0, INF, 3.0, -3.0, -4.0, NAN, 1.0, 0.0],
        &[2.0, 2.0, -2.0, -2.0, 0.0, 1.0, INF, -INF, 2.0, 1.0, NAN, 3.0],
        &[1.5, -1.5, 1.5, -1.5, NAN, NAN, 3.0, -3.0, -0.0, NAN, NAN, 0.0],
    );
}

#[test]
fn float_max_min_propagate_nan_and_order_signed_zeros() {
    let xs = [NAN, 1.0, NAN, -0.0, 0.0, -0.0, 2.0, -INF, INF, 3.0];
    let ys = [1.0, NAN, NAN, 0.0, -0.0, -0.0, 1.0, 5.0, 5.0, 3.0];
    check_float_table(Binary::Max, &xs, &ys, &[NAN, NAN, NAN, 0.0, 0.0, -0.0, 2.0, 5.0, INF, 3.0]);
    check_float_table(Binary::Min, &xs, &ys, &[NAN, NAN, NAN, -0.0, -0.0, -0.0, 1.0, -INF, 5.0, 3.0]);
}

#[test]
fn float_pow_follows_c() {
    check_float_table(
        Binary::Pow,
        &[0.0, NAN, 1.0, -8.0, 2.0, -2.0, 0.0, 4.0, INF, 0.5, 2.0],
        &[0.0, 0.0, NAN, 1.0 / 3.0, -1.0, 3.0, -1.0, 0.5, -1.0, INF, 10.0],
        &[1.0, 1.0, 1.0, NAN, 0.5, -8.0, INF, 2.0, 0.0, 0.0, 1024.0],
    );
}

#[test]
fn float_atan2_quadrants_and_signed_zeros() {
    let pi = PI;
    let xs = [1.0, 1.0, -1.0, -1.0, 0.0, -0.0, 0.0, -0.0, 1.0, INF, NAN];
    let ys = [1.0, -1.0, -1.0, 1.0, -1.0, -1.0, 0.0, 0.0, 0.0, INF, 1.0];
    let want = [pi / 4.0, 3.0 * pi / 4.0, -3.0 * pi / 4.0, -pi / 4.0, pi, -pi, 0.0, -0.0, pi / 2.0, pi / 4.0, NAN];
    let got = run_bin(Binary::Atan2, &Tensor::vec1(&xs), &Tensor::vec1(&ys)).to_f64_vec();
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(same_float(*g, *w) || (g - w).abs() < 1e-15, "atan2 element {i}: got {g}, expected {w}");
    }
    let x32: Vec<f32> = xs.iter().map(|&v| v as f32).collect();
    let y32: Vec<f32> = ys.iter().map(|&v| v as f32).collect();
    let got32 = run_bin(Binary::Atan2, &Tensor::vec1(&x32), &Tensor::vec1(&y32)).to_f64_vec();
    for (i, (g, w)) in got32.iter().zip(&want).enumerate() {
        assert!((w.is_nan() && g.is_nan()) || (g - w).abs() < 1e-6, "f32 atan2 element {i}: got {g}, expected {w}");
        assert_eq!(g.is_sign_negative(), w.is_sign_negative(), "f32 atan2 element {i} sign");
    }
}

#[test]
fn float_arithmetic_with_infinities_and_nan() {
    let xs = [INF, INF, INF, NAN, 1.5, -0.0];
    let ys = [-INF, INF, 0.0, 1.0, 1.5, -0.0];
    check_float_table(Binary::Add, &xs, &ys, &[NAN, INF, INF, NAN, 3.0, -0.0]);
    check_float_table(Binary::Sub, &xs, &ys, &[INF, NAN, INF, NAN, 0.0, 0.0]);
    check_float_table(Binary::Mul, &xs, &ys, &[-INF, INF, NAN, NAN, 2.25, 0.0]);
    // Overflow rounds to infinity in each precision.
    let big = Tensor::vec1(&[1e308, -1e308]);
    assert_eq!(run_bin(Binary::Add, &big, &big).to_f64_vec(), vec![INF, -INF]);
    let big32 = Tensor::vec1(&[3e38f32, -3e38]);
    assert_eq!(run_bin(Binary::Add, &big32, &big32).to_f64_vec(), vec![INF, -INF]);
    assert_eq!(run_bin(Binary::Mul, &big32, &big32).to_f64_vec(), vec![INF, INF]);
}

// ---------------------------------------------------------------- integers

/// Reference in i128, truncated to the operand width (which is wrapping).
fn int_reference(op: Binary, a: i128, b: i128) -> i128 {
    match op {
        Binary::Add => a + b,
        Binary::Sub => a - b,
        Binary::Mul => a * b,
        Binary::Div => {
            if b == 0 {
                0
            } else {
                a / b
            }
        }
        Binary::Rem => {
            if b == 0 {
                0
            } else {
                a % b
            }
        }
        Binary::Max => a.max(b),
        Binary::Min => a.min(b),
        Binary::And => a & b,
        Binary::Or => a | b,
        Binary::Pow | Binary::Atan2 => unreachable!("float only"),
    }
}

fn int_cases() -> (Vec<i64>, Vec<i64>) {
    let specials = [0i64, 1, -1, 2, -2, 7, -7, 3, 100, -100, i32::MAX as i64, i32::MIN as i64, i64::MAX, i64::MIN];
    let mut xs = Vec::new();
    let mut ys = Vec::new();
    for &a in &specials {
        for &b in &specials {
            xs.push(a);
            ys.push(b);
        }
    }
    (xs, ys)
}

#[test]
fn int_ops_wrap_and_match_wide_reference_in_i64_and_i32() {
    let (xs, ys) = int_cases();
    for op in Binary::ALL {
        if !op.accepts(DType::I64) {
            continue;
        }
        let got = run_bin(op, &Tensor::vec1(&xs), &Tensor::vec1(&ys)).to_vec::<i64>().unwrap();
        for ((a, b), g) in xs.iter().zip(&ys).zip(&got) {
            let r = int_reference(op, *a as i128, *b as i128) as i64;
            assert_eq!(*g, r, "i64 {op:?}({a}, {b})");
        }
        let x32: Vec<i32> = xs.iter().map(|&v| v as i32).collect();
        let y32: Vec<i32> = ys.iter().map(|&v| v as i32).collect();
        let got = run_bin(op, &Tensor::vec1(&x32), &Tensor::vec1(&y32)).to_vec::<i32>().unwrap();
        for ((a, b), g) in x32.iter().zip(&y32).zip(&got) {
            let r = int_reference(op, *a as i128, *b as i128) as i32;
            assert_eq!(*g, r, "i32 {op:?}({a}, {b})");
        }
    }
}

#[test]
fn int_division_truncates_and_zero_divisor_gives_zero() {
    let x = Tensor::vec1(&[7i32, -7, 7, -7, 5, -5, 0, i32::MIN, i32::MIN]);
    let y = Tensor::vec1(&[2i32, 2, -2, -2, 0, 0, 0, -1, 1]);
    assert_eq!(run_bin(Binary::Div, &x, &y).to_vec::<i32>().unwrap(), vec![3, -3, -3, 3, 0, 0, 0, i32::MIN, i32::MIN]);
    assert_eq!(run_bin(Binary::Rem, &x, &y).to_vec::<i32>().unwrap(), vec![1, -1, 1, -1, 0, 0, 0, 0, 0]);
    let x = Tensor::vec1(&[i64::MIN, 9, -9]);
    let y = Tensor::vec1(&[-1i64, 0, 4]);
    assert_eq!(run_bin(Binary::Div, &x, &y).to_vec::<i64>().unwrap(), vec![i64::MIN, 0, -2]);
    assert_eq!(run_bin(Binary::Rem, &x, &y).to_vec::<i64>().unwrap(), vec![0, 0, -1]);
}

#[test]
fn int_add_mul_wrap() {
    let x = Tensor::vec1(&[i32::MAX, i32::MIN, 65536]);
    let y = Tensor::vec1(&[1i32, 1, 65536]);
    assert_eq!(run_bin(Binary::Add, &x, &y).to_vec::<i32>().unwrap(), vec![i32::MIN, i32::MIN + 1, 131072]);
    assert_eq!(run_bin(Binary::Sub, &x, &y).to_vec::<i32>().unwrap(), vec![i32::MAX - 1, i32::MAX, 0]);
    assert_eq!(run_bin(Binary::Mul, &x, &y).to_vec::<i32>().unwrap(), vec![i32::MAX, i32::MIN, 0]);
}

#[test]
fn bitwise_and_logical_ops() {
    let x = Tensor::vec1(&[0b1100i32, -1, 0]);
    let y = Tensor::vec1(&[0b1010i32, 5, 0]);
    assert_eq!(run_bin(Binary::And, &x, &y).to_vec::<i32>().unwrap(), vec![0b1000, 5, 0]);
    assert_eq!(run_bin(Binary::Or, &x, &y).to_vec::<i32>().unwrap(), vec![0b1110, -1, 0]);
    let p = Tensor::vec1(&[false, false, true, true]);
    let q = Tensor::vec1(&[false, true, false, true]);
    assert_eq!(run_bin(Binary::And, &p, &q).to_vec::<bool>().unwrap(), vec![false, false, false, true]);
    assert_eq!(run_bin(Binary::Or, &p, &q).to_vec::<bool>().unwrap(), vec![false, true, true, true]);
}

// ---------------------------------------------------------------- shapes

#[test]
fn rank0_size0_and_size1_shapes() {
    let z = run_bin(Binary::Mul, &Tensor::scalar(3.0f64), &Tensor::scalar(-2.0f64));
    assert_eq!(z.shape(), &[] as &[usize]);
    assert_eq!(z.to_f64_vec(), vec![-6.0]);
    for shape in [vec![0], vec![3, 0], vec![0, 4, 2]] {
        for dtype in DType::ALL {
            let t = Tensor::zeros(&TensorType::new(dtype, shape.clone()));
            let op = if dtype == DType::Bool { Binary::Or } else { Binary::Add };
            let z = run_bin(op, &t, &t);
            assert_eq!(z.ty(), t.ty());
            assert_eq!(z.numel(), 0);
            let c = run_fn(|b, p| b.lt(p[0], p[1]).unwrap(), &[&t, &t]);
            assert_eq!(c.ty(), t.ty().with_dtype(DType::Bool));
            let pred = Tensor::zeros(&TensorType::new(DType::Bool, shape.clone()));
            assert_eq!(run_select(&pred, &t, &t).ty(), t.ty());
        }
    }
    let a = Tensor::from_vec(vec![1, 1, 1], vec![7i64]).unwrap();
    let b = Tensor::from_vec(vec![1, 1, 1], vec![-3i64]).unwrap();
    let z = run_bin(Binary::Rem, &a, &b);
    assert_eq!(z.shape(), &[1, 1, 1]);
    assert_eq!(z.to_vec::<i64>().unwrap(), vec![1]);
}

#[test]
fn large_inputs_take_the_parallel_path_correctly() {
    let n = 200_003;
    let ty = TensorType::new(DType::F32, vec![n]);
    let x = Tensor::from_fn(&ty, |i| (i as f64 * 0.37).sin() * 100.0);
    let y = Tensor::from_fn(&ty, |i| (i as f64 * 0.11).cos() * 50.0 + 0.5);
    let (xv, yv) = (x.to_vec::<f32>().unwrap(), y.to_vec::<f32>().unwrap());
    let sum = run_bin(Binary::Add, &x, &y).to_vec::<f32>().unwrap();
    let mx = run_bin(Binary::Max, &x, &y).to_vec::<f32>().unwrap();
    for i in 0..n {
        assert_eq!(sum[i], xv[i] + yv[i], "add at {i}");
        assert_eq!(mx[i], if xv[i] > yv[i] { xv[i] } else { yv[i] }, "max at {i}");
    }
    let lt = run_cmp(Compare::Lt, &x, &y);
    for i in 0..n {
        assert_eq!(lt[i], xv[i] < yv[i], "lt at {i}");
    }
    let pred = Tensor::vec1(&lt);
    let sel = run_select(&pred, &x, &y).to_vec::<f32>().unwrap();
    for i in 0..n {
        assert_eq!(sel[i], if lt[i] { xv[i] } else { yv[i] }, "select at {i}");
    }

    let ity = TensorType::new(DType::I64, vec![3, 66_667]);
    let a = Tensor::from_fn(&ity, |i| (i as f64 * 7919.0) % 100_003.0 - 50_000.0);
    let b = Tensor::from_fn(&ity, |i| (i % 13) as f64 - 6.0);
    let (av, bv) = (a.to_vec::<i64>().unwrap(), b.to_vec::<i64>().unwrap());
    let q = run_bin(Binary::Div, &a, &b).to_vec::<i64>().unwrap();
    for i in 0..av.len() {
        assert_eq!(q[i], int_reference(Binary::Div, av[i] as i128, bv[i] as i128) as i64, "div at {i}");
    }
}

// ---------------------------------------------------------------- compare

/// Reference comparison through an explicit three-way outcome (None = unordered).
fn cmp_reference(op: Compare, ord: Option<std::cmp::Ordering>) -> bool {
    use std::cmp::Ordering::*;
    match (op, ord) {
        (Compare::Ne, None) => true,
        (_, None) => false,
        (Compare::Eq, Some(o)) => o == Equal,
        (Compare::Ne, Some(o)) => o != Equal,
        (Compare::Lt, Some(o)) => o == Less,
        (Compare::Le, Some(o)) => o != Greater,
        (Compare::Gt, Some(o)) => o == Greater,
        (Compare::Ge, Some(o)) => o != Less,
    }
}

fn float_order(a: f64, b: f64) -> Option<std::cmp::Ordering> {
    use std::cmp::Ordering::*;
    if a.is_nan() || b.is_nan() {
        None
    } else if a == b {
        Some(Equal)
    } else if a - b < 0.0 || (a == -INF) || (b == INF) {
        Some(Less)
    } else {
        Some(Greater)
    }
}

#[test]
fn comparisons_for_every_dtype() {
    let fx = [1.0, 2.0, 3.0, NAN, 1.0, NAN, -0.0, -INF, INF, 0.5];
    let fy = [2.0, 2.0, 1.0, 1.0, NAN, NAN, 0.0, -INF, 1e300, -0.5];
    let ix = [1i64, 2, 3, i64::MIN, -5, 0];
    let iy = [2i64, 2, 1, i64::MAX, -6, 0];
    let bx = [false, false, true, true];
    let by = [false, true, false, true];
    for op in Compare::ALL {
        let got = run_cmp(op, &Tensor::vec1(&fx), &Tensor::vec1(&fy));
        let want: Vec<bool> = fx.iter().zip(&fy).map(|(a, b)| cmp_reference(op, float_order(*a, *b))).collect();
        assert_eq!(got, want, "f64 {op:?}");
        let fx32: Vec<f32> = fx.iter().map(|&v| v as f32).collect();
        let fy32: Vec<f32> = fy.iter().map(|&v| v as f32).collect();
        let want32: Vec<bool> =
            fx32.iter().zip(&fy32).map(|(a, b)| cmp_reference(op, float_order(*a as f64, *b as f64))).collect();
        assert_eq!(run_cmp(op, &Tensor::vec1(&fx32), &Tensor::vec1(&fy32)), want32, "f32 {op:?}");

        let want: Vec<bool> =
            ix.iter().zip(&iy).map(|(a, b)| cmp_reference(op, Some((*a as i128).cmp(&(*b as i128))))).collect();
        assert_eq!(run_cmp(op, &Tensor::vec1(&ix), &Tensor::vec1(&iy)), want, "i64 {op:?}");
        let ix32: Vec<i32> = ix.iter().map(|&v| v.clamp(i32::MIN as i64, i32::MAX as i64) as i32).collect();
        let iy32: Vec<i32> = iy.iter().map(|&v| v.clamp(i32::MIN as i64, i32::MAX as i64) as i32).collect();
        assert_eq!(run_cmp(op, &Tensor::vec1(&ix32), &Tensor::vec1(&iy32)), want, "i32 {op:?}");

        let want: Vec<bool> =
            bx.iter().zip(&by).map(|(a, b)| cmp_reference(op, Some((*a as u8).cmp(&(*b as u8))))).collect();
        assert_eq!(run_cmp(op, &Tensor::vec1(&bx), &Tensor::vec1(&by)), want, "bool {op:?}");
    }
    // Spot values, hand-checked: NaN != NaN, -0 == +0, false < true.
    assert_eq!(run_cmp(Compare::Eq, &Tensor::vec1(&[NAN, -0.0]), &Tensor::vec1(&[NAN, 0.0])), vec![false, true]);
    assert_eq!(run_cmp(Compare::Ne, &Tensor::vec1(&[NAN, -0.0]), &Tensor::vec1(&[NAN, 0.0])), vec![true, false]);
    assert_eq!(run_cmp(Compare::Lt, &Tensor::vec1(&[false]), &Tensor::vec1(&[true])), vec![true]);
}

#[test]
fn compare_builders_map_to_their_ops() {
    let x = Tensor::vec1(&[1i32, 2, 3]);
    let y = Tensor::vec1(&[2i32, 2, 2]);
    let cases: [(
        fn(&mut Builder, graft_core::Value, graft_core::Value) -> Result<graft_core::Value, IrError>,
        [bool; 3],
    ); 6] = [
        (Builder::eq, [false, true, false]),
        (Builder::ne, [true, false, true]),
        (Builder::lt, [true, false, false]),
        (Builder::le, [true, true, false]),
        (Builder::gt, [false, false, true]),
        (Builder::ge, [false, true, true]),
    ];
    for (f, want) in cases {
        let z = run_fn(|b, p| f(b, p[0], p[1]).unwrap(), &[&x, &y]);
        assert_eq!(z.to_vec::<bool>().unwrap(), want.to_vec());
    }
}

#[test]
fn binary_builders_map_to_their_ops() {
    type B = fn(&mut Builder, graft_core::Value, graft_core::Value) -> Result<graft_core::Value, IrError>;
    let x = Tensor::vec1(&[6.0f64, -1.0]);
    let y = Tensor::vec1(&[4.0f64, 2.0]);
    let cases: [(B, [f64; 2]); 9] = [
        (Builder::add, [10.0, 1.0]),
        (Builder::sub, [2.0, -3.0]),
        (Builder::mul, [24.0, -2.0]),
        (Builder::div, [1.5, -0.5]),
        (Builder::rem, [2.0, -1.0]),
        (Builder::pow, [1296.0, 1.0]),
        (Builder::max, [6.0, 2.0]),
        (Builder::min, [4.0, -1.0]),
        (Builder::atan2, [6.0f64.atan2(4.0), (-1.0f64).atan2(2.0)]),
    ];
    for (f, want) in cases {
        let z = run_fn(|b, p| f(b, p[0], p[1]).unwrap(), &[&x, &y]);
        assert_eq!(z.to_f64_vec(), want.to_vec());
    }
    let p = Tensor::vec1(&[true, false]);
    let q = Tensor::vec1(&[true, true]);
    assert_eq!(run_fn(|b, v| b.and(v[0], v[1]).unwrap(), &[&p, &q]).to_vec::<bool>().unwrap(), vec![true, false]);
    assert_eq!(run_fn(|b, v| b.or(v[0], v[1]).unwrap(), &[&p, &q]).to_vec::<bool>().unwrap(), vec![true, true]);
}

// ---------------------------------------------------------------- select

#[test]
fn select_for_every_dtype() {
    let pred = Tensor::from_vec(vec![2, 2], vec![true, false, false, true]).unwrap();
    for dtype in DType::ALL {
        let ty = TensorType::new(dtype, vec![2, 2]);
        let t = Tensor::from_fn(&ty, |i| [1.0, 0.0, 3.0, 4.0][i]);
        let f = Tensor::from_fn(&ty, |i| [-1.0, 1.0, -3.0, 0.0][i]);
        let z = run_select(&pred, &t, &f);
        assert_eq!(z.ty(), ty);
        let want = Tensor::from_fn(&ty, |i| [1.0, 1.0, -3.0, 4.0][i]);
        assert_eq!(z, want, "select {dtype}");
    }
    // NaN and signed zero pass through untouched.
    let z = run_select(&Tensor::vec1(&[true, false]), &Tensor::vec1(&[NAN, 1.0]), &Tensor::vec1(&[0.0, -0.0]));
    let v = z.to_f64_vec();
    assert!(v[0].is_nan());
    assert!(v[1] == 0.0 && v[1].is_sign_negative());
    let z = run_select(&Tensor::scalar(false), &Tensor::scalar(5i32), &Tensor::scalar(6i32));
    assert_eq!(z.to_vec::<i32>().unwrap(), vec![6]);
}

// ---------------------------------------------------------------- errors

fn type_error(e: IrError) -> graft_core::TypeError {
    match e {
        IrError::Type(te) => te,
        other => panic!("expected a type error, got {other:?}"),
    }
}

#[test]
fn binary_type_errors_are_structured() {
    let mut b = Builder::new("f");
    let f3 = b.param(TensorType::new(DType::F32, vec![3]));
    let f4 = b.param(TensorType::new(DType::F32, vec![4]));
    let d3 = b.param(TensorType::new(DType::F64, vec![3]));
    let i3 = b.param(TensorType::new(DType::I32, vec![3]));
    let b3 = b.param(TensorType::new(DType::Bool, vec![3]));

    let e = b.add(f3, f4).unwrap_err();
    assert_eq!(
        e.to_string(),
        "add: operands must have identical shapes and dtypes (broadcasting is explicit); got operands (f32[3], f32[4])"
    );
    for op in Binary::ALL {
        let te = type_error(b.binary(op, f3, f4).unwrap_err());
        assert_eq!(te.prim, op.name());
        assert_eq!(te.operands, vec![TensorType::new(DType::F32, vec![3]), TensorType::new(DType::F32, vec![4])]);
        let te = type_error(b.binary(op, f3, d3).unwrap_err());
        assert_eq!(te.prim, op.name());
        assert!(te.expected.contains("identical"), "{te}");
        for (v, dtype) in [(f3, DType::F32), (d3, DType::F64), (i3, DType::I32), (b3, DType::Bool)] {
            let r = b.binary(op, v, v);
            if op.accepts(dtype) {
                assert!(r.is_ok(), "{op:?} should accept {dtype}");
            } else {
                let te = type_error(r.unwrap_err());
                assert_eq!(te.prim, op.name());
                assert!(te.expected.starts_with("expected"), "{te}");
            }
        }
    }
    // Bool operands are rejected by every arithmetic op.
    for op in [Binary::Add, Binary::Sub, Binary::Mul, Binary::Div, Binary::Rem, Binary::Max, Binary::Min] {
        let te = type_error(b.binary(op, b3, b3).unwrap_err());
        assert_eq!(te.expected, "expected numeric operands (f16, f32, f64, i32, i64 or u32; not bool)");
    }
    assert_eq!(type_error(b.pow(i3, i3).unwrap_err()).expected, "expected floating-point operands (f32 or f64)");
    assert_eq!(type_error(b.atan2(i3, i3).unwrap_err()).prim, "atan2");
    assert_eq!(type_error(b.and(f3, f3).unwrap_err()).expected, "expected bool or integer operands");
    // Wrong arity through the rule directly.
    let t = TensorType::new(DType::F32, vec![3]);
    let te = Binary::Add.infer(std::slice::from_ref(&t)).unwrap_err();
    assert_eq!((te.prim.as_str(), te.expected.as_str()), ("add", "expected 2 operands"));
    assert!(Binary::Add.infer(&[t.clone(), t.clone(), t]).is_err());
}

#[test]
fn compare_type_errors_are_structured() {
    let mut b = Builder::new("f");
    let f3 = b.param(TensorType::new(DType::F32, vec![3]));
    let f31 = b.param(TensorType::new(DType::F32, vec![3, 1]));
    let i3 = b.param(TensorType::new(DType::I32, vec![3]));
    for op in Compare::ALL {
        let te = type_error(b.compare(op, f3, f31).unwrap_err());
        assert_eq!(te.prim, op.name());
        let te = type_error(b.compare(op, f3, i3).unwrap_err());
        assert_eq!(te.operands, vec![TensorType::new(DType::F32, vec![3]), TensorType::new(DType::I32, vec![3])]);
        let te = op.infer(&[TensorType::scalar(DType::F32)]).unwrap_err();
        assert_eq!(te.expected, "expected 2 operands");
    }
}

#[test]
fn select_type_errors_are_structured() {
    let mut b = Builder::new("f");
    let p3 = b.param(TensorType::new(DType::Bool, vec![3]));
    let p4 = b.param(TensorType::new(DType::Bool, vec![4]));
    let i3 = b.param(TensorType::new(DType::I32, vec![3]));
    let f3 = b.param(TensorType::new(DType::F32, vec![3]));
    let f4 = b.param(TensorType::new(DType::F32, vec![4]));

    let te = type_error(b.select(i3, f3, f3).unwrap_err());
    assert_eq!((te.prim.as_str(), te.expected.as_str()), ("select", "expected a bool predicate"));
    let te = type_error(b.select(p4, f3, f3).unwrap_err());
    assert_eq!(te.expected, "expected the predicate to have the branches' shape (broadcasting is explicit)");
    let te = type_error(b.select(p3, f3, f4).unwrap_err());
    assert_eq!(te.expected, "expected on_true and on_false of identical shapes and dtypes");
    let te = type_error(b.select(p3, f3, i3).unwrap_err());
    assert_eq!(te.prim, "select");
    let te = Select.infer(&[TensorType::scalar(DType::Bool)]).unwrap_err();
    assert_eq!(te.expected, "expected 3 operands");
    assert!(b.select(p3, p3, p3).is_ok());
}

#[test]
fn names_are_unique_and_params_empty() {
    let mut names: Vec<&str> = Binary::ALL.iter().map(|o| o.name()).collect();
    names.extend(Compare::ALL.iter().map(|o| o.name()));
    names.push(Select.name());
    let n = names.len();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), n);
    assert!(Binary::ALL.iter().all(|o| o.params().is_empty()));
    assert!(Compare::ALL.iter().all(|o| o.params().is_empty()));
}

// ---------------------------------------------------------------- properties

fn shape_strategy() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0usize..5, 0..4)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn binary_shape_rule_and_values_agree(shape in shape_strategy(), op_i in 0usize..11, dt_i in 0usize..5, seed in 0u64..1000) {
        let op = Binary::ALL[op_i];
        let dtype = DType::ALL[dt_i];
        let ty = TensorType::new(dtype, shape.clone());
        let out_ty = op.infer(&[ty.clone(), ty.clone()]);
        if !op.accepts(dtype) {
            prop_assert!(out_ty.is_err());
            return Ok(());
        }
        prop_assert_eq!(out_ty.unwrap(), vec![ty.clone()]);
        let s = seed as f64;
        let x = Tensor::from_fn(&ty, |i| ((i as f64 + s) * 1.37).sin() * 9.0);
        let y = Tensor::from_fn(&ty, |i| ((i as f64 * 0.7 + s) * 2.11).cos() * 9.0 + 0.25);
        let z = run_bin(op, &x, &y);
        prop_assert_eq!(z.ty(), ty.clone());
        let (xv, yv, zv) = (x.to_f64_vec(), y.to_f64_vec(), z.to_f64_vec());
        for i in 0..zv.len() {
            let want = match dtype {
                DType::F64 | DType::F32 => {
                    let (a, b) = (xv[i], yv[i]);
                    match op {
                        Binary::Pow => a.powf(b),
                        _ => float_reference(op, a, b),
                    }
                }
                DType::Bool => {
                    let (a, b) = (xv[i] != 0.0, yv[i] != 0.0);
                    (if op == Binary::And { a && b } else { a || b }) as u8 as f64
                }
                _ => int_reference(op, xv[i] as i128, yv[i] as i128) as f64,
            };
            let tol = if dtype == DType::F32 { 1e-5 } else { 1e-12 };
            prop_assert!(
                same_float(zv[i], want) || (zv[i] - want).abs() <= tol * want.abs().max(1.0),
                "{:?} {} at {}: got {}, expected {}", op, dtype, i, zv[i], want
            );
        }
    }

    #[test]
    fn compare_and_select_shape_rules_agree(shape in shape_strategy(), op_i in 0usize..6, dt_i in 0usize..5) {
        let op = Compare::ALL[op_i];
        let ty = TensorType::new(DType::ALL[dt_i], shape);
        let x = Tensor::from_fn(&ty, |i| (i % 3) as f64);
        let y = Tensor::from_fn(&ty, |i| (i % 2) as f64);
        prop_assert_eq!(op.infer(&[ty.clone(), ty.clone()]).unwrap(), vec![ty.with_dtype(DType::Bool)]);
        let c = run_cmp(op, &x, &y);
        let (xv, yv) = (x.to_f64_vec(), y.to_f64_vec());
        for i in 0..c.len() {
            prop_assert_eq!(c[i], cmp_reference(op, float_order(xv[i], yv[i])));
        }
        let pred = Tensor::from_vec(ty.shape.clone(), c.clone()).unwrap();
        prop_assert_eq!(Select.infer(&[pred.ty(), ty.clone(), ty.clone()]).unwrap(), vec![ty.clone()]);
        let s = run_select(&pred, &x, &y).to_f64_vec();
        for i in 0..s.len() {
            prop_assert_eq!(s[i], if c[i] { xv[i] } else { yv[i] });
        }
    }
}
