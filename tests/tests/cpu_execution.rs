//! CPU execution end to end: every zoo model and fixture, compiled and run by tandem, equals the
//! official interpreter within 1e-4 relative (max |ours − ref| / max |ref|).

use std::path::Path;
use tandem_compiler::ir::builder::GraphBuilder;
use tandem_compiler::ir::op::TransposeConv;
use tandem_compiler::ir::{Activation, Graph, Op, Padding};
use tandem_compiler::lower::{compile, CompileOptions};
use tandem_compiler::tflite;
use tandem_models::{inputs::seeded_inputs, SEED};
use tandem_runtime::artifact::Artifact;
use tandem_runtime::npy::NpyArray;
use tandem_runtime::session::{Model, Session};
use tandem_runtime::DType;
use tandem_tests::{interpreter_run, read_inputs, read_outputs, relative_error, repo_root};

const TOLERANCE: f32 = 1e-4;

fn options(name: &str) -> CompileOptions {
    CompileOptions {
        threads: 1,
        model_name: name.to_string(),
        ..Default::default()
    }
}

/// Compiles, encodes, decodes (as a file would be) and runs `graph` with `threads` threads.
fn run_tandem(graph: Graph, inputs: &[NpyArray], threads: usize) -> Vec<NpyArray> {
    let artifact = compile(graph, &options("test")).expect("compiles");
    let model = Model::load(&artifact.encode().expect("encodes")).expect("loads");
    Session::new(&model, threads).run(inputs).expect("runs")
}

fn assert_close(name: &str, ours: &[NpyArray], reference: &[NpyArray]) {
    assert_eq!(ours.len(), reference.len(), "{name}: output count");
    for (i, (a, r)) in ours.iter().zip(reference).enumerate() {
        assert_eq!(a.shape, r.shape, "{name}: output {i} shape");
        let err = relative_error(&a.to_f32().expect("f32"), &r.to_f32().expect("f32"));
        assert!(
            err <= TOLERANCE,
            "{name}: output {i} differs from the official interpreter by {err:e}"
        );
    }
}

#[test]
fn small_zoo_models_match_committed_references() {
    for model in tandem_models::all()
        .into_iter()
        .filter(|m| m.small && m.runs_in_interpreter)
    {
        let dir = repo_root().join("models/refs").join(model.name);
        let inputs = read_inputs(&dir).expect("inputs");
        let expected = read_outputs(&dir).expect("outputs");
        for threads in [1, 2] {
            assert_close(
                model.name,
                &run_tandem(model.graph().expect("builds"), &inputs, threads),
                &expected,
            );
        }
    }
}

#[test]
fn float_fixtures_match_committed_references() {
    for name in [
        "mobile_block_fp16",
        "mobile_block_fp32",
        "sparse_fc",
        "dynamic_batch",
    ] {
        let bytes = std::fs::read(
            repo_root()
                .join("models/fixtures")
                .join(format!("{name}.tflite")),
        )
        .expect("fixture");
        let dir = repo_root().join("models/fixtures/refs").join(name);
        let inputs = read_inputs(&dir).expect("inputs");
        let expected = read_outputs(&dir).expect("outputs");
        assert_close(
            name,
            &run_tandem(tflite::read_model(&bytes).expect("reads"), &inputs, 1),
            &expected,
        );
    }
}

/// The large models have no committed references: the interpreter runs live.
fn check_large(name: &str) {
    let model = tandem_models::by_name(name).expect("in the zoo");
    let graph = model.graph().expect("builds");
    let inputs = seeded_inputs(&graph, SEED);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("model.tflite");
    std::fs::write(&path, tflite::write_model(&graph).expect("writes")).expect("write");
    let reference = interpreter_run(&path, &inputs).expect("interpreter runs");
    assert_close(name, &run_tandem(graph, &inputs, 2), &reference);
}

#[test]
fn resnet18_matches_interpreter() {
    check_large("resnet18");
}

#[test]
fn resnet34_matches_interpreter() {
    check_large("resnet34");
}

#[test]
fn inception_v3_matches_interpreter() {
    check_large("inception_v3");
}

#[test]
fn vgg16_matches_interpreter() {
    check_large("vgg16");
}

