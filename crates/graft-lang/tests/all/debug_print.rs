//! `debug_print` in the language: the lines (captured with
//! `graft_core::ops::debug::capture_prints`) and their order inside `scan`,
//! `fori` (static and run-time counts), `while`, under `vmap` (one line per
//! example) and `grad` (the forward values once; results bitwise those of
//! the program without the print), the same lines and results with native
//! compilation off and synchronous, and the located errors.

use crate::common::{check_error, module};
use graft_core::kernel::CompileMode;
use graft_core::ops::debug::capture_prints;
use graft_core::{ExecOptions, Executable, Tensor};

/// Runs `entry` of `src` planned with `compile` (fusion on), returning the
/// results' bits and the printed lines.
fn run_mode(src: &str, entry: &str, inputs: &[Tensor], compile: CompileMode) -> (Vec<Vec<u64>>, Vec<String>) {
    let m = module(src);
    let types: Vec<_> = inputs.iter().map(Tensor::ty).collect();
    let c = m.instantiate(entry, &types).unwrap_or_else(|d| panic!("{}", d.message));
    let exe = Executable::with_options(c.func.clone(), ExecOptions { compile, ..ExecOptions::default() }).unwrap();
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let (outs, lines) = capture_prints(|| exe.run(&refs).unwrap());
    let bits = outs.iter().map(|t| t.to_f64_vec().into_iter().map(f64::to_bits).collect()).collect();
    (bits, lines)
}

/// The lines and results of `entry` in both compile modes (which must agree),
/// and the results of the same program with every `debug_print` line removed
/// (which must be bitwise the same).
fn lines_of(src: &str, entry: &str, inputs: &[Tensor]) -> Vec<String> {
    let (off, lines_off) = run_mode(src, entry, inputs, CompileMode::Off);
    let (sync, lines_sync) = run_mode(src, entry, inputs, CompileMode::Sync);
    assert_eq!(lines_off, lines_sync, "compile modes print differently");
    assert_eq!(off, sync, "compile modes compute differently");
    let quiet: String =
        src.lines().filter(|l| !l.trim_start().starts_with("debug_print")).map(|l| format!("{l}\n")).collect();
    let (plain, none) = run_mode(&quiet, entry, inputs, CompileMode::Sync);
    assert!(none.is_empty());
    assert_eq!(off, plain, "the print changed the results");
    lines_off
}

fn v(xs: &[f64]) -> Tensor {
    Tensor::vec1(xs)
}

#[test]
fn scan_prints_every_step_in_order() {
    let src = "def f(xs: tensor[n, f64]) {\n  scan(fn (c, x) -> {\n    debug_print(\"c={} x={}\", c, x)\n    (c * 0.5 + x, c)\n  }, 1.0, xs)\n}\n";
    let lines = lines_of(src, "f", &[v(&[1.0, 2.0, 3.0])]);
    assert_eq!(lines, ["c=1. x=1.", "c=1.5 x=2.", "c=2.75 x=3."]);
}

#[test]
fn fori_with_static_and_run_time_counts_and_nested_loops() {
    let src = "def f(x: tensor[2, f64], n: i32) {\n  let a = fori(2, fn (i, c) -> {\n    debug_print(\"outer {}\", i)\n    fori(2, fn (j, d) -> {\n      debug_print(\"  inner {} {}\", i, j)\n      d + 1.0\n    }, c)\n  }, x)\n  fori(n, fn (k, c) -> {\n    debug_print(\"dynamic {} {}\", k, c)\n    c * 2.0\n  }, a)\n}\n";
    let lines = lines_of(src, "f", &[v(&[0.5, 1.0]), Tensor::scalar(3i32)]);
    assert_eq!(
        lines,
        [
            "outer 0",
            "  inner 0 0",
            "  inner 0 1",
            "outer 1",
            "  inner 1 0",
            "  inner 1 1",
            "dynamic 0 [4.5 5. ]",
            "dynamic 1 [ 9. 10.]",
            "dynamic 2 [18. 20.]",
        ]
    );
}

