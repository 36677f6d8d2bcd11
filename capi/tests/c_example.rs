//! The C example (`examples/classify.c`) and the C error checks (`tests/c/errors.c`), built with
//! the system C compiler against the library and run: the example's outputs must equal the Rust
//! session's outputs bit for bit, and every error path must give its documented status.

use std::path::{Path, PathBuf};
use std::process::Command;
use tandem_runtime::npy::NpyArray;
use tandem_runtime::session::{Model, Session};

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The directory holding the built `libtandem_capi.{so,a}`: this test's own `deps/` directory
/// (where `cargo test` leaves the library's cdylib and staticlib), or the profile directory above
/// it (where `cargo build` puts them).
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe
        .parent()
        .expect("tests run from <target>/<profile>/deps")
        .to_path_buf();
    let candidates = [Some(deps.clone()), deps.parent().map(Path::to_path_buf)];
    for dir in candidates.into_iter().flatten() {
        if dir.join("libtandem_capi.a").exists() && dir.join(DYLIB).exists() {
            return dir;
        }
    }
    panic!("libtandem_capi not built next to {}", exe.display())
}

#[cfg(target_os = "macos")]
const DYLIB: &str = "libtandem_capi.dylib";
#[cfg(not(target_os = "macos"))]
const DYLIB: &str = "libtandem_capi.so";

/// Compiles C sources against the library; `static_link` picks the staticlib over the cdylib.
fn build_c(sources: &[PathBuf], out: &Path, static_link: bool) {
    let lib = lib_dir();
    let mut cc = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()));
    cc.args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-O1", "-I"])
        .arg(crate_dir().join("include"))
        .args(sources)
        .arg("-o")
        .arg(out);
    if static_link {
        cc.arg(lib.join("libtandem_capi.a"))
            .args(["-lpthread", "-ldl", "-lm"]);
    } else {
        cc.arg("-L")
            .arg(&lib)
            .arg("-ltandem_capi")
            .arg(format!("-Wl,-rpath,{}", lib.display()));
    }
    let result = cc
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler (set CC to one): {e}"));
    assert!(
        result.status.success(),
        "C compilation of {sources:?} failed:\n{}",
        String::from_utf8_lossy(&result.stderr)
    );
}

/// Compiles zoo model `name` to an artifact in `dir` the way `tandem compile` does.
fn compile_zoo(name: &str, dir: &Path) -> PathBuf {
    let tflite = dir.join(format!("{name}.tflite"));
    let bytes = tandem_models::by_name(name)
        .unwrap_or_else(|| panic!("{name} is not in the zoo"))
        .tflite()
        .expect("zoo model builds");
    std::fs::write(&tflite, bytes).expect("write .tflite");
    let artifact =
        tandem_compiler::run::compile_file(&tflite, &Default::default()).expect("compiles");
    let path = dir.join(format!("{name}.tandem"));
    std::fs::write(&path, artifact.encode().expect("encodes")).expect("write .tandem");
    path
}

/// The inputs classify.c makes: input `i`, element `j` is `((j·37 + i·11) mod 256 − 128) / 128`.
fn example_inputs(model: &Model) -> Vec<NpyArray> {
    model
        .inputs()
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let values: Vec<f32> = (0..t.elements())
                .map(|j| ((j * 37 + i * 11) % 256) as f32 - 128.0)
                .map(|v| v / 128.0)
                .collect();
            NpyArray::from_f32(t.shape.clone(), &values)
        })
        .collect()
}

/// Parses classify.c's dump: `<output> <element> <bits> <%a>` per line, into per-output values.
fn parse_dump(text: &str) -> Vec<Vec<u32>> {
    let mut outputs: Vec<Vec<u32>> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(fields.len(), 4, "dump line {}: {line:?}", n + 1);
        let o: usize = fields[0].parse().expect("output index");
        let j: usize = fields[1].parse().expect("element index");
        let bits = u32::from_str_radix(fields[2], 16).expect("hex bits");
        if o == outputs.len() {
            outputs.push(Vec::new());
        }
        assert_eq!(
            (o + 1, j),
            (outputs.len(), outputs[o].len()),
            "dump out of order"
        );
        outputs[o].push(bits);
    }
    outputs
}

