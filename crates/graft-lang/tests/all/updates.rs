//! Functional updates and run-time slices: `x.at[idx].set/add/mul/min/max/get`,
//! `dynamic_slice`, `dynamic_update_slice`, `scatter_add`, and the `mode` /
//! `fill_value` options of `gather`/`take`. Forward values against hand
//! results, gradients against central differences in f64, vmap against the
//! per-example results, and located diagnostics for bad forms.

use crate::common::{close, f64s, leaf_values, module, run};
use graft_core::Tensor;
use graft_lang::{diag, Module};

fn i32s(shape: &[usize], v: &[i32]) -> Tensor {
    Tensor::from_vec(shape.to_vec(), v.to_vec()).unwrap()
}

fn i32_scalar(i: i32) -> Tensor {
    Tensor::scalar(i)
}

/// Runs `main` (no inputs) and returns every leaf.
fn main_values(src: &str) -> Vec<Vec<f64>> {
    let m = module(src);
    leaf_values(&run(&m, "main", &[]))
}

const X43: [f64; 12] = [0.0, 1.0, 2.0, 10.0, 11.0, 12.0, 20.0, 21.0, 22.0, 30.0, 31.0, 32.0];

#[test]
fn dynamic_slice_values_and_clamping() {
    let m = module(
        "def f(x: tensor[4, 3, f64], i: i32) -> tensor[2, 2, f64] = dynamic_slice(x, (i, 1), (2, 2))\n\
         def g(x: tensor[5, f64], i: i64) -> tensor[3, f64] = dynamic_slice(x, i, 3)\n",
    );
    let x = f64s(&[4, 3], &X43);
    let at = |i: i32| leaf_values(&run(&m, "f", &[x.clone(), i32_scalar(i)]))[0].clone();
    close("start 1", &at(1), &[11.0, 12.0, 21.0, 22.0], 0.0);
    // 3 is clamped to 2 so the 2-row block fits; -1 counts from the end (3), then clamps.
    close("start 3", &at(3), &[21.0, 22.0, 31.0, 32.0], 0.0);
    close("start -1", &at(-1), &[21.0, 22.0, 31.0, 32.0], 0.0);
    close("start -4", &at(-4), &[1.0, 2.0, 11.0, 12.0], 0.0);
    close("start -9", &at(-9), &[1.0, 2.0, 11.0, 12.0], 0.0);
    let y = f64s(&[5], &[1.0, 2.0, 3.0, 4.0, 5.0]);
    let o = leaf_values(&run(&m, "g", &[y, Tensor::scalar(1i64)]));
    close("rank 1, i64 start", &o[0], &[2.0, 3.0, 4.0], 0.0);
}

#[test]
fn dynamic_update_slice_values_and_clamping() {
    let m = module(
        "def f(x: tensor[4, 3, f64], i: i32) -> tensor[4, 3, f64] = dynamic_update_slice(x, [[-1.0, -2.0], [-3.0, -4.0]], (i, 1))\n",
    );
    let x = f64s(&[4, 3], &X43);
    let at = |i: i32| leaf_values(&run(&m, "f", &[x.clone(), i32_scalar(i)]))[0].clone();
    close("start 0", &at(0), &[0.0, -1.0, -2.0, 10.0, -3.0, -4.0, 20.0, 21.0, 22.0, 30.0, 31.0, 32.0], 0.0);
    let end = [0.0, 1.0, 2.0, 10.0, 11.0, 12.0, 20.0, -1.0, -2.0, 30.0, -3.0, -4.0];
    close("start 7 clamps to 2", &at(7), &end, 0.0);
    close("start -1 is 3, clamps to 2", &at(-1), &end, 0.0);
}

