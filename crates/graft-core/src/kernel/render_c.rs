//! Renders kernels to C with GCC/Clang vector extensions.
//!
//! Every kernel becomes `void NAME(int64_t start, int64_t end, void *const
//! *args)`, running points `start..end` `GL` at a time (`GL` lanes per
//! vector, chosen from the host: 16 with AVX-512, 8 with AVX2, 4 otherwise).
//! The last, partial step runs the same vector code on a vector whose
//! missing lanes are zero and stores only the lanes that exist, so every
//! point takes exactly the same instructions (bitwise agreement does not
//! depend on where a range starts or ends).
//!
//! ALU instructions call the prelude (`prelude.h`): one `static inline`
//! function per (operation, dtype), `g_<op>_<dtype>`, written to compute
//! exactly what the interpreter's kernel computes (checked bit for bit by
//! `tests/all/mathfn_c.rs`). Vector types have `GL` lanes whatever the element
//! size (`vf32`, `vf64`, `vi32`, `vi64`, `vu32`; bool is `vbool` = `vi32` with lanes
//! 0 or -1), so conversions never change the lane count. Vectors are moved
//! in and out of memory with `memcpy` (no alignment assumed).

use super::interior::{self, Reuse};
use super::ir::{body_types, Access, Index, Inner, Inst, Kernel, Lit, Reduction};
use super::loops::{self, blocks, Callee, Loc, LoopProgram, WhileProgram};
use crate::dtype::DType;
use crate::ops::reduce::ReduceKind;
use crate::ops::Op;
use std::fmt::Write;

/// The prelude shared by every translation unit (vector types and the
/// per-operation functions).
pub const PRELUDE: &str = include_str!("prelude.h");

/// Memory access helpers the renderer uses: loads of `m <= GL` lanes
/// (missing lanes zero), stores of `m` lanes, splats and strided gathers.
const ACCESS: &str = r#"
/* A splat ORs the lane's bits into a zero vector (one vpbroadcast); a
 * lane-by-lane fill built the vector on the stack in halves and read it
 * back whole, a store-forwarding stall per run-time scalar per call. */
/* One lane (a compiled loop's counter steps, one-element kernels) is moved
 * as a scalar, into a register whose other lanes are zero: a memcpy of a
 * run-time length is a call into libc, several per one-element kernel, and
 * a lane stored into a vector on the stack is reloaded whole after a
 * store-forwarding stall. */
#define GK_MEM(T, VT, NAME, UT, UV) \
static inline VT gk_ld_##NAME(const T *p, int64_t m) { \
  if (m == 1) return (VT){p[0]}; \
  VT v = {0}; \
  if (m == GL) __builtin_memcpy(&v, p, sizeof v); \
  else __builtin_memcpy(&v, p, (size_t)m * sizeof(T)); \
  return v; } \
static inline void gk_st_##NAME(T *p, VT v, int64_t m) { \
  if (m == GL) __builtin_memcpy(p, &v, sizeof v); \
  else if (m == 1) p[0] = v[0]; \
  else __builtin_memcpy(p, &v, (size_t)m * sizeof(T)); } \
static inline VT gk_splat_##NAME(T x) { UT b; __builtin_memcpy(&b, &x, sizeof b); return (VT)((UV){0} | b); }
GK_MEM(float, vf32, f32, uint32_t, vu32)
GK_MEM(double, vf64, f64, uint64_t, vu64)
GK_MEM(int32_t, vi32, i32, uint32_t, vu32)
GK_MEM(int64_t, vi64, i64, uint64_t, vu64)
GK_MEM(uint32_t, vu32, u32, uint32_t, vu32)
static inline vbool gk_ld_bool(const uint8_t *p, int64_t m) {
  if (m == 1) return -__builtin_convertvector((vu8){p[0]}, vi32);
  vu8 b = {0};
  if (m == GL) __builtin_memcpy(&b, p, sizeof b); else __builtin_memcpy(&b, p, (size_t)m);
  return -__builtin_convertvector(b, vi32);
}
static inline void gk_st_bool(uint8_t *p, vbool v, int64_t m) {
  vu8 b = __builtin_convertvector(v & 1, vu8);
  if (m == GL) __builtin_memcpy(p, &b, sizeof b); else if (m == 1) p[0] = b[0]; else __builtin_memcpy(p, &b, (size_t)m);
}
static inline vbool gk_splat_bool(uint8_t x) { return gk_splat_i32(x ? -1 : 0); }
/* f16: 16 bits in memory, zero-extended into an i32 lane (the prelude's
 * f16 section). */
static inline vi32 gk_ld_f16(const uint16_t *p, int64_t m) {
  if (m == 1) return (vi32){p[0]};
  vu16 b = {0};
  if (m == GL) __builtin_memcpy(&b, p, sizeof b); else __builtin_memcpy(&b, p, (size_t)m * 2);
  return __builtin_convertvector(b, vi32);
}
static inline void gk_st_f16(uint16_t *p, vi32 v, int64_t m) {
  vu16 b = __builtin_convertvector(v, vu16);
  if (m == GL) __builtin_memcpy(p, &b, sizeof b); else if (m == 1) p[0] = b[0]; else __builtin_memcpy(p, &b, (size_t)m * 2);
}
static inline vi32 gk_splat_f16(uint16_t x) { return gk_splat_i32(x); }
/* The lanes p[t[0]], ..., p[t[GL - 1]] (addresses from a table, all in
 * bounds): hardware gathers where the target has them (AVX-512: 8 or 16
 * lanes per instruction; AVX2: 4 or 8), else lane by lane through an array
 * (a vector written lane by lane would live on the stack). */
#if defined(__AVX2__)
#include <immintrin.h>
#endif
#define GK_GAT_LOOP(T, VT, NAME) \
static inline VT gk_gat_##NAME(const T *p, const int32_t *t) { \
  T b[GL]; for (int l = 0; l < GL; l++) b[l] = p[t[l]]; VT v; __builtin_memcpy(&v, b, sizeof v); return v; }
/* W lanes per instruction, each register G from GATHER (reading t + h). */
#define GK_GAT_HW(T, VT, NAME, W, G, GATHER) \
static inline VT gk_gat_##NAME(const T *p, const int32_t *t) { \
  VT v; for (int h = 0; h < GL; h += W) { G g = GATHER; __builtin_memcpy((char *)&v + h * sizeof(T), &g, sizeof g); } return v; }
#define GK_IDX8(t) _mm256_loadu_si256((const __m256i *)(t))
#define GK_IDX4(t) _mm_loadu_si128((const __m128i *)(t))
#if defined(__AVX512F__) && GL % 8 == 0
GK_GAT_HW(double, vf64, f64, 8, __m512d, _mm512_i32gather_pd(GK_IDX8(t + h), p, 8))
GK_GAT_HW(int64_t, vi64, i64, 8, __m512i, _mm512_i32gather_epi64(GK_IDX8(t + h), p, 8))
#elif defined(__AVX2__) && GL % 4 == 0
GK_GAT_HW(double, vf64, f64, 4, __m256d, _mm256_i32gather_pd(p, GK_IDX4(t + h), 8))
GK_GAT_HW(int64_t, vi64, i64, 4, __m256i, _mm256_i32gather_epi64((const long long *)p, GK_IDX4(t + h), 8))
#else
GK_GAT_LOOP(double, vf64, f64)
GK_GAT_LOOP(int64_t, vi64, i64)
#endif
#if defined(__AVX512F__) && GL % 16 == 0
GK_GAT_HW(float, vf32, f32, 16, __m512, _mm512_i32gather_ps(_mm512_loadu_si512((const void *)(t + h)), p, 4))
GK_GAT_HW(int32_t, vi32, i32, 16, __m512i, _mm512_i32gather_epi32(_mm512_loadu_si512((const void *)(t + h)), p, 4))
#elif defined(__AVX2__) && GL % 8 == 0
GK_GAT_HW(float, vf32, f32, 8, __m256, _mm256_i32gather_ps(p, GK_IDX8(t + h), 4))
GK_GAT_HW(int32_t, vi32, i32, 8, __m256i, _mm256_i32gather_epi32(p, GK_IDX8(t + h), 4))
#else
GK_GAT_LOOP(float, vf32, f32)
GK_GAT_LOOP(int32_t, vi32, i32)
#endif
/* u32 lanes are i32 lanes' bits (signed and unsigned variants may alias). */
static inline vu32 gk_gat_u32(const uint32_t *p, const int32_t *t) { return (vu32)gk_gat_i32((const int32_t *)p, t); }
/* Lane numbers, for testing whether a gather's addresses are one run. */
static const int32_t gk_iota32[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
/* Whether every lane of a comparison's result is true: one mask test where
 * the target has it (a loop over the lanes is a chain of shifts and ands). */
#if defined(__AVX512F__) && GL == 16
#include <immintrin.h>
static inline int gk_all(vi32 t) { __m512i x; __builtin_memcpy(&x, &t, 64); return _mm512_cmpeq_epi32_mask(x, _mm512_setzero_si512()) == 0; }
#elif defined(__AVX__) && GL == 8
#include <immintrin.h>
static inline int gk_all(vi32 t) { __m256 x; __builtin_memcpy(&x, &t, 32); return _mm256_movemask_ps(x) == 0xff; }
#elif defined(__SSE2__) && GL == 4
#include <emmintrin.h>
static inline int gk_all(vi32 t) { __m128 x; __builtin_memcpy(&x, &t, 16); return _mm_movemask_ps(x) == 0xf; }
#else
static inline int gk_all(vi32 t) { int a = 1; for (int l = 0; l < GL; l++) a &= t[l] != 0; return a; }
#endif
/* The lanes of (P, C) from the listed positions (kernel::interior, Note
 * [Shifted reuse]); M is the integer vector type of the lanes' width. */
#if defined(__clang__) || __GNUC__ >= 12
#define GK_LAG(M, P, C, ...) __builtin_shufflevector(P, C, __VA_ARGS__)
#else
#define GK_LAG(M, P, C, ...) __builtin_shuffle(P, C, (M){__VA_ARGS__})
#endif
/* A compiled loop's way back into Rust for its host calls
 * (kernel::host::HostTable, same layout). */
typedef struct { void (*call)(const void *, int64_t, void *const *); const void *ctx; } graft_host;
/* The kernel IR's word operations (ir::WordOp) on i32 lanes read as u32. */
static inline vi32 gk_xor(vi32 a, vi32 b) { return (vi32)((vu32)a ^ (vu32)b); }
static inline vi32 gk_shl(vi32 a, vi32 b) { return (vi32)((vu32)a << ((vu32)b & 31u)); }
static inline vi32 gk_shr(vi32 a, vi32 b) { return (vi32)((vu32)a >> ((vu32)b & 31u)); }
static inline vi32 gk_rotl(vi32 a, vi32 b) {
  vu32 x = (vu32)a, r = (vu32)b & 31u; return (vi32)((x << r) | (x >> ((32u - r) & 31u))); }
static inline float gk_f32_bits(uint32_t b) { float f; __builtin_memcpy(&f, &b, 4); return f; }
static inline double gk_f64_bits(uint64_t b) { double f; __builtin_memcpy(&f, &b, 8); return f; }
/* Reduction combiners, as ops::reduce's Monoid::op (scalar `gr_`, and lane
 * by lane `grn_`: NaN-propagating for max/min) and Monoid::op_plain (vector
 * `grv_`, no NaN handling). The scalar
 * max/min select through a bit mask: a branch on random data mispredicts
 * often enough to triple the time of a row max. */
#define GK_RED(T, VT, U, NAME) \
static inline T gr_pick_##NAME(int take, T b, T a) { \
  U ub, ua, m = (U)0 - (U)take; T r; __builtin_memcpy(&ub, &b, sizeof b); __builtin_memcpy(&ua, &a, sizeof a); \
  ub = (ub & m) | (ua & ~m); __builtin_memcpy(&r, &ub, sizeof r); return r; } \
