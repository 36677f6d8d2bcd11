//! `cargo xtask bench coexec` and the co-execution part of `cargo xtask demo`: the planner's
//! splits against the best single device and against the grid search, per layer and end to end.
//!
//! Setting (both): `POCL_MAX_PTHREAD_COUNT=1` before OpenCL starts, the CPU side one thread on
//! core 0 and PoCL's thread on core 1 (`tandem_runtime::profile::split_cores`, applied again
//! after the sessions' first runs, since PoCL may start threads per context).
//!
//! Per layer: random conv and linear layers drawn with a seed the training data never used
//! (held out by construction); each candidate split timed by the runtime's profiler as a
//! session runs it, both parts side by side with the join (`planner::Measured`), on the same
//! grid the predictor sweeps (multiples of the GPU kernel's vector width). Speedups are over the
//! better of CPU only and GPU only, measured the same way.
//!
//! End to end: each model compiled CPU only, GPU only, with the predicted plan and with the
//! oracle plan (every split measured on this device, coarsened grid), run in interleaved rounds
//! (median), outputs compared with CPU only.

use crate::bench::write_section;
use anyhow::{bail, Context, Result};
use plotters::prelude::*;
use std::path::Path;
use std::time::Instant;
use tandem_compiler::lower::{CompileOptions, Plan};
use tandem_compiler::planner::{self, Choice, CostModel, Measured};
use tandem_compiler::run::{compile_file, compile_planned, PlanSource, Planned};
use tandem_predictors::features::OpKind;
use tandem_predictors::{Layer, Profile};
use tandem_runtime::npy::NpyArray;
use tandem_runtime::profile::{split_cores, LayerOp, MeasureOptions, Profiler};
use tandem_runtime::rng::Rng;
use tandem_runtime::session::{Model, Session, SessionOptions};

/// Seed of the held-out layers (the profile's dataset used others).
const HELD_OUT_SEED: u64 = 0xC0E7_2026;

/// Largest relative difference of `a` from `b`, scaled by `b`'s largest magnitude.
pub fn max_rel_diff(a: &[NpyArray], b: &[NpyArray]) -> Result<f64> {
    let mut worst = 0f64;
    for (x, y) in a.iter().zip(b) {
        let (x, y) = (
            x.to_f32().context("output is not f32")?,
            y.to_f32().context("output is not f32")?,
        );
        let scale = y.iter().fold(1e-30f32, |m, v| m.max(v.abs())) as f64;
        let d = x
            .iter()
            .zip(&y)
            .fold(0f64, |m, (p, q)| m.max((p - q).abs() as f64));
        worst = worst.max(d / scale);
    }
    Ok(worst)
}

/// What [`time_models`] measured.
struct Timed {
    /// Median ms per model, the models run in interleaved rounds.
    interleaved: Vec<f64>,
    /// Median ms per model in interleaved rounds where each timed run comes right after an
    /// untimed run of the same model ([`interleaved_medians`]); empty when not asked.
    warm: Vec<f64>,
    /// Each model's outputs of its first run.
    outputs: Vec<Vec<NpyArray>>,
}

/// Runs each model once (warm-up), pins the cores, then `rounds` interleaved timed runs, and
/// then, with `warm`, as many rounds more of warm runs.
fn time_models(models: &[&Model], inputs: &[NpyArray], rounds: usize, warm: bool) -> Result<Timed> {
    let options = SessionOptions {
        threads: 1,
        ..SessionOptions::default()
    };
    let mut sessions = models
        .iter()
        .map(|m| Session::with_options(m, options.clone()))
        .collect::<Result<Vec<_>, _>>()?;
    let mut outputs = Vec::new();
    for s in &mut sessions {
        outputs.push(s.run(inputs)?);
    }
    split_cores();
    let interleaved = interleaved_medians(&mut sessions, inputs, rounds, false)?;
    let warm = if warm {
        interleaved_medians(&mut sessions, inputs, rounds, true)?
    } else {
        Vec::new()
    };
    Ok(Timed {
        interleaved,
        warm,
        outputs,
    })
}

