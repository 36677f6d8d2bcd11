//! Seeded model inputs, the same on every machine.

use crate::rng::Rng;
use tandem_compiler::ir::Graph;
use tandem_runtime::npy::NpyArray;
use tandem_runtime::DType;

/// One array per graph input, uniform in [-1, 1) for float inputs (zeros for other types),
/// from `seed`.
pub fn seeded_inputs(graph: &Graph, seed: u64) -> Vec<NpyArray> {
    let mut rng = Rng::new(seed);
    graph
        .inputs
        .iter()
        .map(|&t| {
            let t = graph.tensor(t);
            match t.dtype {
                DType::F32 => NpyArray::from_f32(t.shape.clone(), &rng.uniform(t.elements(), 1.0)),
                other => NpyArray {
                    dtype: other,
                    shape: t.shape.clone(),
                    data: vec![0; t.size_bytes()],
                },
            }
        })
        .collect()
}
