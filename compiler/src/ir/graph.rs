//! The graph IR: operators are `petgraph` nodes, data dependencies are edges that name the tensor
//! they carry, and every tensor (dtype, shape, optional constant data) lives in one table.

use super::op::Op;
use anyhow::{anyhow, bail, Result};
use petgraph::stable_graph::{NodeIndex, StableDiGraph};
use petgraph::visit::EdgeRef;
use petgraph::Direction;
use std::collections::{BinaryHeap, HashMap};
use std::fmt;
use std::sync::Arc;
use tandem_runtime::DType;

/// Index of a tensor in [`Graph::tensors`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(pub usize);

impl fmt::Display for TensorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Affine quantization of a tensor: `real = scale * (q - zero_point)`, per tensor or along
/// `quantized_dimension`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Quantization {
    pub min: Vec<f32>,
    pub max: Vec<f32>,
    pub scale: Vec<f32>,
    pub zero_point: Vec<i64>,
    pub quantized_dimension: i32,
}

/// Index vector of a sparse dimension, in the width the file used.
#[derive(Debug, Clone, PartialEq)]
pub enum IndexVector {
    I32(Vec<i32>),
    U16(Vec<u16>),
    U8(Vec<u8>),
}

impl IndexVector {
    /// The values widened to `usize`; negative entries become `None`.
    pub fn values(&self) -> Vec<Option<usize>> {
        match self {
            IndexVector::I32(v) => v.iter().map(|&x| usize::try_from(x).ok()).collect(),
            IndexVector::U16(v) => v.iter().map(|&x| Some(x as usize)).collect(),
            IndexVector::U8(v) => v.iter().map(|&x| Some(x as usize)).collect(),
        }
    }
}

/// Storage of one dimension of a sparse tensor (in traversal order).
#[derive(Debug, Clone, PartialEq)]
pub enum DimStorage {
    Dense {
        size: usize,
    },
    SparseCsr {
        segments: IndexVector,
        indices: IndexVector,
    },
}

/// Sparsity of a constant tensor, as stored by the TFLite converter.
#[derive(Debug, Clone, PartialEq)]
pub struct Sparsity {
    pub traversal_order: Vec<i32>,
    pub block_map: Vec<i32>,
    pub dims: Vec<DimStorage>,
}

/// A tensor: its element type, static shape, and constant data if it has any.
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    pub name: String,
    pub dtype: DType,
    /// Static shape (batch 1); dynamic dimensions of `shape_signature` appear here as their
    /// static size from the file.
    pub shape: Vec<usize>,
    /// The file's shape signature, where `-1` marks a dynamic dimension.
    pub shape_signature: Option<Vec<i32>>,
    /// Constant contents (little-endian, row-major; sparse tensors hold their compressed values).
    pub data: Option<Arc<[u8]>>,
    pub quantization: Option<Quantization>,
    pub sparsity: Option<Sparsity>,
    pub is_variable: bool,
}

impl Tensor {
    /// A tensor without data.
    pub fn new(name: impl Into<String>, dtype: DType, shape: Vec<usize>) -> Self {
        Tensor {
            name: name.into(),
            dtype,
            shape,
            shape_signature: None,
            data: None,
            quantization: None,
            sparsity: None,
            is_variable: false,
        }
    }

    /// Number of elements of the static shape (1 for a scalar).
    pub fn elements(&self) -> usize {
        self.shape.iter().product()
    }

    /// Bytes of the dense tensor (0 for types without a fixed size).
    pub fn size_bytes(&self) -> usize {
        self.elements() * self.dtype.size_bytes().unwrap_or(0)
    }

    /// Constant integer contents (INT32 or INT64), if the tensor is a dense constant of that type.
    pub fn int_values(&self) -> Option<Vec<i64>> {
        let data = self.data.as_ref()?;
        if self.sparsity.is_some() {
            return None;
        }
        match self.dtype {
            DType::I32 => Some(
                data.chunks_exact(4)
                    .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i64)
                    .collect(),
            ),
            DType::I64 => Some(
                data.chunks_exact(8)
                    .map(|c| i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
                    .collect(),
            ),
            _ => None,
        }
    }