static inline T gr_sum_##NAME(T a, T b) { return a + b; } \
static inline T gr_prod_##NAME(T a, T b) { return a * b; } \
static inline T gr_max_##NAME(T a, T b) { return gr_pick_##NAME((b > a) | (b != b), b, a); } \
static inline T gr_min_##NAME(T a, T b) { return gr_pick_##NAME((b < a) | (b != b), b, a); } \
static inline VT grv_sum_##NAME(VT a, VT b) { return a + b; } \
static inline VT grv_prod_##NAME(VT a, VT b) { return a * b; } \
static inline VT grv_max_##NAME(VT a, VT b) { __typeof__(a > b) k = b > a; return (VT)(((__typeof__(k))b & k) | ((__typeof__(k))a & ~k)); } \
static inline VT grv_min_##NAME(VT a, VT b) { __typeof__(a > b) k = b < a; return (VT)(((__typeof__(k))b & k) | ((__typeof__(k))a & ~k)); } \
static inline VT grn_sum_##NAME(VT a, VT b) { return a + b; } \
static inline VT grn_prod_##NAME(VT a, VT b) { return a * b; } \
static inline VT grn_max_##NAME(VT a, VT b) { __typeof__(a > b) k = (b > a) | (b != b); return (VT)(((__typeof__(k))b & k) | ((__typeof__(k))a & ~k)); } \
static inline VT grn_min_##NAME(VT a, VT b) { __typeof__(a > b) k = (b < a) | (b != b); return (VT)(((__typeof__(k))b & k) | ((__typeof__(k))a & ~k)); }
GK_RED(float, vf32, uint32_t, f32)
GK_RED(double, vf64, uint64_t, f64)
/* The last levels of a leaf's pairwise tree over its 16 accumulator lanes
 * (ops::reduce's `l[q] = op(l[q], l[q + h])` for h = 8, 4, 2, 1), the first
 * two on half and quarter vectors. Used where no lane holds a NaN, where
 * the vector max/min pick exactly what the scalar ones pick. */
#define GK_HALF(T, U, NAME, N) \
typedef T NAME##_h##N __attribute__((vector_size(N * sizeof(T)))); \
typedef U NAME##_k##N __attribute__((vector_size(N * sizeof(T)))); \
static inline NAME##_h##N gh##N##_sum_##NAME(NAME##_h##N a, NAME##_h##N b) { return a + b; } \
static inline NAME##_h##N gh##N##_prod_##NAME(NAME##_h##N a, NAME##_h##N b) { return a * b; } \
static inline NAME##_h##N gh##N##_max_##NAME(NAME##_h##N a, NAME##_h##N b) { \
  NAME##_k##N k = (NAME##_k##N)(b > a); return (NAME##_h##N)(((NAME##_k##N)b & k) | ((NAME##_k##N)a & ~k)); } \
static inline NAME##_h##N gh##N##_min_##NAME(NAME##_h##N a, NAME##_h##N b) { \
  NAME##_k##N k = (NAME##_k##N)(b < a); return (NAME##_h##N)(((NAME##_k##N)b & k) | ((NAME##_k##N)a & ~k)); }
#define GK_TREE(T, NAME, OP) \
static inline T gt_##OP##_##NAME(const void *acc) { \
  NAME##_h8 a, b; __builtin_memcpy(&a, acc, sizeof a); __builtin_memcpy(&b, (const char *)acc + sizeof a, sizeof b); \
  a = gh8_##OP##_##NAME(a, b); \
  NAME##_h4 c, d; __builtin_memcpy(&c, &a, sizeof c); __builtin_memcpy(&d, (const char *)&a + sizeof c, sizeof d); \
  c = gh4_##OP##_##NAME(c, d); \
  T e = gr_##OP##_##NAME(c[0], c[2]), f = gr_##OP##_##NAME(c[1], c[3]); \
  return gr_##OP##_##NAME(e, f); }
#define GK_TREES(T, U, NAME) GK_HALF(T, U, NAME, 8) GK_HALF(T, U, NAME, 4) \
  GK_TREE(T, NAME, sum) GK_TREE(T, NAME, prod) GK_TREE(T, NAME, max) GK_TREE(T, NAME, min)
GK_TREES(float, uint32_t, f32)
GK_TREES(double, uint64_t, f64)
"#;

/// Streaming (non-temporal) stores, in units with a kernel that streams
/// (see [`render_unit_streaming`]): whole vectors at 16-byte aligned
/// addresses go around the caches in 16-byte pieces (`movntdq`), anything
/// else is an ordinary store; `gk_sfence` orders them before the kernel
/// returns, so another thread reading the output sees it. The bits stored
/// are the same either way.
const STREAM: &str = r#"
#if defined(__SSE2__)
#include <emmintrin.h>
static inline int gk_nt_ok(const void *p, size_t bytes) { return bytes % 16 == 0 && ((uintptr_t)p & 15) == 0; }
static inline void gk_nt16(void *p, const void *v, size_t bytes) {
  for (size_t o = 0; o < bytes; o += 16) { __m128i x; __builtin_memcpy(&x, (const char *)v + o, 16); _mm_stream_si128((__m128i *)((char *)p + o), x); } }
static inline void gk_sfence(void) { _mm_sfence(); }
#else
static inline int gk_nt_ok(const void *p, size_t bytes) { (void)p; (void)bytes; return 0; }
static inline void gk_nt16(void *p, const void *v, size_t bytes) { __builtin_memcpy(p, v, bytes); }
static inline void gk_sfence(void) {}
#endif
#define GK_STNT(T, VT, NAME) \
static inline void gk_stnt_##NAME(T *p, VT v, int64_t m) { \
  if (m == GL && gk_nt_ok(p, sizeof v)) gk_nt16(p, &v, sizeof v); else gk_st_##NAME(p, v, m); }
GK_STNT(float, vf32, f32)
GK_STNT(double, vf64, f64)
GK_STNT(int32_t, vi32, i32)
GK_STNT(int64_t, vi64, i64)
GK_STNT(uint32_t, vu32, u32)
"#;

/// The C name of a dtype's vector type and element type in memory.
fn ctype(d: DType) -> (&'static str, &'static str) {
    match d {
        // A storage type: its bits in an i32 lane (the prelude's f16 section).
        DType::F16 => ("vi32", "uint16_t"),
        DType::F32 => ("vf32", "float"),
        DType::F64 => ("vf64", "double"),
        DType::I32 => ("vi32", "int32_t"),
        DType::I64 => ("vi64", "int64_t"),
        DType::U32 => ("vu32", "uint32_t"),
        DType::Bool => ("vbool", "uint8_t"),
    }
}

/// A literal as a C vector expression (its bits from the size table when
/// rendering size-generic, see [`render_unit_sized`]).
fn lit(l: &Lit) -> String {
    if let Some(k) = table_slot(l.bits as i64) {
        return match l.dtype {
            DType::F16 => format!("gk_splat_f16((uint16_t){k})"),
            DType::F32 => format!("gk_splat_f32(gk_f32_bits((uint32_t){k}))"),
            DType::F64 => format!("gk_splat_f64(gk_f64_bits((uint64_t){k}))"),
            DType::I32 => format!("gk_splat_i32((int32_t){k})"),
            DType::I64 => format!("gk_splat_i64((int64_t){k})"),
            DType::U32 => format!("gk_splat_u32((uint32_t){k})"),
            DType::Bool => format!("gk_splat_bool((uint8_t)({k} & 1))"),
        };
    }
    match l.dtype {
        DType::F16 => format!("gk_splat_f16(0x{:04x}u)", l.bits as u16),
        DType::F32 => format!("gk_splat_f32(gk_f32_bits(0x{:08x}u))", l.bits as u32),
        DType::F64 => format!("gk_splat_f64(gk_f64_bits(0x{:016x}ull))", l.bits),
        DType::I32 => format!("gk_splat_i32((int32_t){})", l.bits as i64 as i32),
        DType::I64 => format!("gk_splat_i64((int64_t)0x{:016x}ull)", l.bits),
        DType::U32 => format!("gk_splat_u32(0x{:08x}u)", l.bits as u32),
        DType::Bool => format!("gk_splat_bool({})", l.bits & 1),
    }
}

// Note [Size-generic kernels]
// Rendered normally, a kernel's sizes, strides, offsets, window boxes, row
// lengths and literals are C constants: the compiler turns divisions by
// them into multiplications and drops dead paths. Rendered size-generic
// (`render_unit_sized`, for shapeless compilation), every such number is
// read from a per-kernel table `S` passed as the argument after the
// buffers, so kernels of the same structure at different sizes have the
// same text, hence the same cache key, and one compiled library serves
// them all (each call site passes its own table).
// Soundness rests on one rule: a number goes into the table only where
// the text around it does not depend on its value. Every decision the
// renderer takes on a value (a stride of 0 or 1, a dimension of size 1
// dropped by coalescing, an empty window) changes the text, so two
// kernels sharing text took the same decisions. A number printed as a
// constant instead only costs sharing, never
// correctness: the texts then differ.
thread_local! {
    /// The table of the kernel being rendered size-generic, else `None`.
    static TABLE: std::cell::RefCell<Option<Vec<i64>>> = const { std::cell::RefCell::new(None) };
}

/// Appends `v` to the size table when rendering size-generic and returns
/// its C expression `S[k]`.
fn table_slot(v: i64) -> Option<String> {
    TABLE.with(|t| {
        t.borrow_mut().as_mut().map(|t| {
            t.push(v);
            format!("S[{}]", t.len() - 1)
        })
    })
}

/// A size, stride or offset as C: a constant, or `S[k]` when rendering
/// size-generic (see Note [Size-generic kernels]).
fn n<T: Copy + std::fmt::Display + TryInto<i64>>(v: T) -> String {
    match v.try_into() {
        Ok(x) => table_slot(x).unwrap_or_else(|| v.to_string()),
        Err(_) => v.to_string(),
    }
}

/// Whether the kernel being rendered reads its numbers from a table.
fn sized() -> bool {
    TABLE.with(|t| t.borrow().is_some())
}

/// Renders a translation unit whose kernels read their sizes, strides,
/// offsets and literals from a table (see Note [Size-generic kernels]):
/// the source, and per kernel its table, to be passed after its buffers.
pub fn render_unit_sized(kernels: &[Kernel], lanes: usize) -> (String, Vec<Vec<i64>>) {
    let mut s = unit_head(lanes);
    let mut tables = Vec::with_capacity(kernels.len());
    for k in kernels {
        TABLE.with(|t| *t.borrow_mut() = Some(Vec::new()));
        render_kernel(&mut s, k, lanes);
        tables.push(TABLE.with(|t| t.borrow_mut().take()).unwrap_or_default());
    }
    (s, tables)
}

/// Renders a whole translation unit: the prelude (with `GL` defined) and
/// every kernel, each exported under its own name.
pub fn render_unit(kernels: &[Kernel], lanes: usize) -> String {
    let mut s = unit_head(lanes);
    for k in kernels {
        render_kernel(&mut s, k, lanes);
    }
    s
}

