//! The compiled model (`.tandem`): what the compiler writes and the runtime loads.
//!
//! Layout (see `docs/artifact-format.md`): a 40-byte header — 8-byte magic, format version (u32
//! LE), 4 zero bytes, checksum (u64 LE) of everything after the header, metadata length in bytes
//! (u64 LE), weight count in f32 elements (u64 LE) — then the metadata (the [`Artifact`] without
//! its weights, MessagePack via rmp-serde), zero padding to a multiple of 64 bytes, and the
//! weights (f32 LE), where every constant tensor starts at a multiple of 16 elements.
//!
//! [`Artifact::decode`] (from memory) and [`Artifact::read_from`] (streaming, so the weights are
//! read straight into their final buffer) check every part and then validate the contents
//! ([`Artifact::validate`]); a bad or truncated file gives an [`ArtifactError`] that names what is
//! wrong, never a panic.

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
/// Version of the format this runtime reads and writes. 3: the GPU operands of 3x3 stride-1
/// convolutions follow the Winograd dispatch rule of 2026-12 (Winograd from 8 input channels and
/// 4 output tiles on), so a version-2 artifact's layouts may not match what dispatch picks.
pub const FORMAT_VERSION: u32 = 3;
/// Alignment of every arena offset, in bytes.
pub const ARENA_ALIGN: usize = 64;
/// Alignment of every constant inside the weights, in f32 elements (64 bytes).
pub const WEIGHT_ALIGN: usize = 16;
const HEADER_LEN: usize = 40;
/// Largest metadata block accepted (the weights are separate, so metadata stays small).
const MAX_META: u64 = 1 << 30;
/// Largest activation arena an artifact may declare: 16 GiB (2 GiB on 32-bit targets). Far above
/// any model this runtime targets; it keeps a hostile artifact from requesting an absurd
/// allocation (sessions still allocate fallibly, see [`crate::session::Session::try_new`]).
pub const MAX_ARENA_BYTES: usize = if usize::BITS > 32 {
    (1u64 << 34) as usize
} else {
    1 << 31
};
/// Weights read before the rest of the declared weight buffer is reserved (4 MiB of f32), so that
/// a header announcing far more weights than the file holds fails before any large allocation.
const WEIGHT_CHUNK: usize = 1 << 20;

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
    /// In [`Artifact::weights`], from this element offset (a multiple of [`WEIGHT_ALIGN`]).
    Constant { offset: usize },
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
    Binary {
        kind: BinaryKind,
        activation: Activation,
    },
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
    Pad {
        before: Vec<usize>,
        after: Vec<usize>,
        value: f32,
    },
    /// inputs…
    Concat { axis: usize },
    /// input
    Transpose { perm: Vec<usize> },
    /// input; per input dimension: first index, step (may be negative), count
    StridedSlice {
        begin: Vec<usize>,
        stride: Vec<isize>,
        count: Vec<usize>,
    },
    /// input; same elements, new shape (RESHAPE, SQUEEZE)
    Copy,
    /// input
    DepthToSpace { block: usize },
    /// input
    SpaceToDepth { block: usize },
    /// input
    ResizeBilinear {
        align_corners: bool,
        half_pixel_centers: bool,
    },
    /// input
    ResizeNearest {
        align_corners: bool,
        half_pixel_centers: bool,
    },
}

/// Where a step runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Placement {
    Cpu,
    Gpu,
    /// Output channels `[0, C - gpu_channels)` on the CPU and `[C - gpu_channels, C)` on the
    /// GPU, at the same time, into the same output (conv, depthwise, fully connected only).
    Split {
        gpu_channels: usize,
    },
}

impl Placement {
    pub fn uses_gpu(self) -> bool {
        !matches!(self, Placement::Cpu)
    }

    pub fn uses_cpu(self) -> bool {
        !matches!(self, Placement::Gpu)
    }

    /// The output channels the GPU computes, of `channels` (all of them for `Gpu`).
    pub fn gpu_range(self, channels: usize) -> std::ops::Range<usize> {
        match self {
            Placement::Cpu => channels..channels,
            Placement::Gpu => 0..channels,
            Placement::Split { gpu_channels } => channels - gpu_channels.min(channels)..channels,
        }
    }

    /// The output channels the CPU computes, of `channels`.
    pub fn cpu_range(self, channels: usize) -> std::ops::Range<usize> {
        0..self.gpu_range(channels).start
    }
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
    /// Operands of the GPU kernel when the step uses the GPU (the same activations as `inputs`;
    /// constants in the GPU layout of `gpu::layout`); empty otherwise.
    #[serde(default)]
    pub gpu_operands: Vec<Option<usize>>,
}

