//! `graft train PROGRAM --data FILE.npz`: the training loop around a
//! program's `init(seed)`, `loss(params, ...)` and optional
//! `accuracy(params, ...)` (issue 13, seed 004's compiled step).
//!
//! - The parameters are `init(seed)`'s result (a tensor or a tuple of
//!   them), named after `loss`'s first parameter and their tuple path
//!   (`params.0`, `params.1.w`...).
//! - The data file's arrays (.npz or .safetensors) are bound to `loss`'s other parameters by name
//!   and split into train and test parts after a seeded shuffle; rows are
//!   the first axis, and every array must have the same number of rows.
//! - One step is one compiled graph (`graft::optim::Trainer`): forward,
//!   backward and the optimizer update. Batches have a fixed size (a
//!   remainder smaller than the batch is left out of the epoch, so the step
//!   compiles once), reshuffled every epoch from the seed, and gathered on
//!   a second thread ahead of the step that takes them.
//! - After every epoch the test loss (and accuracy, when defined) is
//!   evaluated; each epoch appends one JSON object to `metrics.jsonl`, and
//!   the parameters, optimizer state and step count go to
//!   `checkpoint.safetensors` (written to a temporary file, then renamed, so
//!   a failed write never destroys the previous checkpoint). `--resume`
//!   continues from that checkpoint; the data order depends only on the
//!   seed and the epoch, so a resumed run takes the same steps.
//! - A NaN or infinite loss stops the run, naming the step and the first
//!   parameter whose gradient is not finite (computed from the parameters
//!   the step started with); `--skip-nonfinite` undoes such steps and
//!   counts them instead. Non-finite metrics are written as JSON `null`.

use crate::Fail;
use graft::optim::{Optimizer, Schedule, Trainer};
use graft::{jit_n, Tensor, TensorType, Tr};
use graft_lang::{Module, Output, Tree};
use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;

/// The command line of `graft train`.
#[derive(Debug, Clone, clap::Args)]
pub struct TrainArgs {
    /// The program: `init(seed)`, `loss(params, ...)`, optionally `accuracy(params, ...)`.
    pub file: PathBuf,
    /// An .npz or .safetensors file whose arrays are `loss`'s data parameters, by name.
    #[arg(long)]
    pub data: PathBuf,
    /// Where to write checkpoint.safetensors and metrics.jsonl.
    #[arg(long, default_value = "train_out")]
    pub out_dir: PathBuf,
    /// sgd, momentum, nesterov, adam, adamw, rmsprop, adagrad or lion.
    #[arg(long, default_value = "adam")]
    pub optimizer: String,
    /// Peak learning rate.
    #[arg(long, default_value_t = 1e-3)]
    pub lr: f64,
    /// constant, cosine (to 10% of lr) or warmup-cosine (10% of the steps warming up).
    #[arg(long, default_value = "constant")]
    pub schedule: String,
    /// Decoupled weight decay (adamw, lion).
    #[arg(long, default_value_t = 0.0)]
    pub weight_decay: f64,
    /// Clip gradients to this global norm.
    #[arg(long)]
    pub clip: Option<f64>,
    /// Passes over the training data.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub epochs: u64,
    /// Rows per step.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
    pub batch_size: u64,
    /// Split each batch into this many micro-batches whose gradients are
    /// averaged before the update (gradient accumulation, in one compiled
    /// step); must divide --batch-size.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
    pub accumulate: u64,
    /// Fraction of the rows held out for testing.
    #[arg(long, default_value_t = 0.2)]
    pub test_fraction: f64,
    /// Seed of the initial parameters, the split and the batch order.
    #[arg(long, default_value_t = 0)]
    pub seed: i64,
    /// Continue from OUT_DIR/checkpoint.safetensors.
    #[arg(long)]
    pub resume: bool,
    /// Skip (and count) steps whose loss is NaN or infinite instead of stopping.
    #[arg(long)]
    pub skip_nonfinite: bool,
    /// Train data-parallel over the processes of an MPI job: each takes its
    /// share of every batch and the gradients are averaged inside the step.
    /// On whenever the command was started by mpirun; without mpirun it
    /// runs as a single process and says so.
    #[arg(long)]
    pub distributed: bool,
    /// Every K steps, check that the parameters are bit-identical on every
    /// process (a checksum gathered from all of them; 0: never).
    #[arg(long, default_value_t = 0)]
    pub check_replicas: u64,
}

