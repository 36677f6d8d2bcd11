//! The graph-level half of the emulation: how the delegate parses each TFLite operator (spec
//! §1.1), the graph transforms that change kernels (§1.2: no-op removal, 1x1 conv on a 1x1
//! input → FULLY_CONNECTED, PAD merged into the next conv/depthwise/pooling, constant ADD/MUL
//! folded into conv weights), kernel selection per node, and element-wise fusion (§1.6).

use super::conv::{approximate_kernel, select_conv};
use super::depthwise::select_depthwise;
use super::desc::{bhwc, ConvDesc, DepthwiseDesc, FcDesc, Padding2d};
use super::fully_connected::select_fully_connected;
use super::kernel::{Kernel, KernelDispatch, WorkGroupSource};
use super::op::{Fate, OpDispatch, Variant};
use super::target::Target;
use super::work_group::conv_work_group;
use crate::ir::op::StridedSlice;
use crate::ir::{Activation, BinaryKind, Graph, Op, TensorId, UnaryKind};
use anyhow::Result;
use std::collections::{HashMap, HashSet};
use tandem_runtime::DType;

/// A node of the delegate's graph and the selector it goes to.
#[derive(Debug, Clone)]
enum Lowered {
    Conv(ConvDesc),
    Depthwise(DepthwiseDesc),
    FullyConnected(FcDesc),
    /// Pooling; PAD may merge into it.
    Pool {
        dst: [usize; 4],
    },
    /// PAD/PADV2; `spatial` is its padding when it pads only H and W with zeros (mergeable).
    Pad {
        dst: [usize; 4],
        spatial: Option<Padding2d>,
    },
    /// A linkable element-wise op. `foldable`: an ADD or MUL of one runtime tensor and a scalar
    /// or per-channel constant.
    Elementwise {
        kernel: Kernel,
        dst: [usize; 4],
        foldable: bool,
    },
    /// Any other kernel, with approximate dispatch (`conv_picker`: its work group comes from the
    /// conv picker rather than the generic one).
    Other {
        kernel: Kernel,
        dst: [usize; 4],
        conv_picker: bool,
    },
}

/// What becomes of one TFLite operator; the transforms move ops from `Gpu` to the absorbed
/// states (`MergedInto`, `FoldedInto`, `FusedInto`, with the absorbing op's position).
#[derive(Debug, Clone)]
enum Plan {
    Gpu(Lowered),
    Constant,
    Removed,
    NotDelegated(String),
    Rejected(String),
    MergedInto(usize),
    FoldedInto(usize),
    FusedInto(usize),
}

/// One TFLite operator (by execution position) during the emulation.
struct OpState {
    name: String,
    inputs: Vec<Option<TensorId>>,
    outputs: Vec<TensorId>,
    /// The activation the node's output carries (its own fused one, or one folded in).
    activation: Activation,
    plan: Plan,
    runs_as: Option<String>,
    notes: Vec<String>,
    kernels: Vec<KernelDispatch>,
    absorbed: Vec<usize>,
}

/// The emulation state. `alias` maps the output of an op that disappeared (removed no-op, merged
/// PAD, folded ADD/MUL) to the tensor that now stands for it.
struct Emulation<'a> {
    graph: &'a Graph,
    target: &'a Target,
    ops: Vec<OpState>,
    op_attrs: Vec<Op>,
    producer: HashMap<TensorId, usize>,
    alias: HashMap<TensorId, TensorId>,
    graph_inputs: HashSet<TensorId>,
}

fn is_data_dtype(d: DType) -> bool {
    matches!(d, DType::F32 | DType::F16 | DType::I8 | DType::U8)
}

/// Operand slots that may hold a runtime tensor; any other slot must be constant.
fn runtime_slots(op: &Op, n_inputs: usize) -> Vec<usize> {
    match op {
        Op::Binary { .. }
        | Op::Prelu
        | Op::Conv2d(_)
        | Op::DepthwiseConv2d(_)
        | Op::FullyConnected { .. }
        | Op::BatchMatMul { .. } => vec![0, 1],
        Op::Concatenation { .. } | Op::Pack { .. } => (0..n_inputs).collect(),
        Op::TransposeConv(_) => vec![2],
        Op::Split { .. } => vec![1],
        Op::OtherBuiltin { .. } => (0..n_inputs).collect(),
        _ => vec![0],
    }
}

