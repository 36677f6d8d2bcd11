//! The GPU dispatch decision: one pure function from an op, the output-channel range the GPU
//! computes and the device description to the kernel variant, block sizes, work-group size and
//! grid. The runtime launches through it; the compiler calls it for the white-box features of
//! its latency predictors, so both always agree.

use super::device::DeviceInfo;
use crate::cpu::conv::ConvParams;
use crate::cpu::depthwise::DepthwiseParams;
use crate::cpu::fully_connected::FullyConnectedParams;
use serde::{Deserialize, Serialize};
use std::ops::Range;

/// A GPU kernel family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Variant {
    /// Weights in constant memory, one output pixel per work item (few input channels).
    ConvConstants,
    /// A block of BY x BX pixels by BC channels per work item.
    ConvGeneric,
    /// Winograd F(4x4, 3x3): input transform, 36 products, output transform.
    ConvWinograd,
    /// Any window, stride, dilation and depth multiplier.
    DepthwiseGeneric,
    /// 3x3, stride 1, no dilation, multiplier 1.
    Depthwise3x3,
    FullyConnected,
    /// Every other op: one element (or row) per work item.
    Elementwise,
}

impl Variant {
    pub const ALL: [Variant; 7] = [
        Variant::ConvConstants,
        Variant::ConvGeneric,
        Variant::ConvWinograd,
        Variant::DepthwiseGeneric,
        Variant::Depthwise3x3,
        Variant::FullyConnected,
        Variant::Elementwise,
    ];

    /// Snake-case name (CSV columns, executor names).
    pub fn name(self) -> &'static str {
        match self {
            Variant::ConvConstants => "conv_constants",
            Variant::ConvGeneric => "conv_generic",
            Variant::ConvWinograd => "conv_winograd",
            Variant::DepthwiseGeneric => "depthwise_generic",
            Variant::Depthwise3x3 => "depthwise_3x3",
            Variant::FullyConnected => "fully_connected",
            Variant::Elementwise => "elementwise",
        }
    }
}

