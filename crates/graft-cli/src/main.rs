//! `graft`: the command-line front end of the graft language.
//!
//! - `graft run FILE [--entry NAME] [--input NAME=PATH.npy | NAME=PATH.npz | NAME=PATH.npz:KEY | NAME=LITERAL]... [--out PATH.npz | PATH.npy] [--seed N]`
//! - `graft check FILE`
//! - `graft ast FILE`
//! - `graft ir FILE --entry NAME (--input ... | --shapes NAME=TYPE ...) [--kernels]`
//! - `graft bench FILE [--entry NAME] [--input ...]... [--seed N] [--runs N] [--warmup N] [--json]`:
//!   compiles the entry as `run` does (timed: parse, instantiate, plan), runs
//!   it `--warmup` times untimed and `--runs` times timed, and prints the
//!   compile time and min/median/max run time (`--json`: one object
//!   `{"compile_ms", "min_ms", "median_ms", "max_ms", "runs"}` on stdout)
//!
//! `graft run` also takes `--max-memory BYTES` (default `GRAFT_MAX_MEMORY`,
//! else half of physical memory: a plan whose estimated peak is larger is
//! refused before it runs) and `--timeout SECONDS` (a watchdog thread ends
//! the process with exit code 1 and a message when the time is up; see
//! `watchdog.rs`).
//!
//! Exit codes: 0 success, 1 program error (a diagnostic is printed to
//! stderr), 2 usage error (from clap, or a `--input`/`--shapes` that is not
//! `NAME=...`). Inputs are never cast: an input whose dtype or rank differs
//! from the declared type, an integer literal out of the dtype's range or a
//! float literal that overflows it is an error naming the parameter and
//! pointing at its declaration (`error[input]`, see `inputs.rs`).

mod bench;
mod checkpoint;
mod doc;
mod inputs;
mod plot;
mod results;
mod train;
mod watchdog;

