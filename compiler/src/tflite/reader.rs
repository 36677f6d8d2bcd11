//! Reading `.tflite` files into the graph IR.
//!
//! The flatbuffer is verified once, in [`TfliteFile::parse`]; everything after reads the verified
//! tables and checks only what the verifier cannot know (indices into other tables, data sizes
//! against shapes, operator attributes). Every error names what is wrong and where (operator
//! index, tensor index and name, buffer index).

use super::fb;
use crate::ir::op::{
    Conv2d, DepthwiseConv2d, Pool2d, StridedSlice, TransposeConv, TRANSPOSE_CONV_BIAS,
};
use crate::ir::{
    shape, Activation, BinaryKind, DimStorage, Graph, IndexVector, Metadata, Op, Padding,
    Quantization, Signature, Sparsity, Tensor, TensorId, UnaryKind,
};
use anyhow::{anyhow, bail, ensure, Context, Result};
use std::sync::Arc;
use tandem_runtime::DType;

/// A `.tflite` file whose flatbuffer has passed verification.
pub struct TfliteFile<'a> {
    bytes: &'a [u8],
    model: fb::Model<'a>,
}

impl<'a> TfliteFile<'a> {
    /// Checks the file identifier and verifies the whole flatbuffer.
    pub fn parse(bytes: &'a [u8]) -> Result<Self> {
        ensure!(
            bytes.len() >= 8,
            "the file is {} bytes long, too short to be a TFLite model",
            bytes.len()
        );
        if &bytes[4..8] != b"TFL3" {
            bail!(
                "not a TFLite model: the file identifier at bytes 4..8 is {:?}, expected \"TFL3\"",
                String::from_utf8_lossy(&bytes[4..8])
            );
        }
        // Large models have many tables and buffers; the verifier still bounds-checks every one.
        let opts = flatbuffers::VerifierOptions {
            max_tables: 100_000_000,
            max_apparent_size: usize::MAX,
            ..Default::default()
        };
        let model = flatbuffers::root_with_opts::<fb::Model>(&opts, bytes)
            .map_err(|e| anyhow!("corrupt TFLite flatbuffer: {e}"))?;
        Ok(TfliteFile { bytes, model })
    }

    /// The verified root table.
    pub fn model(&self) -> fb::Model<'a> {
        self.model
    }
}

/// Reads a `.tflite` file into a validated [`Graph`] (main subgraph; shapes inferred and checked).
pub fn read_model(bytes: &[u8]) -> Result<Graph> {
    let file = TfliteFile::parse(bytes)?;
    let mut graph = Reader { file: &file }.read()?;
    shape::infer_graph(&mut graph)?;
    Ok(graph)
}

struct OpCode {
    builtin: fb::BuiltinOperator,
    custom: Option<String>,
    version: i32,
}

struct Reader<'f, 'a> {
    file: &'f TfliteFile<'a>,
}

