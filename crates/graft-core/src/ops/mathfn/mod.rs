//! Branch-free, auto-vectorisable math functions for f32 and f64: `exp`,
//! `tanh` (here), `log`, `log1p`, `expm1`, `logistic` (`log.rs`), `sin`,
//! `cos`, `tan` (`trig.rs`), `erf` (`erf.rs`), f32 `pow` (`pow.rs`), f32 `atan2` (`atan.rs`), and `erf_inv` (`erf_inv.rs`,
//! which reproduces XLA's rounding for JAX parity and, in f64, calls the
//! platform `log`). No libm otherwise.
//!
//! Why: libm's scalar calls are opaque to LLVM and do not vectorise, and
//! their algorithms differ between libms, so the native backend's C kernels
//! could not reproduce them. These functions are straight-line arithmetic
//! (plain loops over slices, no `unsafe`, no intrinsics, no data-dependent
//! branches: every "branch" is a select LLVM lowers to compare + blend), and
//! `src/kernel/prelude.h` implements the same operations in the same order in
//! C (`tests/all/mathfn_c.rs` checks every op bit for bit).
//!
//! Accuracy (max error against the correctly rounded result, measured in
//! `tests/all/mathfn.rs` on millions of points against std/libm, which asserts
//! these bounds):
//!
//! | function | f32 | f64 | notes |
//! |---|---|---|---|
//! | exp | 2 (1 measured) | 2 (1) | native f32 algorithm |
//! | tanh | 6 (5) | 2 | f32: one rational, no exp (see [`tanh_f32`]); checked on every f32 in `[0.25, 9.1]` |
//! | log | 1 (1) | 1 | f32: native (fdlibm's `logf`) |
//! | log1p | 1 (0) | 2 (1) | |
//! | expm1 | 1 (0) | 2 | |
//! | logistic | 2 (2) | 3 (2) | f32: native, on the f32 `exp` |
//! | sin, cos | 1 (0) | 1 | for `\|x\| <= 2^28`; NaN beyond |
//! | tan | 1 (0) | 3 (2) | for `\|x\| <= 2^28`; NaN beyond |
//! | erf | 1 (0) | 20 (16) | f64: absolute error < 2e-15 where erf is near ±1 |
//! | pow | 1 (1) | std | f32: `exp(y ln\|x\|)` in f64, rounded once (see `pow.rs`); f64 calls std |
//! | atan2 | 1 | std | f32: a Taylor series in f64 after octant reduction, rounded once (see `atan.rs`); f64 calls std |
//! | erf_inv | XLA's | XLA's | bitwise JAX on CPU, not a graft bound (see `erf_inv.rs`) |
//!
//! The f32 versions of log1p, expm1, sin, cos, tan and erf
//! evaluate the f64 algorithm on the widened input and round once (f32
//! subnormals are normal in f64; double rounding makes the bound 1 ulp
//! rather than 0.5).
//!
//! Specials (all functions): NaN in gives the same NaN (bits) out; results
//! in the subnormal range are rounded once; signed zeros are kept where the
//! function is odd (`sin`, `tan`, `tanh`, `erf`, `log1p`, `expm1` of `-0` is
//! `-0`). `exp(NaN) = NaN`, `exp(+inf) = +inf`, `exp(-inf) = +0`,
//! overflow gives `+inf`. `tanh(±inf) = ±1`. `log(±0) = -inf`,
//! `log(x < 0) = NaN`, `log(+inf) = +inf`; `log1p(-1) = -inf`,
//! `log1p(x < -1) = NaN`; `expm1(-inf) = -1`, `expm1(+inf) = +inf`;
//! `logistic(±inf) = 1 / 0`; `sin`, `cos`, `tan` of `±inf` or of
//! `|x| > 2^28` ([`TRIG_LIMIT`]) are NaN; `erf(±inf) = ±1`.
//!
//! Deterministic: Rust never contracts `a*b+c` into an FMA, and where an
//! algorithm wants a fused multiply-add it says so (`mul_add`, which is
//! correctly rounded: one hardware instruction where the CPU has FMA,
//! glibc's exact software `fma` where it has not), so the result is the same
//! bits whatever the target features or vector width, and the scalar
//! functions equal the slice functions element for element.
//!
//! Fused multiply-adds: `exp` (f32 and f64, so also f64 `tanh`, `logistic`
//! and the f32 functions evaluated in f64 that call it) and `expm1` reduce
//! the argument and evaluate their polynomials by Horner's rule in FMAs, and
//! f32 `tanh` evaluates its rational's two polynomials the same way: about
//! a third fewer vector operations, and each step rounds once instead of
//! twice. The C prelude uses the CPU's FMA instructions for them (see
//! `g__fma32` there), so the native kernels and the interpreter still agree
//! bit for bit.
//!
//! Method of `exp`/`tanh`: `exp` uses Cody–Waite range reduction
//! `x = n ln2 + r`, `|r| <= ln2/2`, with `ln2` split into a hi part (exact
//! products with `n`) and a lo part; `e^r` is a polynomial (degree 7 for f32
//! (Cephes `expf`), degree 13 Taylor for f64); `2^n` is built from exponent
//! bits in two halves so that subnormal results and the overflow boundary
//! round exactly once. Rounding `x log2(e)` to an integer uses the
//! `1.5 * 2^p` magic-constant trick (the integer then sits in the low
//! mantissa bits), so no `round` call is needed. f64 `tanh(a)` for
//! `a = |x| < 0.625` is an odd rational (Cephes), else
//! `1 - 2 / (e^(2a) + 1)`; both are computed and the right one selected.
//! f32 `tanh` is a single rational `a P(a^2) / Q(a^2)` (degrees 5 and 4 in
//! `a^2`, fitted for graft) on `a = min(|x|, 9.01)`, capped at 1: no `exp`,
//! one division, about 2.3x cheaper than the two-branch form. Its fit error
//! is < 0.1 ulp; the bound comes from the f32 evaluation itself (the Horner
//! steps (FMAs), `a * P` and the division each round, up to 1 ulp of
//! relative error each where tanh is just below 1). Over every f32 in
//! `[0.25, 9.1]` the maximum is 5 ulp (6 before the polynomials used FMA),
//! attained near `|x| = 4`; below `|x| = 0.5` it is at most 3.
//! The other functions' methods are described in their files.

