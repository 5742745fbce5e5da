//! Forward tests of the indexing primitives (gather, scatter_add,
//! dynamic_slice, dynamic_update_slice) against naive reference loops and
//! hand-computed values, plus their shape-rule errors.

use crate::common::{ravel, unravel};
use graft_core::ops::index::{Gather, IndexMode, ScatterAdd};
use graft_core::{Builder, DType, Executable, IrError, Tensor, TensorType, Value};
use proptest::prelude::*;

// ---------- helpers ----------

/// Builds `f(params...) = build(...)` over the types of `ins`, runs it, returns its single output.
fn run(ins: &[&Tensor], build: impl FnOnce(&mut Builder, &[Value]) -> Result<Value, IrError>) -> Tensor {
    let mut b = Builder::new("f");
    let ps: Vec<Value> = ins.iter().map(|t| b.param(t.ty())).collect();
    let y = build(&mut b, &ps).unwrap();
    let inferred = b.func().ty(y).clone();
    let f = b.finish(&[y]).unwrap();
    let out = Executable::new(f).unwrap().run(ins).unwrap().remove(0);
    assert_eq!(out.ty(), inferred, "kernel output type differs from the inferred type");
    out
}

fn gather(x: &Tensor, idx: &Tensor, bd: usize, dims: &[usize], mode: IndexMode) -> Tensor {
    run(&[x, idx], |b, p| b.gather(p[0], p[1], bd, dims, mode))
}

fn scatter(x: &Tensor, idx: &Tensor, upd: &Tensor, bd: usize, dims: &[usize], mode: IndexMode) -> Tensor {
    run(&[x, idx, upd], |b, p| b.scatter_add(p[0], p[1], p[2], bd, dims, mode))
}

fn dslice(x: &Tensor, starts: &[Tensor], sizes: &[usize]) -> Tensor {
    let mut ins = vec![x];
    ins.extend(starts.iter());
    run(&ins, |b, p| b.dynamic_slice(p[0], &p[1..], sizes))
}

fn dus(x: &Tensor, u: &Tensor, starts: &[Tensor]) -> Tensor {
    let mut ins = vec![x, u];
    ins.extend(starts.iter());
    run(&ins, |b, p| b.dynamic_update_slice(p[0], p[1], &p[2..]))
}

fn ty(dtype: DType, shape: &[usize]) -> TensorType {
    TensorType::new(dtype, shape.to_vec())
}

fn iota(dtype: DType, shape: &[usize]) -> Tensor {
    Tensor::from_fn(&ty(dtype, shape), |i| i as f64)
}

fn idx_i64(shape: &[usize], v: &[i64]) -> Tensor {
    Tensor::from_vec(shape.to_vec(), v.to_vec()).unwrap()
}

fn idx_i32(shape: &[usize], v: &[i64]) -> Tensor {
    Tensor::from_vec(shape.to_vec(), v.iter().map(|&x| x as i32).collect::<Vec<_>>()).unwrap()
}

/// Naive index geometry: the gather output shape, and for each output
/// multi-index the operand multi-index it reads (None: reads 0 / dropped).
struct Ref<'a> {
    os: &'a [usize],
    is: &'a [usize],
    ids: &'a [i64],
    bd: usize,
    dims: &'a [usize],
    mode: IndexMode,
}

impl Ref<'_> {
    fn rest(&self) -> Vec<usize> {
        (self.bd..self.os.len()).filter(|d| !self.dims.contains(d)).collect()
    }

    fn out_shape(&self) -> Vec<usize> {
        let mut s = self.is[..self.is.len() - 1].to_vec();
        s.extend(self.rest().iter().map(|&d| self.os[d]));
        s
    }

    fn source(&self, m: &[usize]) -> Option<Vec<usize>> {
        let lead = self.is.len() - 1;
        let mut oi = vec![0; self.os.len()];
        oi[..self.bd].copy_from_slice(&m[..self.bd]);
        for (c, &d) in self.dims.iter().enumerate() {
            let mut im = m[..lead].to_vec();
            im.push(c);
            let v = self.ids[ravel(&im, self.is)];
            let n = self.os[d] as i64;
            let v = if (0..n).contains(&v) {
                v
            } else {
                match self.mode {
                    IndexMode::Fill => return None,
                    IndexMode::Clip if n == 0 => return None,
                    IndexMode::Clip => v.clamp(0, n - 1),
                }
            };
            oi[d] = v as usize;
        }
        for (t, d) in self.rest().into_iter().enumerate() {
            oi[d] = m[lead + t];
        }
        Some(oi)
    }

    fn gather<T: Copy + Default>(&self, x: &[T]) -> Vec<T> {
        let shape = self.out_shape();
        let n: usize = shape.iter().product();
        (0..n).map(|j| self.source(&unravel(j, &shape)).map_or(T::default(), |oi| x[ravel(&oi, self.os)])).collect()
    }

    /// Sequential accumulation in update order, the order the kernel promises.
    fn scatter<T: Copy + std::ops::Add<Output = T>>(&self, x: &[T], u: &[T]) -> Vec<T> {
        let shape = self.out_shape();
        let mut out = x.to_vec();
        for (j, &v) in u.iter().enumerate() {
            if let Some(oi) = self.source(&unravel(j, &shape)) {
                let o = ravel(&oi, self.os);
                out[o] = out[o] + v;
            }
        }
        out
    }
}

/// Deterministic pseudo-random integers in `[lo, hi)`.
fn lcg_values(n: usize, lo: i64, hi: i64, seed: u64) -> Vec<i64> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            lo + ((s >> 33) % (hi - lo) as u64) as i64
        })
        .collect()
}

fn type_error(e: IrError) -> graft_core::TypeError {
    match e {
        IrError::Type(te) => te,
        e => panic!("expected a type error, got {e:?}"),
    }
}

// ---------- gather ----------

#[test]
fn gather_rows_like_take() {
    // jnp.take(table, [2, 0, 4, 2], axis=0)
    let table = iota(DType::F64, &[5, 3]);
    let idx = idx_i64(&[4, 1], &[2, 0, 4, 2]);
    let y = gather(&table, &idx, 0, &[0], IndexMode::Clip);
    assert_eq!(y.shape(), &[4, 3]);
    assert_eq!(y.to_vec::<f64>().unwrap(), vec![6., 7., 8., 0., 1., 2., 12., 13., 14., 6., 7., 8.]);
    // Same through i32 indices and f32 / i32 / i64 operands.
    let idx32 = idx_i32(&[4, 1], &[2, 0, 4, 2]);
    for dtype in [DType::F32, DType::I32, DType::I64] {
        let y = gather(&table.cast(dtype), &idx32, 0, &[0], IndexMode::Fill);
        assert_eq!(y.dtype(), dtype);
        assert_eq!(y.to_f64_vec(), vec![6., 7., 8., 0., 1., 2., 12., 13., 14., 6., 7., 8.]);
    }
}

