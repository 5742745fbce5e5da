//! Forward tests of `reduce_window_{sum,max,min}` against a naive reference
//! that materialises the padded, base-dilated operand's positions one by one
//! (bit-exact: both combine window offsets in row-major order starting from
//! the identity), plus pooling cases, the parallel path and every error.

use graft_core::ops::window::{ReduceWindow, WindowKind};
use graft_core::ops::{display_prim, Op};
use graft_core::{Builder, DType, Executable, IrError, Tensor, TensorType, Value};
use proptest::prelude::*;

fn run(x: &Tensor, f: impl FnOnce(&mut Builder, Value) -> Result<Value, IrError>) -> Tensor {
    let mut b = Builder::new("f");
    let p = b.param(x.ty());
    let y = f(&mut b, p).unwrap();
    let func = b.finish(&[y]).unwrap();
    let inferred = func.ty(y).clone();
    let out = Executable::new(func).unwrap().run(&[x]).unwrap().remove(0);
    assert_eq!(out.ty(), inferred, "inferred type differs from the produced tensor");
    out
}

/// Window parameters of one test case.
#[derive(Debug, Clone)]
struct Geo {
    window: Vec<usize>,
    strides: Vec<usize>,
    padding: Vec<(usize, usize)>,
    bd: Vec<usize>,
    wd: Vec<usize>,
}

impl Geo {
    fn simple(window: &[usize], strides: &[usize], padding: &[(usize, usize)]) -> Geo {
        let ones = vec![1; window.len()];
        Geo {
            window: window.to_vec(),
            strides: strides.to_vec(),
            padding: padding.to_vec(),
            bd: ones.clone(),
            wd: ones,
        }
    }
}

fn win(kind: WindowKind, x: &Tensor, g: &Geo) -> Tensor {
    run(x, |b, p| b.reduce_window(kind, p, &g.window, &g.strides, &g.padding, &g.bd, &g.wd))
}

fn identity(kind: WindowKind) -> f64 {
    match kind {
        WindowKind::Sum => 0.0,
        WindowKind::Max => f64::NEG_INFINITY,
        WindowKind::Min => f64::INFINITY,
    }
}

fn comb(kind: WindowKind, a: f64, b: f64) -> f64 {
    match kind {
        WindowKind::Sum => a + b,
        _ if a.is_nan() || b.is_nan() => f64::NAN,
        WindowKind::Max => a.max(b),
        WindowKind::Min => a.min(b),
    }
}

/// Output shape by the formula, or None when some dimension is < 1.
fn ref_shape(shape: &[usize], g: &Geo) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for d in 0..shape.len() {
        let dilated = if shape[d] == 0 { 0 } else { (shape[d] - 1) * g.bd[d] + 1 };
        let padded = (g.padding[d].0 + dilated + g.padding[d].1) as i64;
        let span = ((g.window[d] - 1) * g.wd[d] + 1) as i64;
        if padded < span {
            return None;
        }
        out.push(((padded - span) / g.strides[d] as i64 + 1) as usize);
    }
    Some(out)
}

/// Naive reduce_window in f64: for each output, walk every window offset,
/// find the padded-dilated position and look it up (identity if it is
/// padding or a hole).
fn ref_window(kind: WindowKind, shape: &[usize], data: &[f64], g: &Geo) -> (Vec<usize>, Vec<f64>) {
    let oshape = ref_shape(shape, g).expect("reference needs a valid geometry");
    let rank = shape.len();
    let n_out: usize = oshape.iter().product();
    let n_win: usize = g.window.iter().product();
    let mut out = vec![identity(kind); n_out];
    for (o, slot) in out.iter_mut().enumerate() {
        let mut oidx = vec![0; rank];
        let mut rem = o;
        for d in (0..rank).rev() {
            oidx[d] = rem % oshape[d];
            rem /= oshape[d];
        }
        for w in 0..n_win {
            let mut kidx = vec![0; rank];
            let mut rem = w;
            for d in (0..rank).rev() {
                kidx[d] = rem % g.window[d];
                rem /= g.window[d];
            }
            let mut flat = 0usize;
            let mut valid = true;
            for d in 0..rank {
                let pos = (oidx[d] * g.strides[d] + kidx[d] * g.wd[d]) as i64 - g.padding[d].0 as i64;
                if pos < 0 || pos % g.bd[d] as i64 != 0 || (pos / g.bd[d] as i64) as usize >= shape[d] {
                    valid = false;
                    break;
                }
                flat = flat * shape[d] + (pos / g.bd[d] as i64) as usize;
            }
            if valid {
                *slot = comb(kind, *slot, data[flat]);
            }
        }
    }
    (oshape, out)
}

