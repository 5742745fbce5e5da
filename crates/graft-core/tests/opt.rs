//! Cleanup passes: no-op removal drops exactly the equations that return
//! their operand unchanged, and the results stay the same.

mod common;

use common::{run, Rng};
use graft_core::opt::{remove_noops, simplify};
use graft_core::{Builder, DType, Op, TensorType};

#[test]
fn noop_equations_are_removed_and_others_kept() {
    let t = TensorType::new(DType::F64, vec![3, 3]);
    let mut b = Builder::new("f");
    let x = b.param(t.clone());
    let r = b.reshape(x, &[3, 3]).unwrap(); // no-op
    let c = b.convert(r, DType::F64).unwrap(); // no-op
    let id = b.transpose(c, &[0, 1]).unwrap(); // no-op
    let bc = b.broadcast_in_dim(id, &[3, 3], &[0, 1]).unwrap(); // no-op
    let tr = b.transpose(bc, &[1, 0]).unwrap(); // same type, not a no-op
    let sg = b.stop_gradient(tr).unwrap(); // changes derivatives: kept
    let e = b.exp(sg).unwrap();
    let f = b.finish(&[e, x, bc]).unwrap();
    let g = remove_noops(&f);
    let names: Vec<&str> = g.eqns.iter().map(|q| q.prim.name()).collect();
    assert_eq!(names, vec!["transpose", "stop_gradient", "exp"]);
    assert_eq!(g.outputs[1], g.params[0]);
    assert_eq!(g.outputs[2], g.params[0], "an output that was a no-op of a parameter is the parameter");
    let x = Rng(1).tensor(&t, -1.0, 1.0);
    assert_eq!(run(&f, std::slice::from_ref(&x)), run(&g, std::slice::from_ref(&x)));
    assert_eq!(simplify(&f).eqns.len(), 3);
}
