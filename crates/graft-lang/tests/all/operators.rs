//! Python's `//` and `%`: floor division and the remainder with the
//! divisor's sign, on compile-time integers (so sizes can be split:
//! `reshape(x, (size(x, 0) // 2, 2))`) and elementwise on tensors, checked
//! against Python's definitions for every sign combination, plus the
//! derivative of float `%`.

use graft_core::Tensor;

use crate::common::{module, run};

/// Python's `a // b` and `a % b` for integers (b != 0).
fn py_divmod(a: i64, b: i64) -> (i64, i64) {
    let q = (a as f64 / b as f64).floor() as i64;
    (q, a - q * b)
}

const PAIRS: [(i64, i64); 10] =
    [(7, 2), (-7, 2), (7, -2), (-7, -2), (6, 3), (-6, 3), (0, 5), (1, 7), (-1, 7), (13, -13)];

#[test]
fn integer_tensors_follow_python_for_every_sign() {
    let m = module(
        "def fd(a: tensor[n, i64], b: tensor[n, i64]) -> tensor[n, i64] = a // b\n\
         def md(a: tensor[n, i64], b: tensor[n, i64]) -> tensor[n, i64] = a % b\n",
    );
    let a = Tensor::from_vec(vec![PAIRS.len()], PAIRS.iter().map(|p| p.0).collect::<Vec<i64>>()).unwrap();
    let b = Tensor::from_vec(vec![PAIRS.len()], PAIRS.iter().map(|p| p.1).collect::<Vec<i64>>()).unwrap();
    let q = run(&m, "fd", &[a.clone(), b.clone()]).tensor().unwrap().to_vec::<i64>().unwrap();
    let r = run(&m, "md", &[a, b]).tensor().unwrap().to_vec::<i64>().unwrap();
    for (i, &(x, y)) in PAIRS.iter().enumerate() {
        assert_eq!((q[i], r[i]), py_divmod(x, y), "{x} divmod {y}");
    }
}

