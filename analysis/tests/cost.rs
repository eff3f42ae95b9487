//! What a stall costs: four ranks on H100s, rank 3 late at 20 collectives. The straggler's GPU time
//! counts every waiting rank (three), recomputed by its evidence SQL; every other chain's estimated
//! cost is its evidence SQL's figure on one GPU; the run's GPU time is its own SQL's; money is GPU
//! time at the H100's list price, `--gpu-rate` wins over the table, and an unknown model has no rate.

mod common;

use causeway_analysis::{explain, price, ChainKind, CostBasis, ExplainRequest, Rates};
use causeway_backends::{open_store, QueryLimits};
use causeway_model::LibraryAttach;
use common::{Trace, MS, T0, US};

const RANKS: i32 = 4;

fn four_ranks(gpu: &str) -> Trace {
    let mut t = Trace::default();
    for r in 0..RANKS {
        t.names.push((100 + r as u32 * 100, "train".into()));
    }
    t.attachments.push(LibraryAttach {
        pid: 0,
        kind: "nvml".into(),
        complete: true,
        symbols: (0..RANKS).map(|i| format!("GPU {i}: {gpu}")).collect(),
        ..Default::default()
    });
    for step in 1..=40 {
        let base = T0 + step * 10 * MS;
        let late = (11..=30).contains(&step);
        let last = base + 50 * US + if late { 4 * MS } else { 0 };
        for r in 0..RANKS {
            let entry = if r == RANKS - 1 { last } else { base + r as i64 * 10 * US };
            let pid = 100 + r as u32 * 100;
            t.allreduce_step(pid, r, step, entry, last + MS);
            t.nccl.last_mut().unwrap().nranks = RANKS;
        }
    }
    t
}

fn value(store: &dyn causeway_backends::TraceStore, sql: &str) -> i64 {
    store.query(sql, &QueryLimits::default()).unwrap().rows[0][0].as_i64().unwrap_or_else(|| panic!("{sql}"))
}

#[test]
fn a_straggler_costs_every_waiting_rank_and_each_figure_has_sql() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ranks.db");
    four_ranks("NVIDIA H100 80GB HBM3").write(&path);
    let store = open_store(&path).unwrap();
    let mut e = explain(store.as_ref(), &ExplainRequest::default()).unwrap();
    // the run: four GPU processes, their spans summed, by its SQL
    assert_eq!(e.cost.gpus, RANKS as u32);
    assert_eq!(e.cost.gpu_ns, value(store.as_ref(), &e.cost.sql), "{}", e.cost.sql);
    assert_eq!(e.cost.gpu_models, vec!["NVIDIA H100 80GB HBM3".to_string()]);
    let rate = e.cost.rate.clone().expect("the H100's list price");
    assert_eq!(rate.dollars_per_gpu_hour, 12.29);
    let s = e.chains.iter().find(|c| c.kind == ChainKind::Straggler).expect("the straggler");
    let k = s.cost.as_ref().expect("a straggler's cost");
    // three ranks waited 4 ms + their lead in each of the 20 late collectives
    let lead: i64 = (0..RANKS as i64 - 1).map(|r| 4 * MS + 50 * US - r * 10 * US).sum();
    assert_eq!((k.gpus, k.gpu_ns, k.basis), (RANKS as u32 - 1, 20 * lead, CostBasis::Estimated));
    assert_eq!(k.gpu_ns, value(store.as_ref(), &s.evidence.sql), "{}", s.evidence.sql);
    assert!((k.dollars.unwrap() - k.gpu_ns as f64 / 3.6e12 * 12.29).abs() < 1e-12);
    assert!((k.share - k.gpu_ns as f64 / e.cost.gpu_ns as f64).abs() < 1e-12);
    assert!(k.how.starts_with("waited_ns: the sum of the 3 other ranks'"), "{}", k.how);
    // every other chain with a cost: its evidence SQL's figure on one GPU
    for c in e.chains.iter().filter(|c| c.kind != ChainKind::Straggler) {
        if let Some(k) = &c.cost {
            assert_eq!((k.basis, k.gpus), (CostBasis::Estimated, 1), "{}", c.key);
            assert_eq!(k.gpu_ns, value(store.as_ref(), &c.evidence.sql), "{}: {}", c.key, c.evidence.sql);
        } else {
            assert!(c.evidence.unit != "ns" || c.kind == ChainKind::ThroughputDrop, "{} has no cost", c.key);
        }
    }
    // the override wins over the table
    price(&mut e, &Rates { override_rate: Some(2.0), file: None });
    let k = e.chains.iter().find(|c| c.kind == ChainKind::Straggler).unwrap().cost.clone().unwrap();
    assert_eq!(e.cost.rate.as_ref().unwrap().source, "--gpu-rate");
    assert!((k.dollars.unwrap() - k.gpu_ns as f64 / 3.6e12 * 2.0).abs() < 1e-12);
    assert!((e.cost.dollars.unwrap() - e.cost.gpu_ns as f64 / 3.6e12 * 2.0).abs() < 1e-12);
}

#[test]
fn an_unknown_gpu_model_has_no_rate() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ranks.db");
    four_ranks("NVIDIA GeForce RTX 4090").write(&path);
    let store = open_store(&path).unwrap();
    let e = explain(store.as_ref(), &ExplainRequest::default()).unwrap();
    assert!(e.cost.rate.is_none() && e.cost.dollars.is_none());
    let why = e.cost.no_rate.as_deref().unwrap();
    assert!(why.starts_with("no rate for NVIDIA GeForce RTX 4090"), "{why}");
    assert!(e.cost.words().contains("no rate"), "{}", e.cost.words());
    assert!(e.chains.iter().filter_map(|c| c.cost.as_ref()).all(|k| k.dollars.is_none() && k.gpu_ns > 0));
}
