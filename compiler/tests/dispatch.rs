//! The stock TFLite GPU delegate emulation (`dispatch::tflite_gpu`): every worked example of the
//! spec (`tflite-gpu-dispatch.md` §10.1 and §9.4), each selection threshold from one channel or
//! tile below to one above, the graph transforms, the GPU description format and the features.
//!
//! Every expected number is worked out by hand from the spec's formulas (the arithmetic is in the
//! comments), never taken from the code under test.

use tandem_compiler::dispatch::cli::{run, DispatchArgs, PrecisionArg};
use tandem_compiler::dispatch::features::{tflite_gpu_features, DispatchSource, SOURCE_COLUMN};
use tandem_compiler::dispatch::tflite_gpu::conv::{
    conv_constants_bytes, mali_recommended_block, select_conv,
};
use tandem_compiler::dispatch::tflite_gpu::gpu::{AdrenoGen, MaliGen, GPU_SPEC_FIELDS};
use tandem_compiler::dispatch::tflite_gpu::kernel::{GridMode, WeightsUpload};
use tandem_compiler::dispatch::tflite_gpu::work_group::{
    conv_work_group, first_fitting, generic_work_group,
};
use tandem_compiler::dispatch::tflite_gpu::{
    builtin, dispatch_graph, winograd, ConvDesc, Fate, Gpu, GpuSpec, Kernel, KernelDispatch,
    OpDispatch, Precision, StorageType, Target, Variant,
};
use tandem_compiler::ir::builder::GraphBuilder;
use tandem_compiler::ir::op::{Conv2d, DepthwiseConv2d};
use tandem_compiler::ir::{Activation, BinaryKind, Graph, Op, Padding, TensorId, UnaryKind};
use tandem_runtime::DType;

// ---------------------------------------------------------------------------------------------
// Helpers

fn builtin_gpu(name: &str) -> Gpu {
    Gpu::builtin(name).expect("built-in GPU")
}

fn target(name: &str, precision: Precision) -> Target {
    Target::new(builtin_gpu(name), Some(precision))
}

fn json_target(json: &str, precision: Precision) -> Target {
    Target::new(
        Gpu::from_json(json).expect("valid GPU JSON"),
        Some(precision),
    )
}

fn zeros(b: &mut GraphBuilder, name: &str, shape: &[usize]) -> TensorId {
    let n = shape.iter().product();
    b.const_f32(name, shape, &vec![0.0; n])
}

fn conv_attrs(stride: usize, dilation: usize, padding: Padding, act: Activation) -> Op {
    Op::Conv2d(Conv2d {
        padding,
        stride: [stride; 2],
        dilation: [dilation; 2],
        activation: act,
    })
}

fn conv(b: &mut GraphBuilder, x: TensorId, out: usize, k: usize, stride: usize) -> TensorId {
    conv_full(b, x, out, k, stride, Padding::Same, Activation::None)
}

fn conv_full(
    b: &mut GraphBuilder,
    x: TensorId,
    out: usize,
    k: usize,
    stride: usize,
    padding: Padding,
    act: Activation,
) -> TensorId {
    let cin = b.shape(x)[3];
    let w = zeros(b, "w", &[out, k, k, cin]);
    let bias = zeros(b, "b", &[out]);
    b.op1(conv_attrs(stride, 1, padding, act), &[x, w, bias])
        .expect("conv")
}

fn depthwise(
    b: &mut GraphBuilder,
    x: TensorId,
    mult: usize,
    k: usize,
    stride: usize,
    dilation: usize,
    padding: Padding,
) -> TensorId {
    let c = b.shape(x)[3];
    let w = zeros(b, "dw", &[1, k, k, c * mult]);
    let bias = zeros(b, "db", &[c * mult]);
    b.op1(
        Op::DepthwiseConv2d(DepthwiseConv2d {
            padding,
            stride: [stride; 2],
            dilation: [dilation; 2],
            depth_multiplier: mult,
            activation: Activation::None,
        }),
        &[x, w, bias],
    )
    .expect("depthwise")
}

fn fc(b: &mut GraphBuilder, x: TensorId, units: usize) -> TensorId {
    let depth = *b.shape(x).last().expect("rank >= 1");
    let w = zeros(b, "fw", &[units, depth]);
    let bias = zeros(b, "fb", &[units]);
    b.op1(
        Op::FullyConnected {
            activation: Activation::None,
            keep_num_dims: false,
        },
        &[x, w, bias],
    )
    .expect("fc")
}

fn add(b: &mut GraphBuilder, x: TensorId, y: TensorId, act: Activation) -> TensorId {
    b.op1(
        Op::Binary {
            kind: BinaryKind::Add,
            activation: act,
        },
        &[x, y],
    )
    .expect("add")
}

fn pad(b: &mut GraphBuilder, x: TensorId, hw: [i32; 4]) -> TensorId {
    let [top, bottom, left, right] = hw;
    let p = b.const_i32("pads", &[4, 2], &[0, 0, top, bottom, left, right, 0, 0]);
    b.op1(Op::Pad, &[x, p]).expect("pad")
}

/// A graph with one input of `shape`, built by `body`, whose result is the output.
fn graph(shape: &[usize], body: impl FnOnce(&mut GraphBuilder, TensorId) -> TensorId) -> Graph {
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, shape);
    let y = body(&mut b, x);
    b.output(y);
    b.finish("test")
}

fn emulate(g: &Graph, t: &Target) -> Vec<OpDispatch> {
    dispatch_graph(g, t).expect("dispatch")
}

/// The kernels of the only dispatched op of a one-op graph.
fn single_op_kernels(
    shape: &[usize],
    t: &Target,
    body: impl FnOnce(&mut GraphBuilder, TensorId) -> TensorId,
) -> Vec<KernelDispatch> {
    let ops = emulate(&graph(shape, body), t);
    let dispatched: Vec<&OpDispatch> = ops.iter().filter(|o| o.fate == Fate::Dispatched).collect();
    assert_eq!(dispatched.len(), 1, "{ops:#?}");
    dispatched[0].kernels.clone()
}

fn names(kernels: &[KernelDispatch]) -> Vec<Kernel> {
    kernels.iter().map(|k| k.name).collect()
}

#[track_caller]
fn assert_dispatch(
    k: &KernelDispatch,
    name: Kernel,
    block: Option<[usize; 4]>,
    grid: [usize; 3],
    work_group: [usize; 3],
    groups: [usize; 3],
) {
    assert_eq!(k.name, name, "{k:#?}");
    assert_eq!(k.block, block, "block of {k:#?}");
    assert_eq!(k.grid, grid, "grid of {k:#?}");
    assert_eq!(k.work_group, work_group, "work group of {k:#?}");
    assert_eq!(k.groups, groups, "groups of {k:#?}");
}

/// Kernel names for a constant-weight conv described directly (no graph).
fn conv_kernels(t: &Target, src: [usize; 3], out: usize, k: usize) -> Vec<Kernel> {
    names(&select_conv(
        t,
        &ConvDesc::simple(src, out, [k, k], [1, 1], Padding::Same),
    ))
}

fn conv_block(t: &Target, src: [usize; 3], out: usize, k: usize, stride: usize) -> [usize; 4] {
    let kernels = select_conv(
        t,
        &ConvDesc::simple(src, out, [k, k], [stride, stride], Padding::Same),
    );
    assert_eq!(names(&kernels), [Kernel::ConvGeneric]);
    kernels[0].block.expect("ConvGeneric has a block")
}

const WINO: [Kernel; 3] = [
    Kernel::Winograd4x4To36TileX6,
    Kernel::ConvGeneric,
    Kernel::Winograd36To4x4Tile4x1,
];

// ---------------------------------------------------------------------------------------------
// Worked examples (§10.1)

#[test]
fn example_adreno_640_conv3x3_56x56x64() {
    // S = 16 < 32: no Winograd. ConvConstants: 64*4*16*9*2 = 73,728 B > 3,584 B.
    // waves = 56*56*16 / 2 / 128 = 196 -> block (2,2,1,2); grid (28, 28, 16/2 = 8).
    // Conv picker: wz = 8, xy = 256/8 = 32, wx = 28, wy = min(32/28 = 1, 28) = 1.
    assert_eq!(conv_constants_bytes(64, 64, [3, 3], Precision::F16), 73_728);
    let t = target("adreno-640", Precision::F16);
    let k = single_op_kernels(&[1, 56, 56, 64], &t, |b, x| conv(b, x, 64, 3, 1));
    assert_eq!(names(&k), [Kernel::ConvGeneric]);
    assert_dispatch(
        &k[0],
        Kernel::ConvGeneric,
        Some([2, 2, 1, 2]),
        [28, 28, 8],
        [28, 1, 8],
        [1, 28, 1],
    );
    assert_eq!(k[0].global, [28, 28, 8]);
}