// Note [Streaming stores]
// A kernel whose arguments together are at least `min_bytes` (the host's
// last-level cache, `native::stream_min_bytes`) writes its large outputs
// (1 MiB and up) with non-temporal stores. An ordinary store first reads
// the line it writes (a read for ownership) and leaves it in the cache,
// evicting the inputs still to be read; a streaming store writes the line
// to memory directly. Measured on the development machine (docs/
// PERFORMANCE.md, session 16): a 16 MiB to 16 MiB pass takes half the
// time, and with a working set past the cache even a consumer that reads
// the output right after gains; below the cache size the consumer loses
// (the output is no longer in the cache), hence the threshold. Only the
// executor's top-level kernels stream: a compiled loop's kernels hand
// their outputs to the next kernel of the step, which wants them cached.
// The bits are the same either way, so streaming is a rendering choice
// like the lane count.
thread_local! {
    /// Kernels of the unit being rendered stream when their arguments
    /// total at least this many bytes (`None`: no kernel streams).
    static STREAM_MIN: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

/// Least size of an output written with streaming stores.
const STREAM_OUTPUT_MIN: usize = 1 << 20;

/// Whether kernel `k` streams its large outputs (Note [Streaming stores]).
fn streams(k: &Kernel) -> bool {
    let Some(min) = STREAM_MIN.with(|m| m.get()) else { return false };
    let bytes = |a: &super::ir::Arg| a.len.saturating_mul(a.dtype.size_bytes());
    k.args.iter().map(bytes).fold(0usize, usize::saturating_add) >= min
        && k.args.iter().any(|a| a.access == Access::Write && streamable(a.dtype) && bytes(a) >= STREAM_OUTPUT_MIN)
}

/// Whether the prelude has streaming stores for `d` (not for the types
/// whose memory lanes are narrower than their registers' lanes).
fn streamable(d: DType) -> bool {
    !matches!(d, DType::Bool | DType::F16)
}

/// The store function for argument `arg` of kernel `k`: streaming for a
/// large output of a streaming kernel, else the ordinary store.
fn store_fn(k: &Kernel, arg: u32) -> String {
    let a = &k.args[arg as usize];
    let stream = streamable(a.dtype) && a.len.saturating_mul(a.dtype.size_bytes()) >= STREAM_OUTPUT_MIN && streams(k);
    format!("{}_{}", if stream { "gk_stnt" } else { "gk_st" }, a.dtype.name())
}

/// [`render_unit`] for the executor's top-level kernels: those whose
/// arguments total at least `min_bytes` write their large outputs with
/// streaming stores (Note [Streaming stores]); `None` is [`render_unit`].
pub fn render_unit_streaming(kernels: &[Kernel], lanes: usize, min_bytes: Option<usize>) -> String {
    STREAM_MIN.with(|m| m.set(min_bytes));
    let mut s = unit_head(lanes);
    if kernels.iter().any(streams) {
        s.push_str(STREAM);
    }
    for k in kernels {
        render_kernel(&mut s, k, lanes);
    }
    STREAM_MIN.with(|m| m.set(None));
    s
}

/// The start of every unit: the graft version, `GL`, the prelude.
fn unit_head(lanes: usize) -> String {
    let mut s = String::with_capacity(16 << 10);
    let _ = writeln!(s, "/* generated by graft {} */", env!("CARGO_PKG_VERSION"));
    let _ = writeln!(s, "#define GL {lanes}");
    s.push_str("#include <stddef.h>\n#include <stdint.h>\n");
    s.push_str(PRELUDE);
    s.push_str(ACCESS);
    s
}

/// The kernels of a loop unit and, when rendering size-generic, where each
/// kernel's table starts in the loop's table (see [`loop_unit`]).
type KernelTables = Option<Vec<usize>>;

/// The start of a loop's unit: its kernels, rendered size-generic when
/// `sized`. Size-generic, the loop function gets one table holding every
/// kernel's table and then its own numbers (byte counts, extents, block
/// sizes), so the thread-local table is left holding the kernels' tables
/// and the loop function appends to it; each call passes its kernel
/// `S + offset`. The offsets depend only on the kernels' text, so they are
/// constants of the text (see Note [Size-generic kernels]).
/// A loop unit's kernels as `static` functions: only the loop function is
/// looked up in the library, and an exported kernel may be interposed by
/// another object, so GCC called each through the PLT and inlined none;
/// static, the loop calls them directly, and the one-element kernels of
/// its counter steps inline with their extent known.
fn internal(mut s: String, kernels: &[Kernel]) -> String {
    for k in kernels {
        let head = format!("\nvoid {}(int64_t start, int64_t end, void *const *args) {{", k.name);
        let stat = format!("\nstatic void {}(int64_t start, int64_t end, void *const *args) {{", k.name);
        s = s.replacen(&head, &stat, 1);
    }
    s
}

fn loop_unit(kernels: &[Kernel], lanes: usize, sized: bool) -> (String, KernelTables) {
    if !sized {
        return (internal(render_unit(kernels, lanes), kernels), None);
    }
    let (s, tables) = render_unit_sized(kernels, lanes);
    let s = internal(s, kernels);
    let mut all = Vec::new();
    let mut offsets = Vec::with_capacity(tables.len());
    for t in tables {
        offsets.push(all.len());
        all.extend(t);
    }
    TABLE.with(|t| *t.borrow_mut() = Some(all));
    (s, Some(offsets))
}

/// Ends a loop unit: the loop's table when rendering size-generic.
fn loop_table(offsets: &KernelTables) -> Option<Vec<i64>> {
    offsets.as_ref().map(|_| TABLE.with(|t| t.borrow_mut().take()).unwrap_or_default())
}

/// Declares the loop function's table `S` (argument `at`) when sized.
fn table_setup(s: &mut String, offsets: &KernelTables, at: usize) {
    if offsets.is_some() {
        let _ = writeln!(s, "  const int64_t *S = (const int64_t *)args[{at}];\n  (void)S;");
    }
}

/// Renders a compiled loop (see `kernel::loops`): its kernels, then the
/// loop function `NAME(start, end, args)` running steps `0..end - start`.
/// Arguments: the scan's operands (consts, initial carry, stacked `xs`),
/// its results (final carry, stacked `ys`), two buffers per carry (the
/// work sets, see [`carry_setup`]), the scratch buffers, the static values,
/// the host-call table (`kernel::host`).
pub fn render_loop(p: &LoopProgram, lanes: usize) -> String {
    render_loop_unit(p, lanes, false).0
}

/// [`render_loop`] size-generic (see Note [Size-generic kernels]): the
/// source, whose loop function takes one more argument after the host-call
/// table, and that argument's table.
pub fn render_loop_sized(p: &LoopProgram, lanes: usize) -> (String, Vec<i64>) {
    let (s, t) = render_loop_unit(p, lanes, true);
    (s, t.unwrap_or_default())
}

fn render_loop_unit(p: &LoopProgram, lanes: usize, sized: bool) -> (String, Option<Vec<i64>>) {
    let (mut s, offsets) = loop_unit(&p.kernels, lanes, sized);
    let (nc, nk, nx, ny) = (p.n_consts, p.n_carry, p.n_xs, p.n_ys);
    let bytes = |(d, n): (DType, usize)| self::n(n * d.size_bytes());
    let out0 = nc + nk + nx;
    let pp0 = out0 + nk + ny;
    let sc0 = pp0 + 2 * nk;
    let st0 = sc0 + p.scratch.len();
    let ptr = |l: &Loc| match *l {
        Loc::Const(j) => format!("(char *)args[{j}]"),
        Loc::CarryIn(j) => format!("cin[{j}]"),
        Loc::Xs(j) => format!("(char *)args[{}] + t * {}", nc + nk + j, bytes(p.params[nc + nk + j])),
        Loc::Scratch(j) => format!("(char *)args[{}]", sc0 + j),
        Loc::Static(j) => format!("(char *)args[{}]", st0 + j),
        Loc::CarryOut(j) => format!("cout[{j}]"),
        Loc::Ys(j) => format!("(char *)args[{}] + t * {}", out0 + nk + j, bytes(p.outputs[nk + j])),
    };
    let _ = writeln!(s, "\nvoid {}(int64_t start, int64_t end, void *const *args) {{", p.name);
    let _ = writeln!(s, "  const int64_t n = end - start;");
    host_setup(&mut s, st0 + p.statics.len());
    table_setup(&mut s, &offsets, st0 + p.statics.len() + 1);
    carry_setup(&mut s, p, pp0);
    let _ = writeln!(s, "  for (int64_t it = 0; it < n; it++) {{");
    let t = if p.reverse { "n - 1 - it" } else { "it" };
    let _ = writeln!(s, "    const int64_t t = {t};\n    (void)t;");
    carry_next(&mut s, p, Some(("it == n - 1", out0)));
    step_calls(&mut s, p, 0, offsets.as_deref(), &ptr);
    // Results not written in place: ys first (they may read the next
    // carry set), then the carries, then the swap.
    for j in 0..ny {
        let l = p.out_loc[nk + j];
        if l != Loc::Ys(j) {
            let _ =
                writeln!(s, "    __builtin_memcpy({}, {}, {});", ptr(&Loc::Ys(j)), ptr(&l), bytes(p.outputs[nk + j]));
        }
    }
    carry_swap(&mut s, p, &ptr);
    let _ = writeln!(s, "  }}");
    carry_results(&mut s, p, out0);
    let _ = writeln!(s, "}}");
    let table = loop_table(&offsets);
    (s, table)
}

/// The carries of a loop function: `cin` is the set a step reads,
/// `cout` the set it writes. The first step reads the initial carries in
/// place (arguments `nc..nc + nk`, never written) and later steps
/// alternate between the two work sets at arguments `pp0..pp0 + 2 nk`
/// (interleaved); [`carry_next`] picks each step's `cout`. So a loop copies
/// no carry in (for a one-step loop over large vectors, such as an ODE
/// solver's single RK4 step, the copies were a fifth of its time).
fn carry_setup(s: &mut String, p: &LoopProgram, pp0: usize) {
    let (nc, nk) = (p.n_consts, p.n_carry);
    let _ = writeln!(s, "  char *cin[{0}], *cout[{0}], *cw0[{0}], *cw1[{0}];", nk.max(1));
    let _ = writeln!(s, "  (void)cin; (void)cout; (void)cw0; (void)cw1;");
    for j in 0..nk {
        let _ = writeln!(
            s,
            "  cin[{j}] = (char *)args[{}]; cw0[{j}] = (char *)args[{}]; cw1[{j}] = (char *)args[{}];",
            nc + j,
            pp0 + 2 * j,
            pp0 + 2 * j + 1
        );
    }
}

/// The start of a step: each carry's `cout`, the work set `cin` is not
/// (the initial carries are read in place and never written), or, where
/// `last` (a C condition) holds, the result at argument `out0 + j`
/// itself, so the final carries need no copy either.
fn carry_next(s: &mut String, p: &LoopProgram, last: Option<(&str, usize)>) {
    for j in 0..p.n_carry {
        let work = format!("(cin[{j}] == cw0[{j}] ? cw1[{j}] : cw0[{j}])");
        match last {
            Some((cond, out0)) => {
                let _ = writeln!(s, "    cout[{j}] = ({cond}) ? (char *)args[{}] : {work};", out0 + j);
            }
            None => {
                let _ = writeln!(s, "    cout[{j}] = {work};");
            }
        }
    }
}

/// The host-call table (`kernel::host::HostTable`), the loop function's
/// argument `at`.
fn host_setup(s: &mut String, at: usize) {
    let _ = writeln!(s, "  const graft_host *host = (const graft_host *)args[{at}];\n  (void)host;");
}

/// A kernel call's argument list: its buffers at `ptr` of their
/// locations, then its table when rendering size-generic (`offsets`: where
/// each of the program's kernels' tables starts in the loop's `S`).
fn call_args(call: &loops::Call, k: usize, offsets: Option<&[usize]>, ptr: &dyn Fn(&Loc) -> String) -> String {
    let mut args: Vec<String> = call.args.iter().map(|l| format!("(void *)({})", ptr(l))).collect();
    if let Some(o) = offsets {
        args.push(format!("(void *)(S + {})", o[k]));
    }
    args.join(", ")
}

/// One step's calls, each argument at `ptr` of its location: kernels
/// directly, host calls through the table (`p`'s host `j` is the table's
/// `host_base + j`).
fn step_calls(
    s: &mut String,
    p: &LoopProgram,
    host_base: usize,
    offsets: Option<&[usize]>,
    ptr: &dyn Fn(&Loc) -> String,
) {
    let runs = blocks::runs(p);
    let mut c = 0;
    while c < p.calls.len() {
        if let Some(run) = runs.iter().find(|r| r.calls.start == c) {
            blocked_run(s, p, run, offsets, ptr);
            c = run.calls.end;
            continue;
        }
        let call = &p.calls[c];
        match call.callee {
            Callee::Kernel(k) => {
                let _ = writeln!(
                    s,
                    "    {{ void *const a[] = {{ {} }}; {}(0, {}, a); }}",
                    call_args(call, k, offsets, ptr),
                    p.kernels[k].name,
                    n(p.kernels[k].extent)
                );
            }
            Callee::Host(j) => {
                let args: Vec<String> = call.args.iter().map(|l| format!("(void *)({})", ptr(l))).collect();
                let _ = writeln!(
                    s,
                    "    {{ void *const a[] = {{ {} }}; host->call(host->ctx, {}, a); }}",
                    args.join(", "),
                    host_base + j
                );
            }
        }
        c += 1;
    }
}

/// A run of calls executed block by block (see `loops::blocks`): for each
/// block end `e`, call `j` continues from where it stopped (`dj`) up to
/// `e + lead_j`.
fn blocked_run(
    s: &mut String,
    p: &LoopProgram,
    run: &blocks::Run,
    offsets: Option<&[usize]>,
    ptr: &dyn Fn(&Loc) -> String,
) {
    let _ = writeln!(s, "    {{");
    for (j, c) in run.calls.clone().enumerate() {
        let Callee::Kernel(k) = p.calls[c].callee else { unreachable!("loops::blocks runs hold kernel calls only") };
        let _ = writeln!(
            s,
            "      void *const a{j}[] = {{ {} }}; int64_t d{j} = 0;",
            call_args(&p.calls[c], k, offsets, ptr)
        );
    }
    let _ = writeln!(s, "      const int64_t bn = {}, bs = {};", n(run.extent), n(run.block));
    let _ = writeln!(s, "      for (int64_t e = bs; ; e += bs) {{");
    for (j, c) in run.calls.clone().enumerate() {
        let Callee::Kernel(k) = p.calls[c].callee else { unreachable!("loops::blocks runs hold kernel calls only") };
        let _ = writeln!(
            s,
            "        {{ int64_t h = e + {}; if (h > bn) h = bn; if (h > d{j}) {{ {}(d{j}, h, a{j}); d{j} = h; }} }}",
            n(run.leads[j]),
            p.kernels[k].name
        );
    }
    let _ = writeln!(s, "        if (e >= bn) break;\n      }}\n    }}");
}

/// The end of a step: carries the body did not write in place are copied
/// into `cout`, which becomes the next step's `cin`.
fn carry_swap(s: &mut String, p: &LoopProgram, ptr: &dyn Fn(&Loc) -> String) {
    let nk = p.n_carry;
    for j in 0..nk {
        let l = p.out_loc[j];
        if l != Loc::CarryOut(j) {
            let (d, len) = p.outputs[j];
            let _ = writeln!(s, "    __builtin_memcpy(cout[{j}], {}, {});", ptr(&l), n(len * d.size_bytes()));
        }
    }
    for j in 0..nk {
        let _ = writeln!(s, "    cin[{j}] = cout[{j}];");
    }
}

/// After the last step: the final carries (in `cin`) into the results at
/// arguments `out0..out0 + nk`, unless the last step wrote them there
/// (`cin` is the result already).
fn carry_results(s: &mut String, p: &LoopProgram, out0: usize) {
    for j in 0..p.n_carry {
        let (d, len) = p.outputs[j];
        let _ = writeln!(
            s,
            "  if (cin[{j}] != (char *)args[{0}]) __builtin_memcpy(args[{0}], cin[{j}], {1});",
            out0 + j,
            n(len * d.size_bytes())
        );
    }
}

/// A while loop's native function (see `loops::whiles`): `cond`'s calls,
/// a test of the predicate, the body's calls, the carry swap, until the
/// predicate is false.
///
/// Arguments (`run_program`'s order): consts (`nc`), initial carries
/// (`nk`), final carries (`nk`), the two carry sets (`2 nk`, interleaved),
/// the body's scratch, `cond`'s scratch, the trip count (one `int64_t`
/// written at the end), the body's statics, `cond`'s statics, the
/// host-call table (the body's host calls, then `cond`'s), and when
/// size-generic ([`render_while_sized`]) the table. `start` and `end` are
/// unused.
pub fn render_while(w: &WhileProgram, lanes: usize) -> String {
    render_while_unit(w, lanes, false).0
}

/// [`render_while`] size-generic: the source and the table it takes.
pub fn render_while_sized(w: &WhileProgram, lanes: usize) -> (String, Vec<i64>) {
    let (s, t) = render_while_unit(w, lanes, true);
    (s, t.unwrap_or_default())
}

fn render_while_unit(w: &WhileProgram, lanes: usize, sized: bool) -> (String, Option<Vec<i64>>) {
    let (c, b) = (&w.cond, &w.body);
    let mut kernels = b.kernels.clone();
    kernels.extend(c.kernels.iter().cloned());
    let (mut s, offsets) = loop_unit(&kernels, lanes, sized);
    let (body_offsets, cond_offsets) = match &offsets {
        Some(o) => (Some(&o[..b.kernels.len()]), Some(&o[b.kernels.len()..])),
        None => (None, None),
    };
    let (nc, nk) = (b.n_consts, b.n_carry);
    let out0 = nc + nk;
    let pp0 = out0 + nk;
    let bsc0 = pp0 + 2 * nk;
    let csc0 = bsc0 + b.scratch.len();
    let trips = csc0 + c.scratch.len();
    let bst0 = trips + 1;
    let cst0 = bst0 + b.statics.len();
    // `Xs` never occurs (neither program has `xs`) and `Ys(0)` only in
    // `cond` (its predicate, kept in `pred`); `loops::whiles::build`
    // checks both.
    let ptr = |l: &Loc, in_cond: bool| match *l {
        Loc::Const(j) => format!("(char *)args[{j}]"),
        Loc::CarryIn(j) => format!("cin[{j}]"),
        Loc::Scratch(j) => format!("(char *)args[{}]", if in_cond { csc0 } else { bsc0 } + j),
        Loc::Static(j) => format!("(char *)args[{}]", if in_cond { cst0 } else { bst0 } + j),
        Loc::CarryOut(j) => format!("cout[{j}]"),
        Loc::Xs(_) | Loc::Ys(_) => "(char *)pred".to_string(),
    };
    let _ = writeln!(s, "\nvoid {}(int64_t start, int64_t end, void *const *args) {{", w.name);
    let _ = writeln!(s, "  (void)start; (void)end;");
    let _ = writeln!(s, "  uint8_t pred[64] __attribute__((aligned(64))) = {{0}};");
    let _ = writeln!(s, "  int64_t trips = 0;");
    let _ = writeln!(s, "  (void)pred;");
    host_setup(&mut s, cst0 + c.statics.len());
    table_setup(&mut s, &offsets, cst0 + c.statics.len() + 1);
    carry_setup(&mut s, b, pp0);
    let _ = writeln!(s, "  for (;;) {{");
    step_calls(&mut s, c, b.hosts.len(), cond_offsets, &|l| ptr(l, true));
    let _ = writeln!(s, "    if (!*(const uint8_t *)({})) break;", ptr(&c.out_loc[0], true));
    carry_next(&mut s, b, None);
    step_calls(&mut s, b, 0, body_offsets, &|l| ptr(l, false));
    carry_swap(&mut s, b, &|l| ptr(l, false));
    let _ = writeln!(s, "    trips++;");
    let _ = writeln!(s, "  }}");
    carry_results(&mut s, b, out0);
    let _ = writeln!(s, "  *(int64_t *)args[{trips}] = trips;");
    let _ = writeln!(s, "}}");
    let table = loop_table(&offsets);
    (s, table)
}

fn render_kernel(s: &mut String, k: &Kernel, lanes: usize) {
    if k.body.iter().any(|i| matches!(i, Inst::Reduce(_) | Inst::Map(_))) {
        return render_row_kernel(s, k);
    }
    let types = super::ir::verify(k).unwrap_or_default();
    let _ = writeln!(s, "\nvoid {}(int64_t start, int64_t end, void *const *args) {{", k.name);
    for (i, a) in k.args.iter().enumerate() {
        let (_, t) = ctype(a.dtype);
        let c = if a.access == Access::Read { "const " } else { "" };
        let _ = writeln!(s, "  {c}{t} *restrict a{i} = ({c}{t} *)args[{i}];");
    }
    if sized() {
        let _ = writeln!(s, "  const int64_t *restrict S = (const int64_t *)args[{}];", k.args.len());
    }
    for (r, inst) in k.body.iter().enumerate() {
        if hoisted(inst) {
            let (vt, _) = ctype(types.get(r).copied().flatten().unwrap_or(DType::F32));
            let _ = writeln!(s, "  const {vt} r{r} = {};", expr(k, inst, &types));
        }
    }
    // The body runs with `m == GL` known at compile time in the main loop
    // (loads and stores of whole vectors stay in registers; a run-time `m`
    // sends them through the stack) and once more for the partial tail:
    // the same instructions at every point.
    let vtype = |r: usize| ctype(types.get(r).copied().flatten().unwrap_or(DType::F32)).0;
    // One instruction as a statement; `inside` is the interior segment's
    // window table (see Note [Interior steps]).
    let statement = |body: &mut String, r: usize, inside: Option<&Vec<bool>>| {
        let inst = &k.body[r];
        match inst {
            Inst::Store { arg, value, index: Index::Strided { dims, strides, offset } } => {
                let d = k.args[*arg as usize].dtype;
                let _ = writeln!(body, "    {}", strided_store(*arg, *value, d, dims, strides, *offset));
            }
            Inst::Store { arg, value, .. } => {
                let _ = writeln!(body, "    {}(a{arg} + i, r{value}, m);", store_fn(k, *arg));
            }
            _ => {
                let e = inside.and_then(|inside| interior_expr(k, inst, inside[r]));
                let e = e.unwrap_or_else(|| expr(k, inst, &types));
                let _ = writeln!(body, "    const {} r{r} = {e};", vtype(r));
            }
        }
    };
    let mut body = String::new();
    for (r, inst) in k.body.iter().enumerate() {
        if !hoisted(inst) {
            statement(&mut body, r, None);
        }
    }
    let _ = writeln!(s, "  int64_t i = start;");
    let segment = (!sized()).then(|| interior::segment(k, lanes)).flatten();
    match &segment {
        None => {
            let _ = writeln!(s, "  for (; i + GL <= end; i += GL) {{");
            let _ = writeln!(s, "    const int64_t m = GL;\n    (void)m;");
            s.push_str(&prefetches(k));
            s.push_str(&body);
            let _ = writeln!(s, "  }}");
        }
        Some(seg) => interior_steps(s, k, seg, lanes, &body, &|s, r| statement(s, r, Some(&seg.inside)), &vtype),
    }
    let _ = writeln!(s, "  if (i < end) {{");
    let _ = writeln!(s, "    const int64_t m = end - i;\n    (void)m;");
    s.push_str(&body);
    let _ = writeln!(s, "  }}");
    if streams(k) {
        let _ = writeln!(s, "  gk_sfence();");
    }
    let _ = writeln!(s, "}}");
}

// Note [Prefetching]
// An elementwise kernel whose inputs stream from the last-level cache or
// memory computes and loads in turns: the hardware prefetcher runs a
// short distance ahead, and a long dependency chain in the body (a
// division in `tanh`, say) stalls the loads behind it, so the two costs
// add up. A software prefetch `PREFETCH_BYTES` ahead of each large input
// read in step keeps the loads in flight while the body computes.
// Measured on the development machine (docs/PERFORMANCE.md, session 27):
// the ten-op chain's kernel over 1M f32 from 590 to 527 us, 4M from 2.38
// to 2.09 ms, 256K 133 to 126 us, level below. Inputs under
// `PREFETCH_MIN` bytes are left to the cache. The bits are the same either
// way: prefetching is a rendering choice like streaming.

/// How far ahead of the current step an input is prefetched, in bytes.
const PREFETCH_BYTES: usize = 2048;

/// Least size of an input that is prefetched (Note [Prefetching]).
const PREFETCH_MIN: usize = 256 << 10;

/// The prefetch statements of one full step of elementwise kernel `k`:
/// one per large argument read at the step's own points.
fn prefetches(k: &Kernel) -> String {
    let mut read = vec![false; k.args.len()];
    for inst in &k.body {
        if let Inst::Load { arg, index: Index::Point } = inst {
            read[*arg as usize] = true;
        }
    }
    let mut s = String::new();
    for (i, a) in k.args.iter().enumerate() {
        let size = a.dtype.size_bytes();
        if read[i] && a.len.saturating_mul(size) >= PREFETCH_MIN {
            let _ = writeln!(s, "    __builtin_prefetch(a{i} + i + {});", PREFETCH_BYTES / size);
        }
    }
    s
}

/// Loop-invariant values of an elementwise kernel (literals, scalar
/// loads), computed once before its steps.
fn hoisted(inst: &Inst) -> bool {
    matches!(inst, Inst::Lit(_) | Inst::Load { index: Index::Scalar, .. })
}

/// The full vector steps of a kernel with an interior segment (see Note
/// [Interior steps] and Note [Shifted reuse] in `interior`): one loop of
/// checked steps (`body`) that hands over to a loop of interior steps
/// where they begin. With a reuse plan, the interior loop starts once the
/// step before lies in the segment too (the checked body computes the
/// carried registers' values there, which are the segment's); each step
/// keeps its carried vectors for the next. `statement` renders one
/// instruction of the interior body, `vtype` names a register's vector
/// type. Leaves `i` at the first point after the last full step.
fn interior_steps(
    s: &mut String,
    k: &Kernel,
    seg: &interior::Segment,
    lanes: usize,
    body: &str,
    statement: &dyn Fn(&mut String, usize),
    vtype: &dyn Fn(usize) -> &'static str,
) {
    let (lo, hi) = (seg.lo, seg.hi);
    let _ = writeln!(s, "  const int64_t ilo = start < {lo} ? {lo} : start, ihi = end > {hi} ? {hi} : end;");
    let plan = interior::reuse_plan(k, seg, lanes);
    let carried: &[u32] = plan.as_ref().map_or(&[], |p| &p.carried);
    for &c in carried {
        let _ = writeln!(s, "  {} p{c} = {{0}};", vtype(c as usize));
    }
    let keep = carried.iter().map(|c| format!(" p{c} = r{c};")).collect::<String>();
    // The first interior step: at `ilo`, or one later when it reads the
    // step before.
    let first = if plan.is_some() { "i - GL >= ilo" } else { "i >= ilo" };
    let _ = writeln!(s, "  while (i + GL <= end) {{");
    let _ = writeln!(s, "   if ({first} && i + GL <= ihi) {{");
    let _ = writeln!(s, "    for (; i + GL <= ihi; i += GL) {{");
    let _ = writeln!(s, "    const int64_t m = GL;\n    (void)m;");
    match &plan {
        None => {
            for (r, inst) in k.body.iter().enumerate() {
                if !hoisted(inst) {
                    statement(s, r);
                }
            }
        }
        Some(plan) => {
            for &r in &plan.order {
                if hoisted(&k.body[r]) {
                    continue;
                }
                match plan.how[r] {
                    Reuse::Compute => statement(s, r),
                    Reuse::Alias(f) => {
                        let _ = writeln!(s, "    const {} r{r} = r{f};", vtype(r));
                    }
                    Reuse::Shift { from, delta } => {
                        let mask = if vtype(r).ends_with("64") { "vi64" } else { "vi32" };
                        let lanes_from =
                            (0..lanes).map(|j| (lanes - delta + j).to_string()).collect::<Vec<_>>().join(", ");
                        let _ = writeln!(
                            s,
                            "    const {} r{r} = GK_LAG({mask}, p{from}, r{from}, {lanes_from});",
                            vtype(r)
                        );
                    }
                }
            }
        }
    }
    let _ = writeln!(s, "   {keep}\n    }}\n    continue;\n   }}");
    let _ = writeln!(s, "   {{\n    const int64_t m = GL;\n    (void)m;");
    s.push_str(body);
    let _ = writeln!(s, "   {keep}\n   }}\n   i += GL;\n  }}");
}

/// The C expression of a window load or inside test at a whole vector
/// step of its kernel's interior segment (see Note [Interior steps] in `interior`),
/// given whether its window holds the segment; `None` for any other
/// instruction, and for a window of no dimensions, which reads the same
/// way everywhere.
fn interior_expr(k: &Kernel, inst: &Inst, inside: bool) -> Option<String> {
    match inst {
        Inst::Window { arg, window, fill } => {
            let w = window.coalesced();
            if w.dims.len() != 1 {
                return None;
            }
            if !inside {
                return Some(format!("r{fill}"));
            }
            let d = k.args[*arg as usize].dtype;
            let (vt, _) = ctype(d);
            let (dn, lt) = (d.name(), lane_type(d));
            let (off, lo) = (n(w.offset), n(w.lo[0]));
            Some(match w.strides[0] {
                1 => format!("gk_ld_{dn}(a{arg} + {off} + (i - {lo}), GL)"),
                st => {
                    let e = format!("{off} + (i + l - {lo}) * {}", n(st));
                    let get = if d == DType::Bool { format!("(a{arg}[{e}] ? -1 : 0)") } else { format!("a{arg}[{e}]") };
                    format!("({{ {lt} b[GL]; for (int64_t l = 0; l < GL; l++) b[l] = {get}; {vt} v; __builtin_memcpy(&v, b, sizeof v); v; }})")
                }
            })
        }
        Inst::Inside(window) if window.coalesced().dims.len() == 1 => {
            Some(format!("gk_splat_bool({})", i32::from(inside)))
        }
        _ => None,
    }
}

/// How a body's instructions are spelled: which names hold the arguments,
/// the point index and the registers, and whether the body runs `GL`
/// points per step (`m` of them valid) or one row at a time (values are
/// splats; the outer body of a row kernel).
struct Spell {
    args: &'static str,
    reg: char,
    single: bool,
}

const POINTS: Spell = Spell { args: "a", reg: 'r', single: false };
const ROW: Spell = Spell { args: "c->a", reg: 'r', single: true };
const INNER: Spell = Spell { args: "c->a", reg: 'q', single: false };

fn reduce_name(kind: ReduceKind) -> &'static str {
    match kind {
        ReduceKind::Sum => "sum",
        ReduceKind::Max => "max",
        ReduceKind::Min => "min",
        ReduceKind::Prod => "prod",
    }
}