/// A compiled model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Artifact {
    /// Tool and version that wrote it (`tandem 0.1.0`).
    pub producer: String,
    /// Human-readable model name.
    pub model: String,
    pub tensors: Vec<TensorDesc>,
    /// Every constant, in the layout its kernel reads; stored after the metadata, not in it.
    #[serde(skip)]
    pub weights: Vec<f32>,
    /// Length of `weights` (checked against the header).
    pub weights_len: usize,
    /// Bytes of the activation arena (the memory plan's peak).
    pub arena_bytes: usize,
    pub inputs: Vec<usize>,
    pub outputs: Vec<usize>,
    pub steps: Vec<Step>,
    /// Threads the CPU parts were planned for.
    pub threads: usize,
    /// The GPU the plan was made for; `None` when every step runs on the CPU.
    #[serde(default)]
    pub gpu: Option<crate::gpu::device::DeviceInfo>,
}

/// FNV-1a-style hash over 64-bit little-endian words (bytes for a tail), updated once with the
/// padded metadata and once with the weights.
#[derive(Clone, Copy)]
struct Checksum(u64);

impl Checksum {
    const PRIME: u64 = 0x0000_0100_0000_01b3;

    fn new() -> Self {
        Checksum(0xcbf2_9ce4_8422_2325)
    }

    fn update(&mut self, bytes: &[u8]) {
        let words = bytes.chunks_exact(8);
        let tail = words.remainder();
        for w in words {
            let word = u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]);
            self.0 = (self.0 ^ word).wrapping_mul(Self::PRIME);
        }
        for &b in tail {
            self.0 = (self.0 ^ b as u64).wrapping_mul(Self::PRIME);
        }
    }
}

/// Zero bytes between the metadata and the weights.
fn padding(meta_len: usize) -> usize {
    (64 - (HEADER_LEN + meta_len) % 64) % 64
}

/// Views f32s as their in-memory bytes (little-endian on every supported target; see
/// [`to_le_in_place`]).
fn as_bytes_mut(values: &mut [f32]) -> &mut [u8] {
    // SAFETY: f32 has no padding or invalid bit patterns; the length is scaled by its size.
    unsafe {
        std::slice::from_raw_parts_mut(
            values.as_mut_ptr().cast::<u8>(),
            std::mem::size_of_val(values),
        )
    }
}

/// Converts values read as little-endian bytes to native order (a no-op on little-endian hosts).
fn to_le_in_place(values: &mut [f32]) {
    if cfg!(target_endian = "big") {
        for v in values {
            *v = f32::from_bits(u32::from_le(v.to_bits()));
        }
    }
}

/// The parsed fixed header.
struct Header {
    checksum: u64,
    meta_len: usize,
    weights_len: usize,
}

fn parse_header(bytes: &[u8]) -> Result<Header, ArtifactError> {
    if bytes.len() < MAGIC.len() || &bytes[..8] != MAGIC {
        return Err(if bytes.len() < MAGIC.len() && MAGIC.starts_with(bytes) {
            ArtifactError::Truncated(format!("{} bytes, shorter than the header", bytes.len()))
        } else {
            ArtifactError::BadMagic
        });
    }
    if bytes.len() < HEADER_LEN {
        return Err(ArtifactError::Truncated(format!(
            "{} bytes, shorter than the {HEADER_LEN}-byte header",
            bytes.len()
        )));
    }
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap_or_default());
    let found = u32::from_le_bytes(bytes[8..12].try_into().unwrap_or_default());
    if found != FORMAT_VERSION {
        return Err(ArtifactError::Version { found });
    }
    if bytes[12..16] != [0; 4] {
        return Err(ArtifactError::Invalid(
            "reserved header bytes 12..16 are not zero".into(),
        ));
    }
    let (checksum, meta_len, weights_len) = (word(16), word(24), word(32));
    if meta_len > MAX_META {
        return Err(ArtifactError::Invalid(format!(
            "metadata length {meta_len} is implausible"
        )));
    }
    let weights_len = usize::try_from(weights_len)
        .ok()
        .filter(|n| n.checked_mul(4).is_some())
        .ok_or_else(|| {
            ArtifactError::Invalid(format!("weight count {weights_len} is implausible"))
        })?;
    Ok(Header {
        checksum,
        meta_len: meta_len as usize,
        weights_len,
    })
}

