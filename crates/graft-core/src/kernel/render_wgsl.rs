//! Renders kernels to WGSL compute shaders (the GPU backend, `graft-gpu`).
//!
//! The sibling of `render_c`: the same kernel IR, another target. One
//! kernel becomes one shader module with one entry point, `main`:
//!
//! - **Elementwise kernels** run one invocation per point (workgroups of
//!   [`WG`] invocations, the grid split over x and y when it exceeds the
//!   65535 workgroups one dimension allows). Index expressions are address
//!   arithmetic on `i32` (a broadcast is a stride of 0, a transpose a
//!   permuted stride vector, a slice an offset), as on the CPU.
//! - **Row kernels** (a `Reduce` or `Map` in the outer body) run one
//!   workgroup per row. Every invocation of the workgroup computes the row
//!   values of the outer body (they are the same for all), invocation 0
//!   stores them; a `Reduce` is a workgroup reduction: each invocation
//!   combines the points `k = lid, lid + WG, ...` of the row, then a tree
//!   in workgroup memory combines the `WG` partial results; a `Map` runs
//!   its inner body at the same points. A value a reduction body `Save`s
//!   goes to a scratch buffer of `rows * len` elements (one per slot, bound
//!   after the arguments) and the later body's `Restore` reads it back at
//!   the same point, in the same invocation (the split of points over
//!   invocations is the same for every inner body), so no barrier is needed.
//!   Reductions combine f32 (NaN-propagating max/min) or i32 values, each
//!   dtype through its own workgroup array; i32 sums and products wrap as
//!   the interpreter's do, so integer reductions give its bits in any order.
//!
//! Dtypes: `f32`, `i32`, `bool` (stored as one `u32` per element, 0 or
//! 1; the device runtime converts at upload and download) and `f16`, a
//! storage type (`opt::widen_f16`): its bits in the low half of a `u32`,
//! only moved and converted in a kernel (`ir::verify`), so it needs no
//! adapter feature; `g_f16_to_f32` is exact and `g_f32_to_f16` rounds to
//! nearest even in integer arithmetic, so a conversion gives the
//! interpreter's bits (NaN payloads aside) on every adapter. WGSL has no
//! 64-bit types: a kernel touching `f64` or `i64` is rejected with
//! [`WgslError::Dtype`]; the caller decides what runs instead.
//!
//! Semantics: each ALU instruction computes what its primitive computes
//! for one element, with special values handled explicitly (NaN
//! propagation in max/min and reductions, `x / 0 == 0` for integers,
//! saturating float-to-int conversion, `log`/`sqrt` outside their domain).
//! Unlike the C renderer the results are not bitwise those of the
//! interpreter: transcendental functions are the device's (Vulkan allows a
//! few ulp; `pow` is `exp2(y log2|x|)` with C's special cases, so its
//! relative error grows with `|y log2|x||`), `rem` is `x - y * trunc(x / y)`, `erf` is a rational
//! approximation (absolute error below 2e-7), `erf_inv` is Giles' f32
//! polynomial (the CPU's algorithm) over the device's `log`, and a
//! reduction combines in a different order. The GPU tests state their tolerances.

use super::ir::{body_types, verify, Access, Index, Inst, Kernel, KernelError, Lit, Reduction, Window, WordOp};
use crate::dtype::DType;
use crate::ops::binary::{Binary, Compare};
use crate::ops::reduce::ReduceKind;
use crate::ops::unary::Unary;
use std::fmt::Write;

/// Invocations per workgroup.
pub const WG: u32 = 256;

/// Most workgroups in one dimension of a dispatch (WebGPU's default limit).
pub const MAX_GROUPS_X: u32 = 65535;

/// A rendered kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WgslKernel {
    /// The shader module's source (entry point `main`).
    pub source: String,
    /// Workgroups to dispatch (x, y, z).
    pub workgroups: [u32; 3],
    /// Element count and dtype of each scratch buffer (saved reduction
    /// values), bound after the kernel's arguments.
    pub scratch: Vec<(DType, usize)>,
}

/// Why a kernel has no WGSL form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WgslError {
    /// A 64-bit dtype (WGSL has none).
    #[error("kernel {kernel} uses {dtype}, which WGSL has no type for (the GPU runs f32, i32 and bool)")]
    Dtype {
        /// The kernel.
        kernel: String,
        /// The dtype.
        dtype: DType,
    },
    /// More points or elements than 32-bit index arithmetic reaches.
    #[error("kernel {kernel} indexes {elems} elements, more than the GPU's 32-bit addresses reach")]
    TooLarge {
        /// The kernel.
        kernel: String,
        /// The element count.
        elems: usize,
    },
    /// A reduction of a dtype the workgroup reductions do not take.
    #[error("kernel {kernel} reduces {dtype} values (the GPU's reductions take f32 and i32)")]
    Reduction {
        /// The kernel.
        kernel: String,
        /// The reduced values' dtype.
        dtype: DType,
    },
    /// The kernel does not verify (a planner bug).
    #[error(transparent)]
    Malformed(#[from] KernelError),
}

