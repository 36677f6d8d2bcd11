//! Lowering a prepared graph to a compiled artifact: kernels with resolved parameters, packed
//! weights, and the memory plan.

mod memory;
mod placement;

pub use placement::Plan;

use crate::ir::op::TransposeConv;
use crate::ir::shape::{normalize_axis, resolve_strided_slice, same_padding};
use crate::ir::{
    Activation as IrActivation, BinaryKind as IrBinary, Graph, Op, Padding, TensorId,
    UnaryKind as IrUnary,
};
use crate::passes::{self, RefactorDepthwise};
use anyhow::{anyhow, bail, ensure, Context, Result};
use petgraph::stable_graph::NodeIndex;
use std::collections::HashMap;
use tandem_runtime::artifact::{
    Artifact, BinaryKind, Kernel, Placement, PoolParams, Step, Storage, TensorDesc, UnaryKind,
    WEIGHT_ALIGN,
};
use tandem_runtime::cpu::batch_matmul::BatchMatMulParams;
use tandem_runtime::cpu::conv::{pack_conv_weights, ConvParams};
use tandem_runtime::cpu::depthwise::DepthwiseParams;
use tandem_runtime::cpu::fully_connected::FullyConnectedParams;
use tandem_runtime::cpu::transpose_conv::{pack_transpose_conv_weights, TransposeConvParams};
use tandem_runtime::cpu::Activation;
use tandem_runtime::DType;

/// Options of a compilation. The default plans for one thread and leaves depthwise decisions to
/// [`RefactorDepthwise::Auto`].
#[derive(Debug, Clone, Default)]
pub struct CompileOptions {
    /// CPU threads the artifact is planned for (the runtime may be told otherwise).
    pub threads: usize,
    /// Name recorded in the artifact.
    pub model_name: String,
    /// Which device runs each step.
    pub plan: Plan,
    /// The GPU the plan is made for (needed by every plan but `Plan::CpuOnly`).
    pub gpu: Option<tandem_runtime::gpu::device::DeviceInfo>,
    /// Which depthwise convolutions become block-diagonal (grouped) convolutions.
    pub refactor_depthwise: RefactorDepthwise,
    /// Explicit per-node forms `(node index, mode)` of depthwise convolutions, decided earlier
    /// (e.g. by the oracle's measurements); when set, it replaces `refactor_depthwise` and
    /// nodes not listed stay native.
    pub depthwise_forms: Option<Vec<(usize, RefactorDepthwise)>>,
}

impl CompileOptions {
    /// CPU-only compilation for `threads` threads.
    pub fn cpu(threads: usize, model_name: &str) -> Self {
        CompileOptions {
            threads,
            model_name: model_name.to_string(),
            ..Default::default()
        }
    }
}

/// Prepares (passes, then the depthwise refactorization the options ask for) and lowers `graph`
/// into an artifact that runs on the CPU.
pub fn compile(graph: Graph, options: &CompileOptions) -> Result<Artifact> {
    Ok(compile_with_report(graph, options)?.0)
}

/// [`compile`], also returning the planner's report when `options.plan` is
/// [`Plan::Predicted`].
pub fn compile_with_report(
    mut graph: Graph,
    options: &CompileOptions,
) -> Result<(Artifact, Option<crate::planner::PlanReport>)> {
    passes::prepare(&mut graph)?;
    let mut decided = None;
    if let Some(forms) = &options.depthwise_forms {
        crate::dwauto::apply_forms(&mut graph, forms)?;
    } else if let (RefactorDepthwise::Auto, Plan::Predicted { profile, source }) =
        (options.refactor_depthwise, &options.plan)
    {
        // Auto with predictors: native or a refactorized form per layer, whichever the profile
        // predicts faster (each costed at its best split); then plan the result as usual.
        let mut costs = crate::planner::Predicted {
            profile,
            source: source.clone(),
        };
        let d = crate::dwauto::choose(&graph, &mut costs, options.threads.max(1))?;
        crate::dwauto::apply_forms(&mut graph, &d.forms())?;
        decided = Some(d);
    } else {
        passes::refactor_depthwise(&mut graph, options.refactor_depthwise)?;
    }
    reject_quantized(&graph)?;
    let (artifact, mut report) = Lowering::new(&graph).run(options)?;
    if let (Some(r), Some(d)) = (report.as_mut(), decided) {
        r.depthwise = d.layers;
        r.notes.extend(d.notes);
    }
    Ok((artifact, report))
}

