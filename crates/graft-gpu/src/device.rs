//! The device runtime: adapter selection, buffers (pooled), pipelines
//! (cached by shader source), dispatch, explicit transfers.

use crate::GpuError;
use graft_core::kernel::render_wgsl::WgslKernel;
use graft_core::{DType, Tensor, TensorType};
use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, OnceLock};
use wgpu::util::DeviceExt;

/// Usage of every device buffer holding values.
const VALUE_USAGE: wgpu::BufferUsages =
    wgpu::BufferUsages::STORAGE.union(wgpu::BufferUsages::COPY_SRC).union(wgpu::BufferUsages::COPY_DST);

/// An open device: adapter information, the wgpu device and queue, the
/// pipeline cache and the buffer pool.
pub struct Gpu {
    /// The adapter's name, driver and backend, for messages and reports.
    pub info: wgpu::AdapterInfo,
    /// The limits the device was opened with (the adapter's own).
    pub limits: wgpu::Limits,
    device: wgpu::Device,
    queue: wgpu::Queue,
    pipelines: Mutex<HashMap<u64, Arc<wgpu::ComputePipeline>>>,
    pool: Arc<Mutex<Pool>>,
    /// Errors wgpu reported outside an error scope (validation, out of
    /// memory), oldest first; taken by [`Gpu::check`].
    errors: Arc<Mutex<Vec<String>>>,
    /// Set when the device is lost.
    lost: Arc<Mutex<Option<String>>>,
    /// Bytes of value buffers in use or pooled, and the most allowed.
    memory: Arc<Mutex<Memory>>,
}

/// Device memory held by value buffers (in use or pooled), against a
/// budget: `GRAFT_GPU_MAX_MEMORY` (bytes, with K/M/G/T suffixes) or
/// [`Gpu::set_memory_limit`]; unlimited by default, when only the driver
/// decides (its out-of-memory error is caught as well). A budget makes the
/// exhaustion path testable on any adapter, and lets a shared GPU be
/// bounded.
#[derive(Debug, Default)]
struct Memory {
    live: u64,
    limit: Option<u64>,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Gpu({})", self.describe())
    }
}

/// Free device buffers by the thread that released them and their size in
/// bytes. Per thread, because a buffer goes back to the pool when its last
/// handle drops, which may be before the commands that use it are
/// submitted: a run records a whole step sequence in one encoder and
/// submits it at the end. Handed to another thread, the buffer could be
/// written by that thread's commands, submitted in between, and then be
/// overwritten by the first encoder's, under results the other thread has
/// not read back yet (the GPU tests share one device between test threads).
/// One thread records and submits its runs one after another, and the
/// queue runs submissions in order, so reuse on the same thread is ordered.
#[derive(Default)]
struct Pool {
    free: HashMap<(std::thread::ThreadId, u64), Vec<wgpu::Buffer>>,
    /// Bytes held in `free`.
    held: u64,
}

/// Most bytes the pool keeps; buffers beyond it are destroyed when released.
const POOL_MAX_BYTES: u64 = 1 << 30;

/// A device buffer holding one value; back to the pool when dropped.
pub struct DevBuf {
    buf: Option<wgpu::Buffer>,
    /// Bytes (at least 4: WebGPU has no empty bindings).
    pub size: u64,
    pool: Arc<Mutex<Pool>>,
    memory: Arc<Mutex<Memory>>,
}

impl std::fmt::Debug for DevBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DevBuf({} bytes)", self.size)
    }
}

impl DevBuf {
    /// The wgpu buffer.
    pub fn buffer(&self) -> &wgpu::Buffer {
        // Present until drop.
        self.buf.as_ref().unwrap_or_else(|| unreachable!("a DevBuf's buffer is taken only by its drop"))
    }
}

impl Drop for DevBuf {
    fn drop(&mut self) {
        if let Some(b) = self.buf.take() {
            // The pool's lock is released before the budget's is taken
            // (`Gpu::reserve` takes them in the other order).
            let spill = {
                let mut p = self.pool.lock().unwrap_or_else(|e| e.into_inner());
                if p.held + self.size <= POOL_MAX_BYTES {
                    p.held += self.size;
                    p.free.entry((std::thread::current().id(), self.size)).or_default().push(b);
                    None
                } else {
                    Some(b)
                }
            };
            if let Some(b) = spill {
                // Dropped, not `destroy`ed: an encoder not yet submitted may
                // still use it (a run releases a temporary as soon as its
                // last step is recorded), and a destroyed buffer fails that
                // submission; wgpu frees a dropped one once no command uses it.
                drop(b);
                let mut m = self.memory.lock().unwrap_or_else(|e| e.into_inner());
                m.live = m.live.saturating_sub(self.size);
            }
        }
    }
}

