//! Constant folding: weights stored in compressed forms, and shape arithmetic.

use crate::ir::shape::KnownValues;
use crate::ir::{DimStorage, Graph, IndexVector, Op, Tensor};
use anyhow::{bail, ensure, Context, Result};
use std::sync::Arc;
use tandem_runtime::DType;

fn f32_bytes(values: &[f32]) -> Arc<[u8]> {
    Arc::from(
        values
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<u8>>(),
    )
}

/// Replaces DEQUANTIZE and DENSIFY of constants, and operators whose integer outputs shape
/// inference already computed, by constants. `known` comes from shape inference of `graph`.
pub fn fold_constants(graph: &mut Graph, known: &KnownValues) -> Result<()> {
    for node in graph.execution_order()? {
        let n = &graph.dag[node];
        let context = || format!("operator {} ({})", node.index(), n.op.type_name());
        let all_constant = n
            .inputs
            .iter()
            .flatten()
            .all(|&t| graph.tensor(t).data.is_some());
        let folded: Option<Vec<Arc<[u8]>>> = match &n.op {
            Op::Dequantize if all_constant => {
                let source = graph.input(node, 0).context("DEQUANTIZE without input")?;
                Some(vec![f32_bytes(&dequantize(source).with_context(context)?)])
            }
            Op::Densify if all_constant => {
                let source = graph.input(node, 0).context("DENSIFY without input")?;
                Some(vec![densify(source).with_context(context)?])
            }
            Op::Shape { .. }
            | Op::Pack { .. }
            | Op::StridedSlice(_)
            | Op::Slice
            | Op::Concatenation { .. }
            | Op::Reshape { .. }
            | Op::Squeeze { .. } => {
                // Integer shape arithmetic whose results are all known.
                let outputs: Option<Vec<Vec<i64>>> = n
                    .outputs
                    .iter()
                    .map(|&t| {
                        let dtype = graph.tensor(t).dtype;
                        matches!(dtype, DType::I32 | DType::I64)
                            .then(|| known.get(graph, t))
                            .flatten()
                    })
                    .collect();
                outputs.map(|values| {
                    n.outputs
                        .iter()
                        .zip(values)
                        .map(|(&t, v)| match graph.tensor(t).dtype {
                            DType::I64 => Arc::from(
                                v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>(),
                            ),
                            _ => Arc::from(
                                v.iter()
                                    .flat_map(|&x| (x as i32).to_le_bytes())
                                    .collect::<Vec<u8>>(),
                            ),
                        })
                        .collect()
                })
            }
            _ => None,
        };
        if let Some(data) = folded {
            let outputs = n.outputs.clone();
            for (t, bytes) in outputs.into_iter().zip(data) {
                let tensor = graph.tensor_mut(t);
                tensor.data = Some(bytes);
                tensor.quantization = None;
            }
            graph.remove_node(node);
        }
    }
    graph.rebuild_edges()
}

/// Float values of a float16 or affine-quantized integer constant.
fn dequantize(t: &Tensor) -> Result<Vec<f32>> {
    let data = t.data.as_ref().context("not a constant")?;
    match t.dtype {
        DType::F16 => Ok(data
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect()),
        DType::F32 => Ok(data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()),
        DType::I8 | DType::U8 => {
            let q = t
                .quantization
                .as_ref()
                .with_context(|| format!("tensor '{}' has no quantization parameters", t.name))?;
            ensure!(!q.scale.is_empty(), "tensor '{}' has no scale", t.name);
            let raw: Vec<i64> = match t.dtype {
                DType::I8 => data.iter().map(|&b| b as i8 as i64).collect(),
                _ => data.iter().map(|&b| b as i64).collect(),
            };
            let per_axis = q.scale.len() > 1;
            let axis = usize::try_from(q.quantized_dimension).unwrap_or(0);
            ensure!(
                !per_axis || t.shape.get(axis) == Some(&q.scale.len()),
                "tensor '{}': {} scales for axis {axis} of {:?}",
                t.name,
                q.scale.len(),
                t.shape
            );
            let inner: usize = t.shape.iter().skip(axis + 1).product();
            Ok(raw
                .iter()
                .enumerate()
                .map(|(i, &v)| {
                    let c = if per_axis {
                        (i / inner.max(1)) % q.scale.len()
                    } else {
                        0
                    };
                    let zp = q
                        .zero_point
                        .get(c)
                        .or(q.zero_point.first())
                        .copied()
                        .unwrap_or(0);
                    (v - zp) as f32 * q.scale[c]
                })
                .collect())
        }
        other => bail!("cannot dequantize a {other} constant '{}'", t.name),
    }
}

