//! Device profiling: the latency of one splittable layer's GPU part, CPU part and the join, as
//! the runtime itself runs them. `tandem profile` (and an on-device tool) measure through this
//! module; the predictors are trained on what it reports.
//!
//! Contracts:
//! - [`LayerBench::gpu`] times output channels `[C − g, C)` of the layer on the GPU alone: the
//!   same [`GpuBackend::enqueue_step`] launch the session makes, followed by the polling
//!   signal kernel, and a CPU spin on the flag (the runtime's polling protocol). Wall-clock from
//!   the enqueue to the flag, so launch cost is included.
//! - [`LayerBench::cpu`] times output channels `[0, c)` on the CPU kernels with a pinned
//!   [`ThreadPool`] of `t` threads.
//! - [`LayerBench::probe_gpu`] and [`LayerBench::probe_cpu`] time the fixed [`probe_layer`]
//!   (placed in the same arena, after the layer, by [`Profiler::layer_with_probe`]) on either
//!   side: a reference whose latency only
//!   changes when the machine's speed does (`tandem profile`'s quiet gate).
//! - [`LayerBench::sync`] times one join: the GPU queue spins in the polling wait kernel, the CPU
//!   stores its flag, the GPU's signal kernel answers and the CPU sees it.
//! - Every measurement runs `warmup` untimed runs first (PoCL compiles a kernel per work-group
//!   size and build options at its first launch), then repetitions until `min_reps` and
//!   `target_ms` of timed work are reached (at most `max_reps`), and reports the median.
//!
//! The one-core-each setting of a 2-core machine: call [`limit_pocl_threads`] before OpenCL
//! initialises, then [`split_cores`] once PoCL's worker thread exists (after a first kernel ran:
//! [`Profiler::open`] does this when asked). Threads inherit their creator's affinity, so pinning
//! the calling thread *before* PoCL starts its workers would put both sides on one core.

use crate::artifact::{Artifact, Kernel, Placement, Step, Storage, TensorDesc};
use crate::cpu::conv::{conv2d, pack_conv_weights, ConvParams};
use crate::cpu::depthwise::{depthwise_conv2d, DepthwiseParams};
use crate::cpu::fully_connected::{fully_connected, FullyConnectedParams};
use crate::cpu::threads::ThreadPool;
use crate::gpu::device::{DeviceInfo, GpuDevice};
use crate::gpu::dispatch::{DepthwiseGrid, Dispatch, GpuOp, Variant};
use crate::gpu::launch::{decide, ArenaMem, GpuBackend};
use crate::gpu::layout::gpu_constants;
use crate::gpu::memory::{Arena, Flags, ABORT, CPU_DONE, GPU_DONE};
use crate::gpu::GpuError;
use crate::rng::Rng;
use crate::sync::spin_until;
use crate::DType;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// A layer the profiler measures: the three kinds tandem splits by output channel.
#[derive(Debug, Clone, PartialEq)]
pub enum LayerOp {
    Conv(ConvParams),
    Depthwise(DepthwiseParams),
    Linear(FullyConnectedParams),
}

impl LayerOp {
    /// The splittable layer of an artifact step, if it is one.
    pub fn from_kernel(kernel: &Kernel) -> Option<LayerOp> {
        match kernel {
            Kernel::Conv2d(p) => Some(LayerOp::Conv(p.clone())),
            Kernel::DepthwiseConv2d(p) => Some(LayerOp::Depthwise(p.clone())),
            Kernel::FullyConnected(p) => Some(LayerOp::Linear(p.clone())),
            _ => None,
        }
    }

    /// The artifact kernel.
    pub fn kernel(&self) -> Kernel {
        match self {
            LayerOp::Conv(p) => Kernel::Conv2d(p.clone()),
            LayerOp::Depthwise(p) => Kernel::DepthwiseConv2d(p.clone()),
            LayerOp::Linear(p) => Kernel::FullyConnected(p.clone()),
        }
    }

