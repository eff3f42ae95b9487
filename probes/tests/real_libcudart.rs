//! The real `libcudart.so.12` from the PyPI wheel `nvidia-cuda-runtime-cu12`, called through Python
//! ctypes (scripts/install-test-deps.sh installs it into $HOME/.cache/causeway/venv): discovery finds
//! it as a pip wheel, the probes attach by symbol (versioned `@@libcudart.so.12`, `_ptsz` twins), and
//! every call is recorded with its error return code (35 without a driver).

mod common;

use std::path::PathBuf;

use causeway_probes::discovery::{self, DiscoveryOptions};
use causeway_probes::TraceOptions;

fn venv_python() -> PathBuf {
    let venv = std::env::var_os("CAUSEWAY_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/causeway/venv")
        });
    let py = venv.join("bin/python");
    assert!(
        py.exists(),
        "{} missing: run scripts/install-test-deps.sh (installs nvidia-cuda-runtime-cu12 into a venv)",
        py.display()
    );
    py
}

#[test]
fn real_libcudart_from_the_pip_wheel_is_found_attached_and_traced() {
    common::require_root();
    let py = venv_python();
    // discovery on its own finds the wheel's library
    let found = discovery::discover(&DiscoveryOptions {
        site_packages: discovery::site_packages_of_program(&py),
        ..Default::default()
    });
    let wheel = found
        .iter()
        .find(|f| {
            f.path
                .to_string_lossy()
                .ends_with("nvidia/cuda_runtime/lib/libcudart.so.12")
        })
        .unwrap_or_else(|| panic!("pip wheel libcudart not discovered: {found:?}"));
    assert_eq!(wheel.how, "pip-wheel");

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.txt");
    let script = common::root().join("probes/tests/py/call_libcudart.py");
    let n = 7u64;
    let opts = TraceOptions {
        command: vec![
            py.to_string_lossy().into(),
            script.to_string_lossy().into(),
            n.to_string(),
        ],
        command_stdout: Some(out.clone()),
        ..Default::default()
    };
    let sink = common::MemSink::default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let report = rt
        .block_on(causeway_probes::trace(opts, Box::new(sink.clone()), |_| {}))
        .expect("trace");
    assert_eq!(
        report.command_exit,
        Some(0),
        "python failed: {}",
        std::fs::read_to_string(&out).unwrap_or_default()
    );
    let text = std::fs::read_to_string(&out).unwrap();
    let pid: u32 = text
        .lines()
        .find_map(|l| l.strip_prefix("PID "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();

    let lib = report
        .libraries
        .iter()
        .find(|l| l.path == wheel.path)
        .unwrap_or_else(|| panic!("wheel libcudart not attached: {:?}", report.libraries));
    for s in [
        "cudaLaunchKernel",
        "cudaLaunchKernel_ptsz",
        "cudaMalloc",
        "cudaFree",
        "cudaMemcpy",
        "cudaMemcpyAsync_ptsz",
        "cudaStreamSynchronize_ptsz",
        "cudaDeviceSynchronize",
        "cudaGraphLaunch",
    ] {
        assert!(
            lib.symbols.iter().any(|x| x == s),
            "{s} not attached on the real library: {:?}",
            lib.symbols
        );
    }

    let c = sink.0.lock().unwrap();
    // (op, python name) -> every traced call carries the return code Python saw
    for (code, name) in [
        (1u16, "cudaMalloc"),
        (2, "cudaFree"),
        (4, "cudaMemcpy"),
        (5, "cudaStreamSynchronize"),
        (6, "cudaDeviceSynchronize"),
        (3, "cudaLaunchKernel"),
    ] {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("RC {name} ")))
            .unwrap_or_else(|| panic!("{name} not in output"));
        let want: Vec<i32> = line
            .rsplit(' ')
            .next()
            .unwrap()
            .split(',')
            .map(|x| x.parse().unwrap())
            .collect();
        let mut got: Vec<_> = c
            .events
            .iter()
            .filter(|e| e.pid == pid && e.source == 1 && e.op == code)
            .collect();
        got.sort_by_key(|e| e.ts_ns);
        let got: Vec<i32> = got.iter().map(|e| e.ret_code).collect();
        assert_eq!(got, want, "{name}: traced return codes vs what Python saw");
        assert!(
            want.iter().all(|&rc| rc == 35),
            "expected cudaErrorInsufficientDriver (35) without a driver: {want:?}"
        );
    }
    assert_eq!(
        c.events
            .iter()
            .filter(|e| e.pid == pid && e.source == 1 && e.op == 1)
            .count() as u64,
        n
    );
    // cudaMalloc's size is recorded
    assert!(c
        .events
        .iter()
        .filter(|e| e.pid == pid && e.source == 1 && e.op == 1)
        .all(|e| e.arg0 == 4096));
}
