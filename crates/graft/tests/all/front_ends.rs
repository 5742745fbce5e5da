//! Every transform in every front end: for each [`TransformKind`] the Rust
//! `Jit` and the graft language compute the same transform of the same
//! function, and both agree with the closed form. The matches below have
//! no wildcard arm, so a new transform kind fails to compile here until
//! both front ends expose it.
//!
//! The function: `f(x, w) = sum(sin(x) * w)` (and its elementwise form
//! `h(x, w) = sin(x) * w` for Jacobians), at fixed f64 points.

use graft::{jit, jit_n, Tensor, Tr, Transform, TransformKind, VmapAxes, Wrt};
use graft_lang::Module;

const X: [f64; 3] = [0.3, -1.2, 2.0];
const W: [f64; 3] = [0.5, 1.5, -0.7];
const T: [f64; 3] = [1.0, -2.0, 0.5];
const U: [f64; 3] = [0.25, 0.0, -1.0];

fn t(v: &[f64]) -> Tensor {
    Tensor::vec1(v)
}

fn rows() -> Tensor {
    Tensor::from_vec(vec![2, 3], [X, T].concat()).expect("internal error: 6 elements for [2, 3]")
}

fn f_tr(v: &[Tr]) -> Tr {
    (v[0].sin() * &v[1]).sum(())
}

fn h_tr(v: &[Tr]) -> Tr {
    v[0].sin() * &v[1]
}

const PROGRAM: &str = r#"
def f(x: tensor[n, f64], w: tensor[n, f64]) -> f64 = sum(sin(x) * w)
def h(x: tensor[n, f64], w: tensor[n, f64]) -> tensor[n, f64] = sin(x) * w

@custom_jvp(s_rule)
def s(x: tensor[n, f64]) -> tensor[n, f64] = sin(x)
def s_rule(x: tensor[n, f64], t: tensor[n, f64]) -> (tensor[n, f64], tensor[n, f64]) = (sin(x), 2.0 * cos(x) * t)
def loss_s(x: tensor[n, f64], w: tensor[n, f64]) -> f64 = sum(s(x) * w)

@custom_vjp(r_fwd, r_bwd)
def r(x: tensor[n, f64]) -> tensor[n, f64] = sin(x)
def r_fwd(x: tensor[n, f64]) -> (tensor[n, f64], tensor[n, f64]) = (sin(x), cos(x))
def r_bwd(c: tensor[n, f64], ct: tensor[n, f64]) -> tensor[n, f64] = 3.0 * c * ct
def loss_r(x: tensor[n, f64], w: tensor[n, f64]) -> f64 = sum(r(x) * w)

def e_grad(x: tensor[n, f64], w: tensor[n, f64]) = grad(f, wrt=x)(x, w)
def e_value_and_grad(x: tensor[n, f64], w: tensor[n, f64]) = value_and_grad(f, wrt=x)(x, w)
def e_jvp(x: tensor[n, f64], w: tensor[n, f64], tx: tensor[n, f64], tw: tensor[n, f64]) = jvp(f, (x, w), (tx, tw))
def e_vjp(x: tensor[n, f64], w: tensor[n, f64]) = vjp(f, (x, w), 1.0)
def e_linearize(x: tensor[n, f64], w: tensor[n, f64], tx: tensor[n, f64], tw: tensor[n, f64]) {
  let (y, f_jvp) = linearize(f, (x, w))
  (y, f_jvp(tx, tw), f_jvp(tw, tx))
}
def e_vmap(xs: tensor[b, n, f64], w: tensor[n, f64]) = vmap(f, in_axes=(0, none))(xs, w)
def e_jacfwd(x: tensor[n, f64], w: tensor[n, f64]) = jacfwd(h, wrt=x)(x, w)
def e_jacrev(x: tensor[n, f64], w: tensor[n, f64]) = jacrev(h, wrt=x)(x, w)
def e_jacobian(x: tensor[n, f64], w: tensor[n, f64]) = jacobian(h, wrt=x)(x, w)
def e_hessian(x: tensor[n, f64], w: tensor[n, f64]) = hessian(f, wrt=x)(x, w)
def e_checkpoint(x: tensor[n, f64], w: tensor[n, f64]) = grad(checkpoint(f), wrt=x)(x, w)
def e_custom_jvp(x: tensor[n, f64], w: tensor[n, f64]) = grad(loss_s, wrt=x)(x, w)
def e_custom_vjp(x: tensor[n, f64], w: tensor[n, f64]) = grad(loss_r, wrt=x)(x, w)
"#;

