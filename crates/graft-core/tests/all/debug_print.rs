//! `debug_print`, the one primitive with an effect: the printed lines
//! (captured with `capture_prints`) and their order through the passes
//! (simplify, constant folding, planning), inside a loop, under grad, jvp
//! and vjp (printed once per forward evaluation, results bitwise those of
//! the function without the print), under vmap (one line per example) and
//! the shape rule's errors. The language's tests (`graft-lang`'s
//! `debug_print.rs`) cover scan/fori/while, compile modes and the CLI.

use graft_core::ad::{grad, jvp_func, vjp_func, Wrt};
use graft_core::ops::debug::{capture_prints, parse_format, DebugPrint};
use graft_core::ops::remat::Remat;
use graft_core::{Builder, DType, ExecOptions, Executable, Func, IrError, Tensor, TensorType};
use std::sync::Arc;

fn f64s() -> TensorType {
    TensorType::scalar(DType::F64)
}

fn run(f: &Func, args: &[&Tensor]) -> (Vec<Tensor>, Vec<String>) {
    capture_prints(|| Executable::new(f.clone()).unwrap().run(args).unwrap())
}

fn bits(ts: &[Tensor]) -> Vec<Vec<u64>> {
    ts.iter().map(|t| t.to_f64_vec().into_iter().map(f64::to_bits).collect()).collect()
}

/// `x -> sum_{i<3} sin(c_i) ...`: a fori loop whose body prints `i` and the
/// carry, then `c' = sin(c) * x`. With `print = false`, the same loop
/// without the print.
fn looped(print: bool, remat: Remat) -> Func {
    let mut body = Builder::new("body");
    let x = body.param(f64s());
    let i = body.param(TensorType::scalar(DType::I32));
    let c = body.param(f64s());
    if print {
        body.debug_print("step {} carry {}", &[i, c]).unwrap();
    }
    let s = body.sin(c).unwrap();
    let c2 = body.mul(s, x).unwrap();
    let body = body.finish(&[c2]).unwrap();
    let mut b = Builder::new("f");
    let x = b.param(f64s());
    let out = b.fori(3, &body, &[x], &[x], remat).unwrap();
    b.finish(&out).unwrap()
}

#[test]
fn prints_in_program_order_and_passes_keep_it() {
    let mut b = Builder::new("f");
    let x = b.param(TensorType::new(DType::F64, vec![2]));
    b.debug_print("first {}", &[x]).unwrap();
    let y = b.add(x, x).unwrap();
    // Identical prints are not merged, and a print of a constant is not
    // folded away at plan time.
    b.debug_print("y={} x={}", &[y, x]).unwrap();
    b.debug_print("y={} x={}", &[y, x]).unwrap();
    let k = b.scalar(7.0, DType::I32).unwrap();
    b.debug_print("const {{{}}}", &[k]).unwrap();
    let f = graft_core::opt::simplify(&b.finish(&[y]).unwrap());
    assert_eq!(f.count_prim("debug_print"), 4, "{f}");
    let exe = capture_prints(|| Executable::new(f.clone()).unwrap());
    assert!(exe.1.is_empty(), "planning printed {:?}", exe.1);
    let x = Tensor::vec1(&[1.5f64, -2.0]);
    let (out, lines) = capture_prints(|| exe.0.run(&[&x]).unwrap());
    assert_eq!(out[0].to_vec::<f64>().unwrap(), [3.0, -4.0]);
    assert_eq!(lines, ["first [ 1.5 -2. ]", "y=[ 3. -4.] x=[ 1.5 -2. ]", "y=[ 3. -4.] x=[ 1.5 -2. ]", "const {7}"]);
    // A second run prints again.
    let (_, again) = capture_prints(|| exe.0.run(&[&x]).unwrap());
    assert_eq!(again, lines);
}

#[test]
fn a_loop_prints_every_step_with_fusion_on_and_off_and_compiled() {
    let f = looped(true, Remat::Off);
    let want = ["step 0 carry 0.5", "step 1 carry 0.23971277", "step 2 carry 0.11871181"];
    let x = Tensor::scalar(0.5f64);
    let plain = run(&looped(false, Remat::Off), &[&x]).0;
    for opts in [
        ExecOptions { fuse: false, compile: graft_core::kernel::CompileMode::Off, ..ExecOptions::default() },
        ExecOptions { compile: graft_core::kernel::CompileMode::Sync, ..ExecOptions::default() },
    ] {
        let exe = Executable::with_options(f.clone(), opts).unwrap();
        let (out, lines) = capture_prints(|| exe.run(&[&x]).unwrap());
        assert_eq!(lines, want, "{opts:?}");
        assert_eq!(bits(&out), bits(&plain), "{opts:?}");
    }
}

