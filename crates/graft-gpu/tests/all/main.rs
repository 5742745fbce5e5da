//! GPU tests: every program runs on the GPU and on the CPU interpreter and
//! the results are compared numerically.
//!
//! Without an adapter each test prints "skipped: no GPU adapter" and
//! passes; with `GRAFT_REQUIRE_GPU=1` the absence of an adapter fails it
//! (CI installs Mesa's lavapipe and sets it).
//!
//! Tolerances: `|gpu - cpu| <= ATOL * scale + RTOL * |cpu|` elementwise
//! with `RTOL = 1e-4`, `ATOL = 1e-5` for f32, where `scale` is the largest
//! magnitude in that result (at least 1): the device's transcendental
//! functions may differ from the CPU's by a few ulp and `erf` is a
//! rational approximation of absolute error below 2e-7 (relative terms),
//! while reductions and the GEMM sum in another order, which loses
//! precision relative to the summands, not to a result that cancels (the
//! scaled absolute term). Integers and bools exactly; NaN matches NaN.

use graft_core::kernel::render_wgsl::render_wgsl;
use graft_core::kernel::{Access, Arg, Index, Inst, Kernel};
use graft_core::ops::unary::Unary;
use graft_core::{DType, Executable, Tensor, TensorType};
use graft_gpu::{Device, GpuError, GpuExecutable, Runner};
use std::sync::Arc;

mod f16;
mod u32;

/// Bits with every NaN as one value (payloads may differ between the
/// CPU's conversions and the device's).
pub(crate) fn canon(t: &Tensor) -> Vec<u64> {
    match t.dtype() {
        DType::F32 => {
            t.to_vec::<f32>().unwrap().iter().map(|x| if x.is_nan() { u64::MAX } else { x.to_bits() as u64 }).collect()
        }
        DType::F16 => t
            .to_vec::<graft_core::half::f16>()
            .unwrap()
            .iter()
            .map(|h| if h.is_nan() { u64::MAX } else { h.to_bits() as u64 })
            .collect(),
        DType::I32 => t.to_vec::<i32>().unwrap().iter().map(|&x| x as u32 as u64).collect(),
        DType::U32 => t.to_vec::<u32>().unwrap().iter().map(|&x| x as u64).collect(),
        DType::Bool => t.to_vec::<bool>().unwrap().iter().map(|&x| x as u64).collect(),
        d => panic!("no comparison for {d}"),
    }
}

/// Runs `f` on the device (asserting nothing runs on the host) and on the
/// CPU, and asserts the same bits, NaN payloads aside (the f16 and u32
/// tests).
pub(crate) fn same_bits_on_device(f: graft_core::Func, inputs: &[&Tensor]) {
    let Some(g) = gpu() else { return };
    let f = Arc::new(f);
    let exe = GpuExecutable::with_gpu(g, f.clone()).expect("plans for the GPU");
    assert!(exe.host_steps().is_empty(), "everything runs on the device:\n{}", exe.describe());
    let got = exe.run(inputs).expect("gpu runs");
    let want = Executable::new(f).expect("plans").run(inputs).expect("cpu runs");
    assert_eq!(got.len(), want.len());
    for (i, (a, b)) in got.iter().zip(&want).enumerate() {
        assert_eq!(a.ty(), b.ty(), "result {i}");
        let (x, y) = (canon(a), canon(b));
        if let Some(j) = x.iter().zip(&y).position(|(p, q)| p != q) {
            panic!("result {i} element {j}: gpu {:#x} vs cpu {:#x}", x[j], y[j]);
        }
    }
}

const RTOL: f64 = 1e-4;
const ATOL: f64 = 1e-5;

/// The process's GPU, or `None` after printing why the test is skipped.
/// With `GRAFT_REQUIRE_GPU=1`, no adapter is a failure.
fn gpu() -> Option<Arc<graft_gpu::Gpu>> {
    match graft_gpu::global() {
        Ok(g) => Some(g),
        Err(e) => {
            let require = std::env::var("GRAFT_REQUIRE_GPU").is_ok_and(|v| v == "1");
            assert!(!require, "GRAFT_REQUIRE_GPU=1 but {e}");
            skipped(&e.to_string());
            None
        }
    }
}

/// Says a test was skipped, on the real stderr (the test harness captures
/// `eprintln!` of passing tests, and a skip must be seen).
fn skipped(why: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "skipped: {why}");
}

fn func(src: &str, entry: &str, types: &[TensorType]) -> Arc<graft_core::Func> {
    let m = graft_lang::Module::from_source("test.graft", src).unwrap_or_else(|d| panic!("{d:?}"));
    m.instantiate(entry, types).unwrap_or_else(|d| panic!("{d:?}")).func
}

fn f32s(shape: &[usize], seed: u64) -> Tensor {
    // A small deterministic generator: values in [-2, 2).
    let n: usize = shape.iter().product();
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    let v: Vec<f32> = (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 40) as f64 / (1u64 << 24) as f64 * 4.0 - 2.0) as f32
        })
        .collect();
    Tensor::from_vec(shape.to_vec(), v).expect("shape matches")
}

fn ty(shape: &[usize]) -> TensorType {
    TensorType::new(DType::F32, shape.to_vec())
}