/// A reduction's accumulator in WGSL for values of `d`: the workgroup
/// array it combines through, its identity and its combiner (`{a}`, `{b}`
/// the operands). Integer sums and products wrap in WGSL as in the
/// interpreter (`wrapping_add`, `wrapping_mul`), so with any association
/// they give the interpreter's bits; max and min of integers are exact.
fn accumulator(kind: ReduceKind, d: DType) -> Option<(&'static str, &'static str, &'static str)> {
    Some(match (d, kind) {
        (DType::F32, ReduceKind::Sum) => ("red", "0.0", "({a} + {b})"),
        (DType::F32, ReduceKind::Prod) => ("red", "1.0", "({a} * {b})"),
        (DType::F32, ReduceKind::Max) => ("red", "bitcast<f32>(0xff800000u)", "g_max({a}, {b})"),
        (DType::F32, ReduceKind::Min) => ("red", "bitcast<f32>(0x7f800000u)", "g_min({a}, {b})"),
        (DType::I32, ReduceKind::Sum) => ("red_i", "0i", "({a} + {b})"),
        (DType::I32, ReduceKind::Prod) => ("red_i", "1i", "({a} * {b})"),
        (DType::I32, ReduceKind::Max) => ("red_i", "bitcast<i32>(0x80000000u)", "max({a}, {b})"),
        (DType::I32, ReduceKind::Min) => ("red_i", "2147483647i", "min({a}, {b})"),
        (DType::U32, ReduceKind::Sum) => ("red_u", "0u", "({a} + {b})"),
        (DType::U32, ReduceKind::Prod) => ("red_u", "1u", "({a} * {b})"),
        (DType::U32, ReduceKind::Max) => ("red_u", "0u", "max({a}, {b})"),
        (DType::U32, ReduceKind::Min) => ("red_u", "0xffffffffu", "min({a}, {b})"),
        _ => return None,
    })
}

/// The dtype of the values reduction `red` (at body position `at`) combines.
fn reduced_dtype(red: &Reduction, at: usize, inner_types: &[Option<Vec<Option<DType>>>]) -> DType {
    inner_types[at].as_ref().and_then(|t| t.get(red.value as usize).copied().flatten()).unwrap_or(DType::F32)
}

/// The WGSL type a dtype's elements have in a storage buffer: every element
/// is 4 bytes on the device (bool as 0/1, f16 as its 16 bits in the low
/// half of a `u32`; see `graft-gpu`'s transfers).
pub fn storage_type(d: DType) -> &'static str {
    match d {
        DType::F32 => "f32",
        DType::I32 => "i32",
        // The 64-bit types never reach a shader (refused in `render_wgsl`).
        DType::U32 | DType::Bool | DType::F16 | DType::F64 | DType::I64 => "u32",
    }
}

fn reg_type(d: DType) -> &'static str {
    match d {
        DType::F32 => "f32",
        DType::I32 => "i32",
        // An f16 register holds the value's bits: it is only moved or
        // converted (`ir::verify`), so no f16 arithmetic is needed and no
        // adapter feature (WGSL's `f16` needs `shader-f16`).
        DType::F16 | DType::U32 => "u32",
        DType::Bool | DType::F64 | DType::I64 => "bool",
    }
}