#[test]
fn example_adreno_650_winograd_64x64x256() {
    // tiles = 16*16 = 256 >= 128, S = 64 >= 32: Winograd.
    let t = target("adreno-650", Precision::F16);
    let k = single_op_kernels(&[1, 64, 64, 256], &t, |b, x| conv(b, x, 256, 3, 1));
    assert_eq!(names(&k), WINO);
    // TileX6: grid (256, 6, 64), first list entry (8,6,4), count (32, 1, 16).
    assert_dispatch(
        &k[0],
        Kernel::Winograd4x4To36TileX6,
        None,
        [256, 6, 64],
        [8, 6, 4],
        [32, 1, 16],
    );
    // Middle: heuristics on 64x64 with S_dst 64: waves = 64*64*64/3/128 ≈ 683 -> (2,2,1,2),
    // folded to (4,1,1,2). Grid (256/4, 36, 64/2). wz = 32, xy = 8, wx = 8, wy = 1.
    assert_dispatch(
        &k[1],
        Kernel::ConvGeneric,
        Some([4, 1, 1, 2]),
        [64, 36, 32],
        [8, 1, 32],
        [8, 36, 1],
    );
    // Tile4x1: grid (256, 4, 64), (32,4,2), count (8, 1, 32).
    assert_dispatch(
        &k[2],
        Kernel::Winograd36To4x4Tile4x1,
        None,
        [256, 4, 64],
        [32, 4, 2],
        [8, 1, 32],
    );
}

#[test]
fn example_mali_g76_conv1x1_56x56x128() {
    // task per CU = 56*56*32/10 = 10,035 > 16*256 -> r = 8 -> (2,2,1,2); grid (28, 28, 16).
    // Conv picker: maxZ 16 -> wz 16, xy 16, wx 16, wy 1.
    assert_eq!(
        mali_recommended_block(MaliGen::BifrostGen3, Precision::F16, 56 * 56 * 32, 10),
        8
    );
    let t = target("mali-g76-mp10", Precision::F16);
    let k = single_op_kernels(&[1, 56, 56, 128], &t, |b, x| conv(b, x, 128, 1, 1));
    assert_dispatch(
        &k[0],
        Kernel::ConvGeneric,
        Some([2, 2, 1, 2]),
        [28, 28, 16],
        [16, 1, 16],
        [2, 28, 1],
    );
}

#[test]
fn example_adreno_depthwise_3x3_112x112x32() {
    // Grid (56, 56, 8). Generic picker, 1024: wz 8, xy 128, wx 28, wy 4 -> count (2, 14, 1).
    // With 256: xy 32, wx 28, wy 1.
    let t = target("adreno-640", Precision::F16);
    let body = |b: &mut GraphBuilder, x| depthwise(b, x, 1, 3, 1, 1, Padding::Same);
    let k = single_op_kernels(&[1, 112, 112, 32], &t, body);
    assert_dispatch(
        &k[0],
        Kernel::DepthwiseConv3x3,
        Some([2, 2, 1, 1]),
        [56, 56, 8],
        [28, 4, 8],
        [2, 14, 1],
    );
    let t256 = t.clone().with_kernel_max_wg(256);
    let k = single_op_kernels(&[1, 112, 112, 32], &t256, body);
    assert_dispatch(
        &k[0],
        Kernel::DepthwiseConv3x3,
        Some([2, 2, 1, 1]),
        [56, 56, 8],
        [28, 1, 8],
        [2, 56, 1],
    );
}

#[test]
fn example_adreno_fully_connected_1024_to_1000() {
    // Grid (250,1,1), WG (32,4,1), count (ceil(250/32) = 8, 1, 1), global (256, 4, 1).
    for precision in [Precision::F16, Precision::F32] {
        let t = target("adreno-640", precision);
        let k = single_op_kernels(&[1, 1024], &t, |b, x| fc(b, x, 1000));
        assert_dispatch(
            &k[0],
            Kernel::FullyConnected,
            None,
            [250, 1, 1],
            [32, 4, 1],
            [8, 1, 1],
        );
        assert_eq!(k[0].global, [256, 4, 1]);
    }
}

#[test]
fn example_powervr_linear_spatial_launch_order() {
    // §9.4: GE8320 (CL 1.2, fp16 off -> F32), 1x1 conv 16x16x64 -> 64. pickS(8) of S = 16 is 8,
    // so ts = 2; spatial = 16*16 = 256; grid (256, 2). WG (32,1,1) fixed, order (1,0,2):
    // n = (256/32 = 8, 2) -> count (2, 8, 1), global (64, 8, 1).
    let t = target("powervr-ge8320", Precision::F32);
    let k = single_op_kernels(&[1, 16, 16, 64], &t, |b, x| conv(b, x, 64, 1, 1));
    assert_dispatch(
        &k[0],
        Kernel::ConvGeneric,
        Some([1, 1, 1, 8]),
        [256, 2, 1],
        [32, 1, 1],
        [2, 8, 1],
    );
    assert_eq!(k[0].global, [64, 8, 1]);
    assert_eq!(k[0].grid_dimension, 2);
    let params = k[0].conv.expect("conv params");
    assert_eq!(params.grid_mode, GridMode::LinearSpatial);
    assert_eq!(params.launch_order, [1, 0, 2]);
    assert_eq!(params.weights_upload, WeightsUpload::LocalMemAsyncSubgroup);
}

// ---------------------------------------------------------------------------------------------
// Winograd thresholds (§6)

#[test]
fn winograd_adreno_6xx_needs_32_slices_and_128_tiles() {
    let t = target("adreno-640", Precision::F16);
    // tiles: W 512 on H 4 -> 128*1; W 508 -> 127.
    assert_eq!(conv_kernels(&t, [4, 512, 128], 128, 3), WINO);
    assert_ne!(conv_kernels(&t, [4, 508, 128], 128, 3), WINO);
    // 125 channels are 32 slices, 124 are 31 (src and dst separately).
    assert_eq!(conv_kernels(&t, [4, 512, 125], 128, 3), WINO);
    assert_ne!(conv_kernels(&t, [4, 512, 124], 128, 3), WINO);
    assert_eq!(conv_kernels(&t, [4, 512, 128], 125, 3), WINO);
    assert_ne!(conv_kernels(&t, [4, 512, 128], 124, 3), WINO);
    // Not suitable: 5x5 kernel, stride 2.
    assert_ne!(conv_kernels(&t, [64, 64, 256], 256, 5), WINO);
    let strided = ConvDesc::simple([64, 64, 256], 256, [3, 3], [2, 2], Padding::Same);
    assert!(!winograd::suitable(&strided));
}

#[test]
fn winograd_adreno_7xx_and_unknown_need_64_tiles() {
    for t in [
        target("adreno-730", Precision::F16),
        target("adreno-740", Precision::F32),
        json_target(
            r#"{"name": "Adreno (TM) 830", "compute_units": 8, "max_work_group_size": 1024}"#,
            Precision::F16,
        ),
    ] {
        // W 256 on H 4 -> 64 tiles; W 252 -> 63.
        assert_eq!(
            conv_kernels(&t, [4, 256, 128], 128, 3),
            WINO,
            "{}",
            t.gpu.name()
        );
        assert_ne!(
            conv_kernels(&t, [4, 252, 128], 128, 3),
            WINO,
            "{}",
            t.gpu.name()
        );
        assert_ne!(
            conv_kernels(&t, [4, 256, 124], 128, 3),
            WINO,
            "{}",
            t.gpu.name()
        );
    }
}

#[test]
fn winograd_mali_and_powervr_need_16_slices_and_32_tiles() {
    for t in [
        target("mali-g78-mp20", Precision::F16),
        target("mali-g76-mp10", Precision::F32),
        target("powervr-ge8320", Precision::F32),
    ] {
        // W 128 on H 4 -> 32 tiles; W 124 -> 31.
        assert_eq!(
            conv_kernels(&t, [4, 128, 64], 64, 3),
            WINO,
            "{}",
            t.gpu.name()
        );
        assert_ne!(
            conv_kernels(&t, [4, 124, 64], 64, 3),
            WINO,
            "{}",
            t.gpu.name()
        );
        // 61 channels = 16 slices, 60 = 15.
        assert_eq!(
            conv_kernels(&t, [4, 128, 61], 61, 3),
            WINO,
            "{}",
            t.gpu.name()
        );
        assert_ne!(
            conv_kernels(&t, [4, 128, 60], 64, 3),
            WINO,
            "{}",
            t.gpu.name()
        );
        assert_ne!(
            conv_kernels(&t, [4, 128, 64], 60, 3),
            WINO,
            "{}",
            t.gpu.name()
        );
    }
}

