//! Every GPU kernel against the CPU kernel of the same step (which is itself tested against a
//! naive reference in its module), on random shapes: GPU only, split at several channel counts,
//! with polling, with event waits, and with device buffers instead of SVM.
//!
//! These tests need an OpenCL device (PoCL on the project's machines; `cargo xtask test`
//! installs it). Without one they fail: a GPU test that does not run is not a pass.

use tandem_runtime::artifact::{
    Artifact, BinaryKind, Kernel, Placement, PoolParams, Step, Storage, TensorDesc, UnaryKind,
};
use tandem_runtime::cpu::batch_matmul::BatchMatMulParams;
use tandem_runtime::cpu::conv::{pack_conv_weights, ConvParams};
use tandem_runtime::cpu::depthwise::DepthwiseParams;
use tandem_runtime::cpu::fully_connected::FullyConnectedParams;
use tandem_runtime::cpu::transpose_conv::{pack_transpose_conv_weights, TransposeConvParams};
use tandem_runtime::cpu::Activation;
use tandem_runtime::gpu::device::{DeviceInfo, GpuDevice};
use tandem_runtime::gpu::dispatch::{
    depthwise_channels_inner, vector_width, GpuOp, Variant, CHANNELS_INNER_FROM_BYTES,
};
use tandem_runtime::gpu::launch::{decide, split_channels};
use tandem_runtime::gpu::layout::gpu_constants;
use tandem_runtime::npy::NpyArray;
use tandem_runtime::rng::Rng;
use tandem_runtime::session::{GpuMemory, Model, Session, SessionOptions, SyncMode};
use tandem_runtime::DType;

fn device() -> DeviceInfo {
    match GpuDevice::open() {
        Ok(d) => d.info,
        Err(e) => panic!(
            "these tests need an OpenCL device (install pocl-opencl-icd, as `cargo xtask test` \
             does): {e}"
        ),
    }
}

/// A one-step artifact under construction.
struct Builder {
    tensors: Vec<TensorDesc>,
    weights: Vec<f32>,
    arena: usize,
}

impl Builder {
    fn new() -> Self {
        Builder {
            tensors: vec![],
            weights: vec![],
            arena: 0,
        }
    }

    fn activation(&mut self, shape: &[usize]) -> usize {
        let bytes = shape.iter().product::<usize>() * 4;
        self.tensors.push(TensorDesc {
            name: format!("a{}", self.tensors.len()),
            dtype: DType::F32,
            shape: shape.to_vec(),
            storage: Storage::Arena { offset: self.arena },
        });
        self.arena += bytes.div_ceil(64) * 64;
        self.tensors.len() - 1
    }

    fn constant(&mut self, shape: &[usize], values: &[f32]) -> usize {
        let offset = self.weights.len().div_ceil(16) * 16;
        self.weights.resize(offset, 0.0);
        self.weights.extend_from_slice(values);
        self.tensors.push(TensorDesc {
            name: format!("c{}", self.tensors.len()),
            dtype: DType::F32,
            shape: shape.to_vec(),
            storage: Storage::Constant { offset },
        });
        self.tensors.len() - 1
    }
}

/// One step: its kernel, activation inputs (shapes), and for weighted kernels the TFLite-layout
/// weights, their CPU form and the bias.
struct Case {
    kernel: Kernel,
    inputs: Vec<Vec<usize>>,
    /// Constant operands that CPU and GPU read alike (after the activation inputs).
    shared_constants: Vec<(Vec<usize>, Vec<f32>)>,
    weights: Option<Weights>,
    output: Vec<usize>,
}

struct Weights {
    tflite: Vec<f32>,
    cpu: Vec<f32>,
    bias: Option<Vec<f32>>,
}

