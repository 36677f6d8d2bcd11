//! The compiled model (`.tandem`): what the compiler writes and the runtime loads.
//!
//! Layout (see `docs/artifact-format.md`): an 8-byte magic, the format version (u32 LE), a
//! FNV-1a 64 checksum of the payload (u64 LE), the payload length (u64 LE), then the payload: the
//! [`Artifact`] encoded with MessagePack (rmp-serde). [`Artifact::decode`] checks every part and
//! then validates the contents ([`Artifact::validate`]); a bad or truncated file gives an
//! [`ArtifactError`] that names what is wrong, never a panic.

use crate::cpu::batch_matmul::BatchMatMulParams;
use crate::cpu::conv::ConvParams;
use crate::cpu::depthwise::DepthwiseParams;
use crate::cpu::fully_connected::FullyConnectedParams;
use crate::cpu::transpose_conv::TransposeConvParams;
use crate::cpu::Activation;
use crate::DType;
use serde::{Deserialize, Serialize};

/// First bytes of every artifact.
pub const MAGIC: &[u8; 8] = b"TANDEM\0\x1a";
/// Version of the format this runtime reads and writes.
pub const FORMAT_VERSION: u32 = 1;
/// Alignment of every arena offset, in bytes.
pub const ARENA_ALIGN: usize = 64;
const HEADER_LEN: usize = 8 + 4 + 8 + 8;

/// Why an artifact could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    #[error("not a tandem artifact (bad magic); compile a .tflite model with `tandem compile`")]
    BadMagic,
    #[error("truncated artifact: {0}")]
    Truncated(String),
    #[error("artifact format version {found}, this runtime reads version {FORMAT_VERSION}; recompile the model with this tandem")]
    Version { found: u32 },
    #[error("artifact checksum mismatch (stored {stored:016x}, computed {computed:016x}): the file is corrupt")]
    Checksum { stored: u64, computed: u64 },
    #[error("artifact payload does not decode: {0}")]
    Decode(String),
    #[error("invalid artifact: {0}")]
    Invalid(String),
}

/// Where a tensor's bytes live.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Storage {
    /// In the activation arena, at a byte offset (multiple of [`ARENA_ALIGN`]).
    Arena { offset: usize },
    /// A constant blob of the artifact.
    Constant { index: usize },
}

/// A tensor of the compiled model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TensorDesc {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub storage: Storage,
}

impl TensorDesc {
    /// Element count.
    pub fn elements(&self) -> usize {
        self.shape.iter().product()
    }

    /// Bytes of the tensor.
    pub fn bytes(&self) -> usize {
        self.elements() * self.dtype.size_bytes().unwrap_or(0)
    }
}

/// Constant data, already in the layout its kernel reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Constant {
    #[serde(with = "serde_bytes")]
    pub data: Vec<u8>,
}

/// Element-wise binary arithmetic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum BinaryKind {
    Add,
    Sub,
    Mul,
    Div,
}

/// Element-wise unary functions.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum UnaryKind {
    Logistic,
    Tanh,
    Relu,
    Relu6,
    ReluN1To1,
    HardSwish,
    LeakyRelu { alpha: f32 },
}

/// Pooling window, `[h, w]` pairs; `pad` is (top, left).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolParams {
    pub filter: [usize; 2],
    pub stride: [usize; 2],
    pub pad: [usize; 2],
    pub activation: Activation,
}