/// Asserts `gpu` agrees with `cpu` within the tolerances above.
fn assert_close(what: &str, gpu: &[Tensor], cpu: &[Tensor]) {
    assert_eq!(gpu.len(), cpu.len(), "{what}: result count");
    for (i, (g, c)) in gpu.iter().zip(cpu).enumerate() {
        assert_eq!(g.dtype(), c.dtype(), "{what}: result {i} dtype");
        assert_eq!(g.shape(), c.shape(), "{what}: result {i} shape");
        let (gv, cv) = (g.to_f64_vec(), c.to_f64_vec());
        let scale = cv.iter().filter(|x| x.is_finite()).fold(1.0f64, |m, x| m.max(x.abs()));
        for (j, (&a, &b)) in gv.iter().zip(&cv).enumerate() {
            let ok = if c.dtype() == DType::F32 {
                (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= ATOL * scale + RTOL * b.abs()
            } else {
                a == b
            };
            assert!(ok, "{what}: result {i} element {j}: gpu {a} vs cpu {b}");
        }
    }
}

/// Runs `entry` of `src` on both devices and compares. Returns the GPU
/// executable for further checks.
fn both(src: &str, entry: &str, inputs: &[Tensor]) -> Option<GpuExecutable> {
    let g = gpu()?;
    let types: Vec<TensorType> = inputs.iter().map(|t| t.ty()).collect();
    let f = func(src, entry, &types);
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let cpu = Executable::new(f.clone()).expect("plans").run(&refs).expect("cpu runs");
    let exe = GpuExecutable::with_gpu(g, f).expect("plans for the GPU");
    let out = exe.run(&refs).expect("gpu runs");
    assert_close(entry, &out, &cpu);
    Some(exe)
}

const ELEMENTWISE: &str = "
def f(x: tensor[n, m, f32], y: tensor[n, m, f32]) -> tensor[n, m, f32] =
  exp(x) * sin(y) + tanh(x - y) / (1.0 + abs(y)) - sqrt(abs(x)) + log(1.0 + x * x)
def g(x: tensor[n, f32]) -> tensor[n, f32] {
  let a = expm1(x * 0.001) + log1p(x * 0.001) + erf(x) + logistic(x) + floor(x) + ceil(x) + round(x * 3.0)
  let b = cos(x) + maximum(x, 0.5) + minimum(x, -0.5) + rsqrt(abs(x) + 1.0) + tan(x * 0.5) + sign(x) + fma(x, x, 0.25)
  a + b - x * 0.75
}
def h(x: tensor[n, f32]) -> tensor[n, f32] = where(x > 0.0, x, 0.1 * x)
def i(x: tensor[n, f32]) -> tensor[n, i32] = cast(x * 10.0, i32) // 3 + cast(x > 0.0, i32)
def gradf(x: tensor[n, m, f32], y: tensor[n, m, f32]) -> tensor[n, m, f32] =
  grad(fn (a) -> sum(f(a, y)))(x)
def vmapg(x: tensor[b, n, f32]) -> tensor[b, n, f32] = vmap(g)(x)
";

#[test]
fn elementwise_forward() {
    both(ELEMENTWISE, "f", &[f32s(&[37, 53], 1), f32s(&[37, 53], 2)]);
    both(ELEMENTWISE, "g", &[f32s(&[1000], 3)]);
    both(ELEMENTWISE, "h", &[f32s(&[777], 4)]);
    both(ELEMENTWISE, "i", &[f32s(&[300], 5)]);
}

#[test]
fn elementwise_grad_and_vmap() {
    both(ELEMENTWISE, "gradf", &[f32s(&[37, 53], 6), f32s(&[37, 53], 7)]);
    both(ELEMENTWISE, "vmapg", &[f32s(&[5, 200], 8)]);
}

/// `erf_inv` (not a language builtin; built directly): on the device it is
/// Giles' polynomial over the device's `log1p`, on the CPU XLA's exact
/// rounding, so the two agree within the tolerances above; `±1` give
/// `±inf` and `|x| > 1` NaN on both.
#[test]
fn erf_inv_forward() {
    let Some(g) = gpu() else { return };
    let mut b = graft_core::Builder::new("erf_inv");
    let x = b.param(ty(&[1003]));
    let y = graft_core::composite::math::erf_inv(&mut b, x).expect("erf_inv");
    // Two exact negations: an elementwise chain, so a fused device kernel.
    let y = b.neg(y).expect("neg");
    let y = b.neg(y).expect("neg");
    let f = Arc::new(b.finish(&[y]).expect("a function"));
    // [-2, 2) scaled into (-1, 1), plus the edges.
    let mut v = f32s(&[1000], 9).to_f64_vec().iter().map(|&x| (x * 0.4999) as f32).collect::<Vec<_>>();
    v.extend([1.0, -1.0, 1.5]);
    let xt = Tensor::from_vec(vec![1003], v).expect("shape matches");
    let cpu = Executable::new(f.clone()).expect("plans").run(&[&xt]).expect("cpu runs");
    let out = GpuExecutable::with_gpu(g, f).expect("plans for the GPU").run(&[&xt]).expect("gpu runs");
    assert_close("erf_inv", &out, &cpu);
}

const LAYOUT: &str = "
def t(x: tensor[n, m, f32]) -> tensor[m, n, f32] = transpose(x) * 2.0
def b(x: tensor[n, f32], y: tensor[m, n, f32]) -> tensor[m, n, f32] = x + y
def s(x: tensor[n, m, f32]) -> tensor[n, m, f32] = concat((x[:, 1:], x[:, :1]), 1) - x
def p(x: tensor[n, f32]) -> tensor[n, f32] = flip(x, 0) * x
";

#[test]
fn layout_forward() {
    both(LAYOUT, "t", &[f32s(&[30, 70], 9)]);
    both(LAYOUT, "b", &[f32s(&[70], 10), f32s(&[30, 70], 11)]);
    both(LAYOUT, "s", &[f32s(&[30, 70], 12)]);
    both(LAYOUT, "p", &[f32s(&[513], 13)]);
}

const REDUCE: &str = "
def s(x: tensor[n, m, f32]) -> (tensor[n, f32], tensor[m, f32], f32, tensor[n, f32]) =
  (sum(x, 1), max(x, 0), sum(x * x), min(x, 1))
def sm(x: tensor[n, m, f32]) -> tensor[n, m, f32] = softmax(x, 1)
def ln(x: tensor[n, m, f32]) -> tensor[n, m, f32] {
  let mu = mean(x, 1, keepdims=true)
  let v = mean((x - mu) * (x - mu), 1, keepdims=true)
  (x - mu) / sqrt(v + 1e-5)
}
def gsm(x: tensor[n, m, f32]) -> tensor[n, m, f32] = grad(fn (a) -> sum(softmax(a, 1) * a))(x)
def vsm(x: tensor[b, n, m, f32]) -> tensor[b, n, m, f32] = vmap(fn (a) -> softmax(a, 1))(x)
";

#[test]
fn reductions_forward() {
    both(REDUCE, "s", &[f32s(&[33, 300], 14)]);
    both(REDUCE, "sm", &[f32s(&[64, 1000], 15)]);
    both(REDUCE, "ln", &[f32s(&[17, 129], 16)]);
}

#[test]
fn reductions_grad_and_vmap() {
    both(REDUCE, "gsm", &[f32s(&[20, 50], 17)]);
    both(REDUCE, "vsm", &[f32s(&[3, 20, 50], 18)]);
}

const MATMUL: &str = "
def mm(a: tensor[m, k, f32], b: tensor[k, n, f32]) -> tensor[m, n, f32] = a @ b
def mlp(w1: tensor[d, h, f32], w2: tensor[h, c, f32], x: tensor[b, d, f32]) -> f32 =
  sum(tanh(x @ w1) @ w2)
def gmlp(w1: tensor[d, h, f32], w2: tensor[h, c, f32], x: tensor[b, d, f32]) -> (tensor[d, h, f32], tensor[h, c, f32]) =
  grad(mlp, wrt=(w1, w2))(w1, w2, x)
def vmm(a: tensor[b, m, k, f32], v: tensor[b, k, f32]) -> tensor[b, m, f32] = vmap(fn (x, y) -> x @ y)(a, v)
";

#[test]
fn matmul_forward() {
    let exe = both(MATMUL, "mm", &[f32s(&[65, 33], 19), f32s(&[33, 130], 20)]);
    if let Some(exe) = exe {
        assert_eq!(exe.step_counts().1, 0, "a matmul runs wholly on the device:\n{}", exe.describe());
    }
}

#[test]
fn matmul_grad_and_vmap() {
    both(MATMUL, "gmlp", &[f32s(&[20, 40], 21), f32s(&[40, 10], 22), f32s(&[50, 20], 23)]);
    both(MATMUL, "vmm", &[f32s(&[4, 30, 20], 24), f32s(&[4, 20], 25)]);
}

/// Two f32 operands for a binary op: every pair of signed zeros, ones,
/// twos, a half, -3, 2.5, infinities and NaN, then data (the second
/// operand small integers at every other place).
fn special_pairs(seed: u64) -> [Tensor; 2] {
    let specials = [0.0f32, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -3.0, 2.5, f32::INFINITY, f32::NEG_INFINITY, f32::NAN];
    let k = specials.len();
    let mut xs: Vec<f32> = (0..k * k).map(|i| specials[i / k]).collect();
    let mut ys: Vec<f32> = (0..k * k).map(|i| specials[i % k]).collect();
    let data = f32s(&[200], seed).to_vec::<f32>().expect("f32");
    for (i, &v) in data.iter().enumerate() {
        xs.push(v * 3.0);
        ys.push(if i % 2 == 0 { (i % 9) as f32 - 4.0 } else { v });
    }
    let n = xs.len();
    [Tensor::from_vec(vec![n], xs).expect("shape matches"), Tensor::from_vec(vec![n], ys).expect("shape matches")]
}

/// f32 `pow` runs on the device (`g_pow`: C's special cases around
/// `exp2(y log2|x|)`): negative bases with integer and fractional
/// exponents, zeros, ones, infinities and NaN against the CPU, and the
/// gradient (which reads `pow` and `log`) of a smooth use.
#[test]
fn pow_runs_on_the_device() {
    let src = "
def f(x: tensor[n, f32], y: tensor[n, f32]) -> tensor[n, f32] = pow(x, y) + pow(abs(x) + 0.5, 1.5)
def g(x: tensor[n, f32]) -> tensor[n, f32] = grad(fn (a) -> sum(pow(abs(a) + 1.0, 2.5) + pow(2.0, a)))(x)
";
    if let Some(exe) = both(src, "f", &special_pairs(61)) {
        assert!(exe.host_steps().is_empty(), "pow on the device: {:?}", exe.host_steps());
    }
    if let Some(exe) = both(src, "g", &[f32s(&[300], 62)]) {
        assert!(exe.host_steps().is_empty(), "pow's gradient on the device: {:?}", exe.host_steps());
    }
}

/// f32 `atan2` (the WGSL `g_atan2`, C's special cases around a series)
/// on the device: the grid of signed zeros, infinities, NaN and finite
/// values in both operand orders, data, and a gradient through it.
#[test]
fn atan2_runs_on_the_device() {
    let src = "
def f(y: tensor[n, f32], x: tensor[n, f32]) -> tensor[n, f32] = atan2(y, x) + atan2(x, abs(y) + 0.5)
def g(x: tensor[n, f32]) -> tensor[n, f32] = grad(fn (a) -> sum(atan2(a, abs(a) + 1.0) * a))(x)
";
    if let Some(exe) = both(src, "f", &special_pairs(63)) {
        assert!(exe.host_steps().is_empty(), "atan2 on the device: {:?}", exe.host_steps());
    }
    if let Some(exe) = both(src, "g", &[f32s(&[300], 64)]) {
        assert!(exe.host_steps().is_empty(), "atan2's gradient on the device: {:?}", exe.host_steps());
    }
}

#[test]
fn host_fallback_is_listed_and_correct() {
    // Decompositions have no GPU kernel: a Cholesky factor runs on the host
    // between device steps (the identity it adds is built on the device
    // from i32 ramps).
    let src = "def f(x: tensor[n, m, f32]) -> tensor[n, n, f32] =
  cholesky(x @ transpose(x) + eye(size(x, 0))) * sum(x, 1, keepdims=true)";
    if let Some(exe) = both(src, "f", &[f32s(&[10, 20], 26)]) {
        let host = exe.host_steps();
        assert!(host.iter().any(|(p, _)| p.contains("cholesky")), "cholesky is listed as a host step: {host:?}");
        assert!(!host.iter().any(|(p, _)| p.contains("iota")), "eye's ramps on the device: {host:?}");
        let g = graft_gpu::global().expect("adapter");
        let x = f32s(&[10, 20], 26);
        let (_, stats) = exe.run_with_stats(&[&x]).expect("runs");
        // x goes up for the device's product and comes down for the host's factor.
        assert!(
            stats.uploads >= 1 && stats.downloads >= 1 && stats.host_eqns >= 1,
            "transfers counted: {stats:?} on {}",
            g.describe()
        );
    }
}

/// Slices and updates at run-time starts (clamped into the operand, as on
/// the CPU) run on the device, forward, through their gradients (each the
/// other) and under vmap (a gather and a scatter-add there), and inside a
/// loop that indexes by its counter.
#[test]
fn dynamic_slices_run_on_the_device() {
    let src = "
def f(x: tensor[n, m, f32], i: i32, j: i32) -> tensor[n, m, f32] {
  let s = dynamic_slice(x * sum(x, 1, keepdims=true), (i, j), (4, 3))
  dynamic_update_slice(x, exp(s), (j, i))
}
def g(x: tensor[n, m, f32], i: i32) -> tensor[n, m, f32] =
  grad(fn (a) -> sum(dynamic_slice(a * a, (i, 2), (3, 5)) * dynamic_slice(a, (i + 1, 0), (3, 5))))(x)
def v(x: tensor[b, n, m, f32], i: i32) -> tensor[b, 2, 3, f32] =
  vmap(fn (xi) -> dynamic_slice(xi, (i, i), (2, 3)) * 2.0)(x)
def l(x: tensor[n, m, f32]) -> tensor[m, f32] =
  fori(size(x, 0), fn (k, acc) -> acc + x[k] * cast(k, f32), zeros((size(x, 1),)))
";
    let scalar = |v: i32| Tensor::from_vec(vec![], vec![v]).expect("a scalar");
    // Starts inside, past the end (clamped) and negative (clamped to 0).
    for (i, j) in [(2, 1), (9, 30), (-4, 0)] {
        if let Some(exe) = both(src, "f", &[f32s(&[10, 8], 70), scalar(i), scalar(j)]) {
            assert!(exe.host_steps().is_empty(), "dynamic slices on the device: {:?}", exe.host_steps());
        }
        if let Some(exe) = both(src, "g", &[f32s(&[10, 8], 71), scalar(i)]) {
            assert!(exe.host_steps().is_empty(), "their gradients on the device: {:?}", exe.host_steps());
        }
        if let Some(exe) = both(src, "v", &[f32s(&[3, 10, 8], 72), scalar(i)]) {
            assert!(exe.host_steps().is_empty(), "under vmap on the device: {:?}", exe.host_steps());
        }
    }
    if let Some(exe) = both(src, "l", &[f32s(&[6, 5], 73)]) {
        assert!(exe.host_steps().is_empty(), "a loop indexing by its counter on the device: {:?}", exe.host_steps());
    }
}

const FAMILIES: &str = "
def net(w: tensor[4, 2, 3, 3, f32], e: tensor[10, 6, f32], x: tensor[2, 2, 8, 8, f32], idx: tensor[5, i32]) -> f32 {
  let h = max_pool2d(relu(conv2d(x, w, padding=1)), 2)
  let t = take(e, idx)
  let c = cumsum(t, axis=1)
  sum(h * h) + sum(sort(c, axis=1) * t) + sum(cholesky(t @ transpose(t) + eye(5)) * (t @ transpose(t)))
}
def gnet(w: tensor[4, 2, 3, 3, f32], e: tensor[10, 6, f32], x: tensor[2, 2, 8, 8, f32], idx: tensor[5, i32])
    -> (tensor[4, 2, 3, 3, f32], tensor[10, 6, f32]) =
  grad(net, wrt=(w, e))(w, e, x, idx)
def vnet(w: tensor[4, 2, 3, 3, f32], e: tensor[10, 6, f32], x: tensor[3, 2, 2, 8, 8, f32], idx: tensor[5, i32])
    -> tensor[3, f32] =
  vmap(fn (xi) -> net(w, e, xi, idx))(x)
";

#[test]
fn host_families_forward_grad_vmap() {
    // Cholesky has no GPU kernel: it runs on the host between device steps,
    // and the results still agree (its factor times `t t^T`, so that the
    // gradient needs it too, through host triangular solves). The
    // convolution, the pooling window, the
    // gather (take), the cumsum, the sort and their gradients (a scatter-add
    // for the gather and the max pooling, a reverse cumsum) run on the
    // device.
    let idx = Tensor::from_vec(vec![5], vec![3i32, 0, 9, 3, 7]).expect("shape matches");
    let (w, e) = (f32s(&[4, 2, 3, 3], 35), f32s(&[10, 6], 36));
    let on_host = |exe: &GpuExecutable| {
        let host = exe.host_steps();
        assert!(host.iter().any(|(p, _)| p.contains("cholesky")), "cholesky on the host: {host:?}");
        assert!(!host.iter().any(|(p, _)| p.contains("cumsum")), "cumsum on the device: {host:?}");
        assert!(conv_pool_host_steps(exe).is_empty(), "{}", exe.describe());
        assert!(exe.step_counts().0 > 0, "{}", exe.describe());
    };
    if let Some(exe) = both(FAMILIES, "net", &[w.clone(), e.clone(), f32s(&[2, 2, 8, 8], 37), idx.clone()]) {
        on_host(&exe);
        assert!(!exe.host_steps().iter().any(|(p, _)| p.contains("sort")), "{:?}", exe.host_steps());
    }
    if let Some(exe) = both(FAMILIES, "gnet", &[w.clone(), e.clone(), f32s(&[2, 2, 8, 8], 38), idx.clone()]) {
        on_host(&exe);
    }
    if let Some(exe) = both(FAMILIES, "vnet", &[w, e, f32s(&[3, 2, 2, 8, 8], 39), idx]) {
        on_host(&exe);
    }
}

#[test]
fn f64_is_rejected_with_its_name_and_line() {
    let Some(g) = gpu() else { return };
    let src = "def f(x: tensor[n, f32]) -> tensor[n, f64] =\n  cast(x, f64) * 2.0";
    let f = func(src, "f", &[ty(&[4])]);
    let err = GpuExecutable::with_gpu(g, f.clone()).expect_err("f64 has no GPU form");
    let msg = err.to_string();
    assert!(matches!(err, GpuError::Wide(_)), "{msg}");
    assert!(msg.contains("f64") && msg.contains("convert") && msg.contains("test.graft:2"), "{msg}");
    // auto runs it on the CPU and says why.
    let (runner, note) = Runner::new(f, Device::Auto).expect("plans");
    assert_eq!(runner.device_name(), "cpu");
    let note = note.expect("a note says why");
    assert!(note.contains("f64"), "{note}");
    let out = runner.run(&[&f32s(&[4], 27)]).expect("runs on the CPU");
    assert_eq!(out[0].dtype(), DType::F64);
}

#[test]
fn device_choice() {
    assert_eq!(Device::parse("gpu").ok(), Some(Device::Gpu));
    assert_eq!(Device::parse(" cpu ").ok(), Some(Device::Cpu));
    assert!(matches!(Device::parse("tpu"), Err(GpuError::UnknownDevice(_))));
    let f = func(ELEMENTWISE, "h", &[ty(&[8])]);
    let (runner, note) = Runner::new(f, Device::Auto).expect("plans");
    match graft_gpu::global() {
        Ok(_) => assert_eq!((runner.device_name(), note), ("gpu", None)),
        Err(_) => {
            skipped("no GPU adapter (the GPU half of device_choice)");
            assert_eq!(runner.device_name(), "cpu");
            assert!(note.is_some_and(|n| n.contains("no GPU adapter")));
        }
    }
}

const TRAIN: &str = "
def loss(w: tensor[d, c, f32], b: tensor[c, f32], x: tensor[n, d, f32], y: tensor[n, c, f32]) -> f32 {
  let e = tanh(x @ w + b) - y
  mean(e * e)
}
def step(w: tensor[d, c, f32], b: tensor[c, f32], x: tensor[n, d, f32], y: tensor[n, c, f32])
    -> (tensor[d, c, f32], tensor[c, f32], f32) {
  let (l, (gw, gb)) = value_and_grad(loss, wrt=(w, b))(w, b, x, y)
  (w - 0.5 * gw, b - 0.5 * gb, l)
}
";

#[test]
fn resident_training_loop() {
    // Parameters stay on the device across calls: each step's results are
    // the next step's inputs without a round trip through the host.
    let Some(g) = gpu() else { return };
    let (w, b, x, y) = (f32s(&[16, 4], 31), f32s(&[4], 32), f32s(&[64, 16], 33), f32s(&[64, 4], 34));
    let f = func(TRAIN, "step", &[w.ty(), b.ty(), x.ty(), y.ty()]);
    let cpu_exe = Executable::new(f.clone()).expect("plans");
    let exe = GpuExecutable::with_gpu(g, f).expect("plans for the GPU");
    let (mut cw, mut cb) = (w.clone(), b.clone());
    let mut closs = Vec::new();
    for _ in 0..5 {
        let out = cpu_exe.run(&[&cw, &cb, &x, &y]).expect("cpu runs");
        closs.push(out[2].clone());
        (cw, cb) = (out[0].clone(), out[1].clone());
    }
    let (mut gw, mut gb) = (exe.to_device(&w).expect("uploads"), exe.to_device(&b).expect("uploads"));
    let (gx, gy) = (exe.to_device(&x).expect("uploads"), exe.to_device(&y).expect("uploads"));
    let mut gloss = Vec::new();
    for _ in 0..5 {
        let (out, stats) = exe.run_resident(&[&gw, &gb, &gx, &gy]).expect("gpu runs");
        assert_eq!((stats.uploads, stats.downloads), (0, 0), "a step moves nothing: {stats:?}\n{}", exe.describe());
        gloss.push(out[2].clone());
        (gw, gb) = (out[0].clone(), out[1].clone());
    }
    let host = exe.to_host(&[&gw, &gb]).expect("downloads");
    assert_close("trained parameters", &host, &[cw, cb]);
    let gl: Vec<&graft_gpu::DeviceTensor> = gloss.iter().collect();
    assert_close("losses", &exe.to_host(&gl).expect("downloads"), &closs);
}

#[test]
fn rust_api_traced_grad() {
    // The Rust front end: a traced closure, its gradient taken by the
    // transform, the compiled function run on the GPU through `Runner`.
    let Some(_) = gpu() else { return };
    let f = graft::jit("f", |x| (x.sin() * x).sum(()));
    let df = f.grad(graft::Wrt::All);
    let x = f32s(&[1000], 30);
    let c = df.compiled(&[x.ty()]).expect("compiles");
    let cpu = c.call(&[&x]).expect("cpu runs");
    let (runner, note) = Runner::new(c.func().clone(), Device::Gpu).expect("plans for the GPU");
    assert_eq!((runner.device_name(), note), ("gpu", None));
    let out = runner.run(&[&x]).expect("gpu runs");
    assert_close("grad of a traced closure", &out, &cpu);
}

#[test]
fn wgsl_golden() {
    // One elementwise kernel with a strided (transposing) load: its WGSL
    // is stable text (a change here is a change of the renderer's output).
    let k = Kernel {
        name: "k0".into(),
        args: vec![
            Arg { dtype: DType::F32, len: 6, access: Access::Read },
            Arg { dtype: DType::F32, len: 6, access: Access::Write },
        ],
        extent: 6,
        body: vec![
            Inst::Load { arg: 0, index: Index::Strided { dims: vec![3, 2], strides: vec![1, 3], offset: 0 } },
            Inst::Unary(Unary::Exp, 0),
            Inst::Store { arg: 1, value: 1, index: Index::Point },
        ],
    };
    let w = render_wgsl(&k).expect("renders");
    let body = w.source.split("@group(0) @binding(0)").nth(1).expect("bindings follow the prelude");
    let expected = " var<storage, read> a0: array<f32>;
@group(0) @binding(1) var<storage, read_write> a1: array<f32>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let i = gid.x + gid.y * 256u;
  if (i >= 6u) { return; }
  let ii = i32(i);
  var er0: i32 = 0; { var p: i32 = ii; er0 = er0 + (p % 2) * 3; p = p / 2; er0 = er0 + p * 1; }
  let r0 = a0[er0];
  let r1 = exp(r0);
  a1[i] = r1;
}
";
    assert_eq!(body, expected);
    assert_eq!(w.workgroups, [1, 1, 1]);
    // 64-bit kernels have no WGSL form.
    let mut k64 = k.clone();
    k64.args[0].dtype = DType::F64;
    k64.args[1].dtype = DType::F64;
    assert!(render_wgsl(&k64).is_err());
}