// Coefficients are quoted as published (Cephes, fdlibm); they round to the
// intended binary values.
#![allow(clippy::excessive_precision)]
// `max(..).min(..)` rather than `clamp`: it maps NaN to a bound (keeping the
// integer exponent arithmetic in range); NaN is restored at the end.
#![allow(clippy::manual_clamp)]

/// `e^x` for one f32 (the element function of [`exp_f32_slice`]).
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // 355/512: n * LN2_HI is exact for |n| < 2^15.
    const LN2_HI: f32 = 0.693_359_375;
    const LN2_LO: f32 = -2.121_944_4e-4;
    const MAGIC: f32 = 12_582_912.0; // 1.5 * 2^23

    // Past these bounds the result is +inf / +0 anyway; clamping keeps `n`
    // small enough for the exponent arithmetic below (NaN clamps to the
    // lower bound and is restored at the end).
    let xc = x.max(-110.0).min(90.0);
    let t = xc.mul_add(LOG2E, MAGIC);
    let n = (t.to_bits() as i32).wrapping_sub(MAGIC.to_bits() as i32);
    let nf = t - MAGIC;
    let r = nf.mul_add(-LN2_LO, nf.mul_add(-LN2_HI, xc));
    let z = r * r;
    let p = 1.987_569_2e-4f32.mul_add(r, 1.398_199_9e-3);
    let p = p.mul_add(r, 8.333_452e-3);
    let p = p.mul_add(r, 4.166_579_6e-2);
    let p = p.mul_add(r, 1.666_666_5e-1);
    let p = p.mul_add(r, 5.000_000_1e-1);
    let e = p.mul_add(z, r) + 1.0;
    // 2^n = 2^n1 * 2^n2 with both halves normal (n in [-159, 130]).
    let n1 = ((n + 256) as u32 >> 1) as i32 - 128;
    let n2 = n - n1;
    let s1 = f32::from_bits(((n1 + 127) as u32) << 23);
    let s2 = f32::from_bits(((n2 + 127) as u32) << 23);
    let y = e * s1 * s2;
    if x.is_nan() {
        x
    } else {
        y
    }
}

