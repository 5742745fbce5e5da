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

const W: &str = r#"
def nsq(a: f64) -> f64 = while(fn (c) -> abs(c * c - a) > 1e-12 * a, fn (c) -> 0.5 * (c + a / c), a + 1.0)
def dnsq(a: f64) -> f64 = grad(nsq)(a)
def halve(x: f64) -> (f64, i32) = while(fn (c) -> c.0 >= 1.0, fn (c) -> (c.0 * 0.5, c.1 + 1), (x, 0))
def vhalve(xs: tensor[b, f64]) -> (tensor[b, f64], tensor[b, i32]) = vmap(halve)(xs)
def vdhalve(xs: tensor[b, f64]) -> tensor[b, f64] = vmap(grad(fn (x) -> halve(x).0))(xs)
def capt(x: f64, s: f64) -> f64 = while(fn (c) -> c < s, fn (c) -> c + s * 0.25, x)
def powr(x: f64, n: i32) -> f64 = fori(n, fn (i, c) -> c * x + cast(i, f64) * 0.0, 1.0)
def dpowr(x: f64, n: i32) -> f64 = grad(powr, wrt=x)(x, n)
def vpowr(xs: tensor[b, f64], ns: tensor[b, i32]) -> tensor[b, f64] = vmap(powr)(xs, ns)
"#;

fn s64(v: f64) -> Tensor {
    t64(&[], &[v])
}

fn i32s(shape: &[usize], d: &[i32]) -> Tensor {
    Tensor::from_vec(shape.to_vec(), d.to_vec()).unwrap()
}

#[test]
fn while_value_and_grad() {
    for a in [2.0, 0.3, 50.0] {
        close(&v64(&run(W, "nsq", &[s64(a)])), &[f64::sqrt(a)], 1e-10);
        close(&v64(&run(W, "dnsq", &[s64(a)])), &[0.5 / f64::sqrt(a)], 1e-8);
    }
    // Captured values (s) are constants of the loop: 0.1 + k * 0.5 until >= 2.
    close(&v64(&run(W, "capt", &[s64(0.1), s64(2.0)])), &[2.1], 1e-12);
    // A carry that already fails the condition runs no trip.
    close(&v64(&run(W, "capt", &[s64(3.0), s64(2.0)])), &[3.0], 1e-12);
}

#[test]
fn vmap_of_while_has_per_example_trip_counts() {
    let xs = [0.5, 3.0, 9.0, 100.0];
    let o = run(W, "vhalve", &[t64(&[4], &xs)]);
    let ks: Vec<i32> = xs.iter().map(|&x: &f64| if x < 1.0 { 0 } else { x.log2().floor() as i32 + 1 }).collect();
    let want: Vec<f64> = xs.iter().zip(&ks).map(|(x, &k)| x * 0.5f64.powi(k)).collect();
    close(&v64(part(&o, 0)), &want, 1e-12);
    let got_k: Vec<i32> = part(&o, 1).tensor().unwrap().to_f64_vec().iter().map(|&v| v as i32).collect();
    assert_eq!(got_k, ks);
    // d/dx (x * 0.5^k(x)) = 0.5^k per example (k is piecewise constant).
    let d: Vec<f64> = ks.iter().map(|&k| 0.5f64.powi(k)).collect();
    close(&v64(&run(W, "vdhalve", &[t64(&[4], &xs)])), &d, 1e-12);
}

#[test]
fn fori_with_run_time_trip_count() {
    for n in [0, 1, 4] {
        let x = 1.3f64;
        let ins = [s64(x), i32s(&[], &[n])];
        close(&v64(&run(W, "powr", &ins)), &[x.powi(n)], 1e-12);
        let d = if n == 0 { 0.0 } else { n as f64 * x.powi(n - 1) };
        close(&v64(&run(W, "dpowr", &ins)), &[d], 1e-10);
    }
    // Negative counts run no trip; vmap gives each example its own count.
    let o = run(W, "vpowr", &[t64(&[3], &[2.0, 3.0, 0.5]), i32s(&[3], &[3, -2, 5])]);
    close(&v64(&o), &[8.0, 1.0, 0.03125], 1e-12);
}

#[test]
fn while_fori_and_custom_rules_check() {
    for src in [W, C] {
        module(src)
            .check()
            .unwrap_or_else(|ds| panic!("{}", ds.iter().map(|d| diag::render(d, "t.graft", src)).collect::<String>()));
    }
}