fn assert_same(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(g == w || (g.is_nan() && w.is_nan()), "{what}: [{i}] got {g}, want {w}");
    }
}

#[test]
fn hand_computed_1d_windows() {
    let x = Tensor::vec1(&[1.0, 2.0, 3.0, 4.0, 5.0]);
    for dtype in [DType::F64, DType::F32, DType::I32, DType::I64] {
        let x = x.cast(dtype);
        let g = Geo::simple(&[2], &[1], &[(0, 0)]);
        assert_eq!(win(WindowKind::Sum, &x, &g).to_f64_vec(), vec![3.0, 5.0, 7.0, 9.0]);
        assert_eq!(win(WindowKind::Max, &x, &g).to_f64_vec(), vec![2.0, 3.0, 4.0, 5.0]);
        assert_eq!(win(WindowKind::Min, &x, &g).to_f64_vec(), vec![1.0, 2.0, 3.0, 4.0]);
        // Stride 2 with padding (1, 1): windows [pad,1], [2,3], [4,5], output 3.
        let g = Geo::simple(&[2], &[2], &[(1, 1)]);
        let y = win(WindowKind::Sum, &x, &g);
        assert_eq!(y.shape(), &[3]);
        assert_eq!(y.to_f64_vec(), vec![1.0, 5.0, 9.0]);
        // Padding never wins a max or a min.
        let g = Geo::simple(&[3], &[3], &[(2, 2)]);
        assert_eq!(win(WindowKind::Max, &x, &g).to_f64_vec(), vec![1.0, 4.0, 5.0]);
        assert_eq!(win(WindowKind::Min, &x, &g).to_f64_vec(), vec![1.0, 2.0, 5.0]);
        // Base dilation 2: [1,_,2,_,3,_,4,_,5], window 2 stride 1.
        let xs = x.clone();
        let g = Geo { window: vec![2], strides: vec![1], padding: vec![(0, 0)], bd: vec![2], wd: vec![1] };
        assert_eq!(win(WindowKind::Sum, &xs, &g).to_f64_vec(), vec![1.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0, 5.0]);
        // Window dilation 2: pairs (0,2), (1,3), (2,4).
        let g = Geo { window: vec![2], strides: vec![1], padding: vec![(0, 0)], bd: vec![1], wd: vec![2] };
        assert_eq!(win(WindowKind::Sum, &xs, &g).to_f64_vec(), vec![4.0, 6.0, 8.0]);
    }
}

#[test]
fn max_pool_2x2_nchw_and_nhwc() {
    // 4x4 image 0..16, 2x2 max pool stride 2.
    let img: Vec<f64> = (0..16).map(|v| v as f64).collect();
    let x = Tensor::from_vec(vec![1, 1, 4, 4], img.clone()).unwrap();
    let g = Geo::simple(&[1, 1, 2, 2], &[1, 1, 2, 2], &[(0, 0); 4]);
    let y = win(WindowKind::Max, &x, &g);
    assert_eq!(y.shape(), &[1, 1, 2, 2]);
    assert_eq!(y.to_f64_vec(), vec![5.0, 7.0, 13.0, 15.0]);
    assert_eq!(win(WindowKind::Sum, &x, &g).to_f64_vec(), vec![10.0, 18.0, 42.0, 50.0]);
    // Same image as NHWC with 2 channels (second channel negated).
    let nhwc: Vec<f64> = img.iter().flat_map(|&v| [v, -v]).collect();
    let x = Tensor::from_vec(vec![1, 4, 4, 2], nhwc).unwrap();
    let g = Geo::simple(&[1, 2, 2, 1], &[1, 2, 2, 1], &[(0, 0); 4]);
    let y = win(WindowKind::Max, &x, &g);
    assert_eq!(y.shape(), &[1, 2, 2, 2]);
    assert_eq!(y.to_f64_vec(), vec![5.0, 0.0, 7.0, -2.0, 13.0, -8.0, 15.0, -10.0]);
}

