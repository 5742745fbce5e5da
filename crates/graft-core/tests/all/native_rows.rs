//! Row kernels (`kernel::rows`): softmax, log-softmax, logsumexp, layer
//! norm and their gradients run as one native kernel per region, bitwise
//! equal to the interpreter (reductions in the same pairwise order, NaN and
//! infinities included); the printer and verifier of row kernels.
//!
//! These tests need a C compiler (`cc`). Without one they fail, unless
//! `GRAFT_SKIP_CC_TESTS=1` is set, in which case each says it skipped.

use crate::common;

use common::native::{check_native, data, opts, skip};
use graft_core::ad::{grad, Wrt};
use graft_core::composite::{norm, reduce};
use graft_core::kernel::{self, Access, Arg, CompileMode, Index, Inner, Inst, Kernel, Reduction};
use graft_core::ops::binary::Binary;
use graft_core::ops::reduce::ReduceKind;
use graft_core::ops::unary::Unary;
use graft_core::{Builder, DType, Executable, Func, TensorType};
use proptest::prelude::*;

/// One-parameter programs over `x: shape`, each a reduction with work
/// around it.
fn program(which: &str, dtype: DType, shape: &[usize]) -> Func {
    let ty = TensorType::new(dtype, shape.to_vec());
    let last = shape.len() - 1;
    let mut b = Builder::new(which);
    let x = b.param(ty);
    let y = match which {
        "softmax" => reduce::softmax(&mut b, x, last).unwrap(),
        "log_softmax" => reduce::log_softmax(&mut b, x, last).unwrap(),
        "logsumexp" => reduce::logsumexp(&mut b, x, &[last], false).unwrap(),
        "layer_norm" => {
            let g = b.param(TensorType::new(dtype, vec![shape[last]]));
            norm::layer_norm(&mut b, x, g, None, 1e-5).unwrap()
        }
        other => unreachable!("test program {other}"),
    };
    b.finish(&[y]).unwrap()
}

/// `sum(softmax(x) * w)`: its gradient holds the softmax VJP's row work.
fn softmax_loss(shape: &[usize]) -> Func {
    let ty = TensorType::new(DType::F64, shape.to_vec());
    let mut b = Builder::new("loss");
    let x = b.param(ty.clone());
    let w = b.param(ty);
    let s = reduce::softmax(&mut b, x, shape.len() - 1).unwrap();
    let p = b.mul(s, w).unwrap();
    let all: Vec<usize> = (0..shape.len()).collect();
    let l = b.reduce_sum(p, &all).unwrap();
    b.finish(&[l]).unwrap()
}

fn inputs(f: &Func, seed: u64) -> Vec<graft_core::Tensor> {
    f.params.iter().enumerate().map(|(k, &p)| data(f.ty(p), seed + k as u64)).collect()
}

fn row_kernels(exe: &Executable) -> Vec<Kernel> {
    kernel::kernels_of(exe).into_iter().filter(|k| k.body.iter().any(|i| matches!(i, Inst::Reduce(_)))).collect()
}

fn count(k: &Kernel, pred: impl Fn(&Inst) -> bool) -> usize {
    let inner = |i: &Inst| -> usize {
        match i {
            Inst::Reduce(r) => r.inner.body.iter().filter(|x| pred(x)).count(),
            Inst::Map(m) => m.body.iter().filter(|x| pred(x)).count(),
            _ => 0,
        }
    };
    k.body.iter().map(|i| pred(i) as usize + inner(i)).sum()
}

#[test]
fn softmax_family_runs_as_one_row_kernel() {
    // (program, reductions, values kept in scratch)
    for (which, reductions, saves) in
        [("softmax", 2, 1), ("log_softmax", 2, 0), ("logsumexp", 2, 0), ("layer_norm", 2, 0)]
    {
        let f = program(which, DType::F32, &[6, 40]);
        let exe = Executable::with_options(f, opts(CompileMode::Off)).unwrap();
        let all = kernel::kernels_of(&exe);
        assert_eq!(all.len(), 1, "{which}: {} kernels:\n{}", all.len(), list(&all));
        let k = &all[0];
        assert_eq!(count(k, |i| matches!(i, Inst::Reduce(_))), reductions, "{which}:\n{k}");
        assert_eq!(count(k, |i| matches!(i, Inst::Save { .. })), saves, "{which}:\n{k}");
        assert_eq!(k.extent, 6);
    }
}

