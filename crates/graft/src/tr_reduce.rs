//! Reductions and the softmax family on [`Tr`]. Axes are anything that
//! converts into [`Axes`]: `()` or `None` for all axes, an integer, or a
//! list/array; negative axes count from the end. Results drop the reduced
//! axes unless the `_keepdims` variant is used.

use crate::trace::{Axes, Tr};
use graft_core::composite::reduce;
use graft_core::{Builder, DType, IrError, Value};

type ReduceFn = fn(&mut Builder, Value, &[usize], bool) -> Result<Value, IrError>;

impl Tr {
    fn reduce_with(&self, op: &'static str, axes: Axes, keepdims: bool, f: ReduceFn) -> Tr {
        self.lift(|b, x| {
            let a = axes.resolve(op, b.ty(x)?.rank())?;
            f(b, x, &a, keepdims)
        })
    }

    /// Sum over `axes` (`x.sum(())` sums everything).
    pub fn sum(&self, axes: impl Into<Axes>) -> Tr {
        self.reduce_with("sum", axes.into(), false, reduce::sum)
    }
    /// Sum over `axes`, keeping them as size 1.
    pub fn sum_keepdims(&self, axes: impl Into<Axes>) -> Tr {
        self.reduce_with("sum", axes.into(), true, reduce::sum)
    }
    /// Mean over `axes` (floats).
    pub fn mean(&self, axes: impl Into<Axes>) -> Tr {
        self.reduce_with("mean", axes.into(), false, reduce::mean)
    }
    /// Mean over `axes`, keeping them as size 1.
    pub fn mean_keepdims(&self, axes: impl Into<Axes>) -> Tr {
        self.reduce_with("mean", axes.into(), true, reduce::mean)
    }
    /// Maximum over `axes`.
    pub fn max(&self, axes: impl Into<Axes>) -> Tr {
        self.reduce_with("max", axes.into(), false, reduce::max)
    }
    /// Maximum over `axes`, keeping them as size 1.
    pub fn max_keepdims(&self, axes: impl Into<Axes>) -> Tr {
        self.reduce_with("max", axes.into(), true, reduce::max)
    }
    /// Minimum over `axes`.
    pub fn min(&self, axes: impl Into<Axes>) -> Tr {
        self.reduce_with("min", axes.into(), false, reduce::min)
    }
    /// Minimum over `axes`, keeping them as size 1.
    pub fn min_keepdims(&self, axes: impl Into<Axes>) -> Tr {
        self.reduce_with("min", axes.into(), true, reduce::min)
    }
    /// Product over `axes`.
    pub fn prod(&self, axes: impl Into<Axes>) -> Tr {
        self.reduce_with("prod", axes.into(), false, reduce::prod)
    }
    /// Product over `axes`, keeping them as size 1.
    pub fn prod_keepdims(&self, axes: impl Into<Axes>) -> Tr {
        self.reduce_with("prod", axes.into(), true, reduce::prod)
    }
    /// `log(sum(exp(x)))` over `axes`, computed stably.
    pub fn logsumexp(&self, axes: impl Into<Axes>) -> Tr {
        self.reduce_with("logsumexp", axes.into(), false, reduce::logsumexp)
    }
    /// Stable log-sum-exp, keeping the reduced axes as size 1.
    pub fn logsumexp_keepdims(&self, axes: impl Into<Axes>) -> Tr {
        self.reduce_with("logsumexp", axes.into(), true, reduce::logsumexp)
    }

    fn var_with(&self, op: &'static str, axes: Axes, ddof: usize, keepdims: bool, std: bool) -> Tr {
        self.lift(|b, x| {
            let a = axes.resolve(op, b.ty(x)?.rank())?;
            if std {
                reduce::std(b, x, &a, ddof, keepdims)
            } else {
                reduce::var(b, x, &a, ddof, keepdims)
            }
        })
    }
    /// Variance over `axes` with `ddof` (0: population, 1: sample).
    pub fn var(&self, axes: impl Into<Axes>, ddof: usize) -> Tr {
        self.var_with("var", axes.into(), ddof, false, false)
    }
    /// Variance keeping the reduced axes as size 1.
    pub fn var_keepdims(&self, axes: impl Into<Axes>, ddof: usize) -> Tr {
        self.var_with("var", axes.into(), ddof, true, false)
    }
    /// Standard deviation over `axes` with `ddof`.
    pub fn std(&self, axes: impl Into<Axes>, ddof: usize) -> Tr {
        self.var_with("std", axes.into(), ddof, false, true)
    }

    fn arg_with(&self, op: &'static str, axis: isize, keepdims: bool, max: bool) -> Tr {
        self.lift(|b, x| {
            let a = Axes::resolve_axis(op, axis, b.ty(x)?.rank())?;
            if max {
                reduce::argmax(b, x, a, keepdims, DType::I32)
            } else {
                reduce::argmin(b, x, a, keepdims, DType::I32)
            }
        })
    }
    /// Index (i32) of the first maximum along `axis`.
    pub fn argmax(&self, axis: isize) -> Tr {
        self.arg_with("argmax", axis, false, true)
    }
    /// Index (i32) of the first maximum along `axis`, keeping it as size 1.
    pub fn argmax_keepdims(&self, axis: isize) -> Tr {
        self.arg_with("argmax", axis, true, true)
    }
    /// Index (i32) of the first minimum along `axis`.
    pub fn argmin(&self, axis: isize) -> Tr {
        self.arg_with("argmin", axis, false, false)
    }
    /// Index (i32) of the first minimum along `axis`, keeping it as size 1.
    pub fn argmin_keepdims(&self, axis: isize) -> Tr {
        self.arg_with("argmin", axis, true, false)
    }

    /// Softmax along `axis` (stable).
    pub fn softmax(&self, axis: isize) -> Tr {
        self.lift(|b, x| {
            let a = Axes::resolve_axis("softmax", axis, b.ty(x)?.rank())?;
            reduce::softmax(b, x, a)
        })
    }
    /// Log-softmax along `axis` (stable).
    pub fn log_softmax(&self, axis: isize) -> Tr {
        self.lift(|b, x| {
            let a = Axes::resolve_axis("log_softmax", axis, b.ty(x)?.rank())?;
            reduce::log_softmax(b, x, a)
        })
    }
}
