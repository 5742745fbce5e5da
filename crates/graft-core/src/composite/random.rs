//! Random-number composites over the counter-based primitives
//! (`random_split`, `random_uniform`): key creation from a seed, splitting,
//! uniform draws in `[lo, hi)`, standard normals (`sqrt(2) erf_inv(u)`, as JAX), Bernoulli,
//! integers in `[lo, hi)` and categorical draws (the Gumbel-max trick).
//!
//! Keys are `i32[2]` tensors (two u32 words as bit patterns), as the
//! primitives expect. Randomness is explicit and functional like JAX: the
//! same key always gives the same numbers, and independent streams come from
//! [`split`]ting keys, never from hidden state.

use super::broadcast;
use crate::dtype::DType;
use crate::error::IrError;
use crate::ir::{Builder, Value};
use crate::ops::binary::{Binary, Compare};
use crate::tensor::Tensor;
use crate::types::TensorType;

/// The key words `(k0, k1)` of a 64-bit seed: the high and low 32 bits
/// (JAX's `PRNGKey(seed)` with 64-bit seeds; for `0 <= seed < 2^32` this is
/// `(0, seed)`, the same as JAX in its default 32-bit mode).
pub fn key_words(seed: i64) -> [i32; 2] {
    let s = seed as u64;
    [(s >> 32) as u32 as i32, s as u32 as i32]
}

/// A key from a seed known at trace time (a constant `i32[2]`).
pub fn key(b: &mut Builder, seed: i64) -> Result<Value, IrError> {
    let w = key_words(seed);
    let t = Tensor::from_vec(vec![2], w.to_vec()).map_err(|e| IrError::invalid("random.key", e.to_string()))?;
    b.constant(t)
}

/// A key from a traced rank-0 integer seed. An `i32` seed gives
/// `(0, seed)` (its bit pattern); an `i64` seed gives its high and low
/// 32-bit words, exactly like [`key`] for the same number.
pub fn key_from(b: &mut Builder, seed: Value) -> Result<Value, IrError> {
    let t = b.ty(seed)?.clone();
    if t.rank() != 0 || !t.dtype.is_int() {
        return Err(IrError::invalid("random.key_from", format!("the seed must be a rank-0 i32 or i64, got {t}")));
    }
    let (hi, lo) = if t.dtype == DType::I32 {
        (b.scalar(0.0, DType::I32)?, seed)
    } else {
        // lo: the low word (an i64 -> i32 convert keeps the low bits).
        // hi: floor(seed / 2^32), exact because seed - (seed & 0xFFFFFFFF)
        // is a multiple of 2^32; its low 32 bits are the high word.
        let lo = b.convert(seed, DType::I32)?;
        let mask = b.scalar(4294967295.0, DType::I64)?;
        let low_u = b.and(seed, mask)?;
        let rest = b.sub(seed, low_u)?;
        let two32 = b.scalar(4294967296.0, DType::I64)?;
        let hi64 = b.div(rest, two32)?;
        (b.convert(hi64, DType::I32)?, lo)
    };
    let hi = b.reshape(hi, &[1])?;
    let lo = b.reshape(lo, &[1])?;
    b.concatenate(&[hi, lo], 0)
}

fn check_key(b: &Builder, op: &str, key: Value) -> Result<(), IrError> {
    let t = b.ty(key)?;
    if *t != TensorType::new(DType::I32, vec![2]) {
        return Err(IrError::invalid(op, format!("expected a key of type i32[2], got {t}")));
    }
    Ok(())
}

/// `n` child keys as one `i32[n, 2]` tensor (`jax.random.split`).
pub fn split(b: &mut Builder, key: Value, n: usize) -> Result<Value, IrError> {
    check_key(b, "random.split", key)?;
    b.random_split(key, n)
}

/// A new key from `key` and a rank-0 integer `data` (`jax.random.fold_in`,
/// bit for bit): an i32 `data` counts by its bit pattern as a u32 (so `-1`
/// is `2^32 - 1`, as JAX gives for an int32 `-1`), an i64 by its low 32 bits
/// (as `jnp.uint32` keeps them). Independent of the keys [`split`] gives
/// only in the sense JAX's are: `fold_in(k, d)` equals child `d` of
/// `split(k, n)` for `n > d` (both hash the counter `(0, d)`).
pub fn fold_in(b: &mut Builder, key: Value, data: Value) -> Result<Value, IrError> {
    check_key(b, "random.fold_in", key)?;
    let t = b.ty(data)?.clone();
    if t.rank() != 0 || !t.dtype.is_int() {
        return Err(IrError::invalid("random.fold_in", format!("the data must be a rank-0 i32 or i64, got {t}")));
    }
    // An i64 -> i32 convert keeps the low 32 bits.
    let d = if t.dtype == DType::I32 { data } else { b.convert(data, DType::I32)? };
    b.random_fold_in(key, d)
}

