//! `tandem dispatch` over the whole zoo: every model on every built-in GPU in both precisions,
//! read back from its `.tflite` bytes as the command reads it, with the records checked for
//! consistency and a few counts worked out from the spec's rules.

use tandem_compiler::dispatch::cli::render_table;
use tandem_compiler::dispatch::features::{tflite_gpu_features, FEATURE_NAMES};
use tandem_compiler::dispatch::tflite_gpu::{
    builtin, dispatch_graph, Fate, Gpu, Kernel, OpDispatch, Precision, Target,
};
use tandem_compiler::ir::Graph;
use tandem_compiler::tflite;

fn read_back(model: &tandem_models::ZooModel) -> Graph {
    let bytes = model.tflite().expect("builds and writes");
    tflite::read_model(&bytes).expect("reads back")
}

fn check_records(context: &str, graph: &Graph, target: &Target, ops: &[OpDispatch]) {
    assert_eq!(ops.len(), graph.dag.node_count(), "{context}");
    for (i, op) in ops.iter().enumerate() {
        let at = format!("{context}: op #{i} {}", op.op);
        assert_eq!(op.op_index, i, "{at}");
        assert_eq!(op.fate == Fate::Dispatched, !op.kernels.is_empty(), "{at}");
        match op.fate {
            Fate::FusedInto | Fate::MergedInto | Fate::FoldedInto => {
                let into = op.into.expect("target op");
                assert_eq!(ops[into].fate, Fate::Dispatched, "{at}");
                assert!(ops[into].absorbed.contains(&i), "{at}");
            }
            _ => assert_eq!(op.into, None, "{at}"),
        }
        for k in &op.kernels {
            let kat = format!("{at}: {}", k.name.name());
            assert!(k.grid.iter().all(|&g| g >= 1), "{kat}: {k:?}");
            assert!(k.work_group.iter().all(|&w| w >= 1), "{kat}: {k:?}");
            assert!(k.work_group_size() <= target.kernel_max_wg, "{kat}: {k:?}");
            for d in 0..3 {
                assert_eq!(k.global[d], k.groups[d] * k.work_group[d], "{kat}: {k:?}");
            }
            let grid: usize = k.grid.iter().product();
            assert!(k.total_threads() >= grid, "{kat}: {k:?}");
        }
        let f = tflite_gpu_features(op);
        assert_eq!(f.source.label(), "tflite_gpu");
        assert_eq!(f.values.len(), FEATURE_NAMES.len());
        assert!(f.values.iter().all(|v| v.is_finite() && *v >= 0.0), "{at}");
    }
}

#[test]
fn every_zoo_model_on_every_builtin_gpu() {
    for model in tandem_models::all() {
        let graph = read_back(&model);
        for b in &builtin::BUILTINS {
            for precision in [Precision::F16, Precision::F32] {
                let target = Target::new(Gpu::builtin(b.id).expect("built-in"), Some(precision));
                let context = format!("{} on {} {precision}", model.name, b.id);
                let ops =
                    dispatch_graph(&graph, &target).unwrap_or_else(|e| panic!("{context}: {e:#}"));
                check_records(&context, &graph, &target, &ops);
                let table = render_table(&target, Some(precision), &ops);
                assert!(table.contains("total:"), "{context}");
                serde_json::to_string(&ops).expect("JSON");
                let rejected: Vec<&OpDispatch> =
                    ops.iter().filter(|o| o.fate == Fate::Rejected).collect();
                if model.name == "tiny_shape" {
                    // Its BATCH_MATMUL has a constant 3-D right-hand side, which the delegate's
                    // parser refuses.
                    assert_eq!(rejected.len(), 1, "{context}");
                    assert_eq!(rejected[0].op, "BATCH_MATMUL");
                } else {
                    assert!(rejected.is_empty(), "{context}: {rejected:#?}");
                }
            }
        }
    }
}

