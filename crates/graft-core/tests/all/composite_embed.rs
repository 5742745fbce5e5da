//! Embedding, one-hot and dropout composites (`composite::embed`,
//! `composite::dropout`) against naive references: row lookups with
//! clamped ids, one-hot rows (all zeros out of range), dropout's kept
//! fraction (statistically), exact `1 / (1 - rate)` scaling, determinism per
//! key, identity cases, errors, and an embedding gradient check.

use crate::common;

use common::{check_grads, Rng};
use graft_core::composite::{dropout, embed};
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
    assert_eq!(out.ty(), f.output_types()[0]);
    out
}

fn table(v: usize, d: usize) -> Tensor {
    Tensor::from_fn(&ty(DType::F64, &[v, d]), |i| (i as f64) * 0.5 - 3.0)
}

#[test]
fn embedding_looks_up_rows_with_clamped_ids() {
    let t = table(5, 3);
    let tv = t.to_f64_vec();
    for idt in [DType::I32, DType::I64] {
        let raw = [0i64, 4, 2, -3, 7, 4];
        let ids = Tensor::from_vec(vec![2, 3], raw.to_vec()).unwrap().cast(idt);
        let f = build(&[t.ty(), ids.ty()], |b, p| embed::embedding(b, p[0], p[1], None)).unwrap();
        let y = run(&f, &[&t, &ids]);
        assert_eq!(y.shape(), &[2, 3, 3]);
        let mut want = vec![];
        for &id in &raw {
            let r = id.clamp(0, 4) as usize;
            want.extend_from_slice(&tv[r * 3..r * 3 + 3]);
        }
        assert_eq!(y.to_f64_vec(), want, "{idt}");
    }
    // Scalar id -> one row [D]; f32 table.
    let t32 = t.cast(DType::F32);
    let id = Tensor::scalar(3i32);
    let f = build(&[t32.ty(), id.ty()], |b, p| embed::embedding(b, p[0], p[1], None)).unwrap();
    let y = run(&f, &[&t32, &id]);
    assert_eq!(y.ty(), ty(DType::F32, &[3]));
    assert_eq!(y.to_f64_vec(), tv[9..12].to_vec());
}

#[test]
fn embedding_padding_idx_returns_the_row_but_blocks_its_gradient() {
    let t = table(4, 2);
    let ids = Tensor::from_vec(vec![3], vec![1i32, 2, 1]).unwrap();
    let f = build(&[t.ty(), ids.ty()], |b, p| embed::embedding(b, p[0], p[1], Some(1))).unwrap();
    let y = run(&f, &[&t, &ids]);
    let tv = t.to_f64_vec();
    assert_eq!(y.to_f64_vec(), [&tv[2..4], &tv[4..6], &tv[2..4]].concat());
    // Gradient of sum(y) w.r.t. the table: row 2 gets 1 (looked up once), row 1 (padding) gets 0.
    let g = graft_core::ad::vjp_func(&f, &graft_core::ad::Wrt::Positions(vec![0])).unwrap();
    let ct = Tensor::full(&y.ty(), 1.0);
    let out = Executable::new(g).unwrap().run(&[&t, &ids, &ct]).unwrap();
    assert_eq!(out[1].to_f64_vec(), vec![0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0]);
}

#[test]
fn embedding_gradients() {
    let mut rng = Rng(7);
    let t = rng.tensor(&ty(DType::F64, &[6, 4]), -1.0, 1.0);
    let ids = Tensor::from_vec(vec![2, 3], vec![5i32, 0, 5, 2, 9, -1]).unwrap();
    let f = build(&[t.ty(), ids.ty()], |b, p| embed::embedding(b, p[0], p[1], None)).unwrap();
    check_grads("embedding", &f, &[t, ids], &mut rng, 1e-6, 1e-6);
}

