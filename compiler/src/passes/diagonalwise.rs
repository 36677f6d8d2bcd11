//! Diagonalwise refactorization: a DEPTHWISE_CONV_2D becomes a (grouped) CONV_2D whose weight is
//! block-diagonal, so a dense-convolution kernel can run it.
//!
//! A depthwise convolution with `C` input channels and depth multiplier `M` computes output channel
//! `o = c·M + m` from input channel `c` alone. Cut the channels into `C / G` groups of `G`
//! consecutive channels; the equivalent grouped convolution has `C / G` groups, `G` input and `G·M`
//! output channels per group, and its weight (TFLite layout `[C·M, KH, KW, G]`) is zero except
//! `W[o, y, x, (o / M) mod G] = F[0, y, x, o]`, where `F` is the depthwise filter
//! `[1, KH, KW, C·M]`. TFLite puts output `o` in group `o / (G·M)`, which is the group holding input
//! channel `o / M`, so output order, bias, padding, stride, dilation and fused activation carry
//! over unchanged. `G = C` gives one group: a standard CONV_2D with a full `C·M × C` diagonal.
//!
//! The rewrite multiplies the layer's multiply-accumulates and weight size by `G`; whether that
//! pays depends on how much faster the dense kernel is than the depthwise one on the target.

use crate::ir::op::{Conv2d, DepthwiseConv2d};
use crate::ir::{shape, Graph, Op, Tensor, TensorId};
use anyhow::{bail, ensure, Context, Result};
use petgraph::stable_graph::NodeIndex;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use tandem_runtime::DType;

/// Group sizes (input channels per group) the planner considers, besides `C` itself.
pub const CANDIDATE_GROUP_SIZES: [usize; 4] = [4, 8, 16, 32];

/// Which depthwise convolutions to rewrite, and into what.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RefactorDepthwise {
    /// Keep every DEPTHWISE_CONV_2D.
    Off,
    /// Decide per node with the planner's cost model (the latency predictors, or the oracle's
    /// measurements) among native and [`candidate_group_sizes`] ([`crate::dwauto`]). This pass
    /// alone (and a compilation without such a plan) keeps every node native, like
    /// [`RefactorDepthwise::Off`].
    #[default]
    Auto,
    /// Rewrite every depthwise node into one standard CONV_2D with a full diagonal (`G = C`).
    Full,
    /// Rewrite every depthwise node into a grouped CONV_2D with `G` input channels per group; `G`
    /// must divide every rewritten node's input channel count.
    Group(usize),
}

impl fmt::Display for RefactorDepthwise {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RefactorDepthwise::Off => write!(f, "off"),
            RefactorDepthwise::Auto => write!(f, "auto"),
            RefactorDepthwise::Full => write!(f, "full"),
            RefactorDepthwise::Group(g) => write!(f, "{g}"),
        }
    }
}

impl FromStr for RefactorDepthwise {
    type Err = anyhow::Error;

    /// Parses `off`, `auto`, `full` or a positive group size.
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s.trim().to_ascii_lowercase().as_str() {
            "off" => RefactorDepthwise::Off,
            "auto" => RefactorDepthwise::Auto,
            "full" => RefactorDepthwise::Full,
            other => match other.parse::<usize>() {
                Ok(g) if g > 0 => RefactorDepthwise::Group(g),
                _ => bail!(
                    "'{s}' is not a depthwise refactorization mode: expected off, auto, full or a \
                     positive group size"
                ),
            },
        })
    }
}

/// The group sizes `G` worth trying for depthwise node `node`: those of
/// [`CANDIDATE_GROUP_SIZES`] that divide its input channel count `C` and are smaller than it, then
/// `C` itself (the full diagonal), ascending. Fails if `node` is not a depthwise convolution with a
/// rank-4 input.
pub fn candidate_group_sizes(graph: &Graph, node: NodeIndex) -> Result<Vec<usize>> {
    let n = graph.dag.node_weight(node).context("no such operator")?;
    ensure!(
        matches!(n.op, Op::DepthwiseConv2d(_)),
        "operator {} is {}, not DEPTHWISE_CONV_2D",
        node.index(),
        n.op.type_name()
    );
    let input = graph
        .input(node, 0)
        .with_context(|| format!("operator {} (DEPTHWISE_CONV_2D) has no input", node.index()))?;
    ensure!(
        input.shape.len() == 4 && input.shape[3] > 0,
        "operator {} (DEPTHWISE_CONV_2D): input '{}' has shape {:?}, not [N, H, W, C]",
        node.index(),
        input.name,
        input.shape
    );
    let c = input.shape[3];
    let mut sizes: Vec<usize> = CANDIDATE_GROUP_SIZES
        .iter()
        .copied()
        .filter(|&g| g < c && c.is_multiple_of(g))
        .collect();
    sizes.push(c);
    Ok(sizes)
}

