//! The `Tr` API for elementwise math, shapes, constants and random numbers,
//! through `jit`: values against naive references, negative axes, and
//! errors surfacing from `call` (never panics).

use graft::{jit, ops, random, DType, Jit, Tensor, Tr};

fn t64(shape: &[usize], data: &[f64]) -> Tensor {
    Tensor::from_vec(shape.to_vec(), data.to_vec()).unwrap()
}

fn iota(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    t64(shape, &(0..n).map(|i| i as f64).collect::<Vec<_>>())
}

fn call1(f: impl Fn(&Tr) -> Tr, x: &Tensor) -> Tensor {
    jit("f", f).call(&[x]).unwrap().remove(0)
}

fn call_err(f: impl Fn(&Tr) -> Tr, x: &Tensor) -> String {
    match jit("f", f).call(&[x]) {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.to_string(),
    }
}

fn close(got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= tol * (1.0 + w.abs()), "got {got:?}, want {want:?}");
    }
}

#[test]
fn activations_and_elementwise() {
    let xs = [-50.0, -1.0, 0.0, 0.5, 2.0, 50.0];
    let x = t64(&[6], &xs);
    let sig = |v: f64| 1.0 / (1.0 + (-v).exp());
    let cases: Vec<(&str, Box<dyn Fn(&Tr) -> Tr>, Box<dyn Fn(f64) -> f64>)> = vec![
        ("relu", Box::new(|x: &Tr| x.relu()), Box::new(|v: f64| v.max(0.0))),
        ("silu", Box::new(|x: &Tr| x.silu()), Box::new(move |v| v * sig(v))),
        ("softplus", Box::new(|x: &Tr| x.softplus()), Box::new(|v: f64| v.max(0.0) + (-v.abs()).exp().ln_1p())),
        (
            "log_sigmoid",
            Box::new(|x: &Tr| x.log_sigmoid()),
            Box::new(|v: f64| -((-v).max(0.0) + (-v.abs()).exp().ln_1p())),
        ),
        ("square", Box::new(|x: &Tr| x.square()), Box::new(|v| v * v)),
        ("reciprocal", Box::new(|x: &Tr| x.reciprocal()), Box::new(|v| 1.0 / v)),
        ("clamp", Box::new(|x: &Tr| x.clamp(-1.0, 1.0)), Box::new(|v: f64| v.clamp(-1.0, 1.0))),
        ("safe_log", Box::new(|x: &Tr| x.safe_log(1e-3)), Box::new(|v: f64| v.max(1e-3).ln())),
        (
            "gelu_approx",
            Box::new(|x: &Tr| x.gelu_approx()),
            Box::new(|v: f64| {
                0.5 * v * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (v + 0.044715 * v.powi(3))).tanh())
            }),
        ),
    ];
    for (name, f, r) in cases {
        let got = call1(f, &x).to_f64_vec();
        let want: Vec<f64> = xs.iter().map(|&v| r(v)).collect();
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-12 * (1.0 + w.abs()) || (g == w), "{name}: got {got:?}, want {want:?}");
        }
    }
    // gelu exact: gelu(1) = Φ(1).
    let g = call1(|x| x.gelu(), &t64(&[1], &[1.0])).to_f64_vec()[0];
    assert!((g - 0.8413447460685429).abs() < 1e-14);
    // clip with tensor bounds broadcasts.
    let f = Jit::new("clip", |v: &[Tr]| v[0].clip(&v[1], &v[2]));
    let y = f.call(&[&t64(&[2, 2], &[-3.0, 0.5, 3.0, 0.0]), &t64(&[2], &[-1.0, 1.0]), &t64(&[], &[2.0])]).unwrap();
    assert_eq!(y[0].to_f64_vec(), vec![-1.0, 1.0, 2.0, 1.0]);
    // convert and stop_gradient.
    let y = call1(|x| x.convert(DType::I32), &t64(&[3], &[1.7, -1.7, 3.0]));
    assert_eq!(y.to_vec::<i32>().unwrap(), vec![1, -1, 3]);
    assert_eq!(call1(|x| x.stop_gradient() * 2.0, &x).to_f64_vec(), xs.iter().map(|v| v * 2.0).collect::<Vec<_>>());
    assert!(call_err(|x| x.clamp(1.0, 0.0), &x).contains("clamp"));
}

