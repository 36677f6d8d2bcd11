//! DEPTHWISE_CONV_2D: a direct kernel vectorised along channels, over an output-channel range.

use super::shared::SharedOut;
use super::threads::ThreadPool;
use super::Activation;
use serde::{Deserialize, Serialize};
use std::cell::RefCell;

/// Geometry of a depthwise convolution, NHWC; output channel `c` reads input channel
/// `c / multiplier`. Weights are TFLite's `[1, KH, KW, C_out]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DepthwiseParams {
    /// [N, H, W, C_in]
    pub input: [usize; 4],
    /// [N, H_out, W_out, C_in · multiplier]
    pub output: [usize; 4],
    pub kernel: [usize; 2],
    pub stride: [usize; 2],
    pub dilation: [usize; 2],
    /// (top, left) zero padding.
    pub pad: [usize; 2],
    pub multiplier: usize,
    pub activation: Activation,
}

impl DepthwiseParams {
    /// Checks the geometry is consistent; the message says what is not.
    pub fn validate(&self) -> Result<(), String> {
        let [n, h, w, ci] = self.input;
        let [no, ho, wo, co] = self.output;
        if n != no || self.multiplier == 0 || ci * self.multiplier != co {
            return Err(format!("{:?} → {:?} is not a depthwise multiplier-{} shape", self.input, self.output, self.multiplier));
        }
        if self.stride.contains(&0) || self.dilation.contains(&0) || self.kernel.contains(&0) {
            return Err("zero stride, dilation or kernel size".into());
        }
        for (d, (size, out)) in [(h, ho), (w, wo)].into_iter().enumerate() {
            if out > 0 && (out - 1) * self.stride[d] >= size + self.pad[d] {
                return Err(format!("output size {out} does not fit input size {size} in dimension {d}"));
            }
        }
        Ok(())
    }
}