/// `n` child keys as separate `i32[2]` values.
pub fn split_keys(b: &mut Builder, key: Value, n: usize) -> Result<Vec<Value>, IrError> {
    let all = split(b, key, n)?;
    (0..n)
        .map(|i| {
            let row = b.slice(all, &[i, 0], &[i + 1, 2], &[1, 1])?;
            b.reshape(row, &[2])
        })
        .collect()
}

fn check_float(op: &str, dtype: DType) -> Result<(), IrError> {
    if dtype.is_float() {
        Ok(())
    } else {
        Err(IrError::invalid(op, format!("expected a floating-point dtype (f32 or f64), got {dtype}")))
    }
}

/// Floats uniform in `[lo, hi)`, bit for bit `jax.random.uniform(key,
/// shape, dtype, lo, hi)` on CPU: `lo` and `hi` rounded to the dtype, their
/// difference rounded in the dtype, `u (hi - lo) + lo` for `u` uniform in
/// `[0, 1)` as one fused multiply-add (the `fma` primitive: XLA contracts
/// this product and sum, and a separate multiply and add would differ in the
/// last bit), then `max(., lo)` so rounding never goes below `lo`.
/// Requires finite `lo <= hi`.
pub fn uniform(b: &mut Builder, key: Value, shape: &[usize], dtype: DType, lo: f64, hi: f64) -> Result<Value, IrError> {
    check_key(b, "random.uniform", key)?;
    check_float("random.uniform", dtype)?;
    if !(lo.is_finite() && hi.is_finite() && lo <= hi) {
        return Err(IrError::invalid("random.uniform", format!("need finite lo <= hi, got lo={lo}, hi={hi}")));
    }
    let u = b.random_uniform(key, shape, dtype)?;
    if lo == 0.0 && hi == 1.0 {
        return Ok(u);
    }
    // The bounds and their difference in the dtype, as JAX converts and
    // subtracts them (every f32 is an f64, so these scalars are exact).
    let (lo, span) = match dtype {
        DType::F32 => {
            let (l, h) = (lo as f32, hi as f32);
            (f64::from(l), f64::from(h - l))
        }
        _ => (lo, hi - lo),
    };
    let span = b.scalar(span, dtype)?;
    let lo_v = b.scalar(lo, dtype)?;
    let y = broadcast::fma(b, u, span, lo_v)?;
    broadcast::binary(b, Binary::Max, y, lo_v)
}

/// Standard normal samples as `jax.random.normal` draws them, bit for bit
/// (f32 and f64, against JAX on CPU): `sqrt(2) erfinv(u)` for `u` uniform
/// in `(-1, 1)` (`uniform` from the float after -1 up to 1, so `u` is never
/// -1 and every sample finite), with [`erf_inv`](super::math::erf_inv),
/// which reproduces XLA's rounding. The uniforms are JAX's bits ([`uniform`]).
pub fn normal(b: &mut Builder, key: Value, shape: &[usize], dtype: DType) -> Result<Value, IrError> {
    check_key(b, "random.normal", key)?;
    check_float("random.normal", dtype)?;
    // nextafter(-1, 0) in the dtype.
    let lo = if dtype == DType::F32 { -1.0 + f64::from(f32::EPSILON) / 2.0 } else { -1.0 + f64::EPSILON / 2.0 };
    let u = uniform(b, key, shape, dtype, lo, 1.0)?;
    let z = super::math::erf_inv(b, u)?;
    let s = b.scalar(std::f64::consts::SQRT_2, dtype)?;
    broadcast::binary(b, Binary::Mul, s, z)
}

/// Bools that are `true` with probability `p` (`jax.random.bernoulli`):
/// `u < p` for `u` uniform in `[0, 1)` drawn in f64, so `p = 0` is never
/// and `p = 1` always true. Requires `0 <= p <= 1`.
pub fn bernoulli(b: &mut Builder, key: Value, p: f64, shape: &[usize]) -> Result<Value, IrError> {
    check_key(b, "random.bernoulli", key)?;
    if !(0.0..=1.0).contains(&p) {
        return Err(IrError::invalid("random.bernoulli", format!("p must be in [0, 1], got {p}")));
    }
    let u = b.random_uniform(key, shape, DType::F64)?;
    let pv = b.scalar(p, DType::F64)?;
    broadcast::compare(b, Compare::Lt, u, pv)
}

