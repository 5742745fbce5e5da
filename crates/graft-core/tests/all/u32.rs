//! `u32` (NumPy/XLA `uint32`) as a full numeric dtype: every op family
//! against plain Rust `u32` arithmetic on the edge values (0, 1, 2^31 - 1,
//! 2^31, 2^32 - 1), with fusion and native compilation on and off (the C
//! kernels must agree bit for bit with the interpreter); conversions both
//! ways (out-of-range floats saturate, NaN -> 0, integers wrap);
//! reductions, cumulative ops, sort and argmax in unsigned order; `.npy`
//! `<u4` round trips; a `vmap` and a `scan` carrying u32; u32 is not
//! differentiable.

use crate::common;

use common::native::{all_options, check_native};
use graft_core::ad::{grad, Wrt};
use graft_core::batch::vmap_func;
use graft_core::npy::{read_npy, write_npy};
use graft_core::ops::binary::{Binary, Compare};
use graft_core::ops::scan::ScanOpts;
use graft_core::ops::unary::Unary;
use graft_core::{Builder, DType, Executable, Func, IrError, Tensor, TensorType, Value};
use std::sync::Arc;

const EDGES: [u32; 10] = [0, 1, 2, 7, 12_345, 0x7fff_ffff, 0x8000_0000, 0x8000_0001, 0xffff_fffe, 0xffff_ffff];

fn tyu(shape: &[usize]) -> TensorType {
    TensorType::new(DType::U32, shape.to_vec())
}

fn func(types: &[TensorType], body: impl FnOnce(&mut Builder, &[Value]) -> Result<Vec<Value>, IrError>) -> Func {
    common::build(types, body)
}

fn u32s(t: &Tensor) -> Vec<u32> {
    t.to_vec::<u32>().unwrap()
}

fn vecu(v: Vec<u32>) -> Tensor {
    Tensor::from_vec(vec![v.len()], v).unwrap()
}

/// Runs `f` under every option set and checks that all agree with the first
/// (the plain interpreter); returns its outputs.
fn run_all(f: &Func, inputs: &[&Tensor]) -> Vec<Tensor> {
    let mut first: Option<Vec<Tensor>> = None;
    for opts in all_options() {
        let got = Executable::with_options(f.clone(), opts).unwrap().run(inputs).unwrap();
        match &first {
            None => first = Some(got),
            Some(want) => common::native::assert_same_bits(&got, want, &format!("{opts:?}")),
        }
    }
    first.unwrap()
}

/// All ordered pairs of edge values, as two flat vectors.
fn pairs() -> (Vec<u32>, Vec<u32>) {
    let mut a = Vec::new();
    let mut b = Vec::new();
    for &x in &EDGES {
        for &y in &EDGES {
            a.push(x);
            b.push(y);
        }
    }
    (a, b)
}

// ---------------------------------------------------------------- dtype

#[test]
fn dtype_u32_names_size_and_parse() {
    assert_eq!(DType::U32.size_bytes(), 4);
    assert!(DType::U32.is_numeric() && DType::U32.is_unsigned() && DType::U32.is_integer());
    assert!(!DType::U32.is_float() && !DType::U32.is_int());
    assert!(DType::I32.is_integer() && !DType::I32.is_unsigned());
    assert_eq!(DType::U32.name(), "u32");
    assert_eq!(DType::parse("u32"), Some(DType::U32));
    assert_eq!(DType::parse("uint32"), Some(DType::U32));
    assert!(DType::ALL.contains(&DType::U32));
    // Constructors from f64 are exact on the whole range.
    let t = Tensor::full(&tyu(&[2]), 4294967295.0);
    assert_eq!(u32s(&t), vec![u32::MAX; 2]);
    assert_eq!(Tensor::scalar(7u32).to_scalar_f64().unwrap(), 7.0);
    // NumPy's layout: right-aligned to the widest element.
    assert_eq!(format!("{}", vecu(vec![0, 1, u32::MAX])), "[         0          1 4294967295]");
}

// ---------------------------------------------------------------- binary

