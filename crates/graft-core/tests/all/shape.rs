//! Forward tests of the data-movement primitives (broadcast_in_dim, reshape,
//! transpose, slice, pad, concatenate, reverse) against naive reference
//! loops that walk the output index by index through explicit strides, for
//! every dtype; property tests over random shapes and parameters (inferred
//! type == kernel output == reference); large inputs that take the parallel
//! and tiled paths; and shape-rule errors for every primitive.

use crate::common::{ravel, unravel};
use graft_core::ir::print_func;
use graft_core::{Builder, DType, Executable, IrError, Tensor, TensorType, Value};
use proptest::prelude::*;

// ---------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------

/// Builds a one-output function over `inputs`, runs it, and returns the type
/// the builder inferred together with the result.
fn run(
    inputs: &[&Tensor],
    build: impl FnOnce(&mut Builder, &[Value]) -> Result<Value, IrError>,
) -> (TensorType, Tensor) {
    let mut b = Builder::new("f");
    let ps: Vec<Value> = inputs.iter().map(|t| b.param(t.ty())).collect();
    let y = build(&mut b, &ps).unwrap();
    let ty = b.ty(y).unwrap().clone();
    let f = b.finish(&[y]).unwrap();
    let out = Executable::new(f).unwrap().run(inputs).unwrap().remove(0);
    assert_eq!(out.ty(), ty, "kernel output type differs from the inferred type");
    (ty, out)
}

/// The type error a builder call returned, asserting it is one.
fn type_err(r: Result<Value, IrError>, prim: &str) -> graft_core::TypeError {
    match r {
        Err(IrError::Type(te)) => {
            assert!(te.prim.starts_with(prim), "error names {:?}, expected {prim}", te.prim);
            te
        }
        other => panic!("expected a type error from {prim}, got {other:?}"),
    }
}

/// Distinct, exactly representable values per flat index (bool: a pattern).
fn sample(dtype: DType, shape: &[usize], seed: usize) -> Tensor {
    Tensor::from_fn(&TensorType::new(dtype, shape.to_vec()), |i| match dtype {
        DType::Bool => ((i + seed) * 7).is_multiple_of(3) as u8 as f64,
        DType::F16 | DType::F32 | DType::F64 => (i + seed) as f64 * 0.5 - 3.25,
        DType::I32 | DType::I64 => (i + seed) as f64 - 5.0,
        DType::U32 => (i + seed) as f64,
    })
}

fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// A reference result: shape plus values as f64.
type Ref = (Vec<usize>, Vec<f64>);

fn as_ref(t: &Tensor) -> Ref {
    (t.shape().to_vec(), t.to_f64_vec())
}

fn assert_matches(out: &Tensor, dtype: DType, r: &Ref) {
    assert_eq!(out.dtype(), dtype);
    assert_eq!(out.shape(), &r.0[..], "shape");
    let got = out.to_f64_vec();
    assert_eq!(got.len(), r.1.len());
    for (i, (g, e)) in got.iter().zip(&r.1).enumerate() {
        assert!(g == e, "element {i} (index {:?}): got {g}, expected {e}", unravel(i, &r.0));
    }
}

// ---------------------------------------------------------------------------
// Naive references
// ---------------------------------------------------------------------------

fn ref_broadcast(x: &Ref, shape: &[usize], dims: &[usize]) -> Ref {
    let vals = (0..numel(shape))
        .map(|f| {
            let idx = unravel(f, shape);
            let xi: Vec<usize> = (0..x.0.len()).map(|i| if x.0[i] == 1 { 0 } else { idx[dims[i]] }).collect();
            x.1[ravel(&xi, &x.0)]
        })
        .collect();
    (shape.to_vec(), vals)
}

fn ref_transpose(x: &Ref, perm: &[usize]) -> Ref {
    let shape: Vec<usize> = perm.iter().map(|&p| x.0[p]).collect();
    let vals = (0..numel(&shape))
        .map(|f| {
            let idx = unravel(f, &shape);
            let mut xi = vec![0; perm.len()];
            for (i, &p) in perm.iter().enumerate() {
                xi[p] = idx[i];
            }
            x.1[ravel(&xi, &x.0)]
        })
        .collect();
    (shape, vals)
}

fn ref_slice(x: &Ref, start: &[usize], stop: &[usize], stride: &[usize]) -> Ref {
    let shape: Vec<usize> =
        (0..x.0.len()).map(|i| if stop[i] > start[i] { (stop[i] - start[i] - 1) / stride[i] + 1 } else { 0 }).collect();
    let vals = (0..numel(&shape))
        .map(|f| {
            let idx = unravel(f, &shape);
            let xi: Vec<usize> = (0..idx.len()).map(|i| start[i] + idx[i] * stride[i]).collect();
            x.1[ravel(&xi, &x.0)]
        })
        .collect();
    (shape, vals)
}

