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

/// Product of `factors`, saturating instead of overflowing.
fn mul(factors: &[u64]) -> u64 {
    factors.iter().fold(1u64, |acc, &f| acc.saturating_mul(f))
}

/// The cost of `node`, from the (inferred) shapes of its operands.
pub fn node_cost(graph: &Graph, node: NodeIndex) -> Cost {
    let n = &graph.dag[node];
    let shape = |slot: usize| {
        graph
            .input(node, slot)
            .map(|t| t.shape.clone())
            .unwrap_or_default()
    };
    let out_elems = n
        .outputs
        .first()
        .map(|&t| graph.tensor(t).elements())
        .unwrap_or(0) as u64;
    let prod = |s: &[usize]| s.iter().fold(1u64, |acc, &d| acc.saturating_mul(d as u64));
    let bias = |slot: usize| u64::from(n.inputs.get(slot).copied().flatten().is_some());
    let flops = match &n.op {
        Op::Conv2d(_) => {
            // out elements × (2 × KH × KW × Cin_per_group) (+1 for the bias add)
            let f = shape(1);
            let per_out = if f.len() == 4 {
                mul(&[2, prod(&f[1..])])
            } else {
                0
            };
            mul(&[out_elems, per_out.saturating_add(bias(2))])
        }
        Op::DepthwiseConv2d(_) => {
            let f = shape(1);
            let per_out = if f.len() == 4 {
                mul(&[2, f[1] as u64, f[2] as u64])
            } else {
                0
            };
            mul(&[out_elems, per_out.saturating_add(bias(2))])
        }
        Op::TransposeConv(_) | Op::TransposeConvBias(_) => {
            // every input element scatters into KH × KW × Cout outputs, then the bias add
            let (f, x, has_bias) = match n.op {
                Op::TransposeConv(_) => (shape(1), shape(2), bias(3)),
                _ => (shape(1), shape(0), 1),
            };
            let scatter = if f.len() == 4 { prod(&f[..3]) } else { 0 };
            mul(&[2, prod(&x), scatter]).saturating_add(mul(&[out_elems, has_bias]))
        }
        Op::FullyConnected { .. } => {
            let depth = shape(1).get(1).copied().unwrap_or(0) as u64;
            mul(&[out_elems, mul(&[2, depth]).saturating_add(bias(2))])
        }
        Op::BatchMatMul { adj_x, .. } => {
            let a = shape(0);
            let k = match a.len() {
                0 | 1 => 0,
                r if *adj_x => a[r - 2] as u64,
                r => a[r - 1] as u64,
            };
            mul(&[out_elems, 2, k])
        }
        Op::AveragePool2d(p) | Op::MaxPool2d(p) => {
            mul(&[out_elems, p.filter[0] as u64, p.filter[1] as u64])
        }
        Op::Mean { .. } => prod(&shape(0)),
        Op::Softmax { .. } => mul(&[5, out_elems]),
        Op::Binary { .. } | Op::Unary(_) | Op::Prelu => out_elems,
        Op::ResizeBilinear { .. } => mul(&[8, out_elems]),
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
        .fold(0u64, u64::saturating_add);
    let written = n
        .outputs
        .iter()
        .map(|&t| graph.tensor(t).size_bytes() as u64)
        .fold(0u64, u64::saturating_add);
    Cost {
        flops,
        bytes: read.saturating_add(written),
    }
}
