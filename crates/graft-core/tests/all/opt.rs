//! Cleanup passes: no-op removal drops exactly the equations that return
//! their operand unchanged, and the results stay the same.

use crate::common;

use common::{run, Rng};
use graft_core::opt::{remove_noops, simplify};
use graft_core::{Builder, DType, Op, TensorType};

#[test]
fn noop_equations_are_removed_and_others_kept() {
    let t = TensorType::new(DType::F64, vec![3, 3]);
    let mut b = Builder::new("f");
    let x = b.param(t.clone());
    let r = b.reshape(x, &[3, 3]).unwrap(); // no-op
    let c = b.convert(r, DType::F64).unwrap(); // no-op
    let id = b.transpose(c, &[0, 1]).unwrap(); // no-op
    let bc = b.broadcast_in_dim(id, &[3, 3], &[0, 1]).unwrap(); // no-op
    let tr = b.transpose(bc, &[1, 0]).unwrap(); // same type, not a no-op
    let sg = b.stop_gradient(tr).unwrap(); // changes derivatives: kept
    let e = b.exp(sg).unwrap();
    let f = b.finish(&[e, x, bc]).unwrap();
    let g = remove_noops(&f);
    let names: Vec<&str> = g.eqns.iter().map(|q| q.prim.name()).collect();
    assert_eq!(names, vec!["transpose", "stop_gradient", "exp"]);
    assert_eq!(g.outputs[1], g.params[0]);
    assert_eq!(g.outputs[2], g.params[0], "an output that was a no-op of a parameter is the parameter");
    let x = Rng(1).tensor(&t, -1.0, 1.0);
    assert_eq!(run(&f, std::slice::from_ref(&x)), run(&g, std::slice::from_ref(&x)));
    assert_eq!(simplify(&f).eqns.len(), 3);
}

/// `x * 1`, `1 * x`, `x / 1`, `x + 0`, `x - 0` with splat constants (a
/// broadcast scalar, a reshaped broadcast, an all-equal constant) leave no
/// equation behind; `x * 0` on floats stays (NaN/inf times 0 is NaN); integer
/// `x * 0` becomes the zero operand. Results are bitwise the same.
#[test]
fn algebraic_identities_with_splats_are_folded() {
    let t = TensorType::new(DType::F64, vec![2, 3]);
    let mut b = Builder::new("f");
    let x = b.param(t.clone());
    let one = b.scalar(1.0, DType::F64).unwrap();
    let ones = b.broadcast_in_dim(one, &[2, 3], &[]).unwrap();
    let zero = b.scalar(0.0, DType::F64).unwrap();
    let flat = b.broadcast_in_dim(zero, &[6], &[]).unwrap();
    let zeros = b.reshape(flat, &[2, 3]).unwrap();
    let also_ones = b.full(1.0, &t).unwrap();
    let a = b.mul(x, ones).unwrap();
    let c = b.mul(also_ones, a).unwrap();
    let d = b.div(c, ones).unwrap();
    let e = b.add(d, zeros).unwrap();
    let g = b.add(zeros, e).unwrap();
    let h = b.sub(g, zeros).unwrap();
    let kept = b.mul(h, zeros).unwrap();
    let f = b.finish(&[h, kept]).unwrap();
    let s = simplify(&f);
    assert_eq!(s.outputs[0], s.params[0], "the identity chain folds to x");
    let names: Vec<&str> = s.eqns.iter().map(|q| q.prim.name()).collect();
    assert!(!names.contains(&"div") && !names.contains(&"add") && !names.contains(&"sub"), "{names:?}");
    assert_eq!(names.iter().filter(|n| **n == "mul").count(), 1, "only the float x * 0 stays: {names:?}");
    let mut xv = Rng(3).tensor(&t, -2.0, 2.0).to_f64_vec();
    xv[0] = f64::INFINITY;
    xv[1] = f64::NAN;
    let xt = graft_core::Tensor::from_vec(vec![2, 3], xv).unwrap();
    let (want, got) = (run(&f, std::slice::from_ref(&xt)), run(&s, std::slice::from_ref(&xt)));
    for (w, g) in want.iter().zip(&got) {
        let bits = |t: &graft_core::Tensor| -> Vec<u64> { t.to_f64_vec().iter().map(|v| v.to_bits()).collect() };
        assert_eq!(bits(w), bits(g));
    }
    assert!(got[1].to_f64_vec()[0].is_nan(), "inf * 0 stays NaN");

    // Integer x * 0 is the zero operand.
    let ti = TensorType::new(DType::I32, vec![4]);
    let mut b = Builder::new("i");
    let x = b.param(ti.clone());
    let z = b.zeros(&ti).unwrap();
    let m = b.mul(x, z).unwrap();
    let one = b.ones(&ti).unwrap();
    let r = b.mul(one, m).unwrap();
    let f = b.finish(&[r]).unwrap();
    let s = simplify(&f);
    assert!(s.eqns.iter().all(|q| q.prim.name() != "mul"));
    let xi = graft_core::Tensor::from_vec(vec![4], vec![3i32, -7, 0, i32::MAX]).unwrap();
    assert_eq!(run(&s, std::slice::from_ref(&xi))[0].to_f64_vec(), vec![0.0; 4]);
}

