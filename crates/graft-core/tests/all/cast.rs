//! Forward tests of `convert` (every source/target dtype pair, against an
//! explicit reference of truncation, saturation, wrapping and rounding) and
//! `stop_gradient`, plus their shape-rule errors.

use graft_core::ops::cast::{Convert, StopGradient};
use graft_core::ops::display_prim;
use graft_core::{Builder, DType, Executable, IrError, Op, Tensor, TensorType};
use proptest::prelude::*;

const INF: f64 = f64::INFINITY;
const NAN: f64 = f64::NAN;

fn run_convert(x: &Tensor, dtype: DType) -> Tensor {
    let mut b = Builder::new("f");
    let p = b.param(x.ty());
    let y = b.convert(p, dtype).unwrap();
    assert_eq!(b.ty(y).unwrap(), &x.ty().with_dtype(dtype));
    let f = b.finish(&[y]).unwrap();
    let out = Executable::new(f).unwrap().run(&[x]).unwrap().remove(0);
    assert_eq!(out.ty(), x.ty().with_dtype(dtype));
    out
}

fn run_stop(x: &Tensor) -> Tensor {
    let mut b = Builder::new("f");
    let p = b.param(x.ty());
    let y = b.stop_gradient(p).unwrap();
    let f = b.finish(&[y]).unwrap();
    Executable::new(f).unwrap().run(&[x]).unwrap().remove(0)
}

/// Float -> integer reference: truncate, saturate at [lo, hi], NaN -> 0.
fn float_to_int(x: f64, lo: f64, hi: f64) -> f64 {
    if x.is_nan() {
        0.0
    } else if x >= hi {
        hi
    } else if x <= lo {
        lo
    } else {
        x.trunc()
    }
}

/// Integer -> narrower integer reference: keep the low 32 bits, two's complement.
fn wrap_i32(x: i64) -> i32 {
    let low = x.rem_euclid(1i64 << 32);
    if low >= 1i64 << 31 {
        (low - (1i64 << 32)) as i32
    } else {
        low as i32
    }
}

#[test]
fn float_to_int_truncates_saturates_and_maps_nan_to_zero() {
    let xs = [0.0, -0.0, 1.5, -1.5, 2.7, -2.7, 0.99, 1e10, -1e10, INF, -INF, NAN, 2147483647.9, -2147483648.9, 9.3e18];
    let want32 = [0, 0, 1, -1, 2, -2, 0, i32::MAX, i32::MIN, i32::MAX, i32::MIN, 0, i32::MAX, i32::MIN, i32::MAX];
    let want64: [i64; 15] = [
        0,
        0,
        1,
        -1,
        2,
        -2,
        0,
        10_000_000_000,
        -10_000_000_000,
        i64::MAX,
        i64::MIN,
        0,
        2147483647,
        -2147483648,
        i64::MAX,
    ];
    for src in [DType::F64, DType::F32] {
        let x = Tensor::vec1(&xs).cast(src);
        let xv = x.to_f64_vec();
        let got32 = run_convert(&x, DType::I32).to_vec::<i32>().unwrap();
        let got64 = run_convert(&x, DType::I64).to_vec::<i64>().unwrap();
        for i in 0..xs.len() {
            // f32 rounds some inputs (2147483647.9 -> 2^31, 9.3e18 stays above i64::MAX);
            // the reference works on the value actually stored.
            let r32 = float_to_int(xv[i], i32::MIN as f64, i32::MAX as f64);
            assert_eq!(got32[i] as f64, r32, "{src} {} -> i32", xv[i]);
            if src == DType::F64 {
                assert_eq!(got32[i], want32[i], "f64 {} -> i32", xs[i]);
                assert_eq!(got64[i], want64[i], "f64 {} -> i64", xs[i]);
            }
        }
        // i64::MAX is not representable in f64; check the saturated ends exactly.
        assert_eq!(got64[9], i64::MAX);
        assert_eq!(got64[10], i64::MIN);
        assert_eq!(got64[11], 0);
        assert_eq!(got64[14], i64::MAX);
    }
}