/// The axis name of data-parallel training (the MPI world).
const DATA_AXIS: &str = "data";

/// SplitMix64: the host-side generator of the split and the batch order
/// (reproducible from the seed alone).
struct Mix(u64);

impl Mix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A Fisher-Yates shuffle of `0..n`.
    fn permutation(&mut self, n: usize) -> Vec<usize> {
        let mut p: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            let j = (self.next() % (i as u64 + 1)) as usize;
            p.swap(i, j);
        }
        p
    }
}

fn fail(msg: impl Into<String>) -> Fail {
    Fail::new(format!("error: {}", msg.into()))
}

/// Batches made ahead of the step that takes them (issue 13, item 5).
const PREFETCH: usize = 2;

/// Runs `take` on `make(0)`, ..., `make(n - 1)` in order, each batch made
/// on a producer thread while earlier ones are taken, at most [`PREFETCH`]
/// ahead. The first error (from either side) ends the run; the producer
/// stops when the consumer does.
fn prefetch<B: Send>(
    n: usize,
    make: impl Fn(usize) -> Result<B, Fail> + Sync,
    mut take: impl FnMut(B) -> Result<(), Fail>,
) -> Result<(), Fail> {
    std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Result<B, Fail>>(PREFETCH);
        let make = &make;
        scope.spawn(move || {
            for s in 0..n {
                let b = make(s);
                let failed = b.is_err();
                // A closed channel means the consumer stopped: so do we.
                if tx.send(b).is_err() || failed {
                    return;
                }
            }
        });
        for _ in 0..n {
            match rx.recv() {
                Ok(b) => take(b?)?,
                Err(_) => return Err(fail("internal error: the batch producer stopped early")),
            }
        }
        Ok(())
    })
}

/// Rows `idx` of `t` (along the first axis).
fn take_rows(t: &Tensor, idx: &[usize]) -> Result<Tensor, Fail> {
    let row: usize = t.shape()[1..].iter().product();
    let mut shape = t.shape().to_vec();
    shape[0] = idx.len();
    macro_rules! gather {
        ($ty:ty) => {{
            let src = t.as_slice::<$ty>().map_err(|e| fail(e.to_string()))?;
            let mut out = Vec::with_capacity(idx.len() * row);
            for &i in idx {
                out.extend_from_slice(&src[i * row..(i + 1) * row]);
            }
            Tensor::from_vec(shape, out).map_err(|e| fail(e.to_string()))
        }};
    }
    match t.dtype() {
        graft::DType::F16 => gather!(graft_core::half::f16),
        graft::DType::F32 => gather!(f32),
        graft::DType::F64 => gather!(f64),
        graft::DType::I32 => gather!(i32),
        graft::DType::I64 => gather!(i64),
        graft::DType::U32 => gather!(u32),
        graft::DType::Bool => gather!(bool),
    }
}

fn leaves(o: Output, out: &mut Vec<Tensor>) {
    match o {
        Output::Tensor(t) => out.push(t),
        Output::Tuple(items) => items.into_iter().for_each(|i| leaves(i, out)),
    }
}

fn tree_of(o: &Output) -> Tree {
    match o {
        Output::Tensor(t) => Tree::Leaf(t.ty()),
        Output::Tuple(items) => Tree::Tuple(items.iter().map(tree_of).collect()),
    }
}

fn names_of(o: &Output, prefix: &str, out: &mut Vec<String>) {
    match o {
        Output::Tensor(_) => out.push(prefix.to_string()),
        Output::Tuple(items) => {
            for (i, it) in items.iter().enumerate() {
                names_of(it, &format!("{prefix}.{i}"), out);
            }
        }
    }
}