fn artifact(case: &Case, placement: Placement, dev: &DeviceInfo) -> Artifact {
    let mut b = Builder::new();
    let inputs: Vec<usize> = case.inputs.iter().map(|s| b.activation(s)).collect();
    let mut cpu_ops: Vec<Option<usize>> = inputs.iter().map(|&t| Some(t)).collect();
    let mut gpu_ops = cpu_ops.clone();
    for (shape, values) in &case.shared_constants {
        let t = b.constant(shape, values);
        cpu_ops.push(Some(t));
        gpu_ops.push(Some(t));
    }
    if let Some(w) = &case.weights {
        let cw = b.constant(&[w.cpu.len()], &w.cpu);
        let cb = w.bias.as_ref().map(|v| b.constant(&[v.len()], v));
        cpu_ops.push(Some(cw));
        cpu_ops.push(cb);
        let range = placement.gpu_range(split_channels(&case.kernel).unwrap_or(0));
        let variant = decide(&case.kernel, range, dev).variant;
        let (gw, gb) = gpu_constants(&case.kernel, variant, &w.tflite, w.bias.as_deref())
            .expect("a weighted kernel");
        let gw = b.constant(&[gw.len()], &gw);
        let gb = gb.map(|v| b.constant(&[v.len()], &v));
        gpu_ops.push(Some(gw));
        gpu_ops.push(gb);
    }
    let out = b.activation(&case.output);
    let uses_gpu = placement.uses_gpu();
    let a = Artifact {
        producer: "test".into(),
        model: "one step".into(),
        tensors: b.tensors,
        weights_len: b.weights.len(),
        weights: b.weights,
        arena_bytes: b.arena,
        inputs,
        outputs: vec![out],
        steps: vec![Step {
            name: format!("{:?}", std::mem::discriminant(&case.kernel)),
            kernel: case.kernel.clone(),
            inputs: cpu_ops,
            outputs: vec![out],
            placement,
            gpu_operands: if uses_gpu { gpu_ops } else { vec![] },
        }],
        threads: 1,
        gpu: uses_gpu.then(|| dev.clone()),
    };
    a.validate()
        .unwrap_or_else(|e| panic!("test artifact invalid: {e}"));
    a
}

fn relative_error(got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6);
    let diff = got.iter().zip(want).fold(0f32, |m, (g, w)| {
        if g.is_nan() != w.is_nan() {
            f32::INFINITY
        } else {
            m.max((g - w).abs())
        }
    });
    diff / scale
}

/// Runs `case` on the CPU, then under every GPU placement and sync mode, and compares.
fn check(case: &Case, rng: &mut Rng, what: &str) {
    let dev = device();
    let inputs: Vec<NpyArray> = case
        .inputs
        .iter()
        .map(|s| NpyArray::from_f32(s.clone(), &rng.uniform(s.iter().product(), 1.0)))
        .collect();
    let cpu = Model::from_artifact(artifact(case, Placement::Cpu, &dev));
    let want = Session::new(&cpu, 1).run(&inputs).expect("CPU run")[0]
        .to_f32()
        .expect("f32");
    let mut placements = vec![Placement::Gpu];
    if let Some(c) = split_channels(&case.kernel) {
        let step = match &case.kernel {
            Kernel::Conv2d(p) => vector_width(GpuOp::Conv(p)),
            _ => 8,
        };
        for g in [step, c / 2, c.saturating_sub(1), 1] {
            if g > 0 && g < c {
                placements.push(Placement::Split { gpu_channels: g });
            }
        }
    }
    for placement in placements {
        let model = Model::from_artifact(artifact(case, placement, &dev));
        for (sync, memory) in [
            (SyncMode::Polling, GpuMemory::Auto),
            (SyncMode::EventWait, GpuMemory::Auto),
            (SyncMode::EventWait, GpuMemory::Buffers),
        ] {
            let options = SessionOptions {
                sync,
                memory,
                ..SessionOptions::default()
            };
            let mut session = Session::with_options(&model, options)
                .unwrap_or_else(|e| panic!("{what} {placement:?}: {e}"));
            for round in 0..2 {
                let got = session
                    .run(&inputs)
                    .unwrap_or_else(|e| panic!("{what} {placement:?} {sync:?} {memory:?}: {e}"))[0]
                    .to_f32()
                    .expect("f32");
                let err = relative_error(&got, &want);
                assert!(
                    err <= 1e-4,
                    "{what} {placement:?} {sync:?} {memory:?} round {round}: relative error {err}"
                );
            }
        }
    }
}