#[test]
fn gather_out_of_range_modes() {
    let table = iota(DType::F64, &[5, 2]);
    let idx = idx_i64(&[6, 1], &[-1, 5, 7, 1, 0, i64::MIN]);
    let clip = gather(&table, &idx, 0, &[0], IndexMode::Clip).to_vec::<f64>().unwrap();
    // -1 -> 0, 5 -> 4, 7 -> 4, MIN -> 0: the edge rows
    assert_eq!(clip, vec![0., 1., 8., 9., 8., 9., 2., 3., 0., 1., 0., 1.]);
    let fill = gather(&table, &idx, 0, &[0], IndexMode::Fill).to_vec::<f64>().unwrap();
    assert_eq!(fill, vec![0., 0., 0., 0., 0., 0., 2., 3., 0., 1., 0., 0.]);
    // Negative indices never wrap: i32 -1 is out of range too.
    let neg = idx_i32(&[1, 1], &[-1]);
    assert_eq!(gather(&table, &neg, 0, &[0], IndexMode::Fill).to_vec::<f64>().unwrap(), vec![0., 0.]);
    // bool fills with false, clips to the edge.
    let flags = Tensor::vec1(&[true, false, true]);
    let i = idx_i64(&[3, 1], &[0, 3, -2]);
    assert_eq!(gather(&flags, &i, 0, &[0], IndexMode::Fill).to_vec::<bool>().unwrap(), vec![true, false, false]);
    assert_eq!(gather(&flags, &i, 0, &[0], IndexMode::Clip).to_vec::<bool>().unwrap(), vec![true, true, true]);
}

#[test]
fn gather_along_inner_axis() {
    // x[:, idx, :] as gather over axis 1: out [I, 2, 3].
    let x = iota(DType::F32, &[2, 4, 3]);
    let idx = idx_i32(&[2, 1], &[3, 1]);
    let y = gather(&x, &idx, 0, &[1], IndexMode::Clip);
    assert_eq!(y.shape(), &[2, 2, 3]);
    assert_eq!(
        y.to_f64_vec(),
        vec![9., 10., 11., 21., 22., 23., 3., 4., 5., 15., 16., 17.] // x[0,3,:], x[1,3,:], x[0,1,:], x[1,1,:]
    );
    // Gather along the last axis: every element its own run.
    let idx = idx_i64(&[3, 1], &[2, 0, 9]);
    let y = gather(&x, &idx, 0, &[2], IndexMode::Fill);
    assert_eq!(y.shape(), &[3, 2, 4]);
    let r = Ref { os: &[2, 4, 3], is: &[3, 1], ids: &[2, 0, 9], bd: 0, dims: &[2], mode: IndexMode::Fill };
    assert_eq!(y.to_vec::<f32>().unwrap(), r.gather(&x.to_vec::<f32>().unwrap()));
    assert_eq!(y.to_f64_vec()[..4], [2., 5., 8., 11.]);
}

#[test]
fn gather_with_batch_dims() {
    // take_along_axis: out[b, j] = x[b, idx[b, j]]
    let x = iota(DType::I64, &[3, 4]);
    let idx = idx_i64(&[3, 2, 1], &[3, 0, 1, 1, -5, 2]);
    let y = gather(&x, &idx, 1, &[1], IndexMode::Clip);
    assert_eq!(y.shape(), &[3, 2]);
    assert_eq!(y.to_vec::<i64>().unwrap(), vec![3, 0, 5, 5, 8, 10]);
    let y = gather(&x, &idx, 1, &[1], IndexMode::Fill);
    assert_eq!(y.to_vec::<i64>().unwrap(), vec![3, 0, 5, 5, 0, 10]);
    // Two batch dims with a non-indexed trailing axis.
    let x = iota(DType::F64, &[2, 2, 3, 2]);
    let ids = [2, 0, 1, 1, 0, 0, 2, 5];
    let idx = idx_i64(&[2, 2, 2, 1], &ids);
    let y = gather(&x, &idx, 2, &[2], IndexMode::Clip);
    assert_eq!(y.shape(), &[2, 2, 2, 2]);
    let r = Ref { os: &[2, 2, 3, 2], is: &[2, 2, 2, 1], ids: &ids, bd: 2, dims: &[2], mode: IndexMode::Clip };
    assert_eq!(y.to_vec::<f64>().unwrap(), r.gather(&x.to_vec::<f64>().unwrap()));
    assert_eq!(y.to_vec::<f64>().unwrap()[..4], [4., 5., 0., 1.]);
}

#[test]
fn large_element_gathers_match_the_reference() {
    // One index per output element (the kernel's element fast path), big
    // enough to split across threads, with out-of-range indices, i64 and
    // i32 indices, with and without a batch dim.
    let n = 3 * (1 << 15) + 17;
    let ids = lcg_values(n, -3, 43, 7);
    let x = iota(DType::F64, &[40]);
    for mode in [IndexMode::Fill, IndexMode::Clip] {
        let r = Ref { os: &[40], is: &[n, 1], ids: &ids, bd: 0, dims: &[0], mode };
        let want = r.gather(&x.to_vec::<f64>().unwrap());
        assert_eq!(gather(&x, &idx_i64(&[n, 1], &ids), 0, &[0], mode).to_vec::<f64>().unwrap(), want);
        assert_eq!(gather(&x, &idx_i32(&[n, 1], &ids), 0, &[0], mode).to_vec::<f64>().unwrap(), want);
    }
    let xb = iota(DType::F64, &[4, 40]);
    let per = n / 4 + 1;
    let idsb = lcg_values(4 * per, -3, 43, 11);
    for mode in [IndexMode::Fill, IndexMode::Clip] {
        let r = Ref { os: &[4, 40], is: &[4, per, 1], ids: &idsb, bd: 1, dims: &[1], mode };
        let y = gather(&xb, &idx_i64(&[4, per, 1], &idsb), 1, &[1], mode);
        assert_eq!(y.to_vec::<f64>().unwrap(), r.gather(&xb.to_vec::<f64>().unwrap()));
    }
}

