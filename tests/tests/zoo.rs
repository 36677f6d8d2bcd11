//! The model zoo: architecture facts (op counts, FLOPs, parameters), agreement with the official
//! interpreter's view of each model, committed references, and the bit-identical round trip.

use std::collections::BTreeMap;
use tandem_compiler::{inspect, tflite};
use tandem_models::{inputs::seeded_inputs, ZooModel, SEED};
use tandem_tests::{
    count_interpreter_ops, interpreter_ops, interpreter_run, read_inputs, read_outputs,
    relative_error, repo_root,
};

fn counts(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
    pairs.iter().map(|&(k, v)| (k.to_string(), v)).collect()
}

/// Op counts of each architecture as published (batch norm folded, no auxiliary heads).
fn expected_op_counts(name: &str) -> BTreeMap<String, usize> {
    let head = [("MEAN", 1), ("FULLY_CONNECTED", 1), ("SOFTMAX", 1)];
    let with_head = |body: &[(&str, usize)]| {
        let mut c = counts(body);
        c.extend(counts(&head));
        c
    };
    match name {
        "tiny_elementwise" => counts(&[
            ("ADD", 2),
            ("SUB", 1),
            ("MUL", 1),
            ("DIV", 1),
            ("LOGISTIC", 1),
            ("TANH", 1),
            ("RELU", 1),
            ("RELU6", 1),
            ("RELU_N1_TO_1", 1),
            ("HARD_SWISH", 1),
            ("LEAKY_RELU", 1),
            ("PRELU", 1),
            ("CONCATENATION", 1),
            ("SOFTMAX", 1),
        ]),
        "tiny_conv" => counts(&[
            ("PAD", 1),
            ("CONV_2D", 2),
            ("DEPTHWISE_CONV_2D", 1),
            ("MAX_POOL_2D", 1),
            ("AVERAGE_POOL_2D", 1),
            ("TRANSPOSE_CONV", 1),
            ("PADV2", 1),
            ("DEPTH_TO_SPACE", 1),
            ("SPACE_TO_DEPTH", 1),
            ("RESIZE_BILINEAR", 1),
            ("RESIZE_NEAREST_NEIGHBOR", 1),
            ("MEAN", 2),
            ("CONCATENATION", 1),
            ("FULLY_CONNECTED", 1),
            ("SOFTMAX", 1),
        ]),
        "tiny_shape" => counts(&[
            ("SHAPE", 1),
            ("STRIDED_SLICE", 2),
            ("PACK", 1),
            ("RESHAPE", 1),
            ("TRANSPOSE", 1),
            ("BATCH_MATMUL", 1),
            ("SPLIT", 1),
            ("SLICE", 1),
            ("CONCATENATION", 1),
            ("SQUEEZE", 1),
        ]),
        "tiny_weights" => counts(&[
            ("DEQUANTIZE", 1),
            ("CONV_2D", 1),
            ("MEAN", 1),
            ("DENSIFY", 1),
            ("FULLY_CONNECTED", 1),
            ("SOFTMAX", 1),
        ]),
        "tiny_transpose_conv_bias" => counts(&[("CUSTOM:Convolution2DTransposeBias", 1)]),
        "mobilenet_v1" => with_head(&[("CONV_2D", 14), ("DEPTHWISE_CONV_2D", 13)]),
        "mobilenet_v2" => with_head(&[("CONV_2D", 35), ("DEPTHWISE_CONV_2D", 17), ("ADD", 10)]),
        "resnet18" => with_head(&[("CONV_2D", 20), ("ADD", 8), ("MAX_POOL_2D", 1)]),
        "resnet34" => with_head(&[("CONV_2D", 36), ("ADD", 16), ("MAX_POOL_2D", 1)]),
        "inception_v3" => with_head(&[
            ("CONV_2D", 94),
            ("AVERAGE_POOL_2D", 9),
            ("MAX_POOL_2D", 4),
            ("CONCATENATION", 15),
        ]),
        "vgg16" => counts(&[
            ("CONV_2D", 13),
            ("MAX_POOL_2D", 5),
            ("RESHAPE", 1),
            ("FULLY_CONNECTED", 3),
            ("SOFTMAX", 1),
        ]),
        other => panic!("no expected op counts for {other}"),
    }
}

/// Published multiply-accumulates (G) and parameters (M) of the evaluation architectures.
fn published_cost(name: &str) -> Option<(f64, f64)> {
    match name {
        "vgg16" => Some((15.47, 138.36)),
        "resnet18" => Some((1.82, 11.69)),
        "resnet34" => Some((3.67, 21.80)),
        "inception_v3" => Some((5.71, 23.83)),
        "mobilenet_v1" => Some((0.569, 4.23)),
        "mobilenet_v2" => Some((0.300, 3.50)),
        _ => None,
    }
}

