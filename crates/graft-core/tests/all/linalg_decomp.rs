//! The decomposition primitives (`cholesky`, `triangular_solve`, `lu`) and
//! the linear-algebra composites over them (`composite::decomp`): values
//! against independent references (reconstructions, residuals, numbers
//! from JAX 0.10 in f64), NaN/IEEE behaviour on bad matrices, derivatives
//! (JVP against central differences, the dot-product test between JVP and
//! VJP, second order), vmap against the per-example loop, and the structure
//! of the batched graph (no loop over the batch).

use crate::common;

use common::vmap::{check_vmap, Gen};
use common::{check_grads, run, Rng};
use graft_core::ad::{grad, jvp_func, Wrt};
use graft_core::batch::vmap_func;
use graft_core::composite::decomp as d;
use graft_core::composite::decomp::NormOrd;
use graft_core::ops::decomp::{Cholesky, Lu, TriangularSolve};
use graft_core::{Builder, DType, Func, IrError, Op, Tensor, TensorType, Value};

use crate::common::matrix::{f64t, func, mm, tensor, tr, ty};

/// A random symmetric positive definite `[n, n]`: `M M^T / n + I`.
fn spd(rng: &mut Rng, n: usize) -> Vec<f64> {
    let m: Vec<f64> = (0..n * n).map(|_| rng.uniform(-1.0, 1.0)).collect();
    let mut a = mm(&m, &tr(&m, n, n), n, n, n);
    for (i, x) in a.iter_mut().enumerate() {
        *x /= n as f64;
        if i % (n + 1) == 0 {
            *x += 1.0;
        }
    }
    a
}

fn assert_close(what: &str, got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= tol * (1.0 + w.abs()), "{what}[{i}]: got {g}, want {w}\n{got:?}\n{want:?}");
    }
}

fn tol(dtype: DType) -> f64 {
    if dtype == DType::F64 {
        1e-11
    } else {
        2e-4
    }
}

// ---------------------------------------------------------------------------
// cholesky
// ---------------------------------------------------------------------------

#[test]
fn cholesky_reconstructs_batches_and_never_reads_the_upper_triangle() {
    let mut rng = Rng(11);
    for dtype in [DType::F32, DType::F64] {
        for (batch, n) in [(vec![], 1), (vec![], 4), (vec![2, 3], 5), (vec![2], 40)] {
            let mut shape = batch.clone();
            shape.extend([n, n]);
            let count: usize = batch.iter().product();
            let mats: Vec<Vec<f64>> = (0..count).map(|_| spd(&mut rng, n)).collect();
            // NaN above the diagonal: the kernel must not read it.
            let input: Vec<f64> = mats
                .iter()
                .flat_map(|a| a.iter().enumerate().map(|(k, &x)| if k % n > k / n { f64::NAN } else { x }))
                .collect();
            let f = func(&[ty(dtype, &shape)], |b, p| Ok(vec![b.cholesky(p[0])?]));
            let l = run(&f, &[tensor(dtype, &shape, &input)]).remove(0).to_f64_vec();
            for (i, a) in mats.iter().enumerate() {
                let li = &l[i * n * n..(i + 1) * n * n];
                for r in 0..n {
                    assert!(li[r * n + r] > 0.0, "{dtype} n={n}: diagonal must be positive");
                    for c in r + 1..n {
                        assert_eq!(li[r * n + c], 0.0, "{dtype} n={n}: strict upper triangle is zero");
                    }
                }
                let back = mm(li, &tr(li, n, n), n, n, n);
                assert_close(&format!("{dtype} {batch:?} n={n} L L^T"), &back, a, tol(dtype) * n as f64);
            }
        }
    }
}

#[test]
fn cholesky_matches_jax() {
    let a = [4.0, 2.0, 0.4, 2.0, 5.0, 1.0, 0.4, 1.0, 3.0];
    let f = func(&[f64t(&[3, 3])], |b, p| Ok(vec![b.cholesky(p[0])?]));
    let l = run(&f, &[tensor(DType::F64, &[3, 3], &a)]).remove(0).to_f64_vec();
    // jnp.linalg.cholesky (JAX 0.10, x64).
    let want = [2.0, 0.0, 0.0, 1.0, 2.0, 0.0, 0.2, 0.4, 1.673_320_053_068_151_1];
    assert_close("cholesky", &l, &want, 1e-14);
}

