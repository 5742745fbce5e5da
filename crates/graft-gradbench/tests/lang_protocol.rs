//! Protocol tests of the language backend (`LangBackend`, the `graft
//! gradbench` tool): recorded GradBench message lines go through the real
//! server, and the responses are checked field by field and against values
//! worked out by hand.

use graft_gradbench::{LangBackend, Server};
use serde_json::{json, Value};

fn session(lines: &[&str]) -> (Vec<Value>, Server<LangBackend>) {
    let mut server = Server::new(LangBackend::new());
    let mut input = lines.join("\n");
    input.push('\n');
    let mut out = Vec::new();
    server.serve(input.as_bytes(), &mut out).expect("serving to memory cannot fail");
    let text = String::from_utf8(out).expect("responses are UTF-8");
    let rs = text.lines().map(|l| serde_json::from_str(l).expect("response is JSON")).collect();
    (rs, server)
}

fn error_of(r: &Value) -> &str {
    assert_eq!(r["success"], false, "expected a failure: {r}");
    r["error"].as_str().expect("failure carries an error string")
}

fn close(a: &Value, b: &[f64]) {
    let a: Vec<f64> = a.as_array().expect("array").iter().map(|v| v.as_f64().expect("number")).collect();
    assert_eq!(a.len(), b.len(), "{a:?} vs {b:?}");
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() <= 1e-12 * (1.0 + y.abs()), "{a:?} vs {b:?}");
    }
}

#[test]
fn hello_session_is_answered_with_graft_numbers() {
    let (rs, _) = session(&[
        r#"{"id": 0, "kind": "start", "eval": "hello"}"#,
        r#"{"id": 1, "kind": "define", "module": "hello"}"#,
        r#"{"id": 2, "kind": "evaluate", "module": "hello", "function": "square", "input": 1.5}"#,
        r#"{"id": 3, "kind": "evaluate", "module": "hello", "function": "double", "input": 2.25}"#,
        r#"{"id": 4, "kind": "analysis", "of": 3, "valid": true}"#,
    ]);
    assert_eq!(rs[0], json!({"id": 0, "tool": "graft"}));
    assert_eq!(rs[1]["success"], true);
    assert_eq!(rs[2]["output"], json!(2.25));
    assert_eq!(rs[3]["output"], json!(4.5));
    assert_eq!(rs[4], json!({"id": 4}));
    let names: Vec<&str> = rs[2]["timings"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["compile", "evaluate"]);
}

#[test]
fn each_eval_answers_a_small_recorded_input() {
    let (rs, server) = session(&[
        r#"{"id": 0, "kind": "define", "module": "lse"}"#,
        r#"{"id": 1, "kind": "evaluate", "module": "lse", "function": "primal", "input": {"x": [0.0, 0.0], "min_runs": 3, "min_seconds": 0}}"#,
        r#"{"id": 2, "kind": "evaluate", "module": "lse", "function": "gradient", "input": {"x": [0.0, 0.0]}}"#,
        r#"{"id": 3, "kind": "define", "module": "llsq"}"#,
        r#"{"id": 4, "kind": "evaluate", "module": "llsq", "function": "primal", "input": {"x": [1, 2, 3], "n": 5}}"#,
        r#"{"id": 5, "kind": "evaluate", "module": "llsq", "function": "gradient", "input": {"x": [1, 2, 3], "n": 5}}"#,
        r#"{"id": 6, "kind": "define", "module": "kmeans"}"#,
        r#"{"id": 7, "kind": "evaluate", "module": "kmeans", "function": "cost", "input": {"points": [[0, 0], [1, 1], [3, 3]], "centroids": [[1, 1], [3, 3]]}}"#,
        r#"{"id": 8, "kind": "evaluate", "module": "kmeans", "function": "dir", "input": {"points": [[0, 0], [1, 1], [3, 3]], "centroids": [[1, 1], [3, 3]]}}"#,
        r#"{"id": 9, "kind": "define", "module": "ode"}"#,
        r#"{"id": 10, "kind": "evaluate", "module": "ode", "function": "primal", "input": {"x": [1, 2, 3], "s": 4}}"#,
        r#"{"id": 11, "kind": "evaluate", "module": "ode", "function": "gradient", "input": {"x": [1, 2, 3], "s": 4}}"#,
        r#"{"id": 12, "kind": "define", "module": "gmm"}"#,
    ]);
    assert!(rs.iter().all(|r| r["success"] != false), "{rs:?}");
    assert_eq!(rs[1]["output"], json!(2f64.ln()));
    assert_eq!(rs[1]["timings"].as_array().unwrap().len(), 4, "one compile, three runs");
    close(&rs[2]["output"], &[0.5, 0.5]);
    // t = -1, -0.5, 0, 0.5, 1; residuals s - (1 + 2t + 3t^2) = -3, -1.75, -1, -1.75, -5.
    assert_eq!(rs[4]["output"], json!(20.5625));
    close(&rs[5]["output"], &[12.5, 2.0, 8.875]);
    // Points 0 and 1 are nearest to centroid 0, point 2 sits on centroid 1.
    assert_eq!(rs[7]["output"], json!(2.0));
    assert_eq!(rs[8]["output"], json!([[0.5, 0.5], [0.0, 0.0]]));
    // y = (t, t^2, t^3) at t = 2 (RK4 is exact for cubics); d y_2 / dx = t^3/6 (x1 x2, x0 x2, x0 x1).
    close(&rs[10]["output"], &[2.0, 4.0, 8.0]);
    close(&rs[11]["output"], &[8.0, 4.0, 8.0 / 3.0]);
    assert_eq!(server.backend().cache.misses(), 8);
}