/// `neg(neg(x))` folds to `x`, `abs(abs(x))` to `abs(x)` and `abs(neg(x))`
/// reads `x`: bitwise the same on NaN, infinities, zeros of both signs and
/// the most negative i32 (whose negation wraps); an unsigned `abs(neg(x))`
/// is `neg(x)` and stays.
#[test]
fn sign_identities_fold_exactly() {
    let build = |dt: DType| {
        let t = TensorType::new(dt, vec![6]);
        let mut b = Builder::new("s");
        let x = b.param(t);
        let n = b.neg(x).unwrap();
        let nn = b.neg(n).unwrap();
        let a = b.abs(n).unwrap();
        let aa = b.abs(a).unwrap();
        let f = b.finish(&[nn, a, aa]).unwrap();
        let s = simplify(&f);
        (f, s)
    };
    let names = |s: &graft_core::Func| -> Vec<&'static str> { s.eqns.iter().map(|q| q.prim.name()).collect() };
    let bits = |ts: Vec<graft_core::Tensor>| -> Vec<Vec<u64>> {
        ts.iter().map(|t| t.to_f64_vec().iter().map(|v| v.to_bits()).collect()).collect()
    };

    let (f, s) = build(DType::F32);
    assert_eq!(s.outputs[0], s.params[0], "neg(neg(x)) is x");
    assert_eq!(names(&s), vec!["abs"], "abs(neg(x)) reads x, abs(abs(.)) is gone: {s}");
    assert_eq!(s.outputs[1], s.outputs[2]);
    let x = graft_core::Tensor::from_vec(vec![6], vec![-0.0f32, 0.0, f32::NAN, -f32::INFINITY, -2.5, 1e-45]).unwrap();
    assert_eq!(bits(run(&f, std::slice::from_ref(&x))), bits(run(&s, std::slice::from_ref(&x))));

    let (f, s) = build(DType::I32);
    assert_eq!(names(&s), vec!["abs"]);
    let x = graft_core::Tensor::from_vec(vec![6], vec![i32::MIN, i32::MAX, -1, 0, 7, -7]).unwrap();
    assert_eq!(bits(run(&f, std::slice::from_ref(&x))), bits(run(&s, std::slice::from_ref(&x))));

    let (f, s) = build(DType::U32);
    assert_eq!(names(&s), vec!["neg", "abs"], "unsigned abs(neg(x)) is neg(x): {s}");
    assert_eq!(s.outputs[0], s.params[0]);
    let x = graft_core::Tensor::from_vec(vec![6], vec![0u32, 1, 2, u32::MAX, 1 << 31, 12345]).unwrap();
    assert_eq!(bits(run(&f, std::slice::from_ref(&x))), bits(run(&s, std::slice::from_ref(&x))));
}