/// A row kernel (see `ir`, "Row kernels"): a context struct holding the
/// argument pointers and the outer values inner bodies read; per
/// reduction an evaluation function (its inner body at `GL` points), a
/// leaf and a recursive tree that reproduce `ops::reduce`'s order exactly
/// (halving to leaves of at most 256 points; a leaf folds 16 interleaved
/// lanes, combines them pairwise and folds the rest in order, redoing the
/// leaf in order with the NaN-propagating combiner when a max/min saw a
/// NaN); then the kernel: one row per iteration, maps as vector loops.
fn render_row_kernel(s: &mut String, k: &Kernel) {
    let name = &k.name;
    let types = super::ir::verify(k).unwrap_or_default();
    let ty = |r: usize| types.get(r).copied().flatten().unwrap_or(DType::F32);
    // Register dtypes of every inner body, and the scratch slots' dtypes,
    // checked in body order (as `verify` did).
    let mut slots: Vec<DType> = Vec::new();
    let mut inner_types: Vec<Vec<Option<DType>>> = vec![Vec::new(); k.body.len()];
    for (r, inst) in k.body.iter().enumerate() {
        let inner = match inst {
            Inst::Reduce(red) => &red.inner,
            Inst::Map(m) => &**m,
            _ => continue,
        };
        let mut none = vec![false; k.args.len()];
        inner_types[r] =
            body_types(k, &inner.body, Some((inner.len, &types)), &mut none, &mut slots).unwrap_or_default();
    }
    let len = k.body.iter().find_map(|i| match i {
        Inst::Reduce(red) => Some(red.inner.len),
        Inst::Map(m) => Some(m.len),
        _ => None,
    });
    let _ = writeln!(s, "\nstruct {name}_c {{");
    let _ = writeln!(s, "  int64_t base;");
    if sized() {
        let _ = writeln!(s, "  const int64_t *S;");
    }
    for (slot, d) in slots.iter().enumerate() {
        let _ = writeln!(s, "  {} *restrict s{slot};", ctype(*d).1);
    }
    for (i, a) in k.args.iter().enumerate() {
        let (_, t) = ctype(a.dtype);
        let c = if a.access == super::ir::Access::Read { "const " } else { "" };
        let _ = writeln!(s, "  {c}{t} *restrict a{i};");
    }
    for (r, inst) in k.body.iter().enumerate() {
        if !matches!(inst, Inst::Store { .. } | Inst::Map(_)) {
            let _ = writeln!(s, "  {} o{r};", ctype(ty(r)).0);
        }
    }
    let _ = writeln!(s, "}};");
    // Reductions: evaluation, leaf and tree functions.
    for (r, inst) in k.body.iter().enumerate() {
        let Inst::Reduce(red) = inst else { continue };
        render_reduction(s, k, r, red, &inner_types[r]);
    }
    let _ = writeln!(s, "\nvoid {name}(int64_t start, int64_t end, void *const *args) {{");
    let _ = writeln!(s, "  struct {name}_c cc, *const c = &cc;");
    if sized() {
        let _ = writeln!(s, "  const int64_t *S = (const int64_t *)args[{}];\n  c->S = S;", k.args.len());
    }
    for (slot, d) in slots.iter().enumerate() {
        let _ = writeln!(s, "  {} s{slot}_buf[{}] __attribute__((aligned(64)));", ctype(*d).1, n(len.unwrap_or(1)));
        let _ = writeln!(s, "  c->s{slot} = s{slot}_buf;");
    }
    for (i, a) in k.args.iter().enumerate() {
        let (_, t) = ctype(a.dtype);
        let c = if a.access == super::ir::Access::Read { "const " } else { "" };
        let _ = writeln!(s, "  c->a{i} = ({c}{t} *)args[{i}];");
    }
    // Short reductions that read only the kernel's arguments run `GL` rows
    // at a time before the rows that use them (see `across_rows`).
    let early: Vec<usize> = k
        .body
        .iter()
        .enumerate()
        .filter_map(|(r, inst)| match inst {
            Inst::Reduce(red) if across_rows(red) => Some(r),
            _ => None,
        })
        .collect();
    if early.is_empty() {
        let _ = writeln!(s, "  for (int64_t row = start; row < end; row++) {{");
    } else {
        let _ = writeln!(s, "  for (int64_t row0 = start; row0 < end; row0 += GL) {{");
        let _ = writeln!(s, "  const int64_t rend = end - row0 < GL ? end : row0 + GL;");
        for &r in &early {
            let Inst::Reduce(red) = &k.body[r] else { continue };
            across_rows_block(s, k, r, red, ty(r));
        }
        let _ = writeln!(s, "  for (int64_t row = row0; row < rend; row++) {{");
    }
    let _ = writeln!(s, "    c->base = row * {};", n(len.unwrap_or(1)));
    for (r, inst) in k.body.iter().enumerate() {
        match inst {
            Inst::Store { arg, value, .. } => {
                let d = k.args[*arg as usize].dtype;
                let v = if d == DType::Bool { format!("(uint8_t)(r{value}[0] & 1)") } else { format!("r{value}[0]") };
                let _ = writeln!(s, "    c->a{arg}[row] = {v};");
            }
            Inst::Map(m) => render_map(s, k, m, &inner_types[r]),
            Inst::Reduce(_) if early.contains(&r) => {
                let (vt, _) = ctype(ty(r));
                let _ = writeln!(s, "    const {vt} r{r} = gk_splat_{}(p{r}[row - row0]);", ty(r).name());
                let _ = writeln!(s, "    c->o{r} = r{r};");
            }
            Inst::Reduce(red) => {
                let (vt, _) = ctype(ty(r));
                let len = n(red.inner.len);
                let _ =
                    writeln!(s, "    const {vt} r{r} = gk_splat_{}({name}_t{r}(c, row * {len}, {len}));", ty(r).name());
                let _ = writeln!(s, "    c->o{r} = r{r};");
            }
            _ => {
                let (vt, _) = ctype(ty(r));
                let _ = writeln!(s, "    const {vt} r{r} = {};", spell(k, inst, &types, &ROW));
                let _ = writeln!(s, "    c->o{r} = r{r};");
            }
        }
    }
    let _ = writeln!(s, "  }}");
    if !early.is_empty() {
        let _ = writeln!(s, "  }}");
    }
    if streams(k) {
        let _ = writeln!(s, "  gk_sfence();");
    }
    let _ = writeln!(s, "}}");
}

