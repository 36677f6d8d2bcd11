//! VGG16 (Simonyan & Zisserman), 224×224 RGB input, 1000 classes.

use crate::net::Net;
use anyhow::Result;
use tandem_compiler::ir::{Activation, Graph, Padding};

pub fn vgg16(seed: u64) -> Result<Graph> {
    let (mut net, mut x) = Net::new(seed, &[1, 224, 224, 3]);
    for (convs, channels) in [(2, 64), (2, 128), (3, 256), (3, 512), (3, 512)] {
        for _ in 0..convs {
            x = net.conv(x, channels, [3, 3], 1, Activation::Relu)?;
        }
        x = net.max_pool(x, 2, 2, Padding::Valid)?;
    }
    x = net.reshape(x, &[1, 7 * 7 * 512])?;
    x = net.fc(x, 4096, Activation::Relu, 1.0)?;
    x = net.fc(x, 4096, Activation::Relu, 1.0)?;
    x = net.fc(x, 1000, Activation::None, 0.5)?;
    let out = net.softmax(x)?;
    Ok(net.finish(out, "VGG16 (tandem zoo, seeded weights)"))
}
