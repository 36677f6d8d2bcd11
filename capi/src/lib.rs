//! tandem-capi: the C API over tandem's runtime (`include/tandem.h`).
//!
//! Every entry point is `extern "C"`, catches panics (a Rust panic never unwinds into C), checks
//! its pointers and lengths, and returns a [`TandemStatus`]; the message of the last failure on
//! the calling thread is available from [`tandem_last_error`]. The header documents ownership and
//! lifetimes; this file states the same contracts on each function.
//!
//! Handles are opaque: a model is reference-counted, so a session keeps its model alive and
//! `tandem_model_free` may be called while sessions exist; session options are a separate opaque
//! struct so that fields (GPU device, CPU fallback) can be added without changing signatures.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::Arc;
use tandem_runtime::artifact::Artifact;
use tandem_runtime::npy::NpyArray;
use tandem_runtime::session::{Model, Session};
use tandem_runtime::DType;

/// Result of every fallible call (`tandem_status` in C). `Ok` is 0; the values are stable.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TandemStatus {
    Ok = 0,
    /// A required pointer argument was NULL.
    NullArgument = 1,
    /// An argument is out of range (index, thread count) or malformed (path, name).
    InvalidArgument = 2,
    /// A file could not be opened or read.
    Io = 3,
    /// The bytes are not a valid artifact (bad magic, version, checksum, contents).
    InvalidModel = 4,
    /// A buffer's length does not match the tensor's element count.
    SizeMismatch = 5,
    /// An allocation the call needed (activation arena) failed.
    OutOfMemory = 6,
    /// The call needs state that is not there yet (an input not set, no run yet).
    NotReady = 7,
    /// Running the model failed.
    RunFailed = 8,
    /// A bug in tandem (a caught panic); the message says where.
    Internal = 9,
}

/// Element type of a tensor (`tandem_dtype` in C). The values are stable; `Other` stands for
/// types the C API does not name.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TandemDtype {
    Other = 0,
    Float32 = 1,
    Float16 = 2,
    Float64 = 3,
    Int8 = 4,
    Uint8 = 5,
    Int16 = 6,
    Int32 = 7,
    Int64 = 8,
    Bool = 9,
}

impl From<DType> for TandemDtype {
    fn from(d: DType) -> Self {
        match d {
            DType::F32 => TandemDtype::Float32,
            DType::F16 => TandemDtype::Float16,
            DType::F64 => TandemDtype::Float64,
            DType::I8 => TandemDtype::Int8,
            DType::U8 => TandemDtype::Uint8,
            DType::I16 => TandemDtype::Int16,
            DType::I32 => TandemDtype::Int32,
            DType::I64 => TandemDtype::Int64,
            DType::Bool => TandemDtype::Bool,
            _ => TandemDtype::Other,
        }
    }
}

/// Description of a model input or output (`tandem_tensor_info` in C). The pointers are owned by
/// the model and stay valid until the model's last reference (handle or session) is freed.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TandemTensorInfo {
    /// NUL-terminated UTF-8 name.
    pub name: *const c_char,
    pub dtype: TandemDtype,
    /// Number of dimensions; `dims` holds `rank` values (NULL-free even for rank 0).
    pub rank: usize,
    pub dims: *const usize,
    /// Product of the dimensions.
    pub element_count: usize,
    /// `element_count` times the element size.
    pub byte_size: usize,
}

/// Most CPU threads a session may ask for.
pub const MAX_THREADS: usize = 256;

/// A loaded model (`tandem_model` in C).
pub struct TandemModel {
    inner: Arc<ModelInner>,
}

struct ModelInner {
    model: Model,
    inputs: Vec<TensorMeta>,
    outputs: Vec<TensorMeta>,
}

struct TensorMeta {
    name: CString,
    dtype: DType,
    /// Never empty, so that `dims` is a valid pointer even for rank 0 (`rank` says how many
    /// values count).
    dims: Vec<usize>,
    rank: usize,
    elements: usize,
    bytes: usize,
}