use clap::{Parser, Subcommand};
use graft_lang::{diag, Module};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "graft", version, about = "Run, check and inspect graft programs")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a function and print its results.
    Run {
        file: PathBuf,
        /// The function to run.
        #[arg(long, default_value = "main")]
        entry: String,
        /// `NAME=PATH.npy`, `NAME=PATH.npz` (its array NAME, or its only
        /// array; for a tuple parameter, all its arrays in order),
        /// `NAME=PATH.npz:KEY` (its array KEY) or `NAME=LITERAL` (a number,
        /// or an array like `[1, 2]`). Every parameter must be given.
        #[arg(long = "input", value_name = "NAME=VALUE")]
        inputs: Vec<String>,
        /// Write the results: `PATH.npz` holds every result tensor under
        /// the labels `graft run` prints (keys 0, 1, 2, ... with --raw);
        /// `PATH.npy` holds the one result of a def that returns a single
        /// tensor.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Print a tuple's tensors numbered depth first, values only
        /// (`0: [1. 2.]`), instead of labelled with names or paths and
        /// types (`loss: f32[] = 0.5`).
        #[arg(long)]
        raw: bool,
        /// Value of an integer parameter named `seed` when no --input gives
        /// it (without either, a `seed` parameter is a missing input).
        #[arg(long)]
        seed: Option<i64>,
        /// Refuse to run when the plan's estimated peak memory exceeds this
        /// many bytes (suffixes K, M, G, T: powers of 1024). Default:
        /// GRAFT_MAX_MEMORY, else half of physical memory.
        #[arg(long, value_name = "BYTES")]
        max_memory: Option<String>,
        /// Stop with an error (exit code 1) when compiling and running take
        /// longer than this many seconds.
        #[arg(long, value_name = "SECONDS")]
        timeout: Option<f64>,
        /// Where to run: `cpu`, `gpu` (WebGPU through wgpu; an error without
        /// an adapter or for a program with f64/i64 values) or `auto` (the
        /// GPU when possible, else the CPU with a note saying why).
        /// Default: GRAFT_DEVICE, else cpu.
        #[arg(long, value_name = "DEVICE")]
        device: Option<String>,
        /// With a GPU run: print the adapter, the device plan (which steps
        /// run on the GPU, which on the host and why) and the run's
        /// transfers on stderr.
        #[arg(long)]
        verbose: bool,
        /// Bind the named axis to the processes of an MPI job
        /// (`mpirun -np N graft run prog.graft --axis data ...`), so the
        /// program's collectives over it (`psum(x, "data")`) communicate
        /// between the processes. `{rank}` in an --input or --out value
        /// becomes the process's rank; only rank 0 prints the results.
        /// Without mpirun: one process, and the collectives see one rank.
        #[arg(long, value_name = "NAME")]
        axis: Option<String>,
    },
    /// Parse and type-check only.
    Check { file: PathBuf },
    /// Train a program's `init`/`loss` on an .npz dataset: progress,
    /// metrics.jsonl, checkpoint.safetensors and curves.png/svg in --out-dir.
    Train(train::TrainArgs),
    /// Print the reference entry of a builtin or transform (the list without NAME).
    Doc { name: Option<String> },
    /// Print the parsed program as S-expressions.
    Ast { file: PathBuf },
    /// Print the expanded primitive graph of a function.
    Ir {
        file: PathBuf,
        #[arg(long, default_value = "main")]
        entry: String,
        #[arg(long = "input", value_name = "NAME=VALUE")]
        inputs: Vec<String>,
        /// `NAME=TYPE`, e.g. `x=tensor[3, 4, f32]` or `b=f32`.
        #[arg(long = "shapes", value_name = "NAME=TYPE")]
        shapes: Vec<String>,
        #[arg(long)]
        seed: Option<i64>,
        /// Also print the graph as the executor runs it (after constant
        /// folding, inlining and hoisting) and the kernels it compiles for
        /// it (its fused groups in the kernel IR, its compiled loops).
        #[arg(long)]
        kernels: bool,
        /// Also print the GPU plan (which steps run on the GPU, which on the
        /// host and why) and every GPU kernel's WGSL. Needs a GPU adapter.
        #[arg(long)]
        wgsl: bool,
    },
    /// Time a function: compile once, then warm-up runs and timed runs.
    Bench {
        file: PathBuf,
        /// The function to time.
        #[arg(long, default_value = "main")]
        entry: String,
        /// `NAME=PATH.npy` or `NAME=LITERAL` (a number, or an array like `[1, 2]`).
        #[arg(long = "input", value_name = "NAME=VALUE")]
        inputs: Vec<String>,
        /// Value of an integer parameter named `seed` when no --input gives it.
        #[arg(long)]
        seed: Option<i64>,
        /// Timed runs.
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
        runs: u64,
        /// Untimed runs before the timed ones.
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
        warmup: u64,
        /// Print one JSON object instead of the two human-readable lines.
        #[arg(long)]
        json: bool,
        /// Where to run, as `graft run --device`: `cpu`, `gpu` or `auto`.
        /// A GPU run also reports the adapter and one run's launches, host
        /// steps and transfers. Default: GRAFT_DEVICE, else cpu.
        #[arg(long, value_name = "DEVICE")]
        device: Option<String>,
    },
    /// Serve the GradBench protocol on stdin/stdout (the `graft` tool), with
    /// the evals written in graft (`gradbench/*.graft`, built in).
    Gradbench,
}

/// Whether `graft run --out PATH` writes one `.npy` array (`true`) or an
/// `.npz` archive (`false`), by the path's extension; any other extension
/// is a usage error rather than an archive under a misleading name.
fn out_is_npy(path: &std::path::Path) -> Result<bool, Fail> {
    match path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).as_deref() {
        Some("npz") => Ok(false),
        Some("npy") => Ok(true),
        _ => Err(Fail::usage(format!(
            "error: --out {}: expected a path ending in .npz (every result) or .npy (a def's single result)",
            path.display()
        ))),
    }
}

/// A failure: a rendered diagnostic or a plain message (exit code 1), or a
/// malformed command line (exit code 2, like clap's own usage errors).
pub struct Fail {
    pub msg: String,
    pub code: u8,
}

impl Fail {
    /// A program or input error: exit code 1.
    pub fn new(msg: impl Into<String>) -> Fail {
        Fail { msg: msg.into(), code: 1 }
    }

    /// A command-line usage error: exit code 2.
    pub fn usage(msg: impl Into<String>) -> Fail {
        Fail { msg: msg.into(), code: 2 }
    }
}

