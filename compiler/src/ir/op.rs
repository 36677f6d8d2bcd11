//! Operators of the IR and their typed attributes.

use crate::tflite::fb::BuiltinOperator;
use tandem_runtime::DType;

/// Activation fused into an operator's output (the TFLite `ActivationFunctionType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Activation {
    #[default]
    None,
    Relu,
    ReluN1To1,
    Relu6,
    Tanh,
    SignBit,
}

impl Activation {
    /// Short name for reports (`""` when there is none).
    pub fn label(self) -> &'static str {
        match self {
            Activation::None => "",
            Activation::Relu => "relu",
            Activation::ReluN1To1 => "relu_n1_to_1",
            Activation::Relu6 => "relu6",
            Activation::Tanh => "tanh",
            Activation::SignBit => "sign_bit",
        }
    }
}

/// Spatial padding scheme of convolutions and pools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Padding {
    /// Output size `ceil(in / stride)`; zeros added, the smaller half before.
    Same,
    /// No padding: output size `ceil((in - effective_kernel + 1) / stride)`.
    Valid,
}

/// Attributes of CONV_2D.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conv2d {
    pub padding: Padding,
    /// (height, width)
    pub stride: [usize; 2],
    /// (height, width)
    pub dilation: [usize; 2],
    pub activation: Activation,
}

/// Attributes of DEPTHWISE_CONV_2D.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DepthwiseConv2d {
    pub padding: Padding,
    pub stride: [usize; 2],
    pub dilation: [usize; 2],
    /// Output channels per input channel. Files may store 0 or a stale value; the weight shape is
    /// authoritative, see shape inference.
    pub depth_multiplier: usize,
    pub activation: Activation,
}

/// Attributes of AVERAGE_POOL_2D and MAX_POOL_2D.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pool2d {
    pub padding: Padding,
    pub stride: [usize; 2],
    /// (height, width)
    pub filter: [usize; 2],
    pub activation: Activation,
}

/// Attributes of TRANSPOSE_CONV (and of the custom `Convolution2DTransposeBias`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransposeConv {
    pub padding: Padding,
    pub stride: [usize; 2],
    pub activation: Activation,
}

/// Attributes of STRIDED_SLICE (bit masks over dimensions, as in TFLite).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StridedSlice {
    pub begin_mask: i32,
    pub end_mask: i32,
    pub ellipsis_mask: i32,
    pub new_axis_mask: i32,
    pub shrink_axis_mask: i32,
    /// `end` is an offset from `begin` rather than an index.
    pub offset: bool,
}

/// Element-wise binary arithmetic with broadcasting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryKind {
    Add,
    Sub,
    Mul,
    Div,
}

/// Element-wise unary activations that are operators of their own.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum UnaryKind {
    Logistic,
    Tanh,
    Relu,
    Relu6,
    ReluN1To1,
    HardSwish,
    LeakyRelu { alpha: f32 },
}

/// An operator with its typed attributes. Tensor operands live on the [`super::Node`].
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    Binary {
        kind: BinaryKind,
        activation: Activation,
    },
    Unary(UnaryKind),
    /// PRELU: `x >= 0 ? x : alpha * x` with a broadcast `alpha` tensor.
    Prelu,
    AveragePool2d(Pool2d),
    MaxPool2d(Pool2d),
    Concatenation {
        axis: i32,
        activation: Activation,
    },
    Conv2d(Conv2d),
    DepthwiseConv2d(DepthwiseConv2d),
    TransposeConv(TransposeConv),
    FullyConnected {
        activation: Activation,
        keep_num_dims: bool,
    },
    BatchMatMul {
        adj_x: bool,
        adj_y: bool,
    },
    Dequantize,
    Densify,
    Pad,
    PadV2,
    Mean {
        keep_dims: bool,
    },
    Reshape {
        /// The deprecated `new_shape` option, used when there is no shape input.
        new_shape: Option<Vec<i32>>,
    },
    Squeeze {
        dims: Vec<i32>,
    },
    Shape {
        out_type: DType,
    },
    Pack {
        axis: i32,
        values_count: usize,
    },
    StridedSlice(StridedSlice),
    Slice,
    Split {
        num_splits: usize,
    },
    Transpose,
    Softmax {
        beta: f32,
    },
    ResizeBilinear {
        align_corners: bool,
        half_pixel_centers: bool,
    },
    ResizeNearestNeighbor {
        align_corners: bool,
        half_pixel_centers: bool,
    },
    DepthToSpace {
        block_size: usize,
    },
    SpaceToDepth {
        block_size: usize,
    },
    /// The custom op `Convolution2DTransposeBias` (MediaPipe's transpose conv with bias): inputs
    /// input, weights [O, KH, KW, I], bias [O].
    TransposeConvBias(TransposeConv),
    /// Any other custom op, kept by name with its raw options. Its output shapes are taken from
    /// the file.
    Custom {
        name: String,
        options: Vec<u8>,
    },
    /// A builtin operator tandem does not model. Its output shapes are taken from the file.
    /// `has_options` records whether the file gave it builtin options: only option-less ones can
    /// be written back unchanged.
    OtherBuiltin {
        code: i32,
        has_options: bool,
    },
}