#[test]
fn one_hot_matches_reference_and_zeroes_out_of_range() {
    let raw = [0i64, 3, -1, 4, 2, 9];
    for idt in [DType::I32, DType::I64] {
        let ids = Tensor::from_vec(vec![2, 3], raw.to_vec()).unwrap().cast(idt);
        for dtype in [DType::F32, DType::F64, DType::I32] {
            let f = build(&[ids.ty()], |b, p| embed::one_hot(b, p[0], 4, dtype, 2)).unwrap();
            let y = run(&f, &[&ids]);
            assert_eq!(y.ty(), ty(dtype, &[2, 3, 4]));
            let want: Vec<f64> =
                raw.iter().flat_map(|&id| (0..4).map(move |c| if id == c { 1.0 } else { 0.0 })).collect();
            assert_eq!(y.to_f64_vec(), want, "{idt} -> {dtype}");
        }
    }
    // Inserting the class axis first: out[c, i] = (ids[i] == c); bool dtype.
    let ids = Tensor::from_vec(vec![3], vec![1i32, 0, 5]).unwrap();
    let f = build(&[ids.ty()], |b, p| embed::one_hot(b, p[0], 2, DType::Bool, 0)).unwrap();
    let y = run(&f, &[&ids]);
    assert_eq!(y.ty(), ty(DType::Bool, &[2, 3]));
    assert_eq!(y.to_vec::<bool>().unwrap(), vec![false, true, false, true, false, false]);
}

#[test]
fn embed_errors_are_clear() {
    let e = build(&[ty(DType::F64, &[4]), ty(DType::I32, &[2])], |b, p| embed::embedding(b, p[0], p[1], None))
        .unwrap_err()
        .to_string();
    assert!(e.contains("embedding") && e.contains("table of rank 2"), "{e}");
    let e = build(&[ty(DType::F64, &[4, 2]), ty(DType::F64, &[2])], |b, p| embed::embedding(b, p[0], p[1], None))
        .unwrap_err()
        .to_string();
    assert!(e.contains("expected integer ids"), "{e}");
    let e = build(&[ty(DType::F64, &[4, 2]), ty(DType::I32, &[2])], |b, p| embed::embedding(b, p[0], p[1], Some(4)))
        .unwrap_err()
        .to_string();
    assert!(e.contains("padding_idx 4 is out of range"), "{e}");
    let e = build(&[ty(DType::F32, &[2])], |b, p| embed::one_hot(b, p[0], 3, DType::F32, 1)).unwrap_err().to_string();
    assert!(e.contains("one_hot") && e.contains("expected integer ids"), "{e}");
    let e = build(&[ty(DType::I32, &[2])], |b, p| embed::one_hot(b, p[0], 3, DType::F32, 2)).unwrap_err().to_string();
    assert!(e.contains("axis 2 is out of range"), "{e}");
}

fn key(k0: i32, k1: i32) -> Tensor {
    Tensor::from_vec(vec![2], vec![k0, k1]).unwrap()
}

fn run_dropout(x: &Tensor, k: &Tensor, rate: f64, training: bool) -> Tensor {
    let f = build(&[k.ty(), x.ty()], |b, p| dropout::dropout(b, p[0], p[1], rate, training)).unwrap();
    run(&f, &[k, x])
}

#[test]
fn dropout_keeps_the_expected_fraction_and_scales_exactly() {
    let n = 20_000;
    for dtype in [DType::F32, DType::F64] {
        let x = Tensor::from_fn(&ty(dtype, &[100, 200]), |i| 1.0 + (i % 17) as f64 * 0.25);
        let xv = x.to_f64_vec();
        for rate in [0.1, 0.5, 0.9] {
            let y = run_dropout(&x, &key(0, 42), rate, true).to_f64_vec();
            let keep = 1.0 - rate;
            let mut kept = 0;
            for (a, &v) in xv.iter().zip(&y) {
                if v != 0.0 {
                    kept += 1;
                    // Exactly x / (1 - rate) in the dtype.
                    let want = if dtype == DType::F32 { (*a as f32 / keep as f32) as f64 } else { a / keep };
                    assert_eq!(v, want, "{dtype} rate {rate}");
                }
            }
            // Binomial(n, keep): 5 standard deviations.
            let mean = n as f64 * keep;
            let sd = (n as f64 * keep * rate).sqrt();
            assert!((kept as f64 - mean).abs() < 5.0 * sd, "{dtype} rate {rate}: kept {kept} of {n}, expected {mean}");
        }
    }
}