impl Artifact {
    /// Encodes the artifact: header, metadata, padding, weights.
    pub fn encode(&self) -> Result<Vec<u8>, ArtifactError> {
        let meta = rmp_serde::to_vec(self).map_err(|e| ArtifactError::Decode(e.to_string()))?;
        let pad = padding(meta.len());
        let mut padded = meta.clone();
        padded.resize(meta.len() + pad, 0);
        let mut checksum = Checksum::new();
        checksum.update(&padded);
        let weights: Vec<u8> = self.weights.iter().flat_map(|v| v.to_le_bytes()).collect();
        checksum.update(&weights);
        let mut out = Vec::with_capacity(HEADER_LEN + meta.len() + pad + weights.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&checksum.0.to_le_bytes());
        out.extend_from_slice(&(meta.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.weights.len() as u64).to_le_bytes());
        out.extend_from_slice(&padded);
        out.extend_from_slice(&weights);
        Ok(out)
    }

    /// Recomputes the checksum of an encoded artifact in place, after its metadata or weights
    /// were edited (fuzzing, corruption tests, tools). Returns `false`, leaving `image` unchanged,
    /// when the header is unreadable or its lengths disagree with the image's size.
    pub fn reseal(image: &mut [u8]) -> bool {
        let Ok(header) = parse_header(image) else {
            return false;
        };
        let pad = padding(header.meta_len);
        let body_len = header.meta_len as u128 + pad as u128 + header.weights_len as u128 * 4;
        if (image.len() - HEADER_LEN) as u128 != body_len {
            return false;
        }
        let body = &image[HEADER_LEN..];
        let mut checksum = Checksum::new();
        checksum.update(&body[..header.meta_len + pad]);
        checksum.update(&body[header.meta_len + pad..]);
        image[16..24].copy_from_slice(&checksum.0.to_le_bytes());
        true
    }

    /// Decodes and validates an artifact held in memory.
    pub fn decode(bytes: &[u8]) -> Result<Self, ArtifactError> {
        let header = parse_header(bytes)?;
        let body = &bytes[HEADER_LEN..];
        let pad = padding(header.meta_len);
        let expected = header.meta_len as u128 + pad as u128 + header.weights_len as u128 * 4;
        if (body.len() as u128) < expected {
            return Err(ArtifactError::Truncated(format!(
                "{} bytes after the header, the header announces {expected}",
                body.len()
            )));
        }
        if body.len() as u128 > expected {
            return Err(ArtifactError::Invalid(format!(
                "{} unexpected bytes at the end",
                body.len() as u128 - expected
            )));
        }
        // Two updates, as written: metadata with its padding, then the weights.
        let mut checksum = Checksum::new();
        checksum.update(&body[..header.meta_len + pad]);
        checksum.update(&body[header.meta_len + pad..]);
        if checksum.0 != header.checksum {
            return Err(ArtifactError::Checksum {
                stored: header.checksum,
                computed: checksum.0,
            });
        }
        let mut artifact: Artifact = rmp_serde::from_slice(&body[..header.meta_len])
            .map_err(|e| ArtifactError::Decode(e.to_string()))?;
        artifact.weights = body[header.meta_len + pad..]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        artifact.check_weights_len(header.weights_len)?;
        artifact.validate().map_err(ArtifactError::Invalid)?;
        Ok(artifact)
    }

