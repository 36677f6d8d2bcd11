//! White-box features of a layer's CPU or GPU part, and the executors the predictors model.
//!
//! A [`Layer`] is the op geometry a dataset row records; [`Layer::to_op`] turns it back into
//! the runtime's parameters, so the GPU features come from the runtime's own
//! [`tandem_runtime::gpu::dispatch::dispatch`] at compile time and are recorded from the same
//! function at measurement time.
//!
//! Executors: one per GPU kernel variant ([`Variant::name`]: `conv_generic`, `conv_winograd`,
//! `conv_constants`, `depthwise_3x3`, `depthwise_generic`, `fully_connected`) and one per CPU op
//! kind and thread count (`cpu_conv_t1`, `cpu_dwconv_t2`, `cpu_linear_t1`, …): the CPU runs a
//! different kernel per op kind, so separate models predict better than one per thread count.
//!
//! Grouped convolutions (the diagonalwise refactorization of depthwise layers) are their own op
//! kind, `gconv`, with executors of their own so that they do not pollute the dense models:
//! `cpu_gconv_tN` on the CPU and, on the GPU, `conv_grouped` (the generic conv kernel the runtime
//! dispatches grouped convolutions to; another variant `V` would be `V_grouped`). Their models
//! read [`GROUP_FEATURES`] after the op features ([`group_features`]).

use crate::dataset::{DispatchRecord, Row};
use crate::kernel_counts;
use tandem_runtime::cpu::conv::{self, ConvParams, ConvPath};
use tandem_runtime::cpu::depthwise::DepthwiseParams;
use tandem_runtime::cpu::fully_connected::FullyConnectedParams;
use tandem_runtime::cpu::packed_gemm::{KC, NR};
use tandem_runtime::cpu::Activation;
use tandem_runtime::gpu::device::DeviceInfo;
use tandem_runtime::gpu::dispatch::{dispatch, Dispatch, Variant};
use tandem_runtime::profile::LayerOp;

/// The kinds of splittable layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpKind {
    Conv,
    Depthwise,
    Linear,
    /// A grouped convolution (`groups > 1`), e.g. a refactorized depthwise layer.
    GroupedConv,
}

impl OpKind {
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Conv => "conv",
            OpKind::Depthwise => "dwconv",
            OpKind::Linear => "linear",
            OpKind::GroupedConv => "gconv",
        }
    }

    pub fn parse(s: &str) -> Option<OpKind> {
        match s {
            "conv" => Some(OpKind::Conv),
            "dwconv" => Some(OpKind::Depthwise),
            "linear" => Some(OpKind::Linear),
            "gconv" => Some(OpKind::GroupedConv),
            _ => None,
        }
    }
}

/// A layer's geometry as datasets record it (see [`crate::dataset`] for the linear mapping).
/// Convolutions have no dilation; `conv` ones have one group, `gconv` ones `groups > 1` (`cin`
/// and `cout` divisible by it); depthwise layers have multiplier `cout / cin`. `groups` is 1
/// for every other kind.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Layer {
    pub op: OpKind,
    pub n: usize,
    pub h: usize,
    pub w: usize,
    pub cin: usize,
    pub oh: usize,
    pub ow: usize,
    pub cout: usize,
    pub kh: usize,
    pub kw: usize,
    pub stride: usize,
    pub pad_t: usize,
    pub pad_l: usize,
    /// Convolution groups (1 except for `gconv`).
    pub groups: usize,
}

impl Layer {
    /// A fully-connected layer of `rows` rows, `depth` inputs and `units` outputs, in the
    /// dataset's mapping (`h` = `oh` = rows, `cin` = depth, `cout` = units).
    pub fn linear(rows: usize, depth: usize, units: usize) -> Layer {
        Layer {
            op: OpKind::Linear,
            n: 1,
            h: rows,
            w: 1,
            cin: depth,
            oh: rows,
            ow: 1,
            cout: units,
            kh: 1,
            kw: 1,
            stride: 1,
            pad_t: 0,
            pad_l: 0,
            groups: 1,
        }
    }