fn list(ks: &[Kernel]) -> String {
    ks.iter().map(|k| k.to_string()).collect::<Vec<_>>().join("\n")
}

#[test]
fn row_kernels_are_bitwise_equal_to_the_interpreter() {
    if skip() {
        return;
    }
    // Rows shorter than a vector, not a multiple of 16, longer than a
    // 256-element leaf (uneven halving), three-dimensional inputs.
    let shapes: [&[usize]; 6] = [&[3, 7], &[5, 16], &[4, 37], &[3, 333], &[2, 1027], &[2, 3, 90]];
    for which in ["softmax", "log_softmax", "logsumexp", "layer_norm"] {
        for dtype in [DType::F32, DType::F64] {
            for shape in shapes {
                let f = program(which, dtype, shape);
                let exe = check_native(&f, &inputs(&f, 7));
                assert_eq!(row_kernels(&exe).len(), 1, "{which} {dtype} {shape:?}");
            }
        }
    }
}

/// Rows whose reduction tree ends in two or four equal leaves fold them
/// in lockstep (`render_c`, `render_lockstep_leaves`): the same bits as
/// the interpreter, with finite data (max/min take their fast path), with
/// the usual NaNs and infinities, and with one NaN in one leaf only (that
/// leaf is redone alone).
#[test]
fn lockstep_leaves_are_bitwise_equal() {
    if skip() {
        return;
    }
    let finite = |t: &graft_core::Tensor| {
        let v: Vec<f64> = (0..t.numel())
            .map(|i| {
                let x = t.storage().get_f64(i);
                if x.is_finite() {
                    x
                } else {
                    (i % 13) as f64 * 0.25 - 1.5
                }
            })
            .collect();
        graft_core::Tensor::from_fn(&t.ty(), |i| v[i])
    };
    // Two leaves (300, 264: with a tail), four leaves (1024, 1000, 520),
    // four-leaf subtrees of a longer row (4096).
    let shapes: [&[usize]; 6] = [&[3, 300], &[2, 264], &[2, 1024], &[2, 1000], &[2, 520], &[2, 4096]];
    for which in ["softmax", "logsumexp", "layer_norm"] {
        for dtype in [DType::F32, DType::F64] {
            for shape in shapes {
                let f = program(which, dtype, shape);
                let raw = inputs(&f, 5);
                let clean: Vec<_> = raw.iter().map(finite).collect();
                let mut one_nan = clean.clone();
                let c = shape[shape.len() - 1];
                let at = c + 3 * c / 4 + 1; // the second row's last leaf
                one_nan[0] = graft_core::Tensor::from_fn(&clean[0].ty(), |i| {
                    if i == at {
                        f64::NAN
                    } else {
                        clean[0].storage().get_f64(i)
                    }
                });
                for ins in [&raw, &clean, &one_nan] {
                    let exe = check_native(&f, ins);
                    assert_eq!(row_kernels(&exe).len(), 1, "{which} {dtype} {shape:?}");
                }
            }
        }
    }
}

#[test]
fn softmax_gradient_rows_are_bitwise_equal() {
    if skip() {
        return;
    }
    for shape in [&[4, 50][..], &[3, 300]] {
        let g = grad(&softmax_loss(shape), &Wrt::Positions(vec![0])).unwrap();
        let exe = check_native(&g, &inputs(&g, 3));
        assert!(!row_kernels(&exe).is_empty(), "the softmax VJP should have a row kernel");
    }
}

