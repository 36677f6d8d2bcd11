//! `cargo xtask bench depthwise`: the diagonalwise refactorization on tandem's CPU runtime
//! (1 thread) and, with an OpenCL device, on the GPU alone (a GPU-only plan). Every depthwise
//! layer of MobileNetV1 and MobileNetV2, native against each group size `G` in {4, 8, 16, 32, C}
//! that divides its `C`; the form `--refactor-depthwise auto` chose for it from the predictions
//! (the shipped profile of the device), and whether that choice is the measured-fastest form
//! (the fastest of each form on either device alone) or within 5% of it; then both whole models
//! with `off`, `full`, `G = 8` and the per-layer fastest choice on the CPU, and planned (CPU +
//! GPU) with `off` against `auto`. All variants of one comparison are timed in interleaved
//! rounds, and medians are reported with their ratio to native. The tables go into
//! `docs/evaluation.md` between the `bench depthwise` markers (not with `--quick`, a smoke run:
//! one round of one run, the first two depthwise layers of each model).

use crate::bench::write_machine_section;
use anyhow::{Context, Result};
use std::collections::HashMap;
use std::fmt::Write;
use std::path::Path;
use std::time::Instant;
use tandem_compiler::ir::builder::GraphBuilder;
use tandem_compiler::ir::{Graph, Op};
use tandem_compiler::lower::Plan;
use tandem_compiler::lower::{compile, CompileOptions};
use tandem_compiler::passes::diagonalwise::{candidate_group_sizes, refactor_depthwise_per_node};
use tandem_compiler::passes::{self, RefactorDepthwise};
use tandem_compiler::run::{compile_planned, PlanSource};
use tandem_runtime::gpu::device::DeviceInfo;
use tandem_runtime::npy::NpyArray;
use tandem_runtime::session::{Model, Session, SessionOptions};

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
    /// The same on the GPU alone: (native ms, [(G, ms)]), when there is an OpenCL device.
    gpu: Option<(f64, Vec<(usize, f64)>)>,
    /// The form auto chose from the predictions (`native`, `G=8`, `G=C`), when planned.
    auto: Option<String>,
}

