//! `u32` in the language: type annotations (`tensor[n, u32]`, `u32`), dtype
//! strings (`dtype="u32"`, `"uint32"`), `cast(x, u32)`, literal range checks
//! (a negative or too large integer literal is an error, never a wrap), and
//! programs that run with NumPy `uint32` semantics (wrapping arithmetic,
//! unsigned division, comparisons and max).

use crate::common::{check_error, module, run};
use graft_core::{DType, Tensor};

const SRC: &str = "\
def mix(x: tensor[n, u32], k: u32) -> tensor[n, u32] = x * k + 1013904223
def stats(x: tensor[n, u32]) -> (u32, u32, u32, tensor[n, bool], tensor[n, u32], tensor[n, u32]) =
  (sum(x, 0), max(x, 0), min(x, 0), x > 2147483647, x // 3, x % 3)
def main() -> (tensor[3, u32], tensor[4, u32], tensor[3, u32], tensor[3, u32], tensor[3, i64], f32) {
  let z = zeros((3,), dtype=\"u32\")
  let a = arange(4, dtype=\"uint32\")
  let d = arange(10, 0, -4, dtype=\"u32\")
  let c = cast([0, 4294967295, 7], u32)
  (z - 1, a * 2, d, c + c, cast(c, i64), cast(cast(4294967295, u32), f32))
}
";

fn u(v: &[u32]) -> Tensor {
    Tensor::from_vec(vec![v.len()], v.to_vec()).unwrap()
}

#[test]
fn u32_program_checks_and_runs() {
    let m = module(SRC);
    m.check().unwrap_or_else(|ds| panic!("{:?}", ds.iter().map(|d| d.message.clone()).collect::<Vec<_>>()));
    let out = run(&m, "main", &[]);
    let l: Vec<Tensor> = out.leaves().into_iter().cloned().collect();
    assert_eq!(l.len(), 6);
    for t in &l[..4] {
        assert_eq!(t.dtype(), DType::U32);
    }
    assert_eq!(l[0].to_vec::<u32>().unwrap(), vec![u32::MAX; 3]);
    assert_eq!(l[1].to_vec::<u32>().unwrap(), vec![0, 2, 4, 6]);
    // arange counts down with a negative step.
    assert_eq!(l[2].to_vec::<u32>().unwrap(), vec![10, 6, 2]);
    assert_eq!(l[3].to_vec::<u32>().unwrap(), vec![0, u32::MAX - 1, 14]);
    assert_eq!(l[4].to_vec::<i64>().unwrap(), vec![0, 4294967295, 7]);
    assert_eq!(l[5].to_vec::<f32>().unwrap(), vec![4294967296.0]);
}

#[test]
fn u32_parameters_wrap_and_divide_unsigned() {
    let m = module(SRC);
    let x = u(&[0, 1, 0x8000_0000, u32::MAX]);
    let out = run(&m, "mix", &[x.clone(), Tensor::scalar(1664525u32)]);
    let want: Vec<u32> =
        [0u32, 1, 0x8000_0000, u32::MAX].iter().map(|v| v.wrapping_mul(1664525).wrapping_add(1013904223)).collect();
    assert_eq!(out.leaves()[0].to_vec::<u32>().unwrap(), want);
    let out = run(&m, "stats", &[x]);
    let l = out.leaves();
    let xs = [0u32, 1, 0x8000_0000, u32::MAX];
    assert_eq!(l[0].to_vec::<u32>().unwrap(), vec![xs.iter().fold(0u32, |a, &v| a.wrapping_add(v))]);
    assert_eq!(l[1].to_vec::<u32>().unwrap(), vec![u32::MAX]);
    assert_eq!(l[2].to_vec::<u32>().unwrap(), vec![0]);
    assert_eq!(l[3].to_vec::<bool>().unwrap(), vec![false, false, true, true]);
    assert_eq!(l[4].to_vec::<u32>().unwrap(), xs.iter().map(|v| v / 3).collect::<Vec<_>>());
    assert_eq!(l[5].to_vec::<u32>().unwrap(), xs.iter().map(|v| v % 3).collect::<Vec<_>>());
    // An i32 argument for a u32 parameter is a type error, not a cast.
    assert!(m.run("mix", &[Tensor::vec1(&[1i32]), Tensor::scalar(1u32)]).is_err());
}

#[test]
fn u32_literals_out_of_range_are_errors() {
    // The operator names both operands (the range is in its note).
    let (msg, _) = check_error("def f(x: tensor[n, u32]) -> tensor[n, u32] = x + -1\n");
    assert!(msg.contains("and the integer -1"), "{msg}");
    let m = module("def f(x: tensor[n, u32]) -> tensor[n, u32] = x - 4294967296\n");
    let ds = m.check().unwrap_err();
    assert!(ds[0].notes.iter().any(|n| n.contains("4294967296 is out of range for u32")), "{:?}", ds[0].notes);
    let (msg, _) = check_error("def f() -> u32 = cast(4294967296, u32)\n");
    assert!(msg.contains("4294967296 is out of range for u32"), "{msg}");
    let (msg, _) = check_error("def f() -> tensor[2, u32] = cast([1, -2], u32)\n");
    assert!(msg.contains("out of range for u32"), "{msg}");
    let (msg, _) = check_error("def f(x: tensor[n, u32]) -> tensor[n, u32] = x * 2.5\n");
    assert!(msg.contains("u32"), "{msg}");
}