/// Whether a reduction of a row kernel runs across rows: rows shorter than
/// `ops::reduce`'s 16 lanes, which the interpreter folds in order from the
/// first element (`fold_run`), and an inner body that reads only the
/// kernel's arguments (no outer value, no scratch slot), so it can run
/// ahead of the outer body of its rows. Folding one row per lane turns a
/// scalar chain of `len - 1` NaN-aware combines per row into one vector
/// chain per `GL` rows (k-means' `min` over 10 centroids).
///
/// Size-generic (see Note [Size-generic kernels]) the row length is a
/// table entry, so the choice cannot depend on it without changing the
/// text per size: every reduction that reads only arguments takes the
/// block form, whose run-time test `len < 16` picks the lanes or the
/// per-row tree.
fn across_rows(red: &Reduction) -> bool {
    (sized() || (1..16).contains(&red.inner.len))
        && red
            .inner
            .body
            .iter()
            .all(|i| !matches!(i, Inst::Outer(_) | Inst::Save { .. } | Inst::Restore(_) | Inst::Store { .. }))
}

/// The values of reduction `r` (see [`across_rows`]) for rows `row0..rend`
/// into `p<r>[row - row0]`: for a whole block of `GL` rows, the inner body
/// at the block's `GL * len` consecutive points (`len` full vectors) into a
/// buffer, then lane `l` folds row `row0 + l` in order, `a = x[0]`,
/// `a = op(a, x[j])`, exactly as `fold_run` (the lane-wise `grn_`
/// combiners are the scalar ones); a partial block reduces row by row.
fn across_rows_block(s: &mut String, k: &Kernel, r: usize, red: &Reduction, d: DType) {
    let name = &k.name;
    let (vt, t) = ctype(d);
    let dn = d.name();
    let op = reduce_name(red.kind);
    let len = n(red.inner.len);
    let _ = writeln!(s, "  {t} p{r}[GL];");
    let _ = writeln!(s, "  if (rend - row0 == GL && {len} < 16) {{");
    let _ = writeln!(s, "    {t} b[16 * GL];");
    let _ = writeln!(s, "    for (int64_t v = 0; v < {len}; v++) {{ {vt} x = {name}_e{r}(c, row0 * {len} + v * GL, GL); __builtin_memcpy(b + v * GL, &x, sizeof x); }}");
    let _ = writeln!(s, "    {vt} a;");
    let _ = writeln!(s, "    for (int l = 0; l < GL; l++) a[l] = b[l * {len}];");
    let _ = writeln!(s, "    for (int64_t j = 1; j < {len}; j++) {{ {vt} x; for (int l = 0; l < GL; l++) x[l] = b[l * {len} + j]; a = grn_{op}_{dn}(a, x); }}");
    let _ = writeln!(s, "    __builtin_memcpy(p{r}, &a, sizeof a);");
    let _ = writeln!(s, "  }} else {{");
    let _ = writeln!(
        s,
        "    for (int64_t row = row0; row < rend; row++) p{r}[row - row0] = {name}_t{r}(c, row * {len}, {len});"
    );
    let _ = writeln!(s, "  }}");
}

