//! Loading a compiled model and running it.
//!
//! [`Model::load`] decodes and validates an artifact once; [`Session`] owns the activation arena
//! and the thread pool and runs the steps in order.

use crate::artifact::{
    Artifact, ArtifactError, BinaryKind, Kernel, Storage, TensorDesc, UnaryKind,
};
use crate::artifact::{Placement, Step};
use crate::cpu::elementwise::{self, BinaryOp, UnaryOp};
use crate::cpu::pool::Pool2d;
use crate::cpu::threads::ThreadPool;
use crate::cpu::{
    batch_matmul, conv, depthwise, fully_connected, layout, reduce, resize, transpose_conv,
};
use crate::gpu::device::GpuDevice;
use crate::gpu::launch::{ArenaMem, GpuBackend};
use crate::gpu::memory::{self, Arena, Flags};
use crate::gpu::GpuError;
use crate::npy::NpyArray;
use crate::sync::{spin_until, Dependencies, SpinError};
use crate::DType;
use opencl3::event::Event;
use opencl3::memory::{Buffer, ClMem, CL_MEM_READ_WRITE};
use opencl3::types::CL_BLOCKING;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Gpu(#[from] GpuError),
    #[error("step {step} ({name}): {source}")]
    Step {
        step: usize,
        name: String,
        source: GpuError,
    },
    #[error("internal error: {0}")]
    Internal(&'static str),
    #[error("the model takes {expected} inputs, got {got}")]
    InputCount { expected: usize, got: usize },
    #[error(
        "input {index} '{name}': expected {expected_dtype} {expected:?}, got {got_dtype} {got:?}"
    )]
    InputShape {
        index: usize,
        name: String,
        expected: Vec<usize>,
        expected_dtype: DType,
        got: Vec<usize>,
        got_dtype: DType,
    },
}

/// Why a session could not be created.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("cannot allocate the {bytes}-byte activation arena of model '{model}'")]
    ArenaAllocation { model: String, bytes: usize },
}

/// A validated compiled model.
pub struct Model {
    artifact: Artifact,
}

impl Model {
    /// Decodes and validates an artifact.
    pub fn load(bytes: &[u8]) -> Result<Self, ArtifactError> {
        Ok(Self::from_artifact(Artifact::decode(bytes)?))
    }

    /// Reads and loads an artifact file, streaming the weights into place.
    pub fn load_file(path: &Path) -> Result<Self, ArtifactError> {
        let file = std::fs::File::open(path).map_err(|e| {
            ArtifactError::Truncated(format!("cannot open {}: {e}", path.display()))
        })?;
        Ok(Self::from_artifact(Artifact::read_from(
            std::io::BufReader::with_capacity(1 << 16, file),
        )?))
    }

    /// Wraps an artifact that has passed [`Artifact::validate`].
    pub fn from_artifact(artifact: Artifact) -> Self {
        Model { artifact }
    }

    pub fn artifact(&self) -> &Artifact {
        &self.artifact
    }

    /// Descriptions of the model inputs, in order.
    pub fn inputs(&self) -> Vec<&TensorDesc> {
        self.artifact
            .inputs
            .iter()
            .map(|&t| &self.artifact.tensors[t])
            .collect()
    }

    /// Descriptions of the model outputs, in order.
    pub fn outputs(&self) -> Vec<&TensorDesc> {
        self.artifact
            .outputs
            .iter()
            .map(|&t| &self.artifact.tensors[t])
            .collect()
    }
}

/// How the two devices wait for each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncMode {
    /// The GPU queue holds the whole run, with polling kernels on SVM flags where a
    /// cross-device dependency exists; the CPU polls the GPU's flag (needs fine-grained SVM with
    /// atomics; otherwise event waits are used).
    #[default]
    Polling,
    /// GPU work is enqueued as the host reaches it; the CPU waits on OpenCL events.
    EventWait,
}

/// Where activations live when a GPU is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GpuMemory {
    /// Fine-grained SVM when the device has it, else device buffers.
    #[default]
    Auto,
    /// Device buffers with explicit copies at device transitions (the path for GPUs without
    /// fine-grained SVM; selectable for testing).
    Buffers,
}

/// An injected failure, for testing the fault paths.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The first GPU kernel program fails to build.
    KernelBuild,
    /// The device rejects a launch just before the GPU part of step `n`.
    DeviceErrorAt(usize),
    /// A kernel that never finishes on its own runs before the GPU part of step `n`.
    HangAt(usize),
}

/// How a session runs its model.
#[derive(Debug, Clone)]
pub struct SessionOptions {
    /// CPU threads (the caller plus pinned workers).
    pub threads: usize,
    pub sync: SyncMode,
    pub memory: GpuMemory,
    /// Run every step on the CPU, ignoring the plan's placements.
    pub cpu_only: bool,
    /// When the GPU is missing or fails, run the model on the CPU instead of failing.
    pub fallback_cpu: bool,
    /// Longest wait for the other device (and for the GPU queue to drain) before a run fails.
    pub deadline: Duration,
    #[doc(hidden)]
    pub fault: Option<Fault>,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            threads: 1,
            sync: SyncMode::default(),
            memory: GpuMemory::default(),
            cpu_only: false,
            fallback_cpu: false,
            deadline: Duration::from_secs(30),
            fault: None,
        }
    }
}

