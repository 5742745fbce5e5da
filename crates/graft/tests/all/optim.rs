//! Optimizers compiled into the step (`graft::optim`), checked against
//! trajectories recorded from optax in float64 (tests/data/optim_reference.py
//! regenerates tests/data/optim_reference.json): the same linear-regression
//! problem, 100 steps, final parameters and loss within 1e-6 relative.

use graft::optim::{Optimizer, Schedule, Trainer};
use graft::{jit_n, Tensor};

const N: usize = 16;
const D: usize = 4;
const K: usize = 3;

fn problem() -> (Vec<Tensor>, Tensor, Tensor) {
    let x: Vec<f64> = (0..N).flat_map(|i| (0..D).map(move |j| (0.37 * i as f64 + 1.1 * j as f64).sin())).collect();
    let y: Vec<f64> = (0..N).flat_map(|i| (0..K).map(move |k| (0.23 * i as f64 - 0.7 * k as f64).cos())).collect();
    let w0: Vec<f64> = (0..D).flat_map(|i| (0..K).map(move |j| 0.1 * (i as f64 + 2.0 * j as f64).cos())).collect();
    let b0: Vec<f64> = (0..K).map(|k| 0.05 * (k as f64 - 1.0)).collect();
    let t = |shape: Vec<usize>, v: Vec<f64>| Tensor::from_vec(shape, v).expect("sizes match");
    (vec![t(vec![D, K], w0), t(vec![K], b0)], t(vec![N, D], x), t(vec![N, K], y))
}

fn optimizer(name: &str) -> Optimizer {
    match name {
        "sgd" => Optimizer::sgd(Schedule::Constant(0.1)),
        "momentum" => Optimizer::momentum(Schedule::Constant(0.05), 0.9, false),
        "nesterov" => Optimizer::momentum(Schedule::Constant(0.05), 0.9, true),
        "adam" => Optimizer::adam(Schedule::Constant(0.01)),
        "adamw" => Optimizer::adamw(Schedule::Constant(0.01), 0.1).decay_only(|n| n == "w"),
        "rmsprop" => Optimizer::rmsprop(Schedule::Constant(0.002), 0.9, 1e-4),
        "adagrad" => Optimizer::adagrad(Schedule::Constant(0.1), 0.1, 1e-7),
        "lion" => Optimizer::lion(Schedule::Constant(0.001), 0.9, 0.99, 0.01),
        "adam_cosine_clip" => {
            Optimizer::adam(Schedule::WarmupCosine { init: 0.0, peak: 0.02, warmup: 10, steps: 100, end: 0.001 })
                .clip(0.5)
        }
        "sgd_step_schedule" => {
            Optimizer::sgd(Schedule::Piecewise { init: 0.1, boundaries: vec![(30, 0.5), (60, 0.2)] })
        }
        "sgd_cosine" => Optimizer::sgd(Schedule::Cosine { init: 0.1, steps: 100, alpha: 0.1 }),
        other => panic!("no optimizer configured for reference `{other}`"),
    }
}

fn close(what: &str, got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= 1e-6 * w.abs().max(1e-3), "{what}: {got:?} vs optax {want:?}");
    }
}

#[test]
fn matches_optax_after_100_steps() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/optim_reference.json"))
        .expect("the reference file is in the repository");
    let reference: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    let configs = reference.as_object().expect("an object of configurations");
    assert!(configs.len() >= 11, "every optimizer and schedule has a reference");
    for (name, want) in configs {
        let (params, x, y) = problem();
        let loss = jit_n("loss", |v| {
            let pred = &graft::ops::matmul(&v[2], &v[0]) + &v[1];
            let err = &pred - &v[3];
            (&err * &err).mean(())
        });
        let mut tr = Trainer::new(loss, vec!["w".into(), "b".into()], params, optimizer(name)).expect("trainer");
        let mut first = f64::NAN;
        for i in 0..100 {
            let l = tr.step(&[&x, &y]).expect("step runs");
            if i == 0 {
                first = l;
            }
        }
        let floats = |v: &serde_json::Value| -> Vec<f64> {
            v.as_array().expect("a list").iter().map(|x| x.as_f64().expect("a number")).collect()
        };
        close(&format!("{name}: w"), &tr.params[0].to_f64_vec(), &floats(&want["w"]));
        close(&format!("{name}: b"), &tr.params[1].to_f64_vec(), &floats(&want["b"]));
        assert!(want["loss"].as_f64().expect("loss") < first, "{name} must make progress");
        assert_eq!(tr.count, 100);
    }
}

