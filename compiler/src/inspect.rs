//! `tandem inspect`: a per-operator report of a model (shapes, parameters, cost, splittability)
//! as a table for people and as JSON for tools.

use crate::ir::cost::node_cost;
use crate::ir::{Graph, Op, Padding, UnaryKind};
use anyhow::Result;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write;

/// One operator's line in the report.
#[derive(Debug, Clone, Serialize)]
pub struct OpReport {
    /// Position in execution order.
    pub index: usize,
    /// Schema builtin name (`CONV_2D`) or `CUSTOM:<name>`.
    #[serde(rename = "type")]
    pub op_type: String,
    /// Operand shapes; `null` for an omitted optional operand.
    pub inputs: Vec<Option<Vec<usize>>>,
    pub outputs: Vec<Vec<usize>>,
    /// Key attributes in short form (kernel, stride, padding, activation, ...).
    pub params: String,
    pub flops: u64,
    pub bytes: u64,
    /// Whether tandem can split the op's output channels between CPU and GPU.
    pub splittable: bool,
}

/// A graph input or output.
#[derive(Debug, Clone, Serialize)]
pub struct TensorReport {
    pub name: String,
    pub dtype: String,
    pub shape: Vec<usize>,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub description: String,
    pub inputs: Vec<TensorReport>,
    pub outputs: Vec<TensorReport>,
    pub op_counts: BTreeMap<String, usize>,
    pub ops: Vec<OpReport>,
    pub total_flops: u64,
    pub total_mflops: f64,
    pub splittable_ops: usize,
    /// Elements in constant tensors.
    pub parameters: u64,
    pub metadata: Vec<String>,
}

/// Builds the report of a read graph.
pub fn report(graph: &Graph) -> Result<Report> {
    let mut ops = Vec::new();
    let mut op_counts = BTreeMap::new();
    for (index, node) in graph.execution_order()?.into_iter().enumerate() {
        let n = &graph.dag[node];
        let op_type = n.op.type_name();
        *op_counts.entry(op_type.clone()).or_insert(0) += 1;
        let cost = node_cost(graph, node);
        ops.push(OpReport {
            index,
            op_type,
            inputs: n
                .inputs
                .iter()
                .map(|t| t.map(|t| graph.tensor(t).shape.clone()))
                .collect(),
            outputs: n
                .outputs
                .iter()
                .map(|&t| graph.tensor(t).shape.clone())
                .collect(),
            params: params(graph, node),
            flops: cost.flops,
            bytes: cost.bytes,
            splittable: n.op.is_channel_splittable(),
        });
    }
    let total_flops = ops.iter().map(|o| o.flops).fold(0u64, u64::saturating_add);
    let tensor_report = |t: &crate::ir::TensorId| {
        let t = graph.tensor(*t);
        TensorReport {
            name: t.name.clone(),
            dtype: t.dtype.to_string(),
            shape: t.shape.clone(),
        }
    };
    Ok(Report {
        description: graph.description.clone(),
        inputs: graph.inputs.iter().map(tensor_report).collect(),
        outputs: graph.outputs.iter().map(tensor_report).collect(),
        op_counts,
        splittable_ops: ops.iter().filter(|o| o.splittable).count(),
        total_flops,
        total_mflops: total_flops as f64 / 1e6,
        ops,
        parameters: graph
            .tensors
            .iter()
            .filter(|t| t.data.is_some())
            .map(|t| t.elements() as u64)
            .fold(0u64, u64::saturating_add),
        metadata: graph.metadata.iter().map(|m| m.name.clone()).collect(),
    })
}

fn pad(p: Padding) -> &'static str {
    match p {
        Padding::Same => "same",
        Padding::Valid => "valid",
    }
}

