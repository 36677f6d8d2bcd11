//! Constant folding: weights stored in compressed forms, and shape arithmetic.

use crate::ir::shape::KnownValues;
use crate::ir::{DimStorage, Graph, Op, Tensor};
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
    let values: Vec<f32> = t.f32_values().unwrap_or_else(|| {
        t.data
            .as_ref()
            .map(|d| {
                d.chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect()
            })
            .unwrap_or_default()
    });
    let mut dense = vec![0f32; t.elements()];
    let strides: Vec<usize> = (0..rank)
        .map(|d| t.shape[d + 1..].iter().product())
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
    let mut next_value = 0usize;
    // Depth-first walk over the stored dimensions; `segment` is the position within the parent.
    #[allow(clippy::too_many_arguments)]
    fn walk(
        level: usize,
        segment: usize,
        offset: usize,
        s: &crate::ir::Sparsity,
        order: &[usize],
        strides: &[usize],
        values: &[f32],
        next: &mut usize,
        dense: &mut [f32],
    ) -> Result<()> {
        if level == order.len() {
            let v = *values
                .get(*next)
                .context("fewer stored values than the sparsity metadata addresses")?;
            *dense.get_mut(offset).context("sparse index out of range")? = v;
            *next += 1;
            return Ok(());
        }
        let stride = strides[order[level]];
        match &s.dims[level] {
            DimStorage::Dense { size } => {
                for i in 0..*size {
                    walk(
                        level + 1,
                        segment * size + i,
                        offset + i * stride,
                        s,
                        order,
                        strides,
                        values,
                        next,
                        dense,
                    )?;
                }
            }
            DimStorage::SparseCsr { segments, indices } => {
                let seg = segments.values();
                let idx = indices.values();
                let (lo, hi) = (
                    seg.get(segment)
                        .copied()
                        .flatten()
                        .context("segment out of range")?,
                    seg.get(segment + 1)
                        .copied()
                        .flatten()
                        .context("segment out of range")?,
                );
                ensure!(lo <= hi && hi <= idx.len(), "bad sparse segment {lo}..{hi}");
                for (k, i) in idx[lo..hi].iter().enumerate() {
                    let i = i.context("negative sparse index")?;
                    walk(
                        level + 1,
                        lo + k,
                        offset + i * stride,
                        s,
                        order,
                        strides,
                        values,
                        next,
                        dense,
                    )?;
                }
            }
        }
        Ok(())
    }
    walk(
        0,
        0,
        0,
        s,
        &order,
        &strides,
        &values,
        &mut next_value,
        &mut dense,
    )
    .with_context(|| format!("densifying '{}'", t.name))?;
    ensure!(
        next_value == values.len(),
        "tensor '{}' stores {} values but its metadata addresses {next_value}",
        t.name,
        values.len()
    );
    Ok(f32_bytes(&dense))
}
