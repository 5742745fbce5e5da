//! `graft run --device cpu|gpu|auto` and `graft ir --wgsl` (issue 16).
//! Without a GPU adapter the GPU halves print "skipped: no GPU adapter";
//! with `GRAFT_REQUIRE_GPU=1` that is a failure.

use assert_cmd::Command;
use std::io::Write;

fn graft() -> Command {
    Command::cargo_bin("graft").expect("the graft binary is built")
}

/// Whether this machine has an adapter (fails under `GRAFT_REQUIRE_GPU=1` without one).
fn have_gpu() -> bool {
    match graft_gpu::global() {
        Ok(_) => true,
        Err(e) => {
            assert!(std::env::var("GRAFT_REQUIRE_GPU").map_or(true, |v| v != "1"), "GRAFT_REQUIRE_GPU=1 but {e}");
            let _ = writeln!(std::io::stderr(), "skipped: {e}");
            false
        }
    }
}

fn program(src: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let p = dir.path().join("p.graft");
    std::fs::write(&p, src).expect("writes");
    (dir, p)
}

const F32: &str = "def f(x: tensor[n, f32]) -> tensor[n, f32] = x * 2.0 + 1.0\n";
const F64: &str = "def f(x: tensor[n, f32]) -> tensor[n, f64] =\n  cast(x, f64) * 2.0\n";

#[test]
fn device_flag_runs_on_the_gpu_or_says_why_not() {
    let (_d, p) = program(F32);
    let run = |device: &str| {
        graft().arg("run").arg(&p).args(["--entry", "f", "--input", "x=[1.5, -2.0]", "--device", device]).output()
    };
    let cpu = run("cpu").expect("runs");
    assert!(cpu.status.success());
    let auto = run("auto").expect("runs");
    assert!(auto.status.success(), "{}", String::from_utf8_lossy(&auto.stderr));
    assert_eq!(auto.stdout, cpu.stdout, "exact in f32 on both devices");
    let gpu = run("gpu").expect("runs");
    if have_gpu() {
        assert!(gpu.status.success(), "{}", String::from_utf8_lossy(&gpu.stderr));
        assert_eq!(gpu.stdout, cpu.stdout);
    } else {
        assert_eq!(gpu.status.code(), Some(1));
        assert!(String::from_utf8_lossy(&gpu.stderr).contains("no GPU adapter"));
        assert!(String::from_utf8_lossy(&auto.stderr).contains("running on the CPU"));
    }
    let bad = run("tpu").expect("runs");
    assert_eq!(bad.status.code(), Some(2), "an unknown device is a usage error");
    assert!(String::from_utf8_lossy(&bad.stderr).contains("expected cpu, gpu or auto"));
}

#[test]
fn f64_on_the_gpu_is_an_error_and_auto_falls_back() {
    let (_d, p) = program(F64);
    let run = |device: &str| {
        graft().arg("run").arg(&p).args(["--entry", "f", "--input", "x=[1.5]", "--device", device]).output()
    };
    let gpu = run("gpu").expect("runs");
    assert_eq!(gpu.status.code(), Some(1));
    let err = String::from_utf8_lossy(&gpu.stderr);
    if have_gpu() {
        assert!(err.contains("f64") && err.contains("p.graft:2"), "names the value and its line: {err}");
    }
    let auto = run("auto").expect("runs");
    assert!(auto.status.success());
    assert!(String::from_utf8_lossy(&auto.stderr).contains("running on the CPU"));
    assert_eq!(String::from_utf8_lossy(&auto.stdout), "[3.]\n");
}

#[test]
fn verbose_and_wgsl_show_the_device_plan() {
    if !have_gpu() {
        return;
    }
    let (_d, p) = program(F32);
    let out = graft()
        .arg("run")
        .arg(&p)
        .args(["--entry", "f", "--input", "x=[1.5, -2.0]", "--device", "gpu", "--verbose"])
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("device:") && err.contains("gpu  fused group") && err.contains("kernel launches"), "{err}");
    let ir = graft()
        .arg("ir")
        .arg(&p)
        .args(["--entry", "f", "--shapes", "x=tensor[4, f32]", "--wgsl"])
        .output()
        .expect("runs");
    let s = String::from_utf8_lossy(&ir.stdout);
    assert!(s.contains("# GPU plan") && s.contains("@compute @workgroup_size(256)"), "{s}");
}

#[test]
fn bench_device_reports_the_adapter_and_the_transfers() {
    let (_d, p) = program(F32);
    let bench = |device: &str| {
        graft()
            .arg("bench")
            .arg(&p)
            .args(["--entry", "f", "--input", "x=[1.5, -2.0]", "--json", "--runs", "3", "--device", device])
            .output()
            .expect("runs")
    };
    let bad = bench("tpu");
    assert_eq!(bad.status.code(), Some(2), "an unknown device is a usage error");
    let auto = bench("auto");
    assert!(auto.status.success(), "{}", String::from_utf8_lossy(&auto.stderr));
    let v: serde_json::Value = serde_json::from_slice(&auto.stdout).expect("one JSON object");
    if !have_gpu() {
        assert!(String::from_utf8_lossy(&auto.stderr).contains("running on the CPU"));
        assert!(v.get("device").is_none(), "a CPU run has the CPU keys only: {v}");
        return;
    }
    assert_eq!(v["device"], "gpu", "{v}");
    assert!(v["adapter"].as_str().is_some_and(|a| !a.is_empty()), "{v}");
    // One fused kernel, nothing on the host; the input goes up and the
    // result comes down once per run.
    assert_eq!((v["launches"].as_u64(), v["host_steps"].as_u64()), (Some(1), Some(0)), "{v}");
    assert_eq!((v["uploads"].as_u64(), v["downloads"].as_u64()), (Some(1), Some(1)), "{v}");
    assert_eq!(v["runs"], 3);
    let human = graft()
        .arg("bench")
        .arg(&p)
        .args(["--entry", "f", "--input", "x=[1.5, -2.0]", "--runs", "2", "--device", "gpu"])
        .output()
        .expect("runs");
    let s = String::from_utf8_lossy(&human.stdout);
    assert!(s.lines().count() == 3 && s.contains("gpu ") && s.contains("1 launches"), "{s}");
}
