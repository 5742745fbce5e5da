//! `Jit::vmap` / `Jit::vmap_axis` through the public API: results equal the
//! per-example loop, composition with grad/jvp/vjp in both orders, nested
//! vmap, calling a vmapped function inside another trace (gradient of the
//! sum over the batch), caching per batch size, and error values.

use graft::{jit, jit_n, Error, Tensor, Tr, Wrt};

fn t64(shape: &[usize], data: Vec<f64>) -> Tensor {
    Tensor::from_vec(shape.to_vec(), data).unwrap()
}

/// Deterministic values in [-1, 1).
fn vals(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        })
        .collect()
}

/// Row `i` of a rank >= 1 tensor along `axis`.
fn take(t: &Tensor, axis: usize, i: usize) -> Tensor {
    let shape = t.shape().to_vec();
    let inner: usize = shape[axis + 1..].iter().product();
    let n = shape[axis];
    let mut out = shape.clone();
    out.remove(axis);
    let v = t.to_f64_vec();
    let numel: usize = out.iter().product();
    let data: Vec<f64> = (0..numel).map(|k| v[(k / inner * n + i) * inner + k % inner]).collect();
    t64(&out, data)
}

fn close(a: &Tensor, b: &Tensor, what: &str) {
    assert_eq!(a.shape(), b.shape(), "{what}: shapes");
    for (k, (x, y)) in a.to_f64_vec().iter().zip(b.to_f64_vec()).enumerate() {
        assert!((x - y).abs() <= 1e-12 * y.abs().max(1.0), "{what}: element {k}: {x} vs {y}");
    }
}

/// Per-example loss of a 2-layer tanh MLP: v = [w1 [h, d], w2 [o, h], x [d], y [o]].
fn mlp(v: &[Tr]) -> Tr {
    let h = v[0].matmul(&v[2]).tanh();
    let o = v[1].matmul(&h);
    let e = o - &v[3];
    (&e * &e).sum(())
}

fn mlp_data(n: usize) -> [Tensor; 4] {
    let (d, h, o) = (4, 5, 3);
    [
        t64(&[h, d], vals(h * d, 1)),
        t64(&[o, h], vals(o * h, 2)),
        t64(&[n, d], vals(n * d, 3)),
        t64(&[n, o], vals(n * o, 4)),
    ]
}

#[test]
fn vmap_axis_equals_per_example_loop_and_shares_scalars() {
    // f(x, s) = sum(sin(x) * s) per row; s is rank 0, so shared.
    let f = jit_n("f", |v| (v[0].sin() * &v[1]).sum(()));
    let vf = f.vmap_axis(0);
    let xs = t64(&[5, 3], vals(15, 9));
    let s = Tensor::scalar(1.5f64);
    let got = vf.call(&[&xs, &s]).unwrap().remove(0);
    assert_eq!(got.shape(), &[5]);
    for i in 0..5 {
        let want = f.call(&[&take(&xs, 0, i), &s]).unwrap().remove(0);
        close(&take(&got, 0, i), &want, &format!("row {i}"));
    }
    // Axis -1: examples are columns of a [3, 5] input; outputs batch last too.
    let g = jit("g", |x| x.exp());
    let cols = t64(&[3, 5], vals(15, 10));
    let got = g.vmap_axis(-1).call(&[&cols]).unwrap().remove(0);
    assert_eq!(got.shape(), &[3, 5]);
    for j in 0..5 {
        close(&take(&got, 1, j), &g.call(&[&take(&cols, 1, j)]).unwrap()[0], &format!("column {j}"));
    }
}

#[test]
fn per_example_gradients_grad_then_vmap() {
    let n = 6;
    let loss = jit_n("mlp", mlp);
    let per_example = loss.grad(Wrt::Positions(vec![0, 1])).vmap(&[None, None, Some(0), Some(0)], &[Some(0), Some(-1)]);
    let [w1, w2, xs, ys] = mlp_data(n);
    let g = per_example.call(&[&w1, &w2, &xs, &ys]).unwrap();
    assert_eq!(g[0].shape(), &[n, 5, 4]);
    assert_eq!(g[1].shape(), &[3, 5, n], "out_axes -1 puts the batch last");
    let single = loss.grad(Wrt::Positions(vec![0, 1]));
    for i in 0..n {
        let want = single.call(&[&w1, &w2, &take(&xs, 0, i), &take(&ys, 0, i)]).unwrap();
        close(&take(&g[0], 0, i), &want[0], &format!("dw1 of example {i}"));
        close(&take(&g[1], 2, i), &want[1], &format!("dw2 of example {i}"));
    }
}

