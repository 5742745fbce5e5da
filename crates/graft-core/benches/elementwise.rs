//! Elementwise chains, fused vs unfused: a 1M-element f32 chain of 10 ops
//! (mul, add, tanh, mul, sub, max, neg, abs, add, mul), the same chain with
//! `tanh` replaced by `min` (no transcendental), and a lone `tanh` (the
//! per-element cost of the scalar libm call); each unfused, fused on the
//! interpreter, and fused as a compiled native kernel.
//!
//! Throughput is reported over the chain's essential traffic: its distinct
//! inputs read once and its output written once (what a perfectly fused
//! kernel must move), so fused and unfused GB/s compare directly.
//!
//! The chain's constants are full-size parameters here; the `full`-constant
//! (splat) form needs the create/shape families. Run:
//! `cargo bench -p graft-core --bench elementwise`.

/// Large buffers on cache-line boundaries, as in the `graft` CLI (`graft_core::alloc`).
#[global_allocator]
static ALLOC: graft_core::alloc::CacheAligned = graft_core::alloc::CacheAligned;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use graft_core::kernel::CompileMode;
use graft_core::{Builder, DType, ExecOptions, Executable, Func, Tensor, TensorType};
use std::hint::black_box;

const N: usize = 1 << 20;

/// `x`, `c1`, `c2` -> 10 elementwise ops; `transcendental` picks tanh or min at op 3.
fn chain(transcendental: bool) -> Func {
    let ty = TensorType::new(DType::F32, vec![N]);
    let mut b = Builder::new("chain10");
    let x = b.param(ty.clone());
    let c1 = b.param(ty.clone());
    let c2 = b.param(ty);
    let v = b.mul(x, c1).unwrap();
    let v = b.add(v, c2).unwrap();
    let v = if transcendental { b.tanh(v).unwrap() } else { b.min(v, c1).unwrap() };
    let v = b.mul(v, c1).unwrap();
    let v = b.sub(v, c2).unwrap();
    let v = b.max(v, x).unwrap();
    let v = b.neg(v).unwrap();
    let v = b.abs(v).unwrap();
    let v = b.add(v, c2).unwrap();
    let v = b.mul(v, c1).unwrap();
    b.finish(&[v]).unwrap()
}

fn lone(op: graft_core::ops::unary::Unary) -> Func {
    let mut b = Builder::new("lone");
    let x = b.param(TensorType::new(DType::F32, vec![N]));
    let y = b.unary(op, x).unwrap();
    b.finish(&[y]).unwrap()
}

fn lone_tanh() -> Func {
    lone(graft_core::ops::unary::Unary::Tanh)
}

fn inputs(k: usize) -> Vec<Tensor> {
    let ty = TensorType::new(DType::F32, vec![N]);
    let mut v = vec![Tensor::from_fn(&ty, |i| ((i % 1000) as f64 - 500.0) / 250.0)];
    v.extend([0.75, 0.125].iter().take(k - 1).map(|&c| Tensor::full(&ty, c)));
    v
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("elementwise_1M_f32");
    g.sample_size(30);
    let cases =
        [("chain10_tanh", chain(true), 3), ("chain10_no_transcendental", chain(false), 3), ("tanh", lone_tanh(), 1)];
    for (name, func, k) in cases {
        let ins = inputs(k);
        let refs: Vec<&Tensor> = ins.iter().collect();
        g.throughput(Throughput::Bytes(((k + 1) * N * 4) as u64));
        let modes = [
            ("unfused", false, CompileMode::Off),
            ("fused", true, CompileMode::Off),
            ("native", true, CompileMode::Sync),
        ];
        for (label, fuse, compile) in modes {
            let opts = ExecOptions { fuse, compile, ..ExecOptions::default() };
            let exe = Executable::with_options(func.clone(), opts).unwrap();
            let id = BenchmarkId::new(name, label);
            g.bench_function(id, |bch| {
                bch.iter(|| {
                    let out = exe.run(&refs).unwrap();
                    black_box(&out);
                    // Hand the output back, as a training loop's next step would.
                    exe.recycle(out);
                })
            });
        }
    }
    g.finish();

    // Lone sin/log (ops::mathfn, vectorised) against a scalar std (libm)
    // loop over the same 1M f32 (single thread for both: RAYON_NUM_THREADS=1
    // to compare per-core throughput).
    use graft_core::ops::unary::Unary;
    let mut g = c.benchmark_group("transcendental_1M_f32");
    g.sample_size(20);
    g.throughput(Throughput::Elements(N as u64));
    let xs: Vec<f32> = (0..N).map(|i| ((i % 1000) as f32 + 0.5) / 100.0).collect();
    let x = Tensor::from_vec(vec![N], xs.clone()).unwrap();
    for (name, op) in [("sin", Unary::Sin), ("log", Unary::Log)] {
        let exe = Executable::new(lone(op)).unwrap();
        g.bench_function(BenchmarkId::new(name, "graft"), |bch| bch.iter(|| black_box(exe.run(&[&x]).unwrap())));
        let f: fn(f32) -> f32 = if name == "sin" { f32::sin } else { f32::ln };
        let mut out = vec![0f32; N];
        g.bench_function(BenchmarkId::new(name, "std_libm"), |bch| {
            bch.iter(|| {
                for (o, &v) in out.iter_mut().zip(&xs) {
                    *o = f(black_box(v));
                }
                black_box(&out);
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
