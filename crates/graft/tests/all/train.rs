//! End-to-end training through the `Jit` API: a 4-16-3 tanh MLP with
//! softmax cross-entropy, trained by plain gradient descent with
//! `Jit::value_and_grad` on a deterministic synthetic problem; the
//! `grad(loss_fn, wrt=(w, b))` example with hand-computed gradients; and
//! `grad(grad(f))`.

use graft::{jit, jit_n, nn, Tensor, Tr, Wrt};

fn t64(shape: &[usize], data: Vec<f64>) -> Tensor {
    Tensor::from_vec(shape.to_vec(), data).unwrap()
}

/// Deterministic pseudo-random numbers in [-1, 1) (SplitMix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        2.0 * ((z >> 11) as f64 / (1u64 << 53) as f64) - 1.0
    }
    fn vec(&mut self, n: usize, scale: f64) -> Vec<f64> {
        (0..n).map(|_| scale * self.next()).collect()
    }
}

/// Three well-separated clusters in 4-D: class `c` is centred on
/// `2 * e_c` (and `-2 * e_3` gives class 2 a second coordinate), with noise
/// of amplitude 0.4.
fn dataset(n: usize) -> (Tensor, Tensor) {
    let mut rng = Rng(2024);
    let centres = [[2.0, 0.0, 0.0, 0.0], [0.0, 2.0, 0.0, 0.0], [0.0, 0.0, 2.0, -2.0]];
    let mut xs = Vec::with_capacity(n * 4);
    let mut ys = Vec::with_capacity(n);
    for i in 0..n {
        let c = i % 3;
        for centre in centres[c] {
            xs.push(centre + 0.4 * rng.next());
        }
        ys.push(c as i32);
    }
    (t64(&[n, 4], xs), Tensor::from_vec(vec![n], ys).unwrap())
}

fn mlp_loss(v: &[Tr]) -> Tr {
    // v = [w1, b1, w2, b2, x, labels]
    let h = nn::linear(&v[4], &v[0], Some(&v[1])).tanh();
    let logits = nn::linear(&h, &v[2], Some(&v[3]));
    nn::cross_entropy(&logits, &v[5], -1)
}

#[test]
fn mlp_trains_by_gradient_descent() {
    let (x, labels) = dataset(60);
    let mut rng = Rng(7);
    let mut params = [
        t64(&[16, 4], rng.vec(64, 0.5)),
        t64(&[16], vec![0.0; 16]),
        t64(&[3, 16], rng.vec(48, 0.25)),
        t64(&[3], vec![0.0; 3]),
    ];
    let step = jit_n("mlp_loss", mlp_loss).value_and_grad(Wrt::Positions(vec![0, 1, 2, 3]));
    let lr = 0.5;
    let mut losses = Vec::new();
    for _ in 0..300 {
        let out = {
            let mut ins: Vec<&Tensor> = params.iter().collect();
            ins.push(&x);
            ins.push(&labels);
            step.call(&ins).unwrap()
        };
        assert_eq!(out.len(), 5, "value and four gradients");
        losses.push(out[0].to_scalar_f64().unwrap());
        for (p, g) in params.iter_mut().zip(&out[1..]) {
            assert_eq!(g.shape(), p.shape(), "gradient has its parameter's shape");
            let (pv, gv) = (p.to_f64_vec(), g.to_f64_vec());
            let new: Vec<f64> = pv.iter().zip(&gv).map(|(a, d)| a - lr * d).collect();
            *p = t64(p.shape(), new);
        }
    }
    let (first, last) = (losses[0], *losses.last().unwrap());
    // Near-zero output weights give almost uniform predictions at the start.
    assert!((first - 3f64.ln()).abs() < 0.2, "initial loss {first}");
    assert!(last < 0.1, "final loss {last} (initial {first})");
    assert!(last < first / 5.0, "final loss {last} vs initial {first}");
    assert!(losses.iter().all(|l| l.is_finite()));
    // The trained network classifies every training point correctly.
    let predict = jit_n("logits", |v: &[Tr]| {
        let h = nn::linear(&v[4], &v[0], Some(&v[1])).tanh();
        nn::linear(&h, &v[2], Some(&v[3]))
    });
    let mut ins: Vec<&Tensor> = params.iter().collect();
    ins.push(&x);
    let logits = predict.call(&ins).unwrap().remove(0).to_f64_vec();
    let lab = labels.to_f64_vec();
    for (i, row) in logits.chunks(3).enumerate() {
        let arg = (0..3).max_by(|&a, &b| row[a].total_cmp(&row[b])).unwrap();
        assert_eq!(arg as f64, lab[i], "sample {i}: logits {row:?}");
    }
}

