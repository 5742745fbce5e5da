//! `saddle` (nested gradient descent: an argmin over x of an argmax over y):
//! the four GradBench functions through the real server against
//! GradBench's fixed answer, the outer gradient through the inner solver
//! (all four mode pairs) against central finite differences of the
//! program's own objective in f64, and the error paths.

use graft_core::Tensor;
use graft_lang::Module;

use crate::lang_util;
use lang_util::{call, session};

const SRC: &str = include_str!("../../../../gradbench/saddle.graft");
const EXPECTED: f64 = 8.246324826140356e-06;

fn v2(a: f64, b: f64) -> Tensor {
    Tensor::from_vec(vec![2], vec![a, b]).expect("two numbers")
}

fn i(x: i32) -> Tensor {
    Tensor::scalar(x)
}

#[test]
fn all_four_functions_find_gradbench_s_saddle_point() {
    let rs = session(&[
        r#"{"id": 0, "kind": "define", "module": "saddle"}"#,
        r#"{"id": 1, "kind": "evaluate", "module": "saddle", "function": "rr", "input": {"start": [1.0, 1.0], "min_runs": 1, "min_seconds": 0}}"#,
        r#"{"id": 2, "kind": "evaluate", "module": "saddle", "function": "ff", "input": {"start": [1.0, 1.0]}}"#,
        r#"{"id": 3, "kind": "evaluate", "module": "saddle", "function": "fr", "input": {"start": [1.0, 1.0]}}"#,
        r#"{"id": 4, "kind": "evaluate", "module": "saddle", "function": "rf", "input": {"start": [1.0, 1.0]}}"#,
    ]);
    assert_eq!(rs[0]["success"], true, "{:?}", rs[0]);
    for r in &rs[1..] {
        let out: Vec<f64> = r["output"]
            .as_array()
            .unwrap_or_else(|| panic!("{r}"))
            .iter()
            .map(|v| v.as_f64().expect("number"))
            .collect();
        assert_eq!(out.len(), 4, "{r}");
        for o in out {
            assert!((o - EXPECTED).abs() < 1e-12, "{r}");
        }
    }
}

#[test]
fn outer_gradient_through_the_inner_solver_matches_finite_differences() {
    let m = Module::from_source("saddle.graft", SRC).expect("parses");
    m.check().expect("checks");
    let h = 1e-6;
    let start = v2(1.0, 1.0);
    for (a, b) in [(0.3, -0.7), (1.0, 1.0), (-2.0, 0.5)] {
        for inner in [0, 1] {
            let at = |x: f64, y: f64| call(&m, "max_y", &[v2(x, y), start.clone(), i(inner)])[0];
            let want = [(at(a + h, b) - at(a - h, b)) / (2.0 * h), (at(a, b + h) - at(a, b - h)) / (2.0 * h)];
            for outer in [0, 1] {
                let got = call(&m, "d_max_y", &[v2(a, b), start.clone(), i(outer), i(inner)]);
                for k in 0..2 {
                    assert!(
                        (got[k] - want[k]).abs() <= 1e-6 * (1.0 + want[k].abs()),
                        "x = ({a}, {b}), outer {outer}, inner {inner}: graft {got:?} vs finite differences {want:?}"
                    );
                }
            }
        }
    }
    // The inner argmax does not depend on x, so the gradient is 2x.
    let g = call(&m, "d_max_y", &[v2(0.3, -0.7), start.clone(), i(1), i(1)]);
    assert!((g[0] - 0.6).abs() < 1e-12 && (g[1] + 1.4).abs() < 1e-12, "{g:?}");
    // The inner argmax alone, in both modes: y* near 0, the same in both.
    let yr = call(&m, "argmax_y", &[v2(0.3, -0.7), start.clone(), i(1)]);
    let yf = call(&m, "argmax_y", &[v2(0.3, -0.7), start, i(0)]);
    assert_eq!(yr, yf);
    assert!((yr[0] - EXPECTED).abs() < 1e-12 && (yr[1] - EXPECTED).abs() < 1e-12, "{yr:?}");
}

#[test]
fn bad_inputs_fail_and_the_session_goes_on() {
    let rs = session(&[
        r#"{"id": 0, "kind": "define", "module": "saddle"}"#,
        r#"{"id": 1, "kind": "evaluate", "module": "saddle", "function": "rr", "input": {"start": [1.0, 1.0, 1.0]}}"#,
        r#"{"id": 2, "kind": "evaluate", "module": "saddle", "function": "rr", "input": {"start": 1.0}}"#,
        r#"{"id": 3, "kind": "evaluate", "module": "saddle", "function": "rr", "input": {"begin": [1.0, 1.0]}}"#,
        r#"{"id": 4, "kind": "evaluate", "module": "saddle", "function": "r", "input": {"start": [1.0, 1.0]}}"#,
        r#"{"id": 5, "kind": "evaluate", "module": "saddle", "function": "fr", "input": {"start": [1.0, 1.0]}}"#,
    ]);
    for r in &rs[1..5] {
        assert_eq!(r["success"], false, "{r}");
        assert!(r["error"].as_str().is_some_and(|e| !e.is_empty()), "{r}");
    }
    assert!(rs[1]["error"].as_str().unwrap().contains("start"), "{}", rs[1]);
    assert_eq!(rs[5]["output"].as_array().map(Vec::len), Some(4), "{}", rs[5]);
}