impl Reader<'_, '_> {
    fn read(&self) -> Result<Graph> {
        let model = self.file.model;
        let subgraphs = model
            .subgraphs()
            .ok_or_else(|| anyhow!("the model has no subgraphs"))?;
        ensure!(!subgraphs.is_empty(), "the model has no subgraphs");
        let sg = subgraphs.get(0);
        let buffers = model.buffers();
        let codes = self.op_codes()?;

        let mut graph = Graph::new();
        graph.description = model.description().unwrap_or_default().to_string();
        let tensors = sg
            .tensors()
            .ok_or_else(|| anyhow!("subgraph 0 has no tensor table"))?;
        for (i, t) in tensors.iter().enumerate() {
            let tensor = self
                .tensor(t, buffers)
                .with_context(|| format!("tensor {i} '{}'", t.name().unwrap_or("")))?;
            graph.add_tensor(tensor);
        }
        let n_tensors = graph.tensors.len();
        let tensor_ref = |v: i32, what: &str| -> Result<TensorId> {
            usize::try_from(v)
                .ok()
                .filter(|&v| v < n_tensors)
                .map(TensorId)
                .ok_or_else(|| {
                    anyhow!("{what} refers to tensor {v}, but subgraph 0 has {n_tensors} tensors")
                })
        };
        graph.inputs = sg
            .inputs()
            .unwrap_or_default()
            .iter()
            .map(|v| tensor_ref(v, "a graph input"))
            .collect::<Result<_>>()?;
        graph.outputs = sg
            .outputs()
            .unwrap_or_default()
            .iter()
            .map(|v| tensor_ref(v, "a graph output"))
            .collect::<Result<_>>()?;

        for (index, op) in sg.operators().unwrap_or_default().iter().enumerate() {
            let code = codes.get(op.opcode_index() as usize).ok_or_else(|| {
                anyhow!(
                    "operator {index}: opcode index {} is out of range ({} operator codes)",
                    op.opcode_index(),
                    codes.len()
                )
            })?;
            let name = match &code.custom {
                Some(c) if code.builtin == fb::BuiltinOperator::CUSTOM => format!("CUSTOM:{c}"),
                _ => crate::ir::op::builtin_name(code.builtin),
            };
            let context = || format!("operator {index} ({name})");
            let inputs = op
                .inputs()
                .unwrap_or_default()
                .iter()
                .enumerate()
                .map(|(slot, v)| match v {
                    -1 => Ok(None),
                    v => tensor_ref(v, &format!("input {slot}")).map(Some),
                })
                .collect::<Result<Vec<_>>>()
                .with_context(context)?;
            let outputs = op
                .outputs()
                .unwrap_or_default()
                .iter()
                .enumerate()
                .map(|(slot, v)| tensor_ref(v, &format!("output {slot}")))
                .collect::<Result<Vec<_>>>()
                .with_context(context)?;
            let decoded = self.decode_op(code, &op).with_context(context)?;
            let node = graph
                .add_node(decoded, inputs, outputs)
                .with_context(context)?;
            graph.dag[node].version = code.version;
        }
        graph.link_late_producers();

        if let Some(entries) = model.metadata() {
            for (i, m) in entries.iter().enumerate() {
                let name = m.name().unwrap_or_default().to_string();
                let data = self
                    .buffer_data(buffers, m.buffer())
                    .with_context(|| format!("metadata entry {i} '{name}'"))?
                    .unwrap_or_default();
                graph.metadata.push(Metadata {
                    name,
                    data: data.to_vec(),
                });
            }
        }
        for (i, s) in model
            .signature_defs()
            .unwrap_or_default()
            .iter()
            .enumerate()
        {
            if s.subgraph_index() != 0 {
                continue;
            }
            let maps = |list: Option<
                flatbuffers::Vector<'_, flatbuffers::ForwardsUOffset<fb::TensorMap<'_>>>,
            >| {
                list.unwrap_or_default()
                    .iter()
                    .map(|m| {
                        let t = i32::try_from(m.tensor_index()).unwrap_or(i32::MAX);
                        Ok((
                            m.name().unwrap_or_default().to_string(),
                            tensor_ref(t, "a signature entry")?,
                        ))
                    })
                    .collect::<Result<Vec<_>>>()
            };
            graph.signatures.push(Signature {
                key: s.signature_key().unwrap_or_default().to_string(),
                inputs: maps(s.inputs()).with_context(|| format!("signature {i}"))?,
                outputs: maps(s.outputs()).with_context(|| format!("signature {i}"))?,
            });
        }
        Ok(graph)
    }

