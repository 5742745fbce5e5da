//! Pooling composites (`composite::pool`) against naive references written
//! from PyTorch's definitions: window positions `o*s - p + t*d`, `-inf`
//! padding for max, the `hstart/hend` divisor rules of `avg_pool` with and
//! without `count_include_pad`, `ceil_mode` output sizes, smooth max pool
//! (stable log-sum-exp per window), adaptive average pooling bins, errors,
//! and numeric gradient checks.

use crate::common;

use common::{check_grads, Rng};
use graft_core::composite::conv::PerDim;
use graft_core::composite::pool::{self, PoolOpts};
use graft_core::{Builder, DType, Executable, Func, IrError, Tensor, TensorType, Value};

fn ty(dtype: DType, shape: &[usize]) -> TensorType {
    TensorType::new(dtype, shape.to_vec())
}

fn build1(t: &TensorType, body: impl FnOnce(&mut Builder, Value) -> Result<Value, IrError>) -> Result<Func, IrError> {
    let mut b = Builder::new("f");
    let p = b.param(t.clone());
    let y = body(&mut b, p)?;
    b.finish(&[y])
}

fn run(f: &Func, x: &Tensor) -> Tensor {
    let out = Executable::new(f.clone()).unwrap().run(&[x]).unwrap().remove(0);
    assert_eq!(out.ty(), f.output_types()[0]);
    out
}

fn indices(shape: &[usize]) -> Vec<Vec<usize>> {
    let n: usize = shape.iter().product();
    (0..n)
        .map(|mut f| {
            let mut idx = vec![0; shape.len()];
            for d in (0..shape.len()).rev() {
                idx[d] = f % shape[d];
                f /= shape[d];
            }
            idx
        })
        .collect()
}

fn flat(idx: &[usize], shape: &[usize]) -> usize {
    idx.iter().zip(shape).fold(0, |acc, (i, s)| acc * s + i)
}

/// PyTorch's `pooling_output_shape`, written independently.
fn torch_out(l: usize, k: usize, s: usize, p: usize, d: usize, ceil: bool) -> i64 {
    let (l, k, s, p, d) = (l as i64, k as i64, s as i64, p as i64, d as i64);
    let num = l + 2 * p - d * (k - 1) - 1 + if ceil { s - 1 } else { 0 };
    let mut o = num.div_euclid(s) + 1;
    if ceil && (o - 1) * s >= l + p {
        o -= 1;
    }
    o
}

#[derive(Debug, Clone)]
struct Cfg {
    k: Vec<usize>,
    s: Vec<usize>,
    p: Vec<usize>,
    d: Vec<usize>,
    ceil: bool,
    include_pad: bool,
}

impl Cfg {
    fn opts(&self) -> PoolOpts {
        PoolOpts::new()
            .stride(self.s.clone())
            .padding(self.p.clone())
            .dilation(self.d.clone())
            .ceil_mode(self.ceil)
            .count_include_pad(self.include_pad)
    }
    fn out_shape(&self, xs: &[usize]) -> Vec<usize> {
        let mut os = xs[..2].to_vec();
        for i in 0..self.k.len() {
            os.push(torch_out(xs[2 + i], self.k[i], self.s[i], self.p[i], self.d[i], self.ceil) as usize);
        }
        os
    }
}

/// Which reference reduction to run over each window.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Max,
    Avg,
    Smooth(f64),
}