fn pick(rng: &mut Rng, choices: &[usize]) -> usize {
    choices[(rng.next_u64() % choices.len() as u64) as usize]
}

fn out_size(input: usize, k: usize, stride: usize, dilation: usize, same: bool) -> (usize, usize) {
    let eff = (k - 1) * dilation + 1;
    if same {
        let out = input.div_ceil(stride);
        let pad = ((out - 1) * stride + eff).saturating_sub(input);
        (out, pad / 2)
    } else {
        ((input - eff) / stride + 1, 0)
    }
}

#[allow(clippy::too_many_arguments)]
fn conv_case(
    rng: &mut Rng,
    n: usize,
    hw: [usize; 2],
    cin: usize,
    cout: usize,
    k: usize,
    stride: usize,
    dilation: usize,
    groups: usize,
    same: bool,
    activation: Activation,
    bias: bool,
) -> Case {
    let (oh, pt) = out_size(hw[0], k, stride, dilation, same);
    let (ow, pl) = out_size(hw[1], k, stride, dilation, same);
    let p = ConvParams {
        input: [n, hw[0], hw[1], cin],
        output: [n, oh, ow, cout],
        kernel: [k, k],
        stride: [stride, stride],
        dilation: [dilation, dilation],
        pad: [pt, pl],
        groups,
        activation,
    };
    let tflite = rng.uniform(cout * k * k * (cin / groups), 0.5);
    let cpu = pack_conv_weights(&tflite, &p);
    Case {
        kernel: Kernel::Conv2d(p),
        inputs: vec![vec![n, hw[0], hw[1], cin]],
        shared_constants: vec![],
        weights: Some(Weights {
            tflite,
            cpu,
            bias: bias.then(|| rng.uniform(cout, 1.0)),
        }),
        output: vec![n, oh, ow, cout],
    }
}

#[test]
fn convolution_variants_match_the_cpu() {
    let dev = device();
    let mut rng = Rng::new(11);
    let cases = [
        // Winograd: 3x3 stride 1, enough channels and tiles.
        (
            conv_case(
                &mut rng,
                1,
                [17, 15],
                32,
                40,
                3,
                1,
                1,
                1,
                true,
                Activation::Relu,
                true,
            ),
            Variant::ConvWinograd,
        ),
        (
            conv_case(
                &mut rng,
                2,
                [11, 14],
                33,
                35,
                3,
                1,
                1,
                1,
                false,
                Activation::None,
                false,
            ),
            Variant::ConvWinograd,
        ),
        // Constant weights: few input channels (a stem).
        (
            conv_case(
                &mut rng,
                1,
                [17, 15],
                3,
                16,
                3,
                2,
                1,
                1,
                true,
                Activation::Relu6,
                true,
            ),
            Variant::ConvConstants,
        ),
        // Generic: strides, dilation, odd sizes, 1x1, groups.
        (
            conv_case(
                &mut rng,
                1,
                [15, 14],
                12,
                20,
                3,
                2,
                1,
                1,
                true,
                Activation::ReluN1To1,
                true,
            ),
            Variant::ConvGeneric,
        ),
        (
            conv_case(
                &mut rng,
                1,
                [16, 16],
                8,
                13,
                3,
                1,
                2,
                1,
                true,
                Activation::Tanh,
                true,
            ),
            Variant::ConvGeneric,
        ),
        (
            conv_case(
                &mut rng,
                1,
                [9, 7],
                16,
                24,
                1,
                1,
                1,
                1,
                false,
                Activation::None,
                true,
            ),
            Variant::ConvGeneric,
        ),
        (
            conv_case(
                &mut rng,
                1,
                [12, 12],
                12,
                18,
                5,
                3,
                1,
                1,
                true,
                Activation::None,
                true,
            ),
            Variant::ConvGeneric,
        ),
        (
            conv_case(
                &mut rng,
                1,
                [10, 11],
                24,
                16,
                3,
                1,
                1,
                4,
                true,
                Activation::Relu,
                true,
            ),
            Variant::ConvGeneric,
        ),
        (
            conv_case(
                &mut rng,
                1,
                [10, 11],
                24,
                12,
                3,
                1,
                1,
                4,
                true,
                Activation::None,
                true,
            ),
            Variant::ConvGeneric,
        ),
        // Winograd from 8 input channels and 4 output tiles on, whatever the output channels.
        (
            conv_case(
                &mut rng,
                1,
                [32, 30],
                8,
                16,
                3,
                1,
                1,
                1,
                true,
                Activation::None,
                true,
            ),
            Variant::ConvWinograd,
        ),
        (
            conv_case(
                &mut rng,
                1,
                [7, 6],
                10,
                13,
                3,
                1,
                1,
                1,
                true,
                Activation::Relu6,
                false,
            ),
            Variant::ConvWinograd,
        ),
        // One output tile: generic.
        (
            conv_case(
                &mut rng,
                1,
                [6, 6],
                16,
                12,
                3,
                1,
                1,
                1,
                false,
                Activation::None,
                true,
            ),
            Variant::ConvGeneric,
        ),
    ];
    for (i, (case, variant)) in cases.iter().enumerate() {
        let Kernel::Conv2d(p) = &case.kernel else {
            unreachable!()
        };
        assert_eq!(
            decide(&case.kernel, 0..p.output[3], &dev).variant,
            *variant,
            "case {i}"
        );
        check(case, &mut rng, &format!("conv case {i}"));
    }
}

