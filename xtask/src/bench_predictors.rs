//! `cargo xtask bench predictors`: how long the compile-time predictor takes to sweep every
//! candidate split of one layer, over every splittable layer of the zoo; and the demo's use of
//! the shipped profile.

use crate::bench::write_machine_section;
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::time::Instant;
use tandem_predictors::bundle::{default_for, shipped_dir};
use tandem_predictors::{Layer, Profile};
use tandem_runtime::artifact::Artifact;
use tandem_runtime::gpu::device::GpuDevice;
use tandem_runtime::profile::LayerOp;

/// The shipped profile for this machine's OpenCL device, or the first shipped one when there
/// is no device (the prediction still runs; it is for another device then).
pub fn shipped_profile() -> Result<(PathBuf, bool)> {
    if let Ok(dev) = GpuDevice::open() {
        if let Some(p) = default_for(
            &dev.info,
            tandem_runtime::profile::host_signature().as_deref(),
        ) {
            return Ok((p, true));
        }
    }
    let mut all: Vec<PathBuf> = std::fs::read_dir(shipped_dir())
        .with_context(|| format!("reading {}", shipped_dir().display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "profile"))
        .collect();
    all.sort();
    let first = all
        .into_iter()
        .next()
        .context("no shipped profile in predictors/profiles")?;
    Ok((first, false))
}

fn layers_of(artifact: &Artifact) -> Vec<(String, Layer)> {
    artifact
        .steps
        .iter()
        .filter_map(|s| {
            let op = LayerOp::from_kernel(&s.kernel)?;
            Some((s.name.clone(), Layer::from_op(&op).ok()?))
        })
        .collect()
}

/// Times [`Profile::sweep`] on every splittable zoo layer; prints and records the result.
pub fn bench_predictors(root: &Path, json: bool) -> Result<()> {
    let names = ["mobilenet_v2", "resnet18", "inception_v3", "vgg16"];
    crate::zoo::write_zoo(&root.join("zoo"), &names.map(String::from))?;
    let (path, _) = shipped_profile()?;
    let profile = Profile::load(&path)?;
    let mut per_op = Vec::new();
    let mut candidates = 0usize;
    // Every layer first, so that the timed sweeps run back to back, not between compilations.
    let mut layers = Vec::new();
    for name in names {
        let model = root.join("zoo").join(format!("{name}.tflite"));
        let artifact = tandem_compiler::run::compile_file(&model, &Default::default())?;
        layers.extend(layers_of(&artifact).into_iter().map(|(_, layer)| layer));
    }
    for layer in &layers {
        let n = profile.sweep(layer, 1)?.len();
        // The layer's time: the median over batches of the mean sweep time (this host
        // is shared; a batch that another tenant interrupts does not move the median).
        let (batches, reps) = (7, 10);
        let mut times = Vec::with_capacity(batches);
        for _ in 0..batches {
            let start = Instant::now();
            for _ in 0..reps {
                std::hint::black_box(profile.sweep(std::hint::black_box(layer), 1)?);
            }
            times.push(start.elapsed().as_secs_f64() * 1e3 / reps as f64);
        }
        per_op.push(tandem_runtime::profile::median(&mut times));
        candidates += n;
    }
    let ops = per_op.len();
    let mean = per_op.iter().sum::<f64>() / ops.max(1) as f64;
    let max = per_op.iter().copied().fold(0.0, f64::max);
    let mut sorted = per_op.clone();
    let median = tandem_runtime::profile::median(&mut sorted);
    if json {
        println!(
            "{}",
            serde_json::json!({"ops": ops, "candidates": candidates, "mean_ms": mean,
                "median_ms": median, "max_ms": max, "profile": path.display().to_string()})
        );
    }
    let body = format!(
        "Sweeping every candidate split (GPU channel counts in steps of the kernel's vector \
         width, coarsened to at most 256 steps on wider layers; both predictors per candidate) \
         of one layer with the shipped profile \
         (`cargo xtask bench predictors`; {ops} splittable layers of {}, {candidates} candidates \
         in all, {:.0} per layer on average; one thread; a layer's time is the median of 7 \
         batches of 10 sweeps):\n\n\
         | per layer | mean | median | max |\n|---|---:|---:|---:|\n\
         | sweep time (ms) | {mean:.4} | {median:.4} | {max:.4} |\n",
        names.join(", "),
        candidates as f64 / ops.max(1) as f64
    );
    if !json {
        print!("{body}");
    }
    write_machine_section(&root.join("docs/benchmarks.md"), "bench predictors", &body)
}
