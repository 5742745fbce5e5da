//! jacfwd / jacrev / jacobian / hessian: vmapped JVPs and VJPs, checked
//! against each other, finite differences and closed forms.

use crate::common;

use common::{run, Rng};
use graft_core::jac::{hessian, jacfwd, jacobian, jacrev};
use graft_core::{Builder, DType, Func, IrError, Tensor, TensorType, Value};

fn t64(shape: &[usize]) -> TensorType {
    TensorType::new(DType::F64, shape.to_vec())
}

fn func(types: &[TensorType], body: impl FnOnce(&mut Builder, &[Value]) -> Result<Vec<Value>, IrError>) -> Func {
    let mut b = Builder::new("f");
    let ps: Vec<Value> = types.iter().map(|t| b.param(t.clone())).collect();
    let outs = body(&mut b, &ps).unwrap();
    b.finish(&outs).unwrap()
}

/// f: R^10 -> R^7, f(x) = tanh(A x) * sin(x[0..7]) with a fixed A.
fn ten_to_seven() -> Func {
    func(&[t64(&[10])], |b, p| {
        let a = Tensor::from_fn(&t64(&[7, 10]), |i| ((i * 37 % 11) as f64 - 5.0) / 7.0);
        let a = b.constant(a)?;
        let ax = b.dot_general(a, p[0], &[1], &[0], &[], &[])?;
        let t = b.tanh(ax)?;
        let head = b.slice(p[0], &[0], &[7], &[1])?;
        let s = b.sin(head)?;
        Ok(vec![b.mul(t, s)?])
    })
}

#[test]
fn jacfwd_and_jacrev_agree_with_each_other_and_finite_differences() {
    let f = ten_to_seven();
    let mut rng = Rng(3);
    let x = rng.tensor(&t64(&[10]), -1.0, 1.0);
    let jf = run(&jacfwd(&f, 0).unwrap(), std::slice::from_ref(&x));
    let jr = run(&jacrev(&f, 0).unwrap(), std::slice::from_ref(&x));
    assert_eq!(jf[0].shape(), &[7, 10]);
    assert_eq!(jr[0].shape(), &[7, 10]);
    let (a, b) = (jf[0].to_f64_vec(), jr[0].to_f64_vec());
    for k in 0..70 {
        assert!((a[k] - b[k]).abs() <= 1e-12 * (1.0 + a[k].abs()), "entry {k}: {} vs {}", a[k], b[k]);
    }
    let xv = x.to_f64_vec();
    let h = 1e-6;
    for j in 0..10 {
        let shifted = |s: f64| {
            let mut v = xv.clone();
            v[j] += s;
            run(&f, &[Tensor::vec1(&v)])[0].to_f64_vec()
        };
        let (p, m) = (shifted(h), shifted(-h));
        for i in 0..7 {
            let fd = (p[i] - m[i]) / (2.0 * h);
            assert!((fd - a[i * 10 + j]).abs() < 1e-7, "J[{i},{j}] = {} vs fd {fd}", a[i * 10 + j]);
        }
    }
    // jacobian picks reverse mode here (10 inputs > 7 outputs) and agrees.
    let jm = run(&jacobian(&f, 0).unwrap(), &[x]);
    assert_eq!(jm[0], jr[0]);
}

#[test]
fn graph_size_does_not_depend_on_the_number_of_columns() {
    let make = |n: usize| func(&[t64(&[n])], |b, p| Ok(vec![b.sin(p[0])?]));
    assert_eq!(jacfwd(&make(3), 0).unwrap().eqns.len(), jacfwd(&make(300), 0).unwrap().eqns.len());
    assert_eq!(jacrev(&make(3), 0).unwrap().eqns.len(), jacrev(&make(300), 0).unwrap().eqns.len());
}

#[test]
fn hessian_of_rosenbrock_matches_closed_form() {
    let n = 4;
    // f(x) = sum_i 100 (x[i+1] - x[i]^2)^2 + (1 - x[i])^2, i = 0..n-1.
    let f = func(&[t64(&[n])], |b, p| {
        let lo = b.slice(p[0], &[0], &[n - 1], &[1])?;
        let hi = b.slice(p[0], &[1], &[n], &[1])?;
        let lo2 = b.mul(lo, lo)?;
        let d = b.sub(hi, lo2)?;
        let d2 = b.mul(d, d)?;
        let hundred = b.full(100.0, &t64(&[n - 1]))?;
        let t1 = b.mul(hundred, d2)?;
        let one = b.full(1.0, &t64(&[n - 1]))?;
        let e = b.sub(one, lo)?;
        let e2 = b.mul(e, e)?;
        let s = b.add(t1, e2)?;
        Ok(vec![b.reduce_sum(s, &[0])?])
    });
    let xs = [0.5f64, -1.2, 0.8, 1.5];
    let hm = run(&hessian(&f, 0).unwrap(), &[Tensor::vec1(&xs)])[0].to_f64_vec();
    let mut want = vec![0.0; n * n];
    for i in 0..n {
        if i < n - 1 {
            want[i * n + i] += 1200.0 * xs[i] * xs[i] - 400.0 * xs[i + 1] + 2.0;
            want[i * n + i + 1] = -400.0 * xs[i];
            want[(i + 1) * n + i] = -400.0 * xs[i];
        }
        if i > 0 {
            want[i * n + i] += 200.0;
        }
    }
    for k in 0..n * n {
        assert!((hm[k] - want[k]).abs() < 1e-10 * (1.0 + want[k].abs()), "H[{k}] = {} vs {}", hm[k], want[k]);
    }
}

#[test]
fn jacobian_errors() {
    let two = func(&[t64(&[2])], |b, p| Ok(vec![b.sin(p[0])?, b.cos(p[0])?]));
    assert!(jacfwd(&two, 0).unwrap_err().to_string().contains("exactly one output"));
    let f = func(&[t64(&[2])], |b, p| Ok(vec![b.sin(p[0])?]));
    assert!(jacrev(&f, 3).unwrap_err().to_string().contains("no parameter 3"));
    assert!(hessian(&f, 0).unwrap_err().to_string().contains("must return a scalar"));
}
