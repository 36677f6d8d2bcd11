//! Diagonalwise refactorization end to end: a depthwise convolution rewritten as a block-diagonal
//! (grouped) CONV_2D gives the native depthwise outputs within 1e-5 relative on tandem's CPU
//! runtime, and in the official interpreter when written back as a `.tflite`.

use tandem_compiler::ir::builder::GraphBuilder;
use tandem_compiler::ir::op::DepthwiseConv2d;
use tandem_compiler::ir::{Activation, Graph, Op, Padding};
use tandem_compiler::lower::{compile, CompileOptions};
use tandem_compiler::passes::{self, RefactorDepthwise};
use tandem_compiler::tflite;
use tandem_models::{inputs::seeded_inputs, SEED};
use tandem_runtime::artifact::{Artifact, Kernel};
use tandem_runtime::npy::NpyArray;
use tandem_runtime::rng::Rng;
use tandem_runtime::session::{Model, Session};
use tandem_runtime::DType;
use tandem_tests::{interpreter_ops, interpreter_run, relative_error};

const TOLERANCE: f32 = 1e-5;

fn compile_with(graph: Graph, mode: RefactorDepthwise) -> anyhow::Result<Artifact> {
    compile(
        graph,
        &CompileOptions {
            plan: Default::default(),
            gpu: None,
            threads: 1,
            model_name: "diagonalwise".into(),
            refactor_depthwise: mode,
            depthwise_forms: None,
        },
    )
}

fn run(artifact: Artifact, inputs: &[NpyArray], threads: usize) -> Vec<Vec<f32>> {
    let model = Model::load(&artifact.encode().expect("encodes")).expect("loads");
    Session::new(&model, threads)
        .run(inputs)
        .expect("runs")
        .iter()
        .map(|o| o.to_f32().expect("f32"))
        .collect()
}

/// (depthwise steps, conv steps whose group size is `group`) of an artifact.
fn kernels(artifact: &Artifact, group: usize) -> (usize, usize) {
    let dw = artifact
        .steps
        .iter()
        .filter(|s| matches!(s.kernel, Kernel::DepthwiseConv2d(_)))
        .count();
    let conv = artifact
        .steps
        .iter()
        .filter(|s| matches!(&s.kernel, Kernel::Conv2d(p) if p.group_in() == group && p.kernel == [3, 3]))
        .count();
    (dw, conv)
}

/// One depthwise layer (3×3 filter, seeded weights, optional bias, ReLU6) over `[1, 11, 9, c]`.
struct Layer {
    c: usize,
    m: usize,
    stride: usize,
    padding: Padding,
    dilation: usize,
    bias: bool,
}

impl Layer {
    fn graph(&self) -> Graph {
        let mut rng = Rng::new(SEED ^ (self.c * 131 + self.m * 7 + self.stride) as u64);
        let mut b = GraphBuilder::new();
        let x = b.input("x", DType::F32, &[1, 11, 9, self.c]);
        let cm = self.c * self.m;
        let w = b.const_f32("w", &[1, 3, 3, cm], &rng.uniform(9 * cm, 1.0));
        let mut inputs = vec![Some(x), Some(w)];
        // Without bias the slot is present but omitted (-1). The official interpreter (2.3.0)
        // rejects that and crashes on a two-input DEPTHWISE_CONV_2D; tandem accepts both.
        inputs.push(
            self.bias
                .then(|| b.const_f32("b", &[cm], &rng.uniform(cm, 0.5))),
        );
        let y = b
            .op(
                Op::DepthwiseConv2d(DepthwiseConv2d {
                    padding: self.padding,
                    stride: [self.stride; 2],
                    dilation: [self.dilation; 2],
                    depth_multiplier: self.m,
                    activation: Activation::Relu6,
                }),
                &inputs,
                1,
            )
            .expect("builds")[0];
        b.output(y);
        b.finish("one depthwise layer")
    }
}

fn layers() -> Vec<Layer> {
    let mut layers = Vec::new();
    for m in [1, 2] {
        for stride in [1, 2] {
            for padding in [Padding::Same, Padding::Valid] {
                for dilation in [1, 2] {
                    layers.push(Layer {
                        c: 16,
                        m,
                        stride,
                        padding,
                        dilation,
                        bias: (stride + dilation) % 2 == 0,
                    });
                }
            }
        }
    }
    layers
}

#[test]
fn single_layers_match_native_for_every_group_size() {
    for layer in layers() {
        let graph = layer.graph();
        let inputs = seeded_inputs(&graph, SEED);
        let native = compile_with(graph.clone(), RefactorDepthwise::Off).expect("compiles");
        assert_eq!(kernels(&native, 1), (1, 0));
        let want = run(native, &inputs, 1);
        for (mode, group) in [
            (RefactorDepthwise::Group(2), 2),
            (RefactorDepthwise::Group(4), 4),
            (RefactorDepthwise::Group(8), 8),
            (RefactorDepthwise::Group(16), 16),
            (RefactorDepthwise::Full, 16),
        ] {
            let artifact = compile_with(graph.clone(), mode).expect("compiles");
            assert_eq!(kernels(&artifact, group), (0, 1), "mode {mode}");
            for threads in [1, 2] {
                let got = run(artifact.clone(), &inputs, threads);
                let err = relative_error(&got[0], &want[0]);
                assert!(
                    err <= TOLERANCE,
                    "C {} M {} stride {} {:?} dilation {} bias {}, mode {mode}, {threads} threads: \
                     relative error {err:e}",
                    layer.c,
                    layer.m,
                    layer.stride,
                    layer.padding,
                    layer.dilation,
                    layer.bias
                );
            }
        }
    }
}