/// The runtime kernels a depthwise node can run as: native first
/// ([`RefactorDepthwise::Off`]), then one grouped convolution per candidate group size
/// ([`crate::passes::diagonalwise::candidate_group_sizes`]; `G = C` is
/// [`RefactorDepthwise::Full`]), with the parameters lowering would give them.
pub fn depthwise_alternatives(
    graph: &Graph,
    node: NodeIndex,
) -> Result<Vec<(RefactorDepthwise, Kernel)>> {
    let n = &graph.dag[node];
    let Op::DepthwiseConv2d(c) = &n.op else {
        bail!("operator {} is not DEPTHWISE_CONV_2D", node.index());
    };
    let shape = |slot: usize| {
        graph
            .input(node, slot)
            .map(|t| t.shape.clone())
            .unwrap_or_default()
    };
    let input = shape4(&shape(0), "input")?;
    let filter = shape4(&shape(1), "filter")?;
    let output = shape4(&graph.tensor(n.outputs[0]).shape, "output")?;
    let pad = conv_pad(c.padding, input, filter, c.stride, c.dilation);
    let act = activation(c.activation)?;
    let mut out = vec![(
        RefactorDepthwise::Off,
        Kernel::DepthwiseConv2d(DepthwiseParams {
            input,
            output,
            kernel: [filter[1], filter[2]],
            stride: c.stride,
            dilation: c.dilation,
            pad,
            multiplier: filter[3] / input[3].max(1),
            activation: act,
        }),
    )];
    for g in passes::diagonalwise::candidate_group_sizes(graph, node)? {
        let mode = if g == input[3] {
            RefactorDepthwise::Full
        } else {
            RefactorDepthwise::Group(g)
        };
        out.push((
            mode,
            Kernel::Conv2d(ConvParams {
                input,
                output,
                kernel: [filter[1], filter[2]],
                stride: c.stride,
                dilation: c.dilation,
                pad,
                groups: input[3] / g,
                activation: act,
            }),
        ));
    }
    Ok(out)
}

/// Quantized activations are not supported yet: the first non-float tensor that would be
/// computed at run time is named.
fn reject_quantized(graph: &Graph) -> Result<()> {
    for node in graph.execution_order()? {
        let n = &graph.dag[node];
        for &t in n.inputs.iter().flatten().chain(&n.outputs) {
            let tensor = graph.tensor(t);
            let quantized = tensor.dtype.is_quantized_integer()
                || tensor
                    .quantization
                    .as_ref()
                    .is_some_and(|q| !q.scale.is_empty());
            if quantized
                && (tensor.data.is_none()
                    || matches!(
                        n.op,
                        Op::Conv2d(_) | Op::DepthwiseConv2d(_) | Op::FullyConnected { .. }
                    ))
            {
                bail!(
                    "quantized models are not supported yet: tensor {t} '{}' ({}) used by operator {} ({}) is quantized",
                    tensor.name,
                    tensor.dtype,
                    node.index(),
                    n.op.type_name()
                );
            }
        }
    }
    Ok(())
}

struct Lowering<'g> {
    graph: &'g Graph,
    tensors: Vec<TensorDesc>,
    /// All constants, each starting at a multiple of `WEIGHT_ALIGN`.
    weights: Vec<f32>,
    /// IR tensor → artifact tensor (for tensors used as-is).
    mapped: HashMap<TensorId, usize>,
    steps: Vec<Step>,
    /// The graph node each step comes from.
    step_nodes: Vec<NodeIndex>,
    /// The node being lowered.
    current: NodeIndex,
    /// The planner's report, when the plan came from it.
    report: Option<crate::planner::PlanReport>,
}