/// Rewrites the graph's DEPTHWISE_CONV_2D nodes as `mode` says (see [`RefactorDepthwise`]).
/// Returns how many nodes it rewrote.
///
/// Each rewritten node keeps its node index, its input and output tensors; its filter becomes the
/// block-diagonal `[C·M, KH, KW, G]` constant (the old filter tensor is replaced in place when no
/// other operator reads it, else a new tensor is added); a node without bias gets a zero bias
/// (TFLite's CONV_2D kernel requires one). The CONV_2D is written as operator version 6 when it is
/// grouped (the first version that allows groups, TFLite 2.9), version 1 otherwise.
///
/// Errors name the operator and its output tensor: a group size that does not divide the node's
/// input channels, weights or bias that are not dense FLOAT32 constants, inconsistent shapes.
/// Nothing is changed when an error is returned.
pub fn refactor_depthwise(graph: &mut Graph, mode: RefactorDepthwise) -> Result<usize> {
    refactor_depthwise_per_node(graph, |_, _| mode)
}

/// [`refactor_depthwise`] with a mode chosen per depthwise node by `choose` (called once per
/// node, in execution order, on the unchanged graph): how a planner applies its decisions.
/// [`RefactorDepthwise::Off`] and [`RefactorDepthwise::Auto`] keep the node native.
pub fn refactor_depthwise_per_node(
    graph: &mut Graph,
    mut choose: impl FnMut(&Graph, NodeIndex) -> RefactorDepthwise,
) -> Result<usize> {
    let nodes: Vec<NodeIndex> = graph
        .execution_order()?
        .into_iter()
        .filter(|&n| matches!(graph.dag[n].op, Op::DepthwiseConv2d(_)))
        .collect();
    // Plan every node first so that a bad one leaves the graph untouched.
    let mut plans = Vec::with_capacity(nodes.len());
    for node in nodes {
        let group = match choose(graph, node) {
            RefactorDepthwise::Off | RefactorDepthwise::Auto => continue,
            RefactorDepthwise::Full => None,
            RefactorDepthwise::Group(g) => Some(g),
        };
        plans.push((
            node,
            plan(graph, node, group).with_context(|| describe(graph, node))?,
        ));
    }
    if plans.is_empty() {
        return Ok(0);
    }
    let count = plans.len();
    for (node, plan) in plans {
        apply(graph, node, plan);
    }
    graph.rebuild_edges()?;
    shape::infer_graph(graph).context("shapes after diagonalwise refactorization")?;
    Ok(count)
}

/// "operator 7 (DEPTHWISE_CONV_2D, output 'x')" for error messages.
fn describe(graph: &Graph, node: NodeIndex) -> String {
    let n = &graph.dag[node];
    match n.outputs.first() {
        Some(&t) => format!(
            "operator {} ({}, output '{}')",
            node.index(),
            n.op.type_name(),
            graph.tensor(t).name
        ),
        None => format!("operator {} ({})", node.index(), n.op.type_name()),
    }
}

/// A checked rewrite of one node, ready to apply.
struct Plan {
    attrs: DepthwiseConv2d,
    group: usize,
    channels: usize,
    filter: TensorId,
    weights: Vec<f32>,
    /// `[C·M, KH, KW, G]`
    shape: Vec<usize>,
    /// Replace the filter tensor in place (no other reader) rather than adding one.
    in_place: bool,
    /// Present when the node has a bias; otherwise a zero bias of `C·M` is added.
    bias: Option<TensorId>,
}