    /// Constant float32 contents, if the tensor is a dense FLOAT32 constant.
    pub fn f32_values(&self) -> Option<Vec<f32>> {
        let data = self.data.as_ref()?;
        (self.dtype == DType::F32 && self.sparsity.is_none()).then(|| {
            data.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        })
    }
}

/// An operator instance.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub op: Op,
    /// Operand tensors in the op's slot order; `None` is an omitted optional operand (TFLite -1).
    pub inputs: Vec<Option<TensorId>>,
    pub outputs: Vec<TensorId>,
    /// Operator version from the file's operator code (1 for ops we create).
    pub version: i32,
}

/// A data dependency: the consumer reads `tensor` at operand slot `slot`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Edge {
    pub tensor: TensorId,
    pub slot: usize,
}

/// A named byte blob stored in the model (TFLite metadata entry).
#[derive(Debug, Clone, PartialEq)]
pub struct Metadata {
    pub name: String,
    pub data: Vec<u8>,
}

/// A TFLite signature: named inputs and outputs of the main graph.
#[derive(Debug, Clone, PartialEq)]
pub struct Signature {
    pub key: String,
    pub inputs: Vec<(String, TensorId)>,
    pub outputs: Vec<(String, TensorId)>,
}

/// A model: one dataflow graph over a tensor table.
///
/// Invariants kept by [`Graph::add_node`]: every tensor index a node names exists; a tensor has at
/// most one producer; there is an edge from producer to consumer for every operand slot that
/// reads a produced tensor.
#[derive(Debug, Clone, Default)]
pub struct Graph {
    pub dag: StableDiGraph<Node, Edge>,
    pub tensors: Vec<Tensor>,
    pub inputs: Vec<TensorId>,
    pub outputs: Vec<TensorId>,
    pub metadata: Vec<Metadata>,
    pub signatures: Vec<Signature>,
    pub description: String,
    producers: HashMap<TensorId, NodeIndex>,
}

impl Graph {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a tensor and returns its id.
    pub fn add_tensor(&mut self, tensor: Tensor) -> TensorId {
        self.tensors.push(tensor);
        TensorId(self.tensors.len() - 1)
    }

    pub fn tensor(&self, id: TensorId) -> &Tensor {
        &self.tensors[id.0]
    }

    pub fn tensor_mut(&mut self, id: TensorId) -> &mut Tensor {
        &mut self.tensors[id.0]
    }

    /// The node that produces `tensor`, if any (graph inputs and constants have none).
    pub fn producer(&self, tensor: TensorId) -> Option<NodeIndex> {
        self.producers.get(&tensor).copied()
    }

    /// Adds an operator reading `inputs` and writing `outputs`, with edges from the producers of
    /// its inputs. Fails if a tensor index is out of range or an output already has a producer.
    pub fn add_node(
        &mut self,
        op: Op,
        inputs: Vec<Option<TensorId>>,
        outputs: Vec<TensorId>,
    ) -> Result<NodeIndex> {
        let name = op.type_name();
        for t in inputs.iter().flatten().chain(&outputs) {
            if t.0 >= self.tensors.len() {
                bail!(
                    "{name} refers to tensor {t}, but there are only {}",
                    self.tensors.len()
                );
            }
        }
        for &out in &outputs {
            if let Some(&other) = self.producers.get(&out) {
                bail!(
                    "tensor {out} '{}' is written by two operators ({} and a new {name})",
                    self.tensor(out).name,
                    self.dag[other].op.type_name()
                );
            }
        }
        let node = self.dag.add_node(Node {
            op,
            inputs: inputs.clone(),
            outputs: outputs.clone(),
            version: 1,
        });
        for &out in &outputs {
            self.producers.insert(out, node);
        }
        for (slot, t) in inputs.iter().enumerate() {
            if let Some(t) = t {
                if let Some(&from) = self.producers.get(t) {
                    self.dag.add_edge(from, node, Edge { tensor: *t, slot });
                }
            }
        }
        Ok(node)
    }

