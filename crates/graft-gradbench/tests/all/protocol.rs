//! Protocol tests: recorded eval message lines (written from GradBench's
//! CONTRIBUTING.md "Protocol" description) are fed to the server with a small
//! graft backend, and the response lines are checked field by field,
//! including every error path and the timing policy.

use crate::common;

use common::ToyBackend;
use graft_gradbench::Server;
use serde_json::{json, Value};

/// Serves `input` (raw bytes, lines separated by '\n'); returns the parsed
/// response lines and the server.
fn session_bytes(input: &[u8]) -> (Vec<Value>, Server<ToyBackend>) {
    let mut server = Server::new(ToyBackend::new());
    let mut out = Vec::new();
    server.serve(input, &mut out).expect("serving to memory cannot fail");
    let text = String::from_utf8(out).expect("responses are UTF-8");
    let responses = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("response is not JSON ({e}): {l}")))
        .collect();
    (responses, server)
}

fn session(lines: &[&str]) -> (Vec<Value>, Server<ToyBackend>) {
    let mut input = lines.join("\n");
    input.push('\n');
    session_bytes(input.as_bytes())
}

fn timing_names(r: &Value) -> Vec<String> {
    r["timings"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_string()).collect()
}

fn evaluate_ns(r: &Value) -> Vec<u64> {
    r["timings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["name"] == "evaluate")
        .map(|t| t["nanoseconds"].as_u64().unwrap())
        .collect()
}

fn error_of(r: &Value) -> &str {
    assert_eq!(r["success"], false, "expected a failure: {r}");
    r["error"].as_str().unwrap_or_else(|| panic!("failure without an error string: {r}"))
}

#[test]
fn full_hello_session_in_the_contributing_md_shape() {
    let (rs, server) = session(&[
        r#"{ "id": 0, "kind": "start", "eval": "hello" }"#,
        r#"{ "id": 1, "kind": "define", "module": "hello" }"#,
        r#"{ "id": 2, "kind": "evaluate", "module": "hello", "function": "square", "input": 1.5 }"#,
        r#"{ "id": 3, "kind": "analysis", "of": 2, "valid": true }"#,
        r#"{ "id": 4, "kind": "evaluate", "module": "hello", "function": "double", "input": 2.25, "description": "x" }"#,
        r#"{ "id": 5, "kind": "analysis", "of": 4, "valid": false, "error": "Expected tau, got e." }"#,
        r#"{ "id": 6, "kind": "end" }"#,
    ]);
    assert_eq!(rs.len(), 7);
    assert_eq!(rs[0], json!({"id": 0, "tool": "graft"}));
    assert_eq!(rs[1]["id"], 1);
    assert_eq!(rs[1]["success"], true);
    assert_eq!(timing_names(&rs[1]), ["define"]);
    assert!(rs[1].get("error").is_none());
    assert_eq!(rs[2]["id"], 2);
    assert_eq!(rs[2]["success"], true);
    assert_eq!(rs[2]["output"], json!(2.25));
    // No min_runs/min_seconds (hello): one run, plus the compile timing.
    assert_eq!(timing_names(&rs[2]), ["compile", "evaluate"]);
    assert_eq!(rs[3], json!({"id": 3}));
    // double = d/dx x^2 = 2x, computed by graft's grad.
    assert_eq!(rs[4]["output"], json!(4.5));
    assert_eq!(rs[5], json!({"id": 5}));
    assert_eq!(rs[6], json!({"id": 6}));
    let log = server.log();
    assert_eq!((log.responses, log.failures, log.valid), (7, 0, 1));
    assert_eq!(log.invalid, vec![(4, Some("Expected tau, got e.".to_string()))]);
}

#[test]
fn malformed_lines_get_failures_and_serving_continues() {
    let mut input = Vec::new();
    for l in [
        r#"{"id": 7, "kind": "#,
        r#"[1, 2]"#,
        r#"{"kind": "start"}"#,
        r#"{"id": "x", "kind": "start"}"#,
        r#"{"id": 1.5, "kind": "start"}"#,
        r#"{"id": 3}"#,
        r#"{"id": 4, "kind": 12}"#,
        r#"{"id": 5, "kind": "define"}"#,
        r#"{"id": 6, "kind": "evaluate", "module": "lse", "function": "primal"}"#,
        r#"{"id": 8, "kind": "analysis", "of": 2}"#,
        r#"{"id": 9, "kind": "analysis", "of": 2, "valid": "yes"}"#,
        "",
        "   ",
    ] {
        input.extend_from_slice(l.as_bytes());
        input.push(b'\n');
    }
    input.extend_from_slice(b"{\"id\": 10, \"kind\": \"\xff\xfe\"}\n");
    input.extend_from_slice(br#"{"id": 11, "kind": "start"}"#);
    // The last line has no trailing newline: it is still a message.
    let (rs, server) = session_bytes(&input);
    assert_eq!(rs.len(), 13, "{rs:#?}");
    let ids: Vec<Value> = rs.iter().map(|r| r["id"].clone()).collect();
    assert_eq!(
        ids,
        [json!(null), json!(null), json!(null), json!(null), json!(null), json!(3), json!(4), json!(5), json!(6)]
            .into_iter()
            .chain([json!(8), json!(9), json!(null), json!(11)])
            .collect::<Vec<_>>()
    );
    assert!(error_of(&rs[0]).starts_with("malformed message: invalid JSON"), "{}", rs[0]);
    assert_eq!(error_of(&rs[1]), "malformed message: a message must be a JSON object, found an array");
    assert_eq!(error_of(&rs[2]), "malformed message: missing field `id`");
    assert_eq!(error_of(&rs[3]), "malformed message: field `id` must be an integer, found a string");
    assert_eq!(error_of(&rs[4]), "malformed message: field `id` must be an integer, found 1.5");
    assert_eq!(error_of(&rs[5]), "malformed message: missing field `kind`");
    assert_eq!(error_of(&rs[6]), "malformed message: field `kind` must be a string, found a number");
    assert_eq!(error_of(&rs[7]), "malformed message: missing field `module`");
    assert_eq!(error_of(&rs[8]), "malformed message: missing field `input`");
    assert_eq!(error_of(&rs[9]), "malformed message: missing field `valid`");
    assert_eq!(error_of(&rs[10]), "malformed message: field `valid` must be a boolean, found a string");
    assert!(error_of(&rs[11]).starts_with("malformed message: line is not UTF-8"), "{}", rs[11]);
    assert_eq!(rs[12], json!({"id": 11, "tool": "graft"}));
    assert_eq!((server.log().responses, server.log().failures), (13, 12));
}

#[test]
fn unknown_module_unknown_function_and_evaluate_before_define() {
    let (rs, _) = session(&[
        r#"{"id": 0, "kind": "define", "module": "gmm"}"#,
        r#"{"id": 1, "kind": "evaluate", "module": "lse", "function": "primal", "input": {"x": [1.0]}}"#,
        r#"{"id": 2, "kind": "evaluate", "module": "gmm", "function": "objective", "input": {}}"#,
        r#"{"id": 3, "kind": "define", "module": "lse"}"#,
        r#"{"id": 4, "kind": "evaluate", "module": "lse", "function": "hessian", "input": {"x": [1.0]}}"#,
        r#"{"id": 5, "kind": "evaluate", "module": "lse", "function": "primal", "input": {"x": [0.0, 0.0]}}"#,
    ]);
    assert_eq!(rs[0], json!({"id": 0, "success": false, "error": "unknown module `gmm`"}));
    assert_eq!(error_of(&rs[1]), "module `lse` was not defined: send a `define` message for it first");
    assert_eq!(error_of(&rs[2]), "module `gmm` was not defined: send a `define` message for it first");
    assert_eq!(rs[3]["success"], true);
    assert_eq!(error_of(&rs[4]), "module `lse` has no function `hessian`");
    assert!(rs[4].get("output").is_none() && rs[4].get("timings").is_none());
    // log(e^0 + e^0) = log 2.
    let y = rs[5]["output"].as_f64().unwrap();
    assert!((y - 2f64.ln()).abs() < 1e-15, "{y}");
}

#[test]
fn wrong_inputs_are_reported_with_the_field() {
    let eval = |input: &str| {
        format!(r#"{{"id": 1, "kind": "evaluate", "module": "lse", "function": "gradient", "input": {input}}}"#)
    };
    let lines = [
        r#"{"id": 0, "kind": "define", "module": "lse"}"#.to_string(),
        eval(r#"{"x": [[1.0, 2.0], [3.0]]}"#),
        eval(r#"{"x": [[1.0, 2.0], [3.0, 4.0]]}"#),
        eval(r#"{"x": "abc"}"#),
        eval(r#"{"y": [1.0]}"#),
        eval("5.0"),
        eval(r#"{"x": [1.0, null]}"#),
        eval(r#"{"x": [1.0], "min_runs": -1}"#),
        eval(r#"{"x": [1.0], "min_seconds": "1"}"#),
        eval(r#"{"x": [1.0], "min_seconds": -0.5}"#),
        r#"{"id": 2, "kind": "define", "module": "hello"}"#.to_string(),
        r#"{"id": 3, "kind": "evaluate", "module": "hello", "function": "square", "input": [1.0, 2.0]}"#.to_string(),
        eval(r#"{"x": [1.0, 2.0], "min_runs": 2, "min_seconds": 0}"#),
    ];
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    let (rs, server) = session(&refs);
    assert_eq!(rs.len(), 13);
    assert_eq!(error_of(&rs[1]), "input field `x`: ragged array: element [1] has length 1, expected 2 (shape [2, 2])");
    assert_eq!(error_of(&rs[2]), "input field `x`: expected shape [n], found [2, 2]");
    assert_eq!(error_of(&rs[3]), "input field `x`: expected a number, found a string");
    assert_eq!(error_of(&rs[4]), "input field `x`: missing");
    assert_eq!(error_of(&rs[5]), "input field `input`: expected an object, found a number");
    assert_eq!(error_of(&rs[6]), "input field `x`: element [1]: expected a number, found null");
    assert_eq!(error_of(&rs[7]), "run policy: `min_runs` must be a non-negative integer, found -1");
    assert_eq!(error_of(&rs[8]), "run policy: `min_seconds` must be a number, found a string");
    assert_eq!(
        error_of(&rs[9]),
        "run policy: `min_seconds` must be a finite non-negative number of seconds, found -0.5"
    );
    assert_eq!(error_of(&rs[11]), "input field `input`: expected a number, found shape [2]");
    // After all that, the same server still answers correctly.
    assert_eq!(rs[12]["success"], true);
    let g: Vec<f64> = rs[12]["output"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    let (e1, e2) = (1f64.exp(), 2f64.exp());
    assert!((g[0] - e1 / (e1 + e2)).abs() < 1e-15 && (g[1] - e2 / (e1 + e2)).abs() < 1e-15, "{g:?}");
    assert_eq!(server.log().failures, 10);
}

#[test]
fn a_panicking_backend_is_answered_and_the_session_goes_on() {
    let (rs, _) = session(&[
        r#"{"id": 0, "kind": "define", "module": "faulty"}"#,
        r#"{"id": 1, "kind": "evaluate", "module": "faulty", "function": "panic", "input": 1.0}"#,
        r#"{"id": 2, "kind": "define", "module": "hello"}"#,
        r#"{"id": 3, "kind": "evaluate", "module": "hello", "function": "double", "input": -3.0}"#,
    ]);
    assert_eq!(error_of(&rs[1]), "internal error (panic in the backend): deliberate test panic");
    assert_eq!(rs[3]["output"], json!(-6.0));
}

/// One evaluate line for lse.
fn lse_line(id: usize, function: &str, x: &[f64], min_runs: u64, min_seconds: f64) -> String {
    json!({"id": id, "kind": "evaluate", "module": "lse", "function": function,
           "input": {"x": x, "min_runs": min_runs, "min_seconds": min_seconds}})
    .to_string()
}

#[test]
fn lse_gradient_matches_softmax_and_finite_differences_of_the_primal() {
    let x = [0.3, -1.2, 2.5, 1000.0, 999.0, 0.0];
    let h = 1e-6;
    let mut lines = vec![r#"{"id": 0, "kind": "define", "module": "lse"}"#.to_string()];
    lines.push(lse_line(1, "primal", &x, 1, 0.0));
    lines.push(lse_line(2, "gradient", &x, 1, 0.0));
    for i in 0..x.len() {
        for (k, s) in [(0, 1.0), (1, -1.0)] {
            let mut xp = x;
            xp[i] += s * h;
            lines.push(lse_line(3 + 2 * i + k, "primal", &xp, 1, 0.0));
        }
    }
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    let (rs, _) = session(&refs);
    // Reference value, shifted by the max so e^1000 does not overflow.
    let m = 1000.0;
    let z: f64 = x.iter().map(|v| (v - m).exp()).sum();
    let lse = m + z.ln();
    assert!((rs[1]["output"].as_f64().unwrap() - lse).abs() < 1e-12);
    let g: Vec<f64> = rs[2]["output"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    assert_eq!(g.len(), x.len());
    for i in 0..x.len() {
        let softmax = (x[i] - m).exp() / z;
        assert!((g[i] - softmax).abs() < 1e-14, "i={i}: {} vs {softmax}", g[i]);
        let fp = rs[3 + 2 * i]["output"].as_f64().unwrap();
        let fm = rs[4 + 2 * i]["output"].as_f64().unwrap();
        let fd = (fp - fm) / (2.0 * h);
        // Central differences of a value near 1000 lose ~1e-13/1e-6 relative.
        assert!((g[i] - fd).abs() < 1e-6, "i={i}: grad {} vs fd {fd}", g[i]);
    }
}

#[test]
fn min_runs_gives_exactly_that_many_evaluate_timings() {
    let (rs, server) = session(&[
        r#"{"id": 0, "kind": "define", "module": "lse"}"#,
        &lse_line(1, "gradient", &[1.0, 2.0, 3.0], 7, 0.0),
        &lse_line(2, "primal", &[1.0, 2.0, 3.0], 0, 0.0),
    ]);
    assert_eq!(
        timing_names(&rs[1]),
        ["compile", "evaluate", "evaluate", "evaluate", "evaluate", "evaluate", "evaluate", "evaluate"]
    );
    assert!(evaluate_ns(&rs[1]).iter().all(|&ns| ns > 0));
    // min_runs 0 still runs once: an output is always produced.
    assert_eq!(timing_names(&rs[2]), ["compile", "evaluate"]);
    assert_eq!(server.backend().runs.get(), 8);
}

#[test]
fn min_seconds_runs_until_the_timed_runs_add_up() {
    let x: Vec<f64> = (0..20_000).map(|i| (i as f64 * 0.37).sin()).collect();
    let min_seconds = 0.05;
    let (rs, _) =
        session(&[r#"{"id": 0, "kind": "define", "module": "lse"}"#, &lse_line(1, "gradient", &x, 1, min_seconds)]);
    let ns = evaluate_ns(&rs[1]);
    let total: u64 = ns.iter().sum();
    let threshold = (min_seconds * 1e9) as u64;
    assert!(total >= threshold, "stopped early: {total} ns over {} runs", ns.len());
    // With min_runs = 1 the loop stops at the first run that crosses the line.
    let before_last: u64 = ns[..ns.len() - 1].iter().sum();
    assert!(before_last < threshold, "ran past the threshold: {before_last} ns before the last run");
}

#[test]
fn programs_are_compiled_once_per_shape_and_function() {
    let (rs, server) = session(&[
        r#"{"id": 0, "kind": "define", "module": "lse"}"#,
        &lse_line(1, "primal", &[1.0, 2.0, 3.0, 4.0, 5.0], 1, 0.0),
        &lse_line(2, "primal", &[5.0, 4.0, 3.0, 2.0, 1.0], 1, 0.0),
        &lse_line(3, "primal", &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 1, 0.0),
        &lse_line(4, "gradient", &[1.0, 2.0, 3.0, 4.0, 5.0], 1, 0.0),
        &lse_line(5, "primal", &[0.0; 5], 1, 0.0),
    ]);
    assert!(rs.iter().all(|r| r["success"] == true), "{rs:#?}");
    let cache = &server.backend().cache;
    assert_eq!((cache.misses(), cache.hits(), cache.len()), (3, 2, 3));
    // Same multiset of values in another order: same LSE.
    assert_eq!(rs[1]["output"], rs[2]["output"]);
}
