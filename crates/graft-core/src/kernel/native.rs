//! Native code: compiles a translation unit with the system C compiler,
//! caches the shared library on disk, loads it and hands out kernel entry
//! points.
//!
//! Cache: `GRAFT_CACHE_DIR`, else `$XDG_CACHE_HOME/graft`, else
//! `$HOME/.cache/graft`, else the system temp directory; libraries live in
//! its `kernels/` folder as `<key>.so`, where the key is a 128-bit hash of
//! the source (which names the graft version and the lane count), the
//! compiler's `--version` line, the flags and the host's vector features.
//! Beside each library a `<key>.sum` holds a hash of the library's bytes;
//! a library whose bytes do not match (a truncated write, a corrupted
//! disk) is rebuilt. Files are written under temporary names and renamed,
//! so concurrent processes never see half a library.
//!
//! `GRAFT_KEEP_SOURCE=1` keeps the generated source of every library it
//! compiles as `<key>.c` beside it, for reading and profiling.
//!
//! Failure never stops a program: no compiler, a compile error, an
//! unwritable cache (then a per-process temp directory is tried) or a
//! library that does not load leave the kernels to the interpreter, with
//! one warning per kind of failure on stderr.
//!
//! Safety: loading a library and calling into it is `unsafe`. The
//! invariants are: the library was produced by [`compile`] from source
//! rendered by `render_c` (or verified by hash to be the bytes such a
//! compile wrote), every kernel symbol has the signature [`KernelFn`],
//! the `Library` outlives every function pointer taken from it (each
//! [`NativeFn`] holds an `Arc` of it), and callers pass buffers of the
//! lengths the kernel's `Arg`s state, checked in `exec::fuse`.

#![allow(unsafe_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// A kernel's entry point: points `start..end`, buffer pointers in
/// argument order.
pub type KernelFn = unsafe extern "C" fn(i64, i64, *const *mut u8);

/// A loaded kernel: its entry point and the library that holds it, and for
/// a size-generic kernel (`render_c::render_unit_sized`) the table of
/// sizes this use of it passes after its buffers.
#[derive(Clone)]
pub struct NativeFn {
    f: KernelFn,
    _lib: Arc<libloading::Library>,
    table: Option<Arc<[i64]>>,
}

impl std::fmt::Debug for NativeFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NativeFn")
    }
}

impl NativeFn {
    /// The same kernel with `table` as its size table.
    fn with_table(&self, table: Option<Arc<[i64]>>) -> NativeFn {
        NativeFn { table, ..self.clone() }
    }

    /// Runs points `start..end`.
    ///
    /// # Safety
    /// `args` holds one pointer per kernel argument, in order, each to a
    /// live buffer of the argument's dtype and length; written arguments
    /// are not aliased by any other argument, and no other thread writes
    /// the points `start..end` of them meanwhile.
    pub unsafe fn call(&self, start: usize, end: usize, args: &[*mut u8]) {
        // SAFETY: the caller upholds the buffer contract above; the symbol
        // has this signature because render_c emitted it.
        unsafe { (self.f)(start as i64, end as i64, args.as_ptr()) }
    }
}

/// Why native code is unavailable for a unit.
#[derive(Debug, Clone, thiserror::Error)]
pub enum NativeError {
    /// No C compiler could be run.
    #[error("no C compiler found (tried `{0}`; set CC or GRAFT_CC to one)")]
    NoCompiler(String),
    /// The compiler rejected the generated source.
    #[error("the C compiler failed on generated kernels: {0}")]
    Compile(String),
    /// Neither the cache directory nor a temp directory could be written.
    #[error("cannot write kernel libraries: {0}")]
    Cache(String),
    /// The library did not load or lacks a kernel.
    #[error("cannot load compiled kernels: {0}")]
    Load(String),
}

impl NativeError {
    fn kind(&self) -> &'static str {
        match self {
            NativeError::NoCompiler(_) => "compiler",
            NativeError::Compile(_) => "compile",
            NativeError::Cache(_) => "cache",
            NativeError::Load(_) => "load",
        }
    }
}

