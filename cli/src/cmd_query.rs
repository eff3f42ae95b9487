//! `causeway query`: run the SQL it is given, read-only, through the SQL guard, with a row cap and a
//! timeout; print a table or `{"columns", "rows", "truncated"}`.

use std::path::PathBuf;

use causeway_backends::QueryLimits;

use crate::table::Table;

#[derive(clap::Args)]
pub struct Args {
    /// Trace database.
    #[arg(long)]
    db: PathBuf,
    /// Print `{"columns": [...], "rows": [[...]], "truncated": bool}`.
    #[arg(long)]
    json: bool,
    /// Row cap (at most 10000).
    #[arg(long, default_value_t = 1000)]
    limit: usize,
    /// Time limit, e.g. 30s.
    #[arg(long, default_value = "30s")]
    timeout: String,
    /// The SQL (one read-only statement).
    sql: String,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let store = causeway_backends::open_store(&args.db)?;
    let timeout_ns = causeway_model::time::parse_duration_ns(&args.timeout).map_err(anyhow::Error::msg)?;
    let limits =
        QueryLimits { timeout_ms: (timeout_ns / 1_000_000).max(1) as u64, ..QueryLimits::with_rows(args.limit) };
    let result = store.query(&args.sql, &limits)?;
    if args.json {
        println!("{}", serde_json::to_string(&result)?);
        return Ok(0);
    }
    print_table(&result);
    Ok(0)
}

/// A query's rows as a table, with the row count and whether it was cut.
pub fn print_table(result: &causeway_backends::QueryResult) {
    let headers: Vec<&str> = result.columns.iter().map(String::as_str).collect();
    let mut t = Table::new(&headers);
    for r in &result.rows {
        t.row(
            r.iter()
                .map(|v| match v {
                    serde_json::Value::String(s) => s.clone(),
                    serde_json::Value::Null => "NULL".into(),
                    other => other.to_string(),
                })
                .collect(),
        );
    }
    print!("{}", t.render());
    println!(
        "({} row{}{})",
        result.rows.len(),
        if result.rows.len() == 1 { "" } else { "s" },
        if result.truncated { ", truncated: raise --limit or narrow the query" } else { "" }
    );
}
