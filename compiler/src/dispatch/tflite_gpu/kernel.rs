//! The emulator's output record: one dispatched kernel with its grid, work group and group
//! count, and the names and stable ids of the kernels.

use super::work_group::{global_size, groups_count, Dim3};
use serde::Serialize;

/// A kernel of the delegate. The names of the kernels the spec covers are the delegate's own
/// (ConvGeneric, Winograd4x4To36TileX6, ...); the others are named after the delegate's task
/// classes and their dispatch is approximate (see [`Kernel::from_spec`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Kernel {
    ConvGeneric,
    ConvConstants,
    Winograd4x4To36TileX6,
    Winograd4x4To36,
    Winograd36To4x4Tile4x1,
    Winograd36To4x4,
    ConverterToConvWeights,
    DepthwiseConv3x3,
    DepthwiseConv,
    FullyConnected,
    ConvolutionTransposed,
    Pooling,
    Elementwise,
    ReLU,
    PReLU,
    QuantizeAndDequantize,
    ConcatZ,
    ConcatXY,
    Softmax,
    Softmax1x1,
    Reduce,
    Resize,
    Reshape,
    Transpose,
    Padding,
    DepthToSpace,
    SpaceToDepth,
    StridedSlice,
    Split,
    BatchedMatMul,
}

impl Kernel {
    /// Every kernel, in id order.
    pub const ALL: [Kernel; 30] = [
        Kernel::ConvGeneric,
        Kernel::ConvConstants,
        Kernel::Winograd4x4To36TileX6,
        Kernel::Winograd4x4To36,
        Kernel::Winograd36To4x4Tile4x1,
        Kernel::Winograd36To4x4,
        Kernel::ConverterToConvWeights,
        Kernel::DepthwiseConv3x3,
        Kernel::DepthwiseConv,
        Kernel::FullyConnected,
        Kernel::ConvolutionTransposed,
        Kernel::Pooling,
        Kernel::Elementwise,
        Kernel::ReLU,
        Kernel::PReLU,
        Kernel::QuantizeAndDequantize,
        Kernel::ConcatZ,
        Kernel::ConcatXY,
        Kernel::Softmax,
        Kernel::Softmax1x1,
        Kernel::Reduce,
        Kernel::Resize,
        Kernel::Reshape,
        Kernel::Transpose,
        Kernel::Padding,
        Kernel::DepthToSpace,
        Kernel::SpaceToDepth,
        Kernel::StridedSlice,
        Kernel::Split,
        Kernel::BatchedMatMul,
    ];

    /// The kernel's name, as in the spec where the spec names it.
    pub fn name(self) -> &'static str {
        match self {
            Kernel::ConvGeneric => "ConvGeneric",
            Kernel::ConvConstants => "ConvConstants",
            Kernel::Winograd4x4To36TileX6 => "Winograd4x4To36TileX6",
            Kernel::Winograd4x4To36 => "Winograd4x4To36",
            Kernel::Winograd36To4x4Tile4x1 => "Winograd36To4x4Tile4x1",
            Kernel::Winograd36To4x4 => "Winograd36To4x4",
            Kernel::ConverterToConvWeights => "ConverterToConvWeights",
            Kernel::DepthwiseConv3x3 => "DepthwiseConv3x3",
            Kernel::DepthwiseConv => "DepthwiseConv",
            Kernel::FullyConnected => "FullyConnected",
            Kernel::ConvolutionTransposed => "ConvolutionTransposed",
            Kernel::Pooling => "Pooling",
            Kernel::Elementwise => "Elementwise",
            Kernel::ReLU => "ReLU",
            Kernel::PReLU => "PReLU",
            Kernel::QuantizeAndDequantize => "QuantizeAndDequantize",
            Kernel::ConcatZ => "ConcatZ",
            Kernel::ConcatXY => "ConcatXY",
            Kernel::Softmax => "Softmax",
            Kernel::Softmax1x1 => "Softmax1x1",
            Kernel::Reduce => "Reduce",
            Kernel::Resize => "Resize",
            Kernel::Reshape => "Reshape",
            Kernel::Transpose => "Transpose",
            Kernel::Padding => "Padding",
            Kernel::DepthToSpace => "DepthToSpace",
            Kernel::SpaceToDepth => "SpaceToDepth",
            Kernel::StridedSlice => "StridedSlice",
            Kernel::Split => "Split",
            Kernel::BatchedMatMul => "BatchedMatMul",
        }
    }

    /// Stable numeric id (1-based position in [`Kernel::ALL`]); 0 is reserved for "no kernel".
    pub fn id(self) -> u32 {
        Kernel::ALL
            .iter()
            .position(|&k| k == self)
            .map_or(0, |p| p as u32 + 1)
    }

    /// Whether the spec gives this kernel's selection, grid and work group; for the others the
    /// emulator uses the output grid (W*B, H, ceil(C/4)) and the generic picker.
    pub fn from_spec(self) -> bool {
        matches!(
            self,
            Kernel::ConvGeneric
                | Kernel::ConvConstants
                | Kernel::Winograd4x4To36TileX6
                | Kernel::Winograd36To4x4Tile4x1
                | Kernel::DepthwiseConv3x3
                | Kernel::DepthwiseConv
                | Kernel::FullyConnected
        )
    }
}

