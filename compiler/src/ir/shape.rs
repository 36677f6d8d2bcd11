//! Shape inference and validation for every operator the reader understands.
//!
//! [`infer_graph`] walks the graph in execution order, computes each operator's output shapes
//! from its input shapes, attributes and constant operands, and checks them against the shapes the
//! file declares: a mismatch is an error naming the operator and the tensor. Integer values that
//! shape arithmetic computes (SHAPE, PACK, STRIDED_SLICE, ... feeding RESHAPE) are tracked so
//! that shapes behind such chains are inferred too. Custom and unmodelled builtin operators keep
//! the shapes declared in the file.

use super::graph::{Graph, TensorId};
use super::op::{Op, Padding, StridedSlice, UnaryKind};
use anyhow::{anyhow, bail, ensure, Context, Result};
use petgraph::stable_graph::NodeIndex;
use std::collections::HashMap;
use tandem_runtime::DType;

/// Known integer contents of tensors (constants, and values computed by shape arithmetic).
#[derive(Debug, Default, Clone)]
pub struct KnownValues(HashMap<TensorId, Vec<i64>>);

impl KnownValues {
    /// The values of `t`: its constant data, or what shape arithmetic computed for it.
    pub fn get(&self, graph: &Graph, t: TensorId) -> Option<Vec<i64>> {
        self.0
            .get(&t)
            .cloned()
            .or_else(|| graph.tensor(t).int_values())
    }
}

/// Infers and validates the shapes of every operator's outputs, in execution order, and returns
/// the integer values computed along the way. Errors name the operator (by index and type) and
/// the offending tensor.
pub fn infer_graph(graph: &mut Graph) -> Result<KnownValues> {
    let mut known = KnownValues::default();
    for node in graph.execution_order()? {
        infer_node(graph, node, &mut known, true)?;
    }
    Ok(known)
}

/// Infers `node`'s output shapes and stores them. With `check_declared`, an output whose stored
/// shape differs from the inferred one is an error (the stored shape is what the file declared);
/// without it, stored shapes are simply overwritten (used when building graphs in code).
pub fn infer_node(
    graph: &mut Graph,
    node: NodeIndex,
    known: &mut KnownValues,
    check_declared: bool,
) -> Result<()> {
    let op_name = graph.dag[node].op.type_name();
    let context = || format!("operator {} ({op_name})", node.index());
    let inferred = infer_outputs(graph, node, known).with_context(context)?;
    let outputs = graph.dag[node].outputs.clone();
    let Some(inferred) = inferred else {
        return Ok(());
    };
    ensure!(
        inferred.len() == outputs.len(),
        "{}: has {} outputs, expected {}",
        context(),
        outputs.len(),
        inferred.len()
    );
    for (slot, (t, shape)) in outputs.iter().zip(inferred).enumerate() {
        ensure!(
            element_count(&shape).is_some(),
            "{}: output {slot} shape {shape:?} is too large",
            context()
        );
        let tensor = graph.tensor_mut(*t);
        if check_declared
            && !declared_matches(&tensor.shape, tensor.shape_signature.as_deref(), &shape)
        {
            bail!(
                "{}: output {slot} (tensor {t} '{}') is declared {:?} but its inputs give {:?}",
                context(),
                tensor.name,
                tensor.shape,
                shape
            );
        }
        tensor.shape = shape;
    }
    Ok(())
}

/// Largest element count of one tensor tandem accepts (2^32).
pub const MAX_ELEMENTS: usize = 1 << 32;

/// The element count of `shape`, or `None` past [`MAX_ELEMENTS`].
pub fn element_count(shape: &[usize]) -> Option<usize> {
    shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= MAX_ELEMENTS)
}

/// Whether an inferred shape agrees with a declared one. Where the file's shape signature marks a
/// dimension dynamic (-1), the declared static size is a placeholder and is not compared.
fn declared_matches(declared: &[usize], signature: Option<&[i32]>, inferred: &[usize]) -> bool {
    match signature {
        Some(sig) if sig.len() == inferred.len() && sig.contains(&-1) => sig
            .iter()
            .zip(inferred)
            .all(|(&s, &i)| s == -1 || usize::try_from(s) == Ok(i)),
        _ => declared == inferred,
    }
}