/// The pooling reference: per output position, walk the window taps
/// `o*s - p + t*d` and reduce the in-range ones.
fn reference(x: &Tensor, c: &Cfg, kind: Kind) -> (Vec<usize>, Vec<f64>) {
    let xs = x.shape().to_vec();
    let xv = x.to_f64_vec();
    let os = c.out_shape(&xs);
    let sp = c.k.len();
    let mut out = vec![];
    for idx in indices(&os) {
        let mut vals = vec![];
        for t in indices(&c.k) {
            let mut xi = idx[..2].to_vec();
            let mut inside = true;
            for i in 0..sp {
                let q = (idx[2 + i] * c.s[i] + t[i] * c.d[i]) as i64 - c.p[i] as i64;
                inside &= q >= 0 && q < xs[2 + i] as i64;
                xi.push(q.max(0) as usize);
            }
            if inside {
                vals.push(xv[flat(&xi, &xs)]);
            }
        }
        out.push(match kind {
            Kind::Max => vals.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
            Kind::Avg => {
                // PyTorch avg_pool (dilation 1): hstart = o*s - p,
                // hend = min(hstart + k, L + p); pool_size counts [hstart, hend);
                // without count_include_pad, the clipped [max(hstart,0), min(hend,L)).
                let mut full = 1i64;
                let mut clipped = 1i64;
                for i in 0..sp {
                    let start = (idx[2 + i] * c.s[i]) as i64 - c.p[i] as i64;
                    let end = (start + c.k[i] as i64).min((xs[2 + i] + c.p[i]) as i64);
                    full *= end - start;
                    clipped *= end.min(xs[2 + i] as i64) - start.max(0);
                }
                let div = if c.include_pad { full } else { clipped };
                vals.iter().sum::<f64>() / div as f64
            }
            Kind::Smooth(t) => {
                let m = vals.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                m + t * vals.iter().map(|v| ((v - m) / t).exp()).sum::<f64>().ln()
            }
        });
    }
    (os, out)
}

fn assert_close(got: &Tensor, shape: &[usize], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.shape(), shape, "{what}: shape");
    for (i, (a, b)) in got.to_f64_vec().iter().zip(want).enumerate() {
        let ok = (a == b) || (a - b).abs() <= tol * (1.0 + b.abs());
        assert!(ok, "{what}: element {i}: got {a}, want {b}");
    }
}

fn pool_fn(kind: Kind, c: &Cfg, sp: usize) -> impl FnOnce(&mut Builder, Value) -> Result<Value, IrError> {
    let (k, o) = (PerDim(c.k.clone()), c.opts());
    move |b, x| match kind {
        Kind::Max => pool::max_pool(b, x, sp, &k, &o),
        Kind::Avg => pool::avg_pool(b, x, sp, &k, &o),
        Kind::Smooth(t) => pool::smooth_max_pool(b, x, sp, &k, t, &o),
    }
}

fn check(kind: Kind, dtype: DType, xs: &[usize], c: &Cfg, seed: u64) {
    let mut rng = Rng(seed);
    let x = rng.tensor(&ty(dtype, xs), -2.0, 2.0);
    let f = build1(&x.ty(), pool_fn(kind, c, c.k.len())).unwrap_or_else(|e| panic!("{xs:?} {c:?}: {e}"));
    let out = run(&f, &x);
    let (os, want) = reference(&x, c, kind);
    let tol = if dtype == DType::F32 { 1e-5 } else { 1e-12 };
    assert_close(&out, &os, &want, tol, &format!("{xs:?} {c:?}"));
}

fn cfg2(k: usize, s: usize, p: usize, d: usize, ceil: bool, include_pad: bool) -> Cfg {
    Cfg { k: vec![k; 2], s: vec![s; 2], p: vec![p; 2], d: vec![d; 2], ceil, include_pad }
}

#[test]
fn max_pool2d_grid() {
    let mut seed = 1;
    for (k, s, p, d) in
        [(2, 2, 0, 1), (3, 2, 1, 1), (3, 1, 1, 1), (2, 1, 1, 1), (3, 3, 1, 1), (2, 2, 1, 2), (3, 2, 2, 2)]
    {
        for ceil in [false, true] {
            for xs in [[2, 3, 7, 7], [1, 2, 6, 9]] {
                check(Kind::Max, DType::F64, &xs, &cfg2(k, s, p, d, ceil, true), seed);
                seed += 1;
            }
        }
    }
}

