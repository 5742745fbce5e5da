//! Pytrees, generic defs and higher-order defs (docs/language.md, "Generic
//! and higher-order defs" and "Pytrees"): values and gradients of tuple
//! arithmetic and `tree_map`/`tree_reduce`/`tree_leaves` against
//! hand-written forms and central differences; generic defs at ranks 0, 1,
//! 2 and at tuple trees; functions as arguments and results; and every kind
//! of bad input giving a located diagnostic.

use crate::common::{check_error, close, f64s, leaf_values, module, run};
use graft_core::Tensor;
use graft_lang::{diag, Module, Output};

/// Every leaf as raw bits, for bitwise comparisons.
fn bits(o: &Output) -> Vec<Vec<u64>> {
    leaf_values(o).into_iter().map(|v| v.into_iter().map(f64::to_bits).collect()).collect()
}

/// The first diagnostic of running `entry` (after `check`, which must pass
/// or fail with the same error), rendered, and its line and column.
fn run_error(src: &str, entry: &str, inputs: &[Tensor]) -> (String, (u32, u32), String) {
    let m = module(src);
    match m.run(entry, inputs) {
        Ok(o) => panic!("expected an error, got {o:?}"),
        Err(d) => (d.message.clone(), diag::line_col(src, d.span.start), diag::render(&d, "test.graft", src)),
    }
}

const TREES: &str = r#"
def combine(a: tensor[n, f64], b: tensor[k, l, f64], c: f64, s: f64) =
  ((a, (b, c)) * 2.0 - (a, (b, c)) / s + s * (c, (b, a)), -(a, (b, c)))

def combine_hand(a: tensor[n, f64], b: tensor[k, l, f64], c: f64, s: f64) =
  ((a * 2.0 - a / s + s * c, (b * 2.0 - b / s + s * b, c * 2.0 - c / s + s * a)), (-a, (-b, -c)))

def mapped(a: tensor[n, f64], b: tensor[k, l, f64], c: f64) =
  (tree_map(fn (x, y) -> sin(x) * y, (a, (b, c)), (a, (b, c))),
   tree_reduce(fn (acc, x) -> acc + sum(x * x), (a, (b, c)), 0.0),
   tree_leaves((a, (b, c))))

def mapped_hand(a: tensor[n, f64], b: tensor[k, l, f64], c: f64) =
  ((sin(a) * a, (sin(b) * b, sin(c) * c)),
   0.0 + sum(a * a) + sum(b * b) + sum(c * c),
   (a, b, c))

# A loss through tuple arithmetic and every tree builtin.
def loss(a: tensor[n, f64], b: tensor[k, l, f64], c: f64) -> f64 {
  let p = (a, (b, c))
  let q = tree_map(fn (x) -> tanh(x) * 0.5, p) + 0.25 * p
  tree_reduce(fn (acc, x) -> acc + sum(x * x * x), q - p * q, 0.0) + sum(tree_leaves(q).1)
}

def dloss(a: tensor[n, f64], b: tensor[k, l, f64], c: f64) = grad(loss)(a, b, c)
"#;

fn tree_inputs() -> Vec<Tensor> {
    vec![f64s(&[3], &[0.3, -1.2, 0.7]), f64s(&[2, 2], &[0.5, -0.4, 1.1, 0.2]), f64s(&[], &[-0.6])]
}

#[test]
fn tuple_arithmetic_equals_the_hand_written_form() {
    let m = module(TREES);
    m.check().unwrap_or_else(|ds| panic!("{:?}", ds));
    let mut inputs = tree_inputs();
    inputs.push(f64s(&[], &[1.5]));
    let got = run(&m, "combine", &inputs);
    let want = run(&m, "combine_hand", &inputs);
    assert_eq!(bits(&got), bits(&want));
    // And the numbers themselves, for the first leaf: a*2 - a/s + s*c.
    let a = [0.3, -1.2, 0.7];
    let first: Vec<f64> = a.iter().map(|x| x * 2.0 - x / 1.5 + 1.5 * -0.6).collect();
    close("first leaf", &leaf_values(&got)[0], &first, 1e-15);
}