    fn op_codes(&self) -> Result<Vec<OpCode>> {
        let codes = self.file.model.operator_codes().unwrap_or_default();
        codes
            .iter()
            .enumerate()
            .map(|(i, c)| {
                // Old files only fill the deprecated byte; new ones put 127 there for larger codes.
                let builtin = c.builtin_code().0.max(c.deprecated_builtin_code() as i32);
                ensure!(
                    builtin >= 0,
                    "operator code {i} has a negative builtin code {builtin}"
                );
                let builtin = fb::BuiltinOperator(builtin);
                let custom = c.custom_code().map(str::to_string);
                if builtin == fb::BuiltinOperator::CUSTOM && custom.is_none() {
                    bail!("operator code {i} is CUSTOM but has no custom_code name");
                }
                Ok(OpCode {
                    builtin,
                    custom,
                    version: c.version(),
                })
            })
            .collect()
    }

    /// The bytes of buffer `index` (`None` when empty), inline or at an offset past the
    /// flatbuffer.
    fn buffer_data<'b>(
        &'b self,
        buffers: Option<flatbuffers::Vector<'b, flatbuffers::ForwardsUOffset<fb::Buffer<'b>>>>,
        index: u32,
    ) -> Result<Option<&'b [u8]>> {
        let buffers = buffers.unwrap_or_default();
        let i = index as usize;
        ensure!(
            i < buffers.len(),
            "buffer index {index} is out of range ({} buffers)",
            buffers.len()
        );
        let b = buffers.get(i);
        if let Some(data) = b.data() {
            if !data.is_empty() {
                return Ok(Some(data.bytes()));
            }
        }
        if b.offset() > 1 {
            let bytes = self.file.bytes;
            let start = usize::try_from(b.offset()).ok();
            let end = start
                .zip(usize::try_from(b.size()).ok())
                .and_then(|(s, n)| s.checked_add(n));
            return match (start, end) {
                (Some(s), Some(e)) if e <= bytes.len() => Ok(Some(&bytes[s..e])),
                _ => bail!(
                    "buffer {index} points at bytes {}..+{} past the end of the {}-byte file",
                    b.offset(),
                    b.size(),
                    bytes.len()
                ),
            };
        }
        Ok(None)
    }

    fn tensor(
        &self,
        t: fb::Tensor<'_>,
        buffers: Option<flatbuffers::Vector<'_, flatbuffers::ForwardsUOffset<fb::Buffer<'_>>>>,
    ) -> Result<Tensor> {
        let dtype = dtype_from_fb(t.type_())?;
        let shape = t
            .shape()
            .unwrap_or_default()
            .iter()
            .map(|d| usize::try_from(d).map_err(|_| anyhow!("shape has negative dimension {d}")))
            .collect::<Result<Vec<usize>>>()?;
        let elements = shape::element_count(&shape).ok_or_else(|| {
            anyhow!(
                "shape {shape:?} is too large (over {} elements)",
                shape::MAX_ELEMENTS
            )
        })?;
        let sparsity = t.sparsity().map(sparsity_from_fb).transpose()?;
        let data = self
            .buffer_data(buffers, t.buffer())?
            .map(|d| Arc::<[u8]>::from(d.to_vec()));
        if let (Some(data), None, Some(size)) = (&data, &sparsity, dtype.size_bytes()) {
            let expected = elements
                .checked_mul(size)
                .ok_or_else(|| anyhow!("shape too large"))?;
            ensure!(
                data.len() == expected,
                "constant data is {} bytes but shape {shape:?} of {dtype} needs {expected} (buffer {})",
                data.len(),
                t.buffer()
            );
        }
        let quantization = t.quantization().and_then(|q| {
            let v = |x: Option<flatbuffers::Vector<'_, f32>>| {
                x.map(|x| x.iter().collect()).unwrap_or_default()
            };
            let quant = Quantization {
                min: v(q.min()),
                max: v(q.max()),
                scale: v(q.scale()),
                zero_point: q
                    .zero_point()
                    .map(|x| x.iter().collect())
                    .unwrap_or_default(),
                quantized_dimension: q.quantized_dimension(),
            };
            (quant != Quantization::default()).then_some(quant)
        });
        Ok(Tensor {
            name: t.name().unwrap_or_default().to_string(),
            dtype,
            shape,
            shape_signature: t.shape_signature().map(|s| s.iter().collect()),
            data,
            quantization,
            sparsity,
            is_variable: t.is_variable(),
        })
    }

    fn decode_op(&self, code: &OpCode, op: &fb::Operator<'_>) -> Result<Op> {
        use fb::BuiltinOperator as B;
        let b = code.builtin;
        let kind = op.builtin_options_type();
        let expect = |want: fb::BuiltinOptions| -> Result<()> {
            ensure!(
                kind == fb::BuiltinOptions::NONE || kind == want,
                "has builtin options of type {}, expected {}",
                kind.variant_name().unwrap_or("unknown"),
                want.variant_name().unwrap_or("unknown")
            );
            Ok(())
        };
        let missing = |what: &str| anyhow!("has no {what}");
        let binary =
            |kind: BinaryKind, activation: Option<fb::ActivationFunctionType>| -> Result<Op> {
                Ok(Op::Binary {
                    kind,
                    activation: activation_from_fb(activation.unwrap_or_default())?,
                })
            };
        Ok(match b {
            B::ADD => {
                expect(fb::BuiltinOptions::AddOptions)?;
                binary(
                    BinaryKind::Add,
                    op.builtin_options_as_add_options()
                        .map(|o| o.fused_activation_function()),
                )?
            }
            B::SUB => {
                expect(fb::BuiltinOptions::SubOptions)?;
                binary(
                    BinaryKind::Sub,
                    op.builtin_options_as_sub_options()
                        .map(|o| o.fused_activation_function()),
                )?
            }
            B::MUL => {
                expect(fb::BuiltinOptions::MulOptions)?;
                binary(
                    BinaryKind::Mul,
                    op.builtin_options_as_mul_options()
                        .map(|o| o.fused_activation_function()),
                )?
            }
            B::DIV => {
                expect(fb::BuiltinOptions::DivOptions)?;
                binary(
                    BinaryKind::Div,
                    op.builtin_options_as_div_options()
                        .map(|o| o.fused_activation_function()),
                )?
            }
            B::AVERAGE_POOL_2D | B::MAX_POOL_2D => {
                expect(fb::BuiltinOptions::Pool2DOptions)?;
                let o = op
                    .builtin_options_as_pool_2_doptions()
                    .ok_or_else(|| missing("Pool2DOptions"))?;
                let pool = Pool2d {
                    padding: padding_from_fb(o.padding())?,
                    stride: [
                        positive(o.stride_h(), "stride_h")?,
                        positive(o.stride_w(), "stride_w")?,
                    ],
                    filter: [
                        positive(o.filter_height(), "filter_height")?,
                        positive(o.filter_width(), "filter_width")?,
                    ],
                    activation: activation_from_fb(o.fused_activation_function())?,
                };
                if b == B::MAX_POOL_2D {
                    Op::MaxPool2d(pool)
                } else {
                    Op::AveragePool2d(pool)
                }
            }
            B::CONCATENATION => {
                expect(fb::BuiltinOptions::ConcatenationOptions)?;
                let o = op
                    .builtin_options_as_concatenation_options()
                    .ok_or_else(|| missing("ConcatenationOptions"))?;
                Op::Concatenation {
                    axis: o.axis(),
                    activation: activation_from_fb(o.fused_activation_function())?,
                }
            }
            B::CONV_2D => {
                expect(fb::BuiltinOptions::Conv2DOptions)?;
                let o = op
                    .builtin_options_as_conv_2_doptions()
                    .ok_or_else(|| missing("Conv2DOptions"))?;
                Op::Conv2d(Conv2d {
                    padding: padding_from_fb(o.padding())?,
                    stride: [
                        positive(o.stride_h(), "stride_h")?,
                        positive(o.stride_w(), "stride_w")?,
                    ],
                    dilation: [
                        positive(o.dilation_h_factor(), "dilation_h_factor")?,
                        positive(o.dilation_w_factor(), "dilation_w_factor")?,
                    ],
                    activation: activation_from_fb(o.fused_activation_function())?,
                })
            }
            B::DEPTHWISE_CONV_2D => {
                expect(fb::BuiltinOptions::DepthwiseConv2DOptions)?;
                let o = op
                    .builtin_options_as_depthwise_conv_2_doptions()
                    .ok_or_else(|| missing("DepthwiseConv2DOptions"))?;
                Op::DepthwiseConv2d(DepthwiseConv2d {
                    padding: padding_from_fb(o.padding())?,
                    stride: [
                        positive(o.stride_h(), "stride_h")?,
                        positive(o.stride_w(), "stride_w")?,
                    ],
                    dilation: [
                        positive(o.dilation_h_factor(), "dilation_h_factor")?,
                        positive(o.dilation_w_factor(), "dilation_w_factor")?,
                    ],
                    depth_multiplier: usize::try_from(o.depth_multiplier()).map_err(|_| {
                        anyhow!("negative depth_multiplier {}", o.depth_multiplier())
                    })?,
                    activation: activation_from_fb(o.fused_activation_function())?,
                })
            }
            B::TRANSPOSE_CONV => {
                expect(fb::BuiltinOptions::TransposeConvOptions)?;
                let o = op
                    .builtin_options_as_transpose_conv_options()
                    .ok_or_else(|| missing("TransposeConvOptions"))?;
                Op::TransposeConv(TransposeConv {
                    padding: padding_from_fb(o.padding())?,
                    stride: [
                        positive(o.stride_h(), "stride_h")?,
                        positive(o.stride_w(), "stride_w")?,
                    ],
                    activation: activation_from_fb(o.fused_activation_function())?,
                })
            }
            B::FULLY_CONNECTED => {
                expect(fb::BuiltinOptions::FullyConnectedOptions)?;
                let o = op.builtin_options_as_fully_connected_options();
                if let Some(o) = o {
                    ensure!(
                        o.weights_format() == fb::FullyConnectedOptionsWeightsFormat::DEFAULT,
                        "uses the shuffled int8 weights format, which tandem does not read"
                    );
                }
                Op::FullyConnected {
                    activation: activation_from_fb(
                        o.map(|o| o.fused_activation_function()).unwrap_or_default(),
                    )?,
                    keep_num_dims: o.is_some_and(|o| o.keep_num_dims()),
                }
            }
            B::BATCH_MATMUL => {
                expect(fb::BuiltinOptions::BatchMatMulOptions)?;
                let o = op.builtin_options_as_batch_mat_mul_options();
                Op::BatchMatMul {
                    adj_x: o.is_some_and(|o| o.adj_x()),
                    adj_y: o.is_some_and(|o| o.adj_y()),
                }
            }
            B::DEQUANTIZE => Op::Dequantize,
            B::DENSIFY => Op::Densify,
            B::PAD => Op::Pad,
            B::PADV2 => Op::PadV2,
            B::MEAN => {
                expect(fb::BuiltinOptions::ReducerOptions)?;
                Op::Mean {
                    keep_dims: op
                        .builtin_options_as_reducer_options()
                        .is_some_and(|o| o.keep_dims()),
                }
            }
            B::RESHAPE => {
                expect(fb::BuiltinOptions::ReshapeOptions)?;
                Op::Reshape {
                    new_shape: op
                        .builtin_options_as_reshape_options()
                        .and_then(|o| o.new_shape())
                        .map(|s| s.iter().collect()),
                }
            }
            B::SQUEEZE => {
                expect(fb::BuiltinOptions::SqueezeOptions)?;
                Op::Squeeze {
                    dims: op
                        .builtin_options_as_squeeze_options()
                        .and_then(|o| o.squeeze_dims())
                        .map(|s| s.iter().collect())
                        .unwrap_or_default(),
                }
            }
            B::SHAPE => {
                expect(fb::BuiltinOptions::ShapeOptions)?;
                let out = op
                    .builtin_options_as_shape_options()
                    .map(|o| o.out_type())
                    .unwrap_or(fb::TensorType::INT32);
                Op::Shape {
                    out_type: dtype_from_fb(out)?,
                }
            }
            B::PACK => {
                expect(fb::BuiltinOptions::PackOptions)?;
                let o = op
                    .builtin_options_as_pack_options()
                    .ok_or_else(|| missing("PackOptions"))?;
                Op::Pack {
                    axis: o.axis(),
                    values_count: usize::try_from(o.values_count())
                        .map_err(|_| anyhow!("negative values_count {}", o.values_count()))?,
                }
            }
            B::STRIDED_SLICE => {
                expect(fb::BuiltinOptions::StridedSliceOptions)?;
                let o = op.builtin_options_as_strided_slice_options();
                Op::StridedSlice(o.map_or_else(StridedSlice::default, |o| StridedSlice {
                    begin_mask: o.begin_mask(),
                    end_mask: o.end_mask(),
                    ellipsis_mask: o.ellipsis_mask(),
                    new_axis_mask: o.new_axis_mask(),
                    shrink_axis_mask: o.shrink_axis_mask(),
                    offset: o.offset(),
                }))
            }
            B::SLICE => Op::Slice,
            B::SPLIT => {
                expect(fb::BuiltinOptions::SplitOptions)?;
                let o = op
                    .builtin_options_as_split_options()
                    .ok_or_else(|| missing("SplitOptions"))?;
                Op::Split {
                    num_splits: positive(o.num_splits(), "num_splits")?,
                }
            }
            B::TRANSPOSE => Op::Transpose,
            B::SOFTMAX => {
                expect(fb::BuiltinOptions::SoftmaxOptions)?;
                Op::Softmax {
                    beta: op
                        .builtin_options_as_softmax_options()
                        .map_or(1.0, |o| o.beta()),
                }
            }
            B::LOGISTIC => Op::Unary(UnaryKind::Logistic),
            B::TANH => Op::Unary(UnaryKind::Tanh),
            B::RELU => Op::Unary(UnaryKind::Relu),
            B::RELU6 => Op::Unary(UnaryKind::Relu6),
            B::RELU_N1_TO_1 => Op::Unary(UnaryKind::ReluN1To1),
            B::HARD_SWISH => Op::Unary(UnaryKind::HardSwish),
            B::LEAKY_RELU => {
                expect(fb::BuiltinOptions::LeakyReluOptions)?;
                Op::Unary(UnaryKind::LeakyRelu {
                    alpha: op
                        .builtin_options_as_leaky_relu_options()
                        .map_or(0.0, |o| o.alpha()),
                })
            }
            B::PRELU => Op::Prelu,
            B::RESIZE_BILINEAR => {
                expect(fb::BuiltinOptions::ResizeBilinearOptions)?;
                let o = op.builtin_options_as_resize_bilinear_options();
                Op::ResizeBilinear {
                    align_corners: o.is_some_and(|o| o.align_corners()),
                    half_pixel_centers: o.is_some_and(|o| o.half_pixel_centers()),
                }
            }
            B::RESIZE_NEAREST_NEIGHBOR => {
                expect(fb::BuiltinOptions::ResizeNearestNeighborOptions)?;
                let o = op.builtin_options_as_resize_nearest_neighbor_options();
                Op::ResizeNearestNeighbor {
                    align_corners: o.is_some_and(|o| o.align_corners()),
                    half_pixel_centers: o.is_some_and(|o| o.half_pixel_centers()),
                }
            }
            B::DEPTH_TO_SPACE => {
                expect(fb::BuiltinOptions::DepthToSpaceOptions)?;
                let o = op
                    .builtin_options_as_depth_to_space_options()
                    .ok_or_else(|| missing("DepthToSpaceOptions"))?;
                Op::DepthToSpace {
                    block_size: positive(o.block_size(), "block_size")?,
                }
            }
            B::SPACE_TO_DEPTH => {
                expect(fb::BuiltinOptions::SpaceToDepthOptions)?;
                let o = op
                    .builtin_options_as_space_to_depth_options()
                    .ok_or_else(|| missing("SpaceToDepthOptions"))?;
                Op::SpaceToDepth {
                    block_size: positive(o.block_size(), "block_size")?,
                }
            }
            B::CUSTOM => {
                let name = code.custom.clone().unwrap_or_default();
                let options = self.custom_options(op)?;
                if name == TRANSPOSE_CONV_BIAS {
                    Op::TransposeConvBias(transpose_conv_bias_options(&options)?)
                } else {
                    Op::Custom { name, options }
                }
            }
            other => Op::OtherBuiltin {
                code: other.0,
                has_options: kind != fb::BuiltinOptions::NONE,
            },
        })
    }

    fn custom_options(&self, op: &fb::Operator<'_>) -> Result<Vec<u8>> {
        if let Some(o) = op.custom_options() {
            return Ok(o.bytes().to_vec());
        }
        let (offset, size) = (
            op.large_custom_options_offset(),
            op.large_custom_options_size(),
        );
        if offset > 1 {
            let bytes = self.file.bytes;
            let s = usize::try_from(offset).ok();
            let e = s
                .zip(usize::try_from(size).ok())
                .and_then(|(s, n)| s.checked_add(n));
            return match (s, e) {
                (Some(s), Some(e)) if e <= bytes.len() => Ok(bytes[s..e].to_vec()),
                _ => bail!("custom options at {offset}..+{size} lie past the end of the file"),
            };
        }
        Ok(Vec::new())
    }
}

