//! Collectives over a named axis (`ops/collective.rs`): run by a thread
//! group (one thread per rank, `comm::LocalGroup`) and under a vmap that
//! binds the axis, with equal results; their JVP against central finite
//! differences of the whole group's function and their transpose by the
//! dot-product test summed over the ranks; the errors of an unbound axis,
//! a size mismatch, ranks that disagree and a rank that never answers.

use crate::common::{dot, Rng};
use graft_core::ad::{jvp_func, vjp_func, Wrt};
use graft_core::batch::vmap_func_named;
use graft_core::comm::{self, LocalGroup};
use graft_core::ops::collective::{Axis, Kind};
use graft_core::{Builder, DType, Executable, Func, IrError, Tensor, TensorType, Value};
use std::time::Duration;

const N: usize = 3;

fn t64(shape: &[usize]) -> TensorType {
    TensorType::new(DType::F64, shape.to_vec())
}

/// Runs `f` on `inputs.len()` ranks, one thread each, with the axis `i`
/// bound to a thread group; each rank's results, or its error text.
fn run_group(fs: &[Func], inputs: &[Vec<Tensor>], timeout: Duration) -> Vec<Result<Vec<Tensor>, String>> {
    let comms = LocalGroup::ranks(inputs.len(), timeout);
    std::thread::scope(|s| {
        let handles: Vec<_> = comms
            .into_iter()
            .zip(inputs)
            .zip(fs.iter().cycle())
            .map(|((c, ins), f)| {
                s.spawn(move || {
                    let _bound = comm::bind_thread("i", c);
                    let refs: Vec<&Tensor> = ins.iter().collect();
                    Executable::new(f.clone()).and_then(|e| e.run(&refs)).map_err(|e| e.to_string())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a rank's thread panicked")).collect()
    })
}

fn group(f: &Func, inputs: &[Vec<Tensor>]) -> Vec<Vec<Tensor>> {
    run_group(std::slice::from_ref(f), inputs, Duration::from_secs(60))
        .into_iter()
        .map(|r| r.unwrap_or_else(|e| panic!("{e}\n{f}")))
        .collect()
}

/// Rank tensors stacked along a new leading axis.
fn stack(ts: &[Tensor]) -> Tensor {
    let mut shape = vec![ts.len()];
    shape.extend_from_slice(ts[0].shape());
    let data: Vec<f64> = ts.iter().flat_map(Tensor::to_f64_vec).collect();
    Tensor::from_fn(&TensorType::new(ts[0].dtype(), shape), |i| data[i])
}

fn close(a: &Tensor, b: &Tensor, tol: f64, what: &str) {
    assert_eq!(a.shape(), b.shape(), "{what}: shapes");
    for (i, (x, y)) in a.to_f64_vec().iter().zip(b.to_f64_vec()).enumerate() {
        assert!((x - y).abs() <= tol * (1.0 + x.abs().max(y.abs())), "{what}[{i}]: {x} vs {y}");
    }
}

/// A one-input function of `ty` built by `body`.
fn func(name: &str, ty: TensorType, body: impl FnOnce(&mut Builder, Value) -> Result<Value, IrError>) -> Func {
    let mut b = Builder::new(name);
    let x = b.param(ty);
    let y = body(&mut b, x).unwrap_or_else(|e| panic!("{name}: {e}"));
    b.finish(&[y]).unwrap()
}

fn axis() -> Axis {
    Axis::new("i", N)
}

fn coll(b: &mut Builder, kind: Kind, x: Value) -> Result<Value, IrError> {
    b.collective(kind, &axis(), Some(x))
}

/// The corpus: one function per collective, each mixing it with nonlinear
/// per-rank work so that its derivative rules matter.
fn corpus() -> Vec<(Func, TensorType)> {
    let v = t64(&[4]);
    vec![
        (
            func("psum", v.clone(), |b, x| {
                let sq = b.mul(x, x)?;
                let s = coll(b, Kind::Psum, sq)?;
                let sx = b.sin(x)?;
                b.mul(sx, s)
            }),
            v.clone(),
        ),
        (
            func("pmean", v.clone(), |b, x| {
                let e = b.exp(x)?;
                let m = coll(b, Kind::Pmean, e)?;
                b.mul(m, x)
            }),
            v.clone(),
        ),
        (
            func("pmax", v.clone(), |b, x| {
                let s = b.sin(x)?;
                let m = coll(b, Kind::Pmax, s)?;
                b.mul(m, x)
            }),
            v.clone(),
        ),
        (
            func("pmin", v.clone(), |b, x| {
                let m = coll(b, Kind::Pmin, x)?;
                let e = b.exp(m)?;
                b.add(e, x)
            }),
            v.clone(),
        ),
        (
            func("all_gather", t64(&[2, 3]), |b, x| {
                let g = coll(b, Kind::AllGather { dim: 1 }, x)?;
                b.tanh(g)
            }),
            t64(&[2, 3]),
        ),
        (
            func("reduce_scatter", t64(&[2, N]), |b, x| {
                let s = b.sin(x)?;
                let r = coll(b, Kind::ReduceScatter { dim: 1 }, s)?;
                b.mul(r, r)
            }),
            t64(&[2, N]),
        ),
        (
            func("ppermute", v.clone(), |b, x| {
                let s = b.sin(x)?;
                let p = coll(b, Kind::Ppermute { perm: vec![(0, 1), (1, 2)] }, s)?;
                let q = b.mul(x, p)?;
                b.add(q, x)
            }),
            v.clone(),
        ),
        (
            func("axis_index", v.clone(), |b, x| {
                let r = b.axis_index(&axis())?;
                let r = b.convert(r, DType::F64)?;
                let ty = b.ty(x)?.clone();
                let r = b.broadcast_in_dim(r, &ty.shape, &[])?;
                let c = b.cos(x)?;
                b.mul(c, r)
            }),
            v,
        ),
    ]
}

fn rank_inputs(ty: &TensorType, rng: &mut Rng) -> Vec<Tensor> {
    (0..N).map(|_| rng.tensor(ty, -1.5, 1.5)).collect()
}

#[test]
fn thread_group_results_equal_the_reference_values() {
    let xs: Vec<Tensor> = (0..N).map(|r| Tensor::from_fn(&t64(&[2, 3]), |i| (10 * r + i) as f64)).collect();
    let one = |f: &Func| group(f, &xs.iter().map(|x| vec![x.clone()]).collect::<Vec<_>>());
    let id = |kind: Kind| func("c", t64(&[2, 3]), move |b, x| coll(b, kind, x));
    // psum / pmean / pmax / pmin: elementwise over the ranks.
    for (kind, want) in
        [(Kind::Psum, (30.0, 3.0)), (Kind::Pmean, (10.0, 1.0)), (Kind::Pmax, (20.0, 1.0)), (Kind::Pmin, (0.0, 1.0))]
    {
        let want = |i: usize| want.0 + want.1 * i as f64;
        for (r, out) in one(&id(kind.clone())).iter().enumerate() {
            assert_eq!(out[0].to_f64_vec(), (0..6).map(want).collect::<Vec<_>>(), "{kind:?} on rank {r}");
        }
    }
    // all_gather at dim 1: [2, N, 3], out[a, r, c] = x_r[a, c].
    for out in one(&id(Kind::AllGather { dim: 1 })) {
        assert_eq!(out[0].shape(), &[2, N, 3]);
        let v = out[0].to_f64_vec();
        for a in 0..2 {
            for r in 0..N {
                for c in 0..3 {
                    assert_eq!(v[(a * N + r) * 3 + c], (10 * r + a * 3 + c) as f64);
                }
            }
        }
    }
    // reduce_scatter at dim 0 of [N, 2]: rank r gets row r of the sum.
    let rs = func("rs", t64(&[N, 2]), |b, x| coll(b, Kind::ReduceScatter { dim: 0 }, x));
    let ys: Vec<Vec<Tensor>> = (0..N).map(|r| vec![Tensor::from_fn(&t64(&[N, 2]), |i| (100 * r + i) as f64)]).collect();
    for (r, out) in group(&rs, &ys).iter().enumerate() {
        let want: Vec<f64> = (0..2).map(|c| (0..N).map(|s| (100 * s + 2 * r + c) as f64).sum()).collect();
        assert_eq!(out[0].to_f64_vec(), want, "reduce_scatter on rank {r}");
    }
    // ppermute 0 -> 2, 2 -> 0: rank 1 is no destination and gets zeros.
    let outs = one(&id(Kind::Ppermute { perm: vec![(0, 2), (2, 0)] }));
    assert_eq!(outs[0][0], xs[2]);
    assert_eq!(outs[1][0].to_f64_vec(), vec![0.0; 6]);
    assert_eq!(outs[2][0], xs[0]);
    // axis_index: the rank.
    let mut b = Builder::new("idx");
    let r = b.axis_index(&axis()).unwrap();
    let f = b.finish(&[r]).unwrap();
    for (r, out) in group(&f, &vec![vec![]; N]).iter().enumerate() {
        assert_eq!(out[0], Tensor::scalar(r as i32));
    }
}

#[test]
fn vmap_over_the_named_axis_equals_the_thread_group() {
    let mut rng = Rng(7);
    for (f, ty) in corpus() {
        let xs = rank_inputs(&ty, &mut rng);
        let per_rank = group(&f, &xs.iter().map(|x| vec![x.clone()]).collect::<Vec<_>>());
        let vf =
            vmap_func_named(&f, &[Some(0)], &[Some(0)], N, Some("i")).unwrap_or_else(|e| panic!("{}: {e}", f.name));
        let out = crate::common::run(&vf, &[stack(&xs)]);
        let want = stack(&per_rank.iter().map(|o| o[0].clone()).collect::<Vec<_>>());
        close(&out[0], &want, 1e-12, &format!("vmap of {}", f.name));
        // The batched function has no collective left.
        assert!(!vf.to_string().contains("axis=i"), "{}: a collective survived vmap:\n{vf}", f.name);
    }
}

#[test]
fn derivatives_match_finite_differences_and_transpose_by_the_dot_product_test() {
    let mut rng = Rng(11);
    let eps = 1e-6;
    for (f, ty) in corpus() {
        let name = f.name.clone();
        let xs = rank_inputs(&ty, &mut rng);
        let vs = rank_inputs(&ty, &mut rng);
        // JVP on every rank against central differences of the whole group.
        let jf = jvp_func(&f).unwrap_or_else(|e| panic!("{name}: {e}"));
        let jins: Vec<Vec<Tensor>> = xs.iter().zip(&vs).map(|(x, v)| vec![x.clone(), v.clone()]).collect();
        let jout = group(&jf, &jins);
        let shifted = |s: f64| -> Vec<Vec<Tensor>> {
            let ins: Vec<Vec<Tensor>> = xs
                .iter()
                .zip(&vs)
                .map(|(x, v)| {
                    let (xv, vv) = (x.to_f64_vec(), v.to_f64_vec());
                    vec![Tensor::from_fn(&x.ty(), |i| xv[i] + s * vv[i])]
                })
                .collect();
            group(&f, &ins)
        };
        let (plus, minus) = (shifted(eps), shifted(-eps));
        for r in 0..N {
            let (p, m) = (plus[r][0].to_f64_vec(), minus[r][0].to_f64_vec());
            let fd = Tensor::from_fn(&jout[r][1].ty(), |i| (p[i] - m[i]) / (2.0 * eps));
            close(&jout[r][1], &fd, 1e-6, &format!("{name}: jvp on rank {r}"));
        }
        // VJP: sum over ranks of <u, J v> equals sum of <J^T u, v>.
        let vf = vjp_func(&f, &Wrt::All).unwrap_or_else(|e| panic!("{name}: {e}"));
        let us: Vec<Tensor> = jout.iter().map(|o| rng.tensor(&o[1].ty(), -1.0, 1.0)).collect();
        let vins: Vec<Vec<Tensor>> = xs.iter().zip(&us).map(|(x, u)| vec![x.clone(), u.clone()]).collect();
        let vout = group(&vf, &vins);
        let lhs: f64 = (0..N).map(|r| dot(&us[r], &jout[r][1])).sum();
        let rhs: f64 = (0..N).map(|r| dot(&vout[r][1], &vs[r])).sum();
        assert!((lhs - rhs).abs() <= 1e-9 * (1.0 + lhs.abs()), "{name}: dot-product test {lhs} vs {rhs}");
        // The same derivatives under a vmap that binds the axis.
        let vj = vmap_func_named(&jf, &[Some(0), Some(0)], &[Some(0), Some(0)], N, Some("i")).unwrap();
        let out = crate::common::run(&vj, &[stack(&xs), stack(&vs)]);
        close(
            &out[1],
            &stack(&jout.iter().map(|o| o[1].clone()).collect::<Vec<_>>()),
            1e-12,
            &format!("{name}: vmap(jvp)"),
        );
        let vv = vmap_func_named(&vf, &[Some(0), Some(0)], &[Some(0), Some(0)], N, Some("i")).unwrap();
        let out = crate::common::run(&vv, &[stack(&xs), stack(&us)]);
        close(
            &out[1],
            &stack(&vout.iter().map(|o| o[1].clone()).collect::<Vec<_>>()),
            1e-12,
            &format!("{name}: vmap(vjp)"),
        );
    }
}

#[test]
fn second_order_derivatives_compose() {
    // grad(grad) through psum: the transpose of the transpose is psum again.
    let f = func("f", t64(&[]), |b, x| {
        let c = b.mul(x, x)?;
        let c = b.mul(c, x)?;
        let s = coll(b, Kind::Psum, c)?;
        b.mul(s, x)
    });
    let g = graft_core::ad::grad(&f, &Wrt::All).unwrap();
    let h = graft_core::ad::grad(&g, &Wrt::All).unwrap();
    let xs: Vec<f64> = vec![0.5, -1.25, 2.0];
    let outs = group(&h, &xs.iter().map(|&x| vec![Tensor::scalar(x)]).collect::<Vec<_>>());
    // Reverse mode differentiates the sum over the ranks: G = sum_r x_r S
    // with S = sum_s x_s^3 has g_q = dG/dx_q = S + 3 X x_q^2 (X = sum_s x_s),
    // and grad(grad) is d/dx_r of sum_q g_q = N S + 3 X Q (Q = sum_q x_q^2):
    // 3 N x_r^2 + 3 Q + 6 X x_r.
    let total: f64 = xs.iter().sum();
    let q: f64 = xs.iter().map(|x| x * x).sum();
    for (r, o) in outs.iter().enumerate() {
        let want = 3.0 * N as f64 * xs[r] * xs[r] + 3.0 * q + 6.0 * total * xs[r];
        let got = o[0].to_scalar_f64().unwrap();
        assert!((got - want).abs() < 1e-12, "rank {r}: {got} vs {want}");
    }
}

#[test]
fn an_unbound_axis_is_an_error_that_says_how_to_bind_it() {
    let f = func("f", t64(&[2]), |b, x| coll(b, Kind::Psum, x));
    let e = Executable::new(f).unwrap().run(&[&Tensor::from_vec(vec![2], vec![1.0f64, 2.0]).unwrap()]).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("axis `i` is not bound") && msg.contains("axis_name"), "{msg}");
}

#[test]
fn a_vmap_of_another_size_and_a_group_of_another_size_are_rejected() {
    let f = func("f", t64(&[2]), |b, x| coll(b, Kind::Psum, x));
    let e = vmap_func_named(&f, &[Some(0)], &[Some(0)], N + 1, Some("i")).unwrap_err().to_string();
    assert!(e.contains("traced for 3 ranks") && e.contains("size 4"), "{e}");
    let x = Tensor::from_vec(vec![2], vec![1.0f64, 2.0]).unwrap();
    let res = run_group(std::slice::from_ref(&f), &vec![vec![x]; 2], Duration::from_secs(10));
    for r in res {
        let e = r.unwrap_err();
        assert!(e.contains("traced for 3 ranks") && e.contains("thread group of 2"), "{e}");
    }
}

#[test]
fn ranks_that_disagree_on_shapes_fail_naming_the_ranks_and_types() {
    let f2 = func("f", t64(&[2]), |b, x| coll(b, Kind::Psum, x));
    let f3 = func("f", t64(&[3]), |b, x| coll(b, Kind::Psum, x));
    let ins = vec![
        vec![Tensor::from_vec(vec![2], vec![1.0f64, 2.0]).unwrap()],
        vec![Tensor::from_vec(vec![3], vec![1.0f64, 2.0, 3.0]).unwrap()],
        vec![Tensor::from_vec(vec![2], vec![1.0f64, 2.0]).unwrap()],
    ];
    let res = run_group(&[f2, f3], &ins, Duration::from_secs(10));
    for r in res {
        let e = r.unwrap_err();
        assert!(
            e.contains("rank 0 calls") && e.contains("f64[2]") && e.contains("rank 1 calls") && e.contains("f64[3]"),
            "{e}"
        );
    }
}

#[test]
fn a_rank_that_never_answers_times_out_instead_of_hanging() {
    let f = func("f", t64(&[2]), |b, x| coll(b, Kind::Psum, x));
    let comms = LocalGroup::ranks(N, Duration::from_millis(200));
    let c0 = comms[0].clone();
    let start = std::time::Instant::now();
    let res = std::thread::spawn(move || {
        let _bound = comm::bind_thread("i", c0);
        let x = Tensor::from_vec(vec![2], vec![1.0f64, 2.0]).unwrap();
        Executable::new(f).unwrap().run(&[&x]).map_err(|e| e.to_string())
    })
    .join()
    .unwrap();
    let e = res.unwrap_err();
    assert!(e.contains("no answer from rank 1, 2 of the thread group"), "{e}");
    assert!(start.elapsed() < Duration::from_secs(30));
}

#[test]
fn shape_rules_reject_bad_operands() {
    let ax = axis();
    let mut b = Builder::new("bad");
    let x = b.param(t64(&[2, 4]));
    let bl = b.param(TensorType::new(DType::Bool, vec![2]));
    let i = b.param(TensorType::new(DType::I32, vec![2]));
    for (kind, arg, want) in [
        (Kind::ReduceScatter { dim: 1 }, x, "axis 1 has 3 entries"),
        (Kind::AllGather { dim: 3 }, x, "dim <= 2"),
        (Kind::Psum, bl, "numeric"),
        (Kind::Pmean, i, "float"),
        (Kind::Ppermute { perm: vec![(0, 1), (2, 1)] }, x, "at most once"),
        (Kind::Ppermute { perm: vec![(0, 3)] }, x, "ranks below 3"),
    ] {
        let e = b.collective(kind.clone(), &ax, Some(arg)).unwrap_err().to_string();
        assert!(e.contains(want), "{kind:?}: {e}");
    }
    // Integers sum exactly under the thread group.
    let f = func("isum", TensorType::new(DType::I32, vec![2]), |b, x| coll(b, Kind::Psum, x));
    let ins: Vec<Vec<Tensor>> = (0..N).map(|r| vec![Tensor::from_vec(vec![2], vec![r as i32, 7]).unwrap()]).collect();
    for out in group(&f, &ins) {
        assert_eq!(out[0], Tensor::from_vec(vec![2], vec![3i32, 21]).unwrap());
    }
}

#[test]
fn vmap_over_another_axis_keeps_the_batch_on_every_rank() {
    let mut rng = Rng(5);
    let batch = 2;
    for (f, ty) in corpus() {
        let vf = graft_core::batch::vmap_func(&f, &[Some(0)], &[Some(0)], batch).unwrap();
        // examples[e][r]: example e on rank r.
        let examples: Vec<Vec<Tensor>> = (0..batch).map(|_| rank_inputs(&ty, &mut rng)).collect();
        let batched: Vec<Vec<Tensor>> =
            (0..N).map(|r| vec![stack(&examples.iter().map(|ex| ex[r].clone()).collect::<Vec<_>>())]).collect();
        let got = group(&vf, &batched);
        let per: Vec<Vec<Vec<Tensor>>> =
            examples.iter().map(|ex| group(&f, &ex.iter().map(|x| vec![x.clone()]).collect::<Vec<_>>())).collect();
        for r in 0..N {
            let want = stack(&per.iter().map(|p| p[r][0].clone()).collect::<Vec<_>>());
            close(&got[r][0], &want, 1e-12, &format!("{} on rank {r}", f.name));
        }
    }
}

/// `x -> (psum(x * x), pmean(exp(sin(x))) + psum(x * x))` with both
/// all-reduces emitted after all the per-rank work, as a training step
/// emits its gradient buckets after the backward pass.
fn late_all_reduces() -> Func {
    let mut b = Builder::new("late");
    let x = b.param(t64(&[64]));
    let sq = b.mul(x, x).unwrap();
    let s = b.sin(x).unwrap();
    let e = b.exp(s).unwrap();
    let p = coll(&mut b, Kind::Psum, sq).unwrap();
    let m = coll(&mut b, Kind::Pmean, e).unwrap();
    let y = b.add(m, p).unwrap();
    b.finish(&[p, y]).unwrap()
}

#[test]
fn all_reduces_move_up_to_their_operands_and_keep_their_order() {
    let f = late_all_reduces();
    let h = graft_core::opt::hoist_collectives(&f).expect("the psum can move up");
    let ops: Vec<&str> = h.eqns.iter().map(|e| graft_core::Op::name(&e.prim)).collect();
    let at = |name: &str| ops.iter().position(|o| o.starts_with(name)).unwrap_or_else(|| panic!("{name} in {ops:?}"));
    assert!(at("psum") < at("sin"), "the psum follows its operand at once: {ops:?}");
    assert!(at("psum") < at("pmean"), "all-reduces keep their order: {ops:?}");
    assert_eq!(at("mul") + 1, at("psum"), "{ops:?}");
    // Nothing to move: none.
    assert!(graft_core::opt::hoist_collectives(&h).is_none());
    let plain = func("plain", t64(&[3]), |b, x| b.sin(x));
    assert!(graft_core::opt::hoist_collectives(&plain).is_none());
}

/// Runs `f` on a thread group whose ranks queue their collectives on a
/// background thread each (`comm::Queued`, as the MPI world does), with
/// `options`; each rank's results and run statistics.
fn run_queued(f: &Func, inputs: &[Vec<Tensor>], options: graft_core::ExecOptions) -> Vec<(Vec<Tensor>, usize)> {
    let comms = LocalGroup::ranks(inputs.len(), Duration::from_secs(60));
    std::thread::scope(|s| {
        let handles: Vec<_> = comms
            .into_iter()
            .zip(inputs)
            .map(|(c, ins)| {
                s.spawn(move || {
                    let q = std::sync::Arc::new(comm::Queued::new(c).expect("a thread starts"));
                    let _bound = comm::bind_thread("i", q);
                    let refs: Vec<&Tensor> = ins.iter().collect();
                    let exe = Executable::with_options(f.clone(), options).unwrap_or_else(|e| panic!("{e}"));
                    let (out, stats) = exe.run_with_stats(&refs).unwrap_or_else(|e| panic!("{e}"));
                    (out, stats.collectives_started)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a rank's thread panicked")).collect()
    })
}

#[test]
fn overlapped_all_reduces_give_the_bits_of_waiting_at_once() {
    let f = late_all_reduces();
    let mut rng = Rng(11);
    let xs = rank_inputs(&t64(&[64]), &mut rng);
    let inputs: Vec<Vec<Tensor>> = xs.iter().map(|x| vec![x.clone()]).collect();
    let base = graft_core::ExecOptions::default();
    let on = run_queued(&f, &inputs, graft_core::ExecOptions { overlap: true, ..base });
    let off = run_queued(&f, &inputs, graft_core::ExecOptions { overlap: false, ..base });
    let plain = group(&f, &inputs);
    for r in 0..N {
        assert_eq!(on[r].1, 2, "rank {r}: both all-reduces start in the background");
        assert_eq!(off[r].1, 0, "rank {r}: without overlap none does");
        for k in 0..2 {
            assert_eq!(crate::common::native::bits(&on[r].0[k]), crate::common::native::bits(&off[r].0[k]));
            assert_eq!(crate::common::native::bits(&on[r].0[k]), crate::common::native::bits(&plain[r][k]));
        }
    }
}

#[test]
fn a_queued_all_reduce_returns_before_the_other_ranks_arrive() {
    // Rank 0 starts an all-reduce, then tells rank 1 to start its own. If
    // starting waited for the other ranks, rank 0 would never send and the
    // group would time out.
    let comms = LocalGroup::ranks(2, Duration::from_secs(20));
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let mut rx = Some(rx);
    let ty = t64(&[3]);
    let results: Vec<Result<Vec<f64>, String>> = std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .into_iter()
            .enumerate()
            .map(|(r, c)| {
                let (tx, ty) = (tx.clone(), ty.clone());
                let rx = if r == 1 { rx.take() } else { None };
                s.spawn(move || {
                    let q = comm::Queued::new(c).map_err(|e| e.to_string())?;
                    let x = graft_core::tensor::Storage::F64(vec![r as f64 + 1.0; 3]);
                    let second = graft_core::tensor::Storage::F64(vec![10.0 * (r as f64 + 1.0); 3]);
                    use graft_core::comm::Communicator;
                    if let Some(rx) = rx {
                        rx.recv().map_err(|e| e.to_string())?;
                    }
                    let a = q.all_reduce_start(comm::ReduceOp::Sum, &ty, x);
                    let b = q.all_reduce_start(comm::ReduceOp::Max, &ty, second);
                    if r == 0 {
                        tx.send(()).map_err(|e| e.to_string())?;
                    }
                    // Waited for in the other order: both are done by then.
                    let b = b.wait().map_err(|e| e.to_string())?;
                    let a = a.wait().map_err(|e| e.to_string())?;
                    match (a, b) {
                        (graft_core::tensor::Storage::F64(a), graft_core::tensor::Storage::F64(b)) => {
                            Ok([a, b].concat())
                        }
                        _ => Err("dtype changed".into()),
                    }
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("a rank's thread panicked")).collect()
    });
    for r in results {
        assert_eq!(r.unwrap(), vec![3.0, 3.0, 3.0, 20.0, 20.0, 20.0]);
    }
}

/// `x -> while psum(sum(x * x)) < 1e3: x = 1.5 x + pmean(x) + axis_index`:
/// collectives in both the predicate (so every rank runs the same trips,
/// as MPI needs) and the body.
fn collective_while() -> Func {
    let v = t64(&[4]);
    let s = TensorType::new(DType::F64, vec![]);
    let cond = func("cond", v.clone(), |b, x| {
        let sq = b.mul(x, x)?;
        let tot = b.reduce_sum(sq, &[0])?;
        let all = coll(b, Kind::Psum, tot)?;
        let lim = b.full(1e3, &s)?;
        b.compare(graft_core::ops::binary::Compare::Lt, all, lim)
    });
    let body = func("body", v.clone(), |b, x| {
        let k = b.full(1.5, &v)?;
        let kx = b.mul(k, x)?;
        let m = coll(b, Kind::Pmean, x)?;
        let r = b.axis_index(&axis())?;
        let rf = b.convert(r, DType::F64)?;
        let rv = b.broadcast_in_dim(rf, &[4], &[])?;
        let y = b.add(kx, m)?;
        b.add(y, rv)
    });
    let mut b = Builder::new("collective_while");
    let x = b.param(v);
    let out = b.while_loop(std::sync::Arc::new(cond), std::sync::Arc::new(body), &[], &[x]).unwrap();
    let sq = b.mul(out[0], x).unwrap();
    b.finish(&[sq]).unwrap()
}

#[test]
fn named_vmap_runs_collectives_inside_while_loops() {
    let f = collective_while();
    let mut rng = Rng(5);
    let xs = rank_inputs(&t64(&[4]), &mut rng);
    let per_rank = group(&f, &xs.iter().map(|x| vec![x.clone()]).collect::<Vec<_>>());
    let vf = vmap_func_named(&f, &[Some(0)], &[Some(0)], N, Some("i")).unwrap_or_else(|e| panic!("{e}"));
    assert!(!vf.to_string().contains("axis=i"), "a collective survived vmap:\n{vf}");
    let out = crate::common::run(&vf, &[stack(&xs)]);
    let want = stack(&per_rank.iter().map(|o| o[0].clone()).collect::<Vec<_>>());
    close(&out[0], &want, 1e-12, "vmap of a while with collectives");
    // Reverse mode through the loop: the vmapped VJP equals the group's.
    let g = vjp_func(&f, &Wrt::All).unwrap_or_else(|e| panic!("{e}"));
    let cts = rank_inputs(&t64(&[4]), &mut rng);
    let ins: Vec<Vec<Tensor>> = xs.iter().zip(&cts).map(|(x, c)| vec![x.clone(), c.clone()]).collect();
    let per_rank = group(&g, &ins);
    let vg = vmap_func_named(&g, &[Some(0), Some(0)], &[Some(0), Some(0)], N, Some("i")).unwrap();
    let out = crate::common::run(&vg, &[stack(&xs), stack(&cts)]);
    for k in 0..2 {
        let want = stack(&per_rank.iter().map(|o| o[k].clone()).collect::<Vec<_>>());
        close(&out[k], &want, 1e-10, &format!("vmap of the loop's vjp, output {k}"));
    }
}
