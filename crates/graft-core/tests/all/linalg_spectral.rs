//! The spectral decompositions (`qr`, `eigh`, `svd`) and the composites
//! over them (`composite::spectral`: pinv, lstsq, matrix norms, rank,
//! condition number): values by their defining properties (orthonormal
//! factors, triangular `r`, reconstructions, sorted spectra), NaN-filled
//! results for bad input, derivatives (JVP against central differences and
//! the dot-product test, second order, grad of grad) on sign-invariant
//! functions of the factors, the documented behaviour at repeated
//! eigenvalues and singular values, vmap against the per-example loop, and
//! values and gradients against JAX (tests/data/linalg_reference.json).

use crate::common;

use common::vmap::{check_vmap, Gen};
use common::{check_grads, run, Rng};
use graft_core::ad::{grad, jvp_func, Wrt};
use graft_core::batch::vmap_func;
use graft_core::composite::decomp::{self as d, NormOrd};
use graft_core::composite::spectral::{self as sp, MatrixOrd};
use graft_core::ops::decomp::{Eigh, Qr, Svd};
use graft_core::{Builder, DType, Func, IrError, Op, Tensor, TensorType, Value};

use crate::common::matrix::{f64t, func, mm, tensor, tr, ty};

fn eye(n: usize) -> Vec<f64> {
    (0..n * n).map(|k| if k % (n + 1) == 0 { 1.0 } else { 0.0 }).collect()
}

fn assert_close(what: &str, got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= tol * (1.0 + w.abs()), "{what}[{i}]: got {g}, want {w}\n{got:?}\n{want:?}");
    }
}

fn tol(dtype: DType) -> f64 {
    if dtype == DType::F64 {
        1e-12
    } else {
        5e-5
    }
}

fn random(rng: &mut Rng, len: usize) -> Vec<f64> {
    (0..len).map(|_| rng.uniform(-1.0, 1.0)).collect()
}

/// A random symmetric `[n, n]` with eigenvalues spread apart: `Q diag(d) Q^T`
/// for a random orthogonal `Q` (from our own QR) and `d = 1, 2, ..., n`
/// shifted by `-n/2`.
fn separated_symmetric(rng: &mut Rng, n: usize) -> Vec<f64> {
    let q = orthogonal(rng, n);
    let dg: Vec<f64> = (0..n).map(|i| i as f64 + 1.0 - n as f64 / 2.0 + 0.1 * rng.next_f64()).collect();
    let qd: Vec<f64> = (0..n * n).map(|k| q[k] * dg[k % n]).collect();
    mm(&qd, &tr(&q, n, n), n, n, n)
}

/// A random orthogonal `[n, n]` by Gram–Schmidt on random columns.
fn orthogonal(rng: &mut Rng, n: usize) -> Vec<f64> {
    let mut cols: Vec<Vec<f64>> = Vec::new();
    while cols.len() < n {
        let mut v = random(rng, n);
        for c in &cols {
            let dot: f64 = v.iter().zip(c).map(|(a, b)| a * b).sum();
            for (x, y) in v.iter_mut().zip(c) {
                *x -= dot * y;
            }
        }
        let nrm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        if nrm > 1e-3 {
            cols.push(v.iter().map(|x| x / nrm).collect());
        }
    }
    (0..n * n).map(|k| cols[k % n][k / n]).collect()
}

/// A random `[m, n]` with singular values spread apart (`U diag(s) V^T`).
fn separated_matrix(rng: &mut Rng, m: usize, n: usize) -> Vec<f64> {
    let (u, v) = (orthogonal(rng, m), orthogonal(rng, n));
    let k = m.min(n);
    let mut us = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..k {
            us[i * n + j] = u[i * m + j] * (1.0 + (k - j) as f64 + 0.2 * rng.next_f64());
        }
    }
    mm(&us, &tr(&v, n, n), m, n, n)
}

/// `|| x^T x - I ||` checks for the `[rows, cols]` matrix `x` (orthonormal columns).
fn assert_orthonormal_columns(what: &str, x: &[f64], rows: usize, cols: usize, tol: f64) {
    let g = mm(&tr(x, rows, cols), x, cols, rows, cols);
    assert_close(&format!("{what}: x^T x = I"), &g, &eye(cols), tol);
}

// ---------------------------------------------------------------------------
// values
// ---------------------------------------------------------------------------

#[test]
fn qr_is_orthonormal_times_upper_triangular_for_every_shape_and_mode() {
    let mut rng = Rng(1);
    for dtype in [DType::F32, DType::F64] {
        for (batch, m, n) in [(1, 1, 1), (2, 5, 3), (3, 3, 5), (1, 4, 4), (2, 40, 33), (1, 0, 3), (1, 3, 0)] {
            for full in [false, true] {
                let a = random(&mut rng, batch * m * n);
                let f = func(&[ty(dtype, &[batch, m, n])], |b, p| {
                    let (q, r) = b.qr(p[0], full)?;
                    Ok(vec![q, r])
                });
                let o = run(&f, &[tensor(dtype, &[batch, m, n], &a)]);
                let k = if full { m } else { m.min(n) };
                assert_eq!(o[0].shape(), &[batch, m, k]);
                assert_eq!(o[1].shape(), &[batch, k, n]);
                let (q, r) = (o[0].to_f64_vec(), o[1].to_f64_vec());
                let what = format!("{dtype} {batch}x{m}x{n} full={full}");
                for i in 0..batch {
                    let qi = &q[i * m * k..(i + 1) * m * k];
                    let ri = &r[i * k * n..(i + 1) * k * n];
                    assert_orthonormal_columns(&what, qi, m, k, tol(dtype) * 10.0 * m as f64);
                    for row in 0..k {
                        for col in 0..row.min(n) {
                            assert_eq!(ri[row * n + col], 0.0, "{what}: r is upper triangular");
                        }
                    }
                    let back = mm(qi, ri, m, k, n);
                    assert_close(
                        &format!("{what}: q r = a"),
                        &back,
                        &a[i * m * n..(i + 1) * m * n],
                        tol(dtype) * 10.0 * m as f64,
                    );
                }
            }
        }
    }
}

