//! Small helpers of the loop kernels: the types of a slice of a body's
//! parameters or outputs, and copying a chunk between buffers of one dtype.
//! The rewrites of bodies (JVP as a function, the three-way split,
//! transposing, pruning) live in `transform/rewrite.rs`.

use crate::error::ExecError;
use crate::ir::Func;
use crate::tensor::Storage;
use crate::types::TensorType;

/// The types of `f`'s parameters in `range`.
pub(crate) fn param_types(f: &Func, range: std::ops::Range<usize>) -> Vec<TensorType> {
    f.params[range].iter().map(|&p| f.ty(p).clone()).collect()
}

/// The types of `f`'s outputs in `range`.
pub(crate) fn output_types(f: &Func, range: std::ops::Range<usize>) -> Vec<TensorType> {
    f.outputs[range].iter().map(|&p| f.ty(p).clone()).collect()
}

/// Copies `n` elements from `src[src_at..]` to `dst[dst_at..]` (same dtype).
pub(crate) fn copy_chunk(
    prim: &str,
    src: &Storage,
    src_at: usize,
    dst: &mut Storage,
    dst_at: usize,
    n: usize,
) -> Result<(), ExecError> {
    macro_rules! go {
        ($($v:ident),*) => {
            match (src, dst) {
                $( (Storage::$v(s), Storage::$v(d)) => {
                    d[dst_at..dst_at + n].copy_from_slice(&s[src_at..src_at + n]);
                    Ok(())
                } )*
                (s, d) => Err(ExecError::kernel(
                    prim,
                    format!("internal error: copying {} elements into a {} buffer", s.dtype(), d.dtype()),
                )),
            }
        };
    }
    go!(F16, F32, F64, I32, I64, U32, Bool)
}