/// Dense contents of a sparse float32 constant (CSR / dense dimension formats, no blocks).
fn densify(t: &Tensor) -> Result<Arc<[u8]>> {
    let s = t
        .sparsity
        .as_ref()
        .with_context(|| format!("tensor '{}' is not sparse", t.name))?;
    ensure!(
        t.dtype == DType::F32,
        "sparse {} tensors are not supported ('{}')",
        t.dtype,
        t.name
    );
    ensure!(
        s.block_map.is_empty(),
        "block-sparse tensor '{}' is not supported",
        t.name
    );
    let rank = t.shape.len();
    ensure!(
        s.traversal_order.len() == rank && s.dims.len() == rank,
        "sparse tensor '{}': metadata does not match rank {rank}",
        t.name
    );
    let data = t.data.as_ref().context("not a constant")?;
    let values: Vec<f32> = data
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let order: Vec<usize> = s
        .traversal_order
        .iter()
        .map(|&d| usize::try_from(d).unwrap_or(usize::MAX))
        .collect();
    ensure!(
        order.iter().all(|&d| d < rank),
        "bad traversal order {:?}",
        s.traversal_order
    );
    // Decode each dimension once: dense sizes must be the shape's, CSR vectors are widened.
    let mut levels = Vec::with_capacity(rank);
    for (level, dim) in s.dims.iter().enumerate() {
        let extent = t.shape[order[level]];
        levels.push(match dim {
            DimStorage::Dense { size } => {
                ensure!(
                    *size == extent,
                    "dense dimension {level} has size {size}, the shape says {extent}"
                );
                Level::Dense(extent)
            }
            DimStorage::SparseCsr { segments, indices } => {
                let widen = |v: &IndexVector| -> Result<Vec<usize>> {
                    v.values()
                        .into_iter()
                        .map(|i| i.context("negative sparse index"))
                        .collect()
                };
                let indices = widen(indices)?;
                ensure!(
                    indices.iter().all(|&i| i < extent),
                    "sparse index beyond dimension {level} of size {extent}"
                );
                Level::Csr {
                    segments: widen(segments)?,
                    indices,
                }
            }
        });
    }
    let strides: Vec<usize> = order
        .iter()
        .map(|&d| t.shape[d + 1..].iter().product())
        .collect();
    let mut walk = Densify {
        levels: &levels,
        strides: &strides,
        values: &values,
        next: 0,
        dense: vec![0f32; t.elements()],
    };
    walk.visit(0, 0, 0)
        .with_context(|| format!("densifying '{}'", t.name))?;
    ensure!(
        walk.next == values.len(),
        "tensor '{}' stores {} values but its metadata addresses {}",
        t.name,
        values.len(),
        walk.next
    );
    Ok(f32_bytes(&walk.dense))
}

/// One stored dimension of a sparse tensor, decoded.
enum Level {
    Dense(usize),
    Csr {
        segments: Vec<usize>,
        indices: Vec<usize>,
    },
}

/// Depth-first walk over the stored dimensions, placing the stored values in order.
struct Densify<'a> {
    levels: &'a [Level],
    strides: &'a [usize],
    values: &'a [f32],
    next: usize,
    dense: Vec<f32>,
}

impl Densify<'_> {
    /// Visits the children of position `segment` (flattened within its parent) at `level`;
    /// `offset` is the dense element offset so far.
    fn visit(&mut self, level: usize, segment: usize, offset: usize) -> Result<()> {
        let Some(dim) = self.levels.get(level) else {
            let v = *self
                .values
                .get(self.next)
                .context("fewer stored values than the sparsity metadata addresses")?;
            *self
                .dense
                .get_mut(offset)
                .context("sparse index out of range")? = v;
            self.next += 1;
            return Ok(());
        };
        let stride = self.strides[level];
        match dim {
            Level::Dense(size) => {
                for i in 0..*size {
                    self.visit(level + 1, segment * size + i, offset + i * stride)?;
                }
            }
            Level::Csr { segments, indices } => {
                let lo = *segments.get(segment).context("segment out of range")?;
                let hi = *segments.get(segment + 1).context("segment out of range")?;
                ensure!(
                    lo <= hi && hi <= indices.len(),
                    "bad sparse segment {lo}..{hi}"
                );
                for (k, &index) in indices.iter().enumerate().take(hi).skip(lo) {
                    self.visit(level + 1, k, offset + index * stride)?;
                }
            }
        }
        Ok(())
    }
}
