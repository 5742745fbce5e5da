//! GPU next to CPU: GEMM and convolution GFLOP/s and an MLP training step.
//!
//!     cargo run --release -p graft-gpu --example gpu_bench
//!
//! Prints the adapter, then for each case the median of a few timed calls
//! on the GPU (device-resident inputs, results left on the device, one
//! wait at the end of each call) and on the CPU executor. Exits with an
//! error message when there is no adapter.

use graft_core::{Executable, Tensor};
use graft_gpu::GpuExecutable;
use std::time::Instant;

const MM: &str = "def mm(a: tensor[m, k, f32], b: tensor[k, n, f32]) -> tensor[m, n, f32] = a @ b";

const CONV: &str =
    "def conv(x: tensor[b, ci, hh, ww, f32], w: tensor[co, ci, 3, 3, f32]) -> tensor[b, co, hh, ww, f32] =
  conv2d(x, w, padding=1)";

/// The convolution's GEMM alone: one product per image, as the device runs it
/// after im2col (`[co, ci * 9] x [ci * 9, hh * ww]`; here the weights are
/// passed once per image).
const CONV_GEMM: &str = "def g(w: tensor[b, co, k, f32], col: tensor[b, k, p, f32]) -> tensor[b, co, p, f32] = w @ col";

const MLP: &str = "
def loss(w1: tensor[d, h, f32], b1: tensor[h, f32], w2: tensor[h, c, f32], x: tensor[n, d, f32],
         y: tensor[n, c, f32]) -> f32 {
  let e = tanh(x @ w1 + b1) @ w2 - y
  mean(e * e)
}
def step(w1: tensor[d, h, f32], b1: tensor[h, f32], w2: tensor[h, c, f32], x: tensor[n, d, f32],
         y: tensor[n, c, f32]) -> (tensor[d, h, f32], tensor[h, f32], tensor[h, c, f32], f32) {
  let (l, (g1, gb, g2)) = value_and_grad(loss, wrt=(w1, b1, w2))(w1, b1, w2, x, y)
  (w1 - 0.1 * g1, b1 - 0.1 * gb, w2 - 0.1 * g2, l)
}
";

fn data(shape: &[usize], seed: u64) -> Tensor {
    let n: usize = shape.iter().product();
    let mut s = seed.wrapping_add(0x9e3779b97f4a7c15);
    let v: Vec<f32> = (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 40) as f64 / (1u64 << 24) as f64 - 0.5) as f32
        })
        .collect();
    Tensor::from_vec(shape.to_vec(), v).unwrap_or_else(|e| panic!("{e}"))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median seconds per call on the GPU (inputs resident; the results of
/// each call downloaded, which waits for it) and on the CPU.
fn time(src: &str, entry: &str, inputs: &[Tensor], runs: usize) -> Result<(f64, f64), String> {
    let m = graft_lang::Module::from_source("bench.graft", src).map_err(|d| format!("{d:?}"))?;
    let types: Vec<_> = inputs.iter().map(|t| t.ty()).collect();
    let f = m.instantiate(entry, &types).map_err(|d| format!("{d:?}"))?.func;
    let gpu = GpuExecutable::new(f.clone()).map_err(|e| e.to_string())?;
    let cpu = Executable::new(f).map_err(|e| e.to_string())?;
    let _ = cpu.wait_all_native(std::time::Duration::from_secs(60));
    let dev: Vec<_> = inputs.iter().map(|t| gpu.to_device(t)).collect::<Result<_, _>>().map_err(|e| e.to_string())?;
    let dref: Vec<_> = dev.iter().collect();
    let href: Vec<&Tensor> = inputs.iter().collect();
    let mut g = Vec::new();
    let mut c = Vec::new();
    for i in 0..runs + 1 {
        let t = Instant::now();
        let (out, _) = gpu.run_resident(&dref).map_err(|e| e.to_string())?;
        let last = out.last().ok_or("no results")?;
        gpu.to_host(&[last]).map_err(|e| e.to_string())?;
        if i > 0 {
            g.push(t.elapsed().as_secs_f64());
        }
        let t = Instant::now();
        cpu.run(&href).map_err(|e| e.to_string())?;
        if i > 0 {
            c.push(t.elapsed().as_secs_f64());
        }
    }
    Ok((median(g), median(c)))
}

fn main() {
    let gpu = match graft_gpu::global() {
        Ok(g) => g,
        Err(e) => {
            eprintln!("gpu_bench: {e}");
            std::process::exit(1);
        }
    };
    println!("adapter: {}", gpu.describe());
    for n in [256usize, 512, 1024] {
        match time(MM, "mm", &[data(&[n, n], 1), data(&[n, n], 2)], 5) {
            Ok((g, c)) => {
                let flop = 2.0 * (n * n * n) as f64;
                println!(
                    "gemm {n}^3: gpu {:.2} ms ({:.2} GFLOP/s), cpu {:.2} ms ({:.2} GFLOP/s)",
                    g * 1e3,
                    flop / g / 1e9,
                    c * 1e3,
                    flop / c / 1e9
                );
            }
            Err(e) => println!("gemm {n}: {e}"),
        }
    }
    // The benchmark convolution (bench/programs/conv2d.graft's shape): im2col
    // and the GEMM, next to the GEMM alone.
    let (b, ci, co, hw) = (32usize, 32usize, 64usize, 28usize);
    let flop = 2.0 * (b * co * ci * 9 * hw * hw) as f64;
    match time(CONV, "conv", &[data(&[b, ci, hw, hw], 9), data(&[co, ci, 3, 3], 10)], 3) {
        Ok((g, c)) => println!(
            "conv {b}x{ci}x{hw}x{hw} by {co}x{ci}x3x3 pad 1: gpu {:.1} ms ({:.2} GFLOP/s), cpu {:.2} ms ({:.2} GFLOP/s)",
            g * 1e3,
            flop / g / 1e9,
            c * 1e3,
            flop / c / 1e9
        ),
        Err(e) => println!("conv: {e}"),
    }
    match time(CONV_GEMM, "g", &[data(&[b, co, ci * 9], 11), data(&[b, ci * 9, hw * hw], 12)], 3) {
        Ok((g, _)) => println!("  its GEMM alone: gpu {:.1} ms ({:.2} GFLOP/s)", g * 1e3, flop / g / 1e9),
        Err(e) => println!("conv gemm: {e}"),
    }
    // Fixed cost of a call: one fused kernel over few or many elements.
    let ew = "def f(x: tensor[n, f32]) -> tensor[n, f32] = tanh(x) * 2.0 + 1.0";
    for n in [16usize, 1 << 20] {
        match time(ew, "f", &[data(&[n], 8)], 10) {
            Ok((g, c)) => {
                println!("elementwise tanh(x) * 2 + 1 over {n}: gpu {:.3} ms, cpu {:.3} ms", g * 1e3, c * 1e3)
            }
            Err(e) => println!("elementwise: {e}"),
        }
    }
    let (d, h, c, n) = (64, 256, 10, 256);
    let ins = [data(&[d, h], 3), data(&[h], 4), data(&[h, c], 5), data(&[n, d], 6), data(&[n, c], 7)];
    match time(MLP, "step", &ins, 10) {
        Ok((g, cpu)) => {
            println!("mlp step (d {d}, h {h}, c {c}, batch {n}): gpu {:.2} ms, cpu {:.2} ms", g * 1e3, cpu * 1e3)
        }
        Err(e) => println!("mlp step: {e}"),
    }
}
