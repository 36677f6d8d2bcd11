//! Bad input never panics: it gives an error that says what is wrong and where.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use tandem_compiler::tflite::{fb, read_model};
use tandem_compiler::{inspect, tflite};

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn fixture_bytes() -> Vec<u8> {
    std::fs::read(repo_root().join("models/fixtures/mobile_block_fp32.tflite")).expect("fixture")
}

/// The error message (with context chain) of reading `bytes`; fails the test if reading succeeds.
fn read_error(bytes: &[u8]) -> String {
    match read_model(bytes) {
        Ok(_) => panic!("reading succeeded, an error was expected"),
        Err(e) => format!("{e:#}"),
    }
}

/// The fixture with `edit` applied to its object form.
fn edited(edit: impl FnOnce(&mut fb::ModelT)) -> Vec<u8> {
    let bytes = fixture_bytes();
    let mut model = fb::root_as_model(&bytes)
        .expect("fixture verifies")
        .unpack();
    edit(&mut model);
    let mut fbb = flatbuffers::FlatBufferBuilder::new();
    let root = model.pack(&mut fbb);
    fb::finish_model_buffer(&mut fbb, root);
    fbb.finished_data().to_vec()
}

fn subgraph(m: &mut fb::ModelT) -> &mut fb::SubGraphT {
    &mut m.subgraphs.as_mut().expect("subgraphs")[0]
}

fn operator(m: &mut fb::ModelT, i: usize) -> &mut fb::OperatorT {
    &mut subgraph(m).operators.as_mut().expect("operators")[i]
}

fn tensor(m: &mut fb::ModelT, i: usize) -> &mut fb::TensorT {
    &mut subgraph(m).tensors.as_mut().expect("tensors")[i]
}

/// Reads, inspects and rewrites `bytes`, reporting a panic instead of unwinding.
fn survives(bytes: &[u8]) -> bool {
    catch_unwind(AssertUnwindSafe(|| {
        if let Ok(graph) = read_model(bytes) {
            let _ = inspect::report(&graph);
            let _ = tflite::write_model(&graph);
            let options = tandem_compiler::lower::CompileOptions {
                threads: 1,
                ..Default::default()
            };
            let _ = tandem_compiler::lower::compile(graph, &options);
        }
    }))
    .is_ok()
}

#[test]
fn the_unedited_fixture_reads() {
    assert!(read_model(&edited(|_| {})).is_ok());
}

#[test]
fn empty_and_tiny_files_are_rejected() {
    assert!(read_error(b"").contains("0 bytes long, too short"));
    assert!(read_error(b"TFL3").contains("too short"));
}

#[test]
fn other_file_types_are_named_as_such() {
    let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";
    let npy = b"\x93NUMPY\x01\x00v\0{'descr': '<f4'}";
    let zip = b"PK\x03\x04\x14\0\0\0\x08\0";
    for bytes in [&png[..], &npy[..], &zip[..], b"just some text, not a model"] {
        assert!(
            read_error(bytes).contains("not a TFLite model"),
            "{bytes:?}"
        );
    }
}

#[test]
fn every_truncation_is_an_error() {
    let bytes = fixture_bytes();
    for len in 0..bytes.len() - 16 {
        let result = catch_unwind(|| read_model(&bytes[..len]).is_err());
        assert!(
            matches!(result, Ok(true)),
            "prefix of {len} bytes: {result:?}"
        );
    }
}

#[test]
fn random_bytes_are_errors() {
    let mut state = 0x1234_5678_9abc_def0u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for i in 0..3000 {
        let len = (next() % 4096) as usize;
        let mut bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        if i % 2 == 0 && len >= 8 {
            bytes[4..8].copy_from_slice(b"TFL3");
        }
        let result = catch_unwind(|| read_model(&bytes).is_err());
        assert!(
            matches!(result, Ok(true)),
            "random input {i} ({len} bytes): {result:?}"
        );
    }
}

#[test]
fn single_bit_flips_never_panic() {
    let bytes = fixture_bytes();
    let mut panics = Vec::new();
    for pos in 0..bytes.len() {
        let mut flipped = bytes.clone();
        flipped[pos] ^= 1 << (pos % 8);
        if !survives(&flipped) {
            panics.push(pos);
        }
    }
    assert!(panics.is_empty(), "panics at byte positions {panics:?}");
}

#[test]
fn fuzz_regressions_never_panic() {
    let dir = repo_root().join("compiler/tests/regressions");
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).expect("regressions folder") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "bin") {
            let bytes = std::fs::read(&path).expect("read");
            assert!(survives(&bytes), "{} panics", path.display());
            count += 1;
        }
    }
    assert!(count > 0, "no regression inputs in {}", dir.display());
}

#[test]
fn tensor_index_out_of_range_names_the_operator() {
    let e = read_error(&edited(|m| {
        operator(m, 1).inputs.as_mut().expect("inputs")[0] = 999
    }));
    assert!(
        e.contains("operator 1 (CONV_2D)") && e.contains("refers to tensor 999"),
        "{e}"
    );
    let e = read_error(&edited(|m| {
        operator(m, 0).outputs.as_mut().expect("outputs")[0] = -5
    }));
    assert!(
        e.contains("operator 0 (PAD)") && e.contains("tensor -5"),
        "{e}"
    );
}

#[test]
fn opcode_index_out_of_range_is_named() {
    let e = read_error(&edited(|m| operator(m, 2).opcode_index = 77));
    assert!(
        e.contains("operator 2") && e.contains("opcode index 77 is out of range"),
        "{e}"
    );
}