/// `None` when some output dim would be negative.
fn ref_pad(x: &Ref, pv: f64, lo: &[i64], hi: &[i64], interior: &[usize]) -> Option<Ref> {
    let mut shape = Vec::new();
    for i in 0..x.0.len() {
        let d = x.0[i] as i64;
        let n = if d == 0 { lo[i] + hi[i] } else { lo[i] + hi[i] + d + (d - 1) * interior[i] as i64 };
        if n < 0 {
            return None;
        }
        shape.push(n as usize);
    }
    let vals = (0..numel(&shape))
        .map(|f| {
            let idx = unravel(f, &shape);
            let mut xi = Vec::new();
            for i in 0..idx.len() {
                let t = idx[i] as i64 - lo[i];
                let s = interior[i] as i64 + 1;
                if t < 0 || t % s != 0 || t / s >= x.0[i] as i64 {
                    return pv;
                }
                xi.push((t / s) as usize);
            }
            x.1[ravel(&xi, &x.0)]
        })
        .collect();
    Some((shape, vals))
}

fn ref_concat(xs: &[Ref], axis: usize) -> Ref {
    let mut shape = xs[0].0.clone();
    shape[axis] = xs.iter().map(|x| x.0[axis]).sum();
    let vals = (0..numel(&shape))
        .map(|f| {
            let mut idx = unravel(f, &shape);
            for x in xs {
                if idx[axis] < x.0[axis] {
                    return x.1[ravel(&idx, &x.0)];
                }
                idx[axis] -= x.0[axis];
            }
            unreachable!("index beyond the joined axis")
        })
        .collect();
    (shape, vals)
}

fn ref_reverse(x: &Ref, axes: &[usize]) -> Ref {
    let vals = (0..x.1.len())
        .map(|f| {
            let mut idx = unravel(f, &x.0);
            for &a in axes {
                idx[a] = x.0[a] - 1 - idx[a];
            }
            x.1[ravel(&idx, &x.0)]
        })
        .collect();
    (x.0.clone(), vals)
}

// ---------------------------------------------------------------------------
// Hand-checked values
// ---------------------------------------------------------------------------

#[test]
fn broadcast_in_dim_values() {
    let x = Tensor::vec1(&[1.0f64, 2.0, 3.0]);
    let (_, y) = run(&[&x], |b, p| b.broadcast_in_dim(p[0], &[2, 3], &[1]));
    assert_eq!(y.to_vec::<f64>().unwrap(), vec![1.0, 2.0, 3.0, 1.0, 2.0, 3.0]);
    let (_, y) = run(&[&x], |b, p| b.broadcast_in_dim(p[0], &[3, 2], &[0]));
    assert_eq!(y.to_vec::<f64>().unwrap(), vec![1.0, 1.0, 2.0, 2.0, 3.0, 3.0]);
    // Size-1 operand dims repeat.
    let c = Tensor::from_vec(vec![2, 1], vec![7i32, 8]).unwrap();
    let (_, y) = run(&[&c], |b, p| b.broadcast_in_dim(p[0], &[2, 3], &[0, 1]));
    assert_eq!(y.to_vec::<i32>().unwrap(), vec![7, 7, 7, 8, 8, 8]);
    // Scalar fill, bool.
    let s = Tensor::scalar(true);
    let (_, y) = run(&[&s], |b, p| b.broadcast_in_dim(p[0], &[2, 2], &[]));
    assert_eq!(y.to_vec::<bool>().unwrap(), vec![true; 4]);
    // Rank 0 to rank 0, and to an empty shape.
    let (_, y) = run(&[&Tensor::scalar(2.5f32)], |b, p| b.broadcast_in_dim(p[0], &[], &[]));
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![2.5]);
    let (_, y) = run(&[&Tensor::scalar(2i64)], |b, p| b.broadcast_in_dim(p[0], &[3, 0], &[]));
    assert_eq!(y.shape(), &[3, 0]);
}

#[test]
fn reshape_values() {
    let x = Tensor::from_vec(vec![2, 3], vec![1i64, 2, 3, 4, 5, 6]).unwrap();
    let (_, y) = run(&[&x], |b, p| b.reshape(p[0], &[3, 1, 2]));
    assert_eq!(y.shape(), &[3, 1, 2]);
    assert_eq!(y.to_vec::<i64>().unwrap(), vec![1, 2, 3, 4, 5, 6]);
    let (_, y) = run(&[&Tensor::scalar(1.5f64)], |b, p| b.reshape(p[0], &[1, 1]));
    assert_eq!(y.to_vec::<f64>().unwrap(), vec![1.5]);
    let e = Tensor::zeros(&TensorType::new(DType::Bool, vec![0, 4]));
    let (_, y) = run(&[&e], |b, p| b.reshape(p[0], &[2, 0, 3]));
    assert_eq!(y.shape(), &[2, 0, 3]);
}