    /// The geometry of `op`, or why it is outside what the predictors model (dilated
    /// convolutions, unequal strides). A convolution with `groups > 1` is a `gconv` layer.
    pub fn from_op(op: &LayerOp) -> Result<Layer, String> {
        match op {
            LayerOp::Conv(p) => {
                if p.groups == 0 || p.dilation != [1, 1] || p.stride[0] != p.stride[1] {
                    return Err("dilated or unevenly strided convolution".into());
                }
                Ok(Layer {
                    op: if p.groups > 1 {
                        OpKind::GroupedConv
                    } else {
                        OpKind::Conv
                    },
                    n: p.input[0],
                    h: p.input[1],
                    w: p.input[2],
                    cin: p.input[3],
                    oh: p.output[1],
                    ow: p.output[2],
                    cout: p.output[3],
                    kh: p.kernel[0],
                    kw: p.kernel[1],
                    stride: p.stride[0],
                    pad_t: p.pad[0],
                    pad_l: p.pad[1],
                    groups: p.groups,
                })
            }
            LayerOp::Depthwise(p) => {
                if p.dilation != [1, 1] || p.stride[0] != p.stride[1] {
                    return Err("dilated or unevenly strided depthwise convolution".into());
                }
                Ok(Layer {
                    op: OpKind::Depthwise,
                    n: p.input[0],
                    h: p.input[1],
                    w: p.input[2],
                    cin: p.input[3],
                    oh: p.output[1],
                    ow: p.output[2],
                    cout: p.output[3],
                    kh: p.kernel[0],
                    kw: p.kernel[1],
                    stride: p.stride[0],
                    pad_t: p.pad[0],
                    pad_l: p.pad[1],
                    groups: 1,
                })
            }
            LayerOp::Linear(p) => Ok(Layer::linear(p.rows, p.depth, p.units)),
        }
    }

    /// The runtime parameters of this layer (no activation).
    pub fn to_op(&self) -> LayerOp {
        match self.op {
            OpKind::Conv | OpKind::GroupedConv => LayerOp::Conv(ConvParams {
                input: [self.n, self.h, self.w, self.cin],
                output: [self.n, self.oh, self.ow, self.cout],
                kernel: [self.kh, self.kw],
                stride: [self.stride, self.stride],
                dilation: [1, 1],
                pad: [self.pad_t, self.pad_l],
                groups: if self.op == OpKind::Conv {
                    1
                } else {
                    self.groups.max(1)
                },
                activation: Activation::None,
            }),
            OpKind::Depthwise => LayerOp::Depthwise(DepthwiseParams {
                input: [self.n, self.h, self.w, self.cin],
                output: [self.n, self.oh, self.ow, self.cout],
                kernel: [self.kh, self.kw],
                stride: [self.stride, self.stride],
                dilation: [1, 1],
                pad: [self.pad_t, self.pad_l],
                multiplier: self.multiplier(),
                activation: Activation::None,
            }),
            OpKind::Linear => LayerOp::Linear(FullyConnectedParams {
                rows: self.h,
                depth: self.cin,
                units: self.cout,
                activation: Activation::None,
            }),
        }
    }

    /// Multiply-adds per output channel.
    fn macs_per_channel(&self) -> f64 {
        let rows = match self.op {
            OpKind::Linear => self.h,
            _ => self.n * self.oh * self.ow,
        };
        (rows * self.reduction()) as f64
    }

    /// The length of each output channel's dot product (the GEMM's K on the CPU).
    fn reduction(&self) -> usize {
        match self.op {
            OpKind::Conv | OpKind::GroupedConv => self.kh * self.kw * self.cin / self.groups.max(1),
            OpKind::Depthwise => self.kh * self.kw,
            OpKind::Linear => self.cin,
        }
    }

    /// A depthwise layer's channel multiplier (output channels per input channel; at least 1).
    fn multiplier(&self) -> usize {
        (self.cout / self.cin.max(1)).max(1)
    }

    /// The input bytes a part of `channels` output channels reads: a depthwise part reads only
    /// its own input channels (`channels / multiplier`, rounded up), every other op all of them.
    fn part_input_bytes(&self, channels: usize) -> f64 {
        let read = if self.op == OpKind::Depthwise {
            channels.div_ceil(self.multiplier()).min(self.cin)
        } else {
            self.cin
        };
        4.0 * (self.n * self.h * self.w * read) as f64
    }

