//! f16 on the device: a storage type (its bits in the low half of a `u32`
//! per element) converted exactly to f32 and rounded back once to nearest
//! even in integer arithmetic, so conversions give the CPU's bits on every
//! adapter (no `shader-f16` feature needed), and programs computing on
//! f16 (each op in f32, rounded per op: `opt::widen_f16`) run wholly on
//! the device.

use crate::{func, gpu, same_bits_on_device};
use graft_core::half::f16;
use graft_core::{Builder, DType, Executable, Tensor, TensorType};
use graft_gpu::GpuExecutable;

fn one_convert(from: TensorType, to: DType) -> graft_core::Func {
    let mut b = Builder::new("convert");
    let x = b.param(from);
    let y = b.convert(x, to).expect("converts");
    b.finish(&[y]).expect("builds")
}

#[test]
fn every_f16_converts_to_f32_i32_and_bool_as_on_the_cpu() {
    let all: Vec<f16> = (0..=u16::MAX).map(f16::from_bits).collect();
    let x = Tensor::from_vec(vec![all.len()], all).unwrap();
    for to in [DType::F32, DType::I32, DType::Bool, DType::F16] {
        same_bits_on_device(one_convert(x.ty(), to), &[&x]);
    }
}

/// f32 values where rounding to f16 is delicate: every f16 value, the
/// midpoints between neighbours (ties, to even) and the f32 values just
/// either side of them, across the subnormal, normal and overflow ranges
/// (65 504 is the largest f16, 65 520 the first value that rounds to inf),
/// signed zeros, infinities, NaNs, f32 subnormals, and random bit patterns.
fn delicate_f32s() -> Vec<f32> {
    let mut v = Vec::new();
    for h in 0..0x7c00u16 {
        let a = f16::from_bits(h).to_f64();
        let b = f16::from_bits(h + 1).to_f64();
        let mid = ((a + b) / 2.0) as f32; // exact: 12 significant bits
        for x in [a as f32, mid, f32::from_bits(mid.to_bits() - 1), f32::from_bits(mid.to_bits() + 1)] {
            v.push(x);
            v.push(-x);
        }
    }
    v.extend([65504.0, 65519.996, 65520.0, 65536.0, 1e6, f32::MAX, f32::INFINITY, f32::NEG_INFINITY]);
    v.extend([0.0, -0.0, f32::NAN, -f32::NAN, f32::from_bits(0x7f80_0001), f32::from_bits(0xffc1_2345)]);
    v.extend([f32::from_bits(1), f32::from_bits(0x007f_ffff), f32::MIN_POSITIVE, 2.0f32.powi(-25), 2.0f32.powi(-24)]);
    let mut s = 0x9e37_79b9u32;
    for _ in 0..100_000 {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        v.push(f32::from_bits(s));
    }
    v
}

#[test]
fn f32_rounds_to_f16_as_on_the_cpu() {
    let v = delicate_f32s();
    let x = Tensor::from_vec(vec![v.len()], v).unwrap();
    same_bits_on_device(one_convert(x.ty(), DType::F16), &[&x]);
}

#[test]
fn integers_and_bools_convert_to_f16_as_on_the_cpu() {
    let mut ints: Vec<i32> = (-70_000..70_000).step_by(7).collect();
    ints.extend([i32::MIN, i32::MAX, 1 << 24, (1 << 24) + 1, 65504, 65519, 65520, -65520, 2049, 2051, 4097]);
    let x = Tensor::from_vec(vec![ints.len()], ints).unwrap();
    same_bits_on_device(one_convert(x.ty(), DType::F16), &[&x]);
    let bools = Tensor::from_vec(vec![4], vec![true, false, false, true]).unwrap();
    same_bits_on_device(one_convert(bools.ty(), DType::F16), &[&bools]);
}

const NET: &str = "
def f(x: tensor[b, n, f16], w: tensor[n, m, f16], c: tensor[m, f16]) -> tensor[b, m, f16] =
  tanh(x @ w + c) * cast(0.5, f16)
