//! The C API called from Rust: lifetimes, outputs, error statuses and messages, and that the
//! hand-written header declares exactly what the library exports, with the same values.

use std::ffi::{c_char, CStr, CString};
use std::ptr::{null, null_mut};
use tandem_capi::*;
use tandem_runtime::npy::NpyArray;
use tandem_runtime::session::{Model, Session};

fn last_error() -> String {
    // SAFETY: never NULL, NUL-terminated, valid until the next call on this thread.
    unsafe { CStr::from_ptr(tandem_last_error()) }
        .to_string_lossy()
        .into_owned()
}

fn zoo_artifact(name: &str) -> Vec<u8> {
    let graph = tandem_models::by_name(name)
        .expect("zoo model")
        .graph()
        .expect("builds");
    tandem_compiler::lower::compile(graph, &tandem_compiler::lower::CompileOptions::cpu(1, name))
        .expect("compiles")
        .encode()
        .expect("encodes")
}

fn load(bytes: &[u8]) -> *mut TandemModel {
    let mut model = null_mut();
    // SAFETY: valid buffer and out pointer.
    let status =
        unsafe { tandem_model_load_memory(bytes.as_ptr().cast(), bytes.len(), &mut model) };
    assert_eq!(status, TandemStatus::Ok, "{}", last_error());
    assert_eq!(last_error(), "");
    model
}

fn info(model: *const TandemModel, input: bool, index: usize) -> TandemTensorInfo {
    let mut info = std::mem::MaybeUninit::uninit();
    // SAFETY: live model, valid out pointer.
    let status = unsafe {
        if input {
            tandem_model_input_info(model, index, info.as_mut_ptr())
        } else {
            tandem_model_output_info(model, index, info.as_mut_ptr())
        }
    };
    assert_eq!(status, TandemStatus::Ok, "{}", last_error());
    // SAFETY: written on success.
    unsafe { info.assume_init() }
}

fn dims(info: &TandemTensorInfo) -> Vec<usize> {
    // SAFETY: `dims` holds `rank` values while the model lives.
    unsafe { std::slice::from_raw_parts(info.dims, info.rank) }.to_vec()
}

fn name(info: &TandemTensorInfo) -> String {
    // SAFETY: NUL-terminated while the model lives.
    unsafe { CStr::from_ptr(info.name) }
        .to_string_lossy()
        .into_owned()
}