/// Output size of a windowed op along one spatial dimension.
pub fn window_output(
    input: usize,
    kernel: usize,
    stride: usize,
    dilation: usize,
    padding: Padding,
) -> Result<usize> {
    ensure!(stride > 0, "stride must be positive");
    ensure!(dilation > 0, "dilation must be positive");
    ensure!(kernel > 0, "kernel size must be positive");
    let effective = (kernel - 1)
        .checked_mul(dilation)
        .and_then(|k| k.checked_add(1))
        .ok_or_else(|| anyhow!("kernel too large"))?;
    match padding {
        Padding::Same => Ok(input.div_ceil(stride)),
        Padding::Valid => {
            ensure!(
                input >= effective,
                "input size {input} is smaller than the effective kernel {effective} with VALID padding"
            );
            Ok((input - effective) / stride + 1)
        }
    }
}

/// Total padding before and after for one dimension (TFLite's rule for SAME).
pub fn same_padding(input: usize, kernel: usize, stride: usize, dilation: usize) -> (usize, usize) {
    let out = input.div_ceil(stride.max(1));
    let effective = (kernel.max(1) - 1) * dilation + 1;
    let needed = ((out.max(1) - 1) * stride + effective).saturating_sub(input);
    (needed / 2, needed - needed / 2)
}

/// Numpy-style broadcast of two shapes.
pub fn broadcast(a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let rank = a.len().max(b.len());
    let mut out = vec![0; rank];
    for i in 0..rank {
        let da = if i + a.len() >= rank {
            a[i + a.len() - rank]
        } else {
            1
        };
        let db = if i + b.len() >= rank {
            b[i + b.len() - rank]
        } else {
            1
        };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => bail!("shapes {a:?} and {b:?} do not broadcast"),
        };
    }
    Ok(out)
}

/// Normalises a possibly negative axis against `rank`.
pub fn normalize_axis(axis: i64, rank: usize) -> Result<usize> {
    let r = rank as i64;
    ensure!(
        (-r..r).contains(&axis),
        "axis {axis} is out of range for rank {rank}"
    );
    Ok(if axis < 0 {
        (axis + r) as usize
    } else {
        axis as usize
    })
}

fn to_usize(values: &[i64], what: &str) -> Result<Vec<usize>> {
    values
        .iter()
        .map(|&v| usize::try_from(v).map_err(|_| anyhow!("{what} has negative entry {v}")))
        .collect()
}

