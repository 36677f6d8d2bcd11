//! The planner end to end: a zoo model compiled with the shipped profile's plan runs with the
//! same outputs as CPU only (within 1e-4 relative), its plan splits layers, and the `.tflite`
//! written with the plan as metadata loads in the official interpreter and gives the same
//! outputs as the original model.
//!
//! These run on PoCL (`cargo xtask test` installs it); without an OpenCL device they fail.

use tandem_compiler::lower::{CompileOptions, Plan};
use tandem_compiler::passes::RefactorDepthwise;
use tandem_compiler::run::{compile_file, compile_planned, emit_tflite, PlanSource, PLAN_METADATA};
use tandem_models::{inputs::seeded_inputs, SEED};
use tandem_runtime::artifact::Placement;
use tandem_runtime::gpu::device::GpuDevice;
use tandem_runtime::session::{Model, Session, SessionOptions};
use tandem_tests::{interpreter_run, relative_error};

fn zoo_model(
    name: &str,
) -> (
    tempfile::TempDir,
    std::path::PathBuf,
    tandem_compiler::ir::Graph,
) {
    let model = tandem_models::by_name(name).expect("zoo model");
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(format!("{name}.tflite"));
    std::fs::write(&path, model.tflite().expect("builds")).expect("writes");
    (dir, path, model.graph().expect("graph"))
}

#[test]
fn the_predicted_plan_of_mobilenet_v2_equals_cpu_only() {
    let gpu = GpuDevice::open()
        .unwrap_or_else(|e| panic!("an OpenCL device is needed (pocl-opencl-icd): {e}"))
        .info;
    let (_dir, path, graph) = zoo_model("mobilenet_v2");
    let profile = tandem_predictors::bundle::shipped_dir().join("pocl-1core.profile");
    let base = CompileOptions::cpu(1, "test");
    let planned =
        compile_planned(&path, &base, &PlanSource::Profile(profile), Some(gpu)).expect("plans");
    let report = planned.report.expect("a planner report");
    assert_eq!(report.rows.len(), planned.artifact.steps.len());
    for (row, step) in report.rows.iter().zip(&planned.artifact.steps) {
        assert_eq!(row.name, step.name);
    }
    assert!(
        planned
            .artifact
            .steps
            .iter()
            .any(|s| matches!(s.placement, Placement::Split { .. })),
        "the plan splits at least one layer"
    );
    assert!(report.plan_ms <= report.cpu_only_ms.min(report.gpu_only_ms) + 1e-9);
    assert!(report.table().contains("total: CPU only"));

    let inputs = seeded_inputs(&graph, SEED);
    let cpu = Model::from_artifact(compile_file(&path, &base).expect("compiles"));
    let plan = Model::from_artifact(planned.artifact);
    let options = SessionOptions {
        threads: 1,
        ..SessionOptions::default()
    };
    let want = Session::with_options(&cpu, options.clone())
        .expect("session")
        .run(&inputs)
        .expect("runs");
    let got = Session::with_options(&plan, options)
        .expect("session")
        .run(&inputs)
        .expect("runs");
    for (g, w) in got.iter().zip(&want) {
        let err = relative_error(&g.to_f32().expect("f32"), &w.to_f32().expect("f32"));
        assert!(err <= 1e-4, "plan differs from CPU only by {err:e}");
    }
}

#[test]
fn the_emitted_tflite_carries_the_plan_and_the_interpreter_gives_the_same_outputs() {
    let (dir, path, graph) = zoo_model("tiny_conv");
    let gpu = GpuDevice::open().map(|d| d.info).ok();
    let options = CompileOptions {
        plan: if gpu.is_some() {
            Plan::SplitFraction(0.5)
        } else {
            Plan::CpuOnly
        },
        gpu,
        ..CompileOptions::cpu(1, "test")
    };
    let artifact = compile_file(&path, &options).expect("compiles");
    let out = dir.path().join("planned.tflite");
    emit_tflite(&path, RefactorDepthwise::Off, None, &out, Some(&artifact)).expect("emits");
    let written = tandem_compiler::run::read_file(&out).expect("reads back");
    let entry = written
        .metadata
        .iter()
        .find(|m| m.name == PLAN_METADATA)
        .expect("plan metadata");
    let plan: serde_json::Value = serde_json::from_slice(&entry.data).expect("JSON");
    assert_eq!(plan["format"], "tandem-plan/1");
    assert_eq!(
        plan["steps"].as_array().expect("steps").len(),
        artifact.steps.len()
    );
    let inputs = seeded_inputs(&graph, SEED);
    let original = interpreter_run(&path, &inputs).expect("interpreter runs the original");
    let annotated = interpreter_run(&out, &inputs).expect("interpreter runs the annotated");
    for (a, o) in annotated.iter().zip(&original) {
        let err = relative_error(&a.to_f32().expect("f32"), &o.to_f32().expect("f32"));
        assert!(err <= 1e-6, "annotated model differs by {err:e}");
    }
}