#[test]
fn random_convolutions_match_the_cpu() {
    let mut rng = Rng::new(12);
    for i in 0..6 {
        let groups = pick(&mut rng, &[1, 1, 2]);
        let cin = pick(&mut rng, &[1, 3, 4, 7, 16]) * groups;
        let cout = pick(&mut rng, &[2, 5, 8, 9, 17]) * groups;
        let k = pick(&mut rng, &[1, 2, 3]);
        let stride = pick(&mut rng, &[1, 2, 3]);
        let dilation = pick(&mut rng, &[1, 1, 2]);
        let hw = [pick(&mut rng, &[7, 8, 13]), pick(&mut rng, &[6, 9, 12])];
        let same = rng.next_u64().is_multiple_of(2);
        let case = conv_case(
            &mut rng,
            1,
            hw,
            cin,
            cout,
            k,
            stride,
            dilation,
            groups,
            same,
            Activation::Relu,
            true,
        );
        check(&case, &mut rng, &format!("random conv {i}"));
    }
}

#[allow(clippy::too_many_arguments)]
fn depthwise_case(
    rng: &mut Rng,
    hw: [usize; 2],
    c: usize,
    m: usize,
    k: usize,
    stride: usize,
    dilation: usize,
    same: bool,
) -> Case {
    let (oh, pt) = out_size(hw[0], k, stride, dilation, same);
    let (ow, pl) = out_size(hw[1], k, stride, dilation, same);
    let p = DepthwiseParams {
        input: [1, hw[0], hw[1], c],
        output: [1, oh, ow, c * m],
        kernel: [k, k],
        stride: [stride, stride],
        dilation: [dilation, dilation],
        pad: [pt, pl],
        multiplier: m,
        activation: Activation::Relu6,
    };
    let tflite = rng.uniform(k * k * c * m, 1.0);
    Case {
        kernel: Kernel::DepthwiseConv2d(p),
        inputs: vec![vec![1, hw[0], hw[1], c]],
        shared_constants: vec![],
        weights: Some(Weights {
            cpu: tflite.clone(),
            tflite,
            bias: Some(rng.uniform(c * m, 1.0)),
        }),
        output: vec![1, oh, ow, c * m],
    }
}