#[test]
fn vmap_then_grad_through_apply_is_the_gradient_of_the_sum() {
    let n = 5;
    let batched = jit_n("mlp", mlp).vmap(&[None, None, Some(0), Some(0)], &[Some(0)]);
    let total = jit_n("total", |v| batched.apply(v)[0].sum(()));
    let g = total.grad(Wrt::Positions(vec![0, 1]));
    let [w1, w2, xs, ys] = mlp_data(n);
    let got = g.call(&[&w1, &w2, &xs, &ys]).unwrap();
    let single = jit_n("mlp", mlp).grad(Wrt::Positions(vec![0, 1]));
    let mut want = [vec![0.0; 20], vec![0.0; 15]];
    for i in 0..n {
        let gi = single.call(&[&w1, &w2, &take(&xs, 0, i), &take(&ys, 0, i)]).unwrap();
        for (w, t) in want.iter_mut().zip(&gi) {
            for (a, b) in w.iter_mut().zip(t.to_f64_vec()) {
                *a += b;
            }
        }
    }
    close(&got[0], &t64(&[5, 4], want[0].clone()), "sum of dw1");
    close(&got[1], &t64(&[3, 5], want[1].clone()), "sum of dw2");
    // Directly: grad of a vmapped function needs a scalar output, and says so.
    let e = batched.grad(Wrt::All).call(&[&w1, &w2, &xs, &ys]).unwrap_err();
    assert!(e.to_string().contains("reduce it to a scalar first"), "{e}");
}

#[test]
fn vmap_of_grad_of_grad_and_nested_vmap() {
    // f(x) = x^3 sin(x); f'' = 6x sin x + 6x^2 cos x - x^3 sin x.
    let f = jit("f", |x| (x * x * x * x.sin()).sum(()));
    let f2 = f.grad(Wrt::All).grad(Wrt::All).vmap_axis(0);
    let xs = vals(7, 5);
    let got = f2.call(&[&Tensor::vec1(&xs)]).unwrap().remove(0).to_f64_vec();
    for (x, y) in xs.iter().zip(got) {
        let want = 6.0 * x * x.sin() + 6.0 * x * x * x.cos() - x * x * x * x.sin();
        assert!((y - want).abs() <= 1e-12 * want.abs().max(1.0), "f''({x}) = {y} vs {want}");
    }
    // vmap(vmap(h)): the last vmap is the outer one. x [4, 2, 3]: outer
    // batch at axis 1 (size 2), inner batch at axis 0 of each [4, 3] slice;
    // the inner result [4] gets the outer batch at axis 1: [4, 2].
    let h = jit("h", |x| x.tanh().sum(()));
    let hh = h.vmap_axis(0).vmap_axis(1);
    let x = t64(&[4, 2, 3], vals(24, 8));
    let got = hh.call(&[&x]).unwrap().remove(0);
    assert_eq!(got.shape(), &[4, 2]);
    for i in 0..2 {
        let xi = take(&x, 1, i);
        for j in 0..4 {
            let want = h.call(&[&take(&xi, 0, j)]).unwrap().remove(0);
            let g = take(&take(&got, 1, i), 0, j);
            close(&g, &want, &format!("({i},{j})"));
        }
    }
}

#[test]
fn jvp_and_vjp_of_a_vmapped_function() {
    let f = jit("f", |x| x.sin() * x);
    let vf = f.vmap_axis(1);
    let x = t64(&[3, 4], vals(12, 6));
    let t = t64(&[3, 4], vals(12, 7));
    let (y, ty) = vf.jvp(&[&x], &[&t]).unwrap();
    let (_, gx) = vf.vjp(&[&x], &[&t]).unwrap();
    for j in 0..4 {
        let (xj, tj) = (take(&x, 1, j), take(&t, 1, j));
        let (yj, tyj) = f.jvp(&[&xj], &[&tj]).unwrap();
        close(&take(&y[0], 1, j), &yj[0], "primal");
        close(&take(&ty[0], 1, j), &tyj[0], "tangent");
        let (_, gj) = f.vjp(&[&xj], &[&tj]).unwrap();
        close(&take(&gx[0], 1, j), &gj[0], "cotangent");
    }
}

#[test]
fn each_batch_size_is_compiled_once() {
    let vf = jit("f", |x| x.exp().sum(())).vmap_axis(0);
    for n in [2usize, 3, 2] {
        let out = vf.call(&[&t64(&[n, 2], vec![0.0; 2 * n])]).unwrap().remove(0);
        assert_eq!(out.to_f64_vec(), vec![2.0; n]);
    }
    assert_eq!(vf.cache_size(), 2);
}