    /// The op features of computing `channels` of the output channels: geometry, FLOPs and
    /// bytes moved (the input the part reads, once: [`Self::part_input_bytes`]; the part's
    /// weights and output; the whole input tensor is a feature of its own), and what makes
    /// the kernels' cost jump rather than grow: the channel count's remainder against the
    /// CPU's 8- and 16-lane vectors, whether the part is the whole layer, and how far a pixel's
    /// (or a row's) channels in the input and output tensors are aligned ([`pixel_alignment`]).
    fn op_features(&self, channels: usize) -> Vec<f64> {
        let c = channels as f64;
        let flops = 2.0 * self.macs_per_channel() * c;
        let pixels = (self.n * self.oh * self.ow) as f64;
        let input = 4.0 * (self.n * self.h * self.w * self.cin) as f64;
        let weights = 4.0 * self.reduction() as f64 * c;
        let output = 4.0 * pixels * c;
        let bytes = self.part_input_bytes(channels) + weights + output;
        // Room for every feature an executor reads after these, so that extending does not
        // move the row (a sweep builds a few hundred).
        let mut row = Vec::with_capacity(ROW_CAPACITY);
        row.extend_from_slice(&[
            self.n as f64,
            self.h as f64,
            self.w as f64,
            self.cin as f64,
            self.oh as f64,
            self.ow as f64,
            self.cout as f64,
            self.kh as f64,
            self.stride as f64,
            c,
            flops,
            bytes,
            flops / bytes.max(1.0),
            pixels,
            self.reduction() as f64,
            input,
            weights,
            output,
            (channels % 8) as f64,
            (channels % 16) as f64,
            f64::from(u8::from(channels == self.cout)),
            pixel_alignment(self.cin) as f64,
            pixel_alignment(self.cout) as f64,
        ]);
        row
    }
}

/// The capacity [`Layer::op_features`] gives a feature row: more than any executor reads.
const ROW_CAPACITY: usize = 64;

/// The alignment, in floats up to a 64-byte cache line (16), of every pixel's channels in an
/// NHWC tensor of `channels` channels (of every row of a `[rows, channels]` matrix): the largest
/// power of two up to 16 that divides `channels`. Tensors start cache-line aligned, so with 16
/// every pixel does too, and a kernel's 16-float vector loads and stores along the channels
/// never straddle two lines; with less, most of them do. Measured on this host, CPU depthwise
/// layers whose channel count is a multiple of 16 ran 10–16% faster than forests without this
/// feature predicted (a multiple of 8: 4–10%), CPU convolutions 5% for the output's channels and
/// CPU linear layers 3% for the input's.
pub fn pixel_alignment(channels: usize) -> usize {
    1 << (channels | 16).trailing_zeros()
}

/// Names of the op features (`Layer::op_features` order).
pub const OP_FEATURES: [&str; 23] = [
    "n",
    "h",
    "w",
    "cin",
    "oh",
    "ow",
    "cout",
    "k",
    "stride",
    "channels",
    "flops",
    "part_bytes",
    "intensity",
    "pixels",
    "reduction",
    "input_bytes",
    "weight_bytes",
    "output_bytes",
    "channels_mod8",
    "channels_mod16",
    "whole_layer",
    "cin_alignment",
    "cout_alignment",
];

/// The op features the log-linear baseline under each forest regresses on (their `ln(1 + x)`):
/// FLOPs, bytes, output pixels and channels. Dispatch features in the baseline were tried and
/// extrapolated worse.
pub const BASELINE_FEATURES: [&str; 4] = ["flops", "part_bytes", "pixels", "channels"];

/// Names of the dispatch features (`dispatch_features` order).
pub const DISPATCH_FEATURES: [&str; 14] = [
    "bx",
    "by",
    "bc",
    "wg_x",
    "wg_y",
    "wg_z",
    "wg_size",
    "work_groups",
    "grid_x",
    "grid_y",
    "grid_z",
    "work_items",
    "lane_waste",
    "channel_offset",
];