#[test]
fn tree_builtins_equal_the_hand_written_form() {
    let m = module(TREES);
    let got = run(&m, "mapped", &tree_inputs());
    let want = run(&m, "mapped_hand", &tree_inputs());
    assert_eq!(bits(&got), bits(&want));
    let sq: f64 = [0.3f64, -1.2, 0.7, 0.5, -0.4, 1.1, 0.2, -0.6].iter().map(|x| x * x).sum();
    close("tree_reduce", &leaf_values(&got)[3], &[sq], 1e-15);
}

#[test]
fn gradients_through_trees_match_central_differences() {
    let m = module(TREES);
    let x0: Vec<f64> = tree_inputs().iter().flat_map(|t| t.to_f64_vec()).collect();
    let split = |x: &[f64]| vec![f64s(&[3], &x[0..3]), f64s(&[2, 2], &x[3..7]), f64s(&[], &x[7..8])];
    let f = |x: &[f64]| leaf_values(&run(&m, "loss", &split(x)))[0][0];
    let g: Vec<f64> = leaf_values(&run(&m, "dloss", &split(&x0))).concat();
    assert_eq!(g.len(), 8);
    let h = 1e-6;
    let fd: Vec<f64> = (0..8)
        .map(|i| {
            let (mut a, mut b) = (x0.clone(), x0.clone());
            a[i] += h;
            b[i] -= h;
            (f(&a) - f(&b)) / (2.0 * h)
        })
        .collect();
    close("gradient", &g, &fd, 1e-7);
}

const GENERIC: &str = r#"
def sgd[T, S](p: T, g: T, lr: S) -> T = p - lr * g

def step[T](p: T, g: T) -> (T, T) = (sgd(p, g, 0.5), g)

def r0(x: f64) = sgd(x, 2.0 * x, 0.25)
def r1(x: tensor[n, f64]) = sgd(x, x * x, 0.5)
def r2(x: tensor[n, m, f32]) = sgd(x, x, 0.5)
def tr(x: tensor[n, f64], y: tensor[k, l, f64]) = step((x, (y, x)), (x * x, (y, 2.0 * x)))
def tr_hand(x: tensor[n, f64], y: tensor[k, l, f64]) =
  (((x - 0.5 * (x * x)), ((y - 0.5 * y), (x - 0.5 * (2.0 * x)))), (x * x, (y, 2.0 * x)))

# Gradient of a loss through a generic def, and a generic def under vmap.
def gl(x: tensor[n, f64]) = grad(fn (x) -> sum(sgd(x, sin(x), 0.5) ** 2))(x)
def vm(xs: tensor[b, n, f64]) = vmap(fn (x) -> sgd(x, x * x, 0.5))(xs)
"#;

#[test]
fn generic_defs_at_ranks_and_trees() {
    let m = module(GENERIC);
    m.check().unwrap_or_else(|ds| panic!("{:?}", ds));
    close("rank 0", &leaf_values(&run(&m, "r0", &[f64s(&[], &[4.0])]))[0], &[2.0], 0.0);
    close("rank 1", &leaf_values(&run(&m, "r1", &[f64s(&[2], &[2.0, 4.0])]))[0], &[0.0, -4.0], 0.0);
    let x2 = Tensor::from_vec(vec![1, 2], vec![2.0f32, 4.0]).unwrap();
    let o2 = run(&m, "r2", &[x2]);
    assert_eq!(o2.leaves()[0].shape(), &[1, 2]);
    close("rank 2", &leaf_values(&o2)[0], &[1.0, 2.0], 0.0);
    let ins = [f64s(&[2], &[1.0, 3.0]), f64s(&[2, 2], &[1.0, 2.0, 3.0, 4.0])];
    assert_eq!(bits(&run(&m, "tr", &ins)), bits(&run(&m, "tr_hand", &ins)));
    let x = [0.4f64, -1.3, 2.2];
    // d/dx (x - 0.5 sin x)^2 = 2 (x - 0.5 sin x)(1 - 0.5 cos x)
    let want: Vec<f64> = x.iter().map(|x| 2.0 * (x - 0.5 * x.sin()) * (1.0 - 0.5 * x.cos())).collect();
    close("grad", &leaf_values(&run(&m, "gl", &[f64s(&[3], &x)]))[0], &want, 1e-14);
    let xs = [1.0, 2.0, 3.0, 4.0];
    let want: Vec<f64> = xs.iter().map(|x| x - 0.5 * x * x).collect();
    close("vmap", &leaf_values(&run(&m, "vm", &[f64s(&[2, 2], &xs)]))[0], &want, 0.0);
}

