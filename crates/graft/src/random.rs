//! Explicit-key random numbers in a trace (JAX style): make a key from a
//! seed, split it into independent keys, and draw with a key. The same key
//! always gives the same numbers. Keys are `i32[2]` tensors.

use crate::trace::Tr;
use graft_core::composite::random;
use graft_core::DType;

/// A key from a seed fixed at trace time, created in `ctx`'s trace.
pub fn key(ctx: &Tr, seed: i64) -> Tr {
    ctx.lift(|b, _| random::key(b, seed))
}

/// A key from a traced rank-0 i32/i64 seed.
pub fn key_from(seed: &Tr) -> Tr {
    seed.lift(random::key_from)
}

/// `n` independent child keys.
pub fn split(key: &Tr, n: usize) -> Vec<Tr> {
    key.lift_many(&[], n, |b, v| random::split_keys(b, v[0], n))
}

/// `n` child keys as one `i32[n, 2]` tensor (`jax.random.split`).
pub fn split_array(key: &Tr, n: usize) -> Tr {
    key.lift(|b, k| random::split(b, k, n))
}

/// Floats uniform in `[lo, hi)`.
pub fn uniform(key: &Tr, shape: &[usize], dtype: DType, lo: f64, hi: f64) -> Tr {
    key.lift(|b, k| random::uniform(b, k, shape, dtype, lo, hi))
}

/// Standard normal floats as `jax.random.normal` draws them (`sqrt(2) erf_inv(u)`).
pub fn normal(key: &Tr, shape: &[usize], dtype: DType) -> Tr {
    key.lift(|b, k| random::normal(b, k, shape, dtype))
}

/// Bools, `true` with probability `p`.
pub fn bernoulli(key: &Tr, p: f64, shape: &[usize]) -> Tr {
    key.lift(|b, k| random::bernoulli(b, k, p, shape))
}

/// Integers uniform in `[lo, hi)` (i32 or i64), `jax.random.randint`'s bits for i32 (see
/// `graft_core::composite::random::randint`).
pub fn randint(key: &Tr, shape: &[usize], lo: i64, hi: i64, dtype: DType) -> Tr {
    key.lift(|b, k| random::randint(b, k, shape, lo, hi, dtype))
}

/// One i32 index per row of `logits` along `axis` (negative counts from
/// the end), drawn with probabilities `softmax(logits)`.
pub fn categorical(key: &Tr, logits: &Tr, axis: isize) -> Tr {
    key.lift2(logits, |b, k, l| {
        let axis = crate::trace::Axes::resolve_axis("random.categorical", axis, b.ty(l)?.rank())?;
        random::categorical(b, k, l, axis, DType::I32)
    })
}