/// Prints a warning once per kind of failure per process.
pub(crate) fn warn_once(kind: &'static str, msg: &str) {
    static SEEN: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if !seen.contains(&kind) {
        seen.push(kind);
        eprintln!("graft: warning: {msg}; running on the interpreter instead");
    }
}

/// Lanes per vector on this host: 16 with AVX-512, 8 with AVX2, else 4;
/// `GRAFT_LANES` = 4, 8 or 16 overrides it (for tuning: results do not
/// depend on the lane count).
pub fn host_lanes() -> usize {
    if let Some(l) = lanes_override() {
        return l;
    }
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            return 16;
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            return 8;
        }
    }
    4
}

/// The argument bytes from which a top-level kernel writes its large
/// outputs with streaming stores (`render_c`, Note [Streaming stores]):
/// the size of the host's last-level cache (Linux's
/// `/sys/devices/system/cpu/cpu0/cache/index3/size`, else 32 MiB) on
/// x86-64, where the stores exist. `GRAFT_STREAM_STORES=0` turns them off
/// (to measure; results do not depend on it). Read once per process.
pub fn stream_min_bytes() -> Option<usize> {
    static MIN: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *MIN.get_or_init(|| {
        if !cfg!(target_arch = "x86_64") || std::env::var("GRAFT_STREAM_STORES").is_ok_and(|v| v.trim() == "0") {
            return None;
        }
        let llc = std::fs::read_to_string("/sys/devices/system/cpu/cpu0/cache/index3/size").ok();
        Some(llc.as_deref().and_then(parse_cache_size).unwrap_or(32 << 20))
    })
}

/// A cache size as Linux's sysfs writes it (`32768K`, `1M`, `512`).
fn parse_cache_size(s: &str) -> Option<usize> {
    let s = s.trim();
    let (digits, unit) = match s.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => (&s[..i], &s[i..]),
        None => (s, ""),
    };
    let n: usize = digits.parse().ok()?;
    let scale = match unit.trim() {
        "" => 1,
        "K" | "k" => 1 << 10,
        "M" | "m" => 1 << 20,
        "G" | "g" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(scale).filter(|&b| b > 0)
}

/// `GRAFT_LANES`, when it is 4, 8 or 16.
pub fn lanes_override() -> Option<usize> {
    let l = std::env::var("GRAFT_LANES").ok()?.trim().parse::<usize>().ok()?;
    matches!(l, 4 | 8 | 16).then_some(l)
}

/// The compiler command: `GRAFT_CC`, else `CC`, else `cc`.
fn compiler() -> String {
    std::env::var("GRAFT_CC")
        .ok()
        .filter(|s| !s.trim().is_empty())
        .or_else(|| std::env::var("CC").ok().filter(|s| !s.trim().is_empty()))
        .unwrap_or_else(|| "cc".to_string())
}

/// Flags every unit is compiled with. No `-ffast-math` and no contraction:
/// results must be bitwise those of the interpreter.
pub const FLAGS: &[&str] = &["-O2", "-shared", "-fPIC", "-ffp-contract=off", "-fno-math-errno", "-march=native", "-w"];

/// Libraries, after the source: libm for `fma`/`fmaf`, which the prelude
/// calls only on a CPU without FMA instructions.
pub const LIBS: &[&str] = &["-lm"];

/// Compiler identities probed so far, by command.
static COMPILER_IDS: Mutex<Option<HashMap<String, Result<String, NativeError>>>> = Mutex::new(None);

/// The compiler's identity (first line of `--version`), probed once per
/// compiler command.
fn compiler_id(cc: &str) -> Result<String, NativeError> {
    let mut ids = COMPILER_IDS.lock().unwrap_or_else(|e| e.into_inner());
    let ids = ids.get_or_insert_with(HashMap::new);
    if let Some(r) = ids.get(cc) {
        return r.clone();
    }
    let r = std::process::Command::new(cc)
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).lines().next().unwrap_or("").to_string())
        .ok_or_else(|| NativeError::NoCompiler(cc.to_string()));
    ids.insert(cc.to_string(), r.clone());
    r
}

