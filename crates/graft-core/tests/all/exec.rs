//! Executor: liveness-based buffer reuse, peak-bytes reporting, input checks.
//! Buffer-reuse figures are checked with fusion off (one kernel per
//! equation) and on (the whole chain is one group).

use graft_core::ops::unary::Unary;
use graft_core::{Builder, DType, ExecError, ExecOptions, Executable, Tensor, TensorType};

fn chain(n_ops: usize, numel: usize) -> Executable {
    chain_with(n_ops, numel, ExecOptions::default())
}

fn chain_with(n_ops: usize, numel: usize, options: ExecOptions) -> Executable {
    let ty = TensorType::new(DType::F32, vec![numel]);
    let mut b = Builder::new("chain");
    let mut v = b.param(ty);
    let ops = [Unary::Sin, Unary::Cos, Unary::Neg, Unary::Tanh];
    for i in 0..n_ops {
        v = b.unary(ops[i % ops.len()], v).unwrap();
    }
    let f = b.finish(&[v]).unwrap();
    Executable::with_options(f, options).unwrap()
}

/// The chain's value at element 3 by a scalar loop.
fn chain_reference() -> f32 {
    let mut r = 3.0f32 * 0.1; // input element 3: (3 % 7) * 0.1
    for i in 0..100 {
        r = match i % 4 {
            0 => r.sin(),
            1 => r.cos(),
            2 => -r,
            _ => graft_core::ops::mathfn::tanh_f32(r),
        };
    }
    r
}

#[test]
fn hundred_op_chain_on_1mib_tensors_reuses_buffers() {
    let numel = 1 << 18; // 1 MiB of f32
    let exe = chain_with(100, numel, ExecOptions { fuse: false, ..ExecOptions::default() });
    let x = Tensor::from_fn(&TensorType::new(DType::F32, vec![numel]), |i| (i % 7) as f64 * 0.1);
    let (out, stats) = exe.run_with_stats(&[&x]).unwrap();
    assert_eq!(stats.kernels, 100);
    assert!(stats.peak_bytes < 4 << 20, "peak {} bytes", stats.peak_bytes);
    // Two buffers ping-pong: the output of op k and the output of op k+1.
    assert_eq!(stats.fresh_bytes, 2 << 20);
    assert_eq!(stats.reused_buffers, 98);
    // Values are right: compare with a scalar reference of the same chain.
    assert_eq!(out[0].to_vec::<f32>().unwrap()[3], chain_reference());
    // A second call serves every buffer from the pool.
    let (_, again) = exe.run_with_stats(&[&x]).unwrap();
    assert!(again.peak_bytes < 4 << 20);
    assert!(again.fresh_bytes <= 1 << 20, "second run allocated {}", again.fresh_bytes);
}

#[test]
fn fused_hundred_op_chain_needs_only_the_output_buffer() {
    let numel = 1 << 18; // 1 MiB of f32
    let exe = chain_with(100, numel, ExecOptions::default());
    let x = Tensor::from_fn(&TensorType::new(DType::F32, vec![numel]), |i| (i % 7) as f64 * 0.1);
    let (out, stats) = exe.run_with_stats(&[&x]).unwrap();
    // One fused group; the 99 intermediates live in per-block scratch.
    assert_eq!(stats.kernels, 1);
    assert_eq!(stats.peak_bytes, 1 << 20);
    assert_eq!(stats.fresh_bytes, 1 << 20);
    assert_eq!(stats.reused_buffers, 0);
    assert_eq!(out[0].to_vec::<f32>().unwrap()[3], chain_reference());
    // The returned buffer leaves the executor, so a second run allocates it afresh.
    let (_, again) = exe.run_with_stats(&[&x]).unwrap();
    assert_eq!((again.peak_bytes, again.fresh_bytes, again.reused_buffers), (1 << 20, 1 << 20, 0));
}

#[test]
fn outputs_params_and_repeated_outputs() {
    let ty = TensorType::new(DType::F64, vec![2]);
    let mut b = Builder::new("f");
    let x = b.param(ty);
    let y = b.exp(x).unwrap();
    let f = b.finish(&[y, x, y]).unwrap();
    let exe = Executable::new(f).unwrap();
    let xin = Tensor::vec1(&[0.0f64, 1.0]);
    let out = exe.run(&[&xin]).unwrap();
    assert_eq!(out.len(), 3);
    assert_eq!(out[0], out[2]);
    assert_eq!(out[1], xin);
    assert_eq!(out[0].to_vec::<f64>().unwrap(), vec![1.0, graft_core::ops::mathfn::exp_f64(1.0)]);
}

