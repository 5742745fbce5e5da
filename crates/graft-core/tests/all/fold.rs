//! Constant folding when a function is planned (`opt::fold_constants`):
//! parameter-free work that is not elementwise or layout is evaluated once
//! and read as a `constant`; results are what the unfolded function gives.

use graft_core::ops::Prim;
use graft_core::opt::{fold_constants, FOLD_MAX_ELEMS};
use graft_core::{Builder, DType, Executable, Func, Tensor, TensorType};

/// `x * cumsum(iota(n))`: the cumulative sum depends on no parameter.
fn scaled_by_table(n: usize) -> Func {
    let mut b = Builder::new("scaled");
    let x = b.param(TensorType::new(DType::F64, vec![n]));
    let i = b.iota(DType::F64, &[n], 0).unwrap();
    let c = b.cumsum(i, 0, false).unwrap();
    let y = b.mul(x, c).unwrap();
    b.finish(&[y]).unwrap()
}

fn families(f: &Func) -> Vec<&'static str> {
    f.eqns.iter().map(|e| e.prim.family()).collect()
}

#[test]
fn parameter_free_tables_are_computed_once_when_planned() {
    let n = 10;
    let exe = Executable::new(scaled_by_table(n)).unwrap();
    let fams = families(exe.func());
    assert!(!fams.contains(&"Cumulative") && !fams.contains(&"Iota"), "{fams:?}");
    assert_eq!(fams.iter().filter(|f| **f == "Constant").count(), 1, "{fams:?}");
    let x = Tensor::from_vec(vec![n], (0..n).map(|v| v as f64 * 0.5).collect()).unwrap();
    let y = exe.run(&[&x]).unwrap().remove(0);
    // Small integers: every sum is exact whatever the order.
    let want: Vec<f64> = (0..n).map(|k| k as f64 * 0.5 * (k * (k + 1) / 2) as f64).collect();
    assert_eq!(y.to_f64_vec(), want);
}

#[test]
fn the_evaluation_gets_a_parameterless_function_and_its_values_become_constants() {
    let f = scaled_by_table(4);
    let table = Tensor::from_vec(vec![4], vec![7.0f64, 8.0, 9.0, 10.0]).unwrap();
    let folded = fold_constants(&f, |sub| {
        assert!(sub.params.is_empty());
        assert_eq!(sub.outputs.len(), 1);
        assert!(families(&sub).contains(&"Cumulative"));
        Some(vec![table.clone()])
    })
    .unwrap();
    let held: Vec<&Tensor> = folded
        .eqns
        .iter()
        .filter_map(|e| match &e.prim {
            Prim::Constant(c) => Some(&c.value),
            _ => None,
        })
        .collect();
    assert_eq!(held, vec![&table]);
    assert_eq!(families(&folded), vec!["Constant", "Binary"]);
    assert_eq!(folded.params.len(), 1);
}

#[test]
fn a_failed_or_mistyped_evaluation_leaves_the_function_as_it_was() {
    let f = scaled_by_table(4);
    assert!(fold_constants(&f, |_| None).is_none());
    let wrong = Tensor::from_vec(vec![3], vec![1.0f64, 2.0, 3.0]).unwrap();
    assert!(fold_constants(&f, |_| Some(vec![wrong.clone()])).is_none());
    assert!(fold_constants(&f, |_| Some(vec![])).is_none());
}

#[test]
fn elementwise_and_layout_work_on_constants_stays_for_fusion() {
    // x * (broadcast(3) * 2 + 1): folding would turn in-register arithmetic into a buffer.
    let n = 1000;
    let ty = TensorType::new(DType::F32, vec![n]);
    let mut b = Builder::new("affine_splat");
    let x = b.param(ty.clone());
    let three = b.scalar(3.0, DType::F32).unwrap();
    let i = b.broadcast_in_dim(three, &[n], &[]).unwrap();
    let two = b.full(2.0, &ty).unwrap();
    let one = b.full(1.0, &ty).unwrap();
    let t = b.mul(i, two).unwrap();
    let t = b.add(t, one).unwrap();
    let y = b.mul(x, t).unwrap();
    let f = b.finish(&[y]).unwrap();
    let mut eval_called = false;
    assert!(fold_constants(&f, |_| {
        eval_called = true;
        None
    })
    .is_none());
    assert!(!eval_called);
}

#[test]
fn iota_tables_are_folded() {
    // x * (iota * 2 + 1): `iota` has no kernel form, so unfolded the
    // interpreter would build its buffer at every call.
    let n = 1000;
    let ty = TensorType::new(DType::F32, vec![n]);
    let mut b = Builder::new("affine_iota");
    let x = b.param(ty.clone());
    let i = b.iota(DType::F32, &[n], 0).unwrap();
    let two = b.full(2.0, &ty).unwrap();
    let one = b.full(1.0, &ty).unwrap();
    let t = b.mul(i, two).unwrap();
    let t = b.add(t, one).unwrap();
    let y = b.mul(x, t).unwrap();
    let exe = Executable::new(b.finish(&[y]).unwrap()).unwrap();
    let fams = families(exe.func());
    assert!(!fams.contains(&"Iota") && fams.contains(&"Constant"), "{fams:?}");
    let xs = Tensor::from_vec(vec![n], (0..n).map(|v| (v % 7) as f32 * 0.5).collect()).unwrap();
    let got = exe.run(&[&xs]).unwrap().remove(0).to_f64_vec();
    // Small multiples of 1/2: every product is exact.
    let want: Vec<f64> = (0..n).map(|v| (v % 7) as f64 * 0.5 * (2 * v + 1) as f64).collect();
    assert_eq!(got, want);
}

#[test]
fn tables_above_the_size_bound_are_not_folded() {
    let f = scaled_by_table(FOLD_MAX_ELEMS + 1);
    let mut eval_called = false;
    assert!(fold_constants(&f, |_| {
        eval_called = true;
        None
    })
    .is_none());
    assert!(!eval_called);
}
