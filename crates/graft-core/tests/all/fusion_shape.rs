//! Fusion across the create and shape families: rank-0 constants broadcast
//! with `broadcast_in_dim` fuse as splats (the constant is folded at plan
//! time), non-elementwise equations between chain members are hoisted or
//! close the group they read, and results stay bitwise identical to
//! unfused execution on random programs mixing all of these.

use crate::common::native::assert_bitwise_eq;
use graft_core::kernel::CompileMode;
use graft_core::ops::binary::Binary;
use graft_core::ops::unary::Unary;
use graft_core::{Builder, DType, ExecOptions, Executable, Func, Tensor, TensorType, Value};

use proptest::prelude::*;

fn opts(fuse: bool, block: Option<usize>) -> ExecOptions {
    ExecOptions { fuse, block_elems: block, compile: CompileMode::Off, ..ExecOptions::default() }
}

fn data(ty: &TensorType, seed: u64) -> Tensor {
    Tensor::from_fn(ty, |i| {
        let mut z = seed.wrapping_add((i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        let r = ((z ^ (z >> 31)) >> 32) as u32;
        match r % 37 {
            0 => f64::NAN,
            1 => f64::INFINITY,
            2 => -0.0,
            _ => (r % 20_000) as f64 / 2_500.0 - 4.0,
        }
    })
}

fn run(f: &Func, o: ExecOptions, inputs: &[&Tensor]) -> (Vec<Tensor>, graft_core::RunStats, (usize, usize)) {
    let exe = Executable::with_options(f.clone(), o).unwrap();
    let (out, stats) = exe.run_with_stats(inputs).unwrap();
    (out, stats, exe.fusion_summary())
}

#[test]
fn scalar_constants_fuse_completely() {
    // x * 2.0 + 1.0: constant -> broadcast_in_dim -> mul, constant -> broadcast_in_dim -> add.
    let n = 100_000;
    let ty = TensorType::new(DType::F32, vec![n]);
    let mut b = Builder::new("affine");
    let x = b.param(ty.clone());
    let two = b.full(2.0, &ty).unwrap();
    let y = b.mul(x, two).unwrap();
    let one = b.full(1.0, &ty).unwrap();
    let z = b.add(y, one).unwrap();
    let f = b.finish(&[z]).unwrap();
    assert_eq!(f.count_prim("constant"), 2);
    let xin = data(&ty, 1);
    let (plain, ps, _) = run(&f, opts(false, None), &[&xin]);
    let (fused, fs, summary) = run(&f, opts(true, None), &[&xin]);
    assert_bitwise_eq(&plain, &fused);
    assert_eq!(summary, (1, 4));
    // Constants are folded at plan time: one kernel, and only the output buffer.
    assert_eq!((ps.kernels, fs.kernels), (6, 1));
    assert_eq!(fs.peak_bytes, n * 4);
    assert!(ps.peak_bytes >= 3 * n * 4, "unfused peak {}", ps.peak_bytes);
    let xs = xin.to_vec::<f32>().unwrap();
    let zs = fused[0].to_vec::<f32>().unwrap();
    for i in [0, 1, 4095, 4096, n - 1] {
        assert_eq!(zs[i].to_bits(), (xs[i] * 2.0 + 1.0).to_bits());
    }
}

#[test]
fn splats_of_runtime_scalars_and_size_one_shapes() {
    // A rank-0 parameter and a [1, 1] value computed at run time, both broadcast.
    let ty = TensorType::new(DType::F64, vec![3, 1000]);
    let mut b = Builder::new("scale");
    let x = b.param(ty.clone());
    let s = b.param(TensorType::scalar(DType::F64));
    let s_exp = b.exp(s).unwrap(); // scalar arithmetic: a group of its own count
    let s_sq = b.mul(s_exp, s).unwrap();
    let s11 = b.reshape(s_sq, &[1, 1]).unwrap();
    let bs = b.broadcast_in_dim(s, &[3, 1000], &[]).unwrap();
    let b11 = b.broadcast_in_dim(s11, &[3, 1000], &[0, 1]).unwrap();
    let y = b.mul(x, bs).unwrap();
    let z = b.sub(y, b11).unwrap();
    // The broadcast is also returned: it gets a buffer filled block by block.
    let f = b.finish(&[z, bs]).unwrap();
    let (xin, sin) = (data(&ty, 2), Tensor::scalar(0.75f64));
    let (plain, _, _) = run(&f, opts(false, None), &[&xin, &sin]);
    for block in [None, Some(3), Some(1000)] {
        let (fused, stats, summary) = run(&f, opts(true, block), &[&xin, &sin]);
        assert_bitwise_eq(&plain, &fused);
        // Groups: {exp, mul, reshape} on one element (a reshape is the
        // identity on flat data) and {3 splats, mul, sub} on 3000: the
        // returned splat stays, and its reader builds its own copy
        // (`fuse::unshare_splats`).
        assert_eq!(summary, (2, 8));
        assert_eq!(stats.kernels, 2);
    }
}

/// tanh, transpose (not reading the group), mul, exp, reshape (reading it),
/// reshape, add, neg over `rows x cols` f32.
fn mixed(rows: usize, cols: usize) -> (Func, Vec<Tensor>) {
    let ty = TensorType::new(DType::F32, vec![rows, cols]);
    let wty = TensorType::new(DType::F32, vec![cols, rows]);
    let mut b = Builder::new("mixed");
    let x = b.param(ty.clone());
    let w = b.param(wty.clone());
    let a = b.tanh(x).unwrap();
    let wt = b.transpose(w, &[1, 0]).unwrap();
    let c = b.mul(a, wt).unwrap();
    let d = b.exp(c).unwrap();
    let r = b.reshape(d, &[rows * cols]).unwrap();
    let r2 = b.reshape(r, &[rows, cols]).unwrap();
    let e = b.add(r2, a).unwrap();
    let g = b.neg(e).unwrap();
    (b.finish(&[g]).unwrap(), vec![data(&ty, 3), data(&wty, 4)])
}

#[test]
fn transpose_and_reshapes_fuse_into_one_group() {
    // The transpose (of a parameter) is a strided gather and the reshapes
    // are identities on flat data: all eight equations form one group.
    let (f, inputs) = mixed(8, 10);
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let (plain, _, _) = run(&f, opts(false, None), &refs);
    let (fused, stats, summary) = run(&f, opts(true, Some(33)), &refs);
    assert_bitwise_eq(&plain, &fused);
    assert_eq!(summary, (1, 8));
    assert_eq!(stats.kernels, 1);
}

#[test]
fn large_layout_equations_fuse_too() {
    // Layout equations fuse whatever their size (they are gathers, not
    // heavy operations), so the larger program is one group too.
    let (f, inputs) = mixed(40, 50);
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let (plain, _, _) = run(&f, opts(false, None), &refs);
    let (fused, stats, summary) = run(&f, opts(true, None), &refs);
    assert_bitwise_eq(&plain, &fused);
    assert_eq!(summary, (1, 8));
    assert_eq!(stats.kernels, 1);
}

/// Random programs over one shape mixing elementwise ops, `full` constants,
/// broadcasts of runtime scalars and reshape round trips (non-fusable readers).
#[derive(Debug, Clone)]
struct Spec {
    rows: usize,
    cols: usize,
    f64: bool,
    ops: Vec<(u8, u8, u8, u8)>,
    outs: Vec<u16>,
    block: Option<usize>,
    seed: u64,
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        1usize..30,
        1usize..200,
        any::<bool>(),
        prop::collection::vec(any::<(u8, u8, u8, u8)>(), 1..40),
        prop::collection::vec(any::<u16>(), 1..4),
        prop_oneof![Just(None), (1usize..300).prop_map(Some)],
        any::<u64>(),
    )
        .prop_map(|(rows, cols, f64, ops, outs, block, seed)| Spec { rows, cols, f64, ops, outs, block, seed })
}

fn build(s: &Spec) -> (Func, Vec<Tensor>) {
    let dt = if s.f64 { DType::F64 } else { DType::F32 };
    let ty = TensorType::new(dt, vec![s.rows, s.cols]);
    let mut b = Builder::new("random");
    let x = b.param(ty.clone());
    let y = b.param(ty.clone());
    let sc = b.param(TensorType::scalar(dt));
    let mut vals: Vec<Value> = vec![x, y];
    let mut scalars: Vec<Value> = vec![sc];
    let unary = [Unary::Neg, Unary::Exp, Unary::Tanh, Unary::Sin, Unary::Abs, Unary::Sqrt, Unary::Floor];
    let binary = [Binary::Add, Binary::Sub, Binary::Mul, Binary::Div, Binary::Max, Binary::Min, Binary::Pow];
    for &(k, p, q, r) in &s.ops {
        let a = vals[p as usize % vals.len()];
        let c = vals[q as usize % vals.len()];
        let v = match k % 8 {
            0 => b.unary(unary[r as usize % unary.len()], a).unwrap(),
            1 | 2 => b.binary(binary[r as usize % binary.len()], a, c).unwrap(),
            3 => {
                let k = b.full(r as f64 / 16.0 - 4.0, &ty).unwrap();
                b.mul(a, k).unwrap()
            }
            4 => {
                // Scalar arithmetic, then a broadcast of the runtime scalar.
                let s0 = scalars[q as usize % scalars.len()];
                let s1 = b.unary(unary[r as usize % unary.len()], s0).unwrap();
                scalars.push(s1);
                let bs = b.broadcast_in_dim(s1, &[s.rows, s.cols], &[]).unwrap();
                b.add(a, bs).unwrap()
            }
            5 => {
                let m = b.reshape(a, &[s.rows * s.cols]).unwrap();
                b.reshape(m, &[s.rows, s.cols]).unwrap()
            }
            6 => {
                let pr = b.lt(a, c).unwrap();
                b.select(pr, a, c).unwrap()
            }
            _ => {
                let other = if s.f64 { DType::F32 } else { DType::F64 };
                let w = b.convert(a, other).unwrap();
                let w = b.unary(unary[r as usize % unary.len()], w).unwrap();
                b.convert(w, dt).unwrap()
            }
        };
        vals.push(v);
    }
    let mut outs: Vec<Value> = s.outs.iter().map(|&o| vals[o as usize % vals.len()]).collect();
    outs.push(*scalars.last().unwrap());
    let inputs = vec![data(&ty, s.seed), data(&ty, s.seed ^ 1), data(&TensorType::scalar(dt), s.seed ^ 2)];
    (b.finish(&outs).unwrap(), inputs)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn fused_equals_unfused_with_splats_and_shape_ops(s in spec()) {
        let (f, inputs) = build(&s);
        let refs: Vec<&Tensor> = inputs.iter().collect();
        let (plain, ps, _) = run(&f, opts(false, None), &refs);
        let (fused, fs, _) = run(&f, opts(true, s.block), &refs);
        assert_bitwise_eq(&plain, &fused);
        prop_assert!(fs.kernels <= ps.kernels);
    }
}
