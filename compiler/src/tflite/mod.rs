//! TensorFlow Lite files: schema bindings, reader and writer.
//!
//! The bindings in `generated.rs` come from `compiler/schema/tflite.fbs` (our subset of the format)
//! through a pinned flatc; regenerate them with `cargo xtask codegen`, never by hand.

#[allow(
    clippy::all,
    clippy::pedantic,
    clippy::restriction,
    unused_imports,
    dead_code,
    non_camel_case_types,
    non_snake_case,
    unsafe_op_in_unsafe_fn,
    mismatched_lifetime_syntaxes
)]
#[rustfmt::skip]
mod generated;

pub mod reader;
pub mod writer;

/// The generated flatbuffers types of the `tflite` schema namespace.
pub use generated::tflite as fb;
pub use reader::{read_model, TfliteFile};
pub use writer::write_model;
