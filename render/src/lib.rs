//! Pictures of a trace for people: a causal chain's evidence as an SVG timeline
//! ([`chain_picture`]), an op's latency histogram ([`latency_histogram`]) and the self-contained
//! HTML incident report that holds them ([`html_report`]).
//!
//! Everything drawn is read from the trace through the storage traits and the analysis (the same
//! chains and nearest-rank figures `explain` and `stats` print); the SVG is built as elements with
//! the `svg` crate, and every coordinate comes from one of the two scales in `scale`.
//! Elements carry classes (`call`, `off-cpu preempted`, `culprit`, `evidence`, `bin`,
//! `device-busy`, `device-idle`) and `data-event-id` attributes, so a reader, a browser test or an
//! agent can find what a picture shows.

mod chain_picture;
mod device_lane;
mod device_section;
mod histogram;
mod html;
mod palette;
mod scale;

pub use chain_picture::{chain_picture, ChainPicture};
pub use histogram::{latency_histogram, Histogram};
pub use html::{html_report, html_report_priced, HtmlReport};

/// Why a picture could not be made.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// Reading the trace failed.
    #[error(transparent)]
    Store(#[from] causeway_store::StoreError),
    /// The analysis behind the picture failed.
    #[error(transparent)]
    Analysis(#[from] causeway_analysis::AnalysisError),
}