#[test]
fn int_narrowing_wraps_and_widening_sign_extends() {
    let xs = [0i64, -1, 5, (1 << 32) + 5, 1 << 31, -(1 << 31) - 1, i64::MIN, i64::MAX, 123_456_789_012];
    let got = run_convert(&Tensor::vec1(&xs), DType::I32).to_vec::<i32>().unwrap();
    let want: Vec<i32> = xs.iter().map(|&x| wrap_i32(x)).collect();
    assert_eq!(got, want);
    assert_eq!(&got[..8], &[0, -1, 5, 5, i32::MIN, i32::MAX, 0, -1]);
    let small = [i32::MIN, -1, 0, i32::MAX];
    let got = run_convert(&Tensor::vec1(&small), DType::I64).to_vec::<i64>().unwrap();
    assert_eq!(got, vec![-2147483648, -1, 0, 2147483647]);
}

#[test]
fn int_and_f64_to_float_round_to_nearest() {
    // 2^53 + 1 is not representable in f64: ties-to-even gives 2^53.
    let big = [(1i64 << 53) + 1, (1 << 53) + 3, -7, i64::MIN];
    let got = run_convert(&Tensor::vec1(&big), DType::F64).to_vec::<f64>().unwrap();
    assert_eq!(got, vec![9007199254740992.0, 9007199254740996.0, -7.0, -9223372036854775808.0]);
    let got =
        run_convert(&Tensor::vec1(&[16_777_217i32, 16_777_219, -3, i32::MAX]), DType::F32).to_vec::<f32>().unwrap();
    assert_eq!(got, vec![16_777_216.0, 16_777_220.0, -3.0, 2_147_483_648.0]);
    let got = run_convert(&Tensor::vec1(&[16_777_217i64]), DType::F32).to_vec::<f32>().unwrap();
    assert_eq!(got, vec![16_777_216.0]);
    let got = run_convert(&Tensor::vec1(&[16_777_217i32]), DType::F64).to_vec::<f64>().unwrap();
    assert_eq!(got, vec![16_777_217.0]);

    let xs = [0.1, 1e300, -1e300, 1e-50, -0.0, INF, NAN, 1.0 + f64::EPSILON, 3.4028235e38];
    let got = run_convert(&Tensor::vec1(&xs), DType::F32).to_vec::<f32>().unwrap();
    assert_eq!(got[0], 0.1f32);
    assert_eq!(got[1], f32::INFINITY);
    assert_eq!(got[2], f32::NEG_INFINITY);
    assert!(got[3] == 0.0 && got[3].is_sign_positive());
    assert!(got[4] == 0.0 && got[4].is_sign_negative());
    assert_eq!(got[5], f32::INFINITY);
    assert!(got[6].is_nan());
    assert_eq!(got[7], 1.0);
    assert_eq!(got[8], f32::MAX);
    // f32 -> f64 is exact.
    let back = run_convert(&Tensor::vec1(&[0.1f32, f32::MAX, -0.0]), DType::F64).to_vec::<f64>().unwrap();
    assert_eq!(back[0], 0.1f32 as f64);
    assert_eq!(back[1], 3.4028234663852886e38);
    assert!(back[2] == 0.0 && back[2].is_sign_negative());
}