    /// The op as the dispatcher sees it.
    pub fn gpu_op(&self) -> GpuOp<'_> {
        match self {
            LayerOp::Conv(p) => GpuOp::Conv(p),
            LayerOp::Depthwise(p) => GpuOp::Depthwise(p),
            LayerOp::Linear(p) => GpuOp::FullyConnected(p),
        }
    }

    /// Output channels (units of a linear layer): what a split divides.
    pub fn channels(&self) -> usize {
        match self {
            LayerOp::Conv(p) => p.output[3],
            LayerOp::Depthwise(p) => p.output[3],
            LayerOp::Linear(p) => p.units,
        }
    }

    /// Short kind name: `conv`, `gconv` (a convolution with groups), `dwconv` or `linear`.
    pub fn kind(&self) -> &'static str {
        match self {
            LayerOp::Conv(p) if p.groups > 1 => "gconv",
            LayerOp::Conv(_) => "conv",
            LayerOp::Depthwise(_) => "dwconv",
            LayerOp::Linear(_) => "linear",
        }
    }

    fn input_shape(&self) -> Vec<usize> {
        match self {
            LayerOp::Conv(p) => p.input.to_vec(),
            LayerOp::Depthwise(p) => p.input.to_vec(),
            LayerOp::Linear(p) => vec![p.rows, p.depth],
        }
    }

    fn output_shape(&self) -> Vec<usize> {
        match self {
            LayerOp::Conv(p) => p.output.to_vec(),
            LayerOp::Depthwise(p) => p.output.to_vec(),
            LayerOp::Linear(p) => vec![p.rows, p.units],
        }
    }

    /// TFLite-layout weight count.
    fn weight_len(&self) -> usize {
        match self {
            LayerOp::Conv(p) => p.output[3] * p.depth(),
            LayerOp::Depthwise(p) => p.kernel[0] * p.kernel[1] * p.output[3],
            LayerOp::Linear(p) => p.units * p.depth,
        }
    }
}

/// How long to measure each point.
#[derive(Debug, Clone, Copy)]
pub struct MeasureOptions {
    pub warmup: usize,
    pub min_reps: usize,
    pub max_reps: usize,
    /// Timed work per point to aim for, in milliseconds.
    pub target_ms: f64,
    /// Longest a single run may take before the measurement fails.
    pub deadline: Duration,
    /// Time a GPU part from an idle queue (enqueue, the OpenCL runtime's wake-up, the part, the
    /// signal), as tandem 0.1's profiles before the AMD EPYC one were measured, instead of from
    /// an awake queue spinning in a wait kernel as in a session (the default).
    pub gpu_from_idle: bool,
}

impl Default for MeasureOptions {
    fn default() -> Self {
        MeasureOptions {
            warmup: 2,
            min_reps: 7,
            max_reps: 41,
            target_ms: 60.0,
            deadline: Duration::from_secs(20),
            gpu_from_idle: false,
        }
    }
}

/// The median of a measurement and how many repetitions it took.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    pub median_ms: f64,
    /// The fastest repetition: on a shared machine, whose slow phases only ever add time, the
    /// most reproducible of the two (see `docs/predictors.md`, "Latency statistic").
    pub least_ms: f64,
    pub reps: usize,
}

/// Runs `once` (which returns the milliseconds of one run) as `options` say; the median and
/// the least of the repetitions.
fn measure<E>(
    options: &MeasureOptions,
    mut once: impl FnMut() -> Result<f64, E>,
) -> Result<Timing, E> {
    for _ in 0..options.warmup {
        once()?;
    }
    let mut times = Vec::with_capacity(options.min_reps);
    let mut total = 0.0;
    while times.len() < options.max_reps.max(1)
        && (times.len() < options.min_reps.max(1) || total < options.target_ms)
    {
        let t = once()?;
        total += t;
        times.push(t);
    }
    // The loop above times at least one repetition.
    Ok(Timing {
        least_ms: times.iter().copied().fold(f64::INFINITY, f64::min),
        median_ms: median(&mut times),
        reps: times.len(),
    })
}

/// The median of `v` (the mean of the two middle values for an even count); 0 when empty.
pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Limits PoCL to one worker thread (`POCL_MAX_PTHREAD_COUNT=1`).
///
/// # Safety
/// Must be called before any other thread exists and before OpenCL initialises (it sets an
/// environment variable).
pub unsafe fn limit_pocl_threads() {
    // SAFETY: the caller guarantees no other thread reads the environment concurrently.
    unsafe { std::env::set_var("POCL_MAX_PTHREAD_COUNT", "1") };
}

/// Puts the calling thread (the CPU side) on core 0 and every other thread of the process
/// (PoCL's workers, which exist once a kernel has run) on core 1. Returns how many other
/// threads were moved. Threads created later inherit the creator's affinity (core 0 for threads
/// this thread spawns); [`ThreadPool`] pins its own workers.
pub fn split_cores() -> usize {
    let me = std::process::id() as i32;
    // SAFETY: plain syscalls on thread ids of this process with initialised cpu sets.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) } as i32;
    let pin = |thread: i32, core: usize| unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core, &mut set);
        libc::sched_setaffinity(thread, size_of::<libc::cpu_set_t>(), &set) == 0
    };
    pin(tid, 0);
    let mut moved = 0;
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{me}/task")) {
        for t in tasks.flatten() {
            if let Some(other) = t.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) {
                if other != tid && pin(other, 1) {
                    moved += 1;
                }
            }
        }
    }
    moved
}