/// The inner body's instructions as C statements (registers `q<r>`), at
/// the `GL` points from `i` (`m` of them valid).
fn inner_statements(s: &mut String, k: &Kernel, inner: &Inner, it: &[Option<DType>], indent: &str) {
    let ty = |q: u32| it.get(q as usize).copied().flatten().unwrap_or(DType::F32);
    for (q, inst) in inner.body.iter().enumerate() {
        match inst {
            Inst::Store { arg, value, .. } => {
                let _ = writeln!(s, "{indent}{}(c->a{arg} + i, q{value}, m);", store_fn(k, *arg));
            }
            Inst::Save { slot, value } => {
                let _ = writeln!(s, "{indent}gk_st_{}(c->s{slot} + (i - c->base), q{value}, m);", ty(*value).name());
            }
            Inst::Restore(slot) => {
                let d = ty(q as u32);
                let _ = writeln!(
                    s,
                    "{indent}const {} q{q} = gk_ld_{}(c->s{slot} + (i - c->base), m);",
                    ctype(d).0,
                    d.name()
                );
            }
            _ => {
                let (vt, _) = ctype(ty(q as u32));
                let _ = writeln!(s, "{indent}const {vt} q{q} = {};", spell(k, inst, it, &INNER));
            }
        }
    }
}

fn render_map(s: &mut String, k: &Kernel, m: &Inner, it: &[Option<DType>]) {
    let len = n(m.len);
    // Whole vectors with `m == GL` known, then the partial tail (dead code
    // when GL divides the row), as in the elementwise kernels.
    let _ = writeln!(s, "    int64_t kk = 0;");
    let _ = writeln!(s, "    for (; kk + GL <= {len}; kk += GL) {{");
    let _ = writeln!(s, "      const int64_t i = row * {len} + kk, m = GL;");
    let _ = writeln!(s, "      (void)m;");
    inner_statements(s, k, m, it, "      ");
    let _ = writeln!(s, "    }}");
    let _ = writeln!(s, "    if (kk < {len}) {{");
    let _ = writeln!(s, "      const int64_t i = row * {len} + kk, m = {len} - kk;");
    let _ = writeln!(s, "      (void)m;");
    inner_statements(s, k, m, it, "      ");
    let _ = writeln!(s, "    }}");
}

fn render_reduction(s: &mut String, k: &Kernel, r: usize, red: &Reduction, it: &[Option<DType>]) {
    let name = &k.name;
    let d = it.get(red.value as usize).copied().flatten().unwrap_or(DType::F32);
    let (vt, t) = ctype(d);
    let dn = d.name();
    let op = reduce_name(red.kind);
    let nan = matches!(red.kind, ReduceKind::Max | ReduceKind::Min);
    // Evaluation at GL points.
    let _ = writeln!(s, "\nstatic inline __attribute__((always_inline)) {vt} {name}_e{r}(const struct {name}_c *c, int64_t i, int64_t m) {{");
    let _ = writeln!(s, "  (void)m;");
    if sized() {
        let _ = writeln!(s, "  const int64_t *S = c->S;\n  (void)S;");
    }
    inner_statements(s, k, &red.inner, it, "  ");
    let _ = writeln!(s, "  return q{};\n}}", red.value);
    // Leaf: ops::reduce::fold_run.
    let _ = writeln!(s, "\nstatic {t} {name}_l{r}(const struct {name}_c *c, int64_t i0, int64_t n) {{");
    let _ = writeln!(s, "  enum {{ NV = 16 / GL }};");
    let _ = writeln!(s, "  if (n < 16) {{");
    let _ = writeln!(s, "    {t} b[16 + GL];");
    let _ = writeln!(s, "    for (int64_t j = 0; j < n; j += GL) {{ int64_t mm = n - j < GL ? n - j : GL; {vt} v = {name}_e{r}(c, i0 + j, mm); __builtin_memcpy(b + j, &v, (size_t)mm * sizeof({t})); }}");
    let _ = writeln!(s, "    {t} a = b[0];");
    let _ = writeln!(s, "    for (int64_t j = 1; j < n; j++) a = gr_{op}_{dn}(a, b[j]);");
    let _ = writeln!(s, "    return a;\n  }}");
    let _ = writeln!(s, "  {vt} acc[NV];");
    if nan {
        let _ = writeln!(s, "  __typeof__(acc[0] != acc[0]) nan[NV];");
    }
    let _ = writeln!(
        s,
        "  for (int v = 0; v < NV; v++) {{ acc[v] = {name}_e{r}(c, i0 + v * GL, GL);{} }}",
        if nan { " nan[v] = acc[v] != acc[v];" } else { "" }
    );
    let _ = writeln!(s, "  const int64_t full = n / 16 * 16;");
    let _ = writeln!(s, "  for (int64_t j = 16; j < full; j += 16)");
    let _ = writeln!(s, "    for (int v = 0; v < NV; v++) {{ {vt} x = {name}_e{r}(c, i0 + j + v * GL, GL); acc[v] = grv_{op}_{dn}(acc[v], x);{} }}", if nan { " nan[v] |= x != x;" } else { "" });
    if nan {
        let _ = writeln!(s, "  int any = 0;");
        let _ = writeln!(s, "  for (int v = 0; v < NV; v++) for (int l = 0; l < GL; l++) any |= nan[v][l] != 0;");
        let _ = writeln!(s, "  if (any) {{");
        let _ = writeln!(s, "    {t} a = 0;");
        let _ = writeln!(s, "    for (int64_t j = 0; j < n; j += GL) {{ int64_t mm = n - j < GL ? n - j : GL; {vt} x = {name}_e{r}(c, i0 + j, mm);");
        let _ = writeln!(
            s,
            "      for (int64_t l = 0; l < mm; l++) a = (j == 0 && l == 0) ? x[0] : gr_{op}_{dn}(a, x[l]); }}"
        );
        let _ = writeln!(s, "    return a;\n  }}");
    }
    let _ = writeln!(s, "  {t} a = gt_{op}_{dn}(acc);");
    let _ = writeln!(s, "  for (int64_t j = full; j < n; j += GL) {{ int64_t mm = n - j < GL ? n - j : GL; {vt} x = {name}_e{r}(c, i0 + j, mm);");
    let _ = writeln!(s, "    for (int64_t q = 0; q < mm; q++) a = gr_{op}_{dn}(a, x[q]); }}");
    let _ = writeln!(s, "  return a;\n}}");
    for ways in LOCKSTEP {
        render_lockstep_leaves(s, k, r, red, d, ways);
    }
    // Tree: ops::reduce::tree_run. Where the tree below `n` ends in two or
    // four leaves of one size, they run in lockstep (same bits: see
    // `render_lockstep_leaves`).
    let _ = writeln!(s, "\nstatic {t} {name}_t{r}(const struct {name}_c *c, int64_t i0, int64_t n) {{");
    let _ = writeln!(s, "  if (n <= 256) return {name}_l{r}(c, i0, n);");
    let _ = writeln!(s, "  if (n <= 512 && n % 2 == 0) {{");
    let _ = writeln!(s, "    {t} v[2];\n    {name}_k2_{r}(c, i0, n / 2, v);");
    let _ = writeln!(s, "    return gr_{op}_{dn}(v[0], v[1]);\n  }}");
    let _ = writeln!(s, "  if (n <= 1024 && n % 4 == 0) {{");
    let _ = writeln!(s, "    {t} v[4];\n    {name}_k4_{r}(c, i0, n / 4, v);");
    let _ = writeln!(s, "    return gr_{op}_{dn}(gr_{op}_{dn}(v[0], v[1]), gr_{op}_{dn}(v[2], v[3]));\n  }}");
    let _ = writeln!(s, "  const int64_t h = n / 2;");
    let _ = writeln!(s, "  {t} a = {name}_t{r}(c, i0, h);\n  {t} b = {name}_t{r}(c, i0 + h, n - h);");
    let _ = writeln!(s, "  return gr_{op}_{dn}(a, b);\n}}");
}

/// How many equal leaves of a reduction tree may fold in lockstep.
const LOCKSTEP: [usize; 2] = [2, 4];

