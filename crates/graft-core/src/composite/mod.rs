//! Composite ops: a library of higher-level operations written over the
//! primitives with the [`Builder`](crate::ir::Builder). Because they expand
//! to primitives, every transform handles them for free. The Rust tracing
//! API and the graft language both call these functions, so each composite
//! has one definition.
//!
//! Modules: [`broadcast`] (NumPy broadcasting), [`math`] (elementwise math
//! and activations), [`reduce`] (reductions, softmax family), [`shape`]
//! (user-level shape helpers and creators), [`linalg`] (matmul, linear,
//! einsum), [`decomp`] (cholesky, triangular and general solves, inv,
//! slogdet/det, eye, diag, tril/triu, trace, outer, kron, norm), [`spectral`]
//! (qr, eigh, svd and, from the SVD, pinv, lstsq, matrix norms, rank and
//! condition number), [`norm`] (layer/batch norm), [`loss`], [`attention`],
//! [`random`] (keys and distributions over the random primitives),
//! [`conv`] (convolution and transposed convolution), [`pool`] (max, average,
//! smooth-max and adaptive pooling), [`embed`] (embedding lookup, one-hot) and
//! [`dropout`].
//!
//! Conventions shared by all of them: axes arrive normalised (`usize`, in
//! range); user-facing arguments are validated with
//! [`IrError::Invalid`](crate::error::IrError::Invalid) messages naming the
//! op and the offending shapes; numbers become constants of the operand's
//! dtype (no implicit promotion).

pub mod attention;
pub mod broadcast;
pub mod conv;
pub mod decomp;
pub mod dropout;
pub mod embed;
pub mod linalg;
pub mod loss;
pub mod math;
pub mod norm;
pub mod pool;
pub mod random;
pub mod reduce;
pub mod shape;
pub mod sort;
pub mod spectral;
