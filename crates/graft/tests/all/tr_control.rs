//! Traced control flow (`graft::ops::{scan, fori, while_loop, cond, switch}`): values
//! against host loops, gradients against central differences, and errors
//! from bodies surfacing as trace errors.

use graft::ops::{capture_prints, cond, debug_print, fori, scan, switch, while_loop, Remat, ScanOpts};
use graft::{jit_n, Tensor, Tr, Wrt};

fn vec64(xs: &[f64]) -> Tensor {
    Tensor::vec1(xs)
}

/// loss(a, h0, xs) = sum(h_n) + sum(ys), h' = tanh(a * h + x), y = h'.
fn rnn(v: &[Tr]) -> Tr {
    let (c, ys) = scan(&v[..1], &v[1..2], &v[2..], ScanOpts::new(4), |c, h, x| {
        let h2 = (&(&c[0] * &h[0]) + &x[0]).tanh();
        (vec![h2.clone()], vec![h2])
    });
    &c[0].sum(()) + &ys[0].sum(())
}

fn rnn_host(a: f64, h0: f64, xs: &[f64]) -> f64 {
    let mut h = h0;
    let mut s = 0.0;
    for &x in xs {
        h = (a * h + x).tanh();
        s += h;
    }
    s + h
}

#[test]
fn traced_scan_matches_host_loop_and_differentiates() {
    let f = jit_n("rnn", rnn);
    let xs = [0.3, -0.7, 1.1, 0.2];
    let (a, h0) = (0.9, -0.4);
    let args = [Tensor::scalar(a), Tensor::scalar(h0), vec64(&xs)];
    let refs: Vec<&Tensor> = args.iter().collect();
    let y = f.call(&refs).unwrap()[0].to_scalar_f64().unwrap();
    assert!((y - rnn_host(a, h0, &xs)).abs() < 1e-14);
    let g = f.grad(Wrt::Positions(vec![0, 1])).call(&refs).unwrap();
    let eps = 1e-6;
    let fd_a = (rnn_host(a + eps, h0, &xs) - rnn_host(a - eps, h0, &xs)) / (2.0 * eps);
    let fd_h = (rnn_host(a, h0 + eps, &xs) - rnn_host(a, h0 - eps, &xs)) / (2.0 * eps);
    assert!((g[0].to_scalar_f64().unwrap() - fd_a).abs() < 1e-8);
    assert!((g[1].to_scalar_f64().unwrap() - fd_h).abs() < 1e-8);
}

#[test]
fn traced_fori_and_cond() {
    // x <- x * r for 5 steps, then cond on the sign of the result.
    let f = jit_n("f", |v| {
        let out = fori(5, &v[1..2], &v[..1], Remat::Off, |c, _i, x| vec![&x[0] * &c[0]]);
        let x = out[0].clone();
        let pos = x.gt(&x.scalar_like(0.0));
        cond(&pos, &[x], |o| vec![o[0].sqrt()], |o| vec![-&o[0]]).remove(0)
    });
    let y = |x0: f64, r: f64| f.call(&[&Tensor::scalar(x0), &Tensor::scalar(r)]).unwrap()[0].to_scalar_f64().unwrap();
    assert!((y(2.0, 1.5) - (2.0 * 1.5f64.powi(5)).sqrt()).abs() < 1e-12);
    assert!((y(-2.0, 1.5) - 2.0 * 1.5f64.powi(5)).abs() < 1e-12);
    let g = f.grad(Wrt::Positions(vec![1])).call(&[&Tensor::scalar(2.0), &Tensor::scalar(1.5)]).unwrap();
    // d/dr sqrt(2 r^5) = 5 sqrt(2) r^1.5 / 2
    let want = 5.0 * 2f64.sqrt() * 1.5f64.powf(1.5) / 2.0;
    assert!((g[0].to_scalar_f64().unwrap() - want).abs() < 1e-10);
}

#[test]
fn traced_switch_and_body_errors() {
    let f = jit_n("f", |v| {
        let b0 = |o: &[Tr]| vec![o[0].sin()];
        let b1 = |o: &[Tr]| vec![o[0].cos()];
        switch(&v[0], &v[1..], &[&b0, &b1]).remove(0)
    });
    let y = f.call(&[&Tensor::scalar(1i32), &Tensor::scalar(0.5f64)]).unwrap()[0].to_scalar_f64().unwrap();
    assert!((y - 0.5f64.cos()).abs() < 1e-15);
    // Branches returning different types are an error, not a panic.
    let bad = jit_n("bad", |v| {
        let pos = v[0].gt(&v[0].scalar_like(0.0));
        cond(&pos, &v[..1], |o| vec![o[0].clone()], |o| vec![o[0].clone(), o[0].clone()]).remove(0)
    });
    assert!(bad.call(&[&Tensor::scalar(1.0f64)]).is_err());
}

