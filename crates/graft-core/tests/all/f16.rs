//! `f16` (IEEE binary16) as a storage type: `convert` to and from every
//! dtype (all 65 536 bit patterns, edge cases of rounding, saturation), the
//! widening rewrite (`opt::widen_f16`: every op computes in f32 and rounds
//! each result, bitwise against the same program written by hand in f32,
//! with fusion and compilation on and off), a scan with an f16 carry,
//! reverse mode through f16, and `.npy` round trips.

use crate::common;

use common::native::{all_options, assert_bitwise_eq, bits};
use graft_core::ad::{grad, Wrt};
use graft_core::dtype::f16_from_f64;
use graft_core::half::f16;
use graft_core::kernel::CompileMode;
use graft_core::npy::{read_npy, write_npy};
use graft_core::ops::scan::ScanOpts;
use graft_core::ops::{Op, Prim};
use graft_core::{Builder, DType, ExecOptions, Executable, Func, IrError, Tensor, TensorType, Value};
use std::sync::Arc;

/// The f16 nearest to `x`, ties to even, found by search over the f16
/// values and an exact comparison with the midpoint of the two neighbours
/// (exact in f64): the reference for every rounding to f16 here.
fn ref_f16(x: f64) -> f16 {
    if x.is_nan() {
        return f16::NAN;
    }
    let a = x.abs();
    let val = |h: u16| f16::from_bits(h).to_f64();
    let mag = if a >= 65520.0 {
        0x7c00
    } else {
        // The largest finite pattern whose value is <= a.
        let (mut lo, mut hi) = (0u16, 0x7bffu16);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if val(mid) <= a {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        if lo == 0x7bff {
            lo
        } else {
            let m = (val(lo) + val(lo + 1)) / 2.0;
            if a < m || (a == m && lo % 2 == 0) {
                lo
            } else {
                lo + 1
            }
        }
    };
    f16::from_bits(mag | if x.is_sign_negative() { 0x8000 } else { 0 })
}

fn ty16(shape: &[usize]) -> TensorType {
    TensorType::new(DType::F16, shape.to_vec())
}

fn func(
    name: &str,
    types: &[TensorType],
    body: impl FnOnce(&mut Builder, &[Value]) -> Result<Vec<Value>, IrError>,
) -> Func {
    Func { name: name.to_string(), ..common::build(types, body) }
}

fn run_with(f: &Func, opts: ExecOptions, inputs: &[&Tensor]) -> Vec<Tensor> {
    Executable::with_options(f.clone(), opts).unwrap().run(inputs).unwrap()
}

fn convert_fn(from: &TensorType, to: DType) -> Func {
    func("convert", &[from.clone()], |b, p| Ok(vec![b.convert(p[0], to)?]))
}

fn f16s(t: &Tensor) -> Vec<f16> {
    t.to_vec::<f16>().unwrap()
}

/// A deterministic stream of u64s (splitmix64).
struct Mix(u64);
impl Mix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// An f16 tensor of values uniform in [lo, hi), each rounded to f16.
    fn tensor(&mut self, shape: &[usize], lo: f64, hi: f64) -> Tensor {
        let ty = ty16(shape);
        let n = ty.numel();
        let v: Vec<f16> =
            (0..n).map(|_| f16_from_f64(lo + (hi - lo) * (self.next() >> 11) as f64 / (1u64 << 53) as f64)).collect();
        Tensor::from_vec(shape.to_vec(), v).unwrap()
    }
}

// ---------------------------------------------------------------- dtype

#[test]
fn dtype_f16_names_size_and_parse() {
    assert_eq!(DType::F16.size_bytes(), 2);
    assert!(DType::F16.is_float() && DType::F16.is_numeric() && !DType::F16.is_int());
    assert_eq!(DType::F16.name(), "f16");
    assert_eq!(DType::parse("f16"), Some(DType::F16));
    assert_eq!(DType::parse("float16"), Some(DType::F16));
    assert!(DType::ALL.contains(&DType::F16));
    // A constant of f16 type carries the f64 value rounded once to f16.
    let t = Tensor::full(&ty16(&[2]), 1.0 + 2f64.powi(-11) + 2f64.powi(-40));
    assert_eq!(f16s(&t), vec![f16::from_bits(0x3c01); 2]);
    assert_eq!(Tensor::scalar(f16::from_bits(0x3800)).to_scalar_f64().unwrap(), 0.5);
}

