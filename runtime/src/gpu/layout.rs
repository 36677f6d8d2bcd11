//! Weight layouts of the GPU kernels. The compiler writes GPU weights in these layouts into the
//! artifact; the runtime checks their lengths against [`operand_lengths`].
//!
//! - Convolution and fully-connected weights are blocked by 8 output channels: element
//!   `(o, r)` of a `[outputs][depth]` matrix sits at `((o / 8) * depth + r) * 8 + o % 8`, with the
//!   outputs padded to a multiple of 8 with zeros. For convolutions `r` runs over
//!   `(ky, kx, ci)` (TFLite's OHWI order without the O).
//! - Winograd weights: `G g Gᵀ` per (output, input) channel, `[36][outputs / 8][inputs][8]`.
//! - Depthwise weights `[kh * kw][pad8(channels)]`; biases `[pad8(channels)]` (zeros when the op
//!   has none).
//! - Transposed convolutions read TFLite's `[out][kh][kw][in]` weights as they are.

use super::dispatch::{pad8, Variant};
use crate::artifact::Kernel;

/// `[outputs][depth]` → blocked by 8 outputs (see the module doc).
pub fn blocked_weights(w: &[f32], outputs: usize, depth: usize) -> Vec<f32> {
    let mut out = vec![0.0; pad8(outputs) * depth];
    for o in 0..outputs {
        for r in 0..depth {
            out[((o / 8) * depth + r) * 8 + o % 8] = w[o * depth + r];
        }
    }
    out
}

/// `G` of Winograd F(4x4, 3x3) (points 0, ±1, ±2, ∞).
const G: [[f32; 3]; 6] = [
    [1.0 / 4.0, 0.0, 0.0],
    [-1.0 / 6.0, -1.0 / 6.0, -1.0 / 6.0],
    [-1.0 / 6.0, 1.0 / 6.0, -1.0 / 6.0],
    [1.0 / 24.0, 1.0 / 12.0, 1.0 / 6.0],
    [1.0 / 24.0, -1.0 / 12.0, 1.0 / 6.0],
    [0.0, 0.0, 1.0],
];

/// OHWI 3x3 weights `[outputs][3][3][inputs]` → `G g Gᵀ`, `[36][pad8(outputs) / 8][inputs][8]`.
pub fn winograd_weights(w: &[f32], outputs: usize, inputs: usize) -> Vec<f32> {
    let op = pad8(outputs);
    let mut out = vec![0.0; 36 * op * inputs];
    for o in 0..outputs {
        for i in 0..inputs {
            let g = |ky: usize, kx: usize| w[((o * 3 + ky) * 3 + kx) * inputs + i];
            // t = G g (6x3), then t Gᵀ (6x6).
            let t: Vec<[f32; 3]> = G
                .iter()
                .map(|row| std::array::from_fn(|kx| (0..3).map(|ky| row[ky] * g(ky, kx)).sum()))
                .collect();
            for (r, tr) in t.iter().enumerate() {
                for (c, col) in G.iter().enumerate() {
                    let v: f32 = (0..3).map(|k| tr[k] * col[k]).sum();
                    let e = r * 6 + c;
                    out[e * op * inputs + ((o / 8) * inputs + i) * 8 + o % 8] = v;
                }
            }
        }
    }
    out
}

/// `[rows][channels]` → `[rows][pad8(channels)]` (depthwise weights; a bias is one row).
pub fn channel_padded(w: &[f32], rows: usize, channels: usize) -> Vec<f32> {
    let cp = pad8(channels);
    let mut out = vec![0.0; rows * cp];
    for r in 0..rows {
        out[r * cp..r * cp + channels].copy_from_slice(&w[r * channels..(r + 1) * channels]);
    }
    out
}

/// The GPU weights and bias of a conv, depthwise, fully-connected or transposed-conv step from
/// its TFLite-layout weights (`[out][kh][kw][in]`, `[1][kh][kw][out]`, `[units][depth]`) and
/// optional bias; `variant` is the dispatch decision. The bias is padded (zeros when absent)
/// except for transposed convolutions, whose bias stays optional. `None` for other kernels.
pub fn gpu_constants(
    kernel: &Kernel,
    variant: Variant,
    weights: &[f32],
    bias: Option<&[f32]>,
) -> Option<(Vec<f32>, Option<Vec<f32>>)> {
    let padded_bias = |c: usize| {
        let zeros = vec![0.0; c];
        Some(channel_padded(bias.unwrap_or(&zeros), 1, c))
    };
    match kernel {
        Kernel::Conv2d(p) => {
            let w = if variant == Variant::ConvWinograd {
                winograd_weights(weights, p.output[3], p.input[3])
            } else {
                blocked_weights(weights, p.output[3], p.depth())
            };
            Some((w, padded_bias(p.output[3])))
        }
        Kernel::DepthwiseConv2d(p) => Some((
            channel_padded(weights, p.kernel[0] * p.kernel[1], p.output[3]),
            padded_bias(p.output[3]),
        )),
        Kernel::FullyConnected(p) => Some((
            blocked_weights(weights, p.units, p.depth),
            padded_bias(p.units),
        )),
        Kernel::TransposeConv(_) => Some((weights.to_vec(), bias.map(|b| b.to_vec()))),
        _ => None,
    }
}

