//! Native kernels: the kernel IR's printer and verifier, the C toolchain
//! (cache, corrupted entries, missing compiler, unwritable cache) and
//! end-to-end runs whose results must equal the interpreter's bit for bit.
//!
//! These tests need a C compiler (`cc`). Without one they fail, unless
//! `GRAFT_SKIP_CC_TESTS=1` is set, in which case each says it skipped.

use crate::common;

use common::native::{bits, check_native, data, opts, skip};
use graft_core::kernel::native::{NativeError, Toolchain};
use graft_core::kernel::{self, Access, Arg, CompileMode, Index, Inst, Kernel, Lit, Window};
use graft_core::ops::binary::{Binary, Compare};
use graft_core::ops::unary::Unary;
use graft_core::{Builder, DType, ExecOptions, Executable, Func, Tensor, TensorType};

/// The primitives the native backend's tests cover, for the coverage guard
/// (`prim_coverage.rs`): `Family` or `Family::name`, where `Family::*` is
/// every kind of the family except those in [`EXEMPT`]. Per operation and
/// dtype, `mathfn_c.rs` compares the C prelude with the Rust kernels bit for
/// bit (its case table: every unary, binary and comparison op but its
/// `PENDING_*` ones, select, convert); end to end, this file runs the layout
/// operations as strided loads, `fusion.rs` random DAGs (with
/// `stop_gradient`) natively, `native_rows.rs` row reductions and
/// `native_loops.rs` compiled `scan`/`while` loops (with `concatenate`,
/// `pad`, gathers, dynamic slices and the random family: Threefry in
/// kernel-IR word operations; f64 uniforms keep the interpreter's kernel).
pub(crate) fn covered() -> Vec<String> {
    [
        "Unary::*",
        "Binary::*",
        "Compare::*",
        "Select",
        // fma.rs: native_kernels_are_bitwise, loop_bodies_compile_with_it
        "Fma",
        "Convert",
        "StopGradient",
        "Reshape",
        "BroadcastInDim",
        "Transpose",
        "Slice",
        "Reverse",
        "Concatenate",
        "Pad",
        "Reduce::*",
        "Scan",
        "While",
        "RandomBits",
        "RandomSplit",
        "RandomUniform",
        "RandomFoldIn",
        // native_loops.rs: gathers_in_a_body_run_compiled_and_bitwise,
        // dynamic_slices_in_a_body_run_compiled_and_bitwise
        "Gather",
        "DynamicSlice",
        "DynamicUpdateSlice",
    ]
    .map(String::from)
    .to_vec()
}

/// Primitives without a native kernel (they run in the interpreter; a
/// group never holds them), and why they are not in [`covered`].
pub(crate) const EXEMPT: &[(&str, &str)] = &[
    // f64 `pow` and `atan2` are not lowered (std `powf`, `atan2`); their
    // f32 versions are, and are covered by `Binary::*`:
    // `pow_groups_run_natively_in_f32_only`.
    ("Cond", "no kernel: if-converted to `select` inside compiled loops (native_loops.rs)"),
    ("Call", "no kernel: interpreter only"),
    ("Checkpoint", "no kernel: interpreter only"),
    ("CustomJvp", "no kernel: interpreter only"),
    ("CustomVjp", "no kernel: interpreter only"),
    ("CustomVjpTangent", "no kernel: interpreter only"),
    ("ScatterAdd", "no kernel on the CPU (its device form is the GPU's only)"),
    ("Argsort", "no kernel: interpreter only"),
    (
        "Collective",
        "communicates: no kernel form, run by the interpreter through the bound communicator (collective.rs)",
    ),
    ("DebugPrint", "an effect, no kernel form: loops holding one stay interpreted (debug_print.rs)"),
    ("Iota", "no kernel: interpreter only"),
    ("Constant", "no kernel: a value, read in place"),
    ("DotGeneral", "no kernel: the interpreter's GEMM"),
    ("Cholesky", "no kernel: faer in the interpreter"),
    ("TriangularSolve", "no kernel: faer in the interpreter"),
    ("Lu", "no kernel: faer in the interpreter"),
    ("Qr", "no kernel: faer in the interpreter"),
    ("Eigh", "no kernel: faer in the interpreter"),
    ("Svd", "no kernel: faer in the interpreter"),
    ("ConvGeneral", "no kernel: interpreter only"),
    ("ArgReduce::argmax", "no kernel: interpreter only"),
    ("ArgReduce::argmin", "no kernel: interpreter only"),
    ("Cumulative::*", "no kernel: interpreter only"),
    ("ReduceWindow::*", "no kernel: interpreter only"),
    ("WhileJvp", "no kernel of its own: runs the augmented loop through the compiled `while`"),
    ("WhileVjp", "no kernel of its own: compiled sweeps through `while` and `scan` (native_loops.rs)"),
    ("WhileHvp", "no kernel: interpreter only"),
];

