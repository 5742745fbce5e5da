//! Snapshot tests of `graft ast` output for every seed example and every
//! snippet of issue 6's Syntax section, plus exact checks of the two forms
//! seed 000 prints.

use graft_lang::{parse, parse_expr, sexpr};

fn ast(src: &str) -> String {
    match parse(src) {
        Ok(p) => sexpr::program_to_sexpr(&p),
        Err(ds) => panic!(
            "parse failed: {}",
            ds.iter().map(|d| graft_lang::diag::render(d, "test.graft", src)).collect::<String>()
        ),
    }
}

fn expr(src: &str) -> String {
    match parse_expr(src) {
        Ok(e) => sexpr::expr_to_sexpr(&e),
        Err(ds) => panic!(
            "parse failed: {}",
            ds.iter().map(|d| graft_lang::diag::render(d, "test.graft", src)).collect::<String>()
        ),
    }
}

const ISSUE_EXAMPLE: &str = r#"# comments start with #
def loss(w: tensor[n, f32], b: f32, x: tensor[m, n, f32], y: tensor[m, f32]) -> f32 {
  let pred = x @ w + b
  let err = pred - y
  mean(err * err, 0)
}

def process(x: tensor[features, f32]) -> tensor[features, f32] = relu(x)

def batch_process(xs: tensor[batch, features, f32]) -> tensor[batch, features, f32] =
  xs |> vmap(process, axis=0)

def grads(w: tensor[n, f32], b: f32, x: tensor[m, n, f32], y: tensor[m, f32]) -> (tensor[n, f32], f32) {
  let (dw, db) = grad(loss, wrt=(w, b))(w, b, x, y)
  (dw, db)
}

@grad(w)
def dloss_dw(w: tensor[n, f32], x: tensor[n, f32], y: f32) -> tensor[n, f32] = (sum(w * x, 0) - y) ** 2
"#;

/// Prints each expression snippet followed by its S-expression.
fn exprs(snippets: &[&str]) -> String {
    snippets.iter().map(|s| format!("{s}\n=> {}\n\n", expr(s))).collect()
}

#[test]
fn issue_example() {
    insta::assert_snapshot!(ast(ISSUE_EXAMPLE));
}

#[test]
fn seed000_grad_form_exact() {
    assert_eq!(expr("grad(loss_fn)"), "(grad {} (var {} loss_fn))");
}

#[test]
fn seed000_vmap_form_exact() {
    assert_eq!(expr("vmap(process, axis=0)"), "(vmap {} (var {} process) (lit {type: (t-prim {} int32)} 0))");
}

#[test]
fn seed000_examples() {
    let out = exprs(&[
        "grad(loss_fn)",
        "grad(loss_fn, wrt=(w, b))(w, b)",
        "{ let (dw, db) = grad(loss_fn, wrt=(w, b))(w, b)\n  (dw, db) }",
        "grad(grad(f))",
        "vmap(grad(f))",
        "grad(vmap(f))",
        "grad(fn (xs) -> sum(vmap(process, axis=0)(xs), 0))",
    ]);
    insta::assert_snapshot!(out);
}

#[test]
fn seed000_process_defs_unindented() {
    // Exactly as the seed lays it out: the body on the next line, column 0.
    let src = "def process(x: tensor[features, f32]) -> tensor[features, f32] = relu(x)\n\
               def batch_process(xs: tensor[batch, features, f32]) -> tensor[batch, features, f32] =\n\
               xs |> vmap(process, axis=0)\n";
    insta::assert_snapshot!(ast(src));
}

#[test]
fn seed001_examples() {
    // Seed 001's loss and @grad(w) example in graft syntax.
    let src = r#"
def loss(w: tensor[N, f32], x: tensor[N, f32], y: f32) -> f32 {
  let pred = sum(w * x)
  let err = pred - y
  err * err
}

# the @grad attribute requests the compiler synthesise a gradient
@grad(w)
def dloss_dw(w: tensor[N, f32], x: tensor[N, f32], y: f32) -> tensor[N, f32] = loss(w, x, y)

# several @grad attributes, and forward mode
@grad(w)
@grad(x)
def loss2(w: tensor[N, f32], x: tensor[N, f32], y: f32) -> f32 = loss(w, x, y)

@jvp(x) def tangent(x: f32) -> f32 = sin(x) * x
"#;
    insta::assert_snapshot!(ast(src));
}