const HIGHER: &str = r#"
def newton(f: fn, x: f64) -> f64 = fori(20, fn (i, x) -> x - f(x) / grad(f)(x), x)

def scaled(a: f64) -> fn = fn (x) -> a * x

def twice[F, X](f: F, x: X) = f(f(x))

def compose(f: fn, g: fn) -> fn = fn (x) -> f(g(x))

def cube(x: f64) -> f64 = x * x * x - 5.0

def roots(a: f64) = (newton(fn (x) -> x * x - a, a), newton(cube, a))
def made(a: f64, x: tensor[n, f64]) = (scaled(a)(x), twice(scaled(a), x), compose(exp, scaled(a))(x), twice(sin, x))
# The derivative of the root with respect to the parameter (implicit: 1 / (2 sqrt a)).
def droot(a: f64) = grad(fn (a) -> newton(fn (x) -> x * x - a, a))(a)
# A transformed function as an argument.
def gthrough(x: tensor[n, f64]) = twice(grad(fn (x) -> sum(x * x)), x)
"#;

#[test]
fn higher_order_defs() {
    let m = module(HIGHER);
    m.check().unwrap_or_else(|ds| panic!("{:?}", ds));
    let r = leaf_values(&run(&m, "roots", &[f64s(&[], &[2.0])]));
    close("sqrt", &r[0], &[2f64.sqrt()], 1e-15);
    close("cbrt", &r[1], &[5f64.cbrt()], 1e-15);
    let x = [0.5, -1.0];
    let o = leaf_values(&run(&m, "made", &[f64s(&[], &[3.0]), f64s(&[2], &x)]));
    close("scaled", &o[0], &[1.5, -3.0], 0.0);
    close("twice", &o[1], &[4.5, -9.0], 0.0);
    close("compose", &o[2], &x.iter().map(|v| (3.0 * v).exp()).collect::<Vec<_>>(), 1e-15);
    close("twice sin", &o[3], &x.iter().map(|v: &f64| v.sin().sin()).collect::<Vec<_>>(), 1e-15);
    let d = leaf_values(&run(&m, "droot", &[f64s(&[], &[2.0])]));
    assert!(d[0][0].is_finite());
    close("gradient through newton", &d[0], &[0.5 / 2f64.sqrt()], 1e-9);
    close("grad as an argument", &leaf_values(&run(&m, "gthrough", &[f64s(&[2], &x)]))[0], &[2.0, -4.0], 0.0);
}

/// `graft check` of a program whose generic def nothing calls passes (it is
/// checked at its calls); once a checked def calls it, its errors show.
#[test]
fn uncalled_generic_defs_are_checked_at_their_calls() {
    let src = "def bad[T](p: T) -> T = p @ p\ndef ok[T](p: T) -> T = p\ndef use(x: f32) = ok(x)\n";
    let m = module(src);
    m.check().expect("an uncalled generic def has no types to check at");
    assert_eq!(m.unchecked_generics(), vec!["bad"]);
    let src = "def bad[T](p: T) -> T = p @ p\ndef use(x: f32) = bad(x)\n";
    let (msg, pos) = check_error(src);
    assert!(msg.contains("`@` needs operands with at least one axis"), "{msg}");
    assert_eq!(pos, (1, 25));
    let m = module(src);
    let ds = m.check().unwrap_err();
    assert!(
        ds[0].notes.iter().any(|n| n.contains("in `bad` specialised at test.graft:2:19 with T = f32[]")),
        "{:?}",
        ds[0].notes
    );
}

