//! The linear-algebra builtins (`cholesky`, `triangular_solve`, `cho_solve`,
//! `lu`, `solve`, `inv`, `slogdet`, `det`, `eye`, `diag`, `diagonal`,
//! `tril`, `triu`, `trace`, `outer`, `kron`, `norm`): values against
//! references computed here, their derivatives through the language, a
//! Gaussian-process marginal likelihood end to end with its gradient in the
//! kernel length scale against central differences, and located
//! diagnostics naming the builtin.

use graft_core::Tensor;

use crate::common::{check_error as error, close, f64s, leaf_values as leaves, module, run};

#[test]
fn builtins_compute_what_their_references_do() {
    let m = module(
        "def main(a: tensor[3, 3, f64], r: tensor[3, 2, f64]) {\n\
           let l = cholesky(a)\n\
           (l, triangular_solve(l, r), triangular_solve(l, r, lower=true, left=true, transpose_a=true),\n\
            cho_solve(l, r), solve(a, r), inv(a), slogdet(a), det(a), trace(a), diagonal(r), tril(a, -1), triu(a, k=1),\n\
            eye(2, f64), diag([1.0, 2.0]), outer([1.0, 2.0], [3.0, 4.0, 5.0]), kron(eye(2, f64), [[1.0, 2.0]]),\n\
            norm([3.0, 4.0]), norm([3.0, -4.0], ord=1), norm([3.0, -4.0], ord=\"inf\"), norm(a, ord=\"fro\"), lu(a))\n\
         }\n",
    );
    let a = [4.0, 2.0, 0.4, 2.0, 5.0, 1.0, 0.4, 1.0, 3.0];
    let r = [1.0, 0.5, -1.0, 2.0, 0.25, 3.0];
    let o = leaves(&run(&m, "main", &[f64s(&[3, 3], &a), f64s(&[3, 2], &r)]));
    // jnp.linalg.cholesky (JAX 0.10, x64).
    let l = [2.0, 0.0, 0.0, 1.0, 2.0, 0.0, 0.2, 0.4, 1.673_320_053_068_151_1];
    close("cholesky", &o[0], &l, 1e-14);
    // Residuals of the solves, computed here.
    let mm = |x: &[f64], y: &[f64], n: usize, k: usize, p: usize| -> Vec<f64> {
        (0..n * p).map(|ij| (0..k).map(|q| x[ij / p * k + q] * y[q * p + ij % p]).sum()).collect()
    };
    let lt: Vec<f64> = (0..9).map(|k| l[(k % 3) * 3 + k / 3]).collect();
    close("L x = r", &mm(&l, &o[1], 3, 3, 2), &r, 1e-13);
    close("L^T x = r", &mm(&lt, &o[2], 3, 3, 2), &r, 1e-13);
    close("cho_solve", &mm(&a, &o[3], 3, 3, 2), &r, 1e-13);
    close("solve", &mm(&a, &o[4], 3, 3, 2), &r, 1e-13);
    let eye3 = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0];
    close("inv", &mm(&a, &o[5], 3, 3, 3), &eye3, 1e-13);
    // det = (2 * 2 * 1.673...)^2 = 44.8; slogdet = (1, log 44.8).
    close("slogdet sign", &o[6], &[1.0], 0.0);
    close("slogdet log", &o[7], &[44.8f64.ln()], 1e-13);
    close("det", &o[8], &[44.8], 1e-13);
    close("trace", &o[9], &[12.0], 0.0);
    close("diagonal", &o[10], &[1.0, 2.0], 0.0);
    close("tril", &o[11], &[0.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.4, 1.0, 0.0], 0.0);
    close("triu", &o[12], &[0.0, 2.0, 0.4, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0], 0.0);
    close("eye", &o[13], &[1.0, 0.0, 0.0, 1.0], 0.0);
    close("diag", &o[14], &[1.0, 0.0, 0.0, 2.0], 0.0);
    close("outer", &o[15], &[3.0, 4.0, 5.0, 6.0, 8.0, 10.0], 0.0);
    close("kron", &o[16], &[1.0, 2.0, 0.0, 0.0, 0.0, 0.0, 1.0, 2.0], 0.0);
    close("norm", &o[17], &[5.0], 1e-7);
    close("norm 1", &o[18], &[7.0], 0.0);
    close("norm inf", &o[19], &[4.0], 0.0);
    close("norm fro", &o[20], &[a.iter().map(|x| x * x).sum::<f64>().sqrt()], 1e-14);
    assert_eq!(o.len(), 24, "lu is a tuple of three");
}