#[test]
fn dropout_is_deterministic_per_key() {
    let x = Tensor::full(&ty(DType::F64, &[1000]), 1.0);
    let a = run_dropout(&x, &key(0, 1), 0.5, true);
    let b = run_dropout(&x, &key(0, 1), 0.5, true);
    let c = run_dropout(&x, &key(0, 2), 0.5, true);
    assert_eq!(a, b);
    assert_ne!(a, c);
    // The mask is exactly `u < 1 - rate` with u from random_uniform under the key.
    let mut bld = Builder::new("u");
    let k = bld.param(ty(DType::I32, &[2]));
    let u = bld.random_uniform(k, &[1000], DType::F64).unwrap();
    let uf = bld.finish(&[u]).unwrap();
    let u = run(&uf, &[&key(0, 1)]).to_f64_vec();
    let want: Vec<f64> = u.iter().map(|&u| if u < 0.5 { 2.0 } else { 0.0 }).collect();
    assert_eq!(a.to_f64_vec(), want);
}

#[test]
fn dropout_identity_when_not_training_or_rate_zero() {
    let x = Rng(3).tensor(&ty(DType::F64, &[4, 5]), -1.0, 1.0);
    assert_eq!(run_dropout(&x, &key(0, 9), 0.5, false), x);
    assert_eq!(run_dropout(&x, &key(0, 9), 0.0, true), x);
    // Identity emits no random draws.
    let f = build(&[ty(DType::I32, &[2]), x.ty()], |b, p| dropout::dropout(b, p[0], p[1], 0.3, false)).unwrap();
    assert_eq!(f.count_prim("random_uniform"), 0);
}

#[test]
fn dropout_gradient_is_the_mask_over_keep() {
    let x = Rng(4).tensor(&ty(DType::F64, &[50]), 0.5, 1.5);
    let k = key(0, 5);
    let f = build(&[k.ty(), x.ty()], |b, p| dropout::dropout(b, p[0], p[1], 0.25, true)).unwrap();
    let y = run(&f, &[&k, &x]).to_f64_vec();
    let g = graft_core::ad::vjp_func(&f, &graft_core::ad::Wrt::Positions(vec![1])).unwrap();
    let ct = Tensor::full(&x.ty(), 1.0);
    let out = Executable::new(g).unwrap().run(&[&k, &x, &ct]).unwrap();
    let grad = out[1].to_f64_vec();
    for (gi, yi) in grad.iter().zip(&y) {
        assert_eq!(*gi, if *yi == 0.0 { 0.0 } else { 1.0 / 0.75 });
    }
}

#[test]
fn dropout_errors_are_clear() {
    let x = ty(DType::F64, &[3]);
    let k = ty(DType::I32, &[2]);
    for rate in [-0.1, 1.0, 1.5, f64::NAN] {
        let e = build(&[k.clone(), x.clone()], |b, p| dropout::dropout(b, p[0], p[1], rate, true)).unwrap_err();
        assert!(e.to_string().contains("rate must be in [0, 1)"), "{e}");
    }
    let e = build(&[ty(DType::I32, &[3]), x.clone()], |b, p| dropout::dropout(b, p[0], p[1], 0.5, true)).unwrap_err();
    assert!(e.to_string().contains("expected a key of type i32[2]"), "{e}");
    let e = build(&[k, ty(DType::I32, &[3])], |b, p| dropout::dropout(b, p[0], p[1], 0.5, true)).unwrap_err();
    assert!(e.to_string().contains("floating-point"), "{e}");
}
