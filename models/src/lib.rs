//! tandem-models: the model zoo.
//!
//! Float32, batch-1 builders with seeded weights for the co-execution paper's evaluation set
//! (VGG16, ResNet-18, ResNet-34, Inception-v3), MobileNetV1/V2, and tiny nets that together use
//! every operator tandem reads. `cargo xtask zoo` writes them as `.tflite`; the same seed always
//! gives the same bytes.

pub mod inputs;
pub mod net;
pub use tandem_runtime::rng;
pub mod tiny;
pub mod zoo;

use anyhow::Result;
use tandem_compiler::ir::Graph;

/// Seed of every zoo model's weights.
pub const SEED: u64 = 0x7A_4D_E3;

/// A zoo model.
pub struct ZooModel {
    pub name: &'static str,
    pub build: fn(u64) -> Result<Graph>,
    /// Small enough to commit reference outputs for.
    pub small: bool,
    /// Runs in the official interpreter (false for nets with custom ops it lacks).
    pub runs_in_interpreter: bool,
}

impl ZooModel {
    /// Builds the model with the zoo seed.
    pub fn graph(&self) -> Result<Graph> {
        (self.build)(SEED)
    }

    /// The model as `.tflite` bytes.
    pub fn tflite(&self) -> Result<Vec<u8>> {
        tandem_compiler::tflite::write_model(&self.graph()?)
    }
}

const fn entry(name: &'static str, build: fn(u64) -> Result<Graph>, small: bool) -> ZooModel {
    ZooModel {
        name,
        build,
        small,
        runs_in_interpreter: true,
    }
}

/// Every zoo model, small ones first.
pub fn all() -> Vec<ZooModel> {
    vec![
        entry("tiny_elementwise", tiny::tiny_elementwise, true),
        entry("tiny_conv", tiny::tiny_conv, true),
        entry("tiny_shape", tiny::tiny_shape, true),
        entry("tiny_weights", tiny::tiny_weights, true),
        ZooModel {
            runs_in_interpreter: false,
            ..entry(
                "tiny_transpose_conv_bias",
                tiny::tiny_transpose_conv_bias,
                true,
            )
        },
        entry("mobilenet_v1", zoo::mobilenet_v1, true),
        entry("mobilenet_v2", zoo::mobilenet_v2, true),
        entry("resnet18", zoo::resnet18, false),
        entry("resnet34", zoo::resnet34, false),
        entry("inception_v3", zoo::inception_v3, false),
        entry("vgg16", zoo::vgg16, false),
    ]
}

/// The zoo model called `name`.
pub fn by_name(name: &str) -> Option<ZooModel> {
    all().into_iter().find(|m| m.name == name)
}