#[test]
fn transpose_conv_bias_custom_op_matches_the_builtin_it_stands_for() {
    // Convolution2DTransposeBias equals TRANSPOSE_CONV (with bias) of the same output size, which
    // the official interpreter runs.
    let custom = tandem_models::by_name("tiny_transpose_conv_bias")
        .expect("in the zoo")
        .graph()
        .expect("builds");
    let node = custom.dag.node_indices().next().expect("one node");
    let (x, w, b) = (
        custom.input(node, 0).expect("x"),
        custom.input(node, 1).expect("w"),
        custom.input(node, 2).expect("b"),
    );
    let mut builder = GraphBuilder::new();
    let input = builder.input("input", DType::F32, &x.shape);
    let weights = builder.const_f32("w", &w.shape, &w.f32_values().expect("f32"));
    let bias = builder.const_f32("b", &b.shape, &b.f32_values().expect("f32"));
    let out_shape: Vec<i32> = custom
        .tensor(custom.outputs[0])
        .shape
        .iter()
        .map(|&d| d as i32)
        .collect();
    let shape = builder.const_i32("output_shape", &[4], &out_shape);
    let attrs = TransposeConv {
        padding: Padding::Same,
        stride: [2, 2],
        activation: Activation::None,
    };
    let y = builder
        .op1(Op::TransposeConv(attrs), &[shape, weights, input, bias])
        .expect("builds");
    builder.output(y);
    let builtin = builder.finish("builtin");
    let inputs = seeded_inputs(&custom, SEED);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("builtin.tflite");
    std::fs::write(&path, tflite::write_model(&builtin).expect("writes")).expect("write");
    let reference = interpreter_run(&path, &inputs).expect("interpreter runs");
    assert_close(
        "tiny_transpose_conv_bias",
        &run_tandem(custom, &inputs, 1),
        &reference,
    );
}

fn compile_error(path: &Path) -> String {
    let graph = tflite::read_model(&std::fs::read(path).expect("fixture")).expect("reads");
    format!(
        "{:#}",
        compile(graph, &options("x")).expect_err("must not compile")
    )
}

#[test]
fn quantized_models_are_rejected_naming_a_tensor() {
    let e = compile_error(&repo_root().join("models/fixtures/conv_int8.tflite"));
    assert!(
        e.contains("quantized models are not supported yet") && e.contains("tensor"),
        "{e}"
    );
}

#[test]
fn ops_without_kernels_are_compile_errors_naming_op_and_node() {
    let e = compile_error(&repo_root().join("models/fixtures/custom_op.tflite"));
    assert!(
        e.contains("operator") && (e.contains("ABS") || e.contains("BesselK1e")),
        "{e}"
    );
}

#[test]
fn artifacts_round_trip_and_reject_corruption() {
    let graph = tandem_models::by_name("tiny_conv")
        .expect("zoo")
        .graph()
        .expect("builds");
    let artifact = compile(graph, &options("tiny_conv")).expect("compiles");
    let bytes = artifact.encode().expect("encodes");
    assert_eq!(Artifact::decode(&bytes).expect("decodes"), artifact);
    // Every truncation and every single-byte corruption is an error, never a panic.
    assert_eq!(Artifact::read_from(&bytes[..]).expect("streams"), artifact);
    for len in (0..200).chain((200..bytes.len()).step_by(11)) {
        assert!(
            Artifact::decode(&bytes[..len]).is_err(),
            "prefix of {len} bytes accepted"
        );
        assert!(
            Artifact::read_from(&bytes[..len]).is_err(),
            "streamed prefix of {len} bytes accepted"
        );
    }
    for pos in (0..bytes.len()).step_by(7) {
        let mut bad = bytes.clone();
        bad[pos] ^= 0x5a;
        assert!(
            Artifact::decode(&bad).is_err(),
            "corruption at {pos} accepted"
        );
        assert!(
            Artifact::read_from(&bad[..]).is_err(),
            "streamed corruption at {pos} accepted"
        );
    }
    // A payload that decodes but breaks an invariant names it.
    let mut broken = artifact.clone();
    broken.steps[1].inputs[0] = Some(9999);
    let e = Artifact::decode(&broken.encode().expect("encodes")).expect_err("invalid");
    assert!(
        e.to_string().contains("step 1") && e.to_string().contains("tensor 9999"),
        "{e}"
    );
    let mut overlap = artifact;
    let out = overlap.steps[2].outputs[0];
    let input = overlap.steps[2].inputs[0].expect("input");
    overlap.tensors[out].storage = overlap.tensors[input].storage.clone();
    let e = Artifact::decode(&overlap.encode().expect("encodes")).expect_err("invalid");
    assert!(e.to_string().contains("overlaps"), "{e}");
}

#[test]
fn wrong_input_shapes_name_the_input_and_both_shapes() {
    let graph = tandem_models::by_name("tiny_conv")
        .expect("zoo")
        .graph()
        .expect("builds");
    let model = Model::from_artifact(compile(graph, &options("tiny_conv")).expect("compiles"));
    let bad = NpyArray::from_f32(vec![1, 16, 16, 7], &vec![0.0; 16 * 16 * 7]);
    let e = Session::new(&model, 1)
        .run(&[bad])
        .expect_err("wrong shape")
        .to_string();
    assert!(
        e.contains("input 0 'input'")
            && e.contains("[1, 16, 16, 8]")
            && e.contains("[1, 16, 16, 7]"),
        "{e}"
    );
}