#[test]
fn winograd_amd_needs_8_destination_slices() {
    let t = json_target(
        r#"{"name": "AMD Radeon RX 580", "compute_units": 36, "max_work_group_size": 256}"#,
        Precision::F32,
    );
    let amd = [
        Kernel::Winograd4x4To36,
        Kernel::ConvGeneric,
        Kernel::Winograd36To4x4,
    ];
    // O 29 -> 8 slices, 28 -> 7; source still needs 16 slices.
    assert_eq!(conv_kernels(&t, [4, 128, 64], 29, 3), amd);
    assert_ne!(conv_kernels(&t, [4, 128, 64], 28, 3), amd);
    assert_ne!(conv_kernels(&t, [4, 128, 60], 29, 3), amd);
}

// ---------------------------------------------------------------------------------------------
// ConvConstants (§5.2)

#[test]
fn conv_constants_byte_limit_adreno() {
    // 1x1, O = 32 (not dot mode): bytes = I*4*8*bytes_per_weight.
    let f16 = target("adreno-640", Precision::F16);
    assert_eq!(conv_constants_bytes(56, 32, [1, 1], Precision::F16), 3584);
    assert_eq!(
        conv_kernels(&f16, [8, 8, 56], 32, 1),
        [Kernel::ConvConstants]
    );
    assert_eq!(conv_kernels(&f16, [8, 8, 57], 32, 1), [Kernel::ConvGeneric]);
    // F32_F16 counts 2 bytes like F16.
    let mixed = target("adreno-640", Precision::F32F16);
    assert_eq!(
        conv_kernels(&mixed, [8, 8, 56], 32, 1),
        [Kernel::ConvConstants]
    );
    // F32: 4 bytes, so I = 28 is the last that fits.
    let f32 = target("adreno-640", Precision::F32);
    assert_eq!(conv_constants_bytes(28, 32, [1, 1], Precision::F32), 3584);
    assert_eq!(
        conv_kernels(&f32, [8, 8, 28], 32, 1),
        [Kernel::ConvConstants]
    );
    assert_eq!(conv_kernels(&f32, [8, 8, 29], 32, 1), [Kernel::ConvGeneric]);
}

#[test]
fn conv_constants_needs_at_most_32_outputs() {
    // 3x3 from 3 channels: bytes stay small (3*4*9*9*2 = 1944 for O = 33); only O decides.
    let t = target("adreno-660", Precision::F16);
    assert_eq!(
        conv_kernels(&t, [32, 32, 3], 32, 3),
        [Kernel::ConvConstants]
    );
    assert_eq!(conv_kernels(&t, [32, 32, 3], 33, 3), [Kernel::ConvGeneric]);
}

#[test]
fn conv_constants_dot_mode() {
    // O = 29 (O%4 != 0), I = 60 (I%4 == 0): dot mode, 29*4*15*2 = 3480 B fits; aligned on the
    // output side it would be 60*4*8*2 = 3840.
    assert_eq!(conv_constants_bytes(60, 29, [1, 1], Precision::F16), 3480);
    // I = 62: 29*16 = 464 < 62*8 = 496, still dot mode: 29*4*16*2 = 3712 > 3584.
    assert_eq!(conv_constants_bytes(62, 29, [1, 1], Precision::F16), 3712);
    let t = target("adreno-640", Precision::F16);
    assert_eq!(conv_kernels(&t, [8, 8, 60], 29, 1), [Kernel::ConvConstants]);
    assert_eq!(conv_kernels(&t, [8, 8, 62], 29, 1), [Kernel::ConvGeneric]);
}

#[test]
fn conv_constants_limits_by_vendor() {
    // Adreno 5xx: 2560 B -> 1x1 F16 O = 32 fits up to I = 40.
    let a540 = json_target(
        r#"{"name": "Adreno 540", "compute_units": 4, "max_work_group_size": 1024}"#,
        Precision::F16,
    );
    assert_eq!(a540.gpu.adreno_gen(), AdrenoGen::A5xx);
    assert_eq!(
        conv_kernels(&a540, [8, 8, 40], 32, 1),
        [Kernel::ConvConstants]
    );
    assert_eq!(
        conv_kernels(&a540, [8, 8, 41], 32, 1),
        [Kernel::ConvGeneric]
    );
    // NVIDIA and unknown vendors: 1024 B -> up to I = 16.
    for json in [
        r#"{"name": "NVIDIA GeForce GTX 1080", "compute_units": 20, "max_work_group_size": 1024}"#,
        r#"{"name": "Vivante GC7000", "compute_units": 4, "max_work_group_size": 1024}"#,
    ] {
        let t = json_target(json, Precision::F16);
        assert_eq!(
            conv_kernels(&t, [8, 8, 16], 32, 1),
            [Kernel::ConvConstants],
            "{json}"
        );
        assert_eq!(
            conv_kernels(&t, [8, 8, 17], 32, 1),
            [Kernel::ConvGeneric],
            "{json}"
        );
    }
    // Mali and PowerVR never use it.
    for name in ["mali-g76-mp10", "powervr-bxm-8-256"] {
        let t = target(name, Precision::F16);
        assert_eq!(
            conv_kernels(&t, [32, 32, 3], 16, 3),
            [Kernel::ConvGeneric],
            "{name}"
        );
    }
}

#[test]
fn conv_constants_dispatch() {
    // MobileNet stem on Adreno 640: 3x3 s2 3 -> 32 on 224x224: 3*4*8*9*2 = 1728 B -> ConvConstants.
    // Grid (112, 112, 1); generic picker: wz 1, xy 1024, wx 56, wy 1024/56 = 18; count (2, 7, 1).
    let t = target("adreno-640", Precision::F16);
    let k = single_op_kernels(&[1, 224, 224, 3], &t, |b, x| conv(b, x, 32, 3, 2));
    assert_dispatch(
        &k[0],
        Kernel::ConvConstants,
        Some([1, 1, 1, 8]),
        [112, 112, 1],
        [56, 18, 1],
        [2, 7, 1],
    );
}

// ---------------------------------------------------------------------------------------------
// Adreno waves buckets (§5.3)

#[test]
fn adreno_waves_buckets() {
    // Adreno 640, F16: wave 128, 2 CUs -> waves = 16*24*S / 256. I = 128 keeps ConvConstants out.
    let t = target("adreno-640", Precision::F16);
    let src = [16, 24, 128];
    assert_eq!(conv_block(&t, src, 16, 1, 1), [1, 1, 1, 1]); // S 4: 6.0
    assert_eq!(conv_block(&t, src, 17, 1, 1), [2, 1, 1, 1]); // S 5: 7.5
    assert_eq!(conv_block(&t, src, 32, 1, 1), [2, 1, 1, 1]); // S 8: 12.0
    assert_eq!(conv_block(&t, src, 33, 1, 1), [2, 1, 1, 2]); // S 9: 13.5
    assert_eq!(conv_block(&t, src, 64, 1, 1), [2, 1, 1, 2]); // S 16: 24.0
    assert_eq!(conv_block(&t, src, 65, 1, 1), [2, 2, 1, 2]); // S 17: 25.5
                                                             // F32 and F32_F16 use the half wave (64): S 4 gives 12.0, S 2 gives 6.0 (I = 256 keeps
                                                             // ConvConstants out: 256*4*2*2 = 4096 B).
    let src = [16, 24, 256];
    for p in [Precision::F32, Precision::F32F16] {
        let t = target("adreno-640", p);
        assert_eq!(conv_block(&t, src, 16, 1, 1), [2, 1, 1, 1]);
        assert_eq!(conv_block(&t, src, 8, 1, 1), [1, 1, 1, 1]);
    }
}