fn optimizer(a: &TrainArgs, total_steps: u64) -> Result<Optimizer, Fail> {
    let lr = match a.schedule.as_str() {
        "constant" => Schedule::Constant(a.lr),
        "cosine" => Schedule::Cosine { init: a.lr, steps: total_steps, alpha: 0.1 },
        "warmup-cosine" => Schedule::WarmupCosine {
            init: 0.0,
            peak: a.lr,
            warmup: total_steps / 10,
            steps: total_steps,
            end: a.lr * 0.1,
        },
        other => {
            return Err(Fail::usage(format!("error: --schedule {other}: expected constant, cosine or warmup-cosine")))
        }
    };
    let o = match a.optimizer.as_str() {
        "sgd" => Optimizer::sgd(lr),
        "momentum" => Optimizer::momentum(lr, 0.9, false),
        "nesterov" => Optimizer::momentum(lr, 0.9, true),
        "adam" => Optimizer::adam(lr),
        "adamw" => Optimizer::adamw(lr, a.weight_decay),
        "rmsprop" => Optimizer::rmsprop(lr, 0.9, 1e-8),
        "adagrad" => Optimizer::adagrad(lr, 0.1, 1e-7),
        "lion" => Optimizer::lion(lr, 0.9, 0.99, a.weight_decay),
        other => {
            return Err(Fail::usage(format!(
                "error: --optimizer {other}: expected sgd, momentum, nesterov, adam, adamw, rmsprop, adagrad or lion"
            )))
        }
    };
    Ok(match a.clip {
        Some(c) => o.clip(c),
        None => o,
    })
}

/// The program's entry `name` as a traced function of its flattened leaves.
fn entry_fn(func: Arc<graft::Func>) -> impl Fn(&[Tr]) -> Tr {
    move |v: &[Tr]| {
        let others: Vec<&Tr> = v[1..].iter().collect();
        let f = func.clone();
        v[0].lift_many(&others, 1, move |b, vals| b.call(f, vals)).remove(0)
    }
}

/// The test metrics: `loss` and, when the program defines it, `accuracy`,
/// instantiated at the test rows' types and run as one compiled function of
/// `(params..., data...)`: one pass over the test rows, whose forward pass
/// the two share (the executor inlines both calls and merges their common
/// work).
struct Eval {
    entries: Vec<&'static str>,
    jit: graft::Jit<EvalFn>,
}

type EvalFn = Box<dyn Fn(&[Tr]) -> Vec<Tr>>;

impl Eval {
    fn new(m: &Module, entries: Vec<&'static str>, tree: &Tree, data: &[Tensor]) -> Result<Eval, Fail> {
        let mut args = vec![tree.clone()];
        args.extend(data.iter().map(|d| Tree::Leaf(d.ty())));
        let mut funcs = Vec::new();
        for e in &entries {
            let c = m.instantiate_nested(e, &args).map_err(|d| crate::render_all(&[d], m.file(), m.source()))?;
            funcs.push(c.func.clone());
        }
        let f: EvalFn = Box::new(move |v: &[Tr]| funcs.iter().map(|f| entry_fn(f.clone())(v)).collect());
        Ok(Eval { entries, jit: jit_n("eval", f) })
    }

    /// Each entry's scalar for these parameters, in order.
    fn run(&self, params: &[Tensor], data: &[Tensor]) -> Result<Vec<f64>, Fail> {
        let ins: Vec<&Tensor> = params.iter().chain(data).collect();
        let out = self.jit.call(&ins).map_err(|e| fail(format!("`{}`: {e}", self.entries.join("`, `"))))?;
        out.iter()
            .zip(&self.entries)
            .map(|(t, e)| t.to_scalar_f64().map_err(|_| fail(format!("`{e}` must return one scalar"))))
            .collect()
    }
}

/// A number as JSON: non-finite values (which JSON cannot hold) are `null`.
fn json(v: f64) -> String {
    if v.is_finite() {
        v.to_string()
    } else {
        "null".into()
    }
}

/// Names the first parameter whose gradient is not finite at the
/// parameters a failing step started from, on its batch (computed only when
/// a step fails).
fn first_nonfinite_gradient(
    loss: &Arc<graft::Func>,
    names: &[String],
    params: &[Tensor],
    batch: &[&Tensor],
    parts: usize,
) -> Result<String, Fail> {
    let n = params.len();
    let g = jit_n("loss", entry_fn(loss.clone())).grad(graft::Wrt::Positions((0..n).collect()));
    // The loss takes one micro-batch (`--accumulate`): each in turn.
    let rows = batch.first().map_or(0, |t| t.shape()[0]);
    let per = rows / parts.max(1);
    for part in 0..parts.max(1) {
        let idx: Vec<usize> = (part * per..(part + 1) * per).collect();
        let micro: Vec<Tensor> = batch.iter().map(|t| take_rows(t, &idx)).collect::<Result<_, _>>()?;
        let mut ins: Vec<&Tensor> = params.iter().collect();
        ins.extend(micro.iter());
        let grads = g.call(&ins).map_err(|e| fail(e.to_string()))?;
        for (name, gr) in names.iter().zip(&grads) {
            if gr.to_f64_vec().iter().any(|v| !v.is_finite()) {
                return Ok(format!("the gradient of `{name}` is not finite"));
            }
        }
    }
    for (name, p) in names.iter().zip(params) {
        if p.to_f64_vec().iter().any(|v| !v.is_finite()) {
            return Ok(format!("the parameter `{name}` is not finite"));
        }
    }
    Ok("every parameter and gradient is finite here: the loss itself overflowed".into())
}