/// The ten-op chain of the benchmarks, plus a splat constant.
fn chain(n: usize) -> Func {
    let ty = TensorType::new(DType::F32, vec![n]);
    let mut b = Builder::new("chain");
    let x = b.param(ty.clone());
    let y = b.param(ty);
    let two = b.constant(Tensor::scalar(2.0f32)).unwrap();
    let two = b.broadcast_in_dim(two, &[n], &[]).unwrap();
    let mut v = b.mul(x, two).unwrap();
    v = b.add(v, y).unwrap();
    v = b.tanh(v).unwrap();
    v = b.mul(v, x).unwrap();
    v = b.sub(v, y).unwrap();
    v = b.binary(Binary::Max, v, x).unwrap();
    v = b.neg(v).unwrap();
    v = b.unary(Unary::Abs, v).unwrap();
    v = b.add(v, y).unwrap();
    v = b.mul(v, v).unwrap();
    b.finish(&[v]).unwrap()
}

#[test]
fn chain_runs_natively_and_bitwise_equal() {
    if skip() {
        return;
    }
    for n in [1, 7, 16, 17, 1000, 100_003] {
        let ty = TensorType::new(DType::F32, vec![n]);
        check_native(&chain(n), &[data(&ty, 1), data(&ty, 2)]);
    }
}

/// f32 `pow` (graft's `mathfn::pow_f32`, mirrored by the prelude's
/// `g_pow_f32`) compiles inside a fused group with the interpreter's bits,
/// special cases included (negative bases, zeros, infinities, NaN, integer
/// and half-integer exponents); an f64 group holding `pow` stays
/// interpreted (std `powf`), next to a compiled f32 one.
#[test]
fn pow_groups_run_natively_in_f32_only() {
    f32_only(Binary::Pow);
}

/// The same for `atan2` (`mathfn::atan2_f32`, the prelude's `g_atan2_f32`):
/// every pair of signed zeros, infinities, NaN and finite values, both
/// operand orders, and data.
#[test]
fn atan2_groups_run_natively_in_f32_only() {
    f32_only(Binary::Atan2);
}

/// `op(x, y)` and `op(|x|, y)` in one f32 group, over a grid of special
/// operand pairs and data, against the interpreter; then an f64 group with
/// `op` (interpreted: std) beside an f32 one (compiled).
fn f32_only(op: Binary) {
    if skip() {
        return;
    }
    let specials = [0.0f32, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -3.0, 2.5, f32::INFINITY, f32::NEG_INFINITY, f32::NAN];
    let n = 4099;
    let ty = TensorType::new(DType::F32, vec![n]);
    let (x0, y0) = (data(&ty, 5).to_vec::<f32>().unwrap(), data(&ty, 6).to_vec::<f32>().unwrap());
    let mut xs = Vec::with_capacity(n);
    let mut ys = Vec::with_capacity(n);
    for i in 0..n {
        let k = specials.len();
        xs.push(if i < k * k { specials[i / k] } else { x0[i] * 4.0 });
        // Second operands: the specials, then small integers and halves, then data.
        ys.push(match i {
            i if i < k * k => specials[i % k],
            i if i % 3 == 0 => ((i % 21) as f32 - 10.0) * 0.5,
            _ => y0[i] * 3.0,
        });
    }
    let (x, y) = (Tensor::from_vec(vec![n], xs).unwrap(), Tensor::from_vec(vec![n], ys).unwrap());
    let mut b = Builder::new("f32_group");
    let (px, py) = (b.param(ty.clone()), b.param(ty.clone()));
    let ax = b.unary(Unary::Abs, px).unwrap();
    let p = b.binary(op, px, py).unwrap();
    let q = b.binary(op, ax, py).unwrap();
    let r = b.binary(op, py, px).unwrap();
    let out = b.add(p, q).unwrap();
    check_native(&b.finish(&[out, p, r]).unwrap(), &[x, y]);
    // f64: the group with `op` stays interpreted; the f32 one beside it
    // (of another length, so that the two cannot fuse into one) compiles.
    let t64 = TensorType::new(DType::F64, vec![n + 1]);
    let mut b = Builder::new("f64_group");
    let (a, c) = (b.param(t64.clone()), b.param(ty.clone()));
    let a = b.unary(Unary::Abs, a).unwrap();
    let pa = b.binary(op, a, a).unwrap();
    let pa = b.add(pa, a).unwrap();
    let pc = b.binary(op, c, c).unwrap();
    let pc = b.mul(pc, c).unwrap();
    let f = b.finish(&[pa, pc]).unwrap();
    let exe = Executable::with_options(f, opts(CompileMode::Sync)).unwrap();
    let (ready, total) = exe.native_status();
    assert_eq!((ready, total), (1, 1), "only the f32 group compiles");
}

