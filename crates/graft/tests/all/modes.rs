//! Compile modes (seed 002): `disable_compile` runs every function op by
//! op, with the same bits as compiled runs; a `Jit` recompiles for the
//! mode and `cache_size` shows it. The switch is process-wide; other tests
//! of this binary that plan while it is off merely run op by op, which by
//! the same promise changes none of their results.

use graft::{jit, Tensor, TensorType};

#[test]
fn disabled_compile_runs_op_by_op_with_the_same_bits() {
    let f = jit("chain", |x| {
        let mut y = x.clone();
        for _ in 0..6 {
            y = (y.sin() * 1.5 + 0.25).tanh();
        }
        y.softmax(-1)
    });
    let ty = TensorType::new(graft::DType::F32, vec![64, 1000]);
    let x = Tensor::from_fn(&ty, |i| ((i * 7919) % 1000) as f64 / 250.0 - 2.0);
    let (compiled, c_stats) = f.compiled(&[ty.clone()]).unwrap().call_with_stats(&[&x]).unwrap();
    assert_eq!(f.cache_size(), 1);
    graft::disable_compile();
    let run = f.compiled(&[ty.clone()]).map(|c| c.call_with_stats(&[&x]));
    graft::enable_compile();
    let (op_by_op, o_stats) = run.unwrap().unwrap();
    assert_eq!(f.cache_size(), 2, "the op-by-op plan is a second compilation");
    assert!(
        o_stats.kernels > c_stats.kernels,
        "op by op launches one kernel per equation: {} vs {} fused",
        o_stats.kernels,
        c_stats.kernels
    );
    let (a, b) = (compiled[0].to_vec::<f32>().unwrap(), op_by_op[0].to_vec::<f32>().unwrap());
    assert!(a.iter().zip(&b).all(|(p, q)| p.to_bits() == q.to_bits()));
    // Back on: the compiled plan is reused, not made again.
    f.call(&[&x]).unwrap();
    assert_eq!(f.cache_size(), 2);
}

#[test]
fn cache_size_counts_signatures() {
    let f = jit("sq", |x| x * x);
    assert_eq!(f.cache_size(), 0);
    f.call(&[&Tensor::vec1(&[1.0f32, 2.0])]).unwrap();
    f.call(&[&Tensor::vec1(&[3.0f32, 4.0])]).unwrap();
    assert_eq!(f.cache_size(), 1, "same types, one compilation");
    f.call(&[&Tensor::vec1(&[1.0f32, 2.0, 3.0])]).unwrap();
    f.call(&[&Tensor::vec1(&[1.0f64])]).unwrap();
    assert_eq!(f.cache_size(), 3);
}