#[test]
fn types() {
    let src = "def f(a: f32, b: f64, c: i32, d: i64, e: bool, t: tensor[3, n, f32], u: tensor[f64], \
               v: tensor[batch, 28, 28, i64,], p: (f32, tensor[n, bool]), q: (f32,), r: ((f32, i32), (bool)), \
               s: tensor[\n  m,\n  n,\n  f32\n]) -> (f32, f32) = (a, a)\n";
    insta::assert_snapshot!(ast(src));
}

#[test]
fn bodies() {
    let src = r#"
def expr_body(x: f32) -> f32 = x * 2
def next_line(x: f32) -> f32 =
  x * 2
def block_body(x: f32, y: f32) -> f32 {
  let a = x + y
  let (b, c) = (a, a * 2)
  let d: f32 = b * c
  let (_, e) = (d, d)
  let ((f, g), h) = ((1, 2), 3); let i = 4
  a + e
}
def no_ret(x: f32) = x
def one_line(x: f32) -> f32 { x }
def no_params() -> f32 = 1.0
def trailing_comma(
  a: f32,
  b: f32,
) -> f32 = a + b
"#;
    insta::assert_snapshot!(ast(src));
}

#[test]
fn literals() {
    let out = exprs(&[
        "1",
        "2.5",
        "true",
        "false",
        "[1.0, 2.0]",
        "[[1, 2], [3, 4]]",
        "[[1, 2],\n [3, 4],]",
        "1e-5",
        "1.5e3",
        "3.",
        "-7",
        "-0.25",
        "1_000_000",
        "\"ij,jk->ik\"",
        "\"a \\\"quoted\\\" \\\\ \\n string\"",
    ]);
    insta::assert_snapshot!(out);
}

#[test]
fn operators_and_precedence() {
    let out = exprs(&[
        "a + b * c",
        "a - b - c",
        "a / b * c",
        "x @ w + b",
        "a * b @ c",
        "a ** b ** c",
        "-x ** 2",
        "-2 ** 2",
        "2 ** -1",
        "-(x)",
        "--x",
        "a < b",
        "a <= b + 1",
        "a == b and c != d",
        "a > b or c >= d and e",
        "not a == b",
        "not not a",
        "a and not b or c",
        "(a + b) * c",
        "x |> f",
        "x |> f |> g",
        "x |> f(y)",
        "x + 1 |> f",
        "a or b |> f",
    ]);
    insta::assert_snapshot!(out);
}

#[test]
fn calls_tuples_fields_and_indexing() {
    let out = exprs(&[
        "f()",
        "f(x)",
        "f(x, y,)",
        "sum(x, 0)",
        "sum(x, features)",
        "sum(x)",
        "mean(x, axis=1, keepdims=true)",
        "f(x)(y)",
        "(a, b)",
        "(a,)",
        "(a, (b, c))",
        "t.0",
        "t.1.0",
        "f(x).0",
        "x[i]",
        "x[0, -1]",
        "x[:, 1:3]",
        "x[::-1]",
        "x[1:]",
        "x[:2]",
        "x[::2, i + 1]",
        "x[i][j]",
        "x[f(i):n - 1:2]",
    ]);
    insta::assert_snapshot!(out);
}