/// A multiplication by a broadcast 1.0 that `jvp(grad(f))` with a ones
/// tangent used to leave behind (kmeans' `dir`) is gone after the transform.
#[test]
fn jvp_of_grad_with_ones_tangent_has_no_mul_by_one() {
    let t = TensorType::new(DType::F64, vec![5]);
    let mut b = Builder::new("f");
    let x = b.param(t.clone());
    let sq = b.mul(x, x).unwrap();
    let s = b.reduce_sum(sq, &[0]).unwrap();
    let f = b.finish(&[s]).unwrap();
    let g = graft_core::ad::grad(&f, &graft_core::ad::Wrt::All).unwrap();
    let mut b = Builder::new("h");
    let x = b.param(t.clone());
    let ones = b.ones(&t).unwrap();
    let j = graft_core::ad::jvp_inline(&mut b, &g, &[x], &[Some(ones)]).unwrap();
    let h = simplify(&b.finish(&[j.1[0].unwrap()]).unwrap());
    // Values holding only 1.0: constants equal to 1 and broadcasts of them.
    let mut one = vec![false; h.n_values()];
    for q in &h.eqns {
        let is_one = match &q.prim {
            graft_core::Prim::Constant(c) => c.value.to_f64_vec().iter().all(|&v| v == 1.0),
            graft_core::Prim::BroadcastInDim(_) => one[q.inputs[0].index()],
            _ => false,
        };
        one[q.outputs[0].index()] = is_one;
    }
    let by_one = h.eqns.iter().filter(|q| q.prim.name() == "mul" && q.inputs.iter().any(|v| one[v.index()])).count();
    assert_eq!(by_one, 0, "a multiplication by 1 survived");
    let xv = Rng(4).tensor(&t, -1.0, 1.0);
    let got = run(&h, std::slice::from_ref(&xv))[0].to_f64_vec();
    assert_eq!(got, vec![2.0; 5], "d/dx (2x) . 1 = 2");
}

/// `flatten` inlines a one-step scan whose body is elementwise but keeps
/// one whose body shifts its carry by a concatenation (a compiled loop
/// reads that in place); `flatten_all`, for loop bodies compiled whole,
/// inlines both. The results are the same every way.
#[test]
fn one_step_scans_that_shift_stay_loops_until_a_body_is_compiled() {
    use graft_core::ops::scan::ScanOpts;
    use graft_core::opt::{flatten, flatten_all};
    use std::sync::Arc;
    let t = TensorType::new(DType::F64, vec![6]);
    let step = |shift: bool| {
        let mut b = Builder::new("step");
        let y = b.param(t.clone());
        let z = if shift {
            let one = b.scalar(1.0, DType::F64).unwrap();
            let one = b.broadcast_in_dim(one, &[1], &[]).unwrap();
            let head = b.slice(y, &[0], &[5], &[1]).unwrap();
            b.concatenate(&[one, head], 0).unwrap()
        } else {
            y
        };
        let e = b.exp(z).unwrap();
        let s = b.mul(e, y).unwrap();
        Arc::new(b.finish(&[s]).unwrap())
    };
    let scans = |f: &graft_core::Func| f.eqns.iter().filter(|e| e.prim.name() == "scan").count();
    for shift in [false, true] {
        let mut b = Builder::new("f");
        let y = b.param(t.clone());
        let out = b.scan(step(shift), &[], &[y], &[], ScanOpts::new(1)).unwrap();
        let f = b.finish(&out).unwrap();
        let kept = flatten(&f).map_or(1, |g| scans(&g));
        assert_eq!(kept, usize::from(shift), "shift {shift}: one-step scans left by flatten");
        let all = flatten_all(&f).expect("something to inline");
        assert_eq!(scans(&all), 0, "flatten_all inlines every one-step scan");
        let x = Rng(3).tensor(&t, -1.0, 1.0);
        assert_eq!(run(&f, std::slice::from_ref(&x)), run(&all, std::slice::from_ref(&x)));
    }
}