#[test]
fn at_forms_forward_values() {
    let o = main_values(
        "def main() {\n\
           let x = [1.0, 2.0, 3.0, 4.0, 5.0]\n\
           let m = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]\n\
           let i = cast(3, i32)\n\
           let far = cast(9, i32)\n\
           let neg = cast(-2, i32)\n\
           (x.at[1].set(10.0), x.at[-1].add(1.0), x.at[1:4].mul(2.0), x.at[::2].set([7.0, 8.0, 9.0]),\n\
            x.at[i].set(0.0), x.at[far].set(0.0), x.at[neg].add(100.0),\n\
            x.at[[0, 2, 2, 7, -1]].add(1.0), x.at[[0, 3]].set(-1.0), x.at[[1, 4]].min(2.5), x.at[[1, 4]].max(4.5),\n\
            m.at[1].set([7.0, 8.0, 9.0]), m.at[:, 1].mul([10.0, 100.0]), m.at[0, i].set(0.0), m.at[1, 1:].min(5.5),\n\
            x.at[i].get(), x.at[[4, 9, -1]].get(), x.at[[4, 9, -9]].get(mode=\"fill\"), x.at[[9, 0]].get(mode=\"fill\", fill_value=-7),\n\
            m.at[:, [2, 0]].get(), x.at[2:].max(3.5))\n\
         }\n",
    );
    let want: Vec<Vec<f64>> = vec![
        vec![1.0, 10.0, 3.0, 4.0, 5.0],
        vec![1.0, 2.0, 3.0, 4.0, 6.0],
        vec![1.0, 4.0, 6.0, 8.0, 5.0],
        vec![7.0, 2.0, 8.0, 4.0, 9.0],
        vec![1.0, 2.0, 3.0, 0.0, 5.0],
        // out of range: dropped
        vec![1.0, 2.0, 3.0, 4.0, 5.0],
        // -2 counts from the end
        vec![1.0, 2.0, 3.0, 104.0, 5.0],
        // duplicates accumulate, 7 is dropped, -1 is the last element
        vec![2.0, 2.0, 5.0, 4.0, 6.0],
        vec![-1.0, 2.0, 3.0, -1.0, 5.0],
        vec![1.0, 2.0, 3.0, 4.0, 2.5],
        vec![1.0, 4.5, 3.0, 4.0, 5.0],
        vec![1.0, 2.0, 3.0, 7.0, 8.0, 9.0],
        vec![1.0, 20.0, 3.0, 4.0, 500.0, 6.0],
        // i = 3 is out of range for an axis of 3: dropped
        vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
        vec![1.0, 2.0, 3.0, 4.0, 5.0, 5.5],
        vec![4.0],
        // get clamps: 9 reads the last, -1 counts from the end
        vec![5.0, 5.0, 5.0],
        vec![5.0, 0.0, 0.0],
        vec![-7.0, 1.0],
        vec![3.0, 1.0, 6.0, 4.0],
        vec![1.0, 2.0, 3.5, 4.0, 5.0],
    ];
    assert_eq!(o.len(), want.len());
    for (k, (g, w)) in o.iter().zip(&want).enumerate() {
        close(&format!("result {k}"), g, w, 0.0);
    }
}

#[test]
fn scatter_add_and_gather_modes_forward_values() {
    let o = main_values(
        "def main() {\n\
           let x = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]\n\
           let t = [10.0, 20.0, 30.0]\n\
           (scatter_add(x, [0, 2, 0, 5], [[1.0, 1.0], [2.0, 2.0], [3.0, 3.0], [9.0, 9.0]]),\n\
            scatter_add(x, [[1, 1]], 0.5), scatter_add(t, -1, 4.0),\n\
            gather(t, [0, 3, -1]), gather(t, [0, 3, -1], mode=\"fill\"), gather(t, [0, 3, -1], mode=\"fill\", fill_value=-1.5),\n\
            take(x, [1, 2, 5], axis=1, mode=\"fill\", fill_value=7), take(x, [1, 5], axis=1, mode=\"clip\"))\n\
         }\n",
    );
    let want: Vec<Vec<f64>> = vec![
        vec![5.0, 6.0, 3.0, 4.0, 7.0, 8.0],
        vec![1.0, 2.0, 4.0, 5.0, 5.0, 6.0],
        vec![10.0, 20.0, 34.0],
        vec![10.0, 30.0, 10.0],
        vec![10.0, 0.0, 0.0],
        vec![10.0, -1.5, -1.5],
        vec![2.0, 7.0, 7.0, 4.0, 7.0, 7.0, 6.0, 7.0, 7.0],
        vec![2.0, 2.0, 4.0, 4.0, 6.0, 6.0],
    ];
    assert_eq!(o.len(), want.len());
    for (k, (g, w)) in o.iter().zip(&want).enumerate() {
        close(&format!("result {k}"), g, w, 0.0);
    }
}

