//! `opt::diagonal_products`: a product with a diagonal matrix (`eye *
//! broadcast(d)`, the identity, an identity constant) becomes a scaling of
//! the other operand, on either side and for every contracted axis, with
//! the dense product's bits on finite inputs; what `jacrev` and `jacfwd`
//! build then holds no `n x n x n` product.

use crate::common;

use common::{build as func, run, Rng};
use graft_core::jac::{jacfwd, jacrev};
use graft_core::ops::Prim;
use graft_core::opt::diagonal_products;
use graft_core::{Builder, DType, Func, IrError, Tensor, TensorType, Value};

fn t64(shape: &[usize]) -> TensorType {
    TensorType::new(DType::F64, shape.to_vec())
}

/// `convert(eq(iota(0), iota(1)))`, as `jac::basis` builds it.
fn eye(b: &mut Builder, n: usize) -> Result<Value, IrError> {
    let r = b.iota(DType::I32, &[n, n], 0)?;
    let c = b.iota(DType::I32, &[n, n], 1)?;
    let e = b.eq(r, c)?;
    b.convert(e, DType::F64)
}

fn dots(f: &Func) -> usize {
    f.eqns.iter().filter(|e| matches!(e.prim, Prim::DotGeneral(_))).count()
}

fn bits(t: &Tensor) -> Vec<u64> {
    t.to_f64_vec().iter().map(|x| x.to_bits()).collect()
}

/// Every placement of a diagonal `[n, n]` operand against a rank-3 other
/// operand, each contracted axis on both sides: rewritten (no product
/// left) and bitwise the dense product computed from a diagonal passed in
/// as a parameter (which no rewrite can see through).
#[test]
fn every_side_and_axis_equals_the_dense_product() {
    let n = 5;
    let mut rng = Rng(11);
    let d = rng.tensor(&t64(&[n]), -2.0, 2.0);
    let dense_diag: Vec<f64> = (0..n * n).map(|k| if k / n == k % n { d.to_f64_vec()[k / n] } else { 0.0 }).collect();
    let dense_diag = Tensor::from_vec(vec![n, n], dense_diag).unwrap();
    for (bdim, shape) in [(0usize, [n, 3, 4]), (1, [3, n, 4]), (2, [3, 4, n])] {
        let x = rng.tensor(&t64(&shape), -2.0, 2.0);
        for diag_side in [0usize, 1] {
            for diag_axis in [0usize, 1] {
                // Which form the diagonal takes: scaled along either axis, in
                // either operand order, or the identity alone.
                for form in 0..4 {
                    let contract = |diag_first: bool| -> (Vec<usize>, Vec<usize>) {
                        if diag_first {
                            (vec![diag_axis], vec![bdim])
                        } else {
                            (vec![bdim], vec![diag_axis])
                        }
                    };
                    let (lc, rc) = contract(diag_side == 0);
                    let build = |b: &mut Builder, diag: Value, x: Value| {
                        let (l, r) = if diag_side == 0 { (diag, x) } else { (x, diag) };
                        b.dot_general(l, r, &lc, &rc, &[], &[])
                    };
                    let f = func(&[t64(&[n]), t64(&shape)], |b, p| {
                        let e = eye(b, n)?;
                        let diag = match form {
                            0 | 1 => {
                                let s = b.broadcast_in_dim(p[0], &[n, n], &[form])?;
                                b.mul(e, s)?
                            }
                            2 => {
                                let s = b.broadcast_in_dim(p[0], &[n, n], &[0])?;
                                b.mul(s, e)?
                            }
                            _ => e,
                        };
                        Ok(vec![build(b, diag, p[1])?])
                    });
                    let reference = func(&[t64(&[n, n]), t64(&shape)], |b, p| Ok(vec![build(b, p[0], p[1])?]));
                    let g = diagonal_products(&f).unwrap().expect("a diagonal product");
                    let g = graft_core::opt::simplify(&g);
                    assert_eq!(dots(&g), 0, "side {diag_side} axis {diag_axis} form {form} on {shape:?}:\n{g}");
                    let dd = if form == 3 {
                        Tensor::from_fn(&t64(&[n, n]), |k| (k / n == k % n) as u8 as f64)
                    } else {
                        dense_diag.clone()
                    };
                    let want = run(&reference, &[dd, x.clone()]);
                    let got = run(&g, &[d.clone(), x.clone()]);
                    assert_eq!(got[0].shape(), want[0].shape());
                    assert_eq!(
                        bits(&got[0]),
                        bits(&want[0]),
                        "side {diag_side} axis {diag_axis} form {form} on {shape:?}"
                    );
                }
            }
        }
    }
}

/// An identity held as a constant is recognised too; a constant that is
/// not the identity, a batched product and a non-square mask are left alone.
#[test]
fn identity_constants_count_and_look_alikes_do_not() {
    let n = 4;
    let id = Tensor::from_fn(&t64(&[n, n]), |k| (k / n == k % n) as u8 as f64);
    let f = func(&[t64(&[n, 3])], |b, p| {
        let e = b.constant(id.clone())?;
        Ok(vec![b.dot_general(e, p[0], &[1], &[0], &[], &[])?])
    });
    let g = graft_core::opt::simplify(&diagonal_products(&f).unwrap().expect("the identity constant"));
    assert_eq!(dots(&g), 0);
    let mut almost = id.to_f64_vec();
    almost[1] = 1e-300;
    let almost = Tensor::from_vec(vec![n, n], almost).unwrap();
    let f = func(&[t64(&[n, 3])], |b, p| {
        let e = b.constant(almost.clone())?;
        Ok(vec![b.dot_general(e, p[0], &[1], &[0], &[], &[])?])
    });
    assert!(diagonal_products(&f).unwrap().is_none());
    let f = func(&[t64(&[2, n, 3])], |b, p| {
        let e = eye(b, n)?;
        let e = b.broadcast_in_dim(e, &[2, n, n], &[1, 2])?;
        Ok(vec![b.dot_general(e, p[0], &[2], &[1], &[0], &[0])?])
    });
    assert!(diagonal_products(&f).unwrap().is_none());
}

/// `jacrev` and `jacfwd` of `tanh(a @ v)` keep only the forward product
/// (the Jacobian is `(1 - t^2)` scaling the rows of `a`), and agree with
/// the closed form.
#[test]
fn jacobians_of_a_tanh_layer_hold_no_cubic_product() {
    let n = 30;
    let f = func(&[t64(&[n, n]), t64(&[n])], |b, p| {
        let av = b.dot_general(p[0], p[1], &[1], &[0], &[], &[])?;
        Ok(vec![b.tanh(av)?])
    });
    let mut rng = Rng(5);
    let (a, v) = (rng.tensor(&t64(&[n, n]), -0.3, 0.3), rng.tensor(&t64(&[n]), -1.0, 1.0));
    let t = run(&f, &[a.clone(), v.clone()])[0].to_f64_vec();
    let av = a.to_f64_vec();
    for jf in [jacrev(&f, 1).unwrap(), jacfwd(&f, 1).unwrap()] {
        assert_eq!(dots(&jf), 1, "only a @ v is a product:\n{jf}");
        let j = run(&jf, &[a.clone(), v.clone()])[0].to_f64_vec();
        for i in 0..n {
            for k in 0..n {
                let want = (1.0 - t[i] * t[i]) * av[i * n + k];
                assert!(
                    (j[i * n + k] - want).abs() <= 1e-15 * (1.0 + want.abs()),
                    "J[{i},{k}] = {} vs {want}",
                    j[i * n + k]
                );
            }
        }
    }
}