/// Large buffers on cache-line boundaries (`graft_core::alloc`).
#[global_allocator]
static ALLOC: graft_core::alloc::CacheAligned = graft_core::alloc::CacheAligned;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Deeply nested programs recurse deeply while compiling: give them room.
    let handle = std::thread::Builder::new().stack_size(512 << 20).spawn(move || run_cmd(cli));
    let result = match handle {
        Ok(h) => h.join().unwrap_or_else(|_| Err(Fail::new("internal error: the compiler crashed"))),
        Err(e) => Err(Fail::new(format!("error: cannot start the compiler thread: {e}"))),
    };
    match result {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(Fail { msg, code }) => {
            eprint!("{msg}");
            if !msg.ends_with('\n') {
                eprintln!();
            }
            ExitCode::from(code)
        }
    }
}

fn read(file: &Path) -> Result<(String, String), Fail> {
    let name = file.display().to_string();
    let src = std::fs::read_to_string(file).map_err(|e| Fail::new(format!("error: cannot read {name}: {e}")))?;
    Ok((name, src))
}

fn render_all(ds: &[diag::Diagnostic], file: &str, src: &str) -> Fail {
    Fail::new(ds.iter().map(|d| diag::render(d, file, src)).collect::<Vec<_>>().join("\n"))
}

fn load(file: &Path) -> Result<Module, Fail> {
    let (name, src) = read(file)?;
    Module::from_source(&name, &src).map_err(|ds| render_all(&ds, &name, &src))
}