#[test]
fn cholesky_of_a_matrix_that_is_not_positive_definite_is_nan_filled() {
    let good = [4.0, 2.0, 2.0, 3.0];
    let indefinite = [1.0, 2.0, 2.0, 1.0];
    let singular = [1.0, 1.0, 1.0, 1.0 - 1e-300];
    let with_nan = [f64::NAN, 0.0, 0.0, 1.0];
    for dtype in [DType::F32, DType::F64] {
        let input: Vec<f64> = [good, indefinite, good, singular, with_nan].concat();
        let f = func(&[ty(dtype, &[5, 2, 2])], |b, p| Ok(vec![b.cholesky(p[0])?]));
        let l = run(&f, &[tensor(dtype, &[5, 2, 2], &input)]).remove(0).to_f64_vec();
        for k in [1, 3, 4] {
            assert!(l[k * 4..(k + 1) * 4].iter().all(|x| x.is_nan()), "{dtype}: matrix {k} -> {l:?}");
        }
        for k in [0, 2] {
            assert_close("good", &l[k * 4..(k + 1) * 4], &[2.0, 0.0, 1.0, 2f64.sqrt()], tol(dtype));
        }
    }
    // Derivatives propagate the NaN instead of failing (in the lower
    // triangle; the unread upper triangle's gradient is exactly zero).
    let f = func(&[f64t(&[2, 2])], |b, p| {
        let l = b.cholesky(p[0])?;
        Ok(vec![b.reduce_sum(l, &[0, 1])?])
    });
    let g = grad(&f, &Wrt::All).unwrap();
    let gv = run(&g, &[tensor(DType::F64, &[2, 2], &indefinite)]).pop().unwrap().to_f64_vec();
    assert!(gv[0].is_nan() && gv[2].is_nan() && gv[3].is_nan() && gv[1] == 0.0, "{gv:?}");
}

// ---------------------------------------------------------------------------
// triangular_solve
// ---------------------------------------------------------------------------

const FLAGS: [bool; 2] = [false, true];

/// Every option combination: (left, lower, transpose_a, unit_diagonal).
fn options() -> Vec<TriangularSolve> {
    let mut v = Vec::new();
    for left in FLAGS {
        for lower in FLAGS {
            for transpose_a in FLAGS {
                for unit_diagonal in FLAGS {
                    v.push(TriangularSolve { left, lower, transpose_a, unit_diagonal });
                }
            }
        }
    }
    v
}

/// The triangular matrix the primitive reads from `a` under `op`'s options.
fn effective(op: &TriangularSolve, a: &[f64], n: usize) -> Vec<f64> {
    let mut t = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..n {
            let keep = if op.lower { j <= i } else { j >= i };
            if keep {
                t[i * n + j] = a[i * n + j];
            }
        }
        if op.unit_diagonal {
            t[i * n + i] = 1.0;
        }
    }
    if op.transpose_a {
        tr(&t, n, n)
    } else {
        t
    }
}

/// A well-conditioned triangle with NaN wherever `op` must not read.
fn triangle(rng: &mut Rng, op: &TriangularSolve, n: usize) -> Vec<f64> {
    (0..n * n)
        .map(|k| {
            let (i, j) = (k / n, k % n);
            let inside = if op.lower { j <= i } else { j >= i };
            if !inside || (op.unit_diagonal && i == j) {
                f64::NAN
            } else if i == j {
                rng.uniform(1.5, 3.0) * if rng.next_f64() < 0.5 { -1.0 } else { 1.0 }
            } else {
                rng.uniform(-1.0, 1.0)
            }
        })
        .collect()
}

#[test]
fn triangular_solve_residuals_for_every_option() {
    let mut rng = Rng(5);
    let (batch, n, k) = (3, 6, 4);
    for dtype in [DType::F32, DType::F64] {
        for op in options() {
            let bshape = if op.left { [batch, n, k] } else { [batch, k, n] };
            let a: Vec<f64> = (0..batch).flat_map(|_| triangle(&mut rng, &op, n)).collect();
            let rhs: Vec<f64> = (0..batch * n * k).map(|_| rng.uniform(-1.0, 1.0)).collect();
            let f = func(&[ty(dtype, &[batch, n, n]), ty(dtype, &bshape)], |b, p| Ok(vec![b.emit1(op.clone(), p)?]));
            let x = run(&f, &[tensor(dtype, &[batch, n, n], &a), tensor(dtype, &bshape, &rhs)]).remove(0).to_f64_vec();
            for i in 0..batch {
                let t = effective(&op, &a[i * n * n..(i + 1) * n * n], n);
                let xi = &x[i * n * k..(i + 1) * n * k];
                let back = if op.left { mm(&t, xi, n, n, k) } else { mm(xi, &t, k, n, n) };
                assert_close(&format!("{dtype} {op:?}"), &back, &rhs[i * n * k..(i + 1) * n * k], tol(dtype) * 10.0);
            }
        }
    }
}

#[test]
fn triangular_solve_with_a_zero_on_the_diagonal_gives_ieee_values() {
    let f = func(&[f64t(&[2, 2]), f64t(&[2, 1])], |b, p| {
        Ok(vec![b.triangular_solve(p[0], p[1], true, true, false, false)?])
    });
    let x = run(&f, &[tensor(DType::F64, &[2, 2], &[0.0, 0.0, 1.0, 1.0]), tensor(DType::F64, &[2, 1], &[1.0, 1.0])]);
    let x = x[0].to_f64_vec();
    assert!(x[0].is_infinite() && !x[1].is_finite(), "{x:?}");
}