/// Computes output shapes; `None` means "keep the declared shapes" (custom and unknown ops, and
/// shapes that depend on runtime values).
fn infer_outputs(
    graph: &Graph,
    node: NodeIndex,
    known: &mut KnownValues,
) -> Result<Option<Vec<Vec<usize>>>> {
    let n = &graph.dag[node];
    if !matches!(n.op, Op::Custom { .. } | Op::OtherBuiltin { .. }) {
        ensure!(!n.outputs.is_empty(), "has no outputs");
    }
    let input = |slot: usize, what: &str| -> Result<TensorId> {
        n.inputs
            .get(slot)
            .copied()
            .flatten()
            .ok_or_else(|| anyhow!("input {slot} ({what}) is missing"))
    };
    let shape = |slot: usize, what: &str| -> Result<Vec<usize>> {
        Ok(graph.tensor(input(slot, what)?).shape.clone())
    };
    let values = |slot: usize, what: &str| -> Result<Option<Vec<i64>>> {
        Ok(known.get(graph, input(slot, what)?))
    };
    let const_values = |slot: usize, what: &str| -> Result<Vec<i64>> {
        values(slot, what)?
            .ok_or_else(|| anyhow!("input {slot} ({what}) must be a constant integer tensor"))
    };
    let rank4 = |s: &[usize], what: &str| -> Result<()> {
        ensure!(s.len() == 4, "{what} must be rank 4 (NHWC), got {s:?}");
        Ok(())
    };
    let one = |s: Vec<usize>| Ok(Some(vec![s]));

    match &n.op {
        Op::Binary { .. } => one(broadcast(&shape(0, "lhs")?, &shape(1, "rhs")?)?),
        Op::Unary(UnaryKind::LeakyRelu { .. }) | Op::Unary(_) | Op::Softmax { .. } => {
            one(shape(0, "input")?)
        }
        Op::Prelu => {
            let x = shape(0, "input")?;
            let alpha = shape(1, "alpha")?;
            ensure!(
                broadcast(&x, &alpha)? == x,
                "alpha {alpha:?} does not broadcast to the input {x:?}"
            );
            one(x)
        }
        Op::AveragePool2d(p) | Op::MaxPool2d(p) => {
            let x = shape(0, "input")?;
            rank4(&x, "input")?;
            let h = window_output(x[1], p.filter[0], p.stride[0], 1, p.padding)?;
            let w = window_output(x[2], p.filter[1], p.stride[1], 1, p.padding)?;
            one(vec![x[0], h, w, x[3]])
        }
        Op::Concatenation { axis, .. } => {
            ensure!(!n.inputs.is_empty(), "needs at least one input");
            let first = shape(0, "input 0")?;
            let axis = normalize_axis(*axis as i64, first.len())?;
            let mut out = first.clone();
            out[axis] = 0;
            let mut all_values = Some(Vec::new());
            for slot in 0..n.inputs.len() {
                let s = shape(slot, "input")?;
                ensure!(
                    s.len() == first.len()
                        && s.iter()
                            .zip(&first)
                            .enumerate()
                            .all(|(i, (a, b))| i == axis || a == b),
                    "input {slot} shape {s:?} does not match input 0 {first:?} outside axis {axis}"
                );
                out[axis] += s[axis];
                all_values = match (all_values, values(slot, "input")?) {
                    (Some(mut acc), Some(v)) if first.len() == 1 => {
                        acc.extend(v);
                        Some(acc)
                    }
                    _ => None,
                };
            }
            if let Some(v) = all_values {
                known.0.insert(n.outputs[0], v);
            }
            one(out)
        }
        Op::Conv2d(c) => {
            let x = shape(0, "input")?;
            let f = shape(1, "filter")?;
            rank4(&x, "input")?;
            rank4(&f, "filter")?;
            ensure!(f[3] > 0 && f[0] > 0, "filter {f:?} has an empty dimension");
            ensure!(
                x[3] > 0 && x[3] % f[3] == 0,
                "input has {} channels, not a positive multiple of the filter's {} input channels",
                x[3],
                f[3]
            );
            let groups = x[3] / f[3];
            ensure!(
                f[0] % groups == 0,
                "{} output channels do not divide into {groups} groups",
                f[0]
            );
            check_bias(graph, n.inputs.get(2).copied().flatten(), f[0])?;
            let h = window_output(x[1], f[1], c.stride[0], c.dilation[0], c.padding)?;
            let w = window_output(x[2], f[2], c.stride[1], c.dilation[1], c.padding)?;
            one(vec![x[0], h, w, f[0]])
        }
        Op::DepthwiseConv2d(c) => {
            let x = shape(0, "input")?;
            let f = shape(1, "filter")?;
            rank4(&x, "input")?;
            rank4(&f, "filter")?;
            ensure!(
                f[0] == 1,
                "depthwise filter {f:?} must have leading dimension 1"
            );
            ensure!(
                x[3] > 0 && f[3] % x[3] == 0,
                "filter has {} channels, not a multiple of the input's {}",
                f[3],
                x[3]
            );
            check_bias(graph, n.inputs.get(2).copied().flatten(), f[3])?;
            let h = window_output(x[1], f[1], c.stride[0], c.dilation[0], c.padding)?;
            let w = window_output(x[2], f[2], c.stride[1], c.dilation[1], c.padding)?;
            one(vec![x[0], h, w, f[3]])
        }
        Op::TransposeConv(c) => {
            let out = to_usize(&const_values(0, "output_shape")?, "output_shape")?;
            let f = shape(1, "filter")?;
            let x = shape(2, "input")?;
            rank4(&out, "output_shape")?;
            rank4(&f, "filter")?;
            rank4(&x, "input")?;
            ensure!(
                f[3] == x[3],
                "filter input channels {} != input channels {}",
                f[3],
                x[3]
            );
            ensure!(
                out[3] == f[0],
                "output_shape channels {} != filter outputs {}",
                out[3],
                f[0]
            );
            ensure!(
                out[0] == x[0],
                "output_shape batch {} != input batch {}",
                out[0],
                x[0]
            );
            for d in 0..2 {
                let back = window_output(out[d + 1], f[d + 1], c.stride[d], 1, c.padding)?;
                ensure!(
                    back == x[d + 1],
                    "output_shape {out:?} is inconsistent with the input {x:?} (stride {:?})",
                    c.stride
                );
            }
            check_bias(graph, n.inputs.get(3).copied().flatten(), f[0])?;
            one(out)
        }
        Op::TransposeConvBias(c) => {
            let x = shape(0, "input")?;
            let f = shape(1, "filter")?;
            rank4(&x, "input")?;
            rank4(&f, "filter")?;
            ensure!(
                f[3] == x[3],
                "filter input channels {} != input channels {}",
                f[3],
                x[3]
            );
            check_bias(graph, n.inputs.get(2).copied().flatten(), f[0])?;
            let size = |d: usize| -> Result<usize> {
                let s = c.stride[d];
                ensure!(s > 0, "stride must be positive");
                ensure!(x[d + 1] > 0, "input {x:?} has an empty spatial dimension");
                Ok(match c.padding {
                    Padding::Same => x[d + 1] * s,
                    Padding::Valid => (x[d + 1] - 1) * s + f[d + 1],
                })
            };
            one(vec![x[0], size(0)?, size(1)?, f[0]])
        }
        Op::FullyConnected { keep_num_dims, .. } => {
            let x = shape(0, "input")?;
            let wshape = shape(1, "weights")?;
            ensure!(
                wshape.len() == 2,
                "weights must be rank 2 [out, in], got {wshape:?}"
            );
            let (units, depth) = (wshape[0], wshape[1]);
            ensure!(depth > 0, "weights {wshape:?} have no input features");
            let elements: usize = x.iter().product();
            ensure!(
                !x.is_empty() && elements.is_multiple_of(depth),
                "input {x:?} cannot be viewed as rows of {depth} features"
            );
            check_bias(graph, n.inputs.get(2).copied().flatten(), units)?;
            if *keep_num_dims {
                ensure!(
                    x.last() == Some(&depth),
                    "keep_num_dims needs the last input dimension {x:?} to be {depth}"
                );
                let mut out = x.clone();
                if let Some(last) = out.last_mut() {
                    *last = units;
                }
                one(out)
            } else {
                one(vec![elements / depth, units])
            }
        }
        Op::BatchMatMul { adj_x, adj_y } => {
            let a = shape(0, "lhs")?;
            let b = shape(1, "rhs")?;
            ensure!(
                a.len() >= 2 && b.len() >= 2,
                "operands {a:?} and {b:?} need rank >= 2"
            );
            let (ar, ac) = (a[a.len() - 2], a[a.len() - 1]);
            let (br, bc) = (b[b.len() - 2], b[b.len() - 1]);
            let (m, k1) = if *adj_x { (ac, ar) } else { (ar, ac) };
            let (k2, nn) = if *adj_y { (bc, br) } else { (br, bc) };
            ensure!(k1 == k2, "inner dimensions differ: {a:?} x {b:?}");
            let mut out = broadcast(&a[..a.len() - 2], &b[..b.len() - 2])?;
            out.extend([m, nn]);
            one(out)
        }
        Op::Dequantize | Op::Densify => one(shape(0, "input")?),
        Op::Pad | Op::PadV2 => {
            let x = shape(0, "input")?;
            let pads = const_values(1, "paddings")?;
            ensure!(
                pads.len() == 2 * x.len(),
                "paddings have {} values, need {} for rank {}",
                pads.len(),
                2 * x.len(),
                x.len()
            );
            let pads = to_usize(&pads, "paddings")?;
            let out = x
                .iter()
                .enumerate()
                .map(|(i, &d)| d + pads[2 * i] + pads[2 * i + 1])
                .collect();
            one(out)
        }
        Op::Mean { keep_dims } => {
            let x = shape(0, "input")?;
            let axes = const_values(1, "axes")?;
            let mut reduced = vec![false; x.len()];
            for a in axes {
                reduced[normalize_axis(a, x.len())?] = true;
            }
            let out = x
                .iter()
                .zip(&reduced)
                .filter_map(|(&d, &r)| match (r, keep_dims) {
                    (true, true) => Some(1),
                    (true, false) => None,
                    (false, _) => Some(d),
                })
                .collect();
            one(out)
        }
        Op::Reshape { new_shape } => {
            let x = shape(0, "input")?;
            let target = match n.inputs.get(1).copied().flatten() {
                Some(t) => known.get(graph, t),
                None => new_shape
                    .as_ref()
                    .map(|v| v.iter().map(|&d| d as i64).collect()),
            };
            let elements: usize = x.iter().product();
            let out = match target {
                Some(target) => resolve_reshape(&target, elements)?,
                None => {
                    // The target shape is computed at run time: keep the declared one, which
                    // must still hold the same number of elements.
                    let declared = &graph.tensor(n.outputs[0]).shape;
                    ensure!(
                        declared.iter().product::<usize>() == elements,
                        "declared output {declared:?} does not hold the input's {elements} elements"
                    );
                    declared.clone()
                }
            };
            if let Some(v) = values(0, "input")? {
                known.0.insert(n.outputs[0], v);
            }
            one(out)
        }
        Op::Squeeze { dims } => {
            let x = shape(0, "input")?;
            let mut drop = vec![false; x.len()];
            if dims.is_empty() {
                for (i, &d) in x.iter().enumerate() {
                    drop[i] = d == 1;
                }
            } else {
                for &d in dims {
                    let a = normalize_axis(d as i64, x.len())?;
                    ensure!(
                        x[a] == 1,
                        "cannot squeeze dimension {a} of size {} in {x:?}",
                        x[a]
                    );
                    drop[a] = true;
                }
            }
            if let Some(v) = values(0, "input")? {
                known.0.insert(n.outputs[0], v);
            }
            one(x
                .iter()
                .zip(&drop)
                .filter(|(_, &d)| !d)
                .map(|(&s, _)| s)
                .collect())
        }
        Op::Shape { .. } => {
            let x = shape(0, "input")?;
            known
                .0
                .insert(n.outputs[0], x.iter().map(|&d| d as i64).collect());
            one(vec![x.len()])
        }
        Op::Pack { axis, values_count } => {
            ensure!(
                n.inputs.len() == *values_count && *values_count > 0,
                "values_count {values_count} but {} inputs",
                n.inputs.len()
            );
            let first = shape(0, "input 0")?;
            let mut all = Some(Vec::new());
            for slot in 0..n.inputs.len() {
                let s = shape(slot, "input")?;
                ensure!(
                    s == first,
                    "input {slot} shape {s:?} differs from input 0 {first:?}"
                );
                all = match (all, values(slot, "input")?) {
                    (Some(mut acc), Some(v)) if first.len() <= 1 && *axis == 0 => {
                        acc.extend(v);
                        Some(acc)
                    }
                    _ => None,
                };
            }
            let a = normalize_axis(*axis as i64, first.len() + 1)?;
            let mut out = first.clone();
            out.insert(a, n.inputs.len());
            if let Some(v) = all.filter(|_| first.is_empty()) {
                known.0.insert(n.outputs[0], v);
            }
            one(out)
        }
        Op::StridedSlice(attrs) => {
            let x = shape(0, "input")?;
            let begin = const_values(1, "begin")?;
            let end = const_values(2, "end")?;
            let strides = match n.inputs.get(3).copied().flatten() {
                Some(t) => known.get(graph, t).ok_or_else(|| {
                    anyhow!("input 3 (strides) must be a constant integer tensor")
                })?,
                None => vec![1; begin.len()],
            };
            let (out, picks) = strided_slice_shape(&x, &begin, &end, &strides, attrs)?;
            if let (Some(v), 1) = (values(0, "input")?, x.len()) {
                if let Some(picked) = picks.iter().map(|&i| v.get(i).copied()).collect() {
                    known.0.insert(n.outputs[0], picked);
                }
            }
            one(out)
        }
        Op::Slice => {
            let x = shape(0, "input")?;
            let begin = const_values(1, "begin")?;
            let size = const_values(2, "size")?;
            ensure!(
                begin.len() == x.len() && size.len() == x.len(),
                "begin {begin:?} and size {size:?} must have one entry per dimension of {x:?}"
            );
            let mut out = Vec::with_capacity(x.len());
            for i in 0..x.len() {
                let b =
                    usize::try_from(begin[i]).map_err(|_| anyhow!("negative begin {begin:?}"))?;
                ensure!(b <= x[i], "begin {begin:?} is outside {x:?}");
                let s = if size[i] == -1 {
                    x[i] - b
                } else {
                    usize::try_from(size[i]).map_err(|_| anyhow!("bad size {size:?}"))?
                };
                ensure!(
                    b + s <= x[i],
                    "slice begin {begin:?} size {size:?} exceeds {x:?}"
                );
                out.push(s);
            }
            if let (Some(v), 1) = (values(0, "input")?, x.len()) {
                let b = begin[0] as usize;
                if let Some(part) = v.get(b..b + out[0]) {
                    known.0.insert(n.outputs[0], part.to_vec());
                }
            }
            one(out)
        }
        Op::Split { num_splits } => {
            let axis = const_values(0, "axis")?;
            ensure!(axis.len() == 1, "axis must be a scalar, got {axis:?}");
            let x = shape(1, "input")?;
            let a = normalize_axis(axis[0], x.len())?;
            ensure!(
                *num_splits > 0 && x[a] % num_splits == 0,
                "dimension {a} of {x:?} does not split into {num_splits} equal parts"
            );
            let mut part = x.clone();
            part[a] /= num_splits;
            Ok(Some(vec![part; *num_splits]))
        }
        Op::Transpose => {
            let x = shape(0, "input")?;
            let perm = const_values(1, "perm")?;
            ensure!(
                perm.len() == x.len(),
                "perm {perm:?} does not match rank of {x:?}"
            );
            let mut seen = vec![false; x.len()];
            let mut out = Vec::with_capacity(x.len());
            for &p in &perm {
                let a = normalize_axis(p, x.len())?;
                ensure!(!seen[a], "perm {perm:?} repeats axis {a}");
                seen[a] = true;
                out.push(x[a]);
            }
            one(out)
        }
        Op::ResizeBilinear { .. } | Op::ResizeNearestNeighbor { .. } => {
            let x = shape(0, "input")?;
            rank4(&x, "input")?;
            let size = to_usize(&const_values(1, "size")?, "size")?;
            ensure!(size.len() == 2, "size must have 2 values, got {size:?}");
            ensure!(size[0] > 0 && size[1] > 0, "size {size:?} must be positive");
            one(vec![x[0], size[0], size[1], x[3]])
        }
        Op::DepthToSpace { block_size: b } => {
            let x = shape(0, "input")?;
            rank4(&x, "input")?;
            let b = *b;
            ensure!(
                b > 0 && x[3] % (b * b) == 0,
                "channels {} not divisible by block {b}²",
                x[3]
            );
            one(vec![x[0], x[1] * b, x[2] * b, x[3] / (b * b)])
        }
        Op::SpaceToDepth { block_size: b } => {
            let x = shape(0, "input")?;
            rank4(&x, "input")?;
            let b = *b;
            ensure!(
                b > 0 && x[1] % b == 0 && x[2] % b == 0,
                "spatial size {}x{} not divisible by block {b}",
                x[1],
                x[2]
            );
            let depth = x[3]
                .checked_mul(b * b)
                .ok_or_else(|| anyhow!("block {b} makes the channel count overflow"))?;
            one(vec![x[0], x[1] / b, x[2] / b, depth])
        }
        Op::Custom { .. } | Op::OtherBuiltin { .. } => Ok(None),
    }
}