/// Name of the custom code of [`Op::TransposeConvBias`].
pub const TRANSPOSE_CONV_BIAS: &str = "Convolution2DTransposeBias";

impl Op {
    /// The TFLite builtin code this op is written as (`CUSTOM` for custom ops).
    pub fn builtin(&self) -> BuiltinOperator {
        use BuiltinOperator as B;
        match self {
            Op::Binary { kind, .. } => match kind {
                BinaryKind::Add => B::ADD,
                BinaryKind::Sub => B::SUB,
                BinaryKind::Mul => B::MUL,
                BinaryKind::Div => B::DIV,
            },
            Op::Unary(kind) => match kind {
                UnaryKind::Logistic => B::LOGISTIC,
                UnaryKind::Tanh => B::TANH,
                UnaryKind::Relu => B::RELU,
                UnaryKind::Relu6 => B::RELU6,
                UnaryKind::ReluN1To1 => B::RELU_N1_TO_1,
                UnaryKind::HardSwish => B::HARD_SWISH,
                UnaryKind::LeakyRelu { .. } => B::LEAKY_RELU,
            },
            Op::Prelu => B::PRELU,
            Op::AveragePool2d(_) => B::AVERAGE_POOL_2D,
            Op::MaxPool2d(_) => B::MAX_POOL_2D,
            Op::Concatenation { .. } => B::CONCATENATION,
            Op::Conv2d(_) => B::CONV_2D,
            Op::DepthwiseConv2d(_) => B::DEPTHWISE_CONV_2D,
            Op::TransposeConv(_) => B::TRANSPOSE_CONV,
            Op::FullyConnected { .. } => B::FULLY_CONNECTED,
            Op::BatchMatMul { .. } => B::BATCH_MATMUL,
            Op::Dequantize => B::DEQUANTIZE,
            Op::Densify => B::DENSIFY,
            Op::Pad => B::PAD,
            Op::PadV2 => B::PADV2,
            Op::Mean { .. } => B::MEAN,
            Op::Reshape { .. } => B::RESHAPE,
            Op::Squeeze { .. } => B::SQUEEZE,
            Op::Shape { .. } => B::SHAPE,
            Op::Pack { .. } => B::PACK,
            Op::StridedSlice(_) => B::STRIDED_SLICE,
            Op::Slice => B::SLICE,
            Op::Split { .. } => B::SPLIT,
            Op::Transpose => B::TRANSPOSE,
            Op::Softmax { .. } => B::SOFTMAX,
            Op::ResizeBilinear { .. } => B::RESIZE_BILINEAR,
            Op::ResizeNearestNeighbor { .. } => B::RESIZE_NEAREST_NEIGHBOR,
            Op::DepthToSpace { .. } => B::DEPTH_TO_SPACE,
            Op::SpaceToDepth { .. } => B::SPACE_TO_DEPTH,
            Op::TransposeConvBias(_) | Op::Custom { .. } => B::CUSTOM,
            Op::OtherBuiltin { code, .. } => B(*code),
        }
    }

    /// The op's name in reports: the schema's builtin name (`CONV_2D`), `CUSTOM:<name>` for custom
    /// ops, `BUILTIN_<code>` for builtin codes newer than our schema.
    pub fn type_name(&self) -> String {
        match self {
            Op::TransposeConvBias(_) => format!("CUSTOM:{TRANSPOSE_CONV_BIAS}"),
            Op::Custom { name, .. } => format!("CUSTOM:{name}"),
            other => builtin_name(other.builtin()),
        }
    }

    /// Whether the compiler may split this op's output channels between CPU and GPU.
    pub fn is_channel_splittable(&self) -> bool {
        matches!(
            self,
            Op::Conv2d(_) | Op::DepthwiseConv2d(_) | Op::FullyConnected { .. }
        )
    }

    /// The fused activation, for ops that carry one.
    pub fn activation(&self) -> Activation {
        match self {
            Op::Binary { activation, .. }
            | Op::Concatenation { activation, .. }
            | Op::FullyConnected { activation, .. } => *activation,
            Op::AveragePool2d(p) | Op::MaxPool2d(p) => p.activation,
            Op::Conv2d(c) => c.activation,
            Op::DepthwiseConv2d(c) => c.activation,
            Op::TransposeConv(c) | Op::TransposeConvBias(c) => c.activation,
            _ => Activation::None,
        }
    }
}

/// The schema name of a builtin code, or `BUILTIN_<code>` when our schema does not name it.
pub fn builtin_name(code: BuiltinOperator) -> String {
    code.variant_name()
        .map(str::to_string)
        .unwrap_or_else(|| format!("BUILTIN_{}", code.0))
}