// ---------------------------------------------------------------------------
// lu
// ---------------------------------------------------------------------------

#[test]
fn lu_reconstructs_the_permuted_matrix_and_its_pivots_replay_the_permutation() {
    let mut rng = Rng(3);
    for dtype in [DType::F32, DType::F64] {
        for (batch, n) in [(1, 1), (4, 5), (2, 33)] {
            let a: Vec<f64> = (0..batch * n * n).map(|_| rng.uniform(-1.0, 1.0)).collect();
            let f = func(&[ty(dtype, &[batch, n, n])], |b, p| {
                let (lu, piv, perm) = b.lu(p[0])?;
                Ok(vec![lu, piv, perm])
            });
            let outs = run(&f, &[tensor(dtype, &[batch, n, n], &a)]);
            assert_eq!(outs[1].dtype(), DType::I32);
            let (lu, piv, perm) = (outs[0].to_f64_vec(), outs[1].to_f64_vec(), outs[2].to_f64_vec());
            for i in 0..batch {
                let m = &lu[i * n * n..(i + 1) * n * n];
                let mut l = vec![0.0; n * n];
                let mut u = vec![0.0; n * n];
                for r in 0..n {
                    for c in 0..n {
                        match r.cmp(&c) {
                            std::cmp::Ordering::Greater => l[r * n + c] = m[r * n + c],
                            std::cmp::Ordering::Equal => {
                                l[r * n + c] = 1.0;
                                u[r * n + c] = m[r * n + c];
                            }
                            std::cmp::Ordering::Less => u[r * n + c] = m[r * n + c],
                        }
                        assert!(l[r * n + c].abs() <= 1.0 + 1e-6, "partial pivoting keeps |L| <= 1");
                    }
                }
                let p = &perm[i * n..(i + 1) * n];
                let permuted: Vec<f64> = (0..n * n).map(|k| a[i * n * n + p[k / n] as usize * n + k % n]).collect();
                assert_close(&format!("{dtype} L U = A[perm]"), &mm(&l, &u, n, n, n), &permuted, tol(dtype) * 10.0);
                let mut rows: Vec<usize> = (0..n).collect();
                for (s, &t) in piv[i * n..(i + 1) * n].iter().enumerate() {
                    rows.swap(s, t as usize);
                }
                assert_eq!(rows, p.iter().map(|&x| x as usize).collect::<Vec<_>>(), "pivots replay to the permutation");
            }
        }
    }
}

#[test]
fn lu_and_the_lu_composites_match_jax() {
    let m = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 10.0];
    let f = func(&[f64t(&[3, 3])], |b, p| {
        let (lu, piv, perm) = b.lu(p[0])?;
        let (sign, logabs) = d::slogdet(b, p[0])?;
        let det = d::det(b, p[0])?;
        let rhs = b.constant(Tensor::vec1(&[1.0f64, 2.0, 3.0]))?;
        let x = d::solve(b, p[0], rhs)?;
        Ok(vec![lu, piv, perm, sign, logabs, det, x])
    });
    let o = run(&f, &[tensor(DType::F64, &[3, 3], &m)]);
    // jax.lax.linalg.lu / jnp.linalg.{slogdet, det, solve} (JAX 0.10, x64).
    let lu = [7.0, 8.0, 10.0, 0.14285714285714285, 0.8571428571428572, 1.5714285714285716];
    assert_close("lu", &o[0].to_f64_vec()[..6], &lu, 1e-14);
    assert_close("lu", &o[0].to_f64_vec()[6..], &[0.5714285714285714, 0.5, -0.5], 1e-14);
    assert_eq!(o[1].to_vec::<i32>().unwrap(), vec![2, 2, 2]);
    assert_eq!(o[2].to_vec::<i32>().unwrap(), vec![2, 0, 1]);
    assert_eq!(o[3].to_f64_vec(), vec![-1.0]);
    assert_close("logabsdet", &o[4].to_f64_vec(), &[1.0986122886681096], 1e-14);
    assert_close("det", &o[5].to_f64_vec(), &[-3.0], 1e-14);
    assert_close("solve", &o[6].to_f64_vec(), &[-0.33333333333333315, 0.6666666666666665, 0.0], 1e-14);
    // Gradients: d log|det| / dA = A^{-T}; d det / dA = det A^{-T}.
    let g = grad(&func(&[f64t(&[3, 3])], |b, p| Ok(vec![d::slogdet(b, p[0])?.1])), &Wrt::All).unwrap();
    let want =
        [-0.6666666666666661, -0.6666666666666676, 1.0, -1.3333333333333333, 3.6666666666666665, -2.0, 1.0, -2.0, 1.0];
    assert_close(
        "grad logabsdet",
        &run(&g, &[tensor(DType::F64, &[3, 3], &m)]).pop().unwrap().to_f64_vec(),
        &want,
        1e-12,
    );
    let g = grad(&func(&[f64t(&[3, 3])], |b, p| Ok(vec![d::det(b, p[0])?])), &Wrt::All).unwrap();
    let want = [2.0, 2.0, -3.0, 4.0, -11.0, 6.0, -3.0, 6.0, -3.0];
    assert_close("grad det", &run(&g, &[tensor(DType::F64, &[3, 3], &m)]).pop().unwrap().to_f64_vec(), &want, 1e-12);
}

