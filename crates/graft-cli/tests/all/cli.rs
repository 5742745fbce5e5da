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
    assert_eq!(
        s,
        "0: f32[] = 49.8125\n1.0: f32[3] = [-5.5   12.125 48.25 ]\n1.1: f32[] = 13.\n\
         2: f32[2,3] = [[0. 1. 2.]\n               [0. 0. 3.]]\n3: f32[3] = [ 6. 12. 18.]\n"
    );
}

/// `--out PATH.npy` writes the one result of a def as a plain `.npy`
/// (`np.load` gives the array itself); a def with several results refuses
/// `.npy` before running, and an extension that is neither `.npy` nor
/// `.npz` is a usage error rather than an archive under another name.
#[test]
fn out_npy_holds_a_single_result() {
    let dir = tempfile::tempdir().unwrap();
    let prog = dir.path().join("p.graft");
    std::fs::write(
        &prog,
        "def one(x: tensor[n, f32]) -> tensor[n, f32] { x * 2.0 }\n\
         def two(x: tensor[n, f32]) { (x, x + 1.0) }\n",
    )
    .unwrap();
    let out = dir.path().join("r.npy");
    let run = |entry: &str, out: &std::path::Path| {
        graft()
            .arg("run")
            .arg(&prog)
            .args(["--entry", entry, "--input", "x=[1.0, -2.5]", "--out"])
            .arg(out)
            .output()
            .unwrap()
    };
    let o = run("one", &out);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(npy::load_npy(&out).unwrap().to_vec::<f32>().unwrap(), vec![2.0, -5.0]);
    assert!(std::fs::read(&out).unwrap().starts_with(b"\x93NUMPY"), "a plain .npy, not an archive");

    let two = dir.path().join("two.npy");
    let o = run("two", &two);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("returns 2 tensors") && err.contains("--out PATH.npz"), "{err}");
    assert!(!two.exists(), "nothing is written");
    let o = run("two", &dir.path().join("two.npz"));
    assert!(o.status.success());
    assert_eq!(npy::load_npz(dir.path().join("two.npz")).unwrap().len(), 2);

    let o = run("one", &dir.path().join("r.txt"));
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("expected a path ending in .npz"));
}

#[test]
fn run_quickstart_trains() {
    let s = stdout(graft().arg("run").arg(examples().join("quickstart.graft")));
    let lines: Vec<&str> = s.lines().collect();
    let losses: Vec<f64> = lines[0]
        .trim_start_matches("0: f32[10] = [")
        .trim_end_matches(']')
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect();
    assert_eq!(losses.len(), 10);
    assert!(losses.windows(2).all(|w| w[1] < w[0]), "{losses:?}");
    let acc: f64 = lines[1].trim_start_matches("accuracy: f32[] = ").parse().unwrap();
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
    // `grads` returns `(dw, db)`: the results and their .npz keys take those names.
    assert_eq!(s, "dw: f32[3] = [-5.5   12.125 48.25 ]\ndb: f32[] = 13.\n");
    let arrays = npy::load_npz(&out).unwrap();
    assert_eq!(arrays.len(), 2);
    assert_eq!((arrays[0].0.as_str(), arrays[1].0.as_str()), ("dw", "db"));
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
    // Values print with the names they have in the program and their roles.
    assert!(s.starts_with("func @dloss_dw(%0:w: f32[3], %1:x: f32[3], %2:y: f32[]) -> (f32[3]) {"), "{s}");
    assert!(s.contains("return %8:w_bar"), "{s}");
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
/// `crates/graft-lang/tests/all/examples_dir.rs` checks against reference
/// values): leaf `i` of `main`'s result printed NumPy-style after `i: `
/// (`--raw`; the labelled form is `results_are_labelled_by_name_or_path_with_their_types`).
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
        let printed = stdout(graft().arg("run").arg("--raw").arg(&path));
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

// ---------------------------------------------------------------------------
// Bad inputs: every error about a --input is a diagnostic located at the
// parameter's declaration (exit 1); a malformed flag is a usage error (exit 2).

const INPUTS_PROGRAM: &str = "\
def ints(k: i32, big: i64) -> (i32, i64) = (k, big)

def floats(d: f64, s: f32) -> (f64, f32) = (d, s)

def vecs(x: tensor[n, f32], w: tensor[3, f64]) -> f32 = sum(x)

def flags(b: bool) -> bool = b

def pairs(p: (f32, f32)) -> (f32, f32) = p
";

/// Runs `graft` with `args` on `p.graft` (holding [`INPUTS_PROGRAM`]) in
/// `dir`; returns the exit code, stdout and stderr.
fn run_in(dir: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let prog = dir.join("p.graft");
    std::fs::write(&prog, INPUTS_PROGRAM).unwrap();
    let out = graft().current_dir(dir).args(args).output().expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), stderr)
}

/// Asserts a located input error: exit 1, nothing on stdout, the message,
/// `p.graft:LINE:COL` and the declaration's source line.
fn assert_located(dir: &std::path::Path, args: &[&str], message: &str, at: &str, line: &str) {
    let (code, out, err) = run_in(dir, args);
    assert_eq!(code, 1, "{args:?}: {err}");
    assert!(out.is_empty(), "{args:?}: {out}");
    assert!(err.contains(message), "{args:?}: want `{message}` in\n{err}");
    assert!(err.contains(&format!("p.graft:{at}")), "{args:?}: want p.graft:{at} in\n{err}");
    assert!(err.contains(line), "{args:?}: want the source line `{line}` in\n{err}");
}

const INTS: &str = "def ints(k: i32, big: i64) -> (i32, i64) = (k, big)";
const FLOATS: &str = "def floats(d: f64, s: f32) -> (f64, f32) = (d, s)";
const VECS: &str = "def vecs(x: tensor[n, f32], w: tensor[3, f64]) -> f32 = sum(x)";