// ---------------------------------------------------------------- convert

#[test]
fn every_f16_bit_pattern_round_trips_through_f32() {
    let all: Vec<f16> = (0..=u16::MAX).map(f16::from_bits).collect();
    let x = Tensor::from_vec(vec![all.len()], all.clone()).unwrap();
    let to32 = convert_fn(&x.ty(), DType::F32);
    let back = convert_fn(&x.ty().with_dtype(DType::F32), DType::F16);
    for opts in all_options() {
        let wide = run_with(&to32, opts, &[&x]).remove(0);
        let w = wide.to_vec::<f32>().unwrap();
        for (h, &v) in all.iter().zip(&w) {
            if h.is_nan() {
                assert!(v.is_nan(), "{:#06x} -> {v}", h.to_bits());
            } else {
                assert_eq!(v.to_bits(), h.to_f32().to_bits(), "{:#06x}", h.to_bits());
            }
        }
        let narrow = f16s(&run_with(&back, opts, &[&wide]).remove(0));
        for (h, n) in all.iter().zip(&narrow) {
            if h.is_nan() {
                assert!(n.is_nan(), "{:#06x} -> {:#06x}", h.to_bits(), n.to_bits());
            } else {
                assert_eq!(n.to_bits(), h.to_bits());
            }
        }
        // f16 -> f64 is exact too.
        let to64 = convert_fn(&x.ty(), DType::F64);
        let w64 = run_with(&to64, opts, &[&x]).remove(0).to_vec::<f64>().unwrap();
        for (h, &v) in all.iter().zip(&w64) {
            assert!(h.is_nan() && v.is_nan() || v == h.to_f64(), "{:#06x}", h.to_bits());
        }
    }
}

#[test]
fn f64_to_f16_rounds_once_to_nearest_even() {
    let p = |e: i32| 2f64.powi(e);
    let xs = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        // Halfway between 1 and its successor (ties to even: 1), and between
        // the successor and the next (ties to even: up).
        1.0 + p(-11),
        1.0 + 3.0 * p(-11),
        // Just above halfway by less than f32 can hold: through f32 it
        // would round to the tie, then to even (1.0); directly it rounds up.
        1.0 + p(-11) + p(-40),
        -(1.0 + p(-11) + p(-40)),
        65504.0,
        65519.999,
        65520.0,
        -65520.0,
        1e10,
        -1e300,
        // Subnormals: the smallest, a tie down to zero, just above the tie,
        // the largest, and the smallest normal.
        p(-24),
        p(-25),
        p(-25) * (1.0 + p(-40)),
        -p(-25),
        p(-14) - p(-24),
        p(-14),
        6.1e-5,
        1e-10,
        0.1,
        1.0 / 3.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        f64::MIN_POSITIVE,
    ];
    // Besides the edge cases: every tie between neighbouring f16 values
    // and its f64 neighbours, and random doubles over f16's range.
    let mut xs = xs.to_vec();
    for h in 0..0x7c00u16 {
        let m = (f16::from_bits(h).to_f64() + f16::from_bits(h + 1).to_f64()) / 2.0;
        for v in [m, f64::from_bits(m.to_bits() + 1), f64::from_bits(m.to_bits() - 1)] {
            xs.extend([v, -v]);
        }
    }
    let mut rng = Mix(9);
    xs.extend((0..50_000).map(|_| {
        let b = rng.next();
        f64::from_bits(0x3e40_0000_0000_0000 + b % 0x02c0_0000_0000_0000) * if b >> 63 == 1 { -1.0 } else { 1.0 }
    }));
    for &v in &xs {
        let (got, want) = (f16_from_f64(v), ref_f16(v));
        assert!(got.to_bits() == want.to_bits() || got.is_nan() && want.is_nan(), "{v:e}: {got} vs {want}");
    }
    let x = Tensor::vec1(&xs);
    let f = convert_fn(&x.ty(), DType::F16);
    for opts in all_options() {
        let got = f16s(&run_with(&f, opts, &[&x]).remove(0));
        for (&v, g) in xs.iter().zip(&got) {
            let want = ref_f16(v);
            if v.is_nan() {
                assert!(g.is_nan());
            } else {
                assert_eq!(g.to_bits(), want.to_bits(), "{v:e}: got {g}, want {want}");
            }
        }
    }
    // The no-double-rounding case, spelled out (through f32 it would be 1.0).
    let tricky = 1.0 + p(-11) + p(-40);
    assert_eq!(f16_from_f64(tricky).to_f64(), 1.0 + p(-10));
    assert_eq!(ref_f16(tricky as f32 as f64).to_f64(), 1.0);
    // Overflow, max finite, signed zero.
    let got = f16s(&run_with(&f, ExecOptions::default(), &[&x]).remove(0));
    assert_eq!(got[8], f16::MAX);
    assert_eq!(got[9], f16::MAX);
    assert_eq!(got[10], f16::INFINITY);
    assert_eq!(got[11], f16::NEG_INFINITY);
    assert_eq!(got[1].to_bits(), 0x8000);
    assert_eq!(got[14].to_bits(), 1);
    assert_eq!(got[15].to_bits(), 0);
    assert_eq!(got[16].to_bits(), 1);
}