#[test]
fn adreno_unknown_and_3xx_blocks() {
    // Unknown model: wave 32 (F16); 4 CUs: 16*24*4/4/32 = 12 -> (2,1,1,1), where a 6xx with
    // 4 CUs would see 3.
    let t = json_target(
        r#"{"name": "Adreno (TM) 830", "compute_units": 4, "max_work_group_size": 1024}"#,
        Precision::F16,
    );
    assert_eq!(t.gpu.adreno_gen(), AdrenoGen::Unknown);
    assert_eq!(t.gpu.class(), "Adreno kUnknown");
    assert_eq!(conv_block(&t, [16, 24, 128], 16, 1, 1), [2, 1, 1, 1]);
    // 3xx overrides by precision.
    let a330 = r#"{"name": "Adreno 330", "compute_units": 4, "max_work_group_size": 512}"#;
    for (p, block) in [
        (Precision::F16, [2, 2, 1, 2]),
        (Precision::F32F16, [2, 1, 1, 2]),
        (Precision::F32, [2, 2, 1, 1]),
    ] {
        assert_eq!(
            conv_block(&json_target(a330, p), [16, 24, 128], 16, 1, 1),
            block
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Mali RecommendedBlock and blocks (§5.3)

#[test]
fn mali_recommended_block_thresholds() {
    // Bifrost gen 3 F16: t1 = 256, t2 = 6*256 = 1536, t4 = 16*256 = 4096 per CU.
    let r = |task| mali_recommended_block(MaliGen::BifrostGen3, Precision::F16, task, 10);
    assert_eq!(r(2560), 1);
    assert_eq!(r(2561), 2);
    assert_eq!(r(15_360), 2);
    assert_eq!(r(15_361), 4);
    assert_eq!(r(40_960), 4);
    assert_eq!(r(40_961), 8);
    // Valhall F32: 1, 12, ∞ -> never 8.
    let v = |task| mali_recommended_block(MaliGen::ValhallGen2, Precision::F32, task, 1);
    assert_eq!(v(3072), 2);
    assert_eq!(v(3073), 4);
    assert_eq!(v(1 << 30), 4);
    // Bifrost gen 2 F32: t1 = 0.5 -> 128.
    let b2 = |task| mali_recommended_block(MaliGen::BifrostGen2, Precision::F32, task, 1);
    assert_eq!(b2(128), 1);
    assert_eq!(b2(129), 2);
    // Midgard F32_F16: 4, ∞, ∞ -> at most 2.
    assert_eq!(
        mali_recommended_block(MaliGen::Midgard, Precision::F32F16, 1024, 1),
        1
    );
    assert_eq!(
        mali_recommended_block(MaliGen::Midgard, Precision::F32F16, 1 << 30, 1),
        2
    );
    // Unknown model: always 1.
    assert_eq!(
        mali_recommended_block(MaliGen::Unknown, Precision::F16, 1 << 30, 1),
        1
    );
}

#[test]
fn mali_g76_blocks_from_one_slice_below_to_one_above() {
    // 1x1 on 16x16: task = 256*S, per CU 25.6*S.
    let t = target("mali-g76-mp10", Precision::F16);
    let src = [16, 16, 64];
    assert_eq!(conv_block(&t, src, 40, 1, 1), [1, 1, 1, 1]); // S 10: 256
    assert_eq!(conv_block(&t, src, 41, 1, 1), [2, 1, 1, 1]); // S 11: 281.6 -> r 2
    assert_eq!(conv_block(&t, src, 240, 1, 1), [2, 1, 1, 1]); // S 60: 1536
    assert_eq!(conv_block(&t, src, 241, 1, 1), [2, 1, 1, 2]); // S 61: r 4, F16 -> bs 2
    assert_eq!(conv_block(&t, src, 640, 1, 1), [2, 1, 1, 2]); // S 160: 4096
    assert_eq!(conv_block(&t, src, 641, 1, 1), [2, 2, 1, 2]); // S 161: r 8
                                                              // S_dst 3 with r 8 (128x128: 49152/10 = 4915): (2,2,1,1).
    assert_eq!(conv_block(&t, [128, 128, 64], 12, 1, 1), [2, 2, 1, 1]);
}

#[test]
fn mali_bifrost_caps_non_pointwise_at_4() {
    // 3x3 s2 (no Winograd) 64x64x64 -> 32x32x256: task 32*32*64 = 65,536.
    // G76 (10 CUs): 6554 > 4096 -> r 8, capped to 4 -> (2,1,1,2).
    let g76 = target("mali-g76-mp10", Precision::F16);
    assert_eq!(conv_block(&g76, [64, 64, 64], 256, 3, 2), [2, 1, 1, 2]);
    // G710 (7 CUs, Valhall): 9362 > 4096 -> r 8, no cap -> (2,2,1,2).
    let g710 = target("mali-g710-mp7", Precision::F16);
    assert_eq!(conv_block(&g710, [64, 64, 64], 256, 3, 2), [2, 2, 1, 2]);
}

#[test]
fn mali_valhall_f32_r4_doubles_height() {
    // G78 MP20 F32, 1x1 on 32x32: S 60 -> 61440/20 = 3072 = 12*256 -> r 2; S 61 -> r 4 -> (2,2,1,1).
    let t = target("mali-g78-mp20", Precision::F32);
    assert_eq!(conv_block(&t, [32, 32, 64], 240, 1, 1), [2, 1, 1, 1]);
    assert_eq!(conv_block(&t, [32, 32, 64], 241, 1, 1), [2, 2, 1, 1]);
}

#[test]
fn mali_unknown_model_is_always_block_1() {
    let t = json_target(
        r#"{"name": "Mali-G925 MC12", "compute_units": 12, "max_work_group_size": 1024}"#,
        Precision::F16,
    );
    assert_eq!(t.gpu.mali_gen(), MaliGen::Unknown);
    assert_eq!(conv_block(&t, [128, 128, 64], 256, 1, 1), [1, 1, 1, 1]);
}

#[test]
fn mali_width_one_moves_block_to_height() {
    // G76 F16, 1x1 on 512x1x64 -> 64: task 512*16 = 8192, per CU 819 -> r 2 -> (2,1,1,1); W = 1
    // -> (1,2,1,1). Grid (1, 256, 16); conv picker: wz 16, xy 16, wx 1, wy 16 -> count (1, 16, 1).
    // S_src 16 even and r <= 2 -> src_loop 2.
    let t = target("mali-g76-mp10", Precision::F16);
    let k = single_op_kernels(&[1, 512, 1, 64], &t, |b, x| conv(b, x, 64, 1, 1));
    assert_dispatch(
        &k[0],
        Kernel::ConvGeneric,
        Some([1, 2, 1, 1]),
        [1, 256, 16],
        [1, 16, 16],
        [1, 16, 1],
    );
    assert_eq!(k[0].conv.expect("params").src_loop, 2);
    // r 1 with S_src % 4 == 0 in F16: src_loop 4 (16x16, O 40).
    let k = single_op_kernels(&[1, 16, 16, 64], &t, |b, x| conv(b, x, 40, 1, 1));
    assert_eq!(k[0].conv.expect("params").src_loop, 4);
}

// ---------------------------------------------------------------------------------------------
// Other vendors' ConvGeneric (§5.3)

#[test]
fn powervr_f16_block_and_preferred_multiple() {
    // BXM-8-256 F16, 1x1 16x16x64 -> 64: pickS(8) = 8, F16 -> 4; S_src 16 even -> src_loop 2
    // (not 4: bs > 2); bx = 2 -> (2,1,1,4). Grid (8*16, 16/4) = (128, 4); WG (32,1,1);
    // n = (4, 4) -> count (4, 4, 1).
    let t = target("powervr-bxm-8-256", Precision::F16);
    let k = single_op_kernels(&[1, 16, 16, 64], &t, |b, x| conv(b, x, 64, 1, 1));
    assert_dispatch(
        &k[0],
        Kernel::ConvGeneric,
        Some([2, 1, 1, 4]),
        [128, 4, 1],
        [32, 1, 1],
        [4, 4, 1],
    );
    assert_eq!(k[0].conv.expect("params").src_loop, 2);
    // CL 3.0 with a preferred multiple of 64: WG (64,1,1), count (4, 2, 1).
    let t = json_target(
        r#"{"name": "PowerVR B-Series BXM-8-256", "compute_units": 1, "max_work_group_size": 512,
            "opencl_version": "3.0", "preferred_work_group_size_multiple": 64}"#,
        Precision::F16,
    );
    let k = single_op_kernels(&[1, 16, 16, 64], &t, |b, x| conv(b, x, 64, 1, 1));
    assert_eq!((k[0].work_group, k[0].groups), ([64, 1, 1], [4, 2, 1]));
}

#[test]
fn powervr_ge8320_runs_f16_as_f32() {
    let t = target("powervr-ge8320", Precision::F16);
    assert_eq!(t.precision, Precision::F32);
    assert_eq!(conv_block(&t, [16, 16, 64], 64, 1, 1), [1, 1, 1, 8]);
}

#[test]
fn nvidia_warps_shrink_the_block() {
    // 1x1 8x8x64 -> 64 F32 on 20 CUs: block (2,1,1,4); warps = 1024/20/8/32 = 0.2 -> bx 1,
    // bs 2, bs 1. src_loop 4 (S_src 16, bs <= 2). Grid (64, 16); WG (32,1,1) fixed, order
    // (1,0,2): n = (2, 16) -> count (16, 2, 1).
    let t = json_target(
        r#"{"name": "NVIDIA GeForce GTX 1080", "compute_units": 20, "max_work_group_size": 1024}"#,
        Precision::F32,
    );
    let k = single_op_kernels(&[1, 8, 8, 64], &t, |b, x| conv(b, x, 64, 1, 1));
    assert_dispatch(
        &k[0],
        Kernel::ConvGeneric,
        Some([1, 1, 1, 1]),
        [64, 16, 1],
        [32, 1, 1],
        [16, 2, 1],
    );
    assert_eq!(k[0].conv.expect("params").src_loop, 4);
}

#[test]
fn amd_halving_steps() {
    // 1x1 32x32x64 -> 64 F32 on 36 CUs: (2,2,1,4) -> F32 halves bs -> (2,2,1,2);
    // waves64 = 16384/36/8/64 = 0.889: < 4 -> bs 1, < 2 -> by 1, < 1 -> bx 1 -> (1,1,1,1).
    // src_loop 8 (one output per thread, S_src 16). Conv picker: wz 16, xy 16 -> (16,1,16).
    let t = json_target(
        r#"{"name": "AMD Radeon RX 580", "compute_units": 36, "max_work_group_size": 256}"#,
        Precision::F32,
    );
    let k = single_op_kernels(&[1, 32, 32, 64], &t, |b, x| conv(b, x, 64, 1, 1));
    assert_dispatch(
        &k[0],
        Kernel::ConvGeneric,
        Some([1, 1, 1, 1]),
        [32, 32, 16],
        [16, 1, 16],
        [2, 32, 1],
    );
    assert_eq!(k[0].conv.expect("params").src_loop, 8);
}

// ---------------------------------------------------------------------------------------------
// Depthwise (§7)

fn dw_kernel(
    t: &Target,
    shape: &[usize],
    body: impl FnOnce(&mut GraphBuilder, TensorId) -> TensorId,
) -> Kernel {
    let k = single_op_kernels(shape, t, body);
    assert_eq!(k.len(), 1);
    k[0].name
}

#[test]
fn depthwise_3x3_conditions_on_adreno() {
    let t = target("adreno-650", Precision::F16);
    let s = [1, 16, 16, 32];
    let dw3 = Kernel::DepthwiseConv3x3;
    let dw = Kernel::DepthwiseConv;
    assert_eq!(
        dw_kernel(&t, &s, |b, x| depthwise(b, x, 1, 3, 1, 1, Padding::Same)),
        dw3
    );
    assert_eq!(
        dw_kernel(&t, &s, |b, x| depthwise(b, x, 1, 3, 2, 1, Padding::Same)),
        dw
    );
    assert_eq!(
        dw_kernel(&t, &s, |b, x| depthwise(b, x, 2, 3, 1, 1, Padding::Same)),
        dw
    );
    assert_eq!(
        dw_kernel(&t, &s, |b, x| depthwise(b, x, 1, 5, 1, 1, Padding::Same)),
        dw
    );
    assert_eq!(
        dw_kernel(&t, &s, |b, x| depthwise(b, x, 1, 3, 1, 2, Padding::Same)),
        dw
    );
    // VALID: padding 0, not 1.
    assert_eq!(
        dw_kernel(&t, &s, |b, x| depthwise(b, x, 1, 3, 1, 1, Padding::Valid)),
        dw
    );
}

#[test]
fn depthwise_general_dispatch() {
    // Multiplier 2 on 16x16x32 -> 64 channels: grid (16, 16, 16); generic picker 1024: wz 8,
    // xy 128, wx 8, wy 16 -> count (2, 1, 2).
    let t = target("adreno-650", Precision::F16);
    let k = single_op_kernels(&[1, 16, 16, 32], &t, |b, x| {
        depthwise(b, x, 2, 3, 1, 1, Padding::Same)
    });
    assert_dispatch(
        &k[0],
        Kernel::DepthwiseConv,
        None,
        [16, 16, 16],
        [8, 16, 8],
        [2, 1, 2],
    );
}

#[test]
fn depthwise_3x3_on_mali() {
    let s = [1, 16, 16, 32];
    let body = |b: &mut GraphBuilder, x| depthwise(b, x, 1, 3, 1, 1, Padding::Same);
    let dw3 = Kernel::DepthwiseConv3x3;
    let dw = Kernel::DepthwiseConv;
    // Bifrost: yes unless F32.
    assert_eq!(
        dw_kernel(&target("mali-g76-mp10", Precision::F16), &s, body),
        dw3
    );
    assert_eq!(
        dw_kernel(&target("mali-g76-mp10", Precision::F32F16), &s, body),
        dw3
    );
    assert_eq!(
        dw_kernel(&target("mali-g76-mp10", Precision::F32), &s, body),
        dw
    );
    // Valhall gen 1 (G77) yes; gen 2 and 3 no.
    let g77 = json_target(
        r#"{"name": "Mali-G77 MC9", "compute_units": 9, "max_work_group_size": 512}"#,
        Precision::F16,
    );
    assert_eq!(g77.gpu.mali_gen(), MaliGen::ValhallGen1);
    assert_eq!(dw_kernel(&g77, &s, body), dw3);
    assert_eq!(
        dw_kernel(&target("mali-g78-mp20", Precision::F16), &s, body),
        dw
    );
    assert_eq!(
        dw_kernel(&target("mali-g710-mp7", Precision::F16), &s, body),
        dw
    );
    // Buffer storage: no.
    let buffer = json_target(
        r#"{"name": "Mali-G76 MP10", "compute_units": 10, "max_work_group_size": 384, "storage": "buffer"}"#,
        Precision::F16,
    );
    assert_eq!(dw_kernel(&buffer, &s, body), dw);
    // A source taller than the image limit (H * ceil(C/4) = 16*8 = 128 > 100) falls back to
    // BUFFER on Mali: no.
    let small = json_target(
        r#"{"name": "Mali-G76 MP10", "compute_units": 10, "max_work_group_size": 384, "image2d_max_height": 100}"#,
        Precision::F16,
    );
    assert_eq!(small.tensor_storage([1, 16, 16, 32]), StorageType::Buffer);
    assert_eq!(dw_kernel(&small, &s, body), dw);
}

#[test]
fn depthwise_3x3_on_powervr_has_a_fixed_work_group() {
    // Dedicated local memory: (8,4,1). Grid (8, 8, 8) -> count (1, 2, 8).
    let t = target("powervr-ge8320", Precision::F32);
    let k = single_op_kernels(&[1, 16, 16, 32], &t, |b, x| {
        depthwise(b, x, 1, 3, 1, 1, Padding::Same)
    });
    assert_dispatch(
        &k[0],
        Kernel::DepthwiseConv3x3,
        Some([2, 2, 1, 1]),
        [8, 8, 8],
        [8, 4, 1],
        [1, 2, 8],
    );
}

// ---------------------------------------------------------------------------------------------
// Fully connected (§8)

#[test]
fn fully_connected_work_groups_by_vendor() {
    // 1024 -> 1000: grid (250,1,1).
    let cases = [
        (
            target("mali-g76-mp10", Precision::F16),
            [16, 4, 1],
            [16, 1, 1],
        ),
        (
            target("powervr-ge8320", Precision::F32),
            [8, 4, 1],
            [32, 1, 1],
        ),
        (
            json_target(
                r#"{"name": "Adreno 330", "compute_units": 4, "max_work_group_size": 512}"#,
                Precision::F16,
            ),
            [16, 4, 1],
            [16, 1, 1],
        ),
        (target("adreno-740", Precision::F16), [32, 4, 1], [8, 1, 1]),
    ];
    for (t, wg, groups) in cases {
        let k = single_op_kernels(&[1, 1024], &t, |b, x| fc(b, x, 1000));
        assert_dispatch(&k[0], Kernel::FullyConnected, None, [250, 1, 1], wg, groups);
    }
}

#[test]
fn batched_fully_connected_runs_as_conv_generic() {
    // [2,256] -> 128 on Adreno 640 F16: dst (2,1,1,128), waves tiny -> (1,1,1,1). Grid (2, 1, 32);
    // conv picker: wz 32, xy 8, wx 2, wy 1 -> count (1,1,1).
    let t = target("adreno-640", Precision::F16);
    let ops = emulate(&graph(&[2, 256], |b, x| fc(b, x, 128)), &t);
    assert_eq!(ops[0].variant, Variant::ConvGenericFullyConnected);
    assert_dispatch(
        &ops[0].kernels[0],
        Kernel::ConvGeneric,
        Some([1, 1, 1, 1]),
        [2, 1, 32],
        [2, 1, 32],
        [1, 1, 1],
    );
}

// ---------------------------------------------------------------------------------------------
// Graph transforms (§1)

#[test]
fn conv_1x1_on_1x1_input_becomes_fully_connected() {
    // Grid (128/4 = 32, 1, 1), WG (32,4,1), count (1,1,1).
    let t = target("adreno-640", Precision::F16);
    let ops = emulate(&graph(&[1, 1, 1, 64], |b, x| conv(b, x, 128, 1, 1)), &t);
    assert_eq!(ops[0].runs_as.as_deref(), Some("FULLY_CONNECTED"));
    assert_dispatch(
        &ops[0].kernels[0],
        Kernel::FullyConnected,
        None,
        [32, 1, 1],
        [32, 4, 1],
        [1, 1, 1],
    );
}

#[test]
fn fully_connected_on_rank_3_input_becomes_conv() {
    // [1,49,256] -> 512 is BHWC (1,1,49,256): a 1x1 conv. Adreno 640 F16: waves =
    // 49*128/2/128 = 24.5 -> (2,2,1,2); grid (25, 1, 64). Conv picker: wz 64, xy 4, wx 4, wy 1
    // (grid.y 1 is odd) -> count (7, 1, 1).
    let t = target("adreno-640", Precision::F16);
    let ops = emulate(&graph(&[1, 49, 256], |b, x| fc(b, x, 512)), &t);
    assert_eq!(ops[0].runs_as.as_deref(), Some("CONVOLUTION_2D"));
    assert_dispatch(
        &ops[0].kernels[0],
        Kernel::ConvGeneric,
        Some([2, 2, 1, 2]),
        [25, 1, 64],
        [4, 1, 64],
        [7, 1, 1],
    );
}

#[test]
fn flattening_fully_connected_is_rejected() {
    // [1,4,4,8] with weights [10, 128]: C = 8 != 128.
    let t = target("adreno-640", Precision::F32);
    let g = graph(&[1, 4, 4, 8], |b, x| {
        let w = zeros(b, "w", &[10, 128]);
        b.op1(
            Op::FullyConnected {
                activation: Activation::None,
                keep_num_dims: false,
            },
            &[x, w],
        )
        .expect("fc")
    });
    let ops = emulate(&g, &t);
    assert_eq!(ops[0].fate, Fate::Rejected);
    assert!(ops[0].kernels.is_empty());
}

#[test]
fn grouped_convolutions() {
    let t = target("adreno-640", Precision::F16);
    let grouped = |cout: usize, per_group_in: usize| {
        move |b: &mut GraphBuilder, x: TensorId| {
            let w = zeros(b, "gw", &[cout, 3, 3, per_group_in]);
            b.op1(conv_attrs(1, 1, Padding::Same, Activation::None), &[x, w])
                .expect("grouped conv")
        }
    };
    // 32 -> 32 in 4 groups of 8: one ConvGeneric with groups. waves = 8*8*8/2/128 = 2 ->
    // (1,1,1,1); grid (8, 8, 8); conv picker: wz 8, xy 32, wx 8, wy 4 -> count (1, 2, 1).
    let ops = emulate(&graph(&[1, 8, 8, 32], grouped(32, 8)), &t);
    assert_eq!(ops[0].variant, Variant::ConvGeneric);
    assert_dispatch(
        &ops[0].kernels[0],
        Kernel::ConvGeneric,
        Some([1, 1, 1, 1]),
        [8, 8, 8],
        [8, 4, 8],
        [1, 2, 1],
    );
    // 12 -> 12 in 2 groups of 6: split. Each 6 -> 6 3x3 conv needs 6*4*2*9*2 = 864 B:
    // ConvConstants.
    let ops = emulate(&graph(&[1, 8, 8, 12], grouped(12, 6)), &t);
    assert_eq!(ops[0].variant, Variant::GroupedSplit);
    assert_eq!(
        names(&ops[0].kernels),
        [
            Kernel::Split,
            Kernel::ConvConstants,
            Kernel::ConvConstants,
            Kernel::ConcatZ
        ]
    );
    // One input channel per output and as many outputs as inputs: a depthwise conv (3x3 s1
    // SAME, so DepthwiseConv3x3).
    let ops = emulate(&graph(&[1, 8, 8, 16], grouped(16, 1)), &t);
    assert_eq!(ops[0].runs_as.as_deref(), Some("DEPTHWISE_CONVOLUTION"));
    assert_eq!(names(&ops[0].kernels), [Kernel::DepthwiseConv3x3]);
}

#[test]
fn runtime_weights_use_the_converter() {
    let t = target("mali-g76-mp10", Precision::F16);
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, &[1, 16]);
    let w = b.input("w", DType::F32, &[8, 16]);
    let y = b
        .op1(
            Op::FullyConnected {
                activation: Activation::None,
                keep_num_dims: false,
            },
            &[x, w],
        )
        .expect("fc");
    b.output(y);
    let ops = emulate(&b.finish("runtime weights"), &t);
    assert_eq!(ops[0].variant, Variant::ConvGenericDynamicWeights);
    assert_eq!(
        names(&ops[0].kernels),
        [Kernel::ConverterToConvWeights, Kernel::ConvGeneric]
    );
    assert!(!ops[0].kernels[0].exact && ops[0].kernels[1].exact);
}

#[test]
fn pad_merges_into_depthwise_and_enables_3x3() {
    // PAD 1 on every side + VALID 3x3 s1 = padding (1,1,1,1): DepthwiseConv3x3 on 8x8x16.
    // Grid (4, 4, 4); generic picker: wz 4, xy 256, wx 2, wy 4 -> count (2, 1, 1).
    let t = target("adreno-640", Precision::F16);
    let ops = emulate(
        &graph(&[1, 8, 8, 16], |b, x| {
            let p = pad(b, x, [1, 1, 1, 1]);
            depthwise(b, p, 1, 3, 1, 1, Padding::Valid)
        }),
        &t,
    );
    assert_eq!((ops[0].fate, ops[0].into), (Fate::MergedInto, Some(1)));
    assert!(ops[0].kernels.is_empty());
    assert_eq!(ops[1].absorbed, [0]);
    assert_dispatch(
        &ops[1].kernels[0],
        Kernel::DepthwiseConv3x3,
        Some([2, 2, 1, 1]),
        [4, 4, 4],
        [2, 4, 4],
        [2, 1, 1],
    );
    // Asymmetric PAD (bottom/right only): padding (0,0,1,1), so the general kernel on 7x7:
    // grid (7, 7, 4); wz 4, xy 256, wx 4, wy 7 -> count (2, 1, 1).
    let ops = emulate(
        &graph(&[1, 8, 8, 16], |b, x| {
            let p = pad(b, x, [0, 1, 0, 1]);
            depthwise(b, p, 1, 3, 1, 1, Padding::Valid)
        }),
        &t,
    );
    assert_eq!(ops[0].fate, Fate::MergedInto);
    assert_dispatch(
        &ops[1].kernels[0],
        Kernel::DepthwiseConv,
        None,
        [7, 7, 4],
        [4, 7, 4],
        [2, 1, 1],
    );
}

#[test]
fn pad_with_two_consumers_stays() {
    let t = target("adreno-640", Precision::F16);
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, &[1, 8, 8, 16]);
    let p = pad(&mut b, x, [1, 1, 1, 1]);
    let d = depthwise(&mut b, p, 1, 3, 1, 1, Padding::Valid);
    let q = pad(&mut b, x, [1, 1, 1, 1]);
    let e = depthwise(&mut b, q, 1, 3, 1, 1, Padding::Valid);
    let r = b.op1(Op::Unary(UnaryKind::Relu), &[q]).expect("relu");
    let sum = add(&mut b, d, e, Activation::None);
    b.output(sum);
    b.output(r);
    let ops = emulate(&b.finish("pads"), &t);
    // The first PAD merges; the second feeds a depthwise conv and a RELU, so it runs (Padding,
    // approximate) and its depthwise conv keeps padding 0 (general kernel).
    assert_eq!(ops[0].fate, Fate::MergedInto);
    assert_eq!(ops[1].kernels[0].name, Kernel::DepthwiseConv3x3);
    assert_eq!(ops[2].fate, Fate::Dispatched);
    assert_eq!(ops[2].kernels[0].name, Kernel::Padding);
    assert!(!ops[2].kernels[0].exact);
    assert_eq!(ops[3].kernels[0].name, Kernel::DepthwiseConv);
}

