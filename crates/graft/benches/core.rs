//! Core benchmarks (issue: foundation + autodiff). Figures go to
//! docs/PERFORMANCE.md next to the machine's peak and to JAX/NumPy on the
//! same machine (`bench/compare.py`).
//!
//! Run: `cargo bench -p graft --bench core`.

/// Large buffers on cache-line boundaries, as in the `graft` CLI (`graft_core::alloc`).
#[global_allocator]
static ALLOC: graft_core::alloc::CacheAligned = graft_core::alloc::CacheAligned;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use graft::{ad, composite, Builder, DType, Executable, Func, Tensor, TensorType, Value, Wrt};
use std::hint::black_box;

fn tensor(ty: &TensorType, seed: u64) -> Tensor {
    let mut s = seed;
    let vals: Vec<f64> = (0..ty.numel())
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 33) as f64 / (1u64 << 31) as f64) - 0.5
        })
        .collect();
    Tensor::from_fn(ty, |i| vals[i])
}

fn build(name: &str, types: &[TensorType], body: impl FnOnce(&mut Builder, &[Value]) -> Vec<Value>) -> Func {
    let mut b = Builder::new(name);
    let ps: Vec<Value> = types.iter().map(|t| b.param(t.clone())).collect();
    let outs = body(&mut b, &ps);
    b.finish(&outs).expect("benchmark graphs are well-formed")
}

fn bench_func(c: &mut Criterion, name: &str, f: Func, inputs: &[Tensor], throughput: Throughput) {
    let exe = Executable::new(f).expect("benchmark graphs verify");
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let mut group = c.benchmark_group(name);
    group.throughput(throughput);
    group.sample_size(20);
    group.bench_function("graft", |bch| bch.iter(|| black_box(exe.run(&refs).expect("runs"))));
    group.finish();
}

/// [`bench_func`] plus a second measurement that hands each call's outputs
/// back with `Executable::recycle`, so the next call writes into them rather
/// than into fresh (zero-filled) buffers: for functions with large outputs
/// the zero-fill is a pass over memory of its own.
fn bench_func_recycled(c: &mut Criterion, name: &str, f: Func, inputs: &[Tensor], throughput: Throughput) {
    let exe = Executable::new(f).expect("benchmark graphs verify");
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let mut group = c.benchmark_group(name);
    group.throughput(throughput);
    group.sample_size(20);
    group.bench_function("graft", |bch| bch.iter(|| black_box(exe.run(&refs).expect("runs"))));
    group.bench_function("graft_recycled", |bch| {
        bch.iter(|| {
            let out = exe.run(&refs).expect("runs");
            exe.recycle(black_box(out));
        })
    });
    group.finish();
}

fn matmul(c: &mut Criterion) {
    let ty = TensorType::new(DType::F32, vec![1024, 1024]);
    let f = build("matmul", &[ty.clone(), ty.clone()], |b, p| {
        vec![b.dot_general(p[0], p[1], &[1], &[0], &[], &[]).unwrap()]
    });
    let n = 1024u64;
    bench_func(c, "matmul_1024_f32", f, &[tensor(&ty, 1), tensor(&ty, 2)], Throughput::Elements(2 * n * n * n));
}

fn elementwise_chain(c: &mut Criterion) {
    let ty = TensorType::new(DType::F32, vec![1 << 20]);
    // Ten elementwise ops: mul, add, tanh, mul, sub, max, neg, abs, add, mul.
    let f = build("chain", &[ty.clone(), ty.clone()], |b, p| {
        let (x, y) = (p[0], p[1]);
        let half = b.full(0.5, &ty).unwrap();
        let t = b.mul(x, y).unwrap();
        let t = b.add(t, x).unwrap();
        let t = b.tanh(t).unwrap();
        let t = b.mul(t, half).unwrap();
        let t = b.sub(t, y).unwrap();
        let t = b.max(t, x).unwrap();
        let t = b.neg(t).unwrap();
        let t = b.abs(t).unwrap();
        let t = b.add(t, y).unwrap();
        vec![b.mul(t, x).unwrap()]
    });
    // Bytes that must move: two inputs read, one output written.
    bench_func(
        c,
        "elementwise_chain_10_1M_f32",
        f,
        &[tensor(&ty, 3), tensor(&ty, 4)],
        Throughput::Bytes((3 * 4) << 20),
    );
}

fn conv2d(c: &mut Criterion) {
    let x = TensorType::new(DType::F32, vec![32, 32, 28, 28]);
    let w = TensorType::new(DType::F32, vec![64, 32, 3, 3]);
    let f = build("conv2d", &[x.clone(), w.clone()], |b, p| {
        let mut params = graft_core::ops::conv::ConvGeneral::unit(2);
        params.padding = vec![(1, 1), (1, 1)];
        vec![b.conv_general(p[0], p[1], params).unwrap()]
    });
    let flops = 2 * 32 * 64 * 28 * 28 * 32 * 9u64;
    bench_func(c, "conv2d_32x32x28x28_64x3x3_f32", f, &[tensor(&x, 5), tensor(&w, 6)], Throughput::Elements(flops));
}

fn softmax(c: &mut Criterion) {
    let ty = TensorType::new(DType::F32, vec![4096, 1024]);
    let f = build("softmax", &[ty.clone()], |b, p| vec![composite::reduce::softmax(b, p[0], 1).unwrap()]);
    bench_func(c, "softmax_4096x1024_f32", f, &[tensor(&ty, 7)], Throughput::Bytes(2 * 4 * 4096 * 1024));
}

