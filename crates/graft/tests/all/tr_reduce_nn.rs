//! The `Tr` API for reductions, softmax, matmul/einsum and the `nn`
//! functions through `jit`, checked against naive references; plus
//! gradients of composites (they expand to primitives, so autodiff applies):
//! relu'(0) = 0, d logsumexp = softmax, d cross_entropy = softmax - onehot.

use graft::{jit, jit_n, nn, ops, DType, Tensor, Tr, Wrt};

fn t64(shape: &[usize], data: &[f64]) -> Tensor {
    Tensor::from_vec(shape.to_vec(), data.to_vec()).unwrap()
}

fn iota(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    t64(shape, &(0..n).map(|i| i as f64 * 0.5 - 1.0).collect::<Vec<_>>())
}

fn call1(f: impl Fn(&Tr) -> Tr, x: &Tensor) -> Tensor {
    jit("f", f).call(&[x]).unwrap().remove(0)
}

fn close(got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "got {got:?}, want {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= tol * (1.0 + w.abs()), "got {got:?}, want {want:?}");
    }
}

#[test]
fn sum_forms_and_axes() {
    let x = iota(&[2, 3]); // [-1, -0.5, 0, 0.5, 1, 1.5]
    assert_eq!(call1(|x| x.sum(()), &x).to_f64_vec(), vec![1.5]);
    assert_eq!(call1(|x| x.sum(None), &x).to_f64_vec(), vec![1.5]);
    assert_eq!(call1(|x| x.sum(-1), &x).to_f64_vec(), vec![-1.5, 3.0]);
    assert_eq!(call1(|x| x.sum(0), &x).to_f64_vec(), vec![-0.5, 0.5, 1.5]);
    assert_eq!(call1(|x| x.sum([0, -1]), &x).shape(), &[] as &[usize]);
    assert_eq!(call1(|x| x.sum_keepdims(-1), &x).shape(), &[2, 1]);
    assert_eq!(call1(|x| x.sum_keepdims(()), &x).shape(), &[1, 1]);
    let e = jit("f", |x: &Tr| x.sum(2)).call(&[&x]).unwrap_err().to_string();
    assert!(e.contains("sum") && e.contains("axis 2 is out of range for rank 2"), "{e}");
    let e = jit("f", |x: &Tr| x.sum([1, -1])).call(&[&x]).unwrap_err().to_string();
    assert!(e.contains("repeated"), "{e}");
}

#[test]
fn other_reductions() {
    let x = iota(&[2, 3]);
    let rows = [[-1.0, -0.5, 0.0], [0.5, 1.0, 1.5]];
    assert_eq!(call1(|x| x.mean(-1), &x).to_f64_vec(), vec![-0.5, 1.0]);
    assert_eq!(call1(|x| x.mean_keepdims(0), &x).shape(), &[1, 3]);
    assert_eq!(call1(|x| x.max(1), &x).to_f64_vec(), vec![0.0, 1.5]);
    assert_eq!(call1(|x| x.max_keepdims(()), &x).to_f64_vec(), vec![1.5]);
    assert_eq!(call1(|x| x.min(()), &x).to_f64_vec(), vec![-1.0]);
    assert_eq!(call1(|x| x.min_keepdims(0), &x).to_f64_vec(), vec![-1.0, -0.5, 0.0]);
    assert_eq!(call1(|x| x.prod(1), &x).to_f64_vec(), vec![0.0, 0.75]);
    assert_eq!(call1(|x| x.prod_keepdims(0), &x).to_f64_vec(), vec![-0.5, -0.5, 0.0]);
    let var1: Vec<f64> = rows
        .iter()
        .map(|r| {
            let m = r.iter().sum::<f64>() / 3.0;
            r.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / 2.0
        })
        .collect();
    close(&call1(|x| x.var(-1, 1), &x).to_f64_vec(), &var1, 1e-15);
    close(&call1(|x| x.std(-1, 1), &x).to_f64_vec(), &var1.iter().map(|v| v.sqrt()).collect::<Vec<_>>(), 1e-15);
    assert_eq!(call1(|x| x.var_keepdims((), 0), &x).shape(), &[1, 1]);
    let am = call1(|x| x.argmax(-1), &x);
    assert_eq!(am.dtype(), DType::I32);
    assert_eq!(am.to_vec::<i32>().unwrap(), vec![2, 2]);
    assert_eq!(call1(|x| x.argmin(0), &x).to_vec::<i32>().unwrap(), vec![0, 0, 0]);
    assert_eq!(call1(|x| x.argmax_keepdims(0), &x).shape(), &[1, 3]);
    assert_eq!(call1(|x| x.argmin_keepdims(-1), &x).to_vec::<i32>().unwrap(), vec![0, 0]);
    let lse: Vec<f64> = rows.iter().map(|r| r.iter().map(|v: &f64| v.exp()).sum::<f64>().ln()).collect();
    close(&call1(|x| x.logsumexp(-1), &x).to_f64_vec(), &lse, 1e-15);
    assert_eq!(call1(|x| x.logsumexp_keepdims(-1), &x).shape(), &[2, 1]);
}