impl TensorMeta {
    fn new(desc: &tandem_runtime::artifact::TensorDesc) -> Self {
        let mut dims = desc.shape.clone();
        let rank = dims.len();
        if dims.is_empty() {
            dims.push(0);
        }
        TensorMeta {
            name: c_string(&desc.name),
            dtype: desc.dtype,
            dims,
            rank,
            elements: desc.elements(),
            bytes: desc.bytes(),
        }
    }

    fn info(&self) -> TandemTensorInfo {
        TandemTensorInfo {
            name: self.name.as_ptr(),
            dtype: self.dtype.into(),
            rank: self.rank,
            dims: self.dims.as_ptr(),
            element_count: self.elements,
            byte_size: self.bytes,
        }
    }
}

/// Options for a new session (`tandem_session_options` in C). Opaque so that fields can be added.
#[derive(Debug, Clone, Default)]
pub struct TandemSessionOptions {
    /// CPU threads; 0 = the count the model was compiled for, capped at the host's parallelism.
    threads: usize,
}

/// A session: the model's arena, threads, staged inputs and last outputs (`tandem_session` in C).
pub struct TandemSession {
    // Drop order matters: `session` borrows from `model` and is declared (so dropped) first.
    session: Session<'static>,
    inputs: Vec<NpyArray>,
    input_set: Vec<bool>,
    outputs: Vec<Vec<f32>>,
    ran: bool,
    model: Arc<ModelInner>,
}

/// A failure: status and message.
struct Failure {
    status: TandemStatus,
    message: String,
}

type CallResult<T = ()> = Result<T, Failure>;

fn fail<T>(status: TandemStatus, message: impl Into<String>) -> CallResult<T> {
    Err(Failure {
        status,
        message: message.into(),
    })
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// A C string from text that may hold NUL bytes (they become U+FFFD).
fn c_string(text: &str) -> CString {
    CString::new(text.replace('\0', "\u{FFFD}")).unwrap_or_default()
}

fn set_last_error(message: &str) {
    // During thread teardown the slot may be gone; the status still reports the failure.
    let _ = LAST_ERROR.try_with(|slot| {
        if let Ok(mut slot) = slot.try_borrow_mut() {
            *slot = c_string(message);
        }
    });
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// Runs an entry point's body: catches panics, records the message (cleared on success).
fn guard(function: &str, body: impl FnOnce() -> CallResult) -> TandemStatus {
    let (status, message) = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => (TandemStatus::Ok, String::new()),
        Ok(Err(f)) => (f.status, format!("{function}: {}", f.message)),
        Err(payload) => (
            TandemStatus::Internal,
            format!(
                "{function}: internal error (a bug in tandem, please report it): {}",
                panic_message(payload.as_ref())
            ),
        ),
    };
    set_last_error(&message);
    status
}

/// `ptr` as a reference, or a `NullArgument` failure naming the argument.
///
/// # Safety
/// A non-null `ptr` must point to a live `T`.
unsafe fn arg<'a, T>(ptr: *const T, name: &str) -> CallResult<&'a T> {
    // SAFETY: the caller guarantees a non-null pointer is valid.
    match unsafe { ptr.as_ref() } {
        Some(r) => Ok(r),
        None => fail(TandemStatus::NullArgument, format!("`{name}` is NULL")),
    }
}

/// `ptr` as a mutable reference, or a `NullArgument` failure naming the argument.
///
/// # Safety
/// A non-null `ptr` must point to a live `T` not otherwise borrowed.
unsafe fn arg_mut<'a, T>(ptr: *mut T, name: &str) -> CallResult<&'a mut T> {
    // SAFETY: the caller guarantees a non-null pointer is valid and unaliased.
    match unsafe { ptr.as_mut() } {
        Some(r) => Ok(r),
        None => fail(TandemStatus::NullArgument, format!("`{name}` is NULL")),
    }
}

/// Writes `value` to a non-null out pointer.
///
/// # Safety
/// A non-null `out` must be valid for a write of `T`.
unsafe fn write_out<T>(out: *mut T, name: &str, value: T) -> CallResult {
    if out.is_null() {
        return fail(TandemStatus::NullArgument, format!("`{name}` is NULL"));
    }
    // SAFETY: non-null, and the caller guarantees it is writable.
    unsafe { out.write(value) };
    Ok(())
}

/// The library version, e.g. `"0.1.0"`: a static NUL-terminated string, never NULL.
#[no_mangle]
pub extern "C" fn tandem_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// The name of a status (`"TANDEM_OK"`, `"TANDEM_ERROR_SIZE_MISMATCH"`, ...), or
/// `"TANDEM_UNKNOWN_STATUS"` for a value that is not one: a static string, never NULL.
#[no_mangle]
pub extern "C" fn tandem_status_name(status: c_int) -> *const c_char {
    let name: &'static str = match status {
        0 => "TANDEM_OK\0",
        1 => "TANDEM_ERROR_NULL_ARGUMENT\0",
        2 => "TANDEM_ERROR_INVALID_ARGUMENT\0",
        3 => "TANDEM_ERROR_IO\0",
        4 => "TANDEM_ERROR_INVALID_MODEL\0",
        5 => "TANDEM_ERROR_SIZE_MISMATCH\0",
        6 => "TANDEM_ERROR_OUT_OF_MEMORY\0",
        7 => "TANDEM_ERROR_NOT_READY\0",
        8 => "TANDEM_ERROR_RUN_FAILED\0",
        9 => "TANDEM_ERROR_INTERNAL\0",
        _ => "TANDEM_UNKNOWN_STATUS\0",
    };
    name.as_ptr().cast()
}

