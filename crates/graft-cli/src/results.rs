//! How `graft run` shows an entry's results: a single tensor as its value;
//! a tuple as one line per tensor, `LABEL: TYPE = VALUE`, where the label is
//! the name the entry's body returns it under (`def main() = (loss, w)`
//! labels `loss` and `w`; a named tuple's parts are `grads.0`, `grads.1`)
//! or else its tuple path (`0`, `1.0`, `1.1`), and the type is its dtype
//! and shape. `--out` writes the same labels as `.npz` keys. `--raw` keeps
//! the older script-friendly form: leaves numbered depth first, values
//! only, keys `0`, `1`, ...

use graft_core::Tensor;
use graft_lang::ast::{self, ExprKind};
use graft_lang::Output;
use std::collections::HashSet;

/// The names a body's result expression gives its parts.
enum Names {
    Name(Option<String>),
    Tuple(Vec<Names>),
}

fn names_of(e: &ast::Expr) -> Names {
    match &e.kind {
        ExprKind::Block { result, .. } => names_of(result),
        ExprKind::Tuple(items) => Names::Tuple(items.iter().map(names_of).collect()),
        ExprKind::Var(id) => Names::Name(Some(id.name.clone())),
        _ => Names::Name(None),
    }
}

/// Every leaf of `out` with its label (see the module docs), depth first.
/// Labels are unique: a name used twice keeps its path the second time.
pub fn labelled<'a>(def: Option<&ast::Def>, out: &'a Output) -> Vec<(String, &'a Tensor)> {
    let names = def.map_or(Names::Name(None), |d| names_of(&d.body));
    let mut leaves = Vec::new();
    walk(out, &names, None, String::new(), &mut leaves);
    let mut seen = HashSet::new();
    leaves
        .into_iter()
        .map(|(named, path, t)| match named {
            Some(n) if seen.insert(n.clone()) => (n, t),
            _ => {
                seen.insert(path.clone());
                (path, t)
            }
        })
        .collect()
}

/// Collects `(name-based label, path label, tensor)` for each leaf under
/// `o`: `name` is the label its nearest named ancestor gives it.
fn walk<'a>(
    o: &'a Output,
    names: &Names,
    name: Option<String>,
    path: String,
    out: &mut Vec<(Option<String>, String, &'a Tensor)>,
) {
    let name = match names {
        Names::Name(Some(n)) => Some(n.clone()),
        _ => name,
    };
    match o {
        Output::Tensor(t) => out.push((name, path, t)),
        Output::Tuple(items) => {
            for (i, item) in items.iter().enumerate() {
                let sub = match names {
                    Names::Tuple(ns) if ns.len() == items.len() => &ns[i],
                    _ => &Names::Name(None),
                };
                let join = |p: &str| if p.is_empty() { i.to_string() } else { format!("{p}.{i}") };
                walk(item, sub, name.as_deref().map(join), join(&path), out);
            }
        }
    }
}

/// The text `graft run` prints.
pub fn show(def: Option<&ast::Def>, o: &Output, raw: bool) -> String {
    if let Output::Tensor(t) = o {
        return format!("{}\n", graft_core::format::format_tensor(t));
    }
    let rows: Vec<(String, &Tensor)> = if raw {
        o.leaves().into_iter().enumerate().map(|(i, t)| (i.to_string(), t)).collect()
    } else {
        labelled(def, o).into_iter().map(|(l, t)| (format!("{l}: {} =", t.ty()), t)).collect()
    };
    let mut s = String::new();
    for (head, t) in rows {
        let head = if raw { format!("{head}:") } else { head };
        let body = graft_core::format::format_tensor(t);
        let pad = " ".repeat(head.chars().count() + 1);
        s.push_str(&format!("{head} {}\n", body.replace('\n', &format!("\n{pad}"))));
    }
    s
}

/// The `.npz` keys and arrays `--out` writes.
pub fn arrays(def: Option<&ast::Def>, o: &Output, raw: bool) -> Vec<(String, Tensor)> {
    if raw {
        return o.leaves().into_iter().enumerate().map(|(i, t)| (i.to_string(), t.clone())).collect();
    }
    match o {
        Output::Tensor(t) => vec![("0".to_string(), t.clone())],
        Output::Tuple(_) => labelled(def, o).into_iter().map(|(l, t)| (l, t.clone())).collect(),
    }
}
