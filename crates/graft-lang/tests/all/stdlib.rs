//! The builtins of `lower/stdlib.rs` and the constant folder of
//! `lower/fold.rs`: axes given as dimension names everywhere an axis is
//! taken, `axis=none`, error messages that name the builtin, options that
//! are rejected rather than clamped, required arguments, the dtypes literals
//! take, constant folding with graft's own kernels, `cast` of literals, and
//! the error of a loop whose carry changes shape. Every test checks values,
//! shapes and dtypes, or exact messages and positions.

use graft_core::{DType, Tensor};
use graft_lang::{diag, Module, Output};

fn module(src: &str) -> Module {
    match Module::from_source("test.graft", src) {
        Ok(m) => m,
        Err(ds) => panic!("{}", ds.iter().map(|d| diag::render(d, "test.graft", src)).collect::<String>()),
    }
}

fn run(src: &str, entry: &str, inputs: &[Tensor]) -> Output {
    let m = module(src);
    match m.run(entry, inputs) {
        Ok(o) => o,
        Err(d) => panic!("{}", diag::render(&d, m.file(), m.source())),
    }
}

/// The leaves of `main()`'s result.
fn leaves(src: &str) -> Vec<Tensor> {
    run(src, "main", &[]).leaves().into_iter().cloned().collect()
}

/// The error of `main()`: its message, its notes and its 1-based position.
fn error(src: &str) -> (String, Vec<String>, (u32, u32)) {
    let m = module(src);
    match m.run("main", &[]) {
        Ok(_) => panic!("expected an error for\n{src}"),
        Err(d) => (d.message.clone(), d.notes.clone(), diag::line_col(src, d.span.start)),
    }
}

/// Same dtype, shape and elements (bit for bit; NaNs of any payload agree).
fn assert_same(a: &Tensor, b: &Tensor, what: &str) {
    assert_eq!((a.dtype(), a.shape()), (b.dtype(), b.shape()), "{what}");
    // Every f32, i32 and bool element is exactly an f64.
    let bits = |t: &Tensor| -> Vec<Option<u64>> {
        (0..t.numel()).map(|i| t.storage().get_f64(i)).map(|x| (!x.is_nan()).then(|| x.to_bits())).collect()
    };
    assert_eq!(bits(a), bits(b), "{what}: {a} vs {b}");
}

const X23: &str = "[[1.0, 5.0, 3.0], [4.0, 2.0, 6.0]]";

/// A dimension name is the axis that carries it, for every builtin that
/// takes an axis: each named form equals the integer form. `expand_dims`
/// and `stack` put the new axis where the named axis is (before it).
#[test]
fn dimension_names_are_axes_everywhere() {
    let src = format!(
        "def f(x: tensor[b, n, f32]) = (\n\
           (expand_dims(x, b), expand_dims(x, 0)), (expand_dims(x, n), expand_dims(x, 1)),\n\
           (transpose(x, (n, b)), transpose(x, (1, 0))), (concat((x, x), n), concat((x, x), 1)),\n\
           (stack((x, x), n), stack((x, x), 1)), (softmax(x, b), softmax(x, 0)),\n\
           (log_softmax(x, b), log_softmax(x, 0)), (cumsum(x, b), cumsum(x, 0)),\n\
           (argmax(x, b), argmax(x, 0)), (argmin(x, n), argmin(x, 1)),\n\
           (take(x, [1, 0], axis=n), take(x, [1, 0], axis=1)), (flip(x, n), flip(x, 1)),\n\
           (size(x, n), size(x, 1)), (sum(x, n), sum(x, 1)))\n\
         def g(x: tensor[b, one, n, f32]) = (squeeze(x, one), squeeze(x, 1))\n\
         def main() = (f({X23}), g(reshape({X23}, (2, 1, 3))))\n"
    );
    let ls = leaves(&src);
    assert_eq!(ls.len(), 30);
    for (i, pair) in ls.chunks(2).enumerate() {
        assert_same(&pair[0], &pair[1], &format!("pair {i}"));
    }
    // The shapes the brief's `expand_dims(x, b)` got wrong, and the others.
    let shapes: Vec<Vec<usize>> = ls.iter().step_by(2).map(|t| t.shape().to_vec()).collect();
    assert_eq!(
        shapes,
        vec![
            vec![1, 2, 3],
            vec![2, 1, 3],
            vec![3, 2],
            vec![2, 6],
            vec![2, 2, 3],
            vec![2, 3],
            vec![2, 3],
            vec![2, 3],
            vec![3],
            vec![2],
            vec![2, 2],
            vec![2, 3],
            vec![],
            vec![2],
            vec![2, 3],
        ]
    );
    assert_eq!(ls[4].to_vec::<f32>().unwrap(), vec![1.0, 4.0, 5.0, 2.0, 3.0, 6.0]);
    assert_eq!(ls[24].to_vec::<i32>().unwrap(), vec![3]);
}

/// A name that is not an axis, or that matches several by size, is the
/// same error for the axis-taking builtins that used to read it as a number.
#[test]
fn dimension_names_that_are_not_one_axis_are_errors() {
    let src = "def f(x: tensor[b, n, f32], y: tensor[m, f32]) = expand_dims(x, m)\n\
               def main() = f([[1.0, 2.0]], [1.0, 2.0, 3.0])\n";
    assert_eq!(error(src).0, "`expand_dims`: dimension `m` (= 3) is not an axis of this value (f32[1,2])");
    let src = "def f(x: tensor[n, f32]) = concat((reshape(stack((x, x)), (2, 2)),), n)\n\
               def main() = f([1.0, 2.0])\n";
    let (msg, notes, _) = error(src);
    assert_eq!(msg, "`concat`: dimension `n` (= 2) matches several axes of f32[2,2]");
    assert_eq!(notes, vec!["help: give the axis as an integer".to_string()]);
}