/// The message of the last call on this thread: empty after a success, otherwise naming the
/// function, the argument or tensor, and what is wrong. Never NULL; owned by the library and
/// valid until the next tandem call on this thread.
#[no_mangle]
pub extern "C" fn tandem_last_error() -> *const c_char {
    LAST_ERROR
        .try_with(|slot| slot.try_borrow().map(|s| s.as_ptr()).ok())
        .ok()
        .flatten()
        .unwrap_or(c"".as_ptr())
}

fn new_model(model: Model) -> *mut TandemModel {
    let inputs = model.inputs().into_iter().map(TensorMeta::new).collect();
    let outputs = model.outputs().into_iter().map(TensorMeta::new).collect();
    Box::into_raw(Box::new(TandemModel {
        inner: Arc::new(ModelInner {
            model,
            inputs,
            outputs,
        }),
    }))
}

/// Loads and validates a compiled model (`.tandem`) from a file.
///
/// On success `*out_model` is a new model the caller frees with [`tandem_model_free`]; on failure
/// it is set to NULL (when `out_model` is not NULL).
///
/// # Safety
/// `path` must be NULL or a NUL-terminated string (UTF-8 on non-Unix hosts); `out_model` must be
/// NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn tandem_model_load_file(
    path: *const c_char,
    out_model: *mut *mut TandemModel,
) -> TandemStatus {
    guard("tandem_model_load_file", || {
        // SAFETY: the caller's contract.
        unsafe { write_out(out_model, "out_model", std::ptr::null_mut())? };
        if path.is_null() {
            return fail(TandemStatus::NullArgument, "`path` is NULL");
        }
        // SAFETY: non-null and NUL-terminated by the caller's contract.
        let path = path_from_c(unsafe { CStr::from_ptr(path) })?;
        let file = std::fs::File::open(&path).or_else(|e| {
            fail(
                TandemStatus::Io,
                format!("cannot open '{}': {e}", path.display()),
            )
        })?;
        let artifact = Artifact::read_from(std::io::BufReader::with_capacity(1 << 16, file))
            .or_else(|e| {
                fail(
                    TandemStatus::InvalidModel,
                    format!("'{}': {e}", path.display()),
                )
            })?;
        // SAFETY: checked non-null above.
        unsafe { *out_model = new_model(Model::from_artifact(artifact)) };
        Ok(())
    })
}

