//! User-level shape helpers against naive index-mapping references written
//! here: Python slicing (checked against a literal `range` walk), take,
//! stack/concat, reshape with -1, creators, and their error messages.

use crate::composite_util;
use composite_util::*;
use graft_core::composite::shape;
use graft_core::{DType, Tensor};
use proptest::prelude::*;

fn iota64(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    t64(shape, &(0..n).map(|i| i as f64).collect::<Vec<_>>())
}

#[test]
fn expand_dims_squeeze_flatten() {
    let x = iota64(&[2, 3]);
    let y = eval(&[&x], |b, p| shape::expand_dims(b, p[0], &[0, 3]));
    assert_tensor(&y, &[1, 2, 3, 1], &x.to_f64_vec(), 0.0);
    let y = eval(&[&x], |b, p| shape::expand_dims(b, p[0], &[1]));
    assert_eq!(y.shape(), &[2, 1, 3]);
    let msg = err_msg(&[&x], |b, p| shape::expand_dims(b, p[0], &[3]));
    assert!(msg.contains("expand_dims") && msg.contains("axis 3"), "{msg}");

    let z = iota64(&[1, 2, 1, 3]);
    assert_eq!(eval(&[&z], |b, p| shape::squeeze(b, p[0], &[2])).shape(), &[1, 2, 3]);
    assert_eq!(eval(&[&z], |b, p| shape::squeeze_all(b, p[0])).shape(), &[2, 3]);
    let msg = err_msg(&[&z], |b, p| shape::squeeze(b, p[0], &[1]));
    assert!(msg.contains("squeeze") && msg.contains("axis 1") && msg.contains("[1, 2, 1, 3]"), "{msg}");

    let w = iota64(&[2, 3, 4, 5]);
    assert_tensor(&eval(&[&w], |b, p| shape::flatten(b, p[0], 0, 3)), &[120], &w.to_f64_vec(), 0.0);
    assert_eq!(eval(&[&w], |b, p| shape::flatten(b, p[0], 1, 2)).shape(), &[2, 12, 5]);
    assert_eq!(eval(&[&w], |b, p| shape::flatten(b, p[0], 3, 3)).shape(), &[2, 3, 4, 5]);
    let s = t64(&[], &[4.0]);
    assert_tensor(&eval(&[&s], |b, p| shape::flatten(b, p[0], 0, 0)), &[1], &[4.0], 0.0);
    let msg = err_msg(&[&w], |b, p| shape::flatten(b, p[0], 2, 1));
    assert!(msg.contains("flatten") && msg.contains("start=2"), "{msg}");
}

#[test]
fn concat_and_stack() {
    let a = iota64(&[2, 2]);
    let c = t64(&[2, 1], &[10.0, 11.0]);
    let y = eval(&[&a, &c], |b, p| shape::concat(b, p, 1));
    assert_tensor(&y, &[2, 3], &[0.0, 1.0, 10.0, 2.0, 3.0, 11.0], 0.0);
    let msg = err_msg(&[&a, &c], |b, p| shape::concat(b, p, 0));
    assert!(msg.contains("concat") && msg.contains("f64[2,2]") && msg.contains("f64[2,1]"), "{msg}");
    let msg = err_msg(&[&a, &c.cast(DType::F32)], |b, p| shape::concat(b, p, 1));
    assert!(msg.contains("dtype"), "{msg}");
    let msg = err_msg(&[], |b, _| shape::concat(b, &[], 0));
    assert!(msg.contains("at least one"), "{msg}");

    let d = t64(&[2, 2], &[4.0, 5.0, 6.0, 7.0]);
    let y = eval(&[&a, &d], |b, p| shape::stack(b, p, 0));
    assert_tensor(&y, &[2, 2, 2], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0], 0.0);
    let y = eval(&[&a, &d], |b, p| shape::stack(b, p, 2));
    assert_tensor(&y, &[2, 2, 2], &[0.0, 4.0, 1.0, 5.0, 2.0, 6.0, 3.0, 7.0], 0.0);
    let msg = err_msg(&[&a, &c], |b, p| shape::stack(b, p, 0));
    assert!(msg.contains("stack") && msg.contains("f64[2,1]"), "{msg}");
    let msg = err_msg(&[&a, &d], |b, p| shape::stack(b, p, 3));
    assert!(msg.contains("axis 3"), "{msg}");
}