/// Integers uniform in `[lo, hi)`, bit for bit `jax.random.randint(key,
/// shape, lo, hi, jnp.int32)`: two streams of 32 random bits from the two
/// halves of `split(key)`, `hb` and `lb`, combined as JAX does in uint32
/// arithmetic (wrapping), here emulated in i64 with 32-bit masks:
/// `m = (2^16 mod s)^2 mod 2^32 mod s`, `off = (((hb mod s) m mod 2^32) +
/// (lb mod s)) mod 2^32 mod s`, the result `lo + off` for the span
/// `s = hi - lo`. An i64 result holds the same numbers (JAX's int64 stream
/// draws 64-bit words instead, so it differs from this). Requires
/// `lo < hi`, both in the dtype's range, and `hi - lo < 2^32`.
pub fn randint(b: &mut Builder, key: Value, shape: &[usize], lo: i64, hi: i64, dtype: DType) -> Result<Value, IrError> {
    check_key(b, "random.randint", key)?;
    if !matches!(dtype, DType::I32 | DType::I64) {
        return Err(IrError::invalid("random.randint", format!("dtype must be i32 or i64, got {dtype}")));
    }
    let (min, max) = if dtype == DType::I32 { (i32::MIN as i64, i32::MAX as i64) } else { (i64::MIN, i64::MAX) };
    let span = (hi as i128) - (lo as i128);
    if span <= 0 || span >= 1i128 << 32 || lo < min || hi - 1 > max {
        return Err(IrError::invalid(
            "random.randint",
            format!("need lo < hi within {dtype} and hi - lo < 2^32, got lo={lo}, hi={hi}"),
        ));
    }
    let span = span as i64;
    // JAX's multiplier, computed on the host with the same wrapping.
    let half = (1i64 << 16) % span;
    let mult = ((half * half) & 0xFFFF_FFFF) % span;
    let keys = split_keys(b, key, 2)?;
    let mask = b.scalar(4294967295.0, DType::I64)?;
    let s = b.scalar(span as f64, DType::I64)?;
    let unsigned_rem = |b: &mut Builder, k: Value| -> Result<Value, IrError> {
        let bits = b.random_bits(k, shape)?;
        let wide = b.convert(bits, DType::I64)?;
        // The bit pattern as an unsigned 32-bit number.
        let u = broadcast::binary(b, Binary::And, wide, mask)?;
        broadcast::binary(b, Binary::Rem, u, s)
    };
    let high = unsigned_rem(b, keys[0])?;
    let low = unsigned_rem(b, keys[1])?;
    // high < 2^32 and mult < 2^16 (it is 0 once the span passes 2^16), so
    // the product fits in i64 before the 32-bit wrap.
    let m = b.scalar(mult as f64, DType::I64)?;
    let t = broadcast::binary(b, Binary::Mul, high, m)?;
    let t = broadcast::binary(b, Binary::And, t, mask)?;
    let t = broadcast::binary(b, Binary::Add, t, low)?;
    let t = broadcast::binary(b, Binary::And, t, mask)?;
    let off = broadcast::binary(b, Binary::Rem, t, s)?;
    let lo_v = b.scalar(lo as f64, DType::I64)?;
    let y = broadcast::binary(b, Binary::Add, off, lo_v)?;
    if dtype == DType::I64 {
        Ok(y)
    } else {
        b.convert(y, DType::I32)
    }
}

/// One draw per row of `logits` (unnormalised log-probabilities) along
/// `axis`, as indices (`jax.random.categorical`'s distribution): the
/// Gumbel-max trick, `argmax(logits + g)` with `g = -log(-log(u))` for `u`
/// uniform in `[tiny, 1)` (the smallest normal float up, so `g` is finite).
/// A `-inf` logit is never drawn. The result has `logits`' shape without
/// `axis`.
pub fn categorical(
    b: &mut Builder,
    key: Value,
    logits: Value,
    axis: usize,
    index_dtype: DType,
) -> Result<Value, IrError> {
    check_key(b, "random.categorical", key)?;
    let t = b.ty(logits)?.clone();
    check_float("random.categorical", t.dtype)?;
    if axis >= t.rank() {
        return Err(IrError::invalid("random.categorical", format!("axis {axis} is out of range for {t}")));
    }
    let tiny = if t.dtype == DType::F32 { f32::MIN_POSITIVE as f64 } else { f64::MIN_POSITIVE };
    let u = uniform(b, key, &t.shape, t.dtype, tiny, 1.0)?;
    let l1 = b.log(u)?;
    let n1 = b.neg(l1)?;
    let l2 = b.log(n1)?;
    let g = b.neg(l2)?;
    let z = b.add(logits, g)?;
    super::reduce::argmax(b, z, axis, false, index_dtype)
}

/// A random permutation of `0..n` (i32) from `key`, like
/// `jax.random.permutation(key, n)`: the stable sorting permutation of `n`
/// uniform f64 draws, so every permutation is a valid one whatever the draws.
pub fn permutation(b: &mut Builder, key: Value, n: usize) -> Result<Value, IrError> {
    check_key(b, "random.permutation", key)?;
    let u = uniform(b, key, &[n], DType::F64, 0.0, 1.0)?;
    super::sort::argsort(b, u, 0)
}
