//! `lstm` through the language backend: recorded message lines through the
//! server against a plain-f64 re-implementation of ADBench's loop (the golden
//! tool's order of operations), the `jacobian` against central differences
//! of graft's own `objective`, and the input errors.

use graft_gradbench::{Backend, LangBackend};
use serde_json::{json, Value};

use crate::lang_util;
use lang_util::session;

fn eval(b: &mut LangBackend, function: &str, input: &Value) -> Value {
    b.define("lstm").expect("module defines");
    let args = b.decode("lstm", function, input).expect("input decodes");
    let prog = b.compile("lstm", function, &args).expect("entry compiles");
    let out = b.run(&prog, &args).expect("entry runs");
    b.encode("lstm", function, &args, out).expect("output encodes")
}

fn rows(v: &Value) -> Vec<Vec<f64>> {
    v.as_array()
        .expect("rows")
        .iter()
        .map(|r| r.as_array().expect("row").iter().map(|x| x.as_f64().expect("number")).collect())
        .collect()
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// ADBench's objective, step by step and layer by layer as the C++ golden
/// tool computes it (the state is copied; `lse` carries the `+ 2`).
fn reference(input: &Value) -> f64 {
    let (main, extra, mut state, seq) =
        (rows(&input["main_params"]), rows(&input["extra_params"]), rows(&input["state"]), rows(&input["sequence"]));
    let (l, b) = (main.len() / 2, seq[0].len());
    let mut total = 0.0;
    for t in 0..seq.len() - 1 {
        let mut x: Vec<f64> = (0..b).map(|i| seq[t][i] * extra[0][i]).collect();
        for layer in 0..l {
            let (w, bias) = (&main[2 * layer], &main[2 * layer + 1]);
            for i in 0..b {
                let h = state[2 * layer][i];
                let forget = sigmoid(x[i] * w[i] + bias[i]);
                let ingate = sigmoid(h * w[b + i] + bias[b + i]);
                let outgate = sigmoid(x[i] * w[2 * b + i] + bias[2 * b + i]);
                let change = (h * w[3 * b + i] + bias[3 * b + i]).tanh();
                let cell = state[2 * layer + 1][i] * forget + ingate * change;
                state[2 * layer + 1][i] = cell;
                state[2 * layer][i] = outgate * cell.tanh();
            }
            x = state[2 * layer].clone();
        }
        let pred: Vec<f64> = (0..b).map(|i| x[i] * extra[1][i] + extra[2][i]).collect();
        let lse = (pred.iter().map(|p| p.exp()).sum::<f64>() + 2.0).ln();
        total += (0..b).map(|i| seq[t + 1][i] * (pred[i] - lse)).sum::<f64>();
    }
    -total / ((seq.len() - 1) * b) as f64
}

/// A deterministic input: `l` layers, `c` characters of `b` bits.
fn input(l: usize, c: usize, b: usize) -> Value {
    let mut s = 0.37f64;
    let mut next = || {
        s = (s * 997.0 + 0.123).fract();
        s
    };
    let mut mat = |r: usize, k: usize| -> Vec<Vec<f64>> { (0..r).map(|_| (0..k).map(|_| next()).collect()).collect() };
    let main = mat(2 * l, 4 * b);
    let extra = mat(3, b);
    let state = mat(2 * l, b);
    let text = "Graft differentiates programs.";
    let seq: Vec<Vec<f64>> =
        text.bytes().cycle().take(c).map(|ch| (0..b).map(|i| f64::from((ch >> (b - 1 - i)) & 1)).collect()).collect();
    json!({"main_params": main, "extra_params": extra, "state": state, "sequence": seq})
}

#[test]
fn recorded_session_matches_the_reference_loop() {
    let (one, three) = (input(1, 6, 7), input(3, 9, 5));
    let msg = |id: usize, f: &str, inp: &Value| {
        json!({"id": id, "kind": "evaluate", "module": "lstm", "function": f, "input": inp}).to_string()
    };
    let rs = session(&[
        r#"{"id": 0, "kind": "define", "module": "lstm"}"#.to_string(),
        msg(1, "objective", &one),
        msg(2, "objective", &three),
        msg(3, "jacobian", &three),
    ]);
    assert_eq!(rs[0]["success"], true);
    for (r, inp) in [(&rs[1], &one), (&rs[2], &three)] {
        let (got, want) = (r["output"].as_f64().expect("objective is a number"), reference(inp));
        assert!((got - want).abs() <= 1e-13 * (1.0 + want.abs()), "graft {got} vs reference {want}");
    }
    // 2l rows of 4b, then 3 rows of b: one flat vector.
    assert_eq!(rs[3]["output"].as_array().expect("flat jacobian").len(), 2 * 3 * 4 * 5 + 3 * 5);
}

#[test]
fn jacobian_matches_finite_differences_of_the_objective() {
    let mut b = LangBackend::new();
    for (l, c, bits) in [(1, 5, 3), (2, 7, 4)] {
        let inp = input(l, c, bits);
        let g: Vec<f64> =
            eval(&mut b, "jacobian", &inp).as_array().expect("flat").iter().map(|x| x.as_f64().unwrap()).collect();
        let mut want = Vec::new();
        let h = 1e-5;
        for field in ["main_params", "extra_params"] {
            let (r, k) = (rows(&inp[field]).len(), rows(&inp[field])[0].len());
            for i in 0..r * k {
                let mut up = inp.clone();
                let mut down = inp.clone();
                let x = inp[field][i / k][i % k].as_f64().unwrap();
                up[field][i / k][i % k] = json!(x + h);
                down[field][i / k][i % k] = json!(x - h);
                let fu = eval(&mut b, "objective", &up).as_f64().unwrap();
                let fd = eval(&mut b, "objective", &down).as_f64().unwrap();
                want.push((fu - fd) / (2.0 * h));
            }
        }
        assert_eq!(g.len(), want.len());
        for (i, (x, y)) in g.iter().zip(&want).enumerate() {
            assert!((x - y).abs() <= 1e-8 * (1.0 + y.abs()), "l={l} [{i}]: graft {x} vs finite differences {y}");
        }
    }
}

#[test]
fn wrong_shapes_are_errors_and_the_session_goes_on() {
    let good = input(2, 4, 3);
    let mut odd_rows = good.clone();
    odd_rows["main_params"].as_array_mut().unwrap().pop();
    let mut short_row = good.clone();
    short_row["main_params"][0].as_array_mut().unwrap().pop();
    let mut one_char = good.clone();
    one_char["sequence"].as_array_mut().unwrap().truncate(1);
    let mut two_extra = good.clone();
    two_extra["extra_params"].as_array_mut().unwrap().pop();
    let mut state_bits = good.clone();
    for r in state_bits["state"].as_array_mut().unwrap() {
        r.as_array_mut().unwrap().push(json!(0.5));
    }
    let msg = |id: usize, inp: &Value| {
        json!({"id": id, "kind": "evaluate", "module": "lstm", "function": "objective", "input": inp}).to_string()
    };
    let rs = session(&[
        r#"{"id": 0, "kind": "define", "module": "lstm"}"#.to_string(),
        msg(1, &odd_rows),
        msg(2, &short_row),
        msg(3, &one_char),
        msg(4, &two_extra),
        msg(5, &state_bits),
        msg(6, &good),
    ]);
    let err = |i: usize| -> String {
        assert_eq!(rs[i]["success"], false, "{}", rs[i]);
        rs[i]["error"].as_str().expect("error string").to_string()
    };
    assert!(err(1).contains("main_params") && err(1).contains("2l rows"), "{}", err(1));
    assert!(err(2).contains("main_params"), "{}", err(2));
    assert!(err(3).contains("two characters"), "{}", err(3));
    assert!(err(4).contains("extra_params"), "{}", err(4));
    assert!(err(5).contains("state"), "{}", err(5));
    assert!((rs[6]["output"].as_f64().expect("good input still served") - reference(&good)).abs() < 1e-13);
}
