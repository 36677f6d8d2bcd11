//! TRANSPOSE_CONV (and the custom Convolution2DTransposeBias): a GEMM per image, then a scatter
//! of every input pixel's KH × KW × C_out contributions into the output.

use super::gemm::{matmul, MatRef};
use super::threads::ThreadPool;
use super::Activation;
use serde::{Deserialize, Serialize};

/// Geometry of a transposed convolution, NHWC.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TransposeConvParams {
    /// [N, H, W, C_in]
    pub input: [usize; 4],
    /// [N, H_out, W_out, C_out]
    pub output: [usize; 4],
    pub kernel: [usize; 2],
    pub stride: [usize; 2],
    /// (top, left): input pixel (y, x) lands at output (y·stride − pad + ky, x·stride − pad + kx).
    pub pad: [usize; 2],
    pub activation: Activation,
}

impl TransposeConvParams {
    /// Checks the geometry; the message says what is wrong.
    pub fn validate(&self) -> Result<(), String> {
        if self.input[0] != self.output[0] {
            return Err("batch differs between input and output".into());
        }
        if self.stride.contains(&0) || self.kernel.contains(&0) {
            return Err("zero stride or kernel size".into());
        }
        Ok(())
    }
}

/// Packs TFLite weights `[C_out, KH, KW, C_in]` into `[C_in, KH·KW·C_out]`, the layout
/// [`transpose_conv2d`] reads.
pub fn pack_transpose_conv_weights(weights: &[f32], p: &TransposeConvParams) -> Vec<f32> {
    let (cin, cout) = (p.input[3], p.output[3]);
    let taps = p.kernel[0] * p.kernel[1];
    let mut packed = vec![0.0; weights.len()];
    for o in 0..cout {
        for t in 0..taps {
            for i in 0..cin {
                packed[i * taps * cout + t * cout + o] = weights[(o * taps + t) * cin + i];
            }
        }
    }
    packed
}

/// Computes the whole output (not channel-splittable).
///
/// Preconditions: `p.validate()` holds and slice lengths match the shapes.
pub fn transpose_conv2d(
    input: &[f32],
    weights: &[f32],
    bias: Option<&[f32]>,
    out: &mut [f32],
    p: &TransposeConvParams,
    _pool: &ThreadPool,
) {
    let [n, h, w, cin] = p.input;
    let [_, ho, wo, cout] = p.output;
    let taps = p.kernel[0] * p.kernel[1];
    let cols = taps * cout;
    let mut contrib = vec![0.0; h * w * cols];
    for b in 0..n {
        let image = &input[b * h * w * cin..(b + 1) * h * w * cin];
        matmul(
            &mut contrib,
            cols,
            MatRef::rows(image, h * w, cin, cin),
            MatRef::rows(weights, cin, cols, cols),
            false,
        );
        let dst = &mut out[b * ho * wo * cout..(b + 1) * ho * wo * cout];
        for px in dst.chunks_exact_mut(cout) {
            match bias {
                Some(bias) => px.copy_from_slice(bias),
                None => px.fill(0.0),
            }
        }
        for y in 0..h {
            for x in 0..w {
                let src = &contrib[(y * w + x) * cols..(y * w + x + 1) * cols];
                for ky in 0..p.kernel[0] {
                    let oy = (y * p.stride[0] + ky) as isize - p.pad[0] as isize;
                    if oy < 0 || oy >= ho as isize {
                        continue;
                    }
                    for kx in 0..p.kernel[1] {
                        let ox = (x * p.stride[1] + kx) as isize - p.pad[1] as isize;
                        if ox < 0 || ox >= wo as isize {
                            continue;
                        }
                        let o = (oy as usize * wo + ox as usize) * cout;
                        let t = (ky * p.kernel[1] + kx) * cout;
                        for (d, s) in dst[o..o + cout].iter_mut().zip(&src[t..t + cout]) {
                            *d += s;
                        }
                    }
                }
            }
        }
        p.activation.apply_slice(dst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::elementwise::tests::Rng;

    #[test]
    fn matches_the_scatter_definition() {
        let mut rng = Rng(5);
        let pool = ThreadPool::new(1);
        for _ in 0..30 {
            let kernel = [1 + rng.below(4), 1 + rng.below(4)];
            let stride = [1 + rng.below(3), 1 + rng.below(3)];
            let (h, w, cin, cout) = (
                1 + rng.below(5),
                1 + rng.below(5),
                1 + rng.below(4),
                1 + rng.below(4),
            );
            let pad = [rng.below(kernel[0]), rng.below(kernel[1])];
            let ho = (h - 1) * stride[0] + kernel[0] - pad[0];
            let wo = (w - 1) * stride[1] + kernel[1] - pad[1];
            let p = TransposeConvParams {
                input: [1, h, w, cin],
                output: [1, ho, wo, cout],
                kernel,
                stride,
                pad,
                activation: Activation::None,
            };
            let input = rng.values(h * w * cin);
            let weights = rng.values(cout * kernel[0] * kernel[1] * cin);
            let bias = rng.values(cout);
            let mut want = vec![0.0f32; ho * wo * cout];
            for (i, v) in want.iter_mut().enumerate() {
                *v = bias[i % cout];
            }
            for y in 0..h {
                for x in 0..w {
                    for ky in 0..kernel[0] {
                        for kx in 0..kernel[1] {
                            let (oy, ox) = (
                                (y * stride[0] + ky) as isize - pad[0] as isize,
                                (x * stride[1] + kx) as isize - pad[1] as isize,
                            );
                            if oy < 0 || ox < 0 || oy >= ho as isize || ox >= wo as isize {
                                continue;
                            }
                            for o in 0..cout {
                                for i in 0..cin {
                                    want[(oy as usize * wo + ox as usize) * cout + o] += input
                                        [(y * w + x) * cin + i]
                                        * weights
                                            [((o * kernel[0] + ky) * kernel[1] + kx) * cin + i];
                                }
                            }
                        }
                    }
                }
            }
            let mut got = vec![0.0; want.len()];
            transpose_conv2d(
                &input,
                &pack_transpose_conv_weights(&weights, &p),
                Some(&bias),
                &mut got,
                &p,
                &pool,
            );
            for (a, b) in got.iter().zip(&want) {
                assert!(
                    (a - b).abs() <= 1e-4 * b.abs().max(1.0),
                    "{p:?}: {a} vs {b}"
                );
            }
        }
    }
}