/// Built-in operators tandem keeps as `OtherBuiltin` that the delegate runs as linkable
/// element-wise kernels.
const ELEMENTWISE_BUILTINS: [&str; 17] = [
    "ABS",
    "COS",
    "ELU",
    "EXP",
    "FLOOR",
    "GELU",
    "LOG",
    "NEG",
    "RSQRT",
    "SIN",
    "SQRT",
    "SQUARE",
    "MAXIMUM",
    "MINIMUM",
    "POW",
    "SQUARED_DIFFERENCE",
    "QUANTIZE",
];

impl<'a> Emulation<'a> {
    fn new(graph: &'a Graph, target: &'a Target) -> Result<Emulation<'a>> {
        let order = graph.execution_order()?;
        let mut ops = Vec::with_capacity(order.len());
        let mut op_attrs = Vec::with_capacity(order.len());
        let mut producer = HashMap::new();
        for (pos, &n) in order.iter().enumerate() {
            let node = &graph.dag[n];
            for &t in &node.outputs {
                producer.insert(t, pos);
            }
            ops.push(OpState {
                name: node.op.type_name(),
                inputs: node.inputs.clone(),
                outputs: node.outputs.clone(),
                activation: node.op.activation(),
                plan: Plan::Constant,
                runs_as: None,
                notes: Vec::new(),
                kernels: Vec::new(),
                absorbed: Vec::new(),
            });
            op_attrs.push(node.op.clone());
        }
        Ok(Emulation {
            graph,
            target,
            ops,
            op_attrs,
            producer,
            alias: HashMap::new(),
            graph_inputs: graph.inputs.iter().copied().collect(),
        })
    }

    fn shape(&self, t: TensorId) -> &[usize] {
        &self.graph.tensor(t).shape
    }

    /// Constant data, or the output of an op that only computes a constant.
    fn is_const(&self, t: TensorId) -> bool {
        if self.graph.tensor(t).data.is_some() {
            return true;
        }
        match self.producer.get(&t) {
            Some(&p) => matches!(self.ops[p].plan, Plan::Constant),
            None => false,
        }
    }

    fn resolve(&self, mut t: TensorId) -> TensorId {
        let mut steps = 0;
        while let Some(&next) = self.alias.get(&t) {
            t = next;
            steps += 1;
            if steps > self.ops.len() {
                break;
            }
        }
        t
    }

    /// Runtime operands of op `pos` in slot order, with their slots.
    fn runtime_inputs(&self, pos: usize) -> Vec<(usize, TensorId)> {
        self.ops[pos]
            .inputs
            .iter()
            .enumerate()
            .filter_map(|(slot, t)| t.map(|t| (slot, t)))
            .filter(|&(_, t)| !self.is_const(t))
            .collect()
    }

    fn is_graph_output(&self, t: TensorId) -> bool {
        self.graph.outputs.iter().any(|&o| self.resolve(o) == t)
    }

    /// Delegate-graph consumers of `t`: (op, index among that op's runtime inputs).
    fn consumers(&self, t: TensorId) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        for (pos, op) in self.ops.iter().enumerate() {
            if matches!(
                op.plan,
                Plan::Removed | Plan::MergedInto(_) | Plan::FoldedInto(_) | Plan::Constant
            ) {
                continue;
            }
            for (k, (_, input)) in self.runtime_inputs(pos).into_iter().enumerate() {
                if self.resolve(input) == t {
                    out.push((pos, k));
                }
            }
        }
        out
    }

    fn input_shape(&self, pos: usize, slot: usize) -> Option<Vec<usize>> {
        self.ops[pos]
            .inputs
            .get(slot)
            .copied()
            .flatten()
            .map(|t| self.shape(t).to_vec())
    }

    fn output_bhwc(&self, pos: usize) -> Option<[usize; 4]> {
        self.ops[pos]
            .outputs
            .first()
            .and_then(|&t| bhwc(self.shape(t)))
    }

    /// How the delegate parses op `pos` (§1.1), before graph transforms.
    fn classify(&self, pos: usize) -> (Plan, Option<String>, Vec<String>) {
        let op = &self.op_attrs[pos];
        let state = &self.ops[pos];
        let runtime = self.runtime_inputs(pos);
        let not = |why: String| (Plan::NotDelegated(why), None, Vec::new());
        let rejected = |why: String| (Plan::Rejected(why), None, Vec::new());

        if matches!(op, Op::Dequantize | Op::Densify) && runtime.is_empty() {
            return (Plan::Constant, None, Vec::new());
        }
        if let Op::Custom { name, .. } = op {
            return not(format!("the delegate has no kernel for custom op {name}"));
        }
        if runtime.is_empty() {
            return not("no runtime input".to_string());
        }
        let allowed = runtime_slots(op, state.inputs.len());
        if let Some(&(slot, _)) = runtime.iter().find(|(s, _)| !allowed.contains(s)) {
            return not(format!(
                "operand {slot} is computed at run time; the delegate needs it constant"
            ));
        }
        for &(_, t) in &runtime {
            let tensor = self.graph.tensor(t);
            if !is_data_dtype(tensor.dtype) {
                return not(format!(
                    "operand '{}' is {}; the delegate takes float and 8-bit tensors",
                    tensor.name, tensor.dtype
                ));
            }
            if tensor.shape.len() > 4 {
                return not(format!("rank-{} operand", tensor.shape.len()));
            }
        }
        for &t in &state.outputs {
            let tensor = self.graph.tensor(t);
            if !is_data_dtype(tensor.dtype) {
                return not(format!(
                    "output '{}' is {}; the delegate takes float and 8-bit tensors",
                    tensor.name, tensor.dtype
                ));
            }
            if tensor.shape.len() > 4 {
                return not(format!("rank-{} output", tensor.shape.len()));
            }
        }
        let Some(dst) = self.output_bhwc(pos) else {
            return not("no output".to_string());
        };
        let src = bhwc(self.shape(runtime[0].1)).unwrap_or([1, 1, 1, 1]);
        let gpu = |l: Lowered| (Plan::Gpu(l), None, Vec::new());
        let other = |kernel: Kernel| {
            gpu(Lowered::Other {
                kernel,
                dst,
                conv_picker: false,
            })
        };
        let elementwise = |kernel: Kernel| {
            gpu(Lowered::Elementwise {
                kernel,
                dst,
                foldable: false,
            })
        };
        match op {
            Op::Conv2d(c) => {
                let Some(w) = self.input_shape(pos, 1).filter(|w| w.len() == 4) else {
                    return rejected("CONV_2D weights are not 4-D".to_string());
                };
                let (o, kh, kw, i) = (w[0], w[1], w[2], w[3]);
                let [b, h, wd, ch] = src;
                if i == 0 || !ch.is_multiple_of(i) {
                    return rejected(format!(
                        "input channels {ch} are not a multiple of the weights' {i}"
                    ));
                }
                let runtime_weights = runtime.iter().any(|&(s, _)| s == 1);
                let padding =
                    Padding2d::from_scheme(c.padding, [h, wd], [kh, kw], c.stride, c.dilation);
                if !runtime_weights && i == 1 && ch == o && ch > 0 {
                    let desc = DepthwiseDesc {
                        batch: b,
                        src: [h, wd, ch],
                        dst: [dst[1], dst[2], dst[3]],
                        kernel: [kh, kw],
                        stride: c.stride,
                        dilation: c.dilation,
                        padding,
                        multiplier: 1,
                        runtime_weights: false,
                    };
                    return (
                        Plan::Gpu(Lowered::Depthwise(desc)),
                        Some("DEPTHWISE_CONVOLUTION".to_string()),
                        vec!["one input channel per group: parsed as a depthwise conv".to_string()],
                    );
                }
                let desc = ConvDesc {
                    batch: b,
                    src: [h, wd, ch],
                    dst: [dst[1], dst[2], dst[3]],
                    kernel: [kh, kw],
                    stride: c.stride,
                    dilation: c.dilation,
                    padding,
                    groups: ch / i,
                    runtime_weights,
                };
                gpu(Lowered::Conv(desc))
            }
            Op::DepthwiseConv2d(d) => {
                let Some(w) = self.input_shape(pos, 1).filter(|w| w.len() == 4) else {
                    return rejected("DEPTHWISE_CONV_2D weights are not 4-D".to_string());
                };
                let [b, h, wd, ch] = src;
                if ch == 0 || !dst[3].is_multiple_of(ch) {
                    return rejected(format!(
                        "output channels {} are not a multiple of the input's {ch}",
                        dst[3]
                    ));
                }
                let multiplier = dst[3] / ch;
                let runtime_weights = runtime.iter().any(|&(s, _)| s == 1);
                if runtime_weights && multiplier != 1 {
                    return not("runtime depthwise weights with a channel multiplier".to_string());
                }
                gpu(Lowered::Depthwise(DepthwiseDesc {
                    batch: b,
                    src: [h, wd, ch],
                    dst: [dst[1], dst[2], dst[3]],
                    kernel: [w[1], w[2]],
                    stride: d.stride,
                    dilation: d.dilation,
                    padding: Padding2d::from_scheme(
                        d.padding,
                        [h, wd],
                        [w[1], w[2]],
                        d.stride,
                        d.dilation,
                    ),
                    multiplier,
                    runtime_weights,
                }))
            }
            Op::FullyConnected { .. } => {
                let Some(w) = self.input_shape(pos, 1).filter(|w| w.len() == 2) else {
                    return rejected("FULLY_CONNECTED weights are not 2-D".to_string());
                };
                let (o, i) = (w[0], w[1]);
                let [b, h, wd, ch] = src;
                let runtime_weights = runtime.iter().any(|&(s, _)| s == 1);
                let conv = |runtime_weights: bool| ConvDesc {
                    batch: b,
                    src: [h, wd, ch],
                    dst: [h, wd, o],
                    kernel: [1, 1],
                    stride: [1, 1],
                    dilation: [1, 1],
                    padding: Padding2d::default(),
                    groups: 1,
                    runtime_weights,
                };
                if runtime_weights {
                    return (
                        Plan::Gpu(Lowered::Conv(conv(true))),
                        Some("CONVOLUTION_2D".to_string()),
                        vec!["runtime weights: parsed as a convolution".to_string()],
                    );
                }
                if ch != i {
                    return rejected(format!(
                        "input channels {ch} differ from the weights' width {i} (a flattening \
                         FULLY_CONNECTED): the delegate's parser fails"
                    ));
                }
                if h != 1 || wd != 1 {
                    return (
                        Plan::Gpu(Lowered::Conv(conv(false))),
                        Some("CONVOLUTION_2D".to_string()),
                        vec![format!("input is {h}x{wd}: parsed as a 1x1 convolution")],
                    );
                }
                gpu(Lowered::FullyConnected(FcDesc {
                    batch: b,
                    src_channels: i,
                    dst_channels: o,
                    batch_supported: b > 1 || dst[0] > 1,
                }))
            }
            Op::BatchMatMul { .. } => {
                if runtime.len() == 2 {
                    return other(Kernel::BatchedMatMul);
                }
                let second = self.input_shape(pos, 1).unwrap_or_default();
                if runtime[0].0 != 0 || second.len() != 2 {
                    return rejected(
                        "BATCH_MATMUL with one runtime input needs a constant 2-D second input"
                            .to_string(),
                    );
                }
                let [b, h, wd, ch] = src;
                let desc = ConvDesc {
                    batch: b,
                    src: [h, wd, ch],
                    dst: [dst[1], dst[2], dst[3]],
                    kernel: [1, 1],
                    stride: [1, 1],
                    dilation: [1, 1],
                    padding: Padding2d::default(),
                    groups: 1,
                    runtime_weights: false,
                };
                (
                    Plan::Gpu(Lowered::Conv(desc)),
                    Some("CONVOLUTION_2D".to_string()),
                    vec!["constant 2-D weights: parsed as a 1x1 convolution".to_string()],
                )
            }
            Op::AveragePool2d(_) | Op::MaxPool2d(_) => gpu(Lowered::Pool { dst }),
            Op::Pad | Op::PadV2 => gpu(Lowered::Pad {
                dst,
                spatial: self.spatial_padding(pos),
            }),
            Op::Binary { kind, .. } => {
                let mut foldable = false;
                if runtime.len() == 1 && matches!(kind, BinaryKind::Add | BinaryKind::Mul) {
                    let other_slot = 1 - runtime[0].0.min(1);
                    if let Some(c) = self.input_shape(pos, other_slot) {
                        let n: usize = c.iter().product();
                        let per_channel = c.last() == Some(&dst[3])
                            && c[..c.len().saturating_sub(1)].iter().all(|&d| d == 1);
                        foldable = n == 1 || per_channel;
                    }
                }
                gpu(Lowered::Elementwise {
                    kernel: Kernel::Elementwise,
                    dst,
                    foldable,
                })
            }
            Op::Unary(k) => match k {
                UnaryKind::Relu | UnaryKind::Relu6 | UnaryKind::ReluN1To1 => {
                    elementwise(Kernel::ReLU)
                }
                UnaryKind::LeakyRelu { .. } => elementwise(Kernel::ReLU),
                UnaryKind::Logistic | UnaryKind::Tanh | UnaryKind::HardSwish => {
                    elementwise(Kernel::Elementwise)
                }
            },
            Op::Prelu => elementwise(Kernel::PReLU),
            Op::Dequantize => elementwise(Kernel::QuantizeAndDequantize),
            Op::Densify => not("DENSIFY of a runtime tensor".to_string()),
            Op::Concatenation { axis, .. } | Op::Pack { axis, .. } => {
                if runtime.len() == 1 && state.inputs.len() == 1 {
                    return (
                        Plan::Removed,
                        None,
                        vec!["single input: removed as a no-op".to_string()],
                    );
                }
                let rank = self.shape(state.outputs[0]).len() as i32;
                let channel_axis =
                    matches!(op, Op::Concatenation { .. }) && (*axis == rank - 1 || *axis == -1);
                other(if channel_axis {
                    Kernel::ConcatZ
                } else {
                    Kernel::ConcatXY
                })
            }
            Op::Mean { .. } => other(Kernel::Reduce),
            Op::Reshape { .. } => {
                if bhwc(self.shape(runtime[0].1)) == Some(dst) {
                    return (
                        Plan::Removed,
                        None,
                        vec!["same BHWC shape: removed as a no-op".to_string()],
                    );
                }
                other(Kernel::Reshape)
            }
            Op::Squeeze { .. } => not("the delegate has no kernel for SQUEEZE".to_string()),
            Op::Shape { .. } => not("the delegate has no kernel for SHAPE".to_string()),
            Op::StridedSlice(s) => {
                let StridedSlice {
                    ellipsis_mask,
                    new_axis_mask,
                    shrink_axis_mask,
                    ..
                } = *s;
                if ellipsis_mask != 0 || new_axis_mask != 0 || shrink_axis_mask != 0 {
                    return not("STRIDED_SLICE with ellipsis, new-axis or shrink masks".to_string());
                }
                if !matches!(self.shape(runtime[0].1).len(), 3 | 4) {
                    return not("STRIDED_SLICE of a tensor that is not 3-D or 4-D".to_string());
                }
                other(Kernel::StridedSlice)
            }
            Op::Slice => {
                if !matches!(self.shape(runtime[0].1).len(), 3 | 4) {
                    return not("SLICE of a tensor that is not 3-D or 4-D".to_string());
                }
                other(Kernel::StridedSlice)
            }
            Op::Split { .. } => gpu(Lowered::Other {
                kernel: Kernel::Split,
                dst: src,
                conv_picker: false,
            }),
            Op::Transpose => other(Kernel::Transpose),
            Op::Softmax { beta } => {
                if *beta != 1.0 {
                    return not("SOFTMAX with beta != 1".to_string());
                }
                other(if dst[1] == 1 && dst[2] == 1 {
                    Kernel::Softmax1x1
                } else {
                    Kernel::Softmax
                })
            }
            Op::ResizeBilinear {
                align_corners: true,
                half_pixel_centers: true,
            } => not("RESIZE_BILINEAR with both align_corners and half_pixel_centers".to_string()),
            Op::ResizeBilinear { .. } | Op::ResizeNearestNeighbor { .. } => other(Kernel::Resize),
            Op::DepthToSpace { block_size } | Op::SpaceToDepth { block_size }
                if *block_size <= 1 =>
            {
                not("block size 1".to_string())
            }
            Op::DepthToSpace { .. } => other(Kernel::DepthToSpace),
            Op::SpaceToDepth { .. } => other(Kernel::SpaceToDepth),
            Op::TransposeConv(_) | Op::TransposeConvBias(_) => gpu(Lowered::Other {
                kernel: Kernel::ConvolutionTransposed,
                dst,
                conv_picker: true,
            }),
            Op::OtherBuiltin { .. } => {
                if ELEMENTWISE_BUILTINS.contains(&state.name.as_str()) {
                    elementwise(if state.name == "QUANTIZE" {
                        Kernel::QuantizeAndDequantize
                    } else {
                        Kernel::Elementwise
                    })
                } else {
                    not(format!(
                        "{} is not modelled by the emulator (assumed to run on the CPU)",
                        state.name
                    ))
                }
            }
            Op::Custom { .. } => not("custom op".to_string()),
        }
    }

    /// A PAD's padding when it pads only H and W of a 4-D tensor, by non-negative amounts, with
    /// zeros (PADV2 with a zero or absent value).
    fn spatial_padding(&self, pos: usize) -> Option<Padding2d> {
        let state = &self.ops[pos];
        let x = state.inputs.first().copied().flatten()?;
        if self.shape(x).len() != 4 {
            return None;
        }
        let pads = self
            .graph
            .tensor(state.inputs.get(1).copied().flatten()?)
            .int_values()?;
        if pads.len() != 8 || pads.iter().any(|&p| p < 0) {
            return None;
        }
        if pads[0] != 0 || pads[1] != 0 || pads[6] != 0 || pads[7] != 0 {
            return None;
        }
        if let Some(value) = state.inputs.get(2).copied().flatten() {
            let v = self.graph.tensor(value).f32_values()?;
            if v.iter().any(|&x| x != 0.0) {
                return None;
            }
        }
        let p = |i: usize| usize::try_from(pads[i]).unwrap_or(0);
        Some(Padding2d {
            prepended: [p(2), p(4)],
            appended: [p(3), p(5)],
        })
    }

    fn parse(&mut self) {
        for pos in 0..self.ops.len() {
            let (plan, runs_as, notes) = self.classify(pos);
            if let Plan::Removed = plan {
                let input = self.runtime_inputs(pos).first().map(|&(_, t)| t);
                if let (Some(input), Some(&out)) = (input, self.ops[pos].outputs.first()) {
                    self.alias.insert(out, input);
                }
            }
            let op = &mut self.ops[pos];
            op.plan = plan;
            op.runs_as = runs_as;
            op.notes.extend(notes);
        }
    }

    /// A 1x1 convolution (stride 1, dilation 1, no padding, one group) on a 1x1 input becomes
    /// FULLY_CONNECTED.
    fn conv_to_fully_connected(&mut self) {
        for op in &mut self.ops {
            let Plan::Gpu(Lowered::Conv(d)) = &op.plan else {
                continue;
            };
            let d = *d;
            if !d.runtime_weights
                && d.kernel == [1, 1]
                && d.stride == [1, 1]
                && d.dilation == [1, 1]
                && d.padding.is_zero()
                && d.groups == 1
                && d.src[0] == 1
                && d.src[1] == 1
            {
                op.plan = Plan::Gpu(Lowered::FullyConnected(FcDesc {
                    batch: d.batch,
                    src_channels: d.src[2],
                    dst_channels: d.dst[2],
                    batch_supported: d.batch > 1,
                }));
                op.runs_as = Some("FULLY_CONNECTED".to_string());
                op.notes
                    .push("1x1 convolution on a 1x1 input: runs as fully connected".to_string());
            }
        }
    }

    /// PAD into the conv, depthwise conv or pooling that is its only consumer.
    fn merge_padding(&mut self) {
        for pos in 0..self.ops.len() {
            let Plan::Gpu(Lowered::Pad {
                spatial: Some(pad), ..
            }) = self.ops[pos].plan
            else {
                continue;
            };
            let Some(&out) = self.ops[pos].outputs.first() else {
                continue;
            };
            let Some(&(_, input)) = self.runtime_inputs(pos).first() else {
                continue;
            };
            if self.is_graph_output(out) {
                continue;
            }
            let consumers = self.consumers(out);
            let [(c, 0)] = consumers[..] else {
                continue;
            };
            let in_shape = bhwc(self.shape(input)).unwrap_or([1, 1, 1, 1]);
            let merged = match &mut self.ops[c].plan {
                Plan::Gpu(Lowered::Conv(d)) => {
                    d.padding = d.padding.plus(pad);
                    d.src = [in_shape[1], in_shape[2], in_shape[3]];
                    Some(d.padding)
                }
                Plan::Gpu(Lowered::Depthwise(d)) => {
                    d.padding = d.padding.plus(pad);
                    d.src = [in_shape[1], in_shape[2], in_shape[3]];
                    Some(d.padding)
                }
                Plan::Gpu(Lowered::Pool { .. }) => Some(pad),
                _ => None,
            };
            let Some(total) = merged else {
                continue;
            };
            self.ops[pos].plan = Plan::MergedInto(c);
            self.alias.insert(out, input);
            self.ops[c].absorbed.push(pos);
            self.ops[c].notes.push(format!(
                "PAD #{pos} merged: padding (top {}, left {}, bottom {}, right {})",
                total.prepended[0], total.prepended[1], total.appended[0], total.appended[1]
            ));
        }
    }

    /// A constant scalar or per-channel ADD/MUL after a conv, depthwise conv or fully-connected
    /// op without activation, which is its only consumer, goes into that op's weights or bias.
    fn fold_add_mul(&mut self) {
        for pos in 0..self.ops.len() {
            let Plan::Gpu(Lowered::Elementwise { foldable: true, .. }) = self.ops[pos].plan else {
                continue;
            };
            let runtime = self.runtime_inputs(pos);
            let [(_, input)] = runtime[..] else {
                continue;
            };
            let src = self.resolve(input);
            let Some(&p) = self.producer.get(&src) else {
                continue;
            };
            let weights_op = match &self.ops[p].plan {
                Plan::Gpu(Lowered::Conv(d)) => !d.runtime_weights,
                Plan::Gpu(Lowered::Depthwise(d)) => !d.runtime_weights,
                Plan::Gpu(Lowered::FullyConnected(_)) => true,
                _ => false,
            };
            if !weights_op
                || self.ops[p].activation != Activation::None
                || self.ops[p].outputs.len() != 1
                || self.is_graph_output(src)
                || self.consumers(src).len() != 1
            {
                continue;
            }
            let Some(&out) = self.ops[pos].outputs.first() else {
                continue;
            };
            self.ops[pos].plan = Plan::FoldedInto(p);
            self.alias.insert(out, src);
            self.ops[p].activation = self.ops[pos].activation;
            self.ops[p].absorbed.push(pos);
            let note = format!("{} #{pos} folded into the weights", self.ops[pos].name);
            self.ops[p].notes.push(note);
        }
    }

    fn select_kernels(&mut self) {
        let t = self.target;
        for op in &mut self.ops {
            let Plan::Gpu(lowered) = &op.plan else {
                continue;
            };
            op.kernels = match lowered {
                Lowered::Conv(d) => select_conv(t, d),
                Lowered::Depthwise(d) => {
                    let storage = t.tensor_storage([d.batch, d.src[0], d.src[1], d.src[2]]);
                    vec![select_depthwise(t, d, storage)]
                }
                Lowered::FullyConnected(d) => vec![select_fully_connected(t, d)],
                Lowered::Pool { dst } => vec![approximate_kernel(t, Kernel::Pooling, *dst)],
                Lowered::Pad { dst, .. } => vec![approximate_kernel(t, Kernel::Padding, *dst)],
                Lowered::Elementwise { kernel, dst, .. } => {
                    vec![approximate_kernel(t, *kernel, *dst)]
                }
                Lowered::Other {
                    kernel,
                    dst,
                    conv_picker,
                } => {
                    let mut k = approximate_kernel(t, *kernel, *dst);
                    if *conv_picker {
                        k = KernelDispatch::new(
                            *kernel,
                            k.grid,
                            3,
                            conv_work_group(k.grid, &t.gpu, t.kernel_max_wg),
                            [0, 1, 2],
                            WorkGroupSource::FastConv,
                        )
                        .approximate();
                    }
                    vec![k]
                }
            };
        }
    }

    /// Whether `t` is computed by the time merged node `at` runs: constants, graph and partition
    /// inputs, and outputs of delegate nodes up to `at` (after earlier merges).
    fn ready(&self, t: TensorId, at: usize) -> bool {
        let t = self.resolve(t);
        if self.is_const(t) || self.graph_inputs.contains(&t) {
            return true;
        }
        let Some(&p) = self.producer.get(&t) else {
            return true;
        };
        match self.ops[p].plan {
            Plan::Gpu(_) => p <= at,
            Plan::FusedInto(q) => q <= at,
            _ => true,
        }
    }

    /// Links element-wise consumers into their producer (§1.6).
    fn fuse_elementwise(&mut self) {
        for i in 0..self.ops.len() {
            if !matches!(self.ops[i].plan, Plan::Gpu(_))
                || self.ops[i].kernels.is_empty()
                || self.ops[i].outputs.len() != 1
            {
                continue;
            }
            let mut current = self.ops[i].outputs[0];
            loop {
                if self.is_graph_output(current) {
                    break;
                }
                let consumers = self.consumers(current);
                let [(c, 0)] = consumers[..] else {
                    break;
                };
                let linkable = matches!(self.ops[c].plan, Plan::Gpu(Lowered::Elementwise { .. }))
                    && self.ops[c].outputs.len() == 1;
                let others_ready = self
                    .runtime_inputs(c)
                    .iter()
                    .skip(1)
                    .all(|&(_, t)| self.ready(t, i));
                if !linkable || !others_ready {
                    break;
                }
                self.ops[c].plan = Plan::FusedInto(i);
                self.ops[c].kernels.clear();
                self.ops[i].absorbed.push(c);
                let name = self.ops[c].name.clone();
                self.ops[i].notes.push(format!("{name} #{c} linked in"));
                current = self.ops[c].outputs[0];
            }
        }
    }

    fn finish(self) -> Vec<OpDispatch> {
        self.ops
            .into_iter()
            .enumerate()
            .map(|(pos, op)| {
                let (fate, into, reason) = match &op.plan {
                    Plan::Gpu(_) => (Fate::Dispatched, None, None),
                    Plan::Constant => (Fate::Constant, None, None),
                    Plan::Removed => (Fate::Removed, None, None),
                    Plan::NotDelegated(why) => (Fate::NotDelegated, None, Some(why.clone())),
                    Plan::Rejected(why) => (Fate::Rejected, None, Some(why.clone())),
                    Plan::MergedInto(c) => (Fate::MergedInto, Some(*c), None),
                    Plan::FoldedInto(c) => (Fate::FoldedInto, Some(*c), None),
                    Plan::FusedInto(c) => (Fate::FusedInto, Some(*c), None),
                };
                let mut notes = op.notes;
                notes.extend(reason);
                if fate == Fate::Dispatched && op.activation != Activation::None {
                    notes.push(format!("{} activation linked in", op.activation.label()));
                }
                OpDispatch {
                    op_index: pos,
                    op: op.name,
                    output: op
                        .outputs
                        .first()
                        .map(|&t| self.graph.tensor(t).shape.clone())
                        .unwrap_or_default(),
                    fate,
                    into,
                    runs_as: op.runs_as,
                    variant: Variant::of(&op.kernels),
                    kernels: op.kernels,
                    absorbed: op.absorbed,
                    notes,
                }
            })
            .collect()
    }
}

/// Emulates the delegate over a whole graph: one record per operator in execution order.
pub fn dispatch_graph(graph: &Graph, target: &Target) -> Result<Vec<OpDispatch>> {
    let mut e = Emulation::new(graph, target)?;
    e.parse();
    e.conv_to_fully_connected();
    e.merge_padding();
    e.fold_add_mul();
    e.select_kernels();
    e.fuse_elementwise();
    Ok(e.finish())
}