#[test]
fn gemm_kernels_both_forms() {
    // Both GEMM kernels (workgroup-memory tiles for GPUs, direct reads for
    // CPU adapters; the executor picks one per adapter) against a naive
    // product, over ragged sizes, a batch and every operand layout.
    let Some(g) = gpu() else { return };
    let (batch, m, n, k) = (2usize, 70, 33, 45);
    for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
        let gm = graft_gpu::gemm::Gemm::plain(batch, m, n, k, ta, tb);
        let a = f32s(&[batch * m * k], 40);
        let b = f32s(&[batch * k * n], 41);
        let (av, bv) = (a.to_vec::<f32>().expect("f32"), b.to_vec::<f32>().expect("f32"));
        let mut want = vec![0f64; batch * m * n];
        for z in 0..batch {
            for i in 0..m {
                for j in 0..n {
                    let mut acc = 0f64;
                    for l in 0..k {
                        let x = if ta { av[z * m * k + l * m + i] } else { av[z * m * k + i * k + l] };
                        let y = if tb { bv[z * k * n + j * k + l] } else { bv[z * k * n + l * n + j] };
                        acc += x as f64 * y as f64;
                    }
                    want[z * m * n + i * n + j] = acc;
                }
            }
        }
        let want = Tensor::from_vec(vec![batch * m * n], want.iter().map(|&x| x as f32).collect::<Vec<f32>>())
            .expect("shape matches");
        for src in [gm.wgsl(), gm.wgsl_direct()] {
            let p = g.pipeline(&src, "gemm test").expect("compiles");
            let (da, db) = (g.upload(&a).expect("uploads"), g.upload(&b).expect("uploads"));
            let dc = g.alloc((batch * m * n * 4) as u64).expect("allocates");
            let mut enc = g.encoder();
            g.dispatch(&mut enc, &p, &[da.buffer(), db.buffer(), dc.buffer()], gm.workgroups());
            let got = g.download(enc, &[(&dc, &want.ty())]).expect("downloads");
            assert_close(&format!("gemm ta={ta} tb={tb}"), &got, std::slice::from_ref(&want));
        }
    }
}