/// Parses the raw `TfLiteTransposeConvParams` struct (padding, stride_w, stride_h as i32; padding
/// 1 = SAME, 2 = VALID) that `Convolution2DTransposeBias` stores as custom options.
fn transpose_conv_bias_options(raw: &[u8]) -> Result<TransposeConv> {
    ensure!(
        raw.len() >= 12,
        "{TRANSPOSE_CONV_BIAS} options are {} bytes, need 12 (padding, stride_w, stride_h)",
        raw.len()
    );
    let word =
        |i: usize| i32::from_le_bytes([raw[4 * i], raw[4 * i + 1], raw[4 * i + 2], raw[4 * i + 3]]);
    let padding = match word(0) {
        1 => Padding::Same,
        2 => Padding::Valid,
        p => bail!("{TRANSPOSE_CONV_BIAS} has unknown padding {p}"),
    };
    Ok(TransposeConv {
        padding,
        stride: [
            positive(word(2), "stride_h")?,
            positive(word(1), "stride_w")?,
        ],
        activation: Activation::None,
    })
}

/// Encodes `Convolution2DTransposeBias` options (inverse of [`transpose_conv_bias_options`]).
pub fn encode_transpose_conv_bias_options(c: &TransposeConv) -> Vec<u8> {
    let padding: i32 = match c.padding {
        Padding::Same => 1,
        Padding::Valid => 2,
    };
    [padding, c.stride[1] as i32, c.stride[0] as i32]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect()
}

