//! MobileNetV1 and MobileNetV2 (width 1.0, 224×224), ReLU6, batch norm folded.

use crate::net::Net;
use anyhow::Result;
use tandem_compiler::ir::{Activation, Graph, Padding, TensorId};

const RELU6: Activation = Activation::Relu6;

pub fn mobilenet_v1(seed: u64) -> Result<Graph> {
    let (mut net, x) = Net::new(seed, &[1, 224, 224, 3]);
    let mut x = net.conv(x, 32, [3, 3], 2, RELU6)?;
    let blocks = [
        (64, 1),
        (128, 2),
        (128, 1),
        (256, 2),
        (256, 1),
        (512, 2),
        (512, 1),
        (512, 1),
        (512, 1),
        (512, 1),
        (512, 1),
        (1024, 2),
        (1024, 1),
    ];
    for (channels, stride) in blocks {
        x = net.depthwise(x, 1, 3, stride, Padding::Same, RELU6)?;
        x = net.conv(x, channels, [1, 1], 1, RELU6)?;
    }
    x = net.global_mean(x, false)?;
    x = net.fc(x, 1000, Activation::None, 0.5)?;
    let out = net.softmax(x)?;
    Ok(net.finish(out, "MobileNetV1 (tandem zoo, seeded weights)"))
}

fn inverted_residual(
    net: &mut Net,
    x: TensorId,
    expand: usize,
    cout: usize,
    stride: usize,
) -> Result<TensorId> {
    let cin = net.b.shape(x)[3];
    let mut y = x;
    if expand != 1 {
        y = net.conv(y, cin * expand, [1, 1], 1, RELU6)?;
    }
    y = net.depthwise(y, 1, 3, stride, Padding::Same, RELU6)?;
    y = net.conv_full(y, cout, [1, 1], 1, 1, Padding::Same, Activation::None, 0.5)?;
    if stride == 1 && cin == cout {
        y = net.add(y, x, Activation::None)?;
    }
    Ok(y)
}

pub fn mobilenet_v2(seed: u64) -> Result<Graph> {
    let (mut net, x) = Net::new(seed, &[1, 224, 224, 3]);
    let mut x = net.conv(x, 32, [3, 3], 2, RELU6)?;
    let settings = [
        (1, 16, 1, 1),
        (6, 24, 2, 2),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    ];
    for (expand, channels, repeats, stride) in settings {
        for i in 0..repeats {
            x = inverted_residual(
                &mut net,
                x,
                expand,
                channels,
                if i == 0 { stride } else { 1 },
            )?;
        }
    }
    x = net.conv(x, 1280, [1, 1], 1, RELU6)?;
    x = net.global_mean(x, false)?;
    x = net.fc(x, 1000, Activation::None, 0.5)?;
    let out = net.softmax(x)?;
    Ok(net.finish(out, "MobileNetV2 (tandem zoo, seeded weights)"))
}
