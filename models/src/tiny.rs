//! Tiny networks that together use every operator tandem reads, for tests and references.

use crate::net::Net;
use anyhow::Result;
use std::sync::Arc;
use tandem_compiler::ir::op::{Conv2d, StridedSlice, TransposeConv};
use tandem_compiler::ir::{
    Activation, BinaryKind, DimStorage, Graph, IndexVector, Op, Padding, Sparsity, Tensor,
    UnaryKind,
};
use tandem_runtime::DType;

/// ADD/SUB/MUL/DIV with broadcasting, every activation op, CONCATENATION and SOFTMAX.
pub fn tiny_elementwise(seed: u64) -> Result<Graph> {
    let (mut net, x) = Net::new(seed, &[1, 8, 8, 16]);
    let bias = net.weights("bias", &[16], 0.5);
    let a = net.b.op1(
        Op::Binary {
            kind: BinaryKind::Add,
            activation: Activation::Relu,
        },
        &[x, bias],
    )?;
    let scalar = net.b.const_f32("scalar", &[1], &[0.25]);
    let b = net.b.op1(
        Op::Binary {
            kind: BinaryKind::Sub,
            activation: Activation::None,
        },
        &[a, scalar],
    )?;
    let scale = net.weights("scale", &[1, 1, 1, 16], 2.0);
    let c = net.b.op1(
        Op::Binary {
            kind: BinaryKind::Mul,
            activation: Activation::None,
        },
        &[b, scale],
    )?;
    let divisor: Vec<f32> = net.rng.uniform(16, 0.5).iter().map(|v| v + 1.0).collect();
    let divisor = net.b.const_f32("divisor", &[16], &divisor);
    let d = net.b.op1(
        Op::Binary {
            kind: BinaryKind::Div,
            activation: Activation::None,
        },
        &[c, divisor],
    )?;
    let d = net.b.op1(
        Op::Binary {
            kind: BinaryKind::Add,
            activation: Activation::None,
        },
        &[d, x],
    )?;
    let mut branches = Vec::new();
    for kind in [
        UnaryKind::Logistic,
        UnaryKind::Tanh,
        UnaryKind::Relu,
        UnaryKind::Relu6,
        UnaryKind::ReluN1To1,
        UnaryKind::HardSwish,
        UnaryKind::LeakyRelu { alpha: 0.2 },
    ] {
        branches.push(net.b.op1(Op::Unary(kind), &[d])?);
    }
    let alpha = net.weights("alpha", &[1, 1, 16], 0.5);
    branches.push(net.b.op1(Op::Prelu, &[d, alpha])?);
    let cat = net.concat(&branches, 3)?;
    let out = net.softmax(cat)?;
    Ok(net.finish(out, "tiny_elementwise"))
}

