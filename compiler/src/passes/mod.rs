//! Graph rewrites that prepare a read model for execution, each with one job:
//!
//! - [`fold_constants`]: DEQUANTIZE of constants (float16, int8/uint8 with scale and zero point)
//!   and DENSIFY of sparse constants become dense float32 constants; shape arithmetic whose
//!   values are known (SHAPE, STRIDED_SLICE, PACK, … feeding RESHAPE) becomes integer constants.
//! - [`fuse_activations`]: RELU / RELU6 / RELU_N1_TO_1 / TANH after an op that can apply it
//!   becomes that op's fused activation.
//! - [`remove_dead`]: operators whose outputs nobody reads are dropped.
//!
//! [`prepare`] runs them in order. [`diagonalwise::refactor_depthwise`] (depthwise convolutions
//! as block-diagonal grouped convolutions) runs after it, as the compile options say.

mod constants;
pub mod diagonalwise;
mod fuse;

pub use constants::fold_constants;
pub use diagonalwise::{refactor_depthwise, RefactorDepthwise};
pub use fuse::fuse_activations;

use crate::ir::{shape, Graph};
use anyhow::Result;
use petgraph::stable_graph::NodeIndex;

/// Runs every pass: constant folding, activation fusion, dead-code removal; shapes are checked
/// again afterwards.
pub fn prepare(graph: &mut Graph) -> Result<()> {
    let known = shape::infer_graph(graph)?;
    fold_constants(graph, &known)?;
    fuse_activations(graph)?;
    remove_dead(graph)?;
    shape::infer_graph(graph)?;
    Ok(())
}

/// Removes operators none of whose outputs is read or is a graph output, until none is left.
pub fn remove_dead(graph: &mut Graph) -> Result<()> {
    loop {
        let dead: Vec<NodeIndex> = graph
            .dag
            .node_indices()
            .filter(|&n| {
                graph.dag[n]
                    .outputs
                    .iter()
                    .all(|&t| !graph.outputs.contains(&t) && graph.consumers(t).is_empty())
            })
            .collect();
        if dead.is_empty() {
            return graph.rebuild_edges();
        }
        for n in dead {
            graph.remove_node(n);
        }
    }
}
