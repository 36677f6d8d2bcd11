//! Building graphs in code (model zoo, tests, single-layer profiling models).
//!
//! Every operator added through [`GraphBuilder::op`] gets its output tensors created with the
//! shapes and dtypes that shape inference gives, so a built graph is valid by construction.

use super::graph::{Graph, Tensor, TensorId};
use super::op::Op;
use super::shape::{infer_node, output_dtype, KnownValues};
use anyhow::{anyhow, Result};
use std::sync::Arc;
use tandem_runtime::DType;

/// Incrementally builds a [`Graph`].
#[derive(Default)]
pub struct GraphBuilder {
    graph: Graph,
    known: KnownValues,
}

impl GraphBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a graph input.
    pub fn input(&mut self, name: &str, dtype: DType, shape: &[usize]) -> TensorId {
        let t = self
            .graph
            .add_tensor(Tensor::new(name, dtype, shape.to_vec()));
        self.graph.inputs.push(t);
        t
    }

    /// Adds a constant tensor with raw little-endian contents.
    pub fn constant(
        &mut self,
        name: &str,
        dtype: DType,
        shape: &[usize],
        data: Vec<u8>,
    ) -> TensorId {
        let mut t = Tensor::new(name, dtype, shape.to_vec());
        t.data = Some(Arc::from(data));
        self.graph.add_tensor(t)
    }

    /// Adds a float32 constant.
    pub fn const_f32(&mut self, name: &str, shape: &[usize], values: &[f32]) -> TensorId {
        debug_assert_eq!(shape.iter().product::<usize>(), values.len());
        let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.constant(name, DType::F32, shape, data)
    }

    /// Adds an int32 constant.
    pub fn const_i32(&mut self, name: &str, shape: &[usize], values: &[i32]) -> TensorId {
        debug_assert_eq!(shape.iter().product::<usize>(), values.len());
        let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.constant(name, DType::I32, shape, data)
    }

    /// Adds a raw tensor (for sparse or quantized constants built by hand).
    pub fn tensor(&mut self, tensor: Tensor) -> TensorId {
        self.graph.add_tensor(tensor)
    }

    /// Adds `op` reading `inputs` (`None` = omitted optional operand) and returns its
    /// `n_outputs` outputs, shaped by shape inference.
    pub fn op(
        &mut self,
        op: Op,
        inputs: &[Option<TensorId>],
        n_outputs: usize,
    ) -> Result<Vec<TensorId>> {
        let data_slot = match op {
            Op::Split { .. } => 1,
            Op::TransposeConv(_) => 2,
            _ => 0,
        };
        let in_dtype = inputs
            .get(data_slot)
            .copied()
            .flatten()
            .map(|t| self.graph.tensor(t).dtype)
            .ok_or_else(|| anyhow!("{} needs input {data_slot}", op.type_name()))?;
        let dtype = output_dtype(&op, in_dtype);
        let base = op.type_name().to_lowercase().replace(':', "_");
        let index = self.graph.dag.node_count();
        let outputs: Vec<TensorId> = (0..n_outputs)
            .map(|i| {
                let name = if n_outputs == 1 {
                    format!("{base}_{index}")
                } else {
                    format!("{base}_{index}:{i}")
                };
                self.graph.add_tensor(Tensor::new(name, dtype, Vec::new()))
            })
            .collect();
        let node = self.graph.add_node(op, inputs.to_vec(), outputs.clone())?;
        infer_node(&mut self.graph, node, &mut self.known, false)?;
        Ok(outputs)
    }

    /// [`GraphBuilder::op`] for single-output ops with all operands present.
    pub fn op1(&mut self, op: Op, inputs: &[TensorId]) -> Result<TensorId> {
        let inputs: Vec<Option<TensorId>> = inputs.iter().copied().map(Some).collect();
        Ok(self.op(op, &inputs, 1)?[0])
    }

    /// Shape of a tensor built so far.
    pub fn shape(&self, t: TensorId) -> &[usize] {
        &self.graph.tensor(t).shape
    }

    /// Marks `t` as a graph output.
    pub fn output(&mut self, t: TensorId) {
        self.graph.outputs.push(t);
    }

    /// Renames a tensor (to give outputs readable names).
    pub fn rename(&mut self, t: TensorId, name: &str) {
        self.graph.tensor_mut(t).name = name.to_string();
    }

    /// The finished graph.
    pub fn finish(mut self, description: &str) -> Graph {
        self.graph.description = description.to_string();
        self.graph
    }
}