#[test]
fn f32_to_f16_agrees_with_half_on_many_values() {
    let mut rng = Mix(7);
    let mut xs: Vec<f32> = (0..200_000).map(|_| f32::from_bits(rng.next() as u32)).collect();
    // Values near f16's range, where the rounding is interesting.
    xs.extend((0..100_000).map(|_| {
        let b = rng.next();
        let mag = f32::from_bits(0x3300_0000 + (b as u32 % 0x1500_0000));
        if b >> 63 == 1 {
            -mag
        } else {
            mag
        }
    }));
    // Every f16 value and the midpoints between neighbours.
    for h in 0..0x7c00u16 {
        let a = f16::from_bits(h).to_f32();
        let b = f16::from_bits(h + 1).to_f32();
        xs.extend([a, (a + b) / 2.0, -(a + b) / 2.0]);
    }
    let x = Tensor::vec1(&xs);
    let f = convert_fn(&x.ty(), DType::F16);
    for opts in all_options() {
        let got = f16s(&run_with(&f, opts, &[&x]).remove(0));
        for (&v, g) in xs.iter().zip(&got) {
            let want = ref_f16(v as f64);
            // half's f32 conversion (the F16C instruction on this CPU, if it has one) agrees.
            assert!(want.to_bits() == f16::from_f32(v).to_bits() || v.is_nan());
            if v.is_nan() {
                assert!(g.is_nan());
            } else {
                assert_eq!(g.to_bits(), want.to_bits(), "{v:e} ({:#010x})", v.to_bits());
            }
        }
    }
}

#[test]
fn f16_to_int_saturates_and_maps_nan_to_zero() {
    let xs: Vec<f16> = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 65504.0, -65504.0, 1.5, -1.5, 0.99, -0.0, 2049.0]
        .iter()
        .map(|&v| ref_f16(v))
        .collect();
    let x = Tensor::vec1(&xs);
    for opts in all_options() {
        let i32s = run_with(&convert_fn(&x.ty(), DType::I32), opts, &[&x]).remove(0).to_vec::<i32>().unwrap();
        assert_eq!(i32s, vec![0, i32::MAX, i32::MIN, 65504, -65504, 1, -1, 0, 0, 2048]);
        let i64s = run_with(&convert_fn(&x.ty(), DType::I64), opts, &[&x]).remove(0).to_vec::<i64>().unwrap();
        assert_eq!(i64s, vec![0, i64::MAX, i64::MIN, 65504, -65504, 1, -1, 0, 0, 2048]);
        let bools = run_with(&convert_fn(&x.ty(), DType::Bool), opts, &[&x]).remove(0).to_vec::<bool>().unwrap();
        assert_eq!(bools, vec![true, true, true, true, true, true, true, true, false, true]);
    }
    // Back: bool and ints to f16 (ints round once; overflow to inf).
    let b = Tensor::vec1(&[true, false]);
    let got = f16s(&run_with(&convert_fn(&b.ty(), DType::F16), ExecOptions::default(), &[&b]).remove(0));
    assert_eq!(got, vec![f16::ONE, f16::ZERO]);
    let i = Tensor::vec1(&[2049i64, 2051, 65519, 65520, -70000, i64::MAX, 0]);
    let got = f16s(&run_with(&convert_fn(&i.ty(), DType::F16), ExecOptions::default(), &[&i]).remove(0));
    let want: Vec<f16> = [2048.0, 2052.0, 65504.0, f64::INFINITY, f64::NEG_INFINITY, f64::INFINITY, 0.0]
        .iter()
        .map(|&v| ref_f16(v))
        .collect();
    assert_eq!(got, want);
}