#[test]
fn a_singular_matrix_gives_zero_det_and_ieee_solutions() {
    // Singular (row 2 = 2 row 1), exactly so in any elimination order: U
    // gets an exact zero pivot. JAX gives slogdet (0, -inf) and det 0 too.
    let m = [1.0, 2.0, 3.0, 2.0, 4.0, 6.0, 1.0, 1.0, 1.0];
    let f = func(&[f64t(&[3, 3])], |b, p| {
        let (sign, logabs) = d::slogdet(b, p[0])?;
        let det = d::det(b, p[0])?;
        let x = d::inv(b, p[0])?;
        Ok(vec![sign, logabs, det, x])
    });
    let o = run(&f, &[tensor(DType::F64, &[3, 3], &m)]);
    assert_eq!(o[0].to_f64_vec(), vec![0.0]);
    assert_eq!(o[1].to_f64_vec(), vec![f64::NEG_INFINITY]);
    assert_eq!(o[2].to_f64_vec(), vec![0.0]);
    assert!(o[3].to_f64_vec().iter().any(|x| !x.is_finite()));
}

// ---------------------------------------------------------------------------
// shape rules
// ---------------------------------------------------------------------------

#[test]
fn shape_rules_reject_bad_operands() {
    let err = |op: &dyn Fn(&[TensorType]) -> Result<Vec<TensorType>, graft_core::TypeError>, ins: &[TensorType]| {
        op(ins).unwrap_err().to_string()
    };
    let chol = |ins: &[TensorType]| Cholesky.infer(ins);
    assert!(err(&chol, &[f64t(&[2, 3])]).contains("square"));
    assert!(err(&chol, &[f64t(&[3])]).contains("square"));
    assert!(err(&chol, &[ty(DType::I32, &[2, 2])]).contains("floating-point"));
    assert_eq!(chol(&[f64t(&[4, 2, 2])]).unwrap(), vec![f64t(&[4, 2, 2])]);
    let lu = |ins: &[TensorType]| Lu.infer(ins);
    assert_eq!(lu(&[f64t(&[4, 3, 3])]).unwrap()[2], ty(DType::I32, &[4, 3]));
    assert!(err(&lu, &[f64t(&[3, 2])]).contains("square"));
    let left = TriangularSolve { left: true, lower: true, transpose_a: false, unit_diagonal: false };
    let right = TriangularSolve { left: false, ..left.clone() };
    let ts = |op: &TriangularSolve, ins: &[TensorType]| op.infer(ins);
    assert_eq!(ts(&left, &[f64t(&[3, 3]), f64t(&[3, 5])]).unwrap(), vec![f64t(&[3, 5])]);
    assert_eq!(ts(&right, &[f64t(&[3, 3]), f64t(&[5, 3])]).unwrap(), vec![f64t(&[5, 3])]);
    assert!(ts(&left, &[f64t(&[3, 3]), f64t(&[5, 3])]).unwrap_err().to_string().contains("n = 3 rows"));
    assert!(ts(&left, &[f64t(&[2, 3, 3]), f64t(&[3, 3, 1])]).unwrap_err().to_string().contains("batch dims"));
    assert!(ts(&left, &[f64t(&[3, 3]), ty(DType::F32, &[3, 1])]).unwrap_err().to_string().contains("same dtype"));
    // Composites name themselves.
    let mut b = Builder::new("e");
    let x = b.param(f64t(&[2, 3]));
    let v = b.param(f64t(&[4]));
    assert!(d::cholesky(&mut b, x).unwrap_err().to_string().contains("cholesky"));
    assert!(d::inv(&mut b, x).unwrap_err().to_string().contains("inv"));
    let sq = b.param(f64t(&[3, 3]));
    let e = d::solve(&mut b, sq, v).unwrap_err().to_string();
    assert!(e.contains("solve") && e.contains("f64[4] must have 3 elements"), "{e}");
    let cube = b.param(f64t(&[2, 2, 2]));
    assert!(d::norm(&mut b, cube, NormOrd::One).unwrap_err().to_string().contains("vector or a matrix"));
}

// ---------------------------------------------------------------------------
// derivatives
// ---------------------------------------------------------------------------