fn reference(op: Binary, a: u32, b: u32) -> u32 {
    match op {
        Binary::Add => a.wrapping_add(b),
        Binary::Sub => a.wrapping_sub(b),
        Binary::Mul => a.wrapping_mul(b),
        // graft's integer convention: division and remainder by zero give 0.
        Binary::Div => a.checked_div(b).unwrap_or(0),
        Binary::Rem => a.checked_rem(b).unwrap_or(0),
        Binary::Max => a.max(b),
        Binary::Min => a.min(b),
        Binary::And => a & b,
        Binary::Or => a | b,
        _ => unreachable!(),
    }
}

#[test]
fn binary_ops_wrap_and_divide_unsigned() {
    let (a, b) = pairs();
    let (x, y) = (vecu(a.clone()), vecu(b.clone()));
    for op in crate::fusion::INT_BINARY {
        assert!(op.accepts(DType::U32), "{op:?}");
        let f = func(&[x.ty(), y.ty()], |bd, p| Ok(vec![bd.binary(op, p[0], p[1])?]));
        let got = u32s(&run_all(&f, &[&x, &y])[0]);
        for i in 0..a.len() {
            assert_eq!(got[i], reference(op, a[i], b[i]), "{op:?}({}, {})", a[i], b[i]);
        }
    }
    assert!(!Binary::Pow.accepts(DType::U32) && !Binary::Atan2.accepts(DType::U32));
}

#[test]
fn unary_ops_neg_wraps_abs_is_identity_sign_is_zero_or_one() {
    let x = vecu(EDGES.to_vec());
    for op in [Unary::Neg, Unary::Abs, Unary::Sign, Unary::Not] {
        let f = func(&[x.ty()], |b, p| Ok(vec![b.unary(op, p[0])?]));
        let got = u32s(&run_all(&f, &[&x])[0]);
        for (i, &v) in EDGES.iter().enumerate() {
            let want = match op {
                Unary::Neg => v.wrapping_neg(),
                Unary::Abs => v,
                Unary::Sign => (v != 0) as u32,
                Unary::Not => !v,
                _ => unreachable!(),
            };
            assert_eq!(got[i], want, "{op:?}({v})");
        }
    }
    for op in [Unary::Exp, Unary::Sqrt, Unary::Floor] {
        assert!(!op.accepts(DType::U32));
    }
}

#[test]
fn comparisons_are_unsigned() {
    let (a, b) = pairs();
    let (x, y) = (vecu(a.clone()), vecu(b.clone()));
    for op in Compare::ALL {
        let f = func(&[x.ty(), y.ty()], |bd, p| Ok(vec![bd.compare(op, p[0], p[1])?]));
        let got = run_all(&f, &[&x, &y])[0].to_vec::<bool>().unwrap();
        for i in 0..a.len() {
            let (p, q) = (a[i], b[i]);
            let want = match op {
                Compare::Eq => p == q,
                Compare::Ne => p != q,
                Compare::Lt => p < q,
                Compare::Le => p <= q,
                Compare::Gt => p > q,
                Compare::Ge => p >= q,
            };
            assert_eq!(got[i], want, "{op:?}({p}, {q})");
        }
    }
}