/// An explicit `axis=none` means what leaving the axis out means, for every
/// builtin whose axis is optional.
#[test]
fn axis_none_is_the_same_as_leaving_it_out() {
    let src = format!(
        "def main() {{\n\
           let x = {X23}\n\
           ((argmax(x, axis=none), argmax(x)), (argmin(x, axis=none), argmin(x)),\n\
            (argmax(x, axis=none, keepdims=true), argmax(x, keepdims=true)),\n\
            (softmax(x, axis=none), softmax(x)), (log_softmax(x, none), log_softmax(x)),\n\
            (cumsum(x, axis=none), cumsum(x)), (size(x, axis=none), size(x)),\n\
            (take(x, [1], axis=none), take(x, [1])), (squeeze([[2.0]], axis=none), squeeze([[2.0]])),\n\
            (sum(x, axis=none), sum(x)), (flip(x, none), flip(x)), (var(x, axis=none), var(x)),\n\
            (transpose(x, perm=none), transpose(x)), (arange(3, none, dtype=none), arange(3)))\n\
         }}\n"
    );
    let ls = leaves(&src);
    assert_eq!(ls.len(), 28);
    for (i, pair) in ls.chunks(2).enumerate() {
        assert_same(&pair[0], &pair[1], &format!("pair {i}"));
    }
    assert_eq!(ls[0].to_vec::<i32>().unwrap(), vec![5]);
    assert_eq!(ls[10].to_vec::<f32>().unwrap(), vec![1.0, 6.0, 9.0, 4.0, 6.0, 12.0]);
    assert_eq!(ls[12].to_vec::<i32>().unwrap(), vec![6]);
    let src = "def main() = (split(key(3), n=none), split(key(3)))\n";
    let ls = leaves(src);
    assert_same(&ls[0], &ls[2], "first key");
    assert_same(&ls[1], &ls[3], "second key");
}

/// Where an axis is required (`expand_dims`) or must be one integer
/// (`concat`, `stack`: `jnp.concatenate(axis=None)` flattens), `none` is an
/// error that names the builtin.
#[test]
fn axis_none_is_an_error_where_it_has_no_meaning() {
    for (expr, msg) in [
        ("expand_dims([1.0], none)", "`expand_dims`: an axis must be an integer or a dimension name, found `none`"),
        ("concat(([1.0], [2.0]), axis=none)", "`concat`: an axis must be an integer or a dimension name, found `none`"),
        ("stack(([1.0], [2.0]), none)", "`stack`: an axis must be an integer or a dimension name, found `none`"),
        ("expand_dims([1.0], (0, 1))", "`expand_dims` takes one axis, found a tuple of 2"),
    ] {
        assert_eq!(error(&format!("def main() = {expr}\n")).0, msg, "{expr}");
    }
}

/// `argmax`/`argmin` without an axis reduce every axis; with `keepdims`
/// every axis stays with size 1, as in JAX.
#[test]
fn argmax_keepdims_without_axis_keeps_every_axis() {
    let ls = leaves(&format!(
        "def main() = (argmax({X23}, keepdims=true), argmin(reshape(arange(8.0), (2, 2, 2)), keepdims=true), argmax(3.0, keepdims=true))\n"
    ));
    assert_eq!((ls[0].shape(), ls[0].to_vec::<i32>().unwrap()), (&[1usize, 1][..], vec![5]));
    assert_eq!((ls[1].shape(), ls[1].to_vec::<i32>().unwrap()), (&[1usize, 1, 1][..], vec![0]));
    assert_eq!((ls[2].shape(), ls[2].to_vec::<i32>().unwrap()), (&[][..], vec![0]));
}

/// Every error of a builtin starts with its name, also those graft-core
/// raises for the primitive underneath (`max`, `take`, `mul`).
#[test]
fn errors_name_the_builtin_that_was_written() {
    let cases: &[(&str, &str)] = &[
        ("softmax([[1.0]], (0, 1))", "`softmax` needs exactly one axis, got 2"),
        ("argmax([[1.0]], (0, 1))", "`argmax` needs exactly one axis, got 2"),
        ("cumsum(1.0)", "`cumsum` needs a value with at least one axis, found f32[]"),
        ("log_softmax(2.0)", "`log_softmax` needs a value with at least one axis, found f32[]"),
        ("sum([[1.0]], 2)", "`sum`: axis 2 is out of range for a value of rank 2 (f32[1,1])"),
        ("sum([1.0], keepdims=1)", "`sum`: `keepdims` must be `true` or `false`, found the integer 1"),
        ("square([true])", "`square` needs a numeric value, found bool[1]"),
        ("relu([true, false])", "`relu` needs a numeric value, found bool[2]"),
        ("abs([true])", "`abs` needs a numeric value, found bool[1]"),
        ("sign([true])", "`sign` needs a numeric value, found bool[1]"),
        (
            "maximum([1.0, 2.0, 3.0], [1.0, 2.0])",
            "`maximum`: shapes [3] and [2] cannot be broadcast together (dimension 0: 3 vs 2)",
        ),
        ("gather([1.0], [0.5])", "`gather`: indices must be i32 or i64, got f32[1]"),
        ("matmul([1.0], 2.0)", "`matmul` needs operands with at least one axis, found f32[1] and f32[]"),
        ("[1.0] @ 2.0", "`@` needs operands with at least one axis, found f32[1] and f32[]"),
        (
            "matmul([[1.0, 2.0]], [1.0])",
            "`matmul` needs the last dimension of the left operand to match the length of the right one",
        ),
        ("transpose(ones((2, 3)), (0, 0))", "`transpose`: axis 0 is given twice"),
        ("transpose(ones((2, 3)), (2, 0))", "`transpose`: axis 2 is out of range for a value of rank 2 (f32[2,3])"),
        ("clip([1, 2], 0.5, 1)", "`clip`: expected a value of dtype i32, found the number 0.5"),
        ("zeros((2, -1))", "`zeros`: `shape` must not have negative sizes, found [2, -1]"),
        ("full(3, ones(2))", "`full`: `value` must be a number known while compiling, found a tensor"),
        ("concat((1.0, 2.0))", "`concat` needs items with at least one axis, found f32[]"),
        ("stack((1.0, 2.0), 1)", "`stack`: axis 1 is out of range for a result of rank 1"),
    ];
    for (expr, msg) in cases {
        assert_eq!(error(&format!("def main() = {expr}\n")).0, *msg, "{expr}");
    }
}