/// Runs the calling thread under `SCHED_FIFO` at `priority` (1–99); threads it creates later
/// (PoCL's workers, the CPU thread pool) inherit the policy. On a machine where other
/// processes compete for the cores, this keeps the measured threads from being preempted (each
/// preemption costs a scheduler tick, 4 ms, and makes GPU latencies come out in steps of it).
/// Linux throttles real-time threads to 95% of each second, so others still progress.
pub fn realtime(priority: i32) -> Result<(), String> {
    // SAFETY: a plain syscall on the calling thread with an initialised parameter.
    let r = unsafe {
        let param = libc::sched_param {
            sched_priority: priority,
        };
        libc::sched_setscheduler(0, libc::SCHED_FIFO, &param)
    };
    if r == 0 {
        Ok(())
    } else {
        Err(format!(
            "cannot switch to SCHED_FIFO priority {priority}: {} (needs CAP_SYS_NICE)",
            std::io::Error::last_os_error()
        ))
    }
}

/// The CPU model name (`/proc/cpuinfo`), or `unknown cpu`.
pub fn cpu_description() -> String {
    let name = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|v| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown cpu".to_string());
    // Counted from /proc/cpuinfo: the affinity mask may be narrowed by `split_cores`.
    let cores = std::fs::read_to_string("/proc/cpuinfo")
        .map(|s| s.lines().filter(|l| l.starts_with("processor")).count())
        .unwrap_or(0);
    format!("{name} ({cores} cores)")
}

/// This machine's processor as the kernel reports it, telling hosts apart that share a model
/// name (KVM often shows only `AMD EPYC`): `AuthenticAMD family 25 model 17 stepping 1`, from
/// the first processor's `vendor_id`, `cpu family`, `model` and `stepping` in `/proc/cpuinfo`.
/// `None` where that file or one of the four fields is missing.
pub fn host_signature() -> Option<String> {
    let text = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    host_signature_of(&text)
}

/// [`host_signature`] of a `/proc/cpuinfo` text.
pub fn host_signature_of(cpuinfo: &str) -> Option<String> {
    let first = cpuinfo.split("\n\n").next()?;
    let field = |key: &str| {
        first.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == key).then(|| v.trim().to_string())
        })
    };
    Some(format!(
        "{} family {} model {} stepping {}",
        field("vendor_id")?,
        field("cpu family")?,
        field("model")?,
        field("stepping")?
    ))
}

/// The device and state shared by every measured layer.
pub struct Profiler {
    backend: Option<GpuBackend>,
    info: DeviceInfo,
    flags: Flags,
    pools: HashMap<usize, ThreadPool>,
    epoch: i32,
}

impl Profiler {
    /// Opens the OpenCL device. With `split`, runs a first kernel (so that PoCL's workers exist)
    /// and then applies [`split_cores`]. Fails when there is no device or it lacks fine-grained
    /// SVM with atomics (the polling protocol the runtime uses).
    pub fn open(split: bool) -> Result<Profiler, GpuError> {
        let dev = GpuDevice::open()?;
        let info = dev.info.clone();
        if !info.has_fine_svm() {
            return Err(GpuError::Mismatch(format!(
                "{} has no fine-grained SVM with atomics; the profiler measures the polling \
                 protocol and needs it",
                info.label()
            )));
        }
        let flags = Flags::new(&dev.context)?;
        let empty = Artifact {
            producer: "tandem profile".into(),
            model: "none".into(),
            tensors: vec![],
            weights: vec![],
            weights_len: 0,
            arena_bytes: 0,
            inputs: vec![],
            outputs: vec![],
            steps: vec![],
            threads: 1,
            gpu: Some(info.clone()),
        };
        let backend = GpuBackend::new(dev, &empty)?;
        let mut p = Profiler {
            backend: Some(backend),
            info,
            flags,
            pools: HashMap::new(),
            epoch: 0,
        };
        // A first kernel: PoCL starts its worker threads.
        p.sync(&MeasureOptions {
            warmup: 1,
            min_reps: 1,
            max_reps: 1,
            target_ms: 0.0,
            deadline: Duration::from_secs(30),
            gpu_from_idle: false,
        })?;
        if split {
            split_cores();
        }
        Ok(p)
    }

    /// The OpenCL device's description.
    pub fn device(&self) -> &DeviceInfo {
        &self.info
    }

    fn next_epoch(&mut self) -> i32 {
        self.epoch += 1;
        self.epoch
    }

