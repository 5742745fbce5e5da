//! Tests of `call`: execution of callees (nested, multi-output, repeated),
//! the printer's callee-first output, verifier and shape-rule errors, and
//! pointer equality.

use graft_core::ir::{verify, Eqn};
use graft_core::ops::control::Call;
use graft_core::ops::index::IndexMode;
use graft_core::{Builder, DType, Executable, Func, IrError, Op, Prim, Tensor, TensorType};
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

fn f32s(shape: &[usize]) -> TensorType {
    TensorType::new(DType::F32, shape.to_vec())
}

/// g(x: f32[3], y: f64[2]) -> (exp(x), neg(y))
fn callee_g() -> Arc<Func> {
    let mut b = Builder::new("g");
    let x = b.param(f32s(&[3]));
    let y = b.param(TensorType::new(DType::F64, vec![2]));
    let ex = b.exp(x).unwrap();
    let ny = b.neg(y).unwrap();
    Arc::new(b.finish(&[ex, ny]).unwrap())
}

#[test]
fn call_runs_the_callee() {
    let g = callee_g();
    let mut b = Builder::new("f");
    let a = b.param(f32s(&[3]));
    let c = b.param(TensorType::new(DType::F64, vec![2]));
    let outs = b.call(g.clone(), &[a, c]).unwrap();
    assert_eq!(outs.len(), 2);
    assert_eq!(b.func().ty(outs[0]), &f32s(&[3]));
    assert_eq!(b.func().ty(outs[1]), &TensorType::new(DType::F64, vec![2]));
    let s = b.sin(outs[0]).unwrap();
    let f = b.finish(&[s, outs[1]]).unwrap();
    let exe = Executable::new(f).unwrap();
    let x = Tensor::vec1(&[0.0f32, 1.0, -2.0]);
    let y = Tensor::vec1(&[1.5f64, -3.0]);
    // Run twice: the second run serves output buffers from the pool.
    for _ in 0..2 {
        let r = exe.run(&[&x, &y]).unwrap();
        let got = r[0].to_vec::<f32>().unwrap();
        for (g, x) in got.iter().zip([0.0f32, 1.0, -2.0]) {
            assert!((g - x.exp().sin()).abs() < 1e-6, "{g} vs sin(exp({x}))");
        }
        assert_eq!(r[1].to_vec::<f64>().unwrap(), vec![-1.5, 3.0]);
    }
}

#[test]
fn nested_and_repeated_calls() {
    let g = callee_g();
    // h(x, y) = g(g(x, y).0 ... ) : calls g twice, chaining
    let mut b = Builder::new("h");
    let x = b.param(f32s(&[3]));
    let y = b.param(TensorType::new(DType::F64, vec![2]));
    let o1 = b.call(g.clone(), &[x, y]).unwrap();
    let o2 = b.call(g.clone(), &[o1[0], o1[1]]).unwrap();
    let h = Arc::new(b.finish(&[o2[0], o2[1]]).unwrap());
    // f calls h and g.
    let mut b = Builder::new("f");
    let x = b.param(f32s(&[3]));
    let y = b.param(TensorType::new(DType::F64, vec![2]));
    let p = b.call(h.clone(), &[x, y]).unwrap();
    let q = b.call(g.clone(), &[x, p[1]]).unwrap();
    let f = b.finish(&[p[0], q[1]]).unwrap();
    let xs = Tensor::vec1(&[0.0f32, 0.5, -1.0]);
    let ys = Tensor::vec1(&[2.0f64, -7.0]);
    let r = Executable::new(f).unwrap().run(&[&xs, &ys]).unwrap();
    let got = r[0].to_vec::<f32>().unwrap();
    for (g, x) in got.iter().zip([0.0f32, 0.5, -1.0]) {
        let e = x.exp().exp();
        assert!((g - e).abs() <= 1e-6 * e, "{g} vs exp(exp({x}))");
    }
    // neg(neg(neg(y)))
    assert_eq!(r[1].to_vec::<f64>().unwrap(), vec![-2.0, 7.0]);
}

#[test]
fn callee_returning_its_parameters() {
    // id(x) = (x, x): outputs that are parameters, returned twice.
    let mut b = Builder::new("id2");
    let x = b.param(TensorType::new(DType::I64, vec![2, 2]));
    let id2 = Arc::new(b.finish(&[x, x]).unwrap());
    let mut b = Builder::new("f");
    let x = b.param(TensorType::new(DType::I64, vec![2, 2]));
    let o = b.call(id2, &[x]).unwrap();
    let i = b.param(TensorType::new(DType::I32, vec![1, 1]));
    let g = b.gather(o[1], i, 0, &[0], IndexMode::Clip).unwrap();
    let f = b.finish(&[o[0], g]).unwrap();
    let xs = Tensor::from_vec(vec![2, 2], vec![1i64, 2, 3, 4]).unwrap();
    let is = Tensor::from_vec(vec![1, 1], vec![1i32]).unwrap();
    let r = Executable::new(f).unwrap().run(&[&xs, &is]).unwrap();
    assert_eq!(r[0], xs);
    assert_eq!(r[1].to_vec::<i64>().unwrap(), vec![3, 4]);
}