#[cfg(unix)]
fn path_from_c(path: &CStr) -> CallResult<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    Ok(PathBuf::from(std::ffi::OsStr::from_bytes(path.to_bytes())))
}

#[cfg(not(unix))]
fn path_from_c(path: &CStr) -> CallResult<PathBuf> {
    match path.to_str() {
        Ok(p) => Ok(PathBuf::from(p)),
        Err(e) => fail(
            TandemStatus::InvalidArgument,
            format!("`path` is not UTF-8: {e}"),
        ),
    }
}

/// Loads and validates a compiled model from `size` bytes at `data`. The bytes are copied: the
/// caller may free them once the call returns.
///
/// On success `*out_model` is a new model the caller frees with [`tandem_model_free`]; on failure
/// it is set to NULL (when `out_model` is not NULL).
///
/// # Safety
/// `data` must be NULL or valid for reads of `size` bytes; `out_model` must be NULL or valid for a
/// write.
#[no_mangle]
pub unsafe extern "C" fn tandem_model_load_memory(
    data: *const c_void,
    size: usize,
    out_model: *mut *mut TandemModel,
) -> TandemStatus {
    guard("tandem_model_load_memory", || {
        // SAFETY: the caller's contract.
        unsafe { write_out(out_model, "out_model", std::ptr::null_mut())? };
        if data.is_null() {
            return fail(TandemStatus::NullArgument, "`data` is NULL");
        }
        // SAFETY: non-null and readable for `size` bytes by the caller's contract.
        let bytes = unsafe { std::slice::from_raw_parts(data.cast::<u8>(), size) };
        let model = Model::load(bytes).or_else(|e| {
            fail(
                TandemStatus::InvalidModel,
                format!("{size} bytes at {data:p}: {e}"),
            )
        })?;
        // SAFETY: checked non-null above.
        unsafe { *out_model = new_model(model) };
        Ok(())
    })
}

/// Releases a model handle. Sessions created from it keep the model alive until they are freed.
/// NULL is ignored.
///
/// # Safety
/// `model` must be NULL or a handle from a `tandem_model_load_*` call, not already freed.
#[no_mangle]
pub unsafe extern "C" fn tandem_model_free(model: *mut TandemModel) {
    if model.is_null() {
        return;
    }
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the caller's contract: a live handle from `Box::into_raw`.
        drop(unsafe { Box::from_raw(model) });
    }));
}

/// Which list a tensor query reads.
#[derive(Clone, Copy)]
enum Side {
    Input,
    Output,
}

impl Side {
    fn word(self) -> &'static str {
        match self {
            Side::Input => "input",
            Side::Output => "output",
        }
    }

    fn list(self, m: &ModelInner) -> &[TensorMeta] {
        match self {
            Side::Input => &m.inputs,
            Side::Output => &m.outputs,
        }
    }
}

fn tensor_at(m: &ModelInner, side: Side, index: usize) -> CallResult<&TensorMeta> {
    let list = side.list(m);
    match list.get(index) {
        Some(t) => Ok(t),
        None => fail(
            TandemStatus::InvalidArgument,
            format!(
                "{} index {index} is out of range: the model has {} {}s",
                side.word(),
                list.len(),
                side.word()
            ),
        ),
    }
}

/// # Safety
/// As for the public count functions.
unsafe fn count(
    function: &str,
    model: *const TandemModel,
    side: Side,
    out_count: *mut usize,
) -> TandemStatus {
    guard(function, || {
        // SAFETY: the caller's contract.
        let m = unsafe { arg(model, "model")? };
        // SAFETY: the caller's contract.
        unsafe { write_out(out_count, "out_count", side.list(&m.inner).len()) }
    })
}