#[test]
fn check_accepts_jvp_attribute_defs() {
    // Regression: check() instantiated an @jvp def without its tangent input.
    let src = "def f(x: f32) -> f32 = x * x\n@jvp(x)\ndef g(x: f32) -> f32 = f(x)\n";
    module(src)
        .check()
        .unwrap_or_else(|ds| panic!("{}", ds.iter().map(|d| diag::render(d, "t.graft", src)).collect::<String>()));
    let o = run(
        src,
        "g",
        &[Tensor::from_vec(vec![], vec![3.0f32]).unwrap(), Tensor::from_vec(vec![], vec![0.5f32]).unwrap()],
    );
    close(&v64(&o), &[3.0], 1e-6);
}

const C: &str = r#"
def sq_fwd(x: f64) -> (f64, f64) = (x * x, x)
def sq_bwd(r: f64, g: f64) -> f64 = 5.0 * r * g
@custom_vjp(sq_fwd, sq_bwd)
def sq(x: f64) -> f64 = x * x
def dsq(x: f64) -> f64 = grad(sq)(x)
def dchain(x: f64) -> f64 = grad(fn (x) -> sin(sq(x)))(x)
def vdsq(xs: tensor[b, f64]) -> tensor[b, f64] = vmap(grad(sq))(xs)
def n_fwd(x: tensor[n, f64]) -> (f64, tensor[n, f64]) = (sum(x * x), x)
def n_bwd(r: tensor[n, f64], g: f64) -> tensor[n, f64] = clip(2.0 * r * g, -1.0, 1.0)
@custom_vjp(n_fwd, n_bwd)
def nsq(x: tensor[n, f64]) -> f64 = sum(x * x)
def dnsq(x: tensor[n, f64]) -> tensor[n, f64] = grad(nsq)(x)
def e_rule(x: f64, t: f64) -> (f64, f64) = (exp(x), 3.0 * t)
@custom_jvp(e_rule)
def e(x: f64) -> f64 = exp(x)
def de(x: f64) -> f64 = grad(e)(x)
def jve(x: f64, t: f64) -> (f64, f64) = jvp(e, (x,), (t,))
def vde(xs: tensor[b, f64]) -> tensor[b, f64] = vmap(grad(e))(xs)
"#;

#[test]
fn custom_vjp_rule_is_used() {
    let x = 0.7f64;
    // The value is the def's; the gradient is bwd's (5 x, not 2 x).
    close(&v64(&run(C, "sq", &[s64(x)])), &[x * x], 1e-12);
    close(&v64(&run(C, "dsq", &[s64(x)])), &[5.0 * x], 1e-12);
    close(&v64(&run(C, "dchain", &[s64(x)])), &[(x * x).cos() * 5.0 * x], 1e-12);
    let xs = [0.5, -1.0, 2.0];
    close(&v64(&run(C, "vdsq", &[t64(&[3], &xs)])), &[2.5, -5.0, 10.0], 1e-12);
    // A clipped gradient: 2 x clipped to [-1, 1].
    close(&v64(&run(C, "dnsq", &[t64(&[3], &[0.2, -3.0, 0.9])])), &[0.4, -1.0, 1.0], 1e-12);
}

#[test]
fn custom_jvp_rule_is_used() {
    let x = 0.4f64;
    close(&v64(&run(C, "e", &[s64(x)])), &[x.exp()], 1e-12);
    close(&v64(&run(C, "de", &[s64(x)])), &[3.0], 1e-12);
    let o = run(C, "jve", &[s64(x), s64(2.0)]);
    close(&v64(part(&o, 0)), &[x.exp()], 1e-12);
    close(&v64(part(&o, 1)), &[6.0], 1e-12);
    close(&v64(&run(C, "vde", &[t64(&[2], &[0.1, 5.0])])), &[3.0, 3.0], 1e-12);
}

#[test]
fn custom_rule_mismatch_is_a_diagnostic() {
    let src = "def bad_fwd(x: f64) -> f64 = x\ndef bad_bwd(g: f64) -> f64 = g\n@custom_vjp(bad_fwd, bad_bwd)\ndef h(x: f64) -> (f64, f64) = (x, x)\n";
    let d = module(src).run("h", &[s64(1.0)]).expect_err("fwd returns too few outputs");
    assert!(d.message.contains("custom rule `bad_fwd` of `h`"), "{}", d.message);
}