/// Runs `graft train`; returns the final line to print.
pub fn train(a: &TrainArgs) -> Result<String, Fail> {
    let m = crate::load(&a.file)?;
    m.check().map_err(|ds| crate::render_all(&ds, m.file(), m.source()))?;
    for need in ["init", "loss"] {
        if m.def(need).is_none() {
            return Err(fail(format!(
                "{} defines no `{need}`; `graft train` needs init(seed) and loss(params, ...)",
                m.file()
            )));
        }
    }
    if !(0.0..1.0).contains(&a.test_fraction) {
        return Err(Fail::usage(format!("error: --test-fraction {}: expected a number in [0, 1)", a.test_fraction)));
    }
    // Data, bound to loss's parameters after the first by name.
    let arrays: HashMap<String, Tensor> = if a.data.extension().is_some_and(|e| e == "safetensors") {
        crate::checkpoint::load_arrays(&a.data)?
    } else {
        graft_core::npy::load_npz(&a.data).map_err(|e| fail(format!("{}: {e}", a.data.display())))?
    }
    .into_iter()
    .collect();
    let loss_def = m.def("loss").ok_or_else(|| fail("no loss"))?;
    let param_name = loss_def.params.first().map(|p| p.name.name.clone()).unwrap_or_else(|| "params".into());
    let data_names: Vec<String> = loss_def.params.iter().skip(1).map(|p| p.name.name.clone()).collect();
    let mut data = Vec::new();
    for n in &data_names {
        let t = arrays.get(n).ok_or_else(|| {
            let mut have: Vec<&String> = arrays.keys().collect();
            have.sort();
            fail(format!("{} has no array `{n}` for `loss`'s parameter `{n}` (it has {have:?})", a.data.display()))
        })?;
        if t.rank() == 0 {
            return Err(fail(format!("array `{n}` has no rows (it is a scalar)")));
        }
        data.push(t.clone());
    }
    let rows = data.first().map_or(0, |t| t.shape()[0]);
    if let Some((n, t)) = data_names.iter().zip(&data).find(|(_, t)| t.shape()[0] != rows) {
        return Err(fail(format!(
            "the data arrays disagree on the number of rows: `{}` has {rows}, `{n}` has {}",
            data_names[0],
            t.shape()[0]
        )));
    }
    let mut mix = Mix(a.seed as u64 ^ 0x5EED);
    let order = mix.permutation(rows);
    let n_test = ((rows as f64) * a.test_fraction).round() as usize;
    let (test_idx, train_idx) = order.split_at(n_test);
    let bs = a.batch_size as usize;
    // Data parallelism: this process takes rows `rank * lb ..` of every
    // batch of `bs` rows (the batch order is the same on every process).
    let world = if a.distributed || graft_mpi::launcher_size().is_some() {
        Some(graft_mpi::World::start().map_err(|e| fail(e.to_string()))?)
    } else {
        None
    };
    if let Some(note) = world.as_ref().and_then(graft_mpi::World::note) {
        eprintln!("{note}");
    }
    let (rank, procs) = world.as_ref().map_or((0, 1), |w| (w.rank(), w.size()));
    let lead = rank == 0;
    if !bs.is_multiple_of(procs) {
        return Err(Fail::usage(format!(
            "error: --batch-size {bs} cannot be split evenly over the {procs} processes of this job"
        )));
    }
    let lb = bs / procs;
    if !(lb as u64).is_multiple_of(a.accumulate) {
        return Err(Fail::usage(if procs == 1 {
            format!("error: --accumulate {} does not divide --batch-size {}", a.accumulate, a.batch_size)
        } else {
            format!(
                "error: --accumulate {} does not divide the {lb} rows per process (--batch-size {} over {procs} processes)",
                a.accumulate, a.batch_size
            )
        }));
    }
    if train_idx.len() < bs {
        return Err(fail(format!("{} training rows are fewer than one batch of {bs}", train_idx.len())));
    }
    let test: Vec<Tensor> = data.iter().map(|t| take_rows(t, test_idx)).collect::<Result<_, _>>()?;

    // Parameters from init(seed).
    let init_c = m
        .instantiate("init", &[TensorType::scalar(graft::DType::I32)])
        .map_err(|d| crate::render_all(&[d], m.file(), m.source()))?;
    let seed = Tensor::scalar(i32::try_from(a.seed).map_err(|_| Fail::usage("error: --seed must fit in i32"))?);
    let init_out =
        m.run_compiled("init", &init_c, &[seed]).map_err(|d| crate::render_all(&[d], m.file(), m.source()))?;
    let tree = tree_of(&init_out);
    let mut names = Vec::new();
    names_of(&init_out, &param_name, &mut names);
    let mut params = Vec::new();
    leaves(init_out, &mut params);

    // The step: loss at batch types, differentiated and updated in one graph.
    let batch_types: Vec<Tree> = data
        .iter()
        .map(|t| {
            // The loss sees one micro-batch at a time (`--accumulate`).
            let mut s = t.shape().to_vec();
            s[0] = lb / a.accumulate as usize;
            Tree::Leaf(TensorType::new(t.dtype(), s))
        })
        .collect();
    let mut args = vec![tree.clone()];
    args.extend(batch_types);
    let loss_c = m.instantiate_nested("loss", &args).map_err(|d| crate::render_all(&[d], m.file(), m.source()))?;
    let steps_per_epoch = train_idx.len() / bs;
    let total = steps_per_epoch as u64 * a.epochs;
    let opt = optimizer(a, total)?;
    let mut tr = Trainer::new(jit_n("loss", entry_fn(loss_c.func.clone())), names.clone(), params, opt)
        .map_err(|e| fail(e.to_string()))?;
    tr.accumulate(a.accumulate as usize).map_err(|e| fail(e.to_string()))?;
    if let Some(w) = world.as_ref().filter(|w| w.size() > 1) {
        w.bind(DATA_AXIS);
        tr.data_parallel(Some(graft::ops::Axis::new(DATA_AXIS, w.size())));
    }

    std::fs::create_dir_all(&a.out_dir).map_err(|e| fail(format!("{}: {e}", a.out_dir.display())))?;
    let ckpt = a.out_dir.join("checkpoint.safetensors");
    let metrics_path = a.out_dir.join("metrics.jsonl");
    if a.resume {
        crate::checkpoint::load(&ckpt, &mut tr)?;
    } else if lead && metrics_path.exists() {
        std::fs::remove_file(&metrics_path).map_err(|e| fail(format!("{}: {e}", metrics_path.display())))?;
    }
    let first_epoch = tr.count / steps_per_epoch.max(1) as u64;
    let mut metrics = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&metrics_path)
        .map_err(|e| fail(format!("{}: {e}", metrics_path.display())))?;
    // Only the first process evaluates, writes and shows anything.
    let eval = match (n_test > 0 && lead, m.def("accuracy").is_some()) {
        (false, _) => None,
        (true, false) => Some(Eval::new(&m, vec!["loss"], &tree, &test)?),
        (true, true) => Some(Eval::new(&m, vec!["loss", "accuracy"], &tree, &test)?),
    };
    let tty = lead && std::io::stderr().is_terminal();
    let bar = if tty {
        let b = indicatif::ProgressBar::new(total.saturating_sub(tr.count));
        b.set_style(
            indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} steps  {msg}  {per_sec}  eta {eta}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        Some(b)
    } else {
        None
    };
    let started = std::time::Instant::now();
    let mut last = String::from("no epoch left to run");
    let mut skipped = 0u64;
    let mut skipped_before = 0u64;
    for epoch in first_epoch..a.epochs {
        let mut emix = Mix((a.seed as u64 ^ 0x5EED).wrapping_add(0x1000 * (epoch + 1)));
        let perm = emix.permutation(train_idx.len());
        let mut sum = 0.0;
        // Batches are gathered on a second thread while the steps run
        // (`prefetch`), at most `PREFETCH` ahead.
        let batches = |s: usize| -> Result<Vec<Tensor>, Fail> {
            let mine = s * bs + rank * lb;
            let idx: Vec<usize> = perm[mine..mine + lb].iter().map(|&p| train_idx[p]).collect();
            data.iter().map(|t| take_rows(t, &idx)).collect()
        };
        prefetch(steps_per_epoch, batches, |batch| -> Result<(), Fail> {
            let refs: Vec<&Tensor> = batch.iter().collect();
            // The step moves the parameters it replaced into `undo`, so a
            // bad step is undone (or diagnosed) without copying anything.
            let (l, undo) = tr.step_undoable(&refs).map_err(|e| fail(e.to_string()))?;
            if !l.is_finite() {
                if a.skip_nonfinite {
                    tr.undo(undo);
                    skipped += 1;
                    return Ok(());
                }
                let what = first_nonfinite_gradient(&loss_c.func, &names, &undo.params, &refs, a.accumulate as usize)?;
                return Err(fail(format!(
                    "the loss is {l} at step {} (epoch {}); {what}; rerun with --skip-nonfinite to skip such steps",
                    undo.count + 1,
                    epoch + 1
                )));
            }
            tr.commit(undo);
            if let Some(w) = &world {
                if a.check_replicas > 0 && tr.count.is_multiple_of(a.check_replicas) {
                    let values: Vec<&graft_core::tensor::Storage> = tr.params.iter().map(Tensor::storage).collect();
                    w.check_replicas(&format!("the parameters after step {}", tr.count), &values).map_err(fail)?;
                }
            }
            sum += l;
            if let Some(b) = &bar {
                b.inc(1);
                b.set_message(format!("epoch {}/{} loss {l:.4}", epoch + 1, a.epochs));
            }
            Ok(())
        })?;
        let taken = steps_per_epoch as u64 - (skipped - skipped_before);
        skipped_before = skipped;
        let train_loss = if taken == 0 { f64::NAN } else { sum / taken as f64 };
        let mut row = format!("{{\"step\": {}, \"epoch\": {}, \"loss\": {}", tr.count, epoch + 1, json(train_loss));
        let mut line = format!("epoch {}/{}: loss {train_loss:.4}", epoch + 1, a.epochs);
        if let Some(e) = &eval {
            let vals = e.run(&tr.params, &test)?;
            let tl = vals[0];
            row.push_str(&format!(", \"test_loss\": {}", json(tl)));
            line.push_str(&format!(", test loss {tl:.4}"));
            if let Some(&acc) = vals.get(1) {
                row.push_str(&format!(", \"test_accuracy\": {}", json(acc)));
                line.push_str(&format!(", test accuracy {:.2}%", 100.0 * acc));
            }
        }
        row.push_str(&format!(", \"seconds\": {:.3}}}\n", started.elapsed().as_secs_f64()));
        if !lead {
            continue;
        }
        metrics.write_all(row.as_bytes()).map_err(|e| fail(format!("{}: {e}", metrics_path.display())))?;
        crate::checkpoint::save(&ckpt, &tr)?;
        match &bar {
            Some(b) => b.println(&line),
            None => eprintln!("{line}"),
        }
        last = line.split_once(": ").map_or(line.clone(), |(_, m)| m.to_string());
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if skipped > 0 {
        last.push_str(&format!(" ({skipped} steps skipped: non-finite loss)"));
    }
    if !lead {
        return Ok(String::new());
    }
    crate::plot::curves(&metrics_path, &a.out_dir)?;
    let seconds = started.elapsed().as_secs_f64();
    // Kernels still compiling in the background (a short run can end before
    // its step's library is built) are finished and cached before the
    // process exits, so the next run of this program starts on native code.
    // Not part of the training time.
    graft_core::kernel::native::wait_idle(std::time::Duration::from_secs(120));
    let procs_note = if procs > 1 { format!(" on {procs} processes") } else { String::new() };
    Ok(format!(
        "trained {} epochs ({} steps{procs_note}, {:.3} s): {last}; wrote checkpoint.safetensors, metrics.jsonl, curves.png and curves.svg to {}\n",
        a.epochs,
        tr.count,
        seconds,
        a.out_dir.display()
    ))
}