/// # Safety
/// As for the public info functions.
unsafe fn info(
    function: &str,
    model: *const TandemModel,
    side: Side,
    index: usize,
    out_info: *mut TandemTensorInfo,
) -> TandemStatus {
    guard(function, || {
        // SAFETY: the caller's contract.
        let m = unsafe { arg(model, "model")? };
        if out_info.is_null() {
            return fail(TandemStatus::NullArgument, "`out_info` is NULL");
        }
        let info = tensor_at(&m.inner, side, index)?.info();
        // SAFETY: checked non-null; the caller's contract makes it writable.
        unsafe { write_out(out_info, "out_info", info) }
    })
}

/// # Safety
/// As for the public index functions.
unsafe fn index_of(
    function: &str,
    model: *const TandemModel,
    side: Side,
    name: *const c_char,
    out_index: *mut usize,
) -> TandemStatus {
    guard(function, || {
        // SAFETY: the caller's contract.
        let m = unsafe { arg(model, "model")? };
        if name.is_null() {
            return fail(TandemStatus::NullArgument, "`name` is NULL");
        }
        // SAFETY: non-null and NUL-terminated by the caller's contract.
        let name = unsafe { CStr::from_ptr(name) };
        let list = side.list(&m.inner);
        let Some(index) = list.iter().position(|t| t.name.as_c_str() == name) else {
            return fail(
                TandemStatus::InvalidArgument,
                format!(
                    "the model has no {} named '{}' (it has {})",
                    side.word(),
                    name.to_string_lossy(),
                    list.iter()
                        .map(|t| format!("'{}'", t.name.to_string_lossy()))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
        };
        // SAFETY: the caller's contract.
        unsafe { write_out(out_index, "out_index", index) }
    })
}

/// Writes the number of model inputs to `*out_count`.
///
/// # Safety
/// `model` must be NULL or a live model handle; `out_count` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn tandem_model_input_count(
    model: *const TandemModel,
    out_count: *mut usize,
) -> TandemStatus {
    // SAFETY: forwarded contract.
    unsafe { count("tandem_model_input_count", model, Side::Input, out_count) }
}

/// Writes the number of model outputs to `*out_count`.
///
/// # Safety
/// `model` must be NULL or a live model handle; `out_count` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn tandem_model_output_count(
    model: *const TandemModel,
    out_count: *mut usize,
) -> TandemStatus {
    // SAFETY: forwarded contract.
    unsafe { count("tandem_model_output_count", model, Side::Output, out_count) }
}

/// Describes input `index` (in the model's input order) into `*out_info`.
///
/// # Safety
/// `model` must be NULL or a live model handle; `out_info` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn tandem_model_input_info(
    model: *const TandemModel,
    index: usize,
    out_info: *mut TandemTensorInfo,
) -> TandemStatus {
    // SAFETY: forwarded contract.
    unsafe {
        info(
            "tandem_model_input_info",
            model,
            Side::Input,
            index,
            out_info,
        )
    }
}

/// Describes output `index` (in the model's output order) into `*out_info`.
///
/// # Safety
/// `model` must be NULL or a live model handle; `out_info` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn tandem_model_output_info(
    model: *const TandemModel,
    index: usize,
    out_info: *mut TandemTensorInfo,
) -> TandemStatus {
    // SAFETY: forwarded contract.
    unsafe {
        info(
            "tandem_model_output_info",
            model,
            Side::Output,
            index,
            out_info,
        )
    }
}

/// Finds the input called `name` and writes its index to `*out_index`.
///
/// # Safety
/// `model` must be NULL or a live model handle; `name` NULL or NUL-terminated; `out_index` NULL
/// or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn tandem_model_input_index(
    model: *const TandemModel,
    name: *const c_char,
    out_index: *mut usize,
) -> TandemStatus {
    // SAFETY: forwarded contract.
    unsafe {
        index_of(
            "tandem_model_input_index",
            model,
            Side::Input,
            name,
            out_index,
        )
    }
}

