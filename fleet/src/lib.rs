//! The fleet: many hosts' traces in one lake, and the questions only a fleet answers.
//!
//! The engine is DuckLake: a PostgreSQL catalog (`scripts/fleet-catalog.sh`), Parquet data under a
//! data path, DuckDB as the query engine (DuckDB 1.5.5 with the `ducklake`, `postgres_scanner` and
//! `sqlite_scanner` extensions, loaded from files with the signature check on). Causeway writes no
//! engine of its own: only
//!
//! - [`Shipper`] (`ship.rs`): a local trace into the lake, exactly once (rows and watermark in one
//!   transaction), in tiers, with clock samples at each flush;
//! - the lake's tables (`schema.rs`): the local tables mirrored with `node` and `trace_uid`, and
//!   the fleet's own (watermarks, clocks, aggregates);
//! - [`Fleet`] (`analyses.rs`): the cross-host analyses as SQL over the lake (clock alignment in
//!   views, per-rank waits, nodes) and the stragglers per collective with episodes
//!   (`stragglers.rs`), read from the per-collective summaries `maintain` keeps (`summaries.rs`)
//!   where it can;
//! - [`FleetCosts`] (`costs.rs`): what the stragglers and hangs cost, per node and per job;
//! - [`node_store`] (`store.rs`): one node's trace in the lake as a `TraceStore`, so every
//!   per-host analysis runs on it unchanged;
//! - [`maintain`]: the lake's housekeeping through DuckLake's own procedures;
//! - [`retry`]: which lake errors pass by themselves, waited out with backoff for a bounded time;
//! - [`lake`]: the `--lake` string, the extension files, attaching to ship or to serve.
//!
//! The local trace stays each host's source of truth; nothing here rewrites a stored timestamp.

mod aligned;
mod analyses;
pub mod clock;
mod costs;
mod hangs;
pub mod lake;
mod local;
mod maintain;
mod progress;
mod reader;
pub mod retry;
mod schema;
mod ship;
mod small_tables;
mod store;
mod stragglers;
mod summaries;
mod tier;

pub use aligned::align_views;
pub use analyses::{
    query, sync_predicate, Fleet, NodeClock, NodeOp, NodeSummary, RankWait, OUTLIER_MIN_CALLS, OUTLIER_RATIO,
};
pub use costs::{hang_cost, CostTotal, FleetCosts};
pub use hangs::{CallInFlight, FleetHang, RankState};
pub use lake::{connect, Access, LakeSpec};
pub use local::node_and_host;
pub use maintain::{maintain, MaintainStep};
pub use progress::TraceBehind;
pub use reader::LakeReader;
pub use retry::{is_transient, DEFAULT_RETRY_FOR};
pub use schema::{FLEET_DDL, MIRRORED, TABLE_DOCS};
pub use ship::{Behind, Marks, ShipOptions, ShipReport, Shipper, TEST_PAUSE_ENV};
pub use store::{latest_node_store, node_store, node_traces};
pub use stragglers::{Episode, FleetStraggler};
pub use summaries::Summarized;
pub use tier::{summary_predicate, Tier};

/// What can go wrong in the fleet, worded for the person who can fix it.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// The `--lake` string (or a ship option) is not usable.
    #[error("{0}")]
    BadLake(String),
    /// The DuckDB extension files are not installed.
    #[error("{0}")]
    Extensions(String),
    /// The catalog cannot be reached or refused us.
    #[error("{0}")]
    Unreachable(String),
    /// The local trace cannot be shipped.
    #[error("{0}")]
    Local(String),
    /// The lake holds nothing to answer with yet.
    #[error("{0}")]
    Empty(String),
    /// The SQL guard refused a query (what and why, and what is allowed).
    #[error("refused: {0}")]
    Refused(String),
    /// DuckDB (or DuckLake through it) failed.
    #[error("{0}")]
    Engine(String),
    /// A trace's final flushes failed (a transient error retried for the bound, or a lasting one):
    /// what the lake lacks of it.
    #[error("{0}")]
    Behind(Box<Behind>),
}

impl From<duckdb::Error> for FleetError {
    fn from(e: duckdb::Error) -> Self {
        FleetError::Engine(e.to_string())
    }
}
