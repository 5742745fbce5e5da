//! Snapshots of rendered diagnostics for name, type, dimension, transform
//! and run-time input errors (lex/parse errors are in parse_errors.rs).
//! Each case is a whole program; `check` (or a run with the given inputs)
//! must fail, and the rendered text is snapshotted.

use graft_core::Tensor;
use graft_lang::{diag, Module};

fn render_check(src: &str) -> String {
    let m = match Module::from_source("case.graft", src) {
        Ok(m) => m,
        Err(ds) => return ds.iter().map(|d| diag::render(d, "case.graft", src)).collect::<Vec<_>>().join("\n"),
    };
    match m.check() {
        Ok(()) => panic!("expected an error for:\n{src}"),
        Err(ds) => ds.iter().map(|d| diag::render(d, "case.graft", src)).collect::<Vec<_>>().join("\n"),
    }
}

fn render_run(src: &str, entry: &str, inputs: &[Tensor]) -> String {
    let m = Module::from_source("case.graft", src).expect("parses");
    match m.run(entry, inputs) {
        Ok(_) => panic!("expected an error"),
        Err(d) => diag::render(&d, "case.graft", src),
    }
}

macro_rules! case {
    ($name:ident, $src:expr) => {
        #[test]
        fn $name() {
            insta::assert_snapshot!(render_check($src));
        }
    };
}

case!(unknown_name, "def f(x: f32) -> f32 = x + y\n");
case!(unknown_name_suggestion, "def f(x: tensor[n, f32]) -> f32 = summ(x)\n");
case!(unknown_function_in_call, "def f(x: f32) -> f32 = frobnicate(x)\n");
case!(duplicate_def, "def f(x: f32) -> f32 = x\ndef f(x: f32) -> f32 = x * 2\n");
case!(unbound_result_dim, "def main(x: tensor[n, f64]) -> tensor[k, f64] = x * 2.0\n");
case!(unbound_result_dim_suggestion, "def f(x: tensor[batch, f32]) -> (tensor[batc, f32], f32) = (x, sum(x))\n");
case!(unbound_result_dim_no_params, "def f() -> tensor[n, f32] = zeros((3,))\n");

