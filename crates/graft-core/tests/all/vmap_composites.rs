//! vmap over every composite (they expand to primitives, so this checks the
//! primitives' batching rules in the combinations real models use): with
//! random signed in_axes/out_axes and batch sizes, `vmap(f)(xs)` equals
//! stacking `f(x_i)` computed one example at a time (exact for integers and
//! bools, 1e-12 relative for f64). The checker is `common::vmap`.

use crate::common;

use common::run;
use common::vmap::{check_vmap, check_vmap_axes, take, Gen};
use graft_core::batch::vmap_func;
use graft_core::composite::conv::{ConvOpts, ConvTransposeOpts, Padding, PerDim};
use graft_core::composite::pool::PoolOpts;
use graft_core::composite::{
    attention, broadcast, conv, dropout, embed, linalg, loss, math, norm, pool, random, reduce, shape,
};
use graft_core::ops::binary::{Binary, Compare};
use graft_core::{Builder, DType, Func, IrError, Tensor, TensorType, Value};

fn ty(dtype: DType, shape: &[usize]) -> TensorType {
    TensorType::new(dtype, shape.to_vec())
}

fn t64(shape: &[usize]) -> TensorType {
    ty(DType::F64, shape)
}

fn i32t(shape: &[usize]) -> TensorType {
    ty(DType::I32, shape)
}

fn func(
    name: &str,
    types: &[TensorType],
    body: impl FnOnce(&mut Builder, &[Value]) -> Result<Vec<Value>, IrError>,
) -> Func {
    let mut b = Builder::new(name);
    let ps: Vec<Value> = types.iter().map(|t| b.param(t.clone())).collect();
    let outs = body(&mut b, &ps).unwrap_or_else(|e| panic!("{name}: {e}"));
    b.finish(&outs).unwrap()
}

const X: Gen = Gen::F(-2.0, 2.0);
const POS: Gen = Gen::F(0.1, 3.0);
const TRIALS: usize = 10;

#[test]
fn softmax_family() {
    let f = func("softmax", &[t64(&[3, 4])], |b, p| {
        Ok(vec![
            reduce::softmax(b, p[0], 1)?,
            reduce::log_softmax(b, p[0], 0)?,
            reduce::logsumexp(b, p[0], &[1], false)?,
            reduce::logsumexp(b, p[0], &[0, 1], true)?,
        ])
    });
    check_vmap("softmax", &f, &[Gen::F(-30.0, 30.0)], TRIALS);
}

#[test]
fn reductions_and_statistics() {
    let f = func("stats", &[t64(&[2, 3, 4])], |b, p| {
        Ok(vec![
            reduce::sum(b, p[0], &[2, 0], true)?,
            reduce::mean(b, p[0], &[1], false)?,
            reduce::var(b, p[0], &[0, 2], 1, false)?,
            reduce::std(b, p[0], &[2], 0, true)?,
            reduce::max(b, p[0], &[1, 2], false)?,
            reduce::min(b, p[0], &[0], true)?,
            reduce::prod(b, p[0], &[2], false)?,
            reduce::argmax(b, p[0], 1, true, DType::I64)?,
            reduce::argmin(b, p[0], 2, false, DType::I32)?,
        ])
    });
    check_vmap("stats", &f, &[X], TRIALS);
}

#[test]
fn norms() {
    let f = func("norms", &[t64(&[2, 3, 4]), t64(&[3, 4]), t64(&[4]), t64(&[3])], |b, p| {
        let ln = norm::layer_norm(b, p[0], p[1], Some(p[1]), 1e-5)?;
        let ln1 = norm::layer_norm(b, p[0], p[2], None, 1e-5)?;
        let nz = norm::normalize(b, p[0], &[2, 0], 1e-3)?;
        let (bn, mean, var) = norm::batch_norm(b, p[0], Some(p[3]), Some(p[3]), None, 1e-5)?;
        let gn = norm::group_norm(b, p[0], 3, Some(p[3]), Some(p[3]), 1e-5)?;
        Ok(vec![ln, ln1, nz, bn, mean, var, gn])
    });
    check_vmap("norms", &f, &[X, X, X, X], TRIALS);
}