#[test]
fn bad_inputs_are_errors_not_panics() {
    let exe = chain(2, 4);
    let err = exe.run(&[]).unwrap_err();
    assert!(matches!(err, ExecError::InputCount { expected: 1, got: 0, .. }));
    let wrong = Tensor::vec1(&[1.0f64, 2.0, 3.0, 4.0]);
    let err = exe.run(&[&wrong]).unwrap_err();
    assert_eq!(err.to_string(), "function `chain`: input 0 must be f32[4], got f64[4]");
    let wrong_shape = Tensor::vec1(&[1.0f32; 5]);
    assert!(matches!(exe.run(&[&wrong_shape]), Err(ExecError::InputType { index: 0, .. })));
}

#[test]
fn recycled_outputs_are_reused_by_the_next_run() {
    let ty = TensorType::new(DType::F32, vec![1000]);
    let mut b = Builder::new("f");
    let x = b.param(ty.clone());
    let e = b.unary(Unary::Exp, x).unwrap();
    let f = b.finish(&[e]).unwrap();
    let exe = Executable::new(f).unwrap();
    let x = Tensor::from_fn(&ty, |i| i as f64 * 1e-3);
    let (first, s1) = exe.run_with_stats(&[&x]).unwrap();
    assert_eq!(s1.fresh_bytes, 4000);
    let want = first[0].clone();
    // A tensor of a kind the function never has is not kept.
    exe.recycle(first.into_iter().chain([Tensor::zeros(&TensorType::new(DType::F64, vec![3]))]));
    let (second, s2) = exe.run_with_stats(&[&x]).unwrap();
    assert_eq!((s2.fresh_bytes, s2.reused_buffers), (0, 1), "the output is written into the recycled buffer");
    assert_eq!(second[0], want);
}

fn t64(shape: &[usize]) -> TensorType {
    TensorType::new(DType::F64, shape.to_vec())
}

/// `tanh(x @ w) * x0` where `x0` is x's first element broadcast: a matrix
/// product (its own step), then an elementwise group reading the product,
/// which dies there.
fn product_then_tail(n: usize) -> graft_core::Func {
    let mut b = Builder::new("f");
    let x = b.param(t64(&[n, n]));
    let w = b.param(t64(&[n, n]));
    let p = b.matmul2d(x, w).unwrap();
    let t = b.unary(Unary::Tanh, p).unwrap();
    let two = b.scalar(2.0, DType::F64).unwrap();
    let two = b.broadcast_in_dim(two, &[n, n], &[]).unwrap();
    let y = b.mul(t, two).unwrap();
    b.finish(&[y]).unwrap()
}

fn grid(ty: &TensorType, seed: u64) -> Tensor {
    Tensor::from_fn(ty, |i| ((i as u64 * 7 + seed) % 23) as f64 * 0.05 - 0.5)
}

#[test]
fn a_native_group_writes_its_output_over_an_input_that_dies_there() {
    if crate::common::native::skip() {
        return;
    }
    use graft_core::kernel::CompileMode;
    let n = 64;
    let f = product_then_tail(n);
    let (x, w) = (grid(&t64(&[n, n]), 1), grid(&t64(&[n, n]), 2));
    let opts = |compile| ExecOptions { compile, ..ExecOptions::default() };
    let (want, off) =
        Executable::with_options(f.clone(), opts(CompileMode::Off)).unwrap().run_with_stats(&[&x, &w]).unwrap();
    let (got, on) = Executable::with_options(f, opts(CompileMode::Sync)).unwrap().run_with_stats(&[&x, &w]).unwrap();
    crate::common::native::assert_bitwise_eq(&got, &want);
    let bytes = n * n * 8;
    // Interpreted: the product and the result. Native: the result is
    // written over the product.
    assert_eq!((off.fresh_bytes, off.reused_buffers), (2 * bytes, 0));
    assert_eq!((on.fresh_bytes, on.reused_buffers), (bytes, 1));
    assert_eq!(on.peak_bytes, bytes);
}

