//! Per-transform tests: grad vs central finite differences (f64), vmap vs
//! a loop over examples, jvp/vjp against hand-computed derivatives, and
//! compositions (grad(grad), vmap(grad), grad of a vmapped function,
//! jacfwd/jacrev/hessian, checkpoint, tabulate, scan/fori, if/match).

use graft_core::Tensor;
use graft_lang::{diag, Module, Output};

fn module(src: &str) -> Module {
    Module::from_source("t.graft", src)
        .unwrap_or_else(|ds| panic!("{}", ds.iter().map(|d| diag::render(d, "t.graft", src)).collect::<String>()))
}

fn run(src: &str, entry: &str, inputs: &[Tensor]) -> Output {
    let m = module(src);
    m.run(entry, inputs).unwrap_or_else(|d| panic!("{}", diag::render(&d, "t.graft", src)))
}

fn v64(o: &Output) -> Vec<f64> {
    o.tensor().expect("tensor").to_f64_vec()
}

fn part(o: &Output, i: usize) -> &Output {
    match o {
        Output::Tuple(t) => &t[i],
        _ => panic!("expected a tuple"),
    }
}

fn close(a: &[f64], b: &[f64], tol: f64) {
    assert_eq!(a.len(), b.len(), "{a:?} vs {b:?}");
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() <= tol * (1.0 + y.abs()), "{a:?} vs {b:?}");
    }
}

fn t64(shape: &[usize], d: &[f64]) -> Tensor {
    Tensor::from_vec(shape.to_vec(), d.to_vec()).unwrap()
}

const F: &str = r#"
def f(x: tensor[n, f64], y: f64) -> f64 = sum(tanh(x) * x, 0) * y + y ** 2
def df(x: tensor[n, f64], y: f64) -> (tensor[n, f64], f64) = grad(f)(x, y)
def dfx(x: tensor[n, f64], y: f64) -> tensor[n, f64] = grad(f, wrt=x)(x, y)
def vg(x: tensor[n, f64], y: f64) -> (f64, tensor[n, f64]) = value_and_grad(f, wrt=x)(x, y)
def g(x: f64) -> f64 = sin(x) * x
def d2g(x: f64) -> f64 = grad(grad(g))(x)
def per_example(xs: tensor[b, n, f64], y: f64) -> tensor[b, n, f64] = vmap(grad(f, wrt=x), in_axes=(0, none))(xs, y)
def batched(xs: tensor[b, n, f64]) -> tensor[b, n, f64] = vmap(fn (x) -> tanh(x) * 2, axis=0)(xs)
def gv(xs: tensor[b, n, f64]) -> tensor[b, n, f64] = grad(fn (xs) -> sum(vmap(fn (x) -> relu(x) * x, axis=0)(xs)))(xs)
def jv(x: tensor[n, f64], t: tensor[n, f64]) -> (f64, f64) = jvp(fn (x) -> sum(sin(x)), (x,), (t,))
def vj(x: tensor[n, f64], c: tensor[n, f64]) -> (tensor[n, f64], (tensor[n, f64],)) = vjp(fn (x) -> exp(x), (x,), c)
def jf(x: tensor[n, f64]) -> tensor[n, n, f64] = jacfwd(fn (x) -> x * x)(x)
def jr(x: tensor[n, f64]) -> tensor[n, n, f64] = jacrev(fn (x) -> sin(x))(x)
def h(x: tensor[n, f64]) -> tensor[n, n, f64] = hessian(fn (x) -> sum(x * x * x))(x)
def ck(x: tensor[n, f64]) -> tensor[n, f64] = grad(fn (x) -> sum(checkpoint(fn (x) -> sin(x) * x)(x)))(x)
def tab() -> tensor[4, f64] = tabulate(4, fn (i) -> cast(i, f64) * 2.0)
def cum(xs: tensor[n, f64]) -> (f64, tensor[n, f64]) = scan(fn (c, x) -> (c + x, c * x), 0.0, xs)
def pw(x: f64) -> f64 = fori(5, fn (i, c) -> c * x, 1.0)
def dpw(x: f64) -> f64 = grad(pw)(x)
def branch(x: f64) -> f64 = if x > 0 then x * x else -x
def dbranch(x: f64) -> f64 = grad(branch)(x)
def m(k: i32) -> f32 = match k { 0 => 10.0, 1 => 20.0, _ => 30.0 }
def cap(x: tensor[n, f64], s: f64) -> tensor[n, f64] = grad(fn (x) -> sum(x * s * s))(x)
"#;

