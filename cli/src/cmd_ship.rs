//! `causeway ship`: copy a trace into a fleet lake, exactly once; run it again to ship what was
//! added since (a trace still being written), or with `--from/--to` to add a window of raw events
//! for a drill-down. See `causeway-fleet`.
//!
//! A lake that fails transiently (the catalog restarting, a dropped connection, a commit conflict)
//! is waited out with backoff for `--retry-for`; past it the command prints one line saying what the
//! lake lacks and the command that ships it, and exits [`EXIT_BEHIND`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use causeway_fleet::{Behind, FleetError, LakeSpec, ShipOptions, Shipper, Tier};
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
    /// How long to wait out a lake that fails transiently (the catalog server restarting or
    /// unreachable, a dropped connection, a commit conflict), retrying with backoff, before giving
    /// up: then one line says what the lake lacks and how to ship it, and the exit status is 3.
    /// With --follow, flushes while the trace grows are retried for as long as it grows; this
    /// bounds the final one.
    #[arg(long, value_name = "DURATION", default_value = "2m")]
    retry_for: String,
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

/// The exit status of a ship that left the lake behind the local trace (the trace itself is whole).
pub const EXIT_BEHIND: i32 = 3;

/// A `--retry-for` / `--ship-retry-for` value.
fn retry_bound(flag: &str, text: &str) -> anyhow::Result<Duration> {
    let ns = causeway_model::time::parse_duration_ns(text).map_err(|e| anyhow::anyhow!("{flag}: {e}"))?;
    Ok(Duration::from_nanos(ns.max(0) as u64))
}

/// The one line a ship that gave up prints: what the lake lacks, why, and the command that ships it.
fn behind_line(b: &Behind, db: &Path, lake: &str) -> String {
    format!(
        "causeway: ship: not shipped: {b}; the trace is whole locally: `causeway ship --db {} --lake '{lake}'` \
         ships what the lake lacks",
        db.display()
    )
}

/// Tell a transient lake error being waited out (each distinct one once).
fn retry_notice(last: &mut String, e: &FleetError, wait: Duration) {
    let msg = e.to_string();
    if msg != *last {
        eprintln!(
            "causeway: ship: {msg} (the local trace keeps everything; retrying, next in {})",
            fmt_ns(wait.as_nanos() as i64)
        );
        *last = msg;
    }
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let lake = LakeSpec::parse(&args.lake.lake)?;
    let opts = ShipOptions {
        node: args.node.clone(),
        tier: Tier::parse(&args.tier)?,
        batch_rows: args.batch,
        data_path: args.lake.data_path.clone(),
        retry_for: retry_bound("--retry-for", &args.retry_for)?,
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
    let mut last = String::new();
    let mut notice = |e: &FleetError, wait: Duration| retry_notice(&mut last, e, wait);
    let opened =
        causeway_fleet::retry::retry_transient(opts.retry_for, &mut notice, || Shipper::open(&lake, &args.db, &opts));
    let mut shipper = match opened {
        Ok(s) => s,
        Err(e) if causeway_fleet::is_transient(&e) => {
            eprintln!(
                "causeway: ship: not shipped: the lake did not answer for {} ({e}); the trace is whole locally: \
                 run this command again when the catalog is back",
                args.retry_for
            );
            return Ok(EXIT_BEHIND);
        }
        Err(e) => return Err(e.into()),
    };
    let report = match shipper.ship_all_with(&mut notice) {
        Ok(r) => r,
        Err(FleetError::Behind(b)) => {
            eprintln!("{}", behind_line(&b, &args.db, &args.lake.lake));
            return Ok(EXIT_BEHIND);
        }
        Err(e) => return Err(e.into()),
    };
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
    /// With --ship: how long the final flush waits out a lake that fails transiently (the catalog
    /// restarting, a dropped connection, a commit conflict), retrying with backoff. Past it one
    /// line says what the lake lacks and how to ship it, and `trace` exits 3 (the local trace is
    /// whole). Flushes while tracing are retried for as long as the trace runs.
    #[arg(long, value_name = "DURATION", default_value = "2m", requires = "ship")]
    pub ship_retry_for: String,
}

/// `trace --ship`: a `causeway ship --follow` process beside the tracer. A process of its own, not
/// a thread: the shipper reads the SQLite trace with DuckDB's SQLite, and two SQLite libraries on
/// one file in one process break each other's POSIX locks.
pub struct LiveShip {
    child: std::process::Child,
    /// How long to wait for it at the end: its retry bound and time to ship the rest.
    wait: Duration,
}

impl LiveShip {
    /// Start shipping `db` (a SQLite trace being written) if `--ship` was given.
    pub fn start(args: &TraceShipArgs, db: &std::path::Path, node: &str) -> anyhow::Result<Option<LiveShip>> {
        let Some(lake) = &args.ship else { return Ok(None) };
        LakeSpec::parse(lake)?;
        Tier::parse(&args.ship_tier)?;
        causeway_model::time::parse_duration_ns(&args.ship_interval)
            .map_err(|e| anyhow::anyhow!("--ship-interval: {e}"))?;
        let retry_for = retry_bound("--ship-retry-for", &args.ship_retry_for)?;
        let mut cmd = std::process::Command::new(std::env::current_exe()?);
        cmd.arg("ship")
            .arg("--db")
            .arg(db)
            .args(["--lake", lake, "--node", node, "--tier", &args.ship_tier, "--interval", &args.ship_interval])
            .args(["--follow", "--follow-pid", &std::process::id().to_string()])
            .args(["--retry-for", &args.ship_retry_for])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null());
        if let Some(d) = &args.ship_data_path {
            cmd.arg("--data-path").arg(d);
        }
        Ok(Some(LiveShip { child: cmd.spawn()?, wait: retry_for + FINISH_WAIT }))
    }

    /// After the trace finished: let the shipper ship the rest (it says how far it got). Whether
    /// the lake has the whole trace: `false` when the shipper gave up (it printed what the lake
    /// lacks) or still ships after the wait.
    pub fn finish(mut self, db: &std::path::Path) -> bool {
        let deadline = std::time::Instant::now() + self.wait;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return status.success(),
                Ok(None) if std::time::Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
                _ => break,
            }
        }
        eprintln!(
            "causeway: ship: not shipped yet: still shipping after {} s (pid {}); it goes on in the background, and \
             `causeway ship --db {}` ships whatever it leaves",
            self.wait.as_secs(),
            self.child.id(),
            db.display()
        );
        false
    }
}