/// Helpers every shader carries: NaN tests, NaN-propagating max/min,
/// the functions WGSL lacks or defines differently.
const PRELUDE: &str = r#"fn g_isnan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }
fn g_nan() -> f32 { return bitcast<f32>(0x7fc00000u); }
fn g_max(a: f32, b: f32) -> f32 { return select(select(a, b, b > a), b, g_isnan(b)); }
fn g_min(a: f32, b: f32) -> f32 { return select(select(a, b, b < a), b, g_isnan(b)); }
fn g_sign_f32(x: f32) -> f32 { return select(select(select(0.0, 1.0, x > 0.0), -1.0, x < 0.0), x, g_isnan(x)); }
fn g_log(x: f32) -> f32 {
  if (x < 0.0) { return g_nan(); }
  if (x == 0.0) { return bitcast<f32>(0xff800000u); }
  return log(x);
}
fn g_sqrt(x: f32) -> f32 { return select(sqrt(x), g_nan(), x < 0.0); }
fn g_rsqrt(x: f32) -> f32 { return 1.0 / g_sqrt(x); }
fn g_expm1(x: f32) -> f32 {
  let u = exp(x);
  if (u == 1.0) { return x; }
  let um1 = u - 1.0;
  if (um1 == -1.0) { return -1.0; }
  if (abs(x) > 0.5) { return um1; }
  return um1 * x / log(u);
}
fn g_log1p(x: f32) -> f32 {
  let u = 1.0 + x;
  if (u == 1.0) { return x; }
  if (abs(x) > 0.5) { return g_log(u); }
  return log(u) * x / (u - 1.0);
}
fn g_pow(x: f32, y: f32) -> f32 {
  // C powf: exp2(y log2|x|) (WGSL's pow is undefined for x < 0 and its
  // log2 at 0), the sign from an odd integer y, then C's special cases.
  let inf = bitcast<f32>(0x7f800000u);
  let ax = abs(x);
  let ay = abs(y);
  let whole = ay >= 8388608.0 || floor(ay) == ay;
  let odd = ay < 16777216.0 && floor(ay) == ay && floor(ay * 0.5) != ay * 0.5;
  var m: f32;
  if (ax == 0.0) { m = select(0.0, inf, y < 0.0); }
  else if (ax == inf) { m = select(0.0, inf, y > 0.0); }
  else if (ay == inf) { m = select(0.0, inf, (ax > 1.0) == (y > 0.0)); }
  else { m = exp2(y * log2(ax)); }
  var r = select(m, -m, odd && (bitcast<u32>(x) & 0x80000000u) != 0u);
  if (x < 0.0 && x > -inf && !whole) { r = g_nan(); }
  if (g_isnan(x) || g_isnan(y)) { r = g_nan(); }
  if ((ax == 1.0 && ay == inf) || x == 1.0 || y == 0.0) { r = 1.0; }
  return r;
}
fn g_atan2(y: f32, x: f32) -> f32 {
  // C atan2f (WGSL's atan2 leaves zeros and infinities to the
  // implementation), as ops/mathfn/atan.rs computes it: the series of atan
  // on num / den (the octant's ratio in [0, 1]) or, past tan(pi/8), on
  // (num - den) / (num + den), one division; both zero or both infinite
  // divide 0 by 1 (the latter on the pi/4 branch). Then the octant and y's
  // sign.
  let inf = bitcast<f32>(0x7f800000u);
  let ay = abs(y);
  let ax = abs(x);
  let swap = ay > ax;
  let num = select(ay, ax, swap);
  let den = select(ax, ay, swap);
  let both_inf = ay == inf && ax == inf;
  let special = (ay == 0.0 && ax == 0.0) || both_inf;
  let big = num > den * 0.41421356 || both_inf;
  let n = select(select(num, num - den, big), 0.0, special);
  let d = select(select(den, num + den, big), 1.0, special);
  let u = n / d;
  let z = u * u;
  let p = -0.33333333 + z * (0.2 + z * (-0.14285714 + z * (0.11111111 + z * (-0.09090909
          + z * (0.07692308 + z * (-0.06666667 + z * (0.05882353 + z * -0.05263158)))))));
  var a = u + u * z * p;
  if (big) { a = 0.78539816 + a; }
  if (swap) { a = 1.5707964 - a; }
  if ((bitcast<u32>(x) & 0x80000000u) != 0u) { a = 3.1415927 - a; }
  a = bitcast<f32>((bitcast<u32>(a) & 0x7fffffffu) | (bitcast<u32>(y) & 0x80000000u));
  if (g_isnan(x) || g_isnan(y)) { a = g_nan(); }
  return a;
}
fn g_tanh(x: f32) -> f32 { return select(tanh(clamp(x, -15.0, 15.0)), x, g_isnan(x)); }
fn g_logistic(x: f32) -> f32 { return 1.0 / (1.0 + exp(-x)); }
fn g_erf(x: f32) -> f32 {
  // Abramowitz and Stegun 7.1.26 for |x| >= 0.5 (absolute error below
  // 1.5e-7), the Maclaurin series below (relative accuracy near 0).
  let a = abs(x);
  if (a < 0.5) {
    let z = x * x;
    return x * (1.1283791671 + z * (-0.3761263890 + z * (0.1128379167 + z * (-0.0268661706 + z * 0.0052239776))));
  }
  let t = 1.0 / (1.0 + 0.3275911 * a);
  let p = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
  let r = 1.0 - p * exp(-a * a);
  return select(select(r, -r, x < 0.0), x, g_isnan(x));
}
fn g_erf_inv(x: f32) -> f32 {
  // Giles' single-precision polynomials in w = -log(1 - x^2), as the CPU
  // kernel (without its bit-exact log1p); +-inf at +-1, NaN beyond.
  let w = -g_log1p(-x * x);
  var p: f32;
  if (w < 5.0) {
    let v = w - 2.5;
    p = 2.81022636e-08;
    p = 3.43273939e-07 + p * v; p = -3.5233877e-06 + p * v; p = -4.39150654e-06 + p * v;
    p = 0.00021858087 + p * v; p = -0.00125372503 + p * v; p = -0.00417768164 + p * v;
    p = 0.246640727 + p * v; p = 1.50140941 + p * v;
  } else {
    let v = sqrt(w) - 3.0;
    p = -0.000200214257;
    p = 0.000100950558 + p * v; p = 0.00134934322 + p * v; p = -0.00367342844 + p * v;
    p = 0.00573950773 + p * v; p = -0.0076224613 + p * v; p = 0.00943887047 + p * v;
    p = 1.00167406 + p * v; p = 2.83297682 + p * v;
  }
  let a = abs(x);
  let inf = bitcast<f32>(0x7f800000u);
  return select(select(select(p * x, select(-inf, inf, x > 0.0), a == 1.0), g_nan(), a > 1.0), x, g_isnan(x));
}
fn g_f32_to_i32(x: f32) -> i32 {
  if (g_isnan(x)) { return 0; }
  if (x >= 2147483648.0) { return 2147483647; }
  if (x <= -2147483648.0) { return bitcast<i32>(0x80000000u); }
  return i32(x);
}
fn g_rotl(a: i32, b: i32) -> i32 {
  let x = bitcast<u32>(a);
  let r = bitcast<u32>(b) & 31u;
  return bitcast<i32>((x << r) | (x >> ((32u - r) & 31u)));
}
fn g_f16_to_f32(h: u32) -> f32 {
  let s = (h & 0x8000u) << 16u;
  let e = (h >> 10u) & 0x1fu;
  let m = h & 0x3ffu;
  if (e == 0u) { return bitcast<f32>(s | bitcast<u32>(f32(m) * bitcast<f32>(0x33800000u))); }
  if (e == 31u) { return bitcast<f32>(s | 0x7f800000u | (m << 13u) | select(0u, 0x400000u, m != 0u)); }
  return bitcast<f32>(s | ((e + 112u) << 23u) | (m << 13u));
}
fn g_f32_to_f16(x: f32) -> u32 {
  let b = bitcast<u32>(x);
  let s = (b >> 16u) & 0x8000u;
  let a = b & 0x7fffffffu;
  if (a > 0x7f800000u) { return s | 0x7e00u | ((a >> 13u) & 0x3ffu); }
  if (a >= 0x47800000u) { return s | 0x7c00u; }
  let e = i32(a >> 23u) - 127;
  if (e < -25) { return s; }
  var r: u32;
  var rem: u32;
  var half: u32;
  if (e >= -14) {
    r = (u32(e + 15) << 10u) | ((a >> 13u) & 0x3ffu);
    rem = a & 0x1fffu;
    half = 0x1000u;
  } else {
    let sig = (a & 0x7fffffu) | 0x800000u;
    let sh = u32(-1 - e);
    r = sig >> sh;
    rem = sig & ((1u << sh) - 1u);
    half = 1u << (sh - 1u);
  }
  if (rem > half || (rem == half && (r & 1u) == 1u)) { r = r + 1u; }
  return s | r;
}
fn g_div_i32(a: i32, b: i32) -> i32 { return select(a / select(b, 1, b == 0), 0, b == 0); }
fn g_rem_i32(a: i32, b: i32) -> i32 { return select(a % select(b, 1, b == 0), 0, b == 0); }
fn g_div_u32(a: u32, b: u32) -> u32 { return select(a / select(b, 1u, b == 0u), 0u, b == 0u); }
fn g_rem_u32(a: u32, b: u32) -> u32 { return select(a % select(b, 1u, b == 0u), 0u, b == 0u); }
fn g_f32_to_u32(x: f32) -> u32 {
  if (g_isnan(x) || x <= 0.0) { return 0u; }
  if (x >= 4294967296.0) { return 0xffffffffu; }
  return u32(x);
}
fn g_u32_to_f32(x: u32) -> f32 {
  if (x < 0x1000000u) { return f32(x); }
  let e = 31u - countLeadingZeros(x);
  let sh = e - 23u;
  var m = x >> sh;
  let rem = x & ((1u << sh) - 1u);
  let half = 1u << (sh - 1u);
  if (rem > half || (rem == half && (m & 1u) == 1u)) { m = m + 1u; }
  return bitcast<f32>(((e + 127u) << 23u) + (m - 0x800000u));
}
"#;

