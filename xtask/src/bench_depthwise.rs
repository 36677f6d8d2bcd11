//! `cargo xtask bench depthwise`: the diagonalwise refactorization on tandem's CPU runtime
//! (1 thread). Every depthwise layer of MobileNetV1 and MobileNetV2, native against each group
//! size `G` in {4, 8, 16, 32, C} that divides its `C`; then both whole models with `off`, `full`,
//! `G = 8` and the per-layer fastest choice. All variants of one comparison are timed in
//! interleaved rounds, and medians are reported with their ratio to native. The tables go into
//! `docs/evaluation.md` between the `bench depthwise` markers.

use crate::bench::write_section;
use anyhow::{Context, Result};
use std::collections::HashMap;
use std::fmt::Write;
use std::path::Path;
use std::time::Instant;
use tandem_compiler::ir::builder::GraphBuilder;
use tandem_compiler::ir::{Graph, Op};
use tandem_compiler::lower::{compile, CompileOptions};
use tandem_compiler::passes::diagonalwise::{candidate_group_sizes, refactor_depthwise_per_node};
use tandem_compiler::passes::{self, RefactorDepthwise};
use tandem_runtime::npy::NpyArray;
use tandem_runtime::session::{Model, Session};

const MODELS: [&str; 2] = ["mobilenet_v1", "mobilenet_v2"];

/// The intro `docs/evaluation.md` starts with when it does not exist yet.
const EVALUATION_INTRO: &str = "# Evaluation\n\nMeasurements of tandem's optimisations, each \
section written by the `cargo xtask bench …` command named in it. Ratios compare variants timed \
in the same run, in interleaved rounds; absolute times depend on the machine and its load.\n";

/// One depthwise layer's medians.
struct LayerRow {
    model: &'static str,
    index: usize,
    /// [H, W, C] of the input
    input: [usize; 3],
    stride: usize,
    multiplier: usize,
    native_ms: f64,
    /// (G, median ms); G = C is the full diagonal.
    groups: Vec<(usize, f64)>,
}

impl LayerRow {
    /// The fastest variant: `None` for native, else its group size.
    fn best(&self) -> Option<usize> {
        self.groups
            .iter()
            .filter(|(_, ms)| *ms < self.native_ms)
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(g, _)| *g)
    }
}