#[test]
fn integer_and_bool_identities_fill_padding() {
    // An all-padding window gives the identity.
    let x = Tensor::vec1(&[3i32, -4]);
    let g = Geo::simple(&[2], &[2], &[(2, 0)]);
    assert_eq!(win(WindowKind::Max, &x, &g).to_vec::<i32>().unwrap(), vec![i32::MIN, 3]);
    assert_eq!(win(WindowKind::Min, &x, &g).to_vec::<i32>().unwrap(), vec![i32::MAX, -4]);
    assert_eq!(win(WindowKind::Sum, &x, &g).to_vec::<i32>().unwrap(), vec![0, -1]);
    let xl = x.cast(DType::I64);
    assert_eq!(win(WindowKind::Max, &xl, &g).to_vec::<i64>().unwrap(), vec![i64::MIN, 3]);
    let xf = x.cast(DType::F32);
    assert_eq!(win(WindowKind::Min, &xf, &g).to_vec::<f32>().unwrap(), vec![f32::INFINITY, -4.0]);
    let b = Tensor::vec1(&[true, false, false]);
    let g = Geo::simple(&[2], &[1], &[(0, 1)]);
    assert_eq!(win(WindowKind::Max, &b, &g).to_vec::<bool>().unwrap(), vec![true, false, false]);
    assert_eq!(win(WindowKind::Min, &b, &g).to_vec::<bool>().unwrap(), vec![false, false, false]);
}

#[test]
fn empty_operand_with_padding_and_rank0() {
    let e = Tensor::zeros(&TensorType::new(DType::F64, vec![0, 3]));
    let g = Geo::simple(&[2, 1], &[1, 1], &[(1, 1), (0, 0)]);
    let y = win(WindowKind::Max, &e, &g);
    assert_eq!(y.shape(), &[1, 3]);
    assert_eq!(y.to_f64_vec(), vec![f64::NEG_INFINITY; 3]);
    let y = win(WindowKind::Sum, &e, &g);
    assert_eq!(y.to_f64_vec(), vec![0.0; 3]);
    let s = Tensor::scalar(2.5f32);
    let g = Geo::simple(&[], &[], &[]);
    assert_eq!(win(WindowKind::Sum, &s, &g), s);
    // Window 1, stride 1: identity copy.
    let x = Tensor::from_vec(vec![2, 3], vec![1i64, 2, 3, 4, 5, 6]).unwrap();
    assert_eq!(win(WindowKind::Min, &x, &Geo::simple(&[1, 1], &[1, 1], &[(0, 0); 2])), x);
}

#[test]
fn nan_propagates_through_max_pool() {
    let mut v: Vec<f64> = (0..16).map(|v| v as f64).collect();
    v[5] = f64::NAN;
    let x = Tensor::from_vec(vec![4, 4], v).unwrap();
    let g = Geo::simple(&[2, 2], &[2, 2], &[(0, 0); 2]);
    for dtype in [DType::F64, DType::F32] {
        let y = win(WindowKind::Max, &x.cast(dtype), &g).to_f64_vec();
        assert!(y[0].is_nan() && y[1] == 7.0 && y[2] == 13.0 && y[3] == 15.0, "{y:?}");
        let y = win(WindowKind::Min, &x.cast(dtype), &g).to_f64_vec();
        assert!(y[0].is_nan() && y[1] == 2.0, "{y:?}");
    }
    // Contiguous (stride 1) and base-dilated paths, against the reference.
    let data = x.to_f64_vec();
    for g in [
        Geo::simple(&[3, 2], &[1, 1], &[(1, 1), (0, 1)]),
        Geo { window: vec![2, 3], strides: vec![1, 2], padding: vec![(0, 0), (1, 1)], bd: vec![1, 2], wd: vec![1, 1] },
    ] {
        for kind in [WindowKind::Max, WindowKind::Min, WindowKind::Sum] {
            let (_, want) = ref_window(kind, &[4, 4], &data, &g);
            assert!(want.iter().any(|v| v.is_nan()) && want.iter().any(|v| !v.is_nan()));
            for dtype in [DType::F64, DType::F32] {
                assert_same(&win(kind, &x.cast(dtype), &g).to_f64_vec(), &want, &format!("{kind:?} {g:?}"));
            }
        }
    }
}