#[test]
fn input_errors_point_at_the_parameter_declaration() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let w64 = d.join("w64.npy");
    npy::save_npy(&w64, &Tensor::from_vec(vec![3], vec![1.0f64, 2.0, 3.0]).unwrap()).unwrap();
    let x64 = d.join("x64.npy");
    npy::save_npy(&x64, &Tensor::from_vec(vec![2], vec![1.0f64, 2.0]).unwrap()).unwrap();
    std::fs::write(d.join("garbage.npy"), b"definitely not numpy").unwrap();
    std::fs::write(d.join("garbage.npz"), b"definitely not a zip").unwrap();
    let two = d.join("two.npz");
    npy::save_npz(&two, &[("a".into(), Tensor::vec1(&[1.0f32])), ("b".into(), Tensor::vec1(&[2.0f32]))]).unwrap();
    let w = format!("w={}", w64.display());
    let run = |entry: &str, ins: &[String]| -> Vec<String> {
        let mut v = vec!["run".to_string(), "p.graft".into(), "--entry".into(), entry.into()];
        for i in ins {
            v.push("--input".into());
            v.push(i.clone());
        }
        v
    };
    let cases: Vec<(Vec<String>, &str, &str, &str)> = vec![
        // Wrong dtype (from a file), wrong rank (a literal), wrong size.
        (
            run("vecs", &[format!("x={}", x64.display()), w.clone()]),
            "input `x` must be tensor[n, f32] (dtype f32, rank 1), but f64[2] was given; inputs are never cast",
            "5:10",
            VECS,
        ),
        (
            run("vecs", &["x=[[1.0]]".into(), w.clone()]),
            "input `x` must be tensor[n, f32] (dtype f32, rank 1), but f32[1,1] was given",
            "5:10",
            VECS,
        ),
        (
            run("vecs", &["x=[1.0]".into(), "w=[1.0, 2.0]".into()]),
            "argument `w` of `vecs` must be tensor[3, f64], found f64[2]",
            "5:29",
            VECS,
        ),
        // Missing, unknown (with a suggestion), given twice.
        (run("vecs", &["x=[1.0]".into()]), "missing input for parameter `w` of `vecs`", "5:29", VECS),
        (run("vecs", &["xx=[1.0]".into()]), "`vecs` has no parameter `xx`", "5:5", VECS),
        (run("vecs", &["x=[1.0]".into(), "x=[2.0]".into()]), "input `x` is given twice", "5:10", VECS),
        // Unreadable and corrupt files.
        (
            run("vecs", &["x=nowhere.npy".into(), w.clone()]),
            "input `x`: cannot read nowhere.npy: No such file",
            "5:10",
            VECS,
        ),
        (
            run("vecs", &["x=garbage.npy".into(), w.clone()]),
            "input `x`: cannot read garbage.npy: not an .npy file",
            "5:10",
            VECS,
        ),
        (run("vecs", &["x=garbage.npz".into(), w.clone()]), "input `x`: cannot read garbage.npz", "5:10", VECS),
        (run("vecs", &[format!("x={}", two.display()), w.clone()]), "has no array named `x`", "5:10", VECS),
        // Literals that do not parse or are not rectangular.
        (
            run("vecs", &["x=[1.0,".into(), w.clone()]),
            "input `x`: `[1.0,` is neither a .npy/.npz path nor a literal",
            "5:10",
            VECS,
        ),
        (
            run("vecs", &["x=[[1.0], [2.0, 3.0]]".into(), w.clone()]),
            "is not a number, a bool or a rectangular array of one of them",
            "5:10",
            VECS,
        ),
        (
            run("vecs", &["x=foo(1)".into(), w.clone()]),
            "is not a number, a bool or a rectangular array of one of them",
            "5:10",
            VECS,
        ),
        // Numbers are not bools (nothing is cast); a tuple cannot be given as a literal.
        (
            run("flags", &["b=1".into()]),
            "input `b`: `1` is a number, but `b` is bool",
            "7:11",
            "def flags(b: bool) -> bool = b",
        ),
        (
            run("pairs", &["p=1".into()]),
            "input `p`: a tuple parameter takes a whole .npz archive, not `1`",
            "9:11",
            "def pairs(p: (f32, f32)) -> (f32, f32) = p",
        ),
    ];
    for (args, message, at, line) in &cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_located(d, &args, message, at, line);
    }
    // The unknown name gets a suggestion and the list of parameters.
    let (_, _, err) = run_in(d, &["run", "p.graft", "--entry", "ints", "--input", "bog=1"]);
    assert!(err.contains("did you mean `big`?") && err.contains("its parameters are k, big"), "{err}");
    // `bench` and `ir` read inputs the same way.
    assert_located(
        d,
        &["bench", "p.graft", "--entry", "ints", "--input", "k=1.5", "--input", "big=1"],
        "`1.5` is a float literal, but `k` is i32",
        "1:10",
        INTS,
    );
    assert_located(
        d,
        &["ir", "p.graft", "--entry", "vecs", "--shapes", "x=f32[2]"],
        "missing type for parameter `w` of `vecs`",
        "5:29",
        VECS,
    );
    assert_located(
        d,
        &["ir", "p.graft", "--entry", "vecs", "--shapes", "q=f32[2]"],
        "`vecs` has no parameter `q`",
        "5:5",
        VECS,
    );
}

