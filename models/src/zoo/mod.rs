//! The evaluation architectures.

mod inception;
mod mobilenet;
mod resnet;
mod vgg;

pub use inception::inception_v3;
pub use mobilenet::{mobilenet_v1, mobilenet_v2};
pub use resnet::{resnet18, resnet34};
pub use vgg::vgg16;
