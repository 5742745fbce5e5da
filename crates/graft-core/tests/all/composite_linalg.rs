//! matmul / linear / einsum against naive references: a brute-force
//! einsum written here (loops over every assignment of the index letters,
//! size-1 dims broadcast), NumPy's matmul promotion rules spelled out per
//! case, and error messages for bad specs and shapes.

use crate::composite_util;
use composite_util::*;
use graft_core::composite::linalg;
use graft_core::{Builder, DType, Tensor, TensorType};
use std::collections::BTreeMap;

/// Brute-force einsum over letter-only specs with an explicit output.
/// A dim of size 1 broadcasts against the label's size (reference only).
fn ref_einsum(spec: &str, xs: &[&Tensor]) -> (Vec<f64>, Vec<usize>) {
    let (lhs, out) = spec.split_once("->").unwrap();
    let terms: Vec<Vec<char>> = lhs.split(',').map(|t| t.chars().collect()).collect();
    let out: Vec<char> = out.chars().collect();
    let mut size: BTreeMap<char, usize> = BTreeMap::new();
    for (t, x) in terms.iter().zip(xs) {
        for (c, &d) in t.iter().zip(x.shape()) {
            let e = size.entry(*c).or_insert(d);
            *e = (*e).max(d);
        }
    }
    let labels: Vec<char> = size.keys().copied().collect();
    let dims: Vec<usize> = labels.iter().map(|c| size[c]).collect();
    let out_shape: Vec<usize> = out.iter().map(|c| size[c]).collect();
    let mut res = vec![0.0; out_shape.iter().product()];
    let total: usize = dims.iter().product();
    let data: Vec<Vec<f64>> = xs.iter().map(|x| x.to_f64_vec()).collect();
    for flat in 0..total {
        let asg = unravel(flat, &dims);
        let val = |c: &char| asg[labels.iter().position(|l| l == c).unwrap()];
        let mut p = 1.0;
        for ((t, x), d) in terms.iter().zip(xs).zip(&data) {
            let idx: Vec<usize> = t.iter().zip(x.shape()).map(|(c, &n)| if n == 1 { 0 } else { val(c) }).collect();
            p *= d[ravel(&idx, x.shape())];
        }
        let oidx: Vec<usize> = out.iter().map(val).collect();
        res[ravel(&oidx, &out_shape)] += p;
    }
    (res, out_shape)
}

fn check_einsum(spec: &str, reference_spec: &str, shapes: &[&[usize]]) {
    let xs: Vec<Tensor> = shapes.iter().enumerate().map(|(i, s)| rand64(s, i as u64 + 7)).collect();
    let refs: Vec<&Tensor> = xs.iter().collect();
    let y = eval(&refs, |b, p| linalg::einsum(b, spec, p));
    let (want, shape) = ref_einsum(reference_spec, &refs);
    assert_eq!(y.shape(), shape.as_slice(), "{spec}: shape");
    let got = y.to_f64_vec();
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() <= 1e-10 * (1.0 + w.abs()), "{spec}: got {got:?} want {want:?}");
    }
}