#[test]
fn softmax_methods() {
    let x = t64(&[2, 2], &[1000.0, 1001.0, -3.0, -3.0]);
    let s = call1(|x| x.softmax(-1), &x).to_f64_vec();
    let e = 1.0 / (1.0 + (-1f64).exp());
    close(&s, &[1.0 - e, e, 0.5, 0.5], 1e-15);
    let l = call1(|x| x.log_softmax(1), &x).to_f64_vec();
    close(&l, &[(1.0 - e).ln(), e.ln(), -(2f64.ln()), -(2f64.ln())], 1e-14);
    let s0 = call1(|x| x.softmax(-2), &x).to_f64_vec();
    assert!(s0.iter().all(|v| v.is_finite()));
    close(&[s0[0] + s0[2]], &[1.0], 1e-15);
    assert!(call1(|x| nn::softmax(x, -1), &x).to_f64_vec() == s);
    assert!(call1(|x| nn::log_softmax(x, -1), &x).to_f64_vec() == l);
    let err = jit("f", |x: &Tr| x.softmax(-3)).call(&[&x]).unwrap_err().to_string();
    assert!(err.contains("softmax") && err.contains("axis -3"), "{err}");
}

#[test]
fn matmul_and_einsum() {
    let a = iota(&[2, 3]);
    let b = iota(&[3, 2]);
    let f = jit_n("mm", |v: &[Tr]| v[0].matmul(&v[1]));
    let y = f.call(&[&a, &b]).unwrap().remove(0);
    let (ad, bd) = (a.to_f64_vec(), b.to_f64_vec());
    let want: Vec<f64> = (0..4).map(|t| (0..3).map(|k| ad[(t / 2) * 3 + k] * bd[k * 2 + t % 2]).sum()).collect();
    assert_eq!(y.shape(), &[2, 2]);
    close(&y.to_f64_vec(), &want, 1e-15);
    let g = jit_n("es", |v: &[Tr]| ops::einsum("ij,jk", &[&v[0], &v[1]]));
    close(&g.call(&[&a, &b]).unwrap()[0].to_f64_vec(), &want, 1e-15);
    let h = jit_n("mm2", |v: &[Tr]| ops::matmul(&v[0], &v[1]));
    close(&h.call(&[&a, &b]).unwrap()[0].to_f64_vec(), &want, 1e-15);
    let err = f.call(&[&a, &a]).unwrap_err().to_string();
    assert!(err.contains("matmul") && err.contains("contraction"), "{err}");
    let err = g.call(&[&a, &a]).unwrap_err().to_string();
    assert!(err.contains("einsum") && err.contains("index 'j'"), "{err}");
}