#[test]
fn vmap_errors_are_values() {
    let f = jit_n("f", |v| &v[0] + &v[1]);
    let vf = f.vmap(&[Some(0), Some(1)], &[Some(0)]);
    let a = t64(&[3, 2], vec![0.0; 6]);
    let b = t64(&[2, 5], vec![0.0; 10]);
    let e = vf.call(&[&a, &b]).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, Error::Ir(_)), "{e:?}");
    assert!(msg.contains("argument 0 has size 3") && msg.contains("argument 1 has size 5"), "{msg}");
    let e = f.vmap(&[Some(2), None], &[Some(0)]).call(&[&a, &a]).unwrap_err().to_string();
    assert!(e.contains("in_axes[0] = 2 is out of range for argument 0 of type f64[3,2]"), "{e}");
    let e = f.vmap(&[Some(-3), None], &[Some(0)]).call(&[&a, &a]).unwrap_err().to_string();
    assert!(e.contains("in_axes[0] = -3 is out of range"), "{e}");
    let e = f.vmap(&[Some(0)], &[Some(0)]).call(&[&a, &a]).unwrap_err().to_string();
    assert!(e.contains("in_axes has 1 entries but the function was called with 2 arguments"), "{e}");
    // An out axis past the output's rank clamps (the batch goes last).
    let r = f.vmap(&[Some(0), Some(0)], &[Some(3)]).call(&[&a, &a]).unwrap();
    assert_eq!(r[0].shape(), &[2, 3]);
    let e = f.vmap(&[Some(0), Some(0)], &[Some(0), Some(0)]).call(&[&a, &a]).unwrap_err().to_string();
    assert!(e.contains("out_axes has 2 entries for 1 results"), "{e}");
    let s = Tensor::scalar(1.0f64);
    let e = f.vmap(&[Some(0), None], &[Some(0)]).call(&[&s, &s]).unwrap_err().to_string();
    assert!(e.contains("a scalar with no axis to batch"), "{e}");
    let e = f.vmap(&[None, None], &[Some(0)]).call(&[&a, &a]).unwrap_err().to_string();
    assert!(e.contains("no argument is batched"), "{e}");
    // Errors inside a function called with `apply` surface from the enclosing
    // trace (here: per-example shapes [2] and [3] do not broadcast).
    let outer = jit("outer", |x| vf.apply(&[x.clone(), x.clone()])[0].sum(()));
    let e = outer.call(&[&a]).unwrap_err().to_string();
    assert!(e.contains("cannot be broadcast"), "{e}");
}

/// Outputs of rank below the out axis take the batch axis last
/// (`graft_core::batch::place_out_axes`): per-example scalars and vectors
/// under `vmap_axis(1)`, and negative axes clamped to the front.
#[test]
fn out_axes_past_an_outputs_rank_clamp() {
    let (n, b, m) = (2, 3, 4);
    let f = jit_n("f", |v| vec![v[0].sum(()), v[0].sum(0), v[0].clone()]);
    let xs = t64(&[n, b, m], vals(n * b * m, 7));
    let g = f.vmap_axis(1).call(&[&xs]).unwrap();
    assert_eq!(g[0].shape(), &[b], "scalar: batch at min(1, 0) = 0");
    assert_eq!(g[1].shape(), &[m, b], "vector: batch at min(1, 1) = 1");
    assert_eq!(g[2].shape(), &[n, b, m], "matrix: batch at 1");
    for e in 0..b {
        let want = f.call(&[&take(&xs, 1, e)]).unwrap();
        close(&take(&g[0], 0, e), &want[0], "scalar");
        close(&take(&g[1], 1, e), &want[1], "vector");
        close(&take(&g[2], 1, e), &want[2], "matrix");
    }
    let xs0 = t64(&[b, n, m], vals(n * b * m, 8));
    let g = f.vmap(&[Some(0)], &[Some(5), Some(-3), Some(-9)]).call(&[&xs0]).unwrap();
    assert_eq!(g[0].shape(), &[b]);
    assert_eq!(g[1].shape(), &[b, m], "-3 on a rank-1 output clamps to the front");
    assert_eq!(g[2].shape(), &[b, n, m]);
    for e in 0..b {
        let want = f.call(&[&take(&xs0, 0, e)]).unwrap();
        close(&take(&g[0], 0, e), &want[0], "scalar");
        close(&take(&g[1], 0, e), &want[1], "vector");
        close(&take(&g[2], 0, e), &want[2], "matrix");
    }
}
