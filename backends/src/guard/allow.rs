//! The allow-lists of the SQL guard, per engine: the functions a query may call, the table-valued
//! functions it may read from, and the read-only pragmas behind SQLite's `pragma_*` table functions.
//!
//! Everything not listed here is refused, both by the AST check and (for SQLite) by the engine's
//! authorizer. Names are compared case-insensitively. Lists are sorted so refusal messages can
//! print them as they are.

use super::Engine;

/// SQLite scalar, aggregate and window functions that read nothing but their arguments.
///
/// Not here on purpose: `load_extension`, `readfile`, `writefile`, `edit`, `fts3_tokenizer`,
/// `sqlite_compileoption_*`, `sqlite_offset`, `changes`, `total_changes`, `last_insert_rowid`,
/// `random`/`randomblob` (results must be reproducible), and anything an extension could register.
#[rustfmt::skip]
const SQLITE_FUNCTIONS: &[&str] = &[
    "abs", "avg", "char", "coalesce", "concat", "concat_ws", "count", "cume_dist", "current_date",
    "current_time", "current_timestamp", "date", "datetime", "dense_rank", "first_value", "format", "glob",
    "group_concat", "hex", "ifnull", "iif", "instr", "json", "json_array", "json_array_length",
    "json_error_position", "json_extract", "json_group_array", "json_group_object", "json_insert",
    "json_object", "json_patch", "json_pretty", "json_quote", "json_remove", "json_replace", "json_set",
    "json_type", "json_valid", "jsonb", "jsonb_array", "jsonb_extract", "jsonb_group_array",
    "jsonb_group_object", "jsonb_insert", "jsonb_object", "jsonb_patch", "jsonb_remove", "jsonb_replace",
    "jsonb_set", "julianday", "lag", "last_value", "lead", "length", "like", "likelihood", "likely", "lower",
    "ltrim", "max", "min", "nth_value", "ntile", "nullif", "octet_length", "percent_rank", "printf", "quote",
    "rank", "replace", "round", "row_number", "rtrim", "sign", "soundex", "sqlite_version", "strftime",
    "string_agg", "substr", "substring", "sum", "time", "timediff", "total", "trim", "typeof", "unhex",
    "unicode", "unistr", "unixepoch", "unlikely", "upper",
];

/// Functions SQLite's authorizer reports for operators, not for calls: `a -> b`, `a ->> b`.
const SQLITE_OPERATOR_FUNCTIONS: &[&str] = &["->", "->>"];

/// SQLite table-valued functions a query may read from.
#[rustfmt::skip]
const SQLITE_TABLE_FUNCTIONS: &[&str] = &[
    "json_each", "json_tree", "pragma_foreign_key_list", "pragma_index_info", "pragma_index_list",
    "pragma_index_xinfo", "pragma_table_info", "pragma_table_xinfo",
];

/// The pragmas behind the allowed `pragma_*` table functions (all of them read-only).
const SQLITE_PRAGMAS: &[&str] =
    &["foreign_key_list", "index_info", "index_list", "index_xinfo", "table_info", "table_xinfo"];

/// DuckDB functions that compute on their arguments only (no files, no settings, no catalogs).
#[rustfmt::skip]
const DUCKDB_FUNCTIONS: &[&str] = &[
    "abs", "any_value", "approx_count_distinct", "approx_quantile", "arg_max", "arg_min", "array_agg",
    "array_length", "avg", "bit_and", "bit_or", "bool_and", "bool_or", "cardinality", "cast", "ceil", "ceiling",
    "coalesce", "concat", "concat_ws", "contains", "corr", "count", "count_star", "covar_pop", "covar_samp",
    "cume_dist", "date_diff", "date_part", "date_trunc", "datediff", "datepart", "datetrunc", "dense_rank",
    "epoch", "epoch_ms", "epoch_ns", "epoch_us", "exp", "extract", "first", "first_value", "floor", "format",
    "greatest", "hash", "histogram", "if", "ifnull", "iif", "instr", "json", "json_array", "json_array_length",
    "json_extract", "json_extract_path", "json_extract_path_text", "json_extract_string", "json_group_array",
    "json_group_object", "json_keys", "json_object", "json_type", "json_valid", "json_value", "lag", "last",
    "last_value", "lead", "least", "left", "len", "length", "list", "list_aggregate", "list_contains",
    "list_distinct", "list_extract", "list_filter", "list_sort", "list_transform", "list_value", "ln", "log",
    "log10", "log2", "lower", "lpad", "ltrim", "make_timestamp", "max", "max_by", "md5", "mean", "median",
    "min", "min_by", "mode", "now", "nth_value", "ntile", "nullif", "percent_rank", "position", "pow", "power",
    "printf", "quantile", "quantile_cont", "quantile_disc", "rank", "regexp_extract", "regexp_matches",
    "regexp_replace", "repeat", "replace", "reverse", "right", "round", "row_number", "rpad", "rtrim", "sign",
    "split_part", "sqrt", "starts_with", "stddev", "stddev_pop", "stddev_samp", "strftime", "string_agg",
    "string_split", "strlen", "strptime", "struct_extract", "struct_pack", "substr", "substring", "sum",
    "time_bucket", "to_timestamp", "trim", "trunc", "typeof", "unnest", "upper", "var_pop", "var_samp",
    "variance",
];

/// DuckDB table functions that generate rows from their arguments alone.
const DUCKDB_TABLE_FUNCTIONS: &[&str] = &["generate_series", "range", "unnest"];

