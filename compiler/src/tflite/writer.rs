//! Writing the graph IR back to a `.tflite` file that the official interpreter loads.
//!
//! Tensors keep their table order; operators are written in execution order; each constant gets
//! its own buffer (buffer 0 is the empty sentinel the format reserves).

use super::fb;
use super::reader::encode_transpose_conv_bias_options;
use crate::ir::op::{Conv2d, DepthwiseConv2d, Pool2d, TransposeConv};
use crate::ir::{
    Activation, BinaryKind, DimStorage, Graph, IndexVector, Op, Padding, Tensor, UnaryKind,
};
use anyhow::{bail, Context, Result};
use std::collections::HashMap;
use tandem_runtime::DType;

/// The schema version the official interpreter expects.
const SCHEMA_VERSION: u32 = 3;

/// Serialises `graph` as a `.tflite` flatbuffer.
pub fn write_model(graph: &Graph) -> Result<Vec<u8>> {
    let mut buffers = vec![fb::BufferT::default()];
    let mut codes: Vec<fb::OperatorCodeT> = Vec::new();
    let mut code_index: HashMap<(i32, Option<String>, i32), u32> = HashMap::new();

    let tensors = graph
        .tensors
        .iter()
        .enumerate()
        .map(|(i, t)| tensor_t(t, &mut buffers).with_context(|| format!("tensor {i} '{}'", t.name)))
        .collect::<Result<Vec<_>>>()?;

    let mut operators = Vec::new();
    for node in graph.execution_order()? {
        let n = &graph.dag[node];
        let context = || format!("operator {} ({})", node.index(), n.op.type_name());
        let (custom, builtin_options, custom_options) = options_t(&n.op).with_context(context)?;
        let builtin = n.op.builtin();
        let key = (builtin.0, custom.clone(), n.version);
        let opcode_index = *code_index.entry(key).or_insert_with(|| {
            codes.push(fb::OperatorCodeT {
                deprecated_builtin_code: builtin.0.min(127) as i8,
                custom_code: custom,
                version: n.version,
                builtin_code: builtin,
            });
            (codes.len() - 1) as u32
        });
        operators.push(fb::OperatorT {
            opcode_index,
            inputs: Some(
                n.inputs
                    .iter()
                    .map(|t| t.map_or(-1, |t| t.0 as i32))
                    .collect(),
            ),
            outputs: Some(n.outputs.iter().map(|t| t.0 as i32).collect()),
            builtin_options,
            custom_options,
            ..Default::default()
        });
    }

    let metadata = graph
        .metadata
        .iter()
        .map(|m| {
            buffers.push(fb::BufferT {
                data: Some(m.data.clone()),
                ..Default::default()
            });
            fb::MetadataT {
                name: Some(m.name.clone()),
                buffer: (buffers.len() - 1) as u32,
            }
        })
        .collect();
    let tensor_maps = |list: &[(String, crate::ir::TensorId)]| {
        list.iter()
            .map(|(name, t)| fb::TensorMapT {
                name: Some(name.clone()),
                tensor_index: t.0 as u32,
            })
            .collect::<Vec<_>>()
    };
    let signature_defs = graph
        .signatures
        .iter()
        .map(|s| fb::SignatureDefT {
            inputs: Some(tensor_maps(&s.inputs)),
            outputs: Some(tensor_maps(&s.outputs)),
            signature_key: Some(s.key.clone()),
            subgraph_index: 0,
        })
        .collect();

    let model = fb::ModelT {
        version: SCHEMA_VERSION,
        operator_codes: Some(codes),
        subgraphs: Some(vec![fb::SubGraphT {
            tensors: Some(tensors),
            inputs: Some(graph.inputs.iter().map(|t| t.0 as i32).collect()),
            outputs: Some(graph.outputs.iter().map(|t| t.0 as i32).collect()),
            operators: Some(operators),
            name: Some("main".into()),
        }]),
        description: Some(if graph.description.is_empty() {
            "written by tandem".into()
        } else {
            graph.description.clone()
        }),
        buffers: Some(buffers),
        metadata_buffer: None,
        metadata: Some(metadata),
        signature_defs: Some(signature_defs),
    };
    let mut fbb = flatbuffers::FlatBufferBuilder::with_capacity(1 << 20);
    let root = model.pack(&mut fbb);
    fb::finish_model_buffer(&mut fbb, root);
    Ok(fbb.finished_data().to_vec())
}