// ---------------------------------------------------------------- widening

const N: usize = 37;

fn widen_types() -> Vec<TensorType> {
    vec![ty16(&[N]), ty16(&[N]), ty16(&[4, 8]), ty16(&[8, 3])]
}

/// `x + y, x - y, x * y, x / y, sqrt(x), exp(x), sum(x * y), A @ B, x * 0.1`
/// on f16 operands.
fn program(b: &mut Builder, p: &[Value]) -> Result<Vec<Value>, IrError> {
    let (x, y, a, m) = (p[0], p[1], p[2], p[3]);
    let add = b.add(x, y)?;
    let sub = b.sub(x, y)?;
    let mul = b.mul(x, y)?;
    let div = b.div(x, y)?;
    let sqrt = b.sqrt(x)?;
    let exp = b.exp(x)?;
    let sum = b.reduce_sum(mul, &[0])?;
    let dot = b.matmul2d(a, m)?;
    let k = b.full(0.1, &ty16(&[N]))?;
    let scaled = b.mul(x, k)?;
    Ok(vec![add, sub, mul, div, sqrt, exp, sum, dot, scaled])
}

/// [`program`] written by hand in f32, converting to f16 after every op
/// (and widening every f16 operand): what `widen_f16` promises.
fn by_hand(b: &mut Builder, p: &[Value]) -> Result<Vec<Value>, IrError> {
    let w = |b: &mut Builder, v: Value| b.convert(v, DType::F32);
    let n = |b: &mut Builder, v: Value| b.convert(v, DType::F16);
    let (x, y, a, m) = (w(b, p[0])?, w(b, p[1])?, w(b, p[2])?, w(b, p[3])?);
    let add = b.add(x, y)?;
    let add = n(b, add)?;
    let sub = b.sub(x, y)?;
    let sub = n(b, sub)?;
    let mul32 = b.mul(x, y)?;
    let mul = n(b, mul32)?;
    let div = b.div(x, y)?;
    let div = n(b, div)?;
    let sqrt = b.sqrt(x)?;
    let sqrt = n(b, sqrt)?;
    let exp = b.exp(x)?;
    let exp = n(b, exp)?;
    // The sum reads the rounded product, accumulates in f32, rounds once.
    let mul_w = w(b, mul)?;
    let sum = b.reduce_sum(mul_w, &[0])?;
    let sum = n(b, sum)?;
    let dot = b.matmul2d(a, m)?;
    let dot = n(b, dot)?;
    // The constant holds 0.1 rounded to f16 (exact in f32).
    let k = b.full(ref_f16(0.1).to_f64(), &TensorType::new(DType::F32, vec![N]))?;
    let scaled = b.mul(x, k)?;
    let scaled = n(b, scaled)?;
    Ok(vec![add, sub, mul, div, sqrt, exp, sum, dot, scaled])
}

fn widen_inputs() -> Vec<Tensor> {
    let mut rng = Mix(11);
    vec![
        rng.tensor(&[N], 0.01, 60.0),
        rng.tensor(&[N], 0.5, 30.0),
        rng.tensor(&[4, 8], -4.0, 4.0),
        rng.tensor(&[8, 3], -4.0, 4.0),
    ]
}

#[test]
fn widened_program_equals_the_f32_program_rounded_per_op() {
    let f = func("f16_ops", &widen_types(), program);
    let h = func("by_hand", &widen_types(), by_hand);
    let inputs = widen_inputs();
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let want = run_with(&h, ExecOptions { fuse: false, compile: CompileMode::Off, ..ExecOptions::default() }, &refs);
    for opts in all_options() {
        let got = run_with(&f, opts, &refs);
        for t in &got {
            assert_eq!(t.dtype(), DType::F16);
        }
        assert_bitwise_eq(&got, &want);
        assert_bitwise_eq(&run_with(&h, opts, &refs), &want);
    }
    // + - * / sqrt are correctly rounded: against f64 arithmetic rounded once.
    let (x, y) = (f16s(&inputs[0]), f16s(&inputs[1]));
    let got = run_with(&f, ExecOptions::default(), &refs);
    type Op2 = fn(f64, f64) -> f64;
    let ops: [(usize, Op2); 5] =
        [(0, |a, b| a + b), (1, |a, b| a - b), (2, |a, b| a * b), (3, |a, b| a / b), (4, |a, _| a.sqrt())];
    for (k, op) in ops {
        let g = f16s(&got[k]);
        for i in 0..N {
            let want = ref_f16(op(x[i].to_f64(), y[i].to_f64()));
            assert_eq!(g[i].to_bits(), want.to_bits(), "output {k}, element {i}");
        }
    }
    // The sum accumulates in f32: within an f16 ulp or two of the exact sum
    // of the rounded products.
    let prods = f16s(&got[2]);
    let exact: f64 = prods.iter().map(|p| p.to_f64()).sum();
    let s = f16s(&got[6])[0].to_f64();
    assert!((s - exact).abs() <= exact.abs() * 2f64.powi(-10), "{s} vs {exact}");
}

