//! JSON <-> tensor conversion for eval inputs and outputs.
//!
//! GradBench sends arrays as nested JSON lists (`double[][]` is a list of
//! rows) and expects results in the same form. Inputs become row-major f64
//! (or i64, for index data) tensors whose shape is the nesting; a ragged
//! list, a non-number leaf or a non-integer where integers are required is an
//! input error naming the field and the element's index path, never a panic.
//! [`Dims`] checks that the shapes of several fields agree on named
//! dimensions (`mu: [k, d]` and `x: [n, d]` share `d`), so a wrong-shaped
//! input is reported before any compilation happens.
//!
//! Invariant: `to_json(&from_json(v)) == v` for every rectangular numeric
//! list `v` (numbers are written shortest-round-trip by serde_json).

use graft_core::tensor::Storage;
use graft_core::{DType, Tensor};
use serde_json::{Map, Number, Value};

use crate::error::GbError;
use crate::protocol::json_kind;

/// The shape of nested lists, following first elements. An empty list ends
/// the walk: `[]` has shape `[0]`, `[[], []]` has shape `[2, 0]`.
fn nested_shape(v: &Value) -> Vec<usize> {
    let mut shape = Vec::new();
    let mut cur = v;
    while let Value::Array(items) = cur {
        shape.push(items.len());
        match items.first() {
            Some(first) => cur = first,
            None => break,
        }
    }
    shape
}

fn path_str(path: &[usize]) -> String {
    path.iter().map(|i| format!("[{i}]")).collect()
}

/// Walks `v` checking it is rectangular with `shape`, pushing leaves in
/// row-major order through `leaf`.
fn flatten<T>(
    field: &str,
    v: &Value,
    shape: &[usize],
    path: &mut Vec<usize>,
    out: &mut Vec<T>,
    leaf: &dyn Fn(&Value) -> Result<T, String>,
) -> Result<(), GbError> {
    let depth = path.len();
    if depth == shape.len() {
        let x = leaf(v).map_err(|msg| match path.is_empty() {
            true => GbError::input(field, msg),
            false => GbError::input(field, format!("element {}: {msg}", path_str(path))),
        })?;
        out.push(x);
        return Ok(());
    }
    match v {
        Value::Array(items) if items.len() == shape[depth] => {
            for (i, item) in items.iter().enumerate() {
                path.push(i);
                flatten(field, item, shape, path, out, leaf)?;
                path.pop();
            }
            Ok(())
        }
        Value::Array(items) => Err(GbError::input(
            field,
            format!(
                "ragged array: element {} has length {}, expected {} (shape {:?})",
                path_str(path),
                items.len(),
                shape[depth],
                shape
            ),
        )),
        other => Err(GbError::input(
            field,
            format!("element {} is {}, expected an array of length {}", path_str(path), json_kind(other), shape[depth]),
        )),
    }
}

fn leaf_f64(v: &Value) -> Result<f64, String> {
    match v {
        Value::Number(n) => n.as_f64().ok_or_else(|| format!("number {n} is not representable as f64")),
        other => Err(format!("expected a number, found {}", json_kind(other))),
    }
}

fn leaf_i64(v: &Value) -> Result<i64, String> {
    match v {
        Value::Number(n) => n.as_i64().ok_or_else(|| format!("expected an integer, found {n}")),
        other => Err(format!("expected an integer, found {}", json_kind(other))),
    }
}

fn collect<T: graft_core::Element>(
    field: &str,
    v: &Value,
    leaf: &dyn Fn(&Value) -> Result<T, String>,
) -> Result<Tensor, GbError> {
    let shape = nested_shape(v);
    // The shape follows first elements only, so its product may promise far
    // more leaves than the JSON holds (or overflow; the walk then reports the
    // list as ragged): reserve at most what a modest input holds and let the
    // walk grow the vector with the leaves it finds.
    let numel = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).unwrap_or(usize::MAX);
    let mut out = Vec::with_capacity(numel.min(1 << 16));
    flatten(field, v, &shape, &mut Vec::new(), &mut out, leaf)?;
    // The walk above pushed exactly product(shape) leaves.
    Tensor::from_vec(shape, out).map_err(|e| GbError::input(field, format!("internal error: {e}")))
}

/// A number or nested list of numbers as an f64 tensor (a bare number is rank 0).
pub fn f64_tensor(field: &str, v: &Value) -> Result<Tensor, GbError> {
    collect(field, v, &leaf_f64)
}

