//! The layer API (`graft::layers`, re-exported in `graft::nn`) through
//! `jit`: hand-computed convolution, transposed convolution and pooling
//! examples, unbatched inputs, embedding / one-hot / dropout with traced
//! keys, trace errors, and a small CNN's gradient against central
//! differences (conv, relu, max pool, avg pool, linear, cross-entropy).

use graft::layers::{self, ConvOpts, ConvTransposeOpts, Padding, PoolOpts};
use graft::{jit, jit_n, nn, random, DType, Tensor, TensorType, Tr, Wrt};

fn t64(shape: &[usize], data: &[f64]) -> Tensor {
    Tensor::from_vec(shape.to_vec(), data.to_vec()).unwrap()
}

fn grid(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    t64(shape, &(0..n).map(|i| i as f64).collect::<Vec<_>>())
}

fn call1(f: impl Fn(&Tr) -> Tr, x: &Tensor) -> Tensor {
    jit("f", f).call(&[x]).unwrap().remove(0)
}

#[test]
fn conv2d_hand_example_with_bias_stride_and_padding() {
    // x = 0..9 as 3x3; kernel [[1, 0], [0, -1]]: out = x[i, j] - x[i+1, j+1] = -4.
    let x = grid(&[1, 1, 3, 3]);
    let w = t64(&[1, 1, 2, 2], &[1.0, 0.0, 0.0, -1.0]);
    let b = t64(&[1], &[0.5]);
    let f = jit_n("conv", |v| layers::conv2d(&v[0], &v[1], Some(&v[2]), &ConvOpts::new()));
    let y = f.call(&[&x, &w, &b]).unwrap().remove(0);
    assert_eq!(y.shape(), &[1, 1, 2, 2]);
    assert_eq!(y.to_f64_vec(), vec![-3.5; 4]);
    // Padding 1, stride 2 with a 1x1 ones kernel samples the zero-padded grid.
    let ones = t64(&[1, 1, 1, 1], &[1.0]);
    let f = jit_n("conv", |v| layers::conv2d(&v[0], &v[1], None, &ConvOpts::new().padding(1).stride(2)));
    let y = f.call(&[&x, &ones]).unwrap().remove(0);
    // Padded 5x5, positions 0, 2, 4 in each dim -> padded corners are 0, center is x[1,1] = 4.
    assert_eq!(y.to_f64_vec(), vec![0.0, 0.0, 0.0, 0.0, 4.0, 0.0, 0.0, 0.0, 0.0]);
    // 'same' with a 3x3 ones kernel: 3x3 box sums of the zero-padded grid.
    let w3 = Tensor::full(&TensorType::new(DType::F64, vec![1, 1, 3, 3]), 1.0);
    let f = jit_n("conv", |v| layers::conv2d(&v[0], &v[1], None, &ConvOpts::new().padding(Padding::Same)));
    let y = f.call(&[&x, &w3]).unwrap().remove(0);
    assert_eq!(y.to_f64_vec(), vec![8.0, 15.0, 12.0, 21.0, 36.0, 27.0, 20.0, 33.0, 24.0]);
}