/// Checks that an optional bias has `channels` elements.
fn check_bias(graph: &Graph, bias: Option<TensorId>, channels: usize) -> Result<()> {
    if let Some(b) = bias {
        let s = &graph.tensor(b).shape;
        ensure!(
            s.iter().product::<usize>() == channels && s.len() <= 1,
            "bias shape {s:?} does not match {channels} output channels"
        );
    }
    Ok(())
}

/// Resolves a reshape target (with at most one `-1`) against an element count.
pub fn resolve_reshape(target: &[i64], elements: usize) -> Result<Vec<usize>> {
    let mut unknown = None;
    let mut known_product = 1usize;
    for (i, &d) in target.iter().enumerate() {
        if d == -1 {
            ensure!(
                unknown.is_none(),
                "reshape target {target:?} has two -1 entries"
            );
            unknown = Some(i);
        } else {
            let d = usize::try_from(d).map_err(|_| anyhow!("reshape target {target:?} has {d}"))?;
            known_product = known_product
                .checked_mul(d)
                .ok_or_else(|| anyhow!("reshape target {target:?} overflows"))?;
        }
    }
    let mut out: Vec<usize> = target.iter().map(|&d| d.max(0) as usize).collect();
    if let Some(i) = unknown {
        ensure!(
            known_product > 0 && elements.is_multiple_of(known_product),
            "cannot reshape {elements} elements to {target:?}"
        );
        out[i] = elements / known_product;
    } else {
        ensure!(
            known_product == elements,
            "cannot reshape {elements} elements to {target:?}"
        );
    }
    Ok(out)
}

