//! Operations on traced tensors. Each function emits through the `graft`
//! tracing API (`Tr` methods, `graft::ops`, `graft::random`), which forwards
//! to `graft_core::composite`: no primitive or rule is defined here.

use crate::convert::{parse_dtype, to_tensor};
use crate::{take_pending, Handle};
use graft::ops::Remat;
use graft::{ops, random, Tr};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyList;

type H<'a> = PyRef<'a, Handle>;

fn unknown(kind: &str, op: &str) -> PyErr {
    PyValueError::new_err(format!("graft has no {kind} operation `{op}`"))
}

fn trs(xs: &[H<'_>]) -> Vec<Tr> {
    xs.iter().map(|h| h.tr.clone()).collect()
}

/// An elementwise (or whole-tensor) function of one tensor.
#[pyfunction]
fn unary(op: &str, x: H<'_>) -> PyResult<Handle> {
    let x = &x.tr;
    let t = match op {
        "neg" => -x,
        "abs" => x.abs(),
        "sign" => x.sign(),
        "exp" => x.exp(),
        "expm1" => x.expm1(),
        "log" => x.log(),
        "log1p" => x.log1p(),
        "sqrt" => x.sqrt(),
        "rsqrt" => x.rsqrt(),
        "sin" => x.sin(),
        "cos" => x.cos(),
        "tan" => x.tan(),
        "tanh" => x.tanh(),
        "sigmoid" => x.sigmoid(),
        "erf" => x.erf(),
        "erf_inv" => x.lift(graft_core::composite::math::erf_inv),
        "floor" => x.floor(),
        "ceil" => x.ceil(),
        "round" => x.round(),
        "logical_not" => x.logical_not(),
        "relu" => x.relu(),
        "silu" => x.silu(),
        "gelu" => x.gelu(),
        "gelu_approx" => x.gelu_approx(),
        "softplus" => x.softplus(),
        "log_sigmoid" => x.log_sigmoid(),
        "square" => x.square(),
        "reciprocal" => x.reciprocal(),
        "isnan" => x.isnan(),
        "isinf" => x.isinf(),
        "isfinite" => x.isfinite(),
        "stop_gradient" => x.stop_gradient(),
        "flatten" => x.flatten(),
        "zeros_like" => x.zeros_like(),
        "ones_like" => x.ones_like(),
        _ => return Err(unknown("unary", op)),
    };
    Handle::checked(t)
}

/// A broadcasting function of two tensors of one trace.
#[pyfunction]
fn binary(op: &str, x: H<'_>, y: H<'_>) -> PyResult<Handle> {
    let (x, y) = (&x.tr, &y.tr);
    let t = match op {
        "add" => x + y,
        "sub" => x - y,
        "mul" => x * y,
        "div" => x / y,
        "rem" => x % y,
        "pow" => x.pow(y),
        "maximum" => x.maximum(y),
        "minimum" => x.minimum(y),
        "atan2" => x.atan2(y),
        "lt" => x.lt(y),
        "le" => x.le(y),
        "gt" => x.gt(y),
        "ge" => x.ge(y),
        "eq" => x.equal(y),
        "ne" => x.not_equal(y),
        "matmul" => x.matmul(y),
        _ => return Err(unknown("binary", op)),
    };
    Handle::checked(t)
}

/// A rank-0 constant of `x`'s dtype in `x`'s trace.
#[pyfunction]
fn scalar_like(x: H<'_>, value: f64) -> PyResult<Handle> {
    Handle::checked(x.tr.scalar_like(value))
}

/// A NumPy array as a constant in `ctx`'s trace.
#[pyfunction]
fn constant(ctx: H<'_>, value: &Bound<'_, PyAny>) -> PyResult<Handle> {
    let t = to_tensor(value, "constant")?;
    Handle::checked(ctx.tr.constant(t))
}

/// `value` everywhere, of `shape` and `dtype`, in `ctx`'s trace.
#[pyfunction]
fn full(ctx: H<'_>, shape: Vec<usize>, value: f64, dtype: &str) -> PyResult<Handle> {
    Handle::checked(ctx.tr.full(&shape, value, parse_dtype(dtype)?))
}

/// `np.arange(start, stop, step)` in `ctx`'s trace.
#[pyfunction]
fn arange(ctx: H<'_>, start: f64, stop: f64, step: f64, dtype: &str) -> PyResult<Handle> {
    Handle::checked(ctx.tr.arange(start, stop, step, parse_dtype(dtype)?))
}

/// `np.linspace(start, stop, num, endpoint)` in `ctx`'s trace.
#[pyfunction]
fn linspace(ctx: H<'_>, start: f64, stop: f64, num: usize, endpoint: bool, dtype: &str) -> PyResult<Handle> {
    Handle::checked(ctx.tr.linspace(start, stop, num, endpoint, parse_dtype(dtype)?))
}

fn axes(a: Option<Vec<isize>>) -> graft::Axes {
    a.map_or(graft::Axes::All, graft::Axes::List)
}

/// A reduction over `axes` (`None`: all).
#[pyfunction]
#[pyo3(signature = (op, x, axes=None, keepdims=false, ddof=0))]
fn reduce(op: &str, x: H<'_>, axes: Option<Vec<isize>>, keepdims: bool, ddof: usize) -> PyResult<Handle> {
    let a = self::axes(axes);
    let x = &x.tr;
    let t = match (op, keepdims) {
        ("sum", false) => x.sum(a),
        ("sum", true) => x.sum_keepdims(a),
        ("mean", false) => x.mean(a),
        ("mean", true) => x.mean_keepdims(a),
        ("max", false) => x.max(a),
        ("max", true) => x.max_keepdims(a),
        ("min", false) => x.min(a),
        ("min", true) => x.min_keepdims(a),
        ("prod", false) => x.prod(a),
        ("prod", true) => x.prod_keepdims(a),
        ("logsumexp", false) => x.logsumexp(a),
        ("logsumexp", true) => x.logsumexp_keepdims(a),
        ("var", false) => x.var(a, ddof),
        ("var", true) => x.var_keepdims(a, ddof),
        ("std", false) => x.std(a, ddof),
        ("std", true) => x.var_keepdims(a, ddof).sqrt(),
        _ => return Err(unknown("reduction", op)),
    };
    Handle::checked(t)
}

/// `argmax`/`argmin` along one axis (int32 indices).
#[pyfunction]
fn argreduce(op: &str, x: H<'_>, axis: isize, keepdims: bool) -> PyResult<Handle> {
    let x = &x.tr;
    let t = match (op, keepdims) {
        ("argmax", false) => x.argmax(axis),
        ("argmax", true) => x.argmax_keepdims(axis),
        ("argmin", false) => x.argmin(axis),
        ("argmin", true) => x.argmin_keepdims(axis),
        _ => return Err(unknown("index reduction", op)),
    };
    Handle::checked(t)
}

/// `softmax`/`log_softmax` along one axis.
#[pyfunction]
fn softmax(op: &str, x: H<'_>, axis: isize) -> PyResult<Handle> {
    let t = match op {
        "softmax" => x.tr.softmax(axis),
        "log_softmax" => x.tr.log_softmax(axis),
        _ => return Err(unknown("softmax", op)),
    };
    Handle::checked(t)
}

#[pyfunction]
fn reshape(x: H<'_>, shape: Vec<isize>) -> PyResult<Handle> {
    Handle::checked(x.tr.reshape(&shape))
}

#[pyfunction]
#[pyo3(signature = (x, perm=None))]
fn transpose(x: H<'_>, perm: Option<Vec<usize>>) -> PyResult<Handle> {
    Handle::checked(x.tr.transpose(perm.as_deref()))
}

#[pyfunction]
fn expand_dims(x: H<'_>, axis: isize) -> PyResult<Handle> {
    Handle::checked(x.tr.expand_dims(axis))
}

#[pyfunction]
#[pyo3(signature = (x, axes=None))]
fn squeeze(x: H<'_>, axes: Option<Vec<isize>>) -> PyResult<Handle> {
    Handle::checked(x.tr.squeeze(self::axes(axes)))
}

#[pyfunction]
fn broadcast_to(x: H<'_>, shape: Vec<usize>) -> PyResult<Handle> {
    Handle::checked(x.tr.broadcast_to(&shape))
}

/// `x[..., start:stop:step, ...]` on one axis, Python semantics.
#[pyfunction]
#[pyo3(signature = (x, axis, start=None, stop=None, step=1))]
fn slice_axis(x: H<'_>, axis: isize, start: Option<isize>, stop: Option<isize>, step: isize) -> PyResult<Handle> {
    if step == 0 {
        return Err(PyValueError::new_err("slice step cannot be zero"));
    }
    Handle::checked(x.tr.slice_axis(axis, start, stop, step))
}

/// `np.take(x, indices, axis, mode='clip')`.
#[pyfunction]
fn take(x: H<'_>, indices: H<'_>, axis: isize) -> PyResult<Handle> {
    Handle::checked(x.tr.take(&indices.tr, axis))
}

/// `x` (rank 1) with `updates[i...]` added at position `positions[i...]`
/// (integers of `updates`' shape); a position outside `x` drops its update
/// (`scatter_add` in fill mode; repeated positions accumulate in order).
#[pyfunction]
fn scatter_add(x: H<'_>, positions: H<'_>, updates: H<'_>) -> PyResult<Handle> {
    Handle::checked(x.tr.lift_with(&[&positions.tr, &updates.tr], |b, v| {
        let mut shape = b.ty(v[1])?.shape.to_vec();
        shape.push(1);
        let idx = b.reshape(v[1], &shape)?;
        b.scatter_add(v[0], idx, v[2], 0, &[0], graft_core::ops::index::IndexMode::Fill)
    }))
}

#[pyfunction]
fn concat(xs: Vec<H<'_>>, axis: isize) -> PyResult<Handle> {
    let v = trs(&xs);
    let r: Vec<&Tr> = v.iter().collect();
    if r.is_empty() {
        return Err(PyValueError::new_err("concatenate needs at least one array"));
    }
    Handle::checked(ops::concat(&r, axis))
}

#[pyfunction]
fn stack(xs: Vec<H<'_>>, axis: isize) -> PyResult<Handle> {
    let v = trs(&xs);
    let r: Vec<&Tr> = v.iter().collect();
    if r.is_empty() {
        return Err(PyValueError::new_err("stack needs at least one array"));
    }
    Handle::checked(ops::stack(&r, axis))
}

#[pyfunction]
fn where_(c: H<'_>, a: H<'_>, b: H<'_>) -> PyResult<Handle> {
    Handle::checked(ops::where_(&c.tr, &a.tr, &b.tr))
}

#[pyfunction]
fn tile(x: H<'_>, reps: Vec<usize>) -> PyResult<Handle> {
    Handle::checked(x.tr.tile(&reps))
}

#[pyfunction]
#[pyo3(signature = (x, repeats, axis=None))]
fn repeat(x: H<'_>, repeats: usize, axis: Option<isize>) -> PyResult<Handle> {
    Handle::checked(x.tr.repeat(repeats, axis))
}

#[pyfunction]
fn swapaxes(x: H<'_>, a1: isize, a2: isize) -> PyResult<Handle> {
    Handle::checked(x.tr.swapaxes(a1, a2))
}

#[pyfunction]
fn convert(x: H<'_>, dtype: &str) -> PyResult<Handle> {
    Handle::checked(x.tr.convert(parse_dtype(dtype)?))
}

/// `np.clip` with tensor bounds (broadcasting).
#[pyfunction]
fn clip(x: H<'_>, lo: H<'_>, hi: H<'_>) -> PyResult<Handle> {
    Handle::checked(x.tr.clip(&lo.tr, &hi.tr))
}

#[pyfunction]
fn leaky_relu(x: H<'_>, negative_slope: f64) -> PyResult<Handle> {
    Handle::checked(x.tr.leaky_relu(negative_slope))
}

#[pyfunction]
fn elu(x: H<'_>, alpha: f64) -> PyResult<Handle> {
    Handle::checked(x.tr.elu(alpha))
}

#[pyfunction]
fn einsum(spec: &str, xs: Vec<H<'_>>) -> PyResult<Handle> {
    let v = trs(&xs);
    let r: Vec<&Tr> = v.iter().collect();
    if r.is_empty() {
        return Err(PyValueError::new_err("einsum needs at least one operand"));
    }
    Handle::checked(ops::einsum(spec, &r))
}

// ---- linear algebra and sorting (graft_core::composite::{decomp, sort}) ----

/// `jnp.linalg` functions of one matrix (batched over leading axes):
/// `cholesky`, `inv`, `det`, `trace`, `diag` (vector -> diagonal matrix).
#[pyfunction]
fn linalg(op: &str, x: H<'_>) -> PyResult<Handle> {
    use graft_core::composite::decomp;
    let f = match op {
        "cholesky" => decomp::cholesky,
        "inv" => decomp::inv,
        "det" => decomp::det,
        "trace" => decomp::trace,
        "diag" => decomp::diag,
        _ => return Err(unknown("linear-algebra", op)),
    };
    Handle::checked(x.tr.lift(f))
}

/// `jnp.linalg.solve(a, b)`.
#[pyfunction]
fn solve(a: H<'_>, b: H<'_>) -> PyResult<Handle> {
    Handle::checked(a.tr.lift2(&b.tr, graft_core::composite::decomp::solve))
}

/// `sort`/`argsort` (int32 indices) along one axis.
#[pyfunction]
fn sort(op: &str, x: H<'_>, axis: isize) -> PyResult<Handle> {
    use graft_core::composite::sort;
    let f = match op {
        "sort" => sort::sort,
        "argsort" => sort::argsort,
        _ => return Err(unknown("sorting", op)),
    };
    Handle::checked(x.tr.lift(|b, v| {
        let a = graft::Axes::resolve_axis(op, axis, b.ty(v)?.rank())?;
        f(b, v, a)
    }))
}

/// Cumulative `cumsum`/`cumprod`/`cummax`/`cummin` along one axis
/// (`reverse`: from the end).
#[pyfunction]
fn cumulative(op: &str, x: H<'_>, axis: isize, reverse: bool) -> PyResult<Handle> {
    use graft_core::ops::cumulative::CumKind;
    let kind = match op {
        "cumsum" => CumKind::Sum,
        "cumprod" => CumKind::Prod,
        "cummax" => CumKind::Max,
        "cummin" => CumKind::Min,
        _ => return Err(unknown("cumulative", op)),
    };
    Handle::checked(x.tr.lift(|b, v| {
        let a = graft::Axes::resolve_axis(op, axis, b.ty(v)?.rank())?;
        b.cumulative(kind, v, a, reverse)
    }))
}

// ---- random numbers (explicit keys, Threefry as in jax.random) ----

#[pyfunction]
fn random_key_from(seed: H<'_>) -> PyResult<Handle> {
    Handle::checked(random::key_from(&seed.tr))
}

#[pyfunction]
fn random_split(key: H<'_>, n: usize) -> PyResult<Handle> {
    Handle::checked(random::split_array(&key.tr, n))
}

#[pyfunction]
fn random_uniform(key: H<'_>, shape: Vec<usize>, dtype: &str, lo: f64, hi: f64) -> PyResult<Handle> {
    Handle::checked(random::uniform(&key.tr, &shape, parse_dtype(dtype)?, lo, hi))
}

#[pyfunction]
fn random_normal(key: H<'_>, shape: Vec<usize>, dtype: &str) -> PyResult<Handle> {
    Handle::checked(random::normal(&key.tr, &shape, parse_dtype(dtype)?))
}

#[pyfunction]
fn random_bernoulli(key: H<'_>, p: f64, shape: Vec<usize>) -> PyResult<Handle> {
    Handle::checked(random::bernoulli(&key.tr, p, &shape))
}

#[pyfunction]
fn random_randint(key: H<'_>, shape: Vec<usize>, lo: i64, hi: i64, dtype: &str) -> PyResult<Handle> {
    Handle::checked(random::randint(&key.tr, &shape, lo, hi, parse_dtype(dtype)?))
}

// ---- collectives over a named axis (graft::ops::psum and friends) ----

/// A collective over the axis `name` of `size` ranks: `psum`, `pmean`,
/// `pmax`, `pmin`, `all_gather` (new axis at `dim`), `psum_scatter` (the
/// axis `dim` has one entry per rank) or `ppermute` (`perm`: `(src, dst)`
/// pairs). The Python side checks that a vmap binds the name.
#[pyfunction]
#[pyo3(signature = (op, x, name, size, dim=0, perm=None))]
fn collective(
    op: &str,
    x: H<'_>,
    name: &str,
    size: usize,
    dim: usize,
    perm: Option<Vec<(usize, usize)>>,
) -> PyResult<Handle> {
    let axis = ops::Axis::new(name, size);
    let x = &x.tr;
    let t = match op {
        "psum" => ops::psum(x, &axis),
        "pmean" => ops::pmean(x, &axis),
        "pmax" => ops::pmax(x, &axis),
        "pmin" => ops::pmin(x, &axis),
        "all_gather" => ops::all_gather(x, &axis, dim),
        "psum_scatter" => ops::reduce_scatter(x, &axis, dim),
        "ppermute" => ops::ppermute(x, &axis, &perm.unwrap_or_default()),
        _ => return Err(unknown("collective", op)),
    };
    Handle::checked(t)
}

/// This rank's index on the axis `name` of `size` ranks (an int32 scalar),
/// emitted into `ctx`'s trace.
#[pyfunction]
fn axis_index(ctx: H<'_>, name: &str, size: usize) -> PyResult<Handle> {
    Handle::checked(ops::axis_index(&ctx.tr, &ops::Axis::new(name, size)))
}

// ---- structured control flow: bodies are Python callables over handles ----

/// Calls a Python body on fresh handles; returns the handles it returns.
/// A Python exception is kept (re-raised when control is back in Python)
/// and poisons the body's trace.
pub(crate) fn call_body(f: &Bound<'_, PyAny>, args: &[Tr]) -> Vec<Tr> {
    let py = f.py();
    let run = || -> PyResult<Vec<Tr>> {
        let hs: Vec<Py<Handle>> =
            args.iter().map(|t| Py::new(py, Handle { tr: t.clone() })).collect::<PyResult<_>>()?;
        let out = f.call1((PyList::new(py, hs)?,))?;
        let mut v = Vec::new();
        for o in out.try_iter()? {
            let o = o?;
            let h = o.downcast::<Handle>().map_err(|_| {
                pyo3::exceptions::PyTypeError::new_err(format!(
                    "a traced function returned a {}, not a traced array",
                    o.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into())
                ))
            })?;
            v.push(h.borrow().tr.clone());
        }
        Ok(v)
    };
    match run() {
        Ok(v) => v,
        Err(e) => {
            crate::stash(e);
            poison(args)
        }
    }
}