/// Renders one kernel as a WGSL compute shader.
pub fn render_wgsl(k: &Kernel) -> Result<WgslKernel, WgslError> {
    let types = verify(k)?;
    let dtype_err = |d: DType| WgslError::Dtype { kernel: k.name.clone(), dtype: d };
    for a in &k.args {
        if matches!(a.dtype, DType::F64 | DType::I64) {
            return Err(dtype_err(a.dtype));
        }
    }
    let too_large = |elems: usize| WgslError::TooLarge { kernel: k.name.clone(), elems };
    let limit = i32::MAX as usize;
    if let Some(a) = k.args.iter().find(|a| a.len > limit) {
        return Err(too_large(a.len));
    }
    if k.extent > limit {
        return Err(too_large(k.extent));
    }
    let row = k.body.iter().any(|i| matches!(i, Inst::Reduce(_) | Inst::Map(_)));
    let mut r = Renderer { k, out: String::with_capacity(4096), slots: Vec::new(), red_wg: WG };
    // Inner bodies' register types, in body order (their saves feed later restores).
    let mut inner_types: Vec<Option<Vec<Option<DType>>>> = vec![None; k.body.len()];
    for (at, inst) in k.body.iter().enumerate() {
        let (len, body) = match inst {
            Inst::Reduce(red) => (red.inner.len, &red.inner.body),
            Inst::Map(m) => (m.len, &m.body),
            _ => continue,
        };
        if k.extent.saturating_mul(len) > limit {
            return Err(too_large(k.extent.saturating_mul(len)));
        }
        let mut stored = vec![false; k.args.len()];
        let t = body_types(k, body, Some((len, &types)), &mut stored, &mut r.slots)?;
        inner_types[at] = Some(t);
    }
    // Each reduced dtype needs its workgroup array; other dtypes are refused.
    let mut arrays: Vec<(&'static str, DType)> = Vec::new();
    for (at, inst) in k.body.iter().enumerate() {
        if let Inst::Reduce(red) = inst {
            let d = reduced_dtype(red, at, &inner_types);
            let Some((array, _, _)) = accumulator(red.kind, d) else {
                return Err(WgslError::Reduction { kernel: k.name.clone(), dtype: d });
            };
            if !arrays.iter().any(|(a, _)| *a == array) {
                arrays.push((array, d));
            }
        }
    }
    if arrays.is_empty() {
        arrays.push(("red", DType::F32));
    }
    let all_types = types.iter().chain(inner_types.iter().flatten().flatten());
    if let Some(d) = all_types.flatten().find(|d| matches!(d, DType::F64 | DType::I64)) {
        return Err(dtype_err(*d));
    }
    if let Some((d, _)) = r.slots.iter().map(|d| (*d, 0)).find(|(d, _)| matches!(d, DType::F64 | DType::I64)) {
        return Err(dtype_err(d));
    }
    let _ = writeln!(r.out, "// kernel {} (generated by graft {})", k.name, env!("CARGO_PKG_VERSION"));
    r.out.push_str(PRELUDE);
    for (b, a) in k.args.iter().enumerate() {
        let access = match a.access {
            Access::Read => "read",
            Access::Write => "read_write",
        };
        let _ =
            writeln!(r.out, "@group(0) @binding({b}) var<storage, {access}> a{b}: array<{}>;", storage_type(a.dtype));
    }
    let nargs = k.args.len();
    for (s, d) in r.slots.clone().iter().enumerate() {
        let _ = writeln!(
            r.out,
            "@group(0) @binding({}) var<storage, read_write> s{s}: array<{}>;",
            nargs + s,
            storage_type(*d)
        );
    }
    let units = if row { k.extent } else { k.extent.div_ceil(WG as usize) };
    let gx = (units.min(MAX_GROUPS_X as usize)).max(1) as u32;
    let gy = units.div_ceil(gx as usize).max(1) as u32;
    let workgroups = [gx, gy, 1];
    if row {
        // Fewer invocations for short rows (at least one subgroup's worth).
        let longest = k
            .body
            .iter()
            .filter_map(|i| match i {
                Inst::Reduce(red) => Some(red.inner.len),
                Inst::Map(m) => Some(m.len),
                _ => None,
            })
            .max()
            .unwrap_or(1);
        r.red_wg = (longest.next_power_of_two() as u32).clamp(32, WG);
        let wg = r.red_wg;
        for (array, d) in &arrays {
            let _ = writeln!(r.out, "var<workgroup> {array}: array<{}, {wg}>;", reg_type(*d));
        }
        let _ = writeln!(r.out, "@compute @workgroup_size({wg})");
        let _ = writeln!(
            r.out,
            "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {{"
        );
        let _ = writeln!(r.out, "  let i = wid.x + wid.y * {gx}u;");
        let _ = writeln!(r.out, "  if (i >= {}u) {{ return; }}", k.extent);
    } else {
        let _ = writeln!(r.out, "@compute @workgroup_size({WG})");
        let _ = writeln!(r.out, "fn main(@builtin(global_invocation_id) gid: vec3<u32>) {{");
        let _ = writeln!(r.out, "  let i = gid.x + gid.y * {}u;", gx as usize * WG as usize);
        let _ = writeln!(r.out, "  if (i >= {}u) {{ return; }}", k.extent);
    }
    let _ = writeln!(r.out, "  let ii = i32(i);");
    r.body(&k.body, &types, None, row, &inner_types);
    r.out.push_str("}\n");
    let scratch = r.slots.iter().map(|&d| (d, k.extent * inner_len_of_slot(k))).collect();
    Ok(WgslKernel { source: r.out, workgroups, scratch })
}

/// Points per row of the kernel's reductions that save (every inner body
/// of one row kernel covers the same row, so all slots have this length).
fn inner_len_of_slot(k: &Kernel) -> usize {
    k.body
        .iter()
        .find_map(|i| match i {
            Inst::Reduce(red) if red.inner.body.iter().any(|j| matches!(j, Inst::Save { .. })) => Some(red.inner.len),
            _ => None,
        })
        .unwrap_or(1)
}

struct Renderer<'a> {
    k: &'a Kernel,
    out: String,
    /// Scratch slot dtypes (filled while checking inner bodies).
    slots: Vec<DType>,
    /// Invocations per workgroup of a row kernel.
    red_wg: u32,
}