#[test]
fn qr_of_rank_deficient_and_bad_matrices() {
    // Column 2 = column 0 + column 1: still a = q r with orthonormal q.
    let a = [1.0, 2.0, 3.0, 4.0, -1.0, 3.0, 0.5, 0.5, 1.0, 2.0, 2.0, 4.0];
    let f = func(&[f64t(&[4, 3])], |b, p| {
        let (q, r) = b.qr(p[0], false)?;
        Ok(vec![q, r])
    });
    let o = run(&f, &[tensor(DType::F64, &[4, 3], &a)]);
    let (q, r) = (o[0].to_f64_vec(), o[1].to_f64_vec());
    assert_orthonormal_columns("rank 2", &q, 4, 3, 1e-12);
    assert_close("rank 2: q r = a", &mm(&q, &r, 4, 3, 3), &a, 1e-12);
    assert!(r[8].abs() < 1e-12, "the dependent column leaves no mass: {r:?}");
    // NaN or infinity: NaN factors for that matrix only.
    let good = [2.0, 0.0, 0.0, 3.0];
    let input: Vec<f64> = [good, [f64::NAN, 1.0, 1.0, 1.0], [1.0, f64::INFINITY, 0.0, 1.0]].concat();
    for dtype in [DType::F32, DType::F64] {
        let f = func(&[ty(dtype, &[3, 2, 2])], |b, p| {
            let (q, r) = b.qr(p[0], false)?;
            Ok(vec![q, r])
        });
        let o = run(&f, &[tensor(dtype, &[3, 2, 2], &input)]);
        for t in &o {
            let v = t.to_f64_vec();
            assert!(v[4..].iter().all(|x| x.is_nan()), "{dtype}: {v:?}");
            assert!(v[..4].iter().all(|x| x.is_finite()), "{dtype}: {v:?}");
        }
    }
}

#[test]
fn eigh_diagonalizes_reads_the_lower_triangle_and_sorts_ascending() {
    let mut rng = Rng(2);
    for dtype in [DType::F32, DType::F64] {
        for (batch, n) in [(1, 1), (3, 4), (2, 7), (1, 150)] {
            let mats: Vec<Vec<f64>> = (0..batch)
                .map(|_| {
                    let m = random(&mut rng, n * n);
                    (0..n * n).map(|k| m[k] + m[(k % n) * n + k / n]).collect()
                })
                .collect();
            // NaN above the diagonal: the kernel must not read it.
            let input: Vec<f64> = mats
                .iter()
                .flat_map(|a| a.iter().enumerate().map(|(k, &x)| if k % n > k / n { f64::NAN } else { x }))
                .collect();
            let f = func(&[ty(dtype, &[batch, n, n])], |b, p| {
                let (w, v) = b.eigh(p[0])?;
                Ok(vec![w, v])
            });
            let o = run(&f, &[tensor(dtype, &[batch, n, n], &input)]);
            let (w, v) = (o[0].to_f64_vec(), o[1].to_f64_vec());
            let what = format!("{dtype} {batch}x{n}");
            let t = tol(dtype) * 10.0 * n as f64;
            for i in 0..batch {
                let wi = &w[i * n..(i + 1) * n];
                let vi = &v[i * n * n..(i + 1) * n * n];
                assert!(wi.windows(2).all(|p| p[0] <= p[1]), "{what}: ascending {wi:?}");
                assert_orthonormal_columns(&what, vi, n, n, t);
                let av = mm(&mats[i], vi, n, n, n);
                let vw: Vec<f64> = (0..n * n).map(|k| vi[k] * wi[k % n]).collect();
                assert_close(&format!("{what}: a v = v diag(w)"), &av, &vw, t);
            }
        }
    }
}

#[test]
fn svd_reconstructs_with_orthonormal_factors_for_every_shape() {
    let mut rng = Rng(3);
    for dtype in [DType::F32, DType::F64] {
        for (batch, m, n) in [(1, 1, 1), (2, 5, 3), (3, 3, 5), (1, 4, 4), (2, 40, 25), (1, 0, 3), (1, 2, 0)] {
            for full in [false, true] {
                let a = random(&mut rng, batch * m * n);
                let f = func(&[ty(dtype, &[batch, m, n])], |b, p| {
                    let (u, s, vh) = b.svd(p[0], full)?;
                    Ok(vec![u, s, vh])
                });
                let o = run(&f, &[tensor(dtype, &[batch, m, n], &a)]);
                let k = m.min(n);
                let (uc, vr) = if full { (m, n) } else { (k, k) };
                assert_eq!(o[0].shape(), &[batch, m, uc]);
                assert_eq!(o[1].shape(), &[batch, k]);
                assert_eq!(o[2].shape(), &[batch, vr, n]);
                let (u, s, vh) = (o[0].to_f64_vec(), o[1].to_f64_vec(), o[2].to_f64_vec());
                let what = format!("{dtype} {batch}x{m}x{n} full={full}");
                let t = tol(dtype) * 10.0 * m.max(n) as f64;
                for i in 0..batch {
                    let ui = &u[i * m * uc..(i + 1) * m * uc];
                    let si = &s[i * k..(i + 1) * k];
                    let vi = &vh[i * vr * n..(i + 1) * vr * n];
                    assert!(si.windows(2).all(|p| p[0] >= p[1]) && si.iter().all(|&x| x >= 0.0), "{what}: {si:?}");
                    assert_orthonormal_columns(&format!("{what} u"), ui, m, uc, t);
                    assert_orthonormal_columns(&format!("{what} v"), &tr(vi, vr, n), n, vr, t);
                    // u[:, :k] diag(s) vh[:k, :]
                    let us: Vec<f64> = (0..m * k).map(|q| ui[(q / k) * uc + q % k] * si[q % k]).collect();
                    let back = mm(&us, &vi[..k * n], m, k, n);
                    assert_close(&format!("{what}: u s vh = a"), &back, &a[i * m * n..(i + 1) * m * n], t);
                }
            }
        }
    }
}