#[test]
fn compile_time_integers_fold_and_can_size_a_reshape() {
    let m = module(
        "def halves(x: tensor[n, f64]) -> tensor[n, f64] {\n\
           let pairs = reshape(x, (size(x, 0) // 2, 2))\n\
           reshape(pairs * 10.0, (size(x, 0),))\n\
         }\n\
         def consts() -> (i64, i64, i64, i64, f64, f64) = (-7 // 2, -7 % 2, 7 // -2, 7 % -2, -7.5 // 2.0, -7.5 % 2.0)\n",
    );
    let x = Tensor::from_vec(vec![6], vec![1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
    let y = run(&m, "halves", &[x]).tensor().unwrap().to_vec::<f64>().unwrap();
    assert_eq!(y, vec![10.0, 20.0, 30.0, 40.0, 50.0, 60.0]);
    let out = run(&m, "consts", &[]);
    let leaves = out.leaves();
    let ints: Vec<i64> = leaves[..4].iter().map(|t| t.to_vec::<i64>().unwrap()[0]).collect();
    assert_eq!(ints, vec![-4, 1, -4, -1]);
    let floats: Vec<f64> = leaves[4..].iter().map(|t| t.to_vec::<f64>().unwrap()[0]).collect();
    assert_eq!(floats, vec![-4.0, 0.5]);
}

#[test]
fn float_remainder_matches_python_and_its_gradient_is_one_in_x() {
    let m = module(
        "def md(a: tensor[n, f64], b: tensor[n, f64]) -> tensor[n, f64] = a % b\n\
         def fd(a: tensor[n, f64], b: tensor[n, f64]) -> tensor[n, f64] = a // b\n\
         def s(a: tensor[n, f64], b: tensor[n, f64]) -> f64 = sum(a % b)\n\
         def ds(a: tensor[n, f64], b: tensor[n, f64]) -> (tensor[n, f64], tensor[n, f64]) = grad(s)(a, b)\n",
    );
    let xs: [f64; 6] = [7.5, -7.5, 7.5, -7.5, 0.25, 3.2];
    let ys: [f64; 6] = [2.0, 2.0, -2.0, -2.0, 1.0, 1.5];
    let a = Tensor::from_vec(vec![6], xs.to_vec()).unwrap();
    let b = Tensor::from_vec(vec![6], ys.to_vec()).unwrap();
    let r = run(&m, "md", &[a.clone(), b.clone()]).tensor().unwrap().to_vec::<f64>().unwrap();
    let q = run(&m, "fd", &[a.clone(), b.clone()]).tensor().unwrap().to_vec::<f64>().unwrap();
    for i in 0..6 {
        let (x, y) = (xs[i], ys[i]);
        assert_eq!(q[i], (x / y).floor(), "{x} // {y}");
        assert!((r[i] - (x - (x / y).floor() * y)).abs() < 1e-12, "{x} % {y}: {}", r[i]);
    }
    // d(a % b)/da = 1 and d(a % b)/db = -floor(a / b) away from the jumps;
    // checked against central differences as well.
    let g = run(&m, "ds", &[a, b]);
    let leaves = g.leaves();
    let (ga, gb) = (leaves[0].to_vec::<f64>().unwrap(), leaves[1].to_vec::<f64>().unwrap());
    let h = 1e-6;
    for i in 0..6 {
        let (x, y) = (xs[i], ys[i]);
        let f = |x: f64, y: f64| x - (x / y).floor() * y;
        assert_eq!(ga[i], 1.0);
        let fd = (f(x, y + h) - f(x, y - h)) / (2.0 * h);
        assert!((gb[i] - fd).abs() < 1e-6, "d/db at {x} % {y}: {} vs {fd}", gb[i]);
        assert_eq!(gb[i], -(x / y).floor());
    }
}

#[test]
fn bool_operands_are_a_type_error() {
    let m = module("def f(a: tensor[n, bool], b: tensor[n, bool]) -> tensor[n, bool] = a % b\n");
    let a = Tensor::from_vec(vec![2], vec![true, false]).unwrap();
    let e = m.run("f", &[a.clone(), a]).expect_err("bool % bool must fail");
    assert!(e.message.contains('%') && e.message.contains("numbers"), "{}", e.message);
}

/// A run-time index means what a literal one means: `v[-1]` is the last
/// element either way. An index still out of range after adding the size
/// is clamped (the rule of `dynamic_slice`, documented in docs/language.md).
#[test]
fn run_time_negative_indices_count_from_the_end_like_literal_ones() {
    let m = module(
        "def at(v: tensor[n, f32], i: i32) -> f32 = v[i]\n\
         def lit(v: tensor[4, f32]) -> (f32, f32, f32, f32) = (v[-1], v[-2], v[-3], v[-4])\n\
         def row(a: tensor[r, c, f32], i: i64) -> tensor[c, f32] = a[i]\n\
         def col(a: tensor[r, c, f32], i: i32) -> tensor[r, f32] = a[:, i]\n\
         def many(v: tensor[n, f32], idx: tensor[k, i32]) -> tensor[k, f32] = vmap(fn (i) -> v[i])(idx)\n\
         def dat(v: tensor[n, f32], i: i32) -> tensor[n, f32] = grad(fn (w) -> w[i] * 3.0)(v)\n",
    );
    let v = Tensor::vec1(&[10.0f32, 11.0, 12.0, 13.0]);
    let at = |i: i32| run(&m, "at", &[v.clone(), Tensor::scalar(i)]).leaves()[0].to_vec::<f32>().unwrap()[0];
    let lit: Vec<f32> = run(&m, "lit", &[v.clone()]).leaves().iter().map(|t| t.to_vec::<f32>().unwrap()[0]).collect();
    assert_eq!(lit, vec![13.0, 12.0, 11.0, 10.0]);
    for i in -4..4 {
        assert_eq!(at(i), 10.0 + i.rem_euclid(4) as f32, "v[{i}]");
    }
    for (i, want) in [(-1, 13.0), (-2, 12.0), (-3, 11.0), (-4, 10.0)] {
        assert_eq!(at(i), want, "v[{i}] at run time");
        assert_eq!(at(i), lit[(-i - 1) as usize], "v[{i}] at run time and as a literal");
    }
    // Out of range after wrapping: clamped.
    assert_eq!((at(4), at(100), at(-5), at(i32::MIN)), (13.0, 13.0, 10.0, 10.0));
    let a = Tensor::from_vec(vec![2, 3], vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
    let row = run(&m, "row", &[a.clone(), Tensor::scalar(-1i64)]);
    assert_eq!(row.leaves()[0].to_vec::<f32>().unwrap(), vec![4.0, 5.0, 6.0]);
    let col = run(&m, "col", &[a, Tensor::scalar(-3i32)]);
    assert_eq!(col.leaves()[0].to_vec::<f32>().unwrap(), vec![1.0, 4.0]);
    // Batched indices (vmap) and the derivative follow the same rule.
    let many = run(&m, "many", &[v.clone(), Tensor::vec1(&[-1i32, 0, -3, 2])]);
    assert_eq!(many.leaves()[0].to_vec::<f32>().unwrap(), vec![13.0, 10.0, 11.0, 12.0]);
    let dat = run(&m, "dat", &[v, Tensor::scalar(-1i32)]);
    assert_eq!(dat.leaves()[0].to_vec::<f32>().unwrap(), vec![0.0, 0.0, 0.0, 3.0]);
}