#[test]
fn printer_shows_reductions_saves_and_maps() {
    let exe = Executable::with_options(program("softmax", DType::F32, &[2, 20]), opts(CompileMode::Off)).unwrap();
    let text = kernel::kernels_of(&exe)[0].to_string();
    let want = "\
kernel rk0(in a0: f32[40], out a1: f32[40]) over i < 2 {
  %0 = reduce_max over j = i * 20 + k, k < 20 {
    $0 = load a0[j]
  } of $0
  %1 = abs %0
  %2 = inff32
  %3 = lt %1, %2
  %4 = 0.0f32
  %5 = select %3, %0, %4
  %6 = reduce_sum over j = i * 20 + k, k < 20 {
    $0 = load a0[j]
    $1 = outer %5
    $2 = sub $0, $1
    $3 = exp $2
    save s0[k] = $3
  } of $3
  %7 = 1.0f32
  %8 = div %7, %6
  map over j = i * 20 + k, k < 20 {
    $0 = restore s0[k]
    $1 = outer %8
    $2 = mul $0, $1
    store a1[j] = $2
  }
}";
    assert_eq!(text, want);
}

#[test]
fn verifier_rejects_malformed_row_kernels() {
    let rd = |n| Arg { dtype: DType::F32, len: n, access: Access::Read };
    let wr = |n| Arg { dtype: DType::F32, len: n, access: Access::Write };
    let load = Inst::Load { arg: 0, index: Index::Point };
    let reduce = |body: Vec<Inst>, value| {
        Inst::Reduce(Box::new(Reduction { kind: ReduceKind::Sum, inner: Inner { len: 4, body }, value }))
    };
    let k = |body, args| Kernel { name: "r".into(), args, extent: 2, body };
    let cases: Vec<(Kernel, &str)> = vec![
        (k(vec![Inst::Outer(0)], vec![]), "outside an inner body"),
        (k(vec![reduce(vec![Inst::Restore(0)], 0)], vec![]), "which no earlier reduction saved"),
        (
            k(
                vec![reduce(vec![load.clone(), Inst::Store { arg: 1, value: 0, index: Index::Point }], 0)],
                vec![rd(8), wr(8)],
            ),
            "stores",
        ),
        (k(vec![reduce(vec![load.clone(), reduce(vec![], 0)], 0)], vec![rd(8)]), "nested"),
        (
            k(vec![reduce(vec![load.clone(), Inst::Convert(DType::Bool, 0)], 1)], vec![rd(8)]),
            "floating-point, i32 or u32 only",
        ),
        (k(vec![reduce(vec![load.clone()], 0)], vec![rd(6)]), "point load from a buffer of 6"),
        (
            k(
                vec![
                    reduce(vec![load.clone()], 0),
                    Inst::Map(Box::new(Inner { len: 4, body: vec![load.clone(), Inst::Save { slot: 0, value: 0 }] })),
                ],
                vec![rd(8)],
            ),
            "a map saves",
        ),
        (k(vec![reduce(vec![load.clone(), Inst::Outer(3)], 0)], vec![rd(8)]), "outer %3"),
    ];
    for (k, want) in cases {
        let e = kernel::verify(&k).expect_err(want).to_string();
        assert!(e.contains(want), "{e:?} should contain {want:?}");
    }
}

