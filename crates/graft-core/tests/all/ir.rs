//! The IR printer (snapshots) and the verifier's invariants.

use graft_core::ir::{print_func, verify, Eqn};
use graft_core::ops::unary::Unary;
use graft_core::{Builder, DType, IrError, TensorType, Value};

fn sample() -> graft_core::Func {
    let mut b = Builder::new("sample");
    let x = b.param(TensorType::new(DType::F32, vec![2, 3]));
    let y = b.param(TensorType::new(DType::F64, vec![]));
    let s = b.sin(x).unwrap();
    let e = b.exp(s).unwrap();
    let t = b.tanh(y).unwrap();
    b.finish(&[e, t, x]).unwrap()
}

#[test]
fn printer_snapshot() {
    insta::assert_snapshot!(print_func(&sample()), @r"
    func @sample(%0: f32[2,3], %1: f64[]) -> (f32[2,3], f64[], f32[2,3]) {
      %2 = sin %0 : f32[2,3]
      %3 = exp %2 : f32[2,3]
      %4 = tanh %1 : f64[]
      return %3, %4, %0
    }
    ");
}

#[test]
fn verifier_accepts_built_functions() {
    verify(&sample()).unwrap();
}

#[test]
fn verifier_rejects_use_before_definition() {
    let mut f = sample();
    f.eqns.swap(0, 1);
    let err = verify(&f).unwrap_err();
    assert!(matches!(err, IrError::Verify { eqn: 0, .. }), "{err}");
    assert!(err.to_string().contains("reads %2 before it is defined"), "{err}");
}

#[test]
fn verifier_rejects_wrong_recorded_types() {
    let mut f = sample();
    f.types[3] = TensorType::new(DType::F32, vec![3, 2]);
    let err = verify(&f).unwrap_err().to_string();
    assert!(err.contains("%3 is recorded as f32[3,2] but exp infers f32[2,3]"), "{err}");
}

#[test]
fn verifier_rejects_double_definition_and_bad_outputs() {
    let mut f = sample();
    f.eqns.push(Eqn { prim: Unary::Neg.into(), inputs: vec![Value(0)], outputs: vec![Value(2)], loc: None });
    assert!(verify(&f).unwrap_err().to_string().contains("defined twice"));
    let mut g = sample();
    g.outputs.push(Value(99));
    assert!(verify(&g).unwrap_err().to_string().contains("output %99 is not defined"));
    let mut h = sample();
    h.eqns[1].prim = Unary::Not.into();
    assert!(verify(&h).unwrap_err().to_string().contains("not: expected a bool or integer operand"));
}

#[test]
fn builder_rejects_foreign_values() {
    let mut b = Builder::new("f");
    let err = b.exp(Value(7)).unwrap_err();
    assert_eq!(err.to_string(), "value %7 is not defined in function `f`");
    let b2 = Builder::new("g");
    assert!(b2.finish(&[Value(0)]).is_err());
}
