//! Turning `--input NAME=VALUE` and `--shapes NAME=TYPE` into the entry's
//! arguments, checked against the declared parameter types (dtype and rank;
//! dimension sizes are checked by instantiation). Nothing is cast: a number
//! literal takes the declared dtype only where it is exactly a value of it
//! (an integer in range for an integer type, or exactly representable in a
//! float type; a decimal for a float type, finite there), and `true`/`false`
//! are the literals of bool parameters only.
//!
//! Every error about an input is a diagnostic located at the parameter's
//! declaration (`error[input]`, exit code 1); a `--input`/`--shapes` that is
//! not of the form `NAME=...` is a usage error (exit code 2).

use crate::{render_all, Fail};
use graft_core::{DType, Tensor, TensorType};
use graft_lang::ast::{self, ExprKind, TypeKind, UnOp};
use graft_lang::diag::{Diagnostic, Stage};
use graft_lang::{Module, Tree};
use std::collections::HashMap;

fn dtype_of(s: ast::ScalarType) -> DType {
    graft_lang::lower::dtype_of(s)
}

fn declared(ty: &ast::Type) -> Option<(DType, usize)> {
    match &ty.kind {
        TypeKind::Scalar(s) => Some((dtype_of(*s), 0)),
        TypeKind::Tensor { dims, dtype } => Some((dtype_of(*dtype), dims.len())),
        TypeKind::Tuple(_) | TypeKind::Var(_) | TypeKind::Fn => None,
    }
}

fn show_decl(ty: &ast::Type) -> String {
    graft_lang::lower::show_type(ty, &HashMap::new())
}

fn split(s: &str, flag: &str, what: &str) -> Result<(String, String), Fail> {
    s.split_once('=')
        .map(|(a, b)| (a.trim().to_string(), b.trim().to_string()))
        .filter(|(a, _)| !a.is_empty())
        .ok_or_else(|| Fail::usage(format!("error: `{flag} {s}` is not of the form NAME={what}")))
}

/// The entry's definition and the module, for located errors.
struct Entry<'a> {
    m: &'a Module,
    name: &'a str,
    def: &'a ast::Def,
}