/// Finds the output called `name` and writes its index to `*out_index`.
///
/// # Safety
/// `model` must be NULL or a live model handle; `name` NULL or NUL-terminated; `out_index` NULL
/// or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn tandem_model_output_index(
    model: *const TandemModel,
    name: *const c_char,
    out_index: *mut usize,
) -> TandemStatus {
    // SAFETY: forwarded contract.
    unsafe {
        index_of(
            "tandem_model_output_index",
            model,
            Side::Output,
            name,
            out_index,
        )
    }
}

/// Creates session options with the defaults (threads: 0, the model's planned count). The caller
/// frees them with [`tandem_session_options_free`]; sessions copy what they need, so options may
/// be freed right after `tandem_session_create`.
///
/// # Safety
/// `out_options` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn tandem_session_options_create(
    out_options: *mut *mut TandemSessionOptions,
) -> TandemStatus {
    guard("tandem_session_options_create", || {
        let options = Box::into_raw(Box::default());
        // SAFETY: the caller's contract.
        let written = unsafe { write_out(out_options, "out_options", options) };
        if written.is_err() {
            // SAFETY: just created by `Box::into_raw` and not handed out.
            drop(unsafe { Box::from_raw(options) });
        }
        written
    })
}

/// Sets the CPU thread count: 1 to [`MAX_THREADS`] (256), or 0 for the count the model was
/// compiled for, capped at the host's available parallelism.
///
/// # Safety
/// `options` must be NULL or live options from [`tandem_session_options_create`].
#[no_mangle]
pub unsafe extern "C" fn tandem_session_options_set_threads(
    options: *mut TandemSessionOptions,
    threads: usize,
) -> TandemStatus {
    guard("tandem_session_options_set_threads", || {
        // SAFETY: the caller's contract.
        let options = unsafe { arg_mut(options, "options")? };
        if threads > MAX_THREADS {
            return fail(
                TandemStatus::InvalidArgument,
                format!("{threads} threads requested, at most {MAX_THREADS} are supported"),
            );
        }
        options.threads = threads;
        Ok(())
    })
}

/// Releases session options. NULL is ignored.
///
/// # Safety
/// `options` must be NULL or options from [`tandem_session_options_create`], not already freed.
#[no_mangle]
pub unsafe extern "C" fn tandem_session_options_free(options: *mut TandemSessionOptions) {
    if options.is_null() {
        return;
    }
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the caller's contract: live options from `Box::into_raw`.
        drop(unsafe { Box::from_raw(options) });
    }));
}

/// Creates a session for `model` (allocating its activation arena and starting its threads).
/// `options` may be NULL for the defaults. The session holds a reference to the model: the model
/// handle may be freed before the session.
///
/// On success `*out_session` is a new session the caller frees with [`tandem_session_free`]; on
/// failure it is set to NULL (when `out_session` is not NULL).
///
/// # Safety
/// `model` must be NULL or a live model handle; `options` NULL or live options; `out_session`
/// NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn tandem_session_create(
    model: *const TandemModel,
    options: *const TandemSessionOptions,
    out_session: *mut *mut TandemSession,
) -> TandemStatus {
    guard("tandem_session_create", || {
        // SAFETY: the caller's contract.
        unsafe { write_out(out_session, "out_session", std::ptr::null_mut())? };
        // SAFETY: the caller's contract.
        let model = unsafe { arg(model, "model")? };
        // SAFETY: the caller's contract (NULL means defaults).
        let options = unsafe { options.as_ref() }.cloned().unwrap_or_default();
        let inner = Arc::clone(&model.inner);
        let threads = match options.threads {
            0 => {
                let host = std::thread::available_parallelism().map_or(1, |n| n.get());
                inner
                    .model
                    .artifact()
                    .threads
                    .clamp(1, host.min(MAX_THREADS))
            }
            n => n,
        };
        // SAFETY: `inner` lives in an `Arc` whose clone the session stores next to the
        // `Session`, so the model outlives it: the `Session` field is declared (so dropped)
        // first, and the `Arc`'s contents never move.
        let model_ref: &'static Model = unsafe { &*(&inner.model as *const Model) };
        let session = Session::try_new(model_ref, threads)
            .or_else(|e| fail(TandemStatus::OutOfMemory, e.to_string()))?;
        let inputs = inner
            .inputs
            .iter()
            .map(|t| NpyArray {
                dtype: t.dtype,
                shape: t.dims[..t.rank].to_vec(),
                data: vec![0; t.bytes],
            })
            .collect();
        let boxed = Box::new(TandemSession {
            session,
            input_set: vec![false; inner.inputs.len()],
            inputs,
            outputs: Vec::new(),
            ran: false,
            model: inner,
        });
        // SAFETY: checked writable by `write_out` above.
        unsafe { *out_session = Box::into_raw(boxed) };
        Ok(())
    })
}