#[test]
fn matmul_linear_einsum() {
    let f = func("matmul", &[t64(&[2, 3, 4]), t64(&[4, 5]), t64(&[4]), t64(&[5]), t64(&[5, 4])], |b, p| {
        Ok(vec![
            linalg::matmul(b, p[0], p[1])?,
            linalg::matmul(b, p[2], p[1])?,
            linalg::matmul(b, p[0], p[2])?,
            linalg::linear(b, p[0], p[4], Some(p[3]))?,
        ])
    });
    check_vmap("matmul", &f, &[X, X, X, X, X], TRIALS * 2);
    let e = func("einsum", &[t64(&[2, 3, 4]), t64(&[4, 5]), t64(&[2, 5])], |b, p| {
        Ok(vec![
            linalg::einsum(b, "bij,jk->bik", &[p[0], p[1]])?,
            linalg::einsum(b, "bij,jk,bk->i", &[p[0], p[1], p[2]])?,
            linalg::einsum(b, "bij->jb", &[p[0]])?,
        ])
    });
    check_vmap("einsum", &e, &[X, X, X], TRIALS * 2);
    let mi = func("matmul_i32", &[i32t(&[2, 3]), i32t(&[3, 2])], |b, p| Ok(vec![linalg::matmul(b, p[0], p[1])?]));
    check_vmap("matmul_i32", &mi, &[Gen::I(-9, 9), Gen::I(-9, 9)], TRIALS);
}

#[test]
fn convolutions_1d_2d_3d() {
    let c1 = func("conv1d", &[t64(&[2, 4, 7]), t64(&[6, 2, 3]), t64(&[6])], |b, p| {
        let o = ConvOpts::new().stride(2).padding(1).dilation(1).groups(2);
        Ok(vec![conv::conv1d(b, p[0], p[1], Some(p[2]), &o)?])
    });
    check_vmap("conv1d", &c1, &[X, X, X], TRIALS * 2);
    let c2 = func("conv2d", &[t64(&[1, 2, 5, 4]), t64(&[3, 2, 2, 3])], |b, p| {
        let o = ConvOpts::new().padding(Padding::Same).dilation([2, 1]);
        Ok(vec![conv::conv2d(b, p[0], p[1], None, &o)?])
    });
    check_vmap("conv2d", &c2, &[X, X], TRIALS * 2);
    let c3 = func("conv3d", &[t64(&[1, 2, 3, 4, 3]), t64(&[2, 1, 2, 2, 2])], |b, p| {
        let o = ConvOpts::new().stride([1, 2, 1]).padding(vec![(1, 0), (0, 1), (1, 1)]).groups(2);
        Ok(vec![conv::conv3d(b, p[0], p[1], None, &o)?])
    });
    check_vmap("conv3d", &c3, &[X, X], TRIALS);
}

#[test]
fn transposed_convolutions() {
    let t1 = func("conv_t1d", &[t64(&[2, 4, 5]), t64(&[4, 3, 3]), t64(&[6])], |b, p| {
        let o = ConvTransposeOpts::new().stride(2).padding(1).output_padding(1).groups(2);
        Ok(vec![conv::conv_transpose1d(b, p[0], p[1], Some(p[2]), &o)?])
    });
    check_vmap("conv_transpose1d", &t1, &[X, X, X], TRIALS * 2);
    let t2 = func("conv_t2d", &[t64(&[1, 2, 3, 4]), t64(&[2, 3, 2, 2])], |b, p| {
        let o = ConvTransposeOpts::new().stride([2, 1]).dilation([1, 2]);
        Ok(vec![conv::conv_transpose2d(b, p[0], p[1], None, &o)?])
    });
    check_vmap("conv_transpose2d", &t2, &[X, X], TRIALS * 2);
    let t3 = func("conv_t3d", &[t64(&[1, 2, 2, 3, 2]), t64(&[2, 1, 2, 2, 1])], |b, p| {
        let o = ConvTransposeOpts::new().stride(2);
        Ok(vec![conv::conv_transpose3d(b, p[0], p[1], None, &o)?])
    });
    check_vmap("conv_transpose3d", &t3, &[X, X], TRIALS);
}