#[test]
fn grad_jvp_and_vjp_print_once_per_forward_pass_and_keep_results() {
    let x = Tensor::scalar(0.5f64);
    let want = ["step 0 carry 0.5", "step 1 carry 0.23971277", "step 2 carry 0.11871181"];
    for remat in [Remat::Off, Remat::Every(2)] {
        let (with, without) = (looped(true, remat), looped(false, remat));
        let transforms: [(&str, fn(&Func) -> Result<Func, IrError>); 3] =
            [("grad", |f| grad(f, &Wrt::All)), ("jvp", jvp_func), ("vjp", |f| vjp_func(f, &Wrt::All))];
        for (name, t) in transforms {
            let (g, g0) = (t(&with).unwrap(), t(&without).unwrap());
            let args: Vec<Tensor> = g.param_types().iter().map(|_| x.clone()).collect();
            let refs: Vec<&Tensor> = args.iter().collect();
            let (out, lines) = run(&g, &refs);
            let (out0, lines0) = run(&g0, &refs);
            assert_eq!(lines, want, "{name} {remat:?}\n{g}");
            assert!(lines0.is_empty());
            assert_eq!(bits(&out), bits(&out0), "{name} {remat:?}");
        }
    }
    // Second order: the inner gradient's forward pass is one evaluation of
    // the loop, printed once by the outer gradient's forward pass.
    let gg = grad(&grad(&looped(true, Remat::Off), &Wrt::All).unwrap(), &Wrt::All).unwrap();
    let (_, lines) = run(&gg, &[&x]);
    assert_eq!(lines, want);
}

#[test]
fn a_checkpointed_print_prints_once_under_grad() {
    let mut inner = Builder::new("inner");
    let x = inner.param(f64s());
    inner.debug_print("inner {}", &[x]).unwrap();
    let y = inner.exp(x).unwrap();
    let inner = Arc::new(inner.finish(&[y]).unwrap());
    let mut b = Builder::new("f");
    let x = b.param(f64s());
    let y = b.checkpoint(inner.clone(), &[x]).unwrap();
    let z = b.call(inner, &y).unwrap();
    let f = b.finish(&z).unwrap();
    let g = grad(&f, &Wrt::All).unwrap();
    let (out, lines) = run(&g, &[&Tensor::scalar(0.0f64)]);
    assert_eq!(lines, ["inner 0.", "inner 1."]);
    let g = out[0].to_vec::<f64>().unwrap()[0];
    assert!((g - std::f64::consts::E).abs() < 1e-15, "{g}");
}

#[test]
fn vmap_prints_one_line_per_example_and_shared_values_once() {
    let mut b = Builder::new("f");
    let x = b.param(TensorType::new(DType::F64, vec![2]));
    let s = b.param(f64s());
    b.debug_print("x={} s={}", &[x, s]).unwrap();
    b.debug_print("s alone {}", &[s]).unwrap();
    let y = b.mul(x, x).unwrap();
    let f = b.finish(&[y]).unwrap();
    let v = graft_core::batch::vmap_func(&f, &[Some(1), None], &[Some(0)], 3).unwrap();
    let xs = Tensor::from_vec(vec![2usize, 3], vec![0.0f64, 1.0, 2.0, 10.0, 11.0, 12.0]).unwrap();
    let (_, lines) = run(&v, &[&xs, &Tensor::scalar(4.0f64)]);
    assert_eq!(lines, ["x=[ 0. 10.] s=4.", "x=[ 1. 11.] s=4.", "x=[ 2. 12.] s=4.", "s alone 4."]);
    // Nested: the outer vmap's examples vary slowest.
    let vv = graft_core::batch::vmap_func(&v, &[Some(0), Some(0)], &[Some(0)], 2).unwrap();
    let xss = Tensor::from_vec(vec![2usize, 2, 3], (0..12).map(f64::from).collect::<Vec<_>>()).unwrap();
    let ss = Tensor::vec1(&[-1.0f64, -2.0]);
    let (_, lines) = run(&vv, &[&xss, &ss]);
    assert_eq!(
        lines,
        [
            "x=[0. 3.] s=-1.",
            "x=[1. 4.] s=-1.",
            "x=[2. 5.] s=-1.",
            "x=[6. 9.] s=-2.",
            "x=[ 7. 10.] s=-2.",
            "x=[ 8. 11.] s=-2.",
            "s alone -1.",
            "s alone -2.",
        ]
    );
}

#[test]
fn format_errors_are_type_errors() {
    assert_eq!(parse_format("a {} b {{}} {}").unwrap(), ["a ", " b {} ", ""]);
    assert!(parse_format("{x}").unwrap_err().contains("`{`"));
    assert!(parse_format("}").unwrap_err().contains("unmatched `}`"));
    let mut b = Builder::new("f");
    let x = b.param(f64s());
    let v = b.param(TensorType::new(DType::F64, vec![3]));
    let e = b.debug_print("{} {}", &[x]).unwrap_err();
    assert!(e.to_string().contains("2 placeholder(s) for 1 value(s)"), "{e}");
    let e = b.debug_print("{", &[]).unwrap_err();
    assert!(e.to_string().contains("`{` must be followed"), "{e}");
    let e = b.emit(DebugPrint { fmt: "{} {}".into(), lead: 1 }, &[x, v]).unwrap_err();
    assert!(e.to_string().contains("leading batch axes"), "{e}");
}
