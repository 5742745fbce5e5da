//! Modules as a whole: parameter paths of a nested model, initialiser
//! statistics and determinism, dropout and BatchNorm in both modes, LSTM
//! and GRU against hand-unrolled loops, and training through
//! `Trainer::for_module` (bitwise equal to the functional path).

use crate::module_util::{assert_close, check_grads, random_tree, run, Rng};
use graft::module::*;
use graft::optim::{Optimizer, Schedule, Trainer};
use graft::{jit_n, nn, DType, Tensor, Tr};

/// A small encoder: an embedding, a `Sequential` of two transformer
/// blocks, a final norm and a head.
struct Encoder {
    embed: Embedding,
    layers: Sequential,
    norm: LayerNorm,
    head: Linear,
}

impl Encoder {
    fn new(vars: &Vars) -> Encoder {
        let enc = vars.pp("encoder");
        let layers = enc.pp("layers");
        Encoder {
            embed: Embedding::new(&enc.pp("embed"), 7, 4).unwrap(),
            layers: Sequential::new()
                .add(TransformerBlock::new(&layers.pp(0), 4, 2, 8, true, 0.1).unwrap())
                .add(TransformerBlock::new(&layers.pp(1), 4, 2, 8, true, 0.1).unwrap()),
            norm: LayerNorm::new(&enc.pp("norm"), &[4], 1e-5).unwrap(),
            head: Linear::new(&vars.pp("head"), 4, 7, false).unwrap(),
        }
    }
}

impl Module for Encoder {
    fn forward(&self, cx: &Ctx, ids: &Tr) -> Tr {
        let h = self.layers.forward(cx, &self.embed.forward(cx, ids));
        self.head.forward(cx, &self.norm.forward(cx, &h))
    }
}

#[test]
fn nested_model_parameter_paths() {
    let vars = Vars::new(DType::F32);
    let _model = Encoder::new(&vars);
    let block = |i: usize| -> Vec<String> {
        [
            "ln1.weight",
            "ln1.bias",
            "attn.wq",
            "attn.wk",
            "attn.wv",
            "attn.wo",
            "attn.bq",
            "attn.bk",
            "attn.bv",
            "attn.bo",
            "ln2.weight",
            "ln2.bias",
            "mlp.fc1.weight",
            "mlp.fc1.bias",
            "mlp.fc2.weight",
            "mlp.fc2.bias",
        ]
        .iter()
        .map(|n| format!("encoder.layers.{i}.{n}"))
        .collect()
    };
    let mut want = vec!["encoder.embed.weight".to_string()];
    want.extend(block(0));
    want.extend(block(1));
    want.extend(["encoder.norm.weight", "encoder.norm.bias", "head.weight"].map(String::from));
    assert_eq!(vars.names(), want);
    let tree = vars.init(0).unwrap();
    assert_eq!(tree.names(), want.as_slice());
    assert_eq!(tree.get("encoder.layers.1.attn.wq").unwrap().shape(), &[4, 4]);
    assert_eq!(tree.subtree("encoder.layers.1.attn").len(), 8);
    assert!(vars.uses_rng(), "the blocks' dropout asks for a key");
    // The decay mask keeps matrices and embeddings, not biases or norm scales.
    let mask = vars.decay_mask();
    assert!(mask("encoder.layers.0.attn.wq") && mask("encoder.embed.weight") && mask("head.weight"));
    assert!(!mask("encoder.layers.0.attn.bq") && !mask("encoder.layers.0.ln1.weight") && !mask("encoder.norm.bias"));
    // Flatten/unflatten round trip by name.
    let (names, tensors) = tree.clone().flatten();
    assert_eq!(ParamTree::unflatten(names, tensors).unwrap(), tree);
}

#[test]
fn registering_a_path_twice_is_an_error() {
    let vars = Vars::new(DType::F32);
    Linear::new(&vars.pp("fc"), 2, 2, true).unwrap();
    let err = Linear::new(&vars.pp("fc"), 2, 2, true).unwrap_err();
    assert!(err.to_string().contains("`fc.weight` is registered twice"), "{err}");
}

