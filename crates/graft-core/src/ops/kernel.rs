//! Shared kernel machinery: parallel loops over contiguous slices, dtype
//! dispatch, and the typed block views of elementwise evaluation.
//!
//! Kernels are tight loops over typed slices; the dtype `match` happens once
//! per kernel call (or once per block), never per element.
//!
//! Elementwise families (unary, binary/compare/select, convert/stop_gradient)
//! implement their math once, as `eval_block` over a [`BlockRef`]/[`BlockMut`]
//! sub-slice. Their `Op::kernel` runs `eval_block` over chunks of whole
//! tensors ([`for_blocks`]), and the executor's fusion (`exec/fuse.rs`) runs
//! it over cache-sized blocks of a whole chain of ops. Both paths call the
//! same function on the same elements, so fused and unfused results are
//! bitwise identical, whatever the block size or thread count.

use crate::dtype::DType;
use crate::error::ExecError;
use crate::tensor::{Element, Storage, Tensor};
use rayon::prelude::*;
use std::ops::Range;

/// Below this many elements a kernel stays on the calling thread: spawning
/// rayon tasks costs more than the work.
pub const PAR_MIN: usize = 1 << 15;
/// Elements per parallel task for elementwise loops (fits L1/L2 comfortably).
pub const CHUNK: usize = 1 << 13;

/// Runs `f` inside a function compiled for the best instruction set this CPU
/// has (AVX-512, else AVX2 + FMA, else the baseline the crate is built for),
/// detected once at run time. The build targets baseline x86-64 (SSE2) so the
/// binary runs anywhere; the elementwise block loops are where wider vectors
/// pay, so their bodies (inlined into `f`) are compiled once per level.
///
/// Results do not depend on the level taken: Rust never contracts `a * b + c`
/// into a fused multiply-add or reorders float arithmetic, so each element is
/// computed by the same IEEE operations in the same order, only more per
/// instruction (the `simd_levels_agree` test checks this bitwise).
///
/// `op` is a struct whose `with_simd` is `#[inline(always)]` rather than a
/// closure: closures cannot be marked, and LLVM does not inline a closure
/// holding a whole `match` of loops, which would leave it compiled for the
/// baseline only.
#[inline(always)]
pub fn simd<Op: pulp::WithSimd>(op: Op) -> Op::Output {
    if BASELINE_ONLY.with(std::cell::Cell::get) {
        return pulp::Arch::Scalar.dispatch(op);
    }
    static ARCH: std::sync::OnceLock<pulp::Arch> = std::sync::OnceLock::new();
    ARCH.get_or_init(pulp::Arch::new).dispatch(op)
}

/// A loop that is not one op's block (convolution's im2col, transposes,
/// gather-adds), run at the CPU's best level by [`simd_loop`]. `run` must
/// be `#[inline(always)]`, as must every helper it calls: that is what puts
/// the loops into [`simd`]'s per-level copies. (A closure or a function
/// item passed as a value would not do: every level calls it, so LLVM
/// keeps one out-of-line copy, built for the baseline.)
pub trait SimdLoop<A> {
    type Output;
    fn run(args: A) -> Self::Output;
}

/// Runs `L::run(args)` through [`simd`]: the same IEEE operations in the
/// same order at every level, more of them per instruction.
#[inline(always)]
pub fn simd_loop<L: SimdLoop<A>, A>(args: A) -> L::Output {
    struct Call<L, A>(std::marker::PhantomData<L>, A);
    impl<L: SimdLoop<A>, A> pulp::WithSimd for Call<L, A> {
        type Output = L::Output;
        #[inline(always)]
        fn with_simd<S: pulp::Simd>(self, _: S) -> L::Output {
            L::run(self.1)
        }
    }
    simd(Call::<L, A>(std::marker::PhantomData, args))
}