/// Gradients of `sum(cos(3 * expr))` with respect to `x` and `v` against
/// central differences; `i` is a run-time i32 scalar input and `ix` an i32
/// index array input.
fn fd_check(what: &str, expr: &str, xs: &[usize], x: &[f64], vs: &[usize], v: &[f64], i: i32, ix: &[i32]) {
    let dims = |s: &[usize]| s.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ");
    let (xd, vd) = (dims(xs), dims(vs));
    let vt = if vs.is_empty() { "f64".to_string() } else { format!("tensor[{vd}, f64]") };
    let src = format!(
        "def f(x: tensor[{xd}, f64], v: {vt}, i: i32, ix: tensor[{}, i32]) -> f64 = sum(cos(3.0 * ({expr})))\n\
         def g(x: tensor[{xd}, f64], v: {vt}, i: i32, ix: tensor[{}, i32]) -> (tensor[{xd}, f64], {vt}) = grad(f, wrt=(x, v))(x, v, i, ix)\n",
        ix.len(),
        ix.len()
    );
    let m = module(&src);
    let ins = |x: &[f64], v: &[f64]| vec![f64s(xs, x), f64s(vs, v), i32_scalar(i), i32s(&[ix.len()], ix)];
    let gs = leaf_values(&run(&m, "g", &ins(x, v)));
    let f = |x: &[f64], v: &[f64]| leaf_values(&run(&m, "f", &ins(x, v)))[0][0];
    let h = 1e-6;
    for k in 0..x.len() {
        let (mut p, mut q) = (x.to_vec(), x.to_vec());
        p[k] += h;
        q[k] -= h;
        let fd = (f(&p, v) - f(&q, v)) / (2.0 * h);
        close(&format!("{what}: d/dx[{k}]"), &[gs[0][k]], &[fd], 1e-6);
    }
    for k in 0..v.len() {
        let (mut p, mut q) = (v.to_vec(), v.to_vec());
        p[k] += h;
        q[k] -= h;
        let fd = (f(x, &p) - f(x, &q)) / (2.0 * h);
        close(&format!("{what}: d/dv[{k}]"), &[gs[1][k]], &[fd], 1e-6);
    }
}

#[test]
fn gradients_match_finite_differences() {
    let x = [0.3, -0.2, 0.5, 0.1, 0.4, -0.3];
    let ix = [4, 0, 4, 9];
    let (v2, v22, v4) = ([0.7, -0.4], [0.7, -0.4, 0.2, 0.9], [0.7, -0.4, 0.25, 0.05]);
    // (what, expr, x shape, v shape, v)
    let cases: Vec<(&str, &str, Vec<usize>, Vec<usize>, Vec<f64>)> = vec![
        ("dynamic_slice", "dynamic_slice(x, (i, 0), (2, 2)) * v", vec![3, 2], vec![2, 2], v22.to_vec()),
        ("dynamic_update_slice", "dynamic_update_slice(x, v, (i, 0)) * x", vec![3, 2], vec![2, 2], v22.to_vec()),
        ("set static", "x.at[1, :].set(v) * x", vec![3, 2], vec![2], v2.to_vec()),
        ("set run-time", "x.at[i].set(v) * x", vec![6], vec![], vec![0.7]),
        ("set array, scalar", "x.at[ix].set(v) * x", vec![6], vec![], vec![0.7]),
        ("add array", "x.at[ix].add(v) * x", vec![6], vec![4], v4.to_vec()),
        ("add slice step", "x.at[::2].add(v[:3]) * x", vec![6], vec![4], v4.to_vec()),
        ("mul slice", "x.at[1:3].mul(v) * x", vec![6], vec![2], v2.to_vec()),
        ("mul run-time", "x.at[i, :].mul(v) * x", vec![3, 2], vec![2], v2.to_vec()),
        ("min run-time", "x.at[:, i - 1].min(v[:3])", vec![3, 2], vec![4], v4.to_vec()),
        ("max static", "x.at[0:2].max(v)", vec![6], vec![2], v2.to_vec()),
        ("max array, scalar", "x.at[ix].max(v) * x", vec![6], vec![], vec![0.2]),
        ("get array", "x.at[ix].get() * v", vec![6], vec![4], v4.to_vec()),
        ("get fill", "x.at[ix].get(mode=\"fill\", fill_value=2) * v", vec![6], vec![4], v4.to_vec()),
        ("scatter_add", "scatter_add(x, ix, v) * x", vec![6], vec![4], v4.to_vec()),
        ("take fill", "take(x, ix, mode=\"fill\", fill_value=3) * v", vec![6], vec![4], v4.to_vec()),
        ("gather fill", "gather(x, ix, mode=\"fill\") * v", vec![6], vec![4], v4.to_vec()),
        ("gather clip", "gather(x, ix) * v", vec![6], vec![4], v4.to_vec()),
    ];
    for (what, expr, xs, vs, v) in cases {
        fd_check(what, expr, &xs, &x, &vs, &v, 2, &ix);
        // A run-time index out of range: dropped (updates) or clamped (reads).
        fd_check(what, expr, &xs, &x, &vs, &v, 7, &ix);
    }
}