/// The median ms per session over `rounds` rounds, each round timing every session once in
/// turn. With `warm`, each timed run comes right after an untimed run of the same session, so
/// much of the model's data is back in the caches, closer to how the predictors' layers were
/// measured (repeated back to back; one such run does not bring back all of it: 6.3 ms against
/// 5.5–5.7 ms back to back for MobileNetV2 on the Xeon host, `docs/evaluation.md`). Without,
/// each run follows the other sessions' runs, and on a shared host part of its data has left
/// the caches by then (`compiler/examples/run_gaps.rs`).
fn interleaved_medians(
    sessions: &mut [Session],
    inputs: &[NpyArray],
    rounds: usize,
    warm: bool,
) -> Result<Vec<f64>> {
    let mut times = vec![Vec::with_capacity(rounds); sessions.len()];
    for _ in 0..rounds {
        for (s, t) in sessions.iter_mut().zip(&mut times) {
            if warm {
                s.run(inputs)?;
            }
            let start = Instant::now();
            s.run(inputs)?;
            t.push(start.elapsed().as_secs_f64() * 1e3);
        }
    }
    Ok(times
        .into_iter()
        .map(|mut t| tandem_runtime::profile::median(&mut t))
        .collect())
}

/// Compiles `path` CPU only, GPU only and planned with the shipped profile, runs the three on
/// `inputs` and checks that GPU only and the plan equal CPU only within 1e-4. Prints the plan
/// table and the latencies. Returns (CPU, GPU, plan) medians in ms.
pub fn demo_coexec(path: &Path, inputs: &[NpyArray], rounds: usize) -> Result<[f64; 3]> {
    let gpu = tandem_runtime::gpu::device::GpuDevice::open()
        .context("the co-execution demo needs an OpenCL device (pocl-opencl-icd)")?
        .info;
    let base = CompileOptions::cpu(1, "");
    let planned = compile_planned(path, &base, &PlanSource::Default, Some(gpu.clone()))?;
    if let Some(note) = &planned.note {
        println!("note: {note}");
    }
    if let Some(r) = &planned.report {
        println!("\n== tandem compile (planned)");
        print!("{}", r.table());
    }
    let cpu = Model::from_artifact(compile_file(path, &base)?);
    let gpu_only = Model::from_artifact(compile_file(
        path,
        &CompileOptions {
            plan: Plan::GpuOnly,
            gpu: Some(gpu),
            ..base.clone()
        },
    )?);
    let plan = Model::from_artifact(planned.artifact);
    let timed = time_models(&[&cpu, &gpu_only, &plan], inputs, rounds, true)?;
    let (t, w, outs) = (&timed.interleaved, &timed.warm, &timed.outputs);
    let (dg, dp) = (
        max_rel_diff(&outs[1], &outs[0])?,
        max_rel_diff(&outs[2], &outs[0])?,
    );
    println!(
        "\n== measured (CPU side 1 thread on core 0, PoCL 1 thread on core 1; median of {rounds}):\n\
         interleaved: CPU only {:.2} ms, GPU only {:.2} ms, plan {:.2} ms ({:.2}x over the best single device)\n\
         each right after a run of its own (warm, closer to how the predictors were measured): CPU only {:.2} ms, GPU only {:.2} ms, plan {:.2} ms ({:.2}x)\n\
         max relative difference from CPU only: GPU only {dg:.1e}, plan {dp:.1e} (tolerance 1e-4)",
        t[0],
        t[1],
        t[2],
        t[0].min(t[1]) / t[2],
        w[0],
        w[1],
        w[2],
        w[0].min(w[1]) / w[2]
    );
    if dg > 1e-4 || dp > 1e-4 {
        bail!("outputs differ from CPU only: GPU only {dg:e}, plan {dp:e}");
    }
    Ok([t[0], t[1], t[2]])
}