/// `floor`, `ceil` and `round` are float-only like `exp`, with the same
/// message and `cast` hint for an integer tensor.
#[test]
fn float_only_rounding_functions_hint_at_cast() {
    for name in ["floor", "ceil", "round", "exp"] {
        let src = format!("def f(x: tensor[2, i32]) = {name}(x)\ndef main() = f([1, 2])\n");
        let (msg, notes, _) = error(&src);
        assert_eq!(msg, format!("`{name}` needs a floating-point value, found i32[2]"));
        assert_eq!(notes, vec!["help: convert with `cast(x, f32)`".to_string()]);
    }
}

/// Negative `perm` entries count from the end, like axes.
#[test]
fn transpose_perm_takes_negative_axes() {
    let ls = leaves(&format!(
        "def main() = (transpose({X23}, (-1, 0)), transpose({X23}), transpose(reshape(arange(6), (1, 2, 3)), (-1, -3, 1)))\n"
    ));
    assert_same(&ls[0], &ls[1], "(-1, 0) is (1, 0)");
    assert_eq!(ls[2].shape(), &[3, 1, 2]);
    assert_eq!(ls[2].to_vec::<i32>().unwrap(), vec![0, 3, 1, 4, 2, 5]);
}

/// Options out of range are errors at the option, naming it and the range,
/// never clamped to the nearest allowed value.
#[test]
fn options_out_of_range_are_located_errors() {
    let cases: &[(&str, &str, &str)] = &[
        ("var([1.0, 2.0], ddof=-3)", "ddof=-3", "`var`: `ddof` must be an integer >= 0, found -3"),
        ("std([1.0, 2.0], ddof=-1)", "ddof=-1", "`std`: `ddof` must be an integer >= 0, found -1"),
        (
            "conv2d(ones((1, 1, 3, 3)), ones((1, 1, 1, 1)), stride=-2, padding=1)",
            "stride=-2",
            "`conv2d`: `stride` must be an integer >= 1, found -2",
        ),
        (
            "conv2d(ones((1, 1, 3, 3)), ones((1, 1, 1, 1)), padding=-1)",
            "padding=-1",
            "`conv2d`: `padding` must be an integer >= 0, found -1",
        ),
        ("max_pool2d(ones((1, 1, 2, 2)), 0)", "0)", "`max_pool2d`: `k` must be an integer >= 1, found 0"),
        (
            "max_pool2d(ones((1, 1, 2, 2)), 1, stride=-3)",
            "stride=-3",
            "`max_pool2d`: `stride` must be an integer >= 1, found -3",
        ),
        ("avg_pool2d(ones((1, 1, 2, 2)), -2)", "-2)", "`avg_pool2d`: `k` must be an integer >= 1, found -2"),
        ("split(key(0), -1)", "-1)", "`split`: `n` must be an integer >= 0, found -1"),
        ("linspace(0.0, 1.0, -1)", "-1)", "`linspace`: `num` must be an integer >= 0, found -1"),
        ("one_hot([1], -1)", "-1)", "`one_hot`: `n` must be an integer >= 0, found -1"),
    ];
    for (expr, at, msg) in cases {
        let src = format!("def main() = {expr}\n");
        let col = 1 + src.find(at).expect("the option is in the source") as u32;
        let (m, _, pos) = error(&src);
        assert_eq!((m.as_str(), pos), (*msg, (1, col)), "{expr}");
    }
    // The edge values themselves are fine.
    let ls = leaves("def main() = (split(key(0), 0), linspace(0.0, 1.0, 0), var([1.0, 3.0], ddof=0))\n");
    assert_eq!((ls[0].shape(), ls[1].shape()), (&[0usize, 2][..], &[0usize][..]));
    assert_eq!(ls[2].to_vec::<f32>().unwrap(), vec![1.0]);
}

/// Required arguments are required: no silent 0 or NaN.
#[test]
fn creation_functions_require_their_arguments() {
    for (expr, msg) in [
        ("linspace()", "`linspace` needs the argument `start`"),
        ("linspace(1.0)", "`linspace` needs the argument `stop`"),
        ("arange()", "`arange` needs the argument `start`"),
        ("arange(stop=3)", "`arange` needs the argument `start`"),
        ("full(3)", "`full` needs the argument `value`"),
    ] {
        let (m, notes, _) = error(&format!("def main() = {expr}\n"));
        assert_eq!(m, msg, "{expr}");
        assert!(notes[0].starts_with("note: its parameters are "), "{notes:?}");
    }
    assert_eq!(leaves("def main() = arange(start=3)\n")[0].to_vec::<i32>().unwrap(), vec![0, 1, 2]);
}

