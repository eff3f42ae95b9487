//! `causeway ship`: copy a trace into a fleet lake, exactly once; run it again to ship what was
//! added since (a trace still being written), or with `--from/--to` to add a window of raw events
//! for a drill-down. See `causeway-fleet`.

use std::path::PathBuf;

use causeway_fleet::{LakeSpec, ShipOptions, Shipper, Tier};
use causeway_model::time::fmt_ns;

use crate::window::WindowArgs;

#[derive(clap::Args)]
pub struct Args {
    /// The local trace to ship (native SQLite or DuckDB; `causeway convert` an Ingero DB first).
    #[arg(long)]
    db: PathBuf,
    #[command(flatten)]
    lake: LakeArgs,
    /// The node's name in the fleet (default: the one the trace recorded, `trace --node`).
    #[arg(long)]
    node: Option<String>,
    /// summary (collectives, synchronizing calls, aggregates of everything) or all (every event).
    #[arg(long, default_value = "summary")]
    tier: String,
    /// Events per transaction at most.
    #[arg(long, default_value_t = 50_000)]
    batch: i64,
    /// Ship the raw events of this window too (with --from/--to or --since): a drill-down.
    #[command(flatten)]
    window: WindowArgs,
    /// Keep shipping while the trace is written (every --interval), until its tracer finishes it;
    /// what `trace --ship` runs beside the tracer.
    #[arg(long)]
    follow: bool,
    /// With --follow: also stop when this process (the tracer) is gone.
    #[arg(long, value_name = "PID", requires = "follow")]
    follow_pid: Option<u32>,
    /// With --follow: how often to ship.
    #[arg(long, default_value = "5s")]
    interval: String,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// `--lake` and `--data-path`, shared by every fleet command.
#[derive(clap::Args, Clone)]
pub struct LakeArgs {
    /// The lake's catalog: `postgres:` and a libpq connection string, no password in it (libpq reads
    /// PGPASSWORD or PGPASSFILE; scripts/fleet-catalog.sh prints a new catalog's), or `ducklake:FILE`
    /// for a catalog file (what `causeway merge` writes).
    #[arg(long, env = "CAUSEWAY_LAKE", value_name = "LAKE")]
    pub lake: String,
    /// Where a new lake keeps its Parquet files (a directory or an object-store URL); only needed
    /// by the first shipper, the catalog remembers it.
    #[arg(long, value_name = "DIR")]
    pub data_path: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let lake = LakeSpec::parse(&args.lake.lake)?;
    let opts = ShipOptions {
        node: args.node.clone(),
        tier: Tier::parse(&args.tier)?,
        batch_rows: args.batch,
        data_path: args.lake.data_path.clone(),
        ..Default::default()
    };
    if args.follow {
        return run_follow(&args, &lake, &opts);
    }
    let windowed = args.window.since.is_some() || args.window.from.is_some() || args.window.to.is_some();
    let window = if windowed {
        let store = causeway_backends::open_store(&args.db)?;
        Some(args.window.resolve(store.as_ref(), None)?)
    } else {
        None
    };
    let mut shipper = Shipper::open(&lake, &args.db, &opts)?;
    let report = shipper.ship_all()?;
    let window_events = match window {
        Some(w) => Some(
            shipper.ship_window(w.from_ns.unwrap_or(i64::MIN), w.to_ns.map_or(i64::MAX, |t| t.saturating_add(1)))?,
        ),
        None => None,
    };
    if args.json {
        let mut v = serde_json::to_value(&report)?;
        v["window_events"] = serde_json::json!(window_events);
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(0);
    }
    let rows: Vec<String> = report.rows.iter().map(|(t, n)| format!("{n} {t}")).collect();
    println!(
        "shipped {} (node {}, trace {}, tier {}): {} in {} transaction(s); the lake has events up to id {} of {}",
        args.db.display(),
        report.node,
        report.trace_uid,
        report.tier,
        if rows.is_empty() { "nothing new".to_string() } else { rows.join(", ") },
        report.flushes,
        report.shipped.events,
        report.local.events
    );
    if let (Some(o), Some(e)) = (report.clock_offset_ns, report.clock_error_ns) {
        println!("clock: the catalog's clock is {} ahead of this host's (± {})", signed(o), fmt_ns(e));
    }
    if let Some(n) = window_events {
        println!("window: {n} raw events added for the drill-down");
    }
    Ok(0)
}

/// `+1.20 ms` / `-3.00 ms`.
pub fn signed(ns: i64) -> String {
    if ns < 0 {
        format!("-{}", fmt_ns(-ns))
    } else {
        format!("+{}", fmt_ns(ns))
    }
}

/// `trace --ship LAKE` and its companions.
#[derive(clap::Args, Clone)]
pub struct TraceShipArgs {
    /// Ship the trace into this lake while tracing (see `causeway ship`); the local trace keeps
    /// everything whatever happens to the lake, and `causeway ship` resumes where this stopped.
    #[arg(long, value_name = "LAKE")]
    pub ship: Option<String>,
    /// With --ship: where a new lake keeps its Parquet files.
    #[arg(long, value_name = "DIR", requires = "ship")]
    pub ship_data_path: Option<PathBuf>,
    /// With --ship: summary or all.
    #[arg(long, default_value = "summary", requires = "ship")]
    pub ship_tier: String,
    /// With --ship: how often to ship.
    #[arg(long, default_value = "5s", requires = "ship")]
    pub ship_interval: String,
}

/// `trace --ship`: a `causeway ship --follow` process beside the tracer. A process of its own, not
/// a thread: the shipper reads the SQLite trace with DuckDB's SQLite, and two SQLite libraries on
/// one file in one process break each other's POSIX locks.
pub struct LiveShip {
    child: std::process::Child,
}

impl LiveShip {
    /// Start shipping `db` (a SQLite trace being written) if `--ship` was given.
    pub fn start(args: &TraceShipArgs, db: &std::path::Path, node: &str) -> anyhow::Result<Option<LiveShip>> {
        let Some(lake) = &args.ship else { return Ok(None) };
        LakeSpec::parse(lake)?;
        Tier::parse(&args.ship_tier)?;
        causeway_model::time::parse_duration_ns(&args.ship_interval)
            .map_err(|e| anyhow::anyhow!("--ship-interval: {e}"))?;
        let mut cmd = std::process::Command::new(std::env::current_exe()?);
        cmd.arg("ship")
            .arg("--db")
            .arg(db)
            .args(["--lake", lake, "--node", node, "--tier", &args.ship_tier, "--interval", &args.ship_interval])
            .args(["--follow", "--follow-pid", &std::process::id().to_string()])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null());
        if let Some(d) = &args.ship_data_path {
            cmd.arg("--data-path").arg(d);
        }
        Ok(Some(LiveShip { child: cmd.spawn()? }))
    }