#[test]
fn window_and_inside_kernel() {
    // A pad read in place (a window load with a fill) and an inside test,
    // straight from the kernel IR (besides pads, window loads reach the GPU
    // through pooling windows: `pooling_windows_of_every_kind`).
    let Some(g) = gpu() else { return };
    use graft_core::kernel::{Lit, Window};
    let w = Window { dims: vec![4, 5], lo: vec![1, 1], size: vec![2, 3], strides: vec![3, 1], offset: 0 };
    let k = Kernel {
        name: "pad".into(),
        args: vec![
            Arg { dtype: DType::F32, len: 6, access: Access::Read },
            Arg { dtype: DType::F32, len: 20, access: Access::Write },
            Arg { dtype: DType::Bool, len: 20, access: Access::Write },
        ],
        extent: 20,
        body: vec![
            Inst::Lit(Lit { dtype: DType::F32, bits: (-1.0f32).to_bits() as u64 }),
            Inst::Window { arg: 0, window: w.clone(), fill: 0 },
            Inst::Store { arg: 1, value: 1, index: Index::Point },
            Inst::Inside(w),
            Inst::Store { arg: 2, value: 3, index: Index::Point },
        ],
    };
    let r = render_wgsl(&k).expect("renders");
    let p = g.pipeline(&r.source, "window test").expect("compiles");
    let x = Tensor::from_vec(vec![6], vec![1f32, 2., 3., 4., 5., 6.]).expect("shape matches");
    let dx = g.upload(&x).expect("uploads");
    let (o1, o2) = (g.alloc(80).expect("allocates"), g.alloc(80).expect("allocates"));
    let mut enc = g.encoder();
    g.dispatch(&mut enc, &p, &[dx.buffer(), o1.buffer(), o2.buffer()], r.workgroups);
    let (t1, t2) = (TensorType::new(DType::F32, vec![20]), TensorType::new(DType::Bool, vec![20]));
    let got = g.download(enc, &[(&o1, &t1), (&o2, &t2)]).expect("downloads");
    let mut want = vec![-1f32; 20];
    let mut inside = vec![false; 20];
    for r in 1..3 {
        for c in 1..4 {
            want[r * 5 + c] = x.to_vec::<f32>().expect("f32")[(r - 1) * 3 + (c - 1)];
            inside[r * 5 + c] = true;
        }
    }
    assert_eq!(got[0].to_vec::<f32>().expect("f32"), want);
    assert_eq!(got[1].to_vec::<bool>().expect("bool"), inside);
}

#[test]
fn gemm_throughput() {
    // Not a benchmark gate: reports GFLOP/s of a 512^3 product (the first
    // run compiles the pipeline and is not timed) and checks the result.
    let Some(g) = gpu() else { return };
    let n = 512;
    let (a, b) = (f32s(&[n, n], 28), f32s(&[n, n], 29));
    let f = func(MATMUL, "mm", &[a.ty(), b.ty()]);
    let cpu = Executable::new(f.clone()).expect("plans").run(&[&a, &b]).expect("runs");
    let exe = GpuExecutable::with_gpu(g.clone(), f).expect("plans");
    let out = exe.run(&[&a, &b]).expect("runs");
    assert_close("gemm 512", &out, &cpu);
    let runs = 3;
    let t = std::time::Instant::now();
    for _ in 0..runs {
        exe.run(&[&a, &b]).expect("runs");
    }
    let s = t.elapsed().as_secs_f64() / runs as f64;
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "gemm {n}x{n}x{n} on {}: {:.2} GFLOP/s ({:.1} ms per call, uploads and download included)",
        g.describe(),
        2.0 * (n * n * n) as f64 / s / 1e9,
        s * 1e3
    );
}

/// Every element's bit pattern (f32 by `to_bits`, integers as they are).
fn bit_patterns(t: &Tensor) -> Vec<u64> {
    use graft_core::tensor::Storage;
    match t.storage() {
        Storage::F32(v) => v.iter().map(|x| u64::from(x.to_bits())).collect(),
        Storage::F16(v) => v.iter().map(|x| u64::from(x.to_bits())).collect(),
        Storage::I32(v) => v.iter().map(|&x| x as u32 as u64).collect(),
        Storage::Bool(v) => v.iter().map(|&x| u64::from(x)).collect(),
        Storage::F64(v) => v.iter().map(|x| x.to_bits()).collect(),
        Storage::I64(v) => v.iter().map(|&x| x as u64).collect(),
        Storage::U32(v) => v.iter().map(|&x| x as u64).collect(),
    }
}

/// Asserts bitwise equality of every result.
fn assert_same_bits(what: &str, gpu: &[Tensor], cpu: &[Tensor]) {
    assert_eq!(gpu.len(), cpu.len(), "{what}: result count");
    for (i, (g, c)) in gpu.iter().zip(cpu).enumerate() {
        assert_eq!(g.ty(), c.ty(), "{what}: result {i} type");
        let (gb, cb) = (bit_patterns(g), bit_patterns(c));
        if let Some(j) = gb.iter().zip(&cb).position(|(a, b)| a != b) {
            panic!("{what}: result {i} element {j}: gpu bits {:#x} vs cpu {:#x}", gb[j], cb[j]);
        }
    }
}

/// The four random primitives at once: bits and f32 uniforms of `shape`,
/// five child keys, and the key folded with `data` (one i32 per key).
/// `keys` is the key tensor's shape: `[2]`, or `[K..., 2]` for one key per
/// leading index.
fn random_func(keys: &[usize], shape: &[usize]) -> graft_core::Func {
    let i32t = |s: &[usize]| TensorType::new(DType::I32, s.to_vec());
    let mut b = graft_core::Builder::new("draws");
    let key = b.param(i32t(keys));
    let data = b.param(i32t(&keys[..keys.len() - 1]));
    let bits = b.random_bits(key, shape).expect("bits");
    let u = b.random_uniform(key, shape, DType::F32).expect("uniform");
    let kids = b.random_split(key, 5).expect("split");
    let folded = b.random_fold_in(key, data).expect("fold_in");
    b.finish(&[bits, u, kids, folded]).expect("builds")
}

#[test]
fn random_draws_are_the_cpus_bit_for_bit() {
    let Some(g) = gpu() else { return };
    let words = [[0, 0], [0, 42], [-1, -1], [0x1234_5678, -0x0f0f_0f10], [7, i32::MIN]];
    for (keys, shape) in [
        (vec![2], vec![1]),
        (vec![2], vec![1000]),
        (vec![2], vec![300, 257]),
        (vec![3, 2], vec![7, 11]),
        (vec![2, 2, 2], vec![513]),
    ] {
        let f = Arc::new(random_func(&keys, &shape));
        let exe = GpuExecutable::with_gpu(g.clone(), f.clone()).expect("plans for the GPU");
        let host = exe.host_steps();
        assert!(host.is_empty(), "random draws run on the device: {host:?}\n{}", exe.describe());
        let cpu = Executable::new(f).expect("plans");
        let nkeys: usize = keys[..keys.len() - 1].iter().product();
        for (s, w) in words.iter().enumerate() {
            // Key k of a batch: the words with k folded into the second.
            let key: Vec<i32> = (0..nkeys).flat_map(|k| [w[0], w[1].wrapping_add(k as i32 * 977)]).collect();
            let key = Tensor::from_vec(keys.clone(), key).expect("shape matches");
            let data: Vec<i32> = (0..nkeys).map(|k| k as i32 * 31 - 5 + s as i32).collect();
            let data = Tensor::from_vec(keys[..keys.len() - 1].to_vec(), data).expect("shape matches");
            let want = cpu.run(&[&key, &data]).expect("cpu runs");
            let got = exe.run(&[&key, &data]).expect("gpu runs");
            assert_same_bits(&format!("keys {keys:?}, shape {shape:?}, key words {w:?}"), &got, &want);
        }
    }
}

#[test]
fn dropout_style_masks_run_on_the_device() {
    // Uniforms compared with a rate and used as a mask, forward and through
    // a gradient: the draws fuse with nothing but stay on the device.
    let src = "
def f(k: tensor[2, i32], x: tensor[33, 65, f32]) -> tensor[33, 65, f32] =
  where(uniform(k, (33, 65)) < 0.25, 0.0 * x, x * 1.3333)
def gf(k: tensor[2, i32], x: tensor[33, 65, f32]) -> tensor[33, 65, f32] = grad(fn (a) -> sum(f(k, a) * a))(x)
";
    let key = Tensor::from_vec(vec![2], vec![3i32, -77]).expect("shape matches");
    for entry in ["f", "gf"] {
        if let Some(exe) = both(src, entry, &[key.clone(), f32s(&[33, 65], 61)]) {
            let host = exe.host_steps();
            assert!(host.iter().all(|(p, _)| !p.contains("random")), "{entry}: {host:?}");
        }
    }
}

#[test]
fn exhausted_device_memory_is_an_error_naming_the_kernel() {
    if gpu().is_none() {
        return;
    }
    // A device of its own, so its budget touches no other test.
    let g = Arc::new(graft_gpu::Gpu::open().expect("the adapter opens a second device"));
    // Beyond what the adapter can bind: refused before the driver sees it.
    let limit = g.limits.max_storage_buffer_binding_size.min(g.limits.max_buffer_size);
    match g.alloc(limit + 4) {
        Err(GpuError::TooLarge { bytes, limit: l, .. }) => assert!(bytes > l, "{bytes} vs {l}"),
        other => panic!("expected TooLarge, got {other:?}"),
    }
    // A program needing more than the device's memory budget: the input
    // (800 KB) fits, the fused kernel's result does not.
    let n = 200_000;
    let src = "def f(x: tensor[n, f32]) -> tensor[n, f32] = exp(x) * 2.0 + x";
    let f = func(src, "f", &[ty(&[n])]);
    let x = f32s(&[n], 71);
    let exe = GpuExecutable::with_gpu(g.clone(), f.clone()).expect("plans");
    g.set_memory_limit(Some(1 << 20));
    let err = exe.run(&[&x]).expect_err("the budget is exceeded");
    let msg = err.to_string();
    assert!(matches!(err, GpuError::OutOfMemory(_)), "{err:?}");
    assert!(
        msg.contains("kernel") && msg.contains("exp") && msg.contains("1048576"),
        "names the kernel, its primitives and the limit: {msg}"
    );
    // The device is still usable once the budget allows the program.
    g.set_memory_limit(None);
    let cpu = Executable::new(f).expect("plans").run(&[&x]).expect("cpu runs");
    assert_close("after exhaustion", &exe.run(&[&x]).expect("runs"), &cpu);
    assert!(g.memory_in_use() >= 2 * 4 * n as u64, "held buffers are counted: {}", g.memory_in_use());
}

