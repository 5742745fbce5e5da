//! Control primitives: `call`, the application of a sub-function.
//!
//! A `call` equation holds its callee as an `Arc<Func>`; its operands must
//! have exactly the callee's parameter types and its results are the
//! callee's output types. The printer prints each callee once, before its
//! first caller; the verifier checks callees recursively. Two calls are equal
//! only if they hold the *same* callee (`Arc::ptr_eq`): structurally equal
//! functions built separately are different callees, which keeps equality
//! O(1) and matches how the printer deduplicates.
//!
//! `call` is the hook later used for rematerialisation (checkpoint) and
//! user-defined differentiation rules, which attach behaviour to a callee.

use super::{check, Op};
use crate::error::{ExecError, IrError, TypeError};
use crate::ir::{Builder, Func, Value};
use crate::tensor::Tensor;
use crate::types::TensorType;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// Applies a sub-function to operands.
#[derive(Clone)]
pub struct Call {
    /// The callee.
    pub func: Arc<Func>,
}

impl PartialEq for Call {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.func, &other.func)
    }
}

impl Eq for Call {}

impl Hash for Call {
    fn hash<H: Hasher>(&self, state: &mut H) {
        Arc::as_ptr(&self.func).hash(state);
    }
}

impl fmt::Debug for Call {
    /// Names the callee instead of dumping its body (printed separately).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Call(@{})", self.func.name)
    }
}

/// Types of `values` in `func`, or `None` if a handle is foreign to it
/// (a malformed callee must be a type error, not a panic).
fn types_of(func: &Func, values: &[Value]) -> Option<Vec<TensorType>> {
    values.iter().map(|v| func.types.get(v.index()).cloned()).collect()
}

impl Op for Call {
    fn name(&self) -> &'static str {
        "call"
    }

    fn params(&self) -> String {
        format!("func=@{}", self.func.name)
    }

    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        let name = &self.func.name;
        let (Some(params), Some(results)) =
            (types_of(&self.func, &self.func.params), types_of(&self.func, &self.func.outputs))
        else {
            return Err(check::err(
                self,
                ins,
                format!("expected a well-formed callee, but @{name} has untyped values"),
            ));
        };
        if ins.len() != params.len() {
            return Err(check::err(
                self,
                ins,
                format!("expected {} operands (the parameters of @{name})", params.len()),
            ));
        }
        if let Some(i) = (0..ins.len()).find(|&i| ins[i] != params[i]) {
            return Err(check::err(
                self,
                ins,
                format!("expected operand {i} to be {} (parameter {i} of @{name})", params[i]),
            ));
        }
        Ok(results)
    }

    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        let results = crate::exec::run_func(self.func.clone(), ins)?;
        if results.len() != outs.len() {
            return Err(ExecError::kernel(
                "call",
                format!(
                    "internal error: @{} returned {} results for {} outputs",
                    self.func.name,
                    results.len(),
                    outs.len()
                ),
            ));
        }
        for (o, r) in outs.iter_mut().zip(results) {
            *o = r;
        }
        Ok(())
    }

    fn subfuncs(&self) -> Vec<Arc<Func>> {
        vec![self.func.clone()]
    }
}

impl Builder {
    /// Calls `func` on `args`; returns one value per callee output.
    pub fn call(&mut self, func: Arc<Func>, args: &[Value]) -> Result<Vec<Value>, IrError> {
        self.emit(Call { func }, args)
    }
}

impl crate::ad::Diff for Call {
    // The tangent of a call is the callee's JVP, inlined: the tangent
    // equations then sit in the caller, where reverse mode can split and
    // transpose them like any other equations.
    fn jvp(&self, b: &mut Builder, cx: &crate::ad::JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        let (_, tangents) = crate::ad::jvp_inline(b, &self.func, cx.primals, cx.tangents)?;
        Ok(tangents)
    }

    fn transpose(&self, _b: &mut Builder, _cx: &crate::ad::TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        // Never reached: the JVP rule inlines the callee, so no call is linear.
        Err(crate::ad::not_linear(self.name()))
    }
}