#[test]
fn einsum_explicit_specs() {
    check_einsum("ij,jk->ik", "ij,jk->ik", &[&[2, 3], &[3, 4]]);
    check_einsum("bij,bjk->bik", "bij,bjk->bik", &[&[2, 2, 3], &[2, 3, 4]]);
    check_einsum("ij,kj->ik", "ij,kj->ik", &[&[2, 3], &[4, 3]]);
    check_einsum("i,i->", "i,i->", &[&[5], &[5]]);
    check_einsum("i,j->ij", "i,j->ij", &[&[3], &[4]]);
    check_einsum("ij->ji", "ij->ji", &[&[3, 4]]);
    check_einsum("ij->", "ij->", &[&[3, 4]]);
    check_einsum("ijk->kj", "ijk->kj", &[&[2, 3, 4]]);
    check_einsum("ij,jk,kl->il", "ij,jk,kl->il", &[&[2, 3], &[3, 4], &[4, 5]]);
    check_einsum("ij,jk,kl->li", "ij,jk,kl->li", &[&[2, 3], &[3, 4], &[4, 2]]);
    check_einsum("abc,cd,ae->bde", "abc,cd,ae->bde", &[&[2, 3, 4], &[4, 2], &[2, 3]]);
    check_einsum("bhqd,bhkd->bhqk", "bhqd,bhkd->bhqk", &[&[2, 2, 3, 4], &[2, 2, 5, 4]]);
    // Index used by operands 1 and 3 only (free across the first product).
    check_einsum("ai,bj,aj->ib", "ai,bj,aj->ib", &[&[2, 3], &[4, 5], &[2, 5]]);
    // Labels unique to one operand are summed before the product.
    check_einsum("ij,kl->ik", "ij,kl->ik", &[&[2, 3], &[4, 5]]);
    check_einsum("ij,jk->", "ij,jk->", &[&[2, 3], &[3, 4]]);
    // Case-sensitive letters.
    check_einsum("aA,Ab->ab", "aA,Ab->ab", &[&[2, 3], &[3, 2]]);
    // A leading output letter free in one operand becomes a batch letter
    // (the other operand broadcast along it) instead of a transpose after.
    check_einsum("bi,gij->gbj", "bi,gij->gbj", &[&[3, 4], &[2, 4, 5]]);
    check_einsum("gij,bi->gbj", "gij,bi->gbj", &[&[2, 4, 5], &[3, 4]]);
    check_einsum("bi,gij->bgj", "bi,gij->bgj", &[&[3, 4], &[2, 4, 5]]);
    check_einsum("ai,gaij->gaj", "ai,gaij->gaj", &[&[3, 4], &[2, 3, 4, 5]]);
    check_einsum("ij,jk->ki", "ij,jk->ki", &[&[2, 3], &[3, 4]]);
}

/// The stacked-gates product of an LSTM, `"bi,gij->gbj"`, is one batched
/// `dot_general` over `g` (the small `x` broadcast along it) with no
/// transpose; where broadcasting would copy more than the transpose (a wide
/// `x` against narrow gates) the transpose stays.
#[test]
fn einsum_takes_leading_output_letters_as_batch() {
    let prims = |spec: &str, shapes: &[&[usize]]| {
        let mut b = Builder::new("f");
        let ps: Vec<_> = shapes.iter().map(|s| b.param(TensorType::new(DType::F32, s.to_vec()))).collect();
        let y = linalg::einsum(&mut b, spec, &ps).unwrap();
        let f = b.finish(&[y]).unwrap();
        (f.count_prim("dot_general"), f.count_prim("transpose"), f.count_prim("broadcast_in_dim"))
    };
    assert_eq!(prims("bi,gij->gbj", &[&[16, 128], &[4, 128, 128]]), (1, 0, 1));
    assert_eq!(prims("bi,gij->bgj", &[&[16, 128], &[4, 128, 128]]), (1, 0, 0));
    assert_eq!(prims("bi,gij->gbj", &[&[16, 256], &[4, 256, 8]]), (1, 1, 0));
}

#[test]
fn einsum_diagonals() {
    check_einsum("ii->i", "ii->i", &[&[4, 4]]);
    check_einsum("ii->", "ii->", &[&[4, 4]]);
    check_einsum("iij->ij", "iij->ij", &[&[3, 3, 2]]);
    check_einsum("iji->j", "iji->j", &[&[3, 2, 3]]);
    check_einsum("iii->i", "iii->i", &[&[3, 3, 3]]);
    check_einsum("ii,ij->j", "ii,ij->j", &[&[3, 3], &[3, 4]]);
    check_einsum("ijij->ij", "ijij->ij", &[&[2, 3, 2, 3]]);
    // Exact values: trace and diagonal.
    let x = t64(&[3, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]);
    assert_eq!(eval(&[&x], |b, p| linalg::einsum(b, "ii", p)).to_f64_vec(), vec![15.0]);
    assert_eq!(eval(&[&x], |b, p| linalg::einsum(b, "ii->i", p)).to_f64_vec(), vec![1.0, 5.0, 9.0]);
}