#[test]
fn malformed_input_flags_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        &["run", "p.graft", "--entry", "ints", "--input", "k"][..],
        &["run", "p.graft", "--entry", "ints", "--input", "=3"],
        &["ir", "p.graft", "--entry", "vecs", "--shapes", "x"],
        &["ir", "p.graft", "--entry", "vecs", "--shapes", "x=f32[2"],
        &["bench", "p.graft", "--entry", "ints", "--input", "k"],
    ] {
        let (code, out, err) = run_in(dir.path(), args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?}");
        assert!(err.contains("is not of the form NAME=") || err.contains("is not a type like"), "{args:?}: {err}");
    }
}

#[test]
fn number_literal_inputs_are_never_cast() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ints = |k: &str, big: &str| {
        run_in(
            d,
            &[
                "run",
                "--raw",
                "p.graft",
                "--entry",
                "ints",
                "--input",
                &format!("k={k}"),
                "--input",
                &format!("big={big}"),
            ],
        )
    };
    let floats = |x: &str, s: &str| {
        run_in(
            d,
            &[
                "run",
                "--raw",
                "p.graft",
                "--entry",
                "floats",
                "--input",
                &format!("d={x}"),
                "--input",
                &format!("s={s}"),
            ],
        )
    };
    // In range: exact, also beyond 2^53 for i64.
    assert_eq!(
        ints("-2147483648", "9007199254740993"),
        (0, "0: -2147483648\n1: 9007199254740993\n".into(), String::new())
    );
    assert_eq!(ints("2147483647", "-9223372036854775807").1, "0: 2147483647\n1: -9223372036854775807\n");
    assert_eq!(floats("9007199254740992", "16777216").1, "0: 9.00719925e+15\n1: 16777216.\n");
    assert_eq!(floats("0.1", "-2.5").1, "0: 0.1\n1: -2.5\n");
    let cases: Vec<((i32, String, String), &str, &[&str], &str, &str)> = vec![
        (
            ints("2147483648", "0"),
            "input `k`: 2147483648 is out of range for i32",
            &["i32 holds -2147483648 to 2147483647"],
            "1:10",
            INTS,
        ),
        (ints("-2147483649", "0"), "input `k`: -2147483649 is out of range for i32", &["never cast"], "1:10", INTS),
        (ints("[1, 2, 3000000000]", "0"), "input `k`: 3000000000 is out of range for i32", &[], "1:10", INTS),
        (ints("2.0", "0"), "input `k`: `2.0` is a float literal, but `k` is i32", &["never cast"], "1:10", INTS),
        (ints("1", "1e3"), "input `big`: `1000.0` is a float literal, but `big` is i64", &[], "1:18", INTS),
        (
            floats("9007199254740993", "1"),
            "input `d`: 9007199254740993 is not exactly representable as f64",
            &["2^53"],
            "3:12",
            FLOATS,
        ),
        (floats("1", "1e39"), "input `s`: 1e39 overflows f32", &["the largest f32 is 3.4028235e38"], "3:20", FLOATS),
        (floats("1", "-1e39"), "input `s`: -1e39 overflows f32", &[], "3:20", FLOATS),
        (floats("1", "1e-50"), "input `s`: 1e-50 underflows to 0 in f32", &[], "3:20", FLOATS),
        (floats("1", "16777217"), "input `s`: 16777217 is not exactly representable as f32", &["2^24"], "3:20", FLOATS),
    ];
    for ((code, out, err), message, notes, at, line) in cases {
        assert_eq!(code, 1, "{message}: {err}");
        assert!(out.is_empty(), "{message}: {out}");
        assert!(err.contains(message), "want `{message}` in\n{err}");
        for n in notes {
            assert!(err.contains(n), "want `{n}` in\n{err}");
        }
        assert!(err.contains(&format!("p.graft:{at}")) && err.contains(line), "{message}: {err}");
    }
    // A literal too large for any integer does not parse at all.
    let (code, _, err) = ints("1", "9223372036854775808");
    assert_eq!(code, 1);
    assert!(err.contains("input `big`: `9223372036854775808` is neither"), "{err}");
    // --seed fills an i32 `seed` only when it fits.
    std::fs::write(d.join("s.graft"), "def main(seed: i32) -> i32 = seed\n").unwrap();
    let out = graft().current_dir(d).args(["run", "s.graft", "--seed", "4294967296"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--seed 4294967296 is out of range for `seed` (i32)"));
    assert_eq!(stdout(graft().current_dir(d).args(["run", "s.graft", "--seed=-7"])), "-7\n");
}

#[test]
fn hostile_npy_and_npz_inputs_are_located_errors() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let npy_file = |name: &str, header: &str, data: &[u8]| {
        let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
        let pad = (64 - (10 + header.len() + 1) % 64) % 64;
        bytes.extend_from_slice(&((header.len() + pad + 1) as u16).to_le_bytes());
        bytes.extend_from_slice(header.as_bytes());
        bytes.extend(std::iter::repeat_n(b' ', pad));
        bytes.push(b'\n');
        bytes.extend_from_slice(data);
        std::fs::write(d.join(name), bytes).unwrap();
        format!("x={name}")
    };
    let h = |shape: &str| format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}");
    let w = "w=[1.0, 2.0, 3.0]";
    let cases = [
        (npy_file("wrap.npy", &h("(4294967296, 4294967296)"), &[]), "more elements than this machine can address"),
        (npy_file("short.npy", &h("(1048576, 1048576)"), &[]), "the data holds 0 bytes but the header"),
        (npy_file("long.npy", &h("(1,)"), &[0; 5]), "the data holds 5 bytes but the header"),
        (
            npy_file("deep.npy", &h(&format!("{}1{}", "(".repeat(22), ")".repeat(22))), &[]),
            "nests brackets more than 8 deep",
        ),
        (
            npy_file("u2.npy", "{'descr': '<u2', 'fortran_order': False, 'shape': (1,), }", &[0, 0]),
            "unsupported npy dtype `<u2`",
        ),
    ];
    for (x, message) in &cases {
        let t0 = std::time::Instant::now();
        assert_located(d, &["run", "p.graft", "--entry", "vecs", "--input", x, "--input", w], message, "5:10", VECS);
        assert!(t0.elapsed() < std::time::Duration::from_secs(10), "{x}: {:?}", t0.elapsed());
    }
    // A good file, and an .npz holding the array under the parameter's name
    // or as its only array.
    let good = npy_file("good.npy", &h("(2,)"), &[0, 0, 128, 63, 0, 0, 0, 64]);
    let (code, out, err) = run_in(d, &["run", "p.graft", "--entry", "vecs", "--input", &good, "--input", w]);
    assert_eq!((code, out.as_str()), (0, "3.\n"), "{err}");
    npy::save_npz(
        d.join("named.npz"),
        &[("w".into(), Tensor::vec1(&[1.0f64; 3])), ("x".into(), Tensor::vec1(&[5.0f32]))],
    )
    .unwrap();
    npy::save_npz(d.join("one.npz"), &[("anything".into(), Tensor::vec1(&[2.0f32, 2.0]))]).unwrap();
    let (code, out, err) =
        run_in(d, &["run", "p.graft", "--entry", "vecs", "--input", "x=named.npz", "--input", "w=named.npz"]);
    assert_eq!((code, out.as_str()), (0, "5.\n"), "{err}");
    let (code, out, err) = run_in(d, &["run", "p.graft", "--entry", "vecs", "--input", "x=one.npz", "--input", w]);
    assert_eq!((code, out.as_str()), (0, "4.\n"), "{err}");
}

