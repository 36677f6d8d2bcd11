//! `cargo xtask bench sync`: the cost of one cross-device synchronisation in the executor, with
//! SVM polling and with OpenCL event waits.
//!
//! For each layer kind (fully connected 8→8, i.e. almost no work; fully connected 256→256;
//! 3x3 convolution on 8x8x16) a chain of small identical layers is
//! run three ways in interleaved rounds: all on the CPU, all on the GPU, and alternating CPU and
//! GPU, so that every step waits for the other device. The overhead per wait is
//! `(T_alternating − (T_cpu + T_gpu) / 2) / waits`, estimated per round; the medians are reported.
//!
//! Setting: PoCL limited to one thread (`POCL_MAX_PTHREAD_COUNT=1`), the CPU side one thread
//! pinned to core 0 and PoCL's threads pinned to core 1, so that each side has a core of this
//! 2-core machine.

use crate::bench::write_section;
use anyhow::{Context, Result};
use std::path::Path;
use std::time::Instant;
use tandem_compiler::ir::{Activation, Graph};
use tandem_compiler::lower::{compile, CompileOptions, Plan};
use tandem_models::inputs::seeded_inputs;
use tandem_models::net::Net;
use tandem_runtime::gpu::device::{DeviceInfo, GpuDevice};
use tandem_runtime::gpu::launch::split_channels;
use tandem_runtime::npy::NpyArray;
use tandem_runtime::session::{Model, Session, SessionOptions, SyncMode};

const LAYERS: usize = 48;

fn chain(kind: &str) -> Result<Graph> {
    let graph = match kind {
        "tiny" => {
            let (mut net, mut x) = Net::new(3, &[1, 8]);
            for _ in 0..LAYERS {
                x = net.fc(x, 8, Activation::None, 1.0)?;
            }
            net.finish(x, "tiny linear chain")
        }
        "linear" => {
            let (mut net, mut x) = Net::new(1, &[1, 256]);
            for _ in 0..LAYERS {
                x = net.fc(x, 256, Activation::Relu, 1.0)?;
            }
            net.finish(x, "linear chain")
        }
        _ => {
            let (mut net, mut x) = Net::new(2, &[1, 8, 8, 16]);
            for _ in 0..LAYERS {
                x = net.conv(x, 16, [3, 3], 1, Activation::Relu)?;
            }
            net.finish(x, "conv chain")
        }
    };
    Ok(graph)
}

fn model(graph: Graph, plan: Plan, gpu: &DeviceInfo) -> Result<Model> {
    let options = CompileOptions {
        plan,
        gpu: Some(gpu.clone()),
        ..CompileOptions::cpu(1, "sync")
    };
    Ok(Model::from_artifact(compile(graph, &options)?))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Per-wait overheads (µs) of `sync` for a chain of `kind` layers, one estimate per round.
fn overheads(kind: &str, sync: SyncMode, gpu: &DeviceInfo, rounds: usize) -> Result<Vec<f64>> {
    let graph = chain(kind)?;
    let inputs: Vec<NpyArray> = seeded_inputs(&graph, 7);
    let gpu_only = model(graph.clone(), Plan::GpuOnly, gpu)?;
    let nodes: Vec<(usize, usize)> = gpu_only
        .artifact()
        .steps
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            let c = split_channels(&s.kernel)?;
            let node = s.name.rsplit('#').next()?.parse().ok()?;
            Some((node, if i % 2 == 1 { c } else { 0 }))
        })
        .collect();
    let cpu_only = model(graph.clone(), Plan::CpuOnly, gpu)?;
    let alternating = model(graph, Plan::Nodes(nodes), gpu)?;
    let waits = tandem_runtime::sync::dependencies(alternating.artifact()).waits();
    let options = SessionOptions {
        sync,
        threads: 1,
        ..SessionOptions::default()
    };
    let mut sessions = [
        Session::with_options(&cpu_only, options.clone())?,
        Session::with_options(&gpu_only, options.clone())?,
        Session::with_options(&alternating, options)?,
    ];
    for s in &mut sessions {
        for _ in 0..20 {
            s.run(&inputs)?;
        }
    }
    tandem_runtime::profile::split_cores();
    let mut estimates = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let mut t = [0.0f64; 3];
        for (s, t) in sessions.iter_mut().zip(&mut t) {
            let start = Instant::now();
            s.run(&inputs)?;
            *t = start.elapsed().as_secs_f64() * 1e6;
        }
        estimates.push((t[2] - (t[0] + t[1]) / 2.0) / waits as f64);
    }
    Ok(estimates)
}

/// Runs the benchmark, prints a table (or JSON) and updates `docs/benchmarks.md`.
pub fn bench_sync(root: &Path, rounds: usize, json: bool) -> Result<()> {
    // One PoCL thread; must be set before the OpenCL library initialises.
    // SAFETY: no other thread exists yet in this process.
    unsafe { tandem_runtime::profile::limit_pocl_threads() };
    let gpu = GpuDevice::open()
        .context("the sync benchmark needs an OpenCL device (pocl-opencl-icd)")?
        .info;
    let mut rows = Vec::new();
    let (mut all_poll, mut all_event) = (Vec::new(), Vec::new());
    for kind in ["tiny", "linear", "conv"] {
        let poll = overheads(kind, SyncMode::Polling, &gpu, rounds)?;
        let event = overheads(kind, SyncMode::EventWait, &gpu, rounds)?;
        all_poll.extend_from_slice(&poll);
        all_event.extend_from_slice(&event);
        rows.push((kind, median(poll), median(event)));
    }
    let (poll, event) = (median(all_poll), median(all_event));
    if json {
        let layers: serde_json::Map<String, serde_json::Value> = rows
            .iter()
            .map(|(k, p, e)| {
                (
                    k.to_string(),
                    serde_json::json!({"polling_us_median": p, "event_wait_us_median": e}),
                )
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({
                "polling_us_median": poll,
                "event_wait_us_median": event,
                "layers": layers,
                "device": gpu.label(),
                "rounds": rounds,
            })
        );
    }
    let mut body = format!(
        "Per-wait synchronisation overhead, median of {rounds} interleaved rounds per layer kind, \
         chains of {LAYERS} layers alternating CPU and GPU (`cargo xtask bench sync`; \
         `POCL_MAX_PTHREAD_COUNT=1`, CPU side one thread on core 0, PoCL's threads on core 1; device: {}):\n\n\
         | layers | polling (µs) | event wait (µs) | event / polling |\n|---|---:|---:|---:|\n",
        gpu.label()
    );
    let ratio = |p: f64, e: f64| {
        if p >= 1.0 {
            format!("{:.1}x", e / p)
        } else {
            "— (polling < 1 µs)".to_string()
        }
    };
    for (k, p, e) in &rows {
        body.push_str(&format!("| {k} | {p:.1} | {e:.1} | {} |\n", ratio(*p, *e)));
    }
    body.push_str(&format!(
        "| all | {poll:.1} | {event:.1} | {} |\n",
        ratio(poll, event)
    ));
    body.push_str(
        "\nThe overhead is what alternating devices adds to running each layer on its own device; \
         it can come out below zero when the GPU's next kernel is already queued behind its wait \
         kernel and starts the moment the CPU's flag flips, hiding part of the launch cost that \
         the GPU-only chain pays.\n",
    );
    if !json {
        print!("{body}");
    }
    write_section(&root.join("docs/benchmarks.md"), "bench sync", &body)
}