fn mean_std(v: &[f64]) -> (f64, f64) {
    let m = v.iter().sum::<f64>() / v.len() as f64;
    (m, (v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / v.len() as f64).sqrt())
}

#[test]
fn initialisers_have_their_statistics_and_are_deterministic() {
    let vars = Vars::new(DType::F64);
    let shape = [256, 128];
    let (fi, fo) = (128.0f64, 256.0f64);
    vars.param("kn", &shape, Init::kaiming_relu()).unwrap();
    vars.param("ku", &shape, Init::KaimingUniform { gain: 1.0 }).unwrap();
    vars.param("xn", &shape, Init::XavierNormal { gain: 1.0 }).unwrap();
    vars.param("xu", &shape, Init::xavier()).unwrap();
    vars.param("n", &shape, Init::Normal { mean: 0.5, std: 2.0 }).unwrap();
    vars.param("z", &[3, 2], Init::Zeros).unwrap();
    vars.param("c", &[4], Init::Constant(0.25)).unwrap();
    vars.param("conv", &[16, 8, 3, 3], Init::torch_default()).unwrap();
    let tree = vars.init(7).unwrap();
    let stats = |n: &str| mean_std(&tree.get(n).unwrap().to_f64_vec());
    let cases = [
        ("kn", 0.0, (2.0 / fi).sqrt()),
        ("ku", 0.0, (1.0 / fi).sqrt()),
        ("xn", 0.0, (2.0 / (fi + fo)).sqrt()),
        ("xu", 0.0, (2.0 / (fi + fo)).sqrt()),
        ("n", 0.5, 2.0),
        ("conv", 0.0, 1.0 / (3.0 * 72f64).sqrt()),
    ];
    for (n, mean, std) in cases {
        let (m, s) = stats(n);
        // 32768 samples: the mean is within 4 standard errors, the std within 2 %.
        assert!((m - mean).abs() < 4.0 * std / (32768f64).sqrt() + 1e-12, "{n}: mean {m}, want {mean}");
        assert!((s / std - 1.0).abs() < 0.02, "{n}: std {s}, want {std}");
    }
    let bound = (6.0 / (fi + fo)).sqrt();
    assert!(tree.get("xu").unwrap().to_f64_vec().iter().all(|v| v.abs() <= bound));
    assert!(tree.get("conv").unwrap().to_f64_vec().iter().all(|v| v.abs() <= 1.0 / 72f64.sqrt()));
    assert_eq!(tree.get("z").unwrap().to_f64_vec(), vec![0.0; 6]);
    assert_eq!(tree.get("c").unwrap().to_f64_vec(), vec![0.25; 4]);
    // Same seed, same bits; another seed, other numbers.
    assert_eq!(vars.init(7).unwrap(), tree);
    let other = vars.init(8).unwrap();
    assert_ne!(other.get("kn").unwrap().to_f64_vec(), tree.get("kn").unwrap().to_f64_vec());
    assert!(vars.param("bad", &[2], Init::Normal { mean: 0.0, std: -1.0 }).is_err());
    // A tensor's draw depends on the seed and its path only.
    let alone = Vars::new(DType::F64);
    alone.param("xu", &shape, Init::xavier()).unwrap();
    assert_eq!(alone.init(7).unwrap().get("xu").unwrap(), tree.get("xu").unwrap());
    assert_ne!(tree.get("xu").unwrap().to_f64_vec(), tree.get("ku").unwrap().to_f64_vec()[..].to_vec());
}

