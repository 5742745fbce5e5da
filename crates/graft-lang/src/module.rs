//! The public API of the front end: a parsed and checked program that
//! instantiates entry functions at concrete argument types and runs them.
//!
//! ```text
//! let m = Module::from_source("model.graft", src)?;   // parse + names
//! m.check()?;                                           // types and dims at placeholder sizes
//! let f = m.instantiate("loss", &[TensorType ...])?;    // expanded Func (only primitives)
//! let out = m.run("loss", &[tensor, ...])?;             // nested tuple of tensors
//! ```
//! `check` instantiates every def with a distinct placeholder size per
//! dimension variable (11, 13, 17, ...), so mismatched dimension names are
//! found before anything runs; shape facts that hold only for particular
//! sizes (a `reshape` to a fixed shape) are checked when the def is
//! instantiated at its real argument types.

use crate::ast::{self, Span};
use crate::diag::{Diagnostic, Stage};
use crate::lower::{ArgVal, FnVal, Lower, Prog, Tree};
use graft_core::{exec, opt, Func, Tensor, TensorType};
use std::sync::Arc;

/// A result value: a tensor or a (nested) tuple.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    Tensor(Tensor),
    Tuple(Vec<Output>),
}

impl Output {
    /// Every tensor, depth first (the `--out` order).
    pub fn leaves(&self) -> Vec<&Tensor> {
        let mut v = Vec::new();
        fn go<'a>(o: &'a Output, v: &mut Vec<&'a Tensor>) {
            match o {
                Output::Tensor(t) => v.push(t),
                Output::Tuple(ts) => ts.iter().for_each(|t| go(t, v)),
            }
        }
        go(self, &mut v);
        v
    }

    /// The tensor, if this is one.
    pub fn tensor(&self) -> Option<&Tensor> {
        match self {
            Output::Tensor(t) => Some(t),
            Output::Tuple(_) => None,
        }
    }
}

/// An entry function instantiated at concrete types.
#[derive(Debug, Clone)]
pub struct Compiled {
    /// The expanded function: primitives only, one parameter per entry parameter.
    pub func: Arc<Func>,
    /// The structure of its result.
    pub out: Tree,
}

/// A parsed program whose names resolve. A clone is independent of the
/// original from then on: it starts with the instantiations made so far
/// (what `check` lowered) and caches its own.
#[derive(Debug, Clone)]
pub struct Module {
    prog: Prog,
}

const WITNESS: [usize; 12] = [11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53];

/// The size `check` gives dimension variable `n` of a def whose variables
/// are `names`: distinct primes, so that mixed-up dimensions disagree; or,
/// with `divisible`, distinct multiples of 24, for the second try of a def
/// that fails at the primes (a def splitting an axis, such as a model axis
/// into 4 heads by `reshape`, only works for sizes its types cannot state).
fn placeholder_size(names: &[String], n: &str, divisible: bool) -> usize {
    let i = names.iter().position(|m| m == n).unwrap_or(0);
    if divisible {
        return 24 * (i + 1);
    }
    WITNESS.get(i).copied().unwrap_or(59 + 2 * i)
}

/// A def's argument types at placeholder sizes (plus one tangent input per
/// `@jvp(p)` attribute, in attribute order) and its dimension variables;
/// `None` when a parameter type has no concrete form.
fn placeholder_args(def: &ast::Def, divisible: bool) -> Option<(Vec<Tree>, Vec<String>)> {
    let mut names: Vec<String> = Vec::new();
    for p in &def.params {
        collect_dims(&p.ty, &mut names);
    }
    let size = |n: &str| placeholder_size(&names, n, divisible);
    let mut types = Vec::new();
    for p in &def.params {
        types.push(concrete(&p.ty, &size)?);
    }
    for a in def.attrs.iter().filter(|a| a.is(crate::ast::AttrKind::Jvp)) {
        let named = a.args.first().and_then(|x| match &x.value.kind {
            ast::ExprKind::Var(id) => def.params.iter().position(|p| p.name.name == id.name),
            _ => None,
        });
        match named {
            Some(i) => types.push(types[i].clone()),
            // A malformed attribute: instantiating reports it.
            None => types.push(Tree::Tuple(Vec::new())),
        }
    }
    Some((types, names))
}