/// Writes the model, reads it back and checks its report against the architecture; then, where
/// the official interpreter can run it, checks the interpreter sees the same ops, that a read →
/// write round trip gives bit-identical outputs, and that the outputs have the inferred shapes.
fn check_zoo_model(model: ZooModel) {
    let name = model.name;
    let bytes = model.tflite().expect("builds and writes");
    let graph = tflite::read_model(&bytes).expect("reads back");
    let report = inspect::report(&graph).expect("report");
    assert_eq!(
        report.op_counts,
        expected_op_counts(name),
        "{name}: op counts"
    );
    if let Some((gmacs, mparams)) = published_cost(name) {
        let ours = report.total_flops as f64 / 2e9;
        assert!(
            (ours / gmacs - 1.0).abs() < 0.06,
            "{name}: {ours:.3} GMACs, published {gmacs}"
        );
        let params = report.parameters as f64 / 1e6;
        assert!(
            (params / mparams - 1.0).abs() < 0.03,
            "{name}: {params:.2} M parameters, published {mparams}"
        );
    }

    let dir = tempfile::tempdir().expect("tempdir");
    let original = dir.path().join("original.tflite");
    std::fs::write(&original, &bytes).expect("write");
    let ops = interpreter_ops(&original).expect("interpreter lists ops");
    assert_eq!(
        count_interpreter_ops(&ops),
        report.op_counts,
        "{name}: interpreter op list"
    );
    if !model.runs_in_interpreter {
        return;
    }
    let rewritten = dir.path().join("rewritten.tflite");
    std::fs::write(&rewritten, tflite::write_model(&graph).expect("rewrites")).expect("write");
    let inputs = seeded_inputs(&graph, SEED);
    let a = interpreter_run(&original, &inputs).expect("original runs");
    let b = interpreter_run(&rewritten, &inputs).expect("round-tripped model runs");
    assert_eq!(a.len(), graph.outputs.len());
    for (i, (a, b)) in a.iter().zip(&b).enumerate() {
        assert_eq!(
            a.shape,
            graph.tensor(graph.outputs[i]).shape,
            "{name}: output {i} shape"
        );
        assert!(
            a.data == b.data,
            "{name}: output {i} differs after the round trip"
        );
        let values = a.to_f32().expect("f32 output");
        assert!(
            values.iter().all(|v| v.is_finite()),
            "{name}: non-finite outputs"
        );
    }
}

macro_rules! zoo_tests {
    ($($name:ident),* $(,)?) => {$(
        #[test]
        fn $name() {
            check_zoo_model(tandem_models::by_name(stringify!($name)).expect("in the zoo"));
        }
    )*};
}

zoo_tests!(
    tiny_elementwise,
    tiny_conv,
    tiny_shape,
    tiny_weights,
    tiny_transpose_conv_bias,
    mobilenet_v1,
    mobilenet_v2,
    resnet18,
    resnet34,
    inception_v3,
    vgg16,
);

#[test]
fn zoo_covers_every_operator_the_reader_understands() {
    let required = [
        "ADD",
        "SUB",
        "MUL",
        "DIV",
        "AVERAGE_POOL_2D",
        "MAX_POOL_2D",
        "CONCATENATION",
        "CONV_2D",
        "DEPTHWISE_CONV_2D",
        "TRANSPOSE_CONV",
        "FULLY_CONNECTED",
        "BATCH_MATMUL",
        "DEQUANTIZE",
        "DENSIFY",
        "PAD",
        "PADV2",
        "MEAN",
        "RESHAPE",
        "SQUEEZE",
        "SHAPE",
        "PACK",
        "STRIDED_SLICE",
        "SLICE",
        "SPLIT",
        "TRANSPOSE",
        "SOFTMAX",
        "LOGISTIC",
        "TANH",
        "RELU",
        "RELU6",
        "RELU_N1_TO_1",
        "LEAKY_RELU",
        "PRELU",
        "HARD_SWISH",
        "RESIZE_BILINEAR",
        "RESIZE_NEAREST_NEIGHBOR",
        "DEPTH_TO_SPACE",
        "SPACE_TO_DEPTH",
        "CUSTOM:Convolution2DTransposeBias",
    ];
    let mut seen = std::collections::BTreeSet::new();
    for model in tandem_models::all().iter().filter(|m| m.small) {
        let graph = model.graph().expect("builds");
        let report = inspect::report(&graph).expect("report");
        seen.extend(report.op_counts.into_keys());
    }
    let missing: Vec<_> = required.iter().filter(|op| !seen.contains(**op)).collect();
    assert!(missing.is_empty(), "no small zoo model uses {missing:?}");
}

#[test]
fn zoo_is_deterministic() {
    let model = tandem_models::by_name("tiny_conv").expect("in the zoo");
    assert_eq!(
        model.tflite().expect("builds"),
        model.tflite().expect("builds")
    );
}

#[test]
fn small_models_match_committed_interpreter_references() {
    let mut checked = 0;
    for model in tandem_models::all()
        .into_iter()
        .filter(|m| m.small && m.runs_in_interpreter)
    {
        let dir = repo_root().join("models/refs").join(model.name);
        let inputs = read_inputs(&dir).expect("committed inputs");
        let expected = read_outputs(&dir).expect("committed outputs");
        assert!(
            !inputs.is_empty() && !expected.is_empty(),
            "{}: no committed references in {}",
            model.name,
            dir.display()
        );
        let graph = model.graph().expect("builds");
        assert_eq!(
            inputs,
            seeded_inputs(&graph, SEED),
            "{}: committed input is not the seeded input",
            model.name
        );
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("model.tflite");
        std::fs::write(&path, model.tflite().expect("writes")).expect("write");
        let actual = interpreter_run(&path, &inputs).expect("runs");
        for (a, e) in actual.iter().zip(&expected) {
            let err = relative_error(&a.to_f32().expect("f32"), &e.to_f32().expect("f32"));
            assert!(
                err <= 1e-6,
                "{}: differs from its committed reference by {err}",
                model.name
            );
        }
        checked += 1;
    }
    assert_eq!(checked, 6);
}