/// A math builtin on a number literal is folded while compiling and stays
/// untyped, so it takes the dtype of its context (here f64), and a def over
/// a scalar maps over a vector under vmap.
#[test]
fn folded_constants_take_their_context_dtype_and_vmap_maps_scalar_defs() {
    let src = "def f(x: f64) -> f64 = x + log(2.0) * exp(1) + sqrt(4)\n\
               def g(z: f32) -> f32 = z * z\n\
               def h(t: tensor[3, f32]) -> tensor[3, f32] = vmap(g, axis=0)(t)\n";
    let out = run(src, "f", &[t64(&[], &[1.5])]);
    close(&v64(&out), &[1.5 + 2f64.ln() * 1f64.exp() + 2.0], 1e-15);
    let out = run(src, "h", &[Tensor::vec1(&[1.0f32, 2.0, -3.0])]);
    close(&v64(&out), &[1.0, 4.0, 9.0], 0.0);
}

/// A `jvp` through a lambda treats what the lambda captures as constants
/// with symbolic zero tangents: the right number, and no tangent work for
/// the capture (no `cos`, which only `d sin(c)/dc` would need).
#[test]
fn jvp_of_a_lambda_does_no_tangent_work_for_captures() {
    const SRC: &str = "
def f(x: tensor[3, f64], c: tensor[3, f64], t: tensor[3, f64]) -> tensor[3, f64] {
  let g = fn (y) -> y * sin(c)
  jvp(g, (x,), (t,)).1
}
";
    let (x, c, t) = ([0.3, -1.2, 2.0], [0.5, 1.5, -0.7], [1.0, 2.0, -0.5]);
    let out = run(SRC, "f", &[t64(&[3], &x), t64(&[3], &c), t64(&[3], &t)]);
    close(&v64(&out), &[t[0] * c[0].sin(), t[1] * c[1].sin(), t[2] * c[2].sin()], 1e-12);
    let ty = graft_core::TensorType::new(graft_core::DType::F64, vec![3]);
    let func = module(SRC).instantiate("f", &[ty.clone(), ty.clone(), ty]).expect("instantiates").func;
    let text = graft_core::ir::print_func(&func);
    assert!(!text.contains("cos"), "tangent work for a capture:\n{text}");
}

/// `vmap` places the batch axis of results of any rank: at `min(k, rank)`
/// for `axis=k` / `out_axes` entry `k >= 0`, at `max(rank + 1 + k, 0)` for
/// a negative one (docs/language.md, "What `vmap` batches").
const VAXES: &str = r#"
def f(x: tensor[n, m, f64]) -> (f64, tensor[m, f64], tensor[n, m, f64]) = (sum(x), sum(x, axis=0), x)
def ax1(xs: tensor[n, b, m, f64]) -> (tensor[b, f64], tensor[m, b, f64], tensor[n, b, m, f64]) = vmap(f, axis=1)(xs)
def ax2(xs: tensor[n, m, b, f64]) -> (tensor[b, f64], tensor[m, b, f64], tensor[n, m, b, f64]) = vmap(f, axis=2)(xs)
def outs5(xs: tensor[b, n, m, f64]) -> (tensor[b, f64], tensor[m, b, f64], tensor[n, m, b, f64]) = vmap(f, in_axes=0, out_axes=5)(xs)
def neg(xs: tensor[b, n, m, f64]) -> (tensor[b, f64], tensor[m, b, f64], tensor[n, m, b, f64]) = vmap(f, in_axes=0, out_axes=-1)(xs)
def neg2(xs: tensor[b, n, m, f64]) -> (tensor[b, f64], tensor[b, m, f64], tensor[n, b, m, f64]) = vmap(f, in_axes=0, out_axes=-2)(xs)
def mixed(xs: tensor[b, n, m, f64]) -> (tensor[b, f64], tensor[b, m, f64], tensor[n, m, b, f64]) = vmap(f, in_axes=0, out_axes=(1, 0, 7))(xs)
def sq(v: tensor[n, f64]) -> f64 = sum(v * v)
def norms(xs: tensor[n, b, f64]) -> tensor[b, f64] = vmap(sq, axis=1)(xs)
def vec(v: tensor[n, f64]) -> tensor[n, f64] = v * 2.0
def vecs(xs: tensor[n, b, f64]) -> tensor[n, b, f64] = vmap(vec, axis=1)(xs)
def vecs3(xs: tensor[n, b, f64]) -> tensor[n, b, f64] = vmap(vec, in_axes=1, out_axes=3)(xs)
"#;

