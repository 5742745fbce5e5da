//! `f16` in the language: type annotations (`tensor[n, f16]`, `f16`),
//! dtype strings and names (`dtype="f16"`, `cast(x, f16)`), literals
//! rounded once to f16, and programs that check and run with f16 values
//! (each op computed in f32 and rounded to f16).

use crate::common::{module, run};
use graft_core::half::f16;
use graft_core::{DType, Tensor};

const SRC: &str = "\
def scale(x: tensor[n, f16], y: tensor[n, f16]) -> tensor[n, f16] = x * y + cast(0.5, f16)
def total(x: tensor[n, f16]) -> f16 = sum(x, 0)
def main() -> (tensor[3, f16], tensor[2, f16], f16, f32) {
  let x = cast([1.0, 2.0, 0.1], f16)
  let y = ones((3,), dtype=\"f16\")
  let z = full((2,), 70000.0, dtype=\"float16\")
  (scale(x, y), z, total(x), cast(total(x), f32))
}
";

fn h(v: f64) -> f16 {
    graft_core::dtype::f16_from_f64(v)
}

#[test]
fn f16_program_checks_and_runs() {
    let m = module(SRC);
    m.check().unwrap_or_else(|ds| panic!("{:?}", ds.iter().map(|d| d.message.clone()).collect::<Vec<_>>()));
    let out = run(&m, "main", &[]);
    let leaves: Vec<Tensor> = out.leaves().into_iter().cloned().collect();
    assert_eq!(leaves.len(), 4);
    for t in &leaves[..3] {
        assert_eq!(t.dtype(), DType::F16);
    }
    assert_eq!(leaves[3].dtype(), DType::F32);
    // x * 1 + 0.5, each op rounded to f16 (0.1 is first rounded to f16).
    let x = [h(1.0), h(2.0), h(0.1)];
    let want: Vec<f16> = x.iter().map(|v| h(v.to_f64() + 0.5)).collect();
    assert_eq!(leaves[0].to_vec::<f16>().unwrap(), want);
    assert_eq!(leaves[0].to_vec::<f16>().unwrap()[2].to_bits(), h(0.0999755859375 + 0.5).to_bits());
    // 70000 overflows f16: a `full` rounds its value once, to inf.
    assert_eq!(leaves[1].to_vec::<f16>().unwrap(), vec![f16::INFINITY; 2]);
    let s = h(x.iter().map(|v| v.to_f64()).sum());
    assert_eq!(leaves[2].to_vec::<f16>().unwrap(), vec![s]);
    assert_eq!(leaves[3].to_vec::<f32>().unwrap(), vec![s.to_f32()]);
}

#[test]
fn f16_parameters_take_f16_tensors() {
    let m = module(SRC);
    let x = Tensor::vec1(&[h(3.0), h(-0.25)]);
    let y = Tensor::vec1(&[h(0.5), h(4.0)]);
    let out = run(&m, "scale", &[x, y]);
    let r = out.leaves()[0].to_vec::<f16>().unwrap();
    assert_eq!(r, vec![h(2.0), h(-0.5)]);
    // An f32 argument for an f16 parameter is a type error, not a cast.
    let bad = m.run("scale", &[Tensor::vec1(&[1.0f32]), Tensor::vec1(&[1.0f32])]);
    assert!(bad.is_err());
}