    /// One join of the polling protocol (see the module docs); the median in milliseconds.
    pub fn sync(&mut self, options: &MeasureOptions) -> Result<Timing, GpuError> {
        measure(options, || {
            let e = self.next_epoch();
            let deadline = options.deadline;
            let flags = &self.flags;
            let backend = self
                .backend
                .as_mut()
                .ok_or_else(|| GpuError::Device("the profiler lost its device".into()))?;
            backend.wait(flags, CPU_DONE, e, i32::MAX)?;
            backend.signal(flags, GPU_DONE, e)?;
            flush(backend)?;
            // Give the queue time to reach its wait kernel, as it has in a split step whose
            // GPU part runs while the CPU computes.
            let settle = Instant::now();
            while settle.elapsed() < Duration::from_micros(300) {
                std::hint::spin_loop();
            }
            let start = Instant::now();
            flags.word(CPU_DONE).store(e, Ordering::Release);
            await_gpu(flags, e, deadline, "the GPU's signal after a join")?;
            Ok(start.elapsed().as_secs_f64() * 1e3)
        })
    }

    /// How the depthwise parts measured from now on order their grid: by size (the runtime's
    /// choice, the default) or one order for every part, for `cargo xtask bench dwgrid`. The
    /// dispatch [`LayerBench::gpu`] returns is the by-size one either way.
    pub fn set_depthwise_grid(&mut self, grid: DepthwiseGrid) {
        if let Some(backend) = self.backend.as_mut() {
            backend.depthwise_grid = grid;
        }
    }

    /// Prepares `op` for measurement: random weights and input (from `seed`), the CPU weights,
    /// and the GPU weights of every kernel variant the GPU channel counts `gpu_counts` dispatch
    /// to (uploaded once).
    pub fn layer(
        &mut self,
        op: &LayerOp,
        gpu_counts: &[usize],
        seed: u64,
    ) -> Result<LayerBench<'_>, GpuError> {
        self.prepare(op, gpu_counts, seed, false)
    }

    /// [`Profiler::layer`], and the fixed [`probe_layer`] placed after the layer in the same
    /// arena, for [`LayerBench::probe_gpu`] and [`LayerBench::probe_cpu`].
    pub fn layer_with_probe(
        &mut self,
        op: &LayerOp,
        gpu_counts: &[usize],
        seed: u64,
    ) -> Result<LayerBench<'_>, GpuError> {
        self.prepare(op, gpu_counts, seed, true)
    }

    fn prepare(
        &mut self,
        op: &LayerOp,
        gpu_counts: &[usize],
        seed: u64,
        with_probe: bool,
    ) -> Result<LayerBench<'_>, GpuError> {
        let mut rng = Rng::new(seed);
        let mut layout = Layout::default();
        let main = layout.add(op, gpu_counts, &mut rng, &self.info)?;
        let probe = if with_probe {
            let probe_op = probe_layer();
            Some(layout.add(&probe_op, &[probe_op.channels()], &mut rng, &self.info)?)
        } else {
            None
        };
        let Layout {
            tensors,
            steps,
            gpu_weights,
            arena_bytes,
            inputs,
        } = layout;
        let artifact = Artifact {
            producer: "tandem profile".into(),
            model: format!("one {}", op.kind()),
            tensors,
            weights_len: gpu_weights.len(),
            weights: gpu_weights,
            arena_bytes,
            inputs: vec![0],
            outputs: vec![1],
            steps,
            threads: 1,
            gpu: Some(self.info.clone()),
        };
        let old = self
            .backend
            .take()
            .ok_or_else(|| GpuError::Device("the profiler lost its device".into()))?;
        let GpuBackend {
            dev,
            programs,
            depthwise_grid,
            ..
        } = old;
        let mut arena = Arena::svm(&dev.context, arena_bytes.max(64))?;
        let mut backend = GpuBackend::new(dev, &artifact)?;
        backend.programs = programs;
        backend.depthwise_grid = depthwise_grid;
        self.backend = Some(backend);
        for (offset, values) in inputs {
            arena.slice(offset, values.len()).copy_from_slice(&values);
        }
        Ok(LayerBench {
            profiler: self,
            artifact,
            arena,
            main,
            probe,
        })
    }

    fn pool(&mut self, threads: usize) -> &ThreadPool {
        self.pools
            .entry(threads)
            .or_insert_with(|| ThreadPool::new(threads))
    }
}

/// The fixed reference layer every [`LayerBench`] carries: a 3x3 depthwise convolution of 256
/// channels on 40x40 (3.3 MB of activations: past the core's L2, so that it feels the shared
/// cache and memory traffic as well as the core's own speed; a fraction of a millisecond on
/// either side here). Its latency only moves when the machine does (another tenant on the
/// core's sibling hyperthread, on the shared cache or the memory bus), so `tandem profile`
/// uses it to tell quiet phases from slow ones.
pub fn probe_layer() -> LayerOp {
    LayerOp::Depthwise(DepthwiseParams {
        input: [1, 40, 40, 256],
        output: [1, 40, 40, 256],
        kernel: [3, 3],
        stride: [1, 1],
        dilation: [1, 1],
        pad: [1, 1],
        multiplier: 1,
        activation: crate::cpu::Activation::None,
    })
}