/// Releases a session (its arena, threads and outputs) and its reference to the model. NULL is
/// ignored.
///
/// # Safety
/// `session` must be NULL or a session from [`tandem_session_create`], not already freed, and not
/// in use on another thread.
#[no_mangle]
pub unsafe extern "C" fn tandem_session_free(session: *mut TandemSession) {
    if session.is_null() {
        return;
    }
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the caller's contract: a live session from `Box::into_raw`.
        drop(unsafe { Box::from_raw(session) });
    }));
}

/// Copies `count` floats from `data` into input `index`; `count` must equal the input's element
/// count (values in C order). Inputs stay set across runs until set again.
///
/// # Safety
/// `session` must be NULL or a live session used by no other thread; `data` NULL or valid for
/// reads of `count` floats.
#[no_mangle]
pub unsafe extern "C" fn tandem_session_set_input(
    session: *mut TandemSession,
    index: usize,
    data: *const f32,
    count: usize,
) -> TandemStatus {
    guard("tandem_session_set_input", || {
        // SAFETY: the caller's contract.
        let s = unsafe { arg_mut(session, "session")? };
        let t = tensor_at(&s.model, Side::Input, index)?;
        if data.is_null() {
            return fail(TandemStatus::NullArgument, "`data` is NULL");
        }
        if t.dtype != DType::F32 {
            return fail(
                TandemStatus::InvalidArgument,
                format!(
                    "input {index} '{}' is {}, not FLOAT32",
                    t.name.to_string_lossy(),
                    t.dtype
                ),
            );
        }
        if count != t.elements {
            return fail(
                TandemStatus::SizeMismatch,
                format!(
                    "input {index} '{}' of shape {:?} holds {} floats, got {count}",
                    t.name.to_string_lossy(),
                    &t.dims[..t.rank],
                    t.elements
                ),
            );
        }
        // SAFETY: non-null and readable for `count` floats by the caller's contract.
        let values = unsafe { std::slice::from_raw_parts(data, count) };
        let dst = &mut s.inputs[index].data;
        for (d, v) in dst.chunks_exact_mut(4).zip(values) {
            d.copy_from_slice(&v.to_le_bytes());
        }
        s.input_set[index] = true;
        Ok(())
    })
}

/// Runs the model on the inputs set so far (every input must have been set at least once). The
/// outputs stay available until the next run or until the session is freed.
///
/// # Safety
/// `session` must be NULL or a live session used by no other thread.
#[no_mangle]
pub unsafe extern "C" fn tandem_session_run(session: *mut TandemSession) -> TandemStatus {
    guard("tandem_session_run", || {
        // SAFETY: the caller's contract.
        let s = unsafe { arg_mut(session, "session")? };
        if let Some(missing) = s.input_set.iter().position(|set| !set) {
            return fail(
                TandemStatus::NotReady,
                format!(
                    "input {missing} '{}' was not set (tandem_session_set_input)",
                    s.model.inputs[missing].name.to_string_lossy()
                ),
            );
        }
        s.ran = false;
        s.outputs.clear();
        let outputs = s
            .session
            .run(&s.inputs)
            .or_else(|e| fail(TandemStatus::RunFailed, e.to_string()))?;
        s.outputs = outputs
            .iter()
            .map(|o| o.to_f32().unwrap_or_default())
            .collect();
        s.ran = true;
        Ok(())
    })
}

