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

use crate::bench::write_machine_section;
use anyhow::{Context, Result};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Instant;
use tandem_compiler::ir::{Activation, Graph};
use tandem_compiler::lower::{compile, CompileOptions, Plan};
use tandem_models::inputs::seeded_inputs;
use tandem_models::net::Net;
use tandem_runtime::artifact::Artifact;
use tandem_runtime::gpu::device::{DeviceInfo, GpuDevice};
use tandem_runtime::gpu::launch::split_channels;
use tandem_runtime::gpu::launch::GpuBackend;
use tandem_runtime::gpu::memory::{Flags, ABORT, CPU_DONE, GPU_DONE, STATUS};
use tandem_runtime::npy::NpyArray;
use tandem_runtime::session::{Model, Session, SessionOptions, SyncMode};
use tandem_runtime::sync::spin_until;

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

/// One join of the two devices, measured directly, `samples` times (µs each).
///
/// Polling: the GPU queue already sits in its wait kernel (as in a split step whose GPU part ran
/// while the CPU computed); from the CPU storing its flag until it sees the GPU's answer (the
/// wait kernel returns, the signal kernel stores the GPU's flag). Event wait: from the host
/// enqueueing the GPU's (one-item) kernel until `clWaitForEvents` returns — the host round trip
/// that every device transition costs in event mode.
fn handshakes(samples: usize) -> Result<(Vec<f64>, Vec<f64>)> {
    let dev = GpuDevice::open()?;
    let flags = Flags::new(&dev.context)?;
    let empty = Artifact {
        producer: String::new(),
        model: String::new(),
        tensors: vec![],
        weights: vec![],
        weights_len: 0,
        arena_bytes: 0,
        inputs: vec![],
        outputs: vec![],
        steps: vec![],
        threads: 1,
        gpu: None,
    };
    let mut backend = GpuBackend::new(dev, &empty)?;
    let deadline = std::time::Duration::from_secs(10);
    let (mut poll, mut event) = (Vec::new(), Vec::new());
    for w in [CPU_DONE, GPU_DONE, ABORT, STATUS] {
        flags.word(w).store(0, Ordering::Release);
    }
    for i in 0..samples + 20 {
        let e = i as i32 + 1;
        backend.wait(&flags, CPU_DONE, e, i32::MAX)?;
        backend.signal(&flags, GPU_DONE, e)?;
        backend.dev.queue.flush().context("flushing the queue")?;
        let settle = Instant::now();
        while settle.elapsed() < std::time::Duration::from_micros(300) {
            std::hint::spin_loop();
        }
        let start = Instant::now();
        flags.word(CPU_DONE).store(e, Ordering::Release);
        spin_until(
            flags.word(GPU_DONE),
            e,
            flags.word(ABORT),
            Instant::now() + deadline,
        )
        .map_err(|e| anyhow::anyhow!("the GPU did not answer the CPU's flag: {e:?}"))?;
        let polled = start.elapsed().as_secs_f64() * 1e6;
        let start = Instant::now();
        let ev = backend.signal(&flags, STATUS, 0)?;
        backend.dev.queue.flush().context("flushing the queue")?;
        ev.wait().context("waiting for the event")?;
        let waited = start.elapsed().as_secs_f64() * 1e6;
        if i >= 20 {
            poll.push(polled);
            event.push(waited);
        }
        if i == 10 {
            tandem_runtime::profile::split_cores();
        }
    }
    backend.dev.queue.finish().context("draining the queue")?;
    Ok((poll, event))
}

/// Runs the benchmark, prints a table (or JSON) and updates `docs/benchmarks.md`.
pub fn bench_sync(root: &Path, rounds: usize, json: bool) -> Result<()> {
    // One PoCL thread; must be set before the OpenCL library initialises.
    // SAFETY: no other thread exists yet in this process.
    unsafe { tandem_runtime::profile::limit_pocl_threads() };
    let gpu = GpuDevice::open()
        .context("the sync benchmark needs an OpenCL device (pocl-opencl-icd)")?
        .info;
    let (hs_poll, hs_event) = handshakes(rounds * 20)?;
    let samples = hs_poll.len();
    let (poll, event) = (median(hs_poll), median(hs_event));
    let mut rows = Vec::new();
    for kind in ["tiny", "linear", "conv"] {
        let poll = overheads(kind, SyncMode::Polling, &gpu, rounds)?;
        let event = overheads(kind, SyncMode::EventWait, &gpu, rounds)?;
        rows.push((kind, median(poll), median(event)));
    }
    if json {
        let layers: serde_json::Map<String, serde_json::Value> = rows
            .iter()
            .map(|(k, p, e)| {
                (
                    k.to_string(),
                    serde_json::json!({"polling_us_per_wait": p, "event_wait_us_per_wait": e}),
                )
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({
                "polling_us_median": poll,
                "event_wait_us_median": event,
                "handshakes": samples,
                "chains": layers,
                "device": gpu.label(),
                "rounds": rounds,
            })
        );
    }
    let mut body = format!(
        "`cargo xtask bench sync`: `POCL_MAX_PTHREAD_COUNT=1`, the CPU side one thread on core 0, \
         PoCL's thread on core 1; device: {}.\n\n\
         **One join**, median of {samples} (polling: the CPU stores its flag, the GPU's waiting \
         queue answers with its own; event wait: the host enqueues a kernel and waits for its \
         event):\n\n\
         | polling (µs) | event wait (µs) | event / polling |\n|---:|---:|---:|\n\
         | {poll:.1} | {event:.1} | {:.1}x |\n\n\
         **In the executor**: chains of {LAYERS} layers run all-CPU, all-GPU and alternating \
         (every step waits for the other device), {rounds} interleaved rounds; overhead per wait = \
         (T_alternating − (T_cpu + T_gpu) / 2) / waits, median:\n\n\
         | layers | polling (µs per wait) | event wait (µs per wait) |\n|---|---:|---:|\n",
        gpu.label(),
        event / poll.max(1e-3)
    );
    for (k, p, e) in &rows {
        body.push_str(&format!("| {k} | {p:.1} | {e:.1} |\n"));
    }
    body.push_str(
        "\nIn the chains, polling's overhead is a few µs at most and can come out below zero: the GPU's \
         next kernel is already queued behind its wait kernel and starts the moment the CPU's flag \
         flips, hiding part of the launch cost that the all-GPU chain pays. Event waits pay a \
         host round trip per transition.\n",
    );
    if !json {
        print!("{body}");
    }
    write_machine_section(&root.join("docs/benchmarks.md"), "bench sync", &body)
}
