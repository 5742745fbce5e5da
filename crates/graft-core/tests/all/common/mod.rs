//! Shared numeric checks for derivative tests (a port of JAX's
//! `check_grads` idea): JVP against central finite differences, and the
//! dot-product test `<u, J v> == <J^T u, v>` between JVP and VJP.
#![allow(dead_code)]

use graft_core::ad::{jvp_func, vjp_func, Wrt};
use graft_core::{Executable, Func, Tensor, TensorType};

pub mod matrix;
pub mod native;
pub mod vmap;

/// Row-major coordinates of flat index `i` over `shape`.
pub fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        idx[d] = i % shape[d];
        i /= shape[d];
    }
    idx
}

/// The row-major flat index of coordinates `idx` over `shape`.
pub fn ravel(idx: &[usize], shape: &[usize]) -> usize {
    idx.iter().zip(shape).fold(0, |acc, (i, s)| acc * s + i)
}

/// A small deterministic PRNG (SplitMix64) for test inputs.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_f64(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.next_f64()
    }

    pub fn tensor(&mut self, ty: &TensorType, lo: f64, hi: f64) -> Tensor {
        let vals: Vec<f64> = (0..ty.numel()).map(|_| self.uniform(lo, hi)).collect();
        Tensor::from_fn(ty, |i| vals[i])
    }
}

/// A function `f` of parameters of `types`, whose outputs `body` builds
/// from the parameters.
pub fn build(
    types: &[TensorType],
    body: impl FnOnce(&mut graft_core::Builder, &[graft_core::Value]) -> Result<Vec<graft_core::Value>, graft_core::IrError>,
) -> Func {
    let mut b = graft_core::Builder::new("f");
    let ps: Vec<graft_core::Value> = types.iter().map(|t| b.param(t.clone())).collect();
    let outs = body(&mut b, &ps).unwrap();
    b.finish(&outs).unwrap()
}

pub fn run(f: &Func, inputs: &[Tensor]) -> Vec<Tensor> {
    let refs: Vec<&Tensor> = inputs.iter().collect();
    Executable::new(f.clone()).unwrap_or_else(|e| panic!("{e}\n{f}")).run(&refs).unwrap_or_else(|e| panic!("{e}\n{f}"))
}

fn axpy(a: f64, x: &Tensor, y: &Tensor) -> Tensor {
    let (xv, yv) = (x.to_f64_vec(), y.to_f64_vec());
    Tensor::from_fn(&y.ty(), |i| yv[i] + a * xv[i])
}

pub fn dot(a: &Tensor, b: &Tensor) -> f64 {
    a.to_f64_vec().iter().zip(b.to_f64_vec()).map(|(x, y)| x * y).sum()
}

/// Checks forward mode against central differences and reverse mode against
/// forward mode (dot-product test), for the float inputs of `f` at `inputs`.
/// `f` may have several outputs; integer inputs/outputs are held fixed/ignored.
pub fn check_grads(name: &str, f: &Func, inputs: &[Tensor], rng: &mut Rng, eps: f64, rtol: f64) {
    check_grads_tol(name, f, inputs, rng, eps, rtol, 1e-9)
}

/// [`check_grads`] with an explicit relative tolerance for the dot-product
/// test (looser only where the function itself rounds, e.g. through f32).
pub fn check_grads_tol(name: &str, f: &Func, inputs: &[Tensor], rng: &mut Rng, eps: f64, rtol: f64, dot_rtol: f64) {
    let float_in: Vec<bool> = inputs.iter().map(|t| t.dtype().is_float()).collect();
    let float_out: Vec<bool> = f.output_types().iter().map(|t| t.dtype.is_float()).collect();
    // Random tangent for each float input.
    let tangents: Vec<Tensor> =
        inputs.iter().zip(&float_in).filter(|(_, fl)| **fl).map(|(t, _)| rng.tensor(&t.ty(), -1.0, 1.0)).collect();
    // JVP.
    let jf = jvp_func(f).unwrap_or_else(|e| panic!("{name}: jvp failed: {e}"));
    let mut jin = inputs.to_vec();
    jin.extend(tangents.iter().cloned());
    let jout = run(&jf, &jin);
    let n_out = f.outputs.len();
    let (outs, touts) = jout.split_at(n_out);
    // Central differences in the tangent direction.
    let shifted = |s: f64| -> Vec<Tensor> {
        let mut k = 0;
        let ins: Vec<Tensor> = inputs
            .iter()
            .zip(&float_in)
            .map(|(t, fl)| {
                if *fl {
                    k += 1;
                    axpy(s, &tangents[k - 1], t)
                } else {
                    t.clone()
                }
            })
            .collect();
        run(f, &ins)
    };
    let plus = shifted(eps);
    let minus = shifted(-eps);
    let base = run(f, inputs);
    for o in 0..n_out {
        assert_eq!(outs[o], base[o], "{name}: jvp primal output {o} differs from f");
        if !float_out[o] {
            continue;
        }
        let (p, m, t) = (plus[o].to_f64_vec(), minus[o].to_f64_vec(), touts[o].to_f64_vec());
        for i in 0..t.len() {
            let fd = (p[i] - m[i]) / (2.0 * eps);
            let tol = rtol * (1.0 + fd.abs().max(t[i].abs()));
            assert!((fd - t[i]).abs() <= tol, "{name}: output {o}[{i}]: jvp {} vs finite difference {fd}\n{f}", t[i]);
        }
    }
    // Dot-product test: <u, J v> == <J^T u, v>.
    let wrt: Vec<usize> = (0..inputs.len()).filter(|&i| float_in[i]).collect();
    if wrt.is_empty() {
        return;
    }
    let vf = vjp_func(f, &Wrt::Positions(wrt.clone())).unwrap_or_else(|e| panic!("{name}: vjp failed: {e}"));
    let cts: Vec<Tensor> = (0..n_out).filter(|&o| float_out[o]).map(|o| rng.tensor(&base[o].ty(), -1.0, 1.0)).collect();
    let mut vin = inputs.to_vec();
    vin.extend(cts.iter().cloned());
    let vout = run(&vf, &vin);
    let grads = &vout[n_out..];
    let lhs: f64 = (0..n_out).filter(|&o| float_out[o]).zip(&cts).map(|(o, c)| dot(c, &touts[o])).sum();
    let rhs: f64 = grads.iter().zip(&tangents).map(|(g, t)| dot(g, t)).sum();
    let scale = 1.0 + lhs.abs().max(rhs.abs());
    assert!(
        (lhs - rhs).abs() <= dot_rtol * scale,
        "{name}: dot-product test <u, Jv> = {lhs} vs <J^T u, v> = {rhs}\n{f}"
    );
}