/// Bytes of a value of `ty` on the device (4 per element: bool is a u32,
/// f16 its bits in the low half of one).
pub fn device_bytes(ty: &TensorType) -> u64 {
    (ty.numel() as u64 * 4).max(4)
}

/// Why no adapter was found, once per process (the probe is not cheap).
static GLOBAL: OnceLock<Result<Arc<Gpu>, String>> = OnceLock::new();

/// The process's GPU, opened on first use: the first adapter wgpu offers
/// for compute (high performance preferred; a software adapter such as
/// Mesa's lavapipe counts). `Err` says why there is none.
pub fn global() -> Result<Arc<Gpu>, GpuError> {
    GLOBAL
        .get_or_init(|| {
            Gpu::open().map(Arc::new).map_err(|e| match e {
                GpuError::NoAdapter(m) => m,
                other => other.to_string(),
            })
        })
        .clone()
        .map_err(GpuError::NoAdapter)
}

impl Gpu {
    /// Opens the best adapter (see [`global`]); prefer [`global`], which opens one per process.
    pub fn open() -> Result<Gpu, GpuError> {
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
        let opts = wgpu::RequestAdapterOptions {
            power_preference: wgpu::PowerPreference::HighPerformance,
            force_fallback_adapter: false,
            compatible_surface: None,
            ..Default::default()
        };
        let adapter = pollster::block_on(instance.request_adapter(&opts)).map_err(|e| {
            GpuError::NoAdapter(format!(
                "wgpu found no adapter ({e}); on Linux install a Vulkan driver \
                 (for a CPU-only machine: apt-get install mesa-vulkan-drivers libvulkan1)"
            ))
        })?;
        let info = adapter.get_info();
        let limits = adapter.limits();
        let desc = wgpu::DeviceDescriptor {
            label: Some("graft"),
            required_features: wgpu::Features::empty(),
            required_limits: limits.clone(),
            ..Default::default()
        };
        let (device, queue) = pollster::block_on(adapter.request_device(&desc))
            .map_err(|e| GpuError::NoAdapter(format!("adapter {} refused a device: {e}", info.name)))?;
        let errors: Arc<Mutex<Vec<String>>> = Arc::default();
        let sink = errors.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            sink.lock().unwrap_or_else(|p| p.into_inner()).push(e.to_string());
        }));
        let lost: Arc<Mutex<Option<String>>> = Arc::default();
        let lost_sink = lost.clone();
        device.set_device_lost_callback(move |reason, msg| {
            *lost_sink.lock().unwrap_or_else(|p| p.into_inner()) = Some(format!("{reason:?}: {msg}"));
        });
        let limit = match std::env::var("GRAFT_GPU_MAX_MEMORY") {
            Ok(v) if !v.trim().is_empty() => Some(graft_core::memory::parse_bytes(v.trim()).ok_or_else(|| {
                GpuError::Inputs(format!("GRAFT_GPU_MAX_MEMORY={v}: expected a byte count such as 512M or 4G"))
            })?),
            _ => None,
        };
        let memory = Arc::new(Mutex::new(Memory { live: 0, limit }));
        Ok(Gpu { info, limits, device, queue, pipelines: Mutex::default(), pool: Arc::default(), errors, lost, memory })
    }

    /// Bounds the bytes of value buffers this device holds (in use or
    /// pooled; `None`: no bound but the driver's). An allocation past it
    /// fails with [`GpuError::OutOfMemory`]; pooled buffers are freed
    /// first.
    pub fn set_memory_limit(&self, limit: Option<u64>) {
        self.memory.lock().unwrap_or_else(|e| e.into_inner()).limit = limit;
    }

    /// The bound [`Gpu::set_memory_limit`] set, if any (a convolution splits
    /// its batch to keep its im2col matrix a fraction of it).
    pub fn memory_limit(&self) -> Option<u64> {
        self.memory.lock().unwrap_or_else(|e| e.into_inner()).limit
    }

    /// Bytes of value buffers held now (in use or pooled).
    pub fn memory_in_use(&self) -> u64 {
        self.memory.lock().unwrap_or_else(|e| e.into_inner()).live
    }

    /// Takes `size` bytes from the budget, destroying pooled buffers when
    /// that makes room; the error says how much is held and allowed.
    fn reserve(&self, size: u64) -> Result<(), GpuError> {
        let mut m = self.memory.lock().unwrap_or_else(|e| e.into_inner());
        let Some(limit) = m.limit else {
            m.live += size;
            return Ok(());
        };
        if m.live + size > limit {
            // Free the pool (its buffers count as held).
            let mut p = self.pool.lock().unwrap_or_else(|e| e.into_inner());
            for (_, bufs) in p.free.drain() {
                for b in bufs {
                    m.live = m.live.saturating_sub(b.size());
                    // Dropped, not `destroy`ed (see `DevBuf`'s drop): the
                    // caller's own open encoder may still use it.
                    drop(b);
                }
            }
            p.held = 0;
        }
        if m.live + size > limit {
            return Err(GpuError::OutOfMemory(format!(
                "{size} bytes with {} held, beyond the device memory limit of {limit} bytes \
                 (GRAFT_GPU_MAX_MEMORY or Gpu::set_memory_limit)",
                m.live
            )));
        }
        m.live += size;
        Ok(())
    }

    /// Gives `size` reserved bytes back (an allocation that failed).
    fn unreserve(&self, size: u64) {
        let mut m = self.memory.lock().unwrap_or_else(|e| e.into_inner());
        m.live = m.live.saturating_sub(size);
    }

    /// One line naming the adapter: name, backend, driver.
    pub fn describe(&self) -> String {
        let i = &self.info;
        format!("{} ({:?}, {:?}, driver {} {})", i.name, i.backend, i.device_type, i.driver, i.driver_info)
    }

    /// Fails with the first error wgpu reported since the last check, or
    /// if the device was lost; `what` names the work (kernel and primitive).
    pub fn check(&self, what: &str) -> Result<(), GpuError> {
        if let Some(l) = self.lost.lock().unwrap_or_else(|p| p.into_inner()).clone() {
            return Err(GpuError::Lost(l));
        }
        let mut errs = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        if errs.is_empty() {
            return Ok(());
        }
        let first = errs.remove(0);
        errs.clear();
        Err(GpuError::Device { what: what.to_string(), msg: first })
    }

    /// The compute pipeline of a shader, compiled once per source text.
    /// `what` names the kernel and its primitives for error messages.
    pub fn pipeline(&self, source: &str, what: &str) -> Result<Arc<wgpu::ComputePipeline>, GpuError> {
        let mut h = DefaultHasher::new();
        source.hash(&mut h);
        let key = h.finish();
        if let Some(p) = self.pipelines.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return Ok(p.clone());
        }
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let module = self.device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some(what),
            source: wgpu::ShaderSource::Wgsl(source.into()),
        });
        let pipeline = self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(what),
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(GpuError::Shader { what: what.to_string(), msg: e.to_string() });
        }
        let p = Arc::new(pipeline);
        self.pipelines.lock().unwrap_or_else(|e| e.into_inner()).insert(key, p.clone());
        Ok(p)
    }

    /// Number of pipelines compiled so far.
    pub fn pipelines_cached(&self) -> usize {
        self.pipelines.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// A buffer of at least `size` bytes (rounded up to 4), from the pool
    /// when one of that size is free. Its contents are undefined.
    pub fn alloc(&self, size: u64) -> Result<Arc<DevBuf>, GpuError> {
        let size = size.max(4).div_ceil(4) * 4;
        if size > self.limits.max_storage_buffer_binding_size || size > self.limits.max_buffer_size {
            return Err(GpuError::TooLarge {
                bytes: size,
                limit: self.limits.max_storage_buffer_binding_size,
                what: String::new(),
            });
        }
        let reused = {
            let mut p = self.pool.lock().unwrap_or_else(|e| e.into_inner());
            let b = p.free.get_mut(&(std::thread::current().id(), size)).and_then(Vec::pop);
            if b.is_some() {
                p.held -= size;
            }
            b
        };
        let buf = match reused {
            Some(b) => b,
            None => {
                self.reserve(size)?;
                let scope = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
                let b = self.device.create_buffer(&wgpu::BufferDescriptor {
                    label: None,
                    size,
                    usage: VALUE_USAGE,
                    mapped_at_creation: false,
                });
                if let Some(e) = pollster::block_on(scope.pop()) {
                    self.unreserve(size);
                    return Err(GpuError::OutOfMemory(format!("{size} bytes: {e}")));
                }
                b
            }
        };
        Ok(self.wrap(buf, size))
    }

    fn wrap(&self, buf: wgpu::Buffer, size: u64) -> Arc<DevBuf> {
        Arc::new(DevBuf { buf: Some(buf), size, pool: self.pool.clone(), memory: self.memory.clone() })
    }

    /// Uploads a host tensor (f32, i32, u32, bool or f16; bool becomes one u32
    /// per element, 0 or 1, and f16 one u32 holding its bits) into a new
    /// device buffer.
    pub fn upload(&self, t: &Tensor) -> Result<Arc<DevBuf>, GpuError> {
        let bytes: Vec<u8> = match t.storage() {
            graft_core::tensor::Storage::F32(v) => bytemuck::cast_slice(v).to_vec(),
            graft_core::tensor::Storage::I32(v) => bytemuck::cast_slice(v).to_vec(),
            graft_core::tensor::Storage::U32(v) => bytemuck::cast_slice(v).to_vec(),
            graft_core::tensor::Storage::Bool(v) => {
                let u: Vec<u32> = v.iter().map(|&b| b as u32).collect();
                bytemuck::cast_slice(&u).to_vec()
            }
            graft_core::tensor::Storage::F16(v) => {
                let u: Vec<u32> = v.iter().map(|h| h.to_bits() as u32).collect();
                bytemuck::cast_slice(&u).to_vec()
            }
            _ => return Err(GpuError::Dtype(t.dtype())),
        };
        let size = (bytes.len() as u64).max(4).div_ceil(4) * 4;
        if size > self.limits.max_storage_buffer_binding_size {
            return Err(GpuError::TooLarge {
                bytes: size,
                limit: self.limits.max_storage_buffer_binding_size,
                what: String::new(),
            });
        }
        self.reserve(size)?;
        let mut padded = bytes;
        padded.resize(size as usize, 0);
        // A fresh buffer (not the pool's): writes into a pooled buffer would
        // land before commands recorded earlier that still read it.
        let buf = self.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: None,
            contents: &padded,
            usage: VALUE_USAGE,
        });
        Ok(self.wrap(buf, size))
    }

    /// A new command encoder.
    pub fn encoder(&self) -> wgpu::CommandEncoder {
        self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("graft") })
    }

    /// Records one dispatch of `pipeline` with `buffers` bound in order at
    /// group 0 (bindings 0, 1, ...).
    pub fn dispatch(
        &self,
        enc: &mut wgpu::CommandEncoder,
        pipeline: &wgpu::ComputePipeline,
        buffers: &[&wgpu::Buffer],
        workgroups: [u32; 3],
    ) {
        let layout = pipeline.get_bind_group_layout(0);
        let entries: Vec<wgpu::BindGroupEntry> = buffers
            .iter()
            .enumerate()
            .map(|(i, b)| wgpu::BindGroupEntry { binding: i as u32, resource: b.as_entire_binding() })
            .collect();
        let bind = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &layout,
            entries: &entries,
        });
        let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: None, timestamp_writes: None });
        pass.set_pipeline(pipeline);
        pass.set_bind_group(0, &bind, &[]);
        pass.dispatch_workgroups(workgroups[0], workgroups[1], workgroups[2]);
    }

    /// Submits the encoder's commands (without waiting).
    pub fn submit(&self, enc: wgpu::CommandEncoder) {
        self.queue.submit(std::iter::once(enc.finish()));
    }

    /// Maps every staging buffer for reading and waits until each mapping
    /// has answered: `Some(true)` where it succeeded.
    ///
    /// wgpu runs a mapping's callback inside whichever thread's `poll` finds
    /// it ready, so with the device shared between threads another caller's
    /// poll may take our callback and run it a moment after our own poll has
    /// returned. Each answer therefore arrives on a channel, and we poll
    /// again until all have (bounded by [`MAP_TIMEOUT`]).
    fn map_for_reading(&self, staging: &[wgpu::Buffer]) -> Result<Vec<Option<bool>>, GpuError> {
        let (tx, rx) = std::sync::mpsc::channel();
        for (i, s) in staging.iter().enumerate() {
            let tx = tx.clone();
            s.slice(..).map_async(wgpu::MapMode::Read, move |r| {
                // The receiver lives until every answer has come or we gave up.
                let _ = tx.send((i, r.is_ok()));
            });
        }
        drop(tx);
        let mut ok = vec![None; staging.len()];
        let mut pending = staging.len();
        let mut idle_since = None;
        while pending > 0 {
            self.device
                .poll(wgpu::PollType::Wait { submission_index: None, timeout: None })
                .map_err(|e| GpuError::Device { what: "waiting for the device".into(), msg: e.to_string() })?;
            self.check("the commands before a download")?;
            let idle = *idle_since.get_or_insert_with(std::time::Instant::now);
            loop {
                match rx.recv_timeout(std::time::Duration::from_millis(2)) {
                    Ok((i, r)) => {
                        ok[i] = Some(r);
                        pending -= 1;
                        if pending == 0 {
                            break;
                        }
                    }
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => break,
                    // Every callback was dropped unanswered: those mappings failed.
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return Ok(ok),
                }
            }
            if pending > 0 && idle.elapsed() > MAP_TIMEOUT {
                return Err(GpuError::Device {
                    what: "a download".into(),
                    msg: format!("{pending} staging buffer(s) not mapped after {} s", MAP_TIMEOUT.as_secs()),
                });
            }
        }
        Ok(ok)
    }

    /// Submits `enc`, then copies each buffer back into a host tensor of
    /// the given type (one submission and one wait for all of them).
    pub fn download(
        &self,
        mut enc: wgpu::CommandEncoder,
        items: &[(&DevBuf, &TensorType)],
    ) -> Result<Vec<Tensor>, GpuError> {
        let mut staging = Vec::with_capacity(items.len());
        for (b, ty) in items {
            let size = device_bytes(ty);
            let s = self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("graft download"),
                size,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            enc.copy_buffer_to_buffer(b.buffer(), 0, &s, 0, size);
            staging.push(s);
        }
        self.submit(enc);
        let ok = self.map_for_reading(&staging)?;
        let mut out = Vec::with_capacity(items.len());
        for ((s, (_, ty)), ok) in staging.iter().zip(items).zip(ok) {
            if ok != Some(true) {
                return Err(GpuError::Device {
                    what: "a download".into(),
                    msg: "mapping the staging buffer failed".into(),
                });
            }
            let view = s
                .slice(..)
                .get_mapped_range()
                .map_err(|e| GpuError::Device { what: "a download".into(), msg: e.to_string() })?;
            let n = ty.numel();
            let words: &[u8] = &view[..n * 4];
            let t = match ty.dtype {
                DType::F32 => Tensor::from_vec(ty.shape.clone(), bytemuck::pod_collect_to_vec::<u8, f32>(words)),
                DType::I32 => Tensor::from_vec(ty.shape.clone(), bytemuck::pod_collect_to_vec::<u8, i32>(words)),
                DType::U32 => Tensor::from_vec(ty.shape.clone(), bytemuck::pod_collect_to_vec::<u8, u32>(words)),
                DType::Bool => {
                    let u = bytemuck::pod_collect_to_vec::<u8, u32>(words);
                    Tensor::from_vec(ty.shape.clone(), u.into_iter().map(|x| x != 0).collect::<Vec<bool>>())
                }
                DType::F16 => {
                    let u = bytemuck::pod_collect_to_vec::<u8, u32>(words);
                    let h = u
                        .into_iter()
                        .map(|x| graft_core::half::f16::from_bits(x as u16))
                        .collect::<Vec<graft_core::half::f16>>();
                    Tensor::from_vec(ty.shape.clone(), h)
                }
                d => return Err(GpuError::Dtype(d)),
            }
            .map_err(|e| GpuError::Device { what: "a download".into(), msg: e.to_string() })?;
            drop(view);
            s.unmap();
            out.push(t);
        }
        Ok(out)
    }
}

/// How long a download waits for its mappings once the device is idle.
const MAP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// The buffers and dispatch of a rendered kernel, less its arguments:
/// scratch buffers for saved reduction values.
pub fn scratch_buffers(gpu: &Gpu, k: &WgslKernel) -> Result<Vec<Arc<DevBuf>>, GpuError> {
    k.scratch.iter().map(|&(_, n)| gpu.alloc(n as u64 * 4)).collect()
}