fn positive(v: i32, what: &str) -> Result<usize> {
    usize::try_from(v)
        .ok()
        .filter(|&v| v > 0)
        .ok_or_else(|| anyhow!("{what} is {v}, must be positive"))
}

/// Maps a schema tensor type to [`DType`].
pub fn dtype_from_fb(t: fb::TensorType) -> Result<DType> {
    use fb::TensorType as T;
    Ok(match t {
        T::FLOAT32 => DType::F32,
        T::FLOAT16 => DType::F16,
        T::BFLOAT16 => DType::BF16,
        T::FLOAT64 => DType::F64,
        T::INT4 => DType::I4,
        T::INT8 => DType::I8,
        T::INT16 => DType::I16,
        T::INT32 => DType::I32,
        T::INT64 => DType::I64,
        T::UINT8 => DType::U8,
        T::UINT16 => DType::U16,
        T::UINT32 => DType::U32,
        T::UINT64 => DType::U64,
        T::BOOL => DType::Bool,
        T::STRING => DType::String,
        T::COMPLEX64 => DType::Complex64,
        T::COMPLEX128 => DType::Complex128,
        T::RESOURCE => DType::Resource,
        T::VARIANT => DType::Variant,
        other => bail!("unknown tensor type {}", other.0),
    })
}