impl LayerRow {
    /// The measured time of a form (`native`, `G=8`, `G=C`): the faster of CPU alone and GPU
    /// alone.
    fn form_ms(&self, form: &str) -> Option<f64> {
        let c = self.input[2];
        let pick = |native: f64, groups: &[(usize, f64)]| -> Option<f64> {
            match form {
                "native" => Some(native),
                "G=C" => groups.iter().find(|(g, _)| *g == c).map(|x| x.1),
                f => {
                    let g: usize = f.strip_prefix("G=")?.parse().ok()?;
                    groups.iter().find(|(x, _)| *x == g).map(|x| x.1)
                }
            }
        };
        let cpu = pick(self.native_ms, &self.groups);
        let gpu = self.gpu.as_ref().and_then(|(n, g)| pick(*n, g));
        match (cpu, gpu) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Every form's name.
    fn forms(&self) -> Vec<String> {
        let c = self.input[2];
        std::iter::once("native".to_string())
            .chain(self.groups.iter().map(|(g, _)| {
                if *g == c {
                    "G=C".to_string()
                } else {
                    format!("G={g}")
                }
            }))
            .collect()
    }

    /// The measured-fastest form over both devices (each alone) and its time.
    fn fastest_form(&self) -> (String, f64) {
        self.forms()
            .into_iter()
            .filter_map(|f| self.form_ms(&f).map(|ms| (f, ms)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap_or_else(|| ("native".into(), self.native_ms))
    }

    /// Whether auto's choice is the measured-fastest form or within 5% of it.
    fn auto_agrees(&self) -> Option<bool> {
        let auto = self.auto.as_ref()?;
        let ms = self.form_ms(auto)?;
        Some(ms <= self.fastest_form().1 * 1.05)
    }

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

/// `graph` compiled to run every step on the GPU `gpu`.
fn gpu_model(graph: Graph, gpu: &DeviceInfo) -> Result<Model> {
    let artifact = compile(
        graph,
        &CompileOptions {
            threads: 1,
            model_name: "bench".into(),
            refactor_depthwise: RefactorDepthwise::Off,
            plan: Plan::GpuOnly,
            gpu: Some(gpu.clone()),
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
    let options = SessionOptions {
        threads: 1,
        ..SessionOptions::default()
    };
    let mut sessions = models
        .iter()
        .map(|m| Session::with_options(m, options.clone()))
        .collect::<Result<Vec<_>, _>>()?;
    for s in &mut sessions {
        s.run(inputs)?;
    }
    if models
        .iter()
        .any(|m| m.artifact().steps.iter().any(|s| s.placement.uses_gpu()))
    {
        // The one-core-each setting (as `bench coexec`): this thread on core 0, PoCL's worker
        // (which exists now) on core 1.
        tandem_runtime::profile::split_cores();
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
    gpu: Option<&DeviceInfo>,
    max_layers: usize,
) -> Result<Vec<LayerRow>> {
    let mut rows = Vec::new();
    let nodes: Vec<_> = graph
        .execution_order()?
        .into_iter()
        .filter(|&n| matches!(graph.dag[n].op, Op::DepthwiseConv2d(_)))
        .take(max_layers)
        .collect();
    for (index, node) in nodes.into_iter().enumerate() {
        let Op::DepthwiseConv2d(attrs) = graph.dag[node].op else {
            continue;
        };
        let layer = single_layer(graph, node)?;
        let shape = graph.input(node, 0).context("input")?.shape.clone();
        let c = shape[3];
        let groups = candidate_group_sizes(graph, node)?;
        let mut variants = vec![layer.clone()];
        for &g in &groups {
            let mut rewritten = layer.clone();
            refactor_depthwise_per_node(&mut rewritten, |_, _| RefactorDepthwise::Group(g))?;
            variants.push(rewritten);
        }
        let models = variants
            .iter()
            .map(|v| session_model(v.clone(), 1))
            .collect::<Result<Vec<_>>>()?;
        let inputs = tandem_models::inputs::seeded_inputs(&layer, tandem_models::SEED);
        let medians = interleaved(&models, &inputs, rounds, runs)?;
        let gpu = match gpu {
            Some(dev) => {
                let models = variants
                    .iter()
                    .map(|v| gpu_model(v.clone(), dev))
                    .collect::<Result<Vec<_>>>()?;
                let m = interleaved(&models, &inputs, rounds, runs)?;
                Some((
                    m[0],
                    groups.iter().copied().zip(m[1..].iter().copied()).collect(),
                ))
            }
            None => None,
        };
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
            gpu,
            auto: None,
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
        if let Some((native, g)) = &row.gpu {
            eprintln!(
                "bench: {name} dw{index:<2} GPU alone native {native:8.3} ms  {}",
                g.iter()
                    .map(|(g, ms)| format!("G={g}: {:.2}x", ms / native))
                    .collect::<Vec<_>>()
                    .join("  ")
            );
        }
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
        .zip(layers.iter().map(Some).chain(std::iter::repeat(None)))
        .map(|(&n, row)| {
            let Some(row) = row else {
                return (n, RefactorDepthwise::Off);
            };
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

/// Auto's choices from the predictions (the shipped profile of `gpu`) for the layers of `rows`,
/// and the whole model planned (CPU + GPU) with `off` and with `auto`, timed interleaved.
fn planned_rows(
    name: &'static str,
    zoo: &tandem_models::ZooModel,
    graph: &Graph,
    gpu: &DeviceInfo,
    rows: &mut [LayerRow],
    rounds: usize,
    runs: usize,
) -> Result<Vec<ModelRow>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join(format!("{name}.tflite"));
    std::fs::write(&path, zoo.tflite()?)?;
    let plan = |mode: RefactorDepthwise| {
        compile_planned(
            &path,
            &CompileOptions {
                threads: 1,
                refactor_depthwise: mode,
                ..Default::default()
            },
            &PlanSource::Default,
            Some(gpu.clone()),
        )
    };
    let off = plan(RefactorDepthwise::Off)?;
    let auto = plan(RefactorDepthwise::Auto)?;
    if let Some(note) = &auto.note {
        eprintln!("bench: {name}: note: {note}");
    }
    let Some(report) = &auto.report else {
        eprintln!("bench: {name}: no planner report (no profile for this GPU); auto not compared");
        return Ok(Vec::new());
    };
    for n in &report.notes {
        eprintln!("bench: {name}: plan note: {n}");
    }
    for (row, d) in rows.iter_mut().zip(&report.depthwise) {
        row.auto = Some(d.chosen.clone());
    }
    let rewritten = report
        .depthwise
        .iter()
        .filter(|d| d.chosen != "native")
        .count();
    let models = [
        Model::from_artifact(off.artifact),
        Model::from_artifact(auto.artifact),
    ];
    let inputs = tandem_models::inputs::seeded_inputs(graph, tandem_models::SEED);
    let m = interleaved(&models, &inputs, rounds, runs)?;
    let out = vec![
        ModelRow {
            model: name,
            variant: "planned, off".into(),
            ms: m[0],
            ratio: 1.0,
        },
        ModelRow {
            model: name,
            variant: format!(
                "planned, auto ({rewritten} of {} rewritten)",
                report.depthwise.len()
            ),
            ms: m[1],
            ratio: m[1] / m[0],
        },
    ];
    for r in &out {
        eprintln!(
            "bench: {name} planned {:<32} {:9.2} ms  {:.2}x",
            r.variant, r.ms, r.ratio
        );
    }
    Ok(out)
}

/// Runs the benchmark and writes `docs/evaluation.md`'s `bench depthwise` section (`quick`: a
/// smoke run — one round of one run, the first two depthwise layers of each model, nothing
/// written).
pub fn bench_depthwise(
    root: &Path,
    rounds: usize,
    runs: usize,
    json: bool,
    quick: bool,
) -> Result<()> {
    let (rounds, runs, max_layers) = if quick {
        (1, 1, 2)
    } else {
        (rounds, runs, usize::MAX)
    };
    // SAFETY: no other thread exists yet in this process; OpenCL has not started.
    unsafe { tandem_runtime::profile::limit_pocl_threads() };
    let gpu = match tandem_runtime::gpu::device::GpuDevice::open() {
        Ok(d) => Some(d.info),
        Err(e) => {
            eprintln!("bench: no OpenCL device ({e}); CPU columns only");
            None
        }
    };
    let mut layers = Vec::new();
    let mut models = Vec::new();
    for name in MODELS {
        let zoo = tandem_models::by_name(name).with_context(|| format!("no zoo model '{name}'"))?;
        let mut graph = zoo.graph()?;
        passes::prepare(&mut graph)?;
        let mut rows = layer_rows(name, &graph, rounds, runs, gpu.as_ref(), max_layers)?;
        models.extend(model_rows(name, &graph, &rows, rounds, runs.div_ceil(2))?);
        if let Some(dev) = &gpu {
            let raw = zoo.graph()?;
            models.extend(planned_rows(
                name,
                &zoo,
                &raw,
                dev,
                &mut rows,
                rounds,
                runs.div_ceil(2),
            )?);
        }
        layers.extend(rows);
    }
    let table = render(&layers, &models, rounds, runs);
    if !quick {
        let path = root.join("docs/evaluation.md");
        if !path.exists() {
            std::fs::write(&path, EVALUATION_INTRO)
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        write_machine_section(&path, "bench depthwise", &table)?;
    }
    if json {
        println!("{}", to_json(&layers, &models));
    } else {
        print!("{table}");
    }
    Ok(())
}

/// (layers where auto's choice is the measured-fastest form or within 5% of it, layers with a
/// choice to compare).
fn agreement(layers: &[LayerRow]) -> (usize, usize) {
    let v: Vec<bool> = layers.iter().filter_map(LayerRow::auto_agrees).collect();
    (v.iter().filter(|b| **b).count(), v.len())
}

fn to_json(layers_in: &[LayerRow], models: &[ModelRow]) -> String {
    let layers: Vec<String> = layers_in
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
            let gpu = match &r.gpu {
                Some((native, g)) => format!(
                    "{{\"native_ms\":{native:.5},\"groups\":[{}]}}",
                    g.iter()
                        .map(|(g, ms)| format!("{{\"g\":{g},\"ms\":{ms:.5}}}"))
                        .collect::<Vec<_>>()
                        .join(",")
                ),
                None => "null".into(),
            };
            let (fastest, fastest_ms) = r.fastest_form();
            format!(
                "{{\"model\":\"{}\",\"layer\":{},\"h\":{},\"w\":{},\"c\":{},\"stride\":{},\"multiplier\":{},\"native_ms\":{:.5},\"groups\":[{}],\"gpu\":{gpu},\"auto\":{},\"fastest\":\"{fastest}\",\"fastest_ms\":{fastest_ms:.5},\"auto_agrees\":{}}}",
                r.model,
                r.index,
                r.input[0],
                r.input[1],
                r.input[2],
                r.stride,
                r.multiplier,
                r.native_ms,
                groups.join(","),
                r.auto
                    .as_ref()
                    .map_or("null".to_string(), |a| format!("\"{a}\"")),
                r.auto_agrees()
                    .map_or("null".to_string(), |b| b.to_string()),
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
    let (agree, compared) = agreement(layers_in);
    format!(
        "{{\"threads\":1,\"layers\":[{}],\"auto_agrees\":{agree},\"auto_compared\":{compared},\"end_to_end\":[{}]}}",
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
         column). MACs grow × G.\n",
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
    if layers.iter().any(|r| r.gpu.is_some() || r.auto.is_some()) {
        let _ = writeln!(
            s,
            "\nGPU alone (a GPU-only plan of the single layer, PoCL limited to one thread), same \
             runs; cells are time / native on the GPU. \"auto\" is the form `--refactor-depthwise \
             auto` chose from the predictions of the device's shipped profile (each form costed at \
             its best CPU/GPU split); \"fastest\" is the measured-fastest form on either device \
             alone; \"ok\" when auto's form measures within 5% of it.\n"
        );
        let _ = writeln!(
            s,
            "| model | dw | H×W×C | GPU native (µs) | G=4 | G=8 | G=16 | G=32 | G=C | auto | fastest | ok |"
        );
        let _ = writeln!(
            s,
            "|---|---:|---|---:|---:|---:|---:|---:|---:|---|---|---|"
        );
        for r in layers {
            let c = r.input[2];
            let (native, cells) = match &r.gpu {
                Some((n, g)) => {
                    let cell = |x: usize| -> String {
                        g.iter()
                            .find(|(y, _)| *y == x)
                            .map(|(_, ms)| format!("{:.2}", ms / n))
                            .unwrap_or_else(|| "–".into())
                    };
                    let small: Vec<String> = [4, 8, 16, 32]
                        .iter()
                        .map(|&x| if x == c { "–".into() } else { cell(x) })
                        .collect();
                    (
                        format!("{:.0}", n * 1e3),
                        format!("{} | {}", small.join(" | "), cell(c)),
                    )
                }
                None => ("–".into(), "– | – | – | – | –".into()),
            };
            let (fastest, _) = r.fastest_form();
            let _ = writeln!(
                s,
                "| {} | {} | {}×{}×{} | {native} | {cells} | {} | {fastest} | {} |",
                r.model,
                r.index,
                r.input[0],
                r.input[1],
                c,
                r.auto.as_deref().unwrap_or("–"),
                match r.auto_agrees() {
                    Some(true) => "yes",
                    Some(false) => "no",
                    None => "–",
                }
            );
        }
        let (agree, compared) = agreement(layers);
        let _ = writeln!(
            s,
            "\nauto's choice is the measured-fastest form (or within 5% of it) on {agree} of \
             {compared} layers."
        );
    }
    let _ = writeln!(
        s,
        "\nWhole models, 1 thread, median of {} runs per variant, interleaved ({rounds} rounds); \
         \"per-layer best\" rewrites each layer with the fastest variant of the CPU table above; \
         \"planned\" rows run the planner's CPU + GPU plan (shipped profile) with `off` and \
         with `auto`:\n",
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

#[cfg(test)]
mod tests {
    use super::*;

    fn row(auto: &str) -> LayerRow {
        LayerRow {
            model: "m",
            index: 0,
            input: [8, 8, 32],
            stride: 1,
            multiplier: 1,
            native_ms: 1.0,
            groups: vec![(4, 3.0), (8, 2.0), (16, 1.5), (32, 4.0)],
            gpu: Some((2.0, vec![(4, 0.9), (8, 0.96), (16, 3.0), (32, 9.0)])),
            auto: Some(auto.into()),
        }
    }

    #[test]
    fn auto_agreement_counts_the_fastest_form_on_either_device_within_5_percent() {
        // G=4 on the GPU (0.9 ms) is the fastest form; G=8 (0.96 ms) is within 7%, native 1 ms.
        assert_eq!(row("G=4").fastest_form(), ("G=4".to_string(), 0.9));
        assert_eq!(row("G=4").auto_agrees(), Some(true));
        assert_eq!(row("G=8").auto_agrees(), Some(false));
        assert_eq!(row("native").auto_agrees(), Some(false));
        assert_eq!(row("G=C").form_ms("G=C"), Some(4.0));
        let layers = [row("G=4"), row("native")];
        assert_eq!(agreement(&layers), (1, 2));
        let models = [ModelRow {
            model: "m",
            variant: "planned, auto".into(),
            ms: 1.0,
            ratio: 1.0,
        }];
        let json: serde_json::Value =
            serde_json::from_str(&to_json(&layers, &models)).expect("valid JSON");
        assert_eq!(json["auto_agrees"], 1);
        assert_eq!(json["layers"][0]["auto"], "G=4");
        assert_eq!(json["layers"][0]["gpu"]["groups"][0]["g"], 4);
        let table = render(&layers, &models, 1, 1);
        assert!(table.contains("on 1 of 2 layers"), "{table}");
        assert!(table.contains("| G=4 | G=4 | yes |"), "{table}");
    }
}