/// What a step computes, with every parameter resolved at compile time. Operand order is given
/// per variant; `?` marks an optional operand.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Kernel {
    /// input, packed weights (`cpu::conv::pack_conv_weights`), bias?
    Conv2d(ConvParams),
    /// input, weights `[1, KH, KW, C_out]`, bias?
    DepthwiseConv2d(DepthwiseParams),
    /// input, weights `[units, depth]`, bias?
    FullyConnected(FullyConnectedParams),
    /// input, packed weights (`cpu::transpose_conv::pack_transpose_conv_weights`), bias?
    TransposeConv(TransposeConvParams),
    /// lhs, rhs
    BatchMatMul(BatchMatMulParams),
    /// lhs, rhs (numpy broadcasting to the output shape)
    Binary { kind: BinaryKind, activation: Activation },
    /// input
    Unary(UnaryKind),
    /// input, alpha (broadcast to the input)
    Prelu,
    /// input; over the last axis
    Softmax { beta: f32 },
    /// input
    MaxPool2d(PoolParams),
    /// input
    AvgPool2d(PoolParams),
    /// input; reduced axes of the input's shape
    Mean { axes: Vec<usize> },
    /// input; zeros (or `value`) before and after each dimension
    Pad { before: Vec<usize>, after: Vec<usize>, value: f32 },
    /// inputs…
    Concat { axis: usize },
    /// input
    Transpose { perm: Vec<usize> },
    /// input; per input dimension: first index, step (may be negative), count
    StridedSlice { begin: Vec<usize>, stride: Vec<isize>, count: Vec<usize> },
    /// input; same elements, new shape (RESHAPE, SQUEEZE)
    Copy,
    /// input
    DepthToSpace { block: usize },
    /// input
    SpaceToDepth { block: usize },
    /// input
    ResizeBilinear { align_corners: bool, half_pixel_centers: bool },
    /// input
    ResizeNearest { align_corners: bool, half_pixel_centers: bool },
}

/// Where a step runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Placement {
    Cpu,
}

/// One kernel launch, in execution order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    /// The source operator, for messages (`CONV_2D #12`).
    pub name: String,
    pub kernel: Kernel,
    /// Tensor indices; `None` for an omitted optional operand.
    pub inputs: Vec<Option<usize>>,
    pub outputs: Vec<usize>,
    pub placement: Placement,
}

/// A compiled model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Artifact {
    /// Tool and version that wrote it (`tandem 0.1.0`).
    pub producer: String,
    /// Human-readable model name.
    pub model: String,
    pub tensors: Vec<TensorDesc>,
    pub constants: Vec<Constant>,
    /// Bytes of the activation arena (the memory plan's peak).
    pub arena_bytes: usize,
    pub inputs: Vec<usize>,
    pub outputs: Vec<usize>,
    pub steps: Vec<Step>,
    /// Threads the CPU parts were planned for.
    pub threads: usize,
}

/// FNV-1a, 64-bit.
fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3))
}