#[test]
fn dropout_is_identity_in_eval_and_drops_at_the_rate_in_training() {
    let vars = Vars::new(DType::F64);
    let drop = Dropout::new(&vars, 0.3).unwrap();
    assert!(vars.uses_rng());
    let tree = vars.init(0).unwrap();
    let x = Tensor::full(&graft::TensorType::new(DType::F64, vec![100, 100]), 2.0);
    assert_eq!(run(&vars, &drop, &tree, &x).unwrap(), x);
    let f = forward_fn(&vars, &drop, Mode::Train);
    let key = |s: i32| Tensor::from_vec(vec![2], vec![0, s]).unwrap();
    let a = f.call(&[&key(1), &x]).unwrap();
    assert_eq!(a.len(), 2, "output and the next key");
    let v = a[0].to_f64_vec();
    let zeros = v.iter().filter(|&&e| e == 0.0).count() as f64 / v.len() as f64;
    // 10000 Bernoulli(0.3) draws: standard error 0.0046.
    assert!((zeros - 0.3).abs() < 0.02, "dropped fraction {zeros}");
    assert!(v.iter().all(|&e| e == 0.0 || (e - 2.0 / 0.7).abs() < 1e-15), "kept values are scaled by 1/(1 - rate)");
    assert_eq!(f.call(&[&key(1), &x]).unwrap()[0], a[0], "same key, same mask");
    assert_ne!(f.call(&[&key(2), &x]).unwrap()[0], a[0], "another key, another mask");
    assert_ne!(a[1], key(1), "the key advances");
    assert!(Dropout::new(&vars, 1.0).is_err());
}

#[test]
fn batch_norm_running_statistics_follow_the_step() {
    let vars = Vars::new(DType::F64);
    let model = Sequential::new()
        .add(Linear::new(&vars.pp("fc"), 3, 2, true).unwrap())
        .add(BatchNorm::new(&vars.pp("bn"), 2).unwrap());
    let tree = vars.init(3).unwrap();
    let mut rng = Rng(30);
    let batches: Vec<(Tensor, Tensor)> = (0..3).map(|_| (rng.tensor(&[6, 3]), rng.tensor(&[6, 2]))).collect();
    let loss = |m: &Sequential, cx: &Ctx, b: &[Tr]| nn::mse(&m.forward(cx, &b[0]), &b[1]);
    let opt = Optimizer::momentum(Schedule::Constant(0.1), 0.9, false);
    let mut tr = Trainer::for_module(&vars, &tree, model, loss, opt, 0).unwrap();
    assert_eq!(tr.names(), ["fc.weight", "fc.bias", "bn.weight", "bn.bias"], "state is not optimised");
    assert_eq!(tr.buffer_names(), ["bn.running_mean", "bn.running_var"]);
    let (mut rm, mut rv) = (vec![0.0; 2], vec![1.0; 2]);
    for (x, y) in &batches {
        // The statistics of the linear layer's output at the parameters the step starts from.
        let cur = tr.tree(&vars).unwrap();
        let (w, b, xv) =
            (cur.get("fc.weight").unwrap().to_f64_vec(), cur.get("fc.bias").unwrap().to_f64_vec(), x.to_f64_vec());
        let h: Vec<f64> =
            (0..12).map(|i| (0..3).map(|j| xv[(i / 2) * 3 + j] * w[(i % 2) * 3 + j]).sum::<f64>() + b[i % 2]).collect();
        for c in 0..2 {
            let col: Vec<f64> = (0..6).map(|r| h[r * 2 + c]).collect();
            let (m, s) = mean_std(&col);
            rm[c] = 0.9 * rm[c] + 0.1 * m;
            rv[c] = 0.9 * rv[c] + 0.1 * s * s * 6.0 / 5.0;
        }
        let before = tr.params.clone();
        tr.step(&[x, y]).unwrap();
        assert_ne!(tr.params, before, "the parameters move");
        assert_close(&tr.buffers[0].to_f64_vec(), &rm, 1e-12, "running_mean");
        assert_close(&tr.buffers[1].to_f64_vec(), &rv, 1e-12, "running_var");
    }
    // Eval mode normalises with the running statistics.
    let trained = tr.tree(&vars).unwrap();
    let (x, y) = &batches[0];
    let eval = tr.eval(&[x, y]).unwrap();
    let f = jit_n("eval", |v: &[Tr]| {
        let h = nn::linear(&v[0], &v[1], Some(&v[2]));
        let bn = (h - &v[5]) * (&v[6] + 1e-5).rsqrt() * &v[3] + &v[4];
        nn::mse(&bn, &v[7])
    });
    let t = |n: &str| trained.get(n).unwrap();
    let want = f
        .call(&[
            x,
            t("fc.weight"),
            t("fc.bias"),
            t("bn.weight"),
            t("bn.bias"),
            t("bn.running_mean"),
            t("bn.running_var"),
            y,
        ])
        .unwrap()[0]
        .to_scalar_f64()
        .unwrap();
    assert!((eval - want).abs() < 1e-12, "eval loss {eval} vs {want}");
}