#[test]
fn bad_matrices_give_nan_eigen_and_singular_decompositions() {
    let good = [2.0, 1.0, 1.0, 3.0];
    let input: Vec<f64> = [good, [f64::NAN, 0.0, 0.0, 1.0], [1.0, 0.0, f64::NEG_INFINITY, 1.0]].concat();
    for dtype in [DType::F32, DType::F64] {
        let f = func(&[ty(dtype, &[3, 2, 2])], |b, p| {
            let (w, v) = b.eigh(p[0])?;
            let (u, s, vh) = b.svd(p[0], false)?;
            Ok(vec![w, v, u, s, vh])
        });
        let o = run(&f, &[tensor(dtype, &[3, 2, 2], &input)]);
        for t in &o {
            let v = t.to_f64_vec();
            let per = v.len() / 3;
            assert!(v[..per].iter().all(|x| x.is_finite()), "{dtype}: {v:?}");
            assert!(v[per..].iter().all(|x| x.is_nan()), "{dtype}: {v:?}");
        }
    }
    // eigh never reads the upper triangle, so an infinity there is harmless.
    let f = func(&[f64t(&[2, 2])], |b, p| Ok(vec![b.eigh(p[0])?.0]));
    let w = run(&f, &[tensor(DType::F64, &[2, 2], &[2.0, f64::INFINITY, 0.0, 3.0])]).remove(0).to_f64_vec();
    assert_eq!(w, vec![2.0, 3.0]);
}

#[test]
fn hand_cases() {
    // [[3, 1], [1, 3]]: eigenvalues 2 and 4, eigenvectors (1, -1)/√2, (1, 1)/√2.
    let f = func(&[f64t(&[2, 2])], |b, p| {
        let (w, v) = b.eigh(p[0])?;
        let (q, r) = b.qr(p[0], false)?;
        let (u, s, vh) = b.svd(p[0], false)?;
        Ok(vec![w, v, q, r, u, s, vh])
    });
    let o = run(&f, &[tensor(DType::F64, &[2, 2], &[3.0, 1.0, 1.0, 3.0])]);
    assert_close("w", &o[0].to_f64_vec(), &[2.0, 4.0], 1e-15);
    let v = o[1].to_f64_vec();
    let h = 0.5f64.sqrt();
    assert_close("|v|", &v.iter().map(|x| x.abs()).collect::<Vec<_>>(), &[h, h, h, h], 1e-15);
    assert!(v[0] * v[2] < 0.0 && v[1] * v[3] > 0.0, "{v:?}");
    // QR with LAPACK's signs (as jnp.linalg.qr): r00 = -sqrt(10); the last
    // reflector has nothing below the diagonal and leaves r11 positive.
    let r10 = 10f64.sqrt();
    assert_close("q", &o[2].to_f64_vec(), &[-3.0 / r10, -1.0 / r10, -1.0 / r10, 3.0 / r10], 1e-15);
    assert_close("r", &o[3].to_f64_vec(), &[-r10, -6.0 / r10, 0.0, 8.0 / r10], 1e-15);
    assert_close("s", &o[5].to_f64_vec(), &[4.0, 2.0], 1e-15);
}

#[test]
fn tiny_and_huge_matrices_factor_as_well_as_ordinary_ones() {
    // Subnormal entries (faer alone flushes their norms to zero) and
    // entries near the overflow threshold (whose squares overflow): scaled
    // by a power of two around the factorization, so the usual properties
    // hold relative to the matrix's size.
    let base = [3.0, 1.0, -2.0, 1.0, 4.0, 0.5, -2.0, 0.5, 5.0];
    for (dtype, factor) in [(DType::F64, 1e-310), (DType::F64, 1e300), (DType::F32, 1e-40), (DType::F32, 1e37)] {
        let a: Vec<f64> = base.iter().map(|x| x * factor).collect();
        let t = tensor(dtype, &[3, 3], &a);
        let a = t.to_f64_vec(); // as rounded to the dtype
        let f = func(&[ty(dtype, &[3, 3])], |b, p| {
            let (q, r) = b.qr(p[0], false)?;
            let (w, v) = b.eigh(p[0])?;
            let (u, s, vh) = b.svd(p[0], false)?;
            Ok(vec![q, r, w, v, u, s, vh])
        });
        let o: Vec<Vec<f64>> = run(&f, &[t]).iter().map(|t| t.to_f64_vec()).collect();
        let what = format!("{dtype} x {factor:e}");
        // Relative to the scale, with room for the rounding of subnormals.
        let close = |name: &str, got: &[f64], want: &[f64]| {
            let tol = if dtype == DType::F64 { 1e-12 } else { 1e-4 };
            for (g, w) in got.iter().zip(want) {
                assert!((g - w).abs() <= tol * factor * 10.0, "{what} {name}: {got:?} vs {want:?}");
            }
        };
        close("q r", &mm(&o[0], &o[1], 3, 3, 3), &a);
        let vw: Vec<f64> = (0..9).map(|k| o[3][k] * o[2][k % 3]).collect();
        close("a v = v w", &mm(&a, &o[3], 3, 3, 3), &vw);
        let us: Vec<f64> = (0..9).map(|k| o[4][k] * o[5][k % 3]).collect();
        close("u s vh", &mm(&us, &o[6], 3, 3, 3), &a);
        assert!(o[5].iter().all(|&x| x > 0.0 && x.is_finite()), "{what}: {:?}", o[5]);
    }
}

// ---------------------------------------------------------------------------
// shape rules and front doors
// ---------------------------------------------------------------------------