/// `{name}_k{ways}_{r}`: `ways` leaves of `n` points each, the `k`-th
/// starting at `i0 + k * n`, folded in lockstep. Each leaf performs
/// exactly the operations of `{name}_l{r}` in the same order (its own
/// accumulators, its own lane combine and tail); only the instructions of
/// independent leaves are interleaved, so the dependency chains of
/// `ways` leaves overlap instead of running one after the other (a leaf
/// alone is bound by the add latency: `16 / GL` accumulators). A leaf
/// that saw a NaN under max/min is redone alone by `{name}_l{r}`, which
/// takes its NaN-propagating path.
fn render_lockstep_leaves(s: &mut String, k: &Kernel, r: usize, red: &Reduction, d: DType, ways: usize) {
    let name = &k.name;
    let (vt, t) = ctype(d);
    let dn = d.name();
    let op = reduce_name(red.kind);
    let nan = matches!(red.kind, ReduceKind::Max | ReduceKind::Min);
    let _ =
        writeln!(s, "\nstatic void {name}_k{ways}_{r}(const struct {name}_c *c, int64_t i0, int64_t n, {t} *out) {{");
    let _ = writeln!(s, "  enum {{ NV = 16 / GL, W = {ways} }};");
    let _ = writeln!(s, "  if (n < 16) {{");
    let _ = writeln!(s, "    for (int w = 0; w < W; w++) out[w] = {name}_l{r}(c, i0 + w * n, n);");
    let _ = writeln!(s, "    return;\n  }}");
    let _ = writeln!(s, "  {vt} acc[W][NV];");
    if nan {
        let _ = writeln!(s, "  __typeof__(acc[0][0] != acc[0][0]) nan[W][NV];");
    }
    let _ = writeln!(s, "#pragma GCC unroll 4\n  for (int w = 0; w < W; w++)");
    let _ = writeln!(
        s,
        "#pragma GCC unroll 4\n    for (int v = 0; v < NV; v++) {{ acc[w][v] = {name}_e{r}(c, i0 + w * n + v * GL, GL);{} }}",
        if nan { " nan[w][v] = acc[w][v] != acc[w][v];" } else { "" }
    );
    let _ = writeln!(s, "  const int64_t full = n / 16 * 16;");
    let _ = writeln!(s, "  for (int64_t j = 16; j < full; j += 16)");
    let _ = writeln!(s, "#pragma GCC unroll 4\n    for (int w = 0; w < W; w++)");
    let _ = writeln!(
        s,
        "#pragma GCC unroll 4\n      for (int v = 0; v < NV; v++) {{ {vt} x = {name}_e{r}(c, i0 + w * n + j + v * GL, GL); acc[w][v] = grv_{op}_{dn}(acc[w][v], x);{} }}",
        if nan { " nan[w][v] |= x != x;" } else { "" }
    );
    let _ = writeln!(s, "  for (int w = 0; w < W; w++) {{");
    let _ = writeln!(s, "    const int64_t b = i0 + w * n;");
    if nan {
        let _ = writeln!(s, "    int any = 0;");
        let _ = writeln!(s, "    for (int v = 0; v < NV; v++) for (int l = 0; l < GL; l++) any |= nan[w][v][l] != 0;");
        let _ = writeln!(s, "    if (any) {{ out[w] = {name}_l{r}(c, b, n); continue; }}");
    }
    let _ = writeln!(s, "    {t} a = gt_{op}_{dn}(acc[w]);");
    let _ = writeln!(s, "    for (int64_t j = full; j < n; j += GL) {{ int64_t mm = n - j < GL ? n - j : GL; {vt} x = {name}_e{r}(c, b + j, mm);");
    let _ = writeln!(s, "      for (int64_t q = 0; q < mm; q++) a = gr_{op}_{dn}(a, x[q]); }}");
    let _ = writeln!(s, "    out[w] = a;\n  }}\n}}");
}

/// The C expression of a value instruction of an elementwise kernel.
fn expr(k: &Kernel, inst: &Inst, types: &[Option<DType>]) -> String {
    spell(k, inst, types, &POINTS)
}

/// The C expression of a value instruction, spelled for its body.
fn spell(k: &Kernel, inst: &Inst, types: &[Option<DType>], sp: &Spell) -> String {
    let ty = |r: &u32| types.get(*r as usize).copied().flatten().unwrap_or(DType::F32).name();
    let q = sp.reg;
    let a_ = sp.args;
    match inst {
        Inst::Load { arg, index } => {
            let d = k.args[*arg as usize].dtype;
            let dn = d.name();
            match index {
                Index::Scalar => format!("gk_splat_{dn}({a_}{arg}[0])"),
                Index::Point if sp.single => format!("gk_splat_{dn}({a_}{arg}[row])"),
                Index::Point => format!("gk_ld_{dn}({a_}{arg} + i, m)"),
                Index::Strided { dims, strides, offset } if sp.single => {
                    let mut e = format!("({{ int64_t p = row, e = {};", n(*offset));
                    for (&dim, &st) in dims.iter().zip(strides).rev() {
                        let dim = n(dim);
                        let _ = write!(e, " e += (p % {dim}) * {}; p /= {dim};", n(st));
                    }
                    let _ = write!(e, " gk_splat_{dn}({a_}{arg}[e]); }})");
                    e
                }
                Index::Strided { dims, strides, offset } => strided_load(a_, *arg, d, dims, strides, *offset),
            }
        }
        Inst::Lit(l) => lit(l),
        Inst::Unary(op, a) => format!("g_{}_{}({q}{a})", op.name(), ty(a)),
        Inst::Binary(op, a, b) => format!("g_{}_{}({q}{a}, {q}{b})", op.name(), ty(a)),
        Inst::Compare(op, a, b) => format!("g_{}_{}({q}{a}, {q}{b})", op.name(), ty(a)),
        Inst::Select(p, a, b) => format!("g_select_{}({q}{p}, {q}{a}, {q}{b})", ty(a)),
        Inst::Fma(a, b, c) => format!("g_fma_{}({q}{a}, {q}{b}, {q}{c})", ty(a)),
        Inst::Convert(to, a) => {
            if ty(a) == to.name() {
                format!("{q}{a}")
            } else {
                format!("g_convert_{}_{}({q}{a})", ty(a), to.name())
            }
        }
        Inst::Outer(r) => format!("c->o{r}"),
        Inst::Window { arg, window, fill } => {
            window_load(a_, *arg, k.args[*arg as usize].dtype, window, &format!("{q}{fill}"))
        }
        Inst::Inside(window) => inside_test(window),
        Inst::Word(op, a, b) => format!("gk_{}({q}{a}, {q}{b})", op.name()),
        // GCC vector casts between types of one size keep the bits.
        Inst::Bitcast(to, a) => format!("(({}){q}{a})", ctype(*to).0),
        Inst::Position(index) => position(index),
        Inst::LoadAt { arg, addr } => {
            let a = &k.args[*arg as usize];
            gather_load(a_, *arg, a.dtype, a.len, &format!("{q}{addr}"))
        }
        Inst::Store { .. } | Inst::Map(_) | Inst::Reduce(_) | Inst::Save { .. } | Inst::Restore(_) => String::new(),
    }
}

/// The element index a load through `index` reads at each of the step's
/// points, as `vi32` lanes (a GCC statement expression; the verifier
/// checked that every address fits an `i32`). Lanes past `m` compute the
/// positions of points that do not exist, which is harmless: nothing is
/// read at them.
fn position(index: &Index) -> String {
    match index {
        Index::Scalar => "gk_splat_i32(0)".to_string(),
        Index::Point => {
            "({ int32_t b[GL]; for (int64_t l = 0; l < GL; l++) b[l] = (int32_t)(i + l); vi32 v; __builtin_memcpy(&v, b, sizeof v); v; })".to_string()
        }
        Index::Strided { dims, strides, offset } => {
            // When the step's points lie in one run of the last dimension,
            // lane `l` is the first lane's address plus `l` times its
            // stride; otherwise each lane divides its own point.
            let (dims, strides, offset) = super::ir::coalesce_strided(dims, strides, *offset);
            let (last, ls) = (n(dims.last().copied().unwrap_or(1)), n(strides.last().copied().unwrap_or(0)));
            let mut s = format!("({{ vi32 v; int64_t q0 = i, e0 = {};", n(offset));
            address(&mut s, "q0", "e0", &dims, &strides);
            let _ = write!(
                s,
                " if ((i % {last}) + GL <= {last}) {{ vi32 io; __builtin_memcpy(&io, gk_iota32, sizeof io); \
                 v = gk_splat_i32((int32_t)e0) + io * (int32_t)({ls}); }} else {{ int32_t b[GL]; \
                 for (int64_t l = 0; l < GL; l++) {{ int64_t q = i + l, e = {};",
                n(offset)
            );
            address(&mut s, "q", "e", &dims, &strides);
            s.push_str(" b[l] = (int32_t)e; } __builtin_memcpy(&v, b, sizeof v); } v; })");
            s
        }
    }
}

/// A gather (a GCC statement expression): each lane reads the element its
/// address lane names, clamped to the buffer's `len` elements. Lanes past
/// `m` read a clamped element too (in bounds, and never stored). When the
/// addresses are one in-bounds run (`a, a + 1, ...`: a dynamic slice along
/// leading dims, a row of an embedding table), one vector load reads the
/// same elements (a loop indexing `x[k]` by its counter: 2.6 -> ... ms).
fn gather_load(a_: &str, arg: u32, d: DType, len: usize, addr: &str) -> String {
    let (vt, _) = ctype(d);
    let (dn, lt) = (d.name(), lane_type(d));
    let get = if d == DType::Bool { format!("({a_}{arg}[e] ? -1 : 0)") } else { format!("{a_}{arg}[e]") };
    format!(
        "({{ {vt} v; const int64_t hi = {}; const int32_t g0 = {addr}[0]; \
         vi32 io; __builtin_memcpy(&io, gk_iota32, sizeof io); \
         if (g0 >= 0 && (int64_t)g0 + GL - 1 <= hi && gk_all({addr} == gk_splat_i32(g0) + io)) v = gk_ld_{dn}({a_}{arg} + g0, GL); \
         else {{ int32_t ad[GL]; __builtin_memcpy(ad, &{addr}, sizeof ad); {lt} b[GL]; \
         for (int64_t l = 0; l < GL; l++) {{ int64_t e = ad[l]; e = e < 0 ? 0 : e; e = e > hi ? hi : e; b[l] = {get}; }} \
         __builtin_memcpy(&v, b, sizeof v); }} v; }})",
        n(len as i64 - 1)
    )
}

/// A window load (a GCC statement expression): the coordinates of the
/// step's first point are computed once; when all `GL` points lie in one
/// run of the last dimension, the leading coordinates decide for all lanes
/// and the last one splits the run into lanes before, inside and after the
/// window (all inside with stride 1: one vector load; all outside: the
/// fill). Otherwise each lane checks its own coordinates.
fn window_load(a_: &str, arg: u32, d: DType, w: &super::ir::Window, fill: &str) -> String {
    let w = &w.coalesced();
    let (vt, _) = ctype(d);
    let (dn, lt) = (d.name(), lane_type(d));
    let get = |e: &str| if d == DType::Bool { format!("({a_}{arg}[{e}] ? -1 : 0)") } else { format!("{a_}{arg}[{e}]") };
    let mut s = format!("({{ {vt} v = {fill};");
    if w.dims.is_empty() {
        let _ = write!(s, " v = gk_splat_{dn}({}); v; }})", get(&n(w.offset)));
        return s;
    }
    let nd = w.dims.len();
    let (last, lo_l, size_l, st_l) = (w.dims[nd - 1], w.lo[nd - 1], w.size[nd - 1], w.strides[nd - 1]);
    let hi_l = n(lo_l + size_l as isize);
    let (last, lo_l) = (n(last), n(lo_l));
    // Leading coordinates of the first point, whether they are inside, and
    // the address of (c_0 .. c_{n-2}, lo_last).
    let _ = write!(s, " int64_t q = i / {last}, c0 = i % {last}, e0 = {}, in0 = 1; (void)q;", n(w.offset));
    for k in (0..nd - 1).rev() {
        let (dim, lo, size, st) = (w.dims[k], w.lo[k], w.size[k], w.strides[k]);
        let (dim, hi, lo) = (n(dim), n(lo + size as isize), n(lo));
        let _ = write!(
            s,
            " {{ int64_t c = q % {dim}; q /= {dim}; in0 &= (c >= {lo}) & (c < {hi}); e0 += (c - {lo}) * {}; }}",
            n(st)
        );
    }
    // Lanes set one by one go through an array (see `strided_load`).
    let inside = match st_l {
        1 => format!("v = gk_ld_{dn}({a_}{arg} + e0 + (c0 - {lo_l}), GL);"),
        _ => format!(
            "{lt} b[GL]; for (int64_t l = 0; l < GL; l++) b[l] = {}; __builtin_memcpy(&v, b, sizeof v);",
            get(&format!("e0 + (c0 + l - {lo_l}) * {}", n(st_l)))
        ),
    };
    let _ = write!(s, " if (m == GL && c0 + GL <= {last}) {{");
    let _ = write!(s, " if (in0 && c0 >= {lo_l} && c0 + GL <= {hi_l}) {{ {inside} }}");
    let _ = write!(
        s,
        " else if (in0 && c0 < {hi_l} && c0 + GL > {lo_l}) {{ {lt} b[GL]; __builtin_memcpy(b, &v, sizeof b);"
    );
    let _ = write!(
        s,
        " for (int64_t l = 0; l < GL; l++) {{ int64_t c = c0 + l; if (c >= {lo_l} && c < {hi_l}) b[l] = {}; }} __builtin_memcpy(&v, b, sizeof v); }} }}",
        get(&format!("e0 + (c - {lo_l}) * {}", n(st_l)))
    );
    let _ = write!(s, " else {{ {lt} b[GL]; __builtin_memcpy(b, &v, sizeof b);");
    let _ = write!(s, " for (int64_t l = 0; l < m; l++) {{ int64_t r = i + l, e = {}, ok = 1;", n(w.offset));
    for k in (0..nd).rev() {
        let (dim, lo, size, st) = (w.dims[k], w.lo[k], w.size[k], w.strides[k]);
        let (dim, hi, lo) = (n(dim), n(lo + size as isize), n(lo));
        let _ = write!(
            s,
            " {{ int64_t c = r % {dim}; r /= {dim}; ok &= (c >= {lo}) & (c < {hi}); e += (c - {lo}) * {}; }}",
            n(st)
        );
    }
    let _ = write!(s, " if (ok) b[l] = {}; }} __builtin_memcpy(&v, b, sizeof v); }} v; }})", get("e"));
    s
}