/// FNV-1a over bytes, 64 bits, from a given basis.
fn fnv(basis: u64, parts: &[&[u8]]) -> u64 {
    let mut h = basis;
    for p in parts {
        for &b in *p {
            h ^= b as u64;
            h = h.wrapping_mul(0x100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}

/// A 128-bit content hash as 32 hex digits (two FNV-1a passes with
/// different bases; detects corruption and keys the cache, not meant
/// against adversaries).
pub fn hash_hex(parts: &[&[u8]]) -> String {
    format!("{:016x}{:016x}", fnv(0xcbf2_9ce4_8422_2325, parts), fnv(0x8422_2325_cbf2_9ce4, parts))
}

/// The cache directory (see the module docs).
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("GRAFT_CACHE_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("graft");
    }
    if let Some(d) = std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join(".cache").join("graft");
    }
    std::env::temp_dir().join("graft-cache")
}

fn features() -> String {
    let mut f = format!("{}-lanes{}", std::env::consts::ARCH, host_lanes());
    #[cfg(target_arch = "x86_64")]
    for (name, on) in [
        ("fma", std::arch::is_x86_feature_detected!("fma")),
        ("avx512f", std::arch::is_x86_feature_detected!("avx512f")),
        ("avx2", std::arch::is_x86_feature_detected!("avx2")),
    ] {
        if on {
            f.push('+');
            f.push_str(name);
        }
    }
    f
}

/// Libraries loaded by this process, by key.
static LOADED: Mutex<Option<HashMap<String, Arc<libloading::Library>>>> = Mutex::new(None);

/// Where units are compiled and cached: the compiler command and the
/// cache directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Toolchain {
    /// The C compiler command.
    pub cc: String,
    /// The cache directory (libraries go to its `kernels/` folder).
    pub cache: PathBuf,
}

impl Toolchain {
    /// From the environment: `GRAFT_CC`/`CC`/`cc` and [`cache_dir`].
    pub fn from_env() -> Toolchain {
        Toolchain { cc: compiler(), cache: cache_dir() }
    }

    /// Compiles (or finds in the cache) and loads a translation unit, then
    /// looks up each named kernel.
    pub fn compile(&self, source: &str, names: &[String]) -> Result<Vec<NativeFn>, NativeError> {
        let id = compiler_id(&self.cc)?;
        let (key, loaded_key) = self.keys(source, &id);
        let cached =
            LOADED.lock().unwrap_or_else(|e| e.into_inner()).as_ref().and_then(|m| m.get(&loaded_key).cloned());
        let lib = match cached {
            Some(lib) => lib,
            None => {
                let lib = Arc::new(build_or_load(&self.cc, &self.cache, &key, source)?);
                LOADED
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get_or_insert_with(HashMap::new)
                    .insert(loaded_key, lib.clone());
                lib
            }
        };
        symbols(&lib, names)
    }

    /// The cache key of a unit and its key among loaded libraries.
    fn keys(&self, source: &str, compiler_id: &str) -> (String, String) {
        let flags = format!("{} {}", FLAGS.join(" "), LIBS.join(" "));
        let key = hash_hex(&[source.as_bytes(), compiler_id.as_bytes(), flags.as_bytes(), features().as_bytes()]);
        let loaded_key = format!("{key}@{}", self.cache.display());
        (key, loaded_key)
    }

    /// The unit's kernels if this process already loaded a library built
    /// from the same source (a function planned again, or a size-generic
    /// unit at new sizes), without starting a compiler: `None` otherwise.
    pub fn loaded(&self, source: &str, names: &[String]) -> Option<Vec<NativeFn>> {
        let id = {
            let ids = COMPILER_IDS.lock().unwrap_or_else(|e| e.into_inner());
            ids.as_ref()?.get(&self.cc)?.clone().ok()?
        };
        let (_, loaded_key) = self.keys(source, &id);
        let lib = LOADED.lock().unwrap_or_else(|e| e.into_inner()).as_ref()?.get(&loaded_key)?.clone();
        symbols(&lib, names).ok()
    }
}

