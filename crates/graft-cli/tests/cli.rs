//! End-to-end tests of the `graft` binary: run/check/ast/ir, inputs from
//! .npy files and literals, --out .npz round trips, exit codes.

use assert_cmd::Command;
use graft_core::{npy, Tensor};
use std::path::PathBuf;

fn examples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

fn graft() -> Command {
    Command::cargo_bin("graft").expect("the graft binary is built")
}

fn stdout(c: &mut Command) -> String {
    let out = c.output().expect("runs");
    assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf8")
}

#[test]
fn run_syntax_example_prints_results() {
    let s = stdout(graft().arg("run").arg(examples().join("syntax.graft")));
    assert_eq!(s, "0: 49.8125\n1: [-5.5   12.125 48.25 ]\n2: 13.\n3: [[0. 1. 2.]\n    [0. 0. 3.]]\n4: [ 6. 12. 18.]\n");
}

#[test]
fn run_quickstart_trains() {
    let s = stdout(graft().arg("run").arg(examples().join("quickstart.graft")));
    let lines: Vec<&str> = s.lines().collect();
    let losses: Vec<f64> = lines[0]
        .trim_start_matches("0: [")
        .trim_end_matches(']')
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect();
    assert_eq!(losses.len(), 10);
    assert!(losses.windows(2).all(|w| w[1] < w[0]), "{losses:?}");
    let acc: f64 = lines[1].trim_start_matches("1: ").parse().unwrap();
    assert!(acc >= 0.95, "{acc}");
}

#[test]
fn npy_inputs_and_npz_output_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let w = dir.path().join("w.npy");
    let x = dir.path().join("x.npy");
    npy::save_npy(&w, &Tensor::from_vec(vec![3], vec![0.5f32, -1.0, 2.0]).unwrap()).unwrap();
    npy::save_npy(&x, &Tensor::from_vec(vec![2, 3], vec![1.0f32, 2.0, 3.0, -1.0, 0.5, 4.0]).unwrap()).unwrap();
    let out = dir.path().join("out.npz");
    let s = stdout(
        graft()
            .arg("run")
            .arg(examples().join("syntax.graft"))
            .args(["--entry", "grads"])
            .arg(format!("--input=w={}", w.display()))
            .args(["--input", "b=0.25"])
            .arg(format!("--input=x={}", x.display()))
            .args(["--input", "y=[1.0, -2.0]"])
            .arg("--out")
            .arg(&out),
    );
    assert_eq!(s, "0: [-5.5   12.125 48.25 ]\n1: 13.\n");
    let arrays = npy::load_npz(&out).unwrap();
    assert_eq!(arrays.len(), 2);
    assert_eq!(arrays[0].0, "0");
    assert_eq!(arrays[0].1.to_vec::<f32>().unwrap(), vec![-5.5, 12.125, 48.25]);
    assert_eq!(arrays[1].1.to_vec::<f32>().unwrap(), vec![13.0]);
}

#[test]
fn input_dtype_mismatch_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let w = dir.path().join("w.npy");
    npy::save_npy(&w, &Tensor::from_vec(vec![3], vec![0.5f64, -1.0, 2.0]).unwrap()).unwrap();
    let out = graft()
        .arg("run")
        .arg(examples().join("syntax.graft"))
        .args(["--entry", "process"])
        .arg(format!("--input=x={}", w.display()))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("input `x` must be tensor[features, f32]") && err.contains("f64[3]"), "{err}");
}