#[test]
fn nn_layers_and_losses() {
    let x = iota(&[2, 3]);
    let w = iota(&[4, 3]);
    let bias = t64(&[4], &[0.1, 0.2, 0.3, 0.4]);
    let f = jit_n("lin", |v: &[Tr]| nn::linear(&v[0], &v[1], Some(&v[2])));
    let y = f.call(&[&x, &w, &bias]).unwrap().remove(0);
    let (xd, wd) = (x.to_f64_vec(), w.to_f64_vec());
    let want: Vec<f64> = (0..8)
        .map(|t| 0.1 * (t % 4 + 1) as f64 + (0..3).map(|i| xd[(t / 4) * 3 + i] * wd[(t % 4) * 3 + i]).sum::<f64>())
        .collect();
    close(&y.to_f64_vec(), &want, 1e-15);
    let f = jit_n("lin_nb", |v: &[Tr]| nn::linear(&v[0], &v[1], None));
    assert_eq!(f.call(&[&x, &w]).unwrap()[0].shape(), &[2, 4]);

    // layer_norm: gamma ones, beta zeros -> zero mean, unit variance rows.
    let f = jit_n("ln", |v: &[Tr]| {
        nn::layer_norm(&v[0], &v[0].ones(&[3], DType::F64), Some(&v[0].zeros(&[3], DType::F64)), 0.0)
    });
    let y = f.call(&[&x]).unwrap()[0].to_f64_vec();
    let r = 1.5f64.sqrt();
    close(&y, &[-r, 0.0, r, -r, 0.0, r], 1e-12);
    let f = jit_n("norm", |v: &[Tr]| nn::normalize(&v[0], -1, 0.0));
    close(&f.call(&[&x]).unwrap()[0].to_f64_vec(), &[-r, 0.0, r, -r, 0.0, r], 1e-12);

    // batch_norm on [N=2, C=3]: statistics per column.
    let f = jit_n("bn", |v: &[Tr]| {
        let (y, m, var) = nn::batch_norm(&v[0], None, None, None, 0.0);
        (y, m, var)
    });
    let out = f.call(&[&x]).unwrap();
    close(&out[0].to_f64_vec(), &[-1.0, -1.0, -1.0, 1.0, 1.0, 1.0], 1e-12);
    close(&out[1].to_f64_vec(), &[-0.25, 0.25, 0.75], 1e-15);
    close(&out[2].to_f64_vec(), &[0.5625, 0.5625, 0.5625], 1e-15);
    let f = jit_n("bn_affine", |v: &[Tr]| {
        let (y, _, _) = nn::batch_norm(&v[0], Some(&v[1]), Some(&v[2]), Some(graft::Axes::from(0)), 0.0);
        y
    });
    let g = t64(&[3], &[2.0, 2.0, 2.0]);
    let be = t64(&[3], &[1.0, 1.0, 1.0]);
    close(&f.call(&[&x, &g, &be]).unwrap()[0].to_f64_vec(), &[-1.0, -1.0, -1.0, 3.0, 3.0, 3.0], 1e-12);

    // losses
    let p = t64(&[3], &[1.0, 2.0, 3.0]);
    let t = t64(&[3], &[1.0, 0.0, 0.0]);
    let f = jit_n("mse", |v: &[Tr]| nn::mse(&v[0], &v[1]));
    close(&f.call(&[&p, &t]).unwrap()[0].to_f64_vec(), &[13.0 / 3.0], 1e-15);
    let f = jit_n("bce", |v: &[Tr]| nn::binary_cross_entropy_with_logits(&v[0], &v[1]));
    let want = p.to_f64_vec().iter().zip(t.to_f64_vec()).map(|(x, y)| (1.0 + x.exp()).ln() - x * y).sum::<f64>() / 3.0;
    close(&f.call(&[&p, &t]).unwrap()[0].to_f64_vec(), &[want], 1e-14);
    let logits = t64(&[2, 3], &[1.0, 2.0, 3.0, 0.0, 0.0, 0.0]);
    let labels = Tensor::from_vec(vec![2], vec![2i32, 1]).unwrap();
    let f = jit_n("ce", |v: &[Tr]| nn::cross_entropy(&v[0], &v[1], -1));
    let lse0 = (1f64.exp() + 2f64.exp() + 3f64.exp()).ln();
    let want = ((lse0 - 3.0) + 3f64.ln()) / 2.0;
    close(&f.call(&[&logits, &labels]).unwrap()[0].to_f64_vec(), &[want], 1e-14);
    let err = f.call(&[&logits, &t64(&[2], &[0.0, 1.0])]).unwrap_err().to_string();
    assert!(err.contains("cross_entropy") && err.contains("labels"), "{err}");
}

