//! Runtime SIMD dispatch (`ops::kernel::simd`): the elementwise kernels give
//! bitwise the same results at the detected instruction-set level (AVX-512 or
//! AVX2 on the test machine) as at the baseline level, for every float unary
//! and binary op and both float dtypes, on values covering zeros of both
//! signs, subnormals, infinities, NaN and ordinary magnitudes.

use crate::common;

use common::Rng;
use graft_core::kernel::CompileMode;
use graft_core::ops::binary::Binary;
use graft_core::ops::kernel::baseline_simd;
use graft_core::ops::unary::Unary;
use graft_core::{Builder, DType, ExecOptions, Executable, Tensor, TensorType};

/// 4099 values (not a multiple of any vector width, so loop tails run too).
fn values(dtype: DType, seed: u64) -> Tensor {
    let n = 4099;
    let ty = TensorType::new(DType::F64, vec![n]);
    let mut v = Rng(seed).tensor(&ty, -30.0, 30.0).to_f64_vec();
    let specials = [0.0, -0.0, 1.0, -1.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, 1e-310, -1e-310, 1e300, 0.5];
    for (i, s) in specials.iter().enumerate() {
        v[i * 7] = *s;
    }
    for i in (0..n).step_by(13) {
        v[i] *= 1e-3; // small magnitudes
    }
    Tensor::from_vec(vec![n], v).unwrap().cast(dtype)
}

/// Bit patterns, with every NaN mapped to one pattern (which NaN payload an
/// instruction propagates is not specified).
fn bits(t: &Tensor) -> Vec<u64> {
    t.to_f64_vec().iter().map(|x| if x.is_nan() { u64::MAX } else { x.to_bits() }).collect()
}

/// Runs unfused on the calling thread (below the parallel threshold), both
/// at the detected level and at the baseline level, and compares.
fn same_at_both_levels(name: &str, f: graft_core::Func, ins: &[Tensor]) {
    let exe = Executable::with_options(
        f,
        ExecOptions { fuse: false, block_elems: None, compile: CompileMode::Off, ..ExecOptions::default() },
    )
    .unwrap();
    let refs: Vec<&Tensor> = ins.iter().collect();
    let fast = exe.run(&refs).unwrap();
    let base = baseline_simd(|| exe.run(&refs).unwrap());
    assert_eq!(bits(&fast[0]), bits(&base[0]), "{name}: results differ between SIMD levels");
}

#[test]
fn simd_levels_agree() {
    for dtype in [DType::F32, DType::F64] {
        let x = values(dtype, 1);
        let y = values(dtype, 2);
        let ty = x.ty();
        for op in Unary::ALL.into_iter().filter(|op| op.accepts(dtype)) {
            let mut b = Builder::new("u");
            let p = b.param(ty.clone());
            let r = b.unary(op, p).unwrap();
            same_at_both_levels(&format!("{op:?} {dtype}"), b.finish(&[r]).unwrap(), &[x.clone()]);
        }
        for op in Binary::ALL.into_iter().filter(|op| op.accepts(dtype)) {
            let mut b = Builder::new("b");
            let p = b.param(ty.clone());
            let q = b.param(ty.clone());
            let r = b.binary(op, p, q).unwrap();
            same_at_both_levels(&format!("{op:?} {dtype}"), b.finish(&[r]).unwrap(), &[x.clone(), y.clone()]);
        }
    }
}