#[test]
fn gather_multi_dim_index_vectors() {
    // x[i0, :, i2] for index vectors (i0, i2): index_dims [0, 2].
    let x = iota(DType::F64, &[3, 4, 5]);
    let ids = [2, 4, 0, 1, 3, 0, 1, -1];
    let idx = idx_i64(&[4, 2], &ids);
    for mode in [IndexMode::Clip, IndexMode::Fill] {
        let y = gather(&x, &idx, 0, &[0, 2], mode);
        assert_eq!(y.shape(), &[4, 4]);
        let r = Ref { os: &[3, 4, 5], is: &[4, 2], ids: &ids, bd: 0, dims: &[0, 2], mode };
        assert_eq!(y.to_vec::<f64>().unwrap(), r.gather(&x.to_vec::<f64>().unwrap()));
    }
    let y = gather(&x, &idx, 0, &[0, 2], IndexMode::Fill).to_vec::<f64>().unwrap();
    // (2, 4): x[2, j, 4] = 44 + 5j; (3, 0) is out of range in fill mode.
    assert_eq!(y[..4], [44., 49., 54., 59.]);
    assert_eq!(y[8..12], [0., 0., 0., 0.]);
    let y = gather(&x, &idx, 0, &[0, 2], IndexMode::Clip).to_vec::<f64>().unwrap();
    assert_eq!(y[8..12], [40., 45., 50., 55.]); // (3, 0) clips to (2, 0)
    assert_eq!(y[12..16], [20., 25., 30., 35.]); // (1, -1) clips to (1, 0)
                                                 // Full index vectors (point gather) of rank-1 operand give a rank-0 result.
    let v = Tensor::vec1(&[10i32, 20, 30]);
    let y = gather(&v, &idx_i64(&[1], &[2]), 0, &[0], IndexMode::Clip);
    assert_eq!(y.shape(), &[] as &[usize]);
    assert_eq!(y.to_vec::<i32>().unwrap(), vec![30]);
}

#[test]
fn gather_edge_sizes() {
    let x = iota(DType::F64, &[4, 3]);
    // No index positions.
    let y = gather(&x, &idx_i64(&[0, 1], &[]), 0, &[0], IndexMode::Clip);
    assert_eq!(y.shape(), &[0, 3]);
    // k = 0: nothing indexed, the operand repeats per position.
    let y = gather(&x, &idx_i64(&[2, 0], &[]), 0, &[], IndexMode::Fill);
    assert_eq!(y.shape(), &[2, 4, 3]);
    let xv = x.to_vec::<f64>().unwrap();
    assert_eq!(y.to_vec::<f64>().unwrap(), [xv.clone(), xv].concat());
    // An indexed axis of size 0 has nothing in range: both modes read 0.
    let e = Tensor::zeros(&ty(DType::F64, &[0, 3]));
    for mode in [IndexMode::Clip, IndexMode::Fill] {
        let y = gather(&e, &idx_i64(&[2, 1], &[0, 0]), 0, &[0], mode);
        assert_eq!(y.to_vec::<f64>().unwrap(), vec![0.; 6]);
    }
    // Empty rest dims: the slab is empty.
    let z = Tensor::zeros(&ty(DType::F32, &[3, 0]));
    assert_eq!(gather(&z, &idx_i64(&[2, 1], &[1, 2]), 0, &[0], IndexMode::Clip).shape(), &[2, 0]);
    // Size-1 everything.
    let one = Tensor::from_vec(vec![1, 1], vec![7.5f64]).unwrap();
    assert_eq!(gather(&one, &idx_i64(&[1, 1], &[0]), 0, &[0], IndexMode::Clip).to_vec::<f64>().unwrap(), vec![7.5]);
}

#[test]
fn gather_large_parallel_inputs() {
    // Leading index dim: contiguous runs of 67.
    let table = Tensor::from_fn(&ty(DType::F32, &[1000, 67]), |i| (i % 1013) as f64 * 0.5);
    let ids = lcg_values(3001, -5, 1005, 1);
    let xv = table.to_vec::<f32>().unwrap();
    for mode in [IndexMode::Clip, IndexMode::Fill] {
        let y = gather(&table, &idx_i64(&[3001, 1], &ids), 0, &[0], mode);
        let r = Ref { os: &[1000, 67], is: &[3001, 1], ids: &ids, bd: 0, dims: &[0], mode };
        assert_eq!(y.to_vec::<f32>().unwrap(), r.gather(&xv));
    }
    // Trailing index dim: runs of one element.
    let x = Tensor::from_fn(&ty(DType::I32, &[300, 401]), |i| i as f64);
    let ids = lcg_values(500, -2, 403, 2);
    let y = gather(&x, &idx_i32(&[500, 1], &ids), 0, &[1], IndexMode::Fill);
    let r = Ref { os: &[300, 401], is: &[500, 1], ids: &ids, bd: 0, dims: &[1], mode: IndexMode::Fill };
    assert_eq!(y.to_vec::<i32>().unwrap(), r.gather(&x.to_vec::<i32>().unwrap()));
    // A vector table: one element per position (the plain indexed-load
    // path), large enough to run in parallel chunks.
    let v = Tensor::from_fn(&ty(DType::F64, &[1000]), |i| i as f64 * 0.25);
    let ids = lcg_values(100_003, -3, 1003, 3);
    for mode in [IndexMode::Clip, IndexMode::Fill] {
        let r = Ref { os: &[1000], is: &[100_003, 1], ids: &ids, bd: 0, dims: &[0], mode };
        let want = r.gather(&v.to_vec::<f64>().unwrap());
        assert_eq!(gather(&v, &idx_i32(&[100_003, 1], &ids), 0, &[0], mode).to_vec::<f64>().unwrap(), want);
        assert_eq!(gather(&v, &idx_i64(&[100_003, 1], &ids), 0, &[0], mode).to_vec::<f64>().unwrap(), want);
    }
}

// ---------- scatter_add ----------

#[test]
fn scatter_add_accumulates_duplicates() {
    let x = Tensor::vec1(&[0.0f64; 4]);
    let idx = idx_i64(&[4, 1], &[1, 1, 3, 1]);
    let u = Tensor::vec1(&[1.0f64, 2., 3., 4.]);
    assert_eq!(scatter(&x, &idx, &u, 0, &[0], IndexMode::Fill).to_vec::<f64>().unwrap(), vec![0., 7., 0., 3.]);
    // Rows of a table (the embedding backward pass), integer dtypes.
    for dtype in [DType::I32, DType::I64, DType::F32] {
        let x = Tensor::full(&ty(dtype, &[3, 2]), 1.0);
        let idx = idx_i32(&[3, 1], &[2, 0, 2]);
        let u = iota(dtype, &[3, 2]);
        let y = scatter(&x, &idx, &u, 0, &[0], IndexMode::Clip);
        assert_eq!(y.dtype(), dtype);
        assert_eq!(y.to_f64_vec(), vec![3., 4., 1., 1., 5., 7.]);
    }
}

#[test]
fn scatter_add_out_of_range_modes() {
    let x = Tensor::vec1(&[100.0f64, 200., 300., 400.]);
    let idx = idx_i64(&[4, 1], &[-1, 4, 9, 2]);
    let u = Tensor::vec1(&[1.0f64, 2., 3., 4.]);
    // clip: -1 -> 0, 4 -> 3, 9 -> 3
    assert_eq!(scatter(&x, &idx, &u, 0, &[0], IndexMode::Clip).to_vec::<f64>().unwrap(), vec![101., 200., 304., 405.]);
    // fill: only the in-range update lands
    assert_eq!(scatter(&x, &idx, &u, 0, &[0], IndexMode::Fill).to_vec::<f64>().unwrap(), vec![100., 200., 304., 400.]);
    // An indexed axis of size 0: everything is dropped, whatever the mode.
    let e = Tensor::zeros(&ty(DType::F32, &[0, 2]));
    let u = Tensor::full(&ty(DType::F32, &[1, 2]), 1.0);
    for mode in [IndexMode::Clip, IndexMode::Fill] {
        let y = scatter(&e, &idx_i64(&[1, 1], &[0]), &u, 0, &[0], mode);
        assert_eq!(y.shape(), &[0, 2]);
    }
}

