//! Tracing Rust closures into IR.
//!
//! A [`Tr`] is a handle to a value in a function being traced. Methods and
//! operators on it emit primitives (through the composite library, so
//! NumPy broadcasting and negative axes work). Errors never panic: the first
//! error poisons the trace, later operations become no-ops, and [`trace`]
//! returns that error. This keeps operator overloading (`&x * &y`), which
//! cannot return `Result`, free of panics on user mistakes.

use graft_core::composite::broadcast;
use graft_core::ops::binary::{Binary, Compare};
use graft_core::ops::unary::Unary;
use graft_core::{Builder, Func, IrError, TensorType, Value};
use std::cell::RefCell;
use std::ops;
use std::rc::{Rc, Weak};

#[derive(Debug)]
struct State {
    b: Builder,
    err: Option<IrError>,
}

/// A traced tensor: a handle into the function being built.
#[derive(Debug, Clone)]
pub struct Tr {
    st: Rc<RefCell<State>>,
    v: Option<Value>,
}

/// Which axes an axis-taking op works on: `()` or `None` for all axes, an
/// integer, or a list. Negative axes count from the end, like NumPy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Axes {
    /// Every axis.
    All,
    /// These axes (negative = from the end).
    List(Vec<isize>),
}

impl From<()> for Axes {
    fn from(_: ()) -> Axes {
        Axes::All
    }
}
impl From<Option<isize>> for Axes {
    fn from(a: Option<isize>) -> Axes {
        a.map_or(Axes::All, |a| Axes::List(vec![a]))
    }
}
impl From<isize> for Axes {
    fn from(a: isize) -> Axes {
        Axes::List(vec![a])
    }
}
impl From<i32> for Axes {
    fn from(a: i32) -> Axes {
        Axes::List(vec![a as isize])
    }
}
impl From<&[isize]> for Axes {
    fn from(a: &[isize]) -> Axes {
        Axes::List(a.to_vec())
    }
}
impl From<Vec<isize>> for Axes {
    fn from(a: Vec<isize>) -> Axes {
        Axes::List(a)
    }
}
impl<const N: usize> From<[isize; N]> for Axes {
    fn from(a: [isize; N]) -> Axes {
        Axes::List(a.to_vec())
    }
}
impl<const N: usize> From<[i32; N]> for Axes {
    fn from(a: [i32; N]) -> Axes {
        Axes::List(a.iter().map(|&x| x as isize).collect())
    }
}

impl Axes {
    /// Normalises one axis (negative = from the end) for a given rank.
    pub fn resolve_axis(op: &str, axis: isize, rank: usize) -> Result<usize, IrError> {
        Ok(Axes::List(vec![axis]).resolve(op, rank)?[0])
    }

    /// Normalises to sorted, unique, non-negative axes for a given rank.
    pub fn resolve(&self, op: &str, rank: usize) -> Result<Vec<usize>, IrError> {
        match self {
            Axes::All => Ok((0..rank).collect()),
            Axes::List(list) => {
                let mut out = Vec::with_capacity(list.len());
                for &a in list {
                    let r = rank as isize;
                    if a < -r || a >= r {
                        return Err(IrError::invalid(op, format!("axis {a} is out of range for rank {rank}")));
                    }
                    let a = if a < 0 { (a + r) as usize } else { a as usize };
                    if out.contains(&a) {
                        return Err(IrError::invalid(op, format!("axis {a} is repeated")));
                    }
                    out.push(a);
                }
                out.sort_unstable();
                Ok(out)
            }
        }
    }
}

/// What a traced closure may return: one tensor, a tuple, or a vector.
pub trait IntoOutputs {
    /// The traced output handles, in order.
    fn into_outputs(self) -> Vec<Tr>;
}
impl IntoOutputs for Tr {
    fn into_outputs(self) -> Vec<Tr> {
        vec![self]
    }
}
impl IntoOutputs for Vec<Tr> {
    fn into_outputs(self) -> Vec<Tr> {
        self
    }
}
impl IntoOutputs for (Tr, Tr) {
    fn into_outputs(self) -> Vec<Tr> {
        vec![self.0, self.1]
    }
}
impl IntoOutputs for (Tr, Tr, Tr) {
    fn into_outputs(self) -> Vec<Tr> {
        vec![self.0, self.1, self.2]
    }
}

thread_local! {
    /// The traces being recorded on this thread, innermost last. Only
    /// operations that receive no `Tr` at all (e.g. `concat(&[])`) need it:
    /// they record their error in the innermost trace instead of panicking.
    static ACTIVE: RefCell<Vec<Weak<RefCell<State>>>> = const { RefCell::new(Vec::new()) };
}