fn tensor_t(t: &Tensor, buffers: &mut Vec<fb::BufferT>) -> Result<fb::TensorT> {
    let buffer = match &t.data {
        Some(data) => {
            buffers.push(fb::BufferT {
                data: Some(data.to_vec()),
                ..Default::default()
            });
            (buffers.len() - 1) as u32
        }
        None => 0,
    };
    let dims = |v: &[usize]| -> Result<Vec<i32>> {
        v.iter()
            .map(|&d| {
                i32::try_from(d).with_context(|| format!("dimension {d} does not fit in int32"))
            })
            .collect()
    };
    Ok(fb::TensorT {
        shape: Some(dims(&t.shape)?),
        type_: dtype_to_fb(t.dtype),
        buffer,
        name: Some(t.name.clone()),
        quantization: t.quantization.as_ref().map(|q| {
            Box::new(fb::QuantizationParametersT {
                min: (!q.min.is_empty()).then(|| q.min.clone()),
                max: (!q.max.is_empty()).then(|| q.max.clone()),
                scale: (!q.scale.is_empty()).then(|| q.scale.clone()),
                zero_point: (!q.zero_point.is_empty()).then(|| q.zero_point.clone()),
                details: fb::QuantizationDetailsT::NONE,
                quantized_dimension: q.quantized_dimension,
            })
        }),
        is_variable: t.is_variable,
        sparsity: t.sparsity.as_ref().map(|s| {
            Box::new(fb::SparsityParametersT {
                traversal_order: Some(s.traversal_order.clone()),
                block_map: Some(s.block_map.clone()),
                dim_metadata: Some(s.dims.iter().map(dim_metadata_t).collect()),
            })
        }),
        shape_signature: t.shape_signature.clone(),
        has_rank: true,
    })
}

fn dim_metadata_t(d: &DimStorage) -> fb::DimensionMetadataT {
    let vector = |v: &IndexVector| match v {
        IndexVector::I32(v) => fb::SparseIndexVectorT::Int32Vector(Box::new(fb::Int32VectorT {
            values: Some(v.clone()),
        })),
        IndexVector::U16(v) => fb::SparseIndexVectorT::Uint16Vector(Box::new(fb::Uint16VectorT {
            values: Some(v.clone()),
        })),
        IndexVector::U8(v) => fb::SparseIndexVectorT::Uint8Vector(Box::new(fb::Uint8VectorT {
            values: Some(v.clone()),
        })),
    };
    match d {
        DimStorage::Dense { size } => fb::DimensionMetadataT {
            format: fb::DimensionType::DENSE,
            dense_size: *size as i32,
            ..Default::default()
        },
        DimStorage::SparseCsr { segments, indices } => fb::DimensionMetadataT {
            format: fb::DimensionType::SPARSE_CSR,
            dense_size: 0,
            array_segments: vector(segments),
            array_indices: vector(indices),
        },
    }
}

/// (custom code, builtin options, custom options) of an op.
type OpOptions = (Option<String>, fb::BuiltinOptionsT, Option<Vec<u8>>);

