//! The spectral linear-algebra builtins (`qr`, `eigh`, `eigvalsh`, `svd`,
//! `svdvals`, `pinv`, `lstsq`, `matrix_norm`, `matrix_rank`, `cond`, and
//! `norm`'s matrix orders): values by their defining properties and hand
//! cases, tuple results and options, derivatives through the language
//! against central differences, vmap, and located diagnostics.

use crate::common::{check_error as error, close, f64s, leaf_values as leaves, module, run};

/// Row-major `[n, k] x [k, p]`.
fn mm(x: &[f64], y: &[f64], n: usize, k: usize, p: usize) -> Vec<f64> {
    (0..n * p).map(|ij| (0..k).map(|q| x[ij / p * k + q] * y[q * p + ij % p]).sum()).collect()
}

const A: [f64; 12] = [2.0, -1.0, 0.5, 1.0, 3.0, -2.0, 0.0, 1.5, 1.0, -0.5, 2.5, 0.3]; // [4, 3]

#[test]
fn decompositions_reconstruct_their_operands() {
    let m = module(
        "def main(a: tensor[4, 3, f64]) {\n\
           let (q, r) = qr(a)\n\
           let (qc, rc) = qr(a, mode=\"complete\")\n\
           let s = transpose(a) @ a\n\
           let (w, v) = eigh(s)\n\
           let (u, sv, vh) = svd(a)\n\
           let (uf, sf, vhf) = svd(a, full_matrices=true)\n\
           (q @ r, transpose(q) @ q, qc @ rc, transpose(qc) @ qc, qr(a, mode=\"r\") - r,\n\
            v @ (diag(w) @ transpose(v)), w - eigvalsh(s), (u * sv) @ vh, sv - svd(a, compute_uv=false),\n\
            sv - svdvals(a), uf @ transpose(uf), sf, vhf)\n\
         }\n",
    );
    let o = leaves(&run(&m, "main", &[f64s(&[4, 3], &A)]));
    let eye = |n: usize| (0..n * n).map(|k| if k % (n + 1) == 0 { 1.0 } else { 0.0 }).collect::<Vec<f64>>();
    close("q r", &o[0], &A, 1e-14);
    close("q^T q", &o[1], &eye(3), 1e-14);
    close("complete q r", &o[2], &A, 1e-14);
    close("complete q^T q", &o[3], &eye(4), 1e-14);
    close("mode r", &o[4], &[0.0; 9], 0.0);
    let ata = mm(&(0..12).map(|k| A[(k % 4) * 3 + k / 4]).collect::<Vec<_>>(), &A, 3, 4, 3);
    close("v diag(w) v^T", &o[5], &ata, 1e-13);
    close("eigvalsh", &o[6], &[0.0; 3], 0.0);
    close("u s vh", &o[7], &A, 1e-14);
    close("compute_uv=false", &o[8], &[0.0; 3], 0.0);
    close("svdvals", &o[9], &[0.0; 3], 0.0);
    close("full u u^T", &o[10], &eye(4), 1e-14);
    assert_eq!(o[11].len(), 3);
    assert_eq!(o[12].len(), 9, "full vh is [3, 3]");
}

#[test]
fn hand_cases_and_the_svd_composites() {
    let m = module(
        "def main() {\n\
           let d: tensor[2, 2, f64] = [[3.0, 0.0], [0.0, -2.0]]\n\
           (eigh([[2.0, 1.0], [1.0, 2.0]]).0, svdvals(d), pinv(d), matrix_rank([[1.0, 2.0], [2.0, 4.0]]),\n\
            cond(d), cond(d, p=\"inf\"), matrix_norm(d), matrix_norm(d, ord=\"nuc\"), matrix_norm(d, ord=2),\n\
            matrix_norm(d, ord=-2), norm(d, ord=2), norm(d, ord=\"nuc\"), norm([1.0, 2.0], ord=-1),\n\
            lstsq(d, [3.0, 4.0]))\n\
         }\n",
    );
    let o = leaves(&run(&m, "main", &[]));
    close("eigh", &o[0], &[1.0, 3.0], 1e-6);
    close("svdvals", &o[1], &[3.0, 2.0], 1e-15);
    close("pinv", &o[2], &[1.0 / 3.0, 0.0, 0.0, -0.5], 1e-15);
    assert_eq!(o[3], vec![1.0]);
    close("cond", &o[4], &[1.5], 1e-15);
    close("cond inf", &o[5], &[1.5], 1e-15);
    close("fro", &o[6], &[13f64.sqrt()], 1e-15);
    close("nuc", &o[7], &[5.0], 1e-15);
    close("2", &o[8], &[3.0], 1e-15);
    close("-2", &o[9], &[2.0], 1e-15);
    close("norm 2", &o[10], &[3.0], 1e-15);
    close("norm nuc", &o[11], &[5.0], 1e-15);
    close("norm -1", &o[12], &[2.0 / 3.0], 1e-6);
    // lstsq: (x, resid, rank, s)
    close("lstsq x", &o[13], &[1.0, -2.0], 1e-15);
    close("lstsq resid", &o[14], &[0.0], 1e-15);
    assert_eq!(o[15], vec![2.0]);
    close("lstsq s", &o[16], &[3.0, 2.0], 1e-15);
}