fn dispatch_features(d: &DispatchRecord, c0: usize, c1: usize) -> [f64; DISPATCH_FEATURES.len()] {
    let items = (d.grid[0] * d.grid[1] * d.grid[2]) as f64;
    // Channels computed but not stored (block rounding at both ends of the range).
    let bc = d.block[2].max(1);
    let c_start = c0 / bc * bc;
    let covered = (c1.saturating_sub(c_start)).div_ceil(bc) * bc;
    let waste = covered.saturating_sub(c1 - c0) as f64;
    [
        d.block[0] as f64,
        d.block[1] as f64,
        d.block[2] as f64,
        d.work_group[0] as f64,
        d.work_group[1] as f64,
        d.work_group[2] as f64,
        (d.work_group[0] * d.work_group[1] * d.work_group[2]) as f64,
        d.groups as f64,
        d.grid[0] as f64,
        d.grid[1] as f64,
        d.grid[2] as f64,
        items,
        waste,
        (c0 - c_start) as f64,
    ]
}

/// The record of a runtime dispatch decision.
pub fn record(d: &Dispatch) -> DispatchRecord {
    DispatchRecord {
        block: d.block,
        work_group: d.work_group,
        groups: d.groups,
        grid: d.grid,
    }
}

/// The CPU executor for `op` with `threads` threads.
pub fn cpu_executor(op: OpKind, threads: usize) -> String {
    format!("cpu_{}_t{threads}", op.name())
}

/// The CPU loop that runs channels `[c0, c1)` of `layer`, as a dataset's CPU row records it in
/// `variant`: `"prefetch_rows"` for a depthwise range whose input reaches the runtime's
/// [`PREFETCH_FROM_BYTES`](tandem_runtime::cpu::depthwise::PREFETCH_FROM_BYTES)
/// ([`prefetches_rows`](tandem_runtime::cpu::depthwise::prefetches_rows)), otherwise empty:
/// the one loop every CPU op had when datasets began.
pub fn cpu_variant(layer: &Layer, c0: usize, c1: usize) -> &'static str {
    match layer.to_op() {
        LayerOp::Depthwise(p) if tandem_runtime::cpu::depthwise::prefetches_rows(&p, c0, c1) => {
            "prefetch_rows"
        }
        _ => "",
    }
}

/// What a GPU row's `variant` ends with when its depthwise part launched with the channel blocks
/// innermost ([`gpu_variant`]).
pub const CHANNELS_INNER_SUFFIX: &str = "/channels_inner";

/// What a GPU row's `variant` ends with when its depthwise part launched with the channel blocks
/// outermost ([`gpu_variant`]).
pub const CHANNELS_OUTER_SUFFIX: &str = "/channels_outer";

/// The GPU launch `d` of a part of `layer`, as a dataset's GPU row records it in `variant`: the
/// kernel variant's name, and for a depthwise part the grid order it launched with
/// ([`Dispatch::channels_inner`]): [`CHANNELS_INNER_SUFFIX`] or [`CHANNELS_OUTER_SUFFIX`].
/// Depthwise rows measured before the order existed carry the bare name.
pub fn gpu_variant(layer: &Layer, d: &Dispatch) -> String {
    let mut name = d.variant.name().to_string();
    if layer.op == OpKind::Depthwise {
        name.push_str(if d.channels_inner {
            CHANNELS_INNER_SUFFIX
        } else {
            CHANNELS_OUTER_SUFFIX
        });
    }
    name
}

/// Whether the runtime launches the GPU part `[c0, c1)` of `layer` channels-innermost (only
/// depthwise parts ever are).
pub fn gpu_channels_inner(layer: &Layer, c0: usize, c1: usize) -> bool {
    match layer.to_op() {
        LayerOp::Depthwise(p) => {
            tandem_runtime::gpu::dispatch::depthwise_channels_inner(&p, c0..c1)
        }
        _ => false,
    }
}

/// Whether an executor name is a CPU one.
pub fn is_cpu(executor: &str) -> bool {
    executor.starts_with("cpu_")
}

/// The GPU kernel variant a GPU executor models, [`gpu_executor`]'s inverse (`conv_grouped`
/// runs `conv_generic`'s kernel); `None` for the CPU executors.
pub fn executor_variant(executor: &str) -> Option<Variant> {
    Variant::ALL.into_iter().find(|&v| {
        gpu_executor(OpKind::Conv, v) == executor
            || gpu_executor(OpKind::GroupedConv, v) == executor
    })
}