fn options_t(op: &Op) -> Result<OpOptions> {
    use fb::BuiltinOptionsT as O;
    let act = activation_to_fb;
    let builtin = |o: O| Ok((None, o, None));
    match op {
        Op::Binary { kind, activation } => builtin(match kind {
            BinaryKind::Add => O::AddOptions(Box::new(fb::AddOptionsT {
                fused_activation_function: act(*activation),
                pot_scale_int16: true,
            })),
            BinaryKind::Sub => O::SubOptions(Box::new(fb::SubOptionsT {
                fused_activation_function: act(*activation),
                pot_scale_int16: true,
            })),
            BinaryKind::Mul => O::MulOptions(Box::new(fb::MulOptionsT {
                fused_activation_function: act(*activation),
            })),
            BinaryKind::Div => O::DivOptions(Box::new(fb::DivOptionsT {
                fused_activation_function: act(*activation),
            })),
        }),
        Op::Unary(UnaryKind::LeakyRelu { alpha }) => {
            builtin(O::LeakyReluOptions(Box::new(fb::LeakyReluOptionsT {
                alpha: *alpha,
            })))
        }
        Op::Unary(UnaryKind::HardSwish) => builtin(O::HardSwishOptions(Box::default())),
        Op::Unary(_) | Op::Prelu | Op::Slice => builtin(O::NONE),
        Op::AveragePool2d(p) | Op::MaxPool2d(p) => builtin(O::Pool2DOptions(Box::new(pool_t(p)))),
        Op::Concatenation { axis, activation } => builtin(O::ConcatenationOptions(Box::new(
            fb::ConcatenationOptionsT {
                axis: *axis,
                fused_activation_function: act(*activation),
            },
        ))),
        Op::Conv2d(c) => builtin(O::Conv2DOptions(Box::new(conv_t(c)))),
        Op::DepthwiseConv2d(c) => builtin(O::DepthwiseConv2DOptions(Box::new(depthwise_t(c)))),
        Op::TransposeConv(c) => builtin(O::TransposeConvOptions(Box::new(transpose_conv_t(c)))),
        Op::FullyConnected {
            activation,
            keep_num_dims,
        } => builtin(O::FullyConnectedOptions(Box::new(
            fb::FullyConnectedOptionsT {
                fused_activation_function: act(*activation),
                keep_num_dims: *keep_num_dims,
                ..Default::default()
            },
        ))),
        Op::BatchMatMul { adj_x, adj_y } => {
            builtin(O::BatchMatMulOptions(Box::new(fb::BatchMatMulOptionsT {
                adj_x: *adj_x,
                adj_y: *adj_y,
                asymmetric_quantize_inputs: false,
            })))
        }
        Op::Dequantize => builtin(O::DequantizeOptions(Box::default())),
        Op::Densify => builtin(O::DensifyOptions(Box::default())),
        Op::Pad => builtin(O::PadOptions(Box::default())),
        Op::PadV2 => builtin(O::PadV2Options(Box::default())),
        Op::Mean { keep_dims } => builtin(O::ReducerOptions(Box::new(fb::ReducerOptionsT {
            keep_dims: *keep_dims,
        }))),
        Op::Reshape { new_shape } => builtin(O::ReshapeOptions(Box::new(fb::ReshapeOptionsT {
            new_shape: new_shape.clone(),
        }))),
        Op::Squeeze { dims } => builtin(O::SqueezeOptions(Box::new(fb::SqueezeOptionsT {
            squeeze_dims: Some(dims.clone()),
        }))),
        Op::Shape { out_type } => builtin(O::ShapeOptions(Box::new(fb::ShapeOptionsT {
            out_type: dtype_to_fb(*out_type),
        }))),
        Op::Pack { axis, values_count } => builtin(O::PackOptions(Box::new(fb::PackOptionsT {
            values_count: *values_count as i32,
            axis: *axis,
        }))),
        Op::StridedSlice(s) => {
            builtin(O::StridedSliceOptions(Box::new(fb::StridedSliceOptionsT {
                begin_mask: s.begin_mask,
                end_mask: s.end_mask,
                ellipsis_mask: s.ellipsis_mask,
                new_axis_mask: s.new_axis_mask,
                shrink_axis_mask: s.shrink_axis_mask,
                offset: s.offset,
            })))
        }
        Op::Split { num_splits } => builtin(O::SplitOptions(Box::new(fb::SplitOptionsT {
            num_splits: *num_splits as i32,
        }))),
        Op::Transpose => builtin(O::TransposeOptions(Box::default())),
        Op::Softmax { beta } => builtin(O::SoftmaxOptions(Box::new(fb::SoftmaxOptionsT {
            beta: *beta,
        }))),
        Op::ResizeBilinear {
            align_corners,
            half_pixel_centers,
        } => builtin(O::ResizeBilinearOptions(Box::new(
            fb::ResizeBilinearOptionsT {
                align_corners: *align_corners,
                half_pixel_centers: *half_pixel_centers,
            },
        ))),
        Op::ResizeNearestNeighbor {
            align_corners,
            half_pixel_centers,
        } => builtin(O::ResizeNearestNeighborOptions(Box::new(
            fb::ResizeNearestNeighborOptionsT {
                align_corners: *align_corners,
                half_pixel_centers: *half_pixel_centers,
            },
        ))),
        Op::DepthToSpace { block_size } => {
            builtin(O::DepthToSpaceOptions(Box::new(fb::DepthToSpaceOptionsT {
                block_size: *block_size as i32,
            })))
        }
        Op::SpaceToDepth { block_size } => {
            builtin(O::SpaceToDepthOptions(Box::new(fb::SpaceToDepthOptionsT {
                block_size: *block_size as i32,
            })))
        }
        Op::TransposeConvBias(c) => Ok((
            Some(crate::ir::op::TRANSPOSE_CONV_BIAS.to_string()),
            O::NONE,
            Some(encode_transpose_conv_bias_options(c)),
        )),
        Op::Custom { name, options } => Ok((Some(name.clone()), O::NONE, Some(options.clone()))),
        Op::OtherBuiltin {
            has_options: false, ..
        } => builtin(O::NONE),
        Op::OtherBuiltin {
            code,
            has_options: true,
        } => bail!(
            "cannot write builtin operator {} (code {code}): tandem does not model its options",
            crate::ir::op::builtin_name(fb::BuiltinOperator(*code))
        ),
    }
}

fn pool_t(p: &Pool2d) -> fb::Pool2DOptionsT {
    fb::Pool2DOptionsT {
        padding: padding_to_fb(p.padding),
        stride_w: p.stride[1] as i32,
        stride_h: p.stride[0] as i32,
        filter_width: p.filter[1] as i32,
        filter_height: p.filter[0] as i32,
        fused_activation_function: activation_to_fb(p.activation),
    }
}