fn activation(a: IrActivation) -> Result<Activation> {
    Ok(match a {
        IrActivation::None => Activation::None,
        IrActivation::Relu => Activation::Relu,
        IrActivation::ReluN1To1 => Activation::ReluN1To1,
        IrActivation::Relu6 => Activation::Relu6,
        IrActivation::Tanh => Activation::Tanh,
        IrActivation::SignBit => bail!("the SIGN_BIT fused activation is not supported"),
    })
}

fn shape4(s: &[usize], what: &str) -> Result<[usize; 4]> {
    s.try_into()
        .map_err(|_| anyhow!("{what} must be rank 4, is {s:?}"))
}

impl<'g> Lowering<'g> {
    fn new(graph: &'g Graph) -> Self {
        Lowering {
            graph,
            tensors: Vec::new(),
            weights: Vec::new(),
            mapped: HashMap::new(),
            steps: Vec::new(),
            step_nodes: Vec::new(),
            current: NodeIndex::end(),
            report: None,
        }
    }

    /// The artifact tensor for IR tensor `t` (constants copied as float32).
    fn tensor(&mut self, t: TensorId) -> Result<usize> {
        if let Some(&i) = self.mapped.get(&t) {
            return Ok(i);
        }
        let tensor = self.graph.tensor(t);
        let storage = match &tensor.data {
            Some(_) => {
                let values = tensor.f32_values().with_context(|| {
                    format!(
                        "constant tensor {t} '{}' is {}, the CPU kernels read FLOAT32",
                        tensor.name, tensor.dtype
                    )
                })?;
                Storage::Constant {
                    offset: self.add_weights(&values),
                }
            }
            None => {
                ensure!(
                    tensor.dtype == DType::F32,
                    "tensor {t} '{}' is {}, the CPU runtime computes FLOAT32",
                    tensor.name,
                    tensor.dtype
                );
                Storage::Arena { offset: 0 }
            }
        };
        self.tensors.push(TensorDesc {
            name: tensor.name.clone(),
            dtype: DType::F32,
            shape: tensor.shape.clone(),
            storage,
        });
        self.mapped.insert(t, self.tensors.len() - 1);
        Ok(self.tensors.len() - 1)
    }

    /// Appends `values` to the weights at an aligned offset, which it returns.
    fn add_weights(&mut self, values: &[f32]) -> usize {
        let offset = self.weights.len().div_ceil(WEIGHT_ALIGN) * WEIGHT_ALIGN;
        self.weights.resize(offset, 0.0);
        self.weights.extend_from_slice(values);
        offset
    }

    /// A new constant tensor holding `values` with `shape`.
    fn packed(&mut self, name: String, shape: Vec<usize>, values: &[f32]) -> usize {
        let offset = self.add_weights(values);
        self.tensors.push(TensorDesc {
            name,
            dtype: DType::F32,
            shape,
            storage: Storage::Constant { offset },
        });
        self.tensors.len() - 1
    }

    fn const_ints(&self, node: NodeIndex, slot: usize, what: &str) -> Result<Vec<i64>> {
        self.graph
            .input(node, slot)
            .and_then(|t| t.int_values())
            .ok_or_else(|| anyhow!("{what} (input {slot}) must be a constant integer tensor"))
    }

    /// Checks that operand `slot` is a dense constant FLOAT32 tensor, without copying it.
    fn require_constant_weights(&self, node: NodeIndex, slot: usize) -> Result<()> {
        let t = self
            .graph
            .input(node, slot)
            .context("weights are missing")?;
        ensure!(
            t.dtype == DType::F32 && t.data.is_some() && t.sparsity.is_none(),
            "weights '{}' must be a constant FLOAT32 tensor",
            t.name
        );
        Ok(())
    }

    /// The values of constant FLOAT32 operand `slot` (for weights that get repacked).
    fn weights(&self, node: NodeIndex, slot: usize) -> Result<Vec<f32>> {
        let t = self
            .graph
            .input(node, slot)
            .context("weights are missing")?;
        t.f32_values()
            .with_context(|| format!("weights '{}' must be a constant FLOAT32 tensor", t.name))
    }