/// The GPU half of a session.
struct GpuState {
    /// Declared before `flags`: its thread is joined before the flags it writes are freed.
    watchdog: Option<Watchdog>,
    backend: GpuBackend,
    /// Fine-grained SVM flags (polling, watchdog); `None` without fine-grained SVM.
    flags: Option<Flags>,
    deps: Dependencies,
    /// The device copy of the arena when activations are not in SVM.
    device_arena: Option<Buffer<f32>>,
    fault: Option<Fault>,
}

/// A model ready to run: arena, threads and, for plans that use it, the GPU.
pub struct Session<'m> {
    model: &'m Model,
    mem: Devices,
    pool: ThreadPool,
    options: SessionOptions,
    /// Why the GPU is not used although the plan asks for it (after `fallback_cpu`).
    fallback_reason: Option<String>,
}

/// The GPU state and the activation arena, which drop together: GPU state first, then the
/// arena; after a failed drain (`busy`) both are leaked instead of freed under a kernel that may
/// still write them.
struct Devices {
    gpu: Option<GpuState>,
    arena: Arena,
    /// A failed run could not drain the GPU queue: its memory must not be freed.
    busy: bool,
}

/// How long an aborted run waits at least for the GPU queue to empty.
const DRAIN_LIMIT: Duration = Duration::from_secs(30);

impl Drop for Devices {
    fn drop(&mut self) {
        if self.busy {
            std::mem::forget(self.gpu.take());
            std::mem::forget(std::mem::replace(&mut self.arena, Arena::host(0)));
        }
    }
}

impl<'m> Session<'m> {
    /// A session that runs every step on the CPU with `threads` threads, whatever the plan.
    /// Aborts, like any failed allocation, if the arena cannot be allocated;
    /// [`Session::try_new`] reports that as an error instead.
    pub fn new(model: &'m Model, threads: usize) -> Self {
        Self::cpu_session(model, Arena::host(model.artifact.arena_bytes), threads)
    }

    /// Like [`Session::new`], or an error if the activation arena cannot be allocated (the
    /// thread count is not checked here: keep it to what the host can spawn).
    pub fn try_new(model: &'m Model, threads: usize) -> Result<Self, SessionError> {
        let bytes = model.artifact.arena_bytes;
        let arena = Arena::try_host(bytes).ok_or_else(|| SessionError::ArenaAllocation {
            model: model.artifact.model.clone(),
            bytes,
        })?;
        Ok(Self::cpu_session(model, arena, threads))
    }

    fn cpu_session(model: &'m Model, arena: Arena, threads: usize) -> Self {
        Session {
            model,
            mem: Devices {
                gpu: None,
                arena,
                busy: false,
            },
            pool: ThreadPool::new(threads),
            options: SessionOptions {
                threads,
                cpu_only: true,
                ..SessionOptions::default()
            },
            fallback_reason: None,
        }
    }

    /// A session that follows the plan: steps placed on the GPU or split need an OpenCL device
    /// matching the one the artifact was compiled for, unless `fallback_cpu` is set.
    pub fn with_options(model: &'m Model, options: SessionOptions) -> Result<Self, RunError> {
        let a = &model.artifact;
        let needs_gpu = !options.cpu_only && a.steps.iter().any(|s| s.placement.uses_gpu());
        let mut session = Session {
            model,
            mem: Devices {
                gpu: None,
                arena: Arena::host(0),
                busy: false,
            },
            pool: ThreadPool::new(options.threads),
            options: options.clone(),
            fallback_reason: None,
        };
        if needs_gpu {
            match Self::open_gpu(a, &options) {
                Ok((gpu, arena)) => {
                    session.mem.gpu = Some(gpu);
                    session.mem.arena = arena;
                    return Ok(session);
                }
                Err(e) if options.fallback_cpu => session.fallback_reason = Some(e.to_string()),
                Err(e) => return Err(RunError::Gpu(e)),
            }
        }
        session.mem.arena = Arena::host(a.arena_bytes);
        Ok(session)
    }

    fn open_gpu(a: &Artifact, options: &SessionOptions) -> Result<(GpuState, Arena), GpuError> {
        let planned = a
            .gpu
            .as_ref()
            .ok_or_else(|| GpuError::Mismatch("the artifact names no GPU".into()))?;
        let dev = GpuDevice::open()?;
        if !dev.info.same_device(planned) {
            return Err(GpuError::Mismatch(format!(
                "the artifact was compiled for {}, this machine's OpenCL device is {}; \
                 recompile for this device or run with --fallback-cpu",
                planned.label(),
                dev.info.label()
            )));
        }
        let fine = dev.info.has_fine_svm() && options.memory == GpuMemory::Auto;
        let (arena, device_arena) = if fine {
            (Arena::svm(&dev.context, a.arena_bytes)?, None)
        } else {
            // SAFETY: no host pointer.
            let buffer = unsafe {
                Buffer::<f32>::create(
                    &dev.context,
                    CL_MEM_READ_WRITE,
                    a.arena_bytes.div_ceil(4).max(1),
                    std::ptr::null_mut(),
                )
            }
            .map_err(|e| GpuError::Device(format!("allocating the device arena: {e}")))?;
            (Arena::host(a.arena_bytes), Some(buffer))
        };
        let flags = if dev.info.has_fine_svm() {
            Some(Flags::new(&dev.context)?)
        } else {
            None
        };
        let mut backend = GpuBackend::new(dev, a)?;
        if options.fault == Some(Fault::KernelBuild) {
            backend.programs.break_next_build = true;
        }
        Ok((
            GpuState {
                watchdog: flags.as_ref().map(Watchdog::start),
                backend,
                flags,
                deps: crate::sync::dependencies(a),
                device_arena,
                fault: options.fault,
            },
            arena,
        ))
    }