fn conv_t(c: &Conv2d) -> fb::Conv2DOptionsT {
    fb::Conv2DOptionsT {
        padding: padding_to_fb(c.padding),
        stride_w: c.stride[1] as i32,
        stride_h: c.stride[0] as i32,
        fused_activation_function: activation_to_fb(c.activation),
        dilation_w_factor: c.dilation[1] as i32,
        dilation_h_factor: c.dilation[0] as i32,
        quantized_bias_type: fb::TensorType::FLOAT32,
    }
}

fn depthwise_t(c: &DepthwiseConv2d) -> fb::DepthwiseConv2DOptionsT {
    fb::DepthwiseConv2DOptionsT {
        padding: padding_to_fb(c.padding),
        stride_w: c.stride[1] as i32,
        stride_h: c.stride[0] as i32,
        depth_multiplier: c.depth_multiplier as i32,
        fused_activation_function: activation_to_fb(c.activation),
        dilation_w_factor: c.dilation[1] as i32,
        dilation_h_factor: c.dilation[0] as i32,
    }
}

fn transpose_conv_t(c: &TransposeConv) -> fb::TransposeConvOptionsT {
    fb::TransposeConvOptionsT {
        padding: padding_to_fb(c.padding),
        stride_w: c.stride[1] as i32,
        stride_h: c.stride[0] as i32,
        fused_activation_function: activation_to_fb(c.activation),
        quantized_bias_type: fb::TensorType::FLOAT32,
    }
}

fn padding_to_fb(p: Padding) -> fb::Padding {
    match p {
        Padding::Same => fb::Padding::SAME,
        Padding::Valid => fb::Padding::VALID,
    }
}

fn activation_to_fb(a: Activation) -> fb::ActivationFunctionType {
    use fb::ActivationFunctionType as A;
    match a {
        Activation::None => A::NONE,
        Activation::Relu => A::RELU,
        Activation::ReluN1To1 => A::RELU_N1_TO_1,
        Activation::Relu6 => A::RELU6,
        Activation::Tanh => A::TANH,
        Activation::SignBit => A::SIGN_BIT,
    }
}

/// Maps [`DType`] to the schema tensor type.
pub fn dtype_to_fb(d: DType) -> fb::TensorType {
    use fb::TensorType as T;
    match d {
        DType::F32 => T::FLOAT32,
        DType::F16 => T::FLOAT16,
        DType::BF16 => T::BFLOAT16,
        DType::F64 => T::FLOAT64,
        DType::I4 => T::INT4,
        DType::I8 => T::INT8,
        DType::I16 => T::INT16,
        DType::I32 => T::INT32,
        DType::I64 => T::INT64,
        DType::U8 => T::UINT8,
        DType::U16 => T::UINT16,
        DType::U32 => T::UINT32,
        DType::U64 => T::UINT64,
        DType::Bool => T::BOOL,
        DType::String => T::STRING,
        DType::Complex64 => T::COMPLEX64,
        DType::Complex128 => T::COMPLEX128,
        DType::Resource => T::RESOURCE,
        DType::Variant => T::VARIANT,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::builder::GraphBuilder;
    use crate::tflite::read_model;

    #[test]
    fn written_graphs_read_back_unchanged() {
        let mut b = GraphBuilder::new();
        let x = b.input("x", DType::F32, &[1, 5, 5, 3]);
        let w = b.const_f32("w", &[4, 3, 3, 3], &[0.5; 108]);
        let conv = Conv2d {
            padding: Padding::Valid,
            stride: [2, 1],
            dilation: [1, 1],
            activation: Activation::Relu6,
        };
        let y = b
            .op(Op::Conv2d(conv), &[Some(x), Some(w), None], 1)
            .expect("conv")[0];
        let axes = b.const_i32("axes", &[2], &[1, 2]);
        let z = b
            .op1(Op::Mean { keep_dims: true }, &[y, axes])
            .expect("mean");
        b.output(z);
        let mut graph = b.finish("unit");
        graph.metadata.push(crate::ir::Metadata {
            name: "plan".into(),
            data: vec![1, 2, 3],
        });
        let back = read_model(&write_model(&graph).expect("writes")).expect("reads");
        assert_eq!(back.tensors, graph.tensors);
        let ops = |g: &Graph| {
            g.dag
                .node_weights()
                .map(|n| (n.op.clone(), n.inputs.clone(), n.outputs.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(ops(&back), ops(&graph));
        assert_eq!(back.tensor(back.outputs[0]).shape, vec![1, 1, 1, 4]);
        assert_eq!(back.metadata, graph.metadata);
        assert_eq!(back.description, "unit");
    }
}
