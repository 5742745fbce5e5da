//! Each layer's forward pass against a reference written here with plain
//! loops over f64 (PyTorch's definitions), and its gradients against
//! central differences.

use crate::module_util::{assert_close, check_grads, random_tree, run, Rng};
use graft::module::*;
use graft::nn::{ConvOpts, ConvTransposeOpts};
use graft::{DType, Tensor};

fn get(tree: &ParamTree, name: &str) -> Vec<f64> {
    tree.get(name).unwrap().to_f64_vec()
}

/// `x [rows, i] @ w.T [i, o] + b`.
fn linear_ref(x: &[f64], w: &[f64], b: Option<&[f64]>, i: usize, o: usize) -> Vec<f64> {
    let rows = x.len() / i;
    let mut y = vec![0.0; rows * o];
    for r in 0..rows {
        for k in 0..o {
            let mut s = b.map_or(0.0, |b| b[k]);
            for j in 0..i {
                s += x[r * i + j] * w[k * i + j];
            }
            y[r * o + k] = s;
        }
    }
    y
}

#[test]
fn linear_matches_reference_and_gradients() {
    let vars = Vars::new(DType::F64);
    let fc = Linear::new(&vars.pp("fc"), 3, 4, true).unwrap();
    let tree = random_tree(&vars, 1);
    let x = Rng(2).tensor(&[2, 5, 3]);
    let y = run(&vars, &fc, &tree, &x).unwrap();
    assert_eq!(y.shape(), &[2, 5, 4]);
    let want = linear_ref(&x.to_f64_vec(), &get(&tree, "fc.weight"), Some(&get(&tree, "fc.bias")), 3, 4);
    assert_close(&y.to_f64_vec(), &want, 1e-12, "linear");
    check_grads(&vars, &fc, &tree, &x, Mode::Eval, true);
}

#[test]
fn linear_rejects_a_wrong_input_width() {
    let vars = Vars::new(DType::F64);
    let fc = Linear::new(&vars, 3, 4, false).unwrap();
    let tree = vars.init(0).unwrap();
    let err = run(&vars, &fc, &tree, &Rng(1).tensor(&[2, 5])).unwrap_err();
    assert!(err.to_string().contains("linear"), "{err}");
    // A tree for another model is an error naming the parameter.
    let other = Vars::new(DType::F64);
    let _ = Linear::new(&other, 3, 5, false).unwrap();
    let err = run(&vars, &fc, &other.init(0).unwrap(), &Rng(1).tensor(&[2, 3])).unwrap_err();
    assert!(err.to_string().contains("`weight` should be f64[4,3], got f64[5,3]"), "{err}");
}

/// Naive `conv2d` (PyTorch semantics; symmetric padding).
fn conv2d_ref(
    x: &[f64],
    xs: [usize; 4],
    w: &[f64],
    ws: [usize; 4],
    b: &[f64],
    stride: usize,
    pad: usize,
    groups: usize,
) -> (Vec<f64>, [usize; 4]) {
    let [n, c, h, wd] = xs;
    let [o, cg, kh, kw] = ws;
    let oh = (h + 2 * pad - kh) / stride + 1;
    let ow = (wd + 2 * pad - kw) / stride + 1;
    let og = o / groups;
    let mut y = vec![0.0; n * o * oh * ow];
    for ni in 0..n {
        for oc in 0..o {
            let g = oc / og;
            for i in 0..oh {
                for j in 0..ow {
                    let mut s = b[oc];
                    for ci in 0..cg {
                        let cin = g * cg + ci;
                        for a in 0..kh {
                            for bb in 0..kw {
                                let (yy, xx) = (
                                    (i * stride + a) as isize - pad as isize,
                                    (j * stride + bb) as isize - pad as isize,
                                );
                                if yy < 0 || xx < 0 || yy >= h as isize || xx >= wd as isize {
                                    continue;
                                }
                                let xv = x[((ni * c + cin) * h + yy as usize) * wd + xx as usize];
                                s += xv * w[((oc * cg + ci) * kh + a) * kw + bb];
                            }
                        }
                    }
                    y[((ni * o + oc) * oh + i) * ow + j] = s;
                }
            }
        }
    }
    (y, [n, o, oh, ow])
}

