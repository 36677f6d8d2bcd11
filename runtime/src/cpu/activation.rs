//! Activations fused into an operator's output.

use serde::{Deserialize, Serialize};

/// A fused activation, applied element-wise to an operator's output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Activation {
    #[default]
    None,
    Relu,
    /// Clamp to [-1, 1].
    ReluN1To1,
    Relu6,
    Tanh,
}

impl Activation {
    /// The activation of one value.
    #[inline(always)]
    pub fn apply(self, x: f32) -> f32 {
        match self {
            Activation::None => x,
            Activation::Relu => x.max(0.0),
            Activation::ReluN1To1 => x.clamp(-1.0, 1.0),
            Activation::Relu6 => x.clamp(0.0, 6.0),
            Activation::Tanh => x.tanh(),
        }
    }

    /// Applies the activation in place.
    pub fn apply_slice(self, xs: &mut [f32]) {
        if self != Activation::None {
            for x in xs {
                *x = self.apply(*x);
            }
        }
    }

    /// The (low, high) clamp this activation is, if it is one (every activation but `Tanh`).
    pub fn clamp_range(self) -> Option<(f32, f32)> {
        match self {
            Activation::None => Some((f32::NEG_INFINITY, f32::INFINITY)),
            Activation::Relu => Some((0.0, f32::INFINITY)),
            Activation::ReluN1To1 => Some((-1.0, 1.0)),
            Activation::Relu6 => Some((0.0, 6.0)),
            Activation::Tanh => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn activations_match_their_definitions() {
        let xs = [-7.0f32, -1.5, -0.5, 0.0, 0.5, 1.5, 7.0];
        let mut v = xs;
        Activation::Relu6.apply_slice(&mut v);
        assert_eq!(v, [0.0, 0.0, 0.0, 0.0, 0.5, 1.5, 6.0]);
        let mut v = xs;
        Activation::ReluN1To1.apply_slice(&mut v);
        assert_eq!(v, [-1.0, -1.0, -0.5, 0.0, 0.5, 1.0, 1.0]);
        assert_eq!(Activation::Relu.apply(-3.0), 0.0);
        assert_eq!(Activation::Tanh.apply(0.5), 0.5f32.tanh());
        assert_eq!(Activation::None.apply(-3.0), -3.0);
    }
}