    /// Why the plan's GPU steps run on the CPU, if they do (`fallback_cpu`).
    pub fn fallback_reason(&self) -> Option<&str> {
        self.fallback_reason.as_deref()
    }

    /// The OpenCL device in use, if any.
    pub fn gpu_device(&self) -> Option<&crate::gpu::device::DeviceInfo> {
        self.mem.gpu.as_ref().map(|g| &g.backend.dev.info)
    }

    /// Runs the model on `inputs` (in the model's input order) and returns its outputs.
    pub fn run(&mut self, inputs: &[NpyArray]) -> Result<Vec<NpyArray>, RunError> {
        let a = &self.model.artifact;
        if inputs.len() != a.inputs.len() {
            return Err(RunError::InputCount {
                expected: a.inputs.len(),
                got: inputs.len(),
            });
        }
        for (index, (value, &t)) in inputs.iter().zip(&a.inputs).enumerate() {
            let desc = &a.tensors[t];
            if value.shape != desc.shape || value.dtype != desc.dtype {
                return Err(RunError::InputShape {
                    index,
                    name: desc.name.clone(),
                    expected: desc.shape.clone(),
                    expected_dtype: desc.dtype,
                    got: value.shape.clone(),
                    got_dtype: value.dtype,
                });
            }
        }
        self.write_inputs(inputs);
        if self.mem.gpu.is_some() {
            if let Err(e) = self.run_plan() {
                if !self.options.fallback_cpu {
                    return Err(e);
                }
                // The GPU failed mid-run: drop it and redo the run on the CPU.
                self.fallback_reason = Some(e.to_string());
                self.release_gpu();
                self.write_inputs(inputs);
                self.run_cpu_only();
            }
        } else {
            self.run_cpu_only();
        }
        Ok(self.read_outputs())
    }

    fn write_inputs(&mut self, inputs: &[NpyArray]) {
        let a = &self.model.artifact;
        for (value, &t) in inputs.iter().zip(&a.inputs) {
            let desc = &a.tensors[t];
            // `run` checked that the input is FLOAT32 with this shape: decode its little-endian
            // bytes straight into the arena.
            if let Storage::Arena { offset } = desc.storage {
                let dst = self.mem.arena.slice(offset / 4, desc.elements());
                for (d, b) in dst.iter_mut().zip(value.data.chunks_exact(4)) {
                    *d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                }
            }
        }
    }

    fn read_outputs(&mut self) -> Vec<NpyArray> {
        let a = &self.model.artifact;
        a.outputs
            .iter()
            .map(|&t| {
                let desc = &a.tensors[t];
                let offset = match desc.storage {
                    Storage::Arena { offset } => offset / 4,
                    Storage::Constant { .. } => 0,
                };
                NpyArray::from_f32(
                    desc.shape.clone(),
                    self.mem.arena.slice(offset, desc.elements()),
                )
            })
            .collect()
    }

    fn run_cpu_only(&mut self) {
        let steps = &self.model.artifact.steps;
        for step in steps {
            let all = 0..crate::gpu::launch::split_channels(&step.kernel).unwrap_or(0);
            self.run_cpu_part(step, all);
        }
    }

    /// Runs the plan on both devices.
    fn run_plan(&mut self) -> Result<(), RunError> {
        let gpu = self
            .mem
            .gpu
            .as_ref()
            .ok_or(RunError::Internal("no GPU state"))?;
        let polling = self.options.sync == SyncMode::Polling && gpu.flags.is_some();
        let result = if gpu.device_arena.is_some() {
            self.run_with_buffers()
        } else if polling {
            self.run_polling()
        } else {
            self.run_event_wait()
        };
        if result.is_err() {
            self.abort_and_drain();
        }
        result
    }

    /// Releases every spinning kernel and waits (bounded) for the queue to empty.
    /// Raises the abort flag (spinning kernels return at once; compute kernels finish their
    /// work) and waits for the queue to empty. If it does not empty within the drain limit, the
    /// device may still be writing the arena: `gpu_busy` is set and the memory is never freed.
    fn abort_and_drain(&mut self) {
        if let Some(gpu) = &self.mem.gpu {
            if let Some(flags) = &gpu.flags {
                flags.word(memory::ABORT).store(1, Ordering::Release);
            }
            let _ = gpu.backend.dev.queue.flush();
            let limit = Instant::now() + self.options.deadline.max(DRAIN_LIMIT);
            // SAFETY: an empty wait list.
            let drained = match unsafe { gpu.backend.dev.queue.enqueue_marker_with_wait_list(&[]) }
            {
                Ok(marker) => wait_event(&marker, limit, "draining the GPU queue").is_ok(),
                Err(_) => gpu.backend.dev.queue.finish().is_ok(),
            };
            self.mem.busy = !drained;
        }
    }

