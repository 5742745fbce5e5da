//! Forward tests of the creation primitives (`iota`, `constant`) and the
//! builder helpers over them (`scalar`, `full`, `zeros`, `ones`): values
//! against naive reference loops, printing of parameters, IR structure of
//! `full`, and shape-rule errors.

use graft_core::ir::print_func;
use graft_core::ops::create::{Constant, Iota};
use graft_core::{Builder, DType, Executable, IrError, Tensor, TensorType, Value};
use proptest::prelude::*;

/// Builds a function with no parameters returning `build`'s value, runs it,
/// and returns the inferred type with the result.
fn run0(build: impl FnOnce(&mut Builder) -> Result<Value, IrError>) -> (TensorType, Tensor) {
    let mut b = Builder::new("f");
    let y = build(&mut b).unwrap();
    let ty = b.ty(y).unwrap().clone();
    let f = b.finish(&[y]).unwrap();
    let out = Executable::new(f).unwrap().run(&[]).unwrap().remove(0);
    assert_eq!(out.ty(), ty, "kernel output type differs from the inferred type");
    (ty, out)
}

/// `idx[axis]` for every row-major flat index, computed through strides.
fn ref_iota(shape: &[usize], axis: usize) -> Vec<f64> {
    let n: usize = shape.iter().product();
    let stride: usize = shape[axis + 1..].iter().product();
    (0..n).map(|f| ((f / stride) % shape[axis]) as f64).collect()
}

fn type_err(r: Result<Value, IrError>, prim: &str) -> graft_core::TypeError {
    match r {
        Err(IrError::Type(te)) => {
            assert!(te.prim.starts_with(prim), "error names {:?}, expected {prim}", te.prim);
            te
        }
        other => panic!("expected a type error from {prim}, got {other:?}"),
    }
}

#[test]
fn iota_values_every_numeric_dtype() {
    let (_, y) = run0(|b| b.iota(DType::I32, &[2, 3], 1));
    assert_eq!(y.to_vec::<i32>().unwrap(), vec![0, 1, 2, 0, 1, 2]);
    let (_, y) = run0(|b| b.iota(DType::I64, &[2, 3], 0));
    assert_eq!(y.to_vec::<i64>().unwrap(), vec![0, 0, 0, 1, 1, 1]);
    let (_, y) = run0(|b| b.iota(DType::F32, &[4], 0));
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![0.0, 1.0, 2.0, 3.0]);
    let (_, y) = run0(|b| b.iota(DType::F64, &[2, 2, 2], 1));
    assert_eq!(y.to_vec::<f64>().unwrap(), vec![0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0]);
    for dt in [DType::F32, DType::F64, DType::I32, DType::I64] {
        for (shape, axis) in [(&[3usize, 1, 4][..], 0), (&[3, 1, 4], 1), (&[3, 1, 4], 2), (&[1], 0), (&[5, 0, 2], 2)] {
            let (ty, y) = run0(|b| b.iota(dt, shape, axis));
            assert_eq!(ty, TensorType::new(dt, shape.to_vec()));
            assert_eq!(y.to_f64_vec(), ref_iota(shape, axis), "{dt} {shape:?} axis {axis}");
        }
    }
}

#[test]
fn large_iota_takes_the_parallel_path() {
    for (shape, axis) in [(&[7usize, 100_003][..], 0), (&[7, 100_003], 1), (&[100_003, 3], 0), (&[3, 9_001, 5], 1)] {
        for dt in [DType::F32, DType::I64] {
            let (_, y) = run0(|b| b.iota(dt, shape, axis));
            assert_eq!(y.to_f64_vec(), ref_iota(shape, axis), "{dt} {shape:?} axis {axis}");
        }
    }
}

#[test]
fn constant_values_every_dtype() {
    let cases = [
        Tensor::from_vec(vec![2, 2], vec![1.5f32, -2.0, 0.25, 8.0]).unwrap(),
        Tensor::vec1(&[1.0f64, 1e300, -0.0]),
        Tensor::scalar(-7i32),
        Tensor::from_vec(vec![0, 3], Vec::<i64>::new()).unwrap(),
        Tensor::vec1(&[true, false, true]),
    ];
    for t in cases {
        let (ty, y) = run0(|b| b.constant(t.clone()));
        assert_eq!(ty, t.ty());
        assert_eq!(y, t);
    }
    let big = Tensor::from_fn(&TensorType::new(DType::F64, vec![100_003]), |i| i as f64 * 0.5);
    let (_, y) = run0(|b| b.constant(big.clone()));
    assert_eq!(y, big);
}