#[test]
fn transpose_values() {
    let x = Tensor::from_vec(vec![2, 3], vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
    let (_, y) = run(&[&x], |b, p| b.transpose(p[0], &[1, 0]));
    assert_eq!(y.shape(), &[3, 2]);
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    let x = Tensor::from_vec(vec![2, 2, 2], (0..8).collect::<Vec<i32>>()).unwrap();
    let (_, y) = run(&[&x], |b, p| b.transpose(p[0], &[2, 0, 1]));
    // y[i,j,k] = x[j,k,i]
    assert_eq!(y.to_vec::<i32>().unwrap(), vec![0, 2, 4, 6, 1, 3, 5, 7]);
    let (_, y) = run(&[&Tensor::scalar(false)], |b, p| b.transpose(p[0], &[]));
    assert_eq!(y.to_vec::<bool>().unwrap(), vec![false]);
}

#[test]
fn slice_values() {
    let x = Tensor::vec1(&(0..10).map(|i| i as f64).collect::<Vec<_>>());
    let (_, y) = run(&[&x], |b, p| b.slice(p[0], &[1], &[8], &[3]));
    assert_eq!(y.to_vec::<f64>().unwrap(), vec![1.0, 4.0, 7.0]);
    let (_, y) = run(&[&x], |b, p| b.slice(p[0], &[4], &[4], &[1]));
    assert_eq!(y.shape(), &[0]);
    let m = Tensor::from_vec(vec![3, 4], (0..12).collect::<Vec<i64>>()).unwrap();
    let (_, y) = run(&[&m], |b, p| b.slice(p[0], &[1, 1], &[3, 4], &[1, 2]));
    assert_eq!(y.shape(), &[2, 2]);
    assert_eq!(y.to_vec::<i64>().unwrap(), vec![5, 7, 9, 11]);
}

#[test]
fn pad_values() {
    let x = Tensor::vec1(&[1.0f64, 2.0, 3.0]);
    let pv = Tensor::scalar(0.0f64);
    let (_, y) = run(&[&x, &pv], |b, p| b.pad(p[0], p[1], &[1], &[2], &[1]));
    assert_eq!(y.to_vec::<f64>().unwrap(), vec![0.0, 1.0, 0.0, 2.0, 0.0, 3.0, 0.0, 0.0]);
    // Negative edges crop (lax.pad semantics): interior first, then crop.
    let (_, y) = run(&[&x, &pv], |b, p| b.pad(p[0], p[1], &[-2], &[-1], &[1]));
    assert_eq!(y.to_vec::<f64>().unwrap(), vec![2.0, 0.0]);
    let (_, y) = run(&[&x, &pv], |b, p| b.pad(p[0], p[1], &[-3], &[0], &[0]));
    assert_eq!(y.shape(), &[0]);
    let m = Tensor::from_vec(vec![2, 2], vec![1i32, 2, 3, 4]).unwrap();
    let (_, y) = run(&[&m, &Tensor::scalar(9i32)], |b, p| b.pad(p[0], p[1], &[1, 0], &[0, 1], &[0, 0]));
    assert_eq!(y.shape(), &[3, 3]);
    assert_eq!(y.to_vec::<i32>().unwrap(), vec![9, 9, 9, 1, 2, 9, 3, 4, 9]);
    // Empty operand: all padding.
    let e = Tensor::vec1::<bool>(&[]);
    let (_, y) = run(&[&e, &Tensor::scalar(true)], |b, p| b.pad(p[0], p[1], &[2], &[1], &[5]));
    assert_eq!(y.to_vec::<bool>().unwrap(), vec![true; 3]);
    // Rank 0 is the identity.
    let (_, y) = run(&[&Tensor::scalar(4.0f32), &Tensor::scalar(0.0f32)], |b, p| b.pad(p[0], p[1], &[], &[], &[]));
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![4.0]);
}

#[test]
fn concatenate_values() {
    let a = Tensor::from_vec(vec![2, 1], vec![1i32, 2]).unwrap();
    let c = Tensor::from_vec(vec![2, 2], vec![3i32, 4, 5, 6]).unwrap();
    let (_, y) = run(&[&a, &c], |b, p| b.concatenate(&[p[0], p[1]], 1));
    assert_eq!(y.to_vec::<i32>().unwrap(), vec![1, 3, 4, 2, 5, 6]);
    let (_, y) = run(&[&c, &c], |b, p| b.concatenate(&[p[0], p[1]], 0));
    assert_eq!(y.to_vec::<i32>().unwrap(), vec![3, 4, 5, 6, 3, 4, 5, 6]);
    // One operand, and an empty operand in the middle.
    let x = Tensor::vec1(&[1.0f64, 2.0]);
    let e = Tensor::vec1::<f64>(&[]);
    let (_, y) = run(&[&x], |b, p| b.concatenate(&[p[0]], 0));
    assert_eq!(y.to_vec::<f64>().unwrap(), vec![1.0, 2.0]);
    let (_, y) = run(&[&x, &e, &x], |b, p| b.concatenate(&[p[0], p[1], p[2]], 0));
    assert_eq!(y.to_vec::<f64>().unwrap(), vec![1.0, 2.0, 1.0, 2.0]);
    // The same value twice.
    let (_, y) = run(&[&x], |b, p| b.concatenate(&[p[0], p[0]], 0));
    assert_eq!(y.to_vec::<f64>().unwrap(), vec![1.0, 2.0, 1.0, 2.0]);
}

#[test]
fn reverse_values() {
    let m = Tensor::from_vec(vec![2, 3], vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
    let (_, y) = run(&[&m], |b, p| b.reverse(p[0], &[1]));
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![3.0, 2.0, 1.0, 6.0, 5.0, 4.0]);
    let (_, y) = run(&[&m], |b, p| b.reverse(p[0], &[0]));
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![4.0, 5.0, 6.0, 1.0, 2.0, 3.0]);
    let (_, y) = run(&[&m], |b, p| b.reverse(p[0], &[1, 0]));
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![6.0, 5.0, 4.0, 3.0, 2.0, 1.0]);
    let (_, y) = run(&[&m], |b, p| b.reverse(p[0], &[]));
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let bl = Tensor::vec1(&[true, false, false]);
    let (_, y) = run(&[&bl], |b, p| b.reverse(p[0], &[0]));
    assert_eq!(y.to_vec::<bool>().unwrap(), vec![false, false, true]);
}