#[test]
fn einsum_implicit_output() {
    // Output = letters appearing once, in ASCII order.
    check_einsum("ij,jk", "ij,jk->ik", &[&[2, 3], &[3, 4]]);
    check_einsum("ba", "ba->ab", &[&[2, 3]]);
    check_einsum("ij,ij", "ij,ij->", &[&[2, 3], &[2, 3]]);
    check_einsum("kj,ji", "kj,ji->ik", &[&[2, 3], &[3, 4]]);
    check_einsum("ii", "ii->", &[&[3, 3]]);
    check_einsum("Ba,a", "Ba,a->B", &[&[2, 3], &[3]]);
    check_einsum("bA,b", "bA,b->A", &[&[2, 3], &[2]]);
    check_einsum("...ij,...jk", "Xij,Xjk->Xik", &[&[2, 2, 3], &[2, 3, 4]]);
}

#[test]
fn einsum_ellipsis() {
    check_einsum("...ij,...jk->...ik", "Xij,Xjk->Xik", &[&[2, 2, 3], &[2, 3, 4]]);
    // Different numbers of ellipsis dims broadcast right-aligned.
    check_einsum("...ij,...jk->...ik", "XYij,Yjk->XYik", &[&[2, 3, 2, 3], &[3, 3, 4]]);
    // Size-1 ellipsis dims broadcast.
    check_einsum("...ij,...jk->...ik", "XYij,XYjk->XYik", &[&[2, 1, 2, 3], &[1, 3, 3, 4]]);
    check_einsum("i...->...i", "iXY->XYi", &[&[2, 3, 4]]);
    check_einsum("...i,...i->...", "Xi,Xi->X", &[&[3, 4], &[3, 4]]);
    check_einsum("a...b->ba...", "aXYb->baXY", &[&[2, 3, 4, 5]]);
    // Ellipsis of zero dims.
    check_einsum("...ij->...ji", "ij->ji", &[&[2, 3]]);
    // Explicit output without '...' sums the ellipsis dims.
    check_einsum("...i->i", "Xi->i", &[&[3, 4]]);
    // All-size-1 ellipsis dims stay as size 1.
    check_einsum("...i,...i->...i", "Xi,Xi->Xi", &[&[1, 4], &[1, 4]]);
}

#[test]
fn einsum_integers_and_dtypes() {
    let a = ti32(&[2, 2], &[1, 2, 3, 4]);
    let c = ti32(&[2, 2], &[5, 6, 7, 8]);
    let y = eval(&[&a, &c], |b, p| linalg::einsum(b, "ij,jk->ik", p));
    assert_eq!(y.to_vec::<i32>().unwrap(), vec![19, 22, 43, 50]);
    let y = eval(&[&to32(&t64(&[2], &[1.0, 2.0])), &to32(&t64(&[2], &[3.0, 4.0]))], |b, p| linalg::einsum(b, "i,i", p));
    assert_eq!(y.dtype(), DType::F32);
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![11.0]);
}

