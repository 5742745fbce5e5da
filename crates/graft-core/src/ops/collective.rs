//! Collective primitives over a named axis (JAX's `psum`, `pmean`, `pmax`,
//! `pmin`, `all_gather`, `psum_scatter`, `ppermute`, `axis_index`).
//!
//! A program written for one rank of a named axis of `size` ranks. The same
//! equation has two meanings that agree:
//! - under `vmap(.., axis_name = name)` the batching rule rewrites it into
//!   ordinary primitives over the batch dimension (a `psum` becomes a
//!   `reduce_sum`), so nothing communicates;
//! - otherwise the kernel runs it through the [`crate::comm::Communicator`]
//!   bound to the name (an MPI world, a thread group).
//!
//! Derivatives follow from treating the program on all ranks as one
//! function of every rank's inputs to every rank's outputs, with reverse
//! mode differentiating the sum of all ranks' scalar results (JAX's
//! convention). Then `psum` is a symmetric linear map and its own
//! transpose, `pmean` likewise, `all_gather` and `reduce_scatter` are each
//! other's transposes and `ppermute` transposes to the inverse permutation:
//! every rule emits collectives that have every rule, so transforms compose
//! to any depth. `pmax`/`pmin` pass on the tangent of the rank holding the
//! extreme (the mean over tied ranks), built from `psum` and `select`.

use super::{check, Op};
use crate::batch::{helpers, Batch, BatchCx, Batched};
use crate::comm::{self, ReduceOp};
use crate::dtype::DType;
use crate::error::{ExecError, IrError, TypeError};
use crate::ir::{Builder, Value};
use crate::ops::index::IndexMode;
use crate::tensor::{Storage, Tensor};
use crate::types::TensorType;
use std::fmt;
use std::sync::Arc;

/// A named axis and its number of ranks (known when the program is traced:
/// the vmap's size, or the communicator's).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Axis {
    /// The name collectives refer to.
    pub name: Arc<str>,
    /// How many ranks it has.
    pub size: usize,
}

impl Axis {
    /// The axis `name` with `size` ranks.
    pub fn new(name: &str, size: usize) -> Axis {
        Axis { name: Arc::from(name), size }
    }
}

impl fmt::Display for Axis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.name, self.size)
    }
}

/// Which collective.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Sum over the ranks (every rank gets it).
    Psum,
    /// Mean over the ranks (floats).
    Pmean,
    /// Maximum over the ranks.
    Pmax,
    /// Minimum over the ranks.
    Pmin,
    /// Every rank's operand stacked along a new axis at `dim` (in rank order).
    AllGather {
        /// Where the new axis goes.
        dim: usize,
    },
    /// The sum over the ranks of an operand whose axis `dim` has one entry
    /// per rank; rank `r` keeps entry `r` (the axis is removed). The
    /// transpose of `AllGather` (JAX's `psum_scatter` with `tiled=False`).
    ReduceScatter {
        /// The axis with one entry per rank.
        dim: usize,
    },
    /// Rank `dst` gets rank `src`'s operand for each `(src, dst)`; ranks that
    /// are no destination get zeros.
    Ppermute {
        /// `(src, dst)` pairs; each rank at most once on each side.
        perm: Vec<(usize, usize)>,
    },
    /// This rank's index on the axis (an i32 scalar, no operands).
    AxisIndex,
}

/// A collective over `axis`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Collective {
    /// Which collective.
    pub kind: Kind,
    /// The named axis it runs over.
    pub axis: Axis,
}

impl Collective {
    /// Whether this collective runs over the axis called `name`.
    pub fn over(&self, name: &str) -> bool {
        &*self.axis.name == name
    }

    fn with(&self, kind: Kind) -> Collective {
        Collective { kind, axis: self.axis.clone() }
    }
}

