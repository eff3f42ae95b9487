//! The pictures and exports as a user makes them, opened by what a user opens them with: the HTML
//! report and the chain's SVG rendered by a real headless browser (Debian's chromium, installed by
//! `scripts/install-test-deps.sh`), its DOM read back and a screenshot taken; the exports written
//! by `causeway export` where the user asks.

use std::path::{Path, PathBuf};
use std::process::Command;

fn causeway(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_causeway")).args(args).output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn demo_trace() -> PathBuf {
    causeway_testdata::repo_root().join("investigations/cpu-contention/trace.db")
}

fn chromium() -> PathBuf {
    for c in ["chromium", "chromium-browser", "google-chrome"] {
        if let Ok(out) = Command::new("which").arg(c).output() {
            if out.status.success() {
                return PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
            }
        }
    }
    panic!("no chromium: scripts/install-test-deps.sh installs Debian's chromium for this test");
}

/// Runs headless chromium on `page` with `args` (its own profile directory, no sandbox: CI is root).
fn browse(page: &Path, args: &[&str], profile: &Path) -> std::process::Output {
    let url = format!("file://{}", page.display());
    let out = Command::new(chromium())
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(&url)
        .output()
        .unwrap();
    assert!(out.status.success(), "chromium {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    out
}

/// Width and height from a PNG's IHDR chunk.
fn png_size(bytes: &[u8]) -> (u32, u32) {
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    assert_eq!(&bytes[12..16], b"IHDR");
    let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    (be(&bytes[16..20]), be(&bytes[20..24]))
}

#[test]
fn the_html_report_renders_in_a_browser_with_the_chains_pictures() {
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("report.html");
    let said = causeway(&["report", "--db", demo_trace().to_str().unwrap(), "--html", html.to_str().unwrap()]);
    assert!(said.contains("wrote"), "{said}");

    let dom = String::from_utf8(browse(&html, &["--dump-dom"], &dir.path().join("p1")).stdout).unwrap();
    assert!(dom.contains("Why did the GPU stall?"), "the page did not load: {}", &dom[..dom.len().min(400)]);
    assert!(dom.contains("class=\"chain-timeline\""), "no chain timeline in the rendered page");
    assert!(dom.contains("class=\"culprit\""), "no culprit bar in the rendered page");
    assert!(dom.contains("class=\"off-cpu preempted\""), "no preempted interval in the rendered page");
    assert!(dom.contains("class=\"latency-histogram\""), "no histogram in the rendered page");

    let shot = dir.path().join("report.png");
    browse(&html, &[&format!("--screenshot={}", shot.display()), "--window-size=1100,1400"], &dir.path().join("p2"));
    let png = std::fs::read(&shot).expect("chromium wrote the screenshot");
    assert_eq!(png_size(&png), (1100, 1400));
    // a blank page of this size compresses to a few KB; the report's text and pictures do not
    assert!(png.len() > 40_000, "the screenshot looks empty: {} bytes", png.len());
}

#[test]
fn explain_svg_writes_the_top_chain_picture_a_browser_draws() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("c1.svg");
    causeway(&["explain", "--db", demo_trace().to_str().unwrap(), "--svg", svg.to_str().unwrap()]);
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg") && text.contains("data-chain=\"c1\""), "{}", &text[..text.len().min(300)]);
    let shot = dir.path().join("c1.png");
    browse(&svg, &[&format!("--screenshot={}", shot.display()), "--window-size=960,400"], &dir.path().join("p"));
    let png = std::fs::read(&shot).unwrap();
    assert_eq!(png_size(&png), (960, 400));
    assert!(png.len() > 10_000, "the picture looks empty: {} bytes", png.len());
}

#[test]
fn export_writes_beside_the_trace_or_where_asked() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    std::fs::copy(demo_trace(), &db).unwrap();
    let said = causeway(&["export", "--db", db.to_str().unwrap()]);
    assert!(said.contains("t.perfetto-trace"), "{said}");
    assert!(std::fs::metadata(dir.path().join("t.perfetto-trace")).unwrap().len() > 1000);
    let json = dir.path().join("out.json");
    causeway(&[
        "export",
        "--db",
        db.to_str().unwrap(),
        "--format",
        "chrome",
        "--out",
        json.to_str().unwrap(),
        "--no-chains",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert!(v["traceEvents"].as_array().unwrap().len() > 1000);
    // a bad format is refused with the choices, and nothing is written
    let out = Command::new(env!("CARGO_BIN_EXE_causeway"))
        .args([
            "export",
            "--db",
            db.to_str().unwrap(),
            "--format",
            "svg",
            "--out",
            dir.path().join("x").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("perfetto or chrome"));
    assert!(!dir.path().join("x").exists());
}
