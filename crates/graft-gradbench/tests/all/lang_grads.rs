//! Each eval's derivative, as the graft program computes it, against central
//! finite differences of the same program's objective (f64, small inputs),
//! through the backend exactly as `graft gradbench` runs it.

use graft_gradbench::{Backend, LangBackend};
use serde_json::{json, Value};

fn eval(b: &mut LangBackend, module: &str, function: &str, input: &Value) -> Value {
    b.define(module).expect("module defines");
    let args = b.decode(module, function, input).expect("input decodes");
    let prog = b.compile(module, function, &args).expect("entry compiles");
    let out = b.run(&prog, &args).expect("entry runs");
    b.encode(module, function, &args, out).expect("output encodes")
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Flattened numbers of a (nested) JSON list.
fn flat(v: &Value) -> Vec<f64> {
    match v {
        Value::Array(xs) => xs.iter().flat_map(flat).collect(),
        other => vec![num(other)],
    }
}

/// Adds `h` to the `i`-th number (row-major) of `field` in `input`.
fn bump(input: &Value, field: &str, i: usize, h: f64) -> Value {
    fn go(v: &mut Value, i: &mut usize, h: f64) -> bool {
        match v {
            Value::Array(xs) => xs.iter_mut().any(|x| go(x, i, h)),
            other if *i == 0 => {
                *other = json!(num(other) + h);
                true
            }
            _ => {
                *i -= 1;
                false
            }
        }
    }
    let mut out = input.clone();
    let mut k = i;
    assert!(go(&mut out[field], &mut k, h), "index {i} out of range in `{field}`");
    out
}

/// Central differences of the scalar `f` in every element of `field`.
fn fd(b: &mut LangBackend, module: &str, f: &str, input: &Value, field: &str, h: f64) -> Vec<f64> {
    let n = flat(&input[field]).len();
    (0..n)
        .map(|i| {
            let up = num(&eval(b, module, f, &bump(input, field, i, h)));
            let down = num(&eval(b, module, f, &bump(input, field, i, -h)));
            (up - down) / (2.0 * h)
        })
        .collect()
}

fn assert_close(what: &str, got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= tol * (1.0 + w.abs()), "{what}[{i}]: graft {g} vs finite differences {w}");
    }
}

#[test]
fn hello_double_is_the_derivative_of_square() {
    let mut b = LangBackend::new();
    for x in [-1.5, 0.25, 3.0] {
        let want = (num(&eval(&mut b, "hello", "square", &json!(x + 1e-5)))
            - num(&eval(&mut b, "hello", "square", &json!(x - 1e-5))))
            / 2e-5;
        assert_close("double", &[num(&eval(&mut b, "hello", "double", &json!(x)))], &[want], 1e-8);
    }
}

#[test]
fn lse_gradient_matches_finite_differences() {
    let mut b = LangBackend::new();
    let input = json!({"x": [0.3, -1.2, 2.5, 0.0, 2.5, 1.7]});
    let g = flat(&eval(&mut b, "lse", "gradient", &input));
    assert_close("lse", &g, &fd(&mut b, "lse", "primal", &input, "x", 1e-5), 1e-8);
    assert!((g.iter().sum::<f64>() - 1.0).abs() < 1e-12, "softmax sums to one");
}

#[test]
fn llsq_gradient_matches_finite_differences() {
    let mut b = LangBackend::new();
    // Odd n puts one sample exactly at t = 0, where sign is 0; n > 512
    // takes the program's other (Horner) branch.
    for n in [7, 8, 601] {
        let input = json!({"x": [0.5, -0.25, 1.0, 0.125, -2.0], "n": n});
        let g = flat(&eval(&mut b, "llsq", "gradient", &input));
        assert_close("llsq", &g, &fd(&mut b, "llsq", "primal", &input, "x", 1e-5), 1e-7);
    }
}