#[test]
fn gradbench_refuses_hostile_sizes_and_keeps_serving() {
    let input = "{\"id\": 0, \"kind\": \"define\", \"module\": \"llsq\"}\n\
                 {\"id\": 1, \"kind\": \"evaluate\", \"module\": \"llsq\", \"function\": \"gradient\", \"input\": {\"x\": [1.0], \"n\": 1000000000000}}\n\
                 {\"id\": 2, \"kind\": \"evaluate\", \"module\": \"llsq\", \"function\": \"primal\", \"input\": {\"x\": [1.0], \"n\": 3, \"min_runs\": 10000000000}}\n\
                 {\"id\": 3, \"kind\": \"evaluate\", \"module\": \"llsq\", \"function\": \"primal\", \"input\": {\"x\": [1.0], \"n\": 3}}\n";
    let s = stdout(graft().env("GRAFT_MAX_MEMORY", "1G").arg("gradbench").write_stdin(input));
    let lines: Vec<serde_json::Value> = s.lines().map(|l| serde_json::from_str(l).expect("JSON line")).collect();
    assert_eq!(lines.len(), 4, "{s}");
    assert_eq!(lines[1]["success"], false);
    let e = lines[1]["error"].as_str().unwrap();
    assert!(e.contains("input field `n` = 1000000000000 needs") && e.contains("memory limit of 1.0 GiB"), "{e}");
    assert_eq!(lines[2]["error"], "run policy: `min_runs` must be at most 1000000, found 10000000000");
    // t = -1, 0, 1, s = sign(t) and p(t) = 1: residuals -2, -1, 0, so 0.5 * 5.
    assert_eq!(lines[3]["output"], serde_json::json!(2.5), "{s}");
}

/// Programs whose sizes need more memory than there is, or that run too
/// long: errors with exit code 1, never an abort.
const LIMITS_PROGRAM: &str = "\
def main() -> f32 = sum(zeros((100000, 100000, 100000)))
def small(x: tensor[n, f64]) -> f64 = sum(x * 2.0)
def spin() -> i32 = while(fn (i) -> i < 2000000000, fn (i) -> i + 1, 0)
def empty() -> tensor[0, 4294967296, f32] = zeros((0, 4294967296))
def wide() -> f32 = sum(zeros((4294967296, 4294967296, 4294967296)))
";

fn run_limits(envs: &[(&str, &str)], args: &[&str]) -> (i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let prog = dir.path().join("l.graft");
    std::fs::write(&prog, LIMITS_PROGRAM).unwrap();
    let mut c = graft();
    c.arg("run").arg(&prog).args(args);
    for (k, v) in envs {
        c.env(k, v);
    }
    let out = c.output().expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("panicked") && !stderr.contains("memory allocation of"), "{args:?}: {stderr}");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), stderr)
}

#[test]
fn max_memory_refuses_a_plan_before_it_allocates() {
    // The default limit (half of physical memory) refuses 4e15 bytes.
    let (code, out, err) = run_limits(&[], &[]);
    assert_eq!(code, 1, "{err}");
    assert!(out.is_empty());
    assert!(err.contains("`main` at these input sizes needs 3638.0 TiB"), "{err}");
    assert!(err.contains("over the memory limit of") && err.contains("l.graft:1:5"), "{err}");
    assert!(err.contains("--max-memory"), "{err}");
    // --max-memory and GRAFT_MAX_MEMORY set the limit; the flag wins.
    let small = ["--entry", "small", "--input", "x=[1.0, 2.0]"];
    let (code, _, err) = run_limits(&[], &[&small[..], &["--max-memory", "40"]].concat());
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("`small` at these input sizes needs 48 bytes, over the memory limit of 40 bytes"), "{err}");
    let (code, _, err) = run_limits(&[("GRAFT_MAX_MEMORY", "40")], &small);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("over the memory limit of 40 bytes"), "{err}");
    let (code, out, err) = run_limits(&[("GRAFT_MAX_MEMORY", "40")], &[&small[..], &["--max-memory", "1K"]].concat());
    assert_eq!((code, out.as_str()), (0, "6.\n"), "{err}");
    // A malformed limit is a usage error.
    let (code, _, err) = run_limits(&[], &[&small[..], &["--max-memory", "10Q"]].concat());
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--max-memory 10Q"), "{err}");
}