#[test]
fn pools() {
    let f = func("pool1d", &[t64(&[2, 3, 7])], |b, p| {
        let k = PerDim::from(3);
        Ok(vec![
            pool::max_pool1d(b, p[0], &k, &PoolOpts::new().stride(2).padding(1).ceil_mode(true))?,
            pool::avg_pool1d(b, p[0], &k, &PoolOpts::new().stride(2).padding(1).count_include_pad(false))?,
            pool::smooth_max_pool1d(b, p[0], &k, 0.5, &PoolOpts::new().dilation(2))?,
        ])
    });
    check_vmap("pool1d", &f, &[X], TRIALS);
    let f2 = func("pool2d", &[t64(&[1, 2, 5, 6])], |b, p| {
        let k = PerDim::from([2, 3]);
        Ok(vec![
            pool::max_pool2d(b, p[0], &k, &PoolOpts::new().stride(1))?,
            pool::avg_pool2d(b, p[0], &k, &PoolOpts::new().divisor_override(4))?,
            pool::adaptive_avg_pool(b, p[0], &[2, 3])?,
            pool::adaptive_avg_pool(b, p[0], &[3, 4])?,
        ])
    });
    check_vmap("pool2d", &f2, &[X], TRIALS);
    let f3 = func("pool3d", &[t64(&[1, 1, 4, 3, 4])], |b, p| {
        let k = PerDim::from(2);
        Ok(vec![
            pool::max_pool3d(b, p[0], &k, &PoolOpts::new())?,
            pool::avg_pool3d(b, p[0], &k, &PoolOpts::new().stride(1))?,
            pool::smooth_max_pool3d(b, p[0], &k, 2.0, &PoolOpts::new())?,
        ])
    });
    check_vmap("pool3d", &f3, &[X], TRIALS);
}

#[test]
fn attention_causal_and_masked() {
    let f = func("sdpa", &[t64(&[2, 3, 4]), t64(&[2, 5, 4]), t64(&[2, 5, 3]), t64(&[3, 5])], |b, p| {
        let zero = b.zeros(&t64(&[3, 5]))?;
        let mask = b.compare(Compare::Gt, p[3], zero)?;
        Ok(vec![
            attention::scaled_dot_product_attention(b, p[0], p[1], p[2], true, None, None)?,
            attention::scaled_dot_product_attention(b, p[0], p[1], p[2], false, Some(mask), Some(0.7))?,
            attention::scaled_dot_product_attention(b, p[0], p[1], p[2], false, Some(p[3]), None)?,
        ])
    });
    check_vmap("sdpa", &f, &[X, X, X, X], TRIALS * 2);
    let d = 4;
    let w = t64(&[d, d]);
    let m = func("mha", &[t64(&[1, 3, d]), t64(&[1, 2, d]), w.clone(), w.clone(), w.clone(), w], |b, p| {
        Ok(vec![
            attention::multi_head_attention(b, p[0], p[1], p[1], p[2], p[3], p[4], p[5], 2, false, None)?,
            attention::multi_head_attention(b, p[0], p[0], p[0], p[2], p[3], p[4], p[5], 2, true, None)?,
        ])
    });
    check_vmap("mha", &m, &[X, X, X, X, X, X], TRIALS);
}

#[test]
fn losses() {
    let f = func("losses", &[t64(&[3, 4]), t64(&[3, 4]), i32t(&[3]), i32t(&[4])], |b, p| {
        let t = math::sigmoid(b, p[1])?;
        Ok(vec![
            loss::mse(b, p[0], p[1])?,
            loss::cross_entropy(b, p[0], p[2], 1)?,
            loss::cross_entropy(b, p[0], p[3], 0)?,
            loss::binary_cross_entropy_with_logits(b, p[0], t)?,
        ])
    });
    check_vmap("losses", &f, &[X, X, Gen::I(-1, 4), Gen::I(0, 2)], TRIALS * 2);
}