/// First order (JVP vs finite differences, dot-product test) and second
/// order (the same checks on the JVP function) at `inputs`.
fn check_rules(name: &str, f: &Func, inputs: &[Tensor], seed: u64) {
    let mut rng = Rng(seed);
    check_grads(name, f, inputs, &mut rng, 1e-6, 1e-6);
    let second = jvp_func(f).unwrap();
    let mut ins2 = inputs.to_vec();
    for t in inputs {
        if t.dtype().is_float() {
            ins2.push(rng.tensor(&t.ty(), -1.0, 1.0));
        }
    }
    check_grads(&format!("{name} (2nd order)"), &second, &ins2, &mut rng, 1e-5, 1e-5);
}

#[test]
fn cholesky_derivatives_first_and_second_order() {
    let mut rng = Rng(21);
    for (batch, n) in [(vec![], 1), (vec![], 4), (vec![2], 3)] {
        let mut shape = batch.clone();
        shape.extend([n, n]);
        let count: usize = batch.iter().product();
        let a: Vec<f64> = (0..count).flat_map(|_| spd(&mut rng, n)).collect();
        // The primitive: any tangent (the upper triangle's is ignored).
        let f = func(&[f64t(&shape)], |b, p| Ok(vec![b.cholesky(p[0])?]));
        check_rules(&format!("cholesky {shape:?}"), &f, &[tensor(DType::F64, &shape, &a)], 1);
        // The composite symmetrizes first.
        let g = func(&[f64t(&shape)], |b, p| Ok(vec![d::cholesky(b, p[0])?]));
        check_rules(&format!("composite cholesky {shape:?}"), &g, &[tensor(DType::F64, &shape, &a)], 2);
    }
}

#[test]
fn cholesky_gradient_matches_jax() {
    let a = [4.0, 2.0, 0.4, 2.0, 5.0, 1.0, 0.4, 1.0, 3.0];
    let w: Vec<f64> = (0..9).map(f64::from).collect();
    let f = func(&[f64t(&[3, 3])], |b, p| {
        let l = d::cholesky(b, p[0])?;
        let w = b.constant(tensor(DType::F64, &[3, 3], &w))?;
        let lw = b.mul(l, w)?;
        Ok(vec![b.reduce_sum(lw, &[0, 1])?])
    });
    let g = run(&grad(&f, &Wrt::All).unwrap(), &[tensor(DType::F64, &[3, 3], &a)]).pop().unwrap();
    // jax.grad(lambda a: jnp.sum(jnp.linalg.cholesky(a) * jnp.arange(9.).reshape(3, 3)))
    let want = [
        -0.1875,
        0.2499999999999999,
        0.625,
        0.2499999999999999,
        0.7456182887467515,
        1.2719085562662427,
        0.625,
        1.2719085562662427,
        2.390457218668787,
    ];
    assert_close("grad", &g.to_f64_vec(), &want, 1e-12);
}

#[test]
fn triangular_solve_derivatives_for_every_option() {
    let mut rng = Rng(8);
    let (n, k) = (4, 3);
    for op in options() {
        let bshape = if op.left { [2, n, k] } else { [2, k, n] };
        // Finite values everywhere: tangents of the unread entries must not matter.
        let a: Vec<f64> = (0..2)
            .flat_map(|_| {
                let t = triangle(&mut rng, &op, n);
                t.into_iter().map(|x| if x.is_nan() { 0.3 } else { x }).collect::<Vec<_>>()
            })
            .collect();
        let rhs: Vec<f64> = (0..2 * n * k).map(|_| rng.uniform(-1.0, 1.0)).collect();
        let f = func(&[f64t(&[2, n, n]), f64t(&bshape)], |b, p| Ok(vec![b.emit1(op.clone(), p)?]));
        check_rules(
            &format!("{op:?}"),
            &f,
            &[tensor(DType::F64, &[2, n, n], &a), tensor(DType::F64, &bshape, &rhs)],
            3,
        );
    }
}

#[test]
fn lu_derivatives_first_and_second_order() {
    let mut rng = Rng(9);
    for (batch, n) in [(1, 1), (2, 4)] {
        let a: Vec<f64> = (0..batch * n * n).map(|_| rng.uniform(-1.0, 1.0)).collect();
        let f = func(&[f64t(&[batch, n, n])], |b, p| {
            let (lu, piv, perm) = b.lu(p[0])?;
            Ok(vec![lu, piv, perm])
        });
        check_rules(&format!("lu {batch}x{n}"), &f, &[tensor(DType::F64, &[batch, n, n], &a)], 4);
    }
}

