//! GPU and co-executed plans end to end: every zoo model and float fixture, run GPU-only and
//! split between CPU and GPU, equals the CPU-only run within 1e-4 relative (and the CPU-only
//! run equals the official interpreter, `cpu_execution.rs`). Random split points per operator,
//! both sync modes, device buffers, and the injected faults: a kernel that fails to build, a
//! device error mid-run, a deadline (no device and foreign artifacts: `compiler/tests/gpu_cli.rs`).
//!
//! These run on PoCL (`cargo xtask test` installs it); without an OpenCL device they fail.

use std::time::Duration;
use tandem_compiler::ir::Graph;
use tandem_compiler::lower::{compile, CompileOptions, Plan};
use tandem_compiler::tflite;
use tandem_models::{inputs::seeded_inputs, SEED};
use tandem_runtime::gpu::device::{DeviceInfo, GpuDevice};
use tandem_runtime::npy::NpyArray;
use tandem_runtime::rng::Rng;
use tandem_runtime::session::{Fault, GpuMemory, Model, Session, SessionOptions, SyncMode};
use tandem_tests::{relative_error, repo_root};

const TOLERANCE: f32 = 1e-4;

fn device() -> DeviceInfo {
    GpuDevice::open()
        .unwrap_or_else(|e| panic!("an OpenCL device is needed (pocl-opencl-icd): {e}"))
        .info
}

fn compile_plan(graph: Graph, plan: Plan, gpu: Option<DeviceInfo>) -> Model {
    let options = CompileOptions {
        plan,
        gpu,
        ..CompileOptions::cpu(1, "test")
    };
    let artifact = compile(graph, &options).expect("compiles");
    Model::load(&artifact.encode().expect("encodes")).expect("loads")
}

fn run(model: &Model, inputs: &[NpyArray], options: SessionOptions) -> Vec<NpyArray> {
    Session::with_options(model, options)
        .expect("session")
        .run(inputs)
        .expect("runs")
}

fn assert_close(what: &str, got: &[NpyArray], want: &[NpyArray]) {
    assert_eq!(got.len(), want.len(), "{what}: output count");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.shape, w.shape, "{what}: output {i} shape");
        let err = relative_error(&g.to_f32().expect("f32"), &w.to_f32().expect("f32"));
        assert!(
            err <= TOLERANCE,
            "{what}: output {i} differs from CPU-only by {err:e}"
        );
    }
}

/// CPU-only, GPU-only and half-split runs of `graph` agree.
fn check_plans(name: &str, graph: impl Fn() -> Graph, inputs: &[NpyArray]) {
    let dev = device();
    let cpu = compile_plan(graph(), Plan::CpuOnly, None);
    let want = run(&cpu, inputs, SessionOptions::default());
    for plan in [Plan::GpuOnly, Plan::SplitFraction(0.5)] {
        let model = compile_plan(graph(), plan.clone(), Some(dev.clone()));
        for sync in [SyncMode::Polling, SyncMode::EventWait] {
            let options = SessionOptions {
                sync,
                threads: 2,
                ..SessionOptions::default()
            };
            assert_close(
                &format!("{name} {plan:?} {sync:?}"),
                &run(&model, inputs, options),
                &want,
            );
        }
    }
}

fn zoo(name: &str) {
    let model = tandem_models::by_name(name).expect("zoo model");
    let graph = || model.graph().expect("builds");
    let inputs = seeded_inputs(&graph(), SEED);
    check_plans(name, graph, &inputs);
}

#[test]
fn small_zoo_models_agree_on_every_plan() {
    for model in tandem_models::all().into_iter().filter(|m| m.small) {
        zoo(model.name);
    }
}

#[test]
fn resnet18_agrees_on_every_plan() {
    zoo("resnet18");
}

#[test]
fn resnet34_agrees_on_every_plan() {
    zoo("resnet34");
}

#[test]
fn inception_v3_agrees_on_every_plan() {
    zoo("inception_v3");
}

#[test]
fn vgg16_agrees_on_every_plan() {
    zoo("vgg16");
}

#[test]
fn float_fixtures_agree_on_every_plan() {
    for name in [
        "mobile_block_fp16",
        "mobile_block_fp32",
        "sparse_fc",
        "dynamic_batch",
    ] {
        let path = repo_root()
            .join("models/fixtures")
            .join(format!("{name}.tflite"));
        let bytes = std::fs::read(&path).expect("fixture");
        let graph = || tflite::read_model(&bytes).expect("reads");
        let inputs = seeded_inputs(&graph(), SEED);
        check_plans(name, graph, &inputs);
    }
}