#[test]
fn embedding_and_one_hot() {
    let f = func("embed", &[t64(&[5, 3]), i32t(&[2, 4])], |b, p| {
        Ok(vec![
            embed::embedding(b, p[0], p[1], None)?,
            embed::embedding(b, p[0], p[1], Some(2))?,
            embed::one_hot(b, p[1], 5, DType::F64, 1)?,
            embed::one_hot(b, p[1], 4, DType::Bool, 2)?,
            embed::one_hot(b, p[1], 6, DType::I32, 0)?,
        ])
    });
    check_vmap("embed", &f, &[X, Gen::I(-1, 5)], TRIALS * 2);
}

#[test]
fn elementwise_math_and_broadcasting() {
    let f = func("math", &[t64(&[2, 3]), t64(&[3]), t64(&[2, 1])], |b, p| {
        let s = broadcast::binary(b, Binary::Add, p[0], p[1])?;
        let q = broadcast::binary(b, Binary::Mul, p[2], p[1])?;
        let c = broadcast::compare(b, Compare::Lt, p[1], p[2])?;
        let sel = broadcast::select(b, c, s, q)?;
        Ok(vec![
            sel,
            math::relu(b, p[0])?,
            math::leaky_relu(b, p[0], 0.2)?,
            math::elu(b, p[0], 0.7)?,
            math::gelu(b, p[0], false)?,
            math::gelu(b, p[0], true)?,
            math::silu(b, p[0])?,
            math::softplus(b, p[0])?,
            math::log_sigmoid(b, p[0])?,
            math::clamp(b, p[0], -0.5, 1.0)?,
            math::clamp_tensor(b, p[0], p[2], s)?,
            math::safe_log(b, p[0], 1e-6)?,
            math::square(b, p[1])?,
            math::reciprocal(b, p[2])?,
        ])
    });
    check_vmap("math", &f, &[X, X, POS], TRIALS * 2);
}

#[test]
fn shape_helpers() {
    let f = func("shape", &[t64(&[2, 3]), t64(&[2, 3]), t64(&[1, 3, 1]), i32t(&[4])], |b, p| {
        let flip = shape::slice_axis(b, p[0], 1, None, None, -1)?;
        Ok(vec![
            shape::concat(b, &[p[0], p[1], p[0]], 1)?,
            shape::stack(b, &[p[0], p[1]], 2)?,
            shape::expand_dims(b, p[0], &[0, 3])?,
            shape::squeeze(b, p[2], &[0, 2])?,
            shape::squeeze_all(b, p[2])?,
            shape::flatten(b, p[2], 0, 2)?,
            shape::swapaxes(b, p[0], 0, 1)?,
            shape::transpose(b, p[2], Some(&[2, 0, 1]))?,
            shape::reshape(b, p[1], &[3, -1])?,
            shape::broadcast_to(b, p[0], &[4, 2, 3])?,
            flip,
            shape::slice_axis(b, p[1], 1, Some(-1), Some(0), -2)?,
            shape::take(b, p[0], p[3], 1)?,
            shape::full_like(b, p[1], 2.5)?,
        ])
    });
    check_vmap("shape", &f, &[X, X, X, Gen::I(-1, 3)], TRIALS * 2);
    let w = func("where", &[t64(&[3]), t64(&[2, 3])], |b, p| {
        let zero = b.zeros(&t64(&[3]))?;
        let c = b.compare(Compare::Gt, p[0], zero)?;
        let ar = shape::arange(b, 0.0, 3.0, 1.0, DType::F64)?;
        Ok(vec![shape::where_(b, c, p[1], ar)?])
    });
    check_vmap("where", &w, &[X, X], TRIALS);
}