#[test]
fn printer_prints_each_callee_once_before_its_caller() {
    let g = callee_g();
    let mut b = Builder::new("f");
    let x = b.param(f32s(&[3]));
    let y = b.param(TensorType::new(DType::F64, vec![2]));
    let o1 = b.call(g.clone(), &[x, y]).unwrap();
    let o2 = b.call(g.clone(), &[o1[0], y]).unwrap();
    let f = b.finish(&[o2[0]]).unwrap();
    assert_eq!(
        f.to_string(),
        "func @g(%0: f32[3], %1: f64[2]) -> (f32[3], f64[2]) {\n  \
         %2 = exp %0 : f32[3]\n  \
         %3 = neg %1 : f64[2]\n  \
         return %2, %3\n\
         }\n\
         \n\
         func @f(%0: f32[3], %1: f64[2]) -> (f32[3]) {\n  \
         %2, %3 = call[func=@g] %0, %1 : f32[3], f64[2]\n  \
         %4, %5 = call[func=@g] %2, %1 : f32[3], f64[2]\n  \
         return %4\n\
         }\n"
    );
}

#[test]
fn verifier_rejects_wrong_argument_types() {
    let g = callee_g();
    // Hand-built IR: call @g with an f64[3] where g takes f32[3].
    let bad = Func {
        name: "bad".into(),
        types: vec![
            TensorType::new(DType::F64, vec![3]),
            TensorType::new(DType::F64, vec![2]),
            f32s(&[3]),
            TensorType::new(DType::F64, vec![2]),
        ],
        params: vec![graft_core::Value(0), graft_core::Value(1)],
        eqns: vec![Eqn {
            prim: Prim::from(Call { func: g.clone() }),
            inputs: vec![graft_core::Value(0), graft_core::Value(1)],
            outputs: vec![graft_core::Value(2), graft_core::Value(3)],
            loc: None,
        }],
        outputs: vec![graft_core::Value(2)],
        names: Default::default(),
    };
    let e = verify(&bad).unwrap_err();
    let IrError::Verify { func, eqn, msg } = &e else { panic!("expected a verify error, got {e:?}") };
    assert_eq!((func.as_str(), *eqn), ("bad", 0));
    assert!(msg.contains("call[func=@g]") && msg.contains("operand 0 to be f32[3]"), "{msg}");
    assert!(Executable::new(bad).is_err());
    // Recorded output types that disagree with the callee are caught too.
    let mut wrong_out = Func {
        name: "wrong_out".into(),
        types: vec![f32s(&[3]), TensorType::new(DType::F64, vec![2]), f32s(&[3]), f32s(&[2])],
        params: vec![graft_core::Value(0), graft_core::Value(1)],
        eqns: vec![],
        outputs: vec![graft_core::Value(2)],
        names: Default::default(),
    };
    wrong_out.eqns.push(Eqn {
        prim: Prim::from(Call { func: g }),
        inputs: vec![graft_core::Value(0), graft_core::Value(1)],
        outputs: vec![graft_core::Value(2), graft_core::Value(3)],
        loc: None,
    });
    assert!(matches!(verify(&wrong_out), Err(IrError::Verify { .. })));
}

#[test]
fn builder_rejects_mismatched_operands() {
    let g = callee_g();
    let mut b = Builder::new("f");
    let x = b.param(f32s(&[3]));
    let y32 = b.param(f32s(&[2]));
    let e = b.call(g.clone(), &[x, y32]).unwrap_err();
    let IrError::Type(te) = &e else { panic!("expected a type error, got {e:?}") };
    assert_eq!(te.prim, "call[func=@g]");
    assert_eq!(te.expected, "expected operand 1 to be f64[2] (parameter 1 of @g)");
    let IrError::Type(te) = b.call(g.clone(), &[x]).unwrap_err() else { panic!("expected a type error") };
    assert_eq!(te.expected, "expected 2 operands (the parameters of @g)");
    // Shape (not just dtype) must match exactly.
    let x4 = b.param(f32s(&[4]));
    let y = b.param(TensorType::new(DType::F64, vec![2]));
    assert!(matches!(b.call(g, &[x4, y]), Err(IrError::Type(_))));
}

#[test]
fn equality_is_callee_identity() {
    let g1 = callee_g();
    let g2 = callee_g();
    assert_eq!(*g1, *g2, "structurally equal functions");
    let c1 = Call { func: g1.clone() };
    assert_eq!(c1, Call { func: g1.clone() });
    assert_ne!(c1, Call { func: g2 });
    let hash = |c: &Call| {
        let mut h = DefaultHasher::new();
        c.hash(&mut h);
        h.finish()
    };
    assert_eq!(hash(&c1), hash(&Call { func: g1.clone() }));
    assert_eq!(c1.subfuncs().len(), 1);
    assert!(Arc::ptr_eq(&c1.subfuncs()[0], &g1));
    assert_eq!(format!("{c1:?}"), "Call(@g)");
    assert_eq!(c1.params(), "func=@g");
}