/// One LSTM step on flat `[B, *]` data in PyTorch's gate order.
fn lstm_step(x: &[f64], h: &[f64], c: &[f64], t: &ParamTree, bsz: usize, i: usize, hs: usize) -> (Vec<f64>, Vec<f64>) {
    let g = |n: &str| t.get(n).unwrap().to_f64_vec();
    let (wih, whh, bih, bhh) = (g("lstm.weight_ih"), g("lstm.weight_hh"), g("lstm.bias_ih"), g("lstm.bias_hh"));
    let sig = |v: f64| 1.0 / (1.0 + (-v).exp());
    let (mut h2, mut c2) = (vec![0.0; bsz * hs], vec![0.0; bsz * hs]);
    for b in 0..bsz {
        let pre = |row: usize| -> f64 {
            bih[row]
                + bhh[row]
                + (0..i).map(|k| wih[row * i + k] * x[b * i + k]).sum::<f64>()
                + (0..hs).map(|k| whh[row * hs + k] * h[b * hs + k]).sum::<f64>()
        };
        for u in 0..hs {
            let (ig, fg, gg, og) = (sig(pre(u)), sig(pre(hs + u)), pre(2 * hs + u).tanh(), sig(pre(3 * hs + u)));
            c2[b * hs + u] = fg * c[b * hs + u] + ig * gg;
            h2[b * hs + u] = og * c2[b * hs + u].tanh();
        }
    }
    (h2, c2)
}

/// The `[B, T, I]` input's step `t` as `[B, I]`.
fn at_step(x: &[f64], bsz: usize, steps: usize, i: usize, t: usize) -> Vec<f64> {
    (0..bsz).flat_map(|b| x[(b * steps + t) * i..(b * steps + t + 1) * i].to_vec()).collect()
}

#[test]
fn lstm_matches_a_hand_unrolled_loop() {
    let (bsz, steps, i, hs) = (2, 5, 3, 4);
    let vars = Vars::new(DType::F64);
    let lstm = Lstm::new(&vars.pp("lstm"), i, hs).unwrap();
    let tree = random_tree(&vars, 40);
    let x = Rng(41).tensor(&[bsz, steps, i]);
    let y = run(&vars, &lstm, &tree, &x).unwrap();
    assert_eq!(y.shape(), &[bsz, steps, hs]);
    let xv = x.to_f64_vec();
    let (mut h, mut c) = (vec![0.0; bsz * hs], vec![0.0; bsz * hs]);
    let mut want = vec![0.0; bsz * steps * hs];
    for t in 0..steps {
        (h, c) = lstm_step(&at_step(&xv, bsz, steps, i, t), &h, &c, &tree, bsz, i, hs);
        for b in 0..bsz {
            want[(b * steps + t) * hs..(b * steps + t + 1) * hs].copy_from_slice(&h[b * hs..(b + 1) * hs]);
        }
    }
    assert_close(&y.to_f64_vec(), &want, 1e-12, "lstm");
    check_grads(&vars, &lstm, &tree, &Rng(42).tensor(&[1, 3, i]), Mode::Eval, true);
    let err = run(&vars, &lstm, &tree, &Rng(1).tensor(&[2, 5, 4])).unwrap_err();
    assert!(err.to_string().contains("expected an input [batch, time, 3]"), "{err}");
}