/// How an inner body names things: its registers' prefix and its point.
struct Inner {
    prefix: String,
    len: usize,
}

impl Renderer<'_> {
    /// The element a load or store of instruction `name` reaches at the
    /// point (`pt`; `ppt` its flat index for strided addresses), computing a
    /// strided address into `e<name>` first.
    fn element(&mut self, index: &Index, name: &str, (pt, ppt): (&str, &str), ind: &str) -> String {
        match index {
            Index::Point => pt.to_string(),
            Index::Scalar => "0u".to_string(),
            Index::Strided { dims, strides, offset } => {
                let e = format!("e{name}");
                let s = address(&e, ppt, dims, strides, *offset);
                self.line(ind, &s);
                e
            }
        }
    }

    fn line(&mut self, ind: &str, s: &str) {
        self.out.push_str(ind);
        self.out.push_str(s);
        self.out.push('\n');
    }

    /// Renders a body. `inner`: `None` for the outer body.
    fn body(
        &mut self,
        body: &[Inst],
        types: &[Option<DType>],
        inner: Option<&Inner>,
        row: bool,
        inner_types: &[Option<Vec<Option<DType>>>],
    ) {
        let ind = if inner.is_some() { "    " } else { "  " };
        let reg = |r: u32| match inner {
            Some(b) => format!("{}{r}", b.prefix),
            None => format!("r{r}"),
        };
        let (pt, ppt) = if inner.is_some() { ("j", "jj") } else { ("i", "ii") };
        let ty = |r: u32| types.get(r as usize).copied().flatten().unwrap_or(DType::F32);
        for (at, inst) in body.iter().enumerate() {
            let name = reg(at as u32);
            match inst {
                Inst::Load { arg, index } => {
                    let d = self.k.args[*arg as usize].dtype;
                    let addr = self.element(index, &name, (pt, ppt), ind);
                    let v = read(&format!("a{arg}[{addr}]"), d);
                    self.line(ind, &format!("let {name} = {v};"));
                }
                Inst::Lit(l) => self.line(ind, &format!("let {name} = {};", lit(l))),
                Inst::Unary(op, a) => {
                    let v = unary(*op, ty(*a), &reg(*a));
                    self.line(ind, &format!("let {name} = {v};"));
                }
                Inst::Binary(op, a, b) => {
                    let v = binary(*op, ty(*a), &reg(*a), &reg(*b));
                    self.line(ind, &format!("let {name} = {v};"));
                }
                Inst::Compare(op, a, b) => {
                    let o = match op {
                        Compare::Eq => "==",
                        Compare::Ne => "!=",
                        Compare::Lt => "<",
                        Compare::Le => "<=",
                        Compare::Gt => ">",
                        Compare::Ge => ">=",
                    };
                    // Naga emits `!=` on floats as an ordered comparison
                    // (false with a NaN operand); IEEE's (and the CPU's)
                    // is unordered: the negated `==` is that.
                    if *op == Compare::Ne && ty(*a) == DType::F32 {
                        self.line(ind, &format!("let {name} = !({} == {});", reg(*a), reg(*b)));
                    } else {
                        self.line(ind, &format!("let {name} = {} {o} {};", reg(*a), reg(*b)));
                    }
                }
                Inst::Select(p, a, b) => {
                    self.line(ind, &format!("let {name} = select({}, {}, {});", reg(*b), reg(*a), reg(*p)));
                }
                // WGSL's `fma` is `a * b + c`; whether the device rounds
                // once is the driver's choice (the CPU backends always do).
                Inst::Fma(a, b, c) => {
                    self.line(ind, &format!("let {name} = fma({}, {}, {});", reg(*a), reg(*b), reg(*c)));
                }
                Inst::Convert(to, a) => {
                    let v = convert(ty(*a), *to, &reg(*a));
                    self.line(ind, &format!("let {name} = {v};"));
                }
                Inst::Word(op, a, b) => {
                    let (a, b) = (reg(*a), reg(*b));
                    let v = match op {
                        WordOp::Xor => format!("bitcast<i32>(bitcast<u32>({a}) ^ bitcast<u32>({b}))"),
                        WordOp::Shl => format!("bitcast<i32>(bitcast<u32>({a}) << (bitcast<u32>({b}) & 31u))"),
                        WordOp::Shr => format!("bitcast<i32>(bitcast<u32>({a}) >> (bitcast<u32>({b}) & 31u))"),
                        WordOp::Rotl => format!("g_rotl({a}, {b})"),
                    };
                    self.line(ind, &format!("let {name} = {v};"));
                }
                Inst::Bitcast(to, a) => {
                    let v = if *to == ty(*a) { reg(*a) } else { format!("bitcast<{}>({})", reg_type(*to), reg(*a)) };
                    self.line(ind, &format!("let {name} = {v};"));
                }
                Inst::Position(index) => {
                    let v = match index {
                        Index::Point => ppt.to_string(),
                        Index::Scalar => "0".to_string(),
                        Index::Strided { .. } => self.element(index, &name, (pt, ppt), ind),
                    };
                    self.line(ind, &format!("let {name}: i32 = {v};"));
                }
                Inst::LoadAt { arg, addr } => {
                    let a = &self.k.args[*arg as usize];
                    let v = read(&format!("a{arg}[clamp({}, 0, {})]", reg(*addr), a.len - 1), a.dtype);
                    self.line(ind, &format!("let {name} = {v};"));
                }
                Inst::Store { arg, value, index } => {
                    let d = self.k.args[*arg as usize].dtype;
                    let addr = self.element(index, &name, (pt, ppt), ind);
                    let v = write(&reg(*value), d);
                    // Row values are the same in every invocation of the row's workgroup.
                    if row && inner.is_none() {
                        self.line(ind, &format!("if (lid == 0u) {{ a{arg}[{addr}] = {v}; }}"));
                    } else {
                        self.line(ind, &format!("a{arg}[{addr}] = {v};"));
                    }
                }
                Inst::Outer(r) => self.line(ind, &format!("let {name} = r{r};")),
                Inst::Save { slot, value } => {
                    let d = self.slots.get(*slot as usize).copied().unwrap_or(DType::F32);
                    self.line(ind, &format!("s{slot}[j] = {};", write(&reg(*value), d)));
                }
                Inst::Restore(slot) => {
                    let d = self.slots.get(*slot as usize).copied().unwrap_or(DType::F32);
                    self.line(ind, &format!("let {name} = {};", read(&format!("s{slot}[j]"), d)));
                }
                Inst::Window { arg, window, fill } => {
                    let d = self.k.args[*arg as usize].dtype;
                    let (test, addr) = window_parts(&format!("w{name}"), ppt, window);
                    self.line(ind, &test);
                    self.line(ind, &format!("var {name}: {} = {};", reg_type(d), reg(*fill)));
                    let v = read(&format!("a{arg}[e{name}]"), d);
                    self.line(ind, &format!("if (w{name}) {{ {addr} {name} = {v}; }}"));
                }
                Inst::Inside(window) => {
                    let (test, _) = window_parts(&format!("w{name}"), ppt, window);
                    self.line(ind, &test);
                    self.line(ind, &format!("let {name} = w{name};"));
                }
                Inst::Map(m) => {
                    let it = inner_types.get(at).cloned().flatten().unwrap_or_default();
                    let b = Inner { prefix: format!("q{at}_"), len: m.len };
                    self.row_loop(&b);
                    self.body(&m.body, &it, Some(&b), row, inner_types);
                    self.line(ind, "}");
                }
                Inst::Reduce(red) => {
                    let it = inner_types.get(at).cloned().flatten().unwrap_or_default();
                    let b = Inner { prefix: format!("q{at}_"), len: red.inner.len };
                    let d = reduced_dtype(red, at, inner_types);
                    // `render_wgsl` refused every other dtype before rendering.
                    let (array, ident, comb) =
                        accumulator(red.kind, d).expect("reduction dtypes are checked before rendering");
                    let combine = |a: &str, b: &str| comb.replace("{a}", a).replace("{b}", b);
                    self.line(ind, &format!("var acc{at}: {} = {ident};", reg_type(d)));
                    self.row_loop(&b);
                    self.body(&red.inner.body, &it, Some(&b), row, inner_types);
                    let v = format!("{}{}", b.prefix, red.value);
                    self.line("    ", &format!("acc{at} = {};", combine(&format!("acc{at}"), &v)));
                    self.line(ind, "}");
                    // The workgroup's tree over its partial results.
                    self.line(ind, &format!("{array}[lid] = acc{at};"));
                    self.line(ind, "workgroupBarrier();");
                    let mut h = self.red_wg / 2;
                    while h > 0 {
                        let c = combine(&format!("{array}[lid]"), &format!("{array}[lid + {h}u]"));
                        self.line(ind, &format!("if (lid < {h}u) {{ {array}[lid] = {c}; }}"));
                        self.line(ind, "workgroupBarrier();");
                        h /= 2;
                    }
                    self.line(ind, &format!("let {name} = {array}[0];"));
                    // Before the next reduction overwrites `red`.
                    self.line(ind, "workgroupBarrier();");
                }
            }
        }
    }

    /// Opens the loop over this invocation's points of the row.
    fn row_loop(&mut self, b: &Inner) {
        let wg = self.red_wg;
        let len = b.len;
        self.line("  ", &format!("for (var k: u32 = lid; k < {len}u; k = k + {wg}u) {{"));
        self.line("    ", &format!("let j = i * {len}u + k;"));
        self.line("    ", "let jj = i32(j);");
    }
}