#[test]
fn check_ast_ir_and_exit_codes() {
    let s = stdout(graft().arg("check").arg(examples().join("syntax.graft")));
    assert!(s.ends_with("ok (6 definitions)\n"), "{s}");
    let s = stdout(graft().arg("ast").arg(examples().join("syntax.graft")));
    assert!(s.contains("(vmap {} (var {} process)"), "{s}");
    let s = stdout(
        graft()
            .arg("ir")
            .arg(examples().join("syntax.graft"))
            .args(["--entry", "dloss_dw", "--shapes", "w=f32[3]", "--shapes", "x=f32[3]", "--shapes", "y=f32"]),
    );
    assert!(s.starts_with("func @dloss_dw(%0: f32[3], %1: f32[3], %2: f32[]) -> (f32[3]) {"), "{s}");
    assert!(s.contains("reduce_sum"), "{s}");
    // Usage error: 2.
    let out = graft().arg("run").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    // Program error: 1, diagnostic on stderr.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.graft");
    std::fs::write(&bad, "def main() -> f32 = nope\n").unwrap();
    let out = graft().arg("check").arg(&bad).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown name `nope`") && err.contains("bad.graft:1:21"), "{err}");
}

#[test]
fn gradbench_serves_the_protocol_on_stdin_from_any_directory() {
    // The eval programs are built into the binary, so the working directory
    // does not matter.
    let dir = std::env::temp_dir();
    let input = "{\"id\": 0, \"kind\": \"start\"}\n\
                 {\"id\": 1, \"kind\": \"define\", \"module\": \"hello\"}\n\
                 {\"id\": 2, \"kind\": \"evaluate\", \"module\": \"hello\", \"function\": \"double\", \"input\": 4}\n\
                 not json\n\
                 {\"id\": 3, \"kind\": \"define\", \"module\": \"nope\"}\n";
    let s = stdout(graft().current_dir(&dir).arg("gradbench").write_stdin(input));
    let lines: Vec<serde_json::Value> = s.lines().map(|l| serde_json::from_str(l).expect("JSON line")).collect();
    assert_eq!(lines.len(), 5);
    assert_eq!(lines[0], serde_json::json!({"id": 0, "tool": "graft"}));
    assert_eq!(lines[1]["success"], true);
    assert_eq!(lines[2]["output"], serde_json::json!(8.0));
    assert_eq!(lines[3]["success"], false);
    assert_eq!(lines[4]["error"], "unknown module `nope`");
}