/// An integer or nested list of integers as an i64 tensor (index data:
/// correspondences, triangles, parents). Non-integral numbers are errors.
pub fn i64_tensor(field: &str, v: &Value) -> Result<Tensor, GbError> {
    collect(field, v, &leaf_i64)
}

fn float_json(x: f64) -> Result<Value, GbError> {
    Number::from_f64(x)
        .map(Value::Number)
        .ok_or_else(|| GbError::Output(format!("{x} cannot be written as JSON (not finite)")))
}

fn element_json(s: &Storage, i: usize) -> Result<Value, GbError> {
    Ok(match s {
        Storage::F16(v) => float_json(v[i].to_f64())?,
        Storage::F32(v) => float_json(v[i] as f64)?,
        Storage::F64(v) => float_json(v[i])?,
        Storage::I32(v) => Value::from(v[i]),
        Storage::I64(v) => Value::from(v[i]),
        Storage::U32(v) => Value::from(v[i]),
        Storage::Bool(v) => Value::Bool(v[i]),
    })
}

/// A tensor as nested JSON lists (rank 0 gives a bare number). Floats that
/// are NaN or infinite are output errors: JSON has no spelling for them.
pub fn to_json(t: &Tensor) -> Result<Value, GbError> {
    fn build(s: &Storage, shape: &[usize], offset: usize) -> Result<Value, GbError> {
        match shape.split_first() {
            None => element_json(s, offset),
            Some((&n, rest)) => {
                let stride: usize = rest.iter().product();
                (0..n).map(|i| build(s, rest, offset + i * stride)).collect::<Result<Vec<_>, _>>().map(Value::Array)
            }
        }
    }
    build(t.storage(), t.shape(), 0)
}

/// A tensor's elements as one flat JSON list, row-major, whatever its rank.
pub fn to_json_flat(t: &Tensor) -> Result<Value, GbError> {
    (0..t.numel()).map(|i| element_json(t.storage(), i)).collect::<Result<Vec<_>, _>>().map(Value::Array)
}

/// A one-element tensor as a bare JSON number.
pub fn scalar_json(t: &Tensor) -> Result<Value, GbError> {
    if t.numel() != 1 {
        return Err(GbError::Output(format!("expected one number, found a tensor of shape {:?}", t.shape())));
    }
    element_json(t.storage(), 0)
}

/// One dimension of an expected shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dim {
    /// Exactly this size.
    Fixed(usize),
    /// A named size: bound by its first use, checked against every later one.
    Var(&'static str),
}

/// Named dimension sizes shared by the fields of one input.
#[derive(Debug, Clone, Default)]
pub struct Dims {
    /// (name, size, field that fixed it), in binding order.
    vars: Vec<(&'static str, usize, String)>,
}

impl Dims {
    /// No dimension bound yet.
    pub fn new() -> Dims {
        Dims::default()
    }

    /// The size bound to `name`, if any.
    pub fn get(&self, name: &str) -> Option<usize> {
        self.vars.iter().find(|(n, _, _)| *n == name).map(|(_, s, _)| *s)
    }

    /// Binds `name` to `size` (taken from `field`), or checks it against an
    /// earlier binding.
    pub fn bind(&mut self, name: &'static str, size: usize, field: &str) -> Result<(), GbError> {
        match self.vars.iter().find(|(n, _, _)| *n == name) {
            Some((_, s, from)) if *s != size => {
                Err(GbError::input(field, format!("dimension {name} is {size} here but {s} from field `{from}`")))
            }
            Some(_) => Ok(()),
            None => {
                self.vars.push((name, size, field.to_string()));
                Ok(())
            }
        }
    }

    /// Checks `shape` (of `field`) against `spec`, binding unbound names.
    pub fn check(&mut self, field: &str, shape: &[usize], spec: &[Dim]) -> Result<(), GbError> {
        let want = || {
            let parts: Vec<String> = spec
                .iter()
                .map(|d| match d {
                    Dim::Fixed(n) => n.to_string(),
                    Dim::Var(v) => v.to_string(),
                })
                .collect();
            format!("[{}]", parts.join(", "))
        };
        // An empty list has unknown inner sizes: `[]` read as rank 1 stands
        // for any shape whose leading size is 0.
        let empty = shape.len() == 1 && shape[0] == 0 && !spec.is_empty();
        if shape.len() != spec.len() && !empty {
            return Err(GbError::input(field, format!("expected shape {}, found {:?}", want(), shape)));
        }
        for (i, d) in spec.iter().enumerate() {
            let size = if empty && i > 0 { continue } else { shape[i] };
            match *d {
                Dim::Fixed(n) if n != size => {
                    return Err(GbError::input(
                        field,
                        format!("expected shape {}, found {:?} (axis {i} must be {n})", want(), shape),
                    ))
                }
                Dim::Fixed(_) => {}
                Dim::Var(name) => self.bind(name, size, field)?,
            }
        }
        Ok(())
    }
}

/// Typed access to the fields of an object-valued input, with errors that
/// name the field's dotted path.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    obj: &'a Map<String, Value>,
    prefix: &'a str,
}