#[test]
fn every_op_moves_every_dtype_exactly() {
    let shape = [3usize, 1, 4];
    for dt in DType::ALL {
        let x = sample(dt, &shape, 1);
        let xr = as_ref(&x);
        let (_, y) = run(&[&x], |b, p| b.broadcast_in_dim(p[0], &[2, 3, 5, 4], &[1, 2, 3]));
        assert_matches(&y, dt, &ref_broadcast(&xr, &[2, 3, 5, 4], &[1, 2, 3]));
        let (_, y) = run(&[&x], |b, p| b.reshape(p[0], &[2, 6]));
        assert_matches(&y, dt, &(vec![2, 6], xr.1.clone()));
        let (_, y) = run(&[&x], |b, p| b.transpose(p[0], &[2, 0, 1]));
        assert_matches(&y, dt, &ref_transpose(&xr, &[2, 0, 1]));
        let (_, y) = run(&[&x], |b, p| b.slice(p[0], &[1, 0, 1], &[3, 1, 4], &[1, 1, 2]));
        assert_matches(&y, dt, &ref_slice(&xr, &[1, 0, 1], &[3, 1, 4], &[1, 1, 2]));
        let pv = sample(dt, &[], 2);
        let (_, y) = run(&[&x, &pv], |b, p| b.pad(p[0], p[1], &[1, 0, -1], &[0, 2, 1], &[1, 0, 2]));
        let r = ref_pad(&xr, pv.to_f64_vec()[0], &[1, 0, -1], &[0, 2, 1], &[1, 0, 2]).unwrap();
        assert_matches(&y, dt, &r);
        let z = sample(dt, &[3, 2, 4], 9);
        let (_, y) = run(&[&x, &z], |b, p| b.concatenate(&[p[0], p[1]], 1));
        assert_matches(&y, dt, &ref_concat(&[xr.clone(), as_ref(&z)], 1));
        let (_, y) = run(&[&x], |b, p| b.reverse(p[0], &[0, 2]));
        assert_matches(&y, dt, &ref_reverse(&xr, &[0, 2]));
    }
}

#[test]
fn params_print_stably() {
    let mut b = Builder::new("f");
    let x = b.param(TensorType::new(DType::F32, vec![3]));
    let m = b.param(TensorType::new(DType::F32, vec![2, 3]));
    let z = b.param(TensorType::scalar(DType::F32));
    let y0 = b.broadcast_in_dim(x, &[2, 3], &[1]).unwrap();
    let y1 = b.reshape(m, &[3, 2]).unwrap();
    let y2 = b.transpose(m, &[1, 0]).unwrap();
    let y3 = b.slice(m, &[0, 1], &[2, 3], &[1, 2]).unwrap();
    let y4 = b.pad(m, z, &[1, -1], &[0, 2], &[0, 1]).unwrap();
    let y5 = b.concatenate(&[m, m], 0).unwrap();
    let y6 = b.reverse(m, &[0, 1]).unwrap();
    let f = b.finish(&[y0, y1, y2, y3, y4, y5, y6]).unwrap();
    let text = print_func(&f);
    let expected = [
        "%3 = broadcast_in_dim[shape=(2,3), dims=(1)] %0 : f32[2,3]",
        "%4 = reshape[shape=(3,2)] %1 : f32[3,2]",
        "%5 = transpose[perm=(1,0)] %1 : f32[3,2]",
        "%6 = slice[start=(0,1), stop=(2,3), stride=(1,2)] %1 : f32[2,1]",
        "%7 = pad[lo=(1,-1), hi=(0,2), interior=(0,1)] %1, %2 : f32[3,6]",
        "%8 = concatenate[axis=0] %1, %1 : f32[4,3]",
        "%9 = reverse[axes=(0,1)] %1 : f32[2,3]",
    ];
    for line in expected {
        assert!(text.contains(line), "missing `{line}` in\n{text}");
    }
}

// ---------------------------------------------------------------------------
// Large inputs: parallel chunks, tiled transposes, odd sizes
// ---------------------------------------------------------------------------

#[test]
fn large_broadcasts() {
    let row = sample(DType::F32, &[997], 0);
    let (_, y) = run(&[&row], |b, p| b.broadcast_in_dim(p[0], &[301, 997], &[1]));
    assert_matches(&y, DType::F32, &ref_broadcast(&as_ref(&row), &[301, 997], &[1]));
    let col = sample(DType::I64, &[301, 1], 3);
    let (_, y) = run(&[&col], |b, p| b.broadcast_in_dim(p[0], &[301, 333], &[0, 1]));
    assert_matches(&y, DType::I64, &ref_broadcast(&as_ref(&col), &[301, 333], &[0, 1]));
    let s = Tensor::scalar(-1.5f64);
    let (_, y) = run(&[&s], |b, p| b.broadcast_in_dim(p[0], &[100_003], &[]));
    assert!(y.to_vec::<f64>().unwrap().iter().all(|&v| v == -1.5));
    // Middle dim broadcast with a short inner run.
    let x = sample(DType::Bool, &[97, 3], 1);
    let (_, y) = run(&[&x], |b, p| b.broadcast_in_dim(p[0], &[97, 211, 3], &[0, 2]));
    assert_matches(&y, DType::Bool, &ref_broadcast(&as_ref(&x), &[97, 211, 3], &[0, 2]));
}