/// Integer literals reduce to integers (i32) as `jnp.sum` of ints does;
/// the float reductions give floats; float literals stay f32.
#[test]
fn integer_literals_reduce_to_integers() {
    let ls = leaves(
        "def main() = (sum([1, 2]), max([1, 5, 2]), min([[3, 1], [2, 4]], 1), prod([2, 3, 4]), cumsum([1, 2]),\n\
                       mean([1, 2]), var([1, 3]), logsumexp([0, 0]), sum([1.0, 2.0]), max([true, false]))\n",
    );
    let dts: Vec<DType> = ls.iter().map(|t| t.dtype()).collect();
    use DType::*;
    assert_eq!(dts, vec![I32, I32, I32, I32, I32, F32, F32, F32, F32, Bool]);
    assert_eq!(ls[0].to_vec::<i32>().unwrap(), vec![3]);
    assert_eq!(ls[1].to_vec::<i32>().unwrap(), vec![5]);
    assert_eq!(ls[2].to_vec::<i32>().unwrap(), vec![1, 2]);
    assert_eq!(ls[3].to_vec::<i32>().unwrap(), vec![24]);
    assert_eq!(ls[5].to_vec::<f32>().unwrap(), vec![1.5]);
    assert_eq!(ls[6].to_vec::<f32>().unwrap(), vec![1.0]);
    assert_eq!(ls[8].to_vec::<f32>().unwrap(), vec![3.0]);
}

/// Every elementwise math builtin of one number literal folds to an untyped
/// number whose value is exactly the f64 kernel's result for that number:
/// `NAME(literal)` given the type f64 equals `NAME(h)` of an f64 tensor `h`
/// bit for bit.
#[test]
fn every_elementwise_builtin_folds_to_the_f64_kernels_value() {
    let values = ["0.5", "-3.0", "1e-10", "2.5", "-0.5", "7", "-20.0", "0.0"];
    for &name in graft_lang::lower::fold::FOLDABLE {
        for opts in ["", ", approximate=true"] {
            if !opts.is_empty() && name != "gelu" {
                continue;
            }
            for v in values {
                let src = format!(
                    "def folded() -> f64 = {name}({v}{opts})\n\
                     def kernel(h: f64) -> f64 = {name}(h{opts})\n"
                );
                let a = run(&src, "folded", &[]).tensor().expect("a tensor").clone();
                let x: f64 = v.parse().expect("a number");
                let b = run(&src, "kernel", &[Tensor::scalar(x)]).tensor().expect("a tensor").clone();
                assert_same(&a, &b, &format!("{name}({v}{opts})"));
            }
        }
    }
}

/// Folded values take their context's dtype: no f32 tensor meets an f64
/// one. Integer literals of `abs sign square relu` stay integers.
#[test]
fn folded_literals_take_the_dtype_of_their_context() {
    let src =
        "def f(x: f64) = (x + erf(0.5), x + abs(-3.0), x + gelu(1.0, approximate=true), x * relu(2), x + round(2.5))\n\
               def g(k: i32) = (k + abs(-3), k * square(4), k + sign(-7), k + relu(-2))\n\
               def main() = (f(1.0), g(10))\n";
    let ls = leaves(src);
    let f64s: Vec<f64> = ls[..5].iter().map(|t| t.to_vec::<f64>().expect("f64")[0]).collect();
    assert_eq!(f64s[0], 1.0 + graft_core::ops::mathfn::erf_f64(0.5));
    assert_eq!(&f64s[1..], &[4.0, f64s[2], 2.0, 3.0]);
    let i32s: Vec<i32> = ls[5..].iter().map(|t| t.to_vec::<i32>().expect("i32")[0]).collect();
    assert_eq!(i32s, vec![13, 160, 9, 10]);
}

/// `cast` of a literal converts the literal's own value: exact to f64, and an
/// error where the target cannot hold it (a typed value still saturates).
#[test]
fn cast_of_a_literal_is_exact_or_an_error() {
    let src = "def to_i32(x: f32) -> i32 = cast(x, i32)\n\
               def main() = (cast(0.1, f64), cast(1e300, f64), cast(0.1, f32), cast(9007199254740993, i64),\n\
                             cast([-1.7, 2.5, 0.0 / 0.0], i32), cast([2, 0], bool), to_i32(3000000000.0), cast(-2147483648, i32))\n";
    let ls = leaves(src);
    assert_eq!(ls[0].to_vec::<f64>().unwrap(), vec![0.1]);
    assert_eq!(ls[1].to_vec::<f64>().unwrap(), vec![1e300]);
    assert_eq!(ls[2].to_vec::<f32>().unwrap(), vec![0.1f32]);
    assert_eq!(ls[3].to_vec::<i64>().unwrap(), vec![9007199254740993]);
    assert_eq!(ls[4].to_vec::<i32>().unwrap(), vec![-1, 2, 0]);
    assert_eq!(ls[5].to_vec::<bool>().unwrap(), vec![true, false]);
    assert_eq!(ls[6].to_vec::<i32>().unwrap(), vec![i32::MAX]);
    assert_eq!(ls[7].to_vec::<i32>().unwrap(), vec![i32::MIN]);
    for (expr, msg, note) in [
        ("cast(1e39, f32)", "`cast`: 1e39 is out of range for f32", "note: the largest f32 is 3.4028235e38"),
        ("cast([1.0, -1e39], f32)", "`cast`: -1e39 is out of range for f32", "note: the largest f32 is 3.4028235e38"),
        (
            "cast(1099511627776, i32)",
            "`cast`: 1099511627776 is out of range for i32",
            "note: i32 holds -2147483648 to 2147483647",
        ),
        (
            "cast(3000000000.0, i32)",
            "`cast`: 3000000000.0 is out of range for i32",
            "note: i32 holds -2147483648 to 2147483647",
        ),
        (
            "cast(1e19, i64)",
            "`cast`: 1e19 is out of range for i64",
            "note: i64 holds -9223372036854775808 to 9223372036854775807",
        ),
    ] {
        let src = format!("def main() = {expr}\n");
        let (m, notes, pos) = error(&src);
        assert_eq!((m.as_str(), notes, pos), (msg, vec![note.to_string()], (1, 19)), "{expr}");
    }
}