/// Looks up each named kernel of a loaded library.
fn symbols(lib: &Arc<libloading::Library>, names: &[String]) -> Result<Vec<NativeFn>, NativeError> {
    names
        .iter()
        .map(|n| {
            // SAFETY: the symbol was emitted by render_c with the KernelFn
            // signature; the Arc keeps the library loaded while the pointer lives.
            let f = unsafe { lib.get::<KernelFn>(n.as_bytes()) }
                .map(|s| *s)
                .map_err(|e| NativeError::Load(format!("kernel {n}: {e}")))?;
            Ok(NativeFn { f, _lib: lib.clone(), table: None })
        })
        .collect()
}

/// [`Toolchain::compile`] with the environment's toolchain.
pub fn compile(source: &str, names: &[String]) -> Result<Vec<NativeFn>, NativeError> {
    Toolchain::from_env().compile(source, names)
}

fn build_or_load(cc: &str, cache: &Path, key: &str, source: &str) -> Result<libloading::Library, NativeError> {
    let primary = cache.join("kernels");
    match build_in(cc, &primary, key, source) {
        Ok(lib) => Ok(lib),
        Err(NativeError::Cache(why)) => {
            warn_once(
                "cache-dir",
                &format!("kernel cache {} is not writable ({why}); using a temp directory", primary.display()),
            );
            let tmp = std::env::temp_dir().join(format!("graft-kernels-{}", std::process::id()));
            build_in(cc, &tmp, key, source)
        }
        Err(e) => Err(e),
    }
}

fn io(e: std::io::Error) -> NativeError {
    NativeError::Cache(e.to_string())
}

fn build_in(cc: &str, dir: &Path, key: &str, source: &str) -> Result<libloading::Library, NativeError> {
    let lib_path = dir.join(format!("{key}.so"));
    let sum_path = dir.join(format!("{key}.sum"));
    if let (Ok(bytes), Ok(sum)) = (std::fs::read(&lib_path), std::fs::read_to_string(&sum_path)) {
        if hash_hex(&[&bytes]) == sum.trim() {
            return load(&lib_path);
        }
        // A bad entry: rebuilt below (the rename replaces it).
    }
    std::fs::create_dir_all(dir).map_err(io)?;
    let unique = format!("{}-{:x}", std::process::id(), unique_counter());
    let c_path = dir.join(format!("{key}.{unique}.c"));
    let tmp_lib = dir.join(format!("{key}.{unique}.so"));
    std::fs::write(&c_path, source).map_err(io)?;
    let out = std::process::Command::new(cc)
        .args(FLAGS)
        .arg("-o")
        .arg(&tmp_lib)
        .arg(&c_path)
        .args(LIBS)
        .output()
        .map_err(|e| NativeError::NoCompiler(format!("{cc}: {e}")));
    if std::env::var_os("GRAFT_KEEP_SOURCE").is_some_and(|v| !v.is_empty() && v != "0") {
        // For reading and profiling the generated code: `<key>.c` beside the library.
        let _ = std::fs::rename(&c_path, dir.join(format!("{key}.c")));
    } else {
        let _ = std::fs::remove_file(&c_path);
    }
    let out = out?;
    if !out.status.success() {
        let _ = std::fs::remove_file(&tmp_lib);
        let err = String::from_utf8_lossy(&out.stderr);
        let first: String = err.lines().take(6).collect::<Vec<_>>().join("\n");
        return Err(NativeError::Compile(first));
    }
    let bytes = std::fs::read(&tmp_lib).map_err(io)?;
    let tmp_sum = dir.join(format!("{key}.{unique}.sum"));
    std::fs::write(&tmp_sum, hash_hex(&[&bytes])).map_err(io)?;
    std::fs::rename(&tmp_lib, &lib_path).map_err(io)?;
    std::fs::rename(&tmp_sum, &sum_path).map_err(io)?;
    load(&lib_path)
}

