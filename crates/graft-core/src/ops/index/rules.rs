//! Derivative and batching rules of the indexing primitives.

use super::*;

// Derivative rules. All four ops are linear in their data operands (the
// indices are integers and carry no tangent); each transposes into the
// other op of its pair with the same mode and geometry, so the clip/fill
// semantics stay consistent between forward and reverse mode.
mod diff {
    use super::*;
    use crate::ad::helpers::or_zeros;
    use crate::ad::{Diff, JvpCx, TransposeCx};

    impl Diff for Gather {
        fn jvp(&self, b: &mut Builder, cx: &JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
            let idx = cx.primals[1];
            Ok(vec![cx.tangents[0]
                .map(|t| b.gather(t, idx, self.batch_dims, &self.index_dims, self.mode))
                .transpose()?])
        }
        fn transpose(&self, b: &mut Builder, cx: &TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
            let Some(ct) = cx.cts[0] else { return Ok(vec![None, None]) };
            let idx = cx.primal("gather", 1)?;
            let zeros = b.zeros(&cx.in_types[0])?;
            Ok(vec![Some(b.scatter_add(zeros, idx, ct, self.batch_dims, &self.index_dims, self.mode)?), None])
        }
    }

    impl Diff for ScatterAdd {
        fn jvp(&self, b: &mut Builder, cx: &JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
            let (op, idx, upd) = (cx.primals[0], cx.primals[1], cx.primals[2]);
            if cx.tangents[0].is_none() && cx.tangents[2].is_none() {
                return Ok(vec![None]);
            }
            let t_op = or_zeros(b, cx.tangents[0], op)?;
            let t_upd = or_zeros(b, cx.tangents[2], upd)?;
            Ok(vec![Some(b.scatter_add(t_op, idx, t_upd, self.batch_dims, &self.index_dims, self.mode)?)])
        }
        fn transpose(&self, b: &mut Builder, cx: &TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
            let Some(ct) = cx.cts[0] else { return Ok(vec![None, None, None]) };
            let idx = cx.primal("scatter_add", 1)?;
            let op_bar = if cx.is_linear(0) { Some(ct) } else { None };
            let upd_bar = if cx.is_linear(2) {
                Some(b.gather(ct, idx, self.batch_dims, &self.index_dims, self.mode)?)
            } else {
                None
            };
            Ok(vec![op_bar, None, upd_bar])
        }
    }

    impl Diff for DynamicSlice {
        fn jvp(&self, b: &mut Builder, cx: &JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
            let starts = &cx.primals[1..];
            Ok(vec![cx.tangents[0].map(|t| b.dynamic_slice(t, starts, &self.sizes)).transpose()?])
        }
        fn transpose(&self, b: &mut Builder, cx: &TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
            let mut res = vec![None; cx.inputs.len()];
            if let Some(ct) = cx.cts[0] {
                let starts: Vec<Value> =
                    (1..cx.inputs.len()).map(|i| cx.primal("dynamic_slice", i)).collect::<Result<_, _>>()?;
                let zeros = b.zeros(&cx.in_types[0])?;
                res[0] = Some(b.dynamic_update_slice(zeros, ct, &starts)?);
            }
            Ok(res)
        }
    }

    impl Diff for DynamicUpdateSlice {
        fn jvp(&self, b: &mut Builder, cx: &JvpCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
            if cx.tangents[0].is_none() && cx.tangents[1].is_none() {
                return Ok(vec![None]);
            }
            let t_op = or_zeros(b, cx.tangents[0], cx.primals[0])?;
            let t_upd = or_zeros(b, cx.tangents[1], cx.primals[1])?;
            Ok(vec![Some(b.dynamic_update_slice(t_op, t_upd, &cx.primals[2..])?)])
        }
        // The operand's cotangent is ct with the updated window zeroed; the
        // update's is that window of ct (the same clamped starts apply).
        fn transpose(&self, b: &mut Builder, cx: &TransposeCx<'_>) -> Result<Vec<Option<Value>>, IrError> {
            let mut res = vec![None; cx.inputs.len()];
            let Some(ct) = cx.cts[0] else { return Ok(res) };
            let starts: Vec<Value> =
                (2..cx.inputs.len()).map(|i| cx.primal("dynamic_update_slice", i)).collect::<Result<_, _>>()?;
            if cx.is_linear(0) {
                let z = b.zeros(&cx.in_types[1])?;
                res[0] = Some(b.dynamic_update_slice(ct, z, &starts)?);
            }
            if cx.is_linear(1) {
                res[1] = Some(b.dynamic_slice(ct, &starts, &cx.in_types[1].shape)?);
            }
            Ok(res)
        }
    }
}