/// Literal arguments of `conv2d`, `layer_norm` and `einsum` take the dtype
/// of their tensor operands, as the operands of `+` do.
#[test]
fn literal_operands_take_the_tensor_operands_dtype() {
    let src = "def conv(x: tensor[1, 1, 2, 2, f64]) = conv2d(x, [[[[2.0]]]], [0.5])\n\
               def norm(x: tensor[2, f64]) = layer_norm(x, [1.0, 2.0], [0.0, 1.0])\n\
               def ein(x: tensor[2, f64]) = einsum(\"i,i->\", [1.0, 2.0], x)\n\
               def main() = (conv([[[[1.0, 2.0], [3.0, 4.0]]]]), norm([1.0, 3.0]), ein([3.0, 4.0]))\n";
    let ls = leaves(src);
    assert!(ls.iter().all(|t| t.dtype() == DType::F64), "{ls:?}");
    assert_eq!(ls[0].to_vec::<f64>().unwrap(), vec![2.5, 4.5, 6.5, 8.5]);
    let n = ls[1].to_vec::<f64>().unwrap();
    let s = 1.0 / (1.0f64 + 1e-5).sqrt();
    assert!((n[0] + s).abs() < 1e-12 && (n[1] - (2.0 * s + 1.0)).abs() < 1e-12, "{n:?}");
    assert_eq!(ls[2].to_vec::<f64>().unwrap(), vec![11.0]);
}

/// A loop body that changes the carry's shape is reported as that, with
/// both types, even when the first (f32) attempt failed on a dtype clash.
#[test]
fn a_carry_that_changes_shape_is_the_reported_error() {
    for (body, what) in [
        ("fori(3, fn (i, c) -> c + x, 0.0)", "fori"),
        ("scan(fn (c, e) -> (c + x, e), 0.0, x)", "scan"),
        ("while(fn (c) -> sum(c) < 10.0, fn (c) -> c + x, 0.0)", "while"),
    ] {
        let src = format!("def g(x: tensor[3, f64]) = {body}\ndef main() = g([1.0, 2.0, 3.0])\n");
        let (msg, _, _) = error(&src);
        assert_eq!(
            msg,
            format!("the body of `{what}` changes the carry's type: it starts as f64[] and comes back as f64[3]")
        );
    }
    // A dtype-only problem still reports the dtype clash of the first attempt.
    let src = "def g(x: tensor[3, i32]) = fori(3, fn (i, c) -> c + x, [0.0, 0.0, 0.0])\ndef main() = g([1, 2, 3])\n";
    assert!(error(src).0.starts_with("`+` needs operands of one dtype"), "{:?}", error(src));
}

#[test]
fn loops_take_a_remat_option_and_keep_their_gradients_bitwise() {
    // `remat` changes what reverse mode saves, not the arithmetic of a
    // step. With one step per segment the gradients are the same bits;
    // longer segments sum a const's cotangent per segment first, so they
    // agree to rounding.
    let program = |r: &str| {
        format!(
            "def lf(x: tensor[5, f64]) -> f64 = sum(fori(7, fn (i, y) -> tanh(y * x + 0.1), x{r}))\n\
             def ls(x: tensor[5, f64]) -> f64 = sum(scan(fn (c, t) -> (sin(c + t * x), c * t), x, ones((6, 5), dtype=\"f64\"){r}).1)\n\
             def lw(x: tensor[5, f64]) -> tensor[5, f64] = while(fn (c) -> sum(c) < 40.0, fn (c) -> c * 1.5 + x, x{r})\n\
             def main(x: tensor[5, f64]) = (grad(lf, wrt=x)(x), grad(ls, wrt=x)(x), lw(x))\n"
        )
    };
    let x = Tensor::from_vec(vec![5], vec![0.3f64, -0.2, 0.5, 0.1, 0.7]).unwrap();
    let bits = |o: &Output| -> Vec<Vec<u64>> {
        o.leaves().iter().map(|t| t.to_f64_vec().iter().map(|v| v.to_bits()).collect()).collect()
    };
    let want = bits(&run(&program(""), "main", std::slice::from_ref(&x)));
    for r in [", remat=\"off\"", ", remat=1"] {
        assert_eq!(bits(&run(&program(r), "main", std::slice::from_ref(&x))), want, "{r}");
    }
    let want = run(&program(""), "main", std::slice::from_ref(&x));
    for r in [", remat=3", ", remat=\"sqrt\""] {
        let got = run(&program(r), "main", std::slice::from_ref(&x));
        for (g, w) in got.leaves().iter().zip(want.leaves()) {
            for (a, b) in g.to_f64_vec().iter().zip(w.to_f64_vec()) {
                assert!((a - b).abs() <= 1e-13 * (1.0 + b.abs()), "{r}: {a} vs {b}");
            }
        }
    }
    for (bad, found) in [("\"often\"", "\"often\""), ("0", "found 0"), ("1.5", "found")] {
        let src = format!("def main() -> f64 = fori(3, fn (i, y) -> y * 2.0, 1.0, remat={bad})\n");
        let (msg, _, _) = error(&src);
        assert!(
            msg.contains("`remat` must be \"off\", \"sqrt\" or an integer >= 1, found") && msg.contains(found),
            "{bad}: {msg}"
        );
    }
}