#[test]
fn conv2d_matches_reference_and_gradients() {
    let vars = Vars::new(DType::F64);
    let conv = Conv::conv2d(&vars.pp("conv"), 4, 2, 3, ConvOpts::new().stride(2).padding(1).groups(2)).unwrap();
    let tree = random_tree(&vars, 3);
    let x = Rng(4).tensor(&[2, 4, 5, 5]);
    let y = run(&vars, &conv, &tree, &x).unwrap();
    let (want, shape) = conv2d_ref(
        &x.to_f64_vec(),
        [2, 4, 5, 5],
        &get(&tree, "conv.weight"),
        [2, 2, 3, 3],
        &get(&tree, "conv.bias"),
        2,
        1,
        2,
    );
    assert_eq!(y.shape(), &shape);
    assert_close(&y.to_f64_vec(), &want, 1e-12, "conv2d");
    check_grads(&vars, &conv, &tree, &Rng(5).tensor(&[1, 4, 4, 4]), Mode::Eval, true);
}

#[test]
fn conv1d_matches_conv2d_reference_with_unit_height() {
    let vars = Vars::new(DType::F64);
    let conv = Conv::conv1d(&vars, 3, 2, 3, ConvOpts::new().padding(1)).unwrap();
    let tree = random_tree(&vars, 6);
    let x = Rng(7).tensor(&[2, 3, 6]);
    let y = run(&vars, &conv, &tree, &x).unwrap();
    // A 1-d convolution is a 2-d one over height 1 with a 1-high kernel
    // (padding only along the width, so pad the reference input by hand).
    let xv = x.to_f64_vec();
    let mut padded = vec![0.0; 2 * 3 * 8];
    for r in 0..6 {
        for k in 0..6 {
            padded[r * 8 + k + 1] = xv[r * 6 + k];
        }
    }
    let (want, _) =
        conv2d_ref(&padded, [2, 3, 1, 8], &get(&tree, "weight"), [2, 3, 1, 3], &get(&tree, "bias"), 1, 0, 1);
    assert_eq!(y.shape(), &[2, 2, 6]);
    assert_close(&y.to_f64_vec(), &want, 1e-12, "conv1d");
    check_grads(&vars, &conv, &tree, &x, Mode::Eval, true);
}

#[test]
fn conv_transpose2d_matches_scatter_reference_and_gradients() {
    let vars = Vars::new(DType::F64);
    let (ci, co, k, s, p) = (4, 6, 3, 2, 1);
    let conv =
        ConvTranspose2d::new(&vars, ci, co, k, ConvTransposeOpts::new().stride(s).padding(p).groups(2), true).unwrap();
    let tree = random_tree(&vars, 8);
    let (n, h) = (2, 3);
    let x = Rng(9).tensor(&[n, ci, h, h]);
    let y = run(&vars, &conv, &tree, &x).unwrap();
    let oh = (h - 1) * s + k - 2 * p;
    assert_eq!(y.shape(), &[n, co, oh, oh]);
    let (xv, w, b) = (x.to_f64_vec(), get(&tree, "weight"), get(&tree, "bias"));
    let (cg, og) = (ci / 2, co / 2);
    let mut want = vec![0.0; n * co * oh * oh];
    for ni in 0..n {
        for o in 0..co {
            for i in 0..oh * oh {
                want[(ni * co + o) * oh * oh + i] = b[o];
            }
        }
        for c in 0..ci {
            let g = c / cg;
            for ol in 0..og {
                let o = g * og + ol;
                for i in 0..h {
                    for j in 0..h {
                        for a in 0..k {
                            for bb in 0..k {
                                let (yy, xx) = ((i * s + a) as isize - p as isize, (j * s + bb) as isize - p as isize);
                                if yy < 0 || xx < 0 || yy >= oh as isize || xx >= oh as isize {
                                    continue;
                                }
                                want[((ni * co + o) * oh + yy as usize) * oh + xx as usize] +=
                                    xv[((ni * ci + c) * h + i) * h + j] * w[((c * og + ol) * k + a) * k + bb];
                            }
                        }
                    }
                }
            }
        }
    }
    assert_close(&y.to_f64_vec(), &want, 1e-12, "conv_transpose2d");
    check_grads(&vars, &conv, &tree, &Rng(10).tensor(&[1, ci, 2, 2]), Mode::Eval, true);
}

