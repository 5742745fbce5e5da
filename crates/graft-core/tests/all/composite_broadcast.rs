//! NumPy broadcasting composites (`broadcast::binary`, `compare`, `select`,
//! `broadcast_to`) against a naive reference: right-aligned index mapping
//! written out in the test. Property tests draw random broadcast-compatible
//! shape pairs; incompatible pairs must give an error naming both shapes.

use crate::common::unravel;
use graft_core::composite::broadcast;
use graft_core::ops::binary::{Binary, Compare};
use graft_core::{Builder, Executable, IrError, Tensor, TensorType, Value};
use proptest::prelude::*;

fn run(xs: &[&Tensor], f: impl FnOnce(&mut Builder, &[Value]) -> Result<Value, IrError>) -> Result<Tensor, IrError> {
    let mut b = Builder::new("f");
    let ps: Vec<Value> = xs.iter().map(|x| b.param(x.ty())).collect();
    let y = f(&mut b, &ps)?;
    let func = b.finish(&[y])?;
    Ok(Executable::new(func).unwrap().run(xs).unwrap().remove(0))
}

/// Reference broadcast shape (NumPy rule), `None` if incompatible.
fn ref_shape(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let r = a.len().max(b.len());
    let get = |s: &[usize], i: usize| if i + s.len() >= r { s[i + s.len() - r] } else { 1 };
    (0..r)
        .map(|i| {
            let (x, y) = (get(a, i), get(b, i));
            if x == y || y == 1 {
                Some(x)
            } else if x == 1 {
                Some(y)
            } else {
                None
            }
        })
        .collect()
}

/// Element of `data` (shape `s`) read at output multi-index `idx` (rank >= s.len()).
fn read(data: &[f64], s: &[usize], idx: &[usize]) -> f64 {
    let off = idx.len() - s.len();
    let mut flat = 0;
    for (k, &d) in s.iter().enumerate() {
        let i = if d == 1 { 0 } else { idx[off + k] };
        flat = flat * d + i;
    }
    data[flat]
}

fn tensor(shape: &[usize], seed: f64) -> Tensor {
    Tensor::from_fn(&TensorType::new(graft_core::DType::F64, shape.to_vec()), |i| seed + i as f64 * 1.5)
}

