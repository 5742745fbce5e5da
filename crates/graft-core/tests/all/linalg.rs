//! Forward tests of `dot_general` against a naive multi-index reference
//! written here, for every numeric dtype, in-place and transposed layouts,
//! batch/contract dims in any position, the serial, batch-parallel and
//! gemm-parallel paths, plus its shape-rule errors.
//!
//! Test data are small multiples of 1/4, so every product and partial sum is
//! exact in f32 and f64 and results compare with `==` regardless of the
//! summation order the kernel uses.

use crate::common::{ravel, unravel};
use graft_core::ops::display_prim;
use graft_core::ops::linalg::DotGeneral;
use graft_core::{Builder, DType, Executable, IrError, Op, Tensor, TensorType};
use proptest::prelude::*;

fn dg(lc: &[usize], rc: &[usize], lb: &[usize], rb: &[usize]) -> DotGeneral {
    DotGeneral { lhs_contract: lc.to_vec(), rhs_contract: rc.to_vec(), lhs_batch: lb.to_vec(), rhs_batch: rb.to_vec() }
}

fn run(op: &DotGeneral, a: &Tensor, b: &Tensor) -> Tensor {
    let mut bl = Builder::new("f");
    let (pa, pb) = (bl.param(a.ty()), bl.param(b.ty()));
    let y = bl.dot_general(pa, pb, &op.lhs_contract, &op.rhs_contract, &op.lhs_batch, &op.rhs_batch).unwrap();
    let f = bl.finish(&[y]).unwrap();
    Executable::new(f).unwrap().run(&[a, b]).unwrap().remove(0)
}

/// Deterministic test data: integers in [-8, 8] (times 1/4 for floats).
fn data(dtype: DType, shape: &[usize], seed: usize) -> Tensor {
    let ty = TensorType::new(dtype, shape.to_vec());
    let scale = if dtype.is_float() { 0.25 } else { 1.0 };
    Tensor::from_fn(&ty, |i| ((i.wrapping_mul(7919).wrapping_add(seed * 104_729)) % 17) as f64 * scale - 8.0 * scale)
}

/// Naive dot_general over f64 values, straight from the XLA definition.
fn reference(op: &DotGeneral, a: &Tensor, b: &Tensor) -> (Vec<usize>, Vec<f64>) {
    let (sa, sb) = (a.shape(), b.shape());
    let free = |rank: usize, batch: &[usize], con: &[usize]| -> Vec<usize> {
        (0..rank).filter(|d| !batch.contains(d) && !con.contains(d)).collect()
    };
    let lf = free(sa.len(), &op.lhs_batch, &op.lhs_contract);
    let rf = free(sb.len(), &op.rhs_batch, &op.rhs_contract);
    let bshape: Vec<usize> = op.lhs_batch.iter().map(|&d| sa[d]).collect();
    let lfs: Vec<usize> = lf.iter().map(|&d| sa[d]).collect();
    let rfs: Vec<usize> = rf.iter().map(|&d| sb[d]).collect();
    let cshape: Vec<usize> = op.lhs_contract.iter().map(|&d| sa[d]).collect();
    let out_shape: Vec<usize> = bshape.iter().chain(&lfs).chain(&rfs).copied().collect();
    let (av, bv) = (a.to_f64_vec(), b.to_f64_vec());
    let n_out: usize = out_shape.iter().product();
    let n_con: usize = cshape.iter().product();
    let mut out = vec![0.0; n_out];
    for (oi, o) in out.iter_mut().enumerate() {
        let idx = unravel(oi, &out_shape);
        let (bi, rest) = idx.split_at(bshape.len());
        let (li, ri) = rest.split_at(lfs.len());
        let mut ia = vec![0; sa.len()];
        let mut ib = vec![0; sb.len()];
        for (k, (&da, &db)) in op.lhs_batch.iter().zip(&op.rhs_batch).enumerate() {
            ia[da] = bi[k];
            ib[db] = bi[k];
        }
        for (k, &d) in lf.iter().enumerate() {
            ia[d] = li[k];
        }
        for (k, &d) in rf.iter().enumerate() {
            ib[d] = ri[k];
        }
        let mut acc = 0.0;
        for ci in 0..n_con {
            let c = unravel(ci, &cshape);
            for (k, (&da, &db)) in op.lhs_contract.iter().zip(&op.rhs_contract).enumerate() {
                ia[da] = c[k];
                ib[db] = c[k];
            }
            acc += av[ravel(&ia, sa)] * bv[ravel(&ib, sb)];
        }
        *o = acc;
    }
    (out_shape, out)
}