impl<'a> Entry<'a> {
    fn new(m: &'a Module, name: &'a str) -> Result<Entry<'a>, Fail> {
        let def = m.def(name).ok_or_else(|| no_entry(m, name))?;
        if let Some(d) = m.entry_problem(name) {
            return Err(render_all(&[d], m.file(), m.source()));
        }
        Ok(Entry { m, name, def })
    }

    fn render(&self, d: Diagnostic) -> Fail {
        render_all(&[d], self.m.file(), self.m.source())
    }

    /// An error about the input of parameter `p`, underlining its declaration.
    fn at(&self, p: &ast::Param, message: String, notes: &[String]) -> Fail {
        let mut d = Diagnostic::new(Stage::Input, p.span.clone(), message).with_label(format!(
            "parameter `{}` declared here as {}",
            p.name.name,
            show_decl(&p.ty)
        ));
        for n in notes {
            d = d.with_note(n.clone());
        }
        self.render(d)
    }

    /// `NAME` given with `flag`, which no parameter of the entry has.
    fn unknown(&self, name: &str, flag: &str) -> Fail {
        let params: Vec<&str> = self.def.params.iter().map(|p| p.name.name.as_str()).collect();
        let mut d = Diagnostic::new(
            Stage::Input,
            self.def.name.span.clone(),
            format!("`{flag} {name}=...`: `{}` has no parameter `{name}`", self.name),
        )
        .with_label(format!("`{}` is defined here", self.name));
        d = d.with_note(if params.is_empty() {
            format!("note: `{}` takes no parameters", self.name)
        } else {
            format!("note: its parameters are {}", params.join(", "))
        });
        let best = params
            .iter()
            .map(|c| (graft_lang::check::edit_distance(c, name), *c))
            .filter(|(k, c)| *k <= 2 && *k < c.len().max(2))
            .min();
        if let Some((_, c)) = best {
            d = d.with_note(format!("help: did you mean `{c}`?"));
        }
        self.render(d)
    }

    fn param(&self, name: &str) -> Option<&'a ast::Param> {
        self.def.params.iter().find(|p| p.name.name == name)
    }

    /// `--input NAME=VALUE` pairs by parameter name: unknown names and
    /// duplicates are errors.
    fn assignments(&self, inputs: &[String]) -> Result<HashMap<String, String>, Fail> {
        let mut given: HashMap<String, String> = HashMap::new();
        for s in inputs {
            let (n, v) = split(s, "--input", "VALUE")?;
            let Some(p) = self.param(&n) else {
                return Err(self.unknown(&n, "--input"));
            };
            if let Some(first) = given.get(&n) {
                return Err(self.at(
                    p,
                    format!("input `{n}` is given twice"),
                    &[format!("note: first `--input {n}={first}`, then `--input {n}={v}`")],
                ));
            }
            given.insert(n, v);
        }
        Ok(given)
    }

    /// The value of parameter `p` as its type tree and leaf tensors: its
    /// `--input` value, or `--seed N` for an integer scalar named `seed`;
    /// `None` when neither is given (never a silent default). A tuple
    /// parameter takes a whole `.npz`, its arrays in archive order bound to
    /// the tuple's leaves depth first.
    fn value(
        &self,
        p: &ast::Param,
        given: &HashMap<String, String>,
        seed: Option<i64>,
    ) -> Result<Option<(Tree, Vec<Tensor>)>, Fail> {
        let name = &p.name.name;
        let Some((dt, rank)) = declared(&p.ty) else {
            return match given.get(name) {
                Some(v) => self.tuple_from_npz(p, v).map(Some),
                None => Ok(None),
            };
        };
        let t = match (given.get(name), seed) {
            (Some(v), _) => self.input_tensor(p, v, dt)?,
            (None, Some(s)) if name == "seed" && rank == 0 && dt.is_int() => match dt {
                DType::I64 => Tensor::scalar(s),
                _ => Tensor::scalar(i32::try_from(s).map_err(|_| {
                    self.at(p, format!("--seed {s} is out of range for `{name}` ({dt})"), &[range_note(dt)])
                })?),
            },
            (None, _) => return Ok(None),
        };
        self.check_leaf(p, &t, &p.ty, &format!("input `{name}`"))?;
        Ok(Some((Tree::Leaf(t.ty()), vec![t])))
    }

    /// `t` has the dtype and rank of `decl` (`what` names it in the error).
    fn check_leaf(&self, p: &ast::Param, t: &Tensor, decl: &ast::Type, what: &str) -> Result<(), Fail> {
        let Some((dt, rank)) = declared(decl) else {
            return Err(self.at(p, format!("internal error: {what} is declared as a tuple"), &[]));
        };
        if t.dtype() != dt || t.rank() != rank {
            return Err(self.at(
                p,
                format!(
                    "{what} must be {} (dtype {dt}, rank {rank}), but {} was given; inputs are never cast",
                    show_decl(decl),
                    t.ty()
                ),
                &[],
            ));
        }
        Ok(())
    }

    /// A tuple parameter from `PATH.npz`: the archive's arrays in order,
    /// one per leaf of the declared tuple (depth first), each checked
    /// against its leaf's dtype and rank.
    fn tuple_from_npz(&self, p: &ast::Param, v: &str) -> Result<(Tree, Vec<Tensor>), Fail> {
        let name = &p.name.name;
        let mut decls = Vec::new();
        leaf_decls(&p.ty, name.clone(), &mut decls);
        if !v.ends_with(".npz") {
            return Err(self.at(
                p,
                format!("input `{name}`: a tuple parameter takes a whole .npz archive, not `{v}`"),
                &[format!(
                    "help: pass --input {name}=PATH.npz holding {} arrays, bound in archive order to {}",
                    decls.len(),
                    decls.iter().map(|(path, _)| path.as_str()).collect::<Vec<_>>().join(", ")
                )],
            ));
        }
        let arrays = graft_core::npy::load_npz(v)
            .map_err(|e| self.at(p, format!("input `{name}`: cannot read {v}: {}", npy_msg(&e, v)), &[]))?;
        if arrays.len() != decls.len() {
            let keys: Vec<&str> = arrays.iter().map(|(k, _)| k.as_str()).collect();
            return Err(self.at(
                p,
                format!(
                    "input `{name}`: {v} holds {} array{}, but `{name}` has {} tensors",
                    arrays.len(),
                    if arrays.len() == 1 { "" } else { "s" },
                    decls.len()
                ),
                &[
                    format!(
                        "note: the archive holds {}",
                        if keys.is_empty() { "nothing".into() } else { keys.join(", ") }
                    ),
                    format!(
                        "note: its arrays are bound in archive order to {}",
                        decls.iter().map(|(path, _)| path.as_str()).collect::<Vec<_>>().join(", ")
                    ),
                ],
            ));
        }
        let mut leaves = Vec::new();
        for ((path, ty), (key, t)) in decls.iter().zip(arrays) {
            self.check_leaf(p, &t, ty, &format!("input `{path}` (array `{key}` of {v})"))?;
            leaves.push(t);
        }
        let mut it = leaves.iter().map(Tensor::ty);
        let tree = tree_like(&p.ty, &mut it);
        Ok((tree, leaves))
    }

    fn input_tensor(&self, p: &ast::Param, v: &str, dt: DType) -> Result<Tensor, Fail> {
        let name = &p.name.name;
        if v.ends_with(".npy") {
            return graft_core::npy::load_npy(v)
                .map_err(|e| self.at(p, format!("input `{name}`: cannot read {v}: {}", npy_msg(&e, v)), &[]));
        }
        if v.ends_with(".npz") {
            return self.npz_array(p, v, None);
        }
        if let Some((path, key)) = v.rsplit_once(".npz:") {
            return self.npz_array(p, &format!("{path}.npz"), Some(key));
        }
        let e = graft_lang::parse_expr(v).map_err(|_| {
            self.at(
                p,
                format!("input `{name}`: `{v}` is neither a .npy/.npz path nor a literal"),
                &["help: give a number (`2`, `-0.5`, `1e-3`), `true`/`false`, an array like `[[1, 2], [3, 4]]`, or a path ending in .npy or .npz".into()],
            )
        })?;
        let mut shape = Vec::new();
        let mut data = Vec::new();
        literal(&e, &mut shape, 0, &mut data).ok_or_else(|| {
            self.at(
                p,
                format!("input `{name}`: `{v}` is not a number, a bool or a rectangular array of one of them"),
                &[],
            )
        })?;
        let never = "note: inputs are never cast".to_string();
        let bad = |what: String, notes: &[String]| self.at(p, format!("input `{name}`: {what}"), notes);
        // Bool literals are for bool parameters and numbers for numeric
        // ones (no `0`/`1` for bools, no `true` for numbers: nothing is cast).
        if let Some(x) = data.iter().find(|x| matches!(x, Num::Bool(_)) != (dt == DType::Bool)) {
            return Err(match *x {
                Num::Bool(b) => bad(format!("`{b}` is a bool literal, but `{name}` is {dt}"), &[never]),
                Num::Int(i) => bad(
                    format!("`{i}` is a number, but `{name}` is bool"),
                    &["help: give `true` or `false`".into(), never],
                ),
                Num::Float(f) => bad(
                    format!("`{}` is a number, but `{name}` is bool", show_float(f)),
                    &["help: give `true` or `false`".into(), never],
                ),
            });
        }
        let storage = match dt {
            DType::Bool => {
                graft_core::tensor::Storage::Bool(data.iter().map(|x| matches!(x, Num::Bool(true))).collect())
            }
            DType::I32 | DType::I64 | DType::U32 => {
                let mut out = Vec::with_capacity(data.len());
                for x in &data {
                    match *x {
                        Num::Int(i) => out.push(i),
                        Num::Float(f) => {
                            return Err(bad(
                                format!("`{}` is a float literal, but `{name}` is {dt}", show_float(f)),
                                &[never],
                            ))
                        }
                        Num::Bool(_) => unreachable!("internal error: bool literals were rejected above"),
                    }
                }
                if dt == DType::I32 {
                    let mut v32 = Vec::with_capacity(out.len());
                    for i in out {
                        v32.push(i32::try_from(i).map_err(|_| {
                            bad(format!("{i} is out of range for i32"), &[range_note(dt), never.clone()])
                        })?);
                    }
                    graft_core::tensor::Storage::I32(v32)
                } else if dt == DType::U32 {
                    let mut v = Vec::with_capacity(out.len());
                    for i in out {
                        v.push(u32::try_from(i).map_err(|_| {
                            bad(format!("{i} is out of range for u32"), &[range_note(dt), never.clone()])
                        })?);
                    }
                    graft_core::tensor::Storage::U32(v)
                } else {
                    graft_core::tensor::Storage::I64(out)
                }
            }
            DType::F64 => {
                let mut out = Vec::with_capacity(data.len());
                for x in &data {
                    out.push(match *x {
                        Num::Bool(_) => unreachable!("internal error: bool literals were rejected above"),
                        Num::Float(f) => f,
                        Num::Int(i) => {
                            let f = i as f64;
                            if f as i128 != i as i128 {
                                return Err(bad(format!("{i} is not exactly representable as f64"), &[
                                    "note: f64 holds every integer up to 2^53 = 9007199254740992 exactly; inputs are never rounded".into(),
                                ]));
                            }
                            f
                        }
                    });
                }
                graft_core::tensor::Storage::F64(out)
            }
            DType::F32 => {
                let mut out = Vec::with_capacity(data.len());
                for x in &data {
                    out.push(match *x {
                        Num::Bool(_) => unreachable!("internal error: bool literals were rejected above"),
                        Num::Float(f) => {
                            let y = f as f32;
                            if !y.is_finite() {
                                return Err(bad(format!("{} overflows f32", show_float(f)), &[
                                    format!("note: the largest f32 is {:e}", f32::MAX),
                                    "help: declare the parameter f64".into(),
                                ]));
                            }
                            if y == 0.0 && f != 0.0 {
                                return Err(bad(format!("{} underflows to 0 in f32", show_float(f)), &[
                                    format!("note: the smallest positive f32 is {:e}", f32::from_bits(1)),
                                ]));
                            }
                            y
                        }
                        Num::Int(i) => {
                            let y = i as f32;
                            if y as i128 != i as i128 {
                                return Err(bad(format!("{i} is not exactly representable as f32"), &[
                                    "note: f32 holds every integer up to 2^24 = 16777216 exactly; inputs are never rounded".into(),
                                ]));
                            }
                            y
                        }
                    });
                }
                graft_core::tensor::Storage::F32(out)
            }
            DType::F16 => {
                use graft_core::half::f16;
                let mut out = Vec::with_capacity(data.len());
                for x in &data {
                    out.push(match *x {
                        Num::Bool(_) => unreachable!("internal error: bool literals were rejected above"),
                        Num::Float(f) => {
                            // Rounded once, to nearest even (not through f32).
                            let y = graft_core::dtype::f16_from_f64(f);
                            if !y.is_finite() && f.is_finite() {
                                return Err(bad(format!("{} overflows f16", show_float(f)), &[
                                    format!("note: the largest f16 is {}", f16::MAX),
                                    "help: declare the parameter f32".into(),
                                ]));
                            }
                            if y.to_f64() == 0.0 && f != 0.0 {
                                return Err(bad(format!("{} underflows to 0 in f16", show_float(f)), &[format!(
                                    "note: the smallest positive f16 is {:e}",
                                    f16::from_bits(1).to_f64()
                                )]));
                            }
                            y
                        }
                        Num::Int(i) => {
                            let y = graft_core::dtype::f16_from_f64(i as f64);
                            if y.to_f64() as i128 != i as i128 || !y.is_finite() {
                                return Err(bad(format!("{i} is not exactly representable as f16"), &[
                                    "note: f16 holds every integer up to 2^11 = 2048 exactly; inputs are never rounded".into(),
                                ]));
                            }
                            y
                        }
                    });
                }
                graft_core::tensor::Storage::F16(out)
            }
        };
        Tensor::from_storage(shape, storage).map_err(|e| bad(e.to_string(), &[]))
    }

    /// `NAME=PATH.npz:KEY`: the archive's array `KEY`; `NAME=PATH.npz`: its
    /// array named `NAME`, or its only array.
    fn npz_array(&self, p: &ast::Param, path: &str, key: Option<&str>) -> Result<Tensor, Fail> {
        let name = &p.name.name;
        let arrays = graft_core::npy::load_npz(path)
            .map_err(|e| self.at(p, format!("input `{name}`: cannot read {path}: {}", npy_msg(&e, path)), &[]))?;
        let keys: Vec<String> = arrays.iter().map(|(k, _)| k.clone()).collect();
        let mut arrays = arrays;
        let want = key.unwrap_or(name);
        if let Some(i) = keys.iter().position(|k| k == want) {
            return Ok(arrays.swap_remove(i).1);
        }
        if key.is_none() && arrays.len() == 1 {
            return Ok(arrays.swap_remove(0).1);
        }
        Err(self.at(
            p,
            format!("input `{name}`: {path} has no array named `{want}`"),
            &[if keys.is_empty() {
                "note: the archive holds no arrays".into()
            } else if key.is_some() {
                format!("note: it holds {}", keys.join(", "))
            } else {
                format!(
                    "note: it holds {}; an archive of one array may use any name, and `{name}={path}:KEY` picks one",
                    keys.join(", ")
                )
            }],
        ))
    }
}