/// Normalises each `len`-run of `x` (biased variance), then per-element
/// scale `g(k)`/shift `b(k)` where `k` is the element's index.
fn normalize_runs(x: &[f64], len: usize, eps: f64) -> Vec<f64> {
    x.chunks(len)
        .flat_map(|r| {
            let m = r.iter().sum::<f64>() / len as f64;
            let v = r.iter().map(|a| (a - m) * (a - m)).sum::<f64>() / len as f64;
            r.iter().map(move |a| (a - m) / (v + eps).sqrt()).collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn layer_norm_matches_reference_and_gradients() {
    let vars = Vars::new(DType::F64);
    let ln = LayerNorm::new(&vars.pp("ln"), &[5], 1e-5).unwrap();
    let tree = random_tree(&vars, 11);
    let x = Rng(12).tensor(&[3, 5]);
    let y = run(&vars, &ln, &tree, &x).unwrap();
    let (g, b) = (get(&tree, "ln.weight"), get(&tree, "ln.bias"));
    let want: Vec<f64> =
        normalize_runs(&x.to_f64_vec(), 5, 1e-5).iter().enumerate().map(|(i, v)| v * g[i % 5] + b[i % 5]).collect();
    assert_close(&y.to_f64_vec(), &want, 1e-12, "layer_norm");
    check_grads(&vars, &ln, &tree, &x, Mode::Eval, true);
}

#[test]
fn group_norm_matches_reference_and_gradients() {
    let vars = Vars::new(DType::F64);
    let gn = GroupNorm::new(&vars, 2, 4, 1e-5).unwrap();
    let tree = random_tree(&vars, 13);
    let x = Rng(14).tensor(&[2, 4, 3]);
    let y = run(&vars, &gn, &tree, &x).unwrap();
    // Each (example, group) is 2 channels x 3 positions = 6 consecutive values.
    let (g, b) = (get(&tree, "weight"), get(&tree, "bias"));
    let want: Vec<f64> = normalize_runs(&x.to_f64_vec(), 6, 1e-5)
        .iter()
        .enumerate()
        .map(|(i, v)| v * g[(i / 3) % 4] + b[(i / 3) % 4])
        .collect();
    assert_close(&y.to_f64_vec(), &want, 1e-12, "group_norm");
    check_grads(&vars, &gn, &tree, &x, Mode::Eval, true);
    assert!(GroupNorm::new(&vars.pp("bad"), 3, 4, 1e-5).is_err());
}

#[test]
fn batch_norm_train_and_eval_match_reference_and_gradients() {
    let vars = Vars::new(DType::F64);
    let bn = BatchNorm::new(&vars.pp("bn"), 3).unwrap();
    assert_eq!(vars.names(), ["bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"]);
    let tree = random_tree(&vars, 15);
    let x = Rng(16).tensor(&[4, 3, 2]);
    let (g, b) = (get(&tree, "bn.weight"), get(&tree, "bn.bias"));
    let (rm, rv) = (get(&tree, "bn.running_mean"), get(&tree, "bn.running_var"));
    let xv = x.to_f64_vec();
    // Eval: running statistics.
    let y = run(&vars, &bn, &tree, &x).unwrap();
    let want: Vec<f64> = xv
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let c = (i / 2) % 3;
            (v - rm[c]) / (rv[c] + 1e-5).sqrt() * g[c] + b[c]
        })
        .collect();
    assert_close(&y.to_f64_vec(), &want, 1e-12, "batch_norm eval");
    // Train: batch statistics over N and L, per channel.
    let f = forward_fn(&vars, &bn, Mode::Train);
    let mut ins: Vec<&Tensor> = tree.tensors().iter().collect();
    ins.push(&x);
    let out = f.call(&ins).unwrap();
    assert_eq!(out.len(), 3, "output, running_mean', running_var'");
    let mut want = vec![0.0; xv.len()];
    for c in 0..3 {
        let idx: Vec<usize> = (0..xv.len()).filter(|i| (i / 2) % 3 == c).collect();
        let m = idx.iter().map(|&i| xv[i]).sum::<f64>() / 8.0;
        let v = idx.iter().map(|&i| (xv[i] - m).powi(2)).sum::<f64>() / 8.0;
        for &i in &idx {
            want[i] = (xv[i] - m) / (v + 1e-5).sqrt() * g[c] + b[c];
        }
        // PyTorch's update: momentum 0.1, unbiased variance.
        assert!((out[1].to_f64_vec()[c] - (0.9 * rm[c] + 0.1 * m)).abs() < 1e-12);
        assert!((out[2].to_f64_vec()[c] - (0.9 * rv[c] + 0.1 * v * 8.0 / 7.0)).abs() < 1e-12);
    }
    assert_close(&out[0].to_f64_vec(), &want, 1e-12, "batch_norm train");
    check_grads(&vars, &bn, &tree, &x, Mode::Train, true);
    check_grads(&vars, &bn, &tree, &x, Mode::Eval, true);
}

#[test]
fn embedding_looks_up_rows_and_differentiates_the_table() {
    let vars = Vars::new(DType::F64);
    let emb = Embedding::new(&vars.pp("tok"), 5, 3).unwrap();
    let tree = random_tree(&vars, 17);
    let ids = Tensor::from_vec(vec![2, 2], vec![4i32, 0, 2, 4]).unwrap();
    let y = run(&vars, &emb, &tree, &ids).unwrap();
    let w = get(&tree, "tok.weight");
    let want: Vec<f64> = [4, 0, 2, 4].iter().flat_map(|&r| w[r * 3..r * 3 + 3].to_vec()).collect();
    assert_eq!(y.shape(), &[2, 2, 3]);
    assert_eq!(y.to_f64_vec(), want);
    check_grads(&vars, &emb, &tree, &ids, Mode::Eval, false);
}

/// Naive multi-head attention for one example `[L, D]`.
fn mha_ref(x: &[f64], l: usize, d: usize, h: usize, ws: [&[f64]; 4], bs: [&[f64]; 4], causal: bool) -> Vec<f64> {
    let q = linear_ref(x, ws[0], Some(bs[0]), d, d);
    let k = linear_ref(x, ws[1], Some(bs[1]), d, d);
    let v = linear_ref(x, ws[2], Some(bs[2]), d, d);
    let dh = d / h;
    let mut o = vec![0.0; l * d];
    for head in 0..h {
        for i in 0..l {
            let allowed: Vec<usize> = (0..l).filter(|&j| !causal || j <= i).collect();
            let s: Vec<f64> = allowed
                .iter()
                .map(|&j| {
                    (0..dh).map(|e| q[i * d + head * dh + e] * k[j * d + head * dh + e]).sum::<f64>()
                        / (dh as f64).sqrt()
                })
                .collect();
            let mx = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = s.iter().map(|a| (a - mx).exp()).sum();
            for (a, &j) in s.iter().zip(&allowed) {
                let p = (a - mx).exp() / z;
                for e in 0..dh {
                    o[i * d + head * dh + e] += p * v[j * d + head * dh + e];
                }
            }
        }
    }
    linear_ref(&o, ws[3], Some(bs[3]), d, d)
}

#[test]
fn multi_head_attention_matches_reference_and_gradients() {
    for causal in [false, true] {
        let vars = Vars::new(DType::F64);
        let attn = MultiHeadAttention::new(&vars.pp("attn"), 4, 2, true, causal).unwrap();
        let tree = random_tree(&vars, 18);
        let (b, l, d) = (2, 3, 4);
        let x = Rng(19).tensor(&[b, l, d]);
        let y = run(&vars, &attn, &tree, &x).unwrap();
        let p = |n: &str| get(&tree, &format!("attn.{n}"));
        let (wq, wk, wv, wo) = (p("wq"), p("wk"), p("wv"), p("wo"));
        let (bq, bk, bv, bo) = (p("bq"), p("bk"), p("bv"), p("bo"));
        let xv = x.to_f64_vec();
        let want: Vec<f64> = (0..b)
            .flat_map(|e| {
                mha_ref(&xv[e * l * d..(e + 1) * l * d], l, d, 2, [&wq, &wk, &wv, &wo], [&bq, &bk, &bv, &bo], causal)
            })
            .collect();
        assert_close(&y.to_f64_vec(), &want, 1e-12, "multi_head_attention");
        check_grads(&vars, &attn, &tree, &x, Mode::Eval, true);
    }
}

#[test]
fn transformer_block_is_its_composition() {
    let vars = Vars::new(DType::F64);
    let block = TransformerBlock::new(&vars.pp("block"), 4, 2, 8, true, 0.0).unwrap();
    let tree = random_tree(&vars, 20);
    let x = Rng(21).tensor(&[2, 3, 4]);
    let y = run(&vars, &block, &tree, &x).unwrap();
    // Rebuild it from the references above.
    let ln = |x: &[f64], n: &str| -> Vec<f64> {
        let (g, b) = (get(&tree, &format!("block.{n}.weight")), get(&tree, &format!("block.{n}.bias")));
        normalize_runs(x, 4, 1e-5).iter().enumerate().map(|(i, v)| v * g[i % 4] + b[i % 4]).collect()
    };
    let p = |n: &str| get(&tree, &format!("block.attn.{n}"));
    let (wq, wk, wv, wo) = (p("wq"), p("wk"), p("wv"), p("wo"));
    let (bq, bk, bv, bo) = (p("bq"), p("bk"), p("bv"), p("bo"));
    let h_ln = ln(&x.to_f64_vec(), "ln1");
    let a: Vec<f64> = (0..2)
        .flat_map(|e| mha_ref(&h_ln[e * 12..(e + 1) * 12], 3, 4, 2, [&wq, &wk, &wv, &wo], [&bq, &bk, &bv, &bo], true))
        .collect();
    let h: Vec<f64> = x.to_f64_vec().iter().zip(&a).map(|(p, q)| p + q).collect();
    let m_in = ln(&h, "ln2");
    let f1 = linear_ref(&m_in, &get(&tree, "block.mlp.fc1.weight"), Some(&get(&tree, "block.mlp.fc1.bias")), 4, 8);
    let gelu: Vec<f64> = f1.iter().map(|v| 0.5 * v * (1.0 + libm_erf(v / 2f64.sqrt()))).collect();
    let f2 = linear_ref(&gelu, &get(&tree, "block.mlp.fc2.weight"), Some(&get(&tree, "block.mlp.fc2.bias")), 8, 4);
    let want: Vec<f64> = h.iter().zip(&f2).map(|(p, q)| p + q).collect();
    assert_close(&y.to_f64_vec(), &want, 1e-10, "transformer block");
    check_grads(&vars, &block, &tree, &x, Mode::Eval, true);
}

/// erf by its Maclaurin series (|x| is small here), independent of graft's.
fn libm_erf(x: f64) -> f64 {
    let (mut term, mut sum) = (x, x);
    for n in 1..60 {
        term *= -x * x / n as f64;
        sum += term / (2 * n + 1) as f64;
    }
    sum * 2.0 / std::f64::consts::PI.sqrt()
}

#[test]
fn activations_match_their_formulas() {
    let vars = Vars::new(DType::F64);
    let tree = vars.init(0).unwrap();
    let x = Tensor::vec1(&[-2.0f64, -0.5, 0.0, 0.7, 3.0]);
    let xs = x.to_f64_vec();
    let cases: Vec<(Activation, fn(f64) -> f64)> = vec![
        (Activation::Identity, |v| v),
        (Activation::Relu, |v| v.max(0.0)),
        (Activation::Tanh, f64::tanh),
        (Activation::Sigmoid, |v| 1.0 / (1.0 + (-v).exp())),
        (Activation::Silu, |v| v / (1.0 + (-v).exp())),
        (Activation::Softplus, |v| v.exp().ln_1p()),
        (Activation::LeakyRelu(0.1), |v| if v > 0.0 { v } else { 0.1 * v }),
        (Activation::Elu(1.5), |v| if v > 0.0 { v } else { 1.5 * v.exp_m1() }),
        (Activation::Gelu, |v| 0.5 * v * (1.0 + libm_erf(v / 2f64.sqrt()))),
        (Activation::GeluTanh, |v| {
            0.5 * v * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (v + 0.044715 * v.powi(3))).tanh())
        }),
    ];
    for (act, f) in cases {
        let y = run(&vars, &act, &tree, &x).unwrap();
        let want: Vec<f64> = xs.iter().map(|&v| f(v)).collect();
        assert_close(&y.to_f64_vec(), &want, 1e-12, &format!("{act:?}"));
    }
}