/// Random GPU channel counts for every splittable node (any count, not only multiples of the
/// vector width), random sync mode and memory: always equal to CPU-only.
#[test]
fn random_split_points_per_operator_agree() {
    let dev = device();
    let mut rng = Rng::new(0x5EED);
    for name in ["mobilenet_v1", "tiny_conv", "tiny_weights", "mobilenet_v2"] {
        let model = tandem_models::by_name(name).expect("zoo model");
        let graph = || model.graph().expect("builds");
        let inputs = seeded_inputs(&graph(), SEED);
        let want = run(
            &compile_plan(graph(), Plan::CpuOnly, None),
            &inputs,
            SessionOptions::default(),
        );
        // Splittable nodes and their channel counts, from a GPU-only compilation.
        let probe = compile_plan(graph(), Plan::GpuOnly, Some(dev.clone()));
        let nodes: Vec<(usize, usize)> = probe
            .artifact()
            .steps
            .iter()
            .filter_map(|s| {
                let c = tandem_runtime::gpu::launch::split_channels(&s.kernel)?;
                let node = s.name.rsplit('#').next()?.parse().ok()?;
                Some((node, c))
            })
            .collect();
        assert!(!nodes.is_empty(), "{name}: no splittable node");
        for round in 0..3 {
            let plan = Plan::Nodes(
                nodes
                    .iter()
                    .map(|&(n, c)| (n, (rng.next_u64() % (c as u64 + 1)) as usize))
                    .collect(),
            );
            let model = compile_plan(graph(), plan.clone(), Some(dev.clone()));
            let options = SessionOptions {
                sync: if rng.next_u64().is_multiple_of(2) {
                    SyncMode::Polling
                } else {
                    SyncMode::EventWait
                },
                memory: if round == 2 {
                    GpuMemory::Buffers
                } else {
                    GpuMemory::Auto
                },
                threads: 1 + (rng.next_u64() % 2) as usize,
                ..SessionOptions::default()
            };
            let what = format!(
                "{name} round {round} ({:?}, {:?})",
                options.sync, options.memory
            );
            assert_close(&what, &run(&model, &inputs, options), &want);
        }
    }
}

fn tiny_model() -> (Graph, Vec<NpyArray>) {
    let graph = tandem_models::by_name("mobilenet_v1")
        .expect("zoo")
        .graph()
        .expect("builds");
    let inputs = seeded_inputs(&graph, SEED);
    (graph, inputs)
}

fn faulty(fault: Fault, fallback: bool, deadline_ms: u64) -> SessionOptions {
    SessionOptions {
        fault: Some(fault),
        fallback_cpu: fallback,
        deadline: Duration::from_millis(deadline_ms),
        ..SessionOptions::default()
    }
}

#[test]
fn faults_give_clear_errors_and_fall_back_to_the_cpu() {
    let dev = device();
    let (graph, inputs) = tiny_model();
    let want = run(
        &compile_plan(graph.clone(), Plan::CpuOnly, None),
        &inputs,
        SessionOptions::default(),
    );
    let model = compile_plan(graph, Plan::SplitFraction(0.5), Some(dev));
    let cases = [
        (Fault::KernelBuild, "building GPU kernels"),
        (Fault::DeviceErrorAt(3), "step 3"),
        (Fault::HangAt(3), "deadline of 2000 ms"),
    ];
    for (fault, expected) in cases {
        for sync in [SyncMode::Polling, SyncMode::EventWait] {
            let options = SessionOptions {
                sync,
                ..faulty(fault, false, 2000)
            };
            let err = Session::with_options(&model, options)
                .expect("session")
                .run(&inputs)
                .expect_err("the fault must fail the run")
                .to_string();
            assert!(err.contains(expected), "{fault:?} {sync:?}: {err}");
            let options = SessionOptions {
                sync,
                ..faulty(fault, true, 2000)
            };
            let mut session = Session::with_options(&model, options).expect("session");
            assert_close(
                &format!("{fault:?} fallback"),
                &session.run(&inputs).expect("runs"),
                &want,
            );
            assert!(session.fallback_reason().is_some());
        }
    }
}
