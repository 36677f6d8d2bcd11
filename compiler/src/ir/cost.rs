//! Arithmetic and memory cost of one operator: FLOPs (a multiply-add counts as 2) and the bytes
//! it reads and writes (inputs, weights included, plus outputs).

use super::graph::Graph;
use super::op::Op;
use petgraph::stable_graph::NodeIndex;
use serde::Serialize;

/// Cost of one operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Cost {
    pub flops: u64,
    pub bytes: u64,
}

/// The cost of `node`, from the (inferred) shapes of its operands.
pub fn node_cost(graph: &Graph, node: NodeIndex) -> Cost {
    let n = &graph.dag[node];
    let shape = |slot: usize| graph.input(node, slot).map(|t| t.shape.clone()).unwrap_or_default();
    let out_elems = n.outputs.first().map(|&t| graph.tensor(t).elements()).unwrap_or(0) as u64;
    let prod = |s: &[usize]| s.iter().map(|&d| d as u64).product::<u64>();
    let bias = |slot: usize| u64::from(n.inputs.get(slot).copied().flatten().is_some());
    let flops = match &n.op {
        Op::Conv2d(_) => {
            // out elements × (2 × KH × KW × Cin_per_group) (+1 for the bias add)
            let f = shape(1);
            let per_out = if f.len() == 4 { 2 * prod(&f[1..]) } else { 0 };
            out_elems * (per_out + bias(2))
        }
        Op::DepthwiseConv2d(_) => {
            let f = shape(1);
            let per_out = if f.len() == 4 { 2 * (f[1] * f[2]) as u64 } else { 0 };
            out_elems * (per_out + bias(2))
        }
        Op::TransposeConv(_) => {
            // every input element scatters into KH × KW × Cout outputs
            let f = shape(1);
            let x = shape(2);
            2 * prod(&x) * if f.len() == 4 { (f[0] * f[1] * f[2]) as u64 } else { 0 }
                + out_elems * bias(3)
        }
        Op::TransposeConvBias(_) => {
            let f = shape(1);
            let x = shape(0);
            2 * prod(&x) * if f.len() == 4 { (f[0] * f[1] * f[2]) as u64 } else { 0 }
                + out_elems
        }
        Op::FullyConnected { .. } => {
            let w = shape(1);
            let depth = w.get(1).copied().unwrap_or(0) as u64;
            out_elems * (2 * depth + bias(2))
        }
        Op::BatchMatMul { adj_x, .. } => {
            let a = shape(0);
            let k = if a.len() >= 2 {
                (if *adj_x { a[a.len() - 2] } else { a[a.len() - 1] }) as u64
            } else {
                0
            };
            out_elems * 2 * k
        }
        Op::AveragePool2d(p) | Op::MaxPool2d(p) => out_elems * (p.filter[0] * p.filter[1]) as u64,
        Op::Mean { .. } => prod(&shape(0)),
        Op::Softmax { .. } => 5 * out_elems,
        Op::Binary { .. } | Op::Unary(_) | Op::Prelu => out_elems,
        Op::ResizeBilinear { .. } => 8 * out_elems,
        _ => 0,
    };
    let read: u64 = n
        .inputs
        .iter()
        .flatten()
        .map(|&t| {
            let t = graph.tensor(t);
            // Constants move what is stored (compressed for sparse tensors).
            t.data.as_ref().map_or(t.size_bytes(), |d| d.len()) as u64
        })
        .sum();
    let written: u64 = n.outputs.iter().map(|&t| graph.tensor(t).size_bytes() as u64).sum();
    Cost {
        flops,
        bytes: read + written,
    }
}
