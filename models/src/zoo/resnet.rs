//! ResNet-18 and ResNet-34 (He et al.), basic blocks, batch norm folded into conv biases.

use crate::net::Net;
use anyhow::Result;
use tandem_compiler::ir::{Activation, Graph, Padding, TensorId};

fn basic_block(net: &mut Net, x: TensorId, channels: usize, stride: usize) -> Result<TensorId> {
    let cin = net.b.shape(x)[3];
    let y = net.conv(x, channels, [3, 3], stride, Activation::Relu)?;
    // A small gain on the last conv keeps the residual sum from growing block after block.
    let y = net.conv_full(
        y,
        channels,
        [3, 3],
        1,
        1,
        Padding::Same,
        Activation::None,
        0.35,
    )?;
    let shortcut = if stride != 1 || cin != channels {
        net.conv_full(
            x,
            channels,
            [1, 1],
            stride,
            1,
            Padding::Same,
            Activation::None,
            1.0,
        )?
    } else {
        x
    };
    net.add(y, shortcut, Activation::Relu)
}

fn resnet(seed: u64, blocks: [usize; 4], name: &str) -> Result<Graph> {
    let (mut net, x) = Net::new(seed, &[1, 224, 224, 3]);
    let mut x = net.conv(x, 64, [7, 7], 2, Activation::Relu)?;
    x = net.max_pool(x, 3, 2, Padding::Same)?;
    for (stage, (&n, channels)) in blocks.iter().zip([64, 128, 256, 512]).enumerate() {
        for i in 0..n {
            let stride = if i == 0 && stage > 0 { 2 } else { 1 };
            x = basic_block(&mut net, x, channels, stride)?;
        }
    }
    x = net.global_mean(x, false)?;
    x = net.fc(x, 1000, Activation::None, 0.5)?;
    let out = net.softmax(x)?;
    Ok(net.finish(out, &format!("{name} (tandem zoo, seeded weights)")))
}

pub fn resnet18(seed: u64) -> Result<Graph> {
    resnet(seed, [2, 2, 2, 2], "ResNet-18")
}

pub fn resnet34(seed: u64) -> Result<Graph> {
    resnet(seed, [3, 4, 6, 3], "ResNet-34")
}
