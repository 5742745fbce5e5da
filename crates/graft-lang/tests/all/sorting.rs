//! `sort`, `argsort` and `permutation`: values against hand results (NaNs
//! last, stable ties), gradients of `sort` against central differences in
//! f64, vmap, and errors.

use crate::common::{check_error, close, f64s, leaf_values, module, run};
use graft_core::Tensor;

#[test]
fn sort_and_argsort_values() {
    let m = module(
        "def main() {\n\
           let x = [3.0, nan, -1.0, 2.0, -1.0]\n\
           let m = [[3, 1, 2], [0, 5, 5]]\n\
           (sort(x), argsort(x), sort(m), argsort(m, axis=0), sort(m, axis=0), argsort([2.0, 1.0, 2.0, 1.0]))\n\
         }\n",
    );
    let o = leaf_values(&run(&m, "main", &[]));
    assert_eq!(&o[0][..4], &[-1.0, -1.0, 2.0, 3.0]);
    assert!(o[0][4].is_nan());
    assert_eq!(o[1], [2.0, 4.0, 3.0, 0.0, 1.0]);
    assert_eq!(o[2], [1.0, 2.0, 3.0, 0.0, 5.0, 5.0]);
    assert_eq!(o[3], [1.0, 0.0, 0.0, 0.0, 1.0, 1.0]);
    assert_eq!(o[4], [0.0, 1.0, 2.0, 3.0, 5.0, 5.0]);
    // Stable: equal elements keep their order.
    assert_eq!(o[5], [1.0, 3.0, 0.0, 2.0]);
}

#[test]
fn sort_gradient_matches_finite_differences() {
    let m = module(
        "def f(x: tensor[2, 4, f64]) -> f64 = sum(sort(x) * [1.0, -2.0, 3.0, 0.5]) + sum(sin(sort(x, axis=0)))\n\
         def g(x: tensor[2, 4, f64]) -> tensor[2, 4, f64] = grad(f)(x)\n",
    );
    let x = [0.3, -0.2, 0.9, 0.1, 0.4, -0.7, 0.05, 0.6];
    let g = leaf_values(&run(&m, "g", &[f64s(&[2, 4], &x)]))[0].clone();
    let f = |x: &[f64]| leaf_values(&run(&m, "f", &[f64s(&[2, 4], x)]))[0][0];
    let h = 1e-6;
    for k in 0..8 {
        let (mut p, mut q) = (x.to_vec(), x.to_vec());
        p[k] += h;
        q[k] -= h;
        close(&format!("d/dx[{k}]"), &[g[k]], &[(f(&p) - f(&q)) / (2.0 * h)], 1e-6);
    }
}

#[test]
fn vmap_of_sort_and_argsort() {
    let m = module(
        "def one(x: tensor[3, f64]) -> (tensor[3, f64], tensor[3, i32]) = (sort(x), argsort(x))\n\
         def many(xs: tensor[2, 3, f64]) -> (tensor[2, 3, f64], tensor[2, 3, i32]) = vmap(one)(xs)\n",
    );
    let o = leaf_values(&run(&m, "many", &[f64s(&[2, 3], &[3.0, 1.0, 2.0, -1.0, -3.0, 5.0])]));
    assert_eq!(o[0], [1.0, 2.0, 3.0, -3.0, -1.0, 5.0]);
    assert_eq!(o[1], [1.0, 2.0, 0.0, 1.0, 0.0, 2.0]);
}

#[test]
fn permutation_is_a_deterministic_permutation() {
    let m = module(
        "def main(seed: i32) {\n\
           let k = key(seed)\n\
           (permutation(k, 10), permutation(k, 10), permutation(split(k).0, 10), permutation(k, [[0.0, 0.5], [1.0, 1.5], [2.0, 2.5], [3.0, 3.5]]))\n\
         }\n",
    );
    let mut seen = Vec::new();
    for seed in 0..5 {
        let o = leaf_values(&run(&m, "main", &[Tensor::scalar(seed)]));
        let mut p = o[0].clone();
        assert_eq!(o[0], o[1], "same key, same permutation");
        p.sort_by(f64::total_cmp);
        assert_eq!(p, (0..10).map(f64::from).collect::<Vec<_>>(), "a permutation of 0..10");
        let mut q = o[2].clone();
        q.sort_by(f64::total_cmp);
        assert_eq!(p, q);
        // Rows move whole.
        for r in 0..4 {
            assert_eq!(o[3][2 * r + 1], o[3][2 * r] + 0.5);
        }
        let mut rows: Vec<f64> = (0..4).map(|r| o[3][2 * r]).collect();
        rows.sort_by(f64::total_cmp);
        assert_eq!(rows, [0.0, 1.0, 2.0, 3.0]);
        seen.push(o[0].clone());
    }
    seen.dedup();
    assert!(seen.len() > 1, "different keys give different permutations");
}

#[test]
fn sort_errors() {
    let (msg, at) = check_error("def f(x: tensor[3, f32]) -> tensor[3, f32] = sort(x, axis=none)\n");
    assert!(msg.contains("an axis must be an integer or a dimension name, found `none`"), "{msg}");
    assert_eq!(at, (1, 54));
    let (msg, at) = check_error("def f(x: f32) -> f32 = sort(x)\n");
    assert!(msg.contains("`sort` needs a value with at least one axis"), "{msg}");
    assert_eq!(at, (1, 24));
    let (msg, _) = check_error("def f(x: tensor[3, bool]) -> tensor[3, i32] = argsort(x)\n");
    assert!(msg.contains("`argsort`") && msg.contains("numeric"), "{msg}");
    let (msg, at) = check_error("def f(x: f32) = permutation(key(0), -3)\n");
    assert!(msg.contains("`x` must be an integer >= 0 or a tensor, found -3"), "{msg}");
    assert_eq!(at, (1, 37));
}