#[test]
fn large_transposes() {
    let cases: &[(&[usize], &[usize])] = &[
        (&[513, 701], &[1, 0]),
        (&[3, 100_003], &[1, 0]),
        (&[100_003, 3], &[1, 0]),
        (&[5, 300, 257], &[0, 2, 1]),
        (&[37, 41, 43], &[2, 0, 1]),
        (&[37, 41, 43], &[1, 2, 0]),
        (&[37, 41, 43], &[1, 0, 2]),
        (&[11, 13, 17, 19], &[1, 3, 0, 2]),
        (&[11, 13, 17, 19], &[3, 2, 1, 0]),
        (&[2, 1, 40_000], &[2, 1, 0]),
    ];
    for (shape, perm) in cases {
        for dt in [DType::F32, DType::F64] {
            let x = sample(dt, shape, 0);
            let (_, y) = run(&[&x], |b, p| b.transpose(p[0], perm));
            assert_matches(&y, dt, &ref_transpose(&as_ref(&x), perm));
        }
    }
}

#[test]
fn large_slice_pad_concat_reverse_reshape() {
    let x = sample(DType::F64, &[1000, 517], 0);
    let xr = as_ref(&x);
    let (_, y) = run(&[&x], |b, p| b.slice(p[0], &[3, 2], &[999, 517], &[2, 3]));
    assert_matches(&y, DType::F64, &ref_slice(&xr, &[3, 2], &[999, 517], &[2, 3]));
    let (_, y) = run(&[&x], |b, p| b.slice(p[0], &[0, 100], &[1000, 517], &[1, 1]));
    assert_matches(&y, DType::F64, &ref_slice(&xr, &[0, 100], &[1000, 517], &[1, 1]));

    let x32 = sample(DType::F32, &[301, 173], 5);
    let pv = Tensor::scalar(0.25f32);
    for (lo, hi, interior) in
        [([-3i64, 5], [5i64, -2], [1usize, 0]), ([2, 0], [0, 3], [0, 2]), ([0, 0], [0, 0], [0, 0])]
    {
        let (_, y) = run(&[&x32, &pv], |b, p| b.pad(p[0], p[1], &lo, &hi, &interior));
        assert_matches(&y, DType::F32, &ref_pad(&as_ref(&x32), 0.25, &lo, &hi, &interior).unwrap());
    }

    let a = sample(DType::I32, &[500, 100], 0);
    let c = sample(DType::I32, &[500, 37], 7);
    let (_, y) = run(&[&a, &c], |b, p| b.concatenate(&[p[0], p[1], p[0]], 1));
    assert_matches(&y, DType::I32, &ref_concat(&[as_ref(&a), as_ref(&c), as_ref(&a)], 1));
    let big = sample(DType::I32, &[40_001], 1);
    let (_, y) = run(&[&big, &big], |b, p| b.concatenate(&[p[0], p[1]], 0));
    assert_matches(&y, DType::I32, &ref_concat(&[as_ref(&big), as_ref(&big)], 0));

    let r = sample(DType::I64, &[400, 333], 0);
    for axes in [&[0usize, 1][..], &[1], &[0]] {
        let (_, y) = run(&[&r], |b, p| b.reverse(p[0], axes));
        assert_matches(&y, DType::I64, &ref_reverse(&as_ref(&r), axes));
    }

    let (_, y) = run(&[&x], |b, p| b.reshape(p[0], &[517, 1000]));
    assert_matches(&y, DType::F64, &(vec![517, 1000], xr.1.clone()));
}

// ---------------------------------------------------------------------------
// Property tests
// ---------------------------------------------------------------------------

fn dtype() -> impl Strategy<Value = DType> {
    prop::sample::select(DType::ALL.to_vec())
}

