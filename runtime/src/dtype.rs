//! Element types of tensors, as the TFLite format names them.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The element type of a tensor.
///
/// Covers every type a TFLite file can declare, so that any model can be inspected; kernels
/// support only a subset (float32 first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DType {
    F32,
    F16,
    BF16,
    F64,
    I4,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    Bool,
    String,
    Complex64,
    Complex128,
    Resource,
    Variant,
}

impl DType {
    /// Bytes per element, or `None` for types without a fixed element size (strings, resources,
    /// variants, and packed 4-bit integers).
    pub fn size_bytes(self) -> Option<usize> {
        use DType::*;
        match self {
            Bool | I8 | U8 => Some(1),
            F16 | BF16 | I16 | U16 => Some(2),
            F32 | I32 | U32 => Some(4),
            F64 | I64 | U64 | Complex64 => Some(8),
            Complex128 => Some(16),
            I4 | String | Resource | Variant => None,
        }
    }

    /// The TFLite schema name (`FLOAT32`, `INT8`, ...).
    pub fn tflite_name(self) -> &'static str {
        use DType::*;
        match self {
            F32 => "FLOAT32",
            F16 => "FLOAT16",
            BF16 => "BFLOAT16",
            F64 => "FLOAT64",
            I4 => "INT4",
            I8 => "INT8",
            I16 => "INT16",
            I32 => "INT32",
            I64 => "INT64",
            U8 => "UINT8",
            U16 => "UINT16",
            U32 => "UINT32",
            U64 => "UINT64",
            Bool => "BOOL",
            String => "STRING",
            Complex64 => "COMPLEX64",
            Complex128 => "COMPLEX128",
            Resource => "RESOURCE",
            Variant => "VARIANT",
        }
    }

    /// Whether values of this type are quantized integers in a float model's sense (int8/uint8/
    /// int16/int4 activations or weights carry scale and zero point).
    pub fn is_quantized_integer(self) -> bool {
        matches!(self, DType::I4 | DType::I8 | DType::U8 | DType::I16)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.tflite_name())
    }
}