#[test]
fn constants_in_a_trace() {
    let x = t64(&[2], &[1.0, 2.0]);
    let y = call1(|x| x + &x.constant(t64(&[2], &[10.0, 20.0])), &x);
    assert_eq!(y.to_f64_vec(), vec![11.0, 22.0]);
    assert_eq!(call1(|x| x.zeros_like() + 1.0, &x).to_f64_vec(), vec![1.0, 1.0]);
    assert_eq!(call1(|x| x.ones_like(), &x).to_f64_vec(), vec![1.0, 1.0]);
    assert_eq!(call1(|x| x.full_like(2.5), &x).to_f64_vec(), vec![2.5, 2.5]);
    let y = call1(|x| x.full(&[2, 1], 3.0, DType::F64) * x, &x);
    assert_eq!(y.shape(), &[2, 2]);
    assert_eq!(y.to_f64_vec(), vec![3.0, 6.0, 3.0, 6.0]);
    assert_eq!(call1(|x| x.zeros(&[3], DType::I32), &x).to_vec::<i32>().unwrap(), vec![0, 0, 0]);
    assert_eq!(call1(|x| x.ones(&[1], DType::Bool), &x).to_vec::<bool>().unwrap(), vec![true]);
    assert_eq!(call1(|x| x.scalar(4.0, DType::F32), &x).to_vec::<f32>().unwrap(), vec![4.0]);
    assert_eq!(call1(|x| x.arange(0.0, 6.0, 2.0, DType::I64), &x).to_vec::<i64>().unwrap(), vec![0, 2, 4]);
    close(&call1(|x| x.linspace(0.0, 1.0, 3, true, DType::F64), &x).to_f64_vec(), &[0.0, 0.5, 1.0], 0.0);
    assert!(call_err(|x| x.arange(0.0, 1.0, 0.0, DType::F64), &x).contains("step"));
}

#[test]
fn shape_methods() {
    let x = iota(&[2, 3, 4]);
    assert_eq!(call1(|x| x.reshape(&[-1, 4]), &x).shape(), &[6, 4]);
    assert_eq!(call1(|x| x.reshape(&[4, -1]), &x).shape(), &[4, 6]);
    assert!(call_err(|x| x.reshape(&[-1, -1]), &x).contains("only one"));
    assert_eq!(call1(|x| x.t(), &x).shape(), &[4, 3, 2]);
    assert_eq!(call1(|x| x.transpose(Some(&[2, 0, 1])), &x).shape(), &[4, 2, 3]);
    let sw = call1(|x| x.swapaxes(0, -1), &x);
    assert_eq!(sw.shape(), &[4, 3, 2]);
    assert_eq!(sw.to_f64_vec(), call1(|x| x.t(), &x).to_f64_vec());
    assert_eq!(call1(|x| x.expand_dims(-1), &x).shape(), &[2, 3, 4, 1]);
    assert_eq!(call1(|x| x.expand_dims(0), &x).shape(), &[1, 2, 3, 4]);
    assert_eq!(call1(|x| x.expand_dims(-4), &x).shape(), &[1, 2, 3, 4]);
    assert!(call_err(|x| x.expand_dims(5), &x).contains("expand_dims"));
    let z = iota(&[1, 3, 1]);
    assert_eq!(call1(|x| x.squeeze(()), &z).shape(), &[3]);
    assert_eq!(call1(|x| x.squeeze(None), &z).shape(), &[3]);
    assert_eq!(call1(|x| x.squeeze(-1), &z).shape(), &[1, 3]);
    assert_eq!(call1(|x| x.squeeze([0, 2]), &z).shape(), &[3]);
    assert!(call_err(|x| x.squeeze(1), &z).contains("squeeze"));
    assert_eq!(call1(|x| x.flatten(), &x).shape(), &[24]);
    assert_eq!(call1(|x| x.flatten_range(1, -1), &x).shape(), &[2, 12]);
    assert_eq!(call1(|x| x.flatten(), &t64(&[], &[1.0])).shape(), &[1]);
    assert_eq!(call1(|x| x.broadcast_to(&[5, 2, 3, 4]), &x).shape(), &[5, 2, 3, 4]);
    assert!(call_err(|x| x.broadcast_to(&[3, 4]), &x).contains("broadcast"));

    // slice_axis with a negative step on a negative axis.
    let y = call1(|x| x.slice_axis(-1, None, None, -2), &x);
    assert_eq!(y.shape(), &[2, 3, 2]);
    assert_eq!(&y.to_f64_vec()[..4], &[3.0, 1.0, 7.0, 5.0]);
    let y = call1(|x| x.slice_axis(0, Some(-1), None, 1), &x);
    assert_eq!(y.shape(), &[1, 3, 4]);
    assert_eq!(y.to_f64_vec()[0], 12.0);
    assert!(call_err(|x| x.slice_axis(3, None, None, 1), &x).contains("axis 3"));

    // take with negative axis; clip mode.
    let f = Jit::new("take", |v: &[Tr]| v[0].take(&v[1], -2));
    let idx = Tensor::from_vec(vec![2], vec![2i32, 7]).unwrap();
    let y = f.call(&[&x, &idx]).unwrap().remove(0);
    assert_eq!(y.shape(), &[2, 2, 4]);
    assert_eq!(&y.to_f64_vec()[..8], &[8.0, 9.0, 10.0, 11.0, 8.0, 9.0, 10.0, 11.0]);
}