impl Op for Collective {
    fn name(&self) -> &'static str {
        match self.kind {
            Kind::Psum => "psum",
            Kind::Pmean => "pmean",
            Kind::Pmax => "pmax",
            Kind::Pmin => "pmin",
            Kind::AllGather { .. } => "all_gather",
            Kind::ReduceScatter { .. } => "reduce_scatter",
            Kind::Ppermute { .. } => "ppermute",
            Kind::AxisIndex => "axis_index",
        }
    }

    fn params(&self) -> String {
        let axis = format!("axis={}", self.axis);
        match &self.kind {
            Kind::AllGather { dim } | Kind::ReduceScatter { dim } => format!("{axis}, dim={dim}"),
            Kind::Ppermute { perm } => {
                let pairs: Vec<String> = perm.iter().map(|(s, d)| format!("({s},{d})")).collect();
                format!("{axis}, perm=({})", pairs.join(","))
            }
            _ => axis,
        }
    }

    fn infer(&self, ins: &[TensorType]) -> Result<Vec<TensorType>, TypeError> {
        let n = self.axis.size;
        if n == 0 {
            return Err(check::err(self, ins, "an axis with at least one rank"));
        }
        if matches!(self.kind, Kind::AxisIndex) {
            check::arity(self, ins, 0)?;
            return Ok(vec![TensorType::scalar(DType::I32)]);
        }
        check::arity(self, ins, 1)?;
        let x = &ins[0];
        let numeric = x.dtype != DType::Bool;
        match &self.kind {
            Kind::Psum | Kind::Pmax | Kind::Pmin if numeric => Ok(vec![x.clone()]),
            Kind::Pmean if x.dtype.is_float() => Ok(vec![x.clone()]),
            Kind::Pmean => Err(check::err(self, ins, "a float operand")),
            Kind::Psum | Kind::Pmax | Kind::Pmin => Err(check::err(self, ins, "a numeric (not bool) operand")),
            Kind::AllGather { dim } => {
                if *dim > x.rank() {
                    return Err(check::err(self, ins, format!("dim <= {} (the operand's rank)", x.rank())));
                }
                let mut shape = x.shape.to_vec();
                shape.insert(*dim, n);
                Ok(vec![TensorType::new(x.dtype, shape)])
            }
            Kind::ReduceScatter { dim } => {
                if !numeric {
                    return Err(check::err(self, ins, "a numeric (not bool) operand"));
                }
                if *dim >= x.rank() || x.shape[*dim] != n {
                    return Err(check::err(
                        self,
                        ins,
                        format!("an operand whose axis {dim} has {n} entries (one per rank)"),
                    ));
                }
                let mut shape = x.shape.to_vec();
                shape.remove(*dim);
                Ok(vec![TensorType::new(x.dtype, shape)])
            }
            Kind::Ppermute { perm } => {
                let mut src = vec![false; n];
                let mut dst = vec![false; n];
                for &(s, d) in perm {
                    if s >= n || d >= n {
                        return Err(check::err(self, ins, format!("ranks below {n} in perm, got ({s},{d})")));
                    }
                    if std::mem::replace(&mut src[s], true) || std::mem::replace(&mut dst[d], true) {
                        return Err(check::err(
                            self,
                            ins,
                            "each rank at most once as a source and once as a destination",
                        ));
                    }
                }
                Ok(vec![x.clone()])
            }
            Kind::AxisIndex => unreachable!("axis_index returned above"),
        }
    }

    fn kernel(&self, ins: &[&Tensor], outs: &mut [Tensor]) -> Result<(), ExecError> {
        let name = self.name();
        let fail = |msg: String| ExecError::kernel(name, msg);
        let comm = self.communicator()?;
        let comm_err = |e: comm::CommError| fail(e.to_string());
        let out = &mut outs[0];
        if matches!(self.kind, Kind::AxisIndex) {
            *out.storage_mut() = Storage::I32(vec![comm.rank() as i32]);
            return Ok(());
        }
        if let Some(started) = self.start(ins[0])? {
            *out = started.wait()?;
            return Ok(());
        }
        let x = ins[0];
        let ty = x.ty();
        let data = match &self.kind {
            Kind::AllGather { dim } => {
                let all = comm.all_gather(&ty, x.storage()).map_err(comm_err)?;
                // `all` is [ranks, x...]; move the rank axis to `dim`.
                let (outer, inner) = split_at(x.shape(), *dim);
                let n = self.axis.size;
                let mut res = Storage::zeros(x.dtype(), all.len());
                for r in 0..n {
                    for o in 0..outer {
                        comm::copy_run(&all, (r * outer + o) * inner, &mut res, (o * n + r) * inner, inner)
                            .map_err(fail)?;
                    }
                }
                res
            }
            Kind::ReduceScatter { dim } => {
                let sum = comm.all_reduce(ReduceOp::Sum, &ty, x.storage()).map_err(comm_err)?;
                let n = self.axis.size;
                let (outer, rest) = split_at(x.shape(), *dim);
                let inner = rest / n.max(1);
                let r = comm.rank();
                let mut res = Storage::zeros(x.dtype(), outer * inner);
                for o in 0..outer {
                    comm::copy_run(&sum, (o * n + r) * inner, &mut res, o * inner, inner).map_err(fail)?;
                }
                res
            }
            Kind::Ppermute { perm } => comm.permute(&ty, x.storage(), perm).map_err(comm_err)?,
            Kind::AxisIndex | Kind::Psum | Kind::Pmean | Kind::Pmax | Kind::Pmin => {
                unreachable!("axis_index and the all-reduce kinds returned above")
            }
        };
        check_returned(name, &data, out)?;
        *out.storage_mut() = data;
        Ok(())
    }
}