/// A fused chain of every u32 operation (loads, literals, arithmetic,
/// division, comparisons, selects, conversions both ways), compiled to C
/// and checked bit for bit against the interpreter.
#[test]
fn fused_u32_kernel_compiles_natively_bitwise() {
    if common::native::skip() {
        return;
    }
    let n = 1000;
    let mut s = 0x1234_5678u32;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        // Mostly random words, some edge values and small divisors.
        match s % 7 {
            0 => EDGES[(s >> 8) as usize % EDGES.len()],
            1 => s % 5,
            _ => s,
        }
    };
    let a: Vec<u32> = (0..n).map(|_| next()).collect();
    let b: Vec<u32> = (0..n).map(|_| next()).collect();
    let fl: Vec<f32> =
        (0..n).map(|i| [-1.5, 0.5, 3e9, 4.3e9, f32::NAN, f32::INFINITY, -0.0, 2147483648.0][i % 8]).collect();
    let (x, y) = (vecu(a), vecu(b));
    let z = Tensor::from_vec(vec![n], fl).unwrap();
    let f = func(&[x.ty(), y.ty(), z.ty()], |bd, p| {
        let k = bd.full(2654435769.0, &tyu(&[n]))?;
        let m = bd.mul(p[0], k)?;
        let s = bd.add(m, p[1])?;
        let d = bd.div(s, p[1])?;
        let r = bd.binary(Binary::Rem, p[0], p[1])?;
        let ng = bd.neg(d)?;
        let mx = bd.max(ng, r)?;
        let mn = bd.min(mx, p[0])?;
        let lt = bd.lt(mn, p[1])?;
        let sel = bd.select(lt, mn, s)?;
        let sg = bd.unary(Unary::Sign, sel)?;
        let nt = bd.unary(Unary::Not, sg)?;
        let an = bd.and(nt, sel)?;
        let or = bd.or(an, r)?;
        let sub = bd.sub(or, p[0])?;
        let f32v = bd.convert(sub, DType::F32)?;
        let f64v = bd.convert(sub, DType::F64)?;
        let i32v = bd.convert(sub, DType::I32)?;
        let i64v = bd.convert(sub, DType::I64)?;
        let bl = bd.convert(sub, DType::Bool)?;
        let from_f = bd.convert(p[2], DType::U32)?;
        let z64 = bd.convert(p[2], DType::F64)?;
        let from_d = bd.convert(z64, DType::U32)?;
        let back = bd.convert(i32v, DType::U32)?;
        let wide = bd.convert(i64v, DType::U32)?;
        let bb = bd.convert(bl, DType::U32)?;
        let t1 = bd.add(back, wide)?;
        let t2 = bd.add(t1, bb)?;
        Ok(vec![f32v, f64v, i32v, i64v, bl, from_f, from_d, t2])
    });
    let exe = check_native(&f, &[x, y, z.clone()]);
    let got = exe.run(&[&vecu(EDGES.to_vec()[..1].repeat(n)), &vecu(vec![3; n]), &z]).unwrap();
    // Spot check against Rust `as`.
    let zs = z.to_vec::<f32>().unwrap();
    let want: Vec<u32> = zs.iter().map(|&v| v as u32).collect();
    assert_eq!(u32s(&got[5]), want);
    assert_eq!(u32s(&got[6]), zs.iter().map(|&v| v as f64 as u32).collect::<Vec<_>>());
}

// ---------------------------------------------------------------- convert

fn convert_all(x: &Tensor, to: DType) -> Tensor {
    let f = func(&[x.ty()], |b, p| Ok(vec![b.convert(p[0], to)?]));
    run_all(&f, &[x]).remove(0)
}

#[test]
fn conversions_from_u32() {
    let mut vals = EDGES.to_vec();
    // Rounding to f32: 2^24 + 1 (tie, to even), 2^32 - 129 (below the tie),
    // 2^32 - 128 (the tie up to 2^32).
    vals.extend([16_777_217, 16_777_219, 4_294_967_167, 4_294_967_168]);
    let x = vecu(vals.clone());
    let f32s = convert_all(&x, DType::F32).to_vec::<f32>().unwrap();
    let f64s = convert_all(&x, DType::F64).to_vec::<f64>().unwrap();
    let i32s = convert_all(&x, DType::I32).to_vec::<i32>().unwrap();
    let i64s = convert_all(&x, DType::I64).to_vec::<i64>().unwrap();
    let bools = convert_all(&x, DType::Bool).to_vec::<bool>().unwrap();
    let f16s = convert_all(&x, DType::F16).to_vec::<graft_core::half::f16>().unwrap();
    for (i, &v) in vals.iter().enumerate() {
        assert_eq!(f32s[i].to_bits(), (v as f32).to_bits(), "{v} -> f32");
        assert_eq!(f64s[i], v as f64);
        assert_eq!(i32s[i], v as i32, "{v} -> i32 wraps");
        assert_eq!(i64s[i], v as i64, "{v} -> i64 zero-extends");
        assert_eq!(bools[i], v != 0);
        assert_eq!(f16s[i], graft_core::dtype::f16_from_f64(v as f64), "{v} -> f16");
    }
    assert_eq!(f32s[vals.len() - 1], 4294967296.0);
    assert_eq!(i32s[7], i32::MIN + 1);
    assert_eq!(i64s[9], 4294967295);
    assert!(f16s[9].is_infinite());
}