#[test]
fn mixed_dtypes_compare_select_convert_natively() {
    if skip() {
        return;
    }
    let n = 1234;
    let ty = TensorType::new(DType::F64, vec![n]);
    let mut b = Builder::new("mixed");
    let x = b.param(ty.clone());
    let y = b.param(ty.clone());
    let p = b.compare(Compare::Lt, x, y).unwrap();
    let s = b.select(p, x, y).unwrap();
    let e = b.exp(s).unwrap();
    let f = b.convert(e, DType::F32).unwrap();
    let i = b.convert(s, DType::I32).unwrap();
    let j = b.binary(Binary::Add, i, i).unwrap();
    let q = b.not(p).unwrap();
    let func = b.finish(&[f, j, q, e]).unwrap();
    check_native(&func, &[data(&ty, 3), data(&ty, 4)]);
}

#[test]
fn async_compile_switches_to_native_without_changing_results() {
    if skip() {
        return;
    }
    let n = 4099;
    let ty = TensorType::new(DType::F32, vec![n]);
    let f = chain(n);
    let inputs = [data(&ty, 5), data(&ty, 6)];
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let exe = Executable::with_options(f.clone(), opts(CompileMode::Async)).unwrap();
    let first = exe.run(&refs).unwrap(); // interpreter or native, whichever is ready
    assert!(exe.wait_native(std::time::Duration::from_secs(120)), "compile did not finish");
    assert_eq!(exe.native_status().0, exe.native_status().1);
    let later = exe.run(&refs).unwrap();
    assert_eq!(bits(&first[0]), bits(&later[0]));
}

#[test]
fn compile_off_hands_nothing_to_the_compiler() {
    let f = chain(100);
    let exe = Executable::with_options(f, opts(CompileMode::Off)).unwrap();
    assert_eq!(exe.native_status(), (0, 0));
}

#[test]
fn printer_shows_loads_ops_and_stores() {
    let exe = Executable::with_options(chain(8), opts(CompileMode::Off)).unwrap();
    let ks = kernel::kernels_of(&exe);
    assert_eq!(ks.len(), 1);
    let text = ks[0].to_string();
    let want = "\
kernel gk0(in a0: f32[8], in a1: f32[8], out a2: f32[8]) over i < 8 {
  %0 = 2.0f32
  %1 = load a0[i]
  %2 = mul %1, %0
  %3 = load a1[i]
  %4 = add %2, %3
  %5 = tanh %4
  %6 = mul %5, %1
  %7 = sub %6, %3
  %8 = max %7, %1
  %9 = neg %8
  %10 = abs %9
  %11 = add %10, %3
  %12 = mul %11, %11
  store a2[i] = %12
}";
    assert_eq!(text, want);
}

fn tiny(body: Vec<Inst>, args: Vec<Arg>) -> Kernel {
    Kernel { name: "t".into(), args, extent: 4, body }
}