#[test]
fn constant_runs_repeatedly_from_recycled_buffers() {
    // The second run may take pooled buffers with stale contents; the
    // constant kernel must overwrite them.
    let mut b = Builder::new("f");
    let x = b.param(TensorType::new(DType::F32, vec![3]));
    let c = b.constant(Tensor::vec1(&[1.0f32, 2.0, 3.0])).unwrap();
    let d = b.broadcast_in_dim(c, &[3], &[0]).unwrap();
    let y = b.reverse(d, &[0]).unwrap();
    let f = b.finish(&[x, y]).unwrap();
    let exe = Executable::new(f).unwrap();
    let input = Tensor::vec1(&[9.0f32, 9.0, 9.0]);
    for _ in 0..3 {
        let out = exe.run(&[&input]).unwrap();
        assert_eq!(out[1].to_vec::<f32>().unwrap(), vec![3.0, 2.0, 1.0]);
    }
}

#[test]
fn scalar_converts_like_tensor_full() {
    let (ty, y) = run0(|b| b.scalar(2.5, DType::F64));
    assert_eq!(ty, TensorType::scalar(DType::F64));
    assert_eq!(y.to_vec::<f64>().unwrap(), vec![2.5]);
    let (_, y) = run0(|b| b.scalar(0.1, DType::F32));
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![0.1f32]);
    let (_, y) = run0(|b| b.scalar(-2.7, DType::I32));
    assert_eq!(y.to_vec::<i32>().unwrap(), vec![-2]);
    let (_, y) = run0(|b| b.scalar(1e30, DType::I64));
    assert_eq!(y.to_vec::<i64>().unwrap(), vec![i64::MAX]);
    let (_, y) = run0(|b| b.scalar(0.5, DType::Bool));
    assert_eq!(y.to_vec::<bool>().unwrap(), vec![true]);
    let (_, y) = run0(|b| b.scalar(0.0, DType::Bool));
    assert_eq!(y.to_vec::<bool>().unwrap(), vec![false]);
}

#[test]
fn full_zeros_ones_values_and_structure() {
    let ty = TensorType::new(DType::F32, vec![2, 3]);
    let (_, y) = run0(|b| b.full(1.25, &ty));
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![1.25; 6]);
    for dt in DType::ALL {
        let t = TensorType::new(dt, vec![3, 1, 2]);
        let (_, z) = run0(|b| b.zeros(&t));
        assert_eq!(z.to_f64_vec(), vec![0.0; 6], "{dt}");
        let (_, o) = run0(|b| b.ones(&t));
        assert_eq!(o.to_f64_vec(), vec![1.0; 6], "{dt}");
    }
    // A big `full` is a rank-0 constant plus a broadcast, never a big literal.
    let big = TensorType::new(DType::F64, vec![1000, 1000]);
    let mut b = Builder::new("f");
    let v = b.full(3.0, &big).unwrap();
    assert_eq!(b.ty(v).unwrap(), &big);
    let f = b.finish(&[v]).unwrap();
    assert_eq!(f.count_prim("constant"), 1);
    assert_eq!(f.count_prim("broadcast_in_dim"), 1);
    assert_eq!(f.eqns.len(), 2);
    let text = print_func(&f);
    assert!(text.contains("%0 = constant[value=3] : f64[]"), "{text}");
    assert!(text.contains("%1 = broadcast_in_dim[shape=(1000,1000), dims=()] %0 : f64[1000,1000]"), "{text}");
    let y = Executable::new(f).unwrap().run(&[]).unwrap().remove(0);
    assert!(y.to_vec::<f64>().unwrap().iter().all(|&x| x == 3.0));
    // Rank-0 `full` is just the scalar constant.
    let mut b = Builder::new("g");
    let s = b.full(4.0, &TensorType::scalar(DType::I32)).unwrap();
    let f = b.finish(&[s]).unwrap();
    assert_eq!(f.eqns.len(), 1);
    assert_eq!(Executable::new(f).unwrap().run(&[]).unwrap()[0].to_vec::<i32>().unwrap(), vec![4]);
}