#[test]
fn conversions_to_u32_saturate_and_wrap() {
    let fl = [
        0.0,
        -0.0,
        0.99,
        1.0,
        -0.5,
        -1.0,
        -1e30,
        2147483648.0,
        4294967040.0,
        4294967295.0,
        4294967295.9,
        4294967296.0,
        1e30,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        123456.75,
    ];
    let x64 = Tensor::from_vec(vec![fl.len()], fl.to_vec()).unwrap();
    let got = u32s(&convert_all(&x64, DType::U32));
    for (i, &v) in fl.iter().enumerate() {
        assert_eq!(got[i], v as u32, "{v} as u32");
    }
    assert_eq!(got[10], u32::MAX);
    assert_eq!(got[5], 0);
    let f32v: Vec<f32> = fl.iter().map(|&v| v as f32).collect();
    let x32 = Tensor::from_vec(vec![fl.len()], f32v.clone()).unwrap();
    let got = u32s(&convert_all(&x32, DType::U32));
    for (i, &v) in f32v.iter().enumerate() {
        assert_eq!(got[i], v as u32, "{v}f32 as u32");
    }
    let halfs: Vec<graft_core::half::f16> = [0.0, -3.0, 1.5, 65504.0, f64::NAN, f64::INFINITY]
        .iter()
        .map(|&v| graft_core::dtype::f16_from_f64(v))
        .collect();
    let xh = Tensor::from_vec(vec![halfs.len()], halfs.clone()).unwrap();
    assert_eq!(u32s(&convert_all(&xh, DType::U32)), vec![0, 0, 1, 65504, 0, u32::MAX]);
    let ints = [0i32, 1, -1, i32::MIN, i32::MAX];
    let xi = Tensor::from_vec(vec![5], ints.to_vec()).unwrap();
    assert_eq!(u32s(&convert_all(&xi, DType::U32)), ints.iter().map(|&v| v as u32).collect::<Vec<_>>());
    let longs = [0i64, -1, 1 << 32, (1 << 32) + 5, i64::MIN, i64::MAX];
    let xl = Tensor::from_vec(vec![6], longs.to_vec()).unwrap();
    assert_eq!(u32s(&convert_all(&xl, DType::U32)), vec![0, u32::MAX, 0, 5, 0, u32::MAX]);
    let xb = Tensor::from_vec(vec![2], vec![true, false]).unwrap();
    assert_eq!(u32s(&convert_all(&xb, DType::U32)), vec![1, 0]);
}

// ---------------------------------------------------------------- reductions

#[test]
fn reductions_wrap_and_order_unsigned() {
    let x = Tensor::from_vec(vec![2, 5], vec![0xffff_ffffu32, 1, 0x8000_0000, 2, 7, 3, 0, 0x7fff_ffff, 0x8000_0000, 1])
        .unwrap();
    let xs = u32s(&x);
    let f = func(&[x.ty()], |b, p| {
        Ok(vec![
            b.reduce_sum(p[0], &[1])?,
            b.reduce_prod(p[0], &[1])?,
            b.reduce_max(p[0], &[1])?,
            b.reduce_min(p[0], &[1])?,
            b.argmax(p[0], 1, DType::I32)?,
            b.argmin(p[0], 1, DType::I32)?,
            b.cumsum(p[0], 1, false)?,
            b.cummax(p[0], 1, false)?,
            b.argsort(p[0], 1, DType::I32)?,
            b.reduce_sum(p[0], &[0, 1])?,
        ])
    });
    let out = run_all(&f, &[&x]);
    let rows: Vec<&[u32]> = xs.chunks(5).collect();
    let fold = |g: &dyn Fn(u32, u32) -> u32, init: u32| {
        rows.iter().map(|r| r.iter().fold(init, |a, &v| g(a, v))).collect::<Vec<_>>()
    };
    assert_eq!(u32s(&out[0]), fold(&|a, v| a.wrapping_add(v), 0));
    assert_eq!(u32s(&out[1]), fold(&|a, v| a.wrapping_mul(v), 1));
    assert_eq!(u32s(&out[2]), vec![0xffff_ffff, 0x8000_0000]);
    assert_eq!(u32s(&out[3]), vec![1, 0]);
    assert_eq!(out[4].to_vec::<i32>().unwrap(), vec![0, 3]);
    assert_eq!(out[5].to_vec::<i32>().unwrap(), vec![1, 1]);
    let mut cs = Vec::new();
    let mut cm = Vec::new();
    for r in &rows {
        let (mut s, mut m) = (0u32, 0u32);
        for &v in r.iter() {
            s = s.wrapping_add(v);
            m = m.max(v);
            cs.push(s);
            cm.push(m);
        }
    }
    assert_eq!(u32s(&out[6]), cs);
    assert_eq!(u32s(&out[7]), cm);
    assert_eq!(out[8].to_vec::<i32>().unwrap(), vec![1, 3, 4, 2, 0, 1, 4, 0, 2, 3]);
    assert_eq!(u32s(&out[9]), vec![xs.iter().fold(0u32, |a, &v| a.wrapping_add(v))]);
    // Empty reductions give the identities: 0 for max, 2^32 - 1 for min.
    let e = Tensor::zeros(&tyu(&[0]));
    let g = func(&[e.ty()], |b, p| Ok(vec![b.reduce_max(p[0], &[0])?, b.reduce_min(p[0], &[0])?]));
    let out = run_all(&g, &[&e]);
    assert_eq!((u32s(&out[0]), u32s(&out[1])), (vec![0], vec![u32::MAX]));
}