/// How long `trace --ship` waits at the end, beyond the retry bound, for the shipper to ship the
/// rest.
const FINISH_WAIT: Duration = Duration::from_secs(120);

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
    let mut warn = |e: &FleetError| {
        let msg = e.to_string();
        if msg != last_error {
            eprintln!(
                "causeway: ship: {msg} (the local trace keeps everything; retrying every {})",
                fmt_ns(interval.as_nanos() as i64)
            );
            last_error = msg;
        }
    };
    // the trace may not be written yet, the lake may be down: keep trying while the tracer runs,
    // then for the retry bound if the lake is what fails
    let mut shipper = loop {
        match Shipper::open(lake, &args.db, opts) {
            Ok(s) => break s,
            Err(e) if !tracer_gone() => {
                warn(&e);
                std::thread::sleep(interval);
            }
            Err(e) if causeway_fleet::is_transient(&e) => {
                let mut last = String::new();
                let mut notice = |e: &FleetError, wait: Duration| retry_notice(&mut last, e, wait);
                match causeway_fleet::retry::retry_transient(opts.retry_for, &mut notice, || {
                    Shipper::open(lake, &args.db, opts)
                }) {
                    Ok(s) => break s,
                    Err(e) => {
                        eprintln!(
                            "causeway: ship: not shipped: the lake did not answer ({e}); the trace is whole locally: \
                             `causeway ship --db {} --lake '{}'` ships it",
                            args.db.display(),
                            args.lake.lake
                        );
                        return Ok(EXIT_BEHIND);
                    }
                }
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
        Err(FleetError::Behind(b)) => {
            eprintln!("{}", behind_line(&b, &args.db, &args.lake.lake));
            Ok(EXIT_BEHIND)
        }
        Err(e) => {
            eprintln!(
                "causeway: ship: not shipped: {e}; the trace is whole locally: `causeway ship --db {}` ships what the \
                 lake lacks",
                args.db.display()
            );
            Ok(1)
        }
    }
}