#[test]
fn transpose_swapaxes_broadcast_to() {
    let x = iota64(&[2, 3, 4]);
    let y = eval(&[&x], |b, p| shape::transpose(b, p[0], None));
    assert_eq!(y.shape(), &[4, 3, 2]);
    let (xv, yv) = (x.to_f64_vec(), y.to_f64_vec());
    for i in 0..24 {
        let [k, j, l] = <[usize; 3]>::try_from(unravel(i, &[4, 3, 2])).unwrap();
        assert_eq!(yv[i], xv[ravel(&[l, j, k], &[2, 3, 4])]);
    }
    let y = eval(&[&x], |b, p| shape::transpose(b, p[0], Some(&[1, 0, 2])));
    let y2 = eval(&[&x], |b, p| shape::swapaxes(b, p[0], 0, 1));
    assert_eq!(y.shape(), &[3, 2, 4]);
    assert_eq!(y.to_f64_vec(), y2.to_f64_vec());
    assert!(err_msg(&[&x], |b, p| shape::transpose(b, p[0], Some(&[0, 1]))).contains("permutation"));
    assert!(err_msg(&[&x], |b, p| shape::transpose(b, p[0], Some(&[0, 1, 1]))).contains("repeated"));
    assert!(err_msg(&[&x], |b, p| shape::swapaxes(b, p[0], 0, 3)).contains("axis 3"));
    let v = t64(&[3], &[1.0, 2.0, 3.0]);
    let y = eval(&[&v], |b, p| shape::broadcast_to(b, p[0], &[2, 3]));
    assert_tensor(&y, &[2, 3], &[1.0, 2.0, 3.0, 1.0, 2.0, 3.0], 0.0);
    assert!(err_msg(&[&v], |b, p| shape::broadcast_to(b, p[0], &[2, 4])).contains("[3]"));
}

#[test]
fn reshape_infers_minus_one() {
    let x = iota64(&[2, 3, 4]);
    assert_eq!(eval(&[&x], |b, p| shape::reshape(b, p[0], &[-1, 4])).shape(), &[6, 4]);
    assert_eq!(eval(&[&x], |b, p| shape::reshape(b, p[0], &[4, -1, 2])).shape(), &[4, 3, 2]);
    assert_tensor(&eval(&[&x], |b, p| shape::reshape(b, p[0], &[-1])), &[24], &x.to_f64_vec(), 0.0);
    assert!(err_msg(&[&x], |b, p| shape::reshape(b, p[0], &[-1, -1])).contains("only one"));
    assert!(err_msg(&[&x], |b, p| shape::reshape(b, p[0], &[5, -1])).contains("24"));
    assert!(err_msg(&[&x], |b, p| shape::reshape(b, p[0], &[5, 5])).contains("24"));
    assert!(err_msg(&[&x], |b, p| shape::reshape(b, p[0], &[-2, 12])).contains("-2"));
    let e = iota64(&[0, 3]);
    assert_eq!(eval(&[&e], |b, p| shape::reshape(b, p[0], &[3, 0])).shape(), &[3, 0]);
    assert!(err_msg(&[&e], |b, p| shape::reshape(b, p[0], &[0, -1])).contains("not determined"));
}