#[test]
fn dot_general_wraps() {
    let a = Tensor::from_vec(vec![2, 2], vec![0xffff_ffffu32, 2, 0x8000_0000, 3]).unwrap();
    let b = Tensor::from_vec(vec![2, 1], vec![3u32, 0x8000_0001]).unwrap();
    let f = func(&[a.ty(), b.ty()], |bd, p| Ok(vec![bd.dot_general(p[0], p[1], &[1], &[0], &[], &[])?]));
    let got = u32s(&run_all(&f, &[&a, &b])[0]);
    let av = u32s(&a);
    let want: Vec<u32> =
        (0..2).map(|i| av[2 * i].wrapping_mul(3).wrapping_add(av[2 * i + 1].wrapping_mul(0x8000_0001))).collect();
    assert_eq!(got, want);
}

#[test]
fn iota_and_full_of_u32() {
    let f = func(&[], |b, _| Ok(vec![b.iota(DType::U32, &[2, 3], 1)?, b.scalar(4294967295.0, DType::U32)?]));
    let out = run_all(&f, &[]);
    assert_eq!(u32s(&out[0]), vec![0, 1, 2, 0, 1, 2]);
    assert_eq!(u32s(&out[1]), vec![u32::MAX]);
}

// ---------------------------------------------------------------- npy

#[test]
fn npy_round_trip_is_little_endian_u4() {
    let x = Tensor::from_vec(vec![2, 3], vec![0u32, 1, 0x7fff_ffff, 0x8000_0000, 0xffff_fffe, u32::MAX]).unwrap();
    let mut buf = Vec::new();
    write_npy(&mut buf, &x).unwrap();
    let header = String::from_utf8_lossy(&buf[..128.min(buf.len())]).to_string();
    assert!(header.contains("'descr': '<u4'"), "{header}");
    let back = read_npy(&buf[..]).unwrap();
    assert_eq!(back, x);
    // NumPy's bytes for np.array([1, 4294967295], dtype='>u4') (big-endian) read too.
    let mut be = b"\x93NUMPY\x01\x00".to_vec();
    let mut h = "{'descr': '>u4', 'fortran_order': False, 'shape': (2,), }".to_string();
    while !(10 + h.len() + 1).is_multiple_of(64) {
        h.push(' ');
    }
    h.push('\n');
    be.extend((h.len() as u16).to_le_bytes());
    be.extend(h.as_bytes());
    be.extend(1u32.to_be_bytes());
    be.extend(u32::MAX.to_be_bytes());
    assert_eq!(u32s(&read_npy(&be[..]).unwrap()), vec![1, u32::MAX]);
    // Other unsigned widths are still refused, by name.
    let mut bad = be[..10 + h.len()].to_vec();
    let at = bad.windows(3).position(|w| w == b">u4").unwrap();
    bad[at + 2] = b'2';
    let e = read_npy(&bad[..]).unwrap_err().to_string();
    assert!(e.contains("u2") && e.contains("u32"), "{e}");
}