#[test]
fn activations_tests_and_tiling_builtins_compute_numpys_values() {
    let out = leaves(
        "def main() = (elu([-2.0, 0.0, 3.0], alpha=0.5), leaky_relu([-2.0, 0.0, 3.0], negative_slope=0.1),\n\
         isnan([1.0, 0.0 / 0.0]), isinf([-1.0 / 0.0, 1.0]), isfinite([1.0 / 0.0, 2.0]),\n\
         tile([[1, 2], [3, 4]], (1, 2)), tile([5], (2, 1, 2)), repeat([1.0, 2.0, 3.0], 2), repeat([[1, 2], [3, 4]], 3, axis=0),\n\
         ndim(zeros((2, 3, 4))), shape(zeros((2, 3, 4))))\n",
    );
    let f = |t: &Tensor| t.to_f64_vec();
    let e = |x: f64| if x > 0.0 { x } else { 0.5 * x.exp_m1() };
    let want_elu: Vec<f64> = [-2.0f64, 0.0, 3.0].iter().map(|&x| e(x) as f32 as f64).collect();
    assert_eq!(f(&out[0]), want_elu);
    assert_eq!(f(&out[1]), [-0.2f32 as f64, 0.0, 3.0]);
    assert_eq!(f(&out[2]), [0.0, 1.0]);
    assert_eq!(f(&out[3]), [1.0, 0.0]);
    assert_eq!(f(&out[4]), [0.0, 1.0]);
    assert_eq!((out[5].shape(), f(&out[5])), (&[2usize, 4][..], vec![1.0, 2.0, 1.0, 2.0, 3.0, 4.0, 3.0, 4.0]));
    assert_eq!((out[6].shape(), f(&out[6])), (&[2usize, 1, 2][..], vec![5.0; 4]));
    assert_eq!(f(&out[7]), [1.0, 1.0, 2.0, 2.0, 3.0, 3.0]);
    assert_eq!((out[8].shape(), out[8].dtype()), (&[6usize, 2][..], DType::I32));
    assert_eq!(f(&out[8]), [1.0, 2.0, 1.0, 2.0, 1.0, 2.0, 3.0, 4.0, 3.0, 4.0, 3.0, 4.0]);
    assert_eq!(f(&out[9]), [3.0]);
    assert_eq!([f(&out[10]), f(&out[11]), f(&out[12])], [[2.0], [3.0], [4.0]]);
}

#[test]
fn elu_and_leaky_relu_derivatives_match_differences() {
    // f64 gradients of sum(w * act(x)) against central differences, away
    // from the kink; at the kink, JAX's conventions (elu: alpha, leaky: 1);
    // and a huge positive input keeps a finite elu gradient.
    let src = "def e(x: tensor[5, f64]) -> f64 = sum(elu(x, alpha=0.7) * [1.0, -2.0, 0.5, 3.0, 1.5])\n\
               def k(x: tensor[5, f64]) -> f64 = sum(leaky_relu(x, negative_slope=0.3) * [1.0, -2.0, 0.5, 3.0, 1.5])\n\
               def main(x: tensor[5, f64]) = (grad(e)(x), grad(k)(x), e(x), k(x))\n";
    let m = module(src);
    let x0 = [-1.3f64, -0.2, 0.4, 2.0, -3.0];
    let at = |x: &[f64]| -> Vec<Tensor> {
        let t = Tensor::from_vec(vec![5], x.to_vec()).unwrap();
        m.run("main", &[t]).unwrap().leaves().into_iter().cloned().collect()
    };
    let base = at(&x0);
    for (which, value) in [(0usize, 2usize), (1, 3)] {
        let g = base[which].to_f64_vec();
        for i in 0..5 {
            let h = 1e-6;
            let (mut p, mut q) = (x0, x0);
            p[i] += h;
            q[i] -= h;
            let fd = (at(&p)[value].to_f64_vec()[0] - at(&q)[value].to_f64_vec()[0]) / (2.0 * h);
            assert!((g[i] - fd).abs() <= 1e-7 * (1.0 + fd.abs()), "{which} {i}: {} vs {fd}", g[i]);
        }
    }
    let kink = leaves("def main() = (grad(fn (x) -> elu(x, alpha=0.7))(0.0), grad(fn (x) -> leaky_relu(x))(0.0), grad(fn (x) -> elu(x))(1000.0))\n");
    assert_eq!(kink.iter().map(|t| t.to_f64_vec()[0]).collect::<Vec<_>>(), [0.7f32 as f64, 1.0, 1.0]);
}