#[test]
fn random_distributions_batched_key_gives_independent_streams() {
    let f = func("random", &[i32t(&[2])], |b, p| {
        let ks = random::split_keys(b, p[0], 3)?;
        Ok(vec![
            random::normal(b, ks[0], &[2, 3], DType::F64)?,
            random::uniform(b, ks[1], &[4], DType::F64, -1.0, 2.0)?,
            random::bernoulli(b, ks[2], 0.3, &[5])?,
            random::split(b, p[0], 2)?,
        ])
    });
    check_vmap("random", &f, &[Gen::Key], TRIALS);
    // The keys differ per example, so the rows differ.
    let vf = vmap_func(&f, &[Some(0)], &[Some(0); 4], 2).unwrap();
    let keys = Tensor::from_vec(vec![2usize, 2], vec![0i32, 1, 0, 2]).unwrap();
    let out = run(&vf, &[keys]);
    assert_ne!(take(&out[0], 0, 0), take(&out[0], 0, 1), "independent streams per example");
}

#[test]
fn random_with_shared_key_is_the_same_for_every_example() {
    // An unbatched key: the draw is shared; only the batched argument varies.
    let f = func("shared_key", &[i32t(&[2]), t64(&[3])], |b, p| {
        let n = random::normal(b, p[0], &[3], DType::F64)?;
        Ok(vec![b.add(n, p[1])?, n])
    });
    let mut rng = common::Rng(11);
    for (ia, oa) in [([None, Some(0)], [Some(0), Some(1)]), ([None, Some(-1)], [Some(-1), Some(0)])] {
        check_vmap_axes("shared_key", &f, &[Gen::Key, X], &ia, &oa, 3, &mut rng);
    }
    let vf = vmap_func(&f, &[None, Some(0)], &[Some(0), Some(0)], 3).unwrap();
    let key = Tensor::vec1(&[0i32, 7]);
    let out = run(&vf, &[key, Tensor::from_fn(&t64(&[3, 3]), |i| i as f64)]);
    let rows: Vec<Tensor> = (0..3).map(|i| take(&out[1], 0, i)).collect();
    assert!(rows[0] == rows[1] && rows[1] == rows[2], "a shared key gives every example the same numbers");
}

#[test]
fn dropout_batched_and_shared_keys() {
    let f = func("dropout", &[i32t(&[2]), t64(&[3, 4])], |b, p| Ok(vec![dropout::dropout(b, p[0], p[1], 0.4, true)?]));
    // Batched key: per-example masks; unbatched key: one mask for all examples.
    check_vmap("dropout", &f, &[Gen::Key, X], TRIALS * 2);
    let vf = vmap_func(&f, &[None, Some(0)], &[Some(0)], 4).unwrap();
    let ones = Tensor::from_fn(&t64(&[4, 3, 4]), |_| 1.0);
    let out = run(&vf, &[Tensor::vec1(&[3i32, 9]), ones.clone()]).remove(0);
    let masks: Vec<Tensor> = (0..4).map(|i| take(&out, 0, i)).collect();
    assert!(masks.iter().all(|m| *m == masks[0]), "shared key: same mask for every example");
    let vk = vmap_func(&f, &[Some(0), Some(0)], &[Some(0)], 4).unwrap();
    let keys = Tensor::from_vec(vec![4usize, 2], vec![0i32, 1, 0, 2, 0, 3, 0, 4]).unwrap();
    let out = run(&vk, &[keys, ones]).remove(0);
    let masks: Vec<Tensor> = (0..4).map(|i| take(&out, 0, i)).collect();
    assert!(masks.iter().skip(1).any(|m| *m != masks[0]), "batched keys: masks differ between examples");
}

#[test]
fn nested_vmap_of_composites() {
    // vmap(vmap(softmax ∘ linear)) checked by the same checker one level up.
    let f = func("lin_softmax", &[t64(&[3]), t64(&[4, 3])], |b, p| {
        let y = linalg::linear(b, p[0], p[1], None)?;
        Ok(vec![reduce::softmax(b, y, 0)?])
    });
    let inner = vmap_func(&f, &[Some(0), None], &[Some(1)], 2).unwrap();
    check_vmap("nested", &inner, &[X, X], TRIALS);
}