#[test]
fn elementwise_fusion_rules() {
    let t = target("adreno-640", Precision::F32);
    // conv -> ADD(conv, x): conv's output has one consumer taking it as input #0, x is an input.
    let ops = emulate(
        &graph(&[1, 8, 8, 64], |b, x| {
            let c = conv(b, x, 64, 1, 1);
            add(b, c, x, Activation::Relu)
        }),
        &t,
    );
    assert_eq!((ops[1].fate, ops[1].into), (Fate::FusedInto, Some(0)));
    assert_eq!(ops[0].absorbed, [1]);
    assert_eq!(ops[0].kernels.len(), 1);
    // ADD(x, conv): the conv output is input #1 -> not fused.
    let ops = emulate(
        &graph(&[1, 8, 8, 64], |b, x| {
            let c = conv(b, x, 64, 1, 1);
            add(b, x, c, Activation::None)
        }),
        &t,
    );
    assert_eq!(ops[1].fate, Fate::Dispatched);
    assert_eq!(ops[1].kernels[0].name, Kernel::Elementwise);
    // Two consumers -> not fused.
    let ops = emulate(
        &graph(&[1, 8, 8, 64], |b, x| {
            let c = conv(b, x, 64, 1, 1);
            let r = b.op1(Op::Unary(UnaryKind::Relu), &[c]).expect("relu");
            add(b, c, r, Activation::None)
        }),
        &t,
    );
    assert_eq!(ops[1].fate, Fate::Dispatched);
    // ADD's other input is computed after the conv -> not ready, not fused.
    let ops = emulate(
        &graph(&[1, 8, 8, 64], |b, x| {
            let c = conv(b, x, 64, 1, 1);
            let d = conv(b, x, 64, 1, 1);
            add(b, c, d, Activation::None)
        }),
        &t,
    );
    assert_eq!(ops[2].fate, Fate::Dispatched);
    // The conv output is a graph output -> the RELU after it is not fused.
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, &[1, 8, 8, 64]);
    let c = conv(&mut b, x, 64, 1, 1);
    let r = b.op1(Op::Unary(UnaryKind::Relu), &[c]).expect("relu");
    b.output(c);
    b.output(r);
    let ops = emulate(&b.finish("two outputs"), &t);
    assert_eq!(ops[1].fate, Fate::Dispatched);
    assert_eq!(ops[1].kernels[0].name, Kernel::ReLU);
}