fn shape() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0usize..5, 0..=4)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn prop_broadcast(dt in dtype(), out in shape(), keep in prop::collection::vec(any::<bool>(), 4),
                      ones in prop::collection::vec(any::<bool>(), 4)) {
        let dims: Vec<usize> = (0..out.len()).filter(|&i| keep[i]).collect();
        let xs: Vec<usize> = dims.iter().map(|&d| if ones[d] { 1 } else { out[d] }).collect();
        let x = sample(dt, &xs, 0);
        let (ty, y) = run(&[&x], |b, p| b.broadcast_in_dim(p[0], &out, &dims));
        prop_assert_eq!(&ty.shape, &out);
        assert_matches(&y, dt, &ref_broadcast(&as_ref(&x), &out, &dims));
    }

    #[test]
    fn prop_reshape(dt in dtype(), (xs, new) in shape().prop_flat_map(|s| (Just(s.clone()), Just(s).prop_shuffle()))) {
        let x = sample(dt, &xs, 0);
        // Split the shuffled dims' product differently: prepend a 1 and flatten the tail.
        let mut target = vec![1];
        target.extend_from_slice(&new[..new.len().min(1)]);
        target.push(new.iter().skip(1).product());
        let (ty, y) = run(&[&x], |b, p| b.reshape(p[0], &target));
        prop_assert_eq!(&ty.shape, &target);
        assert_matches(&y, dt, &(target.clone(), as_ref(&x).1));
    }

    #[test]
    fn prop_transpose(dt in dtype(), (xs, perm) in prop::collection::vec(0usize..6, 0..=5)
            .prop_flat_map(|s| { let r = s.len(); (Just(s), Just((0..r).collect::<Vec<_>>()).prop_shuffle()) })) {
        let x = sample(dt, &xs, 0);
        let (ty, y) = run(&[&x], |b, p| b.transpose(p[0], &perm));
        let r = ref_transpose(&as_ref(&x), &perm);
        prop_assert_eq!(&ty.shape, &r.0);
        assert_matches(&y, dt, &r);
    }

    #[test]
    fn prop_slice(dt in dtype(), xs in shape(), raw in prop::collection::vec((0usize..100, 0usize..100, 1usize..4), 4)) {
        let x = sample(dt, &xs, 0);
        let (mut start, mut stop, mut stride) = (vec![], vec![], vec![]);
        for (i, &d) in xs.iter().enumerate() {
            let (a, c) = (raw[i].0 % (d + 1), raw[i].1 % (d + 1));
            start.push(a.min(c));
            stop.push(a.max(c));
            stride.push(raw[i].2);
        }
        let (ty, y) = run(&[&x], |b, p| b.slice(p[0], &start, &stop, &stride));
        let r = ref_slice(&as_ref(&x), &start, &stop, &stride);
        prop_assert_eq!(&ty.shape, &r.0);
        assert_matches(&y, dt, &r);
    }

    #[test]
    fn prop_pad(dt in dtype(), xs in shape(), raw in prop::collection::vec((-4i64..4, -4i64..4, 0usize..3), 4)) {
        let x = sample(dt, &xs, 0);
        let pv = sample(dt, &[], 3);
        let lo: Vec<i64> = raw[..xs.len()].iter().map(|r| r.0).collect();
        let hi: Vec<i64> = raw[..xs.len()].iter().map(|r| r.1).collect();
        let int: Vec<usize> = raw[..xs.len()].iter().map(|r| r.2).collect();
        match ref_pad(&as_ref(&x), pv.to_f64_vec()[0], &lo, &hi, &int) {
            Some(r) => {
                let (ty, y) = run(&[&x, &pv], |b, p| b.pad(p[0], p[1], &lo, &hi, &int));
                prop_assert_eq!(&ty.shape, &r.0);
                assert_matches(&y, dt, &r);
            }
            None => {
                let mut b = Builder::new("f");
                let (px, pp) = (b.param(x.ty()), b.param(pv.ty()));
                type_err(b.pad(px, pp, &lo, &hi, &int), "pad");
            }
        }
    }

    #[test]
    fn prop_concatenate(dt in dtype(), xs in prop::collection::vec(0usize..5, 1..=4), axis_raw in 0usize..4,
                        sizes in prop::collection::vec(0usize..4, 1..=4)) {
        let axis = axis_raw % xs.len();
        let ts: Vec<Tensor> = sizes.iter().enumerate().map(|(k, &n)| {
            let mut s = xs.clone();
            s[axis] = n;
            sample(dt, &s, 10 * k)
        }).collect();
        let refs: Vec<&Tensor> = ts.iter().collect();
        let (ty, y) = run(&refs, |b, p| b.concatenate(p, axis));
        let r = ref_concat(&ts.iter().map(as_ref).collect::<Vec<_>>(), axis);
        prop_assert_eq!(&ty.shape, &r.0);
        assert_matches(&y, dt, &r);
    }

    #[test]
    fn prop_reverse(dt in dtype(), (xs, axes) in shape().prop_flat_map(|s| {
            let r = s.len();
            (Just(s), Just((0..r).collect::<Vec<_>>()).prop_shuffle(), 0..=r)
        }).prop_map(|(s, mut ax, k)| { ax.truncate(k); (s, ax) })) {
        let x = sample(dt, &xs, 0);
        let (ty, y) = run(&[&x], |b, p| b.reverse(p[0], &axes));
        prop_assert_eq!(&ty.shape, &xs);
        assert_matches(&y, dt, &ref_reverse(&as_ref(&x), &axes));
    }

    /// Compositions in one function: slice of pad, reverse of transpose of a
    /// broadcast, and concatenation of a slice with a reversed copy.
    #[test]
    fn prop_compositions(dt in dtype(), xs in prop::collection::vec(1usize..5, 2..=3),
                         raw in prop::collection::vec((0i64..3, -1i64..3, 0usize..2, 0usize..100, 1usize..3), 3)) {
        let x = sample(dt, &xs, 0);
        let xr = as_ref(&x);
        let pv = sample(dt, &[], 1);
        let r = xs.len();
        let lo: Vec<i64> = raw[..r].iter().map(|t| t.0).collect();
        let hi: Vec<i64> = raw[..r].iter().map(|t| t.1).collect();
        let int: Vec<usize> = raw[..r].iter().map(|t| t.2).collect();
        let padded = ref_pad(&xr, pv.to_f64_vec()[0], &lo, &hi, &int).unwrap();
        let start: Vec<usize> = (0..r).map(|i| raw[i].3 % (padded.0[i] + 1)).collect();
        let stop: Vec<usize> = padded.0.clone();
        let stride: Vec<usize> = raw[..r].iter().map(|t| t.4).collect();
        let expect_sp = ref_slice(&padded, &start, &stop, &stride);
        let (_, y) = run(&[&x, &pv], |b, p| {
            let q = b.pad(p[0], p[1], &lo, &hi, &int)?;
            b.slice(q, &start, &stop, &stride)
        });
        assert_matches(&y, dt, &expect_sp);

        let mut bshape = vec![2];
        bshape.extend_from_slice(&xs);
        let dims: Vec<usize> = (1..=r).collect();
        let perm: Vec<usize> = (0..=r).rev().collect();
        let expect_rtb = ref_reverse(&ref_transpose(&ref_broadcast(&xr, &bshape, &dims), &perm), &[0]);
        let (_, y) = run(&[&x], |b, p| {
            let q = b.broadcast_in_dim(p[0], &bshape, &dims)?;
            let q = b.transpose(q, &perm)?;
            b.reverse(q, &[0])
        });
        assert_matches(&y, dt, &expect_rtb);

        let s0: Vec<usize> = vec![0; r];
        let mut s1 = xs.clone();
        s1[0] = xs[0].div_ceil(2);
        let one = vec![1; r];
        let expect_c = ref_concat(&[ref_slice(&xr, &s0, &s1, &one), ref_reverse(&xr, &[0])], 0);
        let (_, y) = run(&[&x], |b, p| {
            let a = b.slice(p[0], &s0, &s1, &one)?;
            let c = b.reverse(p[0], &[0])?;
            b.concatenate(&[a, c], 0)
        });
        assert_matches(&y, dt, &expect_c);
    }
}