#[test]
fn verifier_rejects_malformed_kernels() {
    let rd = |d| Arg { dtype: d, len: 4, access: Access::Read };
    let wr = |d| Arg { dtype: d, len: 4, access: Access::Write };
    let load = Inst::Load { arg: 0, index: Index::Point };
    let cases: Vec<(Kernel, &str)> = vec![
        (tiny(vec![Inst::Unary(Unary::Exp, 3)], vec![]), "used before it is defined"),
        (tiny(vec![load.clone()], vec![rd(DType::F32), wr(DType::F32)]), "never stored"),
        (
            tiny(
                vec![load.clone(), Inst::Store { arg: 1, value: 0, index: Index::Point }],
                vec![rd(DType::F32), wr(DType::F64)],
            ),
            "store of f32",
        ),
        (
            tiny(
                vec![load.clone(), Inst::Lit(Lit { dtype: DType::F64, bits: 0 }), Inst::Binary(Binary::Add, 0, 1)],
                vec![rd(DType::F32)],
            ),
            "differ in dtype",
        ),
        (tiny(vec![load.clone(), Inst::Unary(Unary::Exp, 0)], vec![rd(DType::I32)]), "exp does not accept i32"),
        (
            tiny(
                vec![Inst::Load { arg: 0, index: Index::Strided { dims: vec![2, 2], strides: vec![3, 1], offset: 0 } }],
                vec![rd(DType::F32)],
            ),
            "strided index reaches 0..=4",
        ),
        (tiny(vec![Inst::Store { arg: 0, value: 0, index: Index::Point }], vec![wr(DType::F32)]), "used before"),
        (
            tiny(
                vec![Inst::Inside(Window { dims: vec![3], lo: vec![1], size: vec![2], strides: vec![1], offset: 0 })],
                vec![],
            ),
            "box over [3] does not cover the 4 points",
        ),
    ];
    for (k, want) in cases {
        let e = kernel::verify(&k).expect_err(want).to_string();
        assert!(e.contains(want), "{e:?} should contain {want:?}");
    }
}

fn unit() -> (String, Vec<String>) {
    let exe = Executable::with_options(chain(64), opts(CompileMode::Off)).unwrap();
    let ks = kernel::kernels_of(&exe);
    let src = kernel::render_c::render_unit(&ks, kernel::native::host_lanes());
    (src, ks.iter().map(|k| k.name.clone()).collect())
}

#[test]
fn missing_compiler_is_an_error_value() {
    let (src, names) = unit();
    let dir = tempfile::tempdir().unwrap();
    let tc = Toolchain { cc: "/nonexistent/graft-test-cc".into(), cache: dir.path().to_path_buf() };
    assert!(matches!(tc.compile(&src, &names), Err(NativeError::NoCompiler(_))));
}

#[test]
fn compile_error_is_an_error_value() {
    if skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let tc = Toolchain { cc: "cc".into(), cache: dir.path().to_path_buf() };
    let e = tc.compile("this is not C;", &["k".into()]).unwrap_err();
    assert!(matches!(e, NativeError::Compile(_)), "{e}");
    // A kernel name the library lacks is a load error, not a crash.
    let (src, _) = unit();
    let e = tc.compile(&src, &["no_such_kernel".into()]).unwrap_err();
    assert!(matches!(e, NativeError::Load(_)), "{e}");
}

#[test]
fn cache_is_reused_and_a_corrupted_entry_is_rebuilt() {
    if skip() {
        return;
    }
    let (src, names) = unit();
    let a = tempfile::tempdir().unwrap();
    Toolchain { cc: "cc".into(), cache: a.path().to_path_buf() }.compile(&src, &names).unwrap();
    let kdir = a.path().join("kernels");
    let mut libs: Vec<_> = std::fs::read_dir(&kdir).unwrap().map(|e| e.unwrap().path()).collect();
    libs.sort();
    assert_eq!(libs.len(), 2, "one library and its checksum: {libs:?}");
    // Copy the entry to a second cache, corrupt the library there, and compile again.
    let b = tempfile::tempdir().unwrap();
    let bk = b.path().join("kernels");
    std::fs::create_dir_all(&bk).unwrap();
    for p in &libs {
        std::fs::copy(p, bk.join(p.file_name().unwrap())).unwrap();
    }
    let so = bk.join(libs.iter().find(|p| p.extension().unwrap() == "so").unwrap().file_name().unwrap());
    let good = std::fs::read(&so).unwrap();
    std::fs::write(&so, b"garbage").unwrap();
    Toolchain { cc: "cc".into(), cache: b.path().to_path_buf() }.compile(&src, &names).unwrap();
    assert_eq!(std::fs::read(&so).unwrap().len(), good.len(), "the corrupted library was rebuilt");
}