    fn run(
        mut self,
        options: &CompileOptions,
    ) -> Result<(Artifact, Option<crate::planner::PlanReport>)> {
        let graph = self.graph;
        for node in graph.execution_order()? {
            let n = &graph.dag[node];
            let name = format!("{} #{}", n.op.type_name(), node.index());
            self.current = node;
            self.lower_node(node, &name)
                .with_context(|| format!("operator {} ({})", node.index(), n.op.type_name()))?;
        }
        let inputs = graph
            .inputs
            .iter()
            .map(|&t| self.tensor(t))
            .collect::<Result<Vec<_>>>()?;
        let outputs = graph
            .outputs
            .iter()
            .map(|&t| self.tensor(t))
            .collect::<Result<Vec<_>>>()?;
        for &o in &outputs {
            ensure!(
                matches!(self.tensors[o].storage, Storage::Arena { .. }),
                "graph output '{}' is a constant",
                self.tensors[o].name
            );
        }
        self.place(options)?;
        let arena_bytes = self.plan_memory(&inputs, &outputs);
        let uses_gpu = self.steps.iter().any(|s| s.placement.uses_gpu());
        let report = self.report.take();
        let artifact = Artifact {
            producer: format!("tandem {}", env!("CARGO_PKG_VERSION")),
            model: options.model_name.clone(),
            tensors: self.tensors,
            weights_len: self.weights.len(),
            weights: self.weights,
            arena_bytes,
            inputs,
            outputs,
            steps: self.steps,
            threads: options.threads.max(1),
            gpu: uses_gpu.then(|| options.gpu.clone()).flatten(),
        };
        artifact
            .validate()
            .map_err(|e| anyhow!("internal error: the compiled artifact is invalid: {e}"))?;
        Ok((artifact, report))
    }

    fn plan_memory(&mut self, inputs: &[usize], outputs: &[usize]) -> usize {
        let end = self.steps.len();
        let mut life: HashMap<usize, (usize, usize)> = HashMap::new();
        let mut touch = |t: usize, at: usize| {
            let e = life.entry(t).or_insert((at, at));
            e.0 = e.0.min(at);
            e.1 = e.1.max(at);
        };
        for &t in inputs {
            touch(t, 0);
        }
        for (s, step) in self.steps.iter().enumerate() {
            for &t in step.inputs.iter().flatten().chain(&step.outputs) {
                touch(t, s);
            }
        }
        for &t in outputs {
            touch(t, end);
        }
        let arena: Vec<usize> = (0..self.tensors.len())
            .filter(|&t| {
                matches!(self.tensors[t].storage, Storage::Arena { .. }) && life.contains_key(&t)
            })
            .collect();
        let intervals: Vec<memory::Interval> = arena
            .iter()
            .map(|t| memory::Interval {
                bytes: self.tensors[*t].bytes(),
                first: life[t].0,
                last: life[t].1,
            })
            .collect();
        let (offsets, size) = memory::plan(&intervals);
        for (t, offset) in arena.into_iter().zip(offsets) {
            self.tensors[t].storage = Storage::Arena { offset };
        }
        size
    }

    fn push(
        &mut self,
        name: &str,
        kernel: Kernel,
        inputs: Vec<Option<usize>>,
        outputs: Vec<usize>,
    ) {
        self.steps.push(Step {
            name: name.to_string(),
            kernel,
            inputs,
            outputs,
            placement: Placement::Cpu,
            gpu_operands: Vec::new(),
        });
        self.step_nodes.push(self.current);
    }