#[test]
fn attention_api() {
    let q = iota(&[1, 2, 4]);
    let f = jit_n("sdpa", |v: &[Tr]| nn::scaled_dot_product_attention(&v[0], &v[0], &v[0], true, None, None));
    let y = f.call(&[&q]).unwrap()[0].to_f64_vec();
    // Causal: the first query attends only to the first key, so it returns v[0].
    close(&y[..4], &q.to_f64_vec()[..4], 1e-15);
    let eye = Tensor::from_vec(vec![4, 4], (0..16).map(|i| if i % 5 == 0 { 1.0 } else { 0.0 }).collect::<Vec<f64>>())
        .unwrap();
    let f = jit_n("mha", |v: &[Tr]| {
        nn::multi_head_attention(&v[0], &v[0], &v[0], &v[1], &v[1], &v[1], &v[1], 2, true, None)
    });
    let y = f.call(&[&q, &eye]).unwrap()[0].to_f64_vec();
    // Identity projections: the first position still returns itself.
    close(&y[..4], &q.to_f64_vec()[..4], 1e-15);
    let f = jit_n("mha_bad", |v: &[Tr]| {
        nn::multi_head_attention(&v[0], &v[0], &v[0], &v[1], &v[1], &v[1], &v[1], 3, false, None)
    });
    assert!(f.call(&[&q, &eye]).unwrap_err().to_string().contains("n_heads = 3"));
}

#[test]
fn composites_differentiate() {
    // relu'(0) = 0 (JAX convention), relu'(x>0) = 1.
    let f = jit("r", |x: &Tr| x.relu().sum(())).grad(Wrt::All);
    let g = f.call(&[&t64(&[3], &[-1.0, 0.0, 2.0])]).unwrap();
    assert_eq!(g[0].to_f64_vec(), vec![0.0, 0.0, 1.0]);
    // d logsumexp / dx = softmax(x), also on huge inputs.
    let x = t64(&[3], &[1000.0, 1001.0, 999.0]);
    let g = jit("lse", |x: &Tr| x.logsumexp(())).grad(Wrt::All).call(&[&x]).unwrap();
    let s = call1(|x| x.softmax(0), &x).to_f64_vec();
    close(&g[0].to_f64_vec(), &s, 1e-14);
    // d cross_entropy / d logits = (softmax - onehot) / batch.
    let logits = t64(&[2, 3], &[1.0, 2.0, 3.0, 0.0, 0.5, -0.5]);
    let labels = Tensor::from_vec(vec![2], vec![0i32, 2]).unwrap();
    let f = jit_n("ce", |v: &[Tr]| nn::cross_entropy(&v[0], &v[1], -1)).grad(Wrt::Positions(vec![0]));
    let g = f.call(&[&logits, &labels]).unwrap()[0].to_f64_vec();
    let sm = call1(|x| x.softmax(-1), &logits).to_f64_vec();
    let want: Vec<f64> = (0..6).map(|i| (sm[i] - if i == 0 || i == 5 { 1.0 } else { 0.0 }) / 2.0).collect();
    close(&g, &want, 1e-14);
    // einsum's gradient equals matmul's.
    let a = iota(&[2, 3]);
    let b = iota(&[3, 4]);
    let ge = jit_n("e", |v: &[Tr]| ops::einsum("ij,jk->", &[&v[0], &v[1]])).grad(Wrt::All).call(&[&a, &b]).unwrap();
    let gm = jit_n("m", |v: &[Tr]| v[0].matmul(&v[1]).sum(())).grad(Wrt::All).call(&[&a, &b]).unwrap();
    close(&ge[0].to_f64_vec(), &gm[0].to_f64_vec(), 1e-14);
    close(&ge[1].to_f64_vec(), &gm[1].to_f64_vec(), 1e-14);
}