/// PAD, PADV2, CONV_2D (strided, dilated), DEPTHWISE_CONV_2D (multiplier 2), both pools,
/// TRANSPOSE_CONV, DEPTH_TO_SPACE, SPACE_TO_DEPTH, both resizes, MEAN, FULLY_CONNECTED.
pub fn tiny_conv(seed: u64) -> Result<Graph> {
    let (mut net, x) = Net::new(seed, &[1, 16, 16, 8]);
    let pads = net
        .b
        .const_i32("paddings", &[4, 2], &[0, 0, 1, 1, 2, 2, 0, 0]);
    let x = net.b.op1(Op::Pad, &[x, pads])?; // [1,18,20,8]
    let x = net.conv_valid(x, 16, [3, 3], 2, Activation::Relu)?; // [1,8,9,16]
    let x = net.conv_full(x, 16, [3, 3], 1, 2, Padding::Same, Activation::None, 1.0)?;
    let x = net.depthwise(x, 2, 3, 1, Padding::Same, Activation::Relu6)?; // [1,8,9,32]
    let x = net.max_pool(x, 2, 2, Padding::Same)?; // [1,4,5,32]
    let x = net.avg_pool(x, 3, 1, Padding::Same)?;
    let out_shape = net.b.const_i32("output_shape", &[4], &[1, 8, 10, 12]);
    let w = net.weights("tconv_w", &[12, 3, 3, 32], 0.2);
    let bias = net.weights("tconv_b", &[12], 0.05);
    let x = net.b.op1(
        Op::TransposeConv(TransposeConv {
            padding: Padding::Same,
            stride: [2, 2],
            activation: Activation::None,
        }),
        &[out_shape, w, x, bias],
    )?; // [1,8,10,12]
    let pads = net
        .b
        .const_i32("paddings2", &[4, 2], &[0, 0, 0, 0, 1, 1, 0, 0]);
    let value = net.b.const_f32("pad_value", &[], &[0.5]);
    let x = net.b.op1(Op::PadV2, &[x, pads, value])?; // [1,8,12,12]
    let x = net.b.op1(Op::DepthToSpace { block_size: 2 }, &[x])?; // [1,16,24,3]
    let x = net.b.op1(Op::SpaceToDepth { block_size: 4 }, &[x])?; // [1,4,6,48]
    let size = net.b.const_i32("size", &[2], &[7, 9]);
    let up = net.b.op1(
        Op::ResizeBilinear {
            align_corners: false,
            half_pixel_centers: true,
        },
        &[x, size],
    )?;
    let size2 = net.b.const_i32("size2", &[2], &[8, 12]);
    let near = net.b.op1(
        Op::ResizeNearestNeighbor {
            align_corners: false,
            half_pixel_centers: false,
        },
        &[x, size2],
    )?;
    let m1 = net.global_mean(up, false)?;
    let m2 = net.global_mean(near, false)?;
    let m = net.concat(&[m1, m2], 1)?; // [1,96]
    let logits = net.fc(m, 10, Activation::None, 1.0)?;
    let out = net.softmax(logits)?;
    Ok(net.finish(out, "tiny_conv"))
}

/// Shape arithmetic (SHAPE → STRIDED_SLICE → PACK → RESHAPE), TRANSPOSE, BATCH_MATMUL, SPLIT,
/// SLICE, strided STRIDED_SLICE, SQUEEZE.
pub fn tiny_shape(seed: u64) -> Result<Graph> {
    let (mut net, x) = Net::new(seed, &[1, 4, 6, 8]);
    let shape = net.b.op1(
        Op::Shape {
            out_type: DType::I32,
        },
        &[x],
    )?;
    let (b0, e1, s1) = (
        net.b.const_i32("begin", &[1], &[0]),
        net.b.const_i32("end", &[1], &[1]),
        net.b.const_i32("strides", &[1], &[1]),
    );
    let batch = net.b.op1(
        Op::StridedSlice(StridedSlice {
            shrink_axis_mask: 1,
            ..Default::default()
        }),
        &[shape, b0, e1, s1],
    )?;
    let rows = net.b.const_i32("rows", &[], &[24]);
    let cols = net.b.const_i32("cols", &[], &[8]);
    let target = net.b.op1(
        Op::Pack {
            axis: 0,
            values_count: 3,
        },
        &[batch, rows, cols],
    )?;
    let x = net.b.op1(Op::Reshape { new_shape: None }, &[x, target])?; // [1,24,8]
    let perm = net.b.const_i32("perm", &[3], &[0, 2, 1]);
    let x = net.b.op1(Op::Transpose, &[x, perm])?; // [1,8,24]
    let rhs = net.weights("rhs", &[1, 24, 6], 0.3);
    let x = net.b.op1(
        Op::BatchMatMul {
            adj_x: false,
            adj_y: false,
        },
        &[x, rhs],
    )?; // [1,8,6]
    let axis = net.b.const_i32("axis", &[], &[2]);
    let parts = net
        .b
        .op(Op::Split { num_splits: 2 }, &[Some(axis), Some(x)], 2)?; // 2 × [1,8,3]
    let (begin, size) = (
        net.b.const_i32("sl_begin", &[3], &[0, 2, 0]),
        net.b.const_i32("sl_size", &[3], &[1, -1, 3]),
    );
    let a = net.b.op1(Op::Slice, &[parts[0], begin, size])?; // [1,6,3]
    let (b, e, s) = (
        net.b.const_i32("ss_begin", &[3], &[0, 0, 0]),
        net.b.const_i32("ss_end", &[3], &[1, 8, 3]),
        net.b.const_i32("ss_strides", &[3], &[1, 2, 1]),
    );
    let c = net.b.op1(
        Op::StridedSlice(StridedSlice::default()),
        &[parts[1], b, e, s],
    )?; // [1,4,3]
    let cat = net.concat(&[a, c], 1)?; // [1,10,3]
    let out = net.b.op1(Op::Squeeze { dims: vec![0] }, &[cat])?; // [10,3]
    Ok(net.finish(out, "tiny_shape"))
}

