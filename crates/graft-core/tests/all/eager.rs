//! Eager tensors (`graft_core::eager`): operations run at once, agree
//! bitwise with the same operation in a planned function, broadcast like
//! jax.numpy, and return errors as values.

use graft_core::composite as c;
use graft_core::ops::unary::Unary;
use graft_core::{Builder, DType, Executable, Tensor, TensorType};

fn v(xs: &[f64]) -> Tensor {
    Tensor::vec1(xs)
}

#[test]
fn unary_math_matches_a_planned_function_bitwise() {
    let x = Tensor::from_fn(&TensorType::new(DType::F32, vec![1000]), |i| (i as f64 - 500.0) / 37.0);
    for (op, eager) in [
        (Unary::Exp, x.exp().unwrap()),
        (Unary::Sin, x.sin().unwrap()),
        (Unary::Tanh, x.tanh().unwrap()),
        (Unary::Abs, x.abs().unwrap()),
    ] {
        let mut b = Builder::new("f");
        let p = b.param(x.ty());
        let y = b.unary(op, p).unwrap();
        let exe = Executable::new(b.finish(&[y]).unwrap()).unwrap();
        let planned = exe.run(&[&x]).unwrap().remove(0);
        let (a, b) = (eager.to_vec::<f32>().unwrap(), planned.to_vec::<f32>().unwrap());
        assert!(a.iter().zip(&b).all(|(p, q)| p.to_bits() == q.to_bits()), "{op:?}");
    }
}

#[test]
fn arithmetic_broadcasts_and_takes_scalars() {
    let m = Tensor::from_vec(vec![2, 3], vec![1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
    let r = v(&[10.0, 20.0, 30.0]);
    let s = (&m + &r).unwrap();
    assert_eq!(s.shape(), &[2, 3]);
    assert_eq!(s.to_f64_vec(), vec![11.0, 22.0, 33.0, 14.0, 25.0, 36.0]);
    assert_eq!((&m * 2.0).unwrap().to_f64_vec(), vec![2.0, 4.0, 6.0, 8.0, 10.0, 12.0]);
    assert_eq!((1.0 - &r).unwrap().to_f64_vec(), vec![-9.0, -19.0, -29.0]);
    assert_eq!((-&r).unwrap().to_f64_vec(), vec![-10.0, -20.0, -30.0]);
    // Chained, with reductions and negative axes.
    let rows = (&m / &r).unwrap().sum(&[-1], false).unwrap();
    assert_eq!(rows.shape(), &[2]);
    assert!((rows.to_f64_vec()[0] - 0.3).abs() < 1e-15);
    let kept = m.mean(&[0], true).unwrap();
    assert_eq!((kept.shape(), kept.to_f64_vec()), (&[1usize, 3][..], vec![2.5, 3.5, 4.5]));
    assert_eq!(m.max(&[], false).unwrap().to_scalar_f64().unwrap(), 6.0);
    let p = m.matmul(&m.transposed(None).unwrap()).unwrap();
    assert_eq!(p.to_f64_vec(), vec![14.0, 32.0, 32.0, 77.0]);
    let sm = r.softmax(-1).unwrap().to_f64_vec();
    assert!((sm.iter().sum::<f64>() - 1.0).abs() < 1e-15);
    assert_eq!(m.reshaped(&[3, -1]).unwrap().shape(), &[3, 2]);
}

#[test]
fn mistakes_are_errors_not_panics() {
    let a = v(&[1.0, 2.0, 3.0]);
    let b = v(&[1.0, 2.0]);
    let e = (&a + &b).expect_err("shapes [3] and [2] do not broadcast");
    assert!(e.to_string().contains("[3]") || e.to_string().contains("3"), "{e}");
    let f = Tensor::vec1(&[1.0f32, 2.0]);
    assert!((&a * &f).is_err(), "f64 times f32 is a dtype error, as in the compiler");
    assert!(a.sum(&[1], false).expect_err("rank 1 has no axis 1").to_string().contains("out of range"));
    assert!(a.sum(&[0, -1], false).expect_err("axis repeated").to_string().contains("repeated"));
    assert!(a.reshaped(&[2, 2]).is_err());
    let i = Tensor::vec1(&[1i32, 2]);
    assert!(i.exp().is_err(), "exp of integers is a type error");
}

#[test]
fn eager_ops_match_composites_in_a_planned_function() {
    let x = Tensor::from_vec(vec![2, 4], (0..8).map(|i| i as f32 * 0.7 - 2.0).collect::<Vec<_>>()).unwrap();
    let mut b = Builder::new("f");
    let p = b.param(x.ty());
    let y = c::math::sigmoid(&mut b, p).unwrap();
    let planned = Executable::new(b.finish(&[y]).unwrap()).unwrap().run(&[&x]).unwrap().remove(0);
    assert_eq!(x.sigmoid().unwrap().to_vec::<f32>().unwrap(), planned.to_vec::<f32>().unwrap());
}