/// `loss_fn(w, b) = mean((x @ w + b - y)^2)`; `grad(loss_fn, wrt=(w, b))`
/// returns `(dw, db)` in that order.
#[test]
fn grad_wrt_w_and_b_in_order() {
    let loss_fn = jit_n("loss_fn", |v: &[Tr]| {
        // v = [w, b, x, y]
        let pred = v[2].matmul(&v[0]) + &v[1];
        (pred - &v[3]).square().mean(())
    });
    let w = t64(&[3], vec![0.1, 0.2, 0.3]);
    let b = Tensor::scalar(0.5f64);
    let x = t64(&[2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let y = t64(&[2], vec![1.0, 2.0]);
    let ins = [&w, &b, &x, &y];
    // pred = [1.9, 3.7], residual r = [0.9, 1.7], loss = (0.81 + 2.89) / 2.
    let l = loss_fn.call(&ins).unwrap()[0].to_scalar_f64().unwrap();
    assert!((l - 1.85).abs() < 1e-12, "loss {l}");
    // d loss / d pred = 2 r / 2 = r; dw = x^T r; db = sum(r).
    let g = loss_fn.grad(Wrt::Positions(vec![0, 1])).call(&ins).unwrap();
    assert_eq!(g.len(), 2);
    assert_eq!(g[0].shape(), &[3]);
    assert_eq!(g[1].shape(), &[] as &[usize]);
    let dw = g[0].to_f64_vec();
    let want_dw = [1.0 * 0.9 + 4.0 * 1.7, 2.0 * 0.9 + 5.0 * 1.7, 3.0 * 0.9 + 6.0 * 1.7];
    for (got, want) in dw.iter().zip(want_dw) {
        assert!((got - want).abs() < 1e-12, "dw {dw:?} vs {want_dw:?}");
    }
    let db = g[1].to_scalar_f64().unwrap();
    assert!((db - 2.6).abs() < 1e-12, "db {db}");
    // The other order gives (db, dw).
    let g = loss_fn.grad(Wrt::Positions(vec![1, 0])).call(&ins).unwrap();
    assert!((g[0].to_scalar_f64().unwrap() - 2.6).abs() < 1e-12);
    assert_eq!(g[1].shape(), &[3]);
    // value_and_grad: the value first, then the gradients.
    let vg = loss_fn.value_and_grad(Wrt::Positions(vec![0, 1])).call(&ins).unwrap();
    assert!((vg[0].to_scalar_f64().unwrap() - 1.85).abs() < 1e-12);
    assert_eq!(vg[1].to_f64_vec(), dw);
}

#[test]
fn grad_of_grad() {
    // f(x) = x^3: f'' = 6x.
    let f = jit("cube", |x: &Tr| x * x * x);
    let d2 = f.grad(Wrt::All).grad(Wrt::All);
    for x in [-1.5, 0.0, 2.0] {
        let got = d2.call(&[&Tensor::scalar(x)]).unwrap()[0].to_scalar_f64().unwrap();
        assert!((got - 6.0 * x).abs() < 1e-12, "f''({x}) = {got}");
    }
    // f(x) = x sin x: f' = sin x + x cos x, f'' = 2 cos x - x sin x, f''' = -3 sin x - x cos x.
    let g = jit("xsinx", |x: &Tr| x.sin() * x);
    let x = 0.7f64;
    let xt = Tensor::scalar(x);
    let d1 = g.grad(Wrt::All).call(&[&xt]).unwrap()[0].to_scalar_f64().unwrap();
    assert!((d1 - (x.sin() + x * x.cos())).abs() < 1e-12);
    let d2 = g.grad(Wrt::All).grad(Wrt::All).call(&[&xt]).unwrap()[0].to_scalar_f64().unwrap();
    assert!((d2 - (2.0 * x.cos() - x * x.sin())).abs() < 1e-12, "f'' = {d2}");
    let d3 = g.grad(Wrt::All).grad(Wrt::All).grad(Wrt::All).call(&[&xt]).unwrap()[0].to_scalar_f64().unwrap();
    assert!((d3 - (-3.0 * x.sin() - x * x.cos())).abs() < 1e-12, "f''' = {d3}");
    // The Hessian-vector-free case with two inputs: d/dy of d/dx (x^2 y^3) = 6 x y^2.
    let h = jit_n("xy", |v: &[Tr]| &v[0] * &v[0] * &v[1] * &v[1] * &v[1]);
    let dxdy = h.grad(Wrt::Positions(vec![0])).grad(Wrt::Positions(vec![1]));
    let got = dxdy.call(&[&Tensor::scalar(1.5f64), &Tensor::scalar(-2.0f64)]).unwrap()[0].to_scalar_f64().unwrap();
    assert!((got - 6.0 * 1.5 * 4.0).abs() < 1e-12, "d2/dxdy = {got}");
}