#[test]
fn structure_mismatches_are_located() {
    let (msg, pos) = check_error("def f(a: f32, b: f32) = tree_map(fn (x, y) -> x + y, (a, b), (a, (b, a)))\n");
    assert!(msg.contains("the trees have different structures, (f32[], f32[]) and (f32[], (f32[], f32[]))"), "{msg}");
    assert_eq!(pos, (1, 25));
    let (msg, pos) = check_error("def f(a: f32, b: f32) = (a, b) + (a, (b, a))\n");
    assert!(
        msg.contains("`+` needs tuples of the same structure, found (f32[], f32[]) and (f32[], (f32[], f32[]))"),
        "{msg}"
    );
    assert_eq!(pos, (1, 25));
    let (msg, pos) = check_error("def f(a: f32, b: tensor[n, f32]) = (a, a) * b\n");
    assert!(msg.contains("`*` between a tuple and a non-scalar"), "{msg}");
    assert_eq!(pos, (1, 36));
    let (msg, _) = check_error("def f(a: f32) = (a, a) ** 2.0\n");
    assert!(msg.contains("`**` does not apply to tuples"), "{msg}");
    let (msg, _) = check_error("def f(a: bool) = not (a, a)\n");
    assert!(msg.contains("`not` does not apply to tuples"), "{msg}");
}

#[test]
fn wrong_arity_of_the_mapped_function() {
    let (msg, pos) = check_error("def f(a: f32) = tree_map(fn (x) -> x, (a, a), (a, a))\n");
    assert!(msg.contains("the function `fn` takes 1 argument, but 2 trees were given"), "{msg}");
    assert_eq!(pos, (1, 26));
    let (msg, pos) = check_error("def g(x: f32, y: f32) -> f32 = x + y\ndef f(a: f32) = tree_map(g, (a, a))\n");
    assert!(msg.contains("the function `g` takes 2 arguments, but 1 tree was given"), "{msg}");
    assert_eq!(pos, (2, 26));
    let (msg, _) = check_error("def f(a: f32) = tree_reduce(fn (x) -> x, (a, a), 0.0)\n");
    assert!(msg.contains("`tree_reduce`: the function `fn` takes 1 argument"), "{msg}");
    let (msg, _) = check_error("def f(a: f32) = tree_map((a, a), (a, a))\n");
    assert!(msg.contains("`tree_map` needs a function as its first argument"), "{msg}");
    let (msg, _) = check_error("def f(a: f32) = tree_map(sin)\n");
    assert!(msg.contains("needs at least one tree"), "{msg}");
}

#[test]
fn inconsistent_types_for_a_generic_def() {
    let src = "def sgd[T](p: T, g: T, lr: f32) -> T = p - lr * g\n\
               def f(a: tensor[n, f32], b: tensor[m, f32]) = sgd((a, a), (a, b), 0.1)\n";
    let (msg, pos) = check_error(src);
    assert!(
        msg.contains("argument `g` of `sgd` must have type `T` = (f32[11], f32[11]) (fixed by argument `p` of `sgd`), found (f32[11], f32[13])"),
        "{msg}"
    );
    assert_eq!(pos, (2, 59));
    // A dtype disagreement, and a result that does not have the declared type.
    let (msg, _) = check_error("def id[T](p: T, q: T) -> T = p\ndef f(a: f32, b: f64) = id(a, b)\n");
    assert!(msg.contains("must have type `T` = f32[]"), "{msg}");
    let (msg, pos) = check_error("def pair[T](p: T) -> (T, T) = p\ndef f(a: f32) = pair(a)\n");
    assert!(msg.contains("the result of `pair` must be a tuple of 2, found f32[]"), "{msg}");
    assert_eq!(pos, (1, 31));
    let (msg, pos) = check_error("def app(f: fn, x: f32) = f(x)\ndef g(a: f32) = app(a, a)\n");
    assert!(msg.contains("argument `f` of `app` must be a function (`fn`), found f32[]"), "{msg}");
    assert_eq!(pos, (2, 21));
}