/// Checks what a transport returned against the result's type.
fn check_returned(name: &str, data: &Storage, out: &Tensor) -> Result<(), ExecError> {
    if data.len() != out.numel() || data.dtype() != out.dtype() {
        return Err(ExecError::kernel(
            name,
            format!("the transport returned {} {} elements for a {} result", data.len(), data.dtype(), out.ty()),
        ));
    }
    Ok(())
}

/// An all-reduce collective in flight ([`Collective::start`]): the executor
/// starts it when its operand is ready and waits at its first reader.
pub struct Started {
    name: &'static str,
    pending: comm::Pending,
    ty: TensorType,
    /// `pmean`'s divisor (applied on arrival), else `None`.
    mean_of: Option<usize>,
}

impl Started {
    /// The result: waits for the transport, then finishes it (`pmean`
    /// divides the sum by the number of ranks).
    pub fn wait(self) -> Result<Tensor, ExecError> {
        let fail = |msg: String| ExecError::kernel(self.name, msg);
        let mut data = self.pending.wait().map_err(|e| fail(e.to_string()))?;
        if let Some(n) = self.mean_of {
            match &mut data {
                Storage::F32(v) => v.iter_mut().for_each(|a| *a /= n as f32),
                Storage::F64(v) => v.iter_mut().for_each(|a| *a /= n as f64),
                other => return Err(fail(format!("pmean of {} values", other.dtype()))),
            }
        }
        if data.dtype() != self.ty.dtype {
            return Err(fail(format!("the transport returned {} elements for a {} result", data.dtype(), self.ty)));
        }
        Tensor::from_storage(self.ty.shape.clone(), data).map_err(|e| fail(format!("the transport's result: {e}")))
    }

    /// Whether the result is there without waiting (a transport without a
    /// background thread finishes at once).
    pub fn is_ready(&self) -> bool {
        self.pending.is_ready()
    }
}

impl Collective {
    /// The communicator bound to the axis, checked against the traced size.
    fn communicator(&self) -> Result<Arc<dyn comm::Communicator>, ExecError> {
        let name = self.name();
        let fail = |msg: String| ExecError::kernel(name, msg);
        let comm = comm::lookup(&self.axis.name).ok_or_else(|| {
            fail(format!(
                "the axis `{}` is not bound: run it under `vmap` with axis_name = \"{}\", or under a distributed runtime (`mpirun ... graft train`) that binds it",
                self.axis.name, self.axis.name
            ))
        })?;
        if comm.size() != self.axis.size {
            return Err(fail(format!(
                "the program was traced for {} ranks on axis `{}` but it is bound to a {}",
                self.axis.size,
                self.axis.name,
                comm.describe()
            )));
        }
        Ok(comm)
    }

    /// Whether this collective is an all-reduce (`psum`, `pmean`, `pmax`,
    /// `pmin`), which [`Collective::start`] can run in the background.
    pub fn is_all_reduce(&self) -> bool {
        matches!(self.kind, Kind::Psum | Kind::Pmean | Kind::Pmax | Kind::Pmin)
    }