#[test]
fn shape_rules_and_front_doors_reject_bad_operands() {
    let err = |r: Result<Vec<TensorType>, graft_core::TypeError>| r.unwrap_err().to_string();
    assert!(err(Qr { full_matrices: false }.infer(&[f64t(&[3])])).contains("matrix"));
    assert!(err(Qr { full_matrices: false }.infer(&[ty(DType::I32, &[2, 2])])).contains("floating-point"));
    assert_eq!(
        Qr { full_matrices: true }.infer(&[f64t(&[2, 5, 3])]).unwrap(),
        vec![f64t(&[2, 5, 5]), f64t(&[2, 5, 3])]
    );
    assert_eq!(Qr { full_matrices: false }.infer(&[f64t(&[3, 5])]).unwrap(), vec![f64t(&[3, 3]), f64t(&[3, 5])]);
    assert!(err(Eigh.infer(&[f64t(&[2, 3])])).contains("square"));
    assert_eq!(Eigh.infer(&[f64t(&[4, 3, 3])]).unwrap(), vec![f64t(&[4, 3]), f64t(&[4, 3, 3])]);
    assert_eq!(
        Svd { full_matrices: false }.infer(&[f64t(&[5, 3])]).unwrap(),
        vec![f64t(&[5, 3]), f64t(&[3]), f64t(&[3, 3])]
    );
    assert_eq!(
        Svd { full_matrices: true }.infer(&[f64t(&[2, 3, 5])]).unwrap(),
        vec![f64t(&[2, 3, 3]), f64t(&[2, 3]), f64t(&[2, 5, 5])]
    );
    let mut b = Builder::new("e");
    let x = b.param(f64t(&[2, 3]));
    let v = b.param(f64t(&[4]));
    let i = b.param(ty(DType::I32, &[3, 3]));
    assert!(sp::eigh(&mut b, x, true).unwrap_err().to_string().starts_with("eigh: needs a square"));
    assert!(sp::svd(&mut b, v, false).unwrap_err().to_string().starts_with("svd: needs a matrix"));
    assert!(sp::qr(&mut b, i, false).unwrap_err().to_string().starts_with("qr: needs a floating-point"));
    let e = sp::lstsq(&mut b, x, v, None).unwrap_err().to_string();
    assert!(e.contains("lstsq") && e.contains("must have 2 elements"), "{e}");
    assert!(sp::cond(&mut b, x, Some(MatrixOrd::One)).unwrap_err().to_string().contains("square"));
    assert!(d::norm(&mut b, v, NormOrd::Nuc).unwrap_err().to_string().contains("needs a matrix"));
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
fn qr_derivatives_first_and_second_order() {
    let mut rng = Rng(4);
    for (batch, m, n) in [(1, 3, 3), (2, 5, 3), (1, 3, 5), (1, 1, 1), (1, 4, 1)] {
        let a = random(&mut rng, batch * m * n);
        for full in [false, true] {
            if full && m > n {
                continue;
            }
            // The factors are unique for full-rank input (the signs follow
            // the input continuously), so they are checked as they are.
            let f = func(&[f64t(&[batch, m, n])], |b, p| {
                let (q, r) = b.qr(p[0], full)?;
                Ok(vec![q, r])
            });
            check_rules(&format!("qr {batch}x{m}x{n} full={full}"), &f, &[tensor(DType::F64, &[batch, m, n], &a)], 5);
        }
    }
    // Complete tall factors have no derivative: an error naming why.
    let f = func(&[f64t(&[4, 2])], |b, p| Ok(vec![b.qr(p[0], true)?.0]));
    let e = jvp_func(&f).unwrap_err().to_string();
    assert!(e.contains("jvp of `qr`") && e.contains("use the reduced QR"), "{e}");
}

/// `(w, v ∘ v, v diag(w^3) v^T)`: sign-invariant functions of `eigh`.
fn eigh_invariants(b: &mut Builder, a: Value) -> Result<Vec<Value>, IrError> {
    let (w, v) = b.eigh(a)?;
    let vv = b.mul(v, v)?;
    let w2 = b.mul(w, w)?;
    let w3 = b.mul(w2, w)?;
    let dg = d::diag(b, w3)?;
    let vd = graft_core::ops::decomp::bmm(b, v, dg)?;
    let vt = graft_core::ops::decomp::swap_last2(b, v)?;
    let f = graft_core::ops::decomp::bmm(b, vd, vt)?;
    Ok(vec![w, vv, f])
}

#[test]
fn eigh_derivatives_first_and_second_order() {
    let mut rng = Rng(6);
    for n in [1, 2, 4, 6] {
        let a = separated_symmetric(&mut rng, n);
        let f = func(&[f64t(&[n, n])], |b, p| eigh_invariants(b, p[0]));
        check_rules(&format!("eigh {n}"), &f, &[tensor(DType::F64, &[n, n], &a)], 7);
        // The composite symmetrizes, so any (non-symmetric) tangent is fine.
        let g = func(&[f64t(&[n, n])], |b, p| {
            let (w, v) = sp::eigh(b, p[0], true)?;
            let vv = b.mul(v, v)?;
            Ok(vec![w, vv, sp::eigvalsh(b, p[0])?])
        });
        check_rules(&format!("composite eigh {n}"), &g, &[tensor(DType::F64, &[n, n], &a)], 8);
    }
}

/// `(s, u ∘ u, vh ∘ vh, u diag(s) vh)`: sign-invariant functions of `svd`.
fn svd_invariants(b: &mut Builder, a: Value) -> Result<Vec<Value>, IrError> {
    let (u, s, vh) = b.svd(a, false)?;
    let uu = b.mul(u, u)?;
    let vv = b.mul(vh, vh)?;
    let dg = d::diag(b, s)?;
    let us = graft_core::ops::decomp::bmm(b, u, dg)?;
    let back = graft_core::ops::decomp::bmm(b, us, vh)?;
    Ok(vec![s, uu, vv, back])
}

#[test]
fn svd_derivatives_first_and_second_order() {
    let mut rng = Rng(9);
    for (m, n) in [(1, 1), (3, 3), (5, 3), (3, 5), (4, 1), (1, 4)] {
        let a = separated_matrix(&mut rng, m, n);
        let f = func(&[f64t(&[m, n])], |b, p| svd_invariants(b, p[0]));
        check_rules(&format!("svd {m}x{n}"), &f, &[tensor(DType::F64, &[m, n], &a)], 10);
    }
    // full_matrices of a square matrix is the reduced case; of any other,
    // no derivative (an error).
    let a = separated_matrix(&mut rng, 3, 3);
    let f = func(&[f64t(&[3, 3])], |b, p| {
        let (u, s, vh) = b.svd(p[0], true)?;
        let uu = b.mul(u, u)?;
        let vv = b.mul(vh, vh)?;
        Ok(vec![uu, s, vv])
    });
    check_rules("svd full 3x3", &f, &[tensor(DType::F64, &[3, 3], &a)], 11);
    let f = func(&[f64t(&[4, 2])], |b, p| Ok(vec![b.svd(p[0], true)?.1]));
    let e = jvp_func(&f).unwrap_err().to_string();
    assert!(e.contains("jvp of `svd`") && e.contains("full_matrices=false"), "{e}");
}

#[test]
fn grad_of_grad_through_eigh_and_svd() {
    // Hessian-vector products (JVP of the gradient against differences of
    // the gradient) and reverse over reverse (the gradient's VJP by the
    // dot-product test) for scalar losses of the spectra and vectors.
    let mut rng = Rng(12);
    let n = 4;
    let a = separated_symmetric(&mut rng, n);
    let c: Vec<f64> = random(&mut rng, n * n);
    let loss_eigh = func(&[f64t(&[n, n])], |b, p| {
        let outs = eigh_invariants(b, p[0])?;
        let c = b.constant(tensor(DType::F64, &[n, n], &c))?;
        let x = b.mul(outs[1], c)?;
        let s1 = b.reduce_sum(x, &[0, 1])?;
        let w3 = b.mul(outs[0], outs[0])?;
        let s2 = b.reduce_sum(w3, &[0])?;
        Ok(vec![b.add(s1, s2)?])
    });
    let g = grad(&loss_eigh, &Wrt::All).unwrap();
    check_grads("grad eigh loss", &g, &[tensor(DType::F64, &[n, n], &a)], &mut rng, 1e-5, 1e-5);
    let (m, k) = (5, 3);
    let a = separated_matrix(&mut rng, m, k);
    let c: Vec<f64> = random(&mut rng, m * k);
    let loss_svd = func(&[f64t(&[m, k])], |b, p| {
        let outs = svd_invariants(b, p[0])?;
        let c = b.constant(tensor(DType::F64, &[m, k], &c))?;
        let x = b.mul(outs[1], c)?;
        let s1 = b.reduce_sum(x, &[0, 1])?;
        let s3 = b.mul(outs[0], outs[0])?;
        let s3 = b.mul(s3, outs[0])?;
        let s2 = b.reduce_sum(s3, &[0])?;
        Ok(vec![b.add(s1, s2)?])
    });
    let g = grad(&loss_svd, &Wrt::All).unwrap();
    check_grads("grad svd loss", &g, &[tensor(DType::F64, &[m, k], &a)], &mut rng, 1e-5, 1e-5);
}

#[test]
fn repeated_eigenvalues_and_singular_values_give_finite_documented_derivatives() {
    // diag(2, 2, 5): eigenvalue 2 twice. F is 0 for the repeated pair, so
    // every derivative is finite; derivatives of functions of the
    // eigenvalues that are symmetric within the repeated group are exact:
    // d sum(w^2) = d trace(a^2) = 2 a.
    let a = [2.0, 0.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.0, 5.0];
    let f = func(&[f64t(&[3, 3])], |b, p| {
        let (w, _) = sp::eigh(b, p[0], true)?;
        let w2 = b.mul(w, w)?;
        Ok(vec![b.reduce_sum(w2, &[0])?])
    });
    let g = run(&grad(&f, &Wrt::All).unwrap(), &[tensor(DType::F64, &[3, 3], &a)]).pop().unwrap().to_f64_vec();
    assert_close("grad trace(a^2)", &g, &a.iter().map(|x| 2.0 * x).collect::<Vec<_>>(), 1e-14);
    // The JVP of the eigenvectors is finite, with no rotation within the
    // repeated pair: dv[:, 0..2] gets no v[:, 0..2] component.
    let f = func(&[f64t(&[3, 3])], |b, p| {
        let (w, v) = b.eigh(p[0])?;
        Ok(vec![w, v])
    });
    let jf = jvp_func(&f).unwrap();
    let da = [0.1, 0.3, 0.2, 0.3, -0.4, 0.5, 0.2, 0.5, 0.7];
    let o = run(&jf, &[tensor(DType::F64, &[3, 3], &a), tensor(DType::F64, &[3, 3], &da)]);
    let (v, dw, dv) = (o[1].to_f64_vec(), o[2].to_f64_vec(), o[3].to_f64_vec());
    assert!(dw.iter().chain(&dv).all(|x| x.is_finite()), "{dw:?} {dv:?}");
    let vt_dv = mm(&tr(&v, 3, 3), &dv, 3, 3, 3);
    assert!(vt_dv[1].abs() < 1e-15 && vt_dv[3].abs() < 1e-15, "no rotation within the repeated pair: {vt_dv:?}");
    // Identity: every singular value is 1 (and every gap zero). The nuclear
    // norm's gradient there is u vh = I, exactly; a zero singular value
    // (rank 1) gives finite singular-vector tangents (1/s taken as 0).
    let f = func(&[f64t(&[3, 3])], |b, p| sp::matrix_norm(b, p[0], MatrixOrd::Nuc).map(|x| vec![x]));
    let g = run(&grad(&f, &Wrt::All).unwrap(), &[tensor(DType::F64, &[3, 3], &eye(3))]).pop().unwrap();
    assert_close("grad nuc at I", &g.to_f64_vec(), &eye(3), 1e-14);
    let f = func(&[f64t(&[3, 2])], |b, p| {
        let (u, s, vh) = b.svd(p[0], false)?;
        Ok(vec![u, s, vh])
    });
    let jf = jvp_func(&f).unwrap();
    let rank1 = [1.0, 2.0, 2.0, 4.0, 3.0, 6.0];
    let o = run(&jf, &[tensor(DType::F64, &[3, 2], &rank1), tensor(DType::F64, &[3, 2], &da[..6])]);
    assert!(o.iter().all(|t| t.to_f64_vec().iter().all(|x| x.is_finite())), "{o:?}");
}

#[test]
fn pinv_and_lstsq_derivatives_use_the_smooth_rule() {
    let mut rng = Rng(13);
    // Well separated, rank-deficient and orthogonal (every singular value
    // 1, where the SVD's own rule would drop terms) matrices.
    let q = orthogonal(&mut rng, 3);
    for (name, m, n, a) in [
        ("tall", 5, 3, separated_matrix(&mut rng, 5, 3)),
        ("wide", 2, 4, separated_matrix(&mut rng, 2, 4)),
        ("orthogonal", 3, 3, q.clone()),
    ] {
        let f = func(&[f64t(&[m, n])], |b, p| Ok(vec![sp::pinv(b, p[0], None)?]));
        check_rules(&format!("pinv {name}"), &f, &[tensor(DType::F64, &[m, n], &a)], 14);
        let rhs = random(&mut rng, m * 2);
        // (Not `s`: at repeated singular values the sorted values are not
        // differentiable.)
        let g = func(&[f64t(&[m, n]), f64t(&[m, 2])], |b, p| {
            let (x, resid, _, _) = sp::lstsq(b, p[0], p[1], None)?;
            Ok(vec![x, resid])
        });
        check_grads(
            &format!("lstsq {name}"),
            &g,
            &[tensor(DType::F64, &[m, n], &a), tensor(DType::F64, &[m, 2], &rhs)],
            &mut rng,
            1e-6,
            1e-6,
        );
    }
    // pinv of an orthogonal matrix is its transpose, with the gradient of inv.
    let w = random(&mut rng, 9);
    let loss = |inv: bool| {
        func(&[f64t(&[3, 3])], |b, p| {
            let x = if inv { d::inv(b, p[0])? } else { sp::pinv(b, p[0], None)? };
            let w = b.constant(tensor(DType::F64, &[3, 3], &w))?;
            let xw = b.mul(x, w)?;
            Ok(vec![b.reduce_sum(xw, &[0, 1])?])
        })
    };
    let at =
        |f: &Func| run(&grad(f, &Wrt::All).unwrap(), &[tensor(DType::F64, &[3, 3], &q)]).pop().unwrap().to_f64_vec();
    assert_close("grad pinv = grad inv at an orthogonal matrix", &at(&loss(false)), &at(&loss(true)), 1e-12);
}

#[test]
fn composite_values() {
    let a = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]; // [3, 2]
    let f = func(&[f64t(&[3, 2]), f64t(&[3])], |b, p| {
        let mut outs = vec![sp::pinv(b, p[0], None)?];
        let (x, resid, rank, s) = sp::lstsq(b, p[0], p[1], None)?;
        outs.extend([x, resid, rank, s]);
        for ord in [
            MatrixOrd::Fro,
            MatrixOrd::Nuc,
            MatrixOrd::One,
            MatrixOrd::NegOne,
            MatrixOrd::Two,
            MatrixOrd::NegTwo,
            MatrixOrd::Inf,
            MatrixOrd::NegInf,
        ] {
            outs.push(sp::matrix_norm(b, p[0], ord)?);
        }
        outs.push(sp::matrix_rank(b, p[0], None)?);
        outs.push(sp::cond(b, p[0], None)?);
        outs.push(d::norm(b, p[0], NormOrd::Two)?);
        outs.push(d::norm(b, p[1], NormOrd::NegOne)?);
        outs.push(sp::svdvals(b, p[0])?);
        Ok(outs)
    });
    let o = run(&f, &[tensor(DType::F64, &[3, 2], &a), tensor(DType::F64, &[3], &[1.0, 2.0, 2.0])]);
    // pinv = (a^T a)^{-1} a^T for full column rank: a^T a = [[35, 44], [44, 56]], det 24.
    let ata_inv = [56.0 / 24.0, -44.0 / 24.0, -44.0 / 24.0, 35.0 / 24.0];
    let want = mm(&ata_inv, &tr(&a, 3, 2), 2, 2, 3);
    assert_close("pinv", &o[0].to_f64_vec(), &want, 1e-12);
    let x = mm(&want, &[1.0, 2.0, 2.0], 2, 3, 1);
    assert_close("lstsq x", &o[1].to_f64_vec(), &x, 1e-12);
    let fit = mm(&a, &x, 3, 2, 1);
    let resid: f64 = fit.iter().zip([1.0, 2.0, 2.0]).map(|(f, y)| (y - f) * (y - f)).sum();
    assert_close("lstsq resid", &o[2].to_f64_vec(), &[resid], 1e-12);
    assert_eq!(o[3].to_vec::<i32>().unwrap(), vec![2]);
    let s = o[4].to_f64_vec();
    // s^2 are the eigenvalues of a^T a: (91 ± sqrt(91^2 - 4 * 24)) / 2.
    let disc = (91.0f64 * 91.0 - 96.0).sqrt();
    assert_close("s", &s, &[((91.0 + disc) / 2.0).sqrt(), ((91.0 - disc) / 2.0).sqrt()], 1e-13);
    assert_close("fro", &o[5].to_f64_vec(), &[91f64.sqrt()], 1e-14);
    assert_close("nuc", &o[6].to_f64_vec(), &[s[0] + s[1]], 1e-13);
    assert_eq!(o[7].to_f64_vec(), vec![12.0]);
    assert_eq!(o[8].to_f64_vec(), vec![9.0]);
    assert_close("2", &o[9].to_f64_vec(), &[s[0]], 1e-13);
    assert_close("-2", &o[10].to_f64_vec(), &[s[1]], 1e-13);
    assert_eq!(o[11].to_f64_vec(), vec![11.0]);
    assert_eq!(o[12].to_f64_vec(), vec![3.0]);
    assert_eq!(o[13].to_vec::<i32>().unwrap(), vec![2]);
    assert_close("cond", &o[14].to_f64_vec(), &[s[0] / s[1]], 1e-12);
    assert_close("norm ord=2", &o[15].to_f64_vec(), &[s[0]], 1e-13);
    assert_close("norm ord=-1", &o[16].to_f64_vec(), &[1.0 / (1.0 + 0.5 + 0.5)], 1e-15);
    assert_close("svdvals", &o[17].to_f64_vec(), &s, 0.0);
    // Rank deficiency: a zero matrix has rank 0 and the zero solution.
    let f = func(&[f64t(&[2, 2]), f64t(&[2])], |b, p| {
        let (x, _, rank, _) = sp::lstsq(b, p[0], p[1], None)?;
        Ok(vec![x, rank, sp::pinv(b, p[0], None)?])
    });
    let o = run(&f, &[tensor(DType::F64, &[2, 2], &[0.0; 4]), tensor(DType::F64, &[2], &[1.0, 1.0])]);
    assert_eq!(o[0].to_f64_vec(), vec![0.0, 0.0]);
    assert_eq!(o[1].to_vec::<i32>().unwrap(), vec![0]);
    assert_eq!(o[2].to_f64_vec(), vec![0.0; 4]);
}