/// Gathers and scatter-adds of several forms, built directly: element and
/// slab gathers, a batch dim, two indexed axes, both index modes (the
/// indices include negative and too-large ones, and repeats), an i32 and a
/// bool operand; the scatter-adds are the gathers' transposes.
fn indexing_funcs() -> Vec<(String, graft_core::Func, Vec<Tensor>)> {
    use graft_core::ops::index::IndexMode;
    let mut out = Vec::new();
    let idx = |shape: &[usize], vals: Vec<i32>| Tensor::from_vec(shape.to_vec(), vals).expect("shape matches");
    let i32t = |s: &[usize]| TensorType::new(DType::I32, s.to_vec());
    // (operand shape, indices, batch_dims, index_dims)
    let forms: Vec<(Vec<usize>, Tensor, usize, Vec<usize>)> = vec![
        (vec![10, 6], idx(&[7, 1], vec![3, 0, 9, 3, -1, 12, 7]), 0, vec![0]),
        (vec![10], idx(&[4, 3, 1], (0..12).map(|i| (i * 7) % 13 - 1).collect()), 0, vec![0]),
        (vec![4, 5, 3], idx(&[4, 2, 1], vec![1, 4, 0, 0, 5, 2, -3, 3]), 1, vec![1]),
        (vec![6, 4, 3], idx(&[5, 2], vec![0, 0, 5, 3, 2, 1, 7, -1, 2, 3]), 0, vec![0, 1]),
        (vec![3, 6, 2], idx(&[4, 1], vec![5, 0, 2, 9]), 0, vec![1]),
    ];
    for (k, (xshape, ix, bd, dims)) in forms.into_iter().enumerate() {
        for mode in [IndexMode::Clip, IndexMode::Fill] {
            for dtype in [DType::F32, DType::I32, DType::Bool] {
                let mut b = graft_core::Builder::new("gather");
                let x = b.param(TensorType::new(dtype, xshape.clone()));
                let i = b.param(i32t(ix.shape()));
                let y = b.gather(x, i, bd, &dims, mode).expect("gather");
                let f = b.finish(&[y]).expect("builds");
                let xs = Tensor::from_fn(&TensorType::new(dtype, xshape.clone()), |j| (j as f64 * 0.37).sin() * 5.0);
                out.push((format!("gather form {k} {mode} {dtype}"), f, vec![xs, ix.clone()]));
            }
            let mut b = graft_core::Builder::new("scatter");
            let x = b.param(ty(&xshape));
            let i = b.param(i32t(ix.shape()));
            let y = b.gather(x, i, bd, &dims, mode).expect("gather");
            let uty = b.ty(y).expect("typed").clone();
            let u = b.param(uty.clone());
            let s = b.scatter_add(x, i, u, bd, &dims, mode).expect("scatter_add");
            let f = b.finish(&[s]).expect("builds");
            let (xs, us) = (f32s(&xshape, 80 + k as u64), f32s(&uty.shape, 90 + k as u64));
            out.push((format!("scatter_add form {k} {mode}"), f, vec![xs, ix.clone(), us]));
        }
    }
    out
}

#[test]
fn gathers_and_scatter_adds_run_on_the_device() {
    let Some(g) = gpu() else { return };
    for (what, f, ins) in indexing_funcs() {
        let f = Arc::new(f);
        let refs: Vec<&Tensor> = ins.iter().collect();
        let cpu = Executable::new(f.clone()).expect("plans").run(&refs).expect("cpu runs");
        let exe = GpuExecutable::with_gpu(g.clone(), f).expect("plans for the GPU");
        let host = exe.host_steps();
        assert!(host.is_empty(), "{what} runs on the device: {host:?}\n{}", exe.describe());
        let out = exe.run(&refs).expect("gpu runs");
        if what.starts_with("gather") {
            // A gather is a copy: bitwise.
            assert_same_bits(&what, &out, &cpu);
        } else {
            // The device sums each element's updates in another order.
            assert_close(&what, &out, &cpu);
        }
    }
}

/// i32 reductions of every kind run on the device and give the host's bits:
/// sums and products that overflow wrap on both, rows long and short, along
/// either axis and whole, alone, fused with elementwise producers, and next
/// to an f32 reduction over the same rows (two workgroup arrays).
#[test]
fn integer_reductions_run_on_the_device_exactly() {
    let Some(g) = gpu() else { return };
    use graft_core::ops::reduce::ReduceKind;
    let mut b = graft_core::Builder::new("ireduce");
    let x = b.param(TensorType::new(DType::I32, vec![37, 300]));
    let xf = b.param(TensorType::new(DType::F32, vec![37, 300]));
    let mut outs = Vec::new();
    for kind in [ReduceKind::Sum, ReduceKind::Prod, ReduceKind::Max, ReduceKind::Min] {
        for axes in [&[1usize][..], &[0], &[0, 1]] {
            outs.push(b.reduce(kind, x, axes).expect("reduce"));
        }
    }
    // Fused: an elementwise producer, and an f32 sum beside an i32 max.
    let three = b.full(3.0, &TensorType::new(DType::I32, vec![37, 300])).expect("full");
    let y = b.mul(x, three).expect("mul");
    outs.push(b.reduce_sum(y, &[1]).expect("sum"));
    let xc = b.convert(x, DType::F32).expect("convert");
    let p = b.mul(xc, xf).expect("mul");
    outs.push(b.reduce_sum(p, &[1]).expect("sum"));
    outs.push(b.reduce_max(y, &[1]).expect("max"));
    let f = Arc::new(b.finish(&outs).expect("builds"));
    // Large values so that sums and products overflow i32.
    let xs = Tensor::from_fn(&TensorType::new(DType::I32, vec![37, 300]), |i| {
        ((i as i64 * 2_654_435_761) % 2_000_000_001 - 1_000_000_000) as f64
    });
    let small = Tensor::from_fn(&TensorType::new(DType::F32, vec![37, 300]), |i| (i % 7) as f64 * 0.5);
    let refs = [&xs, &small];
    let cpu = Executable::new(f.clone()).expect("plans").run(&refs).expect("cpu runs");
    let exe = GpuExecutable::with_gpu(g, f).expect("plans for the GPU");
    assert!(exe.host_steps().is_empty(), "{:?}\n{}", exe.host_steps(), exe.describe());
    let out = exe.run(&refs).expect("gpu runs");
    // The integer results bitwise; the f32 sum (the 14th) within tolerance.
    let (ints, cpu_ints): (Vec<Tensor>, Vec<Tensor>) =
        out.iter().cloned().zip(cpu.iter().cloned()).filter(|(o, _)| o.dtype() == DType::I32).unzip();
    assert_eq!(ints.len(), 14);
    assert_same_bits("i32 reductions", &ints, &cpu_ints);
    assert_close("f32 sum beside them", &out[13..14], &cpu[13..14]);
}

/// argmax/argmin run on the device and give the host's indices: the first
/// occurrence among ties (0.0 and -0.0 tie), the first NaN winning over
/// every number, along the last axis, the first and a middle one, for f32
/// and i32 data, rows long enough to span several invocations.
#[test]
fn argmax_and_argmin_run_on_the_device_exactly() {
    let Some(g) = gpu() else { return };
    let mut b = graft_core::Builder::new("args");
    let x = b.param(TensorType::new(DType::F32, vec![6, 5, 300]));
    let xi = b.param(TensorType::new(DType::I32, vec![7, 300]));
    let mut outs = Vec::new();
    for axis in 0..3 {
        outs.push(b.argmax(x, axis, DType::I32).expect("argmax"));
        outs.push(b.argmin(x, axis, DType::I32).expect("argmin"));
    }
    outs.push(b.argmax(xi, 1, DType::I32).expect("argmax"));
    outs.push(b.argmin(xi, 0, DType::I32).expect("argmin"));
    let f = Arc::new(b.finish(&outs).expect("builds"));
    // Few distinct values (ties everywhere), signed zeros, and NaNs in some rows only.
    let xs = Tensor::from_fn(&TensorType::new(DType::F32, vec![6, 5, 300]), |i| match (i * 7919) % 23 {
        0 if i % 5 == 0 => f64::NAN,
        1 => -0.0,
        2 => 0.0,
        v => ((v % 9) as f64 - 4.0) * 0.5,
    });
    let xis = Tensor::from_fn(&TensorType::new(DType::I32, vec![7, 300]), |i| ((i * 104_729) % 13) as f64 - 6.0);
    let refs = [&xs, &xis];
    let cpu = Executable::new(f.clone()).expect("plans").run(&refs).expect("cpu runs");
    let exe = GpuExecutable::with_gpu(g, f).expect("plans for the GPU");
    assert!(exe.host_steps().is_empty(), "{:?}\n{}", exe.host_steps(), exe.describe());
    assert_same_bits("argmax/argmin", &exe.run(&refs).expect("gpu runs"), &cpu);
}

/// Every cumulative kind on the device, forwards and in reverse, along
/// each axis: f32 (NaNs for max/min, which then stay NaN along the line),
/// i32 (sums and products that overflow) and bool's running any/all. All
/// bitwise the host's but f32 sums and products (a tree, within tolerance).
#[test]
fn cumulative_ops_run_on_the_device() {
    let Some(g) = gpu() else { return };
    use graft_core::ops::cumulative::CumKind;
    let ty = |d: DType| TensorType::new(d, vec![4, 3, 70]);
    let mut b = graft_core::Builder::new("scans");
    let (x, xi, xb) = (b.param(ty(DType::F32)), b.param(ty(DType::I32)), b.param(ty(DType::Bool)));
    let (mut exact, mut close) = (Vec::new(), Vec::new());
    for kind in CumKind::ALL {
        for axis in 0..3 {
            for reverse in [false, true] {
                let y = b.cumulative(kind, x, axis, reverse).expect("f32 scan");
                if matches!(kind, CumKind::Sum | CumKind::Prod) {
                    close.push(y);
                } else {
                    exact.push(y);
                    exact.push(b.cumulative(kind, xb, axis, reverse).expect("bool scan"));
                }
                exact.push(b.cumulative(kind, xi, axis, reverse).expect("i32 scan"));
            }
        }
    }
    let n_exact = exact.len();
    let f = Arc::new(b.finish(&[exact, close].concat()).expect("builds"));
    let xs = Tensor::from_fn(&ty(DType::F32), |i| match (i * 7919) % 31 {
        0 if i % 3 == 0 => f64::NAN,
        v => 1.0 + (v as f64 - 15.0) / 64.0,
    });
    let xis = Tensor::from_fn(&ty(DType::I32), |i| ((i as i64 * 2_654_435_761) % 200_001 - 100_000) as f64);
    let xbs = Tensor::from_fn(&ty(DType::Bool), |i| f64::from((i * 7) % 11 == 0));
    let refs = [&xs, &xis, &xbs];
    let cpu = Executable::new(f.clone()).expect("plans").run(&refs).expect("cpu runs");
    let exe = GpuExecutable::with_gpu(g, f).expect("plans for the GPU");
    assert!(exe.host_steps().is_empty(), "{:?}\n{}", exe.host_steps(), exe.describe());
    let out = exe.run(&refs).expect("gpu runs");
    assert_same_bits("max/min, i32 and bool scans", &out[..n_exact], &cpu[..n_exact]);
    assert_close("f32 sums and products", &out[n_exact..], &cpu[n_exact..]);
}