// Batching rules. gather/scatter_add use their `batch_dims` parameter: the
// batch dims of the operands go to the front and `batch_dims` grows by one.
mod batching {
    use super::*;
    use crate::batch::helpers::{all_to_front, bdim_to_front, move_bdim};
    use crate::batch::{Batch, BatchCx, Batched};

    impl Batch for Gather {
        fn batch(&self, b: &mut Builder, cx: &BatchCx<'_>) -> Result<Batched, IrError> {
            // Shared operand, no batch dims: the indices' batch dim is just
            // one more index position (`I...`), so nothing is materialized.
            if let (None, Some(id), 0) = (cx.bdims[0], cx.bdims[1], self.batch_dims) {
                let idx = move_bdim(b, cx.args[1], id, 0)?;
                return Ok(vec![(b.emit1(self.clone(), &[cx.args[0], idx])?, Some(0))]);
            }
            // Batched operand, shared indices, batch dim outside the shared
            // leading dims: the batch dim is one more sliced (non-indexed)
            // axis, so the same gather runs with the index axes renumbered
            // and nothing moves or is broadcast (rows of a `[V, B, ..]`
            // tangent are copied whole).
            if let (Some(d), None) = (cx.bdims[0], cx.bdims[1]) {
                if d >= self.batch_dims {
                    let index_dims: Vec<usize> = self.index_dims.iter().map(|&k| k + usize::from(k >= d)).collect();
                    let n_i = b.ty(cx.args[1])?.rank() - self.batch_dims - 1;
                    let before = (self.batch_dims..d).filter(|a| !index_dims.contains(a)).count();
                    let op = Gather { batch_dims: self.batch_dims, index_dims, mode: self.mode };
                    return Ok(vec![(b.emit1(op, cx.args)?, Some(self.batch_dims + n_i + before))]);
                }
            }
            let args = all_to_front(b, cx)?;
            let op = Gather {
                batch_dims: self.batch_dims + 1,
                index_dims: self.index_dims.iter().map(|d| d + 1).collect(),
                mode: self.mode,
            };
            Ok(vec![(b.emit1(op, &args)?, Some(0))])
        }
    }

    impl Batch for ScatterAdd {
        fn batch(&self, b: &mut Builder, cx: &BatchCx<'_>) -> Result<Batched, IrError> {
            let args = all_to_front(b, cx)?;
            let op = ScatterAdd {
                batch_dims: self.batch_dims + 1,
                index_dims: self.index_dims.iter().map(|d| d + 1).collect(),
                mode: self.mode,
            };
            Ok(vec![(b.emit1(op, &args)?, Some(0))])
        }
    }

    /// Index vectors `[size, sizes..., r]` (i64) of every position of a
    /// block of `sizes` at per-example starts (clamped like dynamic_slice
    /// into `[0, full - sizes]`), for a gather/scatter over the batch.
    fn block_indices(
        b: &mut Builder,
        starts: &[Value],
        bdims: &[Option<usize>],
        full: &[usize],
        sizes: &[usize],
        size: usize,
    ) -> Result<Value, IrError> {
        let mut shape = vec![size];
        shape.extend_from_slice(sizes);
        let mut col_shape = shape.clone();
        col_shape.push(1);
        let mut cols = Vec::with_capacity(starts.len());
        for (d, (&s, &sd)) in starts.iter().zip(bdims).enumerate() {
            let s = b.convert(s, DType::I64)?;
            let s = bdim_to_front(b, s, sd, size)?;
            let lo = b.full(0.0, &TensorType::new(DType::I64, vec![size]))?;
            let hi = b.full((full[d] - sizes[d]) as f64, &TensorType::new(DType::I64, vec![size]))?;
            let s = b.max(s, lo)?;
            let s = b.min(s, hi)?;
            let sb = b.broadcast_in_dim(s, &shape, &[0])?;
            let io = b.iota(DType::I64, &shape, d + 1)?;
            let ix = b.add(sb, io)?;
            cols.push(b.reshape(ix, &col_shape)?);
        }
        b.concatenate(&cols, shape.len())
    }