fn run_c(program: &Path, args: &[&Path]) -> String {
    // The dynamic loader must find the library this test linked against: cargo's own
    // LD_LIBRARY_PATH (which outranks the rpath) can name an older `cargo build` copy first.
    let lib = lib_dir();
    let result = Command::new(program)
        .args(args)
        .env("LD_LIBRARY_PATH", &lib)
        .env("DYLD_LIBRARY_PATH", &lib)
        .output()
        .expect("the C program runs");
    let stdout = String::from_utf8_lossy(&result.stdout).into_owned();
    assert!(
        result.status.success(),
        "{} failed ({}):\nstdout:\n{stdout}\nstderr:\n{}",
        program.display(),
        result.status,
        String::from_utf8_lossy(&result.stderr)
    );
    stdout
}

#[test]
fn the_c_example_matches_the_rust_session_bit_for_bit() {
    let dir = tempfile::tempdir().expect("temp dir");
    let classify = dir.path().join("classify");
    build_c(&[crate_dir().join("examples/classify.c")], &classify, false);
    for name in [
        "tiny_conv",
        "tiny_elementwise",
        "tiny_shape",
        "tiny_weights",
        "tiny_transpose_conv_bias",
    ] {
        let artifact = compile_zoo(name, dir.path());
        let model = Model::load_file(&artifact).expect("loads");
        let inputs = example_inputs(&model);
        for threads in [1usize, 2] {
            let expected: Vec<Vec<u32>> = Session::new(&model, threads)
                .run(&inputs)
                .expect("runs")
                .iter()
                .map(|o| {
                    o.to_f32()
                        .expect("f32 output")
                        .iter()
                        .map(|v| v.to_bits())
                        .collect()
                })
                .collect();
            let dump = dir.path().join(format!("{name}-{threads}.txt"));
            let threads_arg = PathBuf::from(threads.to_string());
            let stdout = run_c(&classify, &[&artifact, &threads_arg, &dump]);
            assert!(
                stdout.contains(&format!("tandem {}", env!("CARGO_PKG_VERSION"))),
                "{stdout}"
            );
            assert!(stdout.contains("output 0: "), "{stdout}");
            let got = parse_dump(&std::fs::read_to_string(&dump).expect("dump written"));
            assert_eq!(
                got, expected,
                "{name} with {threads} threads: C outputs differ from the Rust session"
            );
        }
    }
}

#[test]
fn the_c_example_links_statically_too() {
    let dir = tempfile::tempdir().expect("temp dir");
    let classify = dir.path().join("classify_static");
    build_c(&[crate_dir().join("examples/classify.c")], &classify, true);
    let artifact = compile_zoo("tiny_conv", dir.path());
    let stdout = run_c(&classify, &[&artifact]);
    assert!(stdout.contains("top 5:"), "{stdout}");
}

#[test]
fn c_error_paths_give_their_documented_statuses() {
    let dir = tempfile::tempdir().expect("temp dir");
    let errors = dir.path().join("errors");
    build_c(&[crate_dir().join("tests/c/errors.c")], &errors, false);
    let valid = compile_zoo("tiny_elementwise", dir.path());
    let mut bytes = std::fs::read(&valid).expect("artifact");
    let last = bytes.len() - 1;
    bytes[last] ^= 0x40;
    let corrupt = dir.path().join("corrupt.tandem");
    std::fs::write(&corrupt, bytes).expect("write");
    let missing = dir.path().join("does-not-exist.tandem");
    let stdout = run_c(&errors, &[&valid, &corrupt, &missing]);
    assert!(stdout.contains("0 failures"), "{stdout}");
    assert!(!stdout.contains("FAIL"), "{stdout}");
    assert!(stdout.lines().filter(|l| l.starts_with("ok")).count() >= 20);
}