#[test]
fn scatter_add_batch_and_multi_dim() {
    // batch_dims = 1, index_dims = [1, 3] on [2, 3, 2, 4].
    let os = [2, 3, 2, 4];
    let x = iota(DType::F64, &os);
    let ids = [0, 3, 2, 0, 0, 3, -1, 9, 1, 1, 1, 1];
    let is = [2, 3, 2];
    let idx = idx_i64(&is, &ids);
    for mode in [IndexMode::Clip, IndexMode::Fill] {
        let r = Ref { os: &os, is: &is, ids: &ids, bd: 1, dims: &[1, 3], mode };
        let ushape = r.out_shape();
        assert_eq!(ushape, vec![2, 3, 2]);
        let u = Tensor::from_fn(&ty(DType::F64, &ushape), |i| (i as f64 + 1.0) * 1000.0);
        let y = scatter(&x, &idx, &u, 1, &[1, 3], mode);
        assert_eq!(y.to_vec::<f64>().unwrap(), r.scatter(&x.to_vec::<f64>().unwrap(), &u.to_vec::<f64>().unwrap()));
    }
    // Hand check: batch 0, position 0 hits x[0, 0, :, 3] (elements 3 and 7) with 1000, 2000;
    // position 2 hits the same place again with 5000, 6000.
    let r = Ref { os: &os, is: &is, ids: &ids, bd: 1, dims: &[1, 3], mode: IndexMode::Fill };
    let u = Tensor::from_fn(&ty(DType::F64, &r.out_shape()), |i| (i as f64 + 1.0) * 1000.0);
    let y = scatter(&x, &idx, &u, 1, &[1, 3], IndexMode::Fill).to_vec::<f64>().unwrap();
    assert_eq!((y[3], y[7]), (3. + 6000., 7. + 8000.));
    assert_eq!(y[24 + 16 + 1], 41.); // untouched: batch 1's (-1, 9) is dropped
                                     // batch 1's (1, 1) is hit by two positions
    assert_eq!((y[24 + 8 + 1], y[24 + 8 + 5]), (33. + 9000. + 11000., 37. + 10000. + 12000.));
}

#[test]
fn gather_and_scatter_add_are_transposes() {
    // <gather(x, idx), u> == <x, scatter_add(0, idx, u)> in both modes.
    let os = [3, 5, 4];
    let x = Tensor::from_fn(&ty(DType::F64, &os), |i| ((i * 7) % 11) as f64 - 5.0);
    let ids = lcg_values(6 * 2, -2, 7, 3);
    let idx = idx_i64(&[3, 2, 2], &ids);
    for (bd, dims) in [(1usize, vec![1usize, 2]), (0, vec![0, 1])] {
        let idx = if bd == 1 { idx.clone() } else { idx.clone().reshape(vec![6, 2]).unwrap() };
        for mode in [IndexMode::Clip, IndexMode::Fill] {
            let g = gather(&x, &idx, bd, &dims, mode);
            let u = Tensor::from_fn(&g.ty(), |i| ((i * 5) % 7) as f64 - 3.0);
            let s = scatter(&Tensor::zeros(&x.ty()), &idx, &u, bd, &dims, mode);
            let lhs: f64 = g.to_f64_vec().iter().zip(u.to_f64_vec()).map(|(a, b)| a * b).sum();
            let rhs: f64 = x.to_f64_vec().iter().zip(s.to_f64_vec()).map(|(a, b)| a * b).sum();
            assert_eq!(lhs, rhs, "bd={bd} dims={dims:?} {mode}");
        }
    }
}

#[test]
fn scatter_add_edge_sizes() {
    let x = iota(DType::I32, &[4, 3]);
    // No positions: the operand comes back unchanged.
    let y = scatter(&x, &idx_i64(&[0, 1], &[]), &Tensor::zeros(&ty(DType::I32, &[0, 3])), 0, &[0], IndexMode::Clip);
    assert_eq!(y, x);
    // k = 0: every position adds to the whole operand.
    let u = Tensor::full(&ty(DType::I32, &[2, 4, 3]), 1.0);
    let y = scatter(&x, &idx_i64(&[2, 0], &[]), &u, 0, &[], IndexMode::Fill);
    assert_eq!(y.to_vec::<i32>().unwrap(), (2..14).collect::<Vec<i32>>());
    // Point scatter into a rank-1 operand with rank-0 updates.
    let v = Tensor::vec1(&[1i64, 2, 3]);
    let y = scatter(&v, &idx_i64(&[1], &[1]), &Tensor::scalar(10i64), 0, &[0], IndexMode::Clip);
    assert_eq!(y.to_vec::<i64>().unwrap(), vec![1, 12, 3]);
    // Integer accumulation wraps instead of trapping.
    let m = Tensor::vec1(&[i32::MAX]);
    let y = scatter(&m, &idx_i64(&[1, 1], &[0]), &Tensor::vec1(&[1i32]), 0, &[0], IndexMode::Clip);
    assert_eq!(y.to_vec::<i32>().unwrap(), vec![i32::MIN]);
}

/// f32 sums are bit-exact with the sequential reference (same order) on 1 and 2 threads.
#[test]
fn scatter_add_large_is_deterministic() {
    let threads = |n: usize| rayon::ThreadPoolBuilder::new().num_threads(n).build().unwrap();
    // Long runs (even split of the output across threads).
    let x = Tensor::from_fn(&ty(DType::F32, &[1000, 64]), |i| (i % 17) as f64 * 0.1);
    let ids = lcg_values(8000, -3, 1003, 4);
    let idx = idx_i64(&[8000, 1], &ids);
    let u = Tensor::from_fn(&ty(DType::F32, &[8000, 64]), |i| ((i * 31) % 1001) as f64 * 1e-3 + 0.1);
    for mode in [IndexMode::Clip, IndexMode::Fill] {
        let r = Ref { os: &[1000, 64], is: &[8000, 1], ids: &ids, bd: 0, dims: &[0], mode };
        let expected = r.scatter(&x.to_vec::<f32>().unwrap(), &u.to_vec::<f32>().unwrap());
        for n in [1, 2] {
            let y = threads(n).install(|| scatter(&x, &idx, &u, 0, &[0], mode));
            assert_eq!(y.to_vec::<f32>().unwrap(), expected, "{n} threads, {mode}");
        }
    }
    // Many batches, short runs (batch-aligned split).
    let os = [64, 200, 5];
    let x = Tensor::from_fn(&ty(DType::F32, &os), |i| (i % 13) as f64);
    let ids = lcg_values(64 * 300, -1, 201, 5);
    let idx = idx_i32(&[64, 300, 1], &ids);
    let u = Tensor::from_fn(&ty(DType::F32, &[64, 300, 5]), |i| ((i * 7) % 97) as f64 * 0.01);
    let r = Ref { os: &os, is: &[64, 300, 1], ids: &ids, bd: 1, dims: &[1], mode: IndexMode::Fill };
    let expected = r.scatter(&x.to_vec::<f32>().unwrap(), &u.to_vec::<f32>().unwrap());
    for n in [1, 2] {
        let y = threads(n).install(|| scatter(&x, &idx, &u, 1, &[1], IndexMode::Fill));
        assert_eq!(y.to_vec::<f32>().unwrap(), expected, "{n} threads");
    }
}