/// The language front end: entry `e_<kind>` on the given inputs, flattened.
fn lang(kind: TransformKind, inputs: &[Tensor]) -> Vec<f64> {
    let m = Module::from_source("front_ends.graft", PROGRAM).unwrap_or_else(|d| panic!("program rejected: {d:?}"));
    let entry = format!("e_{}", kind.name());
    let out = m.run(&entry, inputs).unwrap_or_else(|d| panic!("{entry} failed: {d:?}"));
    out.leaves().iter().flat_map(|t| t.to_f64_vec()).collect()
}

fn flat(ts: &[Tensor]) -> Vec<f64> {
    ts.iter().flat_map(Tensor::to_f64_vec).collect()
}

fn run<F: Fn(&[Tr]) -> O, O: graft::IntoOutputs>(j: &graft::Jit<F>, ins: &[&Tensor]) -> Vec<f64> {
    flat(&j.call(ins).expect("the transformed function runs"))
}

/// The Rust front end, through the named method of `Jit` for the kind (or
/// `Jit::transform` with the `Transform` value).
fn rust(kind: TransformKind) -> Vec<f64> {
    let f = jit_n("f", f_tr);
    let h = jit_n("h", h_tr);
    let (x, w, tx, tw) = (t(&X), t(&W), t(&T), t(&U));
    let x_only = || Wrt::Positions(vec![0]);
    match kind {
        TransformKind::Grad => run(&f.grad(x_only()), &[&x, &w]),
        TransformKind::ValueAndGrad => run(&f.value_and_grad(x_only()), &[&x, &w]),
        TransformKind::Jvp => {
            let (o, to) = f.jvp(&[&x, &w], &[&tx, &tw]).expect("jvp runs");
            let g = f.transform(Transform::Jvp { wrt: Wrt::All });
            let chained = flat(&g.call(&[&x, &w, &tx, &tw]).expect("jvp as a function runs"));
            let direct = [flat(&o), flat(&to)].concat();
            assert_eq!(chained, direct, "Jit::jvp and Transform::Jvp agree");
            direct
        }
        TransformKind::Vjp => {
            let ct = Tensor::scalar(1.0f64);
            let (o, g) = f.vjp(&[&x, &w], &[&ct]).expect("vjp runs");
            let v = f.transform(Transform::Vjp { wrt: Wrt::All });
            let chained = flat(&v.call(&[&x, &w, &ct]).expect("vjp as a function runs"));
            let direct = [flat(&o), flat(&g)].concat();
            assert_eq!(chained, direct, "Jit::vjp and Transform::Vjp agree");
            direct
        }
        TransformKind::Linearize => {
            let lin = f.linearize(&[&x, &w]).expect("linearize runs");
            let a = lin.call(&[&tx, &tw]).expect("the tangent map runs");
            let b = lin.call(&[&tw, &tx]).expect("the tangent map runs twice");
            [flat(&lin.outputs), flat(&a), flat(&b)].concat()
        }
        TransformKind::Vmap => run(&f.vmap(&[Some(0), None], &[Some(0)]), &[&rows(), &w]),
        TransformKind::Jacfwd => run(&h.jacfwd(0), &[&x, &w]),
        TransformKind::Jacrev => run(&h.jacrev(0), &[&x, &w]),
        TransformKind::Jacobian => run(&h.jacobian(0), &[&x, &w]),
        TransformKind::Hessian => run(&f.hessian(0), &[&x, &w]),
        TransformKind::Checkpoint => run(&f.checkpoint().grad(x_only()), &[&x, &w]),
        TransformKind::CustomJvp => {
            let s = jit("s", |x: &Tr| x.sin())
                .custom_jvp(jit_n("s_rule", |v: &[Tr]| (v[0].sin(), v[0].cos() * &v[1] * 2.0)));
            let loss = jit_n("loss_s", move |v: &[Tr]| (s.apply(&v[..1])[0].clone() * &v[1]).sum(()));
            run(&loss.grad(x_only()), &[&x, &w])
        }
        TransformKind::CustomVjp => {
            let r = jit("r", |x: &Tr| x.sin()).custom_vjp(
                jit_n("r_fwd", |v: &[Tr]| (v[0].sin(), v[0].cos())),
                jit_n("r_bwd", |v: &[Tr]| &v[0] * &v[1] * 3.0),
            );
            let loss = jit_n("loss_r", move |v: &[Tr]| (r.apply(&v[..1])[0].clone() * &v[1]).sum(()));
            run(&loss.grad(x_only()), &[&x, &w])
        }
    }
}