#[test]
fn depthwise_variants_match_the_cpu() {
    let dev = device();
    let mut rng = Rng::new(13);
    let cases = [
        (
            depthwise_case(&mut rng, [12, 13], 20, 1, 3, 1, 1, true),
            Variant::Depthwise3x3,
        ),
        (
            depthwise_case(&mut rng, [5, 3], 9, 1, 3, 1, 1, true),
            Variant::Depthwise3x3,
        ),
        (
            depthwise_case(&mut rng, [11, 12], 16, 1, 3, 2, 1, true),
            Variant::DepthwiseGeneric,
        ),
        (
            depthwise_case(&mut rng, [10, 9], 6, 2, 3, 1, 1, false),
            Variant::DepthwiseGeneric,
        ),
        (
            depthwise_case(&mut rng, [14, 14], 5, 3, 5, 2, 1, true),
            Variant::DepthwiseGeneric,
        ),
        (
            depthwise_case(&mut rng, [13, 12], 8, 1, 3, 1, 2, true),
            Variant::DepthwiseGeneric,
        ),
    ];
    for (i, (case, variant)) in cases.iter().enumerate() {
        let c = split_channels(&case.kernel).expect("splittable");
        assert_eq!(
            decide(&case.kernel, 0..c, &dev).variant,
            *variant,
            "case {i}"
        );
        check(case, &mut rng, &format!("depthwise case {i}"));
    }
}

/// Parts whose input reaches `CHANNELS_INNER_FROM_BYTES` launch with the channel blocks
/// innermost; the splits `check` runs put both launch orders in one layer (the whole layer and
/// `C - 1` GPU channels past the threshold, 8 and 1 below it).
#[test]
fn large_depthwise_parts_launch_channels_inner_and_match_the_cpu() {
    let dev = device();
    let mut rng = Rng::new(17);
    let cases = [
        (
            depthwise_case(&mut rng, [128, 130], 68, 1, 3, 1, 1, true),
            Variant::Depthwise3x3,
        ),
        (
            depthwise_case(&mut rng, [90, 97], 124, 1, 5, 2, 1, true),
            Variant::DepthwiseGeneric,
        ),
        (
            depthwise_case(&mut rng, [120, 121], 75, 2, 3, 1, 1, false),
            Variant::DepthwiseGeneric,
        ),
    ];
    for (i, (case, variant)) in cases.iter().enumerate() {
        let Kernel::DepthwiseConv2d(p) = &case.kernel else {
            unreachable!("depthwise cases")
        };
        let c = p.output[3];
        assert!(
            p.range_input_bytes(0, c) >= CHANNELS_INNER_FROM_BYTES,
            "case {i}"
        );
        assert!(depthwise_channels_inner(p, 0..c), "case {i}");
        assert!(!depthwise_channels_inner(p, c - 8..c), "case {i}");
        let d = decide(&case.kernel, 0..c, &dev);
        assert_eq!(d.variant, *variant, "case {i}");
        assert!(d.channels_inner, "case {i}");
        assert!(
            !decide(&case.kernel, c - 8..c, &dev).channels_inner,
            "case {i}"
        );
        assert_eq!(
            d.grid[0],
            c.div_ceil(8).div_ceil(d.work_group[0]) * d.work_group[0]
        );
        check(case, &mut rng, &format!("large depthwise case {i}"));
    }
}

#[test]
fn fully_connected_matches_the_cpu() {
    let mut rng = Rng::new(14);
    for (rows, depth, units, bias) in [(1, 64, 20, true), (5, 33, 17, false), (8, 100, 64, true)] {
        let p = FullyConnectedParams {
            rows,
            depth,
            units,
            activation: Activation::Relu,
        };
        let tflite = rng.uniform(units * depth, 0.5);
        let case = Case {
            kernel: Kernel::FullyConnected(p),
            inputs: vec![vec![rows, depth]],
            shared_constants: vec![],
            weights: Some(Weights {
                cpu: tflite.clone(),
                tflite,
                bias: bias.then(|| rng.uniform(units, 1.0)),
            }),
            output: vec![rows, units],
        };
        check(&case, &mut rng, &format!("fc {rows}x{depth}x{units}"));
    }
}

