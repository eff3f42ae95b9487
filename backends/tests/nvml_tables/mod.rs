//! The conformance test of `gpu_samples`' later columns (the PCIe link and NVLink error counters,
//! `LATER_GPU_SAMPLE_COLUMNS`), for every engine: a trace recorded before them reads them as -1,
//! "not reported", and gains them, last and in order, when a session is appended to it.

use std::path::Path;

use causeway_backends::*;
use causeway_model::time::TimeWindow;
use causeway_model::GpuSample;

use super::launch_tables::Fixture;
use super::{file, rt, session, write_trace};

/// The columns added after `gpu_samples`' first version, in order.
const LATER: [&str; 8] = [
    "pcie_link_gen",
    "pcie_link_gen_max",
    "pcie_link_width",
    "pcie_link_width_max",
    "nvlink_crc_flit_errors",
    "nvlink_crc_data_errors",
    "nvlink_replay_errors",
    "nvlink_recovery_errors",
];

fn drop_later_columns(path: &Path, b: Engine) {
    let sql: String = LATER.iter().map(|c| format!("ALTER TABLE gpu_samples DROP COLUMN {c}; ")).collect();
    match b {
        Engine::Sqlite => rusqlite::Connection::open(path).unwrap().execute_batch(&sql).unwrap(),
        Engine::DuckDb => {
            #[cfg(feature = "duckdb")]
            {
                let c = ::duckdb::Connection::open(path).unwrap();
                c.execute_batch(&sql).unwrap();
                c.execute_batch("CHECKPOINT").unwrap();
            }
            #[cfg(not(feature = "duckdb"))]
            panic!("DuckDB traces need the duckdb feature");
        }
    }
}

/// A sample as an older trace reads it: the later columns not reported.
fn unreported(s: &GpuSample) -> GpuSample {
    GpuSample {
        pcie_link_gen: -1,
        pcie_link_gen_max: -1,
        pcie_link_width: -1,
        pcie_link_width_max: -1,
        nvlink_crc_flit_errors: -1,
        nvlink_crc_data_errors: -1,
        nvlink_replay_errors: -1,
        nvlink_recovery_errors: -1,
        ..s.clone()
    }
}

fn gpu_sample_columns(store: &dyn TraceStore) -> Vec<String> {
    let d = store.describe_schema().unwrap();
    d.tables.iter().find(|t| t.name == "gpu_samples").unwrap().columns.iter().map(|c| c.name.clone()).collect()
}

pub fn older_gpu_samples_gain_the_later_columns(b: Engine) {
    let dir = tempfile::tempdir().unwrap();
    let path = file(dir.path(), b, "old-gpu");
    write_trace(&path, b, 19);
    drop_later_columns(&path, b);
    let fx = Fixture::new();
    let old: Vec<GpuSample> = fx.gpu.iter().map(unreported).collect();
    let store = open_store(&path).unwrap();
    assert_eq!(gpu_sample_columns(store.as_ref()).len(), 19, "the first version's columns");
    assert_eq!(store.gpu_samples(&TimeWindow::ALL).unwrap(), old, "the later columns read as -1");
    drop(store);
    // a session appended to it adds them, last and in order; the older rows hold -1 there
    rt().block_on(async {
        let mut sink = create_sink(&path, session(4), Some(b)).unwrap();
        fx.write(&mut sink).await;
        sink.finish(8_000_000_000).await.unwrap();
    });
    let store = open_store(&path).unwrap();
    let columns = gpu_sample_columns(store.as_ref());
    assert_eq!(columns[19..], LATER.map(String::from), "added last, in order");
    let key = |s: &GpuSample| (s.ts_ns, s.gpu, s.pcie_link_gen);
    let mut got = store.gpu_samples(&TimeWindow::ALL).unwrap();
    got.sort_by_key(key);
    let mut want: Vec<GpuSample> = old.iter().chain(&fx.gpu).cloned().collect();
    want.sort_by_key(key);
    assert_eq!(got, want, "the older rows unreported, the new ones whole");
    let r = store.query("SELECT count(*) FROM gpu_samples WHERE pcie_link_gen = -1", &QueryLimits::default()).unwrap();
    assert_eq!(r.rows[0][0].as_i64(), Some(4), "the older rows hold the default, -1");
}
