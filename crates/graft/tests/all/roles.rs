//! Printed IR names values after their role (issue: readable IR): a traced
//! value named `h` prints as `%k:h`; its tangent as `h_dot`, its cotangent
//! as `h_bar`, and values a linear map reads back as residuals `.._resid`.

use graft::{jit_n, trace, transform::Transform, DType, TensorType, Wrt};

fn f(v: &[graft::Tr]) -> graft::Tr {
    let x = v[0].named("x");
    let h = x.tanh().named("h");
    (&h * &h).sum(())
}

#[test]
fn transforms_name_tangents_cotangents_and_residuals() {
    let ty = TensorType::new(DType::F64, vec![3]);
    let g = jit_n("f", f).grad(Wrt::All).trace(&[ty.clone()]).unwrap().to_string();
    assert!(g.contains(":h = tanh"), "{g}");
    assert!(g.contains(":h_bar"), "{g}");
    assert!(g.contains("return %") && g.lines().any(|l| l.contains("return") && l.contains(":x_bar")), "{g}");

    let func = trace("f", &[ty.clone()], f).unwrap();
    let j = Transform::Jvp { wrt: Wrt::All }.apply(&func, &[ty.clone(), ty.clone()]).unwrap().to_string();
    assert!(j.contains(":x_dot: f64[3]") && j.contains(":h_dot"), "{j}");

    let staged = Transform::Linearize { wrt: Wrt::All }.stage(&func).unwrap();
    let rest = staged.rest.to_string();
    assert!(rest.contains("_resid: f64[3]") || rest.contains(":resid: "), "{rest}");
    assert!(rest.contains(":x_dot: f64[3]"), "{rest}");

    // vmap keeps the names of what it batches.
    let v = jit_n("f", f).grad(Wrt::All).vmap(&[Some(0)], &[Some(0)]);
    let vt = v.trace(&[TensorType::new(DType::F64, vec![4, 3])]).unwrap().to_string();
    assert!(vt.contains(":h = tanh") && vt.contains(":x_bar"), "{vt}");
}

#[test]
fn names_change_no_result() {
    let plain = jit_n("p", |v| {
        let t = v[0].tanh();
        (&t * &t).sum(())
    });
    let named = jit_n("f", f);
    let x = graft::Tensor::vec1(&[0.5f64, -1.0, 2.0]);
    let a = plain.grad(Wrt::All).call(&[&x]).unwrap();
    let b = named.grad(Wrt::All).call(&[&x]).unwrap();
    assert_eq!(a[0].to_f64_vec(), b[0].to_f64_vec());
    // Equal up to names: the same graph.
    let ty = [x.ty()];
    assert_eq!(plain.trace(&ty).unwrap().eqns, named.trace(&ty).unwrap().eqns);
}