/// One layer's place in a bench: arena offsets (in floats), CPU weights and the artifact step
/// of each GPU variant.
struct Placed {
    op: LayerOp,
    in_offset: usize,
    out_offset: usize,
    cpu_weights: Vec<f32>,
    bias: Vec<f32>,
    by_variant: HashMap<Variant, usize>,
}

/// The artifact and arena contents of a bench, built one layer at a time.
#[derive(Default)]
struct Layout {
    tensors: Vec<TensorDesc>,
    steps: Vec<Step>,
    gpu_weights: Vec<f32>,
    arena_bytes: usize,
    /// Arena contents: (offset in floats, values).
    inputs: Vec<(usize, Vec<f32>)>,
}

impl Layout {
    /// Places `op`: its input and output in the arena (64-byte aligned, after what is there),
    /// random weights, bias and input, and the GPU constants of each variant `gpu_counts`
    /// dispatch to.
    fn add(
        &mut self,
        op: &LayerOp,
        gpu_counts: &[usize],
        rng: &mut Rng,
        info: &DeviceInfo,
    ) -> Result<Placed, GpuError> {
        let c = op.channels();
        let weights = rng.uniform(op.weight_len(), 0.1);
        let bias = rng.uniform(c, 0.1);
        let kernel = op.kernel();
        let cpu_weights = match op {
            LayerOp::Conv(p) => pack_conv_weights(&weights, p),
            _ => weights.clone(),
        };
        let in_shape = op.input_shape();
        let out_shape = op.output_shape();
        let in_offset = self.arena_bytes;
        let in_bytes = in_shape.iter().product::<usize>() * 4;
        let out_offset = in_offset + in_bytes.div_ceil(64) * 64;
        let out_bytes = out_shape.iter().product::<usize>() * 4;
        self.arena_bytes = out_offset + out_bytes.div_ceil(64) * 64;
        let input_tensor = self.tensors.len();
        self.tensors.push(TensorDesc {
            name: format!("{} input", op.kind()),
            dtype: DType::F32,
            shape: in_shape.clone(),
            storage: Storage::Arena { offset: in_offset },
        });
        let output_tensor = self.tensors.len();
        self.tensors.push(TensorDesc {
            name: format!("{} output", op.kind()),
            dtype: DType::F32,
            shape: out_shape,
            storage: Storage::Arena { offset: out_offset },
        });
        let mut by_variant: HashMap<Variant, usize> = HashMap::new();
        for &g in gpu_counts {
            let g = g.min(c);
            if g == 0 {
                continue;
            }
            let variant = decide(&kernel, c - g..c, info).variant;
            if by_variant.contains_key(&variant) {
                continue;
            }
            let (w, b) = gpu_constants(&kernel, variant, &weights, Some(&bias))
                .ok_or_else(|| GpuError::Mismatch(format!("{} has no GPU weights", op.kind())))?;
            let mut constant = |values: &[f32], what: &str| {
                let offset = self.gpu_weights.len().div_ceil(16) * 16;
                self.gpu_weights.resize(offset, 0.0);
                self.gpu_weights.extend_from_slice(values);
                self.tensors.push(TensorDesc {
                    name: format!("{what} ({})", variant.name()),
                    dtype: DType::F32,
                    shape: vec![values.len()],
                    storage: Storage::Constant { offset },
                });
                self.tensors.len() - 1
            };
            let wt = constant(&w, "weights");
            let bt = b.map(|b| constant(&b, "bias"));
            by_variant.insert(variant, self.steps.len());
            self.steps.push(Step {
                name: format!("{} {}", op.kind(), variant.name()),
                kernel: kernel.clone(),
                inputs: vec![Some(input_tensor)],
                outputs: vec![output_tensor],
                placement: if g == c {
                    Placement::Gpu
                } else {
                    Placement::Split { gpu_channels: g }
                },
                gpu_operands: vec![Some(input_tensor), Some(wt), bt],
            });
        }
        let input = rng.uniform(in_shape.iter().product(), 1.0);
        self.inputs.push((in_offset / 4, input));
        Ok(Placed {
            op: op.clone(),
            in_offset: in_offset / 4,
            out_offset: out_offset / 4,
            cpu_weights,
            bias,
            by_variant,
        })
    }
}

