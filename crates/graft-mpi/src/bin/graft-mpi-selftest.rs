//! Checks graft's collectives on a real MPI job; run it under `mpirun`
//! (the tests in `crates/graft-mpi/tests` do, with 2 and 3 processes).
//!
//! `graft-mpi-selftest collectives`: every collective, and the gradient of
//! a function using them, run by MPI on each rank's own inputs, against the
//! same function under `vmap` with the axis name over all ranks' inputs
//! (computed on every rank), which must agree within 1e-12.
//! `mismatch`: rank 1 calls `psum` on another shape; every rank must get
//! the error naming the ranks and their types.
//! `stall`: ranks other than 0 never reach the collective; rank 0 must
//! report the stall and end the job within the timeout
//! (`GRAFT_COLLECTIVE_TIMEOUT`). `die`: rank 1 exits before the
//! collective; the job must end instead of hanging.
//! `bench`: times `psum` of f32 vectors from 1 KiB to 64 MiB (median of
//! repeated calls) and prints, on rank 0, the latency and the bus
//! bandwidth (bytes x 2 (n - 1) / n per second, NCCL's convention) for
//! docs/PERFORMANCE.md's scaling model.
//! Prints one line per rank and exits with 0 when the check held.

use graft_core::ad::{vjp_func, Wrt};
use graft_core::batch::vmap_func_named;
use graft_core::ops::collective::{Axis, Kind};
use graft_core::{Builder, DType, Executable, Func, Tensor, TensorType};
use graft_mpi::World;
use std::process::ExitCode;

fn f64s(shape: &[usize], f: impl Fn(usize) -> f64) -> Tensor {
    Tensor::from_fn(&TensorType::new(DType::F64, shape.to_vec()), f)
}

/// `y = sin(x) * collective(x)` (or the collective alone where its result
/// has another shape), over the axis `i`.
fn program(kind: &Kind, axis: &Axis, shape: &[usize]) -> Result<Func, String> {
    let mut b = Builder::new("f");
    let x = b.param(TensorType::new(DType::F64, shape.to_vec()));
    let y = (|| {
        let c = b.collective(kind.clone(), axis, Some(x))?;
        if b.ty(c)? == b.ty(x)? {
            let s = b.sin(x)?;
            b.mul(s, c)
        } else {
            b.tanh(c)
        }
    })()
    .map_err(|e| e.to_string())?;
    b.finish(&[y]).map_err(|e| e.to_string())
}

fn run(f: &Func, ins: &[Tensor]) -> Result<Vec<Tensor>, String> {
    let refs: Vec<&Tensor> = ins.iter().collect();
    Executable::new(f.clone()).and_then(|e| e.run(&refs)).map_err(|e| e.to_string())
}

/// Every rank's input: rank `r`, element `i`.
fn input(shape: &[usize], r: usize) -> Tensor {
    f64s(shape, |i| ((r * 7 + i * 3) % 11) as f64 * 0.1 - 0.4)
}

/// Every rank's value (`of(rank)`) stacked along a new leading axis: what
/// the vmap over all ranks takes.
fn stacked(n: usize, of: impl Fn(usize) -> Tensor) -> Tensor {
    let per_rank: Vec<Tensor> = (0..n).map(of).collect();
    let mut shape = vec![n];
    shape.extend_from_slice(per_rank[0].shape());
    let data: Vec<f64> = per_rank.iter().flat_map(Tensor::to_f64_vec).collect();
    f64s(&shape, |i| data[i])
}