/// value_and_grad of a 784-512-512-10 MLP with softmax cross-entropy, batch 128, f32.
fn mlp_value_and_grad(c: &mut Criterion) {
    let dims = [784usize, 512, 512, 10];
    let mut types = vec![TensorType::new(DType::F32, vec![128, 784]), TensorType::new(DType::I32, vec![128])];
    for k in 0..3 {
        types.push(TensorType::new(DType::F32, vec![dims[k + 1], dims[k]]));
        types.push(TensorType::new(DType::F32, vec![dims[k + 1]]));
    }
    let f = build("mlp_loss", &types, |b, p| {
        let mut h = p[0];
        for k in 0..3 {
            h = composite::linalg::linear(b, h, p[2 + 2 * k], Some(p[3 + 2 * k])).unwrap();
            if k < 2 {
                h = composite::math::relu(b, h).unwrap();
            }
        }
        vec![composite::loss::cross_entropy(b, h, p[1], 1).unwrap()]
    });
    let vg = ad::value_and_grad(&f, &Wrt::Positions((2..8).collect())).unwrap();
    let mut inputs: Vec<Tensor> = types.iter().enumerate().map(|(i, t)| tensor(t, 10 + i as u64)).collect();
    inputs[1] = Tensor::from_fn(&types[1], |i| (i % 10) as f64);
    let flops = 3 * 2 * 128 * (784 * 512 + 512 * 512 + 512 * 10) as u64;
    bench_func(c, "mlp_784_512_512_10_b128_value_and_grad_f32", vg, &inputs, Throughput::Elements(flops));
}

/// Hessian-vector product of a 2-layer tanh network's scalar loss (f64):
/// jvp of grad, 256 inputs, 256 hidden, batch 64.
fn hvp(c: &mut Criterion) {
    let types = vec![
        TensorType::new(DType::F64, vec![64, 256]),
        TensorType::new(DType::F64, vec![256, 256]),
        TensorType::new(DType::F64, vec![256, 1]),
    ];
    let f = build("tanh_net", &types, |b, p| {
        let h = b.dot_general(p[0], p[1], &[1], &[0], &[], &[]).unwrap();
        let h = b.tanh(h).unwrap();
        let o = b.dot_general(h, p[2], &[1], &[0], &[], &[]).unwrap();
        let o = b.tanh(o).unwrap();
        let sq = b.mul(o, o).unwrap();
        vec![b.reduce_sum(sq, &[0, 1]).unwrap()]
    });
    let g = ad::grad(&f, &Wrt::Positions(vec![1, 2])).unwrap();
    let hvp = ad::jvp_func(&g).unwrap();
    let mut inputs: Vec<Tensor> = types.iter().enumerate().map(|(i, t)| tensor(t, 20 + i as u64)).collect();
    for (i, t) in types.iter().enumerate() {
        inputs.push(tensor(t, 30 + i as u64));
    }
    bench_func(c, "hvp_tanh_2layer_f64", hvp, &inputs, Throughput::Elements(1));
}

/// Per-example gradients: vmap(grad) of a 784-128-10 MLP loss over a batch of 64, f32.
fn per_example_grads(c: &mut Criterion) {
    let types = vec![
        TensorType::new(DType::F32, vec![128, 784]),
        TensorType::new(DType::F32, vec![10, 128]),
        TensorType::new(DType::F32, vec![784]),
        TensorType::new(DType::I32, vec![]),
    ];
    let f = build("example_loss", &types, |b, p| {
        let x = b.reshape(p[2], &[1, 784]).unwrap();
        let h = composite::linalg::linear(b, x, p[0], None).unwrap();
        let h = composite::math::relu(b, h).unwrap();
        let logits = composite::linalg::linear(b, h, p[1], None).unwrap();
        let label = b.reshape(p[3], &[1]).unwrap();
        vec![composite::loss::cross_entropy(b, logits, label, 1).unwrap()]
    });
    let g = ad::grad(&f, &Wrt::Positions(vec![0, 1])).unwrap();
    let vg = graft_core::batch::vmap_func(&g, &[None, None, Some(0), Some(0)], &[Some(0), Some(0)], 64).unwrap();
    let inputs = vec![
        tensor(&types[0], 40),
        tensor(&types[1], 41),
        tensor(&TensorType::new(DType::F32, vec![64, 784]), 42),
        Tensor::from_fn(&TensorType::new(DType::I32, vec![64]), |i| (i % 10) as f64),
    ];
    let flops = 3 * 2 * 64 * (784 * 128 + 128 * 10) as u64;
    bench_func_recycled(c, "per_example_grads_mlp_784_128_10_b64_f32", vg, &inputs, Throughput::Elements(flops));
}

/// jacrev of a 100 -> 100 tanh layer (f64): one VJP vmapped over 100 cotangents.
fn jacrev_tanh_layer(c: &mut Criterion) {
    let types = vec![TensorType::new(DType::F64, vec![100, 100]), TensorType::new(DType::F64, vec![100])];
    let f = build("tanh_layer", &types, |b, p| {
        let z = b.dot_general(p[0], p[1], &[1], &[0], &[], &[]).unwrap();
        vec![b.tanh(z).unwrap()]
    });
    let j = graft_core::jac::jacrev(&f, 1).unwrap();
    let inputs: Vec<Tensor> = types.iter().enumerate().map(|(i, t)| tensor(t, 50 + i as u64)).collect();
    bench_func_recycled(c, "jacrev_tanh_100x100_f64", j, &inputs, Throughput::Elements(1));
}

criterion_group!(
    benches,
    matmul,
    elementwise_chain,
    conv2d,
    softmax,
    mlp_value_and_grad,
    hvp,
    per_example_grads,
    jacrev_tanh_layer
);
criterion_main!(benches);