/// Element scatters (one index per update, the max-pooling gradient) take a
/// path of their own: bit-exact with the sequential reference on 1 and 2
/// threads, with duplicates and out-of-range indices, with and without a
/// batch dim.
#[test]
fn large_element_scatters_match_the_reference() {
    let threads = |n: usize| rayon::ThreadPoolBuilder::new().num_threads(n).build().unwrap();
    let ids = lcg_values(64 * 2000, -3, 5003, 6);
    for (bd, os, is) in [(0usize, vec![5000usize], vec![128_000usize, 1]), (1, vec![64, 5000], vec![64, 2000, 1])] {
        let x = Tensor::from_fn(&ty(DType::F32, &os), |i| (i % 13) as f64 * 0.25);
        let idx = idx_i64(&is, &ids);
        let u = Tensor::from_fn(&ty(DType::F32, &is[..is.len() - 1]), |i| ((i * 7) % 97) as f64 * 0.01);
        let dims = [bd];
        for mode in [IndexMode::Clip, IndexMode::Fill] {
            let r = Ref { os: &os, is: &is, ids: &ids, bd, dims: &dims, mode };
            let expected = r.scatter(&x.to_vec::<f32>().unwrap(), &u.to_vec::<f32>().unwrap());
            for n in [1, 2] {
                let y = threads(n).install(|| scatter(&x, &idx, &u, bd, &dims, mode));
                assert_eq!(y.to_vec::<f32>().unwrap(), expected, "bd={bd} {n} threads, {mode}");
            }
        }
    }
}

/// Element scatters whose indices come in runs of one target (the
/// transpose of a gather by a permutation table, GradBench `det`) add each
/// run in a register: bit-exact with the sequential reference on 1 and 2
/// threads for runs of every length (1 to several segments of positions),
/// runs interrupted by out-of-range indices, a batch dim, and every dtype's
/// accumulation.
#[test]
fn element_scatters_in_runs_match_the_reference() {
    let threads = |n: usize| rayon::ThreadPoolBuilder::new().num_threads(n).build().unwrap();
    // Runs of lengths 1, 2, 3, ..., 200 cycling over targets, with a few
    // out-of-range entries (dropped by Fill, clipped to an edge by Clip).
    let mut ids = Vec::new();
    let mut t = 0i64;
    for len in (1..200).chain([720, 5, 1, 1, 64, 65, 63, 128]) {
        t = (t * 7 + 3) % 23;
        for j in 0..len {
            ids.push(if j % 97 == 50 {
                -1
            } else if j % 131 == 70 {
                23
            } else {
                t
            });
        }
    }
    let m = ids.len() / 2;
    ids.truncate(2 * m);
    // Eight batches of the same pattern: enough updates and batches for two
    // threads to split the output (batch-aligned ranges).
    let ids8 = ids.repeat(4);
    for (bd, os, is) in
        [(0usize, vec![23usize], vec![2 * m, 1]), (1, vec![2, 23], vec![2, m, 1]), (1, vec![8, 23], vec![8, m, 1])]
    {
        let ids = if is[0] == 8 { &ids8 } else { &ids };
        let idx = idx_i64(&is, ids);
        let dims = [bd];
        for mode in [IndexMode::Clip, IndexMode::Fill] {
            let r = Ref { os: &os, is: &is, ids, bd, dims: &dims, mode };
            let x = Tensor::from_fn(&ty(DType::F64, &os), |i| (i % 5) as f64 * 0.3);
            let u = Tensor::from_fn(&ty(DType::F64, &is[..is.len() - 1]), |i| ((i * 7919) % 1013) as f64 * 1e-3);
            let expected = r.scatter(&x.to_vec::<f64>().unwrap(), &u.to_vec::<f64>().unwrap());
            for n in [1, 2] {
                let y = threads(n).install(|| scatter(&x, &idx, &u, bd, &dims, mode));
                assert_eq!(y.to_vec::<f64>().unwrap(), expected, "f64 bd={bd} {n} threads, {mode}");
            }
            let x = Tensor::from_fn(&ty(DType::F32, &os), |i| (i % 5) as f64 * 0.3);
            let u = Tensor::from_fn(&ty(DType::F32, &is[..is.len() - 1]), |i| ((i * 7919) % 1013) as f64 * 1e-3);
            let expected = r.scatter(&x.to_vec::<f32>().unwrap(), &u.to_vec::<f32>().unwrap());
            let y = scatter(&x, &idx, &u, bd, &dims, mode);
            assert_eq!(y.to_vec::<f32>().unwrap(), expected, "f32 bd={bd}, {mode}");
            let x = Tensor::from_fn(&ty(DType::I32, &os), |i| i as f64);
            let u = Tensor::from_fn(&ty(DType::I32, &is[..is.len() - 1]), |i| ((i * 31) % 17) as f64 - 8.0);
            let expected = r.scatter(&x.to_vec::<i32>().unwrap(), &u.to_vec::<i32>().unwrap());
            let y = scatter(&x, &idx, &u, bd, &dims, mode);
            assert_eq!(y.to_vec::<i32>().unwrap(), expected, "i32 bd={bd}, {mode}");
        }
    }
}

// ---------- gather / scatter_add property test ----------

#[derive(Debug, Clone)]
struct Case {
    batch: Vec<usize>,
    dims: Vec<usize>,
    indexed: Vec<bool>,
    positions: Vec<usize>,
    fill: bool,
    i32_indices: bool,
    seed: u64,
}

fn case() -> impl Strategy<Value = Case> {
    (0usize..=2, 0usize..=3, 0usize..=2).prop_flat_map(|(bd, extra, ni)| {
        (
            prop::collection::vec(0usize..=3, bd),
            prop::collection::vec(0usize..=4, extra),
            prop::collection::vec(any::<bool>(), extra),
            prop::collection::vec(0usize..=3, ni),
            any::<bool>(),
            any::<bool>(),
            any::<u64>(),
        )
            .prop_map(|(batch, dims, indexed, positions, fill, i32_indices, seed)| Case {
                batch,
                dims,
                indexed,
                positions,
                fill,
                i32_indices,
                seed,
            })
    })
}

