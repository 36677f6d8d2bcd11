//! Converter-produced fixtures: the reader sees what the official interpreter sees, special
//! weight storage (fp16, sparse), custom ops and int8 models inspect correctly, and float
//! fixtures survive a read → write round trip bit for bit.

use std::path::{Path, PathBuf};
use tandem_compiler::ir::Op;
use tandem_compiler::{inspect, tflite};
use tandem_runtime::DType;
use tandem_tests::{
    count_interpreter_ops, fixtures, interpreter_ops, interpreter_run, read_inputs, read_outputs,
    relative_error, repo_root,
};

fn fixture(name: &str) -> PathBuf {
    repo_root()
        .join("models/fixtures")
        .join(format!("{name}.tflite"))
}

fn read(path: &Path) -> tandem_compiler::ir::Graph {
    tflite::read_model(&std::fs::read(path).expect("fixture exists")).expect("fixture reads")
}

#[test]
fn every_fixture_has_the_interpreters_op_counts() {
    let all = fixtures();
    assert!(all.len() >= 6, "fixtures missing: {all:?}");
    for path in all {
        let report = inspect::report(&read(&path)).expect("report");
        let ops = interpreter_ops(&path).expect("interpreter lists ops");
        assert_eq!(
            report.op_counts,
            count_interpreter_ops(&ops),
            "{}",
            path.display()
        );
        assert_eq!(report.ops.len(), ops.len());
    }
}

#[test]
fn fp16_weights_sit_behind_dequantize() {
    let graph = read(&fixture("mobile_block_fp16"));
    let dequantized: Vec<_> = graph
        .dag
        .node_indices()
        .filter(|&n| graph.dag[n].op == Op::Dequantize)
        .map(|n| graph.input(n, 0).expect("input"))
        .collect();
    assert!(dequantized.len() >= 5);
    assert!(dequantized
        .iter()
        .all(|t| t.dtype == DType::F16 && t.data.is_some()));
    let report = inspect::report(&graph).expect("report");
    for op in [
        "PRELU",
        "PAD",
        "RESIZE_BILINEAR",
        "HARD_SWISH",
        "DEPTHWISE_CONV_2D",
    ] {
        assert!(
            report.op_counts.contains_key(op),
            "converter fixture lacks {op}"
        );
    }
}

#[test]
fn sparse_weights_sit_behind_densify() {
    let graph = read(&fixture("sparse_fc"));
    let densify = graph
        .dag
        .node_indices()
        .find(|&n| graph.dag[n].op == Op::Densify)
        .expect("DENSIFY");
    let sparse = graph.input(densify, 0).expect("input");
    let sparsity = sparse.sparsity.as_ref().expect("sparse tensor");
    assert_eq!(sparse.shape, vec![32, 64]);
    assert!(!sparsity.dims.is_empty());
    // The stored values are fewer than the dense elements.
    assert!(sparse.data.as_ref().expect("data").len() < sparse.size_bytes());
}

#[test]
fn custom_ops_are_kept_by_name() {
    let graph = read(&fixture("custom_op"));
    let report = inspect::report(&graph).expect("report");
    assert_eq!(report.op_counts.get("CUSTOM:BesselK1e"), Some(&1));
    // Custom ops survive writing, options included.
    let again = tflite::read_model(&tflite::write_model(&graph).expect("writes")).expect("reads");
    let custom = |g: &tandem_compiler::ir::Graph| {
        g.dag
            .node_weights()
            .find(|n| matches!(n.op, Op::Custom { .. }))
            .map(|n| n.op.clone())
    };
    assert_eq!(custom(&graph), custom(&again));
    assert_eq!(
        inspect::report(&again).expect("report").op_counts,
        report.op_counts
    );
}

#[test]
fn int8_models_inspect_with_their_types() {
    let graph = read(&fixture("conv_int8"));
    let report = inspect::report(&graph).expect("report");
    assert_eq!(report.op_counts.get("QUANTIZE"), Some(&1));
    assert_eq!(report.op_counts.get("CONV_2D"), Some(&1));
    let conv = graph
        .dag
        .node_indices()
        .find(|&n| matches!(graph.dag[n].op, Op::Conv2d(_)))
        .expect("conv");
    let weights = graph.input(conv, 1).expect("weights");
    assert_eq!(weights.dtype, DType::I8);
    assert!(weights
        .quantization
        .as_ref()
        .is_some_and(|q| !q.scale.is_empty()));
    assert!(report.ops[1].flops > 0);
}

#[test]
fn dynamic_batch_shape_arithmetic_is_inferred() {
    let graph = read(&fixture("dynamic_batch"));
    let input = graph.tensor(graph.inputs[0]);
    assert_eq!(input.shape_signature.as_deref(), Some(&[-1, 8, 8, 4][..]));
    let reshape = graph
        .dag
        .node_indices()
        .find(|&n| matches!(graph.dag[n].op, Op::Reshape { .. }))
        .expect("reshape");
    // SHAPE → STRIDED_SLICE → PACK gives [1, -1]: the RESHAPE output is [1, 384] although the
    // file declares a placeholder [1, 1].
    assert_eq!(
        graph.tensor(graph.dag[reshape].outputs[0]).shape,
        vec![1, 384]
    );
}

#[test]
fn float_fixtures_round_trip_bit_identically_and_match_references() {
    for name in [
        "mobile_block_fp16",
        "mobile_block_fp32",
        "sparse_fc",
        "dynamic_batch",
    ] {
        let path = fixture(name);
        let refs = repo_root().join("models/fixtures/refs").join(name);
        let inputs = read_inputs(&refs).expect("committed inputs");
        let expected = read_outputs(&refs).expect("committed outputs");
        assert!(
            !inputs.is_empty() && !expected.is_empty(),
            "{name}: no committed references"
        );
        let original = interpreter_run(&path, &inputs).expect("runs");
        for (a, e) in original.iter().zip(&expected) {
            let err = relative_error(&a.to_f32().expect("f32"), &e.to_f32().expect("f32"));
            assert!(
                err <= 1e-6,
                "{name}: differs from its committed reference by {err}"
            );
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let rewritten = dir.path().join("rewritten.tflite");
        std::fs::write(
            &rewritten,
            tflite::write_model(&read(&path)).expect("writes"),
        )
        .expect("write");
        let again = interpreter_run(&rewritten, &inputs).expect("rewritten runs");
        assert_eq!(original.len(), again.len());
        for (a, b) in original.iter().zip(&again) {
            assert!(
                a.data == b.data && a.shape == b.shape,
                "{name}: outputs differ after the round trip"
            );
        }
    }
}
