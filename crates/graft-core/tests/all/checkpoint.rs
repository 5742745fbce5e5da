//! checkpoint: gradients identical to the unchecked function, lower peak
//! memory in reverse mode, and it survives higher-order differentiation.

use crate::common;

use common::{run, Rng};
use graft_core::ad::{grad, value_and_grad, Wrt};
use graft_core::{Builder, DType, Executable, Func, IrError, Tensor, TensorType, Value};
use std::sync::Arc;

const WIDTH: usize = 64;
const BATCH: usize = 128;
const LAYERS: usize = 20;
const BLOCK: usize = 5;

fn t64(shape: &[usize]) -> TensorType {
    TensorType::new(DType::F64, shape.to_vec())
}

/// One tanh layer: h -> tanh(h @ w).
fn layer(b: &mut Builder, h: Value, w: Value) -> Result<Value, IrError> {
    let z = b.dot_general(h, w, &[1], &[0], &[], &[])?;
    b.tanh(z)
}

/// A block of BLOCK layers as its own function: (h, w_1..w_BLOCK) -> h'.
fn block_func() -> Arc<Func> {
    let mut b = Builder::new("block");
    let mut h = b.param(t64(&[BATCH, WIDTH]));
    let ws: Vec<Value> = (0..BLOCK).map(|_| b.param(t64(&[WIDTH, WIDTH]))).collect();
    for &w in &ws {
        h = layer(&mut b, h, w).unwrap();
    }
    Arc::new(b.finish(&[h]).unwrap())
}

/// The 20-layer MLP loss, optionally with each block of 5 layers checkpointed.
fn mlp(checkpointed: bool) -> Func {
    let mut b = Builder::new(if checkpointed { "mlp_remat" } else { "mlp" });
    let x = b.param(t64(&[BATCH, WIDTH]));
    let ws: Vec<Value> = (0..LAYERS).map(|_| b.param(t64(&[WIDTH, WIDTH]))).collect();
    let block = block_func();
    let mut h = x;
    for chunk in ws.chunks(BLOCK) {
        if checkpointed {
            let mut args = vec![h];
            args.extend_from_slice(chunk);
            h = b.checkpoint(block.clone(), &args).unwrap()[0];
        } else {
            for &w in chunk {
                h = layer(&mut b, h, w).unwrap();
            }
        }
    }
    let sq = b.mul(h, h).unwrap();
    let loss = b.reduce_sum(sq, &[0, 1]).unwrap();
    b.finish(&[loss]).unwrap()
}

fn inputs() -> Vec<Tensor> {
    let mut rng = Rng(42);
    let mut v = vec![rng.tensor(&t64(&[BATCH, WIDTH]), -1.0, 1.0)];
    let s = 1.5 / (WIDTH as f64).sqrt();
    for _ in 0..LAYERS {
        v.push(rng.tensor(&t64(&[WIDTH, WIDTH]), -s, s));
    }
    v
}

#[test]
fn checkpointed_gradients_are_identical_and_use_less_memory() {
    let ins = inputs();
    let refs: Vec<&Tensor> = ins.iter().collect();
    let plain = Executable::new(value_and_grad(&mlp(false), &Wrt::All).unwrap()).unwrap();
    let remat = Executable::new(value_and_grad(&mlp(true), &Wrt::All).unwrap()).unwrap();
    let (g_plain, s_plain) = plain.run_with_stats(&refs).unwrap();
    let (g_remat, s_remat) = remat.run_with_stats(&refs).unwrap();
    assert_eq!(g_plain.len(), LAYERS + 2);
    for (i, (a, b)) in g_plain.iter().zip(&g_remat).enumerate() {
        assert_eq!(a, b, "output {i} differs between checkpointed and plain");
    }
    eprintln!("peak bytes: plain {} remat {}", s_plain.peak_bytes, s_remat.peak_bytes);
    assert!(
        s_remat.peak_bytes < s_plain.peak_bytes,
        "checkpointing should lower peak memory: {} vs {} bytes",
        s_remat.peak_bytes,
        s_plain.peak_bytes
    );
}