def loss(x: tensor[b, n, f16], w: tensor[n, m, f16], c: tensor[m, f16]) -> f16 = sum(f(x, w, c) * f(x, w, c))
def g(x: tensor[b, n, f16], w: tensor[n, m, f16], c: tensor[m, f16]) -> tensor[n, m, f16] =
  grad(fn (a) -> loss(x, a, c))(w)
def u(k: tensor[2, i32]) -> tensor[1000, f16] = uniform(k, (1000,), dtype=\"f16\")
";

/// f16 values uniform in [-1, 1), deterministic.
fn f16s(shape: &[usize], seed: u32) -> Tensor {
    let n: usize = shape.iter().product();
    let mut s = seed.wrapping_mul(2_654_435_761).max(1);
    let v: Vec<f16> = (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            graft_core::dtype::f16_from_f64((s >> 8) as f64 / (1u64 << 23) as f64 - 1.0)
        })
        .collect();
    Tensor::from_vec(shape.to_vec(), v).unwrap()
}

/// A dense layer, its loss and the loss's gradient on f16, and an f16
/// uniform draw, all on the device: within two f16 ulps of the CPU (the
/// device's `tanh` and summation order differ from the CPU's in f32, and
/// each result is rounded to f16 once), the draw bit for bit.
#[test]
fn f16_programs_and_their_gradients_run_on_the_device() {
    let Some(g) = gpu() else { return };
    let (x, w, c) = (f16s(&[8, 32], 1), f16s(&[32, 16], 2), f16s(&[16], 3));
    for entry in ["f", "loss", "g"] {
        let types: Vec<TensorType> = [&x, &w, &c].iter().map(|t| t.ty()).collect();
        let fun = func(NET, entry, &types);
        let exe = GpuExecutable::with_gpu(g.clone(), fun.clone()).expect("plans for the GPU");
        assert!(exe.host_steps().is_empty(), "{entry} runs on the device:\n{}", exe.describe());
        let got = exe.run(&[&x, &w, &c]).expect("gpu runs");
        let want = Executable::new(fun).expect("plans").run(&[&x, &w, &c]).expect("cpu runs");
        for (a, b) in got.iter().zip(&want) {
            assert_eq!(a.ty(), b.ty());
            for (j, (p, q)) in a.to_vec::<f16>().unwrap().iter().zip(b.to_vec::<f16>().unwrap()).enumerate() {
                let ulp = (f16::from_bits(q.to_bits() | 1).to_f64() - f16::from_bits(q.to_bits() & !1).to_f64()).abs();
                let (p, q) = (p.to_f64(), q.to_f64());
                assert!((p - q).abs() <= 2.0 * ulp.max(6e-8), "{entry} element {j}: gpu {p} vs cpu {q}");
            }
        }
    }
    let key = Tensor::from_vec(vec![2], vec![3i32, 5]).unwrap();
    let fun = func(NET, "u", &[key.ty()]);
    same_bits_on_device((*fun).clone(), &[&key]);
}

/// NaN is unequal to everything and converts to `true`, on the device as
/// on the CPU (a device compiler's ordered `!=` would say false).
#[test]
fn nan_compares_unequal_and_converts_to_true() {
    let src = "
def f(x: tensor[n, f32], y: tensor[n, f32]) -> (tensor[n, bool], tensor[n, bool], tensor[n, bool], tensor[n, bool]) =
  (x != y, x == y, cast(x, bool), cast(cast(x, f16), bool))
";
    let x = Tensor::from_vec(vec![6], vec![f32::NAN, 1.0, 0.0, -0.0, f32::NAN, 2.0]).unwrap();
    let y = Tensor::from_vec(vec![6], vec![f32::NAN, f32::NAN, 0.0, 0.0, 1.0, 2.0]).unwrap();
    let fun = func(src, "f", &[x.ty(), y.ty()]);
    same_bits_on_device((*fun).clone(), &[&x, &y]);
}