    // Batched starts: the block is gathered at per-example index vectors
    // (one per block position), so there is still no loop over the batch.
    impl Batch for DynamicSlice {
        fn batch(&self, b: &mut Builder, cx: &BatchCx<'_>) -> Result<Batched, IrError> {
            let rank = self.sizes.len();
            if cx.bdims[1..].iter().all(Option::is_none) {
                let d = cx.bdims[0].expect("internal error: a batching rule runs only with a batched operand");
                let dt = cx.args.get(1).map(|&s| b.ty(s).map(|t| t.dtype)).transpose()?.unwrap_or(DType::I32);
                let zero = b.scalar(0.0, dt)?;
                let mut starts = cx.args[1..].to_vec();
                starts.insert(d, zero);
                let mut sizes = self.sizes.clone();
                sizes.insert(d, cx.size);
                return Ok(vec![(b.dynamic_slice(cx.args[0], &starts, &sizes)?, Some(d))]);
            }
            let (x, full) = match cx.bdims[0] {
                Some(d) => {
                    let x = move_bdim(b, cx.args[0], d, 0)?;
                    let full = b.ty(x)?.shape[1..].to_vec();
                    (x, full)
                }
                None => (cx.args[0], b.ty(cx.args[0])?.shape.clone()),
            };
            let idx = block_indices(b, &cx.args[1..], &cx.bdims[1..], &full, &self.sizes, cx.size)?;
            let out = match cx.bdims[0] {
                Some(_) => b.gather(x, idx, 1, &(1..=rank).collect::<Vec<_>>(), IndexMode::Clip)?,
                None => b.gather(x, idx, 0, &(0..rank).collect::<Vec<_>>(), IndexMode::Clip)?,
            };
            Ok(vec![(out, Some(0))])
        }
    }

    // Batched starts: scatter the update into zeros at the block's index
    // vectors and choose it where a scattered count of ones is positive, so
    // the written values are exactly the update's (no `x + (u - x)` rounding).
    impl Batch for DynamicUpdateSlice {
        fn batch(&self, b: &mut Builder, cx: &BatchCx<'_>) -> Result<Batched, IrError> {
            let data = BatchCx { args: &cx.args[..2], bdims: &cx.bdims[..2], size: cx.size, axis: cx.axis };
            let args = all_to_front(b, &data)?;
            let (x, u) = (args[0], args[1]);
            if cx.bdims[2..].iter().all(Option::is_none) {
                let dt = cx.args.get(2).map(|&s| b.ty(s).map(|t| t.dtype)).transpose()?.unwrap_or(DType::I32);
                let zero = b.scalar(0.0, dt)?;
                let mut starts = cx.args[2..].to_vec();
                starts.insert(0, zero);
                return Ok(vec![(b.dynamic_update_slice(x, u, &starts)?, Some(0))]);
            }
            let (xt, ut) = (b.ty(x)?.clone(), b.ty(u)?.clone());
            let rank = xt.rank() - 1;
            let idx = block_indices(b, &cx.args[2..], &cx.bdims[2..], &xt.shape[1..], &ut.shape[1..], cx.size)?;
            let dims: Vec<usize> = (1..=rank).collect();
            let zeros = b.zeros(&xt)?;
            let scattered = b.scatter_add(zeros, idx, u, 1, &dims, IndexMode::Clip)?;
            let count0 = b.zeros(&TensorType::new(DType::I32, xt.shape.clone()))?;
            let ones = b.ones(&TensorType::new(DType::I32, ut.shape.clone()))?;
            let count = b.scatter_add(count0, idx, ones, 1, &dims, IndexMode::Clip)?;
            let zi = b.zeros(&TensorType::new(DType::I32, xt.shape.clone()))?;
            let mask = b.gt(count, zi)?;
            Ok(vec![(b.select(mask, scattered, x)?, Some(0))])
        }
    }
}