/// Converter-style weight storage: float16 conv weights behind DEQUANTIZE, and sparse (CSR)
/// fully-connected weights behind DENSIFY.
pub fn tiny_weights(seed: u64) -> Result<Graph> {
    let (mut net, x) = Net::new(seed, &[1, 8, 8, 4]);
    let w = net.rng.uniform(16 * 3 * 3 * 4, Net::he(36, 1.0));
    let half: Vec<u8> = w
        .iter()
        .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
        .collect();
    let w16 = net
        .b
        .constant("conv_w_fp16", DType::F16, &[16, 3, 3, 4], half);
    let w32 = net.b.op1(Op::Dequantize, &[w16])?;
    let bias = net.weights("conv_b", &[16], 0.05);
    let conv = Conv2d {
        padding: Padding::Same,
        stride: [1, 1],
        dilation: [1, 1],
        activation: Activation::Relu,
    };
    let x = net.b.op1(Op::Conv2d(conv), &[x, w32, bias])?;
    let m = net.global_mean(x, false)?; // [1,16]

    // A [10,16] weight with about 70% zeros, stored CSR: row-dense, column-sparse.
    let (rows, cols) = (10usize, 16usize);
    let mut segments = vec![0i32];
    let mut indices = Vec::new();
    let mut values = Vec::new();
    for _ in 0..rows {
        for col in 0..cols {
            if net.rng.symmetric() > 0.4 {
                indices.push(col as i32);
                values.push(net.rng.symmetric() * 0.6);
            }
        }
        segments.push(indices.len() as i32);
    }
    let mut sparse = Tensor::new("fc_w_sparse", DType::F32, vec![rows, cols]);
    sparse.data = Some(Arc::from(
        values
            .iter()
            .flat_map(|v: &f32| v.to_le_bytes())
            .collect::<Vec<u8>>(),
    ));
    sparse.sparsity = Some(Sparsity {
        traversal_order: vec![0, 1],
        block_map: vec![],
        dims: vec![
            DimStorage::Dense { size: rows },
            DimStorage::SparseCsr {
                segments: IndexVector::I32(segments),
                indices: IndexVector::I32(indices),
            },
        ],
    });
    let sparse = net.b.tensor(sparse);
    let dense = net.b.op1(Op::Densify, &[sparse])?;
    let fc_bias = net.weights("fc_b", &[rows], 0.05);
    let logits = net.b.op1(
        Op::FullyConnected {
            activation: Activation::None,
            keep_num_dims: false,
        },
        &[m, dense, fc_bias],
    )?;
    let out = net.softmax(logits)?;
    Ok(net.finish(out, "tiny_weights"))
}

/// The custom op `Convolution2DTransposeBias` (as segmentation models use it). The official
/// interpreter has no kernel for it, so this net is for reading, inspecting and tandem's own
/// execution only.
pub fn tiny_transpose_conv_bias(seed: u64) -> Result<Graph> {
    let (mut net, x) = Net::new(seed, &[1, 6, 6, 8]);
    let w = net.weights("w", &[4, 3, 3, 8], 0.3);
    let bias = net.weights("b", &[4], 0.05);
    let attrs = TransposeConv {
        padding: Padding::Same,
        stride: [2, 2],
        activation: Activation::None,
    };
    let out = net.b.op1(Op::TransposeConvBias(attrs), &[x, w, bias])?; // [1,12,12,4]
    Ok(net.finish(out, "tiny_transpose_conv_bias"))
}
