//! Automatic differentiation as graph rewrites (JAX-style).
//!
//! Every primitive gives two rules, both in its op family file:
//! - a **JVP rule** (forward mode): output tangents from input tangents. The
//!   tangent part it emits must be *linear* in the input tangents: tangents
//!   only flow through linear primitives (add, mul by a primal-derived
//!   coefficient, broadcast, reduce_sum, dot_general with one tangent side, ...);
//!   coefficients are computed from primals by ordinary equations.
//! - a **transpose rule**, meaningful for primitives that are linear in some
//!   operands: given output cotangents, the cotangents of the linear operands.
//!   A nonlinear primitive answers with [`not_linear`].
//!
//! Reverse mode is derived, never hand-written per op: `vjp` runs the JVP
//! into a scratch function, splits it into the forward (nonlinear) part and
//! the linear tangent part, copies the forward part, then transposes the
//! linear part equation by equation in reverse order. So forward work is done
//! once, JVP and VJP can never disagree, and every rule emits ordinary
//! primitives that have rules themselves (higher order for free).
//!
//! Naming: `x_dot` is the tangent of `x`, `x_bar` its cotangent, `ct` the
//! incoming cotangent inside a rule.
//!
//! Symbolic zeros: a tangent or cotangent that is known to be zero is `None`
//! and creates no equations; a rule whose input tangents are all `None` is not
//! even called.

pub mod api;
pub mod helpers;
mod jvp;
mod vjp;

pub use crate::transform::rewrite::Staged;
pub use api::{grad, hvp_func, jvp_func, linearize, value_and_grad, vjp_func, vjp_split, Wrt};
pub use jvp::{jvp_inline, jvp_inline_given};
pub use vjp::linearize_transpose;

use crate::error::IrError;
use crate::ir::{Builder, Value};
use crate::types::TensorType;

/// What a JVP rule sees. `primals` and `outputs` are values in the builder
/// the rule emits into; `tangents[i]` is `None` for a symbolic zero.
#[derive(Debug)]
pub struct JvpCx<'a> {
    /// Operands of the equation.
    pub primals: &'a [Value],
    /// Tangents of the operands (`None` = zero).
    pub tangents: &'a [Option<Value>],
    /// Results of the equation (already emitted; rules may reuse them, e.g. `exp`).
    pub outputs: &'a [Value],
    /// See [`JvpCx::replace_outputs`].
    pub replaced: &'a std::cell::RefCell<Option<Vec<Value>>>,
}

impl JvpCx<'_> {
    /// Hands the driver values equal to the equation's results, computed by
    /// the rule itself, to use in their place. A loop's JVP runs a primal
    /// loop anyway (to stack the residuals); when that loop also returns the
    /// carries and `ys`, the equation the driver emitted becomes dead and
    /// DCE removes it, so reverse mode runs the loop forward once instead of
    /// twice. The values must have the results' types (the driver checks).
    pub fn replace_outputs(&self, values: Vec<Value>) {
        *self.replaced.borrow_mut() = Some(values);
    }
}

/// What a transpose rule sees. Linear operands have no primal value in the
/// output builder (`inputs[i] == None`); the others are available.
#[derive(Debug)]
pub struct TransposeCx<'a> {
    /// Primal operands, `None` for the linear (tangent) operands.
    pub inputs: &'a [Option<Value>],
    /// Types of all operands.
    pub in_types: &'a [TensorType],
    /// Types of the results.
    pub out_types: &'a [TensorType],
    /// Cotangents of the results (`None` = zero).
    pub cts: &'a [Option<Value>],
}

impl TransposeCx<'_> {
    /// Whether operand `i` is linear (a tangent).
    pub fn is_linear(&self, i: usize) -> bool {
        self.inputs[i].is_none()
    }

    /// The primal value of a non-linear operand, or an error naming the rule.
    pub fn primal(&self, prim: &str, i: usize) -> Result<Value, IrError> {
        self.inputs[i].ok_or_else(|| not_linear_msg(prim, &format!("operand {i} must not be a tangent")))
    }
}

/// Differentiation rules of a primitive. No defaults: every family states
/// its rules, so a missing one fails the build.
pub trait Diff {
    /// Forward mode: tangents of the results (`None` = zero).
    fn jvp(&self, b: &mut Builder, cx: &JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError>;
    /// Transpose of the linear part: cotangents of the linear operands
    /// (entries for non-linear operands are ignored and should be `None`).
    fn transpose(&self, b: &mut Builder, cx: &TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError>;
}

/// The error a nonlinear primitive's transpose rule returns.
pub fn not_linear(prim: &str) -> IrError {
    not_linear_msg(prim, "it is not linear in any operand")
}

fn not_linear_msg(prim: &str, why: &str) -> IrError {
    IrError::NoRule {
        prim: prim.to_string(),
        rule: "transpose",
        msg: format!("internal error: a tangent reached `{prim}`, but {why}; its JVP rule or a caller emitted a nonlinear op on a tangent"),
    }
}