#[test]
fn shape_builtins_reject_what_numpy_rejects() {
    let (msg, _, _) = error("def f(x: tensor[2, i32]) = elu(x)\ndef main() = f([1, 2])\n");
    assert!(msg.contains("`elu` needs a floating-point value, found i32[2]"), "{msg}");
    let (msg, _, _) = error("def main() = repeat([1, 2], -1)\n");
    assert!(msg.contains("`repeats` must be an integer >= 0, found -1"), "{msg}");
    let (msg, _, _) = error("def main() = tile([1, 2], (2, -1))\n");
    assert!(msg.contains("`tile`") && msg.contains("negative"), "{msg}");
    let (msg, _, _) = error("def main() = repeat([1, 2], 2, axis=1)\n");
    assert!(msg.contains("`repeat`"), "{msg}");
}

#[test]
fn dot_t_newaxis_and_named_constants() {
    let out = leaves(
        "def main() {\n\
           let m = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]\n\
           (m.T, m[:, none], m[none, 1, none], m[1:, none, 0:2], pi, inf, nan, cast(pi, f64))\n\
         }\n",
    );
    assert_eq!((out[0].shape(), out[0].to_f64_vec()), (&[3usize, 2][..], vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]));
    assert_eq!((out[1].shape(), out[1].to_f64_vec()), (&[2usize, 1, 3][..], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]));
    assert_eq!((out[2].shape(), out[2].to_f64_vec()), (&[1usize, 1, 3][..], vec![4.0, 5.0, 6.0]));
    assert_eq!((out[3].shape(), out[3].to_f64_vec()), (&[1usize, 1, 2][..], vec![4.0, 5.0]));
    assert_eq!(out[4].to_f64_vec(), [std::f32::consts::PI as f64]);
    assert_eq!(out[5].to_f64_vec(), [f64::INFINITY]);
    assert!(out[6].to_f64_vec()[0].is_nan());
    assert_eq!((out[7].dtype(), out[7].to_f64_vec()), (DType::F64, vec![std::f64::consts::PI]));
    // A local shadows a constant; `none` still counts only as an index.
    let out = leaves("def main() {\n  let pi = 3\n  (pi, [1, 2][none, :])\n}\n");
    assert_eq!((out[0].dtype(), out[0].to_f64_vec()), (DType::I32, vec![3.0]));
    assert_eq!(out[1].shape(), &[1usize, 2]);
    let (msg, _, _) = error("def main() = [1.0, 2.0][none, 0, 1]\n");
    assert!(msg.contains("too many indices: 2 given for a value of type f32[2]"), "{msg}");
}

#[test]
fn randint_and_categorical_draw_their_distributions() {
    let out = leaves(
        "def main() {\n\
           let r = randint(key(7), (40000,), -3, 5)\n\
           let c = categorical(key(8), log([[0.5, 0.25, 0.125, 0.125]]) + zeros((40000, 4)))\n\
           (r, c, categorical(key(9), [[0.0, -inf], [-inf, 0.0]] + zeros((500, 2, 2)), axis=2), randint(key(7), (40000,), -3, 5, dtype=i64))\n\
         }\n",
    );
    // randint: every value of [-3, 5) about equally often, nothing outside.
    let r = out[0].to_f64_vec();
    assert_eq!(out[0].dtype(), DType::I32);
    let mut counts = [0usize; 8];
    for v in &r {
        assert!((-3.0..5.0).contains(v), "{v}");
        counts[(*v + 3.0) as usize] += 1;
    }
    for c in counts {
        assert!((c as f64 - 5000.0).abs() < 300.0, "{counts:?}");
    }
    // The same bits give the same numbers in i64.
    assert_eq!(out[3].dtype(), DType::I64);
    assert_eq!(out[3].to_f64_vec(), r);
    // categorical: frequencies match softmax(logits) within 5 standard errors.
    let c = out[1].to_f64_vec();
    assert_eq!(out[1].shape(), &[40000usize]);
    for (k, p) in [0.5, 0.25, 0.125, 0.125].iter().enumerate() {
        let f = c.iter().filter(|&&v| v == k as f64).count() as f64 / c.len() as f64;
        assert!((f - p).abs() < 5.0 * (p * (1.0 - p) / 40000.0f64).sqrt(), "class {k}: {f} vs {p}");
    }
    // A -inf logit is never drawn.
    assert_eq!(out[2].shape(), &[500usize, 2]);
    assert!(out[2].to_f64_vec().chunks(2).all(|p| p == [0.0, 1.0]));
    for (src, want) in [
        ("def main() = randint(key(0), (3,), 5, 5)\n", "need lo < hi"),
        ("def main() = randint(key(0), (3,), 0, 4294967297, dtype=i64)\n", "hi - lo < 2^32"),
        ("def main() = randint(key(0), (3,), 0, 3000000000)\n", "within i32"),
        ("def main() = randint(key(0), (3,), 0, 3, dtype=f32)\n", "dtype must be i32 or i64"),
        ("def main() = categorical(key(0), [1.0, 2.0], axis=1)\n", "axis"),
    ] {
        let (msg, _, _) = error(src);
        assert!(msg.contains(want), "{src}: {msg}");
    }
}