thread_local! {
    static BASELINE_ONLY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with [`simd`] restricted to the baseline level on this thread
/// (for tests comparing levels; kernels that spread over rayon threads run
/// those parts at the detected level).
pub fn baseline_simd<R>(f: impl FnOnce() -> R) -> R {
    let prev = BASELINE_ONLY.with(|c| c.replace(true));
    let r = f();
    BASELINE_ONLY.with(|c| c.set(prev));
    r
}

/// True when a loop over `n` elements is worth splitting across threads
/// (the primitives' own kernels, which do a few simple operations per
/// element; the executor's fused and native kernels weigh their work with
/// [`parallel_tasks`] instead).
pub fn worth_parallel(n: usize) -> bool {
    n >= PAR_MIN && rayon::current_num_threads() > 1
}

/// Below this much estimated work (simple-operation units, see
/// `kernel::ir::inst_units`) a kernel call stays on the calling thread.
/// Calibrated on this project's benchmark machine (Zen 4): softmax over
/// [4096, 1024] f32 is about 180 M units and takes 2.4 ms on one core, so
/// a unit is about 13 ps of vector code (f64 about twice that), and 2^22
/// units is about 50-100 µs, where waking the pool's threads and joining
/// them (5-10 µs on a loaded two-core machine) stops mattering. A
/// threshold of 2^20 split GradBench gmm's small row regions and doubled
/// its time at two threads.
pub const PAR_MIN_UNITS: usize = 1 << 22;

/// Work per parallel task: fewer, larger tasks for mid-size calls (each at
/// least about 25-50 µs), at most four per thread for large ones.
pub const TASK_UNITS: usize = 1 << 21;

/// How many tasks a kernel call of `units` estimated work is split into: 1
/// below [`PAR_MIN_UNITS`] or on one thread, else one per [`TASK_UNITS`],
/// between 2 and four per thread. Results never depend on it (points are
/// independent).
pub fn parallel_tasks(units: usize) -> usize {
    let threads = rayon::current_num_threads();
    if threads <= 1 || units < PAR_MIN_UNITS {
        return 1;
    }
    (units / TASK_UNITS).clamp(2, threads * 4)
}

/// `o[i] = f(a[i])`, split across threads when large.
pub fn map1<A: Copy + Sync, O: Send>(a: &[A], o: &mut [O], f: impl Fn(A) -> O + Sync) {
    debug_assert_eq!(a.len(), o.len());
    let body = |o: &mut [O], a: &[A]| {
        for (o, &a) in o.iter_mut().zip(a) {
            *o = f(a);
        }
    };
    if worth_parallel(o.len()) {
        o.par_chunks_mut(CHUNK).zip(a.par_chunks(CHUNK)).for_each(|(o, a)| body(o, a));
    } else {
        body(o, a);
    }
}

/// `o[i] = f(a[i], b[i])`, split across threads when large.
pub fn map2<A: Copy + Sync, B: Copy + Sync, O: Send>(a: &[A], b: &[B], o: &mut [O], f: impl Fn(A, B) -> O + Sync) {
    debug_assert!(a.len() == o.len() && b.len() == o.len());
    let body = |o: &mut [O], a: &[A], b: &[B]| {
        for ((o, &a), &b) in o.iter_mut().zip(a).zip(b) {
            *o = f(a, b);
        }
    };
    if worth_parallel(o.len()) {
        o.par_chunks_mut(CHUNK).zip(a.par_chunks(CHUNK)).zip(b.par_chunks(CHUNK)).for_each(|((o, a), b)| body(o, a, b));
    } else {
        body(o, a, b);
    }
}

/// `o[i] = f(a[i], b[i], c[i])`, split across threads when large.
pub fn map3<A: Copy + Sync, B: Copy + Sync, C: Copy + Sync, O: Send>(
    a: &[A],
    b: &[B],
    c: &[C],
    o: &mut [O],
    f: impl Fn(A, B, C) -> O + Sync,
) {
    let body = |o: &mut [O], a: &[A], b: &[B], c: &[C]| {
        for (((o, &a), &b), &c) in o.iter_mut().zip(a).zip(b).zip(c) {
            *o = f(a, b, c);
        }
    };
    if worth_parallel(o.len()) {
        o.par_chunks_mut(CHUNK)
            .zip(a.par_chunks(CHUNK))
            .zip(b.par_chunks(CHUNK))
            .zip(c.par_chunks(CHUNK))
            .for_each(|(((o, a), b), c)| body(o, a, b, c));
    } else {
        body(o, a, b, c);
    }
}

/// Borrows a kernel input as a typed slice.
pub fn input<T: Element>(t: &Tensor) -> Result<&[T], ExecError> {
    Ok(t.as_slice::<T>()?)
}

/// Borrows a kernel output as a typed mutable slice.
pub fn output<T: Element>(t: &mut Tensor) -> Result<&mut [T], ExecError> {
    Ok(t.as_slice_mut::<T>()?)
}

/// Error for a dtype a kernel does not handle (the shape rule should have
/// rejected it; this is the executor's second line of defence).
pub fn unsupported(prim: &str, dtype: DType) -> ExecError {
    ExecError::kernel(prim, format!("no kernel for dtype {dtype}"))
}

/// Floating-point element types, with the special functions kernels need
/// (the transcendentals come from [`super::mathfn::SliceMath`]).
pub trait Real: BlockElem + num_traits::Float + super::mathfn::SliceMath + Send + Sync {
    /// Round to nearest, ties to even.
    fn round_even(self) -> Self;
    /// C `pow(self, y)`: graft's f32 `pow` (`mathfn::pow_f32`, which the C
    /// prelude reproduces), std's for f64.
    fn pow(self, y: Self) -> Self;
    /// C `atan2(self, x)`: graft's f32 `atan2` (`mathfn::atan2_f32`, which
    /// the C prelude reproduces), std's for f64.
    fn atan2(self, x: Self) -> Self;
}

impl Real for f32 {
    fn round_even(self) -> Self {
        self.round_ties_even()
    }
    #[inline(always)]
    fn pow(self, y: f32) -> f32 {
        super::mathfn::pow_f32(self, y)
    }
    #[inline(always)]
    fn atan2(self, x: f32) -> f32 {
        super::mathfn::atan2_f32(self, x)
    }
}

impl Real for f64 {
    fn round_even(self) -> Self {
        self.round_ties_even()
    }
    #[inline(always)]
    fn pow(self, y: f64) -> f64 {
        self.powf(y)
    }
    #[inline(always)]
    fn atan2(self, x: f64) -> f64 {
        num_traits::Float::atan2(self, x)
    }
}

/// Numeric (non-bool) element types.
pub trait Num: BlockElem + num_traits::Num + num_traits::NumCast + Copy + Send + Sync {}
impl Num for f32 {}
impl Num for f64 {}
impl Num for i32 {}
impl Num for i64 {}
impl Num for u32 {}

/// A borrowed contiguous run of elements of one dtype: an elementwise
/// operand, either a whole tensor or a block of one.
#[derive(Debug, Clone, Copy)]
pub enum BlockRef<'a> {
    /// f16 elements (only `convert` and copies compute on them; see `opt::widen_f16`).
    F16(&'a [half::f16]),
    /// f32 elements.
    F32(&'a [f32]),
    /// f64 elements.
    F64(&'a [f64]),
    /// i32 elements.
    I32(&'a [i32]),
    /// i64 elements.
    I64(&'a [i64]),
    /// u32 elements.
    U32(&'a [u32]),
    /// bool elements.
    Bool(&'a [bool]),
}

/// A mutably borrowed contiguous run of elements of one dtype: where an
/// elementwise op writes its result (every element must be written).
#[derive(Debug)]
pub enum BlockMut<'a> {
    /// f16 elements (only `convert` and copies compute on them; see `opt::widen_f16`).
    F16(&'a mut [half::f16]),
    /// f32 elements.
    F32(&'a mut [f32]),
    /// f64 elements.
    F64(&'a mut [f64]),
    /// i32 elements.
    I32(&'a mut [i32]),
    /// i64 elements.
    I64(&'a mut [i64]),
    /// u32 elements.
    U32(&'a mut [u32]),
    /// bool elements.
    Bool(&'a mut [bool]),
}

/// Applies `$body` to the typed slice inside a block enum; with `wrap`, the
/// body yields a slice that is re-wrapped in the same variant.
macro_rules! each_block {
    ($ty:ident, $b:expr, $s:ident => wrap $body:expr) => {
        match $b {
            $ty::F16($s) => $ty::F16($body),
            $ty::F32($s) => $ty::F32($body),
            $ty::F64($s) => $ty::F64($body),
            $ty::I32($s) => $ty::I32($body),
            $ty::I64($s) => $ty::I64($body),
            $ty::U32($s) => $ty::U32($body),
            $ty::Bool($s) => $ty::Bool($body),
        }
    };
    ($ty:ident, $b:expr, $s:ident => $body:expr) => {
        match $b {
            $ty::F16($s) => $body,
            $ty::F32($s) => $body,
            $ty::F64($s) => $body,
            $ty::I32($s) => $body,
            $ty::I64($s) => $body,
            $ty::U32($s) => $body,
            $ty::Bool($s) => $body,
        }
    };
}

impl<'a> BlockRef<'a> {
    /// The whole of a storage.
    pub fn of_storage(s: &'a Storage) -> BlockRef<'a> {
        match s {
            Storage::F16(v) => BlockRef::F16(v),
            Storage::F32(v) => BlockRef::F32(v),
            Storage::F64(v) => BlockRef::F64(v),
            Storage::I32(v) => BlockRef::I32(v),
            Storage::I64(v) => BlockRef::I64(v),
            Storage::U32(v) => BlockRef::U32(v),
            Storage::Bool(v) => BlockRef::Bool(v),
        }
    }

    /// The whole of a tensor's data.
    pub fn of(t: &'a Tensor) -> BlockRef<'a> {
        BlockRef::of_storage(t.storage())
    }

    /// An empty block (a placeholder in fixed-size operand arrays).
    pub const EMPTY: BlockRef<'static> = BlockRef::F32(&[]);

    /// Element type.
    pub fn dtype(&self) -> DType {
        match self {
            BlockRef::F16(_) => DType::F16,
            BlockRef::F32(_) => DType::F32,
            BlockRef::F64(_) => DType::F64,
            BlockRef::I32(_) => DType::I32,
            BlockRef::I64(_) => DType::I64,
            BlockRef::U32(_) => DType::U32,
            BlockRef::Bool(_) => DType::Bool,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        each_block!(BlockRef, self, s => s.len())
    }

    /// True when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The sub-block `range`. Panics when out of bounds: callers slice
    /// ranges they computed from this block's length.
    pub fn slice(self, range: Range<usize>) -> BlockRef<'a> {
        each_block!(BlockRef, self, s => wrap &s[range])
    }

    /// The typed slice, or a kernel error naming `prim` when the dtype differs.
    pub fn typed<T: BlockElem>(self, prim: &str) -> Result<&'a [T], ExecError> {
        let dtype = self.dtype();
        T::from_ref(self).ok_or_else(|| dtype_mismatch(prim, T::DTYPE, dtype))
    }
}

impl<'a> BlockMut<'a> {
    /// The whole of a storage.
    pub fn of_storage(s: &'a mut Storage) -> BlockMut<'a> {
        match s {
            Storage::F16(v) => BlockMut::F16(v),
            Storage::F32(v) => BlockMut::F32(v),
            Storage::F64(v) => BlockMut::F64(v),
            Storage::I32(v) => BlockMut::I32(v),
            Storage::I64(v) => BlockMut::I64(v),
            Storage::U32(v) => BlockMut::U32(v),
            Storage::Bool(v) => BlockMut::Bool(v),
        }
    }

    /// The whole of a tensor's data.
    pub fn of(t: &'a mut Tensor) -> BlockMut<'a> {
        BlockMut::of_storage(t.storage_mut())
    }

    /// An empty block (a placeholder while a block is moved out of a list).
    pub fn empty() -> BlockMut<'a> {
        BlockMut::F32(&mut [])
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        match self {
            BlockMut::F16(_) => DType::F16,
            BlockMut::F32(_) => DType::F32,
            BlockMut::F64(_) => DType::F64,
            BlockMut::I32(_) => DType::I32,
            BlockMut::I64(_) => DType::I64,
            BlockMut::U32(_) => DType::U32,
            BlockMut::Bool(_) => DType::Bool,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        each_block!(BlockMut, self, s => s.len())
    }

    /// True when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A shorter-lived mutable view of the same elements.
    pub fn reborrow(&mut self) -> BlockMut<'_> {
        each_block!(BlockMut, self, s => wrap &mut s[..])
    }

    /// A shared view of the same elements.
    pub fn as_ref(&self) -> BlockRef<'_> {
        match self {
            BlockMut::F16(s) => BlockRef::F16(s),
            BlockMut::F32(s) => BlockRef::F32(s),
            BlockMut::F64(s) => BlockRef::F64(s),
            BlockMut::I32(s) => BlockRef::I32(s),
            BlockMut::I64(s) => BlockRef::I64(s),
            BlockMut::U32(s) => BlockRef::U32(s),
            BlockMut::Bool(s) => BlockRef::Bool(s),
        }
    }

    /// The sub-block `range`. Panics when out of bounds: callers slice
    /// ranges they computed from this block's length.
    pub fn slice(self, range: Range<usize>) -> BlockMut<'a> {
        each_block!(BlockMut, self, s => wrap &mut s[range])
    }

    /// Consecutive disjoint sub-blocks of `size` elements (the last may be shorter).
    pub fn chunks(self, size: usize) -> Vec<BlockMut<'a>> {
        match self {
            BlockMut::F16(s) => s.chunks_mut(size).map(BlockMut::F16).collect(),
            BlockMut::F32(s) => s.chunks_mut(size).map(BlockMut::F32).collect(),
            BlockMut::F64(s) => s.chunks_mut(size).map(BlockMut::F64).collect(),
            BlockMut::I32(s) => s.chunks_mut(size).map(BlockMut::I32).collect(),
            BlockMut::I64(s) => s.chunks_mut(size).map(BlockMut::I64).collect(),
            BlockMut::U32(s) => s.chunks_mut(size).map(BlockMut::U32).collect(),
            BlockMut::Bool(s) => s.chunks_mut(size).map(BlockMut::Bool).collect(),
        }
    }

    /// The typed slice, or a kernel error naming `prim` when the dtype differs.
    pub fn typed<T: BlockElem>(self, prim: &str) -> Result<&'a mut [T], ExecError> {
        let dtype = self.dtype();
        T::from_mut(self).ok_or_else(|| dtype_mismatch(prim, T::DTYPE, dtype))
    }

    /// Writes element 0 of `x` to every element (the value of a
    /// `broadcast_in_dim` of a one-element operand).
    pub fn splat(self, prim: &str, x: BlockRef<'_>) -> Result<(), ExecError> {
        if x.is_empty() {
            return Err(ExecError::kernel(prim, "internal error: splat of an empty operand"));
        }
        match (self, x) {
            (BlockMut::F16(o), BlockRef::F16(x)) => o.fill(x[0]),
            (BlockMut::F32(o), BlockRef::F32(x)) => o.fill(x[0]),
            (BlockMut::F64(o), BlockRef::F64(x)) => o.fill(x[0]),
            (BlockMut::I32(o), BlockRef::I32(x)) => o.fill(x[0]),
            (BlockMut::I64(o), BlockRef::I64(x)) => o.fill(x[0]),
            (BlockMut::U32(o), BlockRef::U32(x)) => o.fill(x[0]),
            (BlockMut::Bool(o), BlockRef::Bool(x)) => o.fill(x[0]),
            (o, x) => return Err(dtype_mismatch(prim, o.dtype(), x.dtype())),
        }
        Ok(())
    }
}

fn dtype_mismatch(prim: &str, expected: DType, got: DType) -> ExecError {
    ExecError::kernel(prim, format!("expected a {expected} operand or result, got {got}"))
}

/// An element type that can be viewed through [`BlockRef`]/[`BlockMut`].
pub trait BlockElem: Element {
    /// The typed slice if the block has this element type.
    fn from_ref(b: BlockRef<'_>) -> Option<&[Self]>;
    /// The typed mutable slice if the block has this element type.
    fn from_mut(b: BlockMut<'_>) -> Option<&mut [Self]>;
}

macro_rules! impl_block_elem {
    ($t:ty, $v:ident) => {
        impl BlockElem for $t {
            #[inline]
            fn from_ref(b: BlockRef<'_>) -> Option<&[Self]> {
                match b {
                    BlockRef::$v(s) => Some(s),
                    _ => None,
                }
            }
            #[inline]
            fn from_mut(b: BlockMut<'_>) -> Option<&mut [Self]> {
                match b {
                    BlockMut::$v(s) => Some(s),
                    _ => None,
                }
            }
        }
    };
}
impl_block_elem!(half::f16, F16);
impl_block_elem!(f32, F32);
impl_block_elem!(f64, F64);
impl_block_elem!(i32, I32);
impl_block_elem!(i64, I64);
impl_block_elem!(u32, U32);
impl_block_elem!(bool, Bool);

/// Most operands of an elementwise primitive (`select` has three).
pub const MAX_BLOCK_INPUTS: usize = 3;

/// Requires `ins.len() == arity` and every operand as long as `out`; the
/// shape rules guarantee both, so a failure is an executor bug reported as
/// an error rather than a silently truncated loop.
pub fn check_block(prim: &str, ins: &[BlockRef<'_>], arity: usize, out: &BlockMut<'_>) -> Result<(), ExecError> {
    if ins.len() != arity {
        return Err(ExecError::kernel(prim, format!("expected {arity} operands, got {}", ins.len())));
    }
    if ins.iter().any(|b| b.len() != out.len()) {
        return Err(ExecError::kernel(prim, "operand and result sizes differ"));
    }
    Ok(())
}

/// Runs an elementwise block function over whole tensors: once on the whole
/// data when small, else over [`CHUNK`]-sized blocks in parallel. `f` sees
/// operands and result sliced to the same element range.
pub fn for_blocks(
    prim: &str,
    ins: &[&Tensor],
    out: &mut Tensor,
    f: impl Fn(&[BlockRef<'_>], BlockMut<'_>) -> Result<(), ExecError> + Sync,
) -> Result<(), ExecError> {
    let n = out.numel();
    if ins.len() > MAX_BLOCK_INPUTS || ins.iter().any(|t| t.numel() != n) {
        return Err(ExecError::kernel(prim, "operand and result sizes differ"));
    }
    let mut whole = [BlockRef::EMPTY; MAX_BLOCK_INPUTS];
    for (w, t) in whole.iter_mut().zip(ins) {
        *w = BlockRef::of(t);
    }
    let whole = &whole[..ins.len()];
    let out = BlockMut::of(out);
    if !worth_parallel(n) {
        return f(whole, out);
    }
    out.chunks(CHUNK).into_par_iter().enumerate().try_for_each(|(k, o)| {
        let lo = k * CHUNK;
        let range = lo..lo + o.len();
        let mut part = [BlockRef::EMPTY; MAX_BLOCK_INPUTS];
        for (p, w) in part.iter_mut().zip(whole) {
            *p = w.slice(range.clone());
        }
        f(&part[..whole.len()], o)
    })
}

/// `o[i] = f(a[i])` on one thread (the body of a block function).
#[inline(always)]
pub fn zip1<A: Copy, O>(a: &[A], o: &mut [O], f: impl Fn(A) -> O) {
    for (o, &a) in o.iter_mut().zip(a) {
        *o = f(a);
    }
}

/// `o[i] = f(a[i], b[i])` on one thread (the body of a block function).
#[inline(always)]
pub fn zip2<A: Copy, B: Copy, O>(a: &[A], b: &[B], o: &mut [O], f: impl Fn(A, B) -> O) {
    for ((o, &a), &b) in o.iter_mut().zip(a).zip(b) {
        *o = f(a, b);
    }
}

/// `o[i] = f(a[i], b[i], c[i])` on one thread (the body of a block function).
#[inline(always)]
pub fn zip3<A: Copy, B: Copy, C: Copy, O>(a: &[A], b: &[B], c: &[C], o: &mut [O], f: impl Fn(A, B, C) -> O) {
    for (((o, &a), &b), &c) in o.iter_mut().zip(a).zip(b).zip(c) {
        *o = f(a, b, c);
    }
}

/// Calls `$f::<T>(args)` with `T` the Rust type of a float dtype.
#[macro_export]
macro_rules! dispatch_float {
    ($dtype:expr, $prim:expr, $f:ident ( $($arg:expr),* )) => {
        match $dtype {
            $crate::dtype::DType::F32 => $f::<f32>($($arg),*),
            $crate::dtype::DType::F64 => $f::<f64>($($arg),*),
            d => Err($crate::ops::kernel::unsupported($prim, d)),
        }
    };
}

/// Calls `$f::<T>(args)` with `T` the Rust type of any numeric (non-bool) dtype.
#[macro_export]
macro_rules! dispatch_num {
    ($dtype:expr, $prim:expr, $f:ident ( $($arg:expr),* )) => {
        match $dtype {
            $crate::dtype::DType::F32 => $f::<f32>($($arg),*),
            $crate::dtype::DType::F64 => $f::<f64>($($arg),*),
            $crate::dtype::DType::I32 => $f::<i32>($($arg),*),
            $crate::dtype::DType::I64 => $f::<i64>($($arg),*),
            $crate::dtype::DType::U32 => $f::<u32>($($arg),*),
            d => Err($crate::ops::kernel::unsupported($prim, d)),
        }
    };
}

/// Calls `$f::<T>(args)` with `T` the Rust type of any dtype (bool included).
#[macro_export]
macro_rules! dispatch_any {
    ($dtype:expr, $f:ident ( $($arg:expr),* )) => {
        match $dtype {
            $crate::dtype::DType::F32 => $f::<f32>($($arg),*),
            $crate::dtype::DType::F64 => $f::<f64>($($arg),*),
            $crate::dtype::DType::I32 => $f::<i32>($($arg),*),
            $crate::dtype::DType::I64 => $f::<i64>($($arg),*),
            $crate::dtype::DType::U32 => $f::<u32>($($arg),*),
            $crate::dtype::DType::Bool => $f::<bool>($($arg),*),
            $crate::dtype::DType::F16 => $f::<$crate::half::f16>($($arg),*),
        }
    };
}