    fn lower_node(&mut self, node: NodeIndex, name: &str) -> Result<()> {
        let graph = self.graph;
        let n = &graph.dag[node];
        let shape = |slot: usize| {
            graph
                .input(node, slot)
                .map(|t| t.shape.clone())
                .unwrap_or_default()
        };
        let out_shape = graph.tensor(n.outputs[0]).shape.clone();
        let x = |s: &mut Self, slot: usize| -> Result<Option<usize>> {
            n.inputs
                .get(slot)
                .copied()
                .flatten()
                .map(|t| s.tensor(t))
                .transpose()
        };
        let out = self.tensor(n.outputs[0])?;
        let simple = |s: &mut Self, kernel: Kernel| -> Result<()> {
            let input = x(s, 0)?;
            s.push(name, kernel, vec![input], vec![out]);
            Ok(())
        };
        match &n.op {
            Op::Conv2d(c) => {
                let input = shape4(&shape(0), "input")?;
                let filter = shape4(&shape(1), "filter")?;
                let pad = conv_pad(c.padding, input, filter, c.stride, c.dilation);
                let p = ConvParams {
                    input,
                    output: shape4(&out_shape, "output")?,
                    kernel: [filter[1], filter[2]],
                    stride: c.stride,
                    dilation: c.dilation,
                    pad,
                    groups: input[3] / filter[3],
                    activation: activation(c.activation)?,
                };
                let packed = pack_conv_weights(&self.weights(node, 1)?, &p);
                let w = self.packed(
                    format!("{name} packed weights"),
                    vec![p.packed_len()],
                    &packed,
                );
                let (i, b) = (x(self, 0)?, x(self, 2)?);
                self.push(name, Kernel::Conv2d(p), vec![i, Some(w), b], vec![out]);
            }
            Op::DepthwiseConv2d(c) => {
                let input = shape4(&shape(0), "input")?;
                let filter = shape4(&shape(1), "filter")?;
                let p = DepthwiseParams {
                    input,
                    output: shape4(&out_shape, "output")?,
                    kernel: [filter[1], filter[2]],
                    stride: c.stride,
                    dilation: c.dilation,
                    pad: conv_pad(c.padding, input, filter, c.stride, c.dilation),
                    multiplier: filter[3] / input[3].max(1),
                    activation: activation(c.activation)?,
                };
                self.require_constant_weights(node, 1)?;
                let (i, w, b) = (x(self, 0)?, x(self, 1)?, x(self, 2)?);
                self.push(name, Kernel::DepthwiseConv2d(p), vec![i, w, b], vec![out]);
            }
            Op::FullyConnected { activation: a, .. } => {
                let w = shape(1);
                let p = FullyConnectedParams {
                    rows: shape(0).iter().product::<usize>() / w[1].max(1),
                    depth: w[1],
                    units: w[0],
                    activation: activation(*a)?,
                };
                self.require_constant_weights(node, 1)?;
                let (i, w, b) = (x(self, 0)?, x(self, 1)?, x(self, 2)?);
                self.push(name, Kernel::FullyConnected(p), vec![i, w, b], vec![out]);
            }
            Op::TransposeConv(c) | Op::TransposeConvBias(c) => {
                let (in_slot, bias_slot) = if matches!(n.op, Op::TransposeConv(_)) {
                    (2, 3)
                } else {
                    (0, 2)
                };
                let input = shape4(&shape(in_slot), "input")?;
                let filter = shape4(&shape(1), "filter")?;
                let output = shape4(&out_shape, "output")?;
                let p = TransposeConvParams {
                    input,
                    output,
                    kernel: [filter[1], filter[2]],
                    stride: c.stride,
                    pad: transpose_pad(c, output, filter),
                    activation: activation(c.activation)?,
                };
                let packed = pack_transpose_conv_weights(&self.weights(node, 1)?, &p);
                let w = self.packed(format!("{name} packed weights"), filter.to_vec(), &packed);
                let (i, b) = (x(self, in_slot)?, x(self, bias_slot)?);
                self.push(
                    name,
                    Kernel::TransposeConv(p),
                    vec![i, Some(w), b],
                    vec![out],
                );
            }
            Op::BatchMatMul { adj_x, adj_y } => {
                let p = BatchMatMulParams {
                    lhs: shape(0),
                    rhs: shape(1),
                    out: out_shape,
                    adj_lhs: *adj_x,
                    adj_rhs: *adj_y,
                };
                let (a, b) = (x(self, 0)?, x(self, 1)?);
                self.push(name, Kernel::BatchMatMul(p), vec![a, b], vec![out]);
            }
            Op::Binary {
                kind,
                activation: a,
            } => {
                let kind = match kind {
                    IrBinary::Add => BinaryKind::Add,
                    IrBinary::Sub => BinaryKind::Sub,
                    IrBinary::Mul => BinaryKind::Mul,
                    IrBinary::Div => BinaryKind::Div,
                };
                let (l, r) = (x(self, 0)?, x(self, 1)?);
                self.push(
                    name,
                    Kernel::Binary {
                        kind,
                        activation: activation(*a)?,
                    },
                    vec![l, r],
                    vec![out],
                );
            }
            Op::Unary(kind) => {
                let kind = match *kind {
                    IrUnary::Logistic => UnaryKind::Logistic,
                    IrUnary::Tanh => UnaryKind::Tanh,
                    IrUnary::Relu => UnaryKind::Relu,
                    IrUnary::Relu6 => UnaryKind::Relu6,
                    IrUnary::ReluN1To1 => UnaryKind::ReluN1To1,
                    IrUnary::HardSwish => UnaryKind::HardSwish,
                    IrUnary::LeakyRelu { alpha } => UnaryKind::LeakyRelu { alpha },
                };
                simple(self, Kernel::Unary(kind))?;
            }
            Op::Prelu => {
                let (i, a) = (x(self, 0)?, x(self, 1)?);
                self.push(name, Kernel::Prelu, vec![i, a], vec![out]);
            }
            Op::Softmax { beta } => simple(self, Kernel::Softmax { beta: *beta })?,
            Op::AveragePool2d(p) | Op::MaxPool2d(p) => {
                let input = shape4(&shape(0), "input")?;
                let pad = match p.padding {
                    Padding::Same => [
                        same_padding(input[1], p.filter[0], p.stride[0], 1).0,
                        same_padding(input[2], p.filter[1], p.stride[1], 1).0,
                    ],
                    Padding::Valid => [0, 0],
                };
                let params = PoolParams {
                    filter: p.filter,
                    stride: p.stride,
                    pad,
                    activation: activation(p.activation)?,
                };
                simple(
                    self,
                    if matches!(n.op, Op::MaxPool2d(_)) {
                        Kernel::MaxPool2d(params)
                    } else {
                        Kernel::AvgPool2d(params)
                    },
                )?;
            }
            Op::Mean { .. } => {
                let rank = shape(0).len();
                let mut axes = self
                    .const_ints(node, 1, "axes")?
                    .into_iter()
                    .map(|a| normalize_axis(a, rank))
                    .collect::<Result<Vec<_>>>()?;
                axes.sort_unstable();
                axes.dedup();
                simple(self, Kernel::Mean { axes })?;
            }
            Op::Pad | Op::PadV2 => {
                let pads = self.const_ints(node, 1, "paddings")?;
                let value = match n.inputs.get(2).copied().flatten() {
                    Some(t) => graph
                        .tensor(t)
                        .f32_values()
                        .and_then(|v| v.first().copied())
                        .context("the PADV2 value must be a constant FLOAT32 scalar")?,
                    None => 0.0,
                };
                let before = pads.iter().step_by(2).map(|&p| p as usize).collect();
                let after = pads
                    .iter()
                    .skip(1)
                    .step_by(2)
                    .map(|&p| p as usize)
                    .collect();
                simple(
                    self,
                    Kernel::Pad {
                        before,
                        after,
                        value,
                    },
                )?;
            }
            Op::Concatenation {
                axis,
                activation: a,
            } => {
                ensure!(
                    *a == IrActivation::None,
                    "a fused activation on CONCATENATION is not supported"
                );
                let axis = normalize_axis(*axis as i64, out_shape.len())?;
                let inputs = (0..n.inputs.len())
                    .map(|i| x(self, i))
                    .collect::<Result<Vec<_>>>()?;
                self.push(name, Kernel::Concat { axis }, inputs, vec![out]);
            }
            Op::Reshape { .. } | Op::Squeeze { .. } => simple(self, Kernel::Copy)?,
            Op::Transpose => {
                let rank = shape(0).len();
                let perm = self
                    .const_ints(node, 1, "perm")?
                    .into_iter()
                    .map(|p| normalize_axis(p, rank))
                    .collect::<Result<Vec<_>>>()?;
                simple(self, Kernel::Transpose { perm })?;
            }
            Op::StridedSlice(attrs) => {
                let begin = self.const_ints(node, 1, "begin")?;
                let end = self.const_ints(node, 2, "end")?;
                let strides = match n.inputs.get(3).copied().flatten() {
                    Some(_) => self.const_ints(node, 3, "strides")?,
                    None => vec![1; begin.len()],
                };
                let dims = resolve_strided_slice(&shape(0), &begin, &end, &strides, attrs)?;
                simple(
                    self,
                    Kernel::StridedSlice {
                        begin: dims.iter().map(|d| d.begin).collect(),
                        stride: dims.iter().map(|d| d.stride).collect(),
                        count: dims.iter().map(|d| d.count).collect(),
                    },
                )?;
            }
            Op::Slice => {
                let begin: Vec<usize> = self
                    .const_ints(node, 1, "begin")?
                    .into_iter()
                    .map(|b| b.max(0) as usize)
                    .collect();
                let count = out_shape.clone();
                simple(
                    self,
                    Kernel::StridedSlice {
                        stride: vec![1; begin.len()],
                        begin,
                        count,
                    },
                )?;
            }
            Op::Split { num_splits } => {
                let input_shape = shape(1);
                let axis = normalize_axis(
                    *self
                        .const_ints(node, 0, "axis")?
                        .first()
                        .context("empty axis")?,
                    input_shape.len(),
                )?;
                let part = input_shape[axis] / num_splits;
                let input = x(self, 1)?;
                for (k, &o) in n.outputs.iter().enumerate() {
                    let o = self.tensor(o)?;
                    let mut begin = vec![0; input_shape.len()];
                    begin[axis] = k * part;
                    let mut count = input_shape.clone();
                    count[axis] = part;
                    self.push(
                        name,
                        Kernel::StridedSlice {
                            begin,
                            stride: vec![1; input_shape.len()],
                            count,
                        },
                        vec![input],
                        vec![o],
                    );
                }
            }
            Op::DepthToSpace { block_size } => {
                simple(self, Kernel::DepthToSpace { block: *block_size })?
            }
            Op::SpaceToDepth { block_size } => {
                simple(self, Kernel::SpaceToDepth { block: *block_size })?
            }
            Op::ResizeBilinear {
                align_corners,
                half_pixel_centers,
            } => simple(
                self,
                Kernel::ResizeBilinear {
                    align_corners: *align_corners,
                    half_pixel_centers: *half_pixel_centers,
                },
            )?,
            Op::ResizeNearestNeighbor {
                align_corners,
                half_pixel_centers,
            } => simple(
                self,
                Kernel::ResizeNearest {
                    align_corners: *align_corners,
                    half_pixel_centers: *half_pixel_centers,
                },
            )?,
            Op::Dequantize | Op::Densify => bail!(
                "{} of a tensor computed at run time is not supported (only of constants)",
                n.op.type_name()
            ),
            Op::Shape { .. } | Op::Pack { .. } => bail!(
                "{} on values only known at run time is not supported",
                n.op.type_name()
            ),
            Op::Custom { name: custom, .. } => {
                bail!("custom operator '{custom}' has no CPU kernel in tandem")
            }
            Op::OtherBuiltin { .. } => bail!("{} has no CPU kernel in tandem", n.op.type_name()),
        }
        Ok(())
    }
}

/// (top, left) padding of a convolution.
fn conv_pad(
    padding: Padding,
    input: [usize; 4],
    filter: [usize; 4],
    stride: [usize; 2],
    dilation: [usize; 2],
) -> [usize; 2] {
    match padding {
        Padding::Same => [
            same_padding(input[1], filter[1], stride[0], dilation[0]).0,
            same_padding(input[2], filter[2], stride[1], dilation[1]).0,
        ],
        Padding::Valid => [0, 0],
    }
}

/// (top, left) padding of a transposed convolution: TFLite computes SAME padding as for the
/// forward convolution from the output size.
fn transpose_pad(c: &TransposeConv, output: [usize; 4], filter: [usize; 4]) -> [usize; 2] {
    match c.padding {
        Padding::Same => [
            same_padding(output[1], filter[1], c.stride[0], 1).0,
            same_padding(output[2], filter[2], c.stride[1], 1).0,
        ],
        Padding::Valid => [0, 0],
    }
}