/// Pops this trace off [`ACTIVE`] when tracing ends, also on unwinding.
struct ActiveGuard;

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        ACTIVE.with(|a| a.borrow_mut().pop());
    }
}

/// A failed handle for an operation that was given no tensor: the error
/// poisons the innermost active trace, so [`trace`] returns it. Outside any
/// trace the handle belongs to a detached, already failed trace (returning
/// it from a closure is then reported as a foreign tensor).
pub(crate) fn fail_without_operand(err: IrError) -> Tr {
    let st = ACTIVE
        .with(|a| a.borrow().last().and_then(Weak::upgrade))
        .unwrap_or_else(|| Rc::new(RefCell::new(State { b: Builder::new("detached"), err: None })));
    {
        let mut s = st.borrow_mut();
        if s.err.is_none() {
            s.err = Some(err);
        }
    }
    Tr { st, v: None }
}

/// Traces `f` on parameters of the given types into a function.
pub fn trace<O: IntoOutputs>(name: &str, types: &[TensorType], f: impl Fn(&[Tr]) -> O) -> Result<Func, IrError> {
    let st = Rc::new(RefCell::new(State { b: Builder::new(name), err: None }));
    ACTIVE.with(|a| a.borrow_mut().push(Rc::downgrade(&st)));
    let _active = ActiveGuard;
    let args: Vec<Tr> = types
        .iter()
        .map(|t| {
            let v = st.borrow_mut().b.param(t.clone());
            Tr { st: st.clone(), v: Some(v) }
        })
        .collect();
    let outs = f(&args).into_outputs();
    drop(args);
    let mut values = Vec::with_capacity(outs.len());
    for o in &outs {
        if !Rc::ptr_eq(&o.st, &st) {
            return Err(IrError::invalid("trace", "a returned tensor belongs to another trace"));
        }
        if let Some(e) = st.borrow_mut().err.take() {
            return Err(e);
        }
        values.push(o.v.ok_or_else(|| IrError::invalid("trace", "internal error: poisoned value without an error"))?);
    }
    if let Some(e) = st.borrow_mut().err.take() {
        return Err(e);
    }
    drop(outs);
    let state = Rc::try_unwrap(st).map_err(|_| IrError::invalid("trace", "a traced tensor escaped the closure"))?;
    state.into_inner().b.finish(&values)
}

impl Tr {
    /// Applies a builder operation to this value, recording the first error.
    pub fn lift(&self, f: impl FnOnce(&mut Builder, Value) -> Result<Value, IrError>) -> Tr {
        let mut st = self.st.borrow_mut();
        let v = match self.v {
            Some(v) if st.err.is_none() => match f(&mut st.b, v) {
                Ok(out) => Some(out),
                Err(e) => {
                    st.err = Some(e);
                    None
                }
            },
            _ => None,
        };
        Tr { st: self.st.clone(), v }
    }

    /// Applies a builder operation to this value and another.
    pub fn lift2(&self, other: &Tr, f: impl FnOnce(&mut Builder, Value, Value) -> Result<Value, IrError>) -> Tr {
        if !Rc::ptr_eq(&self.st, &other.st) {
            let mut st = self.st.borrow_mut();
            if st.err.is_none() {
                st.err = Some(IrError::invalid("trace", "operands come from different traces"));
            }
            return Tr { st: self.st.clone(), v: None };
        }
        match other.v {
            Some(o) => self.lift(|b, v| f(b, v, o)),
            None => Tr { st: self.st.clone(), v: None },
        }
    }

    /// Applies a builder operation to a list of traced values (all from one trace).
    pub fn lift_n(xs: &[Tr], f: impl FnOnce(&mut Builder, &[Value]) -> Result<Value, IrError>) -> Option<Tr> {
        let first = xs.first()?;
        let mut vals = Vec::with_capacity(xs.len());
        for x in xs {
            match (Rc::ptr_eq(&x.st, &first.st), x.v) {
                (true, Some(v)) => vals.push(v),
                _ => {
                    return Some(first.lift(|_, _| {
                        Err(IrError::invalid("trace", "operands come from different traces or a failed op"))
                    }))
                }
            }
        }
        Some(first.lift(|b, _| f(b, &vals)))
    }

