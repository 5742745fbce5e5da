//! The explicit graph builder: typed handles, shape inference at construction.
//!
//! Every `emit` runs the primitive's shape rule; a bad operand is returned as
//! a structured [`IrError`], never a panic. Op-specific convenience methods
//! (`b.add(x, y)`, `b.reshape(x, ..)`) are defined next to each primitive in
//! `ops/`, so a primitive's builder entry point lives in its own home.

use super::{Eqn, Func, SrcLoc, Value};
use crate::error::IrError;
use crate::ops::{Op, Prim};
use crate::types::TensorType;
use std::sync::Arc;

/// Builds one [`Func`].
#[derive(Debug, Clone)]
pub struct Builder {
    func: Func,
    loc: Option<Arc<SrcLoc>>,
}

impl Builder {
    /// Starts an empty function.
    pub fn new(name: impl Into<String>) -> Builder {
        Builder {
            func: Func {
                name: name.into(),
                types: Vec::new(),
                params: Vec::new(),
                eqns: Vec::new(),
                outputs: Vec::new(),
                names: Default::default(),
            },
            loc: None,
        }
    }

    /// Adds a parameter of the given type.
    pub fn param(&mut self, ty: TensorType) -> Value {
        let v = self.new_value(ty);
        self.func.params.push(v);
        v
    }

    /// The function name.
    pub fn name(&self) -> &str {
        &self.func.name
    }

    /// Names `v` for printing (see [`super::Names`]); replaces any earlier name.
    pub fn set_name(&mut self, v: Value, name: impl Into<Arc<str>>) {
        self.func.names.set(v, name.into());
    }

    /// Names `v` unless it already has a name.
    pub fn name_if_unnamed(&mut self, v: Value, name: impl Into<Arc<str>>) {
        self.func.names.set_if_unnamed(v, name.into());
    }

    /// The name of `v`, if it has one.
    pub fn name_of(&self, v: Value) -> Option<Arc<str>> {
        self.func.names.get(v).cloned()
    }

    /// Sets the source location attached to subsequently emitted equations.
    pub fn set_loc(&mut self, loc: Option<Arc<SrcLoc>>) {
        self.loc = loc;
    }

    /// Type of a value, or an error if the handle is foreign to this builder.
    pub fn ty(&self, v: Value) -> Result<&TensorType, IrError> {
        self.func.types.get(v.index()).ok_or_else(|| IrError::UnknownValue { value: v, func: self.func.name.clone() })
    }

    /// The function built so far (read-only).
    pub fn func(&self) -> &Func {
        &self.func
    }

    /// Applies a primitive, inferring and recording its output types.
    pub fn emit(&mut self, prim: impl Into<Prim>, inputs: &[Value]) -> Result<Vec<Value>, IrError> {
        let prim = prim.into();
        let in_types = inputs.iter().map(|&v| self.ty(v).cloned()).collect::<Result<Vec<_>, _>>()?;
        let out_types = prim.infer(&in_types)?;
        let outputs: Vec<Value> = out_types.into_iter().map(|t| self.new_value(t)).collect();
        self.func.eqns.push(Eqn { prim, inputs: inputs.to_vec(), outputs: outputs.clone(), loc: self.loc.clone() });
        Ok(outputs)
    }

    /// Applies a single-output primitive.
    pub fn emit1(&mut self, prim: impl Into<Prim>, inputs: &[Value]) -> Result<Value, IrError> {
        let prim = prim.into();
        let name = prim.name();
        let outs = self.emit(prim, inputs)?;
        match outs.as_slice() {
            [v] => Ok(*v),
            _ => Err(IrError::invalid(name, format!("expected one result, primitive returned {}", outs.len()))),
        }
    }

    /// Finishes the function with the given outputs.
    pub fn finish(mut self, outputs: &[Value]) -> Result<Func, IrError> {
        for &v in outputs {
            self.ty(v)?;
        }
        self.func.outputs = outputs.to_vec();
        Ok(self.func)
    }

    /// Removes the equation whose results are exactly `outputs`, if no
    /// equation reads them and none is a returned output; says whether it
    /// did. The values keep their types but are defined by nothing (the
    /// verifier allows unused undefined values; DCE renumbers them away).
    /// The JVP driver uses it to drop its copy of an equation whose rule
    /// computed the results itself, which DCE could not drop when the
    /// equation has an effect (it would print twice).
    pub(crate) fn retract(&mut self, outputs: &[Value]) -> bool {
        if outputs.is_empty() {
            return false;
        }
        let Some(i) = self.func.eqns.iter().rposition(|e| e.outputs == outputs) else { return false };
        let read = self.func.eqns[i + 1..].iter().any(|e| e.inputs.iter().any(|v| outputs.contains(v)))
            || self.func.outputs.iter().any(|v| outputs.contains(v));
        if read {
            return false;
        }
        self.func.eqns.remove(i);
        true
    }

    fn new_value(&mut self, ty: TensorType) -> Value {
        let v =
            Value(u32::try_from(self.func.types.len()).expect("internal error: more than 2^32 values in one function"));
        self.func.types.push(ty);
        v
    }
}