#[test]
fn einsum_errors() {
    let a = rand64(&[2, 3], 1);
    let c = rand64(&[4, 5], 2);
    let e = |spec: &str, xs: &[&Tensor]| err_msg(xs, |b, p| linalg::einsum(b, spec, p));
    assert!(e("ij,jk->ik", &[&a, &c]).contains("index 'j' has size 3 elsewhere but 4"));
    assert!(e("ij->ik", &[&a]).contains("output index 'k' does not appear"));
    assert!(e("ij->ii", &[&a]).contains("appears more than once"));
    assert!(e("ijk->i", &[&a]).contains("has rank 2 but its term names 3"));
    assert!(e("ij,jk->ik", &[&a]).contains("2 input terms but 1 operands"));
    assert!(e("i1->i", &[&a]).contains("invalid character '1'"));
    assert!(e("i..j->i", &[&a]).contains("'...'"));
    assert!(e("...i...->i", &[&a]).contains("more than one '...'"));
    assert!(e("ij->i->j", &[&a]).contains("more than one '->'"));
    assert!(e("...ij,...jk->...ik", &[&rand64(&[2, 2, 3], 0), &rand64(&[3, 3, 4], 0)]).contains("'...' dims"));
    let msg = e("ij,jk->ik", &[&a, &to32(&rand64(&[3, 4], 0))]);
    assert!(msg.contains("one numeric dtype") && msg.contains("f32[3,4]"), "{msg}");
    let bools = Tensor::from_vec(vec![2], vec![true, false]).unwrap();
    assert!(e("i->i", &[&bools]).contains("numeric"));
}

/// NumPy matmul reference on shapes with explicit promotion.
fn ref_matmul(x: &Tensor, y: &Tensor) -> (Vec<f64>, Vec<usize>) {
    let (mut xs, mut ys) = (x.shape().to_vec(), y.shape().to_vec());
    let (x1, y1) = (xs.len() == 1, ys.len() == 1);
    if x1 {
        xs.insert(0, 1);
    }
    if y1 {
        ys.push(1);
    }
    let (m, k, n) = (xs[xs.len() - 2], xs[xs.len() - 1], ys[ys.len() - 1]);
    let (bx, by) = (&xs[..xs.len() - 2], &ys[..ys.len() - 2]);
    let r = bx.len().max(by.len());
    let get = |s: &[usize], i: usize| if i + s.len() >= r { s[i + s.len() - r] } else { 1 };
    let batch: Vec<usize> = (0..r).map(|i| get(bx, i).max(get(by, i))).collect();
    let (xd, yd) = (x.to_f64_vec(), y.to_f64_vec());
    let nb: usize = batch.iter().product();
    let mut out = vec![];
    for bi in 0..nb {
        let bidx = unravel(bi, &batch);
        let sub = |s: &[usize]| -> usize {
            let off = r - s.len();
            let idx: Vec<usize> = (0..s.len()).map(|i| if s[i] == 1 { 0 } else { bidx[off + i] }).collect();
            ravel(&idx, s)
        };
        let (xo, yo) = (sub(bx) * m * k, sub(by) * k * n);
        for i in 0..m {
            for j in 0..n {
                out.push((0..k).map(|l| xd[xo + i * k + l] * yd[yo + l * n + j]).sum());
            }
        }
    }
    let mut shape = batch;
    if !x1 {
        shape.push(m);
    }
    if !y1 {
        shape.push(n);
    }
    (out, shape)
}

#[test]
fn matmul_numpy_semantics() {
    let cases: &[(&[usize], &[usize])] = &[
        (&[3], &[3]),
        (&[2, 3], &[3]),
        (&[3], &[3, 4]),
        (&[2, 3], &[3, 4]),
        (&[5, 2, 3], &[3, 4]),
        (&[3], &[5, 3, 4]),
        (&[5, 2, 3], &[3]),
        (&[2, 3], &[5, 3, 4]),
        (&[5, 2, 3], &[5, 3, 4]),
        (&[5, 1, 2, 3], &[6, 3, 4]),
        (&[1, 2, 3], &[4, 3, 2]),
        (&[2, 1, 2, 3], &[1, 3, 3, 2]),
    ];
    for (i, &(sx, sy)) in cases.iter().enumerate() {
        let (x, y) = (rand64(sx, i as u64), rand64(sy, 100 + i as u64));
        let out = eval(&[&x, &y], |b, p| linalg::matmul(b, p[0], p[1]));
        let (want, shape) = ref_matmul(&x, &y);
        assert_eq!(out.shape(), shape.as_slice(), "{sx:?} @ {sy:?}");
        assert_close(&out.to_f64_vec(), &want, 1e-12);
        // f32 too.
        let out32 = eval(&[&to32(&x), &to32(&y)], |b, p| linalg::matmul(b, p[0], p[1]));
        assert_eq!(out32.dtype(), DType::F32);
        assert_close(&out32.to_f64_vec(), &want, 1e-5);
    }
}