#[test]
fn avg_pool2d_grid_with_count_include_pad_both_ways() {
    let mut seed = 100;
    for (k, s, p) in [(2, 2, 0), (3, 2, 1), (3, 1, 1), (2, 1, 1), (3, 3, 1), (4, 3, 2), (2, 3, 1)] {
        for ceil in [false, true] {
            for include_pad in [true, false] {
                for xs in [[2, 3, 7, 7], [1, 2, 5, 8]] {
                    check(Kind::Avg, DType::F64, &xs, &cfg2(k, s, p, 1, ceil, include_pad), seed);
                    seed += 1;
                }
            }
        }
    }
}

#[test]
fn ceil_mode_overhang_is_not_counted_even_with_count_include_pad() {
    // L=5, k=2, s=2, p=0, ceil: 3 windows, the last one [4, 6) overhangs by 1.
    let x = Tensor::vec1(&[1.0f64, 2.0, 3.0, 4.0, 5.0]).reshape(vec![1, 1, 5]).unwrap();
    let f = build1(&x.ty(), |b, v| pool::avg_pool1d(b, v, &PerDim(vec![2]), &PoolOpts::new().ceil_mode(true))).unwrap();
    assert_eq!(run(&f, &x).to_f64_vec(), vec![1.5, 3.5, 5.0]);
    // With padding 1 and count_include_pad the left pad counts: [pad, 1] / 2.
    let o = PoolOpts::new().padding(1).stride(2);
    let f = build1(&x.ty(), |b, v| pool::avg_pool1d(b, v, &PerDim(vec![2]), &o)).unwrap();
    assert_eq!(run(&f, &x).to_f64_vec(), vec![0.5, 2.5, 4.5]);
    let o = o.count_include_pad(false);
    let f = build1(&x.ty(), |b, v| pool::avg_pool1d(b, v, &PerDim(vec![2]), &o)).unwrap();
    assert_eq!(run(&f, &x).to_f64_vec(), vec![1.0, 2.5, 4.5]);
    // Max pool: L=5, k=2, s=3, p=1, ceil: the ceil window would start at 6-1=5 >= L: dropped.
    let o = PoolOpts::new().stride(3).padding(1).ceil_mode(true);
    let f = build1(&x.ty(), |b, v| pool::max_pool1d(b, v, &PerDim(vec![2]), &o)).unwrap();
    assert_eq!(run(&f, &x).to_f64_vec(), vec![1.0, 4.0]);
    // Ceil mode keeps one overhanging window on an input shorter than the kernel (as PyTorch).
    let x1 = Tensor::vec1(&[7.0f64]).reshape(vec![1, 1, 1]).unwrap();
    let o = PoolOpts::new().ceil_mode(true);
    let f = build1(&x1.ty(), |b, v| pool::max_pool1d(b, v, &PerDim(vec![2]), &o)).unwrap();
    assert_eq!(run(&f, &x1).to_f64_vec(), vec![7.0]);
    let f = build1(&x1.ty(), |b, v| pool::avg_pool1d(b, v, &PerDim(vec![2]), &o)).unwrap();
    assert_eq!(run(&f, &x1).to_f64_vec(), vec![7.0]);
}

#[test]
fn divisor_override() {
    let x = Tensor::vec1(&[1.0f64, 2.0, 3.0, 4.0]).reshape(vec![1, 1, 2, 2]).unwrap();
    let f =
        build1(&x.ty(), |b, v| pool::avg_pool2d(b, v, &PerDim(vec![2]), &PoolOpts::new().divisor_override(5))).unwrap();
    assert_eq!(run(&f, &x).to_f64_vec(), vec![2.0]);
}

#[test]
fn avg_pool_with_dilation_counts_dilated_taps() {
    // Not in PyTorch; divisor = in-range taps of the dilated window.
    let x = Tensor::vec1(&[1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0]).reshape(vec![1, 1, 6]).unwrap();
    let o = PoolOpts::new().dilation(2).stride(1).padding(1).count_include_pad(false);
    let f = build1(&x.ty(), |b, v| pool::avg_pool1d(b, v, &PerDim(vec![2]), &o)).unwrap();
    // Taps (o-1, o+1) for o = 0..6: {1}, {0,2}, {1,3}, {2,4}, {3,5}, {4}.
    assert_eq!(run(&f, &x).to_f64_vec(), vec![2.0, 2.0, 3.0, 4.0, 5.0, 5.0]);
}

