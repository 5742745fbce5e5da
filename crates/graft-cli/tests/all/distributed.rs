//! Data-parallel `graft train`: without mpirun it is one process and says
//! so; under `mpirun -np 2` and `-np 3` (the `mpi` feature) every process
//! takes its share of each batch, the gradients are averaged inside the
//! step, and after the run the parameters equal a one-process run on the
//! whole batches within 1e-6 relative (here an f64 model: about 1e-15).

use assert_cmd::Command;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn args(program: &Path, data: &Path, out: &Path, extra: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = vec!["train".into(), program.display().to_string(), "--data".into()];
    v.push(data.display().to_string());
    v.extend(["--out-dir".into(), out.display().to_string()]);
    for (k, val) in [("--lr", "1e-2"), ("--batch-size", "48"), ("--epochs", "1"), ("--seed", "3")] {
        if !extra.contains(&k) {
            v.extend([k.to_string(), val.to_string()]);
        }
    }
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

fn graft(a: &[String]) -> std::process::Output {
    Command::cargo_bin("graft")
        .expect("the graft binary is built")
        .args(a)
        .env_remove("OMPI_COMM_WORLD_SIZE")
        .output()
        .unwrap()
}

#[test]
fn distributed_without_mpirun_is_one_process_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let (prog, data) = (root().join("examples/digits_mlp.graft"), root().join("examples/data/digits.npz"));
    let plain = graft(&args(&prog, &data, &dir.path().join("a"), &[]));
    let dist = graft(&args(&prog, &data, &dir.path().join("b"), &["--distributed", "--check-replicas", "5"]));
    assert!(plain.status.success() && dist.status.success(), "{}", String::from_utf8_lossy(&dist.stderr));
    let err = String::from_utf8_lossy(&dist.stderr);
    assert!(err.contains("not started by mpirun: running as a single process (world size 1)"), "{err}");
    let read = |d: &str| std::fs::read(dir.path().join(d).join("checkpoint.safetensors")).unwrap();
    assert!(read("a") == read("b"), "one process with --distributed trains exactly like without it");
}

/// A program whose collectives run over the axis `data` that
/// `graft run --axis data` binds.
const RUN_PROGRAM: &str = r#"
def main(x: tensor[n, f64]) -> (tensor[n, f64], f64, i32) =
  (psum(x * x, "data"), pmax(sum(x), "data"), axis_index("data"))
"#;

#[test]
fn run_with_an_axis_without_mpirun_is_one_rank_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let prog = dir.path().join("p.graft");
    std::fs::write(&prog, RUN_PROGRAM).unwrap();
    let a: Vec<String> = ["run", &prog.display().to_string(), "--axis", "data", "--input", "x=[1, 2, 3]", "--raw"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let o = graft(&a);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not started by mpirun"));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "0: [1. 4. 9.]\n1: 6.\n2: 0\n");
    // Without --axis the name is unbound: an error that says how to bind it.
    let o = graft(&a.iter().filter(|s| *s != "--axis" && *s != "data").cloned().collect::<Vec<_>>());
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("the axis name \"data\" is not bound") && err.contains("--axis data"), "{err}");
    // A bad name is a usage error.
    let mut bad = a.clone();
    bad[3] = "da ta".into();
    let o = graft(&bad);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--axis \"da ta\""));
}

#[cfg(not(feature = "mpi"))]
#[test]
fn several_processes_need_a_build_with_mpi() {
    let dir = tempfile::tempdir().unwrap();
    let (prog, data) = (root().join("examples/digits_mlp.graft"), root().join("examples/data/digits.npz"));
    let o = Command::cargo_bin("graft")
        .unwrap()
        .args(args(&prog, &data, dir.path(), &[]))
        .env("OMPI_COMM_WORLD_SIZE", "2")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("one of 2 processes") && err.contains("--features mpi"), "{err}");
}

#[cfg(feature = "mpi")]
mod mpi {
    use super::*;
    use graft_core::Tensor;
    use std::collections::HashMap;

    /// The digits MLP in f64, so that the only difference between one and
    /// several processes is the order of the gradient sums.
    const PROGRAM: &str = r#"
def init(seed: i32) -> (tensor[64, 32, f64], tensor[32, f64], tensor[32, 10, f64], tensor[10, f64]) {
  let (k1, k2) = split(key(seed))
  (cast(normal(k1, (64, 32)), f64) * 0.17, zeros(32, f64), cast(normal(k2, (32, 10)), f64) * 0.17, zeros(10, f64))
}

def logits(p: (tensor[64, 32, f64], tensor[32, f64], tensor[32, 10, f64], tensor[10, f64]), x: tensor[b, 64, f64]) -> tensor[b, 10, f64] {
  let (w1, b1, w2, b2) = p
  tanh(x @ w1 + b1) @ w2 + b2
}

def loss(p: (tensor[64, 32, f64], tensor[32, f64], tensor[32, 10, f64], tensor[10, f64]), x: tensor[b, 64, f64], y: tensor[b, i32]) -> f64 =
  cross_entropy(logits(p, x), y)

def accuracy(p: (tensor[64, 32, f64], tensor[32, f64], tensor[32, 10, f64], tensor[10, f64]), x: tensor[b, 64, f64], y: tensor[b, i32]) -> f64 =
  mean(cast(argmax(logits(p, x), axis=1) == y, f64))
"#;