/// Random held-out layers: `n` convolutions and `n` linear layers of moderate size.
fn held_out_layers(n: usize) -> Vec<Layer> {
    let mut rng = Rng::new(HELD_OUT_SEED);
    let mut pick = |lo: usize, hi: usize| -> usize {
        let u = (rng.uniform(1, 1.0)[0] as f64 + 1.0) / 2.0; // [0, 1)
                                                             // Log-uniform in [lo, hi).
        ((lo as f64) * ((hi as f64) / (lo as f64)).powf(u)).floor() as usize
    };
    let mut out = Vec::new();
    while out.iter().filter(|l: &&Layer| l.op == OpKind::Conv).count() < n {
        let (h, cin, cout) = (pick(8, 64), pick(16, 256), pick(32, 257));
        let k = [1, 3, 3, 5][pick(1, 5) - 1];
        let stride = 1 + (pick(1, 4) == 3) as usize;
        let oh = h.div_ceil(stride);
        let pad = ((oh - 1) * stride + k).saturating_sub(h);
        let l = Layer {
            op: OpKind::Conv,
            n: 1,
            h,
            w: h,
            cin,
            oh,
            ow: oh,
            cout,
            kh: k,
            kw: k,
            stride,
            pad_t: pad / 2,
            pad_l: pad / 2,
            groups: 1,
        };
        let mflops = 2.0 * (oh * oh * cout * cin * k * k) as f64 / 1e6;
        if (2.0..=120.0).contains(&mflops) {
            out.push(l);
        }
    }
    while out.len() < 2 * n {
        let (rows, cin, cout) = (pick(1, 64), pick(128, 2048), pick(64, 1025));
        out.push(Layer::linear(rows, cin, cout));
    }
    out
}

/// One candidate: (g, predicted CPU, predicted GPU, measured CPU, measured GPU) in ms.
type Point = (usize, f64, f64, f64, f64);

/// A named, coloured polyline.
type Series<'a> = (&'a str, &'a str, Vec<(f64, f64)>);

/// One held-out layer's results.
struct LayerResult {
    desc: String,
    kind: &'static str,
    channels: usize,
    predicted_g: usize,
    oracle_g: usize,
    /// Measured cost of the best single device, the predicted split, the grid's best split.
    single_ms: f64,
    predicted_ms: f64,
    oracle_ms: f64,
    /// (g, predicted cpu, predicted gpu, measured cpu, measured gpu) per candidate.
    curve: Vec<Point>,
}

fn describe(l: &Layer) -> String {
    match l.op {
        OpKind::Linear => format!("linear {}×{}→{}", l.h, l.cin, l.cout),
        _ => format!(
            "conv {}x{}x{}→{} k{} s{}",
            l.h, l.w, l.cin, l.cout, l.kh, l.stride
        ),
    }
}

/// Passes over a layer's candidate splits in the per-layer comparison. One pass measures each
/// split once, and on this shared host one slow measurement of the predicted split cost a
/// layer 30–40% of its share of the grid. Each pass goes over every candidate before the next
/// starts, so a slow phase of a few seconds hits one pass, and the median leaves it out.
const GRID_PASSES: usize = 3;