#[test]
fn tensors_too_large_for_memory_are_errors_not_aborts() {
    // Past the memory check (a huge limit), the allocation itself fails
    // cleanly: 4e15 bytes is more than any address space holds.
    let (code, out, err) = run_limits(&[("GRAFT_MAX_MEMORY", "100000T")], &[]);
    assert_eq!(code, 1, "{err}");
    assert!(out.is_empty());
    assert!(err.contains("cannot allocate 3638.0 TiB (4000000000000000 bytes)"), "{err}");
    assert!(err.contains("f32[100000,100000,100000]") && err.contains("out of memory"), "{err}");
    // An element count that overflows is a type error at the call.
    let (code, _, err) = run_limits(&[], &["--entry", "wide"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("fits in usize") && err.contains("l.graft:5:"), "{err}");
    // A legal empty tensor with a huge dimension prints like NumPy's.
    let (code, out, err) = run_limits(&[], &["--entry", "empty"]);
    assert_eq!((code, out.as_str()), (0, "[]\n"), "{err}");
}

#[test]
fn timeout_stops_a_run_with_an_error() {
    let start = std::time::Instant::now();
    let (code, out, err) = run_limits(&[], &["--entry", "spin", "--timeout", "0.5"]);
    assert_eq!(code, 1, "{err}");
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("stopped after --timeout 0.5 s while running"), "{err}");
    assert!(start.elapsed().as_secs() < 60, "{:?}", start.elapsed());
    let small = ["--entry", "small", "--input", "x=[1.0, 2.0]"];
    let (code, out, err) = run_limits(&[], &[&small[..], &["--timeout", "600"]].concat());
    assert_eq!((code, out.as_str()), (0, "6.\n"), "{err}");
    for bad in ["0", "-1", "nan", "inf"] {
        let (code, _, err) = run_limits(&[], &[&small[..], &["--timeout", bad]].concat());
        assert_eq!(code, 2, "--timeout {bad}: {err}");
    }
}

#[test]
fn check_and_run_agree_on_call_depth() {
    let dir = tempfile::tempdir().unwrap();
    let prog = dir.path().join("deep.graft");
    let mut src = String::from("def f0(x: f64) -> f64 = x\n");
    for i in 1..1000 {
        src.push_str(&format!("def f{i}(x: f64) -> f64 = f{}(x) + 1.0\n", i - 1));
    }
    src.push_str("def main() -> f64 = f999(1.0)\n");
    std::fs::write(&prog, &src).unwrap();
    for cmd in ["check", "run"] {
        let out = graft().arg(cmd).arg(&prog).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{cmd}: {err}");
        assert!(err.contains("calls nest more than 200 deep") && err.contains("deep.graft:"), "{cmd}: {err}");
        assert!(err.contains("this call is too deep"), "{cmd}: {err}");
    }
}

/// Every example's `main` gives bitwise-identical results at 1 and 2
/// threads and when run again (issue 14, item 6): each run's `--out` arrays
/// are compared as .npy bytes (dtype, shape and every bit of the data, so
/// NaN payloads and signed zeros count), and the printed text too.
#[test]
fn examples_are_bitwise_deterministic_across_threads_and_runs() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(examples())
        .expect("examples/ exists")
        .map(|e| e.expect("readable entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "graft"))
        .collect();
    files.sort();
    assert!(files.len() >= 12, "only {} examples", files.len());
    let dir = tempfile::tempdir().unwrap();
    let mut compared = 0;
    for path in &files {
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let mut first: Option<(String, Vec<(String, Vec<u8>)>)> = None;
        for threads in ["1", "2"] {
            for rep in 0..2 {
                let out = dir.path().join(format!("{name}-{threads}-{rep}.npz"));
                let printed =
                    stdout(graft().env("RAYON_NUM_THREADS", threads).arg("run").arg(path).arg("--out").arg(&out));
                let arrays: Vec<(String, Vec<u8>)> = npy::load_npz(&out)
                    .expect("--out is a readable .npz")
                    .into_iter()
                    .map(|(k, t)| {
                        let mut bytes = Vec::new();
                        npy::write_npy(&mut bytes, &t).unwrap();
                        (k, bytes)
                    })
                    .collect();
                assert!(!arrays.is_empty(), "{name}: no results");
                match &first {
                    None => first = Some((printed, arrays)),
                    Some((p0, a0)) => {
                        assert_eq!(&printed, p0, "{name}: printed results differ at {threads} threads, run {rep}");
                        assert_eq!(a0.len(), arrays.len(), "{name}");
                        for ((k0, b0), (k, b)) in a0.iter().zip(&arrays) {
                            assert_eq!(k0, k, "{name}");
                            assert!(b0 == b, "{name}: result {k} differs bitwise at {threads} threads, run {rep}");
                        }
                        compared += 1;
                    }
                }
            }
        }
    }
    assert_eq!(compared, 3 * files.len());
}

#[test]
fn disable_compile_env_runs_op_by_op_with_the_same_output() {
    for file in ["syntax.graft", "rk4_ode.graft", "hvp.graft"] {
        let compiled = stdout(graft().arg("run").arg(examples().join(file)));
        let op_by_op = stdout(graft().env("GRAFT_DISABLE_COMPILE", "1").arg("run").arg(examples().join(file)));
        assert_eq!(compiled, op_by_op, "{file}");
    }
}

/// Bool literals are inputs of bool parameters (scalars and arrays), and
/// only of those: a number for a bool, or a bool for a number, is a located
/// error (nothing is cast).
#[test]
fn bool_literal_inputs_are_for_bool_parameters() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("b.graft"), "def mask(x: tensor[2, bool], b: bool) -> (tensor[2, bool], bool) = (x, b)\n\ndef num(x: tensor[2, f32]) -> tensor[2, f32] = x\n").unwrap();
    let run = |args: &[&str]| {
        let out = graft().current_dir(d).arg("run").arg("b.graft").args(args).output().expect("runs");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, err) = run(&["--entry", "mask", "--input", "x=[true, false]", "--input", "b=true"]);
    assert_eq!((code, out.as_str()), (Some(0), "x: bool[2] = [ True False]\nb: bool[] = True\n"), "{err}");
    let (code, out, err) = run(&["--entry", "mask", "--input", "x=[true, 0]", "--input", "b=true"]);
    assert_eq!(code, Some(1));
    assert!(out.is_empty());
    assert!(
        err.contains("input `x`: `0` is a number, but `x` is bool") && err.contains("give `true` or `false`"),
        "{err}"
    );
    let (code, _, err) = run(&["--entry", "num", "--input", "x=[true, false]"]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("input `x`: `true` is a bool literal, but `x` is f32") && err.contains("b.graft:3:9"),
        "{err}"
    );
    let (code, _, err) = run(&["--entry", "mask", "--input", "x=[-true, false]", "--input", "b=true"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("is not a number, a bool or a rectangular array of one of them"), "{err}");
}