/// The op a dispatch decision is made for.
#[derive(Debug, Clone, Copy)]
pub enum GpuOp<'a> {
    Conv(&'a ConvParams),
    Depthwise(&'a DepthwiseParams),
    FullyConnected(&'a FullyConnectedParams),
    /// Any other kernel, with its number of work items.
    Other {
        items: usize,
    },
}

/// How a GPU kernel is launched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dispatch {
    pub variant: Variant,
    /// Work per work item: conv `[BX, BY, BC]`, depthwise `[BX, 1, BC]`, fully connected
    /// `[BR, 1, BC]` (rows by units), Winograd `[BT, 1, BC]` (tiles by channels, of the product
    /// kernel), element-wise `[1, 1, 1]`.
    pub block: [usize; 3],
    pub work_group: [usize; 3],
    /// Global size in work items, a multiple of `work_group` in each dimension.
    pub grid: [usize; 3],
    /// Number of work groups.
    pub groups: usize,
    /// First channel of the first block: the channel range's start rounded down to a multiple of
    /// the block's channel count (weights are padded, so the block reads in bounds; lanes outside
    /// the range are not stored).
    pub c_start: usize,
    /// Depthwise parts: whether the grid has the channel blocks in dimension 0
    /// ([`depthwise_channels_inner`]); the kernel is built for that order. False for other ops.
    pub channels_inner: bool,
}

/// Rounds `c` up to the 8-channel blocks GPU weights are stored in.
pub fn pad8(c: usize) -> usize {
    c.div_ceil(8) * 8
}

/// Output channels per work item for a group size of `group_out` channels: 8, or the largest of
/// 4, 2, 1 that divides it (so that no vector crosses a group).
fn channel_block(groups: usize, group_out: usize) -> usize {
    if groups <= 1 {
        return 8;
    }
    [8, 4, 2, 1]
        .into_iter()
        .find(|b| group_out.is_multiple_of(*b))
        .unwrap_or(1)
}

/// The granularity of GPU channel counts for a split of this op: the channel block of its
/// kernel. Split points are rounded to multiples of it.
pub fn vector_width(op: GpuOp) -> usize {
    match op {
        GpuOp::Conv(p) => channel_block(p.groups, p.group_out()),
        GpuOp::Depthwise(_) | GpuOp::FullyConnected(_) => 8,
        GpuOp::Other { .. } => 1,
    }
}

/// Whether Winograd F(4x4, 3x3) applies and pays: 3x3, stride 1, no dilation, no groups, and
/// enough channels and tiles to amortise the transforms. Measured on PoCL (one thread) against
/// the generic kernel: Winograd is 1.3–3.8x faster on ResNet's 56x56x64 to 7x7x512 layers from
/// 8 GPU channels on, 1.3x at 8x8x16→32, even at 14x14x24→128 with 8 channels, and slower
/// only with a single output tile (a 4x4 output, up to 16 channels).
fn winograd_pays(p: &ConvParams, channels: usize) -> bool {
    let tiles = p.output[0] * p.output[1].div_ceil(4) * p.output[2].div_ceil(4);
    p.kernel == [3, 3]
        && p.stride == [1, 1]
        && p.dilation == [1, 1]
        && p.groups == 1
        && p.input[3] >= 8
        && channels >= 8
        && tiles >= 4
}

/// Whether the constant-weights kernel applies: few input channels per group and small weights
/// (at most 4 KiB, and what the device's constant memory holds). Measured on PoCL: it matches
/// the generic kernel on a 3x3x3x32 stem and is 2.5x slower on a 7x7x3x64 one.
fn constants_fit(p: &ConvParams, device: &DeviceInfo) -> bool {
    let bytes = (p.depth() * pad8(p.output[3]) * 4) as u64;
    let limit = device.max_constant_bytes.min(4 * 1024);
    p.group_in() <= 4 && bytes <= limit
}

/// Input bytes of a depthwise part from which its kernel launches with the channel blocks in
/// grid dimension 0 ([`depthwise_channels_inner`]): 4 MiB. Measured on PoCL (one thread, Zen 4
/// host, `cargo xtask bench dwgrid`, two runs): channels-innermost is 1.04–3.1x faster on the
/// parts past it but a 7x7 one (0.89–1.02x), and 1–14% slower on 3x3 stride-1 layers that fit
/// the caches, where the pixel-major walk keeps a block's weights.
pub const CHANNELS_INNER_FROM_BYTES: usize = 4 << 20;

/// Whether the GPU part computing output channels `channels` of depthwise layer `p` launches
/// with the channel blocks innermost (grid `(blocks, x, n * oh)`: a work group spans the
/// channels of a few pixels, and the device walks the image once) rather than outermost (grid
/// `(x, n * oh, blocks)`: the device walks the whole image once per 8-channel block, reading
/// each pixel's block at the channel stride, from memory when the image is past the caches).
/// Channels-innermost when the input the part reads reaches [`CHANNELS_INNER_FROM_BYTES`]. The
/// latency predictors record it with each measurement (`tandem profile`): the two walks time
/// differently.
pub fn depthwise_channels_inner(p: &DepthwiseParams, channels: Range<usize>) -> bool {
    p.range_input_bytes(channels.start, channels.end) >= CHANNELS_INNER_FROM_BYTES
}

/// How depthwise parts order their grid: by size (what sessions run), or one order whatever
/// the size (`cargo xtask bench dwgrid` times both).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DepthwiseGrid {
    /// [`depthwise_channels_inner`].
    #[default]
    BySize,
    ChannelsInner,
    ChannelsOuter,
}

impl DepthwiseGrid {
    /// Whether the part computing output channels `channels` of `p` launches channels-innermost.
    pub fn channels_inner(self, p: &DepthwiseParams, channels: Range<usize>) -> bool {
        match self {
            DepthwiseGrid::BySize => depthwise_channels_inner(p, channels),
            DepthwiseGrid::ChannelsInner => true,
            DepthwiseGrid::ChannelsOuter => false,
        }
    }
}

/// A depthwise grid `(x, rows, blocks)`, reordered to `(blocks, x, rows)` when `inner`.
fn depthwise_grid(inner: bool, [x, rows, blocks]: [usize; 3]) -> [usize; 3] {
    if inner {
        [blocks, x, rows]
    } else {
        [x, rows, blocks]
    }
}

/// A work-group shape for `items` work items per dimension, at most `target` items in all and
/// never more than the device allows; dimension 0 is filled first.
fn work_group(items: [usize; 3], target: usize, device: &DeviceInfo) -> [usize; 3] {
    let limit = target.min(device.max_work_group_size.max(1));
    let mut wg = [1usize; 3];
    let mut left = limit;
    for d in 0..3 {
        let mut w = 1;
        while w * 2 <= items[d].max(1) && w * 2 <= left {
            w *= 2;
        }
        wg[d] = w;
        left /= w;
    }
    wg
}

/// The global and work-group sizes for `items` work items per dimension, at most `target` per
/// work group (for launches that have no dispatch decision of their own, e.g. Winograd's
/// transforms).
pub fn launch_shape(
    items: [usize; 3],
    target: usize,
    device: &DeviceInfo,
) -> ([usize; 3], [usize; 3]) {
    let d = finish(Variant::Elementwise, [1, 1, 1], items, target, 0, device);
    (d.grid, d.work_group)
}