/// Cumulative ops over lines too long for the row form (past
/// `LINE_WORK_MAX` element-position pairs) scan by Hillis-Steele passes on
/// the device: every kind, forwards and in reverse, along both axes of a
/// `[3, 12000]` operand (and a line of 2^13 + 1), for f32 and i32. Max and
/// min (NaNs among the data) and i32 (wrapping) are the host's bits; f32
/// sums run over small integers and products over signs, whose every
/// partial result is exact, so they are the host's bits here too.
#[test]
fn long_cumulative_ops_scan_by_passes_on_the_device() {
    let Some(g) = gpu() else { return };
    use graft_core::ops::cumulative::CumKind;
    let mut b = graft_core::Builder::new("long_scans");
    let (x, xi, xs1) = (
        b.param(TensorType::new(DType::F32, vec![3, 12000])),
        b.param(TensorType::new(DType::I32, vec![3, 12000])),
        b.param(TensorType::new(DType::F32, vec![8193, 2])),
    );
    let mut outs = Vec::new();
    for kind in CumKind::ALL {
        for reverse in [false, true] {
            // Products of the zeros, twos and NaNs of `x` could overflow
            // in one order and not another: those run on signs only.
            if kind != CumKind::Prod {
                outs.push(b.cumulative(kind, x, 1, reverse).expect("f32 scan"));
            }
            outs.push(b.cumulative(kind, xi, 1, reverse).expect("i32 scan"));
            outs.push(b.cumulative(kind, xi, 0, reverse).expect("i32 scan along 0"));
            outs.push(b.cumulative(kind, xs1, 0, reverse).expect("f32 scan along 0"));
        }
    }
    let f = Arc::new(b.finish(&outs).expect("builds"));
    let xs = Tensor::from_fn(&TensorType::new(DType::F32, vec![3, 12000]), |i| match (i * 7919) % 4001 {
        0 => f64::NAN,
        v if v % 2 == 0 => 1.0,
        v if v % 3 == 0 => -1.0,
        v => (v % 5) as f64 - 2.0,
    });
    let xis = Tensor::from_fn(&TensorType::new(DType::I32, vec![3, 12000]), |i| {
        ((i as i64 * 2_654_435_761) % 200_001 - 100_000) as f64
    });
    let x1 = Tensor::from_fn(&TensorType::new(DType::F32, vec![8193, 2]), |i| if i % 7 == 0 { -1.0 } else { 1.0 });
    let refs = [&xs, &xis, &x1];
    let cpu = Executable::new(f.clone()).expect("plans").run(&refs).expect("cpu runs");
    let exe = GpuExecutable::with_gpu(g, f).expect("plans for the GPU");
    assert!(exe.host_steps().is_empty(), "{:?}\n{}", exe.host_steps(), exe.describe());
    assert!(exe.describe().contains("Hillis-Steele"), "{}", exe.describe());
    assert_same_bits("long scans", &exe.run(&refs).expect("gpu runs"), &cpu);
}

/// argsort on the device gives the host's stable permutation bitwise:
/// ties in position order, `-0.0` equal to `0.0`, NaNs last in their order,
/// along every axis of f32 data and for i32 data; the sorted values (a
/// gather at the permutation) with it.
#[test]
fn argsort_runs_on_the_device_exactly() {
    let Some(g) = gpu() else { return };
    let mut b = graft_core::Builder::new("sorts");
    let x = b.param(TensorType::new(DType::F32, vec![5, 4, 90]));
    let xi = b.param(TensorType::new(DType::I32, vec![6, 70]));
    let mut outs = Vec::new();
    for axis in 0..3 {
        outs.push(b.argsort(x, axis, DType::I32).expect("argsort"));
    }
    outs.push(b.argsort(xi, 1, DType::I32).expect("argsort"));
    outs.push(b.argsort(xi, 0, DType::I32).expect("argsort"));
    let f = Arc::new(b.finish(&outs).expect("builds"));
    let xs = Tensor::from_fn(&TensorType::new(DType::F32, vec![5, 4, 90]), |i| match (i * 7919) % 29 {
        0 => f64::NAN,
        1 => -0.0,
        2 => 0.0,
        v => ((v % 7) as f64 - 3.0) * 0.25,
    });
    let xis = Tensor::from_fn(&TensorType::new(DType::I32, vec![6, 70]), |i| ((i * 104_729) % 9) as f64 - 4.0);
    let refs = [&xs, &xis];
    let cpu = Executable::new(f.clone()).expect("plans").run(&refs).expect("cpu runs");
    let exe = GpuExecutable::with_gpu(g, f).expect("plans for the GPU");
    assert!(exe.host_steps().is_empty(), "{:?}\n{}", exe.host_steps(), exe.describe());
    assert_same_bits("argsort", &exe.run(&refs).expect("gpu runs"), &cpu);
}

/// Long lines sort by the bitonic network (past the quadratic form's
/// bound): lines that are not a power of two long (padded), along the last
/// axis and along the first, f32 with ties, signed zeros, infinities and
/// NaNs, and i32 with ties and both extremes; the permutation is the
/// host's stable one, bit for bit, and so is a `sort` through it.
#[test]
fn long_argsorts_run_as_a_bitonic_network_exactly() {
    let Some(g) = gpu() else { return };
    let mut b = graft_core::Builder::new("long_sorts");
    let x = b.param(TensorType::new(DType::F32, vec![3, 6000]));
    let xi = b.param(TensorType::new(DType::I32, vec![5000, 4]));
    let outs = vec![
        b.argsort(x, 1, DType::I32).expect("argsort"),
        b.argsort(xi, 0, DType::I32).expect("argsort"),
        graft_core::composite::sort::sort(&mut b, x, 1).expect("sort"),
    ];
    let f = Arc::new(b.finish(&outs).expect("builds"));
    let xs = Tensor::from_fn(&TensorType::new(DType::F32, vec![3, 6000]), |i| match (i * 7919) % 37 {
        0 => f64::NAN,
        1 => -0.0,
        2 => 0.0,
        3 => f64::INFINITY,
        4 => f64::NEG_INFINITY,
        v => ((v * 31) % 23) as f64 - 11.0 + (i % 3) as f64 * 1e-3,
    });
    let xis = Tensor::from_fn(&TensorType::new(DType::I32, vec![5000, 4]), |i| match i % 101 {
        0 => f64::from(i32::MAX),
        1 => f64::from(i32::MIN),
        _ => ((i * 104_729) % 13) as f64 - 6.0,
    });
    let refs = [&xs, &xis];
    let cpu = Executable::new(f.clone()).expect("plans").run(&refs).expect("cpu runs");
    let exe = GpuExecutable::with_gpu(g, f).expect("plans for the GPU");
    assert!(exe.host_steps().is_empty(), "{:?}\n{}", exe.host_steps(), exe.describe());
    assert!(exe.describe().contains("bitonic"), "{}", exe.describe());
    assert_same_bits("long argsort", &exe.run(&refs).expect("gpu runs"), &cpu);
}

#[test]
fn integer_scatter_adds_run_on_the_device_exactly() {
    // The device sums each element's updates in a row of its own; i32 sums
    // wrap there as in the interpreter, so the order does not change the bits
    // (the operand's i32::MAX overflows).
    let Some(g) = gpu() else { return };
    use graft_core::ops::index::IndexMode;
    let mut b = graft_core::Builder::new("iscatter");
    let x = b.param(TensorType::new(DType::I32, vec![6]));
    let i = b.param(TensorType::new(DType::I32, vec![5, 1]));
    let u = b.param(TensorType::new(DType::I32, vec![5]));
    let s = b.scatter_add(x, i, u, 0, &[0], IndexMode::Clip).expect("scatter_add");
    let f = Arc::new(b.finish(&[s]).expect("builds"));
    let ins = [
        Tensor::from_vec(vec![6], vec![1i32, 2, 3, 4, 5, i32::MAX]).expect("shape"),
        Tensor::from_vec(vec![5, 1], vec![5i32, 0, 5, 9, -2]).expect("shape"),
        Tensor::from_vec(vec![5], vec![1i32, 10, 100, 1000, 10000]).expect("shape"),
    ];
    let refs: Vec<&Tensor> = ins.iter().collect();
    let cpu = Executable::new(f.clone()).expect("plans").run(&refs).expect("cpu runs");
    let exe = GpuExecutable::with_gpu(g, f).expect("plans for the GPU");
    assert!(exe.host_steps().is_empty(), "{:?}\n{}", exe.host_steps(), exe.describe());
    assert_same_bits("integer scatter_add", &exe.run(&refs).expect("gpu runs"), &cpu);
}

#[test]
fn jit_runs_on_the_device_it_is_given() {
    // `graft::Jit::device`: the same traced closure compiled for the CPU and
    // for the GPU; `auto` picks the GPU for f32 and the CPU for f64.
    let f = graft::jit("f", |x| (x.sin() * x).sum(()));
    let df = f.grad(graft::Wrt::All);
    let x = f32s(&[1000], 31);
    let cpu = df.call(&[&x]).expect("cpu runs");
    let on_gpu = df.device(Device::Gpu);
    if gpu().is_none() {
        let err = on_gpu.call(&[&x]).expect_err("no adapter");
        assert!(matches!(err, graft::Error::Gpu(_)) && err.to_string().contains("no GPU adapter"), "{err}");
        return;
    }
    let c = on_gpu.compiled(&[x.ty()]).expect("compiles for the GPU");
    assert_eq!(c.device_name(), "gpu");
    assert!(c.gpu().is_some_and(|g| g.host_steps().is_empty()), "runs whole on the device");
    assert_close("Jit::device(Gpu)", &on_gpu.call(&[&x]).expect("gpu runs"), &cpu);
    let x64 = Tensor::from_fn(&TensorType::new(DType::F64, vec![10]), |i| i as f64 * 0.1);
    let auto = df.device(Device::Auto);
    assert_eq!(auto.compiled(&[x.ty()]).expect("compiles").device_name(), "gpu");
    assert_eq!(auto.compiled(&[x64.ty()]).expect("compiles").device_name(), "cpu", "f64 falls back to the CPU");
    let err = on_gpu.call(&[&x64]).expect_err("f64 on the GPU");
    assert!(err.to_string().contains("f64"), "{err}");
}

/// Steps of `exe` that run a convolution or a pooling window on the host
/// (there should be none).
fn conv_pool_host_steps(exe: &GpuExecutable) -> Vec<(String, String)> {
    exe.host_steps().into_iter().filter(|(p, _)| p.contains("conv") || p.contains("reduce_window")).collect()
}

/// Runs a built function on both devices, compares, and asserts that no
/// convolution or pooling window ran on the host.
fn both_func(what: &str, f: Arc<graft_core::Func>, inputs: &[Tensor]) -> Option<GpuExecutable> {
    let g = gpu()?;
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let cpu = Executable::new(f.clone()).expect("plans").run(&refs).expect("cpu runs");
    let exe = GpuExecutable::with_gpu(g, f).expect("plans for the GPU");
    let (out, stats) = exe.run_with_stats(&refs).expect("gpu runs");
    assert_close(what, &out, &cpu);
    let host = conv_pool_host_steps(&exe);
    assert!(host.is_empty(), "{what}: convolutions and windows run on the device: {host:?}\n{}", exe.describe());
    assert!(stats.launches > 0, "{what}: {stats:?}");
    Some(exe)
}

/// A convolution setting of the grid: lhs and rhs shapes and parameters.
fn conv_case(
    x: &[usize],
    w: &[usize],
    strides: &[usize],
    padding: &[(i64, i64)],
    lhs_dilation: &[usize],
    rhs_dilation: &[usize],
    groups: usize,
) -> (Vec<usize>, Vec<usize>, graft_core::ops::conv::ConvGeneral) {
    let c = graft_core::ops::conv::ConvGeneral {
        strides: strides.to_vec(),
        padding: padding.to_vec(),
        lhs_dilation: lhs_dilation.to_vec(),
        rhs_dilation: rhs_dilation.to_vec(),
        feature_group_count: groups,
        layout: Default::default(),
    };
    (x.to_vec(), w.to_vec(), c)
}