fn padding_from_fb(p: fb::Padding) -> Result<Padding> {
    match p {
        fb::Padding::SAME => Ok(Padding::Same),
        fb::Padding::VALID => Ok(Padding::Valid),
        other => bail!("unknown padding {}", other.0),
    }
}

fn activation_from_fb(a: fb::ActivationFunctionType) -> Result<Activation> {
    use fb::ActivationFunctionType as A;
    Ok(match a {
        A::NONE => Activation::None,
        A::RELU => Activation::Relu,
        A::RELU_N1_TO_1 => Activation::ReluN1To1,
        A::RELU6 => Activation::Relu6,
        A::TANH => Activation::Tanh,
        A::SIGN_BIT => Activation::SignBit,
        other => bail!("unknown fused activation {}", other.0),
    })
}

fn sparsity_from_fb(s: fb::SparsityParameters<'_>) -> Result<Sparsity> {
    let index_vector =
        |kind: fb::SparseIndexVector, d: &fb::DimensionMetadata<'_>, segments: bool| {
            let v = match kind {
                fb::SparseIndexVector::Int32Vector => {
                    let t = if segments {
                        d.array_segments_as_int_32_vector()
                    } else {
                        d.array_indices_as_int_32_vector()
                    };
                    t.and_then(|t| t.values())
                        .map(|v| IndexVector::I32(v.iter().collect()))
                }
                fb::SparseIndexVector::Uint16Vector => {
                    let t = if segments {
                        d.array_segments_as_uint_16_vector()
                    } else {
                        d.array_indices_as_uint_16_vector()
                    };
                    t.and_then(|t| t.values())
                        .map(|v| IndexVector::U16(v.iter().collect()))
                }
                fb::SparseIndexVector::Uint8Vector => {
                    let t = if segments {
                        d.array_segments_as_uint_8_vector()
                    } else {
                        d.array_indices_as_uint_8_vector()
                    };
                    t.and_then(|t| t.values())
                        .map(|v| IndexVector::U8(v.iter().collect()))
                }
                _ => None,
            };
            v.ok_or_else(|| {
                anyhow!(
                    "sparse dimension without {} vector",
                    if segments { "segment" } else { "index" }
                )
            })
        };
    let dims = s
        .dim_metadata()
        .unwrap_or_default()
        .iter()
        .map(|d| match d.format() {
            fb::DimensionType::DENSE => Ok(DimStorage::Dense {
                size: usize::try_from(d.dense_size())
                    .map_err(|_| anyhow!("negative dense_size"))?,
            }),
            fb::DimensionType::SPARSE_CSR => Ok(DimStorage::SparseCsr {
                segments: index_vector(d.array_segments_type(), &d, true)?,
                indices: index_vector(d.array_indices_type(), &d, false)?,
            }),
            other => bail!("unknown sparse dimension format {}", other.0),
        })
        .collect::<Result<_>>()?;
    Ok(Sparsity {
        traversal_order: s
            .traversal_order()
            .map(|v| v.iter().collect())
            .unwrap_or_default(),
        block_map: s
            .block_map()
            .map(|v| v.iter().collect())
            .unwrap_or_default(),
        dims,
    })
}
