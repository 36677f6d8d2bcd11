//! Any bytes given to the reader, then to shape inference, inspection, the writer and the CPU
//! compiler (passes, lowering, artifact validation), must give a result or an error, never a
//! panic, a hang or an abort.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tandem_compiler::lower::{compile, CompileOptions};
use tandem_compiler::{inspect, tflite};

fuzz_target!(|data: &[u8]| {
    if let Ok(graph) = tflite::read_model(data) {
        let _ = inspect::report(&graph);
        let _ = tflite::write_model(&graph);
        let _ = compile(graph, &CompileOptions { threads: 1, ..Default::default() });
    }
});