fn diag(d: impl Fn(usize) -> f64) -> Vec<f64> {
    (0..3).flat_map(|i| (0..3).map(move |j| (i, j))).map(|(i, j)| if i == j { d(i) } else { 0.0 }).collect()
}

/// The closed form of each transform at the fixed points.
fn expected(kind: TransformKind) -> Vec<f64> {
    let value: f64 = (0..3).map(|i| X[i].sin() * W[i]).sum();
    let grad_x: Vec<f64> = (0..3).map(|i| X[i].cos() * W[i]).collect();
    let grad_w: Vec<f64> = (0..3).map(|i| X[i].sin()).collect();
    let dir = |a: &[f64; 3], b: &[f64; 3]| (0..3).map(|i| grad_x[i] * a[i] + grad_w[i] * b[i]).sum::<f64>();
    match kind {
        TransformKind::Grad | TransformKind::Checkpoint => grad_x,
        TransformKind::ValueAndGrad => [vec![value], grad_x].concat(),
        TransformKind::Jvp => vec![value, dir(&T, &U)],
        TransformKind::Vjp => [vec![value], grad_x, grad_w].concat(),
        TransformKind::Linearize => vec![value, dir(&T, &U), dir(&U, &T)],
        TransformKind::Vmap => {
            vec![value, (0..3).map(|i| T[i].sin() * W[i]).sum()]
        }
        TransformKind::Jacfwd | TransformKind::Jacrev | TransformKind::Jacobian => diag(|i| X[i].cos() * W[i]),
        TransformKind::Hessian => diag(|i| -X[i].sin() * W[i]),
        TransformKind::CustomJvp => (0..3).map(|i| 2.0 * X[i].cos() * W[i]).collect(),
        TransformKind::CustomVjp => (0..3).map(|i| 3.0 * X[i].cos() * W[i]).collect(),
    }
}

fn lang_inputs(kind: TransformKind) -> Vec<Tensor> {
    match kind {
        TransformKind::Jvp | TransformKind::Linearize => vec![t(&X), t(&W), t(&T), t(&U)],
        TransformKind::Vmap => vec![rows(), t(&W)],
        _ => vec![t(&X), t(&W)],
    }
}

fn assert_close(what: &str, got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{what}: {got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= 1e-12 * (1.0 + w.abs()), "{what}: {got:?} vs {want:?}");
    }
}

#[test]
fn every_transform_is_reachable_from_every_front_end() {
    for kind in TransformKind::ALL {
        let want = expected(kind);
        assert_close(&format!("rust {kind}"), &rust(kind), &want);
        assert_close(&format!("language {kind}"), &lang(kind, &lang_inputs(kind)), &want);
    }
}