/// A value read from a storage buffer element, as a register value.
fn read(elem: &str, d: DType) -> String {
    match d {
        DType::Bool => format!("({elem} != 0u)"),
        _ => elem.to_string(),
    }
}

/// A register value as a storage buffer element.
fn write(v: &str, d: DType) -> String {
    match d {
        DType::Bool => format!("select(0u, 1u, {v})"),
        _ => v.to_string(),
    }
}

/// Statements computing `var` = the address of point `p` (an `i32`)
/// through a strided index (coalesced first: fewer divisions).
fn address(var: &str, p: &str, dims: &[usize], strides: &[isize], offset: isize) -> String {
    let (dims, strides, offset) = super::ir::coalesce_strided(dims, strides, offset);
    let mut s = format!("var {var}: i32 = {offset}; {{ var p: i32 = {p};");
    let n = dims.len();
    for k in (0..n).rev() {
        let (d, st) = (dims[k], strides[k]);
        if k == 0 {
            if st != 0 {
                let _ = write!(s, " {var} = {var} + p * {st};");
            }
        } else {
            if st != 0 {
                let _ = write!(s, " {var} = {var} + (p % {d}) * {st};");
            }
            let _ = write!(s, " p = p / {d};");
        }
    }
    s.push_str(" }");
    s
}