    /// Drops the GPU state and puts the activations in host memory; if the device may still be
    /// using its memory (`gpu_busy`), both are leaked instead of freed under a running kernel.
    fn release_gpu(&mut self) {
        let arena = std::mem::replace(
            &mut self.mem.arena,
            Arena::host(self.model.artifact.arena_bytes),
        );
        let gpu = self.mem.gpu.take();
        if self.mem.busy {
            std::mem::forget(arena);
            std::mem::forget(gpu);
        }
        self.mem.busy = false;
    }

    /// Per-step faults injected by tests.
    fn inject(
        backend: &mut GpuBackend,
        flags: Option<&Flags>,
        fault: Option<Fault>,
        step: usize,
    ) -> Result<(), GpuError> {
        match fault {
            Some(Fault::DeviceErrorAt(n)) if n == step => backend.invalid_launch().map(|_| ()),
            Some(Fault::HangAt(n)) if n == step => match flags {
                Some(flags) => backend.hang(flags).map(|_| ()),
                None => Ok(()),
            },
            _ => Ok(()),
        }
    }

    fn gpu_channels(step: &Step) -> std::ops::Range<usize> {
        let c = crate::gpu::launch::split_channels(&step.kernel).unwrap_or(0);
        step.placement.gpu_range(c)
    }

    fn cpu_channels(step: &Step) -> std::ops::Range<usize> {
        let c = crate::gpu::launch::split_channels(&step.kernel).unwrap_or(0);
        step.placement.cpu_range(c)
    }

    fn run_polling(&mut self) -> Result<(), RunError> {
        let a = &self.model.artifact;
        let deadline = self.options.deadline;
        let arena = ArenaMem::Svm(self.mem.arena.ptr().cast());
        let gpu = self
            .mem
            .gpu
            .as_mut()
            .ok_or(RunError::Internal("no GPU state"))?;
        let GpuState {
            backend,
            flags,
            deps,
            fault,
            ..
        } = gpu;
        let flags = flags.as_ref().ok_or(RunError::Internal("no flags"))?;
        for w in [
            memory::CPU_DONE,
            memory::GPU_DONE,
            memory::ABORT,
            memory::STATUS,
        ] {
            flags.word(w).store(0, Ordering::Release);
        }
        let mut last = None;
        for (i, step) in a.steps.iter().enumerate() {
            if !step.placement.uses_gpu() {
                continue;
            }
            let at = |e: GpuError| RunError::Step {
                step: i,
                name: step.name.clone(),
                source: e,
            };
            if let Some(k) = deps.gpu_waits_for_cpu[i] {
                backend
                    .wait(flags, memory::CPU_DONE, k as i32 + 1, i32::MAX)
                    .map_err(at)?;
            }
            Self::inject(backend, Some(flags), *fault, i).map_err(at)?;
            let mut ev = backend
                .enqueue_step(a, step, Self::gpu_channels(step), arena)
                .map_err(at)?;
            if deps.gpu_signals[i] {
                ev = backend
                    .signal(flags, memory::GPU_DONE, i as i32 + 1)
                    .map_err(at)?;
            }
            last = Some(ev);
        }
        backend
            .dev
            .queue
            .flush()
            .map_err(|e| RunError::Gpu(GpuError::Device(format!("flushing the queue: {e}"))))?;
        let deps = deps.cpu_waits_for_gpu.clone();
        for (i, step) in a.steps.iter().enumerate() {
            if !step.placement.uses_cpu() {
                continue;
            }
            if let Some(k) = deps[i] {
                let gpu = self
                    .mem
                    .gpu
                    .as_ref()
                    .ok_or(RunError::Internal("no GPU state"))?;
                let flags = gpu.flags.as_ref().ok_or(RunError::Internal("no flags"))?;
                let r = spin_until(
                    flags.word(memory::GPU_DONE),
                    k as i32 + 1,
                    flags.word(memory::ABORT),
                    Instant::now() + deadline,
                );
                if let Err(e) = r {
                    return Err(RunError::Step {
                        step: i,
                        name: step.name.clone(),
                        source: spin_error(e, deadline, &a.steps[k].name, flags),
                    });
                }
            }
            self.run_cpu_part(step, Self::cpu_channels(step));
            if let Some(flags) = self.mem.gpu.as_ref().and_then(|g| g.flags.as_ref()) {
                flags
                    .word(memory::CPU_DONE)
                    .store(i as i32 + 1, Ordering::Release);
            }
        }
        if let Some(ev) = last {
            wait_event(&ev, Instant::now() + deadline, "the GPU's last step")
                .map_err(RunError::Gpu)?;
        }
        let gpu = self
            .mem
            .gpu
            .as_ref()
            .ok_or(RunError::Internal("no GPU state"))?;
        if let Some(flags) = &gpu.flags {
            if flags.word(memory::STATUS).load(Ordering::Acquire) != 0 {
                return Err(RunError::Gpu(GpuError::Deadline {
                    deadline_ms: deadline.as_millis() as u64,
                    waiting: "a GPU kernel polled the CPU's flag too long".into(),
                }));
            }
        }
        Ok(())
    }

