//! `det` through the language backend: recorded message lines through the
//! server against closed forms (2x2 / 3x3 determinants and cofactors) and
//! Gaussian elimination (the larger sizes that take the prefix-by-chunk
//! path), the `gradient` against central differences of graft's own
//! `primal`, and the input errors.

use graft_gradbench::{Backend, LangBackend};
use serde_json::{json, Value};

use crate::lang_util;
use lang_util::session;

fn eval(b: &mut LangBackend, function: &str, input: &Value) -> Value {
    b.define("det").expect("module defines");
    let args = b.decode("det", function, input).expect("input decodes");
    let prog = b.compile("det", function, &args).expect("entry compiles");
    let out = b.run(&prog, &args).expect("entry runs");
    b.encode("det", function, &args, out).expect("output encodes")
}

fn nums(v: &Value) -> Vec<f64> {
    v.as_array().expect("list").iter().map(|x| x.as_f64().expect("number")).collect()
}

/// A deterministic ell x ell matrix, row-major.
fn matrix(ell: usize, seed: f64) -> Vec<f64> {
    let mut s = seed;
    (0..ell * ell)
        .map(|_| {
            s = (s * 991.0 + 0.311).fract();
            2.0 * s - 1.0
        })
        .collect()
}

/// Determinant by Gaussian elimination with partial pivoting.
fn lu_det(a: &[f64], n: usize) -> f64 {
    let mut m = a.to_vec();
    let mut det = 1.0;
    for c in 0..n {
        let p = (c..n).max_by(|&i, &j| m[i * n + c].abs().total_cmp(&m[j * n + c].abs())).unwrap();
        if p != c {
            for k in 0..n {
                m.swap(c * n + k, p * n + k);
            }
            det = -det;
        }
        det *= m[c * n + c];
        for r in c + 1..n {
            let f = m[r * n + c] / m[c * n + c];
            for k in c..n {
                m[r * n + k] -= f * m[c * n + k];
            }
        }
    }
    det
}

fn close(got: f64, want: f64, tol: f64) {
    assert!((got - want).abs() <= tol * (1.0 + want.abs()), "graft {got} vs {want}");
}

#[test]
fn recorded_session_matches_closed_forms_and_elimination() {
    let msg = |id: usize, f: &str, a: &[f64], ell: usize| {
        json!({"id": id, "kind": "evaluate", "module": "det", "function": f,
               "input": {"A": a, "ell": ell, "min_runs": 2, "min_seconds": 0}})
        .to_string()
    };
    let a2 = [2.0, -1.0, 3.0, 4.0];
    let a3 = [2.0, 0.5, 1.0, -1.0, 3.0, 2.0, 4.0, 1.0, -2.0];
    let (a8, a9) = (matrix(8, 0.41), matrix(9, 0.17));
    let rs = session(&[
        r#"{"id": 0, "kind": "define", "module": "det"}"#.to_string(),
        msg(1, "primal", &a2, 2),
        msg(2, "gradient", &a2, 2),
        msg(3, "primal", &a3, 3),
        msg(4, "gradient", &a3, 3),
        msg(5, "primal", &a8, 8),
        msg(6, "primal", &a9, 9),
        msg(7, "primal", &[-2.5], 1),
        msg(8, "gradient", &[-2.5], 1),
    ]);
    assert_eq!(rs[0]["success"], true);
    close(rs[1]["output"].as_f64().unwrap(), 11.0, 1e-15);
    assert_eq!(nums(&rs[2]["output"]), [4.0, -3.0, 1.0, 2.0]);
    // 3x3: det by the rule of Sarrus, gradient = cofactor matrix.
    let m = |i: usize, j: usize| a3[i * 3 + j];
    let cof = |i: usize, j: usize| {
        let (r0, r1) = ((i + 1) % 3, (i + 2) % 3);
        let (c0, c1) = ((j + 1) % 3, (j + 2) % 3);
        m(r0, c0) * m(r1, c1) - m(r0, c1) * m(r1, c0)
    };
    let det3: f64 = (0..3).map(|j| m(0, j) * cof(0, j)).sum();
    close(rs[3]["output"].as_f64().unwrap(), det3, 1e-14);
    let g3 = nums(&rs[4]["output"]);
    for i in 0..3 {
        for j in 0..3 {
            close(g3[i * 3 + j], cof(i, j), 1e-14);
        }
    }
    close(rs[5]["output"].as_f64().unwrap(), lu_det(&a8, 8), 1e-11);
    close(rs[6]["output"].as_f64().unwrap(), lu_det(&a9, 9), 1e-11);
    assert_eq!(rs[7]["output"], json!(-2.5));
    assert_eq!(nums(&rs[8]["output"]), [1.0]);
    let runs = rs[5]["timings"].as_array().unwrap().iter().filter(|t| t["name"] == "evaluate").count();
    assert_eq!(runs, 2);
}

#[test]
fn gradient_matches_finite_differences_of_the_primal() {
    let mut b = LangBackend::new();
    // 4: one suffix table only; 8: eight prefixes in one chunk.
    for ell in [4, 8] {
        let a = matrix(ell, 0.29);
        let g = nums(&eval(&mut b, "gradient", &json!({"A": a, "ell": ell})));
        assert_eq!(g.len(), ell * ell);
        let h = 1e-5;
        for i in 0..ell * ell {
            let (mut up, mut down) = (a.clone(), a.clone());
            up[i] += h;
            down[i] -= h;
            let fu = eval(&mut b, "primal", &json!({"A": up, "ell": ell})).as_f64().unwrap();
            let fd = eval(&mut b, "primal", &json!({"A": down, "ell": ell})).as_f64().unwrap();
            close(g[i], (fu - fd) / (2.0 * h), 1e-8);
        }
    }
}

#[test]
fn bad_inputs_are_errors_and_the_session_goes_on() {
    let msg = |id: usize, input: Value| {
        json!({"id": id, "kind": "evaluate", "module": "det", "function": "primal", "input": input}).to_string()
    };
    let rs = session(&[
        r#"{"id": 0, "kind": "define", "module": "det"}"#.to_string(),
        msg(1, json!({"A": [1.0, 2.0, 3.0], "ell": 2})),
        msg(2, json!({"A": [], "ell": 0})),
        msg(3, json!({"A": vec![0.0; 196], "ell": 14})),
        msg(4, json!({"A": [1.0, 2.0, 3.0, 4.0]})),
        msg(5, json!({"A": [[1.0, 2.0], [3.0, 4.0]], "ell": 2})),
        msg(6, json!({"A": [1.0, 2.0, 3.0, 4.0], "ell": 2})),
    ]);
    let err = |i: usize| -> String {
        assert_eq!(rs[i]["success"], false, "{}", rs[i]);
        rs[i]["error"].as_str().expect("error string").to_string()
    };
    assert!(err(1).contains("`A`"), "{}", err(1));
    assert!(err(2).contains("ell") && err(2).contains("between 1 and 13"), "{}", err(2));
    assert!(err(3).contains("between 1 and 13"), "{}", err(3));
    assert!(err(4).contains("ell"), "{}", err(4));
    assert!(err(5).contains("`A`"), "{}", err(5));
    close(rs[6]["output"].as_f64().expect("good input still served"), -2.0, 1e-15);
}