/// Every candidate split of `op` measured [`GRID_PASSES`] times, one whole pass after the
/// other; per candidate the median CPU part, GPU part and cost.
fn median_grid(costs: &mut Measured, op: &LayerOp) -> Result<Vec<Choice>> {
    let mut passes = Vec::with_capacity(GRID_PASSES);
    for _ in 0..GRID_PASSES {
        passes.push(
            costs
                .split(op, 1)?
                .context("the grid search has no costs for this layer")?,
        );
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let mut out = passes[0].clone();
    for (i, choice) in out.iter_mut().enumerate() {
        let same = |f: fn(&Choice) -> f64| -> Result<f64> {
            let values = passes
                .iter()
                .map(|p| {
                    p.get(i)
                        .filter(|c| c.gpu_channels == choice.gpu_channels)
                        .map(f)
                        .context("the grid's passes measured different candidates")
                })
                .collect::<Result<Vec<f64>>>()?;
            Ok(median(values))
        };
        choice.cpu_ms = same(|c| c.cpu_ms)?;
        choice.gpu_ms = same(|c| c.gpu_ms)?;
        choice.ms = same(|c| c.ms)?;
    }
    Ok(out)
}

fn per_layer(
    profile: &Profile,
    costs: &mut Measured,
    layers: &[Layer],
) -> Result<Vec<LayerResult>> {
    let mut out = Vec::new();
    for (i, l) in layers.iter().enumerate() {
        let op: LayerOp = l.to_op();
        let predicted = profile.sweep(l, 1)?;
        let measured = median_grid(costs, &op)?;
        let best_pred = predicted
            .iter()
            .min_by(|a, b| a.total_ms.total_cmp(&b.total_ms))
            .context("no candidates")?;
        let at = |g: usize| measured.iter().find(|c| c.gpu_channels == g);
        let c = l.cout;
        let single = at(0)
            .map(|x| x.ms)
            .unwrap_or(f64::INFINITY)
            .min(at(c).map(|x| x.ms).unwrap_or(f64::INFINITY));
        let best = measured
            .iter()
            .min_by(|a, b| a.ms.total_cmp(&b.ms))
            .context("no candidates")?;
        let pred_ms = at(best_pred.gpu_channels)
            .context("the predicted split is not on the measured grid")?
            .ms;
        let curve = predicted
            .iter()
            .filter_map(|p| {
                at(p.gpu_channels).map(|m| (p.gpu_channels, p.cpu_ms, p.gpu_ms, m.cpu_ms, m.gpu_ms))
            })
            .collect();
        eprintln!(
            "layer {}/{}: {} predicted g={} oracle g={}",
            i + 1,
            layers.len(),
            describe(l),
            best_pred.gpu_channels,
            best.gpu_channels
        );
        out.push(LayerResult {
            desc: describe(l),
            kind: if l.op == OpKind::Linear {
                "linear"
            } else {
                "conv"
            },
            channels: c,
            predicted_g: best_pred.gpu_channels,
            oracle_g: best.gpu_channels,
            single_ms: single,
            predicted_ms: pred_ms,
            oracle_ms: best.ms,
            curve,
        });
    }
    Ok(out)
}

/// End-to-end results of one model.
struct ModelResult {
    name: String,
    cpu_ms: f64,
    gpu_ms: f64,
    plan_ms: f64,
    oracle_ms: f64,
    predicted_plan_ms: f64,
    plan_diff: f64,
    oracle_diff: f64,
    splits: usize,
    waits: usize,
}

fn end_to_end(
    root: &Path,
    name: &str,
    costs: &mut Measured,
    rounds: usize,
    gpu: &tandem_runtime::gpu::device::DeviceInfo,
) -> Result<ModelResult> {
    let zoo = tandem_models::by_name(name).with_context(|| format!("no zoo model {name}"))?;
    let dir = root.join("zoo");
    let path = dir.join(format!("{name}.tflite"));
    if !path.exists() {
        crate::zoo::write_zoo(&dir, &[name.to_string()])?;
    }
    let graph = zoo.graph()?;
    let inputs = tandem_models::inputs::seeded_inputs(&graph, tandem_models::SEED);
    let base = CompileOptions::cpu(1, name);
    let planned: Planned = compile_planned(&path, &base, &PlanSource::Default, Some(gpu.clone()))?;
    let report = planned
        .report
        .context("no shipped profile for this device")?;
    let plain = compile_file(&path, &base)?;
    eprintln!("{name}: measuring every candidate split (oracle)…");
    let oracle_report = planner::plan(&plain.steps, &plain.tensors, costs, 1)?;
    let oracle = compile_file(
        &path,
        &CompileOptions {
            plan: Plan::Steps(oracle_report.placements()),
            gpu: Some(gpu.clone()),
            ..base.clone()
        },
    )?;
    let gpu_only = compile_file(
        &path,
        &CompileOptions {
            plan: Plan::GpuOnly,
            gpu: Some(gpu.clone()),
            ..base.clone()
        },
    )?;
    let splits = planned
        .artifact
        .steps
        .iter()
        .filter(|s| {
            matches!(
                s.placement,
                tandem_runtime::artifact::Placement::Split { .. }
            )
        })
        .count();
    let waits = tandem_runtime::sync::dependencies(&planned.artifact).waits();
    let models = [
        Model::from_artifact(plain),
        Model::from_artifact(gpu_only),
        Model::from_artifact(planned.artifact),
        Model::from_artifact(oracle),
    ];
    eprintln!("{name}: timing CPU only, GPU only, plan, oracle plan…");
    let Timed {
        interleaved: t,
        outputs: outs,
        ..
    } = time_models(&models.iter().collect::<Vec<_>>(), &inputs, rounds, false)?;
    Ok(ModelResult {
        name: name.into(),
        cpu_ms: t[0],
        gpu_ms: t[1],
        plan_ms: t[2],
        oracle_ms: t[3],
        predicted_plan_ms: report.plan_ms,
        plan_diff: max_rel_diff(&outs[2], &outs[0])?,
        oracle_diff: max_rel_diff(&outs[3], &outs[0])?,
        splits,
        waits,
    })
}

/// `#rrggbb` as a plotters colour (black if malformed).
fn colour(hex: &str) -> RGBColor {
    let c = |i: usize| u8::from_str_radix(hex.get(i..i + 2).unwrap_or("00"), 16).unwrap_or(0);
    RGBColor(c(1), c(3), c(5))
}

fn plot_error(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("drawing a plot: {e}")
}

/// A line chart as SVG (plotters): `series` of (label, `#rrggbb` colour, points), with axes,
/// labels and a legend.
fn svg_lines(title: &str, xlabel: &str, ylabel: &str, series: &[Series]) -> Result<String> {
    let all = series.iter().flat_map(|s| s.2.iter());
    let (xmax, ymax) = all.fold((1e-9f64, 1e-9f64), |(a, b), &(x, y)| (a.max(x), b.max(y)));
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (720, 440)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_error)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..xmax * 1.02, 0f64..ymax * 1.05)
            .map_err(plot_error)?;
        chart
            .configure_mesh()
            .x_desc(xlabel)
            .y_desc(ylabel)
            .draw()
            .map_err(plot_error)?;
        for (label, hex, points) in series {
            let c = colour(hex);
            chart
                .draw_series(LineSeries::new(points.iter().copied(), c.stroke_width(2)))
                .map_err(plot_error)?
                .label(*label)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(plot_error)?;
        root.present().map_err(plot_error)?;
    }
    Ok(svg)
}