/// Where a work group came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkGroupSource {
    /// Fixed by the kernel (one candidate).
    Fixed,
    /// The conv picker with fast tuning (§9.1).
    FastConv,
    /// The generic picker with fast tuning (§9.2).
    FastGeneric,
    /// First fitting entry of a kernel's candidate list (Winograd transforms).
    FirstFitting,
}

/// How ConvGeneric reads its weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum WeightsUpload {
    GlobalMem,
    ConstantMem,
    #[serde(rename = "TEXTURES_MEM_X4")]
    TexturesMemX4,
    LocalMemByThreads,
    LocalMemAsyncSubgroup,
    PrivateMemSimdBroadcast,
}

impl WeightsUpload {
    /// LOCAL_MEM_* uploads fix the work group.
    pub fn uses_local_memory(self) -> bool {
        matches!(
            self,
            WeightsUpload::LocalMemByThreads | WeightsUpload::LocalMemAsyncSubgroup
        )
    }
}

/// ConvGeneric grid layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GridMode {
    /// (tx*B, ty, ts), three dimensions.
    ThreeD,
    /// (tx*B*ty, ts), two dimensions.
    LinearSpatial,
    /// (tx*B*ty*ts), one dimension.
    LinearAll,
}

/// Which ConvGeneric construction produced the parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ConvFlavour {
    /// A convolution with constant weights.
    Conv,
    /// A convolution whose weights are a runtime tensor.
    DynamicWeights,
    /// FULLY_CONNECTED run as ConvGeneric (batched input).
    FullyConnected,
    /// The pointwise middle step of Winograd (`dwh` set).
    Winograd,
}

/// ConvGeneric's parameters (`GuessBestParams`, spec §5.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ConvGenericParams {
    /// Outputs per thread along (W, H, D, slices).
    pub block: [usize; 4],
    /// Source slices per loop iteration.
    pub src_loop: usize,
    pub weights_upload: WeightsUpload,
    /// Initial work group (used as is when fixed).
    pub work_group: Dim3,
    pub launch_order: Dim3,
    pub fixed_work_group: bool,
    pub grid_mode: GridMode,
    pub flavour: ConvFlavour,
}

/// One dispatched kernel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KernelDispatch {
    pub name: Kernel,
    /// Outputs per thread (W, H, D, slices): ConvGeneric's block, (2,2,1,1) for
    /// DepthwiseConv3x3, (1,1,1,S_dst) for ConvConstants; `None` elsewhere.
    pub block: Option<[usize; 4]>,
    /// Grid in threads; dimensions past `grid_dimension` are 1.
    pub grid: Dim3,
    pub work_group: Dim3,
    /// Work-group counts after the launch-order permutation.
    pub groups: Dim3,
    pub grid_dimension: usize,
    pub launch_order: Dim3,
    /// Launched NDRange (`groups * work_group`), padding threads included.
    pub global: Dim3,
    pub work_group_source: WorkGroupSource,
    /// ConvGeneric only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conv: Option<ConvGenericParams>,
    /// True when the spec covers this kernel; false for approximated ones.
    pub exact: bool,
}

impl KernelDispatch {
    /// A kernel with its group count and NDRange computed from `grid` and `work_group`.
    pub fn new(
        name: Kernel,
        grid: Dim3,
        grid_dimension: usize,
        work_group: Dim3,
        launch_order: Dim3,
        work_group_source: WorkGroupSource,
    ) -> KernelDispatch {
        let groups = groups_count(grid, work_group, grid_dimension, launch_order);
        KernelDispatch {
            name,
            block: None,
            grid,
            work_group,
            groups,
            grid_dimension,
            launch_order,
            global: global_size(groups, work_group),
            work_group_source,
            conv: None,
            exact: name.from_spec(),
        }
    }

    /// Sets the block.
    pub fn with_block(mut self, block: [usize; 4]) -> KernelDispatch {
        self.block = Some(block);
        self
    }

    /// Marks the dispatch as approximate.
    pub fn approximate(mut self) -> KernelDispatch {
        self.exact = false;
        self
    }

    /// Product of the group counts.
    pub fn total_groups(&self) -> usize {
        self.groups.iter().product()
    }

    /// Product of the NDRange: launched threads, padding included.
    pub fn total_threads(&self) -> usize {
        self.global.iter().product()
    }

    /// Product of the work group.
    pub fn work_group_size(&self) -> usize {
        self.work_group.iter().product()
    }
}