/// The shared range reduction of `exp_f64` and `expm1_f64`: for `xc`
/// already clamped, `xc = n ln2 + r` with `|r| <= ln2/2`; returns `(n, r)`.
#[inline(always)]
pub(crate) fn exp_reduce_f64(xc: f64) -> (i64, f64) {
    use log::{LN2_HI, LN2_LO};
    const LOG2E: f64 = std::f64::consts::LOG2_E;
    const MAGIC: f64 = 6_755_399_441_055_744.0; // 1.5 * 2^52
    let t = xc.mul_add(LOG2E, MAGIC);
    let n = (t.to_bits() as i64).wrapping_sub(MAGIC.to_bits() as i64);
    let nf = t - MAGIC;
    (n, nf.mul_add(-LN2_LO, nf.mul_add(-LN2_HI, xc)))
}

/// `e^r - 1` for the reduced argument `|r| <= ln2/2` of `exp_f64` and
/// `expm1_f64`: `r + r^2 P(r)` with `P` the Taylor polynomial to degree 13
/// (truncation error < 1e-17) by Horner's rule in fused multiply-adds; one
/// evaluation order shared by both (the C prelude mirrors it).
#[inline(always)]
pub(crate) fn expm1_reduced_f64(r: f64) -> f64 {
    let p = (1.0f64 / 6_227_020_800.0).mul_add(r, 1.0 / 479_001_600.0);
    let p = p.mul_add(r, 1.0 / 39_916_800.0);
    let p = p.mul_add(r, 1.0 / 3_628_800.0);
    let p = p.mul_add(r, 1.0 / 362_880.0);
    let p = p.mul_add(r, 1.0 / 40_320.0);
    let p = p.mul_add(r, 1.0 / 5_040.0);
    let p = p.mul_add(r, 1.0 / 720.0);
    let p = p.mul_add(r, 1.0 / 120.0);
    let p = p.mul_add(r, 1.0 / 24.0);
    let p = p.mul_add(r, 1.0 / 6.0);
    let p = p.mul_add(r, 0.5);
    p.mul_add(r * r, r)
}

/// `e^x` for one f64 (the element function of [`exp_f64_slice`]).
#[inline(always)]
pub fn exp_f64(x: f64) -> f64 {
    let (n, r) = exp_reduce_f64(x.max(-760.0).min(710.0));
    let e = 1.0 + expm1_reduced_f64(r);
    // 2^n = 2^n1 * 2^n2 with both halves normal (n in [-1097, 1025]).
    // The logical shift of a biased value is floor(n / 2) without an
    // arithmetic 64-bit shift (which SSE2/AVX2 lack).
    let n1 = ((n + 2048) as u64 >> 1) as i64 - 1024;
    let n2 = n - n1;
    let s1 = f64::from_bits(((n1 + 1023) as u64) << 52);
    let s2 = f64::from_bits(((n2 + 1023) as u64) << 52);
    let y = e * s1 * s2;
    if x.is_nan() {
        x
    } else {
        y
    }
}

/// `|x|` beyond which f32 `tanh` is computed as `tanh(TANH_F32_CLAMP)`:
/// `tanh(x)` rounds to 1 in f32 from x = 9.0109 on (so returning 1 from
/// 9.01 on is off by at most half an ulp), and the rational of [`tanh_f32`]
/// evaluates to exactly 1.0 here (at 9.02, just past it, the FMA evaluation
/// gives 1 - 2^-24).
pub const TANH_F32_CLAMP: f32 = 9.01;

/// `tanh(x)` for one f32 (the element function of [`tanh_f32_slice`]).
///
/// `a = min(|x|, 9.01)`, `z = a^2`, `tanh(a) ~ a P(z) / Q(z)` with `P` of
/// degree 5 and `Q` of degree 4 (`P(0) = Q(0) = 1`, so tiny `a` give `a`
/// exactly), fitted for minimax relative error on `[0, 9.02]` (fit error
/// < 0.1 ulp; the rest is f32 rounding), capped at 1, sign copied from `x`.
#[inline(always)]
pub fn tanh_f32(x: f32) -> f32 {
    const SIGN: u32 = 1 << 31;
    // NaN gives the clamp (restored at the end); +-inf gives exactly +-1.
    let a = f32::from_bits(x.to_bits() & !SIGN).min(TANH_F32_CLAMP);
    let z = a * a;
    let p = TP5.mul_add(z, TP4).mul_add(z, TP3).mul_add(z, TP2).mul_add(z, TP1).mul_add(z, 1.0);
    let q = TQ4.mul_add(z, TQ3).mul_add(z, TQ2).mul_add(z, TQ1).mul_add(z, 1.0);
    // Rounding can put the quotient one ulp above 1 near the clamp.
    let r = (a * p / q).min(1.0);
    let y = f32::from_bits(r.to_bits() | (x.to_bits() & SIGN));
    // NaN is returned as given: a NaN produced by the arithmetic would have
    // a payload that depends on operand order, which differs between the
    // vector body and the scalar tail of a loop.
    if x.is_nan() {
        x
    } else {
        y
    }
}