/// A scatter of predicted against measured (ms) on log axes, with the diagonal, as SVG
/// (plotters).
fn svg_scatter(title: &str, points: &[(f64, f64)]) -> Result<String> {
    let (lo, hi) = points.iter().fold((f64::MAX, f64::MIN), |(a, b), &(p, q)| {
        (a.min(p).min(q), b.max(p).max(q))
    });
    let (lo, hi) = (lo.max(1e-4) / 1.5, hi.max(1e-3) * 1.5);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (520, 520)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_error)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d((lo..hi).log_scale(), (lo..hi).log_scale())
            .map_err(plot_error)?;
        chart
            .configure_mesh()
            .x_desc("measured (ms)")
            .y_desc("predicted (ms)")
            .draw()
            .map_err(plot_error)?;
        chart
            .draw_series(LineSeries::new(
                [(lo, lo), (hi, hi)],
                ShapeStyle::from(&RGBColor(128, 128, 128)).stroke_width(1),
            ))
            .map_err(plot_error)?;
        chart
            .draw_series(points.iter().map(|&(m, p)| {
                Circle::new(
                    (m.max(lo), p.max(lo)),
                    2,
                    colour("#4682b4").mix(0.6).filled(),
                )
            }))
            .map_err(plot_error)?;
        root.present().map_err(plot_error)?;
    }
    Ok(svg)
}