#[test]
fn lambdas_if_match() {
    let out = exprs(&[
        "fn (a, b) -> a + b",
        "fn (a: f32) -> a * a",
        "fn (a: tensor[n, f32], b) -> a @ b",
        "fn i -> i * 2",
        "fn () -> 1.0",
        "fn ((c, h), x) -> (c, h)",
        "fn (x) -> x |> f",
        "if c then a else b",
        "if x > 0 then x else -x",
        "if a then b else if c then d else e",
        "if c then a else b |> f",
        "(if c then a else b) |> f",
        "1 + if c then 2 else 3",
        "if c\n  then a\n  else b",
        "match i { 0 => a, 1 => b, _ => c }",
        "match i {\n  0 => a\n  -1 => b\n  _ => c\n}",
        "match flag { true => 1, false => 0, }",
        "match (i, j) { (0, 0) => a, (0, _) => b, (k, _) => c }",
    ]);
    insta::assert_snapshot!(out);
}

#[test]
fn standard_library_calls() {
    let out = exprs(&[
        "exp(x)",
        "softmax(x)",
        "log_softmax(x, axis=0)",
        "reshape(x, (3, 4))",
        "transpose(x)",
        "transpose(x, (1, 0))",
        "concat((a, b), axis=0)",
        "stack((a, b), axis=0)",
        "einsum(\"ij,jk->ik\", a, b)",
        "gather(table, idx)",
        "one_hot(labels, n)",
        "layer_norm(x, gamma, beta)",
        "conv2d(x, w, stride=1, padding=0)",
        "max_pool2d(x, 2)",
        "zeros((3, 4))",
        "arange(10)",
        "key(0)",
        "split(k)",
        "uniform(k, (3, 4))",
        "normal(k, (3, 4))",
        "scan(f, init, xs)",
        "scan(fn (c, x) -> (c + x, c * x), 0.0, xs)",
        "fori(n, fn (i, c) -> c + i, 0.0)",
        "while(fn c -> c < 10.0, fn c -> c * 2.0, 1.0)",
        "tabulate(n, fn i -> i * i)",
        "stop_gradient(x)",
    ]);
    insta::assert_snapshot!(out);
}

#[test]
fn transforms() {
    let out = exprs(&[
        "grad(f)",
        "grad(f, wrt=(a, b))",
        "grad(f, wrt=a)",
        "value_and_grad(f, wrt=(w, b))",
        "jvp(f, (x, y), (tx, ty))",
        "vjp(f, (x, y), ct)",
        "vmap(f, axis=0)",
        "vmap(f, 1)",
        "vmap(f, in_axes=(0, none), out_axes=0)",
        "checkpoint(f)",
        "jacfwd(f)",
        "jacrev(f, wrt=x)",
        "hessian(f)",
        "vmap(grad(f))",
        "grad(grad(f))",
        "grad(fn (xs) -> sum(vmap(process, axis=0)(xs), 0))",
        "grad(loss, wrt=(w, b))(w, b, x, y)",
        "xs |> vmap(process, axis=0)",
        "checkpoint(fn (x) -> tanh(x))(y)",
        "jvp(f, (x,), (t,)).1",
    ]);
    insta::assert_snapshot!(out);
}

#[test]
fn attributes_and_custom_rules() {
    let src = r#"
def f_fwd(x: f32) -> (f32, f32) = (sin(x), cos(x))
def f_bwd(c: f32, g: f32) -> f32 = g * c

@custom_vjp(f_fwd, f_bwd)
def f(x: f32) -> f32 = sin(x)

def g_rule(x: f32, t: f32) -> (f32, f32) = (exp(x), exp(x) * t)

@custom_jvp(g_rule)
def g(x: f32) -> f32 = exp(x)

@grad(w) @grad(b)
def both(w: f32, b: f32) -> f32 = w * b

@jvp(p)
def fwd_mode(p: f32) -> f32 = p * p
"#;
    insta::assert_snapshot!(ast(src));
}

#[test]
fn line_continuations() {
    let src = r#"
def f(x: f32, y: f32) -> f32 {
  let a = x +
    y
  let b = x
    |> g
    |> h
  let c = f(
    a,
    b
  )
  let d = [
    1.0, 2.0,
    3.0
  ]
  let e = if a > b
    then a
    else b
  let k = fn (u) ->
    u * 2
  let m = match a {
    0 => 1
    _ => 2
  }
  let n =
    a * b
  a +
    b
}
"#;
    insta::assert_snapshot!(ast(src));
}