#[test]
fn widen_leaves_no_f16_arithmetic_and_keeps_bodies_f16() {
    let f = func("f16_ops", &widen_types(), program);
    let g = graft_core::opt::widen_f16(&f).unwrap().expect("the program computes on f16");
    graft_core::ir::verify(&g).unwrap();
    assert_eq!(g.param_types(), f.param_types());
    assert_eq!(g.output_types(), f.output_types());
    for e in &g.eqns {
        let f16_io = e.inputs.iter().chain(&e.outputs).any(|&v| g.ty(v).dtype == DType::F16);
        assert!(!f16_io || matches!(e.prim, Prim::Convert(_)), "{} touches f16", e.prim.name());
    }
    // Each f16 operand is widened once, however many readers it has.
    let x_widenings = g.eqns.iter().filter(|e| matches!(e.prim, Prim::Convert(_)) && e.inputs == [g.params[0]]).count();
    assert_eq!(x_widenings, 1);
    // Idempotent, and nothing to do for an f32 program.
    assert!(graft_core::opt::widen_f16(&g).unwrap().is_none());
    let f32_only = func("f32", &[TensorType::new(DType::F32, vec![3])], |b, p| Ok(vec![b.exp(p[0])?]));
    assert!(graft_core::opt::widen_f16(&f32_only).unwrap().is_none());
    // A scan with an f16 carry keeps its f16 signature (its body widens
    // when the executor plans it).
    let s = scan_fn(4);
    let w = graft_core::opt::widen_f16(&s).unwrap().expect("the scan's operand is computed on");
    let scan = w.eqns.iter().find(|e| matches!(e.prim, Prim::Scan(_))).unwrap();
    assert!(scan.outputs.iter().all(|&v| w.ty(v).dtype == DType::F16));
}

// ---------------------------------------------------------------- scan

const K: f64 = 0.7;

/// `(c, x) -> (c * 0.7 + x, c)` on f16, scanned over `n` rows of 3.
fn scan_fn(n: usize) -> Func {
    let body = Arc::new(func("step", &[ty16(&[3]), ty16(&[3])], |b, p| {
        let k = b.full(K, &ty16(&[3]))?;
        let ck = b.mul(p[0], k)?;
        let c1 = b.add(ck, p[1])?;
        Ok(vec![c1, p[0]])
    }));
    func("scanned", &[ty16(&[3]), ty16(&[n, 3])], |b, p| {
        // Computed on before the loop, so the top level widens too.
        let c0 = b.neg(p[0])?;
        b.scan(body, &[], &[c0], &[p[1]], ScanOpts::new(n))
    })
}

#[test]
fn scan_with_an_f16_carry_rounds_every_step() {
    let n = 9;
    let mut rng = Mix(3);
    let c0 = rng.tensor(&[3], -2.0, 2.0);
    let xs = rng.tensor(&[n, 3], -1.0, 1.0);
    // Reference: each op in f32, rounded to f16.
    let k = ref_f16(K);
    let mut c: Vec<f16> = f16s(&c0).iter().map(|v| -*v).collect();
    let xv = f16s(&xs);
    let mut ys = Vec::new();
    for t in 0..n {
        ys.extend(c.iter().copied());
        for j in 0..3 {
            let ck = f16::from_f32(c[j].to_f32() * k.to_f32());
            c[j] = f16::from_f32(ck.to_f32() + xv[t * 3 + j].to_f32());
        }
    }
    let f = scan_fn(n);
    for opts in all_options() {
        let got = run_with(&f, opts, &[&c0, &xs]);
        assert_eq!(got[0].ty(), ty16(&[3]));
        assert_eq!(got[1].ty(), ty16(&[n, 3]));
        assert_eq!(bits(&got[0]), c.iter().map(|v| v.to_bits() as u64).collect::<Vec<_>>());
        assert_eq!(bits(&got[1]), ys.iter().map(|v| v.to_bits() as u64).collect::<Vec<_>>());
    }
}