/// The element count each GPU operand of `kernel` must have when it is a constant, in operand
/// order (`None`: not checked, an activation or a constant read as the CPU reads it).
/// `variant` is the dispatch decision for the op.
pub fn operand_lengths(kernel: &Kernel, variant: Variant) -> Vec<Option<usize>> {
    match kernel {
        Kernel::Conv2d(p) => {
            let weights = if variant == Variant::ConvWinograd {
                36 * pad8(p.output[3]) * p.input[3]
            } else {
                pad8(p.output[3]) * p.depth()
            };
            vec![None, Some(weights), Some(pad8(p.output[3]))]
        }
        Kernel::DepthwiseConv2d(p) => vec![
            None,
            Some(p.kernel[0] * p.kernel[1] * pad8(p.output[3])),
            Some(pad8(p.output[3])),
        ],
        Kernel::FullyConnected(p) => {
            vec![None, Some(pad8(p.units) * p.depth), Some(pad8(p.units))]
        }
        Kernel::TransposeConv(p) => vec![
            None,
            Some(p.output[3] * p.kernel[0] * p.kernel[1] * p.input[3]),
            Some(p.output[3]),
        ],
        // BatchMatMul, Binary, Prelu… read their operands as the CPU does.
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocking_places_each_weight_once() {
        let (outputs, depth) = (11, 5);
        let w: Vec<f32> = (0..outputs * depth).map(|v| v as f32 + 1.0).collect();
        let b = blocked_weights(&w, outputs, depth);
        assert_eq!(b.len(), 16 * depth);
        for o in 0..outputs {
            for r in 0..depth {
                assert_eq!(b[((o / 8) * depth + r) * 8 + o % 8], w[o * depth + r]);
            }
        }
        // The padding outputs are zero.
        let nonzero = b.iter().filter(|v| **v != 0.0).count();
        assert_eq!(nonzero, outputs * depth);
    }

    /// A 1-D Winograd F(4, 3) on one tile with the transforms of `winograd.cl` written out:
    /// the transformed weights must reproduce direct correlation.
    #[test]
    fn winograd_weights_reproduce_direct_correlation() {
        let (outputs, inputs) = (1, 1);
        // A filter that is non-zero only in row 1 makes the 2-D transform's row 1 column part
        // a 1-D filter; check the full 2-D identity instead on a 6x6 input tile.
        let w: Vec<f32> = (0..9).map(|v| (v as f32 - 3.7) * 0.3).collect();
        let u = winograd_weights(&w, outputs, inputs);
        let d: Vec<f32> = (0..36)
            .map(|v| ((v * 7 % 11) as f32) * 0.25 - 1.0)
            .collect();
        let bt = |x: [f32; 6]| {
            [
                4.0 * x[0] - 5.0 * x[2] + x[4],
                -4.0 * x[1] - 4.0 * x[2] + x[3] + x[4],
                4.0 * x[1] - 4.0 * x[2] - x[3] + x[4],
                -2.0 * x[1] - x[2] + 2.0 * x[3] + x[4],
                2.0 * x[1] - x[2] - 2.0 * x[3] + x[4],
                4.0 * x[1] - 5.0 * x[3] + x[5],
            ]
        };
        let at = |m: [f32; 6]| {
            [
                m[0] + m[1] + m[2] + m[3] + m[4],
                m[1] - m[2] + 2.0 * m[3] - 2.0 * m[4],
                m[1] + m[2] + 4.0 * m[3] + 4.0 * m[4],
                m[1] - m[2] + 8.0 * m[3] - 8.0 * m[4] + m[5],
            ]
        };
        // V = Bᵀ d B
        let mut t = [[0.0f32; 6]; 6];
        for j in 0..6 {
            let col = bt(std::array::from_fn(|i| d[i * 6 + j]));
            for i in 0..6 {
                t[i][j] = col[i];
            }
        }
        let mut v = [[0.0f32; 6]; 6];
        for i in 0..6 {
            v[i] = bt(t[i]);
        }
        // M = U ⊙ V (padded weights: output 0 of block 0, element e at e * 8 * inputs)
        let m: Vec<f32> = (0..36).map(|e| u[e * 8] * v[e / 6][e % 6]).collect();
        let mut s = [[0.0f32; 6]; 4];
        for j in 0..6 {
            let col = at(std::array::from_fn(|i| m[i * 6 + j]));
            for i in 0..4 {
                s[i][j] = col[i];
            }
        }
        for i in 0..4 {
            let y = at(s[i]);
            for (j, got) in y.iter().enumerate() {
                let mut want = 0.0;
                for ky in 0..3 {
                    for kx in 0..3 {
                        want += d[(i + ky) * 6 + j + kx] * w[ky * 3 + kx];
                    }
                }
                assert!((got - want).abs() < 1e-4, "({i},{j}): {got} vs {want}");
            }
        }
    }

    #[test]
    fn channel_padding_keeps_rows() {
        let w: Vec<f32> = (0..2 * 3).map(|v| v as f32).collect();
        assert_eq!(
            channel_padded(&w, 2, 3),
            vec![0.0, 1.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 3.0, 4.0, 5.0, 0.0, 0.0, 0.0, 0.0, 0.0]
        );
    }
}