    /// Applies a builder operation with several results to this value and
    /// `others` (all from one trace). `f` receives `[self, others...]` and
    /// must return exactly `n_out` values; on any error the trace is
    /// poisoned and `n_out` failed handles are returned.
    pub fn lift_many(
        &self,
        others: &[&Tr],
        n_out: usize,
        f: impl FnOnce(&mut Builder, &[Value]) -> Result<Vec<Value>, IrError>,
    ) -> Vec<Tr> {
        let failed = |st: &Rc<RefCell<State>>| (0..n_out).map(|_| Tr { st: st.clone(), v: None }).collect();
        let mut st = self.st.borrow_mut();
        if st.err.is_some() {
            return failed(&self.st);
        }
        let mut vals = Vec::with_capacity(1 + others.len());
        for x in std::iter::once(self).chain(others.iter().copied()) {
            match (Rc::ptr_eq(&x.st, &self.st), x.v) {
                (true, Some(v)) => vals.push(v),
                (same, _) => {
                    st.err = Some(IrError::invalid(
                        "trace",
                        if same { "an operand comes from a failed op" } else { "operands come from different traces" },
                    ));
                    return failed(&self.st);
                }
            }
        }
        match f(&mut st.b, &vals) {
            Ok(outs) if outs.len() == n_out => {
                outs.into_iter().map(|v| Tr { st: self.st.clone(), v: Some(v) }).collect()
            }
            Ok(outs) => {
                st.err = Some(IrError::invalid(
                    "trace",
                    format!("internal error: an op promised {n_out} results and returned {}", outs.len()),
                ));
                failed(&self.st)
            }
            Err(e) => {
                st.err = Some(e);
                failed(&self.st)
            }
        }
    }

    /// Single-result form of [`Tr::lift_many`]: `f` gets `[self, others...]`.
    pub fn lift_with(&self, others: &[&Tr], f: impl FnOnce(&mut Builder, &[Value]) -> Result<Value, IrError>) -> Tr {
        self.lift_many(others, 1, |b, vals| Ok(vec![f(b, vals)?])).remove(0)
    }

    /// The error that failed this handle's trace, if it failed (a front end
    /// that must stop at the first error, such as the Python bindings,
    /// reads it right after the operation that failed).
    pub fn error(&self) -> Option<IrError> {
        self.st.borrow().err.clone()
    }

    /// An identity of the trace this handle belongs to, equal for every
    /// handle of one trace while it is being recorded (a front end uses it
    /// to notice a value captured from an enclosing trace).
    pub fn trace_id(&self) -> usize {
        Rc::as_ptr(&self.st) as usize
    }

    /// The IR value, or `None` if the trace already failed.
    pub fn value(&self) -> Option<Value> {
        self.v
    }

    /// The static type, or `None` if the trace already failed.
    pub fn ty(&self) -> Option<TensorType> {
        self.v.and_then(|v| self.st.borrow().b.ty(v).ok().cloned())
    }

    /// The shape (empty if the trace already failed).
    pub fn shape(&self) -> Vec<usize> {
        self.ty().map(|t| t.shape).unwrap_or_default()
    }

    /// Rank (0 if the trace already failed).
    pub fn rank(&self) -> usize {
        self.shape().len()
    }

    /// This value, named for printing (`%3:h` in the traced `Func` and in
    /// every transform of it, whose tangents and cotangents print as
    /// `h_dot` and `h_bar`). Names change nothing else.
    pub fn named(&self, name: &str) -> Tr {
        self.lift(|b, v| {
            b.set_name(v, name);
            Ok(v)
        })
    }

    /// A scalar constant of this tensor's dtype.
    pub fn scalar_like(&self, value: f64) -> Tr {
        self.lift(|b, v| broadcast::scalar_like(b, value, v))
    }

    fn binary(&self, op: Binary, other: &Tr) -> Tr {
        self.lift2(other, |b, x, y| broadcast::binary(b, op, x, y))
    }

    fn binary_scalar(&self, op: Binary, value: f64, scalar_first: bool) -> Tr {
        self.lift(|b, x| {
            let s = broadcast::scalar_like(b, value, x)?;
            if scalar_first {
                broadcast::binary(b, op, s, x)
            } else {
                broadcast::binary(b, op, x, s)
            }
        })
    }

    /// Elementwise comparison with broadcasting (bool result).
    pub fn compare(&self, op: Compare, other: &Tr) -> Tr {
        self.lift2(other, |b, x, y| broadcast::compare(b, op, x, y))
    }