/// One input dimension of a resolved STRIDED_SLICE: read `count` indices `begin + k·stride`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SliceDim {
    pub begin: usize,
    pub stride: isize,
    pub count: usize,
    /// The dimension is dropped from the output (shrink_axis_mask).
    pub shrink: bool,
}

/// Resolves STRIDED_SLICE's begin/end/strides and masks into per-dimension index ranges of `x`.
pub fn resolve_strided_slice(
    x: &[usize],
    begin: &[i64],
    end: &[i64],
    strides: &[i64],
    a: &StridedSlice,
) -> Result<Vec<SliceDim>> {
    ensure!(
        a.ellipsis_mask == 0 && a.new_axis_mask == 0,
        "ellipsis_mask and new_axis_mask are not supported"
    );
    ensure!(
        begin.len() == end.len() && end.len() == strides.len() && begin.len() <= x.len(),
        "begin {begin:?}, end {end:?} and strides {strides:?} must match and cover at most the rank of {x:?}"
    );
    let mut dims = Vec::with_capacity(x.len());
    for (i, &dim) in x.iter().enumerate() {
        if i >= begin.len() {
            dims.push(SliceDim {
                begin: 0,
                stride: 1,
                count: dim,
                shrink: false,
            });
            continue;
        }
        let d = dim as i64;
        let s = strides[i];
        ensure!(s != 0, "stride {i} is zero");
        let clamp = |v: i64, lo: i64, hi: i64| v.max(lo).min(hi);
        let norm = |v: i64| if v < 0 { v.saturating_add(d) } else { v };
        let bit = |mask: i32| i < 32 && mask & (1 << i) != 0;
        let shrink = bit(a.shrink_axis_mask);
        let (b, e) = if s > 0 {
            let b = if bit(a.begin_mask) {
                0
            } else {
                clamp(norm(begin[i]), 0, d)
            };
            let e = if shrink {
                b + 1
            } else if bit(a.end_mask) {
                d
            } else if a.offset {
                clamp(b.saturating_add(end[i]), 0, d)
            } else {
                clamp(norm(end[i]), 0, d)
            };
            (b, e)
        } else {
            let b = if bit(a.begin_mask) {
                d - 1
            } else {
                clamp(norm(begin[i]), -1, d - 1)
            };
            let e = if shrink {
                b - 1
            } else if bit(a.end_mask) {
                -1
            } else {
                clamp(norm(end[i]), -1, d - 1)
            };
            (b, e)
        };
        if shrink {
            ensure!(
                (0..d).contains(&b),
                "shrunk index {} is outside dimension {i} of {x:?}",
                begin[i]
            );
        }
        // In i128: strides may be as large as the index type allows.
        let (span, step) = if s > 0 {
            ((e - b).max(0) as i128, s as i128)
        } else {
            ((b - e).max(0) as i128, -(s as i128))
        };
        let count = ((span + step - 1) / step) as i64;
        dims.push(SliceDim {
            begin: b.max(0) as usize,
            stride: s as isize,
            count: count as usize,
            shrink,
        });
    }
    Ok(dims)
}