// Coefficients of tanh_f32 (fitted for graft; see the function docs).
const TP1: f32 = 1.368_096_32e-1;
const TP2: f32 = 3.869_612_24e-3;
const TP3: f32 = 2.803_160_71e-5;
const TP4: f32 = 3.063_584_23e-8;
const TP5: f32 = -1.223_448_25e-11;
const TQ1: f32 = 4.701_429_61e-1;
const TQ2: f32 = 2.725_061_4e-2;
const TQ3: f32 = 3.940_833_27e-4;
const TQ4: f32 = 1.288_957_72e-6;

/// `tanh(x)` for one f64 (the element function of [`tanh_f64_slice`]).
#[inline(always)]
pub fn tanh_f64(x: f64) -> f64 {
    const SIGN: u64 = 1 << 63;
    let a = f64::from_bits(x.to_bits() & !SIGN);
    // Small |x|: Cephes tanh rational x + x^3 P(x^2) / Q(x^2).
    let z = a * a;
    let p =
        (-9.643_991_794_250_522_386_28e-1 * z - 9.928_772_310_019_185_865_64e1) * z - 1.614_687_684_417_084_479_52e3;
    let q = ((z + 1.128_116_784_916_329_314_02e2) * z + 2.235_488_390_601_004_485_83e3) * z
        + 4.844_063_053_251_254_860_48e3;
    let small = a + a * z * (p / q);
    let large = 1.0 - 2.0 / (exp_f64(2.0 * a) + 1.0);
    let r = if a < 0.625 { small } else { large };
    let y = f64::from_bits(r.to_bits() | (x.to_bits() & SIGN));
    // NaN is returned as given: a NaN produced by the arithmetic would have
    // a payload that depends on operand order, which differs between the
    // vector body and the scalar tail of a loop.
    if x.is_nan() {
        x
    } else {
        y
    }
}

mod atan;
mod erf;
mod erf_inv;
mod log;
mod pow;
mod trig;

pub use atan::{atan2_f32, atan2_f32_slice};
pub use erf::{erf_f32, erf_f32_slice, erf_f64, erf_f64_slice};
pub use erf_inv::{erf_inv_f32, erf_inv_f32_slice, erf_inv_f64, erf_inv_f64_slice};
pub use log::{expm1_f64, log1p_f64, log_f32, log_f64, logistic_f32, logistic_f64};
pub use pow::{pow_f32, pow_f32_slice};
pub use trig::{cos_f64, sin_f64, tan_f64, TRIG_LIMIT};

macro_rules! via_f64 {
    ($($name:ident => $f:ident),* $(,)?) => {$(
        #[doc = concat!("f32 version of [`", stringify!($f), "`]: evaluated in f64, rounded once (NaN in gives the same NaN out).")]
        #[inline(always)]
        pub fn $name(x: f32) -> f32 {
            let y = $f(x as f64) as f32;
            if x.is_nan() {
                x
            } else {
                y
            }
        }
    )*};
}

via_f64! {
    log1p_f32 => log1p_f64,
    expm1_f32 => expm1_f64,
    sin_f32 => sin_f64,
    cos_f32 => cos_f64,
    tan_f32 => tan_f64,
}

macro_rules! slice_fn {
    ($($name:ident => $f:ident: $t:ty),* $(,)?) => {$(
        #[doc = concat!("`o[i] = ", stringify!($f), "(a[i])` over `min(a.len(), o.len())` elements (vectorised).")]
        #[inline(always)]
        pub fn $name(a: &[$t], o: &mut [$t]) {
            for (o, &x) in o.iter_mut().zip(a) {
                *o = $f(x);
            }
        }
    )*};
}