#[test]
fn vjp_layers_find_where_the_primals_end() {
    // f has one float output, so three arguments split as two primals and one cotangent.
    let v = jit_n("f", f_tr).transform(Transform::Vjp { wrt: Wrt::Positions(vec![1]) });
    let out = v.call(&[&t(&X), &t(&W), &Tensor::scalar(2.0f64)]).expect("vjp layer runs");
    let want: Vec<f64> = (0..3).map(|i| 2.0 * X[i].sin()).collect();
    assert_close("vjp wrt w", &flat(&out[1..]), &want);
    // Four arguments fit no split: named as a vjp error.
    let e = v.call(&[&t(&X), &t(&W), &t(&T), &t(&U)]).expect_err("no split fits");
    assert!(e.to_string().contains("vjp"), "{e}");
}

#[test]
fn transforms_name_what_they_reject() {
    let f = jit_n("f", h_tr);
    let e = f.grad(Wrt::All).call(&[&t(&X), &t(&W)]).expect_err("grad needs a scalar");
    assert!(e.to_string().contains("grad") && e.to_string().contains("scalar"), "{e}");
    let e = f.transform(Transform::Jvp { wrt: Wrt::All }).call(&[&t(&X), &t(&W), &t(&T)]).expect_err("3 args");
    assert!(e.to_string().contains("jvp"), "{e}");
    let e = f.jacfwd(5).call(&[&t(&X), &t(&W)]).expect_err("no parameter 5");
    assert!(e.to_string().contains("jacfwd"), "{e}");
    let staged = Transform::Grad { wrt: Wrt::All }.stage(&graft::trace("f", &[t(&X).ty()], |v| v[0].sum(())).unwrap());
    assert!(staged.expect_err("grad is not a linear map").to_string().contains("linearize and vjp"));
}

#[test]
fn transforms_by_name_cover_every_kind_but_the_custom_rules() {
    use graft::transform::Options;
    for kind in TransformKind::ALL {
        let options = Options { in_axes: Some(VmapAxes::All(0)), ..Options::default() };
        match Transform::from_name(kind.name(), options) {
            Ok(t) => assert_eq!(t.kind(), kind),
            Err(e) => {
                assert!(matches!(kind, TransformKind::CustomJvp | TransformKind::CustomVjp), "{kind}: {e}");
                assert!(e.to_string().contains("rule functions"), "{e}");
            }
        }
    }
    // The arguments reach the transform.
    let t = Transform::from_name(
        "vmap",
        Options {
            in_axes: Some(VmapAxes::Each(vec![Some(1), None])),
            axis_name: Some("i".into()),
            ..Options::default()
        },
    )
    .unwrap();
    assert_eq!(format!("{t:?}"), "vmap(in_axes=Each([Some(1), None]), out_axes=All(0), axis_name=\"i\")");
    let t = Transform::from_name("grad", Options { wrt: Some(vec![1]), ..Options::default() }).unwrap();
    assert_eq!(format!("{t:?}"), "grad(wrt=Positions([1]))");
    let t = Transform::from_name("checkpoint", Options { policy: Some("dots".into()), ..Options::default() }).unwrap();
    assert_eq!(format!("{t:?}"), "checkpoint(policy=dots)");
    // What it refuses, named.
    let e = Transform::from_name("gard", Options::default()).unwrap_err().to_string();
    assert!(e.contains("no transform `gard`") && e.contains("value_and_grad"), "{e}");
    let e = Transform::from_name("vmap", Options::default()).unwrap_err().to_string();
    assert!(e.contains("vmap needs in_axes"), "{e}");
    let e = Transform::from_name("checkpoint", Options { policy: Some("all".into()), ..Options::default() })
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown checkpoint policy `all`"), "{e}");
}