fn winograd_convs(ops: &[OpDispatch]) -> usize {
    ops.iter()
        .filter(|o| {
            o.kernels
                .iter()
                .any(|k| k.name == Kernel::Winograd4x4To36TileX6)
        })
        .count()
}

#[test]
fn vgg16_winograd_counts_follow_the_thresholds() {
    let model = tandem_models::by_name("vgg16").expect("vgg16");
    let graph = read_back(&model);
    // Adreno 6xx needs 32 slices in and out and 128 tiles: 112x112 128->128 and the four 56x56
    // convs... of which 128->256 and 256->256 x2 qualify, so 1 + 3 = 4. 28x28 has 49 tiles.
    let t = Target::new(
        Gpu::builtin("adreno-640").expect("gpu"),
        Some(Precision::F16),
    );
    assert_eq!(
        winograd_convs(&dispatch_graph(&graph, &t).expect("dispatch")),
        4
    );
    // Adreno 7xx: 64 tiles; 28x28 still has only 49, so also 4.
    let t = Target::new(
        Gpu::builtin("adreno-740").expect("gpu"),
        Some(Precision::F16),
    );
    assert_eq!(
        winograd_convs(&dispatch_graph(&graph, &t).expect("dispatch")),
        4
    );
    // Mali: 16 slices and 32 tiles: 224x224 64->64, 112x112 x2, 56x56 x3, 28x28 x3 = 9; the
    // 3-channel stem and the 14x14 convs (16 tiles) do not qualify.
    let t = Target::new(
        Gpu::builtin("mali-g76-mp10").expect("gpu"),
        Some(Precision::F16),
    );
    assert_eq!(
        winograd_convs(&dispatch_graph(&graph, &t).expect("dispatch")),
        9
    );
}

#[test]
fn mobilenet_v2_stem_and_blocks_on_adreno_640() {
    let model = tandem_models::by_name("mobilenet_v2").expect("mobilenet_v2");
    let graph = read_back(&model);
    let t = Target::new(
        Gpu::builtin("adreno-640").expect("gpu"),
        Some(Precision::F16),
    );
    let ops = dispatch_graph(&graph, &t).expect("dispatch");
    // Stem: 3x3 s2 3 -> 32 on 224x224: 3*4*8*9*2 = 1728 B -> ConvConstants, grid (112,112,1),
    // generic picker (wz 1, xy 1024, wx 56, wy 18), count (2, 7, 1).
    let stem = &ops[0].kernels[0];
    assert_eq!(stem.name, Kernel::ConvConstants);
    assert_eq!(
        (stem.grid, stem.work_group, stem.groups),
        ([112, 112, 1], [56, 18, 1], [2, 7, 1])
    );
    // Every stride-1 3x3 depthwise conv with SAME padding is DepthwiseConv3x3; stride 2 is not.
    for op in ops.iter().filter(|o| o.op == "DEPTHWISE_CONV_2D") {
        assert_eq!(op.kernels.len(), 1);
        let stride_1 = op.output[1] == graph_input_hw(&graph, op.op_index);
        let expected = if stride_1 {
            Kernel::DepthwiseConv3x3
        } else {
            Kernel::DepthwiseConv
        };
        assert_eq!(op.kernels[0].name, expected, "op #{}", op.op_index);
    }
    // Residual ADDs take the projection conv's output as input #0 and the block input (computed
    // earlier) as input #1, so every one is linked into its conv.
    let adds: Vec<&OpDispatch> = ops.iter().filter(|o| o.op == "ADD").collect();
    assert_eq!(adds.len(), 10);
    assert!(adds.iter().all(|a| a.fate == Fate::FusedInto), "{adds:#?}");
}

/// Height of the first input of op `index` (execution order).
fn graph_input_hw(graph: &Graph, index: usize) -> usize {
    let order = graph.execution_order().expect("order");
    graph
        .input(order[index], 0)
        .map(|t| t.shape[1])
        .expect("input")
}