    /// After the trace finished: let the shipper ship the rest (it says how far it got).
    pub fn finish(mut self, db: &std::path::Path) {
        let deadline = std::time::Instant::now() + FINISH_WAIT;
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) => return,
                Ok(None) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(100))
                }
                _ => break,
            }
        }
        eprintln!(
            "causeway: ship: still shipping after {} s (pid {}); it goes on in the background, and \
             `causeway ship --db {}` resumes whatever it leaves",
            FINISH_WAIT.as_secs(),
            self.child.id(),
            db.display()
        );
    }
}

/// How long `trace --ship` waits at the end for the shipper to ship the rest.
const FINISH_WAIT: std::time::Duration = std::time::Duration::from_secs(120);

/// Whether process `pid` is alive.
fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// `ship --follow`: ship while the trace is written, until it is finished (or its tracer is gone).
fn run_follow(args: &Args, lake: &LakeSpec, opts: &ShipOptions) -> anyhow::Result<i32> {
    let interval =
        causeway_model::time::parse_duration_ns(&args.interval).map_err(|e| anyhow::anyhow!("--interval: {e}"))?;
    let interval = std::time::Duration::from_nanos(interval.max(1_000_000) as u64);
    let tracer_gone = || args.follow_pid.is_some_and(|p| !alive(p));
    let mut last_error = String::new();
    let mut warn = |e: &causeway_fleet::FleetError| {
        let msg = e.to_string();
        if msg != last_error {
            eprintln!(
                "causeway: ship: {msg} (the local trace keeps everything; retrying every {})",
                fmt_ns(interval.as_nanos() as i64)
            );
            last_error = msg;
        }
    };
    // the trace may not be written yet, the lake may be down: keep trying while the tracer runs
    let mut shipper = loop {
        match Shipper::open(lake, &args.db, opts) {
            Ok(s) => break s,
            Err(e) if !tracer_gone() => {
                warn(&e);
                std::thread::sleep(interval);
            }
            Err(e) => return Err(e.into()),
        }
    };
    let mut stop = |s: &Shipper| tracer_gone() || s.trace_finished().unwrap_or(false);
    match shipper.ship_live(interval, &mut stop, &mut warn) {
        Ok(r) => {
            eprintln!(
                "causeway: shipped to the lake as node {} in {} transactions ({} events of {}){}",
                r.node,
                r.flushes,
                r.shipped.events,
                r.local.events,
                if r.unshipped_events() > 0 {
                    format!(
                        "; {} not shipped yet: `causeway ship --db {}` resumes",
                        r.unshipped_events(),
                        args.db.display()
                    )
                } else {
                    String::new()
                }
            );
            Ok(0)
        }
        Err(e) => {
            eprintln!(
                "causeway: ship: {e}; the trace is whole locally: `causeway ship --db {}` ships what the lake lacks",
                args.db.display()
            );
            Ok(1)
        }
    }
}