/// Every unbound dimension of a result type is reported, each at its own
/// location; dimensions any parameter binds (and literal sizes) are fine.
#[test]
fn unbound_result_dims_are_all_reported_with_locations() {
    let src = "def ok(x: tensor[n, f32], y: tensor[m, n, f32]) -> (tensor[m, f32], tensor[n, 2, f32]) = (y @ x, stack((x, x), axis=1))\n\
               def bad(x: tensor[n, f32]) -> (tensor[k, n, f32], (f32, tensor[j, f32])) = x\n";
    let Err(ds) = Module::from_source("case.graft", src) else {
        panic!("`bad` names unbound dimensions");
    };
    let names: Vec<(&str, (u32, u32))> =
        ds.iter().map(|d| (d.message.as_str(), diag::line_col(src, d.span.start))).collect();
    assert_eq!(
        names,
        vec![
            ("dimension `k` in the result type of `bad` is not bound by any parameter", (2, 39)),
            ("dimension `j` in the result type of `bad` is not bound by any parameter", (2, 64)),
        ]
    );
    assert!(ds.iter().all(|d| d.notes.iter().any(|n| n == "note: the parameters bind n")), "{ds:?}");
}
case!(unknown_attribute, "@fast\ndef f(x: f32) -> f32 = x\n");
case!(grad_attr_unknown_param, "@grad(q)\ndef f(x: f32) -> f32 = x * x\n");
case!(result_type_mismatch, "def f(x: tensor[n, f32]) -> f32 = x * 2\n");
case!(result_dim_mismatch, "def f(x: tensor[n, f32], y: tensor[m, f32]) -> tensor[n, f32] = y\n");
case!(matmul_inner_dims, "def f(a: tensor[m, k, f32], b: tensor[n, f32]) -> tensor[m, f32] = a @ b\n");
case!(elementwise_dims, "def f(a: tensor[m, f32], b: tensor[n, f32]) -> tensor[m, f32] = a + b\n");
case!(dtype_mismatch_operands, "def f(a: tensor[n, f32], b: tensor[n, f64]) -> tensor[n, f32] = a * b\n");
case!(call_dim_mismatch, "def g(a: tensor[n, f32], b: tensor[n, f32]) -> f32 = sum(a * b)\ndef f(a: tensor[3, f32], b: tensor[4, f32]) -> f32 = g(a, b)\n");
case!(call_arity, "def g(a: f32, b: f32) -> f32 = a * b\ndef f(a: f32) -> f32 = g(a)\n");
case!(call_unknown_keyword, "def g(a: f32, b: f32) -> f32 = a * b\ndef f(a: f32) -> f32 = g(a, c=1)\n");
case!(
    grad_non_scalar,
    "def f(x: tensor[n, f32]) -> tensor[n, f32] = x * x\ndef g(x: tensor[n, f32]) -> tensor[n, f32] = grad(f)(x)\n"
);
case!(grad_wrt_unknown, "def f(x: f32, y: f32) -> f32 = x * y\ndef g(x: f32, y: f32) -> f32 = grad(f, wrt=z)(x, y)\n");
case!(
    grad_wrt_integer_param,
    "def f(x: f32, k: i32) -> f32 = x\ndef g(x: f32, k: i32) -> f32 = grad(f, wrt=k)(x, k)\n"
);
case!(grad_of_non_function, "def g(x: f32) -> f32 = grad(x)(x)\n");
case!(vmap_batch_sizes_disagree, "def f(a: tensor[n, f32], b: tensor[n, f32]) -> tensor[n, f32] = a * b\ndef g(a: tensor[3, 2, f32], b: tensor[4, 2, f32]) -> tensor[3, 2, f32] = vmap(f, axis=0)(a, b)\n");
case!(
    vmap_axis_out_of_range,
    "def f(a: tensor[n, f32]) -> tensor[n, f32] = a\ndef g(a: tensor[3, f32]) -> tensor[3, f32] = vmap(f, axis=2)(a)\n"
);
case!(vmap_unknown_option, "def f(a: tensor[n, f32]) -> tensor[n, f32] = a\ndef g(a: tensor[3, 2, f32]) -> tensor[3, 2, f32] = vmap(f, axes=0)(a)\n");
case!(error_inside_vmap_grad, "def loss(w: tensor[n, f32], x: tensor[n, f32]) -> f32 = sum(w * x)\ndef g(w: tensor[3, f32], xs: tensor[5, 4, f32]) -> tensor[5, 3, f32] = vmap(grad(loss, wrt=w), in_axes=(none, 0))(w, xs)\n");
case!(tuple_unpack_arity, "def f(x: f32) -> f32 {\n  let (a, b) = (x, x, x)\n  a\n}\n");
case!(index_out_of_bounds, "def f(x: tensor[3, f32]) -> f32 = x[5]\n");
case!(too_many_indices, "def f(x: tensor[3, f32]) -> f32 = x[0, 1]\n");
case!(axis_out_of_range, "def f(x: tensor[3, f32]) -> f32 = sum(x, 2)\n");
case!(not_on_float, "def f(x: f32) -> bool = not x\n");
case!(if_condition_not_bool, "def f(x: f32) -> f32 = if x then 1.0 else 2.0\n");
case!(calling_a_tensor, "def f(x: f32) -> f32 = x(2)\n");
case!(recursion, "def f(x: f32) -> f32 = f(x)\n");
case!(match_not_exhaustive, "def f(k: i32) -> f32 = match k { 0 => 1.0, 1 => 2.0 }\n");
case!(scan_carry_changes_type, "def f(xs: tensor[n, f32]) -> f32 = scan(fn (c, x) -> ((c, c), x), 0.0, xs).0\n");
case!(fori_float_count, "def f(n: f32, x: f32) -> f32 = fori(n, fn (i, c) -> c * x, x)\n");
case!(while_cond_not_bool, "def f(x: f32) -> f32 = while(fn (c) -> c * 2.0, fn (c) -> c, x)\n");
case!(while_body_changes_carry, "def f(x: f32) -> f32 = while(fn (c) -> c < 2.0, fn (c) -> (c, c), x)\n");
case!(custom_vjp_arity, "def h_fwd(x: f32) -> (f32, f32) = (x, x)\n@custom_vjp(h_fwd)\ndef h(x: f32) -> f32 = x\n");
case!(float_literal_for_int, "def f(k: tensor[3, i32]) -> tensor[3, i32] = k + 1.5\n");
case!(jvp_wrong_tangent_count, "def f(x: f32) -> (f32, f32) = jvp(fn (x) -> x * x, (x,), (x, x))\n");

#[test]
fn run_input_dtype_mismatch() {
    let src = "def f(x: tensor[n, f32]) -> f32 = sum(x)\n";
    insta::assert_snapshot!(render_run(src, "f", &[Tensor::from_vec(vec![2], vec![1.0f64, 2.0]).unwrap()]));
}