#[test]
fn the_step_compiles_once_and_rejects_mismatched_names() {
    let (params, x, y) = problem();
    let loss = jit_n("loss", |v| {
        let err = &(&graft::ops::matmul(&v[2], &v[0]) + &v[1]) - &v[3];
        (&err * &err).mean(())
    });
    let mut tr =
        Trainer::new(loss, vec!["w".into(), "b".into()], params.clone(), Optimizer::adam(Schedule::Constant(0.01)))
            .expect("trainer");
    let e0 = tr.eval(&[&x, &y]).unwrap();
    let l0 = tr.step(&[&x, &y]).unwrap();
    assert_eq!(e0, l0, "eval is the loss the step starts from");
    let e1 = tr.eval(&[&x, &y]).unwrap();
    let l1 = tr.step(&[&x, &y]).unwrap();
    assert!(l1 < l0);
    assert_eq!(e1, l1);
    assert_eq!(tr.state.len(), 4, "Adam keeps two moments per parameter");
    let loss = jit_n("loss", |v| v[0].sum(()));
    assert!(Trainer::new(loss, vec!["w".into()], params, Optimizer::adam(Schedule::Constant(0.01))).is_err());
}

/// A trainer of the mean squared error of `x w + b` (inputs `x`, `y`) from `params`.
fn regression_trainer(params: &[Tensor], opt: Optimizer) -> Trainer {
    let loss = jit_n("loss", |v| {
        let err = &(&graft::ops::matmul(&v[2], &v[0]) + &v[1]) - &v[3];
        (&err * &err).mean(())
    });
    Trainer::new(loss, vec!["w".into(), "b".into()], params.to_vec(), opt).expect("trainer")
}

#[test]
fn an_undone_step_leaves_no_trace_and_a_committed_one_is_a_step() {
    let (params, x, y) = problem();
    let make = || regression_trainer(&params, Optimizer::adam(Schedule::Constant(0.01)));
    let (mut a, mut b) = (make(), make());
    a.step(&[&x, &y]).unwrap();
    b.step(&[&x, &y]).unwrap();
    // Undo: parameters, state and count exactly as before the step.
    let (p0, s0) = (a.params.clone(), a.state.clone());
    let (_, undo) = a.step_undoable(&[&x, &y]).unwrap();
    assert_eq!(undo.count, 1);
    assert_ne!(a.params, p0, "the step moved the parameters");
    a.undo(undo);
    assert_eq!((a.params.clone(), a.state.clone(), a.count), (p0, s0, 1));
    // Commit: the same as a plain step, bit for bit, and the run goes on alike.
    let (la, undo) = a.step_undoable(&[&x, &y]).unwrap();
    a.commit(undo);
    let lb = b.step(&[&x, &y]).unwrap();
    assert_eq!(la.to_bits(), lb.to_bits());
    for _ in 0..3 {
        assert_eq!(a.step(&[&x, &y]).unwrap().to_bits(), b.step(&[&x, &y]).unwrap().to_bits());
    }
    assert_eq!((a.params, a.state, a.count), (b.params, b.state, b.count));
}

#[test]
fn a_step_in_three_parts_is_a_step_and_runs_on_another_thread() {
    let (params, x, y) = problem();
    let make = || regression_trainer(&params, Optimizer::adam(Schedule::Constant(0.01)));
    let (mut a, mut b) = (make(), make());
    for _ in 0..3 {
        let job = a.begin_step(&[&x, &y]).unwrap();
        // Begun and not finished: the trainer holds no parameters.
        assert!(a.params.is_empty());
        let err = a.step(&[&x, &y]).unwrap_err().to_string();
        assert!(err.contains("begun and not finished"), "{err}");
        let (xc, yc) = (x.clone(), y.clone());
        let done = std::thread::spawn(move || job.run(&[&xc, &yc])).join().unwrap();
        let la = a.finish_step(done).unwrap();
        assert_eq!(la.to_bits(), b.step(&[&x, &y]).unwrap().to_bits());
    }
    assert_eq!((a.params, a.state, a.count), (b.params, b.state, b.count));
}

#[test]
fn accumulated_micro_batches_match_the_full_batch() {
    // A mean loss over equal micro-batches: their mean loss and averaged
    // gradient are the full batch's, so the trajectories agree to rounding.
    let (params, x, y) = problem();
    let make = || regression_trainer(&params, Optimizer::adam(Schedule::Constant(0.01)));
    for parts in [2, 4, 16] {
        let (mut full, mut acc) = (make(), make());
        acc.accumulate(parts).unwrap();
        assert_eq!(acc.micro_batches(), parts);
        for _ in 0..20 {
            let (lf, la) = (full.step(&[&x, &y]).unwrap(), acc.step(&[&x, &y]).unwrap());
            assert!((lf - la).abs() <= 1e-12 * lf.abs(), "{parts} parts: loss {la} vs {lf}");
        }
        for (a, f) in acc.params.iter().zip(&full.params) {
            for (p, q) in a.to_f64_vec().iter().zip(f.to_f64_vec()) {
                assert!((p - q).abs() <= 1e-10 * q.abs().max(1e-3), "{parts} parts: {p} vs {q}");
            }
        }
    }
    // A batch that does not split evenly is refused, naming the shape.
    let mut acc = make();
    acc.accumulate(3).unwrap();
    let e = acc.step(&[&x, &y]).unwrap_err().to_string();
    assert!(e.contains("cannot be split into 3 micro-batches") && e.contains("[16, 4]"), "{e}");
    assert!(acc.accumulate(0).is_err());
    // Back to one micro-batch: the plain step again (recompiled).
    acc.accumulate(1).unwrap();
    let mut plain = make();
    assert_eq!(acc.step(&[&x, &y]).unwrap().to_bits(), plain.step(&[&x, &y]).unwrap().to_bits());
}

