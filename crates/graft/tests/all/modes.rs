//! Compile modes (seed 002): `disable_compile` runs every function op by
//! op, with the same bits as compiled runs; a `Jit` recompiles for the
//! mode and `cache_size` shows it. The switch is process-wide; other tests
//! of this binary that plan while it is off merely run op by op, which by
//! the same promise changes none of their results.

use graft::{jit, Tensor, TensorType};

/// `disable_compile` flips a process-wide switch: the tests that flip it
/// or depend on native code being compiled take this lock, so they do not
/// run while another one has it flipped.
static SWITCH: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn disabled_compile_runs_op_by_op_with_the_same_bits() {
    let _switch = SWITCH.lock().unwrap_or_else(|e| e.into_inner());
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

#[test]
fn shapeless_compiles_once_per_dtypes_and_ranks() {
    let _switch = SWITCH.lock().unwrap_or_else(|e| e.into_inner());
    use graft::{jit_n, Tr};
    let body = |v: &[Tr]| {
        // A row reduction, a broadcast of `w` along the rows, a transposed
        // read and a slice: sizes in every kind of index.
        let x = &v[0];
        let y = x.softmax(-1) * &v[1] + x.t().t() * 0.5;
        y.slice_axis(-1, Some(1), None, 1).sum(-1)
    };
    let f = jit_n("f", body).shapeless();
    let reference = jit_n("f", body);
    let data = |shape: Vec<usize>, seed: usize| {
        let ty = TensorType::new(graft::DType::F32, shape);
        Tensor::from_fn(&ty, |i| ((i * 7919 + seed * 104_729) % 1000) as f64 / 250.0 - 2.0)
    };
    let wait = std::time::Duration::from_secs(60);
    for (k, (r, c)) in [(4, 7), (5, 9), (16, 33)].into_iter().enumerate() {
        let (x, w) = (data(vec![r, c], k), data(vec![c], k + 1));
        let compiled = f.compiled(&[x.ty(), w.ty()]).unwrap();
        let (ready, total) = compiled.native_status();
        assert!(total > 0, "nothing was compiled natively");
        if k == 0 {
            assert!(compiled.wait_native(wait), "the first library did not compile in time");
        } else {
            // The library compiled for the first sizes serves these from
            // the first call on: nothing waits for a compiler.
            assert_eq!(ready, total, "at {r}x{c} only {ready} of {total} kernels were ready");
        }
        let (got, want) = (f.call(&[&x, &w]).unwrap(), reference.call(&[&x, &w]).unwrap());
        let (a, b) = (got[0].to_vec::<f32>().unwrap(), want[0].to_vec::<f32>().unwrap());
        assert_eq!(a.len(), r);
        assert!(a.iter().zip(&b).all(|(p, q)| p.to_bits() == q.to_bits()), "at {r}x{c}: {a:?} vs {b:?}");
    }
    assert_eq!(f.cache_size(), 1, "three sizes, one compilation");
    assert_eq!(reference.cache_size(), 3);
    // Another dtype is another compilation.
    f.call(&[&Tensor::from_vec(vec![2, 3], vec![1.0f64; 6]).unwrap(), &Tensor::vec1(&[1.0f64, 2.0, 3.0])]).unwrap();
    assert_eq!(f.cache_size(), 2);
    // Sizes that break the function's rules are rejected by the rule, with
    // both sizes named.
    let err = f.call(&[&data(vec![4, 7], 0), &data(vec![8], 1)]).unwrap_err().to_string();
    assert!(err.contains('7') && err.contains('8'), "{err}");
}