    /// Starts an all-reduce on `x` without waiting for it (through
    /// [`comm::Communicator::all_reduce_start`]); `None` for the other kinds.
    /// The kernel is `start` then [`Started::wait`], so both paths give the
    /// same bits.
    pub fn start(&self, x: &Tensor) -> Result<Option<Started>, ExecError> {
        let op = match self.kind {
            Kind::Psum | Kind::Pmean => ReduceOp::Sum,
            Kind::Pmax => ReduceOp::Max,
            Kind::Pmin => ReduceOp::Min,
            _ => return Ok(None),
        };
        let comm = self.communicator()?;
        let ty = x.ty();
        let pending = comm.all_reduce_start(op, &ty, x.storage().clone());
        let mean_of = matches!(self.kind, Kind::Pmean).then_some(self.axis.size);
        Ok(Some(Started { name: self.name(), pending, ty, mean_of }))
    }
}

/// Elements before axis `dim` and from it on.
fn split_at(shape: &[usize], dim: usize) -> (usize, usize) {
    (shape[..dim].iter().product(), shape[dim..].iter().product())
}

impl Builder {
    /// Emits the collective `kind` over `axis` on `x` (no operand for `AxisIndex`).
    pub fn collective(&mut self, kind: Kind, axis: &Axis, x: Option<Value>) -> Result<Value, IrError> {
        let ins: Vec<Value> = x.into_iter().collect();
        self.emit1(Collective { kind, axis: axis.clone() }, &ins)
    }

    /// The sum of `x` over the ranks of `axis`.
    pub fn psum(&mut self, x: Value, axis: &Axis) -> Result<Value, IrError> {
        self.collective(Kind::Psum, axis, Some(x))
    }

    /// The mean of `x` over the ranks of `axis`.
    pub fn pmean(&mut self, x: Value, axis: &Axis) -> Result<Value, IrError> {
        self.collective(Kind::Pmean, axis, Some(x))
    }

    /// This rank's index on `axis`.
    pub fn axis_index(&mut self, axis: &Axis) -> Result<Value, IrError> {
        self.collective(Kind::AxisIndex, axis, None)
    }
}

impl crate::ad::Diff for Collective {
    fn jvp(&self, b: &mut Builder, cx: &crate::ad::JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        let Some(&Some(t)) = cx.tangents.first() else { return Ok(vec![None]) };
        match &self.kind {
            Kind::AxisIndex => Ok(vec![None]),
            Kind::Pmax | Kind::Pmin => {
                // The mean tangent of the ranks that hold the extreme.
                let (x, y) = (cx.primals[0], cx.outputs[0]);
                let ty = b.ty(x)?.clone();
                let hit = b.eq(x, y)?;
                let zero = b.zeros(&ty)?;
                let one = b.full(1.0, &ty)?;
                let count = b.select(hit, one, zero)?;
                let count = b.psum(count, &self.axis)?;
                let picked = b.select(hit, t, zero)?;
                let total = b.psum(picked, &self.axis)?;
                Ok(vec![Some(b.div(total, count)?)])
            }
            _ => Ok(vec![Some(b.emit1(self.clone(), &[t])?)]),
        }
    }

    fn transpose(&self, b: &mut Builder, cx: &crate::ad::TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
        let Some(&Some(ct)) = cx.cts.first() else { return Ok(vec![None]) };
        let back = match &self.kind {
            Kind::Psum | Kind::Pmean => self.clone(),
            Kind::AllGather { dim } => self.with(Kind::ReduceScatter { dim: *dim }),
            Kind::ReduceScatter { dim } => self.with(Kind::AllGather { dim: *dim }),
            Kind::Ppermute { perm } => self.with(Kind::Ppermute { perm: perm.iter().map(|&(s, d)| (d, s)).collect() }),
            Kind::Pmax | Kind::Pmin | Kind::AxisIndex => return Err(crate::ad::not_linear(self.name())),
        };
        Ok(vec![Some(b.emit1(back, &[ct])?)])
    }
}