// ---------------------------------------------------------------------------
// Shape-rule errors
// ---------------------------------------------------------------------------

fn builder_with(types: &[TensorType]) -> (Builder, Vec<Value>) {
    let mut b = Builder::new("f");
    let vs = types.iter().map(|t| b.param(t.clone())).collect();
    (b, vs)
}

fn f32s(shape: &[usize]) -> TensorType {
    TensorType::new(DType::F32, shape.to_vec())
}

#[test]
fn broadcast_in_dim_errors() {
    let (mut b, v) = builder_with(&[f32s(&[3]), f32s(&[2, 3])]);
    let te = type_err(b.broadcast_in_dim(v[0], &[2, 3], &[]), "broadcast_in_dim");
    assert!(te.expected.contains("one entry per operand dim"), "{}", te.expected);
    let te = type_err(b.broadcast_in_dim(v[0], &[2, 3], &[2]), "broadcast_in_dim");
    assert!(te.expected.contains("out of range"), "{}", te.expected);
    let te = type_err(b.broadcast_in_dim(v[0], &[2, 4], &[1]), "broadcast_in_dim");
    assert!(te.expected.contains("expected 1 or 4"), "{}", te.expected);
    let te = type_err(b.broadcast_in_dim(v[1], &[2, 3, 3], &[1, 0]), "broadcast_in_dim");
    assert!(te.expected.contains("strictly increasing"), "{}", te.expected);
    let te = type_err(b.broadcast_in_dim(v[1], &[2, 3, 3], &[0, 0]), "broadcast_in_dim");
    assert!(te.expected.contains("strictly increasing"), "{}", te.expected);
    type_err(b.broadcast_in_dim(v[0], &[usize::MAX, 3, 2], &[1]), "broadcast_in_dim");
    let e = b.broadcast_in_dim(v[0], &[2, 4], &[1]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "broadcast_in_dim[shape=(2,4), dims=(1)]: operand dim 0 has size 3; expected 1 or 4 (output dim 1); got operands (f32[3])"
    );
}

#[test]
fn reshape_errors() {
    let (mut b, v) = builder_with(&[f32s(&[2, 3])]);
    let te = type_err(b.reshape(v[0], &[4, 2]), "reshape");
    assert_eq!(te.operands, vec![f32s(&[2, 3])]);
    assert!(te.expected.contains("6 elements"), "{}", te.expected);
    type_err(b.reshape(v[0], &[]), "reshape");
    type_err(b.reshape(v[0], &[usize::MAX, 3]), "reshape");
}

#[test]
fn transpose_errors() {
    let (mut b, v) = builder_with(&[f32s(&[2, 3, 4])]);
    let te = type_err(b.transpose(v[0], &[0, 1]), "transpose");
    assert!(te.expected.contains("permutation"), "{}", te.expected);
    let te = type_err(b.transpose(v[0], &[0, 1, 1]), "transpose");
    assert!(te.expected.contains("repeated"), "{}", te.expected);
    let te = type_err(b.transpose(v[0], &[0, 1, 3]), "transpose");
    assert!(te.expected.contains("out of range"), "{}", te.expected);
}

