//! The reusable vmap checker: `vmap(f)(xs)` must equal stacking `f(x_i)`
//! computed one example at a time (exact for integer and bool outputs,
//! 1e-12 relative for floats), for given or random in_axes/out_axes.
//!
//! Axes are signed like the public API (`-1` = after the last dim, the
//! rank + 1 insertion positions counted from the end), so the checker
//! exercises `vmap_func_signed`'s resolution as well as the rules.

use super::{run, Rng};
use graft_core::batch::{resolve_axes, vmap_func_signed};
use graft_core::{Func, Tensor, TensorType};

/// How to draw an argument. `Shared*` arguments are never batched (e.g. a
/// parameter the test means to broadcast); `Key` draws `i32` key words.
#[derive(Clone, Copy, Debug)]
pub enum Gen {
    F(f64, f64),
    I(i64, i64),
    Shared(f64, f64),
    SharedI(i64, i64),
    Key,
}

impl Gen {
    fn batchable(self) -> bool {
        matches!(self, Gen::F(..) | Gen::I(..) | Gen::Key)
    }
}

pub fn draw(rng: &mut Rng, t: &TensorType, g: Gen) -> Tensor {
    match g {
        Gen::F(lo, hi) | Gen::Shared(lo, hi) => rng.tensor(t, lo, hi),
        Gen::I(lo, hi) | Gen::SharedI(lo, hi) => {
            let v: Vec<f64> = (0..t.numel()).map(|_| rng.uniform(lo as f64, hi as f64 + 1.0).floor()).collect();
            Tensor::from_fn(t, |i| v[i])
        }
        Gen::Key => draw(rng, t, Gen::I(-2_000_000_000, 2_000_000_000)),
    }
}

/// Example `i` along `axis` of a host tensor.
pub fn take(t: &Tensor, axis: usize, i: usize) -> Tensor {
    let shape = t.shape().to_vec();
    let inner: usize = shape[axis + 1..].iter().product();
    let n = shape[axis];
    let mut out_shape = shape.clone();
    out_shape.remove(axis);
    let v = t.to_f64_vec();
    Tensor::from_fn(&TensorType::new(t.dtype(), out_shape), |k| {
        let (o, r) = (k / inner.max(1), k % inner.max(1));
        v[(o * n + i) * inner + r]
    })
}

/// Stacks equal-typed host tensors along a new `axis`.
pub fn stack(ts: &[Tensor], axis: usize) -> Tensor {
    let shape = ts[0].shape().to_vec();
    let inner: usize = shape[axis..].iter().product();
    let n = ts.len();
    let mut out_shape = shape.clone();
    out_shape.insert(axis, n);
    let vs: Vec<Vec<f64>> = ts.iter().map(Tensor::to_f64_vec).collect();
    Tensor::from_fn(&TensorType::new(ts[0].dtype(), out_shape), |k| {
        let r = k % inner.max(1);
        let i = (k / inner.max(1)) % n;
        let o = k / (inner.max(1) * n);
        vs[i][o * inner + r]
    })
}

/// Exact for integers and bools, 1e-12 relative (absolute below 1) for floats.
pub fn assert_same(name: &str, got: &Tensor, want: &Tensor) {
    assert_eq!(got.ty(), want.ty(), "{name}: types differ");
    let (g, w) = (got.to_f64_vec(), want.to_f64_vec());
    for (k, (a, b)) in g.iter().zip(&w).enumerate() {
        let ok = if got.dtype().is_float() {
            (a - b).abs() <= 1e-12 * b.abs().max(1.0) || (a.is_nan() && b.is_nan()) || a == b
        } else {
            a == b
        };
        assert!(ok, "{name}: element {k}: vmap gave {a}, per-example loop gave {b}");
    }
}

/// Runs `vmap(f)` with the given (signed) axes and the per-example loop on
/// the same random batch and compares every output.
pub fn check_vmap_axes(
    name: &str,
    f: &Func,
    gens: &[Gen],
    in_axes: &[Option<isize>],
    out_axes: &[Option<isize>],
    size: usize,
    rng: &mut Rng,
) {
    let ctx = format!("{name} (in_axes {in_axes:?}, out_axes {out_axes:?}, size {size})");
    let vf = vmap_func_signed(f, in_axes, out_axes, size).unwrap_or_else(|e| panic!("{ctx}: vmap failed: {e}\n{f}"));
    graft_core::ir::verify(&vf).unwrap_or_else(|e| panic!("{ctx}: {e}\n{vf}"));
    let in_ranks: Vec<usize> = f.param_types().iter().map(TensorType::rank).collect();
    let out_ranks: Vec<usize> = f.output_types().iter().map(TensorType::rank).collect();
    let ia = resolve_axes(in_axes, &in_ranks, "in_axes").unwrap();
    let oa = resolve_axes(out_axes, &out_ranks, "out_axes").unwrap();
    let args: Vec<Tensor> = f
        .param_types()
        .iter()
        .zip(gens)
        .zip(&ia)
        .map(|((t, &g), a)| match a {
            Some(a) => {
                let mut s = t.shape.to_vec();
                s.insert(*a, size);
                draw(rng, &TensorType::new(t.dtype, s), g)
            }
            None => draw(rng, t, g),
        })
        .collect();
    let got = run(&vf, &args);
    let per: Vec<Vec<Tensor>> = (0..size)
        .map(|i| {
            let xs: Vec<Tensor> =
                args.iter().zip(&ia).map(|(x, a)| a.map_or_else(|| x.clone(), |a| take(x, a, i))).collect();
            run(f, &xs)
        })
        .collect();
    for (j, o) in oa.iter().enumerate() {
        let outs: Vec<Tensor> = per.iter().map(|p| p[j].clone()).collect();
        let want = match o {
            Some(a) => stack(&outs, *a),
            None => outs[0].clone(),
        };
        assert_same(&format!("{ctx} output {j}"), &got[j], &want);
    }
}

/// A random insertion position for a value of rank `r`, negative half the time.
fn random_axis(rng: &mut Rng, r: usize) -> isize {
    let a = (rng.next_f64() * (r + 1) as f64) as isize;
    if rng.next_f64() < 0.5 {
        a - (r as isize + 1)
    } else {
        a
    }
}

/// `trials` random in_axes (each batchable argument batched at a random
/// position, possibly negative, or unbatched; at least one batched),
/// out_axes and batch sizes 1..=4, from an RNG seeded by `name`.
pub fn check_vmap(name: &str, f: &Func, gens: &[Gen], trials: usize) {
    assert_eq!(gens.len(), f.params.len(), "{name}: one Gen per parameter");
    let mut rng = Rng(name.bytes().fold(7u64, |h, c| h.wrapping_mul(31).wrapping_add(c as u64)));
    for _ in 0..trials {
        let mut in_axes: Vec<Option<isize>> = f
            .param_types()
            .iter()
            .zip(gens)
            .map(|(t, g)| match g {
                _ if !g.batchable() => None,
                _ if rng.next_f64() < 0.25 => None,
                _ => Some(random_axis(&mut rng, t.rank())),
            })
            .collect();
        if in_axes.iter().all(Option::is_none) {
            let i = gens.iter().position(|g| g.batchable()).expect("a batchable argument");
            in_axes[i] = Some(0);
        }
        let out_axes: Vec<Option<isize>> =
            f.output_types().iter().map(|t| Some(random_axis(&mut rng, t.rank()))).collect();
        let size = 1 + (rng.next_f64() * 4.0) as usize;
        check_vmap_axes(name, f, gens, &in_axes, &out_axes, size, &mut rng);
    }
}