/// Output shape of STRIDED_SLICE and, for rank-1 inputs, the picked indices.
fn strided_slice_shape(
    x: &[usize],
    begin: &[i64],
    end: &[i64],
    strides: &[i64],
    a: &StridedSlice,
) -> Result<(Vec<usize>, Vec<usize>)> {
    let dims = resolve_strided_slice(x, begin, end, strides, a)?;
    let out = dims.iter().filter(|d| !d.shrink).map(|d| d.count).collect();
    let picks = match dims.as_slice() {
        [d] => (0..d.count)
            .map(|k| (d.begin as isize + k as isize * d.stride) as usize)
            .collect(),
        _ => Vec::new(),
    };
    Ok((out, picks))
}

/// The dtype an op's first output has, for ops whose output dtype differs from input 0's.
pub fn output_dtype(op: &Op, input: DType) -> DType {
    match op {
        Op::Dequantize => DType::F32,
        Op::Shape { out_type } => *out_type,
        _ => input,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_output_follows_tflite_rules() {
        // SAME: ceil(in / stride); VALID: ceil((in - effective + 1) / stride).
        assert_eq!(window_output(224, 3, 2, 1, Padding::Same).ok(), Some(112));
        assert_eq!(window_output(225, 3, 2, 1, Padding::Same).ok(), Some(113));
        assert_eq!(window_output(299, 3, 2, 1, Padding::Valid).ok(), Some(149));
        assert_eq!(window_output(10, 3, 1, 2, Padding::Valid).ok(), Some(6));
        assert!(window_output(2, 3, 1, 1, Padding::Valid).is_err());
        assert!(window_output(8, 3, 0, 1, Padding::Same).is_err());
    }

    #[test]
    fn same_padding_puts_the_smaller_half_first() {
        assert_eq!(same_padding(224, 3, 2, 1), (0, 1));
        assert_eq!(same_padding(224, 3, 1, 1), (1, 1));
        assert_eq!(same_padding(7, 7, 1, 1), (3, 3));
        assert_eq!(same_padding(5, 3, 1, 2), (2, 2));
    }

    #[test]
    fn broadcast_is_numpy_style() {
        assert_eq!(
            broadcast(&[1, 8, 8, 16], &[16]).ok(),
            Some(vec![1, 8, 8, 16])
        );
        assert_eq!(broadcast(&[4, 1], &[1, 5]).ok(), Some(vec![4, 5]));
        assert_eq!(broadcast(&[], &[3]).ok(), Some(vec![3]));
        assert!(broadcast(&[2, 3], &[4]).is_err());
    }

    #[test]
    fn reshape_resolves_one_unknown() {
        assert_eq!(resolve_reshape(&[1, -1], 384).ok(), Some(vec![1, 384]));
        assert_eq!(resolve_reshape(&[2, 3, 4], 24).ok(), Some(vec![2, 3, 4]));
        assert!(resolve_reshape(&[-1, -1], 24).is_err());
        assert!(resolve_reshape(&[5, -1], 24).is_err());
        assert!(resolve_reshape(&[2, 3], 24).is_err());
        assert!(resolve_reshape(&[-2, 3], 24).is_err());
    }

    #[test]
    fn strided_slice_handles_masks_and_negative_strides() {
        let plain = StridedSlice::default();
        let (shape, picks) = strided_slice_shape(&[10], &[1], &[8], &[3], &plain).expect("ok");
        assert_eq!((shape, picks), (vec![3], vec![1, 4, 7]));
        let (shape, picks) = strided_slice_shape(&[5], &[-1], &[0], &[-1], &plain).expect("ok");
        assert_eq!((shape, picks), (vec![4], vec![4, 3, 2, 1]));
        let shrink = StridedSlice {
            shrink_axis_mask: 1,
            ..plain
        };
        let (shape, picks) = strided_slice_shape(&[4], &[2], &[3], &[1], &shrink).expect("ok");
        assert_eq!((shape, picks), (vec![], vec![2]));
        let masks = StridedSlice {
            begin_mask: 0b10,
            end_mask: 0b10,
            ..plain
        };
        let (shape, _) =
            strided_slice_shape(&[1, 9, 4], &[0, 5, 1], &[1, 0, 3], &[1, 2, 1], &masks)
                .expect("ok");
        assert_eq!(shape, vec![1, 5, 2]);
        assert!(strided_slice_shape(&[4], &[0], &[4], &[0], &plain).is_err());
        let ellipsis = StridedSlice {
            ellipsis_mask: 1,
            ..plain
        };
        assert!(strided_slice_shape(&[4], &[0], &[4], &[1], &ellipsis).is_err());
    }
}