/// A window's inside test (a statement defining the bool `var`) and its
/// address (a statement defining `e` + the register name without the `w`).
fn window_parts(var: &str, p: &str, w: &Window) -> (String, String) {
    let w = w.coalesced();
    let e = format!("e{}", var.trim_start_matches('w'));
    let mut test = format!("var {var}: bool = true; var {e}: i32 = {}; {{ var p: i32 = {p};", w.offset);
    let n = w.dims.len();
    for k in (0..n).rev() {
        let (d, lo, size, st) = (w.dims[k], w.lo[k], w.size[k], w.strides[k]);
        let hi = lo + size as isize;
        let c = if k == 0 { "p".to_string() } else { format!("(p % {d})") };
        let _ =
            write!(test, " {{ let c = {c}; {var} = {var} && c >= {lo} && c < {hi}; {e} = {e} + (c - {lo}) * {st}; }}");
        if k > 0 {
            let _ = write!(test, " p = p / {d};");
        }
    }
    test.push_str(" }");
    (test, String::new())
}

/// A literal as a WGSL expression (exact: floats by their bits).
fn lit(l: &Lit) -> String {
    match l.dtype {
        DType::F32 => format!("bitcast<f32>(0x{:08x}u)", l.bits as u32),
        DType::I32 => format!("bitcast<i32>(0x{:08x}u)", l.bits as u32),
        DType::U32 => format!("0x{:08x}u", l.bits as u32),
        DType::Bool => (l.bits & 1 == 1).to_string(),
        DType::F16 => format!("0x{:04x}u", l.bits as u16),
        // Rejected before rendering (see `render_wgsl`).
        DType::F64 | DType::I64 => "0".to_string(),
    }
}