/// The names of the loop-trip counts an executor's model reads last: a GPU executor's after
/// the dispatch features ([`crate::kernel_counts`]), a CPU depthwise one's after its kernel
/// features ([`crate::cpu_counts`]); empty for the other CPU executors. Profiles trained before
/// them read the features before them only (`Executor::kernel_counts`).
pub fn kernel_count_names(executor: &str) -> &'static [&'static str] {
    if is_cpu_depthwise(executor) {
        return &crate::cpu_counts::NAMES;
    }
    executor_variant(executor).map_or(&[], crate::kernel_counts::names)
}

/// The columns of an executor's features ([`feature_names`] order) that its additive cost
/// model regresses on ([`crate::forest::Additive`]): the kernel's loop-trip counts and the
/// bytes the part moves. Empty for an executor without counts, and without the dispatch
/// features (the counts follow from the dispatch decision).
pub fn additive_columns(executor: &str, with_dispatch: bool) -> Vec<usize> {
    let counts = kernel_count_names(executor);
    if !with_dispatch || counts.is_empty() {
        return Vec::new();
    }
    let names = feature_names(executor, true);
    std::iter::once("part_bytes")
        .chain(counts.iter().copied())
        .filter_map(|f| names.iter().position(|n| n == f))
        .collect()
}

/// The feature names of an executor's model (`with_dispatch`: with the GPU dispatch features
/// and the loop-trip counts after them, [`kernel_count_names`]: a GPU kernel's, or the CPU
/// depthwise loop's; without, the op and kernel features only).
pub fn feature_names(executor: &str, with_dispatch: bool) -> Vec<String> {
    let mut names: Vec<String> = OP_FEATURES.iter().map(|s| s.to_string()).collect();
    if is_grouped(executor) {
        names.extend(GROUP_FEATURES.iter().map(|s| s.to_string()));
    }
    if is_cpu_conv(executor) {
        names.extend(CPU_CONV_FEATURES.iter().map(|s| s.to_string()));
    }
    if is_cpu_depthwise(executor) {
        names.extend(CPU_DEPTHWISE_FEATURES.iter().map(|s| s.to_string()));
    }
    if with_dispatch {
        if !is_cpu(executor) {
            names.extend(DISPATCH_FEATURES.iter().map(|s| s.to_string()));
        }
        names.extend(kernel_count_names(executor).iter().map(|s| s.to_string()));
    }
    names
}

/// The features of a dataset row, with or without the recorded dispatch features.
pub fn row_features(row: &Row, with_dispatch: bool) -> Vec<f64> {
    let mut f = row.layer.op_features(row.c1 - row.c0);
    if is_grouped(&row.executor) {
        f.extend(group_features(&row.layer));
    }
    if is_cpu_conv(&row.executor) {
        f.extend(cpu_conv_features(&row.layer, row.c1, row.threads));
    }
    if is_cpu_depthwise(&row.executor) {
        f.extend(cpu_depthwise_features(&row.layer, row.c1));
        if with_dispatch {
            f.extend(cpu_depthwise_counts(&row.layer, row.c1));
        }
    }
    if !is_cpu(&row.executor) && with_dispatch {
        f.extend(dispatch_features(&row.dispatch, row.c0, row.c1));
        if let Some(v) = executor_variant(&row.executor) {
            f.extend(kernel_counts::counts(
                &row.layer,
                v,
                row.dispatch.block,
                row.c0,
                row.c1,
            ));
        }
    }
    f
}

/// The GPU part `[c − g, c)` of `layer`: its dispatch decision on `device` (the runtime's own
/// function) and its features, in [`feature_names`] order with dispatch features.
pub fn gpu_features(layer: &Layer, g: usize, device: &DeviceInfo) -> (Dispatch, Vec<f64>) {
    let op = layer.to_op();
    let c = layer.cout;
    let range = c - g.min(c)..c;
    let d = dispatch(op.gpu_op(), range.clone(), device);
    let mut f = layer.op_features(range.len());
    if layer.op == OpKind::GroupedConv {
        f.extend(group_features(layer));
    }
    f.extend(dispatch_features(&record(&d), range.start, range.end));
    f.extend(kernel_counts::counts(
        layer,
        d.variant,
        d.block,
        range.start,
        range.end,
    ));
    (d, f)
}