// ---------------------------------------------------------------- grad

/// `sum(x * x * x) + sum(sin(x) * y)`.
fn loss(b: &mut Builder, p: &[Value]) -> Result<Vec<Value>, IrError> {
    let xx = b.mul(p[0], p[0])?;
    let x3 = b.mul(xx, p[0])?;
    let s = b.sin(p[0])?;
    let sy = b.mul(s, p[1])?;
    let t = b.add(x3, sy)?;
    Ok(vec![b.reduce_sum(t, &[0])?])
}

#[test]
fn grad_of_an_f16_function_agrees_with_f32_within_f16_ulps() {
    let n = 16;
    let mut rng = Mix(5);
    let x = rng.tensor(&[n], 0.25, 2.0);
    let y = rng.tensor(&[n], -1.0, 1.0);
    let f = func("loss16", &[ty16(&[n]), ty16(&[n])], loss);
    let g = grad(&f, &Wrt::All).unwrap();
    assert_eq!(g.output_types(), vec![ty16(&[n]), ty16(&[n])]);
    let t32 = TensorType::new(DType::F32, vec![n]);
    let f32_fn = func("loss32", &[t32.clone(), t32], loss);
    let g32 = grad(&f32_fn, &Wrt::All).unwrap();
    let (x32, y32) = (x.cast(DType::F32), y.cast(DType::F32));
    let want = Executable::new(g32).unwrap().run(&[&x32, &y32]).unwrap();
    for opts in all_options() {
        let got = run_with(&g, opts, &[&x, &y]);
        for (k, (gk, wk)) in got.iter().zip(&want).enumerate() {
            assert_eq!(gk.dtype(), DType::F16);
            for (i, (a, b)) in gk.to_f64_vec().iter().zip(wk.to_f64_vec()).enumerate() {
                assert!(a.is_finite(), "d/d{k}[{i}] = {a}");
                // A few f16 ulps of the f32 gradient (each op rounds once).
                let ulp = 2f64.powi(-10) * b.abs().max(2f64.powi(-14));
                assert!((a - b).abs() <= 4.0 * ulp + 1e-3, "d/d{k}[{i}]: {a} vs {b}");
            }
        }
    }
}

// ---------------------------------------------------------------- npy

#[test]
fn npy_round_trips_f16_and_reads_big_endian() {
    let vals: Vec<f16> =
        [0.0, -0.0, 1.0, 0.1, 65504.0, f64::INFINITY, f64::NAN, 6e-8, -2.5].iter().map(|&v| ref_f16(v)).collect();
    let t = Tensor::from_vec(vec![3, 3], vals.clone()).unwrap();
    let mut bytes = Vec::new();
    write_npy(&mut bytes, &t).unwrap();
    let header = String::from_utf8_lossy(&bytes[..bytes.len() - 18]);
    assert!(header.contains("'<f2'"), "{header}");
    let back = read_npy(&bytes[..]).unwrap();
    assert_eq!(back.ty(), ty16(&[3, 3]));
    assert_eq!(bits(&back), bits(&t));
    // The same array big-endian.
    let mut be = bytes[..bytes.len() - 18].to_vec();
    let at = be.windows(4).position(|w| w == b"<f2'").unwrap();
    be[at] = b'>';
    for v in &vals {
        be.extend(v.to_be_bytes());
    }
    let back = read_npy(&be[..]).unwrap();
    assert_eq!(bits(&back), bits(&t));
    // And printing: like f32.
    let p = Tensor::vec1(&[ref_f16(1.5), ref_f16(-2.0)]);
    assert_eq!(p.to_string(), "[ 1.5 -2. ]");
}

// ---------------------------------------------------------------- kernels