#[test]
fn derivatives_through_the_builtins_match_finite_differences() {
    let m = module(
        "def f(a: tensor[3, 3, f64], b: tensor[3, f64]) -> f64 {\n\
           let s = a @ transpose(a) + 3.0 * eye(3, f64)\n\
           let l = cholesky(s)\n\
           sum(triangular_solve(l, b) * 2.0) + slogdet(a + 4.0 * eye(3, f64)).1 + sum(solve(s, b)) + trace(inv(s)) + norm(b)\n\
         }\n\
         def g(a: tensor[3, 3, f64], b: tensor[3, f64]) -> (tensor[3, 3, f64], tensor[3, f64]) = grad(f)(a, b)\n",
    );
    let a = [0.3, -0.2, 0.5, 0.1, 0.4, -0.3, 0.2, 0.1, 0.6];
    let b = [0.7, -0.4, 0.9];
    let gs = leaves(&run(&m, "g", &[f64s(&[3, 3], &a), f64s(&[3], &b)]));
    let f = |a: &[f64], b: &[f64]| leaves(&run(&m, "f", &[f64s(&[3, 3], a), f64s(&[3], b)]))[0][0];
    let h = 1e-6;
    for k in 0..9 {
        let (mut p, mut q) = (a.to_vec(), a.to_vec());
        p[k] += h;
        q[k] -= h;
        let fd = (f(&p, &b) - f(&q, &b)) / (2.0 * h);
        close(&format!("d/da[{k}]"), &[gs[0][k]], &[fd], 1e-6);
    }
    for k in 0..3 {
        let (mut p, mut q) = (b.to_vec(), b.to_vec());
        p[k] += h;
        q[k] -= h;
        let fd = (f(&a, &p) - f(&a, &q)) / (2.0 * h);
        close(&format!("d/db[{k}]"), &[gs[1][k]], &[fd], 1e-6);
    }
}

const GP: &str = "\
# Squared-exponential kernel with a little jitter on the diagonal.
def kernel(x: tensor[n, f64], ls: f64) -> tensor[n, n, f64] {
  let d = expand_dims(x, 1) - expand_dims(x, 0)
  exp(-0.5 * d * d / (ls * ls)) + 0.01 * eye(size(x, 0), f64)
}

# log p(y) = -1/2 y^T K^{-1} y - sum(log diag L) - n/2 log(2 pi), K = L L^T.
def log_marginal(ls: f64, x: tensor[n, f64], y: tensor[n, f64]) -> f64 {
  let l = cholesky(kernel(x, ls))
  let alpha = triangular_solve(l, y)
  -0.5 * sum(alpha * alpha) - sum(log(diagonal(l))) - 0.5 * size(x, 0) * log(2.0 * 3.141592653589793)
}

def dlog(ls: f64, x: tensor[n, f64], y: tensor[n, f64]) -> f64 = grad(log_marginal, wrt=ls)(ls, x, y)
";

/// The same likelihood in plain f64 loops: Cholesky by the textbook
/// recurrence, forward substitution.
fn gp_reference(ls: f64, x: &[f64], y: &[f64]) -> f64 {
    let n = x.len();
    let mut k = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..n {
            let d = x[i] - x[j];
            k[i * n + j] = (-0.5 * d * d / (ls * ls)).exp() + if i == j { 0.01 } else { 0.0 };
        }
    }
    let mut l = vec![0.0; n * n];
    for j in 0..n {
        let s: f64 = (0..j).map(|p| l[j * n + p] * l[j * n + p]).sum();
        l[j * n + j] = (k[j * n + j] - s).sqrt();
        for i in j + 1..n {
            let s: f64 = (0..j).map(|p| l[i * n + p] * l[j * n + p]).sum();
            l[i * n + j] = (k[i * n + j] - s) / l[j * n + j];
        }
    }
    let mut alpha = vec![0.0; n];
    for i in 0..n {
        let s: f64 = (0..i).map(|p| l[i * n + p] * alpha[p]).sum();
        alpha[i] = (y[i] - s) / l[i * n + i];
    }
    let quad: f64 = alpha.iter().map(|a| a * a).sum();
    let logdet: f64 = (0..n).map(|i| l[i * n + i].ln()).sum();
    -0.5 * quad - logdet - 0.5 * n as f64 * (2.0 * std::f64::consts::PI).ln()
}

