//! The real CUDA runtimes of the PyPI wheels, `libcudart.so.12` (`nvidia-cuda-runtime-cu12`,
//! nvidia/cuda_runtime/lib) and `libcudart.so.13` (`nvidia-cuda-runtime` 13, nvidia/cu13/lib, what
//! PyTorch >= 2.11 loads), called through Python ctypes (scripts/install-test-deps.sh installs both
//! into $HOME/.cache/causeway/venv). The trace is not told where the library is: it is attached
//! when Python's ctypes dlopens it (the loader hook), every probed symbol is either attached or
//! reported missing, and every call is recorded with its error return code (35 without a driver).

mod common;

use causeway_probes::{ProbeLib, CUDA_PROBES};

#[test]
fn real_libcudart_12_from_the_pip_wheel_is_found_attached_and_traced() {
    real_runtime("cu12", "nvidia/cuda_runtime/lib/libcudart.so.12");
}

#[test]
fn real_libcudart_13_from_the_cu13_wheel_is_found_attached_and_traced() {
    real_runtime("cu13", "nvidia/cu13/lib/libcudart.so.13");
}

fn real_runtime(flavour: &str, suffix: &str) {
    common::require_root();
    let n = 7u64;
    let (wheel, run) = common::trace_wheel_script(suffix, "call_libcudart.py", &[n.to_string(), flavour.to_string()]);
    assert_eq!(wheel.how, "pip-wheel");
    let common::WheelRun { report, sink, text, pid, lib } = run;
    let lib = &report.libraries[lib];
    // The exec event of the process and the loader hook's notice travel on separate channels; an
    // exec scan handled first used to attach the library as `exec:` (incomplete) while the
    // process sat stopped at the hook (`LibraryTracker::exec` now leaves it to the notice).
    assert!(
        lib.how.starts_with("loaded:"),
        "attached when python mapped it: {} (libraries {:?}, notes {:?})",
        lib.how,
        report.libraries,
        report.notes
    );
    // every probed runtime symbol is either attached or reported missing, never dropped silently
    let mut table: Vec<&str> =
        CUDA_PROBES.iter().filter(|p| p.lib == ProbeLib::Runtime).flat_map(|p| p.symbols.iter().copied()).collect();
    let mut seen: Vec<&str> = lib.symbols.iter().chain(&lib.missing).map(String::as_str).collect();
    table.sort();
    seen.sort();
    assert_eq!(seen, table, "attached + missing = every runtime symbol of the probe table");
    for s in [
        "cudaLaunchKernel",
        "cudaLaunchKernel_ptsz",
        "cudaLaunchKernelExC",
        "cudaLaunchKernelExC_ptsz",
        "cudaMalloc",
        "cudaMallocAsync",
        "cudaFreeAsync",
        "cudaMemsetAsync",
        "cudaHostAlloc",
        "cudaEventQuery",
        "cudaStreamWaitEvent",
        "cudaFree",
        "cudaMemcpy",
        "cudaMemcpyAsync_ptsz",
        "cudaStreamSynchronize_ptsz",
        "cudaDeviceSynchronize",
        "cudaGraphLaunch",
        "__cudaRegisterFunction",
    ] {
        assert!(lib.symbols.iter().any(|x| x == s), "{s} not attached on the real library: {:?}", lib.symbols);
    }

    let c = sink.0.lock().unwrap();
    // the attach happened while the process was held at its dlopen: nothing before it is missing
    let row = c
        .attachments
        .iter()
        .find(|a| a.pid == pid && a.path.ends_with(suffix))
        .unwrap_or_else(|| panic!("no attachment row for {suffix}: {:?}", c.attachments));
    assert!(row.complete, "{row:?}");
    // (op, python name) -> every traced call carries the return code Python saw
    for (code, name) in [
        (1u16, "cudaMalloc"),
        (2, "cudaFree"),
        (4, "cudaMemcpy"),
        (5, "cudaStreamSynchronize"),
        (6, "cudaDeviceSynchronize"),
        (3, "cudaLaunchKernel"),
        (14, "cudaLaunchKernelExC"),
        (16, "cudaMallocAsync"),
        (15, "cudaMemsetAsync"),
        (19, "cudaEventQuery"),
    ] {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("RC {name} ")))
            .unwrap_or_else(|| panic!("{name} not in output"));
        let want: Vec<i32> = line.rsplit(' ').next().unwrap().split(',').map(|x| x.parse().unwrap()).collect();
        let mut got: Vec<_> = c.events.iter().filter(|e| e.pid == pid && e.source == 1 && e.op == code).collect();
        got.sort_by_key(|e| e.ts_ns);
        let got: Vec<i32> = got.iter().map(|e| e.ret_code).collect();
        assert_eq!(got, want, "{name}: traced return codes vs what Python saw");
        assert!(
            want.iter().all(|&rc| rc == 35),
            "expected cudaErrorInsufficientDriver (35) without a driver: {want:?}"
        );
    }
    assert_eq!(c.events.iter().filter(|e| e.pid == pid && e.source == 1 && e.op == 1).count() as u64, n);
    // cudaMalloc's size is recorded
    assert!(c.events.iter().filter(|e| e.pid == pid && e.source == 1 && e.op == 1).all(|e| e.arg0 == 4096));
    // the Ex launch's configuration is read from the cudaLaunchConfig_t the caller passed
    let ex = c.events.iter().find(|e| e.pid == pid && e.source == 1 && e.op == 14).expect("an Ex launch");
    let cfg = c
        .launch_configs
        .get(&ex.launch_config)
        .unwrap_or_else(|| panic!("no launch config {} stored", ex.launch_config));
    assert_eq!((cfg.grid, cfg.block, cfg.shared_mem_bytes, cfg.cluster), ([2, 3, 1], [64, 1, 1], 256, [1, 1, 1]));
    assert_eq!(ex.arg1, 6, "blocks = grid.x * grid.y * grid.z");
}