#[test]
fn unwritable_cache_falls_back_to_a_temp_directory() {
    if skip() {
        return;
    }
    let (src, names) = unit();
    let dir = tempfile::tempdir().unwrap();
    // A file where the cache directory should be: nothing can be created under it.
    let blocker = dir.path().join("file");
    std::fs::write(&blocker, b"x").unwrap();
    let tc = Toolchain { cc: "cc".into(), cache: blocker.join("cache") };
    let fns = tc.compile(&src, &names).unwrap();
    assert_eq!(fns.len(), names.len());
}

/// Softmax over rows, plus transposed, sliced, reversed and reshaped
/// operands: the layout operations fuse as strided loads (no copies), and
/// native, fused-interpreted and unfused runs agree bit for bit.
fn layout_program(r: usize, c: usize) -> Func {
    use graft_core::ops::reduce::ReduceKind;
    let mut b = Builder::new("layout");
    let x = b.param(TensorType::new(DType::F32, vec![r, c]));
    let y = b.param(TensorType::new(DType::F32, vec![c, r]));
    let m = b.reduce(ReduceKind::Max, x, &[1]).unwrap();
    let mb = b.broadcast_in_dim(m, &[r, c], &[0]).unwrap();
    let d = b.sub(x, mb).unwrap();
    let e = b.exp(d).unwrap();
    let s = b.reduce(ReduceKind::Sum, e, &[1]).unwrap();
    let sb = b.broadcast_in_dim(s, &[r, c], &[0]).unwrap();
    let p = b.div(e, sb).unwrap();
    let yt = b.transpose(y, &[1, 0]).unwrap();
    let q = b.mul(p, yt).unwrap();
    let xr = b.reverse(x, &[0, 1]).unwrap();
    let q = b.add(q, xr).unwrap();
    let xs = b.slice(x, &[0, 0], &[r, c], &[1, 1]).unwrap();
    let q = b.sub(q, xs).unwrap();
    let row = b.slice(x, &[0, 0], &[1, c], &[1, 1]).unwrap();
    let row = b.reshape(row, &[c]).unwrap();
    let rowb = b.broadcast_in_dim(row, &[r, c], &[1]).unwrap();
    let q = b.add(q, rowb).unwrap();
    b.finish(&[p, q]).unwrap()
}

#[test]
fn layout_operations_fuse_as_strided_loads_bitwise_equal() {
    if skip() {
        return;
    }
    for (r, c) in [(3, 5), (7, 16), (33, 100), (64, 1024)] {
        let f = layout_program(r, c);
        let inputs =
            [data(&TensorType::new(DType::F32, vec![r, c]), 7), data(&TensorType::new(DType::F32, vec![c, r]), 8)];
        let refs: Vec<&Tensor> = inputs.iter().collect();
        let unfused = ExecOptions { fuse: false, compile: CompileMode::Off, ..ExecOptions::default() };
        let plain = Executable::with_options(f.clone(), unfused).unwrap().run(&refs).unwrap();
        let exe = check_native(&f, &inputs);
        let got = exe.run(&refs).unwrap();
        for (a, b) in got.iter().zip(&plain) {
            assert_eq!(bits(a), bits(b), "native vs unfused at {r}x{c}");
        }
        // The softmax part is one row kernel (its two broadcasts of row
        // values are reads of the row's registers); every other transpose,
        // slice, reverse and broadcast is a strided load in a fused group
        // (the first-row slice and its reshape form a group of their own,
        // because its result has another element count, which also ends
        // the row region).
        let ks = kernel::kernels_of(&exe);
        assert_eq!(ks.len(), 3);
        assert!(ks[0].body.iter().any(|i| matches!(i, Inst::Reduce(_))), "{}", ks[0]);
        let strided = ks
            .iter()
            .flat_map(|k| &k.body)
            .filter(|i| matches!(i, Inst::Load { index: Index::Strided { .. }, .. }))
            .count();
        assert_eq!(strided, 6, "{}", ks.iter().map(|k| k.to_string()).collect::<Vec<_>>().join("\n"));
    }
}