#[test]
fn bool_conversions() {
    let b = Tensor::vec1(&[true, false, true]);
    assert_eq!(run_convert(&b, DType::F32).to_vec::<f32>().unwrap(), vec![1.0, 0.0, 1.0]);
    assert_eq!(run_convert(&b, DType::F64).to_vec::<f64>().unwrap(), vec![1.0, 0.0, 1.0]);
    assert_eq!(run_convert(&b, DType::I32).to_vec::<i32>().unwrap(), vec![1, 0, 1]);
    assert_eq!(run_convert(&b, DType::I64).to_vec::<i64>().unwrap(), vec![1, 0, 1]);
    assert_eq!(run_convert(&b, DType::Bool).to_vec::<bool>().unwrap(), vec![true, false, true]);

    let xs = [0.0, -0.0, 1.0, -0.5, 1e-300, NAN, INF, -INF];
    let want = vec![false, false, true, true, true, true, true, true];
    assert_eq!(run_convert(&Tensor::vec1(&xs), DType::Bool).to_vec::<bool>().unwrap(), want);
    let xs32: Vec<f32> = xs.iter().map(|&v| v as f32).collect();
    // 1e-300 underflows to 0 in f32.
    let want32 = vec![false, false, true, true, false, true, true, true];
    assert_eq!(run_convert(&Tensor::vec1(&xs32), DType::Bool).to_vec::<bool>().unwrap(), want32);
    let ints = [0i32, 1, -1, i32::MIN, 2];
    assert_eq!(
        run_convert(&Tensor::vec1(&ints), DType::Bool).to_vec::<bool>().unwrap(),
        vec![false, true, true, true, true]
    );
    let ints = [0i64, 1 << 40, -1];
    assert_eq!(run_convert(&Tensor::vec1(&ints), DType::Bool).to_vec::<bool>().unwrap(), vec![false, true, true]);
}

/// Reference for any pair, on values every dtype holds exactly.
fn reference(x: f64, dst: DType) -> f64 {
    match dst {
        DType::F16 | DType::F32 | DType::F64 => x,
        DType::I32 => float_to_int(x, i32::MIN as f64, i32::MAX as f64),
        DType::I64 => float_to_int(x, -(2f64.powi(63)), 2f64.powi(63)),
        DType::U32 => float_to_int(x, 0.0, u32::MAX as f64),
        DType::Bool => (x != 0.0) as u8 as f64,
    }
}

#[test]
fn every_pair_matches_reference_and_same_dtype_is_a_copy() {
    let vals = [0.0, 1.0, -3.0, 7.0, 2.0, -1.0];
    for src in DType::ALL {
        let x = Tensor::vec1(&vals).cast(src);
        let xv = x.to_f64_vec();
        for dst in DType::ALL {
            let y = run_convert(&x, dst);
            // Integers to u32 keep the low 32 bits (wrap); floats saturate.
            let want: Vec<f64> = if dst == DType::U32 && src.is_int() {
                xv.iter().map(|&v| v as i64 as u32 as f64).collect()
            } else {
                xv.iter().map(|&v| reference(v, dst)).collect()
            };
            assert_eq!(y.to_f64_vec(), want, "{src} -> {dst}");
            if src == dst {
                assert_eq!(y, x);
            }
        }
    }
}

#[test]
fn rank0_size0_and_large_parallel_inputs() {
    let y = run_convert(&Tensor::scalar(-2.9f64), DType::I32);
    assert_eq!(y.shape(), &[] as &[usize]);
    assert_eq!(y.to_vec::<i32>().unwrap(), vec![-2]);
    for shape in [vec![0], vec![4, 0, 3]] {
        for src in DType::ALL {
            let x = Tensor::zeros(&TensorType::new(src, shape.clone()));
            for dst in DType::ALL {
                let y = run_convert(&x, dst);
                assert_eq!(y.numel(), 0);
            }
            assert_eq!(run_stop(&x), x);
        }
    }
    let n = 131_071;
    let x = Tensor::from_fn(&TensorType::new(DType::F64, vec![n]), |i| (i as f64 - 65_000.0) * 0.37);
    let xv = x.to_vec::<f64>().unwrap();
    let y = run_convert(&x, DType::I32).to_vec::<i32>().unwrap();
    let f = run_convert(&x, DType::F32).to_vec::<f32>().unwrap();
    for i in 0..n {
        assert_eq!(y[i] as f64, xv[i].trunc(), "i32 at {i}");
        assert_eq!(f[i] as f64, xv[i] as f32 as f64, "f32 at {i}");
    }
    let big = Tensor::from_fn(&TensorType::new(DType::I64, vec![3, 50_001]), |i| i as f64 * 1e5);
    let bv = big.to_vec::<i64>().unwrap();
    let narrowed = run_convert(&big, DType::I32).to_vec::<i32>().unwrap();
    for i in 0..bv.len() {
        assert_eq!(narrowed[i], wrap_i32(bv[i]), "narrow at {i}");
    }
    assert_eq!(run_stop(&big), big);
}