#[test]
fn failing_branch_poisons_the_trace() {
    let bad = jit_n("bad", |v| {
        let pos = v[0].gt(&v[0].scalar_like(0.0));
        cond(&pos, &v[..1], |o| vec![o[0].reshape(&[7])], |o| vec![o[0].clone()]).remove(0)
    });
    assert!(bad.call(&[&Tensor::scalar(1.0f64)]).is_err());
}

#[test]
fn traced_debug_print_prints_each_trip_once_under_grad() {
    let f = jit_n("f", |v| {
        let out = fori(3, &v[1..2], &v[..1], Remat::Off, |c, i, x| {
            debug_print(i, "i={} x={}", &[i, &x[0]]);
            vec![&x[0] * &c[0]]
        });
        out[0].clone()
    });
    let args = [Tensor::scalar(2.0f64), Tensor::scalar(1.5f64)];
    let refs: Vec<&Tensor> = args.iter().collect();
    let (y, lines) = capture_prints(|| f.call(&refs).unwrap());
    assert_eq!(lines, ["i=0 x=2.", "i=1 x=3.", "i=2 x=4.5"]);
    assert_eq!(y[0].to_scalar_f64().unwrap(), 6.75);
    let (g, glines) = capture_prints(|| f.grad(Wrt::Positions(vec![1])).call(&refs).unwrap());
    assert_eq!(glines, lines);
    assert!((g[0].to_scalar_f64().unwrap() - 3.0 * 2.0 * 1.5f64.powi(2)).abs() < 1e-12);
    // A format that does not fit the values is an error, not a panic.
    let bad = jit_n("bad", |v| {
        debug_print(&v[0], "{} {}", &[&v[0]]);
        v[0].clone()
    });
    assert!(bad.call(&refs[..1]).is_err());
}

#[test]
fn traced_while_loop_newton_sqrt_and_its_gradient() {
    // Newton's iteration for sqrt(a), 30 trips, with `a` a loop constant:
    // the value is sqrt(a) and reverse mode through the loop gives 1/(2 sqrt(a)).
    let f = jit_n("newton", |v| {
        let i0 = v[0].scalar(0.0, graft::DType::I32);
        let out = while_loop(
            &v[..1],
            &[v[0].clone(), i0],
            |_c, k| k[1].lt(&k[1].scalar_like(30.0)),
            |c, k| vec![(&k[0] + &(&c[0] / &k[0])) * 0.5, &k[1] + 1.0],
        );
        out[0].clone()
    });
    let a = Tensor::scalar(2.5f64);
    let y = f.call(&[&a]).unwrap()[0].to_scalar_f64().unwrap();
    assert!((y - 2.5f64.sqrt()).abs() < 1e-14);
    let g = f.grad(Wrt::All).call(&[&a]).unwrap()[0].to_scalar_f64().unwrap();
    assert!((g - 0.5 / 2.5f64.sqrt()).abs() < 1e-12);
    // A body that does not return the carry's types is a trace error, not a panic.
    let bad = jit_n("bad", |v| {
        // cond returns bool[2], not bool[]
        while_loop(&[], &v[..1], |_c, k| k[0].gt(&k[0].scalar_like(0.0)), |_c, k| vec![k[0].clone()]).remove(0)
    });
    assert!(bad.call(&[&Tensor::vec1(&[1.0f64, 2.0])]).is_err());
}

#[test]
fn trace_error_and_identity_are_visible_on_handles() {
    let f = jit_n("f", |v| {
        assert!(v[0].error().is_none());
        assert_eq!(v[0].trace_id(), v[1].trace_id());
        let bad = &v[0] + &v[1]; // f64[2] + f64[3]: no broadcast
        assert!(bad.value().is_none());
        assert!(bad.error().is_some());
        bad
    });
    assert!(f.call(&[&Tensor::vec1(&[1.0f64, 2.0]), &Tensor::vec1(&[1.0f64, 2.0, 3.0])]).is_err());
}