/// A failed handle in `args`' trace (the trace reports the Python error).
pub(crate) fn poison(args: &[Tr]) -> Vec<Tr> {
    match args.first() {
        Some(x) => {
            vec![x.lift(|_, _| Err(graft::IrError::invalid("python", "the traced Python function raised an exception")))]
        }
        None => Vec::new(),
    }
}

fn handles(v: Vec<Tr>) -> PyResult<Vec<Handle>> {
    if let Some(e) = take_pending() {
        return Err(e);
    }
    v.into_iter().map(Handle::checked).collect()
}

fn remat(every: Option<usize>) -> Remat {
    every.map_or(Remat::Off, Remat::Every)
}

/// `lax.scan` over flat leaves: `body(consts + carry + x) -> carry' + y`.
#[pyfunction]
#[pyo3(signature = (consts, init, xs, length, reverse, body, remat_every=None))]
fn scan(
    consts: Vec<H<'_>>,
    init: Vec<H<'_>>,
    xs: Vec<H<'_>>,
    length: usize,
    reverse: bool,
    body: &Bound<'_, PyAny>,
    remat_every: Option<usize>,
) -> PyResult<(Vec<Handle>, Vec<Handle>)> {
    let (c, i, x) = (trs(&consts), trs(&init), trs(&xs));
    if c.is_empty() && i.is_empty() && x.is_empty() {
        return Err(PyValueError::new_err("scan needs at least one carry or scanned array"));
    }
    let mut opts = ops::ScanOpts::new(length);
    opts.reverse = reverse;
    opts.remat = remat(remat_every);
    let (carry, ys) = ops::scan(&c, &i, &x, opts, |c, k, x| {
        let args: Vec<Tr> = c.iter().chain(k).chain(x).cloned().collect();
        let mut out = call_body(body, &args);
        let ys = out.split_off(k.len().min(out.len()));
        (out, ys)
    });
    Ok((handles(carry)?, handles(ys)?))
}