fn pseudo(i: usize) -> f64 {
    let h = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 11;
    (h as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
}

#[test]
fn large_pooling_takes_the_parallel_path_correctly() {
    let cases: Vec<(Vec<usize>, Geo)> = vec![
        // NHWC 3x3 stride 2 "same" max pool.
        (vec![2, 33, 31, 16], Geo::simple(&[1, 3, 3, 1], &[1, 2, 2, 1], &[(0, 0), (1, 1), (1, 1), (0, 0)])),
        // NCHW 3x3 stride 1 sum.
        (vec![2, 3, 65, 67], Geo::simple(&[1, 1, 3, 3], &[1, 1, 1, 1], &[(0, 0), (0, 0), (1, 2), (2, 1)])),
        // Dilations on the last (row) dimension and a leading one.
        (
            vec![3, 41, 257],
            Geo {
                window: vec![1, 2, 3],
                strides: vec![1, 2, 3],
                padding: vec![(0, 0), (1, 0), (2, 3)],
                bd: vec![1, 2, 2],
                wd: vec![1, 2, 1],
            },
        ),
    ];
    for (shape, g) in cases {
        let x = Tensor::from_fn(&TensorType::new(DType::F64, shape.clone()), pseudo);
        let data = x.to_f64_vec();
        for kind in WindowKind::ALL {
            let (oshape, want) = ref_window(kind, &shape, &data, &g);
            let y = win(kind, &x, &g);
            assert_eq!(y.shape(), oshape.as_slice());
            assert_same(&y.to_f64_vec(), &want, &format!("{kind:?} {shape:?}"));
            let one = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap().install(|| win(kind, &x, &g));
            assert_eq!(one, y, "thread-count dependence {kind:?} {shape:?}");
        }
        let x32 = x.cast(DType::F32);
        let (_, want) = ref_window(WindowKind::Max, &shape, &x32.to_f64_vec(), &g);
        assert_same(&win(WindowKind::Max, &x32, &g).to_f64_vec(), &want, "f32 max");
    }
}

/// Pooling over the last two dims of `[N, C, H, W]` runs plane by plane;
/// windows inside the plane combine each output in one go (2x2 stride 2
/// unrolled), others take the general passes. Against the bit-exact
/// reference, with NaNs (which send a row back to the general passes),
/// odd sizes, batch 1, every kind, float and integer dtypes, and 1 vs 2 threads.
#[test]
fn pooling_planes_match_the_reference() {
    let threads = |n: usize| rayon::ThreadPoolBuilder::new().num_threads(n).build().unwrap();
    let geos = [
        Geo::simple(&[1, 1, 2, 2], &[1, 1, 2, 2], &[(0, 0); 4]),
        Geo::simple(&[1, 1, 3, 3], &[1, 1, 1, 1], &[(0, 0); 4]),
        Geo::simple(&[1, 1, 3, 2], &[1, 1, 2, 1], &[(0, 0); 4]),
        Geo::simple(&[1, 1, 2, 2], &[1, 1, 2, 2], &[(0, 0), (0, 0), (1, 0), (0, 1)]),
        Geo {
            window: vec![1, 1, 2, 2],
            strides: vec![1, 1, 1, 2],
            padding: vec![(0, 0); 4],
            bd: vec![1, 1, 1, 2],
            wd: vec![1, 1, 2, 1],
        },
        // A leading window: the general odometer.
        Geo::simple(&[1, 2, 2, 2], &[1, 1, 2, 2], &[(0, 0); 4]),
    ];
    for shape in [vec![1, 1, 4, 4], vec![3, 2, 5, 7], vec![2, 3, 8, 8], vec![1, 2, 6, 1], vec![2, 4, 33, 64]] {
        let x = Tensor::from_fn(&TensorType::new(DType::F64, shape.clone()), |i| (pseudo(i) * 8.0).round());
        let mut with_nan = x.to_f64_vec();
        for v in with_nan.iter_mut().step_by(37) {
            *v = f64::NAN;
        }
        let xn = Tensor::from_vec(shape.clone(), with_nan).unwrap();
        for g in &geos {
            if ref_shape(&shape, g).is_none() {
                continue;
            }
            for kind in WindowKind::ALL {
                for (xs, dtypes) in
                    [(&x, &[DType::F64, DType::F32, DType::I32][..]), (&xn, &[DType::F64, DType::F32][..])]
                {
                    let (oshape, want) = ref_window(kind, &shape, &xs.to_f64_vec(), g);
                    for &dtype in dtypes {
                        let xd = xs.cast(dtype);
                        let y = threads(2).install(|| win(kind, &xd, g));
                        assert_eq!(y.shape(), oshape.as_slice());
                        let want: Vec<f64> = if dtype.is_int() {
                            let (lo, hi) = (i32::MIN as f64, i32::MAX as f64);
                            want.iter()
                                .map(|&v| {
                                    if v == f64::NEG_INFINITY {
                                        lo
                                    } else if v == f64::INFINITY {
                                        hi
                                    } else {
                                        v
                                    }
                                })
                                .collect()
                        } else {
                            want.clone()
                        };
                        assert_same(&y.to_f64_vec(), &want, &format!("{kind:?} {dtype} {shape:?} {g:?}"));
                        let one = threads(1).install(|| win(kind, &xd, g));
                        assert!(one.to_f64_vec().iter().zip(y.to_f64_vec()).all(|(a, b)| a.to_bits() == b.to_bits()));
                    }
                }
            }
        }
    }
}

#[test]
fn params_print() {
    let w = ReduceWindow {
        kind: WindowKind::Max,
        window: vec![2, 2],
        strides: vec![2, 1],
        padding: vec![(0, 1), (1, 0)],
        base_dilation: vec![1, 1],
        window_dilation: vec![1, 2],
    };
    assert_eq!(
        display_prim(&w),
        "reduce_window_max[window=(2,2), strides=(2,1), padding=((0,1),(1,0)), base_dilation=(1,1), window_dilation=(1,2)]"
    );
}

fn type_err(r: Result<Value, IrError>) -> graft_core::TypeError {
    match r {
        Err(IrError::Type(te)) => te,
        other => panic!("expected a type error, got {other:?}"),
    }
}

#[test]
fn errors_are_structured() {
    let mut b = Builder::new("f");
    let t = TensorType::new(DType::F32, vec![4, 5]);
    let x = b.param(t.clone());
    for kind in WindowKind::ALL {
        // Window larger than the operand.
        let te = type_err(b.reduce_window_simple(kind, x, &[5, 1], &[1, 1], &[(0, 0), (0, 0)]));
        let name = match kind {
            WindowKind::Sum => "reduce_window_sum",
            WindowKind::Max => "reduce_window_max",
            WindowKind::Min => "reduce_window_min",
        };
        assert!(te.prim.starts_with(name), "{}", te.prim);
        assert_eq!(te.operands, vec![t.clone()]);
        assert!(te.expected.contains("fit"), "{}", te.expected);
    }
    // Padding makes it fit.
    assert!(b.reduce_window_simple(WindowKind::Sum, x, &[5, 1], &[1, 1], &[(1, 0), (0, 0)]).is_ok());
    // Window dilation makes it too big again: span (3-1)*2+1 = 5 > 4.
    assert!(b.reduce_window(WindowKind::Sum, x, &[3, 1], &[1, 1], &[(0, 0); 2], &[1, 1], &[2, 1]).is_err());
    // Base dilation makes it fit: (4-1)*2+1 = 7 >= 5.
    assert!(b.reduce_window(WindowKind::Sum, x, &[5, 1], &[1, 1], &[(0, 0); 2], &[2, 1], &[1, 1]).is_ok());
    let te = type_err(b.reduce_window_simple(WindowKind::Max, x, &[2], &[1, 1], &[(0, 0); 2]));
    assert!(te.expected.contains("window of length 2"), "{}", te.expected);
    assert!(b.reduce_window_simple(WindowKind::Max, x, &[2, 2], &[1], &[(0, 0); 2]).is_err());
    assert!(b.reduce_window_simple(WindowKind::Max, x, &[2, 2], &[1, 1], &[(0, 0)]).is_err());
    assert!(b.reduce_window(WindowKind::Max, x, &[2, 2], &[1, 1], &[(0, 0); 2], &[1], &[1, 1]).is_err());
    assert!(b.reduce_window(WindowKind::Max, x, &[2, 2], &[1, 1], &[(0, 0); 2], &[1, 1], &[1]).is_err());
    for (w, s, bd, wd) in [
        ([0, 1], [1, 1], [1, 1], [1, 1]),
        ([1, 1], [1, 0], [1, 1], [1, 1]),
        ([1, 1], [1, 1], [0, 1], [1, 1]),
        ([1, 1], [1, 1], [1, 1], [1, 0]),
    ] {
        let te = type_err(b.reduce_window(WindowKind::Min, x, &w, &s, &[(0, 0); 2], &bd, &wd));
        assert!(te.expected.contains(">= 1"), "{}", te.expected);
    }
    // Absurd sizes are a type error, not an overflow panic.
    assert!(b
        .reduce_window(WindowKind::Sum, x, &[1, 1], &[1, 1], &[(usize::MAX, 1), (0, 0)], &[1, 1], &[1, 1])
        .is_err());
    assert!(b.reduce_window(WindowKind::Sum, x, &[1, 1], &[1, 1], &[(0, 0); 2], &[usize::MAX, 1], &[1, 1]).is_err());
    let bl = b.param(TensorType::new(DType::Bool, vec![3]));
    let te = type_err(b.reduce_window_simple(WindowKind::Sum, bl, &[2], &[1], &[(0, 0)]));
    assert!(te.expected.contains("not bool"), "{}", te.expected);
    let e = b.param(TensorType::new(DType::F32, vec![0]));
    assert!(b.reduce_window_simple(WindowKind::Max, e, &[1], &[1], &[(0, 0)]).is_err());
    let w = ReduceWindow {
        kind: WindowKind::Sum,
        window: vec![],
        strides: vec![],
        padding: vec![],
        base_dilation: vec![],
        window_dilation: vec![],
    };
    let s = TensorType::scalar(DType::F32);
    assert!(w.infer(&[s.clone(), s]).is_err());
}

fn geo_case() -> impl Strategy<Value = (Vec<usize>, Geo)> {
    prop::collection::vec((0usize..=6, 1usize..=3, 1usize..=3, 0usize..=2, 0usize..=2, 1usize..=3, 1usize..=2), 1..=3)
        .prop_map(|dims| {
            let shape = dims.iter().map(|d| d.0).collect();
            let g = Geo {
                window: dims.iter().map(|d| d.1).collect(),
                strides: dims.iter().map(|d| d.2).collect(),
                padding: dims.iter().map(|d| (d.3, d.4)).collect(),
                bd: dims.iter().map(|d| d.5).collect(),
                wd: dims.iter().map(|d| d.6).collect(),
            };
            (shape, g)
        })
}

proptest! {
    #[test]
    fn prop_windows_match_reference((shape, g) in geo_case()) {
        let x = Tensor::from_fn(&TensorType::new(DType::F64, shape.clone()), |i| (pseudo(i) * 8.0).round());
        let data = x.to_f64_vec();
        for kind in WindowKind::ALL {
            let mut b = Builder::new("f");
            let p = b.param(x.ty());
            let r = b.reduce_window(kind, p, &g.window, &g.strides, &g.padding, &g.bd, &g.wd);
            match ref_shape(&shape, &g) {
                None => {
                    prop_assert!(matches!(r, Err(IrError::Type(_))), "expected a type error for {:?} {:?}", shape, g);
                }
                Some(_) => {
                    prop_assert!(r.is_ok());
                    let (oshape, want) = ref_window(kind, &shape, &data, &g);
                    for dtype in [DType::F64, DType::F32, DType::I32, DType::I64] {
                        let xd = x.cast(dtype);
                        let y = win(kind, &xd, &g);
                        prop_assert_eq!(y.shape(), oshape.as_slice());
                        let want: Vec<f64> = if dtype.is_int() {
                            let (lo, hi) = if dtype == DType::I32 { (i32::MIN as f64, i32::MAX as f64) } else { (i64::MIN as f64, i64::MAX as f64) };
                            want.iter().map(|&v| if v == f64::NEG_INFINITY { lo } else if v == f64::INFINITY { hi } else { v }).collect()
                        } else {
                            want.clone()
                        };
                        prop_assert_eq!(y.to_f64_vec(), want, "{:?} {} {:?} {:?}", kind, dtype, shape, g);
                    }
                }
            }
        }
    }
}