fn output_of(s: &TandemSession, index: usize) -> CallResult<(&TensorMeta, &[f32])> {
    let t = tensor_at(&s.model, Side::Output, index)?;
    if !s.ran {
        return fail(
            TandemStatus::NotReady,
            "the session has no outputs: tandem_session_run has not succeeded yet",
        );
    }
    Ok((t, &s.outputs[index]))
}

/// Points `*out_data` at output `index`'s values (C order) and writes their count to
/// `*out_count`. The memory belongs to the session and stays valid until the next
/// `tandem_session_run` or `tandem_session_free` on it.
///
/// # Safety
/// `session` must be NULL or a live session; `out_data` and `out_count` NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn tandem_session_output(
    session: *const TandemSession,
    index: usize,
    out_data: *mut *const f32,
    out_count: *mut usize,
) -> TandemStatus {
    guard("tandem_session_output", || {
        // SAFETY: the caller's contract.
        let s = unsafe { arg(session, "session")? };
        if out_data.is_null() || out_count.is_null() {
            let which = if out_data.is_null() {
                "out_data"
            } else {
                "out_count"
            };
            return fail(TandemStatus::NullArgument, format!("`{which}` is NULL"));
        }
        let (_, values) = output_of(s, index)?;
        // SAFETY: both checked non-null; writable by the caller's contract.
        unsafe {
            *out_data = values.as_ptr();
            *out_count = values.len();
        }
        Ok(())
    })
}

/// Copies output `index` into `dst`, which holds `count` floats; `count` must equal the output's
/// element count.
///
/// # Safety
/// `session` must be NULL or a live session; `dst` NULL or valid for writes of `count` floats.
#[no_mangle]
pub unsafe extern "C" fn tandem_session_copy_output(
    session: *const TandemSession,
    index: usize,
    dst: *mut f32,
    count: usize,
) -> TandemStatus {
    guard("tandem_session_copy_output", || {
        // SAFETY: the caller's contract.
        let s = unsafe { arg(session, "session")? };
        if dst.is_null() {
            return fail(TandemStatus::NullArgument, "`dst` is NULL");
        }
        let (t, values) = output_of(s, index)?;
        if count != values.len() {
            return fail(
                TandemStatus::SizeMismatch,
                format!(
                    "output {index} '{}' of shape {:?} holds {} floats, the buffer {count}",
                    t.name.to_string_lossy(),
                    &t.dims[..t.rank],
                    values.len()
                ),
            );
        }
        // SAFETY: non-null and writable for `count` floats by the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(values.as_ptr(), dst, count) };
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last() -> String {
        // SAFETY: never NULL, NUL-terminated.
        unsafe { CStr::from_ptr(tandem_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn a_panic_becomes_an_internal_error_naming_the_function() {
        let status = guard("tandem_test", || panic!("boom at step 3"));
        assert_eq!(status, TandemStatus::Internal);
        let message = last();
        assert!(
            message.starts_with("tandem_test: internal error")
                && message.contains("boom at step 3"),
            "{message}"
        );
        assert_eq!(guard("tandem_test", || Ok(())), TandemStatus::Ok);
        assert_eq!(last(), "");
    }

    #[test]
    fn messages_with_nul_bytes_survive() {
        let status = guard("tandem_test", || fail(TandemStatus::Io, "a\0b"));
        assert_eq!(status, TandemStatus::Io);
        assert_eq!(last(), "tandem_test: a\u{FFFD}b");
    }
}
