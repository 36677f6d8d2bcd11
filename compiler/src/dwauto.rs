//! `--refactor-depthwise auto`: per depthwise layer, native or one of its diagonalwise
//! refactorizations ([`crate::passes::diagonalwise`]), whichever a [`CostModel`] says is faster.
//!
//! Contracts:
//! - The alternatives of a depthwise node are native and a grouped convolution per
//!   [`candidate_group_sizes`] entry (`G ∈ {4, 8, 16, 32}` dividing `C`, below it, then `G = C`,
//!   a dense convolution) — [`crate::lower::depthwise_alternatives`], with the parameters
//!   lowering gives them.
//! - Each alternative costs what the planner would charge the layer alone: the cheapest of its
//!   split candidates `max(cpu(C − g), gpu(g)) + sync` over `g = 0, w, …, C` (CPU only and GPU
//!   only included). The fastest alternative wins; ties keep native. Transitions between
//!   neighbouring steps are left to the planner, which then plans the rewritten graph as usual.
//! - An alternative the cost model cannot cost (e.g. a profile without the `gconv` executors
//!   `cpu_gconv_tN` / `conv_grouped`) is left out, and the decision says so in a note; a layer
//!   whose native form cannot be costed stays native. Never an error for a missing predictor.

use crate::ir::{Graph, Op};
use crate::passes::diagonalwise::refactor_depthwise_per_node;
use crate::passes::RefactorDepthwise;
use crate::planner::CostModel;
use anyhow::Result;
use serde::Serialize;
use std::collections::{BTreeSet, HashMap};
use tandem_runtime::profile::LayerOp;

/// One form of a depthwise layer with its cost.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Alternative {
    /// `native`, `G=8`, …, `G=C`.
    pub form: String,
    /// Least cost over its split candidates (ms); `None` when it could not be costed.
    pub ms: Option<f64>,
    /// GPU channels of that best split (0: CPU only; all channels: GPU only).
    pub gpu_channels: usize,
    /// Why it could not be costed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
}

/// The decision for one depthwise layer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DepthwiseLayer {
    /// Node index (as in `tandem inspect` and the step names).
    pub node: usize,
    /// Output tensor.
    pub output: String,
    /// Input channels.
    pub channels: usize,
    /// The chosen form (one of the alternatives' `form`).
    pub chosen: String,
    /// The chosen form as a mode (`Off` for native).
    #[serde(skip)]
    pub mode: RefactorDepthwise,
    pub alternatives: Vec<Alternative>,
}

/// Decisions for every depthwise layer of a graph, with notes for the plan report.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Decisions {
    pub layers: Vec<DepthwiseLayer>,
    pub notes: Vec<String>,
    modes: Vec<(usize, RefactorDepthwise)>,
}

impl Decisions {
    /// The chosen mode per node (node index, mode); native nodes are listed as `Off`.
    pub fn forms(&self) -> Vec<(usize, RefactorDepthwise)> {
        self.modes.clone()
    }

    /// How many layers were refactorized.
    pub fn refactorized(&self) -> usize {
        self.modes
            .iter()
            .filter(|(_, m)| *m != RefactorDepthwise::Off)
            .count()
    }
}

/// The per-node forms of a plan report's depthwise decisions (for [`apply_forms`]).
pub fn forms_of(layers: &[DepthwiseLayer]) -> Vec<(usize, RefactorDepthwise)> {
    layers.iter().map(|l| (l.node, l.mode)).collect()
}

/// The name of a form.
pub fn form_name(mode: RefactorDepthwise) -> String {
    match mode {
        RefactorDepthwise::Off | RefactorDepthwise::Auto => "native".into(),
        RefactorDepthwise::Full => "G=C".into(),
        RefactorDepthwise::Group(g) => format!("G={g}"),
    }
}