#[test]
fn ode_gradient_matches_finite_differences_of_the_last_component() {
    let mut b = LangBackend::new();
    let input = json!({"x": [0.7, -0.4, 1.3, 0.9, -1.1], "s": 3});
    let g = flat(&eval(&mut b, "ode", "gradient", &input));
    let n = g.len();
    let want: Vec<f64> = (0..n)
        .map(|i| {
            let up = flat(&eval(&mut b, "ode", "primal", &bump(&input, "x", i, 1e-5)))[n - 1];
            let down = flat(&eval(&mut b, "ode", "primal", &bump(&input, "x", i, -1e-5)))[n - 1];
            (up - down) / 2e-5
        })
        .collect();
    assert_close("ode", &g, &want, 1e-8);
}

#[test]
fn kmeans_dir_is_finite_difference_gradient_over_curvature() {
    let mut b = LangBackend::new();
    let input = json!({
        "points": [[0.1, 0.9], [0.4, 0.2], [0.8, 0.7], [0.35, 0.5], [0.9, 0.1], [0.6, 0.55]],
        "centroids": [[0.35, 0.5], [0.9, 0.1], [0.6, 0.55]]
    });
    let h = 1e-4;
    let c0 = num(&eval(&mut b, "kmeans", "cost", &input));
    let mut want = Vec::new();
    for i in 0..6 {
        let up = num(&eval(&mut b, "kmeans", "cost", &bump(&input, "centroids", i, h)));
        let down = num(&eval(&mut b, "kmeans", "cost", &bump(&input, "centroids", i, -h)));
        let j = (up - down) / (2.0 * h);
        let hess = (up - 2.0 * c0 + down) / (h * h);
        want.push(j / hess);
    }
    assert_close("kmeans dir", &flat(&eval(&mut b, "kmeans", "dir", &input)), &want, 1e-5);
}

#[test]
fn gmm_jacobian_matches_finite_differences() {
    let mut b = LangBackend::new();
    let input = json!({
        "d": 3, "k": 2, "n": 4, "m": 2, "gamma": 1.3,
        "x": [[0.1, -0.3, 0.8], [1.2, 0.4, -0.5], [-0.7, 0.9, 0.2], [0.3, 0.3, 1.1]],
        "alpha": [0.2, -0.6],
        "mu": [[0.0, 0.1, 0.5], [0.6, -0.2, 0.3]],
        "q": [[0.1, -0.2, 0.3], [-0.1, 0.25, 0.05]],
        "l": [[0.4, -0.3, 0.2], [0.1, 0.5, -0.45]]
    });
    let jac = eval(&mut b, "gmm", "jacobian", &input);
    for field in ["alpha", "mu", "q", "l"] {
        let want = fd(&mut b, "gmm", "objective", &input, field, 1e-5);
        assert_close(field, &flat(&jac[field]), &want, 1e-7);
    }
}

#[test]
fn gmm_objective_includes_the_wishart_normaliser() {
    // k = 1, d = 2, n = 1, x = mu, q = l = 0, alpha = 0, gamma = 1, m = 0:
    // the data term is log(1) = 0 at the mean, and Q = I, so the objective is
    //   -log(2 pi) - 1/2 (2) + C,  C = 3 * 2 * (0 - log(2)/2) - log Gamma_2(3/2),
    //   log Gamma_2(3/2) = log(pi)/2 + log Gamma(3/2) + log Gamma(1) = log(pi)/2 + log(sqrt(pi)/2).
    let mut b = LangBackend::new();
    let input = json!({"d": 2, "k": 1, "n": 1, "m": 0, "gamma": 1.0, "x": [[0.5, -0.5]], "alpha": [0.0],
                       "mu": [[0.5, -0.5]], "q": [[0.0, 0.0]], "l": [[0.0]]});
    let pi = std::f64::consts::PI;
    let lgd = 0.5 * pi.ln() + (pi.sqrt() / 2.0).ln();
    let c = -3.0 * 2f64.ln() - lgd;
    let want = -(2.0 * pi).ln() - 1.0 + c;
    let got = num(&eval(&mut b, "gmm", "objective", &input));
    assert!((got - want).abs() < 1e-12, "graft {got} vs {want}");
}