/// Functions every engine refuses with a specific reason (looked up before the allow-list, for the
/// message: the allow-list alone already refuses them).
pub(crate) const KNOWN_DANGEROUS: &[(&str, &str)] = &[
    ("load_extension", "it loads native code into the server"),
    ("readfile", "it reads files from the server's disk"),
    ("writefile", "it writes files on the server's disk"),
    ("edit", "it starts an editor on the server"),
    ("fts3_tokenizer", "it can register native code pointers"),
    ("read_csv", "it reads files"),
    ("read_csv_auto", "it reads files"),
    ("read_parquet", "it reads files"),
    ("parquet_scan", "it reads files"),
    ("read_json", "it reads files"),
    ("read_json_auto", "it reads files"),
    ("read_ndjson", "it reads files"),
    ("read_text", "it reads files"),
    ("read_blob", "it reads files"),
    ("glob", "with DuckDB it lists files (SQLite's glob(pattern, text) is allowed)"),
    ("sqlite_scan", "it reads other database files"),
    ("sqlite_attach", "it attaches other database files"),
    ("postgres_scan", "it connects to other databases"),
    ("query_table", "it resolves table names at run time"),
    ("current_setting", "it reads server settings"),
    ("getenv", "it reads the server's environment"),
    ("dbstat", "it reads raw database pages"),
    ("sqlite_dbpage", "it reads and writes raw database pages"),
];

pub(crate) fn functions(engine: Engine) -> &'static [&'static str] {
    match engine {
        Engine::Sqlite => SQLITE_FUNCTIONS,
        Engine::DuckDb => DUCKDB_FUNCTIONS,
    }
}

pub(crate) fn table_functions(engine: Engine) -> &'static [&'static str] {
    match engine {
        Engine::Sqlite => SQLITE_TABLE_FUNCTIONS,
        Engine::DuckDb => DUCKDB_TABLE_FUNCTIONS,
    }
}

fn contains(list: &[&str], name: &str) -> bool {
    list.iter().any(|x| x.eq_ignore_ascii_case(name))
}

/// May a query call the function `name` (scalar, aggregate or window)?
pub(crate) fn function_allowed(engine: Engine, name: &str) -> bool {
    contains(functions(engine), name)
}

/// May a query read from the table-valued function `name`?
pub(crate) fn table_function_allowed(engine: Engine, name: &str) -> bool {
    contains(table_functions(engine), name)
}

/// May SQLite's authorizer let this function through (calls and operator functions)?
pub(crate) fn sqlite_engine_function_allowed(name: &str) -> bool {
    contains(SQLITE_FUNCTIONS, name) || contains(SQLITE_OPERATOR_FUNCTIONS, name)
}

/// May SQLite's authorizer let this pragma run (only the read-only ones behind table functions)?
pub(crate) fn sqlite_pragma_allowed(name: &str) -> bool {
    contains(SQLITE_PRAGMAS, name)
}

/// Functions that turn a short literal into a long value (a width, a repeated replacement, a
/// doubling): SQLite evaluates constant calls once and keeps every result for the whole statement,
/// so their number is capped by the AST check.
pub(crate) fn amplifies(name: &str) -> bool {
    contains(&["format", "hex", "json_pretty", "lpad", "printf", "quote", "repeat", "replace", "rpad"], name)
}

/// What to write instead of a function SQLite does not have (for refusal messages).
pub(crate) fn sqlite_hint(name: &str) -> Option<&'static str> {
    let n = name.to_ascii_lowercase();
    if n.starts_with("percentile") || n.starts_with("quantile") || n == "median" {
        Some(
            "for a nearest-rank percentile p, number the rows with ROW_NUMBER() OVER (ORDER BY x) AS rn and \
              COUNT(*) OVER () AS n, then keep rn = CAST((n * p + 99) / 100 AS INTEGER)",
        )
    } else if ["stddev", "stddev_pop", "stddev_samp", "variance", "var_pop", "var_samp"].contains(&n.as_str()) {
        Some("compute the variance as avg(x * x) - avg(x) * avg(x) (this SQLite has no math functions)")
    } else if ["sqrt", "pow", "power", "exp", "ln", "log", "log2", "log10", "ceil", "ceiling", "floor"]
        .contains(&n.as_str())
    {
        Some("this SQLite has no math functions: use round(), CAST(x AS INTEGER) or compute it from the rows")
    } else if ["regexp", "regexp_like", "regexp_matches"].contains(&n.as_str()) {
        Some("use LIKE or glob(pattern, text)")
    } else {
        None
    }
}

/// The specific reason a function is dangerous, if it is a well-known one.
pub(crate) fn danger(engine: Engine, name: &str) -> Option<&'static str> {
    if engine == Engine::Sqlite && name.eq_ignore_ascii_case("glob") {
        return None;
    }
    KNOWN_DANGEROUS.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, why)| *why)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_are_sorted_lowercase_and_free_of_dangerous_names() {
        for list in [SQLITE_FUNCTIONS, DUCKDB_FUNCTIONS, SQLITE_TABLE_FUNCTIONS, DUCKDB_TABLE_FUNCTIONS] {
            let mut sorted = list.to_vec();
            sorted.sort();
            assert_eq!(sorted, list.to_vec(), "keep allow-lists sorted");
            assert!(list.iter().all(|n| n.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')));
        }
        for (name, _) in KNOWN_DANGEROUS {
            for engine in [Engine::Sqlite, Engine::DuckDb] {
                if danger(engine, name).is_some() {
                    assert!(!function_allowed(engine, name), "{name} allowed on {engine:?}");
                    assert!(!table_function_allowed(engine, name), "{name} table fn on {engine:?}");
                }
            }
        }
        assert!(function_allowed(Engine::Sqlite, "JSON_EXTRACT"));
        assert!(!function_allowed(Engine::Sqlite, "load_extension"));
        assert!(sqlite_engine_function_allowed("->>"));
        assert!(!sqlite_pragma_allowed("writable_schema"));
    }
}