fn unary(op: Unary, d: DType, a: &str) -> String {
    let f = d == DType::F32;
    match op {
        // WGSL has no unary minus on u32; its subtraction wraps.
        Unary::Neg if d == DType::U32 => format!("(0u - {a})"),
        Unary::Neg => format!("(-{a})"),
        Unary::Abs if d == DType::U32 => a.to_string(),
        Unary::Abs => format!("abs({a})"),
        Unary::Sign if d == DType::U32 => format!("select(0u, 1u, {a} != 0u)"),
        Unary::Sign if f => format!("g_sign_f32({a})"),
        Unary::Sign => format!("sign({a})"),
        Unary::Exp => format!("exp({a})"),
        Unary::Expm1 => format!("g_expm1({a})"),
        Unary::Log => format!("g_log({a})"),
        Unary::Log1p => format!("g_log1p({a})"),
        Unary::Sqrt => format!("g_sqrt({a})"),
        Unary::Rsqrt => format!("g_rsqrt({a})"),
        Unary::Sin => format!("sin({a})"),
        Unary::Cos => format!("cos({a})"),
        Unary::Tan => format!("tan({a})"),
        Unary::Tanh => format!("g_tanh({a})"),
        Unary::Logistic => format!("g_logistic({a})"),
        Unary::Erf => format!("g_erf({a})"),
        Unary::ErfInv => format!("g_erf_inv({a})"),
        Unary::Floor => format!("floor({a})"),
        Unary::Ceil => format!("ceil({a})"),
        // WGSL's round is half to even, as the primitive.
        Unary::Round => format!("round({a})"),
        Unary::Not if d == DType::Bool => format!("(!{a})"),
        Unary::Not => format!("(~{a})"),
    }
}

fn binary(op: Binary, d: DType, a: &str, b: &str) -> String {
    let f = d == DType::F32;
    match op {
        Binary::Add => format!("({a} + {b})"),
        Binary::Sub => format!("({a} - {b})"),
        Binary::Mul => format!("({a} * {b})"),
        Binary::Div if f => format!("({a} / {b})"),
        Binary::Div if d == DType::U32 => format!("g_div_u32({a}, {b})"),
        Binary::Div => format!("g_div_i32({a}, {b})"),
        Binary::Rem if f => format!("({a} % {b})"),
        Binary::Rem if d == DType::U32 => format!("g_rem_u32({a}, {b})"),
        Binary::Rem => format!("g_rem_i32({a}, {b})"),
        Binary::Max if f => format!("g_max({a}, {b})"),
        Binary::Min if f => format!("g_min({a}, {b})"),
        Binary::Max => format!("max({a}, {b})"),
        Binary::Min => format!("min({a}, {b})"),
        Binary::Pow => format!("g_pow({a}, {b})"),
        Binary::Atan2 => format!("g_atan2({a}, {b})"),
        Binary::And => format!("({a} & {b})"),
        Binary::Or => format!("({a} | {b})"),
    }
}

fn convert(from: DType, to: DType, a: &str) -> String {
    match (from, to) {
        _ if from == to => a.to_string(),
        (DType::F32, DType::I32) => format!("g_f32_to_i32({a})"),
        (DType::I32, DType::F32) => format!("f32({a})"),
        (DType::Bool, DType::F32) => format!("select(0.0, 1.0, {a})"),
        (DType::Bool, DType::I32) => format!("select(0, 1, {a})"),
        // NaN -> true: the negated ordered `==` (see `Compare::Ne`).
        (DType::F32, DType::Bool) => format!("(!({a} == 0.0))"),
        (DType::I32, DType::Bool) => format!("({a} != 0)"),
        // f16 (bits in a u32) through f32: f16 -> f32 is exact, and an i32
        // is exact in f32 wherever f16 is finite (|x| <= 2^24; beyond, both
        // roundings overflow to inf), so each of these rounds once, as the
        // interpreter's `convert` does.
        (DType::F16, DType::F32) => format!("g_f16_to_f32({a})"),
        (DType::F32, DType::F16) => format!("g_f32_to_f16({a})"),
        // Nonzero magnitude, NaN included (x != 0 on the value, without
        // a float comparison a device compiler may assume NaN-free).
        (DType::F16, DType::Bool) => format!("(({a} & 0x7fffu) != 0u)"),
        (DType::F16, _) => convert(DType::F32, to, &format!("g_f16_to_f32({a})")),
        (DType::I32, DType::F16) => format!("g_f32_to_f16(f32({a}))"),
        (DType::Bool, DType::F16) => format!("select(0u, 0x3c00u, {a})"),
        // u32: to f32 rounded to nearest even in integer arithmetic (WGSL
        // leaves the rounding of `f32(u32)` to the implementation), to and
        // from i32 by the bits (wrapping), floats saturate (NaN -> 0).
        (DType::U32, DType::F32) => format!("g_u32_to_f32({a})"),
        (DType::F32, DType::U32) => format!("g_f32_to_u32({a})"),
        (DType::U32, DType::I32) => format!("bitcast<i32>({a})"),
        (DType::I32, DType::U32) => format!("bitcast<u32>({a})"),
        (DType::U32, DType::Bool) => format!("({a} != 0u)"),
        (DType::Bool, DType::U32) => format!("select(0u, 1u, {a})"),
        (DType::U32, DType::F16) => format!("g_f32_to_f16(g_u32_to_f32({a}))"),
        // 64-bit dtypes are rejected before rendering.
        _ => a.to_string(),
    }
}
