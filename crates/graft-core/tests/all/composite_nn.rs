//! Normalisation, loss and attention composites against naive references
//! written here (explicit loops over rows, channels, heads, queries and
//! keys), including stability at large magnitudes and error messages.

use crate::composite_util;
use composite_util::*;
use graft_core::composite::{attention, loss, norm};
use graft_core::{DType, Tensor};

// ------------------------------------------------------------------ norm

fn ref_normalize_rows(x: &[f64], n: usize, eps: f64) -> Vec<f64> {
    x.chunks(n)
        .flat_map(|r| {
            let m = r.iter().sum::<f64>() / n as f64;
            let v = r.iter().map(|a| (a - m) * (a - m)).sum::<f64>() / n as f64;
            r.iter().map(move |a| (a - m) / (v + eps).sqrt()).collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn layer_norm_trailing_axes() {
    let x = rand64(&[2, 3, 4], 1);
    let g = rand64(&[3, 4], 2);
    let be = rand64(&[3, 4], 3);
    let y = eval(&[&x, &g, &be], |b, p| norm::layer_norm(b, p[0], p[1], Some(p[2]), 1e-5));
    let base = ref_normalize_rows(&x.to_f64_vec(), 12, 1e-5);
    let (gd, bd) = (g.to_f64_vec(), be.to_f64_vec());
    let want: Vec<f64> = base.iter().enumerate().map(|(i, v)| v * gd[i % 12] + bd[i % 12]).collect();
    assert_tensor(&y, &[2, 3, 4], &want, 1e-12);
    // gamma of rank 1: last axis only; no beta.
    let g1 = rand64(&[4], 4);
    let y = eval(&[&x, &g1], |b, p| norm::layer_norm(b, p[0], p[1], None, norm::DEFAULT_EPS));
    let base = ref_normalize_rows(&x.to_f64_vec(), 4, 1e-5);
    let g1d = g1.to_f64_vec();
    let want: Vec<f64> = base.iter().enumerate().map(|(i, v)| v * g1d[i % 4]).collect();
    assert_tensor(&y, &[2, 3, 4], &want, 1e-12);
    // f32, and a large offset stays accurate (two-pass statistics).
    let off: Vec<f64> = x.to_f64_vec().iter().map(|v| v + 1e4).collect();
    let xo = t64(&[2, 3, 4], &off);
    let y = eval(&[&to32(&xo), &to32(&g1)], |b, p| norm::layer_norm(b, p[0], p[1], None, 1e-5));
    assert_eq!(y.dtype(), DType::F32);
    assert_close(&y.to_f64_vec(), &want, 2e-3);
    // Errors.
    let msg = err_msg(&[&x, &rand64(&[3], 0)], |b, p| norm::layer_norm(b, p[0], p[1], None, 1e-5));
    assert!(msg.contains("layer_norm") && msg.contains("f64[3]") && msg.contains("f64[2,3,4]"), "{msg}");
    let msg = err_msg(&[&x, &g1, &rand64(&[3], 0)], |b, p| norm::layer_norm(b, p[0], p[1], Some(p[2]), 1e-5));
    assert!(msg.contains("beta"), "{msg}");
    assert!(err_msg(&[&x, &g1], |b, p| norm::layer_norm(b, p[0], p[1], None, -1.0)).contains("eps"));
    // normalize over explicit axes equals the reference on transposed data.
    let y = eval(&[&x], |b, p| norm::normalize(b, p[0], &[2, 1], 0.0));
    assert_close(&y.to_f64_vec(), &ref_normalize_rows(&x.to_f64_vec(), 12, 0.0), 1e-12);
}

#[test]
fn batch_norm_training_statistics() {
    let (n, c, h, w) = (3, 2, 2, 3);
    let x = rand64(&[n, c, h, w], 5);
    let g = t64(&[c], &[1.5, -0.5]);
    let be = t64(&[c], &[0.25, 2.0]);
    let outs = graft_core_run3(&x, &g, &be);
    let xd = x.to_f64_vec();
    let mut mean = vec![0.0; c];
    let mut var = vec![0.0; c];
    let per = (n * h * w) as f64;
    for (i, &v) in xd.iter().enumerate() {
        mean[unravel(i, &[n, c, h, w])[1]] += v / per;
    }
    for (i, &v) in xd.iter().enumerate() {
        let ch = unravel(i, &[n, c, h, w])[1];
        var[ch] += (v - mean[ch]).powi(2) / per;
    }
    let gd = g.to_f64_vec();
    let bd = be.to_f64_vec();
    let want: Vec<f64> = xd
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let ch = unravel(i, &[n, c, h, w])[1];
            (v - mean[ch]) / (var[ch] + 1e-5).sqrt() * gd[ch] + bd[ch]
        })
        .collect();
    assert_tensor(&outs[0], &[n, c, h, w], &want, 1e-12);
    assert_tensor(&outs[1], &[c], &mean, 1e-12);
    assert_tensor(&outs[2], &[c], &var, 1e-12);

    // Explicit axes on [N, F] (BatchNorm1d without length): statistics over axis 0.
    let x2 = rand64(&[5, 3], 9);
    let outs = run_multi(&[&x2], |b, p| {
        let (y, m, v) = norm::batch_norm(b, p[0], None, None, Some(&[0]), 0.0)?;
        Ok(vec![y, m, v])
    })
    .unwrap();
    let x2t: Vec<f64> = (0..15).map(|i| x2.to_f64_vec()[(i % 5) * 3 + i / 5]).collect();
    let norm_t = ref_normalize_rows(&x2t, 5, 0.0);
    let want: Vec<f64> = (0..15).map(|i| norm_t[(i % 3) * 5 + i / 3]).collect();
    assert_tensor(&outs[0], &[5, 3], &want, 1e-12);
    assert_eq!(outs[1].shape(), &[3]);

    // Errors.
    let bad = run_multi(&[&x, &t64(&[3], &[1.0; 3])], |b, p| {
        let (y, _, _) = norm::batch_norm(b, p[0], Some(p[1]), None, None, 1e-5)?;
        Ok(vec![y])
    })
    .unwrap_err()
    .to_string();
    assert!(bad.contains("gamma must be f64[2]") && bad.contains("f64[3]"), "{bad}");
    let bad = run_multi(&[&t64(&[3], &[1.0; 3])], |b, p| {
        let (y, _, _) = norm::batch_norm(b, p[0], None, None, None, 1e-5)?;
        Ok(vec![y])
    })
    .unwrap_err()
    .to_string();
    assert!(bad.contains("rank >= 2"), "{bad}");
}

fn graft_core_run3(x: &Tensor, g: &Tensor, be: &Tensor) -> Vec<Tensor> {
    run_multi(&[x, g, be], |b, p| {
        let (y, m, v) = norm::batch_norm(b, p[0], Some(p[1]), Some(p[2]), None, 1e-5)?;
        Ok(vec![y, m, v])
    })
    .unwrap()
}

// ------------------------------------------------------------------ losses

#[test]
fn mse_and_bce() {
    let p = rand64(&[3, 4], 1);
    let t = rand64(&[3, 4], 2);
    let want = p.to_f64_vec().iter().zip(t.to_f64_vec()).map(|(a, b)| (a - b).powi(2)).sum::<f64>() / 12.0;
    assert_tensor(&eval(&[&p, &t], |b, v| loss::mse(b, v[0], v[1])), &[], &[want], 1e-14);
    let msg = err_msg(&[&p, &rand64(&[4], 0)], |b, v| loss::mse(b, v[0], v[1]));
    assert!(msg.contains("mse") && msg.contains("f64[3,4]") && msg.contains("f64[4]"), "{msg}");

    let logits = t64(&[6], &[-800.0, -2.0, 0.0, 0.5, 3.0, 800.0]);
    let targets = t64(&[6], &[0.0, 1.0, 0.5, 0.0, 1.0, 1.0]);
    // Reference with the exact log1p(exp(x)) for moderate x and asymptotics for huge |x|.
    let sp = |x: f64| {
        if x > 30.0 {
            x
        } else if x < -30.0 {
            x.exp()
        } else {
            x.exp().ln_1p()
        }
    };
    let want: f64 =
        logits.to_f64_vec().iter().zip(targets.to_f64_vec()).map(|(&x, t)| sp(x) - x * t).sum::<f64>() / 6.0;
    let got = eval(&[&logits, &targets], |b, v| loss::binary_cross_entropy_with_logits(b, v[0], v[1]));
    assert!(got.to_f64_vec()[0].is_finite());
    assert_close(&got.to_f64_vec(), &[want], 1e-14);
    assert!(err_msg(&[&logits, &rand64(&[5], 0)], |b, v| loss::binary_cross_entropy_with_logits(b, v[0], v[1]))
        .contains("logits and targets"));
}

#[test]
fn cross_entropy_integer_labels() {
    let logits = t64(&[3, 4], &[1.0, 2.0, 3.0, 4.0, 1000.0, 0.0, -1000.0, 999.0, 0.0, 0.0, 0.0, 0.0]);
    let labels = ti32(&[3], &[3, 0, 2]);
    let ld = logits.to_f64_vec();
    let mut want = 0.0;
    for (r, &lab) in [3usize, 0, 2].iter().enumerate() {
        let row = &ld[r * 4..r * 4 + 4];
        let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let lse = m + row.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
        want += (lse - row[lab]) / 3.0;
    }
    let got = eval(&[&logits, &labels], |b, v| loss::cross_entropy(b, v[0], v[1], 1));
    assert_tensor(&got, &[], &[want], 1e-14);
    // i64 labels, class axis 0 (logits [C, N]).
    let lt: Vec<f64> = (0..12).map(|i| ld[(i % 3) * 4 + i / 3]).collect();
    let lab64 = Tensor::from_vec(vec![3], vec![3i64, 0, 2]).unwrap();
    let got = eval(&[&t64(&[4, 3], &lt), &lab64], |b, v| loss::cross_entropy(b, v[0], v[1], 0));
    assert_close(&got.to_f64_vec(), &[want], 1e-14);
    // f32 at large magnitude is finite.
    let got = eval(&[&to32(&logits), &labels], |b, v| loss::cross_entropy(b, v[0], v[1], 1));
    assert!((got.to_f64_vec()[0] - want).abs() < 1e-4);
    // Out-of-range label contributes 0 (one-hot convention).
    let got = eval(&[&logits, &ti32(&[3], &[3, 0, 9])], |b, v| loss::cross_entropy(b, v[0], v[1], 1));
    let row2 = 4f64.ln();
    assert_close(&got.to_f64_vec(), &[want - row2 / 3.0], 1e-12);
    // Errors.
    let msg = err_msg(&[&logits, &ti32(&[4], &[0; 4])], |b, v| loss::cross_entropy(b, v[0], v[1], 1));
    assert!(msg.contains("labels must be integers of shape [3]") && msg.contains("i32[4]"), "{msg}");
    let msg = err_msg(&[&logits, &t64(&[3], &[0.0; 3])], |b, v| loss::cross_entropy(b, v[0], v[1], 1));
    assert!(msg.contains("labels"), "{msg}");
    assert!(err_msg(&[&logits, &labels], |b, v| loss::cross_entropy(b, v[0], v[1], 2)).contains("axis 2"));
}

// ------------------------------------------------------------------ attention

/// Naive attention for one [L, d] slice: scores, mask (keep = true), softmax, weighted sum.
fn ref_attn(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    lq: usize,
    lk: usize,
    d: usize,
    dv: usize,
    keep: &dyn Fn(usize, usize) -> bool,
) -> Vec<f64> {
    let scale = 1.0 / (d as f64).sqrt();
    let mut out = vec![0.0; lq * dv];
    for i in 0..lq {
        let s: Vec<f64> = (0..lk)
            .map(|j| {
                if keep(i, j) {
                    (0..d).map(|t| q[i * d + t] * k[j * d + t]).sum::<f64>() * scale
                } else {
                    f64::NEG_INFINITY
                }
            })
            .collect();
        let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let (e, z): (Vec<f64>, f64) = if m == f64::NEG_INFINITY {
            (vec![1.0; lk], lk as f64) // fully masked: uniform (finite-lowest convention)
        } else {
            let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
            let z = e.iter().sum();
            (e, z)
        };
        for j in 0..lk {
            for t in 0..dv {
                out[i * dv + t] += e[j] / z * v[j * dv + t];
            }
        }
    }
    out
}

#[test]
fn scaled_dot_product_attention_masks() {
    let (bsz, lq, lk, d, dv) = (2, 3, 4, 5, 2);
    let q = rand64(&[bsz, lq, d], 1);
    let k = rand64(&[bsz, lk, d], 2);
    let v = rand64(&[bsz, lk, dv], 3);
    let (qd, kd, vd) = (q.to_f64_vec(), k.to_f64_vec(), v.to_f64_vec());
    let reference = |keep: &dyn Fn(usize, usize, usize) -> bool| -> Vec<f64> {
        (0..bsz)
            .flat_map(|bi| {
                ref_attn(
                    &qd[bi * lq * d..(bi + 1) * lq * d],
                    &kd[bi * lk * d..(bi + 1) * lk * d],
                    &vd[bi * lk * dv..(bi + 1) * lk * dv],
                    lq,
                    lk,
                    d,
                    dv,
                    &|i, j| keep(bi, i, j),
                )
            })
            .collect()
    };
    let y = eval(&[&q, &k, &v], |b, p| attention::scaled_dot_product_attention(b, p[0], p[1], p[2], false, None, None));
    assert_tensor(&y, &[bsz, lq, dv], &reference(&|_, _, _| true), 1e-12);
    let y = eval(&[&q, &k, &v], |b, p| attention::scaled_dot_product_attention(b, p[0], p[1], p[2], true, None, None));
    assert_tensor(&y, &[bsz, lq, dv], &reference(&|_, i, j| j <= i), 1e-12);
    // Bool mask [Lq, Lk] broadcast over the batch, with a fully masked row.
    let keep = |i: usize, j: usize| i != 1 && (i + j).is_multiple_of(2);
    let mask: Vec<bool> = (0..lq * lk).map(|t| keep(t / lk, t % lk)).collect();
    let mt = Tensor::from_vec(vec![lq, lk], mask).unwrap();
    let y = eval(&[&q, &k, &v, &mt], |b, p| {
        attention::scaled_dot_product_attention(b, p[0], p[1], p[2], false, Some(p[3]), None)
    });
    let out = y.to_f64_vec();
    assert!(out.iter().all(|x| x.is_finite()), "fully masked rows must not be NaN");
    assert_close(&out, &reference(&|_, i, j| keep(i, j)), 1e-12);
    // Float (additive) mask with a custom scale.
    let add: Vec<f64> = (0..lq * lk).map(|t| (t % 3) as f64 - 1.0).collect();
    let at = t64(&[lq, lk], &add[..lq * lk]);
    let y = eval(&[&q, &k, &v, &at], |b, p| {
        attention::scaled_dot_product_attention(b, p[0], p[1], p[2], false, Some(p[3]), Some(0.5))
    });
    let mut want = vec![];
    for bi in 0..bsz {
        for i in 0..lq {
            let s: Vec<f64> = (0..lk)
                .map(|j| {
                    (0..d).map(|t| qd[(bi * lq + i) * d + t] * kd[(bi * lk + j) * d + t]).sum::<f64>() * 0.5
                        + add[i * lk + j]
                })
                .collect();
            let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = s.iter().map(|x| (x - m).exp()).sum();
            for t in 0..dv {
                want.push((0..lk).map(|j| (s[j] - m).exp() / z * vd[(bi * lk + j) * dv + t]).sum::<f64>());
            }
        }
    }
    assert_close(&y.to_f64_vec(), &want, 1e-12);
    // Errors.
    let msg = err_msg(&[&q, &k, &rand64(&[bsz, lk + 1, dv], 0)], |b, p| {
        attention::scaled_dot_product_attention(b, p[0], p[1], p[2], false, None, None)
    });
    assert!(msg.contains("f64[2,5,2]") && msg.contains("Lk"), "{msg}");
    let msg = err_msg(&[&q, &k, &v, &Tensor::from_vec(vec![2], vec![true, false]).unwrap()], |b, p| {
        attention::scaled_dot_product_attention(b, p[0], p[1], p[2], false, Some(p[3]), None)
    });
    assert!(msg.contains("mask") && msg.contains("[2, 3, 4]"), "{msg}");
}

#[test]
fn multi_head_attention_reference() {
    let (bsz, lq, lk, dm, nh) = (2, 3, 4, 6, 2);
    let dh = dm / nh;
    let qi = rand64(&[bsz, lq, dm], 1);
    let ki = rand64(&[bsz, lk, dm], 2);
    let vi = rand64(&[bsz, lk, dm], 3);
    let ws: Vec<Tensor> = (0..4).map(|i| rand64(&[dm, dm], 10 + i)).collect();
    let proj = |x: &[f64], w: &[f64], rows: usize| -> Vec<f64> {
        // x [rows, dm] @ w.T
        (0..rows * dm).map(|t| (0..dm).map(|i| x[(t / dm) * dm + i] * w[(t % dm) * dm + i]).sum()).collect()
    };
    for causal in [false, true] {
        let y = eval(&[&qi, &ki, &vi, &ws[0], &ws[1], &ws[2], &ws[3]], |b, p| {
            attention::multi_head_attention(b, p[0], p[1], p[2], p[3], p[4], p[5], p[6], nh, causal, None)
        });
        let mut want = vec![];
        for bi in 0..bsz {
            let q = proj(&qi.to_f64_vec()[bi * lq * dm..(bi + 1) * lq * dm], &ws[0].to_f64_vec(), lq);
            let k = proj(&ki.to_f64_vec()[bi * lk * dm..(bi + 1) * lk * dm], &ws[1].to_f64_vec(), lk);
            let v = proj(&vi.to_f64_vec()[bi * lk * dm..(bi + 1) * lk * dm], &ws[2].to_f64_vec(), lk);
            let mut concat = vec![0.0; lq * dm];
            for h in 0..nh {
                let slice = |m: &[f64], rows: usize| -> Vec<f64> {
                    (0..rows * dh).map(|t| m[(t / dh) * dm + h * dh + t % dh]).collect()
                };
                let o =
                    ref_attn(&slice(&q, lq), &slice(&k, lk), &slice(&v, lk), lq, lk, dh, dh, &|i, j| !causal || j <= i);
                for i in 0..lq {
                    for t in 0..dh {
                        concat[i * dm + h * dh + t] = o[i * dh + t];
                    }
                }
            }
            want.extend(proj(&concat, &ws[3].to_f64_vec(), lq));
        }
        assert_tensor(&y, &[bsz, lq, dm], &want, 1e-12);
    }
    // f32 path and a bool mask [B, 1, Lq, Lk] broadcast over heads.
    let mask =
        Tensor::from_vec(vec![bsz, 1, lq, lk], (0..bsz * lq * lk).map(|t| t % 4 != 3).collect::<Vec<_>>()).unwrap();
    let ins32: Vec<Tensor> = [&qi, &ki, &vi, &ws[0], &ws[1], &ws[2], &ws[3]].iter().map(|t| to32(t)).collect();
    let mut refs: Vec<&Tensor> = ins32.iter().collect();
    refs.push(&mask);
    let y = eval(&refs, |b, p| {
        attention::multi_head_attention(b, p[0], p[1], p[2], p[3], p[4], p[5], p[6], nh, false, Some(p[7]))
    });
    assert_eq!(y.dtype(), DType::F32);
    assert!(y.to_f64_vec().iter().all(|x| x.is_finite()));
    // Errors.
    let ins: Vec<&Tensor> = vec![&qi, &ki, &vi, &ws[0], &ws[1], &ws[2], &ws[3]];
    let msg = err_msg(&ins, |b, p| {
        attention::multi_head_attention(b, p[0], p[1], p[2], p[3], p[4], p[5], p[6], 4, false, None)
    });
    assert!(msg.contains("n_heads = 4 must divide d_model = 6"), "{msg}");
    let bad_w = rand64(&[dm, dm + 1], 0);
    let ins: Vec<&Tensor> = vec![&qi, &ki, &vi, &ws[0], &bad_w, &ws[2], &ws[3]];
    let msg = err_msg(&ins, |b, p| {
        attention::multi_head_attention(b, p[0], p[1], p[2], p[3], p[4], p[5], p[6], nh, false, None)
    });
    assert!(msg.contains("wk must be [d_model, d_model]"), "{msg}");
}