// ---------------------------------------------------------------------------
// vmap
// ---------------------------------------------------------------------------

const X: Gen = Gen::F(-1.0, 1.0);

#[test]
fn vmap_equals_the_per_example_loop() {
    // Each matrix is factorized by the same code batched or not, so even
    // the sign choices agree and the raw factors are compared.
    for (m, n) in [(4, 3), (3, 4), (3, 3)] {
        for full in [false, true] {
            let f = func(&[f64t(&[m, n])], |b, p| {
                let (q, r) = b.qr(p[0], full)?;
                let (u, s, vh) = b.svd(p[0], full)?;
                Ok(vec![q, r, u, s, vh])
            });
            check_vmap(&format!("qr/svd {m}x{n} full={full}"), &f, &[X], 10);
        }
    }
    let f = func(&[f64t(&[2, 4, 4])], |b, p| {
        let (w, v) = b.eigh(p[0])?;
        Ok(vec![w, v])
    });
    check_vmap("eigh", &f, &[X], 10);
    let f = func(&[f64t(&[4, 3]), f64t(&[4])], |b, p| {
        let (x, resid, rank, s) = sp::lstsq(b, p[0], p[1], None)?;
        Ok(vec![x, resid, rank, s, sp::pinv(b, p[0], None)?, sp::matrix_norm(b, p[0], MatrixOrd::Two)?])
    });
    check_vmap("lstsq/pinv/matrix_norm", &f, &[X, X], 10);
}

