//! Tiled layout moves and per-thread scratch, shared by the kernels that
//! reshuffle operands around a GEMM (the convolutions' wide and gathered
//! forms, `linalg::gemm_f`'s column-major route): one transpose, built
//! from register tiles (8 x 8 f32 tiles through AVX shuffles), instead of
//! one per caller. Only moves: the bits are the source's.

use super::kernel::{simd_loop, Real, SimdLoop};

/// Columns per strip of [`transpose_into`].
const COL_TILE: usize = 64;

/// Writes the transpose of the row-major `rows x cols` matrix `a` to `dst`:
/// element `(i, j)` of `a` goes to `dst[j * ld + i]` (`ld >= rows`), eight
/// rows at a time (fewer for the last group), so that neither side walks
/// memory a whole row apart per element, in strips of [`COL_TILE`] columns,
/// so that the destination rows one strip writes (half a cache line per
/// visit) stay in the L1 cache until the next group of rows fills them,
/// even at power-of-two strides.
pub(crate) fn transpose_into<T: Copy + 'static>(a: &[T], rows: usize, cols: usize, ld: usize, dst: &mut [T]) {
    simd_loop::<TransposeTiles, _>((a, rows, cols, ld, dst));
}

/// [`transpose_into`]'s loops, run through [`simd_loop`].
struct TransposeTiles;

impl<T: Copy + 'static> SimdLoop<(&[T], usize, usize, usize, &mut [T])> for TransposeTiles {
    type Output = ();

    #[inline(always)]
    fn run((a, rows, cols, ld, dst): (&[T], usize, usize, usize, &mut [T])) {
        for c0 in (0..cols).step_by(COL_TILE) {
            let cs = (c0, (c0 + COL_TILE).min(cols));
            let mut i0 = 0;
            while i0 < rows {
                let r = (rows - i0).min(8);
                match r {
                    8 => transpose_rows::<T, 8>(a, i0, cols, cs, ld, dst),
                    7 => transpose_rows::<T, 7>(a, i0, cols, cs, ld, dst),
                    6 => transpose_rows::<T, 6>(a, i0, cols, cs, ld, dst),
                    5 => transpose_rows::<T, 5>(a, i0, cols, cs, ld, dst),
                    4 => transpose_rows::<T, 4>(a, i0, cols, cs, ld, dst),
                    3 => transpose_rows::<T, 3>(a, i0, cols, cs, ld, dst),
                    2 => transpose_rows::<T, 2>(a, i0, cols, cs, ld, dst),
                    _ => transpose_rows::<T, 1>(a, i0, cols, cs, ld, dst),
                }
                i0 += r;
            }
        }
    }
}

/// Rows `i0..i0 + R` of [`transpose_into`]: tiles of `R x 8` are read row
/// by row into a local array (contiguous loads, bounds checked once per
/// row) and written column by column as runs of `R`; with constant sizes
/// the compiler keeps a tile in registers. Indexing `a` per element, with
/// a bounds check and a scalar load each, was most of `wide_kernel`'s time
/// (its batch chunks are often only a few rows). Full 8 x 8 tiles of f32
/// are transposed with AVX shuffles where the CPU has them ([`transpose8_f32`]):
/// the compiler writes a tile's columns element by element, which made
/// these transposes a seventh of a CNN step.
#[inline(always)]
fn transpose_rows<T: Copy + 'static, const R: usize>(
    a: &[T],
    i0: usize,
    cols: usize,
    (c0, c1): (usize, usize),
    ld: usize,
    dst: &mut [T],
) {
    const W: usize = 8;
    let src: [&[T]; R] = std::array::from_fn(|k| &a[(i0 + k) * cols..(i0 + k + 1) * cols]);
    let full = c1 - (c1 - c0) % W;
    #[cfg(target_arch = "x86_64")]
    let avx = if R == W && std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>() {
        pulp::x86::V3::try_new()
    } else {
        None
    };
    for j0 in (c0..full).step_by(W) {
        let tile: [[T; W]; R] = std::array::from_fn(|k| {
            let r = &src[k][j0..j0 + W];
            std::array::from_fn(|j| r[j])
        });
        #[cfg(target_arch = "x86_64")]
        if let (Some(simd), Some(t)) = (avx, (&tile as &dyn std::any::Any).downcast_ref::<[[f32; 8]; 8]>()) {
            let out = transpose8_f32(simd, *t);
            let out = (&out as &dyn std::any::Any).downcast_ref::<[[T; R]; W]>();
            let out = out.expect("T is f32 and R is 8 (checked above)");
            for (j, col) in out.iter().enumerate() {
                dst[(j0 + j) * ld + i0..(j0 + j) * ld + i0 + R].copy_from_slice(col);
            }
            continue;
        }
        for j in 0..W {
            let d = &mut dst[(j0 + j) * ld + i0..(j0 + j) * ld + i0 + R];
            for (k, y) in d.iter_mut().enumerate() {
                *y = tile[k][j];
            }
        }
    }
    for j in full..c1 {
        let d = &mut dst[j * ld + i0..j * ld + i0 + R];
        for (k, y) in d.iter_mut().enumerate() {
            *y = src[k][j];
        }
    }
}

