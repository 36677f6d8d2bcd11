//! What the delegate settles before choosing kernels: calculation precision (spec §3), tensor
//! storage (§4) and the work-group limit assumed for compiled kernels.

use super::gpu::{Gpu, Vendor};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Calculation precision of the delegate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Precision {
    /// F16 storage and arithmetic (precision loss allowed).
    F16,
    /// F16 storage, F32 accumulation (MAX_PRECISION ranked second).
    F32F16,
    /// The delegate's default options (MAX_PRECISION first).
    #[default]
    F32,
}

impl Precision {
    /// Bytes per weight element in constant memory (ConvConstants).
    pub fn weight_bytes(self) -> usize {
        match self {
            Precision::F32 => 4,
            Precision::F16 | Precision::F32F16 => 2,
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Precision::F16 => "F16",
            Precision::F32F16 => "F32_F16",
            Precision::F32 => "F32",
        })
    }
}

/// Tensor storage type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StorageType {
    Buffer,
    ImageBuffer,
    #[serde(rename = "texture_2d")]
    Texture2d,
    TextureArray,
    /// One RGBA texel per pixel, for tensors with fewer than 4 channels.
    #[serde(rename = "single_texture_2d")]
    SingleTexture2d,
}

impl StorageType {
    /// Whether kernels see this storage as a buffer (BUFFER or IMAGE_BUFFER).
    pub fn is_buffer_like(self) -> bool {
        matches!(self, StorageType::Buffer | StorageType::ImageBuffer)
    }
}

impl fmt::Display for StorageType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StorageType::Buffer => "BUFFER",
            StorageType::ImageBuffer => "IMAGE_BUFFER",
            StorageType::Texture2d => "TEXTURE_2D",
            StorageType::TextureArray => "TEXTURE_ARRAY",
            StorageType::SingleTexture2d => "SINGLE_TEXTURE_2D",
        })
    }
}

/// A GPU with the delegate's precision, storage and kernel work-group limit resolved. Every
/// selector takes one.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub gpu: Gpu,
    /// Precision after the fp16 check: a device without fp16 raises F16 and F32_F16 to F32.
    pub precision: Precision,
    /// Model-wide storage (per-tensor fallbacks come from [`Target::tensor_storage`]).
    pub storage: StorageType,
    /// CL_KERNEL_WORK_GROUP_SIZE assumed for every kernel.
    pub kernel_max_wg: usize,
}

impl Target {
    /// Resolves `gpu` with `precision` (the description's own precision when `None`).
    pub fn new(gpu: Gpu, precision: Option<Precision>) -> Target {
        let requested = precision.unwrap_or(gpu.spec.precision);
        let precision = if gpu.spec.fp16 {
            requested
        } else {
            Precision::F32
        };
        Target {
            storage: gpu.model_storage(),
            kernel_max_wg: gpu.kernel_max_work_group_size(),
            precision,
            gpu,
        }
    }

    /// The same target with another kernel work-group limit (at least 1).
    pub fn with_kernel_max_wg(mut self, kernel_max_wg: usize) -> Target {
        self.kernel_max_wg = kernel_max_wg.max(1);
        self
    }

    /// Storage of one tensor of BHWC shape `(b, h, w, c)`: textures hold tensors with fewer
    /// than 4 channels as SINGLE_TEXTURE_2D; a tensor that does not fit the image limits
    /// (width W*B, height H*ceil(C/4)) falls back to IMAGE_BUFFER where supported, else BUFFER.
    pub fn tensor_storage(&self, shape: [usize; 4]) -> StorageType {
        let [b, h, w, c] = shape;
        let spec = &self.gpu.spec;
        let textured = matches!(
            self.storage,
            StorageType::Texture2d | StorageType::TextureArray | StorageType::SingleTexture2d
        );
        if !textured {
            return self.storage;
        }
        let width_ok = w.saturating_mul(b) <= spec.image2d_max_width;
        let (storage, height) = if c < 4 {
            (StorageType::SingleTexture2d, h)
        } else if self.storage == StorageType::TextureArray {
            (StorageType::TextureArray, h)
        } else {
            (StorageType::Texture2d, h.saturating_mul(c.div_ceil(4)))
        };
        if width_ok && height <= spec.image2d_max_height {
            storage
        } else if self.gpu.supports_storage(StorageType::ImageBuffer) {
            StorageType::ImageBuffer
        } else {
            StorageType::Buffer
        }
    }

    pub fn vendor(&self) -> Vendor {
        self.gpu.vendor
    }
}
