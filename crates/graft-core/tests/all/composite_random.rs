//! Random composites: key construction (constant and traced seeds agree),
//! splitting, and the statistics of uniform / normal / Bernoulli draws
//! (moments within a few standard errors), determinism per key, and errors.

use crate::composite_util;
use composite_util::*;
use graft_core::composite::random;
use graft_core::{DType, Tensor};

fn key_of(seed: i64) -> Vec<i32> {
    eval(&[], |b, _| random::key(b, seed)).to_vec::<i32>().unwrap()
}

#[test]
fn keys_from_seeds() {
    assert_eq!(key_of(0), vec![0, 0]);
    assert_eq!(key_of(42), vec![0, 42]);
    assert_eq!(key_of((1 << 33) + 5), vec![2, 5]);
    assert_eq!(key_of(-1), vec![-1, -1]);
    assert_eq!(key_of(u32::MAX as i64), vec![0, -1]);
    for seed in [0i64, 7, -1, -5, (1 << 40) + 123, -(1 << 35) - 9, i64::MIN, i64::MAX] {
        let s = Tensor::scalar(seed);
        let traced = eval(&[&s], |b, p| random::key_from(b, p[0])).to_vec::<i32>().unwrap();
        assert_eq!(traced, key_of(seed), "i64 seed {seed}");
    }
    for seed in [0i32, 9, 123456, i32::MAX] {
        let s = Tensor::scalar(seed);
        let traced = eval(&[&s], |b, p| random::key_from(b, p[0])).to_vec::<i32>().unwrap();
        assert_eq!(traced, key_of(seed as i64), "i32 seed {seed}");
    }
    let neg = eval(&[&Tensor::scalar(-3i32)], |b, p| random::key_from(b, p[0])).to_vec::<i32>().unwrap();
    assert_eq!(neg, vec![0, -3], "an i32 seed keeps its bit pattern in the low word");
    let msg = err_msg(&[&Tensor::scalar(1.0f64)], |b, p| random::key_from(b, p[0]));
    assert!(msg.contains("key_from") && msg.contains("f64[]"), "{msg}");
    let msg = err_msg(&[&ti32(&[2], &[1, 2])], |b, p| random::key_from(b, p[0]));
    assert!(msg.contains("rank-0"), "{msg}");
}

#[test]
fn split_agrees_with_split_keys() {
    let all = eval(&[], |b, _| {
        let k = random::key(b, 1)?;
        random::split(b, k, 3)
    });
    assert_eq!(all.shape(), &[3, 2]);
    let all = all.to_vec::<i32>().unwrap();
    let outs = run_multi(&[], |b, _| {
        let k = random::key(b, 1)?;
        random::split_keys(b, k, 3)
    })
    .unwrap();
    for (i, o) in outs.iter().enumerate() {
        assert_eq!(o.shape(), &[2]);
        assert_eq!(o.to_vec::<i32>().unwrap(), all[2 * i..2 * i + 2].to_vec());
    }
    // Children differ from each other and from the parent.
    assert_ne!(all[0..2], all[2..4]);
    assert_ne!(all[0..2], [0, 1]);
    let msg = err_msg(&[&ti32(&[3], &[0, 0, 0])], |b, p| random::split(b, p[0], 2));
    assert!(msg.contains("i32[2]") && msg.contains("i32[3]"), "{msg}");
}

fn moments(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let m = v.iter().sum::<f64>() / n;
    (m, v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / n)
}

#[test]
fn uniform_range_moments_and_determinism() {
    let n = 200_000;
    for dtype in [DType::F32, DType::F64] {
        let draw = |seed| {
            eval(&[], |b, _| {
                let k = random::key(b, seed)?;
                random::uniform(b, k, &[n / 100, 100], dtype, -2.0, 3.0)
            })
        };
        let t = draw(5);
        assert_eq!(t.dtype(), dtype);
        assert_eq!(t.shape(), &[n / 100, 100]);
        let v = t.to_f64_vec();
        assert!(v.iter().all(|&x| (-2.0..3.0).contains(&x)), "{dtype}: out of [-2, 3)");
        let (m, var) = moments(&v);
        // Uniform(-2, 3): mean 0.5, variance 25/12; standard error of the mean ~0.0032.
        assert!((m - 0.5).abs() < 0.02, "{dtype}: mean {m}");
        assert!((var - 25.0 / 12.0).abs() < 0.03, "{dtype}: var {var}");
        assert_eq!(draw(5).to_f64_vec(), v, "same key, same numbers");
        assert_ne!(draw(6).to_f64_vec(), v, "another key, other numbers");
    }
    let msg = err_msg(&[], |b, _| {
        let k = random::key(b, 0)?;
        random::uniform(b, k, &[2], DType::F64, 1.0, 0.0)
    });
    assert!(msg.contains("lo=1") && msg.contains("hi=0"), "{msg}");
    let msg = err_msg(&[], |b, _| {
        let k = random::key(b, 0)?;
        random::uniform(b, k, &[2], DType::I32, 0.0, 1.0)
    });
    assert!(msg.contains("floating-point"), "{msg}");
}

#[test]
fn normal_moments_finite_and_tails() {
    let n = 200_000;
    for dtype in [DType::F32, DType::F64] {
        let t = eval(&[], |b, _| {
            let k = random::key(b, 11)?;
            random::normal(b, k, &[n], dtype)
        });
        assert_eq!(t.dtype(), dtype);
        let v = t.to_f64_vec();
        assert!(v.iter().all(|x| x.is_finite()));
        let (m, var) = moments(&v);
        assert!(m.abs() < 0.015, "{dtype}: mean {m}");
        assert!((var - 1.0).abs() < 0.02, "{dtype}: var {var}");
        // Tail mass: P(|z| > 2) = 0.0455.
        let tail = v.iter().filter(|x| x.abs() > 2.0).count() as f64 / n as f64;
        assert!((tail - 0.0455).abs() < 0.003, "{dtype}: tail {tail}");
        // Symmetry and 4th moment (3 for a Gaussian).
        let k4 = v.iter().map(|x| x.powi(4)).sum::<f64>() / n as f64;
        assert!((k4 - 3.0).abs() < 0.1, "{dtype}: 4th moment {k4}");
    }
    let t = eval(&[], |b, _| {
        let k = random::key(b, 0)?;
        random::normal(b, k, &[2, 0, 3], DType::F64)
    });
    assert_eq!(t.shape(), &[2, 0, 3]);
}

#[test]
fn bernoulli_fraction() {
    for p in [0.0, 0.1, 0.5, 0.9, 1.0] {
        let t = eval(&[], |b, _| {
            let k = random::key(b, 3)?;
            random::bernoulli(b, k, p, &[100_000])
        });
        let v = t.to_vec::<bool>().unwrap();
        let frac = v.iter().filter(|&&x| x).count() as f64 / v.len() as f64;
        assert!((frac - p).abs() < 0.006, "p={p}: got {frac}");
        if p == 0.0 || p == 1.0 {
            assert_eq!(frac, p);
        }
    }
    let msg = err_msg(&[], |b, _| {
        let k = random::key(b, 0)?;
        random::bernoulli(b, k, 1.5, &[2])
    });
    assert!(msg.contains("p must be in [0, 1]"), "{msg}");
}