fn unique_counter() -> u64 {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

fn load(path: &Path) -> Result<libloading::Library, NativeError> {
    // SAFETY: the library holds only kernels rendered by render_c (checked
    // by hash against what a compile wrote); it has no initialisers.
    unsafe { libloading::Library::new(path) }.map_err(|e| NativeError::Load(e.to_string()))
}

/// The state of one kernel's native code.
#[derive(Debug, Default)]
pub struct Slot(OnceLock<Option<NativeFn>>);

impl Slot {
    /// The native kernel, once compiled (`None` while compiling, or when
    /// compiling failed).
    pub fn get(&self) -> Option<&NativeFn> {
        self.0.get().and_then(Option::as_ref)
    }

    /// True once compiling finished, successfully or not.
    pub fn settled(&self) -> bool {
        self.0.get().is_some()
    }

    fn set(&self, f: Option<NativeFn>) {
        let _ = self.0.set(f);
    }
}

/// A unit to compile: the source and, per kernel, its name and slot;
/// for a size-generic unit also each kernel's size table (`tables`, in
/// kernel order; empty otherwise).
pub(crate) struct Job {
    pub(crate) source: String,
    pub(crate) kernels: Vec<(String, std::sync::Weak<Slot>)>,
    pub(crate) tables: Vec<Arc<[i64]>>,
}

impl Job {
    /// Compiles and fills the slots (with `None` on failure, after a warning).
    pub(crate) fn run(self) {
        if self.kernels.iter().all(|(_, s)| s.strong_count() == 0) {
            return; // nobody is waiting for it any more
        }
        match compile(&self.source, &self.names()) {
            Ok(fns) => self.fill(fns),
            Err(e) => {
                warn_once(e.kind(), &e.to_string());
                for (_, slot) in &self.kernels {
                    if let Some(s) = slot.upgrade() {
                        s.set(None);
                    }
                }
            }
        }
    }

    fn names(&self) -> Vec<String> {
        self.kernels.iter().map(|(n, _)| n.clone()).collect()
    }

    /// Fills the slots with the unit's kernels (each with its table).
    fn fill(&self, fns: Vec<NativeFn>) {
        for (i, ((_, slot), f)) in self.kernels.iter().zip(fns).enumerate() {
            if let Some(s) = slot.upgrade() {
                s.set(Some(f.with_table(self.tables.get(i).cloned())));
            }
        }
    }

    /// Fills the slots from a unit this process has loaded before (the same
    /// function planned again, or a size-generic unit at new sizes), else
    /// compiles now ([`super::CompileMode::Sync`]), on the background thread
    /// (`Async`) or not at all (`Off`).
    pub(crate) fn start(self, mode: super::CompileMode) {
        if mode == super::CompileMode::Off || self.fill_if_loaded() {
            return;
        }
        match mode {
            super::CompileMode::Sync => self.run(),
            super::CompileMode::Async => submit(self),
            super::CompileMode::Off => {}
        }
    }

    /// Fills the slots now if this process already loaded the unit (see
    /// [`Toolchain::loaded`]); true if it did.
    pub(crate) fn fill_if_loaded(&self) -> bool {
        match Toolchain::from_env().loaded(&self.source, &self.names()) {
            Some(fns) => {
                self.fill(fns);
                true
            }
            None => false,
        }
    }
}

/// Jobs submitted to the background thread and not finished yet.
static PENDING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Waits (up to `timeout`) until the background compile thread has no
/// job left; true if it became idle in time.
pub fn wait_idle(timeout: std::time::Duration) -> bool {
    let start = std::time::Instant::now();
    while PENDING.load(std::sync::atomic::Ordering::Acquire) > 0 {
        if start.elapsed() >= timeout {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    true
}

/// Queues a job on the one background compile thread (so a burst of plans
/// never starts a burst of compilers).
pub(crate) fn submit(job: Job) {
    use std::sync::atomic::Ordering;
    PENDING.fetch_add(1, Ordering::AcqRel);
    static QUEUE: Mutex<Option<std::sync::mpsc::Sender<Job>>> = Mutex::new(None);
    let mut q = QUEUE.lock().unwrap_or_else(|e| e.into_inner());
    if q.is_none() {
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        let spawned = std::thread::Builder::new().name("graft-compile".into()).spawn(move || {
            while let Ok(job) = rx.recv() {
                job.run();
                PENDING.fetch_sub(1, Ordering::AcqRel);
            }
        });
        if spawned.is_err() {
            drop(q);
            job.run(); // no thread: compile here
            PENDING.fetch_sub(1, Ordering::AcqRel);
            return;
        }
        *q = Some(tx);
    }
    if let Some(tx) = q.as_ref() {
        if let Err(e) = tx.send(job) {
            drop(q);
            e.0.run();
            PENDING.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Buffer pointers shared by the tasks of one native group run.
struct Ptrs(Vec<*mut u8>);
// SAFETY: the pointers are only dereferenced by kernels during `run_group`,
// while the tensors they point into are borrowed by it; tasks write
// disjoint point ranges of the written buffers.
unsafe impl Send for Ptrs {}
unsafe impl Sync for Ptrs {}

fn ptr_of(t: &crate::tensor::Tensor) -> *mut u8 {
    use crate::tensor::Storage;
    match t.storage() {
        Storage::F16(v) => v.as_ptr() as *mut u8,
        Storage::F32(v) => v.as_ptr() as *mut u8,
        Storage::F64(v) => v.as_ptr() as *mut u8,
        Storage::I32(v) => v.as_ptr() as *mut u8,
        Storage::I64(v) => v.as_ptr() as *mut u8,
        Storage::U32(v) => v.as_ptr() as *mut u8,
        Storage::Bool(v) => v.as_ptr() as *mut u8,
    }
}

fn ptr_of_mut(t: &mut crate::tensor::Tensor) -> *mut u8 {
    use crate::tensor::Storage;
    match t.storage_mut() {
        Storage::F16(v) => v.as_mut_ptr() as *mut u8,
        Storage::F32(v) => v.as_mut_ptr() as *mut u8,
        Storage::F64(v) => v.as_mut_ptr() as *mut u8,
        Storage::I32(v) => v.as_mut_ptr() as *mut u8,
        Storage::I64(v) => v.as_mut_ptr() as *mut u8,
        Storage::U32(v) => v.as_mut_ptr() as *mut u8,
        Storage::Bool(v) => v.as_mut_ptr() as *mut u8,
    }
}

/// Runs a compiled elementwise kernel over points `0..n`: `reads` are its
/// read arguments in order, `writes` its written ones (each of `n`
/// elements). With `tasks > 1` the range is split into that many
/// contiguous pieces run on rayon's pool (points are independent, so the
/// split never changes results).
///
/// A read given as `Err(k)` is the buffer of `writes[k]` (an output written
/// in place of a dead input, see `exec`'s in-place groups): the kernel
/// reads that argument only at each point's own element and before it
/// stores output `k` (`kernel::in_place_candidates`), so every point reads
/// the input's value before overwriting it.
///
/// The caller checked every buffer against the kernel's arguments (dtype
/// and length, as `exec::fuse` does for the group the kernel came from);
/// `writes` are distinct tensors owned by the caller, so no argument
/// aliases a written one other than as above.
pub(crate) fn run_group(
    f: &NativeFn,
    n: usize,
    reads: &[Result<&crate::tensor::Tensor, usize>],
    writes: &mut [crate::tensor::Tensor],
    tasks: usize,
) {
    let outs: Vec<*mut u8> = writes.iter_mut().map(ptr_of_mut).collect();
    let mut ptrs: Vec<*mut u8> = reads
        .iter()
        .map(|r| match r {
            Ok(t) => ptr_of(t),
            Err(k) => outs[*k],
        })
        .collect();
    ptrs.extend(outs);
    if let Some(t) = &f.table {
        // A size-generic kernel reads its sizes from the argument after
        // its buffers (render_c's Note [Size-generic kernels]).
        ptrs.push(t.as_ptr() as *mut u8);
    }
    let ptrs = Ptrs(ptrs);
    if tasks <= 1 || n < 2 {
        // SAFETY: see the function docs (buffers checked, aliasing only
        // point by point, read before written).
        unsafe { f.call(0, n, &ptrs.0) };
        return;
    }
    let per = n.div_ceil(tasks).next_multiple_of(64);
    use rayon::prelude::*;
    (0..n.div_ceil(per)).into_par_iter().for_each(|t| {
        let p = &ptrs;
        let (a, b) = (t * per, ((t + 1) * per).min(n));
        // SAFETY: as above; tasks write disjoint ranges a..b and an aliased
        // input is read only inside the task's own range.
        unsafe { f.call(a, b, &p.0) };
    });
}

/// Runs a compiled loop (`render_c::render_loop`) for `steps` steps:
/// pointers go in the loop function's argument order (the scan's operands
/// `ins`, its results `outs`, the carry and scratch buffers `work`, the
/// static values).
///
/// The caller (`kernel::loops::NativeLoop::run`) checked `ins` and `outs`
/// against the program's dtypes and lengths for `steps` steps; `work` was
/// allocated from the program's buffer list. Every kernel the loop calls
/// was verified (its loads and stores stay inside the buffers it is bound
/// to), and the planner never binds a buffer as both read and written in
/// one call. `outs` and `work` are distinct tensors owned by the caller.
pub(crate) fn run_program(
    f: &NativeFn,
    steps: usize,
    ins: &[&crate::tensor::Tensor],
    outs: &mut [crate::tensor::Tensor],
    work: &mut [crate::tensor::Tensor],
    statics: &[crate::tensor::Tensor],
    hosts: &[super::host::HostOp],
) -> Result<(), crate::error::ExecError> {
    let cx = super::host::HostCtx::new(hosts);
    let table = cx.table();
    let mut ptrs: Vec<*mut u8> = ins.iter().map(|t| ptr_of(t)).collect();
    ptrs.extend(outs.iter_mut().map(ptr_of_mut));
    ptrs.extend(work.iter_mut().map(ptr_of_mut));
    ptrs.extend(statics.iter().map(ptr_of));
    ptrs.push(&table as *const super::host::HostTable as *mut u8);
    // A size-generic loop (`render_c::render_loop_sized`) takes its table last.
    if let Some(t) = &f.table {
        ptrs.push(t.as_ptr() as *mut u8);
    }
    // SAFETY: see the function docs (buffers checked, none aliased by a
    // write); `table` and `cx` outlive the call.
    unsafe { f.call(0, steps, &ptrs) };
    cx.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::ir::{Access, Arg, Index, Inst, Kernel, Lit};
    use crate::kernel::render_c;
    use crate::ops::binary::Binary;
    use crate::ops::unary::Unary;
    use crate::DType;

    #[test]
    fn cache_sizes_parse_as_sysfs_writes_them() {
        assert_eq!(parse_cache_size("32768K\n"), Some(32 << 20));
        assert_eq!(parse_cache_size("1M"), Some(1 << 20));
        assert_eq!(parse_cache_size("512"), Some(512));
        for bad in ["", "K", "12Q", "0K", "99999999999999999999K"] {
            assert_eq!(parse_cache_size(bad), None, "{bad:?}");
        }
    }

    /// `out = tanh(a * 3 + b) * a` over `n` f32 points.
    fn stream_kernel(n: usize) -> Kernel {
        let rd = Arg { dtype: DType::F32, len: n, access: Access::Read };
        let wr = Arg { dtype: DType::F32, len: n, access: Access::Write };
        let body = vec![
            Inst::Load { arg: 0, index: Index::Point },
            Inst::Load { arg: 1, index: Index::Point },
            Inst::Lit(Lit { dtype: DType::F32, bits: 3.0f32.to_bits() as u64 }),
            Inst::Binary(Binary::Mul, 0, 2),
            Inst::Binary(Binary::Add, 3, 1),
            Inst::Unary(Unary::Tanh, 4),
            Inst::Binary(Binary::Mul, 5, 0),
            Inst::Store { arg: 2, value: 6, index: Index::Point },
        ];
        Kernel { name: "sk".into(), args: vec![rd.clone(), rd, wr], extent: n, body }
    }

    /// Streaming stores write the bits ordinary stores write, at aligned
    /// and misaligned addresses, over whole ranges and pieces of them; so
    /// do the prefetching steps against the same kernel without them.
    #[test]
    fn streaming_stores_and_prefetches_keep_the_bits() {
        if std::env::var_os("GRAFT_SKIP_CC_TESTS").is_some_and(|v| v == "1") {
            eprintln!("skipped: GRAFT_SKIP_CC_TESTS=1 (native-kernel test needs a C compiler)");
            return;
        }
        // 1.2 MB per argument: past the least streamed output size.
        let n = 300_007;
        let k = stream_kernel(n);
        let lanes = host_lanes();
        let plain = render_c::render_unit(std::slice::from_ref(&k), lanes);
        let streaming = render_c::render_unit_streaming(std::slice::from_ref(&k), lanes, Some(1));
        assert!(!plain.contains("gk_stnt_f32"));
        if cfg!(target_arch = "x86_64") {
            assert!(streaming.contains("gk_stnt_f32(a2 + i") && streaming.contains("gk_sfence();"), "{streaming}");
        }
        // Inputs past `PREFETCH_MIN` are prefetched (Note [Prefetching]),
        // the output is not; a small kernel prefetches nothing.
        assert!(plain.contains("__builtin_prefetch(a0 + i + 512);"), "{plain}");
        assert!(plain.contains("__builtin_prefetch(a1 + i + 512);") && !plain.contains("__builtin_prefetch(a2"));
        assert!(!render_c::render_unit(&[stream_kernel(1000)], lanes).contains("__builtin_prefetch"));
        let unfetched = plain.lines().filter(|l| !l.contains("__builtin_prefetch")).collect::<Vec<_>>().join("\n");
        // Below the threshold nothing streams: the text is the plain one.
        assert_eq!(render_c::render_unit_streaming(std::slice::from_ref(&k), lanes, Some(usize::MAX)), plain);
        let dir = tempfile::tempdir().expect("a temporary directory");
        let tc = Toolchain { cc: compiler(), cache: dir.path().to_path_buf() };
        let f_plain = tc.compile(&plain, &["sk".into()]).expect("the plain unit compiles").remove(0);
        let f_stream = tc.compile(&streaming, &["sk".into()]).expect("the streaming unit compiles").remove(0);
        let f_unfetched =
            tc.compile(&unfetched, &["sk".into()]).expect("the unit without prefetches compiles").remove(0);
        let a: Vec<f32> = (0..n).map(|i| ((i * 7919) % 2003) as f32 / 500.0 - 2.0).collect();
        let b: Vec<f32> = (0..n).map(|i| ((i * 104_729) % 1009) as f32 / 300.0 - 1.5).collect();
        let run = |f: &NativeFn, shift: usize, pieces: &[(usize, usize)]| -> Vec<u32> {
            let mut out = vec![0f32; n];
            let m = n - shift;
            // A shift of one element puts every vector off its 16-byte line.
            let ptrs =
                [a[shift..].as_ptr() as *mut u8, b[shift..].as_ptr() as *mut u8, out[shift..].as_mut_ptr() as *mut u8];
            for &(s, e) in pieces {
                assert!(s <= e && e <= m);
                // SAFETY: the kernel reads `a`, `b` and writes `out` at
                // points `s..e` of the shifted slices, all `m` long.
                unsafe { f.call(s, e, &ptrs) };
            }
            out[shift..].iter().map(|x| x.to_bits()).collect()
        };
        for shift in [0, 1] {
            let m = n - shift;
            let want = run(&f_plain, shift, &[(0, m)]);
            assert_eq!(run(&f_stream, shift, &[(0, m)]), want, "shift {shift}");
            assert_eq!(run(&f_stream, shift, &[(0, 3), (3, 1001), (1001, m)]), want, "pieces, shift {shift}");
            assert_eq!(run(&f_unfetched, shift, &[(0, m)]), want, "without prefetches, shift {shift}");
        }
    }
}