#[test]
fn slice_errors() {
    let (mut b, v) = builder_with(&[f32s(&[4, 5])]);
    type_err(b.slice(v[0], &[0], &[4, 5], &[1, 1]), "slice");
    type_err(b.slice(v[0], &[0, 0], &[4, 5], &[1]), "slice");
    let te = type_err(b.slice(v[0], &[0, 0], &[4, 5], &[1, 0]), "slice");
    assert!(te.expected.contains("stride >= 1"), "{}", te.expected);
    let te = type_err(b.slice(v[0], &[3, 0], &[2, 5], &[1, 1]), "slice");
    assert!(te.expected.contains("start <= stop"), "{}", te.expected);
    let te = type_err(b.slice(v[0], &[0, 0], &[4, 6], &[1, 1]), "slice");
    assert!(te.expected.contains("size 5"), "{}", te.expected);
}

#[test]
fn pad_errors() {
    let (mut b, v) = builder_with(&[f32s(&[3]), f32s(&[]), f32s(&[1]), TensorType::scalar(DType::F64)]);
    let te = type_err(b.pad(v[0], v[2], &[0], &[0], &[0]), "pad");
    assert!(te.expected.contains("rank-0 pad value"), "{}", te.expected);
    let te = type_err(b.pad(v[0], v[3], &[0], &[0], &[0]), "pad");
    assert!(te.expected.contains("dtype f32"), "{}", te.expected);
    type_err(b.pad(v[0], v[1], &[0, 0], &[0], &[0]), "pad");
    type_err(b.pad(v[0], v[1], &[0], &[], &[0]), "pad");
    type_err(b.pad(v[0], v[1], &[0], &[0], &[0, 1]), "pad");
    let te = type_err(b.pad(v[0], v[1], &[-2], &[-2], &[0]), "pad");
    assert!(te.expected.contains("non-negative"), "{}", te.expected);
    type_err(b.pad(v[0], v[1], &[i64::MAX], &[i64::MAX], &[usize::MAX]), "pad");
    let te =
        type_err(b.emit1(graft_core::ops::shape::Pad { lo: vec![0], hi: vec![0], interior: vec![0] }, &[v[0]]), "pad");
    assert!(te.expected.contains("2 operands"), "{}", te.expected);
}

#[test]
fn concatenate_errors() {
    let (mut b, v) = builder_with(&[
        f32s(&[2, 3]),
        f32s(&[2, 4]),
        TensorType::new(DType::I32, vec![2, 3]),
        f32s(&[2, 3, 1]),
        f32s(&[]),
    ]);
    let te = type_err(b.concatenate(&[], 0), "concatenate");
    assert!(te.expected.contains("at least one"), "{}", te.expected);
    let te = type_err(b.concatenate(&[v[0], v[2]], 0), "concatenate");
    assert!(te.expected.contains("operand 1 is i32"), "{}", te.expected);
    let te = type_err(b.concatenate(&[v[0], v[1]], 0), "concatenate");
    assert!(te.expected.contains("except along axis 0"), "{}", te.expected);
    type_err(b.concatenate(&[v[0], v[3]], 1), "concatenate");
    let te = type_err(b.concatenate(&[v[0], v[1]], 2), "concatenate");
    assert!(te.expected.contains("out of range"), "{}", te.expected);
    type_err(b.concatenate(&[v[4]], 0), "concatenate");
    // Joining along axis 1 is fine.
    let ok = b.concatenate(&[v[0], v[1]], 1).unwrap();
    assert_eq!(b.ty(ok).unwrap(), &f32s(&[2, 7]));
}

#[test]
fn reverse_errors() {
    let (mut b, v) = builder_with(&[f32s(&[2, 3])]);
    let te = type_err(b.reverse(v[0], &[2]), "reverse");
    assert!(te.expected.contains("out of range"), "{}", te.expected);
    let te = type_err(b.reverse(v[0], &[1, 1]), "reverse");
    assert!(te.expected.contains("repeated"), "{}", te.expected);
}

#[test]
fn unary_ops_reject_wrong_arity() {
    let (mut b, v) = builder_with(&[f32s(&[2]), f32s(&[2])]);
    use graft_core::ops::shape::{BroadcastInDim, Reshape, Reverse, Slice, Transpose};
    type_err(b.emit1(BroadcastInDim { shape: vec![2], dims: vec![0] }, &[v[0], v[1]]), "broadcast_in_dim");
    type_err(b.emit1(Reshape { shape: vec![2] }, &[]), "reshape");
    type_err(b.emit1(Transpose { perm: vec![0] }, &[v[0], v[1]]), "transpose");
    type_err(b.emit1(Slice { start: vec![0], stop: vec![1], stride: vec![1] }, &[]), "slice");
    type_err(b.emit1(Reverse { axes: vec![] }, &[v[0], v[1]]), "reverse");
}

#[test]
fn pad_with_extreme_interior_on_single_element_dims() {
    // (d - 1) * interior is 0 for d == 1, so any interior is valid there.
    let x = Tensor::from_vec(vec![1, 1], vec![5.0f64]).unwrap();
    let pv = Tensor::scalar(-1.0f64);
    let (_, y) = run(&[&x, &pv], |b, p| b.pad(p[0], p[1], &[1, 0], &[0, 2], &[usize::MAX, usize::MAX]));
    assert_eq!(y.shape(), &[2, 3]);
    assert_eq!(y.to_vec::<f64>().unwrap(), vec![-1.0, -1.0, -1.0, 5.0, -1.0, -1.0]);
}
