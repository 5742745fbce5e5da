//! Helpers for tests that run native kernels against the interpreter.

use graft_core::kernel::CompileMode;
use graft_core::tensor::Storage;
use graft_core::{ExecOptions, Executable, Func, Tensor, TensorType};

/// True (after saying so) when `GRAFT_SKIP_CC_TESTS=1` asks to skip tests
/// that need a C compiler.
pub fn skip() -> bool {
    if std::env::var_os("GRAFT_SKIP_CC_TESTS").is_some_and(|v| v == "1") {
        eprintln!("skipped: GRAFT_SKIP_CC_TESTS=1 (native-kernel test needs a C compiler)");
        return true;
    }
    false
}

/// Every combination of fusion and compilation the executor has (compiled
/// only where a C compiler may be used).
pub fn all_options() -> Vec<ExecOptions> {
    let mut v = Vec::new();
    for fuse in [true, false] {
        v.push(ExecOptions { fuse, compile: CompileMode::Off, ..ExecOptions::default() });
        if !skip() {
            v.push(ExecOptions { fuse, compile: CompileMode::Sync, ..ExecOptions::default() });
        }
    }
    v
}

pub fn opts(compile: CompileMode) -> ExecOptions {
    ExecOptions { compile, ..ExecOptions::default() }
}

pub fn bits(t: &Tensor) -> Vec<u64> {
    match t.storage() {
        Storage::F16(v) => v.iter().map(|x| if x.is_nan() { u64::MAX } else { x.to_bits() as u64 }).collect(),
        Storage::F32(v) => v.iter().map(|x| if x.is_nan() { u64::MAX } else { x.to_bits() as u64 }).collect(),
        Storage::F64(v) => v.iter().map(|x| if x.is_nan() { u64::MAX } else { x.to_bits() }).collect(),
        Storage::I32(v) => v.iter().map(|&x| x as u32 as u64).collect(),
        Storage::I64(v) => v.iter().map(|&x| x as u64).collect(),
        Storage::U32(v) => v.iter().map(|&x| x as u64).collect(),
        Storage::Bool(v) => v.iter().map(|&x| x as u64).collect(),
    }
}

/// Outputs equal bit for bit (every NaN counts as one value): same types,
/// and the first differing element named otherwise.
pub fn assert_bitwise_eq(a: &[Tensor], b: &[Tensor]) {
    assert_eq!(a.len(), b.len());
    for (k, (x, y)) in a.iter().zip(b).enumerate() {
        assert_eq!(x.ty(), y.ty(), "output {k}: type differs");
        if let Some(i) = bits(x).iter().zip(&bits(y)).position(|(p, q)| p != q) {
            panic!("output {k} differs at element {i}: {:?} vs {:?}", x.storage().get_f64(i), y.storage().get_f64(i));
        }
    }
}

pub fn data(ty: &TensorType, seed: u64) -> Tensor {
    Tensor::from_fn(ty, |i| {
        let mut z = seed.wrapping_add((i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        let r = ((z ^ (z >> 31)) >> 32) as u32;
        match r % 41 {
            0 => f64::NAN,
            1 => f64::INFINITY,
            2 => f64::NEG_INFINITY,
            3 => 0.0,
            4 => -0.0,
            _ => (r % 20_000) as f64 / 2_500.0 - 4.0,
        }
    })
}

/// Checks that `got` (from a run described by `how`) has the types and
/// bits of the interpreter's `want`, naming the first output and element
/// that differs.
pub fn assert_same_bits(got: &[Tensor], want: &[Tensor], how: &str) {
    assert_eq!(got.len(), want.len(), "{how}: number of outputs");
    for (k, (a, b)) in got.iter().zip(want).enumerate() {
        assert_eq!(a.ty(), b.ty(), "{how}: output {k}");
        let (x, y) = (bits(a), bits(b));
        if let Some(i) = x.iter().zip(&y).position(|(p, q)| p != q) {
            panic!(
                "output {k} differs at {i}: {how} {:?} vs interpreter {:?}",
                a.storage().get_f64(i),
                b.storage().get_f64(i)
            );
        }
    }
}

/// Runs `f` on the interpreter and natively (compiled before the first
/// call), with constant sizes and size-generic (`ExecOptions::shapeless`),
/// and checks every output bit for bit; returns the native executable
/// with constant sizes.
pub fn check_native(f: &Func, inputs: &[Tensor]) -> Executable {
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let want = Executable::with_options(f.clone(), opts(CompileMode::Off)).unwrap().run(&refs).unwrap();
    let shapeless = ExecOptions { shapeless: true, ..opts(CompileMode::Sync) };
    let mut first = None;
    for (options, how) in [(opts(CompileMode::Sync), "native"), (shapeless, "size-generic native")] {
        let exe = Executable::with_options(f.clone(), options).unwrap();
        let (ready, total) = exe.native_status();
        assert!(total > 0, "no fused group was handed to the compiler");
        assert_eq!(ready, total, "some kernels did not compile (see the warning above)");
        let got = exe.run(&refs).unwrap();
        assert_same_bits(&got, &want, how);
        first.get_or_insert(exe);
    }
    first.expect("the loop ran at least once")
}