// ---------------------------------------------------------------- transforms

#[test]
fn vmap_of_a_u32_function() {
    let f = func(&[tyu(&[3]), tyu(&[])], |b, p| {
        let s = b.broadcast_in_dim(p[1], &[3], &[])?;
        let m = b.mul(p[0], s)?;
        let d = b.div(m, p[0])?;
        Ok(vec![b.reduce_max(d, &[0])?, b.add(m, d)?])
    });
    let n = 4;
    let vf = vmap_func(&f, &[Some(0), None], &[Some(0), Some(1)], n).unwrap();
    let xs: Vec<u32> = (0..n * 3).map(|i| (i as u32).wrapping_mul(0x9e37_79b9)).collect();
    let x = Tensor::from_vec(vec![n, 3], xs.clone()).unwrap();
    let k = Tensor::scalar(0xdead_beefu32);
    let out = run_all(&vf, &[&x, &k]);
    assert_eq!(out[1].shape(), &[3, n]);
    let (o0, o1) = (u32s(&out[0]), u32s(&out[1]));
    for e in 0..n {
        let row = &xs[e * 3..e * 3 + 3];
        let m: Vec<u32> = row.iter().map(|v| v.wrapping_mul(0xdead_beef)).collect();
        let d: Vec<u32> = m.iter().zip(row).map(|(m, v)| m.checked_div(*v).unwrap_or(0)).collect();
        assert_eq!(o0[e], *d.iter().max().unwrap());
        for j in 0..3 {
            assert_eq!(o1[j * n + e], m[j].wrapping_add(d[j]));
        }
    }
}

#[test]
fn scan_carries_a_u32_lcg() {
    // Numerical Recipes' LCG, c <- c * 1664525 + 1013904223 (mod 2^32), and
    // the carry's top bit as a u32 output per step.
    let n = 20;
    let body = Arc::new(func(&[tyu(&[2]), tyu(&[2])], |b, p| {
        let a = b.full(1664525.0, &tyu(&[2]))?;
        let c = b.full(1013904223.0, &tyu(&[2]))?;
        let m = b.mul(p[0], a)?;
        let m = b.add(m, c)?;
        let m = b.add(m, p[1])?;
        let top = b.full(2147483648.0, &tyu(&[2]))?;
        let bit = b.div(m, top)?;
        Ok(vec![m, bit])
    }));
    let f = func(&[tyu(&[2]), tyu(&[n, 2])], |b, p| b.scan(body, &[], &[p[0]], &[p[1]], ScanOpts::new(n)));
    let c0 = vecu(vec![0, u32::MAX]);
    let xs: Vec<u32> = (0..2 * n as u32).map(|i| i * 3).collect();
    let x = Tensor::from_vec(vec![n, 2], xs.clone()).unwrap();
    let out = run_all(&f, &[&c0, &x]);
    let mut c = [0u32, u32::MAX];
    let mut bits = Vec::new();
    for t in 0..n {
        for j in 0..2 {
            c[j] = c[j].wrapping_mul(1664525).wrapping_add(1013904223).wrapping_add(xs[2 * t + j]);
            bits.push(c[j] >> 31);
        }
    }
    assert_eq!(u32s(&out[0]), c.to_vec());
    assert_eq!(u32s(&out[1]), bits);
}

#[test]
fn u32_is_not_differentiable() {
    let f = func(&[TensorType::scalar(DType::F64), TensorType::scalar(DType::U32)], |b, p| {
        let c = b.convert(p[1], DType::F64)?;
        Ok(vec![b.mul(p[0], c)?])
    });
    let e = grad(&f, &Wrt::Positions(vec![1])).unwrap_err().to_string();
    assert!(e.contains("parameter 1 of `f` has type u32[], which is not differentiable"), "{e}");
    // Wrt::All skips it; the derivative in x is the converted u32.
    let g = grad(&f, &Wrt::All).unwrap();
    let out = common::run(&g, &[Tensor::scalar(2.0f64), Tensor::scalar(u32::MAX)]);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].to_vec::<f64>().unwrap(), vec![4294967295.0]);
}
