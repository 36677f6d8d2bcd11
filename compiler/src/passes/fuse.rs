//! Fusing standalone activations into the operator that produces their input.

use crate::ir::{Activation, Graph, Op, UnaryKind};
use anyhow::Result;

/// The fused-activation form of a standalone activation op, if it has one.
fn as_fused(op: &Op) -> Option<Activation> {
    match op {
        Op::Unary(UnaryKind::Relu) => Some(Activation::Relu),
        Op::Unary(UnaryKind::Relu6) => Some(Activation::Relu6),
        Op::Unary(UnaryKind::ReluN1To1) => Some(Activation::ReluN1To1),
        Op::Unary(UnaryKind::Tanh) => Some(Activation::Tanh),
        _ => None,
    }
}

/// The producer's fused activation slot, if it has one and it is still empty.
fn free_activation(op: &mut Op) -> Option<&mut Activation> {
    let slot = match op {
        Op::Conv2d(c) => &mut c.activation,
        Op::DepthwiseConv2d(c) => &mut c.activation,
        Op::TransposeConv(c) | Op::TransposeConvBias(c) => &mut c.activation,
        Op::FullyConnected { activation, .. } | Op::Binary { activation, .. } => activation,
        Op::AveragePool2d(p) | Op::MaxPool2d(p) => &mut p.activation,
        _ => return None,
    };
    (*slot == Activation::None).then_some(slot)
}

/// Fuses each RELU / RELU6 / RELU_N1_TO_1 / TANH into its producer when the producer can apply it,
/// has no activation yet, and the intermediate tensor has no other reader and is not a graph
/// output. The producer then writes the activation's output tensor directly.
pub fn fuse_activations(graph: &mut Graph) -> Result<()> {
    for node in graph.execution_order()? {
        let Some(activation) = graph.dag.node_weight(node).and_then(|n| as_fused(&n.op)) else {
            continue;
        };
        let (Some(Some(mid)), Some(&out)) = (
            graph.dag[node].inputs.first().copied(),
            graph.dag[node].outputs.first(),
        ) else {
            continue;
        };
        let Some(producer) = graph.producer(mid) else {
            continue;
        };
        if graph.outputs.contains(&mid)
            || graph.consumers(mid).len() != 1
            || graph.dag[producer].outputs.len() != 1
        {
            continue;
        }
        let Some(slot) = free_activation(&mut graph.dag[producer].op) else {
            continue;
        };
        *slot = activation;
        graph.dag[producer].outputs[0] = out;
        graph.remove_node(node);
        graph.rebuild_edges()?;
    }
    Ok(())
}