#[test]
fn size_generic_kernels_share_one_library_across_sizes() {
    if skip() {
        return;
    }
    let shapeless = |compile| ExecOptions { shapeless: true, ..opts(compile) };
    let sizes = [(7, 16), (33, 100), (9, 40)];
    let kernels_at =
        |r, c, options| kernel::kernels_of(&Executable::with_options(layout_program(r, c), options).unwrap());
    let generic: Vec<(String, Vec<Vec<i64>>)> = sizes
        .iter()
        .map(|&(r, c)| kernel::render_c::render_unit_sized(&kernels_at(r, c, shapeless(CompileMode::Off)), 16))
        .collect();
    // One text for every size; the tables hold the sizes.
    assert_eq!(generic[0].0, generic[1].0);
    assert_eq!(generic[0].0, generic[2].0);
    assert_ne!(generic[0].1, generic[1].1);
    assert!(generic[0].0.contains("S[0]"), "sizes are read from the table");
    // With constant sizes, every size has its own text.
    let constant = |(r, c)| kernel::render_c::render_unit(&kernels_at(r, c, opts(CompileMode::Off)), 16);
    assert_ne!(constant(sizes[0]), constant(sizes[1]));
    // Once the first size's library is loaded, a plan at another size finds
    // it at once (ready before any run, even with background compilation)
    // and gives the interpreter's bits.
    let (r, c) = sizes[0];
    check_native(
        &layout_program(r, c),
        &[data(&TensorType::new(DType::F32, vec![r, c]), 1), data(&TensorType::new(DType::F32, vec![c, r]), 2)],
    );
    for &(r, c) in &sizes[1..] {
        let f = layout_program(r, c);
        let exe = Executable::with_options(f.clone(), shapeless(CompileMode::Async)).unwrap();
        let (ready, total) = exe.native_status();
        assert!(total > 0 && ready == total, "{ready} of {total} kernels ready at {r}x{c}");
        let inputs =
            [data(&TensorType::new(DType::F32, vec![r, c]), 3), data(&TensorType::new(DType::F32, vec![c, r]), 4)];
        let refs: Vec<&Tensor> = inputs.iter().collect();
        let want = Executable::with_options(f, opts(CompileMode::Off)).unwrap().run(&refs).unwrap();
        let got = exe.run(&refs).unwrap();
        for (a, b) in got.iter().zip(&want) {
            assert_eq!(bits(a), bits(b), "size-generic native vs interpreter at {r}x{c}");
        }
    }
}

/// Strided loads whose rows are shorter than a vector (a stride-2 slice of
/// 4-8 element rows, an upsampling broadcast, a transpose to a short last
/// dim) read their lanes through a per-load table of a period's offsets
/// (`render_c::period_table`), a period being a divisor of the first dim it
/// reaches into: f32, f64, i32 and bool operands, periods cut from a dim
/// and whole, and index spaces too small for one, all bitwise equal to the
/// interpreter.
#[test]
fn short_row_strided_loads_read_through_period_tables_bitwise_equal() {
    if skip() {
        return;
    }
    for dt in [DType::F32, DType::F64, DType::I32] {
        for (n, c, h, w) in [(64, 16, 8, 8), (2, 3, 8, 8), (5, 7, 6, 10), (3, 1, 4, 4), (1, 2, 2, 2)] {
            let (h2, w2) = (h / 2, w / 2);
            let mut b = Builder::new("short_rows");
            let x = b.param(TensorType::new(dt, vec![n, c, h, w]));
            let p = b.param(TensorType::new(DType::Bool, vec![n, c, h2, w2]));
            let s = b.slice(x, &[0, 0, 1, 0], &[n, c, h, w], &[1, 1, 2, 2]).unwrap();
            let up = |b: &mut Builder, v| {
                let u = b.broadcast_in_dim(v, &[n, c, h2, 2, w2, 2], &[0, 1, 2, 4]).unwrap();
                b.reshape(u, &[n, c, h, w]).unwrap()
            };
            let su = up(&mut b, s);
            let pu = up(&mut b, p);
            let m = b.mul(su, x).unwrap();
            let sel = b.select(pu, m, x).unwrap();
            let t = b.transpose(x, &[0, 2, 3, 1]).unwrap();
            let t = b.reshape(t, &[n, c, h, w]).unwrap();
            let out = b.add(sel, t).unwrap();
            let f = b.finish(&[out]).unwrap();
            let inputs = [
                data(&TensorType::new(dt, vec![n, c, h, w]), 3),
                data(&TensorType::new(DType::Bool, vec![n, c, h2, w2]), 4),
            ];
            check_native(&f, &inputs);
        }
    }
}