/// The widened `x * y + 1` on f16 as fused kernels: `kernel::ir::verify`
/// takes their f16 loads, conversions and stores, and refuses arithmetic on
/// an f16 register; the C backend compiles every kernel, the f16 ones
/// beside the f32 group, and they give the interpreter's bits.
#[test]
fn f16_kernels_verify_and_compile_to_the_interpreters_bits() {
    use graft_core::kernel::{verify, Access, Arg, Index, Inst, Kernel};
    let names_f16 = |k: &Kernel| k.args.iter().any(|a| a.dtype == DType::F16);
    let t16 = ty16(&[64]);
    // Another extent, so the f32 work is a group of its own.
    let t32 = TensorType::new(DType::F32, vec![32]);
    let f = func("mixed", &[t16.clone(), t16.clone(), t32], |b, p| {
        let xy = b.mul(p[0], p[1])?;
        let one = b.full(1.0, &t16)?;
        let h = b.add(xy, one)?;
        let e = b.exp(p[2])?;
        let two = b.full(2.0, &TensorType::new(DType::F32, vec![32]))?;
        Ok(vec![h, b.mul(e, two)?])
    });
    let mut m = Mix(16);
    let (x, y) = (m.tensor(&[64], -4.0, 4.0), m.tensor(&[64], -4.0, 4.0));
    let z = Tensor::from_vec(vec![32], (0..32).map(|i| i as f32 / 16.0).collect::<Vec<f32>>()).unwrap();
    let off = run_with(&f, ExecOptions { compile: CompileMode::Off, ..ExecOptions::default() }, &[&x, &y, &z]);
    let exe = Executable::with_options(f.clone(), ExecOptions { compile: CompileMode::Off, ..ExecOptions::default() })
        .unwrap();
    let kernels = exe.plan_kernels();
    let f16_kernels: Vec<&Kernel> = kernels.iter().filter(|k| names_f16(k)).collect();
    assert!(!f16_kernels.is_empty(), "the f16 group has a kernel form");
    for k in &f16_kernels {
        verify(k).unwrap();
    }
    // Arithmetic on f16 registers is refused.
    let add16 = Kernel {
        name: "add16".into(),
        extent: 4,
        args: vec![
            Arg { dtype: DType::F16, len: 4, access: Access::Read },
            Arg { dtype: DType::F16, len: 4, access: Access::Write },
        ],
        body: vec![
            Inst::Load { arg: 0, index: Index::Point },
            Inst::Binary(graft_core::ops::binary::Binary::Add, 0, 0),
            Inst::Store { arg: 1, value: 1, index: Index::Point },
        ],
    };
    let e = verify(&add16).unwrap_err();
    assert!(e.msg.contains("does not accept f16"), "{e}");
    if common::native::skip() {
        return;
    }
    let exe = Executable::with_options(f.clone(), ExecOptions { compile: CompileMode::Sync, ..ExecOptions::default() })
        .unwrap();
    let (ready, total) = exe.native_status();
    assert_eq!((ready, total), (kernels.len(), kernels.len()), "every kernel compiles, the f16 ones too");
    assert!(kernels.len() > f16_kernels.len(), "the f32 group has its own kernel");
    assert_bitwise_eq(&exe.run(&[&x, &y, &z]).unwrap(), &off);
}

/// An f16 `random_uniform` stays in `[0, 1)`: the f32 draw is truncated to
/// a multiple of 2^-10 (`opt::widen_f16`), where rounding it to the
/// nearest f16 would give 1.0 for draws at or above `1 - 2^-12`; all 1 024
/// values occur.
#[test]
fn f16_random_uniform_stays_below_one_on_a_grid_of_2_pow_minus_10() {
    let n = 1 << 16;
    let f = func("u16", &[TensorType::new(DType::I32, vec![2])], |b, p| {
        let u16 = b.random_uniform(p[0], &[n], DType::F16)?;
        let u32 = b.random_uniform(p[0], &[n], DType::F32)?;
        Ok(vec![u16, u32])
    });
    let key = Tensor::from_vec(vec![2], vec![7i32, 11]).unwrap();
    for opts in all_options() {
        let out = run_with(&f, opts, &[&key]);
        let (h, u) = (f16s(&out[0]), out[1].to_vec::<f32>().unwrap());
        let mut seen = vec![false; 1024];
        for (a, b) in h.iter().zip(&u) {
            let k = a.to_f64() * 1024.0;
            assert!((0.0..1024.0).contains(&k) && k.fract() == 0.0, "{a} is not k / 1024 in [0, 1)");
            // The same draw, truncated.
            assert_eq!(k, (*b as f64 * 1024.0).floor());
            seen[k as usize] = true;
        }
        assert!(seen.iter().all(|&s| s), "every k / 1024 occurs in 65 536 draws");
    }
}