#[test]
fn stop_gradient_is_identity_for_every_dtype() {
    for dtype in DType::ALL {
        let ty = TensorType::new(dtype, vec![2, 3]);
        let x = Tensor::from_fn(&ty, |i| i as f64 * 1.5 - 2.0);
        assert_eq!(run_stop(&x), x, "{dtype}");
    }
    let x = Tensor::vec1(&[NAN, -0.0]);
    let y = run_stop(&x).to_vec::<f64>().unwrap();
    assert!(y[0].is_nan() && y[1] == 0.0 && y[1].is_sign_negative());
    assert_eq!(run_stop(&Tensor::scalar(7i32)).to_vec::<i32>().unwrap(), vec![7]);
}

#[test]
fn names_params_and_printing() {
    assert_eq!(Convert { dtype: DType::F32 }.params(), "dtype=f32");
    assert_eq!(display_prim(&Convert { dtype: DType::I64 }), "convert[dtype=i64]");
    assert_eq!(display_prim(&StopGradient), "stop_gradient");
    let mut b = Builder::new("f");
    let p = b.param(TensorType::new(DType::F32, vec![2]));
    let c = b.convert(p, DType::Bool).unwrap();
    let s = b.stop_gradient(c).unwrap();
    let f = b.finish(&[s]).unwrap();
    let text = f.to_string();
    assert!(text.contains("convert[dtype=bool]"), "{text}");
    assert!(text.contains("stop_gradient"), "{text}");
}

#[test]
fn arity_errors_are_structured() {
    let t = TensorType::new(DType::F32, vec![3]);
    let te = Convert { dtype: DType::I32 }.infer(&[]).unwrap_err();
    assert_eq!(te.prim, "convert[dtype=i32]");
    assert_eq!(te.expected, "expected 1 operand");
    let te = Convert { dtype: DType::I32 }.infer(&[t.clone(), t.clone()]).unwrap_err();
    assert_eq!(te.operands, vec![t.clone(), t.clone()]);
    let te = StopGradient.infer(&[t.clone(), t.clone()]).unwrap_err();
    assert_eq!(te.prim, "stop_gradient");
    assert_eq!(IrError::Type(te).to_string(), "stop_gradient: expected 1 operand; got operands (f32[3], f32[3])");
    // Through the builder: a handle foreign to the function is an IR error, not a panic.
    let mut other = Builder::new("g");
    let foreign = other.param(t.clone());
    let _ = other.param(t.clone());
    let mut b = Builder::new("f");
    assert!(matches!(b.convert(foreign, DType::F64), Err(IrError::UnknownValue { .. })));
    assert!(matches!(b.stop_gradient(foreign), Err(IrError::UnknownValue { .. })));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn convert_shape_rule_and_values_agree(
        shape in prop::collection::vec(0usize..5, 0..4),
        src_i in 0usize..5,
        dst_i in 0usize..5,
        scale in -1e12f64..1e12,
    ) {
        let (src, dst) = (DType::ALL[src_i], DType::ALL[dst_i]);
        let ty = TensorType::new(src, shape);
        prop_assert_eq!(Convert { dtype: dst }.infer(std::slice::from_ref(&ty)).unwrap(), vec![ty.with_dtype(dst)]);
        prop_assert_eq!(StopGradient.infer(std::slice::from_ref(&ty)).unwrap(), vec![ty.clone()]);
        let x = Tensor::from_fn(&ty, |i| ((i as f64) * 0.731).sin() * scale);
        let y = run_convert(&x, dst);
        let (xv, yv) = (x.to_f64_vec(), y.to_f64_vec());
        for i in 0..yv.len() {
            let want = match (src, dst) {
                // The f32 rounding of the exact source value (every source here is exact in f64).
                (_, DType::F32) => xv[i] as f32 as f64,
                (DType::I64, DType::I32) => wrap_i32(xv[i] as i64) as f64,
                _ => reference(xv[i], dst),
            };
            prop_assert_eq!(yv[i], want, "{} -> {} at {}: {}", src, dst, i, xv[i]);
        }
    }
}