#[test]
fn activations_differentiate_and_flatten_keeps_the_batch_axis() {
    let acts = [
        Activation::Relu,
        Activation::Gelu,
        Activation::GeluTanh,
        Activation::Silu,
        Activation::Tanh,
        Activation::Sigmoid,
        Activation::Softplus,
        Activation::LeakyRelu(0.1),
        Activation::Elu(1.5),
    ];
    for act in acts {
        let vars = Vars::new(DType::F64);
        let net = Sequential::new().add(Linear::new(&vars.pp(0), 3, 4, true).unwrap()).add(act);
        let tree = random_tree(&vars, 50);
        check_grads(&vars, &net, &tree, &Rng(51).tensor(&[5, 3]), Mode::Eval, true);
    }
    let vars = Vars::new(DType::F64);
    let x = Rng(52).tensor(&[2, 3, 2]);
    let y = run(&vars, &Flatten, &vars.init(0).unwrap(), &x).unwrap();
    assert_eq!(y.shape(), &[2, 6]);
    assert_eq!(y.to_f64_vec(), x.to_f64_vec());
}

#[test]
fn bad_shapes_are_errors_naming_the_layer() {
    let vars = Vars::new(DType::F64);
    let attn = MultiHeadAttention::new(&vars.pp("attn"), 4, 2, false, false).unwrap();
    let bn = BatchNorm::new(&vars.pp("bn"), 3).unwrap();
    let tree = vars.init(0).unwrap();
    let err = run(&vars, &attn, &tree, &Rng(1).tensor(&[2, 3, 5])).unwrap_err().to_string();
    assert!(err.contains("q must be [batch, seq, 4]"), "{err}");
    let err = run(&vars, &bn, &tree, &Rng(1).tensor(&[2, 4])).unwrap_err().to_string();
    assert!(err.contains("batch_norm") && err.contains("expected an input [N, [3], ...]"), "{err}");
    // Training statistics need two values per channel.
    let f = forward_fn(&vars, &bn, Mode::Train);
    let x = Rng(1).tensor(&[1, 3]);
    let mut ins: Vec<&Tensor> = tree.tensors().iter().collect();
    ins.push(&x);
    let err = f.call(&ins).unwrap_err().to_string();
    assert!(err.contains("more than one value per channel"), "{err}");
    // Configuration mistakes are caught when the layer is built.
    assert!(MultiHeadAttention::new(&vars.pp("a2"), 6, 4, true, false).is_err());
    assert!(Conv::conv2d(&vars.pp("c"), 3, 4, 3, ConvOpts::new().groups(2)).is_err());
    assert!(LayerNorm::new(&vars.pp("ln"), &[], 1e-5).is_err());
}
