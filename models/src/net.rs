//! Layer helpers over [`GraphBuilder`] that create seeded weights: the vocabulary the zoo's
//! architectures are written in.

use crate::rng::Rng;
use anyhow::Result;
use tandem_compiler::ir::builder::GraphBuilder;
use tandem_compiler::ir::op::{Conv2d, DepthwiseConv2d, Pool2d};
use tandem_compiler::ir::{Activation, BinaryKind, Graph, Op, Padding, TensorId};
use tandem_runtime::DType;

/// A network under construction: a graph builder plus the weight generator.
pub struct Net {
    pub b: GraphBuilder,
    pub rng: Rng,
    layer: usize,
}

impl Net {
    /// Starts a network with one float32 input.
    pub fn new(seed: u64, input_shape: &[usize]) -> (Self, TensorId) {
        let mut b = GraphBuilder::new();
        let x = b.input("input", DType::F32, input_shape);
        (
            Net {
                b,
                rng: Rng::new(seed),
                layer: 0,
            },
            x,
        )
    }

    fn next_name(&mut self, kind: &str) -> String {
        self.layer += 1;
        format!("{kind}{}", self.layer)
    }

    /// Float32 constant of `shape` with values uniform in ±`limit`.
    pub fn weights(&mut self, kind: &str, shape: &[usize], limit: f32) -> TensorId {
        let n = shape.iter().product();
        let values = self.rng.uniform(n, limit);
        let name = self.next_name(kind);
        self.b.const_f32(&name, shape, &values)
    }

    /// He-uniform limit for `fan_in` inputs, times `gain`.
    pub fn he(fan_in: usize, gain: f32) -> f32 {
        gain * (6.0 / fan_in as f32).sqrt()
    }

    /// CONV_2D with a bias (folded batch norm) and seeded weights.
    #[allow(clippy::too_many_arguments)]
    pub fn conv_full(
        &mut self,
        x: TensorId,
        cout: usize,
        kernel: [usize; 2],
        stride: usize,
        dilation: usize,
        padding: Padding,
        activation: Activation,
        gain: f32,
    ) -> Result<TensorId> {
        let cin = self.b.shape(x)[3];
        let w = self.weights(
            "conv_w",
            &[cout, kernel[0], kernel[1], cin],
            Self::he(kernel[0] * kernel[1] * cin, gain),
        );
        let bias = self.weights("conv_b", &[cout], 0.05);
        self.b.op1(
            Op::Conv2d(Conv2d {
                padding,
                stride: [stride; 2],
                dilation: [dilation; 2],
                activation,
            }),
            &[x, w, bias],
        )
    }

    /// SAME-padded CONV_2D, dilation 1, gain 1.
    pub fn conv(
        &mut self,
        x: TensorId,
        cout: usize,
        kernel: [usize; 2],
        stride: usize,
        activation: Activation,
    ) -> Result<TensorId> {
        self.conv_full(x, cout, kernel, stride, 1, Padding::Same, activation, 1.0)
    }

    /// VALID-padded CONV_2D, dilation 1, gain 1.
    pub fn conv_valid(
        &mut self,
        x: TensorId,
        cout: usize,
        kernel: [usize; 2],
        stride: usize,
        activation: Activation,
    ) -> Result<TensorId> {
        self.conv_full(x, cout, kernel, stride, 1, Padding::Valid, activation, 1.0)
    }

    /// DEPTHWISE_CONV_2D with bias.
    pub fn depthwise(
        &mut self,
        x: TensorId,
        multiplier: usize,
        kernel: usize,
        stride: usize,
        padding: Padding,
        activation: Activation,
    ) -> Result<TensorId> {
        let cin = self.b.shape(x)[3];
        let cout = cin * multiplier;
        let w = self.weights(
            "dw_w",
            &[1, kernel, kernel, cout],
            Self::he(kernel * kernel, 1.0),
        );
        let bias = self.weights("dw_b", &[cout], 0.05);
        self.b.op1(
            Op::DepthwiseConv2d(DepthwiseConv2d {
                padding,
                stride: [stride; 2],
                dilation: [1, 1],
                depth_multiplier: multiplier,
                activation,
            }),
            &[x, w, bias],
        )
    }

    /// FULLY_CONNECTED with bias; `gain` scales the He limit.
    pub fn fc(
        &mut self,
        x: TensorId,
        units: usize,
        activation: Activation,
        gain: f32,
    ) -> Result<TensorId> {
        let depth = *self.b.shape(x).last().unwrap_or(&1);
        let w = self.weights("fc_w", &[units, depth], Self::he(depth, gain));
        let bias = self.weights("fc_b", &[units], 0.05);
        self.b.op1(
            Op::FullyConnected {
                activation,
                keep_num_dims: false,
            },
            &[x, w, bias],
        )
    }

    fn pool_attrs(kernel: usize, stride: usize, padding: Padding) -> Pool2d {
        Pool2d {
            padding,
            stride: [stride; 2],
            filter: [kernel; 2],
            activation: Activation::None,
        }
    }

    pub fn max_pool(
        &mut self,
        x: TensorId,
        kernel: usize,
        stride: usize,
        padding: Padding,
    ) -> Result<TensorId> {
        self.b.op1(
            Op::MaxPool2d(Self::pool_attrs(kernel, stride, padding)),
            &[x],
        )
    }

    pub fn avg_pool(
        &mut self,
        x: TensorId,
        kernel: usize,
        stride: usize,
        padding: Padding,
    ) -> Result<TensorId> {
        self.b.op1(
            Op::AveragePool2d(Self::pool_attrs(kernel, stride, padding)),
            &[x],
        )
    }

    pub fn add(&mut self, a: TensorId, b: TensorId, activation: Activation) -> Result<TensorId> {
        self.b.op1(
            Op::Binary {
                kind: BinaryKind::Add,
                activation,
            },
            &[a, b],
        )
    }

    /// MEAN over height and width.
    pub fn global_mean(&mut self, x: TensorId, keep_dims: bool) -> Result<TensorId> {
        let axes = self.b.const_i32("mean_axes", &[2], &[1, 2]);
        self.b.op1(Op::Mean { keep_dims }, &[x, axes])
    }

    pub fn concat(&mut self, xs: &[TensorId], axis: i32) -> Result<TensorId> {
        self.b.op1(
            Op::Concatenation {
                axis,
                activation: Activation::None,
            },
            xs,
        )
    }

    pub fn softmax(&mut self, x: TensorId) -> Result<TensorId> {
        self.b.op1(Op::Softmax { beta: 1.0 }, &[x])
    }

    /// RESHAPE to a constant target shape.
    pub fn reshape(&mut self, x: TensorId, shape: &[i32]) -> Result<TensorId> {
        let target = self.b.const_i32("shape", &[shape.len()], shape);
        self.b.op1(
            Op::Reshape {
                new_shape: Some(shape.to_vec()),
            },
            &[x, target],
        )
    }

    /// Marks the single output, names it `output`, and returns the graph.
    pub fn finish(mut self, out: TensorId, description: &str) -> Graph {
        self.b.rename(out, "output");
        self.b.output(out);
        self.b.finish(description)
    }
}