#[test]
fn repeated_shapes_reuse_the_compiled_program() {
    let (rs, server) = session(&[
        r#"{"id": 0, "kind": "define", "module": "lse"}"#,
        r#"{"id": 1, "kind": "evaluate", "module": "lse", "function": "gradient", "input": {"x": [1, 2, 3]}}"#,
        r#"{"id": 2, "kind": "evaluate", "module": "lse", "function": "gradient", "input": {"x": [3, 2, 1]}}"#,
        r#"{"id": 3, "kind": "evaluate", "module": "lse", "function": "gradient", "input": {"x": [3, 2]}}"#,
        r#"{"id": 4, "kind": "define", "module": "llsq"}"#,
        r#"{"id": 5, "kind": "evaluate", "module": "llsq", "function": "primal", "input": {"x": [1], "n": 4}}"#,
        r#"{"id": 6, "kind": "evaluate", "module": "llsq", "function": "primal", "input": {"x": [1], "n": 5}}"#,
    ]);
    assert!(rs.iter().all(|r| r["success"] == true), "{rs:?}");
    let g1: Vec<f64> = rs[1]["output"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    let g2: Vec<f64> = rs[2]["output"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    assert_eq!(g1, g2.iter().rev().copied().collect::<Vec<_>>());
    // lse: [3] twice, then [2]; llsq: n is structural, so n = 4 and n = 5 are two programs.
    assert_eq!((server.backend().cache.hits(), server.backend().cache.misses()), (1, 4));
    // t = -1, -1/3, 1/3, 1 (s = -1, -1, 1, 1) against 1: residuals -2, -2, 0, 0.
    assert_eq!(rs[5]["output"], json!(4.0));
}

#[test]
fn bad_requests_fail_and_the_session_goes_on() {
    let (rs, _) = session(&[
        r#"{"id": 0, "kind": "define", "module": "no_such_eval"}"#,
        r#"{"id": 1, "kind": "evaluate", "module": "lse", "function": "primal", "input": {"x": [1]}}"#,
        r#"{"id": 2, "kind": "define", "module": "gmm"}"#,
        r#"{"id": 3, "kind": "evaluate", "module": "gmm", "function": "hessian", "input": {}}"#,
        r#"{"id": 4, "kind": "evaluate", "module": "gmm", "function": "objective", "input": {"d": 2, "k": 1, "n": 1, "m": 0, "gamma": 1, "x": [[1, 2]], "alpha": [0], "mu": [[0, 0]], "q": [[0, 0]], "l": [[0, 0]]}}"#,
        r#"{"id": 5, "kind": "evaluate", "module": "gmm", "function": "objective", "input": {"d": 3, "k": 1, "n": 1, "m": 0, "gamma": 1, "x": [[1, 2]], "alpha": [0], "mu": [[0, 0]], "q": [[0, 0]], "l": [[0]]}}"#,
        r#"{"id": 6, "kind": "define", "module": "llsq"}"#,
        r#"{"id": 7, "kind": "evaluate", "module": "llsq", "function": "primal", "input": {"x": [1], "n": 1}}"#,
        r#"{"id": 8, "kind": "define", "module": "ode"}"#,
        r#"{"id": 9, "kind": "evaluate", "module": "ode", "function": "primal", "input": {"x": [1], "s": 0}}"#,
        r#"{"id": 10, "kind": "define", "module": "kmeans"}"#,
        r#"{"id": 11, "kind": "evaluate", "module": "kmeans", "function": "cost", "input": {"points": [[0, 0]], "centroids": [[1, 1, 1]]}}"#,
        r#"{"id": 12, "kind": "evaluate", "module": "hello", "function": "square", "input": [1, 2]}"#,
        r#"{"id": 13, "kind": "define", "module": "hello"}"#,
        r#"{"id": 14, "kind": "evaluate", "module": "hello", "function": "square", "input": [1, 2]}"#,
        r#"{"id": 15, "kind": "evaluate", "module": "hello", "function": "square", "input": 1e300}"#,
        r#"{"id": 16, "kind": "evaluate", "module": "hello", "function": "square", "input": 3}"#,
    ]);
    assert_eq!(error_of(&rs[0]), "unknown module `no_such_eval`");
    assert!(error_of(&rs[1]).contains("not defined"));
    assert_eq!(rs[2]["success"], true);
    assert_eq!(error_of(&rs[3]), "module `gmm` has no function `hessian`");
    assert!(error_of(&rs[4]).contains("`l`"), "{}", rs[4]);
    assert!(error_of(&rs[5]).contains("`x`") || error_of(&rs[5]).contains("`d`"), "{}", rs[5]);
    assert!(error_of(&rs[7]).contains("`n`"));
    assert!(error_of(&rs[9]).contains("`s`"));
    assert!(error_of(&rs[11]).contains("dimension d"), "{}", rs[11]);
    assert!(error_of(&rs[12]).contains("not defined"));
    assert!(error_of(&rs[14]).contains("expected a number"));
    assert!(error_of(&rs[15]).contains("not finite"), "{}", rs[15]);
    assert_eq!(rs[16]["output"], json!(9.0));
}
