//! Bounded work on big or broken programs (issue 14, item 4): large
//! generated programs check (time close to linear: no quadratic pass over
//! blocks, defs or literals; no timing is asserted here), errors per file
//! are capped with a count of the rest, a run of stray characters is one
//! error, a long line is not echoed whole, and `check` rejects the call
//! chains `run` rejects, with the same located diagnostic.

use graft_core::Tensor;
use graft_lang::{diag, Module};

fn module(src: &str) -> Module {
    Module::from_source("t.graft", src)
        .unwrap_or_else(|ds| panic!("{}", ds.iter().map(|d| diag::render(d, "t.graft", src)).collect::<String>()))
}

fn render_all(ds: &[diag::Diagnostic], src: &str) -> String {
    ds.iter().map(|d| diag::render(d, "t.graft", src)).collect()
}

/// Runs a test body on a big stack, like the CLI (the front end recurses
/// over the tree); a panic fails the test.
fn big_stack(f: fn()) {
    let h = std::thread::Builder::new().stack_size(graft_lang::STACK_SIZE).spawn(f).expect("spawn");
    if let Err(e) = h.join() {
        std::panic::resume_unwind(e);
    }
}

#[test]
fn a_50000_line_program_checks() {
    big_stack(a_50000_line_program_checks_body);
}

fn a_50000_line_program_checks_body() {
    // 500 defs of 98 `let` lines each, every def calling the previous one
    // (chains stay well below the call-depth limit: 10 links each).
    let mut src = String::new();
    for d in 0..500 {
        src.push_str(&format!("def g{d}(x: tensor[n, f64]) -> tensor[n, f64] {{\n  let a0 = x\n"));
        for i in 1..98 {
            src.push_str(&format!("  let a{i} = a{} * 0.5 + {i}.0\n", i - 1));
        }
        if d % 10 == 0 {
            src.push_str("  a97\n}\n");
        } else {
            src.push_str(&format!("  g{}(a97)\n}}\n", d - 1));
        }
    }
    assert!(src.lines().count() >= 50_000);
    let m = Module::from_source("big.graft", &src).unwrap_or_else(|ds| panic!("{}", render_all(&ds, &src)));
    m.check().unwrap_or_else(|ds| panic!("{}", render_all(&ds, &src)));
    assert_eq!(m.program().defs.len(), 500);
    // And the last one runs: each def adds the same affine map 10 times.
    let out = m.run("g499", &[Tensor::from_vec(vec![2], vec![1.0f64, 2.0]).unwrap()]).unwrap();
    let got = out.tensor().unwrap().to_f64_vec();
    let step = |mut a: f64| {
        for i in 1..98 {
            a = a * 0.5 + i as f64;
        }
        a
    };
    let want: Vec<f64> = [1.0f64, 2.0].iter().map(|&x| (0..10).fold(x, |a, _| step(a))).collect();
    assert_eq!(got, want);
}

#[test]
fn a_block_of_8000_lets_a_big_array_literal_and_many_defs_check() {
    big_stack(a_block_of_8000_lets_a_big_array_literal_and_many_defs_check_body);
}

fn a_block_of_8000_lets_a_big_array_literal_and_many_defs_check_body() {
    let mut lets = String::from("def main(x: tensor[n, f64]) -> tensor[n, f64] {\n  let a0 = x\n");
    for i in 1..8000 {
        lets.push_str(&format!("  let a{i} = a{} + x\n", i - 1));
    }
    lets.push_str("  a7999\n}\n");
    module(&lets).check().unwrap();
    let elems: Vec<String> = (0..20_000).map(|i| format!("{i}.0")).collect();
    let arr = format!("def main() -> tensor[20000, f64] = [{}]\n", elems.join(", "));
    let m = module(&arr);
    m.check().unwrap();
    let v = m.run("main", &[]).unwrap().tensor().unwrap().to_f64_vec();
    assert_eq!(v.len(), 20_000);
    assert_eq!(v[19_999], 19_999.0);
    let mut defs = String::new();
    for i in 0..2000 {
        defs.push_str(&format!("def f{i}(x: tensor[n, f64]) -> tensor[n, f64] = x * {i}.0 + 1.0\n"));
    }
    defs.push_str("def main(x: tensor[n, f64]) -> tensor[n, f64] = f1999(f1998(x))\n");
    module(&defs).check().unwrap();
}

#[test]
fn a_run_of_stray_characters_is_one_error_and_its_line_is_clipped() {
    big_stack(a_run_of_stray_characters_is_one_error_and_its_line_is_clipped_body);
}