#[test]
fn grad_of_grad_through_cholesky_and_triangular_solve() {
    // A Gaussian log-likelihood's data term, as a function of a matrix:
    // -1/2 |L^{-1} y|^2 - sum log diag L. Its gradient function is checked
    // like any function: JVP of the gradient against finite differences of
    // the gradient (Hessian-vector products), and the gradient's VJP by the
    // dot-product test (reverse over reverse).
    let mut rng = Rng(31);
    let n = 4;
    let a = spd(&mut rng, n);
    let y: Vec<f64> = (0..n).map(|_| rng.uniform(-1.0, 1.0)).collect();
    let f = func(&[f64t(&[n, n]), f64t(&[n])], |b, p| {
        let l = d::cholesky(b, p[0])?;
        let z = d::triangular_solve(b, l, p[1], true, true, false, false)?;
        let zz = b.mul(z, z)?;
        let q = b.reduce_sum(zz, &[0])?;
        let h = b.scalar(-0.5, DType::F64)?;
        let q = b.mul(q, h)?;
        let dg = d::diagonal(b, l)?;
        let lg = b.log(dg)?;
        let s = b.reduce_sum(lg, &[0])?;
        Ok(vec![b.sub(q, s)?])
    });
    let g = grad(&f, &Wrt::All).unwrap();
    let ins = [tensor(DType::F64, &[n, n], &a), tensor(DType::F64, &[n], &y)];
    check_grads("grad of the likelihood", &g, &ins, &mut rng, 1e-5, 1e-5);
    let gg = grad(
        &func(&[f64t(&[n, n]), f64t(&[n])], |b, p| {
            let outs = b.inline(&g, p)?;
            let s = b.mul(outs[0], outs[0])?;
            Ok(vec![b.reduce_sum(s, &[0, 1])?])
        }),
        &Wrt::All,
    )
    .unwrap();
    check_grads("grad of |grad|^2", &gg, &ins, &mut rng, 1e-5, 1e-5);
}

#[test]
fn composite_derivatives() {
    let mut rng = Rng(41);
    let n = 3;
    let gen: Vec<f64> = (0..n * n).map(|_| rng.uniform(-1.0, 1.0)).collect();
    let m: Vec<f64> = gen.iter().enumerate().map(|(k, x)| if k % (n + 1) == 0 { x + 3.0 } else { *x }).collect();
    let s = spd(&mut rng, n);
    let v: Vec<f64> = (0..n).map(|_| rng.uniform(-1.0, 1.0)).collect();
    let mat = |x: &[f64]| tensor(DType::F64, &[n, n], x);
    let vec_ = |x: &[f64]| tensor(DType::F64, &[x.len()], x);
    type Body = fn(&mut Builder, &[Value]) -> Result<Vec<Value>, IrError>;
    let cases: Vec<(&str, Vec<TensorType>, Vec<Tensor>, Body)> = vec![
        ("solve", vec![f64t(&[n, n]), f64t(&[n])], vec![mat(&m), vec_(&v)], |b, p| Ok(vec![d::solve(b, p[0], p[1])?])),
        ("inv", vec![f64t(&[n, n])], vec![mat(&m)], |b, p| Ok(vec![d::inv(b, p[0])?])),
        ("slogdet", vec![f64t(&[n, n])], vec![mat(&m)], |b, p| {
            let (s, l) = d::slogdet(b, p[0])?;
            Ok(vec![s, l])
        }),
        ("det", vec![f64t(&[n, n])], vec![mat(&m)], |b, p| Ok(vec![d::det(b, p[0])?])),
        ("cho_solve", vec![f64t(&[n, n]), f64t(&[n])], vec![mat(&s), vec_(&v)], |b, p| {
            let l = d::cholesky(b, p[0])?;
            Ok(vec![d::cho_solve(b, l, p[1])?])
        }),
        ("diag/diagonal/trace/tril/triu", vec![f64t(&[n, n]), f64t(&[n])], vec![mat(&m), vec_(&v)], |b, p| {
            Ok(vec![
                d::diag(b, p[1])?,
                d::diagonal(b, p[0])?,
                d::trace(b, p[0])?,
                d::tril(b, p[0], -1)?,
                d::triu(b, p[0], 1)?,
            ])
        }),
        ("outer/kron", vec![f64t(&[n, n]), f64t(&[n])], vec![mat(&m), vec_(&v)], |b, p| {
            Ok(vec![d::outer(b, p[1], p[0])?, d::kron(b, p[0], p[1])?])
        }),
        ("norm", vec![f64t(&[n, n]), f64t(&[n])], vec![mat(&m), vec_(&v)], |b, p| {
            let mut outs = Vec::new();
            for ord in [NormOrd::Default, NormOrd::One, NormOrd::Two, NormOrd::Inf, NormOrd::NegInf] {
                outs.push(d::norm(b, p[1], ord)?);
            }
            for ord in [NormOrd::Default, NormOrd::Fro, NormOrd::One, NormOrd::Inf, NormOrd::NegInf] {
                outs.push(d::norm(b, p[0], ord)?);
            }
            Ok(outs)
        }),
    ];
    for (name, types, ins, body) in cases {
        let f = func(&types, body);
        check_grads(name, &f, &ins, &mut rng, 1e-6, 1e-6);
    }
}