/// Every example program runs through the binary, and what it prints is
/// exactly the results the library computes (which
/// `crates/graft-lang/tests/examples_dir.rs` checks against reference
/// values): leaf `i` of `main`'s result printed NumPy-style after `i: `.
#[test]
fn every_example_runs_and_prints_its_checked_results() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(examples())
        .expect("examples/ exists")
        .map(|e| e.expect("readable entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "graft"))
        .collect();
    files.sort();
    assert!(files.len() >= 12, "only {} examples", files.len());
    for path in files {
        let src = std::fs::read_to_string(&path).expect("readable example");
        let name = path.file_name().expect("a file").to_string_lossy().into_owned();
        let module = graft_lang::Module::from_source(&name, &src).expect("the example parses");
        let out = module.run("main", &[]).expect("main runs");
        let leaves = out.leaves();
        let printed = stdout(graft().arg("run").arg(&path));
        let mut expected = String::new();
        for (i, t) in leaves.iter().enumerate() {
            let body = graft_core::format::format_tensor(t);
            let pad = " ".repeat(i.to_string().len() + 2);
            expected.push_str(&format!("{i}: {}\n", body.replace('\n', &format!("\n{pad}"))));
        }
        if leaves.len() == 1 && out.tensor().is_some() {
            expected = format!("{}\n", graft_core::format::format_tensor(leaves[0]));
        }
        assert_eq!(printed, expected, "{name}");
    }
}

fn bench_json(c: &mut Command) -> serde_json::Map<String, serde_json::Value> {
    let s = stdout(c);
    assert_eq!(s.lines().count(), 1, "exactly one line on stdout: {s}");
    let v: serde_json::Value = serde_json::from_str(&s).expect("stdout is JSON");
    v.as_object().expect("a JSON object").clone()
}

#[test]
fn bench_json_reports_compile_and_ordered_run_times() {
    let o = bench_json(graft().arg("bench").arg(examples().join("hvp.graft")).args(["--json", "--runs", "7"]));
    let keys: Vec<&str> = o.keys().map(String::as_str).collect();
    let mut want = vec!["compile_ms", "max_ms", "median_ms", "min_ms", "runs"];
    let mut got = keys.clone();
    got.sort();
    want.sort();
    assert_eq!(got, want, "{o:?}");
    let f = |k: &str| o[k].as_f64().unwrap_or_else(|| panic!("{k} is a number: {o:?}"));
    assert!(f("compile_ms") > 0.0, "{o:?}");
    assert!(0.0 < f("min_ms") && f("min_ms") <= f("median_ms") && f("median_ms") <= f("max_ms"), "{o:?}");
    assert_eq!(o["runs"], 7);
}

#[test]
fn bench_prints_compile_and_median_for_people() {
    let s = stdout(graft().arg("bench").arg(examples().join("jacobians.graft")).args(["--runs", "4", "--warmup", "0"]));
    let lines: Vec<&str> = s.lines().collect();
    assert_eq!(lines.len(), 2, "{s}");
    assert!(lines[0].starts_with("compile "), "{s}");
    assert!(lines[1].starts_with("run     min ") && lines[1].contains(" median "), "{s}");
    assert!(lines[1].ends_with("(4 runs, 0 warm-up)"), "{s}");
    assert!(["ns", "µs", "ms", " s"].iter().any(|u| lines[1].contains(u)), "{s}");
}

#[test]
fn bench_takes_inputs_like_run() {
    let dir = tempfile::tempdir().unwrap();
    let x = dir.path().join("x.npy");
    npy::save_npy(&x, &Tensor::from_vec(vec![2, 3], vec![1.0f32, 2.0, 3.0, -1.0, 0.5, 4.0]).unwrap()).unwrap();
    let o = bench_json(
        graft()
            .arg("bench")
            .arg(examples().join("syntax.graft"))
            .args(["--entry", "grads", "--json", "--runs", "3", "--warmup", "1"])
            .args(["--input", "w=[0.5, -1.0, 2.0]", "--input", "b=0.25", "--input", "y=[1.0, -2.0]"])
            .arg(format!("--input=x={}", x.display())),
    );
    assert_eq!(o["runs"], 3);
    // A missing input is the same program error as for `run`.
    let out = graft()
        .arg("bench")
        .arg(examples().join("syntax.graft"))
        .args(["--entry", "grads", "--input", "b=0.25"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("missing input for parameter `w` of `grads`"), "{err}");
}

#[test]
fn bench_usage_and_program_errors() {
    let hvp = examples().join("hvp.graft");
    for bad in [["--runs", "0"], ["--runs", "1000001"], ["--warmup", "1000001"], ["--runs", "many"]] {
        let out = graft().arg("bench").arg(&hvp).args(bad).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
        assert!(out.stdout.is_empty(), "{bad:?}");
    }
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.graft");
    std::fs::write(&bad, "def main() -> f32 = nope\n").unwrap();
    let out = graft().arg("bench").arg(&bad).arg("--json").output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown name `nope`") && err.contains("bad.graft:1:21"), "{err}");
    // A type error found while instantiating: also a rendered diagnostic.
    std::fs::write(&bad, "def main(x: tensor[n, f32]) -> f32 = x @ x @ x\n").unwrap();
    let out = graft().arg("bench").arg(&bad).args(["--input", "x=[1.0, 2.0]"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.graft:1:"), "{err}");
}

/// The programs `bench/side_by_side.py` times type-check, and each runs
/// through `graft bench` on small inputs of its declared ranks.
#[test]
fn side_by_side_programs_check() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../bench/programs");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("bench/programs exists")
        .map(|e| e.expect("readable entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "graft"))
        .collect();
    files.sort();
    assert!(files.len() >= 12, "only {} bench programs", files.len());
    for path in &files {
        let s = stdout(graft().arg("check").arg(path));
        assert!(s.contains(": ok ("), "{s}");
    }
    let o = bench_json(graft().arg("bench").arg(dir.join("chain.graft")).args([
        "--json",
        "--runs",
        "2",
        "--input",
        "x=[1.0, -2.0, 3.0]",
        "--input",
        "y=[0.5, 0.5, -1.0]",
    ]));
    assert_eq!(o["runs"], 2);
}
