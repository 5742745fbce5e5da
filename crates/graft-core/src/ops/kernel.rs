//! Shared kernel machinery: parallel loops over contiguous slices and dtype
//! dispatch. Kernels are tight loops over typed slices; the dtype `match`
//! happens once per kernel call, never per element.

use crate::dtype::DType;
use crate::error::ExecError;
use crate::tensor::{Element, Tensor};
use rayon::prelude::*;

/// Below this many elements a kernel stays on the calling thread: spawning
/// rayon tasks costs more than the work.
pub const PAR_MIN: usize = 1 << 15;
/// Elements per parallel task for elementwise loops (fits L1/L2 comfortably).
pub const CHUNK: usize = 1 << 13;

/// True when a loop over `n` elements is worth splitting across threads.
pub fn worth_parallel(n: usize) -> bool {
    n >= PAR_MIN && rayon::current_num_threads() > 1
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

/// Floating-point element types, with the special functions kernels need.
pub trait Real: Element + num_traits::Float + Send + Sync {
    /// The error function.
    fn erf(self) -> Self;
    /// Round to nearest, ties to even.
    fn round_even(self) -> Self;
}

impl Real for f32 {
    fn erf(self) -> Self {
        libm::erff(self)
    }
    fn round_even(self) -> Self {
        self.round_ties_even()
    }
}

impl Real for f64 {
    fn erf(self) -> Self {
        libm::erf(self)
    }
    fn round_even(self) -> Self {
        self.round_ties_even()
    }
}

/// Numeric (non-bool) element types.
pub trait Num: Element + num_traits::Num + num_traits::NumCast + Copy + Send + Sync {}
impl Num for f32 {}
impl Num for f64 {}
impl Num for i32 {}
impl Num for i64 {}

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
            $crate::dtype::DType::Bool => $f::<bool>($($arg),*),
        }
    };
}
