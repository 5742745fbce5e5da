//! Snapshot tests of lex and parse diagnostics, rendered exactly as the
//! CLI shows them (`diag::render`): one test per distinct error case.

use graft_lang::diag::{render, Stage};
use graft_lang::parse;

/// Parses `src`, which must fail, and renders every diagnostic.
fn errs(src: &str) -> String {
    match parse(src) {
        Ok(p) => panic!("expected a parse error, got {p:?}"),
        Err(ds) => {
            assert!(!ds.is_empty());
            for d in &ds {
                assert!(matches!(d.stage, Stage::Lex | Stage::Parse), "stage {:?}", d.stage);
                assert!(d.span.start <= d.span.end && d.span.end <= src.len(), "span {:?} out of range", d.span);
            }
            ds.iter().map(|d| render(d, "test.graft", src)).collect::<Vec<_>>().join("\n")
        }
    }
}

macro_rules! error_case {
    ($name:ident, $src:expr) => {
        #[test]
        fn $name() {
            let rendered = errs($src);
            insta::assert_snapshot!(rendered);
        }
    };
}

// ----- lexing -----------------------------------------------------------
error_case!(lex_unknown_character, "def f(x: f32) -> f32 = x $ 2\n");
error_case!(lex_double_ampersand, "def f(a: bool, b: bool) -> bool = a && b\n");
error_case!(lex_bang_not, "def f(a: bool) -> bool = !a\n");
error_case!(lex_single_pipe, "def f(a: bool, b: bool) -> bool = a | b\n");
error_case!(lex_unterminated_string, "def f(a: tensor[n, n, f32]) -> tensor[n, n, f32] = einsum(\"ij,jk->ik, a, a)\n");
error_case!(lex_unknown_escape, "def f(a: tensor[n, f32]) -> f32 = einsum(\"i\\q\", a)\n");
error_case!(lex_integer_too_large, "def f() -> i64 = 99999999999999999999\n");
error_case!(lex_float_too_large, "def f() -> f64 = 1e999\n");
error_case!(lex_number_with_suffix, "def f(x: f32) -> f32 = 2x\n");
error_case!(lex_non_ascii_name, "def f(λ: f32) -> f32 = λ\n");
error_case!(lex_single_quotes, "def f(a: tensor[n, f32]) -> f32 = einsum('i->', a)\n");
error_case!(lex_several_errors, "def f(x: f32) -> f32 = x $ 2\ndef g(y: f32) -> f32 = y & 2\n");

// ----- transforms -------------------------------------------------------
error_case!(bare_grad, "def f(x: f32) -> f32 = x * x\ndef g(x: f32) -> f32 = grad\n");
error_case!(grad_without_arguments, "def g(x: f32) -> f32 = grad()(x)\n");
error_case!(grad_only_keyword, "def g(a: f32, b: f32) -> (f32, f32) = grad(wrt=(a, b))(a, b)\n");
error_case!(vmap_bare_in_pipe, "def g(xs: tensor[b, n, f32]) -> tensor[b, n, f32] = xs |> vmap\n");
error_case!(transform_as_let_name, "def g(x: f32) -> f32 {\n  let grad = x * 2\n  grad\n}\n");
error_case!(transform_as_param_name, "def g(vmap: f32) -> f32 = vmap\n");

// ----- definitions and signatures ----------------------------------------
error_case!(unclosed_call_at_eof, "def f(x: f32) -> f32 = g(x, ");
error_case!(unclosed_call_wrong_token, "def f(x: f32, y: f32) -> f32 = g(x y)\n");
error_case!(missing_body, "def f(x: f32) -> f32\n  x\n");
error_case!(colon_result_type, "def f(x: f32): f32 = x\n");
error_case!(missing_param_type, "def f(x) = x\n");
error_case!(duplicate_param, "def f(x: f32, x: f32) -> f32 = x\n");
error_case!(unclosed_param_list, "def f(x: f32 y: f32) -> f32 = x\n");
error_case!(unexpected_end_after_equals, "def f(x: f32) -> f32 =");
error_case!(keyword_as_def_name, "def let(x: f32) -> f32 = x\n");
error_case!(top_level_statement, "x = 3\n");
error_case!(attribute_without_def, "@grad(w)\n");
error_case!(two_defs_on_one_line, "def f() -> f32 = 1.0 def g() -> f32 = 2.0\n");
error_case!(recovers_to_report_each_broken_def, "def f(x) = x\ndef ok(x: f32) -> f32 = x\ndef g(y: f32) -> f32 = (y\n");

// ----- types ---------------------------------------------------------------
error_case!(unknown_type, "def f(x: float) -> f32 = x\n");
error_case!(tensor_missing_dtype, "def f(x: tensor[n, m]) -> f32 = sum(x)\n");
error_case!(tensor_dtype_not_last, "def f(x: tensor[f32, n]) -> f32 = sum(x)\n");
error_case!(tensor_without_brackets, "def f(x: tensor) -> f32 = sum(x)\n");
error_case!(negative_dimension, "def f(x: tensor[-1, f32]) -> f32 = sum(x)\n");
error_case!(unclosed_tensor_type, "def f(x: tensor[n, f32) -> f32 = sum(x)\n");