/// Queues one GPU part as a session's queue holds it — a signal of `ready`, a wait kernel
/// polling the CPU's flag for `ready`, the part's kernels (channels `range` of artifact step
/// `step`) and a signal of `done` — and returns once the queue spins in the wait kernel: the
/// part starts when the CPU stores `ready` in its flag.
fn arm_part(
    profiler: &mut Profiler,
    artifact: &Artifact,
    step: usize,
    range: std::ops::Range<usize>,
    arena: ArenaMem,
    [ready, done]: [i32; 2],
    deadline: Duration,
) -> Result<(), GpuError> {
    let flags = &profiler.flags;
    let backend = profiler
        .backend
        .as_mut()
        .ok_or_else(|| GpuError::Device("the profiler lost its device".into()))?;
    backend.signal(flags, GPU_DONE, ready)?;
    backend.wait(flags, CPU_DONE, ready, i32::MAX)?;
    backend.enqueue_step(artifact, &artifact.steps[step], range, arena)?;
    backend.signal(flags, GPU_DONE, done)?;
    flush(backend)?;
    await_gpu(
        flags,
        ready,
        deadline,
        "the GPU queue reaching a profiled part",
    )
}

/// Runs output channels `[0, c)` of a placed layer on the CPU kernels with `pool`.
fn run_cpu_part(arena: &mut Arena, layer: &Placed, c: usize, pool: &ThreadPool) {
    let op = &layer.op;
    let c = c.min(op.channels());
    let in_len: usize = op.input_shape().iter().product();
    let out_len: usize = op.output_shape().iter().product();
    let base = arena.ptr();
    // SAFETY: a placed layer's input [in_offset, in_offset + in_len) and output
    // [out_offset, out_offset + out_len) are disjoint ranges of the arena (the output starts
    // past the input, 64-byte aligned); `arena` is borrowed mutably for the call.
    let (input, out) = unsafe {
        (
            std::slice::from_raw_parts(base.add(layer.in_offset), in_len),
            std::slice::from_raw_parts_mut(base.add(layer.out_offset), out_len),
        )
    };
    let (w, b) = (&layer.cpu_weights, Some(layer.bias.as_slice()));
    match op {
        LayerOp::Conv(p) => conv2d(input, w, b, out, p, 0, c, pool),
        LayerOp::Depthwise(p) => depthwise_conv2d(input, w, b, out, p, 0, c, pool),
        LayerOp::Linear(p) => fully_connected(input, w, b, out, p, 0, c, pool),
    }
}

fn deadline_error(deadline: Duration, waiting: &str) -> GpuError {
    GpuError::Deadline {
        deadline_ms: deadline.as_millis() as u64,
        waiting: waiting.into(),
    }
}

fn no_probe() -> GpuError {
    GpuError::Mismatch(
        "this bench was prepared without the probe layer (use Profiler::layer_with_probe)".into(),
    )
}

/// Flushes the backend's queue, so that what was enqueued starts.
fn flush(backend: &GpuBackend) -> Result<(), GpuError> {
    backend
        .dev
        .queue
        .flush()
        .map_err(|err| GpuError::Device(format!("flushing the queue: {err}")))
}

/// Spins until the GPU's flag reaches `epoch`; past `deadline`, an error that names `what`.
fn await_gpu(flags: &Flags, epoch: i32, deadline: Duration, what: &str) -> Result<(), GpuError> {
    spin_until(
        flags.word(GPU_DONE),
        epoch,
        flags.word(ABORT),
        Instant::now() + deadline,
    )
    .map_err(|_| deadline_error(deadline, what))
}

/// How the probe is timed: short, so that probing before and after each round costs little
/// next to the round.
pub const PROBE_OPTIONS: MeasureOptions = MeasureOptions {
    warmup: 1,
    min_reps: 3,
    max_reps: 5,
    target_ms: 1.0,
    deadline: Duration::from_secs(20),
    gpu_from_idle: false,
};

/// One layer ready to be timed (see [`Profiler::layer`]).
pub struct LayerBench<'p> {
    profiler: &'p mut Profiler,
    artifact: Artifact,
    arena: Arena,
    main: Placed,
    /// The [`probe_layer`], when prepared with [`Profiler::layer_with_probe`].
    probe: Option<Placed>,
}