proptest! {
    #[test]
    fn gather_scatter_match_reference(c in case()) {
        let bd = c.batch.len();
        let os: Vec<usize> = c.batch.iter().chain(&c.dims).copied().collect();
        let index_dims: Vec<usize> = (0..c.dims.len()).filter(|&j| c.indexed[j]).map(|j| bd + j).collect();
        let k = index_dims.len();
        let is: Vec<usize> = c.batch.iter().chain(&c.positions).copied().chain([k]).collect();
        let n_idx: usize = is.iter().product();
        let max_dim = c.dims.iter().copied().max().unwrap_or(0) as i64;
        let ids = lcg_values(n_idx, -2, max_dim + 3, c.seed);
        let idx = if c.i32_indices { idx_i32(&is, &ids) } else { idx_i64(&is, &ids) };
        let mode = if c.fill { IndexMode::Fill } else { IndexMode::Clip };
        let x = Tensor::from_fn(&ty(DType::F64, &os), |i| i as f64 + 1.0);
        let r = Ref { os: &os, is: &is, ids: &ids, bd, dims: &index_dims, mode };

        let g = gather(&x, &idx, bd, &index_dims, mode);
        prop_assert_eq!(g.shape(), &r.out_shape()[..]);
        prop_assert_eq!(g.to_vec::<f64>().unwrap(), r.gather(&x.to_vec::<f64>().unwrap()));

        let u = Tensor::from_fn(&g.ty(), |i| ((i * 7) % 13) as f64 - 6.0);
        let s = scatter(&x, &idx, &u, bd, &index_dims, mode);
        prop_assert_eq!(s.shape(), &os[..]);
        prop_assert_eq!(s.to_vec::<f64>().unwrap(), r.scatter(&x.to_vec::<f64>().unwrap(), &u.to_vec::<f64>().unwrap()));
    }
}

// ---------- gather / scatter_add errors ----------

#[test]
fn gather_shape_errors() {
    let mut b = Builder::new("f");
    let x = b.param(ty(DType::F32, &[3, 4]));
    let fidx = b.param(ty(DType::F32, &[2, 1]));
    let idx = b.param(ty(DType::I32, &[2, 1]));
    let idx2 = b.param(ty(DType::I64, &[2, 2]));
    let bidx = b.param(ty(DType::I64, &[4, 2, 1]));
    let clip = IndexMode::Clip;
    let te = type_error(b.gather(x, fidx, 0, &[0], clip).unwrap_err());
    assert_eq!(te.prim, "gather[batch_dims=0, index_dims=(0), mode=clip]");
    assert!(te.expected.contains("integer indices"), "{}", te.expected);
    // last indices dim must be k
    let te = type_error(b.gather(x, idx, 0, &[0, 1], IndexMode::Fill).unwrap_err());
    assert_eq!(te.prim, "gather[batch_dims=0, index_dims=(0,1), mode=fill]");
    assert!(te.expected.contains("last indices dim to be 2"), "{}", te.expected);
    // index_dims out of range, repeated / decreasing, inside the batch dims
    assert!(type_error(b.gather(x, idx, 0, &[2], clip).unwrap_err()).expected.contains("operand axis"));
    assert!(type_error(b.gather(x, idx2, 0, &[1, 0], clip).unwrap_err()).expected.contains("strictly increasing"));
    assert!(type_error(b.gather(x, idx2, 0, &[1, 1], clip).unwrap_err()).expected.contains("strictly increasing"));
    let x2 = b.param(ty(DType::F32, &[2, 4]));
    assert!(type_error(b.gather(x2, idx, 1, &[0], clip).unwrap_err()).expected.contains("not a batch dim"));
    // batch sizes must match (3 vs 4)
    let te = type_error(b.gather(x, bidx, 1, &[1], clip).unwrap_err());
    assert!(te.expected.contains("batch dims"), "{}", te.expected);
    // indices too small for batch_dims + the index-vector dim
    assert!(type_error(b.gather(x, idx, 2, &[], clip).unwrap_err()).expected.contains("rank >= 3"));
    // arity
    let te = type_error(b.emit(Gather { batch_dims: 0, index_dims: vec![0], mode: clip }, &[x]).unwrap_err());
    assert_eq!(te.expected, "expected 2 operands");
}

#[test]
fn scatter_add_shape_errors() {
    let mut b = Builder::new("f");
    let x = b.param(ty(DType::F32, &[3, 4]));
    let xb = b.param(ty(DType::Bool, &[3, 4]));
    let idx = b.param(ty(DType::I32, &[2, 1]));
    let u = b.param(ty(DType::F32, &[2, 4]));
    let u64_ = b.param(ty(DType::F64, &[2, 4]));
    let ubad = b.param(ty(DType::F32, &[2, 3]));
    let ub = b.param(ty(DType::Bool, &[2, 4]));
    let fill = IndexMode::Fill;
    let te = type_error(b.scatter_add(xb, idx, ub, 0, &[0], fill).unwrap_err());
    assert_eq!(te.prim, "scatter_add[batch_dims=0, index_dims=(0), mode=fill]");
    assert!(te.expected.contains("numeric"), "{}", te.expected);
    assert!(type_error(b.scatter_add(x, idx, u64_, 0, &[0], fill).unwrap_err()).expected.contains("dtype"));
    let te = type_error(b.scatter_add(x, idx, ubad, 0, &[0], fill).unwrap_err());
    assert!(te.expected.contains("shape (2,4)"), "{}", te.expected);
    assert!(type_error(b.scatter_add(x, u, u, 0, &[0], fill).unwrap_err()).expected.contains("integer indices"));
    let te = type_error(b.emit(ScatterAdd { batch_dims: 0, index_dims: vec![0], mode: fill }, &[x, idx]).unwrap_err());
    assert_eq!(te.expected, "expected 3 operands");
    // and the valid call goes through
    assert!(b.scatter_add(x, idx, u, 0, &[0], fill).is_ok());
}

// ---------- dynamic_slice ----------

fn s32(v: i32) -> Tensor {
    Tensor::scalar(v)
}

fn s64(v: i64) -> Tensor {
    Tensor::scalar(v)
}

/// Naive dynamic slice with XLA clamping.
fn ref_dslice<T: Copy>(x: &[T], shape: &[usize], starts: &[i64], sizes: &[usize]) -> Vec<T> {
    let st: Vec<usize> =
        starts.iter().zip(shape.iter().zip(sizes)).map(|(&s, (&n, &z))| s.clamp(0, (n - z) as i64) as usize).collect();
    let n: usize = sizes.iter().product();
    (0..n)
        .map(|j| {
            let m: Vec<usize> = unravel(j, sizes).iter().zip(&st).map(|(a, b)| a + b).collect();
            x[ravel(&m, shape)]
        })
        .collect()
}