#[test]
fn describes_runs_and_matches_the_rust_session_after_the_model_handle_is_freed() {
    let bytes = zoo_artifact("tiny_elementwise");
    let reference = Model::load(&bytes).expect("loads");
    let model = load(&bytes);

    let mut n_inputs = 0;
    let mut n_outputs = 0;
    // SAFETY: live model, valid out pointers (throughout this test).
    unsafe {
        assert_eq!(
            tandem_model_input_count(model, &mut n_inputs),
            TandemStatus::Ok
        );
        assert_eq!(
            tandem_model_output_count(model, &mut n_outputs),
            TandemStatus::Ok
        );
    }
    assert_eq!(n_inputs, reference.inputs().len());
    assert_eq!(n_outputs, reference.outputs().len());
    for (i, desc) in reference.inputs().iter().enumerate() {
        let info = info(model, true, i);
        assert_eq!(name(&info), desc.name);
        assert_eq!(dims(&info), desc.shape);
        assert_eq!(info.dtype, TandemDtype::Float32);
        assert_eq!(info.element_count, desc.elements());
        assert_eq!(info.byte_size, 4 * desc.elements());
        let c_name = CString::new(desc.name.clone()).expect("no NUL");
        let mut index = usize::MAX;
        // SAFETY: as above.
        let status = unsafe { tandem_model_input_index(model, c_name.as_ptr(), &mut index) };
        assert_eq!((status, index), (TandemStatus::Ok, i));
    }
    let out_info = info(model, false, 0);
    assert_eq!(dims(&out_info), reference.outputs()[0].shape);

    let mut session = null_mut();
    // SAFETY: as above; NULL options mean defaults.
    unsafe {
        assert_eq!(
            tandem_session_create(model, null(), &mut session),
            TandemStatus::Ok
        );
        // The session keeps the model alive.
        tandem_model_free(model);
    }

    let inputs: Vec<NpyArray> = reference
        .inputs()
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let values: Vec<f32> = (0..t.elements())
                .map(|j| (j as f32 * 0.37 + i as f32).sin())
                .collect();
            NpyArray::from_f32(t.shape.clone(), &values)
        })
        .collect();
    for (i, input) in inputs.iter().enumerate() {
        let values = input.to_f32().expect("f32");
        // SAFETY: live session, buffer of `values.len()` floats.
        let status = unsafe { tandem_session_set_input(session, i, values.as_ptr(), values.len()) };
        assert_eq!(status, TandemStatus::Ok, "{}", last_error());
    }
    let expected = Session::new(&reference, 1).run(&inputs).expect("runs");
    for round in 0..2 {
        // SAFETY: live session.
        assert_eq!(
            unsafe { tandem_session_run(session) },
            TandemStatus::Ok,
            "round {round}"
        );
        for (o, want) in expected.iter().enumerate() {
            let want: Vec<u32> = want
                .to_f32()
                .expect("f32")
                .iter()
                .map(|v| v.to_bits())
                .collect();
            let mut ptr = null();
            let mut count = 0;
            // SAFETY: live session, valid out pointers.
            let status = unsafe { tandem_session_output(session, o, &mut ptr, &mut count) };
            assert_eq!(status, TandemStatus::Ok, "{}", last_error());
            // SAFETY: `count` floats at `ptr`, valid until the next run.
            let got = unsafe { std::slice::from_raw_parts(ptr, count) };
            assert_eq!(got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want);
            let mut copy = vec![f32::NAN; count];
            // SAFETY: buffer of `count` floats.
            let status =
                unsafe { tandem_session_copy_output(session, o, copy.as_mut_ptr(), count) };
            assert_eq!(status, TandemStatus::Ok);
            assert_eq!(copy.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want);
            let mut short = vec![0.0f32; count - 1];
            // SAFETY: buffer of `count - 1` floats, the count passed.
            let status =
                unsafe { tandem_session_copy_output(session, o, short.as_mut_ptr(), count - 1) };
            assert_eq!(status, TandemStatus::SizeMismatch);
            assert!(
                last_error().contains(&format!("holds {count} floats, the buffer {}", count - 1)),
                "{}",
                last_error()
            );
        }
    }
    // SAFETY: live session, freed once.
    unsafe { tandem_session_free(session) };
}

