//! Matrix products on [`Tr`]: `x.matmul(&y)` (NumPy's `@`), and the free
//! functions [`matmul`] and [`einsum`] re-exported from [`crate::ops`].

use crate::trace::Tr;
use graft_core::composite::linalg;

impl Tr {
    /// `np.matmul(self, other)`: 1-D operands promoted, batch dims broadcast.
    pub fn matmul(&self, other: &Tr) -> Tr {
        self.lift2(other, linalg::matmul)
    }
}

/// `np.matmul(x, y)`.
pub fn matmul(x: &Tr, y: &Tr) -> Tr {
    x.matmul(y)
}

/// `np.einsum(spec, *operands)`, e.g. `einsum("bij,bjk->bik", &[&a, &c])`;
/// see `graft_core::composite::linalg::einsum` for the supported syntax.
///
/// # Panics
/// If `operands` is empty: with no tensor there is no trace to record the
/// error in.
pub fn einsum(spec: &str, operands: &[&Tr]) -> Tr {
    let (first, rest) =
        operands.split_first().expect("einsum: need at least one operand (there is no trace without one)");
    first.lift_with(rest, |b, v| linalg::einsum(b, spec, v))
}
