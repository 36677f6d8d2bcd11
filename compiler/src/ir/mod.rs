//! The graph IR: [`Graph`] (operators on `petgraph`, a tensor table), typed [`Op`]s, shape
//! inference and validation ([`shape`]), per-op FLOPs and bytes ([`cost`]), and a builder for
//! making models in code ([`builder`]).

pub mod builder;
pub mod cost;
pub mod graph;
pub mod op;
pub mod shape;

pub use graph::{
    DimStorage, Edge, Graph, IndexVector, Metadata, Node, Quantization, Signature, Sparsity,
    Tensor, TensorId,
};
pub use op::{Activation, BinaryKind, Op, Padding, UnaryKind};
