//! The schema description of a live DuckDB trace: tables, columns, types and row counts read from
//! DuckDB's catalog, with the meaning of every table, column and code found in it.

use std::collections::BTreeMap;

use causeway_model::codes;

use super::reader::DuckDbStore;
use crate::error::Result;
use crate::schema::{code_name, column_meaning, table_meaning};
use crate::store::*;

pub(super) fn describe(store: &DuckDbStore) -> Result<SchemaDescription> {
    let info = store.info();
    let mut tables = Vec::new();
    for name in &info.tables {
        let quoted = format!("\"{}\"", name.replace('"', "\"\""));
        let columns: Vec<(String, String)> = store.with_conn(|c| {
            c.prepare(
                "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ? AND \
                 table_schema = 'main' AND table_catalog = current_database() ORDER BY ordinal_position",
            )?
            .query_map([name], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect()
        })?;
        let rows: i64 = if name == "events" {
            info.events as i64
        } else {
            store.with_conn(|c| c.query_row(&format!("SELECT count(*) FROM {quoted}"), [], |r| r.get(0)))?
        };
        tables.push(TableDescription {
            name: name.clone(),
            rows: rows.max(0) as u64,
            meaning: table_meaning(name).to_string(),
            columns: columns
                .into_iter()
                .map(|(cname, ty)| ColumnDescription {
                    meaning: column_meaning(name, &cname).to_string(),
                    name: cname,
                    sql_type: ty,
                })
                .collect(),
        });
    }
    let present: Vec<(i64, i64, i64)> = store.with_conn(|c| {
        c.prepare("SELECT source, op, count(*) FROM events GROUP BY source, op ORDER BY source, op")?
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
            .collect()
    })?;
    let db_names: BTreeMap<(i64, i64), (String, String)> = if info.has_table("ops") {
        store
            .with_conn(|c| {
                c.prepare("SELECT source_id, op_id, name, description FROM ops")?
                    .query_map([], |r| Ok(((r.get(0)?, r.get(1)?), (r.get(2)?, r.get(3)?))))?
                    .collect::<duckdb::Result<Vec<_>>>()
            })?
            .into_iter()
            .collect()
    } else {
        BTreeMap::new()
    };
    let mut all: BTreeMap<(i64, i64), u64> = present.iter().map(|&(s, o, n)| ((s, o), n as u64)).collect();
    for (s, o, ..) in codes::OPS {
        all.entry((i64::from(*s), i64::from(*o))).or_insert(0);
    }
    let codes_out = all
        .into_iter()
        .map(|((s, o), events)| {
            let (source, op) = (s as u8, o as u16);
            let built_in = codes::OPS.iter().any(|e| e.0 == source && e.1 == op);
            let (name, meaning) = match (built_in, db_names.get(&(s, o))) {
                (false, Some((n, d))) => (n.clone(), d.clone()),
                _ => (code_name(source, op), codes::op_description(source, op).to_string()),
            };
            CodeDescription { source, source_name: codes::source_name(source).into_owned(), op, name, meaning, events }
        })
        .collect();
    let mut notes = vec![
        "timestamps are unix-epoch ns; durations ns; order by timestamp, then id".to_string(),
        "sched_switch rows: timestamp = switch-in, off-CPU interval = [timestamp - duration, timestamp]".into(),
        "join ops with: JOIN ops o ON o.source_id = events.source AND o.op_id = events.op".into(),
        "engine DuckDB: integer division is //, percentiles: quantile_disc takes a float fraction and is not guaranteed to be nearest-rank; use \
         list_sort(list(x))[greatest(1, (p * count(*) + 99) // 100)] for nearest-rank p (percent)"
            .into(),
    ];
    if info.sampled {
        notes.push("events is a sample (Ingero selective storage): true totals are in event_aggregates".into());
    }
    notes.extend(info.missing.iter().map(|m| format!("not recorded in this DB: {m}")));
    Ok(SchemaDescription { format: info.format.clone(), engine: "duckdb".into(), tables, codes: codes_out, notes })
}