impl LayerBench<'_> {
    /// Times output channels `[C − g, C)` on the GPU; returns the dispatch decision with it.
    /// `g` must be one of the counts given to [`Profiler::layer`] (or dispatch to a variant one
    /// of them did).
    pub fn gpu(
        &mut self,
        g: usize,
        options: &MeasureOptions,
    ) -> Result<(Dispatch, Timing), GpuError> {
        Self::time_gpu(
            self.profiler,
            &self.artifact,
            &mut self.arena,
            &self.main,
            g,
            options,
        )
    }

    /// [`Profiler::set_depthwise_grid`] between measurements of this layer.
    pub fn set_depthwise_grid(&mut self, grid: DepthwiseGrid) {
        self.profiler.set_depthwise_grid(grid);
    }

    /// Times output channels `[0, c)` on the CPU with `threads` threads.
    pub fn cpu(&mut self, c: usize, threads: usize, options: &MeasureOptions) -> Timing {
        Self::time_cpu(
            self.profiler,
            &mut self.arena,
            &self.main,
            c,
            threads,
            options,
        )
    }

    /// The GPU time of the whole [`probe_layer`] (ms), measured with [`PROBE_OPTIONS`]; an
    /// error for a bench prepared without it.
    pub fn probe_gpu(&mut self) -> Result<f64, GpuError> {
        let probe = self.probe.as_ref().ok_or_else(no_probe)?;
        let c = probe.op.channels();
        Self::time_gpu(
            self.profiler,
            &self.artifact,
            &mut self.arena,
            probe,
            c,
            &PROBE_OPTIONS,
        )
        .map(|(_, t)| t.median_ms)
    }

    /// The CPU time of the whole [`probe_layer`] on one thread (ms), with [`PROBE_OPTIONS`];
    /// an error for a bench prepared without it.
    pub fn probe_cpu(&mut self) -> Result<f64, GpuError> {
        let probe = self.probe.as_ref().ok_or_else(no_probe)?;
        let c = probe.op.channels();
        Ok(Self::time_cpu(self.profiler, &mut self.arena, probe, c, 1, &PROBE_OPTIONS).median_ms)
    }

    fn time_gpu(
        profiler: &mut Profiler,
        artifact: &Artifact,
        arena: &mut Arena,
        layer: &Placed,
        g: usize,
        options: &MeasureOptions,
    ) -> Result<(Dispatch, Timing), GpuError> {
        let c = layer.op.channels();
        let range = c - g.min(c)..c;
        let kernel = layer.op.kernel();
        let d = decide(&kernel, range.clone(), &profiler.info);
        let step = *layer.by_variant.get(&d.variant).ok_or_else(|| {
            GpuError::Mismatch(format!(
                "{} GPU channels dispatch to {}, which this layer was not prepared for",
                g,
                d.variant.name()
            ))
        })?;
        let arena = ArenaMem::Svm(arena.ptr().cast());
        // As in a session, the GPU part starts from a queue that is already awake and spinning
        // in a wait kernel, with the part's kernels queued behind it: the time runs from the
        // CPU's flag to the GPU's signal after the part. (Timed from an idle queue instead, a
        // part also pays the OpenCL runtime's wake-up, which on some hosts varies by tens of µs
        // from one phase to the next.)
        if options.gpu_from_idle {
            return Self::time_gpu_from_idle(profiler, artifact, arena, step, range, options)
                .map(|t| (d, t));
        }
        let timing = measure(options, || {
            let (ready, done) = (profiler.next_epoch(), profiler.next_epoch());
            let deadline = options.deadline;
            arm_part(
                profiler,
                artifact,
                step,
                range.clone(),
                arena,
                [ready, done],
                deadline,
            )?;
            let flags = &profiler.flags;
            let start = Instant::now();
            flags.word(CPU_DONE).store(ready, Ordering::Release);
            await_gpu(flags, done, deadline, "the GPU part of a profiled layer")?;
            Ok(start.elapsed().as_secs_f64() * 1e3)
        })?;
        Ok((d, timing))
    }

    /// [`MeasureOptions::gpu_from_idle`]: the GPU part timed from its enqueue on an idle queue.
    fn time_gpu_from_idle(
        profiler: &mut Profiler,
        artifact: &Artifact,
        arena: ArenaMem,
        step: usize,
        range: std::ops::Range<usize>,
        options: &MeasureOptions,
    ) -> Result<Timing, GpuError> {
        measure(options, || {
            let e = profiler.next_epoch();
            let deadline = options.deadline;
            let start = Instant::now();
            let flags = &profiler.flags;
            let backend = profiler
                .backend
                .as_mut()
                .ok_or_else(|| GpuError::Device("the profiler lost its device".into()))?;
            backend.enqueue_step(artifact, &artifact.steps[step], range.clone(), arena)?;
            backend.signal(flags, GPU_DONE, e)?;
            flush(backend)?;
            await_gpu(flags, e, deadline, "the GPU part of a profiled layer")?;
            Ok(start.elapsed().as_secs_f64() * 1e3)
        })
    }

    fn time_cpu(
        profiler: &mut Profiler,
        arena: &mut Arena,
        layer: &Placed,
        c: usize,
        threads: usize,
        options: &MeasureOptions,
    ) -> Timing {
        let pool = profiler.pool(threads);
        let r: Result<Timing, std::convert::Infallible> = measure(options, || {
            let start = Instant::now();
            run_cpu_part(arena, layer, c, pool);
            Ok(start.elapsed().as_secs_f64() * 1e3)
        });
        match r {
            Ok(t) => t,
            Err(never) => match never {},
        }
    }

    /// Times the layer split as a session runs a split step: output channels `[C − g, C)` on
    /// the GPU and `[0, C − g)` on the CPU with `threads` threads at the same time. The clock
    /// runs from the CPU's flag that releases the awake GPU queue (as in [`LayerBench::gpu`])
    /// to the GPU's signal after its part, seen once the CPU has finished its own: the two
    /// parts side by side, sharing the caches and the memory bus, and the join. `0 < g < C`;
    /// `g` as in [`LayerBench::gpu`].
    pub fn split(
        &mut self,
        g: usize,
        threads: usize,
        options: &MeasureOptions,
    ) -> Result<Timing, GpuError> {
        let c = self.main.op.channels();
        if g == 0 || g >= c {
            return Err(GpuError::Mismatch(format!(
                "a split of {c} channels needs 0 < GPU channels < {c}, not {g}"
            )));
        }
        let range = c - g..c;
        let step = self.main_step(g)?;
        let (profiler, artifact, layer) = (&mut *self.profiler, &self.artifact, &self.main);
        let gpu_arena = ArenaMem::Svm(self.arena.ptr().cast());
        let arena = &mut self.arena;
        profiler.pool(threads);
        measure(options, || {
            let (ready, done) = (profiler.next_epoch(), profiler.next_epoch());
            let deadline = options.deadline;
            arm_part(
                profiler,
                artifact,
                step,
                range.clone(),
                gpu_arena,
                [ready, done],
                deadline,
            )?;
            let flags = &profiler.flags;
            let pool = &profiler.pools[&threads];
            let start = Instant::now();
            flags.word(CPU_DONE).store(ready, Ordering::Release);
            run_cpu_part(arena, layer, c - g, pool);
            await_gpu(flags, done, deadline, "the GPU part of a split layer")?;
            Ok(start.elapsed().as_secs_f64() * 1e3)
        })
    }

    /// The main layer's output in the arena, as the last timed run left it (for checks: fill
    /// it, time a part, and see which channels the part wrote).
    pub fn output(&mut self) -> &mut [f32] {
        let len: usize = self.main.op.output_shape().iter().product();
        self.arena.slice(self.main.out_offset, len)
    }

    /// The step of the main layer's GPU variant for `g` GPU channels.
    fn main_step(&self, g: usize) -> Result<usize, GpuError> {
        let c = self.main.op.channels();
        let d = decide(&self.main.op.kernel(), c - g.min(c)..c, &self.profiler.info);
        self.main
            .by_variant
            .get(&d.variant)
            .copied()
            .ok_or_else(|| {
                GpuError::Mismatch(format!(
                    "{} GPU channels dispatch to {}, which this layer was not prepared for",
                    g,
                    d.variant.name()
                ))
            })
    }

    /// One join of the polling protocol ([`Profiler::sync`]).
    pub fn sync(&mut self, options: &MeasureOptions) -> Result<Timing, GpuError> {
        self.profiler.sync(options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_signature_reads_the_first_processor() {
        let two = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\n\
                   model\t\t: 17\nmodel name\t: AMD EPYC\nstepping\t: 1\n\n\
                   processor\t: 1\nvendor_id\t: GenuineIntel\ncpu family\t: 6\n\
                   model\t\t: 85\nstepping\t: 7\n";
        assert_eq!(
            host_signature_of(two).as_deref(),
            Some("AuthenticAMD family 25 model 17 stepping 1")
        );
        // A field missing (an ARM kernel names other fields): no signature.
        assert_eq!(host_signature_of("processor\t: 0\nBogoMIPS\t: 50\n"), None);
        assert_eq!(host_signature_of(""), None);
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&mut []), 0.0);
    }

    #[test]
    fn measure_stops_at_the_target_and_the_cap() {
        let o = MeasureOptions {
            warmup: 1,
            min_reps: 3,
            max_reps: 5,
            target_ms: 10.0,
            deadline: Duration::from_secs(1),
            gpu_from_idle: false,
        };
        let mut calls = 0;
        let t: Result<Timing, ()> = measure(&o, || {
            calls += 1;
            Ok(4.0)
        });
        // 1 warm-up, then 3 reps reach 12 ms >= 10 ms.
        assert_eq!(
            t,
            Ok(Timing {
                median_ms: 4.0,
                least_ms: 4.0,
                reps: 3
            })
        );
        assert_eq!(calls, 4);
        let t: Result<Timing, ()> = measure(&o, || Ok(0.5));
        assert_eq!(t.map(|t| t.reps), Ok(5));
        // The median and the fastest of the timed repetitions (the warm-up is not timed).
        let mut times = [1.0, 5.0, 3.0, 4.0].into_iter();
        let t: Result<Timing, ()> = measure(&o, || Ok(times.next().unwrap_or(9.0)));
        assert_eq!(
            t,
            Ok(Timing {
                median_ms: 4.0,
                least_ms: 3.0,
                reps: 3
            })
        );
    }
}