#[test]
fn named_batches_step_like_positional_ones_and_bad_names_are_errors() {
    let (params, x, y) = problem();
    let make = || regression_trainer(&params, Optimizer::sgd(Schedule::Constant(0.1)));
    let (mut a, mut b) = (make(), make());
    let err = |r: Result<f64, graft::Error>| r.unwrap_err().to_string();
    assert!(err(b.step_named(&[("x", &x), ("y", &y)])).contains("have no names"));
    assert!(b.set_input_names(vec!["x".into(), "x".into()]).is_err());
    b.set_input_names(vec!["x".into(), "y".into()]).unwrap();
    assert_eq!(b.input_names(), ["x", "y"]);
    for _ in 0..3 {
        let la = a.step(&[&x, &y]).unwrap();
        let lb = b.step_named(&[("y", &y), ("x", &x)]).unwrap();
        assert_eq!(la.to_bits(), lb.to_bits());
    }
    assert_eq!(a.eval(&[&x, &y]).unwrap().to_bits(), b.eval_named(&[("x", &x), ("y", &y)]).unwrap().to_bits());
    let e = err(b.step_named(&[("x", &x), ("z", &y)]));
    assert!(e.contains("no batch input is named `z`") && e.contains("`x`, `y`"), "{e}");
    assert!(err(b.step_named(&[("x", &x)])).contains("the batch lacks `y`"));
    assert!(err(b.step_named(&[("x", &x), ("x", &x), ("y", &y)])).contains("`x` is given twice"));
    assert_eq!(b.count, 3, "failed calls take no step");
}

#[test]
fn a_step_reports_metrics_from_its_forward_pass() {
    // The loss also returns the mean absolute error: the step's gradient
    // is the loss's alone, and the metric is the one at the parameters the
    // step started from (what `eval_metrics` gives before it).
    let (params, x, y) = problem();
    let with_mae = || {
        let loss = jit_n("loss", |v| {
            let err = &(&graft::ops::matmul(&v[2], &v[0]) + &v[1]) - &v[3];
            vec![(&err * &err).mean(()), err.abs().mean(())]
        });
        let opt = Optimizer::adam(Schedule::Constant(0.01));
        Trainer::with_metrics(loss, vec!["w".into(), "b".into()], params.clone(), vec!["mae".into()], opt).unwrap()
    };
    let mut plain = regression_trainer(&params, Optimizer::adam(Schedule::Constant(0.01)));
    let mut t = with_mae();
    assert!(t.metrics().is_empty());
    for _ in 0..5 {
        let (before, named) = t.eval_metrics(&[&x, &y]).unwrap();
        let l = t.step(&[&x, &y]).unwrap();
        assert_eq!(l.to_bits(), before.to_bits());
        assert_eq!(t.metrics(), named);
        assert_eq!(named[0].0, "mae");
        assert!(named[0].1 > 0.0);
        assert_eq!(plain.step(&[&x, &y]).unwrap().to_bits(), l.to_bits());
    }
    assert_eq!(plain.params, t.params, "the metric takes no part in the gradient");
    // Micro-batches average the metric like the loss.
    let (mut whole, mut split) = (with_mae(), with_mae());
    split.accumulate(4).unwrap();
    whole.step(&[&x, &y]).unwrap();
    split.step(&[&x, &y]).unwrap();
    let (a, b) = (whole.metrics()[0].1, split.metrics()[0].1);
    assert!((a - b).abs() <= 1e-12 * a, "{a} vs {b}");
    // A loss that does not return the metrics it names is an error.
    let loss = jit_n("loss", |v| (&graft::ops::matmul(&v[2], &v[0]) + &v[1]).mean(()));
    let opt = Optimizer::sgd(Schedule::Constant(0.1));
    let mut bad = Trainer::with_metrics(loss, vec!["w".into(), "b".into()], params, vec!["mae".into()], opt).unwrap();
    let e = bad.step(&[&x, &y]).unwrap_err().to_string();
    assert!(e.contains("1 float scalar metrics"), "{e}");
}