#[test]
fn constant_add_folds_into_conv_without_activation() {
    let t = target("adreno-640", Precision::F16);
    let body = |act| {
        move |b: &mut GraphBuilder, x| {
            let c = conv_full(b, x, 64, 1, 1, Padding::Same, act);
            let bias = zeros(b, "bias2", &[64]);
            add(b, c, bias, Activation::None)
        }
    };
    let ops = emulate(&graph(&[1, 8, 8, 64], body(Activation::None)), &t);
    assert_eq!((ops[1].fate, ops[1].into), (Fate::FoldedInto, Some(0)));
    // After a fused RELU the ADD cannot go into the weights; it is linked instead.
    let ops = emulate(&graph(&[1, 8, 8, 64], body(Activation::Relu)), &t);
    assert_eq!((ops[1].fate, ops[1].into), (Fate::FusedInto, Some(0)));
}

#[test]
fn identity_reshape_is_removed_and_int_ops_stay_on_cpu() {
    let t = target("mali-g78-mp20", Precision::F16);
    let ops = emulate(
        &graph(&[1, 1, 1, 16], |b, x| {
            let s = b.const_i32("shape", &[2], &[1, 16]);
            let r = b
                .op1(
                    Op::Reshape {
                        new_shape: Some(vec![1, 16]),
                    },
                    &[x, s],
                )
                .expect("reshape");
            b.op1(Op::Softmax { beta: 1.0 }, &[r]).expect("softmax")
        }),
        &t,
    );
    assert_eq!(ops[0].fate, Fate::Removed);
    assert_eq!(ops[1].kernels[0].name, Kernel::Softmax1x1);
    let ops = emulate(
        &graph(&[1, 4, 4, 8], |b, x| {
            b.op1(
                Op::Shape {
                    out_type: DType::I32,
                },
                &[x],
            )
            .expect("shape")
        }),
        &t,
    );
    assert_eq!(ops[0].fate, Fate::NotDelegated);
}