#[test]
fn vmap_of_grad_through_the_decompositions_equals_per_example() {
    let f = func(&[f64t(&[3, 3])], |b, p| {
        let (w, v) = sp::eigh(b, p[0], true)?;
        let vv = b.mul(v, v)?;
        let (q, r) = b.qr(p[0], false)?;
        let s = sp::svdvals(b, p[0])?;
        let t =
            [b.reduce_sum(w, &[0])?, b.reduce_sum(vv, &[0, 1])?, b.reduce_sum(q, &[0, 1])?, b.reduce_sum(r, &[0, 1])?];
        let s = b.reduce_sum(s, &[0])?;
        let mut acc = s;
        for x in t {
            acc = b.add(acc, x)?;
        }
        Ok(vec![acc])
    });
    let g = grad(&f, &Wrt::All).unwrap();
    check_vmap("vmap(grad)", &g, &[X], 6);
}

#[test]
fn vmap_of_the_decompositions_is_one_batched_equation_whatever_the_batch_size() {
    let f = func(&[f64t(&[4, 3])], |b, p| {
        let (q, r) = b.qr(p[0], false)?;
        let (u, s, vh) = b.svd(p[0], false)?;
        let rt = graft_core::ops::decomp::swap_last2(b, r)?;
        let ata = graft_core::ops::decomp::bmm(b, rt, r)?;
        let (w, v) = b.eigh(ata)?;
        Ok(vec![q, r, u, s, vh, w, v])
    });
    let sizes = [2, 7, 64];
    let graphs: Vec<Func> = sizes.iter().map(|&s| vmap_func(&f, &[Some(0)], &[Some(0); 7], s).unwrap()).collect();
    for (g, s) in graphs.iter().zip(sizes) {
        for prim in ["qr", "svd", "eigh"] {
            assert_eq!(g.count_prim(prim), 1, "size {s}:\n{g}");
        }
        for looped in ["scan", "while", "call"] {
            assert_eq!(g.count_prim(looped), 0, "size {s}: no {looped}\n{g}");
        }
        assert_eq!(g.eqns.len(), graphs[0].eqns.len(), "the batched graph does not grow with the batch size");
    }
}