fn collectives(world: &World) -> Result<usize, String> {
    let (n, r) = (world.size(), world.rank());
    let axis = Axis::new("i", n);
    let shape = [2, n];
    let perm: Vec<(usize, usize)> = (0..n).map(|s| (s, (s + 1) % n)).collect();
    let kinds = [
        Kind::Psum,
        Kind::Pmean,
        Kind::Pmax,
        Kind::Pmin,
        Kind::AllGather { dim: 1 },
        Kind::ReduceScatter { dim: 1 },
        Kind::Ppermute { perm },
    ];
    let mut checks = 0;
    for kind in &kinds {
        let f = program(kind, &axis, &shape)?;
        // Forward and reverse mode, each against the vmap over all ranks.
        let g = vjp_func(&f, &Wrt::All).map_err(|e| e.to_string())?;
        let ct = |rank: usize| f64s(&f.output_types()[0].shape, |i| 1.0 + 0.5 * ((rank + i) % 3) as f64);
        for (h, mine, all) in [
            (&f, vec![input(&shape, r)], vec![stacked(n, |q| input(&shape, q))]),
            (&g, vec![input(&shape, r), ct(r)], vec![stacked(n, |q| input(&shape, q)), stacked(n, ct)]),
        ] {
            let got = run(h, &mine)?;
            let axes = vec![Some(0); h.params.len()];
            let outs = vec![Some(0); h.outputs.len()];
            let v = vmap_func_named(h, &axes, &outs, n, Some("i")).map_err(|e| e.to_string())?;
            let want = run(&v, &all)?;
            for (k, (a, w)) in got.iter().zip(&want).enumerate() {
                let per = a.numel();
                let w = &w.to_f64_vec()[r * per..(r + 1) * per];
                for (i, (x, y)) in a.to_f64_vec().iter().zip(w).enumerate() {
                    if (x - y).abs() > 1e-12 * (1.0 + y.abs()) {
                        return Err(format!("{kind:?}: output {k}[{i}] is {x} under MPI but {y} under vmap"));
                    }
                }
                checks += 1;
            }
        }
    }
    // axis_index: the rank.
    let mut b = Builder::new("idx");
    let i = b.axis_index(&axis).map_err(|e| e.to_string())?;
    let f = b.finish(&[i]).map_err(|e| e.to_string())?;
    if run(&f, &[])?[0] != Tensor::scalar(r as i32) {
        return Err("axis_index is not the rank".into());
    }
    Ok(checks + 1)
}

fn bench(world: &World) -> Result<String, String> {
    let n = world.size();
    let axis = Axis::new("i", n);
    let mut rows = Vec::new();
    for kib in [1usize, 16, 256, 4096, 65536] {
        let len = kib * 256;
        let mut b = Builder::new("psum");
        let x = b.param(TensorType::new(DType::F32, vec![len]));
        let y = b.psum(x, &axis).map_err(|e| e.to_string())?;
        let f = b.finish(&[y]).map_err(|e| e.to_string())?;
        let exe = Executable::new(f).map_err(|e| e.to_string())?;
        let input = Tensor::from_fn(&TensorType::new(DType::F32, vec![len]), |i| (i % 7) as f64);
        let reps = (64 * 1024 / kib).clamp(5, 200);
        let mut times = Vec::with_capacity(reps);
        for _ in 0..reps {
            let t = std::time::Instant::now();
            exe.run(&[&input]).map_err(|e| e.to_string())?;
            times.push(t.elapsed().as_secs_f64());
        }
        times.sort_by(f64::total_cmp);
        let med = times[reps / 2];
        let bytes = (len * 4) as f64;
        let bus = bytes * 2.0 * (n as f64 - 1.0) / n as f64 / med / 1e9;
        rows.push(format!("{kib} KiB: {:.1} us, {bus:.2} GB/s", med * 1e6));
    }
    Ok(format!("psum over {n} processes: {}", rows.join("; ")))
}

fn main() -> ExitCode {
    let mode = std::env::args().nth(1).unwrap_or_default();
    let world = match World::start() {
        Ok(w) => w,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    world.bind("i");
    let (n, r) = (world.size(), world.rank());
    let axis = Axis::new("i", n);
    let outcome: Result<String, String> = match mode.as_str() {
        "collectives" => collectives(&world).map(|k| {
            let how = if world.overlaps() { "on a background thread" } else { "on the caller's thread" };
            format!("{k} checks agree with vmap (collectives {how})")
        }),
        "mismatch" => {
            let shape = if r == 1 { vec![3] } else { vec![2] };
            let f = program(&Kind::Psum, &axis, &shape);
            match f.and_then(|f| run(&f, &[input(&shape, r)])) {
                Err(e) if e.contains("rank 0 calls") && e.contains("rank 1 calls") && e.contains("f64[3]") => {
                    Ok(format!("rejected: {e}"))
                }
                Err(e) => Err(format!("an unexpected error: {e}")),
                Ok(_) => Err("ranks with different shapes were not detected".into()),
            }
        }
        "stall" | "die" => {
            if r > 0 {
                if mode == "die" && r == 1 {
                    std::process::exit(3);
                }
                std::thread::sleep(std::time::Duration::from_secs(120));
            }
            let f = program(&Kind::Psum, &axis, &[2]);
            f.and_then(|f| run(&f, &[input(&[2], r)])).map(|_| "the collective returned".into())
        }
        "bench" => bench(&world),
        other => Err(format!("unknown mode `{other}` (collectives, mismatch, stall, die or bench)")),
    };
    match outcome {
        Ok(msg) => {
            println!("rank {r} of {n}: ok: {msg}");
            ExitCode::SUCCESS
        }
        Err(msg) => {
            eprintln!("rank {r} of {n}: error: {msg}");
            ExitCode::FAILURE
        }
    }
}