#[test]
fn errors_name_the_function_and_the_problem_and_clear_on_success() {
    let bytes = zoo_artifact("tiny_conv");
    let mut model = std::ptr::dangling_mut::<TandemModel>();
    // SAFETY: every pointer is valid or deliberately NULL.
    unsafe {
        assert_eq!(
            tandem_model_load_memory(bytes.as_ptr().cast(), bytes.len() - 1, &mut model),
            TandemStatus::InvalidModel
        );
        assert!(model.is_null(), "out pointer reset on failure");
        let e = last_error();
        assert!(
            e.starts_with("tandem_model_load_memory: ") && e.contains("truncated"),
            "{e}"
        );

        assert_eq!(
            tandem_model_load_memory(bytes.as_ptr().cast(), bytes.len(), null_mut()),
            TandemStatus::NullArgument
        );
        assert!(last_error().contains("`out_model` is NULL"));

        let path = CString::new("/nonexistent/dir/model.tandem").expect("no NUL");
        assert_eq!(
            tandem_model_load_file(path.as_ptr(), &mut model),
            TandemStatus::Io
        );
        assert!(
            last_error().contains("/nonexistent/dir/model.tandem"),
            "{}",
            last_error()
        );

        let model = load(&bytes);
        let mut options = null_mut();
        assert_eq!(
            tandem_session_options_create(&mut options),
            TandemStatus::Ok
        );
        assert_eq!(
            tandem_session_options_set_threads(options, MAX_THREADS + 1),
            TandemStatus::InvalidArgument
        );
        assert!(last_error().contains("at most 256"), "{}", last_error());
        assert_eq!(
            tandem_session_options_set_threads(options, 2),
            TandemStatus::Ok
        );
        assert_eq!(last_error(), "", "a success clears the message");
        assert_eq!(
            tandem_session_options_set_threads(null_mut(), 2),
            TandemStatus::NullArgument
        );
        let mut session = null_mut();
        assert_eq!(
            tandem_session_create(model, options, &mut session),
            TandemStatus::Ok
        );
        tandem_session_options_free(options);

        let input = info(model, true, 0);
        let values = vec![0.25f32; input.element_count + 1];
        assert_eq!(
            tandem_session_set_input(session, 0, values.as_ptr(), values.len()),
            TandemStatus::SizeMismatch
        );
        let e = last_error();
        assert!(
            e.contains(&format!("input 0 '{}'", name(&input)))
                && e.contains(&format!(
                    "holds {} floats, got {}",
                    input.element_count,
                    values.len()
                )),
            "{e}"
        );
        assert_eq!(tandem_session_run(session), TandemStatus::NotReady);
        assert!(last_error().contains("was not set"), "{}", last_error());
        let mut index = 0;
        let bad = CString::new("nope").expect("no NUL");
        assert_eq!(
            tandem_model_input_index(model, bad.as_ptr(), &mut index),
            TandemStatus::InvalidArgument
        );
        assert!(
            last_error().contains(&format!("'{}'", name(&input))),
            "{}",
            last_error()
        );
        assert_eq!(
            tandem_session_set_input(session, 0, values.as_ptr(), input.element_count),
            TandemStatus::Ok
        );
        assert_eq!(tandem_session_run(session), TandemStatus::Ok);
        let mut ptr = null();
        let mut count = 0;
        assert_eq!(
            tandem_session_output(session, 7, &mut ptr, &mut count),
            TandemStatus::InvalidArgument
        );
        assert!(last_error().contains("output index 7 is out of range"));
        assert_eq!(
            tandem_session_output(session, 0, null_mut(), &mut count),
            TandemStatus::NullArgument
        );
        assert!(last_error().contains("`out_data` is NULL"));
        tandem_session_free(session);
        tandem_model_free(model);
    }
}

#[test]
fn an_artifact_whose_arena_cannot_be_allocated_is_rejected_not_aborted() {
    // The loader caps the arena (MAX_ARENA_BYTES); an artifact above the cap is an invalid model.
    let bytes = zoo_artifact("tiny_shape");
    let mut artifact = tandem_runtime::artifact::Artifact::decode(&bytes).expect("decodes");
    artifact.arena_bytes = 1 << 50;
    let huge = artifact.encode().expect("encodes");
    let mut model = null_mut();
    // SAFETY: valid buffer and out pointer.
    let status = unsafe { tandem_model_load_memory(huge.as_ptr().cast(), huge.len(), &mut model) };
    assert_eq!(status, TandemStatus::InvalidModel);
    assert!(
        last_error().contains("exceeds this runtime's limit"),
        "{}",
        last_error()
    );
}

#[test]
fn version_and_status_names_are_static_strings() {
    // SAFETY: static NUL-terminated strings.
    unsafe {
        assert_eq!(
            CStr::from_ptr(tandem_version()).to_str(),
            Ok(env!("CARGO_PKG_VERSION"))
        );
        assert_eq!(
            CStr::from_ptr(tandem_status_name(TandemStatus::SizeMismatch as i32)).to_str(),
            Ok("TANDEM_ERROR_SIZE_MISMATCH")
        );
        assert_eq!(
            CStr::from_ptr(tandem_status_name(-1)).to_str(),
            Ok("TANDEM_UNKNOWN_STATUS")
        );
    }
}

/// `NAME = VALUE` pairs of the header's enumerators with the given prefix.
fn header_enum(header: &str, prefix: &str) -> Vec<(String, i64)> {
    header
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| {
            let (name, rest) = l.split_once('=')?;
            let value = rest
                .trim()
                .trim_end_matches(|c: char| !c.is_ascii_digit())
                .split(|c: char| !c.is_ascii_digit())
                .next()?;
            Some((name.trim().to_string(), value.parse().ok()?))
        })
        .collect()
}