impl Module {
    /// Parses `src` and resolves its names.
    pub fn from_source(file: &str, src: &str) -> Result<Module, Vec<Diagnostic>> {
        Module::from_program(file, src, crate::parse(src)?)
    }

    /// `program` (parsed from `src`) with its names resolved.
    pub(crate) fn from_program(file: &str, src: &str, program: ast::Program) -> Result<Module, Vec<Diagnostic>> {
        crate::check::resolve(&program)?;
        Ok(Module { prog: Prog::new(file, src, program) })
    }

    pub fn file(&self) -> &str {
        &self.prog.file
    }

    pub fn source(&self) -> &str {
        &self.prog.src
    }

    pub fn program(&self) -> &ast::Program {
        &self.prog.program
    }

    /// The def called `name`.
    pub fn def(&self, name: &str) -> Option<&ast::Def> {
        self.prog.defs.get(name).map(|&i| &self.prog.program.defs[i])
    }

    /// Why the def `name` cannot be an entry (run from the CLI or the API),
    /// if it cannot: a generic def has no concrete parameter types.
    pub fn entry_problem(&self, name: &str) -> Option<Diagnostic> {
        self.def(name).filter(|d| d.is_generic()).map(generic_entry)
    }

    /// The generic defs that no call from a def with concrete types reached
    /// in this module's lowerings so far (after [`Module::check`]: the
    /// generic defs whose bodies were not type-checked, only resolved).
    pub fn unchecked_generics(&self) -> Vec<&str> {
        let seen = self.prog.specialised.borrow();
        self.prog
            .program
            .defs
            .iter()
            .enumerate()
            .filter(|(i, d)| d.is_generic() && !seen.contains(i))
            .map(|(_, d)| d.name.name.as_str())
            .collect()
    }

    /// Type-checks every def at placeholder sizes for its dimension variables.
    pub fn check(&self) -> Result<(), Vec<Diagnostic>> {
        let mut errs: Vec<Diagnostic> = Vec::new();
        let defs = &self.prog.program.defs;
        for (k, def) in defs.iter().enumerate() {
            if errs.len() >= crate::diag::MAX_ERRORS {
                if let Some(last) = errs.last_mut() {
                    last.notes.push(format!(
                        "note: checking stopped after {} errors; {} more definition{} not checked",
                        crate::diag::MAX_ERRORS,
                        defs.len() - k,
                        if defs.len() - k == 1 { " was" } else { "s were" }
                    ));
                }
                break;
            }
            // A generic def is checked at each call from the defs checked here.
            if def.is_generic() {
                continue;
            }
            let Some((types, names)) = placeholder_args(def, false) else { continue };
            let size = |n: &str| placeholder_size(&names, n, false);
            let checked = self.instantiate_trees(&def.name.name, &types, true).map(|_| ()).or_else(|d| {
                // Sizes that divide evenly: accepted if the def works there
                // (the error at the primes is reported otherwise).
                match placeholder_args(def, true) {
                    Some((div, _)) if !names.is_empty() => {
                        self.instantiate_trees(&def.name.name, &div, true).map(|_| ()).map_err(|_| d)
                    }
                    _ => Err(d),
                }
            });
            if let Err(mut d) = checked {
                if !names.is_empty() {
                    let sizes: Vec<String> = names.iter().map(|n| format!("{n}={}", size(n))).collect();
                    d = d.with_note(format!(
                        "note: checked `{}` with placeholder sizes {}",
                        def.name.name,
                        sizes.join(", ")
                    ));
                }
                if !errs.iter().any(|e| e.message == d.message && e.span == d.span) {
                    errs.push(d);
                }
            }
        }
        if errs.is_empty() {
            Ok(())
        } else {
            Err(errs)
        }
    }