// ---------------------------------------------------------------------------
// composite values
// ---------------------------------------------------------------------------

#[test]
fn composite_values_against_references() {
    let mut rng = Rng(51);
    let n = 4;
    let m: Vec<f64> = (0..n * n).map(|_| rng.uniform(-1.0, 1.0)).collect();
    let rect: Vec<f64> = (0..6).map(f64::from).collect(); // [2, 3]
    let v = [3.0, -4.0, 1.0];
    let s = spd(&mut rng, n);
    let rhs: Vec<f64> = (0..n * 2).map(|_| rng.uniform(-1.0, 1.0)).collect();
    let f = func(&[f64t(&[n, n]), f64t(&[2, 3]), f64t(&[3]), f64t(&[n, n]), f64t(&[n, 2])], |b, p| {
        let e = d::eye(b, 3, DType::I32)?;
        let inv = d::inv(b, p[0])?;
        let x = d::solve(b, p[0], p[4])?;
        let l = d::cholesky(b, p[3])?;
        let cx = d::cho_solve(b, l, p[4])?;
        Ok(vec![
            e,
            d::diag(b, p[2])?,
            d::diagonal(b, p[1])?,
            d::tril(b, p[1], 0)?,
            d::triu(b, p[1], 1)?,
            d::trace(b, p[1])?,
            d::outer(b, p[2], p[2])?,
            d::kron(b, p[1], p[2])?,
            d::norm(b, p[2], NormOrd::Default)?,
            d::norm(b, p[2], NormOrd::One)?,
            d::norm(b, p[2], NormOrd::Inf)?,
            d::norm(b, p[2], NormOrd::NegInf)?,
            d::norm(b, p[1], NormOrd::One)?,
            d::norm(b, p[1], NormOrd::Inf)?,
            inv,
            x,
            cx,
        ])
    });
    let o = run(
        &f,
        &[
            tensor(DType::F64, &[n, n], &m),
            tensor(DType::F64, &[2, 3], &rect),
            tensor(DType::F64, &[3], &v),
            tensor(DType::F64, &[n, n], &s),
            tensor(DType::F64, &[n, 2], &rhs),
        ],
    );
    assert_eq!(o[0].to_vec::<i32>().unwrap(), vec![1, 0, 0, 0, 1, 0, 0, 0, 1]);
    assert_eq!(o[1].to_f64_vec(), vec![3.0, 0.0, 0.0, 0.0, -4.0, 0.0, 0.0, 0.0, 1.0]);
    assert_eq!(o[2].to_f64_vec(), vec![0.0, 4.0]);
    assert_eq!(o[3].to_f64_vec(), vec![0.0, 0.0, 0.0, 3.0, 4.0, 0.0]);
    assert_eq!(o[4].to_f64_vec(), vec![0.0, 1.0, 2.0, 0.0, 0.0, 5.0]);
    assert_eq!(o[5].to_f64_vec(), vec![4.0]);
    assert_eq!(o[6].to_f64_vec(), vec![9.0, -12.0, 3.0, -12.0, 16.0, -4.0, 3.0, -4.0, 1.0]);
    // kron([[0,1,2],[3,4,5]], [3,-4,1]): y is promoted to [1, 3], so [2, 9].
    let mut want = Vec::new();
    for i in 0..2 {
        for j in 0..3 {
            want.extend(v.iter().map(|y| rect[i * 3 + j] * y));
        }
    }
    assert_eq!(o[7].shape(), &[2, 9]);
    assert_eq!(o[7].to_f64_vec(), want);
    assert_close("norm", &o[8].to_f64_vec(), &[26f64.sqrt()], 1e-15);
    assert_eq!(o[9].to_f64_vec(), vec![8.0]);
    assert_eq!(o[10].to_f64_vec(), vec![4.0]);
    assert_eq!(o[11].to_f64_vec(), vec![1.0]);
    assert_eq!(o[12].to_f64_vec(), vec![7.0]); // max column sum of |[[0,1,2],[3,4,5]]|
    assert_eq!(o[13].to_f64_vec(), vec![12.0]); // max row sum
    let id = mm(&o[14].to_f64_vec(), &m, n, n, n);
    let eye: Vec<f64> = (0..n * n).map(|k| if k % (n + 1) == 0 { 1.0 } else { 0.0 }).collect();
    assert_close("inv(a) a", &id, &eye, 1e-12);
    assert_close("solve", &mm(&m, &o[15].to_f64_vec(), n, n, 2), &rhs, 1e-12);
    assert_close("cho_solve", &mm(&s, &o[16].to_f64_vec(), n, n, 2), &rhs, 1e-12);
}

// ---------------------------------------------------------------------------
// vmap
// ---------------------------------------------------------------------------

const X: Gen = Gen::F(-1.0, 1.0);