/// f64 values whose rounding to 8 significant fractional digits carries into
/// a new leading digit print with the exponent bumped (`1.e-10`), as NumPy
/// prints them, never with a two-digit mantissa (`10.e-11`).
#[test]
fn printing_rounds_a_carry_into_the_exponent() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("p.graft"),
        "def main() {\n  let c: f64 = 9.9999999995e-11\n  let big: f64 = 9.9999999996e20\n  let neg: f64 = -9.99999999999e-5\n  let pos: tensor[2, f64] = [0.999999999996, 1.5]\n  (c, [c, 1.0], big, [neg, 2.0], pos)\n}\n\ndef lp(x: tensor[1, f64]) -> tensor[1, f64] = log1p(x)\n",
    )
    .unwrap();
    let s = stdout(graft().current_dir(d).args(["run", "--raw", "p.graft"]));
    assert_eq!(s, "0: 1.e-10\n1: [1.e-10 1.e+00]\n2: 1.e+21\n3: [-1.e-04  2.e+00]\n4: [1.  1.5]\n");
    let s = stdout(graft().current_dir(d).args(["run", "p.graft", "--entry", "lp", "--input", "x=[1e-10]"]));
    assert_eq!(s, "[1.e-10]\n");
}

#[test]
fn npz_keys_tuple_parameters_and_seeds_are_explicit() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let f32s = |v: &[f32]| Tensor::from_vec(vec![v.len()], v.to_vec()).unwrap();
    npy::save_npz(
        d.join("d.npz"),
        &[("a".to_string(), f32s(&[1.0, 2.0, 3.0])), ("b".to_string(), f32s(&[4.0, 5.0, 6.0]))],
    )
    .unwrap();
    let run = |prog: &str, args: &[&str]| {
        std::fs::write(d.join("q.graft"), prog).unwrap();
        let out = graft().current_dir(d).arg("run").arg("q.graft").args(args).output().expect("runs");
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), err)
    };
    // `NAME=PATH.npz:KEY` picks one array of an archive of several.
    let vec_prog = "def main(x: tensor[3, f32]) -> f32 = sum(x)\n";
    assert_eq!(run(vec_prog, &["--input", "x=d.npz:b"]).1, "15.\n");
    let (code, _, err) = run(vec_prog, &["--input", "x=d.npz:c"]);
    assert_eq!(code, 1);
    assert!(err.contains("input `x`: d.npz has no array named `c`") && err.contains("it holds a, b"), "{err}");
    // A tuple parameter takes a whole archive, its arrays in order.
    let tuple_prog = "def main(p: (tensor[3, f32], tensor[3, f32])) -> f32 = sum(p.0 * p.1)\n";
    assert_eq!(run(tuple_prog, &["--input", "p=d.npz"]).1, "32.\n");
    let nested = "def main(p: (tensor[3, f32], (i32, tensor[3, f32]))) -> f32 = sum(p.0)\n";
    let (code, _, err) = run(nested, &["--input", "p=d.npz"]);
    assert_eq!(code, 1);
    assert!(err.contains("d.npz holds 2 arrays, but `p` has 3 tensors"), "{err}");
    assert!(err.contains("bound in archive order to p.0, p.1.0, p.1.1"), "{err}");
    let ints = "def main(p: (tensor[3, f32], tensor[3, i32])) -> f32 = sum(p.0)\n";
    let (code, _, err) = run(ints, &["--input", "p=d.npz"]);
    assert_eq!(code, 1);
    assert!(err.contains("input `p.1` (array `b` of d.npz) must be tensor[3, i32] (dtype i32, rank 1)"), "{err}");
    let (code, _, err) = run(tuple_prog, &["--input", "p=[1, 2, 3]"]);
    assert_eq!(code, 1);
    assert!(err.contains("a tuple parameter takes a whole .npz archive"), "{err}");
    // A `seed` parameter is never silently zero: --seed or --input sets it.
    let seed_prog = "def main(seed: i32) -> i32 = seed\n";
    let (code, out, err) = run(seed_prog, &[]);
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert!(err.contains("missing input for parameter `seed` of `main`") && err.contains("--seed N"), "{err}");
    assert_eq!(run(seed_prog, &["--seed", "3"]).1, "3\n");
    assert_eq!(run(seed_prog, &["--input", "seed=5"]).1, "5\n");
}