#[test]
fn fill_positions_get_zero_gradient() {
    let m = module(
        "def f(t: tensor[3, f64]) -> f64 = sum(gather(t, [0, 5, -1, 2], mode=\"fill\", fill_value=4) * [1.0, 2.0, 3.0, 4.0])\n\
         def g(t: tensor[3, f64]) -> tensor[3, f64] = grad(f)(t)\n",
    );
    let o = leaf_values(&run(&m, "g", &[f64s(&[3], &[1.0, 2.0, 3.0])]));
    close("grad", &o[0], &[1.0, 0.0, 4.0], 0.0);
}

#[test]
fn vmap_of_updates_and_slices() {
    let m2 = module(
        "def one(x: tensor[4, f64], i: i32) -> (tensor[4, f64], tensor[2, f64], tensor[4, f64], tensor[4, f64]) =\n\
           (x.at[i].set(-1.0), dynamic_slice(x, i, 2), dynamic_update_slice(x, [8.0, 9.0], i), x.at[[i, i, 0]].add(1.0))\n\
         def many(xs: tensor[3, 4, f64], ix: tensor[3, i32]) -> (tensor[3, 4, f64], tensor[3, 2, f64], tensor[3, 4, f64], tensor[3, 4, f64]) =\n\
           vmap(one)(xs, ix)\n",
    );
    let xs: Vec<f64> = (0..12).map(|k| k as f64).collect();
    let ix = [1, 3, -1];
    let batched = leaf_values(&run(&m2, "many", &[f64s(&[3, 4], &xs), i32s(&[3], &ix)]));
    for (b, &i) in ix.iter().enumerate() {
        let one = leaf_values(&run(&m2, "one", &[f64s(&[4], &xs[b * 4..b * 4 + 4]), i32_scalar(i)]));
        for (k, leaf) in one.iter().enumerate() {
            let n = leaf.len();
            close(&format!("example {b}, result {k}"), &batched[k][b * n..(b + 1) * n], leaf, 0.0);
        }
    }
    // Hand values of example 1 (i = 3): the block clamps to start 2.
    close("set", &batched[0][4..8], &[4.0, 5.0, 6.0, -1.0], 0.0);
    close("slice", &batched[1][2..4], &[6.0, 7.0], 0.0);
    close("update", &batched[2][4..8], &[4.0, 5.0, 8.0, 9.0], 0.0);
    close("add", &batched[3][4..8], &[5.0, 5.0, 6.0, 9.0], 0.0);
}

#[test]
fn vmap_of_gradients_of_updates() {
    let m = module(
        "def f(x: tensor[4, f64], i: i32) -> f64 = sum(sin(x.at[i].mul(3.0))) + sum(x.at[[i, 0]].get())\n\
         def g(x: tensor[4, f64], i: i32) -> tensor[4, f64] = grad(f)(x, i)\n\
         def many(xs: tensor[2, 4, f64], ix: tensor[2, i32]) -> tensor[2, 4, f64] = vmap(g)(xs, ix)\n",
    );
    let xs = [0.1, 0.2, 0.3, 0.4, -0.5, 0.6, 0.7, 0.8];
    let ix = [2, 0];
    let batched = leaf_values(&run(&m, "many", &[f64s(&[2, 4], &xs), i32s(&[2], &ix)]));
    for b in 0..2 {
        let x = &xs[b * 4..b * 4 + 4];
        let i = ix[b] as usize;
        let mut want: Vec<f64> = x.iter().map(|v: &f64| v.cos()).collect();
        want[i] = 3.0 * (3.0 * x[i]).cos();
        want[i] += 1.0;
        want[0] += 1.0;
        close(&format!("example {b}"), &batched[0][b * 4..b * 4 + 4], &want, 1e-12);
    }
}