#[test]
fn gru_matches_a_hand_unrolled_loop() {
    let (bsz, steps, i, hs) = (2, 4, 3, 3);
    let vars = Vars::new(DType::F64);
    let gru = Gru::new(&vars.pp("gru"), i, hs).unwrap();
    let tree = random_tree(&vars, 43);
    let x = Rng(44).tensor(&[bsz, steps, i]);
    let y = run(&vars, &gru, &tree, &x).unwrap();
    let g = |n: &str| tree.get(n).unwrap().to_f64_vec();
    let (wih, whh, bih, bhh) = (g("gru.weight_ih"), g("gru.weight_hh"), g("gru.bias_ih"), g("gru.bias_hh"));
    let sig = |v: f64| 1.0 / (1.0 + (-v).exp());
    let xv = x.to_f64_vec();
    let mut h = vec![0.0; bsz * hs];
    let mut want = vec![0.0; bsz * steps * hs];
    for t in 0..steps {
        let xt = at_step(&xv, bsz, steps, i, t);
        let mut h2 = vec![0.0; bsz * hs];
        for b in 0..bsz {
            let gi = |row: usize| bih[row] + (0..i).map(|k| wih[row * i + k] * xt[b * i + k]).sum::<f64>();
            let gh = |row: usize| bhh[row] + (0..hs).map(|k| whh[row * hs + k] * h[b * hs + k]).sum::<f64>();
            for u in 0..hs {
                let r = sig(gi(u) + gh(u));
                let z = sig(gi(hs + u) + gh(hs + u));
                let n = (gi(2 * hs + u) + r * gh(2 * hs + u)).tanh();
                h2[b * hs + u] = (1.0 - z) * n + z * h[b * hs + u];
            }
        }
        h = h2;
        for b in 0..bsz {
            want[(b * steps + t) * hs..(b * steps + t + 1) * hs].copy_from_slice(&h[b * hs..(b + 1) * hs]);
        }
    }
    assert_close(&y.to_f64_vec(), &want, 1e-12, "gru");
    check_grads(&vars, &gru, &tree, &Rng(45).tensor(&[1, 3, i]), Mode::Eval, true);
}

/// Three clusters in 4-D (as in `train.rs`), labels `i % 3`.
fn clusters(n: usize) -> (Tensor, Tensor) {
    let mut rng = Rng(2024);
    let centres = [[2.0, 0.0, 0.0, 0.0], [0.0, 2.0, 0.0, 0.0], [0.0, 0.0, 2.0, -2.0]];
    let mut xs = Vec::with_capacity(n * 4);
    for i in 0..n {
        xs.extend(centres[i % 3].iter().map(|c| c + 0.4 * rng.next()));
    }
    (
        Tensor::from_vec(vec![n, 4], xs).unwrap(),
        Tensor::from_vec(vec![n], (0..n).map(|i| (i % 3) as i32).collect::<Vec<_>>()).unwrap(),
    )
}

#[test]
fn module_training_equals_the_functional_path_bitwise() {
    let (x, labels) = clusters(60);
    let vars = Vars::new(DType::F64);
    let layers = vars.pp("mlp");
    let model = Sequential::new()
        .add(Linear::new(&layers.pp(0), 4, 16, true).unwrap())
        .add(Activation::Tanh)
        .add(Linear::new(&layers.pp(2), 16, 3, true).unwrap());
    let tree = vars.init(11).unwrap();
    let opt = || Optimizer::adamw(Schedule::Constant(0.05), 0.01).decay_only(vars.decay_mask());
    let loss = |m: &Sequential, cx: &Ctx, b: &[Tr]| nn::cross_entropy(&m.forward(cx, &b[0]), &b[1], -1);
    let mut by_module = Trainer::for_module(&vars, &tree, model, loss, opt(), 0).unwrap();
    // The same model written by hand over positional parameters.
    let f = jit_n("mlp", |v: &[Tr]| {
        let h = nn::linear(&v[4], &v[0], Some(&v[1])).tanh();
        nn::cross_entropy(&nn::linear(&h, &v[2], Some(&v[3])), &v[5], -1)
    });
    let (names, params) = tree.clone().flatten();
    let mut by_hand = Trainer::new(f, names, params, opt()).unwrap();
    let mut losses = Vec::new();
    for _ in 0..60 {
        let a = by_module.step(&[&x, &labels]).unwrap();
        let b = by_hand.step(&[&x, &labels]).unwrap();
        assert_eq!(a.to_bits(), b.to_bits());
        losses.push(a);
    }
    assert_eq!(by_module.params, by_hand.params);
    assert!(losses[59] < 0.05 * losses[0], "loss {} -> {}", losses[0], losses[59]);
}

