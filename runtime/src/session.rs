//! Loading a compiled model and running it.
//!
//! [`Model::load`] decodes and validates an artifact once; [`Session`] owns the activation arena
//! and the thread pool and runs the steps in order.

use crate::artifact::{
    Artifact, ArtifactError, BinaryKind, Kernel, Storage, TensorDesc, UnaryKind,
};
use crate::cpu::elementwise::{self, BinaryOp, UnaryOp};
use crate::cpu::pool::Pool2d;
use crate::cpu::threads::ThreadPool;
use crate::cpu::{
    batch_matmul, conv, depthwise, fully_connected, layout, reduce, resize, transpose_conv,
};
use crate::npy::NpyArray;
use crate::DType;
use std::path::Path;

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
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

/// A model ready to run: arena and threads.
pub struct Session<'m> {
    model: &'m Model,
    /// The arena, over-allocated so that element `base` sits on a 64-byte boundary; arena offsets
    /// count from there (so every tensor is 64-byte aligned). Never resized.
    arena: Vec<f32>,
    base: usize,
    pool: ThreadPool,
}

impl<'m> Session<'m> {
    /// A session using `threads` CPU threads. Aborts, like any failed allocation, if the arena
    /// cannot be allocated; [`Session::try_new`] reports that as an error instead.
    pub fn new(model: &'m Model, threads: usize) -> Self {
        let align = crate::artifact::ARENA_ALIGN / 4;
        let arena = vec![0.0f32; model.artifact.arena_bytes.div_ceil(4) + align];
        Self::with_arena(model, arena, threads)
    }

    /// A session using `threads` CPU threads, or an error if the activation arena cannot be
    /// allocated (the thread count is not checked here: keep it to what the host can spawn).
    pub fn try_new(model: &'m Model, threads: usize) -> Result<Self, SessionError> {
        let align = crate::artifact::ARENA_ALIGN / 4;
        let bytes = model.artifact.arena_bytes;
        let len = bytes.div_ceil(4).saturating_add(align);
        let mut arena = Vec::new();
        arena
            .try_reserve_exact(len)
            .map_err(|_| SessionError::ArenaAllocation {
                model: model.artifact.model.clone(),
                bytes,
            })?;
        arena.resize(len, 0.0f32);
        Ok(Self::with_arena(model, arena, threads))
    }

    fn with_arena(model: &'m Model, arena: Vec<f32>, threads: usize) -> Self {
        let align = crate::artifact::ARENA_ALIGN / 4;
        let base = (align - (arena.as_ptr() as usize / 4) % align) % align;
        Session {
            model,
            arena,
            base,
            pool: ThreadPool::new(threads),
        }
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
            let dst = self.arena_range(desc);
            let values = value.to_f32().unwrap_or_default();
            self.arena[dst].copy_from_slice(&values);
        }
        for step in &a.steps {
            self.run_step(step);
        }
        Ok(a.outputs
            .iter()
            .map(|&t| {
                let desc = &a.tensors[t];
                NpyArray::from_f32(desc.shape.clone(), &self.arena[self.arena_range(desc)])
            })
            .collect())
    }

    /// Runs the model once and returns each step's name and wall time in milliseconds (for
    /// profiling; the outputs are discarded).
    pub fn step_times(&mut self, inputs: &[NpyArray]) -> Result<Vec<(String, f64)>, RunError> {
        self.run(inputs)?;
        let a = &self.model.artifact;
        let mut times = Vec::with_capacity(a.steps.len());
        for step in &a.steps {
            let start = std::time::Instant::now();
            self.run_step(step);
            times.push((step.name.clone(), start.elapsed().as_secs_f64() * 1e3));
        }
        Ok(times)
    }

    fn arena_range(&self, t: &TensorDesc) -> std::ops::Range<usize> {
        match t.storage {
            Storage::Arena { offset } => {
                self.base + offset / 4..self.base + offset / 4 + t.elements()
            }
            Storage::Constant { .. } => 0..0,
        }
    }

    fn run_step(&mut self, step: &crate::artifact::Step) {
        let a = &self.model.artifact;
        let arena_len = self.arena.len() - self.base;
        // SAFETY: `base` is within the arena (it is less than the over-allocation).
        let arena_ptr = unsafe { self.arena.as_mut_ptr().add(self.base) };
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
                0,
                p.output[3],
                pool,
            ),
            Kernel::DepthwiseConv2d(p) => depthwise::depthwise_conv2d(
                x(0),
                x(1),
                inputs.get(2).copied().flatten(),
                out,
                p,
                0,
                p.output[3],
                pool,
            ),
            Kernel::FullyConnected(p) => fully_connected::fully_connected(
                x(0),
                x(1),
                inputs.get(2).copied().flatten(),
                out,
                p,
                0,
                p.units,
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