/// Whether each of the step's points lies inside `w`'s box, as `vbool`
/// lanes (a GCC statement expression). As in [`window_load`], when all
/// `GL` points lie in one run of the last dimension the leading
/// coordinates decide for all lanes and the run is all inside, all outside
/// or split per lane; otherwise each lane checks its own coordinates.
fn inside_test(w: &super::ir::Window) -> String {
    let w = &w.coalesced();
    let nd = w.dims.len();
    if nd == 0 {
        return "gk_splat_bool(1)".into();
    }
    let (last, lo_l) = (w.dims[nd - 1], w.lo[nd - 1]);
    let hi_l = n(lo_l + w.size[nd - 1] as isize);
    let (last, lo_l) = (n(last), n(lo_l));
    let mut s = format!("({{ vbool v; int64_t q = i / {last}, c0 = i % {last}, in0 = 1; (void)q;");
    for k in (0..nd - 1).rev() {
        let (dim, lo, size) = (w.dims[k], w.lo[k], w.size[k]);
        let (dim, hi, lo) = (n(dim), n(lo + size as isize), n(lo));
        let _ = write!(s, " {{ int64_t c = q % {dim}; q /= {dim}; in0 &= (c >= {lo}) & (c < {hi}); }}");
    }
    let _ = write!(s, " if (m == GL && c0 + GL <= {last}) {{");
    let _ = write!(s, " if (in0 && c0 >= {lo_l} && c0 + GL <= {hi_l}) v = gk_splat_bool(1);");
    let _ = write!(s, " else if (!in0 || c0 >= {hi_l} || c0 + GL <= {lo_l}) v = gk_splat_bool(0);");
    let _ = write!(
        s,
        " else {{ int32_t b[GL]; for (int64_t l = 0; l < GL; l++) b[l] = (c0 + l >= {lo_l} && c0 + l < {hi_l}) ? -1 : 0; __builtin_memcpy(&v, b, sizeof v); }} }}"
    );
    let _ = write!(s, " else {{ int32_t b[GL] = {{0}}; for (int64_t l = 0; l < m; l++) {{ int64_t r = i + l, ok = 1;");
    for k in (0..nd).rev() {
        let (dim, lo, size) = (w.dims[k], w.lo[k], w.size[k]);
        let (dim, hi, lo) = (n(dim), n(lo + size as isize), n(lo));
        let _ = write!(s, " {{ int64_t c = r % {dim}; r /= {dim}; ok &= (c >= {lo}) & (c < {hi}); }}");
    }
    let _ = write!(s, " b[l] = ok ? -1 : 0; }} __builtin_memcpy(&v, b, sizeof v); }} v; }})");
    s
}

/// A load through a strided index (a GCC statement expression). The
/// address of the step's first point is computed once; when all `GL` points
/// lie in one run of the last dimension, a last stride of 0 is a splat and
/// of 1 a contiguous vector load; otherwise each lane computes its own
/// address. All sizes are constants, so the compiler drops unused paths
/// and turns divisions into multiplications.
fn strided_load(a_: &str, arg: u32, d: DType, dims: &[usize], strides: &[isize], offset: isize) -> String {
    let (dims, strides, offset) = super::ir::coalesce_strided(dims, strides, offset);
    let (dims, strides) = (&dims[..], &strides[..]);
    let (vt, _) = ctype(d);
    let (dn, lt) = (d.name(), lane_type(d));
    let get = |e: &str| if d == DType::Bool { format!("({a_}{arg}[{e}] ? -1 : 0)") } else { format!("{a_}{arg}[{e}]") };
    let mut s = format!("({{ {vt} v; int64_t q = i, e0 = {};", n(offset));
    address(&mut s, "q", "e0", dims, strides);
    let (last, ls) = (dims.last().copied().unwrap_or(1), strides.last().copied().unwrap_or(0));
    // Lanes gathered one by one go through an array, not the vector: a
    // vector written lane by lane lives on the stack for the whole loop.
    let fast = match ls {
        0 => format!("v = gk_splat_{dn}({a_}{arg}[e0]);"),
        1 => format!("v = gk_ld_{dn}({a_}{arg} + e0, GL);"),
        _ => format!(
            "{lt} b[GL]; for (int64_t l = 0; l < GL; l++) b[l] = {}; __builtin_memcpy(&v, b, sizeof v);",
            get(&format!("e0 + l * {}", n(ls)))
        ),
    };
    let last_n = n(last);
    let _ = write!(s, " if (m == GL && (i % {last_n}) + GL <= {last_n}) {{ {fast} }}");
    if let Some((odims, ostrides, table)) = period_table(dims, strides, last) {
        // Lanes that cross a short last dimension: the addresses within one
        // period (the trailing `k` dims) come from a table, the period's
        // base from the outer dims once per vector.
        let p = table.len();
        let entries: Vec<String> = table.iter().map(|t| t.to_string()).collect();
        let _ = write!(
            s,
            " else if (m == GL && (i % {p}) + GL <= {p}) {{ static const int32_t t[{p}] = {{{}}};",
            entries.join(",")
        );
        let _ = write!(s, " int64_t w = i / {p}, j = i % {p}, e1 = {};", n(offset));
        address(&mut s, "w", "e1", &odims, &ostrides);
        if matches!(d, DType::Bool | DType::F16) {
            let _ = write!(
                s,
                " {lt} b[GL]; for (int64_t l = 0; l < GL; l++) b[l] = {}; __builtin_memcpy(&v, b, sizeof v); }}",
                get("e1 + t[j + l]")
            );
        } else {
            let _ = write!(s, " v = gk_gat_{dn}({a_}{arg} + e1, t + j); }}");
        }
    }
    let _ = write!(s, " else {{");
    let _ = write!(s, " {lt} b[GL] = {{0}}; for (int64_t l = 0; l < m; l++) {{ int64_t r = i + l, e = {};", n(offset));
    address(&mut s, "r", "e", dims, strides);
    let _ = write!(s, " b[l] = {}; }} __builtin_memcpy(&v, b, sizeof v); }} v; }})", get("e"));
    s
}

/// Fewest points in a period of [`period_table`]: with 16 lanes, at least
/// three vectors in four then lie inside one period.
const PERIOD_MIN: usize = 64;
/// Most entries of a [`period_table`] (16 KiB of `int32_t`).
const PERIOD_MAX: usize = 4096;

/// For a strided load whose last (coalesced) dimension is shorter than
/// [`PERIOD_MIN`] points, where most vectors of lanes cross rows: a period
/// of the index space (the trailing dims, the first of them cut down to a
/// divisor of its size) of at least `PERIOD_MIN` points (at most
/// [`PERIOD_MAX`]), as the outer dims and strides that address a period's
/// first point and the address offset of every point of the period
/// relative to it. Constant sizes only (a size-generic kernel reads its
/// sizes at run time and keeps the per-lane path), offsets within i32.
fn period_table(dims: &[usize], strides: &[isize], last: usize) -> Option<(Vec<usize>, Vec<isize>, Vec<i64>)> {
    if sized() || last >= PERIOD_MIN {
        return None;
    }
    // Trailing dims whose product stays below the minimum, then the
    // smallest divisor `f` of the next dim that reaches it.
    let (mut p, mut k) = (1usize, 0usize);
    while k < dims.len() && p * dims[dims.len() - 1 - k] < PERIOD_MIN {
        p *= dims[dims.len() - 1 - k];
        k += 1;
    }
    let at = dims.len().checked_sub(k + 1)?;
    let d = dims[at];
    let f = (1..=d).find(|&f| d.is_multiple_of(f) && p * f >= PERIOD_MIN)?;
    let period = p * f;
    if period > PERIOD_MAX {
        return None;
    }
    let mut tdims = vec![f];
    tdims.extend_from_slice(&dims[at + 1..]);
    let tstrides = &strides[at..];
    let mut table = Vec::with_capacity(period);
    for j in 0..period {
        let (mut q, mut e) = (j, 0i64);
        for (&dd, &st) in tdims.iter().zip(tstrides).rev() {
            e += (q % dd) as i64 * st as i64;
            q /= dd;
        }
        table.push(e);
    }
    let mut odims = dims[..at].to_vec();
    odims.push(d / f);
    let mut ostrides = strides[..at].to_vec();
    ostrides.push(strides[at] * f as isize);
    table.iter().all(|&e| i32::try_from(e).is_ok()).then_some((odims, ostrides, table))
}

/// Appends C that adds the address of point `var` (decomposed row-major
/// over `dims`, consuming `var`) to `acc`.
fn address(s: &mut String, var: &str, acc: &str, dims: &[usize], strides: &[isize]) {
    for (&dim, &st) in dims.iter().zip(strides).rev() {
        let dim = n(dim);
        let _ = write!(s, " {acc} += ({var} % {dim}) * {}; {var} /= {dim};", n(st));
    }
}

/// The C type of one lane of a dtype's vector (bool and f16 lanes are
/// `int32_t`).
fn lane_type(d: DType) -> &'static str {
    match d {
        DType::F32 => "float",
        DType::F64 => "double",
        DType::I32 | DType::Bool | DType::F16 => "int32_t",
        DType::I64 => "int64_t",
        DType::U32 => "uint32_t",
    }
}

/// A store through a strided index (the mirror of [`strided_load`]): when
/// all `GL` points lie in one run of the last dimension and its stride is
/// 1, one contiguous vector store; otherwise each lane computes its own
/// address (the verifier checked that no two points share one).
fn strided_store(arg: u32, value: u32, d: DType, dims: &[usize], strides: &[isize], offset: isize) -> String {
    let (dims, strides, offset) = super::ir::coalesce_strided(dims, strides, offset);
    let (dims, strides) = (&dims[..], &strides[..]);
    let (dn, lt) = (d.name(), lane_type(d));
    let lane = |e: &str| {
        if d == DType::Bool {
            format!("a{arg}[{e}] = (uint8_t)(b[l] & 1);")
        } else {
            format!("a{arg}[{e}] = b[l];")
        }
    };
    // Lanes read one by one come from an array (see `strided_load`).
    let mut s = format!("{{ {lt} b[GL]; __builtin_memcpy(b, &r{value}, sizeof b); int64_t q = i, e0 = {};", n(offset));
    address(&mut s, "q", "e0", dims, strides);
    let (last, ls) = (dims.last().copied().unwrap_or(1), strides.last().copied().unwrap_or(0));
    let fast = match ls {
        1 => format!("gk_st_{dn}(a{arg} + e0, r{value}, GL);"),
        _ => format!("for (int64_t l = 0; l < GL; l++) {{ {} }}", lane(&format!("e0 + l * {}", n(ls)))),
    };
    let last = n(last);
    let _ = write!(s, " if (m == GL && (i % {last}) + GL <= {last}) {{ {fast} }} else {{");
    let _ = write!(s, " for (int64_t l = 0; l < m; l++) {{ int64_t r = i + l, e = {};", n(offset));
    address(&mut s, "r", "e", dims, strides);
    let _ = write!(s, " {} }} }} }}", lane("e"));
    s
}