/// `fori_loop` with a static trip count: `body(consts + [i] + carry) -> carry'`.
#[pyfunction]
fn fori(n: usize, consts: Vec<H<'_>>, init: Vec<H<'_>>, body: &Bound<'_, PyAny>) -> PyResult<Vec<Handle>> {
    let (c, i) = (trs(&consts), trs(&init));
    if c.is_empty() && i.is_empty() {
        return Err(PyValueError::new_err("fori_loop needs at least one carry"));
    }
    let out = ops::fori(n, &c, &i, Remat::Off, |c, i, k| {
        let args: Vec<Tr> = c.iter().chain(std::iter::once(i)).chain(k).cloned().collect();
        call_body(body, &args)
    });
    handles(out)
}

/// `lax.while_loop`: `cond(consts + carry) -> bool[]`, `body(consts + carry) -> carry'`.
#[pyfunction]
fn while_loop(
    consts: Vec<H<'_>>,
    init: Vec<H<'_>>,
    cond: &Bound<'_, PyAny>,
    body: &Bound<'_, PyAny>,
) -> PyResult<Vec<Handle>> {
    let (c, i) = (trs(&consts), trs(&init));
    if i.is_empty() {
        return Err(PyValueError::new_err("while_loop needs at least one carry"));
    }
    let out = ops::while_loop(
        &c,
        &i,
        |c, k| {
            let args: Vec<Tr> = c.iter().chain(k).cloned().collect();
            let mut v = call_body(cond, &args);
            if v.len() == 1 {
                v.remove(0)
            } else {
                poison(&args).remove(0)
            }
        },
        |c, k| {
            let args: Vec<Tr> = c.iter().chain(k).cloned().collect();
            call_body(body, &args)
        },
    );
    handles(out)
}