#[test]
fn while_prints_every_trip() {
    let src = "def f(a: f64) {\n  while(fn (c) -> c.1 < 3, fn (c) -> {\n    debug_print(\"trip {} x={}\", c.1, c.0)\n    (0.5 * (c.0 + a / c.0), c.1 + 1)\n  }, (a, 0))\n}\n";
    let lines = lines_of(src, "f", &[Tensor::scalar(4.0f64)]);
    assert_eq!(lines, ["trip 0 x=4.", "trip 1 x=2.5", "trip 2 x=2.05"]);
}

#[test]
fn vmap_prints_one_line_per_example() {
    let src = "def g(x: tensor[2, f64], s: f64) {\n  debug_print(\"x={} s={}\", x, s)\n  debug_print(\"shared {}\", s)\n  sum(x) * s\n}\n\
               def f(xs: tensor[3, 2, f64], s: f64) = vmap(g, in_axes=(0, none))(xs, s)\n";
    let xs = Tensor::from_vec(vec![3usize, 2], vec![1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
    let lines = lines_of(src, "f", &[xs, Tensor::scalar(0.5f64)]);
    assert_eq!(lines, ["x=[1. 2.] s=0.5", "x=[3. 4.] s=0.5", "x=[5. 6.] s=0.5", "shared 0.5"]);
}

#[test]
fn vmap_of_a_loop_prints_each_step_for_every_example() {
    let src = "def g(x: f64) = fori(2, fn (i, c) -> {\n  debug_print(\"{}: {}\", i, c)\n  c * c\n}, x)\n\
               def f(xs: tensor[2, f64]) = vmap(g)(xs)\n";
    let lines = lines_of(src, "f", &[v(&[2.0, 3.0])]);
    assert_eq!(lines, ["0: 2.", "0: 3.", "1: 4.", "1: 9."]);
}

#[test]
fn grad_prints_the_forward_values_once_and_keeps_the_gradient() {
    let src = "def loss(w: tensor[2, f64], xs: tensor[3, f64]) -> f64 {\n  let (c, _) = scan(fn (c, x) -> {\n    debug_print(\"loss {} at x={}\", c, x)\n    (c + sum(w * w) * x, c)\n  }, 0.0, xs)\n  c\n}\n\
               def f(w: tensor[2, f64], xs: tensor[3, f64]) = value_and_grad(loss)(w, xs)\n\
               def h(w: tensor[2, f64], xs: tensor[3, f64]) = grad(fn (w) -> sum(grad(loss, wrt=w)(w, xs)))(w)\n";
    let args = [v(&[1.0, 2.0]), v(&[1.0, 2.0, 3.0])];
    let lines = lines_of(src, "f", &args);
    assert_eq!(lines, ["loss 0. at x=1.", "loss 5. at x=2.", "loss 15. at x=3."]);
    // Second order: one forward evaluation of the loop.
    assert_eq!(lines_of(src, "h", &args), lines);
}

#[test]
fn a_checkpointed_function_prints_once_under_grad() {
    let src = "def inner(x: f64) -> f64 {\n  debug_print(\"inner {}\", x)\n  sin(x) * x\n}\n\
               def f(x: f64) = grad(fn (x) -> checkpoint(inner)(x) + 1.0)(x)\n";
    assert_eq!(lines_of(src, "f", &[Tensor::scalar(0.5f64)]), ["inner 0.5"]);
}

#[test]
fn braces_and_literals() {
    let src = "def f(x: f64) {\n  debug_print(\"{{literal}} {} {} {}\", x, 2, [1.5, 2.5])\n  debug_print(\"no values\")\n  x\n}\n";
    assert_eq!(lines_of(src, "f", &[Tensor::scalar(1.0f64)]), ["{literal} 1. 2 [1.5 2.5]", "no values"]);
}

#[test]
fn bad_formats_are_located_errors() {
    let (msg, at) = check_error("def f(x: f32) -> f32 {\n  debug_print(\"{} {}\", x)\n  x\n}\n");
    assert!(msg.contains("the format string has 2 placeholders `{}` but 1 value is given"), "{msg}");
    assert_eq!(at, (2, 3));
    // An extra value is pointed at.
    let (msg, at) = check_error("def f(x: f32) -> f32 {\n  debug_print(\"x\", x)\n  x\n}\n");
    assert!(msg.contains("0 placeholders"), "{msg}");
    assert_eq!(at, (2, 20));
    let (msg, at) = check_error("def f(x: f32) -> f32 {\n  debug_print(x, x)\n  x\n}\n");
    assert!(msg.contains("the first argument must be a format string"), "{msg}");
    assert_eq!(at, (2, 15));
    let (msg, at) = check_error("def f(x: f32) -> f32 {\n  debug_print(\"oops {\", x)\n  x\n}\n");
    assert!(msg.contains("bad format string"), "{msg}");
    assert_eq!(at, (2, 15));
    let (msg, _) = check_error("def f(x: f32) -> f32 {\n  debug_print(\"{}\", fn (a) -> a)\n  x\n}\n");
    assert!(msg.contains("prints tensors and numbers"), "{msg}");
    // Both branches of a select would print.
    let (msg, at) = check_error(
        "def f(x: tensor[2, f32]) -> tensor[2, f32] = if x > 0.0 then {\n  debug_print(\"pos\")\n  x\n} else x\n",
    );
    assert!(msg.contains("would print for both branches"), "{msg}");
    assert_eq!(at, (2, 3));
}

#[test]
fn a_scalar_if_prints_only_the_taken_branch() {
    let src = "def f(x: f64) = if x > 0.0 then {\n  debug_print(\"positive {}\", x)\n  x\n} else {\n  debug_print(\"negative {}\", x)\n  -x\n}\n";
    assert_eq!(lines_of(src, "f", &[Tensor::scalar(2.0f64)]), ["positive 2."]);
    assert_eq!(lines_of(src, "f", &[Tensor::scalar(-2.0f64)]), ["negative -2."]);
}

#[test]
fn fold_in_in_a_loop_matches_jax() {
    // jax.random.fold_in(PRNGKey(42), d) for d = 7 and 123456 (JAX 0.10.2).
    let m = module("def f(i: i32) = (fold_in(key(42), 7), fold_in(key(42), i), fold_in(key(42), cast(i, i64)))\n");
    let o = crate::common::run(&m, "f", &[Tensor::scalar(123456i32)]);
    let leaves: Vec<Vec<i32>> = o.leaves().iter().map(|t| t.to_vec::<i32>().unwrap()).collect();
    assert_eq!(leaves, [vec![-1747954385, 1371500959], vec![793847391, 18989694], vec![793847391, 18989694]]);
    let (msg, _) = check_error("def f() = fold_in(key(1), -1)\n");
    assert!(msg.contains("`data` must be in 0 ..= 4294967295"), "{msg}");
    let (msg, _) = check_error("def f(x: f32) = fold_in(key(1), x)\n");
    assert!(msg.contains("integer scalar"), "{msg}");
}

#[test]
fn a_print_of_constants_prints_on_every_trip() {
    // Nothing in the print depends on the loop: it must neither be folded
    // at plan time nor evaluated once while building a native loop.
    let src =
        "def f(x: tensor[4, f64]) = fori(3, fn (i, c) -> {\n  debug_print(\"tick {}\", 7)\n  c * 2.0 + 1.0\n}, x)\n";
    assert_eq!(lines_of(src, "f", &[v(&[1.0, 2.0, 3.0, 4.0])]), ["tick 7", "tick 7", "tick 7"]);
}

#[test]
fn a_branch_in_a_loop_body_prints_only_when_taken() {
    // Compiled loops if-convert a body's `cond` (all branches, then a
    // select); a branch that prints must not be converted.
    let src = "def f(x: tensor[3, f64]) = fori(4, fn (i, c) -> if i % 2 == 0 then {\n  debug_print(\"even {}\", i)\n  c + 1.0\n} else {\n  debug_print(\"odd {}\", i)\n  c * 2.0\n}, x)\n";
    assert_eq!(lines_of(src, "f", &[v(&[1.0, 2.0, 3.0])]), ["even 0", "odd 1", "even 2", "odd 3"]);
}