impl<'a> Input<'a> {
    /// Views `v` as an object input.
    pub fn new(v: &'a Value) -> Result<Input<'a>, GbError> {
        Input::at(v, "")
    }

    fn at(v: &'a Value, prefix: &'a str) -> Result<Input<'a>, GbError> {
        match v {
            Value::Object(obj) => Ok(Input { obj, prefix }),
            other => Err(GbError::input(
                if prefix.is_empty() { "input" } else { prefix },
                format!("expected an object, found {}", json_kind(other)),
            )),
        }
    }

    fn path(&self, name: &str) -> String {
        if self.prefix.is_empty() {
            name.to_string()
        } else {
            format!("{}.{name}", self.prefix)
        }
    }

    /// The raw value of a field.
    pub fn get(&self, name: &str) -> Result<&'a Value, GbError> {
        self.obj.get(name).ok_or_else(|| GbError::input(self.path(name), "missing"))
    }

    /// A nested object field, viewed as an input; `prefix` must be its
    /// dotted path (e.g. `"data.model"`) for error messages.
    pub fn object(&self, name: &str, prefix: &'a str) -> Result<Input<'a>, GbError> {
        Input::at(self.get(name)?, prefix)
    }

    /// A number field.
    pub fn f64(&self, name: &str) -> Result<f64, GbError> {
        leaf_f64(self.get(name)?).map_err(|m| GbError::input(self.path(name), m))
    }

    /// An integer field.
    pub fn i64(&self, name: &str) -> Result<i64, GbError> {
        leaf_i64(self.get(name)?).map_err(|m| GbError::input(self.path(name), m))
    }

    /// A non-negative integer field (sizes, counts).
    pub fn usize(&self, name: &str) -> Result<usize, GbError> {
        let v = self.i64(name)?;
        usize::try_from(v)
            .map_err(|_| GbError::input(self.path(name), format!("expected a non-negative integer, found {v}")))
    }

    /// A boolean field.
    pub fn bool(&self, name: &str) -> Result<bool, GbError> {
        match self.get(name)? {
            Value::Bool(b) => Ok(*b),
            other => Err(GbError::input(self.path(name), format!("expected a boolean, found {}", json_kind(other)))),
        }
    }

    /// An f64 tensor field whose shape must match `spec` under `dims`.
    pub fn f64_tensor(&self, name: &str, dims: &mut Dims, spec: &[Dim]) -> Result<Tensor, GbError> {
        let path = self.path(name);
        let t = f64_tensor(&path, self.get(name)?)?;
        dims.check(&path, t.shape(), spec)?;
        reshape_empty(t, dims, spec, &path)
    }

    /// An i64 tensor field whose shape must match `spec` under `dims`.
    pub fn i64_tensor(&self, name: &str, dims: &mut Dims, spec: &[Dim]) -> Result<Tensor, GbError> {
        let path = self.path(name);
        let t = i64_tensor(&path, self.get(name)?)?;
        dims.check(&path, t.shape(), spec)?;
        reshape_empty(t, dims, spec, &path)
    }
}

/// Gives an empty list read as `[0]` the full rank of `spec`, with inner sizes
/// from `dims` (0 where unbound), so empty inputs have their declared rank.
fn reshape_empty(t: Tensor, dims: &Dims, spec: &[Dim], field: &str) -> Result<Tensor, GbError> {
    if t.rank() == spec.len() {
        return Ok(t);
    }
    let shape: Vec<usize> = spec
        .iter()
        .enumerate()
        .map(|(i, d)| match *d {
            _ if i == 0 => 0,
            Dim::Fixed(n) => n,
            Dim::Var(v) => dims.get(v).unwrap_or(0),
        })
        .collect();
    t.reshape(shape).map_err(|e| GbError::input(field, format!("internal error: {e}")))
}

/// Checks that `t` is an f64 tensor (outputs from a backend), for encoders.
pub fn expect_f64(t: &Tensor, what: &str) -> Result<(), GbError> {
    if t.dtype() == DType::F64 {
        Ok(())
    } else {
        Err(GbError::Output(format!("{what}: expected an f64 tensor, found {}", t.dtype().name())))
    }
}
