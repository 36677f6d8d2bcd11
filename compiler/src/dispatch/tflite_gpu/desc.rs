//! Operator descriptions in the delegate's terms (BHWC shapes, explicit padding), as the kernel
//! selectors take them after the graph-level transforms.

use crate::ir::Padding;
use serde::Serialize;

/// A tensor shape in the delegate's BHWC form, from a TFLite shape: rank 0 is (1,1,1,1), rank 1
/// `[B]`, rank 2 `[B,C]`, rank 3 `[B,W,C]` (so a `[1,T,C]` tensor is one row of width T), rank 4
/// as is. `None` for rank 5 and above, which the delegate does not take.
pub fn bhwc(shape: &[usize]) -> Option<[usize; 4]> {
    match *shape {
        [] => Some([1, 1, 1, 1]),
        [b] => Some([b, 1, 1, 1]),
        [b, c] => Some([b, 1, 1, c]),
        [b, w, c] => Some([b, 1, w, c]),
        [b, h, w, c] => Some([b, h, w, c]),
        _ => None,
    }
}

/// ceil(channels / 4).
pub fn slices(channels: usize) -> usize {
    channels.div_ceil(4)
}

/// Explicit spatial padding, per axis (height, width).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Padding2d {
    pub prepended: [usize; 2],
    pub appended: [usize; 2],
}

impl Padding2d {
    /// The explicit padding the delegate derives from TFLite's scheme along each axis: SAME gives
    /// total = max(0, (k-1)*dil + 1 - ((in-1) mod stride) - 1), floor(total/2) prepended and the
    /// rest appended; VALID gives none.
    pub fn from_scheme(
        scheme: Padding,
        input: [usize; 2],
        kernel: [usize; 2],
        stride: [usize; 2],
        dilation: [usize; 2],
    ) -> Padding2d {
        let mut p = Padding2d::default();
        if scheme == Padding::Same {
            for axis in 0..2 {
                let effective = kernel[axis].saturating_sub(1) * dilation[axis] + 1;
                let remainder = input[axis].saturating_sub(1) % stride[axis].max(1);
                let total = effective.saturating_sub(remainder + 1);
                p.prepended[axis] = total / 2;
                p.appended[axis] = total - total / 2;
            }
        }
        p
    }

    /// Zero on all four sides.
    pub fn is_zero(&self) -> bool {
        self.prepended == [0, 0] && self.appended == [0, 0]
    }

    /// Adds another padding (a merged PAD).
    pub fn plus(self, other: Padding2d) -> Padding2d {
        Padding2d {
            prepended: [
                self.prepended[0] + other.prepended[0],
                self.prepended[1] + other.prepended[1],
            ],
            appended: [
                self.appended[0] + other.appended[0],
                self.appended[1] + other.appended[1],
            ],
        }
    }
}

/// A CONVOLUTION_2D node of the delegate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ConvDesc {
    pub batch: usize,
    /// Source (H, W, C).
    pub src: [usize; 3],
    /// Destination (H, W, C).
    pub dst: [usize; 3],
    /// (KH, KW).
    pub kernel: [usize; 2],
    pub stride: [usize; 2],
    pub dilation: [usize; 2],
    pub padding: Padding2d,
    /// Groups (1 for an ordinary convolution).
    pub groups: usize,
    /// Weights come from a runtime tensor.
    pub runtime_weights: bool,
}

impl ConvDesc {
    /// A batch-1 convolution with constant weights, no groups, dilation 1 and TFLite-style
    /// `scheme` padding; the destination size follows from the window.
    pub fn simple(
        src: [usize; 3],
        out_channels: usize,
        kernel: [usize; 2],
        stride: [usize; 2],
        scheme: Padding,
    ) -> ConvDesc {
        let dst_hw = |axis: usize| match scheme {
            Padding::Same => src[axis].div_ceil(stride[axis].max(1)),
            Padding::Valid => match src[axis].checked_sub(kernel[axis]) {
                Some(rest) => rest / stride[axis].max(1) + 1,
                None => 0,
            },
        };
        ConvDesc {
            batch: 1,
            src,
            dst: [dst_hw(0), dst_hw(1), out_channels],
            kernel,
            stride,
            dilation: [1, 1],
            padding: Padding2d::from_scheme(scheme, [src[0], src[1]], kernel, stride, [1, 1]),
            groups: 1,
            runtime_weights: false,
        }
    }

    /// 1-wide kernel along width with stride 1, dilation 1 and no width padding (`kx1`).
    pub fn kx1(&self) -> bool {
        self.kernel[1] == 1
            && self.stride[1] == 1
            && self.dilation[1] == 1
            && self.padding.prepended[1] == 0
            && self.padding.appended[1] == 0
    }

    /// The same test along height (`ky1`).
    pub fn ky1(&self) -> bool {
        self.kernel[0] == 1
            && self.stride[0] == 1
            && self.dilation[0] == 1
            && self.padding.prepended[0] == 0
            && self.padding.appended[0] == 0
    }
}

/// A DEPTHWISE_CONVOLUTION node of the delegate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DepthwiseDesc {
    pub batch: usize,
    /// Source (H, W, C).
    pub src: [usize; 3],
    /// Destination (H, W, C*multiplier).
    pub dst: [usize; 3],
    pub kernel: [usize; 2],
    pub stride: [usize; 2],
    pub dilation: [usize; 2],
    pub padding: Padding2d,
    pub multiplier: usize,
    pub runtime_weights: bool,
}

/// A FULLY_CONNECTED node of the delegate (input H = W = 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FcDesc {
    pub batch: usize,
    /// Input channels (weights width I).
    pub src_channels: usize,
    /// Output channels (O).
    pub dst_channels: usize,
    /// One of the op's tensors has B > 1 (BHWC layout), so the op is "batch supported".
    pub batch_supported: bool,
}
