//! `graft bench`: times an entry function the way `graft run` runs it, with
//! the compile (parse, name resolution, instantiation at the inputs' types,
//! simplification and planning) timed separately from the runs.
//!
//! The entry is planned once into an `Executable`; each run's outputs go back
//! into that executable's buffer pool (`Executable::recycle`), so the timed
//! runs see the steady state a training loop sees (no fresh zero-filled
//! output buffers per call).
//!
//! `--device gpu|auto` (or `GRAFT_DEVICE`) times the GPU executor instead,
//! as `graft run --device` runs it: host inputs uploaded and results
//! downloaded on every call, pipelines built at plan time (in the compile
//! figure, with one untimed run). The report adds the adapter and what one
//! run moved: kernel launches, steps still on the host, transfers and
//! waits, so a figure is read next to how much of the program ran on the
//! device.

use crate::{inputs, load, render_all, Fail};
use graft_core::{Executable, Tensor};
use graft_gpu::{Device, GpuStats, Runner};
use graft_lang::diag::{Diagnostic, Stage};
use std::path::Path;
use std::time::{Duration, Instant};

/// What `graft bench` was asked to do.
pub struct BenchArgs<'a> {
    pub file: &'a Path,
    pub entry: &'a str,
    pub inputs: &'a [String],
    pub seed: Option<i64>,
    pub runs: usize,
    pub warmup: usize,
    pub json: bool,
    /// Where to run (`--device`, else `GRAFT_DEVICE`, else the CPU).
    pub device: Device,
}

/// What a GPU run used, for the report.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuReport {
    /// The adapter (name, backend, type, driver).
    pub adapter: String,
    /// Steps that ran on the host, per run.
    pub host_steps: usize,
    /// Launches, transfers and waits of the last timed run.
    pub stats: GpuStats,
}

/// The measured times.
#[derive(Debug, Clone, PartialEq)]
pub struct Timings {
    pub compile: Duration,
    /// One entry per timed run, sorted ascending.
    pub runs: Vec<Duration>,
    pub warmup: usize,
    /// Set when the runs were on the GPU.
    pub gpu: Option<GpuReport>,
}

impl Timings {
    fn min(&self) -> Duration {
        self.runs.first().copied().unwrap_or_default()
    }

    fn max(&self) -> Duration {
        self.runs.last().copied().unwrap_or_default()
    }

    /// The middle run; the mean of the two middle ones for an even count.
    fn median(&self) -> Duration {
        let n = self.runs.len();
        match n {
            0 => Duration::ZERO,
            _ if n % 2 == 1 => self.runs[n / 2],
            _ => (self.runs[n / 2 - 1] + self.runs[n / 2]) / 2,
        }
    }

    /// `{"compile_ms":..,"min_ms":..,"median_ms":..,"max_ms":..,"runs":..}` and a newline
    /// (keys in this order); a GPU run adds `"device":"gpu"`, `"adapter"`,
    /// `"host_steps"`, `"launches"`, `"uploads"`, `"downloads"`,
    /// `"bytes_up"`, `"bytes_down"` and `"syncs"` (per run).
    pub fn json(&self) -> String {
        let num = |d: Duration| serde_json::Value::from(ms(d)).to_string();
        let gpu = match &self.gpu {
            None => String::new(),
            Some(g) => {
                let st = &g.stats;
                format!(
                    ",\"device\":\"gpu\",\"adapter\":{},\"host_steps\":{},\"launches\":{},\"uploads\":{},\"downloads\":{},\"bytes_up\":{},\"bytes_down\":{},\"syncs\":{}",
                    serde_json::Value::from(g.adapter.as_str()),
                    g.host_steps,
                    st.launches,
                    st.uploads,
                    st.downloads,
                    st.bytes_up,
                    st.bytes_down,
                    st.syncs
                )
            }
        };
        format!(
            "{{\"compile_ms\":{},\"min_ms\":{},\"median_ms\":{},\"max_ms\":{},\"runs\":{}{gpu}}}\n",
            num(self.compile),
            num(self.min()),
            num(self.median()),
            num(self.max()),
            self.runs.len()
        )
    }

    /// Two lines: the compile time, then min/median/max of the runs (and a
    /// third for a GPU run: the adapter and what one run moved).
    pub fn human(&self) -> String {
        let mut s = format!(
            "compile {}\nrun     min {}  median {}  max {}  ({} runs, {} warm-up)\n",
            show(self.compile),
            show(self.min()),
            show(self.median()),
            show(self.max()),
            self.runs.len(),
            self.warmup
        );
        if let Some(g) = &self.gpu {
            let st = &g.stats;
            s.push_str(&format!(
                "gpu     {}: per run {} launches, {} host steps, {} uploads ({} bytes), {} downloads ({} bytes), {} waits\n",
                g.adapter, st.launches, g.host_steps, st.uploads, st.bytes_up, st.downloads, st.bytes_down, st.syncs
            ));
        }
        s
    }
}

/// Milliseconds, exact to the nanosecond (so 1.02 ms prints as 1.02).
fn ms(d: Duration) -> f64 {
    d.as_nanos() as f64 / 1e6
}

/// A duration with a unit that keeps three significant digits readable.
fn show(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s >= 1.0 {
        format!("{s:.2} s")
    } else if s >= 1e-3 {
        format!("{:.2} ms", s * 1e3)
    } else if s >= 1e-6 {
        format!("{:.2} µs", s * 1e6)
    } else {
        format!("{} ns", d.as_nanos())
    }
}

/// Compiles the entry once, runs it `warmup` times untimed and `runs` times
/// timed, and renders the result (JSON or two human lines).
pub fn bench(a: &BenchArgs) -> Result<String, Fail> {
    let t = measure(a)?;
    Ok(if a.json { t.json() } else { t.human() })
}