#[test]
fn params_print_compactly() {
    let p = |t: Tensor| graft_core::ops::display_prim(&Constant { value: t });
    assert_eq!(p(Tensor::vec1(&[1i32, 2, 3])), "constant[value=[1,2,3]]");
    assert_eq!(p(Tensor::scalar(2.5f64)), "constant[value=2.5]");
    assert_eq!(p(Tensor::scalar(0.1f32)), "constant[value=0.1]");
    assert_eq!(
        p(Tensor::from_vec(vec![2, 2], vec![1.0f32, 2.0, 3.5, -4.0]).unwrap()),
        "constant[value=[[1,2],[3.5,-4]]]"
    );
    assert_eq!(p(Tensor::vec1(&[true, false])), "constant[value=[true,false]]");
    assert_eq!(p(Tensor::vec1(&[0i64; 8])), "constant[value=[0,0,0,0,0,0,0,0]]");
    assert_eq!(p(Tensor::vec1(&[0.0f32; 9])), "constant[value=<f32[9]>]");
    assert_eq!(p(Tensor::zeros(&TensorType::new(DType::F32, vec![1000]))), "constant[value=<f32[1000]>]");
    assert_eq!(p(Tensor::vec1::<f64>(&[])), "constant[value=[]]");
    assert_eq!(p(Tensor::from_vec(vec![2, 0], Vec::<f64>::new()).unwrap()), "constant[value=[[],[]]]");
    let i = Iota { dtype: DType::I32, shape: vec![2, 3], axis: 1 };
    assert_eq!(graft_core::ops::display_prim(&i), "iota[dtype=i32, shape=(2,3), axis=1]");
}

#[test]
fn iota_errors() {
    let mut b = Builder::new("f");
    let te = type_err(b.iota(DType::Bool, &[3], 0), "iota");
    assert!(te.expected.contains("numeric"), "{}", te.expected);
    let te = type_err(b.iota(DType::F32, &[3, 4], 2), "iota");
    assert!(te.expected.contains("axis 2 is out of range for rank 2"), "{}", te.expected);
    type_err(b.iota(DType::F32, &[], 0), "iota");
    let te = type_err(b.iota(DType::I32, &[(1usize << 31) + 1], 0), "iota");
    assert!(te.expected.contains("2^31"), "{}", te.expected);
    type_err(b.iota(DType::F64, &[usize::MAX, 2], 0), "iota");
    let x = b.param(TensorType::scalar(DType::F32));
    type_err(b.emit1(Iota { dtype: DType::F32, shape: vec![2], axis: 0 }, &[x]), "iota");
    let e = b.iota(DType::Bool, &[3], 0).unwrap_err();
    assert_eq!(e.to_string(), "iota[dtype=bool, shape=(3), axis=0]: expected a numeric dtype (f32, f64, i32 or i64), not bool; got operands ()");
}

#[test]
fn constant_errors() {
    let mut b = Builder::new("f");
    let x = b.param(TensorType::scalar(DType::F32));
    let te = type_err(b.emit1(Constant { value: Tensor::scalar(1.0f32) }, &[x]), "constant");
    assert!(te.expected.contains("0 operands"), "{}", te.expected);
    let e = b.emit1(Constant { value: Tensor::scalar(1.0f32) }, &[x]).unwrap_err();
    assert_eq!(e.to_string(), "constant[value=1]: expected 0 operands; got operands (f32[])");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn prop_iota(dt in prop::sample::select(vec![DType::F32, DType::F64, DType::I32, DType::I64]),
                 shape in prop::collection::vec(0usize..6, 1..=4), axis_raw in 0usize..4) {
        let axis = axis_raw % shape.len();
        let (ty, y) = run0(|b| b.iota(dt, &shape, axis));
        prop_assert_eq!(ty, TensorType::new(dt, shape.clone()));
        prop_assert_eq!(y.to_f64_vec(), ref_iota(&shape, axis));
    }

    #[test]
    fn prop_full(dt in prop::sample::select(DType::ALL.to_vec()), shape in prop::collection::vec(0usize..6, 0..=4),
                 v in -100i32..100) {
        let ty = TensorType::new(dt, shape.clone());
        let (got_ty, y) = run0(|b| b.full(v as f64 * 0.5, &ty));
        prop_assert_eq!(&got_ty, &ty);
        prop_assert_eq!(y, Tensor::full(&ty, v as f64 * 0.5));
    }
}
