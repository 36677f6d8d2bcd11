//! Inception-v3 (Szegedy et al.), 299×299 RGB input, 1000 classes, batch norm folded.

use crate::net::Net;
use anyhow::Result;
use tandem_compiler::ir::{Activation, Graph, Padding, TensorId};

const RELU: Activation = Activation::Relu;

fn c(net: &mut Net, x: TensorId, cout: usize, kh: usize, kw: usize) -> Result<TensorId> {
    net.conv(x, cout, [kh, kw], 1, RELU)
}

fn pool_branch(net: &mut Net, x: TensorId, cout: usize) -> Result<TensorId> {
    let p = net.avg_pool(x, 3, 1, Padding::Same)?;
    c(net, p, cout, 1, 1)
}

/// 35×35 block: 1×1, 5×5, double 3×3 and pool branches.
fn block_a(net: &mut Net, x: TensorId, pool_features: usize) -> Result<TensorId> {
    let b1 = c(net, x, 64, 1, 1)?;
    let b5 = c(net, x, 48, 1, 1)?;
    let b5 = c(net, b5, 64, 5, 5)?;
    let b3 = c(net, x, 64, 1, 1)?;
    let b3 = c(net, b3, 96, 3, 3)?;
    let b3 = c(net, b3, 96, 3, 3)?;
    let bp = pool_branch(net, x, pool_features)?;
    net.concat(&[b1, b5, b3, bp], 3)
}

/// 35→17 reduction.
fn reduction_a(net: &mut Net, x: TensorId) -> Result<TensorId> {
    let b3 = net.conv_valid(x, 384, [3, 3], 2, RELU)?;
    let bd = c(net, x, 64, 1, 1)?;
    let bd = c(net, bd, 96, 3, 3)?;
    let bd = net.conv_valid(bd, 96, [3, 3], 2, RELU)?;
    let bp = net.max_pool(x, 3, 2, Padding::Valid)?;
    net.concat(&[b3, bd, bp], 3)
}

/// 17×17 block with factorised 7×7 convolutions.
fn block_c(net: &mut Net, x: TensorId, c7: usize) -> Result<TensorId> {
    let b1 = c(net, x, 192, 1, 1)?;
    let b7 = c(net, x, c7, 1, 1)?;
    let b7 = c(net, b7, c7, 1, 7)?;
    let b7 = c(net, b7, 192, 7, 1)?;
    let bd = c(net, x, c7, 1, 1)?;
    let bd = c(net, bd, c7, 7, 1)?;
    let bd = c(net, bd, c7, 1, 7)?;
    let bd = c(net, bd, c7, 7, 1)?;
    let bd = c(net, bd, 192, 1, 7)?;
    let bp = pool_branch(net, x, 192)?;
    net.concat(&[b1, b7, bd, bp], 3)
}

/// 17→8 reduction.
fn reduction_b(net: &mut Net, x: TensorId) -> Result<TensorId> {
    let b3 = c(net, x, 192, 1, 1)?;
    let b3 = net.conv_valid(b3, 320, [3, 3], 2, RELU)?;
    let b7 = c(net, x, 192, 1, 1)?;
    let b7 = c(net, b7, 192, 1, 7)?;
    let b7 = c(net, b7, 192, 7, 1)?;
    let b7 = net.conv_valid(b7, 192, [3, 3], 2, RELU)?;
    let bp = net.max_pool(x, 3, 2, Padding::Valid)?;
    net.concat(&[b3, b7, bp], 3)
}

/// 8×8 block with split 1×3 / 3×1 branches.
fn block_e(net: &mut Net, x: TensorId) -> Result<TensorId> {
    let b1 = c(net, x, 320, 1, 1)?;
    let b3 = c(net, x, 384, 1, 1)?;
    let b3a = c(net, b3, 384, 1, 3)?;
    let b3b = c(net, b3, 384, 3, 1)?;
    let b3 = net.concat(&[b3a, b3b], 3)?;
    let bd = c(net, x, 448, 1, 1)?;
    let bd = c(net, bd, 384, 3, 3)?;
    let bda = c(net, bd, 384, 1, 3)?;
    let bdb = c(net, bd, 384, 3, 1)?;
    let bd = net.concat(&[bda, bdb], 3)?;
    let bp = pool_branch(net, x, 192)?;
    net.concat(&[b1, b3, bd, bp], 3)
}

pub fn inception_v3(seed: u64) -> Result<Graph> {
    let (mut net, x) = Net::new(seed, &[1, 299, 299, 3]);
    let n = &mut net;
    let mut x = n.conv_valid(x, 32, [3, 3], 2, RELU)?;
    x = n.conv_valid(x, 32, [3, 3], 1, RELU)?;
    x = c(n, x, 64, 3, 3)?;
    x = n.max_pool(x, 3, 2, Padding::Valid)?;
    x = n.conv_valid(x, 80, [1, 1], 1, RELU)?;
    x = n.conv_valid(x, 192, [3, 3], 1, RELU)?;
    x = n.max_pool(x, 3, 2, Padding::Valid)?;
    for pool_features in [32, 64, 64] {
        x = block_a(n, x, pool_features)?;
    }
    x = reduction_a(n, x)?;
    for c7 in [128, 160, 160, 192] {
        x = block_c(n, x, c7)?;
    }
    x = reduction_b(n, x)?;
    x = block_e(n, x)?;
    x = block_e(n, x)?;
    x = n.global_mean(x, false)?;
    x = n.fc(x, 1000, Activation::None, 0.5)?;
    let out = n.softmax(x)?;
    Ok(net.finish(out, "Inception-v3 (tandem zoo, seeded weights)"))
}