/// A broadcast-compatible pair: a common output shape, then each operand a
/// suffix of it with some dims replaced by 1.
fn compatible_pair() -> impl Strategy<Value = (Vec<usize>, Vec<usize>)> {
    prop::collection::vec(1usize..4, 0..5).prop_flat_map(|out| {
        let r = out.len();
        (Just(out), 0..=r, 0..=r, prop::collection::vec(any::<bool>(), r), prop::collection::vec(any::<bool>(), r))
            .prop_map(move |(out, ra, rb, ma, mb)| {
                let a: Vec<usize> = (r - ra..r).map(|i| if ma[i] { 1 } else { out[i] }).collect();
                let b: Vec<usize> = (r - rb..r).map(|i| if mb[i] { 1 } else { out[i] }).collect();
                (a, b)
            })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn binary_matches_reference((sa, sb) in compatible_pair()) {
        let (x, y) = (tensor(&sa, 0.5), tensor(&sb, -2.0));
        let out = run(&[&x, &y], |b, p| broadcast::binary(b, Binary::Sub, p[0], p[1])).unwrap();
        let want_shape = ref_shape(&sa, &sb).unwrap();
        prop_assert_eq!(out.shape(), want_shape.as_slice());
        let (xd, yd, od) = (x.to_f64_vec(), y.to_f64_vec(), out.to_f64_vec());
        for (i, &o) in od.iter().enumerate() {
            let idx = unravel(i, &want_shape);
            prop_assert_eq!(o, read(&xd, &sa, &idx) - read(&yd, &sb, &idx));
        }
    }

    #[test]
    fn compare_and_select_match_reference((sa, sb) in compatible_pair()) {
        let (x, y) = (tensor(&sa, 0.0), tensor(&sb, 3.0));
        let want_shape = ref_shape(&sa, &sb).unwrap();
        let lt = run(&[&x, &y], |b, p| broadcast::compare(b, Compare::Lt, p[0], p[1])).unwrap();
        let sel = run(&[&x, &y], |b, p| {
            let m = broadcast::compare(b, Compare::Lt, p[0], p[1])?;
            broadcast::select(b, m, p[0], p[1])
        })
        .unwrap();
        prop_assert_eq!(lt.shape(), want_shape.as_slice());
        prop_assert_eq!(sel.shape(), want_shape.as_slice());
        let (xd, yd) = (x.to_f64_vec(), y.to_f64_vec());
        let (ld, sd) = (lt.to_vec::<bool>().unwrap(), sel.to_f64_vec());
        for i in 0..ld.len() {
            let idx = unravel(i, &want_shape);
            let (a, c) = (read(&xd, &sa, &idx), read(&yd, &sb, &idx));
            prop_assert_eq!(ld[i], a < c);
            prop_assert_eq!(sd[i], a.min(c));
        }
    }

    #[test]
    fn broadcast_to_matches_reference((sa, sb) in compatible_pair()) {
        let target = ref_shape(&sa, &sb).unwrap();
        let x = tensor(&sa, 1.0);
        let out = run(&[&x], |b, p| broadcast::broadcast_to(b, p[0], &target)).unwrap();
        prop_assert_eq!(out.shape(), target.as_slice());
        let xd = x.to_f64_vec();
        for (i, &o) in out.to_f64_vec().iter().enumerate() {
            prop_assert_eq!(o, read(&xd, &sa, &unravel(i, &target)));
        }
    }

    #[test]
    fn incompatible_pairs_name_both_shapes(
        (sa, sb) in compatible_pair(),
        bump in 2usize..4,
        pick in any::<prop::sample::Index>(),
    ) {
        // Make one aligned dim differ with neither side 1.
        let r = sa.len().min(sb.len());
        prop_assume!(r > 0);
        let k = pick.index(r);
        let (mut sa, mut sb) = (sa, sb);
        let ia = sa.len() - 1 - k;
        let ib = sb.len() - 1 - k;
        sa[ia] = bump;
        sb[ib] = bump + 3;
        prop_assert!(ref_shape(&sa, &sb).is_none());
        let (x, y) = (tensor(&sa, 0.0), tensor(&sb, 0.0));
        let err = run(&[&x, &y], |b, p| broadcast::binary(b, Binary::Add, p[0], p[1])).unwrap_err();
        let msg = err.to_string();
        prop_assert!(msg.contains(&format!("{sa:?}")) && msg.contains(&format!("{sb:?}")), "{}", msg);
        prop_assert!(msg.contains("cannot be broadcast"), "{}", msg);
    }
}

#[test]
fn broadcast_to_rejects_shrinking_and_names_shapes() {
    let x = tensor(&[2, 3], 0.0);
    let err = run(&[&x], |b, p| broadcast::broadcast_to(b, p[0], &[3])).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("[2, 3]") && msg.contains("[3]"), "{msg}");
    // A compatible pair whose common shape is larger than the target is also refused.
    let x = tensor(&[4, 1], 0.0);
    let err = run(&[&x], |b, p| broadcast::broadcast_to(b, p[0], &[3])).unwrap_err();
    assert!(err.to_string().contains("[4, 1]"), "{err}");
}

#[test]
fn scalar_like_adopts_dtype() {
    let x = Tensor::vec1(&[1.0f32, 2.0]);
    let out = run(&[&x], |b, p| {
        let s = broadcast::scalar_like(b, 0.25, p[0])?;
        broadcast::binary(b, Binary::Mul, p[0], s)
    })
    .unwrap();
    assert_eq!(out.to_vec::<f32>().unwrap(), vec![0.25, 0.5]);
}

#[test]
fn same_shapes_emit_no_broadcast() {
    let mut b = Builder::new("f");
    let x = b.param(TensorType::new(graft_core::DType::F64, vec![2, 3]));
    let y = b.param(TensorType::new(graft_core::DType::F64, vec![2, 3]));
    broadcast::binary(&mut b, Binary::Add, x, y).unwrap();
    assert_eq!(b.func().eqns.len(), 1);
}
