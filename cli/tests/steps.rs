//! Steps end to end, as a user meets them (root, eBPF): a Python training loop on mock-cuda that
//! labels its steps through the repository's helper (`python/causeway.py`) with one planted slow
//! range, the same loop without labels (the steps inferred from its synchronizing calls), and
//! `causeway annotate` from a shell script. `causeway steps`, `explain` and `--steps` read them.

mod common;

use std::path::Path;

use common::{causeway, query_rows, query_u64, repo, require_root_to};

/// Trace the training loop (`label` or `nolabel`) into `db`; its printed facts.
fn trace_loop(db: &Path, mode: &str) -> String {
    let build = causeway_testdata::mock_cuda_build();
    let out = causeway()
        .env("MOCK_CUDA_BW_MBPS", "100") // a 1 MiB memset keeps the mock GPU busy 10 ms
        .args(["trace", "--nvml-hz", "0", "--db"])
        .arg(db)
        .arg("--")
        .arg("python3")
        .arg(repo().join("python/tests/steps_train.py"))
        .arg(build.join("libcudart.so.12"))
        .arg(mode)
        .output()
        .expect("causeway trace runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "trace failed: {stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(stdout.contains("steps 60"), "the workload ran to its end: {stdout}\n{stderr}");
    stdout
}

fn steps_json(db: &Path, extra: &[&str]) -> serde_json::Value {
    let out = causeway().args(["steps", "--json", "--db"]).arg(db).args(extra).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn labeled_steps_are_stored_and_the_slow_range_is_found_and_explained() {
    require_root_to("trace with eBPF");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("labeled.db");
    trace_loop(&db, "label");
    // one event per step, numbered as the loop numbered them, each holding its calls
    let rows = query_rows(
        &db,
        "SELECT min(arg0), max(arg0), count(*), count(DISTINCT arg0) FROM events WHERE source = 10 AND op = 1",
    );
    assert_eq!(
        rows[0],
        vec![serde_json::json!(0), serde_json::json!(59), serde_json::json!(60), serde_json::json!(60)]
    );
    let inside = query_u64(
        &db,
        "SELECT count(*) FROM events c JOIN events s ON s.source = 10 AND c.source = 1 AND c.op = 5 \
         AND c.timestamp >= s.timestamp AND c.timestamp + c.duration <= s.timestamp + s.duration",
    );
    assert_eq!(inside, 60, "every cudaStreamSynchronize lies inside its step's label");

    let v = steps_json(&db, &["--list"]);
    let series = &v["series"][0];
    assert_eq!(series["origin"], "labeled", "{v}");
    assert_eq!(series["count"], 60);
    assert_eq!(series["steps"].as_array().unwrap().len(), 60);
    // the worst range is the planted one (a neighbour slowed by the busy host may join it)
    let slow = &series["slow"][0];
    let (first, last) = (slow["first"].as_i64().unwrap(), slow["last"].as_i64().unwrap());
    assert!((27..=30).contains(&first) && (37..=40).contains(&last), "{v}");
    // a busy host slows a step here and there too; the planted range is by far the worst
    if let Some(next) = series["slow"].get(1) {
        assert!(slow["excess_ns"].as_i64() > next["excess_ns"].as_i64().map(|e| e * 2), "{v}");
    }
    let (median, baseline) = (slow["median_ns"].as_i64().unwrap(), slow["baseline_ns"].as_i64().unwrap());
    assert!(median >= baseline + 75_000_000, "the planted 80 ms stall shows: {median} vs {baseline}");
    let why = slow["why"].as_str().unwrap_or_else(|| panic!("the range is explained: {v}"));
    assert!(slow["summary"].as_str().unwrap().starts_with(&format!("steps {first}-{last} took a median")), "{v}");
    assert!(why.contains("sleep") || why.contains("slept"), "the loader's sleep is the cause: {why}");

    // the chain the range points at opens in explain over those steps (judged against the others)
    let key = slow["chain_key"].as_str().unwrap();
    let pid = series["pid"].as_i64().unwrap().to_string();
    let range = format!("{first}-{last}");
    let out = causeway()
        .args(["explain", "--json", "--steps", &range, "--pid", &pid, "--chain", key, "--db"])
        .arg(&db)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let chain: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(chain["key"], key);
    assert_eq!(chain["cause"], "sleep", "the range's long gaps, slept: {chain}");

    // explain names the range; --steps narrows every read to it
    let out = causeway().args(["explain", "--db"]).arg(&db).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("slow steps") && text.contains(&format!("steps {range} took")), "{text}");
    let out = causeway().args(["stats", "--json", "--steps", "30-37", "--db"]).arg(&db).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stats: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let syncs = stats["ops"].as_array().unwrap().iter().find(|o| o["op"] == "cudaStreamSync").unwrap()["count"].clone();
    assert_eq!(syncs, 8, "steps 30-37 hold 8 synchronizes");
    // the HTML report lists the range; the timeline export draws each step around its calls
    let html = db.with_extension("html");
    let out = causeway().args(["report", "--db"]).arg(&db).arg("--html").arg(&html).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<h2>Steps</h2>") && page.contains(&format!("steps {range} took a median")), "report");
    let json = db.with_extension("json");
    let out =
        causeway().args(["export", "--format", "chrome", "--db"]).arg(&db).arg("--out").arg(&json).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let events: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let events = events.get("traceEvents").unwrap_or(&events).as_array().unwrap().clone();
    let step30 = events.iter().find(|e| e["name"] == "step 30").unwrap_or_else(|| panic!("no step 30 slice"));
    assert_eq!(step30["cat"], "STEP");
    let out = causeway().args(["timeline", "--json", "--steps", "31", "--db"]).arg(&db).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let tl = String::from_utf8_lossy(&out.stdout);
    assert!(tl.contains("cudaStreamSync") && tl.contains("sched_switch"), "step 31's calls and its sleep");
    let out = causeway().args(["stats", "--steps", "90-99", "--db"]).arg(&db).output().unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no such step (the trace has pid"),
        "a missing step is said so"
    );
}

#[test]
fn without_labels_the_steps_are_inferred_and_the_slow_range_still_found() {
    require_root_to("trace with eBPF");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("inferred.db");
    trace_loop(&db, "nolabel");
    assert_eq!(query_u64(&db, "SELECT count(*) FROM events WHERE source = 10"), 0);
    let v = steps_json(&db, &[]);
    let series = &v["series"][0];
    assert_eq!(series["origin"], "inferred", "{v}");
    let how = series["how"].as_str().unwrap();
    assert!(how.contains("inferred") && how.contains("period 2"), "a memcpy and a synchronize per step: {how}");
    let count = series["count"].as_i64().unwrap();
    assert!((58..=60).contains(&count), "60 iterations give 58-60 inferred steps: {count}");
    let slow = series["slow"].as_array().unwrap();
    let (first, last) = (slow[0]["first"].as_i64().unwrap(), slow[0]["last"].as_i64().unwrap());
    // iterations 30-37 are inferred steps 29-36 (numbered from the first boundary), give or take a
    // neighbour the busy host slowed too
    assert!((26..=30).contains(&first) && (35..=39).contains(&last), "the planted range is the worst: {v}");
    assert!(slow[0]["why"].as_str().unwrap_or_default().contains("sleep"), "{v}");
}

#[test]
fn a_script_labels_through_annotate_and_bad_labels_are_refused() {
    require_root_to("trace with eBPF");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("annotate.db");
    let socket = dir.path().join("labels.sock");
    let cw = env!("CARGO_BIN_EXE_causeway");
    let script = format!(
        "stat -c %a \"$CAUSEWAY_LABELS\" > {mode}; \
         {cw} annotate step 1 begin && sleep 0.2 && {cw} annotate step 1 end && \
         {cw} annotate task 2 -- sleep 0.1 && \
         {cw} annotate epoch 5 end 2> {refused}; echo $? > {code}",
        mode = dir.path().join("mode").display(),
        refused = dir.path().join("refused").display(),
        code = dir.path().join("code").display(),
    );
    let out = causeway()
        .args(["trace", "--nvml-hz", "0", "--no-host", "--labels-socket"])
        .arg(&socket)
        .arg("--db")
        .arg(&db)
        .args(["--", "sh", "-c", &script])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let read = |f: &str| std::fs::read_to_string(dir.path().join(f)).unwrap().trim().to_string();
    assert_eq!(read("mode"), "600", "owner-only by default");
    assert_ne!(read("code"), "0", "an end without a begin is refused");
    assert!(read("refused").contains("epoch 5 of pid"), "and said why: {}", read("refused"));
    assert!(!socket.exists(), "the socket goes with the trace");
    let rows = query_rows(&db, "SELECT op, arg0, duration, pid FROM events WHERE source = 10 ORDER BY timestamp");
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!((rows[0][0].as_i64(), rows[0][1].as_i64()), (Some(1), Some(1)));
    assert!(rows[0][2].as_i64().unwrap() >= 190_000_000, "begin and end 0.2 s apart: {rows:?}");
    assert_eq!((rows[1][0].as_i64(), rows[1][1].as_i64()), (Some(3), Some(2)));
    assert!(rows[1][2].as_i64().unwrap() >= 95_000_000, "the labeled command ran 0.1 s: {rows:?}");
    assert_ne!(rows[0][3], rows[1][3], "the task is the command's own process, the step the script's");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("label refused") && stderr.contains("ended without a begin"), "{stderr}");
}