/// The grid: 2-d and 1-d (and 3-d, 0-d), strides, padding (negative too),
/// both dilations, groups (depthwise too), the 1x1 identity window.
fn conv_grid() -> Vec<(&'static str, (Vec<usize>, Vec<usize>, graft_core::ops::conv::ConvGeneral))> {
    vec![
        ("2-d plain", conv_case(&[2, 3, 9, 9], &[4, 3, 3, 3], &[1, 1], &[(0, 0), (0, 0)], &[1, 1], &[1, 1], 1)),
        (
            "2-d stride 2 pad 1",
            conv_case(&[2, 3, 9, 8], &[5, 3, 3, 3], &[2, 2], &[(1, 1), (1, 1)], &[1, 1], &[1, 1], 1),
        ),
        (
            "2-d negative pad",
            conv_case(&[2, 2, 8, 9], &[3, 2, 3, 2], &[1, 2], &[(-1, 2), (2, -1)], &[1, 1], &[1, 1], 1),
        ),
        ("2-d lhs dilation", conv_case(&[2, 3, 5, 6], &[4, 3, 3, 3], &[1, 1], &[(2, 2), (1, 2)], &[2, 3], &[1, 1], 1)),
        (
            "2-d rhs dilation",
            conv_case(&[1, 2, 11, 10], &[3, 2, 3, 2], &[1, 2], &[(1, 0), (0, 2)], &[1, 1], &[2, 3], 1),
        ),
        ("2-d groups", conv_case(&[2, 4, 7, 7], &[6, 2, 3, 3], &[1, 1], &[(1, 1), (1, 1)], &[1, 1], &[1, 1], 2)),
        ("2-d depthwise", conv_case(&[2, 4, 7, 6], &[8, 1, 3, 3], &[2, 1], &[(1, 1), (0, 1)], &[1, 1], &[1, 1], 4)),
        ("2-d 1x1", conv_case(&[3, 6, 5, 5], &[4, 6, 1, 1], &[1, 1], &[(0, 0), (0, 0)], &[1, 1], &[1, 1], 1)),
        ("1-d", conv_case(&[3, 2, 20], &[5, 2, 4], &[3], &[(2, 1)], &[1], &[2], 1)),
        ("1-d all", conv_case(&[2, 4, 9], &[4, 2, 3], &[2], &[(3, -1)], &[2], &[2], 2)),
        (
            "3-d",
            conv_case(
                &[1, 2, 5, 6, 4],
                &[3, 2, 2, 3, 2],
                &[1, 2, 1],
                &[(1, 0), (1, 1), (0, 0)],
                &[1, 1, 1],
                &[1, 1, 2],
                1,
            ),
        ),
        ("0-d (grouped matmul)", conv_case(&[3, 4], &[6, 2], &[], &[], &[], &[], 2)),
    ]
}

/// `f(x, w) = conv(x, w)` and `loss(x, w, r) = sum(conv(x, w) * r)`.
fn conv_funcs(
    xs: &[usize],
    ws: &[usize],
    c: &graft_core::ops::conv::ConvGeneral,
) -> (Arc<graft_core::Func>, graft_core::Func, Vec<usize>) {
    let mut b = graft_core::Builder::new("conv");
    let (x, w) = (b.param(ty(xs)), b.param(ty(ws)));
    let y = b.conv_general(x, w, c.clone()).expect("a valid convolution");
    let f = Arc::new(b.finish(&[y]).expect("a function"));
    let os = f.ty(f.outputs[0]).shape.clone();
    let mut b = graft_core::Builder::new("conv_loss");
    let (x, w, r) = (b.param(ty(xs)), b.param(ty(ws)), b.param(ty(&os)));
    let y = b.conv_general(x, w, c.clone()).expect("a valid convolution");
    let yr = b.mul(y, r).expect("mul");
    let axes: Vec<usize> = (0..os.len()).collect();
    let l = b.reduce_sum(yr, &axes).expect("sum");
    (f, b.finish(&[l]).expect("a function"), os)
}

#[test]
fn conv_forward_grid() {
    for (seed, (what, (xs, ws, c))) in conv_grid().into_iter().enumerate() {
        let (f, _, _) = conv_funcs(&xs, &ws, &c);
        let Some(exe) = both_func(what, f, &[f32s(&xs, 100 + seed as u64), f32s(&ws, 200 + seed as u64)]) else {
            return;
        };
        assert!(exe.host_steps().is_empty(), "{what}: {:?}\n{}", exe.host_steps(), exe.describe());
        assert!(exe.describe().contains("conv_general as"), "{what}: {}", exe.describe());
    }
}

#[test]
fn conv_grad_both_operands_grid() {
    use graft_core::ad::{grad, Wrt};
    for (seed, (what, (xs, ws, c))) in conv_grid().into_iter().enumerate() {
        let (_, loss, os) = conv_funcs(&xs, &ws, &c);
        let g = Arc::new(grad(&loss, &Wrt::Positions(vec![0, 1])).expect("differentiates"));
        let inputs = [f32s(&xs, 300 + seed as u64), f32s(&ws, 400 + seed as u64), f32s(&os, 500 + seed as u64)];
        let Some(exe) = both_func(&format!("grad {what}"), g, &inputs) else { return };
        assert!(exe.host_steps().is_empty(), "grad {what}: {:?}\n{}", exe.host_steps(), exe.describe());
    }
}

#[test]
fn conv_vmap_over_both_operands() {
    use graft_core::batch::vmap_func;
    let (xs, ws, c) = conv_case(&[2, 4, 7, 7], &[6, 2, 3, 3], &[2, 1], &[(1, 1), (0, 1)], &[1, 1], &[1, 1], 2);
    let (f, _, _) = conv_funcs(&xs, &ws, &c);
    // Batched lhs only (the batch joins the images), and both (the batch
    // becomes feature groups).
    let bx: Vec<usize> = [3].iter().chain(&xs).copied().collect();
    let bw: Vec<usize> = [3].iter().chain(&ws).copied().collect();
    let vx = Arc::new(vmap_func(&f, &[Some(0), None], &[Some(0)], 3).expect("vmaps"));
    both_func("vmap over x", vx, &[f32s(&bx, 600), f32s(&ws, 601)]);
    let vxw = Arc::new(vmap_func(&f, &[Some(0), Some(0)], &[Some(0)], 3).expect("vmaps"));
    both_func("vmap over x and w", vxw, &[f32s(&bx, 602), f32s(&bw, 603)]);
}

/// The im2col matrix is split over the batch when it would pass a quarter
/// of the device memory budget (or 64 MiB): each part writes its images of
/// the result in place, the last part smaller.
#[test]
fn conv_split_over_the_batch() {
    if gpu().is_none() {
        return;
    }
    // A device of its own, so its budget touches no other test.
    let g = Arc::new(graft_gpu::Gpu::open().expect("the adapter opens a second device"));
    // 14.4 KB of im2col per image, 40 KB per part: 2 images a part, 3 parts.
    g.set_memory_limit(Some(160_000));
    let (xs, ws, c) = conv_case(&[5, 4, 10, 10], &[5, 4, 3, 3], &[1, 1], &[(1, 1), (1, 1)], &[1, 1], &[1, 1], 1);
    let (f, _, _) = conv_funcs(&xs, &ws, &c);
    let (x, w) = (f32s(&xs, 700), f32s(&ws, 701));
    let cpu = Executable::new(f.clone()).expect("plans").run(&[&x, &w]).expect("cpu runs");
    let exe = GpuExecutable::with_gpu(g, f).expect("plans for the GPU");
    assert!(exe.describe().contains("3 part(s)"), "{}", exe.describe());
    let (out, stats) = exe.run_with_stats(&[&x, &w]).expect("gpu runs");
    assert_close("split conv", &out, &cpu);
    assert_eq!(stats.launches, 6, "an im2col and a GEMM per part: {stats:?}");
}

const POOL: &str = "
def mp(x: tensor[n, c, h, w, f32]) -> tensor[n, c, 4, 4, f32] = max_pool2d(x, 2)
def mp3(x: tensor[n, c, h, w, f32]) -> tensor[n, c, 4, 4, f32] = max_pool2d(x, 3, stride=2, padding=1)
def ap(x: tensor[n, c, h, w, f32]) -> tensor[n, c, 4, 4, f32] = avg_pool2d(x, 2)
def ap3(x: tensor[n, c, h, w, f32]) -> tensor[n, c, 4, 4, f32] = avg_pool2d(x, 3, stride=2, padding=1)
def gmp(x: tensor[n, c, h, w, f32], r: tensor[n, c, 4, 4, f32]) -> tensor[n, c, h, w, f32] =
  grad(fn (a) -> sum(max_pool2d(a, 3, stride=2, padding=1) * r))(x)
def gap(x: tensor[n, c, h, w, f32], r: tensor[n, c, 4, 4, f32]) -> tensor[n, c, h, w, f32] =
  grad(fn (a) -> sum(avg_pool2d(a, 3, stride=2, padding=1) * r))(x)
def gmp2(x: tensor[n, c, h, w, f32], r: tensor[n, c, 4, 4, f32]) -> tensor[n, c, h, w, f32] =
  grad(fn (a) -> sum(max_pool2d(a, 2) * r))(x)
def vmp(x: tensor[b, n, c, h, w, f32]) -> tensor[b, n, c, 4, 4, f32] = vmap(fn (a) -> max_pool2d(a, 3, stride=2, padding=1))(x)
";

#[test]
fn pooling_forward_grad_vmap() {
    let x = f32s(&[2, 3, 8, 8], 800);
    let r = f32s(&[2, 3, 4, 4], 801);
    for entry in ["mp", "mp3", "ap", "ap3"] {
        let Some(exe) = both(POOL, entry, std::slice::from_ref(&x)) else { return };
        assert!(exe.host_steps().is_empty(), "{entry}: {:?}\n{}", exe.host_steps(), exe.describe());
    }
    for entry in ["gmp", "gap", "gmp2"] {
        let Some(exe) = both(POOL, entry, &[x.clone(), r.clone()]) else { return };
        // The max pooling gradient is a gather of the tangent and its
        // transpose, a float scatter-add: both device kernels here.
        assert!(exe.host_steps().is_empty(), "{entry}: {:?}\n{}", exe.host_steps(), exe.describe());
    }
    if let Some(exe) = both(POOL, "vmp", &[f32s(&[3, 2, 3, 8, 8], 802)]) {
        assert!(exe.host_steps().is_empty(), "vmp: {:?}\n{}", exe.host_steps(), exe.describe());
    }
}

/// A max pooling layer of more than 32k elements: its gradient's
/// scatter-add has more element-position pairs than the device's scatter
/// rows take (36864 x 9216 > 2^28), so that one step runs on the host and
/// says why; the window and the gather stay on the device.
#[test]
fn large_max_pooling_gradient_scatters_on_the_host() {
    let src = "def g(x: tensor[n, c, h, w, f32]) -> tensor[n, c, h, w, f32] = grad(fn (a) -> sum(max_pool2d(a, 2)))(x)";
    if let Some(exe) = both(src, "g", &[f32s(&[2, 8, 48, 48], 803)]) {
        let host = exe.host_steps();
        assert!(host.len() == 1 && host[0].0 == "scatter_add" && host[0].1.contains("pairs"), "{host:?}");
    }
}

