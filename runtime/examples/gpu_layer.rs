//! Times one convolution or fully-connected layer on the OpenCL device alone (GPU-only step),
//! for tuning the kernels: `cargo run --release -p tandem-runtime --example gpu_layer --
//! conv H W CIN COUT K STRIDE`, `-- dw H W C K STRIDE` or `-- fc ROWS DEPTH UNITS`. Prints the dispatch, the median
//! latency and GFLOP/s. Set `POCL_MAX_PTHREAD_COUNT=1` for the one-core setting.

use std::time::Instant;
use tandem_runtime::artifact::{Artifact, Kernel, Placement, Step, Storage, TensorDesc};
use tandem_runtime::cpu::conv::ConvParams;
use tandem_runtime::cpu::depthwise::DepthwiseParams;
use tandem_runtime::cpu::fully_connected::FullyConnectedParams;
use tandem_runtime::cpu::Activation;
use tandem_runtime::gpu::device::GpuDevice;
use tandem_runtime::gpu::launch::{decide, split_channels};
use tandem_runtime::gpu::layout::gpu_constants;
use tandem_runtime::npy::NpyArray;
use tandem_runtime::rng::Rng;
use tandem_runtime::session::{Model, Session, SessionOptions, SyncMode};
use tandem_runtime::DType;

fn tensor(name: &str, shape: Vec<usize>, storage: Storage) -> TensorDesc {
    TensorDesc {
        name: name.into(),
        dtype: DType::F32,
        shape,
        storage,
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<usize> = std::env::args()
        .skip(2)
        .map(|a| a.parse().unwrap_or(0))
        .collect();
    let kind = std::env::args().nth(1).unwrap_or_default();
    let dev = GpuDevice::open()?.info;
    let mut rng = Rng::new(1);
    let (kernel, in_shape, out_shape, tflite_w, flops) = if kind == "fc" {
        let (rows, depth, units) = (args[0], args[1], args[2]);
        let p = FullyConnectedParams {
            rows,
            depth,
            units,
            activation: Activation::None,
        };
        (
            Kernel::FullyConnected(p),
            vec![rows, depth],
            vec![rows, units],
            rng.uniform(units * depth, 0.1),
            2.0 * (rows * depth * units) as f64,
        )
    } else if kind == "dw" {
        let (h, w, c, k, s) = (args[0], args[1], args[2], args[3], args[4]);
        let (oh, ow) = (h.div_ceil(s), w.div_ceil(s));
        let pad = |i: usize, o: usize| ((o - 1) * s + k).saturating_sub(i) / 2;
        let p = DepthwiseParams {
            input: [1, h, w, c],
            output: [1, oh, ow, c],
            kernel: [k, k],
            stride: [s, s],
            dilation: [1, 1],
            pad: [pad(h, oh), pad(w, ow)],
            multiplier: 1,
            activation: Activation::Relu,
        };
        (
            Kernel::DepthwiseConv2d(p),
            vec![1, h, w, c],
            vec![1, oh, ow, c],
            rng.uniform(k * k * c, 0.1),
            2.0 * (oh * ow * c * k * k) as f64,
        )
    } else {
        let (h, w, cin, cout, k, s) = (args[0], args[1], args[2], args[3], args[4], args[5]);
        let (oh, ow) = (h.div_ceil(s), w.div_ceil(s));
        let pad = |i: usize, o: usize| ((o - 1) * s + k).saturating_sub(i) / 2;
        let p = ConvParams {
            input: [1, h, w, cin],
            output: [1, oh, ow, cout],
            kernel: [k, k],
            stride: [s, s],
            dilation: [1, 1],
            pad: [pad(h, oh), pad(w, ow)],
            groups: 1,
            activation: Activation::Relu,
        };
        let flops = 2.0 * (oh * ow * cout * k * k * cin) as f64;
        (
            Kernel::Conv2d(p),
            vec![1, h, w, cin],
            vec![1, oh, ow, cout],
            rng.uniform(cout * k * k * cin, 0.1),
            flops,
        )
    };
    let c = split_channels(&kernel).unwrap_or(0);
    let d = decide(&kernel, 0..c, &dev);
    let (gw, gb) = gpu_constants(&kernel, d.variant, &tflite_w, None).ok_or("no layout")?;
    let in_bytes = in_shape.iter().product::<usize>() * 4;
    let out_off = in_bytes.div_ceil(64) * 64;
    let out_bytes = out_shape.iter().product::<usize>() * 4;
    let gb = gb.unwrap_or_default();
    let mut weights = gw.clone();
    let bias_off = weights.len().div_ceil(16) * 16;
    weights.resize(bias_off, 0.0);
    weights.extend_from_slice(&gb);
    let tensors = vec![
        tensor("x", in_shape.clone(), Storage::Arena { offset: 0 }),
        tensor("w", vec![gw.len()], Storage::Constant { offset: 0 }),
        tensor("b", vec![gb.len()], Storage::Constant { offset: bias_off }),
        tensor("y", out_shape, Storage::Arena { offset: out_off }),
    ];
    let artifact = Artifact {
        producer: "gpu_layer".into(),
        model: kind.clone(),
        tensors,
        weights_len: weights.len(),
        weights,
        arena_bytes: out_off + out_bytes,
        inputs: vec![0],
        outputs: vec![3],
        // The CPU operands are never read (GPU-only step); validation checks shapes only for
        // the GPU layout, so the CPU slots point at the GPU tensors.
        steps: vec![Step {
            name: kind.clone(),
            kernel,
            inputs: vec![Some(0), Some(1), Some(2)],
            outputs: vec![3],
            placement: Placement::Gpu,
            gpu_operands: vec![Some(0), Some(1), Some(2)],
        }],
        threads: 1,
        gpu: Some(dev.clone()),
    };
    let model = Model::from_artifact(artifact);
    let options = SessionOptions {
        sync: SyncMode::EventWait,
        ..SessionOptions::default()
    };
    let mut session = Session::with_options(&model, options)?;
    let x = NpyArray::from_f32(
        in_shape.clone(),
        &rng.uniform(in_shape.iter().product(), 1.0),
    );
    let input = [x];
    for _ in 0..3 {
        session.run(&input)?;
    }
    let mut times: Vec<f64> = (0..15)
        .map(|_| {
            let t = Instant::now();
            let _ = session.run(&input);
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    times.sort_by(f64::total_cmp);
    let ms = times[times.len() / 2];
    println!("{d:?}\n{ms:.3} ms, {:.1} GFLOP/s", flops / ms / 1e6);
    Ok(())
}