fn a_run_of_stray_characters_is_one_error_and_its_line_is_clipped_body() {
    let src = format!("def main() -> f64 = 1.0\n{}\n", "$".repeat(20_000));
    let ds = Module::from_source("t.graft", &src).unwrap_err();
    assert_eq!(ds.len(), 1, "{:?}", ds.iter().map(|d| &d.message).collect::<Vec<_>>());
    assert!(ds[0].message.contains("unexpected characters") && ds[0].message.contains("20000 characters"));
    assert_eq!(ds[0].span, 24..24 + 20_000);
    let text = diag::render(&ds[0], "t.graft", &src);
    assert!(text.contains("t.graft:2:1"), "{text}");
    assert!(text.len() < 4000, "the excerpt echoes the whole line: {} bytes", text.len());
    assert!(text.contains('…'), "{text}");
}

#[test]
fn errors_per_file_are_capped_with_a_count_of_the_rest() {
    big_stack(errors_per_file_are_capped_with_a_count_of_the_rest_body);
}

fn errors_per_file_are_capped_with_a_count_of_the_rest_body() {
    // 10 000 separate stray characters on one line.
    let src = format!("def main() -> f64 = 1.0\n{}\n", "$ ".repeat(10_000));
    let ds = Module::from_source("t.graft", &src).unwrap_err();
    assert_eq!(ds.len(), diag::MAX_ERRORS);
    let last = ds.last().unwrap();
    assert!(last.notes.iter().any(|n| n.contains("9950 more errors not shown")), "{:?}", last.notes);
    let text = render_all(&ds, &src);
    assert!(text.len() < 100_000, "{} bytes of errors", text.len());
    // The column of a clipped line is still the real one.
    assert!(text.contains("t.graft:2:99"), "{}", &text[..2000.min(text.len())]);
    // 5000 unknown names in one block.
    let mut src = String::from("def main(x: f64) -> f64 {\n");
    for i in 0..5000 {
        src.push_str(&format!("  let a{i} = b{i} + x\n"));
    }
    src.push_str("  x\n}\n");
    let ds = Module::from_source("t.graft", &src).unwrap_err();
    assert_eq!(ds.len(), diag::MAX_ERRORS);
    assert!(ds[0].message.contains("unknown name `b0`"), "{}", ds[0].message);
    assert!(ds.last().unwrap().notes.iter().any(|n| n.contains("4950 more errors not shown")));
    // Type errors in many defs: checking stops after the cap.
    let mut src = String::new();
    for i in 0..200 {
        src.push_str(&format!("def f{i}(x: tensor[n, f64], y: tensor[m, f64]) -> tensor[n, f64] = x + y\n"));
    }
    let m = module(&src);
    let ds = m.check().unwrap_err();
    assert_eq!(ds.len(), diag::MAX_ERRORS);
    assert!(ds.last().unwrap().notes.iter().any(|n| n.contains("150 more definitions were not checked")));
}

/// A chain of `n` defs, `f0` .. `f{n-1}`, each calling the one before, and
/// `main` calling the last.
fn chain(n: usize) -> String {
    let mut src = String::from("def f0(x: f64) -> f64 = x\n");
    for i in 1..n {
        src.push_str(&format!("def f{i}(x: f64) -> f64 = f{}(x) + 1.0\n", i - 1));
    }
    src.push_str(&format!("def main() -> f64 = f{}(1.0)\n", n - 1));
    src
}

#[test]
fn check_rejects_the_call_chains_run_rejects() {
    big_stack(check_rejects_the_call_chains_run_rejects_body);
}

fn check_rejects_the_call_chains_run_rejects_body() {
    let src = chain(1000);
    let m = module(&src);
    let ds = m.check().unwrap_err();
    assert!(ds.iter().all(|d| d.message.contains("calls nest more than 200 deep")), "{}", render_all(&ds, &src));
    let text = render_all(&ds[..1], &src);
    assert!(text.contains("this call is too deep") && text.contains("t.graft:"), "{text}");
    // `run` (a fresh module, nothing cached) says the same; so does a run
    // after `check` filled the instantiation cache.
    let fresh = module(&src);
    let d = fresh.run("main", &[]).unwrap_err();
    assert!(d.message.contains("calls nest more than 200 deep"), "{}", d.message);
    let d = m.run("main", &[]).unwrap_err();
    assert!(d.message.contains("calls nest more than 200 deep"), "{}", d.message);
    // A chain short enough for `run` passes `check`, and runs.
    let src = chain(60);
    let m = module(&src);
    m.check().unwrap_or_else(|ds| panic!("{}", render_all(&ds, &src)));
    let v = m.run("main", &[]).unwrap().tensor().unwrap().to_f64_vec();
    assert_eq!(v, vec![60.0]);
    // Between the two: whatever `run` says, `check` says.
    for n in [95, 99, 100, 101, 105] {
        let src = chain(n);
        let checked = module(&src).check().is_ok();
        let ran = module(&src).run("main", &[]).is_ok();
        assert_eq!(checked, ran, "chain of {n}: check {checked}, run {ran}");
    }
}