    /// The def `entry` lowered at the placeholder sizes `check` uses for its
    /// dimension variables (for fuzzing the lowering); `None` when it has no
    /// such def or a parameter type has no concrete form.
    pub fn instantiate_at_placeholders(&self, entry: &str) -> Option<Result<Compiled, Diagnostic>> {
        let (types, _) = placeholder_args(self.def(entry)?, false)?;
        Some(self.instantiate_trees(entry, &types, false))
    }

    /// The entry `entry` lowered at these parameter types (one per parameter).
    pub fn instantiate(&self, entry: &str, args: &[TensorType]) -> Result<Compiled, Diagnostic> {
        let trees: Vec<Tree> = args.iter().cloned().map(Tree::Leaf).collect();
        self.instantiate_trees(entry, &trees, false)
    }

    /// The entry lowered at argument structures that may be tuples (a
    /// parameter declared as a tuple of tensors takes a [`Tree::Tuple`]);
    /// the function's parameters are the leaves, depth first.
    pub fn instantiate_nested(&self, entry: &str, args: &[Tree]) -> Result<Compiled, Diagnostic> {
        self.instantiate_trees(entry, args, false)
    }

    /// `checking`: for [`Module::check`], at placeholder sizes: no
    /// `opt::simplify` (check only wants the errors, and simplifying was half
    /// its time), and a compile-time `if` whose branch fails falls back to
    /// the other one (real sizes may select it).
    fn instantiate_trees(&self, entry: &str, args: &[Tree], checking: bool) -> Result<Compiled, Diagnostic> {
        let Some(&idx) = self.prog.defs.get(entry) else {
            let span = 0..0;
            let mut d = Diagnostic::new(Stage::Resolve, span, format!("there is no function named `{entry}`"));
            let names: Vec<&str> = self.prog.program.defs.iter().map(|d| d.name.name.as_str()).collect();
            if !names.is_empty() {
                d = d.with_note(format!("note: the file defines {}", names.join(", ")));
            }
            return Err(d);
        };
        let def = &self.prog.program.defs[idx];
        if def.is_generic() {
            return Err(generic_entry(def));
        }
        let n_extra = def.attrs.iter().filter(|a| a.is(crate::ast::AttrKind::Jvp)).count();
        if args.len() != def.params.len() + n_extra {
            return Err(Diagnostic::new(
                Stage::Runtime,
                def.name.span.clone(),
                format!("`{entry}` takes {} inputs, but {} were given", def.params.len() + n_extra, args.len()),
            ));
        }
        let mut l = Lower::new(&self.prog);
        l.placeholder_sizes = checking;
        let spans: Vec<Span> =
            (0..args.len()).map(|i| def.params.get(i).map_or(def.name.span.clone(), |p| p.span.clone())).collect();
        let st = l.standalone(entry, args, &def.span, |l, vals| {
            let args =
                vals.into_iter().zip(&spans).map(|(val, s)| ArgVal { name: None, val, span: s.clone() }).collect();
            l.call_fn(&FnVal::Def(idx, entry.into()), args, &def.name.span)
        })?;
        if !st.captures.is_empty() {
            return Err(Diagnostic::new(Stage::Type, def.span.clone(), "internal error: an entry captured a value"));
        }
        let func = if checking { st.func } else { opt::simplify(&st.func) };
        Ok(Compiled { func: Arc::new(func), out: st.out })
    }

    /// Instantiates `entry` at the inputs' types and runs it.
    pub fn run(&self, entry: &str, inputs: &[Tensor]) -> Result<Output, Diagnostic> {
        let types: Vec<TensorType> = inputs.iter().map(Tensor::ty).collect();
        let c = self.instantiate(entry, &types)?;
        self.run_compiled(entry, &c, inputs)
    }