#[test]
fn donated_inputs_are_reused_after_their_last_reader() {
    use graft_core::kernel::CompileMode;
    use graft_core::Input;
    // y = x @ w; z = y @ w: z can take x's buffer once x is dead.
    let n = 32;
    let mut b = Builder::new("f");
    let x = b.param(t64(&[n, n]));
    let w = b.param(t64(&[n, n]));
    let y = b.matmul2d(x, w).unwrap();
    let z = b.matmul2d(y, w).unwrap();
    let f = b.finish(&[z]).unwrap();
    // A fresh executable for each run: its pool keeps buffers between runs.
    let exe = || {
        Executable::with_options(f.clone(), ExecOptions { compile: CompileMode::Off, ..ExecOptions::default() })
            .unwrap()
    };
    let (xin, win) = (grid(&t64(&[n, n]), 3), grid(&t64(&[n, n]), 4));
    let (want, kept) = exe().run_with_stats(&[&xin, &win]).unwrap();
    let exe = exe();
    let (got, donated) = exe.run_donating(vec![Input::Donated(xin.clone()), Input::Borrowed(&win)]).unwrap();
    crate::common::native::assert_bitwise_eq(&got, &want);
    let bytes = n * n * 8;
    assert_eq!((kept.fresh_bytes, kept.reused_buffers), (2 * bytes, 0));
    assert_eq!((donated.fresh_bytes, donated.reused_buffers), (bytes, 1), "z is written into x's buffer");
    // The run owns the donated buffer from its start.
    assert_eq!(donated.peak_bytes, 2 * bytes);
    // Type errors are still errors.
    let bad = Tensor::vec1(&[1.0f64]);
    assert!(exe.run_donating(vec![Input::Donated(bad), Input::Borrowed(&win)]).is_err());
}

#[test]
fn a_donated_input_returned_as_is_comes_back_without_a_copy() {
    use graft_core::tensor::Storage;
    use graft_core::Input;
    let mut b = Builder::new("f");
    let x = b.param(t64(&[1000]));
    let e = b.unary(Unary::Exp, x).unwrap();
    let f = b.finish(&[x, e]).unwrap();
    let exe = Executable::new(f).unwrap();
    let xin = grid(&t64(&[1000]), 5);
    let want = exe.run(&[&xin]).unwrap();
    let ptr = |t: &Tensor| match t.storage() {
        Storage::F64(v) => v.as_ptr(),
        _ => unreachable!("the test's tensors are f64"),
    };
    let before = ptr(&xin);
    let (got, _) = exe.run_donating(vec![Input::Donated(xin)]).unwrap();
    crate::common::native::assert_bitwise_eq(&got, &want);
    assert_eq!(ptr(&got[0]), before);
}

/// A `constant` equation's value is read from the plan, like a borrowed
/// parameter: no buffer is allocated for it, and a constant returned as a
/// result (or returned twice, or read by a kernel that dies after) comes
/// back as a copy with the same bits on every run.
#[test]
fn constants_are_read_in_place_without_a_buffer() {
    let ty = TensorType::new(DType::F64, vec![4096]);
    let c = Tensor::from_fn(&ty, |i| i as f64 * 0.25 - 3.0);
    let mut b = Builder::new("consts");
    let x = b.param(ty.clone());
    let k = b.constant(c.clone()).unwrap();
    let y = b.binary(graft_core::ops::binary::Binary::Mul, x, k).unwrap();
    let f = b.finish(&[y, k, k]).unwrap();
    let exe = Executable::with_options(f, ExecOptions { fuse: false, ..ExecOptions::default() }).unwrap();
    let x = Tensor::from_fn(&ty, |i| (i % 5) as f64);
    for _ in 0..2 {
        let (out, stats) = exe.run_with_stats(&[&x]).unwrap();
        // Only the product needs a buffer (4096 f64).
        assert_eq!(stats.peak_bytes, 4096 * 8);
        assert_eq!(out[1].to_vec::<f64>().unwrap(), c.to_vec::<f64>().unwrap());
        assert_eq!(out[2].to_vec::<f64>().unwrap(), c.to_vec::<f64>().unwrap());
        let want: Vec<f64> = (0..4096).map(|i| (i % 5) as f64 * (i as f64 * 0.25 - 3.0)).collect();
        assert_eq!(out[0].to_vec::<f64>().unwrap(), want);
    }
}