fn run_cmd(cli: Cli) -> Result<String, Fail> {
    match cli.cmd {
        Cmd::Ast { file } => {
            let (name, src) = read(&file)?;
            let p = graft_lang::parse(&src).map_err(|ds| render_all(&ds, &name, &src))?;
            Ok(graft_lang::sexpr::program_to_sexpr(&p))
        }
        Cmd::Doc { name } => doc::doc(name.as_deref()),
        Cmd::Train(args) => train::train(&args),
        Cmd::Check { file } => {
            let m = load(&file)?;
            m.check().map_err(|ds| render_all(&ds, m.file(), m.source()))?;
            let n = m.program().defs.len();
            let mut out = format!("{}: ok ({n} definition{})\n", m.file(), if n == 1 { "" } else { "s" });
            let unchecked = m.unchecked_generics();
            if !unchecked.is_empty() {
                let names: Vec<String> = unchecked.iter().map(|n| format!("`{n}`")).collect();
                out.push_str(&format!(
                    "note: generic def{} {} {} not called from any def with concrete types, so only {} names \
                     were checked (a generic def is type-checked at each call)\n",
                    if names.len() == 1 { "" } else { "s" },
                    names.join(", "),
                    if names.len() == 1 { "is" } else { "are" },
                    if names.len() == 1 { "its" } else { "their" },
                ));
            }
            Ok(out)
        }
        Cmd::Run { file, entry, inputs, out, raw, seed, max_memory, timeout, device, verbose, axis } => {
            // The world is bound before the entry is instantiated: an axis
            // name takes its size from what it is bound to.
            let world = axis.as_deref().map(start_world).transpose()?;
            let rank = world.as_ref().map_or(0, graft_mpi::World::rank);
            let per_rank = |s: &str| s.replace("{rank}", &rank.to_string());
            let inputs: Vec<String> = inputs.iter().map(|s| per_rank(s)).collect();
            // Ranks other than 0 write only to a path of their own.
            let own_out = out.as_ref().is_some_and(|p| p.to_string_lossy().contains("{rank}"));
            let out = out.map(|p| PathBuf::from(per_rank(&p.to_string_lossy()))).filter(|_| rank == 0 || own_out);
            let out_npy = out.as_deref().map(out_is_npy).transpose()?.unwrap_or(false);
            let device = parse_device(device)?;
            let limit = match max_memory {
                Some(s) => graft_core::memory::parse_bytes(&s).ok_or_else(|| {
                    Fail::usage(format!(
                        "error: --max-memory {s}: expected a byte count such as 1073741824, 512M or 4G"
                    ))
                })?,
                None => graft_core::memory::default_limit(),
            };
            let phase = timeout.map(watchdog::start).transpose()?;
            let m = load(&file)?;
            let args = inputs::gather(&m, &entry, &inputs, seed)?;
            let c = m.instantiate_nested(&entry, &args.trees).map_err(|d| render_all(&[d], m.file(), m.source()))?;
            if let (Some(path), true) = (&out, out_npy) {
                let n = c.func.outputs.len();
                if n != 1 {
                    return Err(Fail::usage(format!(
                        "error: --out {}: an .npy file holds one array, but `{entry}` returns {n} tensors\n\
                         help: write them all with --out PATH.npz",
                        path.display()
                    )));
                }
            }
            let need = graft_core::memory::estimated_peak_bytes(&c.func);
            let what = format!("`{entry}` at these input sizes");
            if let Some(msg) = graft_core::memory::over_limit(&what, need, limit, "the memory limit") {
                let span = m.def(&entry).map_or(0..0, |d| d.name.span.clone());
                let d = diag::Diagnostic::new(diag::Stage::Runtime, span, msg)
                    .with_label("not run")
                    .with_note("note: the estimate is the peak of live tensors when every value is materialised")
                    .with_note(
                        "help: raise the limit with --max-memory BYTES or GRAFT_MAX_MEMORY, or use smaller inputs",
                    );
                return Err(render_all(&[d], m.file(), m.source()));
            }
            if let Some(p) = &phase {
                p.set(watchdog::RUNNING);
            }
            let res = if device == graft_gpu::Device::Cpu {
                m.run_compiled(&entry, &c, &args.leaves).map_err(|d| render_all(&[d], m.file(), m.source()))?
            } else {
                run_on_device(&c, &args.leaves, device, verbose)?
            };
            if let Some(p) = &phase {
                p.set(watchdog::WRITING);
            }
            if let Some(path) = out {
                let arrays = results::arrays(m.def(&entry), &res, raw);
                match arrays.as_slice() {
                    [(_, t)] if out_npy => graft_core::npy::save_npy(&path, t),
                    _ => graft_core::npy::save_npz(&path, &arrays),
                }
                .map_err(|e| Fail::new(format!("error: cannot write {}: {e}", path.display())))?;
            }
            // Every rank computes; rank 0 speaks for the job.
            if rank != 0 {
                return Ok(String::new());
            }
            Ok(results::show(m.def(&entry), &res, raw))
        }
        Cmd::Bench { file, entry, inputs, seed, runs, warmup, json, device } => bench::bench(&bench::BenchArgs {
            file: &file,
            entry: &entry,
            inputs: &inputs,
            seed,
            // Both are at most 1_000_000 (clap checks the range).
            runs: runs as usize,
            warmup: warmup as usize,
            json,
            device: parse_device(device)?,
        }),
        Cmd::Gradbench => match graft_gradbench::serve_stdio(graft_gradbench::LangBackend::new()) {
            Ok(log) => {
                eprintln!(
                    "graft gradbench: {} responses, {} failures, {} outputs valid, {} invalid",
                    log.responses,
                    log.failures,
                    log.valid,
                    log.invalid.len()
                );
                Ok(String::new())
            }
            Err(e) => Err(Fail::new(format!("error: graft gradbench: {e}"))),
        },
        Cmd::Ir { file, entry, inputs, shapes, seed, kernels, wgsl } => {
            let m = load(&file)?;
            let types = inputs::gather_types(&m, &entry, &inputs, &shapes, seed)?;
            let c = m.instantiate_nested(&entry, &types).map_err(|d| render_all(&[d], m.file(), m.source()))?;
            let mut out = graft_core::ir::print_func(&c.func);
            if kernels {
                out.push_str(&kernel_listing(&c.func)?);
            }
            if wgsl {
                let g = graft_gpu::GpuExecutable::new(c.func.clone()).map_err(|e| Fail::new(format!("error: {e}")))?;
                out.push_str("\n# GPU plan\n");
                out.push_str(&g.describe());
                for (name, src) in g.wgsl_sources() {
                    out.push_str(&format!("\n# WGSL of {name}\n{src}"));
                }
            }
            Ok(out)
        }
    }
}

/// Starts the distributed runtime for `graft run --axis NAME` and binds
/// `NAME` to it for the whole process (see `graft_mpi::World`).
fn start_world(name: &str) -> Result<graft_mpi::World, Fail> {
    let ok = name.chars().next().is_some_and(|c| c.is_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_alphanumeric() || c == '_');
    if !ok {
        return Err(Fail::usage(format!(
            "error: --axis {name:?}: expected a name such as `data` (letters, digits, _)"
        )));
    }
    let world = graft_mpi::World::start().map_err(|e| Fail::new(format!("error: {e}")))?;
    if let Some(note) = world.note() {
        eprintln!("{note}");
    }
    world.bind(name);
    Ok(world)
}