#[test]
fn pool1d_and_3d_and_mixed_per_dim() {
    let c1 = Cfg { k: vec![3], s: vec![2], p: vec![1], d: vec![1], ceil: true, include_pad: false };
    check(Kind::Max, DType::F64, &[2, 3, 10], &c1, 200);
    check(Kind::Avg, DType::F64, &[2, 3, 10], &c1, 201);
    let c3 =
        Cfg { k: vec![2, 3, 2], s: vec![2, 1, 2], p: vec![1, 1, 0], d: vec![1, 1, 1], ceil: true, include_pad: true };
    check(Kind::Max, DType::F64, &[1, 2, 5, 4, 5], &c3, 202);
    check(Kind::Avg, DType::F64, &[1, 2, 5, 4, 5], &c3, 203);
    let c3 = Cfg { include_pad: false, ..c3 };
    check(Kind::Avg, DType::F64, &[1, 2, 5, 4, 5], &c3, 204);
    let c2 = Cfg { k: vec![3, 2], s: vec![1, 2], p: vec![1, 0], d: vec![2, 1], ceil: false, include_pad: true };
    check(Kind::Max, DType::F64, &[2, 2, 6, 7], &c2, 205);
    // The fixed-rank wrappers agree with the generic entry.
    let x = Rng(206).tensor(&ty(DType::F64, &[1, 2, 6, 6]), -1.0, 1.0);
    let o = PoolOpts::new().stride(1);
    let a = run(&build1(&x.ty(), |b, v| pool::max_pool2d(b, v, &PerDim(vec![3]), &o)).unwrap(), &x);
    let g = run(&build1(&x.ty(), |b, v| pool::max_pool(b, v, 2, &PerDim(vec![3, 3]), &o)).unwrap(), &x);
    assert_eq!(a, g);
}

#[test]
fn stride_defaults_to_kernel() {
    let x = Tensor::vec1(&(0..12).map(f64::from).collect::<Vec<_>>()).reshape(vec![1, 1, 12]).unwrap();
    let f = build1(&x.ty(), |b, v| pool::max_pool1d(b, v, &PerDim(vec![3]), &PoolOpts::new())).unwrap();
    assert_eq!(run(&f, &x).to_f64_vec(), vec![2.0, 5.0, 8.0, 11.0]);
    let f = build1(&x.ty(), |b, v| pool::avg_pool1d(b, v, &PerDim(vec![4]), &PoolOpts::new())).unwrap();
    assert_eq!(run(&f, &x).to_f64_vec(), vec![1.5, 5.5, 9.5]);
}

#[test]
fn f32_pools() {
    check(Kind::Max, DType::F32, &[2, 3, 7, 7], &cfg2(3, 2, 1, 1, true, true), 300);
    check(Kind::Avg, DType::F32, &[2, 3, 7, 7], &cfg2(3, 2, 1, 1, true, false), 301);
    check(Kind::Smooth(0.5), DType::F32, &[2, 3, 7, 7], &cfg2(3, 2, 1, 1, false, true), 302);
}

#[test]
fn max_pool_on_integers_and_unbatched_input() {
    let x = Tensor::from_vec(vec![1, 4], vec![3i32, -1, 7, 2]).unwrap();
    let f = build1(&x.ty(), |b, v| pool::max_pool1d(b, v, &PerDim(vec![2]), &PoolOpts::new())).unwrap();
    let y = run(&f, &x);
    assert_eq!(y.shape(), &[1, 2]);
    assert_eq!(y.to_vec::<i32>().unwrap(), vec![3, 7]);
    // Unbatched [C, H, W] float input agrees with the batched call.
    let x = Rng(310).tensor(&ty(DType::F64, &[3, 5, 5]), -1.0, 1.0);
    let xb = x.clone().reshape(vec![1, 3, 5, 5]).unwrap();
    let o = PoolOpts::new().stride(2).padding(1);
    let u = run(&build1(&x.ty(), |b, v| pool::avg_pool2d(b, v, &PerDim(vec![3]), &o)).unwrap(), &x);
    let bt = run(&build1(&xb.ty(), |b, v| pool::avg_pool2d(b, v, &PerDim(vec![3]), &o)).unwrap(), &xb);
    assert_eq!(u.shape(), &[3, 3, 3]);
    assert_eq!(u.to_f64_vec(), bt.to_f64_vec());
}