    /// Plans and runs `c`, an instance of `entry` from [`Module::instantiate`]
    /// at the inputs' types (so a caller can inspect the graph, e.g. check
    /// its memory estimate, before anything runs).
    pub fn run_compiled(&self, entry: &str, c: &Compiled, inputs: &[Tensor]) -> Result<Output, Diagnostic> {
        let span = self.def(entry).map_or(0..0, |d| d.name.span.clone());
        let exe =
            exec::plan_cached(&c.func).map_err(|e| Diagnostic::new(Stage::Runtime, span.clone(), e.to_string()))?;
        let refs: Vec<&Tensor> = inputs.iter().collect();
        let outs = exe.run(&refs).map_err(|e| Diagnostic::new(Stage::Runtime, span.clone(), e.to_string()))?;
        let mut it = outs.into_iter();
        Ok(rebuild(&c.out, &mut it))
    }
}

/// The error for running a generic def as an entry: its parameters have no
/// concrete types to take inputs at.
fn generic_entry(def: &ast::Def) -> Diagnostic {
    let (span, what) = match def.tparams.first() {
        Some(t) => (t.span.clone(), format!("it has the type parameter `{}`", t.name)),
        None => {
            let p = def.params.iter().find(|p| p.ty.is_generic());
            match p {
                Some(p) => (p.ty.span.clone(), format!("parameter `{}` is a function (`fn`)", p.name.name)),
                None => (
                    def.ret.as_ref().map_or(def.name.span.clone(), |r| r.span.clone()),
                    "its result is a function (`fn`)".to_string(),
                ),
            }
        }
    };
    Diagnostic::new(Stage::Type, span, format!("`{}` is generic and cannot be an entry: {what}", def.name.name))
        .with_label("not a concrete type")
        .with_note("note: an entry's parameters need concrete types (`f32`, `tensor[n, f32]`, tuples of those)")
        .with_note(format!("help: call `{}` from a def with concrete parameter types, and run that def", def.name.name))
}

impl Compiled {
    /// The result, structured as the entry returns it, from the
    /// function's flat outputs (another backend's run of `func`).
    pub fn output(&self, outs: Vec<Tensor>) -> Output {
        rebuild(&self.out, &mut outs.into_iter())
    }
}

fn rebuild(t: &Tree, it: &mut impl Iterator<Item = Tensor>) -> Output {
    match t {
        Tree::Leaf(ty) => Output::Tensor(it.next().unwrap_or_else(|| Tensor::zeros(ty))),
        Tree::Tuple(ts) => Output::Tuple(ts.iter().map(|t| rebuild(t, it)).collect()),
    }
}

fn collect_dims(t: &ast::Type, out: &mut Vec<String>) {
    match &t.kind {
        ast::TypeKind::Scalar(_) | ast::TypeKind::Var(_) | ast::TypeKind::Fn => {}
        ast::TypeKind::Tuple(ts) => ts.iter().for_each(|t| collect_dims(t, out)),
        ast::TypeKind::Tensor { dims, .. } => {
            for d in dims {
                if let ast::Dim::Name(id) = d {
                    if !out.contains(&id.name) {
                        out.push(id.name.clone());
                    }
                }
            }
        }
    }
}

/// A declared type with dimension names replaced by sizes.
fn concrete(t: &ast::Type, size: &dyn Fn(&str) -> usize) -> Option<Tree> {
    Some(match &t.kind {
        ast::TypeKind::Scalar(s) => Tree::Leaf(TensorType::scalar(crate::lower::dtype_of(*s))),
        ast::TypeKind::Tuple(ts) => Tree::Tuple(ts.iter().map(|t| concrete(t, size)).collect::<Option<_>>()?),
        // Generic: checked at each call instead (`Module::check`).
        ast::TypeKind::Var(_) | ast::TypeKind::Fn => return None,
        ast::TypeKind::Tensor { dims, dtype } => Tree::Leaf(TensorType::new(
            crate::lower::dtype_of(*dtype),
            dims.iter()
                .map(|d| match d {
                    ast::Dim::Lit(n, _) => *n,
                    ast::Dim::Name(id) => size(&id.name),
                })
                .collect::<Vec<_>>(),
        )),
    })
}
