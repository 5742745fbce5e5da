//! `argsort` (primitive) and `sort` (composite): forward values against a
//! naive stable reference (NaNs last, `-0.0 == 0.0`), every dtype and axis,
//! large parallel inputs, and shape-rule errors. Derivatives are checked in
//! ad_prims.rs (`sort_rule`), batching in vmap.rs (`argsort_and_sort`).

use graft_core::composite::sort::sort;
use graft_core::{Builder, DType, Executable, IrError, Tensor, Value};
use std::cmp::Ordering;

fn run(x: &Tensor, build: impl FnOnce(&mut Builder, Value) -> Result<Value, IrError>) -> Tensor {
    let mut b = Builder::new("f");
    let p = b.param(x.ty());
    let y = build(&mut b, p).unwrap();
    let inferred = b.func().ty(y).clone();
    let f = b.finish(&[y]).unwrap();
    let out = Executable::new(f).unwrap().run(&[x]).unwrap().remove(0);
    assert_eq!(out.ty(), inferred, "kernel output type differs from the inferred type");
    out
}

/// NumPy's order: NaN last, otherwise `<`.
fn order(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (false, false) => a.partial_cmp(&b).unwrap(),
        (x, y) => x.cmp(&y),
    }
}

/// Reference stable argsort of a row-major `shape` array along `axis` (insertion sort).
fn reference(v: &[f64], shape: &[usize], axis: usize) -> Vec<usize> {
    let n = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    let outer: usize = shape[..axis].iter().product();
    let mut out = vec![0; v.len()];
    for o in 0..outer {
        for i in 0..inner {
            let at = |j: usize| o * n * inner + j * inner + i;
            let mut perm: Vec<usize> = Vec::new();
            for j in 0..n {
                let pos = perm.iter().position(|&k| order(v[at(j)], v[at(k)]) == Ordering::Less).unwrap_or(perm.len());
                perm.insert(pos, j);
            }
            for (j, &p) in perm.iter().enumerate() {
                out[at(j)] = p;
            }
        }
    }
    out
}

#[test]
fn argsort_is_stable_with_nans_last() {
    let v = [3.0, f64::NAN, -1.0, 0.0, -0.0, 3.0, f64::NAN, -f64::INFINITY, 2.0, -1.0];
    let x = Tensor::from_vec(vec![10], v.to_vec()).unwrap();
    let p = run(&x, |b, x| b.argsort(x, 0, DType::I32));
    let want = [7, 2, 9, 3, 4, 8, 0, 5, 1, 6];
    assert_eq!(p.to_f64_vec(), want.iter().map(|&k| k as f64).collect::<Vec<_>>());
    let s = run(&x, |b, x| sort(b, x, 0)).to_f64_vec();
    let expect: Vec<f64> = want.iter().map(|&k| v[k]).collect();
    for (g, w) in s.iter().zip(&expect) {
        assert!(g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()), "{s:?} vs {expect:?}");
    }
    // f32 orders the same way.
    let x32 = Tensor::from_vec(vec![10], v.iter().map(|&a| a as f32).collect::<Vec<f32>>()).unwrap();
    let p32 = run(&x32, |b, x| b.argsort(x, 0, DType::I64));
    assert_eq!(p32.dtype(), DType::I64);
    assert_eq!(p32.to_f64_vec(), p.to_f64_vec());
}

#[test]
fn argsort_matches_the_reference_on_every_axis_and_dtype() {
    let shape = [3, 5, 4];
    // Few distinct values so ties (and stability) matter.
    let v: Vec<f64> = (0..60).map(|i| ((i * 7 + 3) % 5) as f64 - 2.0).collect();
    for dt in [DType::F32, DType::F64, DType::I32, DType::I64] {
        let x = Tensor::from_fn(&graft_core::TensorType::new(dt, shape.to_vec()), |i| v[i]);
        for axis in 0..3 {
            let p = run(&x, |b, x| b.argsort(x, axis, DType::I32)).to_f64_vec();
            let want: Vec<f64> = reference(&v, &shape, axis).iter().map(|&k| k as f64).collect();
            assert_eq!(p, want, "{dt} axis {axis}");
            let s = run(&x, |b, x| sort(b, x, axis)).to_f64_vec();
            let n = shape[axis];
            let inner: usize = shape[axis + 1..].iter().product();
            for (flat, &got) in s.iter().enumerate() {
                let (o, j, i) = (flat / (n * inner), (flat / inner) % n, flat % inner);
                let src = o * n * inner + (want[flat] as usize) * inner + i;
                assert_eq!(got, v[src], "sorted {dt} axis {axis} at {flat} (j={j})");
            }
        }
    }
}

#[test]
fn large_inputs_sort_in_parallel_like_sequentially() {
    let (rows, n) = (64, 2048);
    let v: Vec<f64> = (0..rows * n).map(|i| ((i as u64).wrapping_mul(2654435761) % 1000) as f64).collect();
    let x = Tensor::from_vec(vec![rows, n], v.clone()).unwrap();
    let p = run(&x, |b, x| b.argsort(x, 1, DType::I32)).to_f64_vec();
    let want: Vec<f64> = reference(&v[..n], &[1, n], 1).iter().map(|&k| k as f64).collect();
    assert_eq!(&p[..n], &want[..]);
    let s = run(&x, |b, x| sort(b, x, 1)).to_f64_vec();
    for r in 0..rows {
        assert!(s[r * n..(r + 1) * n].windows(2).all(|w| w[0] <= w[1]), "row {r} not sorted");
    }
}

#[test]
fn argsort_shape_errors() {
    let mut b = Builder::new("f");
    let x = b.param(graft_core::TensorType::new(DType::F32, vec![2, 3]));
    let bo = b.param(graft_core::TensorType::new(DType::Bool, vec![3]));
    let e = b.argsort(x, 2, DType::I32).unwrap_err().to_string();
    assert!(e.contains("axis 2 is out of range for rank 2"), "{e}");
    let e = b.argsort(bo, 0, DType::I32).unwrap_err().to_string();
    assert!(e.contains("numeric operand"), "{e}");
    let e = b.argsort(x, 0, DType::F32).unwrap_err().to_string();
    assert!(e.contains("index_dtype"), "{e}");
    let e = sort(&mut b, x, 5).unwrap_err().to_string();
    assert!(e.contains("axis 5 is out of range"), "{e}");
    // An empty axis sorts to an empty permutation.
    let z = Tensor::from_vec(vec![2, 0], Vec::<f64>::new()).unwrap();
    assert_eq!(run(&z, |b, x| b.argsort(x, 1, DType::I32)).shape(), &[2, 0]);
}