    fn run_event_wait(&mut self) -> Result<(), RunError> {
        let a = &self.model.artifact;
        let deadline = self.options.deadline;
        let arena = ArenaMem::Svm(self.mem.arena.ptr().cast());
        let mut events: Vec<Option<Event>> = (0..a.steps.len()).map(|_| None).collect();
        if let Some(flags) = self.mem.gpu.as_ref().and_then(|g| g.flags.as_ref()) {
            flags.word(memory::ABORT).store(0, Ordering::Release);
        }
        for (i, step) in a.steps.iter().enumerate() {
            let at = |e: GpuError| RunError::Step {
                step: i,
                name: step.name.clone(),
                source: e,
            };
            if step.placement.uses_gpu() {
                let gpu = self
                    .mem
                    .gpu
                    .as_mut()
                    .ok_or(RunError::Internal("no GPU state"))?;
                Self::inject(&mut gpu.backend, gpu.flags.as_ref(), gpu.fault, i).map_err(at)?;
                let ev = gpu
                    .backend
                    .enqueue_step(a, step, Self::gpu_channels(step), arena)
                    .map_err(at)?;
                gpu.backend
                    .dev
                    .queue
                    .flush()
                    .map_err(|e| at(GpuError::Device(format!("flushing the queue: {e}"))))?;
                events[i] = Some(ev);
            }
            if step.placement.uses_cpu() {
                if let Some(k) = self
                    .mem
                    .gpu
                    .as_ref()
                    .and_then(|g| g.deps.cpu_waits_for_gpu[i])
                {
                    if let Some(ev) = &events[k] {
                        self.blocking_wait(ev, deadline).map_err(at)?;
                    }
                }
                self.run_cpu_part(step, Self::cpu_channels(step));
            }
        }
        let gpu = self
            .mem
            .gpu
            .as_ref()
            .ok_or(RunError::Internal("no GPU state"))?;
        if let Ok(marker) = // SAFETY: an empty wait list.
            unsafe { gpu.backend.dev.queue.enqueue_marker_with_wait_list(&[]) }
        {
            self.blocking_wait(&marker, deadline)
                .map_err(RunError::Gpu)?;
        }
        Ok(())
    }

    /// `clWaitForEvents`, with a watchdog that raises the abort flag (releasing any spinning
    /// kernel) when the deadline passes.
    fn blocking_wait(&self, ev: &Event, deadline: Duration) -> Result<(), GpuError> {
        let Some(watchdog) = self.mem.gpu.as_ref().and_then(|g| g.watchdog.as_ref()) else {
            // Without fine-grained SVM there are no flags to release a kernel with.
            return ev
                .wait()
                .map_err(|e| GpuError::Device(format!("waiting for a GPU step: {e}")));
        };
        watchdog.arm(Instant::now() + deadline);
        let result = ev.wait();
        let fired = watchdog.disarm();
        if fired {
            return Err(GpuError::Deadline {
                deadline_ms: deadline.as_millis() as u64,
                waiting: "waiting for a GPU event".into(),
            });
        }
        let status = ev.command_execution_status().map(|s| s.0).unwrap_or(0);
        match result {
            Ok(()) if status >= 0 => Ok(()),
            Ok(()) => Err(GpuError::Device(format!(
                "a GPU command failed with status {status}"
            ))),
            Err(e) => Err(GpuError::Device(format!("waiting for a GPU step: {e}"))),
        }
    }

    /// Device buffers, no SVM: copies at device transitions; steps run one after another.
    fn run_with_buffers(&mut self) -> Result<(), RunError> {
        let a = &self.model.artifact;
        let deadline = self.options.deadline;
        let n = a.tensors.len();
        // Where each tensor's current value is.
        let mut on_host = vec![true; n];
        let mut on_device = vec![false; n];
        for (i, step) in a.steps.iter().enumerate() {
            let at = |e: GpuError| RunError::Step {
                step: i,
                name: step.name.clone(),
                source: e,
            };
            let arena_tensors = |list: &mut dyn Iterator<Item = usize>| -> Vec<usize> {
                list.filter(|&t| matches!(a.tensors[t].storage, Storage::Arena { .. }))
                    .collect()
            };
            let inputs = arena_tensors(&mut step.inputs.iter().flatten().copied());
            let outputs = arena_tensors(&mut step.outputs.iter().copied());
            let mut gpu_event = None;
            if step.placement.uses_gpu() {
                for &t in &inputs {
                    if !on_device[t] {
                        self.transfer(t, true).map_err(at)?;
                        on_device[t] = true;
                    }
                }
                let gpu = self
                    .mem
                    .gpu
                    .as_mut()
                    .ok_or(RunError::Internal("no GPU state"))?;
                let buffer = gpu
                    .device_arena
                    .as_ref()
                    .ok_or(RunError::Internal("no device arena"))?
                    .get();
                Self::inject(&mut gpu.backend, gpu.flags.as_ref(), gpu.fault, i).map_err(at)?;
                gpu_event = Some(
                    gpu.backend
                        .enqueue_step(a, step, Self::gpu_channels(step), ArenaMem::Buffer(buffer))
                        .map_err(at)?,
                );
                let _ = gpu.backend.dev.queue.flush();
            }
            if step.placement.uses_cpu() {
                for &t in &inputs {
                    if !on_host[t] {
                        self.transfer(t, false).map_err(at)?;
                        on_host[t] = true;
                    }
                }
                self.run_cpu_part(step, Self::cpu_channels(step));
            }
            if let Some(ev) = gpu_event {
                wait_event(&ev, Instant::now() + deadline, "a GPU step").map_err(at)?;
            }
            for &t in &outputs {
                match step.placement {
                    Placement::Cpu => {
                        on_host[t] = true;
                        on_device[t] = false;
                    }
                    Placement::Gpu => {
                        on_host[t] = false;
                        on_device[t] = true;
                    }
                    Placement::Split { .. } => {
                        self.merge_gpu_channels(step, t).map_err(at)?;
                        on_host[t] = true;
                        on_device[t] = false;
                    }
                }
            }
        }
        for &t in &a.outputs {
            if !on_host[t] {
                self.transfer(t, false).map_err(RunError::Gpu)?;
            }
        }
        Ok(())
    }