#[test]
fn transposed_convolution_matches_the_cpu() {
    let mut rng = Rng::new(15);
    for (stride, k, bias) in [(2, 3, true), (1, 2, false), (3, 4, true)] {
        let (h, w, c, oc) = (5, 6, 4, 7);
        let (oh, ow) = (h * stride, w * stride);
        let pad_total = |o: usize, i: usize| ((i - 1) * stride + k).saturating_sub(o);
        let p = TransposeConvParams {
            input: [1, h, w, c],
            output: [1, oh, ow, oc],
            kernel: [k, k],
            stride: [stride, stride],
            pad: [pad_total(oh, h) / 2, pad_total(ow, w) / 2],
            activation: Activation::None,
        };
        let tflite = rng.uniform(oc * k * k * c, 0.5);
        let cpu = pack_transpose_conv_weights(&tflite, &p);
        let case = Case {
            kernel: Kernel::TransposeConv(p),
            inputs: vec![vec![1, h, w, c]],
            shared_constants: vec![],
            weights: Some(Weights {
                tflite,
                cpu,
                bias: bias.then(|| rng.uniform(oc, 1.0)),
            }),
            output: vec![1, oh, ow, oc],
        };
        check(&case, &mut rng, &format!("transpose conv s{stride} k{k}"));
    }
}

fn simple(kernel: Kernel, inputs: Vec<Vec<usize>>, output: Vec<usize>) -> Case {
    Case {
        kernel,
        inputs,
        shared_constants: vec![],
        weights: None,
        output,
    }
}

#[test]
fn element_wise_kernels_match_the_cpu() {
    let mut rng = Rng::new(16);
    for kind in [
        BinaryKind::Add,
        BinaryKind::Sub,
        BinaryKind::Mul,
        BinaryKind::Div,
    ] {
        for (a, b, out) in [
            (vec![2, 5, 6, 8], vec![2, 5, 6, 8], vec![2, 5, 6, 8]),
            (vec![1, 5, 6, 8], vec![8], vec![1, 5, 6, 8]),
            (vec![3, 1, 4], vec![1, 5, 1], vec![3, 5, 4]),
        ] {
            let k = Kernel::Binary {
                kind,
                activation: Activation::Relu6,
            };
            check(&simple(k, vec![a, b], out), &mut rng, &format!("{kind:?}"));
        }
    }
    // A constant operand, read by both devices from the weights.
    let mut case = simple(
        Kernel::Binary {
            kind: BinaryKind::Mul,
            activation: Activation::None,
        },
        vec![vec![1, 4, 4, 6]],
        vec![1, 4, 4, 6],
    );
    case.shared_constants = vec![(vec![6], rng.uniform(6, 2.0))];
    check(&case, &mut rng, "mul by a constant");
    for op in [
        UnaryKind::Logistic,
        UnaryKind::Tanh,
        UnaryKind::Relu,
        UnaryKind::Relu6,
        UnaryKind::ReluN1To1,
        UnaryKind::HardSwish,
        UnaryKind::LeakyRelu { alpha: 0.2 },
    ] {
        check(
            &simple(Kernel::Unary(op), vec![vec![3, 7, 5]], vec![3, 7, 5]),
            &mut rng,
            &format!("{op:?}"),
        );
    }
    check(
        &simple(
            Kernel::Prelu,
            vec![vec![1, 4, 5, 6], vec![1, 1, 6]],
            vec![1, 4, 5, 6],
        ),
        &mut rng,
        "prelu",
    );
    check(
        &simple(
            Kernel::Softmax { beta: 1.5 },
            vec![vec![3, 17]],
            vec![3, 17],
        ),
        &mut rng,
        "softmax",
    );
}