/// A clipping `gather` or a `dynamic_slice` of a splat (a broadcast of a
/// constant, of a rank-0 parameter, of a one-element parameter) becomes a
/// broadcast of the element, with the same results whatever the indices
/// (out of range ones included); a `fill`-mode gather, which reads 0 out of
/// range, and a gather of a non-splat stay.
#[test]
fn reads_of_splats_become_broadcasts() {
    use graft_core::ops::index::IndexMode;
    let mut b = Builder::new("f");
    let s = b.param(TensorType::new(DType::F64, vec![]));
    let one = b.param(TensorType::new(DType::F32, vec![1, 1]));
    let table = b.param(TensorType::new(DType::F64, vec![4, 3]));
    let idx = b.param(TensorType::new(DType::I32, vec![6, 1]));
    let start = b.param(TensorType::new(DType::I32, vec![]));
    let c = b.scalar(-0.0, DType::F64).unwrap();
    let splat_c = b.broadcast_in_dim(c, &[4, 3], &[]).unwrap();
    let splat_s = b.broadcast_in_dim(s, &[4, 3], &[]).unwrap();
    let splat_one = b.broadcast_in_dim(one, &[4, 3], &[0, 1]).unwrap();
    let g1 = b.gather(splat_c, idx, 0, &[0], IndexMode::Clip).unwrap();
    let g2 = b.gather(splat_s, idx, 0, &[0], IndexMode::Clip).unwrap();
    let g3 = b.gather(splat_one, idx, 0, &[0], IndexMode::Clip).unwrap();
    let d = b.dynamic_slice(splat_s, &[start, start], &[2, 2]).unwrap();
    let kept_fill = b.gather(splat_s, idx, 0, &[0], IndexMode::Fill).unwrap();
    let kept_table = b.gather(table, idx, 0, &[0], IndexMode::Clip).unwrap();
    let f = b.finish(&[g1, g2, g3, d, kept_fill, kept_table]).unwrap();
    let g = simplify(&f);
    let gathers = g.eqns.iter().filter(|q| q.prim.name() == "gather").count();
    assert_eq!(gathers, 2, "only the fill-mode gather and the table's stay:\n{g}");
    assert!(g.eqns.iter().all(|q| q.prim.name() != "dynamic_slice"), "{g}");
    let ins = [
        graft_core::Tensor::scalar(2.5f64),
        graft_core::Tensor::from_vec(vec![1, 1], vec![-3.0f32]).unwrap(),
        Rng(5).tensor(&TensorType::new(DType::F64, vec![4, 3]), -1.0, 1.0),
        graft_core::Tensor::from_vec(vec![6, 1], vec![0i32, 3, -2, 9, 1, 2]).unwrap(),
        graft_core::Tensor::scalar(7i32),
    ];
    let (want, got) = (run(&f, &ins), run(&g, &ins));
    for (w, o) in want.iter().zip(&got) {
        assert_eq!(w.ty(), o.ty());
        let bits = |t: &graft_core::Tensor| -> Vec<u64> { t.to_f64_vec().iter().map(|v| v.to_bits()).collect() };
        assert_eq!(bits(w), bits(o));
    }
    assert!(got[0].to_f64_vec().iter().all(|v| v.to_bits() == (-0.0f64).to_bits()), "the constant's -0.0 itself");
}

