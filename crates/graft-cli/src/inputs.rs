//! Turning `--input NAME=VALUE` and `--shapes NAME=TYPE` into the entry's
//! arguments, checked against the declared parameter types (dtype and rank;
//! dimension sizes are checked by instantiation). Nothing is cast: a number
//! literal takes the declared dtype only where it fits exactly (an integer
//! for any numeric type, a decimal for a float type).

use crate::Fail;
use graft_core::{DType, Tensor, TensorType};
use graft_lang::ast::{self, ExprKind, TypeKind, UnOp};
use graft_lang::Module;
use std::collections::HashMap;

fn dtype_of(s: ast::ScalarType) -> DType {
    graft_lang::lower::dtype_of(s)
}

fn declared(ty: &ast::Type) -> Option<(DType, usize)> {
    match &ty.kind {
        TypeKind::Scalar(s) => Some((dtype_of(*s), 0)),
        TypeKind::Tensor { dims, dtype } => Some((dtype_of(*dtype), dims.len())),
        TypeKind::Tuple(_) => None,
    }
}

fn show_decl(ty: &ast::Type) -> String {
    graft_lang::lower::show_type(ty, &HashMap::new())
}

fn split(s: &str, what: &str) -> Result<(String, String), Fail> {
    s.split_once('=')
        .map(|(a, b)| (a.trim().to_string(), b.trim().to_string()))
        .ok_or_else(|| Fail(format!("error: `{s}` is not of the form NAME={what}")))
}

/// One `Tensor` per entry parameter, in order.
pub fn gather(
    m: &Module,
    entry: &str,
    inputs: &[String],
    _shapes: &[String],
    seed: Option<i64>,
) -> Result<Vec<Tensor>, Fail> {
    let def = m.def(entry).ok_or_else(|| no_entry(m, entry))?;
    let mut given: HashMap<String, String> = HashMap::new();
    for s in inputs {
        let (n, v) = split(s, "VALUE")?;
        if !def.params.iter().any(|p| p.name.name == n) {
            return Err(Fail(format!(
                "error: `{entry}` has no parameter `{n}` (its parameters: {})",
                def.params.iter().map(|p| p.name.name.as_str()).collect::<Vec<_>>().join(", ")
            )));
        }
        if given.insert(n.clone(), v).is_some() {
            return Err(Fail(format!("error: input `{n}` is given twice")));
        }
    }
    let mut out = Vec::new();
    for p in &def.params {
        let name = &p.name.name;
        let Some((dt, rank)) = declared(&p.ty) else {
            return Err(Fail(format!(
                "error: parameter `{name}` of `{entry}` has a tuple type, which cannot be given on the command line"
            )));
        };
        let t = match given.get(name) {
            Some(v) => input_tensor(name, &p.ty, v, dt)?,
            None if name == "seed" && rank == 0 && dt.is_int() => {
                Tensor::from_fn(&TensorType::scalar(dt), |_| seed.unwrap_or(0) as f64)
            }
            None => {
                return Err(Fail(format!(
                    "error: missing input for parameter `{name}` of `{entry}` (declared {}); pass --input {name}=...",
                    show_decl(&p.ty)
                )))
            }
        };
        if t.dtype() != dt || t.rank() != rank {
            return Err(Fail(format!(
                "error: input `{name}` must be {} (dtype {dt}, rank {rank}), but {} was given; inputs are never cast",
                show_decl(&p.ty),
                t.ty()
            )));
        }
        out.push(t);
    }
    Ok(out)
}

/// Parameter types for `graft ir`: from `--shapes` or from `--input` values.
pub fn gather_types(
    m: &Module,
    entry: &str,
    inputs: &[String],
    shapes: &[String],
    seed: Option<i64>,
) -> Result<Vec<TensorType>, Fail> {
    let def = m.def(entry).ok_or_else(|| no_entry(m, entry))?;
    let mut from_shapes: HashMap<String, TensorType> = HashMap::new();
    for s in shapes {
        let (n, t) = split(s, "TYPE")?;
        from_shapes.insert(n, parse_type(&t)?);
    }
    let rest: Vec<String> = inputs.to_vec();
    let mut types = Vec::new();
    let mut need_inputs = false;
    for p in &def.params {
        match from_shapes.get(&p.name.name) {
            Some(t) => types.push(Some(t.clone())),
            None => {
                types.push(None);
                need_inputs = true;
            }
        }
    }
    if need_inputs {
        // Values for the parameters without --shapes (all must be present).
        let mut all = rest.clone();
        for (p, t) in def.params.iter().zip(&types) {
            if let Some(t) = t {
                let _ = t;
                all.push(format!("{}=__shape__", p.name.name));
            }
        }
        let mut given: HashMap<String, String> = HashMap::new();
        for s in &rest {
            let (n, v) = split(s, "VALUE")?;
            given.insert(n, v);
        }
        for (i, p) in def.params.iter().enumerate() {
            if types[i].is_some() {
                continue;
            }
            let name = &p.name.name;
            let Some((dt, _)) = declared(&p.ty) else {
                return Err(Fail(format!("error: parameter `{name}` has a tuple type")));
            };
            let t = match given.get(name) {
                Some(v) => input_tensor(name, &p.ty, v, dt)?,
                None if name == "seed" => Tensor::from_fn(&TensorType::scalar(dt), |_| seed.unwrap_or(0) as f64),
                None => {
                    return Err(Fail(format!(
                        "error: give the type of parameter `{name}` (declared {}) with --shapes {name}=... or --input {name}=...",
                        show_decl(&p.ty)
                    )))
                }
            };
            types[i] = Some(t.ty());
        }
    }
    Ok(types.into_iter().flatten().collect())
}