    /// `x ** y` with broadcasting.
    pub fn pow(&self, other: &Tr) -> Tr {
        self.binary(Binary::Pow, other)
    }
    /// `x ** p` for a number `p`.
    pub fn powf(&self, p: f64) -> Tr {
        self.binary_scalar(Binary::Pow, p, false)
    }
    /// Elementwise maximum with broadcasting.
    pub fn maximum(&self, other: &Tr) -> Tr {
        self.binary(Binary::Max, other)
    }
    /// Elementwise minimum with broadcasting.
    pub fn minimum(&self, other: &Tr) -> Tr {
        self.binary(Binary::Min, other)
    }
    /// Elementwise `atan2(self, other)`.
    pub fn atan2(&self, other: &Tr) -> Tr {
        self.binary(Binary::Atan2, other)
    }
    /// `x < y`
    pub fn lt(&self, other: &Tr) -> Tr {
        self.compare(Compare::Lt, other)
    }
    /// `x <= y`
    pub fn le(&self, other: &Tr) -> Tr {
        self.compare(Compare::Le, other)
    }
    /// `x > y`
    pub fn gt(&self, other: &Tr) -> Tr {
        self.compare(Compare::Gt, other)
    }
    /// `x >= y`
    pub fn ge(&self, other: &Tr) -> Tr {
        self.compare(Compare::Ge, other)
    }
    /// `x == y` (elementwise)
    pub fn equal(&self, other: &Tr) -> Tr {
        self.compare(Compare::Eq, other)
    }
    /// `x != y` (elementwise)
    pub fn not_equal(&self, other: &Tr) -> Tr {
        self.compare(Compare::Ne, other)
    }
    /// `where(self, a, b)`: picks from `a` where true, `b` where false (broadcasting).
    pub fn select(&self, on_true: &Tr, on_false: &Tr) -> Tr {
        match Tr::lift_n(&[self.clone(), on_true.clone(), on_false.clone()], |b, v| {
            broadcast::select(b, v[0], v[1], v[2])
        }) {
            Some(t) => t,
            None => self.clone(),
        }
    }
}

macro_rules! unary_methods {
    ($($method:ident => $op:ident),* $(,)?) => {
        impl Tr {
            $(
                #[doc = concat!("Elementwise `", stringify!($method), "`.")]
                pub fn $method(&self) -> Tr {
                    self.lift(|b, v| b.unary(Unary::$op, v))
                }
            )*
        }
    };
}

unary_methods! {
    abs => Abs, sign => Sign, exp => Exp, expm1 => Expm1, log => Log, log1p => Log1p,
    sqrt => Sqrt, rsqrt => Rsqrt, sin => Sin, cos => Cos, tan => Tan, tanh => Tanh,
    sigmoid => Logistic, erf => Erf, erf_inv => ErfInv, floor => Floor, ceil => Ceil, round => Round,
    logical_not => Not,
}

macro_rules! binop {
    ($trait:ident, $method:ident, $op:ident) => {
        impl ops::$trait<&Tr> for &Tr {
            type Output = Tr;
            fn $method(self, rhs: &Tr) -> Tr {
                self.binary(Binary::$op, rhs)
            }
        }
        impl ops::$trait<Tr> for &Tr {
            type Output = Tr;
            fn $method(self, rhs: Tr) -> Tr {
                self.binary(Binary::$op, &rhs)
            }
        }
        impl ops::$trait<&Tr> for Tr {
            type Output = Tr;
            fn $method(self, rhs: &Tr) -> Tr {
                self.binary(Binary::$op, rhs)
            }
        }
        impl ops::$trait<Tr> for Tr {
            type Output = Tr;
            fn $method(self, rhs: Tr) -> Tr {
                self.binary(Binary::$op, &rhs)
            }
        }
        impl ops::$trait<f64> for &Tr {
            type Output = Tr;
            fn $method(self, rhs: f64) -> Tr {
                self.binary_scalar(Binary::$op, rhs, false)
            }
        }
        impl ops::$trait<f64> for Tr {
            type Output = Tr;
            fn $method(self, rhs: f64) -> Tr {
                self.binary_scalar(Binary::$op, rhs, false)
            }
        }
        impl ops::$trait<&Tr> for f64 {
            type Output = Tr;
            fn $method(self, rhs: &Tr) -> Tr {
                rhs.binary_scalar(Binary::$op, self, true)
            }
        }
        impl ops::$trait<Tr> for f64 {
            type Output = Tr;
            fn $method(self, rhs: Tr) -> Tr {
                rhs.binary_scalar(Binary::$op, self, true)
            }
        }
    };
}

binop!(Add, add, Add);
binop!(Sub, sub, Sub);
binop!(Mul, mul, Mul);
binop!(Div, div, Div);
binop!(Rem, rem, Rem);

impl ops::Neg for &Tr {
    type Output = Tr;
    fn neg(self) -> Tr {
        self.lift(|b, v| b.neg(v))
    }
}
impl ops::Neg for Tr {
    type Output = Tr;
    fn neg(self) -> Tr {
        -&self
    }
}