#[test]
fn results_are_labelled_by_name_or_path_with_their_types() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("r.graft"),
        "def main() {\n  let loss = 0.5\n  let grads = (1.0, [[1.0, 2.0], [3.0, 4.0]])\n  (loss, grads, loss, ([1, 2], true))\n}\n",
    )
    .unwrap();
    let run = |args: &[&str]| stdout(graft().current_dir(d).arg("run").arg("r.graft").args(args));
    // Names the body returns, a named tuple's parts as NAME.i, paths for
    // the rest (and for a name used twice), each with its type; continued
    // lines line up under the value.
    assert_eq!(
        run(&[]),
        "loss: f32[] = 0.5\n\
         grads.0: f32[] = 1.\n\
         grads.1: f32[2,2] = [[1. 2.]\n\
         \x20                    [3. 4.]]\n\
         2: f32[] = 0.5\n\
         3.0: i32[2] = [1 2]\n\
         3.1: bool[] = True\n"
    );
    assert_eq!(run(&["--raw"]), "0: 0.5\n1: 1.\n2: [[1. 2.]\n    [3. 4.]]\n3: 0.5\n4: [1 2]\n5: True\n");
    // --out writes the same labels as keys (indices with --raw).
    let keys = |args: &[&str]| {
        let out = d.join("o.npz");
        run(&[&["--out", out.to_str().unwrap()], args].concat());
        npy::load_npz(&out).unwrap().into_iter().map(|(k, _)| k).collect::<Vec<_>>()
    };
    assert_eq!(keys(&[]), ["loss", "grads.0", "grads.1", "2", "3.0", "3.1"]);
    assert_eq!(keys(&["--raw"]), ["0", "1", "2", "3", "4", "5"]);
    // A single tensor prints as its value.
    std::fs::write(d.join("r.graft"), "def main() = [1.0, 2.0]\n").unwrap();
    assert_eq!(run(&[]), "[1. 2.]\n");
}

/// Generic defs: `check` says which ones no concrete def calls (so only
/// their names were checked); running one as the entry is an error at its
/// type parameter; the optimizers example runs.
#[test]
fn generic_defs_in_check_and_run() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("g.graft");
    std::fs::write(
        &p,
        "def sgd[T](p: T, g: T) -> T = p - 0.5 * g\ndef lonely[T](p: T) -> T = p\ndef main() = sgd((1.0, [2.0]), (2.0, [2.0]))\n",
    )
    .unwrap();
    let s = stdout(graft().arg("check").arg(&p));
    assert!(s.contains("ok (3 definitions)"), "{s}");
    assert!(s.contains("generic def `lonely` is not called from any def with concrete types"), "{s}");
    let s = stdout(graft().arg("run").arg(&p));
    assert_eq!(s, "0: f32[] = 0.\n1: f32[1] = [1.]\n");
    let out =
        graft().arg("run").arg(&p).args(["--entry", "sgd", "--input", "p=1.0", "--input", "g=1.0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("`sgd` is generic and cannot be an entry: it has the type parameter `T`"), "{err}");
    assert!(err.contains("g.graft:1:9"), "{err}");
    let s = stdout(graft().arg("run").arg(examples().join("optimizers.graft")).arg("--raw"));
    assert_eq!(s.lines().count(), 4, "{s}");
}

/// `debug_print` lines go to stderr, in program order, once per loop trip
/// and once per example under vmap; stdout holds only the results; the
/// compile mode changes neither. A bad format is a located error (exit 1).
#[test]
fn run_prints_debug_lines_on_stderr_in_every_compile_mode() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("p.graft");
    std::fs::write(
        &file,
        "def step(x: tensor[n, f32]) -> tensor[n, f32] {\n  debug_print(\"row {}\", x)\n  x * 2.0\n}\n\
         def main() {\n  let y = fori(2, fn (i, c) -> {\n    debug_print(\"i={} sum={}\", i, sum(c))\n    c + 1.0\n  }, [1.0, 2.0])\n  \
         let z = vmap(step)([[1.0, 2.0], [3.0, 4.0]])\n  debug_print(\"done {}\", y)\n  (y, z)\n}\n",
    )
    .unwrap();
    let want_err = "i=0 sum=3.\ni=1 sum=5.\nrow [1. 2.]\nrow [3. 4.]\ndone [3. 4.]\n";
    let want_out = "y: f32[2] = [3. 4.]\nz: f32[2,2] = [[2. 4.]\n               [6. 8.]]\n";
    for mode in ["off", "sync", "async"] {
        let out = graft().arg("run").arg(&file).env("GRAFT_COMPILE", mode).output().expect("runs");
        assert!(out.status.success(), "{mode}: {}", String::from_utf8_lossy(&out.stderr));
        let err: String = String::from_utf8_lossy(&out.stderr)
            .lines()
            .filter(|l| !l.starts_with("graft: warning"))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(err, want_err, "{mode}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), want_out, "{mode}");
    }
    std::fs::write(&file, "def main() {\n  debug_print(\"{} and {}\", 1.0)\n  2.0\n}\n").unwrap();
    let out = graft().arg("run").arg(&file).output().expect("runs");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("2 placeholders `{}` but 1 value is given") && err.contains("p.graft:2:3"), "{err}");
}