// ---------------------------------------------------------------------------------------------
// Work-group pickers (§9)

#[test]
fn work_group_pickers() {
    let adreno = builtin_gpu("adreno-640");
    let mali = builtin_gpu("mali-g76-mp10");
    // Conv picker: wy equal to an even grid.y is halved: (4, 2, 8) -> wz 8, xy 32, wx 4,
    // wy min(8, 2) = 2 -> 1.
    assert_eq!(conv_work_group([4, 2, 8], &adreno, 1024), [4, 1, 8]);
    // maxZ: 64 on Adreno, 16 elsewhere: grid z 64.
    assert_eq!(conv_work_group([4, 4, 64], &adreno, 1024), [4, 1, 64]);
    // Mali: wz 16, xy 16, wx 4, wy min(4, 4) = 4 = grid.y, even -> 2.
    assert_eq!(conv_work_group([4, 4, 64], &mali, 1024), [4, 2, 16]);
    // kernel_max_wg below 256 matters: 128/8 = 16.
    assert_eq!(conv_work_group([28, 28, 8], &adreno, 128), [16, 1, 8]);
    // Generic picker, odd z: 9 -> 3; xy 1024/3 = 341; wx ceil(10/2) = 5; wy min(68, 10) = 10.
    assert_eq!(generic_work_group([10, 10, 9], 1024), [5, 10, 3]);
    assert_eq!(generic_work_group([10, 10, 12], 1024), [5, 10, 4]);
    // Winograd lists at a 128 limit.
    assert_eq!(
        first_fitting(&winograd::TILE_X6_WORK_GROUPS, 128),
        [8, 6, 2]
    );
    assert_eq!(
        first_fitting(&winograd::TILE_4X1_WORK_GROUPS, 128),
        [16, 4, 2]
    );
}

// ---------------------------------------------------------------------------------------------
// GPU descriptions