/// The kernels of a function's plan (planned as `run` plans it, without
/// compiling anything), each after a blank line.
fn kernel_listing(func: &graft_core::Func) -> Result<String, Fail> {
    let opts = graft_core::ExecOptions {
        compile: graft_core::kernel::CompileMode::Off,
        ..graft_core::ExecOptions::from_env()
    };
    let exe = graft_core::Executable::with_options(func.clone(), opts)
        .map_err(|e| Fail::new(format!("error: cannot plan the function: {e}")))?;
    let ks = graft_core::kernel::kernels_of(&exe);
    // The kernels' values are those of the graph the executor plans
    // (constants folded, calls inlined, accumulations hoisted out of loops).
    let mut s = format!(
        "\n# the graph as the executor runs it (constants folded, calls inlined, accumulations hoisted)\n{}",
        graft_core::ir::print_func(exe.func())
    );
    s.push_str(&format!("\n# {} kernel{}\n", ks.len(), if ks.len() == 1 { "" } else { "s" }));
    for k in ks {
        s.push_str(&format!("\n{k}\n"));
    }
    // Loop bodies compiled whole (each scan's body as one native loop, each
    // `while` with its predicate), found in one walk of the plan above.
    let programs = graft_core::kernel::loop_programs_of(&exe, opts);
    let (loops, whiles) = (programs.scans, programs.whiles);
    if !loops.is_empty() {
        s.push_str(&format!("\n# {} compiled loop{}\n", loops.len(), if loops.len() == 1 { "" } else { "s" }));
        for (body, p) in loops {
            s.push_str(&format!("\n# body @{body}\n{p}"));
        }
    }
    if !whiles.is_empty() {
        let n = whiles.len();
        s.push_str(&format!("\n# {n} compiled while loop{}\n", if n == 1 { "" } else { "s" }));
        for (body, p) in whiles {
            s.push_str(&format!("\n# body @{body}\n{p}"));
        }
    }
    Ok(s)
}

/// `--device` of `graft run` and `graft bench`: the named device, else
/// `GRAFT_DEVICE`, else the CPU; an unknown name is a usage error.
fn parse_device(device: Option<String>) -> Result<graft_gpu::Device, Fail> {
    match device {
        Some(d) => graft_gpu::Device::parse(&d),
        None => graft_gpu::Device::from_env().map(|d| d.unwrap_or(graft_gpu::Device::Cpu)),
    }
    .map_err(|e| Fail::usage(format!("error: --device: {e}")))
}

/// `graft run --device gpu|auto`: plans `c` for the device (auto may fall
/// back to the CPU, with a note on stderr) and runs it.
fn run_on_device(
    c: &graft_lang::Compiled,
    inputs: &[graft_core::Tensor],
    device: graft_gpu::Device,
    verbose: bool,
) -> Result<graft_lang::Output, Fail> {
    let (runner, note) =
        graft_gpu::Runner::new(c.func.clone(), device).map_err(|e| Fail::new(format!("error: {e}")))?;
    if let Some(n) = note {
        eprintln!("{n}");
    }
    let refs: Vec<&graft_core::Tensor> = inputs.iter().collect();
    let outs =
        match &runner {
            graft_gpu::Runner::Gpu(g) => {
                if verbose {
                    eprint!("{}", g.describe());
                }
                let (outs, stats) = g.run_with_stats(&refs).map_err(|e| Fail::new(format!("error: {e}")))?;
                if verbose {
                    let (dev, host) = g.step_counts();
                    eprintln!(
                    "gpu run: {} kernel launches, {} equations on the host ({host} host steps of {} planned kernels), \
                     {} uploads ({} bytes), {} downloads ({} bytes), {} waits",
                    stats.launches, stats.host_eqns, dev, stats.uploads, stats.bytes_up, stats.downloads,
                    stats.bytes_down, stats.syncs
                );
                }
                outs
            }
            graft_gpu::Runner::Cpu(_) => runner.run(&refs).map_err(|e| Fail::new(format!("error: {e}")))?,
        };
    Ok(c.output(outs))
}