fn finish(
    variant: Variant,
    block: [usize; 3],
    items: [usize; 3],
    target: usize,
    c_start: usize,
    device: &DeviceInfo,
) -> Dispatch {
    let wg = work_group(items, target, device);
    let grid = [
        items[0].max(1).div_ceil(wg[0]) * wg[0],
        items[1].max(1).div_ceil(wg[1]) * wg[1],
        items[2].max(1).div_ceil(wg[2]) * wg[2],
    ];
    Dispatch {
        variant,
        block,
        work_group: wg,
        grid,
        groups: grid[0] / wg[0] * (grid[1] / wg[1]) * (grid[2] / wg[2]),
        c_start,
        channels_inner: false,
    }
}

impl Dispatch {
    fn with_channels_inner(self, channels_inner: bool) -> Dispatch {
        Dispatch {
            channels_inner,
            ..self
        }
    }
}

/// The launch of `op` computing output channels `channels` on `device`.
pub fn dispatch(op: GpuOp, channels: Range<usize>, device: &DeviceInfo) -> Dispatch {
    dispatch_with(op, channels, device, DepthwiseGrid::BySize)
}

/// [`dispatch`], with depthwise parts ordering their grid as `grid` says.
pub fn dispatch_with(
    op: GpuOp,
    channels: Range<usize>,
    device: &DeviceInfo,
    grid: DepthwiseGrid,
) -> Dispatch {
    let count = channels.end.saturating_sub(channels.start);
    match op {
        GpuOp::Conv(p) => {
            let bc = channel_block(p.groups, p.group_out());
            let c_start = channels.start / bc * bc;
            let blocks = channels.end.saturating_sub(c_start).div_ceil(bc);
            let [n, oh, ow, _] = p.output;
            if winograd_pays(p, count) {
                let tiles = n * oh.div_ceil(4) * ow.div_ceil(4);
                let bt = 4;
                return finish(
                    Variant::ConvWinograd,
                    [bt, 1, bc],
                    [tiles.div_ceil(bt), blocks, 36],
                    16,
                    c_start,
                    device,
                );
            }
            if constants_fit(p, device) {
                return finish(
                    Variant::ConvConstants,
                    [1, 1, bc],
                    [ow, n * oh, 1],
                    16,
                    c_start,
                    device,
                );
            }
            let bx = if ow >= 16 {
                4
            } else if ow >= 2 {
                2
            } else {
                1
            };
            let by = if oh >= 28 && ow >= 28 { 2 } else { 1 };
            finish(
                Variant::ConvGeneric,
                [bx, by, bc],
                [ow.div_ceil(bx), n * oh.div_ceil(by), blocks],
                16,
                c_start,
                device,
            )
        }
        GpuOp::Depthwise(p) => {
            let bc = 8;
            let c_start = channels.start / bc * bc;
            let blocks = channels.end.saturating_sub(c_start).div_ceil(bc);
            let [n, oh, ow, _] = p.output;
            let fast = p.kernel == [3, 3]
                && p.stride == [1, 1]
                && p.dilation == [1, 1]
                && p.multiplier == 1;
            let inner = grid.channels_inner(p, channels.clone());
            if fast {
                let bx = if ow >= 4 { 4 } else { 1 };
                finish(
                    Variant::Depthwise3x3,
                    [bx, 1, bc],
                    depthwise_grid(inner, [ow.div_ceil(bx), n * oh, blocks]),
                    16,
                    c_start,
                    device,
                )
                .with_channels_inner(inner)
            } else {
                finish(
                    Variant::DepthwiseGeneric,
                    [1, 1, bc],
                    depthwise_grid(inner, [ow, n * oh, blocks]),
                    16,
                    c_start,
                    device,
                )
                .with_channels_inner(inner)
            }
        }
        GpuOp::FullyConnected(p) => {
            let bc = 8;
            let c_start = channels.start / bc * bc;
            let blocks = channels.end.saturating_sub(c_start).div_ceil(bc);
            let br = if p.rows >= 4 { 4 } else { 1 };
            finish(
                Variant::FullyConnected,
                [br, 1, bc],
                [blocks, p.rows.div_ceil(br), 1],
                16,
                c_start,
                device,
            )
        }
        GpuOp::Other { items } => finish(
            Variant::Elementwise,
            [1, 1, 1],
            [items, 1, 1],
            64,
            0,
            device,
        ),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::cpu::Activation;
    use crate::gpu::device::SvmSupport;

    /// A device description like PoCL's on this project's machines.
    pub(crate) fn pocl_like() -> DeviceInfo {
        DeviceInfo {
            vendor: "test".into(),
            name: "cpu".into(),
            version: "OpenCL 3.0".into(),
            driver: "1".into(),
            is_gpu: false,
            compute_units: 2,
            max_work_group_size: 4096,
            global_mem_bytes: 1 << 34,
            local_mem_bytes: 1 << 20,
            max_constant_bytes: 1 << 20,
            svm: SvmSupport {
                coarse_buffer: true,
                fine_buffer: true,
                atomics: true,
            },
            opencl_c_2: false,
        }
    }

    fn conv(input: [usize; 4], cout: usize, k: usize, stride: usize, groups: usize) -> ConvParams {
        let oh = (input[1] - k) / stride + 1;
        let ow = (input[2] - k) / stride + 1;
        ConvParams {
            input,
            output: [input[0], oh, ow, cout],
            kernel: [k, k],
            stride: [stride, stride],
            dilation: [1, 1],
            pad: [0, 0],
            groups,
            activation: Activation::None,
        }
    }

    #[test]
    fn picks_the_variant_by_shape() {
        let d = pocl_like();
        let big = conv([1, 58, 58, 64], 64, 3, 1, 1);
        assert_eq!(
            dispatch(GpuOp::Conv(&big), 0..64, &d).variant,
            Variant::ConvWinograd
        );
        // A part of 8 channels still pays for the transforms.
        assert_eq!(
            dispatch(GpuOp::Conv(&big), 56..64, &d).variant,
            Variant::ConvWinograd
        );
        // Too few tiles (a 4x4 output is one) or input channels for them to pay.
        let tiny = conv([1, 6, 6, 64], 64, 3, 1, 1);
        assert_eq!(
            dispatch(GpuOp::Conv(&tiny), 0..64, &d).variant,
            Variant::ConvGeneric
        );
        let thin = conv([1, 58, 58, 4], 64, 3, 1, 1);
        assert_ne!(
            dispatch(GpuOp::Conv(&thin), 0..64, &d).variant,
            Variant::ConvWinograd
        );
        let stem = conv([1, 225, 225, 3], 32, 3, 2, 1);
        assert_eq!(
            dispatch(GpuOp::Conv(&stem), 0..32, &d).variant,
            Variant::ConvConstants
        );
        let strided = conv([1, 57, 57, 64], 128, 3, 2, 1);
        assert_eq!(
            dispatch(GpuOp::Conv(&strided), 0..128, &d).variant,
            Variant::ConvGeneric
        );
    }

    #[test]
    fn grids_cover_the_channel_range_in_blocks() {
        let d = pocl_like();
        let p = conv([1, 30, 30, 16], 100, 3, 2, 1);
        for (c0, c1) in [(0, 100), (3, 100), (40, 41), (96, 100)] {
            let x = dispatch(GpuOp::Conv(&p), c0..c1, &d);
            assert_eq!(x.c_start % 8, 0);
            assert!(x.c_start <= c0 && c0 - x.c_start < 8);
            let bc = x.block[2];
            // The channel dimension of the grid covers [c_start, c1).
            let covered = x.grid[2] * bc;
            assert!(x.c_start + covered >= c1, "{c0}..{c1}: {x:?}");
            for dim in 0..3 {
                assert_eq!(x.grid[dim] % x.work_group[dim], 0);
            }
            assert!(x.work_group.iter().product::<usize>() <= d.max_work_group_size);
        }
    }

    #[test]
    fn grouped_convs_use_blocks_that_divide_the_group() {
        let d = pocl_like();
        let p = conv([1, 20, 20, 24], 12, 3, 1, 4);
        // 3 output channels per group: one channel per work item.
        assert_eq!(vector_width(GpuOp::Conv(&p)), 1);
        assert_eq!(dispatch(GpuOp::Conv(&p), 0..12, &d).block[2], 1);
        let q = conv([1, 20, 20, 32], 16, 3, 1, 4);
        assert_eq!(vector_width(GpuOp::Conv(&q)), 4);
    }

    #[test]
    fn work_groups_respect_the_device_limit() {
        let mut d = pocl_like();
        d.max_work_group_size = 8;
        let x = dispatch(GpuOp::Other { items: 1000 }, 0..0, &d);
        assert!(x.work_group[0] <= 8);
        assert!(x.grid[0] >= 1000);
        let x = dispatch(GpuOp::Other { items: 3 }, 0..0, &d);
        assert_eq!(x.grid[0] % x.work_group[0], 0);
    }
}