#[test]
fn matmul_emits_no_copies_when_shapes_match() {
    for (sx, sy) in [
        (vec![4, 2, 3], vec![3, 5]),
        (vec![4, 2, 3], vec![4, 3, 5]),
        (vec![3], vec![4, 3, 5]),
        (vec![4, 2, 3], vec![3]),
    ] {
        let mut b = Builder::new("f");
        let x = b.param(TensorType::new(DType::F32, sx.clone()));
        let y = b.param(TensorType::new(DType::F32, sy.clone()));
        linalg::matmul(&mut b, x, y).unwrap();
        let names: Vec<&str> = b.func().eqns.iter().map(|e| graft_core::Op::name(&e.prim)).collect();
        assert_eq!(names, vec!["dot_general"], "{sx:?} @ {sy:?}");
    }
}

#[test]
fn matmul_errors() {
    let e =
        |sx: &[usize], sy: &[usize]| err_msg(&[&rand64(sx, 0), &rand64(sy, 1)], |b, p| linalg::matmul(b, p[0], p[1]));
    let msg = e(&[2, 3], &[4, 5]);
    assert!(msg.contains("matmul") && msg.contains("f64[2,3]") && msg.contains("f64[4,5]"), "{msg}");
    assert!(e(&[], &[3]).contains("rank >= 1"));
    let msg = e(&[2, 2, 3], &[3, 3, 4]);
    assert!(msg.contains("batch dims") && msg.contains("f64[2,2,3]"), "{msg}");
    let msg = err_msg(&[&rand64(&[2, 3], 0), &to32(&rand64(&[3, 2], 0))], |b, p| linalg::matmul(b, p[0], p[1]));
    assert!(msg.contains("one dtype"), "{msg}");
}

#[test]
fn linear_pytorch_layout() {
    let x = rand64(&[2, 3, 4], 1);
    let w = rand64(&[5, 4], 2);
    let bias = rand64(&[5], 3);
    let y = eval(&[&x, &w, &bias], |b, p| linalg::linear(b, p[0], p[1], Some(p[2])));
    assert_eq!(y.shape(), &[2, 3, 5]);
    let (xd, wd, bd) = (x.to_f64_vec(), w.to_f64_vec(), bias.to_f64_vec());
    let mut want = vec![];
    for r in 0..6 {
        for o in 0..5 {
            want.push(bd[o] + (0..4).map(|i| xd[r * 4 + i] * wd[o * 4 + i]).sum::<f64>());
        }
    }
    assert_close(&y.to_f64_vec(), &want, 1e-12);
    let y = eval(&[&x, &w], |b, p| linalg::linear(b, p[0], p[1], None));
    let nob: Vec<f64> = want.iter().enumerate().map(|(i, v)| v - bd[i % 5]).collect();
    assert_close(&y.to_f64_vec(), &nob, 1e-12);
    // 1-D input.
    let v = rand64(&[4], 4);
    let y = eval(&[&v, &w], |b, p| linalg::linear(b, p[0], p[1], None));
    assert_eq!(y.shape(), &[5]);
    // Errors.
    let msg = err_msg(&[&x, &rand64(&[4, 5], 0)], |b, p| linalg::linear(b, p[0], p[1], None));
    assert!(msg.contains("in_features = 5") && msg.contains("f64[2,3,4]"), "{msg}");
    let msg = err_msg(&[&x, &w, &rand64(&[4], 0)], |b, p| linalg::linear(b, p[0], p[1], Some(p[2])));
    assert!(msg.contains("bias must be f64[5]"), "{msg}");
    let msg = err_msg(&[&x, &rand64(&[4], 0)], |b, p| linalg::linear(b, p[0], p[1], None));
    assert!(msg.contains("rank 2"), "{msg}");
}