fn fval(x: &[f64], y: f64) -> f64 {
    x.iter().map(|v| v.tanh() * v).sum::<f64>() * y + y * y
}

#[test]
fn grad_matches_finite_differences() {
    let x = [0.3, -1.2, 2.0];
    let y = 0.7;
    let out = run(F, "df", &[t64(&[3], &x), Tensor::scalar(y)]);
    let eps = 1e-6;
    let mut want = Vec::new();
    for i in 0..3 {
        let (mut a, mut b) = (x, x);
        a[i] += eps;
        b[i] -= eps;
        want.push((fval(&a, y) - fval(&b, y)) / (2.0 * eps));
    }
    close(&v64(part(&out, 0)), &want, 1e-6);
    let dy = (fval(&x, y + eps) - fval(&x, y - eps)) / (2.0 * eps);
    close(&v64(part(&out, 1)), &[dy], 1e-6);
    let only_x = run(F, "dfx", &[t64(&[3], &x), Tensor::scalar(y)]);
    close(&v64(&only_x), &want, 1e-6);
    let vg = run(F, "vg", &[t64(&[3], &x), Tensor::scalar(y)]);
    close(&v64(part(&vg, 0)), &[fval(&x, y)], 1e-12);
    close(&v64(part(&vg, 1)), &want, 1e-6);
}

#[test]
fn second_derivative() {
    let x: f64 = 0.9;
    let out = run(F, "d2g", &[Tensor::scalar(x)]);
    close(&v64(&out), &[2.0 * x.cos() - x * x.sin()], 1e-12);
}

#[test]
fn vmap_of_grad_is_per_example_gradient() {
    let xs = [0.3, -1.2, 2.0, 1.0, 0.5, -0.1];
    let y = 1.3;
    let out = run(F, "per_example", &[t64(&[2, 3], &xs), Tensor::scalar(y)]);
    let mut want = Vec::new();
    for r in 0..2 {
        let row = &xs[r * 3..r * 3 + 3];
        let g = run(F, "dfx", &[t64(&[3], row), Tensor::scalar(y)]);
        want.extend(v64(&g));
    }
    close(&v64(&out), &want, 1e-12);
}

#[test]
fn vmap_matches_loop_and_grad_of_vmap() {
    let xs = [0.3, -1.2, 2.0, 1.0, 0.5, -0.1];
    let out = run(F, "batched", &[t64(&[2, 3], &xs)]);
    close(&v64(&out), &xs.iter().map(|v| v.tanh() * 2.0).collect::<Vec<_>>(), 1e-12);
    let g = run(F, "gv", &[t64(&[2, 3], &xs)]);
    close(&v64(&g), &xs.iter().map(|&v| if v > 0.0 { 2.0 * v } else { 0.0 }).collect::<Vec<_>>(), 1e-12);
}

#[test]
fn jvp_and_vjp() {
    let x = [0.3, -1.2, 2.0];
    let t = [1.0, 2.0, -0.5];
    let out = run(F, "jv", &[t64(&[3], &x), t64(&[3], &t)]);
    close(&v64(part(&out, 0)), &[x.iter().map(|v| v.sin()).sum()], 1e-12);
    close(&v64(part(&out, 1)), &[x.iter().zip(&t).map(|(a, b)| a.cos() * b).sum()], 1e-12);
    let out = run(F, "vj", &[t64(&[3], &x), t64(&[3], &t)]);
    close(&v64(part(&out, 0)), &x.iter().map(|v| v.exp()).collect::<Vec<_>>(), 1e-12);
    close(&v64(part(part(&out, 1), 0)), &x.iter().zip(&t).map(|(a, b)| a.exp() * b).collect::<Vec<_>>(), 1e-12);
}

