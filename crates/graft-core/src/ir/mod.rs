//! The IR: a typed SSA graph ("the RISC DAG") of primitive operations.
//!
//! A [`Func`] is a jaxpr-like list of equations in topological order.
//! Invariants (checked by [`verify`]):
//! - every value is defined exactly once, as a parameter or an equation output;
//! - every equation operand is defined before the equation (params first);
//! - every value's recorded type is what its primitive's shape rule infers;
//! - outputs refer to defined values.
//!
//! Values are dense `u32` indices into `Func::types`, so per-value side
//! tables are plain vectors.

mod builder;
mod copy;
mod print;
mod verify;

pub use builder::Builder;
pub use copy::{copy_eqns, lookup};
pub use print::print_func;
pub use verify::verify;

use crate::ops::Prim;
use crate::types::TensorType;
use std::fmt;
use std::sync::Arc;

/// An SSA value: the index of its type in [`Func::types`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Value(pub u32);

impl Value {
    /// The index as `usize`, for side tables.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%{}", self.0)
    }
}

/// Where an equation came from in user source. Travels with the equation
/// through every rewrite so late errors point at the user's line.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SrcLoc {
    /// File name as the user gave it.
    pub file: Arc<str>,
    /// 1-based line.
    pub line: u32,
    /// 1-based column.
    pub col: u32,
}

impl fmt::Display for SrcLoc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.col)
    }
}

/// One primitive application: `outputs = prim(inputs)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Eqn {
    /// The primitive and its static parameters.
    pub prim: Prim,
    /// Operands.
    pub inputs: Vec<Value>,
    /// Results (most primitives have one).
    pub outputs: Vec<Value>,
    /// Source location, if known.
    pub loc: Option<Arc<SrcLoc>>,
}

/// A function: typed parameters, equations in topological order, outputs.
#[derive(Debug, Clone, PartialEq)]
pub struct Func {
    /// Name, for printing and error messages.
    pub name: String,
    /// Type of every value, indexed by [`Value::index`].
    pub types: Vec<TensorType>,
    /// Parameter values, in call order.
    pub params: Vec<Value>,
    /// Equations, in topological order.
    pub eqns: Vec<Eqn>,
    /// Returned values (a function may return several).
    pub outputs: Vec<Value>,
    /// What values are called (`x`, `h`, `x_bar`), for printing only.
    pub names: Names,
}

/// Optional names of a function's values, for printing only: the front ends
/// name parameters and `let` bindings, and the transforms name what they
/// make after its role (`x_dot` a tangent of `x`, `x_bar` its cotangent,
/// `x_resid` a residual saved for a linear map), so `graft ir` of
/// `vmap(grad(f))` can be followed. No pass reads them, and two functions
/// that differ only in names are equal.
#[derive(Debug, Clone, Default)]
pub struct Names(Vec<Option<Arc<str>>>);

impl PartialEq for Names {
    fn eq(&self, _: &Names) -> bool {
        true
    }
}

impl Names {
    /// The name of `v`, if it has one.
    pub fn get(&self, v: Value) -> Option<&Arc<str>> {
        self.0.get(v.index()).and_then(Option::as_ref)
    }

    /// Names `v` (replacing any name it had).
    pub fn set(&mut self, v: Value, name: Arc<str>) {
        if self.0.len() <= v.index() {
            self.0.resize(v.index() + 1, None);
        }
        self.0[v.index()] = Some(name);
    }

    /// Names `v` unless it already has a name.
    pub fn set_if_unnamed(&mut self, v: Value, name: Arc<str>) {
        if self.get(v).is_none() {
            self.set(v, name);
        }
    }
}

impl Func {
    /// Type of a value.
    ///
    /// Panics if `v` is not a value of this function: handles are only ever
    /// created by the function's own builder, so this is an internal error.
    pub fn ty(&self, v: Value) -> &TensorType {
        &self.types[v.index()]
    }

    /// Parameter types, in order.
    pub fn param_types(&self) -> Vec<TensorType> {
        self.params.iter().map(|&v| self.ty(v).clone()).collect()
    }

    /// Output types, in order.
    pub fn output_types(&self) -> Vec<TensorType> {
        self.outputs.iter().map(|&v| self.ty(v).clone()).collect()
    }

    /// Number of values (params plus equation outputs).
    pub fn n_values(&self) -> usize {
        self.types.len()
    }

    /// The name of `v`, if it has one (see [`Names`]).
    pub fn name_of(&self, v: Value) -> Option<&str> {
        self.names.get(v).map(|n| &**n)
    }

    /// Counts equations whose primitive has the given name (for structure tests).
    pub fn count_prim(&self, name: &str) -> usize {
        use crate::ops::Op;
        self.eqns.iter().filter(|e| e.prim.name() == name).count()
    }
}

impl fmt::Display for Func {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&print_func(self))
    }
}
