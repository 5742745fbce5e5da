//! `graft ir --kernels`: the kernels of a function's fused groups are
//! printed after its primitive graph, in the kernel IR's text form.

use assert_cmd::Command;

#[test]
fn ir_kernels_lists_the_fused_kernel_after_the_graph() {
    let dir = tempfile::tempdir().unwrap();
    let prog = dir.path().join("k.graft");
    std::fs::write(&prog, "def f(x: tensor[n, f32]) -> tensor[n, f32] = tanh(x * 2.0 + 1.0) * x\n").unwrap();
    let out = Command::cargo_bin("graft")
        .unwrap()
        .arg("ir")
        .arg(&prog)
        .args(["--entry", "f", "--shapes", "x=f32[100]", "--kernels"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let s = String::from_utf8(out.stdout).unwrap();
    let graph_end = s.find("\n# 1 kernel\n").unwrap_or_else(|| panic!("no kernel header in {s}"));
    assert!(s[..graph_end].starts_with("func @f("), "{s}");
    assert!(s[..graph_end].contains("\n# the graph as the executor runs it"), "{s}");
    let k = &s[graph_end..];
    for want in [
        "kernel gk0(in a0: f32[100], out a1: f32[100]) over i < 100 {",
        "= load a0[i]",
        "= 2.0f32",
        "= 1.0f32",
        "= tanh %",
        "store a1[i] = %",
    ] {
        assert!(k.contains(want), "missing {want:?} in {k}");
    }
}

#[test]
fn ir_kernels_lists_compiled_loops_with_their_steps() {
    // A loop body of a shift (slice + concatenate) and elementwise work:
    // one compiled loop whose kernel reads the shift in place.
    let dir = tempfile::tempdir().unwrap();
    let prog = dir.path().join("loop.graft");
    std::fs::write(
        &prog,
        "def f(x: tensor[n, f64]) -> tensor[n, f64] = fori(3, fn (i, y) -> {\n  let m = size(y)\n  x * concat((ones((1,), dtype=\"f64\"), y[0:m - 1]), axis=0) + y\n}, x)\n",
    )
    .unwrap();
    let out = Command::cargo_bin("graft")
        .unwrap()
        .arg("ir")
        .arg(&prog)
        .args(["--entry", "f", "--shapes", "x=f64[8]", "--kernels"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let s = String::from_utf8(out.stdout).unwrap();
    let at = s.find("\n# 1 compiled loop\n").unwrap_or_else(|| panic!("no compiled loop in {s}"));
    let l = &s[at..];
    for want in
        ["# body @", "loop gl (1 consts, 2 carries, 0 xs, 0 ys)", "carry1'", "if inside [1] else", "if inside [7] else"]
    {
        assert!(l.contains(want), "missing {want:?} in {l}");
    }
}

/// A compiled loop's stencil kernel is listed with its interior segment
/// (`kernel::interior`): GradBench's RK4 step reads each stage one point
/// back, so its points from the fourth on run without window tests and
/// take the shifted stages from the previous vector.
#[test]
fn ir_kernels_lists_interior_segments_of_loop_kernels() {
    let prog = concat!(env!("CARGO_MANIFEST_DIR"), "/../../gradbench/ode.graft");
    let out = Command::cargo_bin("graft")
        .unwrap()
        .arg("ir")
        .arg(prog)
        .args(["--entry", "primal", "--shapes", "x=f64[1000]", "--shapes", "steps=f64[10]", "--kernels"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let s = String::from_utf8(out.stdout).unwrap();
    let line = s
        .lines()
        .find(|l| l.contains("run without window tests"))
        .unwrap_or_else(|| panic!("no interior segment listed in {s}"));
    assert!(line.contains(": points 4..1000 run without window tests, "), "{line}");
    let reused: usize = line
        .split(", ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of reused values in {line}"));
    assert!(reused >= 6, "{line}");
}

#[test]
fn ir_kernels_shows_f16_kernels_moving_and_converting_f16() {
    let dir = tempfile::tempdir().unwrap();
    let prog = dir.path().join("h.graft");
    std::fs::write(&prog, "def f(x: tensor[n, f16]) -> tensor[n, f16] = x * x\n").unwrap();
    let out = Command::cargo_bin("graft")
        .unwrap()
        .arg("ir")
        .arg(&prog)
        .args(["--entry", "f", "--shapes", "x=f16[8]", "--kernels"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let s = String::from_utf8(out.stdout).unwrap();
    let k = &s[s.find("\n# 1 kernel\n").unwrap_or_else(|| panic!("no kernel header in {s}"))..];
    for want in ["in a0: f16[8]", "out a1: f16[8]", "convert[f32]", "convert[f16]", "mul %"] {
        assert!(k.contains(want), "missing {want:?} in {k}");
    }
}