#[test]
fn a_model_with_batch_norm_and_dropout_trains_and_evaluates() {
    let (x, labels) = clusters(60);
    let vars = Vars::new(DType::F32);
    let model = Sequential::new()
        .add(Linear::new(&vars.pp(0), 4, 32, true).unwrap())
        .add(BatchNorm::new(&vars.pp(1), 32).unwrap())
        .add(Activation::Relu)
        .add(Dropout::new(&vars, 0.2).unwrap())
        .add(Linear::new(&vars.pp(4), 32, 3, true).unwrap());
    let tree = vars.init(5).unwrap();
    let opt = Optimizer::adam(Schedule::Constant(0.01));
    let loss = |m: &Sequential, cx: &Ctx, b: &[Tr]| nn::cross_entropy(&m.forward(cx, &b[0]), &b[1], -1);
    let x32 = Tensor::from_vec(vec![60, 4], x.to_f64_vec().iter().map(|&v| v as f32).collect::<Vec<_>>()).unwrap();
    let mut tr = Trainer::for_module(&vars, &tree, model, loss, opt, 1).unwrap();
    assert_eq!(tr.buffer_names(), ["1.running_mean", "1.running_var", RNG_BUFFER]);
    let start = tr.eval(&[&x32, &labels]).unwrap();
    let key0 = tr.buffers[2].clone();
    for _ in 0..80 {
        tr.step(&[&x32, &labels]).unwrap();
    }
    assert_ne!(tr.buffers[2], key0, "the dropout key advances every step");
    let end = tr.eval(&[&x32, &labels]).unwrap();
    assert!(end < 0.1 * start, "eval loss {start} -> {end}");
}

#[test]
fn a_tree_that_does_not_match_the_model_lists_every_mismatch() {
    let vars = Vars::new(DType::F64);
    let model = Linear::new(&vars.pp("fc"), 2, 3, true).unwrap();
    let mut tree = ParamTree::new();
    tree.insert("fc.weight", Tensor::from_vec(vec![2, 2], vec![0.0f64; 4]).unwrap()).unwrap();
    tree.insert("extra", Tensor::vec1(&[1.0f64])).unwrap();
    let loss = |m: &Linear, cx: &Ctx, b: &[Tr]| m.forward(cx, &b[0]).sum(());
    let err = Trainer::for_module(&vars, &tree, model, loss, Optimizer::sgd(Schedule::Constant(0.1)), 0)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("`fc.weight` is f64[2,2], the model has f64[3,2]"), "{err}");
    assert!(err.contains("`fc.bias` is missing"), "{err}");
    assert!(err.contains("`extra` is not a tensor of this model"), "{err}");
}