#[test]
fn concat_stack_where() {
    let f = Jit::new("cat", |v: &[Tr]| ops::concat(&[&v[0], &v[1]], -1));
    let y = f.call(&[&iota(&[2, 1]), &iota(&[2, 2])]).unwrap().remove(0);
    assert_eq!(y.shape(), &[2, 3]);
    assert_eq!(y.to_f64_vec(), vec![0.0, 0.0, 1.0, 1.0, 2.0, 3.0]);
    let f = Jit::new("stack", |v: &[Tr]| ops::stack(&[&v[0], &v[1]], -1));
    let y = f.call(&[&iota(&[2]), &t64(&[2], &[5.0, 6.0])]).unwrap().remove(0);
    assert_eq!(y.shape(), &[2, 2]);
    assert_eq!(y.to_f64_vec(), vec![0.0, 5.0, 1.0, 6.0]);
    let err = f.call(&[&iota(&[2]), &iota(&[3])]).unwrap_err().to_string();
    assert!(err.contains("stack") && err.contains("f64[2]") && err.contains("f64[3]"), "{err}");
    let f = Jit::new("where", |v: &[Tr]| ops::where_(&v[0].gt(&v[1]), &v[0], &v[1]));
    let y = f.call(&[&t64(&[3], &[1.0, 5.0, 2.0]), &t64(&[], &[2.0])]).unwrap().remove(0);
    assert_eq!(y.to_f64_vec(), vec![2.0, 5.0, 2.0]);
    let f = Jit::new("where_bad", |v: &[Tr]| ops::where_(&v[0], &v[0], &v[1]));
    assert!(f.call(&[&iota(&[2]), &iota(&[2])]).unwrap_err().to_string().contains("bool"));
}

#[test]
fn random_api() {
    let ctx = t64(&[], &[0.0]);
    let f = jit("keys", |x| {
        let k = random::key(x, 42);
        let ks = random::split(&k, 2);
        let a = random::uniform(&ks[0], &[1000], DType::F64, 0.0, 1.0);
        let b = random::normal(&ks[1], &[1000], DType::F32);
        let c = random::bernoulli(&ks[0], 0.25, &[1000]);
        let arr = random::split_array(&k, 2);
        let r = random::randint(&ks[1], &[1000], 10, 13, DType::I64);
        let logits =
            x.constant(Tensor::from_vec(vec![2, 3], vec![0.0f32, f32::NEG_INFINITY, 0.0, -1e9, 5.0, -1e9]).unwrap());
        let cat = random::categorical(&ks[0], &logits, -1);
        vec![k, a, b, c, arr, r, cat]
    });
    let out = f.call(&[&ctx]).unwrap();
    assert_eq!(out[0].to_vec::<i32>().unwrap(), vec![0, 42]);
    let u = out[1].to_f64_vec();
    assert!(u.iter().all(|v| (0.0..1.0).contains(v)));
    assert!((u.iter().sum::<f64>() / 1000.0 - 0.5).abs() < 0.05);
    assert_eq!(out[2].dtype(), DType::F32);
    let n = out[2].to_f64_vec();
    assert!((n.iter().sum::<f64>() / 1000.0).abs() < 0.15);
    let frac = out[3].to_vec::<bool>().unwrap().iter().filter(|&&b| b).count() as f64 / 1000.0;
    assert!((frac - 0.25).abs() < 0.05, "{frac}");
    assert_eq!(out[4].shape(), &[2, 2]);
    let r = out[5].to_vec::<i64>().unwrap();
    assert!(r.iter().all(|v| (10..13).contains(v)) && (10..13).all(|k| r.contains(&k)), "{r:?}");
    let cat = out[6].to_vec::<i32>().unwrap();
    assert!(cat[0] == 0 || cat[0] == 2, "{cat:?}");
    assert_eq!(cat[1], 1);
    // Traced seed: key_from gives the same key as the constant.
    let g = jit("kf", random::key_from);
    assert_eq!(g.call(&[&Tensor::scalar(42i64)]).unwrap()[0].to_vec::<i32>().unwrap(), vec![0, 42]);
    let h = jit("bad", |x| random::uniform(x, &[2], DType::F64, 0.0, 1.0));
    assert!(h.call(&[&ctx]).unwrap_err().to_string().contains("i32[2]"));
}

#[test]
fn errors_poison_without_panicking() {
    // A bad op early poisons the trace; later ops are no-ops; call reports the first error.
    let f = jit("f", |x| x.reshape(&[7]).relu().expand_dims(0).square());
    let err = f.call(&[&iota(&[2, 3])]).unwrap_err().to_string();
    assert!(err.contains("reshape") && err.contains("6 elements"), "{err}");
}

/// An empty operand list has no `Tr` to carry the error; it fails the
/// enclosing trace instead of panicking, and the error names the op.
#[test]
fn empty_operand_lists_fail_the_trace_without_panicking() {
    let x = iota(&[2, 3]);
    let e = call_err(|x| &ops::concat(&[], 0) + x, &x);
    assert!(e.contains("concat") && e.contains("at least one"), "{e}");
    let e = call_err(|x| &ops::stack(&[], 0) + x, &x);
    assert!(e.contains("stack") && e.contains("at least one"), "{e}");
    let e = call_err(|_| ops::einsum("ij->i", &[]), &x);
    assert!(e.contains("einsum") && e.contains("at least one"), "{e}");
    // The same trace after a successful call still works: the failure was
    // recorded in its own trace only.
    let y = call1(|x| ops::concat(&[x, x], 1), &x);
    assert_eq!(y.shape(), &[2, 6]);
}