/// The CPU part `[0, c)` of `layer` with `threads` threads: its features, in [`feature_names`]
/// order for [`cpu_executor`]`(layer.op, threads)`.
pub fn cpu_features(layer: &Layer, c: usize, threads: usize) -> Vec<f64> {
    let c = c.min(layer.cout);
    let mut f = layer.op_features(c);
    if layer.op == OpKind::GroupedConv {
        f.extend(group_features(layer));
    }
    if matches!(layer.op, OpKind::Conv | OpKind::GroupedConv) {
        f.extend(cpu_conv_features(layer, c, threads));
    }
    if layer.op == OpKind::Depthwise {
        f.extend(cpu_depthwise_features(layer, c));
        f.extend(cpu_depthwise_counts(layer, c));
    }
    f
}

/// Names of the CPU convolution kernel's features ([`cpu_conv_features`] order), which the
/// `cpu_conv_tN` and `cpu_gconv_tN` executors read after the op (and group) features.
pub const CPU_CONV_FEATURES: [&str; 8] = [
    "path_pointwise",
    "path_direct",
    "task_pixels",
    "tasks",
    "k_blocks",
    "nr_panels",
    "nr_waste",
    "border_columns",
];

/// White-box features of the CPU convolution kernel computing channels `[0, c)` of `layer` with
/// `threads` threads, from the runtime's own plan ([`tandem_runtime::cpu::conv::plan`]): its
/// path (pointwise GEMM, direct rows, im2col), task tiling, GEMM depth blocks and column panels
/// (with the lanes wasted by the last panel), and the border columns that go through im2col.
/// On this host they took `cpu_conv_t1`'s fresh-dataset MAPE from 6.8% to 6.5% with the shipped
/// search grid (offline, with larger forests: 6.7% to 5.3–5.9%); the path does most of it.
pub fn cpu_conv_features(layer: &Layer, c: usize, threads: usize) -> Vec<f64> {
    let LayerOp::Conv(p) = layer.to_op() else {
        return Vec::new();
    };
    let plan = conv::plan(&p, 0, c, threads.max(1));
    let panels = c.div_ceil(NR);
    vec![
        f64::from(u8::from(plan.path == ConvPath::Pointwise)),
        f64::from(u8::from(plan.path == ConvPath::Direct)),
        plan.tile as f64,
        (p.input[0] * plan.tiles * plan.chunks) as f64,
        p.depth().div_ceil(KC) as f64,
        panels as f64,
        (panels * NR - c) as f64,
        conv::border_columns(&p) as f64,
    ]
}

/// Whether an executor is a CPU convolution one (reads [`CPU_CONV_FEATURES`]).
pub fn is_cpu_conv(executor: &str) -> bool {
    executor.starts_with("cpu_conv_") || executor.starts_with("cpu_gconv_")
}

/// Names of the CPU depthwise kernel's features ([`cpu_depthwise_features`] order), which the
/// `cpu_dwconv_tN` executors read after the op features.
pub const CPU_DEPTHWISE_FEATURES: [&str; 8] = [
    "dw_vector_blocks",
    "dw_narrow_channels",
    "dw_lanes",
    "dw_window_rows",
    "dw_interior_columns",
    "dw_part_input_bytes",
    "dw_row_window_bytes",
    "dw_lane_macs",
];

/// The vector width the depthwise features count blocks in: AVX-512's 16 floats, this
/// profile's host. On a narrower ISA the counts stay proportional to the kernel's work, and the
/// forest trained on that device learns its scale.
const DEPTHWISE_LANES: usize = 16;

