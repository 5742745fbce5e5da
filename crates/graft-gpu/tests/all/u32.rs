//! u32 on the device: WGSL's native `u32` (wrapping `+ - *`, unsigned `/`,
//! `%`, comparisons, `max`/`min`), division by zero giving 0 as on the CPU,
//! conversions to f32 rounded to nearest even in integer arithmetic, floats
//! to u32 truncating and saturating (NaN -> 0), and reductions: every result
//! bit for bit the CPU interpreter's, with nothing left on the host.

use crate::same_bits_on_device;
use graft_core::ops::binary::{Binary, Compare};
use graft_core::ops::unary::Unary;
use graft_core::{Builder, DType, Tensor, TensorType, Value};

const EDGES: [u32; 10] = [0, 1, 2, 3, 7, 0x7fff_ffff, 0x8000_0000, 0x8000_0001, 0xffff_fffe, 0xffff_ffff];

fn build(types: &[TensorType], body: impl FnOnce(&mut Builder, &[Value]) -> Vec<Value>) -> graft_core::Func {
    let mut b = Builder::new("f");
    let ps: Vec<Value> = types.iter().map(|t| b.param(t.clone())).collect();
    let outs = body(&mut b, &ps);
    b.finish(&outs).expect("builds")
}

fn vecu(v: Vec<u32>) -> Tensor {
    Tensor::from_vec(vec![v.len()], v).unwrap()
}

/// All pairs of edge values plus pseudo-random words.
fn operands() -> (Tensor, Tensor) {
    let mut a = Vec::new();
    let mut b = Vec::new();
    for &x in &EDGES {
        for &y in &EDGES {
            a.push(x);
            b.push(y);
        }
    }
    let mut s = 0x2545_f491u32;
    for _ in 0..1000 {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        a.push(s);
        b.push(if s.is_multiple_of(3) { s % 11 } else { s.rotate_left(7) });
    }
    (vecu(a), vecu(b))
}

#[test]
fn u32_arithmetic_division_and_comparisons_match_the_cpu() {
    let (x, y) = operands();
    let f = build(&[x.ty(), y.ty()], |b, p| {
        let mut outs = Vec::new();
        for op in [
            Binary::Add,
            Binary::Sub,
            Binary::Mul,
            Binary::Div,
            Binary::Rem,
            Binary::Max,
            Binary::Min,
            Binary::And,
            Binary::Or,
        ] {
            outs.push(b.binary(op, p[0], p[1]).unwrap());
        }
        for op in [Unary::Neg, Unary::Abs, Unary::Sign, Unary::Not] {
            outs.push(b.unary(op, p[0]).unwrap());
        }
        for op in Compare::ALL {
            outs.push(b.compare(op, p[0], p[1]).unwrap());
        }
        let lt = b.lt(p[0], p[1]).unwrap();
        outs.push(b.select(lt, p[0], p[1]).unwrap());
        let k = b.full(4294967295.0, &x.ty()).unwrap();
        outs.push(b.mul(p[0], k).unwrap());
        outs
    });
    same_bits_on_device(f, &[&x, &y]);
}

#[test]
fn u32_conversions_match_the_cpu() {
    let (x, _) = operands();
    let mut words = u32s(&x);
    // Rounding to f32: ties to even, just below and above them.
    words.extend([16_777_217, 16_777_219, 16_777_218, 4_294_967_167, 4_294_967_168, 4_294_967_169, 0x8000_0080]);
    let x = vecu(words);
    let f = build(&[x.ty()], |b, p| {
        [DType::F32, DType::I32, DType::Bool, DType::F16].iter().map(|&d| b.convert(p[0], d).unwrap()).collect()
    });
    same_bits_on_device(f, &[&x]);
    let fl: Vec<f32> = vec![
        0.0,
        -0.0,
        0.5,
        1.0,
        -0.5,
        -1.0,
        -3e9,
        2147483648.0,
        4294967040.0,
        4294967296.0,
        1e30,
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        123456.75,
        16777217.0,
    ];
    let xf = Tensor::from_vec(vec![fl.len()], fl).unwrap();
    let xi = Tensor::from_vec(vec![5], vec![0i32, 1, -1, i32::MIN, i32::MAX]).unwrap();
    let xb = Tensor::from_vec(vec![2], vec![true, false]).unwrap();
    for t in [&xf, &xi, &xb] {
        let f = build(&[t.ty()], |b, p| vec![b.convert(p[0], DType::U32).unwrap()]);
        same_bits_on_device(f, &[t]);
    }
}

fn u32s(t: &Tensor) -> Vec<u32> {
    t.to_vec::<u32>().unwrap()
}

#[test]
fn u32_reductions_match_the_cpu() {
    let (x, _) = operands();
    let n = x.numel() / 10 * 10;
    let x = Tensor::from_vec(vec![n / 10, 10], u32s(&x)[..n].to_vec()).unwrap();
    let f = build(&[x.ty()], |b, p| {
        vec![
            b.reduce_sum(p[0], &[1]).unwrap(),
            b.reduce_prod(p[0], &[1]).unwrap(),
            b.reduce_max(p[0], &[1]).unwrap(),
            b.reduce_min(p[0], &[1]).unwrap(),
            b.reduce_max(p[0], &[0]).unwrap(),
            b.argmax(p[0], 1, DType::I32).unwrap(),
            b.argmin(p[0], 1, DType::I32).unwrap(),
            b.cumsum(p[0], 1, false).unwrap(),
            b.cummax(p[0], 1, true).unwrap(),
            b.cummin(p[0], 0, false).unwrap(),
        ]
    });
    same_bits_on_device(f, &[&x]);
    // A line past the row form's bound (length^2 > 2^28) takes the
    // Hillis-Steele passes.
    let n = 20_000;
    let words: Vec<u32> = (0..n as u32).map(|i| i.wrapping_mul(0x9e37_79b9) ^ (i >> 3)).collect();
    let long = Tensor::from_vec(vec![1, n], words).unwrap();
    let g = build(&[long.ty()], |b, p| {
        vec![b.cumsum(p[0], 1, false).unwrap(), b.cummax(p[0], 1, false).unwrap(), b.cummin(p[0], 1, false).unwrap()]
    });
    same_bits_on_device(g, &[&long]);
    // The same data through an upload and download alone.
    let id = build(&[x.ty()], |b, p| vec![b.add(p[0], p[0]).unwrap()]);
    same_bits_on_device(id, &[&x]);
}

#[test]
fn u32_scatter_add_wraps_on_the_device() {
    use graft_core::ops::index::IndexMode;
    let x = vecu(vec![1, 2, 3, 4, 5, u32::MAX]);
    let i = Tensor::from_vec(vec![5, 1], vec![5i32, 0, 5, 9, -2]).unwrap();
    let u = vecu(vec![1, 10, 0x8000_0000, 1000, 0x8000_0001]);
    for mode in [IndexMode::Clip, IndexMode::Fill] {
        let f = build(&[x.ty(), i.ty(), u.ty()], |b, p| vec![b.scatter_add(p[0], p[1], p[2], 0, &[0], mode).unwrap()]);
        same_bits_on_device(f, &[&x, &i, &u]);
    }
}