    /// Nodes in execution order: a topological order that keeps the order of insertion wherever
    /// the dependencies allow. Fails, naming a node on the cycle, if the graph has one. Also
    /// links consumers that were added before their producer.
    pub fn execution_order(&self) -> Result<Vec<NodeIndex>> {
        let mut indegree: HashMap<NodeIndex, usize> = self
            .dag
            .node_indices()
            .map(|n| (n, self.dag.edges_directed(n, Direction::Incoming).count()))
            .collect();
        let mut ready: BinaryHeap<std::cmp::Reverse<NodeIndex>> = indegree
            .iter()
            .filter(|(_, &d)| d == 0)
            .map(|(&n, _)| std::cmp::Reverse(n))
            .collect();
        let mut order = Vec::with_capacity(indegree.len());
        while let Some(std::cmp::Reverse(n)) = ready.pop() {
            order.push(n);
            for e in self.dag.edges_directed(n, Direction::Outgoing) {
                let d = indegree
                    .get_mut(&e.target())
                    .ok_or_else(|| anyhow!("dangling edge"))?;
                *d -= 1;
                if *d == 0 {
                    ready.push(std::cmp::Reverse(e.target()));
                }
            }
        }
        if order.len() != indegree.len() {
            let stuck = indegree
                .iter()
                .filter(|(_, &d)| d > 0)
                .map(|(&n, _)| n)
                .min()
                .ok_or_else(|| anyhow!("cycle"))?;
            bail!(
                "the graph has a cycle through operator {} ({}): its inputs depend on its own outputs",
                stuck.index(),
                self.dag[stuck].op.type_name()
            );
        }
        Ok(order)
    }

    /// Adds the edges for operand slots that read a tensor whose producer was added after the
    /// consumer (files may list operators in any order).
    pub fn link_late_producers(&mut self) {
        let nodes: Vec<NodeIndex> = self.dag.node_indices().collect();
        for n in nodes {
            let inputs = self.dag[n].inputs.clone();
            for (slot, t) in inputs.iter().enumerate() {
                let Some(t) = t else { continue };
                let Some(&from) = self.producers.get(t) else {
                    continue;
                };
                let exists = self
                    .dag
                    .edges_directed(n, Direction::Incoming)
                    .any(|e| e.source() == from && e.weight().slot == slot);
                if !exists {
                    self.dag.add_edge(from, n, Edge { tensor: *t, slot });
                }
            }
        }
    }

    /// Recomputes producers and edges from the nodes' operand lists, after a pass has edited
    /// them. Fails if a tensor ends up with two producers.
    pub fn rebuild_edges(&mut self) -> Result<()> {
        self.dag.clear_edges();
        self.producers.clear();
        let nodes: Vec<NodeIndex> = self.dag.node_indices().collect();
        for &n in &nodes {
            for &out in &self.dag[n].outputs {
                if self.producers.insert(out, n).is_some() {
                    bail!(
                        "tensor {out} '{}' has two producers",
                        self.tensors[out.0].name
                    );
                }
            }
        }
        self.link_late_producers();
        Ok(())
    }

    /// Removes a node (its outputs lose their producer). Call [`Graph::rebuild_edges`] after a
    /// batch of edits.
    pub fn remove_node(&mut self, node: NodeIndex) -> Option<Node> {
        let removed = self.dag.remove_node(node)?;
        for out in &removed.outputs {
            self.producers.remove(out);
        }
        Some(removed)
    }

    /// Nodes reading `tensor`, with the operand slot.
    pub fn consumers(&self, tensor: TensorId) -> Vec<(NodeIndex, usize)> {
        self.dag
            .node_indices()
            .flat_map(|n| {
                self.dag[n]
                    .inputs
                    .iter()
                    .enumerate()
                    .filter(move |(_, t)| **t == Some(tensor))
                    .map(move |(slot, _)| (n, slot))
            })
            .collect()
    }

    /// Input tensor of `node` at `slot`, if present.
    pub fn input(&self, node: NodeIndex, slot: usize) -> Option<&Tensor> {
        self.dag[node]
            .inputs
            .get(slot)
            .copied()
            .flatten()
            .map(|t| self.tensor(t))
    }
}