/// Naive dynamic update slice with XLA clamping.
fn ref_dus<T: Copy>(x: &[T], shape: &[usize], u: &[T], ushape: &[usize], starts: &[i64]) -> Vec<T> {
    let st: Vec<usize> =
        starts.iter().zip(shape.iter().zip(ushape)).map(|(&s, (&n, &z))| s.clamp(0, (n - z) as i64) as usize).collect();
    let mut out = x.to_vec();
    for (j, &v) in u.iter().enumerate() {
        let m: Vec<usize> = unravel(j, ushape).iter().zip(&st).map(|(a, b)| a + b).collect();
        out[ravel(&m, shape)] = v;
    }
    out
}

#[test]
fn dynamic_slice_values_and_clamping() {
    let x = iota(DType::F64, &[4, 5]);
    let y = dslice(&x, &[s32(1), s32(2)], &[2, 3]);
    assert_eq!(y.shape(), &[2, 3]);
    assert_eq!(y.to_vec::<f64>().unwrap(), vec![7., 8., 9., 12., 13., 14.]);
    // Starts are clamped so the slice fits: (3, -1) -> (2, 0); (100, 100) -> (2, 2).
    assert_eq!(dslice(&x, &[s64(3), s32(-1)], &[2, 3]).to_vec::<f64>().unwrap(), vec![10., 11., 12., 15., 16., 17.]);
    assert_eq!(
        dslice(&x, &[s64(100), s64(i64::MAX)], &[2, 3]).to_vec::<f64>().unwrap(),
        vec![12., 13., 14., 17., 18., 19.]
    );
    assert_eq!(dslice(&x, &[s64(i64::MIN), s32(i32::MIN)], &[1, 2]).to_vec::<f64>().unwrap(), vec![0., 1.]);
    // Full-size slices ignore the starts.
    assert_eq!(dslice(&x, &[s32(3), s32(3)], &[4, 5]), x);
    // Other dtypes.
    let b = Tensor::vec1(&[true, false, false, true]);
    assert_eq!(dslice(&b, &[s32(2)], &[2]).to_vec::<bool>().unwrap(), vec![false, true]);
    let i = iota(DType::I64, &[2, 3, 4]);
    let y = dslice(&i, &[s32(1), s64(1), s32(1)], &[1, 2, 2]);
    assert_eq!(y.to_vec::<i64>().unwrap(), vec![17, 18, 21, 22]);
    let f = iota(DType::F32, &[6]);
    assert_eq!(dslice(&f, &[s32(4)], &[3]).to_vec::<f32>().unwrap(), vec![3., 4., 5.]);
}

#[test]
fn dynamic_slice_edge_sizes() {
    // Rank 0: no starts, the value itself.
    let s = Tensor::scalar(2.5f32);
    assert_eq!(dslice(&s, &[], &[]), s);
    // Empty slices and empty operands.
    let x = iota(DType::I32, &[3, 4]);
    assert_eq!(dslice(&x, &[s32(1), s32(1)], &[0, 2]).shape(), &[0, 2]);
    let e = Tensor::zeros(&ty(DType::F64, &[0, 4]));
    assert_eq!(dslice(&e, &[s32(5), s32(1)], &[0, 3]).shape(), &[0, 3]);
    // Size-1 dims.
    let y = dslice(&x, &[s32(2), s32(3)], &[1, 1]);
    assert_eq!(y.to_vec::<i32>().unwrap(), vec![11]);
}

#[test]
fn dynamic_slice_large_parallel() {
    for (shape, sizes, starts) in [
        (vec![1000usize, 301], vec![517usize, 150], vec![300i64, 100]),
        (vec![3, 100_001], vec![2, 60_000], vec![1, 40_000]),
        (vec![40, 50, 60], vec![40, 20, 60], vec![0, 25, 0]), // whole trailing axis fuses into runs
    ] {
        let x = Tensor::from_fn(&ty(DType::F32, &shape), |i| (i % 100_003) as f64);
        let st: Vec<Tensor> = starts.iter().map(|&s| s64(s)).collect();
        let y = dslice(&x, &st, &sizes);
        assert_eq!(y.to_vec::<f32>().unwrap(), ref_dslice(&x.to_vec::<f32>().unwrap(), &shape, &starts, &sizes));
    }
}

// ---------- dynamic_update_slice ----------

#[test]
fn dynamic_update_slice_values_and_clamping() {
    let x = iota(DType::F64, &[3, 4]);
    let u = Tensor::from_vec(vec![2, 2], vec![-1.0f64, -2., -3., -4.]).unwrap();
    let y = dus(&x, &u, &[s32(1), s32(1)]);
    assert_eq!(y.to_vec::<f64>().unwrap(), vec![0., 1., 2., 3., 4., -1., -2., 7., 8., -3., -4., 11.]);
    // Clamped: (5, -3) -> (1, 0)
    let y = dus(&x, &u, &[s64(5), s64(-3)]);
    assert_eq!(y.to_vec::<f64>().unwrap(), vec![0., 1., 2., 3., -1., -2., 6., 7., -3., -4., 10., 11.]);
    // Other dtypes and mixed start dtypes.
    let b = Tensor::vec1(&[false; 5]);
    let y = dus(&b, &Tensor::vec1(&[true, true]), &[s64(4)]);
    assert_eq!(y.to_vec::<bool>().unwrap(), vec![false, false, false, true, true]);
    let i = iota(DType::I32, &[2, 3]);
    let y = dus(&i, &Tensor::from_vec(vec![2, 1], vec![9i32, 9]).unwrap(), &[s32(0), s64(2)]);
    assert_eq!(y.to_vec::<i32>().unwrap(), vec![0, 1, 9, 3, 4, 9]);
    let f = iota(DType::F32, &[2, 2]);
    assert_eq!(dus(&f, &f, &[s32(1), s32(1)]), f);
    let l = iota(DType::I64, &[3]);
    assert_eq!(dus(&l, &Tensor::vec1(&[7i64]), &[s32(0)]).to_vec::<i64>().unwrap(), vec![7, 1, 2]);
}

#[test]
fn dynamic_update_slice_edge_sizes() {
    let s = Tensor::scalar(1.0f64);
    assert_eq!(dus(&s, &Tensor::scalar(4.0f64), &[]).to_vec::<f64>().unwrap(), vec![4.0]);
    let x = iota(DType::I32, &[2, 3]);
    assert_eq!(dus(&x, &Tensor::zeros(&ty(DType::I32, &[0, 3])), &[s32(1), s32(0)]), x);
    let e = Tensor::zeros(&ty(DType::F32, &[0, 3]));
    assert_eq!(dus(&e, &Tensor::zeros(&ty(DType::F32, &[0, 1])), &[s32(0), s32(2)]).shape(), &[0, 3]);
}