/// The tensor leaves of a declared type, depth first, with their paths
/// (`p.0`, `p.1.0`, ...).
fn leaf_decls(ty: &ast::Type, path: String, out: &mut Vec<(String, ast::Type)>) {
    match &ty.kind {
        TypeKind::Tuple(parts) => {
            for (i, t) in parts.iter().enumerate() {
                leaf_decls(t, format!("{path}.{i}"), out);
            }
        }
        _ => out.push((path, ty.clone())),
    }
}

/// The declared tuple structure of `ty` with the leaves' actual types.
fn tree_like(ty: &ast::Type, leaves: &mut impl Iterator<Item = TensorType>) -> Tree {
    match &ty.kind {
        TypeKind::Tuple(parts) => Tree::Tuple(parts.iter().map(|t| tree_like(t, leaves)).collect()),
        _ => Tree::Leaf(leaves.next().expect("internal error: one tensor per declared leaf")),
    }
}

/// The text of an `.npy`/`.npz` error without the `npy: ` prefix and
/// without the path (which the caller names).
fn npy_msg(e: &graft_core::TensorError, path: &str) -> String {
    match e {
        graft_core::TensorError::Npy(m) => m.strip_prefix(&format!("{path}: ")).unwrap_or(m).to_string(),
        other => other.to_string(),
    }
}