/// Costs every depthwise node's alternatives with `costs` and picks the fastest (see the
/// module docs). The graph is not changed.
pub fn choose(graph: &Graph, costs: &mut dyn CostModel, threads: usize) -> Result<Decisions> {
    let mut out = Decisions::default();
    let mut missing: BTreeSet<String> = BTreeSet::new();
    for node in graph.execution_order()? {
        let n = &graph.dag[node];
        if !matches!(n.op, Op::DepthwiseConv2d(_)) {
            continue;
        }
        let output = n
            .outputs
            .first()
            .map(|&t| graph.tensor(t).name.clone())
            .unwrap_or_default();
        let alternatives = match crate::lower::depthwise_alternatives(graph, node) {
            Ok(a) => a,
            Err(e) => {
                out.notes.push(format!(
                    "depthwise node {} ('{output}') stays native: {e:#}",
                    node.index()
                ));
                out.modes.push((node.index(), RefactorDepthwise::Off));
                continue;
            }
        };
        let mut channels = 0;
        let mut costed = Vec::with_capacity(alternatives.len());
        for (mode, kernel) in &alternatives {
            let Some(layer) = LayerOp::from_kernel(kernel) else {
                continue;
            };
            if let LayerOp::Depthwise(p) = &layer {
                channels = p.input[3];
            }
            let (ms, gpu_channels, unavailable) = match costs.split(&layer, threads) {
                Ok(Some(choices)) => match choices
                    .iter()
                    .min_by(|a, b| a.ms.total_cmp(&b.ms))
                    .filter(|c| c.ms.is_finite())
                {
                    Some(best) => (Some(best.ms), best.gpu_channels, None),
                    None => (None, 0, Some("no finite cost".to_string())),
                },
                Ok(None) => {
                    let why = format!(
                        "{} layers: no predictor in {}",
                        layer.kind(),
                        costs.describe()
                    );
                    if *mode != RefactorDepthwise::Off {
                        missing.insert(why.clone());
                    }
                    (None, 0, Some(why))
                }
                Err(e) => {
                    let why = format!("{e:#}");
                    if *mode != RefactorDepthwise::Off {
                        missing.insert(why.clone());
                    }
                    (None, 0, Some(why))
                }
            };
            costed.push((
                *mode,
                Alternative {
                    form: form_name(*mode),
                    ms,
                    gpu_channels,
                    unavailable,
                },
            ));
        }
        // Native wins ties and is kept when it cannot be costed itself.
        let native = costed
            .iter()
            .find(|(m, _)| *m == RefactorDepthwise::Off)
            .and_then(|(_, a)| a.ms);
        let mut best = (RefactorDepthwise::Off, native.unwrap_or(f64::INFINITY));
        if native.is_some() {
            for (mode, a) in &costed {
                if let Some(ms) = a.ms {
                    if ms < best.1 {
                        best = (*mode, ms);
                    }
                }
            }
        } else {
            out.notes.push(format!(
                "depthwise node {} ('{output}') stays native: its native form could not be costed",
                node.index()
            ));
        }
        out.modes.push((node.index(), best.0));
        out.layers.push(DepthwiseLayer {
            node: node.index(),
            output,
            channels,
            chosen: form_name(best.0),
            mode: best.0,
            alternatives: costed.into_iter().map(|(_, a)| a).collect(),
        });
    }
    if !missing.is_empty() {
        out.notes.push(format!(
            "refactorized depthwise forms could not be costed ({}) — layers without a costed \
             alternative stay native (a profile measured with `tandem profile --ops …,gconv` \
             has the grouped-convolution predictors)",
            missing.into_iter().collect::<Vec<_>>().join("; ")
        ));
    }
    Ok(out)
}

/// Applies per-node forms to `graph` (nodes not listed, and `Off`, stay native). Returns how
/// many nodes were rewritten.
pub fn apply_forms(graph: &mut Graph, forms: &[(usize, RefactorDepthwise)]) -> Result<usize> {
    let by_node: HashMap<usize, RefactorDepthwise> = forms.iter().copied().collect();
    refactor_depthwise_per_node(graph, |_, node| {
        by_node
            .get(&node.index())
            .copied()
            .unwrap_or(RefactorDepthwise::Off)
    })
}

/// One line per depthwise layer for the plan table: node, channels, chosen form and the cost
/// of every alternative.
pub fn table(layers: &[DepthwiseLayer]) -> String {
    let mut s = String::new();
    if layers.is_empty() {
        return s;
    }
    s.push_str("depthwise forms (auto; best split per form, ms):\n");
    for l in layers {
        let alts: Vec<String> = l
            .alternatives
            .iter()
            .map(|a| match a.ms {
                Some(ms) => format!("{} {ms:.3}", a.form),
                None => format!("{} –", a.form),
            })
            .collect();
        s.push_str(&format!(
            "  #{:<4} {:<24} C={:<5} -> {:<7} [{}]\n",
            l.node,
            truncate(&l.output, 24),
            l.channels,
            l.chosen,
            alts.join(", ")
        ));
    }
    s
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        s.chars().take(n - 1).chain(['…']).collect()
    }
}