#[test]
fn pooling_mean_and_resize_match_the_cpu() {
    let mut rng = Rng::new(17);
    for (filter, stride, pad, out) in [
        ([3, 3], [2, 2], [1, 1], [1, 6, 5, 7]),
        ([2, 2], [2, 2], [0, 0], [1, 5, 5, 7]),
        ([11, 10], [1, 1], [0, 0], [1, 1, 1, 7]),
    ] {
        let p = PoolParams {
            filter,
            stride,
            pad,
            activation: Activation::Relu,
        };
        check(
            &simple(
                Kernel::MaxPool2d(p.clone()),
                vec![vec![1, 11, 10, 7]],
                out.to_vec(),
            ),
            &mut rng,
            "max pool",
        );
        check(
            &simple(Kernel::AvgPool2d(p), vec![vec![1, 11, 10, 7]], out.to_vec()),
            &mut rng,
            "avg pool",
        );
    }
    check(
        &simple(
            Kernel::Mean { axes: vec![1, 2] },
            vec![vec![2, 5, 6, 9]],
            vec![2, 9],
        ),
        &mut rng,
        "mean hw",
    );
    check(
        &simple(
            Kernel::Mean { axes: vec![0, 3] },
            vec![vec![2, 5, 6, 9]],
            vec![5, 6],
        ),
        &mut rng,
        "mean n c",
    );
    for (ac, hp) in [(false, false), (true, false), (false, true)] {
        check(
            &simple(
                Kernel::ResizeBilinear {
                    align_corners: ac,
                    half_pixel_centers: hp,
                },
                vec![vec![1, 5, 7, 3]],
                vec![1, 11, 9, 3],
            ),
            &mut rng,
            "resize bilinear",
        );
        check(
            &simple(
                Kernel::ResizeNearest {
                    align_corners: ac,
                    half_pixel_centers: hp,
                },
                vec![vec![1, 5, 7, 3]],
                vec![1, 12, 6, 3],
            ),
            &mut rng,
            "resize nearest",
        );
    }
}

#[test]
fn data_movement_matches_the_cpu() {
    let mut rng = Rng::new(18);
    check(
        &simple(Kernel::Copy, vec![vec![4, 6]], vec![24]),
        &mut rng,
        "copy",
    );
    check(
        &simple(
            Kernel::Transpose {
                perm: vec![0, 3, 1, 2],
            },
            vec![vec![2, 3, 4, 5]],
            vec![2, 5, 3, 4],
        ),
        &mut rng,
        "transpose",
    );
    check(
        &simple(
            Kernel::StridedSlice {
                begin: vec![1, 6, 0],
                stride: vec![1, -2, 3],
                count: vec![2, 3, 2],
            },
            vec![vec![3, 7, 5]],
            vec![2, 3, 2],
        ),
        &mut rng,
        "strided slice",
    );
    check(
        &simple(
            Kernel::Pad {
                before: vec![0, 1, 2, 0],
                after: vec![0, 2, 0, 1],
                value: 0.5,
            },
            vec![vec![1, 4, 3, 2]],
            vec![1, 7, 5, 3],
        ),
        &mut rng,
        "pad",
    );
    check(
        &simple(
            Kernel::Concat { axis: 3 },
            vec![vec![1, 3, 4, 2], vec![1, 3, 4, 5], vec![1, 3, 4, 1]],
            vec![1, 3, 4, 8],
        ),
        &mut rng,
        "concat channels",
    );
    check(
        &simple(
            Kernel::Concat { axis: 1 },
            vec![vec![2, 3, 4], vec![2, 1, 4]],
            vec![2, 4, 4],
        ),
        &mut rng,
        "concat rows",
    );
    check(
        &simple(
            Kernel::DepthToSpace { block: 2 },
            vec![vec![1, 3, 4, 12]],
            vec![1, 6, 8, 3],
        ),
        &mut rng,
        "depth to space",
    );
    check(
        &simple(
            Kernel::SpaceToDepth { block: 2 },
            vec![vec![1, 6, 4, 3]],
            vec![1, 3, 2, 12],
        ),
        &mut rng,
        "space to depth",
    );
}

#[test]
fn batch_matmul_matches_the_cpu() {
    let mut rng = Rng::new(19);
    for (lhs, rhs, out, adj_lhs, adj_rhs) in [
        (vec![2, 3, 4], vec![2, 4, 5], vec![2, 3, 5], false, false),
        (vec![2, 4, 3], vec![1, 5, 4], vec![2, 3, 5], true, true),
        (vec![3, 6], vec![6, 2], vec![3, 2], false, false),
    ] {
        let p = BatchMatMulParams {
            lhs: lhs.clone(),
            rhs: rhs.clone(),
            out: out.clone(),
            adj_lhs,
            adj_rhs,
        };
        check(
            &simple(Kernel::BatchMatMul(p), vec![lhs, rhs], out),
            &mut rng,
            "batch matmul",
        );
    }
}