fn plan(graph: &Graph, node: NodeIndex, group: Option<usize>) -> Result<Plan> {
    let n = &graph.dag[node];
    let Op::DepthwiseConv2d(attrs) = n.op else {
        bail!("not a depthwise convolution");
    };
    let input = graph.input(node, 0).context("the input is missing")?;
    let filter_id = n
        .inputs
        .get(1)
        .copied()
        .flatten()
        .context("the filter is missing")?;
    let filter = graph.tensor(filter_id);
    ensure!(
        input.shape.len() == 4 && filter.shape.len() == 4 && filter.shape[0] == 1,
        "input {:?} and filter {:?} are not [N, H, W, C] and [1, KH, KW, C·M]",
        input.shape,
        filter.shape
    );
    let c = input.shape[3];
    let [_, kh, kw, cm] = [
        filter.shape[0],
        filter.shape[1],
        filter.shape[2],
        filter.shape[3],
    ];
    ensure!(
        c > 0 && cm > 0 && cm.is_multiple_of(c),
        "filter has {cm} output channels, not a positive multiple of the input's {c}"
    );
    let g = group.unwrap_or(c);
    ensure!(
        g > 0 && g <= c && c.is_multiple_of(g),
        "group size {g} does not divide the {c} input channels (divisors of {c}: {})",
        divisors(c)
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    );
    let values = filter.f32_values().with_context(|| {
        format!(
            "filter '{}' is {} {}; only constant dense FLOAT32 filters can be refactorized",
            filter.name,
            if filter.data.is_some() {
                "a"
            } else {
                "a non-constant"
            },
            filter.dtype
        )
    })?;
    let bias = n.inputs.get(2).copied().flatten();
    if let Some(b) = bias {
        let t = graph.tensor(b);
        ensure!(
            t.dtype == DType::F32 && t.elements() == cm,
            "bias '{}' is {} {:?}, expected FLOAT32 [{cm}]",
            t.name,
            t.dtype,
            t.shape
        );
    }
    let in_place = graph.consumers(filter_id).len() == 1
        && !graph.outputs.contains(&filter_id)
        && !graph.inputs.contains(&filter_id);
    Ok(Plan {
        attrs,
        group: g,
        channels: c,
        filter: filter_id,
        weights: block_diagonal_weights(&values, [kh, kw], c, cm / c, g),
        shape: vec![cm, kh, kw, g],
        in_place,
        bias,
    })
}

fn apply(graph: &mut Graph, node: NodeIndex, plan: Plan) {
    let bytes: Arc<[u8]> = Arc::from(
        plan.weights
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<u8>>(),
    );
    let cm = plan.shape[0];
    let filter = if plan.in_place {
        let t = graph.tensor_mut(plan.filter);
        t.shape = plan.shape;
        t.shape_signature = None;
        t.data = Some(bytes);
        plan.filter
    } else {
        let old = graph.tensor(plan.filter);
        let mut t = Tensor::new(
            format!("{}/diagonalwise_g{}", old.name, plan.group),
            DType::F32,
            plan.shape,
        );
        t.data = Some(bytes);
        graph.add_tensor(t)
    };
    let bias = plan.bias.unwrap_or_else(|| {
        let out_name = graph.tensor(graph.dag[node].outputs[0]).name.clone();
        let mut t = Tensor::new(format!("{out_name}/zero_bias"), DType::F32, vec![cm]);
        t.data = Some(Arc::from(vec![0u8; cm * 4]));
        graph.add_tensor(t)
    });
    let a = plan.attrs;
    let n = &mut graph.dag[node];
    n.op = Op::Conv2d(Conv2d {
        padding: a.padding,
        stride: a.stride,
        dilation: a.dilation,
        activation: a.activation,
    });
    n.inputs = vec![n.inputs[0], Some(filter), Some(bias)];
    n.version = if plan.group < plan.channels { 6 } else { 1 };
}

/// The grouped-convolution filter `[C·M, KH, KW, G]` (TFLite CONV_2D layout, `G` input channels
/// per group) equivalent to depthwise filter `filter` (`[1, KH, KW, C·M]`, output channel
/// `c·M + m` reads input channel `c`): zero except `W[o, y, x, (o / M) mod G] = F[0, y, x, o]`.
///
/// Preconditions: `filter.len() == KH·KW·C·M`, `G` divides `C`.
pub fn block_diagonal_weights(
    filter: &[f32],
    kernel: [usize; 2],
    channels: usize,
    multiplier: usize,
    group: usize,
) -> Vec<f32> {
    let cm = channels * multiplier;
    let taps = kernel[0] * kernel[1];
    debug_assert_eq!(filter.len(), taps * cm);
    let mut w = vec![0.0; cm * taps * group];
    for o in 0..cm {
        let local = (o / multiplier) % group;
        for tap in 0..taps {
            w[(o * taps + tap) * group + local] = filter[tap * cm + o];
        }
    }
    w
}