/// One whole-model variant's median.
struct ModelRow {
    model: &'static str,
    variant: String,
    ms: f64,
    ratio: f64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn session_model(graph: Graph, threads: usize) -> Result<Model> {
    let artifact = compile(
        graph,
        &CompileOptions {
            threads,
            model_name: "bench".into(),
            refactor_depthwise: RefactorDepthwise::Off,
            ..Default::default()
        },
    )?;
    Ok(Model::from_artifact(artifact))
}

/// Medians (ms) of `models` run on `inputs` with 1 thread: one warm-up each, then `rounds`
/// rounds in which every model runs `runs` times in turn.
fn interleaved(
    models: &[Model],
    inputs: &[NpyArray],
    rounds: usize,
    runs: usize,
) -> Result<Vec<f64>> {
    let mut sessions: Vec<Session> = models.iter().map(|m| Session::new(m, 1)).collect();
    for s in &mut sessions {
        s.run(inputs)?;
    }
    let mut times = vec![Vec::with_capacity(rounds * runs); models.len()];
    for _ in 0..rounds {
        for (s, t) in sessions.iter_mut().zip(&mut times) {
            for _ in 0..runs {
                let start = Instant::now();
                s.run(inputs)?;
                t.push(start.elapsed().as_secs_f64() * 1e3);
            }
        }
    }
    Ok(times.into_iter().map(median).collect())
}

/// A graph holding only depthwise node `node` of `graph` (same input shape, weights, bias and
/// attributes).
fn single_layer(graph: &Graph, node: petgraph::stable_graph::NodeIndex) -> Result<Graph> {
    let n = &graph.dag[node];
    let mut b = GraphBuilder::new();
    let x = graph.input(node, 0).context("input")?;
    let x = b.input("x", x.dtype, &x.shape);
    let mut inputs = vec![Some(x)];
    for slot in 1..n.inputs.len() {
        inputs.push(graph.input(node, slot).map(|t| b.tensor(t.clone())));
    }
    let y = b.op(n.op.clone(), &inputs, 1)?[0];
    b.output(y);
    Ok(b.finish("one depthwise layer"))
}

fn layer_rows(
    name: &'static str,
    graph: &Graph,
    rounds: usize,
    runs: usize,
) -> Result<Vec<LayerRow>> {
    let mut rows = Vec::new();
    let nodes: Vec<_> = graph
        .execution_order()?
        .into_iter()
        .filter(|&n| matches!(graph.dag[n].op, Op::DepthwiseConv2d(_)))
        .collect();
    for (index, node) in nodes.into_iter().enumerate() {
        let Op::DepthwiseConv2d(attrs) = graph.dag[node].op else {
            continue;
        };
        let layer = single_layer(graph, node)?;
        let shape = graph.input(node, 0).context("input")?.shape.clone();
        let c = shape[3];
        let groups = candidate_group_sizes(graph, node)?;
        let mut models = vec![session_model(layer.clone(), 1)?];
        for &g in &groups {
            let mut rewritten = layer.clone();
            refactor_depthwise_per_node(&mut rewritten, |_, _| RefactorDepthwise::Group(g))?;
            models.push(session_model(rewritten, 1)?);
        }
        let inputs = tandem_models::inputs::seeded_inputs(&layer, tandem_models::SEED);
        let medians = interleaved(&models, &inputs, rounds, runs)?;
        let out_c = graph.tensor(graph.dag[node].outputs[0]).shape[3];
        let row = LayerRow {
            model: name,
            index,
            input: [shape[1], shape[2], c],
            stride: attrs.stride[0],
            multiplier: out_c / c,
            native_ms: medians[0],
            groups: groups
                .into_iter()
                .zip(medians[1..].iter().copied())
                .collect(),
        };
        eprintln!(
            "bench: {name} dw{index:<2} {:>3}x{:<3}x{:<4} s{} native {:8.3} ms  {}",
            row.input[0],
            row.input[1],
            row.input[2],
            row.stride,
            row.native_ms,
            row.groups
                .iter()
                .map(|(g, ms)| format!("G={g}: {:.2}x", ms / row.native_ms))
                .collect::<Vec<_>>()
                .join("  ")
        );
        rows.push(row);
    }
    Ok(rows)
}

fn model_rows(
    name: &'static str,
    graph: &Graph,
    layers: &[LayerRow],
    rounds: usize,
    runs: usize,
) -> Result<Vec<ModelRow>> {
    let nodes: Vec<_> = graph
        .execution_order()?
        .into_iter()
        .filter(|&n| matches!(graph.dag[n].op, Op::DepthwiseConv2d(_)))
        .collect();
    let best: HashMap<_, _> = nodes
        .iter()
        .zip(layers)
        .map(|(&n, row)| {
            let mode = match row.best() {
                Some(g) => RefactorDepthwise::Group(g),
                None => RefactorDepthwise::Off,
            };
            (n, mode)
        })
        .collect();
    let chosen = best
        .values()
        .filter(|m| **m != RefactorDepthwise::Off)
        .count();
    let variants: Vec<(String, Graph)> = [
        ("off".to_string(), RefactorDepthwise::Off),
        ("full".to_string(), RefactorDepthwise::Full),
        ("G=8".to_string(), RefactorDepthwise::Group(8)),
    ]
    .into_iter()
    .map(|(label, mode)| -> Result<(String, Graph)> {
        let mut g = graph.clone();
        passes::refactor_depthwise(&mut g, mode)?;
        Ok((label, g))
    })
    .chain(std::iter::once(Ok((
        format!("per-layer best ({chosen} of {} rewritten)", nodes.len()),
        {
            let mut g = graph.clone();
            refactor_depthwise_per_node(&mut g, |_, n| best[&n])?;
            g
        },
    ))))
    .collect::<Result<_>>()?;
    let inputs = tandem_models::inputs::seeded_inputs(graph, tandem_models::SEED);
    let models = variants
        .iter()
        .map(|(_, g)| session_model(g.clone(), 1))
        .collect::<Result<Vec<_>>>()?;
    let medians = interleaved(&models, &inputs, rounds, runs)?;
    let rows: Vec<ModelRow> = variants
        .into_iter()
        .zip(&medians)
        .map(|((variant, _), &ms)| ModelRow {
            model: name,
            variant,
            ms,
            ratio: ms / medians[0],
        })
        .collect();
    for r in &rows {
        eprintln!(
            "bench: {name} end to end {:<32} {:9.2} ms  {:.2}x",
            r.variant, r.ms, r.ratio
        );
    }
    Ok(rows)
}

/// Runs the benchmark and writes `docs/evaluation.md`'s `bench depthwise` section.
pub fn bench_depthwise(root: &Path, rounds: usize, runs: usize, json: bool) -> Result<()> {
    let mut layers = Vec::new();
    let mut models = Vec::new();
    for name in MODELS {
        let zoo = tandem_models::by_name(name).with_context(|| format!("no zoo model '{name}'"))?;
        let mut graph = zoo.graph()?;
        passes::prepare(&mut graph)?;
        let rows = layer_rows(name, &graph, rounds, runs)?;
        models.extend(model_rows(name, &graph, &rows, rounds, runs.div_ceil(2))?);
        layers.extend(rows);
    }
    let table = render(&layers, &models, rounds, runs);
    let path = root.join("docs/evaluation.md");
    if !path.exists() {
        std::fs::write(&path, EVALUATION_INTRO)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    write_section(&path, "bench depthwise", &table)?;
    if json {
        println!("{}", to_json(&layers, &models));
    } else {
        print!("{table}");
    }
    Ok(())
}

fn to_json(layers: &[LayerRow], models: &[ModelRow]) -> String {
    let layers: Vec<String> = layers
        .iter()
        .map(|r| {
            let groups: Vec<String> = r
                .groups
                .iter()
                .map(|(g, ms)| {
                    format!(
                        "{{\"g\":{g},\"ms\":{ms:.5},\"ratio\":{:.4}}}",
                        ms / r.native_ms
                    )
                })
                .collect();
            format!(
                "{{\"model\":\"{}\",\"layer\":{},\"h\":{},\"w\":{},\"c\":{},\"stride\":{},\"multiplier\":{},\"native_ms\":{:.5},\"groups\":[{}]}}",
                r.model,
                r.index,
                r.input[0],
                r.input[1],
                r.input[2],
                r.stride,
                r.multiplier,
                r.native_ms,
                groups.join(",")
            )
        })
        .collect();
    let models: Vec<String> = models
        .iter()
        .map(|m| {
            format!(
                "{{\"model\":\"{}\",\"variant\":\"{}\",\"ms\":{:.4},\"ratio\":{:.4}}}",
                m.model, m.variant, m.ms, m.ratio
            )
        })
        .collect();
    format!(
        "{{\"threads\":1,\"layers\":[{}],\"end_to_end\":[{}]}}",
        layers.join(","),
        models.join(",")
    )
}

fn render(layers: &[LayerRow], models: &[ModelRow], rounds: usize, runs: usize) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "CPU, 1 thread, f32. Each layer alone: median of {} runs per variant, variants interleaved \
         round by round ({rounds} rounds). Cells are time / native depthwise (below 1 = the \
         refactorized form is faster); `–` = G does not divide C (or equals C, see the G = C \
         column). MACs grow × G. GPU columns come with the OpenCL backend.\n",
        rounds * runs
    );
    let _ = writeln!(
        s,
        "| model | dw | H×W×C | stride | M | native (µs) | G=4 | G=8 | G=16 | G=32 | G=C | fastest |"
    );
    let _ = writeln!(
        s,
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    );
    for r in layers {
        let c = r.input[2];
        let cell = |g: usize| -> String {
            r.groups
                .iter()
                .find(|(x, _)| *x == g)
                .map(|(_, ms)| format!("{:.2}", ms / r.native_ms))
                .unwrap_or_else(|| "–".into())
        };
        let small: Vec<String> = [4, 8, 16, 32]
            .iter()
            .map(|&g| if g == c { "–".into() } else { cell(g) })
            .collect();
        let best = match r.best() {
            None => "native".to_string(),
            Some(g) if g == c => "G=C".to_string(),
            Some(g) => format!("G={g}"),
        };
        let _ = writeln!(
            s,
            "| {} | {} | {}×{}×{} | {} | {} | {:.0} | {} | {} | {} |",
            r.model,
            r.index,
            r.input[0],
            r.input[1],
            c,
            r.stride,
            r.multiplier,
            r.native_ms * 1e3,
            small.join(" | "),
            cell(c),
            best
        );
    }
    let _ = writeln!(
        s,
        "\nWhole models, 1 thread, median of {} runs per variant, interleaved ({rounds} rounds); \
         \"per-layer best\" rewrites each layer with the fastest variant of the table above:\n",
        rounds * runs.div_ceil(2)
    );
    let _ = writeln!(s, "| model | variant | median (ms) | / off |");
    let _ = writeln!(s, "|---|---|---:|---:|");
    for m in models {
        let _ = writeln!(
            s,
            "| {} | {} | {:.2} | {:.2} |",
            m.model, m.variant, m.ms, m.ratio
        );
    }
    s
}