/// The transpose of an 8 x 8 f32 tile in eight AVX registers: unpacks
/// interleave row pairs, shuffles gather quadruples, lane permutes join
/// the 128-bit halves. Only moves: the same bits as an element-wise copy.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn transpose8_f32(simd: pulp::x86::V3, rows: [[f32; 8]; 8]) -> [[f32; 8]; 8] {
    use std::arch::x86_64::__m256;
    let avx = simd.avx;
    let r: [__m256; 8] = rows.map(pulp::cast);
    let lo = |a: usize, b: usize| avx._mm256_unpacklo_ps(r[a], r[b]);
    let hi = |a: usize, b: usize| avx._mm256_unpackhi_ps(r[a], r[b]);
    let t = [lo(0, 1), hi(0, 1), lo(2, 3), hi(2, 3), lo(4, 5), hi(4, 5), lo(6, 7), hi(6, 7)];
    let even = |a: usize, b: usize| avx._mm256_shuffle_ps::<0x44>(t[a], t[b]);
    let odd = |a: usize, b: usize| avx._mm256_shuffle_ps::<0xEE>(t[a], t[b]);
    let s = [even(0, 2), odd(0, 2), even(1, 3), odd(1, 3), even(4, 6), odd(4, 6), even(5, 7), odd(5, 7)];
    let low = |a: usize| avx._mm256_permute2f128_ps::<0x20>(s[a], s[a + 4]);
    let high = |a: usize| avx._mm256_permute2f128_ps::<0x31>(s[a], s[a + 4]);
    [low(0), low(1), low(2), low(3), high(0), high(1), high(2), high(3)].map(pulp::cast)
}

thread_local! {
    /// Scratch vectors kept between kernel calls, any element type.
    static SCRATCH: std::cell::RefCell<Vec<Box<dyn std::any::Any>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A vector of at least `len` elements (contents unspecified) from this
/// thread's scratch, or a new zeroed one. Taken out, not borrowed, so a
/// rayon task run on this thread while it waits may take another.
pub(crate) fn take_scratch<T: Real + 'static>(len: usize) -> Vec<T> {
    let found = SCRATCH.with(|s| {
        let mut s = s.borrow_mut();
        // The smallest that is long enough.
        let at = (0..s.len())
            .filter_map(|i| s[i].downcast_ref::<Vec<T>>().filter(|v| v.len() >= len).map(|v| (v.len(), i)))
            .min()?
            .1;
        s.swap_remove(at).downcast::<Vec<T>>().ok()
    });
    match found {
        Some(v) => *v,
        None => vec![T::zero(); len],
    }
}

/// Hands a vector back to this thread's scratch (at most eight are kept).
pub(crate) fn put_scratch<T: Real + 'static>(v: Vec<T>) {
    SCRATCH.with(|s| {
        let mut s = s.borrow_mut();
        if s.len() < 8 {
            s.push(Box::new(v));
        }
    });
}

#[cfg(test)]
mod tests {
    use super::transpose_into;

    /// Every element lands at `j * ld + i`, whole tiles and column strips
    /// or not, and nothing between the rows of `dst` is touched; f32 (the
    /// AVX tile path) and i32 (the generic one) alike.
    #[test]
    fn transpose_into_moves_every_element_once() {
        for rows in [0, 1, 3, 8, 9, 16, 21] {
            for cols in [0, 1, 7, 8, 13, 24, 64, 70, 136] {
                for extra in [0, 3] {
                    let ld = rows + extra;
                    let a: Vec<i32> = (0..(rows * cols) as i32).collect();
                    let mut dst = vec![-1; cols * ld];
                    transpose_into(&a, rows, cols, ld, &mut dst);
                    let af: Vec<f32> = a.iter().map(|&v| v as f32).collect();
                    let mut df = vec![-1.0f32; cols * ld];
                    transpose_into(&af, rows, cols, ld, &mut df);
                    for j in 0..cols {
                        for i in 0..ld {
                            let want = if i < rows { (i * cols + j) as i32 } else { -1 };
                            assert_eq!(dst[j * ld + i], want, "rows {rows}, cols {cols}, ld {ld}: ({i}, {j})");
                            assert_eq!(
                                df[j * ld + i],
                                want as f32,
                                "f32 rows {rows}, cols {cols}, ld {ld}: ({i}, {j})"
                            );
                        }
                    }
                }
            }
        }
    }
}