#[test]
fn gpu_classification_by_name() {
    let class = |json: &str| Gpu::from_json(json).expect("gpu").class();
    let spec = |name: &str| {
        format!(r#"{{"name": "{name}", "compute_units": 1, "max_work_group_size": 256}}"#)
    };
    assert_eq!(class(&spec("Mali-G710 MC10")), "Mali ValhallGen3 (G710)");
    assert_eq!(
        class(&spec("Mali-G720 Immortalis")),
        "Mali BifrostGen2 (G72)"
    );
    assert_eq!(class(&spec("Mali-T880 MP12")), "Mali Midgard (T880)");
    assert_eq!(class(&spec("QUALCOMM Adreno(TM) 642L")), "Adreno kUnknown");
    assert_eq!(class(&spec("Adreno (TM) 750")), "Adreno 7xx (750)");
    assert_eq!(class(&spec("PowerVR Rogue GE8320")), "PowerVR");
    assert_eq!(class(&spec("Intel(R) UHD Graphics")), "Intel");
    assert_eq!(class(&spec("Samsung Xclipse 920")), "AMD");
    // Built-ins.
    assert_eq!(builtin_gpu("adreno-640").class(), "Adreno 6xx (640)");
    assert_eq!(builtin_gpu("Adreno 730").class(), "Adreno 7xx (730)");
    assert_eq!(builtin_gpu("g76").class(), "Mali BifrostGen3 (G76)");
    assert_eq!(builtin_gpu("mali-g78").class(), "Mali ValhallGen2 (G78)");
}

#[test]
fn builtins_cover_the_required_parts_and_round_trip_through_json() {
    let ids = builtin::ids();
    for required in [
        "adreno-640",
        "adreno-650",
        "adreno-660",
        "adreno-730",
        "adreno-740",
        "mali-g76-mp10",
        "mali-g78-mp20",
        "mali-g710-mp7",
        "powervr-ge8320",
    ] {
        assert!(ids.contains(&required), "{required}");
    }
    for b in &builtin::BUILTINS {
        let spec: GpuSpec = (b.spec)();
        let json = serde_json::to_string(&spec).expect("serialize");
        assert_eq!(GpuSpec::from_json(&json).expect("parse"), spec, "{}", b.id);
        Gpu::new(spec).expect("valid");
    }
    // The worked examples' compute units.
    assert_eq!(builtin_gpu("adreno-640").compute_units(), 2);
    assert_eq!(builtin_gpu("adreno-650").compute_units(), 3);
    assert_eq!(builtin_gpu("mali-g76-mp10").compute_units(), 10);
}

#[test]
fn every_gpu_spec_field_is_listed_for_error_messages() {
    let spec = GpuSpec {
        device_name: Some("d".into()),
        vendor: Some(tandem_compiler::dispatch::tflite_gpu::Vendor::Intel),
        max_work_item_sizes: Some([1, 1, 1]),
        kernel_max_work_group_size: Some(1),
        preferred_work_group_size_multiple: Some(1),
        sub_group_sizes: vec![16],
        storage: Some(StorageType::Buffer),
        notes: Some("n".into()),
        ..(builtin::BUILTINS[0].spec)()
    };
    let value = serde_json::to_value(&spec).expect("serialize");
    let mut keys: Vec<&str> = value
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    let mut fields = GPU_SPEC_FIELDS.to_vec();
    keys.sort_unstable();
    fields.sort_unstable();
    assert_eq!(keys, fields);
}

#[test]
fn bad_gpu_descriptions_name_the_problem() {
    let err = |json: &str| format!("{:#}", Gpu::from_json(json).expect_err("must fail"));
    let e = err(r#"{"name": "x", "compute_units": "two", "max_work_group_size": 256}"#);
    assert!(e.contains("`compute_units`"), "{e}");
    let e = err(r#"{"name": "x", "max_work_group_size": 256}"#);
    assert!(e.contains("compute_units"), "{e}");
    let e =
        err(r#"{"name": "x", "compute_units": 2, "max_work_group_size": 256, "computeunits": 2}"#);
    assert!(e.contains("unknown field `computeunits`"), "{e}");
    let e =
        err(r#"{"name": "x", "compute_units": 2, "max_work_group_size": 256, "precision": "f8"}"#);
    assert!(e.contains("`precision`") && e.contains("f32_f16"), "{e}");
    let e = err(r#"{"name": "x", "compute_units": 0, "max_work_group_size": 256}"#);
    assert!(e.contains("`compute_units`"), "{e}");
    let e = err(
        r#"{"name": "x", "compute_units": 2, "max_work_group_size": 256, "opencl_version": "three"}"#,
    );
    assert!(e.contains("`opencl_version`"), "{e}");
    let e = err(
        r#"{"name": "x", "compute_units": 2, "max_work_group_size": 256, "kernel_max_work_group_size": 512}"#,
    );
    assert!(e.contains("`kernel_max_work_group_size`"), "{e}");
    let e = err("[1, 2]");
    assert!(e.contains("object"), "{e}");
    let e = err("{ not json");
    assert!(e.contains("JSON"), "{e}");
    let e = format!("{:#}", Gpu::resolve("adreno-999").expect_err("unknown"));
    assert!(
        e.contains("adreno-640") && e.contains("mali-g76-mp10"),
        "{e}"
    );
}

// ---------------------------------------------------------------------------------------------
// Features and CLI

#[test]
fn features_of_a_winograd_op() {
    let t = target("adreno-650", Precision::F16);
    let ops = emulate(&graph(&[1, 64, 64, 256], |b, x| conv(b, x, 256, 3, 1)), &t);
    let f = tflite_gpu_features(&ops[0]);
    assert_eq!(f.source, DispatchSource::TfliteGpu);
    assert_eq!(f.source.label(), "tflite_gpu");
    assert_eq!(SOURCE_COLUMN, "dispatch_source");
    let get = |n: &str| f.get(n).expect(n);
    assert_eq!(get("variant"), f64::from(Variant::Winograd.id()));
    assert_eq!(get("kernels"), 3.0);
    assert_eq!(get("kernel"), f64::from(Kernel::ConvGeneric.id()));
    assert_eq!(
        [
            get("block_x"),
            get("block_y"),
            get("block_z"),
            get("block_s")
        ],
        [4.0, 1.0, 1.0, 2.0]
    );
    assert_eq!(
        [get("wg_x"), get("wg_y"), get("wg_z"), get("wg_size")],
        [8.0, 1.0, 32.0, 256.0]
    );
    assert_eq!(
        [
            get("groups_x"),
            get("groups_y"),
            get("groups_z"),
            get("groups")
        ],
        [8.0, 36.0, 1.0, 288.0]
    );
    assert_eq!(
        [get("grid_x"), get("grid_y"), get("grid_z"), get("grid")],
        [64.0, 36.0, 32.0, 73_728.0]
    );
    // Groups: 32*16 + 288 + 8*32; threads: 256*6*64 + 64*36*32 + 256*4*64.
    assert_eq!(get("all_groups"), 1056.0);
    assert_eq!(get("all_threads"), 237_568.0);
    assert_eq!(get("exact"), 1.0);
}

#[test]
fn features_of_a_fused_op_are_zero() {
    let t = target("adreno-640", Precision::F32);
    let ops = emulate(
        &graph(&[1, 8, 8, 64], |b, x| {
            let c = conv(b, x, 64, 1, 1);
            b.op1(Op::Unary(UnaryKind::Tanh), &[c]).expect("tanh")
        }),
        &t,
    );
    assert_eq!(ops[1].fate, Fate::FusedInto);
    let f = tflite_gpu_features(&ops[1]);
    assert!(f.values.iter().all(|&v| v == 0.0), "{f:?}");
    assert_eq!(f.source.label(), "tflite_gpu");
}

#[test]
fn cli_runs_on_a_model_file_and_reports_bad_gpus() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = dir.path().join("m.tflite");
    let g = graph(&[1, 56, 56, 64], |b, x| conv(b, x, 64, 3, 1));
    std::fs::write(
        &model,
        tandem_compiler::tflite::write_model(&g).expect("write"),
    )
    .expect("write");
    let args = |gpu: &str, json: bool| DispatchArgs {
        model: model.clone(),
        gpu: gpu.to_string(),
        precision: Some(PrecisionArg::F16),
        kernel_max_wg: None,
        json,
    };
    run(&args("adreno-640", false)).expect("table");
    run(&args("mali-g710", true)).expect("json");
    let gpu_file = dir.path().join("gpu.json");
    std::fs::write(
        &gpu_file,
        r#"{"name": "Adreno 640", "compute_units": 2, "max_work_group_size": 1024}"#,
    )
    .expect("write");
    run(&args(gpu_file.to_str().expect("utf-8"), true)).expect("json gpu");
    let e = format!(
        "{:#}",
        run(&args("no-such-gpu", false)).expect_err("unknown gpu")
    );
    assert!(e.contains("built-in GPUs are"), "{e}");
    std::fs::write(
        &gpu_file,
        r#"{"name": "x", "compute_units": -1, "max_work_group_size": 1024}"#,
    )
    .expect("write");
    let e = format!(
        "{:#}",
        run(&args(gpu_file.to_str().expect("utf-8"), false)).expect_err("bad gpu")
    );
    assert!(
        e.contains("`compute_units`") && e.contains("gpu.json"),
        "{e}"
    );
    let e = format!(
        "{:#}",
        run(&args(
            dir.path().join("missing.json").to_str().expect("utf-8"),
            false
        ))
        .expect_err("missing")
    );
    assert!(e.contains("cannot read"), "{e}");
}

#[test]
fn json_output_has_the_documented_fields() {
    let t = target("adreno-650", Precision::F16);
    let ops = emulate(&graph(&[1, 64, 64, 256], |b, x| conv(b, x, 256, 3, 1)), &t);
    let v = serde_json::to_value(&ops).expect("json");
    let op = &v[0];
    assert_eq!(op["op_index"], 0);
    assert_eq!(op["op"], "CONV_2D");
    let k = &op["kernels"];
    assert_eq!(k[0]["name"], "Winograd4x4To36TileX6");
    assert_eq!(k[1]["name"], "ConvGeneric");
    assert_eq!(k[2]["name"], "Winograd36To4x4Tile4x1");
    assert_eq!(k[1]["block"], serde_json::json!([4, 1, 1, 2]));
    assert_eq!(k[1]["grid"], serde_json::json!([64, 36, 32]));
    assert_eq!(k[1]["work_group"], serde_json::json!([8, 1, 32]));
    assert_eq!(k[1]["groups"], serde_json::json!([8, 36, 1]));
    assert_eq!(k[0]["block"], serde_json::Value::Null);
}