#[test]
fn recursion_is_an_error() {
    let src = "def f[T](x: T) -> T = f(x)\ndef g(a: f32) = f(a)\n";
    let errs = Module::from_source("t.graft", src).unwrap_err();
    assert!(errs[0].message.contains("`f` calls itself; recursion is not supported"), "{}", errs[0].message);
    assert_eq!(diag::line_col(src, errs[0].span.start), (1, 23));
    // Mutual recursion of generic defs: the nesting limit, with a bounded
    // number of notes.
    let (msg, _) = check_error("def f[T](x: T) -> T = g(x)\ndef g[T](x: T) -> T = f(x)\ndef h(a: f32) = f(a)\n");
    assert!(msg.contains("nest more than 200 deep"), "{msg}");
    let ds =
        module("def f[T](x: T) -> T = g(x)\ndef g[T](x: T) -> T = f(x)\ndef h(a: f32) = f(a)\n").check().unwrap_err();
    assert!(ds[0].notes.len() < 12, "{:?}", ds[0].notes);
    // A generic def re-entered through a function argument is not recursion.
    let src = "def apply(f: fn, x: f64) -> f64 = f(x)\n\
               def h(a: f64) = apply(fn (y) -> apply(fn (z) -> z * 2.0, y) + 1.0, a)\n";
    let o = run(&module(src), "h", &[f64s(&[], &[3.0])]);
    close("re-entered", &leaf_values(&o)[0], &[7.0], 0.0);
    // Through a function argument: the depth limit, not a hang.
    let (msg, _) = check_error("def app(f: fn, x: f32) -> f32 = f(f, x)\ndef g(a: f32) = app(app, a)\n");
    assert!(msg.contains("recursion") || msg.contains("nest more than"), "{msg}");
}

#[test]
fn generic_entries_and_attributes_are_rejected() {
    let src = "def sgd[T](p: T, g: T) -> T = p - g\n";
    let (msg, pos, text) = run_error(src, "sgd", &[f64s(&[], &[1.0]), f64s(&[], &[1.0])]);
    assert!(msg.contains("`sgd` is generic and cannot be an entry: it has the type parameter `T`"), "{msg}");
    assert_eq!(pos, (1, 9));
    assert!(text.contains("an entry's parameters need concrete types"), "{text}");
    let m = module("def mk(a: f32) -> fn = fn (x) -> a * x\n");
    assert!(m.entry_problem("mk").is_some_and(|d| d.message.contains("its result is a function")));
    let errs = Module::from_source("t.graft", "@grad(p)\ndef f[T](p: T) -> T = p\n").unwrap_err();
    assert!(errs[0].message.contains("`@grad` cannot be put on a generic def"), "{}", errs[0].message);
}

#[test]
fn type_parameters_are_types_only_in_their_signature() {
    let errs = Module::from_source("t.graft", "def f[T](p: T) -> T {\n  let q: T = p\n  q\n}\n").unwrap_err();
    assert!(errs[0].message.contains("unknown type `T`"), "{}", errs[0].message);
    assert!(errs[0].notes.iter().any(|n| n.contains("only in their def's signature")));
    let errs = Module::from_source("t.graft", "def f[T, T](p: T) = p\n").unwrap_err();
    assert!(errs[0].message.contains("type parameter `T` is declared twice"), "{}", errs[0].message);
    let errs = Module::from_source("t.graft", "def f[](p: f32) = p\n").unwrap_err();
    assert!(errs[0].message.contains("empty type parameter list"), "{}", errs[0].message);
    let errs = Module::from_source("t.graft", "def f[f32](p: f32) = p\n").unwrap_err();
    assert!(errs[0].message.contains("`f32` is a type and cannot be a type parameter"), "{}", errs[0].message);
}

