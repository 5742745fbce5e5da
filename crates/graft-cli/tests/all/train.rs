//! `graft train` end to end: the digits MLP trains, writes its checkpoint,
//! metrics and curves; a resumed run continues bitwise as if never
//! interrupted; mismatched checkpoints and data are errors that say what
//! is wrong.

use assert_cmd::Command;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn train(out: &Path, program: &str, extra: &[&str]) -> std::process::Output {
    let r = root();
    Command::cargo_bin("graft")
        .expect("the graft binary is built")
        .arg("train")
        .arg(r.join("examples").join(program))
        .arg("--data")
        .arg(r.join("examples/data/digits.npz"))
        .arg("--out-dir")
        .arg(out)
        .args(["--lr", "1e-2", "--batch-size", "64", "--seed", "1"])
        .args(if extra.contains(&"--schedule") { &[][..] } else { &["--schedule", "warmup-cosine"][..] })
        .args(extra)
        .output()
        .expect("graft runs")
}

#[test]
fn train_writes_checkpoint_metrics_and_curves() {
    let dir = tempfile::tempdir().unwrap();
    let out = train(dir.path(), "digits_mlp.graft", &["--epochs", "4"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let last = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(last.starts_with("trained 4 epochs (88 steps,") && last.contains("test accuracy"), "{last}");
    let metrics = std::fs::read_to_string(dir.path().join("metrics.jsonl")).unwrap();
    let rows: Vec<serde_json::Value> = metrics.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(rows.len(), 4);
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(r["epoch"].as_u64(), Some(i as u64 + 1));
        assert_eq!(r["step"].as_u64(), Some(22 * (i as u64 + 1)));
        assert!(r["loss"].as_f64().unwrap() > 0.0 && r["test_loss"].as_f64().is_some());
    }
    let acc = rows[3]["test_accuracy"].as_f64().unwrap();
    assert!(acc > 0.9, "four epochs of the MLP reach 90% (got {acc})");
    assert!(rows[3]["loss"].as_f64() < rows[0]["loss"].as_f64());
    let png = std::fs::read(dir.path().join("curves.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let svg = std::fs::read_to_string(dir.path().join("curves.svg")).unwrap();
    assert!(svg.contains("<svg") && svg.contains("Test accuracy") && svg.contains("epoch"));
    let ckpt = std::fs::read(dir.path().join("checkpoint.safetensors")).unwrap();
    assert!(String::from_utf8_lossy(&ckpt[..ckpt.len().min(2000)]).contains("params.0.opt.1"));
}

#[test]
fn resuming_continues_bitwise_as_if_never_interrupted() {
    let whole = tempfile::tempdir().unwrap();
    let split = tempfile::tempdir().unwrap();
    // A constant rate, since a schedule's length follows --epochs: the run
    // "interrupted" after one epoch must see the same rates as the whole one.
    let c = ["--schedule", "constant"];
    assert!(train(whole.path(), "digits_mlp.graft", &[&c[..], &["--epochs", "3"]].concat()).status.success());
    assert!(train(split.path(), "digits_mlp.graft", &[&c[..], &["--epochs", "1"]].concat()).status.success());
    let resumed = train(split.path(), "digits_mlp.graft", &[&c[..], &["--epochs", "3", "--resume"]].concat());
    assert!(resumed.status.success(), "{}", String::from_utf8_lossy(&resumed.stderr));
    let a = std::fs::read(whole.path().join("checkpoint.safetensors")).unwrap();
    let b = std::fs::read(split.path().join("checkpoint.safetensors")).unwrap();
    assert!(a == b, "the resumed run's checkpoint differs from the uninterrupted one");
    let ma = std::fs::read_to_string(whole.path().join("metrics.jsonl")).unwrap();
    let mb = std::fs::read_to_string(split.path().join("metrics.jsonl")).unwrap();
    assert_eq!(mb.lines().count(), 3, "{mb}");
    let strip = |s: &str| -> Vec<String> {
        s.lines().map(|l| l.split(", \"seconds\"").next().unwrap_or("").to_string()).collect()
    };
    assert_eq!(strip(&ma), strip(&mb));
}

#[test]
fn mismatches_are_errors_that_list_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    assert!(train(dir.path(), "digits_mlp.graft", &["--epochs", "1"]).status.success());
    // A CNN cannot resume from the MLP's checkpoint: every difference is listed.
    let out = train(dir.path(), "digits_cnn.graft", &["--epochs", "2", "--resume"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("does not match the model") && err.contains("`params.4` is missing"), "{err}");
    assert!(err.contains("`params.0` is F32[64, 128], the model has f32[16,1,3,3]"), "{err}");
    // A corrupt checkpoint is a clear error.
    std::fs::write(dir.path().join("checkpoint.safetensors"), b"not a checkpoint").unwrap();
    let out = train(dir.path(), "digits_mlp.graft", &["--epochs", "2", "--resume"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a valid checkpoint"));
    // Data arrays must exist under loss's parameter names and agree on rows.
    let bad = dir.path().join("bad.npz");
    let x = graft_core::Tensor::from_vec(vec![5, 64], vec![0.0f32; 320]).unwrap();
    let y = graft_core::Tensor::from_vec(vec![4], vec![0i32; 4]).unwrap();
    graft_core::npy::save_npz(&bad, &[("x".into(), x.clone()), ("y".into(), y)]).unwrap();
    let out = Command::cargo_bin("graft")
        .unwrap()
        .args(["train", root().join("examples/digits_mlp.graft").to_str().unwrap(), "--data", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("disagree on the number of rows: `x` has 5, `y` has 4"));
    graft_core::npy::save_npz(&bad, &[("x".into(), x)]).unwrap();
    let out = Command::cargo_bin("graft")
        .unwrap()
        .args(["train", root().join("examples/digits_mlp.graft").to_str().unwrap(), "--data", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("has no array `y`"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_nonfinite_loss_stops_with_the_step_and_parameter_or_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let prog = dir.path().join("p.graft");
    std::fs::write(
        &prog,
        "def init(seed: i32) -> tensor[64, f32] = ones(64)\n\
         def loss(w: tensor[64, f32], x: tensor[b, 64, f32], y: tensor[b, i32]) -> f32 = mean(sqrt(x @ w))\n",
    )
    .unwrap();
    let run = |extra: &[&str]| {
        Command::cargo_bin("graft")
            .unwrap()
            .arg("train")
            .arg(&prog)
            .arg("--data")
            .arg(root().join("examples/data/digits.npz"))
            .arg("--out-dir")
            .arg(dir.path().join("out"))
            .args(["--epochs", "2", "--lr", "100", "--optimizer", "sgd"])
            .args(extra)
            .output()
            .unwrap()
    };
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("the loss is NaN at step 2 (epoch 1); the gradient of `w` is not finite"), "{err}");
    // With micro-batches the diagnosis looks at each in turn.
    let out = run(&["--accumulate", "2"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("the loss is NaN at step") && err.contains("the gradient of `w` is not finite"), "{err}");
    let out = run(&["--skip-nonfinite"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("steps skipped: non-finite loss"));
    // Non-finite metrics are JSON nulls, so the log stays valid JSON.
    let metrics = std::fs::read_to_string(dir.path().join("out/metrics.jsonl")).unwrap();
    for line in metrics.lines() {
        serde_json::from_str::<serde_json::Value>(line).unwrap();
    }
    assert!(metrics.contains("\"test_loss\": null"));
}

#[test]
fn a_safetensors_dataset_trains_like_the_npz() {
    let dir = tempfile::tempdir().unwrap();
    let arrays = graft_core::npy::load_npz(root().join("examples/data/digits.npz")).unwrap();
    let raw: Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)> = arrays
        .iter()
        .map(|(n, t)| match t.dtype() {
            graft_core::DType::F32 => (
                n.clone(),
                safetensors::Dtype::F32,
                t.shape().to_vec(),
                t.as_slice::<f32>().unwrap().iter().flat_map(|v| v.to_le_bytes()).collect(),
            ),
            _ => (
                n.clone(),
                safetensors::Dtype::I32,
                t.shape().to_vec(),
                t.as_slice::<i32>().unwrap().iter().flat_map(|v| v.to_le_bytes()).collect(),
            ),
        })
        .collect();
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = raw
        .iter()
        .map(|(n, d, s, b)| (n.clone(), safetensors::tensor::TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    let st = dir.path().join("digits.safetensors");
    std::fs::write(&st, safetensors::serialize(views, &None).unwrap()).unwrap();
    let npz_out = dir.path().join("a");
    assert!(train(&npz_out, "digits_mlp.graft", &["--epochs", "1"]).status.success());
    let out = Command::cargo_bin("graft")
        .unwrap()
        .arg("train")
        .arg(root().join("examples/digits_mlp.graft"))
        .arg("--data")
        .arg(&st)
        .arg("--out-dir")
        .arg(dir.path().join("b"))
        .args(["--lr", "1e-2", "--batch-size", "64", "--seed", "1", "--schedule", "warmup-cosine", "--epochs", "1"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let a = std::fs::read(npz_out.join("checkpoint.safetensors")).unwrap();
    let b = std::fs::read(dir.path().join("b/checkpoint.safetensors")).unwrap();
    assert!(a == b, "the same data from .npz and .safetensors trains to the same parameters");
}

#[test]
fn accumulated_micro_batches_train_like_whole_batches() {
    // digits_mlp's loss is a mean, so four micro-batches of 16 give the
    // 64-row batch's gradient up to rounding: the same accuracy curve.
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let whole = train(a.path(), "digits_mlp.graft", &["--epochs", "2"]);
    let split = train(b.path(), "digits_mlp.graft", &["--epochs", "2", "--accumulate", "4"]);
    assert!(whole.status.success() && split.status.success(), "{}", String::from_utf8_lossy(&split.stderr));
    let rows = |d: &Path| -> Vec<serde_json::Value> {
        let text = std::fs::read_to_string(d.join("metrics.jsonl")).unwrap();
        text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    };
    for (x, y) in rows(a.path()).iter().zip(&rows(b.path())) {
        assert_eq!(x["step"], y["step"]);
        let (lx, ly) = (x["loss"].as_f64().unwrap(), y["loss"].as_f64().unwrap());
        assert!((lx - ly).abs() <= 1e-4 * lx, "loss {lx} vs accumulated {ly}");
        let (ax, ay) = (x["test_accuracy"].as_f64().unwrap(), y["test_accuracy"].as_f64().unwrap());
        assert!((ax - ay).abs() <= 0.01, "accuracy {ax} vs accumulated {ay}");
    }
    // A count that does not divide the batch is a usage error.
    let bad = train(b.path(), "digits_mlp.graft", &["--epochs", "1", "--accumulate", "5"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--accumulate 5 does not divide --batch-size 64"));
}