/// Every window kind through the primitive: min windows, window dilation,
/// padding larger than the window, 1-d and 3-d operands, NaN inputs
/// (propagated by max and min as the interpreter does), and windows that
/// only hold padding (the identity, -inf for max).
#[test]
fn pooling_windows_of_every_kind() {
    use graft_core::ops::window::WindowKind;
    let mut nan = f32s(&[2, 3, 9, 7], 810).to_f64_vec().into_iter().map(|v| v as f32).collect::<Vec<_>>();
    for i in [0, 5, 17, 100, 101, 250] {
        nan[i] = f32::NAN;
    }
    let nan = Tensor::from_vec(vec![2, 3, 9, 7], nan).expect("shape matches");
    type Case = (&'static str, Vec<usize>, Vec<usize>, Vec<usize>, Vec<(usize, usize)>, Vec<usize>);
    let cases: Vec<Case> = vec![
        ("2x2", vec![2, 3, 9, 7], vec![1, 1, 2, 2], vec![1, 1, 2, 2], vec![(0, 0); 4], vec![1; 4]),
        (
            "3x2 pad dil",
            vec![2, 3, 9, 7],
            vec![1, 1, 3, 2],
            vec![1, 1, 2, 1],
            vec![(0, 0), (0, 0), (1, 2), (2, 0)],
            vec![1, 1, 2, 3],
        ),
        (
            "pad only",
            vec![2, 3, 9, 7],
            vec![1, 1, 2, 2],
            vec![1, 1, 3, 3],
            vec![(0, 0), (0, 0), (4, 4), (3, 3)],
            vec![1; 4],
        ),
        (
            "over channels",
            vec![2, 3, 9, 7],
            vec![1, 2, 3, 1],
            vec![1, 1, 1, 2],
            vec![(0, 0), (1, 0), (1, 1), (0, 0)],
            vec![1; 4],
        ),
        ("1-d", vec![50], vec![5], vec![3], vec![(2, 2)], vec![1]),
        ("3-d", vec![4, 5, 6], vec![2, 3, 2], vec![2, 1, 3], vec![(1, 0), (0, 2), (1, 1)], vec![1, 2, 1]),
    ];
    for kind in WindowKind::ALL {
        for (i, (what, shape, window, strides, padding, wdil)) in cases.iter().enumerate() {
            let mut b = graft_core::Builder::new("pool");
            let x = b.param(ty(shape));
            let ones = vec![1; shape.len()];
            let y = b.reduce_window(kind, x, window, strides, padding, &ones, wdil).expect("a valid window");
            let f = Arc::new(b.finish(&[y]).expect("a function"));
            let input = if shape == &[2, 3, 9, 7] && i % 2 == 0 { nan.clone() } else { f32s(shape, 820 + i as u64) };
            let Some(exe) = both_func(&format!("{kind:?} {what}"), f, &[input]) else { return };
            assert!(exe.host_steps().is_empty(), "{kind:?} {what}: {:?}", exe.host_steps());
        }
    }
}

/// Windows the device does not run stay on the host, say why, and agree:
/// base dilation (taps on holes) and windows beyond the unrolled size.
#[test]
fn pooling_windows_left_on_the_host_say_why() {
    use graft_core::ops::window::WindowKind;
    let cases: [(&str, Vec<usize>, Vec<usize>, Vec<usize>); 2] =
        [("base dilation", vec![3, 2], vec![1, 1], vec![2, 3]), ("of 289 taps", vec![17, 17], vec![1, 1], vec![1, 1])];
    for (why, window, strides, base) in cases {
        let Some(g) = gpu() else { return };
        let mut b = graft_core::Builder::new("pool");
        let x = b.param(ty(&[20, 18]));
        let y = b.reduce_window(WindowKind::Max, x, &window, &strides, &[(1, 0), (0, 2)], &base, &[1, 1]);
        let f = Arc::new(b.finish(&[y.expect("a valid window")]).expect("a function"));
        let input = f32s(&[20, 18], 830);
        let cpu = Executable::new(f.clone()).expect("plans").run(&[&input]).expect("cpu runs");
        let exe = GpuExecutable::with_gpu(g, f).expect("plans for the GPU");
        assert_close(why, &exe.run(&[&input]).expect("gpu runs"), &cpu);
        let host = exe.host_steps();
        assert!(host.len() == 1 && host[0].0 == "reduce_window_max" && host[0].1.contains(why), "{host:?}");
    }
}

/// The language's CNN programs end to end: the convnet example's gradient
/// (conv, relu, max pooling, dense, cross-entropy) and the benchmarked CNN
/// training step (two convolutions, one strided, and their gradients), each with no convolution or
/// window on the host.
#[test]
fn cnn_programs_end_to_end() {
    let convnet = include_str!("../../../../examples/convnet.graft");
    let labels = Tensor::from_vec(vec![6], vec![0i32, 2, 1, 1, 0, 2]).expect("shape matches");
    let params = [f32s(&[4, 1, 3, 3], 900), f32s(&[4], 901), f32s(&[64, 3], 902), f32s(&[3], 903)];
    let mut inputs = params.to_vec();
    inputs.push(f32s(&[6, 1, 8, 8], 904));
    if let Some(exe) = both(convnet, "net", &inputs) {
        assert!(conv_pool_host_steps(&exe).is_empty(), "{}", exe.describe());
    }
    inputs.push(labels);
    if let Some(exe) = both(convnet, "grads", &inputs) {
        assert!(conv_pool_host_steps(&exe).is_empty(), "{}", exe.describe());
    }
    let step = include_str!("../../../../bench/programs/cnn_step.graft");
    let y = Tensor::from_vec(vec![4], vec![3i32, 0, 9, 5]).expect("shape matches");
    let inputs = [
        f32s(&[8, 1, 3, 3], 910),
        f32s(&[8], 911),
        f32s(&[16, 8, 3, 3], 912),
        f32s(&[16], 913),
        f32s(&[16, 10], 914),
        f32s(&[10], 915),
        f32s(&[4, 1, 12, 12], 916),
        y,
    ];
    if let Some(exe) = both(step, "main", &inputs) {
        assert!(exe.host_steps().is_empty(), "the CNN step runs whole on the device: {:?}", exe.host_steps());
    }
}

const LOOPS: &str = "
def cell(w: tensor[h, h, f32], c: tensor[b, h, f32], x: tensor[b, h, f32]) -> tensor[b, h, f32] = tanh(c @ w + x)
def rnn(w: tensor[h, h, f32], xs: tensor[t, b, h, f32], h0: tensor[b, h, f32])
    -> (tensor[b, h, f32], tensor[t, b, h, f32]) =
  scan(fn (c, x) -> { let n = cell(w, c, x); (n, n * 2.0 - x) }, h0, xs)
def loss(w: tensor[h, h, f32], xs: tensor[t, b, h, f32], h0: tensor[b, h, f32]) -> f32 {
  let (last, hs) = rnn(w, xs, h0)
  sum(last) + 0.01 * sum(hs * hs)
}
def grad_rnn(w: tensor[h, h, f32], xs: tensor[t, b, h, f32], h0: tensor[b, h, f32])
    -> (tensor[h, h, f32], tensor[t, b, h, f32]) =
  grad(loss, wrt=(w, xs))(w, xs, h0)
def decay(x: tensor[n, f32]) -> tensor[n, f32] = fori(50, fn (i, y) -> y * 0.95 + 0.05 * sin(y) + 0.001 * cast(i, f32), x)
def nested(x: tensor[n, f32]) -> tensor[n, f32] =
  fori(3, fn (i, y) -> fori(4, fn (j, z) -> z * 0.9 + 0.1, y) + 1.0, x)
def grow(x: tensor[n, f32]) -> (tensor[n, f32], i32) =
  while(fn (c) -> sum(abs(c.0)) < 1000.0 and c.1 < 40, fn (c) -> (c.0 * 1.25 + 0.5, c.1 + 1), (x, 0))
def vgrow(xs: tensor[b, n, f32]) -> (tensor[b, n, f32], tensor[b, i32]) = vmap(grow)(xs)
";

/// Asserts that every loop of `exe` runs on the device (no host step, and
/// the description shows the loop driven from the host).
fn loops_on_device(what: &str, exe: &GpuExecutable, kind: &str) {
    assert!(exe.host_steps().is_empty(), "{what}: {:?}\n{}", exe.host_steps(), exe.describe());
    assert!(exe.describe().contains(kind), "{what}: no {kind} step\n{}", exe.describe());
}

#[test]
fn loops_run_on_the_device() {
    // scan forward (with stacked results), its gradient (a reverse scan),
    // fori, nested loops and while (also vmapped, every example its own
    // trip count): all on the device, no host step and no read-back but
    // the while predicate's.
    let (w, xs, h0) = (f32s(&[8, 8], 41), f32s(&[6, 3, 8], 42), f32s(&[3, 8], 43));
    let w = Tensor::from_vec(vec![8, 8], w.to_vec::<f32>().unwrap().iter().map(|v| v * 0.3).collect()).unwrap();
    let Some(exe) = both(LOOPS, "rnn", &[w.clone(), xs.clone(), h0.clone()]) else { return };
    loops_on_device("rnn", &exe, "scan of 6 steps");
    let (_, stats) = exe.run_with_stats(&[&w, &xs, &h0]).expect("runs");
    // Only the two results come back.
    assert_eq!((stats.syncs, stats.downloads), (1, 2), "{stats:?}");
    assert!(stats.launches >= 6, "{stats:?}");
    if let Some(exe) = both(LOOPS, "grad_rnn", &[w.clone(), xs.clone(), h0.clone()]) {
        loops_on_device("grad_rnn", &exe, "reverse");
    }
    let x = Tensor::from_vec(vec![300], f32s(&[300], 44).to_vec::<f32>().unwrap().iter().map(|v| v * 0.5).collect())
        .unwrap();
    if let Some(exe) = both(LOOPS, "decay", &[x.clone()]) {
        loops_on_device("decay", &exe, "scan of 50 steps");
    }
    if let Some(exe) = both(LOOPS, "nested", &[x.clone()]) {
        loops_on_device("nested", &exe, "scan of 4 steps");
    }
    if let Some(exe) = both(LOOPS, "grow", &[x.clone()]) {
        loops_on_device("grow", &exe, "while");
        let (out, stats) = exe.run_with_stats(&[&x]).expect("runs");
        let trips = out[1].to_vec::<i32>().unwrap()[0];
        assert!(trips > 1 && trips < 40, "the predicate stops it: {trips}");
        // One read-back per predicate evaluation, one for the results.
        assert_eq!(stats.syncs as i32, trips + 2, "{stats:?}");
    }
    if let Some(exe) = both(LOOPS, "vgrow", &[f32s(&[4, 50], 45)]) {
        loops_on_device("vgrow", &exe, "while");
    }
}
