//! Where a plan's predictions and this machine disagree: every split step of a model's plan
//! (the shipped profile's, as `tandem compile` makes it) with its CPU and GPU parts predicted
//! and measured apart, the step measured whole as a session runs it (both parts side by side,
//! `LayerBench::split`), and the gain each step was to bring against the gains it brings.
//!
//! `cargo run --release --example plan_steps -- MODEL.tflite [PASSES]` prints one CSV row per
//! split step and the summed gains; `… -- MODEL.tflite [PASSES] --whole` instead times every
//! splittable layer whole on each device, slowest GPU layers first, with the GPU kernel dispatch
//! picks (where the GPU is weakest against the CPU).
//!
//! Each time is the median of `PASSES` (default 3) medians of the runtime profiler's
//! repetitions, with the one-core-each setting of `cargo xtask bench coexec`. The sync the
//! planner adds to a split is the profile's.
use anyhow::{bail, Context, Result};
use tandem_compiler::lower::CompileOptions;
use tandem_compiler::run::{compile_file, compile_planned, PlanSource};
use tandem_predictors::{Layer, Profile};
use tandem_runtime::artifact::Artifact;
use tandem_runtime::profile::{median, LayerOp, MeasureOptions, Profiler};

const OPTIONS: MeasureOptions = MeasureOptions {
    warmup: 2,
    min_reps: 7,
    max_reps: 41,
    target_ms: 20.0,
    deadline: std::time::Duration::from_secs(30),
    gpu_from_idle: false,
};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let whole = args.iter().any(|a| a == "--whole");
    let rest: Vec<&String> = args.iter().filter(|a| *a != "--whole").collect();
    let Some(path) = rest.first() else {
        bail!("usage: plan_steps MODEL.tflite [PASSES] [--whole]");
    };
    let passes: usize = match rest.get(1) {
        Some(p) => p
            .parse()
            .ok()
            .filter(|&p| p > 0)
            .with_context(|| format!("PASSES must be a positive integer, not '{p}'"))?,
        None => 3,
    };
    let path = std::path::PathBuf::from(path);
    // SAFETY: no other thread exists yet; OpenCL has not started.
    unsafe { tandem_runtime::profile::limit_pocl_threads() };
    let mut profiler = Profiler::open(true).context("plan_steps needs an OpenCL device")?;
    let base = CompileOptions::cpu(1, "");
    if whole {
        return whole_layers(&mut profiler, &compile_file(&path, &base)?, passes);
    }
    let gpu = profiler.device().clone();
    let profile_path = tandem_predictors::bundle::default_for(
        &gpu,
        tandem_runtime::profile::host_signature().as_deref(),
    )
    .with_context(|| format!("no shipped profile for {}", gpu.label()))?;
    let profile = Profile::load(&profile_path)?;
    let planned = compile_planned(&path, &base, &PlanSource::Default, Some(gpu))?;
    let report = planned.report.context("the plan has no report")?;
    println!(
        "step,name,channels,gpu_channels,predicted_cpu_whole,predicted_cpu,predicted_gpu,\
         measured_cpu_whole,measured_cpu,measured_gpu,measured_split,predicted_gain,measured_gain,\
         split_gain"
    );
    let (mut predicted_gain, mut measured_gain, mut split_gain) = (0.0, 0.0, 0.0);
    for row in report.rows.iter().filter(|r| r.device == "split") {
        // The planned artifact's own step: the layer as planned (a refactorized depthwise layer
        // is a grouped convolution there).
        let op = LayerOp::from_kernel(&planned.artifact.steps[row.step].kernel)
            .with_context(|| format!("{} is not a splittable layer", row.name))?;
        let (c, g) = (op.channels(), row.gpu_channels);
        let layer = Layer::from_op(&op).map_err(anyhow::Error::msg)?;
        let predicted = profile
            .sweep(&layer, 1)?
            .into_iter()
            .find(|k| k.gpu_channels == g)
            .with_context(|| format!("{}: no candidate with {g} GPU channels", row.name))?;
        let mut bench = profiler.layer(&op, &[g], row.step as u64)?;
        let mut times = [Vec::new(), Vec::new(), Vec::new(), Vec::new()];
        for _ in 0..passes {
            times[0].push(bench.cpu(c, 1, &OPTIONS).median_ms);
            times[1].push(bench.cpu(c - g, 1, &OPTIONS).median_ms);
            times[2].push(bench.gpu(g, &OPTIONS)?.1.median_ms);
            times[3].push(bench.split(g, 1, &OPTIONS)?.median_ms);
        }
        let [cpu_whole, cpu, gpu, split] = times.map(|mut t| median(&mut t));
        let p_gain = row.cpu_ms - row.planned_ms;
        let m_gain = cpu_whole - (cpu.max(gpu) + report.sync_ms);
        let s_gain = cpu_whole - split;
        predicted_gain += p_gain;
        measured_gain += m_gain;
        split_gain += s_gain;
        println!(
            "{},{},{c},{g},{:.4},{:.4},{:.4},{cpu_whole:.4},{cpu:.4},{gpu:.4},{split:.4},\
             {p_gain:.4},{m_gain:.4},{s_gain:.4}",
            row.step, row.name, row.cpu_ms, predicted.cpu_ms, predicted.gpu_ms
        );
    }
    println!(
        "# {}: {} split steps; gains against running them on the CPU alone, summed: predicted \
         {predicted_gain:.3} ms, measured apart {measured_gain:.3} ms, measured side by side \
         {split_gain:.3} ms (plan predicted {:.3} ms, CPU only {:.3} ms)",
        path.display(),
        report.rows.iter().filter(|r| r.device == "split").count(),
        report.plan_ms,
        report.cpu_only_ms
    );
    Ok(())
}

/// Every splittable layer of `plain` timed whole on the GPU and on the CPU, slowest GPU first.
fn whole_layers(profiler: &mut Profiler, plain: &Artifact, passes: usize) -> Result<()> {
    let mut rows = Vec::new();
    for (i, step) in plain.steps.iter().enumerate() {
        let Some(op) = LayerOp::from_kernel(&step.kernel) else {
            continue;
        };
        let c = op.channels();
        let mut bench = profiler.layer(&op, &[c], i as u64)?;
        let (mut cpu, mut gpu, mut dispatch) = (Vec::new(), Vec::new(), None);
        for _ in 0..passes {
            cpu.push(bench.cpu(c, 1, &OPTIONS).median_ms);
            let (d, t) = bench.gpu(c, &OPTIONS)?;
            gpu.push(t.median_ms);
            dispatch = Some(d);
        }
        let d = dispatch.context("no pass ran")?;
        rows.push((
            median(&mut gpu),
            median(&mut cpu),
            format!("{} {:?} {:?}", d.variant.name(), d.block, d.work_group),
            step.name.clone(),
        ));
    }
    let gpu_total: f64 = rows.iter().map(|r| r.0).sum();
    let cpu_total: f64 = rows.iter().map(|r| r.1).sum();
    rows.sort_by(|a, b| b.0.total_cmp(&a.0));
    println!("step,gpu_ms,cpu_ms,gpu_over_cpu,dispatch");
    for (gpu, cpu, dispatch, name) in &rows {
        println!("{name},{gpu:.4},{cpu:.4},{:.2},{dispatch}", gpu / cpu);
    }
    println!(
        "# {} splittable layers: GPU {gpu_total:.2} ms, CPU {cpu_total:.2} ms whole",
        rows.len()
    );
    Ok(())
}