#[test]
fn dynamic_update_slice_large_parallel() {
    for (shape, ushape, starts) in [
        (vec![1000usize, 301], vec![517usize, 150], vec![700i64, 100]), // row start clamps to 483
        (vec![3, 100_001], vec![2, 60_000], vec![1, -7]),
        (vec![40, 50, 60], vec![7, 50, 60], vec![11, 0, 0]),
        (vec![100_000], vec![99_999], vec![5]),
    ] {
        let x = Tensor::from_fn(&ty(DType::F64, &shape), |i| i as f64);
        let u = Tensor::from_fn(&ty(DType::F64, &ushape), |i| -(i as f64) - 1.0);
        let st: Vec<Tensor> = starts.iter().map(|&s| s64(s)).collect();
        let y = dus(&x, &u, &st);
        let expected = ref_dus(&x.to_vec::<f64>().unwrap(), &shape, &u.to_vec::<f64>().unwrap(), &ushape, &starts);
        assert_eq!(y.to_vec::<f64>().unwrap(), expected);
    }
}

proptest! {
    #[test]
    fn dynamic_slices_match_reference(
        (shape, sizes, starts) in prop::collection::vec(0usize..=5, 0..=3).prop_flat_map(|shape| {
            let sizes = shape.iter().map(|&n| 0..=n).collect::<Vec<_>>();
            let starts = shape.iter().map(|&n| -3i64..=n as i64 + 3).collect::<Vec<_>>();
            (Just(shape), sizes, starts)
        }),
        i32_starts in any::<bool>(),
    ) {
        let x = Tensor::from_fn(&ty(DType::I64, &shape), |i| i as f64 + 1.0);
        let st: Vec<Tensor> = starts.iter().map(|&s| if i32_starts { s32(s as i32) } else { s64(s) }).collect();
        let y = dslice(&x, &st, &sizes);
        prop_assert_eq!(y.shape(), &sizes[..]);
        prop_assert_eq!(y.to_vec::<i64>().unwrap(), ref_dslice(&x.to_vec::<i64>().unwrap(), &shape, &starts, &sizes));
        let u = Tensor::from_fn(&ty(DType::I64, &sizes), |i| -(i as f64) - 1.0);
        let z = dus(&x, &u, &st);
        let expected = ref_dus(&x.to_vec::<i64>().unwrap(), &shape, &u.to_vec::<i64>().unwrap(), &sizes, &starts);
        prop_assert_eq!(z.to_vec::<i64>().unwrap(), expected);
    }
}

// ---------- dynamic slice errors ----------

#[test]
fn dynamic_slice_shape_errors() {
    let mut b = Builder::new("f");
    let x = b.param(ty(DType::F32, &[3, 4]));
    let i = b.param(TensorType::scalar(DType::I32));
    let l = b.param(TensorType::scalar(DType::I64));
    let f = b.param(TensorType::scalar(DType::F32));
    let v = b.param(ty(DType::I32, &[1]));
    let te = type_error(b.dynamic_slice(x, &[i, l], &[4, 1]).unwrap_err());
    assert_eq!(te.prim, "dynamic_slice[sizes=(4,1)]");
    assert!(te.expected.contains("exceeds operand dim 0"), "{}", te.expected);
    assert!(type_error(b.dynamic_slice(x, &[i, l], &[1]).unwrap_err()).expected.contains("2 sizes"));
    assert!(type_error(b.dynamic_slice(x, &[i], &[1, 1]).unwrap_err()).expected.contains("3 operands"));
    assert!(type_error(b.dynamic_slice(x, &[i, f], &[1, 1]).unwrap_err()).expected.contains("start index 1"));
    assert!(type_error(b.dynamic_slice(x, &[v, i], &[1, 1]).unwrap_err()).expected.contains("rank-0"));
    let te = type_error(b.emit(graft_core::ops::index::DynamicSlice { sizes: vec![] }, &[]).unwrap_err());
    assert_eq!(te.prim, "dynamic_slice[sizes=()]");
    assert!(b.dynamic_slice(x, &[i, l], &[3, 0]).is_ok());
}

#[test]
fn dynamic_update_slice_shape_errors() {
    let mut b = Builder::new("f");
    let x = b.param(ty(DType::F32, &[3, 4]));
    let u = b.param(ty(DType::F32, &[2, 2]));
    let big = b.param(ty(DType::F32, &[2, 5]));
    let ud = b.param(ty(DType::F64, &[2, 2]));
    let ur = b.param(ty(DType::F32, &[2]));
    let i = b.param(TensorType::scalar(DType::I32));
    let f = b.param(TensorType::scalar(DType::F64));
    let te = type_error(b.dynamic_update_slice(x, big, &[i, i]).unwrap_err());
    assert_eq!(te.prim, "dynamic_update_slice");
    assert!(te.expected.contains("update dim 1"), "{}", te.expected);
    assert!(type_error(b.dynamic_update_slice(x, ud, &[i, i]).unwrap_err()).expected.contains("dtype"));
    assert!(type_error(b.dynamic_update_slice(x, ur, &[i, i]).unwrap_err()).expected.contains("rank 2"));
    assert!(type_error(b.dynamic_update_slice(x, u, &[i]).unwrap_err()).expected.contains("4 operands"));
    assert!(type_error(b.dynamic_update_slice(x, u, &[f, i]).unwrap_err()).expected.contains("start index 0"));
    let te = type_error(b.emit(graft_core::ops::index::DynamicUpdateSlice, &[x]).unwrap_err());
    assert!(te.expected.contains("an operand, an update"), "{}", te.expected);
    assert!(b.dynamic_update_slice(x, u, &[i, i]).is_ok());
}

#[test]
fn index_mode_spelling_round_trips() {
    for mode in [IndexMode::Clip, IndexMode::Fill] {
        assert_eq!(IndexMode::parse(&mode.to_string()), Some(mode));
    }
    assert_eq!(IndexMode::Clip.to_string(), "clip");
    assert_eq!(IndexMode::parse("wrap"), None);
}

#[test]
fn printed_forms() {
    let mut b = Builder::new("g");
    let x = b.param(ty(DType::F32, &[4, 3]));
    let idx = b.param(ty(DType::I32, &[2, 1]));
    let s = b.param(TensorType::scalar(DType::I64));
    let g = b.gather(x, idx, 0, &[0], IndexMode::Fill).unwrap();
    let sc = b.scatter_add(x, idx, g, 0, &[0], IndexMode::Clip).unwrap();
    let d = b.dynamic_slice(sc, &[s, s], &[2, 2]).unwrap();
    let u = b.dynamic_update_slice(x, d, &[s, s]).unwrap();
    let f = b.finish(&[u]).unwrap();
    assert_eq!(
        f.to_string(),
        "func @g(%0: f32[4,3], %1: i32[2,1], %2: i64[]) -> (f32[4,3]) {\n  \
         %3 = gather[batch_dims=0, index_dims=(0), mode=fill] %0, %1 : f32[2,3]\n  \
         %4 = scatter_add[batch_dims=0, index_dims=(0), mode=clip] %0, %1, %3 : f32[4,3]\n  \
         %5 = dynamic_slice[sizes=(2,2)] %4, %2, %2 : f32[2,2]\n  \
         %6 = dynamic_update_slice %0, %5, %2, %2 : f32[4,3]\n  \
         return %6\n}\n"
    );
}