fn diag3(d: [f64; 3]) -> Vec<f64> {
    let mut m = vec![0.0; 9];
    for i in 0..3 {
        m[i * 4] = d[i];
    }
    m
}

#[test]
fn jacobians_and_hessian() {
    let x = [0.3, -1.2, 2.0];
    close(&v64(&run(F, "jf", &[t64(&[3], &x)])), &diag3([0.6, -2.4, 4.0]), 1e-12);
    close(&v64(&run(F, "jr", &[t64(&[3], &x)])), &diag3([x[0].cos(), x[1].cos(), x[2].cos()]), 1e-12);
    close(&v64(&run(F, "h", &[t64(&[3], &x)])), &diag3([6.0 * x[0], 6.0 * x[1], 6.0 * x[2]]), 1e-12);
}

#[test]
fn checkpoint_tabulate_and_captures() {
    let x = [0.3, -1.2, 2.0];
    let out = run(F, "ck", &[t64(&[3], &x)]);
    close(&v64(&out), &x.iter().map(|v| v.cos() * v + v.sin()).collect::<Vec<_>>(), 1e-12);
    close(&v64(&run(F, "tab", &[])), &[0.0, 2.0, 4.0, 6.0], 0.0);
    let out = run(F, "cap", &[t64(&[3], &x), Tensor::scalar(3.0f64)]);
    close(&v64(&out), &[9.0, 9.0, 9.0], 0.0);
}

#[test]
fn loops_and_branches() {
    let xs = [1.0, 2.0, 3.0];
    let out = run(F, "cum", &[t64(&[3], &xs)]);
    close(&v64(part(&out, 0)), &[6.0], 0.0);
    close(&v64(part(&out, 1)), &[0.0, 2.0, 9.0], 0.0);
    close(&v64(&run(F, "pw", &[Tensor::scalar(1.5f64)])), &[1.5f64.powi(5)], 1e-12);
    close(&v64(&run(F, "dpw", &[Tensor::scalar(1.5f64)])), &[5.0 * 1.5f64.powi(4)], 1e-12);
    close(&v64(&run(F, "branch", &[Tensor::scalar(-2.0f64)])), &[2.0], 0.0);
    close(&v64(&run(F, "dbranch", &[Tensor::scalar(3.0f64)])), &[6.0], 0.0);
    close(&v64(&run(F, "dbranch", &[Tensor::scalar(-3.0f64)])), &[-1.0], 0.0);
    for (k, want) in [(0, 10.0), (1, 20.0), (7, 30.0)] {
        close(&v64(&run(F, "m", &[Tensor::scalar::<i32>(k)])), &[want], 0.0);
    }
}

#[test]
fn every_def_checks() {
    let m = module(F);
    if let Err(ds) = m.check() {
        panic!("{}", ds.iter().map(|d| diag::render(d, "t.graft", F)).collect::<String>());
    }
}

#[test]
fn instantiation_is_cached_per_type() {
    let m = module(F);
    let a = m
        .instantiate(
            "f",
            &[
                graft_core::TensorType::new(graft_core::DType::F64, vec![3]),
                graft_core::TensorType::scalar(graft_core::DType::F64),
            ],
        )
        .unwrap();
    let b = m
        .instantiate(
            "f",
            &[
                graft_core::TensorType::new(graft_core::DType::F64, vec![3]),
                graft_core::TensorType::scalar(graft_core::DType::F64),
            ],
        )
        .unwrap();
    assert_eq!(a.func.eqns.len(), b.func.eqns.len());
    // Every equation of the expanded function is a primitive with a source location.
    assert!(a.func.eqns.iter().all(|e| e.loc.is_some()));
}