/// `x x^T + n I`: symmetric positive definite from any square `x`.
fn spd_of(b: &mut Builder, x: Value) -> Result<Value, IrError> {
    let t = b.ty(x)?.clone();
    let n = t.shape[t.rank() - 1];
    let xt = graft_core::ops::decomp::swap_last2(b, x)?;
    let g = graft_core::ops::decomp::bmm(b, x, xt)?;
    let e = d::eye(b, n, t.dtype)?;
    let ne = b.scalar(n as f64, t.dtype)?;
    let ne = b.broadcast_in_dim(ne, &[n, n], &[])?;
    let e = b.mul(e, ne)?;
    let e = b.broadcast_in_dim(e, &t.shape, &[t.rank() - 2, t.rank() - 1])?;
    b.add(g, e)
}

#[test]
fn vmap_equals_the_per_example_loop() {
    let chol = func(&[f64t(&[3, 3])], |b, p| {
        let a = spd_of(b, p[0])?;
        Ok(vec![b.cholesky(a)?])
    });
    check_vmap("cholesky", &chol, &[X], 12);
    let chol_b = func(&[f64t(&[2, 3, 3])], |b, p| {
        let a = spd_of(b, p[0])?;
        Ok(vec![b.cholesky(a)?])
    });
    check_vmap("cholesky batched", &chol_b, &[X], 12);
    let lu = func(&[f64t(&[3, 3])], |b, p| {
        let (lu, piv, perm) = b.lu(p[0])?;
        Ok(vec![lu, piv, perm])
    });
    check_vmap("lu", &lu, &[X], 12);
    for op in options() {
        let bshape = if op.left { [2, 3, 2] } else { [2, 2, 3] };
        let f = func(&[f64t(&[2, 3, 3]), f64t(&bshape)], |b, p| {
            // A well-conditioned triangle: 4 on the diagonal plus x.
            let e = d::eye(b, 3, DType::F64)?;
            let four = b.full(4.0, &f64t(&[3, 3]))?;
            let e = b.mul(e, four)?;
            let e = b.broadcast_in_dim(e, &[2, 3, 3], &[1, 2])?;
            let a = b.add(p[0], e)?;
            Ok(vec![b.emit1(op.clone(), &[a, p[1]])?])
        });
        check_vmap(&format!("{op:?}"), &f, &[X, X], 12);
    }
    let solve = func(&[f64t(&[3, 3]), f64t(&[3])], |b, p| {
        let a = spd_of(b, p[0])?;
        Ok(vec![d::solve(b, a, p[1])?, d::slogdet(b, a)?.1, d::inv(b, a)?])
    });
    check_vmap("solve/slogdet/inv", &solve, &[X, X], 12);
}

#[test]
fn vmap_of_grad_through_cholesky_equals_per_example() {
    let f = func(&[f64t(&[3, 3]), f64t(&[3])], |b, p| {
        let a = spd_of(b, p[0])?;
        let l = d::cholesky(b, a)?;
        let z = d::triangular_solve(b, l, p[1], true, true, false, false)?;
        let zz = b.mul(z, z)?;
        Ok(vec![b.reduce_sum(zz, &[0])?])
    });
    let g = grad(&f, &Wrt::All).unwrap();
    check_vmap("vmap(grad)", &g, &[X, X], 8);
}

#[test]
fn vmap_of_cholesky_is_one_batched_equation_whatever_the_batch_size() {
    let f = func(&[f64t(&[4, 4]), f64t(&[4, 2])], |b, p| {
        let a = spd_of(b, p[0])?;
        let l = b.cholesky(a)?;
        let x = b.triangular_solve(l, p[1], true, true, false, false)?;
        let (lu, _, _) = b.lu(a)?;
        Ok(vec![l, x, lu])
    });
    let sizes = [2, 7, 64];
    let graphs: Vec<Func> =
        sizes.iter().map(|&s| vmap_func(&f, &[Some(0), Some(0)], &[Some(0), Some(0), Some(0)], s).unwrap()).collect();
    for (g, s) in graphs.iter().zip(sizes) {
        assert_eq!(g.count_prim("cholesky"), 1, "size {s}:\n{g}");
        assert_eq!(g.count_prim("triangular_solve"), 1, "size {s}:\n{g}");
        assert_eq!(g.count_prim("lu"), 1, "size {s}:\n{g}");
        for looped in ["scan", "while", "call"] {
            assert_eq!(g.count_prim(looped), 0, "size {s}: no {looped}\n{g}");
        }
        assert_eq!(g.eqns.len(), graphs[0].eqns.len(), "the batched graph does not grow with the batch size");
    }
    // The batch dim is one more leading dim of the primitive's operand.
    let chol = graphs[1].eqns.iter().find(|e| e.prim.name() == "cholesky").unwrap();
    assert_eq!(graphs[1].ty(chol.inputs[0]).shape.to_vec(), vec![7, 4, 4]);
}
