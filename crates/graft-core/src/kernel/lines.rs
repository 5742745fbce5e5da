//! Index helpers for the device forms of primitives that work along one
//! axis (`ops::reduce`'s reductions and index searches, `ops::cumulative`,
//! `ops::sort`'s argsort): row kernels whose rows are result elements and
//! whose inner points walk a line of the operand.
//!
//! The CPU runs these primitives with kernels of its own (one sequential
//! pass per line); the device forms trade work (each element reduces its
//! whole line) for determinism and no new kernel-IR construct, which is
//! why their work is bounded by [`LINE_WORK_MAX`].

use super::ir::{Index, Inst, Lit, Reg};
use crate::dtype::DType;
use crate::ops::binary::{Binary, Compare};

/// Most `elements x line length` the kernels over whole lines visit (2^28;
/// `ops::cumulative::device_kernel` and `ops::sort::argsort_device_kernels`
/// give each element a row reducing its line): beyond it the op runs on the
/// host, where it is one sequential pass (a scan) or a sort per line.
pub const LINE_WORK_MAX: usize = 1 << 28;

/// Row-major strides of `shape`, as the kernel IR's signed strides.
pub fn row_major(shape: &[usize]) -> Vec<isize> {
    crate::types::strides_of(shape).into_iter().map(|s| s as isize).collect()
}

/// The indices of a row kernel with one row per element of `shape` whose
/// inner points `(element, j)` walk the element's line along `axis`.
#[derive(Debug, Clone)]
pub struct LineIndex {
    /// The line's element `j` (the element's coordinates with `j` along the axis).
    pub line: Index,
    /// `j` itself.
    pub j: Index,
    /// The element's own coordinate along the axis.
    pub own: Index,
}

impl LineIndex {
    /// The indices for lines of length `len` along `axis` of `shape`
    /// (`len` is `shape[axis]`; `axis < shape.len()`).
    pub fn new(shape: &[usize], axis: usize, len: usize) -> LineIndex {
        let strides = row_major(shape);
        let mut dims = shape.to_vec();
        dims.push(len);
        let mut line = strides.clone();
        line[axis] = 0;
        line.push(strides[axis]);
        let mut own = vec![0isize; shape.len() + 1];
        own[axis] = 1;
        let mut j = vec![0isize; shape.len() + 1];
        j[shape.len()] = 1;
        let index = |strides: Vec<isize>| Index::Strided { dims: dims.clone(), strides, offset: 0 };
        LineIndex { line: index(line), j: index(j), own: index(own) }
    }
}

/// Pushes onto `body` a test "is NaN" of each f32 register of `xs`, on the
/// bits: `(bits(x) & 0x7fffffff) > 0x7f800000`, because a shader compiler
/// may fold `x != x` to false. The two i32 literals come first, then a bit
/// cast, an and and a compare per register; returns each test's register,
/// in the order of `xs`.
pub fn push_nan_tests(body: &mut Vec<Inst>, xs: &[Reg]) -> Vec<Reg> {
    let lit = |v: u32| Inst::Lit(Lit { dtype: DType::I32, bits: u64::from(v) });
    let mask = body.len() as Reg;
    body.extend([lit(0x7fff_ffff), lit(0x7f80_0000)]);
    xs.iter()
        .map(|&x| {
            let b = body.len() as Reg;
            body.extend([
                Inst::Bitcast(DType::I32, x),
                Inst::Binary(Binary::And, b, mask),
                Inst::Compare(Compare::Gt, b + 1, mask + 1),
            ]);
            b + 2
        })
        .collect()
}
