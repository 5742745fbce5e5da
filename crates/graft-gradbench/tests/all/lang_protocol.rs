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

/// Serves `lines` with a backend whose memory budget is `limit` bytes.
fn session_with_limit(lines: &[String], limit: u64) -> Vec<Value> {
    let mut server = Server::new(LangBackend::with_memory_limit(limit));
    let mut input = lines.join("\n");
    input.push('\n');
    let mut out = Vec::new();
    server.serve(input.as_bytes(), &mut out).expect("serving to memory cannot fail");
    let text = String::from_utf8(out).expect("responses are UTF-8");
    text.lines().map(|l| serde_json::from_str(l).expect("response is JSON")).collect()
}

/// A small `lse` evaluation that must still be answered after a refusal.
fn lse_probe(id: usize) -> String {
    format!(
        r#"{{"id": {id}, "kind": "evaluate", "module": "lse", "function": "primal", "input": {{"x": [0.0, 0.0]}}}}"#
    )
}

fn assert_probe(r: &Value, id: usize) {
    assert_eq!(r["id"], id, "{r}");
    assert_eq!(r["success"], true, "{r}");
    assert!((r["output"].as_f64().expect("a number") - 2f64.ln()).abs() < 1e-12, "{r}");
}

#[test]
fn inputs_too_large_for_memory_are_refused_and_the_session_goes_on() {
    const GIB: u64 = 1 << 30;
    // 200 000 points and 20 000 centroids in 2-d: a [200000, 20000] f64
    // distance matrix is 32 GB.
    let row = |i: usize| format!("[{}, {}]", i % 7, i % 11);
    let points: Vec<String> = (0..200_000).map(row).collect();
    let centroids: Vec<String> = (0..20_000).map(row).collect();
    let kmeans = |id: usize, function: &str| {
        format!(
            r#"{{"id": {id}, "kind": "evaluate", "module": "kmeans", "function": "{function}", "input": {{"points": [{}], "centroids": [{}]}}}}"#,
            points.join(","),
            centroids.join(",")
        )
    };
    let lines = vec![
        r#"{"id": 0, "kind": "define", "module": "lse"}"#.to_string(),
        r#"{"id": 1, "kind": "define", "module": "llsq"}"#.to_string(),
        r#"{"id": 2, "kind": "define", "module": "ode"}"#.to_string(),
        r#"{"id": 3, "kind": "define", "module": "kmeans"}"#.to_string(),
        r#"{"id": 4, "kind": "evaluate", "module": "llsq", "function": "primal", "input": {"x": [1.0, 2.0], "n": 1000000000000}}"#.to_string(),
        lse_probe(5),
        r#"{"id": 6, "kind": "evaluate", "module": "ode", "function": "primal", "input": {"x": [1.0, 2.0], "s": 1000000000}}"#.to_string(),
        lse_probe(7),
        r#"{"id": 8, "kind": "evaluate", "module": "ode", "function": "gradient", "input": {"x": [1.0, 2.0], "s": 1000000000}}"#.to_string(),
        lse_probe(9),
        kmeans(10, "cost"),
        lse_probe(11),
        kmeans(12, "dir"),
        lse_probe(13),
        r#"{"id": 14, "kind": "evaluate", "module": "llsq", "function": "primal", "input": {"x": [1.0, 2.0], "n": 9223372036854775807}}"#.to_string(),
        lse_probe(15),
        // Sizes within the budget still run.
        r#"{"id": 16, "kind": "evaluate", "module": "ode", "function": "primal", "input": {"x": [1.0, 2.0], "s": 10}}"#.to_string(),
    ];
    let rs = session_with_limit(&lines, 4 * GIB);
    assert_eq!(rs.len(), lines.len());
    for (i, r) in rs.iter().enumerate().take(4) {
        assert_eq!(r["success"], true, "define {i}: {r}");
    }
    for (id, want) in [
        (4, "input field `n` = 1000000000000 needs 7.3 TiB (8000000000000 bytes), over this tool's memory limit of 4.0 GiB"),
        (6, "input field `s` = 1000000000 needs 7.5 GiB (8000000000 bytes), over this tool's memory limit of 4.0 GiB"),
        (8, "input field `s` = 1000000000 needs 7.5 GiB"),
        (10, "`kmeans.cost` at these sizes needs"),
        (12, "`kmeans.dir` at these sizes needs"),
        (14, "input field `n` = 9223372036854775807 needs more bytes than any machine has"),
    ] {
        let e = error_of(&rs[id]);
        assert!(e.contains(want), "{id}: want `{want}` in `{e}`");
        assert!(e.contains("GRAFT_MAX_MEMORY"), "{e}");
        assert_probe(&rs[id + 1], id + 1);
    }
    // The kmeans estimate is at least the 32 GB distance matrix.
    let e = error_of(&rs[10]);
    let bytes: u64 = e.split('(').nth(1).and_then(|s| s.split(' ').next()).and_then(|s| s.parse().ok()).expect(e);
    assert!(bytes >= 200_000 * 20_000 * 8, "{e}");
    assert_eq!(rs[16]["success"], true, "{}", rs[16]);
}

#[test]
fn run_policies_are_bounded_and_the_session_goes_on() {
    let eval = |id: usize, extra: &str| {
        format!(
            r#"{{"id": {id}, "kind": "evaluate", "module": "lse", "function": "primal", "input": {{"x": [0.0, 0.0]{extra}}}}}"#
        )
    };
    let lines = vec![
        r#"{"id": 0, "kind": "define", "module": "lse"}"#.to_string(),
        eval(1, r#", "min_runs": 1000000000000000"#),
        lse_probe(2),
        eval(3, r#", "min_runs": 1e15"#),
        lse_probe(4),
        eval(5, r#", "min_seconds": 1000000"#),
        lse_probe(6),
        eval(7, r#", "min_seconds": 1e300"#),
        lse_probe(8),
        eval(9, r#", "min_runs": 1000001"#),
        lse_probe(10),
        eval(11, r#", "min_seconds": 3600.5"#),
        lse_probe(12),
        // The bounds themselves are accepted (checked on a cheap run count).
        eval(13, r#", "min_runs": 3, "min_seconds": 0"#),
    ];
    let rs = session_with_limit(&lines, 1 << 30);
    assert_eq!(rs.len(), lines.len());
    for (id, want) in [
        (1, "run policy: `min_runs` must be at most 1000000, found 1000000000000000"),
        (3, "run policy: `min_runs` must be a non-negative integer, found 1000000000000000.0"),
        (5, "run policy: `min_seconds` must be at most 3600, found 1000000"),
        (7, "run policy: `min_seconds` must be at most 3600, found 1e+300"),
        (9, "run policy: `min_runs` must be at most 1000000, found 1000001"),
        (11, "run policy: `min_seconds` must be at most 3600, found 3600.5"),
    ] {
        assert_eq!(error_of(&rs[id]), want, "{id}");
        assert_probe(&rs[id + 1], id + 1);
    }
    assert_eq!(rs[13]["timings"].as_array().map(Vec::len), Some(4), "{}", rs[13]);
}
