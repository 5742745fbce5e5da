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
/// An empty operand list fails the enclosing trace.
pub fn einsum(spec: &str, operands: &[&Tr]) -> Tr {
    let Some((first, rest)) = operands.split_first() else {
        return crate::trace::fail_without_operand(graft_core::IrError::invalid("einsum", "need at least one operand"));
    };
    first.lift_with(rest, |b, v| linalg::einsum(b, spec, v))
}