/// The fuzz seeds for the new syntax type-check and go through both fuzz
/// targets' paths without a panic (the lowering target instantiates the
/// concrete `step`, which calls every generic def).
#[test]
fn fuzz_seeds_check_and_lower() {
    for target in ["front_end", "lowering"] {
        let path = format!("{}/../../fuzz/seeds/{target}/generic_pytrees.graft", env!("CARGO_MANIFEST_DIR"));
        let src = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let m = module(&src);
        m.check()
            .unwrap_or_else(|ds| panic!("{}", ds.iter().map(|d| diag::render(d, &path, &src)).collect::<String>()));
        let c = m.instantiate_at_placeholders("step").expect("`step` has concrete types");
        assert!(c.is_ok(), "{:?}", c.err());
        graft_lang::fuzzing::front_end(src.as_bytes());
        graft_lang::fuzzing::lowering(src.as_bytes());
    }
}

/// `graft ast` prints type parameters and the new types.
#[test]
fn ast_prints_type_parameters_and_fn() {
    let p = graft_lang::parse("def f[T, U](x: T, g: fn) -> (T, fn) = (x, g)\n").expect("parses");
    let s = graft_lang::sexpr::def_to_sexpr(&p.defs[0]);
    assert!(s.contains("(tparams {} T U)"), "{s}");
    assert!(s.contains("(param {name: x} (t-var {} T))"), "{s}");
    assert!(s.contains("(param {name: g} (t-fn {}))"), "{s}");
    assert!(s.contains("(ret {} (t-tuple {} (t-var {} T) (t-fn {})))"), "{s}");
    // A def without type parameters prints as before (no `tparams` node).
    let p = graft_lang::parse("def g(x: f32) -> f32 = x\n").expect("parses");
    assert!(!graft_lang::sexpr::def_to_sexpr(&p.defs[0]).contains("tparams"));
}

/// Forward mode and batching see through trees too: the JVP of a tree
/// function equals the directional derivative written out, and `vmap` of
/// `tree_map` equals the per-example results.
#[test]
fn jvp_and_vmap_through_trees() {
    let src = r#"
def f(a: tensor[n, f64], b: f64) = tree_reduce(fn (acc, x) -> acc + sum(x * x), tree_map(sin, (a, b)) * 2.0, 0.0)
def jf(a: tensor[n, f64], b: f64, ta: tensor[n, f64], tb: f64) = jvp(f, (a, b), (ta, tb)).1
def vf(xs: tensor[k, n, f64]) = vmap(fn (x) -> tree_map(fn (u, v) -> u * v, (x, -x), (x, x)))(xs)
"#;
    let m = module(src);
    m.check().unwrap_or_else(|ds| panic!("{:?}", ds));
    let (a, b, ta, tb) = ([0.3f64, -0.8], 1.1f64, [0.5f64, 2.0], -1.5f64);
    let ins = [f64s(&[2], &a), f64s(&[], &[b]), f64s(&[2], &ta), f64s(&[], &[tb])];
    // f = sum 4 sin(x)^2 over all leaves: df = sum 8 sin(x) cos(x) t.
    let want: f64 =
        a.iter().zip(&ta).map(|(x, t)| 8.0 * x.sin() * x.cos() * t).sum::<f64>() + 8.0 * b.sin() * b.cos() * tb;
    close("jvp", &leaf_values(&run(&m, "jf", &ins))[0], &[want], 1e-14);
    let xs = [1.0, 2.0, 3.0, 4.0];
    let o = leaf_values(&run(&m, "vf", &[f64s(&[2, 2], &xs)]));
    close("vmap 0", &o[0], &xs.iter().map(|x| x * x).collect::<Vec<_>>(), 0.0);
    close("vmap 1", &o[1], &xs.iter().map(|x| -x * x).collect::<Vec<_>>(), 0.0);
}