/// Runs the benchmark and writes its section of `docs/evaluation.md` (plots in
/// `docs/figures/`).
pub fn bench_coexec(
    root: &Path,
    models: &[String],
    layers: usize,
    rounds: usize,
    json: bool,
) -> Result<()> {
    // SAFETY: no other thread exists yet in this process; OpenCL has not started.
    unsafe { tandem_runtime::profile::limit_pocl_threads() };
    let profiler =
        Profiler::open(true).context("bench coexec needs an OpenCL device (pocl-opencl-icd)")?;
    let gpu = profiler.device().clone();
    let profile_path = tandem_predictors::bundle::default_for(
        &gpu,
        tandem_runtime::profile::host_signature().as_deref(),
    )
    .with_context(|| format!("no shipped profile for {}", gpu.label()))?;
    let profile = Profile::load(&profile_path)?;
    // Each shipped profile (one per device) has its own section and figures.
    let stem = profile_path
        .file_stem()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let layer_options = MeasureOptions {
        warmup: 1,
        min_reps: 5,
        max_reps: 15,
        target_ms: 15.0,
        ..Default::default()
    };
    let mut costs = Measured::new(profiler, layer_options, 0)?;
    let measured_sync = costs.sync_ms();
    let results = per_layer(&profile, &mut costs, &held_out_layers(layers))?;

    // End to end: a coarser grid and fewer repetitions (whole models on one core each).
    costs.max_candidates = 17;
    costs.options = MeasureOptions {
        warmup: 1,
        min_reps: 1,
        max_reps: 3,
        target_ms: 0.0,
        ..Default::default()
    };
    let mut e2e = Vec::new();
    for m in models {
        e2e.push(end_to_end(root, m, &mut costs, rounds, &gpu)?);
    }

    // Tables.
    let mut body = format!(
        "CPU–GPU co-execution (`cargo xtask bench coexec`): CPU side 1 thread on core 0, PoCL 1 \
         thread on core 1 (`POCL_MAX_PTHREAD_COUNT=1`), device {}, profile `{}`.\n\n\
         ### Per layer (held-out random layers)\n\n\
         {} random conv and {} random linear layers drawn with a seed the profile's dataset never \
         used. Every candidate split (multiples of the GPU kernel's vector width, 0 and C) is \
         measured by the runtime's profiler as a session runs it: both parts side by side, the \
         join included (the join alone: {:.1} µs); a single device alone; each \
         the median of {} passes over the layer's candidates. \
         *Predicted*: the split the profile picks, at its measured cost; *grid*: the best measured \
         split (the papers' grid search). Speedups over the better single device.\n\n\
         | layer | C | predicted g | grid g | best single (ms) | predicted (ms) | grid (ms) | predicted speedup | grid speedup | share of grid |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        gpu.label(),
        profile_path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default(),
        layers,
        layers,
        measured_sync * 1e3,
        GRID_PASSES
    );
    let mut summary = Vec::new();
    for kind in ["conv", "linear"] {
        let rs: Vec<&LayerResult> = results.iter().filter(|r| r.kind == kind).collect();
        for r in &rs {
            let (sp, so) = (r.single_ms / r.predicted_ms, r.single_ms / r.oracle_ms);
            body.push_str(&format!(
                "| {} | {} | {} | {} | {:.3} | {:.3} | {:.3} | {:.2}x | {:.2}x | {:.0}% |\n",
                r.desc,
                r.channels,
                r.predicted_g,
                r.oracle_g,
                r.single_ms,
                r.predicted_ms,
                r.oracle_ms,
                sp,
                so,
                100.0 * sp / so
            ));
        }
        let n = rs.len().max(1) as f64;
        let sp = rs.iter().map(|r| r.single_ms / r.predicted_ms).sum::<f64>() / n;
        let so = rs.iter().map(|r| r.single_ms / r.oracle_ms).sum::<f64>() / n;
        let share = rs
            .iter()
            .map(|r| (r.single_ms / r.predicted_ms) / (r.single_ms / r.oracle_ms))
            .sum::<f64>()
            / n;
        summary.push((kind, sp, so, share));
    }
    body.push_str(
        "\n| layers | mean predicted speedup | mean grid speedup | predicted / grid (mean per layer) |\n|---|---:|---:|---:|\n",
    );
    for (k, sp, so, share) in &summary {
        body.push_str(&format!(
            "| {k} | {sp:.3}x | {so:.3}x | {:.1}% |\n",
            share * 100.0
        ));
    }
    let all_share = results
        .iter()
        .map(|r| r.oracle_ms / r.predicted_ms)
        .sum::<f64>()
        / results.len().max(1) as f64;
    body.push_str(&format!(
        "| all | | | {:.1}% |\n\n(The paper, Pixel 5, 1 CPU thread + GPU: 1.51x / 1.63x linear, \
         1.45x / 1.49x conv; about 94% of the grid's speedup.)\n",
        all_share * 100.0
    ));

    body.push_str(
        "\n### End to end\n\nMedian latency (ms) over interleaved rounds; *plan*: predicted with \
         the shipped profile (`tandem compile` default); *oracle*: every split measured on this \
         device (grid coarsened to ≤17 candidates per layer, 1–3 repetitions each); outputs \
         compared with CPU only (max relative difference).\n\n\
         | model | CPU only | GPU only | plan | oracle plan | plan / best single | oracle / best single | predicted plan ms | split steps | cross-device waits | plan Δ | oracle Δ |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in &e2e {
        let best = r.cpu_ms.min(r.gpu_ms);
        body.push_str(&format!(
            "| {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.3}x | {:.3}x | {:.2} | {} | {} | {:.1e} | {:.1e} |\n",
            r.name, r.cpu_ms, r.gpu_ms, r.plan_ms, r.oracle_ms, best / r.plan_ms, best / r.oracle_ms,
            r.predicted_plan_ms, r.splits, r.waits, r.plan_diff, r.oracle_diff
        ));
    }
    body.push_str(&format!(
        "\n### Sync overhead\n\n| source | per join (µs) |\n|---|---:|\n\
         | profile `sync_ms` (used by the planner) | {:.1} |\n\
         | measured now (profiler join, median) | {:.1} |\n\n\
         Per model, the plan's waits × the measured join is the sync cost it pays: {}.\n\
         Per-wait polling against event waits: `cargo xtask bench sync` (`docs/benchmarks.md`).\n",
        profile.sync_ms() * 1e3,
        measured_sync * 1e3,
        e2e.iter()
            .map(|r| format!(
                "{} {:.3} ms ({:.2}% of the plan)",
                r.name,
                r.waits as f64 * measured_sync,
                100.0 * r.waits as f64 * measured_sync / r.plan_ms
            ))
            .collect::<Vec<_>>()
            .join(", ")
    ));

    // Plots.
    let figures = root.join("docs/figures");
    std::fs::create_dir_all(&figures)?;
    if let Some(r) = results
        .iter()
        .filter(|r| r.kind == "conv")
        .max_by_key(|r| r.curve.len())
    {
        let pts = |f: &dyn Fn(&Point) -> f64| -> Vec<(f64, f64)> {
            r.curve.iter().map(|p| (p.0 as f64, f(p))).collect()
        };
        let sync = measured_sync;
        let co = pts(&|p| {
            p.3.max(p.4)
                + if p.0 > 0 && p.0 < r.channels {
                    sync
                } else {
                    0.0
                }
        });
        let svg = svg_lines(
            &format!("{}: latency against GPU channels", r.desc),
            "GPU output channels g",
            "ms",
            &[
                ("CPU part (measured)", "#1f77b4", pts(&|p| p.3)),
                ("GPU part (measured)", "#d62728", pts(&|p| p.4)),
                ("co-executed max+sync", "#2ca02c", co),
                ("GPU part (predicted)", "#ff9896", pts(&|p| p.2)),
            ],
        )?;
        std::fs::write(figures.join(format!("{stem}-coexec_layer.svg")), svg)?;
    }
    let scatter: Vec<(f64, f64)> = results
        .iter()
        .flat_map(|r| {
            r.curve.iter().flat_map(|p| {
                let mut v = Vec::new();
                if p.0 > 0 {
                    v.push((p.4, p.2));
                }
                if p.0 < r.channels {
                    v.push((p.3, p.1));
                }
                v
            })
        })
        .collect();
    std::fs::write(
        figures.join(format!("{stem}-coexec_predicted_vs_measured.svg")),
        svg_scatter("predicted against measured (CPU and GPU parts)", &scatter)?,
    )?;
    body.push_str(&format!(
        "\n### Plots\n\n![one layer's CPU, GPU and co-executed latency against the GPU channel \
         count](figures/{stem}-coexec_layer.svg)\n\n![predicted against measured latency of \
         every measured part](figures/{stem}-coexec_predicted_vs_measured.svg)\n",
    ));

    if json {
        let layers_json: Vec<serde_json::Value> = results
            .iter()
            .map(|r| {
                serde_json::json!({"layer": r.desc, "kind": r.kind, "channels": r.channels,
                "predicted_g": r.predicted_g, "grid_g": r.oracle_g, "single_ms": r.single_ms,
                "predicted_ms": r.predicted_ms, "grid_ms": r.oracle_ms})
            })
            .collect();
        let models_json: Vec<serde_json::Value> = e2e
            .iter()
            .map(|r| {
                serde_json::json!({"model": r.name, "cpu_ms": r.cpu_ms, "gpu_ms": r.gpu_ms,
                "plan_ms": r.plan_ms, "oracle_ms": r.oracle_ms, "plan_max_rel_diff": r.plan_diff,
                "oracle_max_rel_diff": r.oracle_diff})
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({"device": gpu.label(), "sync_ms": measured_sync,
                "layers": layers_json, "models": models_json, "share_of_grid": all_share})
        );
    } else {
        print!("{body}");
    }
    write_section(
        &root.join("docs/evaluation.md"),
        &format!("bench coexec {stem}"),
        &body,
    )
}
