//! Collectives in the language: `vmap(f, axis_name=...)` binds the name the
//! builtins `psum`, `pmean`, ..., `axis_index` use; a def using them is
//! lowered per binding (its instance is not cached across vmap sizes);
//! derivatives follow the sum-over-ranks convention; an unbound name is a
//! located error, while `check` accepts such a def on its own.

use crate::common::{check_error, close, f64s, leaf_values, module, run};

const SRC: &str = r#"
def normalize(x: tensor[n, f64]) -> tensor[n, f64] = x / psum(sum(x), "i")

def both(a: tensor[r, n, f64], b: tensor[s, n, f64]) -> (tensor[r, n, f64], tensor[s, n, f64]) =
  (vmap(normalize, axis_name="i")(a), vmap(normalize, axis_name="i")(b))

def loss(a: tensor[r, n, f64]) -> f64 = sum(vmap(normalize, axis_name="i")(a) * a)

def gradient(a: tensor[r, n, f64]) -> tensor[r, n, f64] = grad(loss)(a)

def ranks(a: tensor[r, n, f64]) -> (tensor[r, n, f64], tensor[r, i32], tensor[r, n, f64]) =
  vmap(fn (x) -> (pmax(x, "i") - pmin(x, "i"), axis_index("i"), ppermute(x, "i", ((0, 1), (1, 0)))), axis_name="i")(a)
"#;

#[test]
fn one_def_under_vmaps_of_two_sizes() {
    let m = module(SRC);
    let a = f64s(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let b = f64s(&[3, 2], &[1.0, 1.0, 1.0, 1.0, 1.0, 1.0]);
    let v = leaf_values(&run(&m, "both", &[a, b]));
    close("size 2", &v[0], &[0.1, 0.2, 0.3, 0.4], 1e-15);
    close("size 3", &v[1], &[1.0 / 6.0; 6], 1e-15);
}

#[test]
fn gradients_differentiate_the_sum_over_the_ranks() {
    // loss(a) = sum(a^2) / sum(a): d/da = 2a/S - Q/S^2.
    let m = module(SRC);
    let vals = [1.0, 2.0, 3.0, 4.0];
    let (s, q): (f64, f64) = (vals.iter().sum(), vals.iter().map(|x| x * x).sum());
    let g = leaf_values(&run(&m, "gradient", &[f64s(&[2, 2], &vals)]));
    let want: Vec<f64> = vals.iter().map(|x| 2.0 * x / s - q / (s * s)).collect();
    close("gradient", &g[0], &want, 1e-14);
}

#[test]
fn max_min_index_and_permute_over_the_batch() {
    let m = module(SRC);
    let v = leaf_values(&run(&m, "ranks", &[f64s(&[2, 2], &[1.0, 5.0, 3.0, 4.0])]));
    close("pmax - pmin", &v[0], &[2.0, 1.0, 2.0, 1.0], 0.0);
    close("axis_index", &v[1], &[0.0, 1.0], 0.0);
    close("ppermute", &v[2], &[3.0, 4.0, 1.0, 5.0], 0.0);
}

#[test]
fn check_accepts_a_def_whose_axis_its_caller_binds_and_an_unbound_name_is_located() {
    // `check` lowers each def on its own, with a placeholder size for names
    // a caller's vmap will bind; running finds the unbound name.
    module(SRC).check().unwrap_or_else(|ds| panic!("{:?}", ds.iter().map(|d| d.message.clone()).collect::<Vec<_>>()));
    let src = "def main(x: tensor[3, f32]) -> tensor[3, f32] = vmap(fn (v) -> psum(v, \"j\"), axis_name=\"i\")(x)\n";
    let m = module(src);
    let d = m.run("main", &[graft_core::Tensor::from_vec(vec![3], vec![1.0f32, 2.0, 3.0]).unwrap()]).unwrap_err();
    assert!(d.message.contains("the axis name \"j\" is not bound here"), "{}", d.message);
    assert_eq!(graft_lang::diag::line_col(src, d.span.start), (1, 72), "at the axis name");
    let (msg, _) = check_error("def main(x: tensor[3, f32]) -> tensor[3, f32] = vmap(fn (v) -> v, axis_name=3)(x)\n");
    assert!(msg.contains("`axis_name` must be a string"), "{msg}");
}