fn range_note(dt: DType) -> String {
    match dt {
        DType::I32 => format!("note: i32 holds {} to {}", i32::MIN, i32::MAX),
        DType::U32 => format!("note: u32 holds 0 to {}", u32::MAX),
        _ => format!("note: i64 holds {} to {}", i64::MIN, i64::MAX),
    }
}

/// A float as written (Rust's shortest round-trip form, with an exponent
/// for very large or small magnitudes).
fn show_float(f: f64) -> String {
    if f != 0.0 && (f.abs() >= 1e16 || f.abs() < 1e-5) {
        format!("{f:e}")
    } else {
        format!("{f:?}")
    }
}

/// The entry's arguments: one type tree per parameter (a tuple parameter's
/// is a tuple) and the leaf tensors, depth first, as the compiled function
/// takes them.
pub struct Args {
    pub trees: Vec<Tree>,
    pub leaves: Vec<Tensor>,
}

fn missing(e: &Entry<'_>, p: &ast::Param, what: &str, help: String) -> Fail {
    let name = &p.name.name;
    let mut notes = vec![help];
    if name == "seed" && matches!(declared(&p.ty), Some((dt, 0)) if dt.is_int()) {
        notes.push(format!("help: or pass --seed N to set `{name}`"));
    }
    e.at(p, format!("missing {what} for parameter `{name}` of `{}`", e.name), &notes)
}