#[test]
fn derivatives_through_the_builtins_match_finite_differences() {
    let m = module(
        "def f(a: tensor[4, 3, f64]) -> f64 {\n\
           let (q, r) = qr(a)\n\
           let (u, s, vh) = svd(a)\n\
           let (w, v) = eigh(transpose(a) @ a)\n\
           sum(q * q * 0.3) + sum(r) + sum(s * [1.0, 2.0, 3.0]) + sum(u * u * 0.2) + sum(w * [0.1, 0.2, 0.4]) +\n\
             sum(v * v) + sum(pinv(a)) + sum(lstsq(a, [1.0, 2.0, 0.0, -1.0]).0) + matrix_norm(a, ord=\"nuc\") +\n\
             matrix_norm(a, ord=2) + cond(a)\n\
         }\n\
         def g(a: tensor[4, 3, f64]) -> tensor[4, 3, f64] = grad(f)(a)\n",
    );
    let g = leaves(&run(&m, "g", &[f64s(&[4, 3], &A)]))[0].clone();
    let f = |a: &[f64]| leaves(&run(&m, "f", &[f64s(&[4, 3], a)]))[0][0];
    let h = 1e-6;
    for k in 0..12 {
        let (mut p, mut q) = (A.to_vec(), A.to_vec());
        p[k] += h;
        q[k] -= h;
        let fd = (f(&p) - f(&q)) / (2.0 * h);
        close(&format!("d/da[{k}]"), &[g[k]], &[fd], 1e-6);
    }
}

#[test]
fn vmap_over_a_batch_of_matrices_equals_each_matrix() {
    let m = module(
        "def one(a: tensor[3, 3, f64]) -> (tensor[3, f64], tensor[3, f64], tensor[3, 3, f64]) {\n\
           let (w, v) = eigh(a)\n\
           (w, svdvals(a), qr(a).1)\n\
         }\n\
         def many(a: tensor[b, 3, 3, f64]) -> (tensor[b, 3, f64], tensor[b, 3, f64], tensor[b, 3, 3, f64]) = vmap(one)(a)\n",
    );
    let a: Vec<f64> = (0..18).map(|k| ((k * 7 % 11) as f64 - 5.0) / 3.0).collect();
    let all = leaves(&run(&m, "many", &[f64s(&[2, 3, 3], &a)]));
    for i in 0..2 {
        let one = leaves(&run(&m, "one", &[f64s(&[3, 3], &a[i * 9..(i + 1) * 9])]));
        close("eigh", &all[0][i * 3..(i + 1) * 3], &one[0], 0.0);
        close("svdvals", &all[1][i * 3..(i + 1) * 3], &one[1], 0.0);
        close("qr r", &all[2][i * 9..(i + 1) * 9], &one[2], 0.0);
    }
}

#[test]
fn options_reach_the_core() {
    let m = module(
        "def main() {\n\
           let lower: tensor[2, 2, f64] = [[2.0, 100.0], [1.0, 2.0]]\n\
           let d: tensor[2, 2, f64] = [[1.0, 0.0], [0.0, 1e-3]]\n\
           (eigh(lower, symmetrize_input=false).0, eigh(lower).0, pinv(d), pinv(d, rtol=1e-2), lstsq(d, [1.0, 1.0], rcond=1e-2).0,\n\
            matrix_rank(d), matrix_rank(d, rtol=1e-2), cond(d, p=-2), matrix_norm(d, ord=\"-inf\"))\n\
         }\n",
    );
    let o = leaves(&run(&m, "main", &[]));
    close("UPLO=L", &o[0], &[1.0, 3.0], 1e-15);
    close("symmetrized", &o[1], &[2.0 - 50.5, 2.0 + 50.5], 1e-15);
    close("pinv", &o[2], &[1.0, 0.0, 0.0, 1e3], 1e-12);
    close("pinv rtol", &o[3], &[1.0, 0.0, 0.0, 0.0], 0.0);
    close("lstsq rcond", &o[4], &[1.0, 0.0], 0.0);
    assert_eq!(o[5], vec![2.0]);
    assert_eq!(o[6], vec![1.0]);
    close("cond -2", &o[7], &[1e-3], 1e-15);
    close("-inf", &o[8], &[1e-3], 1e-15);
}

#[test]
fn errors_are_located_and_name_the_builtin() {
    let (msg, at) = error("def f(a: tensor[2, 3, f64]) -> tensor[2, f64] =\n  eigh(a).0\n");
    assert!(msg.contains("eigh") && msg.contains("square"), "{msg}");
    assert_eq!(at, (2, 3));
    let (msg, _) = error("def f(a: tensor[3, 3, f64]) -> tensor[3, 3, f64] = qr(a, mode=\"full\").0\n");
    assert!(msg.contains("`mode` of `qr`"), "{msg}");
    let (msg, _) = error("def f(a: tensor[3, f64]) -> tensor[3, f64] = svdvals(a)\n");
    assert!(msg.contains("svdvals") && msg.contains("matrix"), "{msg}");
    let (msg, _) = error("def f(a: tensor[3, 2, f64], b: tensor[2, f64]) -> tensor[2, f64] = lstsq(a, b).0\n");
    assert!(msg.contains("lstsq") && msg.contains("must have 3 elements"), "{msg}");
    let (msg, _) = error("def f(a: tensor[3, 3, f64]) -> f64 = matrix_norm(a, ord=3)\n");
    assert!(msg.contains("`ord` of `matrix_norm`"), "{msg}");
    let (msg, _) = error("def f(a: tensor[3, 2, f64]) -> f64 = cond(a, p=1)\n");
    assert!(msg.contains("cond") && msg.contains("square"), "{msg}");
    let (msg, _) = error("def f(a: tensor[3, 3, f64]) -> tensor[3, 3, f64] = pinv(a, rtol=a)\n");
    assert!(msg.contains("`rtol` must be a number"), "{msg}");
}