#[test]
fn trees_round_trip_through_safetensors_and_mismatches_are_listed() {
    let vars = Vars::new(DType::F32);
    let _ = Sequential::new()
        .add(Linear::new(&vars.pp(0), 3, 2, true).unwrap())
        .add(BatchNorm::new(&vars.pp(1), 2).unwrap());
    let tree = vars.init(9).unwrap();
    let dir = std::env::temp_dir().join(format!("graft_module_io_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tree.safetensors");
    tree.save(&path).unwrap();
    assert_eq!(tree.load_into(&path).unwrap(), tree, "names, order, dtypes and bits survive");
    // Another model's file: every difference is named.
    let other = Vars::new(DType::F32);
    Linear::new(&other.pp(0), 3, 4, true).unwrap();
    let err = other.init(0).unwrap().load_into(&path).unwrap_err().to_string();
    assert!(err.contains("`0.weight` is f32[2,3], the model has f32[4,3]"), "{err}");
    assert!(err.contains("`1.running_var` is not a parameter of the model"), "{err}");
    // A truncated file is an error, not a panic.
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let err = tree.load_into(&path).unwrap_err().to_string();
    assert!(err.contains("not a valid safetensors file"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn adamw_decays_matrices_but_not_biases_or_norm_scales_by_path() {
    let vars = Vars::new(DType::F64);
    let model = Sequential::new()
        .add(Linear::new(&vars.pp("fc"), 3, 2, true).unwrap())
        .add(LayerNorm::new(&vars.pp("ln"), &[2], 1e-5).unwrap());
    let tree = vars.init(4).unwrap();
    // A loss whose gradient is exactly zero: AdamW's step is then the decay alone.
    let loss = |m: &Sequential, cx: &Ctx, b: &[Tr]| (m.forward(cx, &b[0]) * 0.0).sum(());
    let (lr, wd) = (0.1, 0.5);
    let opt = Optimizer::adamw(Schedule::Constant(lr), wd).decay_only(vars.decay_mask());
    let mut tr = Trainer::for_module(&vars, &tree, model, loss, opt, 0).unwrap();
    tr.step(&[&Rng(60).tensor(&[4, 3])]).unwrap();
    let after = tr.tree(&vars).unwrap();
    for (name, before) in tree.iter() {
        let want: Vec<f64> = if name == "fc.weight" {
            before.to_f64_vec().iter().map(|p| p - lr * wd * p).collect()
        } else {
            before.to_f64_vec()
        };
        assert_close(&after.get(name).unwrap().to_f64_vec(), &want, 1e-15, name);
    }
}

#[test]
fn a_step_with_buffers_takes_the_same_gradient_as_one_without() {
    let (x, labels) = clusters(30);
    let mut rng = Rng(70);
    let params = vec![rng.tensor(&[8, 4]), rng.tensor(&[8]), rng.tensor(&[3, 8]), rng.tensor(&[3])];
    let names: Vec<String> = ["w1", "b1", "w2", "b2"].map(String::from).to_vec();
    let mlp = |v: &[Tr], x: &Tr, y: &Tr| {
        let h = nn::linear(x, &v[0], Some(&v[1])).tanh();
        nn::cross_entropy(&nn::linear(&h, &v[2], Some(&v[3])), y, -1)
    };
    let plain = jit_n("plain", move |v: &[Tr]| mlp(&v[..4], &v[4], &v[5]));
    // The same loss carrying a buffer (a running sum of the loss) that the
    // gradient must ignore.
    let carried = jit_n("carried", move |v: &[Tr]| {
        let l = mlp(&v[..4], &v[5], &v[6]);
        vec![l.clone(), &v[4] + &l]
    });
    let eval = jit_n("eval", move |v: &[Tr]| mlp(&v[..4], &v[5], &v[6]));
    let opt = || Optimizer::adam(Schedule::Constant(0.05));
    let mut a = Trainer::new(plain, names.clone(), params.clone(), opt()).unwrap();
    let zero = Tensor::scalar(0.0f64);
    let mut b = Trainer::with_buffers(carried, eval, names, params, vec!["sum".into()], vec![zero], opt()).unwrap();
    let mut total = 0.0;
    for _ in 0..20 {
        let la = a.step(&[&x, &labels]).unwrap();
        let lb = b.step(&[&x, &labels]).unwrap();
        assert_eq!(la.to_bits(), lb.to_bits());
        total += lb;
    }
    assert_eq!(a.params, b.params);
    assert!((b.buffers[0].to_scalar_f64().unwrap() - total).abs() < 1e-12);
    assert_eq!(a.eval(&[&x, &labels]).unwrap().to_bits(), b.eval(&[&x, &labels]).unwrap().to_bits());
}

#[test]
fn accumulated_steps_carry_buffers_through_the_micro_batches() {
    // The buffer sums the micro-batch losses: after one step with three
    // micro-batches it holds their sum, three times the step's mean loss.
    let (x, labels) = clusters(30);
    let mut rng = Rng(71);
    let params = vec![rng.tensor(&[8, 4]), rng.tensor(&[8]), rng.tensor(&[3, 8]), rng.tensor(&[3])];
    let names: Vec<String> = ["w1", "b1", "w2", "b2"].map(String::from).to_vec();
    let mlp = |v: &[Tr], x: &Tr, y: &Tr| {
        let h = nn::linear(x, &v[0], Some(&v[1])).tanh();
        nn::cross_entropy(&nn::linear(&h, &v[2], Some(&v[3])), y, -1)
    };
    let carried = jit_n("carried", move |v: &[Tr]| {
        let l = mlp(&v[..4], &v[5], &v[6]);
        vec![l.clone(), &v[4] + &l]
    });
    let eval = jit_n("eval", move |v: &[Tr]| mlp(&v[..4], &v[5], &v[6]));
    let opt = Optimizer::sgd(Schedule::Constant(0.1));
    let zero = Tensor::scalar(0.0f64);
    let mut t = Trainer::with_buffers(carried, eval, names, params, vec!["sum".into()], vec![zero], opt).unwrap();
    t.accumulate(3).unwrap();
    let rows = x.shape()[0];
    assert_eq!(rows % 3, 0);
    let loss = t.step(&[&x, &labels]).unwrap();
    let sum = t.buffers[0].to_scalar_f64().unwrap();
    assert!((sum - 3.0 * loss).abs() <= 1e-12 * sum.abs(), "buffer {sum} vs 3 x mean loss {loss}");
}

#[test]
fn a_small_cnn_with_group_norm_trains() {
    // 8x8 images: class 0 is brighter in the top half, class 1 in the bottom half.
    let (n, mut rng) = (32, Rng(80));
    let mut xs = Vec::with_capacity(n * 64);
    for i in 0..n {
        for p in 0..64 {
            let top = p < 32;
            let bright = (i % 2 == 0) == top;
            xs.push(if bright { 1.0 } else { 0.0 } + 0.3 * rng.next());
        }
    }
    let x = Tensor::from_vec(vec![n, 1, 8, 8], xs).unwrap();
    let y = Tensor::from_vec(vec![n], (0..n).map(|i| (i % 2) as i32).collect::<Vec<_>>()).unwrap();
    let vars = Vars::new(DType::F64);
    let cnn = Sequential::new()
        .add(Conv::conv2d(&vars.pp(0), 1, 4, 3, nn::ConvOpts::new().padding(1)).unwrap())
        .add(GroupNorm::new(&vars.pp(1), 2, 4, 1e-5).unwrap())
        .add(Activation::Relu)
        .add(Conv::conv2d(&vars.pp(3), 4, 4, 3, nn::ConvOpts::new().stride(2).padding(1)).unwrap())
        .add(Activation::Relu)
        .add(Flatten)
        .add(Linear::new(&vars.pp(6), 64, 2, true).unwrap());
    let tree = vars.init(1).unwrap();
    let loss = |m: &Sequential, cx: &Ctx, b: &[Tr]| nn::cross_entropy(&m.forward(cx, &b[0]), &b[1], -1);
    let mut tr = Trainer::for_module(&vars, &tree, cnn, loss, Optimizer::adam(Schedule::Constant(0.02)), 0).unwrap();
    let start = tr.eval(&[&x, &y]).unwrap();
    for _ in 0..40 {
        tr.step(&[&x, &y]).unwrap();
    }
    let end = tr.eval(&[&x, &y]).unwrap();
    assert!(end < 0.1 * start, "loss {start} -> {end}");
}
