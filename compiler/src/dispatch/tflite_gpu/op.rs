//! The per-operator record: what happened to one TFLite operator in the delegate and which
//! kernels it runs.

use super::kernel::{ConvFlavour, Kernel, KernelDispatch};
use serde::Serialize;

/// What the delegate does with an operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Fate {
    /// Runs the listed kernels.
    Dispatched,
    /// An element-wise op linked into the kernel of op `into` (no kernel of its own).
    FusedInto,
    /// A PAD merged into the padding of the conv, depthwise conv or pooling op `into`.
    MergedInto,
    /// An ADD or MUL with a constant folded into the weights or bias of op `into`.
    FoldedInto,
    /// A no-op the delegate removes (identity RESHAPE, single-input CONCATENATION).
    Removed,
    /// Computes a constant once (DEQUANTIZE or DENSIFY of constant weights): no kernel.
    Constant,
    /// Left to the CPU interpreter (no GPU kernel, unsupported type or attributes).
    NotDelegated,
    /// Accepted by the delegate's compatibility check but rejected when the delegate builds its
    /// graph: the delegate would fail to initialise on this model.
    Rejected,
}

impl Fate {
    /// Short label for tables.
    pub fn label(self) -> &'static str {
        match self {
            Fate::Dispatched => "dispatched",
            Fate::FusedInto => "fused into",
            Fate::MergedInto => "merged into",
            Fate::FoldedInto => "folded into",
            Fate::Removed => "removed",
            Fate::Constant => "constant",
            Fate::NotDelegated => "not delegated",
            Fate::Rejected => "rejected",
        }
    }
}

/// The implementation an operator ends up with, with stable numeric ids (predictor features).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Variant {
    /// No kernel of its own.
    None,
    ConvGeneric,
    ConvConstants,
    /// Winograd4x4To36 + ConvGeneric + Winograd36To4x4.
    Winograd,
    /// ConverterToConvWeights + ConvGeneric (runtime weights).
    ConvGenericDynamicWeights,
    /// A grouped convolution split into one convolution per group.
    GroupedSplit,
    DepthwiseConv3x3,
    DepthwiseConv,
    FullyConnected,
    /// FULLY_CONNECTED on a batch, run as ConvGeneric.
    ConvGenericFullyConnected,
    /// Kernels outside the spec, with approximate dispatch.
    Approximate,
}

impl Variant {
    /// Stable id: 0 for [`Variant::None`], then in declaration order.
    pub fn id(self) -> u32 {
        match self {
            Variant::None => 0,
            Variant::ConvGeneric => 1,
            Variant::ConvConstants => 2,
            Variant::Winograd => 3,
            Variant::ConvGenericDynamicWeights => 4,
            Variant::GroupedSplit => 5,
            Variant::DepthwiseConv3x3 => 6,
            Variant::DepthwiseConv => 7,
            Variant::FullyConnected => 8,
            Variant::ConvGenericFullyConnected => 9,
            Variant::Approximate => 10,
        }
    }

    /// The variant a list of kernels amounts to.
    pub fn of(kernels: &[KernelDispatch]) -> Variant {
        let has = |k: Kernel| kernels.iter().any(|d| d.name == k);
        let Some(first) = kernels.first() else {
            return Variant::None;
        };
        if first.name == Kernel::Split && kernels.len() > 2 {
            Variant::GroupedSplit
        } else if has(Kernel::Winograd4x4To36TileX6) || has(Kernel::Winograd4x4To36) {
            Variant::Winograd
        } else if first.name == Kernel::ConverterToConvWeights {
            Variant::ConvGenericDynamicWeights
        } else {
            match first.name {
                Kernel::ConvGeneric => match first.conv.map(|c| c.flavour) {
                    Some(ConvFlavour::FullyConnected) => Variant::ConvGenericFullyConnected,
                    _ => Variant::ConvGeneric,
                },
                Kernel::ConvConstants => Variant::ConvConstants,
                Kernel::DepthwiseConv3x3 => Variant::DepthwiseConv3x3,
                Kernel::DepthwiseConv => Variant::DepthwiseConv,
                Kernel::FullyConnected => Variant::FullyConnected,
                _ => Variant::Approximate,
            }
        }
    }
}

/// One TFLite operator in the delegate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OpDispatch {
    /// Position in execution order (as in `tandem inspect`).
    pub op_index: usize,
    /// TFLite operator name (`CONV_2D`, `CUSTOM:<name>`).
    pub op: String,
    /// Shape of the first output.
    pub output: Vec<usize>,
    pub fate: Fate,
    /// The op this one was fused, merged or folded into.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub into: Option<usize>,
    /// The delegate operation it runs as, when a transform changed it (e.g. a FULLY_CONNECTED
    /// on an H×W input runs as `CONVOLUTION_2D`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runs_as: Option<String>,
    pub variant: Variant,
    /// Kernels in launch order; empty unless `fate` is `dispatched`.
    pub kernels: Vec<KernelDispatch>,
    /// Ops fused, merged or folded into this one.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub absorbed: Vec<usize>,
    /// Why, and what changed (padding made explicit, PAD merged, activation linked, ...).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}
