//! `particle` (nested AD through a data-dependent Euler loop): the four
//! GradBench functions through the real server against GradBench's fixed
//! answer, the outer derivative (all four mode pairs) and the inner
//! gradient against central finite differences of the program's own
//! objective in f64, and the error paths.

use graft_core::Tensor;
use graft_lang::Module;

use crate::lang_util;
use lang_util::{call, session};

const SRC: &str = include_str!("../../../../gradbench/particle.graft");

fn module() -> Module {
    let m = Module::from_source("particle.graft", SRC).expect("parses");
    m.check().expect("checks");
    m
}

fn f(x: f64) -> Tensor {
    Tensor::scalar(x)
}

fn i(x: i32) -> Tensor {
    Tensor::scalar(x)
}

#[test]
fn all_four_functions_find_gradbench_s_w() {
    let rs = session(&[
        r#"{"id": 0, "kind": "define", "module": "particle"}"#,
        r#"{"id": 1, "kind": "evaluate", "module": "particle", "function": "rr", "input": {"w": 0.0, "min_runs": 1, "min_seconds": 0}}"#,
        r#"{"id": 2, "kind": "evaluate", "module": "particle", "function": "ff", "input": {"w": 0.0}}"#,
        r#"{"id": 3, "kind": "evaluate", "module": "particle", "function": "fr", "input": {"w": 0.0}}"#,
        r#"{"id": 4, "kind": "evaluate", "module": "particle", "function": "rf", "input": {"w": 0.0}}"#,
    ]);
    assert_eq!(rs[0]["success"], true, "{:?}", rs[0]);
    let outs: Vec<f64> = rs[1..].iter().map(|r| r["output"].as_f64().unwrap_or_else(|| panic!("{r}"))).collect();
    for o in &outs {
        // GradBench's expected value (validated at 1e-4); the same solver
        // steps give it to rounding.
        assert!((o - 0.2071918746486116).abs() < 1e-9, "{outs:?}");
    }
    // All modes compute the same derivatives up to rounding, so the same w.
    assert!(outs.iter().all(|o| (o - outs[0]).abs() < 1e-12), "{outs:?}");
}

#[test]
fn outer_derivative_matches_finite_differences_in_every_mode() {
    let m = module();
    let h = 1e-6;
    // Inputs whose trajectory lands (w = -0.8 or 2 never does).
    for w in [-0.3, 0.0, 0.35] {
        for inner in [0, 1] {
            let up = call(&m, "objective", &[f(w + h), i(inner)])[0];
            let down = call(&m, "objective", &[f(w - h), i(inner)])[0];
            let want = (up - down) / (2.0 * h);
            for outer in [0, 1] {
                let got = call(&m, "derivative", &[f(w), i(outer), i(inner)])[0];
                assert!(
                    (got - want).abs() <= 1e-6 * (1.0 + want.abs()),
                    "w = {w}, outer {outer}, inner {inner}: graft {got} vs finite differences {want}"
                );
            }
        }
    }
    // At w = 0 an independent f64 re-implementation of the C++ gives the
    // objective 3.199079002508199 and (central difference, h = 1e-6) the
    // derivative -19.404636488.
    assert!((call(&m, "objective", &[f(0.0), i(1)])[0] - 3.199079002508199).abs() < 1e-12);
    assert!((call(&m, "derivative", &[f(0.0), i(1), i(1)])[0] + 19.404636488).abs() < 1e-6);
}

#[test]
fn inner_gradient_matches_finite_differences_in_both_modes() {
    let m = module();
    let h = 1e-6;
    let (px, py, w) = (1.3, 4.2, 0.4);
    let p = |x: f64, y: f64| call(&m, "potential", &[f(x), f(y), f(w)])[0];
    let want = [(p(px + h, py) - p(px - h, py)) / (2.0 * h), (p(px, py + h) - p(px, py - h)) / (2.0 * h)];
    for entry in ["dp_r", "dp_f"] {
        let got = call(&m, entry, &[f(px), f(py), f(w)]);
        for k in 0..2 {
            assert!((got[k] - want[k]).abs() <= 1e-7 * (1.0 + want[k].abs()), "{entry}: {got:?} vs {want:?}");
        }
    }
}

#[test]
fn a_trajectory_that_never_lands_is_nan_not_a_hang() {
    // w = 10 puts both charges at (10, 0): the particle is pushed away and
    // never crosses the axis; the integration gives up after 100000 steps.
    let m = module();
    assert!(call(&m, "objective", &[f(10.0), i(1)])[0].is_nan());
}

#[test]
fn bad_inputs_fail_and_the_session_goes_on() {
    let rs = session(&[
        r#"{"id": 0, "kind": "define", "module": "particle"}"#,
        r#"{"id": 1, "kind": "evaluate", "module": "particle", "function": "rr", "input": {}}"#,
        r#"{"id": 2, "kind": "evaluate", "module": "particle", "function": "rr", "input": {"w": [0.0, 1.0]}}"#,
        r#"{"id": 3, "kind": "evaluate", "module": "particle", "function": "rr", "input": {"w": "zero"}}"#,
        r#"{"id": 4, "kind": "evaluate", "module": "particle", "function": "gradient", "input": {"w": 0.0}}"#,
        r#"{"id": 5, "kind": "evaluate", "module": "particle", "function": "ff", "input": {"w": 0.0}}"#,
    ]);
    for r in &rs[1..5] {
        assert_eq!(r["success"], false, "{r}");
        assert!(r["error"].as_str().is_some_and(|e| !e.is_empty()), "{r}");
    }
    assert!(rs[1]["error"].as_str().unwrap().contains('w'), "{}", rs[1]);
    assert!((rs[5]["output"].as_f64().expect("number") - 0.2071918746486116).abs() < 1e-9);
}