/// A random row program over `x: [r, c]`: full values (elementwise ops,
/// rows broadcast back), row values (reductions of full values, row-wise
/// ops), and both kinds returned.
fn random_rows(r: usize, c: usize, dtype: DType, script: &[(u8, u8, u8)]) -> Func {
    let mut b = Builder::new("rows");
    let x = b.param(TensorType::new(dtype, vec![r, c]));
    let mut full = vec![x];
    let mut rows = Vec::new();
    for &(op, i, j) in script {
        let a = full[i as usize % full.len()];
        let f2 = full[j as usize % full.len()];
        match op % 8 {
            0 => full.push(b.unary(Unary::Exp, a).unwrap()),
            1 => full.push(b.unary(Unary::Tanh, a).unwrap()),
            2 => full.push(b.binary(Binary::Sub, a, f2).unwrap()),
            3 => full.push(b.binary(Binary::Mul, a, f2).unwrap()),
            4 => {
                let kind = [ReduceKind::Sum, ReduceKind::Max, ReduceKind::Min, ReduceKind::Prod][j as usize % 4];
                rows.push(b.reduce(kind, a, &[1]).unwrap());
            }
            5 if !rows.is_empty() => {
                let v = rows[j as usize % rows.len()];
                let v = b.unary(Unary::Neg, v).unwrap();
                rows.push(v);
            }
            6 if !rows.is_empty() => {
                let v = rows[j as usize % rows.len()];
                let bc = b.broadcast_in_dim(v, &[r, c], &[0]).unwrap();
                full.push(b.binary(Binary::Add, a, bc).unwrap());
            }
            _ => full.push(b.binary(Binary::Max, a, f2).unwrap()),
        }
    }
    let mut outs = vec![*full.last().unwrap()];
    if let Some(&v) = rows.last() {
        outs.push(v);
    }
    b.finish(&outs).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_row_programs_are_bitwise_equal(
        r in 2usize..6,
        c in 1usize..1100,
        f64s in any::<bool>(),
        script in proptest::collection::vec((any::<u8>(), any::<u8>(), any::<u8>()), 2..12),
    ) {
        if skip() {
            return Ok(());
        }
        let dtype = if f64s { DType::F64 } else { DType::F32 };
        let mut script = script;
        script.insert(0, (4, 0, 0)); // at least one reduction
        let f = random_rows(r, c, dtype, &script);
        let ins = inputs(&f, 11);
        let exe = Executable::with_options(f.clone(), opts(CompileMode::Sync)).unwrap();
        if exe.native_status().1 > 0 {
            check_native(&f, &ins);
        }
    }
}

/// `reduce(cc[None, :] - x, axis=1)` over `x: [r, c]` with `cc: [c]`:
/// k-means' distances to the nearest centroid, a reduction whose inner body
/// reads only arguments (a row broadcast and the matrix).
fn short_rows(r: usize, c: usize, dtype: DType, kind: ReduceKind) -> Func {
    let mut b = Builder::new("short_rows");
    let x = b.param(TensorType::new(dtype, vec![r, c]));
    let cc = b.param(TensorType::new(dtype, vec![c]));
    let bc = b.broadcast_in_dim(cc, &[r, c], &[1]).unwrap();
    let d = b.binary(Binary::Sub, bc, x).unwrap();
    let m = b.reduce(kind, d, &[1]).unwrap();
    let e = b.unary(Unary::Exp, m).unwrap();
    b.finish(&[e]).unwrap()
}

/// Rows shorter than 16 whose reduction reads only arguments run several
/// rows at a time, one per vector lane (`render_c`, `across_rows`): the
/// same bits as the interpreter's in-order fold for every combiner, with
/// NaNs, infinities and signed zeros in the data, for row counts that fill
/// whole blocks of lanes, leave a partial block, or fill none; and the C
/// source holds the across-rows form.
#[test]
fn short_rows_reduce_across_rows_bitwise() {
    if skip() {
        return;
    }
    for dtype in [DType::F32, DType::F64] {
        for kind in [ReduceKind::Sum, ReduceKind::Max, ReduceKind::Min, ReduceKind::Prod] {
            for (r, c) in [(1000, 10), (37, 3), (16, 15), (9, 2), (5, 7)] {
                let f = short_rows(r, c, dtype, kind);
                let exe = check_native(&f, &inputs(&f, 17));
                let ks = row_kernels(&exe);
                assert_eq!(ks.len(), 1, "{dtype} {kind:?} [{r}, {c}]");
                let src = kernel::render_c::render_unit(&ks, kernel::unit_lanes(&ks));
                assert!(src.contains("row0 += GL"), "{dtype} {kind:?} [{r}, {c}]: no across-rows block");
            }
        }
    }
    // Rows of 16 and more keep the per-row tree.
    let f = short_rows(40, 16, DType::F64, ReduceKind::Min);
    let exe = check_native(&f, &inputs(&f, 3));
    let ks = row_kernels(&exe);
    assert!(!kernel::render_c::render_unit(&ks, 8).contains("row0 += GL"));
}