fn no_entry(m: &Module, entry: &str) -> Fail {
    let names: Vec<&str> = m.program().defs.iter().map(|d| d.name.name.as_str()).collect();
    Fail(format!("error: {} has no function `{entry}` (it defines: {})", m.file(), names.join(", ")))
}

/// `tensor[3, 4, f32]`, `f32`, `f32[3,4]`.
fn parse_type(s: &str) -> Result<TensorType, Fail> {
    let bad = || Fail(format!("error: `{s}` is not a type like `tensor[3, 4, f32]`, `f32[3,4]` or `f32`"));
    let s = s.trim();
    let (dt, dims): (&str, Vec<&str>) = if let Some(inner) = s.strip_prefix("tensor[").and_then(|r| r.strip_suffix(']'))
    {
        let mut parts: Vec<&str> = inner.split(',').map(str::trim).collect();
        let dt = parts.pop().ok_or_else(bad)?;
        (dt, parts)
    } else if let Some((dt, rest)) = s.split_once('[') {
        let inner = rest.strip_suffix(']').ok_or_else(bad)?;
        (dt.trim(), if inner.trim().is_empty() { Vec::new() } else { inner.split(',').map(str::trim).collect() })
    } else {
        (s, Vec::new())
    };
    let dtype = graft_core::DType::parse(dt).ok_or_else(bad)?;
    let shape = dims.iter().map(|d| d.parse::<usize>().map_err(|_| bad())).collect::<Result<Vec<_>, _>>()?;
    Ok(TensorType::new(dtype, shape))
}

fn input_tensor(name: &str, ty: &ast::Type, v: &str, dt: DType) -> Result<Tensor, Fail> {
    if v.ends_with(".npy") {
        return graft_core::npy::load_npy(v).map_err(|e| Fail(format!("error: input `{name}`: cannot read {v}: {e}")));
    }
    let e = graft_lang::parse_expr(v).map_err(|_| {
        Fail(format!(
            "error: input `{name}`: `{v}` is neither a .npy path nor a literal (a number or an array like [1, 2])"
        ))
    })?;
    let mut shape = Vec::new();
    let mut data = Vec::new();
    let mut float = false;
    literal(&e, &mut shape, 0, &mut data, &mut float).ok_or_else(|| {
        Fail(format!("error: input `{name}`: `{v}` is not a number or a rectangular array of numbers"))
    })?;
    if float && !dt.is_float() {
        return Err(Fail(format!(
            "error: input `{name}` must be {} but `{v}` has a fractional part; inputs are never cast",
            show_decl(ty)
        )));
    }
    if dt == DType::Bool {
        return Err(Fail(format!("error: input `{name}`: give bool inputs as .npy files")));
    }
    Ok(Tensor::from_fn(&TensorType::new(dt, shape), |i| data[i]))
}

fn literal(e: &ast::Expr, shape: &mut Vec<usize>, depth: usize, data: &mut Vec<f64>, float: &mut bool) -> Option<()> {
    match &e.kind {
        ExprKind::Int(i) => {
            (shape.len() == depth).then_some(())?;
            data.push(*i as f64);
        }
        ExprKind::Float(f) => {
            (shape.len() == depth).then_some(())?;
            *float = true;
            data.push(*f);
        }
        ExprKind::Unary { op: UnOp::Neg, operand } => {
            let n = data.len();
            literal(operand, shape, depth, data, float)?;
            for x in &mut data[n..] {
                *x = -*x;
            }
        }
        ExprKind::Array(items) => {
            if shape.len() == depth {
                shape.push(items.len());
            } else if shape.get(depth) != Some(&items.len()) {
                return None;
            }
            for it in items {
                literal(it, shape, depth + 1, data, float)?;
            }
        }
        _ => return None,
    }
    Some(())
}
