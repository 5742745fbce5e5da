//! Forward tests of the elementwise unary primitives against std/libm
//! reference values, plus their shape-rule errors.

use graft_core::ops::unary::Unary;
use graft_core::{Builder, DType, Executable, IrError, Tensor, TensorType};

fn run_unary(op: Unary, x: &Tensor) -> Tensor {
    let mut b = Builder::new("f");
    let p = b.param(x.ty());
    let y = b.unary(op, p).unwrap();
    let f = b.finish(&[y]).unwrap();
    Executable::new(f).unwrap().run(&[x]).unwrap().remove(0)
}

fn reference(op: Unary, x: f64) -> f64 {
    match op {
        Unary::Neg => -x,
        Unary::Abs => x.abs(),
        Unary::Sign => {
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                0.0
            }
        }
        Unary::Exp => x.exp(),
        Unary::Expm1 => x.exp_m1(),
        Unary::Log => x.ln(),
        Unary::Log1p => x.ln_1p(),
        Unary::Sqrt => x.sqrt(),
        Unary::Rsqrt => 1.0 / x.sqrt(),
        Unary::Sin => x.sin(),
        Unary::Cos => x.cos(),
        Unary::Tan => x.tan(),
        Unary::Tanh => x.tanh(),
        Unary::Logistic => 1.0 / (1.0 + (-x).exp()),
        // Abramowitz-Stegun-free check: erf via its odd series is too slow; use known values below.
        Unary::Erf => libm_erf_reference(x),
        Unary::ErfInv => erf_inv_reference(x),
        Unary::Floor => x.floor(),
        Unary::Ceil => x.ceil(),
        Unary::Round => x.round_ties_even(),
        Unary::Not => unreachable!("not is tested separately"),
    }
}

/// erf by its Taylor series, converged for |x| <= 3 (independent of libm).
fn libm_erf_reference(x: f64) -> f64 {
    let mut term = x;
    let mut sum = x;
    for n in 1..200 {
        term *= -x * x / n as f64;
        sum += term / (2 * n + 1) as f64;
    }
    sum * 2.0 / std::f64::consts::PI.sqrt()
}

/// erf_inv by Newton's method on the series [`libm_erf_reference`] from
/// 0 (erf is convex on x > 0, so the iteration converges monotonically).
fn erf_inv_reference(x: f64) -> f64 {
    let mut y = 0.0f64;
    for _ in 0..60 {
        let d = 2.0 / std::f64::consts::PI.sqrt() * (-y * y).exp();
        y -= (libm_erf_reference(y) - x) / d;
    }
    y
}

#[test]
fn float_ops_match_reference_in_f64_and_f32() {
    let xs = [0.3, 1.7, 2.5, -0.5, 0.5, 1.5, 2.9, 0.01];
    for op in Unary::ALL {
        if op == Unary::Not {
            continue;
        }
        let domain: Vec<f64> = match op {
            Unary::Log | Unary::Sqrt | Unary::Rsqrt | Unary::Log1p => xs.iter().map(|x: &f64| x.abs() + 0.1).collect(),
            // Its domain is [-1, 1].
            Unary::ErfInv => xs.iter().map(|x: &f64| x / 3.0).collect(),
            _ => xs.to_vec(),
        };
        let x64 = Tensor::vec1(&domain);
        let y64 = run_unary(op, &x64).to_f64_vec();
        for (x, y) in domain.iter().zip(&y64) {
            let r = reference(op, *x);
            assert!((y - r).abs() <= 1e-12 * r.abs().max(1.0), "{op:?}({x}) = {y}, expected {r}");
        }
        let x32 = x64.cast(DType::F32);
        let y32 = run_unary(op, &x32);
        assert_eq!(y32.dtype(), DType::F32);
        for (x, y) in domain.iter().zip(y32.to_f64_vec()) {
            let r = reference(op, (*x as f32) as f64);
            assert!((y - r).abs() <= 1e-5 * r.abs().max(1.0), "f32 {op:?}({x}) = {y}, expected {r}");
        }
    }
}

#[test]
fn round_is_half_to_even() {
    let x = Tensor::vec1(&[0.5f64, 1.5, 2.5, -0.5, -1.5, 2.4, -2.6]);
    assert_eq!(run_unary(Unary::Round, &x).to_f64_vec(), vec![0.0, 2.0, 2.0, -0.0, -2.0, 2.0, -3.0]);
}

#[test]
fn integer_and_bool_ops() {
    let x = Tensor::vec1(&[-3i32, 0, 7]);
    assert_eq!(run_unary(Unary::Neg, &x).to_vec::<i32>().unwrap(), vec![3, 0, -7]);
    assert_eq!(run_unary(Unary::Abs, &x).to_vec::<i32>().unwrap(), vec![3, 0, 7]);
    assert_eq!(run_unary(Unary::Sign, &x).to_vec::<i32>().unwrap(), vec![-1, 0, 1]);
    assert_eq!(run_unary(Unary::Not, &x).to_vec::<i32>().unwrap(), vec![2, -1, -8]);
    let b = Tensor::vec1(&[true, false]);
    assert_eq!(run_unary(Unary::Not, &b).to_vec::<bool>().unwrap(), vec![false, true]);
    let big = Tensor::vec1(&[-5i64, 5]);
    assert_eq!(run_unary(Unary::Abs, &big).to_vec::<i64>().unwrap(), vec![5, 5]);
}

#[test]
fn large_inputs_run_in_parallel_chunks_correctly() {
    let n = 200_003;
    let x = Tensor::from_fn(&TensorType::new(DType::F32, vec![n]), |i| i as f64 * 1e-5);
    let y = run_unary(Unary::Sin, &x).to_f64_vec();
    for i in [0, 1, 8191, 8192, 100_000, n - 1] {
        assert!((y[i] - ((i as f32 * 1e-5) as f64).sin()).abs() < 1e-6);
    }
}

#[test]
fn dtype_errors_are_structured() {
    let mut b = Builder::new("f");
    let i = b.param(TensorType::new(DType::I32, vec![3]));
    let e = b.exp(i).unwrap_err();
    let IrError::Type(te) = &e else { panic!("expected a type error, got {e:?}") };
    assert_eq!(te.prim, "exp");
    assert_eq!(te.operands, vec![TensorType::new(DType::I32, vec![3])]);
    assert_eq!(e.to_string(), "exp: expected a floating-point operand (f32 or f64); got operands (i32[3])");
    let bl = b.param(TensorType::new(DType::Bool, vec![]));
    assert!(b.neg(bl).is_err());
    let f = b.param(TensorType::new(DType::F32, vec![]));
    assert!(b.not(f).is_err());
}