    fn mpirun(n: usize, a: &[String]) -> std::process::Output {
        let launcher = std::env::var("MPIRUN").unwrap_or_else(|_| "mpirun".into());
        std::process::Command::new(&launcher)
            .args(["-np", &n.to_string()])
            .arg(assert_cmd::cargo::cargo_bin("graft"))
            .args(a)
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .env("OMPI_MCA_rmaps_base_oversubscribe", "1")
            .output()
            .unwrap_or_else(|e| panic!("{launcher} could not start ({e}): the `mpi` feature needs an MPI launcher"))
    }

    fn params(dir: &Path) -> HashMap<String, Vec<f64>> {
        let bytes = std::fs::read(dir.join("checkpoint.safetensors")).unwrap();
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        st.tensors()
            .into_iter()
            .filter(|(k, _)| !k.contains(".opt."))
            .map(|(k, v)| (k, v.data().chunks(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect()))
            .collect()
    }

    #[test]
    fn run_with_an_axis_under_mpirun_communicates_between_the_processes() {
        let dir = tempfile::tempdir().unwrap();
        let prog = dir.path().join("p.graft");
        std::fs::write(&prog, RUN_PROGRAM).unwrap();
        for r in 0..3 {
            let x =
                Tensor::from_fn(&graft_core::TensorType::new(graft_core::DType::F64, vec![2]), |i| (10 * r + i) as f64);
            graft_core::npy::save_npy(dir.path().join(format!("x{r}.npy")), &x).unwrap();
        }
        let a: Vec<String> = [
            "run",
            &prog.display().to_string(),
            "--axis",
            "data",
            "--input",
            &format!("x={}/x{{rank}}.npy", dir.path().display()),
            "--out",
            &format!("{}/out{{rank}}.npz", dir.path().display()),
            "--raw",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let o = mpirun(3, &a);
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{stdout}{}", String::from_utf8_lossy(&o.stderr));
        // Rank 0 prints: the sums of squares over the ranks ([0, 1], [10,
        // 11], [20, 21]), the largest per-rank sum, and its own index.
        assert_eq!(stdout, "0: [500. 563.]\n1: 41.\n2: 0\n");
        // Every rank wrote its own results.
        for r in 0..3 {
            let got = graft_core::npy::load_npz(dir.path().join(format!("out{r}.npz"))).unwrap();
            let idx = got.iter().find(|(k, _)| k == "2").map(|(_, t)| t.to_f64_vec()).unwrap();
            assert_eq!(idx, vec![r as f64]);
        }
    }

    #[test]
    fn two_and_three_processes_train_like_one_on_the_whole_batch() {
        let dir = tempfile::tempdir().unwrap();
        let prog = dir.path().join("mlp64.graft");
        std::fs::write(&prog, PROGRAM).unwrap();
        let arrays = graft_core::npy::load_npz(root().join("examples/data/digits.npz")).unwrap();
        let conv: Vec<(String, Tensor)> = arrays
            .into_iter()
            .map(|(k, t)| {
                if k == "x" {
                    let v = t.to_f64_vec();
                    (
                        k,
                        Tensor::from_fn(
                            &graft_core::TensorType::new(graft_core::DType::F64, t.shape().to_vec()),
                            |i| v[i],
                        ),
                    )
                } else {
                    (k, t)
                }
            })
            .collect();
        let data = dir.path().join("digits64.npz");
        graft_core::npy::save_npz(&data, &conv).unwrap();
        let one = graft(&args(&prog, &data, &dir.path().join("p1"), &[]));
        assert!(one.status.success(), "{}", String::from_utf8_lossy(&one.stderr));
        let base = params(&dir.path().join("p1"));
        for n in [2, 3] {
            let out = dir.path().join(format!("p{n}"));
            let o = mpirun(n, &args(&prog, &data, &out, &["--check-replicas", "1"]));
            let stdout = String::from_utf8_lossy(&o.stdout);
            assert!(o.status.success(), "{stdout}{}", String::from_utf8_lossy(&o.stderr));
            // One report, from the first process: 1438 training rows make
            // 29 steps of 48 rows.
            assert_eq!(stdout.matches("trained 1 epochs").count(), 1, "{stdout}");
            assert!(stdout.contains(&format!("(29 steps on {n} processes")), "{stdout}");
            let rows = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
            assert_eq!(rows.lines().count(), 1, "{rows}");
            let got = params(&out);
            assert_eq!(got.len(), base.len());
            for (k, a) in &base {
                let b = &got[k];
                let scale = a.iter().fold(0f64, |m, x| m.max(x.abs()));
                let worst = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f64, f64::max) / scale;
                assert!(worst <= 1e-6, "{k} on {n} processes: relative difference {worst}");
            }
        }
        // A batch that does not split evenly is a usage error on every process.
        let o = mpirun(2, &args(&prog, &data, &dir.path().join("bad"), &["--batch-size", "45"]));
        assert!(!o.status.success());
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("--batch-size 45 cannot be split evenly over the 2 processes")
        );
    }
}