// ---------------------------------------------------------------------------
// JAX
// ---------------------------------------------------------------------------

struct Case {
    name: String,
    op: String,
    inputs: Vec<Tensor>,
    values: Vec<Tensor>,
    weights: Vec<Tensor>,
    grads: Option<Vec<Tensor>>,
}

fn tensors(v: &serde_json::Value) -> Vec<Tensor> {
    v.as_array()
        .expect("a list of [shape, data]")
        .iter()
        .map(|p| {
            let shape: Vec<usize> =
                p[0].as_array().expect("a shape").iter().map(|d| d.as_u64().expect("a size") as usize).collect();
            let data: Vec<f64> = p[1].as_array().expect("data").iter().map(|x| x.as_f64().expect("a number")).collect();
            tensor(DType::F64, &shape, &data)
        })
        .collect()
}

/// The graft computation of a reference case's `op`.
fn graft_op(b: &mut Builder, op: &str, p: &[Value]) -> Result<Vec<Value>, IrError> {
    let sq = |b: &mut Builder, x: Value| b.mul(x, x);
    match op {
        "qr_reduced" | "qr_complete" => {
            let (q, r) = sp::qr(b, p[0], op == "qr_complete")?;
            Ok(vec![q, r])
        }
        "eigh" => {
            let (w, v) = sp::eigh(b, p[0], true)?;
            Ok(vec![w, sq(b, v)?])
        }
        "eigvalsh" => Ok(vec![sp::eigvalsh(b, p[0])?]),
        "svd" => {
            let (u, s, vh) = sp::svd(b, p[0], false)?;
            Ok(vec![s, sq(b, u)?, sq(b, vh)?])
        }
        "svd_full" => {
            let (u, s, vh) = sp::svd(b, p[0], true)?;
            let t = b.ty(u)?.clone();
            let k = b.ty(s)?.shape[0];
            let uk = b.slice(u, &[0, 0], &[t.shape[0], k], &[1, 1])?;
            Ok(vec![s, sq(b, uk)?, sq(b, vh)?])
        }
        "svdvals" => Ok(vec![sp::svdvals(b, p[0])?]),
        "pinv" => Ok(vec![sp::pinv(b, p[0], None)?]),
        "lstsq" => {
            let (x, resid, _, _) = sp::lstsq(b, p[0], p[1], None)?;
            Ok(vec![x, resid])
        }
        "cond" => Ok(vec![sp::cond(b, p[0], None)?]),
        _ => {
            let ord = match op.strip_prefix("matrix_norm:") {
                Some("fro") => MatrixOrd::Fro,
                Some("nuc") => MatrixOrd::Nuc,
                Some("1") => MatrixOrd::One,
                Some("-1") => MatrixOrd::NegOne,
                Some("2") => MatrixOrd::Two,
                Some("-2") => MatrixOrd::NegTwo,
                Some("inf") => MatrixOrd::Inf,
                Some("-inf") => MatrixOrd::NegInf,
                _ => panic!("no graft computation for reference op `{op}`"),
            };
            Ok(vec![sp::matrix_norm(b, p[0], ord)?])
        }
    }
}