fn at3(d: &[f64], shape: [usize; 3], i: [usize; 3]) -> f64 {
    d[(i[0] * shape[1] + i[1]) * shape[2] + i[2]]
}

#[test]
fn vmap_axes_past_a_results_rank_put_the_batch_last() {
    let (n, b, m) = (2usize, 3usize, 4usize);
    // xs[i, e, j] for axis=1; example e is x_e[i, j].
    let x = |e: usize, i: usize, j: usize| (e * 100 + i * 10 + j) as f64 * 0.01;
    let sums: Vec<f64> =
        (0..b).map(|e| (0..n).flat_map(|i| (0..m).map(move |j| (i, j))).map(|(i, j)| x(e, i, j)).sum()).collect();
    let cols = |e: usize, j: usize| (0..n).map(|i| x(e, i, j)).sum::<f64>();
    let mk = |shape: [usize; 3], f: &dyn Fn([usize; 3]) -> f64| {
        let mut d = Vec::new();
        for a in 0..shape[0] {
            for c in 0..shape[1] {
                for k in 0..shape[2] {
                    d.push(f([a, c, k]));
                }
            }
        }
        t64(&shape, &d)
    };
    let check = |o: &Output, batch_shapes: [&[usize]; 3], pos: [usize; 3]| {
        // Scalar result: a [b] vector of per-example sums.
        assert_eq!(part(o, 0).tensor().unwrap().shape(), batch_shapes[0]);
        close(&v64(part(o, 0)), &sums, 1e-12);
        // Vector result [m]: the batch axis at pos[1] of [m, b] or [b, m].
        let t1 = part(o, 1).tensor().unwrap();
        assert_eq!(t1.shape(), batch_shapes[1]);
        let d1 = t1.to_f64_vec();
        for e in 0..b {
            for j in 0..m {
                let got = if pos[1] == 0 { d1[e * m + j] } else { d1[j * b + e] };
                assert!((got - cols(e, j)).abs() < 1e-12);
            }
        }
        // Matrix result [n, m]: the batch axis at pos[2].
        let t2 = part(o, 2).tensor().unwrap();
        assert_eq!(t2.shape(), batch_shapes[2]);
        let d2 = t2.to_f64_vec();
        let s2: [usize; 3] = batch_shapes[2].try_into().unwrap();
        for e in 0..b {
            for i in 0..n {
                for j in 0..m {
                    let mut idx = vec![i, j];
                    idx.insert(pos[2], e);
                    assert_eq!(at3(&d2, s2, [idx[0], idx[1], idx[2]]), x(e, i, j));
                }
            }
        }
    };
    let m_ = module(VAXES);
    m_.check()
        .unwrap_or_else(|ds| panic!("{}", ds.iter().map(|d| diag::render(d, "t.graft", VAXES)).collect::<String>()));
    let ax1 = mk([n, b, m], &|[i, e, j]| x(e, i, j));
    check(&run(VAXES, "ax1", &[ax1.clone()]), [&[b], &[m, b], &[n, b, m]], [0, 1, 1]);
    let ax2 = mk([n, m, b], &|[i, j, e]| x(e, i, j));
    check(&run(VAXES, "ax2", &[ax2]), [&[b], &[m, b], &[n, m, b]], [0, 1, 2]);
    let ax0 = mk([b, n, m], &|[e, i, j]| x(e, i, j));
    check(&run(VAXES, "outs5", &[ax0.clone()]), [&[b], &[m, b], &[n, m, b]], [0, 1, 2]);
    check(&run(VAXES, "neg", &[ax0.clone()]), [&[b], &[m, b], &[n, m, b]], [0, 1, 2]);
    check(&run(VAXES, "neg2", &[ax0.clone()]), [&[b], &[b, m], &[n, b, m]], [0, 0, 1]);
    check(&run(VAXES, "mixed", &[ax0]), [&[b], &[b, m], &[n, m, b]], [0, 0, 2]);
    // A per-example scalar reduction under axis=1 gives a vector.
    let v = mk([1, n, b], &|[_, i, e]| x(e, i, 0));
    let v = Tensor::from_vec(vec![n, b], v.to_f64_vec()).unwrap();
    let norms = v64(&run(VAXES, "norms", &[v.clone()]));
    let want: Vec<f64> = (0..b).map(|e| (0..n).map(|i| x(e, i, 0) * x(e, i, 0)).sum()).collect();
    close(&norms, &want, 1e-12);
    // Vectors keep axis 1 when they have it; out_axes=3 clamps to last.
    let doubled: Vec<f64> = v.to_f64_vec().iter().map(|a| a * 2.0).collect();
    assert_eq!(v64(&run(VAXES, "vecs", &[v.clone()])), doubled);
    assert_eq!(v64(&run(VAXES, "vecs3", &[v])), doubled);
}