/// The first diagnostic for `src` (a parse error or a `check` error), with
/// its line and column.
fn first_error(src: &str) -> (String, (u32, u32)) {
    let ds = match Module::from_source("test.graft", src) {
        Err(ds) => ds,
        Ok(m) => m.check().expect_err("expected an error"),
    };
    (ds[0].message.clone(), diag::line_col(src, ds[0].span.start))
}

#[test]
fn bad_forms_are_located_errors() {
    let cases: &[(&str, &str, (u32, u32))] = &[
        // `.at` without a method
        ("def f(x: tensor[3, f32]) -> tensor[3, f32] = x.at[0]\n", "must be followed by a method", (1, 48)),
        ("def f(x: tensor[3, f32]) -> tensor[3, f32] = x.at[0].put(1.0)\n", "has no method `put`", (1, 54)),
        ("def f(x: tensor[3, f32]) -> tensor[3, f32] = x.at(0)\n", "expected `[` after `.at`", (1, 50)),
        ("def f(x: tensor[3, f32]) -> tensor[3, f32] = x.at[0].set\n", "`.set` must be called", (1, 54)),
        ("def f(x: tensor[3, f32]) -> tensor[3, f32] = x.at[0].set()\n", "`.set` needs the value", (1, 46)),
        // wrong dtype of indices
        (
            "def f(x: tensor[3, f32], i: f32) -> tensor[3, f32] = x.at[i].set(1.0)\n",
            "an index must be an integer",
            (1, 59),
        ),
        (
            "def f(x: tensor[3, f32], i: tensor[2, f32]) -> tensor[3, f32] = scatter_add(x, i, 1.0)\n",
            "an index must be an integer",
            (1, 80),
        ),
        (
            "def f(x: tensor[3, f32], m: tensor[3, bool]) -> tensor[3, f32] = x.at[m].set(0.0)\n",
            "an index must be an integer",
            (1, 71),
        ),
        // too many indices (wrong rank)
        ("def f(x: tensor[3, f32]) -> tensor[3, f32] = x.at[0, 1].set(1.0)\n", "too many indices", (1, 46)),
        (
            "def f(x: tensor[3, f32], i: i32) -> tensor[2, f32] = dynamic_slice(x, (i, 0), (2,))\n",
            "one start per axis",
            (1, 71),
        ),
        (
            "def f(x: tensor[3, f32], i: i32) -> tensor[2, f32] = dynamic_slice(x, i, (2, 1))\n",
            "one size per axis",
            (1, 74),
        ),
        (
            "def f(x: tensor[3, f32], i: i32) -> tensor[3, f32] = dynamic_update_slice(x, [[1.0]], i)\n",
            "rank of x",
            (1, 78),
        ),
        ("def f(x: tensor[3, f32], i: i32) -> tensor[4, f32] = dynamic_slice(x, i, 4)\n", "exceeds", (1, 54)),
        // non-integer start
        (
            "def f(x: tensor[3, f32], s: f32) -> tensor[2, f32] = dynamic_slice(x, s, 2)\n",
            "start 0 must be an integer scalar, found f32",
            (1, 71),
        ),
        (
            "def f(x: tensor[3, f32]) -> tensor[2, f32] = dynamic_slice(x, 0.5, 2)\n",
            "start 0 must be an integer scalar",
            (1, 63),
        ),
        (
            "def f(x: tensor[3, f32], s: tensor[1, i32]) -> tensor[2, f32] = dynamic_slice(x, s, 2)\n",
            "start 0 must be an integer scalar, found i32[1]",
            (1, 82),
        ),
        // duplicates-sensitive forms with an index array
        (
            "def f(x: tensor[3, f32], v: tensor[2, f32]) -> tensor[3, f32] = x.at[[0, 0]].set(v)\n",
            "needs a scalar value",
            (1, 78),
        ),
        ("def f(x: tensor[3, f32]) -> tensor[3, f32] = x.at[[0, 1]].mul(2.0)\n", "`.mul` with an index array", (1, 59)),
        (
            "def f(x: tensor[3, 3, f32]) -> tensor[3, 3, f32] = x.at[[0], [1]].add(2.0)\n",
            "at most one index array",
            (1, 62),
        ),
        // static out of range, run-time slice bound, bad options
        ("def f(x: tensor[3, f32]) -> tensor[3, f32] = x.at[3].set(1.0)\n", "index 3 is out of bounds", (1, 51)),
        (
            "def f(x: tensor[3, f32], i: i32) -> tensor[3, f32] = x.at[i:].set(1.0)\n",
            "slice bounds must be known",
            (1, 59),
        ),
        (
            "def f(x: tensor[3, f32]) -> tensor[2, f32] = gather(x, [0, 1], mode=\"wrap\")\n",
            "`mode` must be \"clip\" or \"fill\"",
            (1, 64),
        ),
        (
            "def f(x: tensor[3, f32]) -> tensor[2, f32] = take(x, [0, 1], fill_value=1.0)\n",
            "applies only with `mode=\"fill\"`",
            (1, 62),
        ),
        (
            "def f(x: tensor[3, f32]) -> tensor[2, f32] = x.at[[0, 1]].get(mode=\"drop\")\n",
            "`mode` must be \"clip\" or \"fill\"",
            (1, 63),
        ),
        (
            "def f(x: tensor[3, f32], v: tensor[2, f32]) -> tensor[3, f32] = x.at[:].set(v)\n",
            "does not broadcast",
            (1, 77),
        ),
        ("def f(x: tensor[3, f32]) -> tensor[3, f32] = x.at[0].set(1.0, 2.0)\n", "takes one value", (1, 63)),
    ];
    let mut bad = Vec::new();
    for (src, want, at) in cases {
        let (msg, pos) = first_error(src);
        if !msg.contains(want) || pos != *at {
            bad.push(format!("{src}  got {msg:?} at {pos:?}, want {want:?} at {at:?}"));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn vmap_of_scatter_add_and_fill_reads() {
    let m = module(
        "def one(x: tensor[4, f64], ix: tensor[2, i32]) -> (tensor[4, f64], tensor[2, f64], tensor[2, f64], tensor[4, f64]) =\n\
           (scatter_add(x, ix, [1.0, 2.0]), take(x, ix, mode=\"fill\", fill_value=-1), x.at[ix].get(mode=\"fill\"), x.at[ix].max(2.5))\n\
         def many(xs: tensor[3, 4, f64], ix: tensor[3, 2, i32]) -> (tensor[3, 4, f64], tensor[3, 2, f64], tensor[3, 2, f64], tensor[3, 4, f64]) =\n\
           vmap(one)(xs, ix)\n",
    );
    let xs: Vec<f64> = (0..12).map(|k| k as f64).collect();
    let ix = [0, 0, 3, 9, -1, -7];
    let batched = leaf_values(&run(&m, "many", &[f64s(&[3, 4], &xs), i32s(&[3, 2], &ix)]));
    for b in 0..3 {
        let one = leaf_values(&run(&m, "one", &[f64s(&[4], &xs[b * 4..b * 4 + 4]), i32s(&[2], &ix[b * 2..b * 2 + 2])]));
        for (k, leaf) in one.iter().enumerate() {
            let n = leaf.len();
            close(&format!("example {b}, result {k}"), &batched[k][b * n..(b + 1) * n], leaf, 0.0);
        }
    }
    // Hand values: example 0 adds 1 and 2 at index 0; example 1 drops index 9 and
    // `take` fills it; example 2 reads the last element for -1 and fills -7.
    close("scatter_add 0", &batched[0][0..4], &[3.0, 1.0, 2.0, 3.0], 0.0);
    close("scatter_add 1", &batched[0][4..8], &[4.0, 5.0, 6.0, 8.0], 0.0);
    close("take fill 1", &batched[1][2..4], &[7.0, -1.0], 0.0);
    close("get fill 2", &batched[2][4..6], &[11.0, 0.0], 0.0);
    close("max 0", &batched[3][0..4], &[2.5, 1.0, 2.0, 3.0], 0.0);
}