/// `GRAFT_SHAPELESS=1` (size-generic kernels for the whole process) changes
/// no result: a dimension-generic def at two sizes, with a row reduction,
/// a broadcast and a slice, prints what the interpreter prints.
#[test]
fn shapeless_kernels_print_the_interpreters_results() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("p.graft");
    std::fs::write(
        &file,
        "def f(x: tensor[r, c, f32], w: tensor[c, f32]) -> tensor[r, f32] {\n  \
         let y = softmax(x, axis=1) * w + x * 0.5\n  sum(y[:, 1:], axis=1)\n}\n\
         def main() {\n  let a = reshape(arange(15.0), (3, 5)) / 7.0\n  let b = reshape(arange(36.0), (4, 9)) / 11.0\n  \
         (f(a, arange(5.0)), f(b, arange(9.0) - 2.0))\n}\n",
    )
    .unwrap();
    let run = |envs: &[(&str, &str)]| {
        let out = graft().arg("run").arg(&file).envs(envs.iter().copied()).output().expect("runs");
        assert!(out.status.success(), "{envs:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let want = run(&[("GRAFT_COMPILE", "off")]);
    assert_eq!(run(&[("GRAFT_COMPILE", "sync"), ("GRAFT_SHAPELESS", "1")]), want);
    assert_eq!(want.lines().count(), 2, "{want}");
}

#[test]
fn f16_npy_input_and_f16_output() {
    use graft_core::half::f16;
    let dir = tempfile::tempdir().unwrap();
    let prog = dir.path().join("half.graft");
    std::fs::write(&prog, "def main(x: tensor[n, f16], s: f16) -> (tensor[n, f16], f16) = (x * x * s, sum(x, 0))\n")
        .unwrap();
    let xs = [
        graft_core::dtype::f16_from_f64(0.5),
        graft_core::dtype::f16_from_f64(3.0),
        graft_core::dtype::f16_from_f64(0.1),
    ];
    let x = dir.path().join("x.npy");
    npy::save_npy(&x, &Tensor::vec1(&xs)).unwrap();
    let out = dir.path().join("out.npz");
    let s = stdout(
        graft()
            .arg("run")
            .arg(&prog)
            .arg(format!("--input=x={}", x.display()))
            .args(["--input", "s=2.0"])
            .arg("--out")
            .arg(&out),
    );
    // Each op computed in f32 and rounded to f16.
    let sq: Vec<f16> = xs
        .iter()
        .map(|v| {
            let x2 = f16::from_f32(v.to_f32() * v.to_f32());
            f16::from_f32(x2.to_f32() * 2.0)
        })
        .collect();
    let sum = f16::from_f32(xs.iter().map(|v| v.to_f32()).sum());
    let arrays = npy::load_npz(&out).unwrap();
    assert_eq!(arrays.len(), 2);
    assert_eq!(arrays[0].1.to_vec::<f16>().unwrap(), sq);
    assert_eq!(arrays[1].1.to_vec::<f16>().unwrap(), vec![sum]);
    // Printed like f32 values (the shortest decimals that read back as the same f32).
    let lines: Vec<&str> = s.lines().collect();
    assert_eq!(lines.len(), 2, "{s}");
    assert_eq!(lines[0], "0: f16[3] = [ 0.5        18.          0.01998901]", "{s}");
    assert_eq!(lines[1], format!("1: f16[] = {}", Tensor::scalar(sum)), "{s}");
    // An f16 literal that overflows is refused, not rounded to inf.
    let o = graft()
        .arg("run")
        .arg(&prog)
        .arg(format!("--input=x={}", x.display()))
        .args(["--input", "s=1e6"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("overflows f16"), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn u32_npy_input_and_u32_output() {
    let dir = tempfile::tempdir().unwrap();
    let prog = dir.path().join("words.graft");
    std::fs::write(
        &prog,
        "def main(x: tensor[n, u32], k: u32) -> (tensor[n, u32], u32, tensor[n, bool]) = (x * k + 1, max(x, 0), x > 2147483647)\n",
    )
    .unwrap();
    let xs = vec![0u32, 1, 0x8000_0000, u32::MAX];
    let x = dir.path().join("x.npy");
    npy::save_npy(&x, &Tensor::from_vec(vec![4], xs.clone()).unwrap()).unwrap();
    // NumPy's `<u4` header.
    assert!(String::from_utf8_lossy(&std::fs::read(&x).unwrap()).contains("'<u4'"));
    let out = dir.path().join("out.npz");
    let s = stdout(
        graft()
            .arg("run")
            .arg(&prog)
            .arg(format!("--input=x={}", x.display()))
            .args(["--input", "k=4294967295"])
            .arg("--out")
            .arg(&out),
    );
    // Wrapping modulo 2^32, unsigned order.
    let want: Vec<u32> = xs.iter().map(|v| v.wrapping_mul(u32::MAX).wrapping_add(1)).collect();
    let arrays = npy::load_npz(&out).unwrap();
    assert_eq!(arrays.len(), 3);
    assert_eq!(arrays[0].1.to_vec::<u32>().unwrap(), want);
    assert_eq!(arrays[1].1.to_vec::<u32>().unwrap(), vec![u32::MAX]);
    assert_eq!(arrays[2].1.to_vec::<bool>().unwrap(), vec![false, false, true, true]);
    let lines: Vec<&str> = s.lines().collect();
    assert_eq!(lines.len(), 3, "{s}");
    assert_eq!(lines[0], "0: u32[4] = [         1          0 2147483649          2]", "{s}");
    assert_eq!(lines[1], "1: u32[] = 4294967295", "{s}");
    // A negative or too large literal is refused, not wrapped.
    for bad in ["k=-1", "k=4294967296"] {
        let o = graft()
            .arg("run")
            .arg(&prog)
            .arg(format!("--input=x={}", x.display()))
            .args(["--input", bad])
            .output()
            .unwrap();
        assert!(!o.status.success());
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(e.contains("out of range for u32"), "{e}");
    }
}