/// Largest `|got - want| / max(1, |want|)`.
fn max_rel_err(got: &Tensor, want: &Tensor) -> f64 {
    assert_eq!(got.shape(), want.shape());
    got.to_f64_vec().iter().zip(want.to_f64_vec()).map(|(g, w)| (g - w).abs() / w.abs().max(1.0)).fold(0.0, f64::max)
}

#[test]
fn matches_jax() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/linalg_reference.json"))
        .expect("the reference file is in the repository");
    let reference: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    let cases: Vec<Case> = reference["cases"]
        .as_array()
        .expect("a list of cases")
        .iter()
        .map(|c| Case {
            name: c["name"].as_str().expect("a name").to_string(),
            op: c["op"].as_str().expect("an op").to_string(),
            inputs: tensors(&c["inputs"]),
            values: tensors(&c["values"]),
            weights: tensors(&c["weights"]),
            grads: c.get("grads").map(tensors),
        })
        .collect();
    assert!(cases.len() >= 29, "every reference case is present");
    let (mut worst_value, mut worst_grad) = (0.0f64, 0.0f64);
    for c in &cases {
        let types: Vec<TensorType> = c.inputs.iter().map(Tensor::ty).collect();
        let f = func(&types, |b, p| graft_op(b, &c.op, p));
        let got = run(&f, &c.inputs);
        assert_eq!(got.len(), c.values.len(), "{}", c.name);
        for (i, (g, w)) in got.iter().zip(&c.values).enumerate() {
            let e = max_rel_err(g, w);
            assert!(e <= 1e-9, "{}: value {i}: error {e:e}\n{g:?}\nJAX {w:?}", c.name);
            worst_value = worst_value.max(e);
        }
        let Some(want) = &c.grads else { continue };
        let loss = func(&types, |b, p| {
            let outs = graft_op(b, &c.op, p)?;
            let mut acc: Option<Value> = None;
            for (o, w) in outs.iter().zip(&c.weights) {
                let w = b.constant(w.clone())?;
                let ow = b.mul(*o, w)?;
                let r = b.ty(ow)?.rank();
                let all: Vec<usize> = (0..r).collect();
                let s = b.reduce_sum(ow, &all)?;
                acc = Some(match acc {
                    None => s,
                    Some(a) => b.add(a, s)?,
                });
            }
            Ok(vec![acc.expect("at least one output")])
        });
        let g = run(&grad(&loss, &Wrt::All).unwrap(), &c.inputs);
        assert_eq!(g.len(), want.len(), "{}", c.name);
        for (i, (g, w)) in g.iter().zip(want).enumerate() {
            let e = max_rel_err(g, w);
            assert!(e <= 1e-8, "{}: gradient {i}: error {e:e}\n{g:?}\nJAX {w:?}", c.name);
            worst_grad = worst_grad.max(e);
        }
    }
    // matrix_rank and lstsq's rank (integers).
    let ranks = &reference["ranks"];
    let rank_of = |shape: [usize; 2], data: &[f64]| -> i64 {
        let f = func(&[f64t(&shape)], |b, p| Ok(vec![sp::matrix_rank(b, p[0], None)?]));
        i64::from(run(&f, &[tensor(DType::F64, &shape, data)])[0].to_vec::<i32>().unwrap()[0])
    };
    let deficient = cases.iter().find(|c| c.name == "pinv rank deficient").expect("the rank-deficient case");
    let tall = cases.iter().find(|c| c.name == "pinv tall").expect("the tall case");
    assert_eq!(rank_of([3, 4], &deficient.inputs[0].to_f64_vec()), ranks["deficient"].as_i64().unwrap());
    assert_eq!(rank_of([5, 3], &tall.inputs[0].to_f64_vec()), ranks["tall"].as_i64().unwrap());
    let ls = cases.iter().find(|c| c.name == "lstsq rank deficient").expect("the rank-deficient lstsq case");
    let f = func(&[f64t(&[3, 4]), f64t(&[3, 2])], |b, p| Ok(vec![sp::lstsq(b, p[0], p[1], None)?.2]));
    let r = run(&f, &ls.inputs)[0].to_vec::<i32>().unwrap()[0];
    assert_eq!(i64::from(r), ranks["lstsq deficient"].as_i64().unwrap());
    eprintln!("largest relative difference to JAX: values {worst_value:e}, gradients {worst_grad:e}");
}