#[test]
fn vmap_argument_axis_out_of_range_is_still_an_error() {
    let src = "def f(x: tensor[n, f64]) -> f64 = sum(x)\n\
               def g(x: tensor[n, f64]) -> tensor[n, f64] = vmap(f, axis=1)(x)\n";
    let m = module(src);
    let d = m.run("g", &[t64(&[3], &[1.0, 2.0, 3.0])]).unwrap_err();
    let text = diag::render(&d, "t.graft", src);
    assert!(text.contains("cannot batch along axis 1") && text.contains("rank 1"), "{text}");
    assert!(text.contains("t.graft:2:"), "{text}");
}

/// Known defects from issue 14, item 8: a tuple of literals given to
/// `stack`/`concat` stays a static array whose dtype comes from its
/// context (it was an f32 tensor, so `x * stack((10.0, 0.0))` failed next
/// to an f64 `x`), and a compile-time `if` on sizes passes `check` when the
/// branch the placeholder sizes select fails but the other one checks.
#[test]
fn literal_stacks_take_their_context_dtype() {
    let src = "def a(x: tensor[3, f64]) -> tensor[3, f64] = x * stack((10.0, 0.0, 1.0))\n\
               def b() -> tensor[2, f64] = stack((10.0, 0.0))\n\
               def c() -> tensor[2, 3, i64] = stack(([1, 2, 3], [4, 5, 6]))\n\
               def d() -> tensor[3, 2, f64] = stack(([1, 2, 3], [4, 5, 6]), axis=-1)\n\
               def e() -> tensor[2, 3, f64] = concat(([[1.0], [2.0]], [[3.0, 4.0], [5.0, 6.0]]), axis=1)\n\
               def f() -> tensor[3, f32] = stack((1.0, 2, 3))\n\
               def g(x: f64) -> tensor[2, f64] = stack((x, 0.0))\n\
               def h() -> f32 = sum(stack((1.0, 2.0)))\n";
    let m = module(src);
    m.check().unwrap_or_else(|ds| panic!("{}", ds.iter().map(|d| diag::render(d, "t.graft", src)).collect::<String>()));
    assert_eq!(v64(&run(src, "a", &[t64(&[3], &[1.0, 2.0, 3.0])])), vec![10.0, 0.0, 3.0]);
    let b = run(src, "b", &[]);
    assert_eq!(b.tensor().unwrap().dtype(), graft_core::DType::F64);
    assert_eq!(v64(&b), vec![10.0, 0.0]);
    let c = run(src, "c", &[]);
    assert_eq!(c.tensor().unwrap().to_vec::<i64>().unwrap(), vec![1, 2, 3, 4, 5, 6]);
    assert_eq!(v64(&run(src, "d", &[])), vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    assert_eq!(v64(&run(src, "e", &[])), vec![1.0, 3.0, 4.0, 2.0, 5.0, 6.0]);
    assert_eq!(run(src, "f", &[]).tensor().unwrap().dtype(), graft_core::DType::F32);
    assert_eq!(v64(&run(src, "g", &[Tensor::scalar(2.5f64)])), vec![2.5, 0.0]);
    assert_eq!(v64(&run(src, "h", &[])), vec![3.0]);
    // Shapes that do not stack are still an error naming `stack`.
    let bad = "def s() -> tensor[2, f64] = stack(([1.0, 2.0], [3.0]))\n";
    let d = module(bad).run("s", &[]).unwrap_err();
    assert!(d.message.contains("stack") || d.message.contains("concatenate"), "{}", d.message);
}

#[test]
fn compile_time_if_on_sizes_checks_through_the_branch_real_sizes_take() {
    let src = "def s(a: tensor[n, f64], b: tensor[m, f64]) -> tensor[m, f64] = if size(a) == 0 then b else a + b\n";
    let m = module(src);
    m.check().unwrap_or_else(|ds| panic!("{}", ds.iter().map(|d| diag::render(d, "t.graft", src)).collect::<String>()));
    // Both branches run at the sizes that select them ...
    assert_eq!(v64(&run(src, "s", &[t64(&[0], &[]), t64(&[2], &[1.0, 2.0])])), vec![1.0, 2.0]);
    assert_eq!(v64(&run(src, "s", &[t64(&[2], &[1.0, 2.0]), t64(&[2], &[3.0, 4.0])])), vec![4.0, 6.0]);
    // ... and `run` still reports the failing branch where it is taken.
    let d = m.run("s", &[t64(&[2], &[1.0, 2.0]), t64(&[3], &[1.0, 2.0, 3.0])]).unwrap_err();
    assert!(d.message.contains("broadcast"), "{}", d.message);
    // A run after `check` does not reuse what check lowered through the
    // other branch (check's fallback instances are not cached).
    let m = module(src);
    m.check().unwrap();
    assert!(m.run("s", &[t64(&[11], &[1.0; 11]), t64(&[13], &[1.0; 13])]).is_err());
    // When both branches fail, or the condition is a literal, check fails.
    for bad in [
        "def u(a: tensor[n, f64], b: tensor[m, f64]) -> tensor[m, f64] = if size(a) == 0 then a + b else a * b\n",
        "def t(a: tensor[n, f64], b: tensor[m, f64]) -> tensor[m, f64] = if true then a + b else b\n",
    ] {
        let ds = module(bad).check().unwrap_err();
        assert!(ds[0].message.contains("broadcast"), "{bad}: {}", ds[0].message);
    }
}

/// `check` tries distinct primes first (mixed-up dimensions disagree), then
/// multiples of 24: a def that splits an axis (a model axis into 4 heads)
/// checks, a genuine size mix-up is still reported with the primes.
#[test]
fn check_accepts_axis_splits_and_still_reports_mixed_up_sizes() {
    let heads = "def split(h: tensor[t, d, f32]) -> tensor[t, 4, d, f32] {\n\
                   let q = reshape(h, (size(h, 0), 4, size(h, 1) // 4))\n\
                   broadcast_to(expand_dims(sum(q, axis=2), 2), (size(h, 0), 4, size(h, 1)))\n\
                 }\n";
    module(heads)
        .check()
        .unwrap_or_else(|ds| panic!("{}", ds.iter().map(|d| diag::render(d, "t.graft", heads)).collect::<String>()));
    let mixed = "def f(x: tensor[n, f64], y: tensor[m, f64]) -> tensor[n, f64] = x + y\n";
    let ds = module(mixed).check().unwrap_err();
    let text = diag::render(&ds[0], "t.graft", mixed);
    assert!(text.contains("placeholder sizes n=11, m=13"), "{text}");
}

/// Two `jvp`s of one lambda at the same primal share its primal work: the
/// graph the executor runs computes `sin`, `cos` and `exp` of `x` once.
#[test]
fn two_jvps_of_one_function_share_their_primal_computations() {
    use graft_core::ops::Op;
    let src = "def f(x: tensor[n, f64]) -> tensor[n, f64] = sin(x) * exp(x)\n\
               def main(x: tensor[n, f64]) -> (tensor[n, f64], tensor[n, f64]) {\n  \
               let (y1, t1) = jvp(f, (x,), (x,))\n  let (y2, t2) = jvp(f, (x,), (x * 2.0,))\n  (t1 + y1, t2 + y2)\n}\n";
    let m = module(src);
    let ty = graft_core::TensorType::new(graft_core::DType::F64, vec![4]);
    let c = m.instantiate("main", &[ty]).unwrap_or_else(|d| panic!("{}", d.message));
    let exe = graft_core::Executable::new(c.func.clone()).unwrap();
    for name in ["sin", "cos", "exp"] {
        let n = exe.func().eqns.iter().filter(|e| e.prim.name() == name).count();
        assert_eq!(n, 1, "`{name}` computed {n} times:\n{}", exe.func());
    }
    let x = Tensor::from_vec(vec![4], vec![0.5f64, -1.0, 2.0, 0.0]).unwrap();
    let out = run(src, "main", &[x]);
    for (k, scale) in [(0, 1.0), (1, 2.0)] {
        let got = v64(part(&out, k));
        for (i, &x) in [0.5f64, -1.0, 2.0, 0.0].iter().enumerate() {
            let y = x.sin() * x.exp();
            let t = scale * x * (x.cos() * x.exp() + x.sin() * x.exp());
            assert!((got[i] - (t + y)).abs() < 1e-12, "{k} {i}: {} vs {}", got[i], t + y);
        }
    }
}