/// White-box features of the CPU depthwise kernel ([`tandem_runtime::cpu::depthwise`])
/// computing channels `[0, c)` of `layer`, from its own geometry functions:
/// - how a row's channels are covered: full vector blocks (multiplier 1 and at least a vector of
///   channels; the last block overlaps the previous one) or, otherwise, blocks of 4 and single
///   channels, which cost several times more per channel; and the lanes computed per pixel;
/// - the output rows that run the register-window loops (3×3 kernels, stride 1 or 2, full
///   vector blocks, 2 or 3 kernel rows inside the input), and the output columns whose window
///   needs no padding checks;
/// - the input bytes the part reads (its own channels only) and the bytes of the input rows one
///   output row reads, which decide whether consecutive rows reuse them from the cache;
/// - multiply-adds over the computed lanes.
pub fn cpu_depthwise_features(layer: &Layer, c: usize) -> Vec<f64> {
    use tandem_runtime::cpu::depthwise::{interior_columns, taps};
    let LayerOp::Depthwise(p) = layer.to_op() else {
        return Vec::new();
    };
    let c = c.min(layer.cout);
    let full_vectors = p.multiplier == 1 && c >= DEPTHWISE_LANES;
    let (vector_blocks, narrow, lanes) = if full_vectors {
        let blocks = c.div_ceil(DEPTHWISE_LANES);
        (blocks, 0, blocks * DEPTHWISE_LANES)
    } else {
        (0, c, c)
    };
    let window_rows = if full_vectors && p.kernel == [3, 3] && matches!(p.stride[1], 1 | 2) {
        (0..p.output[1])
            .filter(|&oy| {
                let rows = taps(oy, p.stride[0], 1, p.pad[0], 3, p.input[1]);
                matches!(rows.len(), 2 | 3)
            })
            .count()
    } else {
        0
    };
    let in_channels = c.div_ceil(p.multiplier).min(p.input[3]);
    let [n, _, w, _] = p.input;
    let pixels = n * p.output[1] * p.output[2];
    vec![
        vector_blocks as f64,
        narrow as f64,
        lanes as f64,
        window_rows as f64,
        interior_columns(&p).len() as f64,
        layer.part_input_bytes(c),
        4.0 * (p.kernel[0] * w * in_channels) as f64,
        (pixels * p.kernel[0] * p.kernel[1] * lanes) as f64,
    ]
}

/// The loop-trip counts of the CPU depthwise loop computing channels `[0, c)` of `layer`
/// ([`crate::cpu_counts::depthwise`], in vectors of `DEPTHWISE_LANES`, 16); empty for another op.
pub fn cpu_depthwise_counts(layer: &Layer, c: usize) -> Vec<f64> {
    let LayerOp::Depthwise(p) = layer.to_op() else {
        return Vec::new();
    };
    crate::cpu_counts::depthwise(&p, 0, c.min(layer.cout), DEPTHWISE_LANES).to_vec()
}

/// Whether an executor is a CPU depthwise one (reads [`CPU_DEPTHWISE_FEATURES`]).
pub fn is_cpu_depthwise(executor: &str) -> bool {
    executor.starts_with("cpu_dwconv_")
}

/// Names of the grouped-convolution features ([`group_features`] order), which the `gconv`
/// executors read after the op features (and before the GPU dispatch features).
pub const GROUP_FEATURES: [&str; 3] = ["conv_groups", "group_in", "group_out"];

/// The grouped-convolution features of `layer`: groups, input and output channels per group.
pub fn group_features(layer: &Layer) -> [f64; GROUP_FEATURES.len()] {
    let g = layer.groups.max(1);
    [g as f64, (layer.cin / g) as f64, (layer.cout / g) as f64]
}

/// The GPU executor of a layer of kind `op` whose GPU part dispatches to `variant`: the
/// variant's name, except for grouped convolutions (`conv_grouped` for the generic conv kernel,
/// `V_grouped` for another variant `V`), so that they have models of their own.
pub fn gpu_executor(op: OpKind, variant: tandem_runtime::gpu::dispatch::Variant) -> String {
    if op != OpKind::GroupedConv {
        return variant.name().to_string();
    }
    match variant.name() {
        "conv_generic" => "conv_grouped".to_string(),
        other => format!("{other}_grouped"),
    }
}

/// Whether an executor models grouped convolutions (reads [`GROUP_FEATURES`]).
pub fn is_grouped(executor: &str) -> bool {
    executor.starts_with("cpu_gconv_") || executor.ends_with("_grouped")
}