#[test]
fn gaussian_process_marginal_likelihood_and_its_length_scale_gradient() {
    let m = module(GP);
    let n = 12;
    let x: Vec<f64> = (0..n).map(|i| i as f64 * 0.37 - 2.0).collect();
    let y: Vec<f64> = x.iter().map(|t| (1.3 * t).sin() + 0.1 * (7.0 * t).cos()).collect();
    let (xs, ys) = (f64s(&[n], &x), f64s(&[n], &y));
    let lm = |ls: f64| leaves(&run(&m, "log_marginal", &[Tensor::scalar(ls), xs.clone(), ys.clone()]))[0][0];
    for ls in [0.5, 1.0, 2.0] {
        close(&format!("log p(y) at ls={ls}"), &[lm(ls)], &[gp_reference(ls, &x, &y)], 1e-10);
        let g = leaves(&run(&m, "dlog", &[Tensor::scalar(ls), xs.clone(), ys.clone()]))[0][0];
        let h = 1e-5;
        let fd = (lm(ls + h) - lm(ls - h)) / (2.0 * h);
        close(&format!("d log p / d ls at ls={ls}"), &[g], &[fd], 1e-6);
        let fd_ref = (gp_reference(ls + h, &x, &y) - gp_reference(ls - h, &x, &y)) / (2.0 * h);
        close(&format!("against the reference's differences at ls={ls}"), &[g], &[fd_ref], 1e-6);
    }
}

#[test]
fn vmap_over_a_batch_of_matrices() {
    let m = module(
        "def f(a: tensor[b, 2, 2, f64]) -> (tensor[b, 2, 2, f64], tensor[b, f64]) = (vmap(cholesky)(a), vmap(det)(a))\n",
    );
    let a = [4.0, 2.0, 2.0, 3.0, 9.0, 0.0, 0.0, 1.0];
    let o = leaves(&run(&m, "f", &[f64s(&[2, 2, 2], &a)]));
    close("chol", &o[0], &[2.0, 0.0, 1.0, 2f64.sqrt(), 3.0, 0.0, 0.0, 1.0], 1e-15);
    close("det", &o[1], &[8.0, 9.0], 1e-14);
}

#[test]
fn a_matrix_that_is_not_positive_definite_gives_nan() {
    let m = module("def f(a: tensor[2, 2, f64]) -> tensor[2, 2, f64] = cholesky(a)\n");
    let o = leaves(&run(&m, "f", &[f64s(&[2, 2], &[1.0, 2.0, 2.0, 1.0])]));
    assert!(o[0].iter().all(|v| v.is_nan()), "{o:?}");
}

#[test]
fn errors_are_located_and_name_the_builtin() {
    let (msg, at) = error("def f(a: tensor[2, 3, f64]) -> tensor[2, 3, f64] =\n  cholesky(a)\n");
    assert!(msg.contains("cholesky") && msg.contains("square"), "{msg}");
    assert_eq!(at, (2, 3));
    let (msg, _) = error("def f(a: tensor[3, 3, f64], b: tensor[2, f64]) -> tensor[3, f64] = solve(a, b)\n");
    assert!(msg.contains("solve") && msg.contains("f64[2] must have 3 elements"), "{msg}");
    let (msg, _) = error("def f(a: tensor[3, 3, i32]) -> i32 = det(a)\n");
    assert!(msg.contains("det") && msg.contains("floating-point"), "{msg}");
    let (msg, _) = error("def f(a: tensor[3, 3, f64]) -> f64 = norm(a, ord=3)\n");
    assert!(msg.contains("`ord` of `norm`"), "{msg}");
    let (msg, _) = error("def f(a: tensor[3, f64]) -> f64 = norm(a, ord=\"nuc\")\n");
    assert!(msg.contains("norm") && msg.contains("needs a matrix"), "{msg}");
    let (msg, _) = error("def f(a: tensor[3, 3, f64]) -> tensor[3, 3, 3, f64] = diag(a)\n");
    assert!(msg.contains("`diag` needs a vector"), "{msg}");
    let (msg, _) =
        error("def f(a: tensor[3, 3, f64], b: tensor[3, f64]) -> tensor[3, f64] = triangular_solve(a, b, lower=1)\n");
    assert!(msg.contains("`lower` must be `true` or `false`"), "{msg}");
}