    /// Copies tensor `t` between the host arena and the device arena (blocking).
    fn transfer(&mut self, t: usize, to_device: bool) -> Result<(), GpuError> {
        let desc = &self.model.artifact.tensors[t];
        let Storage::Arena { offset } = desc.storage else {
            return Ok(());
        };
        let n = desc.elements();
        let host = self.mem.arena.slice(offset / 4, n);
        let gpu = self
            .mem
            .gpu
            .as_mut()
            .ok_or(GpuError::Device("no GPU".into()))?;
        let buffer = gpu
            .device_arena
            .as_mut()
            .ok_or(GpuError::Device("no device arena".into()))?;
        let queue = &gpu.backend.dev.queue;
        // SAFETY: the host slice covers `n` floats; the copy is blocking.
        let r = unsafe {
            if to_device {
                queue.enqueue_write_buffer(buffer, CL_BLOCKING, offset, host, &[])
            } else {
                queue.enqueue_read_buffer(buffer, CL_BLOCKING, offset, host, &[])
            }
        };
        r.map(|_| ())
            .map_err(|e| GpuError::Device(format!("copying '{}': {e}", desc.name)))
    }

    /// After a split step with device buffers: copies the GPU's channels of output `t` into the
    /// host arena, which already holds the CPU's.
    fn merge_gpu_channels(&mut self, step: &Step, t: usize) -> Result<(), GpuError> {
        let desc = &self.model.artifact.tensors[t];
        let Storage::Arena { offset } = desc.storage else {
            return Ok(());
        };
        let n = desc.elements();
        let mut gpu_copy = vec![0.0f32; n];
        {
            let gpu = self
                .mem
                .gpu
                .as_mut()
                .ok_or(GpuError::Device("no GPU".into()))?;
            let buffer = gpu
                .device_arena
                .as_ref()
                .ok_or(GpuError::Device("no device arena".into()))?;
            // SAFETY: `gpu_copy` holds `n` floats; the copy is blocking.
            unsafe {
                gpu.backend.dev.queue.enqueue_read_buffer(
                    buffer,
                    CL_BLOCKING,
                    offset,
                    &mut gpu_copy,
                    &[],
                )
            }
            .map_err(|e| GpuError::Device(format!("copying '{}': {e}", desc.name)))?;
        }
        let channels = desc.shape.last().copied().unwrap_or(1).max(1);
        let range = Self::gpu_channels(step);
        let host = self.mem.arena.slice(offset / 4, n);
        for (h, g) in host
            .chunks_exact_mut(channels)
            .zip(gpu_copy.chunks_exact(channels))
        {
            h[range.clone()].copy_from_slice(&g[range.clone()]);
        }
        Ok(())
    }

    /// Runs the model once and returns each step's name and wall time in milliseconds (for
    /// profiling; the outputs are discarded). Steps run on the CPU.
    pub fn step_times(&mut self, inputs: &[NpyArray]) -> Result<Vec<(String, f64)>, RunError> {
        self.run(inputs)?;
        let a = &self.model.artifact;
        let mut times = Vec::with_capacity(a.steps.len());
        for step in &a.steps {
            let start = std::time::Instant::now();
            let all = 0..crate::gpu::launch::split_channels(&step.kernel).unwrap_or(0);
            self.run_cpu_part(step, all);
            times.push((step.name.clone(), start.elapsed().as_secs_f64() * 1e3));
        }
        Ok(times)
    }