    /// Reads, checks and validates an artifact from a stream, reading the weights straight into
    /// their buffer (peak memory: the weights plus the small metadata).
    pub fn read_from(mut reader: impl std::io::Read) -> Result<Self, ArtifactError> {
        let io = |what: &str, e: std::io::Error| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => {
                ArtifactError::Truncated(format!("the file ends inside the {what}"))
            }
            _ => ArtifactError::Truncated(format!("cannot read the {what}: {e}")),
        };
        let mut head = [0u8; HEADER_LEN];
        let mut got = 0;
        while got < HEADER_LEN {
            match reader.read(&mut head[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io("header", e)),
            }
        }
        let header = parse_header(&head[..got])?;
        let pad = padding(header.meta_len);
        let mut meta = vec![0u8; header.meta_len + pad];
        reader
            .read_exact(&mut meta)
            .map_err(|e| io("metadata", e))?;
        // The weights are read in chunks; the full buffer is reserved only once the first chunk
        // has arrived, so a short file that announces gigabytes fails without allocating them.
        let mut weights: Vec<f32> = Vec::new();
        while weights.len() < header.weights_len {
            let start = weights.len();
            let n = (header.weights_len - start).min(WEIGHT_CHUNK);
            let want = if start == 0 {
                n
            } else {
                header.weights_len - start
            };
            weights.try_reserve_exact(want).map_err(|_| {
                ArtifactError::Invalid(format!("cannot allocate {} weights", header.weights_len))
            })?;
            weights.resize(start + n, 0f32);
            reader
                .read_exact(as_bytes_mut(&mut weights[start..]))
                .map_err(|e| io("weights", e))?;
        }
        let mut extra = [0u8; 1];
        if matches!(reader.read(&mut extra), Ok(n) if n > 0) {
            return Err(ArtifactError::Invalid(
                "unexpected bytes after the weights".into(),
            ));
        }
        let mut checksum = Checksum::new();
        checksum.update(&meta);
        checksum.update(as_bytes_mut(&mut weights));
        if checksum.0 != header.checksum {
            return Err(ArtifactError::Checksum {
                stored: header.checksum,
                computed: checksum.0,
            });
        }
        to_le_in_place(&mut weights);
        let mut artifact: Artifact = rmp_serde::from_slice(&meta[..header.meta_len])
            .map_err(|e| ArtifactError::Decode(e.to_string()))?;
        artifact.weights = weights;
        artifact.check_weights_len(header.weights_len)?;
        artifact.validate().map_err(ArtifactError::Invalid)?;
        Ok(artifact)
    }

    fn check_weights_len(&self, from_header: usize) -> Result<(), ArtifactError> {
        if self.weights_len != from_header {
            return Err(ArtifactError::Invalid(format!(
                "metadata says {} weights, the header {from_header}",
                self.weights_len
            )));
        }
        Ok(())
    }

    /// Checks every index, size, offset and kernel geometry, so that running the artifact cannot
    /// read or write out of bounds. The message names the tensor or step.
    pub fn validate(&self) -> Result<(), String> {
        if self.weights.len() != self.weights_len {
            return Err(format!(
                "{} weights present, {} declared",
                self.weights.len(),
                self.weights_len
            ));
        }
        if self.arena_bytes > MAX_ARENA_BYTES {
            return Err(format!(
                "the arena of {} bytes exceeds this runtime's limit of {MAX_ARENA_BYTES} bytes",
                self.arena_bytes
            ));
        }
        let n_tensors = self.tensors.len();
        for (i, t) in self.tensors.iter().enumerate() {
            let what = || format!("tensor {i} '{}'", t.name);
            let elements = t
                .shape
                .iter()
                .try_fold(1usize, |a, &d| a.checked_mul(d))
                .ok_or_else(|| format!("{}: shape too large", what()))?;
            let size = t
                .dtype
                .size_bytes()
                .ok_or_else(|| format!("{}: unsupported type {}", what(), t.dtype))?;
            let bytes = elements
                .checked_mul(size)
                .ok_or_else(|| format!("{}: too large", what()))?;
            match t.storage {
                Storage::Arena { offset } => {
                    if t.dtype != DType::F32 {
                        return Err(format!(
                            "{}: activations must be FLOAT32, not {}",
                            what(),
                            t.dtype
                        ));
                    }
                    if offset % ARENA_ALIGN != 0
                        || offset
                            .checked_add(bytes)
                            .is_none_or(|end| end > self.arena_bytes)
                    {
                        return Err(format!("{}: arena range {offset}..+{bytes} is outside the {}-byte arena or unaligned", what(), self.arena_bytes));
                    }
                }
                Storage::Constant { offset } => {
                    if t.dtype != DType::F32
                        || offset % WEIGHT_ALIGN != 0
                        || offset
                            .checked_add(elements)
                            .is_none_or(|end| end > self.weights.len())
                    {
                        return Err(format!("{}: weights {offset}..+{elements} are outside the {} stored weights, unaligned or not FLOAT32", what(), self.weights.len()));
                    }
                }
            }
        }
        for (list, name) in [(&self.inputs, "input"), (&self.outputs, "output")] {
            for &t in list {
                match self.tensors.get(t) {
                    Some(TensorDesc {
                        storage: Storage::Arena { .. },
                        ..
                    }) => {}
                    Some(_) => return Err(format!("model {name} {t} is not an arena tensor")),
                    None => {
                        return Err(format!("model {name} refers to tensor {t} of {n_tensors}"))
                    }
                }
            }
        }
        for (s, step) in self.steps.iter().enumerate() {
            self.validate_step(step)
                .map_err(|e| format!("step {s} ({}): {e}", step.name))?;
        }
        Ok(())
    }

    fn validate_step(&self, step: &Step) -> Result<(), String> {
        let get = |t: usize| {
            self.tensors.get(t).ok_or_else(|| {
                format!("tensor {t} does not exist ({} tensors)", self.tensors.len())
            })
        };
        let inputs: Vec<Option<&TensorDesc>> = step
            .inputs
            .iter()
            .map(|t| t.map(get).transpose())
            .collect::<Result<_, _>>()?;
        let outputs: Vec<&TensorDesc> = step
            .outputs
            .iter()
            .map(|&t| get(t))
            .collect::<Result<_, _>>()?;
        let arena_range = |t: &TensorDesc| match t.storage {
            Storage::Arena { offset } => Some(offset..offset + t.bytes()),
            Storage::Constant { .. } => None,
        };
        for (i, out) in outputs.iter().enumerate() {
            let range = arena_range(out)
                .ok_or_else(|| format!("output {i} '{}' is a constant", out.name))?;
            let overlaps = |r: &std::ops::Range<usize>| {
                r.start < range.end && range.start < r.end && !range.is_empty() && !r.is_empty()
            };
            for inp in inputs.iter().flatten() {
                if arena_range(inp).is_some_and(|r| overlaps(&r)) {
                    return Err(format!(
                        "output '{}' overlaps input '{}' in the arena",
                        out.name, inp.name
                    ));
                }
            }
            for other in &outputs[..i] {
                if arena_range(other).is_some_and(|r| overlaps(&r)) {
                    return Err(format!(
                        "outputs '{}' and '{}' overlap in the arena",
                        out.name, other.name
                    ));
                }
            }
            if out.dtype != DType::F32 {
                return Err(format!(
                    "output '{}' is {}, kernels write FLOAT32",
                    out.name, out.dtype
                ));
            }
        }
        for inp in inputs.iter().flatten() {
            if inp.dtype != DType::F32 {
                return Err(format!(
                    "input '{}' is {}, kernels read FLOAT32",
                    inp.name, inp.dtype
                ));
            }
        }
        crate::cpu::check::check_kernel(&step.kernel, &inputs, &outputs)?;
        self.validate_gpu_part(step)
    }

    /// The placement and the GPU operands: activations equal the CPU operands, constants have
    /// the length of their GPU layout.
    fn validate_gpu_part(&self, step: &Step) -> Result<(), String> {
        let channels = crate::gpu::launch::split_channels(&step.kernel);
        if let Placement::Split { gpu_channels } = step.placement {
            match channels {
                Some(c) if gpu_channels > 0 && gpu_channels < c => {}
                Some(c) => {
                    return Err(format!(
                        "split with {gpu_channels} GPU channels of {c}: must be 1..{c}"
                    ))
                }
                None => return Err("only conv, depthwise and fully connected can be split".into()),
            }
        }
        if !step.placement.uses_gpu() {
            return if step.gpu_operands.is_empty() {
                Ok(())
            } else {
                Err("GPU operands on a CPU step".into())
            };
        }
        let device = self
            .gpu
            .as_ref()
            .ok_or("the step uses the GPU but the artifact names no GPU")?;
        if step.gpu_operands.len() != step.inputs.len() {
            return Err(format!(
                "{} GPU operands for {} inputs",
                step.gpu_operands.len(),
                step.inputs.len()
            ));
        }
        let range = step.placement.gpu_range(channels.unwrap_or(0));
        let variant = crate::gpu::launch::decide(&step.kernel, range, device).variant;
        let lengths = crate::gpu::layout::operand_lengths(&step.kernel, variant);
        for (i, (gpu, cpu)) in step.gpu_operands.iter().zip(&step.inputs).enumerate() {
            let Some(t) = gpu else {
                if cpu.is_some() && lengths.get(i).copied().flatten().is_none() {
                    return Err(format!("GPU operand {i} is missing"));
                }
                continue;
            };
            let desc = self.tensors.get(*t).ok_or_else(|| {
                format!(
                    "GPU operand {i}: tensor {t} does not exist ({} tensors)",
                    self.tensors.len()
                )
            })?;
            match (desc.storage.clone(), lengths.get(i).copied().flatten()) {
                (Storage::Constant { .. }, Some(n)) if desc.elements() != n => {
                    return Err(format!(
                        "GPU operand {i} '{}' has {} elements, its GPU layout {n}",
                        desc.name,
                        desc.elements()
                    ))
                }
                (Storage::Constant { .. }, _) => {}
                (Storage::Arena { .. }, _) if Some(*t) != *cpu => {
                    return Err(format!(
                        "GPU operand {i} '{}' is an activation other than the CPU operand",
                        desc.name
                    ))
                }
                (Storage::Arena { .. }, _) => {}
            }
        }
        Ok(())
    }
}
