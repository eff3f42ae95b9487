//! `explain` on the shared Ingero DBs: every chain's evidence SQL, run through the store's guarded
//! read-only query path, returns exactly the chain's headline figure; the DataLoader-starvation DB
//! names what starved the GPU; nothing is blamed on a task the DB does not record.

use std::path::PathBuf;

use causeway_analysis::Severity;
use causeway_analysis::{explain, ExplainRequest, Explanation};
use causeway_backends::{QueryLimits, SqliteStore, TraceStore};

fn shared_dbs() -> PathBuf {
    causeway_testdata::ingero_dbs()
}

/// Run every chain's SQL and compare with its value.
fn check_evidence(store: &dyn TraceStore, e: &Explanation) {
    for c in &e.chains {
        let r = store
            .query(&c.evidence.sql, &QueryLimits::default())
            .unwrap_or_else(|err| panic!("{} SQL failed: {err}\n{}", c.id, c.evidence.sql));
        assert_eq!(r.columns, vec!["value".to_string()], "{}", c.id);
        let v = r.rows[0][0].as_i64().unwrap_or_else(|| panic!("{}: not an integer: {:?}", c.id, r.rows[0][0]));
        assert_eq!(
            v, c.evidence.value,
            "chain {} ({}): SQL gives {v}, Rust {}\n{}",
            c.id, c.key, c.evidence.value, c.evidence.sql
        );
        if c.evidence.unit == "ns" {
            assert_eq!(c.evidence.value, c.stall_ns, "{}", c.id);
        }
    }
}

fn all_chains() -> ExplainRequest {
    ExplainRequest { top: 1000, ..Default::default() }
}

#[test]
fn every_chain_on_every_shared_db_is_reproduced_by_its_sql() {
    let dir = shared_dbs();
    let mut chains = 0;
    for name in [
        "pytorch-dataloader-starvation.db",
        "sample-cluster.db",
        "sample-gpu-node-01.db",
        "sample-gpu-node-02.db",
        "sample-gpu-node-03.db",
    ] {
        let store = SqliteStore::open(&dir.join(name)).unwrap();
        let e = explain(&store, &all_chains()).unwrap();
        check_evidence(&store, &e);
        // Ingero DBs do not record who took the CPU: no chain may name a culprit that took it.
        assert!(e.chains.iter().all(|c| c.culprit.is_none()), "{name}: a culprit the DB cannot know");
        assert!(e.notes.iter().any(|n| n.contains("which task took it")), "{name}: {:?}", e.notes);
        // Ids are c1.. in rank order and keys are unique.
        for (i, c) in e.chains.iter().enumerate() {
            assert_eq!(c.id, format!("c{}", i + 1));
        }
        let mut keys: Vec<&str> = e.chains.iter().map(|c| c.key.as_str()).collect();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), e.chains.len(), "{name}: duplicate chain keys");
        chains += e.chains.len();
    }
    assert!(chains >= 5, "expected chains on the shared DBs, found {chains}");
}

#[test]
fn dataloader_starvation_is_explained() {
    let store = SqliteStore::open(&shared_dbs().join("pytorch-dataloader-starvation.db")).unwrap();
    let e = explain(&store, &ExplainRequest::default()).unwrap();
    let report = serde_json::to_string_pretty(&e.chains).unwrap();
    let top = &e.chains[0];
    assert_eq!(top.severity, Severity::High, "{report}");
    // The GPU thread stopped feeding the GPU: the top finding is about the feeding thread (pid 2233).
    assert_eq!(top.pid, 2233);
    assert!(matches!(top.cause.as_str(), "host_compute" | "launch_rate_drop"), "{}", top.cause);
    // The feeding gaps of tid 2233 are found and their on-CPU share is attributed as host compute.
    let gap = e.chains.iter().find(|c| c.cause == "host_compute").expect("host_compute chain");
    assert_eq!(gap.tid, Some(2233));
    assert!(gap.stall_ns > 30_000_000_000, "{}", gap.stall_ns);
    // No off-CPU time is invented: the slow calls before the first recorded switch have no sched data.
    assert!(e.chains.iter().any(|c| c.cause == "no_sched_data"));
    // Every figure is reproduced by its SQL.
    check_evidence(&store, &e);
    // Percentiles of the slow-call chains are FACTS' exact nearest-rank figures.
    let memcpy = e.ops.iter().find(|o| o.op == "cudaMemcpyAsync").unwrap();
    assert_eq!((memcpy.calls, memcpy.p50_ns, memcpy.p99_ns), (14, 34_810_531, 65_000_369));
}

#[test]
fn windows_and_pids_scope_the_evidence_too() {
    let store = SqliteStore::open(&shared_dbs().join("pytorch-dataloader-starvation.db")).unwrap();
    let first = store.info().first_ns;
    let req = ExplainRequest {
        window: causeway_model::time::TimeWindow { from_ns: Some(first), to_ns: Some(first + 20_000_000_000) },
        pid: Some(2233),
        top: 100,
        judge_by: None,
    };
    let e = explain(&store, &req).unwrap();
    assert!(!e.chains.is_empty());
    check_evidence(&store, &e);
}