/// `merge_steps`: neighbouring one-step scans become one scan of length
/// one (a `y` of the first read as the second's `xs`, a final carry of the
/// first as the second's initial carry and as an operand of a later
/// equation), an equation between them that does not read the first moves
/// before the merged scan and one that does after it, a print ends a
/// group, and a lone one-step scan with an unread result is rebuilt
/// without it. Results are bitwise those of the op-by-op reference.
#[test]
fn neighbouring_one_step_scans_merge_into_one() {
    use graft_core::kernel::CompileMode;
    use graft_core::ops::scan::ScanOpts;
    use graft_core::opt::merge_steps;
    use graft_core::{ExecOptions, Executable, Func, Tensor};
    use std::sync::Arc;
    let t = TensorType::new(DType::F64, vec![5]);
    let row = TensorType::new(DType::F64, vec![1, 5]);
    // (c, y, x) -> (y * c + x, exp(y)) and (c, k, x) -> (k + x * c, sin(k)).
    let body = |second: bool| {
        let mut b = Builder::new(if second { "b" } else { "a" });
        let c = b.param(t.clone());
        let y = b.param(t.clone());
        let x = b.param(t.clone());
        let (next, out) = if second {
            let m = b.mul(x, c).unwrap();
            (b.add(y, m).unwrap(), b.sin(y).unwrap())
        } else {
            let m = b.mul(y, c).unwrap();
            (b.add(m, x).unwrap(), b.exp(y).unwrap())
        };
        Arc::new(b.finish(&[next, out]).unwrap())
    };
    let mut b = Builder::new("f");
    let p = b.param(t.clone());
    let q = b.param(t.clone());
    let xs = b.param(row.clone());
    let a = b.scan(body(false), &[p], &[q], &[xs], ScanOpts::new(1)).unwrap();
    let u = b.neg(p).unwrap(); // reads no result of `a`: moves before
    let w = b.mul(a[0], a[0]).unwrap(); // reads one: moves after
    let k = b.scan(body(true), &[u], &[a[0]], &[a[1]], ScanOpts::new(1)).unwrap();
    b.debug_print("k {}", &[k[0]]).unwrap();
    // Alone after the print, with its `y` unread.
    let c = b.scan(body(true), &[p], &[k[0]], &[xs], ScanOpts::new(1)).unwrap();
    let f = b.finish(&[w, k[0], k[1], c[0]]).unwrap();

    let g = merge_steps(&f, &|_| true).expect("something to merge");
    let scans: Vec<_> = g
        .eqns
        .iter()
        .filter_map(|e| match &e.prim {
            graft_core::Prim::Scan(s) => Some((s.length, s.n_consts, s.n_carry, s.body.outputs.len())),
            _ => None,
        })
        .collect();
    // The merged scan: consts p, xs (its one row read through a reshape
    // in the body), u; carry q (its final value `a[0]` is read
    // by `w`); results a[0], then `k[0]` (a carry whose initial value came
    // from `a`: a stacked `y`) and `k[1]`. The lone one: const p and `xs`,
    // carry k[0], no `y`.
    assert_eq!(scans, vec![(1, 3, 1, 3), (1, 2, 1, 1)], "{g}");
    let names: Vec<&str> = g.eqns.iter().map(|e| e.prim.name()).collect();
    let at = |n: &str| names.iter().position(|m| *m == n).unwrap_or_else(|| panic!("no {n} in {g}"));
    assert!(at("neg") < at("scan") && at("scan") < at("mul"), "{g}");
    assert!(merge_steps(&f, &|_| false).is_none(), "nothing merges where no body compiles");

    let mut rng = Rng(11);
    let ins = [rng.tensor(&t, -1.0, 1.0), rng.tensor(&t, -1.0, 1.0), rng.tensor(&row, -1.0, 1.0)];
    let refs: Vec<&Tensor> = ins.iter().collect();
    let reference = ExecOptions { fuse: false, compile: CompileMode::Off, ..ExecOptions::default() };
    let run_with = |h: &Func, o: ExecOptions| Executable::with_options(h.clone(), o).unwrap().run(&refs).unwrap();
    let want = run_with(&f, reference);
    let bits = |ts: &[Tensor]| {
        ts.iter().map(|t| t.to_f64_vec().iter().map(|x| x.to_bits()).collect()).collect::<Vec<Vec<u64>>>()
    };
    assert_eq!(bits(&run_with(&g, reference)), bits(&want), "merged, op by op");
    assert_eq!(bits(&run_with(&f, ExecOptions { compile: CompileMode::Off, ..ExecOptions::default() })), bits(&want));
}