fn check(op: &DotGeneral, sa: &[usize], sb: &[usize], dtype: DType) {
    let (a, b) = (data(dtype, sa, 1), data(dtype, sb, 2));
    let y = run(op, &a, &b);
    let (shape, want) = reference(op, &a, &b);
    assert_eq!(y.dtype(), dtype);
    assert_eq!(y.shape(), &shape[..], "{op:?} {sa:?} x {sb:?}");
    assert_eq!(y.to_f64_vec(), want, "{dtype} {op:?} {sa:?} x {sb:?}");
}

fn check_all_dtypes(op: &DotGeneral, sa: &[usize], sb: &[usize]) {
    for dt in [DType::F32, DType::F64, DType::I32, DType::I64] {
        check(op, sa, sb, dt);
    }
}

#[test]
fn small_matmul_hand_computed() {
    let a = Tensor::from_vec(vec![2, 3], vec![1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
    let b = Tensor::from_vec(vec![3, 2], vec![7.0f64, 8.0, 9.0, 10.0, 11.0, 12.0]).unwrap();
    let mut bl = Builder::new("f");
    let (pa, pb) = (bl.param(a.ty()), bl.param(b.ty()));
    let y = bl.matmul2d(pa, pb).unwrap();
    let f = bl.finish(&[y]).unwrap();
    let y = Executable::new(f).unwrap().run(&[&a, &b]).unwrap().remove(0);
    assert_eq!(y.shape(), &[2, 2]);
    assert_eq!(y.to_f64_vec(), vec![58.0, 64.0, 139.0, 154.0]);
    let ai = a.cast(DType::I32);
    let bi = b.cast(DType::I32);
    let yi = run(&dg(&[1], &[0], &[], &[]), &ai, &bi);
    assert_eq!(yi.to_vec::<i32>().unwrap(), vec![58, 64, 139, 154]);
    let yf = run(&dg(&[1], &[0], &[], &[]), &a.cast(DType::F32), &b.cast(DType::F32));
    assert_eq!(yf.to_vec::<f32>().unwrap(), vec![58.0, 64.0, 139.0, 154.0]);
}

#[test]
fn matmul_shapes_all_dtypes() {
    let mm = dg(&[1], &[0], &[], &[]);
    for (m, k, n) in [
        (1, 1, 1),
        (1, 7, 1),
        (1, 9, 13),
        (13, 9, 1),
        (5, 1, 6),
        (2, 3, 4),
        (17, 33, 65),
        (64, 64, 64),
        (3, 0, 4),
        (0, 5, 4),
        (4, 5, 0),
    ] {
        check_all_dtypes(&mm, &[m, k], &[k, n]);
    }
}

#[test]
fn large_matmul_takes_parallel_path() {
    let mm = dg(&[1], &[0], &[], &[]);
    check_all_dtypes(&mm, &[300, 257], &[257, 129]);
    // Transposed operands at parallel sizes.
    check(&dg(&[0], &[1], &[], &[]), &[257, 300], &[129, 257], DType::F32);
    check(&dg(&[0], &[0], &[], &[]), &[257, 300], &[257, 129], DType::F64);
}

#[test]
fn operands_contiguous_along_k_at_sizes_that_transpose_the_destination() {
    // A column-major rhs (`x @ w^T`, `x^T @ w^T`) with at least 2^20
    // multiply-adds over at least 128 goes to a column-major scratch and is
    // transposed into the result (`linalg::gemm_f`): row and column counts
    // that are not multiples of the transpose's strips of 8 or tiles of 64,
    // a batched product, both float dtypes.
    let xwt = dg(&[1], &[1], &[], &[]);
    for dt in [DType::F32, DType::F64] {
        check(&xwt, &[130, 160], &[100, 160], dt);
        check(&xwt, &[9, 1100], &[131, 1100], dt);
        check(&dg(&[0], &[1], &[], &[]), &[160, 130], &[100, 160], dt);
        check(&dg(&[2], &[2], &[0], &[0]), &[2, 70, 128], &[2, 160, 128], dt);
    }
    // Below the thresholds the usual route: same values.
    check(&xwt, &[30, 16], &[20, 16], DType::F32);
    check(&xwt, &[300, 64], &[200, 64], DType::F32);
}

#[test]
fn transposed_layouts() {
    // [K, M] x [K, N], [M, K] x [N, K], [K, M] x [N, K]: all in place through strides.
    for (lc, rc, sa, sb) in
        [(0, 0, [7, 5], [7, 9]), (1, 1, [5, 7], [9, 7]), (0, 1, [7, 5], [9, 7]), (1, 0, [5, 7], [7, 9])]
    {
        check_all_dtypes(&dg(&[lc], &[rc], &[], &[]), &sa, &sb);
    }
}

#[test]
fn vectors_scalars_and_outer_products() {
    // dot of vectors -> scalar
    check_all_dtypes(&dg(&[0], &[0], &[], &[]), &[11], &[11]);
    // outer product (no contraction)
    check_all_dtypes(&dg(&[], &[], &[], &[]), &[3], &[4]);
    // scalars
    check_all_dtypes(&dg(&[], &[], &[], &[]), &[], &[]);
    // matrix-vector both ways
    check_all_dtypes(&dg(&[1], &[0], &[], &[]), &[6, 5], &[5]);
    check_all_dtypes(&dg(&[0], &[0], &[], &[]), &[5], &[5, 6]);
    // elementwise product as a pure batch
    check_all_dtypes(&dg(&[], &[], &[0], &[0]), &[7], &[7]);
}

#[test]
fn batched_layouts() {
    // Leading batch.
    check_all_dtypes(&dg(&[2], &[1], &[0], &[0]), &[3, 4, 5], &[3, 5, 6]);
    // Batch in the middle of lhs, at the end of rhs.
    check_all_dtypes(&dg(&[2], &[0], &[1], &[2]), &[4, 3, 5], &[5, 6, 3]);
    // Batch last on both, contract first.
    check_all_dtypes(&dg(&[0], &[0], &[2], &[2]), &[5, 4, 3], &[5, 6, 3]);
    // Two batch dims listed in swapped order.
    check_all_dtypes(&dg(&[3], &[2], &[2, 0], &[1, 0]), &[2, 4, 3, 5], &[2, 3, 5, 6]);
    // Batch of size 0 and 1.
    check_all_dtypes(&dg(&[2], &[1], &[0], &[0]), &[0, 4, 5], &[0, 5, 6]);
    check_all_dtypes(&dg(&[2], &[1], &[0], &[0]), &[1, 4, 5], &[1, 5, 6]);
}

#[test]
fn several_contracting_dims() {
    // Adjacent and in order: no copy.
    check_all_dtypes(&dg(&[1, 2], &[0, 1], &[], &[]), &[4, 3, 5], &[3, 5, 6]);
    // Reversed pairing: forces a transpose into scratch.
    check_all_dtypes(&dg(&[2, 1], &[0, 1], &[], &[]), &[4, 3, 5], &[5, 3, 6]);
    // Interleaved with free dims, plus a batch.
    check_all_dtypes(&dg(&[1, 3], &[3, 0], &[0], &[2]), &[2, 3, 4, 5], &[5, 6, 2, 3]);
    // Several free dims on both sides.
    check_all_dtypes(&dg(&[1], &[2], &[], &[]), &[2, 7, 3], &[4, 5, 7]);
}

#[test]
fn many_small_batched_products_parallelise_over_batch() {
    check_all_dtypes(&dg(&[2], &[1], &[0], &[0]), &[1000, 5, 7], &[1000, 7, 3]);
    check(&dg(&[2], &[1], &[0], &[0]), &[4096, 8, 8], &[4096, 8, 8], DType::F32);
    // Batch in a non-leading position at parallel sizes.
    check(&dg(&[2], &[0], &[1], &[2]), &[9, 600, 11], &[11, 7, 600], DType::F64);
    // A few big products (uneven over the threads).
    check(&dg(&[2], &[1], &[0], &[0]), &[3, 150, 170], &[3, 170, 190], DType::F32);
}

#[test]
fn batched_outer_products_with_unit_contraction() {
    // k == 1 (a per-example weight gradient under vmap): written directly,
    // not through gemm; serial and row-parallel sizes, strided rhs columns.
    for dt in [DType::F32, DType::F64] {
        check(&dg(&[1], &[1], &[0], &[0]), &[3, 1, 4], &[3, 1, 5], dt);
        check(&dg(&[1], &[1], &[0], &[0]), &[64, 1, 128], &[64, 1, 784], dt);
        check(&dg(&[2], &[0], &[0], &[2]), &[6, 9, 1], &[1, 7, 6], dt);
        check(&dg(&[1], &[0], &[], &[]), &[300, 1], &[1, 200], dt);
    }
}

#[test]
fn output_garbage_is_overwritten() {
    // Call the kernel directly with a NaN-filled output, as the executor may
    // hand it a recycled buffer.
    for (op, sa, sb) in [
        (dg(&[1], &[0], &[], &[]), vec![9, 6], vec![6, 5]),
        (dg(&[1], &[0], &[], &[]), vec![9, 0], vec![0, 5]),
        (dg(&[2], &[1], &[0], &[0]), vec![3, 4, 2], vec![3, 2, 5]),
        (dg(&[1], &[0], &[], &[]), vec![1, 2], vec![2, 1]),
    ] {
        for dt in [DType::F32, DType::F64] {
            let (a, b) = (data(dt, &sa, 3), data(dt, &sb, 4));
            let ty = op.infer(&[a.ty(), b.ty()]).unwrap().remove(0);
            let mut outs = [Tensor::full(&ty, f64::NAN)];
            op.kernel(&[&a, &b], &mut outs).unwrap();
            assert_eq!(outs[0].to_f64_vec(), reference(&op, &a, &b).1);
        }
        let (a, b) = (data(DType::I64, &sa, 3), data(DType::I64, &sb, 4));
        let ty = op.infer(&[a.ty(), b.ty()]).unwrap().remove(0);
        let mut outs = [Tensor::full(&ty, 12345.0)];
        op.kernel(&[&a, &b], &mut outs).unwrap();
        assert_eq!(outs[0].to_f64_vec(), reference(&op, &a, &b).1);
    }
}

#[test]
fn kernel_rejects_mismatched_output() {
    let op = dg(&[1], &[0], &[], &[]);
    let (a, b) = (data(DType::F32, &[2, 3], 0), data(DType::F32, &[3, 4], 0));
    let mut outs = [Tensor::zeros(&TensorType::new(DType::F32, vec![2, 5]))];
    assert!(op.kernel(&[&a, &b], &mut outs).is_err());
}

#[test]
fn integer_overflow_wraps() {
    let a = Tensor::from_vec(vec![1, 2], vec![1i32 << 30, 3]).unwrap();
    let b = Tensor::from_vec(vec![2, 1], vec![4i32, i32::MAX]).unwrap();
    let y = run(&dg(&[1], &[0], &[], &[]), &a, &b);
    let want = (1i32 << 30).wrapping_mul(4).wrapping_add(3i32.wrapping_mul(i32::MAX));
    assert_eq!(y.to_vec::<i32>().unwrap(), vec![want]);
    let a = Tensor::from_vec(vec![2], vec![i64::MAX, 2]).unwrap();
    let y = run(&dg(&[0], &[0], &[], &[]), &a, &a);
    assert_eq!(y.to_vec::<i64>().unwrap(), vec![i64::MAX.wrapping_mul(i64::MAX).wrapping_add(4)]);
}

#[test]
fn results_do_not_depend_on_thread_count() {
    // Non-exact data: equality must hold bit for bit anyway.
    let ty_a = TensorType::new(DType::F32, vec![300, 257]);
    let ty_b = TensorType::new(DType::F32, vec![257, 129]);
    let a = Tensor::from_fn(&ty_a, |i| (i as f64 * 0.37).sin());
    let b = Tensor::from_fn(&ty_b, |i| (i as f64 * 0.11).cos());
    let bt = TensorType::new(DType::F64, vec![64, 9, 31]);
    let ba = Tensor::from_fn(&bt, |i| (i as f64 * 0.7).sin() / 3.0);
    let cases =
        [(dg(&[1], &[0], &[], &[]), a.clone(), b.clone()), (dg(&[2], &[2], &[0], &[0]), ba.clone(), ba.clone())];
    for (op, x, y) in &cases {
        let multi = run(op, x, y);
        let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
        let single = pool.install(|| run(op, x, y));
        assert_eq!(multi, single);
        let (_, want) = reference(op, x, y);
        for (g, w) in multi.to_f64_vec().iter().zip(&want) {
            assert!((g - w).abs() <= 1e-4 * w.abs().max(1.0), "{g} vs {w}");
        }
    }
}

#[test]
fn params_print_like_xla() {
    let op = dg(&[1], &[0], &[], &[]);
    assert_eq!(op.params(), "lhs_contract=(1), rhs_contract=(0), lhs_batch=(), rhs_batch=()");
    assert_eq!(
        display_prim(&dg(&[2, 3], &[1, 2], &[0], &[0])),
        "dot_general[lhs_contract=(2,3), rhs_contract=(1,2), lhs_batch=(0), rhs_batch=(0)]"
    );
}

fn type_err(op: &DotGeneral, a: TensorType, b: TensorType) -> String {
    let mut bl = Builder::new("f");
    let (pa, pb) = (bl.param(a.clone()), bl.param(b.clone()));
    let e = bl.dot_general(pa, pb, &op.lhs_contract, &op.rhs_contract, &op.lhs_batch, &op.rhs_batch).unwrap_err();
    let IrError::Type(te) = &e else { panic!("expected a type error, got {e:?}") };
    assert_eq!(te.prim, display_prim(op));
    assert!(te.prim.starts_with("dot_general["));
    assert_eq!(te.operands, vec![a, b]);
    te.expected.clone()
}

#[test]
fn shape_errors_are_structured() {
    let f = |s: &[usize]| TensorType::new(DType::F32, s.to_vec());
    let mm = dg(&[1], &[0], &[], &[]);
    assert!(type_err(&mm, f(&[2, 3]), TensorType::new(DType::F64, vec![3, 4])).contains("same dtype"));
    let bl = TensorType::new(DType::Bool, vec![2, 2]);
    assert!(type_err(&mm, bl.clone(), bl).contains("numeric"));
    assert!(type_err(&mm, f(&[2, 3]), f(&[4, 5])).contains("contracting dims of equal size"));
    assert!(type_err(&dg(&[1], &[0, 1], &[], &[]), f(&[2, 3]), f(&[3, 4])).contains("equal length"));
    assert!(type_err(&dg(&[2], &[1], &[0], &[]), f(&[2, 3, 4]), f(&[2, 4, 5])).contains("equal length"));
    assert!(type_err(&dg(&[2], &[0], &[], &[]), f(&[2, 3]), f(&[3, 4])).contains("lhs_contract dim 2 out of range"));
    assert!(type_err(&dg(&[1], &[5], &[], &[]), f(&[2, 3]), f(&[3, 4])).contains("rhs_contract dim 5 out of range"));
    assert!(type_err(&dg(&[1, 1], &[0, 1], &[], &[]), f(&[2, 3]), f(&[3, 3])).contains("listed twice"));
    assert!(type_err(&dg(&[0], &[0], &[0], &[1]), f(&[2, 3]), f(&[2, 2])).contains("listed twice"));
    assert!(type_err(&dg(&[2], &[1], &[0], &[0]), f(&[2, 3, 4]), f(&[5, 4, 6])).contains("batch dims of equal size"));
    assert!(type_err(&dg(&[0], &[0], &[3], &[1]), f(&[2, 3]), f(&[2, 3])).contains("lhs_batch dim 3 out of range"));
    // Arity.
    let e = mm.infer(&[f(&[2, 2])]).unwrap_err();
    assert_eq!(e.prim, display_prim(&mm));
    // matmul2d wants rank 2.
    let mut b = Builder::new("f");
    let (x, y) = (b.param(f(&[2, 3, 4])), b.param(f(&[4, 5])));
    let e = b.matmul2d(x, y).unwrap_err();
    let IrError::Type(te) = &e else { panic!("expected a type error, got {e:?}") };
    assert!(te.prim.starts_with("dot_general[") && te.expected.contains("rank-2"));
}

/// A random valid dot_general: dim groups of random sizes (0..=3 each),
/// scattered over each operand in a random order.
fn arb_config() -> impl Strategy<Value = (DotGeneral, Vec<usize>, Vec<usize>)> {
    (0usize..=2, 0usize..=2, 0usize..=2, 0usize..=2)
        .prop_flat_map(|(nb, nc, nl, nr)| {
            let sizes = prop::collection::vec(0usize..=3, nb + nc + nl + nr);
            let perm_l = Just((0..nb + nc + nl).collect::<Vec<_>>()).prop_shuffle();
            let perm_r = Just((0..nb + nc + nr).collect::<Vec<_>>()).prop_shuffle();
            (Just((nb, nc, nl, nr)), sizes, perm_l, perm_r)
        })
        .prop_map(|((nb, nc, nl, nr), sizes, perm_l, perm_r)| {
            // Logical lhs dims: batch, contract, free; rhs: batch, contract, free.
            let (bs, rest) = sizes.split_at(nb);
            let (cs, rest) = rest.split_at(nc);
            let (ls, rs) = rest.split_at(nl);
            let logical_l: Vec<usize> = bs.iter().chain(cs).chain(ls).copied().collect();
            let logical_r: Vec<usize> = bs.iter().chain(cs).chain(rs).copied().collect();
            // perm[logical] = physical position.
            let mut shape_l = vec![0; logical_l.len()];
            for (lg, &ph) in perm_l.iter().enumerate() {
                shape_l[ph] = logical_l[lg];
            }
            let mut shape_r = vec![0; logical_r.len()];
            for (lg, &ph) in perm_r.iter().enumerate() {
                shape_r[ph] = logical_r[lg];
            }
            let _ = nr;
            let op = DotGeneral {
                lhs_batch: perm_l[..nb].to_vec(),
                rhs_batch: perm_r[..nb].to_vec(),
                lhs_contract: perm_l[nb..nb + nc].to_vec(),
                rhs_contract: perm_r[nb..nb + nc].to_vec(),
            };
            (op, shape_l, shape_r)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    #[test]
    fn random_configs_match_reference((op, sa, sb) in arb_config(), dt in prop::sample::select(vec![DType::F32, DType::F64, DType::I32, DType::I64])) {
        let (a, b) = (data(dt, &sa, 5), data(dt, &sb, 6));
        let inferred = op.infer(&[a.ty(), b.ty()]).unwrap().remove(0);
        let y = run(&op, &a, &b);
        let (shape, want) = reference(&op, &a, &b);
        prop_assert_eq!(&inferred.shape, &shape);
        prop_assert_eq!(y.ty(), inferred);
        prop_assert_eq!(y.to_f64_vec(), want);
    }
}