thread_local! {
    static ACC: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Computes output channels `[c0, c1)` into `out` (the full output tensor).
///
/// Preconditions: `p.validate()` holds; slice lengths match the shapes; `c0 <= c1 <= C_out`.
#[allow(clippy::too_many_arguments)]
pub fn depthwise_conv2d(
    input: &[f32],
    weights: &[f32],
    bias: Option<&[f32]>,
    out: &mut [f32],
    p: &DepthwiseParams,
    c0: usize,
    c1: usize,
    pool: &ThreadPool,
) {
    let [n, h, w, cin] = p.input;
    let [_, ho, wo, cout] = p.output;
    debug_assert_eq!(weights.len(), p.kernel[0] * p.kernel[1] * cout);
    if c0 >= c1 {
        return;
    }
    let width = c1 - c0;
    let shared = SharedOut::new(out);
    pool.run(n * ho, &|task| {
        let (b, oy) = (task / ho, task % ho);
        // SAFETY: each task owns output row oy of image b.
        let dst = unsafe { shared.range((b * ho + oy) * wo * cout, wo * cout) };
        ACC.with(|acc| {
            let mut acc = acc.borrow_mut();
            acc.resize(width, 0.0);
            for ox in 0..wo {
                match bias {
                    Some(bias) => acc.copy_from_slice(&bias[c0..c1]),
                    None => acc.fill(0.0),
                }
                for ky in 0..p.kernel[0] {
                    let iy = (oy * p.stride[0] + ky * p.dilation[0]) as isize - p.pad[0] as isize;
                    if iy < 0 || iy >= h as isize {
                        continue;
                    }
                    for kx in 0..p.kernel[1] {
                        let ix = (ox * p.stride[1] + kx * p.dilation[1]) as isize - p.pad[1] as isize;
                        if ix < 0 || ix >= w as isize {
                            continue;
                        }
                        let pixel = ((b * h + iy as usize) * w + ix as usize) * cin;
                        let tap = (ky * p.kernel[1] + kx) * cout;
                        let wrow = &weights[tap + c0..tap + c1];
                        if p.multiplier == 1 {
                            let xrow = &input[pixel + c0..pixel + c1];
                            for ((a, x), k) in acc.iter_mut().zip(xrow).zip(wrow) {
                                *a += x * k;
                            }
                        } else {
                            for (i, (a, k)) in acc.iter_mut().zip(wrow).enumerate() {
                                *a += input[pixel + (c0 + i) / p.multiplier] * k;
                            }
                        }
                    }
                }
                let row = &mut dst[ox * cout + c0..ox * cout + c1];
                for (o, a) in row.iter_mut().zip(acc.iter()) {
                    *o = p.activation.apply(*a);
                }
            }
        });
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::conv::tests::Rng;

    fn reference(input: &[f32], weights: &[f32], bias: &[f32], p: &DepthwiseParams) -> Vec<f32> {
        let [n, h, w, cin] = p.input;
        let [_, ho, wo, cout] = p.output;
        let mut out = vec![0.0; n * ho * wo * cout];
        for b in 0..n {
            for oy in 0..ho {
                for ox in 0..wo {
                    for c in 0..cout {
                        let mut acc = bias[c];
                        for ky in 0..p.kernel[0] {
                            for kx in 0..p.kernel[1] {
                                let iy = (oy * p.stride[0] + ky * p.dilation[0]) as isize - p.pad[0] as isize;
                                let ix = (ox * p.stride[1] + kx * p.dilation[1]) as isize - p.pad[1] as isize;
                                if iy >= 0 && ix >= 0 && iy < h as isize && ix < w as isize {
                                    let x = input[((b * h + iy as usize) * w + ix as usize) * cin + c / p.multiplier];
                                    acc += x * weights[(ky * p.kernel[1] + kx) * cout + c];
                                }
                            }
                        }
                        out[((b * ho + oy) * wo + ox) * cout + c] = p.activation.apply(acc);
                    }
                }
            }
        }
        out
    }

    #[test]
    fn matches_reference_on_random_geometries_and_ranges() {
        let mut rng = Rng(0x1234_5678);
        let pool = ThreadPool::new(2);
        for case in 0..60 {
            let kernel = [1 + rng.below(5), 1 + rng.below(5)];
            let stride = [1 + rng.below(3), 1 + rng.below(3)];
            let dilation = [1 + rng.below(2), 1 + rng.below(2)];
            let multiplier = [1, 1, 2, 3][rng.below(4)];
            let cin = 1 + rng.below(9);
            let (h, w) = (kernel[0] * dilation[0] + rng.below(8), kernel[1] * dilation[1] + rng.below(8));
            let same = rng.below(2) == 0;
            let dim = |size: usize, d: usize| {
                let eff = (kernel[d] - 1) * dilation[d] + 1;
                if same {
                    let out = size.div_ceil(stride[d]);
                    (out, ((out - 1) * stride[d] + eff).saturating_sub(size) / 2)
                } else {
                    ((size - eff) / stride[d] + 1, 0)
                }
            };
            let ((ho, pt), (wo, pl)) = (dim(h, 0), dim(w, 1));
            let n = 1 + rng.below(2);
            let cout = cin * multiplier;
            let p = DepthwiseParams {
                input: [n, h, w, cin],
                output: [n, ho, wo, cout],
                kernel,
                stride,
                dilation,
                pad: [pt, pl],
                multiplier,
                activation: [Activation::None, Activation::Relu6, Activation::ReluN1To1][case % 3],
            };
            p.validate().expect("valid");
            let input = rng.values(n * h * w * cin);
            let weights = rng.values(kernel[0] * kernel[1] * cout);
            let bias = rng.values(cout);
            let want = reference(&input, &weights, &bias, &p);
            let split = rng.below(cout + 1);
            let mut got = vec![f32::NAN; want.len()];
            depthwise_conv2d(&input, &weights, Some(&bias), &mut got, &p, 0, split, &pool);
            depthwise_conv2d(&input, &weights, Some(&bias), &mut got, &p, split, cout, &pool);
            for (a, b) in got.iter().zip(&want) {
                assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "case {case} {p:?}: {a} vs {b}");
            }
        }
    }
}