fn divisors(n: usize) -> Vec<usize> {
    (1..=n).filter(|&d| n.is_multiple_of(d)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::builder::GraphBuilder;
    use crate::ir::{Activation, Padding};

    fn depthwise_graph(c: usize, m: usize, bias: bool) -> (Graph, TensorId) {
        let mut b = GraphBuilder::new();
        let x = b.input("x", DType::F32, &[1, 6, 6, c]);
        let w: Vec<f32> = (0..9 * c * m).map(|i| i as f32 + 1.0).collect();
        let w = b.const_f32("w", &[1, 3, 3, c * m], &w);
        let mut inputs = vec![Some(x), Some(w)];
        if bias {
            let bias: Vec<f32> = (0..c * m).map(|i| i as f32 * 0.5).collect();
            inputs.push(Some(b.const_f32("b", &[c * m], &bias)));
        }
        let y = b
            .op(
                Op::DepthwiseConv2d(DepthwiseConv2d {
                    padding: Padding::Same,
                    stride: [2, 2],
                    dilation: [1, 1],
                    depth_multiplier: m,
                    activation: Activation::Relu6,
                }),
                &inputs,
                1,
            )
            .expect("builds")[0];
        b.rename(y, "y");
        b.output(y);
        (b.finish("depthwise"), w)
    }

    #[test]
    fn weights_put_each_depthwise_tap_on_its_group_diagonal() {
        // C = 4, M = 2, G = 2, 1×2 kernel: filter[tap][o] = 10·tap + o.
        let (c, m, g) = (4, 2, 2);
        let filter: Vec<f32> = (0..2)
            .flat_map(|tap| (0..c * m).map(move |o| (10 * tap + o) as f32))
            .collect();
        let w = block_diagonal_weights(&filter, [1, 2], c, m, g);
        assert_eq!(w.len(), c * m * 2 * g);
        for o in 0..c * m {
            for tap in 0..2 {
                for i in 0..g {
                    let got = w[(o * 2 + tap) * g + i];
                    // Output o reads input channel o / M, local index (o / M) mod G in its group.
                    let want = if i == (o / m) % g {
                        (10 * tap + o) as f32
                    } else {
                        0.0
                    };
                    assert_eq!(got, want, "o {o} tap {tap} i {i}");
                }
            }
        }
    }

    #[test]
    fn full_mode_makes_one_standard_convolution() {
        let (mut graph, w) = depthwise_graph(4, 2, true);
        assert_eq!(
            refactor_depthwise(&mut graph, RefactorDepthwise::Full).expect("rewrites"),
            1
        );
        let node = graph.dag.node_indices().next().expect("one node");
        let n = &graph.dag[node];
        assert_eq!(
            n.op,
            Op::Conv2d(Conv2d {
                padding: Padding::Same,
                stride: [2, 2],
                dilation: [1, 1],
                activation: Activation::Relu6,
            })
        );
        assert_eq!(n.version, 1);
        // The filter had one reader, so it was replaced in place.
        assert_eq!(n.inputs[1], Some(w));
        assert_eq!(graph.tensor(w).shape, vec![8, 3, 3, 4]);
        assert_eq!(graph.tensor(graph.outputs[0]).shape, vec![1, 3, 3, 8]);
    }

    #[test]
    fn group_mode_makes_a_grouped_convolution_and_adds_a_zero_bias() {
        let (mut graph, _) = depthwise_graph(8, 1, false);
        refactor_depthwise(&mut graph, RefactorDepthwise::Group(4)).expect("rewrites");
        let node = graph.dag.node_indices().next().expect("one node");
        let n = &graph.dag[node];
        assert!(matches!(n.op, Op::Conv2d(_)));
        assert_eq!(n.version, 6);
        assert_eq!(
            graph.input(node, 1).expect("filter").shape,
            vec![8, 3, 3, 4]
        );
        let bias = graph.input(node, 2).expect("bias");
        assert_eq!(bias.f32_values(), Some(vec![0.0; 8]));
    }

    #[test]
    fn a_shared_filter_is_copied_not_replaced() {
        let (mut graph, w) = depthwise_graph(4, 1, true);
        let x = graph.inputs[0];
        let y2 = graph.add_tensor(Tensor::new("y2", DType::F32, vec![1, 3, 3, 4]));
        let op = graph.dag[graph.dag.node_indices().next().expect("node")]
            .op
            .clone();
        graph
            .add_node(op, vec![Some(x), Some(w), None], vec![y2])
            .expect("adds");
        graph.outputs.push(y2);
        assert_eq!(
            refactor_depthwise(&mut graph, RefactorDepthwise::Group(2)).expect("rewrites"),
            2
        );
        assert_eq!(graph.tensor(w).shape, vec![1, 3, 3, 4], "original kept");
        for node in graph.dag.node_indices() {
            let filter = graph.dag[node].inputs[1].expect("filter");
            assert_ne!(filter, w);
            assert_eq!(graph.tensor(filter).shape, vec![4, 3, 3, 2]);
        }
    }

    #[test]
    fn per_node_choices_rewrite_only_the_chosen_nodes() {
        let (mut graph, w) = depthwise_graph(4, 1, true);
        let x = graph.inputs[0];
        let first = graph.dag.node_indices().next().expect("node");
        let op = graph.dag[first].op.clone();
        let y2 = graph.add_tensor(Tensor::new("y2", DType::F32, vec![1, 3, 3, 4]));
        let second = graph
            .add_node(op, vec![Some(x), Some(w), None], vec![y2])
            .expect("adds");
        graph.outputs.push(y2);
        let rewritten = refactor_depthwise_per_node(&mut graph, |_, n| {
            if n == second {
                RefactorDepthwise::Group(2)
            } else {
                RefactorDepthwise::Auto
            }
        })
        .expect("rewrites");
        assert_eq!(rewritten, 1);
        assert!(matches!(graph.dag[first].op, Op::DepthwiseConv2d(_)));
        assert!(matches!(graph.dag[second].op, Op::Conv2d(_)));
        assert_eq!(
            graph.input(second, 1).expect("filter").shape,
            vec![4, 3, 3, 2]
        );
    }

    #[test]
    fn off_and_auto_keep_the_native_op() {
        for mode in [RefactorDepthwise::Off, RefactorDepthwise::Auto] {
            let (mut graph, _) = depthwise_graph(4, 1, true);
            assert_eq!(refactor_depthwise(&mut graph, mode).expect("runs"), 0);
            let node = graph.dag.node_indices().next().expect("node");
            assert!(matches!(graph.dag[node].op, Op::DepthwiseConv2d(_)));
        }
    }

    #[test]
    fn a_group_size_that_does_not_divide_the_channels_is_an_error_naming_the_node() {
        for g in [3, 5, 12] {
            let (mut graph, w) = depthwise_graph(4, 1, true);
            let before = graph.tensor(w).clone();
            let err =
                refactor_depthwise(&mut graph, RefactorDepthwise::Group(g)).expect_err("must fail");
            let text = format!("{err:#}");
            assert!(
                text.contains("DEPTHWISE_CONV_2D, output 'y'")
                    && text.contains(&format!("group size {g} does not divide the 4 input")),
                "{text}"
            );
            assert_eq!(graph.tensor(w), &before, "graph left unchanged");
        }
    }

    #[test]
    fn a_non_constant_filter_is_an_error() {
        let mut b = GraphBuilder::new();
        let x = b.input("x", DType::F32, &[1, 4, 4, 2]);
        let w = b.input("w", DType::F32, &[1, 3, 3, 2]);
        let y = b
            .op1(
                Op::DepthwiseConv2d(DepthwiseConv2d {
                    padding: Padding::Valid,
                    stride: [1, 1],
                    dilation: [1, 1],
                    depth_multiplier: 1,
                    activation: Activation::None,
                }),
                &[x, w],
            )
            .expect("builds");
        b.output(y);
        let mut graph = b.finish("dynamic filter");
        let err = refactor_depthwise(&mut graph, RefactorDepthwise::Full).expect_err("fails");
        assert!(
            format!("{err:#}").contains("filter 'w' is a non-constant FLOAT32"),
            "{err:#}"
        );
    }

    #[test]
    fn candidates_are_the_dividing_sizes_below_c_then_c() {
        for (c, want) in [
            (32, vec![4, 8, 16, 32]),
            (96, vec![4, 8, 16, 32, 96]),
            (24, vec![4, 8, 24]),
            (6, vec![6]),
            (1, vec![1]),
        ] {
            let (graph, _) = depthwise_graph(c, 1, true);
            let node = graph.dag.node_indices().next().expect("node");
            assert_eq!(
                candidate_group_sizes(&graph, node).expect("depthwise"),
                want,
                "C = {c}"
            );
        }
    }

    #[test]
    fn modes_parse_and_print() {
        for (text, mode) in [
            ("off", RefactorDepthwise::Off),
            ("auto", RefactorDepthwise::Auto),
            ("FULL", RefactorDepthwise::Full),
            ("8", RefactorDepthwise::Group(8)),
        ] {
            let parsed: RefactorDepthwise = text.parse().expect("parses");
            assert_eq!(parsed, mode);
            assert_eq!(
                parsed.to_string().parse::<RefactorDepthwise>().ok(),
                Some(mode)
            );
        }
        for bad in ["0", "-4", "half", ""] {
            assert!(bad.parse::<RefactorDepthwise>().is_err(), "{bad}");
        }
    }
}