#[test]
fn an_odd_group_size_matches_native() {
    let layer = Layer {
        c: 12,
        m: 2,
        stride: 2,
        padding: Padding::Same,
        dilation: 1,
        bias: true,
    };
    let graph = layer.graph();
    let inputs = seeded_inputs(&graph, SEED);
    let want = run(
        compile_with(graph.clone(), RefactorDepthwise::Off).expect("compiles"),
        &inputs,
        1,
    );
    let artifact = compile_with(graph, RefactorDepthwise::Group(3)).expect("compiles");
    assert_eq!(kernels(&artifact, 3), (0, 1));
    let err = relative_error(&run(artifact, &inputs, 1)[0], &want[0]);
    assert!(err <= TOLERANCE, "relative error {err:e}");
}

#[test]
fn mobilenets_match_native_with_full_and_grouped_refactorization() {
    for name in ["mobilenet_v1", "mobilenet_v2"] {
        let graph = tandem_models::by_name(name)
            .expect("zoo model")
            .graph()
            .expect("builds");
        let depthwise = graph
            .dag
            .node_weights()
            .filter(|n| matches!(n.op, Op::DepthwiseConv2d(_)))
            .count();
        let inputs = seeded_inputs(&graph, SEED);
        let native = compile_with(graph.clone(), RefactorDepthwise::Auto).expect("compiles");
        assert_eq!(
            kernels(&native, 0).0,
            depthwise,
            "{name}: auto keeps native"
        );
        let want = run(native, &inputs, 2);
        for mode in [RefactorDepthwise::Full, RefactorDepthwise::Group(8)] {
            let artifact = compile_with(graph.clone(), mode).expect("compiles");
            assert_eq!(
                kernels(&artifact, 0).0,
                0,
                "{name} {mode}: no depthwise left"
            );
            if mode == RefactorDepthwise::Group(8) {
                assert_eq!(kernels(&artifact, 8).1, depthwise, "{name}: grouped convs");
            }
            let err = relative_error(&run(artifact, &inputs, 2)[0], &want[0]);
            assert!(err <= TOLERANCE, "{name} {mode}: relative error {err:e}");
        }
    }
}

#[test]
fn a_group_size_that_does_not_divide_a_layer_is_an_error_naming_it() {
    let graph = tandem_models::by_name("mobilenet_v2")
        .expect("zoo model")
        .graph()
        .expect("builds");
    // 64 divides 192, 384, 576 and 960 channels, but not the first block's 32.
    let err = compile_with(graph, RefactorDepthwise::Group(64)).expect_err("must fail");
    let text = format!("{err:#}");
    assert!(
        text.contains("DEPTHWISE_CONV_2D, output '")
            && text.contains("group size 64 does not divide the 32 input channels"),
        "{text}"
    );
}

/// Writes the prepared and refactorized graph, as `tandem compile --emit-tflite` does.
fn emit(
    graph: &Graph,
    mode: RefactorDepthwise,
    dir: &std::path::Path,
    name: &str,
) -> std::path::PathBuf {
    let mut graph = graph.clone();
    passes::prepare(&mut graph).expect("prepares");
    passes::refactor_depthwise(&mut graph, mode).expect("refactorizes");
    let path = dir.join(format!("{name}.tflite"));
    std::fs::write(&path, tflite::write_model(&graph).expect("writes")).expect("saves");
    path
}

#[test]
fn the_official_interpreter_runs_emitted_grouped_and_dense_convolutions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cases: Vec<(String, Graph)> = vec![(
        "mobilenet_v1".into(),
        tandem_models::by_name("mobilenet_v1")
            .expect("zoo model")
            .graph()
            .expect("builds"),
    )];
    for (i, mut layer) in layers().into_iter().enumerate().step_by(3) {
        // The interpreter requires a depthwise bias (see `Layer::graph`).
        layer.bias = true;
        cases.push((format!("layer{i}"), layer.graph()));
    }
    for (name, graph) in cases {
        let inputs = seeded_inputs(&graph, SEED);
        let original = dir.path().join(format!("{name}_original.tflite"));
        std::fs::write(&original, tflite::write_model(&graph).expect("writes")).expect("saves");
        let want = interpreter_run(&original, &inputs).expect("interpreter runs the original");
        let want = want[0].to_f32().expect("f32");
        for (mode, tag) in [
            (RefactorDepthwise::Full, "full"),
            (RefactorDepthwise::Group(8), "g8"),
            (RefactorDepthwise::Group(4), "g4"),
        ] {
            let path = emit(&graph, mode, dir.path(), &format!("{name}_{tag}"));
            let ops = interpreter_ops(&path).expect("interpreter loads it");
            assert!(
                !ops.iter().any(|o| o == "DEPTHWISE_CONV_2D"),
                "{name} {mode}: {ops:?}"
            );
            let got = interpreter_run(&path, &inputs).expect("interpreter runs it");
            let err = relative_error(&got[0].to_f32().expect("f32"), &want);
            assert!(
                err <= TOLERANCE,
                "{name} {mode}: the interpreter's outputs differ by {err:e}"
            );
        }
    }
}