/// Python's `range(*slice(start, stop, step).indices(n))`, written the way
/// CPython's `PySlice_AdjustIndices` does it.
fn python_positions(n: i64, start: Option<i64>, stop: Option<i64>, step: i64) -> Vec<i64> {
    let (lower, upper) = if step > 0 { (0, n) } else { (-1, n - 1) };
    let adjust = |v: Option<i64>, default: i64| match v {
        None => default,
        Some(v) if v < 0 => (v + n).max(lower),
        Some(v) => v.min(upper),
    };
    let s = adjust(start, if step > 0 { lower } else { upper });
    let e = adjust(stop, if step > 0 { upper } else { lower });
    let mut out = vec![];
    let mut i = s;
    while (step > 0 && i < e) || (step < 0 && i > e) {
        out.push(i);
        i += step;
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn slice_axis_matches_python(
        n in 0usize..7,
        start in prop::option::of(-9isize..9),
        stop in prop::option::of(-9isize..9),
        step in prop::sample::select(vec![-3isize, -2, -1, 1, 2, 3]),
        axis in 0usize..2,
    ) {
        let shape = if axis == 0 { vec![n, 2] } else { vec![2, n] };
        let x = iota64(&shape);
        let y = eval(&[&x], |b, p| shape::slice_axis(b, p[0], axis, start, stop, step));
        let pos = python_positions(n as i64, start.map(|v| v as i64), stop.map(|v| v as i64), step as i64);
        let mut want_shape = shape.clone();
        want_shape[axis] = pos.len();
        prop_assert_eq!(y.shape(), want_shape.as_slice());
        let (xv, yv) = (x.to_f64_vec(), y.to_f64_vec());
        for (i, &v) in yv.iter().enumerate() {
            let mut idx = unravel(i, &want_shape);
            idx[axis] = pos[idx[axis]] as usize;
            prop_assert_eq!(v, xv[ravel(&idx, &shape)]);
        }
    }
}

#[test]
fn slice_axis_examples_and_errors() {
    let x = iota64(&[6]);
    let s = |start, stop, step| eval(&[&x], |b, p| shape::slice_axis(b, p[0], 0, start, stop, step)).to_f64_vec();
    assert_eq!(s(None, None, -1), vec![5.0, 4.0, 3.0, 2.0, 1.0, 0.0]);
    assert_eq!(s(Some(-2), None, 1), vec![4.0, 5.0]);
    assert_eq!(s(Some(4), Some(0), -2), vec![4.0, 2.0]);
    assert_eq!(s(Some(100), Some(-100), -3), vec![5.0, 2.0]);
    assert_eq!(s(Some(1), Some(100), 2), vec![1.0, 3.0, 5.0]);
    assert_eq!(s(Some(3), Some(1), 1), Vec::<f64>::new());
    assert!(err_msg(&[&x], |b, p| shape::slice_axis(b, p[0], 0, None, None, 0)).contains("step"));
    assert!(err_msg(&[&x], |b, p| shape::slice_axis(b, p[0], 1, None, None, 1)).contains("axis 1"));
}

#[test]
fn take_matches_numpy_clip() {
    let x = iota64(&[3, 4, 2]);
    let idx = ti32(&[2, 3], &[0, 3, 1, 2, 9, -4]);
    for axis in 0..3 {
        let y = eval(&[&x, &idx], |b, p| shape::take(b, p[0], p[1], axis));
        let xs = [3usize, 4, 2];
        let mut want_shape = xs[..axis].to_vec();
        want_shape.extend([2, 3]);
        want_shape.extend(&xs[axis + 1..]);
        assert_eq!(y.shape(), want_shape.as_slice(), "axis {axis}");
        let (xv, yv, iv) = (x.to_f64_vec(), y.to_f64_vec(), idx.to_vec::<i32>().unwrap());
        for (i, &v) in yv.iter().enumerate() {
            let o = unravel(i, &want_shape);
            let k = iv[o[axis] * 3 + o[axis + 1]].clamp(0, xs[axis] as i32 - 1) as usize;
            let mut src = o[..axis].to_vec();
            src.push(k);
            src.extend(&o[axis + 2..]);
            assert_eq!(v, xv[ravel(&src, &xs)], "axis {axis} element {i}");
        }
    }
    // Scalar index removes the axis.
    let y = eval(&[&x, &ti32(&[], &[2])], |b, p| shape::take(b, p[0], p[1], 1));
    assert_eq!(y.shape(), &[3, 2]);
    assert_eq!(y.to_f64_vec(), vec![4.0, 5.0, 12.0, 13.0, 20.0, 21.0]);
    assert!(err_msg(&[&x, &t64(&[1], &[0.0])], |b, p| shape::take(b, p[0], p[1], 0)).contains("i32 or i64"));
    assert!(err_msg(&[&x, &idx], |b, p| shape::take(b, p[0], p[1], 3)).contains("axis 3"));
}

#[test]
fn where_and_creators() {
    let c = Tensor::from_vec(vec![3], vec![true, false, true]).unwrap();
    let a = t64(&[2, 1], &[1.0, 2.0]);
    let z = t64(&[], &[-1.0]);
    let y = eval(&[&c, &a, &z], |b, p| shape::where_(b, p[0], p[1], p[2]));
    assert_tensor(&y, &[2, 3], &[1.0, -1.0, 1.0, 2.0, -1.0, 2.0], 0.0);
    assert!(err_msg(&[&a, &a, &z], |b, p| shape::where_(b, p[0], p[1], p[2])).contains("bool"));

    let y = eval(&[], |b, _| shape::full(b, &[2, 2], 3.5, DType::F32));
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![3.5; 4]);
    assert_eq!(eval(&[], |b, _| shape::zeros(b, &[3], DType::I64)).to_vec::<i64>().unwrap(), vec![0; 3]);
    assert_eq!(eval(&[], |b, _| shape::ones(b, &[2], DType::Bool)).to_vec::<bool>().unwrap(), vec![true; 2]);
    let y = eval(&[&a], |b, p| shape::full_like(b, p[0], 7.0));
    assert_tensor(&y, &[2, 1], &[7.0, 7.0], 0.0);

    let ar = |start, stop, step, dt| eval(&[], |b, _| shape::arange(b, start, stop, step, dt)).to_f64_vec();
    assert_eq!(ar(0.0, 5.0, 1.0, DType::I32), vec![0.0, 1.0, 2.0, 3.0, 4.0]);
    assert_eq!(ar(10.0, 1.0, -3.0, DType::I64), vec![10.0, 7.0, 4.0]);
    assert_eq!(ar(3.0, 3.0, 1.0, DType::I32), Vec::<f64>::new());
    assert_close(&ar(0.0, 1.0, 0.25, DType::F64), &[0.0, 0.25, 0.5, 0.75], 0.0);
    assert_close(&ar(1.0, 2.0, 0.3, DType::F32), &[1.0, 1.3, 1.6, 1.9], 1e-6);
    assert!(err_msg(&[], |b, _| shape::arange(b, 0.0, 1.0, 0.0, DType::F64)).contains("step"));
    assert!(err_msg(&[], |b, _| shape::arange(b, 0.0, 1.0, 0.5, DType::I32)).contains("integer"));
    assert!(err_msg(&[], |b, _| shape::arange(b, 0.0, 1.0, 1.0, DType::Bool)).contains("numeric"));

    let ls = |start, stop, num, endpoint| {
        eval(&[], |b, _| shape::linspace(b, start, stop, num, endpoint, DType::F64)).to_f64_vec()
    };
    assert_close(&ls(0.0, 1.0, 5, true), &[0.0, 0.25, 0.5, 0.75, 1.0], 1e-15);
    assert_close(&ls(0.0, 1.0, 4, false), &[0.0, 0.25, 0.5, 0.75], 1e-15);
    assert_eq!(ls(2.0, 3.0, 1, true), vec![2.0]);
    assert_eq!(ls(2.0, 3.0, 0, true), Vec::<f64>::new());
    let v = ls(0.1, 0.7, 7, true);
    assert_eq!(v[6], 0.7, "the endpoint is exact");
    assert!(err_msg(&[], |b, _| shape::linspace(b, 0.0, 1.0, 3, true, DType::I32)).contains("floating"));
}