// ----- blocks and statements -----------------------------------------------
error_case!(block_ends_with_let, "def f(x: f32) -> f32 {\n  let y = x * 2\n}\n");
error_case!(empty_block, "def f(x: f32) -> f32 {}\n");
error_case!(expression_before_last_line, "def f(x: f32) -> f32 {\n  x * 2\n  x + 1\n}\n");
error_case!(line_starting_with_operator, "def f(x: f32, y: f32) -> f32 {\n  let a = x\n  a\n    + y\n}\n");
error_case!(two_lets_on_one_line, "def f(x: f32) -> f32 {\n  let a = x let b = a\n  b\n}\n");
error_case!(let_with_double_equals, "def f(x: f32) -> f32 {\n  let y == x\n  y\n}\n");
error_case!(let_outside_block, "def f(x: f32) -> f32 = let y = x\n");
error_case!(
    assignment_without_let,
    "def f(w: f32, b: f32) -> (f32, f32) {\n  (dw, db) = grad(loss, wrt=(w, b))(w, b)\n  (dw, db)\n}\n"
);
error_case!(literal_let_pattern, "def f(x: f32) -> f32 {\n  let 0 = x\n  x\n}\n");
error_case!(unclosed_block_at_eof, "def f(x: f32) -> f32 {\n  let y = x\n  y\n");

// ----- expressions -----------------------------------------------------------
error_case!(chained_comparison, "def f(a: f32, b: f32, c: f32) -> bool = a < b < c\n");
error_case!(positional_after_keyword, "def f(x: tensor[n, f32]) -> f32 = mean(x, axis=0, true)\n");
error_case!(duplicate_keyword, "def f(x: tensor[n, f32]) -> f32 = mean(x, axis=0, axis=1)\n");
error_case!(colon_keyword_argument, "def f(x: tensor[n, f32]) -> f32 = mean(x, axis: 0)\n");
error_case!(if_without_else, "def f(x: f32) -> f32 = if x > 0 then x\n");
error_case!(if_with_braces, "def f(x: f32) -> f32 = if x > 0 { x } else { -x }\n");
error_case!(lambda_fat_arrow, "def f(xs: tensor[n, f32]) -> tensor[n, f32] = tabulate(n, fn (i) => xs[i])\n");
error_case!(match_missing_arrow, "def f(i: i32) -> f32 = match i { 0 -> 1.0, _ => 2.0 }\n");
error_case!(match_without_arms, "def f(i: i32) -> f32 = match i { }\n");
error_case!(match_arms_on_one_line, "def f(i: i32) -> f32 = match i { 0 => 1.0 _ => 2.0 }\n");
error_case!(named_field_access, "def f(x: tensor[n, f32]) -> f32 = x.sum\n");
error_case!(empty_parentheses, "def f() -> f32 = g(())\n");
error_case!(empty_array, "def f() -> f32 = sum([])\n");
error_case!(empty_index, "def f(x: tensor[n, f32]) -> f32 = x[]\n");
error_case!(unclosed_index, "def f(x: tensor[n, m, f32]) -> f32 = x[0, 1\n");
error_case!(unclosed_array, "def f() -> tensor[3, f32] = [1.0, 2.0 3.0]\n");
error_case!(unclosed_tuple, "def f(a: f32, b: f32) -> (f32, f32) = (a, b\n");
error_case!(underscore_as_value, "def f(x: f32) -> f32 = _ + x\n");
error_case!(not_as_operand, "def f(a: bool, b: bool) -> bool = a == not b\n");
error_case!(missing_operand, "def f(a: f32) -> f32 = a * \n");
error_case!(tuple_index_not_number, "def f(t: (f32, f32)) -> f32 = t.(0)\n");

#[test]
fn deep_nesting_is_a_diagnostic_not_a_crash() {
    let src = format!("def f(x: f32) -> f32 = {}x{}\n", "(".repeat(100_000), ")".repeat(100_000));
    let rendered = errs(&src);
    assert!(rendered.contains("nested too deeply"), "{rendered}");
    let src = format!("def f(x: f32) -> f32 = {}x\n", "-".repeat(100_000));
    assert!(errs(&src).contains("nested too deeply"));
    let src = format!("def f(x: f32) -> f32 = x{}\n", " + x".repeat(100_000));
    assert!(errs(&src).contains("nested too deeply"));
}

#[test]
fn nesting_below_the_limit_parses() {
    let depth = graft_lang::parser::MAX_DEPTH / 2;
    let src = format!("def f(x: f32) -> f32 = {}x{}\n", "(".repeat(depth), ")".repeat(depth));
    assert!(parse(&src).is_ok());
    let src = format!("def f(x: f32) -> f32 = x{}\n", " + x".repeat(depth));
    let p = parse(&src).expect("a sum of 100 terms parses");
    assert_eq!(graft_lang::sexpr::program_to_sexpr(&p).matches("(+ {}").count(), depth);
}

#[test]
fn nesting_at_the_limit_parses_on_a_small_caller_stack() {
    // `parse` runs on its own large stack, so the caller's does not matter.
    let r = std::thread::Builder::new()
        .stack_size(256 << 10)
        .spawn(|| {
            let d = graft_lang::parser::MAX_DEPTH - 2;
            let src = format!("def f(x: f32) -> f32 = {}x{}\n", "(".repeat(d), ")".repeat(d));
            let p = parse(&src).expect("nesting just below the limit parses");
            let deep = format!("def f(x: f32) -> f32 = {}x{}\n", "(".repeat(d + 10), ")".repeat(d + 10));
            assert!(parse(&deep).is_err());
            graft_lang::sexpr::program_to_sexpr(&p).len()
        })
        .unwrap()
        .join()
        .expect("no stack overflow");
    assert!(r > 0);
}