impl Batch for Collective {
    fn batch(&self, b: &mut Builder, cx: &BatchCx<'_>) -> Result<Batched, IrError> {
        if cx.axis.is_some_and(|a| self.over(a)) {
            return self.batch_bound(b, cx);
        }
        // Another axis: the collective runs per example, with the batch
        // carried along (every rank holds the same batch).
        let (Some(&x), Some(&Some(d))) = (cx.args.first(), cx.bdims.first()) else {
            return Err(crate::batch::no_rule(self.name(), "internal error: called without a batched operand"));
        };
        match &self.kind {
            Kind::AllGather { dim } | Kind::ReduceScatter { dim } => {
                let front = helpers::move_bdim(b, x, d, 0)?;
                let kind = match self.kind {
                    Kind::AllGather { .. } => Kind::AllGather { dim: dim + 1 },
                    _ => Kind::ReduceScatter { dim: dim + 1 },
                };
                Ok(vec![(b.emit1(self.with(kind), &[front])?, Some(0))])
            }
            _ => Ok(vec![(b.emit1(self.clone(), &[x])?, Some(d))]),
        }
    }
}

impl Collective {
    /// The rule when the vmap being applied binds this collective's axis:
    /// the ranks are the batch, so the collective becomes ordinary
    /// primitives over the batch dimension.
    fn batch_bound(&self, b: &mut Builder, cx: &BatchCx<'_>) -> Result<Batched, IrError> {
        let n = self.axis.size;
        if n != cx.size {
            return Err(IrError::invalid(
                self.name(),
                format!(
                    "the collective was traced for {n} ranks of axis `{}` but the vmap that binds it has size {}",
                    self.axis.name, cx.size
                ),
            ));
        }
        if matches!(self.kind, Kind::AxisIndex) {
            return Ok(vec![(b.iota(DType::I32, &[n], 0)?, Some(0))]);
        }
        let x = cx.args[0];
        let d = cx.bdims[0];
        let ty = b.ty(x)?.clone();
        let scalar = |b: &mut Builder, v: f64, like: &TensorType| b.full(v, like);
        Ok(vec![match (&self.kind, d) {
            (Kind::Psum, Some(d)) => (b.reduce_sum(x, &[d])?, None),
            (Kind::Psum, None) => {
                let k = scalar(b, n as f64, &ty)?;
                (b.mul(x, k)?, None)
            }
            (Kind::Pmean, Some(d)) => {
                let s = b.reduce_sum(x, &[d])?;
                let sty = b.ty(s)?.clone();
                let k = scalar(b, n as f64, &sty)?;
                (b.div(s, k)?, None)
            }
            (Kind::Pmax, Some(d)) => (b.reduce_max(x, &[d])?, None),
            (Kind::Pmin, Some(d)) => (b.reduce_min(x, &[d])?, None),
            (Kind::Pmean | Kind::Pmax | Kind::Pmin, None) => (x, None),
            (Kind::AllGather { dim }, Some(d)) => (helpers::move_bdim(b, x, d, *dim)?, None),
            (Kind::AllGather { dim }, None) => (helpers::materialize(b, x, *dim, n)?, None),
            // Rank r keeps entry r of the summed axis `dim`: that axis of the
            // sum is the batch.
            (Kind::ReduceScatter { dim }, Some(d)) => (b.reduce_sum(x, &[d])?, Some(*dim)),
            (Kind::ReduceScatter { dim }, None) => {
                let k = scalar(b, n as f64, &ty)?;
                (b.mul(x, k)?, Some(*dim))
            }
            (Kind::Ppermute { perm }, d) => {
                let x = helpers::bdim_to_front(b, x, d, n)?;
                // Example `dst` reads example `src`; an index past the end
                // reads zeros (`fill`).
                let mut src = vec![n as i32; n];
                for &(s, t) in perm {
                    src[t] = s as i32;
                }
                let idx = b.constant(
                    Tensor::from_vec(vec![n, 1], src).map_err(|e| IrError::invalid("ppermute", e.to_string()))?,
                )?;
                (b.gather(x, idx, 0, &[0], IndexMode::Fill)?, Some(0))
            }
            (Kind::AxisIndex, _) => unreachable!("axis_index returned above"),
        }])
    }
}