fn measure(a: &BenchArgs) -> Result<Timings, Fail> {
    let file = a.file.to_path_buf();
    let start = Instant::now();
    let m = load(&file)?;
    let parse_time = start.elapsed();
    // Reading inputs (a large .npy) is not compiling: it stays out of the figure.
    let args = inputs::gather(&m, a.entry, a.inputs, a.seed)?;
    let ins = args.leaves;
    let start = Instant::now();
    let c = m.instantiate_nested(a.entry, &args.trees).map_err(|d| render_all(&[d], m.file(), m.source()))?;
    // The same failure `graft run` reports for an execution error: a
    // diagnostic at the entry's name.
    let span = m.def(a.entry).map_or(0..0, |d| d.name.span.clone());
    let runtime = |e: graft_core::ExecError| {
        render_all(&[Diagnostic::new(Stage::Runtime, span.clone(), e.to_string())], m.file(), m.source())
    };
    let exe = match a.device {
        Device::Cpu => Executable::new(c.func.clone()).map_err(runtime)?,
        device => {
            let (runner, note) = Runner::new(c.func.clone(), device).map_err(|e| Fail::new(format!("error: {e}")))?;
            if let Some(n) = note {
                eprintln!("{n}");
            }
            match runner {
                Runner::Cpu(exe) => exe,
                Runner::Gpu(g) => return measure_gpu(a, &g, &ins, parse_time + start.elapsed()),
            }
        }
    };
    // Native kernels compile on a background thread (GRAFT_COMPILE=async):
    // wait for them, so the timed runs measure the code later calls run
    // and the compile figure includes the C compiler. Loop bodies are
    // planned, and their kernels and compiled loops queued, on their first
    // run: one run, then a wait for every queued compile, is part of the
    // compile figure.
    exe.wait_native(Duration::from_secs(600));
    let refs: Vec<&Tensor> = ins.iter().collect();
    let outs = exe.run(&refs).map_err(runtime)?;
    exe.recycle(outs);
    exe.wait_all_native(Duration::from_secs(600));
    let compile = parse_time + start.elapsed();
    for _ in 0..a.warmup {
        let outs = exe.run(&refs).map_err(runtime)?;
        exe.recycle(outs);
    }
    let mut runs = Vec::with_capacity(a.runs);
    for _ in 0..a.runs {
        let t = Instant::now();
        let outs = exe.run(&refs).map_err(runtime)?;
        runs.push(t.elapsed());
        exe.recycle(outs);
    }
    runs.sort();
    Ok(Timings { compile, runs, warmup: a.warmup, gpu: None })
}

/// [`measure`] on the GPU executor `g` (planned, its pipelines built, in
/// `planned` since the start): one untimed run joins the compile figure.
fn measure_gpu(
    a: &BenchArgs,
    g: &graft_gpu::GpuExecutable,
    ins: &[Tensor],
    planned: Duration,
) -> Result<Timings, Fail> {
    let fail = |e: graft_gpu::GpuError| Fail::new(format!("error: {e}"));
    let refs: Vec<&Tensor> = ins.iter().collect();
    let start = Instant::now();
    g.run(&refs).map_err(fail)?;
    let compile = planned + start.elapsed();
    for _ in 0..a.warmup {
        g.run(&refs).map_err(fail)?;
    }
    let mut runs = Vec::with_capacity(a.runs);
    let mut stats = GpuStats::default();
    for _ in 0..a.runs {
        let t = Instant::now();
        let (_, st) = g.run_with_stats(&refs).map_err(fail)?;
        runs.push(t.elapsed());
        stats = st;
    }
    runs.sort();
    let gpu = GpuReport { adapter: g.gpu().describe(), host_steps: g.host_steps().len(), stats };
    Ok(Timings { compile, runs, warmup: a.warmup, gpu: Some(gpu) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timings(runs_us: &[u64]) -> Timings {
        let mut runs: Vec<Duration> = runs_us.iter().map(|&u| Duration::from_micros(u)).collect();
        runs.sort();
        Timings { compile: Duration::from_millis(12), runs, warmup: 3, gpu: None }
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(timings(&[5, 1, 3]).median(), Duration::from_micros(3));
        assert_eq!(timings(&[4, 1, 3, 2]).median(), Duration::from_nanos(2500));
    }

    #[test]
    fn units_follow_the_magnitude() {
        assert_eq!(show(Duration::from_nanos(850)), "850 ns");
        assert_eq!(show(Duration::from_nanos(12_340)), "12.34 µs");
        assert_eq!(show(Duration::from_micros(1_020)), "1.02 ms");
        assert_eq!(show(Duration::from_millis(2_500)), "2.50 s");
    }

    #[test]
    fn human_and_json_forms() {
        let t = timings(&[1_100, 1_020, 1_520]);
        assert_eq!(
            t.human(),
            "compile 12.00 ms\nrun     min 1.02 ms  median 1.10 ms  max 1.52 ms  (3 runs, 3 warm-up)\n"
        );
        assert_eq!(t.json(), "{\"compile_ms\":12.0,\"min_ms\":1.02,\"median_ms\":1.1,\"max_ms\":1.52,\"runs\":3}\n");
        let v: serde_json::Value = serde_json::from_str(&t.json()).unwrap();
        assert_eq!(v.as_object().map(|o| o.len()), Some(5));
        assert_eq!(v["runs"], 3);
        for (key, want) in [("min_ms", 1.02), ("median_ms", 1.1), ("max_ms", 1.52), ("compile_ms", 12.0)] {
            let got = v[key].as_f64().unwrap();
            assert!((got - want).abs() < 1e-9, "{key}: {got}");
        }
    }
}