/// The arguments of `entry` from `--input` values and `--seed`.
pub fn gather(m: &Module, entry: &str, inputs: &[String], seed: Option<i64>) -> Result<Args, Fail> {
    let e = Entry::new(m, entry)?;
    let given = e.assignments(inputs)?;
    let mut args = Args { trees: Vec::new(), leaves: Vec::new() };
    for p in &e.def.params {
        match e.value(p, &given, seed)? {
            Some((tree, leaves)) => {
                args.trees.push(tree);
                args.leaves.extend(leaves);
            }
            None => {
                let name = &p.name.name;
                let help = if declared(&p.ty).is_none() {
                    format!("help: pass --input {name}=PATH.npz (its arrays in order, one per tensor of the tuple)")
                } else {
                    format!("help: pass --input {name}=VALUE (a literal, or a path ending in .npy, .npz or .npz:KEY)")
                };
                return Err(missing(&e, p, "input", help));
            }
        }
    }
    Ok(args)
}

/// Parameter types for `graft ir`: from `--shapes` or from `--input` values.
pub fn gather_types(
    m: &Module,
    entry: &str,
    inputs: &[String],
    shapes: &[String],
    seed: Option<i64>,
) -> Result<Vec<Tree>, Fail> {
    let e = Entry::new(m, entry)?;
    let mut from_shapes: HashMap<String, TensorType> = HashMap::new();
    for s in shapes {
        let (n, t) = split(s, "--shapes", "TYPE")?;
        let Some(p) = e.param(&n) else {
            return Err(e.unknown(&n, "--shapes"));
        };
        let ty = parse_type(&t)?;
        if from_shapes.insert(n.clone(), ty).is_some() {
            return Err(e.at(p, format!("the type of `{n}` is given twice with --shapes"), &[]));
        }
    }
    let given = e.assignments(inputs)?;
    let mut types = Vec::new();
    for p in &e.def.params {
        let name = &p.name.name;
        if let Some(t) = from_shapes.get(name) {
            if given.contains_key(name) {
                return Err(e.at(p, format!("`{name}` is given both with --shapes and with --input"), &[]));
            }
            types.push(Tree::Leaf(t.clone()));
            continue;
        }
        match e.value(p, &given, seed)? {
            Some((tree, _)) => types.push(tree),
            None => {
                return Err(missing(
                    &e,
                    p,
                    "type",
                    format!("help: give it with --shapes {name}=TYPE or --input {name}=VALUE"),
                ))
            }
        }
    }
    Ok(types)
}