#[test]
fn network_builtins_match_pytorch_semantics() {
    let out = leaves(
        "def main() {\n\
           let x = reshape(arange(0.0, 16.0), (1, 1, 4, 4))\n\
           let (y, m, v) = batch_norm(reshape(arange(0.0, 8.0), (2, 2, 2)), gamma=[1.0, 2.0], beta=[0.0, 1.0])\n\
           (max_pool2d(x, 2, stride=2, padding=1), avg_pool2d(x, 3, stride=1, padding=1), y, m, v,\n\
            group_norm(reshape(arange(0.0, 8.0), (1, 4, 2)), 2, gamma=[1.0, 1.0, 2.0, 2.0]),\n\
            conv_transpose2d([[[[1.0, 2.0], [3.0, 4.0]]]], [[[[1.0, 10.0], [100.0, 1000.0]]]], stride=2),\n\
            dropout(key(0), ones(10000), 0.25), dropout(key(0), ones(3), 0.25, training=false))\n\
         }\n",
    );
    let v = |t: &Tensor| t.to_f64_vec();
    // Max pooling: padding never wins.
    assert_eq!(v(&out[0]), [0.0, 2.0, 3.0, 8.0, 10.0, 11.0, 12.0, 14.0, 15.0]);
    // Average pooling counts the padding as zeros in the divisor k^2.
    let avg = v(&out[1]);
    assert_eq!(out[1].shape(), &[1usize, 1, 4, 4]);
    assert!((avg[0] - 10.0 / 9.0).abs() < 1e-6 && (avg[5] - 45.0 / 9.0).abs() < 1e-6, "{avg:?}");
    // Batch norm: per channel over (N, positions), biased variance, then the affine.
    assert_eq!((v(&out[3]), v(&out[4])), (vec![2.5, 4.5], vec![4.25, 4.25]));
    let y = v(&out[2]);
    let want = |x: f64, c: usize| (x - [2.5, 4.5][c]) / (4.25f64 + 1e-5).sqrt() * [1.0, 2.0][c] + [0.0, 1.0][c];
    for (i, got) in y.iter().enumerate() {
        let (c, x) = ((i / 2) % 2, i as f64);
        assert!((got - want(x, c)).abs() < 1e-5, "{i}: {got} vs {}", want(x, c));
    }
    // Group norm: groups of two channels, per-channel gamma.
    let g = v(&out[5]);
    let z = |x: f64, mean: f64| (x - mean) / (1.25f64 + 1e-5).sqrt();
    let want: Vec<f64> =
        (0..8).map(|i| z(i as f64, if i < 4 { 1.5 } else { 5.5 }) * if i < 4 { 1.0 } else { 2.0 }).collect();
    for (a, b) in g.iter().zip(&want) {
        assert!((a - b).abs() < 1e-5, "{g:?} vs {want:?}");
    }
    // Transposed convolution with stride 2: each input pixel stamps the kernel.
    assert_eq!(out[6].shape(), &[1usize, 1, 4, 4]);
    assert_eq!(
        v(&out[6]),
        [1.0, 10.0, 2.0, 20.0, 100.0, 1000.0, 200.0, 2000.0, 3.0, 30.0, 4.0, 40.0, 300.0, 3000.0, 400.0, 4000.0]
    );
    // Dropout keeps about 75%, scaled by 4/3; evaluation is the identity.
    let d = v(&out[7]);
    let kept = d.iter().filter(|&&x| x != 0.0).count() as f64 / d.len() as f64;
    assert!((kept - 0.75).abs() < 0.02 && d.iter().all(|&x| x == 0.0 || (x - 4.0 / 3.0).abs() < 1e-6), "{kept}");
    assert_eq!(v(&out[8]), [1.0, 1.0, 1.0]);
    let (msg, _, _) = error("def main() = group_norm(ones((1, 3, 2)), 2)\n");
    assert!(msg.contains("num_groups = 2 must divide the 3 channels"), "{msg}");
}

#[test]
fn attention_builtins_match_a_hand_softmax() {
    let out = leaves(
        "def main() {\n\
           let q = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]\n\
           let v = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]\n\
           let x = reshape(arange(0.0, 12.0) / 12.0, (1, 3, 4))\n\
           (attention(q, q, v), attention(q, q, v, causal=true), attention(q, q, v, mask=[true, false, true], scale=1.0),\n\
            multi_head_attention(x, x, x, eye(4), eye(4), eye(4), eye(4), heads=1), attention(x, x, x))\n\
         }\n",
    );
    let q = [[1.0f64, 0.0], [0.0, 1.0], [1.0, 1.0]];
    let v = [[1.0f64, 2.0], [3.0, 4.0], [5.0, 6.0]];
    let attend = |i: usize, allowed: &dyn Fn(usize) -> bool, scale: f64| -> [f64; 2] {
        let s: Vec<f64> = (0..3)
            .map(|j| if allowed(j) { (q[i][0] * q[j][0] + q[i][1] * q[j][1]) * scale } else { f64::NEG_INFINITY })
            .collect();
        let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let w: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
        let z: f64 = w.iter().sum();
        [0, 1].map(|c| (0..3).map(|j| w[j] / z * v[j][c]).sum())
    };
    let check = |got: &Tensor, want: Vec<f64>| {
        for (g, w) in got.to_f64_vec().iter().zip(&want) {
            assert!((g - w).abs() < 1e-5, "{:?} vs {want:?}", got.to_f64_vec());
        }
    };
    let s = 1.0 / 2f64.sqrt();
    check(&out[0], (0..3).flat_map(|i| attend(i, &|_| true, s)).collect());
    check(&out[1], (0..3).flat_map(|i| attend(i, &|j| j <= i, s)).collect());
    check(&out[2], (0..3).flat_map(|i| attend(i, &|j| j != 1, 1.0)).collect());
    // One head with identity projections is plain attention.
    assert_eq!(out[3].shape(), &[1usize, 3, 4]);
    check(&out[3], out[4].to_f64_vec());
    let (msg, _, _) = error("def main() = multi_head_attention(ones((1, 2, 4)), ones((1, 2, 4)), ones((1, 2, 4)), eye(4), eye(4), eye(4), eye(4), heads=3)\n");
    assert!(msg.contains("multi_head_attention"), "{msg}");
}