impl Artifact {
    /// Encodes the artifact with its header.
    pub fn encode(&self) -> Result<Vec<u8>, ArtifactError> {
        let payload = rmp_serde::to_vec(self).map_err(|e| ArtifactError::Decode(e.to_string()))?;
        let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&checksum(&payload).to_le_bytes());
        out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        out.extend_from_slice(&payload);
        Ok(out)
    }

    /// Decodes and validates an artifact.
    pub fn decode(bytes: &[u8]) -> Result<Self, ArtifactError> {
        if bytes.len() < MAGIC.len() {
            return Err(if MAGIC.starts_with(bytes) {
                ArtifactError::Truncated(format!("{} bytes, shorter than the header", bytes.len()))
            } else {
                ArtifactError::BadMagic
            });
        }
        if &bytes[..8] != MAGIC {
            return Err(ArtifactError::BadMagic);
        }
        if bytes.len() < HEADER_LEN {
            return Err(ArtifactError::Truncated(format!("{} bytes, shorter than the {HEADER_LEN}-byte header", bytes.len())));
        }
        let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap_or_default());
        let found = u32::from_le_bytes(bytes[8..12].try_into().unwrap_or_default());
        if found != FORMAT_VERSION {
            return Err(ArtifactError::Version { found });
        }
        let (stored, len) = (word(12), word(20));
        let payload = &bytes[HEADER_LEN..];
        if (payload.len() as u64) < len {
            return Err(ArtifactError::Truncated(format!("payload is {} bytes, header says {len}", payload.len())));
        }
        if payload.len() as u64 > len {
            return Err(ArtifactError::Invalid(format!("{} bytes after the payload", payload.len() as u64 - len)));
        }
        let computed = checksum(payload);
        if computed != stored {
            return Err(ArtifactError::Checksum { stored, computed });
        }
        let artifact: Artifact = rmp_serde::from_slice(payload).map_err(|e| ArtifactError::Decode(e.to_string()))?;
        artifact.validate().map_err(ArtifactError::Invalid)?;
        Ok(artifact)
    }

    /// Checks every index, size, offset and kernel geometry, so that running the artifact cannot
    /// read or write out of bounds. The message names the tensor or step.
    pub fn validate(&self) -> Result<(), String> {
        let n_tensors = self.tensors.len();
        for (i, t) in self.tensors.iter().enumerate() {
            let what = || format!("tensor {i} '{}'", t.name);
            let elements = t.shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).ok_or_else(|| format!("{}: shape too large", what()))?;
            let size = t.dtype.size_bytes().ok_or_else(|| format!("{}: unsupported type {}", what(), t.dtype))?;
            let bytes = elements.checked_mul(size).ok_or_else(|| format!("{}: too large", what()))?;
            match t.storage {
                Storage::Arena { offset } => {
                    if t.dtype != DType::F32 {
                        return Err(format!("{}: activations must be FLOAT32, not {}", what(), t.dtype));
                    }
                    if offset % ARENA_ALIGN != 0 || offset.checked_add(bytes).is_none_or(|end| end > self.arena_bytes) {
                        return Err(format!("{}: arena range {offset}..+{bytes} is outside the {}-byte arena or unaligned", what(), self.arena_bytes));
                    }
                }
                Storage::Constant { index } => {
                    let c = self.constants.get(index).ok_or_else(|| format!("{}: constant {index} does not exist", what()))?;
                    if c.data.len() != bytes {
                        return Err(format!("{}: constant {index} has {} bytes, the tensor needs {bytes}", what(), c.data.len()));
                    }
                }
            }
        }
        for (list, name) in [(&self.inputs, "input"), (&self.outputs, "output")] {
            for &t in list {
                match self.tensors.get(t) {
                    Some(TensorDesc { storage: Storage::Arena { .. }, .. }) => {}
                    Some(_) => return Err(format!("model {name} {t} is not an arena tensor")),
                    None => return Err(format!("model {name} refers to tensor {t} of {n_tensors}")),
                }
            }
        }
        for (s, step) in self.steps.iter().enumerate() {
            self.validate_step(step).map_err(|e| format!("step {s} ({}): {e}", step.name))?;
        }
        Ok(())
    }

    fn validate_step(&self, step: &Step) -> Result<(), String> {
        let get = |t: usize| self.tensors.get(t).ok_or_else(|| format!("tensor {t} does not exist ({} tensors)", self.tensors.len()));
        let inputs: Vec<Option<&TensorDesc>> = step.inputs.iter().map(|t| t.map(get).transpose()).collect::<Result<_, _>>()?;
        let outputs: Vec<&TensorDesc> = step.outputs.iter().map(|&t| get(t)).collect::<Result<_, _>>()?;
        let arena_range = |t: &TensorDesc| match t.storage {
            Storage::Arena { offset } => Some(offset..offset + t.bytes()),
            Storage::Constant { .. } => None,
        };
        for (i, out) in outputs.iter().enumerate() {
            let range = arena_range(out).ok_or_else(|| format!("output {i} '{}' is a constant", out.name))?;
            let overlaps = |r: &std::ops::Range<usize>| r.start < range.end && range.start < r.end && !range.is_empty() && !r.is_empty();
            for inp in inputs.iter().flatten() {
                if arena_range(inp).is_some_and(|r| overlaps(&r)) {
                    return Err(format!("output '{}' overlaps input '{}' in the arena", out.name, inp.name));
                }
            }
            for other in &outputs[..i] {
                if arena_range(other).is_some_and(|r| overlaps(&r)) {
                    return Err(format!("outputs '{}' and '{}' overlap in the arena", out.name, other.name));
                }
            }
            if out.dtype != DType::F32 {
                return Err(format!("output '{}' is {}, kernels write FLOAT32", out.name, out.dtype));
            }
        }
        for inp in inputs.iter().flatten() {
            if inp.dtype != DType::F32 {
                return Err(format!("input '{}' is {}, kernels read FLOAT32", inp.name, inp.dtype));
            }
        }
        crate::cpu::check::check_kernel(&step.kernel, &inputs, &outputs)
    }
}