fn no_entry(m: &Module, entry: &str) -> Fail {
    let names: Vec<&str> = m.program().defs.iter().map(|d| d.name.name.as_str()).collect();
    Fail::new(format!("error: {} has no function `{entry}` (it defines: {})", m.file(), names.join(", ")))
}

/// `tensor[3, 4, f32]`, `f32`, `f32[3,4]`.
fn parse_type(s: &str) -> Result<TensorType, Fail> {
    let bad = || Fail::usage(format!("error: `{s}` is not a type like `tensor[3, 4, f32]`, `f32[3,4]` or `f32`"));
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

/// A literal element as written: integers stay exact.
#[derive(Clone, Copy)]
enum Num {
    Int(i64),
    Float(f64),
    Bool(bool),
}

fn literal(e: &ast::Expr, shape: &mut Vec<usize>, depth: usize, data: &mut Vec<Num>) -> Option<()> {
    match &e.kind {
        ExprKind::Int(i) => {
            (shape.len() == depth).then_some(())?;
            data.push(Num::Int(*i));
        }
        ExprKind::Float(f) => {
            (shape.len() == depth).then_some(())?;
            data.push(Num::Float(*f));
        }
        ExprKind::Bool(b) => {
            (shape.len() == depth).then_some(())?;
            data.push(Num::Bool(*b));
        }
        ExprKind::Unary { op: UnOp::Neg, operand } => {
            let n = data.len();
            literal(operand, shape, depth, data)?;
            for x in &mut data[n..] {
                *x = match *x {
                    Num::Int(i) => Num::Int(i.checked_neg()?),
                    Num::Float(f) => Num::Float(-f),
                    Num::Bool(_) => return None,
                };
            }
        }
        ExprKind::Array(items) => {
            if shape.len() == depth {
                shape.push(items.len());
            } else if shape.get(depth) != Some(&items.len()) {
                return None;
            }
            for it in items {
                literal(it, shape, depth + 1, data)?;
            }
        }
        _ => return None,
    }
    Some(())
}