/// `lax.cond`: `on_true(operands)` if `pred` else `on_false(operands)`.
#[pyfunction]
fn cond(
    pred: H<'_>,
    operands: Vec<H<'_>>,
    on_true: &Bound<'_, PyAny>,
    on_false: &Bound<'_, PyAny>,
) -> PyResult<Vec<Handle>> {
    let ops_ = trs(&operands);
    let out = ops::cond(&pred.tr, &ops_, |o| call_body(on_true, o), |o| call_body(on_false, o));
    handles(out)
}

/// `lax.switch`: `branches[clamp(index)](operands)`.
#[pyfunction]
fn switch(index: H<'_>, operands: Vec<H<'_>>, branches: Vec<Bound<'_, PyAny>>) -> PyResult<Vec<Handle>> {
    let ops_ = trs(&operands);
    let fs: Vec<Box<dyn Fn(&[Tr]) -> Vec<Tr> + '_>> =
        branches.iter().map(|b| Box::new(move |o: &[Tr]| call_body(b, o)) as Box<dyn Fn(&[Tr]) -> Vec<Tr>>).collect();
    let refs: Vec<&dyn Fn(&[Tr]) -> Vec<Tr>> = fs.iter().map(|f| f.as_ref()).collect();
    let out = ops::switch(&index.tr, &ops_, &refs);
    handles(out)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(unary, m)?)?;
    m.add_function(wrap_pyfunction!(binary, m)?)?;
    m.add_function(wrap_pyfunction!(scalar_like, m)?)?;
    m.add_function(wrap_pyfunction!(constant, m)?)?;
    m.add_function(wrap_pyfunction!(full, m)?)?;
    m.add_function(wrap_pyfunction!(arange, m)?)?;
    m.add_function(wrap_pyfunction!(linspace, m)?)?;
    m.add_function(wrap_pyfunction!(reduce, m)?)?;
    m.add_function(wrap_pyfunction!(argreduce, m)?)?;
    m.add_function(wrap_pyfunction!(softmax, m)?)?;
    m.add_function(wrap_pyfunction!(reshape, m)?)?;
    m.add_function(wrap_pyfunction!(transpose, m)?)?;
    m.add_function(wrap_pyfunction!(expand_dims, m)?)?;
    m.add_function(wrap_pyfunction!(squeeze, m)?)?;
    m.add_function(wrap_pyfunction!(broadcast_to, m)?)?;
    m.add_function(wrap_pyfunction!(slice_axis, m)?)?;
    m.add_function(wrap_pyfunction!(take, m)?)?;
    m.add_function(wrap_pyfunction!(scatter_add, m)?)?;
    m.add_function(wrap_pyfunction!(concat, m)?)?;
    m.add_function(wrap_pyfunction!(stack, m)?)?;
    m.add_function(wrap_pyfunction!(where_, m)?)?;
    m.add_function(wrap_pyfunction!(tile, m)?)?;
    m.add_function(wrap_pyfunction!(repeat, m)?)?;
    m.add_function(wrap_pyfunction!(swapaxes, m)?)?;
    m.add_function(wrap_pyfunction!(convert, m)?)?;
    m.add_function(wrap_pyfunction!(clip, m)?)?;
    m.add_function(wrap_pyfunction!(leaky_relu, m)?)?;
    m.add_function(wrap_pyfunction!(elu, m)?)?;
    m.add_function(wrap_pyfunction!(einsum, m)?)?;
    m.add_function(wrap_pyfunction!(linalg, m)?)?;
    m.add_function(wrap_pyfunction!(solve, m)?)?;
    m.add_function(wrap_pyfunction!(sort, m)?)?;
    m.add_function(wrap_pyfunction!(cumulative, m)?)?;
    m.add_function(wrap_pyfunction!(random_key_from, m)?)?;
    m.add_function(wrap_pyfunction!(random_split, m)?)?;
    m.add_function(wrap_pyfunction!(random_uniform, m)?)?;
    m.add_function(wrap_pyfunction!(random_normal, m)?)?;
    m.add_function(wrap_pyfunction!(random_bernoulli, m)?)?;
    m.add_function(wrap_pyfunction!(random_randint, m)?)?;
    m.add_function(wrap_pyfunction!(collective, m)?)?;
    m.add_function(wrap_pyfunction!(axis_index, m)?)?;
    m.add_function(wrap_pyfunction!(scan, m)?)?;
    m.add_function(wrap_pyfunction!(fori, m)?)?;
    m.add_function(wrap_pyfunction!(while_loop, m)?)?;
    m.add_function(wrap_pyfunction!(cond, m)?)?;
    m.add_function(wrap_pyfunction!(switch, m)?)?;
    Ok(())
}