#[test]
fn conv1d_conv3d_and_groups_through_nn() {
    // conv1d, two groups: channel 0 * 2, channel 1 * -1 (1-tap kernels).
    let x = t64(&[1, 2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let w = t64(&[2, 1, 1], &[2.0, -1.0]);
    let f = jit_n("c", |v| nn::conv1d(&v[0], &v[1], None, &ConvOpts::new().groups(2)));
    assert_eq!(f.call(&[&x, &w]).unwrap()[0].to_f64_vec(), vec![2.0, 4.0, 6.0, -4.0, -5.0, -6.0]);
    // conv3d with a 2x2x2 ones kernel sums each 2x2x2 block of a 2x2x3 grid.
    let x = grid(&[1, 1, 2, 2, 3]);
    let w = Tensor::full(&TensorType::new(DType::F64, vec![1, 1, 2, 2, 2]), 1.0);
    let f = jit_n("c", |v| layers::conv3d(&v[0], &v[1], None, &ConvOpts::new()));
    // Blocks at w=0: {0,1,3,4,6,7,9,10} = 40; at w=1: 48.
    assert_eq!(f.call(&[&x, &w]).unwrap()[0].to_f64_vec(), vec![40.0, 48.0]);
}

#[test]
fn conv_transpose2d_hand_example() {
    let x = t64(&[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let w = Tensor::full(&TensorType::new(DType::F64, vec![1, 1, 2, 2]), 1.0);
    // Stride 2: every input element fills its own 2x2 block.
    let f = jit_n("ct", |v| layers::conv_transpose2d(&v[0], &v[1], None, &ConvTransposeOpts::new().stride(2)));
    let y = f.call(&[&x, &w]).unwrap().remove(0);
    assert_eq!(y.shape(), &[1, 1, 4, 4]);
    assert_eq!(y.to_f64_vec(), vec![1.0, 1.0, 2.0, 2.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0, 3.0, 3.0, 4.0, 4.0]);
    // Stride 1: overlapping blocks add ("full" convolution); padding 1 crops the border.
    let f = jit_n("ct", |v| layers::conv_transpose2d(&v[0], &v[1], None, &ConvTransposeOpts::new()));
    assert_eq!(f.call(&[&x, &w]).unwrap()[0].to_f64_vec(), vec![1.0, 3.0, 2.0, 4.0, 10.0, 6.0, 3.0, 7.0, 4.0]);
    let b = t64(&[1], &[-10.0]);
    let f = jit_n("ct", |v| {
        layers::conv_transpose2d(&v[0], &v[1], Some(&v[2]), &ConvTransposeOpts::new().padding(1).stride(1))
    });
    // 3x3 full output cropped by 1 on each side: the center 10, plus bias.
    assert_eq!(f.call(&[&x, &w, &b]).unwrap()[0].to_f64_vec(), vec![0.0]);
    // 1-d with output_padding: (2-1)*2 + 1 + 1 = 4 outputs, the last one only gets padding (0).
    let x1 = t64(&[1, 1, 2], &[1.0, 2.0]);
    let w1 = t64(&[1, 1, 1], &[3.0]);
    let f = jit_n("ct", |v| {
        layers::conv_transpose1d(&v[0], &v[1], None, &ConvTransposeOpts::new().stride(2).output_padding(1))
    });
    assert_eq!(f.call(&[&x1, &w1]).unwrap()[0].to_f64_vec(), vec![3.0, 0.0, 6.0, 0.0]);
}

#[test]
fn pooling_hand_examples() {
    let x = grid(&[1, 1, 4, 4]);
    assert_eq!(call1(|x| layers::max_pool2d(x, 2, &PoolOpts::new()), &x).to_f64_vec(), vec![5.0, 7.0, 13.0, 15.0]);
    assert_eq!(call1(|x| layers::avg_pool2d(x, 2, &PoolOpts::new()), &x).to_f64_vec(), vec![2.5, 4.5, 10.5, 12.5]);
    // Per-dim kernel [1, 4] (row maxima) and stride [2, 1].
    let y = call1(|x| layers::max_pool2d(x, [1, 4], &PoolOpts::new().stride([2, 1])), &x);
    assert_eq!(y.shape(), &[1, 1, 2, 1]);
    assert_eq!(y.to_f64_vec(), vec![3.0, 11.0]);
    // Padding 1, count_include_pad both ways (top-left window holds only x[0,0] = 0... use the corner 2x2 sum).
    let o = PoolOpts::new().padding(1).stride(2);
    let inc = call1(|x| layers::avg_pool2d(x, 3, &o), &x).to_f64_vec();
    let exc = call1(|x| layers::avg_pool2d(x, 3, &o.clone().count_include_pad(false)), &x).to_f64_vec();
    // Window (0,0) covers x[0..2, 0..2] = 0+1+4+5 = 10: /9 with pads, /4 without.
    assert!((inc[0] - 10.0 / 9.0).abs() < 1e-15 && (exc[0] - 2.5).abs() < 1e-15, "{inc:?} {exc:?}");
    // Global average via adaptive pooling, and a non-divisible adaptive size.
    assert_eq!(call1(|x| layers::adaptive_avg_pool2d(x, 1), &x).to_f64_vec(), vec![7.5]);
    let y = call1(|x| layers::adaptive_avg_pool2d(x, [3, 1]), &x);
    // Row bins [0,2), [1,3), [2,4): means 3.5, 7.5, 11.5.
    assert_eq!(y.to_f64_vec(), vec![3.5, 7.5, 11.5]);
    // 1-d and 3-d.
    let x1 = t64(&[1, 1, 5], &[1.0, 5.0, 2.0, 8.0, 3.0]);
    assert_eq!(
        call1(|x| layers::max_pool1d(x, 2, &PoolOpts::new().stride(1)), &x1).to_f64_vec(),
        vec![5.0, 5.0, 8.0, 8.0]
    );
    let x3 = grid(&[1, 1, 2, 2, 2]);
    assert_eq!(call1(|x| layers::max_pool3d(x, 2, &PoolOpts::new()), &x3).to_f64_vec(), vec![7.0]);
    assert_eq!(call1(|x| layers::avg_pool3d(x, 2, &PoolOpts::new()), &x3).to_f64_vec(), vec![3.5]);
}

#[test]
fn smooth_max_pool_through_tr() {
    let x = t64(&[1, 1, 4], &[1000.0, 1001.0, -5.0, -5.0]);
    let y = call1(|x| layers::smooth_max_pool1d(x, 2, 1.0, &PoolOpts::new()), &x).to_f64_vec();
    let want = [1001.0 + (1.0 + (-1.0f64).exp()).ln(), -5.0 + 2f64.ln()];
    for (g, w) in y.iter().zip(&want) {
        assert!((g - w).abs() < 1e-10, "{y:?} vs {want:?}");
    }
    // Its gradient is the window softmax: [sigmoid(-1), sigmoid(1)], [0.5, 0.5].
    let g = jit("f", |x: &Tr| layers::smooth_max_pool1d(x, 2, 1.0, &PoolOpts::new()).sum(()))
        .grad(Wrt::All)
        .call(&[&x])
        .unwrap()
        .remove(0)
        .to_f64_vec();
    let s = 1.0 / (1.0 + 1f64.exp());
    for (a, b) in g.iter().zip(&[s, 1.0 - s, 0.5, 0.5]) {
        assert!((a - b).abs() < 1e-12, "{g:?}");
    }
}

#[test]
fn unbatched_conv_and_pool() {
    let x = grid(&[1, 3, 3]);
    let w = t64(&[1, 1, 2, 2], &[1.0, 0.0, 0.0, -1.0]);
    let f = jit_n("c", |v| layers::conv2d(&v[0], &v[1], None, &ConvOpts::new()));
    let y = f.call(&[&x, &w]).unwrap().remove(0);
    assert_eq!(y.shape(), &[1, 2, 2]);
    assert_eq!(y.to_f64_vec(), vec![-4.0; 4]);
    let y = call1(|x| layers::max_pool2d(x, 2, &PoolOpts::new().stride(1)), &x);
    assert_eq!(y.shape(), &[1, 2, 2]);
    assert_eq!(y.to_f64_vec(), vec![4.0, 5.0, 7.0, 8.0]);
}

#[test]
fn embedding_and_one_hot() {
    let table = t64(&[3, 2], &[0.0, 1.0, 10.0, 11.0, 20.0, 21.0]);
    let ids = Tensor::from_vec(vec![2, 2], vec![2i64, 0, 1, 5]).unwrap();
    let f = jit_n("e", |v| layers::embedding(&v[0], &v[1]));
    let y = f.call(&[&table, &ids]).unwrap().remove(0);
    assert_eq!(y.shape(), &[2, 2, 2]);
    assert_eq!(y.to_f64_vec(), vec![20.0, 21.0, 0.0, 1.0, 10.0, 11.0, 20.0, 21.0]);
    // Gradient w.r.t. the table counts lookups per row (id 5 is clamped to row 2).
    let g = jit_n("e", |v| layers::embedding(&v[0], &v[1]).sum(()))
        .grad(Wrt::Positions(vec![0]))
        .call(&[&table, &ids])
        .unwrap()
        .remove(0);
    assert_eq!(g.to_f64_vec(), vec![1.0, 1.0, 1.0, 1.0, 2.0, 2.0]);
    let g = jit_n("e", |v| layers::embedding_with_padding_idx(&v[0], &v[1], 0).sum(()))
        .grad(Wrt::Positions(vec![0]))
        .call(&[&table, &ids])
        .unwrap()
        .remove(0);
    assert_eq!(g.to_f64_vec(), vec![0.0, 0.0, 1.0, 1.0, 2.0, 2.0]);

    let ids = Tensor::from_vec(vec![3], vec![1i32, -1, 2]).unwrap();
    let y = call1(|i| layers::one_hot(i, 3, DType::F32), &ids);
    assert_eq!(y.ty(), TensorType::new(DType::F32, vec![3, 3]));
    assert_eq!(y.to_f64_vec(), vec![0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]);
    let y = call1(|i| nn::one_hot_axis(i, 3, DType::F64, -2), &ids);
    assert_eq!(y.shape(), &[3, 3]);
    assert_eq!(y.to_f64_vec(), vec![0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0]);
}

#[test]
fn dropout_with_a_traced_key() {
    let x = Tensor::full(&TensorType::new(DType::F64, vec![4000]), 3.0);
    let f = jit("d", |x: &Tr| layers::dropout(&random::key(x, 7), x, 0.25, true));
    let y = f.call(&[&x]).unwrap().remove(0).to_f64_vec();
    let kept = y.iter().filter(|&&v| v != 0.0).count();
    assert!(y.iter().all(|&v| v == 0.0 || v == 4.0), "kept values scale by 1/0.75 exactly");
    // Binomial(4000, 0.75): sd ~ 27.4.
    assert!((kept as f64 - 3000.0).abs() < 140.0, "kept {kept}");
    // Same seed, same mask; another seed, another mask.
    assert_eq!(f.call(&[&x]).unwrap()[0].to_f64_vec(), y);
    let g = jit("d", |x: &Tr| layers::dropout(&random::key(x, 8), x, 0.25, true));
    assert_ne!(g.call(&[&x]).unwrap()[0].to_f64_vec(), y);
    let h = jit("d", |x: &Tr| layers::dropout(&random::key(x, 7), x, 0.25, false));
    assert_eq!(h.call(&[&x]).unwrap()[0], x);
}

#[test]
fn layer_errors_poison_the_trace() {
    let x = grid(&[1, 3, 4, 4]);
    let w = grid(&[2, 2, 3, 3]);
    let e = jit_n("c", |v| layers::conv2d(&v[0], &v[1], None, &ConvOpts::new()).sum(()))
        .call(&[&x, &w])
        .unwrap_err()
        .to_string();
    assert!(e.contains("conv2d") && e.contains("expects 2 input channels per group"), "{e}");
    let e = jit("p", |x: &Tr| layers::max_pool2d(x, 2, &PoolOpts::new().padding(3))).call(&[&x]).unwrap_err();
    assert!(e.to_string().contains("at most half"), "{e}");
    let e = jit("p", |x: &Tr| layers::adaptive_avg_pool2d(x, [1, 2, 3])).call(&[&x]).unwrap_err();
    assert!(e.to_string().contains("expected output_size with 1 or 2 entries"), "{e}");
    let e = jit("d", |x: &Tr| layers::dropout(&random::key(x, 0), x, 1.0, true)).call(&[&x]).unwrap_err();
    assert!(e.to_string().contains("rate must be in [0, 1)"), "{e}");
    let e = jit("o", |x: &Tr| layers::one_hot(x, 3, DType::F32)).call(&[&x]).unwrap_err();
    assert!(e.to_string().contains("expected integer ids"), "{e}");
}

/// A small CNN: conv -> relu -> max pool -> conv (stride 2) -> avg pool ->
/// linear -> cross-entropy; weights' gradients against central differences.
#[test]
fn small_cnn_gradient_matches_finite_differences() {
    let net = |v: &[Tr]| {
        let h = layers::conv2d(&v[0], &v[1], Some(&v[2]), &ConvOpts::new().padding(1)).relu();
        let h = layers::max_pool2d(&h, 2, &PoolOpts::new());
        let h = layers::conv_transpose2d(&h, &v[3], None, &ConvTransposeOpts::new().stride(2));
        let h = layers::avg_pool2d(&h, 3, &PoolOpts::new().stride(2).padding(1).count_include_pad(false));
        let h = h.flatten_range(1, -1);
        nn::cross_entropy(&nn::linear(&h, &v[4], None), &v[5], -1)
    };
    let mk = |shape: &[usize], seed: usize| {
        let n: usize = shape.iter().product();
        t64(shape, &(0..n).map(|i| (((i + seed) * 2654435761usize) % 1000) as f64 / 1000.0 - 0.5).collect::<Vec<_>>())
    };
    let x = mk(&[2, 2, 6, 6], 1);
    let w1 = mk(&[3, 2, 3, 3], 2);
    let b1 = mk(&[3], 3);
    let w2 = mk(&[3, 2, 2, 2], 4);
    let wl = mk(&[4, 2 * 3 * 3], 5);
    let labels = Tensor::from_vec(vec![2], vec![1i32, 3]).unwrap();
    let ins = [&x, &w1, &b1, &w2, &wl, &labels];
    let f = jit_n("cnn", net);
    let grads = f.grad(Wrt::Positions(vec![0, 1, 2, 3, 4])).call(&ins).unwrap();
    let loss = |ins: &[&Tensor]| f.call(ins).unwrap()[0].to_scalar_f64().unwrap();
    let eps = 1e-6;
    for (k, g) in grads.iter().enumerate() {
        let base = ins[k].to_f64_vec();
        for i in (0..base.len()).step_by(3) {
            let shifted = |d: f64| {
                let mut v = base.clone();
                v[i] += d;
                let t = t64(ins[k].shape(), &v);
                let mut all = ins.to_vec();
                all[k] = &t;
                loss(&all)
            };
            let fd = (shifted(eps) - shifted(-eps)) / (2.0 * eps);
            let got = g.to_f64_vec()[i];
            assert!((fd - got).abs() < 1e-6 * (1.0 + fd.abs()), "input {k}[{i}]: grad {got} vs fd {fd}");
        }
    }
}