#[test]
fn checkpoint_under_second_order() {
    // f(x) = sum(checkpoint(g)(x)) with g(x) = sin(x) * x; f'' elementwise.
    let mut gb = Builder::new("g");
    let x = gb.param(t64(&[3]));
    let s = gb.sin(x).unwrap();
    let y = gb.mul(s, x).unwrap();
    let g = Arc::new(gb.finish(&[y]).unwrap());
    let mut b = Builder::new("f");
    let x = b.param(t64(&[3]));
    let y = b.checkpoint(g, &[x]).unwrap()[0];
    let s = b.reduce_sum(y, &[0]).unwrap();
    let f = b.finish(&[s]).unwrap();
    // d/dx sum(grad) = sum of second derivatives: 2 cos x - x sin x.
    let gf = grad(&f, &Wrt::All).unwrap();
    let mut sb = Builder::new("sum_grad");
    let x = sb.param(t64(&[3]));
    let call = sb.call(Arc::new(gf), &[x]).unwrap()[0];
    let total = sb.reduce_sum(call, &[0]).unwrap();
    let h = grad(&sb.finish(&[total]).unwrap(), &Wrt::All).unwrap();
    let xs = [0.3f64, -0.8, 1.9];
    let out = run(&h, &[Tensor::vec1(&xs)]);
    for (got, x) in out[0].to_vec::<f64>().unwrap().iter().zip(xs) {
        let want = 2.0 * x.cos() - x * x.sin();
        assert!((got - want).abs() < 1e-12, "{got} vs {want}");
    }
}

/// `Policy::Dots` (jax's `dots_saveable`): the same gradient bits as no
/// checkpoint and as `Policy::Nothing`, but the backward pass recomputes no
/// matrix product of the forward pass.
#[test]
fn dots_policy_saves_the_products_and_keeps_the_bits() {
    use graft_core::transform::{Policy, Transform};
    let block = block_func();
    let with = |policy: Option<Policy>| {
        let mut b = Builder::new("mlp");
        let x = b.param(t64(&[BATCH, WIDTH]));
        let ws: Vec<Value> = (0..BLOCK).map(|_| b.param(t64(&[WIDTH, WIDTH]))).collect();
        let mut args = vec![x];
        args.extend_from_slice(&ws);
        let h = match policy {
            Some(p) => b.checkpoint_with(block.clone(), &args, p).unwrap()[0],
            None => b.inline(&block, &args).unwrap()[0],
        };
        let sq = b.mul(h, h).unwrap();
        let loss = b.reduce_sum(sq, &[0, 1]).unwrap();
        grad(&b.finish(&[loss]).unwrap(), &Wrt::All).unwrap()
    };
    let (plain, nothing, dots) = (with(None), with(Some(Policy::Nothing)), with(Some(Policy::Dots)));
    let mut rng = Rng(7);
    let ins: Vec<Tensor> = plain.param_types().iter().map(|t| rng.tensor(t, -0.3, 0.3)).collect();
    let refs: Vec<&Tensor> = ins.iter().collect();
    let run_bits = |f: &Func| -> Vec<Vec<u64>> {
        Executable::new(f.clone())
            .unwrap()
            .run(&refs)
            .unwrap()
            .iter()
            .map(|t| t.to_vec::<f64>().unwrap().iter().map(|v| v.to_bits()).collect())
            .collect()
    };
    let want = run_bits(&plain);
    assert_eq!(run_bits(&nothing), want);
    assert_eq!(run_bits(&dots), want);
    // Matrix products anywhere in the gradient graph, sub-functions included.
    fn dots_in(f: &Func) -> usize {
        use graft_core::Op;
        f.count_prim("dot_general") + f.eqns.iter().flat_map(|e| e.prim.subfuncs()).map(|g| dots_in(&g)).sum::<usize>()
    }
    // Forward: 5 products; backward: 2 per layer. `Nothing` adds the 5 forward
    // products again inside the backward pass (more with the nested tangent map);
    // `Dots` reads them back.
    assert!(dots_in(&dots) < dots_in(&nothing), "dots {} vs nothing {}", dots_in(&dots), dots_in(&nothing));
    let t = Transform::Checkpoint { policy: Policy::Dots };
    assert!(format!("{t:?}").contains("dots"));
    assert!(dots.to_string().contains("func @block_saving("), "the forward pass returns the products: {dots}");
}