    /// Runs the CPU part of `step`: output channels `range` of a splittable kernel, the whole
    /// step otherwise.
    fn run_cpu_part(&mut self, step: &Step, range: std::ops::Range<usize>) {
        let a = &self.model.artifact;
        let arena_len = self.mem.arena.len();
        let arena_ptr = self.mem.arena.ptr();
        // SAFETY: validation guarantees every arena range is in bounds and that a step's outputs
        // overlap neither its inputs nor each other, so these slices never alias mutably.
        let read = |t: usize| -> &[f32] {
            let desc = &a.tensors[t];
            match desc.storage {
                Storage::Constant { offset } => &a.weights[offset..offset + desc.elements()],
                Storage::Arena { offset } => {
                    debug_assert!(offset / 4 + desc.elements() <= arena_len);
                    unsafe {
                        std::slice::from_raw_parts(arena_ptr.add(offset / 4), desc.elements())
                    }
                }
            }
        };
        let inputs: Vec<Option<&[f32]>> = step.inputs.iter().map(|t| t.map(read)).collect();
        let shapes: Vec<&[usize]> = step
            .inputs
            .iter()
            .map(|t| t.map_or(&[][..], |t| a.tensors[t].shape.as_slice()))
            .collect();
        let mut outputs: Vec<&mut [f32]> = step
            .outputs
            .iter()
            .map(|&t| {
                let desc = &a.tensors[t];
                let offset = match desc.storage {
                    Storage::Arena { offset } => offset / 4,
                    Storage::Constant { .. } => 0,
                };
                unsafe { std::slice::from_raw_parts_mut(arena_ptr.add(offset), desc.elements()) }
            })
            .collect();
        let out_shape = a.tensors[step.outputs[0]].shape.as_slice();
        let x = |i: usize| inputs[i].unwrap_or(&[]);
        let out = &mut outputs[0];
        let pool = &self.pool;
        match &step.kernel {
            Kernel::Conv2d(p) => conv::conv2d(
                x(0),
                x(1),
                inputs.get(2).copied().flatten(),
                out,
                p,
                range.start,
                range.end,
                pool,
            ),
            Kernel::DepthwiseConv2d(p) => depthwise::depthwise_conv2d(
                x(0),
                x(1),
                inputs.get(2).copied().flatten(),
                out,
                p,
                range.start,
                range.end,
                pool,
            ),
            Kernel::FullyConnected(p) => fully_connected::fully_connected(
                x(0),
                x(1),
                inputs.get(2).copied().flatten(),
                out,
                p,
                range.start,
                range.end,
                pool,
            ),
            Kernel::TransposeConv(p) => transpose_conv::transpose_conv2d(
                x(0),
                x(1),
                inputs.get(2).copied().flatten(),
                out,
                p,
                pool,
            ),
            Kernel::BatchMatMul(p) => batch_matmul::batch_matmul(x(0), x(1), out, p),
            Kernel::Binary { kind, activation } => {
                let op = match kind {
                    BinaryKind::Add => BinaryOp::Add,
                    BinaryKind::Sub => BinaryOp::Sub,
                    BinaryKind::Mul => BinaryOp::Mul,
                    BinaryKind::Div => BinaryOp::Div,
                };
                elementwise::binary(
                    op,
                    x(0),
                    shapes[0],
                    x(1),
                    shapes[1],
                    out,
                    out_shape,
                    *activation,
                )
            }
            Kernel::Unary(kind) => {
                let op = match *kind {
                    UnaryKind::Logistic => UnaryOp::Logistic,
                    UnaryKind::Tanh => UnaryOp::Tanh,
                    UnaryKind::Relu => UnaryOp::Relu,
                    UnaryKind::Relu6 => UnaryOp::Relu6,
                    UnaryKind::ReluN1To1 => UnaryOp::ReluN1To1,
                    UnaryKind::HardSwish => UnaryOp::HardSwish,
                    UnaryKind::LeakyRelu { alpha } => UnaryOp::LeakyRelu(alpha),
                };
                elementwise::unary(op, x(0), out)
            }
            Kernel::Prelu => elementwise::prelu(x(0), shapes[0], x(1), shapes[1], out),
            Kernel::Softmax { beta } => {
                elementwise::softmax(x(0), out, out_shape.last().copied().unwrap_or(1), *beta)
            }
            Kernel::MaxPool2d(p) | Kernel::AvgPool2d(p) => {
                let params = Pool2d {
                    filter: p.filter,
                    stride: p.stride,
                    pad: p.pad,
                    activation: p.activation,
                };
                let (i, o) = (shape4(shapes[0]), shape4(out_shape));
                if matches!(step.kernel, Kernel::MaxPool2d(_)) {
                    crate::cpu::pool::max_pool2d(x(0), i, out, o, &params)
                } else {
                    crate::cpu::pool::avg_pool2d(x(0), i, out, o, &params)
                }
            }
            Kernel::Mean { axes } => reduce::mean(x(0), shapes[0], axes, out),
            Kernel::Pad {
                before,
                after,
                value,
            } => layout::pad(x(0), shapes[0], before, after, *value, out),
            Kernel::Concat { axis } => {
                let parts: Vec<(&[f32], &[usize])> =
                    (0..inputs.len()).map(|i| (x(i), shapes[i])).collect();
                layout::concat(&parts, *axis, out)
            }
            Kernel::Transpose { perm } => layout::transpose(x(0), shapes[0], perm, out),
            Kernel::StridedSlice {
                begin,
                stride,
                count,
            } => layout::strided_slice(x(0), shapes[0], begin, stride, count, out),
            Kernel::Copy => out.copy_from_slice(x(0)),
            Kernel::DepthToSpace { block } => {
                layout::depth_to_space(x(0), shape4(shapes[0]), *block, out)
            }
            Kernel::SpaceToDepth { block } => {
                layout::space_to_depth(x(0), shape4(shapes[0]), *block, out)
            }
            Kernel::ResizeBilinear {
                align_corners,
                half_pixel_centers,
            } => resize::resize_bilinear(
                x(0),
                shape4(shapes[0]),
                out,
                shape4(out_shape),
                *align_corners,
                *half_pixel_centers,
            ),
            Kernel::ResizeNearest {
                align_corners,
                half_pixel_centers,
            } => resize::resize_nearest(
                x(0),
                shape4(shapes[0]),
                out,
                shape4(out_shape),
                *align_corners,
                *half_pixel_centers,
            ),
        }
    }
}