#[test]
fn run_input_rank_mismatch() {
    let src = "def f(x: tensor[n, f32]) -> f32 = sum(x)\n";
    insta::assert_snapshot!(render_run(src, "f", &[Tensor::scalar(1.0f32)]));
}

#[test]
fn run_missing_entry() {
    let src = "def f(x: f32) -> f32 = x\n";
    insta::assert_snapshot!(render_run(src, "main", &[]));
}

/// The messages that once suggested things that cannot help: tuple
/// arithmetic suggested `cast(x, dtype)`, a run-time slice bound suggested
/// `dynamic_slice` before the language had it (it now does, and the note
/// names it with its arguments).
#[test]
fn suggestions_for_tuple_arithmetic_and_run_time_slices_can_help() {
    let errors = |src: &str| -> String {
        let m = Module::from_source("case.graft", src).expect("parses");
        m.check().expect_err("fails").iter().map(|d| diag::render(d, "case.graft", src)).collect()
    };
    let e = errors("def f(x: tensor[2, f32]) -> f32 = sum((1.0, 2.0) + x)\n");
    assert!(e.contains("between a tuple and a non-scalar") && e.contains("`stack(t)`"), "{e}");
    assert!(e.contains("`tree_map(fn (p) -> p + x, t)`"), "{e}");
    assert!(!e.contains("cast("), "{e}");
    let e = errors("def f(x: tensor[2, f32], y: tensor[2, f64]) -> f32 = sum(x + y)\n");
    assert!(e.contains("`cast(y, f32)`"), "{e}");
    let e = errors("def f(x: tensor[8, f32], i: i32) -> tensor[2, f32] = x[i:i + 2]\n");
    assert!(e.contains("slice bounds must be known while compiling"), "{e}");
    assert!(e.contains("`dynamic_slice(x, starts, sizes)`"), "{e}");
}

/// Every call written in backticks inside a string of the front end's and
/// the CLI's sources (the suggestions of error messages: `cast(x, f32)`,
/// `stack(t)`, `grad(f)`) names a builtin, a transform, a keyword, or a
/// function the same snippet defines, so no message sends users to a
/// function that does not exist.
#[test]
fn every_function_a_message_suggests_exists() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    let mut dirs = vec![root.join("src"), root.join("../graft-cli/src")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).expect("source dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }
    assert!(files.len() > 10, "{files:?}");
    let keywords = ["fn", "let", "def", "if", "match", "while", "fori", "scan"];
    let mut checked = 0;
    let mut bad = Vec::new();
    for f in &files {
        let src = std::fs::read_to_string(f).expect("readable");
        for line in src.lines() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            // Backticked snippets inside string literals on this line.
            for (k, lit) in line.split('"').enumerate() {
                if k % 2 == 0 {
                    continue;
                }
                for (j, snippet) in lit.split('`').enumerate() {
                    if j % 2 == 0 {
                        continue;
                    }
                    let defined: Vec<&str> = snippet
                        .split("def ")
                        .skip(1)
                        .filter_map(|r| r.split(|c: char| !(c.is_alphanumeric() || c == '_')).next())
                        .collect();
                    let bytes = snippet.as_bytes();
                    let mut i = 0;
                    while i < bytes.len() {
                        if bytes[i].is_ascii_alphabetic() || bytes[i] == b'_' {
                            let start = i;
                            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                                i += 1;
                            }
                            let name = &snippet[start..i];
                            let called = snippet[i..].trim_start().starts_with('(');
                            let after_dot = start > 0 && bytes[start - 1] == b'.';
                            if called && !after_dot && !snippet[..start].ends_with('{') {
                                checked += 1;
                                let ok = graft_lang::lower::stdlib::is_builtin(name)
                                    || graft_lang::ast::transform_keyword(name).is_some()
                                    || graft_lang::ast::soft_transform(name).is_some()
                                    || keywords.contains(&name)
                                    || defined.contains(&name);
                                if !ok {
                                    bad.push(format!("{}: `{snippet}` suggests `{name}`", f.display()));
                                }
                            }
                        } else {
                            i += 1;
                        }
                    }
                }
            }
        }
    }
    assert!(checked >= 15, "only {checked} suggestions found: is the scan broken?");
    assert!(bad.is_empty(), "suggestions naming nothing that exists:\n{}", bad.join("\n"));
}