#[test]
fn buffer_index_out_of_range_names_the_tensor() {
    let e = read_error(&edited(|m| tensor(m, 3).buffer = 9999));
    assert!(
        e.contains("tensor 3") && e.contains("buffer index 9999 is out of range"),
        "{e}"
    );
}

#[test]
fn graph_io_out_of_range_is_named() {
    let e = read_error(&edited(|m| subgraph(m).outputs = Some(vec![1000])));
    assert!(e.contains("a graph output refers to tensor 1000"), "{e}");
}

#[test]
fn constant_data_of_the_wrong_size_is_named() {
    let e = read_error(&edited(|m| {
        let weights = operator(m, 1).inputs.as_ref().expect("inputs")[1] as usize;
        let buffer = tensor(m, weights).buffer as usize;
        m.buffers.as_mut().expect("buffers")[buffer]
            .data
            .as_mut()
            .expect("data")
            .truncate(10);
    }));
    assert!(e.contains("constant data is 10 bytes"), "{e}");
}

#[test]
fn negative_dimensions_are_named() {
    let e = read_error(&edited(|m| tensor(m, 0).shape = Some(vec![1, -3, 4, 4])));
    assert!(
        e.contains("tensor 0") && e.contains("negative dimension -3"),
        "{e}"
    );
}

#[test]
fn cycles_are_detected() {
    // Make PAD (operator 0) read the output of the CONV_2D (operator 1) that reads PAD's output.
    let e = read_error(&edited(|m| {
        let conv_out = operator(m, 1).outputs.as_ref().expect("outputs")[0];
        operator(m, 0).inputs.as_mut().expect("inputs")[0] = conv_out;
    }));
    assert!(e.contains("cycle through operator 0 (PAD)"), "{e}");
}

#[test]
fn declared_shapes_that_disagree_are_named() {
    let e = read_error(&edited(|m| {
        let out = operator(m, 1).outputs.as_ref().expect("outputs")[0] as usize;
        tensor(m, out).shape = Some(vec![1, 16, 16, 99]);
    }));
    assert!(
        e.contains("operator 1 (CONV_2D)") && e.contains("declared [1, 16, 16, 99]"),
        "{e}"
    );
}

#[test]
fn mismatched_operand_shapes_are_named() {
    // Feed the conv its own weights as input: rank and channel checks must catch it.
    let e = read_error(&edited(|m| {
        let op = operator(m, 1);
        let inputs = op.inputs.as_mut().expect("inputs");
        inputs.swap(0, 2);
    }));
    assert!(e.contains("operator 1 (CONV_2D)"), "{e}");
}

#[test]
fn invalid_attributes_are_named() {
    let e = read_error(&edited(|m| {
        if let fb::BuiltinOptionsT::Conv2DOptions(o) = &mut operator(m, 1).builtin_options {
            o.stride_w = 0;
        }
    }));
    assert!(
        e.contains("operator 1 (CONV_2D)") && e.contains("stride_w is 0"),
        "{e}"
    );
    let e = read_error(&edited(|m| {
        operator(m, 1).builtin_options = fb::BuiltinOptionsT::SoftmaxOptions(Box::default());
    }));
    assert!(e.contains("SoftmaxOptions, expected Conv2DOptions"), "{e}");
}

#[test]
fn two_writers_of_one_tensor_are_named() {
    let e = read_error(&edited(|m| {
        let pad_out = operator(m, 0).outputs.as_ref().expect("outputs")[0];
        operator(m, 1).outputs.as_mut().expect("outputs")[0] = pad_out;
    }));
    assert!(
        e.contains("operator 1 (CONV_2D)") && e.contains("written by two operators"),
        "{e}"
    );
}

#[test]
fn missing_subgraphs_and_custom_names_are_named() {
    assert!(read_error(&edited(|m| m.subgraphs = Some(vec![]))).contains("no subgraphs"));
    let e = read_error(&edited(|m| {
        let code = &mut m.operator_codes.as_mut().expect("codes")[0];
        code.builtin_code = fb::BuiltinOperator::CUSTOM;
        code.deprecated_builtin_code = 32;
        code.custom_code = None;
    }));
    assert!(
        e.contains("operator code 0 is CUSTOM but has no custom_code"),
        "{e}"
    );
}

#[test]
fn extended_builtin_codes_are_read_from_either_field() {
    // Old files carry the code in the deprecated byte only; new ones in builtin_code with 127
    // (placeholder) in the byte. Both must read as the same operator.
    let deprecated_only = edited(|m| {
        for c in m.operator_codes.as_mut().expect("codes") {
            c.deprecated_builtin_code = c.builtin_code.0 as i8;
            c.builtin_code = fb::BuiltinOperator(0);
        }
    });
    let a = inspect::report(&read_model(&deprecated_only).expect("reads")).expect("report");
    let b = inspect::report(&read_model(&fixture_bytes()).expect("reads")).expect("report");
    assert_eq!(a.op_counts, b.op_counts);
    // A code above 127 (BROADCAST_TO = 130) is read from builtin_code.
    let extended = edited(|m| {
        let code = &mut m.operator_codes.as_mut().expect("codes")[0];
        code.deprecated_builtin_code = 127;
        code.builtin_code = fb::BuiltinOperator::BROADCAST_TO;
    });
    let report = inspect::report(&read_model(&extended).expect("reads")).expect("report");
    assert!(
        report.op_counts.contains_key("BROADCAST_TO"),
        "{:?}",
        report.op_counts
    );
}