/// A rank-4 shape as an array (validation guarantees the rank where kernels need it).
fn shape4(s: &[usize]) -> [usize; 4] {
    let mut a = [1; 4];
    for (d, v) in a.iter_mut().zip(s) {
        *d = *v;
    }
    a
}

/// Polls `ev` until it completes, fails, or `deadline` passes.
fn wait_event(ev: &Event, deadline: Instant, what: &str) -> Result<(), GpuError> {
    let mut polls = 0u32;
    loop {
        let status = ev
            .command_execution_status()
            .map_err(|e| GpuError::Device(format!("querying {what}: {e}")))?
            .0;
        if status == opencl3::event::CL_COMPLETE {
            return Ok(());
        }
        if status < 0 {
            return Err(GpuError::Device(format!(
                "{what} failed with status {status}"
            )));
        }
        polls = polls.wrapping_add(1);
        if polls.is_multiple_of(256) && Instant::now() >= deadline {
            return Err(GpuError::Deadline {
                deadline_ms: 0,
                waiting: format!("waiting for {what}"),
            });
        }
        if polls < 10_000 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// The error of a failed CPU-side spin on the GPU's flag.
fn spin_error(e: SpinError, deadline: Duration, waited_for: &str, flags: &Flags) -> GpuError {
    let gave_up = flags.word(memory::STATUS).load(Ordering::Acquire) != 0;
    match e {
        SpinError::Deadline => GpuError::Deadline {
            deadline_ms: deadline.as_millis() as u64,
            waiting: format!("waiting for the GPU to finish {waited_for}"),
        },
        SpinError::Aborted if gave_up => GpuError::Deadline {
            deadline_ms: deadline.as_millis() as u64,
            waiting: "a GPU kernel polled the CPU's flag too long".into(),
        },
        SpinError::Aborted => GpuError::Device("the GPU side aborted the run".into()),
    }
}

/// A thread per GPU session that raises the abort flag when an armed deadline passes (releasing
/// any spinning kernel, so that a blocking event wait returns). Arming and disarming cost a lock
/// and a notification, not a thread.
struct Watchdog {
    shared: std::sync::Arc<(std::sync::Mutex<WatchState>, std::sync::Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[derive(Default)]
struct WatchState {
    deadline: Option<Instant>,
    fired: bool,
    shutdown: bool,
}

/// The abort word's address, sent to the watchdog thread; the `GpuState` field order keeps the
/// flags alive until the thread is joined.
struct AbortWord(*const std::sync::atomic::AtomicI32);

// SAFETY: an atomic in fine-grained SVM, valid while the watchdog runs (see above).
unsafe impl Send for AbortWord {}

impl Watchdog {
    fn start(flags: &Flags) -> Watchdog {
        let shared = std::sync::Arc::new((
            std::sync::Mutex::new(WatchState::default()),
            std::sync::Condvar::new(),
        ));
        let word = AbortWord(flags.word(memory::ABORT));
        let theirs = std::sync::Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("tandem-gpu-watchdog".into())
            .spawn(move || {
                let word = word;
                let (lock, cv) = &*theirs;
                let mut state = lock.lock().unwrap_or_else(|e| e.into_inner());
                loop {
                    if state.shutdown {
                        return;
                    }
                    state = match state.deadline {
                        None => cv.wait(state).unwrap_or_else(|e| e.into_inner()),
                        Some(d) if Instant::now() >= d => {
                            // SAFETY: see `AbortWord`.
                            unsafe { &*word.0 }.store(1, Ordering::Release);
                            state.fired = true;
                            state.deadline = None;
                            state
                        }
                        Some(d) => {
                            let wait = d.saturating_duration_since(Instant::now());
                            cv.wait_timeout(state, wait)
                                .unwrap_or_else(|e| e.into_inner())
                                .0
                        }
                    };
                }
            })
            .ok();
        Watchdog { shared, thread }
        // (If the thread cannot be spawned, waits run without a deadline, as without SVM.)
    }

    fn arm(&self, deadline: Instant) {
        let (lock, cv) = &*self.shared;
        let mut state = lock.lock().unwrap_or_else(|e| e.into_inner());
        state.deadline = Some(deadline);
        state.fired = false;
        cv.notify_one();
    }

    /// Disarms; returns whether the deadline passed (and the abort flag was raised).
    fn disarm(&self) -> bool {
        let (lock, _) = &*self.shared;
        let mut state = lock.lock().unwrap_or_else(|e| e.into_inner());
        state.deadline = None;
        std::mem::take(&mut state.fired)
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        let (lock, cv) = &*self.shared;
        lock.lock().unwrap_or_else(|e| e.into_inner()).shutdown = true;
        cv.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