#[test]
fn pool_output_size_matches_pytorch_over_a_grid() {
    for l in 1..12usize {
        for k in 1..5usize {
            for s in 1..4usize {
                for d in 1..3usize {
                    let eff = d * (k - 1) + 1;
                    for p in 0..=eff / 2 {
                        for ceil in [false, true] {
                            // In ceil mode a window may overhang even a too-short input.
                            let o = torch_out(l, k, s, p, d, ceil);
                            let want = (o >= 1).then_some(o as usize);
                            assert_eq!(
                                pool::pool_output_size(l, k, s, p, d, ceil),
                                want,
                                "l={l} k={k} s={s} p={p} d={d}"
                            );
                            let o = PoolOpts::new().stride(s).padding(p).dilation(d).ceil_mode(ceil);
                            let f = build1(&ty(DType::F64, &[1, 1, l]), |b, v| {
                                pool::max_pool1d(b, v, &PerDim(vec![k]), &o)
                            });
                            match (want, f) {
                                (Some(n), Ok(f)) => assert_eq!(f.output_types()[0].shape, vec![1, 1, n]),
                                (None, Err(e)) => assert!(e.to_string().contains("too small"), "{e}"),
                                (w, f) => panic!("l={l} k={k} s={s} p={p} d={d} ceil={ceil}: want {w:?}, got {f:?}"),
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn smooth_max_pool_matches_reference_and_bounds() {
    let mut seed = 400;
    for t in [0.1, 1.0, 3.0] {
        for c in [cfg2(2, 2, 0, 1, false, true), cfg2(3, 2, 1, 1, true, true), cfg2(3, 1, 1, 2, false, true)] {
            check(Kind::Smooth(t), DType::F64, &[2, 2, 7, 6], &c, seed);
            seed += 1;
        }
    }
    // max <= smooth <= max + t*log(k); -> max as t -> 0.
    let x = Rng(410).tensor(&ty(DType::F64, &[1, 2, 6, 6]), -3.0, 3.0);
    let k = PerDim(vec![3]);
    let o = PoolOpts::new().stride(1).padding(1);
    let mx = run(&build1(&x.ty(), |b, v| pool::max_pool2d(b, v, &k, &o)).unwrap(), &x).to_f64_vec();
    for t in [1e-3, 0.5, 2.0] {
        let sm = run(&build1(&x.ty(), |b, v| pool::smooth_max_pool2d(b, v, &k, t, &o)).unwrap(), &x).to_f64_vec();
        for (m, s) in mx.iter().zip(&sm) {
            assert!(*s >= m - 1e-12 && *s <= m + t * 9f64.ln() + 1e-12, "t={t}: {s} vs max {m}");
            if t == 1e-3 {
                assert!((s - m).abs() < 3e-3, "t={t}: {s} vs max {m}");
            }
        }
    }
}

#[test]
fn smooth_max_pool_is_stable_for_large_magnitudes() {
    // Windows with values far apart (1e4 between neighbouring windows, and
    // 1000 within one): a global shift would underflow exp to 0 (log 0 = -inf).
    let vals = [1000.0f64, 1001.0, -1.0e4, -1.0e4 + 1.0, 5.0e5, 5.0e5 - 1000.0];
    for dtype in [DType::F64, DType::F32] {
        let x = Tensor::vec1(&vals).reshape(vec![1, 1, 6]).unwrap().cast(dtype);
        let f = build1(&x.ty(), |b, v| pool::smooth_max_pool1d(b, v, &PerDim(vec![2]), 1.0, &PoolOpts::new())).unwrap();
        let y = run(&f, &x).to_f64_vec();
        let ln1pe = |d: f64| d + (1.0 + (-d).exp()).ln();
        let want = [1000.0 + ln1pe(1.0), -1.0e4 + ln1pe(1.0), 5.0e5 + ln1pe(1000.0) - 1000.0];
        for (g, w) in y.iter().zip(&want) {
            let tol = if dtype == DType::F32 { 1e-6 * w.abs().max(1.0) * 4.0 } else { 1e-9 * w.abs().max(1.0) };
            assert!(g.is_finite() && (g - w).abs() <= tol, "{dtype}: got {g}, want {w}");
        }
    }
    // Infinities: a window of -inf gives -inf, a +inf entry gives +inf, never NaN.
    let x = Tensor::vec1(&[f64::NEG_INFINITY, f64::NEG_INFINITY, 1.0, f64::INFINITY]).reshape(vec![1, 1, 4]).unwrap();
    let f = build1(&x.ty(), |b, v| pool::smooth_max_pool1d(b, v, &PerDim(vec![2]), 0.5, &PoolOpts::new())).unwrap();
    assert_eq!(run(&f, &x).to_f64_vec(), vec![f64::NEG_INFINITY, f64::INFINITY]);
}

/// PyTorch's adaptive bins: `[floor(i L / o), ceil((i+1) L / o))`.
fn ref_adaptive(x: &Tensor, out: &[usize]) -> (Vec<usize>, Vec<f64>) {
    let xs = x.shape().to_vec();
    let xv = x.to_f64_vec();
    let first = xs.len() - out.len();
    let mut os = xs[..first].to_vec();
    os.extend(out);
    let mut res = vec![];
    for idx in indices(&os) {
        let ranges: Vec<(usize, usize)> = (0..out.len())
            .map(|i| {
                let (l, o, j) = (xs[first + i], out[i], idx[first + i]);
                (j * l / o, ((j + 1) * l).div_ceil(o))
            })
            .collect();
        let sizes: Vec<usize> = ranges.iter().map(|(a, b)| b - a).collect();
        let mut sum = 0.0;
        for t in indices(&sizes) {
            let mut xi = idx[..first].to_vec();
            xi.extend(t.iter().zip(&ranges).map(|(t, r)| r.0 + t));
            sum += xv[flat(&xi, &xs)];
        }
        res.push(sum / sizes.iter().product::<usize>() as f64);
    }
    (os, res)
}

#[test]
fn adaptive_avg_pool_matches_pytorch_bins() {
    let mut rng = Rng(500);
    for (xs, out) in [
        (vec![2, 3, 7, 5], vec![3, 2]),
        (vec![2, 3, 8, 6], vec![4, 3]),
        (vec![1, 2, 5, 5], vec![1, 1]),
        (vec![1, 2, 5, 5], vec![5, 5]),
        (vec![2, 10], vec![3]),
        (vec![1, 2, 3, 4, 5], vec![2, 3, 4]),
    ] {
        let x = rng.tensor(&ty(DType::F64, &xs), -1.0, 1.0);
        let f = build1(&x.ty(), |b, v| pool::adaptive_avg_pool(b, v, &out)).unwrap();
        let (os, want) = ref_adaptive(&x, &out);
        assert_close(&run(&f, &x), &os, &want, 1e-12, &format!("adaptive {xs:?} -> {out:?}"));
    }
    let e = build1(&ty(DType::F64, &[1, 2, 4]), |b, v| pool::adaptive_avg_pool(b, v, &[0])).unwrap_err();
    assert!(e.to_string().contains("must be non-zero"), "{e}");
}

fn pool_err(xs: &[usize], dtype: DType, body: impl FnOnce(&mut Builder, Value) -> Result<Value, IrError>) -> String {
    build1(&ty(dtype, xs), body).unwrap_err().to_string()
}

#[test]
fn pool_errors_are_clear() {
    let k2 = PerDim(vec![2]);
    let o = PoolOpts::new();
    let e = pool_err(&[1, 1, 4, 4], DType::F64, |b, v| pool::max_pool2d(b, v, &PerDim(vec![2]), &o.clone().padding(2)));
    assert!(e.contains("max_pool2d") && e.contains("padding (2) must be at most half of the effective kernel"), "{e}");
    let e = pool_err(&[1, 1, 4, 4], DType::F64, |b, v| pool::avg_pool2d(b, v, &PerDim(vec![3]), &o.clone().padding(2)));
    assert!(e.contains("avg_pool2d") && e.contains("at most half"), "{e}");
    let e = pool_err(&[1, 1, 1, 4], DType::F64, |b, v| pool::max_pool2d(b, v, &PerDim(vec![3]), &o));
    assert!(e.contains("spatial dim 0") && e.contains("too small"), "{e}");
    let e = pool_err(&[1, 1, 4, 4], DType::F64, |b, v| pool::max_pool2d(b, v, &PerDim(vec![2, 2, 2]), &o));
    assert!(e.contains("expected kernel_size with 1 or 2 entries"), "{e}");
    let e = pool_err(&[1, 1, 4, 4], DType::F64, |b, v| pool::max_pool2d(b, v, &PerDim(vec![0]), &o));
    assert!(e.contains("kernel_size entry >= 1"), "{e}");
    let e = pool_err(&[1, 1, 4, 4], DType::F64, |b, v| pool::max_pool2d(b, v, &k2, &o.clone().stride(0)));
    assert!(e.contains("stride entry >= 1"), "{e}");
    let e = pool_err(&[4, 4], DType::F64, |b, v| pool::max_pool2d(b, v, &k2, &o));
    assert!(e.contains("expected an input of rank 4") && e.contains("or 3"), "{e}");
    let e = pool_err(&[1, 1, 4, 4], DType::I32, |b, v| pool::avg_pool2d(b, v, &k2, &o));
    assert!(e.contains("floating-point"), "{e}");
    let e = pool_err(&[1, 1, 4, 4], DType::F64, |b, v| pool::avg_pool2d(b, v, &k2, &o.clone().divisor_override(0)));
    assert!(e.contains("divisor_override must be >= 1"), "{e}");
    for t in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let e = pool_err(&[1, 1, 4, 4], DType::F64, |b, v| pool::smooth_max_pool2d(b, v, &k2, t, &o));
        assert!(e.contains("temperature must be positive and finite"), "{e}");
    }
}

fn grad_check(name: &str, xs: &[usize], body: impl FnOnce(&mut Builder, Value) -> Result<Value, IrError>, seed: u64) {
    let mut rng = Rng(seed);
    let f = build1(&ty(DType::F64, xs), body).unwrap();
    // Distinct values (a shuffled grid with jitter) so max windows have no ties.
    let n: usize = xs.iter().product();
    let jitter: Vec<f64> = (0..n).map(|_| 0.01 * rng.next_f64()).collect();
    let x = Tensor::from_fn(&ty(DType::F64, xs), |i| ((i * 7919) % n) as f64 * 0.1 + jitter[i]);
    check_grads(name, &f, &[x], &mut rng, 1e-6, 1e-6);
}

#[test]
fn max_pool2d_gradients() {
    let o = PoolOpts::new().stride(2).padding(1).ceil_mode(true);
    grad_check("max_pool2d", &[2, 2, 5, 6], |b, v| pool::max_pool2d(b, v, &PerDim(vec![3]), &o), 600);
}

#[test]
fn avg_pool2d_gradients() {
    let o = PoolOpts::new().stride(2).padding(1).ceil_mode(true).count_include_pad(false);
    grad_check("avg_pool2d", &[2, 2, 5, 6], |b, v| pool::avg_pool2d(b, v, &PerDim(vec![3]), &o), 601);
}

#[test]
fn smooth_max_pool2d_gradients() {
    let o = PoolOpts::new().stride(2).padding(1).ceil_mode(true);
    grad_check(
        "smooth_max_pool2d",
        &[2, 2, 5, 6],
        |b, v| pool::smooth_max_pool2d(b, v, &PerDim(vec![3]), 0.7, &o),
        602,
    );
}