slice_fn! {
    exp_f32_slice => exp_f32: f32,
    exp_f64_slice => exp_f64: f64,
    tanh_f32_slice => tanh_f32: f32,
    tanh_f64_slice => tanh_f64: f64,
    log_f32_slice => log_f32: f32,
    log_f64_slice => log_f64: f64,
    log1p_f32_slice => log1p_f32: f32,
    log1p_f64_slice => log1p_f64: f64,
    expm1_f32_slice => expm1_f32: f32,
    expm1_f64_slice => expm1_f64: f64,
    logistic_f32_slice => logistic_f32: f32,
    logistic_f64_slice => logistic_f64: f64,
    sin_f32_slice => sin_f32: f32,
    sin_f64_slice => sin_f64: f64,
    cos_f32_slice => cos_f32: f32,
    cos_f64_slice => cos_f64: f64,
    tan_f32_slice => tan_f32: f32,
    tan_f64_slice => tan_f64: f64,
}

macro_rules! slice_math {
    ($($one:ident, $slice:ident, $what:literal;)*) => {
        /// Float types with vectorised slice versions of the math functions
        /// (the unary kernels' block bodies). Each `*1` function is bitwise
        /// equal to an element of the matching `*_slice` function.
        pub trait SliceMath: Sized {
            $(
                #[doc = concat!("`", $what, "` of one element.")]
                fn $one(self) -> Self;
                #[doc = concat!("`o[i] = ", $what, "` of `a[i]`.")]
                fn $slice(a: &[Self], o: &mut [Self]);
            )*
        }
    };
}

slice_math! {
    exp1, exp_slice, "e^x";
    tanh1, tanh_slice, "tanh(x)";
    log1, log_slice, "ln(x)";
    log1p1, log1p_slice, "ln(1 + x)";
    expm11, expm1_slice, "e^x - 1";
    logistic1, logistic_slice, "1 / (1 + e^-x)";
    sin1, sin_slice, "sin(x)";
    cos1, cos_slice, "cos(x)";
    tan1, tan_slice, "tan(x)";
    erf1, erf_slice, "erf(x)";
    erf_inv1, erf_inv_slice, "erf^-1(x)";
}

macro_rules! impl_slice_math {
    ($t:ty: $($one:ident, $slice:ident => $f:ident, $fs:ident;)*) => {
        impl SliceMath for $t {
            $(
                #[inline(always)]
                fn $one(self) -> $t {
                    $f(self)
                }
                #[inline(always)]
                fn $slice(a: &[$t], o: &mut [$t]) {
                    $fs(a, o)
                }
            )*
        }
    };
}

impl_slice_math! { f32:
    exp1, exp_slice => exp_f32, exp_f32_slice;
    tanh1, tanh_slice => tanh_f32, tanh_f32_slice;
    log1, log_slice => log_f32, log_f32_slice;
    log1p1, log1p_slice => log1p_f32, log1p_f32_slice;
    expm11, expm1_slice => expm1_f32, expm1_f32_slice;
    logistic1, logistic_slice => logistic_f32, logistic_f32_slice;
    sin1, sin_slice => sin_f32, sin_f32_slice;
    cos1, cos_slice => cos_f32, cos_f32_slice;
    tan1, tan_slice => tan_f32, tan_f32_slice;
    erf1, erf_slice => erf_f32, erf_f32_slice;
    erf_inv1, erf_inv_slice => erf_inv_f32, erf_inv_f32_slice;
}

impl_slice_math! { f64:
    exp1, exp_slice => exp_f64, exp_f64_slice;
    tanh1, tanh_slice => tanh_f64, tanh_f64_slice;
    log1, log_slice => log_f64, log_f64_slice;
    log1p1, log1p_slice => log1p_f64, log1p_f64_slice;
    expm11, expm1_slice => expm1_f64, expm1_f64_slice;
    logistic1, logistic_slice => logistic_f64, logistic_f64_slice;
    sin1, sin_slice => sin_f64, sin_f64_slice;
    cos1, cos_slice => cos_f64, cos_f64_slice;
    tan1, tan_slice => tan_f64, tan_f64_slice;
    erf1, erf_slice => erf_f64, erf_f64_slice;
    erf_inv1, erf_inv_slice => erf_inv_f64, erf_inv_f64_slice;
}
