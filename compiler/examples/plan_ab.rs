//! Plans of one model, end to end on this machine: the model compiled CPU only and planned with
//! each device profile given (or loaded from each compiled `.tandem` artifact given, e.g. a
//! hand-made `--split` plan), run in interleaved rounds (median), outputs compared. For changes
//! that the per-layer figures cannot judge alone (the contention of split steps, a retrained
//! predictor, which split steps cost a session more than they gain).
//!
//! `cargo run --release --example plan_ab -- MODEL.tflite PLAN… [--rounds N]`, each PLAN a
//! `.profile` or a `.tandem` file, prints the split steps of each profile's plan, the measured
//! latencies and the speedups over the CPU alone. One-core-each setting of `cargo xtask bench
//! coexec`; 41 rounds unless `--rounds` says otherwise.
use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::time::Instant;
use tandem_compiler::lower::CompileOptions;
use tandem_compiler::run::{compile_file, compile_planned, PlanSource};
use tandem_runtime::gpu::device::GpuDevice;
use tandem_runtime::npy::NpyArray;
use tandem_runtime::profile::{median, split_cores};
use tandem_runtime::rng::Rng;
use tandem_runtime::session::{Model, Session, SessionOptions};

fn main() -> Result<()> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut rounds = 41;
    if let Some(at) = args.iter().position(|a| a == "--rounds") {
        let r = args.get(at + 1).context("--rounds needs a count")?;
        rounds = r
            .parse()
            .ok()
            .filter(|&r: &usize| r > 0)
            .with_context(|| format!("--rounds must be a positive integer, not '{r}'"))?;
        args.drain(at..at + 2);
    }
    let [model, plans @ ..] = args.as_slice() else {
        bail!("usage: plan_ab MODEL.tflite PLAN.profile|PLAN.tandem… [--rounds N]");
    };
    if plans.is_empty() {
        bail!("usage: plan_ab MODEL.tflite PLAN.profile|PLAN.tandem… [--rounds N]");
    }
    let path = PathBuf::from(model);
    // SAFETY: no other thread exists yet; OpenCL has not started.
    unsafe { tandem_runtime::profile::limit_pocl_threads() };
    let gpu = GpuDevice::open()
        .context("plan_ab needs an OpenCL device (pocl-opencl-icd)")?
        .info;
    let base = CompileOptions::cpu(1, "");
    let mut models = vec![Model::from_artifact(compile_file(&path, &base)?)];
    let mut names = vec!["CPU only".to_string()];
    for plan in plans {
        if plan.ends_with(".tandem") {
            let model = Model::load_file(std::path::Path::new(plan))
                .with_context(|| format!("loading {plan}"))?;
            models.push(model);
            names.push(plan.clone());
            continue;
        }
        let profile = plan;
        let planned = compile_planned(
            &path,
            &base,
            &PlanSource::Profile(PathBuf::from(profile)),
            Some(gpu.clone()),
        )?;
        let report = planned.report.context("the plan has no report")?;
        let splits: Vec<String> = report
            .rows
            .iter()
            .filter(|r| r.device == "split")
            .map(|r| {
                let node = r.name.rsplit('#').next().unwrap_or(&r.name);
                format!("#{node}={}", r.gpu_channels)
            })
            .collect();
        println!(
            "{profile}: predicted {:.3} ms (CPU only {:.3} ms), {} split steps: {}",
            report.plan_ms,
            report.cpu_only_ms,
            splits.len(),
            splits.join(" ")
        );
        models.push(Model::from_artifact(planned.artifact));
        names.push(profile.clone());
    }
    let options = SessionOptions {
        threads: 1,
        ..SessionOptions::default()
    };
    let mut sessions = models
        .iter()
        .map(|m| Session::with_options(m, options.clone()))
        .collect::<Result<Vec<_>, _>>()?;
    let mut rng = Rng::new(7);
    let inputs: Vec<NpyArray> = models[0]
        .inputs()
        .iter()
        .map(|t| {
            let n = t.shape.iter().product();
            NpyArray::from_f32(t.shape.clone(), &rng.uniform(n, 1.0))
        })
        .collect();
    let mut outputs = Vec::new();
    for s in &mut sessions {
        outputs.push(s.run(&inputs)?);
    }
    split_cores();
    let mut times = vec![Vec::new(); sessions.len()];
    for _ in 0..rounds {
        for (s, t) in sessions.iter_mut().zip(&mut times) {
            let start = Instant::now();
            s.run(&inputs)?;
            t.push(start.elapsed().as_secs_f64() * 1e3);
        }
    }
    let medians: Vec<f64> = times.into_iter().map(|mut t| median(&mut t)).collect();
    for (i, (name, ms)) in names.iter().zip(&medians).enumerate() {
        let diff = max_rel_diff(&outputs[i], &outputs[0]);
        println!(
            "{name}: {ms:.3} ms, {:.3}x over the CPU alone (max relative difference {diff:.1e})",
            medians[0] / ms
        );
        if diff > 1e-4 {
            bail!("{name}: outputs differ from CPU only by {diff:e}");
        }
    }
    Ok(())
}

/// The largest relative difference between two runs' outputs.
fn max_rel_diff(a: &[NpyArray], b: &[NpyArray]) -> f64 {
    let mut worst = 0.0f64;
    for (x, y) in a.iter().zip(b) {
        let (Some(x), Some(y)) = (x.to_f32(), y.to_f32()) else {
            continue;
        };
        for (p, q) in x.iter().zip(&y) {
            worst = worst.max(((p - q).abs() / (1.0 + q.abs())) as f64);
        }
    }
    worst
}