#[test]
fn the_header_matches_the_library() {
    let header = include_str!("../include/tandem.h");
    let source = include_str!("../src/lib.rs");
    // Every status the library returns has the header's value and the name tandem_status_name
    // gives it.
    let statuses = header_enum(header, "TANDEM_OK")
        .into_iter()
        .chain(header_enum(header, "TANDEM_ERROR_"));
    let statuses: Vec<(String, i64)> = statuses.collect();
    assert_eq!(statuses.len(), 10, "{statuses:?}");
    for (name, value) in &statuses {
        // SAFETY: static string.
        let from_lib = unsafe { CStr::from_ptr(tandem_status_name(*value as i32)) };
        assert_eq!(from_lib.to_str(), Ok(name.as_str()), "status {value}");
    }
    let rust_statuses = [
        TandemStatus::Ok,
        TandemStatus::NullArgument,
        TandemStatus::InvalidArgument,
        TandemStatus::Io,
        TandemStatus::InvalidModel,
        TandemStatus::SizeMismatch,
        TandemStatus::OutOfMemory,
        TandemStatus::NotReady,
        TandemStatus::RunFailed,
        TandemStatus::Internal,
    ];
    for status in rust_statuses {
        assert!(
            statuses.iter().any(|(_, v)| *v == status as i64),
            "{status:?} missing from the header"
        );
    }
    let dtypes = header_enum(header, "TANDEM_DTYPE_");
    let rust_dtypes = [
        ("OTHER", TandemDtype::Other),
        ("FLOAT32", TandemDtype::Float32),
        ("FLOAT16", TandemDtype::Float16),
        ("FLOAT64", TandemDtype::Float64),
        ("INT8", TandemDtype::Int8),
        ("UINT8", TandemDtype::Uint8),
        ("INT16", TandemDtype::Int16),
        ("INT32", TandemDtype::Int32),
        ("INT64", TandemDtype::Int64),
        ("BOOL", TandemDtype::Bool),
    ];
    assert_eq!(dtypes.len(), rust_dtypes.len(), "{dtypes:?}");
    for (name, dtype) in rust_dtypes {
        assert!(
            dtypes.contains(&(format!("TANDEM_DTYPE_{name}"), dtype as i64)),
            "TANDEM_DTYPE_{name} = {} not in the header",
            dtype as i64
        );
    }
    assert!(header.contains(&format!("#define TANDEM_MAX_THREADS {MAX_THREADS}")));
    // Every exported function is declared, and every declared function is exported.
    let exported: Vec<&str> = source
        .split("extern \"C\" fn ")
        .skip(1)
        .filter_map(|rest| rest.split('(').next())
        .collect();
    let declared: Vec<&str> = header
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("tandem_"))
        .filter(|w| header.contains(&format!("{w}(")))
        .collect();
    for f in &exported {
        assert!(
            declared.contains(f),
            "{f} is exported but not declared in tandem.h"
        );
    }
    for f in &declared {
        assert!(
            exported.contains(f),
            "tandem.h declares {f}, which the library does not export"
        );
    }
    assert!(exported.len() >= 20, "{exported:?}");
}

#[test]
fn null_inputs_to_every_handle_function_are_errors_not_crashes() {
    let mut n = 0;
    let mut info = std::mem::MaybeUninit::uninit();
    let mut f = 0.0f32;
    let mut ptr: *const f32 = null();
    let name: *const c_char = c"x".as_ptr();
    // SAFETY: every pointer is valid or NULL.
    unsafe {
        let statuses = [
            tandem_model_load_file(null(), null_mut()),
            tandem_model_input_count(null(), &mut n),
            tandem_model_output_count(null(), &mut n),
            tandem_model_input_info(null(), 0, info.as_mut_ptr()),
            tandem_model_output_info(null(), 0, info.as_mut_ptr()),
            tandem_model_input_index(null(), name, &mut n),
            tandem_model_output_index(null(), name, &mut n),
            tandem_session_options_create(null_mut()),
            tandem_session_create(null(), null(), null_mut()),
            tandem_session_set_input(null_mut(), 0, &f, 1),
            tandem_session_run(null_mut()),
            tandem_session_output(null(), 0, &mut ptr, &mut n),
            tandem_session_copy_output(null(), 0, &mut f, 1),
        ];
        for (i, s) in statuses.iter().enumerate() {
            assert_eq!(*s, TandemStatus::NullArgument, "call {i}");
        }
    }
    assert!(last_error().contains("is NULL"));
}