fn params(graph: &Graph, node: petgraph::stable_graph::NodeIndex) -> String {
    let n = &graph.dag[node];
    let kernel = |slot: usize| {
        graph
            .input(node, slot)
            .map(|t| t.shape.clone())
            .filter(|s| s.len() == 4)
            .map(|s| (s[1], s[2]))
            .unwrap_or((0, 0))
    };
    let act = n.op.activation().label();
    let mut s = match &n.op {
        Op::Conv2d(c) => {
            let (kh, kw) = kernel(1);
            format!(
                "k{kh}x{kw} s{}x{} d{}x{} {}",
                c.stride[0],
                c.stride[1],
                c.dilation[0],
                c.dilation[1],
                pad(c.padding)
            )
        }
        Op::DepthwiseConv2d(c) => {
            let (kh, kw) = kernel(1);
            let cin = graph
                .input(node, 0)
                .and_then(|t| t.shape.get(3).copied())
                .unwrap_or(1)
                .max(1);
            let cout = graph
                .input(node, 1)
                .and_then(|t| t.shape.get(3).copied())
                .unwrap_or(0);
            format!(
                "k{kh}x{kw} s{}x{} d{}x{} {} m{}",
                c.stride[0],
                c.stride[1],
                c.dilation[0],
                c.dilation[1],
                pad(c.padding),
                cout / cin
            )
        }
        Op::TransposeConv(c) => {
            let (kh, kw) = kernel(1);
            format!(
                "k{kh}x{kw} s{}x{} {}",
                c.stride[0],
                c.stride[1],
                pad(c.padding)
            )
        }
        Op::TransposeConvBias(c) => {
            let (kh, kw) = kernel(1);
            format!(
                "k{kh}x{kw} s{}x{} {} +bias",
                c.stride[0],
                c.stride[1],
                pad(c.padding)
            )
        }
        Op::AveragePool2d(p) | Op::MaxPool2d(p) => {
            format!(
                "k{}x{} s{}x{} {}",
                p.filter[0],
                p.filter[1],
                p.stride[0],
                p.stride[1],
                pad(p.padding)
            )
        }
        Op::FullyConnected { keep_num_dims, .. } => {
            if *keep_num_dims {
                "keep_num_dims".into()
            } else {
                String::new()
            }
        }
        Op::BatchMatMul { adj_x, adj_y } => format!("adj_x={adj_x} adj_y={adj_y}"),
        Op::Concatenation { axis, .. } => format!("axis {axis}"),
        Op::Mean { keep_dims } => format!("keep_dims={keep_dims}"),
        Op::Softmax { beta } => format!("beta {beta}"),
        Op::Unary(UnaryKind::LeakyRelu { alpha }) => format!("alpha {alpha}"),
        Op::Pack { axis, .. } => format!("axis {axis}"),
        Op::Split { num_splits } => format!("{num_splits} parts"),
        Op::Squeeze { dims } if !dims.is_empty() => format!("dims {dims:?}"),
        Op::DepthToSpace { block_size } | Op::SpaceToDepth { block_size } => {
            format!("block {block_size}")
        }
        Op::ResizeBilinear {
            align_corners,
            half_pixel_centers,
        }
        | Op::ResizeNearestNeighbor {
            align_corners,
            half_pixel_centers,
        } => {
            let mut v = Vec::new();
            if *align_corners {
                v.push("align_corners");
            }
            if *half_pixel_centers {
                v.push("half_pixel");
            }
            v.join(" ")
        }
        Op::Dequantize => graph
            .input(node, 0)
            .map(|t| format!("from {}", t.dtype))
            .unwrap_or_default(),
        Op::Custom { options, .. } => format!("{} option bytes", options.len()),
        _ => String::new(),
    };
    if !act.is_empty() {
        if !s.is_empty() {
            s.push(' ');
        }
        s.push_str(act);
    }
    s
}

fn shape_list<'s>(shapes: impl IntoIterator<Item = Option<&'s Vec<usize>>>) -> String {
    shapes
        .into_iter()
        .map(|s| match s {
            Some(s) => format!(
                "[{}]",
                s.iter()
                    .map(|d| d.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            None => "-".to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Renders the report as a fixed-width table with totals.
pub fn render_table(r: &Report) -> String {
    let mut out = String::new();
    if !r.description.is_empty() {
        let _ = writeln!(out, "model: {}", r.description);
    }
    for (label, list) in [("inputs", &r.inputs), ("outputs", &r.outputs)] {
        let items: Vec<String> = list
            .iter()
            .map(|t| format!("{} {} {:?}", t.name, t.dtype, t.shape))
            .collect();
        let _ = writeln!(out, "{label}: {}", items.join(", "));
    }
    let type_w = r
        .ops
        .iter()
        .map(|o| o.op_type.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let in_w = r
        .ops
        .iter()
        .map(|o| shape_list(o.inputs.iter().map(Option::as_ref)).len())
        .max()
        .unwrap_or(6)
        .clamp(6, 48);
    let out_w = r
        .ops
        .iter()
        .map(|o| shape_list(o.outputs.iter().map(Some)).len())
        .max()
        .unwrap_or(6)
        .clamp(6, 24);
    let _ = writeln!(
        out,
        "{:>4}  {:type_w$}  {:in_w$}  {:out_w$}  {:>9}  {:5}  params",
        "#", "op", "inputs", "outputs", "MFLOPs", "split"
    );
    for o in &r.ops {
        let _ = writeln!(
            out,
            "{:>4}  {:type_w$}  {:in_w$}  {:out_w$}  {:>9.3}  {:5}  {}",
            o.index,
            o.op_type,
            shape_list(o.inputs.iter().map(Option::as_ref)),
            shape_list(o.outputs.iter().map(Some)),
            o.flops as f64 / 1e6,
            if o.splittable { "yes" } else { "-" },
            o.params
        );
    }
    let counts: Vec<String> = r
        .op_counts
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    let _ = writeln!(
        out,
        "total: {} ops, {:.1} MFLOPs, {} splittable, {:.2} M parameters",
        r.ops.len(),
        r.total_mflops,
        r.splittable_ops,
        r.parameters as f64 / 1e6
    );
    let _ = writeln!(out, "op counts: {}", counts.join(", "));
    if !r.metadata.is_empty() {
        let _ = writeln!(out, "metadata: {}", r.metadata.join(", "));
    }
    out
}
