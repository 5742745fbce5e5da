//! The issue's Syntax-section program, run with numbers checked against
//! values computed by hand in the test.

use graft_core::Tensor;
use graft_lang::{diag, Output};

pub const ISSUE: &str = r#"# comments start with #
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

use crate::common::{module, run};

fn f32s(o: &Output) -> Vec<f32> {
    o.tensor().expect("a tensor").to_vec::<f32>().expect("f32")
}

fn close(a: &[f32], b: &[f32], tol: f32) {
    assert_eq!(a.len(), b.len(), "{a:?} vs {b:?}");
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() <= tol * (1.0 + y.abs()), "{a:?} vs {b:?}");
    }
}

fn data() -> (Vec<f32>, f32, Vec<f32>, Vec<f32>) {
    let w = vec![0.5, -1.0, 2.0];
    let b = 0.25;
    let x = vec![1.0, 2.0, 3.0, -1.0, 0.5, 4.0];
    let y = vec![1.0, -2.0];
    (w, b, x, y)
}

fn tensors() -> Vec<Tensor> {
    let (w, b, x, y) = data();
    vec![
        Tensor::from_vec(vec![3], w).unwrap(),
        Tensor::scalar(b),
        Tensor::from_vec(vec![2, 3], x).unwrap(),
        Tensor::from_vec(vec![2], y).unwrap(),
    ]
}

fn hand_loss() -> (f32, Vec<f32>, f32) {
    let (w, b, x, y) = data();
    let mut l = 0.0;
    let mut dw = [0.0f32; 3];
    let mut db = 0.0;
    for i in 0..2 {
        let pred: f32 = (0..3).map(|j| x[i * 3 + j] * w[j]).sum::<f32>() + b;
        let e = pred - y[i];
        l += e * e / 2.0;
        for j in 0..3 {
            dw[j] += e * x[i * 3 + j];
        }
        db += e;
    }
    (l, dw.to_vec(), db)
}

#[test]
fn issue_program_checks() {
    let m = module(ISSUE);
    if let Err(ds) = m.check() {
        panic!("{}", ds.iter().map(|d| diag::render(d, "test.graft", ISSUE)).collect::<String>());
    }
}

#[test]
fn issue_loss() {
    let m = module(ISSUE);
    let out = run(&m, "loss", &tensors());
    close(&f32s(&out), &[hand_loss().0], 1e-5);
}

#[test]
fn issue_grads() {
    let m = module(ISSUE);
    let out = run(&m, "grads", &tensors());
    let Output::Tuple(parts) = out else { panic!("expected a tuple") };
    let (_, dw, db) = hand_loss();
    close(&f32s(&parts[0]), &dw, 1e-5);
    close(&f32s(&parts[1]), &[db], 1e-5);
}

#[test]
fn issue_batch_process() {
    let m = module(ISSUE);
    let xs = Tensor::from_vec(vec![2, 3], vec![1.0f32, -2.0, 3.0, -0.5, 0.0, 4.0]).unwrap();
    let out = run(&m, "batch_process", &[xs]);
    close(&f32s(&out), &[1.0, 0.0, 3.0, 0.0, 0.0, 4.0], 0.0);
}

#[test]
fn issue_dloss_dw() {
    let m = module(ISSUE);
    let w = [0.5f32, -1.0, 2.0];
    let x = [1.0f32, 2.0, 3.0];
    let y = 1.5f32;
    let s: f32 = w.iter().zip(&x).map(|(a, b)| a * b).sum();
    let want: Vec<f32> = x.iter().map(|xi| 2.0 * (s - y) * xi).collect();
    let out = run(
        &m,
        "dloss_dw",
        &[
            Tensor::from_vec(vec![3], w.to_vec()).unwrap(),
            Tensor::from_vec(vec![3], x.to_vec()).unwrap(),
            Tensor::scalar(y),
        ],
    );
    close(&f32s(&out), &want, 1e-5);
}
